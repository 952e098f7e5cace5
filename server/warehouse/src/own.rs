//! lh's own files in the warehouse, below `.lh/` (which no table folder can be: a
//! namespace never starts with a dot, and garbage collection looks only inside table
//! folders): uploads waiting for their import (`.lh/uploads/<id>/<name>`) and code
//! snapshots (`.lh/code/<hash>.tar`). Every server sharing the warehouse reads them, so
//! a request may follow another on any server: an import on one server of a file
//! uploaded to another, a run taken over by a server that never saw its code.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{Backend, Warehouse};
use crate::error::{Error, Result};

/// The folder of lh's own files, below the warehouse root.
pub const OWN: &str = ".lh";

impl Warehouse {
    /// The local folder where lh's own files of `kind` (`uploads`, `code`) are written
    /// first: inside a local warehouse (so every server sharing the folder sees them),
    /// else `fallback` on the server's disk, from which they are copied to the bucket.
    pub fn own_dir(&self, kind: &str, fallback: &Path) -> PathBuf {
        match &self.backend {
            Backend::Local { root } => root.join(OWN).join(kind),
            Backend::S3 { .. } => fallback.to_path_buf(),
        }
    }

    /// Shares the local file `path` as `.lh/<key>` (in a local warehouse, a copy into
    /// place, unless `own_dir` put it there already).
    pub async fn share_own(&self, key: &str, path: &Path) -> Result<()> {
        match &self.backend {
            Backend::Local { root } => {
                let dest = root.join(OWN).join(key);
                if dest == path {
                    return Ok(());
                }
                if let Some(d) = dest.parent() {
                    tokio::fs::create_dir_all(d).await?;
                }
                let tmp = dest.with_extension(format!("part-{}", uuid::Uuid::new_v4().simple()));
                tokio::fs::copy(path, &tmp).await?;
                tokio::fs::rename(&tmp, &dest).await.map_err(|e| {
                    let _ = std::fs::remove_file(&tmp);
                    Error::from(e)
                })?;
                Ok(())
            }
            Backend::S3 { bucket, .. } => {
                bucket.upload(&format!("{OWN}/{key}"), path).await?;
                Ok(())
            }
        }
    }

    /// Copies `.lh/<key>` into the local file `dest` (from the bucket through the read
    /// cache's parallel fetch); `false` when there is no such file.
    pub async fn fetch_own(&self, key: &str, dest: &Path) -> Result<bool> {
        let (bucket, cache) = match &self.backend {
            Backend::Local { root } => {
                let src = root.join(OWN).join(key);
                if !src.is_file() {
                    return Ok(false);
                }
                if src != dest {
                    if let Some(d) = dest.parent() {
                        tokio::fs::create_dir_all(d).await?;
                    }
                    tokio::fs::copy(&src, dest).await?;
                }
                return Ok(true);
            }
            Backend::S3 { bucket, cache, .. } => (bucket, cache),
        };
        let full = format!("{OWN}/{key}");
        if !bucket.exists(&full).await? {
            return Ok(false);
        }
        let size = bucket.head(&full).await?.size;
        let mut pins = super::cache::Pins::none();
        let cached = cache.local(&full, size, &mut pins).await?;
        if let Some(d) = dest.parent() {
            tokio::fs::create_dir_all(d).await?;
        }
        let tmp = dest.with_extension(format!("part-{}", uuid::Uuid::new_v4().simple()));
        // A link when the cache is on the same disk, else a copy.
        if std::fs::hard_link(&cached, &tmp).is_err() {
            tokio::fs::copy(&cached, &tmp).await?;
        }
        drop(pins);
        tokio::fs::rename(&tmp, dest).await.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::from(e)
        })?;
        Ok(true)
    }

    /// The own files below `.lh/<prefix>`: their keys below `.lh/`, and when each was
    /// last changed.
    pub async fn list_own(&self, prefix: &str) -> Result<Vec<(String, SystemTime)>> {
        match &self.backend {
            Backend::Local { root } => {
                let base = root.join(OWN);
                let mut out = Vec::new();
                let mut stack = vec![base.join(prefix)];
                while let Some(dir) = stack.pop() {
                    let Ok(rd) = std::fs::read_dir(&dir) else {
                        continue;
                    };
                    for e in rd.flatten() {
                        let Ok(m) = e.metadata() else { continue };
                        if m.is_dir() {
                            stack.push(e.path());
                        } else if let (Ok(rel), Ok(t)) =
                            (e.path().strip_prefix(&base), m.modified())
                        {
                            out.push((rel.display().to_string(), t));
                        }
                    }
                }
                Ok(out)
            }
            Backend::S3 { bucket, .. } => Ok(bucket
                .list(&format!("{OWN}/{prefix}"))
                .await?
                .into_iter()
                .filter_map(|o| {
                    let rel = o.key.strip_prefix(&format!("{OWN}/"))?.to_string();
                    Some((rel, o.modified))
                })
                .collect()),
        }
    }

    /// Removes own files by their keys below `.lh/` (missing ones are no error).
    pub async fn remove_own(&self, keys: &[String]) -> Result<()> {
        match &self.backend {
            Backend::Local { root } => {
                for k in keys {
                    let p = root.join(OWN).join(k);
                    match std::fs::remove_file(&p) {
                        Ok(()) => {
                            // An emptied folder goes too (an upload's).
                            if let Some(d) = p.parent() {
                                let _ = std::fs::remove_dir(d);
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok(())
            }
            Backend::S3 { bucket, .. } => {
                bucket
                    .delete_many(keys.iter().map(|k| format!("{OWN}/{k}")).collect())
                    .await
            }
        }
    }
}
