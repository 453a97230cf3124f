"""COUNT (the first argument) processes forked from this one, each spinning in Python for
SECONDS (the second) once all are forked, or until this one is gone: as many Python processes
as a user likes. Prints `ready` once they all spin."""
import os
import sys
import time

COUNT, SECONDS = int(sys.argv[1]), float(sys.argv[2])


def spin(end, parent):
    total = 0
    while time.monotonic() < end and os.getppid() == parent:
        for i in range(1000):
            total += i * i % 7
    return total


# The children wait for the pipe to close (once all are forked) before they spin.
start, go = os.pipe()
parent = os.getpid()
children = []
for _ in range(COUNT):
    pid = os.fork()
    if pid == 0:
        os.close(go)
        os.read(start, 1)
        spin(time.monotonic() + SECONDS, parent)
        os._exit(0)
    children.append(pid)
os.close(go)
print("ready", flush=True)
for pid in children:
    os.waitpid(pid, 0)
