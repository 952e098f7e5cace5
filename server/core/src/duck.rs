//! Embedded DuckDB, sandboxed. The query engine's one shared database and each write's
//! own are in-memory databases that can touch only the folders they are given: external
//! access is off (no other files, no network, no extension installs), and the query
//! database's configuration is locked at start-up, so that user SQL cannot `SET` its way
//! out. (Measured with DuckDB 1.5.6: COPY TO and ATTACH still work inside the allowed
//! folders, which is why the query engine also accepts only read-only statements.)
//!
//! Quoting lives here too: every name and string lh puts into DuckDB SQL goes through
//! [`quote_ident`] or [`quote_literal`].

use std::path::Path;

use duckdb::{Config, Connection};

use crate::error::{Error, Result};

/// Resources of one DuckDB database.
#[derive(Debug, Clone)]
pub struct DuckLimits {
    pub threads: usize,
    /// DuckDB's `memory_limit`, e.g. `4GB`.
    pub memory_limit: String,
}

/// A fresh in-memory database that can read and write only inside `allowed`, with
/// `spill` as its folder for temporary files (itself allowed). The configuration is
/// not yet locked: see [`lock`].
pub fn sandboxed(allowed: &[&Path], spill: &Path, limits: &DuckLimits) -> Result<Connection> {
    let config = Config::default()
        .enable_autoload_extension(false)?
        .threads(limits.threads.max(1) as i64)?
        .max_memory(&limits.memory_limit)?;
    let conn = Connection::open_in_memory_with_flags(config)?;
    std::fs::create_dir_all(spill)?;
    // TIMESTAMPTZ arithmetic (ICU) in UTC, whatever the server machine's zone, so that a
    // query's answer does not depend on where it ran. A DuckDB built without ICU (the
    // `bundled-duckdb` feature) has no such setting and computes in UTC anyway.
    // GLOBAL, since ICU's setting is per session by default and queries run on clones.
    let _ = conn.execute_batch("SET GLOBAL TimeZone = 'UTC'");
    let mut dirs: Vec<String> = allowed
        .iter()
        .chain(std::iter::once(&spill))
        .map(|p| {
            quote_literal(&format!(
                "{}/",
                p.display().to_string().trim_end_matches('/')
            ))
        })
        .collect();
    dirs.sort();
    dirs.dedup();
    conn.execute_batch(&format!(
        "SET autoinstall_known_extensions = false;
         SET autoload_known_extensions = false;
         SET temp_directory = {};
         SET allowed_directories = [{}];
         SET enable_external_access = false;",
        quote_literal(&spill.display().to_string()),
        dirs.join(", ")
    ))
    .map_err(|e| Error::internal(format!("cannot set up the DuckDB sandbox: {e}")))?;
    Ok(conn)
}

/// Locks the configuration: from here on no `SET`/`RESET` can change the sandbox.
pub fn lock(conn: &Connection) -> Result<()> {
    conn.execute_batch("SET lock_configuration = true;")
        .map_err(|e| Error::internal(format!("cannot lock the DuckDB configuration: {e}")))
}

/// A DuckDB identifier, always quoted.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A DuckDB string literal.
pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Turns on DuckDB's tracking of a running query's progress on one connection (a
/// session's own setting, which `PRAGMA` may still set once the configuration is
/// locked), never printed: [`progress`] reads it.
pub fn track_progress(conn: &Connection) -> Result<()> {
    conn.execute_batch("PRAGMA enable_progress_bar; PRAGMA disable_print_progress_bar;")
        .map_err(|e| Error::internal(format!("cannot track DuckDB's progress: {e}")))
}

/// A connection's running statement, as another thread reaches it: its progress
/// (DuckDB's progress bar, in percent) and its interrupt.
///
/// duckdb-rs (pinned at ~1.10506.1) keeps the raw connection only in its interrupt
/// handle, a struct of one field, the mutex holding it, and exposes no progress: the
/// handle is read as that mutex. Closing a connection there frees it before emptying
/// the handle, so the handle alone cannot say whether the connection still lives (its
/// own `interrupt` included): the watch is closed ([`Watch::close`]) by the
/// connection's owner before the connection is (the query engine's session does so as
/// it is dropped, a write before its database), and every read and interrupt holds the
/// watch's lock, so that none meets a closed connection. Once (the thirty-third and
/// thirty-fourth reviews), progress reads racing the end of short queries returned
/// words of freed memory (heap addresses) as percentages, and a timeout firing as a
/// query ended interrupted its freed connection.
pub struct Watch(std::sync::Mutex<Option<std::sync::Arc<duckdb::InterruptHandle>>>);

impl Watch {
    /// A watch of the connection of `handle`, open until [`close`](Self::close).
    pub fn new(handle: std::sync::Arc<duckdb::InterruptHandle>) -> Watch {
        Watch(std::sync::Mutex::new(Some(handle)))
    }

    /// Ends the watch: no read reaches the connection from here on (a read in progress
    /// is waited for). To be called before the connection is closed.
    pub fn close(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Interrupts the connection's running statement, unless the watch is closed.
    pub fn interrupt(&self) {
        let open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(handle) = open.as_ref() {
            handle.interrupt();
        }
    }

    /// Whether the watch was closed (its connection may be gone).
    pub fn is_closed(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }

    /// How far the connection's running query is, in percent; `None` when the watch is
    /// closed, no query runs there, or DuckDB cannot tell (a connection without
    /// [`track_progress`], an operator that reports none).
    #[allow(unsafe_code)]
    pub fn read(&self) -> Option<f64> {
        type Raw = std::sync::Mutex<duckdb::ffi::duckdb_connection>;
        const _: () = assert!(
            std::mem::size_of::<duckdb::InterruptHandle>() == std::mem::size_of::<Raw>()
                && std::mem::align_of::<duckdb::InterruptHandle>() == std::mem::align_of::<Raw>()
        );
        let open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let handle = open.as_ref()?;
        // SAFETY: `InterruptHandle` is `{ conn: Mutex<duckdb_connection> }` in the pinned
        // duckdb-rs, of the same size and alignment (checked above), so its one field is
        // at offset 0.
        let raw = unsafe { &*(std::sync::Arc::as_ptr(handle) as *const Raw) };
        let conn = raw.lock().ok()?;
        if conn.is_null() {
            return None;
        }
        // SAFETY: the connection is open: its owner closes this watch (whose lock is
        // held) before closing it.
        let p = unsafe { duckdb::ffi::duckdb_query_progress(*conn) };
        let p = p.percentage;
        (p.is_finite() && (0.0..=100.0).contains(&p)).then_some(p)
    }
}
