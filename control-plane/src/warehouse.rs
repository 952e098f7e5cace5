//! The warehouse: where table files live. Today a local folder (`file://`); object
//! stores come later behind the same interface. Every table gets its own folder,
//! `<warehouse>/<namespace path>/<table>-<uuid>`, so that two branches creating a table
//! of the same name never share a file, and every write gets its own data folder.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use iceberg::io::FileIO;
use uuid::Uuid;

use crate::error::{Code, Error, Result};

#[derive(Debug, Clone)]
pub struct Warehouse {
    /// `file:///absolute/path`, no trailing slash.
    url: String,
    root: PathBuf,
    io: FileIO,
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
                        "unsupported warehouse '{location}': use a local folder (file:///path)"
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
            root,
            io: FileIO::new_with_fs(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn io(&self) -> &FileIO {
        &self.io
    }

    /// The folder of a new table.
    pub fn new_table_location(&self, table: &str, uuid: &Uuid) -> String {
        let mut parts: Vec<&str> = table.split('.').collect();
        let name = parts.pop().unwrap_or(table);
        format!(
            "{}/{}/{}-{}",
            self.url,
            parts.join("/"),
            name,
            uuid.simple()
        )
    }

    /// Makes a new table's `metadata/` and `data/` folders, for clients that write files
    /// there before their first commit and do not make folders (DuckDB).
    pub fn prepare_table_location(&self, location: &str) -> Result<()> {
        let root = self.local_path(location)?;
        std::fs::create_dir_all(root.join("metadata"))?;
        std::fs::create_dir_all(root.join("data"))?;
        Ok(())
    }

    /// The local path of a location inside the warehouse; refuses anything outside it.
    pub fn local_path(&self, location: &str) -> Result<PathBuf> {
        let p = file_url_path(location)
            .ok_or_else(|| Error::internal(format!("'{location}' is not a local file URL")))?;
        if !p.starts_with(&self.root)
            || p.components().any(|c| c == std::path::Component::ParentDir)
        {
            return Err(Error::internal(format!(
                "'{location}' is outside the warehouse {}",
                self.url
            )));
        }
        Ok(p)
    }

    /// Writes a new file durably (data, then its folder, reach the disk before the
    /// catalog can point at it).
    pub fn write_durable(&self, location: &str, bytes: &[u8]) -> Result<()> {
        let path = self.local_path(location)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = File::create(&path)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        Ok(())
    }
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
        let root = w.root().display().to_string();
        for inside in [
            format!("file://{root}/ns/t/data/a.parquet"),
            format!("file:{root}/ns/t/data/a.parquet"),
            format!("file://localhost{root}/ns/t/data/a.parquet"),
        ] {
            assert_eq!(
                w.local_path(&inside).unwrap(),
                w.root().join("ns/t/data/a.parquet"),
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
