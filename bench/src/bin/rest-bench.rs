//! The Iceberg REST benchmark of BENCHMARKS.md: small appends through pyiceberg's
//! `RestCatalog` against `lh server`, against the same appends through pyiceberg's
//! `SqlCatalog` (SQLite) on the same machine, interleaved in one run (`rest_bench.py`);
//! the wall time of each append, write and commit.
//!
//!     rest-bench [--commits 200] [--rows 10]
//!
//! Needs the `lh` binary next to this one and `LH_TEST_PYTHON` (a Python with pyiceberg:
//! `make bench` prepares one).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use lh_bench::{Samples, Server, arg, lh_bin, ms};

fn main() -> Result<()> {
    let (commits, rows) = (arg("--commits", 200)?, arg("--rows", 10)?);
    let python = std::env::var("LH_TEST_PYTHON")
        .context("LH_TEST_PYTHON must name a Python with pyiceberg (make bench prepares one)")?;
    let lh = lh_bin()?;
    let server = Server::start(&lh, None, &[])?;
    let scratch = tempfile::tempdir()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/rest_bench.py");
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(format!("{}/iceberg", server.url))
        .arg(scratch.path())
        .env("LH_TOKEN", server.token()?)
        .args([
            "--commits",
            &commits.to_string(),
            "--rows",
            &rows.to_string(),
        ])
        .output()?;
    if !out.status.success() {
        bail!(
            "rest_bench.py failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let samples = |name: &str| -> Result<(Samples, Duration)> {
        let mut s = Samples::new();
        let mut total = Duration::ZERO;
        for x in v["ms"][name].as_array().context("samples")? {
            let d = Duration::from_secs_f64(x.as_f64().context("ms")? / 1000.0);
            s.push(d);
            total += d;
        }
        let mean = total / s.len().max(1) as u32;
        Ok((s, mean))
    };
    let (lh_s, lh_mean) = samples("lh")?;
    let (sql_s, sql_mean) = samples("sql")?;
    println!(
        "rest-bench: {commits} appends of {rows} rows each, interleaved, {}\n",
        chrono::Utc::now().format("%Y-%m-%d")
    );
    println!("| catalog | p50 ms | p90 ms | mean ms |");
    println!("|---|---:|---:|---:|");
    for (name, s, mean) in [
        ("pyiceberg RestCatalog -> lh server", &lh_s, lh_mean),
        ("pyiceberg SqlCatalog (SQLite)", &sql_s, sql_mean),
    ] {
        println!(
            "| {name} | {} | {} | {} |",
            ms(s.percentile(50.0)),
            ms(s.percentile(90.0)),
            ms(mean)
        );
    }
    println!(
        "| **ratio lh / SqlCatalog** | **{:.2}x** | | **{:.2}x** |",
        lh_s.percentile(50.0).as_secs_f64() / sql_s.percentile(50.0).as_secs_f64(),
        lh_mean.as_secs_f64() / sql_mean.as_secs_f64()
    );
    Ok(())
}
