//! A team's deployment: two `lh server` processes on one PostgreSQL catalog and one
//! warehouse, requests sent to either (no sticky sessions), and servers killed while
//! they drive runs.

use std::time::{Duration, Instant};

use lh_e2e::{Lh, Server};
use serde_json::{Value, json};

use crate::runs::{env_cache, node, project};

const PROJECT: &str =
    "name: trial\nnamespace: t\npython: \"3.11\"\nparameters:\n  trial: {type: int, default: 0}\n";

/// A pipeline that takes about three seconds: a Python model, an appending Python
/// model (published twice, it would hold its rows twice), a SQL model and an
/// expectation.
const MODELS: &str = r#"
import time
import lh
import pyarrow as pa
import pyarrow.compute as pc

@lh.model()
def base(t=lh.Model("raw.t"), trial=lh.Parameter("trial")):
    time.sleep(1.0)
    return t.append_column("trial", pa.array([trial] * t.num_rows, pa.int64()))

@lh.model(materialize="append")
def history(base=lh.Model("base")):
    time.sleep(1.0)
    return base

@lh.expectation()
def all_rows(base=lh.Model("base", columns=["id"])):
    return base.num_rows == 100
"#;

fn team(extra: &[&str]) -> Server {
    let cache = env_cache();
    let mut args = vec![
        "--env-cache",
        cache.as_str(),
        "--runtime",
        "process",
        "--run-lease",
        "2s",
    ];
    args.extend_from_slice(extra);
    Server::team(&args, &[])
}

fn seed(lh: &Lh) {
    let mut csv = String::from("id,v\n");
    for i in 0..100 {
        csv.push_str(&format!("{i},{}\n", i * 3));
    }
    let f = lh.file("t.csv", &csv);
    lh.run(&["table", "import", "raw.t", f.to_str().unwrap()])
        .ok();
}

fn show(lh: &Lh, id: &str) -> Value {
    serde_json::from_str(lh.run(&["runs", "show", id, "-o", "json"]).ok()).unwrap()
}

