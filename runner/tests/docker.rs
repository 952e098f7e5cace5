//! The Docker runtime on a real engine: results, warm reuse, and each guard proven by a
//! function that would escape without it; every test three times: on the local engine
//! (bind mounts), on a remote one that shares no disk with the server (a second dockerd
//! reached over TCP with TLS, `scripts/services.sh docker-remote`), and on an engine
//! reached over SSH (`scripts/services.sh sshd`; the server treats it as another
//! machine's). Needs the engines and the runtime image (`make test` starts them and
//! builds it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use lh_runner::docker::{DockerConfig, DockerRuntime, EngineAddr, connect_to};
use lh_runner::{Env, EnvCache, EnvSpec, Invocation, InvocationKind, Limits, Outcome, Runtime};

const MODELS: &str = r#"
import os, socket, time

def identity(t):
    return t

def raises(t):
    raise RuntimeError("boom")

def network(t):
    socket.create_connection(("10.1.2.3", 80), timeout=3)

def loopback(t):
    socket.create_connection(("127.0.0.1", int(os.environ.get("LH_PORT", "1"))), timeout=2)

def reads_host(t):
    return open(HOST_FILE).read()

def lists_root(t):
    raise RuntimeError(sorted(os.listdir("/lh")))

def prints(t):
    for _ in range(20):
        os.write(2, b"y" * (1 << 20))
    return t

def writes_rootfs(t):
    open("/etc/pwned", "w").write("x")

def writes_code(t):
    open(os.path.join(os.path.dirname(__file__), "pwned"), "w").write("x")

def hog(t):
    chunks = []
    while True:
        chunks.append(bytearray(50_000_000))

def fork_bomb(t):
    while True:
        os.fork()

def sleeps(t):
    time.sleep(120)

def whoami(t):
    raise RuntimeError(f"uid={os.getuid()}")

def answers_for_the_worker(t):
    # The container's first process holds its stdin and stdout.
    for fd in (0, 1):
        try:
            os.open(f"/proc/1/fd/{fd}", os.O_RDWR)
        except OSError as e:
            continue
        raise RuntimeError(f"opened the channel's fd {fd}")
    raise RuntimeError("the channel is out of reach")

def folder():
    import glob
    return glob.glob("/lh/work/inv-*")[0]

def large(t):
    import pyarrow as pa
    return pa.table({"x": pa.array(range(3_000_000), pa.int64())})

def fills_folder(t):
    with open(os.path.join(folder(), "big"), "wb") as f:
        for _ in range(64):
            f.write(b"x" * (1 << 20))
            f.flush()
            time.sleep(0.01)
    return t

def reads_secret(t):
    raise RuntimeError(f"token={os.environ.get('TOKEN')}")

def forges_answer(t):
    # An answer of its own, announcing files, on every descriptor it can find.
    import json
    id = os.path.basename(folder())[len("inv-"):]
    line = json.dumps({"id": id, "ok": True, "rows": 1, "files": [{"path": "x", "size": 5}]}) + "\n"
    for fd in range(3, 64):
        try:
            os.write(fd, line.encode())
        except OSError:
            pass
    os._exit(0)
"#;

struct Fixture {
    dir: tempfile::TempDir,
    rt: Arc<DockerRuntime>,
    env: Env,
    code: PathBuf,
    owner: String,
    engine: Engine,
}

/// The engine a test runs on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Engine {
    Local,
    Remote,
    /// This machine's engine, reached only over SSH (`scripts/services.sh sshd`): the
    /// server treats it as another machine's.
    Ssh,
    /// A third engine like the remote one (`scripts/services.sh docker-spare`), which no
    /// other test of this file uses: its cache volumes may be evicted at any moment.
    Spare,
}

impl Engine {
    fn addr(self) -> EngineAddr {
        /// What `scripts/services.sh SERVICE` exported (make test starts them all).
        fn get(k: &str, service: &str) -> String {
            std::env::var(k).unwrap_or_else(|_| {
                panic!("{k} is not set: `scripts/services.sh {service}` starts it (make test)")
            })
        }
        match self {
            Engine::Local => EngineAddr::default(),
            Engine::Remote => EngineAddr {
                url: Some(get("LH_TEST_DOCKER_REMOTE", "docker-remote")),
                tls: Some(PathBuf::from(get(
                    "LH_TEST_DOCKER_REMOTE_CERTS",
                    "docker-remote",
                ))),
            },
            Engine::Spare => EngineAddr {
                url: Some(get("LH_TEST_DOCKER_SPARE", "docker-spare")),
                tls: Some(PathBuf::from(get(
                    "LH_TEST_DOCKER_SPARE_CERTS",
                    "docker-spare",
                ))),
            },
            Engine::Ssh => EngineAddr {
                url: Some(get("LH_TEST_DOCKER_SSH", "sshd")),
                tls: None,
            },
        }
    }

