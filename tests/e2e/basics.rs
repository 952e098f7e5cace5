//! The binary itself: help, version, exit codes, a server that is not running, and a
//! graceful shutdown.

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

#[test]
fn a_server_that_is_not_running_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let lh = Lh {
        endpoint: format!("http://127.0.0.1:{port}"),
        home: dir.path().join("home"),
        cwd: dir.path().to_path_buf(),
    };
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
    assert_eq!(v["iceberg_rest"], format!("{}/iceberg", server.url));
    assert!(
        v["server"]["runtime"]
            .as_str()
            .unwrap()
            .starts_with("process (bubblewrap sandbox)"),
        "{v}"
    );
    assert!(
        v["server"]["catalog"]
            .as_str()
            .unwrap()
            .starts_with("sqlite:")
    );
    assert!(
        v["server"]["warehouse"]
            .as_str()
            .unwrap()
            .starts_with("file://")
    );
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
