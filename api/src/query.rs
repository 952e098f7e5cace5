//! Queries: the request, and the JSON form of an answer (Arrow IPC is the other).

#[allow(unused_imports)]
use super::*;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueryRequest {
    pub sql: String,
    /// A ref expression; the server's default branch when absent.
    #[serde(default, rename = "ref")]
    pub reference: Option<String>,
    /// Lower the server's timeout for this query.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Return at most this many rows (the `x-lh-truncated` header says when some were cut).
    #[serde(default)]
    pub max_rows: Option<u64>,
    /// A name for this query (1 to 64 letters, digits, `-` or `_`) by which its caller
    /// may ask how far it is while it runs (`GET /api/v1/query/progress/{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_id: Option<String>,
}

/// How far a running query is.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueryProgress {
    /// Percent done, as DuckDB's progress bar says; null while DuckDB cannot tell.
    pub percentage: Option<f64>,
}

/// A query's result as JSON (`Accept: application/json`), for pages and scripts that
/// have no Arrow reader; clients that do read the Arrow stream.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueryJson {
    pub columns: Vec<QueryColumn>,
    /// Each row's values formatted as text, as `lh query` prints them; null stays null.
    pub rows: Vec<Vec<Option<String>>>,
    /// Whether `max_rows` cut the result short.
    pub truncated: bool,
    /// The commit read.
    pub commit: String,
    /// The data files the query read (after pruning).
    pub files_read: u64,
    /// The time the server took, from the request to the answer.
    pub elapsed_ms: u64,
}

/// A column of a query's result.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueryColumn {
    pub name: String,
    /// The Arrow type (`Int64`, `Utf8`, `Decimal128(15, 2)`, ...).
    #[serde(rename = "type")]
    pub r#type: String,
}
