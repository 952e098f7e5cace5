//! Python environments, built by uv into a content-addressed cache: the key is a hash of
//! the Python version, the package set and the harness, so a second run with the same
//! packages builds nothing, and a built environment never changes. uv's own cache lives
//! next to the environments (hardlinks need one filesystem), so even a new package set
//! mostly links files it already has.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::error::RunnerError;
use crate::protocol::HARNESS;
use crate::sandbox::{Code, HostUser, Jail, SANDBOX_ID, proc_and_dev};
use crate::tools::find_on_path;

mod limits;
pub use limits::sweep_build_groups;
use limits::{BUILD_FILE, BUILD_MEMORY, BUILD_TMP, BuildLimits, output_within, run, tail};
pub(crate) use limits::{BuildGroups, disk_used_still};

/// The pyarrow every environment gets unless the project pins another (the harness
/// needs it).
pub const DEFAULT_PYARROW: &str = "22.0.0";

/// What an environment holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvSpec {
    /// `3.11`, `3.12`...
    pub python: String,
    /// Package name to version (`2.2.3`, or a specifier such as `>=2,<3`).
    pub packages: BTreeMap<String, String>,
    /// Build packages that have no wheel from their source distribution (a project opts
    /// in; the build still runs in the sandbox). Wheels only otherwise.
    #[serde(default)]
    pub source_builds: bool,
}

impl EnvSpec {
    /// The Python asked for is a version (`3.11`, `3.12.4`), nothing uv would read as a
    /// path or an option, and nothing that would make two specs one key.
    pub fn check_python(&self) -> Result<(), RunnerError> {
        let parts: Vec<&str> = self.python.split('.').collect();
        let ok = (2..=3).contains(&parts.len())
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()));
        if ok {
            Ok(())
        } else {
            Err(RunnerError::Environment(format!(
                "python '{}' is not a Python version (such as 3.11 or 3.12.4)",
                self.python.escape_debug()
            )))
        }
    }

    /// The requirement lines, sorted, pyarrow included.
    pub fn requirements(&self) -> Result<Vec<String>, RunnerError> {
        let mut pkgs = self.packages.clone();
        if !pkgs.keys().any(|k| normalize(k) == "pyarrow") {
            pkgs.insert("pyarrow".into(), DEFAULT_PYARROW.into());
        }
        let mut out = Vec::new();
        for (name, version) in pkgs {
            let ok_name = !name.is_empty()
                && name.chars().all(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '[' | ']' | ',')
                });
            let ok_version = !version.is_empty()
                && version.chars().all(|c| {
                    c.is_ascii_alphanumeric()
                        || matches!(c, '.' | '*' | '+' | '!' | '<' | '>' | '=' | '~' | ',' | '-')
                });
            if !ok_name || !ok_version {
                return Err(RunnerError::Environment(format!(
                    "bad package requirement '{name}': '{version}'"
                )));
            }
            let op = version.starts_with(['<', '>', '=', '~', '!']);
            out.push(if op {
                format!("{name}{version}")
            } else {
                format!("{name}=={version}")
            });
        }
        out.sort();
        Ok(out)
    }

    /// The cache key.
    pub fn key(&self) -> Result<String, RunnerError> {
        self.check_python()?;
        let mut h = blake3::Hasher::new();
        h.update(b"lh-env-v1\n");
        h.update(format!("python={}\n", self.python).as_bytes());
        if self.source_builds {
            h.update(b"source-builds\n");
        }
        for r in self.requirements()? {
            h.update(r.as_bytes());
            h.update(b"\n");
        }
        for (path, text) in HARNESS {
            h.update(path.as_bytes());
            h.update(text.as_bytes());
        }
        Ok(h.finalize().to_hex()[..32].to_string())
    }
}

fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

/// A built environment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Env {
    pub key: String,
    pub dir: PathBuf,
    /// The environment's interpreter.
    pub python: PathBuf,
    /// The base interpreter's installation, which the sandbox must also show.
    pub base_prefix: PathBuf,
    pub python_version: String,
    /// `uv pip freeze`: exactly what is installed (the environment's lock).
    pub lock: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct EnvInfo {
    base_prefix: PathBuf,
    python_version: String,
}

/// Builds and finds environments.
pub struct EnvCache {
    root: PathBuf,
    uv: Option<PathBuf>,
    /// Build in a bubblewrap sandbox (refuse to build without it).
    sandbox: bool,
    /// The host user build steps run as (none: the server's).
    user: Option<HostUser>,
    bounds: BuildBounds,
    building: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    provisioning: tokio::sync::Mutex<()>,
}

/// What one environment's build may take, all its steps' processes together: memory
/// (a memory cgroup of the build's own, where the server may make one) and disk (its
/// folders, measured while each step runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildBounds {
    pub memory_bytes: u64,
    pub disk_bytes: u64,
}

impl Default for BuildBounds {
    fn default() -> BuildBounds {
        BuildBounds {
            memory_bytes: 8 << 30,
            disk_bytes: 32 << 30,
        }
    }
}

/// Fetches a source distribution, running no package's code (see the file).
const FETCH_SDIST: &str = include_str!("fetch_sdist.py");

/// The variables a build sees of the server's environment: where the package index is
/// and how to reach it, nothing else (no catalog URL, no cloud credentials).
const INDEX_VARS: &[&str] = &[
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_INDEX_STRATEGY",
    "UV_NATIVE_TLS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
    "no_proxy",
];

/// Whether a build step may reach the network: only the steps in which no code of a
/// package runs (uv creating the virtualenv, uv resolving and installing wheels, lh
/// fetching a source distribution) do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Net {
    Index,
    None,
}

/// How one build step runs: with the network or not, with which uv cache (writable;
/// none: uv caches nothing and stays offline), and which other folders it may write.
struct Step<'a> {
    net: Net,
    cache: Option<&'a Path>,
    writes: &'a [&'a Path],
    reads: &'a [&'a Path],
    /// Whether the environment being built is writable (it is not while a package's
    /// build runs: what it wrote there would run in the next step that starts the
    /// environment's interpreter, which may have the network).
    env_writable: bool,
}

impl<'a> Step<'a> {
    /// With the network and the index's settings, uv caching into `cache`.
    fn online(cache: &'a Path) -> Step<'a> {
        Step {
            net: Net::Index,
            cache: Some(cache),
            writes: &[],
            reads: &[],
            env_writable: true,
        }
    }

    /// No network, no cache.
    fn offline() -> Step<'static> {
        Step {
            net: Net::None,
            cache: None,
            writes: &[],
            reads: &[],
            env_writable: true,
        }
    }

