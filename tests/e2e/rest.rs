//! The Iceberg REST catalog with real clients: pyiceberg 0.12, DuckDB 1.5.5 with its
//! iceberg extension, and the iceberg crate's REST client; plus the protocol's error cases
//! over raw HTTP. The Python side is `rest_clients.py`, one scenario per call.

use std::collections::HashMap;
use std::sync::Arc;

use lh_e2e::{Lh, Server, python};
use serde_json::{Value, json};

/// The REST root of a server, as clients are configured with it.
fn rest_uri(server: &Server) -> String {
    format!("{}/iceberg", server.url)
}

/// Runs one scenario of `rest_clients.py` with the server's admin token and returns
/// what it printed.
#[track_caller]
pub(crate) fn client(server: &Server, scenario: &str, warehouse: &str, args: &[&str]) -> Value {
    client_as(server, &server.token(), scenario, warehouse, args)
}

/// [`client`] with another token (its user is the author of the scenario's commits).
#[track_caller]
pub(crate) fn client_as(
    server: &Server,
    token: &str,
    scenario: &str,
    warehouse: &str,
    args: &[&str],
) -> Value {
    client_with(
        server,
        &[("LH_TEST_TOKEN", token)],
        scenario,
        warehouse,
        args,
    )
}

/// [`client`] with `envs` set for the scenario (`LH_TEST_TOKEN`, `LH_TEST_OAUTH`).
#[track_caller]
pub(crate) fn client_with(
    server: &Server,
    envs: &[(&str, &str)],
    scenario: &str,
    warehouse: &str,
    args: &[&str],
) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/rest_clients.py");
    let out = std::process::Command::new(python())
        .arg(script)
        .arg(scenario)
        .arg(rest_uri(server))
        .arg(warehouse)
        .args(args)
        .env_remove("LH_TEST_TOKEN")
        .env_remove("LH_TEST_OAUTH")
        .envs(envs.iter().copied())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{scenario} failed:\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{scenario} printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn tables_at(lh: &Lh, at: &str) -> Vec<String> {
    let v: Value =
        serde_json::from_str(lh.run(&["table", "ls", "--ref", at, "-o", "json"]).ok()).unwrap();
    v["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn log_messages(lh: &Lh, at: &str) -> Vec<String> {
    log(lh, at).into_iter().map(|(_, m)| m).collect()
}

/// (author, message) of the commits of a ref, newest first.
fn log(lh: &Lh, at: &str) -> Vec<(String, String)> {
    let v: Value =
        serde_json::from_str(lh.run(&["log", at, "--limit", "50", "-o", "json"]).ok()).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["author"].as_str().unwrap().to_string(),
                c["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Rows read with the iceberg crate's REST client: namespaces, the tables of `ns`, and
/// the `id` column of `ns.table`, sorted.
fn rust_client_read(
    server: &Server,
    warehouse: &str,
    ns: &str,
    table: &str,
) -> (Vec<String>, Vec<String>, Vec<i64>) {
    use arrow::array::{Array, Int64Array};
    use futures::TryStreamExt;
    use iceberg::io::LocalFsStorageFactory;
    use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableIdent};
    use iceberg_catalog_rest::RestCatalogBuilder;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut props = HashMap::from([
            ("uri".to_string(), rest_uri(server)),
            ("warehouse".to_string(), warehouse.to_string()),
            ("token".to_string(), server.token()),
        ]);
        // On S3, with the credentials the catalog vends (lh's props-driven storage:
        // the iceberg crate has no S3 storage of its own).
        let factory: Arc<dyn iceberg::io::StorageFactory> = if server.warehouse.is_s3() {
            props.insert(
                "header.X-Iceberg-Access-Delegation".to_string(),
                "vended-credentials".to_string(),
            );
            lh_control_plane::warehouse::io::client_storage_factory()
        } else {
            Arc::new(LocalFsStorageFactory)
        };
        let catalog = RestCatalogBuilder::default()
            .with_storage_factory(factory)
            .load("lh", props)
            .await
            .expect("REST catalog");
        let namespaces = catalog
            .list_namespaces(None)
            .await
            .expect("list namespaces")
            .iter()
            .map(|n| n.join("."))
            .collect();
        let ns_ident = NamespaceIdent::from_strs(ns.split('.')).unwrap();
        let tables = catalog
            .list_tables(&ns_ident)
            .await
            .expect("list tables")
            .iter()
            .map(|t| t.name().to_string())
            .collect();
        let t = catalog
            .load_table(&TableIdent::new(ns_ident, table.to_string()))
            .await
            .expect("load table");
        let batches: Vec<_> = t
            .scan()
            .select(["id"])
            .build()
            .expect("scan")
            .to_arrow()
            .await
            .expect("arrow stream")
            .try_collect()
            .await
            .expect("read batches");
        let mut ids: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..col.len()).map(|i| col.value(i)).collect::<Vec<_>>()
            })
            .collect();
        ids.sort();
        (namespaces, tables, ids)
    })
}

#[test]
fn pyiceberg_writes_a_branch_that_a_merge_publishes() {
    // On S3, alice (a writer) reads and writes data files with the key the catalog
    // vends: this server trusts writers with it.
    let server = Server::start_with(&["--vend-credentials-to", "writer"]);
    let lh = server.lh();
    lh.run(&["branch", "create", "dev"]).ok();
    let before_dev = lh.head("main");

    // As alice, a writer, whose token pyiceberg exchanges at the catalog's token
    // endpoint (its `credential`) before anything else.
    let alice = server.token_for("alice", "writer");
    let py = client_with(
        &server,
        &[("LH_TEST_TOKEN", &alice), ("LH_TEST_OAUTH", "1")],
        "pyiceberg_basics",
        "dev",
        &[],
    );
    assert_eq!(py["namespaces"], json!([["shop"]]));
    assert_eq!(py["namespace_properties"], json!({"owner": "analytics"}));
    assert_eq!(py["tables"], json!([["shop", "orders"]]));
    assert_eq!(py["before_overwrite"], 3);
    assert_eq!(
        py["filtered"],
        json!([{"id": 1, "amount": 11.0}, {"id": 2, "amount": 20.5}, {"id": 4, "amount": 42.0}])
    );
    assert_eq!(py["columns"], json!(["id", "total", "status", "note"]));
    assert_eq!(py["field_ids"], json!([1, 2, 3, 4]));
    let rows = py["rows"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 5);
    assert_eq!(
        rows[4],
        json!({"id": 5, "total": 1.5, "status": "placed", "note": "late"})
    );
    assert!(
        py["metadata_location"]
            .as_str()
            .unwrap()
            .starts_with(&match &server.warehouse {
                lh_e2e::TestWarehouse::Local => format!("file://{}", server.data_dir().display()),
                lh_e2e::TestWarehouse::S3(s3) => format!("s3://{}/", s3.bucket),
            }),
        "{py}"
    );

    // lh query reads what pyiceberg wrote, renamed column included.
    let ours = lh.rows(
        "select id, total, status, note from shop.orders order by id",
        "dev",
    );
    assert_eq!(ours, rows);
    // Each write was one lh commit on dev, saying what it did, by the user of the
    // client's token; main did not move.
    let commits = log(&lh, "dev");
    for m in [
        "create shop.orders",
        "append shop.orders",
        "schema change shop.orders",
    ] {
        assert!(
            commits.iter().any(|(a, x)| x == m && a == "alice"),
            "no '{m}' by alice in {commits:?}"
        );
    }
    assert_eq!(lh.head("main"), before_dev);
    assert!(!tables_at(&lh, "main").contains(&"shop.orders".to_string()));
    assert_eq!(
        client(&server, "read", "main", &["shop.orders"])["exists"],
        false
    );

    // Merged, main reads the same rows, through every client.
    lh.run(&["merge", "dev", "--into", "main"]).ok();
    let on_main = client(&server, "read", "main", &["shop.orders"]);
    assert_eq!(on_main["rows"], Value::Array(rows.clone()));
    let (namespaces, tables, ids) = rust_client_read(&server, "main", "shop", "orders");
    assert!(namespaces.contains(&"shop".to_string()), "{namespaces:?}");
    assert_eq!(tables, vec!["orders".to_string()]);
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);

    // A tag and a fixed commit read, and refuse writes with the spec's 403.
    lh.run(&["tag", "create", "v1"]).ok();
    assert_eq!(
        client(&server, "read", "v1", &["shop.orders"])["rows"],
        Value::Array(rows.clone())
    );
    let head = lh.head("main");
    for at in ["v1".to_string(), format!("main@{head}")] {
        let e = client(&server, "write_error", &at, &["shop.orders"]);
        assert_eq!(e["error"], "ForbiddenError", "{e}");
        assert!(e["message"].as_str().unwrap().contains("read-only"), "{e}");
        assert_eq!(e["create_namespace"], "ForbiddenError", "{e}");
    }
    assert_eq!(lh.head("main"), head);
    // Time travel: main before the merge has no such table.
    assert_eq!(
        client(
            &server,
            "read",
            &format!("main@{before_dev}"),
            &["shop.orders"]
        )["exists"],
        false
    );

    // Rename on a branch of its own.
    lh.run(&["branch", "create", "ren"]).ok();
    let r = client(&server, "rename", "ren", &["shop.orders", "shop.orders_v2"]);
    assert_eq!(r, json!({"source": false, "destination": true}));
    assert_eq!(
        lh.rows(
            "select id, total, status, note from shop.orders_v2 order by id",
            "ren"
        ),
        rows
    );
    assert!(tables_at(&lh, "main").contains(&"shop.orders".to_string()));

    // Drop on dev leaves main alone; a purge on main leaves the tag's files readable.
    let d = client(&server, "drop", "dev", &["shop.orders", "keep"]);
    assert_eq!(d["exists_after"], false);
    assert!(!tables_at(&lh, "dev").contains(&"shop.orders".to_string()));
    assert_eq!(
        client(&server, "read", "main", &["shop.orders"])["exists"],
        true
    );
    let d = client(&server, "drop", "main", &["shop.orders", "purge"]);
    assert_eq!(d["exists_after"], false);
    // A client commits as its token's user (here the admin token's, made for `tester`).
    assert_eq!(
        log(&lh, "main")[0],
        (
            "tester".to_string(),
            "drop shop.orders (purge requested: files kept for other refs)".to_string()
        )
    );
    assert_eq!(
        client(&server, "read", "v1", &["shop.orders"])["rows"],
        Value::Array(rows)
    );
}

