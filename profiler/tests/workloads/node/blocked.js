// A JavaScript function that blocks its thread: `waiter` waits on a SharedArrayBuffer nobody
// notifies (`Atomics.wait`, 20 ms at a time) until SECONDS (argv[2]) have passed; `spinner`
// (never called while it waits) must not show.
'use strict';

function waiter(seconds) {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const end = Date.now() + seconds * 1000;
  let timeouts = 0;
  while (Date.now() < end) {
    if (Atomics.wait(cell, 0, 0, 20) === 'timed-out') timeouts++;
  }
  return timeouts;
}

function spinner(n) {
  let total = 0;
  for (let i = 0; i < n; i++) total = (total * 31 + i) % 1000003;
  return total;
}

if (waiter(Number(process.argv[2])) < 0) console.log(spinner(10));
