//! The wire types of lh's HTTP API (`/api/v1`), shared by the server and the CLI, so
//! that both sides of every request are one definition. JSON field names are the API's
//! contract: scripts read `lh --output json`, which prints these types.

pub mod config_file;
pub mod env_vars;
pub mod remedy;

pub mod units;

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

/// How requests are authenticated, and who is asking.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuthInfo {
    /// `tokens` (bearer tokens), or `off` (`--no-auth`, on a loopback address only).
    pub mode: String,
    /// The identity of the request that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// `POST /api/v1/tokens`: a new bearer token.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct TokenCreate {
    /// What the token is for [default: the user's name].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The user it authenticates (the author of its changes) [default: the caller].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A built-in role (`reader`, `writer`, `maintainer`, `admin`) or one an admin
    /// defined (`lh role set`) [default: `reader`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Seconds until it expires [default: never].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_secs: Option<u64>,
}

/// A token as listed: never its secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub user: String,
    pub role: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
    /// When it last authenticated a request (to the minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<DateTime<Utc>>,
}

/// One request of the audit log (`lh audit`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    pub at: DateTime<Utc>,
    pub user: String,
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// The permission the route needs: write, run, merge or admin.
    pub action: String,
    pub method: String,
    /// The route as the server declares it (`/api/v1/refs/{name}/assign`).
    pub route: String,
    /// The path as asked (`/api/v1/refs/main/assign`).
    pub path: String,
    /// The answer's status: 2xx done, 401/403 refused, others failed.
    pub status: u16,
    /// The peer address the request came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditList {
    pub entries: Vec<AuditEntry>,
}

/// A role: its grants, each `ACTIONS on REFS [in NAMESPACES]` (`lh role ls`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RoleInfo {
    pub name: String,
    /// One of `reader`, `writer`, `maintainer`, `admin` (not changeable).
    pub builtin: bool,
    pub grants: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RoleList {
    pub roles: Vec<RoleInfo>,
}

/// `PUT /api/v1/roles/{name}`: the role's grants (replacing any it had).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RoleSet {
    /// Each `ACTIONS on REFS [in NAMESPACES]`: `write,run on team-a.* in sales`.
    pub grants: Vec<String>,
}

/// A pipeline secret, as listed: never its value.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SecretInfo {
    pub name: String,
    /// Grows with each `lh secret set` (functions using it run again).
    pub version: i64,
    /// The branches whose runs get it (a pattern: `main`, `team-a.*`, `*`).
    pub refs: String,
    pub updated_by: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
}

/// `PUT /api/v1/secrets/{name}`.
#[derive(Deserialize, Serialize, ToSchema)]
pub struct SecretSet {
    pub value: String,
    /// The branches whose runs get it [default: `*`, every run].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<String>,
}

impl std::fmt::Debug for SecretSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretSet { value: *** }")
    }
}

/// A new token: the secret is in this answer and nowhere else.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenCreated {
    pub token: String,
    pub info: TokenInfo,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RefKind {
    Branch,
    Tag,
}

impl RefKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RefKind::Branch => "branch",
            RefKind::Tag => "tag",
        }
    }
}

/// A branch or a tag.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RefInfo {
    pub name: String,
    pub kind: RefKind,
    /// The commit it names.
    pub head: String,
    /// A protected branch changes only by a merge (`lh branch protect`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protected: bool,
    /// The checks a merge into it must pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_checks: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateRef {
    pub name: String,
    pub kind: RefKind,
    /// A ref expression; the server's default branch when absent.
    #[serde(default)]
    pub from: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AssignRef {
    /// The commit the branch must be at.
    pub expected: String,
    /// A ref expression naming the new head.
    pub to: String,
}

