//! Errors of the catalog: a kind that callers branch on, a message for people, and the
//! details a caller needs to act (the conflicting tables, the candidates of an ambiguous
//! hash). No status codes here: mapping kinds to a transport is the server's job.

use std::fmt;
use std::str::FromStr;

use crate::model::{CommitId, Hash, TablePointer};

/// What went wrong, for callers that react differently to different failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A branch, tag, commit or time-travel point does not exist.
    RefNotFound,
    /// A table is not present at the requested ref.
    TableNotFound,
    /// A branch or tag with that name exists already.
    AlreadyExists,
    /// A name (branch, tag, table) or a ref expression is malformed.
    InvalidName,
    /// An argument other than a name is invalid (an empty commit, a limit of zero...).
    InvalidArgument,
    /// A hash prefix matches more than one commit.
    AmbiguousRef,
    /// Tables touched by a commit or a merge changed concurrently; see [`Error::conflicts`].
    Conflict,
    /// A ref did not point at the commit the caller expected (assign, delete, merge).
    RefConflict,
    /// The operation is not allowed on this ref (moving a tag, deleting `main`...).
    NotAllowed,
    /// Too many concurrent writers: the operation gave up retrying. Safe to retry.
    Contention,
    /// The backing database failed or could not be reached.
    Storage,
    /// Stored data could not be decoded: a bug or corruption, never user error.
    Corrupt,
}

impl ErrorKind {
    /// A short stable identifier, used by the server in its JSON errors.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::RefNotFound => "ref_not_found",
            ErrorKind::TableNotFound => "table_not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::InvalidName => "invalid_name",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::AmbiguousRef => "ambiguous_ref",
            ErrorKind::Conflict => "conflict",
            ErrorKind::RefConflict => "ref_conflict",
            ErrorKind::NotAllowed => "not_allowed",
            ErrorKind::Contention => "contention",
            ErrorKind::Storage => "storage",
            ErrorKind::Corrupt => "corrupt",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One table that blocked a commit or a merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableConflict {
    pub table: String,
    /// What the writer expected (a commit), or what the merge base held (a merge).
    pub expected: Option<TablePointer>,
    /// What the branch holds now (a commit), or what the target side holds (a merge).
    pub actual: Option<TablePointer>,
    /// For a merge: what the source side holds. `None` for a commit.
    pub incoming: Option<Option<TablePointer>>,
}

/// The catalog's error: a kind, a message, and optional details and cause.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    conflicts: Vec<TableConflict>,
    candidates: Vec<CommitId>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            conflicts: Vec::new(),
            candidates: Vec::new(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    pub(crate) fn conflict(message: impl Into<String>, conflicts: Vec<TableConflict>) -> Self {
        let mut e = Error::new(ErrorKind::Conflict, message);
        e.conflicts = conflicts;
        e
    }

    pub(crate) fn ambiguous(prefix: &str, candidates: Vec<CommitId>) -> Self {
        let mut e = Error::new(
            ErrorKind::AmbiguousRef,
            format!("hash prefix '{prefix}' matches more than one commit; give more characters"),
        );
        e.candidates = candidates;
        e
    }

    pub(crate) fn storage(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        let message = format!("catalog storage failed: {source}");
        Error::new(ErrorKind::Storage, message).with_source(source)
    }

    pub(crate) fn corrupt(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corrupt, message)
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The tables that blocked a commit or merge (kind [`ErrorKind::Conflict`]).
    pub fn conflicts(&self) -> &[TableConflict] {
        &self.conflicts
    }

    /// The commits an ambiguous hash prefix matched (kind [`ErrorKind::AmbiguousRef`]).
    pub fn candidates(&self) -> &[CommitId] {
        &self.candidates
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Parsing a full hash. It lives here rather than beside [`Hash`] so that `model.rs`
/// needs nothing from this module (which needs its types).
impl FromStr for Hash {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Hash::from_hex(s).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidName,
                format!("'{s}' is not a 64-character hex hash"),
            )
        })
    }
}
