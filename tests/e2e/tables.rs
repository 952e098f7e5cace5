//! Tables: import (create, append, replace; CSV, Parquet, JSON), list, show, remove,
//! and every bad input leaving the table as it was.

use lh_e2e::Server;

use crate::snap;

const ORDERS: &str = "id,customer,amount,ordered_at\n1,alice,10.50,2026-01-01\n2,bob,20.00,2026-01-02\n3,carol,,2026-01-03\n";

#[test]
fn import_create_append_replace() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("orders.csv", ORDERS);
    snap!(
        "import_create",
        server,
        lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
    );
    snap!("table_ls", server, lh.run(&["table", "ls"]));
    // Rows and size from the snapshot's summary, in JSON too.
    let listed: serde_json::Value =
        serde_json::from_str(lh.run(&["table", "ls", "-o", "json"]).ok()).unwrap();
    let t = &listed["tables"][0];
    assert_eq!(t["rows"], 3, "{listed}");
    assert!(t["bytes"].as_u64().is_some_and(|b| b > 0), "{listed}");
    assert!(t["updated_at"].is_string(), "{listed}");
    snap!(
        "table_show",
        server,
        lh.run(&["table", "show", "raw.orders"])
    );
    let more = lh.file(
        "more.csv",
        "id,customer,amount,ordered_at\n4,dave,5,2026-02-01\n",
    );
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        more.to_str().unwrap(),
        "--mode",
        "append",
    ])
    .ok();
    let rows = lh.rows(
        "select id, customer, amount from raw.orders order by id",
        "main",
    );
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[3]["customer"], "dave");
    assert_eq!(rows[2]["amount"], serde_json::Value::Null);
    // Several files at once, and JSON output of the import.
    let out = lh.run(&[
        "table",
        "import",
        "raw.orders",
        csv.to_str().unwrap(),
        more.to_str().unwrap(),
        "--mode",
        "append",
        "-o",
        "json",
    ]);
    let r: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(r["rows"], 4);
    assert_eq!(
        lh.rows("select count(*) AS n from raw.orders", "main")[0]["n"],
        8
    );
    // Replace: the new files, and their schema, become the table.
    let replacement = lh.file(
        "v2.csv",
        "id,customer,amount,ordered_at,status\n9,zoe,1.5,2026-03-01,open\n",
    );
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        replacement.to_str().unwrap(),
        "--mode",
        "replace",
    ])
    .ok();
    let rows = lh.rows("select * from raw.orders", "main");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "open");
    let show: serde_json::Value =
        serde_json::from_str(lh.run(&["table", "show", "raw.orders", "-o", "json"]).ok()).unwrap();
    assert_eq!(show["rows"], 1);
    assert_eq!(show["snapshots"].as_array().unwrap().len(), 4);
    assert_eq!(show["snapshots"][0]["operation"], "overwrite");
    let ids: Vec<i64> = show["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        [1, 2, 3, 4, 5],
        "columns kept their ids; the new one got the next"
    );
}

#[test]
fn parquet_and_json_imports() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("orders.csv", ORDERS);
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    // Round trip: a query result written as Parquet imports as a new table.
    let pq = server.dir.path().join("orders.parquet");
    lh.run(&[
        "query",
        "select * from raw.orders",
        "--out",
        pq.to_str().unwrap(),
    ])
    .ok();
    lh.run(&["table", "import", "copy.orders", pq.to_str().unwrap()])
        .ok();
    assert_eq!(
        lh.rows("select * from copy.orders order by id", "main"),
        lh.rows("select * from raw.orders order by id", "main")
    );
    let json = lh.file("events.ndjson", "{\"id\": 1, \"tags\": [\"a\", \"b\"], \"user\": {\"name\": \"x\", \"age\": 3}}\n{\"id\": 2, \"tags\": [], \"user\": {\"name\": \"y\", \"age\": null}}\n");
    lh.run(&["table", "import", "raw.events", json.to_str().unwrap()])
        .ok();
    let rows = lh.rows(
        "select id, len(tags) AS n, user.name AS name from raw.events order by id",
        "main",
    );
    assert_eq!(rows[0]["n"], 2);
    assert_eq!(rows[1]["name"], "y");
    let show = lh.run(&["table", "show", "raw.events"]);
    assert!(show.ok().contains("list<string>"), "{}", show.stdout);
    assert!(
        show.ok().contains("struct<name: string, age: long>"),
        "{}",
        show.stdout
    );
}