/// A commit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CommitInfo {
    pub id: String,
    pub parents: Vec<String>,
    pub author: String,
    pub message: String,
    pub timestamp: DateTime<Utc>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LogPage {
    pub commits: Vec<CommitInfo>,
    /// Pass as `page_token` for the next page; absent at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Added,
    Removed,
    Changed,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TableDiff {
    pub table: String,
    pub change: Change,
    pub from: Option<TablePointer>,
    pub to: Option<TablePointer>,
    /// The rows added and removed (asked for with `rows=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<RowCounts>,
    /// Why the rows could not be counted (a table lh cannot read, a timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_error: Option<String>,
    /// Columns added, dropped, renamed or retyped, matched by Iceberg field id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schema_changes: Vec<SchemaChange>,
}

/// How many rows a table's change added, removed and (with a key) changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RowCounts {
    pub added: u64,
    pub removed: u64,
    /// Rows whose key is on both sides with other values (only with a key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<u64>,
}

/// A change of a table's columns between two versions, by Iceberg field id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SchemaChange {
    pub change: SchemaChangeKind,
    /// The column's name (nested fields dotted): the newer one, or the dropped one's.
    pub column: String,
    /// What it was: the old name (renamed) or the old type (retyped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// What it is: the new name, or the new type (retyped, added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SchemaChangeKind {
    Added,
    Dropped,
    Renamed,
    Retyped,
}

/// The rows that differ in one table between two refs (`GET /api/v1/diff/rows`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RowDiffResponse {
    pub from: String,
    pub to: String,
    pub from_commit: String,
    pub to_commit: String,
    pub table: String,
    /// The key rows are matched by; empty: rows are only added or removed.
    pub key: Vec<String>,
    /// The columns compared (those both versions have, by field id), with the newer
    /// version's names and DuckDB types.
    pub columns: Vec<QueryColumn>,
    pub counts: RowCounts,
    pub schema_changes: Vec<SchemaChange>,
    /// The rows, at most `limit`: changed, then added, then removed, each by key.
    pub rows: Vec<RowChange>,
    /// Whether `limit` left rows out.
    pub truncated: bool,
    pub scan: DiffScan,
    pub elapsed_ms: u64,
}

/// One row of a row diff: its values as text (as `lh query` prints them; null as null)
/// in `columns` order: the new values of an added or changed row, the old ones of a
/// removed row.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RowChange {
    pub change: Change,
    pub values: Vec<Option<String>>,
    /// A changed row's old values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Vec<Option<String>>>,
    /// A changed row's columns whose values differ.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_columns: Vec<String>,
}

/// What a row diff read: data files of each version, those both share (skipped: their
/// rows are the same on both sides), and whether every row had to be compared.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct DiffScan {
    pub files_from: u64,
    pub files_to: u64,
    pub files_shared: u64,
    /// Data files read, of both versions.
    pub files_read: u64,
    /// Why every file was compared, when the shared ones could not be skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_because: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DiffResponse {
    pub from: String,
    pub to: String,
    /// The commits the two refs resolved to.
    pub from_commit: String,
    pub to_commit: String,
    pub tables: Vec<TableDiff>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MergeRequest {
    /// A ref expression: what to merge.
    pub from: String,
    /// The branch to merge into.
    pub into: String,
    #[serde(default)]
    pub message: Option<String>,
    /// Refuse unless `into` is at this commit.
    #[serde(default)]
    pub expected_head: Option<String>,
    /// Make a merge commit even when a fast-forward is possible.
    #[serde(default)]
    pub no_fast_forward: bool,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MergeKind {
    UpToDate,
    FastForward,
    MergeCommit,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MergeResponse {
    pub into: String,
    /// The target's head after the merge; for a dry run, the commit it would be.
    pub head: String,
    pub kind: MergeKind,
    /// A preview (`POST /api/v1/merge/preview`, `lh merge --dry-run`): nothing moved.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// The tables the merge brought in.
    pub tables: Vec<TableDiff>,
    /// The checks a protected target required, each passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
    /// Columns (or tables) the merge dropped, renamed or retyped that the last runs of
    /// projects on the target read (a project whose run on the merged branch made the
    /// table aside): they may fail on their next run. A warning: the merge is made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breaking: Vec<BreakingChange>,
    /// Why breaking changes could not be looked for (the merge is made all the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaking_unknown: Option<String>,
}

/// A change a merge brought that readers elsewhere may not survive.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BreakingChange {
    pub table: String,
    /// The column dropped, renamed or retyped; absent: the table itself was dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<SchemaChange>,
    /// The models and expectations that read it, in the last succeeded run of each
    /// project on the target (other than a project whose run on the merged branch
    /// made the table).
    pub readers: Vec<ColumnReader>,
    /// Readers the caller may not see (they touch tables it may not read), counted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hidden_readers: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A node of a project's run that reads a column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ColumnReader {
    pub project: String,
    /// A model's table, or an expectation's function.
    pub node: String,
    /// `model` or `expectation`.
    pub kind: String,
    /// The run it was last part of.
    pub run: String,
}

/// One check's verdict on a merge's would-be result.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CheckResult {
    pub name: String,
    /// `webhook` or `expectations`.
    pub kind: String,
    pub passed: bool,
    /// The hook's answer, or the expectations' outcome.
    pub message: String,
    pub millis: u64,
}

