//! The Docker runtime: a pool of warm containers, keyed by environment and limits. A
//! container runs the worker harness as its main process, attached (stdin for
//! requests, stdout for answers, stderr for the log), so a warm invocation starts no
//! container and no interpreter.
//!
//! Isolation: no network, a read-only root filesystem, an unprivileged user, no
//! capabilities, no new privileges, memory (without swap), CPU and process-count
//! limits, a private /tmp; the environment (built by uv on the host) and the code are
//! mounted read-only; each container has one writable folder, where an invocation's
//! inputs and output cross. Containers carry labels, so that a server restarted after a
//! crash removes the ones it left.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use futures::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::env::Env;
use crate::protocol::{Answer, Invocation, Outcome};
use crate::{InvokeResult, Limits, RunnerError, Runtime};

/// How the Docker runtime runs containers.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// The image is `<image_prefix><python major.minor>`, e.g. `lh-runtime:3.11`.
    pub image_prefix: String,
    /// Where containers get their writable folders (on the host).
    pub work_root: PathBuf,
    /// Code snapshots live under this folder; containers see it read-only.
    pub code_root: PathBuf,
    /// Stop a container idle for this long.
    pub idle_timeout: Duration,
    /// At most this many containers at once (idle or busy).
    pub max_containers: usize,
    /// The label that marks this server's containers.
    pub owner: String,
    /// Process-count limit of a container.
    pub pids_limit: i64,
    /// Memory of a container when the function sets none.
    pub default_memory: u64,
}

const WORK: &str = "/lh/work";
const CODE: &str = "/lh/code";
const ENV: &str = "/lh/env";

type PoolKey = (String, Option<u64>, Option<u32>);

struct Container {
    id: String,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    answers: mpsc::UnboundedReceiver<String>,
    log: Arc<Mutex<String>>,
    /// Set when the container's output ended: it is gone.
    ended: Arc<AtomicBool>,
    dir: PathBuf,
    idle_since: Instant,
    _permit: OwnedSemaphorePermit,
}

pub struct DockerRuntime {
    docker: Docker,
    config: DockerConfig,
    idle: Mutex<HashMap<PoolKey, Vec<Container>>>,
    slots: Arc<Semaphore>,
    version: String,
}

/// Connects to the engine of DOCKER_HOST (or the local socket), negotiating the API
/// version (Debian's engine is older than bollard's default).
pub async fn connect() -> Result<(Docker, String), RunnerError> {
    let docker = Docker::connect_with_local_defaults()
        .map_err(|e| RunnerError::Sandbox(format!("cannot reach a Docker engine: {e}")))?;
    let docker = docker
        .negotiate_version()
        .await
        .map_err(|e| RunnerError::Sandbox(format!("cannot reach a Docker engine: {e}")))?;
    let v = docker
        .version()
        .await
        .map_err(|e| RunnerError::Sandbox(format!("cannot reach a Docker engine: {e}")))?;
    Ok((docker, v.version.unwrap_or_default()))
}

fn docker_err(what: &str) -> impl Fn(bollard::errors::Error) -> RunnerError + '_ {
    move |e| RunnerError::Worker(format!("{what}: {e}"))
}

