//! One statement on a DuckDB connection: its views made, its rows collected within the
//! query's bounds (answer size, rows, time), as batches or an Arrow IPC stream, a large
//! answer streamed to the client while DuckDB still produces it; and DuckDB's errors
//! worded for lh's users.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;

use crate::commits::{Session, View};
use crate::error::{Code, Error, Kind, Result};
use crate::{ipc, memory};

/// What a query's rows were collected as.
pub(crate) enum Rows {
    Batches(Vec<RecordBatch>, memory::Charge),
    Ipc(ipc::IpcStream),
    /// Sent as they came (see [`Started`]).
    Streamed,
}

/// An Arrow answer larger than this, with no `max_rows`, is sent while DuckDB produces
/// it; a smaller one (and any error before this size) is answered whole.
pub(crate) const STREAM_AFTER: u64 = 16 << 20;

/// A streamed answer's start: what was encoded so far, the channel of the rest, and a
/// sender for the query's own error (a timeout).
pub(crate) struct Started {
    pub(crate) schema: SchemaRef,
    pub(crate) first: Vec<Bytes>,
    pub(crate) rest: tokio::sync::mpsc::Receiver<Result<Bytes>>,
    pub(crate) errors: tokio::sync::mpsc::Sender<Result<Bytes>>,
    /// Set once the whole stream, its end marker included, is in the channel: a
    /// channel closed before that is a broken answer, never a short one.
    pub(crate) done: Arc<std::sync::atomic::AtomicBool>,
}

