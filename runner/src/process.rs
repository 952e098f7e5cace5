//! The process runtime: the pooled runtime over a launcher whose workers are local
//! processes, sandboxed with bubblewrap (no network, a read-only view of only the
//! system, the interpreter, the environment and the worker's own code snapshot, a
//! private writable folder, a private /tmp of bounded size), limited in address space,
//! and kept warm: a worker is a parent that forks a fresh process for each invocation
//! (`python/lh/_worker.py`), so a warm invocation starts no interpreter and imports
//! nothing it already has, and keeps no state of the one before.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::env::Env;
use crate::error::RunnerError;
use crate::pool::PoolConfig;
use crate::pooled::PooledRuntime;
use crate::runtime::{Limits, TMP_BYTES};
use crate::sandbox::{Code, HostUser, Jail, SANDBOX_ID, proc_and_dev};
use crate::worker::{Launcher, Worker, WorkerKey};

/// How the process runtime runs workers.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// Where workers get their private folders.
    pub work_root: PathBuf,
    /// Sandbox workers with bubblewrap (refuse to run when it is missing).
    pub sandbox: bool,
    /// Stop a worker idle for this long.
    pub idle_timeout: Duration,
    /// At most this many idle workers per environment and limits.
    pub max_idle: usize,
    /// The host user sandboxed workers run as (none: the server's;
    /// [`HostUser::for_sandboxes`]).
    pub sandbox_user: Option<HostUser>,
}

/// The process runtime: warm local workers in a pool.
pub type ProcessRuntime = PooledRuntime<ProcessLauncher>;

/// Starts and stops workers as local processes.
#[derive(Debug)]
pub struct ProcessLauncher {
    config: ProcessConfig,
    /// How sandboxed workers start (none: not sandboxed).
    jail: Option<Jail>,
}

impl PooledRuntime<ProcessLauncher> {
    /// The runtime; it refuses to run without bubblewrap when it is to sandbox.
    pub fn new(config: ProcessConfig) -> Result<Arc<ProcessRuntime>, RunnerError> {
        std::fs::create_dir_all(&config.work_root)?;
        let jail = match config.sandbox {
            true => Some(Jail::new(&config.work_root, config.sandbox_user)?),
            false => None,
        };
        let pool = PoolConfig {
            idle_timeout: config.idle_timeout,
            max_workers: None,
            max_idle: Some(config.max_idle),
        };
        Ok(PooledRuntime::with_launcher(
            ProcessLauncher { config, jail },
            pool,
        ))
    }
}