    /// The environment being built read-only (a step that only reads it).
    fn env_read_only(self) -> Step<'a> {
        Step {
            env_writable: false,
            ..self
        }
    }

    fn writing(self, writes: &'a [&'a Path]) -> Step<'a> {
        Step { writes, ..self }
    }

    fn reading(self, reads: &'a [&'a Path]) -> Step<'a> {
        Step { reads, ..self }
    }
}

/// Where build steps run: in bubblewrap when there is one, `build` (the environment
/// being built) writable.
struct Sandbox<'a> {
    jail: Option<&'a Jail>,
    uv: &'a Path,
    build: &'a Path,
    limits: &'a BuildLimits,
}

/// The requirement a source distribution's build may ask for: a name first (no option
/// for uv's command line), and no URL, path or direct reference anywhere (no `@`, `:`,
/// `/` or `\\`).
fn build_requirement_ok(r: &str) -> bool {
    r.starts_with(|c: char| c.is_ascii_alphanumeric())
        && !r.contains(['@', ':', '/', '\\'])
        && r.len() < 512
}

/// The packages uv found no usable wheel for, in what uv said (`NAME==VERSION has no
/// usable wheels`, `Wheels are required for `NAME``), with the version when uv named
/// one: normalized name to version.
fn without_wheels(err: &str) -> BTreeMap<String, Option<String>> {
    let mut found = BTreeMap::new();
    let mut rest = err;
    while let Some(at) = rest.find("Wheels are required for `") {
        rest = &rest[at + "Wheels are required for `".len()..];
        if let Some(end) = rest.find('`') {
            found.insert(normalize(&rest[..end]), None);
        }
    }
    for (at, _) in err.match_indices(" has no usable wheels") {
        let before = err[..at].split_whitespace().last().unwrap_or_default();
        if let Some((name, version)) = before.split_once("==") {
            found.insert(normalize(name), Some(version.to_string()));
        }
    }
    found
}

impl EnvCache {
    /// Environments under `root` (`root/<key>`), uv's cache in `root/.uv-cache`. `uv` is
    /// the uv binary (looked up on PATH at each build when `None`, and provisioned into
    /// `root/.tools` when PATH has none: see `tools.rs`). With `sandbox`, every
    /// build runs in bubblewrap (see [`EnvCache::build`]).
    pub fn new(root: PathBuf, uv: Option<PathBuf>, sandbox: bool) -> EnvCache {
        EnvCache {
            root,
            uv,
            sandbox,
            user: HostUser::for_sandboxes(HostUser::DEFAULT_ID),
            bounds: BuildBounds::default(),
            building: Arc::default(),
            provisioning: tokio::sync::Mutex::new(()),
        }
    }

    /// The same cache, its build steps run as host user `user` (none: the server's).
    pub fn with_user(mut self, user: Option<HostUser>) -> EnvCache {
        self.user = user;
        self
    }

