//! The warehouse: where table files live, a local folder (`file://`) or an
//! S3-compatible bucket (`s3://bucket/prefix`). Every table gets its own folder,
//! `<warehouse>/<namespace path>/<table>-<uuid>`, so that two branches creating a table
//! of the same name never share a file, and every write gets its own data folder.
//!
//! Every location the server accepts and stores is in one canonical form, the one its
//! FileIO reads: `file:///absolute/path` or `s3://bucket/key`. On S3, metadata goes
//! through the iceberg crate's FileIO over lh's client (`io.rs`), data files written by
//! DuckDB are staged on the server's disk and uploaded before the commit that names
//! them (`upload`), and a read-through cache on disk serves DuckDB the data files it
//! reads (`cache.rs`).

use lh_core::error;

pub mod cache;
pub mod io;
mod own;
pub mod s3;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use iceberg::io::FileIO;
use uuid::Uuid;

use crate::error::{Code, Error, Result};
use cache::{Pins, ReadCache};
use s3::{Bucket, S3Settings};

/// How to open a warehouse beyond its URL.
#[derive(Debug, Clone)]
pub struct WarehouseOptions {
    /// Path-style S3 addressing (`endpoint/bucket/key`), for stores that need it.
    pub s3_path_style: bool,
    /// Where an S3 warehouse's read cache and upload staging live.
    pub local_dir: PathBuf,
    /// The most the read cache keeps.
    pub cache_bytes: u64,
    /// The longest one S3 request may take.
    pub s3_timeout: std::time::Duration,
}

#[derive(Debug, Clone)]
enum Backend {
    Local {
        root: PathBuf,
    },
    S3 {
        bucket: Box<Bucket>,
        cache: Arc<ReadCache>,
        /// Data files written by DuckDB wait here until uploaded.
        staging: PathBuf,
        /// The FileIO's small files in memory.
        small: io::Remembered,
    },
}

#[derive(Debug, Clone)]
pub struct Warehouse {
    /// `file:///absolute/path` or `s3://bucket/prefix`, no trailing slash.
    url: String,
    backend: Backend,
    io: FileIO,
    /// The same, keeping nothing in memory: for reading the store as it is, through many
    /// files read once (garbage collection).
    io_direct: FileIO,
}

/// A file about to be uploaded: where it is staged and the location it gets.
#[derive(Debug, Clone)]
pub struct Staged {
    pub path: PathBuf,
    pub location: String,
}

impl Warehouse {
    /// A warehouse in a local folder, given as a path or a `file://` URL; created if missing.
    pub fn open(location: &str) -> Result<Warehouse> {
        let path = match location.strip_prefix("file://") {
            Some(p) => PathBuf::from(p),
            None if location.contains("://") => {
                return Err(Error::bad_request(
                    Code::UnsupportedWarehouse,
                    format!(
                        "unsupported warehouse '{location}': use a local folder (file:///path) \
                         or an S3 bucket (s3://bucket/prefix)"
                    ),
                ));
            }
            None => PathBuf::from(location),
        };
        std::fs::create_dir_all(&path).map_err(|e| {
            Error::internal(format!(
                "cannot create the warehouse folder {}: {e}",
                path.display()
            ))
        })?;
        let root = path.canonicalize()?;
        let url = format!("file://{}", root.display());
        Ok(Warehouse {
            url,
            backend: Backend::Local { root },
            io: FileIO::new_with_fs(),
            io_direct: FileIO::new_with_fs(),
        })
    }

