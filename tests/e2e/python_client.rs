//! lh's Python client (`lh.Client`) against a live server: every method and the errors,
//! in `python_client.py`, with the package from `runner/python` as users install it.

use lh_e2e::{Server, python};

#[test]
fn the_python_client_covers_the_api() {
    let server = Server::start();
    let reader = server.token_for("rita", "reader");
    let dir = tempfile::tempdir().unwrap();
    let site = install(dir.path());
    // The config file the script reads, written by lh's own code as `lh` writes it.
    let mut config = lh_api::config_file::ConfigFile {
        profile: Some("team".to_string()),
        ..Default::default()
    };
    config.profiles.insert(
        "team".to_string(),
        lh_api::config_file::Profile {
            endpoint: Some(server.url.clone()),
            branch: Some("2024-01-01".to_string()),
            token: Some(server.token()),
        },
    );
    config.save(&dir.path().join("home/config.yaml")).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/python_client.py");
    let out = std::process::Command::new(python())
        .arg(script)
        .env("PYTHONPATH", &site)
        .env("LH_ENDPOINT", &server.url)
        .env("LH_TOKEN", server.token())
        .env("LH_TEST_READER_TOKEN", &reader)
        .env("LH_TEST_DIR", dir.path())
        .env("LH_USER", "tester")
        .env_remove("LH_HOME")
        .env_remove("LH_PROFILE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "python_client.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        server
            .log()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Installs lh's Python package as a user would (`pip install runner/python`), from a
/// copy of its folder (a build writes beside the sources), into a folder of `dir`: the
/// packaging (its module list, `py.typed`) is under test too.
fn install(dir: &std::path::Path) -> std::path::PathBuf {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../runner/python");
    let copy = dir.join("package");
    std::fs::create_dir_all(copy.join("lh")).unwrap();
    std::fs::copy(source.join("pyproject.toml"), copy.join("pyproject.toml")).unwrap();
    for e in std::fs::read_dir(source.join("lh")).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), copy.join("lh").join(e.file_name())).unwrap();
        }
    }
    let site = dir.join("site");
    let out = std::process::Command::new(python())
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
        ])
        .arg(&site)
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pip install runner/python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        site.join("lh/py.typed").exists(),
        "the package ships py.typed"
    );
    assert!(site.join("lh/client.py").exists());
    site
}
