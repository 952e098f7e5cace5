//! Code snapshots: a project folder as uploaded (a tar archive), unpacked into a folder
//! named by the content hash of its files, so that a run's code is immutable and a
//! replay runs exactly the same files.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::error::{Code, Error, Result};

/// The most a project may weigh: lh uploads code, not data.
pub const MAX_PROJECT_BYTES: u64 = 64 << 20;
const MAX_FILES: usize = 20_000;

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
