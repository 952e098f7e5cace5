//! The bubblewrap sandbox that every environment build step and every process-runtime
//! worker runs in: its namespaces, `/proc` and `/dev`, seccomp filter, and the host user
//! it runs as.
//!
//! A server started as root runs its sandboxes as unprivileged host users of their own
//! ([`HostUser`]: 65,536 ids from 1879048192 unless told otherwise; builds run as the
//! first, each process-runtime worker as one of the others, leased for its life), never
//! as root by another name: a check by uid alone (a file's owner, a keyring's, a `/proc`
//! file's) then fails as it does for any user, and what the kernel counts per user
//! (processes, inotify instances, pipe buffers, pending signals) is each worker's own. That user need not reach the server's folders (`/root/...` is
//! closed to it): each folder a sandbox binds is mounted by root first, in a mount
//! namespace of the sandbox's own, at a place the user can reach
//! (`/run/lh-sandbox/<n>`), and bubblewrap binds it from there. What a sandbox writes
//! is handed to that user ([`Jail::give`]); what it only reads needs to be readable by
//! others, as built environments are.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio::process::Command;

use crate::error::RunnerError;
use crate::tools::find_on_path;

/// The uid and gid that sandboxed processes (workers, environment builds) see
/// themselves as in their user namespace: as the Docker runtime's containers do, a
/// function never sees itself as the server's user.
pub(crate) const SANDBOX_ID: &str = "1000";

/// A user of the host, by uid and gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostUser {
    pub uid: u32,
    pub gid: u32,
}

impl HostUser {
    /// The first of the ids sandboxes run as, on a server started as root, unless told
    /// otherwise (`--sandbox-uid`): far above any account's or any user's subordinate
    /// ids on a Debian system, below 2^31.
    pub const DEFAULT_ID: u32 = 1_879_048_192;
    /// How many ids from the first sandboxes take: builds the first, workers the others.
    pub const IDS: u32 = 65_536;

    /// The user the server runs as (its effective uid and gid).
    pub fn server() -> HostUser {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(u32::MAX)
        };
        HostUser {
            uid: field("Uid:"),
            gid: field("Gid:"),
        }
    }

    /// Whom sandboxes run as: users and groups from `id` on when the server runs as root
    /// (which may give its processes any uid), none (the server's own uid, which holds
    /// nothing of root's) otherwise.
    pub fn for_sandboxes(id: u32) -> Option<HostUser> {
        let fits = id != 0 && id.checked_add(HostUser::IDS).is_some();
        (HostUser::server().uid == 0 && fits).then_some(HostUser { uid: id, gid: id })
    }
}

/// Opens the folder `path` itself: an error if it is a link (or no folder), which a
/// sandbox may have swapped in for it.
pub(crate) fn open_folder(path: &Path) -> std::io::Result<rustix::fd::OwnedFd> {
    use rustix::fs::{CWD, Mode, OFlags, openat};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    openat(CWD, path, flags, Mode::empty()).map_err(std::io::Error::from)
}

/// Hands the folder `dir` and its entry `file` (when there, and not a link) to `user`,
/// through the opened folder: a link swapped in for either is never followed.
pub(crate) fn give_folder(dir: &Path, file: &str, user: HostUser) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, Gid, Uid, chownat, fchown};
    let (uid, gid) = (Some(Uid::from_raw(user.uid)), Some(Gid::from_raw(user.gid)));
    let folder = open_folder(dir)?;
    fchown(&folder, uid, gid)?;
    match chownat(&folder, file, uid, gid, AtFlags::SYMLINK_NOFOLLOW) {
        Err(rustix::io::Errno::NOENT) | Ok(()) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Takes back an invocation's folder `dir` from its worker once it is out of the
/// worker's reach: the server's again, so that nothing the worker still holds open can
/// change what is in it; refused (and the link removed) if the worker left a link in
/// its place.
pub(crate) fn take_back(dir: &Path) -> std::io::Result<()> {
    use rustix::fs::{Gid, Mode, Uid, fchmod, fchown};
    let folder = match open_folder(dir) {
        Ok(f) => f,
        Err(e) => {
            if std::fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
                let _ = std::fs::remove_file(dir);
                return Err(std::io::Error::other(
                    "the function replaced its invocation folder with a link",
                ));
            }
            return Err(e);
        }
    };
    let server = HostUser::server();
    fchown(
        &folder,
        Some(Uid::from_raw(server.uid)),
        Some(Gid::from_raw(server.gid)),
    )?;
    fchmod(&folder, Mode::from_raw_mode(0o755))?;
    Ok(())
}

