// An async function resumed from the event loop: `resumed` awaits a promise that a
// `setImmediate` callback resolves, then does a slice of CPU work (in its own body, so that no
// other function of the script runs it), again and again until SECONDS (argv[2]) have passed:
// each of its slices runs from a microtask that libuv's loop started.
'use strict';

async function resumed(seconds) {
  const end = Date.now() + seconds * 1000;
  let total = 0;
  while (Date.now() < end) {
    await new Promise((resolve) => setImmediate(resolve));
    for (let i = 0; i < 200000; i++) {
      total = (total * 31 + i) % 1000003;
      total = (total * 37 + i) % 1000003;
      total = (total * 41 + i) % 1000003;
      total = (total * 43 + i) % 1000003;
    }
  }
  return total;
}

resumed(Number(process.argv[2])).then((total) => {
  if (total < 0) console.log(total);
});
