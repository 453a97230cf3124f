// A function deoptimized while it runs hot: `hot` is optimized by TurboFan, then sent back to
// the interpreter each time `drive` moves to the next phase: each phase takes a branch of `hot`
// never taken before, on values of a type its earlier phases never gave it, which its optimized
// code has no feedback for (V8 deoptimizes there, then optimizes it again with what it learnt;
// until it has, each call leaves the optimized code at its end: hundreds or thousands of
// deoptimizations a second, from Node 20). The phases go round, each a tenth of a second,
// until SECONDS (argv[2]) have passed. `hot`'s body is longer than what V8 inlines, so that it
// keeps a frame of its own once optimized; `unused` is never called: its name must never show.
'use strict';

function hot(n, phase, value) {
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
  switch (phase) {
    case 0: return total + value;
    case 1: return total - value;
    case 2: return total * value;
    case 3: return total / value;
    case 4: return total % value;
    case 5: return total ^ value;
    case 6: return total | value;
    case 7: return total & value;
    case 8: return total << value;
    case 9: return total >> value;
    case 10: return total >>> value;
    case 11: return total + value.length;
    case 12: return total - value.size;
    case 13: return total + value[0];
    case 14: return total + value.x;
    default: return total + (value ? 1 : 0);
  }
}

function unused(n) {
  return hot(n, 0, 0) + hot(n, 1, 0);
}

// The values phases give `hot`, by turns: numbers, doubles, strings, objects, arrays, of a type
// `hot` has seen at that point of its code, or not.
const values = [1, 2.5, 3, 1.5, 7, 'x', 2, {}, 3, 4.5, 1, 'abc', new Map(), [1.5], { x: 1 }];

function drive(seconds) {
  const end = Date.now() + seconds * 1000;
  let sink = 0;
  for (let round = 0; Date.now() < end; round++) {
    for (let phase = 0; phase < 16 && Date.now() < end; phase++) {
      const value = values[(phase + round) % values.length];
      const phaseEnd = Date.now() + 100;
      while (Date.now() < phaseEnd) {
        sink += hot(200, phase, value);
      }
    }
  }
  return sink;
}

if (drive(Number(process.argv[2])) === 0.5) console.log(unused(1));