/// Where, in a sandbox's own mount namespace, root mounts the folders it binds, for a
/// sandbox's user to reach them.
const STAGE: &str = "/run/lh-sandbox";

/// How to start bubblewrap: its binary, the seccomp filter, and (on a root server) the
/// host user to start it as with the tools that stage its folders.
#[derive(Debug, Clone)]
pub(crate) struct Jail {
    bwrap: PathBuf,
    seccomp: Filters,
    host: Option<Host>,
    /// The ids workers lease.
    ids: Option<Ids>,
}

#[derive(Debug, Clone)]
struct Host {
    user: HostUser,
    unshare: PathBuf,
    mount: PathBuf,
    setpriv: PathBuf,
}

/// The host ids sandboxes run as: `first` for builds, and the 65,535 after it, each
/// leased to one worker (of this server or of another on the host) at a time.
#[derive(Debug, Clone)]
pub struct Ids {
    first: HostUser,
}

/// A host user a worker runs as for its life: the lock of its id, which the kernel
/// releases when this is dropped (after the worker's processes are gone) or the server
/// dies, is what keeps every other worker of the host off it.
#[derive(Debug)]
pub struct Lease {
    pub user: HostUser,
    _lock: std::fs::File,
}

impl Ids {
    pub fn new(first: HostUser) -> Ids {
        Ids { first }
    }

    /// An id of its own for a worker; an error when every one is held.
    pub fn lease(&self) -> Result<Lease, RunnerError> {
        use rustix::fs::{FlockOperation, flock};
        let locks = Path::new(STAGE).join("ids");
        std::fs::create_dir_all(&locks)?;
        for offset in 1..HostUser::IDS {
            let id = self.first.uid + offset;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(locks.join(id.to_string()))?;
            if flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() {
                return Ok(Lease {
                    user: HostUser { uid: id, gid: id },
                    _lock: file,
                });
            }
        }
        Err(RunnerError::Sandbox(format!(
            "all {} sandbox ids are held by workers",
            HostUser::IDS - 1
        )))
    }
}

impl Jail {
    /// Bubblewrap, its seccomp filter written into `dir` (a folder no sandbox sees), run
    /// as `user` when there is one.
    pub(crate) fn new(dir: &Path, user: Option<HostUser>) -> Result<Jail, RunnerError> {
        let tool = |name: &str, package: &str| {
            find_on_path(name).ok_or_else(|| {
                RunnerError::Sandbox(format!(
                    "sandboxes need {name}, which is not installed (apt-get install {package})"
                ))
            })
        };
        let bwrap = tool("bwrap", "bubblewrap")?;
        let host = match user {
            Some(user) => {
                std::fs::create_dir_all(STAGE)?;
                Some(Host {
                    user,
                    unshare: tool("unshare", "util-linux")?,
                    mount: tool("mount", "mount")?,
                    setpriv: tool("setpriv", "util-linux")?,
                })
            }
            None => None,
        };
        Ok(Jail {
            bwrap,
            seccomp: write_seccomp(dir)?,
            ids: host.as_ref().map(|h| Ids::new(h.user)),
            host,
        })
    }

    /// A host user of its own for a worker (none where sandboxes run as the server's
    /// uid); an error when every id is held.
    pub(crate) fn lease(&self) -> Result<Option<Lease>, RunnerError> {
        self.ids.as_ref().map(Ids::lease).transpose()
    }

    /// The host user sandboxes run as, where it is not the server's.
    pub(crate) fn user(&self) -> Option<HostUser> {
        self.host.as_ref().map(|h| h.user)
    }

    /// Hands `path` (a folder a sandbox writes) to the sandbox's user.
    pub(crate) fn give(&self, path: &Path) -> std::io::Result<()> {
        self.give_to(path, self.user())
    }

    /// Hands `path` to `user` (none: the server keeps it).
    pub(crate) fn give_to(&self, path: &Path, user: Option<HostUser>) -> std::io::Result<()> {
        match user {
            Some(u) => std::os::unix::fs::lchown(path, Some(u.uid), Some(u.gid)),
            None => Ok(()),
        }
    }