/// Waits (at most `limit`) for run `id` to end; its record.
fn wait_end(lh: &Lh, id: &str, limit: Duration) -> Value {
    let start = Instant::now();
    loop {
        let r = show(lh, id);
        if r["status"] != "running" {
            return r;
        }
        assert!(
            start.elapsed() < limit,
            "run {id} still running after {limit:?}: {r:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The commits of `main` that publish run `id`.
fn publishes(lh: &Lh, id: &str) -> usize {
    let log: Value =
        serde_json::from_str(lh.run(&["log", "main", "-n", "1000", "-o", "json"]).ok()).unwrap();
    log.as_array()
        .unwrap()
        .iter()
        .filter(|c| c["properties"]["lh.run"] == id)
        .count()
}

/// What `scripts/services.sh SERVICE` exported (make test starts every service): a
/// missing one fails the test.
fn service_env(k: &str, service: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| {
        panic!("{k} is not set: `scripts/services.sh {service}` starts it (make test does)")
    })
}

fn http(server: &Server) -> ureq::Agent {
    let _ = server;
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// An upload taken by one server is imported by the other; a run started on one is
/// cancelled from the other; a run's code reaches a server that never saw it (a replay
/// there); a third server with another secret key refuses to start.
#[test]
fn two_servers_serve_one_team_without_sticky_sessions() {
    let server = team(&[]);
    let (a, b) = (server.lh_on(0), server.lh_on(1));
    let urls = server.urls();
    let auth = format!("Bearer {}", server.token());
    let agent = http(&server);

    // Upload to the first, import on the second.
    let mut resp = agent
        .post(&format!("{}/api/v1/uploads?name=o.csv", urls[0]))
        .header("Authorization", &auth)
        .send("id,amount\n1,10\n2,20\n3,30\n")
        .unwrap();
    assert_eq!(resp.status(), 201);
    let up: Value = resp.body_mut().read_json().unwrap();
    let mut resp = agent
        .post(&format!("{}/api/v1/tables/raw.orders/import", urls[1]))
        .header("Authorization", &auth)
        .send_json(json!({"ref": "main", "mode": "create", "uploads": [up["id"]]}))
        .unwrap();
    let body = resp.body_mut().read_to_string().unwrap();
    assert_eq!(resp.status(), 200, "{body}");
    assert_eq!(
        a.rows("select sum(amount) as s from raw.orders", "main")[0]["s"],
        60
    );
    // The upload is gone once imported, on every server.
    let mut resp = agent
        .post(&format!("{}/api/v1/tables/raw.again/import", urls[0]))
        .header("Authorization", &auth)
        .send_json(json!({"ref": "main", "mode": "create", "uploads": [up["id"]]}))
        .unwrap();
    assert_eq!(
        resp.status(),
        404,
        "{}",
        resp.body_mut().read_to_string().unwrap()
    );

    // A run started on the first, cancelled from the second.
    seed(&a);
    let dir = project(
        &a,
        "slow",
        &[
            ("lh_project.yml", PROJECT),
            (
                "models.py",
                "import time\nimport lh\n\n@lh.model()\ndef slow(t=lh.Model(\"raw.t\")):\n    time.sleep(120)\n    return t\n",
            ),
        ],
    );
    let before = a.head("main");
    let id = crate::runs::start_until_running(&a, &dir);
    let out = b.run(&["runs", "cancel", &id[..12]]);
    out.ok();
    let r = wait_end(&b, &id, Duration::from_secs(30));
    assert_eq!(r["status"], "cancelled", "{r:#}");
    assert_eq!(a.head("main"), before);

    // A run on the first, replayed on the second (which unpacks its code from the
    // warehouse).
    let dir = project(
        &a,
        "p",
        &[("lh_project.yml", PROJECT), ("models.py", MODELS)],
    );
    let run = a.run(&["run", dir.to_str().unwrap(), "-o", "json"]);
    let first: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|_| panic!("{}", run.stderr));
    assert_eq!(first["status"], "succeeded", "{first:#}");
    let id = first["id"].as_str().unwrap();
    let again = b.run(&["rerun", &id[..12], "-o", "json"]);
    let again: Value =
        serde_json::from_str(&again.stdout).unwrap_or_else(|_| panic!("{}", again.stderr));
    assert_eq!(again["status"], "succeeded", "{again:#}");
    assert_eq!(again["code_hash"], first["code_hash"]);
    assert_eq!(node(&again, "t.base")["status"], "cached");

    // A server with a key of its own would seal secrets no other can open.
    let catalog = server.catalog_url().expect("a PostgreSQL catalog");
    let other = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(lh_e2e::lh_bin())
        .args(["server", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(other.path().join("data"))
        .args(["--catalog", &catalog, "--runtime", "process"])
        .env("LH_HOME", other.path().join("home"))
        .env_remove("LH_SECRET_KEY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("is not the one the servers of this catalog seal secrets with"),
        "{err}"
    );
}

/// A small deterministic generator of the kill delays (the seed is in the failure
/// message, to replay a trial).
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// How a trial stops the server driving a run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// SIGKILL, as a crash.
    Kill,
    /// SIGSTOP for longer than the lease, then SIGCONT: a server that comes back
    /// after another took its run over must stop, and write and publish nothing.
    Pause,
    /// SIGTERM: a clean stop gives its runs back at once.
    Term,
}

/// Checks how run `id` of trial `trial` ended, seen from `lh`: published exactly once
/// (its appended rows once) or not at all; true when it was published.
fn check_end(lh: &Lh, id: &str, trial: usize, context: &str) -> (bool, Value) {
    let r = wait_end(lh, id, Duration::from_secs(90));
    let rows = lh.rows(
        &format!("select count(*) as n from t.history where trial = {trial}"),
        "main",
    )[0]["n"]
        .as_i64()
        .unwrap();
    let published = r["status"] == "succeeded";
    if published {
        assert_eq!(publishes(lh, id), 1, "{context}: {r:#}");
        assert_eq!(rows, 100, "{context}: the appended rows, once: {r:#}");
        assert!(r["merge_commit"].is_string(), "{context}: {r:#}");
    } else {
        assert_eq!(publishes(lh, id), 0, "{context}: {r:#}");
        assert_eq!(rows, 0, "{context}: {r:#}");
        assert!(r["error"].is_string(), "{context}: {r:#}");
    }
    // No node is left running in a run that ended.
    for n in r["nodes"].as_array().unwrap() {
        assert!(
            n["status"] != "running" && n["status"] != "waiting",
            "{context}: {r:#}"
        );
    }
    // The run's branch is gone once published; kept (until its TTL) otherwise.
    let branches = lh.run(&["branch", "ls", "--all"]).ok().to_string();
    // (A server stopped between recording the run and making its branch leaves a run
    // that fails for its branch being gone, before anything ran.)
    let never_branched = r["error"]
        .as_str()
        .is_some_and(|e| e.contains("its branch") && e.contains("is gone"));
    assert_eq!(
        branches.contains(&format!("run/{id}")),
        !published && !never_branched,
        "{context}: {branches}\n{r:#}"
    );
    (published, r)
}

/// The server driving a run is stopped at a random moment (while planning, mid-node,
/// between outputs and publish, mid-merge) by SIGKILL, SIGSTOP beyond its lease, or
/// SIGTERM, trial after trial: the other server takes the run over, and every run ends
/// published exactly once (its appended rows once) or not at all with `main` untouched
/// by it.
#[test]
fn a_run_survives_the_server_driving_it_being_killed() {
    let mut server = team(&[]);
    seed(&server.lh_on(0));
    let dir = project(
        &server.lh_on(0),
        "p",
        &[("lh_project.yml", PROJECT), ("models.py", MODELS)],
    );
    let d = dir.to_str().unwrap().to_string();
    // Warm: the environment is built once, before the trials.
    let warm = server.lh_on(0).run(&["run", &d, "--param", "trial=0"]);
    warm.ok();
    let mut rng: u64 = std::env::var("LH_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    let seed0 = rng;
    let faults = [Fault::Kill, Fault::Pause, Fault::Kill, Fault::Term];
    let trials = 12;
    let (mut published, mut failed, mut never_started) = (0, 0, 0);
    let (mut taken_over, mut taken_over_published) = (0, 0);
    for trial in 1..=trials {
        let driver = trial % 2;
        let fault = faults[trial % faults.len()];
        let (lh, other) = (server.lh_on(driver), server.lh_on(1 - driver));
        // Up to 4 s: the run takes about 3 s after its plan.
        let delay = Duration::from_millis(next(&mut rng) % 4000);
        let mut cmd = lh.command(&["run", &d, "--detach", "--param", &format!("trial={trial}")]);
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let pid = server.pid(driver).to_string();
        match fault {
            Fault::Kill => server.kill_one(driver),
            Fault::Term => {
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid])
                    .status();
                server.wait_one(driver);
            }
            Fault::Pause => {
                let _ = std::process::Command::new("kill")
                    .args(["-STOP", &pid])
                    .status();
            }
        }
        let context = format!("trial {trial} (seed {seed0}), {fault:?} after {delay:?}");
        if fault == Fault::Pause {
            // Beyond the lease (2 s): the other server takes the run over meanwhile.
            std::thread::sleep(Duration::from_secs(5));
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid])
                .status();
        }
        let out = child.wait_with_output().unwrap();
        let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // The run of this trial, if it was recorded (the answer may have been lost).
        let id = if out.status.success() {
            printed
        } else {
            let runs: Value =
                serde_json::from_str(other.run(&["runs", "ls", "-o", "json"]).ok()).unwrap();
            match runs
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["params"]["trial"] == trial)
            {
                Some(r) => r["id"].as_str().unwrap().to_string(),
                None => {
                    never_started += 1;
                    eprintln!("{context}: never recorded");
                    if fault != Fault::Pause {
                        server.restart_one(driver);
                    }
                    continue;
                }
            }
        };
        assert_eq!(id.len(), 32, "{context}: {id}");
        let (ok, r) = check_end(&other, &id, trial, &context);
        let took = server
            .log()
            .lines()
            .any(|l| l.contains("taking over a run") && l.contains(&id));
        published += ok as usize;
        failed += !ok as usize;
        taken_over += took as usize;
        taken_over_published += (took && ok) as usize;
        eprintln!(
            "{context}: {}, taken over: {took}{}",
            r["status"],
            r["error"]
                .as_str()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
        if fault != Fault::Pause {
            server.restart_one(driver);
        }
    }
    eprintln!(
        "{trials} trials: {published} published, {failed} failed, {never_started} never recorded, {taken_over} taken over ({taken_over_published} of them published)"
    );
    assert!(
        taken_over >= 3 && taken_over_published >= 2,
        "most stops should land while the run goes on, and runs taken over should publish"
    );
    // Every ref is whole: every object reachable from every ref reads and checks.
    let fsck = std::process::Command::new(lh_e2e::lh_bin().with_file_name("lh-catalog-tool"))
        .args(["fsck", &server.catalog_url().unwrap()])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
}

