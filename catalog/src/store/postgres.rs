//! The catalog in PostgreSQL, which several lh servers can share. What this file holds
//! is only what PostgreSQL does differently from SQLite ([`Dialect`]); the store itself,
//! compare-and-swap included, is [`SqlStore`]. Writes run under READ COMMITTED (the
//! default): a concurrent mover of a ref blocks on its row and then finds the head
//! changed.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgQueryResult};
use sqlx::{Pool, Postgres};

use super::sql::{Dialect, SqlStore, object_row, storage_err};
use crate::error::{Error, ErrorKind, Result};
use crate::model::Hash;

/// PostgreSQL's side of the [`Dialect`].
pub struct PostgresDialect;

/// The catalog in a PostgreSQL database.
pub type PostgresStore = SqlStore<PostgresDialect>;

impl SqlStore<PostgresDialect> {
    /// Connects to `url` (`postgres://user:password@host:port/db`) and brings the schema
    /// up to date (migrations are serialised across servers by an advisory lock).
    pub async fn open(url: &str) -> Result<Self> {
        let opts: PgConnectOptions = url.parse().map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("bad PostgreSQL URL: {e}"),
            )
        })?;
        let described = format!(
            "postgres://{}:{}/{}",
            opts.get_host(),
            opts.get_port(),
            opts.get_database().unwrap_or("")
        );
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(opts)
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Storage,
                    format!("cannot connect to the catalog database {described}: {e}"),
                )
                .with_source(e)
            })?;
        SqlStore::migrated(pool, described).await
    }
}

#[async_trait]
impl Dialect for PostgresDialect {
    type Db = Postgres;

    fn migrator() -> Migrator {
        sqlx::migrate!("./migrations/postgres")
    }

    const BEGIN: Option<&'static str> = None;

    // Writers of one process need not queue: PostgreSQL locks rows, not the database.
    const QUEUE_WRITERS: bool = false;

    // Byte order whatever the database's default collation.
    const NAME_ORDER: &'static str = "name COLLATE \"C\"";

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    /// All the ids as one array parameter: one statement, prepared once, whatever the
    /// number of ids.
    async fn objects(
        pool: &Pool<Postgres>,
        table: &str,
        ids: &[Hash],
    ) -> Result<Vec<(Hash, Vec<u8>)>> {
        let keys: Vec<Vec<u8>> = ids.iter().map(|h| h.0.to_vec()).collect();
        let rows = sqlx::query(&format!("SELECT id, data FROM {table} WHERE id = ANY($1)"))
            .bind(keys)
            .fetch_all(pool)
            .await
            .map_err(storage_err)?;
        rows.iter().map(object_row).collect()
    }
}
