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
use lh_api::{FileFormat, ImportMode, ImportResponse};
use lh_catalog::CommitMeta;
use uuid::Uuid;

use super::commit::{Base, Put, WrittenPut};
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
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::Files { names, .. } => names.join(", "),
            Source::Query { label, .. } => label.clone(),
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
            .with_hint("use --mode append or --mode replace"));
        }
        (ImportMode::Append | ImportMode::Replace, None) => {
            return Err(Error::not_found(
                Code::TableNotFound,
                format!("table '{}' not found on '{}'", job.table, job.branch),
            )
            .with_hint("use --mode create to create it"));
        }
        _ => {}
    }
    if let Some(t) = &existing {
        super::snapshot::check_writable(&format!("table '{}'", job.table), &t.metadata)?;
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
    let written = written?;
    // The data files reach the warehouse before any commit can name them. The table's
    // new files (manifests, manifest list, metadata file) need only their statistics:
    // they are made and written while the data files upload (on S3, round trips of
    // their own), and the catalog commits once both are done.
    let staged = written.staged.clone();
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
    match commit_staged(tables, &job, ready).await {
        Ok(response) => Ok(response),
        // The catalog failed in a way that may have committed: the files stay (what no
        // commit reaches, `lh gc` removes later).
        Err(e) if e.commit_state_unknown() => Err(e),
        // Refused: the transaction removed its own files; the data files go too.
        Err(e) => {
            cleanup(&staged);
            Err(e)
        }
    }
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
struct Written {
    /// The metadata to add the snapshot to (new for a create, evolved for a replace).
    base: TableMetadata,
    files: Vec<iceberg::spec::DataFile>,
    /// The data files as DuckDB wrote them, to publish before the commit.
    staged: Vec<Staged>,
    rows: u64,
    bytes: u64,
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
    if w.rows == 0 && job.mode == ImportMode::Append {
        let head = tables.catalog.resolve(&job.branch).await?;
        return Ok(Ready::Nothing(ImportResponse {
            table: job.table.clone(),
            commit: head.commit.id.to_hex(),
            snapshot_id: existing.and_then(|t| t.pointer.snapshot_id),
            rows: 0,
            files: 0,
            bytes: 0,
        }));
    }
    let (updates, files) = if w.rows == 0 && job.mode == ImportMode::Create {
        (Vec::new(), Vec::new())
    } else {
        let op = match job.mode {
            ImportMode::Replace => SnapshotOp::Overwrite,
            _ => SnapshotOp::Append,
        };
        let mut props = HashMap::new();
        let key = match &job.source {
            Source::Files { .. } => "lh.import.files",
            Source::Query { .. } => "lh.source",
        };
        props.insert(key.to_string(), job.source.describe());
        let added = if w.rows == 0 { vec![] } else { w.files };
        let produced = snapshot::produce(io, &w.base, op, added, props).await?;
        (produced.updates, produced.files)
    };
    let verb = match job.mode {
        ImportMode::Create => "create",
        ImportMode::Append => "append to",
        ImportMode::Replace => "replace",
    };
    let message = job
        .message
        .clone()
        .unwrap_or_else(|| format!("{verb} {} from {}", job.table, job.source.describe()));
    let mut meta = CommitMeta::new(&job.by.user, message).with_property(
        "lh.operation",
        format!("import-{}", verb.split(' ').next().unwrap_or(verb)),
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
    })
}

async fn commit_staged(
    tables: &Tables,
    job: &WriteJob,
    ready: Ready<'_>,
) -> Result<ImportResponse> {
    let (written, meta, rows, files, bytes) = match ready {
        Ready::Nothing(response) => return Ok(response),
        Ready::Staged {
            written,
            meta,
            rows,
            files,
            bytes,
        } => (written, meta, rows, files, bytes),
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
        };
        let arrow_schema = conn
            .prepare(&format!("SELECT * FROM {src} LIMIT 0"))
            .and_then(|mut s| Ok(s.query_arrow([])?.get_schema()))
            .map_err(|e| self.read_error(e))?;
        let source = super::types::iceberg_schema_from_arrow(&arrow_schema)?;

        let (base, src) = match (&self.base, self.job.mode) {
            (None, _) => {
                let built = super::commit::first_metadata(
                    source,
                    UnboundPartitionSpec::builder().build(),
                    SortOrder::unsorted_order(),
                    self.location.clone(),
                    FormatVersion::V2,
                    HashMap::from([("write.format.default".to_string(), "parquet".to_string())]),
                    self.table_uuid,
                )?
                .build()?;
                (built.metadata, src)
            }
            (Some(base), ImportMode::Append) => {
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
                let evolved = evolve(base, &source)?;
                match evolved {
                    None => (base.clone(), src),
                    Some(schema) => {
                        let built = TableMetadataBuilder::new_from_metadata(base.clone(), None)
                            .add_current_schema(schema)?
                            .build()?;
                        (built.metadata, src)
                    }
                }
            }
        };
        let schema = base.current_schema().clone();
        let select: Vec<String> = schema
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
        let copy = format!(
            "COPY (SELECT {} FROM {src}) TO {} (FORMAT parquet, FIELD_IDS {}, FILE_SIZE_BYTES '{DATA_FILE_BYTES}', FILENAME_PATTERN 'part-{{i}}', COMPRESSION snappy)",
            select.join(", "),
            quote_literal(&self.data_dir.display().to_string()),
            duckdb_field_ids(&schema),
        );
        stop.check()?;
        let rows = conn.execute(&copy, []).map_err(|e| self.read_error(e))? as u64;
        drop(conn);

        let mut paths: Vec<PathBuf> = match std::fs::read_dir(&self.data_dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
                .collect(),
            Err(_) => Vec::new(),
        };
        paths.sort();
        let mut files = Vec::with_capacity(paths.len());
        let mut staged = Vec::with_capacity(paths.len());
        let mut bytes = 0;
        for p in &paths {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let url = format!("{}/{name}", self.data_url);
            let df = stats::data_file(p, &url, &schema, base.default_partition_spec())?;
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
            Source::Query { .. } => (&[][..], &[][..], None),
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
        .with_hint("`lh table show NAME` prints the schema; --mode replace replaces the table and its schema"))
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
