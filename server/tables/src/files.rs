//! The files a table's snapshot reads, for its view: the live data and delete files
//! (from the manifests, cached by snapshot), and the same as local paths with each
//! Parquet file's physical columns (from its footer, cached by path), data files grouped
//! by those columns. The view's SQL itself is the query engine's (`query/view.rs`).

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use iceberg::spec::{DataContentType, DataFileFormat};

use super::stats::{self, PhysicalColumn};
use super::{LoadedTable, Tables, snapshot};
use crate::error::{Code, Error, Result};
use crate::warehouse::cache::Pins;

/// The files a table's current snapshot reads: its data files, and the delete files
/// (merge-on-read) that remove rows of them: position deletes (as Spark and Trino write
/// them) and equality deletes (as Flink's upserts do).
#[derive(Debug, Clone, Default)]
pub struct LiveFiles {
    pub data: Vec<LiveFile>,
    /// Position delete files: location and size.
    pub position_deletes: Vec<(String, u64)>,
    pub equality_deletes: Vec<EqualityDelete>,
    pub totals: FileTotals,
}

/// What the live files hold, counted from the manifests (for writers whose snapshot
/// summaries leave totals out, as DuckDB's does).
#[derive(Debug, Clone, Copy, Default)]
pub struct FileTotals {
    pub records: u64,
    pub data_files: u64,
    pub delete_files: u64,
    pub position_deletes: u64,
    pub bytes: u64,
}

/// A data file with what decides which equality deletes apply to it.
#[derive(Debug, Clone)]
pub struct LiveFile {
    pub url: String,
    /// Its size in bytes, as the manifest says.
    pub size: u64,
    /// Its data sequence number.
    pub sequence: i64,
    /// Its partition: spec id and partition tuple.
    pub partition: String,
    /// Its rows, as the manifest says.
    pub records: u64,
    /// Its manifest entry: partition values and column metrics, for pruning.
    pub file: Arc<iceberg::spec::DataFile>,
    pub spec_id: i32,
}

/// An equality delete file: it removes the rows whose `field_ids` columns equal one of
/// its rows, from the data files of an older sequence number, in its partition (or in
/// every partition, when its spec is unpartitioned: `partition` is None).
#[derive(Debug, Clone)]
pub struct EqualityDelete {
    pub url: String,
    pub size: u64,
    pub sequence: i64,
    pub partition: Option<String>,
    pub field_ids: Vec<i32>,
}

/// Data files with the same physical columns (Parquet field id to column name): files
/// written under one schema share a group.
pub type FileGroup = (Arc<Vec<PhysicalColumn>>, Vec<PathBuf>);

/// What a table's view reads: its data files, grouped by their physical columns, and
/// the delete files that remove rows of them; all as local paths.
#[derive(Debug, Default)]
pub struct TableFiles {
    pub groups: Vec<FileGroup>,
    pub position_deletes: Vec<PathBuf>,
    pub equality_deletes: Vec<EqualityDeleteFile>,
    /// Each data file's data sequence number and partition, when equality deletes need
    /// them.
    pub data: Vec<(PathBuf, i64, String)>,
    /// On S3, when position deletes name data files: each data file's local path with
    /// its object as `bucket/key` (what a delete's `file_path` names, scheme removed).
    pub objects: Vec<(PathBuf, String)>,
}

/// An equality delete file, with its columns (as a data file's) and what decides which
/// data files it applies to (see [`EqualityDelete`]).
#[derive(Debug)]
pub struct EqualityDeleteFile {
    pub path: PathBuf,
    pub columns: Arc<Vec<PhysicalColumn>>,
    pub sequence: i64,
    pub partition: Option<String>,
    pub field_ids: Vec<i32>,
}