/// PostgreSQL restarted (as after a crash, and cleanly) while commits go on: a
/// command that failed says so clearly, commands succeed again once the database is
/// back, and no acknowledged commit is lost (every acknowledged branch exists, every
/// acknowledged append's rows are there, and an append that failed at most maybe).
#[test]
fn a_postgres_restart_during_commits_loses_no_acknowledged_commit() {
    let pg = lh_e2e::OwnPostgres::start();
    let server = Server::start_with(&["--catalog", &pg.url(), "--runtime", "process"]);
    let lh = server.lh();
    let rows = lh.file("five.csv", "id,v\n1,1\n2,2\n3,3\n4,4\n5,5\n");
    let rows = rows.to_str().unwrap().to_string();
    lh.run(&["table", "import", "raw.t", &rows]).ok();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (lh, stop, rows) = (lh.clone(), stop.clone(), rows.clone());
        std::thread::spawn(move || {
            let mut results = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let branch = format!("b{i}");
                let created = lh.run(&["branch", "create", &branch]);
                results.push(("branch", branch, created));
                let appended = lh.run(&["table", "import", "raw.t", &rows, "--mode", "append"]);
                results.push(("append", String::new(), appended));
                i += 1;
            }
            results
        })
    };
    // Restarts as after a crash (connections cut mid-transaction) and clean ones; a
    // request waits for the database to come back (its pool reconnects), or fails.
    for mode in ["immediate", "fast", "immediate", "immediate"] {
        std::thread::sleep(Duration::from_millis(800));
        pg.ctl(&["restart", "-m", mode, "-w"]);
    }
    std::thread::sleep(Duration::from_millis(800));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let results = writer.join().unwrap();

    let failed: Vec<_> = results.iter().filter(|(_, _, r)| r.code != 0).collect();
    let acked_appends = results
        .iter()
        .filter(|(k, _, r)| *k == "append" && r.code == 0)
        .count() as i64;
    let failed_appends = results
        .iter()
        .filter(|(k, _, r)| *k == "append" && r.code != 0)
        .count() as i64;
    eprintln!(
        "{} commands, {} failed while PostgreSQL restarted",
        results.len(),
        failed.len()
    );
    for (_, _, r) in &failed {
        eprintln!("  {}", r.stderr.trim());
        assert!(
            r.stderr.starts_with("error: ") && !r.stderr.contains("panicked"),
            "{}",
            r.stderr
        );
    }
    // The database is back: commands succeed again.
    lh.run(&["branch", "create", "after"]).ok();
    let branches = lh.run(&["branch", "ls"]).ok().to_string();
    for (kind, branch, r) in &results {
        if *kind == "branch" && r.code == 0 {
            assert!(
                branches
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(branch)),
                "acknowledged branch {branch} is lost:\n{branches}"
            );
        }
    }
    let n = lh.rows("select count(*) as n from raw.t", "main")[0]["n"]
        .as_i64()
        .unwrap();
    assert!(
        n >= 5 + 5 * acked_appends && n <= 5 + 5 * (acked_appends + failed_appends),
        "{n} rows after {acked_appends} acknowledged and {failed_appends} failed appends"
    );
    assert!(acked_appends > 0);
}

