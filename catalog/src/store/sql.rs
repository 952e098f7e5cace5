//! The one SQL implementation of [`Store`], over sqlx, for every backend. The SQL is
//! written once (`$n` placeholders, which SQLite accepts as well as PostgreSQL); what
//! truly differs between backends is named by the [`Dialect`] trait and nowhere else:
//! how a connection pool is opened (SQLite's WAL and busy timeout), the migrations
//! folder, how many ids one lookup reads, how a write transaction begins and whether
//! writers of one process queue for it, and the collation that orders ref names by
//! their bytes. `sqlite.rs` and `postgres.rs` implement it.
//!
//! The drivers are used directly rather than through sqlx's `Any` driver, so that each
//! backend keeps its native statements (PostgreSQL reads a batch of ids as one array
//! parameter) and rows are not converted on the way.

use std::borrow::Cow;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::migrate::{Migrate, Migrator};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};
use tokio::sync::Mutex;

use super::interface::{RefRow, Store, WriteBatch, WriteError};
use crate::error::{Error, ErrorKind, Result};
use crate::model::{Hash, RefKind};

/// What differs between the SQL backends; everything else is [`SqlStore`]'s.
#[async_trait]
pub trait Dialect: Send + Sync + 'static {
    /// The sqlx driver.
    type Db: Database;

    /// The catalog's migrations (each backend has its own folder).
    fn migrator() -> Migrator;

    /// The statement that starts a write transaction (`None`: the driver's `BEGIN`).
    const BEGIN: Option<&'static str>;

    /// Whether the writers of one process queue on a mutex before they begin, so that
    /// they wait in order instead of on the database's lock.
    const QUEUE_WRITERS: bool;

    /// The `ORDER BY` expression that sorts ref names by their bytes.
    const NAME_ORDER: &'static str;

    /// How many rows a statement changed (the drivers share no trait for it).
    fn rows_affected(result: &<Self::Db as Database>::QueryResult) -> u64;

    /// The stored `(id, data)` of these ids from `table` (`nodes` or `commits`); unknown
    /// ids are left out.
    async fn objects(
        pool: &Pool<Self::Db>,
        table: &str,
        ids: &[Hash],
    ) -> Result<Vec<(Hash, Vec<u8>)>>;
}

/// A catalog store in the SQL database of dialect `D`.
pub struct SqlStore<D: Dialect> {
    pool: Pool<D::Db>,
    /// Taken for the whole of a write when `D::QUEUE_WRITERS`.
    write_lock: Mutex<()>,
    described: String,
}

impl<D: Dialect> SqlStore<D>
where
    <D::Db as Database>::Connection: Migrate,
{
    /// Brings the schema of an opened pool up to date; `described` names the database
    /// in messages and logs (never with a password).
    pub(super) async fn migrated(pool: Pool<D::Db>, described: String) -> Result<Self> {
        // The server keeps its own tables (runs) in the same database, with their own
        // migrations: each migrator ignores the other's.
        let mut migrator = D::migrator();
        migrator.set_ignore_missing(true);
        migrator.run(&pool).await.map_err(|e| {
            Error::new(
                ErrorKind::Storage,
                format!("cannot migrate the catalog {described}: {e}"),
            )
            .with_source(e)
        })?;
        Ok(SqlStore {
            pool,
            write_lock: Mutex::new(()),
            described,
        })
    }
}

