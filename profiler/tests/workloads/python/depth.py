"""`recurse` calls itself DEPTH times (the second argument, 300 by default: 301 frames of it), then
`spin` burns the CPU at the bottom for SECONDS (the first argument). Prints `main TID` first."""
import sys
import time

from compat import native_id

DEPTH = int(sys.argv[2]) if len(sys.argv) > 2 else 300


def spin(end):
    total = 0
    while time.monotonic() < end:
        for i in range(1000):
            total += i * i % 7
    return total


def recurse(n, end):
    if n == 0:
        return spin(end)
    return recurse(n - 1, end)


print("main", native_id(), flush=True)
recurse(DEPTH, time.monotonic() + float(sys.argv[1]))
