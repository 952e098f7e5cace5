//! Garbage collection of the warehouse: removes the files that no commit the retention
//! keeps can reach (`retention.rs`), once they are older than a grace period.
//!
//! Such files are what failed work leaves (a server killed between writing a table's
//! files and committing them, an Iceberg REST client whose commit was refused, an
//! abandoned staged create), and what only commits past their retention read: old
//! table versions, snapshots expired from a table's metadata (`lh table expire`), the
//! data they alone held. Every kept commit reads what it read: a ref's head, any commit
//! within its branch's window, a deleted branch's commits within the catch-all window
//! (replay reads the input commits of runs that recent).
//!
//! Mark: every table version a kept commit reads: a ref head's whole (its metadata file,
//! statistics, and each snapshot's manifest list, manifests, data and delete files);
//! another kept commit's, the snapshot it reads. Memoized outputs of pipeline nodes
//! that no kept commit reads are forgotten first, so that no run reuses them. Locations are compared as real paths (`file:///p`,
//! `file:/p`, `file://localhost/p`, `/p`, percent-encoded or not, through symbolic
//! links), so no spelling of a live file makes it look like garbage.
//!
//! Sweep: the regular files inside lh's table folders (`<namespace>/<table>-<uuid>/`;
//! anything else in the warehouse is not lh's to remove) that are not marked, were last
//! modified before the cutoff, and are not in a folder a write of this server is
//! filling. The grace period (three days by default, at least one) protects the writes
//! of other servers and of REST clients in flight. Before removing anything the mark is
//! extended with what was committed meanwhile, under the commit gate that REST commits
//! and registrations hold, so that none of them can point at a file as it goes (other
//! servers sharing the catalog can, within that short window: they are protected by the
//! grace period only). A table version that cannot be read stops the collection with
//! nothing removed in its table folder; the rest of the warehouse is collected, and the
//! response names the version.
//!
//! On S3 the same rules apply to object keys: the sweep lists the warehouse's prefix,
//! an object's age is its Last-Modified, and there are no folders to prune. Keys are
//! seen as paths below a virtual root (`/`), so that both backends share the marking
//! and the table-folder rules.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::{Tables, snapshot};
use crate::error::{Code, Error, Kind, Result};

/// The grace period when the request names none (Iceberg's own default).
pub const DEFAULT_OLDER_THAN: Duration = Duration::from_secs(3 * 86400);
/// The shortest grace period accepted: writes in flight elsewhere must keep their files.
pub const MIN_OLDER_THAN: Duration = Duration::from_secs(86400);
/// How many removed paths a response lists.
const LISTED: usize = 1000;

