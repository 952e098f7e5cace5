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
//!
//! [`QueryEngine::views`] is the one way a table becomes a DuckDB view, for queries,
//! pipeline inputs and SQL models alike; `commits.rs` holds the commit catalogs the views
//! live in, `view.rs` writes a view's SQL, `sql.rs` reads DuckDB's parse of a statement,
//! `execute.rs` runs one statement and collects its answer within the query's bounds.

use lh_auth as auth;
use lh_core::{duck, error};
use lh_tables as tables;
use lh_warehouse as warehouse;

mod commits;
pub mod diff;
mod execute;
pub mod ipc;
pub mod maintenance;
pub mod memory;
pub mod prune;
pub mod sql;
#[cfg(test)]
pub(crate) mod tests;
pub mod view;
#[cfg(test)]
mod write_tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use duckdb::Connection;
use lh_catalog::{Commit, CommitId, RefExpr};
use tokio::sync::Semaphore;

use crate::auth::{Action, Identity};
use crate::duck::{DuckLimits, quote_ident};
use crate::error::{Code, Error, Kind, Result};
use crate::tables::Tables;
use crate::warehouse::cache::Pins;
pub use commits::View;
use commits::{CommitCatalog, Session, connect};
use execute::{Bounds, Rows, Started, execute, fetch_timeout, input_error, sql_error};
use sql::TableRef;
use view::{view_name, view_sql};

/// How a query runs, beyond its SQL and its commit.
#[derive(Clone, Copy)]
pub struct Ask<'a> {
    /// At most the server's query timeout.
    pub timeout: Option<Duration>,
    pub max_rows: Option<u64>,
    /// The tables read: any other is "not found", as a table that does not exist is
    /// (its existence is not told).
    pub readable: &'a (dyn Fn(&str) -> bool + Sync),
    /// A caller who may not read everything: the statement runs in a catalog of its
    /// own, not the commit's shared one, and DuckDB's "Did you mean ...?" suggestions
    /// are left out of errors.
    pub restricted: bool,
    /// The rows come back encoded as an Arrow IPC stream (`QueryOutput::ipc`), each
    /// batch as DuckDB hands it over.
    pub ipc: bool,
    /// Who asks, held to its share of the query slots (`slot_for`).
    pub caller: Option<&'a str>,
    /// The caller's name for this query, by which it may ask how far DuckDB is
    /// ([`QueryEngine::progress`]) while it runs.
    pub progress: Option<&'a str>,
}

impl Default for Ask<'_> {
    fn default() -> Self {
        Ask {
            timeout: None,
            max_rows: None,
            readable: &|_| true,
            restricted: false,
            ipc: false,
            caller: None,
            progress: None,
        }
    }
}

/// The running queries that callers named (`Ask::progress`), by caller and name: the
/// watches of their sessions' progress (each closed by its session before its
/// connection is).
type Running = std::sync::Mutex<std::collections::HashMap<(String, String), Arc<duck::Watch>>>;

/// A named query's entry in [`Running`], removed when DuckDB is done with it.
struct Tracked {
    running: Arc<Running>,
    key: (String, String),
    watch: Arc<duck::Watch>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Ok(mut r) = self.running.lock()
            && r.get(&self.key)
                .is_some_and(|w| Arc::ptr_eq(w, &self.watch))
        {
            r.remove(&self.key);
        }
    }
}

/// The limits of the query engine.
#[derive(Debug, Clone)]
pub struct QueryLimits {
    pub timeout: Duration,
    pub max_result_bytes: u64,
    pub max_concurrent: usize,
    pub duck: DuckLimits,
    /// The bytes every answer the server holds may take together (`memory.rs`).
    pub answer_memory: u64,
}

pub struct QueryEngine {
    tables: Arc<Tables>,
    limits: QueryLimits,
    permits: Arc<Semaphore>,
    /// Each caller's share of the slots (`slot_for`), while it holds or waits for one.
    shares: std::sync::Mutex<std::collections::HashMap<String, Arc<Share>>>,
    /// The shared, locked database; each query connects to it anew.
    database: Arc<std::sync::Mutex<Connection>>,
    /// The catalogs of recently queried commits, with the views made in them.
    commits: quick_cache::sync::Cache<CommitId, Arc<CommitCatalog>>,
    /// What the answers held at once may take.
    memory: memory::AnswerMemory,
    /// The named queries running now (at most one per query slot).
    running: Arc<Running>,
}

