//! The read-through cache of an S3 warehouse's data files on the server's disk.
//!
//! DuckDB reads local files only (its sandbox stays closed to the network), so a query
//! reads each data file it needs from here. Data files never change once written, so an
//! entry is named by its object key and size, and remembers the object's ETag: an entry
//! found on disk at start-up is checked against the object (a HEAD) the first time it
//! is used, and fetched again if the object changed; after a reboot the cache starts
//! empty (files are not flushed one by one). The cache is bounded
//! (`--cache-size`): past its size the least recently used entries go, except those a
//! query is reading (pinned). Concurrent fetches of one object share one download, and
//! a large object is fetched as ranges, several at once. The server's own writes put
//! their files in on upload, so a table just written reads at local speed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use super::s3::Bucket;
use crate::error::{Code, Error, Kind, Result};

/// Objects up to this size are fetched in one request; larger ones in ranges this big.
const RANGE_BYTES: u64 = 8 << 20;
/// Ranges of one object in flight at once.
const RANGES_IN_FLIGHT: usize = 8;

#[derive(Debug)]
struct Entry {
    path: PathBuf,
    size: u64,
    etag: Option<String>,
    /// When last used, on the cache's clock.
    used: u64,
    /// Queries reading it now.
    pins: usize,
    /// Checked against the object since this server started.
    verified: bool,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, Entry>,
    bytes: u64,
    clock: u64,
}

/// What the cache did, for `lh info` and the benchmarks.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct CacheStats {
    pub entries: u64,
    pub bytes: u64,
    pub capacity: u64,
    pub hits: u64,
    pub fetches: u64,
    pub fetched_bytes: u64,
    pub evictions: u64,
}

pub struct ReadCache {
    dir: PathBuf,
    capacity: u64,
    bucket: Bucket,
    state: Arc<Mutex<State>>,
    /// One lock per object being fetched: the second reader waits for the first.
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Ranges in flight across every fetch: bounds the memory downloads hold.
    ranges: tokio::sync::Semaphore,
    stats: Mutex<CacheStats>,
}

impl std::fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCache")
            .field("dir", &self.dir)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// Files of the cache that a query reads: kept until dropped.
#[derive(Debug, Default)]
pub struct Pins {
    state: Option<Arc<Mutex<State>>>,
    names: Vec<String>,
}

impl Pins {
    pub fn none() -> Pins {
        Pins::default()
    }

    pub fn extend(&mut self, mut other: Pins) {
        self.names.append(&mut other.names);
        if self.state.is_none() {
            self.state = other.state.take();
        }
    }

    fn add(&mut self, state: &Arc<Mutex<State>>, name: String) {
        self.state.get_or_insert_with(|| state.clone());
        self.names.push(name);
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        let Some(state) = &self.state else { return };
        let mut s = state.lock().expect("cache lock");
        for n in &self.names {
            if let Some(e) = s.entries.get_mut(n) {
                e.pins = e.pins.saturating_sub(1);
            }
        }
    }
}

/// The entry name of an object: its key's hash and its size.
fn name(key: &str, size: u64) -> String {
    format!("{}-{size}", &blake3::hash(key.as_bytes()).to_hex()[..40])
}

