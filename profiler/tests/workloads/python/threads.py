"""Two threads busy for SECONDS (the first argument): `spin` runs Python code, holding the GIL;
`hash_loop` hashes a large buffer with sha256 in a loop, inside OpenSSL with the GIL released.
Prints `spin TID` and `hash_loop TID` as the threads start."""
import hashlib
import os
import sys
import threading
import time

from compat import native_id

BUFFER = bytes(1 << 22)


def say(name):
    """One line, in one write: the threads print at the same time."""
    os.write(1, f"{name} {native_id()}\n".encode())


def spin(end):
    say("spin")
    total = 0
    while time.monotonic() < end:
        for i in range(1000):
            total += i * i % 7
    return total


def hash_loop(end):
    say("hash_loop")
    while time.monotonic() < end:
        hashlib.sha256(BUFFER).digest()


end = time.monotonic() + float(sys.argv[1])
threads = [threading.Thread(target=f, args=(end,)) for f in (spin, hash_loop)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
