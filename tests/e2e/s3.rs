//! An S3 warehouse's faults, on real S3 servers: s3s-fs (over a folder, so that a test
//! can stop it, age its objects and make one undeletable) and Garage (a production
//! store, with per-key permissions). These run in both passes of the suite: each test
//! names its own warehouse.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use lh_e2e::{S3Server, Server, lh_bin};
use serde_json::{Value, json};

/// The Garage store `scripts/services.sh garage` starts: endpoint, bucket, a key that
/// may read and write, and one that may only read.
struct Garage {
    endpoint: String,
    bucket: String,
    rw: (String, String),
    ro: (String, String),
}

fn garage() -> Garage {
    let get = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} is not set: these tests need Garage (`scripts/services.sh garage`, as make test runs)")
        })
    };
    Garage {
        endpoint: get("LH_TEST_GARAGE_ENDPOINT"),
        bucket: get("LH_TEST_GARAGE_BUCKET"),
        rw: (get("LH_TEST_GARAGE_KEY"), get("LH_TEST_GARAGE_SECRET")),
        ro: (
            get("LH_TEST_GARAGE_RO_KEY"),
            get("LH_TEST_GARAGE_RO_SECRET"),
        ),
    }
}

fn aws_env(endpoint: &str, key: &str, secret: &str, region: &str) -> Vec<(String, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID".into(), key.into()),
        ("AWS_SECRET_ACCESS_KEY".into(), secret.into()),
        ("AWS_ENDPOINT_URL".into(), endpoint.into()),
        ("AWS_REGION".into(), region.into()),
    ]
}

/// A server on the S3 warehouse `args` name, reached with `env`.
fn start_on(args: &[&str], env: &[(String, String)]) -> Server {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Server::start_with_env(args, &env)
}

fn prefix() -> String {
    format!(
        "f{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_micros()
            % 10_000_000
    )
}

/// Runs `lh server` that must refuse to start; returns its exit code and stderr.
fn refused_start(args: &[&str], envs: &[(String, String)]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(lh_bin())
        .args(["server", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a server that hangs on a bad store fails the test, not the suite.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("lh server neither started nor stopped within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_wrong_key_or_a_missing_permission_stops_the_server_at_start() {
    let s3 = S3Server::from_env();
    let wh = format!("s3://{}/{}", s3.bucket, prefix());
    let args = ["--warehouse", wh.as_str(), "--s3-path-style"];

    let (code, err) = refused_start(
        &args,
        &aws_env(&s3.endpoint, &s3.key, "not-the-secret", "us-east-1"),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("is not usable: write failed") && err.contains("access denied"),
        "{err}"
    );
    assert!(err.contains("hint: check the key (lh-test-key"), "{err}");
    assert!(!err.contains("not-the-secret"), "the secret shows: {err}");

    // No credentials at all.
    let (code, err) = refused_start(
        &args,
        &[
            ("AWS_ENDPOINT_URL".into(), s3.endpoint.clone()),
            ("HOME".into(), "/nonexistent".into()),
            ("AWS_ACCESS_KEY_ID".into(), String::new()),
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no credentials for the S3 warehouse"), "{err}");

    // Garage: a key that may read but not write.
    let g = garage();
    let wh = format!("s3://{}/{}", g.bucket, prefix());
    let (code, err) = refused_start(
        &["--warehouse", &wh, "--s3-path-style"],
        &aws_env(&g.endpoint, &g.ro.0, &g.ro.1, "garage"),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("write failed") && err.contains("access denied"),
        "{err}"
    );
    // A bucket that is not there.
    let (code, err) = refused_start(
        &["--warehouse", "s3://no-such-bucket/x", "--s3-path-style"],
        &aws_env(&g.endpoint, &g.rw.0, &g.rw.1, "garage"),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("s3://no-such-bucket/x is not usable"), "{err}");
    // Bad URLs are usage errors before any request.
    for bad in ["s3://Bad_Bucket/x", "s3://lhb/../x", "gs://b/x"] {
        let (code, err) = refused_start(
            &["--warehouse", bad],
            &aws_env(&g.endpoint, &g.rw.0, &g.rw.1, "garage"),
        );
        assert_eq!(code, 1, "{bad}: {err}");
        assert!(
            err.contains("not an S3 location") || err.contains("unsupported warehouse"),
            "{bad}: {err}"
        );
    }
}

/// Garage, a production store, end to end: the key that may write runs imports,
/// queries on two refs, a merge and a pipeline.
#[test]
fn garage_holds_a_warehouse_end_to_end() {
    let g = garage();
    let wh = format!("s3://{}/{}", g.bucket, prefix());
    let env = aws_env(&g.endpoint, &g.rw.0, &g.rw.1, "garage");
    let server = start_on(&["--warehouse", &wh, "--s3-path-style"], &env);
    let lh = server.lh();
    let csv = lh.file("o.csv", "id,amount\n1,10\n2,20\n3,30\n");
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    lh.run(&["branch", "create", "dev"]).ok();
    let more = lh.file("m.csv", "id,amount\n4,40\n");
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        more.to_str().unwrap(),
        "--ref",
        "dev",
        "--mode",
        "append",
    ])
    .ok();
    let sum = |at: &str| lh.rows("select count(*) AS n, sum(amount) AS s from raw.orders", at);
    assert_eq!(sum("main"), vec![json!({"n": 3, "s": 60})]);
    assert_eq!(sum("dev"), vec![json!({"n": 4, "s": 100})]);
    lh.run(&["merge", "dev", "--into", "main"]).ok();
    assert_eq!(sum("main"), vec![json!({"n": 4, "s": 100})]);
    let info = lh.run(&["info"]).ok().to_string();
    assert!(
        info.contains(&g.endpoint) && !info.contains(&g.rw.1),
        "{info}"
    );
}

/// A server that accepts connections and never answers.
fn stalled_server() -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().take(64) {
            held.push(c);
        }
    });
    (format!("http://{addr}"), h)
}

