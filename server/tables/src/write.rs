//! Writing a table on a branch: create it from, append to, or replace it with rows from
//! a source: files (an import: CSV, Parquet or newline-delimited JSON) or a query over
//! tables (a SQL model), with bound parameters.
//!
//! DuckDB reads the source (the schema is inferred on create, checked on append,
//! evolved on replace) and writes the table's Parquet data files itself, with the
//! Iceberg field ids, into a folder of this write's own; lh then reads the files'
//! footers for the Iceberg metadata, makes the snapshot and commits, expecting the
//! table's pointer the write started from. On any failure the files written are
//! removed and the branch is untouched.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iceberg::spec::{
    FormatVersion, NestedField, Schema, SortOrder, TableMetadata, TableMetadataBuilder,
    UnboundPartitionSpec,
};
use lh_api::remedy::Remedy;
use lh_api::{FileFormat, ImportMode, ImportResponse};
use lh_catalog::CommitMeta;
use uuid::Uuid;

use super::commit::{Base, Put, WrittenPut};
use super::rebase::Rebases;
use super::snapshot::{self, SnapshotOp};
use super::types::{assignable, display_type, duckdb_field_ids, duckdb_type};
use super::{LoadedTable, Tables, require_branch, stats};
use crate::auth::Identity;
use crate::duck::{self, DuckLimits, quote_ident, quote_literal};
use crate::error::{Code, Error, Kind, Result};
use crate::warehouse::Staged;

/// Where the rows come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Files on the server (staged uploads, or a function's output).
    Files {
        format: FileFormat,
        files: Vec<PathBuf>,
        /// The files as the user knows them, for messages.
        names: Vec<String>,
    },
    /// A SELECT over tables exposed by `setup` (view statements), with parameters
    /// bound by name (`$run_date`), never pasted into the text.
    Query {
        setup: Vec<String>,
        sql: String,
        params: BTreeMap<String, serde_json::Value>,
        /// What the query is, for messages (`model analytics.orders`).
        label: String,
    },
    /// Data files of the warehouse already, of a table version `from` (a memoized
    /// output of a partitioned model, put back into its partitions): nothing is read
    /// or written but the table's metadata.
    DataFiles {
        files: Vec<iceberg::spec::DataFile>,
        /// The partition spec they were written with.
        spec_id: i32,
        from: Arc<TableMetadata>,
        label: String,
    },
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::Files { names, .. } => names.join(", "),
            Source::Query { label, .. } | Source::DataFiles { label, .. } => label.clone(),
        }
    }
}

/// One write.
#[derive(Debug, Clone)]
pub struct WriteJob {
    pub branch: String,
    pub table: String,
    pub mode: ImportMode,
    pub source: Source,
    /// Who writes: the commit's author, whose grants must allow the write.
    pub by: Identity,
    /// The ref `by`'s grants are checked on, when not `branch` (a run's target).
    pub grants_on: Option<String>,
    /// The commit message; a default describes the write.
    pub message: Option<String>,
    /// Extra commit properties (a run's id...).
    pub properties: BTreeMap<String, String>,
    /// How long reading the source and writing the files may take (a SQL model's
    /// timeout); past it DuckDB is interrupted and nothing is written.
    pub timeout: Option<Duration>,
    /// The partition spec of a table created, or repartitioned by a replace
    /// (`day(ts), bucket(16, id)`, see `partition::parse_spec`).
    pub partition_by: Option<String>,
    /// A rewrite (with mode append): the live data files the rows come from, which the
    /// new files replace in the same snapshot (a compaction).
    pub replaces: Option<Replaces>,
    /// A partition overwrite of one partition of a run: the rows must fall in it, and
    /// it replaces every partition of the table inside it (rows or none).
    pub within: Option<Within>,
}

/// The run partition an instance of a partitioned model writes.
#[derive(Debug, Clone)]
pub struct Within {
    /// The partition, for messages (`2026-11-03`).
    pub label: String,
    /// What every row must satisfy (on the output's columns).
    pub predicate: String,
    /// The table's partitions inside it now: replaced too, even by no rows.
    pub partitions: Vec<iceberg::spec::Struct>,
}

/// The files a rewrite replaces.
#[derive(Debug, Clone)]
pub struct Replaces {
    pub files: std::collections::BTreeSet<String>,
    /// Every delete file goes too (the rows read had them applied, and every data
    /// file of the table is rewritten).
    pub deletes: bool,
    /// Delete files of the table as read: one added meanwhile conflicts (its rows
    /// would come back).
    pub delete_files: std::collections::BTreeSet<String>,
}

/// One import, as the API received it.
#[derive(Debug, Clone)]
pub struct ImportJob {
    pub branch: String,
    pub table: String,
    pub mode: ImportMode,
    pub format: FileFormat,
    /// The staged files, on the server.
    pub files: Vec<PathBuf>,
    /// The files as the user named them, for messages.
    pub names: Vec<String>,
    pub by: Identity,
    pub partition_by: Option<String>,
}

/// Where writes may read and spill, and how many run at once.
#[derive(Debug, Clone)]
pub struct ImportContext {
    pub uploads: PathBuf,
    /// Where pipeline functions leave their outputs.
    pub outputs: PathBuf,
    /// Each write spills into a folder of its own under this one (DuckDB names its spill
    /// files by a per-database counter and, closing, deletes every `duckdb_temp_*` file
    /// of its folder: two writes sharing one would destroy each other's).
    pub spill: PathBuf,
    pub limits: DuckLimits,
    /// One permit per write running (imports, SQL models, pipeline outputs alike): each
    /// gets `limits.memory_limit`, so writes use at most that many times the memory.
    pub writers: Arc<tokio::sync::Semaphore>,
    /// Compact a table after an import or a run left more than this many small files in
    /// a partition (`maintenance::after_write`); off when `None`.
    pub auto_compact_files: Option<usize>,
}

impl ImportContext {
    pub fn new(
        uploads: PathBuf,
        outputs: PathBuf,
        spill: PathBuf,
        limits: DuckLimits,
        max_writers: usize,
    ) -> ImportContext {
        ImportContext {
            uploads,
            outputs,
            spill,
            limits,
            writers: Arc::new(tokio::sync::Semaphore::new(max_writers.max(1))),
            auto_compact_files: None,
        }
    }
}

/// Rows of one Parquet data file (DuckDB rolls files at this size).
const DATA_FILE_BYTES: &str = "512MB";

/// An import: files into a table.
pub async fn import(
    tables: &Tables,
    ctx: &ImportContext,
    job: ImportJob,
) -> Result<ImportResponse> {
    if job.files.is_empty() {
        return Err(Error::bad_request(
            Code::NoFiles,
            "an import needs at least one file",
        ));
    }
    let write = WriteJob {
        branch: job.branch,
        table: job.table,
        mode: job.mode,
        source: Source::Files {
            format: job.format,
            files: job.files,
            names: job.names,
        },
        by: job.by,
        grants_on: None,
        message: None,
        properties: BTreeMap::new(),
        timeout: None,
        partition_by: job.partition_by,
        replaces: None,
        within: None,
    };
    write_table(tables, ctx, write).await
}

