//! Runtimes of lh pipeline functions.
//!
//! A Python function runs in the worker harness (`python/lh/_worker.py`), a long-lived
//! Python process that takes one invocation after another, in an environment built by
//! uv into a content-addressed cache ([`env`]). Inputs and outputs cross as Arrow IPC
//! files in a per-invocation folder. The control plane calls a [`Runtime`].
//!
//! Both real runtimes are one [`PooledRuntime`] (the warm [`pool`] and the one
//! [`exchange`] with a worker) over a [`Launcher`] that only starts and stops workers:
//! [`docker`] runs them in containers, [`process`] as local processes sandboxed with
//! bubblewrap. A new place to run workers (a remote Docker host, a cluster) is a new
//! launcher.
//!
//! Modules depend on each other in one direction: `error`, `protocol` -> `env` ->
//! `runtime` -> `worker` -> `pool`, `exchange` -> `pooled` -> `docker`, `process`, and
//! `engines` (several engines as one runtime, over `pooled`). This
//! file only declares and re-exports them.
//!
//! This crate knows nothing of HTTP, the catalog or DuckDB.

pub mod docker;
pub mod engines;
pub mod env;
mod error;
mod exchange;
mod pool;
pub mod pooled;
pub mod process;
pub mod protocol;
mod runtime;
mod sandbox;
pub mod tools;
mod transfer;
pub mod worker;

pub use env::{BuildBounds, Env, EnvCache, EnvSpec, sweep_build_groups};
pub use error::RunnerError;
pub use pool::PoolConfig;
pub use pooled::PooledRuntime;
pub use protocol::{Invocation, InvocationKind, LiveLog, Outcome, SecretEnv, write_harness};
pub use runtime::{InvokeResult, Limits, Runtime, Unavailable};
pub use sandbox::HostUser;
pub use worker::{Launcher, Worker};