    /// Hands `dir` and all it holds to the sandbox's user, links not followed.
    pub(crate) fn give_all(&self, dir: &Path) -> std::io::Result<()> {
        if self.user().is_none() {
            return Ok(());
        }
        self.give(dir)?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                self.give_all(&entry.path())?;
            } else {
                self.give(&entry.path())?;
            }
        }
        Ok(())
    }

    /// Arguments for bubblewrap running `code`, to be started by [`Jail::command`].
    pub(crate) fn args(&self, code: Code) -> Bwrap {
        Bwrap {
            args: vec!["--seccomp".into(), "3".into()],
            staged: Vec::new(),
            staging: self.host.is_some(),
            code,
        }
    }

    /// Bubblewrap with `b`'s arguments, under the seccomp filter (opened by a shell as
    /// descriptor 3), none of the server's variables. On a root server: in a mount
    /// namespace of its own where root first mounts the folders `b` binds at the stage,
    /// then as the sandbox's host user with no supplementary group.
    pub(crate) fn command(&self, b: Bwrap) -> Command {
        self.command_as(b, self.user())
    }

    /// [`Jail::command`], as host user `user` rather than the first id (a worker's
    /// lease).
    pub(crate) fn command_as(&self, b: Bwrap, user: Option<HostUser>) -> Command {
        let seccomp = match b.code {
            Code::Tools => &self.seccomp.tools,
            Code::Untrusted => &self.seccomp.untrusted,
        };
        let mut c = match &self.host {
            None => {
                let mut c = Command::new("/bin/sh");
                c.args(["-c", "exec 3< \"$0\" && exec \"$@\""]).arg(seccomp);
                c
            }
            Some(h) => {
                let mut c = Command::new(&h.unshare);
                c.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"]);
                c.arg(STAGE_SCRIPT)
                    .arg(seccomp)
                    .arg(STAGE)
                    .arg(user.unwrap_or(h.user).uid.to_string())
                    .arg(user.unwrap_or(h.user).gid.to_string())
                    .arg(b.staged.len().to_string())
                    .arg(&h.mount)
                    .arg(&h.setpriv)
                    .args(&b.staged);
                c
            }
        };
        // Nothing of the server's environment, nor its folder (a shell exports `PWD`).
        c.arg(&self.bwrap)
            .args(&b.args)
            .env_clear()
            .current_dir("/");
        // Nor its descriptors: one the server inherited (`lh server 9>>file`, a shell's
        // pipe) or a library opened without close-on-exec was open in every sandbox.
        close_inherited_at_exec(&mut c);
        c
    }
}

/// Makes `c`'s child close, as it execs, every descriptor past stderr: only what the
/// command line opens itself reaches the sandbox. (`unsafe`, as only lh-server's malloc
/// is besides: no safe API names a descriptor by number.)
#[allow(unsafe_code)]
pub(crate) fn close_inherited_at_exec(c: &mut Command) {
    // SAFETY: the closure runs between fork and exec in a threaded process, so it makes
    // system calls only (async-signal-safe): no allocation, no lock.
    unsafe {
        c.pre_exec(|| {
            close_on_exec_from(3);
            Ok(())
        });
    }
}

/// Marks every descriptor from `first` on close-on-exec. Between fork and exec: system
/// calls only.
#[allow(unsafe_code)]
fn close_on_exec_from(first: u32) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: plain system calls on descriptor numbers.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        // A kernel before 5.11: one by one, up to the descriptor limit.
        let max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(0, 1 << 20) as libc::c_int;
        for fd in first as libc::c_int..max {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// Run by root in the sandbox's new mount namespace: a small tmpfs over the stage, each
/// folder (or file) to bind mounted at `stage/<n>`, the seccomp filter opened as
/// descriptor 3, and bubblewrap started as the sandbox's user. Arguments: the filter,
/// the stage, uid, gid, how many paths, mount, setpriv, the paths, then bubblewrap's
/// command line.
const STAGE_SCRIPT: &str = r#"f=$0 st=$1 u=$2 g=$3 n=$4 mnt=$5 sp=$6
shift 6
"$mnt" -t tmpfs -o mode=0755,size=64k,nosuid,nodev,noexec lh-stage "$st" || exit 1
i=0
while [ "$i" -lt "$n" ]; do
  if [ -d "$1" ]; then mkdir "$st/$i"; else : > "$st/$i"; fi || exit 1
  "$mnt" --rbind "$1" "$st/$i" || exit 1
  i=$((i + 1))
  shift
done
exec 3< "$f" || exit 1
exec "$sp" --reuid "$u" --regid "$g" --clear-groups -- "$@""#;

/// Bubblewrap's arguments, its binds of the server's folders staged where the sandbox
/// runs as a user of its own.
pub(crate) struct Bwrap {
    args: Vec<OsString>,
    staged: Vec<PathBuf>,
    staging: bool,
    code: Code,
}

impl Bwrap {
    pub(crate) fn arg(&mut self, a: impl Into<OsString>) -> &mut Bwrap {
        self.args.push(a.into());
        self
    }

    pub(crate) fn args<I, S>(&mut self, a: I) -> &mut Bwrap
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(a.into_iter().map(Into::into));
        self
    }

    /// Binds `path` (a folder or file of the server's; it must exist) at the same path
    /// in the sandbox, writable or not.
    pub(crate) fn bind(&mut self, path: &Path, writable: bool) -> &mut Bwrap {
        let flag = if writable { "--bind" } else { "--ro-bind" };
        let source: OsString = if self.staging {
            self.staged.push(path.to_path_buf());
            format!("{STAGE}/{}", self.staged.len() - 1).into()
        } else {
            path.as_os_str().to_owned()
        };
        self.args.push(flag.into());
        self.args.push(source);
        self.args.push(path.as_os_str().to_owned());
        self
    }
}