    /// The warehouse at `location`: a local folder, or an S3 bucket, whose settings come
    /// from the standard AWS sources and which is checked (write, read, list, remove of
    /// a probe object) before it is used.
    pub async fn open_with(location: &str, options: &WarehouseOptions) -> Result<Warehouse> {
        if !(location.starts_with("s3://") || location.starts_with("s3a://")) {
            return Warehouse::open(location);
        }
        let mut settings = S3Settings::from_env(location, options.s3_path_style)?;
        settings.timeout = options.s3_timeout;
        let bucket = Bucket::connect(settings)?;
        bucket.probe().await?;
        let staging = options.local_dir.join("staging");
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)?;
        let cache = ReadCache::open(
            &options.local_dir.join("cache"),
            options.cache_bytes,
            bucket.clone(),
        )?;
        let (file_io, small) = io::file_io(bucket.clone());
        Ok(Warehouse {
            url: bucket.settings.url(),
            io: file_io,
            io_direct: io::file_io_direct(bucket.clone()),
            backend: Backend::S3 {
                bucket: Box::new(bucket),
                cache: Arc::new(cache),
                staging,
                small,
            },
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn io(&self) -> &FileIO {
        &self.io
    }

    /// [`Warehouse::io`] without its memory of small files.
    pub fn io_direct(&self) -> &FileIO {
        &self.io_direct
    }

    /// The folder of a local warehouse.
    pub fn local_root(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Local { root } => Some(root),
            Backend::S3 { .. } => None,
        }
    }

    /// The bucket of an S3 warehouse.
    pub fn s3(&self) -> Option<&Bucket> {
        match &self.backend {
            Backend::S3 { bucket, .. } => Some(bucket),
            Backend::Local { .. } => None,
        }
    }

    pub fn cache(&self) -> Option<&ReadCache> {
        match &self.backend {
            Backend::S3 { cache, .. } => Some(cache),
            Backend::Local { .. } => None,
        }
    }

    /// The local folders a DuckDB that reads tables may read: the warehouse's folder, or
    /// the read cache.
    pub fn readable_dirs(&self) -> Vec<PathBuf> {
        match &self.backend {
            Backend::Local { root } => vec![root.clone()],
            Backend::S3 { cache, staging, .. } => {
                vec![cache.dir().to_path_buf(), staging.clone()]
            }
        }
    }

    /// The folder of a new table, by its name's levels: `<ns>/.../<table>-<uuid>`, each
    /// level as [`folder_level`] writes it.
    pub fn new_table_location<S: AsRef<str>>(&self, levels: &[S], uuid: &Uuid) -> String {
        let mut parts: Vec<String> = levels.iter().map(|l| folder_level(l.as_ref())).collect();
        let name = parts.pop().unwrap_or_default();
        format!(
            "{}/{}/{}-{}",
            self.url,
            parts.join("/"),
            name,
            uuid.simple()
        )
    }

    /// Makes a new table's `metadata/` and `data/` folders, for clients that write files
    /// there before their first commit and do not make folders (DuckDB). Object stores
    /// have no folders.
    pub fn prepare_table_location(&self, location: &str) -> Result<()> {
        if let Backend::Local { .. } = self.backend {
            let root = self.local_path(location)?;
            std::fs::create_dir_all(root.join("metadata"))?;
            std::fs::create_dir_all(root.join("data"))?;
        } else {
            self.key(location)?;
        }
        Ok(())
    }

    /// The key of a location inside the warehouse (its path below the warehouse's root,
    /// `/`-separated), in any spelling writers use; refuses anything outside it.
    pub fn key(&self, location: &str) -> Result<String> {
        let key = match &self.backend {
            Backend::Local { root } => self.local_path(location).ok().and_then(|p| {
                p.strip_prefix(root)
                    .ok()
                    .and_then(|r| r.to_str().map(str::to_string))
            }),
            Backend::S3 { bucket, .. } => object_key(&bucket.settings, location),
        };
        key.ok_or_else(|| {
            Error::bad_request(
                Code::OutsideWarehouse,
                format!("'{location}' is outside the warehouse {}", self.url),
            )
        })
    }

    /// The canonical spelling of a location inside the warehouse: the one the server
    /// stores and its FileIO reads.
    pub fn canonical(&self, location: &str) -> Result<String> {
        let key = self.key(location)?;
        Ok(if key.is_empty() {
            self.url.clone()
        } else {
            format!("{}/{key}", self.url)
        })
    }

    /// The local path of a location inside a local warehouse; refuses anything outside
    /// it (and every location of an S3 warehouse).
    pub fn local_path(&self, location: &str) -> Result<PathBuf> {
        let Backend::Local { root } = &self.backend else {
            return Err(Error::internal(format!(
                "'{location}' is in an S3 warehouse, not a local file"
            )));
        };
        let p = file_url_path(location)
            .ok_or_else(|| Error::internal(format!("'{location}' is not a local file URL")))?;
        if !p.starts_with(root) || p.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(Error::internal(format!(
                "'{location}' is outside the warehouse {}",
                self.url
            )));
        }
        Ok(p)
    }

