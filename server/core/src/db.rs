//! The server's own tables (runs, their nodes, the memo table, namespaces) live in the
//! catalog's database (the same SQLite file or PostgreSQL database), through sqlx's
//! `Any` driver in SQL both backends accept. This opens the pool and brings the tables
//! up to date with `server/core/migrations/`, which the run store and the namespace
//! store share (one migration history, so existing databases keep working).

use sqlx::AnyPool;

use crate::error::{Code, Error, Kind, Result};

/// Connects to the catalog's database URL (`sqlite:PATH` or `postgres://...`) and runs
/// the migrations.
pub async fn open(url: &str) -> Result<AnyPool> {
    sqlx::any::install_default_drivers();
    let url = if url.starts_with("sqlite:") && !url.starts_with("sqlite://") {
        format!("sqlite://{}", url.trim_start_matches("sqlite:"))
    } else {
        url.to_string()
    };
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .map_err(|e| Error::internal(format!("cannot open the run store: {e}")))?;
    let mut migrator = sqlx::migrate!("./migrations");
    // The catalog's own migrations share the history table.
    migrator.set_ignore_missing(true);
    migrator
        .run(&pool)
        .await
        .map_err(|e| Error::internal(format!("cannot migrate the run store: {e}")))?;
    Ok(pool)
}

/// Deletes the row named `name` of `table` (one of the server's own, keyed by `name`);
/// `missing()` when there was none.
pub async fn delete_named(
    pool: &AnyPool,
    table: &'static str,
    name: &str,
    missing: impl FnOnce() -> Error,
) -> Result<()> {
    let r = sqlx::query(&format!("DELETE FROM {table} WHERE name = $1"))
        .bind(name)
        .execute(pool)
        .await
        .map_err(|e| failed(table, e))?;
    if r.rows_affected() == 0 {
        return Err(missing());
    }
    Ok(())
}

/// The first column, text, of the rows `sql` selects with its one parameter `arg`.
pub async fn texts(pool: &AnyPool, sql: &'static str, arg: &str) -> Result<Vec<String>> {
    use sqlx::Row;
    let rows = sqlx::query(sql)
        .bind(arg)
        .fetch_all(pool)
        .await
        .map_err(|e| failed("a read of the server's tables", e))?;
    rows.iter()
        .map(|r| {
            r.try_get::<String, _>(0)
                .map_err(|e| failed("a read of the server's tables", e))
        })
        .collect()
}

/// A stored time (Unix ms) as RFC 3339, as the API shows it.
pub fn time(ms: i64) -> String {
    use chrono::TimeZone;
    chrono::Utc
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.to_rfc3339())
        .unwrap_or_default()
}

/// A failed query of the server's tables.
pub fn failed(what: &str, e: sqlx::Error) -> Error {
    let lost = matches!(
        e,
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
    );
    let err = Error::new(
        Kind::Unavailable,
        Code::Storage,
        format!("{what} failed: {e}"),
    );
    if lost {
        // The pool connects again on the next request: a restart of the database
        // costs the requests it cut, not the server.
        return err.with_hint(
            "the server lost its connection to the database (restarted or unreachable); try again once it answers",
        );
    }
    err
}
