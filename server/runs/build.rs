//! Links DuckDB's shared library (see `duckdb-link/`).

fn main() {
    lh_duckdb_link::main();
}
