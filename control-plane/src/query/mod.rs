//! SQL queries on any ref, in embedded DuckDB.
//!
//! Each query gets a fresh sandboxed in-memory database. DuckDB's parser says whether
//! the query is one read-only statement and which tables it names; each such table is
//! resolved at the query's commit to its snapshot's data files and exposed as a view
//! over `read_parquet`, reading columns by Iceberg field id (so renamed and added
//! columns read right). Then the configuration is locked and the query runs, bounded
//! in time and in result size, and interrupted when its caller goes away.

mod sql;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use duckdb::Connection;
use lh_catalog::CommitId;
use tokio::sync::Semaphore;

use crate::duck::{self, DuckLimits};
use crate::error::{Error, Kind, Result};
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
    spill: PathBuf,
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
    pub fn new(tables: Arc<Tables>, limits: QueryLimits, spill: PathBuf) -> QueryEngine {
        QueryEngine {
            tables,
            permits: Semaphore::new(limits.max_concurrent.max(1)),
            limits,
            spill,
        }
    }

    pub fn limits(&self) -> &QueryLimits {
        &self.limits
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

        let warehouse = self.tables.warehouse.root().to_path_buf();
        let spill = self.spill.clone();
        let limits = self.limits.duck.clone();
        let text = sql.to_string();
        let (conn, refs) = blocking(move || {
            let conn = duck::sandboxed(&[warehouse.as_path()], &spill, &limits)?;
            let serialized: String = conn
                .prepare("SELECT json_serialize_sql(?::VARCHAR)")?
                .query_row([&text], |r| r.get(0))?;
            let refs = sql::analyze(&serialized)?;
            Ok((conn, refs))
        })
        .await?;

        let mut views = Vec::new();
        for parts in refs {
            if parts.len() < 2 {
                // A CTE, or a table without a namespace: DuckDB will say if it is unknown.
                continue;
            }
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
            if parts.len() > 3 {
                return Err(Error::bad_request(
                    "sql_error",
                    format!("table '{name}': SQL reaches namespaces at most two levels deep"),
                ));
            }
            let files = self.tables.live_files(&table).await?;
            let paths = files
                .iter()
                .map(|f| self.tables.warehouse.local_path(&f.url))
                .collect::<Result<Vec<_>>>()?;
            views.push(view_sql(&parts, &table, &paths));
        }

        let handle = conn.interrupt_handle();
        let mut guard = InterruptOnDrop(Some(handle.clone()));
        let max_bytes = self.limits.max_result_bytes;
        let text = sql.to_string();
        let task = blocking(move || execute(conn, &views, &text, max_bytes, max_rows));
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

/// The statements that expose a table as a view at its snapshot.
fn view_sql(parts: &[String], table: &LoadedTable, files: &[PathBuf]) -> String {
    let schema = table.metadata.current_schema();
    let mut sql = String::new();
    let (catalog, ns, name) = match parts {
        [ns, name] => (None, ns, name),
        [cat, ns, name] => (Some(cat), ns, name),
        _ => unreachable!("checked by the caller"),
    };
    let qualified = match catalog {
        Some(cat) => {
            sql.push_str(&format!(
                "ATTACH IF NOT EXISTS ':memory:' AS {};\n",
                quote_ident(cat)
            ));
            sql.push_str(&format!(
                "CREATE SCHEMA IF NOT EXISTS {}.{};\n",
                quote_ident(cat),
                quote_ident(ns)
            ));
            format!(
                "{}.{}.{}",
                quote_ident(cat),
                quote_ident(ns),
                quote_ident(name)
            )
        }
        None => {
            sql.push_str(&format!(
                "CREATE SCHEMA IF NOT EXISTS {};\n",
                quote_ident(ns)
            ));
            format!("{}.{}", quote_ident(ns), quote_ident(name))
        }
    };
    let fields = schema.as_struct().fields();
    let body = if files.is_empty() {
        let cols: Vec<String> = fields
            .iter()
            .map(|f| {
                format!(
                    "CAST(NULL AS {}) AS {}",
                    duckdb_type(&f.field_type),
                    quote_ident(&f.name)
                )
            })
            .collect();
        format!("SELECT {} WHERE false", cols.join(", "))
    } else {
        let list: Vec<String> = files
            .iter()
            .map(|p| quote_literal(&p.display().to_string()))
            .collect();
        let map: Vec<String> = fields
            .iter()
            .map(|f| {
                format!(
                    "{}: {{name: {}, type: {}, default_value: NULL}}",
                    f.id,
                    quote_literal(&f.name),
                    quote_literal(&duckdb_type(&f.field_type))
                )
            })
            .collect();
        format!(
            "SELECT * FROM read_parquet([{}], schema = map {{{}}})",
            list.join(", "),
            map.join(", ")
        )
    };
    sql.push_str(&format!("CREATE VIEW {qualified} AS {body};\n"));
    sql
}

/// Creates the views, locks the sandbox, runs the query and collects its result.
fn execute(
    conn: Connection,
    views: &[String],
    sql: &str,
    max_bytes: u64,
    max_rows: Option<u64>,
) -> Result<(SchemaRef, Vec<RecordBatch>, bool)> {
    for v in views {
        conn.execute_batch(v)
            .map_err(|e| Error::internal(format!("cannot expose a table to DuckDB: {e}")))?;
    }
    duck::lock(&conn)?;
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

fn sql_error(e: duckdb::Error) -> Error {
    let text = e.to_string();
    if text.contains("INTERRUPT") || text.contains("Interrupted") {
        return Error::new(Kind::Timeout, "interrupted", "the query was interrupted");
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
