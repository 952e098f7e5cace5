//! Branches, tags, checkout, log, diff and merge through the CLI.

use lh_e2e::Server;

use crate::snap;

#[test]
fn branches_and_tags() {
    let server = Server::start();
    let lh = server.lh();
    snap!(
        "branch_create",
        server,
        lh.run(&["branch", "create", "alice.fix-billing"])
    );
    lh.run(&["tag", "create", "v1", "--from", "main"]).ok();
    snap!("branch_ls", server, lh.run(&["branch", "ls"]));
    snap!("tag_ls", server, lh.run(&["tag", "ls"]));
    let json: serde_json::Value =
        serde_json::from_str(lh.run(&["branch", "ls", "-o", "json"]).ok()).unwrap();
    let names: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alice.fix-billing", "main"]);
    let csv = lh.run(&["tag", "ls", "-o", "csv"]);
    assert!(csv.ok().starts_with("name,head\nv1,"), "{}", csv.stdout);

    // Bad input: clear errors, non-zero exits, nothing changed.
    snap!(
        "branch_create_bad_name",
        server,
        lh.run(&["branch", "create", "a..b"])
    );
    snap!(
        "branch_create_exists",
        server,
        lh.run(&["branch", "create", "alice.fix-billing"])
    );
    snap!(
        "branch_create_unknown_from",
        server,
        lh.run(&["branch", "create", "x", "--from", "nope"])
    );
    snap!("branch_rm_main", server, lh.run(&["branch", "rm", "main"]));
    snap!("tag_rm_unknown", server, lh.run(&["tag", "rm", "nope"]));
    lh.run(&["branch", "create", "-bad"]).fails(2);
    lh.run(&["branch", "create", "bad name"]).fails(5);
    lh.run(&["branch", "create", "x", "--from", "main@zzz"])
        .fails(5);
    lh.run(&["branch", "create", "x", "--from", "@0123456789"])
        .fails(3);
    let json2: serde_json::Value =
        serde_json::from_str(lh.run(&["branch", "ls", "-o", "json"]).ok()).unwrap();
    assert_eq!(json, json2, "nothing changed");

    lh.run(&["branch", "rm", "alice.fix-billing"]).ok();
    lh.run(&["tag", "rm", "v1"]).ok();
    assert!(!lh.run(&["branch", "ls"]).ok().contains("alice"));
}

/// `lh diff A...B` shows what B changed since it left A (their merge base), not what A
/// changed meanwhile (which `lh diff A B` shows as removed); `lh status` says both.
#[test]
fn status_and_three_dots_show_what_a_branch_changed_since_it_left() {
    let server = Server::start();
    let lh = server.lh();
    let import = |table: &str, at: &str| {
        let csv = lh.file(&format!("{table}.csv"), "id\n1\n");
        lh.run(&["table", "import", table, csv.to_str().unwrap(), "--ref", at])
            .ok();
    };
    import("raw.a", "main");
    lh.run(&["checkout", "-b", "dev"]).ok();
    import("raw.b", "dev");
    import("raw.c", "main");
    let two = lh.run(&["diff", "main", "dev", "--no-rows"]);
    assert!(
        two.ok().contains("raw.c") && two.stdout.contains("raw.b"),
        "{}",
        two.stdout
    );
    let three = lh.run(&["diff", "main...dev", "--no-rows"]);
    assert!(three.ok().contains("raw.b"), "{}", three.stdout);
    assert!(!three.stdout.contains("raw.c"), "{}", three.stdout);
    let rows = lh.run(&["diff", "main...dev", "--table", "raw.b"]);
    assert!(
        rows.ok().contains("raw.b: 1 added, 0 removed"),
        "{}",
        rows.stdout
    );
    let bad = lh.run(&["diff", "main"]);
    assert_eq!(bad.code, 5, "{}", bad.both());
    assert!(
        bad.stderr.contains("give two refs, or A...B"),
        "{}",
        bad.stderr
    );

    let status = lh.run(&["status"]);
    let said = status.ok();
    assert!(said.contains("On branch dev"), "{said}");
    assert!(said.contains("changed 1 table since: raw.b"), "{said}");
    assert!(
        said.contains("'main' changed 1 table since: raw.c"),
        "{said}"
    );
    let json: serde_json::Value =
        serde_json::from_str(lh.run(&["status", "-o", "json"]).ok()).unwrap();
    assert_eq!(json["branch"], "dev");
    assert_eq!(json["changed"], serde_json::json!(["raw.b"]));
    assert_eq!(json["changed_on_default"], serde_json::json!(["raw.c"]));
    lh.run(&["checkout", "main"]).ok();
    assert!(lh.run(&["status"]).ok().contains("On branch main"));
}

