//! The end-to-end harness: a real `lh server` in a temporary data directory on a free
//! loopback port, and the real `lh` CLI run against it with its own home directory.
//!
//! The binary is the `lh` built next to this test binary (`make test` builds it first);
//! a missing binary fails the test, it never skips.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The `lh` binary under test.
pub fn lh_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("LH_BIN") {
            return PathBuf::from(p);
        }
        // target/<profile>/deps/e2e-<hash> -> target/<profile>/lh
        let exe = std::env::current_exe().expect("current exe");
        let bin = exe
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("lh"))
            .expect("target dir");
        assert!(
            bin.exists(),
            "{} does not exist: build it first (`cargo build -p lh-cli`, as `make test` does)",
            bin.display()
        );
        bin
    })
    .clone()
}

/// The Python that `make test` prepares (LH_TEST_PYTHON): pyiceberg 0.12, DuckDB 1.5.5
/// with its iceberg extension, pyarrow. Unset fails the test, it never skips.
pub fn python() -> String {
    std::env::var("LH_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "LH_TEST_PYTHON is not set: it names a Python with pyiceberg 0.12, pyspark and DuckDB's iceberg \
             extension; `make test` prepares one (scripts/services.sh python)"
        )
    })
}

/// Which warehouse the suite's servers use: the local folder (the default), or, with
/// `LH_TEST_WAREHOUSE=s3`, a fresh prefix of the test bucket on the S3 server that
/// `scripts/services.sh s3` starts (a real S3 server over a folder, s3s-fs: tests see
/// and age the objects through that folder, as they do a local warehouse's files).
/// `make test` runs the end-to-end suite once with each.
#[derive(Debug, Clone)]
pub enum TestWarehouse {
    Local,
    S3(S3Server),
}

/// The test S3 server, from the variables `scripts/services.sh s3` prints. A missing
/// one fails the test, it never skips.
#[derive(Debug, Clone)]
pub struct S3Server {
    pub endpoint: String,
    pub bucket: String,
    pub key: String,
    pub secret: String,
    /// The folder s3s-fs keeps the bucket's objects in (`<root>/<bucket>/<key>`).
    pub root: PathBuf,
}

impl S3Server {
    pub fn from_env() -> S3Server {
        let get = |k: &str| {
            std::env::var(k).unwrap_or_else(|_| {
                panic!(
                    "{k} is not set: the S3 tests need the S3 server that \
                     `scripts/services.sh s3` starts (make test does)"
                )
            })
        };
        S3Server {
            endpoint: get("LH_TEST_S3_ENDPOINT"),
            bucket: get("LH_TEST_S3_BUCKET"),
            key: get("LH_TEST_S3_KEY"),
            secret: get("LH_TEST_S3_SECRET"),
            root: PathBuf::from(get("LH_TEST_S3_ROOT")),
        }
    }

    /// The environment that points the server's S3 client at this server.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID".into(), self.key.clone()),
            ("AWS_SECRET_ACCESS_KEY".into(), self.secret.clone()),
            ("AWS_ENDPOINT_URL".into(), self.endpoint.clone()),
            ("AWS_REGION".into(), "us-east-1".into()),
        ]
    }
}

impl TestWarehouse {
    pub fn from_env() -> TestWarehouse {
        match std::env::var("LH_TEST_WAREHOUSE").as_deref() {
            Err(_) | Ok("" | "local") => TestWarehouse::Local,
            Ok("s3") => TestWarehouse::S3(S3Server::from_env()),
            Ok(other) => panic!("LH_TEST_WAREHOUSE={other}: expected local or s3"),
        }
    }

    pub fn is_s3(&self) -> bool {
        matches!(self, TestWarehouse::S3(_))
    }
}