    /// The same cache, its builds held to `bounds`.
    pub fn with_bounds(mut self, bounds: BuildBounds) -> EnvCache {
        self.bounds = bounds;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The environment for `spec`, built if it does not exist yet. The flag says whether
    /// it was built now.
    pub async fn get(&self, spec: &EnvSpec) -> Result<(Env, bool), RunnerError> {
        let key = spec.key()?;
        let dir = self.root.join(&key);
        self.mark_used(&key);
        if let Some(env) = load(&key, &dir)? {
            return Ok((env, false));
        }
        // One build per key at a time; the others wait and then find it built.
        let lock = {
            let mut b = self
                .building
                .lock()
                .map_err(|_| RunnerError::Environment("env lock poisoned".into()))?;
            b.entry(key.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        if let Some(env) = load(&key, &dir)? {
            return Ok((env, false));
        }
        let built = self.build(spec, &key, &dir).await;
        // The key is no longer being built (eviction spares keys in this map).
        if let Ok(mut b) = self.building.lock() {
            b.remove(&key);
        }
        built?;
        let env = load(&key, &dir)?
            .ok_or_else(|| RunnerError::Environment("the built environment vanished".into()))?;
        Ok((env, true))
    }

    /// Records that environment `key` is used now (`.used/<key>`'s modification time; the
    /// environment itself is read-only).
    fn mark_used(&self, key: &str) {
        let used = self.root.join(".used");
        let _ = std::fs::create_dir_all(&used);
        let _ = std::fs::write(used.join(key), b"");
    }

    /// Brings the cache within `max_bytes`, uv's cache counted: when over, uv's cache
    /// goes first, whole, if no build is running (a build holds it); then the
    /// environments used least recently, never one used within `keep_recent` (warm
    /// workers may run on it) and never one being built. Returns how many environments
    /// went and how many bytes went with them and uv's cache.
    pub async fn evict(&self, max_bytes: u64, keep_recent: std::time::Duration) -> (usize, u64) {
        let root = self.root.clone();
        let building = self.building.clone();
        tokio::task::spawn_blocking(move || {
            let envs = list_envs(&root);
            let uv_cache = root.join(".uv-cache");
            let mut uv_bytes = size_of(&uv_cache);
            let mut freed = 0;
            if uv_bytes > 0 && envs.iter().map(|e| e.2).sum::<u64>() + uv_bytes > max_bytes {
                let trash = root.join(format!(".trash-uv-cache-{}", uuid::Uuid::new_v4().simple()));
                // Under the lock builds take their key in: none starts meanwhile.
                let moved = building
                    .lock()
                    .is_ok_and(|b| b.is_empty() && std::fs::rename(&uv_cache, &trash).is_ok());
                if moved {
                    remove_env(&trash);
                    freed = uv_bytes;
                    uv_bytes = 0;
                }
            }
            let names: Vec<String> = building
                .lock()
                .map(|b| b.keys().cloned().collect())
                .unwrap_or_default();
            let budget = max_bytes.saturating_sub(uv_bytes);
            let (removed, bytes) = evict(&root, envs, budget, keep_recent, &names);
            (removed, bytes + freed)
        })
        .await
        .unwrap_or((0, 0))
    }

    /// Builds the environment of `spec` into `dir`, from wheels only (or, with
    /// `source_builds`, wheels built offline: [`Sandbox::install_building`]), so that
    /// nothing of a package runs while the build can reach the network; then inspects it and writes
    /// its lock with the network gone. With the sandbox, every step runs in bubblewrap:
    /// no capability, the system read-only, only the build folder (and, for the steps
    /// with the network, uv's cache) writable, none of the server's variables but the
    /// package index's. The finished environment is read-only. A hostile package (a
    /// `.pth` file runs at every interpreter start) thus runs only inside the sandbox, on
    /// no network, and can change nothing but its own environment.
    async fn build(&self, spec: &EnvSpec, key: &str, dir: &Path) -> Result<(), RunnerError> {
        // Looked up when needed, not once at start: uv installed while the server runs
        // is found by the next build.
        let uv = match self.uv.clone().or_else(|| find_on_path("uv")) {
            Some(uv) => uv,
            None => {
                // One provisioning at a time; the others find it done.
                let _one = self.provisioning.lock().await;
                crate::tools::provision_uv(&self.root.join(".tools")).await?
            }
        };
        std::fs::create_dir_all(&self.root)?;
        let jail = match self.sandbox {
            true => Some(Jail::new(&self.root, self.user)?),
            false => None,
        };
        let give = |path: &Path| jail.as_ref().map_or(Ok(()), |j| j.give(path));
        let cache = self.root.join(".uv-cache");
        std::fs::create_dir_all(&cache)?;
        if let Some(jail) = &jail {
            // uv's cache is the sandbox user's (one made by an older server, or by the
            // server's own uid, is handed over whole).
            use std::os::unix::fs::MetadataExt;
            let owner = std::fs::symlink_metadata(&cache)?.uid();
            if jail.user().is_some_and(|u| u.uid != owner) {
                jail.give_all(&cache)?;
            }
        }
        let tmp = self
            .root
            .join(format!(".build-{key}-{}", uuid::Uuid::new_v4().simple()));
        private_dir(&tmp)?;
        give(&tmp)?;
        let limits = BuildLimits::new(self.bounds)?;
        limits.watch(&tmp);
        let sandbox = Sandbox {
            jail: jail.as_ref(),
            uv: &uv,
            build: &tmp,
            limits: &limits,
        };
        let result = async {
            let tmp_s = tmp.display().to_string();
            run(&mut sandbox.command(&uv, &["venv", "--quiet", "--no-project", "--allow-existing", "--python", &spec.python, &tmp_s], Step::online(&cache)), "create the virtualenv", sandbox.limits).await?;
            let py = tmp.join("bin/python");
            let py_s = py.display().to_string();
            // Inspected before any package is installed: what a package's `.pth` could
            // say about the interpreter later is never asked.
            let info = run(
                &mut sandbox.command(&py, &[
                    "-I",
                    "-c",
                    "import json, sys, sysconfig; print(json.dumps({'base_prefix': sys.base_prefix, 'base_executable': getattr(sys, '_base_executable', ''), 'python_version': '%d.%d.%d' % sys.version_info[:3], 'purelib': sysconfig.get_paths()['purelib']}))",
                ], Step::offline().env_read_only()),
                "inspect the interpreter",
sandbox.limits,
            )
            .await?;
            let v: serde_json::Value = serde_json::from_str(info.trim().lines().last().unwrap_or_default())
                .map_err(|e| RunnerError::Environment(format!("cannot read the interpreter's answer: {e}")))?;
            let purelib = PathBuf::from(v["purelib"].as_str().unwrap_or_default());
            let inside = purelib.starts_with(&tmp)
                && purelib.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::RootDir));
            if !inside {
                return Err(RunnerError::Environment(format!(
                    "the interpreter placed its packages outside the environment ({})",
                    purelib.display()
                )));
            }
            if spec.source_builds {
                let work = self.root.join(format!(".build-src-{}", uuid::Uuid::new_v4().simple()));
                private_dir(&work)?;
                limits.watch(&work);
                // The base interpreter (outside the environment, which no step with the
                // network may start once packages are in it).
                let base = PathBuf::from(v["base_executable"].as_str().unwrap_or_default());
                if !base.is_absolute() || base.starts_with(&tmp) || !base.is_file() {
                    return Err(RunnerError::Environment(format!(
                        "the interpreter names no base interpreter lh can build with ({})",
                        base.display()
                    )));
                }
                let built = sandbox.install_building(spec, &py, &base, &work).await;
                remove_env(&work);
                built?;
            } else {
                let reqs = spec.requirements()?;
                let mut args = vec!["pip", "install", "--quiet", "--python", &py_s, "--only-binary", ":all:"];
                args.extend(reqs.iter().map(String::as_str));
                run(
                    &mut sandbox.command(&uv, &args, Step::online(&cache)),
                    "install the packages",
                    sandbox.limits,
                )
                .await
                .map_err(|e| match e {
                    // Said only where a package lacks a wheel, not for a version that
                    // does not exist.
                    RunnerError::Environment(m) if m.contains("no usable wheels") => {
                        RunnerError::Environment(format!(
                            "{m}\n(lh installs wheels only: a package without a wheel needs \
                             `source_builds: true` in lh_project.yml)"
                        ))
                    }
                    e => e,
                })?;
            }
            let lock = run(&mut sandbox.command(&uv, &["pip", "freeze", "--python", &py_s], Step::offline().env_read_only()), "list the packages", sandbox.limits).await?;
            // From here on the folder holds what packages' code may have touched: the
            // harness and lh's files are written only through real folders of the
            // environment, replacing whatever sits at their paths, never following a link.
            place_harness(&tmp, &purelib)?;
            write_new(&tmp.join("lh-lock.txt"), lock.as_bytes())?;
            let info = EnvInfo {
                base_prefix: PathBuf::from(v["base_prefix"].as_str().unwrap_or_default()),
                python_version: v["python_version"].as_str().unwrap_or_default().to_string(),
            };
            write_new(&tmp.join("lh-env.json"), &serde_json::to_vec(&info).unwrap_or_default())?;
            read_only(&tmp, HostUser::server())?;
            // The folder itself, once whole: the server's, readable by the runtimes' users.
            std::os::unix::fs::lchown(&tmp, Some(HostUser::server().uid), Some(HostUser::server().gid))?;
            std::fs::set_permissions(
                &tmp,
                <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o555),
            )?;
            // Environments are moved into place whole: a reader sees none or all of it.
            // Another process may have built the same one meanwhile: then keep theirs.
            if let Err(e) = std::fs::rename(&tmp, dir) {
                if load(key, dir)?.is_none() {
                    return Err(e.into());
                }
                remove_env(&tmp);
            }
            Ok::<(), RunnerError>(())
        }
        .await;
        if result.is_err() {
            remove_env(&tmp);
        }
        result
    }
}

