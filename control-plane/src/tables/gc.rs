//! Garbage collection of the warehouse: removes the files that no table pointer the
//! catalog has ever stored can reach, once they are older than a grace period.
//!
//! Such files are what failed work leaves: a server killed between writing a table's
//! files and committing them, an Iceberg REST client whose commit was refused (its data
//! files and manifests stay where it wrote them), an abandoned staged create. Files of
//! every commit are kept, reachable from a ref or not (a deleted branch, a failed run's
//! branch after its TTL): any commit stays readable by its hash, and replay reads the
//! inputs of old runs. So this never changes what any ref or commit reads.
//!
//! Mark: every metadata location in the catalog's tree nodes
//! ([`lh_catalog::Catalog::all_metadata_locations`]), then for each metadata file its
//! metadata log, statistics, and for each snapshot its manifest list, manifests and
//! data and delete files. Sweep: every regular file under the warehouse that is not
//! marked and was last modified before the cutoff. Before removing anything the mark is
//! extended with the pointers committed meanwhile (a `register` of an old metadata file
//! would otherwise race); writes in flight are protected by the grace period, which is
//! at least an hour. A file the mark cannot read stops the collection with nothing
//! removed.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use iceberg::spec::TableMetadata;
use lh_api::{GcRequest, GcResponse};

use super::{Tables, snapshot};
use crate::error::{Error, Kind, Result};

/// The grace period when the request names none.
pub const DEFAULT_OLDER_THAN: Duration = Duration::from_secs(24 * 3600);
/// The shortest grace period accepted: a write in flight must keep its files.
pub const MIN_OLDER_THAN: Duration = Duration::from_secs(3600);
/// How many removed paths a response lists.
const LISTED: usize = 1000;