/// How many servers serve each test: one, or with `LH_TEST_SERVERS=2` two processes on
/// one PostgreSQL database and one warehouse (a team's set-up), every CLI call going to
/// the next in turn (a load balancer without sticky sessions). `make test` runs the
/// tests of tables, queries, runs, refs and the REST catalog this way too.
pub fn test_servers() -> usize {
    match std::env::var("LH_TEST_SERVERS").as_deref() {
        Err(_) | Ok("" | "1") => 1,
        Ok("2") => 2,
        Ok(other) => panic!("LH_TEST_SERVERS={other}: expected 1 or 2"),
    }
}

/// A fresh PostgreSQL database on the test server (`LH_TEST_POSTGRES_URL`, which
/// `make test` sets): its URL. Dropped with [`drop_postgres_database`].
pub fn postgres_database(name: &str) -> String {
    let admin = std::env::var("LH_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!("LH_TEST_POSTGRES_URL is not set: `make test` starts PostgreSQL and sets it")
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {admin}: {e}"));
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await
            .expect("drop database");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create database");
    });
    match admin.rfind('/') {
        Some(i) if !admin[..i].ends_with('/') => format!("{}/{name}", &admin[..i]),
        _ => format!("{admin}/{name}"),
    }
}

/// Drops a database [`postgres_database`] made (best effort).
pub fn drop_postgres_database(name: &str) {
    let Ok(admin) = std::env::var("LH_TEST_POSTGRES_URL") else {
        return;
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(async {
        use sqlx::Connection;
        if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut conn)
                .await;
        }
    });
}

/// A second server process of a test (`LH_TEST_SERVERS=2`), on the first's catalog,
/// warehouse and secret key, with a data directory of its own.
struct Peer {
    child: Child,
    url: String,
}

/// A running `lh server`, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub url: String,
    child: Child,
    log: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    peer: Option<Peer>,
    /// The PostgreSQL database the harness made for this server (dropped with it).
    database: Option<String>,
    /// Which server the next CLI call goes to, when there are two.
    turn: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// The folder the warehouse's files are in: the local warehouse, or the S3
    /// server's folder of the server's prefix.
    warehouse_dir: PathBuf,
    pub warehouse: TestWarehouse,
}