    /// The docker CLI on this engine: what it printed.
    async fn docker(self, args: &[&str]) -> String {
        let out = tokio::process::Command::new("docker")
            .args(self.cli())
            .args(args)
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// The docker CLI's arguments that reach this engine.
    fn cli(self) -> Vec<String> {
        let addr = self.addr();
        match (addr.url, addr.tls) {
            (Some(url), None) => vec!["--host".into(), url],
            (Some(url), Some(tls)) => vec![
                "--host".into(),
                url,
                "--tlsverify".into(),
                "--tlscacert".into(),
                tls.join("ca.pem").display().to_string(),
                "--tlscert".into(),
                tls.join("cert.pem").display().to_string(),
                "--tlskey".into(),
                tls.join("key.pem").display().to_string(),
            ],
            _ => Vec::new(),
        }
    }
}

/// Every test on both engines.
macro_rules! both_engines {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn local() {
                super::$name(super::Engine::Local).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn remote() {
                super::$name(super::Engine::Remote).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ssh() {
                super::$name(super::Engine::Ssh).await
            }
        }
    )*};
}

both_engines!(
    a_full_pool_hands_its_workers_to_waiting_calls,
    a_call_s_folder_crosses_whole_and_within_its_limit,
    warm_containers_run_one_call_after_another,
    the_container_hides_the_host_and_the_network,
    limits_stop_memory_hogs_fork_bombs_and_hangs,
    a_restarted_server_removes_its_orphans,
);

async fn fixture(engine: Engine) -> Fixture {
    fixture_with(engine, 4).await
}

async fn fixture_with(engine: Engine, max_containers: usize) -> Fixture {
    fixture_full(engine, max_containers, lh_runner::docker::CACHE_IDLE).await
}

async fn fixture_full(engine: Engine, max_containers: usize, cache_idle: Duration) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let envs = std::env::var_os("LH_TEST_ENV_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("lh-test-envs"));
    let (env, _) = EnvCache::new(envs, None, true)
        .get(&EnvSpec {
            python: "3.11".into(),
            packages: BTreeMap::new(),
            source_builds: false,
        })
        .await
        .expect("build the environment (is uv on PATH?)");
    let code = dir.path().join("code");
    std::fs::create_dir_all(code.join("snap")).unwrap();
    // A file only the host has: the function must not see it.
    let secret = dir.path().join("host-secret.txt");
    std::fs::write(&secret, "secret").unwrap();
    let models = format!("HOST_FILE = {:?}\n{MODELS}", secret.display().to_string());
    std::fs::write(code.join("snap/models.py"), models).unwrap();
    let (docker, version) = connect_to(&engine.addr())
        .await
        .expect("a Docker engine (make test starts dockerd)");
    let owner = format!("test-{}", uuid::Uuid::new_v4().simple());
    let rt = DockerRuntime::new(
        docker,
        version,
        DockerConfig {
            image_prefix: "lh-runtime:".into(),
            work_root: dir.path().join("work"),
            idle_timeout: Duration::from_secs(60),
            max_containers,
            owner: owner.clone(),
            pids_limit: 64,
            default_memory: 512 << 20,
            remote: engine != Engine::Local,
            cache_idle,
            sandbox_ids: lh_runner::HostUser::for_sandboxes(lh_runner::HostUser::DEFAULT_ID),
        },
    )
    .await
    .unwrap();
    assert!(
        rt.has_image("3.11").await,
        "the image lh-runtime:3.11 is missing: make images"
    );
    Fixture {
        dir,
        rt,
        env,
        code,
        owner,
        engine,
    }
}

fn input(dir: &Path) -> PathBuf {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
    )
    .unwrap();
    let p = dir.join("in.arrow");
    let mut w =
        arrow::ipc::writer::FileWriter::try_new(std::fs::File::create(&p).unwrap(), &schema)
            .unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    p
}

async fn call(f: &Fixture, function: &str, limits: &Limits) -> lh_runner::InvokeResult {
    call_with(f, function, limits, Default::default()).await.0
}

