//! What an environment's build may use, and how its steps run within it: each step's
//! processes held to an address space and a file size (`prlimit`), all of a build's
//! together to its tasks and memory in cgroups of its own (emptied when a step ends,
//! swept when a dead server left them), its folders to its disk (measured while each
//! step runs), each step and the whole build to their time.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tokio::process::Command;

use super::BuildBounds;
use crate::error::RunnerError;
use crate::tools::find_on_path;

/// What one environment's build may use: every step's processes are held to an address
/// space and a file size (`prlimit`); where the server may make cgroups, all of them
/// together to [`BUILD_TASKS`] processes and threads and to the build's memory (tmpfs
/// pages included); its folders to the build's disk, measured while each step runs; and
/// all of its steps together stop at [`ENV_BUDGET`]. No step can make a user namespace
/// (in one, it would hold capabilities over what the server's uid owns: its cgroups,
/// file capabilities). A hostile `setup.py` (or a `.pth` in any step that starts an
/// interpreter) thus cannot take the host's memory, fill its disk, fork without end,
/// lift its own limits, or hold a build slot for ever.
pub(crate) struct BuildLimits {
    pub(super) prlimit: PathBuf,
    deadline: tokio::time::Instant,
    pub(super) groups: Option<BuildGroups>,
    pub(super) disk_bytes: u64,
    /// The folders the build writes (the environment, the source builds' work).
    watched: Mutex<Vec<PathBuf>>,
}

/// The address space of any one process of a build step (compilers of large C++
/// packages need a few GiB; an allocation past this fails, it does not swap the host).
pub(super) const BUILD_MEMORY: u64 = 8 << 30;
/// The largest file a build step may write (a wheel, an object file).
pub(super) const BUILD_FILE: u64 = 4 << 30;
/// A build step's `/tmp` (in memory, charged to the build's memory).
pub(super) const BUILD_TMP: u64 = 2 << 30;
/// Processes and threads of one build step together (a parallel compile needs dozens).
const BUILD_TASKS: u32 = 1024;
/// The longest all of one environment's build steps may take together.
const ENV_BUDGET: std::time::Duration = std::time::Duration::from_secs(60 * 60);
/// How often a running step's folders are measured.
const DISK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The cgroups of one environment's build (pids and memory), removed when dropped
/// (their processes are gone by then: each step's PID namespace ends with the step).
pub(crate) struct BuildGroups {
    /// One folder with both controllers (cgroup v2), or one per controller (v1).
    dirs: Vec<PathBuf>,
}

impl BuildGroups {
    /// New cgroups under the server's own: `max_tasks` tasks and `memory` bytes. `None`
    /// where the server may not make them (not root, no such controllers).
    pub(crate) fn new(max_tasks: u32, memory: Option<u64>) -> Option<BuildGroups> {
        // The server's pid in the name: a later server removes what one that died left.
        let name = format!(
            "lh-build-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let [pids, mem, unified, freezer] = own_groups()?;
        let wanted: Vec<(PathBuf, Vec<(&str, String)>)> = match (pids, mem) {
            // The freezer (cgroup v1's own controller; v2's is in every group) stops
            // the processes while their folders are measured.
            (Some(pids), Some(mem)) => [
                (pids.join(&name), vec![("pids.max", max_tasks.to_string())]),
                (
                    mem.join(&name),
                    // TCP buffers are charged apart on v1 (loopback sockets would
                    // hold memory past the limit otherwise).
                    match memory {
                        Some(m) => vec![
                            ("memory.limit_in_bytes", m.to_string()),
                            ("memory.kmem.tcp.limit_in_bytes", m.to_string()),
                        ],
                        None => Vec::new(),
                    },
                ),
            ]
            .into_iter()
            .chain(freezer.map(|f| (f.join(&name), Vec::new())))
            .collect(),
            _ => vec![(
                unified?.join(&name),
                [("pids.max", max_tasks.to_string())]
                    .into_iter()
                    .chain(memory.into_iter().flat_map(|m| {
                        [
                            ("memory.max", m.to_string()),
                            ("memory.swap.max", "0".to_string()),
                        ]
                    }))
                    .collect(),
            )],
        };
        // Dropped (the folders removed) unless every limit is set.
        let mut made = BuildGroups { dirs: Vec::new() };
        for (dir, limits) in wanted {
            std::fs::create_dir(&dir).ok()?;
            made.dirs.push(dir.clone());
            for (file, value) in limits {
                let set = std::fs::write(dir.join(file), value);
                // TCP buffers' own limit is v1's, where kernels keep it.
                if set.is_err() && !file.contains("kmem") {
                    return None;
                }
            }
        }
        Some(made)
    }
}

/// The server's own cgroups: cgroup v1's `pids`, `memory` and `freezer`, and v2's.
fn own_groups() -> Option<[Option<PathBuf>; 4]> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let (mut pids, mut mem, mut unified, mut freezer) = (None, None, None, None);
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        for c in controllers.split(',') {
            match c {
                "pids" => pids = Some(Path::new("/sys/fs/cgroup/pids").join(path)),
                "memory" => mem = Some(Path::new("/sys/fs/cgroup/memory").join(path)),
                "freezer" => freezer = Some(Path::new("/sys/fs/cgroup/freezer").join(path)),
                "" => unified = Some(Path::new("/sys/fs/cgroup").join(path)),
                _ => {}
            }
        }
    }
    Some([pids, mem, unified, freezer])
}

