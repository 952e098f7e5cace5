//! Partitioned tables and maintenance, for BENCHMARKS.md, in one run against one server:
//!
//! - pruning: a one-day query on a table of 365 daily partitions (one file each), and
//!   the same query on the same table with pruning defeated (the table read through a
//!   subquery): data files read (the `x-lh-files-read` header) and p50 time;
//!   the queries compared take turns (see [`Api::p50s`]);
//! - small appends: a table grown by `--appends` imports of `--rows` rows each, queried
//!   (a full aggregate) against the same rows imported as one file, before and after
//!   `lh table compact`; with `--auto-compact N`, again on a second server started with
//!   `--auto-compact-files N`, grown by `--auto-appends` imports (with `--expire-every
//!   K`, that server keeps `main`'s commits 10 s, and the table's snapshots older than
//!   that are expired every K appends: each append writes a metadata file listing every
//!   snapshot kept, so without expiry the warehouse grows with the square of the
//!   appends);
//! - concurrent appends: eight writers appending `--each` times at once to one table
//!   (each rebased onto the others when it finds the table moved) against one writer
//!   appending as many times in a row: appends per second, and every row landed.
//!
//! ```text
//! table-bench [--days 365] [--rows-per-day 1000] [--appends 1000] [--rows 20]
//!             [--each 25] [--queries 100] [--auto-compact 0] [--auto-appends N]
//!             [--expire-every 0]
//! ```
//!
//! Needs the `lh` binary next to this one.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lh_bench::{Samples, Server, arg, lh_bin, ms};
use serde_json::{Value, json};

struct Api {
    url: String,
    token: String,
    agent: ureq::Agent,
}

