//! The [`Runtime`] trait that the control plane calls, the [`Limits`] of one function and
//! the [`InvokeResult`] of one call. Both real runtimes are a `PooledRuntime` over their
//! launcher; [`Unavailable`] stands in when neither can run.

use std::path::Path;
use std::time::Duration;

use crate::env::Env;
use crate::error::RunnerError;
use crate::protocol::{Invocation, Outcome};

/// The size of a worker's private `/tmp` (a tmpfs, so it counts as memory), the same on
/// every runtime: a function cannot fill the host's disk or memory through it.
pub const TMP_BYTES: u64 = 256 << 20;

/// The most a call may write into its folder when its function sets no disk limit, where
/// the folder must have a size (a remote engine's volume in memory, what crosses back).
pub const DEFAULT_DISK_BYTES: u64 = 1 << 30;

/// The descriptors one process of a sandbox may hold (a build step's, a function's): a
/// few thousand is plenty, and it bounds what a sandbox can keep on disk out of its
/// folder's measure (files removed but open, or in flight on a socket).
pub const MAX_OPEN_FILES: u64 = 4096;

/// Limits of one function.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Address-space limit of the worker, in bytes.
    pub memory_bytes: Option<u64>,
    /// CPU share (not enforced by the process runtime).
    pub cpus_milli: Option<u32>,
    pub timeout: Duration,
    /// The most a call may write into its worker's folder (its output, its inputs and
    /// whatever else it writes there); a call past it is stopped.
    pub disk_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: Some(4 << 30),
            cpus_milli: None,
            timeout: Duration::from_secs(600),
            disk_bytes: None,
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

    /// Runs one invocation in environment `env` within `limits`, in a worker that sees
    /// the invocation's code snapshot (its `root`) and no other code. `work` is the
    /// invocation's folder: inputs are there, and the output goes there.
    async fn invoke(
        &self,
        env: &Env,
        limits: &Limits,
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