/// A call with secrets; its result and its folder.
async fn call_with(
    f: &Fixture,
    function: &str,
    limits: &Limits,
    secrets: lh_runner::SecretEnv,
) -> (lh_runner::InvokeResult, PathBuf) {
    let id = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let work = f.dir.path().join(format!("inv-{id}"));
    std::fs::create_dir_all(&work).unwrap();
    let inp = input(&work);
    let inv = Invocation {
        id,
        kind: InvocationKind::Model,
        file: f.code.join("snap/models.py"),
        function: function.into(),
        root: f.code.join("snap"),
        inputs: BTreeMap::from([("t".to_string(), inp)]),
        params: BTreeMap::new(),
        output: work.join("out.parquet"),
        env: secrets,
        live: None,
        tenant: String::new(),
    };
    (f.rt.invoke(&f.env, limits, &work, inv).await.unwrap(), work)
}

fn error(r: &lh_runner::InvokeResult) -> String {
    match &r.outcome {
        Outcome::Failed { error, .. } => error.clone(),
        other => panic!("expected a failure, got {other:?}\n{}", r.log),
    }
}

async fn owned_containers(engine: Engine, owner: &str) -> usize {
    let filter = format!("label=lh.owner={owner}");
    engine
        .docker(&["ps", "-aq", "--filter", &filter])
        .await
        .lines()
        .count()
}

async fn warm_containers_run_one_call_after_another(engine: Engine) {
    let f = fixture(engine).await;
    let limits = Limits {
        memory_bytes: Some(512 << 20),
        ..Limits::default()
    };
    let r = call(&f, "identity", &limits).await;
    assert_eq!(r.outcome, Outcome::Model { rows: 3 }, "{}", r.log);
    assert!(r.cold);
    let r = call(&f, "identity", &limits).await;
    assert!(!r.cold, "the second call reuses the warm container");
    // And call after call, past the kernel's wraps of the SysV id index (see the
    // process runtime's test).
    let mut before = r.log;
    for i in 0..140 {
        let r = call(&f, "identity", &limits).await;
        assert!(
            !r.cold,
            "call {i} needed a new worker; the one before said:\n{before}"
        );
        before = r.log;
    }
    let r = call(&f, "raises", &limits).await;
    assert_eq!(error(&r), "RuntimeError: boom");
    // Not root: a host id of the container's own (past the first, the builds'), or
    // uid 1000 where the server leases none.
    let who = error(&call(&f, "whoami", &limits).await);
    let uid: u32 = who
        .trim_start_matches("RuntimeError: uid=")
        .parse()
        .unwrap_or_else(|_| panic!("{who}"));
    match lh_runner::HostUser::for_sandboxes(lh_runner::HostUser::DEFAULT_ID) {
        Some(first) => assert!(
            uid > first.uid && uid < first.uid + lh_runner::HostUser::IDS,
            "{who}"
        ),
        None => assert_eq!(uid, 1000, "{who}"),
    }

    // A warm container killed between calls costs a retry, not a failure.
    let out = tokio::process::Command::new("docker")
        .args(f.engine.cli())
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=lh.owner={}", f.owner),
        ])
        .output()
        .await
        .unwrap();
    for id in String::from_utf8_lossy(&out.stdout).lines() {
        tokio::process::Command::new("docker")
            .args(f.engine.cli())
            .args(["kill", id])
            .output()
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = call(&f, "identity", &limits).await;
    assert_eq!(r.outcome, Outcome::Model { rows: 3 }, "{}", r.log);

    // Nothing is left once the runtime stops.
    assert!(owned_containers(f.engine, &f.owner).await > 0);
    f.rt.shutdown().await;
    assert_eq!(owned_containers(f.engine, &f.owner).await, 0);
}

/// More calls at once than the pool may have containers, of two kinds: each waits for a
/// warm worker of its kind or for a slot an idle one of the other kind gives up.
async fn a_full_pool_hands_its_workers_to_waiting_calls(engine: Engine) {
    let f = fixture_with(engine, 1).await;
    let small = Limits {
        memory_bytes: Some(256 << 20),
        ..Limits::default()
    };
    let other = Limits {
        memory_bytes: Some(300 << 20),
        ..Limits::default()
    };
    let calls: Vec<_> = (0..6)
        .map(|i| call(&f, "identity", if i % 2 == 0 { &small } else { &other }))
        .collect();
    let done = tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(calls))
        .await
        .expect("every call got a worker");
    for r in done {
        assert_eq!(r.outcome, Outcome::Model { rows: 3 }, "{}", r.log);
    }
    assert!(owned_containers(f.engine, &f.owner).await <= 1);
    f.rt.shutdown().await;
}