/// Hands a piece to the sender of a streamed answer: waits while the client is slow,
/// but not past the query's deadline, and fails when the client is gone.
pub(crate) fn send_piece(
    tx: &tokio::sync::mpsc::Sender<Result<Bytes>>,
    mut piece: Result<Bytes>,
    deadline: std::time::Instant,
) -> Result<()> {
    loop {
        match tx.try_send(piece) {
            Ok(()) => return Ok(()),
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                return Err(Error::new(
                    Kind::Unavailable,
                    Code::Interrupted,
                    "the client went away",
                ));
            }
            Err(tokio::sync::mpsc::error::TrySendError::Full(p)) => {
                if std::time::Instant::now() > deadline {
                    return Err(Error::new(
                        Kind::Timeout,
                        Code::Timeout,
                        "the client read the answer too slowly: the query's timeout passed",
                    ));
                }
                piece = p;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// The bounds and the form of one statement's answer.
pub(crate) struct Bounds {
    pub(crate) max_bytes: u64,
    pub(crate) max_rows: Option<u64>,
    /// Arrow IPC (else batches, for JSON).
    pub(crate) ipc: bool,
    pub(crate) deadline: std::time::Instant,
}

/// Makes the views the commit's catalog lacks, runs the query and collects its result
/// (`ipc`: encoded as an Arrow IPC stream batch by batch, while DuckDB's threads go on
/// scanning; a large answer with no `max_rows` is sent through `early` as it comes,
/// waiting on a slow client no later than `deadline`).
pub(crate) fn execute(
    session: Session,
    views: &[View],
    sql: &str,
    bounds: Bounds,
    mut early: Option<tokio::sync::oneshot::Sender<Started>>,
    mut charge: memory::Charge,
) -> Result<(SchemaRef, Rows, bool)> {
    let Bounds {
        max_bytes,
        max_rows,
        ipc,
        deadline,
    } = bounds;
    session.ensure_views(views)?;
    let conn = &session.conn;
    let mut stmt = conn.prepare(sql).map_err(sql_error)?;
    // Stream the result chunk by chunk, so that an oversized result stops early and
    // an error part-way (a failed cast, an interrupt) is an error, not a short result.
    let schema = stmt.stream_arrow([]).map_err(sql_error)?.get_schema();
    let mut batches = Vec::new();
    // Everything the answer holds is charged to the server's answer memory: the
    // stream's held bytes (its pieces take their part along when handed over), or the
    // batches.
    let mut stream = if ipc {
        Some(ipc::IpcStream::new(&schema, Some(charge.another()))?)
    } else {
        None
    };
    let mut bytes = 0u64;
    let mut rows = 0u64;
    let mut truncated = false;
    let mut sending: Option<(
        tokio::sync::mpsc::Sender<Result<Bytes>>,
        Arc<std::sync::atomic::AtomicBool>,
    )> = None;
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
            let too_large = || {
                Error::new(
                    Kind::TooLarge,
                    Code::ResultTooLarge,
                    format!("the result is larger than the limit of {max_bytes} bytes"),
                )
                .with_hint(
                    "add a LIMIT or aggregate, or write the result to a file with --out FILE.parquet",
                )
            };
            // The reason reaches the client even when the channel is full (a slow
            // reader): dropped, the stream would end as "stopped part-way".
            if let Some((tx, _)) = &sending {
                let _ = send_piece(tx, Err(too_large()), deadline);
            }
            return Err(too_large());
        }
        match &mut stream {
            Some(s) => s.push(&batch)?,
            None => {
                charge.grow(batch.get_array_memory_size() as u64)?;
                batches.push(batch);
            }
        }
        if let (Some(s), Some((tx, _))) = (&mut stream, &sending) {
            for piece in s.drain() {
                send_piece(tx, Ok(piece), deadline)?;
            }
        } else if let Some(s) = &mut stream
            && s.bytes_written() > STREAM_AFTER
            && let Some(start) = early.take()
        {
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let started = Started {
                schema: schema.clone(),
                first: s.drain(),
                rest: rx,
                errors: tx.clone(),
                done: done.clone(),
            };
            if start.send(started).is_err() {
                return Err(Error::internal("the query's caller went away"));
            }
            sending = Some((tx, done));
        }
        if truncated {
            break;
        }
    }
    let rows = match (stream, sending) {
        (Some(mut s), Some((tx, done))) => {
            s.end()?;
            for piece in s.drain() {
                send_piece(&tx, Ok(piece), deadline)?;
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            Rows::Streamed
        }
        (Some(s), None) => Rows::Ipc(s),
        (None, _) => Rows::Batches(batches, charge),
    };
    Ok((schema, rows, truncated))
}

pub(crate) fn fetch_timeout(timeout: Duration) -> Error {
    Error::new(
        Kind::Timeout,
        Code::Timeout,
        format!(
            "fetching the tables' data files from the warehouse took longer than the \
             timeout of {} ms",
            timeout.as_millis()
        ),
    )
    .with_hint("the next query finds what was fetched in the read cache")
}

pub(crate) fn input_error(table: &str, e: duckdb::Error) -> Error {
    Error::bad_request(Code::BadInput, format!("cannot read input '{table}': {e}"))
}

/// DuckDB's "Table with name X does not exist" as lh's own table-not-found at `at`: a
/// name lh's catalog would know (DuckDB's "did you mean" names its own system views, as
/// `pg_prepared_statements` for `orders`), for which a client suggests the nearest lh
/// table (`analytics.orders`). Other errors are left as they are.
pub(crate) fn unknown_table(e: Error, at: &str) -> Error {
    if e.code != Code::SqlError {
        return e;
    }
    let Some(name) = e
        .message
        .split("Table with name ")
        .nth(1)
        .and_then(|rest| rest.split_once(" does not exist"))
        .map(|(name, _)| name.to_string())
    else {
        return e;
    };
    Error::not_found(
        Code::TableNotFound,
        format!("table '{name}' not found at '{at}'"),
    )
    .with_hint("tables are named namespace.table")
    .with_remedy(lh_api::remedy::Remedy::ListTables {
        at: Some(at.to_string()),
    })
}

/// DuckDB ran out of the memory it may take: its own limit (`--duckdb-memory`), or the
/// server's C heap (`--native-memory`, `lh_core::heap`), which holds what the limit
/// does not cover (the values an expression makes).
fn out_of_memory(text: &str) -> Error {
    let held = match lh_core::heap::limit() {
        Some(limit) => format!(
            " (--native-memory: {:.2} GiB for DuckDB's work, every query and write \
             together)",
            limit as f64 / f64::from(1u32 << 30)
        ),
        None => String::new(),
    };
    Error::new(
        Kind::Unavailable,
        Code::OutOfMemory,
        format!("the query needs more memory than the server has for it{held}: {text}"),
    )
    .with_hint(
        "a list function applied per row or per element makes values DuckDB holds \
         whole: compute less per row, or ask again once the server's other queries are done",
    )
}

pub(crate) fn sql_error(e: duckdb::Error) -> Error {
    let text = e.to_string();
    if let Some(path) = text
        .split("No files found that match the pattern \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
    {
        return crate::error::collected(path);
    }
    if text.contains("INTERRUPT") || text.contains("Interrupted") {
        return Error::new(
            Kind::Timeout,
            Code::Interrupted,
            "the query was interrupted",
        );
    }
    if text.contains("Out of Memory Error") || text.contains("bad_alloc") {
        return out_of_memory(&text);
    }
    if text.contains("Loading external extensions is disabled") {
        return Error::bad_request(
            Code::UnsupportedFunction,
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
        return Error::bad_request(Code::Forbidden, format!("not allowed: {text}")).with_hint(
            "queries read lh tables only; files, extensions and settings are off limits",
        );
    }
    let err = Error::bad_request(Code::SqlError, format!("SQL error: {text}"));
    if text.contains("does not exist") {
        return err
            .with_hint("tables are named namespace.table")
            .with_remedy(lh_api::remedy::Remedy::ListTables { at: None });
    }
    err
}