impl Sandbox<'_> {
    /// Hands `path` (a folder steps write) to the sandbox's user.
    fn give(&self, path: &Path) -> std::io::Result<()> {
        self.jail.map_or(Ok(()), |j| j.give(path))
    }

    /// One build step: `program args`, in the sandbox when there is one.
    fn command(&self, program: &Path, args: &[&str], step: Step<'_>) -> Command {
        let mut vars: Vec<(String, String)> = vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOME".into(), "/tmp".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("UV_PYTHON_DOWNLOADS".into(), "never".into()),
            ("UV_NO_PROGRESS".into(), "1".into()),
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
            // An environment's files are its own, not links into uv's cache: the cache
            // is the sandbox user's and cleared whole; the environment becomes the
            // server's, read-only.
            ("UV_LINK_MODE".into(), "copy".into()),
        ];
        match step.cache {
            Some(cache) => vars.push(("UV_CACHE_DIR".into(), cache.display().to_string())),
            None => vars.push(("UV_NO_CACHE".into(), "1".into())),
        }
        // The index's settings (credentials in its URL, say) only where uv reaches it.
        match step.net {
            Net::Index => {
                for name in INDEX_VARS {
                    if let Ok(v) = std::env::var(name) {
                        vars.push((name.to_string(), v));
                    }
                }
            }
            Net::None => vars.push(("UV_OFFLINE".into(), "1".into())),
        }
        let limits = [
            format!("--as={BUILD_MEMORY}"),
            format!("--fsize={BUILD_FILE}"),
            format!("--nofile={}", crate::runtime::MAX_OPEN_FILES),
            "--core=0".to_string(),
            "--".to_string(),
        ];
        let mut cmd = match self.jail {
            None => {
                let mut c = Command::new(&self.limits.prlimit);
                c.args(&limits).arg(program).args(args).env_clear();
                c
            }
            Some(jail) => {
                // uv reaching the index runs no package's code; every other step may.
                let mut c = jail.args(match step.net {
                    Net::Index => Code::Tools,
                    Net::None => Code::Untrusted,
                });
                c.args([
                    "--die-with-parent",
                    "--new-session",
                    "--unshare-all",
                    // No user namespace inside: in one, a step would hold capabilities
                    // over what its host user owns.
                    "--unshare-user",
                    "--disable-userns",
                    "--cap-drop",
                    "ALL",
                    // A package's code runs here, as an unprivileged user. PID 1 is
                    // bubblewrap's own init (none of the server's variables: its
                    // environment is cleared), which no code of the step can reach
                    // (no ptrace), and which dies with the step's bubblewrap: the
                    // whole PID namespace with it, whatever the step's processes did
                    // to their own parent-death signals.
                    "--uid",
                    SANDBOX_ID,
                    "--gid",
                    SANDBOX_ID,
                ]);
                if step.net == Net::Index {
                    c.arg("--share-net");
                }
                c.args(["--size", &BUILD_TMP.to_string(), "--tmpfs", "/tmp"]);
                c.args(proc_and_dev());
                for sys in ["/usr", "/bin", "/lib", "/lib64", "/sbin"] {
                    c.args(["--ro-bind-try", sys, sys]);
                }
                for etc in [
                    "/etc/ld.so.cache",
                    "/etc/localtime",
                    // Certificates, not /etc/ssl/private.
                    "/etc/ssl/certs",
                    "/etc/ssl/openssl.cnf",
                    "/etc/ca-certificates",
                    "/etc/pki",
                    "/etc/resolv.conf",
                    "/etc/hosts",
                    "/etc/nsswitch.conf",
                    "/etc/host.conf",
                ] {
                    c.args(["--ro-bind-try", etc, etc]);
                }
                c.bind(self.uv, false);
                // Local package folders the index settings name (find-links).
                if step.net == Net::Index {
                    for name in ["UV_FIND_LINKS", "SSL_CERT_FILE", "SSL_CERT_DIR"] {
                        if let Ok(v) = std::env::var(name) {
                            for part in v.split([',', ' ']) {
                                let path = Path::new(part.trim_start_matches("file://"));
                                if path.is_absolute() && path.exists() {
                                    c.bind(path, false);
                                }
                            }
                        }
                    }
                }
                c.bind(self.build, step.env_writable);
                for dir in step.cache.iter().chain(step.writes) {
                    c.bind(dir, true);
                }
                for dir in step.reads {
                    c.bind(dir, false);
                }
                c.args(["--chdir", "/tmp", "--clearenv"]);
                for (k, v) in &vars {
                    c.args(["--setenv", k, v]);
                }
                c.arg("--").arg(&self.limits.prlimit).args(&limits);
                c.arg(program).args(args);
                vars.clear();
                jail.command(c)
            }
        };
        if let Some(groups) = &self.limits.groups {
            cmd = groups.join(&cmd);
        }
        for (k, v) in vars {
            cmd.env(k, v);
        }
        cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
        cmd
    }

    /// Installs `spec`'s packages into the environment of interpreter `py`, building
    /// those without a wheel from their source distributions, in `work` (removed by the
    /// caller). No package's code ever runs where the network or the index's settings
    /// are, and the environment is not touched (nor its interpreter started) until every
    /// wheel is built: round by round, uv resolves with wheels only (online, on the base
    /// interpreter `base`, a cache of this build's own, the wheels built so far as
    /// find-links); for each package it finds without a wheel, lh fetches the source
    /// distribution (online, its own stdlib-only script, `python -I -S`), uv installs its
    /// build requirements as wheels into a scratch environment (online), and uv builds
    /// the wheel in that environment with no network, no index setting, and nothing
    /// writable but the scratch folder. Then the packages are installed, once. A package
    /// built from source needs an exact version (its own pin or the one uv names).
    async fn install_building(
        &self,
        spec: &EnvSpec,
        py: &Path,
        base: &Path,
        work: &Path,
    ) -> Result<(), RunnerError> {
        const MAX_BUILDS: usize = 32;
        let (cache, sdists, wheels) =
            (work.join("cache"), work.join("sdists"), work.join("wheels"));
        for dir in [&cache, &sdists, &wheels] {
            std::fs::create_dir_all(dir)?;
        }
        // Steps write the cache and the source distributions; the wheels are lh's.
        self.give(&cache)?;
        self.give(&sdists)?;
        let (py_s, base_s) = (py.display().to_string(), base.display().to_string());
        let reqs = spec.requirements()?;
        let req_file = work.join("requirements.in");
        std::fs::write(&req_file, reqs.join("\n") + "\n")?;
        let req_s = req_file.display().to_string();
        let pins: BTreeMap<String, String> = spec
            .packages
            .iter()
            .filter_map(|(name, v)| {
                let v = v.strip_prefix("==").unwrap_or(v);
                let exact = !v.starts_with(['<', '>', '=', '~', '!']) && !v.contains([',', '*']);
                exact.then(|| (normalize(name), v.to_string()))
            })
            .collect();
        // The wheels built, then the server's find-links (a flag replaces the variable's
        // list).
        let mut find_links = vec!["--find-links".to_string(), wheels.display().to_string()];
        for link in std::env::var("UV_FIND_LINKS")
            .unwrap_or_default()
            .split([',', ' '])
            .filter(|l| !l.is_empty())
        {
            find_links.extend(["--find-links".to_string(), link.to_string()]);
        }
        let mut built: BTreeMap<String, String> = BTreeMap::new();
        loop {
            let mut args = vec![
                "pip",
                "compile",
                "--quiet",
                "--python",
                &base_s,
                "--only-binary",
                ":all:",
            ];
            args.extend(find_links.iter().map(String::as_str));
            args.push(&req_s);
            let reads = [wheels.as_path(), req_file.as_path()];
            let out = output_within(
                &mut self.command(self.uv, &args, Step::online(&cache).reading(&reads)),
                "resolve the packages",
                self.limits,
            )
            .await?;
            if out.status.success() {
                break;
            }
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            let missing = if err.contains("No solution found when resolving dependencies") {
                without_wheels(&err)
            } else {
                BTreeMap::new()
            };
            if missing.is_empty() {
                return Err(RunnerError::Environment(format!(
                    "cannot resolve the packages (source builds allowed): {}",
                    tail(&err)
                )));
            }
            for (name, named) in missing {
                let Some(version) = named.or_else(|| pins.get(&name).cloned()) else {
                    return Err(RunnerError::Environment(format!(
                        "{name} has no wheel, and a package built from source needs an exact version: pin it in the packages (`{name}: \"1.2.3\"`)"
                    )));
                };
                if built.len() >= MAX_BUILDS {
                    return Err(RunnerError::Environment(format!(
                        "cannot install the packages: more than {MAX_BUILDS} of them need building from source"
                    )));
                }
                if built.contains_key(&name) {
                    return Err(RunnerError::Environment(format!(
                        "cannot install the packages: {name} {version} was built from source, and uv still finds no usable wheel of it: {}",
                        tail(&err)
                    )));
                }
                self.build_one(&name, &version, base, work).await?;
                built.insert(name, version);
            }
        }
        let mut args = vec![
            "pip",
            "install",
            "--quiet",
            "--python",
            &py_s,
            "--only-binary",
            ":all:",
        ];
        args.extend(find_links.iter().map(String::as_str));
        args.extend(reqs.iter().map(String::as_str));
        run(
            &mut self.command(self.uv, &args, Step::online(&cache).reading(&[&wheels])),
            "install the packages (with the wheels built from source)",
            self.limits,
        )
        .await
        .map(|_| ())
    }

    /// Builds the wheel of `name` `version` into `work/wheels` (see
    /// [`Sandbox::install_building`]), with the base interpreter `base`.
    async fn build_one(
        &self,
        name: &str,
        version: &str,
        base: &Path,
        work: &Path,
    ) -> Result<(), RunnerError> {
        let ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+' | '!'))
        };
        if !ok(name) || !ok(version) || name.starts_with('-') || version.starts_with('-') {
            return Err(RunnerError::Environment(format!(
                "cannot build '{name}' '{version}' from source: not a package name and version"
            )));
        }
        let (cache, sdists, wheels) =
            (work.join("cache"), work.join("sdists"), work.join("wheels"));
        let what = format!("build {name} {version} from source");
        let base_s = base.display().to_string();
        let fetched = run(
            &mut self.command(
                base,
                &[
                    "-I",
                    "-S",
                    "-c",
                    FETCH_SDIST,
                    name,
                    version,
                    &sdists.display().to_string(),
                ],
                Step::online(&cache).writing(&[&sdists]),
            ),
            &format!("fetch {name} {version}'s source distribution"),
            self.limits,
        )
        .await?;
        let fetched: serde_json::Value =
            serde_json::from_str(fetched.trim().lines().last().unwrap_or_default()).map_err(
                |e| RunnerError::Environment(format!("cannot {what}: the fetch said no file: {e}")),
            )?;
        // Copied next to the build (the only folder it writes), so that nothing the
        // build leaves behind lies where a later fetch writes.
        let sdist = PathBuf::from(fetched["sdist"].as_str().unwrap_or_default());
        let file = sdist
            .file_name()
            .filter(|_| sdist.parent() == Some(sdists.as_path()));
        let Some(file) = file.map(|f| f.to_os_string()) else {
            return Err(RunnerError::Environment(format!(
                "cannot {what}: the fetch named no file of its folder"
            )));
        };
        let requires: Vec<String> = fetched["requires"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(bad) = requires.iter().find(|r| !build_requirement_ok(r)) {
            return Err(RunnerError::Environment(format!(
                "cannot {what}: its build requirement '{bad}' is not a package requirement"
            )));
        }
        let step_dir = work.join(format!("build-{}", uuid::Uuid::new_v4().simple()));
        let built = async {
            let (scratch, build_cache, out) = (
                step_dir.join("venv"),
                step_dir.join("cache"),
                step_dir.join("out"),
            );
            std::fs::create_dir_all(&build_cache)?;
            self.give(&step_dir)?;
            self.give(&build_cache)?;
            let copy = step_dir.join(&file);
            std::fs::copy(&sdist, &copy)?;
            std::fs::remove_file(&sdist)?;
            let (scratch_s, copy_s, out_s) = (
                scratch.display().to_string(),
                copy.display().to_string(),
                out.display().to_string(),
            );
            let writes = [step_dir.as_path()];
            // The build's environment: the base interpreter and the build requirements,
            // installed as wheels (online, into a cache of its own).
            run(
                &mut self.command(
                    self.uv,
                    &[
                        "venv",
                        "--quiet",
                        "--no-project",
                        "--python",
                        &base_s,
                        &scratch_s,
                    ],
                    Step::online(&build_cache).writing(&writes),
                ),
                &format!("{what}: create its build environment"),
                self.limits,
            )
            .await?;
            let scratch_py = scratch.join("bin/python").display().to_string();
            if !requires.is_empty() {
                let mut args = vec![
                    "pip",
                    "install",
                    "--quiet",
                    "--only-binary",
                    ":all:",
                    "--python",
                    &scratch_py,
                ];
                args.extend(requires.iter().map(String::as_str));
                run(
                    &mut self.command(self.uv, &args, Step::online(&build_cache).writing(&writes)),
                    &format!(
                        "{what}: install its build requirements ({}) as wheels",
                        requires.join(", ")
                    ),
                    self.limits,
                )
                .await?;
            }
            // The package's code runs here: no network, no index setting, no cache, the
            // environment being built read-only.
            run(
                &mut self.command(
                    self.uv,
                    &[
                        "build",
                        "--wheel",
                        "--offline",
                        "--no-build-isolation",
                        "--no-config",
                        "--python",
                        &scratch_py,
                        "--out-dir",
                        &out_s,
                        &copy_s,
                    ],
                    Step {
                        net: Net::None,
                        cache: None,
                        writes: &writes,
                        reads: &[],
                        env_writable: false,
                    },
                ),
                &format!("{what} (offline, in the sandbox)"),
                self.limits,
            )
            .await?;
            // A real folder of the build's (a link the build left there would hand lh
            // files elsewhere on the host), and in it only the wheel of the package asked
            // for: a build may leave others.
            if !real_folders(&step_dir, &out) {
                return Err(RunnerError::Environment(format!(
                    "cannot {what}: the build replaced its output folder"
                )));
            }
            let prefix = format!("{}-", name.to_ascii_lowercase().replace(['-', '.'], "_"));
            let mut taken = 0;
            for entry in std::fs::read_dir(&out)?.flatten() {
                let file_name = entry.file_name().to_string_lossy().to_ascii_lowercase();
                let ours = file_name.ends_with(".whl")
                    && file_name.strip_prefix(&prefix).is_some_and(|rest| {
                        rest.split('-').next() == Some(version.to_ascii_lowercase().as_str())
                    })
                    && entry.file_type().is_ok_and(|t| t.is_file());
                if ours {
                    std::fs::rename(entry.path(), wheels.join(entry.file_name()))?;
                    taken += 1;
                }
            }
            if taken == 0 {
                return Err(RunnerError::Environment(format!(
                    "cannot {what}: the build made no wheel of {name} {version}"
                )));
            }
            Ok::<(), RunnerError>(())
        }
        .await;
        remove_env(&step_dir);
        built
    }
}

