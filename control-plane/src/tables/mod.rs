//! Tables: Iceberg tables in the warehouse, pointed at by the versioned catalog.
//!
//! A table's state at a commit is its pointer (metadata file, uuid, snapshot). Every
//! write produces a new Iceberg snapshot and metadata file, then one catalog commit on
//! the branch that expects the pointer the write started from: a concurrent write to
//! the same table is a conflict, never a lost update. Files are immutable and shared by
//! every ref that sees them; branching and merging copy none. `commit.rs` is the one
//! place tables change (lh's writes and the Iceberg REST catalog's alike); this file
//! reads them.

pub mod commit;
pub mod gc;
pub mod snapshot;
pub mod stats;
pub mod types;
pub mod write;

use std::collections::BTreeMap;
use std::sync::Arc;

use iceberg::spec::{DataContentType, DataFileFormat, TableMetadata};
use lh_catalog::{Catalog, Commit, TablePointer};

use crate::error::{Error, Result, pointer};
use crate::warehouse::Warehouse;

/// The files a table's current snapshot reads: its data files, and the delete files
/// (merge-on-read) that remove rows of them: position deletes (as Spark and Trino write
/// them) and equality deletes (as Flink's upserts do).
#[derive(Debug, Clone, Default)]
pub struct LiveFiles {
    pub data: Vec<LiveFile>,
    pub position_deletes: Vec<String>,
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
    /// Its data sequence number.
    pub sequence: i64,
    /// Its partition: spec id and partition tuple.
    pub partition: String,
}

/// A file's partition as a key: its spec id and partition values, with the values of a
/// promoted type (int to long, float to double) spelled as the wider type, so that files
/// written before and after a promotion compare equal.
fn partition_key(spec_id: i32, partition: &iceberg::spec::Struct) -> String {
    use iceberg::spec::{Literal, PrimitiveLiteral};
    let values: Vec<String> = partition
        .iter()
        .map(|v| match v {
            Some(Literal::Primitive(PrimitiveLiteral::Int(i))) => format!("{:?}", i64::from(*i)),
            Some(Literal::Primitive(PrimitiveLiteral::Float(f))) => {
                format!("{:?}", f64::from(f.into_inner()))
            }
            Some(Literal::Primitive(PrimitiveLiteral::Double(d))) => {
                format!("{:?}", d.into_inner())
            }
            Some(Literal::Primitive(PrimitiveLiteral::Long(l))) => format!("{l:?}"),
            other => format!("{other:?}"),
        })
        .collect();
    format!("{spec_id}:[{}]", values.join(", "))
}

/// An equality delete file: it removes the rows whose `field_ids` columns equal one of
/// its rows, from the data files of an older sequence number, in its partition (or in
/// every partition, when its spec is unpartitioned: `partition` is None).
#[derive(Debug, Clone)]
pub struct EqualityDelete {
    pub url: String,
    pub sequence: i64,
    pub partition: Option<String>,
    pub field_ids: Vec<i32>,
}

/// A table at a commit, with its metadata read.
#[derive(Debug, Clone)]
pub struct LoadedTable {
    pub name: String,
    pub pointer: TablePointer,
    pub metadata: Arc<TableMetadata>,
}

pub struct Tables {
    pub catalog: Catalog,
    pub warehouse: Warehouse,
    /// Metadata files never change once written: cache them by location.
    metadata: quick_cache::sync::Cache<String, Arc<TableMetadata>>,
    /// Nor do snapshots: cache their live files by (metadata location, snapshot).
    files: quick_cache::sync::Cache<(String, i64), Arc<LiveFiles>>,
    /// Nor data files: cache their columns (field ids, names, nesting) by path.
    columns: quick_cache::sync::Cache<std::path::PathBuf, Arc<Vec<stats::PhysicalColumn>>>,
    /// The folders this server's writes are filling: garbage collection leaves them be.
    pub in_flight: gc::InFlight,
    /// Held shared by every commit (see `commit.rs`: a REST commit or a registration may
    /// point at files of any age), exclusively by garbage collection while it removes
    /// files.
    pub commit_gate: tokio::sync::RwLock<()>,
}

