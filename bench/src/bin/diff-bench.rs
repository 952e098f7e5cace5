//! Row-level diffs and bisect, for BENCHMARKS.md:
//!
//! - diff: TPC-H lineitem (scale `--scale`) imported partitioned by month of
//!   `l_shipdate`; on a branch, one month is overwritten with a changed copy of its rows
//!   (about 1% of the table: some quantities updated, some rows deleted, some added).
//!   `lh diff main change --table tpch.lineitem` (with and without a key, which read only
//!   the files the versions do not share) against DuckDB's full `EXCEPT ALL` of the two
//!   versions' data files both ways (in-process, the same DuckDB version as lh's), and
//!   against lh's own `--full` comparison; the runs take turns, median of `--rounds`;
//! - bisect: `--commits` appends to a table with a bad row planted in one of them, and
//!   `lh bisect` over them, with a SQL check and with a project's expectation: checks
//!   run (at most ceil(log2 n) + 1) and wall time.
//!
//! ```text
//! diff-bench [--scale 1] [--rounds 5] [--commits 1000]
//! ```
//!
//! Needs the `lh` binary next to this one, and `tpchgen-cli` for the data.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lh_bench::{Server, arg, lh_bin, median, ms, tpch_data};
use serde_json::Value;

fn main() -> Result<()> {
    let scale = arg("--scale", 1)?.to_string();
    let rounds = arg("--rounds", 5)?;
    let commits = arg("--commits", 1000)?;
    // `--bisect-only`: the bisect part alone (no TPC-H data).
    let bisect_only = std::env::args().any(|a| a == "--bisect-only");
    let lh = lh_bin()?;
    let server = Server::start(&lh, None, &[])?;
    if !bisect_only {
        let data = tpch_data(&scale)?;
        diff(&lh, &server, &data, &scale, rounds)?;
    }
    bisect(&lh, &server, commits)?;
    Ok(())
}

