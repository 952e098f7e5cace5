//! The S3 benchmark of BENCHMARKS.md: the same work on a local-folder warehouse and on
//! an S3 warehouse (Garage on loopback), in one run.
//!
//! - import of TPC-H `lineitem` from Parquet (`lh table import`), median of the rounds;
//! - the 22 TPC-H queries through `lh query`: on S3, once with a cold read cache (the
//!   server restarted with its cache emptied: every table's first query fetches its
//!   files), then warm (best of the rounds); local: best of the rounds;
//! - the jaffle shop end to end (import of its three tables and `lh run --no-cache`),
//!   median of the rounds.
//!
//!     s3-bench [--scale 1] [--rounds 3]
//!
//! Needs Garage (`scripts/services.sh garage`, which `make bench-s3` runs), `tpchgen-cli`
//! on PATH and the `lh` binary next to this one.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lh_bench::{Server, TABLES, cache_dir, lh_bin, median, tpch_data};

struct Args {
    scale: String,
    rounds: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        scale: "1".into(),
        rounds: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--scale" => a.scale = value,
            "--rounds" => a.rounds = value.parse()?,
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(a)
}

/// Where a server keeps its tables.
#[derive(Clone)]
enum Where {
    Local,
    S3 {
        url: String,
        env: Vec<(String, String)>,
    },
}

impl Where {
    fn garage(prefix: &str) -> Result<Where> {
        let get = |k: &str| {
            std::env::var(k).with_context(|| {
                format!("{k} is not set: start Garage with scripts/services.sh garage")
            })
        };
        Ok(Where::S3 {
            url: format!("s3://{}/{prefix}", get("LH_TEST_GARAGE_BUCKET")?),
            env: vec![
                ("AWS_ACCESS_KEY_ID".into(), get("LH_TEST_GARAGE_KEY")?),
                (
                    "AWS_SECRET_ACCESS_KEY".into(),
                    get("LH_TEST_GARAGE_SECRET")?,
                ),
                ("AWS_ENDPOINT_URL".into(), get("LH_TEST_GARAGE_ENDPOINT")?),
                ("AWS_REGION".into(), "garage".into()),
            ],
        })
    }

    fn start(&self, lh: &Path, dir: &Path, extra: &[&str]) -> Result<Server> {
        match self {
            Where::Local => Server::start(lh, Some(dir), extra),
            Where::S3 { url, env } => {
                let mut args = vec!["--warehouse", url.as_str(), "--s3-path-style"];
                args.extend_from_slice(extra);
                Server::start_with_env(lh, Some(dir), &args, env)
            }
        }
    }
}

