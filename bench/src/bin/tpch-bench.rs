//! The query and import benchmark of BENCHMARKS.md, on TPC-H data made by tpchgen-cli:
//!
//! - import of `lineitem` from Parquet through `lh table import` (the CLI uploading to
//!   a local server), against DuckDB's own `COPY ... TO parquet` of the same file;
//! - the 22 TPC-H queries through `lh query` (process start to last row) against the
//!   same queries in DuckDB directly on the same Parquet files, alternating;
//! - a small query end to end (`lh query` process start to last row, warm server).
//!
//!     tpch-bench [--scale 1] [--rounds 3] [--small-runs 50]
//!
//! Needs `tpchgen-cli` on PATH (`make bench` puts the project's virtualenv there) and the
//! `lh` binary next to this one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lh_bench::{Samples, Server, TABLES, lh_bin, median, ms, tpch_data};

struct Args {
    scale: String,
    rounds: usize,
    small_runs: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        scale: "1".into(),
        rounds: 3,
        small_runs: 50,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--scale" => a.scale = value,
            "--rounds" => a.rounds = value.parse()?,
            "--small-runs" => a.small_runs = value.parse()?,
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(a)
}

fn lh_cmd(lh: &Path, server: &Server, args: &[&str]) -> Command {
    server.lh(lh, args)
}

/// Runs `lh` and returns its wall time and stdout.
fn timed_lh(lh: &Path, server: &Server, args: &[&str]) -> Result<(Duration, Vec<u8>)> {
    let start = Instant::now();
    let out = lh_cmd(lh, server, args).stderr(Stdio::piped()).output()?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "lh {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((took, out.stdout))
}