#[async_trait]
impl<D: Dialect> Store for SqlStore<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'q> <D::Db as Database>::Arguments<'q>: IntoArguments<'q, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
    for<'q> Vec<u8>: Encode<'q, D::Db> + Decode<'q, D::Db> + Type<D::Db>,
    for<'q> Option<Vec<u8>>: Encode<'q, D::Db>,
    for<'q> &'q [u8]: Encode<'q, D::Db> + Type<D::Db>,
    for<'q> &'q str: Encode<'q, D::Db> + Decode<'q, D::Db> + Type<D::Db>,
    for<'q> String: Decode<'q, D::Db> + Type<D::Db>,
    for<'q> i64: Encode<'q, D::Db> + Type<D::Db>,
{
    async fn nodes(&self, ids: &[Hash]) -> Result<Vec<(Hash, Vec<u8>)>> {
        D::objects(&self.pool, "nodes", ids).await
    }

    async fn commits(&self, ids: &[Hash]) -> Result<Vec<(Hash, Vec<u8>)>> {
        D::objects(&self.pool, "commits", ids).await
    }

    async fn nodes_after(&self, after: Option<Hash>, limit: usize) -> Result<Vec<(Hash, Vec<u8>)>> {
        let after = after.map(|h| h.0.to_vec()).unwrap_or_default();
        let rows = sqlx::query("SELECT id, data FROM nodes WHERE id > $1 ORDER BY id LIMIT $2")
            .bind(after)
            .bind(limit as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(storage_err)?;
        rows.iter().map(object_row).collect()
    }

    async fn commits_in_range(&self, lo: Hash, hi: Hash, limit: usize) -> Result<Vec<Hash>> {
        let rows =
            sqlx::query("SELECT id FROM commits WHERE id >= $1 AND id <= $2 ORDER BY id LIMIT $3")
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
        let row = sqlx::query("SELECT name, kind, head FROM refs WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(storage_err)?;
        row.map(|r| ref_row(r.get(0), r.get(1), r.get(2)))
            .transpose()
    }

    async fn references(&self) -> Result<Vec<RefRow>> {
        let sql = format!(
            "SELECT name, kind, head FROM refs ORDER BY {}",
            D::NAME_ORDER
        );
        let rows = sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(storage_err)?;
        rows.iter()
            .map(|r| ref_row(r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    async fn reference_at(
        &self,
        name: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<(RefKind, Option<Hash>)>> {
        let row = sqlx::query(
            "SELECT kind, head FROM ref_log WHERE name = $1 AND at <= $2 ORDER BY at DESC, seq DESC LIMIT 1",
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

    async fn deleted_since(&self, name: &str, at: DateTime<Utc>) -> Result<bool> {
        let row = sqlx::query(
            "SELECT 1 FROM ref_log WHERE name = $1 AND at > $2 AND head IS NULL LIMIT 1",
        )
        .bind(name)
        .bind(at.timestamp_micros())
        .fetch_optional(&self.pool)
        .await
        .map_err(storage_err)?;
        Ok(row.is_some())
    }

    async fn left_heads(&self, name: &str, limit: usize) -> Result<Vec<Hash>> {
        let rows = sqlx::query(
            "SELECT left_head FROM ref_log WHERE name = $1 AND left_head IS NOT NULL ORDER BY seq DESC LIMIT $2",
        )
        .bind(name)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(storage_err)?;
        rows.iter()
            .map(|r| hash_from_bytes(&r.get::<Vec<u8>, _>(0)))
            .collect()
    }

    async fn deleted_names(&self, like: &str, limit: usize) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT DISTINCT l.name FROM ref_log l WHERE l.left_head IS NOT NULL \
               AND l.name LIKE $1 ESCAPE '\\' \
               AND NOT EXISTS (SELECT 1 FROM refs r WHERE r.name = l.name) \
             ORDER BY l.name LIMIT $2",
        )
        .bind(like)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(storage_err)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Moves each ref by a conditional statement (compare-and-swap: a ref that is not
    /// where the update expects it matches no row) in the transaction that stores the
    /// objects. On SQLite the transaction holds the write lock from its first statement;
    /// on PostgreSQL, under READ COMMITTED, a concurrent mover blocks on the ref's row
    /// and then finds the head changed. Either way compare-and-swap holds across
    /// processes and servers.
    async fn write(&self, batch: WriteBatch) -> Result<(), WriteError> {
        let _writer = if D::QUEUE_WRITERS {
            Some(self.write_lock.lock().await)
        } else {
            None
        };
        let mut tx = match D::BEGIN {
            Some(begin) => self.pool.begin_with(Cow::Borrowed(begin)).await,
            None => self.pool.begin().await,
        }
        .map_err(storage_err)?;
        let at = batch.at.timestamp_micros();
        for u in &batch.refs {
            let result = match (u.expected, u.new) {
                (None, Some(new)) => sqlx::query(
                    "INSERT INTO refs (name, kind, head, updated_at) VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING",
                )
                .bind(u.name.as_str())
                .bind(u.kind.as_str())
                .bind(new.0.to_vec())
                .bind(at)
                .execute(&mut *tx)
                .await,
                (Some(old), Some(new)) => sqlx::query(
                    "UPDATE refs SET head = $1, updated_at = $2 WHERE name = $3 AND kind = $4 AND head = $5",
                )
                .bind(new.0.to_vec())
                .bind(at)
                .bind(u.name.as_str())
                .bind(u.kind.as_str())
                .bind(old.0.to_vec())
                .execute(&mut *tx)
                .await,
                (Some(old), None) => {
                    sqlx::query("DELETE FROM refs WHERE name = $1 AND kind = $2 AND head = $3")
                        .bind(u.name.as_str())
                        .bind(u.kind.as_str())
                        .bind(old.0.to_vec())
                        .execute(&mut *tx)
                        .await
                }
                (None, None) => continue,
            };
            if D::rows_affected(&result.map_err(storage_err)?) != 1 {
                return Err(WriteError::RefMoved {
                    name: u.name.clone(),
                });
            }
            // The head a ref leaves out of its history: a deletion's, a rewind's.
            let left = match (u.expected, u.new) {
                (Some(old), None) => Some(old),
                (Some(old), Some(_)) if u.rewinds => Some(old),
                _ => None,
            };
            sqlx::query(
                "INSERT INTO ref_log (name, kind, head, at, left_head) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(u.name.as_str())
            .bind(u.kind.as_str())
            .bind(u.new.map(|h| h.0.to_vec()))
            .bind(at)
            .bind(left.map(|h| h.0.to_vec()))
            .execute(&mut *tx)
            .await
            .map_err(storage_err)?;
        }
        for (table, objects) in [("nodes", &batch.nodes), ("commits", &batch.commits)] {
            for chunk in objects.chunks(INSERT_CHUNK) {
                let sql = insert_objects_sql(table, chunk.len());
                let mut insert = sqlx::query(&sql);
                for (id, data) in chunk {
                    insert = insert.bind(id.0.to_vec()).bind(data.as_slice());
                }
                insert.execute(&mut *tx).await.map_err(storage_err)?;
            }
        }
        tx.commit().await.map_err(storage_err)?;
        Ok(())
    }

    fn describe(&self) -> String {
        self.described.clone()
    }
}

/// `INSERT INTO {table} (id, data) VALUES ($1, $2), ... ON CONFLICT (id) DO NOTHING`
/// for `rows` rows: one statement text per chunk size, so prepared statements are reused.
fn insert_objects_sql(table: &str, rows: usize) -> String {
    let mut sql = format!("INSERT INTO {table} (id, data) VALUES ");
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("(${}, ${})", 2 * i + 1, 2 * i + 2));
    }
    sql.push_str(" ON CONFLICT (id) DO NOTHING");
    sql
}

/// A row `(id, data)` of `nodes` or `commits`, on any backend.
pub(super) fn object_row<R: Row>(row: &R) -> Result<(Hash, Vec<u8>)>
where
    usize: ColumnIndex<R>,
    for<'r> Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok((hash_from_bytes(&row.get::<Vec<u8>, _>(0))?, row.get(1)))
}

fn ref_row(name: String, kind: &str, head: Vec<u8>) -> Result<RefRow> {
    Ok(RefRow {
        name,
        kind: parse_kind(kind)?,
        head: hash_from_bytes(&head)?,
    })
}

pub(super) fn parse_kind(s: &str) -> Result<RefKind> {
    match s {
        "branch" => Ok(RefKind::Branch),
        "tag" => Ok(RefKind::Tag),
        other => Err(Error::corrupt(format!(
            "unknown ref kind '{other}' in storage"
        ))),
    }
}

pub(super) fn hash_from_bytes(bytes: &[u8]) -> Result<Hash> {
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| Error::corrupt(format!("stored id has {} bytes, not 32", bytes.len())))?;
    Ok(Hash(arr))
}

pub(super) fn storage_err(e: sqlx::Error) -> Error {
    match e {
        sqlx::Error::PoolTimedOut => Error::new(
            ErrorKind::Storage,
            "timed out waiting for a catalog database connection",
        )
        .with_source(e),
        e => Error::storage(e),
    }
}

/// How many rows one multi-row INSERT carries, and how many ids one SQLite lookup binds
/// (below SQLite's variable limit).
pub(super) const INSERT_CHUNK: usize = 400;
