//! Folders over the wire, for engines that share no disk with the server: a folder
//! packed as a tar archive (owned by the workers' user), and an archive unpacked into a
//! folder, regular files and folders only, within a size.

use std::io::Read;
use std::path::{Component, Path};

/// The most files and folders an archive brought back may hold (each costs an inode
/// here, however small).
const MAX_ENTRIES: usize = 10_000;

/// The user (and group) that workers run as: what they get to own.
pub const WORKER_UID: u64 = 1000;

/// `dir`'s files and folders (links are left out: a worker would find a path of this
/// host), under `prefix` in the archive (none: at its root), owned by the workers' user.
pub fn pack(dir: &Path, prefix: Option<&str>) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
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

fn append_dir(b: &mut tar::Builder<Vec<u8>>, name: &Path) -> std::io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_mode(0o755);
    h.set_uid(WORKER_UID);
    h.set_gid(WORKER_UID);
    h.set_entry_type(tar::EntryType::Directory);
    b.append_data(&mut h, name, std::io::empty())
}

/// Unpacks `archive` into `dest`, taking the entries under `strip` (its first path
/// component, as the engine names the folder it sends) into `dest` itself: regular
/// files and folders only, no path leaving `dest`, at most `max_bytes` in all.
pub fn unpack(archive: impl Read, dest: &Path, strip: &str, max_bytes: u64) -> std::io::Result<()> {
    let mut a = tar::Archive::new(archive);
    let mut total = 0u64;
    let mut count = 0usize;
    std::fs::create_dir_all(dest)?;
    for entry in a.entries()? {
        let mut entry = entry?;
        count += 1;
        if count > MAX_ENTRIES {
            return Err(std::io::Error::other(format!(
                "the folder holds more than {MAX_ENTRIES} files and folders"
            )));
        }
        let path = entry.path()?.into_owned();
        let mut parts = path.components();
        match parts.next() {
            Some(Component::Normal(first)) if first == strip => {}
            _ => {
                return Err(std::io::Error::other(format!(
                    "{} is not in the folder {strip}",
                    path.display()
                )));
            }
        }
        let rel = parts.as_path();
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(std::io::Error::other(format!(
                "{} leaves the folder",
                path.display()
            )));
        }
        let out = dest.join(rel);
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            std::fs::create_dir_all(&out)?;
            continue;
        }
        if !kind.is_file() {
            // A link the function made: not brought back (it would name a path of
            // the engine's machine, or of this one).
            continue;
        }
        total = total.saturating_add(entry.size());
        if total > max_bytes {
            return Err(std::io::Error::other(format!(
                "the folder holds more than {} MiB",
                max_bytes >> 20
            )));
        }
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let _ = std::fs::remove_file(&out);
        let mut f = std::fs::File::create(&out)?;
        std::io::copy(&mut entry, &mut f)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_goes_and_comes_back_and_nothing_leaves_it() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("sub")).unwrap();
        std::fs::write(src.path().join("in.arrow"), b"arrow").unwrap();
        std::fs::write(src.path().join("sub/x"), b"x").unwrap();
        let tar = pack(src.path(), Some("inv-1")).unwrap();
        let dest = tempfile::tempdir().unwrap();
        unpack(&tar[..], dest.path(), "inv-1", 1 << 20).unwrap();
        assert_eq!(
            std::fs::read(dest.path().join("in.arrow")).unwrap(),
            b"arrow"
        );
        assert_eq!(std::fs::read(dest.path().join("sub/x")).unwrap(), b"x");
        // Too large, another folder, a path that climbs out: refused.
        assert!(unpack(&tar[..], dest.path(), "inv-1", 3).is_err());
        assert!(unpack(&tar[..], dest.path(), "inv-2", 1 << 20).is_err());
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        h.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"inv-1/../../x");
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        let evil = b.into_inner().unwrap();
        assert!(unpack(&evil[..], dest.path(), "inv-1", 1 << 20).is_err());
        // Too many entries (an inode bomb of empty files): refused.
        let many = tempfile::tempdir().unwrap();
        for i in 0..=MAX_ENTRIES {
            std::fs::write(many.path().join(i.to_string()), b"").unwrap();
        }
        let tar = pack(many.path(), Some("inv-1")).unwrap();
        let err = unpack(&tar[..], dest.path(), "inv-1", 1 << 20).unwrap_err();
        assert!(err.to_string().contains("more than 10000"), "{err}");
        // A link is left out when packing.
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("link")).unwrap();
        let tar = pack(src.path(), Some("inv-1")).unwrap();
        let again = tempfile::tempdir().unwrap();
        unpack(&tar[..], again.path(), "inv-1", 1 << 20).unwrap();
        assert!(!again.path().join("link").exists());
        assert!(again.path().join("in.arrow").exists());
    }
}