impl ProcessLauncher {
    /// The worker's command, its sandbox run as host user `user` (a lease; none: the
    /// jail's own).
    fn command(
        &self,
        env: &Env,
        code: &Path,
        limits: &Limits,
        dir: &Path,
        user: Option<HostUser>,
    ) -> Command {
        let mut inner: Vec<String> = Vec::new();
        // The address space, and the size of any one file (a file unlinked while open
        // escapes the folder's measure, not this).
        let mut rlimits: Vec<String> = Vec::new();
        if let Some(bytes) = limits.memory_bytes {
            rlimits.push(format!("--as={bytes}"));
        }
        if let Some(bytes) = limits.disk_bytes {
            rlimits.push(format!("--fsize={bytes}"));
        }
        // Descriptors: each process's own few thousand (files sent over a socket and
        // not yet received count against it too).
        rlimits.push(format!("--nofile={}", crate::runtime::MAX_OPEN_FILES));
        if !rlimits.is_empty() {
            inner.push("prlimit".into());
            inner.extend(rlimits);
            inner.push("--".into());
        }
        inner.extend([
            env.python.display().to_string(),
            "-m".into(),
            "lh._worker".into(),
        ]);
        let mut cmd = match &self.jail {
            Some(jail) => {
                let mut c = jail.args(Code::Untrusted);
                // /tmp first: binds under it come after and stay visible.
                // No capability inside: a server started as root would otherwise give
                // its functions every capability in their namespaces (ptrace of the
                // worker, reading its descriptors through /proc).
                c.args(["--die-with-parent", "--new-session", "--unshare-all"]);
                // No user namespace inside: in one, a function would hold capabilities
                // over what its host user owns (cgroups, file capabilities on what it
                // writes).
                c.args(["--unshare-user", "--disable-userns"]);
                c.args(["--cap-drop", "ALL"]);
                // As an unprivileged user: the server's uid (root, say) is not what a
                // function sees itself as. PID 1 is bubblewrap's own init, not the
                // worker: a package's `.pth` runs in the worker at its start and could
                // clear the worker's parent-death signal, never the init's (no ptrace),
                // which dies with the worker's bubblewrap and takes the whole PID
                // namespace with it. Its environment is cleared (`Jail::command`), so
                // its /proc entries tell nothing of the server.
                c.args(["--uid", SANDBOX_ID, "--gid", SANDBOX_ID]);
                c.args(["--size", &TMP_BYTES.to_string(), "--tmpfs", "/tmp"]);
                for sys in ["/usr", "/bin", "/lib", "/lib64", "/sbin"] {
                    c.args(["--ro-bind-try", sys, sys]);
                }
                c.args(["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]);
                c.args(["--ro-bind-try", "/etc/localtime", "/etc/localtime"]);
                // The worker's own code snapshot, and no other project's code.
                for ro in [&env.base_prefix, &env.dir, code] {
                    c.bind(ro, false);
                }
                c.args(proc_and_dev());
                c.bind(dir, true);
                // The sandbox's own root (bubblewrap's tmpfs, and the folders it made
                // there) read-only: a call writes only where the harness empties
                // between calls (a file under `/` stayed for every later call).
                c.args(["--remount-ro", "/"]);
                c.arg("--chdir").arg(dir);
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
                // The worker's /tmp is its own: the harness empties it between calls.
                c.args(["--setenv", "LH_PRIVATE_TMP", "1"]);
                c.args(["--setenv", "LANG", "C.UTF-8", "--"]);
                c.args(&inner);
                // Bubblewrap's own environment too, not only its child's (`command`
                // clears it): it is the server's, secrets included, and readable through
                // /proc wherever a bubblewrap process is in view.
                jail.command_as(c, user)
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
}

/// A worker process, and the cgroups holding it and its children (where the server may
/// make them): its memory, `/dev/shm` and memfd pages included, and its processes.
pub struct Sandboxed {
    child: Child,
    groups: Option<crate::env::BuildGroups>,
    /// The host user it runs as, free for another worker once the groups are empty.
    lease: Option<crate::sandbox::Lease>,
}

impl Drop for Sandboxed {
    fn drop(&mut self) {
        // A worker whose processes would not all die keeps its host user: no other
        // worker runs as the uid its leftovers still hold.
        if let Some(groups) = &self.groups
            && !groups.kill_all()
            && let Some(lease) = self.lease.take()
        {
            tracing::error!(
                uid = lease.user.uid,
                "a stopped worker's processes would not all die; its host user is not reused"
            );
            std::mem::forget(lease);
        }
    }
}

/// The processes and threads of one worker together (its calls' children included).
const WORKER_TASKS: u32 = 1024;

#[async_trait::async_trait]
impl Launcher for ProcessLauncher {
    type Handle = Sandboxed;

    const NAME: &'static str = "process";
    const NOUN: &'static str = "worker";
    const NOT_STARTED: &'static str = "the worker did not start";
    const READY_TIMEOUT: Duration = Duration::from_secs(120);

    /// The process runtime does not enforce a CPU share, and measures a call's folder
    /// per call, so workers of any share or disk limit are alike.
    fn key(&self, env: &Env, code: &Path, limits: &Limits) -> WorkerKey {
        WorkerKey {
            tenant: String::new(),
            env: env.key.clone(),
            code: code.to_path_buf(),
            memory_bytes: limits.memory_bytes,
            cpus_milli: None,
            disk_bytes: None,
        }
    }

    /// The sandbox's user writes the call's output into the folder, and reads its
    /// secrets.
    fn hand_over(&self, inside: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let Some(jail) = &self.jail else {
            return Ok(());
        };
        if jail.user().is_none() {
            return Ok(());
        }
        // The worker's user: the one its folder was handed to.
        let Some(worker) = inside.parent() else {
            return Ok(());
        };
        let m = std::fs::symlink_metadata(worker)?;
        let user = HostUser {
            uid: m.uid(),
            gid: m.gid(),
        };
        crate::sandbox::give_folder(inside, crate::protocol::SECRETS_FILE, user)
    }

    fn tasks(&self, handle: &Sandboxed) -> Option<PathBuf> {
        handle.groups.as_ref().and_then(|g| g.procs())
    }

    async fn start(
        &self,
        env: &Env,
        code: &Path,
        limits: &Limits,
    ) -> Result<Worker<Sandboxed>, RunnerError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.config.work_root.join(format!("worker-{id}"));
        std::fs::create_dir_all(&dir)?;
        // A host user of the worker's own: what the kernel counts per user (processes,
        // inotify instances, pipe buffers) no worker takes from another.
        let lease = match &self.jail {
            Some(jail) => jail.lease()?,
            None => None,
        };
        let user = lease.as_ref().map(|l| l.user);
        if let Some(jail) = &self.jail {
            jail.give_to(&dir, user)?;
        }
        let mut cmd = self.command(env, code, limits, &dir, user);
        // Sandboxed workers in cgroups of their own: the address space bounds one
        // process, not its children, nor memory it never maps (memfd, /dev/shm).
        let groups = match self.config.sandbox {
            true => crate::env::BuildGroups::new(WORKER_TASKS, limits.memory_bytes),
            false => None,
        };
        if let Some(g) = &groups {
            let mut joined = g.join(&cmd);
            joined
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            cmd = joined;
        } else if self.config.sandbox {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    "workers of the process runtime are held to an address space, not to cgroups: the server may make none (it runs as root with cgroup v1's pids and memory controllers, or v2 with them delegated)"
                )
            });
        }
        let mut child = cmd
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
        let handle = Sandboxed {
            child,
            groups,
            lease,
        };
        Ok(Worker::piped(handle, dir, stdin, stdout, stderr))
    }

    /// Kills the worker; its folder (and its cgroups) go once it has exited.
    async fn stop(&self, mut worker: Worker<Sandboxed>) {
        let _ = worker.handle.child.start_kill();
        tokio::spawn(async move {
            let _ = worker.handle.child.wait().await;
            // Nothing of the worker is left running when its folder goes.
            if let Some(groups) = &worker.handle.groups {
                let _ = groups.kill_all();
            }
            let _ = std::fs::remove_dir_all(&worker.dir);
        });
    }

    async fn why_dead(&self, handle: &mut Sandboxed) -> String {
        match tokio::time::timeout(Duration::from_secs(5), handle.child.wait()).await {
            Ok(Ok(s)) => describe_exit(s),
            _ => "it stopped answering".to_string(),
        }
    }

    fn describe(&self, _live: usize, idle: usize) -> String {
        let sandbox = if self.config.sandbox {
            "bubblewrap sandbox"
        } else {
            "no sandbox"
        };
        format!("process ({sandbox}), {idle} warm workers")
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