    /// Writes files whole and durably, all at once: flushed to disk with their folders
    /// in a local warehouse; on S3 each put (one round trip for them all) and kept in
    /// the FileIO's memory when small, for the reads that follow.
    pub async fn write_durable(&self, files: Vec<(String, bytes::Bytes)>) -> Result<()> {
        match &self.backend {
            Backend::Local { .. } => {
                let files = files
                    .into_iter()
                    .map(|(l, b)| Ok((self.local_path(&l)?, b)))
                    .collect::<Result<Vec<_>>>()?;
                tokio::task::spawn_blocking(move || write_files_durably(&files))
                    .await
                    .map_err(|e| Error::internal(format!("write task failed: {e}")))?
            }
            Backend::S3 { bucket, small, .. } => {
                let puts = files.into_iter().map(|(location, bytes)| async move {
                    bucket.put(&self.key(&location)?, bytes.clone()).await?;
                    small.keep(&location, &bytes);
                    Ok::<_, Error>(())
                });
                futures::future::try_join_all(puts).await?;
                Ok(())
            }
        }
    }

    /// Removes files no commit points at (best effort: what stays is `lh gc`'s). On S3
    /// the removal runs in the background when called outside an async context.
    pub fn remove_files(&self, locations: &[String]) {
        match &self.backend {
            Backend::Local { .. } => {
                for l in locations {
                    if let Ok(p) = self.local_path(l) {
                        let _ = std::fs::remove_file(p);
                    }
                }
            }
            Backend::S3 { bucket, small, .. } => {
                for l in locations {
                    small.forget(l);
                }
                let keys: Vec<String> = locations.iter().filter_map(|l| self.key(l).ok()).collect();
                if keys.is_empty() {
                    return;
                }
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let bucket = bucket.clone();
                    rt.spawn(async move {
                        if let Err(e) = bucket.delete_many(keys).await {
                            tracing::warn!(error = %e.message, "cannot remove unreferenced files; garbage collection will");
                        }
                    });
                }
            }
        }
    }

    /// Where a write's DuckDB puts the data files that will be at `data_url`: the folder
    /// itself in a local warehouse, a staging folder of the write's own on S3.
    pub fn write_dir(&self, data_url: &str) -> Result<PathBuf> {
        match &self.backend {
            Backend::Local { .. } => self.local_path(data_url),
            Backend::S3 { staging, .. } => {
                self.key(data_url)?;
                // Made now, as a local write's folder is, so that a write in flight
                // shows.
                let dir = staging.join(Uuid::new_v4().simple().to_string());
                std::fs::create_dir_all(&dir)?;
                Ok(dir)
            }
        }
    }

    /// Makes staged data files available at their locations before a commit names
    /// them: flushed to disk in a local warehouse; on S3 uploaded (several at once,
    /// large ones in parts) and moved into the read cache. On failure nothing a commit
    /// references exists; uploaded objects of a failed upload are removed.
    pub async fn publish(&self, dir: &Path, files: &[Staged]) -> Result<()> {
        match &self.backend {
            Backend::Local { .. } => {
                let paths: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
                if paths.is_empty() {
                    return Ok(());
                }
                let dir = dir.to_path_buf();
                tokio::task::spawn_blocking(move || sync_files(&dir, &paths))
                    .await
                    .map_err(|e| Error::internal(format!("sync task failed: {e}")))?
            }
            Backend::S3 { bucket, cache, .. } => {
                let jobs: Vec<_> = files
                    .iter()
                    .cloned()
                    .map(|f| {
                        let (bucket, key) = (bucket.clone(), self.key(&f.location));
                        async move {
                            let key = key?;
                            let size = tokio::fs::metadata(&f.path).await?.len();
                            let etag = bucket.upload(&key, &f.path).await?;
                            Ok::<_, Error>((key, f.path, size, etag))
                        }
                    })
                    .collect();
                let uploads: Vec<Result<_>> = futures::stream::iter(jobs)
                    .buffer_unordered(4)
                    .collect()
                    .await;
                let mut done = Vec::new();
                let mut failed = None;
                for u in uploads {
                    match u {
                        Ok(d) => done.push(d),
                        Err(e) => failed = failed.or(Some(e)),
                    }
                }
                if let Some(e) = failed {
                    let keys = done.into_iter().map(|d| d.0).collect();
                    let _ = bucket.delete_many(keys).await;
                    return Err(e);
                }
                for (key, path, size, etag) in done {
                    cache.adopt(&key, &path, size, etag);
                }
                let _ = std::fs::remove_dir_all(dir);
                Ok(())
            }
        }
    }

    /// Removes a write's local folder (on S3, its staging folder) after a failure or
    /// once its files are published.
    pub fn discard_write_dir(&self, dir: &Path) {
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The local path DuckDB reads the data file at `location` (of `size` bytes, as its
    /// manifest says) from: the file itself in a local warehouse; on S3 the read
    /// cache's copy, fetched if need be and kept while `pins` lives.
    pub async fn readable(&self, location: &str, size: u64, pins: &mut Pins) -> Result<PathBuf> {
        match &self.backend {
            Backend::Local { .. } => self.local_path(location),
            Backend::S3 { cache, .. } => {
                let key = self.key(location)?;
                cache.local(&key, size, pins).await
            }
        }
    }

    /// Removes objects of an S3 warehouse by key; the first error after trying all.
    pub async fn remove_keys(&self, keys: Vec<String>) -> Result<()> {
        match &self.backend {
            Backend::Local { .. } => Err(Error::internal("remove_keys is for object stores")),
            Backend::S3 { bucket, .. } => bucket.delete_many(keys).await,
        }
    }

    /// Every file of the warehouse below the folder `key_prefix`: key, size, and when
    /// last changed.
    pub async fn list(&self, key_prefix: &str) -> Result<Vec<s3::Object>> {
        match &self.backend {
            Backend::Local { .. } => Err(Error::internal("list is for object stores")),
            Backend::S3 { bucket, .. } => bucket.list(key_prefix).await,
        }
    }
}

/// The key below the warehouse prefix of an S3 location in this bucket (`s3://`, or
/// `s3a://`/`s3n://` as Hadoop writes them), if it is inside the warehouse.
pub fn object_key(settings: &S3Settings, location: &str) -> Option<String> {
    let rest = ["s3://", "s3a://", "s3n://"]
        .iter()
        .find_map(|s| location.strip_prefix(s))?;
    let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket != settings.bucket {
        return None;
    }
    let path = path.trim_end_matches('/');
    let key = if settings.prefix.is_empty() {
        path
    } else if path == settings.prefix {
        ""
    } else {
        path.strip_prefix(&settings.prefix)?.strip_prefix('/')?
    };
    let bad = key
        .split('/')
        .any(|p| (p.is_empty() && !key.is_empty()) || p == "." || p == "..");
    (!bad).then(|| key.to_string())
}

fn write_files_durably(files: &[(PathBuf, bytes::Bytes)]) -> Result<()> {
    let mut dirs = std::collections::BTreeSet::new();
    for (path, bytes) in files {
        if let Some(dir) = path.parent() {
            // A folder made here is named in its parent, which must reach the disk too.
            let mut made = dir;
            while !made.exists() {
                match made.parent() {
                    Some(p) => {
                        dirs.insert(p);
                        made = p;
                    }
                    None => break,
                }
            }
            std::fs::create_dir_all(dir)?;
            dirs.insert(dir);
        }
        let mut f = File::create(path)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    for dir in dirs {
        sync_dir(dir)?;
    }
    Ok(())
}

/// The absolute path a local file URL names, in each spelling writers use: `file:///p`
/// (lh, pyiceberg, DuckDB), `file:/p` (Hadoop's `Path`, so Spark and every JVM engine)
/// and `file://localhost/p`. Taken literally: writers put paths in unencoded.
pub fn file_url_path(location: &str) -> Option<PathBuf> {
    let rest = location.strip_prefix("file:")?;
    let path = match rest.strip_prefix("//") {
        Some(authority_and_path) => authority_and_path
            .strip_prefix("localhost")
            .unwrap_or(authority_and_path),
        None => rest,
    };
    path.starts_with('/').then(|| PathBuf::from(path))
}

/// Flushes files and the folder that holds them to disk.
pub fn sync_files(dir: &Path, files: &[PathBuf]) -> Result<()> {
    for f in files {
        File::open(f)?.sync_all()?;
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// A name's level as one folder: a lowercase identifier as it is; any other level with
/// every byte but lowercase letters and digits written `~XX` (`my-db` is `my~2Ddb`).
/// No two levels share a folder (a plain level has no `~` and starts with a letter or
/// `_`), none is `..` or differs from another only by case (on a filesystem that
/// ignores it), and a table folder's only `-` is the one before its uuid: a table's
/// own folder is what decides which files its snapshots may name (`tables/commit.rs`),
/// and garbage collection finds table folders by that `-`.
pub fn folder_level(level: &str) -> String {
    let plain = level
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && level
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if plain {
        return level.to_string();
    }
    let mut out = String::with_capacity(level.len());
    for b in level.bytes() {
        if b.is_ascii_lowercase() || b.is_ascii_digit() {
            out.push(b as char);
        } else {
            out.push_str(&format!("~{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_local_file_url_names_its_path() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(file_url_path("file:///w/t/a.parquet"), p("/w/t/a.parquet"));
        assert_eq!(file_url_path("file:/w/t/a.parquet"), p("/w/t/a.parquet"));
        assert_eq!(file_url_path("file://localhost/w/a"), p("/w/a"));
        assert_eq!(file_url_path("file:///w/a b%20c"), p("/w/a b%20c"));
        assert_eq!(file_url_path("file://otherhost/w/a"), None);
        assert_eq!(file_url_path("file:w/a"), None);
        assert_eq!(file_url_path("s3://b/w/a"), None);
        assert_eq!(file_url_path("/w/a"), None);
    }

    #[test]
    fn a_location_outside_the_warehouse_is_refused_in_every_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let w = Warehouse::open(dir.path().to_str().unwrap()).unwrap();
        let root = w.local_root().unwrap().display().to_string();
        for inside in [
            format!("file://{root}/ns/t/data/a.parquet"),
            format!("file:{root}/ns/t/data/a.parquet"),
            format!("file://localhost{root}/ns/t/data/a.parquet"),
        ] {
            assert_eq!(
                w.local_path(&inside).unwrap(),
                w.local_root().unwrap().join("ns/t/data/a.parquet"),
                "{inside}"
            );
        }
        for outside in [
            "file:///etc/passwd".to_string(),
            "file:/etc/passwd".to_string(),
            format!("file:{root}/../x"),
            format!("file:{root}-sibling/x"),
            format!("{root}/ns/t/a.parquet"),
        ] {
            assert!(w.local_path(&outside).is_err(), "{outside}");
        }
    }
}