async fn a_call_s_folder_crosses_whole_and_within_its_limit(engine: Engine) {
    let f = fixture(engine).await;
    let limits = Limits {
        memory_bytes: Some(512 << 20),
        disk_bytes: Some(64 << 20),
        ..Limits::default()
    };
    // A large output comes back whole.
    let (r, work) = call_with(&f, "large", &limits, Default::default()).await;
    assert_eq!(r.outcome, Outcome::Model { rows: 3_000_000 }, "{}", r.log);
    let out = std::fs::read(work.join("out.parquet")).unwrap();
    assert!(
        out.len() > 1 << 20 && out.starts_with(b"PAR1") && out.ends_with(b"PAR1"),
        "a whole Parquet file of {} bytes",
        out.len()
    );
    // The call's secrets reach it, and leave this host's disk.
    let secrets = lh_runner::SecretEnv(BTreeMap::from([("TOKEN".into(), "s3cr3t".into())]));
    let (r, work) = call_with(&f, "reads_secret", &limits, secrets).await;
    assert_eq!(error(&r), "RuntimeError: token=s3cr3t");
    assert!(!work.join("secrets.json").exists());
    // An answer forged by the function, announcing files, is not taken for the
    // worker's: the channel stays in step and the warm worker serves the next call.
    let r = call(&f, "forges_answer", &limits).await;
    assert!(!r.cold);
    let r = call(&f, "identity", &limits).await;
    assert_eq!(r.outcome, Outcome::Model { rows: 3 }, "{}", r.log);
    assert!(!r.cold, "the same warm worker");
    // Past the disk limit, the call is stopped (measured here), its file is too large
    // (a container's largest file is its limit), or its folder is full (the engine's
    // volume has the limit's size).
    let small = Limits {
        disk_bytes: Some(16 << 20),
        ..limits.clone()
    };
    let e = error(&call(&f, "fills_folder", &small).await);
    assert!(
        e.contains("more than 16 MiB")
            || e.contains("File too large")
            || e.contains("No space left"),
        "{e}"
    );
    f.rt.shutdown().await;
}

async fn the_container_hides_the_host_and_the_network(engine: Engine) {
    let f = fixture(engine).await;
    let limits = Limits {
        memory_bytes: Some(512 << 20),
        ..Limits::default()
    };
    let e = error(&call(&f, "network", &limits).await);
    assert!(e.contains("Network is unreachable"), "{e}");
    let e = error(&call(&f, "reads_host", &limits).await);
    assert!(e.contains("No such file or directory"), "{e}");
    let e = error(&call(&f, "lists_root", &limits).await);
    assert_eq!(e, "RuntimeError: ['code', 'env', 'work']");
    let e = error(&call(&f, "writes_rootfs", &limits).await);
    assert!(
        e.contains("Read-only file system") || e.contains("Permission denied"),
        "{e}"
    );
    let e = error(&call(&f, "writes_code", &limits).await);
    assert!(e.contains("Read-only file system"), "{e}");
    let e = error(&call(&f, "answers_for_the_worker", &limits).await);
    assert_eq!(e, "RuntimeError: the channel is out of reach");
    // What a call prints reaches lh's bounded tail only: the engine keeps no log of a
    // container (its json-file log grew without bound on the engine's disk).
    let printed = call(&f, "prints", &limits).await;
    assert!(
        matches!(printed.outcome, lh_runner::Outcome::Model { .. }),
        "{:?}",
        printed.outcome
    );
    let filter = format!("label=lh.owner={}", f.owner);
    let ids = engine.docker(&["ps", "-q", "--filter", &filter]).await;
    assert!(!ids.trim().is_empty());
    for id in ids.lines() {
        let logs = engine
            .docker(&[
                "inspect",
                "-f",
                "{{.HostConfig.LogConfig.Type}}|{{.LogPath}}",
                id,
            ])
            .await;
        assert_eq!(logs.trim(), "none|", "{id}");
    }
    if engine != Engine::Local {
        // Nothing of this host is mounted: the environment, the code and the call's
        // folder are volumes of the engine, and the server's folders for the
        // containers stay empty (the call's files went over the wire).
        let out = tokio::process::Command::new("docker")
            .args(engine.cli())
            .args([
                "ps",
                "-q",
                "--filter",
                &format!("label=lh.owner={}", f.owner),
            ])
            .output()
            .await
            .unwrap();
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        assert!(!ids.is_empty());
        for id in ids {
            let out = tokio::process::Command::new("docker")
                .args(engine.cli())
                .args(["inspect", "-f", "{{json .Mounts}}", &id])
                .output()
                .await
                .unwrap();
            let mounts: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("mounts as JSON");
            let mounts = mounts.as_array().unwrap();
            assert_eq!(mounts.len(), 3, "{mounts:?}");
            assert!(mounts.iter().all(|m| m["Type"] == "volume"), "{mounts:?}");
        }
        for d in std::fs::read_dir(f.dir.path().join("work")).unwrap() {
            let d = d.unwrap().path();
            assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0, "{}", d.display());
        }
    }
    f.rt.shutdown().await;
}