/// One collection at a time per server.
static RUNNING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The memoized outputs of pipeline nodes (the run store's): those memoized within the
/// catch-all retention window are kept (runs reuse them only well within it), older
/// ones forgotten.
#[async_trait::async_trait]
pub trait Memo: Sync {
    /// The table versions of the outputs memoized since `since`.
    async fn kept(
        &self,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<lh_catalog::TablePointer>>;
    /// Forgets the outputs memoized before `before`; how many.
    async fn forget_before(&self, before: chrono::DateTime<chrono::Utc>) -> Result<u64>;
}

/// What a collection is asked to do.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcOptions {
    /// Only files last modified at least this long ago are candidates
    /// ([`DEFAULT_OLDER_THAN`] when none; at least [`MIN_OLDER_THAN`]).
    pub older_than: Option<Duration>,
    /// List what would be removed, and remove nothing.
    pub dry_run: bool,
}

/// What a collection found and did.
#[derive(Debug, Clone, Default)]
pub struct GcReport {
    pub dry_run: bool,
    pub older_than: Duration,
    /// Distinct table metadata files the catalog's commits point at.
    pub table_versions: u64,
    /// Files in the warehouse.
    pub scanned_files: u64,
    /// Files some commit reaches.
    pub live_files: u64,
    /// Files no commit reaches, kept: younger than `older_than`, or in a folder a write
    /// of this server is filling.
    pub recent_files: u64,
    /// Files outside lh's table folders, never removed.
    pub foreign_files: u64,
    /// Files no commit reaches, removed (or, in a dry run, to remove).
    pub removed_files: u64,
    pub removed_bytes: u64,
    /// Empty folders removed with them (not counted in a dry run).
    pub removed_folders: u64,
    /// The first of them (at most 1000), relative to the warehouse.
    pub removed: Vec<String>,
    /// Table versions that could not be read, with why: their folders are left whole.
    pub unreadable: Vec<String>,
    /// The files of those folders.
    pub protected_files: u64,
}

pub async fn collect(
    tables: &Tables,
    req: &GcOptions,
    memo: Option<&dyn Memo>,
) -> Result<GcReport> {
    let older_than = req.older_than.unwrap_or(DEFAULT_OLDER_THAN);
    if older_than.as_secs() > lh_api::units::MAX_CLIENT_SECS {
        return Err(Error::bad_request(
            Code::InvalidArgument,
            format!(
                "a grace period of {} s is longer than 100 years",
                older_than.as_secs()
            ),
        ));
    }
    if older_than < MIN_OLDER_THAN {
        return Err(Error::bad_request(
            Code::GraceTooShort,
            format!(
                "a grace period of {} s is too short: files of writes in flight could go",
                older_than.as_secs()
            ),
        )
        .with_hint("use at least 1d; the default is 3d"));
    }
    let _one = RUNNING.try_lock().map_err(|_| {
        Error::new(
            Kind::Conflict,
            Code::GcRunning,
            "a garbage collection is already running on this server",
        )
    })?;
    let cutoff = SystemTime::now()
        .checked_sub(older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let root = match tables.warehouse.local_root() {
        Some(r) => std::fs::canonicalize(r)?,
        None => PathBuf::from("/"),
    };

    let mut mark = Mark::new(tables, root.clone());
    let mut kept = tables.kept().await?;
    // Memoized outputs within the catch-all window stay reusable: what they read stays.
    let memo_since = chrono::Utc::now()
        - chrono::Duration::from_std(tables.retention().unreachable())
            .unwrap_or(chrono::Duration::MAX / 2);
    if let Some(memo) = memo {
        for p in memo.kept(memo_since).await? {
            kept.snapshots
                .entry(p.metadata_location)
                .or_default()
                .insert(p.snapshot_id);
        }
    }
    mark.add_kept(&kept).await;
    let mut seen = kept.locations();
    let (found, folders) = match tables.warehouse.local_root() {
        Some(_) => {
            let root = root.clone();
            tokio::task::spawn_blocking(move || scan(&root))
                .await
                .map_err(|e| Error::internal(format!("the warehouse scan failed: {e}")))??
        }
        None => {
            let objects = tables.warehouse.list("").await?;
            let found = objects
                .into_iter()
                .map(|o| Found {
                    path: root.join(&o.key),
                    modified: o.modified,
                    bytes: o.size,
                })
                .collect();
            (found, Vec::new())
        }
    };

    // From here to the last removal no REST commit or registration lands on this server.
    let _gate = tables.commit_gate.write().await;
    let now = tables.kept().await?;
    mark.add_kept(&now).await;
    seen.extend(now.locations());
    // Older memoized outputs are forgotten (no run reuses them: see
    // `runs::store::reusable_since`), their files freed with the rest.
    if let (false, Some(memo)) = (req.dry_run, memo) {
        let forgotten = memo.forget_before(memo_since).await?;
        if forgotten > 0 {
            tracing::info!(forgotten, "gc: forgot memoized outputs past the retention");
        }
    }
    let busy: Vec<PathBuf> = tables
        .in_flight
        .folders()
        .iter()
        .map(|k| {
            let p = root.join(k);
            // S3 keys below the virtual root are no paths of this machine.
            if tables.warehouse.local_root().is_some() {
                mark.real(&p)
            } else {
                p
            }
        })
        .collect();

    let mut resp = GcReport {
        dry_run: req.dry_run,
        older_than,
        table_versions: seen.len() as u64,
        scanned_files: found.len() as u64,
        live_files: 0,
        recent_files: 0,
        foreign_files: 0,
        removed_files: 0,
        removed_bytes: 0,
        removed_folders: 0,
        removed: Vec::new(),
        unreadable: mark.unreadable.clone(),
        protected_files: 0,
    };
    let mut doomed = Vec::new();
    let mut live_tables = HashSet::new();
    for f in found {
        if mark.protected.iter().any(|p| f.path.starts_with(p)) {
            resp.protected_files += 1;
        } else if mark.live.contains(&f.path) {
            resp.live_files += 1;
            if let Some(t) = table_folder(&root, &f.path) {
                live_tables.insert(t);
            }
        } else if !in_table_folder(&root, &f.path) {
            resp.foreign_files += 1;
        } else if f.modified > cutoff || busy.iter().any(|b| f.path.starts_with(b)) {
            resp.recent_files += 1;
        } else {
            doomed.push(f);
        }
    }
    for f in &doomed {
        resp.removed_files += 1;
        resp.removed_bytes += f.bytes;
        if resp.removed.len() < LISTED {
            let rel = f.path.strip_prefix(&root).unwrap_or(&f.path);
            resp.removed.push(rel.display().to_string());
        }
    }
    // No read is served a removed file from this server's memory of table versions.
    if !req.dry_run {
        let gone: HashSet<PathBuf> = doomed.iter().map(|f| f.path.clone()).collect();
        tables.forget_versions(&|location| {
            tables
                .warehouse
                .key(location)
                .is_ok_and(|k| gone.contains(&root.join(k)))
        });
    }
    if !req.dry_run && tables.warehouse.local_root().is_none() {
        let keys: Vec<String> = doomed
            .iter()
            .filter_map(|f| f.path.strip_prefix(&root).ok())
            .filter_map(|k| k.to_str().map(str::to_string))
            .collect();
        tables.warehouse.remove_keys(keys).await.map_err(|e| {
            let mut err = Error::new(
                e.kind,
                Code::ObjectStore,
                format!(
                    "garbage collection could not remove every file: {}",
                    e.message
                ),
            );
            err.hint = Some(
                "the warehouse's key needs permission to delete objects; what was removed \
                 stays removed; collect again once it may"
                    .into(),
            );
            err
        })?;
        // Nor from the read cache (a read since the mark may have fetched one again).
        if let Some(cache) = tables.warehouse.cache() {
            let sizes: Vec<(String, u64)> = doomed
                .iter()
                .filter_map(|f| {
                    let key = f.path.strip_prefix(&root).ok()?.to_str()?.to_string();
                    Some((key, f.bytes))
                })
                .collect();
            cache.evict_removed(&sizes);
        }
    } else if !req.dry_run {
        let prune = Prune {
            root: root.clone(),
            cutoff,
            busy,
            live_tables,
        };
        resp.removed_folders = tokio::task::spawn_blocking(move || {
            remove(&doomed)?;
            Ok::<_, Error>(prune.run(folders))
        })
        .await
        .map_err(|e| Error::internal(format!("the removal failed: {e}")))??;
    }
    tracing::info!(
        removed = resp.removed_files,
        bytes = resp.removed_bytes,
        live = resp.live_files,
        recent = resp.recent_files,
        foreign = resp.foreign_files,
        folders = resp.removed_folders,
        dry_run = resp.dry_run,
        "garbage collection"
    );
    Ok(resp)
}

/// The table folders writes of this server are filling (by their key in the
/// warehouse), each counted once per write.
#[derive(Default)]
pub struct InFlight(Mutex<HashMap<String, usize>>);

impl InFlight {
    /// Marks the folder `key` busy until the guard is dropped.
    pub fn enter(&self, key: &str) -> InFlightGuard<'_> {
        *self
            .0
            .lock()
            .expect("in-flight lock")
            .entry(key.to_string())
            .or_default() += 1;
        InFlightGuard {
            set: self,
            dir: key.to_string(),
        }
    }

    fn folders(&self) -> Vec<String> {
        self.0
            .lock()
            .expect("in-flight lock")
            .keys()
            .cloned()
            .collect()
    }
}

pub struct InFlightGuard<'a> {
    set: &'a InFlight,
    dir: String,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        let mut m = self.set.0.lock().expect("in-flight lock");
        if let Some(n) = m.get_mut(&self.dir) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.dir);
            }
        }
    }
}