/// Writes rows into a table on a branch, as one snapshot and one commit.
pub async fn write_table(
    tables: &Tables,
    ctx: &ImportContext,
    job: WriteJob,
) -> Result<ImportResponse> {
    lh_catalog::names::validate_table_name(&job.table)?;
    let resolved = tables.catalog.resolve(&job.branch).await?;
    require_branch(&job.branch, &resolved)?;
    let existing = tables.load(&resolved.commit, &job.table).await?;
    match (job.mode, &existing) {
        (ImportMode::Create, Some(_)) => {
            return Err(Error::new(
                Kind::Conflict,
                Code::AlreadyExists,
                format!("table '{}' already exists on '{}'", job.table, job.branch),
            )
            .with_remedy(Remedy::AppendOrReplace));
        }
        (ImportMode::Append | ImportMode::Replace | ImportMode::OverwritePartitions, None) => {
            return Err(Error::not_found(
                Code::TableNotFound,
                format!("table '{}' not found on '{}'", job.table, job.branch),
            )
            .with_remedy(Remedy::CreateTable));
        }
        _ => {}
    }
    if let Some(t) = &existing {
        super::snapshot::check_writable(&format!("table '{}'", job.table), &t.metadata)?;
        if let (Some(text), ImportMode::Append | ImportMode::OverwritePartitions) =
            (&job.partition_by, job.mode)
        {
            let m = &t.metadata;
            let same =
                super::partition::same_spec(text, m.default_partition_spec(), m.current_schema())?;
            if !same {
                return Err(Error::bad_request(
                    Code::BadPartitionSpec,
                    format!(
                        "table '{}' is partitioned by '{}'; an append keeps the table's partitioning",
                        job.table,
                        super::partition::describe(m.default_partition_spec(), m.current_schema())
                    ),
                )
                .with_remedy(Remedy::Repartition));
            }
        }
    }
    let table_uuid = Uuid::now_v7();
    let location = match &existing {
        Some(t) => t.metadata.location().trim_end_matches('/').to_string(),
        None => tables.warehouse.new_table_location(&job.table, &table_uuid),
    };
    let data_url = format!("{location}/data/{}", Uuid::now_v7().simple());
    let table_key = tables.warehouse.key(&location)?;
    // The table's folder on this machine (a local warehouse), removed again when a new
    // table's write fails.
    let table_dir = tables.warehouse.local_path(&location).ok();
    // Where DuckDB writes the data files: their folder, or (S3) a staging folder.
    let data_dir = tables.warehouse.write_dir(&data_url)?;

    let plan = WritePlan {
        job: job.clone(),
        ctx: ctx.clone(),
        base: existing.as_ref().map(|t| (*t.metadata).clone()),
        location: location.clone(),
        table_uuid,
        data_dir: data_dir.clone(),
        data_url,
        readable: tables.warehouse.readable_dirs(),
    };
    // Garbage collection leaves the folders this write fills alone until it is over.
    let _busy = tables.in_flight.enter(&table_key);
    // DuckDB's work runs on a blocking thread, which outlives this future when it is
    // dropped (a cancelled run, a client that went away): dropping interrupts it, and
    // the thread removes its own files when it fails.
    let stop = Stop::default();
    let _stop_on_drop = StopOnDrop(stop.clone());
    // A slot among the writes; the wait counts towards the write's time limit.
    let permit = match ctx.writers.clone().try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            tracing::info!(table = %job.table, "write queued: every write slot is busy");
            let acquire = ctx.writers.clone().acquire_owned();
            let acquired = match job.timeout {
                None => Ok(acquire.await),
                Some(limit) => tokio::time::timeout(limit, acquire).await,
            };
            match acquired {
                Ok(Ok(p)) => p,
                Ok(Err(_)) => return Err(Error::internal("the server is shutting down")),
                Err(_) => {
                    return Err(Error::new(
                        Kind::Timeout,
                        Code::Timeout,
                        format!(
                            "{} waited for a write slot longer than its time limit; nothing was written",
                            job.source.describe()
                        ),
                    ));
                }
            }
        }
    };
    let mut task = tokio::task::spawn_blocking({
        let (stop, data_dir, table_dir) = (stop.clone(), data_dir.clone(), table_dir.clone());
        let new_table = existing.is_none();
        move || {
            let _permit = permit;
            let _finish = Finish(stop.clone());
            let out = plan.run(&stop);
            if out.is_err() {
                let _ = std::fs::remove_dir_all(&data_dir);
                if let (true, Some(t)) = (new_table, &table_dir) {
                    let _ = std::fs::remove_dir_all(t);
                }
            }
            out
        }
    });
    let joined = match job.timeout {
        None => task.await,
        Some(limit) => match tokio::time::timeout(limit, &mut task).await {
            Ok(joined) => joined,
            Err(_) => {
                // DuckDB forgets an interrupt that lands between two statements: repeat
                // it until the thread is done.
                let joined = loop {
                    stop.stop();
                    tokio::select! {
                        j = &mut task => break j,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                };
                match joined {
                    // It finished as the time ran out: the work is done, keep it.
                    Ok(Ok(w)) => Ok(Ok(w)),
                    // A real error that came first is the error.
                    Ok(Err(e))
                        if e.code != Code::Interrupted
                            && !e.message.to_lowercase().contains("interrupt") =>
                    {
                        Ok(Err(e))
                    }
                    _ => {
                        return Err(Error::new(
                            Kind::Timeout,
                            Code::Timeout,
                            format!(
                                "{} timed out after {} s and was stopped; nothing was written",
                                job.source.describe(),
                                limit.as_secs_f64()
                            ),
                        )
                        .with_hint(
                            "raise the timeout (resources: {timeout: ...} in lh_project.yml)",
                        ));
                    }
                }
            }
        },
    };
    let written = joined.map_err(|e| Error::internal(format!("import task failed: {e}")))?;
    let cleanup = |uploaded: &[Staged]| {
        let _ = std::fs::remove_dir_all(&data_dir);
        if let (None, Some(t)) = (&existing, &table_dir) {
            let _ = std::fs::remove_dir_all(t);
        }
        // On S3 the data files were uploaded: they go too.
        let files: Vec<String> = uploaded.iter().map(|f| f.location.clone()).collect();
        tables.warehouse.remove_files(&files);
    };
    let mut written = written?;
    if let Some(w) = &job.within {
        for p in &w.partitions {
            if !written.partitions.contains(p) {
                written.partitions.push(p.clone());
            }
        }
    }
    // The data files reach the warehouse before any commit can name them. The table's
    // new files (manifests, manifest list, metadata file) need only their statistics:
    // they are made and written while the data files upload (on S3, round trips of
    // their own), and the catalog commits once both are done.
    let staged = written.staged.clone();
    // A write that finds its table moved is staged again on the new state, with the
    // same data files, when it commutes with what happened (see `rebase_check`).
    let again = written.clone();
    let (published, ready) = tokio::join!(
        tables.warehouse.publish(&data_dir, &staged),
        stage_write(tables, &job, existing.as_ref(), written)
    );
    let ready = match (published, ready) {
        (Ok(()), Ok(r)) => r,
        // A failed upload removed what it had uploaded; a written version dropped here
        // removes its files.
        (Err(e), _) => {
            cleanup(&[]);
            return Err(e);
        }
        (Ok(()), Err(e)) => {
            cleanup(&staged);
            return Err(e);
        }
    };
    // Writers of this table on this server commit one after the other; one that finds
    // the table moved rebases at once, on the state it reads under the lock.
    let lock = tables.commit_lock(&job.branch, &job.table);
    let _turn = lock.lock().await;
    let mut outcome = commit_staged(tables, &job, ready).await;
    let mut rebases = Rebases::new();
    let mut read = existing.clone();
    loop {
        match outcome {
            Ok(mut response) => {
                let rebased = rebases.count();
                response.rebased = rebased;
                if rebased > 0 {
                    tracing::info!(table = %job.table, rebased, "write rebased onto other writes");
                }
                return Ok(response);
            }
            Err(e)
                if e.code == Code::Conflict
                    && matches!(
                        job.mode,
                        ImportMode::Append | ImportMode::OverwritePartitions
                    )
                    && rebases.another() =>
            {
                let now = match async {
                    let head = tables.catalog.resolve(&job.branch).await?;
                    tables.load(&head.commit, &job.table).await
                }
                .await
                {
                    Ok(now) => now,
                    Err(_) => {
                        cleanup(&staged);
                        return Err(e);
                    }
                };
                if let Err(why) =
                    rebase_check(tables, &job, read.as_ref(), now.as_ref(), &again).await
                {
                    cleanup(&staged);
                    let mut e = e;
                    e.message = format!("{}; {why}", e.message);
                    return Err(e);
                }
                rebases.pause().await;
                let mut w = again.clone();
                if let Some(t) = &now {
                    w.base = (*t.metadata).clone();
                }
                outcome = match stage_write(tables, &job, now.as_ref(), w).await {
                    Ok(ready) => commit_staged(tables, &job, ready).await,
                    Err(e) => Err(e),
                };
                read = now;
            }
            // The catalog failed in a way that may have committed: the files stay (what
            // no commit reaches, `lh gc` removes later).
            Err(e) if e.commit_state_unknown() => return Err(e),
            // Refused: the transaction removed its own files; the data files go too.
            Err(e) => {
                cleanup(&staged);
                return Err(e);
            }
        }
    }
}