/// Removes the cgroups that servers no longer running left next to this one's (a server
/// killed before it could remove its builds' and workers' groups), killing what still
/// runs in them, and the empty ones of older servers (no pid in the name) untouched for
/// an hour. A running server's groups stay. Returns how many went.
pub fn sweep_build_groups() -> usize {
    let Some(parents) = own_groups() else {
        return 0;
    };
    let mut removed = 0;
    for parent in parents.into_iter().flatten() {
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("lh-build-") else {
                continue;
            };
            let path = e.path();
            match rest.split_once('-') {
                // A dead server's: what its sandboxes left running goes with its groups
                // (dropped, a group kills what is in it, then goes).
                Some((pid, _)) => {
                    let dead = pid.parse::<u32>().is_ok_and(|pid| {
                        pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
                    });
                    if dead {
                        drop(BuildGroups {
                            dirs: vec![path.clone()],
                        });
                    }
                }
                // An older server's, whose pid is not known: only when empty and old.
                None => {
                    let old = e
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > std::time::Duration::from_secs(3600));
                    if old {
                        let _ = std::fs::remove_dir(&path);
                    }
                }
            }
            if !path.exists() {
                removed += 1;
            }
        }
    }
    removed
}

impl BuildGroups {
    /// `cmd`, every process of it in these cgroups: a shell joins them before it becomes
    /// the command, so nothing forks outside them.
    pub(crate) fn join(&self, cmd: &Command) -> Command {
        let step = cmd.as_std();
        let mut joined = Command::new("/bin/sh");
        joined
            .args([
                "-c",
                "n=$0; while [ \"$n\" -gt 0 ]; do echo $$ > \"$1\" || exit 1; shift; n=$((n - 1)); done; exec \"$@\"",
            ])
            .arg(self.dirs.len().to_string())
            .args(self.dirs.iter().map(|d| d.join("cgroup.procs")))
            .arg(step.get_program())
            .args(step.get_args())
            .env_clear();
        for (k, v) in step.get_envs() {
            if let Some(v) = v {
                joined.env(k, v);
            }
        }
        if let Some(dir) = step.get_current_dir() {
            joined.current_dir(dir);
        }
        // What `cmd` would have closed at exec (a sandbox's command), this closes too.
        crate::sandbox::close_inherited_at_exec(&mut joined);
        joined
    }
}

impl BuildGroups {
    /// Kills every process in these groups until none is left (one may fork while the
    /// others die; the pids limit bounds how many). Stopping a sandbox does not rest on
    /// its processes' parent-death signals, which their own code could clear.
    /// The file listing the processes of these groups (the first group's).
    pub(crate) fn procs(&self) -> Option<PathBuf> {
        self.dirs.first().map(|d| d.join("cgroup.procs"))
    }

