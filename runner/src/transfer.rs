//! Folders over the wire, for engines that share no disk with the server.
//!
//! - A cache volume (an environment, a code snapshot) is filled once from a tar archive
//!   streamed as it is packed ([`packed`]), its files owned by the workers' user.
//! - An invocation's folder crosses the worker's own channel: the request line lists the
//!   folder's files ([`listing`]) and their bytes follow on the worker's stdin; the answer
//!   line lists the files the call wrote and their bytes follow on its stdout, landing in
//!   the invocation's folder here ([`Landing`]): regular files only, no path leaving the
//!   folder, within the call's disk limit.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The most files a folder may send over a worker's channel, either way (each costs an
/// inode where it lands, however small).
const MAX_ENTRIES: usize = 10_000;

/// The user (and group) that workers run as: what they get to own.
pub const WORKER_UID: u64 = 1000;

/// `dir`'s files and folders (links are left out: a worker would find a path of this
/// host), under `prefix` in the archive (none: at its root), owned by the workers' user.
pub fn pack<W: Write>(dir: &Path, prefix: Option<&str>, into: W) -> std::io::Result<W> {
    let mut b = tar::Builder::new(into);
    b.mode(tar::HeaderMode::Deterministic);
    let mut stack = vec![dir.to_path_buf()];
    if let Some(p) = prefix {
        append_dir(&mut b, Path::new(p))?;
    }
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path.strip_prefix(dir).map_err(std::io::Error::other)?;
            let name = match prefix {
                Some(p) => Path::new(p).join(rel),
                None => rel.to_path_buf(),
            };
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                append_dir(&mut b, &name)?;
                stack.push(path);
            } else if meta.is_file() {
                use std::os::unix::fs::PermissionsExt;
                let mut h = tar::Header::new_gnu();
                h.set_size(meta.len());
                h.set_mode(meta.permissions().mode() & 0o777);
                h.set_uid(WORKER_UID);
                h.set_gid(WORKER_UID);
                h.set_entry_type(tar::EntryType::Regular);
                b.append_data(&mut h, &name, std::fs::File::open(&path)?)?;
            }
            // Links are left out: in the worker they would name a path of this host.
        }
    }
    b.into_inner()
}

fn append_dir<W: Write>(b: &mut tar::Builder<W>, name: &Path) -> std::io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_mode(0o755);
    h.set_uid(WORKER_UID);
    h.set_gid(WORKER_UID);
    h.set_entry_type(tar::EntryType::Directory);
    b.append_data(&mut h, name, std::io::empty())
}

/// The archive of `dir` (as [`pack`] makes it), produced on a blocking thread as it is
/// read: an environment of any size crosses without being held in memory.
pub fn packed(
    dir: PathBuf,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let w = Chunks {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
        };
        let done = pack(&dir, None, w).and_then(|mut w| w.flush());
        if let Err(e) = done {
            let _ = tx.blocking_send(Err(e));
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}

const CHUNK: usize = 256 << 10;

/// A writer that hands what it is given to a channel in chunks.
struct Chunks {
    tx: tokio::sync::mpsc::Sender<std::io::Result<bytes::Bytes>>,
    buf: Vec<u8>,
}

impl Write for Chunks {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(chunk.into()))
            .map_err(|_| std::io::Error::other("the receiver of the archive is gone"))
    }
}

/// One file crossing a worker's channel: its path inside the invocation's folder (`/`
/// separated) and its size; its bytes follow the line that lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub path: String,
    pub size: u64,
}

/// The regular files under `dir` (links and other kinds are left out: in the worker they
/// would name a path of this host), with where they are here.
pub fn listing(dir: &Path) -> std::io::Result<Vec<(Sent, PathBuf)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let rel = path.strip_prefix(dir).map_err(std::io::Error::other)?;
                let Some(rel) = rel.to_str() else {
                    return Err(std::io::Error::other(format!(
                        "{} is not a UTF-8 name",
                        path.display()
                    )));
                };
                out.push((
                    Sent {
                        path: rel.to_string(),
                        size: meta.len(),
                    },
                    path,
                ));
            }
        }
        if out.len() > MAX_ENTRIES {
            return Err(std::io::Error::other(format!(
                "the folder holds more than {MAX_ENTRIES} files"
            )));
        }
    }
    Ok(out)
}

/// Files arriving over a worker's channel into a folder of this host: the answer line
/// listed them, and their bytes come in order. Made only from a listing that stays in
/// the folder, holds at most [`MAX_ENTRIES`] files and `max_bytes` in all.
#[derive(Debug)]
pub struct Landing {
    dir: PathBuf,
    files: std::collections::VecDeque<(PathBuf, u64)>,
    current: Option<(Option<std::fs::File>, u64)>,
    /// The first write that failed (the bytes are still taken, to keep the channel in
    /// step).
    error: Option<String>,
}