impl Tables {
    pub fn new(catalog: Catalog, warehouse: Warehouse) -> Tables {
        Tables {
            catalog,
            warehouse,
            metadata: quick_cache::sync::Cache::new(10_000),
            files: quick_cache::sync::Cache::new(10_000),
            columns: quick_cache::sync::Cache::new(200_000),
            in_flight: gc::InFlight::default(),
            commit_gate: tokio::sync::RwLock::new(()),
        }
    }

    /// The metadata file at `location`.
    pub async fn metadata(&self, location: &str) -> Result<Arc<TableMetadata>> {
        if let Some(m) = self.metadata.get(location) {
            return Ok(m);
        }
        let m = TableMetadata::read_from(self.warehouse.io(), location)
            .await
            .map_err(|e| Error::internal(format!("cannot read table metadata {location}: {e}")))?;
        let m = Arc::new(m);
        self.metadata.insert(location.to_string(), m.clone());
        Ok(m)
    }

    /// The table `name` in `commit`, if it is there.
    pub async fn load(&self, commit: &Commit, name: &str) -> Result<Option<LoadedTable>> {
        let Some(p) = self.catalog.table_in(commit, name).await? else {
            return Ok(None);
        };
        let metadata = self.metadata(&p.metadata_location).await?;
        Ok(Some(LoadedTable {
            name: name.to_string(),
            pointer: p,
            metadata,
        }))
    }