/// Whether a write staged on `read` may be staged again on `now`, the table as other
/// writes left it: an append commutes with appends and with writes to other partitions;
/// a partition replace with anything that left its partitions' files alone. A schema or
/// partitioning change, a table dropped or replaced, a rewritten history, and files
/// removed from (or, for a replace, added to) the partitions written still conflict.
async fn rebase_check(
    tables: &Tables,
    job: &WriteJob,
    read: Option<&LoadedTable>,
    now: Option<&LoadedTable>,
    w: &Written,
) -> std::result::Result<(), String> {
    let (Some(read), Some(now)) = (read, now) else {
        return Err("the table was dropped or created meanwhile".into());
    };
    let (a, b) = (&read.metadata, &now.metadata);
    if a.uuid() != b.uuid() {
        return Err("the table was replaced by another meanwhile".into());
    }
    if a.current_schema_id() != b.current_schema_id() {
        return Err("the table's schema changed meanwhile".into());
    }
    if a.default_partition_spec_id() != b.default_partition_spec_id() {
        return Err("the table's partitioning changed meanwhile".into());
    }
    if let Some(r) = &job.replaces {
        // A compaction commutes with anything that left its files and added no delete.
        let live = tables.live_files(now).await.map_err(|e| e.message)?;
        let urls: std::collections::BTreeSet<&str> =
            live.data.iter().map(|f| f.url.as_str()).collect();
        if r.files.iter().any(|f| !urls.contains(f.as_str())) {
            return Err("files being compacted were replaced or removed meanwhile".into());
        }
        let deletes = live
            .position_deletes
            .iter()
            .map(|(u, _)| u)
            .chain(live.equality_deletes.iter().map(|d| &d.url));
        for d in deletes {
            if !r.delete_files.contains(d) {
                return Err("rows were deleted from the table meanwhile".into());
            }
        }
        return Ok(());
    }
    // The snapshots made meanwhile, from the new one back to the one read.
    let mut ops = Vec::new();
    let mut at = b.current_snapshot();
    while let Some(s) = at {
        if Some(s.snapshot_id()) == a.current_snapshot_id() {
            break;
        }
        ops.push(s.summary().operation.clone());
        at = s.parent_snapshot_id().and_then(|p| b.snapshot_by_id(p));
    }
    if at.is_none() && a.current_snapshot_id().is_some() {
        return Err("the table's history was rewritten meanwhile".into());
    }
    // A compaction (`replace`) changes no row: an append commutes with it too.
    let appends_only = ops.iter().all(|o| {
        matches!(
            o,
            iceberg::spec::Operation::Append | iceberg::spec::Operation::Replace
        )
    });
    if appends_only && job.mode == ImportMode::Append {
        return Ok(());
    }
    let spec = b.default_partition_spec_id();
    let ours: std::collections::BTreeSet<String> = w
        .partitions
        .iter()
        .map(|p| super::partition::partition_key(spec, p))
        .collect();
    let files = async |t: &LoadedTable| {
        tables.live_files(t).await.map(|f| {
            f.data
                .iter()
                .filter(|d| ours.contains(&d.partition))
                .map(|d| d.url.clone())
                .collect::<std::collections::BTreeSet<String>>()
        })
    };
    let before = files(read).await.map_err(|e| e.message)?;
    let after = files(now).await.map_err(|e| e.message)?;
    if before.difference(&after).next().is_some() {
        return Err("rows of the partitions written were replaced or deleted meanwhile".into());
    }
    if job.mode == ImportMode::OverwritePartitions && after.difference(&before).next().is_some() {
        return Err("rows were added to the partitions being replaced meanwhile".into());
    }
    Ok(())
}

/// Stops a write's DuckDB work from another thread: a statement running is interrupted,
/// and no further one starts.
#[derive(Clone, Default)]
struct Stop(Arc<Mutex<StopState>>);

#[derive(Default)]
struct StopState {
    stopped: bool,
    /// The blocking thread is done with DuckDB.
    finished: bool,
    handle: Option<Arc<duckdb::InterruptHandle>>,
}

impl Stop {
    fn attach(&self, conn: &duckdb::Connection) -> Result<()> {
        self.0.lock().expect("stop lock").handle = Some(conn.interrupt_handle());
        self.check()
    }

    /// Before each statement: an error once stopped.
    fn check(&self) -> Result<()> {
        if self.0.lock().expect("stop lock").stopped {
            return Err(Error::new(
                Kind::Timeout,
                Code::Interrupted,
                "the write was stopped; nothing was written",
            ));
        }
        Ok(())
    }

    fn stop(&self) {
        let mut s = self.0.lock().expect("stop lock");
        s.stopped = true;
        if let Some(h) = &s.handle {
            h.interrupt();
        }
    }

    fn finish(&self) {
        self.0.lock().expect("stop lock").finished = true;
    }

    fn finished(&self) -> bool {
        self.0.lock().expect("stop lock").finished
    }
}

/// Marks the blocking thread done, however it ends (a panic too).
struct Finish(Stop);

impl Drop for Finish {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// A write's own spill folder, removed with whatever DuckDB left in it once the write's
/// database is closed (declare it before the connection, so it is dropped after).
struct SpillDir(PathBuf);

impl Drop for SpillDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Stops the write when the future awaiting it is dropped.
struct StopOnDrop(Stop);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
        // An interrupt that lands between two statements is forgotten: repeat it until
        // the thread is done.
        if !self.0.finished()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let stop = self.0.clone();
            rt.spawn(async move {
                while !stop.finished() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    stop.stop();
                }
            });
        }
    }
}

