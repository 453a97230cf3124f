"""Python that is never the same twice, for SECONDS (the first argument): new functions all the
time, each of a code object of its own with a name and a file name of its own (a few kilobytes
each), each called once, in a chain of DEPTH (the second argument, default 1) such functions,
the innermost spinning a little. Every sample of it finds new code; the last thousand chains
are kept alive (a reader that comes milliseconds later finds their code objects). Prints
`main TID` first."""
import collections
import sys
import threading
import time

DEPTH = int(sys.argv[2]) if len(sys.argv) > 2 else 1


def link(callees, n):
    """Calls the next function of the chain, or spins at its end."""
    if callees:
        return callees[0](callees[1:], n)
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


serial = 0


def fresh():
    """A function of a code object of its own."""
    global serial
    serial += 1
    name = "fresh_%d_%s" % (serial, "n" * 1000)
    file = "/made/up/%d/%s.py" % (serial, "f" * 3000)
    if sys.version_info >= (3, 11):
        code = link.__code__.replace(co_name=name, co_qualname=name, co_filename=file)
    else:
        code = link.__code__.replace(co_name=name, co_filename=file)
    return type(link)(code, globals(), name)


print("main", threading.get_native_id(), flush=True)
kept = collections.deque(maxlen=1000)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    chain = [fresh() for _ in range(DEPTH)]
    kept.append(chain)
    chain[0](chain[1:], 3000)