async fn limits_stop_memory_hogs_fork_bombs_and_hangs(engine: Engine) {
    let f = fixture(engine).await;
    let small = Limits {
        memory_bytes: Some(300 << 20),
        ..Limits::default()
    };
    let e = error(&call(&f, "hog", &small).await);
    assert!(
        e.contains("out of memory") || e.contains("MemoryError"),
        "{e}"
    );
    let r = call(&f, "fork_bomb", &small).await;
    let e = error(&r);
    assert!(
        e.contains("Resource temporarily unavailable")
            || e.contains("BlockingIOError")
            || e.contains("died"),
        "{e}"
    );
    let short = Limits {
        timeout: Duration::from_secs(2),
        memory_bytes: Some(300 << 20),
        ..Limits::default()
    };
    let e = error(&call(&f, "sleeps", &short).await);
    assert!(e.contains("timed out after 2 s"), "{e}");
    // The pool still works after all that.
    assert_eq!(
        call(&f, "identity", &small).await.outcome,
        Outcome::Model { rows: 3 }
    );
    f.rt.shutdown().await;
    assert_eq!(owned_containers(f.engine, &f.owner).await, 0);
}

async fn a_restarted_server_removes_its_orphans(engine: Engine) {
    let f = fixture(engine).await;
    let limits = Limits {
        memory_bytes: Some(256 << 20),
        ..Limits::default()
    };
    call(&f, "identity", &limits).await;
    assert_eq!(owned_containers(f.engine, &f.owner).await, 1);
    // A "crash": the runtime is dropped without shutting down, the container stays.
    let owner = f.owner.clone();
    let work = f.dir.path().join("work2");
    drop(f.rt);
    assert_eq!(owned_containers(engine, &owner).await, 1);
    let (docker, version) = connect_to(&engine.addr()).await.unwrap();
    let again = DockerRuntime::new(
        docker,
        version,
        DockerConfig {
            image_prefix: "lh-runtime:".into(),
            work_root: work,
            idle_timeout: Duration::from_secs(60),
            max_containers: 4,
            owner: owner.clone(),
            pids_limit: 64,
            default_memory: 256 << 20,
            remote: engine != Engine::Local,
            cache_idle: lh_runner::docker::CACHE_IDLE,
            sandbox_ids: lh_runner::HostUser::for_sandboxes(lh_runner::HostUser::DEFAULT_ID),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        owned_containers(engine, &owner).await,
        0,
        "the new runtime removed the orphan"
    );
    again.shutdown().await;
}

/// Two servers sharing a remote engine start workers for the same code at once: each
/// fills a cache volume of its own, one is published, both use it, and the other is
/// removed (a volume partly filled is never used).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_fill_one_cache_volume_on_a_shared_engine() {
    let a = fixture(Engine::Remote).await;
    let (docker, version) = connect_to(&Engine::Remote.addr()).await.unwrap();
    let b_rt = DockerRuntime::new(
        docker,
        version,
        DockerConfig {
            image_prefix: "lh-runtime:".into(),
            work_root: a.dir.path().join("work-b"),
            idle_timeout: Duration::from_secs(60),
            max_containers: 4,
            owner: format!("test-{}", uuid::Uuid::new_v4().simple()),
            pids_limit: 64,
            default_memory: 512 << 20,
            remote: true,
            cache_idle: lh_runner::docker::CACHE_IDLE,
            sandbox_ids: lh_runner::HostUser::for_sandboxes(lh_runner::HostUser::DEFAULT_ID),
        },
    )
    .await
    .unwrap();
    let b = Fixture {
        dir: tempfile::tempdir().unwrap(),
        rt: b_rt,
        env: a.env.clone(),
        code: a.code.clone(),
        owner: String::new(),
        engine: Engine::Remote,
    };
    let limits = Limits {
        memory_bytes: Some(512 << 20),
        ..Limits::default()
    };
    let (ra, rb) = tokio::join!(call(&a, "identity", &limits), call(&b, "identity", &limits));
    assert_eq!(ra.outcome, Outcome::Model { rows: 3 }, "{}", ra.log);
    assert_eq!(rb.outcome, Outcome::Model { rows: 3 }, "{}", rb.log);
    // The code snapshot's volumes on the engine: one published, none left over.
    let key = blake3_code_key(&a.code.join("snap"));
    let out = tokio::process::Command::new("docker")
        .args(Engine::Remote.cli())
        .args([
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=lh.cache=lh-code-{key}"),
        ])
        .output()
        .await
        .unwrap();
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(names.len(), 2, "one volume and its marker: {names:?}");
    a.rt.shutdown().await;
    b.rt.shutdown().await;
}