/// What the DuckDB part of an import produced.
#[derive(Clone)]
struct Written {
    /// The metadata to add the snapshot to (new for a create, evolved for a replace).
    base: TableMetadata,
    files: Vec<iceberg::spec::DataFile>,
    /// The data files as DuckDB wrote them, to publish before the commit.
    staged: Vec<Staged>,
    rows: u64,
    bytes: u64,
    /// The partitions written (an unpartitioned table's one, empty tuple, included).
    partitions: Vec<iceberg::spec::Struct>,
}

/// A write ready for its catalog commit: its table files are written.
enum Ready<'a> {
    /// An append of no rows: no snapshot, no commit.
    Nothing(ImportResponse),
    Staged {
        written: WrittenPut<'a>,
        meta: CommitMeta,
        rows: u64,
        files: u64,
        bytes: u64,
        partitions: u64,
    },
}

/// Makes the write's snapshot (its manifests and manifest list, in memory) and writes
/// the table's next version with them. No transaction yet: `lh gc` waits for
/// transactions, and this runs while the data files upload (which may take minutes).
async fn stage_write<'a>(
    tables: &'a Tables,
    job: &WriteJob,
    existing: Option<&LoadedTable>,
    w: Written,
) -> Result<Ready<'a>> {
    let io = tables.warehouse.io();
    let n_files = w.files.len() as u64;
    let n_partitions = if w.base.default_partition_spec().is_unpartitioned() {
        0
    } else {
        w.partitions.len() as u64
    };
    let nothing = match job.mode {
        ImportMode::Append => w.rows == 0,
        // (An instance of a partitioned run replaces its partitions, rows or none.)
        ImportMode::OverwritePartitions => w.rows == 0 && w.partitions.is_empty(),
        _ => false,
    };
    if nothing && job.replaces.is_none() {
        let head = tables.catalog.resolve(&job.branch).await?;
        return Ok(Ready::Nothing(ImportResponse {
            table: job.table.clone(),
            commit: head.commit.id.to_hex(),
            snapshot_id: existing.and_then(|t| t.pointer.snapshot_id),
            rows: 0,
            files: 0,
            bytes: 0,
            partitions: 0,
            rebased: 0,
        }));
    }
    let (updates, files) = if w.rows == 0 && job.mode == ImportMode::Create {
        (Vec::new(), Vec::new())
    } else {
        let spec = w.base.default_partition_spec_id();
        let op = match (&job.replaces, job.mode) {
            (Some(r), _) => SnapshotOp::Rewrite {
                files: r.files.clone(),
                deletes: r.deletes,
                delete_files: r.delete_files.clone(),
            },
            (None, ImportMode::Replace) => SnapshotOp::Overwrite,
            (None, ImportMode::OverwritePartitions) => SnapshotOp::ReplacePartitions {
                keys: w
                    .partitions
                    .iter()
                    .map(|p| super::partition::partition_key(spec, p))
                    .collect(),
                values: w.partitions.clone(),
            },
            _ => SnapshotOp::Append,
        };
        let mut props = HashMap::new();
        let key = match (&job.source, &job.replaces) {
            (_, Some(_)) => "lh.compacted",
            (Source::Files { .. }, _) => "lh.import.files",
            (Source::Query { .. }, _) => "lh.source",
            (Source::DataFiles { .. }, _) => "lh.reused",
        };
        props.insert(key.to_string(), job.source.describe());
        // Which run and node made it (a partitioned model's reuse checks it).
        for k in ["lh.run", "lh.node"] {
            if let Some(v) = job.properties.get(k) {
                props.insert(k.to_string(), v.clone());
            }
        }
        let added = if w.rows == 0 { vec![] } else { w.files };
        let produced = snapshot::produce(io, &w.base, op, added, props).await?;
        (produced.updates, produced.files)
    };
    let verb = match job.mode {
        ImportMode::Create => "create",
        ImportMode::Append => "append to",
        ImportMode::Replace => "replace",
        ImportMode::OverwritePartitions => "overwrite partitions of",
    };
    let message = job
        .message
        .clone()
        .unwrap_or_else(|| format!("{verb} {} from {}", job.table, job.source.describe()));
    let mut meta = CommitMeta::new(&job.by.user, message).with_property(
        "lh.operation",
        match job.mode {
            _ if job.replaces.is_some() => "compact".to_string(),
            ImportMode::OverwritePartitions => "import-overwrite-partitions".to_string(),
            _ => format!("import-{}", verb.split(' ').next().unwrap_or(verb)),
        },
    );
    meta.properties.extend(job.properties.clone());
    // The new metadata file follows the stored one in the table's metadata log.
    let put = Put {
        table: job.table.clone(),
        current: existing.cloned(),
        base: Base::Made(Box::new(w.base)),
        requirements: Vec::new(),
        updates,
        files,
    };
    let written = tables.write_put(put).await?;
    Ok(Ready::Staged {
        written,
        meta,
        rows: w.rows,
        files: if w.rows == 0 { 0 } else { n_files },
        bytes: w.bytes,
        partitions: n_partitions,
    })
}

async fn commit_staged(
    tables: &Tables,
    job: &WriteJob,
    ready: Ready<'_>,
) -> Result<ImportResponse> {
    let (written, meta, rows, files, bytes, partitions) = match ready {
        Ready::Nothing(response) => return Ok(response),
        Ready::Staged {
            written,
            meta,
            rows,
            files,
            bytes,
            partitions,
        } => (written, meta, rows, files, bytes, partitions),
    };
    let mut tx = tables.begin().await;
    tx.adopt(written);
    let committed = match &job.grants_on {
        Some(on) => tx.commit_as(&job.branch, on, &job.by, meta).await?,
        None => tx.commit(&job.branch, &job.by, meta).await?,
    };
    Ok(ImportResponse {
        table: job.table.clone(),
        commit: committed.commit.id.to_hex(),
        snapshot_id: committed
            .versions
            .first()
            .and_then(|v| v.pointer.snapshot_id),
        rows,
        files,
        bytes,
        partitions,
        rebased: 0,
    })
}

/// The blocking part of an import: read, check, write Parquet, describe the files.
struct WritePlan {
    job: WriteJob,
    ctx: ImportContext,
    base: Option<TableMetadata>,
    location: String,
    table_uuid: Uuid,
    data_dir: PathBuf,
    data_url: String,
    /// Where DuckDB reads tables (a SQL model's inputs): the warehouse, or its read cache.
    readable: Vec<PathBuf>,
}