/// `POST /api/v1/refs/{name}/protect`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct ProtectRequest {
    /// Checks every merge into the branch must pass (replacing any it had).
    #[serde(default)]
    pub require_checks: Vec<String>,
}

/// `POST /api/v1/checks`: a check a protected branch can require. Exactly one of
/// `webhook` and `upload` is given.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CheckCreate {
    pub name: String,
    /// A URL POSTed the merge's diff; a 2xx answer passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    /// An uploaded lh project (as for a run) whose expectations run on the merge's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<String>,
    /// The webhook's shared secret: requests carry `X-Lh-Signature: sha256=HMAC(body)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// How long the check may take [default: 10 s for a webhook, 600 s for expectations].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CheckInfo {
    pub name: String,
    pub kind: String,
    /// The webhook's URL, or the project's code snapshot.
    pub target: String,
    pub timeout_secs: u64,
    /// Whether its requests are signed.
    pub signed: bool,
    /// The branches that require it.
    pub branches: Vec<String>,
    pub updated_by: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CheckList {
    pub checks: Vec<CheckInfo>,
}

/// `POST /api/v1/hooks`: a webhook told of every merge into the branches it matches
/// (after the fact, with retries; it never blocks).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct HookCreate {
    pub name: String,
    pub url: String,
    /// A branch name pattern (`*` for any run of characters) [default: `*`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HookInfo {
    pub name: String,
    pub url: String,
    pub refs: String,
    pub signed: bool,
    pub updated_by: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HookList {
    pub hooks: Vec<HookInfo>,
}

/// A table at a ref, as listed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TableSummary {
    pub name: String,
    pub pointer: TablePointer,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TableList {
    /// The commit listed.
    pub commit: String,
    pub tables: Vec<TableSummary>,
}

