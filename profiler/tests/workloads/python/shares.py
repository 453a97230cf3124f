"""alpha, beta and Burner.gamma burn 50%, 30% and 20% of the CPU time of the script: each round
calls them with 5, 3 and 2 units of the same work, until SECONDS (the first argument) have
passed. Prints `main TID` first; with PROGRESS=1 in the environment, also `SECONDS ROUNDS`
about every 100 ms (the benchmarks read its speed from them)."""
import os
import sys
import threading
import time

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


print("main", threading.get_native_id(), flush=True)
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
    alpha(5 * UNIT)
    beta(3 * UNIT)
    burner.gamma(2 * UNIT)
    rounds += 1
