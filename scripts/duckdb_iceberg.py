"""DuckDB with its iceberg extension (and the avro and httpfs extensions it needs),
loaded from their PyPI wheels (`duckdb-extension-iceberg` and friends): no download at
run time. Used by the demo and by the REST catalog's tests.
"""

import glob
import importlib
import os

import duckdb


def connect():
    """A DuckDB connection with the iceberg extension loaded; nothing auto-installs."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for ext in ["httpfs", "avro", "iceberg"]:
        mod = importlib.import_module(f"duckdb_extension_{ext}")
        found = glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*",
                                       f"{ext}.duckdb_extension"))
        if not found:
            raise SystemExit(f"the {ext} extension is not in its wheel")
        con.execute(f"LOAD '{found[0]}'")
    return con
