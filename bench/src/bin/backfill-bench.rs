//! The backfill benchmark of BENCHMARKS.md: a 30-day backfill of the daily shop
//! (`examples/daily_shop`: three SQL models and a Python model, each run once per day on
//! that day's rows, and two expectations) with `lh run --partitions`, against the same
//! models as dbt microbatch incremental models (`examples/daily_shop_dbt`, dbt-duckdb,
//! `dbt run --event-time-start ... --event-time-end ...`) on the same data, alternating;
//! then one day's raw rows change and both backfill the month again: lh recomputes the
//! changed day alone (the others are memoized), dbt recomputes every day.
//!
//!     backfill-bench [--rounds 3] [--orders-per-day 3000]
//!
//! Needs the `lh` binary next to this one, `LH_DBT` (a dbt with dbt-duckdb: `make
//! bench-backfill` installs one) and its Python (for loading dbt's raw tables), and uv.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lh_bench::{Server, cache_dir, lh_bin, lh_run, median, repo};

const RANGE: &str = "2026-11-01..2026-11-30";
const CHANGED: &str = "2026-11-05";

fn generate(out: &Path, per_day: usize, change: Option<&str>) -> Result<()> {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("examples/daily_shop/generate.py"))
        .args(["--days", "30", "--orders-per-day", &per_day.to_string()])
        .arg("--out")
        .arg(out);
    if let Some(day) = change {
        cmd.args(["--change", day]);
    }
    let status = cmd.stdout(Stdio::null()).status()?;
    anyhow::ensure!(status.success(), "generate.py failed");
    Ok(())
}

/// A server with the raw tables imported, partitioned by day.
fn lh_server(lh: &Path, data: &Path) -> Result<Server> {
    let env_cache = cache_dir().join("bench-envs");
    let s = Server::start(
        lh,
        None,
        &["--env-cache", env_cache.to_str().context("path")?],
    )?;
    for (t, col) in [("orders", "ordered_at"), ("payments", "paid_at")] {
        let f = data.join(format!("{t}.csv"));
        lh_run(
            lh,
            &s,
            &[
                "table",
                "import",
                &format!("daily_raw.{t}"),
                f.to_str().context("path")?,
                "--partition-by",
                &format!("day({col})"),
            ],
        )?;
    }
    Ok(s)
}

fn project() -> String {
    repo().join("examples/daily_shop").display().to_string()
}

/// Runs the month; returns the wall time and how many partitioned nodes ran (were not
/// reused).
fn lh_backfill(lh: &Path, s: &Server, no_cache: bool) -> Result<(Duration, usize, usize)> {
    let p = project();
    let mut args = vec!["run", p.as_str(), "--partitions", RANGE, "-o", "json"];
    if no_cache {
        args.push("--no-cache");
    }
    let (t, out) = lh_run(lh, s, &args)?;
    let run: serde_json::Value = serde_json::from_str(&out)?;
    let nodes = run["nodes"].as_array().context("nodes")?;
    let instances: Vec<&serde_json::Value> = nodes
        .iter()
        .filter(|n| n["name"].as_str().unwrap_or("").contains('['))
        .collect();
    let ran = instances.iter().filter(|n| n["status"] == "done").count();
    Ok((t, ran, instances.len()))
}

/// A dbt project folder with its DuckDB database holding the raw tables (loaded outside
/// the timings).
fn dbt_project(python: &Path, data: &Path) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    lh_bench::copy_dir(&repo().join("examples/daily_shop_dbt"), dir.path())?;
    load_raw(python, &dir.path().join("daily_shop.duckdb"), data, None)?;
    Ok(dir)
}

/// Loads (or, for `day`, replaces that day of) the raw tables of dbt's database.
fn load_raw(python: &Path, db: &Path, data: &Path, day: Option<&str>) -> Result<()> {
    let script = match day {
        None => format!(
            "import duckdb\nc = duckdb.connect({db:?})\nc.execute('create schema if not exists daily_raw')\n\
             c.execute(\"create or replace table daily_raw.orders as select * from read_csv('{d}/orders.csv', types={{'ordered_at': 'TIMESTAMP'}})\")\n\
             c.execute(\"create or replace table daily_raw.payments as select * from read_csv('{d}/payments.csv', types={{'paid_at': 'TIMESTAMP'}})\")\n",
            db = db.display().to_string(),
            d = data.display()
        ),
        Some(day) => format!(
            "import duckdb\nc = duckdb.connect({db:?})\n\
             c.execute(\"delete from daily_raw.orders where cast(ordered_at as date) = date '{day}'\")\n\
             c.execute(\"delete from daily_raw.payments where cast(paid_at as date) = date '{day}'\")\n\
             c.execute(\"insert into daily_raw.orders select * from read_csv('{d}/orders_{day}.csv', types={{'ordered_at': 'TIMESTAMP'}})\")\n\
             c.execute(\"insert into daily_raw.payments select * from read_csv('{d}/payments_{day}.csv', types={{'paid_at': 'TIMESTAMP'}})\")\n",
            db = db.display().to_string(),
            d = data.display()
        ),
    };
    let status = Command::new(python).args(["-c", &script]).status()?;
    anyhow::ensure!(status.success(), "loading dbt's raw tables failed");
    Ok(())
}

