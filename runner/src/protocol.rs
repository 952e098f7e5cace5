//! The worker protocol: a JSON line per request on the worker's stdin, a JSON line per
//! answer on its stdout (user output goes to stderr). See `python/lh/_worker.py`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InvocationKind {
    Model,
    Expectation,
}

/// One call of a user function.
#[derive(Debug, Clone, Serialize)]
pub struct Invocation {
    pub id: String,
    pub kind: InvocationKind,
    /// The Python file, and the function in it.
    pub file: PathBuf,
    pub function: String,
    /// The project's folder (on `sys.path`, for the project's own modules).
    pub root: PathBuf,
    /// Argument name to an Arrow IPC file.
    pub inputs: BTreeMap<String, PathBuf>,
    /// Argument name to a parameter value.
    pub params: BTreeMap<String, serde_json::Value>,
    /// Where a model writes its result (Arrow IPC).
    pub output: PathBuf,
    /// The secrets the function declared, as environment variables of its call only.
    /// Never in the request line (the worker's warm parent would hold it): written to
    /// the invocation's folder for the call's process to read and remove
    /// (`SECRETS_FILE`). A worker reached over its channel gets that file's bytes after
    /// the request line; its parent moves them through a buffer of its own that it
    /// zeroes after the call.
    #[serde(skip)]
    pub env: SecretEnv,
}

/// The file in an invocation's folder that holds its secrets until the call reads it.
pub const SECRETS_FILE: &str = "secrets.json";

/// Environment variables holding secrets: never printed (`Debug` shows the names only).
#[derive(Clone, Default, Serialize)]
#[serde(transparent)]
pub struct SecretEnv(pub BTreeMap<String, String>);

impl SecretEnv {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for SecretEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// What a function did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A model returned `rows` rows, written to the invocation's output.
    Model { rows: u64 },
    /// An expectation returned.
    Expectation { passed: bool, detail: String },
    /// The function raised, returned the wrong thing, ran out of time or memory, or its
    /// worker died.
    Failed { error: String, traceback: String },
}

impl Outcome {
    /// A call that ran past its timeout and was stopped (the same words on every runtime).
    pub(crate) fn timed_out(timeout: std::time::Duration) -> Outcome {
        Outcome::Failed {
            error: format!("timed out after {} s and was stopped", timeout.as_secs()),
            traceback: String::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct Answer {
    pub id: Option<String>,
    pub ok: Option<bool>,
    pub rows: Option<u64>,
    pub passed: Option<bool>,
    pub detail: Option<String>,
    pub error: Option<String>,
    pub traceback: Option<String>,
    pub ready: Option<bool>,
}

impl Answer {
    pub fn outcome(self) -> Outcome {
        match (self.ok, self.passed, self.rows) {
            (Some(true), Some(passed), _) => Outcome::Expectation {
                passed,
                detail: self.detail.unwrap_or_default(),
            },
            (Some(true), None, Some(rows)) => Outcome::Model { rows },
            _ => Outcome::Failed {
                error: self
                    .error
                    .unwrap_or_else(|| "the worker gave no answer".into()),
                traceback: self.traceback.unwrap_or_default(),
            },
        }
    }
}

/// The harness's Python sources, written into every environment (their hash is part of
/// the environment's key, so a changed harness makes new environments).
pub const HARNESS: &[(&str, &str)] = &[
    ("lh/__init__.py", include_str!("../python/lh/__init__.py")),
    ("lh/_plan.py", include_str!("../python/lh/_plan.py")),
    ("lh/_worker.py", include_str!("../python/lh/_worker.py")),
];

/// Writes the `lh` Python package (the harness) into `dir`, for the planner.
pub fn write_harness(dir: &Path) -> std::io::Result<()> {
    for (path, text) in HARNESS {
        let p = dir.join(path);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(p, text)?;
    }
    Ok(())
}
