//! What changed in a table's history: row-level diffs (checked against DuckDB's own
//! `EXCEPT ALL` of the two versions), per-table row counts and schema changes in
//! `lh diff`, the log of one table, and `lh bisect` finding a planted bad commit.

use lh_e2e::{Lh, Server};
use serde_json::Value;

use crate::rest::client;

/// Imports `files` CSV files of `rows` rows each into `d.t` (one data file each):
/// `id, part, amount, label`, ids from 0.
fn table_of_files(lh: &Lh, files: usize, rows: usize) {
    for f in 0..files {
        let mut csv = String::from("id,part,amount,label\n");
        for i in f * rows..(f + 1) * rows {
            csv.push_str(&format!("{i},{},{}.0,l{i}\n", i % 4, i));
        }
        let path = lh.file(&format!("part{f}.csv"), &csv);
        let mode = if f == 0 { "create" } else { "append" };
        lh.run(&[
            "table",
            "import",
            "d.t",
            path.to_str().unwrap(),
            "--mode",
            mode,
        ])
        .ok();
    }
}

fn json(run: &lh_e2e::Run) -> Value {
    serde_json::from_str(run.ok()).expect("json")
}

/// The counts and the changed keys DuckDB finds between two Parquet files of one
/// table's versions: added, removed, changed (same id on both sides).
fn duckdb_diff(a: &std::path::Path, b: &std::path::Path) -> (u64, u64, u64, Vec<i64>) {
    let con = duckdb::Connection::open_in_memory().unwrap();
    let (a, b) = (a.display(), b.display());
    con.execute_batch(&format!(
        "CREATE TABLE added AS FROM '{b}' EXCEPT ALL FROM '{a}';
         CREATE TABLE removed AS FROM '{a}' EXCEPT ALL FROM '{b}';"
    ))
    .unwrap();
    let count = |sql: &str| -> u64 {
        let n: i64 = con.query_row(sql, [], |r| r.get(0)).unwrap();
        n as u64
    };
    let changed = count("SELECT count(*) FROM added SEMI JOIN removed USING (id)");
    let added = count("SELECT count(*) FROM added") - changed;
    let removed = count("SELECT count(*) FROM removed") - changed;
    let mut stmt = con
        .prepare("SELECT id FROM added SEMI JOIN removed USING (id) ORDER BY id")
        .unwrap();
    let keys = stmt
        .query_map([], |r| r.get::<_, i64>(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    (added, removed, changed, keys)
}

#[test]
fn row_diffs_match_duckdbs_except_of_both_versions() {
    // pyiceberg writes data files with the key the catalog vends on S3.
    let server = Server::start_with(&["--vend-credentials-to", "admin"]);
    let lh = server.lh();
    table_of_files(&lh, 6, 1000);
    lh.run(&["tag", "create", "before"]).ok();
    lh.run(&["branch", "create", "dev"]).ok();

    // On dev: an append (one new file), then deletes, an upsert and a schema change
    // through pyiceberg.
    let extra = lh.file(
        "extra.csv",
        "id,part,amount,label\n90000,0,1.0,x\n90001,1,2.0,y\n",
    );
    lh.run(&[
        "table",
        "import",
        "d.t",
        extra.to_str().unwrap(),
        "--mode",
        "append",
        "--ref",
        "dev",
    ])
    .ok();
    client(&server, "row_diff_changes", "dev", &["d.t"]);

    // What DuckDB says, from both versions exported whole.
    let a = server.dir.path().join("a.parquet");
    let b = server.dir.path().join("b.parquet");
    lh.run(&[
        "query",
        "SELECT id, part, amount AS total, label, CAST(NULL AS VARCHAR) AS note FROM d.t",
        "--ref",
        "before",
        "--out",
        a.to_str().unwrap(),
    ])
    .ok();
    lh.run(&[
        "query",
        "SELECT id, part, total, label, note FROM d.t",
        "--ref",
        "dev",
        "--out",
        b.to_str().unwrap(),
    ])
    .ok();
    let (added, removed, changed, keys) = duckdb_diff(&a, &b);
    assert_eq!(
        (added, removed, changed),
        (3, 5, 2),
        "the scenario's own change"
    );

    let mut answers = Vec::new();
    for full in [false, true] {
        let mut args = vec![
            "diff", "before", "dev", "--table", "d.t", "--key", "id", "--limit", "100", "-o",
            "json",
        ];
        if full {
            args.push("--full");
        }
        let d = json(&lh.run(&args));
        assert_eq!(d["counts"]["added"], added, "{d}");
        assert_eq!(d["counts"]["removed"], removed, "{d}");
        assert_eq!(d["counts"]["changed"], changed, "{d}");
        let columns: Vec<&str> = d["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            ["id", "part", "total", "label", "note"],
            "the newer schema, by field id"
        );
        let rows = d["rows"].as_array().unwrap();
        assert_eq!(rows.len() as u64, added + removed + changed);
        let changed_keys: Vec<i64> = rows
            .iter()
            .filter(|r| r["change"] == "changed")
            .map(|r| r["values"][0].as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(changed_keys, keys);
        let row20 = rows.iter().find(|r| r["values"][0] == "20").unwrap();
        assert_eq!(row20["changed_columns"], serde_json::json!(["total"]));
        assert_eq!(row20["before"][2], "20.0");
        assert_eq!(row20["values"][2], "-1.5");
        let schema = &d["schema_changes"];
        assert!(
            schema
                .as_array()
                .unwrap()
                .contains(&serde_json::json!({"change": "renamed", "column": "total", "from": "amount", "to": "total"})),
            "{schema}"
        );
        assert!(
            schema
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["change"] == "added" && c["column"] == "note"),
            "{schema}"
        );
        answers.push(d);
    }
    // Shared files were skipped, and the answer is the full comparison's.
    let (fast, full) = (&answers[0], &answers[1]);
    assert_eq!(fast["rows"], full["rows"]);
    assert!(
        fast["scan"]["files_shared"].as_u64().unwrap() >= 3,
        "{}",
        fast["scan"]
    );
    assert!(
        fast["scan"]["files_read"].as_u64().unwrap() < full["scan"]["files_read"].as_u64().unwrap(),
        "fast {} full {}",
        fast["scan"],
        full["scan"]
    );

    // The other way round: the same rows, added and removed swapped (read through the
    // newer schema whichever side it is on).
    let d = json(&lh.run(&[
        "diff", "dev", "before", "--table", "d.t", "--key", "id", "-o", "json",
    ]));
    assert_eq!(
        (
            &d["counts"]["added"],
            &d["counts"]["removed"],
            &d["counts"]["changed"]
        ),
        (&removed.into(), &added.into(), &changed.into()),
        "{d}"
    );

    // Without a key: rows are added or removed, a changed row both; as DuckDB says.
    let d = json(&lh.run(&["diff", "before", "dev", "--table", "d.t", "-o", "json"]));
    assert_eq!(d["counts"]["added"], added + changed);
    assert_eq!(d["counts"]["removed"], removed + changed);
    assert!(d["counts"].get("changed").is_none(), "{d}");

    // The table view: counts, then rows with old -> new values.
    let out = lh.run(&["diff", "before", "dev", "--table", "d.t", "--key", "id"]);
    let text = out.ok();
    assert!(
        text.starts_with("d.t: 2 changed, 3 added, 5 removed (key: id)"),
        "{text}"
    );
    assert!(text.contains("20.0 -> -1.5"), "{text}");
    // CSV: a changed row's old values follow it.
    let csv = lh.run(&[
        "diff", "before", "dev", "--table", "d.t", "--key", "id", "-o", "csv",
    ]);
    let lines: Vec<&str> = csv.ok().lines().collect();
    assert_eq!(lines[0], "change,id,part,total,label,note");
    assert_eq!(lines.len(), 1 + 3 + 5 + 2 * 2, "{}", csv.ok());
    assert!(
        lines.contains(&"changed-from,20,0,20.0,l20,"),
        "{}",
        csv.ok()
    );

    // `lh diff` of two refs counts each table's rows and names its schema changes.
    let d = json(&lh.run(&["diff", "before", "dev", "-o", "json"]));
    let t = &d["tables"][0];
    assert_eq!(t["table"], "d.t");
    assert_eq!(t["rows"]["added"], added + changed);
    assert_eq!(t["rows"]["removed"], removed + changed);
    assert!(t["schema_changes"].as_array().unwrap().len() >= 2, "{t}");
    let table = lh.run(&["diff", "before", "dev"]);
    assert!(table.ok().contains("amount -> total"), "{}", table.ok());
    assert!(table.ok().contains("+note"), "{}", table.ok());

    // A table only one side has: every row is added (or removed).
    let other = lh.file("o.csv", "k,v\n1,a\n2,b\n");
    lh.run(&[
        "table",
        "import",
        "d.o",
        other.to_str().unwrap(),
        "--ref",
        "dev",
    ])
    .ok();
    let d = json(&lh.run(&["diff", "before", "dev", "--table", "d.o", "-o", "json"]));
    assert_eq!(d["counts"]["added"], 2);
    let d = json(&lh.run(&["diff", "dev", "before", "--table", "d.o", "-o", "json"]));
    assert_eq!(d["counts"]["removed"], 2);

    // --limit: the counts stay whole.
    let d = json(&lh.run(&[
        "diff", "before", "dev", "--table", "d.t", "--key", "id", "--limit", "2", "-o", "json",
    ]));
    assert_eq!(d["rows"].as_array().unwrap().len(), 2);
    assert_eq!(d["truncated"], true);
    assert_eq!(d["counts"]["changed"], 2);
}

#[test]
fn row_diffs_refuse_bad_keys_and_names() {
    let server = Server::start();
    let lh = server.lh();
    table_of_files(&lh, 2, 50);
    lh.run(&["branch", "create", "dev"]).ok();
    let dup = lh.file("dup.csv", "id,part,amount,label\n3,0,1.0,a\n3,0,2.0,b\n");
    lh.run(&[
        "table",
        "import",
        "d.t",
        dup.to_str().unwrap(),
        "--mode",
        "append",
        "--ref",
        "dev",
    ])
    .ok();
    // A key no column has, named twice, or repeating among the changed rows.
    let err = lh
        .run(&["diff", "main", "dev", "--table", "d.t", "--key", "nope"])
        .fails(5)
        .to_string();
    assert!(err.contains("key column 'nope'"), "{err}");
    assert!(err.contains("id, part, amount, label"), "{err}");
    let err = lh
        .run(&["diff", "main", "dev", "--table", "d.t", "--key", "id,ID"])
        .fails(5)
        .to_string();
    assert!(err.contains("named twice"), "{err}");
    let err = lh
        .run(&["diff", "main", "dev", "--table", "d.t", "--key", "part"])
        .fails(5)
        .to_string();
    assert!(
        err.contains("not unique among the rows that differ"),
        "{err}"
    );
    // Names: no such table, a malformed one, a hostile one; no such ref.
    lh.run(&["diff", "main", "dev", "--table", "d.nope"])
        .fails(3);
    lh.run(&["diff", "main", "dev", "--table", "../etc"])
        .fails(5);
    lh.run(&["diff", "main", "dev", "--table", "d.t'; DROP TABLE x; --"])
        .fails(5);
    lh.run(&["diff", "main", "nope", "--table", "d.t"]).fails(3);
    // A key whose name is SQL is a name, never SQL.
    let err = lh
        .run(&[
            "diff",
            "main",
            "dev",
            "--table",
            "d.t",
            "--key",
            "id) OR (1=1",
        ])
        .fails(5)
        .to_string();
    assert!(err.contains("is not a column"), "{err}");
    // A table dropped and made again is another table (another uuid): its columns
    // match by name; with none in common, there is nothing to compare.
    lh.run(&["branch", "create", "again"]).ok();
    lh.run(&["table", "rm", "d.t", "--ref", "again"]).ok();
    let same = lh.file("same.csv", "id,part,amount,label\n1,1,1.0,l1\n");
    lh.run(&[
        "table",
        "import",
        "d.t",
        same.to_str().unwrap(),
        "--ref",
        "again",
    ])
    .ok();
    let d = json(&lh.run(&[
        "diff", "main", "again", "--table", "d.t", "--key", "id", "-o", "json",
    ]));
    assert_eq!(d["counts"]["changed"], 0, "id 1 is the same row: {d}");
    assert_eq!(d["counts"]["removed"], 99, "{d}");
    assert!(
        d["scan"]["full_because"].as_str().unwrap().contains("uuid"),
        "{d}"
    );
    lh.run(&["table", "rm", "d.t", "--ref", "again"]).ok();
    let other = lh.file("other.csv", "k,v\n1,a\n");
    lh.run(&[
        "table",
        "import",
        "d.t",
        other.to_str().unwrap(),
        "--ref",
        "again",
    ])
    .ok();
    let err = lh
        .run(&["diff", "main", "again", "--table", "d.t"])
        .fails(5)
        .to_string();
    assert!(err.contains("no column in common"), "{err}");
    // The API's own checks.
    let url = format!(
        "{}/api/v1/diff/rows?from=main&to=dev&table=d.t&limit=lots",
        server.url
    );
    let resp = ureq::get(&url)
        .header("Authorization", &format!("Bearer {}", server.token()))
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .unwrap();
    assert_eq!(resp.status(), 400);
    // A reader of another namespace learns nothing of this table's rows, its log or
    // its changes.
    lh.run(&["role", "set", "others", "--grant", "read on * in e"])
        .ok();
    let mallory = lh.with_token(&server.token_for("mallory", "others"));
    mallory
        .run(&["diff", "main", "dev", "--table", "d.t", "--key", "id"])
        .fails(9);
    mallory.run(&["log", "dev", "--table", "d.t"]).fails(9);
    let d = json(&mallory.run(&["diff", "main", "dev", "-o", "json"]));
    assert_eq!(d["tables"], serde_json::json!([]), "{d}");
}

#[test]
fn bisect_finds_a_planted_bad_commit_among_1000() {
    let server = Server::start();
    let lh = server.lh();
    let ok = lh.file("ok.csv", "id,amount\n1,10.0\n");
    let bad = lh.file("bad.csv", "id,amount\n2,-5.0\n");
    let noise = lh.file("noise.csv", "k\n1\n");
    lh.run(&["table", "import", "h.t", ok.to_str().unwrap()])
        .ok();
    lh.run(&["tag", "create", "good"]).ok();
    let planted = 637;
    let mut planted_commit = String::new();
    for i in 1..=1000 {
        let file = if i == planted { &bad } else { &ok };
        lh.run(&[
            "table",
            "import",
            "h.t",
            file.to_str().unwrap(),
            "--mode",
            "append",
        ])
        .ok();
        if i == planted {
            planted_commit = lh.head("main");
        }
        // Commits to another table: not candidates.
        if i % 100 == 0 {
            let mode = if i == 100 { "create" } else { "append" };
            lh.run(&[
                "table",
                "import",
                "h.noise",
                noise.to_str().unwrap(),
                "--mode",
                mode,
            ])
            .ok();
        }
    }
    let log = json(&lh.run(&["log", "--table", "h.t", "-n", "1000", "-o", "json"]));
    assert_eq!(
        log.as_array().unwrap().len(),
        1000,
        "one commit per append, the import before it is past the page"
    );

    let check = "SELECT count(*) = 0 FROM h.t WHERE amount < 0";
    let out = json(&lh.run(&[
        "bisect", "h.t", "--good", "good", "--bad", "main", "--check", check, "-o", "json",
    ]));
    assert_eq!(out["first_bad"]["id"], planted_commit.as_str(), "{out}");
    assert_eq!(out["candidates"], 1000);
    let checks = out["checks"].as_array().unwrap().len();
    assert!(checks <= 11, "{checks} queries for 1000 commits: {out}");
    assert_eq!(out["rows"]["added"], 1);
    // The table view names the commit and the way to its rows.
    let text = lh.run(&["bisect", "h.t", "--good", "good", "--check", check]);
    assert!(
        text.ok()
            .contains(&format!("first bad commit: {planted_commit}")),
        "{}",
        text.both()
    );
    assert!(text.both().contains("lh diff main@"), "{}", text.both());

    // A reader of main alone bisects main: every commit is named on main.
    lh.run(&["role", "set", "main-reader", "--grant", "read on main"])
        .ok();
    let reader = lh.with_token(&server.token_for("rita", "main-reader"));
    let good_id = lh.head("good");
    let out = json(&reader.run(&[
        "bisect",
        "h.t",
        "--good",
        &format!("main@{good_id}"),
        "--bad",
        "main",
        "--check",
        check,
        "-o",
        "json",
    ]));
    assert_eq!(out["first_bad"]["id"], planted_commit.as_str(), "{out}");

    // Wrong sides, a check of the wrong shape, a check that fails to run.
    let err = lh
        .run(&[
            "bisect", "h.t", "--good", "main", "--bad", "good", "--check", check,
        ])
        .fails(3)
        .to_string();
    assert!(
        err.contains("no commit '") && err.contains("on the history of 'good'"),
        "{err}"
    );
    let all_good = "SELECT true";
    let err = lh
        .run(&["bisect", "h.t", "--good", "good", "--check", all_good])
        .fails(5)
        .to_string();
    assert!(err.contains("passes at --bad"), "{err}");
    let shape = "SELECT 1, 2";
    let err = lh
        .run(&["bisect", "h.t", "--good", "good", "--check", shape])
        .fails(5)
        .to_string();
    assert!(err.contains("one row with one boolean column"), "{err}");
    let err = lh
        .run(&[
            "bisect",
            "h.t",
            "--good",
            "good",
            "--check",
            "SELECT nope FROM h.t",
        ])
        .fails(5)
        .to_string();
    assert!(err.contains("the check failed at commit"), "{err}");
    let err = lh
        .run(&[
            "bisect",
            "h.t",
            "--good",
            "good",
            "--check",
            "DELETE FROM h.t",
        ])
        .fails(5)
        .to_string();
    assert!(err.contains("the check failed at commit"), "{err}");
    assert_eq!(
        lh.rows("SELECT count(*) AS n FROM h.t", "main")[0]["n"],
        1001
    );

    // A project's expectation as the check: each step a check run of that expectation
    // alone, on the tables as they are at the commit, publishing nothing.
    let dir = crate::runs::project(
        &lh,
        "guard",
        &[
            (
                "lh_project.yml",
                "name: guard\nnamespace: h\npython: \"3.11\"\n",
            ),
            // A model whose input is at no commit searched: a check plans only its
            // expectation, so it is no matter.
            ("models/later.sql", "select * from h.later\n"),
            (
                "checks/amounts.py",
                "import lh\nimport pyarrow.compute as pc\n\n\n\
                 @lh.expectation()\n\
                 def amounts_are_positive(t=lh.Model(\"h.t\", columns=[\"amount\"])):\n    \
                 n = pc.sum(pc.less(t.column(\"amount\"), 0)).as_py() or 0\n    \
                 return n == 0, f\"{n} negative amounts\"\n\n\n\
                 @lh.expectation()\n\
                 def broken(t=lh.Model(\"h.t\", columns=[\"amount\"])):\n    \
                 raise RuntimeError(\"this check is broken\")\n\n\n\
                 @lh.python(secrets=[\"API_KEY\"])\n\
                 @lh.expectation()\n\
                 def leaky(t=lh.Model(\"h.t\", columns=[\"amount\"])):\n    \
                 return True\n",
            ),
        ],
    );
    let file = dir.join("checks/amounts.py");
    let expectation = format!("{}:amounts_are_positive", file.display());
    let runs_before = json(&lh.run(&["runs", "ls", "-n", "1000", "-o", "json"]))
        .as_array()
        .unwrap()
        .len();
    let heads_before = lh.run(&["branch", "ls", "--all"]).ok().to_string();
    let out = json(&lh.run(&[
        "bisect",
        "h.t",
        "--good",
        "good",
        "--bad",
        "main",
        "--expectation",
        &expectation,
        "-o",
        "json",
    ]));
    assert_eq!(out["first_bad"]["id"], planted_commit.as_str(), "{out}");
    let checks = out["checks"].as_array().unwrap();
    assert!(checks.len() <= 11, "{} checks: {out}", checks.len());
    // Each check is a recorded run of the one expectation at its commit.
    for c in checks {
        let run = json(&lh.run(&["runs", "show", c["run"].as_str().unwrap(), "-o", "json"]));
        assert_eq!(run["target"], "main");
        assert_eq!(run["nodes"].as_array().unwrap().len(), 1, "{run}");
        assert_eq!(run["nodes"][0]["name"], "amounts_are_positive");
        let want = if c["good"] == true {
            "passed"
        } else {
            "failed"
        };
        assert_eq!(run["nodes"][0]["status"], want, "{run}");
        assert_eq!(run["input_commit"], c["commit"], "{run}");
        assert_eq!(run["check"], true, "{run}");
        assert!(
            run["merge_commit"].is_null(),
            "a check publishes nothing: {run}"
        );
    }
    // A check's run is not replayed (it would run the project at an old commit).
    let err = lh
        .run(&["rerun", checks[0]["run"].as_str().unwrap()])
        .fails(5)
        .to_string();
    assert!(err.contains("is a check"), "{err}");
    let runs_after = json(&lh.run(&["runs", "ls", "-n", "1000", "-o", "json"]))
        .as_array()
        .unwrap()
        .len();
    assert_eq!(runs_after - runs_before, checks.len());
    // A check's branch goes just after its end is recorded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while lh.run(&["branch", "ls", "--all"]).ok() != heads_before
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        lh.run(&["branch", "ls", "--all"]).ok(),
        heads_before,
        "no branch is left"
    );
    assert_eq!(
        lh.rows("SELECT count(*) AS n FROM h.t", "main")[0]["n"],
        1001
    );
    // The file named from inside its project's folder, relatively.
    let inside = lh
        .command(&[
            "bisect",
            "h.t",
            "--good",
            "good",
            "--expectation",
            "checks/amounts.py:amounts_are_positive",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&inside.stdout);
    assert!(
        text.contains(&format!("first bad commit: {planted_commit}")),
        "{text}{}",
        String::from_utf8_lossy(&inside.stderr)
    );

    // A link to the file is the file, in its own project.
    let link = lh.cwd.join("elsewhere.py");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let out = json(&lh.run(&[
        "bisect",
        "h.t",
        "--good",
        "good",
        "--expectation",
        &format!("{}:amounts_are_positive", link.display()),
        "-o",
        "json",
    ]));
    assert_eq!(out["first_bad"]["id"], planted_commit.as_str(), "{out}");

    // An expectation that cannot run is an error, not a bad commit; an unknown one,
    // a file outside any project, a wrong shape and a --bad that is no branch are
    // refused before anything runs.
    let broken = format!("{}:broken", file.display());
    let err = lh
        .run(&["bisect", "h.t", "--good", "good", "--expectation", &broken])
        .fails(5)
        .to_string();
    assert!(
        err.contains("the expectation could not run at commit"),
        "{err}"
    );
    assert!(err.contains("this check is broken"), "{err}");
    let unknown = format!("{}:nope", file.display());
    let err = lh
        .run(&["bisect", "h.t", "--good", "good", "--expectation", &unknown])
        .fails(3)
        .to_string();
    assert!(
        err.contains("the project has no expectation 'checks/amounts.py:nope'"),
        "{err}"
    );
    assert!(
        err.contains("checks/amounts.py:amounts_are_positive"),
        "{err}"
    );
    let stray = lh.file("stray.py", "import lh\n");
    let err = lh
        .run(&[
            "bisect",
            "h.t",
            "--good",
            "good",
            "--expectation",
            &format!("{}:f", stray.display()),
        ])
        .fails(5)
        .to_string();
    assert!(err.contains("no lh_project.yml"), "{err}");
    let err = lh
        .run(&[
            "bisect",
            "h.t",
            "--good",
            "good",
            "--expectation",
            "amounts.py",
        ])
        .fails(5)
        .to_string();
    assert!(err.contains("FILE:FUNCTION"), "{err}");
    let err = lh
        .run(&[
            "bisect",
            "h.t",
            "--good",
            &format!("main@{good_id}"),
            "--bad",
            &format!("main@{planted_commit}"),
            "--expectation",
            &expectation,
        ])
        .fails(5)
        .to_string();
    assert!(err.contains("names no branch"), "{err}");
    lh.run(&["bisect", "h.t", "--good", "good"]).fails(2);
    lh.run(&[
        "bisect",
        "h.t",
        "--good",
        "good",
        "--check",
        check,
        "--expectation",
        &expectation,
    ])
    .fails(2);
    // A reader of the branch runs no code there.
    let err = reader
        .run(&[
            "bisect",
            "h.t",
            "--good",
            &format!("main@{good_id}"),
            "--expectation",
            &expectation,
        ])
        .fails(9)
        .to_string();
    assert!(err.contains("permission"), "{err}");

    // On a protected main, a writer (who may not publish there) bisects with checks,
    // but a check never hands it the branch's secrets.
    let set = lh.run_with_input(&["secret", "set", "API_KEY", "--on", "main"], "sk_live_x\n");
    assert_eq!(set.code, 0, "{}", set.both());
    lh.run(&["branch", "protect", "main"]).ok();
    let writer = lh.with_token(&server.token_for("wes", "writer"));
    let out = json(&writer.run(&[
        "bisect",
        "h.t",
        "--good",
        "good",
        "--expectation",
        &expectation,
        "-o",
        "json",
    ]));
    assert_eq!(out["first_bad"]["id"], planted_commit.as_str(), "{out}");
    let leaky = format!("{}:leaky", file.display());
    let err = writer
        .run(&["bisect", "h.t", "--good", "good", "--expectation", &leaky])
        .fails(9)
        .to_string();
    assert!(err.contains("leaky reads secrets"), "{err}");
    // An admin may (it may merge into main): the check passes everywhere.
    let err = lh
        .run(&["bisect", "h.t", "--good", "good", "--expectation", &leaky])
        .fails(5)
        .to_string();
    assert!(err.contains("passes at --bad"), "{err}");
    lh.run(&["branch", "unprotect", "main"]).ok();

    // The API: a check reads a commit of the branch it is recorded on, and is refused
    // before the upload is taken; a check is not planned.
    lh.run(&["branch", "create", "other"]).ok();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let auth = format!("Bearer {}", server.token());
    for (at, code) in [
        (format!("other@{good_id}"), 400),
        (format!("@{good_id}"), 400),
        ("main; DROP TABLE h.t".to_string(), 400),
        (format!("main@{good_id}"), 404),
    ] {
        let mut resp = agent
            .post(&format!("{}/api/v1/runs", server.urls()[0]))
            .header("Authorization", &auth)
            .send_json(serde_json::json!({
                "upload": "0".repeat(32),
                "ref": "main",
                "check": {"at": at, "expectations": ["amounts_are_positive"]},
            }))
            .unwrap();
        let body = resp.body_mut().read_to_string().unwrap();
        assert_eq!(resp.status(), code, "{at}: {body}");
        let why = match code {
            400 => "a check reads a commit of the branch it runs on",
            _ => "upload '00000000000000000000000000000000' not found",
        };
        assert!(body.contains(why), "{at}: {body}");
    }
    let mut resp = agent
        .post(&format!("{}/api/v1/runs/plan", server.urls()[0]))
        .header("Authorization", &auth)
        .send_json(serde_json::json!({
            "upload": "0".repeat(32),
            "ref": "main",
            "check": {"at": "main"},
        }))
        .unwrap();
    let body = resp.body_mut().read_to_string().unwrap();
    assert_eq!(resp.status(), 400, "{body}");
    assert!(body.contains("a check is run"), "{body}");
}

/// The plan's entry for the node named `name` (a model's table).
fn planned<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name} in {plan}"))
}