/// One column of a table's schema.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Column {
    pub id: i32,
    pub name: String,
    /// The Iceberg type (`long`, `string`, `decimal(12,2)`, `list<int>`...).
    #[serde(rename = "type")]
    pub data_type: String,
    pub required: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotInfo {
    pub snapshot_id: i64,
    pub parent_id: Option<i64>,
    pub timestamp: DateTime<Utc>,
    /// `append`, `overwrite`, `replace`, `delete`.
    pub operation: String,
    #[serde(default)]
    pub summary: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TableDetail {
    pub name: String,
    /// The commit read.
    pub commit: String,
    pub pointer: TablePointer,
    pub location: String,
    pub format_version: u8,
    pub columns: Vec<Column>,
    /// Rows, data files and bytes of the current snapshot (0 for an empty table). Rows
    /// net of position deletes, not of equality deletes (whose effect only a scan knows).
    pub rows: u64,
    pub files: u64,
    pub size_bytes: u64,
    /// Delete files of the current snapshot (merge-on-read writes of other engines).
    #[serde(default)]
    pub delete_files: u64,
    /// Newest first.
    pub snapshots: Vec<SnapshotInfo>,
    /// The partition spec new data is written with, as `--partition-by` takes it
    /// (`day(ts), bucket(16, id)`); empty for an unpartitioned table.
    #[serde(default)]
    pub partition_by: String,
    /// The id of that spec (tables partitioned more than once keep older specs' files).
    #[serde(default)]
    pub partition_spec_id: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ImportMode {
    Create,
    Append,
    Replace,
    /// Replace exactly the partitions the new rows fall in, keep the others (Iceberg's
    /// dynamic overwrite); the whole table when it is unpartitioned.
    #[serde(rename = "overwrite_partitions")]
    OverwritePartitions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    Csv,
    Parquet,
    Json,
}

impl FileFormat {
    /// The format a file name's extension says (`.csv`, `.parquet`, `.json`/`.ndjson`/`.jsonl`,
    /// also compressed `.csv.gz`...).
    pub fn from_path(path: &str) -> Option<FileFormat> {
        let lower = path.to_ascii_lowercase();
        let stem = lower
            .strip_suffix(".gz")
            .or_else(|| lower.strip_suffix(".zst"))
            .unwrap_or(&lower);
        if stem.ends_with(".csv") || stem.ends_with(".tsv") {
            Some(FileFormat::Csv)
        } else if stem.ends_with(".parquet") || stem.ends_with(".pq") {
            Some(FileFormat::Parquet)
        } else if stem.ends_with(".json") || stem.ends_with(".ndjson") || stem.ends_with(".jsonl") {
            Some(FileFormat::Json)
        } else {
            None
        }
    }
}

/// An uploaded file, ready to import.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Upload {
    pub id: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ImportRequest {
    /// The branch to write.
    #[serde(rename = "ref")]
    pub reference: String,
    pub mode: ImportMode,
    /// Uploads to import, in order; all of one format.
    pub uploads: Vec<String>,
    /// The format; from the uploads' file names when absent.
    #[serde(default)]
    pub format: Option<FileFormat>,
    /// The names the user gave the files, for messages.
    #[serde(default)]
    pub file_names: Vec<String>,
    /// The partition spec of a table created (or, with `replace`, repartitioned):
    /// `day(ts), bucket(16, id)`; identity, year, month, day, hour, bucket, truncate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_by: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ImportResponse {
    pub table: String,
    pub commit: String,
    pub snapshot_id: Option<i64>,
    pub rows: u64,
    pub files: u64,
    pub bytes: u64,
    /// Partitions written (0 for an unpartitioned table).
    #[serde(default)]
    pub partitions: u64,
    /// Times the write was rebased onto a table other writes had moved meanwhile
    /// (appends commute; see `lh table import --help`).
    #[serde(default)]
    pub rebased: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DropResponse {
    pub table: String,
    pub commit: String,
}

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

/// Start a pipeline run (`lh run`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunRequest {
    /// An upload of the project folder as a tar archive.
    pub upload: String,
    /// The branch to publish to.
    #[serde(rename = "ref")]
    pub reference: String,
    /// `--param` values, as given (parsed by the declared types).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Run every node, even when an earlier run made the same output.
    #[serde(default)]
    pub no_cache: bool,
    /// Failed warning expectations also stop the run from publishing.
    #[serde(default)]
    pub strict: bool,
    /// The partitions to run, for a project whose models run per partition: one
    /// (`2026-11-03`), a range (`2026-11-01..2026-11-30`, both included) or a list
    /// (`eu,us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<String>,
    /// A plan (`POST /api/v1/runs/plan`) also says, for each node, whether it would
    /// run or reuse an earlier output and why, and for each SQL model whose query
    /// changed since the project's last run, what kind of change it is (`lh run --plan`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changes: bool,
    /// A check instead of a run (`lh bisect --expectation`): only the project's
    /// expectations run, reading every table as it is at a commit of the branch;
    /// nothing is written or published. The run is recorded like any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<RunCheck>,
}

/// What a check run reads and runs (`RunRequest.check`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RunCheck {
    /// The commit whose tables the expectations read: a ref expression on the run's
    /// branch (`main`, `main@<hash>`, `main@<time>`).
    pub at: String,
    /// The expectations to run, each `function` or `file:function` (the file relative
    /// to the project's folder); empty: every expectation of the project.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expectations: Vec<String>,
}

/// A failed expectation's error when it ran and answered false (any other error is
/// the expectation failing to run: an exception, a missing table).
pub const EXPECTATION_NOT_MET: &str = "the expectation is not met";

/// What a run would do with a node, and what changed in it (`lh run --plan`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlannedChange {
    /// `run`, `reuse`, or `reuse?` (a Python model whose key matches but whose
    /// environment's lock is known only once it is resolved).
    pub action: String,
    /// Why: what differs from the key of the table's newest memoized output.
    pub reasons: Vec<String>,
    /// A SQL model whose query changed since the project's last run: `breaking` (a
    /// column removed or retyped that a downstream node reads), `non-breaking`, or
    /// `metadata-only` (the same parsed query: comments, layout); `unknown` when its
    /// output's columns cannot be had (the reason in `details`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// What the category rests on: columns added, removed, retyped, and who reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// The run whose code the query was compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared_with: Option<String>,
}