impl Api {
    fn post(&self, path: &str, body: Value) -> Result<(Vec<u8>, Option<String>)> {
        let mut res = self
            .agent
            .post(&format!("{}{path}", self.url))
            .header("Authorization", &format!("Bearer {}", self.token))
            .config()
            .http_status_as_error(false)
            .build()
            .send_json(body)?;
        let files = res
            .headers()
            .get(lh_api::FILES_READ_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let status = res.status();
        let bytes = res.body_mut().with_config().limit(1 << 30).read_to_vec()?;
        if !status.is_success() {
            bail!("POST {path}: {status}: {}", String::from_utf8_lossy(&bytes));
        }
        Ok((bytes, files))
    }

    /// Imports `csv` into `table` (`mode`: create, append...).
    fn import(
        &self,
        table: &str,
        csv: &[u8],
        mode: &str,
        partition_by: Option<&str>,
    ) -> Result<Value> {
        let mut res = self
            .agent
            .post(&format!("{}/api/v1/uploads?name=rows.csv", self.url))
            .header("Authorization", &format!("Bearer {}", self.token))
            .send(csv)?;
        let upload: Value = res.body_mut().read_json()?;
        let id = upload["id"].as_str().context("upload id")?;
        let mut body =
            json!({"ref": "main", "mode": mode, "uploads": [id], "file_names": ["rows.csv"]});
        if let Some(p) = partition_by {
            body["partition_by"] = json!(p);
        }
        let (bytes, _) = self.post(&format!("/api/v1/tables/{table}/import"), body)?;
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Runs `sql` on main: its time and the data files it read.
    fn query(&self, sql: &str) -> Result<(Duration, u64)> {
        let start = Instant::now();
        let (_, files) = self.post("/api/v1/query", json!({"sql": sql, "ref": "main"}))?;
        Ok((
            start.elapsed(),
            files.and_then(|f| f.parse().ok()).unwrap_or(0),
        ))
    }

    /// p50 of `n` runs of each of `sqls` (after two warm-ups), and the files each read.
    /// The statements take turns, so that a change in the machine's speed while they
    /// run (other tenants, a background compaction) weighs on each alike.
    fn p50s(&self, sqls: &[&str], n: usize) -> Result<Vec<(Duration, u64)>> {
        let mut samples: Vec<Samples> = sqls.iter().map(|_| Samples::new()).collect();
        let mut files = vec![0; sqls.len()];
        for i in 0..n + 2 {
            for (k, sql) in sqls.iter().enumerate() {
                let (d, f) = self.query(sql)?;
                files[k] = f;
                if i >= 2 {
                    samples[k].push(d);
                }
            }
        }
        Ok(samples
            .iter()
            .zip(files)
            .map(|(s, f)| (s.percentile(50.0), f))
            .collect())
    }

    fn count(&self, table: &str) -> Result<u64> {
        let (bytes, _) = self.post(
            "/api/v1/query",
            json!({"sql": format!("SELECT count(*) AS n FROM {table}"), "ref": "main"}),
        )?;
        let mut reader =
            arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
        let batch = reader.next().context("no count")??;
        let col = batch
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .context("count is a BIGINT")?;
        Ok(col.value(0) as u64)
    }
}

fn rows(from: u64, n: u64, day0: chrono::NaiveDate, per_day: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity((n * 48) as usize);
    writeln!(out, "id,ts,amount,note").unwrap();
    for i in from..from + n {
        let day = day0 + chrono::Duration::days((i / per_day) as i64);
        let secs = (i % per_day) * 86_399 / per_day.max(1);
        writeln!(
            out,
            "{i},{day} {:02}:{:02}:{:02},{}.{:02},n{}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            i % 1000,
            i % 100,
            i % 7
        )
        .unwrap();
    }
    out
}

/// The rows of the small appends, and the queries of each measure.
struct Shape {
    small: u64,
    day0: chrono::NaiveDate,
    per_day: u64,
    queries: usize,
}

/// Grows `raw.small` by `appends` imports of `small` rows and queries it (a full
/// aggregate) against the same rows imported as one file, before and after `lh table
/// compact`; `auto` names the server's auto-compaction setting.
fn small_appends(
    api: &Api,
    appends: u64,
    shape: &Shape,
    auto: &str,
    expire_every: u64,
) -> Result<()> {
    let &Shape {
        small,
        day0,
        per_day,
        queries,
    } = shape;
    let started = Instant::now();
    let mut expired = 0u64;
    for i in 0..appends {
        if expire_every > 0 && i > 0 && i % expire_every == 0 {
            let (r, _) = api.post(
                "/api/v1/tables/raw.small/expire",
                json!({"ref": "main", "older_than_secs": EXPIRE_AFTER_SECS}),
            )?;
            let r: Value = serde_json::from_slice(&r)?;
            expired += r["expired"].as_u64().unwrap_or(0);
        }
        let mode = if i == 0 { "create" } else { "append" };
        api.import(
            "raw.small",
            &rows(i * small, small, day0, per_day),
            mode,
            None,
        )?;
        if (i + 1) % 1000 == 0 {
            eprintln!(
                "  {} appends, {:.1} s",
                i + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let append_time = started.elapsed();
    api.import(
        "raw.one",
        &rows(0, appends * small, day0, per_day),
        "create",
        None,
    )?;
    let agg = |t: &str| format!("SELECT count(*), sum(amount), count(DISTINCT note) FROM {t}");
    let (one, small_table) = (agg("raw.one"), agg("raw.small"));
    let pair = |api: &Api| -> Result<(Duration, Duration, u64)> {
        let m = api.p50s(&[&one, &small_table], queries)?;
        Ok((m[0].0, m[1].0, m[1].1))
    };
    let (one_before, before, before_files) = pair(api)?;
    let started = Instant::now();
    let (compacted, _) = api.post("/api/v1/tables/raw.small/compact", json!({"ref": "main"}))?;
    let compact_time = started.elapsed();
    let compacted: Value = serde_json::from_slice(&compacted)?;
    let (one_after, after, after_files) = pair(api)?;
    if api.count("raw.small")? != appends * small {
        bail!("the compacted table lost rows");
    }
    println!(
        "| full aggregate over {} rows (auto-compaction {auto}) | data files | p50 | one file, alongside | against one file |",
        appends * small
    );
    println!("|---|---:|---:|---:|---:|");
    for (name, files, d, one) in [
        (
            format!("{appends} small appends"),
            before_files,
            before,
            one_before,
        ),
        (
            "after `lh table compact`".to_string(),
            after_files,
            after,
            one_after,
        ),
    ] {
        println!(
            "| {name} | {files} | {} ms | {} ms | {:.2}x |",
            ms(d),
            ms(one),
            d.as_secs_f64() / one.as_secs_f64()
        );
    }
    println!(
        "\n{appends} appends took {:.1} s ({} ms each); the compaction {} ms ({} files into {})",
        append_time.as_secs_f64(),
        ms(append_time / appends.max(1) as u32),
        ms(compact_time),
        compacted["files_before"],
        compacted["files_after"]
    );
    if expire_every > 0 {
        println!(
            "`lh table expire --older-than {EXPIRE_AFTER_SECS}s` every {expire_every} appends: {expired} snapshots expired"
        );
    }
    println!();
    Ok(())
}

/// With `--expire-every N`: how long `main` keeps its commits on the auto-compacting
/// server, and what each expiry removes.
const EXPIRE_AFTER_SECS: u64 = 10;

fn main() -> Result<()> {
    let days = arg("--days", 365)? as u64;
    let per_day = arg("--rows-per-day", 1000)? as u64;
    let appends = arg("--appends", 1000)? as u64;
    let small = arg("--rows", 20)? as u64;
    let each = arg("--each", 25)? as u64;
    let auto_compact = arg("--auto-compact", 0)?;
    let auto_appends = arg("--auto-appends", appends as usize)? as u64;
    let expire_every = arg("--expire-every", 0)? as u64;
    let queries = arg("--queries", 100)?;
    let lh = lh_bin()?;
    let server = Server::start(&lh, None, &[])?;
    let api = Api {
        url: server.url.clone(),
        token: server.token()?,
        agent: ureq::Agent::config_builder().build().into(),
    };
    let day0 = chrono::NaiveDate::from_ymd_opt(2026, 1, 1).context("date")?;
    println!(
        "table-bench: {days} days x {per_day} rows; {appends} appends of {small} rows; 8 writers x {each} appends; {}\n",
        chrono::Utc::now().format("%Y-%m-%d")
    );

    // Pruning.
    let all = rows(0, days * per_day, day0, per_day);
    let r = api.import("raw.daily", &all, "create", Some("day(ts)"))?;
    let day = day0 + chrono::Duration::days((days / 2) as i64);
    let next = day + chrono::Duration::days(1);
    let filter = format!("ts >= '{day}' AND ts < '{next}'");
    let pruned_sql = format!("SELECT count(*), sum(amount) FROM raw.daily WHERE {filter}");
    let full_sql =
        format!("SELECT count(*), sum(amount) FROM (SELECT * FROM raw.daily) WHERE {filter}");
    let m = api.p50s(&[&pruned_sql, &full_sql], queries)?;
    let ((pruned, pruned_files), (full, full_files)) = (m[0], m[1]);
    println!(
        "| one-day query, {} partitions | data files read | p50 |",
        r["partitions"]
    );
    println!("|---|---:|---:|");
    println!(
        "| pruned by the query's filter | {pruned_files} | {} ms |",
        ms(pruned)
    );
    println!(
        "| whole table (pruning defeated) | {full_files} | {} ms |",
        ms(full)
    );
    println!(
        "\nfiles read: {:.4} of the table's; time: {:.2}x\n",
        pruned_files as f64 / full_files.max(1) as f64,
        pruned.as_secs_f64() / full.as_secs_f64()
    );

    // Small appends against one file, before and after compaction: auto-compaction
    // off, then (with `--auto-compact N`) on a second server that compacts by itself.
    let shape = Shape {
        small,
        day0,
        per_day,
        queries,
    };
    small_appends(&api, appends, &shape, "off", 0)?;
    if auto_compact > 0 {
        let limit = auto_compact.to_string();
        let retain = format!("main={EXPIRE_AFTER_SECS}s");
        let mut args = vec!["--auto-compact-files", &limit];
        if expire_every > 0 {
            args.extend(["--retain", &retain]);
        }
        let server = Server::start(&lh, None, &args)?;
        let auto = Api {
            url: server.url.clone(),
            token: server.token()?,
            agent: ureq::Agent::config_builder().build().into(),
        };
        small_appends(
            &auto,
            auto_appends,
            &shape,
            &format!("on, at more than {auto_compact} small files"),
            expire_every,
        )?;
    }

    // Concurrent appends.
    let one_row = |i: u64| rows(i, 1, day0, per_day);
    api.import("raw.serial", &one_row(0), "create", Some("day(ts)"))?;
    api.import("raw.shared", &one_row(0), "create", Some("day(ts)"))?;
    let total = 8 * each;
    let started = Instant::now();
    for i in 0..total {
        api.import("raw.serial", &one_row(1 + i), "append", None)?;
    }
    let serial = started.elapsed();
    let started = Instant::now();
    let rebased: u64 = std::thread::scope(|s| -> Result<u64> {
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let api = &api;
                let one_row = &one_row;
                s.spawn(move || -> Result<u64> {
                    let mut rebased = 0;
                    for i in 0..each {
                        let r =
                            api.import("raw.shared", &one_row(1 + w * each + i), "append", None)?;
                        rebased += r["rebased"].as_u64().unwrap_or(0);
                    }
                    Ok(rebased)
                })
            })
            .collect();
        let mut sum = 0;
        for h in handles {
            sum += h.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
        }
        Ok(sum)
    })?;
    let concurrent = started.elapsed();
    let landed = api.count("raw.shared")?;
    if landed != total + 1 {
        bail!("{landed} rows landed of {}", total + 1);
    }
    println!("| {total} one-row appends to one table | wall time | appends/s | rebases |");
    println!("|---|---:|---:|---:|");
    println!(
        "| one writer | {:.2} s | {:.1} | 0 |",
        serial.as_secs_f64(),
        total as f64 / serial.as_secs_f64()
    );
    println!(
        "| eight writers at once | {:.2} s | {:.1} | {rebased} |",
        concurrent.as_secs_f64(),
        total as f64 / concurrent.as_secs_f64()
    );
    println!("\nall {total} concurrent appends landed ({landed} rows with the first).");
    Ok(())
}
