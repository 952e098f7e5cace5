//! Partitioned tables: lh writes every transform of the Iceberg spec, and pyiceberg
//! (recomputing each file's partition from its rows with its own transforms) and
//! DuckDB's iceberg extension read them back; partition overwrites and concurrent
//! appends through the CLI.

use std::path::Path;

use lh_e2e::Server;
use serde_json::Value;

use crate::rest::client;

/// Rows of every type a partition transform takes, around the epoch and across days.
fn rows(n: i64) -> String {
    let mut csv = String::from("id,n,d,ts,tz,s\n");
    let day0 = chrono::NaiveDate::from_ymd_opt(1969, 12, 20).unwrap();
    let ts0 = chrono::NaiveDate::from_ymd_opt(2026, 11, 1)
        .unwrap()
        .and_hms_opt(0, 30, 0)
        .unwrap();
    let words = ["alpha", "beta", "gamma", "délta", "日本語", "zeta"];
    for i in 0..n {
        let d = day0 + chrono::Duration::days(i * 13);
        let ts = ts0 + chrono::Duration::minutes(i * 97);
        csv.push_str(&format!(
            "{i},{},{d},{},{}+02:00,{}\n",
            i * 7 - 200,
            ts.format("%Y-%m-%d %H:%M:%S"),
            ts.format("%Y-%m-%d %H:%M:%S"),
            words[i as usize % words.len()]
        ));
    }
    csv
}

#[test]
fn every_transform_written_by_lh_reads_back_in_pyiceberg_and_duckdb() {
    let server = Server::start();
    let lh = server.lh();
    let n = 60;
    let csv = lh.file("every.csv", &rows(n));
    // Rows with ts in [2026-11-02, 2026-11-03): minutes 1410 to 2850 after the start.
    let day_two = (0..n)
        .filter(|i| {
            let m = 30 + i * 97;
            (1440..2880).contains(&m)
        })
        .count();
    for (table, spec) in [
        (
            "raw.every",
            "year(d), day(tz), hour(ts), bucket(8, id), truncate(10, n), truncate(2, s)",
        ),
        ("raw.daily", "day(ts), bucket(4, s), d, identity(n)"),
        (
            "raw.bytime",
            "bucket(3, ts), bucket(5, d), bucket(2, tz), month(d), year(tz)",
        ),
    ] {
        let out = lh.run(&[
            "table",
            "import",
            table,
            csv.to_str().unwrap(),
            "--partition-by",
            spec,
            "-o",
            "json",
        ]);
        let r: Value = serde_json::from_str(out.ok()).unwrap();
        assert_eq!(r["rows"], n);
        assert!(r["partitions"].as_u64().unwrap() > 1, "{r}");
        let show = lh.run(&["table", "show", table]);
        assert!(
            show.ok().contains(&format!(
                "partition {} (spec 0)",
                spec.replace("identity(n)", "n")
            )),
            "{}",
            show.ok()
        );
        // Its partitions, each with its rows, files and bytes: as many as the import
        // wrote, their rows all the table's.
        let detail: Value =
            serde_json::from_str(lh.run(&["table", "show", table, "-o", "json"]).ok()).unwrap();
        let parts = detail["partitions"].as_array().unwrap();
        assert_eq!(detail["partition_count"], r["partitions"], "{detail}");
        assert_eq!(parts.len() as u64, r["partitions"].as_u64().unwrap());
        let rows: u64 = parts.iter().map(|p| p["rows"].as_u64().unwrap()).sum();
        assert_eq!(rows, n as u64, "{detail}");
        assert!(
            parts
                .iter()
                .all(|p| p["partition"].as_str().unwrap().contains('=')
                    && p["files"].as_u64().unwrap() >= 1
                    && p["size_bytes"].as_u64().unwrap() > 0),
            "{detail}"
        );
        let first = parts[0]["partition"].as_str().unwrap();
        assert!(
            show.ok().contains(&format!("{} partitions", parts.len())) && show.ok().contains(first),
            "{}",
            show.ok()
        );
        let got = client(
            &server,
            "partitions",
            "main",
            &[table, "ts", "2026-11-02T00:00:00", "2026-11-03T00:00:00"],
        );
        assert_eq!(got["wrong"], serde_json::json!([]), "{table}: {got}");
        assert_eq!(got["rows"], n, "{table}: {got}");
        assert_eq!(got["duckdb_rows"], n, "{table}: {got}");
        assert_eq!(got["filtered"], day_two, "{table}: {got}");
        assert_eq!(got["duckdb_filtered"], day_two, "{table}: {got}");
        let rows = lh.rows(
            &format!(
                "SELECT count(*) AS c FROM {table} WHERE ts >= '2026-11-02' AND ts < '2026-11-03'"
            ),
            "main",
        );
        assert_eq!(rows[0]["c"], day_two);
        if table == "raw.daily" {
            // pyiceberg prunes by lh's partition values: a day's scan plans the day's files.
            assert!(
                got["planned_files"].as_u64().unwrap() < got["files"].as_u64().unwrap() / 2,
                "{got}"
            );
        }
    }
}

