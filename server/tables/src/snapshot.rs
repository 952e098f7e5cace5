//! Writing Iceberg snapshots: the manifest of added files, a manifest of removed ones
//! for an overwrite, the manifest list, the snapshot and its summary, and the updates
//! that make it current (which `commit.rs` applies). (iceberg-rust 0.10 has a fast
//! append only; lh also needs overwrite, so it produces snapshots itself with the
//! crate's public writers.)

use std::collections::{BTreeSet, HashMap};

use iceberg::TableUpdate;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, Datum, FormatVersion, Literal, MAIN_BRANCH, ManifestContentType, ManifestFile,
    ManifestList, ManifestListWriter, ManifestWriterBuilder, Operation, PrimitiveLiteral,
    PrimitiveType, Snapshot, SnapshotReference, SnapshotRetention, SnapshotSummaryCollector,
    Struct, Summary, TableMetadata,
};
use uuid::Uuid;

use crate::error::{Code, Error, Result};

/// What a new snapshot does to the table's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotOp {
    /// Keep every live file, add the new ones.
    Append,
    /// Replace every live file by the new ones.
    Overwrite,
    /// Replace the live data files of these partitions (keys of
    /// `partition::partition_key`, and their values in the default spec) by the new ones,
    /// keep the rest: Iceberg's dynamic overwrite.
    ReplacePartitions {
        keys: BTreeSet<String>,
        values: Vec<Struct>,
    },
    /// Replace these live data files (locations) by the new ones, which hold the same
    /// rows (a compaction); with `deletes`, every delete file goes too (the new files
    /// hold the rows they left).
    Rewrite {
        files: BTreeSet<String>,
        deletes: bool,
        /// The delete files the rows were read with: any other one (added since)
        /// conflicts, since the new files would escape it.
        delete_files: BTreeSet<String>,
    },
}

/// Whether a manifest may list live files (its counts say so, or it has none).
fn has_live_files(m: &ManifestFile) -> bool {
    !matches!(
        (m.added_files_count, m.existing_files_count),
        (Some(0), Some(0))
    )
}

/// Whether manifest `m` (of the default spec, whose partition field types are `types`)
/// may list a file of one of the partitions `values`, by the bounds of its partition
/// field summaries: a manifest that cannot is carried on without being read (a dynamic
/// overwrite of one day of a table of many reads one manifest, not all). True whenever
/// the summaries cannot tell (missing, unreadable, floating point).
fn may_hold(m: &ManifestFile, values: &[Struct], types: &[PrimitiveType]) -> bool {
    let Some(summaries) = m.partitions.as_ref() else {
        return true;
    };
    if summaries.len() != types.len() {
        return true;
    }
    let bound = |b: Option<&Vec<u8>>, t: &PrimitiveType| {
        b.and_then(|b| Datum::try_from_bytes(b, t.clone()).ok())
            .map(|d| d.literal().clone())
    };
    let within = |field: usize, value: Option<&Literal>| -> bool {
        let (s, t) = (&summaries[field], &types[field]);
        let Some(Literal::Primitive(v)) = value else {
            // A null partition value: only in a manifest that says it holds one.
            return value.is_some() || s.contains_null;
        };
        // Floating point (NaN), and UUIDs: Java's writers order them as signed
        // numbers (apache/iceberg#14216), so their bounds can exclude values within.
        if matches!(
            v,
            PrimitiveLiteral::Float(_) | PrimitiveLiteral::Double(_) | PrimitiveLiteral::UInt128(_)
        ) {
            return true;
        }
        let (Some(lo), Some(hi)) = (
            bound(s.lower_bound.as_deref(), t),
            bound(s.upper_bound.as_deref(), t),
        ) else {
            return true;
        };
        let same = |x: &PrimitiveLiteral| std::mem::discriminant(x) == std::mem::discriminant(v);
        // Bounds out of order were written by some other ordering: they tell nothing.
        if !same(&lo) || !same(&hi) || lo > hi {
            return true;
        }
        lo <= *v && *v <= hi
    };
    values.iter().any(|p| {
        p.fields().len() != types.len() || p.iter().enumerate().all(|(i, value)| within(i, value))
    })
}