impl ReadCache {
    /// The cache in `dir`, with what an earlier run of the server left there.
    pub fn open(dir: &Path, capacity: u64, bucket: Bucket) -> Result<ReadCache> {
        let objects = dir.join("objects");
        // Files are named without being flushed to disk (a flush per file costs more
        // than most small queries): what a process crash leaves is whole, since the
        // kernel keeps it, but after a reboot (a power loss, perhaps) the cache starts
        // empty rather than trust files that may have lost their bytes.
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok();
        let stamp = dir.join("boot_id");
        if boot.is_none() || std::fs::read_to_string(&stamp).ok() != boot {
            let _ = std::fs::remove_dir_all(&objects);
        }
        std::fs::create_dir_all(&objects)?;
        if let Some(b) = &boot {
            std::fs::write(&stamp, b)?;
        }
        let tmp = dir.join("tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        let mut found = Vec::new();
        for sub in std::fs::read_dir(&objects)? {
            let sub = sub?.path();
            if !sub.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(&sub)? {
                let path = f?.path();
                let Some(n) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .map(str::to_string)
                else {
                    continue;
                };
                if n.ends_with(".etag") {
                    continue;
                }
                let meta = std::fs::metadata(&path)?;
                let size = n.rsplit_once('-').and_then(|(_, s)| s.parse::<u64>().ok());
                if size != Some(meta.len()) {
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                let etag = std::fs::read_to_string(path.with_extension("etag")).ok();
                found.push((meta.modified().ok(), n, path, meta.len(), etag));
            }
        }
        found.sort_by_key(|f| f.0);
        let mut state = State::default();
        for (_, n, path, size, etag) in found {
            state.clock += 1;
            state.bytes += size;
            state.entries.insert(
                n,
                Entry {
                    path,
                    size,
                    etag,
                    used: state.clock,
                    pins: 0,
                    verified: false,
                },
            );
        }
        let cache = ReadCache {
            dir: dir.to_path_buf(),
            capacity,
            bucket,
            state: Arc::new(Mutex::new(state)),
            inflight: Mutex::default(),
            ranges: tokio::sync::Semaphore::new(RANGES_IN_FLIGHT * 2),
            stats: Mutex::default(),
        };
        cache.evict();
        Ok(cache)
    }

    /// Drops the copies of objects removed from the bucket (`lh gc`): no read serves
    /// them after. A copy a query reads now stays until the next removal finds it free.
    pub fn evict_removed(&self, objects: &[(String, u64)]) {
        let Ok(mut s) = self.state.lock() else { return };
        for (key, size) in objects {
            let n = name(key, *size);
            if s.entries.get(&n).is_some_and(|e| e.pins == 0)
                && let Some(e) = s.entries.remove(&n)
            {
                s.bytes = s.bytes.saturating_sub(e.size);
                remove_entry_files(&e.path);
            }
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn stats(&self) -> CacheStats {
        let s = self.state.lock().expect("cache lock");
        let mut out = *self.stats.lock().expect("stats lock");
        out.entries = s.entries.len() as u64;
        out.bytes = s.bytes;
        out.capacity = self.capacity;
        out
    }

    /// The entry `n`, pinned, if it is there and checked.
    fn pin_verified(&self, n: &str) -> Option<(PathBuf, Option<String>, bool)> {
        let mut s = self.state.lock().expect("cache lock");
        s.clock += 1;
        let clock = s.clock;
        let e = s.entries.get_mut(n)?;
        if e.verified {
            e.pins += 1;
            e.used = clock;
            Some((e.path.clone(), None, true))
        } else {
            Some((e.path.clone(), e.etag.clone(), false))
        }
    }

    /// The local path of the object `key` of `size` bytes, fetched if need be, pinned
    /// until `pins` is dropped.
    pub async fn local(&self, key: &str, size: u64, pins: &mut Pins) -> Result<PathBuf> {
        let n = name(key, size);
        if let Some(path) = self.try_pin(&n, key, size).await? {
            self.stats.lock().expect("stats lock").hits += 1;
            pins.add(&self.state, n);
            return Ok(path);
        }
        let lock = self
            .inflight
            .lock()
            .expect("inflight lock")
            .entry(n.clone())
            .or_default()
            .clone();
        let fetched = {
            let _one = lock.lock().await;
            // Another reader may have fetched it while this one waited.
            match self.try_pin(&n, key, size).await {
                Ok(Some(path)) => Ok(path),
                Ok(None) => self.fetch(&n, key, size).await,
                Err(e) => Err(e),
            }
        };
        {
            // The map's entry goes with its last user (checked under the map's lock).
            let mut inflight = self.inflight.lock().expect("inflight lock");
            drop(lock);
            if inflight.get(&n).is_some_and(|l| Arc::strong_count(l) == 1) {
                inflight.remove(&n);
            }
        }
        let path = fetched?;
        pins.add(&self.state, n);
        self.evict();
        Ok(path)
    }

    /// Pins the entry when it is there and still the object's; an entry from an earlier
    /// run is checked against the object first.
    async fn try_pin(&self, n: &str, key: &str, size: u64) -> Result<Option<PathBuf>> {
        let Some((path, etag, verified)) = self.pin_verified(n) else {
            return Ok(None);
        };
        if verified {
            return Ok(Some(path));
        }
        let object = self.bucket.head(key).await;
        let same = matches!(&object, Ok(o) if o.size == size && (etag.is_none() || o.etag == etag));
        let mut s = self.state.lock().expect("cache lock");
        if same {
            s.clock += 1;
            let clock = s.clock;
            if let Some(e) = s.entries.get_mut(n) {
                e.verified = true;
                e.pins += 1;
                e.used = clock;
                return Ok(Some(e.path.clone()));
            }
            return Ok(None);
        }
        if let Some(e) = s.entries.get(n)
            && e.pins == 0
        {
            let e = s.entries.remove(n).expect("entry");
            s.bytes -= e.size;
            remove_entry_files(&e.path);
        }
        drop(s);
        // Changed, gone or not answering: fetching says which, clearly.
        Ok(None)
    }

    async fn fetch(&self, n: &str, key: &str, size: u64) -> Result<PathBuf> {
        let tmp = TempFile(
            self.dir
                .join("tmp")
                .join(uuid::Uuid::new_v4().simple().to_string()),
        );
        // Removed if the download fails or its caller goes away.
        let etag = self.download(key, size, &tmp.0).await?;
        let path = self.dir.join("objects").join(&n[..2]).join(n);
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        if let Some(t) = &etag {
            tokio::fs::write(path.with_extension("etag"), t).await?;
        }
        tokio::fs::rename(&tmp.0, &path).await?;
        std::mem::forget(tmp);
        let mut st = self.stats.lock().expect("stats lock");
        st.fetches += 1;
        st.fetched_bytes += size;
        drop(st);
        self.insert(n, &path, size, etag, 1);
        Ok(path)
    }

    fn insert(&self, n: &str, path: &Path, size: u64, etag: Option<String>, pins: usize) {
        let mut s = self.state.lock().expect("cache lock");
        s.clock += 1;
        let used = s.clock;
        if let Some(old) = s.entries.remove(n) {
            s.bytes -= old.size;
        }
        s.bytes += size;
        s.entries.insert(
            n.to_string(),
            Entry {
                path: path.to_path_buf(),
                size,
                etag,
                used,
                pins,
                verified: true,
            },
        );
    }

    /// Downloads `key` into `tmp`, in ranges when large; returns its ETag.
    async fn download(&self, key: &str, size: u64, tmp: &Path) -> Result<Option<String>> {
        let mut file = tokio::fs::File::create(tmp).await?;
        if size == 0 {
            let o = self.bucket.head(key).await?;
            check_size(key, size, o.size)?;
            return Ok(o.etag);
        }
        let first = 0..size.min(RANGE_BYTES);
        let (bytes, meta) = {
            let _slot = self.ranges.acquire().await.map_err(|_| short(key))?;
            self.bucket.get_range(key, first, None).await?
        };
        check_size(key, size, meta.size)?;
        file.write_all(&bytes).await?;
        let etag = meta.e_tag;
        let rest: Vec<std::ops::Range<u64>> = (1..size.div_ceil(RANGE_BYTES))
            .map(|i| i * RANGE_BYTES..((i + 1) * RANGE_BYTES).min(size))
            .collect();
        let fetches: Vec<_> = rest
            .into_iter()
            .map(|r| {
                let (bucket, key, etag) = (self.bucket.clone(), key.to_string(), etag.clone());
                let ranges = &self.ranges;
                async move {
                    let want = r.end - r.start;
                    let _slot = ranges.acquire().await.map_err(|_| short(&key))?;
                    let (b, _) = bucket.get_range(&key, r, etag.as_deref()).await?;
                    if b.len() as u64 != want {
                        return Err(short(&key));
                    }
                    Ok::<_, Error>(b)
                }
            })
            .collect();
        let mut chunks = futures::stream::iter(fetches).buffered(RANGES_IN_FLIGHT);
        while let Some(b) = chunks.next().await {
            file.write_all(&b?).await?;
        }
        file.flush().await?;
        let written = file.metadata().await?.len();
        if written != size {
            return Err(short(key));
        }
        Ok(etag)
    }

    /// Puts a file the server has just uploaded as `key` into the cache (moved, not
    /// copied); a file that cannot be moved is left where it is.
    pub fn adopt(&self, key: &str, local: &Path, size: u64, etag: Option<String>) {
        let n = name(key, size);
        let path = self.dir.join("objects").join(&n[..2]).join(&n);
        let synced = std::fs::File::open(local)
            .and_then(|f| f.sync_all())
            .is_ok();
        let moved = synced
            && path
                .parent()
                .is_some_and(|p| std::fs::create_dir_all(p).is_ok())
            && etag
                .as_ref()
                .is_none_or(|t| std::fs::write(path.with_extension("etag"), t).is_ok())
            && std::fs::rename(local, &path).is_ok();
        if moved {
            self.insert(&n, &path, size, etag, 0);
            self.evict();
        }
    }

    /// Removes the least recently used entries no query reads until the cache is
    /// within its size (to 90% of it, so that it does not evict on every fetch).
    fn evict(&self) {
        let mut s = self.state.lock().expect("cache lock");
        if s.bytes <= self.capacity {
            return;
        }
        let target = self.capacity / 10 * 9;
        let mut order: Vec<(u64, String)> = s
            .entries
            .iter()
            .filter(|(_, e)| e.pins == 0)
            .map(|(n, e)| (e.used, n.clone()))
            .collect();
        order.sort();
        let mut evicted = 0;
        for (_, n) in order {
            if s.bytes <= target {
                break;
            }
            if let Some(e) = s.entries.remove(&n) {
                s.bytes -= e.size;
                remove_entry_files(&e.path);
                evicted += 1;
            }
        }
        drop(s);
        self.stats.lock().expect("stats lock").evictions += evicted;
    }
}

/// A download in progress, removed when dropped (a failure, a caller gone).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn remove_entry_files(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(path.with_extension("etag"));
}

fn check_size(key: &str, manifest: u64, object: u64) -> Result<()> {
    if manifest == object {
        return Ok(());
    }
    Err(Error::new(
        Kind::Internal,
        Code::Corrupt,
        format!("the object {key} has {object} bytes where the table's manifest says {manifest}"),
    ))
}

fn short(key: &str) -> Error {
    Error::new(
        Kind::Unavailable,
        Code::ObjectStore,
        format!("the S3 server sent fewer bytes of {key} than asked for"),
    )
}
