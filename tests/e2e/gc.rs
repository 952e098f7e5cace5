//! `lh gc`: the warehouse files no commit reaches go, once old enough; everything any
//! ref or commit reads stays.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use lh_e2e::Server;
use serde_json::{Value, json};

use crate::rest::client;
use crate::runs::slow_table_dirs;

/// Every regular file under `dir`, relative to it.
fn files(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel);
            }
        }
    }
    out
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn age(path: &Path, by: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

/// Makes every folder under `dir` (and `dir`) look last changed `by` ago.
fn age_folders(dir: &Path, by: Duration) {
    let mut all = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < all.len() {
        for e in std::fs::read_dir(&all[i]).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                all.push(e.path());
            }
        }
        i += 1;
    }
    for d in &all {
        std::fs::File::open(d)
            .unwrap()
            .set_modified(SystemTime::now() - by)
            .unwrap();
    }
}

#[test]
fn gc_removes_only_what_no_commit_reaches() {
    let server = Server::start();
    let lh = server.lh();
    let wh: PathBuf = server.warehouse_dir();
    let csv = |name: &str, text: &str| lh.file(name, text).to_str().unwrap().to_string();

    // A table on main; on a branch, another table and a new version of the first; then
    // the branch goes: its commits stay readable by hash, so their files stay.
    lh.run(&["table", "import", "shop.a", &csv("a.csv", "id\n1\n2\n3\n")])
        .ok();
    lh.run(&["branch", "create", "dev"]).ok();
    lh.run(&[
        "table",
        "import",
        "shop.b",
        &csv("b.csv", "id\n7\n"),
        "--ref",
        "dev",
    ])
    .ok();
    lh.run(&[
        "table",
        "import",
        "shop.a",
        &csv("a2.csv", "id\n4\n5\n"),
        "--ref",
        "dev",
        "--mode",
        "replace",
    ])
    .ok();
    let dev = lh.head("dev");
    lh.run(&["branch", "rm", "dev"]).ok();
    // pyiceberg writers through the REST catalog: the loser's refused commit leaves
    // its data file, manifest and manifest list behind.
    lh.run(&[
        "table",
        "import",
        "shop.counts",
        &csv("c.csv", "id,v\n1,1\n2,2\n"),
    ])
    .ok();
    let w = client(&server, "writers", "main", &["shop.counts"]);
    assert!(w["conflict"].is_string(), "{w}");
    // Orphans by hand: a file in a live table's folder, a table folder no commit has.
    let a_dir = std::fs::read_dir(wh.join("shop"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("a-"))
        .unwrap();
    let stray = format!("shop/{a_dir}/data/0000-stray/part-0.parquet");
    let ghost_dir = "shop/ghost-00000000000000000000000000000000";
    let ghost = format!("{ghost_dir}/metadata/00000-ghost.metadata.json");
    // Not in a table folder: not lh's to remove, however old.
    let foreign = "notes/readme.txt";
    write(&wh.join(foreign), b"mine");
    write(&wh.join(&stray), &[7u8; 1000]);
    write(&wh.join(&ghost), b"{}");
    // Everything is two days old, but one more orphan, just written.
    let all = files(&wh);
    for f in &all {
        age(&wh.join(f), Duration::from_secs(2 * 86400));
    }
    age_folders(&wh, Duration::from_secs(2 * 86400));
    let fresh = format!("shop/{a_dir}/data/fresh.parquet");
    write(&wh.join(&fresh), b"new");
    let reads = || {
        (
            lh.rows("select count(*) AS n, sum(id) AS s from shop.a", "main"),
            lh.rows(
                "select count(*) AS n, sum(id) AS s from shop.a",
                &format!("@{dev}"),
            ),
            lh.rows("select count(*) AS n from shop.b", &format!("@{dev}")),
            lh.rows(
                "select count(*) AS n, count(distinct id) AS d from shop.counts",
                "main",
            ),
        )
    };
    let before = reads();
    assert_eq!(before.0, vec![json!({"n": 3, "s": 6})]);
    assert_eq!(before.1, vec![json!({"n": 2, "s": 9})]);
    assert_eq!(before.3, vec![json!({"n": 44, "d": 44})]);

    // A dry run lists the old orphans and removes nothing.
    let gc = |args: &[&str]| -> Value {
        let mut all = vec!["gc", "--older-than", "1d", "-o", "json"];
        all.extend_from_slice(args);
        serde_json::from_str(lh.run(&all).ok()).unwrap()
    };
    let dry = gc(&["--dry-run"]);
    let listed: BTreeSet<String> = dry["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    // Exactly the two made by hand and the refused pyiceberg commit's files.
    let from_rest: BTreeSet<String> = listed
        .iter()
        .filter(|f| f.starts_with("shop/counts-"))
        .cloned()
        .collect();
    assert!(!from_rest.is_empty(), "{dry}");
    let by_hand: BTreeSet<String> = listed.difference(&from_rest).cloned().collect();
    assert_eq!(
        by_hand,
        BTreeSet::from([stray.clone(), ghost.clone()]),
        "{dry}"
    );
    assert_eq!(dry["foreign_files"], 1, "{dry}");
    assert_eq!(dry["removed_files"], listed.len() as u64, "{dry}");
    assert_eq!(dry["recent_files"], 1, "{dry}");
    assert_eq!(files(&wh).len(), all.len() + 1, "a dry run removes nothing");

    // The real run removes exactly those, and the folders they leave empty.
    let text = lh.run(&["gc", "--older-than", "1d"]);
    let said = text.ok();
    assert!(
        text.stderr
            .contains(&format!("removed {} files", listed.len())),
        "{said}{}",
        text.stderr
    );
    let left = files(&wh);
    let mut want: BTreeSet<String> = all.difference(&listed).cloned().collect();
    want.insert(fresh.clone());
    assert_eq!(left, want);
    if server.warehouse.is_s3() {
        // An object store has no folders (s3s-fs leaves the empty one on its disk).
        assert!(files(&wh.join(ghost_dir)).is_empty());
    } else {
        assert!(!wh.join(ghost_dir).exists());
    }
    assert!(wh.join(format!("shop/{a_dir}")).exists());
    // Every ref and commit reads what it read; a second collection finds nothing.
    assert_eq!(reads(), before);
    let again = gc(&[]);
    assert_eq!(again["removed_files"], 0, "{again}");
    assert_eq!(again["live_files"], dry["live_files"], "{again}");
    // pyiceberg still reads every snapshot of the table it wrote.
    let scan = client(&server, "snapshots", "main", &["shop.counts"]);
    assert!(scan["snapshots"].as_u64().unwrap() > 10, "{scan}");

    // Bad input: too short a grace period, an age that is not one.
    let err = lh.run(&["gc", "--older-than", "12h"]).fails(5).to_string();
    assert!(err.contains("too short"), "{err}");
    lh.run(&["gc", "--older-than", "soon"]).fails(2);
    assert_eq!(files(&wh), want);
}

/// A server killed (SIGKILL) while a pipeline writes a table: after a restart the run
/// is failed, the branch is untouched and every table reads; the write's leftovers are
/// what `lh gc` removes, and nothing else.
#[test]
fn a_server_killed_mid_write_loses_nothing_and_gc_clears_what_it_left() {
    let mut server = Server::start_with(&["--runtime", "process", "--run-lease", "1s"]);
    let lh = server.lh();
    let wh: PathBuf = server.warehouse_dir();
    let csv = lh.file("orders.csv", "id,amount\n1,10\n2,20\n");
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    // A SQL model over a 10^12-row cross product: it is surely running when killed.
    let dir = lh.cwd.join("slow");
    write(
        &dir.join("lh_project.yml"),
        b"name: shop\nnamespace: analytics\n",
    );
    write(
        &dir.join("slow.sql"),
        b"SELECT count(*) AS n FROM range(1000000) a, range(1000000) b WHERE a.range + b.range = 7\n",
    );
    write(&dir.join("copy.sql"), b"SELECT * FROM raw.orders\n");
    let main = lh.head("main");
    let id = lh
        .run(&["run", dir.to_str().unwrap(), "--detach"])
        .ok()
        .trim()
        .to_string();
    // Killed once the slow model writes and the quick one has published to the run's
    // branch.
    let mut started = false;
    for _ in 0..400 {
        let r: Value =
            serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
        let copy_done = r["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["name"] == "analytics.copy" && n["status"] == "done");
        if copy_done && !slow_table_dirs(&server).is_empty() {
            started = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(started, "the slow model never started");
    server.kill();
    let before = files(&wh);

    server.restart();
    let lh = server.lh();
    // The restarted server takes its run over once the lease (1 s) runs out: the quick
    // model's output is kept, the slow one starts again; cancelled, nothing publishes.
    let mut resumed = false;
    for _ in 0..200 {
        let r: Value =
            serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
        let slow = r["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == "analytics.slow")
            .cloned()
            .unwrap();
        if server.log().contains("taking over a run") && slow["status"] == "running" {
            resumed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(resumed, "the restarted server did not take its run over");
    let cancel = lh.run(&["runs", "cancel", &id[..12]]);
    assert_eq!(
        cancel.code,
        0,
        "{}\n{}\n{}",
        cancel.stderr,
        lh.run(&["runs", "show", &id, "-o", "json"]).stdout,
        server.log()
    );
    let run: Value =
        serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(lh.head("main"), main);
    assert_eq!(
        lh.rows("select sum(amount) AS s from raw.orders", "main"),
        vec![json!({"s": 30})]
    );
    lh.run(&["query", "select * from analytics.slow"]).fails(3);

    // Days later: the killed write's folders go; every table version stays.
    for f in &before {
        age(&wh.join(f), Duration::from_secs(4 * 86400));
    }
    age_folders(&wh, Duration::from_secs(4 * 86400));
    let out = lh.run(&["gc", "-o", "json"]);
    let gc: Value = serde_json::from_str(out.ok()).unwrap();
    if server.warehouse.is_s3() {
        // On S3 the killed write had uploaded nothing (its files wait on the server's
        // disk until the upload, and a restart clears them): nothing to remove.
        assert_eq!(gc["removed_files"], 0, "{gc}");
    } else {
        assert!(gc["removed_folders"].as_u64().unwrap() >= 1, "{gc}");
    }
    assert!(slow_table_dirs(&server).is_empty(), "{gc}");
    // What it removed is not reached by any commit: every ref and run branch reads.
    assert_eq!(
        lh.rows("select sum(amount) AS s from raw.orders", "main"),
        vec![json!({"s": 30})]
    );
    let branch = run["run_branch"].as_str().unwrap();
    assert_eq!(
        lh.rows("select count(*) AS n from analytics.copy", branch),
        vec![json!({"n": 2})]
    );
}

/// One spelling for every location: a REST create naming its location as
/// `file://localhost/...` (or `s3a://...`) is stored in the form the server reads back
/// (`file:///...`, `s3://...`), and its table reads after a restart. A table version
/// that cannot be read (its metadata file lost) keeps its own table folder whole and
/// is named, and gc collects the rest of the warehouse.
#[test]
fn locations_are_stored_canonically_and_an_unreadable_version_keeps_only_its_folder() {
    let mut server = Server::start();
    let lh = server.lh();
    let info: Value = serde_json::from_str(lh.run(&["info", "-o", "json"]).ok()).unwrap();
    let canonical = info["server"]["warehouse"].as_str().unwrap().to_string();
    let other_spelling = if server.warehouse.is_s3() {
        canonical.replacen("s3://", "s3a://", 1)
    } else {
        canonical.replacen("file://", "file://localhost", 1)
    };
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let rest = format!("{}/iceberg/v1/main", server.url);
    let auth = format!("Bearer {}", server.token());
    let post = |path: &str, body: Value| -> (u16, Value) {
        let mut r = http
            .post(&format!("{rest}{path}"))
            .header("Authorization", &auth)
            .send_json(body)
            .unwrap();
        let status = r.status().as_u16();
        (status, r.body_mut().read_json().unwrap_or(Value::Null))
    };
    let (s, _) = post("/namespaces", json!({"namespace": ["gcx"]}));
    assert_eq!(s, 200);
    let (s, created) = post(
        "/namespaces/gcx/tables",
        json!({"name": "a", "location": format!("{other_spelling}/gcx/a"),
               "schema": {"type": "struct", "schema-id": 0,
                          "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}}),
    );
    assert_eq!(s, 200, "{created}");
    let want = format!("{canonical}/gcx/a");
    assert_eq!(created["metadata"]["location"], want.as_str(), "{created}");
    assert!(
        created["metadata-location"]
            .as_str()
            .unwrap()
            .starts_with(&want),
        "{created}"
    );
    // A location outside the warehouse (another bucket, another folder) is refused,
    // and no table appears.
    let outside = if server.warehouse.is_s3() {
        "s3://some-other-bucket/gcx/b".to_string()
    } else {
        "file:///tmp/elsewhere/gcx/b".to_string()
    };
    let (s, refused) = post(
        "/namespaces/gcx/tables",
        json!({"name": "b", "location": outside,
               "schema": {"type": "struct", "schema-id": 0,
                          "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}}),
    );
    assert!((400..500).contains(&s), "{s} {refused}");
    assert!(
        refused.to_string().contains("outside the warehouse"),
        "{refused}"
    );
    server.restart();
    let lh = server.lh();
    lh.run(&["table", "show", "gcx.b"]).fails(3);
    let show: Value =
        serde_json::from_str(lh.run(&["table", "show", "gcx.a", "-o", "json"]).ok()).unwrap();
    assert_eq!(show["location"], want.as_str(), "{show}");

    // Two tables; one loses its metadata files.
    let wh = server.warehouse_dir();
    for t in ["t", "u"] {
        let csv = lh.file(&format!("{t}.csv"), "id\n1\n");
        lh.run(&[
            "table",
            "import",
            &format!("shop.{t}"),
            csv.to_str().unwrap(),
        ])
        .ok();
    }
    let folder = |t: &str| -> String {
        std::fs::read_dir(wh.join("shop"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with(&format!("{t}-")))
            .unwrap()
    };
    let (t_dir, u_dir) = (folder("t"), folder("u"));
    for f in files(&wh.join("shop").join(&t_dir).join("metadata")) {
        if f.ends_with(".metadata.json") {
            std::fs::remove_file(wh.join("shop").join(&t_dir).join("metadata").join(f)).unwrap();
        }
    }
    let kept = format!("shop/{t_dir}/data/stray/x.parquet");
    let gone = format!("shop/{u_dir}/data/stray/x.parquet");
    for f in [&kept, &gone] {
        write(&wh.join(f), b"orphan");
    }
    for f in files(&wh) {
        age(&wh.join(f), Duration::from_secs(2 * 86400));
    }
    let out = lh.run(&["gc", "--older-than", "1d", "-o", "json"]);
    let gc: Value = serde_json::from_str(out.ok()).unwrap();
    let unreadable = gc["unreadable"].as_array().unwrap();
    assert_eq!(unreadable.len(), 1, "{gc}");
    assert!(unreadable[0].as_str().unwrap().contains(&t_dir), "{gc}");
    assert!(gc["protected_files"].as_u64().unwrap() >= 2, "{gc}");
    assert!(
        wh.join(&kept).exists(),
        "the unreadable table's folder is kept whole"
    );
    assert!(!wh.join(&gone).exists(), "gc went on with the other tables");
    let text = lh.run(&["gc", "--older-than", "1d"]);
    text.ok();
    assert!(
        text.stderr
            .contains("could not be read, so their table folders were left whole"),
        "{}",
        text.stderr
    );
    assert_eq!(
        lh.rows("select count(*) AS n from shop.u", "main"),
        vec![json!({"n": 1})]
    );
}

/// Retention decides what stays readable: with `main` keeping its heads only and
/// `keep/*` a day, `lh table expire` drops from the table's metadata exactly the
/// snapshots no kept commit reads (not the tag's, not those of the commits a `keep/`
/// branch reaches), and `lh gc` frees their files; every kept commit, checked one by
/// one, reads what it read, and a commit past its retention is a clear error.
#[test]
fn expiry_and_gc_keep_every_retained_commit_readable() {
    let server = Server::start_with(&[
        "--retain",
        "main=0s",
        "--retain",
        "keep/*=1d",
        "--retain",
        "*=0s",
    ]);
    let lh = server.lh();
    let wh: PathBuf = server.warehouse_dir();
    // Twenty versions of one table, each replacing the last.
    let mut commits = Vec::new();
    for i in 1..=20 {
        let rows: String = (0..i).map(|k| format!("{}\n", i * 100 + k)).collect();
        let csv = lh.file(&format!("v{i}.csv"), &format!("id\n{rows}"));
        let mode = if i == 1 { "create" } else { "replace" };
        lh.run(&[
            "table",
            "import",
            "shop.t",
            csv.to_str().unwrap(),
            "--mode",
            mode,
        ])
        .ok();
        commits.push(lh.head("main"));
    }
    lh.run(&["tag", "create", "v5", "--from", &format!("@{}", commits[4])])
        .ok();
    lh.run(&[
        "branch",
        "create",
        "keep/x",
        "--from",
        &format!("@{}", commits[9]),
    ])
    .ok();
    let read = |at: &str| lh.rows("SELECT count(*) AS n, sum(id) AS s FROM shop.t", at);
    let before: Vec<Vec<Value>> = commits.iter().map(|c| read(&format!("@{c}"))).collect();
    for (i, r) in before.iter().enumerate() {
        assert_eq!(r[0]["n"], i as i64 + 1);
    }

    // Kept: commits 1 to 10 (reached from keep/x within its day), the tag's, main's
    // head. Expired: the snapshots of commits 11 to 19.
    let out = lh.run(&[
        "table",
        "expire",
        "shop.t",
        "--older-than",
        "0s",
        "-o",
        "json",
    ]);
    let expired: Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(expired["snapshots_before"], 20, "{expired}");
    assert_eq!(expired["expired"], 9, "{expired}");
    assert_eq!(expired["snapshots_after"], 11, "{expired}");
    // Nothing more to expire; main reads the same rows after the expiry's commit.
    let again: Value = serde_json::from_str(
        lh.run(&[
            "table",
            "expire",
            "shop.t",
            "--older-than",
            "0s",
            "-o",
            "json",
        ])
        .ok(),
    )
    .unwrap();
    assert_eq!(again["expired"], 0, "{again}");
    assert_eq!(read("main"), before[19]);

    // Everything looks two days old: gc frees what only commits 11 to 20 read.
    let all = files(&wh);
    for f in &all {
        age(&wh.join(f), Duration::from_secs(2 * 86400));
    }
    let gc: Value =
        serde_json::from_str(lh.run(&["gc", "--older-than", "1d", "-o", "json"]).ok()).unwrap();
    let removed = gc["removed_files"].as_u64().unwrap();
    assert!(removed >= 9 * 3, "{gc}");
    assert!(gc["removed_bytes"].as_u64().unwrap() > 0, "{gc}");
    let data_left = files(&wh)
        .iter()
        .filter(|f| f.ends_with(".parquet"))
        .count();
    let data_before = all.iter().filter(|f| f.ends_with(".parquet")).count();
    assert_eq!(
        data_before - data_left,
        9,
        "the data of versions 11 to 19 went: {gc}"
    );
    // Every kept commit and ref reads what it read.
    for (i, c) in commits.iter().enumerate().take(10) {
        assert_eq!(read(&format!("@{c}")), before[i], "commit {}", i + 1);
    }
    assert_eq!(read("v5"), before[4]);
    assert_eq!(read("keep/x"), before[9]);
    assert_eq!(read("main"), before[19]);
    // A commit past its retention: a clear error, not a crash.
    let gone = lh.run(&[
        "query",
        "SELECT count(*) FROM shop.t",
        "--ref",
        &format!("@{}", commits[14]),
    ]);
    assert_ne!(gone.code, 0);
    assert!(gone.stderr.contains("retention"), "{}", gone.stderr);
    // A second collection finds nothing more.
    let second: Value =
        serde_json::from_str(lh.run(&["gc", "--older-than", "1d", "-o", "json"]).ok()).unwrap();
    assert_eq!(second["removed_files"], 0, "{second}");
}