/// A sandbox's `/proc` and `/dev` (bubblewrap arguments, in place of `--proc /proc --dev
/// /dev`). Where the server runs as root and has no other user to run sandboxes as
/// ([`HostUser`]), the sandbox's user is root by another name: no capability, but every
/// check by uid alone passes. So, whoever it is, what the kernel lets root change by
/// writing a file is read-only (`/proc/sys`: a `core_pattern` would run a program as
/// the host's root; `/proc/sysrq-trigger`; ...), what tells of the host is masked (its
/// keyrings, timers, scheduler), and `/dev` is read-only but for a bounded `/dev/shm`
/// (a tmpfs of no size would take the host's memory). As Docker masks them.
pub(crate) fn proc_and_dev() -> Vec<String> {
    let mut c: Vec<String> = Vec::new();
    let mut args = |a: &[&str]| c.extend(a.iter().map(|s| s.to_string()));
    args(&["--proc", "/proc"]);
    // PID 1 (bubblewrap's init, the sandbox's own user and dumpable) out of reach: its
    // memory written through /proc/1/mem would make it outlive its stop.
    args(&["--tmpfs", "/proc/1", "--remount-ro", "/proc/1"]);
    for ro in [
        "/proc/sys",
        "/proc/sysrq-trigger",
        "/proc/irq",
        "/proc/bus",
        "/proc/fs",
    ] {
        args(&["--ro-bind-try", ro, ro]);
    }
    for file in [
        "/proc/keys",
        "/proc/key-users",
        "/proc/kcore",
        "/proc/timer_list",
        "/proc/sched_debug",
        "/proc/latency_stats",
        // Root's alone elsewhere, and helps to exploit the kernel.
        "/proc/kpageflags",
        "/proc/kpagecount",
        "/proc/kpagecgroup",
        "/proc/slabinfo",
        "/proc/pagetypeinfo",
        "/proc/vmallocinfo",
    ] {
        if Path::new(file).exists() {
            args(&["--ro-bind", "/dev/null", file]);
        }
    }
    for dir in ["/proc/acpi", "/proc/scsi"] {
        if Path::new(dir).is_dir() {
            args(&["--tmpfs", dir, "--remount-ro", dir]);
        }
    }
    args(&["--dev", "/dev", "--remount-ro", "/dev"]);
    args(&["--size", &SHM_BYTES.to_string(), "--tmpfs", "/dev/shm"]);
    c
}

/// Which code a sandbox runs, and so which seccomp filter it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// lh's own tools only (uv reaching the index): the calls no sandbox makes are
    /// refused.
    Tools,
    /// A package's or a function's code: descriptors cannot be sent over a socket
    /// either.
    Untrusted,
}

/// One architecture's seccomp numbers: its audit value, the calls no sandbox makes,
/// the calls untrusted code does not make, and `fallocate`.
struct Arch {
    name: &'static str,
    audit: u32,
    refused: &'static [u32],
    untrusted: &'static [u32],
    fallocate: u32,
}

