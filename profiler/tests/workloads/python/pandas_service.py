"""A small data service on numpy and pandas, as one runs: orders summarised by customer
(`summarise`, five times a round) and ranked (`rank_orders`, once), round after round, for
SECONDS (the first argument).
The CPU time each function takes is measured here (each call timed with the thread's CPU clock)
and printed at the end as `summarise SECONDS rank_orders SECONDS`, so that a profile's shares
can be checked against it. Prints `main TID` once pandas is imported and the data made."""
import sys
import time

import numpy as np
import pandas as pd

from compat import native_id


def make_orders(rows, seed):
    generator = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "customer": generator.integers(0, 2000, rows),
            "amount": generator.gamma(2.0, 30.0, rows),
            "items": generator.integers(1, 20, rows),
        }
    )


def summarise(orders):
    return orders.groupby("customer").agg(total=("amount", "sum"), mean=("amount", "mean"), items=("items", "max"))


def rank_orders(orders):
    ranked = orders.assign(rank=orders.groupby("customer")["amount"].rank(method="first"))
    return ranked.sort_values(["customer", "rank"]).head(100)


ROUND = (summarise,) * 5 + (rank_orders,)

orders = make_orders(200_000, 1)
spent = {summarise: 0.0, rank_orders: 0.0}
print("main", native_id(), flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for function in ROUND:
        start = time.thread_time()
        function(orders)
        spent[function] += time.thread_time() - start
print(" ".join(f"{function.__name__} {seconds:.3f}" for function, seconds in spent.items()), flush=True)