/// The manifests of the table's current snapshot (none for an empty table).
pub async fn current_manifests(io: &FileIO, metadata: &TableMetadata) -> Result<Vec<ManifestFile>> {
    let Some(snapshot) = metadata.current_snapshot() else {
        return Ok(Vec::new());
    };
    manifests_of(io, metadata, snapshot.manifest_list()).await
}

pub async fn manifests_of(
    io: &FileIO,
    metadata: &TableMetadata,
    manifest_list: &str,
) -> Result<Vec<ManifestFile>> {
    let bytes = io.new_input(manifest_list)?.read().await?;
    let list = ManifestList::parse_with_version(&bytes, metadata.format_version())?;
    Ok(list.consume_entries().into_iter().collect())
}

/// A produced snapshot: the table updates that add it and make it current (not yet
/// applied), and the files to write.
pub struct Produced {
    pub updates: Vec<TableUpdate>,
    /// The new manifests and the manifest list (location and bytes), written by no one
    /// yet: the commit writes them with the metadata file that names them, at once.
    pub files: Vec<(String, bytes::Bytes)>,
}

/// lh writes Iceberg v2 tables whose partition spec it can compute (see
/// `partition::Partitioner`); any other table, made by another engine through the REST
/// catalog, is refused before anything is written, rather than given files its readers
/// would misplace.
pub fn check_writable(name: &str, metadata: &TableMetadata) -> Result<()> {
    if metadata.format_version() != FormatVersion::V2 {
        return Err(Error::bad_request(
            Code::UnsupportedTable,
            format!(
                "lh writes Iceberg format v2 tables; {name} is {}",
                metadata.format_version()
            ),
        )
        .with_hint("write it with the engine that made it, through lh's Iceberg REST catalog"));
    }
    super::partition::Partitioner::new(
        metadata.default_partition_spec(),
        metadata.current_schema(),
    )
    .map_err(|e| {
        let message = format!("{name}: {}", e.message);
        let hint = e.hint.clone();
        let mut e = Error::bad_request(Code::UnsupportedTable, message);
        if let Some(h) = hint {
            e = e.with_hint(h);
        }
        e
    })?;
    Ok(())
}

