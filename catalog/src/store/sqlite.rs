//! The embedded default: the catalog in one SQLite file, in WAL mode. What this file
//! holds is only what SQLite does differently from PostgreSQL ([`Dialect`]); the store
//! itself is [`SqlStore`]. Writers of one process queue on a mutex and take the write
//! lock up front (`BEGIN IMMEDIATE`), so they never fail on a lock upgrade; another
//! process is waited for by SQLite's busy timeout.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult,
    SqliteSynchronous,
};
use sqlx::{Pool, QueryBuilder, Sqlite};

use super::sql::{Dialect, INSERT_CHUNK, SqlStore, object_row, storage_err};
use crate::error::{Error, ErrorKind, Result};
use crate::model::Hash;

/// How hard SQLite works to keep a commit on power loss. `Full` (the default) syncs
/// the log on every commit; `Normal` survives a crash of the process but may lose the
/// last commits on power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteSync {
    Full,
    Normal,
}

/// SQLite's side of the [`Dialect`].
pub struct SqliteDialect;

/// The catalog in a SQLite file.
pub type SqliteStore = SqlStore<SqliteDialect>;

impl SqlStore<SqliteDialect> {
    /// Opens (creating if needed) the catalog file at `path` and brings its schema up to date.
    pub async fn open(path: &str, sync: SqliteSync) -> Result<Self> {
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
            .map_err(|e| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("bad SQLite path '{path}': {e}"),
                )
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match sync {
                SqliteSync::Full => SqliteSynchronous::Full,
                SqliteSync::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(false);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(opts)
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Storage,
                    format!("cannot open the catalog database '{path}': {e}"),
                )
                .with_source(e)
            })?;
        SqlStore::migrated(pool, format!("sqlite:{path}")).await
    }
}

#[async_trait]
impl Dialect for SqliteDialect {
    type Db = Sqlite;

    fn migrator() -> Migrator {
        sqlx::migrate!("./migrations/sqlite")
    }

    // The write lock from the first statement: no deadlock on a lock upgrade.
    const BEGIN: Option<&'static str> = Some("BEGIN IMMEDIATE");

    // Only one writer at a time holds SQLite's lock; the others of this process wait
    // here, in order, rather than in the busy handler's sleeps.
    const QUEUE_WRITERS: bool = true;

    // SQLite's default collation (BINARY) compares bytes.
    const NAME_ORDER: &'static str = "name";

    fn rows_affected(result: &SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    /// SQLite has no arrays: the ids go as bound values of an `IN` list, in chunks.
    async fn objects(
        pool: &Pool<Sqlite>,
        table: &str,
        ids: &[Hash],
    ) -> Result<Vec<(Hash, Vec<u8>)>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(INSERT_CHUNK) {
            let mut qb: QueryBuilder<Sqlite> =
                QueryBuilder::new(format!("SELECT id, data FROM {table} WHERE id IN ("));
            let mut sep = qb.separated(", ");
            for id in chunk {
                sep.push_bind(id.0.to_vec());
            }
            qb.push(")");
            let rows = qb.build().fetch_all(pool).await.map_err(storage_err)?;
            for row in &rows {
                out.push(object_row(row)?);
            }
        }
        Ok(out)
    }
}