/// The environments under `root`: when each was last used, its key, its bytes. What
/// failed or interrupted builds and evictions left goes once a day old.
fn list_envs(root: &Path) -> Vec<(std::time::SystemTime, String, u64)> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let day = std::time::Duration::from_secs(24 * 3600);
    let mut envs = Vec::new();
    for e in entries.flatten() {
        let key = e.file_name().to_string_lossy().into_owned();
        // What failed or interrupted builds and evictions left, once a day old.
        if [".build-", ".trash-"].iter().any(|p| key.starts_with(p)) {
            let stale = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > day);
            if stale {
                remove_env(&e.path());
            }
            continue;
        }
        if key.len() != 32 || !key.chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let used = std::fs::metadata(root.join(".used").join(&key))
            .or_else(|_| e.metadata())
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        envs.push((used, key, size_of(&e.path())));
    }
    envs
}

/// Evicts `envs` (of `root`) used least recently until they hold at most `max_bytes`,
/// but none used within `keep_recent` and none of `building`.
fn evict(
    root: &Path,
    mut envs: Vec<(std::time::SystemTime, String, u64)>,
    max_bytes: u64,
    keep_recent: std::time::Duration,
    building: &[String],
) -> (usize, u64) {
    let mut total: u64 = envs.iter().map(|e| e.2).sum();
    envs.sort();
    let (mut removed, mut freed) = (0, 0);
    for (used, key, bytes) in envs {
        if total <= max_bytes {
            break;
        }
        let recent = used.elapsed().map_or(true, |age| age < keep_recent);
        if recent || building.contains(&key) {
            continue;
        }
        // Out of the way at once (a reader sees all of it or none), then removed.
        let trash = root.join(format!(".trash-{key}"));
        if std::fs::rename(root.join(&key), &trash).is_err() {
            continue;
        }
        remove_env(&trash);
        let _ = std::fs::remove_file(root.join(".used").join(&key));
        total = total.saturating_sub(bytes);
        removed += 1;
        freed += bytes;
    }
    (removed, freed)
}

