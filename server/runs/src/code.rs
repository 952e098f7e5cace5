//! Code snapshots: a project folder as uploaded (a tar archive), unpacked into a folder
//! named by the content hash of its files, so that a run's code is immutable and a
//! replay runs exactly the same files.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::error::{Code, Error, Result};

/// The most a project may weigh: lh uploads code, not data.
pub const MAX_PROJECT_BYTES: u64 = 64 << 20;
const MAX_FILES: usize = 20_000;

#[derive(Debug, Clone)]
pub struct CodeStore {
    root: PathBuf,
}

impl CodeStore {
    pub fn new(root: PathBuf) -> Result<CodeStore> {
        std::fs::create_dir_all(&root)?;
        Ok(CodeStore { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder of snapshot `hash`.
    pub fn path(&self, hash: &str) -> Result<PathBuf> {
        let p = self.root.join(hash);
        if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) || !p.is_dir() {
            return Err(Error::not_found(
                Code::CodeNotFound,
                format!("no code snapshot {hash}"),
            ));
        }
        Ok(p)
    }

    /// Removes the snapshots no run refers to (`keep`), once untouched for `grace` (an
    /// upload's run starts right after it), and unfinished unpackings as old. Returns how
    /// many went. Blocking.
    pub fn sweep(
        &self,
        keep: &std::collections::HashSet<String>,
        grace: std::time::Duration,
    ) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return 0;
        };
        let mut removed = 0;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let snapshot = name.len() == 64 && name.chars().all(|c| c.is_ascii_hexdigit());
            let unfinished = name.starts_with(".tmp-") || name.starts_with(".fetch-");
            if !(snapshot || unfinished) || keep.contains(&name) {
                continue;
            }
            let old = |p: &Path| {
                std::fs::metadata(p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age >= grace)
            };
            if !old(&e.path()) {
                continue;
            }
            // Out of the way first: an upload of the same code from now on unpacks it
            // anew; one that touched it just before is seen by the second look.
            let aside = self.root.join(format!(".sweep-{name}"));
            if std::fs::rename(e.path(), &aside).is_err() {
                continue;
            }
            if !old(&aside) {
                let _ = std::fs::rename(&aside, e.path());
                continue;
            }
            if std::fs::remove_dir_all(&aside).is_ok() || std::fs::remove_file(&aside).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// Unpacks a tar archive into a snapshot and returns its hash (blocking).
    pub fn store_tar(&self, tar: &Path) -> Result<String> {
        let file = std::fs::File::open(tar)?;
        let mut archive = tar::Archive::new(file);
        let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        let mut total = 0u64;
        let bad = |why: String| Error::bad_request(Code::BadProjectArchive, why);
        for entry in archive
            .entries()
            .map_err(|e| bad(format!("cannot read the project archive: {e}")))?
        {
            let mut entry =
                entry.map_err(|e| bad(format!("cannot read the project archive: {e}")))?;
            let kind = entry.header().entry_type();
            let path = entry
                .path()
                .map_err(|e| bad(format!("bad path in the archive: {e}")))?
                .into_owned();
            if kind.is_dir() {
                continue;
            }
            if !kind.is_file() {
                return Err(bad(format!(
                    "{} is not a regular file (links are not allowed)",
                    path.display()
                )));
            }
            if path
                .components()
                .any(|c| !matches!(c, Component::Normal(_)))
            {
                return Err(bad(format!(
                    "{} escapes the project folder",
                    path.display()
                )));
            }
            total += entry.size();
            if total > MAX_PROJECT_BYTES || files.len() >= MAX_FILES {
                return Err(bad(format!(
                    "the project is larger than {} MB or {MAX_FILES} files; lh uploads code, not data",
                    MAX_PROJECT_BYTES >> 20
                )));
            }
            let mut bytes = Vec::with_capacity(entry.size() as usize);
            entry.read_to_end(&mut bytes)?;
            files.push((path, bytes));
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        let mut h = blake3::Hasher::new();
        for (path, bytes) in &files {
            h.update(path.display().to_string().as_bytes());
            h.update(&[0]);
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
        let hash = h.finalize().to_hex().to_string();
        let dest = self.root.join(&hash);
        if dest.is_dir() {
            // Used again: the sweep measures its age from now.
            touch(&dest);
            return Ok(hash);
        }
        let tmp = self
            .root
            .join(format!(".tmp-{}", uuid::Uuid::new_v4().simple()));
        let result = (|| {
            for (path, bytes) in &files {
                let p = tmp.join(path);
                if let Some(d) = p.parent() {
                    std::fs::create_dir_all(d)?;
                }
                std::fs::write(&p, bytes)?;
            }
            std::fs::create_dir_all(&tmp)?;
            match std::fs::rename(&tmp, &dest) {
                Ok(()) => Ok(()),
                // The same snapshot stored meanwhile by another request.
                Err(_) if dest.is_dir() => {
                    let _ = std::fs::remove_dir_all(&tmp);
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e.into());
        }
        Ok(hash)
    }
}

/// Sets a folder's modification time to now.
fn touch(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;

    fn snapshot(store: &CodeStore, text: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let tar = dir.path().join("p.tar");
        let mut b = tar::Builder::new(std::fs::File::create(&tar).unwrap());
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "m.py", text.as_bytes()).unwrap();
        b.finish().unwrap();
        drop(b);
        store.store_tar(&tar).unwrap()
    }

    #[test]
    fn the_sweep_keeps_what_runs_use_and_what_is_recent() {
        let dir = tempfile::tempdir().unwrap();
        let store = CodeStore::new(dir.path().join("code")).unwrap();
        let used = snapshot(&store, "a = 1\n");
        let unused = snapshot(&store, "a = 2\n");
        let keep = HashSet::from([used.clone()]);
        assert_eq!(store.sweep(&keep, Duration::from_secs(3600)), 0, "recent");
        assert_eq!(store.sweep(&keep, Duration::ZERO), 1);
        assert!(store.path(&used).is_ok());
        assert!(store.path(&unused).is_err());
        // Uploading it again brings it back, fresh.
        assert_eq!(snapshot(&store, "a = 2\n"), unused);
        assert_eq!(store.sweep(&keep, Duration::from_secs(3600)), 0);
    }
}
