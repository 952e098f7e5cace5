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
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, VolumeCreateRequest};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListVolumesOptionsBuilder, RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures::StreamExt;

use crate::env::Env;
use crate::error::RunnerError;
use crate::pool::PoolConfig;
use crate::pooled::PooledRuntime;
use crate::runtime::{DEFAULT_DISK_BYTES, Limits, TMP_BYTES};
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
    /// The engine shares no disk with the server (another machine): environments and
    /// code snapshots reach it as volumes it keeps by their key, an invocation's folder
    /// as archives over the API, into a bounded in-memory volume of the container.
    pub remote: bool,
    /// A remote engine's cache volumes (environments, code snapshots) that this server
    /// has not used for this long, and no container uses, are removed.
    pub cache_idle: Duration,
    /// The first of the host ids containers run as, each container one of the 65,535
    /// after it of its own, leased on this host (`--sandbox-uid`; a root server's); none:
    /// every container runs as uid 1000.
    pub sandbox_ids: Option<crate::HostUser>,
}

/// A worker's container: its name, and the host id it runs as, free for another once
/// the container is removed.
pub struct Container {
    name: String,
    lease: Option<crate::sandbox::Lease>,
    /// The container's processes (its pids cgroup's `cgroup.procs` on this host).
    tasks: Option<PathBuf>,
}

/// The uid and gid a container runs as without a lease of its own.
const CONTAINER_ID: u32 = 1000;

/// How long a remote engine keeps a cache volume nobody uses: a day.
pub const CACHE_IDLE: Duration = Duration::from_secs(24 * 3600);

/// How often a remote engine's cache volumes are looked over.
const TIDY_EVERY: Duration = Duration::from_secs(3600);

/// Where a Docker engine is, as `--docker-host` names it.
#[derive(Debug, Clone, Default)]
pub struct EngineAddr {
    /// `unix:///path`, `tcp://host:port` or `ssh://[user@]host`; none: `DOCKER_HOST`, else
    /// the local socket.
    pub url: Option<String>,
    /// For `tcp://`: a folder with `ca.pem`, `cert.pem` and `key.pem` (the docker CLI's
    /// `DOCKER_CERT_PATH`): TLS, the engine checked against the CA, this client by its
    /// certificate.
    pub tls: Option<PathBuf>,
}

impl EngineAddr {
    /// Whether the engine shares this host's disk (a local socket).
    pub fn is_local(&self) -> bool {
        self.url.as_deref().is_none_or(|u| u.starts_with("unix://"))
    }

    pub fn describe(&self) -> String {
        self.url
            .clone()
            .unwrap_or_else(|| "the local socket".into())
    }
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
    /// Cache volumes being filled (remote engines), one filler each.
    filling: tokio::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// When this server last used each cache volume, and when it started (the last use
    /// of those it never used).
    used: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    since: std::time::Instant,
    /// When the cache volumes were last looked over.
    tidied: std::sync::Mutex<Option<std::time::Instant>>,
}

/// Connects to the engine of DOCKER_HOST (or the local socket), negotiating the API
/// version (Debian's engine is older than bollard's default).
pub async fn connect() -> Result<(Docker, String), RunnerError> {
    connect_to(&EngineAddr::default()).await
}

