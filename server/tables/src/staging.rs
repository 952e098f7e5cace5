//! Uploads waiting for their import (or for their run, a project's archive). They are
//! written to the warehouse's own files (`warehouse/own.rs`: in a local warehouse's
//! folder, or copied to the bucket), so that the request that uses an upload may reach
//! any server sharing the warehouse, not only the one that took the upload.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Code, Error, Result};
use crate::warehouse::Warehouse;

#[derive(Debug, Clone)]
pub struct Staging {
    /// Where this server writes uploads (and reads those fetched from the bucket).
    pub dir: PathBuf,
}

/// Whether `id` can be an upload's id (what the server hands out: hex digits).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_hexdigit())
}

impl Staging {
    /// Uploads in the warehouse's own folder when it is local, else in `local` (and the
    /// bucket).
    pub fn new(warehouse: &Warehouse, local: &Path) -> Result<Staging> {
        let dir = warehouse.own_dir("uploads", local);
        std::fs::create_dir_all(&dir)?;
        Ok(Staging { dir })
    }

    /// The folder of upload `id` on this server.
    pub fn dir_of(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Makes the upload written at `path` (in `dir_of(id)`) visible to every server.
    pub async fn share(&self, warehouse: &Warehouse, id: &str, path: &Path) -> Result<()> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::internal("an upload without a file name"))?;
        warehouse
            .share_own(&format!("uploads/{id}/{name}"), path)
            .await
    }

    /// The file of upload `id`: on this server's disk, or fetched from the warehouse (an
    /// upload another server took). `None` when there is no such upload.
    pub async fn file(&self, warehouse: &Warehouse, id: &str) -> Result<Option<PathBuf>> {
        if !valid_id(id) {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!("bad upload id '{id}'"),
            ));
        }
        let dir = self.dir_of(id);
        // The warehouse's copy decides: an upload another server imported (and so
        // removed) is gone here too, even if this server still holds a copy.
        let Some((key, _)) = warehouse
            .list_own(&format!("uploads/{id}/"))
            .await?
            .into_iter()
            .next()
        else {
            let _ = tokio::fs::remove_dir_all(&dir).await;
            return Ok(None);
        };
        if let Some(f) = std::fs::read_dir(&dir)
            .ok()
            .and_then(|mut rd| rd.next())
            .and_then(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| !p.to_string_lossy().contains(".part-"))
        {
            return Ok(Some(f));
        }
        let Some(name) = key.rsplit('/').next().filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        let dest = dir.join(name);
        if warehouse.fetch_own(&key, &dest).await? {
            Ok(Some(dest))
        } else {
            Ok(None)
        }
    }

    /// Removes upload `id`, here and in the warehouse.
    pub async fn remove(&self, warehouse: &Warehouse, id: &str) {
        if !valid_id(id) {
            return;
        }
        let _ = tokio::fs::remove_dir_all(self.dir_of(id)).await;
        if let Ok(keys) = warehouse.list_own(&format!("uploads/{id}/")).await {
            let keys: Vec<String> = keys.into_iter().map(|(k, _)| k).collect();
            if let Err(e) = warehouse.remove_own(&keys).await {
                tracing::warn!(upload = id, "cannot remove the upload: {e}");
            }
        }
    }

    /// Removes uploads never used, older than `age`, here and in the warehouse.
    pub async fn sweep(&self, warehouse: &Warehouse, age: Duration) {
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|d| d > age);
                if old {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        match warehouse.list_own("uploads/").await {
            Ok(all) => {
                let old: Vec<String> = all
                    .into_iter()
                    .filter(|(_, t)| t.elapsed().is_ok_and(|d| d > age))
                    .map(|(k, _)| k)
                    .collect();
                if !old.is_empty()
                    && let Err(e) = warehouse.remove_own(&old).await
                {
                    tracing::warn!("cannot remove old uploads: {e}");
                }
            }
            Err(e) => tracing::warn!("cannot list old uploads: {e}"),
        }
    }
}