/// The bytes of the files under `dir` (links not followed).
fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => size_of(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// Whether `path` is a real folder (not a link) at every step below `root`.
fn real_folders(root: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(root) else {
        return false;
    };
    let mut at = root.to_path_buf();
    for c in rel.components() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => {}
            _ => return false,
        }
    }
    true
}

/// Removes whatever is at `path` (a link is removed, not followed).
fn clear_path(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes a new file at `path`, replacing whatever was there, never through a link.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    clear_path(path)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(bytes)
}

/// Writes the harness (the `lh` package) into the environment's `purelib`, replacing any
/// `lh` a package installed there.
fn place_harness(env: &Path, purelib: &Path) -> Result<(), RunnerError> {
    if !real_folders(env, purelib) {
        return Err(RunnerError::Environment(format!(
            "a package replaced the environment's package folder {} with a link",
            purelib.display()
        )));
    }
    clear_path(&purelib.join("lh"))?;
    for (path, text) in HARNESS {
        let p = purelib.join(path);
        if let Some(d) = p.parent()
            && !d.exists()
        {
            std::fs::create_dir(d)?;
        }
        write_new(&p, text.as_bytes())?;
    }
    Ok(())
}

/// Makes a built environment `owner`'s (the server's), read-only and readable by every
/// user, files, folders and links: through opened handles only (`O_NOFOLLOW`), so that
/// a link swapped in for an entry is never followed out of the environment.
fn read_only(dir: &Path, owner: HostUser) -> std::io::Result<()> {
    read_only_at(&crate::sandbox::open_folder(dir)?, owner, 0)
}

