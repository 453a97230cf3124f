"""Pure Python that describes itself at length: COUNT (the second argument, default 3000)
functions named `fresh_N`, each the same small loop, whose code objects all share one line
table of a megabyte (a table of a line per instruction, made up), called in turn for SECONDS
(the first argument). The process holds one table; a reader that keeps each code object's
table whole would hold COUNT megabytes. With DISTINCT=1 in the environment, each has a copy
of its own (COUNT megabytes of the process's). Prints `main TID` once the functions are made."""
import os
import sys
import threading
import time

COUNT = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
TABLE_BYTES = 1 << 20


def table():
    """A megabyte of line table in this version's format, each entry a new line."""
    if sys.version_info >= (3, 11):
        # PEP 657, kind 13 (a line delta, no columns) over one code unit: line + 1.
        return b"\xe8\x02" * (TABLE_BYTES // 2)
    # 3.10's (length, delta) pairs, and 3.8's and 3.9's (address, line) increments.
    return b"\x02\x01" * (TABLE_BYTES // 2)


def fresh(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


SHARED = table()


DISTINCT = os.environ.get("DISTINCT") == "1"


def made(index):
    """A function of its own code object, named `fresh_INDEX`, with the shared line table (or a
    copy of its own)."""
    name = "fresh_%d" % index
    table = bytes(bytearray(SHARED)) if DISTINCT else SHARED
    if sys.version_info >= (3, 11):
        code = fresh.__code__.replace(co_name=name, co_qualname=name, co_linetable=table)
    elif sys.version_info >= (3, 10):
        code = fresh.__code__.replace(co_name=name, co_linetable=table)
    else:
        code = fresh.__code__.replace(co_name=name, co_lnotab=table)
    return type(fresh)(code, globals(), name)


functions = [made(index) for index in range(COUNT)]
print("main", threading.get_native_id(), flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for function in functions:
        function(300)
