//! The process runtime with real uv environments, real Python and bubblewrap: results,
//! failures with tracebacks, warm reuse, and the sandbox's guards (each would fail
//! without its guard). Needs uv on PATH (`make test` provides it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use lh_runner::process::{ProcessConfig, ProcessRuntime};
use lh_runner::{Env, EnvCache, EnvSpec, Invocation, InvocationKind, Limits, Outcome, Runtime};

struct Fixture {
    dir: tempfile::TempDir,
    rt: Arc<ProcessRuntime>,
    env: Env,
    code: PathBuf,
}

/// One environment for every test of this file (built once, then cached).
async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let envs = std::env::var_os("LH_TEST_ENV_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("lh-test-envs"));
    let cache = EnvCache::new(envs, None, true);
    let spec = EnvSpec {
        python: "3.11".into(),
        packages: BTreeMap::new(),
        source_builds: false,
    };
    let (env, _) = cache
        .get(&spec)
        .await
        .expect("build the environment (is uv on PATH?)");
    let code = dir.path().join("code");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("models.py"), MODELS).unwrap();
    let rt = ProcessRuntime::new(ProcessConfig {
        work_root: dir.path().join("work"),
        sandbox: true,
        idle_timeout: Duration::from_secs(60),
        max_idle: 2,
        sandbox_user: lh_runner::HostUser::for_sandboxes(lh_runner::HostUser::DEFAULT_ID),
    })
    .unwrap();
    Fixture { dir, rt, env, code }
}

const MODELS: &str = r#"
import os, socket, time

def identity(t):
    return t

def doubled(t):
    import pyarrow.compute as pc
    import pyarrow as pa
    return pa.table({"x": pc.multiply(t.column("x"), 2)})

def raises(t):
    print("about to fail")
    return 1 / 0

def wrong_type(t):
    return [1, 2, 3]

def sleeps(t):
    time.sleep(60)

def hog(t):
    return bytearray(3_000_000_000)

def network(t):
    socket.create_connection(("127.0.0.1", int(os.environ.get("LH_PORT", "1"))), timeout=2)
    return t

def reads_host(t):
    return open("/root/.bashrc").read()

def writes_env(t):
    import pyarrow
    open(os.path.join(os.path.dirname(pyarrow.__file__), "pwned"), "w").write("x")

def expect_positive(t):
    return all(v > 0 for v in t.column("x").to_pylist())

def exits(t):
    os._exit(3)
"#;

fn input(dir: &Path, values: &[i64]) -> PathBuf {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(values.to_vec()))],
    )
    .unwrap();
    let p = dir.join("in.arrow");
    let f = std::fs::File::create(&p).unwrap();
    let mut w = arrow::ipc::writer::FileWriter::try_new(f, &schema).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    p
}

async fn call(
    f: &Fixture,
    function: &str,
    kind: InvocationKind,
    limits: &Limits,
) -> (lh_runner::InvokeResult, PathBuf) {
    let work = f.dir.path().join(format!("inv-{}", uuid()));
    std::fs::create_dir_all(&work).unwrap();
    let inp = input(&work, &[1, 2, 3]);
    let inv = Invocation {
        id: uuid(),
        kind,
        file: f.code.join("models.py"),
        function: function.into(),
        root: f.code.clone(),
        inputs: BTreeMap::from([("t".to_string(), inp)]),
        params: BTreeMap::new(),
        output: work.join("out.arrow"),
        env: Default::default(),
        live: None,
        tenant: String::new(),
    };
    let r = f.rt.invoke(&f.env, limits, &work, inv).await.unwrap();
    (r, work.join("out.arrow"))
}

fn uuid() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn read(p: &Path) -> Vec<i64> {
    let f = std::fs::File::open(p).unwrap();
    let r = arrow::ipc::reader::FileReader::try_new(f, None).unwrap();
    r.flat_map(|b| {
        let b = b.unwrap();
        b.column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec()
    })
    .collect()
}

