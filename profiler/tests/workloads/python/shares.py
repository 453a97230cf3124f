"""alpha, beta and Burner.gamma burn 50%, 30% and 20% of the CPU time of the script: each round
calls them with 5, 3 and 2 times the same work, until SECONDS (the first argument) have passed.
How much work varies from round to round, so that no sampling period can fall in step with the
rounds (a sampler firing at a fixed point of every round would see one function only). Prints `main TID` first; with PROGRESS=1 in the environment, also `SECONDS ROUNDS`
about every 100 ms (the benchmarks read its speed from them)."""
import os
import random
import sys
import time

from compat import native_id

UNIT = 2000


def alpha(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def beta(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


class Burner:
    def gamma(self, n):
        total = 0
        for i in range(n):
            total += i * i % 7
        return total


print("main", native_id(), flush=True)
progress = os.environ.get("PROGRESS") == "1"
burner = Burner()
start = time.monotonic()
end = start + float(sys.argv[1])
rounds, shown = 0, start
while True:
    now = time.monotonic()
    if now >= end:
        break
    if progress and now - shown >= 0.1:
        print(f"{now - start:.3f} {rounds}", flush=True)
        shown = now
    unit = random.randint(UNIT // 2, UNIT * 3 // 2)
    alpha(5 * unit)
    beta(3 * unit)
    burner.gamma(2 * unit)
    rounds += 1