/// Produces a new snapshot of `base` and returns the updates that make it the current
/// snapshot of the table's `main` branch, with its new manifests and manifest list made
/// in memory (`Produced::files`); the caller writes them with the metadata file and
/// commits the updates.
pub async fn produce(
    io: &FileIO,
    base: &TableMetadata,
    op: SnapshotOp,
    added: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> Result<Produced> {
    check_writable("the table", base)?;
    let snapshot_id = fresh_snapshot_id(base);
    let seq = base.next_sequence_number();
    let commit = Uuid::new_v4();
    let meta_dir = format!("{}/metadata", base.location().trim_end_matches('/'));
    let schema = base.current_schema().clone();
    let spec = base.default_partition_spec().as_ref().clone();

    let previous = current_manifests(io, base).await?;
    // What this snapshot adds is made in memory (see `Produced::files`).
    let (out, captured) = crate::warehouse::io::capture_io();
    let mut summary = SnapshotSummaryCollector::default();
    let mut manifests: Vec<ManifestFile> = Vec::new();
    let mut pending = Vec::new();
    // What a replace removes: counted for the totals.
    let (mut removed_records, mut removed_bytes, mut removed_files) = (0u64, 0u64, 0u64);
    let default_spec = base.default_partition_spec_id();
    // The default spec's partition field types (none when they cannot be known).
    let default_types: Option<Vec<PrimitiveType>> = base
        .default_partition_spec()
        .partition_type(&schema)
        .ok()
        .and_then(|t| {
            t.fields()
                .iter()
                .map(|f| f.field_type.as_primitive_type().cloned())
                .collect()
        });
    match &op {
        // A manifest whose entries all went (a replace's record of what it removed) is
        // not carried on: readers of this snapshot skip it, and it would keep those
        // files reachable (from `lh gc`) for as long as the table lives.
        SnapshotOp::Append => manifests.extend(previous.into_iter().filter(has_live_files)),
        SnapshotOp::Overwrite
        | SnapshotOp::ReplacePartitions { .. }
        | SnapshotOp::Rewrite { .. } => {
            // Record every file replaced as deleted, so that readers of changes see them
            // go: in a manifest of the partition spec it was written with, next to the
            // files of its manifest that stay. An overwrite drops delete files with the
            // rows they applied to; a partition replace keeps them (they apply to older
            // files only, by sequence number, or name files gone).
            let mut writers = std::collections::BTreeMap::new();
            let mut found = 0usize;
            for m in previous {
                if m.content != ManifestContentType::Data {
                    if let SnapshotOp::Rewrite { delete_files, .. } = &op {
                        let manifest = m.load_manifest(io).await?;
                        if manifest
                            .entries()
                            .iter()
                            .filter(|e| e.is_alive())
                            .any(|e| !delete_files.contains(e.file_path()))
                        {
                            return Err(Error::new(
                                crate::error::Kind::Conflict,
                                Code::Conflict,
                                "rows were deleted from the table while it was compacted; nothing was written",
                            )
                            .with_hint("compact again"));
                        }
                    }
                    match &op {
                        SnapshotOp::ReplacePartitions { .. }
                        | SnapshotOp::Rewrite { deletes: false, .. } => manifests.push(m),
                        SnapshotOp::Rewrite { deletes: true, .. } => {
                            // Recorded as deleted, for readers of changes.
                            let spec_id = m.partition_spec_id;
                            let file_spec =
                                base.partition_spec_by_id(spec_id).cloned().ok_or_else(|| {
                                    Error::internal(format!(
                                        "manifest {} names an unknown partition spec {spec_id}",
                                        m.manifest_path
                                    ))
                                })?;
                            let manifest = m.load_manifest(io).await?;
                            let out = out.new_output(format!(
                                "{meta_dir}/{commit}-m-deletes-gone-{}.avro",
                                pending.len()
                            ))?;
                            let mut w = ManifestWriterBuilder::new(
                                out,
                                Some(snapshot_id),
                                schema.clone(),
                                file_spec.as_ref().clone(),
                            )
                            .build_v2_deletes();
                            for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                                w.add_delete_file(
                                    entry.data_file().clone(),
                                    entry.sequence_number().unwrap_or(0),
                                    entry.file_sequence_number.or(entry.sequence_number()),
                                )?;
                            }
                            pending.push(w);
                        }
                        _ => {}
                    }
                    continue;
                }
                let spec_id = m.partition_spec_id;
                let file_spec = base.partition_spec_by_id(spec_id).cloned().ok_or_else(|| {
                    Error::internal(format!(
                        "manifest {} names an unknown partition spec {spec_id}",
                        m.manifest_path
                    ))
                })?;
                // A manifest whose partition bounds exclude every replaced partition
                // stays as it is, unread.
                if let (SnapshotOp::ReplacePartitions { values, .. }, Some(types)) =
                    (&op, &default_types)
                    && spec_id == default_spec
                    && !may_hold(&m, values, types)
                {
                    manifests.push(m);
                    continue;
                }
                let manifest = m.load_manifest(io).await?;
                let replaced = |df: &DataFile| match &op {
                    SnapshotOp::ReplacePartitions { keys, .. } => {
                        keys.contains(&super::partition::partition_key(spec_id, df.partition()))
                    }
                    SnapshotOp::Rewrite { files, .. } => files.contains(df.file_path()),
                    _ => true,
                };
                let live: Vec<_> = manifest.entries().iter().filter(|e| e.is_alive()).collect();
                if live.is_empty() {
                    continue;
                }
                // Partitions of an older spec cannot be told apart by the new one's values.
                if spec_id != default_spec
                    && !live.is_empty()
                    && matches!(op, SnapshotOp::ReplacePartitions { .. })
                {
                    return Err(Error::bad_request(
                        Code::UnsupportedTable,
                        "the table holds files of an older partition spec; replacing partitions would keep their rows",
                    )
                    .with_remedy(lh_api::remedy::Remedy::ReplaceOrCompact));
                }
                if !live.iter().any(|e| replaced(e.data_file())) {
                    manifests.push(m);
                    continue;
                }
                if spec_id != default_spec && matches!(op, SnapshotOp::ReplacePartitions { .. }) {
                    return Err(Error::bad_request(
                        Code::UnsupportedTable,
                        "the partitions to replace hold files of an older partition spec",
                    )
                    .with_remedy(lh_api::remedy::Remedy::ReplaceOrCompact));
                }
                let w = match writers.entry(spec_id) {
                    std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::btree_map::Entry::Vacant(v) => {
                        let out = out
                            .new_output(format!("{meta_dir}/{commit}-m-replaced-{spec_id}.avro"))?;
                        v.insert(
                            ManifestWriterBuilder::new(
                                out,
                                Some(snapshot_id),
                                schema.clone(),
                                file_spec.as_ref().clone(),
                            )
                            .build_v2_data(),
                        )
                    }
                };
                for entry in live {
                    let df = entry.data_file().clone();
                    let seq = entry.sequence_number().unwrap_or(0);
                    let file_seq = entry.file_sequence_number.or(entry.sequence_number());
                    if replaced(&df) {
                        found += 1;
                        removed_records += df.record_count();
                        removed_bytes += df.file_size_in_bytes();
                        removed_files += 1;
                        summary.remove_file(&df, schema.clone(), file_spec.clone());
                        w.add_delete_file(df, seq, file_seq)?;
                    } else {
                        w.add_existing_file(
                            df,
                            entry.snapshot_id().unwrap_or(snapshot_id),
                            seq,
                            file_seq,
                        )?;
                    }
                }
            }
            pending.extend(writers.into_values());
            // A rewrite replaces exactly the files it read: one gone meanwhile would
            // bring its rows back.
            if let SnapshotOp::Rewrite { files, .. } = &op
                && found != files.len()
            {
                return Err(Error::new(
                    crate::error::Kind::Conflict,
                    Code::Conflict,
                    "files being compacted were replaced or removed meanwhile; nothing was written",
                )
                .with_hint("compact again"));
            }
        }
    }
    let mut added_records = 0u64;
    let mut added_bytes = 0u64;
    let added_files = added.len() as u64;
    if !added.is_empty() {
        let added_out = out.new_output(format!("{meta_dir}/{commit}-m-added.avro"))?;
        let mut writer =
            ManifestWriterBuilder::new(added_out, Some(snapshot_id), schema.clone(), spec.clone())
                .build_v2_data();
        for df in added {
            added_records += df.record_count();
            added_bytes += df.file_size_in_bytes();
            summary.add_file(&df, schema.clone(), base.default_partition_spec().clone());
            writer.add_file(df, seq)?;
        }
        pending.push(writer);
    }
    for w in pending {
        manifests.push(w.write_manifest_file().await?);
    }

    let list_path = format!("{meta_dir}/snap-{snapshot_id}-0-{commit}.avro");
    let list_out = out.new_output(&list_path)?.writer().await?;
    let mut list = ManifestListWriter::v2(list_out, snapshot_id, base.current_snapshot_id(), seq);
    list.add_manifests(manifests.into_iter())?;
    list.close().await?;

    // The totals: an append keeps every file of the previous snapshot (delete files
    // included) and adds its own; an overwrite leaves only its own; a partition replace
    // keeps the others' files.
    let kept = |key: &str| -> u64 {
        let before = base
            .current_snapshot()
            .and_then(|s| s.summary().additional_properties.get(key))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        match (&op, key) {
            (SnapshotOp::Append, _) => before,
            (SnapshotOp::Overwrite, _) => 0,
            (
                SnapshotOp::Rewrite { deletes: true, .. },
                "total-delete-files" | "total-position-deletes" | "total-equality-deletes",
            ) => 0,
            (_, "total-records") => before.saturating_sub(removed_records),
            (_, "total-files-size") => before.saturating_sub(removed_bytes),
            (_, "total-data-files") => before.saturating_sub(removed_files),
            (_, _) => before,
        }
    };
    let mut props = properties;
    props.extend(summary.build());
    let totals = [
        ("total-records", kept("total-records") + added_records),
        ("total-files-size", kept("total-files-size") + added_bytes),
        ("total-data-files", kept("total-data-files") + added_files),
        ("total-delete-files", kept("total-delete-files")),
        ("total-position-deletes", kept("total-position-deletes")),
        ("total-equality-deletes", kept("total-equality-deletes")),
    ];
    for (k, v) in totals {
        props.insert(k.to_string(), v.to_string());
    }
    let operation = match op {
        SnapshotOp::Append => Operation::Append,
        SnapshotOp::Overwrite | SnapshotOp::ReplacePartitions { .. } => Operation::Overwrite,
        SnapshotOp::Rewrite { .. } => Operation::Replace,
    };
    let snapshot = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(base.current_snapshot_id())
        .with_sequence_number(seq)
        .with_summary(Summary {
            operation,
            additional_properties: props,
        })
        .with_schema_id(base.current_schema_id())
        .with_timestamp_ms(
            chrono::Utc::now()
                .timestamp_millis()
                .max(base.last_updated_ms()),
        )
        .build();
    let updates = vec![
        TableUpdate::AddSnapshot { snapshot },
        TableUpdate::SetSnapshotRef {
            ref_name: MAIN_BRANCH.to_string(),
            reference: SnapshotReference::new(
                snapshot_id,
                SnapshotRetention::branch(None, None, None),
            ),
        },
    ];
    Ok(Produced {
        updates,
        files: captured.take(),
    })
}

