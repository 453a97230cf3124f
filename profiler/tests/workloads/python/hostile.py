"""Code objects with names that break outputs, each burning CPU in turn for SECONDS (the first
argument): terminal escapes, a line break and the folded format's separator; one megabyte of
`x`; and a name outside ASCII (which CPython stores two bytes a character). Prints `main TID`
first."""
import sys
import time

from compat import native_id, replace_code

UNIT = 2000


def escape(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def long(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def wide(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def renamed(function, name):
    """`function` with `name` as its code object's name (and qualified name, from 3.11)."""
    if sys.version_info >= (3, 11):
        code = replace_code(function.__code__, co_name=name, co_qualname=name)
    else:
        code = replace_code(function.__code__, co_name=name)
    function.__code__ = code
    return function


escape = renamed(escape, "a;b\n\x1b[2J")
long = renamed(long, "x" * (1 << 20))
wide = renamed(wide, "\u65e5\u672c\u8a9e")

print("main", native_id(), flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    escape(UNIT)
    long(UNIT)
    wide(UNIT)