impl WritePlan {
    fn run(self, stop: &Stop) -> Result<Written> {
        if let Source::DataFiles {
            files,
            from,
            spec_id,
            ..
        } = &self.job.source
        {
            return self.graft(files, *spec_id, from);
        }
        if let Some(parent) = self.data_dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let spill = SpillDir(
            self.ctx
                .spill
                .join(format!("write-{}", Uuid::new_v4().simple())),
        );
        let mut allowed = vec![
            self.ctx.uploads.as_path(),
            self.ctx.outputs.as_path(),
            self.data_dir.as_path(),
        ];
        allowed.extend(self.readable.iter().map(|p| p.as_path()));
        let conn = duck::sandboxed(&allowed, &spill.0, &self.ctx.limits)?;
        stop.attach(&conn)?;
        let src = match &self.job.source {
            Source::Files { format, files, .. } => source_sql(*format, files, None),
            Source::Query {
                setup, sql, params, ..
            } => {
                for stmt in setup {
                    stop.check()?;
                    conn.execute_batch(stmt).map_err(|e| {
                        Error::internal(format!("cannot expose a table to DuckDB: {e}"))
                    })?;
                }
                // The query's rows, with its parameters bound, become a temporary table.
                let mut stmt = conn
                    .prepare(&format!("CREATE TEMP TABLE lh_source AS {sql}"))
                    .map_err(|e| self.read_error(e))?;
                bind_params(&mut stmt, params)?;
                stop.check()?;
                stmt.raw_execute().map_err(|e| self.read_error(e))?;
                "lh_source".to_string()
            }
            Source::DataFiles { .. } => unreachable!("grafted above"),
        };
        let arrow_schema = conn
            .prepare(&format!("SELECT * FROM {src} LIMIT 0"))
            .and_then(|mut s| Ok(s.query_arrow([])?.get_schema()))
            .map_err(|e| self.read_error(e))?;
        let source = super::types::iceberg_schema_from_arrow(&arrow_schema)?;

        let (base, src) = match (&self.base, self.job.mode) {
            (None, _) => {
                let spec = match &self.job.partition_by {
                    Some(text) => super::partition::parse_spec(text, &source)?,
                    None => UnboundPartitionSpec::builder().build(),
                };
                let built = super::commit::first_metadata(
                    source,
                    spec,
                    SortOrder::unsorted_order(),
                    self.location.clone(),
                    FormatVersion::V2,
                    HashMap::from([("write.format.default".to_string(), "parquet".to_string())]),
                    self.table_uuid,
                )?
                .build()?;
                (built.metadata, src)
            }
            (Some(base), ImportMode::Append | ImportMode::OverwritePartitions) => {
                let target = base.current_schema();
                self.check_append(&source, target)?;
                // A CSV's inferred types are guesses: read it with the table's types.
                let src = match &self.job.source {
                    Source::Files {
                        format: FileFormat::Csv,
                        files,
                        ..
                    } => source_sql(FileFormat::Csv, files, Some((&source, target.as_ref()))),
                    _ => src,
                };
                (base.clone(), src)
            }
            (Some(base), _) => {
                let mut next = base.clone();
                if let Some(schema) = evolve(base, &source)? {
                    next = TableMetadataBuilder::new_from_metadata(next, None)
                        .add_current_schema(schema)?
                        .build()?
                        .metadata;
                }
                if let Some(text) = &self.job.partition_by
                    && !super::partition::same_spec(
                        text,
                        next.default_partition_spec(),
                        next.current_schema(),
                    )?
                {
                    let spec = super::partition::parse_spec(text, next.current_schema())?;
                    next = TableMetadataBuilder::new_from_metadata(next, None)
                        .add_default_partition_spec(spec)?
                        .build()?
                        .metadata;
                }
                (next, src)
            }
        };
        if let Some(w) = &self.job.within {
            let outside: i64 = conn
                .query_row(
                    &format!(
                        "SELECT count(*) FROM {src} WHERE ({}) IS NOT TRUE",
                        w.predicate
                    ),
                    [],
                    |r| r.get(0),
                )
                .map_err(|e| self.read_error(e))?;
            if outside > 0 {
                return Err(Error::bad_request(
                    Code::BadInput,
                    format!(
                        "{} row{} of {} fall outside partition {} ({}); nothing was written",
                        outside,
                        if outside == 1 { "" } else { "s" },
                        self.job.source.describe(),
                        w.label,
                        w.predicate
                    ),
                )
                .with_hint("a partitioned model's output holds its partition's rows only"));
            }
        }
        let schema = base.current_schema().clone();
        let spec = base.default_partition_spec().clone();
        let partitioner = super::partition::Partitioner::new(&spec, &schema)?;
        let casts: Vec<String> = schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| {
                format!(
                    "CAST({} AS {}) AS {}",
                    quote_ident(&f.name),
                    duckdb_type(&f.field_type),
                    quote_ident(&f.name)
                )
            })
            .collect();
        let options = format!(
            "FORMAT parquet, FIELD_IDS {}, FILENAME_PATTERN 'part-{{i}}', COMPRESSION snappy",
            duckdb_field_ids(&schema),
        );
        let target = quote_literal(&self.data_dir.display().to_string());
        // Each file written, with its partition.
        let mut parts: Vec<iceberg::spec::Struct> = Vec::new();
        let rows = match &partitioner {
            None => {
                // DuckDB rolls files at a size only when it does not partition.
                let copy = format!(
                    "COPY (SELECT {} FROM {src}) TO {target} ({options}, FILE_SIZE_BYTES '{DATA_FILE_BYTES}')",
                    casts.join(", ")
                );
                stop.check()?;
                let rows = conn.execute(&copy, []).map_err(|e| self.read_error(e))? as u64;
                parts.push(iceberg::spec::Struct::from_iter(
                    spec.fields().iter().map(|_| None),
                ));
                rows
            }
            Some(p) => {
                p.prepare(&conn)?;
                let pcols: Vec<String> = (0..p.width()).map(|i| p.column(i)).collect();
                let part = p.part_column();
                // The rows with their partition values, once; then the distinct tuples,
                // numbered; then one folder of files per number.
                stop.check()?;
                conn.execute_batch(&format!(
                    "CREATE TEMP TABLE lh_rows AS SELECT *, {} FROM (SELECT {} FROM {src})",
                    p.columns().join(", "),
                    casts.join(", ")
                ))
                .map_err(|e| self.read_error(e))?;
                stop.check()?;
                conn.execute_batch(&format!(
                    "CREATE TEMP TABLE lh_parts AS SELECT CAST(row_number() OVER () - 1 AS BIGINT) AS {part}, * \
                     FROM (SELECT DISTINCT {cols} FROM lh_rows)",
                    cols = pcols.join(", ")
                ))
                .map_err(|e| self.read_error(e))?;
                let count: i64 = conn
                    .query_row("SELECT count(*) FROM lh_parts", [], |r| r.get(0))
                    .map_err(|e| self.read_error(e))?;
                if count as u64 > super::partition::MAX_PARTITIONS_PER_WRITE {
                    return Err(Error::bad_request(
                        Code::BadPartitionSpec,
                        format!(
                            "the rows fall into {count} partitions of '{}'; one write takes at most {}",
                            super::partition::describe(&spec, &schema),
                            super::partition::MAX_PARTITIONS_PER_WRITE
                        ),
                    )
                    .with_hint("write the rows in several imports, or partition more coarsely"));
                }
                let mut stmt = conn
                    .prepare(&format!(
                        "SELECT {} FROM lh_parts ORDER BY {part}",
                        pcols.join(", ")
                    ))
                    .map_err(|e| self.read_error(e))?;
                for batch in stmt.query_arrow([]).map_err(|e| self.read_error(e))? {
                    parts.extend(p.values(&batch)?);
                }
                drop(stmt);
                let on: Vec<String> = pcols
                    .iter()
                    .map(|c| format!("r.{c} IS NOT DISTINCT FROM p.{c}"))
                    .collect();
                let names: Vec<String> = schema
                    .as_struct()
                    .fields()
                    .iter()
                    .map(|f| format!("r.{}", quote_ident(&f.name)))
                    .collect();
                let copy = format!(
                    "COPY (SELECT {}, p.{part} FROM lh_rows AS r JOIN lh_parts AS p ON {}) \
                     TO {target} ({options}, PARTITION_BY ({part}))",
                    names.join(", "),
                    on.join(" AND "),
                );
                stop.check()?;
                conn.execute(&copy, []).map_err(|e| self.read_error(e))? as u64
            }
        };
        drop(conn);

