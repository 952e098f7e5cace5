//! The process runtime: workers are local processes, sandboxed with bubblewrap (no
//! network, a read-only view of only the system, the interpreter, the environment and
//! the code, a private writable folder, a private /tmp), limited in address space, and
//! kept warm: a worker takes one invocation after another, so a warm invocation starts
//! no process and imports nothing it already has.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::env::{Env, find_on_path};
use crate::protocol::{Answer, Invocation, Outcome};
use crate::{InvokeResult, Limits, RunnerError, Runtime};

/// How the process runtime runs workers.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// Where workers get their private folders.
    pub work_root: PathBuf,
    /// Code snapshots live under this folder; workers see it read-only.
    pub code_root: PathBuf,
    /// Sandbox workers with bubblewrap (refuse to run when it is missing).
    pub sandbox: bool,
    /// Stop a worker idle for this long.
    pub idle_timeout: Duration,
    /// At most this many idle workers per environment and limits.
    pub max_idle: usize,
}

type PoolKey = (String, Option<u64>);

struct Worker {
    child: Child,
    stdin: ChildStdin,
    answers: Lines<BufReader<ChildStdout>>,
    log: Arc<Mutex<String>>,
    dir: PathBuf,
    idle_since: Instant,
}

pub struct ProcessRuntime {
    config: ProcessConfig,
    bwrap: Option<PathBuf>,
    idle: Mutex<HashMap<PoolKey, Vec<Worker>>>,
}