/// A typo'd ref or table gets the nearest name the user may list (as git and DuckDB
/// suggest); a name near nothing gets none.
#[test]
fn a_typo_is_answered_with_the_nearest_name() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("orders.csv", "id\n1\n");
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    lh.run(&["branch", "create", "alice.discounts"]).ok();
    let hint = |args: &[&str]| {
        let out = lh.run(args);
        assert_eq!(out.code, 3, "{args:?}: {}", out.both());
        out.stderr
    };
    let said = hint(&["query", "select 1", "--ref", "mian"]);
    assert!(said.contains("hint: did you mean 'main'?"), "{said}");
    let said = hint(&["log", "alice.discount"]);
    assert!(said.contains("did you mean 'alice.discounts'?"), "{said}");
    let said = hint(&["table", "show", "raw.ordrs"]);
    assert!(said.contains("did you mean 'raw.orders'?"), "{said}");
    let said = hint(&["query", "select * from raw.ordres"]);
    assert!(said.contains("did you mean 'raw.orders'?"), "{said}");
    assert!(said.contains("lh table ls"), "the remedy stays: {said}");
    let said = hint(&["query", "select 1", "--ref", "production"]);
    assert!(!said.contains("did you mean"), "{said}");
}

#[test]
fn checkout_sets_the_active_branch() {
    let server = Server::start();
    let lh = server.lh();
    snap!("checkout_b", server, lh.run(&["checkout", "-b", "dev"]));
    assert!(lh.run(&["branch", "ls"]).ok().contains("*  dev"));
    // --ref defaults to the active branch: a table imported now lands on dev only.
    let csv = lh.file("t.csv", "a,b\n1,x\n2,y\n");
    lh.run(&["table", "import", "raw.t", csv.to_str().unwrap()])
        .ok();
    assert_eq!(lh.rows("select count(*) AS n from raw.t", "dev")[0]["n"], 2);
    lh.run(&["query", "select * from raw.t", "--ref", "main"])
        .fails(3);
    lh.run(&["checkout", "main"]).ok();
    lh.run(&["query", "select * from raw.t"]).fails(3);
    let info: serde_json::Value =
        serde_json::from_str(lh.run(&["info", "-o", "json"]).ok()).unwrap();
    assert_eq!(info["active_branch"], "main");
    snap!("checkout_unknown", server, lh.run(&["checkout", "nope"]));
    lh.run(&["tag", "create", "v1"]).ok();
    snap!("checkout_tag", server, lh.run(&["checkout", "v1"]));
    // The config file holds the profile.
    let config = std::fs::read_to_string(lh.home.join("config.yaml")).unwrap();
    assert!(config.contains("branch: main"), "{config}");
}

#[test]
fn log_diff_and_merge() {
    let server = Server::start();
    let lh = server.lh();
    let a = lh.file("a.csv", "id,v\n1,10\n2,20\n");
    let b = lh.file("b.csv", "id,v\n3,30\n");
    lh.run(&["table", "import", "raw.a", a.to_str().unwrap()])
        .ok();
    lh.run(&["table", "import", "raw.b", a.to_str().unwrap()])
        .ok();
    lh.run(&["branch", "create", "dev"]).ok();
    lh.run(&[
        "table",
        "import",
        "raw.a",
        b.to_str().unwrap(),
        "--ref",
        "dev",
        "--mode",
        "append",
    ])
    .ok();
    lh.run(&[
        "table",
        "import",
        "raw.c",
        b.to_str().unwrap(),
        "--ref",
        "dev",
    ])
    .ok();
    snap!("diff", server, lh.run(&["diff", "main", "dev"]));
    snap!("diff_none", server, lh.run(&["diff", "main", "main"]));
    let d: serde_json::Value =
        serde_json::from_str(lh.run(&["diff", "main", "dev", "-o", "json"]).ok()).unwrap();
    assert_eq!(d["tables"].as_array().unwrap().len(), 2);
    snap!("log", server, lh.run(&["log", "dev", "-n", "2"]));
    let old_main = lh.head("main");
    // main moves on another table: a real merge commit.
    lh.run(&[
        "table",
        "import",
        "raw.b",
        b.to_str().unwrap(),
        "--mode",
        "append",
    ])
    .ok();
    snap!(
        "merge",
        server,
        lh.run(&["merge", "dev", "--into", "main", "-m", "publish dev"])
    );
    assert_eq!(
        lh.rows("select count(*) AS n from raw.a", "main")[0]["n"],
        3
    );
    assert_eq!(
        lh.rows("select count(*) AS n from raw.b", "main")[0]["n"],
        3
    );
    // Time travel: main before the merge, by its commit.
    assert_eq!(
        lh.rows(
            "select count(*) AS n from raw.a",
            &format!("main@{}", &old_main[..12])
        )[0]["n"],
        2
    );
    let log: serde_json::Value =
        serde_json::from_str(lh.run(&["log", "-n", "1", "-o", "json"]).ok()).unwrap();
    assert_eq!(log[0]["message"], "publish dev");
    assert_eq!(log[0]["author"], "tester");
    // One line per commit, as `git log --oneline`.
    let oneline = lh.run(&["log", "-n", "2", "--oneline"]);
    let lines: Vec<&str> = oneline.ok().lines().collect();
    assert_eq!(lines.len(), 2, "{}", oneline.stdout);
    let id = log[0]["id"].as_str().unwrap();
    assert_eq!(lines[0], format!("{} (merge) publish dev", &id[..12]));
    // The merge with what it brought in beside main's own, joining where dev left main.
    snap!("log_graph", server, lh.run(&["log", "--graph", "-n", "4"]));
    snap!(
        "merge_up_to_date",
        server,
        lh.run(&["merge", "dev", "--into", "main"])
    );
}

