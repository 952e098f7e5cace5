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
    /// Where the call's log so far goes while it runs (a few times a second, when it
    /// grew), for a node's log to be followed live; its whole log comes with the result.
    #[serde(skip)]
    pub live: Option<LiveLog>,
    /// Whose grants the call's inputs were read with (the run's user and roles): a
    /// worker serves the calls of one such tenant only, so nothing a call leaves in it
    /// (its memory above all: every call is a fork of it) reaches a call run for
    /// someone who may read less.
    #[serde(skip)]
    pub tenant: String,
}

/// The log of a running call, as far as it has come (at most [`MAX_CALL_LOG`], its end).
pub type LiveLog = std::sync::Arc<tokio::sync::watch::Sender<String>>;

/// How often a running call's log is looked at for [`Invocation::live`].
pub const LIVE_LOG_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

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
    /// The worker leaves after this answer (its call left what it cannot remove).
    pub retires: Option<bool>,
}

/// The most of a function's error message, an expectation's detail, and a traceback
/// that a call's outcome keeps (runs store them, and answer them whole): their start
/// and end, with what was cut said between.
pub const MAX_MESSAGE: usize = 8 << 10;
pub const MAX_TRACEBACK: usize = 64 << 10;

/// `text` within `max` bytes: its first and last parts, and how much was left out.
pub(crate) fn bounded(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let floor = |i: usize| {
        (0..=i)
            .rev()
            .find(|j| text.is_char_boundary(*j))
            .unwrap_or(0)
    };
    let ceil = |i: usize| {
        (i..=text.len())
            .find(|j| text.is_char_boundary(*j))
            .unwrap_or(text.len())
    };
    let head = floor(max / 2);
    let tail = ceil(text.len() - max / 2);
    format!(
        "{}\n[... {} bytes left out ...]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// The most of what one call printed that its result keeps (runs store it with the
/// node): the last part.
pub const MAX_CALL_LOG: usize = 1 << 20;

/// The last `max` bytes of `text`, said to be so.
pub fn last(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let from = (text.len() - max..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    format!("[... earlier output dropped ...]\n{}", &text[from..])
}

impl Answer {
    pub fn outcome(self) -> Outcome {
        match (self.ok, self.passed, self.rows) {
            (Some(true), Some(passed), _) => Outcome::Expectation {
                passed,
                detail: bounded(self.detail.unwrap_or_default(), MAX_MESSAGE),
            },
            (Some(true), None, Some(rows)) => Outcome::Model { rows },
            _ => Outcome::Failed {
                error: bounded(
                    self.error
                        .unwrap_or_else(|| "the worker gave no answer".into()),
                    MAX_MESSAGE,
                ),
                traceback: bounded(self.traceback.unwrap_or_default(), MAX_TRACEBACK),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the twelfth review: a failed call's error and traceback were kept whole
    /// (8 MB each, 20 nodes: 160 MB in the catalog and in each answer about the run).
    #[test]
    fn a_failed_calls_error_and_traceback_are_bounded() {
        let a: Answer = serde_json::from_str(&format!(
            r#"{{"id": "x", "ok": false, "error": "{}", "traceback": "{}"}}"#,
            "é".repeat(1 << 20),
            "t".repeat(1 << 20)
        ))
        .unwrap();
        let Outcome::Failed { error, traceback } = a.outcome() else {
            panic!("not a failure");
        };
        assert!(error.len() <= MAX_MESSAGE + 64, "{}", error.len());
        assert!(error.starts_with("éé") && error.ends_with("éé"));
        assert!(error.contains("bytes left out"));
        assert!(traceback.len() <= MAX_TRACEBACK + 64);
        assert_eq!(bounded("short".into(), MAX_MESSAGE), "short");
    }
}