#[test]
fn overwrite_partitions_and_concurrent_appends_through_the_cli() {
    let server = Server::start();
    let lh = server.lh();
    let first = lh.file(
        "a.csv",
        "id,ts,v\n1,2026-11-01 01:00:00,a\n2,2026-11-02 01:00:00,b\n3,2026-11-03 01:00:00,c\n",
    );
    lh.run(&[
        "table",
        "import",
        "raw.e",
        first.to_str().unwrap(),
        "--partition-by",
        "day(ts)",
    ])
    .ok();
    let second = lh.file(
        "b.csv",
        "id,ts,v\n20,2026-11-02 05:00:00,x\n21,2026-11-02 06:00:00,y\n",
    );
    let out = lh.run(&[
        "table",
        "import",
        "raw.e",
        second.to_str().unwrap(),
        "--mode",
        "overwrite-partitions",
    ]);
    assert!(
        out.stderr
            .contains("overwrote partitions of raw.e on 'main': 2 rows, 1 file in 1 partition"),
        "{}",
        out.stderr
    );
    let ids: Vec<i64> = lh
        .rows("SELECT id FROM raw.e ORDER BY id", "main")
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 3, 20, 21]);

    // Eight imports at once into one table: all land, some rebased.
    let children: Vec<_> = (0..8)
        .map(|i| {
            let f = lh.file(
                &format!("c{i}.csv"),
                &format!("id,ts,v\n{},2026-11-0{} 07:00:00,p\n", 100 + i, 1 + i % 4),
            );
            lh.command(&[
                "table",
                "import",
                "raw.e",
                f.to_str().unwrap(),
                "--mode",
                "append",
                "-o",
                "json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let mut rebased = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            server.log()
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        rebased += r["rebased"].as_u64().unwrap();
    }
    let rows = lh.rows("SELECT count(*) AS c FROM raw.e", "main");
    assert_eq!(rows[0]["c"], 12);
    // Eight commits, one per import, each of one table.
    let log = lh.run(&["log", "-o", "json", "--limit", "20"]);
    let appends = log.ok().matches("append to raw.e").count();
    assert_eq!(appends, 8, "{}", log.ok());
    eprintln!("eight concurrent appends: {rebased} rebases");
}

/// A Python and a SQL model that overwrite their day's partition: each run replaces
/// only the day it computed, and the tables carry the models' partition specs.
#[test]
fn models_overwrite_only_their_partitions() {
    use crate::runs::{project, run_json, server};
    let server = server("process");
    let lh = server.lh();
    let events = lh.file(
        "events.csv",
        "id,ts,amount\n1,2026-11-01 08:00:00,10\n2,2026-11-01 09:00:00,5\n\
         3,2026-11-02 10:00:00,7\n4,2026-11-02 11:00:00,1\n5,2026-11-03 12:00:00,2\n",
    );
    lh.run(&[
        "table",
        "import",
        "raw.events",
        events.to_str().unwrap(),
        "--partition-by",
        "day(ts)",
    ])
    .ok();
    let dir = project(
        &lh,
        "daily",
        &[
            (
                "lh_project.yml",
                "name: daily\nnamespace: mart\nparameters:\n  day: {type: str}\n",
            ),
            (
                "models.py",
                r#"
import lh
import pyarrow.compute as pc

@lh.model(materialize="overwrite_partitions", partitioned_by=["day(ts)"])
def by_event(events=lh.Model("raw.events"), day=lh.Parameter("day")):
    return events.filter(pc.equal(pc.strftime(events["ts"], format="%Y-%m-%d"), day))
"#,
            ),
            (
                "daily_totals.sql",
                "-- Each day's total.\n-- lh.materialize: overwrite_partitions\n-- lh.partitioned_by: day\n\
                 SELECT CAST(ts AS DATE) AS day, sum(amount) AS total, count(*) AS n\n\
                 FROM mart.by_event GROUP BY 1\n",
            ),
        ],
    );
    let d = dir.to_str().unwrap();
    for day in ["2026-11-01", "2026-11-02"] {
        let (code, run) = run_json(&lh, &[d, "--param", &format!("day={day}")]);
        assert_eq!(code, 0, "{run}");
    }
    let totals = lh.rows(
        "SELECT CAST(day AS VARCHAR) AS day, total, n FROM mart.daily_totals ORDER BY day",
        "main",
    );
    assert_eq!(
        serde_json::Value::Array(totals),
        serde_json::json!([
            {"day": "2026-11-01", "total": 15, "n": 2},
            {"day": "2026-11-02", "total": 8, "n": 2},
        ])
    );
    // Day 2 again, after a correction: its partition alone changes.
    let fixed = lh.file(
        "fix.csv",
        "id,ts,amount\n3,2026-11-02 10:00:00,70\n4,2026-11-02 11:00:00,1\n",
    );
    lh.run(&[
        "table",
        "import",
        "raw.events",
        fixed.to_str().unwrap(),
        "--mode",
        "overwrite-partitions",
    ])
    .ok();
    let (code, run) = run_json(&lh, &[d, "--param", "day=2026-11-02"]);
    assert_eq!(code, 0, "{run}");
    let totals = lh.rows(
        "SELECT CAST(day AS VARCHAR) AS day, total FROM mart.daily_totals ORDER BY day",
        "main",
    );
    assert_eq!(
        serde_json::Value::Array(totals),
        serde_json::json!([{"day": "2026-11-01", "total": 15}, {"day": "2026-11-02", "total": 71}])
    );
    for (table, spec) in [("mart.by_event", "day(ts)"), ("mart.daily_totals", "day")] {
        let show: Value =
            serde_json::from_str(lh.run(&["table", "show", table, "-o", "json"]).ok()).unwrap();
        assert_eq!(show["partition_by"], spec, "{show}");
    }
    // A bad setting is the plan's error, with its file and line.
    std::fs::write(
        dir.join("daily_totals.sql"),
        "-- lh.materialize: upsert\nSELECT 1 AS x\n",
    )
    .unwrap();
    let out = lh.run(&["run", d, "--param", "day=2026-11-02"]);
    let err = out.fails(5);
    assert!(
        err.contains("daily_totals.sql:1: lh.materialize 'upsert': use 'replace', 'append' or 'overwrite_partitions'"),
        "{err}"
    );
}

/// Two branches that both appended to a table merge by combining their appends; a
/// branch that replaced the table still conflicts.
#[test]
fn a_merge_combines_two_branches_appends() {
    let server = Server::start();
    let lh = server.lh();
    let first = lh.file(
        "a.csv",
        "id,ts\n1,2026-11-01 00:00:00\n2,2026-11-02 00:00:00\n",
    );
    lh.run(&[
        "table",
        "import",
        "raw.e",
        first.to_str().unwrap(),
        "--partition-by",
        "day(ts)",
    ])
    .ok();
    for b in ["left", "right", "wipe"] {
        lh.run(&["branch", "create", b, "--from", "main"]).ok();
    }
    let append = |branch: &str, body: &str| {
        let f = lh.file(&format!("{branch}.csv"), body);
        lh.run(&[
            "table",
            "import",
            "raw.e",
            f.to_str().unwrap(),
            "--mode",
            "append",
            "--ref",
            branch,
        ])
        .ok();
    };
    append(
        "left",
        "id,ts\n10,2026-11-01 05:00:00\n11,2026-11-03 05:00:00\n",
    );
    append("right", "id,ts\n20,2026-11-01 06:00:00\n");
    append("right", "id,ts\n21,2026-11-04 06:00:00\n");
    append("main", "id,ts\n30,2026-11-02 07:00:00\n");
    lh.run(&["merge", "left", "--into", "main"]).ok();
    let out = lh.run(&["merge", "right", "--into", "main"]);
    out.ok();
    let ids: Vec<i64> = lh
        .rows("SELECT id FROM raw.e ORDER BY id", "main")
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 10, 11, 20, 21, 30]);
    let show: Value =
        serde_json::from_str(lh.run(&["table", "show", "raw.e", "-o", "json"]).ok()).unwrap();
    assert_eq!(show["rows"], 7, "{show}");
    // A replace on the other side is no append: the merge conflicts, nothing changes.
    let f = lh.file("w.csv", "id,ts\n99,2026-11-09 00:00:00\n");
    lh.run(&[
        "table",
        "import",
        "raw.e",
        f.to_str().unwrap(),
        "--mode",
        "replace",
        "--ref",
        "wipe",
    ])
    .ok();
    let head = lh.head("main");
    let err = lh.run(&["merge", "wipe", "--into", "main"]);
    let msg = err.fails(4);
    assert!(msg.contains("changed on both sides (raw.e)"), "{msg}");
    assert_eq!(lh.head("main"), head);
}