#[test]
fn two_pyiceberg_writers_conflict_and_the_loser_retries() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("counts.csv", "id,v\n1,1\n2,2\n");
    lh.run(&["table", "import", "shop.counts", csv.to_str().unwrap()])
        .ok();
    let w = client(&server, "writers", "main", &["shop.counts"]);
    // The second writer's stale commit is the spec's 409, which pyiceberg raises.
    let conflict = w["conflict"]
        .as_str()
        .unwrap_or_else(|| panic!("no conflict: {w}"));
    assert!(conflict.contains("CommitFailedException"), "{conflict}");
    no_row_lost(&w, &lh);
}

/// What the `writers` scenario leaves: no error, and every row once (2 imported, one
/// row per writer, 4 threads x 5 appends x 2 rows), in the client's read and lh's.
fn no_row_lost(w: &Value, lh: &Lh) {
    assert_eq!(w["errors"], json!([]));
    assert_eq!(w["rows"], 44, "{w}");
    assert_eq!(w["distinct_ids"], 44, "{w}");
    let n = lh.rows(
        "select count(*) AS n, count(distinct id) AS d from shop.counts",
        "main",
    );
    assert_eq!(n, vec![json!({"n": 44, "d": 44})]);
}

#[test]
fn a_table_that_lets_lh_rebase_appends_takes_stale_pyiceberg_appends() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("counts.csv", "id,v\n1,1\n2,2\n");
    lh.run(&["table", "import", "shop.counts", csv.to_str().unwrap()])
        .ok();
    let w = client(&server, "writers", "main", &["shop.counts", "true"]);
    // The second writer's stale append is made again by the server on the table as
    // the first left it: no conflict reaches the client, and none of the concurrent
    // threads had to retry either.
    assert!(w["conflict"].is_null(), "{w}\n{}", server.log());
    assert_eq!(w["retries"], 0, "{w}");
    no_row_lost(&w, &lh);
    // The rebased snapshots say so, and count what they added.
    let log = lh.run(&["log", "-o", "json"]).ok().to_string();
    assert!(log.contains("(rebased)"), "{log}");
    // Every row's value is there once.
    let sum = lh.rows("select sum(v) AS s from shop.counts", "main");
    assert_eq!(
        sum[0]["s"],
        json!(
            3 + 1000
                + 2000
                + (0..4)
                    .map(|k| (0..5)
                        .map(|j| 2 * (10_000 * (k + 1) + 2 * j) + 1)
                        .sum::<i64>())
                    .sum::<i64>()
        )
    );
}

#[test]
fn stale_appends_lh_may_not_rebase_stay_conflicts() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("a.csv", "id,v\n1,10\n2,20\n");
    for t in ["shop.a", "shop.b", "shop.c"] {
        lh.run(&["table", "import", t, csv.to_str().unwrap()]).ok();
    }
    // An overwrite since the append's read: its conflict stands (an upsert's insert
    // must not land on rows it did not see).
    let w = client(&server, "stale_after_overwrite", "main", &["shop.c"]);
    assert!(
        w["conflict"]
            .as_str()
            .is_some_and(|c| c.contains("CommitFailedException")),
        "{w}"
    );
    assert_eq!(w["ids"], json!([7]), "{w}");

    // A table that opted in, and stale appends naming what is not its own.
    let http = Http::new(&server);
    let path = "/v1/main/namespaces/shop/tables/a";
    let (s, _) = http.send(
        "POST",
        path,
        Some(json!({"requirements": [], "updates": [
            {"action": "set-properties", "updates": {"lh.rebase-appends": "true"}}]})),
    );
    assert_eq!(s, 200);
    let (_, a) = http.send("GET", path, None);
    let (_, b) = http.send("GET", "/v1/main/namespaces/shop/tables/b", None);
    let location = |t: &Value| t["metadata"]["location"].as_str().unwrap().to_string();
    let ours = a["metadata"]["snapshots"][0].clone();
    let theirs = b["metadata"]["snapshots"][0].clone();
    // The table moves on by an append: what the stale appends read is behind it.
    lh.run(&[
        "table",
        "import",
        "shop.a",
        csv.to_str().unwrap(),
        "--mode",
        "append",
    ])
    .ok();
    let head = lh.head("main");
    let unchanged = |why: &str| assert_eq!(lh.head("main"), head, "main moved after {why}");
    let stale = |id: &Value, list: &str| {
        json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                          "snapshot-id": ours["snapshot-id"]}],
        "updates": [
            {"action": "add-snapshot", "snapshot": {
                "snapshot-id": id, "sequence-number": 99,
                "timestamp-ms": theirs["timestamp-ms"], "manifest-list": list,
                "summary": {"operation": "append"}, "schema-id": 0}},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": id}
        ]})
    };
    let list = theirs["manifest-list"].as_str().unwrap();
    // Another table's manifest list, as it is and through `..` from this table's folder.
    let b_folder = location(&b);
    let through = format!(
        "{}/../{}/{}",
        location(&a),
        b_folder.rsplit('/').next().unwrap(),
        list.strip_prefix(&format!("{b_folder}/")).unwrap()
    );
    // This table's own manifest list, under a new snapshot id: it added nothing.
    let own = ours["manifest-list"].as_str().unwrap();
    // Files written under this table's folder that name the other table's manifests,
    // or its data files.
    let grafts: Vec<Value> = ["manifest", "datafile"]
        .iter()
        .map(|kind| client(&server, "graft", "main", &["shop.a", "shop.b", kind]))
        .collect();
    let graft = |g: &Value| stale(&g["snapshot_id"], g["manifest_list"].as_str().unwrap());
    for (why, body) in [
        (
            "another table's manifest list",
            stale(&theirs["snapshot-id"], list),
        ),
        (
            "a manifest list through '..'",
            stale(&theirs["snapshot-id"], &through),
        ),
        (
            "a snapshot that added no manifest",
            stale(&json!(4243), own),
        ),
        ("a list naming another table's manifests", graft(&grafts[0])),
        (
            "a manifest naming another table's data files",
            graft(&grafts[1]),
        ),
    ] {
        let m = http.error("POST", path, Some(body), 409, "CommitFailedException");
        assert!(m.contains("Requirement failed"), "{why}: {m}");
        unchanged(why);
    }
    let log = server.log();
    for (line, times) in [
        ("its manifest list is not under the table's folder", 2),
        ("the snapshot added no manifest", 1),
        ("a manifest is not under the table's folder", 1),
        ("a data file is not under the table's folder", 1),
    ] {
        assert_eq!(log.matches(line).count(), times, "{line}\n{log}");
    }
    // The same grafts on the table as it is (nothing to rebase): refused too, since
    // every commit checks what a new snapshot's manifests name.
    let (_, now) = http.send("GET", path, None);
    let current = now["metadata"]["current-snapshot-id"].clone();
    let at = now["metadata"]["last-updated-ms"].as_i64().unwrap() + 1;
    let next = now["metadata"]["last-sequence-number"].as_i64().unwrap() + 1;
    for (why, g, names) in [
        (
            "a fresh list naming another table's manifests",
            &grafts[0],
            "manifest '",
        ),
        (
            "a fresh manifest naming another table's data files",
            &grafts[1],
            "which is not under the table's location",
        ),
    ] {
        let body = json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                          "snapshot-id": current}],
        "updates": [
            {"action": "add-snapshot", "snapshot": {
                "snapshot-id": g["snapshot_id"], "parent-snapshot-id": current,
                "sequence-number": next, "timestamp-ms": at,
                "manifest-list": g["manifest_list"],
                "summary": {"operation": "append"}, "schema-id": 0}},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": g["snapshot_id"]}
        ]});
        let m = http.error("POST", path, Some(body), 400, "BadRequestException");
        assert!(
            m.contains(names) && m.contains("not under the table's location"),
            "{why}: {m}"
        );
        unchanged(why);
    }
    let n = lh.rows("select count(*) AS n from shop.a", "main");
    assert_eq!(n, vec![json!({"n": 4})]);
}

