//! Shared helpers of the benchmark programs: timing samples and printing percentiles.

use std::time::{Duration, Instant};

/// Latency samples of one operation.
#[derive(Debug, Default)]
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn new() -> Self {
        Samples(Vec::new())
    }

    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    /// Times `f` once and records it.
    pub async fn time<T, F: std::future::Future<Output = T>>(&mut self, f: F) -> T {
        let start = Instant::now();
        let out = f.await;
        self.0.push(start.elapsed());
        out
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `p`-th percentile (0..=100), nearest rank.
    pub fn percentile(&self, p: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }
}

/// The number after `--name` on the command line, or `default`.
pub fn arg(name: &str, default: usize) -> anyhow::Result<usize> {
    use anyhow::Context;
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => Ok(args
            .get(i + 1)
            .with_context(|| format!("{name} needs a value"))?
            .parse()?),
        None => Ok(default),
    }
}

/// Milliseconds with two decimals.
/// The median of a few timings (the upper one of an even count).
pub fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// The `lh` binary next to the benchmark's own (`cargo build -p lh-cli` first), or
/// `LH_BIN`.
pub fn lh_bin() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    if let Some(p) = std::env::var_os("LH_BIN") {
        return Ok(p.into());
    }
    let bin = std::env::current_exe()?
        .parent()
        .context("exe dir")?
        .join("lh");
    anyhow::ensure!(
        bin.exists(),
        "{} not found: build it first (cargo build -p lh-cli)",
        bin.display()
    );
    Ok(bin)
}

/// lh's cache folder (`LH_CACHE_DIR`, default `~/.cache/lh`): generated data, environments.
pub fn cache_dir() -> std::path::PathBuf {
    std::env::var_os("LH_CACHE_DIR")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()))
                .join(".cache/lh")
        })
}

/// An `lh server` on a free loopback port, killed when dropped.
pub struct Server {
    child: std::process::Child,
    pub url: String,
    /// The server's data folder (catalog and warehouse).
    pub data: std::path::PathBuf,
    /// The CLI's home folder for this server.
    pub home: std::path::PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts `lh server` with its data under `dir` (a fresh temporary folder when `None`)
    /// and extra flags, and waits until it listens.
    pub fn start(
        lh: &std::path::Path,
        dir: Option<&std::path::Path>,
        extra: &[&str],
    ) -> anyhow::Result<Server> {
        Server::start_with_env(lh, dir, extra, &[])
    }

    /// Like [`Server::start`], with extra variables in the server's environment.
    pub fn start_with_env(
        lh: &std::path::Path,
        dir: Option<&std::path::Path>,
        extra: &[&str],
        envs: &[(String, String)],
    ) -> anyhow::Result<Server> {
        use anyhow::Context;
        use std::io::BufRead;
        let tmp = match dir {
            Some(_) => None,
            None => Some(tempfile::tempdir()?),
        };
        let dir = dir.map_or_else(
            || tmp.as_ref().expect("temp dir").path().to_path_buf(),
            Into::into,
        );
        let data = dir.join("data");
        let mut child = std::process::Command::new(lh)
            .args(["server", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(&data)
            .args(extra)
            // The first admin token goes into the benchmark CLI's profile.
            .env("LH_HOME", dir.join("home"))
            .env_remove("LH_PROFILE")
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .env("LH_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let stderr = child.stderr.take().context("stderr")?;
        let mut lines = std::io::BufReader::new(stderr).lines();
        let url = loop {
            let line = lines
                .next()
                .context("lh server exited before listening")??;
            if let Some(u) = line.split("listening on ").nth(1) {
                break u.trim().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Ok(Server {
            child,
            url,
            data,
            home: dir.join("home"),
            _tmp: tmp,
        })
    }

    /// The admin token the server made at its first start (in the CLI's profile).
    pub fn token(&self) -> anyhow::Result<String> {
        let path = self.home.join("config.yaml");
        let file = lh_api::config_file::ConfigFile::load(&path).map_err(anyhow::Error::msg)?;
        file.profiles
            .get("default")
            .and_then(|p| p.token.clone())
            .ok_or_else(|| anyhow::anyhow!("no admin token in {}", path.display()))
    }

    /// Kills the server with SIGKILL, as a crash would, and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the server with SIGTERM (a clean stop) and waits for it.
    pub fn terminate(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }

    /// The `lh` CLI pointed at this server.
    pub fn lh(&self, lh: &std::path::Path, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(lh);
        c.args(args)
            .env("LH_ENDPOINT", &self.url)
            .env("LH_HOME", &self.home)
            .stdin(std::process::Stdio::null());
        c
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// The TPC-H tables, smallest first.
pub const TABLES: [&str; 8] = [
    "region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem",
];

/// TPC-H Parquet files at `scale`, generated once into the cache.
pub fn tpch_data(scale: &str) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::{Context, bail};
    use std::process::Command;
    let cache = cache_dir();
    let dir = cache.join(format!("tpch-sf{scale}"));
    if dir.join("lineitem.parquet").exists() {
        return Ok(dir);
    }
    eprintln!("generating TPC-H scale {scale} into {}", dir.display());
    let tmp = cache.join(format!("tpch-sf{scale}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    let status = Command::new("tpchgen-cli")
        .args(["parquet", "-s", scale, "--output-dir"])
        .arg(&tmp)
        .status()
        .context("run tpchgen-cli (pip install tpchgen-cli)")?;
    if !status.success() {
        bail!("tpchgen-cli failed");
    }
    std::fs::rename(&tmp, &dir)?;
    Ok(dir)
}

/// Copies a project folder, leaving out what a tool made in it (`target`, `logs`, DuckDB
/// databases).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let p = e.path();
        let name = e.file_name();
        if name == "target" || name == "logs" || name.to_string_lossy().ends_with(".duckdb") {
            continue;
        }
        if e.file_type()?.is_dir() {
            copy_dir(&p, &to.join(&name))?;
        } else {
            std::fs::copy(&p, to.join(&name))?;
        }
    }
    Ok(())
}

/// The repository's root (the benchmarks' data generators and example projects).
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo")
        .to_path_buf()
}

/// Runs `lh args` against `s` and times it; its output, or an error with its stderr.
pub fn lh_run(
    lh: &std::path::Path,
    s: &Server,
    args: &[&str],
) -> anyhow::Result<(std::time::Duration, String)> {
    let start = std::time::Instant::now();
    let out = s.lh(lh, args).output()?;
    let took = start.elapsed();
    if !out.status.success() {
        anyhow::bail!(
            "lh {} failed:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((took, String::from_utf8_lossy(&out.stdout).into_owned()))
}
