"""`waiter` sleeps 10 ms at a time for SECONDS (the first argument). Prints `main TID` first."""
import sys
import time

from compat import native_id


def waiter(end):
    while time.monotonic() < end:
        time.sleep(0.01)


print("main", native_id(), flush=True)
waiter(time.monotonic() + float(sys.argv[1]))