/// A table placed over another table's folder would name that table's files as its
/// own (its snapshots may name what is under its folder): only an admin chooses any
/// location; a writer may choose a folder of the table's own, beside lh's.
#[test]
fn a_writer_cannot_place_a_table_over_another_tables_folder() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("b.csv", "id,v\n1,10\n2,20\n");
    lh.run(&["table", "import", "shop.b", csv.to_str().unwrap()])
        .ok();
    lh.run(&[
        "role",
        "set",
        "shop-writer",
        "--grant",
        "read,write on * in shop",
    ])
    .ok();
    let writer = Http::with_token(&server, Some(server.token_for("wally", "shop-writer")));
    let admin = Http::new(&server);
    let (_, b) = admin.send("GET", "/v1/main/namespaces/shop/tables/b", None);
    let b_folder = b["metadata"]["location"].as_str().unwrap().to_string();
    let shop_folder = b_folder.rsplit_once('/').unwrap().0.to_string();
    let warehouse = shop_folder.rsplit_once('/').unwrap().0.to_string();
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]});
    let create = |http: &Http, name: &str, location: &str| {
        http.send(
            "POST",
            "/v1/main/namespaces/shop/tables",
            Some(json!({"name": name, "schema": schema, "location": location})),
        )
    };
    let head = lh.head("main");
    for place in [
        b_folder.clone(),
        format!("{b_folder}/data"),
        shop_folder.clone(),
        warehouse.clone(),
        format!("{shop_folder}/b-other"),
        format!("{shop_folder}/x-../b"),
        format!("{shop_folder}/x-a/b"),
    ] {
        let (status, v) = create(&writer, "x", &place);
        assert_eq!(status, 403, "{place}: {v}");
        assert_eq!(v["error"]["type"], "ForbiddenException", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("placing table 'shop.x'")),
            "{v}"
        );
        assert_eq!(lh.head("main"), head, "{place}");
    }
    // A folder of its own, beside lh's: taken.
    let own = format!("{shop_folder}/x-mine");
    let (status, v) = create(&writer, "x", &own);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["metadata"]["location"], own.as_str());
    // Moved over another table's folder later: refused too, and nothing changes.
    let head = lh.head("main");
    let (status, v) = writer.send(
        "POST",
        "/v1/main/namespaces/shop/tables/x",
        Some(json!({"requirements": [], "updates": [
            {"action": "set-location", "location": b_folder}]})),
    );
    assert_eq!(status, 403, "{v}");
    assert!(v.to_string().contains("placing table 'shop.x'"), "{v}");
    assert_eq!(lh.head("main"), head);
    // An admin places a table anywhere in the warehouse.
    let (status, v) = create(&admin, "y", &format!("{warehouse}/elsewhere/y"));
    assert_eq!(status, 200, "{v}");
}

#[test]
fn duckdb_attaches_a_branch_reads_lh_tables_and_writes() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file(
        "people.csv",
        "id,name,city,age,born\n1,ann,paris,30,1996-01-02\n2,bo,oslo,41,1985-03-04\n3,cy,paris,25,2001-05-06\n",
    );
    lh.run(&["table", "import", "raw.people", csv.to_str().unwrap()])
        .ok();
    lh.run(&["branch", "create", "feat"]).ok();

    let d = client(&server, "duckdb", "feat", &["raw.people"]);
    assert_eq!(d["tables"], json!(["raw.people"]));
    assert_eq!(
        d["source_columns"],
        json!(["id", "name", "city", "age", "born"])
    );
    let ours: Vec<Value> = lh
        .rows("select id, name, city, age, strftime(born, '%Y-%m-%d') AS born from raw.people order by id", "feat")
        .into_iter()
        .map(|r| json!([r["id"], r["name"], r["city"], r["age"], r["born"]]))
        .collect();
    assert_eq!(d["source_rows"], Value::Array(ours));
    assert_eq!(
        d["by_city"],
        json!([["nowhere", 0, 0], ["oslo", 1, 41], ["paris", 2, 55]])
    );
    assert_eq!(d["numbers"], json!([1010, 999000]));

    // What DuckDB wrote is on feat only, and lh reads it.
    assert_eq!(
        lh.rows(
            "select city, people, ages from shop.by_city order by city",
            "feat"
        ),
        vec![
            json!({"city": "nowhere", "people": 0, "ages": 0}),
            json!({"city": "oslo", "people": 1, "ages": 41}),
            json!({"city": "paris", "people": 2, "ages": 55}),
        ]
    );
    // DuckDB's DELETE and UPDATE wrote position deletes; lh applies them. DuckDB's
    // snapshot summaries have no total-files-size: table show counts the files' bytes.
    assert_eq!(d["numbers_after_delete"], json!([909, 899_997]));
    let show: Value = serde_json::from_str(
        lh.run(&[
            "table",
            "show",
            "shop.numbers",
            "--ref",
            "feat",
            "-o",
            "json",
        ])
        .ok(),
    )
    .unwrap();
    assert_eq!(
        (&show["rows"], &show["files"], &show["delete_files"]),
        (&json!(909), &json!(3), &json!(3)),
        "{show}"
    );
    assert!(show["size_bytes"].as_u64().unwrap() > 1000, "{show}");
    assert_eq!(
        lh.rows(
            "select count(*) AS n, sum(twice) AS s from shop.numbers",
            "feat"
        ),
        vec![json!({"n": 909, "s": 899_997})]
    );
    assert_eq!(tables_at(&lh, "main"), vec!["raw.people".to_string()]);
    // Each write (CREATE TABLE AS, INSERT, DELETE, UPDATE) is one lh commit.
    let messages = log_messages(&lh, "feat");
    assert_eq!(
        messages[..6],
        [
            "overwrite shop.numbers",
            "delete shop.numbers",
            "append shop.numbers",
            "create shop.numbers (append)",
            "append shop.by_city",
            "create shop.by_city (append)"
        ]
    );

    // pyiceberg reads what DuckDB wrote; DuckDB refuses to write to a tag.
    let py = client(&server, "read", "feat", &["shop.by_city", "city"]);
    assert_eq!(py["rows"].as_array().unwrap().len(), 3);
    lh.run(&["tag", "create", "v1", "--from", "feat"]).ok();
    let e = client(
        &server,
        "duckdb_write_error",
        "v1",
        &["INSERT INTO lake.shop.by_city VALUES ('x', 1, 1)"],
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ForbiddenException"),
        "{e}"
    );
    assert_eq!(
        lh.rows("select count(*) AS n from shop.by_city", "v1"),
        vec![json!({"n": 3})]
    );

    // lh compacts what DuckDB wrote: its deletes applied, one file, the same rows; and
    // DuckDB and pyiceberg read the compacted table alike.
    let out = lh.run(&["table", "compact", "shop.numbers", "--ref", "feat"]);
    assert!(
        out.stderr.contains("compacted shop.numbers on 'feat': 3 data files into 1 (3 files rewritten, 3 delete files applied, 909 rows unchanged"),
        "{}",
        out.stderr
    );
    let show: Value = serde_json::from_str(
        lh.run(&[
            "table",
            "show",
            "shop.numbers",
            "--ref",
            "feat",
            "-o",
            "json",
        ])
        .ok(),
    )
    .unwrap();
    assert_eq!(
        (&show["rows"], &show["files"], &show["delete_files"]),
        (&json!(909), &json!(1), &json!(0)),
        "{show}"
    );
    assert_eq!(
        lh.rows(
            "select count(*) AS n, sum(twice) AS s from shop.numbers",
            "feat"
        ),
        vec![json!({"n": 909, "s": 899_997})]
    );
    let dd = client(
        &server,
        "duckdb_read",
        "feat",
        &["SELECT count(*), sum(twice) FROM lake.shop.numbers"],
    );
    assert_eq!(dd["rows"], json!([[909, 899_997]]));
    let py = client(&server, "read", "feat", &["shop.numbers"]);
    assert_eq!(py["rows"].as_array().unwrap().len(), 909);
    // The tag still reads the version before.
    assert_eq!(
        lh.rows("select count(*) AS n from shop.numbers", "v1"),
        vec![json!({"n": 909})]
    );
    let again = lh.run(&["table", "compact", "shop.numbers", "--ref", "feat"]);
    assert!(
        again.stderr.contains("nothing to compact"),
        "{}",
        again.stderr
    );
}

// ------------------------------------------------------------------ raw protocol

pub(crate) struct Http {
    agent: ureq::Agent,
    base: String,
    /// `Authorization: Bearer` of every request (none: sent without).
    token: Option<String>,
}

impl Http {
    /// With the server's admin token.
    pub(crate) fn new(server: &Server) -> Http {
        Http::with_token(server, Some(server.token()))
    }