    /// Whether none is left.
    pub(crate) fn kill_all(&self) -> bool {
        use rustix::process::{Pid, Signal, kill_process};
        // Frozen processes die only once thawed.
        for dir in &self.dirs {
            let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
            if dir.join("cgroup.freeze").exists() {
                let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
            }
        }
        for _ in 0..500 {
            let mut any = false;
            for dir in &self.dirs {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                for pid in procs
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    if let Some(pid) = Pid::from_raw(pid) {
                        any = true;
                        let _ = kill_process(pid, Signal::KILL);
                    }
                }
            }
            if !any {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }
}

impl Drop for BuildGroups {
    fn drop(&mut self) {
        let _ = self.kill_all();
        for dir in &self.dirs {
            // A step killed a moment ago may still be leaving.
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

impl BuildLimits {
    /// The limits of a build starting now; an error if `prlimit` (util-linux) is missing.
    pub(super) fn new(bounds: BuildBounds) -> Result<BuildLimits, RunnerError> {
        let prlimit = find_on_path("prlimit").ok_or_else(|| {
            RunnerError::Environment(
                "environments are built with their steps' memory and file size limited by prlimit, which is not installed (apt-get install util-linux)".into(),
            )
        })?;
        let groups = BuildGroups::new(BUILD_TASKS, Some(bounds.memory_bytes));
        if groups.is_none() {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    "environment builds are not limited in processes or total memory: the server may make no cgroup (it runs as root with cgroup v1's pids and memory controllers, or v2 with them delegated)"
                )
            });
        }
        Ok(BuildLimits {
            prlimit,
            deadline: tokio::time::Instant::now() + ENV_BUDGET,
            groups,
            disk_bytes: bounds.disk_bytes,
            watched: Mutex::new(Vec::new()),
        })
    }

    /// Counts `dir` in the build's disk from now on.
    pub(super) fn watch(&self, dir: &Path) {
        if let Ok(mut w) = self.watched.lock() {
            w.push(dir.to_path_buf());
        }
    }

    /// The file listing the build's processes (its first cgroup's), if it has cgroups.
    pub(super) fn tasks(&self) -> Option<PathBuf> {
        self.groups
            .as_ref()
            .and_then(|g| g.dirs.first())
            .map(|d| d.join("cgroup.procs"))
    }

    /// The folders the build writes so far.
    pub(super) fn watched(&self) -> Vec<PathBuf> {
        self.watched.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// How long the next step may run ([`STEP_TIMEOUT`], or what is left of the budget),
    /// and what to say when it does not end in time.
    pub(super) fn step_timeout(&self) -> (std::time::Duration, String) {
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        if left < STEP_TIMEOUT {
            let said = format!(
                "the environment's build ran past its {} minutes",
                ENV_BUDGET.as_secs() / 60
            );
            (left, said)
        } else {
            let said = format!("it ran past {} minutes", STEP_TIMEOUT.as_secs() / 60);
            (STEP_TIMEOUT, said)
        }
    }
}

/// The freezer of a sandbox's cgroups, found from the file listing its processes:
/// cgroup v1's `freezer` group of the same path as its `pids` group, or v2's
/// `cgroup.freeze` beside it.
pub(crate) enum Freezer {
    V1(PathBuf),
    V2(PathBuf),
}

/// How long a sandbox may take to stop for a measure (a process in the kernel stops when
/// it leaves it); past it, its folders cannot be measured.
const FREEZE_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

impl Freezer {
    /// The freezer of the group whose processes `procs` lists, where there is one: by
    /// the group's path, or where one of its processes is.
    pub(crate) fn of(procs: &Path) -> Option<Freezer> {
        let group = procs.parent()?;
        if let Ok(rest) = group.strip_prefix("/sys/fs/cgroup/pids") {
            let state = Path::new("/sys/fs/cgroup/freezer")
                .join(rest)
                .join("freezer.state");
            if state.exists() {
                return Some(Freezer::V1(state));
            }
        } else if group.join("cgroup.freeze").exists() {
            return Some(Freezer::V2(group.to_path_buf()));
        }
        let pid = std::fs::read_to_string(procs).ok()?;
        let pid = pid.split_whitespace().next()?;
        let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        groups.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let path = path.trim_start_matches('/');
            if controllers.split(',').any(|c| c == "freezer") {
                let state = Path::new("/sys/fs/cgroup/freezer")
                    .join(path)
                    .join("freezer.state");
                return state.exists().then_some(Freezer::V1(state));
            }
            let group = Path::new("/sys/fs/cgroup").join(path);
            (controllers.is_empty() && group.join("cgroup.freeze").exists())
                .then_some(Freezer::V2(group))
        })
    }