fn failed(r: &lh_runner::InvokeResult) -> (String, String) {
    match &r.outcome {
        Outcome::Failed { error, traceback } => (error.clone(), traceback.clone()),
        other => panic!("expected a failure, got {other:?}\nlog: {}", r.log),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_failures_and_warm_reuse() {
    let f = fixture().await;
    let limits = Limits::default();
    let (r, out) = call(&f, "identity", InvocationKind::Model, &limits).await;
    assert_eq!(r.outcome, Outcome::Model { rows: 3 }, "log: {}", r.log);
    assert!(r.cold);
    assert_eq!(read(&out), [1, 2, 3]);
    let (r, out) = call(&f, "doubled", InvocationKind::Model, &limits).await;
    assert!(!r.cold, "the second call reuses the warm worker");
    assert_eq!(read(&out), [2, 4, 6]);
    // And call after call: past the kernel's wraps of the SysV id index (every 64 ids
    // on Linux 6.18), which the worker once took for a call's objects, retiring every
    // 63rd call's worker.
    let mut before = r.log;
    for i in 0..140 {
        let (r, _) = call(&f, "identity", InvocationKind::Model, &limits).await;
        assert!(
            !r.cold,
            "call {i} needed a new worker; the one before said:\n{before}"
        );
        before = r.log;
    }

    let (r, _) = call(&f, "raises", InvocationKind::Model, &limits).await;
    let (error, tb) = failed(&r);
    assert_eq!(error, "ZeroDivisionError: division by zero");
    assert!(
        tb.contains("models.py") && tb.contains("return 1 / 0"),
        "{tb}"
    );
    assert!(
        r.log.contains("about to fail"),
        "prints go to the log: {}",
        r.log
    );
    let (r, _) = call(&f, "wrong_type", InvocationKind::Model, &limits).await;
    assert!(failed(&r).0.contains(
        "must return a pyarrow.Table, a pandas or a polars DataFrame, not builtins.list"
    ));

    let (r, _) = call(&f, "expect_positive", InvocationKind::Expectation, &limits).await;
    assert_eq!(
        r.outcome,
        Outcome::Expectation {
            passed: true,
            detail: String::new()
        }
    );

    let (r, _) = call(&f, "exits", InvocationKind::Model, &limits).await;
    assert!(
        failed(&r)
            .0
            .contains("the function's process exited with status 3 without answering"),
        "{:?}",
        r.outcome
    );
    // The pool replaced the dead worker: the next call works.
    let (r, _) = call(&f, "identity", InvocationKind::Model, &limits).await;
    assert_eq!(r.outcome, Outcome::Model { rows: 3 });
    f.rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_memory_limits_stop_the_function() {
    let f = fixture().await;
    let short = Limits {
        timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    let (r, _) = call(&f, "sleeps", InvocationKind::Model, &short).await;
    assert!(
        failed(&r).0.contains("timed out after 2 s"),
        "{:?}",
        r.outcome
    );
    let small = Limits {
        memory_bytes: Some(1 << 30),
        ..Limits::default()
    };
    let (r, _) = call(&f, "hog", InvocationKind::Model, &small).await;
    assert_eq!(failed(&r).0, "MemoryError: ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_hides_the_host_and_the_network() {
    let f = fixture().await;
    // A real listener on loopback: without the sandbox the function would reach it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::fs::write(
        f.code.join("models.py"),
        MODELS.replace(r#"os.environ.get("LH_PORT", "1")"#, &format!("\"{port}\"")),
    )
    .unwrap();
    let limits = Limits::default();
    let (r, _) = call(&f, "network", InvocationKind::Model, &limits).await;
    let (error, _) = failed(&r);
    assert!(
        error.contains("Connection refused") || error.contains("Network is unreachable"),
        "{error}"
    );
    assert!(std::path::Path::new("/root/.bashrc").exists() || std::env::var("HOME").is_ok());
    let (r, _) = call(&f, "reads_host", InvocationKind::Model, &limits).await;
    assert!(
        failed(&r).0.contains("No such file or directory"),
        "{:?}",
        r.outcome
    );
    let (r, _) = call(&f, "writes_env", InvocationKind::Model, &limits).await;
    assert!(
        failed(&r).0.contains("Read-only file system"),
        "{:?}",
        r.outcome
    );
}

/// On a server started as root, a worker runs as a host user of its own (what it writes
/// is that user's), never as root by another name, nor as another worker's user; the
/// environment it runs on stays the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_as_a_host_user_of_its_own() {
    use lh_runner::HostUser;
    use std::os::unix::fs::MetadataExt;
    let f = fixture().await;
    let (r, out) = call(&f, "identity", InvocationKind::Model, &Limits::default()).await;
    assert_eq!(r.outcome, Outcome::Model { rows: 3 }, "log: {}", r.log);
    let server = HostUser::server();
    let owner = std::fs::metadata(&out).unwrap().uid();
    match HostUser::for_sandboxes(HostUser::DEFAULT_ID) {
        Some(first) => {
            assert_eq!(server.uid, 0);
            // A worker's own id, past the first (the builds').
            assert!(
                owner > first.uid && owner < first.uid + HostUser::IDS,
                "the function's output is its worker's host user's: {owner}"
            );
        }
        None => assert_eq!(owner, server.uid),
    }
    let lock = std::fs::metadata(f.env.dir.join("lh-lock.txt")).unwrap();
    assert_eq!((lock.uid(), lock.gid()), (server.uid, server.gid));
}