#[test]
fn merge_conflicts_are_listed_and_change_nothing() {
    let server = Server::start();
    let lh = server.lh();
    let a = lh.file("a.csv", "id\n1\n");
    lh.run(&["table", "import", "raw.x", a.to_str().unwrap()])
        .ok();
    lh.run(&["table", "import", "raw.y", a.to_str().unwrap()])
        .ok();
    lh.run(&["branch", "create", "dev"]).ok();
    for t in ["raw.x", "raw.y"] {
        lh.run(&[
            "table",
            "import",
            t,
            a.to_str().unwrap(),
            "--mode",
            "append",
            "--ref",
            "dev",
        ])
        .ok();
        // A replace on main: appends alone on both sides would combine.
        lh.run(&[
            "table",
            "import",
            t,
            a.to_str().unwrap(),
            "--mode",
            "replace",
        ])
        .ok();
    }
    let before = lh.head("main");
    let run = lh.run(&["merge", "dev", "--into", "main"]);
    let err = run.fails(4);
    assert!(err.contains("raw.x") && err.contains("raw.y"), "{err}");
    snap!("merge_conflict", server, run);
    assert_eq!(lh.head("main"), before, "main unchanged");
    // Merging into a tag, or from nothing.
    lh.run(&["tag", "create", "t"]).ok();
    lh.run(&["merge", "dev", "--into", "t"]).fails(5);
    lh.run(&["merge", "nope", "--into", "main"]).fails(3);
    lh.run(&["merge", "dev", "--into", "gone"]).fails(3);

    // The ways forward the conflict names: per table, then one side for the rest.
    let rows = |t: &str, at: &str| {
        lh.rows(&format!("select count(*) AS n from {t}"), at)[0]["n"]
            .as_i64()
            .unwrap()
    };
    let (dev_x, main_y) = (rows("raw.x", "dev"), rows("raw.y", "main"));
    lh.run(&[
        "merge",
        "dev",
        "--into",
        "main",
        "--take-source",
        "raw.x",
        "--take-dest",
        "raw.x",
    ])
    .fails(5);
    lh.run(&["merge", "dev", "--into", "main", "--take-source", "raw.x"])
        .fails(4);
    assert_eq!(
        lh.head("main"),
        before,
        "raw.y still conflicts: nothing merged"
    );
    let preview = lh.run(&[
        "merge",
        "dev",
        "--into",
        "main",
        "--take-source",
        "raw.x",
        "--strategy",
        "dest-wins",
        "--dry-run",
    ]);
    assert!(preview.both().contains("would merge"), "{}", preview.both());
    assert_eq!(lh.head("main"), before);
    lh.run(&[
        "merge",
        "dev",
        "--into",
        "main",
        "--take-source",
        "raw.x",
        "--strategy",
        "dest-wins",
    ])
    .ok();
    assert_eq!(rows("raw.x", "main"), dev_x, "raw.x from dev");
    assert_eq!(rows("raw.y", "main"), main_y, "raw.y kept as main had it");
    lh.run(&["merge", "dev", "--into", "main", "--strategy", "sideways"])
        .fails(2);
}
