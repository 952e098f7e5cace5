//! The wire types of lh's HTTP API (`/api/v1`), shared by the server and the CLI, so
//! that both sides of every request are one definition. JSON field names are the API's
//! contract: scripts read `lh --output json`, which prints these types.

mod access;
pub mod config_file;
pub mod env_vars;
mod query;
mod refs;
pub mod remedy;
mod runs;
mod tables;
pub mod units;

pub use access::*;
pub use query::*;
pub use refs::*;
pub use runs::*;
pub use tables::*;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The port `lh server` listens on, and the CLI talks to, when none is configured.
pub const DEFAULT_PORT: u16 = 7878;

/// The HTTP header carrying the request id, on every response.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// On a query result: the commit the query read.
pub const COMMIT_HEADER: &str = "x-lh-commit";
/// On a query result: present when `max_rows` cut the result short.
pub const TRUNCATED_HEADER: &str = "x-lh-truncated";
/// The data files a query's views read, after pruning by its filters (in the answer's
/// headers).
pub const FILES_READ_HEADER: &str = "x-lh-files-read";
/// The media type of query results.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// What went wrong, as every error response carries it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable identifier: `ref_not_found`, `table_not_found`, `conflict`, `sql_error`...
    pub kind: String,
    pub message: String,
    /// What the user can do about it, when there is something, in words (the error's
    /// own hint, then its remedies').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The typed remedies of the hint, which a client may word its own way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remedies: Vec<remedy::Remedy>,
    /// The tables that blocked a commit or a merge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<TableConflict>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TableConflict {
    pub table: String,
    /// What the writer expected, or what the merge base held.
    pub expected: Option<TablePointer>,
    /// What the target holds now.
    pub actual: Option<TablePointer>,
    /// For a merge: what the source holds (`null` when the source deleted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incoming: Option<Option<TablePointer>>,
}

/// Where a table's state lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TablePointer {
    pub metadata_location: String,
    pub table_uuid: String,
    pub snapshot_id: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ServerInfo {
    pub version: String,
    /// Where the catalog is (`sqlite:/path`, `postgres://host:port/db`), no secrets.
    pub catalog: String,
    /// The warehouse URL, where table files go.
    pub warehouse: String,
    pub default_branch: String,
    /// Query limits of this server.
    pub query_timeout_ms: u64,
    pub max_result_bytes: u64,
    /// Where Python functions run, with the pool's state.
    #[serde(default)]
    pub runtime: String,
    /// An S3 warehouse's bucket and how it is reached (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageInfo>,
    /// How requests are authenticated (absent from servers before tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthInfo>,
}

/// How the server reaches an S3 warehouse: no secret, only where the key came from.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StorageInfo {
    pub bucket: String,
    pub prefix: String,
    pub endpoint: String,
    pub region: String,
    pub path_style: bool,
    /// `environment` or `profile NAME`.
    pub credentials_from: String,
    /// Whether the Iceberg REST catalog gives clients credentials
    /// (`X-Iceberg-Access-Delegation: vended-credentials`).
    pub vends_credentials: bool,
    /// The least role they are vended to (`admin` unless configured).
    #[serde(default)]
    pub vend_credentials_to: String,
    /// The read cache of data files on the server's disk, in bytes.
    pub cache_bytes: u64,
}
