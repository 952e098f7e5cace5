//! The binary itself: help, version, exit codes, a server that is not running, and a
//! graceful shutdown; and the demo of the README, run to its end.

use lh_e2e::{Lh, Server, lh_bin};

use crate::snap;

#[test]
fn version_and_help() {
    let out = std::process::Command::new(lh_bin())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("lh {}", env!("CARGO_PKG_VERSION"))
    );
    let out = std::process::Command::new(lh_bin())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "server", "info", "branch", "tag", "checkout", "log", "diff", "merge", "table", "query",
        "run", "runs", "rerun", "gc",
    ] {
        assert!(
            help.contains(&format!("  {cmd} ")),
            "help lists {cmd}:\n{help}"
        );
    }
    assert!(help.contains("Exit codes: 0 ok"), "{help}");
    // A usage error is exit 2.
    let out = std::process::Command::new(lh_bin())
        .args(["branch", "frobnicate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Only the server loads DuckDB: `lh server` runs the `lh-server` executable beside `lh`,
/// so the commands people type in a loop start without DuckDB's 9 ms of symbol binding
/// (BENCHMARKS.md, TPC-H). `lh server --help` still lists the server's flags.
#[test]
fn only_the_server_links_duckdb() {
    let needed = |exe: &std::path::Path| {
        let out = std::process::Command::new("ldd").arg(exe).output().unwrap();
        assert!(out.status.success(), "ldd {}", exe.display());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let lh = lh_bin();
    let server = lh.with_file_name("lh-server");
    assert!(!needed(&lh).contains("libduckdb"), "{}", needed(&lh));
    assert!(needed(&server).contains("libduckdb"), "{}", needed(&server));

    let out = std::process::Command::new(&lh)
        .args(["server", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: lh server [OPTIONS]"), "{help}");
    assert!(help.contains("--warehouse <URL>"), "{help}");
    // A bad flag is the server's usage error, exit 2, as for any command.
    let out = std::process::Command::new(&lh)
        .args(["server", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));

    // An `lh` without its server beside it (nor on PATH) says what is missing.
    let dir = tempfile::tempdir().unwrap();
    let alone = dir.path().join("lh");
    std::fs::copy(&lh, &alone).unwrap();
    let out = std::process::Command::new(&alone)
        .arg("server")
        .env("PATH", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: cannot start the lh server (lh-server on PATH)"),
        "{err}"
    );
    assert!(err.contains("put it next to `lh` or on PATH"), "{err}");
}

/// `make install` (its copying half, once built): both binaries in PREFIX/bin, DuckDB's
/// library in PREFIX/lib/lh, where the installed server finds it; `lh server` there
/// starts the server beside it.
#[test]
fn make_install_puts_lh_on_path() {
    let prefix = tempfile::tempdir().unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new("make")
        .arg("-C")
        .arg(&repo)
        .arg("install-built")
        .arg(format!("PREFIX={}", prefix.path().display()))
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("is not on your PATH"), "{said}");
    let bin = prefix.path().join("bin");
    let lib = prefix.path().join("lib/lh/libduckdb.so");
    assert!(lib.is_file());
    let ldd = std::process::Command::new("ldd")
        .arg(bin.join("lh-server"))
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout).into_owned();
    assert!(
        ldd.contains(&format!(
            "libduckdb.so => {}/../lib/lh/libduckdb.so",
            bin.display()
        )),
        "{ldd}"
    );
    let cwd = tempfile::tempdir().unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = std::process::Command::new("lh")
        .args(["server", "--version"])
        .env("PATH", &path)
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("lh"));
}

#[test]
fn a_server_that_is_not_running_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let lh = Lh::new(
        format!("http://127.0.0.1:{port}"),
        dir.path().join("home"),
        dir.path().to_path_buf(),
    );
    for args in [&["branch", "ls"][..], &["query", "select 1"], &["info"]] {
        let run = lh.run(args);
        let err = run.fails(6);
        assert!(
            err.contains(&format!(
                "error: cannot reach the lh server at http://127.0.0.1:{port}"
            )),
            "{err}"
        );
        assert!(err.contains("hint: start one with `lh server`"), "{err}");
    }
}

#[test]
fn info_shows_server_storage_and_active_branch() {
    let server = Server::start_with(&["--runtime", "process"]);
    let lh = server.lh();
    snap!("info", server, lh.run(&["info"]));
    let v: serde_json::Value = serde_json::from_str(lh.run(&["info", "-o", "json"]).ok()).unwrap();
    assert_eq!(v["active_branch"], "main");
    // The server that answered (either, with two).
    assert!(
        server
            .urls()
            .iter()
            .any(|u| v["iceberg_rest"] == format!("{u}/iceberg")),
        "{v}"
    );
    assert!(
        v["server"]["runtime"]
            .as_str()
            .unwrap()
            .starts_with("process (bubblewrap sandbox)"),
        "{v}"
    );
    // The embedded default, or the database two servers share.
    let expected = if server.urls().len() == 2 {
        "postgres"
    } else {
        "sqlite:"
    };
    assert!(
        v["server"]["catalog"]
            .as_str()
            .unwrap()
            .starts_with(expected),
        "{v}"
    );
    let warehouse = v["server"]["warehouse"].as_str().unwrap();
    match &server.warehouse {
        lh_e2e::TestWarehouse::Local => {
            assert!(warehouse.starts_with("file://"), "{v}");
            assert!(v["server"].get("storage").is_none(), "{v}");
        }
        // The bucket and how it is reached; never the secret, in any format.
        lh_e2e::TestWarehouse::S3(s3) => {
            assert!(
                warehouse.starts_with(&format!("s3://{}/w", s3.bucket)),
                "{v}"
            );
            let st = &v["server"]["storage"];
            assert_eq!(st["endpoint"], s3.endpoint.as_str(), "{v}");
            assert_eq!(st["bucket"], s3.bucket.as_str(), "{v}");
            assert_eq!(st["path_style"], true, "{v}");
            assert_eq!(st["credentials_from"], "environment", "{v}");
            let text = lh.run(&["info"]).ok().to_string();
            assert!(
                text.contains(&format!("s3 endpoint    {}", s3.endpoint)),
                "{text}"
            );
            for out in [text, v.to_string(), server.log()] {
                assert!(!out.contains(&s3.secret), "the secret shows: {out}");
            }
        }
    }
}

#[test]
fn the_server_shuts_down_gracefully() {
    let server = Server::start();
    server.lh().run(&["branch", "create", "x"]).ok();
    let log_before = server.log();
    let status = server.stop();
    assert!(status.success(), "exit status {status:?}\n{log_before}");
}

#[test]
fn a_broken_pipe_is_not_an_error() {
    let server = Server::start();
    let lh = server.lh();
    let mut cmd = lh.command(&["query", "select range AS n FROM range(200000)", "-o", "csv"]);
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The README's first command: `make demo` runs `scripts/demo.sh` (here at a small
/// scale). DuckDB reads `main` through the Iceberg REST catalog, which must agree with
/// `lh query` on `main` after the merge; then a pipeline's expectation stops a bad day
/// from publishing and the fixed code's replay publishes. Its log, not a terminal, has
/// no escape sequence, and it ends saying how to start the server again on its data.
#[test]
fn the_demo_runs_to_the_end() {
    let python = lh_e2e::python();
    let venv_bin = std::path::Path::new(&python)
        .parent()
        .unwrap()
        .to_path_buf();
    let tmp = tempfile::tempdir().unwrap();
    // As `make demo` runs it: `lh` and the prepared Python first on the PATH.
    let path = format!(
        "{}:{}:{}",
        lh_bin().parent().unwrap().display(),
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/demo.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .env("LH_DEMO_SCALE", "0.01")
        .env("TMPDIR", tmp.path())
        .env("PATH", path)
        .env_remove("LH_ENDPOINT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(
        !stdout.contains('\u{1b}') && !stderr.contains('\u{1b}'),
        "escape sequences in a log:\n{stdout}"
    );
    assert!(
        stdout.contains("main is still at") && stdout.contains("$ lh rerun"),
        "no pipeline step:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("failed") && stderr.contains("succeeded: published to 'main'"),
        "{stderr}"
    );
    assert!(stdout.contains("lh server --data-dir"), "{stdout}");
    // The README's transcript of the demo: every command it shows, the demo printed.
    let printed: Vec<String> = stdout.lines().map(crate::readme::normalize).collect();
    let blocks = crate::readme::blocks();
    let shown: Vec<&String> = blocks
        .iter()
        .filter(|b| b.marks.iter().any(|m| m == "the demo's output"))
        .flat_map(|b| b.lines.iter())
        .filter(|l| l.starts_with("$ ") || l.starts_with("D ") || l.starts_with("    "))
        .collect();
    assert!(shown.len() >= 15, "the README's demo transcript: {shown:?}");
    for l in shown {
        assert!(
            printed.contains(&crate::readme::normalize(l)),
            "the README's demo shows `{l}`, which the demo did not print:\n{stdout}"
        );
    }
    let (lh_part, duck_part) = stdout
        .split_once("D USE lake.tpch;")
        .unwrap_or_else(|| panic!("no DuckDB step:\n{stdout}"));
    // `lh query` rows print as `| A | 1478 | 502... |`, DuckDB's as `│ A │ 1478 │ 502... │`.
    let cells = |line: &str, bar: char| -> Vec<String> {
        line.split(bar)
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect()
    };
    let duck_rows: Vec<Vec<String>> = duck_part
        .lines()
        .filter(|l| l.starts_with("│ A") || l.starts_with("│ N") || l.starts_with("│ R"))
        .map(|l| cells(l, '│'))
        .collect();
    assert_eq!(duck_rows.len(), 3, "{duck_part}");
    // The lh query of main after the merge is the last of its kind before time travel.
    let after_merge = lh_part
        .split("publish: merge the branch into main")
        .nth(1)
        .and_then(|s| s.split("time travel").next())
        .unwrap_or_else(|| panic!("no merge step:\n{stdout}"));
    let lh_rows: Vec<Vec<String>> = after_merge
        .lines()
        .filter(|l| l.starts_with("| A") || l.starts_with("| N") || l.starts_with("| R"))
        .map(|l| cells(l, '|'))
        .collect();
    assert_eq!(duck_rows, lh_rows, "{stdout}");
}

/// A warehouse must hold table files only: one that contains the server's own data
/// directory (where runs keep code and work folders) is refused at start.
#[test]
fn a_warehouse_containing_the_data_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = std::process::Command::new(lh_bin())
        .args(["server", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .arg("--warehouse")
        .arg(tmp.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("contains the data directory"), "{err}");
}
