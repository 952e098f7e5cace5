"""The worker harness: runs lh functions, one invocation after another, each in a
fresh process.

    python -m lh._worker

The worker is a warm parent that has imported what every call needs (pyarrow) and
never runs user code itself, nor imports anything a call names (a package's import
reads state a call could leave: keyring's configuration ran a call's module here once):
for each request it forks a child, which puts the
project's folder first on `sys.path`, imports the function's module (so `import
helper` at the top of a model works, and relative imports inside the project's
packages), calls it and answers; then the child exits. No module, global, patched
library or leftover process of one call reaches the next, whatever the call did.

Requests arrive as JSON lines on stdin; answers go, one JSON line each, to the file
descriptor the harness was given (LH_WORKER_FD, default: the original stdout). User
code's own output (print, logging) goes to stderr, which the runner collects as the
node's log. Inputs arrive as Arrow IPC files in the invocation's folder (memory-mapped:
no copy); a model's result is written as Parquet when the output path ends with
`.parquet` (lh's server reads it with DuckDB, which has no Arrow IPC reader), else as
Arrow IPC.

A request:  {"id", "kind": "model"|"expectation", "file", "function", "root",
             "inputs": {arg: path}, "params": {arg: value}, "output": path}
An answer:  {"id", "ok": true, "rows": n} for a model,
            {"id", "ok": true, "passed": bool, "detail": str} for an expectation,
            {"id", "ok": false, "error": str, "traceback": str} when the function failed.

A worker that shares no disk with the runner (a container on another machine's engine)
gets its invocation's folder over this same channel: the request carries
`"channel": {"folder": "inv-...", "files": [{"path", "size"}], "return_max": n}` and
the files' bytes follow the line, in order, on stdin; the answer then lists the files
the call wrote into that folder (`"files": [{"path", "size"}]`, at most `return_max`
bytes) and their bytes follow it, in order, on the answers' descriptor. The folder is
removed once sent.
"""

import importlib
import importlib.util
import json
import os
import select
import signal
import stat
import sys
import time
import traceback


def module_name(root, path):
    """The dotted name of `path` inside the project folder `root` (`models/orders.py`
    is `models.orders`), or None when it cannot be imported by name."""
    rel = os.path.relpath(path, root)
    if rel.startswith(".."):
        return None
    parts = rel[:-3].split(os.sep) if rel.endswith(".py") else None
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or None


def load_function(root, path, name):
    """Imports the function's module as the project sees it (its dotted name under the
    project folder, so that its package's relative imports work), else from its file."""
    dotted = module_name(root, path) if root else None
    if dotted is not None:
        module = importlib.import_module(dotted)
    else:
        spec = importlib.util.spec_from_file_location("lh_user_module", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if fn is None:
        raise LookupError(f"{os.path.basename(path)} has no function {name}")
    return fn


def read_table(path):
    import pyarrow as pa
    # Memory-mapped: the function reads the input without a copy.
    with pa.ipc.open_file(pa.memory_map(path)) as r:
        return r.read_all()


def to_arrow(value):
    """The function's result as a pyarrow Table: a Table, a RecordBatch, a pandas or a
    polars DataFrame."""
    import pyarrow as pa
    if isinstance(value, pa.Table):
        return value
    if isinstance(value, pa.RecordBatch):
        return pa.Table.from_batches([value])
    module = type(value).__module__.split(".")[0]
    if module == "pandas" and type(value).__name__ == "DataFrame":
        return pa.Table.from_pandas(value, preserve_index=False)
    if module == "polars" and type(value).__name__ == "DataFrame":
        return value.to_arrow()
    raise TypeError(
        f"a model must return a pyarrow.Table, a pandas or a polars DataFrame, not {type(value).__module__}.{type(value).__name__}"
    )


def write_table(table, path):
    """Writes a model's result: Parquet for `.parquet` (what lh imports), else Arrow IPC."""
    tmp = path + ".tmp"
    # Whatever the function put there (a link to elsewhere, say) goes first: the output
    # is a new regular file.
    for p in (tmp, path):
        if os.path.lexists(p):
            if os.path.isdir(p) and not os.path.islink(p):
                import shutil
                shutil.rmtree(p)
            else:
                os.unlink(p)
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        pq.write_table(table, tmp, compression="snappy")
    else:
        import pyarrow.ipc as ipc
        with open(tmp, "wb") as f, ipc.new_file(f, table.schema) as w:
            w.write_table(table)
    os.replace(tmp, path)


def invoke(req):
    root = req.get("root")
    if root:
        # The project's own modules before anything else, and before the model's
        # module loads (the parent took its own folder off sys.path already).
        sys.path[:] = [root] + [p for p in sys.path if p != root]
        os.chdir(root)
    # The call's secrets: read from its folder (never from the request line, which the
    # parent reads) into this process, forked for the call, only; the file goes at once.
    secrets = req.get("secrets_file")
    if secrets:
        with open(secrets) as f:
            os.environ.update(json.load(f))
        os.unlink(secrets)
    fn = load_function(root, req["file"], req["function"])
    kwargs = {}
    for arg, path in req.get("inputs", {}).items():
        kwargs[arg] = read_table(path)
    kwargs.update(req.get("params", {}))
    result = fn(**kwargs)
    if req["kind"] == "expectation":
        if hasattr(result, "item") and not isinstance(result, (list, dict)):
            result = result.item()  # a numpy or pyarrow scalar
        if isinstance(result, tuple) and len(result) == 2:
            passed, detail = result
        else:
            passed, detail = result, ""
        if not isinstance(passed, bool):
            raise TypeError(f"an expectation must return True or False, not {type(passed).__name__}")
        return {"passed": passed, "detail": str(detail)}
    table = to_arrow(result)
    write_table(table, req["output"])
    return {"rows": table.num_rows}


def child(req, out):
    """The call, in the forked child: answers through `out`, then exits."""
    me = os.getpid()
    try:
        answer = {"id": req["id"], "ok": True, **invoke(req)}
    except (Exception, SystemExit, KeyboardInterrupt) as e:  # the function's failure is the answer
        if os.getpid() != me:
            os._exit(1)  # a process the function forked: only the call's process answers
        # The traceback starts at the user's code, not in this harness nor in the
        # import machinery that loaded the function's module.
        frames = e.__traceback__
        while frames is not None and (frames.tb_frame.f_code.co_filename == __file__
                                      or frames.tb_frame.f_code.co_filename.startswith("<frozen importlib")):
            frames = frames.tb_next
        tb = "".join(traceback.format_exception(type(e), e, frames))
        error = f"{type(e).__name__}: {e}"
        if isinstance(e, ModuleNotFoundError) and e.name:
            top = e.name.split(".")[0]
            error += (f"; a package the function needs is declared in lh_project.yml under "
                      f"`packages:` (for example `packages: {{{top}: \"1.2.3\"}}`, the name of "
                      f"the package that provides '{top}')")
        answer = {"id": req["id"], "ok": False, "error": error, "traceback": tb}
    if os.getpid() != me:
        os._exit(0)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    data = (json.dumps(answer) + "\n").encode()
    while data:
        data = data[os.write(out, data):]
    os._exit(0)


def oom_kills():
    """How many processes the kernel killed for memory in this worker's cgroup (a
    container's memory limit), or None where no such counter can be read."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def describe_status(status, ooms_before):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        after = oom_kills()
        if sig == signal.SIGKILL and ooms_before is not None and after is not None and after > ooms_before:
            return "ran out of memory: it used more than its memory limit and was killed"
        if sig == signal.SIGKILL:
            return "was killed (signal 9), most likely for using too much memory"
        return f"was killed by signal {sig}"
    return f"exited with status {os.waitstatus_to_exitcode(status)} without answering"


# The most an answer may weigh (the runner refuses longer lines too).
MAX_ANSWER = 16 << 20
# How long a call's pipe is read after its process exited (a process it started may
# still hold the pipe).
GRACE = 0.5

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def prctl(option, value):
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children():
    """The pids of this process's children (the calls' leftovers, once reparented)."""
    pids = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(int(p) for p in f.read().split())
    except OSError:
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                            pids.add(int(entry))
                except (OSError, ValueError, IndexError):
                    pass
    return pids


def kill_leftovers():
    """Kills and reaps every process a call left, whether any is left: as this process is
    their subreaper, whatever a call started (even in a session or group of its own)
    ends up its child. In a sandbox's own PID namespace (this process is its init's
    child, or its init) every other process but that init is a call's: all are killed
    at once, however long a chain of them (a chain of 1,005 outlived a thousand rounds
    of killing children), until none is left."""
    sandboxed = os.environ.get("LH_PRIVATE_TMP") == "1" and os.getpid() <= 2
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if sandboxed:
            try:
                os.kill(-1, signal.SIGKILL)  # all but this process and the namespace's init
            except ProcessLookupError:
                pass
        else:
            for p in children():
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        left = others() if sandboxed else children()
        if not left:
            return True
        time.sleep(0.01)
    return False


def others():
    """The processes of this PID namespace but this one and its init."""
    me = os.getpid()
    found = []
    try:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in (1, me):
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        # A zombie not yet reaped is gone but for its entry.
                        if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(int(entry))
                except (OSError, IndexError):
                    pass
    except OSError:
        return [0]
    return found


def mount_points():
    """Where something is mounted in this process's view (bind mounts of the sandbox)."""
    points = set()
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4:
                    points.add(fields[4].replace("\\040", " "))
    except OSError:
        pass
    return points


