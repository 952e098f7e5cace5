"""`lh.Client.query` of TPC-H lineitem columns into a pyarrow Table, against DuckDB's
Python package reading the same columns of the same Parquet file into a pyarrow Table
(`read_parquet(...).arrow()`), taking turns.

    python client_bench.py URL PARQUET [--rounds 5]

LH_TOKEN holds the token; the table is `tpch.lineitem` on main. Prints one JSON
document: the seconds of each round, per reader.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner", "python"))

import duckdb  # noqa: E402

import lh  # noqa: E402

COLUMNS = "l_orderkey, l_partkey, l_quantity, l_extendedprice, l_discount, l_shipdate, l_returnflag"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("parquet")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    client = lh.Client(endpoint=a.url, token=os.environ["LH_TOKEN"])
    con = duckdb.connect()

    def with_lh():
        return client.query(f"SELECT {COLUMNS} FROM tpch.lineitem")

    def with_duckdb():
        r = con.sql(f"SELECT {COLUMNS} FROM read_parquet('{a.parquet}')").arrow()
        # DuckDB 1.5's .arrow() hands a reader: the Table is what it reads.
        return r.read_all() if hasattr(r, "read_all") else r

    readers = {"lh": with_lh, "duckdb": with_duckdb}
    rows = {name: f().num_rows for name, f in readers.items()}  # warm-up
    if len(set(rows.values())) != 1:
        raise SystemExit(f"the readers disagree: {rows}")
    seconds = {name: [] for name in readers}
    for _ in range(a.rounds):
        for name, f in readers.items():
            start = time.perf_counter()
            table = f()
            seconds[name].append(time.perf_counter() - start)
            del table
    print(json.dumps({"rows": rows["lh"], "columns": COLUMNS, "seconds": seconds}))


if __name__ == "__main__":
    main()