fn duckdb() -> Result<duckdb::Connection> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let c = duckdb::Connection::open_in_memory()?;
    c.execute_batch(&format!("SET threads = {threads};"))?;
    Ok(c)
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let lh = lh_bin()?;
    let data = tpch_data(&args.scale)?;
    let server = Server::start(&lh, None, &[])?;
    let scratch = tempfile::tempdir()?;
    println!(
        "tpch-bench: TPC-H scale {}, {} rounds, {}",
        args.scale,
        args.rounds,
        chrono::Utc::now().format("%Y-%m-%d")
    );

    for t in TABLES {
        let file = data.join(format!("{t}.parquet"));
        timed_lh(
            &lh,
            &server,
            &[
                "table",
                "import",
                &format!("tpch.{t}"),
                file.to_str().context("path")?,
            ],
        )?;
    }

    // Import of lineitem: lh (upload + DuckDB write with field ids + Iceberg commit)
    // against DuckDB's COPY of the same file, alternating.
    let lineitem = data.join("lineitem.parquet");
    let rows: u64 = duckdb()?.query_row(
        &format!(
            "SELECT count(*) FROM read_parquet('{}')",
            lineitem.display()
        ),
        [],
        |r| r.get::<_, i64>(0),
    )? as u64;
    let mut lh_import = Vec::new();
    let mut duck_copy = Vec::new();
    for r in 0..args.rounds {
        let (t, _) = timed_lh(
            &lh,
            &server,
            &[
                "table",
                "import",
                &format!("imports.lineitem_{r}"),
                lineitem.to_str().context("path")?,
            ],
        )?;
        lh_import.push(t);
        let c = duckdb()?;
        let target = scratch.path().join(format!("copy_{r}.parquet"));
        let start = Instant::now();
        c.execute_batch(&format!(
            "COPY (SELECT * FROM read_parquet('{}')) TO '{}' (FORMAT parquet)",
            lineitem.display(),
            target.display()
        ))?;
        duck_copy.push(start.elapsed());
    }
    let lh_t = median(&mut lh_import);
    let duck_t = median(&mut duck_copy);
    let lh_rate = rows as f64 / lh_t.as_secs_f64();
    let duck_rate = rows as f64 / duck_t.as_secs_f64();
    println!(
        "\n### Import of lineitem ({rows} rows) from Parquet, median of {}\n",
        args.rounds
    );
    println!("| | seconds | rows/s |\n|---|---:|---:|");
    println!(
        "| `lh table import` (CLI to local server) | {:.2} | {:.0} |",
        lh_t.as_secs_f64(),
        lh_rate
    );
    println!(
        "| DuckDB `COPY ... TO parquet` | {:.2} | {:.0} |",
        duck_t.as_secs_f64(),
        duck_rate
    );
    println!(
        "| ratio lh / DuckDB (rows/s) | | **{:.2}x** |",
        lh_rate / duck_rate
    );

    // The 22 queries: DuckDB directly on the data files lh wrote, through views.
    let con = duckdb()?;
    con.execute_batch("CREATE SCHEMA tpch;")?;
    for t in TABLES {
        let dir = walk_tables(&server.data.join("warehouse/tpch"), t)?;
        con.execute_batch(&format!(
            "CREATE VIEW tpch.{t} AS SELECT * FROM read_parquet('{}/data/*/*.parquet');",
            dir.display()
        ))?;
    }
    let qdir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tpch");
    let mut lh_times = vec![Vec::new(); 22];
    let mut duck_times = vec![Vec::new(); 22];
    for round in 0..args.rounds {
        for q in 1..=22usize {
            let file = qdir.join(format!("q{q:02}.sql"));
            let sql = std::fs::read_to_string(&file)?;
            let run_lh = |times: &mut Vec<Duration>| -> Result<usize> {
                let (t, out) = timed_lh(
                    &lh,
                    &server,
                    &["query", "--file", file.to_str().expect("path"), "-o", "csv"],
                )?;
                times.push(t);
                Ok(out
                    .iter()
                    .filter(|b| **b == b'\n')
                    .count()
                    .saturating_sub(1))
            };
            let run_duck = |times: &mut Vec<Duration>| -> Result<usize> {
                let start = Instant::now();
                let mut stmt = con.prepare(&sql)?;
                let n: usize = stmt.query_arrow([])?.map(|b| b.num_rows()).sum();
                times.push(start.elapsed());
                Ok(n)
            };
            let (a, b) = if round % 2 == 0 {
                let a = run_lh(&mut lh_times[q - 1])?;
                (a, run_duck(&mut duck_times[q - 1])?)
            } else {
                let b = run_duck(&mut duck_times[q - 1])?;
                (run_lh(&mut lh_times[q - 1])?, b)
            };
            if a != b {
                bail!("Q{q}: lh returned {a} rows, DuckDB {b}");
            }
        }
    }
    println!(
        "\n### TPC-H queries: `lh query` (CLI process, warm server) against DuckDB on the same files, median of {}\n",
        args.rounds
    );
    println!("| query | lh ms | DuckDB ms | ratio |\n|---|---:|---:|---:|");
    let (mut lh_total, mut duck_total) = (0.0, 0.0);
    for q in 0..22 {
        let l = median(&mut lh_times[q]);
        let d = median(&mut duck_times[q]);
        lh_total += l.as_secs_f64();
        duck_total += d.as_secs_f64();
        println!(
            "| Q{} | {} | {} | {:.2} |",
            q + 1,
            ms(l),
            ms(d),
            l.as_secs_f64() / d.as_secs_f64()
        );
    }
    println!(
        "| **total** | {:.0} | {:.0} | **{:.2}x** |",
        lh_total * 1000.0,
        duck_total * 1000.0,
        lh_total / duck_total
    );

    // A small query end to end.
    let mut s = Samples::new();
    for _ in 0..args.small_runs {
        let (t, _) = timed_lh(&lh, &server, &["query", "select count(*) from tpch.nation"])?;
        s.push(t);
    }
    println!(
        "\n### A small query end to end (`lh query \"select count(*) from tpch.nation\"`, process start to last row)\n"
    );
    println!("| p50 ms | p90 ms | runs |\n|---:|---:|---:|");
    println!(
        "| {} | {} | {} |",
        ms(s.percentile(50.0)),
        ms(s.percentile(90.0)),
        s.len()
    );
    Ok(())
}

/// The folder of table `name` under the namespace folder (`<name>-<uuid>`).
fn walk_tables(ns_dir: &Path, name: &str) -> Result<PathBuf> {
    for e in std::fs::read_dir(ns_dir)? {
        let p = e?.path();
        let file = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if file
            .strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('-') && rest.len() == 33)
        {
            return Ok(p);
        }
    }
    bail!("no folder for table {name} in {}", ns_dir.display())
}