/// Functions run on a Docker engine that shares no disk with the server (a second
/// dockerd, reached only by its URL over TLS): the environment and the code reach it as
/// volumes it keeps, inputs and outputs as archives over its API; a run publishes as on
/// the local engine, and a second run reuses the warm container.
#[test]
fn functions_run_on_a_docker_engine_that_shares_no_disk() {
    let (host, certs) = (
        service_env("LH_TEST_DOCKER_REMOTE", "docker-remote"),
        service_env("LH_TEST_DOCKER_REMOTE_CERTS", "docker-remote"),
    );
    let cache = env_cache();
    let server = Server::start_with(&[
        "--env-cache",
        &cache,
        "--runtime",
        "docker",
        "--docker-host",
        &host,
        "--docker-tls",
        &certs,
    ]);
    let lh = server.lh();
    let info: Value = serde_json::from_str(lh.run(&["info", "-o", "json"]).ok()).unwrap();
    let runtime = info["server"]["runtime"].as_str().unwrap().to_string();
    assert!(runtime.contains("remote: no shared disk"), "{runtime}");
    seed(&lh);
    let dir = project(
        &lh,
        "p",
        &[("lh_project.yml", PROJECT), ("models.py", MODELS)],
    );
    let d = dir.to_str().unwrap();
    for trial in [1, 2] {
        let run = lh.run(&["run", d, "--param", &format!("trial={trial}"), "-o", "json"]);
        let r: Value =
            serde_json::from_str(&run.stdout).unwrap_or_else(|_| panic!("{}", run.stderr));
        assert_eq!(r["status"], "succeeded", "{r:#}");
        assert_eq!(node(&r, "t.base")["rows"], 100, "{r:#}");
        assert_eq!(node(&r, "all_rows")["status"], "passed", "{r:#}");
    }
    assert_eq!(
        lh.rows("select count(*) as n from t.history", "main")[0]["n"],
        200
    );
    // A bad engine address is a clear error at start.
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(lh_e2e::lh_bin())
        .args(["server", "--bind", "127.0.0.1:0", "--runtime", "docker"])
        .args(["--docker-host", "ftp://nowhere", "--data-dir"])
        .arg(tmp.path().join("data"))
        .env("LH_HOME", tmp.path().join("home"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unsupported Docker host 'ftp://nowhere'"),
        "{err}"
    );
    // An engine over TCP without TLS: inputs and secrets would cross in the clear.
    let out = std::process::Command::new(lh_e2e::lh_bin())
        .args(["server", "--bind", "127.0.0.1:0", "--runtime", "docker"])
        .args(["--docker-host", &host, "--data-dir"])
        .arg(tmp.path().join("data2"))
        .env("LH_HOME", tmp.path().join("home"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs TLS: give --docker-tls DIR"), "{err}");
}

/// Two models of about four seconds each, side by side.
const SLOW: &str = r#"
import time
import lh

@lh.model()
def left(t=lh.Model("raw.t")):
    time.sleep(4)
    return t

@lh.model()
def right(t=lh.Model("raw.t")):
    time.sleep(4)
    return t
"#;

/// Functions on two engines: a call goes to each; the engine running one of them is
/// SIGKILLed mid-call; the call is run once more on the other engine and the run
/// publishes whole; the dead engine is out of placement (a clear line in `lh info`)
/// until it answers again, then takes calls again.
#[test]
fn a_docker_engine_killed_mid_call_loses_no_run() {
    let (spare, certs, pidfile) = (
        service_env("LH_TEST_DOCKER_SPARE", "docker-spare"),
        service_env("LH_TEST_DOCKER_SPARE_CERTS", "docker-spare"),
        service_env("LH_TEST_DOCKER_SPARE_PID", "docker-spare"),
    );
    let spare_cli = |args: &[&str]| -> String {
        let out = std::process::Command::new("docker")
            .args(["--host", &spare, "--tlsverify"])
            .arg(format!("--tlscacert={certs}/ca.pem"))
            .arg(format!("--tlscert={certs}/cert.pem"))
            .arg(format!("--tlskey={certs}/key.pem"))
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let cache = env_cache();
    let server = Server::start_with(&[
        "--env-cache",
        &cache,
        "--runtime",
        "docker",
        "--docker-host",
        "unix:///var/run/docker.sock",
        "--docker-host",
        &spare,
        "--docker-tls",
        &certs,
    ]);
    let lh = server.lh();
    let runtime = |lh: &Lh| -> String {
        let info: Value = serde_json::from_str(lh.run(&["info", "-o", "json"]).ok()).unwrap();
        info["server"]["runtime"].as_str().unwrap().to_string()
    };
    assert!(runtime(&lh).starts_with("2 engines"), "{}", runtime(&lh));
    seed(&lh);
    let dir = project(
        &lh,
        "slow",
        &[("lh_project.yml", PROJECT), ("models.py", SLOW)],
    );
    let d = dir.to_str().unwrap();
    let id = lh.run(&["run", d, "--detach"]).ok().trim().to_string();
    // The spare engine's call is running: its container is up, past its cold start.
    let start = Instant::now();
    while spare_cli(&["ps", "-q", "--filter", "label=lh.runtime=docker"])
        .trim()
        .is_empty()
    {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "no call went to the spare engine: {}",
            runtime(&lh)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Mid-call: the container's harness has forked the call's process (two of them).
    let lost = spare_cli(&["ps", "-q", "--filter", "label=lh.runtime=docker"]);
    let container = lost.lines().next().unwrap().to_string();
    while spare_cli(&["top", &container])
        .lines()
        .filter(|l| l.contains("lh._worker"))
        .count()
        < 2
    {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the call never started on the spare engine"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success(), "cannot kill the spare dockerd {pid}");
    // The run publishes whole: the lost call ran again on the local engine.
    let r = wait_end(&lh, &id, Duration::from_secs(120));
    assert_eq!(r["status"], "succeeded", "{r:#}");
    for m in ["t.left", "t.right"] {
        assert_eq!(node(&r, m)["rows"], 100, "{r:#}");
    }
    let logs = lh.run(&["runs", "logs", &id]).ok().to_string();
    assert!(
        logs.contains(&format!(
            "the engine at {spare} its engine stopped answering"
        )) && logs.contains("run again on unix:///var/run/docker.sock"),
        "{logs}"
    );
    let line = runtime(&lh);
    assert!(
        line.contains(&format!("{spare}: out of placement")),
        "{line}"
    );
    // A run meanwhile uses the engine that answers (its calls run: nothing reused).
    let again = lh.run(&["run", d, "--no-cache", "-o", "json"]);
    let v: Value =
        serde_json::from_str(&again.stdout).unwrap_or_else(|_| panic!("{}", again.stderr));
    assert_eq!(v["status"], "succeeded", "{v:#}");
    assert_eq!(node(&v, "t.left")["status"], "done", "{v:#}");
    // Started again, the engine is back in placement.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/services.sh");
    let up = std::process::Command::new(script)
        .arg("docker-spare")
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let start = Instant::now();
    while runtime(&lh).contains("out of placement") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{}",
            runtime(&lh)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // What the lost call left on it is gone.
    let left = spare_cli(&["ps", "-aq"]);
    for id in lost.lines() {
        assert!(!left.contains(id), "{id} is left on the spare engine");
    }
}