/// The system calls no sandbox makes: the kernel's keyrings (charged to the sandbox's
/// host user, and shared through its session keyring: a channel between projects that
/// outlives every call) and io_uring (kernel surface no function needs), as Docker's
/// default profile refuses them; reaching into another process of the sandbox
/// (`ptrace`, `process_vm_readv`/`writev`, `pidfd_getfd`): a package's build code could
/// otherwise make uv, its parent, drop its parent-death signal and outlive its step;
/// and Landlock, whose rules hold the files they name. Untrusted code is also refused
/// sending descriptors (`sendmsg`, `sendmmsg`: a descriptor in flight on a socket is in
/// no process's table, so a removed file held that way would keep its blocks out of any
/// measure of a folder), POSIX message queues (`mq_*`: a queue outlives the call that
/// made it in the worker's IPC namespace; one opened through a mounted `/dev/mqueue`
/// can be neither sent to nor read) and `fallocate` with any mode (`FALLOC_FL_KEEP_SIZE` allocates
/// blocks without growing the file, past the file-size limit; it fails as where the
/// file system cannot, with EOPNOTSUPP; a plain `fallocate` is allowed). Other ABIs of
/// x86-64 (x32, i386) are refused whole.
const X86_64: Arch = Arch {
    name: "x86_64",
    audit: 0xc000_003e,
    refused: &[
        248, 249, 250, 425, 426, 427, 101, 310, 311, 438, 444, 445, 446,
    ],
    untrusted: &[46, 307, 240, 241, 242, 243, 244, 245],
    fallocate: 285,
};
const AARCH64: Arch = Arch {
    name: "aarch64",
    audit: 0xc000_00b7,
    refused: &[
        217, 218, 219, 425, 426, 427, 117, 270, 271, 438, 444, 445, 446,
    ],
    untrusted: &[211, 269, 180, 181, 182, 183, 184, 185],
    fallocate: 47,
};
#[cfg(target_arch = "x86_64")]
const NATIVE: &Arch = &X86_64;
#[cfg(target_arch = "aarch64")]
const NATIVE: &Arch = &AARCH64;

/// The seccomp filter for `code` on `arch` as classic BPF, what bubblewrap's
/// `--seccomp FD` and `prctl(PR_SET_SECCOMP)` take: other architectures and x32 calls
/// fail, the refused calls fail with EPERM, anything else is allowed.
fn seccomp_filter(arch: &Arch, code: Code) -> Vec<u8> {
    const LD_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET: u16 = 0x06; // BPF_RET | BPF_K
    const ALLOW: u32 = 0x7fff_0000;
    const EPERM: u32 = 0x0005_0000 | 1;
    const EOPNOTSUPP: u32 = 0x0005_0000 | 95;
    // seccomp_data: nr at 0, arch at 4, args from 16 (the low half of args[1] at 24 on
    // these little-endian architectures).
    const MODE: u32 = 24;
    let untrusted = code == Code::Untrusted;
    let more = if untrusted { arch.untrusted } else { &[][..] };
    let calls: Vec<u32> = arch.refused.iter().chain(more).copied().collect();
    // Instructions with their jump targets by label, resolved below.
    enum To {
        Next,
        Allow,
        Deny,
        Unsupported,
    }
    let mut prog: Vec<(u16, To, To, u32)> = vec![
        (LD_ABS, To::Next, To::Next, 4),
        // Another architecture: refused.
        (JEQ, To::Next, To::Deny, arch.audit),
        (LD_ABS, To::Next, To::Next, 0),
        // x32's calls (the same architecture, numbers from 0x40000000).
        (JGE, To::Deny, To::Next, 0x4000_0000),
    ];
    for nr in &calls {
        prog.push((JEQ, To::Deny, To::Next, *nr));
    }
    if untrusted {
        prog.push((JEQ, To::Next, To::Allow, arch.fallocate));
        prog.push((LD_ABS, To::Next, To::Next, MODE));
        prog.push((JEQ, To::Allow, To::Unsupported, 0));
    }
    let allow = prog.len();
    let (deny, unsupported) = (allow + 1, allow + 2);
    let at = |i: usize, to: &To| -> u8 {
        let target = match to {
            To::Next => i + 1,
            To::Allow => allow,
            To::Deny => deny,
            To::Unsupported => unsupported,
        };
        (target - i - 1) as u8
    };
    let mut out: Vec<(u16, u8, u8, u32)> = prog
        .iter()
        .enumerate()
        .map(|(i, (op, jt, jf, k))| (*op, at(i, jt), at(i, jf), *k))
        .collect();
    out.push((RET, 0, 0, ALLOW));
    out.push((RET, 0, 0, EPERM));
    out.push((RET, 0, 0, EOPNOTSUPP));
    out.iter()
        .flat_map(|(code, jt, jf, k)| {
            let mut b = code.to_le_bytes().to_vec();
            b.extend([*jt, *jf]);
            b.extend(k.to_le_bytes());
            b
        })
        .collect()
}