fn dbt_run(dbt: &Path, dir: &Path, start: &str, end: &str) -> Result<Duration> {
    let t = Instant::now();
    let out = Command::new(dbt)
        .args([
            "run",
            "--no-version-check",
            "--event-time-start",
            start,
            "--event-time-end",
            end,
        ])
        .current_dir(dir)
        .env("DBT_PROFILES_DIR", dir)
        .env("DBT_SEND_ANONYMOUS_USAGE_STATS", "False")
        .output()?;
    let took = t.elapsed();
    if !out.status.success() {
        bail!("dbt run failed:\n{}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(took)
}

fn main() -> Result<()> {
    let rounds = lh_bench::arg("--rounds", 3)?;
    let per_day = lh_bench::arg("--orders-per-day", 3000)?;
    let lh = lh_bin()?;
    let dbt = PathBuf::from(
        std::env::var("LH_DBT")
            .context("LH_DBT must name a dbt with dbt-duckdb (make bench-backfill installs one)")?,
    );
    let python = dbt.with_file_name("python");
    println!(
        "backfill-bench: 30 days x {per_day} orders, {rounds} rounds, {}",
        chrono::Utc::now().format("%Y-%m-%d")
    );
    let scratch = tempfile::tempdir()?;
    let data = scratch.path().join("data");
    generate(&data, per_day, None)?;
    generate(&data, per_day, Some(CHANGED))?;

    // Warm-up, outside the timings: the Python environment, uv's and dbt's caches.
    let s = lh_server(&lh, &data)?;
    lh_run(&lh, &s, &["run", &project(), "--partition", "2026-11-01"])?;
    let warm = dbt_project(&python, &data)?;
    dbt_run(&dbt, warm.path(), "2026-11-01", "2026-11-02")?;

    let (mut lh_t, mut dbt_t) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let dir = dbt_project(&python, &data)?;
        let mut lh_round = || -> Result<()> {
            let (t, ran, all) = lh_backfill(&lh, &s, true)?;
            anyhow::ensure!(
                ran == all,
                "every day runs with --no-cache ({ran} of {all})"
            );
            lh_t.push(t);
            Ok(())
        };
        if r % 2 == 0 {
            lh_round()?;
            dbt_t.push(dbt_run(&dbt, dir.path(), "2026-11-01", "2026-12-01")?);
        } else {
            dbt_t.push(dbt_run(&dbt, dir.path(), "2026-11-01", "2026-12-01")?);
            lh_round()?;
        }
    }
    let (l, d) = (median(&mut lh_t), median(&mut dbt_t));
    println!(
        "\n### A 30-day backfill of the daily shop (4 models x 30 days, {} raw rows), median of {rounds}\n",
        per_day * 30
    );
    println!("| | seconds |\n|---|---:|");
    println!(
        "| lh: `lh run examples/daily_shop --partitions {RANGE} --no-cache` (120 model instances, 2 expectations, one merge) | {:.2} |",
        l.as_secs_f64()
    );
    println!(
        "| dbt: `dbt run --event-time-start 2026-11-01 --event-time-end 2026-12-01` (4 microbatch models x 30 batches) | {:.2} |",
        d.as_secs_f64()
    );
    println!(
        "| **ratio lh / dbt** | **{:.2}x** |",
        l.as_secs_f64() / d.as_secs_f64()
    );

    // One day's raw rows change; both backfill the month again.
    let (unchanged, ran_unchanged, _) = lh_backfill(&lh, &s, false)?;
    for t in ["orders", "payments"] {
        let f = data.join(format!("{t}_{CHANGED}.csv"));
        lh_run(
            &lh,
            &s,
            &[
                "table",
                "import",
                &format!("daily_raw.{t}"),
                f.to_str().context("path")?,
                "--mode",
                "overwrite-partitions",
            ],
        )?;
    }
    let (changed, ran, all) = lh_backfill(&lh, &s, false)?;
    let dir = dbt_project(&python, &data)?;
    dbt_run(&dbt, dir.path(), "2026-11-01", "2026-12-01")?;
    load_raw(
        &python,
        &dir.path().join("daily_shop.duckdb"),
        &data,
        Some(CHANGED),
    )?;
    let dbt_month = dbt_run(&dbt, dir.path(), "2026-11-01", "2026-12-01")?;
    let dbt_day = dbt_run(&dbt, dir.path(), CHANGED, "2026-11-06")?;
    println!("\n### The month again, after day {CHANGED}'s raw rows changed\n");
    println!("| | seconds | model instances computed |\n|---|---:|---:|");
    println!(
        "| lh, nothing changed (every day memoized) | {:.2} | {ran_unchanged} of {all} |",
        unchanged.as_secs_f64()
    );
    println!(
        "| lh, one day changed (`lh run ... --partitions {RANGE}`) | {:.2} | {ran} of {all} |",
        changed.as_secs_f64()
    );
    println!(
        "| dbt, the month again (no memoization: every batch) | {:.2} | {all} of {all} |",
        dbt_month.as_secs_f64()
    );
    println!(
        "| dbt, the changed day alone (`--event-time-start {CHANGED} --event-time-end 2026-11-06`, the user says which) | {:.2} | 4 of {all} |",
        dbt_day.as_secs_f64()
    );
    Ok(())
}