fn read_only_at(dir: &rustix::fd::OwnedFd, owner: HostUser, depth: usize) -> std::io::Result<()> {
    use rustix::fs::{
        AtFlags, Dir, FileType, Gid, Mode, OFlags, Uid, chownat, fchmod, fchown, fstat, openat,
    };
    let (uid, gid) = (
        Some(Uid::from_raw(owner.uid)),
        Some(Gid::from_raw(owner.gid)),
    );
    if depth > 4096 {
        return Err(std::io::Error::other(
            "the environment's folders nest too deep",
        ));
    }
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        match openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => {
                // Owned by the server, not by the sandbox's user that made it (who could
                // make it writable again); nor with file capabilities
                // (`security.capability`, which a mode does not touch): the kernel drops
                // them from a file whose owner is set, even to the same one.
                fchown(&fd, uid, gid)?;
                let st = fstat(&fd)?;
                let folder = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
                if folder {
                    read_only_at(&fd, owner, depth + 1)?;
                }
                // Readable by all (a container's unprivileged user reads it), writable by
                // none, and never set-uid, set-gid or sticky: a set-uid copy of a program
                // would outlive the build on the host.
                let exec = if folder { 0o111 } else { 0 };
                fchmod(
                    &fd,
                    Mode::from_raw_mode((st.st_mode | 0o444 | exec) & 0o555),
                )?;
            }
            // A link (or what cannot be opened, a socket): only its owner changes.
            Err(_) => chownat(dir, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW)?,
        }
    }
    Ok(())
}

/// Removes an environment folder, read-only or not.
pub fn remove_env(dir: &Path) {
    use rustix::fs::{CWD, Mode, OFlags, openat};
    let folder = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    /// Makes the folder `dir` and every folder under it writable by its owner, through
    /// opened folders only: a link swapped in meanwhile (by a sandbox's process, were
    /// one left) is never followed, so nothing outside is ever made writable.
    fn writable(dir: rustix::fd::OwnedFd, depth: usize) {
        use rustix::fs::{Dir, FileType, Mode, OFlags, fchmod, openat};
        let folder = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let _ = fchmod(&dir, Mode::from_raw_mode(0o755));
        let Ok(entries) = Dir::read_from(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let maybe_folder = matches!(e.file_type(), FileType::Directory | FileType::Unknown);
            if name == c"." || name == c".." || !maybe_folder || depth > 512 {
                continue;
            }
            if let Ok(sub) = openat(&dir, name, folder, Mode::empty()) {
                writable(sub, depth + 1);
            }
        }
    }
    if let Ok(top) = openat(CWD, dir, folder, Mode::empty()) {
        writable(top, 0);
    }
    // `remove_dir_all` does not follow links either.
    let _ = std::fs::remove_dir_all(dir);
}

fn load(key: &str, dir: &Path) -> Result<Option<Env>, RunnerError> {
    let info = match std::fs::read(dir.join("lh-env.json")) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let info: EnvInfo = serde_json::from_slice(&info)
        .map_err(|e| RunnerError::Environment(format!("environment {key} is damaged: {e}")))?;
    let lock = std::fs::read_to_string(dir.join("lh-lock.txt")).unwrap_or_default();
    Ok(Some(Env {
        key: key.to_string(),
        dir: dir.to_path_buf(),
        python: dir.join("bin/python"),
        base_prefix: info.base_prefix,
        python_version: info.python_version,
        lock,
    }))
}

