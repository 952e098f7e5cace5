//! The Docker runtime: the pooled runtime over a launcher whose workers are containers,
//! keyed by environment, code snapshot and limits. A container runs the worker harness
//! as its main process, attached (stdin for requests, stdout for answers, stderr for the
//! log); the harness forks a fresh process per invocation, so a warm invocation starts
//! no container and no interpreter, and keeps no state of the one before.
//!
//! Isolation: no network, a read-only root filesystem, an unprivileged user, no
//! capabilities, no new privileges, memory (without swap), CPU and process-count
//! limits, a private /tmp of bounded size, no file larger than the call's disk limit;
//! the environment (built by uv in the build sandbox) and the container's own code
//! snapshot (no other project's code) are mounted read-only; each container has one
//! writable folder, where an invocation's inputs and output cross. Containers carry labels, so that a server restarted after a crash
//! removes the ones it left.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use futures::StreamExt;

use crate::env::Env;
use crate::error::RunnerError;
use crate::pool::PoolConfig;
use crate::pooled::PooledRuntime;
use crate::runtime::{Limits, TMP_BYTES};
use crate::worker::{Launcher, Worker};

/// How the Docker runtime runs containers.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// The image is `<image_prefix><python major.minor>`, e.g. `lh-runtime:3.11`.
    pub image_prefix: String,
    /// Where containers get their writable folders (on the host).
    pub work_root: PathBuf,
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

/// The Docker runtime: warm containers in a pool.
pub type DockerRuntime = PooledRuntime<DockerLauncher>;

/// Starts and stops containers on one Docker engine.
#[derive(Debug)]
pub struct DockerLauncher {
    docker: Docker,
    config: DockerConfig,
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

impl PooledRuntime<DockerLauncher> {
    /// The runtime, after removing the containers a previous server of the same owner
    /// left behind.
    pub async fn new(
        docker: Docker,
        version: String,
        config: DockerConfig,
    ) -> Result<Arc<DockerRuntime>, RunnerError> {
        std::fs::create_dir_all(&config.work_root)?;
        let pool = PoolConfig {
            idle_timeout: config.idle_timeout,
            max_workers: Some(config.max_containers),
            max_idle: None,
        };
        let launcher = DockerLauncher {
            docker,
            config,
            version,
        };
        let orphans = launcher.remove_owned().await?;
        if orphans > 0 {
            tracing::info!(
                containers = orphans,
                "removed containers left by a previous server"
            );
        }
        Ok(PooledRuntime::with_launcher(launcher, pool))
    }

    /// Whether the image for `python` (major.minor) exists.
    pub async fn has_image(&self, python: &str) -> bool {
        self.launcher().has_image(python).await
    }
}

impl DockerLauncher {
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

    /// The container's settings: the mounts, the isolation and the limits.
    fn container(
        &self,
        env: &Env,
        limits: &Limits,
        site: &Path,
        code: &Path,
        dir: &Path,
    ) -> ContainerCreateBody {
        let memory = limits.memory_bytes.unwrap_or(self.config.default_memory) as i64;
        let host = HostConfig {
            binds: Some(vec![
                format!("{}:{ENV}:ro", site.display()),
                // The container's own code snapshot, and no other project's code.
                format!("{}:{CODE}:ro", code.display()),
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
            // No one file larger than the call's disk limit (one unlinked while open
            // escapes the folder's measure, not this).
            ulimits: limits.disk_bytes.map(|b| {
                vec![bollard::models::ResourcesUlimits {
                    name: Some("fsize".into()),
                    soft: Some(b as i64),
                    hard: Some(b as i64),
                }]
            }),
            tmpfs: Some(HashMap::from([(
                "/tmp".to_string(),
                format!("rw,nosuid,nodev,size={TMP_BYTES}"),
            )])),
            init: Some(true),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image(&env.python_version)),
            user: Some("1000:1000".into()),
            // The container's /tmp is its own: the harness empties it between calls.
            env: Some(vec![
                format!("PYTHONPATH={ENV}"),
                "HOME=/tmp".into(),
                "LH_PRIVATE_TMP=1".into(),
            ]),
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
        }
    }
}

#[async_trait::async_trait]
impl Launcher for DockerLauncher {
    /// The container's id.
    type Handle = String;

    const NAME: &'static str = "docker";
    const NOUN: &'static str = "container";
    const NOT_STARTED: &'static str = "the container's worker did not start";
    const READY_TIMEOUT: Duration = Duration::from_secs(60);

    async fn start(
        &self,
        env: &Env,
        code: &Path,
        limits: &Limits,
    ) -> Result<Worker<String>, RunnerError> {
        if !self.has_image(&env.python_version).await {
            return Err(RunnerError::Sandbox(format!(
                "the runtime image {} does not exist: build it with `make images` (images/build.sh)",
                self.image(&env.python_version)
            )));
        }
        let site = site_packages(&env.dir)?;
        let dir = self
            .config
            .work_root
            .join(format!("container-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        open_to_all(&dir)?;
        let body = self.container(env, limits, &site, code, &dir);
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
        // One stream carries both stdout and stderr, in frames.
        let (worker, mut out) = Worker::wire(id, dir, attached.input);
        let mut frames = attached.output;
        tokio::spawn(async move {
            while let Some(Ok(frame)) = frames.next().await {
                match frame {
                    bollard::container::LogOutput::StdOut { message } => out.answers.push(&message),
                    bollard::container::LogOutput::StdErr { message } => out.log.push(&message),
                    _ => {}
                }
            }
            out.end();
        });
        Ok(worker)
    }

    async fn stop(&self, worker: Worker<String>) {
        self.remove(&worker.handle).await;
        let _ = std::fs::remove_dir_all(&worker.dir);
    }

    /// Out of memory, or the container's exit code.
    async fn why_dead(&self, id: &mut String) -> String {
        // Give the engine a moment to record how the container ended.
        tokio::time::sleep(Duration::from_millis(100)).await;
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

    fn worker_path(&self, _dir: &Path) -> PathBuf {
        PathBuf::from(WORK)
    }

    fn code_path(&self, _code: &Path) -> PathBuf {
        PathBuf::from(CODE)
    }

    /// The container's user must write the output into folders the server made.
    fn hand_over(&self, inside: &Path) -> std::io::Result<()> {
        open_to_all(inside)
    }

    fn describe(&self, live: usize, idle: usize) -> String {
        format!(
            "docker (engine {}), {} containers ({} warm, at most {})",
            self.version, live, idle, self.config.max_containers
        )
    }

    /// Removes busy containers too, and any other this server's owner label marks.
    async fn shutdown(&self) {
        let _ = self.remove_owned().await;
    }
}

/// The site-packages folder of an environment (mounted as the container's PYTHONPATH).
/// Only real folders count: a link there (a package could plant one) would mount a host
/// folder into the container.
fn site_packages(env: &Path) -> Result<PathBuf, RunnerError> {
    let real = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir());
    let lib = env.join("lib");
    if real(&lib) {
        for e in std::fs::read_dir(&lib)? {
            let e = e?;
            let p = e.path().join("site-packages");
            if real(&e.path()) && real(&p) {
                return Ok(p);
            }
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
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))?;
    // The call's secrets, for the container's user (the call removes the file).
    let secrets = dir.join(crate::protocol::SECRETS_FILE);
    if secrets.exists() {
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}
