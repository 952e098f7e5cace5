"""Generates the jaffle shop's raw data, deterministically, at any scale.

    python generate.py --scale 1 --out DIR [--format csv|parquet]

Writes customers, orders and payments with the columns of dbt's jaffle shop seeds
(raw_customers: id, first_name, last_name; raw_orders: id, user_id, order_date,
status; raw_payments: id, order_id, payment_method, amount in cents). Scale 1 is the
seeds' size (100 customers, 99 orders, about 113 payments); scale 10000 is about a
million orders.
"""

import argparse
import csv
import datetime
import os
import random

FIRST = ["Michael", "Shawn", "Kathleen", "Jimmy", "Katherine", "Sarah", "Martin", "Frank", "Jennifer", "Henry",
         "Fred", "Amy", "Kathleen", "Steve", "Teresa", "Amanda", "Kimberly", "Johnny", "Virginia", "Anna"]
LAST = list("PMBCRWGHTSLKJDAFONEY")
STATUSES = ["completed"] * 6 + ["placed", "shipped", "return_pending", "returned"]
METHODS = ["credit_card"] * 5 + ["coupon"] * 2 + ["bank_transfer"] * 2 + ["gift_card"]


def generate(scale, out, fmt):
    rnd = random.Random(42)
    n_customers = max(1, round(100 * scale))
    n_orders = max(1, round(99 * scale))
    start = datetime.date(2018, 1, 1)
    customers = [(i, rnd.choice(FIRST), rnd.choice(LAST) + ".") for i in range(1, n_customers + 1)]
    orders = []
    for i in range(1, n_orders + 1):
        day = start + datetime.timedelta(days=rnd.randrange(0, 100))
        orders.append((i, rnd.randrange(1, n_customers + 1), day.isoformat(), rnd.choice(STATUSES)))
    payments = []
    pid = 1
    for (order_id, _, _, _) in orders:
        for _ in range(1 if rnd.random() < 0.87 else 2):
            payments.append((pid, order_id, rnd.choice(METHODS), rnd.randrange(0, 30) * 100))
            pid += 1
    os.makedirs(out, exist_ok=True)
    tables = {
        "customers": (["id", "first_name", "last_name"], customers),
        "orders": (["id", "user_id", "order_date", "status"], orders),
        "payments": (["id", "order_id", "payment_method", "amount"], payments),
    }
    for name, (header, rows) in tables.items():
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq
            cols = list(zip(*rows))
            table = pa.table({h: list(c) for h, c in zip(header, cols)})
            if name == "orders":
                table = table.set_column(2, "order_date", pa.compute.cast(table["order_date"], pa.date32()))
            pq.write_table(table, os.path.join(out, f"{name}.parquet"))
        else:
            with open(os.path.join(out, f"{name}.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(header)
                w.writerows(rows)
    return {k: len(v[1]) for k, v in tables.items()}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--format", choices=["csv", "parquet"], default="csv")
    a = p.parse_args()
    counts = generate(a.scale, a.out, a.format)
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