/// A positive snapshot id not used by the table yet.
fn fresh_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let (a, b) = Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) >> 1) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

pub use crate::error::REBASE_APPENDS;

/// Why a stale append is not made again: the client's conflict stands.
pub type NotRebased = String;

/// The files a client's append added, checked once: its new manifests (in the
/// server's spelling of their locations) and what they hold.
pub struct ClientAppend {
    snapshot: Snapshot,
    manifests: Vec<ManifestFile>,
    spec_id: i32,
    records: u64,
    bytes: u64,
    files: u64,
}

impl ClientAppend {
    /// Reads and checks the files of a client's append snapshot: every file it names
    /// (its manifest list, its manifests, their data files) is under the table's own
    /// folder (`canonical` spells a location the server's way, `None` for one outside
    /// the table's folder), its new manifests hold data files it added and nothing else,
    /// with no sequence number of their own (so they take the one of the snapshot they
    /// land in, as appends write them).
    pub async fn read(
        io: &FileIO,
        format: FormatVersion,
        snapshot: &Snapshot,
        canonical: impl Fn(&str) -> Option<String>,
    ) -> Result<std::result::Result<ClientAppend, NotRebased>> {
        if format != FormatVersion::V2 {
            return Ok(Err("the table is not Iceberg v2".into()));
        }
        if snapshot.summary().operation != Operation::Append {
            return Ok(Err("the snapshot is not an append".into()));
        }
        let Some(list) = canonical(snapshot.manifest_list()) else {
            return Ok(Err(
                "its manifest list is not under the table's folder".into()
            ));
        };
        let bytes = io.new_input(&list)?.read().await?;
        let entries: Vec<ManifestFile> = ManifestList::parse_with_version(&bytes, format)?
            .consume_entries()
            .into_iter()
            .collect();
        let mut out = ClientAppend {
            snapshot: snapshot.clone(),
            manifests: Vec::new(),
            spec_id: 0,
            records: 0,
            bytes: 0,
            files: 0,
        };
        for mut m in entries {
            if m.added_snapshot_id != snapshot.snapshot_id() {
                continue;
            }
            if m.content != ManifestContentType::Data {
                return Ok(Err("it adds delete files".into()));
            }
            if out.manifests.is_empty() {
                out.spec_id = m.partition_spec_id;
            } else if m.partition_spec_id != out.spec_id {
                return Ok(Err("its manifests have several partition specs".into()));
            }
            let Some(path) = canonical(&m.manifest_path) else {
                return Ok(Err("a manifest is not under the table's folder".into()));
            };
            // The entries as written (no value inherited from the list).
            let raw = io.new_input(&path)?.read().await?;
            let manifest = iceberg::spec::Manifest::parse_avro(&raw)?;
            for e in manifest.entries() {
                let plain = e.status() == iceberg::spec::ManifestStatus::Added
                    && e.snapshot_id()
                        .is_none_or(|id| id == snapshot.snapshot_id())
                    && e.sequence_number().is_none()
                    && e.content_type() == iceberg::spec::DataContentType::Data;
                if !plain {
                    return Ok(Err(
                        "its manifests hold entries it did not add, or sequence numbers of their own".into(),
                    ));
                }
                if canonical(e.file_path()).is_none() {
                    return Ok(Err("a data file is not under the table's folder".into()));
                }
                out.records = out.records.saturating_add(e.record_count());
                out.bytes = out.bytes.saturating_add(e.file_size_in_bytes());
                out.files = out.files.saturating_add(1);
            }
            m.manifest_path = path;
            m.sequence_number = iceberg::spec::UNASSIGNED_SEQUENCE_NUMBER;
            m.min_sequence_number = iceberg::spec::UNASSIGNED_SEQUENCE_NUMBER;
            out.manifests.push(m);
        }
        if out.manifests.is_empty() {
            return Ok(Err("the snapshot added no manifest".into()));
        }
        Ok(Ok(out))
    }
}