/// Column-level lineage of a table or column (`GET /api/v1/lineage`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LineageResponse {
    #[serde(rename = "ref")]
    pub reference: String,
    pub table: String,
    /// The column; absent: every column of the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// The steps that lead to it, nearest first.
    pub upstream: Vec<LineageEdge>,
    /// The steps that lead from it, nearest first.
    pub downstream: Vec<LineageEdge>,
    /// Models whose lineage could not be read, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unresolved: Vec<String>,
}

/// A model makes the column `to` (`namespace.table.column`) from the column `from`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LineageEdge {
    pub from: String,
    pub to: String,
    pub node: String,
    pub project: String,
}

/// Replay a run (`lh rerun`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RerunRequest {
    /// Reuse the outputs of the nodes that succeeded.
    #[serde(default)]
    pub from_failed: bool,
    /// New code (an upload of the project folder); the run's own code when absent.
    #[serde(default)]
    pub upload: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_final(self) -> bool {
        self != RunStatus::Running
    }
}

/// A node's state. Expectations end `passed`, `failed` or `warned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    Waiting,
    Running,
    Cached,
    Done,
    Passed,
    Warned,
    Failed,
    Skipped,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Waiting => "waiting",
            NodeStatus::Running => "running",
            NodeStatus::Cached => "cached",
            NodeStatus::Done => "done",
            NodeStatus::Passed => "passed",
            NodeStatus::Warned => "warned",
            NodeStatus::Failed => "failed",
            NodeStatus::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<NodeStatus> {
        Some(match s {
            "waiting" => NodeStatus::Waiting,
            "running" => NodeStatus::Running,
            "cached" => NodeStatus::Cached,
            "done" => NodeStatus::Done,
            "passed" => NodeStatus::Passed,
            "warned" => NodeStatus::Warned,
            "failed" => NodeStatus::Failed,
            "skipped" => NodeStatus::Skipped,
            _ => return None,
        })
    }

    pub fn is_final(self) -> bool {
        !matches!(self, NodeStatus::Waiting | NodeStatus::Running)
    }
}

