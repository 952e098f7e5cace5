//! Links DuckDB's shared library (see `duckdb-link/`), and rebuilds the crate when a
//! migration of the server's tables is added (`sqlx::migrate!` embeds the folder).

fn main() {
    lh_duckdb_link::main();
    println!("cargo:rerun-if-changed=migrations");
}
