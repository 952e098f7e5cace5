//! The server's error: a kind (which the HTTP layer, and only it, turns into a status
//! code), a stable code for scripts, a message, an optional hint, and the conflicting
//! tables when there are some.

use std::fmt;

use lh_api::TableConflict;

/// What kind of failure, for the HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NotFound,
    BadRequest,
    /// Refused whatever the request says (a write to a tag or a fixed commit, through
    /// the Iceberg REST catalog).
    Forbidden,
    Conflict,
    /// Well formed but contradicting itself (a property both set and removed).
    Unprocessable,
    Timeout,
    TooLarge,
    Unavailable,
    Internal,
}

#[derive(Debug)]
pub struct Error {
    pub kind: Kind,
    /// A stable identifier (`ref_not_found`, `sql_error`, ...).
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
    pub conflicts: Vec<TableConflict>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, code: &'static str, message: impl Into<String>) -> Self {
        Error {
            kind,
            code,
            message: message.into(),
            hint: None,
            conflicts: Vec::new(),
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Error::new(Kind::BadRequest, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Error::new(Kind::NotFound, code, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(Kind::Internal, "internal", message)
    }

    /// A catalog failure that may have happened after a commit landed (the database
    /// was lost mid-transaction): what the commit points at must not be removed.
    pub fn commit_state_unknown(&self) -> bool {
        self.code == lh_catalog::ErrorKind::Storage.as_str()
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub(crate) fn pointer(p: &lh_catalog::TablePointer) -> lh_api::TablePointer {
    lh_api::TablePointer {
        metadata_location: p.metadata_location.clone(),
        table_uuid: p.table_uuid.clone(),
        snapshot_id: p.snapshot_id,
    }
}

impl From<lh_catalog::Error> for Error {
    fn from(e: lh_catalog::Error) -> Self {
        use lh_catalog::ErrorKind as K;
        let kind = match e.kind() {
            K::RefNotFound | K::TableNotFound => Kind::NotFound,
            K::InvalidName | K::InvalidArgument | K::AmbiguousRef | K::NotAllowed => {
                Kind::BadRequest
            }
            K::AlreadyExists | K::Conflict | K::RefConflict => Kind::Conflict,
            K::Contention | K::Storage => Kind::Unavailable,
            K::Corrupt => Kind::Internal,
        };
        let hint = match e.kind() {
            K::RefNotFound => Some("`lh branch ls` and `lh tag ls` list the refs".to_string()),
            K::TableNotFound => Some("`lh table ls --ref REF` lists the tables".to_string()),
            K::AmbiguousRef => Some(format!(
                "candidates: {}",
                e.candidates()
                    .iter()
                    .map(|c| c.short())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            K::Conflict => Some("read the tables again and retry on the new state".to_string()),
            K::Contention => Some("retry".to_string()),
            _ => None,
        };
        let conflicts = e
            .conflicts()
            .iter()
            .map(|c| TableConflict {
                table: c.table.clone(),
                expected: c.expected.as_ref().map(pointer),
                actual: c.actual.as_ref().map(pointer),
                incoming: c.incoming.as_ref().map(|i| i.as_ref().map(pointer)),
            })
            .collect();
        Error {
            kind,
            code: e.kind().as_str(),
            message: e.message().to_string(),
            hint,
            conflicts,
        }
    }
}

impl From<iceberg::Error> for Error {
    fn from(e: iceberg::Error) -> Self {
        Error::new(Kind::Internal, "iceberg", format!("Iceberg: {e}"))
    }
}

impl From<duckdb::Error> for Error {
    fn from(e: duckdb::Error) -> Self {
        Error::new(Kind::Internal, "duckdb", format!("DuckDB: {e}"))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::new(Kind::Internal, "io", format!("I/O: {e}"))
    }
}
