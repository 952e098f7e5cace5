//! SQL queries on any ref, in embedded DuckDB.
//!
//! One DuckDB database serves every query: sandboxed and locked at start-up, so that its
//! thread pool, memory limit and file cache are shared and warm. Each query gets its own
//! connection. DuckDB's parser says whether the query is one read-only statement and
//! which tables it names; each such table is resolved at the query's commit to its
//! snapshot's data files and exposed as a view over `read_parquet`, reading columns by
//! Iceberg field id (so renamed and added columns read right). A commit never changes,
//! so neither do its views: they live in an in-memory catalog per commit
//! (`ATTACH ':memory:' AS c_<commit>`), made on first use and kept for the next queries
//! of that commit (the most recent commits are kept; a catalog is detached when it
//! leaves the cache and its last query ends). User SQL cannot change them: only
//! read-only statements run. The query runs bounded in time and in result size, and is
//! interrupted when its caller goes away.

pub mod sql;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use duckdb::Connection;
use iceberg::spec::Type;
use lh_catalog::CommitId;
use tokio::sync::Semaphore;

use crate::duck::{self, DuckLimits};
use crate::error::{Error, Kind, Result};
use crate::tables::stats::{PhysicalColumn, PhysicalKind};
use crate::tables::types::{duckdb_type, quote_ident, quote_literal};
use crate::tables::{LoadedTable, Tables};

/// The limits of the query engine.
#[derive(Debug, Clone)]
pub struct QueryLimits {
    pub timeout: Duration,
    pub max_result_bytes: u64,
    pub max_concurrent: usize,
    pub duck: DuckLimits,
}

pub struct QueryEngine {
    tables: Arc<Tables>,
    limits: QueryLimits,
    permits: Semaphore,
    /// The shared, locked database; each query connects to it anew.
    database: Arc<std::sync::Mutex<Connection>>,
    /// The catalogs of recently queried commits, with the views made in them.
    commits: quick_cache::sync::Cache<CommitId, Arc<CommitCatalog>>,
}

/// How many commits keep their catalog of views between queries.
const CACHED_COMMITS: usize = 64;

/// The in-memory catalog of one commit's views. The views of a commit never change, so
/// each is made once, by the first query that names its table. Detached when dropped:
/// when it has left the cache and no query uses it any more.
struct CommitCatalog {
    name: String,
    database: Arc<std::sync::Mutex<Connection>>,
    /// The views that exist, by their quoted name (`"namespace"."table"`).
    views: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl CommitCatalog {
    fn attach(database: &Arc<std::sync::Mutex<Connection>>) -> Result<CommitCatalog> {
        let name = format!("c_{}", uuid::Uuid::new_v4().simple());
        database
            .lock()
            .map_err(|_| Error::internal("the query database is poisoned"))?
            .execute_batch(&format!("ATTACH ':memory:' AS {name};"))?;
        Ok(CommitCatalog {
            name,
            database: database.clone(),
            views: Default::default(),
        })
    }

    fn has_view(&self, name: &str) -> bool {
        self.views.lock().is_ok_and(|v| v.contains(name))
    }

    /// Makes the views of `tables` that do not exist yet, on `conn` (whose current
    /// catalog is this one).
    fn ensure_views(&self, conn: &Connection, tables: &[(String, String)]) -> Result<()> {
        let mut made = self
            .views
            .lock()
            .map_err(|_| Error::internal("a commit catalog is poisoned"))?;
        for (table, sql) in tables {
            if made.contains(table) {
                continue;
            }
            conn.execute_batch(sql)
                .map_err(|e| Error::internal(format!("cannot expose a table to DuckDB: {e}")))?;
            made.insert(table.clone());
        }
        Ok(())
    }
}

impl Drop for CommitCatalog {
    fn drop(&mut self) {
        if let Ok(conn) = self.database.lock() {
            let _ = conn.execute_batch(&format!("DETACH DATABASE IF EXISTS {};", self.name));
        }
    }
}

/// A connection to the shared database, in a commit's catalog (kept alive by the
/// session).
struct Session {
    conn: Connection,
    commit: Arc<CommitCatalog>,
}

impl Session {
    fn in_commit(
        database: &std::sync::Mutex<Connection>,
        commit: Arc<CommitCatalog>,
    ) -> Result<Session> {
        let conn = connect(database)?;
        conn.execute_batch(&format!("USE {};", commit.name))?;
        Ok(Session { conn, commit })
    }
}

fn connect(database: &std::sync::Mutex<Connection>) -> Result<Connection> {
    Ok(database
        .lock()
        .map_err(|_| Error::internal("the query database is poisoned"))?
        .try_clone()?)
}

/// The name a table's view has in a commit's catalog (DuckDB's, quoted: `a."b.t"` and
/// `"a.b".t` are two views).
fn view_name(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| quote_ident(p))
        .collect::<Vec<_>>()
        .join(".")
}

/// A query's answer.
pub struct QueryOutput {
    pub commit: CommitId,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    /// Whether `max_rows` cut the result short.
    pub truncated: bool,
}

/// Interrupts a running query when dropped, unless it finished first: a caller that
/// goes away (a client that disconnects) stops its query.
struct InterruptOnDrop(Option<Arc<duckdb::InterruptHandle>>);

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.interrupt();
        }
    }
}

impl QueryEngine {
    pub fn new(tables: Arc<Tables>, limits: QueryLimits, spill: PathBuf) -> Result<QueryEngine> {
        let conn = duck::sandboxed(&[tables.warehouse.root()], &spill, &limits.duck)?;
        duck::lock(&conn)?;
        Ok(QueryEngine {
            tables,
            permits: Semaphore::new(limits.max_concurrent.max(1)),
            limits,
            database: Arc::new(std::sync::Mutex::new(conn)),
            commits: quick_cache::sync::Cache::new(CACHED_COMMITS),
        })
    }

    /// The catalog of `commit`'s views, attached on first use.
    fn commit_catalog(&self, commit: &CommitId) -> Result<Arc<CommitCatalog>> {
        self.commits.get_or_insert_with(commit, || {
            CommitCatalog::attach(&self.database).map(Arc::new)
        })
    }

    pub fn limits(&self) -> &QueryLimits {
        &self.limits
    }