    pub(crate) fn with_token(server: &Server, token: Option<String>) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Http {
            agent,
            base: rest_uri(server),
            token,
        }
    }

    fn auth(&self) -> String {
        self.token
            .as_ref()
            .map(|t| format!("Bearer {t}"))
            .unwrap_or_default()
    }

    /// A GET with the header that asks for vended credentials.
    fn get_vended(&self, path: &str) -> Value {
        let url = format!("{}{path}", self.base);
        let res = self
            .agent
            .get(&url)
            .header("Authorization", self.auth())
            .header("X-Iceberg-Access-Delegation", "vended-credentials")
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        serde_json::from_str(&res.into_body().read_to_string().unwrap()).unwrap()
    }

    pub(crate) fn send(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let auth = self.auth();
        let res = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &auth).call(),
            ("HEAD", _) => self.agent.head(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => self
                .agent
                .delete(&url)
                .header("Authorization", &auth)
                .call(),
            ("POST", Some(b)) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .send_json(b),
            ("POST", None) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .send_empty(),
            _ => unreachable!(),
        }
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = res.status().as_u16();
        let text = res.into_body().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Asserts an error in the spec's model: status, type, and the code in the body.
    #[track_caller]
    pub(crate) fn error(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        status: u16,
        kind: &str,
    ) -> String {
        let (s, v) = self.send(method, path, body);
        assert_eq!(s, status, "{method} {path}: {v}");
        if method != "HEAD" {
            assert_eq!(v["error"]["type"], kind, "{method} {path}: {v}");
            assert_eq!(v["error"]["code"], status, "{v}");
        }
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

#[test]
fn rest_protocol_bad_input_changes_nothing() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("a.csv", "id,v\n1,10\n2,20\n");
    lh.run(&["table", "import", "shop.a", csv.to_str().unwrap()])
        .ok();
    lh.run(&["table", "import", "shop.b", csv.to_str().unwrap()])
        .ok();
    lh.run(&["tag", "create", "v1"]).ok();
    let http = Http::new(&server);

    // The config names the ref as the prefix, URL-encoded, and the endpoints.
    let (s, c) = http.send("GET", "/v1/config?warehouse=main", None);
    assert_eq!(s, 200);
    assert_eq!(c["defaults"]["prefix"], "main");
    assert!(
        c["endpoints"]
            .as_array()
            .unwrap()
            .contains(&json!("POST /v1/{prefix}/transactions/commit"))
    );
    let head = lh.head("main");
    let (_, c) = http.send("GET", &format!("/v1/config?warehouse=main@{head}"), None);
    assert_eq!(c["defaults"]["prefix"], format!("main%40{head}"));

    let head = lh.head("main");
    let (_, a) = http.send("GET", "/v1/main/namespaces/shop/tables/a", None);
    let uuid = a["metadata"]["table-uuid"].as_str().unwrap().to_string();
    let unchanged = |why: &str| assert_eq!(lh.head("main"), head, "main moved after {why}");

    // Unknown refs, namespaces and tables.
    http.error(
        "GET",
        "/v1/config?warehouse=nope",
        None,
        404,
        "NoSuchReferenceException",
    );
    http.error(
        "GET",
        "/v1/nope/namespaces",
        None,
        404,
        "NoSuchReferenceException",
    );
    http.error(
        "GET",
        "/v1/main/namespaces/nons/tables",
        None,
        404,
        "NoSuchNamespaceException",
    );
    http.error(
        "GET",
        "/v1/main/namespaces/nons",
        None,
        404,
        "NoSuchNamespaceException",
    );
    http.error("HEAD", "/v1/main/namespaces/nons", None, 404, "");
    http.error(
        "GET",
        "/v1/main/namespaces/shop/tables/zz",
        None,
        404,
        "NoSuchTableException",
    );
    http.error("HEAD", "/v1/main/namespaces/shop/tables/zz", None, 404, "");
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "x", "required": false, "type": "long"}]});
    http.error(
        "POST",
        "/v1/main/namespaces/nons/tables",
        Some(json!({"name": "t", "schema": schema})),
        404,
        "NoSuchNamespaceException",
    );
    http.error(
        "POST",
        "/v1/main/namespaces/shop/tables",
        Some(json!({"name": "a", "schema": schema})),
        409,
        "AlreadyExistsException",
    );
    http.error(
        "POST",
        "/v1/main/namespaces/shop/tables",
        Some(json!({"name": "bad\u{1}name", "schema": schema})),
        400,
        "BadRequestException",
    );
    unchanged("unknown names");

    // Writes to a tag or a fixed commit.
    http.error(
        "POST",
        "/v1/v1/namespaces",
        Some(json!({"namespace": ["x"]})),
        403,
        "ForbiddenException",
    );
    http.error(
        "POST",
        "/v1/v1/namespaces/shop/tables",
        Some(json!({"name": "t", "schema": schema})),
        403,
        "ForbiddenException",
    );
    http.error(
        "DELETE",
        "/v1/v1/namespaces/shop/tables/a",
        None,
        403,
        "ForbiddenException",
    );
    http.error(
        "POST",
        &format!("/v1/main%40{head}/namespaces/shop/tables/a"),
        Some(json!({"updates": []})),
        403,
        "ForbiddenException",
    );
    unchanged("writes to read-only refs");

    // Malformed requests: bad JSON, an unknown requirement, an update without its fields.
    let path = "/v1/main/namespaces/shop/tables/a";
    let (s, v) = http.send("POST", path, None);
    assert_eq!(
        (s, &v["error"]["type"]),
        (400, &json!("BadRequestException")),
        "{v}"
    );
    http.error(
        "POST",
        path,
        Some(json!({"requirements": [{"type": "assert-bogus"}], "updates": []})),
        400,
        "BadRequestException",
    );
    http.error(
        "POST",
        path,
        Some(json!({"updates": [{"action": "add-snapshot"}]})),
        400,
        "BadRequestException",
    );
    http.error(
        "POST",
        path,
        Some(json!({"updates": [{"action": "set-current-schema", "schema-id": 99}]})),
        400,
        "BadRequestException",
    );
    let outside = json!({"action": "add-snapshot", "snapshot": {
        "snapshot-id": 5, "timestamp-ms": 1, "sequence-number": 9, "schema-id": 0,
        "manifest-list": "file:///etc/passwd", "summary": {"operation": "append"}}});
    let m = http.error(
        "POST",
        path,
        Some(json!({"updates": [outside]})),
        400,
        "BadRequestException",
    );
    assert!(m.contains("outside the warehouse"), "{m}");
    unchanged("malformed requests");

    // Clients get gc.enabled=false and may neither expire snapshots (they would then
    // delete files older commits read) nor turn the guard off.
    let (_, loaded) = http.send("GET", path, None);
    assert_eq!(
        loaded["metadata"]["properties"]["gc.enabled"], "false",
        "{loaded}"
    );
    let m = http.error(
        "POST",
        path,
        Some(json!({"updates": [{"action": "remove-snapshots", "snapshot-ids": [1]}]})),
        400,
        "BadRequestException",
    );
    assert!(m.contains("lh keeps every snapshot"), "{m}");
    let m = http.error(
        "POST",
        path,
        Some(json!({"updates": [{"action": "set-properties", "updates": {"gc.enabled": "true"}}]})),
        400,
        "BadRequestException",
    );
    assert!(m.contains("gc.enabled stays false"), "{m}");
    unchanged("file deletion by clients");

    // A requirement that fails is the spec's 409.
    let m = http.error(
        "POST",
        path,
        Some(json!({"requirements": [{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}],
                    "updates": [{"action": "set-properties", "updates": {"k": "v"}}]})),
        409,
        "CommitFailedException",
    );
    assert!(m.contains("Requirement failed"), "{m}");
    http.error(
        "POST",
        path,
        Some(json!({"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1}], "updates": []})),
        409,
        "CommitFailedException",
    );
    unchanged("failed requirements");

    // A stale append whose snapshot names another table's manifest list: refused,
    // never grafted.
    let (_, other) = http.send("GET", "/v1/main/namespaces/shop/tables/b", None);
    let theirs = other["metadata"]["snapshots"][0].clone();
    assert!(theirs["manifest-list"].is_string(), "{other}");
    let m = http.error(
        "POST",
        path,
        Some(json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1}],
        "updates": [
            {"action": "add-snapshot", "snapshot": {
                "snapshot-id": theirs["snapshot-id"], "sequence-number": 99,
                "timestamp-ms": theirs["timestamp-ms"], "manifest-list": theirs["manifest-list"],
                "summary": {"operation": "append"}, "schema-id": 0}},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
             "snapshot-id": theirs["snapshot-id"]}
        ]})),
        409,
        "CommitFailedException",
    );
    assert!(m.contains("Requirement failed"), "{m}");
    unchanged("a stale append of another table's files");

    // A multi-table transaction: one failing table fails all of it, nothing changes ...
    let set = |table: &str, req: Value| {
        json!({"identifier": {"namespace": ["shop"], "name": table},
               "requirements": [req],
               "updates": [{"action": "set-properties", "updates": {"owner": "tx"}}]})
    };
    let good = json!({"type": "assert-table-uuid", "uuid": uuid});
    let bad = json!({"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"});
    http.error(
        "POST",
        "/v1/main/transactions/commit",
        Some(json!({"table-changes": [set("a", good.clone()), set("b", bad)]})),
        409,
        "CommitFailedException",
    );
    unchanged("a failed transaction");
    let (_, a) = http.send("GET", path, None);
    assert!(a["metadata"]["properties"].get("owner").is_none(), "{a}");
    // ... and a good one is one lh commit for both tables.
    let (_, b) = http.send("GET", "/v1/main/namespaces/shop/tables/b", None);
    let b_uuid = json!({"type": "assert-table-uuid", "uuid": b["metadata"]["table-uuid"]});
    let (s, v) = http.send(
        "POST",
        "/v1/main/transactions/commit",
        Some(json!({"table-changes": [set("a", good), set("b", b_uuid)]})),
    );
    assert_eq!(s, 204, "{v}");
    let after = log_messages(&lh, "main");
    assert_eq!(after[0], "properties shop.a; properties shop.b");
    assert_eq!(
        after.len(),
        log_messages(&lh, &format!("@{head}")).len() + 1
    );
    for t in ["a", "b"] {
        let (_, m) = http.send("GET", &format!("/v1/main/namespaces/shop/tables/{t}"), None);
        assert_eq!(m["metadata"]["properties"]["owner"], "tx", "{m}");
    }

    match &server.warehouse {
        // A loaded table of a local warehouse: `file://` locations, and an empty config
        // (any entry makes DuckDB's iceberg extension expect vended S3 credentials).
        lh_e2e::TestWarehouse::Local => {
            assert_eq!(a["config"], json!({}), "{a}");
            assert!(
                a["metadata-location"]
                    .as_str()
                    .is_some_and(|l| l.starts_with("file:///")),
                "{a}"
            );
        }
        // Of an S3 warehouse: `s3://` locations, where the bucket is, and no credential
        // unless the client asks for vended ones.
        lh_e2e::TestWarehouse::S3(s3) => {
            assert_eq!(
                a["config"],
                json!({"s3.endpoint": s3.endpoint, "s3.region": "us-east-1",
                       "client.region": "us-east-1", "s3.path-style-access": "true"}),
                "{a}"
            );
            assert!(
                a["metadata-location"]
                    .as_str()
                    .is_some_and(|l| l.starts_with(&format!("s3://{}/", s3.bucket))),
                "{a}"
            );
            // Asked for, the server's key comes along (no STS on the test store), in
            // `config` and in the spec's `storage-credentials`.
            let v = http.get_vended("/v1/main/namespaces/shop/tables/a");
            assert_eq!(v["config"]["s3.access-key-id"], s3.key.as_str(), "{v}");
            assert_eq!(
                v["config"]["s3.secret-access-key"],
                s3.secret.as_str(),
                "{v}"
            );
            let creds = &v["storage-credentials"][0];
            assert!(
                v["metadata-location"]
                    .as_str()
                    .unwrap()
                    .starts_with(creds["prefix"].as_str().unwrap()),
                "{v}"
            );
            assert_eq!(creds["config"]["s3.secret-access-key"], s3.secret.as_str());
            // A server that does not vend gives none, asked or not.
            let quiet = Server::start_with(&["--no-vend-credentials"]);
            let q = quiet.lh();
            let csv = q.file("a.csv", "id\n1\n");
            q.run(&["table", "import", "shop.a", csv.to_str().unwrap()])
                .ok();
            let v = Http::new(&quiet).get_vended("/v1/main/namespaces/shop/tables/a");
            assert!(v["config"].get("s3.secret-access-key").is_none(), "{v}");
            assert!(v.get("storage-credentials").is_none(), "{v}");
            let info = q.run(&["info"]).ok().to_string();
            assert!(
                info.contains("not vended") && !info.contains(&s3.secret),
                "{info}"
            );
        }
    }

    // Metrics reports (Java clients send one after each scan) are taken for a table that
    // exists, and change nothing.
    let head = lh.head("main");
    let scan = json!({"report-type": "scan-report", "table-name": "shop.a", "snapshot-id": 1,
                      "filter": true, "schema-id": 0, "projected-field-ids": [1],
                      "projected-field-names": ["id"], "metrics": {}});
    let (s, v) = http.send(
        "POST",
        "/v1/main/namespaces/shop/tables/a/metrics",
        Some(scan.clone()),
    );
    assert_eq!(s, 204, "{v}");
    http.error(
        "POST",
        "/v1/main/namespaces/shop/tables/nope/metrics",
        Some(scan),
        404,
        "NoSuchTableException",
    );
    http.error(
        "POST",
        "/v1/main/namespaces/shop/tables/a/metrics",
        Some(json!({"report-type": "mood-report"})),
        400,
        "BadRequestException",
    );
    assert_eq!(lh.head("main"), head);

    // Listings page when asked to (`pageToken`, empty for the first page), and are whole
    // otherwise.
    let (s, v) = http.send(
        "POST",
        "/v1/main/namespaces",
        Some(json!({"namespace": ["paging"]})),
    );
    assert_eq!(s, 200, "{v}");
    for path in ["/v1/main/namespaces", "/v1/main/namespaces/shop/tables"] {
        let key = if path.ends_with("tables") {
            "identifiers"
        } else {
            "namespaces"
        };
        let (s, whole) = http.send("GET", path, None);
        assert_eq!(s, 200, "{whole}");
        assert_eq!(whole["next-page-token"], Value::Null, "{whole}");
        let mut paged = Vec::new();
        let mut token = String::new();
        loop {
            let (s, v) = http.send("GET", &format!("{path}?pageToken={token}&pageSize=1"), None);
            assert_eq!(s, 200, "{v}");
            let got = v[key].as_array().unwrap();
            assert!(got.len() <= 1, "{v}");
            paged.extend(got.iter().cloned());
            match v["next-page-token"].as_str() {
                Some(t) => token = t.to_string(),
                None => break,
            }
        }
        assert_eq!(Value::Array(paged), whole[key], "{path}");
        assert!(whole[key].as_array().unwrap().len() >= 2, "{whole}");
        http.error(
            "GET",
            &format!("{path}?pageToken=&pageSize=0"),
            None,
            400,
            "BadRequestException",
        );
    }
    let (s, v) = http.send("DELETE", "/v1/main/namespaces/paging", None);
    assert_eq!(s, 204, "{v}");

    // A staged create stores nothing until it is committed.
    let head = lh.head("main");
    let (s, v) = http.send(
        "POST",
        "/v1/main/namespaces/shop/tables",
        Some(json!({"name": "staged", "schema": schema, "stage-create": true})),
    );
    assert_eq!(s, 200, "{v}");
    assert!(v.get("metadata-location").is_none(), "{v}");
    http.error(
        "HEAD",
        "/v1/main/namespaces/shop/tables/staged",
        None,
        404,
        "",
    );
    assert_eq!(lh.head("main"), head);

    // Register a metadata file: a second name for shop.a's files; outside the warehouse
    // is refused.
    let location = a["metadata-location"].as_str().unwrap();
    let (s, v) = http.send(
        "POST",
        "/v1/main/namespaces/shop/register",
        Some(json!({"name": "a_again", "metadata-location": location})),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        lh.rows("select sum(v) AS s from shop.a_again", "main"),
        vec![json!({"s": 30})]
    );
    http.error(
        "POST",
        "/v1/main/namespaces/shop/register",
        Some(json!({"name": "passwd", "metadata-location": "file:///etc/passwd"})),
        400,
        "BadRequestException",
    );

    // Namespaces: properties, and only an empty one drops.
    let (s, v) = http.send(
        "POST",
        "/v1/main/namespaces",
        Some(json!({"namespace": ["empty"], "properties": {"a": "1"}})),
    );
    assert_eq!(s, 200, "{v}");
    http.error(
        "POST",
        "/v1/main/namespaces",
        Some(json!({"namespace": ["empty"]})),
        409,
        "AlreadyExistsException",
    );
    let (s, v) = http.send(
        "POST",
        "/v1/main/namespaces/empty/properties",
        Some(json!({"removals": ["a", "zz"], "updates": {"b": "2"}})),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({"updated": ["b"], "removed": ["a"], "missing": ["zz"]})
    );
    let (_, v) = http.send("GET", "/v1/main/namespaces/empty", None);
    assert_eq!(v, json!({"namespace": ["empty"], "properties": {"b": "2"}}));
    http.error(
        "DELETE",
        "/v1/main/namespaces/shop",
        None,
        409,
        "NamespaceNotEmptyException",
    );
    let (s, _) = http.send("DELETE", "/v1/main/namespaces/empty", None);
    assert_eq!(s, 204);
    http.error(
        "GET",
        "/v1/main/namespaces/empty",
        None,
        404,
        "NoSuchNamespaceException",
    );
}