/// A new folder only its owner reads: what a build leaves in it (a cancelled one lingers
/// until swept) is nobody else's to use.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_is_a_version() {
        let spec = |python: &str| EnvSpec {
            python: python.into(),
            packages: BTreeMap::new(),
            source_builds: false,
        };
        for ok in ["3.11", "3.12.4"] {
            assert!(spec(ok).key().is_ok(), "{ok}");
        }
        for bad in [
            "3.11\nsix==1.16.0",
            "/usr/bin/python3.11",
            "3.11 ",
            "3",
            "--python=x",
            "3..1",
            "",
        ] {
            assert!(spec(bad).key().is_err(), "{bad:?}");
        }
    }

    /// Removing a folder a sandbox wrote never makes anything outside it writable, even
    /// while a process swaps a folder in it for a link elsewhere.
    #[test]
    fn removing_a_folder_follows_no_link_swapped_in() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::create_dir_all(victim.join("inner")).unwrap();
        for d in [&victim, &victim.join("inner")] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        for round in 0..200 {
            let env = dir.path().join(format!("env-{round}"));
            let a = env.join("a");
            std::fs::create_dir_all(a.join("sub")).unwrap();
            for d in [&env, &a, &a.join("sub")] {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o555)).unwrap();
            }
            std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o755)).unwrap();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let swapper = {
                let (env, victim, stop) = (env.clone(), victim.clone(), stop.clone());
                std::thread::spawn(move || {
                    let (a, moved) = (env.join("a"), env.join("a.moved"));
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if std::fs::rename(&a, &moved).is_ok() {
                            let _ = std::os::unix::fs::symlink(&victim, &a);
                            std::thread::yield_now();
                            let _ = std::fs::remove_file(&a);
                            let _ = std::fs::rename(&moved, &a);
                        }
                    }
                })
            };
            remove_env(&env);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            swapper.join().unwrap();
            remove_env(&env);
        }
        for d in [&victim, &victim.join("inner")] {
            let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{} was made {mode:o}", d.display());
        }
    }

    /// A file capability (which a package could once set from a user namespace) does not
    /// outlive `read_only`: set-uid to root by another name.
    #[test]
    fn read_only_drops_file_capabilities() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("capy");
        std::fs::write(&file, b"#!/bin/sh\n").unwrap();
        let py = |code: &str| {
            std::process::Command::new("python3")
                .args(["-c", code])
                .arg(&file)
                .output()
                .unwrap()
        };
        // VFS_CAP_REVISION_2 | effective; permitted: CAP_SETUID (7).
        let set = py(
            "import os, struct, sys; os.setxattr(sys.argv[1], 'security.capability', struct.pack('<IIIII', 0x02000001, 1 << 7, 0, 0, 0))",
        );
        assert!(
            set.status.success(),
            "setting a file capability needs root: {}",
            String::from_utf8_lossy(&set.stderr)
        );
        read_only(dir.path(), HostUser::server()).unwrap();
        let left = py(
            "import os, sys\ntry:\n    os.getxattr(sys.argv[1], 'security.capability'); print('kept')\nexcept OSError:\n    print('gone')",
        );
        assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "gone");
        remove_env(dir.path());
    }

    /// A fake built environment of `bytes`, last used `age` ago.
    fn fake_env(root: &Path, key: &str, bytes: usize, age: std::time::Duration) {
        let dir = root.join(key);
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("lib/blob"), vec![0u8; bytes]).unwrap();
        std::fs::write(dir.join("lh-env.json"), b"{}").unwrap();
        read_only(&dir, HostUser::server()).unwrap();
        std::fs::create_dir_all(root.join(".used")).unwrap();
        let used = root.join(".used").join(key);
        std::fs::write(&used, b"").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&used)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - age)
            .unwrap();
    }

    #[test]
    fn eviction_takes_the_least_recently_used_first_and_spares_recent_ones() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let hour = std::time::Duration::from_secs(3600);
        let (a, b, c, d) = (
            "a".repeat(32),
            "b".repeat(32),
            "c".repeat(32),
            "d".repeat(32),
        );
        fake_env(root, &a, 1000, hour * 30);
        fake_env(root, &b, 1000, hour * 20);
        fake_env(root, &c, 1000, hour * 10);
        fake_env(root, &d, 1000, std::time::Duration::ZERO);
        // Under its size: nothing goes.
        assert_eq!(evict(root, list_envs(root), 10_000, hour, &[]).0, 0);
        // Above: the oldest go until it fits; one being built stays.
        let (removed, freed) = evict(root, list_envs(root), 2_100, hour, std::slice::from_ref(&a));
        assert_eq!(removed, 2, "b and c went, a is being built");
        assert!(freed >= 2000);
        assert!(root.join(&a).exists() && root.join(&d).exists());
        assert!(!root.join(&b).exists() && !root.join(&c).exists());
        // The one used just now is never evicted, even above the size.
        evict(root, list_envs(root), 0, hour, &[]);
        assert!(root.join(&d).exists() && !root.join(&a).exists());
    }

    /// uv's cache counts toward the cache's size, and goes first when it is over, but
    /// never while a build (which holds it) runs.
    #[tokio::test]
    async fn uv_cache_counts_and_goes_first_between_builds() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let hour = std::time::Duration::from_secs(3600);
        let old = "e".repeat(32);
        fake_env(&root, &old, 1000, hour * 30);
        let uv = root.join(".uv-cache/wheels");
        std::fs::create_dir_all(&uv).unwrap();
        std::fs::write(uv.join("big.whl"), vec![0u8; 5000]).unwrap();
        let cache = EnvCache::new(root.clone(), None, false);
        // Within its size: both stay.
        assert_eq!(cache.evict(10_000, hour).await, (0, 0));
        // Over, while a build runs: uv's cache stays, and the old environment goes.
        cache
            .building
            .lock()
            .unwrap()
            .insert("f".repeat(32), Arc::default());
        let (removed, _) = cache.evict(5_500, hour).await;
        assert_eq!(removed, 1);
        assert!(uv.join("big.whl").exists() && !root.join(&old).exists());
        // Over, no build running: uv's cache goes, whole.
        cache.building.lock().unwrap().clear();
        let (removed, freed) = cache.evict(1_000, hour).await;
        assert_eq!((removed, freed), (0, 5000));
        assert!(!root.join(".uv-cache").exists());
    }

    #[test]
    fn keys_follow_the_package_set() {
        let a = EnvSpec {
            python: "3.11".into(),
            packages: BTreeMap::from([("pandas".into(), "2.2.3".into())]),
            source_builds: false,
        };
        let b = EnvSpec {
            python: "3.11".into(),
            packages: BTreeMap::from([("pandas".into(), "2.2.2".into())]),
            source_builds: false,
        };
        assert_ne!(a.key().unwrap(), b.key().unwrap());
        assert_eq!(a.key().unwrap(), a.clone().key().unwrap());
        assert_eq!(
            a.requirements().unwrap(),
            ["pandas==2.2.3", "pyarrow==22.0.0"]
        );
        let c = EnvSpec {
            python: "3.11".into(),
            packages: BTreeMap::from([("polars".into(), ">=1,<2".into())]),
            source_builds: false,
        };
        assert_eq!(
            c.requirements().unwrap(),
            ["polars>=1,<2", "pyarrow==22.0.0"]
        );
        let bad = EnvSpec {
            python: "3.11".into(),
            packages: BTreeMap::from([("x; rm -rf /".into(), "1".into())]),
            source_builds: false,
        };
        assert!(bad.requirements().is_err());
    }

    /// What uv 0.13 says when a package has no wheel: the package, with its version
    /// when uv names one (directly, or as a dependency's), and nothing else.
    #[test]
    fn the_packages_without_wheels_are_read_from_uvs_error() {
        let direct = "error: No solution found when resolving dependencies\n  cause: Because sdistpkg==1.0 has no usable wheels and you require sdistpkg==1.0, we can conclude that your requirements are unsatisfiable.\n\nhint: Wheels are required for `sdistpkg` because building from source is disabled for all packages (i.e., with `--no-build`)";
        assert_eq!(
            without_wheels(direct),
            BTreeMap::from([("sdistpkg".to_string(), Some("1.0".to_string()))])
        );
        let dependency = "  cause: Because other-pkg==0.3 has no usable wheels and all versions of top depend on other-pkg==0.3, we can conclude that all versions of top cannot be used.\n         And because you require top==1.0.0, we can conclude that your requirements are unsatisfiable.\n\nhint: Wheels are required for `other-pkg` because building from source is disabled";
        assert_eq!(
            without_wheels(dependency),
            BTreeMap::from([("other-pkg".to_string(), Some("0.3".to_string()))])
        );
        let range = "  cause: Because all versions of Some_Pkg have no usable wheels and you require some-pkg, we can conclude that your requirements are unsatisfiable.\n\nhint: Wheels are required for `Some_Pkg` because building from source is disabled";
        assert_eq!(
            without_wheels(range),
            BTreeMap::from([("some-pkg".to_string(), None)])
        );
        let other = "  cause: Because sdistpkg was not found in the package registry and you require sdistpkg==1.0, we can conclude that your requirements are unsatisfiable.";
        assert!(without_wheels(other).is_empty());
    }

    /// A source distribution's pyproject.toml is the package author's: what it asks to
    /// build with reaches uv's command line only as a requirement, never as an option
    /// (another index, a file of requirements) or a direct reference to a URL or file.
    #[test]
    fn build_requirements_are_only_requirements() {
        for ok in ["setuptools>=61", "Cython; python_version < '3.13'", "wheel"] {
            assert!(build_requirement_ok(ok), "{ok}");
        }
        for bad in [
            "--index-url=http://127.0.0.1:1/simple",
            "-r/etc/passwd",
            "-e.",
            "evil @ http://127.0.0.1:1/evil.whl",
            "evil@file:///etc/passwd",
            "http://127.0.0.1:1/x-1.0-py3-none-any.whl",
            "git+http://127.0.0.1:1/repo",
            "x-1.0.tar.gz; file:///etc",
            "",
            " setuptools",
            "./local",
        ] {
            assert!(!build_requirement_ok(bad), "{bad}");
        }
    }
}