    /// Writes the rows of `table` in `commit` (only `columns`, only the rows matching
    /// `filter`) to an Arrow IPC file at `path`: a pipeline function's input, with its
    /// projection and filter pushed down to the Parquet scan. Returns the row count.
    pub async fn export_arrow(
        &self,
        commit: &lh_catalog::Commit,
        table: &str,
        columns: Option<&[String]>,
        filter: Option<&str>,
        path: &std::path::Path,
    ) -> Result<u64> {
        let loaded = self.tables.load(commit, table).await?.ok_or_else(|| {
            Error::not_found(
                "table_not_found",
                format!("input table '{table}' not found"),
            )
        })?;
        let parts: Vec<String> = match table.rsplit_once('.') {
            Some((ns, t)) => vec![ns.to_string(), t.to_string()],
            None => return Err(Error::internal(format!("bad table name {table}"))),
        };
        let cols = match columns {
            Some(c) if !c.is_empty() => c
                .iter()
                .map(|c| quote_ident(c))
                .collect::<Vec<_>>()
                .join(", "),
            _ => "*".to_string(),
        };
        let mut sql = format!(
            "SELECT {cols} FROM {}.{}",
            quote_ident(&parts[0]),
            quote_ident(&parts[1])
        );
        if let Some(f) = filter {
            sql.push_str(&format!(" WHERE ({f})"));
        }
        // The filter is the user's SQL: it must keep the query one SELECT of this table.
        let analysis = self.analyze(&sql).await?;
        if analysis.tables.iter().any(|t| t != &parts) {
            return Err(Error::bad_request(
                "bad_filter",
                format!("the filter of input '{table}' may use only that table's columns"),
            ));
        }
        let catalog = self.commit_catalog(&commit.id)?;
        let name = view_name(&parts);
        let views = if catalog.has_view(&name) {
            Vec::new()
        } else {
            let files = self.tables.file_groups(&loaded).await?;
            vec![(name, view_sql(&parts, &loaded, &files))]
        };
        let database = self.database.clone();
        let out = path.to_path_buf();
        let label = table.to_string();
        blocking(move || {
            let session = Session::in_commit(&database, catalog)?;
            session.commit.ensure_views(&session.conn, &views)?;
            let mut stmt = session
                .conn
                .prepare(&sql)
                .map_err(|e| input_error(&label, e))?;
            let schema = stmt
                .stream_arrow([])
                .map_err(|e| input_error(&label, e))?
                .get_schema();
            let file = std::fs::File::create(&out)?;
            let mut w =
                arrow::ipc::writer::FileWriter::try_new(std::io::BufWriter::new(file), &schema)
                    .map_err(|e| Error::internal(format!("cannot write {}: {e}", out.display())))?;
            let mut rows = 0u64;
            while let Some(chunk) = stmt.step().map_err(|e| input_error(&label, e))? {
                let batch = RecordBatch::from(&chunk);
                rows += batch.num_rows() as u64;
                w.write(&batch)
                    .map_err(|e| Error::internal(format!("cannot write {}: {e}", out.display())))?;
            }
            w.finish()
                .map_err(|e| Error::internal(format!("cannot write {}: {e}", out.display())))?;
            Ok(rows)
        })
        .await
    }

    /// DuckDB's reading of a query: the tables, parameters and CTEs it names. Runs no
    /// query.
    pub async fn analyze(&self, sql: &str) -> Result<sql::Analysis> {
        let database = self.database.clone();
        let text = sql.to_string();
        blocking(move || {
            let serialized: String = connect(&database)?
                .prepare("SELECT json_serialize_sql(?::VARCHAR)")?
                .query_row([&text], |r| r.get(0))?;
            sql::analyze(&serialized)
        })
        .await
    }

    /// Runs `sql` on the commit `at` resolves to.
    pub async fn run(
        &self,
        sql: &str,
        at: &str,
        timeout: Option<Duration>,
        max_rows: Option<u64>,
    ) -> Result<QueryOutput> {
        let timeout = timeout.map_or(self.limits.timeout, |t| t.min(self.limits.timeout));
        let _permit = self.permits.acquire().await.map_err(|_| {
            Error::new(
                Kind::Unavailable,
                "shutting_down",
                "the server is shutting down",
            )
        })?;
        let resolved = self.tables.catalog.resolve(at).await?;
        let catalog = self.commit_catalog(&resolved.commit.id)?;

        let database = self.database.clone();
        let text = sql.to_string();
        let (session, refs) = blocking(move || {
            let session = Session::in_commit(&database, catalog)?;
            let serialized: String = session
                .conn
                .prepare("SELECT json_serialize_sql(?::VARCHAR)")?
                .query_row([&text], |r| r.get(0))?;
            let refs = sql::analyze(&serialized)?.tables;
            Ok((session, refs))
        })
        .await?;

        let mut views = Vec::new();
        for parts in refs {
            if parts.len() < 2 {
                // A CTE, or a table without a namespace: DuckDB will say if it is unknown.
                continue;
            }
            if parts.len() > 2 {
                let dotted = parts.join(".");
                let (ns, table) = dotted.rsplit_once('.').unwrap_or(("", ""));
                return Err(Error::bad_request(
                    "sql_error",
                    format!("'{dotted}' names a catalog; lh tables are namespace.table"),
                )
                .with_hint(format!(
                    "for a nested namespace, quote it: \"{ns}\".{table}"
                )));
            }
            // A nested namespace is written quoted: "a.b".t is the table a.b.t.
            let name = parts.join(".");
            if lh_catalog::names::validate_table_name(&name).is_err() {
                continue;
            }
            let Some(table) = self.tables.load(&resolved.commit, &name).await? else {
                return Err(Error::not_found(
                    "table_not_found",
                    format!("table '{name}' not found at '{at}'"),
                )
                .with_hint(format!("`lh table ls --ref {at}` lists the tables")));
            };
            let view = view_name(&parts);
            if !session.commit.has_view(&view) {
                let files = self.tables.file_groups(&table).await?;
                views.push((view, view_sql(&parts, &table, &files)));
            }
        }

        let handle = session.conn.interrupt_handle();
        let mut guard = InterruptOnDrop(Some(handle.clone()));
        let max_bytes = self.limits.max_result_bytes;
        let text = sql.to_string();
        let task = blocking(move || execute(session, &views, &text, max_bytes, max_rows));
        let out = match tokio::time::timeout(timeout, task).await {
            Ok(r) => r,
            Err(_) => {
                handle.interrupt();
                Err(Error::new(
                    Kind::Timeout,
                    "timeout",
                    format!(
                        "the query ran past its timeout of {} ms and was stopped",
                        timeout.as_millis()
                    ),
                ))
            }
        };
        guard.0 = None;
        let (schema, batches, truncated) = out?;
        Ok(QueryOutput {
            commit: resolved.commit.id,
            schema,
            batches,
            truncated,
        })
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("query task failed: {e}")))?
}