impl Tables {
    /// The live files of the table's current snapshot. lh reads Parquet data files and
    /// Parquet position and equality delete files; a table with deletion vectors (format
    /// v3), equality deletes on nested fields, or files in another format is a clear
    /// error, never a read that would show deleted rows.
    pub async fn live_files(&self, t: &LoadedTable) -> Result<Arc<LiveFiles>> {
        let Some(snapshot) = t.metadata.current_snapshot() else {
            return Ok(Arc::new(LiveFiles::default()));
        };
        let key = (t.pointer.metadata_location.clone(), snapshot.snapshot_id());
        if let Some(f) = self.files.get(&key) {
            return Ok(f);
        }
        let unsupported = |what: String| {
            Error::bad_request(
                Code::UnsupportedTable,
                format!("table '{}' has {what}, which lh cannot read yet", t.name),
            )
        };
        let io = self.warehouse.io();
        let schema = t.metadata.current_schema();
        let mut out = LiveFiles::default();
        for m in snapshot::manifests_of(io, &t.metadata, snapshot.manifest_list()).await? {
            let manifest = self.manifest(&m).await?;
            for e in manifest.entries() {
                if !e.is_alive() {
                    continue;
                }
                let df = e.data_file();
                let totals = &mut out.totals;
                totals.bytes += df.file_size_in_bytes();
                match e.content_type() {
                    DataContentType::Data => {
                        totals.records += df.record_count();
                        totals.data_files += 1;
                    }
                    DataContentType::PositionDeletes => {
                        totals.position_deletes += df.record_count();
                        totals.delete_files += 1;
                    }
                    DataContentType::EqualityDeletes => totals.delete_files += 1,
                }
                let sequence = e.sequence_number().unwrap_or(0);
                let partition =
                    crate::partition::partition_key(m.partition_spec_id, df.partition());
                match (e.content_type(), e.file_format()) {
                    (DataContentType::Data, DataFileFormat::Parquet) => out.data.push(LiveFile {
                        url: e.file_path().to_string(),
                        size: df.file_size_in_bytes(),
                        sequence,
                        partition,
                        records: df.record_count(),
                        file: Arc::new(df.clone()),
                        spec_id: m.partition_spec_id,
                    }),
                    (DataContentType::PositionDeletes, DataFileFormat::Parquet) => out
                        .position_deletes
                        .push((e.file_path().to_string(), df.file_size_in_bytes())),
                    (DataContentType::PositionDeletes, DataFileFormat::Puffin) => {
                        return Err(unsupported("deletion vectors".into())
                            .with_hint("rewrite its data files (Spark: rewrite_data_files)"));
                    }
                    (DataContentType::EqualityDeletes, DataFileFormat::Parquet) => {
                        let field_ids = df.equality_ids().unwrap_or_default();
                        // Equality is on top-level primitive columns of the current schema.
                        let readable = !field_ids.is_empty()
                            && field_ids.iter().all(|id| {
                                schema
                                    .as_struct()
                                    .fields()
                                    .iter()
                                    .any(|f| f.id == *id && f.field_type.is_primitive())
                            });
                        if !readable {
                            return Err(unsupported(format!(
                                "equality deletes on fields {field_ids:?} (nested, dropped \
                                 or none)"
                            ))
                            .with_hint("rewrite its data files (Spark: rewrite_data_files)"));
                        }
                        let global = t
                            .metadata
                            .partition_spec_by_id(m.partition_spec_id)
                            .is_none_or(|spec| spec.is_unpartitioned());
                        out.equality_deletes.push(EqualityDelete {
                            url: e.file_path().to_string(),
                            size: df.file_size_in_bytes(),
                            sequence,
                            partition: (!global).then_some(partition),
                            field_ids,
                        });
                    }
                    (content, format) => {
                        return Err(unsupported(format!(
                            "{} files in {format} format",
                            match content {
                                DataContentType::Data => "data",
                                _ => "delete",
                            }
                        ))
                        .with_hint("lh reads Parquet files"));
                    }
                }
            }
        }
        let out = Arc::new(out);
        self.files.insert(key, out.clone());
        Ok(out)
    }

    /// The data files the table's current snapshot added (a write's own files, however
    /// often it was rebased), with the partition spec each was written with.
    pub async fn added_files(
        &self,
        t: &LoadedTable,
    ) -> Result<Vec<(iceberg::spec::DataFile, i32)>> {
        let Some(snapshot) = t.metadata.current_snapshot() else {
            return Ok(Vec::new());
        };
        let id = snapshot.snapshot_id();
        let io = self.warehouse.io();
        let mut out = Vec::new();
        for m in snapshot::manifests_of(io, &t.metadata, snapshot.manifest_list()).await? {
            if m.added_snapshot_id != id || m.content != iceberg::spec::ManifestContentType::Data {
                continue;
            }
            let manifest = m.load_manifest(io).await?;
            for e in manifest.entries() {
                if e.status() == iceberg::spec::ManifestStatus::Added
                    && e.snapshot_id() == Some(id)
                    && e.content_type() == DataContentType::Data
                {
                    out.push((e.data_file().clone(), m.partition_spec_id));
                }
            }
        }
        Ok(out)
    }

    /// Makes every live file of a table readable on this machine (for an S3
    /// warehouse: in the read cache, fetched as need be, several at once) and keeps it
    /// so while `pins` lives: a view made earlier reads these paths.
    pub async fn pin_files(&self, t: &LoadedTable, pins: &mut Pins) -> Result<()> {
        if self.warehouse.cache().is_none() {
            return Ok(());
        }
        let files = self.live_files(t).await?;
        self.readable_all(&files, pins).await?;
        Ok(())
    }