        // The files, and the partition of each: an unpartitioned write's are in the
        // folder; a partitioned one's in `<part column>=N/`, moved up as `pN-part-K.parquet`
        // (no `key=value` folder, which readers could take for Hive partitioning).
        let mut found: Vec<(PathBuf, usize)> = Vec::new();
        let list = |dir: &std::path::Path| -> Vec<PathBuf> {
            let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
                Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
                Err(_) => Vec::new(),
            };
            v.sort();
            v
        };
        for p in list(&self.data_dir) {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            if partitioner.is_none() {
                if name.ends_with(".parquet") {
                    found.push((p, 0));
                }
                continue;
            }
            let Some(n) = name
                .strip_prefix(&format!(
                    "{}=",
                    partitioner
                        .as_ref()
                        .map(|p| p.part_column())
                        .unwrap_or_default()
                ))
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n < parts.len())
            else {
                continue;
            };
            for f in list(&p) {
                let fname = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                if !fname.ends_with(".parquet") {
                    continue;
                }
                let flat = self.data_dir.join(format!("p{n}-{fname}"));
                std::fs::rename(&f, &flat)?;
                found.push((flat, n));
            }
            let _ = std::fs::remove_dir(&p);
        }
        let mut files = Vec::with_capacity(found.len());
        let mut staged = Vec::with_capacity(found.len());
        let mut bytes = 0;
        for (p, part) in &found {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let url = format!("{}/{name}", self.data_url);
            let df = stats::data_file(p, &url, &schema, &spec, parts[*part].clone())?;
            bytes += df.file_size_in_bytes();
            files.push(df);
            staged.push(Staged {
                path: p.clone(),
                location: url,
            });
        }
        Ok(Written {
            base,
            files,
            staged,
            rows,
            bytes,
            partitions: if rows == 0 { Vec::new() } else { parts },
        })
    }

    /// Data files of another version of the table (`from`), added as they are: into the
    /// table when it has `from`'s schema and partitioning, or into a new table with
    /// them.
    fn graft(
        &self,
        files: &[iceberg::spec::DataFile],
        spec_id: i32,
        from: &TableMetadata,
    ) -> Result<Written> {
        let refuse = |why: &str| {
            Error::new(
                Kind::Conflict,
                Code::Conflict,
                format!("{} cannot be put back: {why}", self.job.source.describe()),
            )
        };
        let base = match &self.base {
            Some(b) => b.clone(),
            None => {
                super::commit::first_metadata(
                    from.current_schema().as_ref().clone(),
                    from.default_partition_spec()
                        .as_ref()
                        .clone()
                        .into_unbound(),
                    SortOrder::unsorted_order(),
                    self.location.clone(),
                    FormatVersion::V2,
                    HashMap::from([("write.format.default".to_string(), "parquet".to_string())]),
                    self.table_uuid,
                )?
                .build()?
                .metadata
            }
        };
        if base.current_schema().as_struct() != from.current_schema().as_struct() {
            return Err(refuse("the table's schema is another"));
        }
        let spec = base.default_partition_spec();
        if spec.fields() != from.default_partition_spec().fields() || spec_id != spec.spec_id() {
            return Err(refuse("the table's partitioning is another"));
        }
        let mut partitions: Vec<iceberg::spec::Struct> = Vec::new();
        for f in files {
            if !partitions.contains(f.partition()) {
                partitions.push(f.partition().clone());
            }
        }
        Ok(Written {
            rows: files.iter().map(|f| f.record_count()).sum(),
            bytes: files.iter().map(|f| f.file_size_in_bytes()).sum(),
            files: files.to_vec(),
            staged: Vec::new(),
            partitions,
            base,
        })
    }

    fn read_error(&self, e: duckdb::Error) -> Error {
        let text = e.to_string();
        let (files, names, format) = match &self.job.source {
            Source::Files {
                files,
                names,
                format,
            } => (files.as_slice(), names.as_slice(), Some(*format)),
            Source::Query { .. } | Source::DataFiles { .. } => (&[][..], &[][..], None),
        };
        // Show the user's file names, not the server's staging paths.
        let mut msg = text.clone();
        for (path, name) in files.iter().zip(names) {
            msg = msg.replace(&path.display().to_string(), name);
        }
        msg = msg.replace(&self.ctx.uploads.display().to_string(), "");
        // DuckDB's own advice (its options, its search space) does not apply to lh users.
        let first: Vec<&str> = msg
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take_while(|l| {
                !l.starts_with("The search space used was") && !l.starts_with("Possible fixes")
            })
            .take(8)
            .collect();
        let Some(format) = format else {
            return Error::bad_request(
                Code::SqlError,
                format!(
                    "{} failed: {}",
                    self.job.source.describe(),
                    first.join("\n")
                ),
            );
        };
        let what = match format {
            FileFormat::Csv => "CSV",
            FileFormat::Parquet => "Parquet",
            FileFormat::Json => "JSON",
        };
        let err = Error::bad_request(
            Code::BadInputFile,
            format!(
                "cannot import {} as {what}: {}",
                names.join(", "),
                first.join("\n")
            ),
        );
        match format {
            FileFormat::Csv => err.with_hint(
                "lh reads CSV with a header row, ',' between fields (a tab in .tsv) and '\"' quotes; check that every row has the same number of fields",
            ),
            _ => err,
        }
    }

    fn is_csv(&self) -> bool {
        matches!(
            self.job.source,
            Source::Files {
                format: FileFormat::Csv,
                ..
            }
        )
    }

    fn check_append(&self, source: &Schema, target: &Schema) -> Result<()> {
        let mut problems = Vec::new();
        for f in source.as_struct().fields() {
            match target.as_struct().field_by_name(&f.name) {
                None => problems.push(format!("column '{}' is not in the table", f.name)),
                Some(t) if !assignable(&f.field_type, &t.field_type) && !self.is_csv() => problems
                    .push(format!(
                        "column '{}' is {} in the file but {} in the table",
                        f.name,
                        display_type(&f.field_type),
                        display_type(&t.field_type)
                    )),
                Some(_) => {}
            }
        }
        for t in target.as_struct().fields() {
            if source.as_struct().field_by_name(&t.name).is_none() {
                problems.push(format!("column '{}' is missing from the file", t.name));
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::bad_request(
            Code::SchemaMismatch,
            format!(
                "cannot append to '{}': the files do not match its schema: {}; the table is unchanged",
                self.job.table,
                problems.join("; ")
            ),
        )
        .with_remedy(Remedy::ShowSchema).with_remedy(Remedy::ReplaceTable))
    }
}

