"""The demo's last step: another engine on lh's refs. DuckDB (its Python package, with
the iceberg extension loaded from its wheel: no download) attaches a ref through lh's
Iceberg REST catalog and runs a query; the statements are printed as they run.

    python3 scripts/demo_engine.py REST_URI REF SQL
"""

import glob
import importlib
import os
import sys

import duckdb


def main():
    uri, ref, sql = sys.argv[1:4]
    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for ext in ["httpfs", "avro", "iceberg"]:
        mod = importlib.import_module(f"duckdb_extension_{ext}")
        found = glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*",
                                       f"{ext}.duckdb_extension"))
        if not found:
            raise SystemExit(f"the {ext} extension is not in its wheel")
        con.execute(f"LOAD '{found[0]}'")
    attach = f"ATTACH '{ref}' AS lake (TYPE iceberg, ENDPOINT '{uri}', AUTHORIZATION_TYPE 'none')"
    use = "USE lake"
    for stmt in [attach, use]:
        print(f"D {stmt};", flush=True)
        con.execute(stmt)
    print(f"D {sql};", flush=True)
    con.sql(sql).show()


if __name__ == "__main__":
    main()
