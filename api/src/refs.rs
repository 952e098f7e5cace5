//! Refs and their history: branches and tags, commits, logs, diffs (of tables and of
//! rows), merges, and what guards them (protection, checks, hooks).

#[allow(unused_imports)]
use super::*;

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
    /// A table changed on both sides: `source-wins` takes the source's version,
    /// `dest-wins` keeps the target's (none: the merge is refused, as a conflict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MergeStrategy>,
    /// Tables changed on both sides taken from the source, whatever `strategy` says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub take_source: Vec<String>,
    /// Tables changed on both sides kept as the target has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub take_dest: Vec<String>,
}

/// How a merge settles a table changed on both sides (lakeFS's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MergeStrategy {
    SourceWins,
    DestWins,
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

pub(crate) fn is_zero(n: &usize) -> bool {
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