/// Spark 3.5 with Apache Iceberg's Spark runtime, configured as the README says, on a
/// branch and on a tag: it reads lh's tables, and its writes (appends, a new table, schema
/// changes, DELETE, UPDATE and MERGE INTO rewriting files) are lh commits on the branch
/// that lh and pyiceberg read alike; the tag refuses writes. The Spark side is
/// `rest_spark.py`.
#[test]
fn spark_writes_a_branch_that_a_merge_publishes() {
    // Always on a local warehouse: Spark's S3 classes (iceberg-aws-bundle or
    // hadoop-aws) come from Maven Central only, which this project cannot reach (see
    // the README); pyiceberg and DuckDB are the S3 clients tested.
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("warehouse");
    let server = Server::start_with(&["--warehouse", wh.to_str().unwrap()]);
    let lh = server.lh();
    let csv = lh.file("people.csv", "id,name\n1,ann\n2,bo\n");
    lh.run(&["table", "import", "shop.people", csv.to_str().unwrap()])
        .ok();
    lh.run(&["branch", "create", "spark"]).ok();
    lh.run(&["tag", "create", "before-spark"]).ok();
    let main_before = lh.head("main");

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/rest_spark.py");
    let out = std::process::Command::new(python())
        .args([script, &rest_uri(&server), "spark", "before-spark"])
        .env("LH_TEST_TOKEN", server.token_for("spark-job", "writer"))
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "Spark failed (it needs Java 17 and pyspark with the Iceberg runtime from \
         scripts/python-requirements.txt):\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    let spark: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "Spark printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });

    assert_eq!(spark["namespaces"], json!(["shop"]));
    assert_eq!(
        spark["imported"],
        json!([{"id": 1, "name": "ann"}, {"id": 2, "name": "bo"}])
    );
    let scores = json!([
        {"id": 1, "points": 1.5, "player": "a", "bonus": 1},
        {"id": 3, "points": 30.0, "player": "c", "bonus": null},
        {"id": 4, "points": 4.5, "player": "d", "bonus": 10},
        {"id": 5, "points": 50.0, "player": "e", "bonus": 0},
    ]);
    assert_eq!(spark["scores"], scores);
    assert_eq!(
        spark["people"],
        json!([{"id": 1, "name": "ann"}, {"id": 2, "name": "bo"}, {"id": 3, "name": "carol"}])
    );
    assert_eq!(
        spark["scores_snapshots"],
        json!(["append", "append", "overwrite", "overwrite", "overwrite"])
    );
    // Spark's file-deleting maintenance is refused (the tables it gets have
    // gc.enabled=false), so it deletes nothing: the first snapshot still reads, and the
    // table a PURGE was asked of is still there (its rows are checked below).
    for what in ["expire", "purge"] {
        assert_eq!(
            spark[what], "org.apache.iceberg.exceptions.ValidationException",
            "{spark}"
        );
        assert!(
            spark[format!("{what}_message")]
                .as_str()
                .unwrap()
                .contains("GC is disabled"),
            "{spark}"
        );
    }
    assert_eq!(
        spark["scores_first_snapshot"],
        json!([{"id": 1}, {"id": 2}, {"id": 3}])
    );
    assert_eq!(spark["frozen_people"], spark["imported"]);
    assert_eq!(
        spark["frozen_write"], "org.apache.iceberg.exceptions.ForbiddenException",
        "{spark}"
    );
    assert!(
        spark["frozen_write_message"]
            .as_str()
            .unwrap()
            .contains("read-only"),
        "{spark}"
    );

    // lh reads what Spark wrote (renamed column, rewritten files), on the branch only.
    let lh_scores = lh.rows(
        "select id, points, player, bonus from shop.scores order by id",
        "spark",
    );
    assert_eq!(Value::Array(lh_scores), scores);
    assert_eq!(
        lh.rows("select id, name from shop.people order by id", "spark"),
        spark["people"].as_array().unwrap().clone()
    );
    assert_eq!(lh.head("main"), main_before);
    assert!(!tables_at(&lh, "main").contains(&"shop.scores".to_string()));
    // Every Spark commit is an lh commit by the user it named.
    let commits = log(&lh, "spark");
    for m in [
        "create shop.scores",
        "append shop.scores",
        "schema change shop.scores",
        "overwrite shop.scores",
        "append shop.people",
    ] {
        assert!(
            commits.iter().any(|(a, x)| x == m && a == "spark-job"),
            "no '{m}' by spark-job in {commits:?}"
        );
    }

    // Nested fields read by field id: renamed ones under their new names, added ones
    // NULL in older files; timestamps with their zone.
    let profiles = json!([
        {"id": 1, "info": {"a": 1, "bee": "x", "c": null}, "tags": [{"tag": "p"}, {"tag": "q"}],
         "attrs": {"m": {"zz": 7}}},
        {"id": 2, "info": null, "tags": null, "attrs": null},
        {"id": 3, "info": {"a": 2, "bee": "y", "c": 0.5}, "tags": [], "attrs": {}},
    ]);
    assert_eq!(spark["profiles"], profiles);
    assert_eq!(
        Value::Array(lh.rows(
            "select id, info, tags, attrs from shop.profiles order by id",
            "spark"
        )),
        profiles
    );
    assert_eq!(
        lh.rows(
            "select id, seen from shop.profiles where info.bee = 'x' and tags[2].tag = 'q'",
            "spark"
        ),
        vec![json!({"id": 1, "seen": "2026-01-02T03:04:05Z"})]
    );

    // A table partitioned by day and bucket reads the same in lh; lh's writes refuse
    // it (its files would carry no partition values), and change nothing.
    assert!(spark["visits_files"].as_i64().unwrap() > 3, "{spark}");
    let visits: Vec<Value> = spark["visits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| json!({"day": r["day"].as_str().unwrap(), "n": r["n"], "ids": r["ids"]}))
        .collect();
    assert_eq!(visits.len(), 3, "{spark}");
    assert_eq!(
        lh.rows(
            "select strftime(\"at\"::timestamp::date, '%Y-%m-%d') AS day, count(*) AS n, sum(id)::bigint AS ids \
             from shop.visits group by 1 order by 1",
            "spark"
        ),
        visits
    );
    // lh writes Spark's partitioned table (day(at), bucket(4, id)), on a branch of its
    // own: each file with the partition pyiceberg's transforms give its rows.
    lh.run(&["branch", "create", "lh-on-spark", "--from", "spark"])
        .ok();
    let more = lh.file(
        "visits.csv",
        "id,at,page\n1000,2026-01-05 00:00:00,p0\n1001,2026-01-01 23:59:59,p1\n1002,2026-01-09 12:00:00,p2\n",
    );
    let out = lh.run(&[
        "table",
        "import",
        "shop.visits",
        more.to_str().unwrap(),
        "--mode",
        "append",
        "--ref",
        "lh-on-spark",
    ]);
    assert!(out.stderr.contains("in 3 partitions"), "{}", out.stderr);
    let total: usize = visits
        .iter()
        .map(|v| v["n"].as_u64().unwrap() as usize)
        .sum();
    let py = client(
        &server,
        "partitions",
        "lh-on-spark",
        &[
            "shop.visits",
            "at",
            "2026-01-05T00:00:00+00:00",
            "2026-01-06T00:00:00+00:00",
        ],
    );
    assert_eq!(py["wrong"], json!([]), "{py}");
    assert_eq!(py["rows"], total + 3, "{py}");
    assert_eq!(py["duckdb_rows"], total + 3, "{py}");
    assert_eq!(py["filtered"], py["duckdb_filtered"], "{py}");

    // Merge-on-read: lh applies Spark's position deletes, in queries and in `table show`.
    let shown = |lh: &Lh| -> Value {
        let out = lh.run(&[
            "table",
            "show",
            "shop.events",
            "--ref",
            "spark",
            "-o",
            "json",
        ]);
        serde_json::from_str(out.ok()).unwrap()
    };
    assert_eq!(
        spark["events_files"],
        json!([{"content": 0, "n": 2}, {"content": 1, "n": 1}]),
        "the inserted data file, one of the updated rows, and one delete file \
         (Iceberg folds the DELETE's positions into the UPDATE's delete file)"
    );
    let by_kind = json!([
        {"kind": "buy", "n": 2, "ids": 18},
        {"kind": "click", "n": 300, "ids": 150_003},
        {"kind": "view", "n": 598, "ids": 299_979},
    ]);
    assert_eq!(spark["events_by_kind"], by_kind);
    assert_eq!(
        Value::Array(lh.rows(
            "select kind, count(*) AS n, sum(id)::bigint AS ids from shop.events group by kind order by kind",
            "spark",
        )),
        by_kind
    );
    assert_eq!(
        lh.rows(
            "select count(*) AS n from shop.events where id % 10 = 0 or id in (7, 11) and kind <> 'buy'",
            "spark"
        ),
        vec![json!({"n": 0})]
    );
    let show = shown(&lh);
    assert_eq!(show["rows"], 900, "{show}");
    assert_eq!(show["delete_files"], 1, "{show}");
    let text = lh
        .run(&["table", "show", "shop.events", "--ref", "spark"])
        .ok()
        .to_string();
    assert!(
        text.contains("files     2 (and 1 delete files: merge-on-read)"),
        "{text}"
    );
    // lh appends to the table and its deletes still hold.
    let more = lh.file("events.csv", "id,kind\n2000,view\n2001,click\n");
    lh.run(&[
        "table",
        "import",
        "shop.events",
        more.to_str().unwrap(),
        "--mode",
        "append",
        "--ref",
        "spark",
    ])
    .ok();
    assert_eq!(
        lh.rows(
            "select count(*) AS n, count(*) filter (where id % 10 = 0) AS deleted from shop.events",
            "spark"
        ),
        vec![json!({"n": 902, "deleted": 1})]
    );
    let show = shown(&lh);
    assert_eq!(show["rows"], 902, "{show}");

    // Merged, main has Spark's tables, and pyiceberg reads them as Spark does.
    lh.run(&["merge", "spark", "--into", "main"]).ok();
    let py = client(&server, "read", "main", &["shop.scores"]);
    assert_eq!(py["columns"], json!(["id", "points", "player", "bonus"]));
    assert_eq!(py["rows"], scores);
    let py = client(&server, "read", "main", &["shop.events"]);
    let rows = py["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 902);
    assert_eq!(
        Value::Array(lh.rows("select id, kind from shop.events order by id", "main")),
        py["rows"]
    );
}

/// The REST catalog on a PostgreSQL catalog: namespaces live in the same database.
#[test]
fn pyiceberg_on_a_postgres_catalog() {
    let admin = std::env::var("LH_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!("LH_TEST_POSTGRES_URL is not set: `make test` starts PostgreSQL and sets it")
    });
    let name = format!("lh_e2e_rest_{}", std::process::id());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {admin}: {e}"));
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .unwrap();
    });
    let url = match admin.rfind('/') {
        Some(i) if !admin[..i].ends_with('/') => format!("{}/{name}", &admin[..i]),
        _ => format!("{admin}/{name}"),
    };
    let server = Server::start_with(&["--catalog", &url]);
    let lh = server.lh();
    lh.run(&["branch", "create", "dev"]).ok();
    let py = client(&server, "pyiceberg_basics", "dev", &[]);
    assert_eq!(py["rows"].as_array().unwrap().len(), 5);
    lh.run(&["merge", "dev", "--into", "main"]).ok();
    assert_eq!(
        client(&server, "read", "main", &["shop.orders"])["rows"],
        py["rows"]
    );
    drop(server);
    rt.block_on(async {
        use sqlx::Connection;
        if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut conn)
                .await;
        }
    });
}