/// A client's append (made on the table when its `main` was at `read`) made again on
/// `now`, the table as other writes left it: its new manifests listed with `now`'s
/// current ones in a new manifest list, under the same snapshot id, at `now`'s next
/// sequence number.
///
/// Only when it is safe: the table opted in ([`REBASE_APPENDS`]: an append that depends
/// on what the client read, such as the insert half of an upsert, must not be made
/// again); every snapshot since `read` is an append or a rewrite that added no delete
/// manifest (so no delete made meanwhile could reach the appended rows); the schema and
/// the partition spec are the ones the client wrote with. `Err` says why not.
pub async fn rebase_append(
    io: &FileIO,
    now: &TableMetadata,
    read: Option<i64>,
    append: &ClientAppend,
) -> Result<std::result::Result<Produced, NotRebased>> {
    let snapshot = &append.snapshot;
    let enabled = now
        .properties()
        .get(REBASE_APPENDS)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if !enabled {
        return Ok(Err(format!("the table does not set {REBASE_APPENDS}=true")));
    }
    if now.format_version() != FormatVersion::V2 {
        return Ok(Err("the table is not Iceberg v2".into()));
    }
    if now.snapshot_by_id(snapshot.snapshot_id()).is_some() {
        return Ok(Err("the snapshot id is taken".into()));
    }
    if snapshot.schema_id() != Some(now.current_schema_id()) {
        return Ok(Err("the schema changed".into()));
    }
    if append.spec_id != now.default_partition_spec_id() {
        return Ok(Err("the partitioning changed".into()));
    }
    // What happened since the client read the table: appends and rewrites that added
    // no delete manifest (read from their manifest lists, not taken from summaries).
    let mut at = now.current_snapshot_id();
    let mut steps = 0usize;
    while at != read {
        let Some(id) = at else {
            return Ok(Err(
                "the snapshot the client read is not in the table's history".into(),
            ));
        };
        let Some(s) = now.snapshot_by_id(id) else {
            return Ok(Err(
                "the table's history since the client read it was expired".into(),
            ));
        };
        if !matches!(
            s.summary().operation,
            Operation::Append | Operation::Replace
        ) {
            return Ok(Err(
                "rows were overwritten or deleted since the client read the table".into(),
            ));
        }
        let deletes = manifests_of(io, now, s.manifest_list())
            .await?
            .iter()
            .any(|m| m.content == ManifestContentType::Deletes && m.added_snapshot_id == id);
        if deletes {
            return Ok(Err(
                "delete files were added since the client read the table".into(),
            ));
        }
        steps += 1;
        if steps > now.snapshots().len() {
            return Ok(Err("the table's history has a cycle".into()));
        }
        at = s.parent_snapshot_id();
    }
    let seq = now.next_sequence_number();
    let meta_dir = format!("{}/metadata", now.location().trim_end_matches('/'));
    let (out, captured) = crate::warehouse::io::capture_io();
    let list_path = format!(
        "{meta_dir}/snap-{}-1-{}.avro",
        snapshot.snapshot_id(),
        Uuid::new_v4()
    );
    let list_out = out.new_output(&list_path)?.writer().await?;
    let mut list = ManifestListWriter::v2(
        list_out,
        snapshot.snapshot_id(),
        now.current_snapshot_id(),
        seq,
    );
    list.add_manifests(
        append
            .manifests
            .iter()
            .cloned()
            .chain(current_manifests(io, now).await?),
    )?;
    list.close().await?;
    // The totals: the current snapshot's, and what the append added (counted from its
    // manifests, not taken from the client's summary).
    let total = |key: &str| -> u64 {
        now.current_snapshot()
            .and_then(|s| s.summary().additional_properties.get(key))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut props = snapshot.summary().additional_properties.clone();
    props.retain(|k, _| {
        !k.starts_with("total-") && !k.starts_with("added-") && !k.starts_with("lh.")
    });
    for (k, v) in [
        ("added-records", append.records),
        ("added-files-size", append.bytes),
        ("added-data-files", append.files),
        (
            "total-records",
            total("total-records").saturating_add(append.records),
        ),
        (
            "total-files-size",
            total("total-files-size").saturating_add(append.bytes),
        ),
        (
            "total-data-files",
            total("total-data-files").saturating_add(append.files),
        ),
        ("total-delete-files", total("total-delete-files")),
        ("total-position-deletes", total("total-position-deletes")),
        ("total-equality-deletes", total("total-equality-deletes")),
    ] {
        props.insert(k.to_string(), v.to_string());
    }
    props.insert("lh.rebased".to_string(), "true".to_string());
    let rebased = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot.snapshot_id())
        .with_parent_snapshot_id(now.current_snapshot_id())
        .with_sequence_number(seq)
        .with_summary(Summary {
            operation: Operation::Append,
            additional_properties: props,
        })
        .with_schema_id(now.current_schema_id())
        .with_timestamp_ms(
            chrono::Utc::now()
                .timestamp_millis()
                .max(now.last_updated_ms()),
        )
        .build();
    Ok(Ok(Produced {
        updates: vec![
            TableUpdate::AddSnapshot { snapshot: rebased },
            TableUpdate::SetSnapshotRef {
                ref_name: MAIN_BRANCH.to_string(),
                reference: SnapshotReference::new(
                    snapshot.snapshot_id(),
                    SnapshotRetention::branch(None, None, None),
                ),
            },
        ],
        files: captured.take(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::FieldSummary;

    fn manifest(partitions: Option<Vec<FieldSummary>>) -> ManifestFile {
        ManifestFile {
            manifest_path: "m.avro".into(),
            manifest_length: 1,
            partition_spec_id: 0,
            content: ManifestContentType::Data,
            sequence_number: 1,
            min_sequence_number: 1,
            added_snapshot_id: 1,
            added_files_count: Some(1),
            existing_files_count: Some(0),
            deleted_files_count: Some(0),
            added_rows_count: Some(1),
            existing_rows_count: Some(0),
            deleted_rows_count: Some(0),
            partitions,
            key_metadata: None,
            first_row_id: None,
        }
    }

    fn summary(lo: Option<Datum>, hi: Option<Datum>, contains_null: bool) -> FieldSummary {
        FieldSummary {
            contains_null,
            contains_nan: None,
            lower_bound: lo.map(|d| d.to_bytes().unwrap()),
            upper_bound: hi.map(|d| d.to_bytes().unwrap()),
        }
    }

    fn days(lo: i32, hi: i32, contains_null: bool) -> FieldSummary {
        summary(Some(Datum::date(lo)), Some(Datum::date(hi)), contains_null)
    }

    fn part(values: &[Option<Literal>]) -> Struct {
        Struct::from_iter(values.iter().cloned())
    }

    fn day(d: i32) -> Struct {
        part(&[Some(Literal::date(d))])
    }

    #[test]
    fn a_manifest_is_read_only_when_its_partition_bounds_may_hold_a_replaced_partition() {
        let date = [PrimitiveType::Date];
        let m = manifest(Some(vec![days(10, 12, false)]));
        for (values, may) in [
            (vec![day(10)], true),
            (vec![day(11)], true),
            (vec![day(12)], true),
            (vec![day(9)], false),
            (vec![day(13)], false),
            (vec![day(9), day(13)], false),
            (vec![day(9), day(12)], true),
            (vec![part(&[None])], false),
            (vec![], false),
        ] {
            assert_eq!(may_hold(&m, &values, &date), may, "{values:?}");
        }
        // Nulls: only where the manifest says it holds one.
        let with_null = manifest(Some(vec![days(10, 12, true)]));
        assert!(may_hold(&with_null, &[part(&[None])], &date));
        // Whatever cannot be told is read.
        assert!(may_hold(&manifest(None), &[day(99)], &date));
        assert!(may_hold(&manifest(Some(vec![])), &[day(99)], &date));
        let no_bounds = manifest(Some(vec![summary(None, None, false)]));
        assert!(may_hold(&no_bounds, &[day(99)], &date));
        let garbage = manifest(Some(vec![FieldSummary {
            contains_null: false,
            contains_nan: None,
            lower_bound: Some(vec![1u8].into()),
            upper_bound: Some(vec![2u8].into()),
        }]));
        assert!(may_hold(&garbage, &[day(99)], &date));
        assert!(may_hold(
            &m,
            &[part(&[Some(Literal::date(99)), None])],
            &date
        ));
        let doubles = manifest(Some(vec![summary(
            Some(Datum::double(1.0)),
            Some(Datum::double(2.0)),
            false,
        )]));
        assert!(may_hold(
            &doubles,
            &[part(&[Some(Literal::double(9.0))])],
            &[PrimitiveType::Double]
        ));
    }

    #[test]
    fn uuids_and_bounds_out_of_order_are_always_read() {
        let uuid = |n: u128| Datum::uuid(uuid::Uuid::from_u128(n));
        let m = manifest(Some(vec![summary(Some(uuid(1)), Some(uuid(2)), false)]));
        let far = part(&[Some(Literal::uuid(uuid::Uuid::from_u128(9)))]);
        assert!(may_hold(&m, &[far], &[PrimitiveType::Uuid]));
        let reversed = manifest(Some(vec![days(12, 10, false)]));
        assert!(may_hold(&reversed, &[day(99)], &[PrimitiveType::Date]));
    }

    #[test]
    fn every_field_of_a_partition_must_fall_within_the_bounds() {
        // identity(region) and bucket(4, id): a manifest of region 'eu', buckets 0..1.
        let types = [PrimitiveType::String, PrimitiveType::Int];
        let m = manifest(Some(vec![
            summary(Some(Datum::string("eu")), Some(Datum::string("eu")), false),
            summary(Some(Datum::int(0)), Some(Datum::int(1)), false),
        ]));
        let p = |region: &str, bucket: i32| {
            part(&[Some(Literal::string(region)), Some(Literal::int(bucket))])
        };
        assert!(may_hold(&m, &[p("eu", 1)], &types));
        assert!(!may_hold(&m, &[p("eu", 2)], &types));
        assert!(!may_hold(&m, &[p("us", 0)], &types));
        assert!(may_hold(&m, &[p("us", 0), p("eu", 0)], &types));
    }
}
