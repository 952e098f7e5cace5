//! The error of a runtime that could not run a function at all. A function that ran and
//! failed is not an error but an `Outcome::Failed`.

/// Why a runtime could not run a function at all (as opposed to the function failing,
/// which is an `Outcome::Failed`).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("{0}")]
    Environment(String),
    #[error("{0}")]
    Sandbox(String),
    #[error("worker failed: {0}")]
    Worker(String),
    /// The engine the call ran on stopped answering: the call is lost with it, but the
    /// function did not fail (another engine may run it).
    #[error("{0}")]
    EngineLost(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}
