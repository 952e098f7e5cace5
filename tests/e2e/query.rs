//! `lh query`: output formats, refs, limits, and the sandbox.

use lh_e2e::Server;

use crate::snap;

pub(crate) fn orders(server: &Server) -> lh_e2e::Lh {
    let lh = server.lh();
    let csv = lh.file(
        "orders.csv",
        "id,customer,amount\n1,alice,10.5\n2,bob,20\n3,carol,\n",
    );
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    lh
}

#[test]
fn output_formats() {
    let server = Server::start();
    let lh = orders(&server);
    let sql = "select id, customer, amount from raw.orders order by id";
    snap!("query_table", server, lh.run(&["query", sql]));
    snap!("query_csv", server, lh.run(&["query", sql, "-o", "csv"]));
    snap!("query_json", server, lh.run(&["query", sql, "-o", "json"]));
    snap!(
        "query_max_rows",
        server,
        lh.run(&["query", sql, "--max-rows", "2"])
    );
    snap!(
        "query_empty",
        server,
        lh.run(&["query", "select * from raw.orders where false"])
    );
    let f = lh.file("q.sql", "select sum(amount) AS total from raw.orders");
    assert_eq!(
        lh.run(&["query", "--file", f.to_str().unwrap(), "-o", "csv"])
            .ok(),
        "total\n30.5\n"
    );
    let out = server.dir.path().join("r.parquet");
    let run = lh.run(&["query", sql, "--out", out.to_str().unwrap()]);
    assert!(run.stderr.starts_with("wrote 3 rows to"), "{}", run.stderr);
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
    // Table functions and CTEs work; DESCRIBE works on lh tables.
    assert_eq!(
        lh.rows(
            "with t AS (select * from raw.orders) select count(*) AS n from t, range(2)",
            "main"
        )[0]["n"],
        6
    );
    let cols = lh.rows("describe raw.orders", "main");
    assert_eq!(
        cols.iter()
            .map(|c| c["column_name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["id", "customer", "amount"]
    );
}

/// Every type a query can return prints in every output format: time zones by name,
/// nested values (as JSON text in a CSV cell), intervals, blobs, uuids, unions.
#[test]
fn every_type_prints_in_every_format() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file(
        "events.csv",
        "id,seen\n1,2026-01-02 03:04:05+00\n2,2026-06-30 23:59:59.5+02\n",
    );
    lh.run(&["table", "import", "raw.events", csv.to_str().unwrap()])
        .ok();
    let sql = "select id, seen from raw.events order by id";
    assert_eq!(
        lh.run(&["query", sql, "-o", "csv"]).ok(),
        "id,seen\n1,2026-01-02T03:04:05Z\n2,2026-06-30T21:59:59.500Z\n"
    );
    assert_eq!(
        lh.rows(sql, "main"),
        vec![
            serde_json::json!({"id": 1, "seen": "2026-01-02T03:04:05Z"}),
            serde_json::json!({"id": 2, "seen": "2026-06-30T21:59:59.500Z"}),
        ]
    );
    assert!(
        lh.run(&["query", sql])
            .ok()
            .contains("| 2  | 2026-06-30T21:59:59.500Z |")
    );
    // Time zone arithmetic on a TIMESTAMPTZ (DuckDB's ICU, built into the linked
    // libduckdb) works, in UTC whatever the server machine's zone.
    assert_eq!(
        lh.run(&[
            "query",
            "select date_trunc('day', seen) AS day from raw.events order by 1",
            "-o",
            "csv"
        ])
        .ok(),
        "day\n2026-01-02T00:00:00Z\n2026-06-30T00:00:00Z\n"
    );
    assert_eq!(
        lh.run(&[
            "query",
            "select date_trunc('day', seen::timestamp) AS day from raw.events order by 1",
            "-o",
            "csv"
        ])
        .ok(),
        "day\n2026-01-02T00:00:00\n2026-06-30T00:00:00\n"
    );

    let sql = "select 12.345::decimal(12,3) AS dec, INTERVAL 90 MINUTE AS iv, \
               '\\xCA\\xFE'::blob AS bin, uuid '6ba7b810-9dad-11d1-80b4-00c04fd430c8' AS id, \
               [1, 2] AS l, {'a': 1, 'b': 'x', 'c': [{'d': NULL}]} AS st, MAP {'k': 3} AS m, \
               NULL::int[] AS nl, union_value(num := 2) AS u, MAP {1: 'one'} AS im";
    assert_eq!(
        lh.run(&["query", sql, "-o", "csv"]).ok(),
        "dec,iv,bin,id,l,st,m,nl,u,im\n\
         12.345,1 hours 30 mins,cafe,6ba7b810-9dad-11d1-80b4-00c04fd430c8,\"[1,2]\",\
         \"{\"\"a\"\":1,\"\"b\"\":\"\"x\"\",\"\"c\"\":[{\"\"d\"\":null}]}\",\"{\"\"k\"\":3}\",,{num=2},{1: one}\n"
    );
    assert_eq!(
        lh.rows(sql, "main"),
        vec![serde_json::json!({
            "dec": 12.345, "iv": "1 hours 30 mins", "bin": "cafe",
            "id": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "l": [1, 2],
            "st": {"a": 1, "b": "x", "c": [{"d": null}]}, "m": {"k": 3}, "nl": null,
            "u": "{num=2}", "im": "{1: one}"
        })]
    );
    assert!(
        lh.run(&["query", sql])
            .ok()
            .contains("| 12.345 | 1 hours 30 mins | cafe |")
    );
}

#[test]
fn queries_read_any_ref() {
    let server = Server::start();
    let lh = orders(&server);
    let first = lh.head("main");
    lh.run(&["branch", "create", "dev"]).ok();
    let more = lh.file("more.csv", "id,customer,amount\n4,dave,1\n");
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        more.to_str().unwrap(),
        "--mode",
        "append",
        "--ref",
        "dev",
    ])
    .ok();
    let count = |at: &str| {
        lh.rows("select count(*) AS n from raw.orders", at)[0]["n"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(count("main"), 3);
    assert_eq!(count("dev"), 4);
    assert_eq!(count(&format!("@{}", &first[..10])), 3);
    assert_eq!(count(&format!("dev@{first}")), 3);
    lh.run(&["tag", "create", "before", "--from", &format!("@{first}")])
        .ok();
    assert_eq!(count("before"), 3);
    // Time travel by time: dev as of a time after its last change has 4 rows; before
    // the catalog existed, dev did not exist.
    assert_eq!(count("dev@2999-01-01T00:00:00Z"), 4);
    lh.run(&["query", "select 1", "--ref", "dev@2001-01-01T00:00:00Z"])
        .fails(3);
}

/// A query that takes a while shows a terminal that it runs, and for how long (cleared
/// when the answer comes), with DuckDB's progress as a bar where DuckDB can tell it; a
/// pipe gets the answer alone. A large import shows its upload's bytes.
#[test]
fn a_long_query_says_it_runs_on_a_terminal() {
    let server = Server::start();
    let lh = server.lh();
    let slow = "select count(*) as n from range(1500000000) t(i) where i % 7 = 3";
    let (ok, seen) = lh.in_terminal(&["query", slow]);
    assert!(ok, "{seen}");
    assert!(seen.contains("running the query ("), "{seen}");
    assert!(seen.contains("214285714"), "{seen}");
    let piped = lh.run(&["query", "select 42 as n"]);
    assert!(
        !piped.stderr.contains("running the query"),
        "{}",
        piped.stderr
    );
    // A scan DuckDB can measure shows its progress: ten million rows of a table (40 MB).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ints.parquet");
    lh.run(&[
        "query",
        "select i from range(10000000) t(i)",
        "--out",
        file.to_str().unwrap(),
    ])
    .ok();
    // Its import, on a terminal, shows the upload's bytes (a file over 16 MB).
    let (ok, seen) = lh.in_terminal(&["table", "import", "big.ints", file.to_str().unwrap()]);
    assert!(ok, "{seen}");
    let upload =
        regex::Regex::new(r"uploading \S*ints\.parquet \[[=> ]{30}\] [0-9.]+ [KMG]iB/[0-9.]+ MiB")
            .unwrap();
    assert!(upload.is_match(&seen), "no upload bar:\n{seen}");
    let (ok, seen) = lh.in_terminal(&[
        "query",
        "select count(distinct md5(md5(i::varchar))) as n from big.ints",
    ]);
    assert!(ok, "{seen}");
    assert!(seen.contains("10000000"), "{seen}");
    let bar = regex::Regex::new(r"running the query \[[=> ]{30}\] +\d{1,3}% \(").unwrap();
    assert!(bar.is_match(&seen), "no progress bar:\n{seen}");
    // A progress id that is not a plain name is refused, and nothing runs; a name no
    // query of the caller's runs under is not found.
    let token = server.token();
    let (status, body, _) = crate::auth::call(
        &server,
        "POST",
        "/api/v1/query",
        Some(&token),
        &[("Accept", "application/json")],
        Some(serde_json::json!({"sql": "select 1", "progress_id": "../x y"})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("progress id"), "{body}");
    let (status, body, _) = crate::auth::call(
        &server,
        "GET",
        "/api/v1/query/progress/nothing-runs",
        Some(&token),
        &[],
        None,
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["kind"], "query_not_found", "{body}");
}

#[test]
fn bad_sql_and_unknown_tables() {
    let server = Server::start();
    let lh = orders(&server);
    snap!("query_syntax_error", server, lh.run(&["query", "selec 1"]));
    snap!(
        "query_unknown_table",
        server,
        lh.run(&["query", "select * from raw.nope"])
    );
    // A table without its namespace: lh's nearest table is suggested, never DuckDB's
    // own system views.
    snap!(
        "query_bare_table",
        server,
        lh.run(&["query", "select * from orders"])
    );
    snap!(
        "query_unknown_column",
        server,
        lh.run(&["query", "select nope from raw.orders"])
    );
    snap!(
        "query_two_statements",
        server,
        lh.run(&["query", "select 1; select 2"])
    );
    lh.run(&["query", "select 1", "--ref", "nope"]).fails(3);
    lh.run(&["query", "select 1", "--ref", "bad..ref"]).fails(5);
    lh.run(&["query", "  "]).fails(5);
    // A runtime error is an error, not a short result.
    lh.run(&["query", "select cast(customer AS integer) from raw.orders"])
        .fails(5);
}

#[test]
fn the_sandbox_refuses_escapes() {
    let server = Server::start();
    let lh = orders(&server);
    let warehouse = server.warehouse_dir();
    let escapes = [
        "select * from read_csv('/etc/passwd')".to_string(),
        "select * from read_text('/etc/hostname')".to_string(),
        "select * from glob('/etc/*')".to_string(),
        format!(
            "select * from read_csv('{}/../catalog.db')",
            warehouse.display()
        ),
        format!("copy (select 1) to '{}/x.csv'", warehouse.display()),
        "copy raw.orders to '/tmp/stolen.csv'".to_string(),
        format!("attach '{}/x.db' as x", warehouse.display()),
        "install httpfs".to_string(),
        "load httpfs".to_string(),
        "set enable_external_access = true".to_string(),
        "reset allowed_directories".to_string(),
        "pragma version".to_string(),
        "create table t as select 1".to_string(),
        "insert into raw.orders values (9, 'x', 1)".to_string(),
        "select * from read_parquet('http://127.0.0.1:9/x.parquet')".to_string(),
        "call pragma_database_list()".to_string(),
        // The warehouse holds every ref's files, dropped tables' and refused writes':
        // a query sees its ref's tables by name, never a path of it.
        format!("select file from glob('{}/**')", warehouse.display()),
        format!(
            "select * from read_parquet('{}/**/*.parquet')",
            warehouse.display()
        ),
        format!("select * from '{}/raw/x.parquet'", warehouse.display()),
        format!("select * from \"{}/raw\"", warehouse.display()),
        "select * from 'orders.parquet'".to_string(),
        format!(
            "select * from parquet_metadata('{}/**/*.parquet')",
            warehouse.display()
        ),
        "select * from query('select 1')".to_string(),
        "select * from query_table('raw.orders')".to_string(),
        "select * from duckdb_views()".to_string(),
        "select * from raw.orders, read_text('/etc/hostname')".to_string(),
        "select (select count(*) from glob('/**')) as n".to_string(),
        format!(
            "select json_serialize_plan('select * from read_parquet(''{}/**/*.parquet'')')",
            warehouse.display()
        ),
        "select * from duckdb_views".to_string(),
        "select * from information_schema.tables".to_string(),
        "select * from system.main.duckdb_tables".to_string(),
        "show tables".to_string(),
        "show all tables".to_string(),
        "show databases".to_string(),
        "select * from orders.parquet".to_string(),
        // DuckDB's macros over its catalog, and the server's settings (the third
        // review's finding 3): refused by the functions' allow-list.
        "select pg_get_viewdef(oid) from range(100000) t(oid) where pg_get_viewdef(oid) is not null".to_string(),
        "select pg_catalog.pg_get_viewdef(1)".to_string(),
        "select current_setting('temp_directory')".to_string(),
        "select current_setting('allowed_directories')".to_string(),
        "select getvariable('x')".to_string(),
        "select \"system\".main.current_database()".to_string(),
        "select current_schemas(true)".to_string(),
        "select get_block_size('memory')".to_string(),
        "select format_type(1, 1)".to_string(),
        "select id from raw.orders where current_setting('threads') is not null".to_string(),
    ];
    for sql in &escapes {
        let run = lh.run(&["query", sql]);
        assert_eq!(
            run.code, 5,
            "{sql} must be refused:\n{}\n{}",
            run.stdout, run.stderr
        );
        assert!(run.stdout.is_empty(), "{sql}: no data on stdout");
    }
    snap!(
        "sandbox_read_only",
        server,
        lh.run(&["query", "copy raw.orders to '/tmp/stolen.csv'"])
    );
    snap!(
        "sandbox_file",
        server,
        lh.run(&["query", "select * from read_csv('/etc/passwd')"])
    );
    assert!(!warehouse.join("x.csv").exists() && !std::path::Path::new("/tmp/stolen.csv").exists());
    // And the table is intact.
    assert_eq!(
        lh.rows("select count(*) AS n from raw.orders", "main")[0]["n"],
        3
    );
}

#[test]
fn timeouts_and_result_limits() {
    let server = Server::start_with(&["--max-result-bytes", "100000", "--query-timeout", "2"]);
    let lh = orders(&server);
    let run = lh.run(&[
        "query",
        "select count(*) from range(1000000000) a, range(1000) b",
    ]);
    let err = run.fails(7);
    assert!(err.contains("timeout"), "{err}");
    let run = lh.run(&["query", "select range AS n from range(1000000)"]);
    let err = run.fails(7);
    assert!(err.contains("larger than the limit"), "{err}");
    assert!(err.contains("hint:"), "{err}");
    // As JSON (the web console's answer), text is held to the same limit: 10,000 rows
    // of a boolean and a null are 1.3 KB of Arrow but 140 KB of JSON.
    let r = ureq::post(&format!("{}/api/v1/query", server.url))
        .config()
        .http_status_as_error(false)
        .build()
        .header("Authorization", &format!("Bearer {}", server.token()))
        .header("Accept", "application/json")
        .send_json(serde_json::json!({"sql": "select true AS a, null AS b from range(10000)"}))
        .unwrap();
    let status = r.status();
    let v: serde_json::Value = r.into_body().read_json().unwrap();
    assert_eq!(status, 413, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("as JSON is larger than the limit"),
        "{v}"
    );
    // Under the limit, the same values as JSON, nulls as null.
    let mut r = ureq::post(&format!("{}/api/v1/query", server.url))
        .header("Authorization", &format!("Bearer {}", server.token()))
        .header("Accept", "application/json")
        .send_json(serde_json::json!({"sql": "select true AS a, null AS b, 'x\"y' AS c from range(3)", "max_rows": 2}))
        .unwrap();
    let v: serde_json::Value = r.body_mut().read_json().unwrap();
    assert_eq!(
        v["rows"],
        serde_json::json!([["true", null, "x\"y"], ["true", null, "x\"y"]]),
        "{v}"
    );
    assert_eq!(v["truncated"], true, "{v}");
    assert_eq!(
        v["columns"][0],
        serde_json::json!({"name": "a", "type": "Boolean"}),
        "{v}"
    );
    let parsed: lh_api::QueryJson = serde_json::from_value(v).unwrap();
    assert_eq!(parsed.commit.len(), 64);
    // The server is still healthy.
    assert_eq!(
        lh.rows("select count(*) AS n from raw.orders", "main")[0]["n"],
        3
    );
}

#[test]
fn a_query_stops_when_its_client_goes_away() {
    // One query at a time: if the abandoned query kept running, the next would wait.
    let server = Server::start_with(&["--max-concurrent-queries", "1"]);
    let lh = orders(&server);
    let mut long = lh
        .command(&[
            "query",
            "select count(*) from range(1000000000) a, range(100000) b",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    long.kill().unwrap();
    long.wait().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let lh2 = lh.clone();
    std::thread::spawn(move || {
        let _ = tx.send(lh2.run(&[
            "query",
            "select count(*) AS n from raw.orders",
            "-o",
            "json",
        ]));
    });
    // The abandoned query would run for hours; the next one must not wait for it.
    let run = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the next query was blocked by the abandoned one");
    assert!(run.ok().contains("\"n\":3"), "{}", run.stdout);
}

/// A large answer (past 16 MB, no `max_rows`) is sent while DuckDB produces it: all of
/// it arrives; one that then passes the result limit breaks off with an error that
/// says so, and the server goes on serving.
#[test]
fn large_answers_stream_and_break_off_at_the_limit() {
    // One query slot: a streamed query that kept its slot would stop the next one.
    let server = Server::start_with(&[
        "--max-result-bytes",
        "60000000",
        "--max-concurrent-queries",
        "1",
    ]);
    let lh = orders(&server);
    // Streamed: no length, chunks.
    let r = ureq::post(&format!("{}/api/v1/query", server.url))
        .header("Authorization", &format!("Bearer {}", server.token()))
        .send_json(
            serde_json::json!({"sql": "select range AS n, range * 2 AS m from range(2000000)"}),
        )
        .unwrap();
    assert!(
        r.headers().get("content-length").is_none(),
        "{:?}",
        r.headers()
    );
    assert_eq!(r.headers().get("transfer-encoding").unwrap(), "chunked");
    let mut r = r;
    let bytes = r
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_vec()
        .unwrap();
    let rows: usize = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .unwrap()
        .map(|b| b.unwrap().num_rows())
        .sum();
    assert_eq!(rows, 2_000_000);
    // A small answer comes whole, with its length.
    let r = ureq::post(&format!("{}/api/v1/query", server.url))
        .header("Authorization", &format!("Bearer {}", server.token()))
        .send_json(serde_json::json!({"sql": "select 1 AS n"}))
        .unwrap();
    assert!(
        r.headers().get("content-length").is_some(),
        "{:?}",
        r.headers()
    );
    let out = lh
        .command(&[
            "query",
            "select range AS n, range * 2 AS m from range(2000000)",
            "-o",
            "csv",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 2_000_001);
    assert_eq!(text.lines().last(), Some("1999999,3999998"));
    // 32 MB sent, then the limit: the stream is cut, the CLI says why.
    let run = lh.run(&[
        "query",
        "select range AS n, range * 2 AS m from range(10000000)",
        "-o",
        "csv",
    ]);
    let err = run.fails(7);
    assert!(err.contains("broke off"), "{err}");
    // The server logs why once its query task ends, which can be after the client saw
    // the break.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !server.log().contains("larger than the limit") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        server.log().contains("larger than the limit"),
        "{}",
        server.log()
    );
    // The slot was given back: the next query answers.
    assert_eq!(
        lh.rows("select count(*) AS n from raw.orders", "main")[0]["n"],
        3
    );
}
