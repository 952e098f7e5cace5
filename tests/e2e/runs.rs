//! Pipelines: `lh run` with real Python and SQL, write-audit-publish, failures of every
//! kind, invalid projects, memoization, replay, and the examples.

use std::path::{Path, PathBuf};

use lh_e2e::{Lh, Server};

use crate::snap;

/// Environments are built once for the whole suite (uv's cache included).
pub(crate) fn env_cache() -> String {
    let dir = std::env::var_os("LH_TEST_ENV_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("lh-test-envs"));
    dir.display().to_string()
}

pub(crate) fn server(runtime: &str) -> Server {
    server_with(runtime, &[])
}

/// A server on `runtime` with the suite's environment cache and `extra` flags.
pub(crate) fn server_with(runtime: &str, extra: &[&str]) -> Server {
    let cache = env_cache();
    let mut args = vec!["--env-cache", cache.as_str(), "--runtime", runtime];
    args.extend_from_slice(extra);
    Server::start_with(&args)
}

/// Every pipeline test runs on both runtimes: `process` and `docker`.
#[macro_export]
macro_rules! both_runtimes {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn process() {
                super::$name("process")
            }
            #[test]
            fn docker() {
                super::$name("docker")
            }
        }
    )*};
}

crate::both_runtimes!(
    a_run_publishes_every_output_and_reruns_from_cache,
    failing_functions_publish_nothing,
    invalid_projects_fail_before_anything_runs,
    replay_reproduces_and_from_failed_reruns_only_what_failed,
    a_concurrent_reader_sees_all_outputs_or_none,
    the_examples_run_from_the_readme,
    cancelling_a_run_publishes_nothing_and_old_branches_expire,
    prints_reach_the_log_as_they_happen,
);

/// What a terminal shows of `lh run` (under a pseudo-terminal, through `script`): a run of
/// more nodes than a screen shows well is one live line that counts them, not a line a
/// node; a pipe gets plain lines, one a node as it ends, and no escape sequence.
#[test]
fn a_terminal_sees_one_summary_line_for_a_large_run() {
    let server = server("process");
    let lh = server.lh();
    let mut files: Vec<(String, String)> = (0..14)
        .map(|i| (format!("m{i:02}.sql"), format!("select {i} as x\n")))
        .collect();
    files.push(("lh_project.yml".into(), PROJECT.into()));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let dir = project(&lh, "many", &refs);
    let d = dir.to_str().unwrap();
    let (ok, seen) = lh.in_terminal(&["run", d]);
    assert!(ok, "{seen}");
    assert!(seen.contains("14 done"), "{seen}");
    // (A node's own line reads `+ analytics.m03  done ...`.)
    assert!(
        !seen.contains("+ analytics.m03"),
        "a line a node on a terminal: {seen}"
    );
    assert!(seen.contains("succeeded"), "{seen}");
    // Not a terminal: plain lines, one a node, no escapes.
    let piped = lh.run(&["run", d, "--no-cache"]);
    piped.ok();
    assert!(piped.stderr.contains("analytics.m03"), "{}", piped.stderr);
    assert!(!piped.stderr.contains('\u{1b}'), "{:?}", piped.stderr);
}