#[test]
fn plans_say_what_a_run_would_change() {
    let server = Server::start();
    let lh = server.lh();
    let raw = lh.file(
        "orders.csv",
        "id,amount,status\n1,10.0,placed\n2,20.0,shipped\n3,-5.0,returned\n",
    );
    lh.run(&["table", "import", "raw.orders", raw.to_str().unwrap()])
        .ok();
    let base = "select id, amount, status from raw.orders\n";
    let project = |name: &str, base: &str| {
        crate::runs::project(
            &lh,
            name,
            &[
                ("lh_project.yml", "name: planned\nnamespace: p\n"),
                ("base.sql", base),
                (
                    "totals.sql",
                    "select status, sum(amount) as total from p.base group by status\n",
                ),
                ("counts.sql", "select count(*) as n from p.base\n"),
            ],
        )
    };
    let v1 = project("v1", base);
    // Before any run: every model runs, nothing to compare with.
    let plan = json(&lh.run(&["run", v1.to_str().unwrap(), "--plan", "-o", "json"]));
    let b = &planned(&plan, "p.base")["change"];
    assert_eq!(b["action"], "run", "{plan}");
    assert!(
        b["reasons"][0]
            .as_str()
            .unwrap()
            .contains("no earlier output"),
        "{b}"
    );
    assert!(b.get("category").is_none(), "{b}");
    lh.run(&["run", v1.to_str().unwrap()]).ok();

    // Nothing changed: every model would be reused; expectations would run.
    let plan = json(&lh.run(&["run", v1.to_str().unwrap(), "--plan", "-o", "json"]));
    for n in ["p.base", "p.totals", "p.counts"] {
        assert_eq!(planned(&plan, n)["change"]["action"], "reuse", "{plan}");
    }
    // And a run agrees: all three reused.
    let run = json(&lh.run(&["run", v1.to_str().unwrap(), "-o", "json"]));
    let cached = run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["cached"] == true)
        .count();
    assert_eq!(cached, 3, "{run}");

    // Edits of base.sql, each with the category it must get.
    let cases = [
        (
            "-- the orders, as they come\nselect id,\n       amount,\n       status\nfrom raw.orders;\n",
            "metadata-only",
            "comments and layout",
        ),
        (
            "select id, amount, status, amount * 2 as doubled from raw.orders\n",
            "non-breaking",
            "adds column doubled",
        ),
        (
            "select id, amount from raw.orders\n",
            "breaking",
            "removes column status, read by p.totals",
        ),
        (
            "select amount, status from raw.orders\n",
            "non-breaking",
            "removes column id: nothing downstream reads it",
        ),
        (
            "select id, cast(amount as varchar) as amount, status from raw.orders\n",
            "breaking",
            "retypes column amount",
        ),
        (
            "select id, amount, status from raw.orders where amount > 0\n",
            "non-breaking",
            "the same columns",
        ),
    ];
    for (i, (sql, category, detail)) in cases.iter().enumerate() {
        let dir = project(&format!("edit{i}"), sql);
        let out = lh.run(&["run", dir.to_str().unwrap(), "--plan", "-o", "json"]);
        let plan = json(&out);
        let b = &planned(&plan, "p.base")["change"];
        assert_eq!(b["category"], *category, "edit {i}: {b}");
        let details = b["details"].to_string();
        assert!(details.contains(detail), "edit {i}: {details}");
        assert_eq!(b["action"], "run", "edit {i}: {b}");
        assert!(
            b["reasons"][0]
                .as_str()
                .unwrap()
                .starts_with("code changed"),
            "{b}"
        );
        // Downstream models run because base does.
        let t = &planned(&plan, "p.totals")["change"];
        assert_eq!(t["action"], "run", "{t}");
        assert!(
            t["reasons"]
                .to_string()
                .contains("input p.base is made again"),
            "{t}"
        );
        assert!(t.get("category").is_none(), "totals did not change: {t}");
    }
    // A change of its settings alone is no metadata-only change.
    let dir = project("settings", &format!("-- lh.materialize: append\n{base}"));
    let plan = json(&lh.run(&["run", dir.to_str().unwrap(), "--plan", "-o", "json"]));
    let b = &planned(&plan, "p.base")["change"];
    assert_eq!(b["category"], "non-breaking", "{b}");
    assert!(b["details"].to_string().contains("settings"), "{b}");
    // --no-cache: everything runs.
    let plan = json(&lh.run(&[
        "run",
        v1.to_str().unwrap(),
        "--plan",
        "--no-cache",
        "-o",
        "json",
    ]));
    assert_eq!(
        planned(&plan, "p.counts")["change"]["action"],
        "run",
        "{plan}"
    );

    // A run of an edit, then the original again: its output is still memoized, so the
    // plan says reuse, and the run does reuse it.
    let filtered = project("filtered", cases[5].0);
    lh.run(&["run", filtered.to_str().unwrap()]).ok();
    let plan = json(&lh.run(&["run", v1.to_str().unwrap(), "--plan", "-o", "json"]));
    let b = &planned(&plan, "p.base")["change"];
    assert_eq!(b["action"], "reuse", "{b}");
    // Against the last run (the filtered query): the same columns.
    assert_eq!(b["category"], "non-breaking", "{b}");
    assert!(b["compared_with"].is_string(), "{b}");
    let run = json(&lh.run(&["run", v1.to_str().unwrap(), "-o", "json"]));
    let node = run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "p.base")
        .unwrap();
    assert_eq!(node["cached"], true, "{run}");

    // A column read through USING is read.
    let joined = crate::runs::project(
        &lh,
        "joined",
        &[
            ("lh_project.yml", "name: joined\nnamespace: q\n"),
            ("b.sql", "select id, amount from raw.orders\n"),
            (
                "j.sql",
                "select count(*) as n from q.b join raw.orders using (id)\n",
            ),
        ],
    );
    lh.run(&["run", joined.to_str().unwrap()]).ok();
    std::fs::write(joined.join("b.sql"), "select amount from raw.orders\n").unwrap();
    let plan = json(&lh.run(&["run", joined.to_str().unwrap(), "--plan", "-o", "json"]));
    let b = &planned(&plan, "q.b")["change"];
    assert_eq!(b["category"], "breaking", "{b}");
    assert!(b["details"].to_string().contains("read by q.j"), "{b}");

    // The plan as text.
    let dir = project("edit-text", "select id, amount from raw.orders\n");
    let text = lh.run(&["run", dir.to_str().unwrap(), "--plan"]);
    assert!(text.ok().contains("change breaking"), "{}", text.ok());

    // New input data: base runs, because its input moved.
    let more = lh.file("more.csv", "id,amount,status\n4,7.0,placed\n");
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        more.to_str().unwrap(),
        "--mode",
        "append",
    ])
    .ok();
    let plan = json(&lh.run(&["run", v1.to_str().unwrap(), "--plan", "-o", "json"]));
    let b = &planned(&plan, "p.base")["change"];
    assert_eq!(b["action"], "run", "{b}");
    assert!(
        b["reasons"].to_string().contains("input raw.orders moved"),
        "{b}"
    );
    // Column-level lineage through the project's last run (v1).
    let l = json(&lh.run(&["lineage", "p.totals.total", "-o", "json"]));
    let steps: Vec<String> = l["upstream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} -> {}",
                e["from"].as_str().unwrap(),
                e["to"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            "p.base.amount -> p.totals.total",
            "raw.orders.amount -> p.base.amount"
        ],
        "{l}"
    );
    let l = json(&lh.run(&["lineage", "raw.orders.status", "-o", "json"]));
    let to: Vec<&str> = l["downstream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["to"].as_str().unwrap())
        .collect();
    assert!(
        to.contains(&"p.base.status") && to.contains(&"p.totals.status"),
        "{l}"
    );
    assert!(
        !to.iter().any(|t| t.starts_with("p.counts")),
        "count(*) reads no column: {l}"
    );
    let text = lh.run(&["lineage", "p.base"]);
    assert!(
        text.ok().contains("raw.orders.id -> p.base.id"),
        "{}",
        text.ok()
    );
    lh.run(&["lineage", "p.nope.x"]).fails(3);
    // A reader of another namespace sees nothing of it.
    lh.run(&["role", "set", "elsewhere", "--grant", "read on * in e"])
        .ok();
    let eve = lh.with_token(&server.token_for("eve", "elsewhere"));
    let hidden = eve.run(&["lineage", "p.totals.total"]).fails(3).to_string();
    let missing = eve
        .run(&["lineage", "p.nothing.total"])
        .fails(3)
        .to_string();
    assert_eq!(
        hidden.replace("totals", "X"),
        missing.replace("nothing", "X"),
        "an unreadable table reads as a missing one"
    );
    lh.run(&["lineage", "p.totals.nope"]).fails(3);

    // A plan writes nothing.
    let before = lh.head("main");
    lh.run(&["run", dir.to_str().unwrap(), "--plan"]).ok();
    assert_eq!(lh.head("main"), before);
}

