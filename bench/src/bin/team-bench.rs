//! A team's deployment, for BENCHMARKS.md: two `lh server` processes on one PostgreSQL
//! database and one warehouse.
//!
//! 1. Take-over time (first, on a quiet database): a run whose node sleeps is started
//!    on one server, that server is killed with SIGKILL, and the time until the other
//!    has started the node again is measured, against the run lease (`--lease`
//!    seconds); then the same after a clean stop (SIGTERM: the stopping server releases
//!    its runs).
//! 2. Sustained commits/s: `--clients` threads commit for `--seconds` each, each to a
//!    table of its own on `main`, through the Iceberg REST catalog (a property update:
//!    a new metadata file and one catalog commit), first all to one server, then
//!    alternating between two; the same workload on the same database.
//!
//!     team-bench [--clients 8] [--seconds 15] [--lease 5] [--trials 3]
//!
//! Needs `LH_TEST_POSTGRES_URL` (`scripts/services.sh postgres`) and the `lh` binary
//! next to this one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lh_bench::{Server, arg, lh_bin};
use serde_json::{Value, json};

fn database() -> Result<String> {
    let admin = std::env::var("LH_TEST_POSTGRES_URL")
        .context("LH_TEST_POSTGRES_URL is not set: `scripts/services.sh postgres` prints it")?;
    let name = format!("lh_team_bench_{}", std::process::id());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&admin).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut c)
                .await?;
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut c)
                .await?;
            Ok::<_, sqlx::Error>(())
        })?;
    let i = admin.rfind('/').context("a database URL")?;
    Ok(format!("{}/{name}", &admin[..i]))
}

