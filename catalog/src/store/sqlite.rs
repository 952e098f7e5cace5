//! The embedded default: the catalog in one SQLite file, in WAL mode. Writers of one
//! process queue on a mutex and take the write lock up front (`BEGIN IMMEDIATE`), so
//! they never fail on a lock upgrade; another process is waited for by SQLite's busy
//! timeout.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};
use tokio::sync::Mutex;

use super::{
    INSERT_CHUNK, RefRow, Store, WriteBatch, WriteError, hash_from_bytes, parse_kind, storage_err,
};
use crate::error::{Error, ErrorKind, Result};
use crate::model::{Hash, RefKind};

/// How hard SQLite works to keep a commit on power loss. `Full` (the default) syncs
/// the log on every commit; `Normal` survives a crash of the process but may lose the
/// last commits on power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteSync {
    Full,
    Normal,
}

pub struct SqliteStore {
    pool: SqlitePool,
    write_lock: Mutex<()>,
    path: String,
}

impl SqliteStore {
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
        // The server keeps its own tables (runs) in the same database, with their own
        // migrations: each migrator ignores the other's.
        let mut migrator = sqlx::migrate!("./migrations/sqlite");
        migrator.set_ignore_missing(true);
        migrator.run(&pool).await.map_err(|e| {
            Error::new(
                ErrorKind::Storage,
                format!("cannot migrate the catalog '{path}': {e}"),
            )
            .with_source(e)
        })?;
        Ok(SqliteStore {
            pool,
            write_lock: Mutex::new(()),
            path: path.to_string(),
        })
    }

    async fn objects(&self, table: &str, ids: &[Hash]) -> Result<Vec<(Hash, Vec<u8>)>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(INSERT_CHUNK) {
            let mut qb: QueryBuilder<Sqlite> =
                QueryBuilder::new(format!("SELECT id, data FROM {table} WHERE id IN ("));
            let mut sep = qb.separated(", ");
            for id in chunk {
                sep.push_bind(id.0.to_vec());
            }
            qb.push(")");
            let rows = qb
                .build()
                .fetch_all(&self.pool)
                .await
                .map_err(storage_err)?;
            for row in rows {
                let id: Vec<u8> = row.get(0);
                out.push((hash_from_bytes(&id)?, row.get(1)));
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn nodes(&self, ids: &[Hash]) -> Result<Vec<(Hash, Vec<u8>)>> {
        self.objects("nodes", ids).await
    }

    async fn commits(&self, ids: &[Hash]) -> Result<Vec<(Hash, Vec<u8>)>> {
        self.objects("commits", ids).await
    }

    async fn nodes_after(&self, after: Option<Hash>, limit: usize) -> Result<Vec<(Hash, Vec<u8>)>> {
        let after = after.map(|h| h.0.to_vec()).unwrap_or_default();
        let rows = sqlx::query("SELECT id, data FROM nodes WHERE id > ?1 ORDER BY id LIMIT ?2")
            .bind(after)
            .bind(limit as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(storage_err)?;
        rows.iter()
            .map(|row| Ok((hash_from_bytes(&row.get::<Vec<u8>, _>(0))?, row.get(1))))
            .collect()
    }

    async fn commits_in_range(&self, lo: Hash, hi: Hash, limit: usize) -> Result<Vec<Hash>> {
        let rows =
            sqlx::query("SELECT id FROM commits WHERE id >= ?1 AND id <= ?2 ORDER BY id LIMIT ?3")
                .bind(lo.0.to_vec())
                .bind(hi.0.to_vec())
                .bind(limit as i64)
                .fetch_all(&self.pool)
                .await
                .map_err(storage_err)?;
        rows.iter()
            .map(|r| hash_from_bytes(&r.get::<Vec<u8>, _>(0)))
            .collect()
    }

    async fn reference(&self, name: &str) -> Result<Option<RefRow>> {
        let row = sqlx::query("SELECT name, kind, head FROM refs WHERE name = ?1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(storage_err)?;
        row.map(|r| ref_row(&r)).transpose()
    }

    async fn references(&self) -> Result<Vec<RefRow>> {
        let rows = sqlx::query("SELECT name, kind, head FROM refs ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(storage_err)?;
        rows.iter().map(ref_row).collect()
    }

    async fn reference_at(
        &self,
        name: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<(RefKind, Option<Hash>)>> {
        let row = sqlx::query(
            "SELECT kind, head FROM ref_log WHERE name = ?1 AND at <= ?2 ORDER BY at DESC, seq DESC LIMIT 1",
        )
        .bind(name)
        .bind(at.timestamp_micros())
        .fetch_optional(&self.pool)
        .await
        .map_err(storage_err)?;
        let Some(row) = row else { return Ok(None) };
        let kind = parse_kind(row.get::<&str, _>(0))?;
        let head: Option<Vec<u8>> = row.get(1);
        Ok(Some((kind, head.map(|h| hash_from_bytes(&h)).transpose()?)))
    }

    async fn write(&self, batch: WriteBatch) -> Result<(), WriteError> {
        let _writer = self.write_lock.lock().await;
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(storage_err)?;
        let at = batch.at.timestamp_micros();
        for u in &batch.refs {
            let result = match (u.expected, u.new) {
                (None, Some(new)) => sqlx::query(
                    "INSERT INTO refs (name, kind, head, updated_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (name) DO NOTHING",
                )
                .bind(&u.name)
                .bind(u.kind.as_str())
                .bind(new.0.to_vec())
                .bind(at)
                .execute(&mut *tx)
                .await,
                (Some(old), Some(new)) => sqlx::query(
                    "UPDATE refs SET head = ?1, updated_at = ?2 WHERE name = ?3 AND kind = ?4 AND head = ?5",
                )
                .bind(new.0.to_vec())
                .bind(at)
                .bind(&u.name)
                .bind(u.kind.as_str())
                .bind(old.0.to_vec())
                .execute(&mut *tx)
                .await,
                (Some(old), None) => {
                    sqlx::query("DELETE FROM refs WHERE name = ?1 AND kind = ?2 AND head = ?3")
                        .bind(&u.name)
                        .bind(u.kind.as_str())
                        .bind(old.0.to_vec())
                        .execute(&mut *tx)
                        .await
                }
                (None, None) => continue,
            };
            if result.map_err(storage_err)?.rows_affected() != 1 {
                return Err(WriteError::RefMoved {
                    name: u.name.clone(),
                });
            }
            sqlx::query("INSERT INTO ref_log (name, kind, head, at) VALUES (?1, ?2, ?3, ?4)")
                .bind(&u.name)
                .bind(u.kind.as_str())
                .bind(u.new.map(|h| h.0.to_vec()))
                .bind(at)
                .execute(&mut *tx)
                .await
                .map_err(storage_err)?;
        }
        for (table, objects) in [("nodes", &batch.nodes), ("commits", &batch.commits)] {
            for chunk in objects.chunks(INSERT_CHUNK) {
                let mut qb: QueryBuilder<Sqlite> =
                    QueryBuilder::new(format!("INSERT INTO {table} (id, data) "));
                qb.push_values(chunk, |mut b, (id, data)| {
                    b.push_bind(id.0.to_vec()).push_bind(data.as_slice());
                });
                qb.push(" ON CONFLICT (id) DO NOTHING");
                qb.build().execute(&mut *tx).await.map_err(storage_err)?;
            }
        }
        tx.commit().await.map_err(storage_err)?;
        Ok(())
    }

    fn describe(&self) -> String {
        format!("sqlite:{}", self.path)
    }
}

fn ref_row(r: &sqlx::sqlite::SqliteRow) -> Result<RefRow> {
    Ok(RefRow {
        name: r.get(0),
        kind: parse_kind(r.get::<&str, _>(1))?,
        head: hash_from_bytes(&r.get::<Vec<u8>, _>(2))?,
    })
}