/// DuckDB's parse tree of `text` as JSON (`json_serialize_sql`), exempt from the C
/// heap's limit (`lh_core::heap::exempt`: the statement's size is the request's).
fn serialize(database: &std::sync::Mutex<Connection>, text: &str) -> Result<String> {
    lh_core::heap::exempt(|| {
        Ok(connect(database)?
            .prepare("SELECT json_serialize_sql(?::VARCHAR)")?
            .query_row([text], |r| r.get(0))?)
    })
}

/// How many commits keep their catalog of views between queries.
const CACHED_COMMITS: usize = 64;

/// A query's answer.
pub struct QueryOutput {
    pub commit: CommitId,
    pub schema: SchemaRef,
    /// The rows, unless they were asked for as an Arrow IPC stream (`ipc`).
    pub batches: Vec<RecordBatch>,
    /// The answer memory `batches` hold, given back when the output is dropped.
    pub charge: Option<memory::Charge>,
    /// The query slot, held while the answer is made into its body (its JSON text).
    pub(crate) _slot: Option<Arc<Slot>>,
    /// The rows already encoded as an Arrow IPC stream, as DuckDB handed them over.
    pub ipc: Option<ipc::IpcStream>,
    /// A large answer without `max_rows`, being sent as DuckDB produces it.
    pub streaming: Option<Streaming>,
    /// Whether `max_rows` cut the result short.
    pub truncated: bool,
    /// The data files of the tables it names that its views read (after pruning).
    pub files_read: u64,
}

/// A streamed answer: the pieces written so far, then the rest as they come (an error
/// breaks the stream off), and whether the whole stream was sent.
pub struct Streaming {
    pub first: Vec<Bytes>,
    pub rest: tokio::sync::mpsc::Receiver<Result<Bytes>>,
    pub done: Arc<std::sync::atomic::AtomicBool>,
}

/// Interrupts a running query when dropped, unless it finished first: a caller that
/// goes away (a client that disconnects) stops its query.
struct InterruptOnDrop(Option<Arc<duck::Watch>>);

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.interrupt();
        }
    }
}

/// Awaits DuckDB's work `task` on the connection `handle` interrupts, for at most
/// `timeout`: past it the work is interrupted and the error says what ran too long
/// (`late`); a caller that goes away interrupts it too.
async fn interruptible<T>(
    handle: Arc<duck::Watch>,
    timeout: Duration,
    task: impl Future<Output = Result<T>>,
    late: impl FnOnce() -> String,
) -> Result<T> {
    let mut guard = InterruptOnDrop(Some(handle.clone()));
    let out = match tokio::time::timeout(timeout, task).await {
        Ok(r) => r,
        Err(_) => {
            handle.interrupt();
            Err(Error::new(Kind::Timeout, Code::Timeout, late()))
        }
    };
    guard.0 = None;
    out
}

impl QueryEngine {
    pub fn new(tables: Arc<Tables>, limits: QueryLimits, spill: PathBuf) -> Result<QueryEngine> {
        let readable = tables.warehouse.readable_dirs();
        let readable: Vec<&std::path::Path> = readable.iter().map(|p| p.as_path()).collect();
        let conn = duck::sandboxed(&readable, &spill, &limits.duck)?;
        duck::lock(&conn)?;
        Ok(QueryEngine {
            tables,
            permits: Arc::new(Semaphore::new(limits.max_concurrent.max(1))),
            shares: Default::default(),
            database: Arc::new(std::sync::Mutex::new(conn)),
            commits: quick_cache::sync::Cache::new(CACHED_COMMITS),
            memory: memory::AnswerMemory::new(limits.answer_memory),
            running: Default::default(),
            limits,
        })
    }

    pub fn limits(&self) -> &QueryLimits {
        &self.limits
    }

    /// How far `caller`'s running query named `id` (`Ask::progress`) is, in percent as
    /// DuckDB's progress bar says (`None` while DuckDB cannot tell); not found when no
    /// query of that caller by that name runs now. A caller sees only its own.
    pub fn progress(&self, caller: &str, id: &str) -> Result<Option<f64>> {
        let watch = self
            .running
            .lock()
            .map_err(|_| Error::internal("the running queries are poisoned"))?
            .get(&(caller.to_string(), id.to_string()))
            .cloned()
            .ok_or_else(|| {
                Error::not_found(
                    Code::QueryNotFound,
                    format!("no query named '{id}' is running"),
                )
            })?;
        Ok(watch.read())
    }

    /// The server's answer memory, which every answer it holds is charged to.
    pub fn answer_memory(&self) -> &memory::AnswerMemory {
        &self.memory
    }