/// One collection at a time per server.
static RUNNING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn collect(tables: &Tables, req: &GcRequest) -> Result<GcResponse> {
    let older_than = req
        .older_than_secs
        .map_or(DEFAULT_OLDER_THAN, Duration::from_secs);
    if older_than < MIN_OLDER_THAN {
        return Err(Error::bad_request(
            "grace_too_short",
            format!(
                "a grace period of {} s is too short: files of writes in flight could go",
                older_than.as_secs()
            ),
        )
        .with_hint("use at least 3600 s (1h); the default is 24h"));
    }
    let _one = RUNNING.try_lock().map_err(|_| {
        Error::new(
            Kind::Conflict,
            "gc_running",
            "a garbage collection is already running on this server",
        )
    })?;
    let cutoff = SystemTime::now() - older_than;

    let mut mark = Mark::new(tables);
    let mut seen = tables.catalog.all_metadata_locations().await?;
    mark.add_tables(&seen).await?;
    let root = tables.warehouse.root().to_path_buf();
    let found = {
        let root = root.clone();
        tokio::task::spawn_blocking(move || scan(&root))
            .await
            .map_err(|e| Error::internal(format!("the warehouse scan failed: {e}")))??
    };
    // Pointers committed while the warehouse was scanned.
    let now = tables.catalog.all_metadata_locations().await?;
    let new: BTreeSet<String> = now.difference(&seen).cloned().collect();
    mark.add_tables(&new).await?;
    seen.extend(new);

    let mut resp = GcResponse {
        dry_run: req.dry_run,
        older_than_secs: older_than.as_secs(),
        table_versions: seen.len() as u64,
        scanned_files: found.len() as u64,
        live_files: 0,
        recent_files: 0,
        removed_files: 0,
        removed_bytes: 0,
        removed: Vec::new(),
    };
    let mut doomed = Vec::new();
    for f in found {
        if mark.live.contains(&f.path) {
            resp.live_files += 1;
        } else if f.modified > cutoff {
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
    if !req.dry_run && !doomed.is_empty() {
        tokio::task::spawn_blocking(move || remove(&root, &doomed))
            .await
            .map_err(|e| Error::internal(format!("the removal failed: {e}")))??;
    }
    tracing::info!(
        removed = resp.removed_files,
        bytes = resp.removed_bytes,
        live = resp.live_files,
        recent = resp.recent_files,
        dry_run = resp.dry_run,
        "garbage collection"
    );
    Ok(resp)
}

/// The files some table version reaches, as local paths.
struct Mark<'a> {
    tables: &'a Tables,
    live: HashSet<PathBuf>,
    lists: HashSet<String>,
    manifests: HashSet<String>,
}

impl<'a> Mark<'a> {
    fn new(tables: &'a Tables) -> Self {
        Mark {
            tables,
            live: HashSet::new(),
            lists: HashSet::new(),
            manifests: HashSet::new(),
        }
    }

    fn add(&mut self, url: &str) {
        // A location outside the warehouse is not ours to remove either way.
        if let Ok(p) = self.tables.warehouse.local_path(url) {
            self.live.insert(p);
        }
    }

    async fn add_tables(&mut self, locations: &BTreeSet<String>) -> Result<()> {
        for location in locations {
            self.add_table(location).await.map_err(|e| {
                Error::new(
                    Kind::Conflict,
                    "gc_unreadable",
                    format!(
                        "garbage collection stopped, nothing was removed: {}",
                        e.message
                    ),
                )
                .with_hint("a table version the catalog points at cannot be read; restore the file or drop the tables that use it")
            })?;
        }
        Ok(())
    }

    async fn add_table(&mut self, location: &str) -> Result<()> {
        let io = self.tables.warehouse.io();
        // Read directly: thousands of old versions would flood the metadata cache.
        let m = TableMetadata::read_from(io, location)
            .await
            .map_err(|e| Error::internal(format!("cannot read {location}: {e}")))?;
        self.add(location);
        for l in m.metadata_log() {
            self.add(&l.metadata_file);
        }
        for s in m.statistics_iter() {
            self.add(&s.statistics_path);
        }
        for s in m.partition_statistics_iter() {
            self.add(&s.statistics_path);
        }
        for snap in m.snapshots() {
            let list = snap.manifest_list();
            if !self.lists.insert(list.to_string()) {
                continue;
            }
            self.add(list);
            let manifests = snapshot::manifests_of(io, &m, list)
                .await
                .map_err(|e| Error::internal(format!("cannot read {list}: {}", e.message)))?;
            for mf in manifests {
                if !self.manifests.insert(mf.manifest_path.clone()) {
                    continue;
                }
                self.add(&mf.manifest_path);
                let manifest = mf.load_manifest(io).await.map_err(|e| {
                    Error::internal(format!("cannot read {}: {e}", mf.manifest_path))
                })?;
                for e in manifest.entries() {
                    self.add(e.file_path());
                }
            }
        }
        Ok(())
    }
}

struct Found {
    path: PathBuf,
    modified: SystemTime,
    bytes: u64,
}

/// Every regular file under `root` (symbolic links are neither followed nor counted).
fn scan(root: &Path) -> Result<Vec<Found>> {
    let mut out = Vec::new();
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
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                let meta = match entry.metadata() {
                    Ok(m) => m,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e.into()),
                };
                out.push(Found {
                    path: entry.path(),
                    modified: meta.modified()?,
                    bytes: meta.len(),
                });
            }
        }
    }
    Ok(out)
}

/// Removes the files, then the folders this left empty (up to, not including, `root`).
fn remove(root: &Path, files: &[Found]) -> Result<()> {
    let mut parents = BTreeSet::new();
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
        if let Some(p) = f.path.parent() {
            parents.insert(p.to_path_buf());
        }
    }
    // Deepest first; `remove_dir` fails on a folder that is not empty, which is kept.
    let mut parents: Vec<PathBuf> = parents.into_iter().collect();
    parents.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for mut dir in parents {
        while dir.starts_with(root) && dir != root && std::fs::remove_dir(&dir).is_ok() {
            match dir.parent() {
                Some(p) => dir = p.to_path_buf(),
                None => break,
            }
        }
    }
    Ok(())
}