/// Data files with the same physical columns (Parquet field id to column name): files
/// written under one schema share a group.
pub(crate) type FileGroup = (Arc<Vec<PhysicalColumn>>, Vec<PathBuf>);

/// What a table's view reads: its data files, grouped by their physical columns, and
/// the delete files that remove rows of them; all as local paths.
#[derive(Debug, Default)]
pub(crate) struct TableFiles {
    pub groups: Vec<FileGroup>,
    pub position_deletes: Vec<PathBuf>,
    pub equality_deletes: Vec<EqualityDeleteFile>,
    /// Each data file's data sequence number and partition, when equality deletes need
    /// them.
    pub data: Vec<(PathBuf, i64, String)>,
}

/// An equality delete file, with its columns (as a data file's) and what decides which
/// data files it applies to (see [`crate::tables::EqualityDelete`]).
#[derive(Debug)]
pub(crate) struct EqualityDeleteFile {
    pub path: PathBuf,
    pub columns: Arc<Vec<PhysicalColumn>>,
    pub sequence: i64,
    pub partition: Option<String>,
    pub field_ids: Vec<i32>,
}

/// The statements that expose a table as a view at its snapshot.
///
/// Columns are matched by Iceberg field id, as the spec says: for each group of files
/// with the same physical columns, the view selects each current column from the
/// physical column with its field id (under whatever name it was written), casts it to
/// the current type (a no-op DuckDB removes when nothing changed, so projections and
/// filters still reach the Parquet reader), or yields NULL when the files predate the
/// column. Groups are combined with UNION ALL.
///
/// Position deletes (merge-on-read) name rows by data file and 0-based position: the
/// data files are read with their path and row number (`filename`, `file_row_number`),
/// and an anti join drops the rows the delete files name (their `file_path` taken as a
/// local path, in any spelling of a file URL). Equality deletes name rows by the values
/// of some columns: a row goes when a delete file of a later sequence number, in its
/// partition or unpartitioned, holds the same values (NULL matching NULL); each data
/// row carries its file's sequence number and partition for that test. Filters on the
/// table's columns still reach the Parquet reader below the joins.
pub(crate) fn view_sql(parts: &[String], table: &LoadedTable, files: &TableFiles) -> String {
    let schema = table.metadata.current_schema();
    let mut sql = String::new();
    let [ns, name] = parts else {
        unreachable!("checked by the caller")
    };
    sql.push_str(&format!(
        "CREATE SCHEMA IF NOT EXISTS {};\n",
        quote_ident(ns)
    ));
    let qualified = format!("{}.{}", quote_ident(ns), quote_ident(name));
    let fields = schema.as_struct().fields();
    // The view's own columns (file, position, sequence, partition, keys) get a prefix no
    // column of the table starts with, so that none can stand in for them.
    let p = internal_prefix(fields);
    let positions = !files.position_deletes.is_empty() && !files.groups.is_empty();
    let equalities = !files.equality_deletes.is_empty() && !files.groups.is_empty();
    let select = |physical: Option<&[PhysicalColumn]>| -> String {
        let mut cols: Vec<String> = fields
            .iter()
            .map(|f| {
                let value = match physical.and_then(|cols| cols.iter().find(|c| c.id == f.id)) {
                    Some(c) => read_as(&quote_ident(&c.name), &f.field_type, c, 0),
                    None => format!("CAST(NULL AS {})", duckdb_type(&f.field_type)),
                };
                format!("{value} AS {}", quote_ident(&f.name))
            })
            .collect();
        if positions || equalities {
            cols.push(format!("{p}file"));
        }
        if positions {
            cols.push(format!("file_row_number AS {p}pos"));
        }
        cols.join(", ")
    };
    let list = |paths: &[PathBuf]| -> String {
        paths
            .iter()
            .map(|p| quote_literal(&p.display().to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let body = if files.groups.is_empty() {
        format!("SELECT {} WHERE false", select(None))
    } else {
        let mut options = String::new();
        if positions || equalities {
            options.push_str(&format!(", filename = '{p}file'"));
        }
        if positions {
            options.push_str(", file_row_number = true");
        }
        let parts: Vec<String> = files
            .groups
            .iter()
            .map(|(cols, paths)| {
                format!(
                    "SELECT {} FROM read_parquet([{}]{options})",
                    select(Some(cols)),
                    list(paths)
                )
            })
            .collect();
        parts.join(" UNION ALL ")
    };
    let body = if positions || equalities {
        let names: Vec<String> = fields.iter().map(|f| quote_ident(&f.name)).collect();
        let mut rows = format!("({body})");
        if equalities {
            let values: Vec<String> = files
                .data
                .iter()
                .map(|(p, seq, part)| {
                    format!(
                        "({}, {seq}::BIGINT, {})",
                        quote_literal(&p.display().to_string()),
                        quote_literal(part)
                    )
                })
                .collect();
            rows = format!(
                "(SELECT __lh_d.*, __lh_m.seq AS {p}seq, __lh_m.part AS {p}part \
                 FROM {rows} AS __lh_d JOIN (VALUES {}) AS __lh_m(file, seq, part) \
                 ON __lh_m.file = __lh_d.{p}file)",
                values.join(", ")
            );
        }
        let mut body = format!("SELECT {} FROM {rows} AS __lh_rows", names.join(", "));
        if positions {
            body.push_str(&format!(
                " ANTI JOIN (\
                 SELECT regexp_replace(file_path, '^file:(//localhost|//)?', '') AS file, pos \
                 FROM read_parquet([{}])) AS __lh_deletes \
                 ON __lh_deletes.file = __lh_rows.{p}file AND __lh_deletes.pos = __lh_rows.{p}pos",
                list(&files.position_deletes)
            ));
        }
        if equalities {
            let mut sets: Vec<(&[i32], Vec<&EqualityDeleteFile>)> = Vec::new();
            for d in &files.equality_deletes {
                match sets
                    .iter_mut()
                    .find(|(ids, _)| *ids == d.field_ids.as_slice())
                {
                    Some((_, ds)) => ds.push(d),
                    None => sets.push((&d.field_ids, vec![d])),
                }
            }
            let tests: Vec<String> = sets
                .iter()
                .map(|(ids, deletes)| {
                    let key_fields: Vec<_> = ids
                        .iter()
                        .filter_map(|id| fields.iter().find(|f| f.id == *id))
                        .collect();
                    let rows: Vec<String> = deletes
                        .iter()
                        .map(|d| {
                            let keys: Vec<String> = key_fields
                                .iter()
                                .enumerate()
                                .map(|(i, f)| {
                                    let ty = duckdb_type(&f.field_type);
                                    match d.columns.iter().find(|c| c.id == f.id) {
                                        Some(c) => format!(
                                            "CAST({} AS {ty}) AS {p}k{i}",
                                            quote_ident(&c.name)
                                        ),
                                        None => format!("CAST(NULL AS {ty}) AS {p}k{i}"),
                                    }
                                })
                                .collect();
                            let part = d
                                .partition
                                .as_deref()
                                .map_or("CAST(NULL AS VARCHAR)".to_string(), quote_literal);
                            format!(
                                "SELECT {}, {}::BIGINT AS {p}seq, {part} AS {p}part \
                                 FROM read_parquet([{}])",
                                keys.join(", "),
                                d.sequence,
                                quote_literal(&d.path.display().to_string())
                            )
                        })
                        .collect();
                    let matches: Vec<String> = key_fields
                        .iter()
                        .enumerate()
                        .map(|(i, f)| {
                            format!(
                                "__lh_e.{p}k{i} IS NOT DISTINCT FROM __lh_rows.{}",
                                quote_ident(&f.name)
                            )
                        })
                        .collect();
                    format!(
                        "NOT EXISTS (SELECT 1 FROM ({}) AS __lh_e \
                         WHERE __lh_e.{p}seq > __lh_rows.{p}seq \
                         AND (__lh_e.{p}part IS NULL OR __lh_e.{p}part = __lh_rows.{p}part) \
                         AND {})",
                        rows.join(" UNION ALL "),
                        matches.join(" AND ")
                    )
                })
                .collect();
            body.push_str(&format!(" WHERE {}", tests.join(" AND ")));
        }
        body
    } else {
        body
    };
    sql.push_str(&format!("CREATE VIEW {qualified} AS {body};\n"));
    sql
}

/// A prefix for a view's own columns that no column of the table starts with (DuckDB
/// compares names regardless of case).
fn internal_prefix(fields: &[iceberg::spec::NestedFieldRef]) -> String {
    let taken = |p: &str| fields.iter().any(|f| f.name.to_lowercase().starts_with(p));
    let mut p = "__lh_".to_string();
    let mut n = 0;
    while taken(&p) {
        n += 1;
        p = format!("__lh{n}_");
    }
    p
}

/// The expression that reads the physical column `src` (described by `physical`) as a
/// column of Iceberg type `ty`, matching nested fields by field id as the top-level ones
/// are: a struct field renamed since the file was written reads under its new name, one
/// added since reads as NULL, one dropped is not read. When the file's layout is the
/// schema's (the usual case), a plain cast, which DuckDB removes when the types agree, so
/// that projections and filters still reach the Parquet reader.
fn read_as(src: &str, ty: &Type, physical: &PhysicalColumn, depth: usize) -> String {
    if same_layout(ty, physical) {
        return format!("CAST({src} AS {})", duckdb_type(ty));
    }
    let field =
        |parent: &str, name: &str| format!("struct_extract({parent}, {})", quote_literal(name));
    match (ty, &physical.kind) {
        (Type::Struct(st), PhysicalKind::Struct(children)) => {
            let fields: Vec<String> = st
                .fields()
                .iter()
                .map(|f| {
                    let value = match children.iter().find(|c| c.id == f.id) {
                        Some(c) => read_as(&field(src, &c.name), &f.field_type, c, depth + 1),
                        None => format!("CAST(NULL AS {})", duckdb_type(&f.field_type)),
                    };
                    format!("{} := {value}", quote_ident(&f.name))
                })
                .collect();
            format!(
                "CASE WHEN {src} IS NULL THEN NULL ELSE struct_pack({}) END",
                fields.join(", ")
            )
        }
        (Type::List(l), PhysicalKind::List(element)) => {
            let x = format!("__lh_x{depth}");
            format!(
                "list_transform({src}, lambda {x}: {})",
                read_as(&x, &l.element_field.field_type, element, depth + 1)
            )
        }
        (Type::Map(m), PhysicalKind::Map(key, value)) => {
            let e = format!("__lh_e{depth}");
            format!(
                "map_from_entries(list_transform(map_entries({src}), lambda {e}: struct_pack(\
                 key := {}, value := {})))",
                read_as(&field(&e, "key"), &m.key_field.field_type, key, depth + 1),
                read_as(
                    &field(&e, "value"),
                    &m.value_field.field_type,
                    value,
                    depth + 1
                )
            )
        }
        // A file whose column is of another kind than the schema says: DuckDB's cast
        // decides (and fails clearly when it cannot).
        _ => format!("CAST({src} AS {})", duckdb_type(ty)),
    }
}

/// Whether a physical column has the nested fields of `ty`, in its order, with its names
/// and field ids (primitive types may differ: a cast promotes them).
fn same_layout(ty: &Type, physical: &PhysicalColumn) -> bool {
    match (ty, &physical.kind) {
        (Type::Primitive(_), PhysicalKind::Primitive) => true,
        (Type::Struct(st), PhysicalKind::Struct(children)) => {
            st.fields().len() == children.len()
                && st
                    .fields()
                    .iter()
                    .zip(children)
                    .all(|(f, c)| f.id == c.id && f.name == c.name && same_layout(&f.field_type, c))
        }
        (Type::List(l), PhysicalKind::List(element)) => {
            l.element_field.id == element.id && same_layout(&l.element_field.field_type, element)
        }
        (Type::Map(m), PhysicalKind::Map(key, value)) => {
            m.key_field.id == key.id
                && m.value_field.id == value.id
                && same_layout(&m.key_field.field_type, key)
                && same_layout(&m.value_field.field_type, value)
        }
        _ => false,
    }
}

/// Makes the views the commit's catalog lacks, runs the query and collects its result.
fn execute(
    session: Session,
    views: &[(String, String)],
    sql: &str,
    max_bytes: u64,
    max_rows: Option<u64>,
) -> Result<(SchemaRef, Vec<RecordBatch>, bool)> {
    let conn = &session.conn;
    session.commit.ensure_views(conn, views)?;
    let mut stmt = conn.prepare(sql).map_err(sql_error)?;
    // Stream the result chunk by chunk, so that an oversized result stops early and
    // an error part-way (a failed cast, an interrupt) is an error, not a short result.
    let schema = stmt.stream_arrow([]).map_err(sql_error)?.get_schema();
    let mut batches = Vec::new();
    let mut bytes = 0u64;
    let mut rows = 0u64;
    let mut truncated = false;
    while let Some(chunk) = stmt.step().map_err(sql_error)? {
        let mut batch = RecordBatch::from(&chunk);
        if let Some(max) = max_rows {
            if rows + batch.num_rows() as u64 > max {
                batch = batch.slice(0, (max - rows) as usize);
                truncated = true;
            }
            rows += batch.num_rows() as u64;
        }
        bytes += batch.get_array_memory_size() as u64;
        if bytes > max_bytes {
            return Err(Error::new(
                Kind::TooLarge,
                "result_too_large",
                format!("the result is larger than the limit of {max_bytes} bytes"),
            )
            .with_hint(
                "add a LIMIT or aggregate, or write the result to a file with --out FILE.parquet",
            ));
        }
        batches.push(batch);
        if truncated {
            break;
        }
    }
    Ok((schema, batches, truncated))
}

fn input_error(table: &str, e: duckdb::Error) -> Error {
    Error::bad_request("bad_input", format!("cannot read input '{table}': {e}"))
}

fn sql_error(e: duckdb::Error) -> Error {
    let text = e.to_string();
    if text.contains("INTERRUPT") || text.contains("Interrupted") {
        return Error::new(Kind::Timeout, "interrupted", "the query was interrupted");
    }
    if text.contains("Loading external extensions is disabled") {
        return Error::bad_request(
            "unsupported_function",
            format!(
                "the query needs a DuckDB extension, which lh's sandboxed DuckDB does not \
                 load: {text}"
            ),
        )
        .with_hint(
            "lh's DuckDB has the parquet, json and ICU extensions built in and loads no \
             others (a `bundled-duckdb` build lacks ICU: there, compute TIMESTAMPTZ values \
             in UTC on a TIMESTAMP, e.g. date_trunc('day', ts::timestamp))",
        );
    }
    if text.contains("Permission Error") || text.contains("disabled by configuration") {
        return Error::bad_request("forbidden", format!("not allowed: {text}")).with_hint(
            "queries read lh tables only; files, extensions and settings are off limits",
        );
    }
    let hint = text
        .contains("does not exist")
        .then(|| "tables are named namespace.table; `lh table ls` lists them".to_string());
    let mut err = Error::bad_request("sql_error", format!("SQL error: {text}"));
    err.hint = hint;
    err
}

#[cfg(test)]
mod tests {
    //! The engine in-process, on a real catalog, warehouse and DuckDB.

    use std::sync::Arc;

    use iceberg::spec::{NestedField, PrimitiveType, Schema, TableMetadataBuilder, Type};
    use lh_api::{FileFormat, ImportMode};
    use lh_catalog::{Catalog, CommitMeta};

    use super::*;
    use crate::tables::write::{ImportContext, ImportJob, import};
    use crate::warehouse::Warehouse;

    async fn setup(dir: &std::path::Path) -> (Arc<Tables>, QueryEngine, ImportContext) {
        let catalog = Catalog::open(&format!("sqlite:{}", dir.join("c.db").display()))
            .await
            .unwrap();
        let warehouse = Warehouse::open(dir.join("wh").to_str().unwrap()).unwrap();
        let tables = Arc::new(Tables::new(catalog, warehouse));
        let limits = QueryLimits {
            timeout: Duration::from_secs(30),
            max_result_bytes: 1 << 20,
            max_concurrent: 2,
            duck: DuckLimits {
                threads: 1,
                memory_limit: "1GB".into(),
            },
        };
        let engine = QueryEngine::new(tables.clone(), limits.clone(), dir.join("spill")).unwrap();
        let ctx = ImportContext {
            uploads: dir.join("up"),
            outputs: dir.join("out"),
            spill: dir.join("spill2"),
            limits: limits.duck,
        };
        std::fs::create_dir_all(&ctx.uploads).unwrap();
        (tables, engine, ctx)
    }

    /// Makes `schema` the current schema of the table `t` on main, as a schema change of
    /// another engine would.
    async fn set_schema(tables: &Tables, t: &LoadedTable, schema: Schema) {
        let evolved = TableMetadataBuilder::new_from_metadata(
            (*t.metadata).clone(),
            Some(t.pointer.metadata_location.clone()),
        )
        .add_current_schema(schema)
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        let location = tables
            .write_metadata(&evolved, Some(&t.pointer.metadata_location))
            .unwrap();
        tables
            .commit_table(
                "main",
                &t.name,
                Some(t.pointer.clone()),
                location,
                &evolved,
                CommitMeta::new("t", "schema change"),
            )
            .await
            .unwrap();
    }

    /// Imports a file with `body` (its format from its name's extension) into `table`
    /// on main.
    async fn import_file(
        tables: &Tables,
        ctx: &ImportContext,
        table: &str,
        name: &str,
        body: &str,
        mode: ImportMode,
    ) {
        let path = ctx.uploads.join(name);
        std::fs::write(&path, body).unwrap();
        let format = if name.ends_with(".ndjson") {
            FileFormat::Json
        } else {
            FileFormat::Csv
        };
        let job = ImportJob {
            branch: "main".into(),
            table: table.into(),
            mode,
            format,
            files: vec![path],
            names: vec![name.into()],
            author: "t".into(),
        };
        import(tables, ctx, job).await.unwrap();
    }

    async fn rows(engine: &QueryEngine, sql: &str) -> Vec<String> {
        let out = engine.run(sql, "main", None, None).await.unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&out.batches)
            .unwrap()
            .to_string();
        text.lines().map(String::from).collect()
    }

    /// Regression guard for reading by field id: after a rename the old files read
    /// under the new name, and a column added later reads as NULL in them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renamed_and_added_columns_read_by_field_id() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = setup(dir.path()).await;
        import_file(
            &tables,
            &ctx,
            "raw.t",
            "a.csv",
            "id,name\n1,x\n2,y\n",
            ImportMode::Create,
        )
        .await;

        // Rename `name` (field 2) to `label` and add `score` (field 3).
        let head = tables.catalog.resolve("main").await.unwrap().commit;
        let t = tables.load(&head, "raw.t").await.unwrap().unwrap();
        let schema = Schema::builder()
            .with_schema_id(1)
            .with_fields(vec![
                Arc::new(NestedField::optional(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "label",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "score",
                    Type::Primitive(PrimitiveType::Double),
                )),
            ])
            .build()
            .unwrap();
        set_schema(&tables, &t, schema).await;

        let got = rows(&engine, "select id, label, score from raw.t order by id").await;
        assert_eq!(
            got,
            [
                "+----+-------+-------+",
                "| id | label | score |",
                "+----+-------+-------+",
                "| 1  | x     |       |",
                "| 2  | y     |       |",
                "+----+-------+-------+",
            ]
        );
        let err = engine
            .run("select name from raw.t", "main", None, None)
            .await
            .err()
            .unwrap();
        assert_eq!(err.code, "sql_error");
    }

    /// Nested fields read by field id too: a struct field renamed after the file was
    /// written reads under its new name (in a struct, and in a struct inside a list),
    /// one added later reads as NULL; filters on them still work.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renamed_and_added_nested_fields_read_by_field_id() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = setup(dir.path()).await;
        import_file(
            &tables,
            &ctx,
            "raw.t",
            "a.ndjson",
            "{\"id\": 1, \"user\": {\"name\": \"x\", \"age\": 3}, \"tags\": [{\"k\": \"a\"}, {\"k\": \"b\"}]}\n\
             {\"id\": 2, \"user\": null, \"tags\": null}\n",
            ImportMode::Create,
        )
        .await;
        let before = rows(&engine, "select id, user, tags from raw.t order by id").await;

        // user.name -> user.full_name, a new user.email, tags[].k -> tags[].tag.
        let head = tables.catalog.resolve("main").await.unwrap().commit;
        let t = tables.load(&head, "raw.t").await.unwrap().unwrap();
        let old = t.metadata.current_schema();
        let id_of = |name: &str| old.field_by_name(name).unwrap().id;
        let field = |id: i32, name: &str, ty: Type| Arc::new(NestedField::optional(id, name, ty));
        let string = || Type::Primitive(PrimitiveType::String);
        let user = iceberg::spec::StructType::new(vec![
            field(id_of("user.name"), "full_name", string()),
            field(
                id_of("user.age"),
                "age",
                Type::Primitive(PrimitiveType::Long),
            ),
            field(t.metadata.last_column_id() + 1, "email", string()),
        ]);
        let tag =
            iceberg::spec::StructType::new(vec![field(id_of("tags.element.k"), "tag", string())]);
        let element = old.field_by_name("tags.element").unwrap().as_ref().clone();
        let tags = iceberg::spec::ListType::new(Arc::new(NestedField {
            field_type: Box::new(Type::Struct(tag)),
            ..element
        }));
        let schema = Schema::builder()
            .with_schema_id(1)
            .with_fields(vec![
                field(id_of("id"), "id", Type::Primitive(PrimitiveType::Long)),
                field(id_of("user"), "user", Type::Struct(user)),
                field(id_of("tags"), "tags", Type::List(tags)),
            ])
            .build()
            .unwrap();
        set_schema(&tables, &t, schema).await;

        assert_eq!(
            before,
            [
                "+----+-------------------+------------------+",
                "| id | user              | tags             |",
                "+----+-------------------+------------------+",
                "| 1  | {name: x, age: 3} | [{k: a}, {k: b}] |",
                "| 2  |                   |                  |",
                "+----+-------------------+------------------+",
            ]
        );
        let got = rows(&engine, "select id, user, tags from raw.t order by id").await;
        assert_eq!(
            got,
            [
                "+----+---------------------------------+----------------------+",
                "| id | user                            | tags                 |",
                "+----+---------------------------------+----------------------+",
                "| 1  | {full_name: x, age: 3, email: } | [{tag: a}, {tag: b}] |",
                "| 2  |                                 |                      |",
                "+----+---------------------------------+----------------------+",
            ]
        );
        let got = rows(
            &engine,
            "select id, tags[2].tag AS second from raw.t where user.full_name = 'x'",
        )
        .await;
        assert_eq!(
            got,
            [
                "+----+--------+",
                "| id | second |",
                "+----+--------+",
                "| 1  | b      |",
                "+----+--------+",
            ]
        );
    }

    /// Writes the rows of `select` as a Parquet file in the table folder at `location`,
    /// its columns carrying the field ids of `schema`; returns its URL, rows and bytes.
    fn write_parquet(
        tables: &Tables,
        location: &str,
        schema: &Schema,
        select: &str,
        columns: &[&str],
    ) -> (String, u64, u64) {
        let url = format!("{location}/data/f-{}.parquet", uuid::Uuid::new_v4());
        let path = tables.warehouse.local_path(&url).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let field_ids: Vec<String> = columns
            .iter()
            .map(|c| format!("{c}: {}", schema.field_by_name(c).unwrap().id))
            .collect();
        let rows = Connection::open_in_memory()
            .unwrap()
            .execute(
                &format!(
                    "COPY ({select}) TO '{}' (FORMAT parquet, FIELD_IDS {{{}}})",
                    path.display(),
                    field_ids.join(", ")
                ),
                [],
            )
            .unwrap();
        (url, rows as u64, std::fs::metadata(&path).unwrap().len())
    }

    /// A data or equality delete file (on `equality` columns) of the rows of `select`, in
    /// `partition` of the table's default spec.
    fn file_of(
        tables: &Tables,
        m: &iceberg::spec::TableMetadata,
        select: &str,
        columns: &[&str],
        equality: Option<&[&str]>,
        partition: iceberg::spec::Struct,
    ) -> iceberg::spec::DataFile {
        use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat};
        let schema = m.current_schema();
        let (url, rows, bytes) = write_parquet(tables, m.location(), schema, select, columns);
        let mut b = DataFileBuilder::default();
        b.file_path(url)
            .file_format(DataFileFormat::Parquet)
            .partition(partition)
            .partition_spec_id(m.default_partition_spec_id())
            .record_count(rows)
            .file_size_in_bytes(bytes);
        match equality {
            Some(cols) => b
                .content(DataContentType::EqualityDeletes)
                .equality_ids(Some(
                    cols.iter()
                        .map(|c| schema.field_by_name(c).unwrap().id)
                        .collect(),
                )),
            None => b.content(DataContentType::Data),
        };
        b.build().unwrap()
    }

    /// Commits a snapshot of `table` on main that adds `files` (data or deletes, not
    /// both) to its live files, as another engine would.
    async fn commit_files(tables: &Tables, table: &str, files: Vec<iceberg::spec::DataFile>) {
        use iceberg::spec::{
            DataContentType, MAIN_BRANCH, ManifestListWriter, ManifestWriterBuilder, Operation,
            Snapshot, SnapshotReference, SnapshotRetention, Summary,
        };
        let head = tables.catalog.resolve("main").await.unwrap().commit;
        let t = tables.load(&head, table).await.unwrap().unwrap();
        let m = (*t.metadata).clone();
        let io = tables.warehouse.io();
        let snapshot_id = m.current_snapshot_id().unwrap_or(0) + 1;
        let seq = m.next_sequence_number();
        let meta = format!("{}/metadata", m.location());
        let builder = ManifestWriterBuilder::new(
            io.new_output(format!("{meta}/t-{snapshot_id}-m.avro"))
                .unwrap(),
            Some(snapshot_id),
            m.current_schema().clone(),
            m.default_partition_spec().as_ref().clone(),
        );
        let deletes = files[0].content_type() != DataContentType::Data;
        let mut w = if deletes {
            builder.build_v2_deletes()
        } else {
            builder.build_v2_data()
        };
        for f in files {
            w.add_file(f, seq).unwrap();
        }
        let mut manifests = crate::tables::snapshot::current_manifests(io, &m)
            .await
            .unwrap();
        manifests.push(w.write_manifest_file().await.unwrap());
        let list = format!("{meta}/snap-{snapshot_id}-t.avro");
        let mut l = ManifestListWriter::v2(
            io.new_output(&list).unwrap().writer().await.unwrap(),
            snapshot_id,
            m.current_snapshot_id(),
            seq,
        );
        l.add_manifests(manifests.into_iter()).unwrap();
        l.close().await.unwrap();
        let snapshot = Snapshot::builder()
            .with_manifest_list(list)
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(m.current_snapshot_id())
            .with_sequence_number(seq)
            .with_summary(Summary {
                operation: if deletes {
                    Operation::Delete
                } else {
                    Operation::Append
                },
                additional_properties: Default::default(),
            })
            .with_schema_id(m.current_schema_id())
            .with_timestamp_ms(m.last_updated_ms() + 1)
            .build();
        let next =
            TableMetadataBuilder::new_from_metadata(m, Some(t.pointer.metadata_location.clone()))
                .add_snapshot(snapshot)
                .unwrap()
                .set_ref(
                    MAIN_BRANCH,
                    SnapshotReference::new(
                        snapshot_id,
                        SnapshotRetention::branch(None, None, None),
                    ),
                )
                .unwrap()
                .build()
                .unwrap()
                .metadata;
        let location = tables
            .write_metadata(&next, Some(&t.pointer.metadata_location))
            .unwrap();
        tables
            .commit_table(
                "main",
                table,
                Some(t.pointer.clone()),
                location,
                &next,
                CommitMeta::new("t", "files of another engine"),
            )
            .await
            .unwrap();
    }

    /// Commits an equality delete file (as Flink writes them) to the unpartitioned
    /// `table` on main: the rows of `select`, whose columns are the equality columns.
    async fn add_equality_delete(tables: &Tables, table: &str, select: &str, columns: &[&str]) {
        let head = tables.catalog.resolve("main").await.unwrap().commit;
        let t = tables.load(&head, table).await.unwrap().unwrap();
        let f = file_of(
            tables,
            &t.metadata,
            select,
            columns,
            Some(columns),
            iceberg::spec::Struct::empty(),
        );
        commit_files(tables, table, vec![f]).await;
    }

    /// A table whose columns carry the names of the view's own columns reads right: they
    /// cannot stand in for the file's sequence number or position.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn columns_named_like_the_views_own_do_not_confuse_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = setup(dir.path()).await;
        import_file(
            &tables,
            &ctx,
            "raw.t",
            "a.csv",
            "id,__lh_seq,__LH_PART,__lh_file,__lh1_x\n1,100,x,a.txt,0\n2,100,x,a.txt,0\n",
            ImportMode::Create,
        )
        .await;
        add_equality_delete(&tables, "raw.t", "SELECT 1::BIGINT AS id", &["id"]).await;
        let got = rows(&engine, "select id, __lh_seq, __lh_file from raw.t").await;
        assert_eq!(
            got[3..],
            [
                "| 2  | 100      | a.txt     |",
                "+----+----------+-----------+"
            ]
        );
    }

    /// Creates an empty table on main with `schema` and partition `spec`, as another
    /// engine would.
    async fn create_table(
        tables: &Tables,
        name: &str,
        schema: Schema,
        spec: iceberg::spec::UnboundPartitionSpec,
    ) {
        let uuid = uuid::Uuid::now_v7();
        let location = tables.warehouse.new_table_location(name, &uuid);
        let created = TableMetadataBuilder::new(
            schema,
            spec,
            iceberg::spec::SortOrder::unsorted_order(),
            location,
            iceberg::spec::FormatVersion::V2,
            Default::default(),
        )
        .unwrap()
        .assign_uuid(uuid)
        .build()
        .unwrap()
        .metadata;
        let metadata_location = tables.write_metadata(&created, None).unwrap();
        tables
            .commit_table(
                "main",
                name,
                None,
                metadata_location,
                &created,
                CommitMeta::new("t", "create"),
            )
            .await
            .unwrap();
    }

    /// A spec whose fields are all `void` (what dropping a v1 table's partition field
    /// leaves) partitions nothing: lh appends to it, each file with a null per field.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lh_appends_to_a_table_with_a_void_partition_spec() {
        use iceberg::spec::{Transform, UnboundPartitionSpec};
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = setup(dir.path()).await;
        let schema = Schema::builder()
            .with_fields(vec![Arc::new(NestedField::optional(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            ))])
            .build()
            .unwrap();
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(1, "id_gone", Transform::Void)
            .unwrap()
            .build();
        create_table(&tables, "raw.v", schema, spec).await;
        for i in 0..2 {
            let (name, body) = (format!("{i}.csv"), format!("id\n{i}\n"));
            import_file(&tables, &ctx, "raw.v", &name, &body, ImportMode::Append).await;
        }
        let got = rows(
            &engine,
            "select sum(id)::int AS s, count(*)::int AS n from raw.v",
        )
        .await;
        assert_eq!(got[3], "| 1 | 2 |");
    }

    /// In a partitioned table, an equality delete applies in its own partition only.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn equality_deletes_apply_within_their_partition() {
        use iceberg::spec::{Literal, Struct, Transform, UnboundPartitionSpec};
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, _ctx) = setup(dir.path()).await;
        let schema = Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::optional(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "k",
                    Type::Primitive(PrimitiveType::String),
                )),
            ])
            .build()
            .unwrap();
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(2, "k", Transform::Identity)
            .unwrap()
            .build();
        create_table(&tables, "raw.p", schema, spec).await;
        let part = |k: &str| Struct::from_iter([Some(Literal::string(k))]);
        let head = tables.catalog.resolve("main").await.unwrap().commit;
        let m = tables.load(&head, "raw.p").await.unwrap().unwrap().metadata;
        let files = vec![
            file_of(
                &tables,
                &m,
                "SELECT 1::BIGINT AS id, 'a' AS k UNION ALL SELECT 2, 'a'",
                &["id", "k"],
                None,
                part("a"),
            ),
            file_of(
                &tables,
                &m,
                "SELECT 1::BIGINT AS id, 'b' AS k",
                &["id", "k"],
                None,
                part("b"),
            ),
        ];
        commit_files(&tables, "raw.p", files).await;
        let head = tables.catalog.resolve("main").await.unwrap().commit;
        let m = tables.load(&head, "raw.p").await.unwrap().unwrap().metadata;
        let delete = file_of(
            &tables,
            &m,
            "SELECT 1::BIGINT AS id",
            &["id"],
            Some(&["id"]),
            part("a"),
        );
        commit_files(&tables, "raw.p", vec![delete]).await;

        let got = rows(&engine, "select k || id AS r from raw.p order by r").await;
        assert_eq!(got[3..], ["| a2 |", "| b1 |", "+----+"]);
    }

    /// Equality deletes: a row equal on the delete's columns (NULL matching NULL) goes
    /// from the data files older than the delete; a row written after it stays; deletes
    /// on different columns each apply; filters still work.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn equality_deletes_remove_equal_rows_of_older_files() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = setup(dir.path()).await;
        let body = "id,name\n1,a\n2,b\n3,c\n,z\n";
        import_file(&tables, &ctx, "raw.t", "a.csv", body, ImportMode::Create).await;
        async fn ids(engine: &QueryEngine, sql: &str) -> String {
            rows(engine, sql).await[3..].join("\n")
        }
        let all = "select coalesce(id::varchar, '-') || name AS r from raw.t order by r";

        add_equality_delete(
            &tables,
            "raw.t",
            "SELECT * FROM (VALUES (2::BIGINT), (NULL::BIGINT)) v(id)",
            &["id"],
        )
        .await;
        assert_eq!(ids(&engine, all).await, "| 1a |\n| 3c |\n+----+");

        let body = "id,name\n2,again\n";
        import_file(&tables, &ctx, "raw.t", "b.csv", body, ImportMode::Append).await;
        assert_eq!(
            ids(&engine, all).await,
            "| 1a     |\n| 2again |\n| 3c     |\n+--------+"
        );

        add_equality_delete(&tables, "raw.t", "SELECT 'a' AS name", &["name"]).await;
        assert_eq!(
            ids(&engine, all).await,
            "| 2again |\n| 3c     |\n+--------+"
        );
        assert_eq!(
            ids(&engine, "select count(*) AS n from raw.t where id = 2").await,
            "| 1 |\n+---+"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commit_catalogs_are_reused_bounded_and_right() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = setup(dir.path()).await;
        let attached = |engine: &QueryEngine, prefix: &str| -> i64 {
            engine
                .database
                .lock()
                .unwrap()
                .query_row(
                    "select count(*) from duckdb_databases() where database_name like ?",
                    [format!("{prefix}%")],
                    |r| r.get(0),
                )
                .unwrap()
        };
        // Queries of one commit share its catalog; analysis sessions leave none behind.
        for _ in 0..3 {
            assert_eq!(rows(&engine, "select 1 AS x").await.len(), 5);
            engine.analyze("select 2").await.unwrap();
        }
        assert_eq!(attached(&engine, "c_"), 1);
        assert_eq!(attached(&engine, "q_"), 0);

        // More commits than the cache keeps: each reads its own rows, cached or not.
        let mut commits = Vec::new();
        for i in 0..CACHED_COMMITS + 6 {
            let mode = if i == 0 {
                ImportMode::Create
            } else {
                ImportMode::Append
            };
            let (name, body) = (format!("{i}.csv"), format!("id\n{i}\n"));
            import_file(&tables, &ctx, "raw.t", &name, &body, mode).await;
            let head = tables.catalog.resolve("main").await.unwrap().commit.id;
            commits.push(format!("@{}", head.to_hex()));
        }
        let count = |at: String| {
            let engine = &engine;
            async move {
                let out = engine
                    .run("select count(*)::int AS n from raw.t", &at, None, None)
                    .await
                    .unwrap();
                arrow::util::pretty::pretty_format_batches(&out.batches)
                    .unwrap()
                    .to_string()
                    .lines()
                    .nth(3)
                    .unwrap()
                    .trim_matches(|c| c == '|' || c == ' ')
                    .parse::<usize>()
                    .unwrap()
            }
        };
        for (i, at) in commits.iter().enumerate() {
            assert_eq!(count(at.clone()).await, i + 1, "{at}");
        }
        assert!(attached(&engine, "c_") as usize <= CACHED_COMMITS);
        // The first commits' catalogs were evicted and detached; asked again, they are
        // made again, with the same answer.
        assert_eq!(count(commits[0].clone()).await, 1);
        assert_eq!(
            count(commits[CACHED_COMMITS + 5].clone()).await,
            CACHED_COMMITS + 6
        );
        assert_eq!(attached(&engine, "q_"), 0);
    }
}