    /// Writes the rows of `table` in `commit` (only `columns`, only the rows matching
    /// `filter`) to an Arrow IPC file at `path`: a pipeline function's input, with its
    /// projection and filter pushed down to the Parquet scan. Returns the row count.
    ///
    /// The filter is user SQL, so this is a query like any other: it waits for a query
    /// slot of `caller`'s share, stops after `timeout`, and is interrupted when the
    /// caller goes away (a cancelled run).
    #[allow(clippy::too_many_arguments)]
    pub async fn export_arrow(
        &self,
        commit: &Commit,
        table: &str,
        columns: Option<&[String]>,
        filter: Option<&str>,
        path: &std::path::Path,
        timeout: Duration,
        caller: &str,
    ) -> Result<u64> {
        let parts: Vec<String> = match lh_catalog::names::to_sql(table) {
            Some((ns, t)) => vec![ns, t],
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
        let mut sql = format!("SELECT {cols} FROM {}", view_name(&parts));
        if let Some(f) = filter {
            sql.push_str(&format!(" WHERE ({f})"));
        }
        // The filter is the user's SQL: it must keep the query one SELECT of this table.
        // Checked first: it reads nothing.
        let analysis = self.analyze(&sql).await?;
        if analysis.tables.iter().any(|t| t != &parts) {
            return Err(Error::bad_request(
                Code::BadFilter,
                format!("the filter of input '{table}' may use only that table's columns"),
            ));
        }
        // A filter that leaves files out (a partition's rows) reads only the others,
        // through views of its own.
        let mut pruned = BTreeMap::new();
        if let (Some(f), Some(t)) = (
            analysis.filters.get(&parts),
            self.tables.load(commit, table).await?,
        ) {
            let bound = prune::bind(&t, f);
            if !bound.is_empty() {
                pruned.insert(parts.clone(), bound);
            }
        }
        // Its own catalog when the commit's holds a view of this name of another
        // table (see `CommitCatalog::holds_other`).
        let shared = self.commit_catalog(&commit.id)?;
        let catalog = match pruned.is_empty() && !shared.holds_other(&view_name(&parts), table) {
            true => shared,
            false => Arc::new(CommitCatalog::attach(&self.database)?),
        };
        let missing = |_: &str| {
            Error::not_found(
                Code::TableNotFound,
                format!("input table '{table}' not found"),
            )
        };
        let (views, _pins) = tokio::time::timeout(
            timeout,
            self.views(
                commit,
                Some(&catalog),
                std::slice::from_ref(&parts),
                &BTreeMap::from([(parts.clone(), table.to_string())]),
                &missing,
                &pruned,
            ),
        )
        .await
        .map_err(|_| fetch_timeout(timeout))??;
        let _permit = Arc::new(self.slot_for(caller).await?);
        let database = self.database.clone();
        let session = blocking(move || {
            let session = Session::in_commit(&database, catalog)?;
            session.ensure_views(&views)?;
            Ok(session)
        })
        .await?;
        let handle = session.watch.clone();
        let out = path.to_path_buf();
        let label = table.to_string();
        let held = _permit.clone();
        let task = blocking(move || {
            let _held = held;
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
        });
        interruptible(handle, timeout, task, || {
            format!(
                "reading input '{table}' ran past the function's timeout of {} s and was stopped",
                timeout.as_secs()
            )
        })
        .await
    }

    /// DuckDB's reading of a query: the tables, parameters and CTEs it names. Runs no
    /// query.
    pub async fn analyze(&self, sql: &str) -> Result<sql::Analysis> {
        sql::check_case_copies(sql)?;
        let database = self.database.clone();
        let text = sql.to_string();
        blocking(move || {
            let serialized = serialize(&database, &text)?;
            sql::analyze(&serialized).map_err(|e| sql::locate(e, &serialized, &text))
        })
        .await
    }

    /// DuckDB's parse tree of `sql` (`json_serialize_sql`), positions left out: two
    /// statements that differ only in comments and layout have the same tree.
    pub async fn parse_tree(&self, sql: &str) -> Result<serde_json::Value> {
        sql::check_case_copies(sql)?;
        let database = self.database.clone();
        let text = sql.to_string();
        let serialized: String = blocking(move || serialize(&database, &text)).await?;
        let mut tree = sql::parse_tree(&serialized)?;
        fn strip(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(m) => {
                    m.remove("query_location");
                    m.values_mut().for_each(strip);
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
                _ => {}
            }
        }
        strip(&mut tree);
        if tree["error"] == serde_json::Value::Bool(true) {
            return Err(Error::bad_request(
                Code::SqlError,
                format!(
                    "SQL error: {}",
                    tree["error_message"].as_str().unwrap_or("cannot parse")
                ),
            ));
        }
        Ok(tree)
    }

    /// The columns (name, DuckDB type) a SQL model's query gives at `commit`, its
    /// input tables exposed as a run exposes them (`bare`: under the bare name too).
    /// The query must be one read-only statement, as a model's is; it is planned, never
    /// run (`LIMIT 0`), under a query slot of `caller`'s share and the query timeout.
    /// (DuckDB folds constants as it plans: a model's constant expression is computed
    /// here, which is why the slot is the caller's like a query's; found by the
    /// thirtieth review, where three plans held every slot.)
    pub async fn output_columns(
        &self,
        commit: &Commit,
        inputs: &[(String, bool)],
        sql: &str,
        caller: &str,
    ) -> Result<Vec<(String, String)>> {
        // Each input's view, by the input's own name (never its SQL spelling read back).
        let inputs: Vec<(TableRef, bool, String)> = inputs
            .iter()
            .map(|(name, bare)| {
                let parts = match lh_catalog::names::to_sql(name) {
                    Some((ns, t)) => vec![ns, t],
                    None => vec![name.clone()],
                };
                (parts, *bare, name.clone())
            })
            .collect();
        let named: BTreeMap<TableRef, String> = inputs
            .iter()
            .map(|(p, _, n)| (p.clone(), n.clone()))
            .collect();
        // One read-only statement: the same check as every query's.
        self.analyze(sql).await?;
        let _permit = Arc::new(self.slot_for(caller).await?);
        let timeout = self.limits.timeout;
        let names: Vec<TableRef> = inputs.iter().map(|(n, _, _)| n.clone()).collect();
        let missing = |name: &str| {
            Error::not_found(
                Code::TableNotFound,
                format!("input table '{name}' is not on the branch"),
            )
        };
        let (views, pins) = tokio::time::timeout(
            timeout,
            self.views(commit, None, &names, &named, &missing, &BTreeMap::new()),
        )
        .await
        .map_err(|_| fetch_timeout(timeout))??;
        let mut setup: Vec<View> = views;
        for (parts, bare, of) in &inputs {
            if let (true, [_, table]) = (*bare, parts.as_slice()) {
                setup.push(View {
                    of: format!("{of}, by its bare name"),
                    name: format!("main.{}", quote_ident(table)),
                    sql: format!(
                        "CREATE OR REPLACE VIEW main.{} AS SELECT * FROM {};",
                        quote_ident(table),
                        view_name(parts)
                    ),
                });
            }
        }
        let catalog = Arc::new(CommitCatalog::attach(&self.database)?);
        let database = self.database.clone();
        let session = blocking(move || Session::in_commit(&database, catalog)).await?;
        let handle = session.watch.clone();
        let text = format!(
            "SELECT * FROM ({}\n) AS lh_plan_query LIMIT 0",
            sql.trim().trim_end_matches(';')
        );
        let held = _permit.clone();
        let task = blocking(move || {
            let _held = held;
            let _pins = pins;
            session.ensure_views(&setup)?;
            let mut stmt = session.conn.prepare(&text).map_err(sql_error)?;
            let schema = stmt.stream_arrow([]).map_err(sql_error)?.get_schema();
            Ok(schema
                .fields()
                .iter()
                .map(|f| (f.name().clone(), f.data_type().to_string()))
                .collect())
        });
        interruptible(handle, timeout, task, || {
            format!(
                "planning a model's query ran past the query timeout of {} ms",
                timeout.as_millis()
            )
        })
        .await
    }

    /// Runs `sql` on the commit `at` resolves to (lh's own queries: a caller's go
    /// through [`query_for`](Self::query_for)).
    pub async fn run<E: lh_catalog::ToRefExpr + ?Sized>(
        &self,
        sql: &str,
        at: &E,
        timeout: Option<Duration>,
        max_rows: Option<u64>,
    ) -> Result<QueryOutput> {
        let at = at.to_ref_expr()?;
        let ask = Ask {
            timeout,
            max_rows,
            ..Ask::default()
        };
        self.run_as(sql, &at, &ask).await
    }

    /// A caller's query: `sql` on `at` (a ref expression), as `identity` may read it.
    /// It needs read on the ref; it reads the very commit history's limits were found
    /// for (the ref may move meanwhile), sees only the tables it may read (any other is
    /// "not found"), and one who may not read everything runs in a catalog of its own
    /// with DuckDB's suggestions left out of errors. `ask` says the rest (its
    /// `readable`, `restricted` and `caller` are the identity's).
    pub async fn query_for(
        &self,
        identity: &Identity,
        sql: &str,
        at: &RefExpr,
        ask: Ask<'_>,
    ) -> Result<QueryOutput> {
        if sql.len() > MAX_SQL_BYTES {
            return Err(Error::new(
                Kind::TooLarge,
                Code::SqlTooLong,
                format!(
                    "the query's SQL is {:.1} MiB; at most 1 MiB is taken",
                    sql.len() as f64 / (1 << 20) as f64
                ),
            )
            .with_hint("keep long lists of values in a table (lh table import) and join to it"));
        }
        identity.require_ref(Action::Read, at, "querying it")?;
        let identity = crate::auth::history::scoped(&self.tables.catalog, identity, at).await?;
        let readable = |table: &str| identity.can_table(Action::Read, at, table);
        let ask = Ask {
            readable: &readable,
            restricted: !identity.access.covers(crate::auth::Role::Reader),
            caller: Some(&identity.user),
            ..ask
        };
        // The commit the history check found its limits for, not the ref again.
        self.run_as(sql, &identity.reads(at), &ask).await
    }

    /// [`run`](Self::run), as `ask` says: see [`Ask`].
    pub async fn run_as(&self, sql: &str, at: &RefExpr, ask: &Ask<'_>) -> Result<QueryOutput> {
        let out = self.run_checked(sql, at, ask).await;
        match out {
            Err(mut e) if ask.restricted => {
                if let Some(i) = e.message.find("Did you mean") {
                    e.message.truncate(i);
                    e.message = e.message.trim_end().to_string();
                }
                Err(e)
            }
            out => out,
        }
    }

    async fn run_checked(&self, sql: &str, at: &RefExpr, ask: &Ask<'_>) -> Result<QueryOutput> {
        let Ask {
            timeout,
            max_rows,
            readable,
            restricted,
            ipc,
            caller,
            progress,
        } = *ask;
        let timeout = timeout.map_or(self.limits.timeout, |t| t.min(self.limits.timeout));
        let _permit = Arc::new(match caller {
            Some(c) => self.slot_for(c).await?,
            None => Slot {
                _share: None,
                _slot: self.slot().await?,
            },
        });
        let resolved = self.tables.catalog.resolve(at).await?;
        let analysis = self.analyze(sql).await?;
        // The table each name of the statement names (a bare one: in lh's `main`).
        let mut named = BTreeMap::new();
        for parts in &analysis.tables {
            let (schema, table) = match parts.as_slice() {
                [bare] if !analysis.ctes.iter().any(|c| c.eq_ignore_ascii_case(bare)) => {
                    ("main", bare)
                }
                [schema, table] => (schema.as_str(), table),
                _ => continue,
            };
            let name = self
                .named(&resolved.commit, schema, table, readable)
                .await?;
            named.insert(parts.clone(), name);
        }
        // The tables whose filters leave files out, and the files the views read.
        let mut pruned = BTreeMap::new();
        let mut files_read = 0u64;
        for parts in &analysis.tables {
            let (2, Some(name)) = (parts.len(), named.get(parts)) else {
                continue;
            };
            if !readable(name) {
                continue;
            }
            let Some(t) = self.tables.load(&resolved.commit, name).await? else {
                continue;
            };
            let live = self.tables.live_files(&t).await?;
            let bound = analysis
                .filters
                .get(parts)
                .map(|f| prune::bind(&t, f))
                .unwrap_or_default();
            let kept = live
                .data
                .iter()
                .filter(|f| prune::may_match(&t, &bound, f))
                .count();
            files_read += kept as u64;
            if kept < live.data.len() {
                pruned.insert(parts.clone(), bound);
            }
        }
        // A caller who may not read everything gets a catalog of its own, holding only the
        // views of the tables this statement names (and may read): the commit's shared
        // one holds other callers' views, which DuckDB also binds from names that do not
        // say them (a bare name falls back to its default schema, lh's `main`). So does a
        // statement whose filters leave files out: its views are its own.
        // So does one that reads a table whose view name the commit's catalog holds
        // for another (`"FIN".t` beside `fin.t`: see `CommitCatalog::holds_other`).
        let shared = self.commit_catalog(&resolved.commit.id)?;
        let collides = named.values().any(|name| {
            lh_catalog::names::to_sql(name)
                .is_some_and(|(s, t)| shared.holds_other(&view_name(&[s, t]), name))
        });
        let catalog = if restricted || !pruned.is_empty() || collides {
            Arc::new(CommitCatalog::attach(&self.database)?)
        } else {
            shared
        };

        let database = self.database.clone();
        let in_catalog = catalog.clone();
        let session = blocking(move || Session::in_commit(&database, in_catalog)).await?;
        let refs = analysis.tables;

        let missing = |name: &str| {
            Error::not_found(
                Code::TableNotFound,
                format!("table '{name}' not found at '{at}'"),
            )
            .with_remedy(lh_api::remedy::Remedy::ListTables {
                at: Some(at.to_string()),
            })
        };
        // Before any view is made or reused (a commit's views are shared by queries).
        // A bare name that is no CTE resolves in the default schema: lh's `main`
        // namespace.
        for name in named.values() {
            if !readable(name) {
                return Err(missing(name));
            }
        }
        // On S3 making the views may fetch data files: that counts towards the timeout.
        let (views, _pins) = tokio::time::timeout(
            timeout,
            self.views(
                &resolved.commit,
                Some(&catalog),
                &refs,
                &named,
                &missing,
                &pruned,
            ),
        )
        .await
        .map_err(|_| fetch_timeout(timeout))??;

        let handle = session.watch.clone();
        // Named while DuckDB runs it (the entry goes when `execute` returns; the
        // session closes the watch before its connection).
        let tracked = match (caller, progress) {
            (Some(c), Some(id)) => {
                let key = (c.to_string(), id.to_string());
                let watch = session.watch.clone();
                self.running
                    .lock()
                    .map_err(|_| Error::internal("the running queries are poisoned"))?
                    .insert(key.clone(), watch.clone());
                Some(Tracked {
                    running: self.running.clone(),
                    key,
                    watch,
                })
            }
            _ => None,
        };
        let max_bytes = self.limits.max_result_bytes;
        let text = sql.to_string();
        // A large Arrow answer that no `max_rows` can cut is sent as it is produced.
        let (started_tx, mut started_rx) = tokio::sync::oneshot::channel();
        let early = (ipc && max_rows.is_none()).then_some(started_tx);
        let deadline = std::time::Instant::now() + timeout;
        // The slot is held until DuckDB returns, not only until the caller stops
        // waiting: a statement DuckDB cannot interrupt at once (its optimizer) keeps
        // its slot while it runs.
        let held = _permit.clone();
        let charge = self.memory.charge_for(caller);
        let task = blocking(move || {
            let _held = held;
            let _tracked = tracked;
            let bounds = Bounds {
                max_bytes,
                max_rows,
                ipc,
                deadline,
            };
            execute(session, &views, &text, bounds, early, charge)
        });
        let mut run = Box::pin(interruptible(handle, timeout, task, move || {
            format!(
                "the query ran past its timeout of {} ms and was stopped",
                timeout.as_millis()
            )
        }));
        // The start first: a streamed answer's query may end before it is looked at.
        let finished = tokio::select! {
            biased;
            started = &mut started_rx => match started {
                Ok(s) => {
                    let Started { schema, first, rest, errors, done } = s;
                    // The query goes on under its slot and its timeout; its error, if
                    // any, ends the stream. A client that goes away stops it (dropping
                    // `run` interrupts DuckDB).
                    tokio::spawn(async move {
                        let _permit = _permit;
                        let _pins = _pins;
                        tokio::select! {
                            // Waiting for room (a slow reader), not dropped: else
                            // the stream ends as "stopped part-way".
                            out = &mut run => if let Err(e) = out {
                                let _ = tokio::time::timeout(
                                    Duration::from_secs(30),
                                    errors.send(Err(e)),
                                )
                                .await;
                            },
                            _ = errors.closed() => {}
                        }
                    });
                    return Ok(QueryOutput {
                        commit: resolved.commit.id,
                        schema,
                        batches: Vec::new(),
                        charge: None,
                        _slot: None,
                        ipc: None,
                        streaming: Some(Streaming { first, rest, done }),
                        truncated: false,
                        files_read,
                    });
                }
                // Not streamed: the answer comes whole.
                Err(_) => None,
            },
            out = &mut run => Some(out),
        };
        let (schema, rows, truncated) = match finished {
            Some(out) => out,
            None => run.await,
        }
        .map_err(|e| execute::unknown_table(e, &at.to_string()))?;
        let (batches, charge, ipc) = match rows {
            Rows::Batches(b, c) => (b, Some(c), None),
            Rows::Ipc(s) => (Vec::new(), None, Some(s)),
            Rows::Streamed => {
                return Err(Error::internal("a streamed answer ended without its start"));
            }
        };
        Ok(QueryOutput {
            commit: resolved.commit.id,
            schema,
            batches,
            charge,
            _slot: Some(_permit),
            ipc,
            streaming: None,
            truncated,
            files_read,
        })
    }

    /// One of the engine's query slots (queries and pipeline inputs alike), waited for.
    async fn slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        self.permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| shutting_down())
    }

    /// A query slot for `caller`, who holds at most all but one of them (all of them
    /// with a single slot): its own queries queue for its share first, so one caller's
    /// many slow queries leave a slot to everyone else, whose queries do not wait
    /// behind its queue. Once (the third review): one reader's 12 slow queries made
    /// another's 1-row query wait 8 s.
    pub(crate) async fn slot_for(&self, caller: &str) -> Result<Slot> {
        let share_size = self.limits.max_concurrent.saturating_sub(1).max(1);
        let share = {
            let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
            // Shares nobody holds or waits for go (the map's own reference only).
            shares.retain(|_, s| Arc::strong_count(s) > 1);
            shares
                .entry(caller.to_string())
                .or_insert_with(|| {
                    Arc::new(Share {
                        slots: Arc::new(Semaphore::new(share_size)),
                        waiting: Default::default(),
                    })
                })
                .clone()
        };
        let permit = {
            let _waiting = share.wait()?;
            share
                .slots
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| shutting_down())?
        };
        Ok(Slot {
            _share: Some((share, permit)),
            _slot: self.slot().await?,
        })
    }

    /// The catalog of `commit`'s views, attached on first use.
    fn commit_catalog(&self, commit: &CommitId) -> Result<Arc<CommitCatalog>> {
        self.commits.get_or_insert_with(commit, || {
            CommitCatalog::attach(&self.database).map(Arc::new)
        })
    }

    /// Every view of the tables `names` in `commit` (see [`QueryEngine::views`]), for a
    /// pipeline's inputs in a database of their own.
    pub async fn views_of(
        &self,
        commit: &Commit,
        names: &[TableRef],
        named: &BTreeMap<TableRef, String>,
        missing: &(dyn Fn(&str) -> Error + Sync),
        pruned: &BTreeMap<TableRef, Vec<prune::Bound>>,
    ) -> Result<(Vec<View>, Pins)> {
        self.views(commit, None, names, named, missing, pruned)
            .await
    }

    /// The table a statement's `schema.table` names at `commit`, the first of these the
    /// caller may read and the commit has: folded to lowercase where that makes a part
    /// plain, as SQL folds unquoted names (`RAW.Orders` is `raw.orders`); as written
    /// (`"my-db"."Sales 2026"`); a dotted schema as one level (`"new.db".t`). Else the
    /// folded name. Only readable tables are looked for, so the answer tells nothing of
    /// others.
    async fn named(
        &self,
        commit: &Commit,
        schema: &str,
        table: &str,
        readable: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<String> {
        let exact = lh_catalog::names::from_sql(schema, table);
        let folded = lh_catalog::names::from_sql_folded(schema, table);
        // `"new.db".t` is the table t of nested namespace new.db, or else of the one
        // namespace `new.db`.
        let one_level = lh_catalog::names::join_levels(&[schema, table]);
        // The folded name first, as SQL reads an unquoted one: `RAW.ORDERS` is
        // raw.orders even when someone made `"RAW"."ORDERS"` (the fortieth review).
        for name in [&folded, &exact, &one_level] {
            if readable(name)
                && lh_catalog::names::validate_table_name(name).is_ok()
                && self.tables.load(commit, name).await?.is_some()
            {
                return Ok(name.clone());
            }
        }
        Ok(folded)
    }

    /// The views of the tables `names` in `commit`: for queries, a function's inputs and
    /// SQL models alike, the one way a table becomes a DuckDB view.
    ///
    /// Names are as DuckDB's parser gives them (`["namespace", "table"]`; a nested
    /// namespace is written quoted: `"a.b".t` is the table `a.b.t`). A one-part name (a
    /// CTE, or a table without a namespace) and one that is no table name are left to
    /// DuckDB, which says if it is unknown; a three-part name is an error; a table the
    /// commit lacks is `missing(name)`. The result holds the views that `catalog` does not
    /// have yet (every view, without a catalog), for a session to make in
    /// the commit's catalog, or for a SQL model's write to make in its own database.
    pub(crate) async fn views(
        &self,
        commit: &Commit,
        catalog: Option<&CommitCatalog>,
        names: &[TableRef],
        named: &BTreeMap<TableRef, String>,
        missing: &(dyn Fn(&str) -> Error + Sync),
        pruned: &BTreeMap<TableRef, Vec<prune::Bound>>,
    ) -> Result<(Vec<View>, Pins)> {
        let mut views = Vec::new();
        let mut pins = Pins::none();
        for parts in names {
            if parts.len() < 2 {
                continue;
            }
            if parts.len() > 2 {
                let dotted = parts.join(".");
                let (ns, table) = dotted.rsplit_once('.').unwrap_or(("", ""));
                return Err(Error::bad_request(
                    Code::SqlError,
                    format!("'{dotted}' names a catalog; lh tables are namespace.table"),
                )
                .with_hint(format!(
                    "for a nested namespace, quote it: \"{ns}\".{table}"
                )));
            }
            let name = match named.get(parts) {
                Some(n) => n.clone(),
                None => lh_catalog::names::from_sql(&parts[0], &parts[1]),
            };
            if lh_catalog::names::validate_table_name(&name).is_err() {
                continue;
            }
            let Some(table) = self.tables.load(commit, &name).await? else {
                return Err(missing(&name));
            };
            // Named as the table is, however the statement spelled it (DuckDB binds
            // names in any case): `NS."T"` and `ns."T"` read one view.
            let Some((schema, bare)) = lh_catalog::names::to_sql(&name) else {
                continue;
            };
            let spelled = vec![schema, bare];
            let view = view_name(&spelled);
            if !catalog.is_some_and(|c| c.has_view(&view, &name)) {
                let files = match pruned.get(parts) {
                    Some(bound) => {
                        let files = self
                            .tables
                            .file_groups_where(&table, &mut pins, |f| {
                                prune::may_match(&table, bound, f)
                            })
                            .await?;
                        tracing::debug!(
                            table = %name,
                            files = files.groups.iter().map(|g| g.1.len()).sum::<usize>(),
                            "pruned by the query's filters"
                        );
                        files
                    }
                    None => self.tables.file_groups(&table, &mut pins).await?,
                };
                views.push(View {
                    sql: view_sql(&spelled, &table, &files),
                    name: view,
                    of: name.clone(),
                });
            } else {
                // The view reads local paths: on S3, the read cache keeps them while
                // the statement runs (fetching any evicted since).
                self.tables.pin_files(&table, &mut pins).await?;
            }
        }
        Ok((views, pins))
    }
}

