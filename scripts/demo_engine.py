"""The demo's last step: another engine on lh's refs. DuckDB (its Python package, with
the iceberg extension loaded from its wheel: no download) attaches a ref through lh's
Iceberg REST catalog and runs a query; the statements are printed as they run.

    python3 scripts/demo_engine.py REST_URI REF SQL

The token comes from LH_TOKEN (the demo makes a reader token for it).
"""

import os
import sys

from duckdb_iceberg import connect


def main():
    uri, ref, sql = sys.argv[1:4]
    token = os.environ["LH_TOKEN"]
    con = connect()
    secret = "CREATE SECRET lh (TYPE iceberg, TOKEN '{}')"
    attach = f"ATTACH '{ref}' AS lake (TYPE iceberg, ENDPOINT '{uri}', SECRET lh)"
    use = "USE lake.tpch"
    for shown, stmt in [
        (secret.format("$LH_TOKEN"), secret.format(token)),
        (attach, attach),
        (use, use),
    ]:
        print(f"D {shown};", flush=True)
        con.execute(stmt)
    print(f"D {sql};", flush=True)
    con.sql(sql).show()


if __name__ == "__main__":
    main()
