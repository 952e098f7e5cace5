"""The demo's last step: another engine on lh's refs. DuckDB (its Python package, with
the iceberg extension loaded from its wheel: no download) attaches a ref through lh's
Iceberg REST catalog and runs a query; the statements are printed as they run.

    python3 scripts/demo_engine.py REST_URI REF SQL
"""

import sys

from duckdb_iceberg import connect


def main():
    uri, ref, sql = sys.argv[1:4]
    con = connect()
    attach = f"ATTACH '{ref}' AS lake (TYPE iceberg, ENDPOINT '{uri}', AUTHORIZATION_TYPE 'none')"
    use = "USE lake.tpch"
    for stmt in [attach, use]:
        print(f"D {stmt};", flush=True)
        con.execute(stmt)
    print(f"D {sql};", flush=True)
    con.sql(sql).show()


if __name__ == "__main__":
    main()