/// The path a location names on this machine, if it is a local one: `file:///p`,
/// `file://localhost/p`, `file:/p` (percent-decoded) or `/p`. Each spelling of a
/// location may be meant literally too (a writer that did not encode a `%`): both
/// come back.
fn local_spellings(location: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if location.starts_with('/') {
        out.push(PathBuf::from(location));
    } else if location.starts_with("file:") {
        out.extend(crate::warehouse::file_url_path(location));
        if let Ok(p) = url::Url::parse(location).and_then(|u| {
            u.to_file_path()
                .map_err(|_| url::ParseError::RelativeUrlWithoutBase)
        }) && !out.contains(&p)
        {
            out.push(p);
        }
    }
    out
}

/// A path with its folders' symbolic links and `..` resolved, as the sweep sees it
/// (folders are resolved once, through `cache`). A folder that does not exist holds no
/// file to remove: the path is kept as named.
fn real_path(cache: &mut HashMap<PathBuf, PathBuf>, path: &Path) -> PathBuf {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return path.to_path_buf();
    };
    cache
        .entry(dir.to_path_buf())
        .or_insert_with(|| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()))
        .join(name)
}

/// The table folder, `<namespace>/.../<table>-<32 hex digits>`, that `path` is or lies
/// in.
fn table_folder(root: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?;
    let mut folder = root.to_path_buf();
    for c in rel.components() {
        folder.push(c);
        let name = c.as_os_str().to_string_lossy();
        let is_table = name.rsplit_once('-').is_some_and(|(table, id)| {
            !table.is_empty() && id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if is_table {
            return Some(folder);
        }
    }
    None
}

/// Whether the file `path` lies in a table folder.
fn in_table_folder(root: &Path, path: &Path) -> bool {
    path.parent().and_then(|d| table_folder(root, d)).is_some()
}

/// The empty folders garbage collection removes: in table folders, last changed before
/// the cutoff (as scanned), not being filled by a write of this server, and not a live
/// table's own folder or its `data/` and `metadata/` (clients write there later).
struct Prune {
    root: PathBuf,
    cutoff: SystemTime,
    busy: Vec<PathBuf>,
    live_tables: HashSet<PathBuf>,
}

impl Prune {
    fn run(&self, mut folders: Vec<(PathBuf, SystemTime)>) -> u64 {
        folders.sort_by_key(|(d, _)| std::cmp::Reverse(d.components().count()));
        let mut removed = 0;
        for (dir, modified) in folders {
            let Some(table) = table_folder(&self.root, &dir) else {
                continue;
            };
            let kept = self.live_tables.contains(&table)
                && (dir == table || dir == table.join("data") || dir == table.join("metadata"));
            let busy = self
                .busy
                .iter()
                .any(|b| dir.starts_with(b) || b.starts_with(&dir));
            // `remove_dir` refuses a folder that is not empty: a file that arrived since
            // the scan keeps its folder.
            if !kept && !busy && modified <= self.cutoff && std::fs::remove_dir(&dir).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// The files some table version reaches, as local paths (on S3: keys below `/`).
struct Mark<'a> {
    tables: &'a Tables,
    root: PathBuf,
    live: HashSet<PathBuf>,
    /// Table versions that could not be read, with the error.
    unreadable: Vec<String>,
    /// The table folders of those: nothing in them is removed.
    protected: Vec<PathBuf>,
    lists: HashSet<String>,
    manifests: HashSet<String>,
    /// The table versions marked, each with the snapshots marked of it.
    versions: HashSet<(String, Option<BTreeSet<Option<i64>>>)>,
    /// Real paths of folders, by the path they were named with.
    folders: HashMap<PathBuf, PathBuf>,
}

impl<'a> Mark<'a> {
    fn new(tables: &'a Tables, root: PathBuf) -> Self {
        Mark {
            tables,
            root,
            live: HashSet::new(),
            versions: HashSet::new(),
            unreadable: Vec::new(),
            protected: Vec::new(),
            lists: HashSet::new(),
            manifests: HashSet::new(),
            folders: HashMap::new(),
        }
    }

    fn real(&mut self, path: &Path) -> PathBuf {
        real_path(&mut self.folders, path)
    }

    /// The paths `location` names in this warehouse: local spellings (other schemes
    /// name no local file), or an S3 key below the virtual root.
    fn paths(&mut self, location: &str) -> Vec<PathBuf> {
        if self.tables.warehouse.local_root().is_none() {
            return self
                .tables
                .warehouse
                .key(location)
                .map(|k| self.root.join(k))
                .into_iter()
                .collect();
        }
        local_spellings(location)
            .into_iter()
            .map(|p| self.real(&p))
            .collect()
    }

    fn add(&mut self, location: &str) {
        for p in self.paths(location) {
            self.live.insert(p);
        }
    }

    /// Marks what the kept commits read (once each).
    async fn add_kept(&mut self, kept: &super::retention::Kept) {
        for location in &kept.whole {
            self.add_version(location, None).await;
        }
        for (location, snapshots) in &kept.snapshots {
            self.add_version(location, Some(snapshots)).await;
        }
    }

    /// Marks what a table version reaches: every snapshot, or `only` these (`None`:
    /// its current one). A version that cannot be read (a file lost or damaged) keeps
    /// its whole table folder: what it reaches is unknown.
    async fn add_version(&mut self, location: &str, only: Option<&BTreeSet<Option<i64>>>) {
        let key = (location.to_string(), only.cloned());
        if !self.versions.insert(key) {
            return;
        }
        if let Err(e) = self.add_table(location, only).await {
            tracing::warn!(%location, error = %e.message, "gc: a table version cannot be read; its table folder is kept");
            self.unreadable.push(format!("{location}: {}", e.message));
            for p in self.paths(location) {
                if let Some(folder) = table_folder(&self.root, &p) {
                    self.protected.push(folder);
                }
            }
        }
    }

    async fn add_table(
        &mut self,
        location: &str,
        only: Option<&BTreeSet<Option<i64>>>,
    ) -> Result<()> {
        // Read directly (the store as it is, not the server's memory of it): thousands of
        // old versions would flood the metadata caches.
        let io = self.tables.warehouse.io_direct();
        // Through the canonical spelling, which the FileIO reads.
        let readable = self
            .tables
            .warehouse
            .canonical(location)
            .unwrap_or_else(|_| location.to_string());
        let (m, _) = crate::read_metadata(io, &readable, None)
            .await
            .map_err(|e| Error::internal(format!("cannot read {location}: {}", e.message)))?;
        self.add(location);
        for s in m.statistics_iter() {
            self.add(&s.statistics_path);
        }
        for s in m.partition_statistics_iter() {
            self.add(&s.statistics_path);
        }
        let current = m.current_snapshot_id();
        for snap in m.snapshots() {
            let id = snap.snapshot_id();
            let read = |o: &BTreeSet<Option<i64>>| {
                o.contains(&Some(id)) || (o.contains(&None) && current == Some(id))
            };
            if only.is_some_and(|o| !read(o)) {
                continue;
            }
            let list = snap.manifest_list();
            if self.lists.contains(list) {
                continue;
            }
            self.add(list);
            let manifests = snapshot::manifests_of(io, &m, list)
                .await
                .map_err(|e| Error::internal(format!("cannot read {list}: {}", e.message)))?;
            for mf in manifests {
                if self.manifests.contains(&mf.manifest_path) {
                    continue;
                }
                self.add(&mf.manifest_path);
                let manifest = mf.load_manifest(io).await.map_err(|e| {
                    Error::internal(format!("cannot read {}: {e}", mf.manifest_path))
                })?;
                // What the snapshot reads: its live entries (a deleted entry names a
                // file an older snapshot read).
                for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                    self.add(e.file_path());
                }
                // Seen only once read whole: a version whose read failed leaves it
                // for the next version that shares it.
                self.manifests.insert(mf.manifest_path.clone());
            }
            self.lists.insert(list.to_string());
        }
        Ok(())
    }
}

struct Found {
    path: PathBuf,
    modified: SystemTime,
    bytes: u64,
}

/// Every regular file under `root`, and every folder below it with its modification
/// time (symbolic links are neither followed nor counted).
#[allow(clippy::type_complexity)]
fn scan(root: &Path) -> Result<(Vec<Found>, Vec<(PathBuf, SystemTime)>)> {
    let mut out = Vec::new();
    let mut folders = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            // Removed meanwhile (a failed write cleaning up).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        for entry in rd {
            let entry = entry?;
            let kind = entry.file_type()?;
            if !(kind.is_dir() || kind.is_file()) {
                continue;
            }
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            if kind.is_dir() {
                folders.push((entry.path(), meta.modified()?));
                dirs.push(entry.path());
            } else {
                out.push(Found {
                    path: entry.path(),
                    modified: meta.modified()?,
                    bytes: meta.len(),
                });
            }
        }
    }
    Ok((out, folders))
}

/// Removes the files.
fn remove(files: &[Found]) -> Result<()> {
    for f in files {
        match std::fs::remove_file(&f.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::internal(format!(
                    "cannot remove {}: {e}",
                    f.path.display()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_local_file_is_its_path() {
        let p = |s: &str| vec![PathBuf::from(s)];
        assert_eq!(
            local_spellings("file:///w/a b.parquet"),
            p("/w/a b.parquet")
        );
        assert_eq!(local_spellings("file:/w/x.avro"), p("/w/x.avro"));
        assert_eq!(local_spellings("file://localhost/w/x.avro"), p("/w/x.avro"));
        assert_eq!(local_spellings("/w/x.avro"), p("/w/x.avro"));
        assert_eq!(
            local_spellings("file:///w/a%20b.parquet"),
            vec![
                PathBuf::from("/w/a%20b.parquet"),
                PathBuf::from("/w/a b.parquet")
            ]
        );
        assert!(local_spellings("s3://bucket/w/x.avro").is_empty());
        assert!(local_spellings("relative/x.avro").is_empty());
    }

    #[test]
    fn only_table_folders_are_swept() {
        let root = Path::new("/w");
        let uuid = "0123456789abcdef0123456789abcdef";
        assert!(in_table_folder(
            root,
            &root.join(format!("shop/orders-{uuid}/data/x/part-0.parquet"))
        ));
        assert!(in_table_folder(
            root,
            &root.join(format!("a/b/t-{uuid}/metadata/0.metadata.json"))
        ));
        assert!(!in_table_folder(
            root,
            &root.join("shop/orders/data/p.parquet")
        ));
        assert!(!in_table_folder(root, &root.join(format!("shop/t-{uuid}"))));
        assert!(!in_table_folder(root, Path::new("/elsewhere/t-0/x")));
    }

    #[test]
    fn empty_folders_go_unless_live_recent_or_busy() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let uuid = |n: u8| format!("{:032x}", n);
        let live = root.join(format!("shop/live-{}", uuid(1)));
        let orphan = root.join(format!("shop/orphan-{}", uuid(2)));
        let busy = root.join(format!("shop/busy-{}", uuid(3)));
        let paths = [
            live.join("data"),                      // kept: clients write there
            live.join("metadata"),                  // kept
            live.join(format!("data/{}", uuid(4))), // an empty write folder: goes
            live.join(format!("data/{}", uuid(5))), // recent: kept
            orphan.join("metadata"),                // goes, and the orphan with it
            orphan.join("data"),                    // goes
            busy.join("data"),                      // a write in flight: kept
            root.join("shop/notes"),                // not a table folder: kept
        ];
        for p in &paths {
            std::fs::create_dir_all(p).unwrap();
        }
        let old = SystemTime::now() - Duration::from_secs(10 * 86400);
        let cutoff = SystemTime::now() - Duration::from_secs(86400);
        let mut folders: Vec<(PathBuf, SystemTime)> = paths
            .iter()
            .map(|p| (p.clone(), old))
            .chain([
                (live.clone(), old),
                (orphan.clone(), old),
                (busy.clone(), old),
            ])
            .collect();
        folders[3].1 = SystemTime::now();
        let prune = Prune {
            root: root.clone(),
            cutoff,
            busy: vec![busy.clone()],
            live_tables: HashSet::from([live.clone()]),
        };
        assert_eq!(prune.run(folders), 4);
        for (p, exists) in [
            (&paths[0], true),
            (&paths[1], true),
            (&paths[2], false),
            (&paths[3], true),
            (&orphan, false),
            (&paths[6], true),
            (&paths[7], true),
        ] {
            assert_eq!(p.exists(), exists, "{}", p.display());
        }
    }

    #[test]
    fn symbolic_links_and_dots_resolve_to_the_swept_path() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(real.join("w/t")).unwrap();
        std::os::unix::fs::symlink(real.join("w"), real.join("alias")).unwrap();
        let mut cache = HashMap::new();
        let want = real.join("w/t/f.parquet");
        assert_eq!(real_path(&mut cache, &real.join("alias/t/f.parquet")), want);
        assert_eq!(
            real_path(&mut cache, &real.join("w/t/../t/f.parquet")),
            want
        );
        assert_eq!(real_path(&mut cache, &want), want);
        let gone = real.join("nowhere/f.parquet");
        assert_eq!(real_path(&mut cache, &gone), gone);
    }
}
