//! The pipeline benchmark of BENCHMARKS.md:
//!
//! - the jaffle shop end to end, `lh` (import the raw data, then `lh run`, every node
//!   computed) against `dbt build` with dbt-duckdb (seeds, models, tests) on the same
//!   data, at scale 1 and at a scale with millions of rows, alternating;
//! - re-running the unchanged pipeline (every model cached);
//! - one warm Python node that returns its input: its time in the run.
//!
//!     pipeline-bench [--rounds 3] [--big-scale 10000]
//!
//! Needs the `lh` binary next to this one, `LH_DBT` (a dbt with dbt-duckdb: `make
//! bench` installs one), and uv on PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lh_bench::{Samples, Server, cache_dir, lh_bin, lh_run, median, ms, repo};

struct Args {
    rounds: usize,
    big_scale: f64,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        rounds: 3,
        big_scale: 10_000.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rounds" => a.rounds = value.parse()?,
            "--big-scale" => a.big_scale = value.parse()?,
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(a)
}

fn start(lh: &Path, env_cache: &Path) -> Result<Server> {
    Server::start(
        lh,
        None,
        &["--env-cache", env_cache.to_str().context("path")?],
    )
}

fn generate(scale: f64, out: &Path) -> Result<()> {
    let status = Command::new("python3")
        .arg(repo().join("examples/jaffle_shop/generate.py"))
        .args(["--scale", &scale.to_string(), "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "generate.py failed");
    Ok(())
}

/// lh end to end: import the three raw tables, then run the pipeline, on a fresh server.
fn lh_end_to_end(lh: &Path, env_cache: &Path, data: &Path) -> Result<(Duration, Duration, Server)> {
    let s = start(lh, env_cache)?;
    let t0 = Instant::now();
    for t in ["customers", "orders", "payments"] {
        let f = data.join(format!("{t}.csv"));
        lh_run(
            lh,
            &s,
            &[
                "table",
                "import",
                &format!("raw.{t}"),
                f.to_str().context("path")?,
            ],
        )?;
    }
    let import = t0.elapsed();
    let project = repo().join("examples/jaffle_shop");
    lh_run(
        lh,
        &s,
        &["run", project.to_str().context("path")?, "--no-cache"],
    )?;
    Ok((t0.elapsed(), import, s))
}

/// dbt build (seeds, models, tests) of the peer project with the same data as seeds.
fn dbt_build(dbt: &Path, data: &Path) -> Result<Duration> {
    let dir = tempfile::tempdir()?;
    let peer = repo()
        .parent()
        .context("repo parent")?
        .join("shared/peers/jaffle_shop_dbt");
    let peer = if peer.exists() {
        peer
    } else {
        PathBuf::from("../shared/peers/jaffle_shop_dbt")
    };
    lh_bench::copy_dir(&peer, dir.path())?;
    for t in ["customers", "orders", "payments"] {
        std::fs::copy(
            data.join(format!("{t}.csv")),
            dir.path().join(format!("seeds/raw_{t}.csv")),
        )?;
    }
    let start = Instant::now();
    let out = Command::new(dbt)
        .args(["build", "--no-version-check"])
        .current_dir(dir.path())
        .env("DBT_PROFILES_DIR", dir.path())
        .env("DBT_SEND_ANONYMOUS_USAGE_STATS", "False")
        .output()?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "dbt build failed:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(took)
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let lh = lh_bin()?;
    let dbt = PathBuf::from(
        std::env::var("LH_DBT")
            .context("LH_DBT must name a dbt with dbt-duckdb (make bench installs one)")?,
    );
    let env_cache = cache_dir().join("bench-envs");
    println!(
        "pipeline-bench: {} rounds at scale 1, 1 at scale {}, {}",
        args.rounds,
        args.big_scale,
        chrono::Utc::now().format("%Y-%m-%d")
    );

    // Warm-up: build the environment and uv's cache, outside the timings.
    let scratch = tempfile::tempdir()?;
    let small = scratch.path().join("s1");
    generate(1.0, &small)?;
    drop(lh_end_to_end(&lh, &env_cache, &small)?);
    dbt_build(&dbt, &small)?;

    println!(
        "\n### The jaffle shop end to end, scale 1 (100 customers, 99 orders), median of {}\n",
        args.rounds
    );
    let (mut lh_t, mut lh_import, mut dbt_t) = (vec![], vec![], vec![]);
    let mut last = None;
    for r in 0..args.rounds {
        let run_lh = |lh_t: &mut Vec<Duration>, lh_import: &mut Vec<Duration>| -> Result<Server> {
            let (t, i, s) = lh_end_to_end(&lh, &env_cache, &small)?;
            lh_t.push(t);
            lh_import.push(i);
            Ok(s)
        };
        if r % 2 == 0 {
            last = Some(run_lh(&mut lh_t, &mut lh_import)?);
            dbt_t.push(dbt_build(&dbt, &small)?);
        } else {
            dbt_t.push(dbt_build(&dbt, &small)?);
            last = Some(run_lh(&mut lh_t, &mut lh_import)?);
        }
    }
    let (l, i, d) = (
        median(&mut lh_t),
        median(&mut lh_import),
        median(&mut dbt_t),
    );
    println!("| | seconds |\n|---|---:|");
    println!(
        "| lh: import 3 tables + `lh run` (10 nodes, none cached) | {:.2} |",
        l.as_secs_f64()
    );
    println!("| of which the imports | {:.2} |", i.as_secs_f64());
    println!(
        "| dbt build (3 seeds, 5 models, 20 tests) | {:.2} |",
        d.as_secs_f64()
    );
    println!(
        "| **ratio lh / dbt** | **{:.2}x** |",
        l.as_secs_f64() / d.as_secs_f64()
    );

    // Re-running the unchanged pipeline: every model cached.
    let s = last.context("a server")?;
    let project = repo().join("examples/jaffle_shop");
    let mut cached = Samples::new();
    for _ in 0..10 {
        let (t, _) = lh_run(&lh, &s, &["run", project.to_str().context("path")?])?;
        cached.push(t);
    }
    println!(
        "\n### Re-running the unchanged jaffle shop (every model cached), `lh run` wall time\n"
    );
    println!("| p50 ms | p90 ms | runs |\n|---:|---:|---:|");
    println!(
        "| {} | {} | {} |",
        ms(cached.percentile(50.0)),
        ms(cached.percentile(90.0)),
        cached.len()
    );

    // One warm Python node that returns its input.
    let proj = scratch.path().join("identity");
    std::fs::create_dir_all(&proj)?;
    std::fs::write(
        proj.join("lh_project.yml"),
        "name: identity\nnamespace: bench\npython: \"3.11\"\n",
    )?;
    std::fs::write(
        proj.join("m.py"),
        "import lh\n\n@lh.model()\ndef copy(t=lh.Model(\"raw.customers\")):\n    return t\n",
    )?;
    let mut node = Samples::new();
    let mut wall = Samples::new();
    for i in 0..21 {
        let (t, out) = lh_run(
            &lh,
            &s,
            &[
                "run",
                proj.to_str().context("path")?,
                "--no-cache",
                "-o",
                "json",
            ],
        )?;
        if i == 0 {
            continue; // the cold start
        }
        let v: serde_json::Value = serde_json::from_str(&out)?;
        let n = &v["nodes"][0];
        let start =
            chrono::DateTime::parse_from_rfc3339(n["started_at"].as_str().context("start")?)?;
        let end = chrono::DateTime::parse_from_rfc3339(n["finished_at"].as_str().context("end")?)?;
        node.push((end - start).to_std()?);
        wall.push(t);
    }
    println!(
        "\n### One warm Python node returning its input (100 rows): the node's time in the run, and the whole `lh run`\n"
    );
    println!("| | p50 ms | p90 ms | runs |\n|---|---:|---:|---:|");
    println!(
        "| node (inputs out, call, output in, commit) | {} | {} | {} |",
        ms(node.percentile(50.0)),
        ms(node.percentile(90.0)),
        node.len()
    );
    println!(
        "| `lh run` wall time | {} | {} | {} |",
        ms(wall.percentile(50.0)),
        ms(wall.percentile(90.0)),
        wall.len()
    );
    drop(s);

    // At scale: millions of rows.
    let big = scratch.path().join("big");
    generate(args.big_scale, &big)?;
    let rows: usize = ["customers", "orders", "payments"]
        .iter()
        .map(|t| {
            std::fs::read_to_string(big.join(format!("{t}.csv")))
                .map(|s| s.lines().count() - 1)
                .unwrap_or(0)
        })
        .sum();
    let (l, i, _s) = lh_end_to_end(&lh, &env_cache, &big)?;
    let d = dbt_build(&dbt, &big)?;
    println!(
        "\n### The jaffle shop end to end, scale {} ({rows} raw rows), one round\n",
        args.big_scale
    );
    println!("| | seconds |\n|---|---:|");
    println!("| lh: import + `lh run` | {:.2} |", l.as_secs_f64());
    println!("| of which the imports | {:.2} |", i.as_secs_f64());
    println!("| dbt build | {:.2} |", d.as_secs_f64());
    println!(
        "| **ratio lh / dbt** | **{:.2}x** |",
        l.as_secs_f64() / d.as_secs_f64()
    );
    Ok(())
}