/// Where a server on Garage keeps its tables: the S3 phase's production store.
struct Garage {
    endpoint: String,
    bucket: String,
    key: String,
    secret: String,
}

/// A server whose warehouse is a new prefix (`what` and the time) of the Garage bucket.
/// For tests of clients that write long keys themselves: the S3 phase's other server,
/// s3s-fs, names a file by an object's whole key in base64, so a multipart upload of a
/// key past about 130 bytes fails there ("File name too long"), where S3 allows 1024.
fn on_garage(what: &str) -> (Server, Garage) {
    let get = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} is not set: the S3 phase runs this test on Garage (`scripts/services.sh garage`)")
        })
    };
    let garage = Garage {
        endpoint: get("LH_TEST_GARAGE_ENDPOINT"),
        bucket: get("LH_TEST_GARAGE_BUCKET"),
        key: get("LH_TEST_GARAGE_KEY"),
        secret: get("LH_TEST_GARAGE_SECRET"),
    };
    let prefix = format!(
        "{what}{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros()
    );
    let env = [
        ("AWS_ACCESS_KEY_ID", garage.key.as_str()),
        ("AWS_SECRET_ACCESS_KEY", garage.secret.as_str()),
        ("AWS_ENDPOINT_URL", garage.endpoint.as_str()),
        ("AWS_REGION", "garage"),
    ];
    let server = Server::start_with_env(
        &[
            "--warehouse",
            &format!("s3://{}/{prefix}", garage.bucket),
            "--s3-path-style",
        ],
        &env,
    );
    (server, garage)
}