/// A short name part unique across test processes: base 36 of the time and a counter.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let mut n = ((nanos / 1_000_000) * 7 + N.fetch_add(1, Ordering::Relaxed))
        % (36u64.pow(4) - 36u64.pow(3))
        + 36u64.pow(3);
    let mut out = Vec::new();
    while n > 0 {
        out.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// Starts `lh server` on `<dir>/data` with extra flags; its log is appended to `log`.
/// Returns the child and the URL it listens on.
/// Not a variable: in a test's `envs`, a file the server inherits open as descriptor 9.
pub const INHERIT_FD9: &str = "lh-test:inherit-fd9";

fn spawn(dir: &Path, args: &[String], envs: &[(String, String)], log: &Path) -> (Child, String) {
    spawn_on(dir, &dir.join("data"), args, envs, log)
}

fn spawn_on(
    dir: &Path,
    data: &Path,
    args: &[String],
    envs: &[(String, String)],
    log: &Path,
) -> (Child, String) {
    try_spawn_on(dir, data, args, envs, log)
        .unwrap_or_else(|log| panic!("lh server did not start:\n{log}"))
}

/// Starts a server; its log when it did not start.
fn try_spawn_on(
    dir: &Path,
    data: &Path,
    args: &[String],
    envs: &[(String, String)],
    log: &Path,
) -> Result<(Child, String), String> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    // A test's file the server inherits as descriptor 9 (as `lh server 9>>FILE` would).
    let inherit = envs
        .iter()
        .find(|(k, _)| k == INHERIT_FD9)
        .map(|(_, v)| v.clone());
    let envs: Vec<&(String, String)> = envs.iter().filter(|(k, _)| k != INHERIT_FD9).collect();
    let mut command = match &inherit {
        Some(file) => {
            let mut c = Command::new("/bin/sh");
            c.args(["-c", "exec 9>>\"$0\" && exec \"$@\""])
                .arg(file)
                .arg(lh_bin());
            c
        }
        None => Command::new(lh_bin()),
    };
    let mut child = command
        .args(["server", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .args(args)
        .env("LH_LOG", "info")
        // The first admin token goes into the test CLI's profile, for the user the
        // tests' commits are by.
        .env("LH_HOME", dir.join("home"))
        .env("USER", "tester")
        .env_remove("LH_PROFILE")
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lh server");
    // The server prints its address; the rest of its output goes to the log file.
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut log_file = log_file;
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            use std::io::Write;
            let _ = writeln!(log_file, "{line}");
            if !sent && let Some(rest) = line.split("listening on ").nth(1) {
                let _ = tx.send(rest.trim().to_string());
                sent = true;
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(url) => Ok((child, url)),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            // The log thread may still be writing the last lines.
            std::thread::sleep(Duration::from_millis(100));
            Err(std::fs::read_to_string(log).unwrap_or_default())
        }
    }
}

impl Server {
    /// Starts a server on the embedded default (SQLite, local warehouse) in a fresh
    /// temporary directory, with extra flags.
    pub fn start_with(args: &[&str]) -> Server {
        Server::start_with_env(args, &[])
    }

    /// Like [`Server::start_with`], with extra variables in the server's environment.
    pub fn start_with_env(args: &[&str], envs: &[(&str, &str)]) -> Server {
        Server::start_n(args, envs, test_servers())
    }

    /// One server, whatever `LH_TEST_SERVERS` says: for a test that pauses or kills the
    /// server driving a run and checks that no other server took it (two servers'
    /// take-overs are `team::`'s).
    pub fn start_single(args: &[&str]) -> Server {
        Server::start_n(args, &[], 1)
    }

    /// Two servers of one team, whatever `LH_TEST_SERVERS` says: one PostgreSQL
    /// database, one warehouse, one secret key; `lh()` alternates between them,
    /// `lh_on(i)` talks to one.
    pub fn team(args: &[&str], envs: &[(&str, &str)]) -> Server {
        Server::start_n(args, envs, 2)
    }

    fn start_n(args: &[&str], envs: &[(&str, &str)], servers: usize) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("server.log");
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let mut envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let warehouse = TestWarehouse::from_env();
        let own = args.iter().any(|a| a.starts_with("--warehouse"));
        let warehouse_dir = match (&warehouse, own) {
            (TestWarehouse::S3(s3), false) => {
                // Short: s3s-fs keeps each key, base64-encoded, in a file name of its own
                // (at most 255 bytes): keys of 132 characters fit, pyiceberg's longest
                // here are 129.
                let prefix = format!("w{}", uuid_like());
                args.extend([
                    "--warehouse".to_string(),
                    format!("s3://{}/{prefix}", s3.bucket),
                    "--s3-path-style".to_string(),
                ]);
                // The S3 server's key wins over a test's planted AWS_* variables.
                for (k, v) in s3.env() {
                    envs.retain(|(e, _)| *e != k);
                    envs.push((k, v));
                }
                s3.root.join(&s3.bucket).join(prefix)
            }
            _ => dir.path().join("data").join("warehouse"),
        };
        // Two servers: one PostgreSQL database (unless the test brings its catalog).
        let mut database = None;
        if servers == 2 && !args.iter().any(|a| a.starts_with("--catalog")) {
            let name = format!("lh_e2e_{}_{}", std::process::id(), uuid_like());
            args.extend(["--catalog".to_string(), postgres_database(&name)]);
            database = Some(name);
        }
        let (child, url) = spawn(dir.path(), &args, &envs, &log);
        let mut server = Server {
            dir,
            url,
            child,
            log,
            args,
            envs,
            peer: None,
            database,
            turn: Default::default(),
            warehouse_dir,
            warehouse,
        };
        if servers == 2 {
            server.start_peer(&[]);
        }
        server
    }

    /// The `--catalog` URL the server was started with, if any.
    pub fn catalog_url(&self) -> Option<String> {
        let i = self.args.iter().position(|a| a == "--catalog")?;
        self.args.get(i + 1).cloned()
    }

    /// A CLI talking to server `i` only (0: the first, 1: the second).
    pub fn lh_on(&self, i: usize) -> Lh {
        let urls = self.urls();
        let mut lh = self.lh();
        lh.endpoint = urls[i].clone();
        lh.others.clear();
        lh
    }

    /// Kills server `i` with SIGKILL, as a crash would (the other goes on).
    pub fn kill_one(&mut self, i: usize) {
        let child = match i {
            0 => &mut self.child,
            _ => &mut self.peer.as_mut().expect("a second server").child,
        };
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits for server `i` to exit (after a signal the test sent it).
    pub fn wait_one(&mut self, i: usize) {
        let child = match i {
            0 => &mut self.child,
            _ => &mut self.peer.as_mut().expect("a second server").child,
        };
        let _ = child.wait();
    }

    /// Starts server `i` again on its data directory (after `kill_one`), on a new port.
    pub fn restart_one(&mut self, i: usize) {
        match i {
            0 => {
                let (child, url) = spawn(self.dir.path(), &self.args, &self.envs, &self.log);
                self.child = child;
                self.url = url;
            }
            _ => self.start_peer(&[]),
        }
    }

    /// Stops the server and starts it again expecting it to refuse: its log (the
    /// refusal in it). Panics if it started.
    pub fn restart_refused(&mut self) -> String {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
        let data = self.data_dir();
        match try_spawn_on(self.dir.path(), &data, &self.args, &self.envs, &self.log) {
            Ok((child, url)) => {
                self.child = child;
                self.url = url;
                panic!("the server started");
            }
            Err(log) => log,
        }
    }

    /// The process id of server `i`.
    pub fn pid(&self, i: usize) -> u32 {
        match i {
            0 => self.child.id(),
            _ => self.peer.as_ref().expect("a second server").child.id(),
        }
    }

    /// Starts the second server: the first's flags, its warehouse and its secret key,
    /// a data directory of its own.
    fn start_peer(&mut self, extra: &[&str]) {
        let mut args = self.args.clone();
        args.extend(extra.iter().map(|a| a.to_string()));
        if !args.iter().any(|a| a.starts_with("--warehouse")) {
            args.extend([
                "--warehouse".to_string(),
                self.data_dir().join("warehouse").display().to_string(),
            ]);
        }
        if !args.iter().any(|a| a.starts_with("--secret-key-file")) {
            args.extend([
                "--secret-key-file".to_string(),
                self.data_dir().join("secret.key").display().to_string(),
            ]);
        }
        let data = self.dir.path().join("data2");
        let (child, url) = spawn_on(self.dir.path(), &data, &args, &self.envs, &self.log);
        self.peer = Some(Peer { child, url });
    }

    /// The URL of every server of the test (two with `LH_TEST_SERVERS=2`).
    pub fn urls(&self) -> Vec<String> {
        let mut all = vec![self.url.clone()];
        all.extend(self.peer.as_ref().map(|p| p.url.clone()));
        all
    }

    /// The folder the warehouse's files are in (on S3, as the S3 server keeps them):
    /// tests read, add and age files there.
    pub fn warehouse_dir(&self) -> PathBuf {
        self.warehouse_dir.clone()
    }

    /// Kills the server (both, with two) with SIGKILL, as a crash would, and waits.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(p) = &mut self.peer {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    /// Starts the server again on the same data directory (after `kill` or `stop`); it
    /// listens on a new port: take a new `lh()`.
    pub fn restart(&mut self) {
        self.restart_with(&[]);
    }

    /// [`Server::restart`] with flags added for this start only.
    pub fn restart_with(&mut self, extra: &[&str]) {
        let mut args = self.args.clone();
        args.extend(extra.iter().map(|a| a.to_string()));
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
        let (child, url) = spawn(self.dir.path(), &args, &self.envs, &self.log);
        self.child = child;
        self.url = url;
        if let Some(mut p) = self.peer.take() {
            if let Ok(None) = p.child.try_wait() {
                terminate(&mut p.child);
            }
            self.start_peer(extra);
        }
    }

    pub fn start() -> Server {
        Server::start_with(&[])
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The data directory of every server of the test (two with `LH_TEST_SERVERS=2`).
    pub fn data_dirs(&self) -> Vec<PathBuf> {
        let mut all = vec![self.data_dir()];
        if self.peer.is_some() {
            all.push(self.dir.path().join("data2"));
        }
        all
    }

    /// The admin token the server made at its first start (in the test CLI's profile).
    pub fn token(&self) -> String {
        let home = self.dir.path().join("home");
        profile_token(&home)
            .unwrap_or_else(|| panic!("no admin token in {}/config.yaml", home.display()))
    }

    /// A new token for `user` with `role`, made with the admin token.
    pub fn token_for(&self, user: &str, role: &str) -> String {
        let out = self
            .lh()
            .run(&["token", "create", "--user", user, "--role", role]);
        out.ok().trim().to_string()
    }

    /// A CLI bound to this server (to both, in turn, with two), with its own home
    /// directory.
    pub fn lh(&self) -> Lh {
        let home = self.dir.path().join("home");
        Lh {
            endpoint: self.url.clone(),
            others: self.peer.iter().map(|p| p.url.clone()).collect(),
            turn: self.turn.clone(),
            home,
            cwd: self.dir.path().to_path_buf(),
            token: None,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the server with SIGTERM (a graceful shutdown) and waits for it.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.terminate()
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        if let Some(p) = &mut self.peer
            && let Ok(None) = p.child.try_wait()
        {
            terminate(&mut p.child);
        }
        terminate(&mut self.child)
    }
}

/// Stops a server with SIGTERM (SIGKILL after 20 s) and waits for it.
fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
        if let Some(p) = &mut self.peer
            && let Ok(None) = p.child.try_wait()
        {
            terminate(&mut p.child);
        }
        if let Some(db) = &self.database {
            drop_postgres_database(db);
        }
    }
}

/// The CLI, pointed at a server.
#[derive(Debug, Clone)]
pub struct Lh {
    pub endpoint: String,
    /// The other servers of the test: each call goes to the next in turn.
    pub others: Vec<String>,
    turn: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pub home: PathBuf,
    pub cwd: PathBuf,
    /// `LH_TOKEN` (none: the profile's, the admin token the server made).
    pub token: Option<String>,
}

/// The token of the default profile in `home`'s config file (where the server writes
/// its first admin token).
fn profile_token(home: &Path) -> Option<String> {
    lh_api::config_file::ConfigFile::load(&home.join("config.yaml"))
        .ok()?
        .profiles
        .get("default")?
        .token
        .clone()
}

/// What one `lh` command did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts success and returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        &self.stdout
    }

    /// Asserts the exit code and returns stderr.
    #[track_caller]
    pub fn fails(&self, code: i32) -> &str {
        assert_eq!(
            self.code, code,
            "expected exit {code}\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        &self.stderr
    }

    /// stdout and stderr together, as a snapshot shows them.
    pub fn both(&self) -> String {
        format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Lh {
    /// A CLI pointed at `endpoint`, with its home folder and working directory.
    pub fn new(endpoint: String, home: PathBuf, cwd: PathBuf) -> Lh {
        Lh {
            endpoint,
            others: Vec::new(),
            turn: Default::default(),
            home,
            cwd,
            token: None,
        }
    }

    pub fn run(&self, args: &[&str]) -> Run {
        let out = self.command(args).output().expect("run lh");
        run_of(out)
    }

    /// `lh ARGS` with `input` on its standard input.
    pub fn run_with_input(&self, args: &[&str], input: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run lh");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        run_of(child.wait_with_output().expect("wait for lh"))
    }

    /// Runs `lh ARGS` in a pseudo-terminal (util-linux's `script`), as a user at a
    /// terminal would: whether it succeeded, and everything the terminal was sent.
    pub fn in_terminal(&self, args: &[&str]) -> (bool, String) {
        let c = self.command(args);
        let quoted: Vec<String> = std::iter::once(c.get_program().to_string_lossy().to_string())
            .chain(
                args.iter()
                    .map(|a| format!("'{}'", a.replace('\'', "'\\''"))),
            )
            .collect();
        let mut pty = Command::new("script");
        pty.args(["-qec", &quoted.join(" "), "/dev/null"]);
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => pty.env(k, v),
                None => pty.env_remove(k),
            };
        }
        if let Some(dir) = c.get_current_dir() {
            pty.current_dir(dir);
        }
        let out = pty
            .output()
            .expect("script (util-linux) runs a command in a pseudo-terminal");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(lh_bin());
        let endpoint = if self.others.is_empty() {
            &self.endpoint
        } else {
            let n = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match n % (self.others.len() + 1) {
                0 => &self.endpoint,
                i => &self.others[i - 1],
            }
        };
        c.args(args)
            .current_dir(&self.cwd)
            .env("LH_ENDPOINT", endpoint)
            .env("LH_HOME", &self.home)
            .env("LH_USER", "tester")
            .env_remove("LH_PROFILE")
            .env_remove("LH_TOKEN")
            .env("NO_COLOR", "1");
        // The token of the profile the server wrote (its endpoint goes stale when a
        // restarted server listens on a new port), or the one this CLI was given.
        let token = self.token.clone().or_else(|| profile_token(&self.home));
        if let Some(t) = token {
            c.env("LH_TOKEN", t);
        }
        c
    }

    /// The same CLI with another token.
    pub fn with_token(&self, token: &str) -> Lh {
        Lh {
            endpoint: self.endpoint.clone(),
            others: self.others.clone(),
            turn: self.turn.clone(),
            home: self.home.clone(),
            cwd: self.cwd.clone(),
            token: Some(token.to_string()),
        }
    }

    /// Writes a file in the CLI's working directory and returns its path.
    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.cwd.join(name);
        std::fs::write(&p, contents).expect("write file");
        p
    }

    /// The commit a ref points at, from `lh branch ls` / `lh tag ls` JSON.
    pub fn head(&self, name: &str) -> String {
        for kind in ["branch", "tag"] {
            let out = self.run(&[kind, "ls", "-o", "json"]);
            let v: serde_json::Value = serde_json::from_str(out.ok()).expect("json");
            if let Some(r) = v
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["name"] == name)
            {
                return r["head"].as_str().expect("head").to_string();
            }
        }
        panic!("no ref {name}");
    }

    /// The rows of a query as JSON objects.
    pub fn rows(&self, sql: &str, at: &str) -> Vec<serde_json::Value> {
        let out = self.run(&["query", sql, "--ref", at, "-o", "json"]);
        serde_json::from_str(out.ok().trim()).expect("json rows")
    }
}

