//! Pipelines you can trust: each wrong result that was once published is a regression
//! test named for its cause, and each way a function could reach beyond its inputs is an
//! attack that must fail cleanly, with nothing published. On both runtimes.

use crate::runs::{
    PROJECT, node, orders, project, run_json, server, server_with, start_until_running,
};

crate::both_runtimes!(
    a_helper_imported_at_the_top_of_a_model_is_found_because_the_root_is_on_sys_path_first,
    a_changed_helper_is_read_again_because_every_call_starts_from_fresh_module_state,
    any_changed_file_of_the_project_reruns_python_nodes_because_the_key_is_the_whole_snapshot,
    a_function_cannot_change_what_later_calls_write,
    a_function_sees_only_its_own_project_code,
    resource_strings_are_parsed_strictly_and_bounded_by_the_server,
    a_function_cannot_fill_tmp_without_bound,
    a_call_can_neither_reach_its_worker_nor_leave_processes_or_files_behind,
    a_hostile_package_runs_nothing_on_the_host_and_sees_no_secret,
    planted_links_and_runaway_filters_fail_cleanly,
    a_function_cannot_fill_its_folder_without_bound,
    nothing_of_the_server_reaches_a_function_through_proc,
    a_function_can_make_no_user_namespace,
    a_function_cannot_change_the_hosts_kernel_or_fill_dev,
    a_function_reaches_no_keyring_and_no_io_uring,
    a_function_is_held_to_its_memory_and_processes_together,
    one_projects_function_takes_nothing_the_kernel_counts_per_user_from_another,
    a_function_cannot_hide_what_it_writes_from_the_measure,
    a_function_can_hold_no_file_outside_its_processes,
    a_function_cannot_hide_blocks_in_its_folder_behind_an_exited_thread_or_by_racing_the_measure,
    a_call_leaves_nothing_for_the_next_and_its_failure_is_bounded,
    a_call_cannot_answer_for_itself,
    a_call_chooses_nothing_its_worker_imports_and_leaves_no_ipc_for_the_next,
    no_descriptor_of_the_server_reaches_a_function,
    nothing_a_call_nests_or_configures_reaches_its_worker_or_the_next_call,
    a_call_leaves_no_socket_and_moves_no_counter_for_the_next,
    a_worker_serves_the_calls_of_one_user_only,
);