/// With `--auto-compact-files`, a table that imports left with too many small files in
/// a partition is compacted by the server, as one more commit, rows unchanged.
#[test]
fn a_server_compacts_tables_that_imports_left_crowded() {
    let server = Server::start_with(&["--auto-compact-files", "3"]);
    let lh = server.lh();
    for i in 0..4 {
        let f = lh.file(&format!("{i}.csv"), &format!("id,v\n{i},x\n"));
        let mode = if i == 0 { "create" } else { "append" };
        lh.run(&[
            "table",
            "import",
            "raw.t",
            f.to_str().unwrap(),
            "--mode",
            mode,
        ])
        .ok();
    }
    // Four files (more than three): compacted in the background, soon.
    let mut files = 0;
    for _ in 0..100 {
        let show: Value =
            serde_json::from_str(lh.run(&["table", "show", "raw.t", "-o", "json"]).ok()).unwrap();
        files = show["files"].as_u64().unwrap();
        if files == 1 {
            assert_eq!(show["rows"], 4);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(files, 1, "{}", server.log());
    let log = lh.run(&["log", "-n", "1"]);
    assert!(
        log.ok().contains("compact raw.t: 4 data files"),
        "{}",
        log.ok()
    );
}

/// A 30-day backfill of a partitioned pipeline: a Python and a SQL model run once per
/// day, each reading only its day, in parallel, published in one merge; a failing day
/// fails the run (nothing published) and `lh rerun --from-failed` recomputes that day
/// alone; a later backfill after one day's input changed recomputes that day alone.
#[test]
fn a_backfill_reruns_only_its_failed_day_and_recomputes_only_a_changed_one() {
    use crate::runs::{project, run_json, server};
    let server = server("process");
    let lh = server.lh();
    // Three orders a day; day 17 holds a negative amount the first code refuses.
    let day = |d: u32| format!("2026-11-{d:02}");
    let mut csv = String::from("id,ordered_at,amount\n");
    for d in 1..=30u32 {
        for k in 0..3u32 {
            let amount = if d == 17 && k == 0 {
                -5
            } else {
                (d * 10 + k) as i64
            };
            csv.push_str(&format!(
                "{},{} {:02}:15:00,{amount}\n",
                d * 10 + k,
                day(d),
                8 + k
            ));
        }
    }
    let orders = lh.file("orders.csv", &csv);
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        orders.to_str().unwrap(),
        "--partition-by",
        "day(ordered_at)",
    ])
    .ok();
    let model = |on_negative: &str| {
        format!(
            r#"
import lh
import pyarrow.compute as pc

@lh.model(materialize="overwrite_partitions", partitioned_by=["day(ordered_at)"])
def orders_daily(orders=lh.Model("raw.orders"), day=lh.Parameter("partition")):
    # Its input holds its day's rows only.
    days = set(str(t)[:10] for t in orders["ordered_at"].to_pylist())
    if days != {{day}}:
        raise ValueError(f"partition {{day}} read days {{sorted(days)}}")
    if pc.any(pc.less(orders["amount"], 0)).as_py():
        {on_negative}
    return orders
"#
        )
    };
    let files = |on_negative: &str| {
        vec![
            (
                "lh_project.yml".to_string(),
                "name: backfill\nnamespace: mart\npartitions:\n  daily: {start: 2026-11-01}\n"
                    .to_string(),
            ),
            ("models.py".to_string(), model(on_negative)),
            (
                "daily_revenue.sql".to_string(),
                "-- lh.materialize: overwrite_partitions\n-- lh.partitioned_by: day\n\
                 SELECT CAST(ordered_at AS DATE) AS day, sum(amount) AS revenue, count(*) AS n,\n\
                 $partition AS computed_for FROM mart.orders_daily GROUP BY 1\n"
                    .to_string(),
            ),
            (
                "checks.py".to_string(),
                r#"
import lh
import pyarrow.compute as pc

@lh.expectation()
def revenue_is_positive(t=lh.Model("mart.daily_revenue")):
    return pc.all(pc.greater(t["revenue"], 0)).as_py()
"#
                .to_string(),
            ),
        ]
    };
    let write = |name: &str, on_negative: &str| {
        let f = files(on_negative);
        let refs: Vec<(&str, &str)> = f.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        project(&lh, name, &refs)
    };
    let v1 = write("v1", "raise ValueError('a negative amount')");
    let v2 = write(
        "v2",
        "orders = orders.filter(pc.greater_equal(orders['amount'], 0))",
    );
    let (d1, d2) = (v1.to_str().unwrap(), v2.to_str().unwrap());

    // Which partitions: required, within the declared range.
    let err = lh.run(&["run", d1]).fails(5).to_string();
    assert!(err.contains("--partition"), "{err}");
    let err = lh
        .run(&["run", d1, "--partition", "2026-10-31"])
        .fails(5)
        .to_string();
    assert!(
        err.contains("outside the project's daily partitions"),
        "{err}"
    );
    let err = lh
        .run(&["run", d1, "--partitions", "2026-11-30..2026-11-01"])
        .fails(5)
        .to_string();
    assert!(err.contains("ends before it starts"), "{err}");

    let head = lh.head("main");
    let (code, failed) = run_json(&lh, &[d1, "--partitions", "2026-11-01..2026-11-30"]);
    assert_ne!(code, 0, "{failed}");
    assert_eq!(failed["status"], "failed");
    assert_eq!(lh.head("main"), head, "nothing published");
    let parts = failed["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 30, "{failed}");
    for p in parts {
        let want = if p["partition"] == "2026-11-17" {
            "failed"
        } else {
            "done"
        };
        assert_eq!(p["status"], want, "{p}\n{failed}\n{}", server.log());
    }
    let nodes = failed["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 61, "30 + 30 instances and the expectation");
    let node = |run: &Value, name: &str| -> Value {
        run["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no node {name} in {run}"))
    };
    assert!(
        node(&failed, "mart.orders_daily[2026-11-17]")["error"]
            .as_str()
            .unwrap()
            .contains("a negative amount")
    );
    assert_eq!(
        node(&failed, "mart.daily_revenue[2026-11-17]")["status"],
        "skipped"
    );
    assert_eq!(node(&failed, "revenue_is_positive")["status"], "skipped");
    let shown = lh.run(&["runs", "show", &failed["id"].as_str().unwrap()[..12]]);
    let shown = shown.ok();
    assert!(shown.contains("partitions 30"), "{shown}");
    assert!(shown.contains("failed   2026-11-17"), "{shown}");

    // The fix, replayed from the failure: day 17 alone runs.
    let id = failed["id"].as_str().unwrap();
    let out = lh.run(&[
        "rerun",
        &id[..12],
        "--from-failed",
        "--code",
        d2,
        "-o",
        "json",
    ]);
    let replay: Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(replay["status"], "succeeded", "{replay}");
    let ran: Vec<&str> = replay["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["status"] == "done" || n["status"] == "passed")
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        ran,
        [
            "mart.orders_daily[2026-11-17]",
            "mart.daily_revenue[2026-11-17]",
            "revenue_is_positive"
        ]
        .iter()
        .copied()
        .filter(|n| ran.contains(n))
        .collect::<Vec<_>>(),
        "{replay}\n{}",
        server.log()
    );
    assert_eq!(ran.len(), 3, "{ran:?}");
    let revenue = |at: &str| {
        lh.rows(
            "SELECT CAST(day AS VARCHAR) AS day, revenue, n, computed_for FROM mart.daily_revenue ORDER BY day",
            at,
        )
    };
    let published = revenue("main");
    assert_eq!(published.len(), 30);
    for (i, r) in published.iter().enumerate() {
        let d = i as i64 + 1;
        let (want, n) = if d == 17 {
            (171 + 172, 2)
        } else {
            (30 * d + 3, 3)
        };
        assert_eq!(r["day"], day(d as u32));
        assert_eq!(r["computed_for"], day(d as u32));
        assert_eq!(
            (r["revenue"].as_i64(), r["n"].as_i64()),
            (Some(want), Some(n)),
            "{r}"
        );
    }
    // One file per day in each table, written by the instances (or put back).
    let files = lh.rows(
        "SELECT count(*) AS n FROM (SELECT DISTINCT day FROM mart.daily_revenue)",
        "main",
    );
    assert_eq!(files[0]["n"], 30);

    // The fixed code's backfill once, then day 5's orders change: day 5 alone runs.
    let (code, first) = run_json(&lh, &[d2, "--partitions", "2026-11-01..2026-11-30"]);
    assert_eq!(code, 0, "{first}\n{}", server.log());
    let fix = lh.file(
        "day5.csv",
        "id,ordered_at,amount\n50,2026-11-05 08:15:00,1000\n",
    );
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        fix.to_str().unwrap(),
        "--mode",
        "overwrite-partitions",
    ])
    .ok();
    let (code, again) = run_json(&lh, &[d2, "--partitions", "2026-11-01..2026-11-30"]);
    assert_eq!(code, 0, "{again}");
    let ran: Vec<&str> = again["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["name"].as_str().unwrap().contains('[') && n["status"] != "cached")
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        ran,
        [
            "mart.orders_daily[2026-11-05]",
            "mart.daily_revenue[2026-11-05]"
        ],
        "{again}"
    );
    let now = revenue("main");
    assert_eq!(now.len(), 30);
    assert_eq!(
        (now[4]["revenue"].as_i64(), now[4]["n"].as_i64()),
        (Some(1000), Some(1))
    );
    assert_eq!(now[5], published[5], "other days untouched");

    // A day whose output is empty now loses its rows (its partitions are replaced by
    // none), in both tables.
    let v3 = write("v3", "pass");
    let v3 = v3.to_str().unwrap();
    std::fs::write(
        Path::new(v3).join("models.py"),
        model("pass").replace(
            "    return orders\n",
            "    if day == '2026-11-06':\n        orders = orders.slice(0, 0)\n    return orders.filter(pc.greater_equal(orders['amount'], 0))\n",
        ),
    )
    .unwrap();
    let (code, emptied) = run_json(&lh, &[v3, "--partitions", "2026-11-05..2026-11-07"]);
    assert_eq!(code, 0, "{emptied}");
    assert_eq!(node(&emptied, "mart.orders_daily[2026-11-06]")["rows"], 0);
    let now = revenue("main");
    assert_eq!(now.len(), 29, "{now:?}");
    assert!(now.iter().all(|r| r["day"] != "2026-11-06"));
    let left = lh.rows(
        "SELECT count(*) AS n FROM mart.orders_daily WHERE CAST(ordered_at AS DATE) = DATE '2026-11-06'",
        "main",
    );
    assert_eq!(left[0]["n"], 0);

    // A model's rows outside its partition fail it, naming the partition; a spec
    // coarser than the project's partitions is the plan's error.
    std::fs::write(
        Path::new(v3).join("models.py"),
        model("pass").replace(
            "    return orders\n",
            "    import datetime\n    return orders.set_column(1, 'ordered_at', pc.add(orders['ordered_at'], datetime.timedelta(days=1)))\n",
        ),
    )
    .unwrap();
    let (code, shifted) = run_json(&lh, &[v3, "--partition", "2026-11-08"]);
    assert_ne!(code, 0);
    let err = node(&shifted, "mart.orders_daily[2026-11-08]")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        err.contains("3 rows of") && err.contains("fall outside partition 2026-11-08"),
        "{err}"
    );
    std::fs::write(
        Path::new(v3).join("models.py"),
        model("pass").replace("day(ordered_at)", "month(ordered_at)"),
    )
    .unwrap();
    let err = lh
        .run(&["run", v3, "--partition", "2026-11-08"])
        .fails(5)
        .to_string();
    assert!(err.contains("needs a field no coarser than that"), "{err}");

    // One merge per partition: a run each, published as each succeeds.
    let out = lh.run(&[
        "run",
        d2,
        "--partitions",
        "2026-11-29..2026-11-30",
        "--each-partition",
        "--no-cache",
        "-o",
        "json",
    ]);
    let runs: Value = serde_json::from_str(out.ok()).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for (r, day) in runs.iter().zip(["2026-11-29", "2026-11-30"]) {
        assert_eq!(r["status"], "succeeded", "{r}");
        assert_eq!(r["partitions"][0]["partition"], day, "{r}");
        assert!(r["merge_commit"].is_string(), "{r}");
    }
    assert_ne!(runs[0]["merge_commit"], runs[1]["merge_commit"]);

    // An input named by `lh.whole` is read whole, not filtered to the partition.
    std::fs::write(Path::new(v3).join("models.py"), model("pass")).unwrap();
    let sql = |whole: &str| {
        format!(
            "-- lh.materialize: overwrite_partitions\n-- lh.partitioned_by: day\n-- lh.whole: {whole}\n\
             SELECT CAST(ordered_at AS DATE) AS day, count(*) AS n,\n\
             (SELECT count(*) FROM raw.orders) AS all_orders FROM mart.orders_daily GROUP BY 1\n"
        )
    };
    let check_sql = Path::new(v3).join("whole_check.sql");
    std::fs::write(&check_sql, sql("raw.orders")).unwrap();
    let (code, whole) = run_json(&lh, &[v3, "--partition", "2026-11-10"]);
    assert_eq!(code, 0, "{whole}");
    let all = lh.rows("SELECT n, all_orders FROM mart.whole_check", "main");
    assert_eq!(all, vec![serde_json::json!({"n": 3, "all_orders": 88})]);
    std::fs::write(&check_sql, sql("raw.nope")).unwrap();
    let err = lh
        .run(&["run", v3, "--partition", "2026-11-10"])
        .fails(5)
        .to_string();
    assert!(err.contains("lh.whole names 'raw.nope'"), "{err}");
}