/// The table function reading the staged files. With `typed`, a CSV is read with the
/// target's types, by the file's column order.
///
/// CSV is read as RFC 4180 with a header row: the delimiter (`,`, or a tab for `.tsv`),
/// quote and escape are fixed and rows are never skipped, so that a malformed file is
/// an error rather than a different guess at its dialect.
fn source_sql(format: FileFormat, files: &[PathBuf], typed: Option<(&Schema, &Schema)>) -> String {
    let list: Vec<String> = files
        .iter()
        .map(|p| quote_literal(&p.display().to_string()))
        .collect();
    let list = format!("[{}]", list.join(", "));
    match format {
        FileFormat::Csv => {
            let tsv = files.iter().all(|p| {
                let name = p.display().to_string().to_ascii_lowercase();
                name.ends_with(".tsv") || name.ends_with(".tsv.gz") || name.ends_with(".tsv.zst")
            });
            let delim = if tsv { "'\\t'" } else { "','" };
            let dialect = format!(
                "header = true, delim = {delim}, quote = '\"', escape = '\"', skip = 0, strict_mode = true"
            );
            match typed {
                None => format!("read_csv({list}, {dialect}, union_by_name = true)"),
                Some((source, target)) => {
                    let cols: Vec<String> = source
                        .as_struct()
                        .fields()
                        .iter()
                        .map(|f| {
                            let ty = target
                                .as_struct()
                                .field_by_name(&f.name)
                                .map(|t| duckdb_type(&t.field_type))
                                .unwrap_or_else(|| duckdb_type(&f.field_type));
                            format!("{}: {}", quote_literal(&f.name), quote_literal(&ty))
                        })
                        .collect();
                    format!(
                        "read_csv({list}, {dialect}, columns = {{{}}})",
                        cols.join(", ")
                    )
                }
            }
        }
        FileFormat::Parquet => format!("read_parquet({list}, union_by_name = true)"),
        FileFormat::Json => format!("read_json({list}, format = 'auto', union_by_name = true)"),
    }
}

/// The table schema after a replace with files of schema `source`, or `None` when it
/// does not change. Columns keep their field id when the name and a compatible type
/// stay; others get fresh ids.
fn evolve(base: &TableMetadata, source: &Schema) -> Result<Option<Schema>> {
    let current = base.current_schema();
    let mut next_id = base.last_column_id() + 1;
    let mut fields = Vec::new();
    let mut same = source.as_struct().fields().len() == current.as_struct().fields().len();
    for f in source.as_struct().fields() {
        match current.as_struct().field_by_name(&f.name) {
            Some(old) if assignable(&f.field_type, &old.field_type) => {
                fields.push(old.clone());
            }
            _ => {
                same = false;
                let ty = reassign(&f.field_type, &mut next_id);
                let id = next_id;
                next_id += 1;
                fields.push(std::sync::Arc::new(NestedField::optional(id, &f.name, ty)));
            }
        }
    }
    if same {
        return Ok(None);
    }
    let schema = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_fields(fields)
        .build()?;
    Ok(Some(schema))
}

/// A nested type with fresh ids from `next`.
fn reassign(ty: &iceberg::spec::Type, next: &mut i32) -> iceberg::spec::Type {
    use iceberg::spec::{ListType, MapType, StructType, Type};
    use std::sync::Arc;
    let mut fresh = || {
        let id = *next;
        *next += 1;
        id
    };
    match ty {
        Type::Primitive(_) => ty.clone(),
        Type::List(l) => {
            let id = fresh();
            let el = reassign(&l.element_field.field_type, next);
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id, el, false,
            ))))
        }
        Type::Map(m) => {
            let (k, v) = (fresh(), fresh());
            let kt = reassign(&m.key_field.field_type, next);
            let vt = reassign(&m.value_field.field_type, next);
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(k, kt)),
                Arc::new(NestedField::map_value_element(v, vt, false)),
            ))
        }
        Type::Struct(s) => {
            let ids: Vec<i32> = s.fields().iter().map(|_| fresh()).collect();
            let fields = s
                .fields()
                .iter()
                .zip(ids)
                .map(|(f, id)| {
                    Arc::new(NestedField::optional(
                        id,
                        &f.name,
                        reassign(&f.field_type, next),
                    ))
                })
                .collect();
            Type::Struct(StructType::new(fields))
        }
    }
}

/// Binds `$name` parameters by name; every parameter of the statement must have a value.
fn bind_params(
    stmt: &mut duckdb::Statement<'_>,
    params: &BTreeMap<String, serde_json::Value>,
) -> Result<()> {
    for idx in 1..=stmt.parameter_count() {
        let name = stmt.parameter_name(idx)?;
        let value = params.get(name.trim_start_matches('$')).ok_or_else(|| {
            Error::bad_request(
                Code::UnknownParameter,
                format!("the query uses ${name}, which has no value"),
            )
        })?;
        match value {
            serde_json::Value::String(v) => stmt.raw_bind_parameter(idx, v)?,
            serde_json::Value::Bool(v) => stmt.raw_bind_parameter(idx, v)?,
            serde_json::Value::Number(n) if n.is_i64() => {
                stmt.raw_bind_parameter(idx, n.as_i64())?
            }
            serde_json::Value::Number(n) => stmt.raw_bind_parameter(idx, n.as_f64())?,
            serde_json::Value::Null => stmt.raw_bind_parameter(idx, Option::<i64>::None)?,
            other => {
                return Err(Error::bad_request(
                    Code::BadParameter,
                    format!("parameter {name} has an unsupported value {other}"),
                ));
            }
        }
    }
    Ok(())
}

/// What the tests of lh's writes (here and in the query engine's crate) share.
#[cfg(any(test, feature = "testing"))]
pub mod tests_support {
    use super::*;

    pub fn job(
        ctx: &ImportContext,
        table: &str,
        mode: ImportMode,
        name: &str,
        body: &str,
    ) -> WriteJob {
        let path = ctx.uploads.join(name);
        std::fs::write(&path, body).unwrap();
        WriteJob {
            branch: "main".into(),
            table: table.into(),
            mode,
            source: Source::Files {
                format: FileFormat::Csv,
                files: vec![path],
                names: vec![name.into()],
            },
            by: Identity::admin("t"),
            grants_on: None,
            message: None,
            properties: BTreeMap::new(),
            timeout: None,
            partition_by: None,
            replaces: None,
            within: None,
        }
    }

    /// The tables of a catalog and a warehouse in `dir`, with the server's own tables
    /// (protected branches) in the catalog's database, and the default retention.
    pub async fn open_tables(dir: &std::path::Path) -> std::sync::Arc<Tables> {
        let url = format!("sqlite:{}", dir.join("c.db").display());
        let catalog = lh_catalog::Catalog::open(&url).await.unwrap();
        let warehouse =
            crate::warehouse::Warehouse::open(dir.join("wh").to_str().unwrap()).unwrap();
        let protected =
            crate::auth::protected::ProtectedBranches::new(crate::db::open(&url).await.unwrap());
        std::sync::Arc::new(Tables::new(
            catalog,
            warehouse,
            std::sync::Arc::new(protected),
            crate::retention::Retention::default(),
        ))
    }

    /// A catalog, a warehouse and an import context in `dir`.
    pub async fn setup_tables(dir: &std::path::Path) -> (std::sync::Arc<Tables>, ImportContext) {
        let tables = open_tables(dir).await;
        let duck = crate::duck::DuckLimits {
            threads: 1,
            memory_limit: "1GB".into(),
        };
        let ctx = ImportContext::new(dir.join("up"), dir.join("out"), dir.join("spill2"), duck, 2);
        std::fs::create_dir_all(&ctx.uploads).unwrap();
        (tables, ctx)
    }