/// The key part of a code snapshot's cache volume (as the launcher names it).
fn blake3_code_key(code: &Path) -> String {
    blake3::hash(code.display().to_string().as_bytes()).to_hex()[..32].to_string()
}

/// A remote engine's cache volumes (the environment, the code snapshot, their markers)
/// that this server has not used for `cache_idle` go, unless a container uses them; a
/// later call fills them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_cache_volumes_leave_the_engine() {
    // The spare engine is this test's alone here: containers left on it (by a test
    // stopped halfway) would hold volumes.
    for id in Engine::Spare.docker(&["ps", "-aq"]).await.lines() {
        Engine::Spare.docker(&["rm", "-f", id]).await;
    }
    let f = fixture_full(Engine::Spare, 4, Duration::ZERO).await;
    let limits = Limits {
        memory_bytes: Some(256 << 20),
        ..Limits::default()
    };
    let cache = || async {
        let out = Engine::Spare
            .docker(&["volume", "ls", "-q", "--filter", "label=lh.cache"])
            .await;
        out.lines().map(String::from).collect::<Vec<_>>()
    };
    let r = call(&f, "identity", &limits).await;
    assert_eq!(r.outcome, Outcome::Model { rows: 3 }, "{}", r.log);
    // The cache volumes the warm container mounts, and their markers.
    let out = tokio::process::Command::new("docker")
        .args(Engine::Spare.cli())
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=lh.owner={}", f.owner),
        ])
        .output()
        .await
        .unwrap();
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = tokio::process::Command::new("docker")
        .args(Engine::Spare.cli())
        .args(["inspect", "-f", "{{range .Mounts}}{{.Name}} {{end}}", &id])
        .output()
        .await
        .unwrap();
    let mut before = Vec::new();
    for name in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if let Some(key) = name
            .strip_prefix("lh-env-")
            .or(name.strip_prefix("lh-code-"))
        {
            let kind = &name[..name.len() - key.len()];
            let (hash, _) = key.split_once('-').unwrap();
            before.push(name.to_string());
            before.push(format!("{kind}{hash}.ready"));
        }
    }
    assert_eq!(before.len(), 4, "two volumes and their markers: {before:?}");
    let all = cache().await;
    for v in &before {
        assert!(all.contains(v), "{v} is listed: {all:?}");
    }
    // In use by the warm container: kept, with their markers.
    f.rt.launcher().evict_cache().await;
    let kept = cache().await;
    for v in &before {
        assert!(kept.contains(v), "{v} was in use");
    }
    // Unused: gone.
    f.rt.shutdown().await;
    assert!(f.rt.launcher().evict_cache().await >= 2);
    let after = cache().await;
    for v in &before {
        assert!(!after.contains(v), "{v} is left");
    }
    let r = call(&f, "identity", &limits).await;
    assert_eq!(r.outcome, Outcome::Model { rows: 3 }, "{}", r.log);
    f.rt.shutdown().await;
}

/// An engine address lh cannot use safely or at all is refused before any request: an
/// unknown scheme, TCP without TLS, a port in an ssh:// URL (ssh would take it for part
/// of the host name).
#[tokio::test]
async fn bad_engine_addresses_are_refused_with_the_way_out() {
    for (url, says) in [
        ("ftp://nowhere", "unsupported Docker host"),
        ("tcp://127.0.0.1:1", "needs TLS: give --docker-tls DIR"),
        (
            "ssh://me@builder:2222",
            "name the engine's machine in a Host entry",
        ),
    ] {
        let addr = EngineAddr {
            url: Some(url.into()),
            tls: None,
        };
        let err = connect_to(&addr).await.unwrap_err().to_string();
        assert!(err.contains(says), "{url}: {err}");
    }
}
