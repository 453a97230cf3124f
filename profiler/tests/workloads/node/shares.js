// alpha, beta and gamma take 60%, 30% and 10% of the work, each round calling them with 6, 3
// and 1 times the same, until SECONDS (the first argument) have passed. Their bodies are longer
// than what V8 inlines, so each keeps a frame of its own once optimized.
'use strict';

function alpha(n) {
  let total = 0;
  for (let i = 0; i < n; i++) {
    total = (total * 31 + i) % 1000003;
    total = (total * 32 + i) % 1000003;
    total = (total * 33 + i) % 1000003;
    total = (total * 34 + i) % 1000003;
    total = (total * 35 + i) % 1000003;
    total = (total * 36 + i) % 1000003;
    total = (total * 37 + i) % 1000003;
    total = (total * 38 + i) % 1000003;
    total = (total * 39 + i) % 1000003;
    total = (total * 40 + i) % 1000003;
    total = (total * 41 + i) % 1000003;
    total = (total * 42 + i) % 1000003;
    total = (total * 43 + i) % 1000003;
    total = (total * 44 + i) % 1000003;
    total = (total * 45 + i) % 1000003;
    total = (total * 46 + i) % 1000003;
    total = (total * 47 + i) % 1000003;
    total = (total * 48 + i) % 1000003;
    total = (total * 49 + i) % 1000003;
    total = (total * 50 + i) % 1000003;
    total = (total * 51 + i) % 1000003;
    total = (total * 52 + i) % 1000003;
    total = (total * 53 + i) % 1000003;
    total = (total * 54 + i) % 1000003;
    total = (total * 55 + i) % 1000003;
    total = (total * 56 + i) % 1000003;
    total = (total * 57 + i) % 1000003;
    total = (total * 58 + i) % 1000003;
    total = (total * 59 + i) % 1000003;
    total = (total * 60 + i) % 1000003;
    total = (total * 61 + i) % 1000003;
    total = (total * 62 + i) % 1000003;
    total = (total * 63 + i) % 1000003;
    total = (total * 64 + i) % 1000003;
    total = (total * 65 + i) % 1000003;
    total = (total * 66 + i) % 1000003;
    total = (total * 67 + i) % 1000003;
    total = (total * 68 + i) % 1000003;
    total = (total * 69 + i) % 1000003;
    total = (total * 70 + i) % 1000003;
    total = (total * 71 + i) % 1000003;
    total = (total * 72 + i) % 1000003;
    total = (total * 73 + i) % 1000003;
    total = (total * 74 + i) % 1000003;
    total = (total * 75 + i) % 1000003;
    total = (total * 76 + i) % 1000003;
    total = (total * 77 + i) % 1000003;
    total = (total * 78 + i) % 1000003;
  }
  return total;
}

function beta(n) {
  let total = 0;
  for (let i = 0; i < n; i++) {
    total = (total * 31 + i) % 1000003;
    total = (total * 32 + i) % 1000003;
    total = (total * 33 + i) % 1000003;
    total = (total * 34 + i) % 1000003;
    total = (total * 35 + i) % 1000003;
    total = (total * 36 + i) % 1000003;
    total = (total * 37 + i) % 1000003;
    total = (total * 38 + i) % 1000003;
    total = (total * 39 + i) % 1000003;
    total = (total * 40 + i) % 1000003;
    total = (total * 41 + i) % 1000003;
    total = (total * 42 + i) % 1000003;
    total = (total * 43 + i) % 1000003;
    total = (total * 44 + i) % 1000003;
    total = (total * 45 + i) % 1000003;
    total = (total * 46 + i) % 1000003;
    total = (total * 47 + i) % 1000003;
    total = (total * 48 + i) % 1000003;
    total = (total * 49 + i) % 1000003;
    total = (total * 50 + i) % 1000003;
    total = (total * 51 + i) % 1000003;
    total = (total * 52 + i) % 1000003;
    total = (total * 53 + i) % 1000003;
    total = (total * 54 + i) % 1000003;
    total = (total * 55 + i) % 1000003;
    total = (total * 56 + i) % 1000003;
    total = (total * 57 + i) % 1000003;
    total = (total * 58 + i) % 1000003;
    total = (total * 59 + i) % 1000003;
    total = (total * 60 + i) % 1000003;
    total = (total * 61 + i) % 1000003;
    total = (total * 62 + i) % 1000003;
    total = (total * 63 + i) % 1000003;
    total = (total * 64 + i) % 1000003;
    total = (total * 65 + i) % 1000003;
    total = (total * 66 + i) % 1000003;
    total = (total * 67 + i) % 1000003;
    total = (total * 68 + i) % 1000003;
    total = (total * 69 + i) % 1000003;
    total = (total * 70 + i) % 1000003;
    total = (total * 71 + i) % 1000003;
    total = (total * 72 + i) % 1000003;
    total = (total * 73 + i) % 1000003;
    total = (total * 74 + i) % 1000003;
    total = (total * 75 + i) % 1000003;
    total = (total * 76 + i) % 1000003;
    total = (total * 77 + i) % 1000003;
    total = (total * 78 + i) % 1000003;
  }
  return total;
}

