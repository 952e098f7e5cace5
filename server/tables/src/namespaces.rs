//! Namespaces of the Iceberg REST catalog. They hold no data, so they are not versioned:
//! the ones clients create, with their properties, are rows of the `lh_namespaces`
//! table next to the catalog (see `db.rs`), shared by every ref; and at any ref, every
//! namespace a table's name has exists too (`shop` and `shop.eu` for `shop.eu.orders`).

use std::collections::BTreeMap;

use chrono::Utc;
use lh_catalog::{Catalog, Commit};
use sqlx::{AnyPool, Row};

use crate::error::{Code, Error, Kind, Result};

/// A namespace's properties.
pub type Properties = BTreeMap<String, String>;

pub struct Namespaces {
    pool: AnyPool,
    catalog: Catalog,
}

fn db(e: sqlx::Error) -> Error {
    crate::db::failed("namespace storage", e)
}

/// The error for a namespace that is not there.
pub fn not_found(name: &str) -> Error {
    Error::not_found(
        Code::NamespaceNotFound,
        format!("namespace '{name}' does not exist"),
    )
}

impl Namespaces {
    pub fn new(pool: AnyPool, catalog: Catalog) -> Namespaces {
        Namespaces { pool, catalog }
    }

    /// Every namespace at a commit, by dotted name: the created ones, and every prefix
    /// of a table's namespace.
    pub async fn at(&self, commit: &Commit) -> Result<BTreeMap<String, Properties>> {
        let mut out = self.created().await?;
        for t in self.catalog.tables_in(commit, None).await? {
            let levels = lh_catalog::names::levels(&t.name)?;
            for i in 1..levels.len() {
                out.entry(lh_catalog::names::join_levels(&levels[..i]))
                    .or_default();
            }
        }
        Ok(out)
    }

    /// The properties of the namespace `name` at `commit`, or the not-found error.
    pub async fn get(&self, commit: &Commit, name: &str) -> Result<Properties> {
        self.at(commit)
            .await?
            .remove(name)
            .ok_or_else(|| not_found(name))
    }

    /// Creates a namespace, unless it exists at `commit` (or was created meanwhile).
    pub async fn create(&self, commit: &Commit, name: &str, properties: &Properties) -> Result<()> {
        bounded(name, properties)?;
        if self.at(commit).await?.contains_key(name) || !self.insert(name, properties).await? {
            return Err(Error::new(
                Kind::Conflict,
                Code::AlreadyExists,
                format!("namespace '{name}' already exists"),
            ));
        }
        Ok(())
    }

    /// Drops an empty namespace (no namespace and no table in it at `commit`, which
    /// `at` names in messages).
    pub async fn remove(&self, commit: &Commit, at: &str, name: &str) -> Result<()> {
        let all = self.at(commit).await?;
        if !all.contains_key(name) {
            return Err(not_found(name));
        }
        let inside = all.keys().any(|k| k.starts_with(&format!("{name}.")))
            || !self.catalog.tables_in(commit, Some(name)).await?.is_empty();
        if inside {
            return Err(Error::new(
                Kind::Conflict,
                Code::NamespaceNotEmpty,
                format!("namespace '{name}' is not empty at '{at}'"),
            ));
        }
        sqlx::query("DELETE FROM lh_namespaces WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }

    /// Replaces a namespace's properties (recording it if it only existed by its tables).
    pub async fn set_properties(&self, name: &str, properties: &Properties) -> Result<()> {
        bounded(name, properties)?;
        let r = sqlx::query("UPDATE lh_namespaces SET properties = $1 WHERE name = $2")
            .bind(serde_json::to_string(properties).unwrap_or_default())
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        if r.rows_affected() == 0 {
            self.insert(name, properties).await?;
        }
        Ok(())
    }

    /// The namespaces clients created, with their properties.
    async fn created(&self) -> Result<BTreeMap<String, Properties>> {
        let rows = sqlx::query("SELECT name, properties FROM lh_namespaces ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<String, _>(0),
                    serde_json::from_str(&r.get::<String, _>(1)).unwrap_or_default(),
                )
            })
            .collect())
    }

    /// Records a namespace (`Ok(true)`), or finds it recorded already (`Ok(false)`).
    async fn insert(&self, name: &str, properties: &Properties) -> Result<bool> {
        let r = sqlx::query("INSERT INTO lh_namespaces (name, properties, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(serde_json::to_string(properties).unwrap_or_default())
            .bind(Utc::now().timestamp_micros())
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(r.rows_affected() == 1)
    }
}

/// A namespace's properties hold at most 1 MiB, keys and values together, as a table's
/// do (`commit::MAX_PROPERTIES_BYTES`): every listing reads them.
fn bounded(name: &str, properties: &Properties) -> Result<()> {
    let size = crate::commit::properties_bytes(properties);
    if size > crate::commit::MAX_PROPERTIES_BYTES {
        return Err(crate::error::Error::bad_request(
            crate::error::Code::InvalidArgument,
            format!(
                "namespace '{name}': its properties would hold {size} bytes; at most {} (1 MiB) are kept",
                crate::commit::MAX_PROPERTIES_BYTES
            ),
        ));
    }
    Ok(())
}