fn call(agent: &ureq::Agent, token: &str, method: &str, url: &str, body: Value) -> Result<Value> {
    let auth = format!("Bearer {token}");
    let mut res = match method {
        "GET" => agent.get(url).header("Authorization", &auth).call()?,
        _ => agent
            .post(url)
            .header("Authorization", &auth)
            .send_json(body)?,
    };
    let status = res.status();
    let text = res.body_mut().read_to_string()?;
    if !status.is_success() {
        bail!("{method} {url}: {status}: {text}");
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Commits for `seconds` from `clients` threads, thread `i` to table `t<i>` on the
/// server `urls[i % urls.len()]`; commits per second.
fn commits(urls: &[String], token: &str, clients: usize, seconds: u64) -> Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for i in 0..clients {
        let url = format!(
            "{}/iceberg/v1/main/namespaces/bench/tables/t{i}",
            urls[i % urls.len()]
        );
        let (done, stop, token) = (done.clone(), stop.clone(), token.to_string());
        threads.push(std::thread::spawn(move || -> Result<()> {
            let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let body = json!({"requirements": [], "updates": [
                    {"action": "set-properties", "updates": {"n": n.to_string()}}]});
                call(&agent, &token, "POST", &url, body)?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

/// Starts a run of `project` on `a`, waits for its node to run, stops `a` (`kill`:
/// SIGKILL, else SIGTERM), and returns how long until `b` runs the node again.
fn takeover(
    lh: &std::path::Path,
    a: &mut Server,
    b: &Server,
    token: &str,
    project: &std::path::Path,
    kill: bool,
) -> Result<Duration> {
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let out = a
        .lh(lh, &["run", project.to_str().unwrap(), "--detach"])
        .env("LH_TOKEN", token)
        .output()?;
    if !out.status.success() {
        bail!("lh run: {}", String::from_utf8_lossy(&out.stderr));
    }
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let show = |server: &Server| {
        call(
            &agent,
            token,
            "GET",
            &format!("{}/api/v1/runs/{id}", server.url),
            Value::Null,
        )
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let first = loop {
        let r = show(a)?;
        if r["nodes"][0]["status"] == "running" {
            break r["nodes"][0]["started_at"].clone();
        }
        if Instant::now() > deadline {
            bail!("the node never started: {r}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stopped = Instant::now();
    if kill {
        a.kill();
    } else {
        a.terminate();
    }
    loop {
        let r = show(b)?;
        let node = &r["nodes"][0];
        if node["status"] == "running" && node["started_at"] != first {
            let took = stopped.elapsed();
            // Cancelled: the next trial starts from a quiet server.
            call(
                &agent,
                token,
                "POST",
                &format!("{}/api/v1/runs/{id}/cancel", b.url),
                Value::Null,
            )?;
            return Ok(took);
        }
        if Instant::now() > deadline {
            bail!("the run was not taken over: {r}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() -> Result<()> {
    let clients = arg("--clients", 8)?;
    let seconds = arg("--seconds", 15)? as u64;
    let lease = arg("--lease", 5)?;
    let trials = arg("--trials", 3)?;
    let lh = lh_bin()?;
    let catalog = database()?;
    let tmp = tempfile::tempdir()?;
    let warehouse = tmp.path().join("warehouse");
    let lease_flag = format!("{lease}s");
    let start = |dir: &str| -> Result<Server> {
        let dir = tmp.path().join(dir);
        Server::start(
            &lh,
            Some(&dir),
            &[
                "--catalog",
                &catalog,
                "--warehouse",
                warehouse.to_str().unwrap(),
                "--secret-key-file",
                tmp.path().join("secret.key").to_str().unwrap(),
                "--runtime",
                "process",
                "--run-lease",
                &lease_flag,
                // One environment cache: the take-over measures the take-over, not a
                // first build of the environment.
                "--env-cache",
                tmp.path().join("envs").to_str().unwrap(),
            ],
        )
    };
    // One key for both, made before either starts.
    std::fs::write(
        tmp.path().join("secret.key"),
        format!("{:064x}", rand::random::<u128>()),
    )?;
    let mut a = start("a")?;
    let b = start("b")?;
    // The admin token is the first server's; the second shares its database.
    let token = a.token()?;
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    call(
        &agent,
        &token,
        "POST",
        &format!("{}/iceberg/v1/main/namespaces", a.url),
        json!({"namespace": ["bench"]}),
    )?;
    for i in 0..clients {
        call(
            &agent,
            &token,
            "POST",
            &format!("{}/iceberg/v1/main/namespaces/bench/tables", a.url),
            json!({"name": format!("t{i}"), "schema": {"type": "struct", "schema-id": 0,
                "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}}),
        )?;
    }

    // Take-over: a node that sleeps a minute.
    let csv = tmp.path().join("src.csv");
    std::fs::write(&csv, "id\n1\n2\n3\n")?;
    let out = a
        .lh(
            &lh,
            &["table", "import", "bench.src", csv.to_str().unwrap()],
        )
        .output()?;
    if !out.status.success() {
        bail!("lh table import: {}", String::from_utf8_lossy(&out.stderr));
    }
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project)?;
    std::fs::write(
        project.join("lh_project.yml"),
        "name: bench\nnamespace: bench\npython: \"3.11\"\n",
    )?;
    std::fs::write(
        project.join("models.py"),
        "import time\nimport lh\n\n@lh.model()\ndef slow(t=lh.Model(\"bench.src\")):\n    time.sleep(60)\n    return t\n",
    )?;
    let mut rows = Vec::new();
    for kill in [true, false] {
        let mut took = Vec::new();
        for _ in 0..trials {
            took.push(takeover(&lh, &mut a, &b, &token, &project, kill)?);
            a = start("a")?;
        }
        let all: Vec<String> = took
            .iter()
            .map(|t| format!("{:.2}", t.as_secs_f64()))
            .collect();
        eprintln!(
            "take-over times ({}): {}",
            if kill { "SIGKILL" } else { "SIGTERM" },
            all.join(", ")
        );
        took.sort();
        rows.push((kill, took[took.len() / 2], took[took.len() - 1]));
    }
    println!("team-bench: take-over of a run, run lease {lease} s, {trials} trials each");
    println!("| the driving server | median | slowest |");
    println!("|---|---|---|");
    for (kill, median, max) in rows {
        println!(
            "| {} | {:.2} s | {:.2} s |",
            if kill {
                "killed (SIGKILL)"
            } else {
                "stopped (SIGTERM)"
            },
            median.as_secs_f64(),
            max.as_secs_f64()
        );
    }
    // Then the commits (after the take-over, which runs on a quiet database).
    let one = commits(std::slice::from_ref(&a.url), &token, clients, seconds)?;
    let two = commits(&[a.url.clone(), b.url.clone()], &token, clients, seconds)?;
    println!("\nteam-bench: {clients} clients committing for {seconds} s each, one PostgreSQL");
    println!("| servers | commits/s |");
    println!("|---|---|");
    println!("| 1 | {one:.0} |");
    println!("| 2 | {two:.0} |");
    drop(b);
    Ok(())
}
