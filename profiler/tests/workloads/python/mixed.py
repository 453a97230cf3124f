"""Python calling into native code and back, for SECONDS (the first argument): `delta` compresses
data with zlib (Python over native libz frames), and `sorter` sorts an array with libc's qsort
and a Python comparator, `compare`, given through ctypes (Python over native over Python).
Prints `main TID` first."""
import ctypes
import os
import random
import sys
import time
import zlib

from compat import native_id

# Hex text: compressible enough that deflate searches for matches, as real data makes it.
DATA = os.urandom(1 << 17).hex().encode()
COUNT = 2000

libc = ctypes.CDLL(None)
libc.qsort.restype = None
COMPARATOR = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def delta():
    return len(zlib.compress(DATA, 6))


def compare(a, b):
    return a[0] - b[0]


def sorter(values):
    array = (ctypes.c_int * len(values))(*values)
    libc.qsort(array, len(values), ctypes.sizeof(ctypes.c_int), COMPARATOR(compare))
    return array[0]


print("main", native_id(), flush=True)
values = random.Random(1).sample(range(1 << 20), COUNT)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    delta()
    sorter(values)