/// `lh run --select` runs part of the DAG, as dbt's selector does: a node alone, with
/// what it reads from (`+b`) or what reads it (`b+`); an input a left-out node makes is
/// read from the branch, and must be there; a replay selects the same nodes again.
#[test]
fn select_runs_part_of_the_dag() {
    let server = server("process");
    let lh = server.lh();
    orders(&lh);
    let models = "import lh\n\n@lh.model()\ndef a(o=lh.Model(\"raw.orders\")):\n    return o\n\n@lh.model()\ndef b(x=lh.Model(\"a\")):\n    return x\n";
    let dir = project(
        &lh,
        "select",
        &[
            ("lh_project.yml", PROJECT),
            ("m.py", models),
            ("c.sql", "select count(*) as n from analytics.b\n"),
        ],
    );
    let d = dir.to_str().unwrap();
    let names = |run: &serde_json::Value| -> Vec<String> {
        let mut n: Vec<String> = run["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    // Nothing is on main yet: b alone cannot read a.
    let out = lh.run(&["run", d, "--select", "b"]);
    let err = out.fails(5).to_string();
    assert!(
        err.contains("input 'analytics.a' is made by analytics.a, which is not selected")
            && err.contains("--select +analytics.b"),
        "{err}"
    );
    let (code, run) = run_json(&lh, &[d, "--no-cache"]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(names(&run), ["analytics.a", "analytics.b", "analytics.c"]);
    for (select, want) in [
        ("b", vec!["analytics.b"]),
        ("analytics.b+", vec!["analytics.b", "analytics.c"]),
        ("+b", vec!["analytics.a", "analytics.b"]),
        ("a,c", vec!["analytics.a", "analytics.c"]),
    ] {
        let (code, run) = run_json(&lh, &[d, "--no-cache", "--select", select]);
        assert_eq!(code, 0, "{select}: {run}");
        assert_eq!(names(&run), want, "{select}");
        assert!(
            run["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|n| n["status"] == "done"),
            "{select}: {run}"
        );
    }
    // A replay runs what its run selected (on that run's input commit: main moved on
    // since, so this one does not publish).
    let (_, run) = run_json(&lh, &[d, "--no-cache", "--select", "b+"]);
    let id = run["id"].as_str().unwrap();
    let replay = lh.run(&["rerun", id, "-o", "json"]);
    let again: serde_json::Value = serde_json::from_str(&replay.stdout).unwrap();
    assert_eq!(names(&again), ["analytics.b", "analytics.c"], "{again}");
    let err = lh.run(&["run", d, "--select", "nope"]).fails(3).to_string();
    assert!(
        err.contains("the project has no node 'nope'") && err.contains("analytics.a"),
        "{err}"
    );
}

/// A running function's prints reach its node's log as they happen, on both runtimes:
/// `lh runs logs RUN --node N` shows the first ticks while the node still runs, and
/// `--follow` prints every tick, in order, and ends with the run.
fn prints_reach_the_log_as_they_happen(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    // (It ends with a line it leaves open.)
    let models = "import sys, time\nimport lh\n\n@lh.model()\ndef ticks(o=lh.Model(\"raw.orders\", columns=[\"id\"])):\n    for i in range(10):\n        print(\"tick %d\" % i, flush=True)\n        time.sleep(0.5)\n    sys.stdout.write(\"unended\")\n    sys.stdout.flush()\n    return o\n";
    let dir = project(
        &lh,
        "ticks",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    let id = start_until_running(&lh, &dir);
    let mut seen = String::new();
    for _ in 0..300 {
        seen = lh
            .run(&["runs", "logs", &id, "--node", "analytics.ticks"])
            .ok()
            .to_string();
        if seen.contains("tick 1\n") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let r: serde_json::Value =
        serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
    assert!(
        seen.contains("tick 0\ntick 1\n"),
        "{runtime}: no tick while it ran: {seen:?}"
    );
    assert!(
        !seen.contains("tick 9") && node(&r, "analytics.ticks")["status"] == "running",
        "{runtime}: the ticks came only when the node ended: {seen:?} {r}"
    );
    let followed = lh.run(&["runs", "logs", &id, "--follow"]);
    let ticks: Vec<&str> = followed
        .ok()
        .lines()
        .filter(|l| l.starts_with("tick"))
        .collect();
    let want: Vec<String> = (0..10).map(|i| format!("tick {i}")).collect();
    assert_eq!(ticks, want, "{runtime}: {}", followed.stdout);
    let r: serde_json::Value =
        serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
    assert_eq!(r["status"], "succeeded", "{runtime}: {r}");
    // A line the call left open is its own log's last, not the next run's first (found
    // by the twenty-ninth review); the same code's next run is on the same worker.
    let log = |id: &str| {
        lh.run(&["runs", "logs", id, "--node", "analytics.ticks"])
            .ok()
            .to_string()
    };
    assert!(
        log(&id).trim_end().ends_with("unended"),
        "{runtime}: {}",
        log(&id)
    );
    let (code, again) = run_json(&lh, &[dir.to_str().unwrap(), "--no-cache"]);
    assert_eq!(code, 0, "{runtime}: {again}");
    let second = log(again["id"].as_str().unwrap());
    assert_eq!(second.matches("unended").count(), 1, "{runtime}: {second}");
    assert!(!second.starts_with("unended"), "{runtime}: {second}");
}

pub(crate) fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
}

/// The jaffle shop's raw tables (`generate.py --scale 1`) imported into main, as the
/// README does it; the folder of the generated files.
pub(crate) fn jaffle_data(lh: &Lh) -> PathBuf {
    let data = lh.cwd.join("jaffle");
    let out = std::process::Command::new("python3")
        .args([
            examples().join("jaffle_shop/generate.py").to_str().unwrap(),
            "--scale",
            "1",
            "--out",
            data.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for t in ["customers", "orders", "payments"] {
        lh.run(&[
            "table",
            "import",
            &format!("raw.{t}"),
            data.join(format!("{t}.csv")).to_str().unwrap(),
        ])
        .ok();
    }
    data
}

/// Writes a project into the CLI's folder.
pub(crate) fn project(lh: &Lh, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = lh.cwd.join(name);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

pub(crate) const PROJECT: &str = "name: shop\nnamespace: analytics\npython: \"3.11\"\nparameters:\n  min_amount: {type: int, default: 0}\n";

pub(crate) fn orders(lh: &Lh) {
    let csv = lh.file(
        "orders.csv",
        "id,status,amount\n1,ok,10\n2,returned,5\n3,ok,7\n4,ok,1\n",
    );
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
}

pub(crate) fn run_json(lh: &Lh, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let run = lh.run(&all);
    let v = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|_| panic!("json: {}\n{}", run.stdout, run.stderr));
    (run.code, v)
}

/// Starts the project in `dir` detached and waits until its first node runs; its id.
pub(crate) fn start_until_running(lh: &Lh, dir: &Path) -> String {
    let run = lh.run(&["run", dir.to_str().unwrap(), "--detach"]);
    let id = run.ok().trim().to_string();
    assert_eq!(id.len(), 32, "{}", run.stdout);
    for _ in 0..200 {
        let r: serde_json::Value =
            serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
        if r["nodes"][0]["status"] == "running" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    id
}

pub(crate) fn node<'a>(run: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn a_run_publishes_every_output_and_reruns_from_cache(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let dir = project(
        &lh,
        "p",
        &[
            ("lh_project.yml", PROJECT),
            (
                "models.py",
                r#"
import lh
import pyarrow.compute as pc

@lh.model()
def clean(orders=lh.Model("raw.orders", columns=["id", "amount"], filter="status <> 'returned'"),
          min_amount=lh.Parameter("min_amount")):
    print("clean got", orders.num_rows, "rows")
    return orders.filter(pc.greater_equal(orders["amount"], min_amount))

@lh.expectation()
def ids_present(data=lh.Model("clean", columns=["id"])):
    return data.column("id").null_count == 0
"#,
            ),
            (
                "totals.sql",
                "select count(*) as n, sum(amount) as total from clean where amount >= $min_amount\n",
            ),
        ],
    );
    let d = dir.to_str().unwrap();
    snap!("run_dry_run", server, lh.run(&["run", d, "--dry-run"]));
    let before = lh.head("main");
    let (code, run) = run_json(&lh, &[d]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["status"], "succeeded");
    assert_eq!(node(&run, "analytics.clean")["rows"], 3);
    assert_eq!(node(&run, "ids_present")["status"], "passed");
    let rows = lh.rows("select n, total from analytics.totals", "main");
    assert_eq!(
        (rows[0]["n"].as_i64(), rows[0]["total"].as_i64()),
        (Some(3), Some(18))
    );
    // The publish is one merge commit carrying the run id, after the input commit.
    let log: serde_json::Value =
        serde_json::from_str(lh.run(&["log", "-n", "1", "-o", "json"]).ok()).unwrap();
    assert_eq!(log[0]["properties"]["lh.run"], run["id"]);
    assert_eq!(log[0]["parents"][0].as_str(), Some(before.as_str()));
    assert_eq!(run["input_commit"].as_str(), Some(before.as_str()));
    // The run's branch is gone once published.
    assert!(!lh.run(&["branch", "ls", "--all"]).ok().contains("run/"));
    // Logs hold the function's prints.
    let id = run["id"].as_str().unwrap();
    let logs = lh.run(&["runs", "logs", &id[..12], "--node", "analytics.clean"]);
    assert!(logs.ok().contains("clean got 3 rows"), "{}", logs.stdout);

    // Unchanged: every model is cached, nothing runs, the same outputs stay; the run
    // says it published nothing (it said "in commit " with none).
    let said = lh.run(&["run", d]);
    assert!(
        {
            assert_eq!(said.code, 0, "{}", said.both());
            said.both()
        }
        .contains("'main' already held every output: nothing to publish"),
        "{}",
        said.both()
    );
    let (code, again) = run_json(&lh, &[d]);
    assert_eq!(code, 0);
    assert_eq!(node(&again, "analytics.clean")["status"], "cached");
    assert_eq!(node(&again, "analytics.totals")["status"], "cached");
    assert_eq!(
        node(&again, "analytics.clean")["output"],
        node(&run, "analytics.clean")["output"]
    );
    // A parameter change reruns what uses it.
    let (_, changed) = run_json(&lh, &[d, "--param", "min_amount=5"]);
    assert_eq!(node(&changed, "analytics.clean")["status"], "done");
    assert_eq!(
        node(&changed, "analytics.clean")["reason"],
        "ran: parameters changed"
    );
    assert_eq!(lh.rows("select n from analytics.totals", "main")[0]["n"], 2);
    // --no-cache runs everything.
    let (_, fresh) = run_json(&lh, &[d, "--no-cache", "--param", "min_amount=5"]);
    assert_eq!(node(&fresh, "analytics.totals")["status"], "done");
    assert_eq!(
        node(&fresh, "analytics.totals")["reason"],
        "ran: --no-cache"
    );
    // A change of a SQL model reruns it; a Python function can read any file of its
    // project, so its key is the whole code snapshot and it reruns too.
    std::fs::write(dir.join("totals.sql"), "select count(*) as n, sum(amount) as total, max(amount) as top from clean where amount >= $min_amount\n").unwrap();
    let (_, edited) = run_json(&lh, &[d, "--param", "min_amount=5"]);
    assert_eq!(node(&edited, "analytics.clean")["status"], "done");
    assert_eq!(node(&edited, "analytics.totals")["status"], "done");
    // Any file counts, not only code: the Python node reruns, and the SQL model
    // after it, whose input snapshot moved.
    std::fs::write(dir.join("notes.txt"), "a file a function could open\n").unwrap();
    let (_, noted) = run_json(&lh, &[d, "--param", "min_amount=5"]);
    assert_eq!(node(&noted, "analytics.clean")["status"], "done");
    assert_eq!(node(&noted, "analytics.totals")["status"], "done");
    assert_eq!(
        lh.rows("select top from analytics.totals", "main")[0]["top"],
        10
    );

    let ls = lh.run(&["runs", "ls"]);
    assert_eq!(ls.ok().lines().count(), 8, "{}", ls.stdout);
    let show = lh.run(&["runs", "show", id]);
    assert!(
        show.ok().contains("analytics.clean") && show.stdout.contains("succeeded"),
        "{}",
        show.stdout
    );
}

fn failing_functions_publish_nothing(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let ok_model = "\n@lh.model()\ndef good(o=lh.Model(\"raw.orders\")):\n    return o\n";
    let cases = [
        (
            "raises",
            "@lh.model()\ndef bad(o=lh.Model(\"raw.orders\")):\n    return 1 / 0\n",
            "ZeroDivisionError: division by zero",
        ),
        (
            "wrong_type",
            "@lh.model()\ndef bad(o=lh.Model(\"raw.orders\")):\n    return [1, 2]\n",
            "must return a pyarrow.Table",
        ),
        (
            "hangs",
            "@lh.model()\n@lh.resources(timeout=\"2s\")\ndef bad(o=lh.Model(\"raw.orders\")):\n    import time\n    time.sleep(600)\n",
            "timed out after 2 s",
        ),
        (
            "eats_memory",
            "@lh.model()\n@lh.resources(memory=\"700m\")\ndef bad(o=lh.Model(\"raw.orders\")):\n    return bytearray(2_000_000_000)\n",
            // A process gets a MemoryError at its address-space limit; a container is
            // killed at its memory limit.
            if runtime == "docker" {
                "out of memory"
            } else {
                "MemoryError"
            },
        ),
        (
            "exits",
            "@lh.model()\ndef bad(o=lh.Model(\"raw.orders\")):\n    import os\n    os._exit(7)\n",
            "the function's process exited with status 7 without answering",
        ),
        (
            // A package the project did not declare: where to declare it.
            "missing_package",
            "@lh.model()\ndef bad(o=lh.Model(\"raw.orders\")):\n    import lh_no_such_package\n    return o\n",
            "No module named 'lh_no_such_package'; a package the function needs is declared in lh_project.yml under `packages:`",
        ),
    ];
    for (name, body, want) in cases {
        let src = format!(
            "import lh\n{ok_model}\n{body}\n@lh.model()\ndef downstream(b=lh.Model(\"bad\")):\n    return b\n"
        );
        let dir = project(
            &lh,
            name,
            &[("lh_project.yml", PROJECT), ("models.py", &src)],
        );
        let before = lh.head("main");
        let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
        assert_eq!(code, 8, "{name}: {run}");
        assert_eq!(run["status"], "failed");
        let bad = node(&run, "analytics.bad");
        assert_eq!(bad["status"], "failed", "{name}");
        assert!(
            bad["error"].as_str().unwrap().contains(want),
            "{name}: {bad}"
        );
        assert_eq!(node(&run, "analytics.downstream")["status"], "skipped");
        assert_eq!(node(&run, "analytics.good")["status"], "done");
        assert_eq!(lh.head("main"), before, "{name}: main untouched");
        lh.run(&["query", "select * from analytics.good"]).fails(3);
        // The run's branch is kept, with what succeeded, for inspection.
        let branch = run["run_branch"].as_str().unwrap();
        assert_eq!(
            lh.rows("select count(*) AS n from analytics.good", branch)[0]["n"],
            4
        );
        // Listed with --all; `lh branch ls` counts it and shows the branches of people.
        let listed = lh.run(&["branch", "ls"]);
        assert!(!listed.ok().contains(branch), "{name}: {}", listed.stdout);
        assert!(
            listed
                .stderr
                .contains("of failed runs not shown: lh branch ls --all"),
            "{name}: {}",
            listed.stderr
        );
        assert!(lh.run(&["branch", "ls", "--all"]).ok().contains(branch));
    }
    // A traceback points at the user's line.
    let dir = lh.cwd.join("raises");
    let run = lh.run(&["run", dir.to_str().unwrap()]);
    let err = run.fails(8);
    assert!(
        err.contains("models.py\", line 9, in bad") && err.contains("return 1 / 0"),
        "{err}"
    );
    assert!(err.contains("hint: 'main' is untouched"), "{err}");
}

fn invalid_projects_fail_before_anything_runs(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "cycle",
            vec![
                ("lh_project.yml", PROJECT),
                (
                    "m.py",
                    "import lh\n\n@lh.model()\ndef a(x=lh.Model(\"b\")):\n    return x\n\n@lh.model()\ndef b(x=lh.Model(\"a\")):\n    return x\n",
                ),
            ],
        ),
        (
            "unknown_input",
            vec![
                ("lh_project.yml", PROJECT),
                (
                    "m.py",
                    "import lh\n\n@lh.model()\ndef a(\n    x=lh.Model(\"raw.nope\"),\n):\n    return x\n",
                ),
            ],
        ),
        (
            "two_writers",
            vec![
                ("lh_project.yml", PROJECT),
                (
                    "m.py",
                    "import lh\n\n@lh.model()\ndef a(x=lh.Model(\"raw.orders\")):\n    return x\n",
                ),
                ("a.sql", "select 1 as x\n"),
            ],
        ),
        (
            "bad_decorator",
            vec![
                ("lh_project.yml", PROJECT),
                (
                    "m.py",
                    "import lh\n\n@lh.model(materialise=\"replace\")\ndef a(x=lh.Model(\"raw.orders\")):\n    return x\n",
                ),
            ],
        ),
        (
            "unknown_parameter",
            vec![
                ("lh_project.yml", PROJECT),
                (
                    "m.py",
                    "import lh\n\n@lh.model()\ndef a(x=lh.Model(\"raw.orders\"), d=lh.Parameter(\"run_date\")):\n    return x\n",
                ),
            ],
        ),
        (
            "non_literal",
            vec![
                ("lh_project.yml", PROJECT),
                (
                    "m.py",
                    "import lh\nT = 'raw.orders'\n\n@lh.model()\ndef a(x=lh.Model(T)):\n    return x\n",
                ),
            ],
        ),
        (
            "syntax",
            vec![
                ("lh_project.yml", PROJECT),
                ("m.py", "import lh\n\ndef a(:\n"),
            ],
        ),
        (
            "bad_sql",
            vec![("lh_project.yml", PROJECT), ("a.sql", "selec 1\n")],
        ),
        (
            // The line of a syntax error, not the file's first.
            "bad_sql_line",
            vec![
                ("lh_project.yml", PROJECT),
                (
                    "a.sql",
                    "-- orders by day\nselect id,\n       amount\nfrom raw.orders\nwher amount > 1\n",
                ),
            ],
        ),
        (
            "not_select",
            vec![
                ("lh_project.yml", PROJECT),
                ("a.sql", "insert into raw.orders values (1)\n"),
            ],
        ),
        (
            // A model reads tables by name, never the warehouse's files.
            "reads_files",
            vec![
                ("lh_project.yml", PROJECT),
                ("a.sql", "select * from read_parquet('/tmp/**/*.parquet')\n"),
            ],
        ),
        (
            "bad_yaml",
            vec![(
                "lh_project.yml",
                "name: shop\nnamespace: Analytics\nbogus: 1\n",
            )],
        ),
    ];
    for (name, files) in cases {
        let dir = project(&lh, name, &files);
        let run = lh.run(&["run", dir.to_str().unwrap()]);
        run.fails(5);
        snap!(format!("invalid_{name}").as_str(), server, run);
    }
    let dir = lh.cwd.join("unknown_input");
    lh.run(&["run", dir.to_str().unwrap(), "--dry-run"])
        .fails(5);
    let ok = project(
        &lh,
        "ok",
        &[("lh_project.yml", PROJECT), ("a.sql", "select 1 as x\n")],
    );
    snap!(
        "invalid_param_value",
        server,
        lh.run(&["run", ok.to_str().unwrap(), "--param", "min_amount=lots"])
    );
    lh.run(&["run", ok.to_str().unwrap(), "--param", "nope=1"])
        .fails(5);
    lh.run(&["run", ok.to_str().unwrap(), "--param", "bare"])
        .fails(5);
    lh.run(&["run", lh.cwd.to_str().unwrap()]).fails(5);
    // Nothing ran: no run was recorded, no table was made.
    assert_eq!(lh.run(&["runs", "ls"]).ok().lines().count(), 1);
    assert!(!lh.run(&["table", "ls"]).ok().contains("analytics."));
}

fn replay_reproduces_and_from_failed_reruns_only_what_failed(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let good = r#"
import lh

@lh.model()
def stage(o=lh.Model("raw.orders")):
    return o

@lh.model()
def final(s=lh.Model("stage")):
    import pyarrow.compute as pc
    if pc.sum(s["amount"]).as_py() > 0 and FAIL:
        raise ValueError("bad data")
    return s
"#;
    let broken = project(
        &lh,
        "broken",
        &[
            ("lh_project.yml", PROJECT),
            ("m.py", &good.replace("FAIL", "True")),
        ],
    );
    let fixed = project(
        &lh,
        "fixed",
        &[
            ("lh_project.yml", PROJECT),
            ("m.py", &good.replace("FAIL", "False")),
        ],
    );
    let (code, failed) = run_json(&lh, &[broken.to_str().unwrap(), "--no-cache"]);
    assert_eq!(code, 8);
    let id = failed["id"].as_str().unwrap().to_string();
    // Upstream data changes after the failed run: a replay still reads the run's input.
    let more = lh.file("more.csv", "id,status,amount\n9,ok,100\n");
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        more.to_str().unwrap(),
        "--mode",
        "append",
    ])
    .ok();
    let run = lh.run(&[
        "rerun",
        &id[..12],
        "--from-failed",
        "--code",
        fixed.to_str().unwrap(),
        "-o",
        "json",
    ]);
    let replay: serde_json::Value = serde_json::from_str(run.ok()).unwrap();
    assert_eq!(replay["status"], "succeeded");
    assert_eq!(replay["rerun_of"], failed["id"]);
    assert_eq!(replay["input_commit"], failed["input_commit"]);
    assert_eq!(
        node(&replay, "analytics.stage")["status"],
        "cached",
        "reused from the failed run"
    );
    assert_eq!(node(&replay, "analytics.final")["status"], "done");
    // The replay read the failed run's input commit: 4 rows, not the 5 of main now.
    assert_eq!(
        lh.rows("select count(*) AS n from analytics.final", "main")[0]["n"],
        4
    );
    assert_eq!(
        lh.rows("select count(*) AS n from raw.orders", "main")[0]["n"],
        5,
        "the later import survives the merge"
    );
    // Replaying the failed run again recomputes everything from the same input commit
    // and gets the same rows; it cannot publish over the first replay's outputs (they
    // changed on main since that input commit): a conflict, main untouched, the replay's
    // branch kept for inspection.
    let first = lh.rows("select * from analytics.final order by id", "main");
    let head = lh.head("main");
    let run = lh.run(&[
        "rerun",
        &id[..12],
        "--code",
        fixed.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(run.code, 8, "{}", run.stderr);
    let again: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(
        again["error"]
            .as_str()
            .unwrap()
            .contains("changed on both sides"),
        "{again}"
    );
    assert_eq!(node(&again, "analytics.final")["status"], "done");
    let branch = again["run_branch"].as_str().unwrap();
    assert_eq!(
        lh.rows("select * from analytics.final order by id", branch),
        first
    );
    assert_eq!(lh.head("main"), head);
    lh.run(&["rerun", "0123456789ab"]).fails(3);
    lh.run(&["runs", "cancel", &id[..12]]).fails(4);
}

fn a_concurrent_reader_sees_all_outputs_or_none(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    orders(&lh);
    let dir = project(
        &lh,
        "p",
        &[
            ("lh_project.yml", PROJECT),
            ("a.sql", "select * from raw.orders\n"),
            ("b.sql", "select * from a\n"),
            (
                "slow.py",
                "import lh, time\n\n@lh.model()\ndef c(b=lh.Model(\"b\")):\n    time.sleep(1)\n    return b\n",
            ),
        ],
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (lh, stop) = (lh.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = lh.run(&["query", "select (select count(*) from analytics.a) + (select count(*) from analytics.b) + (select count(*) from analytics.c) AS n", "-o", "json"]);
                match r.code {
                    0 => {
                        seen.insert(r.stdout.trim().to_string());
                    }
                    3 => {
                        seen.insert("none".to_string());
                    }
                    other => panic!("reader failed with {other}: {}", r.stderr),
                }
            }
            seen
        })
    };
    let (code, _) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = reader.join().unwrap();
    let allowed: std::collections::BTreeSet<String> =
        ["none".to_string(), "[{\"n\":12}]".to_string()].into();
    assert!(
        seen.is_subset(&allowed),
        "a reader saw a partial publish: {seen:?}"
    );
}

fn the_examples_run_from_the_readme(runtime: &str) {
    let server = server(runtime);
    let lh = server.lh();
    jaffle_data(&lh);
    let jaffle = examples().join("jaffle_shop");
    let (code, run) = run_json(&lh, &[jaffle.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(run["nodes"].as_array().unwrap().len(), 10);
    let counts = lh.rows("select (select count(*) from analytics.customers) AS customers, (select count(*) from analytics.orders) AS orders, (select count(*) from analytics.stg_payments) AS payments", "main");
    assert_eq!(counts[0]["customers"], 100);
    assert_eq!(counts[0]["orders"], 99);
    let totals = lh.rows("select (select sum(amount) from analytics.orders) AS a, (select sum(customer_lifetime_value) from analytics.customers) AS b", "main");
    assert_eq!(totals[0]["a"], totals[0]["b"]);
    let (_, again) = run_json(&lh, &[jaffle.to_str().unwrap()]);
    assert!(
        again["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "model")
            .all(|n| n["status"] == "cached")
    );
    // Column-level lineage through the jaffle shop: SQL models from their queries (a
    // CTE's sum of a staging column), the Python model from its declared columns.
    let l: serde_json::Value = serde_json::from_str(
        lh.run(&["lineage", "analytics.orders.amount", "-o", "json"])
            .ok(),
    )
    .unwrap();
    let steps: Vec<String> = l["upstream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} -> {}",
                e["from"].as_str().unwrap(),
                e["to"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            "analytics.stg_payments.amount -> analytics.orders.amount",
            "raw.payments.amount -> analytics.stg_payments.amount",
        ],
        "{l}"
    );
    let l: serde_json::Value = serde_json::from_str(
        lh.run(&["lineage", "raw.payments.amount", "-o", "json"])
            .ok(),
    )
    .unwrap();
    let to: Vec<&str> = l["downstream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["to"].as_str().unwrap())
        .collect();
    assert!(to.contains(&"analytics.orders.amount"), "{l}");
    assert!(
        to.contains(&"analytics.customers.customer_lifetime_value"),
        "the Python model declares stg_payments.amount: {l}"
    );
    assert!(!to.contains(&"analytics.orders.status"), "{l}");

    // The story starts from an empty catalog: a server of its own.
    let server = self::server(runtime);
    let lh = server.lh();
    let story = std::process::Command::new(examples().join("wap/story.sh"))
        .env("LH", lh_e2e::lh_bin())
        .env("LH_ENDPOINT", &lh.endpoint)
        .env("LH_HOME", &lh.home)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&story.stdout).to_string()
        + &String::from_utf8_lossy(&story.stderr);
    assert!(story.status.success(), "{text}");
    assert!(text.contains("100 payments have no bill id"), "{text}");
    assert!(
        text.contains("| 100       |"),
        "the fixed replay held back 100 payments: {text}"
    );
}

fn cancelling_a_run_publishes_nothing_and_old_branches_expire(runtime: &str) {
    let server = Server::start_with(&[
        "--env-cache",
        &env_cache(),
        "--run-branch-ttl",
        "2",
        "--runtime",
        runtime,
    ]);
    let lh = server.lh();
    orders(&lh);
    let dir = project(
        &lh,
        "slow",
        &[
            ("lh_project.yml", PROJECT),
            (
                "m.py",
                "import lh, time\n\n@lh.model()\ndef slow(o=lh.Model(\"raw.orders\")):\n    time.sleep(300)\n    return o\n",
            ),
        ],
    );
    let before = lh.head("main");
    // Wait until the node runs, then cancel.
    let id = start_until_running(&lh, &dir);
    let cancel = lh.run(&["runs", "cancel", &id[..12]]);
    assert!(cancel.stderr.contains("cancelled"), "{}", cancel.stderr);
    let r: serde_json::Value =
        serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
    assert_eq!(r["status"], "cancelled");
    // Stopped while it ran: cancelled, not skipped.
    assert_eq!(r["nodes"][0]["status"], "cancelled");
    assert_eq!(lh.head("main"), before);
    // The kept branch goes when its time is up.
    let branch = r["run_branch"].as_str().unwrap().to_string();
    assert!(lh.run(&["branch", "ls", "--all"]).ok().contains(&branch));
    let mut gone = false;
    for _ in 0..100 {
        if !lh.run(&["branch", "ls", "--all"]).ok().contains(&branch) {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(gone, "branch {branch} was not expired");
    // The run's record stays.
    lh.run(&["runs", "show", &id[..12]]).ok();
}

/// The folders of `analytics.slow` in the warehouse (a new table's folder holds its
/// data folder while the model runs); on S3, where nothing reaches the bucket before
/// the upload, the writes' staging folders on the server.
pub(crate) fn slow_table_dirs(server: &Server) -> Vec<String> {
    if server.warehouse.is_s3() {
        // Staged on whichever server drives the run.
        return server
            .data_dirs()
            .iter()
            .flat_map(|d| {
                std::fs::read_dir(d.join("s3").join("staging"))
                    .map(|rd| {
                        rd.filter_map(|e| e.ok())
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            })
            .collect();
    }
    let ns = server.warehouse_dir().join("analytics");
    std::fs::read_dir(ns)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("slow-"))
                .collect()
        })
        .unwrap_or_default()
}

/// SQL models run in the server's DuckDB, not in a runtime: one test, on the process
/// runtime. A query that would run for hours (a 10^12-row cross product) is stopped at
/// the project's timeout, and when its run is cancelled, and leaves no file behind.
/// `lh init` makes a project that runs as made (a model with no inputs, a SQL model, an
/// expectation), and overwrites nothing.
#[test]
fn lh_init_makes_a_project_that_runs_as_made() {
    let server = server("process");
    let lh = server.lh();
    let made = lh.run(&["init", "my-shop"]);
    assert!(made.ok().is_empty());
    assert!(
        made.stderr.contains("made project 'my_shop'"),
        "{}",
        made.stderr
    );
    let dir = lh.cwd.join("my-shop");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{run}");
    assert_eq!(node(&run, "every_word_has_letters")["status"], "passed");
    let rows = lh.rows(
        "select word, letters from my_shop.greeting_lengths order by word",
        "main",
    );
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0]["word"], "bonjour");
    assert_eq!(rows[0]["letters"], 7);
    // Again: refused, nothing overwritten.
    let yml = std::fs::read_to_string(dir.join("lh_project.yml")).unwrap();
    let again = lh.run(&["init", "my-shop", "--namespace", "other"]);
    assert_eq!(again.code, 5, "{}", again.both());
    assert!(
        again.stderr.contains("already holds a project"),
        "{}",
        again.stderr
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("lh_project.yml")).unwrap(),
        yml
    );
    let bad = lh.run(&["init", "x", "--namespace", "Bad-Name"]);
    assert_eq!(bad.code, 5, "{}", bad.both());
}

#[test]
fn a_runaway_sql_model_stops_at_its_timeout_and_on_cancel() {
    let server = Server::start_with(&["--env-cache", &env_cache(), "--runtime", "process"]);
    let lh = server.lh();
    orders(&lh);
    let slow = "SELECT count(*) AS n FROM range(1000000) a, range(1000000) b WHERE a.range + b.range = 7\n";
    let files = |project: &'static str| {
        [
            ("lh_project.yml", project),
            ("slow.sql", slow),
            ("good.sql", "SELECT * FROM raw.orders\n"),
            ("after.sql", "SELECT n FROM slow\n"),
        ]
    };
    let timed = format!("{PROJECT}resources: {{timeout: 2s}}\n");
    let timed: &'static str = Box::leak(timed.into_boxed_str());
    let dir = project(&lh, "timed", &files(timed));
    let before = lh.head("main");
    let (code, run) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 8, "{run}");
    let bad = node(&run, "analytics.slow");
    assert_eq!(bad["status"], "failed", "{run}");
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("model analytics.slow timed out after 2 s and was stopped"),
        "{bad}"
    );
    assert_eq!(node(&run, "analytics.after")["status"], "skipped");
    assert_eq!(node(&run, "analytics.good")["status"], "done");
    assert_eq!(lh.head("main"), before);
    assert_eq!(slow_table_dirs(&server), Vec::<String>::new());

    // A bad timeout is a planning error.
    let dir = project(
        &lh,
        "bad_timeout",
        &files("name: shop\nnamespace: analytics\nresources: {timeout: soon}\n"),
    );
    let err = lh
        .run(&["run", dir.to_str().unwrap(), "--dry-run"])
        .fails(5)
        .to_string();
    assert!(
        err.contains("lh_project.yml") && err.contains("'soon'"),
        "{err}"
    );

    // Cancelled while the query runs (the default timeout is 10 minutes): DuckDB is
    // interrupted and the write's folders are removed.
    let dir = project(&lh, "untimed", &files(PROJECT));
    let id = lh
        .run(&["run", dir.to_str().unwrap(), "--detach"])
        .ok()
        .trim()
        .to_string();
    let mut running = false;
    for _ in 0..400 {
        let r: serde_json::Value =
            serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
        if node(&r, "analytics.slow")["status"] == "running" && !slow_table_dirs(&server).is_empty()
        {
            running = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(running, "the slow model never started");
    lh.run(&["runs", "cancel", &id[..12]]).ok();
    let mut left = slow_table_dirs(&server);
    for _ in 0..200 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        left = slow_table_dirs(&server);
    }
    assert_eq!(left, Vec::<String>::new(), "the cancelled write left files");
    assert_eq!(lh.head("main"), before);
}

/// A server paused past its run's lease (SIGSTOP: a busy machine, a slow disk) keeps
/// driving the run when it comes back: its own scan for orphaned runs does not take a
/// run it drives, and a write whose heartbeat is late renews the lease first instead of
/// failing. The run succeeds, once.
#[test]
fn a_server_paused_past_its_lease_keeps_its_run() {
    let cache = env_cache();
    let server = Server::start_single(&[
        "--env-cache",
        &cache,
        "--runtime",
        "process",
        "--run-lease",
        "1s",
    ]);
    let lh = server.lh();
    orders(&lh);
    let models = r#"
import time
import lh

@lh.model()
def slow(o=lh.Model("raw.orders")):
    time.sleep(1)
    return o

@lh.model()
def after(s=lh.Model("slow")):
    return s
"#;
    let dir = project(
        &lh,
        "paused",
        &[("lh_project.yml", PROJECT), ("m.py", models)],
    );
    // Warm: the environment is built before the paused run.
    let (code, warm) = run_json(&lh, &[dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{warm}");
    let id = lh
        .run(&["run", dir.to_str().unwrap(), "--detach", "--no-cache"])
        .ok()
        .trim()
        .to_string();
    let mut started = false;
    for _ in 0..200 {
        let r: serde_json::Value =
            serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
        if node(&r, "analytics.slow")["status"] == "running" {
            started = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(started, "the slow model never started");
    let pid = server.pid(0).to_string();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let signal = |s: &str| {
        let ok = std::process::Command::new("kill")
            .args([s, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {s}");
    };
    // Paused past the lease; the function ends meanwhile (its worker is not paused),
    // so the server's first acts on waking are its write and its heartbeat, racing.
    signal("-STOP");
    std::thread::sleep(std::time::Duration::from_millis(3000));
    signal("-CONT");
    let mut run = serde_json::Value::Null;
    for _ in 0..600 {
        run = serde_json::from_str(lh.run(&["runs", "show", &id, "-o", "json"]).ok()).unwrap();
        if run["status"] != "running" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = server.log();
    assert_eq!(run["status"], "succeeded", "{run}\n{log}");
    assert!(!log.contains("taking over a run"), "{log}");
    assert_eq!(node(&run, "analytics.after")["status"], "done", "{run}");
    assert_eq!(
        lh.rows("select count(*) AS n from analytics.after", "main"),
        vec![serde_json::json!({"n": 4})]
    );
}
