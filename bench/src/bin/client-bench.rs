//! The Python client benchmark of BENCHMARKS.md: `lh.Client.query` of TPC-H SF1
//! `lineitem` columns into a pyarrow Table, against DuckDB's Python package reading the
//! same columns of the same Parquet file (`read_parquet(...).arrow()`), taking turns in
//! one run (`client_bench.py`). Target: at most 1.2x.
//!
//!     client-bench [--rounds 5]
//!
//! Needs the `lh` binary next to this one and `LH_TEST_PYTHON` (a Python with DuckDB and
//! pyarrow: `make bench` prepares one).

use anyhow::{Context, Result, bail};
use lh_bench::{Server, arg, lh_bin, tpch_data};

fn main() -> Result<()> {
    let rounds = arg("--rounds", 5)?;
    let python = std::env::var("LH_TEST_PYTHON")
        .context("LH_TEST_PYTHON must name a Python with DuckDB (make bench prepares one)")?;
    let data = tpch_data("1")?;
    let parquet = data.join("lineitem.parquet");
    let lh = lh_bin()?;
    let server = Server::start(&lh, None, &[])?;
    let import = server
        .lh(&lh, &["table", "import", "tpch.lineitem"])
        .arg(&parquet)
        .output()?;
    if !import.status.success() {
        bail!(
            "import of lineitem failed: {}",
            String::from_utf8_lossy(&import.stderr)
        );
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/client_bench.py");
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(&server.url)
        .arg(&parquet)
        .args(["--rounds", &rounds.to_string()])
        .env("LH_TOKEN", server.token()?)
        .output()?;
    if !out.status.success() {
        bail!(
            "client_bench.py failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let median = |name: &str| -> Result<f64> {
        let mut s: Vec<f64> = v["seconds"][name]
            .as_array()
            .context("seconds")?
            .iter()
            .filter_map(|x| x.as_f64())
            .collect();
        s.sort_by(f64::total_cmp);
        s.get(s.len() / 2).copied().context("no rounds")
    };
    let (lh_s, duck_s) = (median("lh")?, median("duckdb")?);
    println!(
        "client-bench: {} rows of lineitem (SF1), columns {}; median of {rounds} rounds, taking turns; {}\n",
        v["rows"],
        v["columns"].as_str().unwrap_or_default(),
        chrono::Utc::now().format("%Y-%m-%d")
    );
    println!("| into a pyarrow Table | median |");
    println!("|---|---:|");
    println!("| `lh.Client().query(...)` (server's DuckDB, Arrow IPC over HTTP) | {lh_s:.3} s |");
    println!("| DuckDB's Python `read_parquet(...).arrow()` | {duck_s:.3} s |");
    println!("| **ratio lh / DuckDB** | **{:.2}x** |", lh_s / duck_s);
    Ok(())
}