/// pyiceberg's own integration suite (apache/iceberg-python's `tests/integration`, from
/// pyiceberg 0.12.0's source distribution), nothing of it changed but where it connects,
/// against lh and against pyiceberg's own SqlCatalog as the reference, in one run
/// (`tests/pyiceberg/run.py`): every test that passes on the reference passes on lh,
/// but those `tests/pyiceberg/known.txt` names with lh's cause, and none of those
/// passes unnoticed. On an S3 warehouse (Garage, a production object store) in the S3
/// phase, on a folder in the local one.
#[test]
fn pyicebergs_own_integration_suite_passes_where_its_sql_catalog_does() {
    let python = std::env::var("LH_TEST_SUITE_PYTHON").unwrap_or_else(|_| {
        panic!(
            "LH_TEST_SUITE_PYTHON is not set: this test needs the virtualenv that \
             `scripts/services.sh pyiceberg-suite` makes (make test does)"
        )
    });
    let work = tempfile::tempdir().unwrap();
    let warehouse = lh_e2e::TestWarehouse::from_env();
    let mut args: Vec<String> = Vec::new();
    let server = if warehouse.is_s3() {
        let (server, garage) = on_garage("suite");
        for (flag, value) in [
            ("--s3-endpoint", &garage.endpoint),
            ("--s3-key", &garage.key),
            ("--s3-secret", &garage.secret),
            ("--bucket", &garage.bucket),
        ] {
            args.extend([flag.to_string(), value.to_string()]);
        }
        args.extend(["--s3-region".to_string(), "garage".to_string()]);
        server
    } else {
        let wh = work.path().join("warehouse");
        Server::start_with(&["--warehouse", wh.to_str().unwrap()])
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/pyiceberg/run.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .args(["--rest-uri", &rest_uri(&server), "--token", &server.token()])
        .arg("--work")
        .arg(work.path().join("suite"))
        .args(&args)
        .output()
        .expect("run the suite");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lh_log =
        std::fs::read_to_string(work.path().join("suite").join("lh.log")).unwrap_or_default();
    let tail: String = lh_log
        .lines()
        .rev()
        .take(60)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        out.status.success(),
        "{stdout}\n{}\nthe lh run's last lines:\n{tail}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(
        &std::fs::read(work.path().join("suite").join("summary.json")).unwrap(),
    )
    .unwrap();
    // The suite ran: hundreds of tests pass on both sides.
    assert!(
        summary["of_those_passed_on_lh"].as_u64().unwrap() > 300,
        "{summary}"
    );
}

/// Two bugs pyiceberg's own suite found (issue 36): a create-table transaction that
/// added a schema twice (each `set-current-schema -1`) kept the first one current, and
/// refused a spec on the second's column; and a table's snapshots came back in another
/// order on each load (the iceberg crate keeps them in a map). The transaction ends on
/// its last schema and spec, and the snapshots list in the order they were made.
#[test]
fn a_create_transaction_keeps_its_last_schema_and_snapshots_keep_their_order() {
    let server = Server::start();
    let py = client(&server, "staged_create_evolves", "main", &["shop.staged"]);
    assert_eq!(py["columns"], json!(["id", "name", "region"]), "{py}");
    assert_eq!(py["spec"], json!(["region"]), "{py}");
    for loaded in py["loaded"].as_array().unwrap() {
        assert_eq!(loaded, &py["appended"], "{py}");
    }
    let lh = server.lh();
    assert_eq!(
        lh.rows("select count(*) AS n from shop.staged", "main")[0]["n"],
        12
    );
}