/// One node of a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunNode {
    pub name: String,
    /// `model` or `expectation`.
    pub kind: String,
    /// `python` or `sql`.
    pub language: String,
    pub status: NodeStatus,
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub finished_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub rows: Option<u64>,
    /// The node's output came from an earlier run (memoization or `--from-failed`).
    #[serde(default)]
    pub cached: bool,
    /// Why a model's output was or was not reused: the run it came from, or the parts of
    /// its key (code, environment, parameters, inputs) that changed since the last time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub traceback: Option<String>,
    /// What a failed expectation said.
    #[serde(default)]
    pub detail: Option<String>,
    /// The tables it reads.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// The nodes it runs after (the producers of its inputs, and what it waits for):
    /// the edges of the run's DAG.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// For a model: the snapshot it made (or reused).
    #[serde(default)]
    pub output: Option<TablePointer>,
    /// The node's file and line.
    pub location: String,
}

/// A run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunInfo {
    pub id: String,
    pub project: String,
    pub author: String,
    /// The branch it publishes to.
    pub target: String,
    /// The temporary branch it writes on (kept after a failure).
    pub run_branch: String,
    /// The content hash of the code snapshot.
    pub code_hash: String,
    /// The commit of the target the run read.
    pub input_commit: String,
    /// A check's run: only expectations, on the tables at `input_commit`, publishing
    /// nothing (a protected branch's merge check, `lh bisect --expectation`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub check: bool,
    pub params: BTreeMap<String, serde_json::Value>,
    pub status: RunStatus,
    #[serde(default)]
    pub error: Option<String>,
    /// The merge commit that published it.
    #[serde(default)]
    pub merge_commit: Option<String>,
    pub no_cache: bool,
    pub strict: bool,
    #[serde(default)]
    pub rerun_of: Option<String>,
    pub created_at: DateTime<Utc>,
    #[serde(default)]
    pub finished_at: Option<DateTime<Utc>>,
    /// Python environment key to its lock (`uv pip freeze`).
    #[serde(default)]
    pub environments: BTreeMap<String, String>,
    pub nodes: Vec<RunNode>,
    /// Nodes left out of `nodes` because they touch tables the caller may not read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hidden_nodes: usize,
    /// For a partitioned run: each partition and the state of its nodes (`failed` when
    /// one failed, `running`, `waiting`, `skipped`, `cached` when every one was reused,
    /// `done`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<RunPartition>,
}

/// A partition of a partitioned run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunPartition {
    pub partition: String,
    pub status: NodeStatus,
    /// Its nodes (the instances of the partitioned models).
    pub nodes: Vec<String>,
}

impl RunPartition {
    /// The partitions of a run's nodes, by their names (`analytics.t[2026-11-03]`), in
    /// the order they first appear.
    pub fn of(nodes: &[RunNode]) -> Vec<RunPartition> {
        let mut out: Vec<RunPartition> = Vec::new();
        for n in nodes {
            let Some(label) = n
                .name
                .strip_suffix(']')
                .and_then(|s| s.rsplit_once('['))
                .map(|(_, p)| p)
            else {
                continue;
            };
            match out.iter_mut().find(|p| p.partition == label) {
                Some(p) => p.nodes.push(n.name.clone()),
                None => out.push(RunPartition {
                    partition: label.to_string(),
                    status: NodeStatus::Done,
                    nodes: vec![n.name.clone()],
                }),
            }
        }
        for p in &mut out {
            let states: Vec<NodeStatus> = nodes
                .iter()
                .filter(|n| p.nodes.contains(&n.name))
                .map(|n| n.status)
                .collect();
            p.status = [
                NodeStatus::Failed,
                NodeStatus::Running,
                NodeStatus::Waiting,
                NodeStatus::Skipped,
            ]
            .into_iter()
            .find(|s| states.contains(s))
            .unwrap_or(if states.iter().all(|s| *s == NodeStatus::Cached) {
                NodeStatus::Cached
            } else {
                NodeStatus::Done
            });
        }
        out
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunInfo>,
}

/// A planned node, as `lh run --dry-run` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlannedNode {
    pub name: String,
    pub kind: String,
    pub language: String,
    pub location: String,
    pub inputs: Vec<PlannedInput>,
    #[serde(default)]
    pub output: Option<String>,
    /// Python nodes: the interpreter version and the packages.
    #[serde(default)]
    pub python: Option<String>,
    #[serde(default)]
    pub packages: BTreeMap<String, String>,
    /// Asked for with `changes`: what a run would do with it, and what changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<PlannedChange>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlannedInput {
    pub table: String,
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    #[serde(default)]
    pub filter: Option<String>,
    /// The node that makes it, or none when it is read from the branch.
    #[serde(default)]
    pub producer: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlanResponse {
    pub project: String,
    pub namespace: String,
    #[serde(rename = "ref")]
    pub reference: String,
    pub params: BTreeMap<String, serde_json::Value>,
    /// In execution order.
    pub nodes: Vec<PlannedNode>,
}

/// A compaction of a table on a branch (`POST /api/v1/tables/{name}/compact`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CompactRequest {
    /// The branch; the server's default branch when absent.
    #[serde(rename = "ref", default)]
    pub reference: Option<String>,
    /// The size files are written at; files under three quarters of it are small.
    /// 256 MiB when absent.
    #[serde(default)]
    pub target_file_size: Option<u64>,
}