    /// Stops every process of the group, and waits until all have stopped; false (and
    /// thawed again) if they did not within [`FREEZE_WITHIN`].
    fn freeze(&self) -> bool {
        let (control, value) = match self {
            Freezer::V1(state) => (state.clone(), "FROZEN"),
            Freezer::V2(group) => (group.join("cgroup.freeze"), "1"),
        };
        if std::fs::write(&control, value).is_err() {
            return false;
        }
        let start = std::time::Instant::now();
        while start.elapsed() < FREEZE_WITHIN {
            let frozen = match self {
                Freezer::V1(state) => {
                    std::fs::read_to_string(state).is_ok_and(|s| s.trim() == "FROZEN")
                }
                Freezer::V2(group) => std::fs::read_to_string(group.join("cgroup.events"))
                    .is_ok_and(|s| s.lines().any(|l| l.trim() == "frozen 1")),
            };
            if frozen {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.thaw();
        false
    }

    /// Lets the group's processes run again.
    pub(crate) fn thaw(&self) {
        let _ = match self {
            Freezer::V1(state) => std::fs::write(state, "THAWED"),
            Freezer::V2(group) => std::fs::write(group.join("cgroup.freeze"), "0"),
        };
    }
}

/// Thaws its freezer when dropped.
struct Thaw<'a>(&'a Freezer);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

/// [`disk_used`] with the processes of `tasks` stopped meanwhile (where their cgroups
/// have a freezer): nothing of the sandbox moves while its folders are walked, so no
/// file can be moved from a folder not walked yet into one walked already, nor a
/// descriptor passed between the looks. Unmeasurable when they would not stop.
pub(crate) fn disk_used_still(dirs: &[PathBuf], tasks: Option<&Path>) -> u64 {
    let freezer = tasks.and_then(Freezer::of);
    let _thaw = match &freezer {
        Some(f) => {
            if !f.freeze() {
                return u64::MAX;
            }
            Some(Thaw(f))
        }
        None => None,
    };
    disk_used(dirs, tasks)
}

/// What `dirs` hold on disk (each file once, however many links it has; links not
/// followed; every entry at least a block, so that countless empty files count), and
/// what files the `tasks` (the build's processes) hold open after they were removed.
/// The folders are walked through opened handles (`O_NOFOLLOW`): however deep, and a
/// link swapped in for a folder is never followed out of it. A folder that cannot be
/// read counts as everything: what cannot be measured is not let through.
pub(crate) fn disk_used(dirs: &[PathBuf], tasks: Option<&Path>) -> u64 {
    use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, openat, statat};
    use rustix::io::Errno;
    const BLOCK: u64 = 4096;
    const DEPTH: usize = 1024;
    let folder = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    fn walk(
        dir: &rustix::fd::OwnedFd,
        seen: &mut std::collections::HashSet<(u64, u64)>,
        total: &mut u64,
        depth: usize,
    ) -> Result<(), Errno> {
        let folder = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if depth > DEPTH {
            return Err(Errno::LOOP);
        }
        for entry in Dir::read_from(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let st = match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            };
            #[allow(clippy::unnecessary_cast)]
            let (dev, ino, blocks) = (st.st_dev as u64, st.st_ino as u64, st.st_blocks as u64);
            if seen.insert((dev, ino)) {
                *total += (blocks * 512).max(BLOCK);
            }
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                match openat(dir, name, folder, Mode::empty()) {
                    Ok(sub) => walk(&sub, seen, total, depth + 1)?,
                    // Gone, or swapped for what is no folder since: not followed.
                    Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
    let (mut seen, mut total) = (std::collections::HashSet::new(), 0);
    for d in dirs {
        let top = match openat(rustix::fs::CWD, d.as_path(), folder, Mode::empty()) {
            Ok(top) => top,
            Err(Errno::NOENT) => continue,
            Err(_) => return u64::MAX,
        };
        // The folder's own blocks too: a folder grows with its entries and never
        // shrinks, whatever is removed from it since.
        match rustix::fs::fstat(&top) {
            #[allow(clippy::unnecessary_cast)]
            Ok(st) => {
                if seen.insert((st.st_dev as u64, st.st_ino as u64)) {
                    total += (st.st_blocks as u64 * 512).max(BLOCK);
                }
            }
            Err(_) => return u64::MAX,
        }
        if walk(&top, &mut seen, &mut total, 0).is_err() {
            return u64::MAX;
        }
    }
    // Removed files and folders still held (open, mapped, a process's working folder,
    // root or program): counted until the last hold goes, whatever their names (a path
    // too long to read back hides nothing: each is looked at through its handle).
    // Every thread's table (a thread may have one of its own) and every mapping are
    // looked at; past `HANDLES` of them the measure costs too much to run every few
    // moments, and what cannot be measured is not let through.
    use std::os::unix::fs::MetadataExt;
    const HANDLES: usize = 65_536;
    let devices: std::collections::HashSet<u64> = dirs
        .iter()
        .filter_map(|d| std::fs::symlink_metadata(d).ok())
        .map(|m| m.dev())
        .collect();
    let pids = tasks
        .and_then(|t| std::fs::read_to_string(t).ok())
        .unwrap_or_default();
    let mut handles = 0usize;
    for pid in pids.split_whitespace() {
        let proc = Path::new("/proc").join(pid);
        // The process's mappings and program, through a thread that is alive: those of a
        // leader that exited before its other threads read as empty.
        let mut memory = proc.clone();
        let mut held: Vec<PathBuf> = Vec::new();
        for task in std::fs::read_dir(proc.join("task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let task = task.path();
            if !is_zombie(&task)
                && let Some(tid) = task.file_name()
            {
                memory = Path::new("/proc").join(tid);
            }
            held.extend([task.join("cwd"), task.join("root")]);
            held.extend(
                std::fs::read_dir(task.join("fd"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|fd| fd.path()),
            );
        }
        held.push(memory.join("exe"));
        held.extend(
            std::fs::read_dir(memory.join("map_files"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|m| m.path()),
        );
        for handle in held {
            handles += 1;
            if handles > HANDLES {
                return u64::MAX;
            }
            let meta = match std::fs::metadata(&handle) {
                Ok(meta) => meta,
                // Closed, unmapped or exited since it was listed; or a process a server
                // that is not root may not look into (its tables are closed to it too).
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        || e.kind() == std::io::ErrorKind::PermissionDenied
                        || e.raw_os_error() == Some(3) =>
                {
                    continue;
                }
                Err(_) => return u64::MAX,
            };
            if meta.nlink() == 0
                && devices.contains(&meta.dev())
                && seen.insert((meta.dev(), meta.ino()))
            {
                total += (meta.blocks() * 512).max(BLOCK);
            }
        }
    }
    total
}

/// Whether the thread whose `/proc` folder is `task` has exited (a zombie).
fn is_zombie(task: &Path) -> bool {
    std::fs::read_to_string(task.join("stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The longest one build step may take (a hung download, a build that never ends).
const STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// What a step's output may hold: all of stdout up to this (lh's own steps print little:
/// a JSON line, a lock), and the last this much of stderr.
const MAX_STDOUT: usize = 16 << 20;
const MAX_STDERR: usize = 64 << 10;

/// A step's output (bounded: a package's build may print without end), stopped and its
/// processes killed past [`STEP_TIMEOUT`].
pub(super) async fn output_within(
    cmd: &mut Command,
    what: &str,
    limits: &BuildLimits,
) -> Result<std::process::Output, RunnerError> {
    use tokio::io::AsyncReadExt;
    let failed = |e: std::io::Error| RunnerError::Environment(format!("cannot {what}: {e}"));
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(failed)?;
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(RunnerError::Environment(format!(
            "cannot {what}: no output"
        )));
    };
    // The first MAX_STDOUT bytes of stdout and the last MAX_STDERR of stderr are kept; the
    // rest is read and dropped, so the step never blocks on a full pipe.
    let head = async {
        let (mut kept, mut buf) = (Vec::new(), vec![0u8; 1 << 16]);
        loop {
            let n = stdout.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(kept);
            }
            let room = MAX_STDOUT.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
    };
    let tail = async {
        let (mut kept, mut buf) = (Vec::new(), vec![0u8; 1 << 16]);
        loop {
            let n = stderr.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(kept);
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > 2 * MAX_STDERR {
                kept.drain(..kept.len() - MAX_STDERR);
            }
        }
    };
    let all = async {
        let (out, err) = tokio::join!(head, tail);
        let status = child.wait().await?;
        Ok::<_, std::io::Error>(std::process::Output {
            status,
            stdout: out?,
            stderr: err?,
        })
    };
    // The build's folders, measured while the step runs: past the build's disk, the
    // step is stopped (its processes killed when `all` is dropped).
    let (dirs, tasks, most) = (limits.watched(), limits.tasks(), limits.disk_bytes);
    // Whatever ends the step, nothing of it outlives it: its processes are killed by
    // their cgroups before the server reads or removes a folder they wrote.
    struct Ended<'a>(&'a BuildLimits);
    impl Drop for Ended<'_> {
        fn drop(&mut self) {
            if let Some(groups) = &self.0.groups {
                let _ = groups.kill_all();
            }
        }
    }
    let measure = || {
        let (dirs, tasks) = (dirs.clone(), tasks.clone());
        tokio::task::spawn_blocking(move || disk_used_still(&dirs, tasks.as_deref()))
    };
    let measured = async {
        loop {
            tokio::time::sleep(DISK_EVERY).await;
            let used = measure().await.unwrap_or(u64::MAX);
            if used > most {
                return used;
            }
        }
    };
    let (timeout, said) = limits.step_timeout();
    let bounded = async {
        tokio::select! {
            out = all => Ok(out),
            used = measured => Err(used),
        }
    };
    // Once more when the step ends: a step shorter than a measurement's interval is
    // measured too.
    let stopped = Ended(limits);
    let ended = match tokio::time::timeout(timeout, bounded).await {
        Ok(Ok(out)) => match measure().await.unwrap_or(u64::MAX) {
            used if used > most => Ok(Err(used)),
            _ => Ok(Ok(out)),
        },
        other => other,
    };
    drop(stopped);
    match ended {
        Ok(Ok(out)) => out.map_err(failed),
        Ok(Err(used)) if used == u64::MAX => Err(RunnerError::Environment(format!(
            "cannot {what}: the environment's build wrote what cannot be measured (a folder it cannot read, say), and was stopped"
        ))),
        Ok(Err(used)) => Err(RunnerError::Environment(format!(
            "cannot {what}: the environment's build wrote {} MiB, past its {} MiB (the server's --build-disk), and was stopped",
            used >> 20,
            most >> 20
        ))),
        Err(_) => Err(RunnerError::Environment(format!(
            "cannot {what}: {said} and was stopped"
        ))),
    }
}

pub(super) async fn run(
    cmd: &mut Command,
    what: &str,
    limits: &BuildLimits,
) -> Result<String, RunnerError> {
    let out = output_within(cmd, what, limits).await?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(RunnerError::Environment(format!(
            "cannot {what}: {}",
            tail(&err)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The last dozen lines of a step's error output that say something, at most 4 KiB.
pub(super) fn tail(err: &str) -> String {
    const MAX: usize = 4 << 10;
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let text = lines[lines.len().saturating_sub(12)..].join("\n");
    if text.len() <= MAX {
        return text;
    }
    let mut start = text.len() - MAX;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build's cgroups (as root, as CI runs) hold its limits and go with it.
    #[test]
    fn build_groups_are_made_limited_and_removed() {
        let groups = BuildGroups::new(16, Some(64 << 20)).expect(
            "the server may make cgroups (root, with cgroup v1's pids and memory, or v2 with them delegated)",
        );
        let dirs = groups.dirs.clone();
        assert!(!dirs.is_empty());
        let limits: String = dirs
            .iter()
            .flat_map(|d| std::fs::read_dir(d).unwrap().flatten())
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n == "pids.max" || n == "memory.limit_in_bytes" || n == "memory.max"
            })
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect();
        assert!(limits.contains("16"), "{limits}");
        assert!(limits.contains(&(64u64 << 20).to_string()), "{limits}");
        drop(groups);
        for d in dirs {
            assert!(!d.exists(), "{} left behind", d.display());
        }
    }

    /// Dropped, a build's groups kill what is still in them (a process that left its
    /// parent's death behind, say) and go.
    #[test]
    fn dropped_groups_kill_what_is_left_in_them() {
        use std::io::BufRead;
        let groups = BuildGroups::new(16, None).expect("the server may make cgroups");
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "sleep 300 & echo $!; exec sleep 300"]);
        let mut child = groups
            .join(&cmd)
            .into_std()
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let orphan = format!("/proc/{}", line.trim());
        assert!(Path::new(&orphan).exists());
        let dirs = groups.dirs.clone();
        drop(groups);
        assert!(child.wait().unwrap().code().is_none(), "killed");
        for _ in 0..100 {
            if !Path::new(&orphan).exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!Path::new(&orphan).exists(), "the orphan lived on");
        for d in dirs {
            assert!(!d.exists(), "{} left behind", d.display());
        }
    }

    /// A measure stops the sandbox's processes while it looks (nothing can be moved out
    /// of the walk's way), and lets them run again after; a frozen group still dies
    /// when dropped.
    #[test]
    fn a_measure_stops_the_sandbox_while_it_looks() {
        let groups = BuildGroups::new(16, None).expect("the server may make cgroups");
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "while :; do :; done"]);
        let mut child = groups.join(&cmd).into_std().spawn().unwrap();
        let procs = groups.procs().unwrap();
        let freezer = Freezer::of(&procs).expect("the sandbox's cgroups have a freezer");
        let ticks = || -> u64 {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
            let rest = stat.rsplit_once(')').unwrap().1;
            rest.split_whitespace().nth(11).unwrap().parse().unwrap() // utime
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(freezer.freeze(), "frozen");
        let before = ticks();
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(ticks(), before, "it ran while frozen");
        freezer.thaw();
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(ticks() > before, "it did not run again");
        // Measured through the freezer: the same answer, and running after.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), vec![1u8; 1 << 20]).unwrap();
        let used = disk_used_still(&[dir.path().to_path_buf()], Some(&procs));
        assert!((1 << 20..4 << 20).contains(&used), "{used}");
        let after = ticks();
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(ticks() > after, "left frozen by the measure");
        assert!(freezer.freeze());
        drop(groups);
        assert!(
            child.wait().unwrap().code().is_none(),
            "killed while frozen"
        );
    }

    /// What a server that died left (empty groups named with its pid) is swept; a
    /// running server's groups are not.
    #[test]
    fn groups_of_dead_servers_are_swept() {
        let live = BuildGroups::new(16, None).expect("the server may make cgroups");
        let dead_pid = (100_000..4_000_000u32)
            .rev()
            .find(|p| !Path::new(&format!("/proc/{p}")).exists())
            .unwrap();
        let left: Vec<PathBuf> = live
            .dirs
            .iter()
            .map(|d| d.with_file_name(format!("lh-build-{dead_pid}-0123abcd")))
            .collect();
        for d in &left {
            std::fs::create_dir(d).unwrap();
        }
        assert!(sweep_build_groups() >= left.len());
        for d in &left {
            assert!(!d.exists(), "{} left behind", d.display());
        }
        for d in &live.dirs {
            assert!(d.exists(), "a running server's group was swept");
        }
    }
}