fn run(lh: &Path, server: &Server, args: &[&str]) -> Result<String> {
    let out = server.lh(lh, args).output()?;
    if !out.status.success() {
        bail!(
            "lh {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The Parquet files under `dir`, sorted.
fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn list(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| format!("'{}'", f.display()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn diff(lh: &Path, server: &Server, data: &Path, scale: &str, rounds: usize) -> Result<()> {
    let lineitem = data.join("lineitem.parquet");
    let scratch = tempfile::tempdir()?;
    let before_import = parquet_files(&server.data);
    run(
        lh,
        server,
        &[
            "table",
            "import",
            "tpch.lineitem",
            lineitem.to_str().context("path")?,
            "--partition-by",
            "month(l_shipdate)",
        ],
    )?;
    let version_a: Vec<PathBuf> = parquet_files(&server.data)
        .into_iter()
        .filter(|f| !before_import.contains(f))
        .collect();
    run(lh, server, &["branch", "create", "change"])?;

    // One month, changed: 1 in 10 quantities up by one, line 7 of every order gone,
    // and new lines 8 for 1 in 50 orders.
    let month = scratch.path().join("month.parquet");
    let duck = duckdb::Connection::open_in_memory()?;
    duck.execute_batch(&format!(
        "COPY (
           WITH m AS (FROM read_parquet('{src}')
                      WHERE l_shipdate >= DATE '1995-06-01' AND l_shipdate < DATE '1995-07-01')
           SELECT * REPLACE (CASE WHEN l_orderkey % 10 = 0 THEN CAST(l_quantity + 1 AS DECIMAL(15, 2))
                             ELSE l_quantity END AS l_quantity)
           FROM m WHERE l_linenumber <> 7
           UNION ALL
           SELECT * REPLACE (8 AS l_linenumber) FROM m
           WHERE l_linenumber = 1 AND l_orderkey % 50 = 0
         ) TO '{dst}' (FORMAT parquet)",
        src = lineitem.display(),
        dst = month.display()
    ))?;
    let month_rows: i64 = duck.query_row(
        &format!("SELECT count(*) FROM '{}'", month.display()),
        [],
        |r| r.get(0),
    )?;
    let total: i64 = duck.query_row(
        &format!("SELECT count(*) FROM '{}'", lineitem.display()),
        [],
        |r| r.get(0),
    )?;
    let before_change = parquet_files(&server.data);
    run(
        lh,
        server,
        &[
            "table",
            "import",
            "tpch.lineitem",
            month.to_str().context("path")?,
            "--mode",
            "overwrite-partitions",
            "--ref",
            "change",
        ],
    )?;
    let added: Vec<PathBuf> = parquet_files(&server.data)
        .into_iter()
        .filter(|f| !before_change.contains(f))
        .collect();
    // The month's file(s) of version A: those holding its rows.
    let replaced: Vec<PathBuf> = {
        let mut stmt = duck.prepare(&format!(
            "SELECT DISTINCT filename FROM read_parquet([{}], filename = true)
             WHERE l_shipdate >= DATE '1995-06-01' AND l_shipdate < DATE '1995-07-01'",
            list(&version_a)
        ))?;
        stmt.query_map([], |r| r.get::<_, String>(0))?
            .map(|r| r.map(PathBuf::from))
            .collect::<std::result::Result<_, _>>()?
    };
    if replaced.is_empty() || added.is_empty() {
        bail!("cannot tell the month's files apart: replaced {replaced:?}, added {added:?}");
    }
    let version_b: Vec<PathBuf> = version_a
        .iter()
        .filter(|f| !replaced.contains(f))
        .chain(&added)
        .cloned()
        .collect();

    let api = |key: Option<&str>, full: bool| -> Result<(Duration, Value)> {
        let mut url = format!(
            "{}/api/v1/diff/rows?from=main&to=change&table=tpch.lineitem&limit=10",
            server.url
        );
        if let Some(k) = key {
            url.push_str(&format!("&key={k}"));
        }
        if full {
            url.push_str("&full=true");
        }
        let start = Instant::now();
        let mut res = ureq::get(&url)
            .header("Authorization", &format!("Bearer {}", server.token()?))
            .call()?;
        let v: Value = serde_json::from_slice(&res.body_mut().read_to_vec()?)?;
        Ok((start.elapsed(), v))
    };
    let duckdb_full = || -> Result<(Duration, (i64, i64))> {
        let c = duckdb::Connection::open_in_memory()?;
        let (a, b) = (list(&version_a), list(&version_b));
        let start = Instant::now();
        let counts = c.query_row(
            &format!(
                "SELECT (SELECT count(*) FROM (FROM read_parquet([{b}]) EXCEPT ALL FROM read_parquet([{a}]))),
                        (SELECT count(*) FROM (FROM read_parquet([{a}]) EXCEPT ALL FROM read_parquet([{b}])))"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok((start.elapsed(), counts))
    };

    let (mut keyed, mut nokey, mut full, mut duck_t) = (vec![], vec![], vec![], vec![]);
    let mut answers = None;
    for _ in 0..rounds {
        let (t, k) = api(Some("l_orderkey,l_linenumber"), false)?;
        keyed.push(t);
        let (t, n) = api(None, false)?;
        nokey.push(t);
        let (t, f) = api(None, true)?;
        full.push(t);
        let (t, d) = duckdb_full()?;
        duck_t.push(t);
        answers = Some((k, n, f, d));
    }
    let (k, n, f, d) = answers.context("no rounds")?;
    let counts = |v: &Value| {
        (
            v["counts"]["added"].as_i64(),
            v["counts"]["removed"].as_i64(),
        )
    };
    if counts(&n) != (Some(d.0), Some(d.1)) || counts(&f) != counts(&n) {
        bail!(
            "the answers differ: lh {:?}, lh --full {:?}, DuckDB {d:?}",
            counts(&n),
            counts(&f)
        );
    }
    let (keyed, nokey, full, duck_t) = (
        median(&mut keyed),
        median(&mut nokey),
        median(&mut full),
        median(&mut duck_t),
    );
    let ratio = |t: Duration| t.as_secs_f64() / duck_t.as_secs_f64();
    println!(
        "\n### Row diff: TPC-H SF{scale} lineitem ({total} rows, {} files by month), one month \
         overwritten ({month_rows} rows, {:.2}% of the table), median of {rounds}\n",
        version_a.len(),
        100.0 * month_rows as f64 / total as f64
    );
    println!(
        "changes found: {} changed, {} added, {} removed with the key; {} added, {} removed \
         without; data files read: {} of {} (diff), {} (--full)\n",
        k["counts"]["changed"],
        k["counts"]["added"],
        k["counts"]["removed"],
        d.0,
        d.1,
        n["scan"]["files_read"],
        version_a.len() + version_b.len(),
        f["scan"]["files_read"]
    );
    println!("| comparison | time (ms) | against DuckDB's full EXCEPT ALL |");
    println!("|---|---:|---:|");
    println!(
        "| DuckDB: full `EXCEPT ALL` both ways, all files of both versions | {} | 1.00x |",
        ms(duck_t)
    );
    println!(
        "| `lh diff --table` (no key): shared files skipped | {} | **{:.2}x** |",
        ms(nokey),
        ratio(nokey)
    );
    println!(
        "| `lh diff --table --key l_orderkey,l_linenumber` | {} | **{:.2}x** |",
        ms(keyed),
        ratio(keyed)
    );
    println!(
        "| `lh diff --table --full` (every file) | {} | {:.2}x |",
        ms(full),
        ratio(full)
    );
    Ok(())
}

fn bisect(lh: &Path, server: &Server, commits: usize) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let ok = scratch.path().join("ok.csv");
    let bad = scratch.path().join("bad.csv");
    std::fs::write(&ok, "id,amount\n1,10.0\n")?;
    std::fs::write(&bad, "id,amount\n2,-5.0\n")?;
    let p = |f: &PathBuf| f.to_str().map(String::from).context("path");
    run(lh, server, &["table", "import", "b.t", &p(&ok)?])?;
    run(lh, server, &["tag", "create", "good"])?;
    let planted = commits * 2 / 3 + 1;
    let start = Instant::now();
    for i in 1..=commits {
        let f = if i == planted { &bad } else { &ok };
        run(
            lh,
            server,
            &["table", "import", "b.t", &p(f)?, "--mode", "append"],
        )?;
    }
    let made = start.elapsed();
    let start = Instant::now();
    let out = run(
        lh,
        server,
        &[
            "bisect",
            "b.t",
            "--good",
            "good",
            "--check",
            "SELECT count(*) = 0 FROM b.t WHERE amount < 0",
            "-o",
            "json",
        ],
    )?;
    let took = start.elapsed();
    let v: Value = serde_json::from_str(&out)?;
    let checks = v["checks"].as_array().map_or(0, |c| c.len());
    // The same search with a project's expectation as the check: one check run a step.
    let project = scratch.path().join("guard");
    std::fs::create_dir_all(&project)?;
    std::fs::write(
        project.join("lh_project.yml"),
        "name: guard\nnamespace: b\npython: \"3.11\"\n",
    )?;
    std::fs::write(
        project.join("checks.py"),
        "import lh\nimport pyarrow.compute as pc\n\n\n@lh.expectation()\n\
         def positive(t=lh.Model(\"b.t\", columns=[\"amount\"])):\n    \
         return (pc.sum(pc.less(t.column(\"amount\"), 0)).as_py() or 0) == 0\n",
    )?;
    let expectation = format!("{}:positive", p(&project.join("checks.py"))?);
    let start = Instant::now();
    let out = run(
        lh,
        server,
        &[
            "bisect",
            "b.t",
            "--good",
            "good",
            "--expectation",
            &expectation,
            "-o",
            "json",
        ],
    )?;
    let took_e = start.elapsed();
    let e: Value = serde_json::from_str(&out)?;
    anyhow::ensure!(
        e["first_bad"]["id"] == v["first_bad"]["id"],
        "the expectation found another commit: {e}"
    );
    let checks_e = e["checks"].as_array().map_or(0, |c| c.len());
    let bound = (commits as f64).log2().ceil() as usize + 1;
    println!("\n### Bisect over {commits} commits that changed one table\n");
    println!(
        "| commits | check | checks | bound ceil(log2 n) + 1 | wall time of `lh bisect` (ms) |"
    );
    println!("|---:|---|---:|---:|---:|");
    println!(
        "| {commits} | `--check SQL` | {checks} | {bound} | {} |",
        ms(took)
    );
    println!(
        "| {commits} | `--expectation` (a check run a step) | {checks_e} | {bound} | {} |",
        ms(took_e)
    );
    println!(
        "\n(the {commits} appends took {:.1} s; the planted commit was #{planted}, found: {})",
        made.as_secs_f64(),
        v["first_bad"]["message"]
    );
    Ok(())
}