    pub async fn current(tables: &Tables, name: &str) -> LoadedTable {
        let head = tables.catalog.resolve("main").await.unwrap().commit;
        tables.load(&head, name).await.unwrap().unwrap()
    }

    /// The table's live data files: (partition as users read it, rows).
    pub async fn partitions(tables: &Tables, name: &str) -> Vec<(String, u64)> {
        let t = current(tables, name).await;
        let m = &t.metadata;
        let mut out = Vec::new();
        for manifest in snapshot::current_manifests(tables.warehouse.io(), m)
            .await
            .unwrap()
        {
            let spec = m.partition_spec_by_id(manifest.partition_spec_id).unwrap();
            let loaded = manifest.load_manifest(tables.warehouse.io()).await.unwrap();
            for e in loaded.entries().iter().filter(|e| e.is_alive()) {
                let df = e.data_file();
                out.push((
                    crate::partition::display(spec, m.current_schema(), df.partition()),
                    df.record_count(),
                ));
            }
        }
        out.sort();
        out
    }

    pub const DAYS: &str = "id,ts,name\n\
        1,2026-11-01 10:00:00,a\n2,2026-11-01 23:59:59,b\n3,2026-11-02 00:00:00,c\n\
        4,2026-11-03 12:00:00,d\n5,2026-11-03 13:00:00,e\n6,,f\n";
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;

    /// Columns named like the ones a partitioned write adds change nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn columns_named_like_the_partition_columns_are_the_users() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, ctx) = setup_tables(dir.path()).await;
        let body =
            "ts,lh_p0,lh_ppart,_lh_p0\n2026-11-01 10:00:00,9,x,y\n2026-11-02 10:00:00,8,z,w\n";
        let mut j = job(&ctx, "raw.c", ImportMode::Create, "c.csv", body);
        j.partition_by = Some("day(ts)".into());
        let r = write_table(&tables, &ctx, j).await.unwrap();
        assert_eq!((r.rows, r.partitions), (2, 2));
        let parts = partitions(&tables, "raw.c").await;
        assert_eq!(
            parts,
            vec![
                ("ts_day=2026-11-01".to_string(), 1),
                ("ts_day=2026-11-02".to_string(), 1)
            ]
        );
    }

    /// What commutes and what still conflicts, decided on two states of a table.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn overlapping_writes_still_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, ctx) = setup_tables(dir.path()).await;
        let mut j = job(&ctx, "raw.events", ImportMode::Create, "a.csv", DAYS);
        j.partition_by = Some("day(ts)".into());
        write_table(&tables, &ctx, j).await.unwrap();
        let read = current(&tables, "raw.events").await;
        let append = job(&ctx, "raw.events", ImportMode::Append, "x.csv", "id\n");
        let replace = job(
            &ctx,
            "raw.events",
            ImportMode::OverwritePartitions,
            "x.csv",
            "id\n",
        );
        // Another write, then whether a write staged on `read` into 2026-11-`day` may
        // be rebased onto the table it left.
        let other = async |mode, body: &str| {
            let j = job(
                &ctx,
                "raw.events",
                mode,
                "o.csv",
                &format!("id,ts,name\n{body}\n"),
            );
            write_table(&tables, &ctx, j).await.unwrap();
            current(&tables, "raw.events").await
        };
        let check = async |j: &WriteJob, now: Option<&LoadedTable>, day: Option<u32>| {
            let parts = day.map(|d| {
                let date = chrono::NaiveDate::from_ymd_opt(2026, 11, d).unwrap();
                let days = (date - chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()).num_days();
                iceberg::spec::Struct::from_iter([Some(iceberg::spec::Literal::date(days as i32))])
            });
            let w = Written {
                base: (*read.metadata).clone(),
                files: vec![],
                staged: vec![],
                rows: 1,
                bytes: 0,
                partitions: parts.into_iter().collect(),
            };
            rebase_check(&tables, j, Some(&read), now, &w).await
        };

        // Another append, to day 2: an append anywhere commutes; a replace of day 2 not.
        let now = other(ImportMode::Append, "9,2026-11-02 05:00:00,z").await;
        check(&append, Some(&now), Some(2)).await.unwrap();
        check(&replace, Some(&now), Some(1)).await.unwrap();
        let e = check(&replace, Some(&now), Some(2)).await.unwrap_err();
        assert!(e.contains("added to the partitions"), "{e}");

        // A replace of day 3: appends to day 3 conflict, to day 1 not.
        let now = other(ImportMode::OverwritePartitions, "8,2026-11-03 05:00:00,z").await;
        check(&append, Some(&now), Some(1)).await.unwrap();
        let e = check(&append, Some(&now), Some(3)).await.unwrap_err();
        assert!(e.contains("replaced or deleted"), "{e}");

        // A schema change, and a table dropped, conflict with anything.
        let j = job(
            &ctx,
            "raw.events",
            ImportMode::Replace,
            "d.csv",
            "id,ts,name,extra\n1,2026-11-01 00:00:00,a,b\n",
        );
        write_table(&tables, &ctx, j).await.unwrap();
        let now = current(&tables, "raw.events").await;
        let e = check(&append, Some(&now), Some(1)).await.unwrap_err();
        assert!(e.contains("schema"), "{e}");
        let e = check(&append, None, None).await.unwrap_err();
        assert!(e.contains("dropped"), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_partition_specs_are_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, ctx) = setup_tables(dir.path()).await;
        for (spec, says) in [
            ("day(nope)", "no column 'nope'"),
            ("hour(name)", "cannot apply"),
            ("bucket(-1, id)", "positive integer"),
        ] {
            let mut j = job(&ctx, "raw.bad", ImportMode::Create, "a.csv", DAYS);
            j.partition_by = Some(spec.into());
            let e = write_table(&tables, &ctx, j).await.unwrap_err();
            assert_eq!(e.code, Code::BadPartitionSpec, "{spec}");
            assert!(e.message.contains(says), "{spec}: {}", e.message);
        }
        let head = tables.catalog.resolve("main").await.unwrap().commit;
        assert!(tables.load(&head, "raw.bad").await.unwrap().is_none());
        // An append keeps the table's partitioning.
        let mut j = job(&ctx, "raw.t", ImportMode::Create, "a.csv", DAYS);
        j.partition_by = Some("day(ts)".into());
        write_table(&tables, &ctx, j).await.unwrap();
        let mut j = job(&ctx, "raw.t", ImportMode::Append, "b.csv", DAYS);
        j.partition_by = Some("month(ts)".into());
        let e = write_table(&tables, &ctx, j).await.unwrap_err();
        assert!(
            e.message.contains("partitioned by 'day(ts)'"),
            "{}",
            e.message
        );
        // Too many partitions for one write.
        let mut body = String::from("id\n");
        for i in 0..(crate::partition::MAX_PARTITIONS_PER_WRITE + 1) {
            body.push_str(&format!("{i}\n"));
        }
        let mut j = job(&ctx, "raw.many", ImportMode::Create, "m.csv", &body);
        j.partition_by = Some("id".into());
        let e = write_table(&tables, &ctx, j).await.unwrap_err();
        assert!(e.message.contains("10001 partitions"), "{}", e.message);
    }
}