/// A query slot, and the share of its caller it came through.
pub(crate) struct Slot {
    _share: Option<(Arc<Share>, tokio::sync::OwnedSemaphorePermit)>,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

/// How many of one caller's queries may wait for a slot at once; one more is refused
/// (503, `queries_queued`). A waiting query holds its SQL (up to [`MAX_SQL_BYTES`]): the
/// thirty-fourth review's slow queries held the request-body budget as long as they
/// ran, and with bodies charged only while they are read, this bounds what one caller's
/// queue may hold instead.
pub const MAX_WAITING_PER_CALLER: usize = 64;

/// The longest SQL text a caller's query may have (as BigQuery's and Snowflake's
/// 1 MB): larger lists of values belong in a table.
pub const MAX_SQL_BYTES: usize = 1 << 20;

/// One caller's share of the query slots, and how many of its queries wait for one.
pub(crate) struct Share {
    slots: Arc<Semaphore>,
    waiting: std::sync::atomic::AtomicUsize,
}

impl Share {
    /// Counts a query in the caller's queue while the guard lives, or refuses it when
    /// the queue is full.
    fn wait(&self) -> Result<impl Drop + '_> {
        use std::sync::atomic::Ordering::SeqCst;
        struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, SeqCst);
            }
        }
        if self.waiting.fetch_add(1, SeqCst) >= MAX_WAITING_PER_CALLER {
            self.waiting.fetch_sub(1, SeqCst);
            return Err(Error::new(
                Kind::Unavailable,
                Code::QueriesQueued,
                format!("{MAX_WAITING_PER_CALLER} of your queries already wait for a query slot"),
            )
            .with_hint("send it again once some of them are answered"));
        }
        Ok(Waiting(&self.waiting))
    }
}

fn shutting_down() -> Error {
    Error::new(
        Kind::Unavailable,
        Code::ShuttingDown,
        "the server is shutting down",
    )
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("query task failed: {e}")))?
}