fn timed_lh(lh: &Path, server: &Server, args: &[&str]) -> Result<Duration> {
    let start = Instant::now();
    let out = server
        .lh(lh, args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "lh {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(took)
}

struct Figures {
    import: Duration,
    rows: u64,
    cold: Option<Vec<Duration>>,
    warm: Vec<Duration>,
    jaffle: Duration,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo")
        .to_path_buf()
}

fn run_one(lh: &Path, w: &Where, data: &Path, jaffle: &Path, rounds: usize) -> Result<Figures> {
    let dir = tempfile::tempdir()?;
    let env_cache = cache_dir().join("bench-envs");
    let extra = ["--env-cache", env_cache.to_str().context("path")?];
    let server = w.start(lh, dir.path(), &extra)?;
    for t in TABLES {
        let f = data.join(format!("{t}.parquet"));
        timed_lh(
            lh,
            &server,
            &[
                "table",
                "import",
                &format!("tpch.{t}"),
                f.to_str().context("path")?,
            ],
        )?;
    }
    let lineitem = data.join("lineitem.parquet");
    let mut imports = Vec::new();
    for r in 0..rounds {
        imports.push(timed_lh(
            lh,
            &server,
            &[
                "table",
                "import",
                &format!("imports.lineitem_{r}"),
                lineitem.to_str().context("path")?,
            ],
        )?);
    }
    let rows = {
        let out = server
            .lh(
                lh,
                &["query", "select count(*) from tpch.lineitem", "-o", "csv"],
            )
            .output()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .context("count")?
            .trim()
            .parse()?
    };
    drop(server);

    // Queries on a fresh server: on S3 with the read cache emptied first (cold).
    let _ = std::fs::remove_dir_all(dir.path().join("data/s3/cache"));
    let server = w.start(lh, dir.path(), &extra)?;
    let qdir = repo().join("bench/tpch");
    let query = |q: usize| -> Result<Duration> {
        let file = qdir.join(format!("q{q:02}.sql"));
        timed_lh(
            lh,
            &server,
            &["query", "--file", file.to_str().expect("path"), "-o", "csv"],
        )
    };
    let cold = match w {
        Where::S3 { .. } => Some((1..=22).map(query).collect::<Result<Vec<_>>>()?),
        Where::Local => None,
    };
    let mut warm = vec![Duration::MAX; 22];
    for _ in 0..rounds {
        for (q, best) in warm.iter_mut().enumerate() {
            *best = (*best).min(query(q + 1)?);
        }
    }

    // The jaffle shop: its three tables and the pipeline, once to warm the environment.
    let project = repo().join("examples/jaffle_shop");
    let mut jaffles = Vec::new();
    for r in 0..=rounds {
        let start = Instant::now();
        for t in ["customers", "orders", "payments"] {
            let f = jaffle.join(format!("{t}.csv"));
            let mode = if r == 0 { "create" } else { "replace" };
            timed_lh(
                lh,
                &server,
                &[
                    "table",
                    "import",
                    &format!("raw.{t}"),
                    f.to_str().context("path")?,
                    "--mode",
                    mode,
                ],
            )?;
        }
        timed_lh(
            lh,
            &server,
            &["run", project.to_str().context("path")?, "--no-cache"],
        )?;
        if r > 0 {
            jaffles.push(start.elapsed());
        }
    }
    Ok(Figures {
        import: median(&mut imports),
        rows,
        cold,
        warm,
        jaffle: median(&mut jaffles),
    })
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let lh = lh_bin()?;
    let data = tpch_data(&args.scale)?;
    let scratch = tempfile::tempdir()?;
    let jaffle = scratch.path().join("jaffle");
    let status = std::process::Command::new("python3")
        .arg(repo().join("examples/jaffle_shop/generate.py"))
        .args(["--scale", "1", "--out"])
        .arg(&jaffle)
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "generate.py failed");
    let prefix = format!(
        "bench-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs()
    );
    println!(
        "s3-bench: TPC-H scale {}, {} rounds, local folder against Garage on loopback, {}",
        args.scale,
        args.rounds,
        chrono::Utc::now().format("%Y-%m-%d")
    );
    let local = run_one(&lh, &Where::Local, &data, &jaffle, args.rounds)?;
    let s3 = run_one(&lh, &Where::garage(&prefix)?, &data, &jaffle, args.rounds)?;

    let secs = |d: Duration| d.as_secs_f64();
    println!(
        "\n### Import of lineitem ({} rows), median of {}\n",
        local.rows, args.rounds
    );
    println!("| warehouse | seconds | rows/s |\n|---|---:|---:|");
    for (name, f) in [("local folder", &local), ("S3 (Garage)", &s3)] {
        println!(
            "| {name} | {:.2} | {:.0} |",
            secs(f.import),
            f.rows as f64 / secs(f.import)
        );
    }
    println!(
        "| S3 / local (rows/s) | | **{:.2}x** |",
        secs(local.import) / secs(s3.import)
    );

    println!("\n### The 22 TPC-H queries through `lh query` (ms, process start to last row)\n");
    println!(
        "| query | local, best of {r} | S3 warm, best of {r} | S3 / local | S3 cold (first after start) |\n|---|---:|---:|---:|---:|",
        r = args.rounds
    );
    let cold = s3.cold.clone().unwrap_or_default();
    for q in 0..22 {
        println!(
            "| Q{:02} | {:.1} | {:.1} | {:.2}x | {:.1} |",
            q + 1,
            secs(local.warm[q]) * 1e3,
            secs(s3.warm[q]) * 1e3,
            secs(s3.warm[q]) / secs(local.warm[q]),
            cold.get(q).map_or(0.0, |d| secs(*d) * 1e3)
        );
    }
    let total = |v: &[Duration]| v.iter().map(|d| secs(*d)).sum::<f64>();
    println!(
        "| **all 22** | {:.0} | {:.0} | **{:.2}x** | {:.0} |",
        total(&local.warm) * 1e3,
        total(&s3.warm) * 1e3,
        total(&s3.warm) / total(&local.warm),
        total(&cold) * 1e3
    );

    println!(
        "\n### The jaffle shop end to end (import + `lh run --no-cache`), median of {}\n",
        args.rounds
    );
    println!("| warehouse | seconds |\n|---|---:|");
    println!("| local folder | {:.2} |", secs(local.jaffle));
    println!("| S3 (Garage) | {:.2} |", secs(s3.jaffle));
    println!(
        "| S3 / local | **{:.2}x** |",
        secs(s3.jaffle) / secs(local.jaffle)
    );
    Ok(())
}