#[test]
fn merges_warn_about_breaking_changes_that_other_projects_read() {
    let server = Server::start();
    let lh = server.lh();
    let raw = lh.file(
        "orders.csv",
        "id,status,amount\n1,placed,10.0\n2,shipped,20.0\n",
    );
    lh.run(&["table", "import", "raw.orders", raw.to_str().unwrap()])
        .ok();
    let shop = |name: &str, sql: &str| {
        crate::runs::project(
            &lh,
            name,
            &[
                ("lh_project.yml", "name: shop\nnamespace: analytics\n"),
                ("orders_clean.sql", sql),
                // The shop's own reader of every column.
                ("summary.sql", "select * from analytics.orders_clean\n"),
            ],
        )
    };
    let v1 = shop("shop1", "select id, status, amount from raw.orders\n");
    let shop_run = json(&lh.run(&["run", v1.to_str().unwrap(), "-o", "json"]));
    let shop_run = shop_run["id"].as_str().unwrap().to_string();
    // Another project reads the shop's table: a sum of amounts, the ids alone, and an
    // expectation that reads its status and, through a second input, its amount.
    let finance = crate::runs::project(
        &lh,
        "finance",
        &[
            (
                "lh_project.yml",
                "name: finance\nnamespace: finance\npython: \"3.11\"\n",
            ),
            (
                "revenue.sql",
                "select status, sum(amount) as total from analytics.orders_clean group by status\n",
            ),
            ("ids.sql", "select id from analytics.orders_clean\n"),
            (
                "checks.py",
                "import lh\n\n\n@lh.expectation()\ndef amounts_by_status(\n    \
                 s=lh.Model(\"analytics.orders_clean\", columns=[\"status\"]),\n    \
                 a=lh.Model(\"analytics.orders_clean\", columns=[\"amount\"]),\n):\n    \
                 return s.num_rows == a.num_rows\n",
            ),
        ],
    );
    let finance_run = json(&lh.run(&["run", finance.to_str().unwrap(), "-o", "json"]));
    let finance_run = finance_run["id"].as_str().unwrap().to_string();

    // The shop drops a column on a branch, with a run there, and merges it. A plan on
    // main already says who reads it, in the project and in others.
    lh.run(&["branch", "create", "dev"]).ok();
    let v2 = shop("shop2", "select id, status from raw.orders\n");
    let plan = json(&lh.run(&["run", v2.to_str().unwrap(), "--plan", "-o", "json"]));
    let change = &planned(&plan, "analytics.orders_clean")["change"];
    assert_eq!(change["category"], "breaking", "{plan}");
    assert_eq!(
        change["details"][0],
        "removes column amount, read by analytics.summary, amounts_by_status (project \
         finance), finance.revenue (project finance)",
        "{plan}"
    );
    lh.run(&["run", v2.to_str().unwrap(), "--ref", "dev"]).ok();
    // A dry run says the same before anything moves.
    let before = lh.head("main");
    let dry = json(&lh.run(&["merge", "dev", "--into", "main", "--dry-run", "-o", "json"]));
    let audit = lh.run(&["audit", "-n", "1000", "-o", "json"]);
    assert!(
        audit.ok().contains("/api/v1/merge/preview"),
        "a preview has its own route (an older server refuses it), and is audited as one"
    );
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_eq!(lh.head("main"), before, "a dry run moves nothing");
    let text = lh.run(&["merge", "dev", "--into", "main", "--dry-run"]);
    text.ok();
    assert!(
        text.both().contains("would fast-forward 'main'")
            && text
                .both()
                .contains("warning: dropped column analytics.orders_clean.amount, read by"),
        "{}",
        text.both()
    );
    let m = json(&lh.run(&["merge", "dev", "--into", "main", "-o", "json"]));
    assert_eq!(m["breaking"], dry["breaking"], "{m}\n{dry}");
    assert_eq!(m["head"], dry["head"], "{m}\n{dry}");
    let t = m["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "analytics.orders_clean")
        .unwrap_or_else(|| panic!("{m}"));
    assert_eq!(
        t["schema_changes"],
        serde_json::json!([{"change": "dropped", "column": "amount"}]),
        "{m}"
    );
    let reader = |node: &str, kind: &str| serde_json::json!({"project": "finance", "node": node, "kind": kind, "run": finance_run});
    assert_eq!(
        m["breaking"],
        serde_json::json!([{
            "table": "analytics.orders_clean",
            "change": {"change": "dropped", "column": "amount"},
            "readers": [reader("amounts_by_status", "expectation"), reader("finance.revenue", "model")],
        }]),
        "the ids model reads no amount; the shop made the change (its summary ran with \
         it on the branch): {m}"
    );
    assert!(m.get("breaking_unknown").is_none(), "{m}");

    // A table dropped by hand on a branch, merged by a user who may read the shop's
    // namespace only: the readers in namespaces it may not read are counted, not named.
    lh.run(&["branch", "create", "gone"]).ok();
    lh.run(&["table", "rm", "analytics.orders_clean", "--ref", "gone"])
        .ok();
    lh.run(&[
        "role",
        "set",
        "shop-owner",
        "--grant",
        "read on * in analytics",
        "--grant",
        "merge on main in analytics",
    ])
    .ok();
    let ana = lh.with_token(&server.token_for("ana", "shop-owner"));
    // A dry run is held to the same grants as the merge.
    lh.run(&["role", "set", "onlooker", "--grant", "read on *"])
        .ok();
    let onlooker = lh.with_token(&server.token_for("olga", "onlooker"));
    onlooker
        .run(&["merge", "gone", "--into", "main", "--dry-run"])
        .fails(9);
    let out = ana.run(&["merge", "gone", "--into", "main"]);
    out.ok();
    let text = out.both();
    assert!(
        text.contains(&format!(
            "warning: dropped table analytics.orders_clean, read by expectation amounts_by_status of project finance (run {}); model \
             analytics.summary of project shop (run {}); 2 more readers you may not see",
            &finance_run[..12],
            &shop_run[..12]
        )),
        "no run on that branch made the change, so the shop's own reader is told: {text}"
    );
    assert!(!text.contains("finance.revenue"), "{text}");
    let tables = lh.run(&["table", "ls", "--ref", "main"]).ok().to_string();
    assert!(
        !tables.contains("orders_clean"),
        "the merge was made: {tables}"
    );

    // A merge nothing reads from warns of nothing.
    lh.run(&["branch", "create", "quiet"]).ok();
    let extra = lh.file("extra.csv", "k\n1\n");
    lh.run(&[
        "table",
        "import",
        "raw.extra",
        extra.to_str().unwrap(),
        "--ref",
        "quiet",
    ])
    .ok();
    let m = json(&lh.run(&["merge", "quiet", "--into", "main", "-o", "json"]));
    assert!(m.get("breaking").is_none(), "{m}");
}
