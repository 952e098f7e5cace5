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
}

impl EnvSpec {
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
        let mut h = blake3::Hasher::new();
        h.update(b"lh-env-v1\n");
        h.update(format!("python={}\n", self.python).as_bytes());
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
    building: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl EnvCache {
    /// Environments under `root` (`root/<key>`), uv's cache in `root/.uv-cache`. `uv` is
    /// the uv binary (looked up on PATH at each build when `None`).
    pub fn new(root: PathBuf, uv: Option<PathBuf>) -> EnvCache {
        EnvCache {
            root,
            uv,
            building: Mutex::new(HashMap::new()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The environment for `spec`, built if it does not exist yet. The flag says whether
    /// it was built now.
    pub async fn get(&self, spec: &EnvSpec) -> Result<(Env, bool), RunnerError> {
        let key = spec.key()?;
        let dir = self.root.join(&key);
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
        self.build(spec, &key, &dir).await?;
        let env = load(&key, &dir)?
            .ok_or_else(|| RunnerError::Environment("the built environment vanished".into()))?;
        Ok((env, true))
    }

    async fn build(&self, spec: &EnvSpec, key: &str, dir: &Path) -> Result<(), RunnerError> {
        // Looked up when needed, not once at start: uv installed while the server runs
        // is found by the next build.
        let uv = self
            .uv
            .clone()
            .or_else(|| find_on_path("uv"))
            .ok_or_else(|| {
                RunnerError::Environment(
                    "uv is needed to build Python environments and is not on PATH (pip install uv)"
                        .into(),
                )
            })?;
        std::fs::create_dir_all(&self.root)?;
        let tmp = self
            .root
            .join(format!(".build-{key}-{}", uuid::Uuid::new_v4().simple()));
        let result = async {
            let uv_cmd = |args: &[&str]| {
                let mut c = Command::new(&uv);
                c.args(args)
                    .env("UV_CACHE_DIR", self.root.join(".uv-cache"))
                    .env("UV_PYTHON_DOWNLOADS", "never")
                    .env("UV_NO_PROGRESS", "1")
                    .kill_on_drop(true);
                c
            };
            let tmp_s = tmp.display().to_string();
            run(&mut uv_cmd(&["venv", "--quiet", "--no-project", "--python", &spec.python, &tmp_s]), "create the virtualenv").await?;
            let py = tmp.join("bin/python").display().to_string();
            let reqs = spec.requirements()?;
            let mut args = vec!["pip", "install", "--quiet", "--python", &py];
            args.extend(reqs.iter().map(String::as_str));
            run(&mut uv_cmd(&args), "install the packages").await?;
            let info = run(
                Command::new(&py).args([
                    "-c",
                    "import json, sys, sysconfig; print(json.dumps({'base_prefix': sys.base_prefix, 'python_version': '%d.%d.%d' % sys.version_info[:3], 'purelib': sysconfig.get_paths()['purelib']}))",
                ]),
                "inspect the interpreter",
            )
            .await?;
            let v: serde_json::Value = serde_json::from_str(info.trim())
                .map_err(|e| RunnerError::Environment(format!("cannot read the interpreter's answer: {e}")))?;
            let purelib = PathBuf::from(v["purelib"].as_str().unwrap_or_default());
            for (path, text) in HARNESS {
                let p = purelib.join(path);
                if let Some(d) = p.parent() {
                    std::fs::create_dir_all(d)?;
                }
                std::fs::write(p, text)?;
            }
            let lock = run(&mut uv_cmd(&["pip", "freeze", "--python", &py]), "list the packages").await?;
            std::fs::write(tmp.join("lh-lock.txt"), lock)?;
            let info = EnvInfo {
                base_prefix: PathBuf::from(v["base_prefix"].as_str().unwrap_or_default()),
                python_version: v["python_version"].as_str().unwrap_or_default().to_string(),
            };
            std::fs::write(tmp.join("lh-env.json"), serde_json::to_vec(&info).unwrap_or_default())?;
            // Environments are moved into place whole: a reader sees none or all of it.
            // Another process may have built the same one meanwhile: then keep theirs.
            if let Err(e) = std::fs::rename(&tmp, dir) {
                if load(key, dir)?.is_none() {
                    return Err(e.into());
                }
                let _ = std::fs::remove_dir_all(&tmp);
            }
            Ok::<(), RunnerError>(())
        }
        .await;
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result
    }
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

async fn run(cmd: &mut Command, what: &str) -> Result<String, RunnerError> {
    let out = cmd
        .output()
        .await
        .map_err(|e| RunnerError::Environment(format!("cannot {what}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = tail[tail.len().saturating_sub(12)..].join("\n");
        return Err(RunnerError::Environment(format!("cannot {what}: {tail}")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The first executable `name` on PATH.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_package_set() {
        let a = EnvSpec {
            python: "3.11".into(),
            packages: BTreeMap::from([("pandas".into(), "2.2.3".into())]),
        };
        let b = EnvSpec {
            python: "3.11".into(),
            packages: BTreeMap::from([("pandas".into(), "2.2.2".into())]),
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
        };
        assert_eq!(
            c.requirements().unwrap(),
            ["polars>=1,<2", "pyarrow==22.0.0"]
        );
        let bad = EnvSpec {
            python: "3.11".into(),
            packages: BTreeMap::from([("x; rm -rf /".into(), "1".into())]),
        };
        assert!(bad.requirements().is_err());
    }
}