    /// The local paths of the live files: data files, position deletes, equality
    /// deletes, in that order.
    async fn readable_all(&self, files: &LiveFiles, pins: &mut Pins) -> Result<Vec<PathBuf>> {
        let all: Vec<(&str, u64)> = files
            .data
            .iter()
            .map(|f| (f.url.as_str(), f.size))
            .chain(files.position_deletes.iter().map(|(u, s)| (u.as_str(), *s)))
            .chain(
                files
                    .equality_deletes
                    .iter()
                    .map(|d| (d.url.as_str(), d.size)),
            )
            .collect();
        if self.warehouse.cache().is_none() {
            return all
                .iter()
                .map(|(u, _)| self.warehouse.local_path(u))
                .collect();
        }
        let fetches: Vec<_> = all
            .into_iter()
            .map(|(u, size)| {
                let (warehouse, u) = (self.warehouse.clone(), u.to_string());
                async move {
                    let mut p = Pins::none();
                    let path = warehouse.readable(&u, size, &mut p).await?;
                    Ok::<_, Error>((path, p))
                }
            })
            .collect();
        let fetched: Vec<Result<(PathBuf, Pins)>> =
            futures::stream::iter(fetches).buffered(8).collect().await;
        let mut out = Vec::with_capacity(fetched.len());
        for f in fetched {
            let (path, p) = f?;
            pins.extend(p);
            out.push(path);
        }
        Ok(out)
    }

    /// The live data files of a table, grouped by their physical columns, as local paths:
    /// what its view reads, readable while `pins` lives. Footers are read once per file.
    pub async fn file_groups(&self, t: &LoadedTable, pins: &mut Pins) -> Result<TableFiles> {
        self.file_groups_where(t, pins, |_| true).await
    }

    /// [`file_groups`](Self::file_groups) of the data files `keep` takes (with every
    /// delete file): a compaction's, or a query's the partition values and column
    /// bounds leave. Only those are fetched into the read cache.
    pub async fn file_groups_where(
        &self,
        t: &LoadedTable,
        pins: &mut Pins,
        keep: impl Fn(&LiveFile) -> bool,
    ) -> Result<TableFiles> {
        let all = self.live_files(t).await?;
        let files = if all.data.iter().all(&keep) {
            all
        } else {
            Arc::new(LiveFiles {
                data: all.data.iter().filter(|f| keep(f)).cloned().collect(),
                ..(*all).clone()
            })
        };
        let local = self.readable_all(&files, pins).await?;
        let (data_paths, rest) = local.split_at(files.data.len());
        let (position_paths, equality_paths) = rest.split_at(files.position_deletes.len());
        let mut paths = Vec::with_capacity(files.data.len());
        let mut unknown = Vec::new();
        for p in data_paths {
            let p = p.clone();
            if self.columns.get(&p).is_none() {
                unknown.push(p.clone());
            }
            paths.push(p);
        }
        let mut equality_deletes = Vec::with_capacity(files.equality_deletes.len());
        for (d, p) in files.equality_deletes.iter().zip(equality_paths) {
            let p = p.clone();
            if self.columns.get(&p).is_none() {
                unknown.push(p.clone());
            }
            equality_deletes.push((p, d));
        }
        if !unknown.is_empty() {
            let read = tokio::task::spawn_blocking(move || {
                unknown
                    .into_iter()
                    .map(|p| stats::physical_columns(&p).map(|c| (p, c)))
                    .collect::<Result<Vec<_>>>()
            })
            .await
            .map_err(|e| Error::internal(format!("footer task failed: {e}")))??;
            for (p, c) in read {
                self.columns.insert(p, Arc::new(c));
            }
        }
        let columns_of = |p: &std::path::Path| {
            self.columns
                .get(p)
                .ok_or_else(|| Error::internal("footer cache lost an entry"))
        };
        let mut groups: Vec<FileGroup> = Vec::new();
        let mut data = Vec::new();
        for (p, f) in paths.into_iter().zip(&files.data) {
            let cols = columns_of(&p)?;
            if !files.equality_deletes.is_empty() {
                data.push((p.clone(), f.sequence, f.partition.clone()));
            }
            match groups.iter_mut().find(|(c, _)| *c == cols) {
                Some((_, files)) => files.push(p),
                None => groups.push((cols, vec![p])),
            }
        }
        let position_deletes = position_paths.to_vec();
        let objects = match self.warehouse.s3() {
            Some(b) if !position_deletes.is_empty() => data_paths
                .iter()
                .zip(&files.data)
                .filter_map(|(p, f)| {
                    let key = self.warehouse.key(&f.url).ok()?;
                    let prefix = &b.settings.prefix;
                    let full = if prefix.is_empty() {
                        key
                    } else {
                        format!("{prefix}/{key}")
                    };
                    Some((p.clone(), format!("{}/{full}", b.settings.bucket)))
                })
                .collect(),
            _ => Vec::new(),
        };
        let equality_deletes = equality_deletes
            .into_iter()
            .map(|(p, d)| {
                Ok(EqualityDeleteFile {
                    columns: columns_of(&p)?,
                    path: p,
                    sequence: d.sequence,
                    partition: d.partition.clone(),
                    field_ids: d.field_ids.clone(),
                })
            })
            .collect::<Result<_>>()?;
        Ok(TableFiles {
            groups,
            position_deletes,
            equality_deletes,
            data,
            objects,
        })
    }
}