#[test]
fn a_stalled_s3_server_is_a_clear_timeout_not_a_hang() {
    let (endpoint, _h) = stalled_server();
    let (code, err) = refused_start(
        &[
            "--warehouse",
            "s3://lhb/stalled",
            "--s3-path-style",
            "--s3-timeout",
            "1s",
        ],
        &aws_env(&endpoint, "k", "s", "us-east-1"),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is not usable: write failed"), "{err}");
    assert!(err.contains("is the S3 server up and reachable?"), "{err}");
}

/// An s3s-fs process, stopped when dropped.
struct OwnStore(Child);

impl OwnStore {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for OwnStore {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An s3s-fs of the test's own on `root`, on a free port (given, for a restart).
fn own_s3s_fs(root: &Path, port: u16) -> OwnStore {
    let bin = std::env::var("LH_TEST_S3S_FS").unwrap_or_else(|_| {
        panic!("LH_TEST_S3S_FS is not set: `scripts/services.sh s3` builds s3s-fs")
    });
    let store = OwnStore(
        Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", "k1", "--secret-key", "s1"])
            .arg(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return store;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("s3s-fs did not start on port {port}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn table_rows(lh: &lh_e2e::Lh) -> u64 {
    let v: Value =
        serde_json::from_str(lh.run(&["table", "show", "raw.orders", "-o", "json"]).ok()).unwrap();
    v["rows"].as_u64().unwrap()
}

#[test]
fn an_import_while_the_s3_server_is_down_commits_nothing_and_a_retry_works() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("lhb")).unwrap();
    let port = free_port();
    let mut store = own_s3s_fs(root.path(), port);
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = aws_env(&endpoint, "k1", "s1", "us-east-1");
    let server = start_on(
        &[
            "--warehouse",
            "s3://lhb/down",
            "--s3-path-style",
            "--s3-timeout",
            "2s",
        ],
        &env,
    );
    let lh = server.lh();
    let csv = lh.file("o.csv", "id,amount\n1,10\n2,20\n3,30\n");
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    let head = lh.head("main");

    store.stop();
    let err = lh
        .run(&[
            "table",
            "import",
            "raw.orders",
            csv.to_str().unwrap(),
            "--mode",
            "append",
        ])
        .fails(1)
        .to_string();
    assert!(err.contains("is the S3 server up and reachable?"), "{err}");
    assert_eq!(lh.head("main"), head, "nothing was committed");

    let _store = own_s3s_fs(root.path(), port);
    assert_eq!(table_rows(&lh), 3);
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        csv.to_str().unwrap(),
        "--mode",
        "append",
    ])
    .ok();
    assert_eq!(table_rows(&lh), 6);
    assert_eq!(
        lh.rows("select count(*) AS n from raw.orders", "main"),
        vec![json!({"n": 6})]
    );
    // The failed import's staged files are gone; the bucket holds the table's files
    // only (metadata and data of two snapshots, none of the failed one).
    assert!(
        std::fs::read_dir(server.data_dir().join("s3/staging"))
            .unwrap()
            .next()
            .is_none()
    );
}

/// Makes a file undeletable (root included) until `chattr -i`.
fn immutable(path: &Path, on: bool) {
    let ok = Command::new("chattr")
        .arg(if on { "+i" } else { "-i" })
        .arg(path)
        .status()
        .expect("chattr (e2fsprogs)")
        .success();
    assert!(ok, "chattr failed on {}", path.display());
}

fn age(path: &Path, by: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

/// A store that refuses to delete an object (here s3s-fs over a file that cannot be
/// removed; Garage has no write-without-delete permission to show it with): gc says
/// which, removes the rest, and removes it once it may.
#[test]
fn gc_reports_objects_the_store_refuses_to_delete() {
    let s3 = S3Server::from_env();
    let p = prefix();
    let wh = format!("s3://{}/{p}", s3.bucket);
    let server = start_on(&["--warehouse", &wh, "--s3-path-style"], &s3.env());
    let lh = server.lh();
    let csv = lh.file("o.csv", "id\n1\n");
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    let dir: PathBuf = s3.root.join(&s3.bucket).join(&p).join("raw");
    let table = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let stuck = table.join("data/stray/stuck.parquet");
    let loose = table.join("data/stray/loose.parquet");
    for f in [&stuck, &loose] {
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, b"orphan").unwrap();
        age(f, Duration::from_secs(3 * 86400));
    }
    immutable(&stuck, true);
    let err = lh.run(&["gc", "--older-than", "1d"]).fails(1).to_string();
    immutable(&stuck, false);
    assert!(
        err.contains("garbage collection could not remove every file"),
        "{err}"
    );
    assert!(err.contains("permission to delete"), "{err}");
    assert!(!loose.exists(), "the other orphan went");
    assert!(stuck.exists());
    let v: Value =
        serde_json::from_str(lh.run(&["gc", "--older-than", "1d", "-o", "json"]).ok()).unwrap();
    assert_eq!(v["removed_files"], 1, "{v}");
    assert!(!stuck.exists());
    assert_eq!(
        lh.rows("select count(*) AS n from raw.orders", "main"),
        vec![json!({"n": 1})]
    );
}
