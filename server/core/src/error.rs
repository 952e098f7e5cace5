//! The server's error: a kind (which the HTTP layer, and only it, turns into a status
//! code), a stable [`Code`] for scripts and for code that decides by the failure, a
//! message, an optional hint, the conflicting tables when there are some, and the
//! underlying error it came from.

use std::fmt;

use lh_api::TableConflict;
use lh_api::remedy::Remedy;

/// What kind of failure, for the HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NotFound,
    BadRequest,
    /// No valid credentials: a token missing, malformed, unknown, expired or revoked.
    Unauthenticated,
    /// Refused whatever the request says (a write to a tag or a fixed commit, through
    /// the Iceberg REST catalog), or to this identity (its role may not).
    Forbidden,
    Conflict,
    /// Well formed but contradicting itself (a property both set and removed).
    Unprocessable,
    Timeout,
    TooLarge,
    Unavailable,
    Internal,
}

/// Declares [`Code`] with the stable name each variant has on the wire.
macro_rules! codes {
    ($($variant:ident = $name:literal,)*) => {
        /// What failed, as a stable identifier: the `kind` of the API's error body, and
        /// what code matches on (never the message). The catalog's error kinds keep
        /// their own names.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $($variant,)*
        }

        impl Code {
            /// The name on the wire (`ref_not_found`, `sql_error`, ...).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $name,)*
                }
            }
        }
    };
}