/// Found by the twenty-sixth review: every call is a fork of its worker, whose freed
/// memory held earlier calls' answers; a later run of the same code by another user (one
/// who may read less) found there the error of the admin's call, which held a row of a
/// table hidden from that user. A worker serves the calls of one user and roles only: the
/// same user's next run finds the same worker (the test can tell), another user's never.
fn a_worker_serves_the_calls_of_one_user_only(runtime: &str) {
    let server = server(runtime);
    let admin = server.lh();
    orders(&admin);
    let writer = admin.with_token(&server.token_for("wendy", "writer"));
    let models = r#"
import lh
import pyarrow as pa

@lh.model()
def worker(o=lh.Model("raw.orders", columns=["id"])):
    # The worker (this call's parent): its start time tells one worker from another.
    import os
    started = open("/proc/%d/stat" % os.getppid()).read().rsplit(")", 1)[1].split()[19]
    return pa.table({"started": [started]})
"#;
    let dir = project(
        &admin,
        "tenants",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let d = dir.to_str().unwrap();
    let started = |lh: &lh_e2e::Lh, branch: &str| -> String {
        let (code, run) = run_json(lh, &[d, "--no-cache", "--ref", branch]);
        assert_eq!(code, 0, "{runtime}: {run}");
        lh.rows("select started from analytics.worker", branch)[0]["started"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // A role narrowed since: another tenant (found by the twenty-seventh review).
    admin
        .run(&["role", "set", "team", "--grant", "read,write,run on *"])
        .ok();
    let member = admin.with_token(&server.token_for("tess", "team"));
    member.run(&["branch", "create", "t1"]).ok();
    member.run(&["branch", "create", "t2"]).ok();
    let wide = started(&member, "t1");
    admin
        .run(&[
            "role",
            "set",
            "team",
            "--grant",
            "read,write,run on t2",
            "--grant",
            "read on main in raw",
        ])
        .ok();
    assert_ne!(
        wide,
        started(&member, "t2"),
        "{runtime}: a narrowed role kept its worker"
    );
    admin.run(&["branch", "create", "a1"]).ok();
    admin.run(&["branch", "create", "a2"]).ok();
    writer.run(&["branch", "create", "w1"]).ok();
    let first = started(&admin, "a1");
    assert_eq!(
        first,
        started(&admin, "a2"),
        "{runtime}: the admin's runs share a worker"
    );
    assert_ne!(
        first,
        started(&writer, "w1"),
        "{runtime}: another user's call ran in the admin's worker"
    );
}

/// A module of models: `imports`, lh, `folder()` (the worker's own folder, where the
/// call's invocation folder lies, as the sandbox mounts it) and `body`.
fn with_folder(imports: &str, body: &str) -> String {
    format!(
        r#"{imports}
import lh

def folder():
    found = None
    for line in open("/proc/self/mountinfo"):
        point = line.split()[4]
        if point == "/lh/work" or "/workers/worker-" in point:
            found = point
    return found
{body}"#
    )
}

/// Each of `names` in `run` was stopped for writing more than `mib` MiB (or for holding
/// what cannot be measured), and nothing was published.
fn stopped_past_disk(
    lh: &lh_e2e::Lh,
    run: &serde_json::Value,
    before: &str,
    names: &[&str],
    mib: u64,
    runtime: &str,
) {
    for name in names {
        let err = node(run, &format!("analytics.{name}"))["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let past = format!("wrote more than {mib} MiB into its folder and was stopped");
        assert!(
            err.contains(&past)
                || err.contains("what it holds in its folder could not be measured"),
            "{runtime} {name}: {err}"
        );
    }
    assert_eq!(lh.head("main"), before, "nothing was published");
}

/// Found by reviews: a call's folder was measured by its regular files only, so a
/// function held 470 MB in files it removed but kept open, and 60,000 empty files, under
/// a 20 MB limit; then in removed files only mapped, or open in a thread's own table;
/// and made each measure take seconds with two million descriptors; then (the tenth
/// review) in removed files under a path longer than /proc gives back, and in removed
/// folders (held open, or as a process's working folder only). Every entry counts at
/// least a block; removed files and folders the worker's processes hold (open, mapped,
/// as a working folder, root or program) count until they go, each looked at through
/// its handle; a process holds at most 4,096 descriptors, and a worker's past 65,536
/// cannot be measured (stopped).
fn a_function_cannot_hide_what_it_writes_from_the_measure(runtime: &str) {
    let server = server_with(runtime, &["--max-function-disk", "100m"]);
    let lh = server.lh();
    orders(&lh);
    let models = &with_folder(
        "import os, time",
        r#"
@lh.model()
def hides(o=lh.Model("raw.orders", columns=["id"])):
    held = []
    for i in range(10):
        path = os.path.join(folder(), "gone-%d" % i)
        f = open(path, "wb")
        f.write(b"x" * (20 << 20))
        f.flush()
        os.fsync(f.fileno())
        os.remove(path)
        held.append(f)
    time.sleep(5)
    return o

@lh.model()
def many(o=lh.Model("raw.orders", columns=["id"])):
    d = os.path.join(folder(), "many")
    os.mkdir(d)
    for i in range(40000):
        open(os.path.join(d, "%d" % i), "w").close()
    time.sleep(5)
    return o

def filled(path):
    with open(path, "wb") as f:
        f.write(b"x" * (20 << 20))
        f.flush()
        os.fsync(f.fileno())

@lh.model()
def maps(o=lh.Model("raw.orders", columns=["id"])):
    import ctypes, mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    for i in range(10):
        path = os.path.join(folder(), "mapped-%d" % i)
        filled(path)
        fd = os.open(path, os.O_RDONLY)
        libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        os.close(fd)
        os.remove(path)
    time.sleep(5)
    return o

@lh.model()
def threads(o=lh.Model("raw.orders", columns=["id"])):
    import ctypes, threading
    libc = ctypes.CDLL(None, use_errno=True)
    def hold():
        libc.unshare(0x400)  # CLONE_FILES: a descriptor table of the thread's own
        held = []
        for i in range(10):
            path = os.path.join(folder(), "own-%d" % i)
            filled(path)
            held.append(open(path, "rb"))
            os.remove(path)
        time.sleep(6)
    t = threading.Thread(target=hold)
    t.start()
    t.join()
    return o

@lh.model()
def deep(o=lh.Model("raw.orders", columns=["id"])):
    # Removed files held open under a path longer than /proc can give back.
    fd = os.open(folder(), os.O_RDONLY | os.O_DIRECTORY)
    for i in range(18):
        n = "d%02d" % i + "x" * 240
        os.mkdir(n, dir_fd=fd)
        fd = os.open(n, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    held = []
    for i in range(10):
        f = os.open("f%d" % i, os.O_CREAT | os.O_RDWR, 0o600, dir_fd=fd)
        os.write(f, b"x" * (20 << 20))
        os.fsync(f)
        os.unlink("f%d" % i, dir_fd=fd)
        held.append(f)
    time.sleep(5)
    return o

@lh.model()
def rooms(o=lh.Model("raw.orders", columns=["id"])):
    # Removed folders keep their blocks: held by a descriptor, or as a process's
    # working folder only.
    base = folder()
    targets = [os.path.join(base, "t%d" % i) for i in range(2)]
    for t in targets:
        open(t, "w").close()
    held = []
    for d in range(4):
        path = os.path.join(base, "room-%d" % d)
        os.mkdir(path)
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        names = [("%06d" % i) + "y" * 245 for i in range(120000)]
        for i, n in enumerate(names):
            os.link(targets[i // 60000], n, dst_dir_fd=dfd)
        for n in names:
            os.unlink(n, dir_fd=dfd)
        if d == 0 and os.fork() == 0:
            os.chdir(path)
            os.closerange(3, 65536)
            time.sleep(60)
            os._exit(0)
        os.rmdir(path)
        if d == 0:
            os.close(dfd)
        else:
            held.append(dfd)
    time.sleep(5)
    return o

@lh.model()
def storm(o=lh.Model("raw.orders", columns=["id"])):
    fd = os.open(os.path.join(folder(), "one"), os.O_CREAT | os.O_RDWR)
    for _ in range(4000):
        os.dup(fd)
    for _ in range(20):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
    time.sleep(5)
    return o
"#,
    );
    let dir = project(
        &lh,
        "hides",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let before = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_ne!(code, 0, "{run}");
    stopped_past_disk(
        &lh,
        &run,
        &before,
        &["hides", "many", "maps", "threads", "storm", "deep", "rooms"],
        100,
        runtime,
    );
}

/// Found by the twelfth review: a folder a call named like an invocation's (`inv-keep`)
/// stayed in its warm worker for the next call; a failed call's error and traceback were
/// kept whole (8 MB each, stored with the run and answered with it every time).
fn a_call_leaves_nothing_for_the_next_and_its_failure_is_bounded(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    orders(&lh);
    let models = &with_folder(
        "import os",
        r#"
@lh.model()
def leaves(o=lh.Model("raw.orders", columns=["id"])):
    kept = os.path.join(folder(), "inv-keep")
    if os.path.exists(kept):
        raise RuntimeError("left by an earlier call: " + open(os.path.join(kept, "note")).read())
    os.mkdir(kept)
    with open(os.path.join(kept, "note"), "w") as f:
        f.write("a note from pid %d" % os.getpid())
    return o

@lh.model()
def shouts(o=lh.Model("raw.orders", columns=["id"])):
    raise RuntimeError("E" * 4_000_000)
"#,
    );
    let dir = project(
        &lh,
        "leaves",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    for round in 0..2 {
        let (code, run) = run_json(&lh, &[dir.to_str().unwrap(), "--no-cache"]);
        assert_ne!(code, 0, "{run}");
        let leaves = node(&run, "analytics.leaves");
        assert_eq!(
            leaves["status"], "done",
            "{runtime} round {round}: {leaves}"
        );
        let shouts = node(&run, "analytics.shouts");
        let error = shouts["error"].as_str().unwrap_or_default();
        let traceback = shouts["traceback"].as_str().unwrap_or_default();
        assert!(
            error.starts_with("RuntimeError: EEEE") && error.contains("bytes left out"),
            "{runtime}: {}",
            &error[..error.len().min(200)]
        );
        assert!(error.len() < 9 << 10, "{runtime}: {}", error.len());
        assert!(traceback.len() < 65 << 10, "{runtime}: {}", traceback.len());
    }
}

/// Found by the thirteenth review: a call finds its answer's pipe (a local of the
/// harness's frame, under its own) and writes an answer of its own. One of the wrong
/// shape (6 MB) was passed on whole and waited past by the runner until the call's
/// timeout; one claiming rows it never wrote must not publish them. The harness passes
/// on only answers of an answer's shape and types, and the runner takes any line with
/// the call's id as its answer.
fn a_call_cannot_answer_for_itself(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import json, os, sys
import lh

def forge(answer):
    f = sys._getframe()
    while f is not None and not (f.f_code.co_name == "child" and "out" in f.f_locals):
        f = f.f_back
    if f is None:
        raise RuntimeError("no answer pipe found")
    data = (json.dumps(dict(answer, id=f.f_locals["req"]["id"])) + "\n").encode()
    while data:
        data = data[os.write(f.f_locals["out"], data):]
    os._exit(0)

@lh.model()
@lh.resources(timeout="60s")
def shaped(o=lh.Model("raw.orders", columns=["id"])):
    forge({"ok": "yes", "rows": "many", "error": "G" * 6_000_000})

@lh.model()
@lh.resources(timeout="60s")
def negative(o=lh.Model("raw.orders", columns=["id"])):
    forge({"ok": True, "rows": -1})

@lh.model()
@lh.resources(timeout="60s")
def claims(o=lh.Model("raw.orders", columns=["id"])):
    forge({"ok": True, "rows": 1000000, "files": [{"path": "../../x", "size": 1}]})

@lh.model()
@lh.resources(timeout="60s")
def passes(o=lh.Model("raw.orders", columns=["id"])):
    return o

@lh.expectation()
def holds(t=lh.Model("passes", columns=["id"])):
    forge({"ok": True, "passed": True, "detail": 7})
"#;
    let dir = project(
        &lh,
        "forger",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let before = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap(), "--no-cache"]);
    assert_ne!(code, 0, "{run}");
    // Each failed at once (waited past, it would have failed at its timeout).
    for name in ["analytics.shaped", "analytics.negative", "holds"] {
        let n = node(&run, name);
        assert_eq!(
            n["error"], "the function's process answered what is not an answer",
            "{runtime} {name}: {n}"
        );
    }
    let claims = node(&run, "analytics.claims");
    assert_eq!(claims["status"], "failed", "{runtime}: {claims}");
    assert_eq!(lh.head("main"), before, "nothing was published");
}

/// Found by the fourteenth review: a call's forged answer listed modules for its warm
/// worker to import after it (`preload`), and finding `unittest.__main__.x` imported
/// `unittest.__main__` in the worker, which imported the call's own folder: the call's
/// code ran in the worker and stayed for every later call (`this.x` left `this` in
/// each later call's modules); and SysV shared memory, message queues, semaphores,
/// POSIX message queues and `/dev/shm` kept what a call left for the next call and
/// the next run. The worker imports only top-level packages of the environment; it
/// removes the IPC objects and `/dev/shm`'s files between calls, and a function makes
/// no POSIX message queue.
fn a_call_chooses_nothing_its_worker_imports_and_leaves_no_ipc_for_the_next(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    orders(&lh);
    let models = &with_folder(
        "import ctypes, errno, json, os, socket, sys",
        r#"
KEY = 0x4C48
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p

def worker():
    return "%s %s" % (socket.gethostname(), folder())

def leave(inv, sysv):
    with open("/dev/shm/left", "w") as f:
        f.write("left")
    if sysv:
        # (Its worker then retires: the SysV id sequences moved.)
        sid = libc.shmget(KEY, 4096, 0o1000 | 0o600)
        ctypes.memmove(libc.shmat(sid, None, 0), b"left\0", 5)
        q = libc.msgget(KEY, 0o1000 | 0o600)
        msg = ctypes.create_string_buffer((1).to_bytes(8, "little") + b"left")
        libc.msgsnd(q, msg, 4, 0o4000)
        libc.semget(KEY, 1, 0o1000 | 0o600)
    # mq_open("/lhq", O_CREAT | O_RDWR, 0600, NULL)
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    if rt.mq_open(b"/lhq", 0o100 | 2, 0o600, None) >= 0:
        return "a POSIX message queue was made"
    if ctypes.get_errno() != errno.EPERM:
        return "mq_open failed with %d, not EPERM" % ctypes.get_errno()
    with open(os.path.join(inv, "__init__.py"), "w") as f:
        f.write("open('/dev/shm/parent-ran', 'w').write('the call ran in its worker')\n")
    return None

def found():
    seen = sorted(os.listdir("/dev/shm"))
    for name, get in (("shm", lambda: libc.shmget(KEY, 0, 0)),
                      ("msg", lambda: libc.msgget(KEY, 0)),
                      ("sem", lambda: libc.semget(KEY, 0, 0))):
        if get() >= 0:
            seen.append("sysv " + name)
    seen += [m for m in sys.modules if m in ("this", "antigravity", "webbrowser", "unittest.__main__") or m.startswith("inv-")]
    return seen

@lh.expectation()
def probe(t=lh.Model("raw.orders", columns=["id"]), min_amount=lh.Parameter("min_amount")):
    # Failed, so that the run keeps what it says.
    if min_amount == 1:
        return False, json.dumps({"worker": worker(), "seen": found()})
    f = sys._getframe()
    while f is not None and not (f.f_code.co_name == "child" and "out" in f.f_locals):
        f = f.f_back
    req, out = f.f_locals["req"], f.f_locals["out"]
    failed = leave(os.path.dirname(req["inputs"]["t"]), min_amount == 2)
    if failed:
        return False, failed
    answer = {"id": req["id"], "ok": True, "passed": False, "detail": json.dumps({"worker": worker()}),
              "preload": ["unittest.__main__.x", "this.x", "antigravity", "json"]}
    os.write(out, (json.dumps(answer) + "\n").encode())
    os._exit(0)
"#,
    );
    let dir = project(&lh, "ipc", &[("lh_project.yml", PROJECT), ("m.py", models)]);
    let d = dir.to_str().unwrap();
    let mut workers = Vec::new();
    for round in 0..3 {
        // The first round leaves SysV objects too; the others only what the worker
        // cleans and keeps serving after.
        let leaving = if round == 0 {
            "min_amount=2"
        } else {
            "min_amount=0"
        };
        let (_, run) = run_json(&lh, &[d, "--no-cache", "--param", leaving]);
        let left = node(&run, "probe");
        // (The worker imports what it may while the runner takes the folder back.)
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (_, run) = run_json(&lh, &[d, "--no-cache", "--param", "min_amount=1"]);
        let probe = node(&run, "probe");
        let said = |n: &serde_json::Value| -> serde_json::Value {
            serde_json::from_str(n["detail"].as_str().unwrap_or("{}")).unwrap_or_default()
        };
        assert_eq!(
            said(probe)["seen"],
            serde_json::json!([]),
            "{runtime} round {round}: {left} {probe}"
        );
        workers.push((said(left)["worker"].clone(), said(probe)["worker"].clone()));
    }
    // Not vacuous: a later call found the same worker at least once.
    assert!(
        workers.iter().any(|(a, b)| a == b && !a.is_null()),
        "{runtime}: no later call ran on the worker the earlier one used: {workers:?}"
    );
}

/// Found by the fifteenth review: a folder nested 1,000 deep in `/tmp` was past the
/// cleanup between calls (its recursion gave up), so the files under it, and extended
/// attributes of the worker's folder, `/tmp` and `/dev/shm`, reached the next call and
/// run; and an environment's package that reads a configuration from HOME at import
/// (keyring 19.3.0, a real PyPI release) ran the call's own module in the warm worker
/// when the worker imported it after the call. The sixteenth found the root of the
/// process runtime's sandbox writable (a config under `/nonexistent`, where the worker
/// then imported from, did the same), POSIX message queues made through a container's
/// `/dev/mqueue`, and the kept folders' modes and times passing bits. Folders of any
/// depth are removed without recursion, attributes cleared, modes and times reset,
/// `/dev/mqueue` emptied and its queues unusable, the root read-only, a worker whose
/// call left what it cannot remove retires, and the worker imports nothing a call names.
fn nothing_a_call_nests_or_configures_reaches_its_worker_or_the_next_call(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    orders(&lh);
    let project_file =
        "name: shop\nnamespace: analytics\npython: \"3.11\"\npackages:\n  keyring: \"19.3.0\"\n";
    let models = &with_folder(
        "import os, sys, time",
        r#"
PLACES = [p for p in ("/tmp", "/dev/shm", "/dev/mqueue") if os.path.isdir(p)]
MARK = 5496643345511110265
HOME = os.path.expanduser("~")
CONF = os.path.join(HOME, ".local", "share", "python_keyring")
MODS = os.path.join(CONF, "mods")
PARENT_CODE = "import os\nos.environ.setdefault('LH_PWNED', 'the call ran in its worker, pid %d' % os.getpid())\n"

def deep(base, depth=1000):
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(depth):
        try:
            os.mkdir("d", dir_fd=fd)
        except FileExistsError:
            pass
        n = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = n
    with open(os.open("kept", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd), "w") as f:
        f.write("left at the bottom")
    os.close(fd)

def found():
    seen = []
    if os.environ.get("LH_PWNED"):
        seen.append(os.environ["LH_PWNED"])
    if "lhevil" in sys.modules:
        seen.append("lhevil imported")
    # (The sandbox's binds may start in /tmp: the folders leading to them are not the call's.)
    mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
    for place in PLACES + [folder()]:
        for name in os.listdir(place):
            path = os.path.join(place, name)
            if not name.startswith("inv-") and not any(m == path or m.startswith(path + "/") for m in mounts):
                seen.append(path)
        seen += ["%s: %s" % (place, a) for a in os.listxattr(place) if a.startswith("user.")]
        st = os.stat(place)
        if st.st_mtime_ns == MARK or st.st_mode & 0o7777 == 0o1757:
            seen.append("%s: mode %o, mtime %d" % (place, st.st_mode, st.st_mtime_ns))
    # The root and what the sandbox made there: read-only.
    for place in ("/", "/etc"):
        if os.access(place, os.W_OK):
            seen.append(place + " is writable")
    if os.path.exists("/nonexistent"):
        seen.append("/nonexistent")
    # Processes the earlier call left.
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open("/proc/%s/cmdline" % p, "rb").read().startswith(b"sleep"):
                    seen.append("process %s" % p)
            except OSError:
                pass
    return seen

def sleepers():
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                n += open("/proc/%s/cmdline" % p, "rb").read().startswith(b"sleep")
            except OSError:
                pass
    return n

def chain(depth=1005):
    # Each link in a session of its own, out of the call's group (found by the
    # seventeenth review: 1,005 of them outlived a thousand rounds of killing children).
    if os.fork() != 0:
        # Until it is whole, or stops growing (a container's pids limit).
        last, still = -1, 0
        while still < 10:
            n = sleepers()
            still = still + 1 if n == last else 0
            last = n
            if n >= depth - 5:
                break
            time.sleep(0.1)
        return
    try:
        for i in range(depth):
            os.setsid()
            if os.fork() != 0:
                os.execv("/bin/sleep", ["sleep", "100000"])
    except OSError:
        pass
    os.execv("/bin/sleep", ["sleep", "100000"])

@lh.model()
def plants(o=lh.Model("raw.orders", columns=["id"])):
    import keyring  # honestly: the worker imports it for later calls
    os.makedirs(MODS, exist_ok=True)
    with open(os.path.join(CONF, "keyringrc.cfg"), "w") as f:
        f.write("[backend]\ndefault-keyring=lhevil.Nope\nkeyring-path=%s\n" % MODS)
    with open(os.path.join(MODS, "lhevil.py"), "w") as f:
        f.write(PARENT_CODE)
    deep(os.path.join(HOME, ".local"))
    os.mkdir("/dev/shm/nest")
    deep("/dev/shm/nest")
    os.mkdir(os.path.join(folder(), "nest"))
    deep(os.path.join(folder(), "nest"))
    for place in PLACES + [folder()]:
        for mark in (lambda: os.setxattr(place, "user.lh", b"left"),
                     lambda: os.chmod(place, 0o1757),
                     lambda: os.utime(place, ns=(MARK, MARK))):
            try:
                mark()
            except OSError:  # where the file system or the owner lets it not
                pass
    # Where the worker once imported from (it imports nothing a call names, any more).
    try:
        os.makedirs("/nonexistent/python_keyring")
    except OSError:
        pass
    chain()
    # A POSIX message queue through a mounted /dev/mqueue (a container's).
    if os.path.isdir("/dev/mqueue"):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open("/dev/mqueue/lh-left", os.O_CREAT | os.O_RDWR | os.O_NONBLOCK, 0o600)
        if libc.mq_timedsend(fd, b"left", 4, 0, None) == 0:
            raise RuntimeError("a message was queued for later calls")
    return o

@lh.model()
def finds(o=lh.Model("plants", columns=["id"])):
    seen = found()
    if seen:
        raise RuntimeError("left by the earlier call: %r" % seen)
    return o
"#,
    );
    let dir = project(
        &lh,
        "nests",
        &[("lh_project.yml", project_file), ("m.py", models)],
    );
    let d = dir.to_str().unwrap();
    for round in 0..2 {
        let (code, run) = run_json(&lh, &[d, "--no-cache"]);
        assert_eq!(code, 0, "{runtime} round {round}: {run}");
    }
    // A later run finds nothing of them either.
    let (code, run) = run_json(&lh, &[d, "--no-cache"]);
    assert_eq!(code, 0, "{runtime}: {run}");
}

/// Found by the eighteenth review: a call's closed TCP connections linger in the
/// worker's network namespace for a minute (TIME_WAIT, owned by no process), and the
/// next call and run read their ports in `/proc/net/tcp` (a message of 26 bytes came
/// through, on both runtimes); loopback's byte counters and the SysV id sequences carry
/// numbers the same way. The twentieth found IPv6 flow labels (which outlive their
/// socket) and the protocols' counters (`OutNoRoutes` in /proc/net/snmp). A worker whose
/// call changed anything /proc/net shows of its namespace, or the SysV sequences,
/// retires; so does one whose call changed the worker's own resource limits, nice value
/// or CPU affinity (the twenty-first: `prlimit` on the parent carried 64 bits a limit),
/// or its scheduling attributes; a call's session and autogroup are its own (the
/// twenty-second: a time slice and an autogroup's nice value came through). Each pair of
/// calls runs on one worker unless the first retires it. Since the twenty-sixth round a
/// call is fenced off the processes that outlive it (seccomp): each act on the worker,
/// its threads, its group or the sandbox's first process is refused with EPERM, as is
/// `kill(-1)`, `PRIO_USER` and `pidfd_send_signal`, while the call's own stay allowed.
fn a_call_leaves_no_socket_and_moves_no_counter_for_the_next(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import ctypes, os, resource, socket, struct, time
import lh

PORT = 9999

def lingering():
    rows = []
    for table in ("tcp", "tcp6"):
        for line in open("/proc/net/" + table).read().splitlines()[1:]:
            rows.append(line.split()[1:4])
    return rows

def loopback_bytes():
    for line in open("/proc/net/dev"):
        if line.strip().startswith("lo:"):
            return int(line.split(":")[1].split()[0])
    return 0

def shm_sequence():
    libc = ctypes.CDLL(None, use_errno=True)
    a = libc.shmget(0, 1, 0o600)
    libc.shmctl(a, 0, None)
    b = libc.shmget(0, 1, 0o600)
    libc.shmctl(b, 0, None)
    return a // (b - a) if b > a else 0

@lh.model()
def sockets(o=lh.Model("raw.orders", columns=["id"])):
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", PORT))
    server.listen(64)
    for ch in b"left":
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        c.bind(("127.0.0.1", 10000 + ch))
        c.connect(("127.0.0.1", PORT))
        s, _ = server.accept()
        c.close()  # the client's end closes first: it lingers in TIME_WAIT
        time.sleep(0.01)
        s.close()
    server.close()
    if not lingering():
        raise RuntimeError("no connection lingers: the test shows nothing")
    return o

@lh.model()
def sockets_seen(o=lh.Model("sockets", columns=["id"])):
    if lingering():
        raise RuntimeError("the earlier call's connections: %r" % lingering())
    return o

@lh.model()
def traffic(o=lh.Model("sockets_seen", columns=["id"])):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"x" * 4321, ("127.0.0.1", 9))
    u.close()
    return o

@lh.model()
def traffic_seen(o=lh.Model("traffic", columns=["id"])):
    if loopback_bytes() > 0:
        raise RuntimeError("loopback counted %d bytes before this call" % loopback_bytes())
    return o

@lh.model()
def ids(o=lh.Model("traffic_seen", columns=["id"])):
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(42):
        libc.shmctl(libc.shmget(0, 1, 0o600), 0, None)
    return o

@lh.model()
def ids_seen(o=lh.Model("ids", columns=["id"])):
    if shm_sequence() > 20:
        raise RuntimeError("%d shared memory segments were made before this call" % shm_sequence())
    return o

def flow_labels():
    try:
        return open("/proc/net/ip6_flowlabel").read().splitlines()[1:]
    except OSError:
        return []

@lh.model()
def labels(o=lh.Model("ids_seen", columns=["id"])):
    # An IPv6 flow label shared with anyone outlives its socket (found by the twentieth
    # review: 26 bytes passed in their numbers).
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        dst = socket.inet_pton(socket.AF_INET6, "::1")
        s.setsockopt(socket.IPPROTO_IPV6, 32, dst + struct.pack("!I", 0x12345) + struct.pack("=BBHHHI", 0, 255, 1, 150, 150, 0))
        s.close()
    except OSError:
        pass  # a sandbox without IPv6: nothing to leave
    return o

@lh.model()
def labels_seen(o=lh.Model("labels", columns=["id"])):
    if flow_labels():
        raise RuntimeError("the earlier call's flow labels: %r" % flow_labels())
    return o

def out_no_routes():
    rows = [line.split() for line in open("/proc/net/snmp") if line.startswith("Ip:")]
    return int(rows[1][rows[0].index("OutNoRoutes")])

@lh.model()
def unroutable(o=lh.Model("labels_seen", columns=["id"])):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(123):
        try:
            u.sendto(b"x", ("10.9.8.7", 9))
        except OSError:
            pass
    u.close()
    if out_no_routes() == 0:
        raise RuntimeError("no send was counted: the test shows nothing")
    return o

@lh.model()
def unroutable_seen(o=lh.Model("unroutable", columns=["id"])):
    if out_no_routes() > 0:
        raise RuntimeError("%d sends without a route before this call" % out_no_routes())
    return o

def settings():
    return (resource.getrlimit(resource.RLIMIT_CPU), os.getpriority(os.PRIO_PROCESS, 0),
            sorted(os.sched_getaffinity(0)))

def refused(what, act):
    """Each act on a process that outlives the call (the worker, its threads, the
    sandbox's first process) fails with EPERM: the call's fence. What the fence might
    miss, the worker's own checks still catch (the *_seen models)."""
    libc = ctypes.CDLL(None, use_errno=True)
    ctypes.set_errno(0)
    try:
        got = act(libc)
    except PermissionError:
        return
    if got == -1 and ctypes.get_errno() == 1:
        return
    raise RuntimeError("a call could %s (%r, errno %d)" % (what, got, ctypes.get_errno()))

@lh.model()
def parent_settings(o=lh.Model("unroutable_seen", columns=["id"])):
    # Set on the worker, which forks the next call (found by the twenty-first review).
    parent = os.getppid()
    refused("raise the worker's CPU limit", lambda libc: resource.prlimit(
        parent, resource.RLIMIT_CPU, ((1 << 50) + 12345, resource.RLIM_INFINITY)))
    refused("set the worker's nice value", lambda libc: os.setpriority(os.PRIO_PROCESS, parent, 7))
    refused("set the nice value of the worker's group",
            lambda libc: os.setpriority(os.PRIO_PGRP, os.getpgid(parent), 7))
    refused("set the nice value of every process of its user",
            lambda libc: os.setpriority(os.PRIO_USER, 0, 7))
    refused("set the worker's affinity", lambda libc: os.sched_setaffinity(parent, [0]))
    refused("set the worker's scheduler",
            lambda libc: os.sched_setscheduler(parent, os.SCHED_BATCH, os.sched_param(0)))
    refused("set the worker's I/O priority", lambda libc: libc.syscall(251, 1, parent, (2 << 13) | 5))
    refused("signal the worker", lambda libc: os.kill(parent, 0))
    refused("signal the worker's group", lambda libc: os.kill(-os.getpgid(parent), 0))
    refused("signal every process", lambda libc: os.kill(-1, 0))
    refused("open the worker as a pidfd", lambda libc: os.pidfd_open(parent))
    refused("signal the worker through its /proc folder", lambda libc: libc.syscall(
        424, os.open("/proc/%d" % parent, os.O_RDONLY | os.O_DIRECTORY), 0, None, 0))
    # What the call does to itself and its own children stays its own to do.
    os.setpriority(os.PRIO_PROCESS, 0, 1)
    os.sched_setaffinity(0, os.sched_getaffinity(0))
    os.kill(os.getpid(), 0)
    return o

@lh.model()
def parent_settings_seen(o=lh.Model("parent_settings", columns=["id"])):
    cpu, nice, _ = settings()
    if cpu[0] != resource.RLIM_INFINITY or nice != 0:
        raise RuntimeError("the earlier call's settings: %r" % (settings(),))
    return o

def sched_runtime():
    buf = ctypes.create_string_buffer(56)
    ctypes.CDLL(None, use_errno=True).syscall(315, 0, buf, 56, 0)
    return struct.unpack("=IIQiIQQQII", buf.raw)[5]

def autogroup_nice():
    try:
        return int(open("/proc/self/autogroup").read().split()[-1])
    except OSError:
        return 0

@lh.model()
def parent_sched(o=lh.Model("parent_settings_seen", columns=["id"])):
    # (Found by the twenty-second review: a time slice set on the worker, and the nice
    # value of the autogroup it shared with its calls.)
    attr = ctypes.create_string_buffer(struct.pack("=IIQiIQQQII", 56, 0, 0, 0, 0, 1234567, 0, 0, 0, 0), 56)
    refused("set the worker's time slice", lambda libc: libc.syscall(314, os.getppid(), attr, 0))
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("13")
    except OSError:
        pass
    return o

@lh.model()
def parent_sched_seen(o=lh.Model("parent_sched", columns=["id"])):
    if sched_runtime() == 1234567 or autogroup_nice() == 13:
        raise RuntimeError("the earlier call's scheduling: %d %d" % (sched_runtime(), autogroup_nice()))
    return o

def first_process():
    return resource.prlimit(1, resource.RLIMIT_CORE), os.getpriority(os.PRIO_PROCESS, 1)

@lh.model()
def first_settings(o=lh.Model("parent_sched_seen", columns=["id"])):
    # The sandbox's first process (bubblewrap's, of the same user, on the process
    # runtime; the worker itself in a container): found by the twenty-third review.
    refused("set the first process's core limit",
            lambda libc: resource.prlimit(1, resource.RLIMIT_CORE, (4321, 4321)))
    refused("set the first process's nice value", lambda libc: os.setpriority(os.PRIO_PROCESS, 1, 11))
    refused("signal the first process", lambda libc: os.kill(1, 0))
    return o

@lh.model()
def first_settings_seen(o=lh.Model("first_settings", columns=["id"])):
    core, nice = first_process()
    if core[0] == 4321 or nice == 11:
        raise RuntimeError("the earlier call's settings of process 1: %r" % (first_process(),))
    return o

def worker_threads():
    parent = os.getppid()
    try:
        return [int(t) for t in os.listdir("/proc/%d/task" % parent) if int(t) != parent]
    except OSError:
        return []

@lh.model()
def thread_settings(o=lh.Model("first_settings_seen", columns=["id"])):
    # The worker's other threads (found by the twenty-fourth review).
    for tid in worker_threads():
        refused("set a worker thread's nice value", lambda libc: os.setpriority(os.PRIO_PROCESS, tid, 9))
        refused("set a worker thread's affinity", lambda libc: os.sched_setaffinity(tid, [0]))
        refused("signal a worker thread", lambda libc: libc.syscall(200, tid, 0))
    return o

def pending_signals():
    found = {}
    for tid in worker_threads():
        try:
            for line in open("/proc/%d/task/%d/status" % (os.getppid(), tid)):
                if line.startswith("SigPnd:") and int(line.split()[1], 16):
                    found[tid] = line.strip()
        except OSError:
            pass
    return found

@lh.model()
def signals(o=lh.Model("thread_settings_seen", columns=["id"])):
    # A signal a thread of the worker blocks stays pending (the twenty-fifth review).
    for tid in worker_threads():
        refused("signal a worker thread", lambda libc: libc.syscall(234, os.getppid(), tid, 28))
    return o

@lh.model()
def signals_seen(o=lh.Model("signals", columns=["id"])):
    if pending_signals():
        raise RuntimeError("signals pending on the worker's threads: %r" % pending_signals())
    return o

@lh.model()
def thread_settings_seen(o=lh.Model("thread_settings", columns=["id"])):
    niced = [t for t in worker_threads() if os.getpriority(os.PRIO_PROCESS, t) == 9]
    if niced:
        raise RuntimeError("the earlier call's settings of the worker's threads: %r" % niced)
    return o

def shared_descriptor():
    import fcntl
    return (fcntl.fcntl(2, fcntl.F_GETFL) & (os.O_APPEND | os.O_NONBLOCK), fcntl.fcntl(2, 11),
            fcntl.fcntl(2, fcntl.F_GETOWN), fcntl.fcntl(2, 1032))

@lh.model()
def descriptors(o=lh.Model("signals_seen", columns=["id"])):
    # The standard descriptors' open description is the worker's (the twenty-sixth
    # review): its flags, I/O signal, owner and pipe size.
    import fcntl
    refused("make the kernel signal the worker on I/O",
            lambda libc: fcntl.fcntl(2, fcntl.F_SETOWN, os.getppid()))
    refused("name the worker the owner behind a pointer",
            lambda libc: fcntl.fcntl(2, 15, struct.pack("ii", 0, os.getppid())))
    fcntl.fcntl(2, fcntl.F_SETFL, fcntl.fcntl(2, fcntl.F_GETFL) | os.O_APPEND | os.O_NONBLOCK)
    fcntl.fcntl(2, 10, 42)
    fcntl.fcntl(2, fcntl.F_SETOWN, os.getpid())
    try:
        fcntl.fcntl(2, 1031, 131072)
    except OSError:
        pass  # a pipe size the user may not raise
    return o

@lh.model()
def locks(o=lh.Model("descriptors", columns=["id"])):
    # A record lock on the log's pipe (the twenty-seventh review): its range was read by
    # every later run.
    import fcntl
    fcntl.fcntl(2, 37, struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, 0, 4242, 77, 0))
    return o

@lh.model()
def locks_seen(o=lh.Model("locks", columns=["id"])):
    import fcntl
    got = fcntl.fcntl(2, fcntl.F_GETLK, struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, 0, 0, 0, 0))
    kind, _, start, length, _ = struct.unpack("hhxxxxqqixxxx", got)
    if kind != fcntl.F_UNLCK:
        raise RuntimeError("the earlier call's lock on the log: %d+%d" % (start, length))
    return o

@lh.model()
def descriptors_seen(o=lh.Model("locks_seen", columns=["id"])):
    flags, sig, owner, size = shared_descriptor()
    if flags or sig == 42 or owner != 0 or size == 131072:
        raise RuntimeError("the earlier call's settings of the log's pipe: %r" % (shared_descriptor(),))
    return o

def kept_folders():
    found = []
    for line in open("/proc/self/mountinfo"):
        point = line.split()[4]
        if point == "/lh/work" or "/workers/worker-" in point:
            found.append(point)
    return found + ["/tmp", "/dev/shm"]

def inode_flags(path):
    import array, fcntl
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buf = array.array("l", [0])
        fcntl.ioctl(fd, 0x80086601, buf, True)
        return buf[0]
    except OSError:
        return None
    finally:
        os.close(fd)

@lh.model()
def folders(o=lh.Model("descriptors_seen", columns=["id"])):
    # Inode flags and sizes of the folders the cleanup keeps (the twenty-sixth review).
    import array, fcntl
    for place in kept_folders():
        fd = os.open(place, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, 0x40086602, array.array("l", [(inode_flags(place) or 0) | 0x40]), True)
        except OSError:
            pass  # a file system without them (tmpfs)
        finally:
            os.close(fd)
        for i in range(3000):
            try:
                open(os.path.join(place, "f%05d-%s" % (i, "x" * 100)), "w").close()
            except OSError:
                break
    return o

@lh.model()
def folders_seen(o=lh.Model("folders", columns=["id"])):
    flagged = [p for p in kept_folders() if (inode_flags(p) or 0) & 0x40]
    sizes = {p: os.stat(p).st_size for p in kept_folders()}
    big = {p: s for p, s in sizes.items() if s > 64 << 10}
    if flagged or big:
        raise RuntimeError("the earlier call's marks on the kept folders: %r %r" % (flagged, big))
    return o
"#;
    let dir = project(
        &lh,
        "counters",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let d = dir.to_str().unwrap();
    for round in 0..2 {
        let (code, run) = run_json(&lh, &[d, "--no-cache"]);
        assert_eq!(code, 0, "{runtime} round {round}: {run}");
    }
}

/// Found by the fourteenth review: a descriptor the server inherited (`lh server
/// 9>>file`; one session passed its shell's pipe) was open in every function on the
/// process runtime, which wrote to the host's file through it. Only what the sandbox's
/// command line opens reaches it.
fn no_descriptor_of_the_server_reaches_a_function(runtime: &str) {
    let host = tempfile::NamedTempFile::new().unwrap();
    let cache = crate::runs::env_cache();
    let server = lh_e2e::Server::start_with_env(
        &["--env-cache", &cache, "--runtime", runtime],
        &[(lh_e2e::INHERIT_FD9, host.path().to_str().unwrap())],
    );
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import os
import lh
import pyarrow as pa

@lh.model()
def reaches(o=lh.Model("raw.orders", columns=["id"])):
    open_fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
    wrote = []
    try:
        os.write(9, b"from the sandbox\n")
        wrote.append(9)
    except OSError:
        pass
    return pa.table({"fds": [str(open_fds)], "wrote": [str(wrote)]})
"#;
    let dir = project(&lh, "fds", &[("lh_project.yml", PROJECT), ("m.py", models)]);
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let host_text = std::fs::read_to_string(host.path()).unwrap();
    assert!(
        !host_text.contains("from the sandbox"),
        "{runtime}: a function wrote to the server's descriptor 9"
    );
    let rows = lh.rows("select fds, wrote from analytics.reaches", "main");
    assert_eq!(rows[0]["wrote"], "[]", "{runtime}: {rows:?}");
}

/// Found by the eleventh review: the measured folder's own blocks were not counted (a
/// folder grows with its entries and never shrinks: 100,000 names linked to one empty
/// file and removed again left 26 MB); the mappings of a process whose first thread had
/// exited read as none (its `/proc/<pid>/map_files` is empty while its other threads
/// hold them); and a call told by inotify that the measure opened a folder moved its
/// data into one the walk had passed, every time. The worker's processes are stopped
/// (its cgroups frozen) while it is measured.
fn a_function_cannot_hide_blocks_in_its_folder_behind_an_exited_thread_or_by_racing_the_measure(
    runtime: &str,
) {
    let server = server_with(runtime, &["--max-function-disk", "20m"]);
    let lh = server.lh();
    orders(&lh);
    let models = &with_folder(
        "import ctypes, mmap, os, threading, time",
        r#"
@lh.model()
def grows(o=lh.Model("raw.orders", columns=["id"])):
    base = folder()
    targets = [os.path.join(base, "g%d" % i) for i in range(2)]
    for t in targets:
        open(t, "w").close()
    bfd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    names = [("%06d" % i) + "z" * 245 for i in range(100000)]
    for i, n in enumerate(names):
        os.link(targets[i // 60000], n, dst_dir_fd=bfd)
    for n in names:
        os.unlink(n, dir_fd=bfd)
    time.sleep(3)
    return o

@lh.model()
def orphaned(o=lh.Model("raw.orders", columns=["id"])):
    # The call waits for its orphan to hold its files (however slow the disk is), then
    # for the measures to find them.
    held_r, held_w = os.pipe()
    if os.fork() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        # (Found before the first thread exits: /proc/self/mountinfo reads as EINVAL
        # once it has, which left the orphan holding too little on a loaded machine.)
        base = folder()
        def hold():
            for i in range(5):
                path = os.path.join(base, "orphan-%d" % i)
                with open(path, "wb") as f:
                    f.write(b"x" * (10 << 20))
                    f.flush()
                    os.fsync(f.fileno())
                fd = os.open(path, os.O_RDONLY)
                libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
                os.close(fd)
                os.remove(path)
            os.write(held_w, b"x")
            time.sleep(60)
        threading.Thread(target=hold).start()
        time.sleep(0.2)
        # The first thread alone exits (SYS_exit, not exit_group).
        libc.syscall(60 if os.uname().machine == "x86_64" else 93, 0)
    import select
    select.select([held_r], [], [], 60)
    time.sleep(3)
    return o

@lh.model()
def racer(o=lh.Model("raw.orders", columns=["id"])):
    import select, struct
    base = folder()
    # E before P in the folder's order: the walk passes E before it opens P.
    for i in range(100):
        e, p = "E%d" % i, "P%d" % i
        os.mkdir(os.path.join(base, e))
        os.mkdir(os.path.join(base, p))
        order = os.listdir(base)
        if order.index(e) < order.index(p):
            break
        os.rmdir(os.path.join(base, e))
        os.rmdir(os.path.join(base, p))
    E, P = os.path.join(base, e), os.path.join(base, p)
    # P slow to walk (links to one empty file count once), D late in it.
    src = os.path.join(base, "s")
    open(src, "w").close()
    pfd = os.open(P, os.O_RDONLY | os.O_DIRECTORY)
    for k in range(60000):
        os.link(src, "%05d" % k, dst_dir_fd=pfd)
    for k in range(200):
        os.mkdir("d%03d" % k, dir_fd=pfd)
    order = os.listdir(P)
    late = max(("d%03d" % k for k in range(200)), key=order.index)
    for k in range(200):
        if "d%03d" % k != late:
            os.rmdir("d%03d" % k, dir_fd=pfd)
    d_in, d_out = os.path.join(P, late), os.path.join(E, "D")
    libc = ctypes.CDLL(None, use_errno=True)
    ifd = libc.inotify_init1(0)
    libc.inotify_add_watch(ifd, P.encode(), 0x20 | 0x10)  # IN_OPEN | IN_CLOSE_NOWRITE
    told, tell = os.pipe()
    def mover():
        inside = True
        while True:
            buf = os.read(ifd, 65536)
            i = 0
            while i < len(buf):
                wd, mask, cookie, ln = struct.unpack_from("iIII", buf, i)
                i += 16 + ln
                if mask & 0x20 and inside:
                    os.rename(d_in, d_out)
                    inside = False
                    os.write(tell, b"m")
                elif mask & 0x10 and not inside:
                    os.rename(d_out, d_in)
                    inside = True
    while select.select([ifd], [], [], 0)[0]:
        os.read(ifd, 65536)
    # A process of its own (no lock shared with the writer) moves D.
    dfd = os.open(d_in, os.O_RDONLY | os.O_DIRECTORY)  # D wherever it is
    if os.fork() == 0:
        mover()
    # The data is written once the mover has stepped out of two measures' way.
    for _ in range(2):
        if select.select([told], [], [], 5)[0]:
            os.read(told, 1)
    for i in range(4):
        f = os.open("f%d" % i, os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=dfd)
        os.write(f, b"x" * (10 << 20))
        os.fsync(f)
        os.close(f)
    time.sleep(5)
    return o
"#,
    );
    let dir = project(
        &lh,
        "hidden",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let before = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_ne!(code, 0, "{run}");
    stopped_past_disk(
        &lh,
        &run,
        &before,
        &["grows", "orphaned", "racer"],
        20,
        runtime,
    );
}

/// Found by reviews: a descriptor sent over a socket and not yet received is in no
/// process's table, so a function held removed files in flight (up to 4,096 of them, each
/// as large as its disk limit) out of its folder's measure; Landlock's rules hold the
/// files they name the same way; `fallocate` with `FALLOC_FL_KEEP_SIZE` took 1 GiB of
/// blocks past a 20 MB file-size limit. A function (and a package's build) can send no
/// descriptor, make no Landlock rule and allocate no block past a file's size; sockets,
/// asyncio, multiprocessing and a plain `posix_fallocate` work.
fn a_function_can_hold_no_file_outside_its_processes(runtime: &str) {
    let server = server_with(runtime, &["--max-function-disk", "100m"]);
    let lh = server.lh();
    orders(&lh);
    let models = &with_folder(
        "import ctypes, errno, os, socket, time",
        r#"
@lh.model()
def inflight(o=lh.Model("raw.orders", columns=["id"])):
    a, b = socket.socketpair()
    for i in range(10):
        path = os.path.join(folder(), "sent-%d" % i)
        with open(path, "wb") as f:
            f.write(b"x" * (20 << 20))
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(path, os.O_RDONLY)
        socket.send_fds(a, [b"x"], [fd])
        os.close(fd)
        os.remove(path)
    time.sleep(5)
    return o

@lh.model()
def batched(o=lh.Model("raw.orders", columns=["id"])):
    # sendmmsg, by hand: one message carrying a descriptor.
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = socket.socketpair()
    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    class Cmsg(ctypes.Structure):
        _fields_ = [("len", ctypes.c_size_t), ("level", ctypes.c_int), ("type", ctypes.c_int), ("fd", ctypes.c_int), ("pad", ctypes.c_int)]
    class MsgHdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint), ("iov", ctypes.POINTER(IoVec)), ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t), ("flags", ctypes.c_int)]
    class MMsgHdr(ctypes.Structure):
        _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]
    data = ctypes.create_string_buffer(b"x")
    iov = IoVec(ctypes.cast(data, ctypes.c_void_p), 1)
    cmsg = Cmsg(20, socket.SOL_SOCKET, socket.SCM_RIGHTS, os.open("/proc/self/mountinfo", os.O_RDONLY), 0)
    msg = MMsgHdr(MsgHdr(None, 0, ctypes.pointer(iov), 1, ctypes.cast(ctypes.pointer(cmsg), ctypes.c_void_p), 24, 0), 0)
    sent = libc.syscall(307 if os.uname().machine == "x86_64" else 269, a.fileno(), ctypes.byref(msg), 1, 0)
    if sent != 1:
        raise OSError(ctypes.get_errno(), "sendmmsg: " + os.strerror(ctypes.get_errno()))
    return o

@lh.model()
def ruled(o=lh.Model("raw.orders", columns=["id"])):
    libc = ctypes.CDLL(None, use_errno=True)
    # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) < 0 and ctypes.get_errno() == errno.EPERM:
        raise PermissionError("landlock refused")
    return o

@lh.model()
def allocates(o=lh.Model("raw.orders", columns=["id"])):
    # FALLOC_FL_KEEP_SIZE: blocks without a size, past the file-size limit.
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join(folder(), "kept"), os.O_CREAT | os.O_RDWR)
    if libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(1 << 30)) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    time.sleep(5)
    return o

@lh.model()
def allowed(o=lh.Model("raw.orders", columns=["id"])):
    import asyncio, multiprocessing
    fd = os.open(os.path.join(folder(), "sized"), os.O_CREAT | os.O_RDWR)
    os.posix_fallocate(fd, 0, 1 << 20)
    assert os.fstat(fd).st_size == 1 << 20
    a, b = socket.socketpair()
    a.sendall(b"ping")
    assert b.recv(4) == b"ping"
    async def main():
        await asyncio.sleep(0.01)
        return 2
    assert asyncio.run(main()) == 2
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(abs, [-1, -2, 3]) == [1, 2, 3]
    return o
"#,
    );
    let dir = project(
        &lh,
        "inflight",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let before = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_ne!(code, 0, "{run}");
    for (name, said) in [
        ("analytics.inflight", "[Errno 1] Operation not permitted"),
        ("analytics.batched", "Operation not permitted"),
        ("analytics.ruled", "landlock refused"),
        ("analytics.allocates", "Operation not supported"),
    ] {
        let err = node(&run, name)["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(err.contains(said), "{runtime} {name}: {err}");
    }
    assert_eq!(
        node(&run, "analytics.allowed")["status"],
        "done",
        "{runtime}: {run}"
    );
    assert_eq!(lh.head("main"), before, "nothing was published");
}

/// Found by a review: every sandbox ran as one host user, so a function that took every
/// inotify instance the kernel allows a user (128) made another project's function's
/// `inotify_init` fail (EMFILE); processes, pipe buffers and pending signals are counted
/// per user too. Each worker (or container) runs as a host user of its own.
fn one_projects_function_takes_nothing_the_kernel_counts_per_user_from_another(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    orders(&lh);
    let holder = r#"
import ctypes, time
import lh
import pyarrow as pa

@lh.model()
@lh.resources(timeout="5m")
def hold(o=lh.Model("raw.orders", columns=["id"])):
    libc = ctypes.CDLL(None, use_errno=True)
    held = 0
    while libc.inotify_init() >= 0 and held < 100000:
        held += 1
    time.sleep(40)
    return pa.table({"v": [held]})
"#;
    let victim = r#"
import ctypes, os
import lh
import pyarrow as pa

@lh.model()
def other(o=lh.Model("raw.orders", columns=["id"])):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    return pa.table({"v": ["ok" if fd >= 0 else os.strerror(ctypes.get_errno())]})
"#;
    let a = project(
        &lh,
        "holder",
        &[("lh_project.yml", PROJECT), ("m.py", holder)],
    );
    let b = project(
        &lh,
        "victim",
        &[("lh_project.yml", PROJECT), ("m.py", victim)],
    );
    let id = start_until_running(&lh, &a);
    // The holder's function takes its instances as it starts.
    std::thread::sleep(std::time::Duration::from_secs(5));
    let (code, run) = run_json(&lh, &[b.to_str().unwrap()]);
    let _ = lh.run(&["runs", "cancel", &id[..12]]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(
        value(&lh, "select v from analytics.other"),
        "ok",
        "{runtime}: another project's function took this one's inotify instances"
    );
}

/// Found by a review: in a user namespace of its own, a function (uid 1000 mapped to the
/// server's uid) held every capability over what the server's uid owns: it raised its
/// cgroup's limits and set file capabilities on what it wrote. No function makes one,
/// by any way there is to ask (unshare(1), the unshare and clone system calls).
fn a_function_can_make_no_user_namespace(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import ctypes, os, subprocess
import lh
import pyarrow as pa

@lh.model()
def userns(o=lh.Model("raw.orders", columns=["id"])):
    made = []
    if subprocess.run(["unshare", "-Ur", "true"], capture_output=True).returncode == 0:
        made.append("unshare(1)")
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWUSER = 0x10000000
    if os.fork() == 0:
        os._exit(0 if libc.unshare(CLONE_NEWUSER) == 0 else 1)
    if os.WEXITSTATUS(os.wait()[1]) == 0:
        made.append("unshare(2)")
    return pa.table({"v": [",".join(made) or "none"]})
"#;
    let dir = project(
        &lh,
        "userns",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(value(&lh, "select v from analytics.userns"), "none");
}

/// Found by a review: the sandbox's user is the server's uid by another name (root,
/// here), and bubblewrap left `/proc/sys` writable: a function wrote the host's
/// `core_pattern` and the kernel ran its script as root. Nothing the kernel lets root
/// change through a file is writable, the host's keyrings are not listed, and `/dev` is
/// not a tmpfs of no size. (Only opened for writing, never written.)
fn a_function_cannot_change_the_hosts_kernel_or_fill_dev(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import os
import lh
import pyarrow as pa

@lh.model()
def kernel(o=lh.Model("raw.orders", columns=["id"])):
    done = []
    for path in ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches",
                 "/proc/sysrq-trigger", "/proc/sys/kernel/hostname"]:
        try:
            os.close(os.open(path, os.O_WRONLY))
            done.append("opened " + path)
        except OSError:
            pass
    try:
        if open("/proc/keys").read().strip():
            done.append("read /proc/keys")
    except OSError:
        pass
    try:
        with open("/dev/hog", "wb") as f:
            f.write(b"x")
        done.append("wrote /dev")
    except OSError:
        pass
    try:
        with open("/dev/shm/hog", "wb") as f:
            for _ in range(4):
                f.write(b"x" * (64 << 20))
        done.append("wrote 256 MiB to /dev/shm")
    except OSError:
        pass
    return pa.table({"v": [", ".join(done) or "none"]})
"#;
    let dir = project(
        &lh,
        "kernel",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(value(&lh, "select v from analytics.kernel"), "none");
}

/// Found by a review: a function (or a package's `.pth`) added a key to the server's
/// session keyring, which another project's function read later; keys were charged to
/// the host's root. No sandbox reaches the kernel's keyrings, nor io_uring (as Docker's
/// default profile refuses them).
fn a_function_reaches_no_keyring_and_no_io_uring(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import ctypes, os, platform, time
import lh
import pyarrow as pa

@lh.model()
def keys(o=lh.Model("raw.orders", columns=["id"])):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    nr = {"x86_64": (248, 250, 425, 101, 310), "aarch64": (217, 219, 425, 117, 270)}[platform.machine()]
    add_key, keyctl, io_uring_setup, ptrace, vm_readv = nr
    done = []
    # Another process of the sandbox (a child of the call's), reached into.
    kid = os.fork()
    if kid == 0:
        time.sleep(30)
        os._exit(0)
    if libc.syscall(ptrace, 16, kid, 0, 0) >= 0:
        done.append("ptrace")
    buf = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
    remote = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
    if libc.syscall(vm_readv, kid, local, 1, remote, 1, 0) >= 0:
        done.append("process_vm_readv")
    os.kill(kid, 9)
    os.waitpid(kid, 0)
    # PID 1 (bubblewrap's init, or the harness), written into without ptrace.
    try:
        open("/proc/1/mem", "r+b").close()
        done.append("init memory")
    except OSError:
        pass
    if libc.syscall(add_key, b"user", b"lh-note", b"x", 1, ctypes.c_int(-3)) >= 0:
        done.append("add_key")
    # KEYCTL_GET_KEYRING_ID of the session keyring
    if libc.syscall(keyctl, 0, ctypes.c_int(-3), 0) >= 0:
        done.append("keyctl")
    params = ctypes.create_string_buffer(120)
    if libc.syscall(io_uring_setup, 1, params) >= 0:
        done.append("io_uring_setup")
    return pa.table({"v": [", ".join(done) or "none"]})
"#;
    let dir = project(
        &lh,
        "keys",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    // Docker's default profile refuses io_uring from Docker 25 on; the engines here
    // (Debian's 20.10) allow it, and lh leaves a container's profile to its engine.
    let seen = value(&lh, "select v from analytics.keys")
        .as_str()
        .unwrap()
        .to_string();
    // Docker's profile also lets a container's process trace its own children (kernels
    // from 4.8 on); its processes cannot reach the host's anyway.
    let refused = match runtime {
        "docker" => seen
            .replace("io_uring_setup", "")
            .replace("process_vm_readv", "")
            .replace("ptrace", ""),
        _ => seen.clone(),
    };
    let refused = refused.trim_matches([',', ' ']);
    assert!(refused == "none" || refused.is_empty(), "{runtime}: {seen}");
}

/// Found by a review: on the process runtime a function's memory was an address space,
/// which memory it never maps (a memfd, /dev/shm) and its children escape: under
/// `memory="256m"` one held 1.5 GiB, and ran 1,500 processes. A worker's processes are
/// held together (cgroups of its own, as a container's are).
fn a_function_is_held_to_its_memory_and_processes_together(runtime: &str) {
    let server = server_with(runtime, &[]);
    let lh = server.lh();
    orders(&lh);
    let hog = r#"
import os
import lh
import pyarrow as pa

@lh.model()
@lh.resources(memory="512m")
def hog(o=lh.Model("raw.orders", columns=["id"])):
    fd = os.memfd_create("hog")
    for _ in range(16):
        os.write(fd, b"x" * (64 << 20))
    return pa.table({"v": ["held 1 GiB"]})
"#;
    let dir = project(&lh, "hog", &[("lh_project.yml", PROJECT), ("m.py", hog)]);
    let head = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 8, "a function held 1 GiB under memory=512m: {run}");
    assert_eq!(lh.head("main"), head, "nothing was published");
    let forks = r#"
import os
import lh
import pyarrow as pa

@lh.model()
def forks(o=lh.Model("raw.orders", columns=["id"])):
    n = 0
    for _ in range(1500):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                null = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execv("/bin/sleep", ["sleep", "30"])
            finally:
                os._exit(0)
        n += 1
    return pa.table({"v": [n]})
"#;
    let dir = project(
        &lh,
        "forks",
        &[("lh_project.yml", PROJECT), ("m.py", forks)],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let n = value(&lh, "select v from analytics.forks")
        .as_i64()
        .unwrap();
    assert!(n < 1500, "a function ran {n} processes at once");
}

fn value(lh: &lh_e2e::Lh, sql: &str) -> serde_json::Value {
    lh.rows(sql, "main")[0]["v"].clone()
}

const TOP_IMPORT: &str = r#"
import lh
import helper
import pyarrow as pa

@lh.model()
def m(o=lh.Model("raw.orders", columns=["id"])):
    return pa.table({"v": [helper.value()]})
"#;

/// Once: `ModuleNotFoundError: No module named 'helper'`, since the project's folder
/// was put on `sys.path` only after the model's module had been loaded.
fn a_helper_imported_at_the_top_of_a_model_is_found_because_the_root_is_on_sys_path_first(
    runtime: &str,
) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let dir = project(
        &lh,
        "top",
        &[
            ("lh_project.yml", PROJECT),
            ("m.py", TOP_IMPORT),
            ("helper.py", "def value():\n    return 1\n"),
        ],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(value(&lh, "select v from analytics.m"), 1);
}

/// Once: the node ran again after `helper.py` changed, yet published the old value: the
/// warm worker kept the module of the earlier code in `sys.modules`.
fn a_changed_helper_is_read_again_because_every_call_starts_from_fresh_module_state(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let model = r#"
import lh
import pyarrow as pa

@lh.model()
def m(o=lh.Model("raw.orders", columns=["id"])):
    import helper
    return pa.table({"v": [helper.value()]})
"#;
    let dir = project(
        &lh,
        "inner",
        &[
            ("lh_project.yml", PROJECT),
            ("m.py", model),
            ("helper.py", "def value():\n    return 1\n"),
        ],
    );
    let d = dir.to_str().unwrap();
    let (code, run) = run_json(&lh, &[d]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(value(&lh, "select v from analytics.m"), 1);
    std::fs::write(dir.join("helper.py"), "def value():\n    return 2\n").unwrap();
    let (code, run) = run_json(&lh, &[d]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(node(&run, "analytics.m")["status"], "done");
    assert_eq!(value(&lh, "select v from analytics.m"), 2);
}

/// Once: `from pkg import helper` changed and the node was reported `cached` with the
/// old value: the key held only the files a scan of `import` lines found. Every kind of
/// dependency a scan misses is here: `from pkg import mod`, the second name of `import
/// os, helper`, a relative import inside a package, and a data file the function opens.
fn any_changed_file_of_the_project_reruns_python_nodes_because_the_key_is_the_whole_snapshot(
    runtime: &str,
) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let model = r#"
import lh
import pyarrow as pa

@lh.model()
def m(o=lh.Model("raw.orders", columns=["id"])):
    from pkg import helper
    import os, second
    from pkg.sub import uses_relative
    factor = int(open("data/factor.txt").read())
    return pa.table({"v": [(helper.value() + second.value() + uses_relative.value()) * factor]})
"#;
    let dir = project(
        &lh,
        "deps",
        &[
            ("lh_project.yml", PROJECT),
            ("m.py", model),
            ("pkg/__init__.py", ""),
            ("pkg/helper.py", "def value():\n    return 1\n"),
            ("second.py", "def value():\n    return 10\n"),
            ("pkg/sub/__init__.py", ""),
            ("pkg/sub/uses_relative.py", "from ..rel import value\n"),
            ("pkg/rel.py", "def value():\n    return 100\n"),
            ("data/factor.txt", "1\n"),
        ],
    );
    let d = dir.to_str().unwrap();
    let (code, run) = run_json(&lh, &[d]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(value(&lh, "select v from analytics.m"), 111);
    let (_, again) = run_json(&lh, &[d]);
    assert_eq!(
        node(&again, "analytics.m")["status"],
        "cached",
        "unchanged code is reused"
    );
    let reason = node(&again, "analytics.m")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.starts_with("reused: the output of run "), "{reason}");
    for (file, text, want) in [
        ("pkg/helper.py", "def value():\n    return 2\n", 112),
        ("second.py", "def value():\n    return 20\n", 122),
        ("pkg/rel.py", "def value():\n    return 200\n", 222),
        ("data/factor.txt", "3\n", 666),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
        let (code, run) = run_json(&lh, &[d]);
        assert_eq!(code, 0, "{file}: {run}");
        assert_eq!(node(&run, "analytics.m")["status"], "done", "{file}");
        let reason = node(&run, "analytics.m")["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            reason.starts_with("ran: code changed (snapshot "),
            "{file}: {reason}"
        );
        assert!(
            !reason.contains("input"),
            "{file}: only the code changed: {reason}"
        );
        assert_eq!(value(&lh, "select v from analytics.m"), want, "{file}");
    }
}

/// Once: a warm worker kept a call's Python state, so a function could replace the
/// harness's `write_table` (or patch a library) and change what every later function
/// of every user wrote. The patching call changes only its own output; the next call in
/// the same warm worker (the same project and environment) and other projects' calls
/// write what they computed.
fn a_function_cannot_change_what_later_calls_write(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import lh
import pyarrow as pa
import pyarrow.compute as pc
import sys

def evil(table, path):
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"v": [666]}), path)

@lh.model()
def patches(o=lh.Model("raw.orders", columns=["id"])):
    for name in ("__main__", "lh._worker"):
        m = sys.modules.get(name)
        if m is not None and hasattr(m, "write_table"):
            m.write_table = evil
    pc.sum = lambda *a, **k: pa.scalar(666)
    sys.modules["lh"].Model = None
    return pa.table({"v": [1]})

@lh.model()
def later(p=lh.Model("patches"), o=lh.Model("raw.orders", columns=["id"])):
    return pa.table({"v": [pc.sum(o["id"]).as_py()]})
"#;
    let victim = r#"
import lh
import pyarrow as pa
import pyarrow.compute as pc

@lh.model()
def victim(o=lh.Model("raw.orders", columns=["id"])):
    return pa.table({"v": [pc.sum(o["id"]).as_py()]})
"#;
    let a = project(
        &lh,
        "patcher",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let b = project(
        &lh,
        "victim",
        &[
            (
                "lh_project.yml",
                "name: other\nnamespace: victims\npython: \"3.11\"\n",
            ),
            ("m.py", victim),
        ],
    );
    for _ in 0..2 {
        let (code, run) = run_json(&lh, &[a.to_str().unwrap(), "--no-cache"]);
        assert_eq!(code, 0, "{run}");
        assert_eq!(
            value(&lh, "select v from analytics.later"),
            10,
            "1+2+3+4: the patches of the call before did not reach this one"
        );
        let (code, run) = run_json(&lh, &[b.to_str().unwrap(), "--no-cache"]);
        assert_eq!(code, 0, "{run}");
        assert_eq!(value(&lh, "select v from victims.victim"), 10);
    }
}

/// Once: the whole code folder was mounted into every worker, so any function could
/// read every project's code.
fn a_function_sees_only_its_own_project_code(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let secret = project(
        &lh,
        "secret",
        &[
            (
                "lh_project.yml",
                "name: secret\nnamespace: secret\npython: \"3.11\"\n",
            ),
            (
                "m.py",
                "import lh\nimport pyarrow as pa\nTOKEN = 'hunter2-secret'\n@lh.model()\ndef s(o=lh.Model(\"raw.orders\", columns=[\"id\"])):\n    return pa.table({\"v\": [1]})\n",
            ),
        ],
    );
    let (code, run) = run_json(&lh, &[secret.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let snoop = r#"
import lh
import os
import pyarrow as pa

@lh.model()
def snoop(o=lh.Model("raw.orders", columns=["id"])):
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    for top in {os.path.dirname(here), "/", "/lh", "/tmp"}:
        for root, dirs, files in os.walk(top):
            if root.startswith(("/proc", "/sys", "/usr", "/dev")):
                dirs[:] = []
                continue
            for f in files:
                if f.endswith(".py"):
                    try:
                        if ("hunter2" + "-secret").encode() in open(os.path.join(root, f), "rb").read():
                            found.append(os.path.join(root, f))
                    except OSError:
                        pass
    return pa.table({"v": [len(found)], "where": [",".join(found)]})
"#;
    let s = project(
        &lh,
        "snoop",
        &[("lh_project.yml", PROJECT), ("m.py", snoop)],
    );
    let (code, run) = run_json(&lh, &[s.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let rows = lh.rows("select v, \"where\" from analytics.snoop", "main");
    assert_eq!(
        rows[0]["v"], 0,
        "another project's code was visible: {}",
        rows[0]
    );
}

/// Once: `memory="0.5"` parsed to 0 bytes (Docker's "no limit"), and `nan`, `inf` or
/// `1e30h` made the server answer 500; nothing capped what a project asked for.
fn resource_strings_are_parsed_strictly_and_bounded_by_the_server(runtime: &str) {
    let server = server_with(
        runtime,
        &[
            "--max-function-memory",
            "2g",
            "--max-function-timeout",
            "1h",
            "--max-function-cpus",
            "1",
        ],
    );
    let lh = server.lh();
    orders(&lh);
    let before = lh.head("main");
    for (resources, want) in [
        (r#"memory="0.5""#, "less than one byte"),
        (r#"memory="16m""#, "less than a function needs"),
        (r#"memory="nan""#, "is not a size"),
        (r#"memory="inf""#, "is not a size"),
        (r#"memory="1e30""#, "is not a size"),
        (r#"memory="3g""#, "--max-function-memory"),
        (r#"timeout="nan""#, "is not a duration"),
        (r#"timeout="1e30h""#, "is not a duration"),
        (r#"timeout="2h""#, "--max-function-timeout"),
        (r#"timeout="0.1s""#, "shorter than a second"),
        ("cpus=4", "--max-function-cpus"),
        ("cpus=0", "not a number of cores"),
    ] {
        let model = format!(
            "import lh\nimport pyarrow as pa\n@lh.model()\n@lh.resources({resources})\ndef m(o=lh.Model(\"raw.orders\", columns=[\"id\"])):\n    return o\n"
        );
        let dir = project(&lh, "res", &[("lh_project.yml", PROJECT), ("m.py", &model)]);
        let run = lh.run(&["run", dir.to_str().unwrap()]);
        let err = run.fails(5);
        assert!(err.contains(want), "{resources}: {err}");
        assert!(err.contains("m.py:"), "{resources}: names the place: {err}");
    }
    assert_eq!(lh.head("main"), before, "nothing was published");
    // Within the ceilings, a run goes through.
    let ok = "import lh\n@lh.model()\n@lh.resources(memory=\"512m\", timeout=\"30s\", cpus=0.5)\ndef m(o=lh.Model(\"raw.orders\", columns=[\"id\"])):\n    return o\n";
    let dir = project(&lh, "res", &[("lh_project.yml", PROJECT), ("m.py", ok)]);
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
}

/// Once: the process runtime's /tmp was an unbounded tmpfs, so one function could take
/// the host's memory through it.
fn a_function_cannot_fill_tmp_without_bound(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let model = r#"
import lh

@lh.model()
def fills(o=lh.Model("raw.orders", columns=["id"])):
    with open("/tmp/fill", "wb") as f:
        for _ in range(2048):
            f.write(b"x" * (1 << 20))
    return o
"#;
    let dir = project(&lh, "fill", &[("lh_project.yml", PROJECT), ("m.py", model)]);
    let before = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 8, "{run}");
    let err = node(&run, "analytics.fills")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(lh.head("main"), before, "nothing was published");
}

/// Once: concurrent writes shared one DuckDB spill folder, and DuckDB names spill files
/// by a per-database counter and deletes every `duckdb_temp_*` file of its folder when
/// it closes: four spilling SQL models at once crashed the whole server. Each write now
/// spills into a folder of its own; every row of every output is checked.
#[test]
fn concurrent_spilling_writes_keep_their_own_spill_files() {
    let server = server_with(
        "process",
        &[
            "--duckdb-memory",
            "100MB",
            "--max-concurrent-writes",
            "4",
            "--run-parallelism",
            "4",
        ],
    );
    let lh = server.lh();
    const N: u64 = 3_000_000;
    let mut files = vec![("lh_project.yml", PROJECT.to_string())];
    for k in 1..=4 {
        files.push((
            ["s1.sql", "s2.sql", "s3.sql", "s4.sql"][k - 1],
            format!(
                "SELECT i, i * {k} AS v, md5(i::VARCHAR) AS pad FROM range({N}) t(i) ORDER BY pad\n"
            ),
        ));
    }
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let dir = project(&lh, "spill", &files);
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    for k in 1..=4u64 {
        let rows = lh.rows(
            &format!(
                "select count(*) as n, sum(i::HUGEINT * i)::VARCHAR as d, sum(v)::VARCHAR as s, \
                 sum((v <> i * {k})::INT) as wrong, sum((pad <> md5(i::VARCHAR))::INT) as badpad \
                 from analytics.s{k}"
            ),
            "main",
        );
        let r = &rows[0];
        assert_eq!(r["n"], N, "s{k}: {r}");
        // With the count and the sum, the sum of squares pins every i from 0 to N - 1.
        let squares = (N as u128 - 1) * N as u128 * (2 * N as u128 - 1) / 6;
        assert_eq!(r["d"], squares.to_string(), "s{k}: {r}");
        assert_eq!(r["s"], (k * N * (N - 1) / 2).to_string(), "s{k}: {r}");
        assert_eq!(r["wrong"], 0, "s{k}: {r}");
        assert_eq!(r["badpad"], 0, "s{k}: {r}");
    }
    assert!(
        server.log().contains("listening"),
        "the server is still the same one"
    );
}

/// Attacks on the warm worker itself (found in review): a call writing a forged answer
/// or reading the next request through `/proc/<worker>/fd`, a process it started in a
/// session of its own surviving the call, a file it left in /tmp or the worker's folder.
/// The worker is not dumpable (its descriptors are closed to its calls), it is the
/// subreaper of whatever a call starts and kills it after the call, and it empties its
/// scratch space between calls. `later` runs in the same warm worker after `leave`.
fn a_call_can_neither_reach_its_worker_nor_leave_processes_or_files_behind(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import json, os, subprocess, time
import lh
import pyarrow as pa

@lh.model()
def leave(o=lh.Model("raw.orders", columns=["id"])):
    opened = 0
    for fd in range(0, 32):
        try:
            with open(f"/proc/{os.getppid()}/fd/{fd}", "w") as f:
                f.write(json.dumps({"id": "x", "ok": True, "rows": 999}) + "\n")
                opened += 1
        except OSError:
            pass
    if os.fork() == 0:
        os.setsid()
        os.execvp("sleep", ["sleep", "30"])
    with open("/tmp/left-behind", "w") as f:
        f.write("x")
    with open(os.path.join(os.environ.get("HOME", "/tmp"), "home-left-behind"), "w") as f:
        f.write("x")
    return pa.table({"v": [opened]})

@lh.model()
def later(l=lh.Model("leave"), o=lh.Model("raw.orders", columns=["id"])):
    sleepers = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"sleep\0"):
                    sleepers += 1
            except OSError:
                pass
    files = int(os.path.exists("/tmp/left-behind"))
    return pa.table({"v": [sleepers * 10 + files]})
"#;
    let dir = project(
        &lh,
        "reach",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    for _ in 0..2 {
        let (code, run) = run_json(&lh, &[dir.to_str().unwrap(), "--no-cache"]);
        assert_eq!(code, 0, "{run}");
        assert_eq!(
            value(&lh, "select v from analytics.leave"),
            0,
            "no descriptor of the worker opened"
        );
        assert_eq!(
            value(&lh, "select v from analytics.later"),
            0,
            "no process and no /tmp file of the call before"
        );
    }
}

/// Writes a package index folder (for `UV_FIND_LINKS`) holding a wheel whose `.pth`
/// file runs at every interpreter start, writing the server's `AWS_SECRET_ACCESS_KEY` to
/// `marker` on the host, and a source distribution (`sdistpkg`, built by setuptools as
/// its pyproject.toml says, needing `sdistdep`, another source distribution) whose
/// `setup.py` does the same, then tries to reach the host's loopback `port` and writes
/// the variables it saw and whether it got through into the module it builds.
fn hostile_index(dir: &std::path::Path, marker: &std::path::Path, port: u16) {
    std::fs::create_dir_all(dir).unwrap();
    let script = r#"
import base64, hashlib, io, sys, tarfile, zipfile
out, marker = sys.argv[1], sys.argv[2]
payload = f"import os; open({marker!r}, 'a').write(os.environ.get('AWS_SECRET_ACCESS_KEY', '-') + chr(10))"
# A set-uid copy of a program, planted wherever the .pth runs with its folder writable.
suid = "import os, shutil, sys; exec(" + repr("try:\n d = [p for p in sys.path if p.endswith('site-packages')][0]\n shutil.copy('/bin/cat', d + '/suidcat')\n os.chmod(d + '/suidcat', 0o4755)\nexcept Exception:\n pass\n") + ")"
files = {
    "evilpkg/__init__.py": "VALUE = 7\n",
    # The first line makes the interpreter claim the host's root as its base: an
    # environment inspected after installing would then mount "/" into every worker.
    "evilpkg.pth": "import sys; sys.base_prefix = '/'\n" + payload + "\n" + suid + "\n",
    "evilpkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n",
    "evilpkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: lh-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(text.encode())}")
record.append("evilpkg-1.0.dist-info/RECORD,,")
files["evilpkg-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
with zipfile.ZipFile(f"{out}/evilpkg-1.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
probe = f"""
import os, socket
reached = False
try:
    s = socket.create_connection(("127.0.0.1", {sys.argv[3]}), timeout=3)
    s.sendall(b"GET /setup-py-ran HTTP/1.0\\r\\n\\r\\n")
    s.close()
    reached = True
except OSError:
    pass
with open("sdistpkg.py", "w") as f:
    f.write(f"SEEN = {{dict(os.environ)!r}}\\nREACHED = {{reached!r}}\\n")
"""
def sdist(name, setup, extra, version="1.0"):
    with tarfile.open(f"{out}/{name}-{version}.tar.gz", "w:gz") as t:
        members = {f"{name}-{version}/setup.py": setup, f"{name}-{version}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}
        members.update({f"{name}-{version}/{k}": v for k, v in extra.items()})
        for member, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
sdist("sdistpkg", payload + probe + "\nfrom setuptools import setup\nsetup(name='sdistpkg', version='1.0', py_modules=['sdistpkg'], install_requires=['sdistdep==1.0'])\n",
      {"pyproject.toml": "[build-system]\nrequires = ['setuptools>=61']\nbuild-backend = 'setuptools.build_meta'\n"})
sdist("sdistdep", payload + "\nfrom setuptools import setup\nsetup(name='sdistdep', version='1.0')\n", {})
sdist("sdistdep", payload + "\nfrom setuptools import setup\nsetup(name='sdistdep', version='2.0')\n", {}, "2.0")
sdist("badbuild", payload + "\nfrom setuptools import setup\nsetup(name='badbuild', version='1.0')\n",
      {"pyproject.toml": f"[build-system]\nrequires = ['--index-url=http://127.0.0.1:{sys.argv[3]}/injected']\n"})
sdist("urlbuild", payload + "\nfrom setuptools import setup\nsetup(name='urlbuild', version='1.0')\n",
      {"pyproject.toml": f"[build-system]\nrequires = ['setuptools>=61', 'http://127.0.0.1:{sys.argv[3]}/injected/x-1.0-py3-none-any.whl']\n"})
# An in-tree build backend (no build requirements) whose wheel holds a .pth that knocks on
# the loopback, and a data folder uv refuses, named like the error that once made lh start
# the environment's interpreter online to build "six".
backend = f"""
import base64, hashlib, os, zipfile
PTH = "import urllib.request\\ntry: urllib.request.urlopen('http://127.0.0.1:{sys.argv[3]}/pth-ran', timeout=3)\\nexcept Exception: pass\\n"
def get_requires_for_build_wheel(config_settings=None):
    return []
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {{
        "evilsd.pth": "import os; exec(" + repr(PTH) + ")\\n",
        "evilsd-1.0.data/six==1.16.0 has no usable wheels/f": "x",
        "evilsd-1.0.dist-info/METADATA": "Metadata-Version: 2.1\\nName: evilsd\\nVersion: 1.0\\n",
        "evilsd-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: x\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    }}
    record = []
    for n, t in files.items():
        d = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
        record.append(n + ",sha256=" + d + "," + str(len(t.encode())))
    record.append("evilsd-1.0.dist-info/RECORD,,")
    files["evilsd-1.0.dist-info/RECORD"] = "\\n".join(record) + "\\n"
    with zipfile.ZipFile(os.path.join(wheel_directory, "evilsd-1.0-py3-none-any.whl"), "w") as z:
        for n, t in files.items():
            z.writestr(n, t)
    return "evilsd-1.0-py3-none-any.whl"
"""
# A setup.py that reaches for the host's memory, disk and process table, and for a user
# namespace (in which it would hold capabilities over the server's cgroups and files).
bomb = """
import mmap, os, subprocess, sys, time
said = []
try:
    m = mmap.mmap(-1, 10 << 30)
    said.append("memory unbounded")
except (OSError, MemoryError, ValueError):
    said.append("memory refused")
try:
    with open("big", "wb") as f:
        f.seek(5 << 30)
        f.write(b"x")
    said.append("file unbounded")
except OSError:
    said.append("file refused")
r = subprocess.run(["unshare", "-Ur", "true"], capture_output=True)
said.append("userns refused" if r.returncode != 0 else "userns made")
try:
    os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY))
    said.append("kernel settings writable")
except OSError:
    said.append("kernel settings refused")
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
said.append("keyrings refused" if libc.syscall(keyctl, 0, ctypes.c_int(-3), 0) < 0 else "keyrings reached")
# Its parent (uv) made to drop its parent-death signal, the step would outlive its stop.
ptrace = {"x86_64": 101, "aarch64": 117}[os.uname().machine]
said.append("ptrace refused" if libc.syscall(ptrace, 16, os.getppid(), 0, 0) < 0 else "ptrace reached")
try:
    open("/proc/1/mem", "r+b").close()
    said.append("init reached")
except OSError:
    said.append("init refused")
# A removed file in flight on a socket is in no process's table: out of the build's measure.
import socket
a, b = socket.socketpair()
try:
    socket.send_fds(a, [b"x"], [os.open("/", os.O_RDONLY)])
    said.append("descriptors sent")
except PermissionError:
    said.append("descriptors refused")
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        b = bytearray(512 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
killed = 0
for pid in kids:
    _, status = os.waitpid(pid, 0)
    killed += os.WIFSIGNALED(status)
said.append("memory together bounded" if killed else "memory together unbounded")
n = 0
for _ in range(1500):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            null = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv("/bin/sleep", ["sleep", "600"])
        finally:
            os._exit(0)
    n += 1
said.append("forks bounded" if n < 1500 else "forks unbounded")
sys.exit("bomb: " + ", ".join(said) + " (%d forks)" % n)
"""
sdist("bombpkg", bomb, {})
# setup.py files that fill the disk with files each under the file size limit, with
# files removed but held open, with countless empty files, and under a path too long to
# name (measured all the same, through opened folders).
disk = """
import os, sys, time
for i in range(3):
    with open("fill-%d" % i, "wb") as f:
        for _ in range(4):
            f.write(b"x" * (64 << 20))
            f.flush()
            os.fsync(f.fileno())
    time.sleep(3)
time.sleep(10)
sys.exit("disk unbounded")
"""
sdist("diskpkg", disk, {})
gone = """
import os, sys, time
held = []
for i in range(3):
    f = open("gone-%d" % i, "wb")
    for _ in range(4):
        f.write(b"x" * (64 << 20))
        f.flush()
        os.fsync(f.fileno())
    os.remove("gone-%d" % i)
    held.append(f)
time.sleep(10)
sys.exit("disk unbounded")
"""
sdist("diskgone", gone, {})
many = """
import os, sys, time
os.mkdir("many")
for i in range(150000):
    open("many/%d" % i, "w").close()
time.sleep(10)
sys.exit("disk unbounded")
"""
sdist("diskmany", many, {})
deep = """
import os, sys, time
os.mkdir("deep")
os.chdir("deep")
for i in range(20):
    os.mkdir("d" * 250)
    os.chdir("d" * 250)
for i in range(3):
    with open("f-%d" % i, "wb") as f:
        for _ in range(4):
            f.write(b"x" * (64 << 20))
            f.flush()
            os.fsync(f.fileno())
    time.sleep(3)
time.sleep(10)
sys.exit("disk unbounded")
"""
sdist("diskdeep", deep, {})
sdist("evilsd", "", {"evilbackend.py": backend,
      "pyproject.toml": "[build-system]\nrequires = []\nbuild-backend = 'evilbackend'\nbackend-path = ['.']\n"})
"#;
    let out = std::process::Command::new(lh_e2e::python())
        .args(["-c", script])
        .arg(dir)
        .arg(marker)
        .arg(port.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes into `index` (a find-links folder) the pure-Python wheel `name` 1.0 holding
/// `files` (paths in the wheel, texts), its metadata and record made here.
fn pure_wheel(index: &std::path::Path, name: &str, files: &[(&str, &str)]) {
    let script = r#"
import base64, hashlib, json, sys, zipfile
out, name, files = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
info = f"{name}-1.0.dist-info"
files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: lh-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
record = []
for path, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(text.encode())}")
record.append(f"{info}/RECORD,,")
files[f"{info}/RECORD"] = "\n".join(record) + "\n"
with zipfile.ZipFile(f"{out}/{name}-1.0-py3-none-any.whl", "w") as z:
    for path, text in files.items():
        z.writestr(path, text)
"#;
    let files: serde_json::Map<String, serde_json::Value> = files
        .iter()
        .map(|(p, t)| (p.to_string(), serde_json::Value::from(*t)))
        .collect();
    let out = std::process::Command::new(lh_e2e::python())
        .args(["-c", script])
        .arg(index)
        .arg(name)
        .arg(serde_json::Value::Object(files).to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loopback listener that answers every request 404 and keeps each request's first
/// line: a package index with nothing in it, and a door a build might knock on.
fn loopback_index() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut line = String::new();
            let mut reader = std::io::BufReader::new(&conn);
            let _ = reader.read_line(&mut line);
            log.lock().unwrap().push(line.trim().to_string());
            let _ = (&conn).write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    (port, seen)
}

/// Once: environments were built on the host with the server's whole environment, so a
/// package's `.pth` file (or a source distribution's `setup.py`) ran on the host as the
/// server's user and saw its secrets. Builds now take wheels only and run in the
/// sandbox, with only the package index's settings; the `.pth` then runs only in
/// sandboxes that cannot reach the host's files. Once too: a project that opted into
/// source builds ran `setup.py` in the step with the network and the index's
/// credentials, so it could reach the host's loopback services and read the index's
/// password; builds now run offline with no index setting (the source distribution
/// fetched, and its build requirements installed as wheels, beforehand).
fn a_hostile_package_runs_nothing_on_the_host_and_sees_no_secret(runtime: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let index = scratch.path().join("index");
    let marker = scratch.path().join("pwned");
    let (port, requests) = loopback_index();
    hostile_index(&index, &marker, port);
    let envs = scratch.path().join("envs");
    let extra = format!("http://lhuser:index-s3cret@127.0.0.1:{port}/simple");
    let server = lh_e2e::Server::start_with_env(
        &["--env-cache", envs.to_str().unwrap(), "--runtime", runtime],
        &[
            ("UV_FIND_LINKS", index.to_str().unwrap()),
            ("UV_EXTRA_INDEX_URL", &extra),
            ("AWS_SECRET_ACCESS_KEY", "topsecret-123"),
        ],
    );
    let lh = server.lh();
    orders(&lh);
    let before = lh.head("main");
    let host_secret = scratch.path().join("host-secret.txt");
    std::fs::write(&host_secret, "host-only").unwrap();
    let model = r#"
import os
import lh
import pyarrow as pa

@lh.model()
@lh.python(packages={"evilpkg": "1.0"})
def uses(o=lh.Model("raw.orders", columns=["id"])):
    import evilpkg
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    try:
        secret += open("HOST_SECRET").read()
    except OSError:
        pass
    return pa.table({"v": [evilpkg.VALUE], "secret": [secret]})
"#
    .replace("HOST_SECRET", host_secret.to_str().unwrap());
    let dir = project(
        &lh,
        "evil",
        &[("lh_project.yml", PROJECT), ("m.py", &model)],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let rows = lh.rows("select v, secret from analytics.uses", "main");
    assert_eq!(rows[0]["v"], 7);
    assert_eq!(
        rows[0]["secret"], "",
        "the function saw no secret, and no host file (the package claimed '/' as its base)"
    );
    assert!(
        !marker.exists(),
        "the package's .pth ran on the host: {:?}",
        std::fs::read_to_string(&marker)
    );
    // Nothing a package made in its environment is set-uid or set-gid on the host.
    fn set_id_files(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
        use std::os::unix::fs::PermissionsExt;
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if meta.is_dir() {
                set_id_files(&e.path(), found);
            } else if meta.permissions().mode() & 0o6000 != 0 {
                found.push(e.path());
            }
        }
    }
    let mut found = Vec::new();
    set_id_files(&envs, &mut found);
    assert!(
        found.is_empty(),
        "set-id files in the environments: {found:?}"
    );

    // A source distribution is not built (wheels only): a clear error, nothing ran.
    let sdist = r#"
import json
import lh
import pyarrow as pa

@lh.model()
@lh.python(packages={"sdistpkg": "1.0"})
def built(o=lh.Model("raw.orders", columns=["id"])):
    import sdistpkg
    return pa.table({"seen": [json.dumps(sdistpkg.SEEN)], "reached": [sdistpkg.REACHED]})
"#;
    let dir = project(
        &lh,
        "sdist",
        &[("lh_project.yml", PROJECT), ("m.py", sdist)],
    );
    let head = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 8, "{run}");
    let err = node(&run, "analytics.built")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(err.contains("wheels only"), "{err}");
    assert!(!marker.exists(), "setup.py ran on the host");
    assert_eq!(lh.head("main"), head, "nothing was published");
    assert_ne!(before, head);
    // A version the index does not have says so, with no word of source builds.
    let dir = project(
        &lh,
        "no-such-version",
        &[
            ("lh_project.yml", PROJECT),
            ("m.py", &sdist.replace("\"1.0\"", "\"99.0\"")),
        ],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 8, "{run}");
    let err = node(&run, "analytics.built")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        err.contains("99.0") && !err.contains("source_builds"),
        "{err}"
    );

    // A project that opts in builds it, and the source distribution it needs, from
    // source: offline in the sandbox, so its setup.py cannot reach the host's loopback
    // and sees neither the server's secret nor the index's password.
    let opted = format!("{PROJECT}source_builds: true\n");
    let dir = project(
        &lh,
        "sdist-ok",
        &[("lh_project.yml", &opted), ("m.py", sdist)],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let envs_said = run["environments"].to_string();
    assert!(envs_said.contains("sdistpkg==1.0"), "{run}");
    assert!(envs_said.contains("sdistdep==1.0"), "{run}");
    assert!(!marker.exists(), "setup.py ran on the host");
    let rows = lh.rows("select seen, reached from analytics.built", "main");
    let seen = rows[0]["seen"].as_str().unwrap();
    assert_eq!(
        rows[0]["reached"], false,
        "setup.py reached the host's loopback"
    );
    for secret in ["index-s3cret", "topsecret-123", "127.0.0.1"] {
        assert!(!seen.contains(secret), "setup.py saw '{secret}': {seen}");
    }
    let log = requests.lock().unwrap().clone();
    assert!(
        log.iter().all(|r| !r.contains("setup-py-ran")),
        "setup.py reached the host's loopback: {log:?}"
    );
    // The loopback index was there to be reached: by uv and lh's fetch, in the steps
    // that run no package's code.
    assert!(
        log.iter().any(|r| r.contains("/simple/sdistpkg/")),
        "{log:?}"
    );

    // A build requirement that is an option of uv's (another index) is refused; a
    // package without a wheel is built only at an exact version (the project's pin, or
    // the one version uv finds).
    for (packages, says) in [
        (r#"{"badbuild": "1.0"}"#, "is not a package requirement"),
        (r#"{"urlbuild": "1.0"}"#, "is not a package requirement"),
        (r#"{"sdistdep": ">=0.5"}"#, "needs an exact version"),
        // Built (no build requirements), then refused at the one install: the
        // environment's interpreter never started where the network was.
        (r#"{"evilsd": "1.0"}"#, "with the wheels built from source"),
    ] {
        let model = sdist
            .replace(r#"{"sdistpkg": "1.0"}"#, packages)
            .replace("import sdistpkg", "sdistpkg = None")
            .replace("sdistpkg.SEEN", "''")
            .replace("sdistpkg.REACHED", "True");
        let dir = project(
            &lh,
            "sdist-bad",
            &[("lh_project.yml", &opted), ("m.py", &model)],
        );
        let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
        assert_eq!(code, 8, "{run}");
        let err = node(&run, "analytics.built")["error"].to_string();
        assert!(err.contains(says), "{err}");
    }
    let log = requests.lock().unwrap().clone();
    assert!(
        log.iter().all(|r| !r.contains("injected")),
        "a build requirement became an index or a download: {log:?}"
    );
    assert!(
        log.iter().all(|r| !r.contains("pth-ran")),
        "a built package's .pth ran where the network was: {log:?}"
    );
    let mut found = Vec::new();
    set_id_files(&envs, &mut found);
    assert!(
        found.is_empty(),
        "set-id files in the environments: {found:?}"
    );
    assert!(!marker.exists(), "setup.py ran on the host");
}

/// A package's build is held to the build's limits: each process's address space and
/// file size, no user namespace, and (in cgroups of the build's own, which a server
/// running as root makes, as here) its processes and their memory together; its folders
/// to the server's --build-disk. Nothing of it is published. (The runtime does not
/// matter: environments are built on the host for both.)
/// Found by a review: a package's `.pth` ran in the worker, the sandbox's PID 1, cleared
/// its parent-death signal and kept the interpreter alive, so a stopped worker's sandbox
/// lived on (unbounded, its cgroups never removed, seeing the project's later calls).
/// PID 1 is now bubblewrap's own init, which no code of the sandbox reaches, and a
/// stopped worker's cgroups are emptied: nothing of it runs on. (The process runtime: a
/// container ends whole with its engine's stop.)
/// Found by the fourteenth review: a run kept 1 MiB of log per node with no bound on
/// nodes (100 nodes: 100 MB in the catalog per run), and one node's log was read by
/// reading every node's; a run listing took any `limit`, parameters any length (1.8 MB
/// per run, answered in every listing), an expectation any name (200,000 bytes, and
/// `lh runs show` panicked formatting it). A run's logs keep 64 MiB together, one
/// node's log is read alone, a listing holds at most 1,000 runs, a parameter 16 KiB,
/// a node's name 255 bytes.
#[test]
fn a_run_keeps_bounded_logs_params_and_names() {
    let server = server_with("process", &[]);
    let lh = server.lh();
    orders(&lh);
    let project_file = "name: shop\nnamespace: analytics\npython: \"3.11\"\nparameters:\n  k: {type: str, default: \"\"}\n";
    let floods: String = (0..70)
        .map(|i| {
            format!(
                "\n@lh.expectation()\ndef e{i}(t=lh.Model(\"raw.orders\", columns=[\"id\"])):\n    return flood()\n"
            )
        })
        .collect();
    let models = format!(
        "import sys\nimport lh\n\ndef flood():\n    sys.stderr.write((\"x\" * 1023 + \"\\n\") * 1100)\n    sys.stderr.flush()\n    return True\n{floods}"
    );
    let dir = project(
        &lh,
        "floods",
        &[("lh_project.yml", project_file), ("m.py", &models)],
    );
    let d = dir.to_str().unwrap();
    let (code, run) = run_json(&lh, &[d]);
    assert_eq!(code, 0, "{run}");
    let id = run["id"].as_str().unwrap();
    let all = lh.run(&["runs", "logs", &id[..12]]);
    let all = all.ok();
    assert!(
        all.len() < 66 << 20 && all.len() > 60 << 20,
        "a run's logs keep 64 MiB together: {}",
        all.len()
    );
    assert!(all.contains("the run's logs passed 64 MiB"), "said");
    let one = lh.run(&["runs", "logs", &id[..12], "--node", "e3"]);
    assert!(one.ok().len() < 2 << 20, "{}", one.ok().len());
    // Parameters.
    let long = format!("k={}", "v".repeat(20 << 10));
    let refused = lh.run(&["run", d, "--param", &long]);
    assert_ne!(refused.code, 0, "{}", refused.both());
    assert!(
        refused.both().contains("holds at most 16 KiB"),
        "{}",
        refused.both()
    );
    // Listings.
    let listed = lh.run(&["runs", "ls", "--limit", "100000"]);
    assert!(
        listed.both().contains("a listing holds 1 to 1000 runs"),
        "{}",
        listed.both()
    );
    // Names.
    let long_name = format!(
        "import lh\n\n@lh.expectation()\ndef {}(t=lh.Model(\"raw.orders\", columns=[\"id\"])):\n    return True\n",
        "e".repeat(300)
    );
    let dir = project(
        &lh,
        "named",
        &[("lh_project.yml", PROJECT), ("m.py", &long_name)],
    );
    let named = lh.run(&["run", dir.to_str().unwrap()]);
    assert!(
        named.both().contains("a node's name is at most 255 bytes"),
        "{}",
        named.both()
    );
    // Source files, which the planner parses on the server's host (found by the
    // fifteenth review: a 2 MB model file took the planner 1.4 GB).
    let big = format!(
        "import lh\n\nDATA = [{}]\n",
        "[[1, 2], [3, 4]], ".repeat(90_000)
    );
    let dir = project(&lh, "big", &[("lh_project.yml", PROJECT), ("m.py", &big)]);
    let planned = lh.run(&["run", dir.to_str().unwrap(), "--dry-run"]);
    assert_ne!(planned.code, 0, "{}", planned.both());
    assert!(
        planned
            .both()
            .contains("past the 1024 KiB a project's Python or SQL file may hold"),
        "{}",
        planned.both()
    );
    // Nodes (found by the sixteenth review: 39,243 one-line models in one file under a
    // 3 KB path made a 128 MB plan, and a run that never started).
    let many: String = (0..2_100)
        .map(|i| format!("@lh.model()\ndef m{i}(o=lh.Model(\"raw.orders\")):\n    return o\n"))
        .collect();
    let many = format!("import lh\n{many}");
    let dir = project(&lh, "many", &[("lh_project.yml", PROJECT), ("m.py", &many)]);
    let planned = lh.run(&["run", dir.to_str().unwrap(), "--dry-run"]);
    assert!(
        planned.both().contains("a project holds at most 2000"),
        "{}",
        planned.both()
    );
    let deep: String = (0..15)
        .map(|i| format!("d{i:02}{}/", "x".repeat(197)))
        .collect();
    let one_liners: String = (0..39_000)
        .map(|i| format!("@lh.model()\ndef m{i}():0\n"))
        .collect();
    let file = format!("models/{deep}m.py");
    let wide = format!("import lh\n{one_liners}");
    let dir = project(&lh, "wide", &[("lh_project.yml", PROJECT), (&file, &wide)]);
    let planned = lh.run(&["run", dir.to_str().unwrap(), "--dry-run"]);
    assert!(
        planned.both().contains("a project holds at most 2000"),
        "{}",
        planned.both()
    );
    // Problems (found by the seventeenth review: bounded only by the planner's 16 MiB
    // answer, each listed in the error): the first 100 are shown, the rest counted.
    let broken: String = (0..20_000)
        .map(|i| format!("@lh.model(nope=1)\ndef b{i}():0\n"))
        .collect();
    let broken = format!("import lh\n{broken}");
    let dir = project(
        &lh,
        "broken",
        &[("lh_project.yml", PROJECT), ("m.py", &broken)],
    );
    let planned = lh.run(&["run", dir.to_str().unwrap(), "--dry-run"]);
    assert_ne!(planned.code, 0, "{}", planned.both());
    let said = planned.both();
    assert!(
        said.contains("the project is not valid (20000 problems)"),
        "{}",
        &said[..said.len().min(2000)]
    );
    assert!(
        said.contains("... and 19900 more"),
        "{}",
        &said[said.len().saturating_sub(2000)..]
    );
    assert!(said.len() < 200 << 10, "{} bytes", said.len());
}

#[test]
fn a_stopped_worker_leaves_nothing_running() {
    let scratch = tempfile::tempdir().unwrap();
    let index = scratch.path().join("index");
    std::fs::create_dir_all(&index).unwrap();
    // A thread's name (at most 15 bytes), seen on the host under /proc/*/task/*/comm.
    let mark = format!("lhstay{}", std::process::id() % 100_000);
    let stay = format!(
        "import os\n\
         if os.environ.get('LH_PRIVATE_TMP'):\n\
         \x20   import ctypes, threading, time\n\
         \x20   libc = ctypes.CDLL(None)\n\
         \x20   libc.prctl(1, 0, 0, 0, 0)\n\
         \x20   def keep():\n\
         \x20       libc.prctl(15, b'{mark}', 0, 0, 0)\n\
         \x20       time.sleep(3600)\n\
         \x20   threading.Thread(target=keep).start()\n"
    );
    pure_wheel(
        &index,
        "staypkg",
        &[
            ("staypkg/__init__.py", "VALUE = 1\n"),
            ("staypkg_stay.py", &stay),
            ("staypkg.pth", "import staypkg_stay\n"),
        ],
    );
    let envs = scratch.path().join("envs");
    let server = lh_e2e::Server::start_with_env(
        &[
            "--env-cache",
            envs.to_str().unwrap(),
            "--runtime",
            "process",
            "--worker-idle",
            "10",
        ],
        &[("UV_FIND_LINKS", index.to_str().unwrap())],
    );
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import lh
import pyarrow as pa

@lh.model()
@lh.python(packages={"staypkg": "1.0"})
def stays(o=lh.Model("raw.orders", columns=["id"])):
    import staypkg
    return pa.table({"v": [staypkg.VALUE]})
"#;
    let dir = project(
        &lh,
        "stays",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let running = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .flat_map(|p| {
                std::fs::read_dir(p.path().join("task"))
                    .into_iter()
                    .flatten()
            })
            .flatten()
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == mark)
            })
            .count()
    };
    assert!(running() > 0, "the package's .pth ran in the worker");
    // The idle worker is stopped after ten seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while running() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(running(), 0, "a stopped worker's sandbox lived on");
}

/// Found by a review: a package's `.pth`, in the worker, swapped a call's invocation
/// folder for a link just before the answer, and the server, moving the folder back,
/// read and published `out.parquet` wherever the link pointed (another run's output, a
/// root-only file). A folder the worker left as a link is refused, and the folder taken
/// back is the server's before anything in it is read. (The process runtime: a
/// container's folder is the same code path.)
#[test]
fn a_worker_cannot_hand_back_a_link_for_its_folder() {
    let scratch = tempfile::tempdir().unwrap();
    let index = scratch.path().join("index");
    std::fs::create_dir_all(&index).unwrap();
    const SWAP: &str = r#"
import os
def _swap():
    real = os.write
    def write(fd, data, _w=real):
        try:
            if b'"id"' in bytes(data[:4096]):
                for n in os.listdir("."):
                    t = os.path.join(n, "swap-target")
                    if n.startswith("inv-") and not os.path.islink(n) and os.path.exists(t):
                        target = open(t).read().strip()
                        os.rename(n, ".stash-" + n)
                        os.symlink(target, n)
        except Exception:
            pass
        return _w(fd, data)
    os.write = write
if os.environ.get("LH_PRIVATE_TMP"):
    _swap()
"#;
    pure_wheel(
        &index,
        "swappkg",
        &[
            ("swappkg/__init__.py", "V = 1\n"),
            ("swappkg_swap.py", SWAP),
            ("swappkg.pth", "import swappkg_swap\n"),
        ],
    );
    let envs = scratch.path().join("envs");
    let server = lh_e2e::Server::start_with_env(
        &[
            "--env-cache",
            envs.to_str().unwrap(),
            "--runtime",
            "process",
        ],
        &[("UV_FIND_LINKS", index.to_str().unwrap())],
    );
    let lh = server.lh();
    orders(&lh);
    // Another run's output, in flight where the server reads outputs from.
    let victim = server.data_dir().join("work/invocations/otherrun-victim");
    std::fs::create_dir_all(&victim).unwrap();
    let planted = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({"mine": [424242]}), sys.argv[1] + "/out.parquet")
"#;
    let out = std::process::Command::new(lh_e2e::python())
        .args(["-c", planted])
        .arg(&victim)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let models = r#"
import os
import lh
import pyarrow as pa

@lh.model()
@lh.python(packages={"swappkg": "1.0"})
def swapped(o=lh.Model("raw.orders", columns=["id"])):
    import swappkg
    for line in open("/proc/self/mountinfo"):
        mount = line.split()[4]
        if "/worker-" in mount:
            for n in os.listdir(mount):
                if n.startswith("inv-"):
                    with open(os.path.join(mount, n, "swap-target"), "w") as f:
                        f.write("VICTIM")
    return pa.table({"mine": [1]})
"#
    .replace("VICTIM", victim.to_str().unwrap());
    let dir = project(
        &lh,
        "swapped",
        &[("lh_project.yml", PROJECT), ("m.py", &models)],
    );
    let head = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_ne!(code, 0, "the run published: {run}");
    assert!(
        run.to_string()
            .contains("replaced its invocation folder with a link"),
        "{run}"
    );
    assert_eq!(lh.head("main"), head, "nothing was published");
    assert!(
        victim.join("out.parquet").exists(),
        "the other run's output stays"
    );
}

#[test]
fn a_package_build_is_held_to_its_limits() {
    let scratch = tempfile::tempdir().unwrap();
    let index = scratch.path().join("index");
    let marker = scratch.path().join("pwned");
    let (port, _requests) = loopback_index();
    hostile_index(&index, &marker, port);
    let envs = scratch.path().join("envs");
    let server = lh_e2e::Server::start_with_env(
        &[
            "--env-cache",
            envs.to_str().unwrap(),
            "--runtime",
            "process",
            "--build-memory",
            "768m",
            "--build-disk",
            "512m",
        ],
        &[("UV_FIND_LINKS", index.to_str().unwrap())],
    );
    let lh = server.lh();
    orders(&lh);
    let head = lh.head("main");
    let opted = format!("{PROJECT}source_builds: true\n");
    for (package, says) in [
        (
            "bombpkg",
            "bomb: memory refused, file refused, userns refused, kernel settings refused, keyrings refused, ptrace refused, init refused, descriptors refused, memory together bounded, forks bounded",
        ),
        ("diskpkg", "past its 512 MiB (the server's --build-disk)"),
        ("diskgone", "past its 512 MiB (the server's --build-disk)"),
        ("diskmany", "past its 512 MiB (the server's --build-disk)"),
        ("diskdeep", "past its 512 MiB (the server's --build-disk)"),
    ] {
        let model = format!(
            "import lh\nimport pyarrow as pa\n\n@lh.model()\n@lh.python(packages={{\"{package}\": \"1.0\"}})\ndef built(o=lh.Model(\"raw.orders\", columns=[\"id\"])):\n    return pa.table({{\"v\": [1]}})\n"
        );
        let dir = project(
            &lh,
            package,
            &[("lh_project.yml", &opted), ("m.py", &model)],
        );
        let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
        assert_eq!(code, 8, "{run}");
        let err = node(&run, "analytics.built")["error"].to_string();
        assert!(err.contains(says), "{package}: {err}");
    }
    assert_eq!(lh.head("main"), head, "nothing was published");
}

/// Once: on a fresh machine the README's pipeline example failed with "uv is needed …
/// and is not on PATH", and kept failing after `pip install uv` until the server
/// restarted. The server now provisions its pinned uv from the package index the first
/// time it needs one (here: a server whose PATH has no uv, and an empty cache).
#[test]
fn a_server_without_uv_provisions_its_own() {
    let scratch = tempfile::tempdir().unwrap();
    let envs = scratch.path().join("envs");
    let server = lh_e2e::Server::start_with_env(
        &[
            "--env-cache",
            envs.to_str().unwrap(),
            "--runtime",
            "process",
        ],
        &[("PATH", "/usr/local/bin:/usr/bin:/bin")],
    );
    let lh = server.lh();
    orders(&lh);
    let dir = project(
        &lh,
        "fresh",
        &[
            ("lh_project.yml", PROJECT),
            ("m.py", TOP_IMPORT),
            ("helper.py", "def value():\n    return 5\n"),
        ],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}\n{}", server.log());
    assert_eq!(value(&lh, "select v from analytics.m"), 5);
    let uv = envs.join(".tools").join("uv-0.13.9").join("uv");
    assert!(uv.is_file(), "uv was provisioned into the cache's tools");
    assert!(server.log().contains("provisioned uv"), "{}", server.log());
}

/// A function that finds its invocation folder (through the sandbox's mounts) and plants
/// links where its output is written (to a file of its choosing), and one whose input
/// filter would run for hours: the first gets a regular output file of its own rows, the
/// second stops at the function's timeout; nothing of either is published.
fn planted_links_and_runaway_filters_fail_cleanly(runtime: &str) {
    let server = server_with(runtime, &["--max-concurrent-queries", "1"]);
    let lh = server.lh();
    orders(&lh);
    let planter = &with_folder(
        "import glob, os\nimport pyarrow as pa",
        r#"
@lh.model()
def planted(o=lh.Model("raw.orders", columns=["id"])):
    planted = 0
    for inv in glob.glob(os.path.join(folder(), "inv-*")):
        for name in ("out.parquet", "out.parquet.tmp"):
            try:
                os.symlink("/tmp/elsewhere.parquet", os.path.join(inv, name))
                planted += 1
            except OSError:
                pass
    return pa.table({"v": [planted]})
"#,
    );
    let dir = project(
        &lh,
        "planter",
        &[("lh_project.yml", PROJECT), ("m.py", planter)],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let rows = lh.rows("select v from analytics.planted", "main");
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0]["v"].as_i64().unwrap() >= 2,
        "the links were planted: {}",
        rows[0]
    );

    let runaway = r#"
import lh

@lh.model()
@lh.resources(timeout="3s")
def slow(o=lh.Model("raw.orders", columns=["id"], filter="id < (SELECT count(*) FROM range(1000000000000))")):
    return o
"#;
    let dir = project(
        &lh,
        "runaway",
        &[("lh_project.yml", PROJECT), ("m.py", runaway)],
    );
    let before = lh.head("main");
    let started = std::time::Instant::now();
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 8, "{run}");
    let err = node(&run, "analytics.slow")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        err.contains("ran past the function's timeout of 3 s"),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "stopped, not run out"
    );
    assert_eq!(lh.head("main"), before, "nothing was published");
    // The server still answers queries: the filter's slot was given back.
    lh.run(&["query", "select count(*) from raw.orders"]).ok();

    // The same filter under a long timeout, cancelled while it runs: the run ends at
    // once, and the query slot comes back (the server allows one query at a time).
    let patient = runaway.replace("timeout=\"3s\"", "timeout=\"30m\"");
    let dir = project(
        &lh,
        "cancelled",
        &[("lh_project.yml", PROJECT), ("m.py", &patient)],
    );
    let id = start_until_running(&lh, &dir);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let cancelled_at = std::time::Instant::now();
    let cancel = lh.run(&["runs", "cancel", &id[..12]]);
    assert!(cancel.stderr.contains("cancelled"), "{}", cancel.stderr);
    assert!(cancelled_at.elapsed() < std::time::Duration::from_secs(20));
    let r: serde_json::Value =
        serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
    assert_eq!(r["status"], "cancelled", "{r}");
    assert_eq!(lh.head("main"), before, "nothing was published");
    let mut query = lh
        .command(&[
            "query",
            "select count(*) as n from raw.orders",
            "-o",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = query.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = query.kill();
            panic!("the query waited for a slot the cancelled filter kept");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success());
}

/// Once: the folder where a function's inputs and output cross had no bound, so one
/// function could fill the server's disk. A call writing past `lh server
/// --max-function-disk` is stopped; the next call gets a fresh worker.
fn a_function_cannot_fill_its_folder_without_bound(runtime: &str) {
    let server = server_with(runtime, &["--max-function-disk", "100m"]);
    let lh = server.lh();
    orders(&lh);
    let model = &with_folder(
        "import os, time",
        r#"
@lh.model()
def fills(o=lh.Model("raw.orders", columns=["id"])):
    with open(os.path.join(folder(), "fill"), "wb") as f:
        for _ in range(1024):
            f.write(b"x" * (8 << 20))
            f.flush()
            time.sleep(0.01)
    return o

@lh.model()
def after(f=lh.Model("fills"), o=lh.Model("raw.orders", columns=["id"])):
    return o
"#,
    );
    let dir = project(&lh, "disk", &[("lh_project.yml", PROJECT), ("m.py", model)]);
    let before = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 8, "{run}");
    let err = node(&run, "analytics.fills")["error"]
        .as_str()
        .unwrap()
        .to_string();
    // Stopped by the folder's measure, or by the file-size limit that backs it.
    assert!(
        err.contains("wrote more than 100 MiB into its folder and was stopped")
            || err.contains("File too large"),
        "{err}"
    );
    assert_eq!(lh.head("main"), before, "nothing was published");
    // The server's folders soon hold nothing of it (the stopped worker's folder is
    // removed once it has exited).
    let biggest = || {
        let mut biggest = 0u64;
        let mut stack = vec![server.data_dir().join("work")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if let Ok(m) = e.metadata() {
                    if m.is_dir() {
                        stack.push(e.path());
                    } else {
                        biggest = biggest.max(m.len());
                    }
                }
            }
        }
        biggest
    };
    let mut left = biggest();
    for _ in 0..100 {
        if left < 100 << 20 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = biggest();
    }
    assert!(left < 100 << 20, "a file of {left} bytes stayed");
    // A well-behaved project runs right after.
    let ok = project(
        &lh,
        "ok",
        &[
            ("lh_project.yml", PROJECT),
            ("m.py", TOP_IMPORT),
            ("helper.py", "def value():\n    return 3\n"),
        ],
    );
    let (code, run) = run_json(&lh, &[ok.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
}

/// Once (the third review's finding 1, critical): on the process runtime bubblewrap
/// kept the server's whole environment and was the sandbox's PID 1, so a model reading
/// `/proc/1/environ` got `LH_SECRET_KEY` and the warehouse's `AWS_SECRET_ACCESS_KEY`;
/// `/proc/1/cmdline` showed bubblewrap's command line and the function ran as uid 0.
/// A model here reads every file under `/proc` it can open (and every link it can
/// read) with markers in the server's environment; none may appear. (PID 1 is now
/// bubblewrap's init again, its environment cleared: no code of the sandbox runs there.)
fn nothing_of_the_server_reaches_a_function_through_proc(runtime: &str) {
    const MARKER: &str = "lh-proc-marker-7f3a9c";
    let cache = crate::runs::env_cache();
    let server = lh_e2e::Server::start_with_env(
        &["--env-cache", cache.as_str(), "--runtime", runtime],
        &[
            ("LH_TEST_PROC_MARKER", MARKER),
            ("AWS_SECRET_ACCESS_KEY", &format!("{MARKER}-aws")),
        ],
    );
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import os
import lh
import pyarrow as pa

MARKERS = [b"MARKER", b"LH_SECRET_KEY", b"AWS_SECRET_ACCESS_KEY"]
# Files that are endless or that read the machine's memory, not a process's state.
SKIP = {"kcore", "kmsg", "kpagecount", "kpageflags", "kpagecgroup", "mem", "pagemap",
        "clear_refs", "sysrq-trigger", "breaks", "timer_list"}

def scan():
    found, opened = set(), 0
    for root, dirs, files in os.walk("/proc", followlinks=False):
        # Other tasks' copies of the same files, and the kernel's tunables.
        dirs[:] = [d for d in dirs if d not in ("task", "sys", "net", "irq", "bus", "tty",
                                                "self", "thread-self", "fs", "driver")]
        for name in files + dirs:
            path = os.path.join(root, name)
            try:
                target = os.readlink(path).encode()
                for m in MARKERS:
                    if m in target:
                        found.add(f"{m.decode()} in link {path}")
            except OSError:
                pass
            # A descriptor opened would read another process's pipe (and wait on it).
            if name in SKIP or name in dirs or os.path.basename(root) in ("fd", "map_files"):
                continue
            try:
                with open(path, "rb") as f:
                    data = f.read(1 << 20)
                opened += 1
            except OSError:
                continue
            for m in MARKERS:
                if m in data:
                    found.add(f"{m.decode()} in {path}")
    return sorted(found), opened

def pid1_env():
    try:
        data = open("/proc/1/environ", "rb").read()
    except OSError:
        return "unreadable"
    return " ".join(sorted(v.split(b"=")[0].decode() for v in data.split(b"\0") if v)) or "empty"

@lh.model()
def probe(o=lh.Model("raw.orders", columns=["id"])):
    found, opened = scan()
    return pa.table({
        "found": ["; ".join(found)],
        "opened": [opened],
        "uid": [os.getuid()],
        "pid1": [pid1_env()],
        "env": [" ".join(sorted(os.environ))],
    })
"#
    .replace("MARKER\"", &format!("{MARKER}\""));
    let dir = project(
        &lh,
        "procscan",
        &[("lh_project.yml", PROJECT), ("m.py", &models)],
    );
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    let rows = lh.rows(
        "select found, opened, uid, pid1, env from analytics.probe",
        "main",
    );
    let row = &rows[0];
    assert_eq!(row["found"], "", "the sandbox showed the server: {row}");
    assert!(
        row["opened"].as_i64().unwrap() > 20,
        "the probe read /proc: {row}"
    );
    assert_ne!(row["uid"], 0, "the function does not run as root: {row}");
    let pid1 = row["pid1"].as_str().unwrap();
    // PID 1 (the worker, or bubblewrap's init with its environment cleared) holds
    // nothing of the server's environment.
    assert!(
        ["unreadable", "empty"].contains(&pid1)
            || !(pid1.contains("AWS") || pid1.contains("LH_SECRET") || pid1.contains("LH_TEST")),
        "the sandbox's PID 1 holds the server's environment: {row}"
    );
    let env = row["env"].as_str().unwrap();
    assert!(
        !env.contains("AWS") && !env.contains("LH_SECRET") && !env.contains("LH_TEST"),
        "{env}"
    );
}