/// Writes the seccomp filters of both kinds of code into `dir` (a folder no sandbox
/// sees: one that could write them could lift the filter), once; their paths.
pub(crate) fn write_seccomp(dir: &Path) -> std::io::Result<Filters> {
    std::fs::create_dir_all(dir)?;
    let write = |name: &str, code: Code| -> std::io::Result<PathBuf> {
        let file = dir.join(name);
        let filter = seccomp_filter(NATIVE, code);
        if std::fs::read(&file).ok().as_deref() != Some(filter.as_slice()) {
            let tmp = dir.join(format!(".lh-seccomp-{}.tmp", uuid::Uuid::new_v4().simple()));
            std::fs::write(&tmp, &filter)?;
            std::fs::rename(&tmp, &file)?;
        }
        Ok(file)
    };
    Ok(Filters {
        tools: write(".lh-seccomp.bpf", Code::Tools)?,
        untrusted: write(".lh-seccomp-untrusted.bpf", Code::Untrusted)?,
    })
}

/// The files of the seccomp filters.
#[derive(Debug, Clone)]
pub(crate) struct Filters {
    tools: PathBuf,
    untrusted: PathBuf,
}

/// How a container's first process, before any code of the environment runs (no
/// `site`, no `PYTHON*` variables), puts itself under the seccomp filter for untrusted
/// code (the one of the engine's architecture, among the arguments) on top of the
/// engine's own profile, then becomes the worker harness. A filter that cannot be
/// installed stops the container: no worker runs without it.
const CONTAINER_FILTER: &str = "import ctypes,os,sys
fs=dict(a.split('=',1) for a in sys.argv[1:])
m=os.uname().machine
if m not in fs: sys.exit('lh: no seccomp filter for the architecture '+m)
b=bytes.fromhex(fs[m])
class P(ctypes.Structure): _fields_=[('n',ctypes.c_ushort),('f',ctypes.c_char_p)]
p=P(len(b)//8,b)
c=ctypes.CDLL(None,use_errno=True)
u=ctypes.c_ulong
if c.prctl(38,u(1),u(0),u(0),u(0)) or c.prctl(22,u(2),ctypes.byref(p),u(0),u(0)): sys.exit('lh: cannot install the seccomp filter: '+os.strerror(ctypes.get_errno()))
os.execv(sys.executable,[sys.executable,'-m','lh._worker'])";

/// A container's command line: the worker harness under the seccomp filter for
/// untrusted code ([`CONTAINER_FILTER`]).
pub(crate) fn container_entrypoint() -> Vec<String> {
    let mut args: Vec<String> = ["python3", "-I", "-S", "-c", CONTAINER_FILTER]
        .map(String::from)
        .to_vec();
    for arch in [&X86_64, &AARCH64] {
        let hex: String = seccomp_filter(arch, Code::Untrusted)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        args.push(format!("{}={hex}", arch.name));
    }
    args
}

/// A sandbox's `/dev/shm` (POSIX shared memory, multiprocessing's semaphores).
const SHM_BYTES: u64 = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    /// Workers hold ids of their own, past the first; one freed goes to the next worker.
    #[test]
    fn workers_lease_ids_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let first = HostUser {
            uid: 2_000_000_000,
            gid: 2_000_000_000,
        };
        let jail = Jail::new(dir.path(), Some(first)).unwrap();
        let a = jail.lease().unwrap().unwrap();
        let b = jail.lease().unwrap().unwrap();
        assert_ne!(a.user, b.user);
        for u in [a.user, b.user] {
            assert!(u.uid > first.uid && u.uid < first.uid + HostUser::IDS && u.gid == u.uid);
        }
        let freed = a.user;
        drop(a);
        assert_eq!(jail.lease().unwrap().unwrap().user, freed);
        // A server that is not root leases nothing: its sandboxes are its own uid.
        assert!(
            Jail::new(dir.path(), None)
                .unwrap()
                .lease()
                .unwrap()
                .is_none()
        );
    }
}