    /// Like [`Tables::load`], with the catalog's not-found error when absent.
    pub async fn load_required(
        &self,
        commit: &Commit,
        name: &str,
        at: &str,
    ) -> Result<LoadedTable> {
        lh_catalog::names::validate_table_name(name)?;
        self.load(commit, name).await?.ok_or_else(|| {
            Error::not_found(
                "table_not_found",
                format!("table '{name}' not found at '{at}'"),
            )
            .with_hint(format!("`lh table ls --ref {at}` lists the tables"))
        })
    }

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
                "unsupported_table",
                format!("table '{}' has {what}, which lh cannot read yet", t.name),
            )
        };
        let io = self.warehouse.io();
        let schema = t.metadata.current_schema();
        let mut out = LiveFiles::default();
        for m in snapshot::manifests_of(io, &t.metadata, snapshot.manifest_list()).await? {
            let manifest = m.load_manifest(io).await?;
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
                let partition = partition_key(m.partition_spec_id, df.partition());
                match (e.content_type(), e.file_format()) {
                    (DataContentType::Data, DataFileFormat::Parquet) => out.data.push(LiveFile {
                        url: e.file_path().to_string(),
                        sequence,
                        partition,
                    }),
                    (DataContentType::PositionDeletes, DataFileFormat::Parquet) => {
                        out.position_deletes.push(e.file_path().to_string())
                    }
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

    /// The live data files of a table, grouped by their physical columns, as local paths
    /// (see `query::view_sql`). Footers are read once per file.
    pub(crate) async fn file_groups(&self, t: &LoadedTable) -> Result<crate::query::TableFiles> {
        let files = self.live_files(t).await?;
        let mut paths = Vec::with_capacity(files.data.len());
        let mut unknown = Vec::new();
        for f in &files.data {
            let p = self.warehouse.local_path(&f.url)?;
            if self.columns.get(&p).is_none() {
                unknown.push(p.clone());
            }
            paths.push(p);
        }
        let mut equality_deletes = Vec::with_capacity(files.equality_deletes.len());
        for d in &files.equality_deletes {
            let p = self.warehouse.local_path(&d.url)?;
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
        let mut groups: Vec<crate::query::FileGroup> = Vec::new();
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
        let position_deletes = files
            .position_deletes
            .iter()
            .map(|f| self.warehouse.local_path(f))
            .collect::<Result<_>>()?;
        let equality_deletes = equality_deletes
            .into_iter()
            .map(|(p, d)| {
                Ok(crate::query::EqualityDeleteFile {
                    columns: columns_of(&p)?,
                    path: p,
                    sequence: d.sequence,
                    partition: d.partition.clone(),
                    field_ids: d.field_ids.clone(),
                })
            })
            .collect::<Result<_>>()?;
        Ok(crate::query::TableFiles {
            groups,
            position_deletes,
            equality_deletes,
            data,
        })
    }

    /// What `lh table show` prints.
    pub async fn detail(&self, at: &str, name: &str) -> Result<lh_api::TableDetail> {
        let resolved = self.catalog.resolve(at).await?;
        let t = self.load_required(&resolved.commit, name, at).await?;
        let m = &t.metadata;
        let columns = m
            .current_schema()
            .as_struct()
            .fields()
            .iter()
            .map(|f| lh_api::Column {
                id: f.id,
                name: f.name.clone(),
                data_type: types::display_type(&f.field_type),
                required: f.required,
            })
            .collect();
        // Totals from the snapshot summary; counted from the manifests when a writer
        // left them out (DuckDB writes no total-files-size).
        let summary = |key: &str| -> Option<u64> {
            m.current_snapshot()
                .and_then(|s| s.summary().additional_properties.get(key))
                .and_then(|v| v.parse().ok())
        };
        let keys = [
            "total-records",
            "total-data-files",
            "total-files-size",
            "total-delete-files",
            "total-position-deletes",
        ];
        let counted = if m.current_snapshot().is_some() && keys.iter().any(|k| summary(k).is_none())
        {
            self.live_files(&t).await.ok().map(|f| f.totals)
        } else {
            None
        };
        let total = |key: &str| -> u64 {
            summary(key)
                .or_else(|| {
                    counted.map(|c| match key {
                        "total-records" => c.records,
                        "total-data-files" => c.data_files,
                        "total-files-size" => c.bytes,
                        "total-delete-files" => c.delete_files,
                        _ => c.position_deletes,
                    })
                })
                .unwrap_or(0)
        };
        let mut snapshots: Vec<lh_api::SnapshotInfo> = m
            .snapshots()
            .map(|s| lh_api::SnapshotInfo {
                snapshot_id: s.snapshot_id(),
                parent_id: s.parent_snapshot_id(),
                timestamp: s.timestamp().unwrap_or_default(),
                operation: s.summary().operation.as_str().to_string(),
                summary: s
                    .summary()
                    .additional_properties
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<BTreeMap<_, _>>(),
            })
            .collect();
        snapshots.sort_by(|a, b| {
            b.timestamp
                .cmp(&a.timestamp)
                .then(b.snapshot_id.cmp(&a.snapshot_id))
        });
        Ok(lh_api::TableDetail {
            name: name.to_string(),
            commit: resolved.commit.id.to_hex(),
            pointer: pointer(&t.pointer),
            location: m.location().to_string(),
            format_version: match m.format_version() {
                iceberg::spec::FormatVersion::V1 => 1,
                iceberg::spec::FormatVersion::V2 => 2,
                iceberg::spec::FormatVersion::V3 => 3,
            },
            columns,
            // Rows a position delete removes are not rows of the table.
            rows: total("total-records").saturating_sub(total("total-position-deletes")),
            files: total("total-data-files"),
            size_bytes: total("total-files-size"),
            delete_files: total("total-delete-files"),
            snapshots,
        })
    }
}

/// Writes go to a branch head; anything else is a clear error.
pub fn require_branch(at: &str, resolved: &lh_catalog::Resolved) -> Result<()> {
    if resolved.is_branch_head {
        return Ok(());
    }
    let what = match &resolved.reference {
        Some(r) if r.kind == lh_catalog::RefKind::Tag && !at.contains('@') => "a tag",
        _ => "a fixed commit",
    };
    Err(Error::bad_request(
        "not_a_branch",
        format!("'{at}' is {what}; writes go to a branch"),
    )
    .with_hint("create a branch from it: lh branch create NAME --from REF"))
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{Literal, Struct};

    use super::partition_key;

    #[test]
    fn a_promoted_partition_value_keys_as_its_wider_type() {
        let ints = Struct::from_iter([Some(Literal::int(7)), Some(Literal::float(1.5)), None]);
        let longs = Struct::from_iter([Some(Literal::long(7)), Some(Literal::double(1.5)), None]);
        assert_eq!(partition_key(0, &ints), partition_key(0, &longs));
        assert_ne!(partition_key(0, &ints), partition_key(1, &longs));
        let other = Struct::from_iter([Some(Literal::long(8)), Some(Literal::double(1.5)), None]);
        assert_ne!(partition_key(0, &other), partition_key(0, &longs));
        let text = Struct::from_iter([Some(Literal::string("7"))]);
        assert_ne!(
            partition_key(0, &text),
            partition_key(0, &Struct::from_iter([Some(Literal::long(7))]))
        );
    }
}