/// What a compaction did: one commit that changes no row, or nothing.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CompactResponse {
    pub table: String,
    /// The commit made; the head it found when there was nothing to compact.
    pub commit: String,
    pub compacted: bool,
    /// Data files of the table before and after.
    pub files_before: u64,
    pub files_after: u64,
    /// Delete files applied to the rows rewritten, and removed.
    pub delete_files_removed: u64,
    /// Data files rewritten, and the rows they held.
    pub files_rewritten: u64,
    pub rows: u64,
}

/// An expiry of a table's snapshots on a branch
/// (`POST /api/v1/tables/{name}/expire`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExpireRequest {
    /// The branch; the server's default branch when absent.
    #[serde(rename = "ref", default)]
    pub reference: Option<String>,
    /// Only snapshots at least this old go; 30 days when absent.
    #[serde(default)]
    pub older_than_secs: Option<u64>,
}

/// What an expiry did: one commit that changes no row, or nothing.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExpireResponse {
    pub table: String,
    /// The commit made; the head it found when nothing expired.
    pub commit: String,
    /// Snapshots in the table's metadata before and after.
    pub snapshots_before: u64,
    pub snapshots_after: u64,
    pub expired: u64,
    /// The commits the server's retention keeps (whose snapshots stay).
    pub kept_commits: u64,
}

/// A garbage collection of the warehouse (`POST /api/v1/gc`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GcRequest {
    /// Only files last modified at least this long ago are candidates (at least a day,
    /// so that writes in flight keep their files); three days when absent.
    #[serde(default)]
    pub older_than_secs: Option<u64>,
    /// List what would be removed, and remove nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// What a garbage collection found and did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GcResponse {
    pub dry_run: bool,
    pub older_than_secs: u64,
    /// Distinct table metadata files the catalog's commits point at.
    pub table_versions: u64,
    /// Files in the warehouse.
    pub scanned_files: u64,
    /// Files some commit reaches (metadata, manifest lists, manifests, data files).
    pub live_files: u64,
    /// Files no commit reaches, kept because they are younger than `older_than_secs`
    /// or in a folder a write of this server is filling.
    pub recent_files: u64,
    /// Files outside lh's table folders (`<namespace>/<table>-<uuid>/`), never removed.
    pub foreign_files: u64,
    /// Files no commit reaches, removed (or, in a dry run, to remove).
    pub removed_files: u64,
    pub removed_bytes: u64,
    /// Empty folders removed with them, or left empty by failed writes (not counted in
    /// a dry run).
    #[serde(default)]
    pub removed_folders: u64,
    /// The first of them (at most 1000), relative to the warehouse.
    pub removed: Vec<String>,
    /// Table versions some commit points at that could not be read, with why: their
    /// table folders are left whole (`protected_files` files), the rest is collected.
    #[serde(default)]
    pub unreadable: Vec<String>,
    #[serde(default)]
    pub protected_files: u64,
}
