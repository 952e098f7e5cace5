//! The runtime benchmark of BENCHMARKS.md:
//!
//! - one invocation of a function that returns its input (100 rows), p50 and p99: on a
//!   warm container, on a cold one (a new container each time), and `docker run` of the
//!   same function as the baseline, in one run;
//! - a 20-node pipeline on the docker runtime against the process runtime: wall time of
//!   `lh run --no-cache` with warm workers, and the ratio;
//! - a 20-node pipeline whose nodes each take half a second, on two Docker engines (this
//!   machine's and the remote one) against one, at most two containers per engine.
//!
//!     runtime-bench [--warm 100] [--cold 10]
//!
//! Needs dockerd and the runtime image (`make images`), uv on PATH, and the `lh` binary
//! next to this one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lh_bench::{Samples, Server, cache_dir, lh_bin, ms};
use lh_runner::docker::{DockerConfig, DockerRuntime, EngineAddr, connect, connect_to};
use lh_runner::process::{ProcessConfig, ProcessRuntime};
use lh_runner::{EnvCache, EnvSpec, Invocation, InvocationKind, Limits, Outcome, Runtime};

const CODE: &str = "def identity(t):\n    return t\n";

fn input(dir: &Path) -> Result<PathBuf> {
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
    let batch = arrow::record_batch::RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from((0..100).collect::<Vec<i64>>()))],
    )?;
    let p = dir.join("in.arrow");
    let mut w = arrow::ipc::writer::FileWriter::try_new(std::fs::File::create(&p)?, &schema)?;
    w.write(&batch)?;
    w.finish()?;
    Ok(p)
}

fn invocation(dir: &Path, code: &Path, n: usize) -> Result<(PathBuf, Invocation)> {
    let work = dir.join(format!("inv-{n}"));
    std::fs::create_dir_all(&work)?;
    let inp = input(&work)?;
    Ok((
        work.clone(),
        Invocation {
            id: format!("bench{n}"),
            kind: InvocationKind::Model,
            file: code.join("m.py"),
            function: "identity".into(),
            root: code.to_path_buf(),
            inputs: BTreeMap::from([("t".to_string(), inp)]),
            params: BTreeMap::new(),
            output: work.join("out.parquet"),
            env: Default::default(),
            live: None,
            tenant: String::new(),
        },
    ))
}