/// Names as Iceberg allows them (issue 36: lh took only lowercase identifiers, and
/// joined levels with dots, so `("new.db",)` and `("ns_dot", "ta.ble")` were made and
/// then missing from their listings; 35 of pyiceberg's own tests failed on it). Any
/// level is taken, written double-quoted where it is not a lowercase identifier
/// (`"my-db"."Sales 2026"`), in the REST catalog, `lh query`, imports and grants; its
/// folder is written so that no two names share one. A spec change that lost a race is
/// refused in Java's words, which pyiceberg's tests match.
#[test]
fn names_as_iceberg_allows_them() {
    // Upstream's names make keys longer than s3s-fs holds (see `on_garage`).
    let on_s3 = lh_e2e::TestWarehouse::from_env().is_s3();
    let server = match on_s3 {
        true => on_garage("names").0,
        false => Server::start(),
    };
    let py = client(&server, "names_as_iceberg_allows", "main", &[]);
    assert_eq!(
        py["namespaces"],
        json!([["TEST NS"], ["my-db"], ["new.db"], ["ns_dot"]]),
        "{py}"
    );
    assert_eq!(
        py["tables"]["my-db"],
        json!([["my-db", "Sales 2026"], ["my-db", "specs"]])
    );
    assert_eq!(py["tables"]["new.db"], json!([["new.db", "ta.ble"]]));
    assert_eq!(py["tables"]["ns_dot"], json!([["ns_dot", "ta.ble"]]));
    for (_, n) in py["rows"].as_object().unwrap() {
        assert_eq!(n, 3, "{py}");
    }
    let conflict = py["conflict"].as_str().unwrap_or_default();
    assert!(
        conflict.contains("Requirement failed: default partition spec changed: expected id 1 != 2")
            || conflict.contains("default partition spec changed"),
        "{py}"
    );
    let lh = server.lh();
    // lh's own names are the same, quoted as SQL quotes them.
    assert_eq!(
        lh.rows(r#"select count(*) AS n from "my-db"."Sales 2026""#, "main")[0]["n"],
        3
    );
    assert_eq!(
        lh.rows(r#"select count(*) AS n from "TEST NS".t"#, "main")[0]["n"],
        3
    );
    assert_eq!(
        lh.rows(r#"select count(*) AS n from ns_dot."ta.ble""#, "main")[0]["n"],
        3
    );
    // A dotted schema is a nested namespace, or else one level.
    assert_eq!(
        lh.rows(r#"select count(*) AS n from "new.db"."ta.ble""#, "main")[0]["n"],
        3
    );
    // Unquoted names fold to lowercase, as in SQL.
    assert_eq!(
        lh.rows(r#"select count(*) AS n from NS_DOT."ta.ble""#, "main")[0]["n"],
        3
    );
    let tables = tables_at(&lh, "main");
    for t in [
        r#""my-db"."Sales 2026""#,
        r#""new.db"."ta.ble""#,
        r#"ns_dot."ta.ble""#,
    ] {
        assert!(tables.iter().any(|x| x == t), "{t} in {tables:?}");
    }
    let csv = lh.file("t.csv", "id\n1\n2\n");
    lh.run(&[
        "table",
        "import",
        r#""my-db"."Q1 Orders""#,
        csv.to_str().unwrap(),
    ])
    .ok();
    assert_eq!(
        lh.rows(r#"select count(*) AS n from "my-db"."Q1 Orders""#, "main")[0]["n"],
        2
    );
    // One spelling per table: a quoted plain level is refused, saying the spelling.
    let err = lh
        .run(&["table", "import", r#"raw."orders""#, csv.to_str().unwrap()])
        .fails(5)
        .to_string();
    assert!(err.contains("write it raw.orders"), "{err}");
    // Folders: `my-db` as `my~2Ddb` (capitals too, for filesystems that ignore case),
    // never a `-` but the one before a table's uuid (seen on a folder warehouse; the
    // layout is the same on a bucket).
    let wh = match on_s3 {
        true => None,
        false => Some(server.warehouse_dir()),
    };
    if let Some(wh) = wh {
        let folders: Vec<String> = std::fs::read_dir(&wh)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        for f in ["my~2Ddb", "~54~45~53~54~20~4E~53", "new~2Edb", "ns_dot"] {
            assert!(folders.iter().any(|x| x == f), "{f} in {folders:?}");
        }
    }
    // Grants name a quoted namespace as it is written.
    lh.run(&[
        "role",
        "set",
        "mydb",
        "--grant",
        "read on main in \"my-db\"",
    ])
    .ok();
    let reader = lh.with_token(&server.token_for("carol", "mydb"));
    assert_eq!(
        reader.rows(r#"select count(*) AS n from "my-db"."Sales 2026""#, "main")[0]["n"],
        3
    );
    let err = reader
        .run(&["query", r#"select count(*) from "new.db"."ta.ble""#])
        .fails(3)
        .to_string();
    assert!(err.contains("not found"), "{err}");
}

/// The thirty-ninth review, on names: a dotted one-level namespace (`"fin.priv"`) and
/// the nested one of the same text (`fin.priv`), and two names that differ only in
/// case, are different tables everywhere. A user granted only `"fin.priv"` read the
/// nested table's rows through a SQL model's input (its name was read back from its
/// SQL spelling); the REST guard checked `"sandbox.priv"` as `sandbox.priv`, inside a
/// granted `sandbox`; a query of `"FIN".t` after one of `fin.t` failed with 500; a
/// project in namespace `"FIN"` could not read its own models.
#[test]
fn names_keep_their_tables_apart() {
    let server = Server::start();
    let lh = server.lh();
    let csv = |name: &str, text: &str| lh.file(name, &format!("s\n{text}\n"));
    for (table, text) in [
        ("fin.priv.t", "SECRET_NESTED"),
        (r#""fin.priv".t"#, "decoy"),
        ("fin.t", "lower"),
        (r#""FIN".t"#, "upper"),
        ("sandbox.ok", "fine"),
        (r#""sandbox.priv".t"#, "SECRET_DOTTED"),
    ] {
        let f = csv(&format!("{}.csv", text.to_lowercase()), text);
        lh.run(&["table", "import", table, f.to_str().unwrap()])
            .ok();
    }
    lh.run(&[
        "role",
        "set",
        "quoted",
        "--grant",
        r#"read,write,run on * in "fin.priv""#,
        "--grant",
        r#"read,write,run on * in "FIN""#,
        "--grant",
        "read on * in sandbox",
    ])
    .ok();
    let mallory = lh.with_token(&server.token_for("mallory", "quoted"));
    // A SQL model reading `"fin.priv".t` reads the one-level table: the nested one is
    // not hers.
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("lh_project.yml"),
        "name: q\nnamespace: '\"FIN\"'\n",
    )
    .unwrap();
    std::fs::write(
        project.path().join("leak.sql"),
        r#"select s from "fin.priv".t"#,
    )
    .unwrap();
    // ... and a model of the project by its bare name.
    std::fs::write(
        project.path().join("cnt.sql"),
        "select count(*) AS n from leak",
    )
    .unwrap();
    let dir = project.path().to_str().unwrap();
    mallory.run(&["run", dir]).ok();
    assert_eq!(
        mallory.rows(r#"select s from "FIN".leak"#, "main"),
        vec![json!({"s": "decoy"})]
    );
    assert_eq!(
        mallory.rows(r#"select n from "FIN".cnt"#, "main")[0]["n"],
        1
    );
    // The REST guard checks the namespace as it is spelled: `"sandbox.priv"` is not
    // inside `sandbox`, and `"FIN"` is hers.
    let token = server.token_for("mallory2", "quoted");
    for (path, want) in [
        ("/iceberg/v1/main/namespaces/sandbox.priv/tables/t", 403),
        ("/iceberg/v1/main/namespaces/sandbox.priv/tables", 403),
        ("/iceberg/v1/main/namespaces/sandbox.priv", 403),
        ("/iceberg/v1/main/namespaces/sandbox/tables/ok", 200),
        ("/iceberg/v1/main/namespaces/FIN/tables/t", 200),
        ("/iceberg/v1/main/namespaces/fin.priv/tables/t", 200),
        // Nor does a listing under a parent she may not read say whether it exists.
        ("/iceberg/v1/main/namespaces?parent=sandbox.priv", 404),
        ("/iceberg/v1/main/namespaces?parent=nope", 404),
        ("/iceberg/v1/main/namespaces?parent=FIN", 200),
    ] {
        let (status, body, _) = crate::auth::call(&server, "GET", path, Some(&token), &[], None);
        assert_eq!(status, want, "{path}: {body}");
    }
    // Of two names one view apart in DuckDB, SQL reads the lowercase one (as it folds
    // unquoted names: the fortieth review found whoever made `"FIN".t` deciding what
    // `FIN.t` read), and never fails for the other having been read (it did, with 500).
    for (sql, want) in [
        ("select s from fin.t", "lower"),
        (r#"select s from "FIN".t"#, "lower"),
        ("select s from FIN.t", "lower"),
        (r#"select s from "fin.priv".t"#, "SECRET_NESTED"),
    ] {
        assert_eq!(lh.rows(sql, "main"), vec![json!({ "s": want })], "{sql}");
    }
    // A reader of `"FIN"` alone reads its table by either spelling.
    for sql in [r#"select s from "FIN".t"#, "select s from FIN.t"] {
        assert_eq!(
            mallory.rows(sql, "main"),
            vec![json!({ "s": "upper" })],
            "{sql}"
        );
    }
}

/// A nested namespace with a quoted level is read in SQL by its dotted schema
/// (`"My DB.sales".t` is `"My DB".sales.t`, or else the one-level `"My DB.sales".t`); a
/// grant names a level with a space as lh spells it, and a spelling lh never writes
/// (`"fin"`) is refused rather than matching nothing; a SQL model reading a bare name and
/// `main.` that name is refused, the two being one view in DuckDB (the fortieth review).
#[test]
fn quoted_levels_are_read_and_granted_as_spelled() {
    let server = Server::start();
    let lh = server.lh();
    for (table, text) in [
        (r#""My DB".sales.t"#, "nested"),
        (r#""My DB.sales".t"#, "one"),
        (r#""X Y.z".u"#, "only one"),
        (r#""Other".t"#, "other"),
        ("proj.t", "mine"),
        ("main.t", "main's"),
    ] {
        let f = lh.file("t.csv", &format!("s\n{text}\n"));
        lh.run(&["table", "import", table, f.to_str().unwrap()])
            .ok();
    }
    for (sql, want) in [
        (r#"select s from "My DB.sales".t"#, "nested"),
        (r#"select s from "X Y.z".u"#, "only one"),
    ] {
        assert_eq!(lh.rows(sql, "main"), vec![json!({ "s": want })], "{sql}");
    }
    // A grant spells a level with a space as lh does; `"fin"` is written fin.
    let err = lh
        .run(&["role", "set", "bad", "--grant", r#"read on * in "fin""#])
        .fails(5)
        .to_string();
    assert!(err.contains("write fin"), "{err}");
    let err = lh
        .run(&["role", "set", "bad", "--grant", "read on * in My DB"])
        .fails(5)
        .to_string();
    assert!(err.contains("invalid namespace pattern"), "{err}");
    lh.run(&[
        "role",
        "set",
        "spaced",
        "--grant",
        r#"read on * in "My DB""#,
    ])
    .ok();
    let reader = lh.with_token(&server.token_for("ann", "spaced"));
    assert_eq!(
        reader.rows(r#"select s from "My DB.sales".t"#, "main"),
        vec![json!({ "s": "nested" })]
    );
    for hidden in [r#"select s from "Other".t"#, "select s from proj.t"] {
        reader.run(&["query", hidden]).fails(3);
    }
    // A model of `proj` reading `t` (proj.t) and `main.t`.
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("lh_project.yml"),
        "name: p\nnamespace: proj\n",
    )
    .unwrap();
    std::fs::write(
        project.path().join("both.sql"),
        "select s from t union all select s from main.t",
    )
    .unwrap();
    let err = lh
        .run(&["run", project.path().to_str().unwrap()])
        .fails(5)
        .to_string();
    assert!(err.contains("both are DuckDB's main.t"), "{err}");
    assert!(err.contains("write proj.t"), "{err}");
    // Either alone reads its own.
    std::fs::write(project.path().join("both.sql"), "select s from t").unwrap();
    std::fs::write(project.path().join("theirs.sql"), "select s from main.t").unwrap();
    // A model reads names as a query does: `"Other".t` as written when there is no
    // other.t, a dotted schema nested first.
    std::fs::write(
        project.path().join("quoted.sql"),
        r#"select s from "Other".t"#,
    )
    .unwrap();
    std::fs::write(
        project.path().join("dotted.sql"),
        r#"select s from "My DB.sales".t union all select s from "X Y.z".u"#,
    )
    .unwrap();
    lh.run(&["run", project.path().to_str().unwrap()]).ok();
    assert_eq!(
        lh.rows("select s from proj.quoted", "main"),
        vec![json!({ "s": "other" })]
    );
    assert_eq!(
        lh.rows("select s from proj.dotted order by s", "main"),
        vec![json!({ "s": "nested" }), json!({ "s": "only one" })]
    );
    assert_eq!(
        lh.rows("select s from proj.both", "main"),
        vec![json!({ "s": "mine" })]
    );
    assert_eq!(
        lh.rows("select s from proj.theirs", "main"),
        vec![json!({ "s": "main's" })]
    );
}