codes! {
    AlreadyExists = "already_exists",
    AmbiguousRef = "ambiguous_ref",
    AmbiguousRun = "ambiguous_run",
    AnswerMemoryFull = "answer_memory_full",
    BranchProtected = "branch_protected",
    BadEnvironment = "bad_environment",
    BadFilter = "bad_filter",
    BadInput = "bad_input",
    BadKey = "bad_key",
    BadInputFile = "bad_input_file",
    BadParameter = "bad_parameter",
    BadPartitionSpec = "bad_partition_spec",
    ChecksFailed = "checks_failed",
    CheckNotFound = "check_not_found",
    HookNotFound = "hook_not_found",
    SecretNotFound = "secret_not_found",
    BadProjectArchive = "bad_project_archive",
    BadRequest = "bad_request",
    BadSchema = "bad_schema",
    CodeNotFound = "code_not_found",
    CommitFailed = "commit_failed",
    CommitStateUnknown = "commit_state_unknown",
    Conflict = "conflict",
    Contention = "contention",
    Corrupt = "corrupt",
    Duckdb = "duckdb",
    Collected = "collected",
    EnvironmentFailed = "environment_failed",
    Forbidden = "forbidden",
    GcEnabled = "gc_enabled",
    GcRunning = "gc_running",
    GcUnreadable = "gc_unreadable",
    GraceTooShort = "grace_too_short",
    HostNotAllowed = "host_not_allowed",
    Iceberg = "iceberg",
    Internal = "internal",
    Interrupted = "interrupted",
    InvalidArgument = "invalid_argument",
    InvalidName = "invalid_name",
    InvalidParameter = "invalid_parameter",
    InvalidProject = "invalid_project",
    InvalidUpdate = "invalid_update",
    Io = "io",
    NamespaceNotEmpty = "namespace_not_empty",
    NamespaceNotFound = "namespace_not_found",
    NoFiles = "no_files",
    NodeNotFound = "node_not_found",
    NotABranch = "not_a_branch",
    NotAllowed = "not_allowed",
    NotRunning = "not_running",
    ObjectStore = "object_store",
    OriginNotAllowed = "origin_not_allowed",
    OutOfMemory = "out_of_memory",
    OutsideWarehouse = "outside_warehouse",
    PermissionDenied = "permission_denied",
    PlannersBusy = "planners_busy",
    RequestBodiesFull = "request_bodies_full",
    PrefixNotFound = "prefix_not_found",
    PropertyConflict = "property_conflict",
    QueriesQueued = "queries_queued",
    QueryNotFound = "query_not_found",
    ReadOnly = "read_only",
    ReadOnlyRef = "read_only_ref",
    RefConflict = "ref_conflict",
    RefNotFound = "ref_not_found",
    RequirementFailed = "requirement_failed",
    ResultTooLarge = "result_too_large",
    RoleNotFound = "role_not_found",
    RunNotFound = "run_not_found",
    RuntimeFailed = "runtime_failed",
    SchemaMismatch = "schema_mismatch",
    ShuttingDown = "shutting_down",
    SnapshotsKept = "snapshots_kept",
    SqlError = "sql_error",
    SqlTooLong = "sql_too_long",
    StillRunning = "still_running",
    Storage = "storage",
    TableNotFound = "table_not_found",
    Timeout = "timeout",
    TokenNotFound = "token_not_found",
    Unauthenticated = "unauthenticated",
    UnknownFormat = "unknown_format",
    UnknownParameter = "unknown_parameter",
    UnreadableMetadata = "unreadable_metadata",
    UnsupportedFunction = "unsupported_function",
    UnsupportedTable = "unsupported_table",
    UnsupportedType = "unsupported_type",
    UnsupportedWarehouse = "unsupported_warehouse",
    UploadFailed = "upload_failed",
    UploadTooLarge = "upload_too_large",
    UploadNotFound = "upload_not_found",
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tests and logs compare a code with its wire name.
impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<lh_catalog::ErrorKind> for Code {
    fn from(kind: lh_catalog::ErrorKind) -> Code {
        use lh_catalog::ErrorKind as K;
        match kind {
            K::RefNotFound => Code::RefNotFound,
            K::TableNotFound => Code::TableNotFound,
            K::AlreadyExists => Code::AlreadyExists,
            K::InvalidName => Code::InvalidName,
            K::InvalidArgument => Code::InvalidArgument,
            K::AmbiguousRef => Code::AmbiguousRef,
            K::Conflict => Code::Conflict,
            K::RefConflict => Code::RefConflict,
            K::NotAllowed => Code::NotAllowed,
            K::Contention => Code::Contention,
            K::Storage => Code::Storage,
            K::Corrupt => Code::Corrupt,
        }
    }
}

#[derive(Debug)]
pub struct Error {
    pub kind: Kind,
    pub code: Code,
    pub message: String,
    /// What the user can do about it, in words any client may show.
    pub hint: Option<String>,
    /// What the user can do about it, typed: each client words it (see `lh_api::remedy`).
    pub remedies: Vec<Remedy>,
    pub conflicts: Vec<TableConflict>,
    /// The error this one came from (a catalog, DuckDB, Iceberg or I/O error).
    pub source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, code: Code, message: impl Into<String>) -> Self {
        Error {
            kind,
            code,
            message: message.into(),
            hint: None,
            remedies: Vec::new(),
            conflicts: Vec::new(),
            source: None,
        }
    }

    pub fn bad_request(code: Code, message: impl Into<String>) -> Self {
        Error::new(Kind::BadRequest, code, message)
    }

    pub fn not_found(code: Code, message: impl Into<String>) -> Self {
        Error::new(Kind::NotFound, code, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(Kind::Internal, Code::Internal, message)
    }

    /// A catalog failure that may have happened after a commit landed (the database
    /// was lost mid-transaction): what the commit points at must not be removed.
    pub fn commit_state_unknown(&self) -> bool {
        self.code == Code::Storage
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Adds something the user can do about it, which each client words its own way.
    pub fn with_remedy(mut self, remedy: Remedy) -> Self {
        self.remedies.push(remedy);
        self
    }

    /// Keeps the error this one came from.
    pub fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        self.source = Some(source.into());
        self
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

/// A table pointer as the API gives it (in conflicts, and in `control-plane`'s answers).
pub fn pointer(p: &lh_catalog::TablePointer) -> lh_api::TablePointer {
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
        let remedies = match e.kind() {
            K::RefNotFound => vec![Remedy::ListRefs],
            K::TableNotFound => vec![Remedy::ListTables { at: None }],
            _ => Vec::new(),
        };
        let hint = match e.kind() {
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
            K::Storage => Some(
                "the catalog's database failed or could not be reached (the server log has the details); try again once it answers"
                    .to_string(),
            ),
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
            code: e.kind().into(),
            message: e.message().to_string(),
            hint,
            remedies,
            conflicts,
            source: Some(Box::new(e)),
        }
    }
}

impl From<iceberg::Error> for Error {
    fn from(e: iceberg::Error) -> Self {
        Error::new(Kind::Internal, Code::Iceberg, format!("Iceberg: {e}")).with_source(e)
    }
}

impl From<duckdb::Error> for Error {
    fn from(e: duckdb::Error) -> Self {
        Error::new(Kind::Internal, Code::Duckdb, format!("DuckDB: {e}")).with_source(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::new(Kind::Internal, Code::Io, format!("I/O: {e}")).with_source(e)
    }
}

/// A table version's file is gone: what `lh gc` does to commits past the server's
/// retention (`--retain`), or a damaged warehouse.
pub fn collected(what: &str) -> Error {
    Error::not_found(
        Code::Collected,
        format!("a file this table version reads is gone: {what}"),
    )
    .with_hint(
        "commits past the server's retention (its --retain rules; main keeps 90 days, run/* 7, other branches 30) have their files freed by garbage collection; read a ref or a newer commit",
    )
}

/// The table property that lets lh make an Iceberg REST client's stale append again on
/// the table as it is now (the tables' `rebase_append`); off unless set to `true`.
pub const REBASE_APPENDS: &str = "lh.rebase-appends";

/// Whether a commit or snapshot property is one of lh's own (`lh.run`, `lh.node`,
/// `lh.operation`, ...: provenance that run take-over, memoization and bisect read),
/// which no client may set.
pub fn is_reserved_property(key: &str) -> bool {
    key.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("lh."))
}

/// Whether a client may set this table property: any but lh's own (`lh.*`), except the
/// settings lh documents for users (`lh.rebase-appends`).
pub fn client_table_property(key: &str) -> bool {
    !is_reserved_property(key) || key.eq_ignore_ascii_case(REBASE_APPENDS)
}

/// A client set one of lh's own properties.
pub fn reserved_property(key: &str) -> Error {
    Error::bad_request(
        Code::InvalidArgument,
        format!("the property '{key}' is reserved: lh's own properties (lh.*) record provenance and are set by lh alone"),
    )
    .with_hint("name your own properties without the lh. prefix")
}
