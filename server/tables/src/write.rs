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

mod plan;
use plan::WritePlan;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iceberg::spec::{
    FormatVersion, NestedField, Schema, SortOrder, TableMetadata, TableMetadataBuilder,
    UnboundPartitionSpec,
};
use lh_api::remedy::Remedy;
use lh_api::{FileFormat, ImportMode};
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

/// What a write did: the table's new snapshot and commit, and what it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub table: String,
    /// The commit the write made (the branch's head, for an append of no rows).
    pub commit: String,
    pub snapshot_id: Option<i64>,
    pub rows: u64,
    pub files: u64,
    pub bytes: u64,
    /// Partitions written (0 for an unpartitioned table).
    pub partitions: u64,
    /// Times the write was rebased onto a table other writes had moved meanwhile.
    pub rebased: u32,
}

/// An import: files into a table.
pub async fn import(tables: &Tables, ctx: &ImportContext, job: ImportJob) -> Result<Imported> {
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
pub async fn write_table(tables: &Tables, ctx: &ImportContext, job: WriteJob) -> Result<Imported> {
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
        None => tables
            .warehouse
            .new_table_location(&lh_catalog::names::levels(&job.table)?, &table_uuid),
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
    /// The write's connection, while it is open (see [`Stop::attach`]).
    watch: Option<Arc<lh_core::duck::Watch>>,
}

impl Stop {
    /// Lets `stop` interrupt `conn`'s statements until the returned guard is dropped,
    /// which must be before `conn` is (declare it after): duckdb-rs frees a connection
    /// before its interrupt handle learns of it, and an interrupt must never reach a
    /// closed one.
    fn attach(&self, conn: &duckdb::Connection) -> Result<Attached> {
        let watch = Arc::new(lh_core::duck::Watch::new(conn.interrupt_handle()));
        self.0.lock().expect("stop lock").watch = Some(watch.clone());
        self.check()?;
        Ok(Attached(watch))
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
        if let Some(w) = &s.watch {
            w.interrupt();
        }
    }

    fn finish(&self) {
        self.0.lock().expect("stop lock").finished = true;
    }

    fn finished(&self) -> bool {
        self.0.lock().expect("stop lock").finished
    }
}

/// A write's connection reachable by its [`Stop`]: closed (no interrupt reaches the
/// connection any more) when dropped, before the connection is.
#[must_use]
struct Attached(Arc<lh_core::duck::Watch>);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.close();
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
    Nothing(Imported),
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
        return Ok(Ready::Nothing(Imported {
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
    let message = job.message.clone().unwrap_or_else(|| {
        lh_catalog::shortened_message(format!(
            "{verb} {} from {}",
            job.table,
            job.source.describe()
        ))
    });
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

async fn commit_staged(tables: &Tables, job: &WriteJob, ready: Ready<'_>) -> Result<Imported> {
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
    Ok(Imported {
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

    /// A table answer's size is what its metadata is as JSON, whether this server holds
    /// the file (its size as read) or not (counted): never an estimate (the fortieth
    /// review: one that left docs out answered a table 200 or 503 by whether it was
    /// held).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_metadata_size_is_the_same_held_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, ctx) = setup_tables(dir.path()).await;
        let j = job(&ctx, "raw.d", ImportMode::Create, "d.csv", DAYS);
        write_table(&tables, &ctx, j).await.unwrap();
        let t = current(&tables, "raw.d").await;
        let location = t.pointer.metadata_location.clone();
        let held = tables
            .metadata_size(Some(&location), &t.metadata)
            .await
            .unwrap();
        let counted = tables.metadata_size(None, &t.metadata).await.unwrap();
        let file = serde_json::to_vec(&*t.metadata).unwrap().len() as u64;
        assert_eq!(counted, file);
        assert!(
            held.abs_diff(counted) * 100 <= counted,
            "{held} vs {counted}"
        );
        // Docs count: a schema whose field has a long doc weighs it.
        let schema = t.metadata.current_schema().as_ref().clone();
        let fields: Vec<_> = schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| {
                let mut f = (**f).clone();
                f.doc = Some("d".repeat(1 << 20));
                std::sync::Arc::new(f)
            })
            .collect();
        let with_doc = iceberg::spec::Schema::builder()
            .with_schema_id(schema.schema_id())
            .with_fields(fields)
            .build()
            .unwrap();
        let bigger = tables
            .metadata_size(
                None,
                &std::sync::Arc::new(
                    iceberg::spec::TableMetadataBuilder::new_from_metadata(
                        (*t.metadata).clone(),
                        None,
                    )
                    .add_current_schema(with_doc)
                    .unwrap()
                    .build()
                    .unwrap()
                    .metadata,
                ),
            )
            .await
            .unwrap();
        assert!(bigger > counted + (1 << 20) * 3, "{bigger} vs {counted}");
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