def clear_dir(top, keep, mounts):
    """Empties `top`, except the entries named in `keep`, mount points and the folders
    that lead to one (the sandbox binds the worker's folder, its code and its environment
    under paths that may start in /tmp): those are walked, never removed. Whether nothing
    else is left."""
    try:
        entries = os.listdir(top)
    except OSError:
        return False
    clean = True
    for name in entries:
        if name in keep:
            continue
        path = os.path.join(top, name)
        if path in mounts:
            continue
        if any(m.startswith(path + "/") for m in mounts):
            if os.path.isdir(path) and not os.path.islink(path):
                clean = clear_dir(path, (), mounts) and clean
            continue
        remove_tree(top, name)
    try:
        left = [n for n in os.listdir(top) if n not in keep
                and not any(m == os.path.join(top, n) or m.startswith(os.path.join(top, n) + "/") for m in mounts)]
    except OSError:
        return False
    clear_xattrs(top)
    reset_kept(top)
    return clean and not left


def remove_tree(top, name):
    """Removes `top/name`, a file or a folder of any depth, without recursion and with
    paths two names long: each folder's subfolders are first moved up into `top` (a
    folder nested past any path or recursion limit goes as a flat one does)."""
    try:
        tfd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    moved = 0
    queue = [name]
    try:
        while queue:
            n = queue.pop()
            try:
                st = os.stat(n, dir_fd=tfd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                try:
                    os.unlink(n, dir_fd=tfd)
                except OSError:
                    pass
                continue
            try:
                # A folder the call made unreadable or unwritable is opened up first.
                os.chmod(n, 0o700, dir_fd=tfd, follow_symlinks=False)
            except (OSError, NotImplementedError):
                try:
                    os.chmod(os.path.join(top, n), 0o700)
                except OSError:
                    pass
            try:
                dfd = os.open(n, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=tfd)
            except OSError:
                continue
            try:
                for entry in os.scandir(dfd):
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            moved += 1
                            up = ".lh-rm-%d-%d" % (os.getpid(), moved)
                            os.rename(entry.name, up, src_dir_fd=dfd, dst_dir_fd=tfd)
                            queue.append(up)
                        else:
                            os.unlink(entry.name, dir_fd=dfd)
                    except OSError:
                        pass
            finally:
                os.close(dfd)
            try:
                os.rmdir(n, dir_fd=tfd)
            except OSError:
                pass
    finally:
        os.close(tfd)


def clear_xattrs(path):
    """Removes the extended attributes a call set on a folder it keeps (its `user.*`
    ones: the only kind it may set)."""
    try:
        for attr in os.listxattr(path, follow_symlinks=False):
            try:
                os.removexattr(path, attr, follow_symlinks=False)
            except OSError:
                pass
    except (OSError, AttributeError):
        pass


def clear_scratch(work, invocation):
    """Removes what a call left in the worker's folder (but the call's own invocation
    folder, `invocation`: the runner moves it back), and, when they are the worker's own
    (LH_PRIVATE_TMP, set by the sandboxes; never the host's), in /tmp, /dev/shm and the
    worker's IPC namespace (SysV shared memory, message queues, semaphores), so that
    nothing passes from one call to the next (a folder the call named like an
    invocation's included). POSIX message queues, which cannot be listed here, a
    sandbox refuses to make. Whether nothing is left (else the worker must not serve
    another call)."""
    mounts = mount_points()
    clean = clear_dir(work, (invocation,), mounts)
    if os.environ.get("LH_PRIVATE_TMP") == "1":
        for place in PRIVATE_PLACES:
            if os.path.isdir(place):
                clean = clear_dir(place, (), mounts) and clean
        clear_sysv_ipc()
        # What cannot be emptied from here, the call must not have changed: its
        # network namespace's sockets (a closed TCP end lingers, owned by no process, for
        # a minute, its ports readable in /proc/net) and counters, and the SysV id
        # sequences (each new object's id tells how many came before).
        clean = NETWORK.unchanged() and clean
        clean = SYSV.unchanged() and clean
    # Its own settings, on any runtime: a call can set them on its parent (found by the
    # twenty-first review: resource limits carried 64 bits each to the next call and run).
    clean = SETTINGS.unchanged() and clean
    # What the call could set on what it shares with the worker and the next call: the
    # open descriptions of its standard descriptors, and the kept folders' inode flags
    # and sizes (found by the twenty-sixth review).
    clean = DESCRIPTORS.restored() and clean
    clean = KEPT.restored() and clean
    return clean


class SharedDescriptors:
    """A call's stdin, stdout and stderr are the worker's own: the same open file
    descriptions, whose status flags, I/O signal, owner and pipe size a call can set and
    the next read (found by the twenty-sixth review). Set back after each call as the
    worker found them; whether they are."""

    F_GETFL, F_SETFL, F_GETOWN, F_SETOWN = 3, 4, 9, 8
    F_GETSIG, F_SETSIG, F_GETPIPE_SZ, F_SETPIPE_SZ = 11, 10, 1032, 1031

    def __init__(self):
        self.first = None

    def now(self):
        import fcntl
        seen = {}
        for fd in (0, 1, 2):
            for key, get in (("flags", self.F_GETFL), ("owner", self.F_GETOWN),
                             ("signal", self.F_GETSIG), ("pipe size", self.F_GETPIPE_SZ)):
                try:
                    seen[(fd, key)] = fcntl.fcntl(fd, get)
                except OSError:
                    seen[(fd, key)] = None
        return seen

    def remember(self):
        self.first = self.now()

    def restored(self):
        import fcntl
        if self.first is None:
            return True
        now = self.now()
        for (fd, key), value in self.first.items():
            if now.get((fd, key)) == value or value is None:
                continue
            set_to = {"flags": self.F_SETFL, "owner": self.F_SETOWN, "signal": self.F_SETSIG,
                      "pipe size": self.F_SETPIPE_SZ}[key]
            try:
                fcntl.fcntl(fd, set_to, value)
            except OSError:
                pass
        now = self.now()
        changed = sorted("%s of descriptor %d" % (k, fd) for (fd, k), v in self.first.items()
                         if now.get((fd, k)) != v)
        if changed:
            LEFT.append(", ".join(changed))
        return not changed


class KeptFolders:
    """The folders the cleanup keeps (the worker's folder, /tmp, /dev/shm, the folders
    on the way to the sandbox's binds), which a call may not remove but can mark: their
    inode flags (nodump, noatime, sync, dirsync: a few bits each, found by the
    twenty-sixth review) are set back as the worker found them, and their sizes, which a
    folder of many entries keeps on disk after they are removed, must be as they were."""

    FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602

    def __init__(self):
        self.flags = {}
        self.sizes = {}

    @classmethod
    def get_flags(cls, path):
        import array
        import fcntl
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            buf = array.array("l", [0])
            fcntl.ioctl(fd, cls.FS_IOC_GETFLAGS, buf, True)
            return buf[0]
        except OSError:
            return None
        finally:
            os.close(fd)

    @classmethod
    def set_flags(cls, path, value):
        import array
        import fcntl
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return
        try:
            fcntl.ioctl(fd, cls.FS_IOC_SETFLAGS, array.array("l", [value]), True)
        except OSError:
            pass
        finally:
            os.close(fd)

    TMPFS_MAGIC = 0x01021994

    @classmethod
    def on_tmpfs(cls, path):
        """Whether `path` is on a tmpfs, whose folders shrink as their entries go (and
        grow by one entry's worth for the invocation folder the runner takes back after
        the check): its sizes carry nothing and are not compared."""
        try:
            import ctypes
            buf = ctypes.create_string_buffer(256)
            if ctypes.CDLL(None, use_errno=True).statfs(os.fsencode(path), buf) != 0:
                return False
            return int.from_bytes(buf.raw[:8], "little") == cls.TMPFS_MAGIC
        except (OSError, AttributeError):
            return False

    def remember(self, places):
        for p in places:
            self.flags[p] = self.get_flags(p)
            try:
                self.sizes[p] = (None if self.on_tmpfs(p)
                                 else os.stat(p, follow_symlinks=False).st_size)
            except OSError:
                self.sizes[p] = None

    def restored(self):
        changed = []
        for p, value in self.flags.items():
            if value is None:
                continue
            if self.get_flags(p) != value:
                self.set_flags(p, value)
                if self.get_flags(p) != value:
                    changed.append("the inode flags of " + p)
        for p, size in self.sizes.items():
            try:
                now = os.stat(p, follow_symlinks=False).st_size
            except OSError:
                now = None
            if size is not None and now != size:
                changed.append("the size of " + p)
        if changed:
            LEFT.append(", ".join(changed))
        return not changed


class NetworkState:
    """The worker's network namespace as the last call found it: every file /proc/net
    shows of it (its orphaned TCP ends and IPv6 flow labels included, its interfaces' and
    protocols' counters), byte for byte. A sandbox has no network but loopback, which
    only a call uses; the few files that count for the whole host, or changed while the
    worker started, are left out.

    The socket tables (tcp, udp, raw, in both families) and the connection tracker's are
    not read: the kernel lists them by walking its host-wide hash tables (/proc/net/tcp
    took 5 ms to read in an empty namespace on a 24 GB machine, and with tcp6 two thirds
    of a warm call). What they could show of a call, a socket or a tracked connection
    that outlives it, the namespace's own counts in sockstat and sockstat6 show as well
    (sockets in use, TIME_WAIT ends), as do the protocols' counters in snmp and netstat
    (every connection opened or refused)."""

    # Counted for the whole host (packets per CPU, route cache, the protocols' memory and
    # allocations in protocols): other namespaces move them any time.
    HOST_WIDE = {"softnet_stat", "stat/rt_cache", "protocols"}
    WALKED_TABLES = {"tcp", "tcp6", "udp", "udp6", "udplite", "udplite6", "raw", "raw6",
                     "nf_conntrack"}
    # The fields of sockstat counted for the whole host (orphans, sockets allocated, the
    # protocols' memory); the others are the namespace's.
    SOCKSTAT_HOST_WIDE = {b"orphan", b"alloc", b"mem"}

    def __init__(self):
        self.last = None
        self.skipped = set(self.HOST_WIDE) | self.WALKED_TABLES
        self.folders = {}

    def names(self, base):
        """The files under `base`, one folder deep (whether a name is a folder is
        asked once)."""
        try:
            names = sorted(os.listdir(base))
        except OSError:
            return []
        found = []
        for name in names:
            folder = self.folders.get(name)
            if folder is None:
                folder = self.folders[name] = os.path.isdir(os.path.join(base, name))
            if not folder:
                found.append(name)
                continue
            try:
                found.extend(name + "/" + n for n in sorted(os.listdir(os.path.join(base, name))))
            except OSError:
                pass
        return found

    @classmethod
    def own_fields(cls, text):
        """sockstat without the fields the whole host moves."""
        lines = []
        for line in text.splitlines():
            words = line.split()
            kept = words[:1]
            for key, value in zip(words[1::2], words[2::2]):
                if key not in cls.SOCKSTAT_HOST_WIDE:
                    kept += [key, value]
            lines.append(b" ".join(kept))
        return b"\n".join(lines)

    def now(self):
        seen = {}
        base = "/proc/net"
        for rel in self.names(base):
            if rel in self.skipped:
                continue
            try:
                with open(os.path.join(base, rel), "rb") as f:
                    seen[rel] = f.read(1 << 20)
            except OSError:
                seen[rel] = None
        if seen.get("sockstat") is not None:
            seen["sockstat"] = self.own_fields(seen["sockstat"])
        return seen

    def remember(self):
        first = self.now()
        time.sleep(0.05)
        second = self.now()
        self.skipped |= {k for k in set(first) | set(second) if first.get(k) != second.get(k)}
        self.last = self.now()

    def unchanged(self):
        now = self.now()
        changed = sorted(k for k in set(now) | set(self.last or {}) if now.get(k) != (self.last or {}).get(k))
        self.last = now
        if changed:
            LEFT.append("/proc/net/" + ", /proc/net/".join(changed[:5]))
        return not changed


class SysvSequence:
    """The SysV IPC id each kind would give next, probed by making and removing one
    object of each (their ids grow by one step per object made, so a call that made any
    moved them further than the probes alone). An id is a sequence number above a
    15-bit index; the kernel's index wraps to 0 now and then (every 64 ids on Linux 6.18)
    and the sequence number moves on by one: that is the probe's own step too."""

    SEQ_SHIFT, SEQ_MAX = 15, 0xFFFF

    @classmethod
    def follows(cls, now, last, step):
        """Whether `now` is the id the probe makes right after `last`."""
        if now < 0 or now == last + step:
            return True
        seq = ((last >> cls.SEQ_SHIFT) + 1) & cls.SEQ_MAX
        return now == seq << cls.SEQ_SHIFT

    def __init__(self):
        self.last, self.step = None, None

    @staticmethod
    def probe():
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return None
        ids = []
        for make, remove in ((lambda: libc.shmget(0, 1, 0o600), lambda i: libc.shmctl(i, IPC_RMID, None)),
                             (lambda: libc.msgget(0, 0o600), lambda i: libc.msgctl(i, IPC_RMID, None)),
                             (lambda: libc.semget(0, 1, 0o600), lambda i: libc.semctl(i, 0, IPC_RMID))):
            i = make()
            if i >= 0:
                remove(i)
            ids.append(i)
        return ids

    def remember(self):
        probes = [self.probe() for _ in range(3)]
        self.last = probes[-1]
        if None not in probes:
            # The probe's own step: the smaller of two, in case the index wrapped
            # between one pair.
            self.step = [min((d for d in (b - a, c - b) if d > 0), default=c - b)
                         for a, b, c in zip(*probes)]

    def unchanged(self):
        now = self.probe()
        if now is None or self.last is None or self.step is None:
            same = now == self.last
        else:
            same = all(self.follows(n, last, step) for n, last, step in zip(now, self.last, self.step))
        self.last = now
        if not same:
            LEFT.append("SysV IPC objects")
        return same


class ProcessSettings:
    """The worker's own settings a call (a child of the same user) can change and the
    next call, forked from the worker, would inherit: its resource limits, nice value,
    CPU affinity, scheduling policy and I/O priority. The worker can set a lowered
    nice or a raised hard limit back no more than a call can, so a change retires it."""

    def __init__(self):
        self.first = None

    @staticmethod
    def now():
        seen = ProcessSettings.of(0)
        # Each of the worker's threads has its own scheduling settings, which a call can
        # set by thread id (found by the twenty-fourth review: its second thread's).
        try:
            tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
        except OSError:
            tids = []
        seen["threads"] = tids
        # Signals pending on any thread (one that blocks them, as jemalloc's background
        # thread does, keeps them for the worker's life: found by the twenty-fifth review).
        for tid in tids:
            try:
                with open("/proc/self/task/%d/status" % tid) as f:
                    seen["thread %d pending" % tid] = [line for line in f
                                                       if line.startswith(("SigPnd:", "ShdPnd:"))]
            except OSError:
                seen["thread %d pending" % tid] = None
        for tid in tids:
            if tid != os.getpid():
                seen.update({"thread %d %s" % (tid, k): v for k, v in ProcessSettings.of(tid, threads=True).items()})
        # The sandbox's first process, when it is not the worker (bubblewrap's, of the
        # same user): a call can set its limits and nice value and a later call read
        # them (found by the twenty-third review).
        if os.getpid() != 1:
            seen.update({"pid 1 " + k: v for k, v in ProcessSettings.of(1).items()})
        return seen

    @staticmethod
    def of(pid, threads=False):
        import resource
        seen = {}
        for name in ([] if threads else dir(resource)):
            if name.startswith("RLIMIT_"):
                try:
                    seen[name] = resource.prlimit(pid, getattr(resource, name))
                except (OSError, ValueError):
                    seen[name] = None
        for key, get in (("nice", lambda: os.getpriority(os.PRIO_PROCESS, pid)),
                         ("affinity", lambda: sorted(os.sched_getaffinity(pid))),
                         ("scheduler", lambda: os.sched_getscheduler(pid)),
                         ("sched_attr", lambda: sched_attr(pid)),
                         ("autogroup", lambda: None if threads else open("/proc/%s/autogroup" % (pid or "self")).read()),
                         ("ioprio", lambda: ioprio(pid))):
            try:
                seen[key] = get()
            except OSError:
                seen[key] = None
        return seen

    def remember(self):
        self.first = self.now()

    def unchanged(self):
        now = self.now()
        changed = sorted(k for k in now if now[k] != (self.first or {}).get(k))
        if changed:
            LEFT.append("the worker's " + ", ".join(changed))
        return not changed


def sched_attr(pid=0):
    """Everything sched_getattr says of this process (policy, nice, priority, the
    runtime, deadline and period a call could set with sched_setattr, utilization
    clamps), as bytes."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    number = {"x86_64": 315, "aarch64": 275}.get(os.uname().machine)
    if number is None:
        return None
    buf = ctypes.create_string_buffer(56)
    if libc.syscall(number, pid, buf, 56, 0) != 0:
        return None
    return buf.raw


def ioprio(pid=0):
    """A process's I/O priority (ioprio_get, which Python does not wrap)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # x86_64: ioprio_get is 252; aarch64: 31. IOPRIO_WHO_PROCESS, this process.
    number = {"x86_64": 252, "aarch64": 31}.get(os.uname().machine)
    if number is None:
        return None
    return libc.syscall(number, 1, pid)


# What the last call left that the worker cannot remove, said when it retires.
LEFT = []
SETTINGS = ProcessSettings()
DESCRIPTORS = SharedDescriptors()
KEPT = KeptFolders()
NETWORK = NetworkState()
SYSV = SysvSequence()


# The worker's own places a call may write, emptied between calls (`/dev/mqueue` is
# mounted in a container).
PRIVATE_PLACES = ("/tmp", "/dev/shm", "/dev/mqueue")

# The kept folders' modes when the worker started, and the time they are reset to.
KEPT_MODES = {}
KEPT_TIME = 0


def remember_kept(work):
    """Notes the modes of the folders the cleanup keeps (the worker's folder, its private
    places, the folders leading to the sandbox's binds under them), which a call could
    change (and their times) to pass a few bits to the next call."""
    global KEPT_TIME
    KEPT_TIME = time.time_ns()
    places = {work, *PRIVATE_PLACES}
    for m in mount_points():
        for top in PRIVATE_PLACES:
            if m.startswith(top + "/"):
                parts = m[len(top) + 1:].split("/")
                places.update(os.path.join(top, *parts[:i]) for i in range(1, len(parts)))
    for p in places:
        try:
            KEPT_MODES[p] = os.stat(p, follow_symlinks=False).st_mode & 0o7777
        except OSError:
            pass
    KEPT.remember(places)


def reset_kept(path):
    """A kept folder's mode as the worker found it, and its times all calls alike."""
    if os.path.islink(path):
        return
    try:
        if path in KEPT_MODES:
            os.chmod(path, KEPT_MODES[path])
    except OSError:
        pass
    try:
        os.utime(path, ns=(KEPT_TIME, KEPT_TIME), follow_symlinks=False)
    except OSError:
        pass


IPC_RMID = 0


def clear_sysv_ipc():
    """Removes every SysV shared memory segment, message queue and semaphore set of the
    worker's IPC namespace (the sandbox's own: no other process shares it)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    for kind, remove in (("shm", lambda i: libc.shmctl(i, IPC_RMID, None)),
                         ("msg", lambda i: libc.msgctl(i, IPC_RMID, None)),
                         ("sem", lambda i: libc.semctl(i, 0, IPC_RMID))):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].isdigit():
                remove(int(fields[1]))


# The system calls that act on another process by its id, which a call (a process of
# the same user) could aim at the worker or the sandbox's first process, the two that
# outlive it: each as its number on x86_64 and aarch64, the argument that holds the
# target, and the value of another argument that means "every process of the user".
TARGETED_CALLS = (
    # (x86_64, aarch64, target argument, argument and value meaning all of the user's
    # [, an argument whose null pointer makes the call a read])
    (62, 129, 0, None),  # kill (a negative target is a group, -1 every process)
    (129, 138, 0, None),  # rt_sigqueueinfo
    (200, 130, 0, None),  # tkill
    (234, 131, 0, None),  # tgkill
    (297, 240, 0, None),  # rt_tgsigqueueinfo
    (302, 261, 0, None, 2),  # prlimit64 (reading alone, with no new limit, is left)
    (141, 140, 1, (0, 2)),  # setpriority (PRIO_USER)
    (251, 30, 1, (0, 3)),  # ioprio_set (IOPRIO_WHO_USER)
    (142, 118, 0, None),  # sched_setparam
    (144, 119, 0, None),  # sched_setscheduler
    (203, 122, 0, None),  # sched_setaffinity
    (314, 274, 0, None),  # sched_setattr
    (434, 434, 0, None),  # pidfd_open
)
# pidfd_send_signal: its target is a descriptor (a pidfd, or any `/proc/<pid>` folder),
# which a filter cannot tell; refused whole.
PIDFD_SEND_SIGNAL = 424
# fcntl and ioctl (x86_64, aarch64), and the commands that make the kernel signal a
# descriptor's owner.
FCNTL = (72, 25)
IOCTL = (16, 29)
F_SETOWN, F_SETOWN_EX = 8, 15
FIOSETOWN, SIOCSPGRP = 0x8901, 0x8902


def fence_filter(machine, kept):
    """The seccomp filter (classic BPF) a call puts itself under: every call of
    TARGETED_CALLS aimed at a process of `kept` (by id, or by the group or session it
    leads, as kill's negative targets and the group forms of setpriority and ioprio_set
    name them), at every process (kill's -1), or at every process of the user fails with
    EPERM; anything else is allowed (the sandbox's own filter still applies). None for
    an architecture it does not know."""
    import struct
    audit = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}.get(machine)
    if audit is None:
        return None
    which = 0 if machine == "x86_64" else 1
    LD, JEQ, RET = 0x20, 0x15, 0x06
    ALLOW, EPERM = 0x7FFF0000, 0x00050000 | 1
    targets = sorted({v & 0xFFFFFFFF for k in kept for v in (k, -k)} | {0xFFFFFFFF})
    if len(targets) > 240:
        return None  # more than a jump reaches (a worker of a hundred threads)

    def dispatch(number, block):
        """`block` (its loaded value compared with every target, then allowed or refused,
        its "deny" jumps resolved) run only for the system call `number`."""
        block = block + [(JEQ, "deny", 0, t) for t in targets]
        block += [(RET, 0, 0, ALLOW), (RET, 0, 0, EPERM)]
        deny = len(block) - 1
        block = [(op, deny - i - 1 if jt == "deny" else jt, jf, k)
                 for i, (op, jt, jf, k) in enumerate(block)]
        return [(JEQ, 0, len(block), number)] + block
    prog = [(LD, 0, 0, 4), (JEQ, 1, 0, audit), (RET, 0, 0, ALLOW), (LD, 0, 0, 0)]
    for call in TARGETED_CALLS:
        arg, everyone = call[2], call[3]
        block = []
        if len(call) > 4:
            # A null pointer in this argument only reads: allowed (both halves zero).
            low = 16 + 8 * call[4]
            block += [(LD, 0, 0, low), (JEQ, 0, 3, 0), (LD, 0, 0, low + 4), (JEQ, 0, 1, 0),
                      (RET, 0, 0, ALLOW)]
        if everyone is not None:
            block += [(LD, 0, 0, 16 + 8 * everyone[0]), (JEQ, "deny", 0, everyone[1])]
        block.append((LD, 0, 0, 16 + 8 * arg))
        prog += dispatch(call[which], block)
    # fcntl: F_SETOWN to a kept process or group (the kernel then signals it on I/O,
    # found by the twenty-sixth review), and F_SETOWN_EX, whose owner is behind a pointer.
    prog += dispatch(FCNTL[which], [(LD, 0, 0, 24), (JEQ, "deny", 0, F_SETOWN_EX),
                                    (JEQ, 1, 0, F_SETOWN), (RET, 0, 0, ALLOW), (LD, 0, 0, 32)])
    # ioctl: a socket's owner (FIOSETOWN, SIOCSPGRP), behind a pointer: refused.
    prog += [(JEQ, 0, 5, IOCTL[which]), (LD, 0, 0, 24), (JEQ, 1, 0, FIOSETOWN),
             (JEQ, 0, 1, SIOCSPGRP), (RET, 0, 0, EPERM), (RET, 0, 0, ALLOW)]
    # (A is the call's number again past the ioctl block only when it was not ioctl.)
    prog += [(JEQ, 0, 1, PIDFD_SEND_SIGNAL), (RET, 0, 0, EPERM), (RET, 0, 0, ALLOW)]
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


def fence(kept):
    """Puts this process (a call, just forked) under fence_filter: nothing it runs can
    signal the processes of `kept` nor set their limits, priority, scheduling or I/O
    priority, the settings the next call would inherit or read (the reviews found one
    such channel after another, each closed by a check; this closes the class). False
    when it cannot be installed."""
    try:
        import ctypes
    except ImportError:
        return False
    program = fence_filter(os.uname().machine, kept)
    if program is None:
        return False

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    u = ctypes.c_ulong
    prog = Prog(len(program) // 8, program)
    # PR_SET_NO_NEW_PRIVS (the sandbox set it already), then PR_SET_SECCOMP, FILTER.
    return (libc.prctl(38, u(1), u(0), u(0), u(0)) == 0
            and libc.prctl(22, u(2), ctypes.byref(prog), u(0), u(0)) == 0)


def kept_processes():
    """The processes that outlive a call: the worker (each of its threads, its group
    and session) and the sandbox's first process (with its group and session)."""
    kept = {1, os.getpid(), os.getpgrp(), os.getsid(0)}
    try:
        kept.update(int(t) for t in os.listdir("/proc/self/task"))
    except OSError:
        pass
    for pid in (1,):
        try:
            kept.update((os.getpgid(pid), os.getsid(pid)))
        except OSError:
            pass
    kept.discard(0)
    return kept


# The last byte of the call's output passed on (a call whose output does not end its
# line gets a line break after it: its log is its own, the next call's starts afresh).
LAST_LOG_BYTE = [b"\n"]


def pass_log(fd):
    """Passes what the call printed on to this process's stderr; False at its end."""
    chunk = os.read(fd, 1 << 16)
    if not chunk:
        return False
    LAST_LOG_BYTE[0] = chunk[-1:]
    try:
        write_all(2, chunk)
    except OSError:
        pass
    return True


def call(req, answers):
    """Runs one request in a fresh child; its answer (or why it gave none)."""
    ooms_before = oom_kills()
    sandboxed = os.environ.get("LH_PRIVATE_TMP") == "1"
    kept = kept_processes() if sandboxed else set()
    r, w = os.pipe()
    # The call's stdout and stderr: a pipe of its own, which this process passes on to
    # its stderr (the node's log) as it comes. Never the worker's own open description,
    # whose flags, owner, pipe size and record locks a call could set for the next to
    # read (found by the twenty-sixth and twenty-seventh reviews).
    log_r, log_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(log_r)
        try:
            # The call and whatever it starts: one group, stopped after; and a session of
            # its own, so that its scheduling autogroup (/proc/self/autogroup, which a
            # session shares) is not the worker's (found by the twenty-second review).
            os.setsid()
            if sandboxed and not fence(kept):
                os.write(w, json.dumps({"id": req["id"], "ok": False, "traceback": "",
                                        "error": "lh could not fence the call off the worker "
                                                 "(seccomp): not run"}).encode())
                os._exit(1)
            # The call cannot read the next requests nor write answers of its own (the
            # parent is not dumpable: its descriptors are closed to /proc/<ppid>/fd).
            os.close(answers)
            prctl(PR_SET_DUMPABLE, 1)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            sys.stdin = open(os.devnull)
            os.dup2(log_w, 1)
            os.dup2(log_w, 2)
            os.close(log_w)
            child(req, w)
        finally:
            os._exit(1)
    os.close(w)
    os.close(log_w)
    chunks, size, status, exited = [], 0, None, None
    while True:
        if status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status, exited = st, time.monotonic()
        elif time.monotonic() - exited > GRACE:
            break  # the call's process is gone; something it started holds the pipe
        ready, _, _ = select.select([r] + ([log_r] if log_r is not None else []), [], [], 0.05)
        if log_r in ready:
            if not pass_log(log_r):
                os.close(log_r)
                log_r = None
        if r in ready:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break  # the answer is complete
            size += len(chunk)
            if size > MAX_ANSWER:
                chunks = []
                break
            chunks.append(chunk)
    os.close(r)
    # Nothing the call started outlives it: its group, then whatever escaped the group
    # (reparented to this process, its subreaper).
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if status is None:
        _, status = os.waitpid(pid, 0)
    global LEFTOVERS
    if not kill_leftovers():
        LEFTOVERS = True
    # What the call printed last (its writers are gone: the pipe ends, or, with a
    # process left that could not be stopped, what is there now).
    if log_r is not None:
        os.set_blocking(log_r, False)
        try:
            while pass_log(log_r):
                pass
        except BlockingIOError:
            pass
        os.close(log_r)
    # A last line left open ends with the call (found by the twenty-ninth review: it
    # began the next run's log).
    if LAST_LOG_BYTE[0] != b"\n":
        try:
            write_all(2, b"\n")
        except OSError:
            pass
        LAST_LOG_BYTE[0] = b"\n"
    text = b"".join(chunks).decode("utf-8", "replace").strip()
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and answer.get("id") == req["id"]:
        answer = typed(answer)
        if answer is not None:
            return answer
        why = "answered what is not an answer"
    else:
        why = describe_status(status, ooms_before)
    return {"id": req["id"], "ok": False, "error": f"the function's process {why}", "traceback": ""}


# What each key of an answer holds, and the only keys it has (the call's process writes
# its answer, and the code it runs can write one of its own: the runner takes only
# answers of this shape).
ANSWER_TYPES = {"id": str, "ok": bool, "rows": int, "passed": bool, "detail": str, "error": str,
                "traceback": str}


def typed(answer):
    """The answer's keys an answer may have, each of its type (None: a key of another
    type, or no `ok`)."""
    kept = {}
    for key, kind in ANSWER_TYPES.items():
        if key not in answer:
            continue
        value = answer[key]
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 0)):
            return None
        kept[key] = value
    if "ok" not in kept:
        return None
    return kept


# Whether a call left a process that could not be stopped: the worker then retires.
LEFTOVERS = False

# The most files a call's folder may send back.
MAX_FILES = 10000


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Channel:
    """The runner's requests on stdin, read into one buffer of the harness's own, which
    is zeroed after each request: the bytes of a call's files (its secrets among them)
    never linger in this warm parent's memory, which every later call's process
    inherits."""

    SIZE = 4 << 20

    def __init__(self, fd):
        self.fd = fd
        self.buf = bytearray(self.SIZE)
        self.view = memoryview(self.buf)
        self.start = self.end = self.high = 0

    def _read(self, at, limit):
        n = os.readv(self.fd, [self.view[at:limit]])
        self.high = max(self.high, at + n)
        return n

    def readline(self):
        """The next line (b"" at the end of the input)."""
        if self.start == self.end:
            self.start = self.end = 0
        while True:
            i = self.buf.find(b"\n", self.start, self.end)
            if i >= 0:
                line = bytes(self.view[self.start:i + 1])
                self.start = i + 1
                return line
            if self.end == self.SIZE:
                raise ValueError("a request line longer than 4 MiB")
            n = self._read(self.end, self.SIZE)
            if n == 0:
                line = bytes(self.view[self.start:self.end])
                self.start = self.end
                return line
            self.end += n

    def copy(self, size, out):
        """Moves the next `size` bytes into the file descriptor `out` (None: dropped);
        the first error writing them (they are read all the same, to stay in step)."""
        error = None
        while size:
            if self.start == self.end:
                self.start = self.end = 0
                n = self._read(0, min(self.SIZE, size))
                if n == 0:
                    raise EOFError("the runner's channel ended in the middle of a file")
                self.end = n
            take = min(size, self.end - self.start)
            if out is not None and error is None:
                try:
                    write_all(out, self.view[self.start:self.start + take])
                except OSError as e:
                    error = e
            self.start += take
            size -= take
        return error

    def wipe(self):
        """Zeroes what the buffer held."""
        self.view[:self.high] = bytes(self.high)
        self.high = 0


def inside(base, rel):
    """`rel` under `base`, or None when it is not a plain relative path."""
    if not isinstance(rel, str) or "\0" in rel or rel.startswith("/"):
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return os.path.join(base, *parts)


def receive_files(stdin, work, channel):
    """The invocation's folder, as the runner sends it after the request line: its path,
    and the answer to give instead of calling when it could not be written whole."""
    folder = channel.get("folder")
    if not isinstance(folder, str) or not folder.startswith("inv-") or "/" in folder or inside(work, folder) is None:
        raise ValueError(f"a bad folder name: {folder!r}")
    base = os.path.join(work, folder)
    os.makedirs(base, mode=0o700, exist_ok=True)
    failure = None
    for entry in channel.get("files", []):
        size = int(entry["size"])
        path = inside(base, entry["path"])
        out = None
        if path is None:
            failure = failure or ValueError(f"a bad path: {entry['path']!r}")
        elif failure is None:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            except OSError as e:
                failure = e
        try:
            error = stdin.copy(size, out)
        finally:
            if out is not None:
                os.close(out)
        failure = failure or error
    if failure is not None:
        return base, {"ok": False, "error": f"the call's inputs do not fit in its folder (its disk limit): {failure}", "traceback": ""}
    return base, None


def files_back(answer, base, channel):
    """The files the call wrote into its folder (not those it was sent), within the
    channel's limits, for a call that succeeded (a failure brings nothing back); past
    the limits, or with a name that is not UTF-8, the call fails instead."""
    if not answer.get("ok"):
        answer["files"] = []
        return answer, []
    sent = {e.get("path") for e in channel.get("files", [])}
    limit = int(channel.get("return_max", 0))
    found, total, problem = [], 0, None
    stack = [base]
    while stack and problem is None:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for e in entries:
            rel = os.path.relpath(e.path, base).replace(os.sep, "/")
            try:
                st = e.stat(follow_symlinks=False)
                rel.encode("utf-8")
            except UnicodeEncodeError:
                problem = f"wrote a file whose name is not UTF-8: {rel!r}"
                break
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(e.path)
                continue
            if rel in sent or not stat.S_ISREG(st.st_mode):
                continue
            found.append((rel, e.path, st.st_size))
            total += st.st_size
            if total > limit or len(found) > MAX_FILES:
                problem = f"wrote more than {limit >> 20} MiB or {MAX_FILES} files into its folder"
                break
    if problem is not None:
        answer = {"id": answer.get("id"), "ok": False, "error": problem, "traceback": ""}
        found = []
    answer["files"] = [{"path": rel, "size": size} for rel, _, size in found]
    return answer, found


def send_files(fd, found):
    """The bytes of each file listed, exactly as many as listed (zeros for a file that
    shrank or changed kind since)."""
    for _, path, size in found:
        f = None
        try:
            f = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            if not stat.S_ISREG(os.fstat(f).st_mode):
                os.close(f)
                f = None
        except OSError:
            f = None
        left = size
        while left:
            chunk = b""
            if f is not None:
                try:
                    chunk = os.read(f, min(left, 1 << 20))
                except OSError:
                    chunk = b""
            if not chunk:
                chunk = bytes(min(left, 1 << 20))
            write_all(fd, chunk[:left])
            left -= min(len(chunk), left)
        if f is not None:
            os.close(f)


# The longest answer line (the runner drops longer lines): a longer traceback or detail
# is cut.
MAX_LINE = 8 << 20


def answer_line(answer):
    line = (json.dumps(answer) + "\n").encode()
    if len(line) > MAX_LINE:
        for key in ("traceback", "detail", "error"):
            if isinstance(answer.get(key), str):
                answer[key] = answer[key][-(64 << 10):]
        line = (json.dumps(answer) + "\n").encode()
    return line


def main():
    fd = int(os.environ.get("LH_WORKER_FD", "0") or 0)
    if fd <= 0:
        fd = os.dup(sys.stdout.fileno())
        # User prints must not corrupt the answers: stdout becomes stderr.
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # The worker's folder is not code: nothing is imported from it.
    work = os.getcwd()
    if sys.path and sys.path[0] in ("", work):
        sys.path.pop(0)
    # Calls cannot reach into this process through /proc (its descriptors, its
    # memory), and what they start and leave is reparented here, to be stopped.
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    # Loaded once in the parent, so that calls do not pay for them.
    import pyarrow  # noqa: F401
    import pyarrow.ipc  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import pyarrow.compute  # noqa: F401
    write_all(fd, (json.dumps({"ready": True, "pid": os.getpid()}) + "\n").encode())
    stdin = Channel(sys.stdin.fileno())
    remember_kept(work)
    SETTINGS.remember()
    DESCRIPTORS.remember()
    if os.environ.get("LH_PRIVATE_TMP") == "1":
        NETWORK.remember()
        SYSV.remember()
    while True:
        line = stdin.readline()
        if not line:
            break
        if not line.strip():
            continue
        req = json.loads(line)
        channel = req.pop("channel", None)
        base, answer = None, None
        if channel is not None:
            base, answer = receive_files(stdin, work, channel)
        print(f"--- lh: {req.get('kind')} {req.get('function')} ---", file=sys.stderr, flush=True)
        if answer is None:
            answer = call(req, fd)
        answer["id"] = req.get("id")
        # An answer says only what answers say (a call's cannot announce files of its own).
        answer = {k: v for k, v in answer.items() if k in ANSWER_TYPES}
        del LEFT[:]
        clean = clear_scratch(work, "inv-%s" % req.get("id"))
        if not clean or LEFTOVERS:
            # Said with the answer, so that the runner sends this worker no other call.
            answer["retires"] = True
            print("--- lh: the worker retires after this call, which left what it cannot "
                  "remove%s ---" % ((" (%s)" % "; ".join(LEFT)) if LEFT else ""),
                  file=sys.stderr, flush=True)
        found = []
        if channel is not None:
            answer, found = files_back(answer, base, channel)
        sys.stderr.flush()
        write_all(fd, answer_line(answer))
        send_files(fd, found)
        if channel is not None:
            # Nothing of the call stays for the next one, in its folder or in memory.
            clean = clear_dir(work, (), mount_points()) and clean
            stdin.wipe()
        if not clean or LEFTOVERS:
            # Something of the call could not be removed: no later call may find it.
            if not answer.get("retires"):
                print("--- lh: the worker retires: its call left what it cannot remove ---",
                      file=sys.stderr, flush=True)
            break


if __name__ == "__main__":
    main()