function gamma(n) {
  let total = 0;
  for (let i = 0; i < n; i++) {
    total = (total * 31 + i) % 1000003;
    total = (total * 32 + i) % 1000003;
    total = (total * 33 + i) % 1000003;
    total = (total * 34 + i) % 1000003;
    total = (total * 35 + i) % 1000003;
    total = (total * 36 + i) % 1000003;
    total = (total * 37 + i) % 1000003;
    total = (total * 38 + i) % 1000003;
    total = (total * 39 + i) % 1000003;
    total = (total * 40 + i) % 1000003;
    total = (total * 41 + i) % 1000003;
    total = (total * 42 + i) % 1000003;
    total = (total * 43 + i) % 1000003;
    total = (total * 44 + i) % 1000003;
    total = (total * 45 + i) % 1000003;
    total = (total * 46 + i) % 1000003;
    total = (total * 47 + i) % 1000003;
    total = (total * 48 + i) % 1000003;
    total = (total * 49 + i) % 1000003;
    total = (total * 50 + i) % 1000003;
    total = (total * 51 + i) % 1000003;
    total = (total * 52 + i) % 1000003;
    total = (total * 53 + i) % 1000003;
    total = (total * 54 + i) % 1000003;
    total = (total * 55 + i) % 1000003;
    total = (total * 56 + i) % 1000003;
    total = (total * 57 + i) % 1000003;
    total = (total * 58 + i) % 1000003;
    total = (total * 59 + i) % 1000003;
    total = (total * 60 + i) % 1000003;
    total = (total * 61 + i) % 1000003;
    total = (total * 62 + i) % 1000003;
    total = (total * 63 + i) % 1000003;
    total = (total * 64 + i) % 1000003;
    total = (total * 65 + i) % 1000003;
    total = (total * 66 + i) % 1000003;
    total = (total * 67 + i) % 1000003;
    total = (total * 68 + i) % 1000003;
    total = (total * 69 + i) % 1000003;
    total = (total * 70 + i) % 1000003;
    total = (total * 71 + i) % 1000003;
    total = (total * 72 + i) % 1000003;
    total = (total * 73 + i) % 1000003;
    total = (total * 74 + i) % 1000003;
    total = (total * 75 + i) % 1000003;
    total = (total * 76 + i) % 1000003;
    total = (total * 77 + i) % 1000003;
    total = (total * 78 + i) % 1000003;
  }
  return total;
}

function round(unit) {
  return alpha(6 * unit) + beta(3 * unit) + gamma(unit);
}

const start = Date.now();
const end = start + Number(process.argv[2]) * 1000;
// With PROGRESS=1, prints "SECONDS ROUNDS" about every 100 ms (the benchmarks read the
// program's speed from it).
const progress = process.env.PROGRESS === '1';
let sink = 0;
let rounds = 0;
let shown = start;
for (let now = start; now < end; now = Date.now()) {
  sink += round(100);
  rounds += 1;
  if (progress && now - shown >= 100) {
    process.stdout.write(`${((now - start) / 1000).toFixed(3)} ${rounds}\n`);
    shown = now;
  }
}
if (sink < 0) console.log(sink);