impl ProcessRuntime {
    pub fn new(config: ProcessConfig) -> Result<Arc<ProcessRuntime>, RunnerError> {
        let bwrap = find_on_path("bwrap");
        if config.sandbox && bwrap.is_none() {
            return Err(RunnerError::Sandbox(
                "the process runtime sandboxes functions with bubblewrap, which is not installed (apt-get install bubblewrap)".into(),
            ));
        }
        std::fs::create_dir_all(&config.work_root)?;
        let rt = Arc::new(ProcessRuntime {
            config,
            bwrap,
            idle: Mutex::new(HashMap::new()),
        });
        // Evict idle workers in the background, for as long as the runtime lives.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let weak: Weak<ProcessRuntime> = Arc::downgrade(&rt);
            handle.spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    let Some(rt) = weak.upgrade() else { return };
                    rt.evict_idle();
                }
            });
        }
        Ok(rt)
    }

    fn evict_idle(&self) {
        let timeout = self.config.idle_timeout;
        let mut stale = Vec::new();
        if let Ok(mut idle) = self.idle.lock() {
            for workers in idle.values_mut() {
                let (keep, old): (Vec<Worker>, Vec<Worker>) = workers
                    .drain(..)
                    .partition(|w| w.idle_since.elapsed() < timeout);
                *workers = keep;
                stale.extend(old);
            }
        }
        for w in stale {
            stop(w);
        }
    }

    /// How many workers wait warm.
    pub fn idle_workers(&self) -> usize {
        self.idle
            .lock()
            .map(|i| i.values().map(Vec::len).sum())
            .unwrap_or(0)
    }

    fn command(&self, env: &Env, limits: &Limits, dir: &Path) -> Command {
        let mut inner: Vec<String> = Vec::new();
        if let Some(bytes) = limits.memory_bytes {
            inner.extend(["prlimit".into(), format!("--as={bytes}"), "--".into()]);
        }
        inner.extend([
            env.python.display().to_string(),
            "-m".into(),
            "lh._worker".into(),
        ]);
        let mut cmd = match (&self.bwrap, self.config.sandbox) {
            (Some(bwrap), true) => {
                let mut c = Command::new(bwrap);
                let p = |x: &Path| x.display().to_string();
                // /tmp first: binds under it come after and stay visible.
                c.args([
                    "--die-with-parent",
                    "--new-session",
                    "--unshare-all",
                    "--tmpfs",
                    "/tmp",
                ]);
                for sys in ["/usr", "/bin", "/lib", "/lib64", "/sbin"] {
                    c.args(["--ro-bind-try", sys, sys]);
                }
                c.args(["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]);
                c.args(["--ro-bind-try", "/etc/localtime", "/etc/localtime"]);
                for ro in [&env.base_prefix, &env.dir, &self.config.code_root] {
                    c.args(["--ro-bind", &p(ro), &p(ro)]);
                }
                c.args([
                    "--bind",
                    &p(dir),
                    &p(dir),
                    "--proc",
                    "/proc",
                    "--dev",
                    "/dev",
                    "--chdir",
                    &p(dir),
                ]);
                c.args([
                    "--clearenv",
                    "--setenv",
                    "HOME",
                    "/tmp",
                    "--setenv",
                    "PATH",
                    "/usr/bin:/bin",
                ]);
                c.args([
                    "--setenv",
                    "PYTHONDONTWRITEBYTECODE",
                    "1",
                    "--setenv",
                    "PYTHONUNBUFFERED",
                    "1",
                ]);
                c.args(["--setenv", "LANG", "C.UTF-8", "--"]);
                c.args(&inner);
                c
            }
            _ => {
                let mut c = Command::new(&inner[0]);
                c.args(&inner[1..]).current_dir(dir).env_clear();
                c.env("HOME", dir).env("PATH", "/usr/bin:/bin");
                c.env("PYTHONDONTWRITEBYTECODE", "1")
                    .env("PYTHONUNBUFFERED", "1");
                c
            }
        };
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    async fn spawn(&self, env: &Env, limits: &Limits) -> Result<Worker, RunnerError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.config.work_root.join(format!("worker-{id}"));
        std::fs::create_dir_all(&dir)?;
        let mut child = self
            .command(env, limits, &dir)
            .spawn()
            .map_err(|e| RunnerError::Worker(format!("cannot start a worker: {e}")))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| RunnerError::Worker("no stdin".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| RunnerError::Worker("no stdout".into()))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| RunnerError::Worker("no stderr".into()))?;
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                    // Keep the log bounded: a chatty function must not exhaust memory.
                    if l.len() > 4 << 20 {
                        let cut = l.len() - (2 << 20);
                        let cut = (cut..l.len())
                            .find(|i| l.is_char_boundary(*i))
                            .unwrap_or(l.len());
                        l.replace_range(..cut, "[... earlier output dropped ...]\n");
                    }
                }
            }
        });
        let mut worker = Worker {
            child,
            stdin,
            answers: BufReader::new(stdout).lines(),
            log,
            dir,
            idle_since: Instant::now(),
        };
        let ready =
            tokio::time::timeout(Duration::from_secs(120), worker.answers.next_line()).await;
        match ready {
            Ok(Ok(Some(line)))
                if serde_json::from_str::<Answer>(&line).is_ok_and(|a| a.ready == Some(true)) =>
            {
                Ok(worker)
            }
            _ => {
                let log = worker.log.lock().map(|l| l.clone()).unwrap_or_default();
                stop(worker);
                Err(RunnerError::Worker(format!(
                    "the worker did not start:\n{}",
                    tail(&log, 20)
                )))
            }
        }
    }
}

