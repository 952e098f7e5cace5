"""Writes two days of payments for the write-audit-publish story.

    python generate.py --out DIR

day1.csv is clean. day2.csv comes after an unannounced upstream change: one payment in
ten has lost its billing id.
"""

import argparse
import csv
import os
import random


def write(path, day, start_id, n, null_every):
    rnd = random.Random(day)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "bill_id", "amount", "paid_at"])
        for i in range(n):
            pid = start_id + i
            bill = "" if null_every and pid % null_every == 0 else f"B{rnd.randrange(1000, 9999)}"
            w.writerow([pid, bill, rnd.randrange(1, 500) * 10, f"2026-11-{day:02d}T{rnd.randrange(0, 24):02d}:00:00"])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    write(os.path.join(a.out, "day1.csv"), 27, 1, 1000, 0)
    write(os.path.join(a.out, "day2.csv"), 28, 1001, 1000, 10)
    print("day1.csv: 1000 payments; day2.csv: 1000 payments, 100 without a bill id")
