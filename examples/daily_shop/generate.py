"""Generates the daily shop's raw data, deterministically: orders and their payments over
a range of days, each payment on its order's day.

    python generate.py --days 30 --orders-per-day 3000 --out DIR [--start 2026-11-01]
        [--change DAY]

Writes orders.csv (id, customer_id, ordered_at, status) and payments.csv (id, order_id,
paid_at, method, amount in cents). With --change DAY, writes only that day's orders,
with other amounts and statuses (a correction of one day, as a late-arriving fix would
bring): orders_DAY.csv and payments_DAY.csv.
"""

import argparse
import csv
import datetime
import os
import random

STATUSES = ["completed"] * 6 + ["placed", "shipped", "return_pending", "returned"]
METHODS = ["credit_card"] * 5 + ["coupon"] * 2 + ["bank_transfer"] * 2 + ["gift_card"]


def day_rows(day, index, per_day, seed):
    """The orders and payments of day number `index` (ids unique across days)."""
    rnd = random.Random(seed * 1_000_003 + index)
    orders, payments = [], []
    base = index * per_day * 2
    for k in range(per_day):
        oid = base + k + 1
        at = datetime.datetime.combine(day, datetime.time()) + datetime.timedelta(seconds=rnd.randrange(0, 86400))
        orders.append((oid, rnd.randrange(1, 5001), at.isoformat(sep=" "), rnd.choice(STATUSES)))
        for p in range(1 if rnd.random() < 0.87 else 2):
            paid = min(at + datetime.timedelta(seconds=rnd.randrange(0, 600)),
                       datetime.datetime.combine(day, datetime.time(23, 59, 59)))
            payments.append((oid * 2 + p, oid, paid.isoformat(sep=" "), rnd.choice(METHODS), rnd.randrange(1, 30) * 100))
    return orders, payments


def write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--orders-per-day", type=int, default=3000)
    ap.add_argument("--start", default="2026-11-01")
    ap.add_argument("--out", required=True)
    ap.add_argument("--change", help="write only this day's rows, changed")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    start = datetime.date.fromisoformat(a.start)
    days = [start + datetime.timedelta(days=i) for i in range(a.days)]
    if a.change:
        day = datetime.date.fromisoformat(a.change)
        orders, payments = day_rows(day, days.index(day), a.orders_per_day, seed=7)
        suffix = f"_{day.isoformat()}"
    else:
        orders, payments = [], []
        for i, day in enumerate(days):
            o, p = day_rows(day, i, a.orders_per_day, seed=42)
            orders += o
            payments += p
        suffix = ""
    write(os.path.join(a.out, f"orders{suffix}.csv"), ["id", "customer_id", "ordered_at", "status"], orders)
    write(os.path.join(a.out, f"payments{suffix}.csv"), ["id", "order_id", "paid_at", "method", "amount"], payments)


if __name__ == "__main__":
    main()