fn run_of(out: Output) -> Run {
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Replaces what changes from run to run (hashes, ids, times, paths) with stable
/// placeholders, for snapshots.
pub fn redact(text: &str, temp: &Path) -> String {
    use regex::Regex;
    static RULES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        vec![
            (Regex::new(r"\b[0-9a-f]{64}\b").unwrap(), "[HASH]"),
            (
                Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
                    .unwrap(),
                "[UUID]",
            ),
            (Regex::new(r"\b[0-9a-f]{32}\b").unwrap(), "[ID]"),
            (Regex::new(r"\b[0-9a-f]{12}\b").unwrap(), "[SHORT]"),
            (
                Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
                    .unwrap(),
                "[TIME]",
            ),
            (
                Regex::new(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}\b").unwrap(),
                "[TIME]",
            ),
            (Regex::new(r"\b\d{15,19}\b").unwrap(), "[SNAPSHOT]"),
            (Regex::new(r"127\.0\.0\.1:\d+").unwrap(), "127.0.0.1:[PORT]"),
        ]
    });
    let mut s = text.replace(&temp.display().to_string(), "[TMP]");
    if let Ok(canon) = temp.canonicalize() {
        s = s.replace(&canon.display().to_string(), "[TMP]");
    }
    // The warehouse, local or S3 (whose settings `lh info` adds a line for): one
    // snapshot for both.
    static WAREHOUSE: OnceLock<Regex> = OnceLock::new();
    let warehouse = WAREHOUSE.get_or_init(|| {
        Regex::new(r"s3://[a-z0-9.-]+/w[0-9a-z]+|file://\[TMP\]/data/warehouse").unwrap()
    });
    s = warehouse.replace_all(&s, "[WAREHOUSE]").into_owned();
    // The catalog: the embedded default, or the database of two servers.
    static CATALOG: OnceLock<Regex> = OnceLock::new();
    let catalog = CATALOG.get_or_init(|| {
        Regex::new(r"sqlite:\[TMP\]/data/catalog\.db|postgres(ql)?://\S*lh_e2e_[0-9a-z_]+").unwrap()
    });
    s = catalog.replace_all(&s, "[CATALOG]").into_owned();
    s = s
        .lines()
        .filter(|l| !l.starts_with("s3 endpoint "))
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    if !text.ends_with('\n') {
        s.pop();
    }
    for (re, with) in rules {
        s = re.replace_all(&s, *with).into_owned();
    }
    // Columns padded to a redacted value's width differ from run to run: keep the
    // column breaks, not their widths.
    static PADDING: OnceLock<Regex> = OnceLock::new();
    let padding = PADDING.get_or_init(|| Regex::new(r"([^ \n]) {2,}").unwrap());
    padding.replace_all(&s, "$1  ").into_owned()
}