/// Connects to the engine at `addr`, negotiating the API version.
pub async fn connect_to(addr: &EngineAddr) -> Result<(Docker, String), RunnerError> {
    use bollard::API_DEFAULT_VERSION;
    let fail = |e: &dyn std::fmt::Display| {
        RunnerError::Sandbox(format!(
            "cannot reach the Docker engine at {}: {e}",
            addr.describe()
        ))
    };
    // bollard's timeout covers a whole request, an environment's upload included.
    const TIMEOUT: u64 = 1800;
    let docker = match addr.url.as_deref() {
        None => Docker::connect_with_local_defaults(),
        Some(u) if u.starts_with("unix://") => {
            Docker::connect_with_unix(u, TIMEOUT, API_DEFAULT_VERSION)
        }
        Some(u) if u.starts_with("tcp://") => match &addr.tls {
            Some(dir) => Docker::connect_with_ssl(
                u,
                &dir.join("key.pem"),
                &dir.join("cert.pem"),
                &dir.join("ca.pem"),
                TIMEOUT,
                API_DEFAULT_VERSION,
            ),
            // The engine's API is root on its machine, and a call's inputs and secrets
            // cross it: never in the clear.
            None => {
                return Err(RunnerError::Sandbox(format!(
                    "the Docker engine at {u} needs TLS: give --docker-tls DIR (ca.pem, cert.pem, key.pem)"
                )));
            }
        },
        // The system's ssh client, with its configuration (keys, ports: a Host entry),
        // running `docker system dial-stdio` on the engine's machine.
        Some(u) if u.starts_with("ssh://") => {
            let host = u.trim_start_matches("ssh://");
            if host.rsplit('@').next().is_some_and(|h| h.contains(':')) {
                // The client would take "host:port" for a host name.
                return Err(RunnerError::Sandbox(format!(
                    "a port in '{u}' is not carried to ssh: name the engine's machine in a Host entry of the ssh configuration (HostName, Port, IdentityFile) and give ssh://that-name"
                )));
            }
            Docker::connect_with_ssh(u, TIMEOUT, API_DEFAULT_VERSION, None)
        }
        Some(u) => {
            return Err(RunnerError::Sandbox(format!(
                "unsupported Docker host '{u}': use unix:///path, tcp://host:port (with --docker-tls DIR) or ssh://[user@]host"
            )));
        }
    }
    .map_err(|e| fail(&e))?;
    let docker = docker.negotiate_version().await.map_err(|e| fail(&e))?;
    let v = docker.version().await.map_err(|e| fail(&e))?;
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
            filling: Default::default(),
            used: Default::default(),
            since: std::time::Instant::now(),
            // The first sweep an hour after start: one at start would race the first
            // calls' fills (with a short `cache_idle`, it took a volume being filled).
            tidied: std::sync::Mutex::new(Some(std::time::Instant::now())),
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
        // The work volumes of a remote engine's containers.
        let filters = HashMap::from([("label", vec![format!("lh.owner={}", self.config.owner)])]);
        let opts = ListVolumesOptionsBuilder::new().filters(&filters).build();
        if let Ok(list) = self.docker.list_volumes(Some(opts)).await {
            for v in list.volumes.unwrap_or_default() {
                let _ = self
                    .docker
                    .remove_volume(
                        &v.name,
                        None::<bollard::query_parameters::RemoveVolumeOptions>,
                    )
                    .await;
            }
        }
        Ok(ids.len())
    }

    /// Removes a container, waiting at most half a minute for its engine.
    /// Whether the container is gone (removed now, or no longer there).
    async fn remove(&self, id: &str) -> bool {
        let opts = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        let removed = tokio::time::timeout(
            Duration::from_secs(30),
            self.docker.remove_container(id, Some(opts)),
        )
        .await;
        matches!(
            removed,
            Ok(Ok(())
                | Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404,
                    ..
                }))
        )
    }

    /// The file listing a running container's processes on this host: its first
    /// process's pids cgroup (cgroup v1), or its cgroup (v2).
    async fn tasks_of(&self, id: &str) -> Option<PathBuf> {
        if self.config.remote {
            return None;
        }
        let info = self.docker.inspect_container(id, None).await.ok()?;
        let pid = info.state?.pid.filter(|p| *p > 0)?;
        let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let mut unified = None;
        for line in groups.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let path = path.trim_start_matches('/');
            if controllers.split(',').any(|c| c == "pids") {
                return Some(
                    Path::new("/sys/fs/cgroup/pids")
                        .join(path)
                        .join("cgroup.procs"),
                );
            }
            if controllers.is_empty() {
                unified = Some(Path::new("/sys/fs/cgroup").join(path).join("cgroup.procs"));
            }
        }
        unified
    }

    /// Removes the cache volumes of a remote engine that this server has not used for
    /// `cache_idle` and no container uses: the marker goes first (no new user finds
    /// the volume), then the volume; one still in use keeps it, and gets its marker
    /// back. How many were removed.
    pub async fn evict_cache(&self) -> usize {
        if !self.config.remote {
            return 0;
        }
        let filters = HashMap::from([("label", vec!["lh.cache".to_string()])]);
        let opts = ListVolumesOptionsBuilder::new().filters(&filters).build();
        let Ok(list) = self.docker.list_volumes(Some(opts)).await else {
            return 0;
        };
        let volumes = list.volumes.unwrap_or_default();
        // A filled volume's marker: the volume whose `lh.volume` label names it.
        let markers: HashMap<String, (String, HashMap<String, String>)> = volumes
            .iter()
            .filter_map(|v| {
                v.labels
                    .get("lh.volume")
                    .map(|of| (of.clone(), (v.name.clone(), v.labels.clone())))
            })
            .collect();
        // By the cache's name (its key): when this server last asked for it.
        let idle = |cache: &str| {
            let last = self
                .used
                .lock()
                .ok()
                .and_then(|u| u.get(cache).copied())
                .unwrap_or(self.since);
            last.elapsed() >= self.config.cache_idle
        };
        let mut removed = 0;
        for v in volumes
            .iter()
            .filter(|v| !v.labels.contains_key("lh.volume"))
        {
            if !idle(v.labels.get("lh.cache").map_or("", String::as_str)) {
                continue;
            }
            let marker = markers.get(&v.name);
            if let Some((m, _)) = marker {
                self.drop_volume(m).await;
            }
            if self.drop_volume(&v.name).await {
                // In use: its marker comes back.
                if let Some((m, labels)) = marker {
                    let _ = self
                        .docker
                        .create_volume(VolumeCreateRequest {
                            name: Some(m.clone()),
                            labels: Some(labels.clone()),
                            ..Default::default()
                        })
                        .await;
                }
            } else if !self.is_filled(&v.name).await {
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(
                volumes = removed,
                "removed idle cache volumes of the engine"
            );
        }
        removed
    }

    /// Whether `volume` is a cache volume lh filled (the engine makes an empty one, with
    /// no label, for a container that names a volume that is gone).
    /// Whether the engine did not answer is not a no: that is `true` (a transient
    /// error must not drop a good volume).
    async fn is_filled(&self, volume: &str) -> bool {
        match self.docker.inspect_volume(volume).await {
            Ok(v) => v.labels.contains_key("lh.cache"),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => false,
            Err(_) => true,
        }
    }

    /// Removes a volume; whether the engine refused because a container uses it.
    async fn drop_volume(&self, volume: &str) -> bool {
        matches!(
            self.docker
                .remove_volume(
                    volume,
                    None::<bollard::query_parameters::RemoveVolumeOptions>,
                )
                .await,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                ..
            })
        )
    }

    /// The volumes of a container on a remote engine: the environment and the code
    /// snapshot as cache volumes of the engine (filled once, by their key), and a work
    /// volume of its own in the engine's memory, as large as the call's disk limit.
    async fn remote_volumes(
        &self,
        env: &Env,
        site: &Path,
        code: &Path,
        limits: &Limits,
        name: &str,
        user: u32,
    ) -> Result<Mounts, RunnerError> {
        let image = self.image(&env.python_version);
        let env_volume = format!("lh-env-{}", short_hash(&env.key));
        let code_volume = format!("lh-code-{}", short_hash(&code.display().to_string()));
        let env_volume = self.cache_volume(&env_volume, site, &image).await?;
        let code_volume = self.cache_volume(&code_volume, code, &image).await?;
        let work = work_volume(name);
        let size = limits.disk_bytes.unwrap_or(DEFAULT_DISK_BYTES);
        self.docker
            .create_volume(VolumeCreateRequest {
                name: Some(work.clone()),
                driver: Some("local".into()),
                driver_opts: Some(HashMap::from([
                    ("type".to_string(), "tmpfs".to_string()),
                    ("device".to_string(), "tmpfs".to_string()),
                    (
                        "o".to_string(),
                        format!("size={size},uid={user},gid={user},mode=0700,nosuid,nodev"),
                    ),
                ])),
                labels: Some(HashMap::from([(
                    "lh.owner".to_string(),
                    self.config.owner.clone(),
                )])),
                ..Default::default()
            })
            .await
            .map_err(docker_err("cannot create the container's work volume"))?;
        Ok(Mounts::Volumes {
            env: env_volume,
            code: code_volume,
            work,
        })
    }

    /// The volume of the engine holding the files of `src` under the key `name`,
    /// filled once: each filler fills a volume of its own (`<name>-<unique>`), then
    /// publishes it by creating the marker volume `<name>.ready` labelled with its name;
    /// the engine keeps the first marker made, so every server sharing the engine uses
    /// the one volume published first, and never one partly filled.
    async fn cache_volume(
        &self,
        name: &str,
        src: &Path,
        image: &str,
    ) -> Result<String, RunnerError> {
        let ready = format!("{name}.ready");
        if let Ok(mut used) = self.used.lock() {
            used.insert(name.to_string(), std::time::Instant::now());
        }
        // The volume the marker names, if it is a filled cache volume; a marker naming
        // one that is gone, or a volume the engine made empty in its place, is dropped
        // (and the cache filled again).
        let published = || async {
            let v = self
                .docker
                .inspect_volume(&ready)
                .await
                .ok()
                .and_then(|v| v.labels.get("lh.volume").cloned())?;
            if self.is_filled(&v).await {
                return Some(v);
            }
            self.drop_volume(&ready).await;
            self.drop_volume(&v).await;
            None
        };
        if let Some(v) = published().await {
            return Ok(v);
        }
        let lock = {
            let mut m = self.filling.lock().await;
            m.entry(name.to_string()).or_default().clone()
        };
        let _filling = lock.lock().await;
        if let Some(v) = published().await {
            return Ok(v);
        }
        let mine = format!(
            "{name}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let labels = HashMap::from([("lh.cache".to_string(), name.to_string())]);
        self.docker
            .create_volume(VolumeCreateRequest {
                name: Some(mine.clone()),
                labels: Some(labels.clone()),
                ..Default::default()
            })
            .await
            .map_err(docker_err("cannot create a volume"))?;
        // A container that never starts: the API writes into its volume.
        let filler = format!("lh-fill-{}", uuid::Uuid::new_v4().simple());
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            network_disabled: Some(true),
            labels: Some(HashMap::from([(
                "lh.owner".to_string(),
                self.config.owner.clone(),
            )])),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                mounts: Some(vec![Mount {
                    target: Some("/fill".into()),
                    source: Some(mine.clone()),
                    typ: Some(MountType::VOLUME),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let remove_mine = || async {
            let _ = self
                .docker
                .remove_volume(
                    &mine,
                    None::<bollard::query_parameters::RemoveVolumeOptions>,
                )
                .await;
        };
        if let Err(e) = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&filler).build()),
                body,
            )
            .await
        {
            remove_mine().await;
            return Err(docker_err("cannot create a container to fill a volume")(e));
        }
        let filled = self
            .docker
            .upload_to_container(
                &filler,
                Some(UploadToContainerOptionsBuilder::new().path("/fill").build()),
                bollard::body_try_stream(crate::transfer::packed(src.to_path_buf())),
            )
            .await
            .map_err(docker_err("cannot fill a volume"));
        self.remove(&filler).await;
        if let Err(e) = filled {
            remove_mine().await;
            return Err(e);
        }
        // Published: the marker names the volume; one made first by another server
        // stays, and names its volume instead.
        let mut marker = labels;
        marker.insert("lh.volume".to_string(), mine.clone());
        let publish = || async {
            self.docker
                .create_volume(VolumeCreateRequest {
                    name: Some(ready.clone()),
                    labels: Some(marker.clone()),
                    ..Default::default()
                })
                .await
                .map_err(docker_err("cannot create a volume"))
        };
        publish().await?;
        if published().await.is_none() {
            // A marker that names no volume (an earlier lh's): replaced.
            let _ = self
                .docker
                .remove_volume(
                    &ready,
                    None::<bollard::query_parameters::RemoveVolumeOptions>,
                )
                .await;
            publish().await?;
        }
        match published().await {
            Some(v) if v == mine => {
                tracing::info!(volume = %mine, "filled a cache volume on the engine");
                Ok(mine)
            }
            Some(v) => {
                remove_mine().await;
                Ok(v)
            }
            None => {
                remove_mine().await;
                Err(RunnerError::Worker(format!(
                    "the cache volume {name} has a marker that names no volume"
                )))
            }
        }
    }

    /// Removes the work volume of container `name` (a remote engine's).
    async fn remove_work_volume(&self, name: &str) {
        if self.config.remote {
            let _ = self
                .docker
                .remove_volume(
                    &work_volume(name),
                    None::<bollard::query_parameters::RemoveVolumeOptions>,
                )
                .await;
        }
    }

    /// The container's settings: the mounts, the isolation and the limits.
    fn container(
        &self,
        env: &Env,
        limits: &Limits,
        mounts: Mounts,
        user: u32,
    ) -> ContainerCreateBody {
        let memory = limits.memory_bytes.unwrap_or(self.config.default_memory) as i64;
        let (binds, mounts) = match mounts {
            // The environment, the container's own code snapshot (and no other
            // project's code), its own writable folder.
            Mounts::Host { site, code, dir } => (
                Some(vec![
                    format!("{}:{ENV}:ro", site.display()),
                    format!("{}:{CODE}:ro", code.display()),
                    format!("{}:{WORK}:rw", dir.display()),
                ]),
                None,
            ),
            Mounts::Volumes { env, code, work } => {
                let volume = |source: String, target: &str, read_only: bool| Mount {
                    target: Some(target.into()),
                    source: Some(source),
                    typ: Some(MountType::VOLUME),
                    read_only: Some(read_only),
                    ..Default::default()
                };
                (
                    None,
                    Some(vec![
                        volume(env, ENV, true),
                        volume(code, CODE, true),
                        volume(work, WORK, false),
                    ]),
                )
            }
        };
        let host = HostConfig {
            binds,
            mounts,
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            memory: Some(memory),
            memory_swap: Some(memory),
            nano_cpus: limits.cpus_milli.map(|m| i64::from(m) * 1_000_000),
            pids_limit: Some(self.config.pids_limit),
            // No one file larger than the call's disk limit (one unlinked while open
            // escapes the folder's measure, not this), and a few thousand descriptors.
            ulimits: Some(
                limits
                    .disk_bytes
                    .map(|b| ("fsize", b))
                    .into_iter()
                    .chain([("nofile", crate::runtime::MAX_OPEN_FILES)])
                    .map(|(name, n)| bollard::models::ResourcesUlimits {
                        name: Some(name.into()),
                        soft: Some(n as i64),
                        hard: Some(n as i64),
                    })
                    .collect(),
            ),
            tmpfs: Some(HashMap::from([(
                "/tmp".to_string(),
                format!("rw,nosuid,nodev,size={TMP_BYTES}"),
            )])),
            // The engine keeps no log of its own: lh reads the attached stream and keeps
            // its tail, and the engine's log (json-file by default) would keep whatever a
            // call prints on the engine's disk, unbounded, while the container lives.
            log_config: Some(bollard::models::HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            // No init process: the harness is the container's first process. An init
            // (docker-init) would hold the container's stdin and stdout and stay
            // dumpable, so a call could open its /proc/1/fd/0 and 1 and read the next
            // call's request or write answers of its own; the harness makes itself not
            // dumpable, and reaps what calls leave (it is their subreaper anyway).
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image(&env.python_version)),
            // The harness under lh's seccomp filter for untrusted code, on top of the
            // engine's profile (which lets descriptors be sent over sockets).
            entrypoint: Some(crate::sandbox::container_entrypoint()),
            user: Some(format!("{user}:{user}")),
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
    type Handle = Container;

    const NAME: &'static str = "docker";
    const NOUN: &'static str = "container";
    const NOT_STARTED: &'static str = "the container's worker did not start";
    const READY_TIMEOUT: Duration = Duration::from_secs(60);

    async fn start(
        &self,
        env: &Env,
        code: &Path,
        limits: &Limits,
    ) -> Result<Worker<Container>, RunnerError> {
        if !self.has_image(&env.python_version).await {
            return Err(RunnerError::Sandbox(format!(
                "the runtime image {} does not exist: build it with `make images` (images/build.sh)",
                self.image(&env.python_version)
            )));
        }
        let site = site_packages(&env.dir)?;
        // A host id of the container's own: what the kernel counts per user (processes,
        // inotify instances, pipe buffers) no container takes from another.
        let lease = match &self.config.sandbox_ids {
            Some(first) => Some(crate::sandbox::Ids::new(*first).lease()?),
            None => None,
        };
        let user = lease.as_ref().map_or(CONTAINER_ID, |l| l.user.uid);
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.config.work_root.join(format!("container-{unique}"));
        std::fs::create_dir_all(&dir)?;
        open_to_all(&dir)?;
        // The container is known by its name: the work volume of a remote one is named
        // after it.
        let name = format!("lh-worker-{unique}");
        // On a remote engine, the container's cache volumes are checked once it holds
        // them: a volume evicted between its marker and the container's creation comes
        // back empty (the engine makes it), and the start is tried once more.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mounts = if self.config.remote {
                match self
                    .remote_volumes(env, &site, code, limits, &name, user)
                    .await
                {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&dir);
                        return Err(e);
                    }
                }
            } else {
                Mounts::Host {
                    site: site.clone(),
                    code: code.to_path_buf(),
                    dir: dir.clone(),
                }
            };
            let caches = match &mounts {
                Mounts::Volumes { env, code, .. } => vec![env.clone(), code.clone()],
                Mounts::Host { .. } => Vec::new(),
            };
            let body = self.container(env, limits, mounts, user);
            if let Err(e) = self
                .docker
                .create_container(
                    Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                    body,
                )
                .await
            {
                self.remove_work_volume(&name).await;
                let _ = std::fs::remove_dir_all(&dir);
                return Err(docker_err("cannot create a container")(e));
            }
            let mut empty = Vec::new();
            for v in &caches {
                if !self.is_filled(v).await {
                    empty.push(v.clone());
                }
            }
            if empty.is_empty() {
                break;
            }
            self.remove(&name).await;
            self.remove_work_volume(&name).await;
            for v in &empty {
                self.drop_volume(v).await;
            }
            if attempts >= 2 {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(RunnerError::Worker(format!(
                    "the engine's cache volumes {} went while the container was made",
                    empty.join(", ")
                )));
            }
        }
        let id = name;
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
                self.remove_work_volume(&id).await;
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        // One stream carries both stdout and stderr, in frames.
        let tasks = self.tasks_of(&id).await;
        let container = Container {
            name: id,
            lease,
            tasks,
        };
        let (worker, mut out) = Worker::wire(container, dir, attached.input);
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

    async fn stop(&self, mut worker: Worker<Container>) {
        // A container the engine did not remove may still run as its host id: the id is
        // never handed to another.
        if !self.remove(&worker.handle.name).await
            && let Some(lease) = worker.handle.lease.take()
        {
            tracing::error!(
                container = %worker.handle.name,
                uid = lease.user.uid,
                "a stopped container was not removed; its host id is not reused"
            );
            std::mem::forget(lease);
        }
        self.remove_work_volume(&worker.handle.name).await;
        let _ = std::fs::remove_dir_all(&worker.dir);
    }

    /// Out of memory, or the container's exit code.
    async fn why_dead(&self, container: &mut Container) -> String {
        let id = &container.name;
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

    /// On a remote engine, an invocation's folder crosses the container's attached
    /// channel (the engine's disk is not this host's).
    fn over_channel(&self) -> bool {
        self.config.remote
    }

    /// A remote container's work volume is bounded by its size; here, the folder is
    /// measured while the call runs.
    fn measures_folder(&self) -> bool {
        !self.config.remote
    }

    fn tasks(&self, container: &Container) -> Option<PathBuf> {
        container.tasks.clone()
    }

    /// The engine answers its ping within two seconds.
    async fn reachable(&self) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(2), self.docker.ping()).await,
            Ok(Ok(_))
        )
    }

    fn describe(&self, live: usize, idle: usize) -> String {
        format!(
            "docker (engine {}{}), {} containers ({} warm, at most {})",
            self.version,
            if self.config.remote {
                ", remote: no shared disk"
            } else {
                ""
            },
            live,
            idle,
            self.config.max_containers
        )
    }

    /// Removes busy containers too, and any other this server's owner label marks.
    async fn shutdown(&self) {
        let _ = self.remove_owned().await;
    }

    async fn cleared(&self) -> bool {
        self.owned().await.is_ok_and(|c| c.is_empty())
    }

    /// Once an hour, a remote engine's idle cache volumes go.
    async fn tidy(&self) {
        let due = {
            let Ok(mut t) = self.tidied.lock() else {
                return;
            };
            let due = t.is_none_or(|t| t.elapsed() >= TIDY_EVERY);
            if due {
                *t = Some(std::time::Instant::now());
            }
            due
        };
        if due {
            self.evict_cache().await;
        }
    }
}

/// Where a container's environment, code and folder come from.
enum Mounts {
    /// Folders of this host (an engine on this machine).
    Host {
        site: PathBuf,
        code: PathBuf,
        dir: PathBuf,
    },
    /// Volumes of the engine (an engine that shares no disk with the server).
    Volumes {
        env: String,
        code: String,
        work: String,
    },
}

/// The work volume of container `name`.
fn work_volume(name: &str) -> String {
    name.replacen("lh-worker-", "lh-work-", 1)
}

/// A volume name part for a key of any spelling.
fn short_hash(key: &str) -> String {
    blake3::hash(key.as_bytes()).to_hex()[..32].to_string()
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
/// Through the opened folder: a link a container swapped in is never followed.
fn open_to_all(dir: &Path) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags, fchmod, openat};
    let folder = crate::sandbox::open_folder(dir)?;
    fchmod(&folder, Mode::from_raw_mode(0o777))?;
    // The call's secrets, for the container's user (the call removes the file).
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match openat(&folder, crate::protocol::SECRETS_FILE, flags, Mode::empty()) {
        Ok(secrets) => fchmod(&secrets, Mode::from_raw_mode(0o644))?,
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