#[test]
fn bad_imports_change_nothing() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("orders.csv", ORDERS);
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    let before = lh.head("main");
    let warehouse_files = || walk(&server.warehouse_dir()).len();
    let files_before = warehouse_files();

    let malformed = lh.file(
        "bad.csv",
        "id,customer,amount,ordered_at\n1,alice,10,2026-01-01\n2,bob,20,2026-01-02,extra,fields\n",
    );
    let run = lh.run(&[
        "table",
        "import",
        "raw.orders",
        malformed.to_str().unwrap(),
        "--mode",
        "append",
    ]);
    let err = run.fails(5);
    assert!(
        err.contains("cannot import") && err.contains("bad.csv"),
        "{err}"
    );
    assert!(
        !err.contains("uploads"),
        "no server paths in messages: {err}"
    );

    let mismatch = lh.file("other.csv", "id,name\n1,x\n");
    snap!(
        "import_schema_mismatch",
        server,
        lh.run(&[
            "table",
            "import",
            "raw.orders",
            mismatch.to_str().unwrap(),
            "--mode",
            "append"
        ])
    );
    let wrong_type = lh.file(
        "wrong.csv",
        "id,customer,amount,ordered_at\nabc,alice,10,2026-01-01\n",
    );
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        wrong_type.to_str().unwrap(),
        "--mode",
        "append",
    ])
    .fails(5);
    snap!(
        "import_exists",
        server,
        lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
    );
    snap!(
        "import_missing_table",
        server,
        lh.run(&[
            "table",
            "import",
            "raw.nope",
            csv.to_str().unwrap(),
            "--mode",
            "append"
        ])
    );
    snap!(
        "import_bad_name",
        server,
        lh.run(&["table", "import", "Raw.Orders", csv.to_str().unwrap()])
    );
    lh.run(&["table", "import", "orders", csv.to_str().unwrap()])
        .fails(5);
    lh.run(&["table", "import", "raw.x", "missing.csv"])
        .fails(5);
    let unknown = lh.file("data.txt", "a\n1\n");
    snap!(
        "import_unknown_format",
        server,
        lh.run(&["table", "import", "raw.x", unknown.to_str().unwrap()])
    );
    lh.run(&["tag", "create", "v1"]).ok();
    snap!(
        "import_to_tag",
        server,
        lh.run(&[
            "table",
            "import",
            "raw.x",
            csv.to_str().unwrap(),
            "--ref",
            "v1"
        ])
    );
    lh.run(&[
        "table",
        "import",
        "raw.x",
        csv.to_str().unwrap(),
        "--ref",
        "nope",
    ])
    .fails(3);
    let empty_col = lh.file("dots.csv", "a.b\n1\n");
    lh.run(&["table", "import", "raw.dots", empty_col.to_str().unwrap()])
        .fails(5);

    assert_eq!(lh.head("main"), before, "no commit");
    assert_eq!(warehouse_files(), files_before, "no file left behind");
    assert_eq!(
        lh.rows("select count(*) AS n from raw.orders", "main")[0]["n"],
        3
    );
    // Nothing staged stays behind either.
    assert!(walk(&server.data_dir().join("uploads")).is_empty());
}

/// An upload larger than `lh server --max-upload` is refused (413, exit 7) and nothing
/// of it is kept; one within the limit goes through.
#[test]
fn an_upload_above_the_servers_limit_is_refused_and_nothing_is_kept() {
    let server = Server::start_with(&["--max-upload", "64k"]);
    let lh = server.lh();
    let mut big = String::from("id,pad\n");
    for i in 0..4000 {
        big.push_str(&format!("{i},{}\n", "x".repeat(40)));
    }
    let csv = lh.file("big.csv", &big);
    let run = lh.run(&["table", "import", "raw.big", csv.to_str().unwrap()]);
    let err = run.fails(7);
    assert!(
        err.contains("larger than the largest upload this server takes"),
        "{err}"
    );
    let uploads = server.data_dir().join("uploads");
    assert!(
        std::fs::read_dir(&uploads).map_or(true, |mut d| d.next().is_none()),
        "nothing of the upload is kept"
    );
    lh.run(&["query", "select * from raw.big"]).fails(3);
    let small = lh.file("small.csv", ORDERS);
    lh.run(&["table", "import", "raw.small", small.to_str().unwrap()])
        .ok();
}

#[test]
fn remove_a_table() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("orders.csv", ORDERS);
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    lh.run(&["branch", "create", "keep"]).ok();
    snap!("table_rm", server, lh.run(&["table", "rm", "raw.orders"]));
    lh.run(&["query", "select * from raw.orders"]).fails(3);
    // Other refs still see it, and its files.
    assert_eq!(
        lh.rows("select count(*) AS n from raw.orders", "keep")[0]["n"],
        3
    );
    lh.run(&["table", "rm", "raw.orders"]).fails(3);
    lh.run(&["table", "show", "raw.orders"]).fails(3);
}

/// Appends commute: six imports appending to one table at once all land, each rebased
/// onto the others' as it finds the table moved (across servers too).
#[test]
fn concurrent_appends_all_land() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("orders.csv", ORDERS);
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let lh = lh.clone();
            let csv = csv.clone();
            std::thread::spawn(move || {
                lh.run(&[
                    "table",
                    "import",
                    "raw.orders",
                    csv.to_str().unwrap(),
                    "--mode",
                    "append",
                ])
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().ok();
    }
    let n = lh.rows("select count(*) AS n from raw.orders", "main")[0]["n"]
        .as_i64()
        .unwrap();
    assert_eq!(n, 3 + 3 * 6, "every append is there, once");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