/// `n` warm calls on `rt` (after a first that may start the worker), timed.
async fn warm_calls(
    rt: &dyn Runtime,
    env: &lh_runner::Env,
    limits: &Limits,
    dir: &Path,
    snap: &Path,
    first: usize,
    n: usize,
) -> Result<Samples> {
    let mut warm = Samples::new();
    let mut last_log = String::new();
    for i in 0..=n {
        let (work, inv) = invocation(dir, snap, first + i)?;
        let start = Instant::now();
        let r = rt.invoke(env, limits, &work, inv).await?;
        let t = start.elapsed();
        anyhow::ensure!(
            matches!(r.outcome, Outcome::Model { rows: 100 }),
            "{:?}",
            r.outcome
        );
        if i > 0 {
            warm.push(t);
            // A warm figure that hides cold starts would be no figure: a worker that
            // retires after its call (its log says why) makes every call a new one.
            anyhow::ensure!(
                !r.cold,
                "warm call {i} needed a new worker; the one before said:\n{}",
                last_log
            );
        }
        last_log = r.log;
        std::fs::remove_dir_all(&work)?;
    }
    Ok(warm)
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let (warm_n, cold_n) = (arg("--warm", 100), arg("--cold", 10));
    let dir = tempfile::tempdir()?;
    let cache = cache_dir();
    let (env, _) = EnvCache::new(cache.join("bench-envs"), None, true)
        .get(&EnvSpec {
            python: "3.11".into(),
            packages: BTreeMap::new(),
            source_builds: false,
        })
        .await?;
    let code = dir.path().join("code");
    std::fs::create_dir_all(code.join("snap"))?;
    std::fs::write(code.join("snap/m.py"), CODE)?;
    let snap = code.join("snap");
    let (docker, version) = connect().await?;
    let rt = DockerRuntime::new(
        docker,
        version.clone(),
        DockerConfig {
            image_prefix: "lh-runtime:".into(),
            work_root: dir.path().join("containers"),
            idle_timeout: Duration::from_secs(600),
            max_containers: 4,
            owner: format!("bench-{}", std::process::id()),
            pids_limit: 256,
            default_memory: 1 << 30,
            remote: false,
            cache_idle: lh_runner::docker::CACHE_IDLE,
            sandbox_ids: lh_runner::HostUser::for_sandboxes(lh_runner::HostUser::DEFAULT_ID),
        },
    )
    .await?;
    println!(
        "runtime-bench: Docker engine {version}, {}",
        chrono::Utc::now().format("%Y-%m-%d")
    );

    // Warm: one container, one call after another.
    let limits = Limits {
        memory_bytes: Some(1 << 30),
        ..Limits::default()
    };
    let warm = warm_calls(rt.as_ref(), &env, &limits, dir.path(), &snap, 0, warm_n).await?;
    // Cold: a new container each time (distinct limits make distinct pools).
    let mut cold = Samples::new();
    for n in 0..cold_n {
        let (work, inv) = invocation(dir.path(), &snap, 10_000 + n)?;
        let limits = Limits {
            memory_bytes: Some((1 << 30) + (n as u64 + 1) * (1 << 20)),
            ..Limits::default()
        };
        let start = Instant::now();
        let r = rt.invoke(&env, &limits, &work, inv).await?;
        cold.push(start.elapsed());
        anyhow::ensure!(r.cold && matches!(r.outcome, Outcome::Model { .. }));
        std::fs::remove_dir_all(&work)?;
    }
    rt.shutdown().await;
    // Warm on an engine that shares no disk (the second dockerd, over TCP with TLS):
    // inputs and outputs cross its API as archives.
    let remote = EngineAddr {
        url: Some(std::env::var("LH_TEST_DOCKER_REMOTE").context(
            "LH_TEST_DOCKER_REMOTE is not set: `scripts/services.sh docker-remote` starts the second engine",
        )?),
        tls: std::env::var_os("LH_TEST_DOCKER_REMOTE_CERTS").map(PathBuf::from),
    };
    let (rdocker, rversion) = connect_to(&remote).await?;
    let rrt = DockerRuntime::new(
        rdocker,
        rversion,
        DockerConfig {
            image_prefix: "lh-runtime:".into(),
            work_root: dir.path().join("remote-containers"),
            idle_timeout: Duration::from_secs(600),
            max_containers: 4,
            owner: format!("bench-remote-{}", std::process::id()),
            pids_limit: 256,
            default_memory: 1 << 30,
            remote: true,
            cache_idle: lh_runner::docker::CACHE_IDLE,
            sandbox_ids: lh_runner::HostUser::for_sandboxes(lh_runner::HostUser::DEFAULT_ID),
        },
    )
    .await?;
    let warm_remote = warm_calls(
        rrt.as_ref(),
        &env,
        &limits,
        dir.path(),
        &snap,
        40_000,
        warm_n,
    )
    .await?;
    rrt.shutdown().await;
    // Warm on the process runtime: one bubblewrap-sandboxed worker, one call after another.
    let process = ProcessRuntime::new(ProcessConfig {
        work_root: dir.path().join("workers"),
        sandbox: true,
        idle_timeout: Duration::from_secs(600),
        max_idle: 2,
        sandbox_user: lh_runner::HostUser::for_sandboxes(lh_runner::HostUser::DEFAULT_ID),
    })?;
    let warm_process = warm_calls(
        process.as_ref(),
        &env,
        &limits,
        dir.path(),
        &snap,
        30_000,
        warm_n,
    )
    .await?;
    process.shutdown().await;
    // Baseline: `docker run` of the same function, one request on stdin.
    let site = std::fs::read_dir(env.dir.join("lib"))?
        .next()
        .context("lib")??
        .path()
        .join("site-packages");
    let mut run = Samples::new();
    for n in 0..cold_n {
        let (work, inv) = invocation(dir.path(), &snap, 20_000 + n)?;
        std::fs::set_permissions(&work, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
        let mut req = inv.clone();
        req.file = PathBuf::from("/lh/code/snap/m.py");
        req.root = PathBuf::from("/lh/code/snap");
        req.output = PathBuf::from("/lh/work/out.parquet");
        req.inputs = BTreeMap::from([("t".to_string(), PathBuf::from("/lh/work/in.arrow"))]);
        let line = serde_json::to_string(&req)? + "\n";
        let start = Instant::now();
        let mut child = Command::new("docker")
            .args([
                "run",
                "--rm",
                "-i",
                "--network",
                "none",
                "--read-only",
                "--user",
                "1000:1000",
                "--memory",
                "1g",
            ])
            .args(["-e", "PYTHONPATH=/lh/env", "--tmpfs", "/tmp"])
            .args(["-v", &format!("{}:/lh/env:ro", site.display())])
            .args(["-v", &format!("{}:/lh/code:ro", code.display())])
            .args(["-v", &format!("{}:/lh/work", work.display())])
            .arg("lh-runtime:3.11")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        use std::io::Write;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(line.as_bytes())?;
        let out = child.wait_with_output()?;
        run.push(start.elapsed());
        let text = String::from_utf8_lossy(&out.stdout);
        if !text.contains("\"rows\": 100") {
            bail!("docker run failed: {text}");
        }
    }
    println!("\n### One invocation of a function returning its input (100 rows)\n");
    println!("| | p50 ms | p99 ms | runs |\n|---|---:|---:|---:|");
    println!(
        "| warm container | {} | {} | {} |",
        ms(warm.percentile(50.0)),
        ms(warm.percentile(99.0)),
        warm.len()
    );
    println!(
        "| warm container, remote engine (no shared disk: TLS, files on the attached channel) | {} | {} | {} |",
        ms(warm_remote.percentile(50.0)),
        ms(warm_remote.percentile(99.0)),
        warm_remote.len()
    );
    println!(
        "| warm process worker (bubblewrap) | {} | {} | {} |",
        ms(warm_process.percentile(50.0)),
        ms(warm_process.percentile(99.0)),
        warm_process.len()
    );
    println!(
        "| cold container (create, start, Python, pyarrow) | {} | {} | {} |",
        ms(cold.percentile(50.0)),
        ms(cold.percentile(99.0)),
        cold.len()
    );
    println!(
        "| `docker run` of the same function (baseline) | {} | {} | {} |",
        ms(run.percentile(50.0)),
        ms(run.percentile(99.0)),
        run.len()
    );

    // A 20-node pipeline on both runtimes.
    let lh = lh_bin()?;
    let proj = dir.path().join("twenty");
    std::fs::create_dir_all(&proj)?;
    std::fs::write(
        proj.join("lh_project.yml"),
        "name: twenty\nnamespace: bench\npython: \"3.11\"\n",
    )?;
    let mut src = String::from("import lh\n");
    for i in 0..20 {
        // Four layers of five: each node reads one node of the layer above.
        let input = if i < 5 {
            "raw.numbers".to_string()
        } else {
            format!("n{}", i - 5)
        };
        src.push_str(&format!(
            "\n@lh.model()\ndef n{i}(t=lh.Model(\"{input}\")):\n    return t\n"
        ));
    }
    std::fs::write(proj.join("m.py"), &src)?;
    let csv = dir.path().join("numbers.csv");
    std::fs::write(
        &csv,
        (0..1000).fold(String::from("x\n"), |mut s, i| {
            s.push_str(&format!("{i}\n"));
            s
        }),
    )?;
    let mut walls = BTreeMap::new();
    for runtime in ["docker", "process"] {
        let server = start(&lh, dir.path(), runtime, &cache.join("bench-envs"))?;
        walls.insert(runtime, warm_median(&lh, &server, &csv, &proj)?);
    }
    println!(
        "\n### A 20-node pipeline (4 layers of 5 Python nodes), `lh run --no-cache` with warm workers, median of 3\n"
    );
    println!("| runtime | seconds |\n|---|---:|");
    println!("| docker | {:.2} |", walls["docker"].as_secs_f64());
    println!("| process | {:.2} |", walls["process"].as_secs_f64());
    println!(
        "| **ratio docker / process** | **{:.2}x** |",
        walls["docker"].as_secs_f64() / walls["process"].as_secs_f64()
    );

    // The same shape on one engine and on two, nodes that each take half a second (the
    // engines share this machine's two cores: the nodes wait rather than compute, as a
    // node whose work is on its engine's own machine would), two containers per engine.
    let slow = dir.path().join("twenty-slow");
    std::fs::create_dir_all(&slow)?;
    std::fs::write(
        slow.join("lh_project.yml"),
        "name: twenty\nnamespace: slow\npython: \"3.11\"\n",
    )?;
    std::fs::write(
        slow.join("m.py"),
        src.replace("    return t\n", "    time.sleep(0.5)\n    return t\n")
            .replace("import lh\n", "import time\nimport lh\n"),
    )?;
    let tls = remote
        .tls
        .as_ref()
        .context("the remote engine's certificates")?;
    let remote_url = remote.url.clone().context("the remote engine's URL")?;
    let local_url = "unix:///var/run/docker.sock".to_string();
    let mut by_engines = BTreeMap::new();
    for (label, engines) in [
        ("one engine", vec![local_url.clone()]),
        ("two engines", vec![local_url.clone(), remote_url.clone()]),
    ] {
        let mut args = vec![
            "--runtime".to_string(),
            "docker".into(),
            "--env-cache".into(),
            cache.join("bench-envs").display().to_string(),
            "--max-workers".into(),
            "2".into(),
            "--run-parallelism".into(),
            "8".into(),
            "--docker-tls".into(),
            tls.display().to_string(),
        ];
        for e in &engines {
            args.push("--docker-host".into());
            args.push(e.clone());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = Server::start(&lh, Some(&dir.path().join(label.replace(' ', "-"))), &args)?;
        by_engines.insert(label, warm_median(&lh, &server, &csv, &slow)?);
    }
    println!(
        "\n### A 20-node pipeline of half-second nodes on two Docker engines against one (at most 2 containers per engine, 8 nodes at once), median of 3\n"
    );
    println!("| engines | seconds |\n|---|---:|");
    println!(
        "| one (this machine's) | {:.2} |",
        by_engines["one engine"].as_secs_f64()
    );
    println!(
        "| two (this machine's and the remote one, TLS) | {:.2} |",
        by_engines["two engines"].as_secs_f64()
    );
    println!(
        "| **ratio two / one** | **{:.2}x** |",
        by_engines["two engines"].as_secs_f64() / by_engines["one engine"].as_secs_f64()
    );
    Ok(())
}

/// Imports `csv` as `raw.numbers`, then runs `proj` four times with `--no-cache`: the
/// median of the last three (the first starts the workers).
fn warm_median(lh: &Path, server: &Server, csv: &Path, proj: &Path) -> Result<Duration> {
    let csv = csv.to_str().context("path")?;
    lh_cmd(lh, server, &["table", "import", "raw.numbers", csv])?;
    let mut s = Samples::new();
    for i in 0..4 {
        let t = lh_cmd(
            lh,
            server,
            &["run", proj.to_str().context("path")?, "--no-cache"],
        )?;
        if i > 0 {
            s.push(t);
        }
    }
    Ok(s.percentile(50.0))
}

fn start(lh: &Path, dir: &Path, runtime: &str, envs: &Path) -> Result<Server> {
    let dir = dir.join(runtime);
    Server::start(
        lh,
        Some(&dir),
        &[
            "--runtime",
            runtime,
            "--env-cache",
            envs.to_str().context("path")?,
        ],
    )
}

fn lh_cmd(lh: &Path, s: &Server, args: &[&str]) -> Result<Duration> {
    let start = Instant::now();
    let out = s.lh(lh, args).output()?;
    if !out.status.success() {
        bail!(
            "lh {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(start.elapsed())
}
