"""Small appends through pyiceberg: RestCatalog against an lh server, against SqlCatalog
(SQLite) on the same machine, interleaved one append each in turn.

    python rest_bench.py URI DIR [--commits 200] [--rows 10]

URI is the lh server's REST root (http://127.0.0.1:PORT/iceberg), DIR a scratch folder
for the SqlCatalog's database and warehouse. Prints one JSON document: per catalog the
wall time of each append (write the data file, the manifests and commit), in ms.
"""

import argparse
import json
import os
import time

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("dir")
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--rows", type=int, default=10)
    a = ap.parse_args()

    catalogs = {
        "lh": RestCatalog("lh", uri=a.uri, warehouse="main", token=os.environ["LH_TOKEN"]),
        "sql": SqlCatalog("sql", uri=f"sqlite:///{a.dir}/pyiceberg.db", warehouse=f"file://{a.dir}/warehouse"),
    }
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "v", DoubleType(), required=False),
        NestedField(3, "note", StringType(), required=False),
    )
    tables = {}
    for name, cat in catalogs.items():
        cat.create_namespace("bench")
        tables[name] = cat.create_table("bench.appends", schema=schema)
    arrow_schema = tables["lh"].schema().as_arrow()

    times = {name: [] for name in catalogs}
    for i in range(a.commits):
        batch = pa.Table.from_pylist(
            [{"id": i * a.rows + j, "v": j * 0.5, "note": f"row {j}"} for j in range(a.rows)],
            schema=arrow_schema)
        # Alternate which goes first, so that neither always follows the other.
        order = list(catalogs) if i % 2 == 0 else list(reversed(list(catalogs)))
        for name in order:
            start = time.perf_counter()
            tables[name].append(batch)
            times[name].append((time.perf_counter() - start) * 1000)

    rows = {name: catalogs[name].load_table("bench.appends").scan().to_arrow().num_rows for name in catalogs}
    expected = a.commits * a.rows
    if any(n != expected for n in rows.values()):
        raise SystemExit(f"lost rows: {rows}, expected {expected}")
    print(json.dumps({"commits": a.commits, "rows_per_commit": a.rows, "ms": times}))


if __name__ == "__main__":
    main()
