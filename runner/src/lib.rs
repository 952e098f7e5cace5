//! Runtimes of lh pipeline functions.
//!
//! A Python function runs in the worker harness (`python/lh/_worker.py`), a long-lived
//! Python process that takes one invocation after another, in an environment built by
//! uv into a content-addressed cache ([`env`]). Inputs and outputs cross as Arrow IPC
//! files in a per-invocation folder. Every runtime implements [`Runtime`]; the
//! [`process`] runtime runs workers as local processes sandboxed with bubblewrap.
//!
//! This crate knows nothing of HTTP, the catalog or DuckDB.

pub mod docker;
pub mod env;
pub mod process;
pub mod protocol;

use std::path::Path;
use std::time::Duration;

pub use env::{Env, EnvCache, EnvSpec};
pub use protocol::{Invocation, InvocationKind, Outcome};

/// Why a runtime could not run a function at all (as opposed to the function failing,
/// which is an [`Outcome::Failed`]).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("{0}")]
    Environment(String),
    #[error("{0}")]
    Sandbox(String),
    #[error("worker failed: {0}")]
    Worker(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Limits of one function.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Address-space limit of the worker, in bytes.
    pub memory_bytes: Option<u64>,
    /// CPU share (not enforced by the process runtime).
    pub cpus_milli: Option<u32>,
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: Some(4 << 30),
            cpus_milli: None,
            timeout: Duration::from_secs(600),
        }
    }
}

/// What an invocation produced, with the function's log (its stderr and prints).
#[derive(Debug, Clone)]
pub struct InvokeResult {
    pub outcome: Outcome,
    pub log: String,
    pub duration: Duration,
    /// Whether the worker was started for this invocation (a cold start).
    pub cold: bool,
}

/// A place that runs functions.
#[async_trait::async_trait]
pub trait Runtime: Send + Sync {
    /// `process` or `docker`.
    fn name(&self) -> &'static str;

    /// Runs one invocation in environment `env` within `limits`. `work` is the
    /// invocation's folder: inputs are there, and the output goes there.
    async fn invoke(
        &self,
        env: &Env,
        limits: &Limits,
        code_root: &Path,
        work: &Path,
        inv: Invocation,
    ) -> Result<InvokeResult, RunnerError>;

    /// A line about the runtime's state, for `lh info`.
    fn describe(&self) -> String;

    /// Stops every worker.
    async fn shutdown(&self);
}

/// A runtime that cannot run anything, and says why (a server started without its
/// sandbox, say): runs fail with the reason instead of the server refusing to start.
pub struct Unavailable(pub String);

#[async_trait::async_trait]
impl Runtime for Unavailable {
    fn name(&self) -> &'static str {
        "unavailable"
    }

    async fn invoke(
        &self,
        _env: &Env,
        _limits: &Limits,
        _code_root: &Path,
        _work: &Path,
        _inv: Invocation,
    ) -> Result<InvokeResult, RunnerError> {
        Err(RunnerError::Sandbox(self.0.clone()))
    }

    fn describe(&self) -> String {
        format!("unavailable: {}", self.0)
    }

    async fn shutdown(&self) {}
}

/// Writes the `lh` Python package (the harness) into `dir`, for the planner.
pub fn write_harness(dir: &Path) -> std::io::Result<()> {
    for (path, text) in protocol::HARNESS {
        let p = dir.join(path);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(p, text)?;
    }
    Ok(())
}
