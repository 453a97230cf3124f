// JavaScript called back from C: `drive` calls the addon's `callMany` (argv[2], the built
// addon.node), which calls `work` from C, over and over, until SECONDS (argv[3]) have passed.
// `work` does all the CPU work; its body is longer than what V8 inlines.
'use strict';

const addon = require(process.argv[2]);

function work() {
  let total = 0;
  for (let i = 0; i < 20000; i++) {
    total = (total * 31 + i) % 1000003;
    total = (total * 37 + i) % 1000003;
    total = (total * 41 + i) % 1000003;
    total = (total * 43 + i) % 1000003;
    total = (total * 47 + i) % 1000003;
    total = (total * 53 + i) % 1000003;
    total = (total * 59 + i) % 1000003;
    total = (total * 61 + i) % 1000003;
  }
  sink += total;
}

function drive(seconds) {
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    addon.callMany(work, 50);
  }
}

let sink = 0;
drive(Number(process.argv[3]));
if (sink < 0) console.log(sink);