impl Landing {
    pub fn new(dir: &Path, files: Vec<Sent>, max_bytes: u64) -> Result<Landing, String> {
        if files.len() > MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} files"));
        }
        let mut total = 0u64;
        let mut list = std::collections::VecDeque::new();
        for f in files {
            let rel = Path::new(&f.path);
            let mut parts = rel.components().peekable();
            if parts.peek().is_none() || !parts.all(|c| matches!(c, Component::Normal(_))) {
                return Err(format!("the path '{}' leaves the folder", f.path));
            }
            total = total.saturating_add(f.size);
            if total > max_bytes {
                return Err(format!("more than {} MiB", max_bytes >> 20));
            }
            list.push_back((dir.join(rel), f.size));
        }
        Ok(Landing {
            dir: dir.to_path_buf(),
            files: list,
            current: None,
            error: None,
        })
    }

    /// Takes bytes of the files, in order; how many it took (the rest belong to what
    /// follows the last file).
    pub fn take(&mut self, mut bytes: &[u8]) -> usize {
        let given = bytes.len();
        loop {
            if self.current.is_none() {
                let Some((path, size)) = self.files.pop_front() else {
                    break;
                };
                let file = self.open(&path);
                self.current = Some((file, size));
            }
            let Some((file, left)) = self.current.as_mut() else {
                break;
            };
            let n = (*left).min(bytes.len() as u64) as usize;
            if let Some(f) = file
                && let Err(e) = f.write_all(&bytes[..n])
            {
                self.error.get_or_insert_with(|| e.to_string());
                *file = None;
            }
            *left -= n as u64;
            bytes = &bytes[n..];
            if *left > 0 {
                break;
            }
            self.current = None;
        }
        given - bytes.len()
    }

    /// Whether every file arrived.
    pub fn done(&self) -> bool {
        self.current.is_none() && self.files.is_empty()
    }

    /// What became of the files: an error if one could not be written.
    pub fn finish(self) -> Result<(), String> {
        match self.error {
            None => Ok(()),
            Some(e) => Err(format!("cannot write into {}: {e}", self.dir.display())),
        }
    }

    fn open(&mut self, path: &Path) -> Option<std::fs::File> {
        if !self.dir.is_dir() {
            // The call was given up and its folder removed: nothing is made again.
            self.error
                .get_or_insert_with(|| "the folder is gone".to_string());
            return None;
        }
        let made = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => std::fs::File::create(path),
            });
        match made {
            Ok(f) => Some(f),
            Err(e) => {
                self.error.get_or_insert_with(|| e.to_string());
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn land(dir: &Path, files: Vec<Sent>, max: u64) -> Result<Landing, String> {
        Landing::new(dir, files, max)
    }

    #[test]
    fn files_land_in_their_folder_and_nothing_leaves_it() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("sub")).unwrap();
        std::fs::write(src.path().join("in.arrow"), b"arrow").unwrap();
        std::fs::write(src.path().join("sub/x"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("link")).unwrap();
        let listed = listing(src.path()).unwrap();
        let sent: Vec<Sent> = listed.iter().map(|(s, _)| s.clone()).collect();
        assert_eq!(
            sent,
            vec![
                Sent {
                    path: "in.arrow".into(),
                    size: 5
                },
                Sent {
                    path: "sub/x".into(),
                    size: 1
                },
            ],
            "a link is left out"
        );
        // The bytes arrive in pieces of any size, and what follows is not taken.
        let dest = tempfile::tempdir().unwrap();
        let mut l = land(dest.path(), sent.clone(), 1 << 20).unwrap();
        assert_eq!(l.take(b"arr"), 3);
        assert!(!l.done());
        assert_eq!(l.take(b"owx{\"next\"}"), 3);
        assert!(l.done());
        l.finish().unwrap();
        assert_eq!(
            std::fs::read(dest.path().join("in.arrow")).unwrap(),
            b"arrow"
        );
        assert_eq!(std::fs::read(dest.path().join("sub/x")).unwrap(), b"x");
        // Too large, a path that climbs out, an absolute one, an empty one: refused.
        assert!(land(dest.path(), sent, 5).is_err());
        for evil in ["../x", "a/../../x", "/etc/x", ""] {
            let files = vec![Sent {
                path: evil.into(),
                size: 1,
            }];
            assert!(land(dest.path(), files, 1 << 20).is_err(), "{evil}");
        }
        // Too many files (an inode bomb of empty files): refused.
        let many = (0..=MAX_ENTRIES)
            .map(|i| Sent {
                path: i.to_string(),
                size: 0,
            })
            .collect();
        assert!(
            land(dest.path(), many, 1 << 20)
                .unwrap_err()
                .contains("more than 10000")
        );
        // A file that cannot be written: the bytes are still taken, and it is said.
        std::fs::create_dir(dest.path().join("taken")).unwrap();
        std::fs::write(dest.path().join("taken/f"), b"").unwrap();
        let files = vec![Sent {
            path: "taken".into(),
            size: 2,
        }];
        let mut l = land(dest.path(), files, 1 << 20).unwrap();
        assert_eq!(l.take(b"ab"), 2);
        assert!(l.done());
        assert!(l.finish().is_err());
    }

    #[tokio::test]
    async fn an_archive_streams_as_it_is_packed() {
        use futures::StreamExt;
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("big"), vec![7u8; 3 << 20]).unwrap();
        let chunks: Vec<_> = packed(src.path().to_path_buf()).collect().await;
        assert!(chunks.len() > 4, "in chunks, not one piece");
        let tar: Vec<u8> = chunks
            .into_iter()
            .flat_map(|c| c.unwrap().to_vec())
            .collect();
        let mut a = tar::Archive::new(&tar[..]);
        let e = a.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(e.path().unwrap().to_str(), Some("big"));
        assert_eq!(e.header().size().unwrap(), 3 << 20);
        assert_eq!(e.header().uid().unwrap(), WORKER_UID);
        let gone = packed(src.path().join("missing")).collect::<Vec<_>>().await;
        assert!(gone.last().unwrap().is_err());
    }
}