impl DockerRuntime {
    /// The runtime, after removing the containers a previous server of the same owner
    /// left behind.
    pub async fn new(
        docker: Docker,
        version: String,
        config: DockerConfig,
    ) -> Result<Arc<DockerRuntime>, RunnerError> {
        std::fs::create_dir_all(&config.work_root)?;
        let rt = Arc::new(DockerRuntime {
            docker,
            slots: Arc::new(Semaphore::new(config.max_containers.max(1))),
            config,
            idle: Mutex::new(HashMap::new()),
            version,
        });
        let orphans = rt.remove_owned().await?;
        if orphans > 0 {
            tracing::info!(
                containers = orphans,
                "removed containers left by a previous server"
            );
        }
        let weak: Weak<DockerRuntime> = Arc::downgrade(&rt);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let Some(rt) = weak.upgrade() else { return };
                rt.evict(false).await;
            }
        });
        Ok(rt)
    }

    /// Whether the image for `python` (major.minor) exists.
    pub async fn has_image(&self, python: &str) -> bool {
        self.docker.inspect_image(&self.image(python)).await.is_ok()
    }

    fn image(&self, python: &str) -> String {
        let mm: Vec<&str> = python.split('.').take(2).collect();
        format!("{}{}", self.config.image_prefix, mm.join("."))
    }

    /// Every container with this server's owner label, by id.
    async fn owned(&self) -> Result<Vec<String>, RunnerError> {
        let filters = HashMap::from([("label", vec![format!("lh.owner={}", self.config.owner)])]);
        let opts = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let list = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(docker_err("cannot list containers"))?;
        Ok(list.into_iter().filter_map(|c| c.id).collect())
    }

    async fn remove_owned(&self) -> Result<usize, RunnerError> {
        let ids = self.owned().await?;
        for id in &ids {
            self.remove(id).await;
        }
        Ok(ids.len())
    }

    async fn remove(&self, id: &str) {
        let opts = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        let _ = self.docker.remove_container(id, Some(opts)).await;
    }

    /// How many containers wait warm.
    pub fn idle_containers(&self) -> usize {
        self.idle
            .lock()
            .map(|i| i.values().map(Vec::len).sum())
            .unwrap_or(0)
    }

    /// Removes idle containers past their idle time (or all, or the oldest one to free
    /// a slot).
    async fn evict(&self, oldest_only: bool) -> bool {
        let timeout = self.config.idle_timeout;
        let mut gone = Vec::new();
        if let Ok(mut idle) = self.idle.lock() {
            if oldest_only {
                let oldest = idle
                    .iter()
                    .flat_map(|(k, v)| {
                        v.iter()
                            .enumerate()
                            .map(move |(i, c)| (c.idle_since, k.clone(), i))
                    })
                    .min_by_key(|(t, _, _)| *t);
                if let Some((_, k, i)) = oldest
                    && let Some(v) = idle.get_mut(&k)
                {
                    gone.push(v.remove(i));
                }
            } else {
                for v in idle.values_mut() {
                    let (keep, old): (Vec<Container>, Vec<Container>) =
                        v.drain(..).partition(|c| {
                            c.idle_since.elapsed() < timeout && !c.ended.load(Ordering::Acquire)
                        });
                    *v = keep;
                    gone.extend(old);
                }
            }
        }
        let any = !gone.is_empty();
        for c in gone {
            self.discard(c).await;
        }
        any
    }

    async fn discard(&self, c: Container) {
        self.remove(&c.id).await;
        let _ = std::fs::remove_dir_all(&c.dir);
    }

    async fn spawn(&self, env: &Env, limits: &Limits) -> Result<Container, RunnerError> {
        // A slot, freeing an idle container if the pool is full.
        let permit = loop {
            if let Ok(p) = self.slots.clone().try_acquire_owned() {
                break p;
            }
            if !self.evict(true).await {
                break self
                    .slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| RunnerError::Worker("the container pool is closed".into()))?;
            }
        };
        let image = self.image(&env.python_version);
        if !self.has_image(&env.python_version).await {
            return Err(RunnerError::Sandbox(format!(
                "the runtime image {image} does not exist: build it with `make images` (images/build.sh)"
            )));
        }
        let site = site_packages(&env.dir)?;
        let dir = self
            .config
            .work_root
            .join(format!("container-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        open_to_all(&dir)?;
        let memory = limits.memory_bytes.unwrap_or(self.config.default_memory) as i64;
        let host = HostConfig {
            binds: Some(vec![
                format!("{}:{ENV}:ro", site.display()),
                format!("{}:{CODE}:ro", self.config.code_root.display()),
                format!("{}:{WORK}:rw", dir.display()),
            ]),
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            memory: Some(memory),
            memory_swap: Some(memory),
            nano_cpus: limits.cpus_milli.map(|m| i64::from(m) * 1_000_000),
            pids_limit: Some(self.config.pids_limit),
            tmpfs: Some(HashMap::from([(
                "/tmp".to_string(),
                "rw,nosuid,nodev,size=256m".to_string(),
            )])),
            init: Some(true),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(image),
            user: Some("1000:1000".into()),
            env: Some(vec![format!("PYTHONPATH={ENV}"), "HOME=/tmp".into()]),
            working_dir: Some(WORK.into()),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(false),
            tty: Some(false),
            network_disabled: Some(true),
            labels: Some(HashMap::from([
                ("lh.runtime".to_string(), "docker".to_string()),
                ("lh.owner".to_string(), self.config.owner.clone()),
                ("lh.env".to_string(), env.key.clone()),
            ])),
            host_config: Some(host),
            ..Default::default()
        };
        let name = format!("lh-worker-{}", uuid::Uuid::new_v4().simple());
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                body,
            )
            .await
            .map_err(docker_err("cannot create a container"))?;
        let id = created.id;
        let started = async {
            let attach = AttachContainerOptionsBuilder::new()
                .stdin(true)
                .stdout(true)
                .stderr(true)
                .stream(true)
                .build();
            let attached = self
                .docker
                .attach_container(&id, Some(attach))
                .await
                .map_err(docker_err("cannot attach"))?;
            self.docker
                .start_container(&id, None)
                .await
                .map_err(docker_err("cannot start the container"))?;
            Ok::<_, RunnerError>(attached)
        }
        .await;
        let attached = match started {
            Ok(a) => a,
            Err(e) => {
                self.remove(&id).await;
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let log = Arc::new(Mutex::new(String::new()));
        let ended = Arc::new(AtomicBool::new(false));
        let (sink, done) = (log.clone(), ended.clone());
        let mut output = attached.output;
        tokio::spawn(async move {
            let mut out = String::new();
            let mut err = String::new();
            while let Some(Ok(frame)) = output.next().await {
                match frame {
                    bollard::container::LogOutput::StdOut { message } => {
                        out.push_str(&String::from_utf8_lossy(&message));
                        while let Some(i) = out.find('\n') {
                            let line: String = out.drain(..=i).collect();
                            let _ = tx.send(line.trim_end().to_string());
                        }
                    }
                    bollard::container::LogOutput::StdErr { message } => {
                        err.push_str(&String::from_utf8_lossy(&message));
                        if let Some(i) = err.rfind('\n') {
                            let lines: String = err.drain(..=i).collect();
                            if let Ok(mut l) = sink.lock() {
                                l.push_str(&lines);
                                if l.len() > 4 << 20 {
                                    let cut = l.len() - (2 << 20);
                                    let cut = (cut..l.len())
                                        .find(|i| l.is_char_boundary(*i))
                                        .unwrap_or(l.len());
                                    l.replace_range(..cut, "[... earlier output dropped ...]\n");
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
            if let Ok(mut l) = sink.lock() {
                l.push_str(&err);
            }
            done.store(true, Ordering::Release);
        });
        let mut c = Container {
            id,
            input: attached.input,
            answers: rx,
            log,
            ended,
            dir,
            idle_since: Instant::now(),
            _permit: permit,
        };
        let ready = tokio::time::timeout(Duration::from_secs(60), c.answers.recv()).await;
        match ready {
            Ok(Some(line))
                if serde_json::from_str::<Answer>(&line).is_ok_and(|a| a.ready == Some(true)) =>
            {
                Ok(c)
            }
            _ => {
                let log = c.log.lock().map(|l| l.clone()).unwrap_or_default();
                self.discard(c).await;
                Err(RunnerError::Worker(format!(
                    "the container's worker did not start:\n{}",
                    tail(&log, 20)
                )))
            }
        }
    }

    /// Why a container stopped: out of memory, or its exit code.
    async fn why_dead(&self, id: &str) -> String {
        match self.docker.inspect_container(id, None).await {
            Ok(info) => {
                let state = info.state.unwrap_or_default();
                if state.oom_killed == Some(true) {
                    "out of memory: the function used more than its memory limit and was killed"
                        .to_string()
                } else {
                    match state.exit_code {
                        Some(137) => "killed (signal 9)".to_string(),
                        Some(code) => format!("exited with status {code}"),
                        None => "it stopped".to_string(),
                    }
                }
            }
            Err(_) => "the container is gone".to_string(),
        }
    }

    /// One attempt: `Ok(None)` when the warm container turned out dead before it got
    /// the request (the caller retries once with a fresh one).
    async fn attempt(
        &self,
        env: &Env,
        limits: &Limits,
        work: &Path,
        inv: &Invocation,
        key: &PoolKey,
    ) -> Result<Option<(Outcome, String, bool)>, RunnerError> {
        let warm = self.take_warm(key);
        let cold = warm.is_none();
        let mut c = match warm {
            Some(c) => c,
            None => self.spawn(env, limits).await?,
        };
        let inside = c.dir.join(format!("inv-{}", inv.id));
        std::fs::rename(work, &inside)?;
        open_to_all(&inside)?;
        let to_container = |p: &Path| -> PathBuf {
            if let Ok(rel) = p.strip_prefix(work) {
                Path::new(WORK).join(format!("inv-{}", inv.id)).join(rel)
            } else if let Ok(rel) = p.strip_prefix(&self.config.code_root) {
                Path::new(CODE).join(rel)
            } else {
                p.to_path_buf()
            }
        };
        let mut req = inv.clone();
        req.file = to_container(&inv.file);
        req.root = to_container(&inv.root);
        req.output = to_container(&inv.output);
        for p in req.inputs.values_mut() {
            *p = to_container(p);
        }
        let line =
            serde_json::to_string(&req).map_err(|e| RunnerError::Worker(e.to_string()))? + "\n";
        let log_start = c.log.lock().map(|l| l.len()).unwrap_or(0);
        let sent = async {
            c.input.write_all(line.as_bytes()).await?;
            c.input.flush().await
        }
        .await;
        if sent.is_err() {
            let _ = std::fs::rename(&inside, work);
            self.discard(c).await;
            return if cold {
                Err(RunnerError::Worker("cannot send to a new container".into()))
            } else {
                Ok(None)
            };
        }
        // Skip stray lines (say, from a process the function forked) until our answer.
        let wanted = inv.id.clone();
        let answer = tokio::time::timeout(limits.timeout, async {
            loop {
                match c.answers.recv().await {
                    Some(line)
                        if serde_json::from_str::<Answer>(&line)
                            .is_ok_and(|a| a.id.as_deref() == Some(wanted.as_str())) =>
                    {
                        return Some(line);
                    }
                    Some(_) => continue,
                    None => return None,
                }
            }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(2)).await;
        let log = c
            .log
            .lock()
            .map(|l| l.get(log_start..).unwrap_or_default().to_string())
            .unwrap_or_default();
        let _ = std::fs::rename(&inside, work);
        let (outcome, healthy) = match answer {
            Ok(Some(line)) => match serde_json::from_str::<Answer>(&line) {
                Ok(a) if a.id.as_deref() == Some(inv.id.as_str()) => (a.outcome(), true),
                _ => (
                    Outcome::Failed {
                        error: format!("the worker answered garbage: {}", tail(&line, 3)),
                        traceback: String::new(),
                    },
                    false,
                ),
            },
            Ok(None) => {
                // The output ended: the container died during the call.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let why = self.why_dead(&c.id).await;
                (
                    Outcome::Failed {
                        error: format!("the container died: {why}"),
                        traceback: tail(&log, 30),
                    },
                    false,
                )
            }
            Err(_) => (Outcome::timed_out(limits.timeout), false),
        };
        if healthy {
            c.idle_since = Instant::now();
            if let Ok(mut idle) = self.idle.lock() {
                idle.entry(key.clone()).or_default().push(c);
            }
        } else {
            self.discard(c).await;
        }
        Ok(Some((outcome, log, cold)))
    }

    /// A warm container of `key` still alive; dead ones found on the way are dropped.
    fn take_warm(&self, key: &PoolKey) -> Option<Container> {
        let mut idle = self.idle.lock().ok()?;
        let list = idle.get_mut(key)?;
        while let Some(c) = list.pop() {
            if !c.ended.load(Ordering::Acquire) {
                return Some(c);
            }
            let id = c.id.clone();
            let dir = c.dir.clone();
            let docker = self.docker.clone();
            tokio::spawn(async move {
                let opts = RemoveContainerOptionsBuilder::new().force(true).build();
                let _ = docker.remove_container(&id, Some(opts)).await;
                let _ = std::fs::remove_dir_all(dir);
            });
        }
        None
    }
}

#[async_trait::async_trait]
impl Runtime for DockerRuntime {
    fn name(&self) -> &'static str {
        "docker"
    }

    async fn invoke(
        &self,
        env: &Env,
        limits: &Limits,
        _code_root: &Path,
        work: &Path,
        inv: Invocation,
    ) -> Result<InvokeResult, RunnerError> {
        let started = Instant::now();
        let key: PoolKey = (env.key.clone(), limits.memory_bytes, limits.cpus_milli);
        // A warm container killed between invocations costs one retry, not a failure.
        for _ in 0..2 {
            if let Some((outcome, log, cold)) = self.attempt(env, limits, work, &inv, &key).await? {
                return Ok(InvokeResult {
                    outcome,
                    log,
                    duration: started.elapsed(),
                    cold,
                });
            }
        }
        Err(RunnerError::Worker(
            "no container could take the call".into(),
        ))
    }

    fn describe(&self) -> String {
        let busy = self.config.max_containers - self.slots.available_permits();
        format!(
            "docker (engine {}), {} containers ({} warm, at most {})",
            self.version,
            busy,
            self.idle_containers(),
            self.config.max_containers
        )
    }

    async fn shutdown(&self) {
        let all: Vec<Container> = match self.idle.lock() {
            Ok(mut i) => i.drain().flat_map(|(_, v)| v).collect(),
            Err(_) => Vec::new(),
        };
        for c in all {
            self.discard(c).await;
        }
        let _ = self.remove_owned().await;
    }
}

/// The site-packages folder of an environment (mounted as the container's PYTHONPATH).
fn site_packages(env: &Path) -> Result<PathBuf, RunnerError> {
    let lib = env.join("lib");
    for e in std::fs::read_dir(&lib)? {
        let p = e?.path().join("site-packages");
        if p.is_dir() {
            return Ok(p);
        }
    }
    Err(RunnerError::Environment(format!(
        "no site-packages in {}",
        env.display()
    )))
}

/// The container's user must write the output into folders the server made.
fn open_to_all(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