/// A PostgreSQL server of a test's own (initdb in a temporary folder, on a free loopback
/// port, run as the `postgres` user), which the test may restart or stop: the shared
/// test server must not be. Stopped when dropped. Needs `LH_TEST_POSTGRES_BIN`
/// (`scripts/services.sh postgres` prints it); missing, the test fails.
pub struct OwnPostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
}

impl OwnPostgres {
    pub fn start() -> OwnPostgres {
        let bin = PathBuf::from(std::env::var("LH_TEST_POSTGRES_BIN").unwrap_or_else(|_| {
            panic!(
                "LH_TEST_POSTGRES_BIN is not set: `scripts/services.sh postgres` prints it (make test does)"
            )
        }));
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(
            status.success(),
            "cannot give {} to postgres",
            dir.path().display()
        );
        let pg = OwnPostgres { dir, bin, port };
        pg.as_postgres(&[
            pg.bin.join("initdb").to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-D",
            pg.data().to_str().unwrap(),
        ]);
        pg.ctl(&["start", "-w"]);
        pg
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("pg")
    }

    fn as_postgres(&self, args: &[&str]) {
        let out = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .args(args)
            .output()
            .expect("runuser");
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `pg_ctl` with this server's folder, port and socket folder.
    pub fn ctl(&self, args: &[&str]) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {}",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("pg.log");
        let mut all = vec![
            self.bin.join("pg_ctl").display().to_string(),
            "-D".into(),
            self.data().display().to_string(),
            "-l".into(),
            log.display().to_string(),
            "-o".into(),
            options,
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        self.as_postgres(&refs);
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["stop", "-m", "immediate"])
            .output();
    }
}
