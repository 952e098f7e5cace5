//! Tables: listings, details, imports, drops, and their maintenance (compaction,
//! expiry, garbage collection).

#[allow(unused_imports)]
use super::*;

/// A table at a ref, as listed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TableSummary {
    pub name: String,
    pub pointer: TablePointer,
    /// With `stats=true`: its rows, bytes and last change, from its current snapshot's
    /// summary (absent where the writer left them out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
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
    /// The partitions of the current snapshot's data files, in order of their values
    /// (at most [`MAX_PARTITIONS_SHOWN`]; `partition_count` says how many there are).
    #[serde(default)]
    pub partitions: Vec<PartitionInfo>,
    #[serde(default)]
    pub partition_count: u64,
}

/// The most partitions a table's detail lists.
pub const MAX_PARTITIONS_SHOWN: usize = 1000;

/// One partition of a table: its values as the user reads them (`ts_day=2026-11-03`),
/// and its data files' rows, files and bytes (rows before deletes).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PartitionInfo {
    pub partition: String,
    /// The spec its files were written with.
    pub spec_id: i32,
    pub rows: u64,
    pub files: u64,
    pub size_bytes: u64,
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