/// Kills a worker and removes its folder.
fn stop(mut w: Worker) {
    let _ = w.child.start_kill();
    let dir = w.dir.clone();
    tokio::spawn(async move {
        let _ = w.child.wait().await;
        let _ = std::fs::remove_dir_all(dir);
    });
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[async_trait::async_trait]
impl Runtime for ProcessRuntime {
    fn name(&self) -> &'static str {
        "process"
    }

    async fn invoke(
        &self,
        env: &Env,
        limits: &Limits,
        _code_root: &Path,
        work: &Path,
        mut inv: Invocation,
    ) -> Result<InvokeResult, RunnerError> {
        let started = Instant::now();
        let key: PoolKey = (env.key.clone(), limits.memory_bytes);
        let warm = self
            .idle
            .lock()
            .ok()
            .and_then(|mut i| i.get_mut(&key).and_then(Vec::pop));
        let cold = warm.is_none();
        let mut worker = match warm {
            Some(w) => w,
            None => self.spawn(env, limits).await?,
        };
        // The invocation's folder moves into the worker's own folder for the call.
        let inside = worker.dir.join(format!("inv-{}", inv.id));
        std::fs::rename(work, &inside)?;
        let remap = |p: &Path| match p.strip_prefix(work) {
            Ok(rel) => inside.join(rel),
            Err(_) => p.to_path_buf(),
        };
        for path in inv.inputs.values_mut() {
            *path = remap(path);
        }
        inv.output = remap(&inv.output);
        let log_start = worker.log.lock().map(|l| l.len()).unwrap_or(0);
        let line =
            serde_json::to_string(&inv).map_err(|e| RunnerError::Worker(e.to_string()))? + "\n";

        let wanted = inv.id.clone();
        let exchange = async {
            worker.stdin.write_all(line.as_bytes()).await?;
            worker.stdin.flush().await?;
            // Skip stray lines (say, from a process the function forked) until our answer.
            loop {
                match worker.answers.next_line().await? {
                    Some(l)
                        if serde_json::from_str::<Answer>(&l)
                            .is_ok_and(|a| a.id.as_deref() == Some(wanted.as_str())) =>
                    {
                        return Ok::<_, std::io::Error>(Some(l));
                    }
                    Some(_) => continue,
                    None => return Ok(None),
                }
            }
        };
        let answer = tokio::time::timeout(limits.timeout, exchange).await;
        // Give the log reader a moment to drain what the function printed last.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let log = worker
            .log
            .lock()
            .map(|l| l.get(log_start..).unwrap_or_default().to_string())
            .unwrap_or_default();
        let _ = std::fs::rename(&inside, work);
        let (outcome, healthy) = match answer {
            Ok(Ok(Some(line))) => match serde_json::from_str::<Answer>(&line) {
                Ok(a) if a.id.as_deref() == Some(inv.id.as_str()) => (a.outcome(), true),
                _ => (
                    Outcome::Failed {
                        error: format!("the worker answered garbage: {}", tail(&line, 3)),
                        traceback: String::new(),
                    },
                    false,
                ),
            },
            Ok(_) => {
                // The worker died: say how.
                let status =
                    tokio::time::timeout(Duration::from_secs(5), worker.child.wait()).await;
                let how = match status {
                    Ok(Ok(s)) => describe_exit(s),
                    _ => "it stopped answering".to_string(),
                };
                (
                    Outcome::Failed {
                        error: format!("the worker died: {how}"),
                        traceback: tail(&log, 30),
                    },
                    false,
                )
            }
            Err(_) => (Outcome::timed_out(limits.timeout), false),
        };
        if healthy {
            worker.idle_since = Instant::now();
            let mut idle = self
                .idle
                .lock()
                .map_err(|_| RunnerError::Worker("pool poisoned".into()))?;
            let slot = idle.entry(key).or_default();
            if slot.len() < self.config.max_idle {
                slot.push(worker);
            } else {
                stop(worker);
            }
        } else {
            stop(worker);
        }
        Ok(InvokeResult {
            outcome,
            log,
            duration: started.elapsed(),
            cold,
        })
    }

    fn describe(&self) -> String {
        let sandbox = if self.config.sandbox {
            "bubblewrap sandbox"
        } else {
            "no sandbox"
        };
        format!("process ({sandbox}), {} warm workers", self.idle_workers())
    }

    async fn shutdown(&self) {
        let all: Vec<Worker> = match self.idle.lock() {
            Ok(mut i) => i.drain().flat_map(|(_, v)| v).collect(),
            Err(_) => Vec::new(),
        };
        for w in all {
            stop(w);
        }
    }
}

#[cfg(unix)]
fn describe_exit(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (_, Some(9)) => "killed (signal 9), most likely for using too much memory".to_string(),
        (_, Some(sig)) => format!("killed by signal {sig}"),
        (Some(code), _) => format!("exited with status {code}"),
        _ => "exited".to_string(),
    }
}

#[cfg(not(unix))]
fn describe_exit(s: std::process::ExitStatus) -> String {
    format!("exited: {s}")
}
