//! A partitioned model's instance: its inputs filtered to its partition, the write mode
//! and the partitions it replaces, and an earlier instance's output put back.

#[allow(unused_imports)]
use super::*;

/// An input as a node reads it.
pub(super) struct Input {
    pub(super) pointer: lh_catalog::TablePointer,
    /// For an instance of a partitioned model: the input filtered to its partition.
    pub(super) part: Option<PartInput>,
}

pub(super) struct PartInput {
    /// The filter, SQL on the input's columns.
    pub(super) sql: String,
    /// The same, bound to the input's schema for pruning.
    pub(super) bound: Vec<crate::query::prune::Bound>,
    /// The key of what it reads: the data files that may hold the partition's rows,
    /// and the table's delete files.
    pub(super) files: String,
}

/// How an instance of a partitioned model reads the input `t`: filtered to partition
/// `p` where they share its key, else whole (`None`).
pub(super) async fn partition_input(
    svc: &RunService,
    t: &crate::tables::LoadedTable,
    p: &crate::partitions::Partition,
) -> Result<Option<PartInput>> {
    use crate::query::prune;
    let Some((column, ty)) = crate::partitions::shared_key(t, p) else {
        return Ok(None);
    };
    let (sql, filters) = crate::partitions::input_filter(&column, &ty, p);
    let bound = prune::bind(t, &filters);
    let live = svc.tables.live_files(t).await?;
    let mut data: Vec<&str> = live
        .data
        .iter()
        .filter(|f| prune::may_match(t, &bound, f))
        .map(|f| f.url.as_str())
        .collect();
    data.sort_unstable();
    let mut deletes: Vec<&str> = live
        .position_deletes
        .iter()
        .map(|(u, _)| u.as_str())
        .chain(live.equality_deletes.iter().map(|d| d.url.as_str()))
        .collect();
    deletes.sort_unstable();
    let doc = serde_json::json!({
        "schema": t.metadata.current_schema_id(), "data": data, "deletes": deletes,
    });
    Ok(Some(PartInput {
        sql,
        bound,
        files: blake3::hash(doc.to_string().as_bytes())
            .to_hex()
            .to_string(),
    }))
}

/// How an instance writes its model's table: the first to find it missing creates it
/// (holding the table's turn to create while it does), the others overwrite partitions
/// of it (as it is now).
pub(super) async fn instance_mode(
    shared: &Shared,
    table: &str,
) -> Result<(
    Option<tokio::sync::OwnedMutexGuard<()>>,
    ImportMode,
    Option<crate::tables::LoadedTable>,
)> {
    let lock = shared
        .creating
        .lock()
        .map_err(|_| Error::internal("a run's table lock is poisoned"))?
        .entry(table.to_string())
        .or_default()
        .clone();
    let turn = lock.lock_owned().await;
    let head = shared.svc.catalog.resolve(&shared.run_branch).await?.commit;
    Ok(match shared.svc.tables.load(&head, table).await? {
        Some(t) => (None, ImportMode::OverwritePartitions, Some(t)),
        None => (Some(turn), ImportMode::Create, None),
    })
}

/// What an instance of a partitioned model writes within: rows of its partition only,
/// replacing every partition of the table (`now`) inside it, rows or none.
pub(super) async fn instance_within(
    svc: &RunService,
    node: &PlanNode,
    now: Option<&crate::tables::LoadedTable>,
) -> Result<Option<crate::tables::write::Within>> {
    use crate::query::prune;
    let (Some(p), Some(spec)) = (&node.partition, &node.partitioned_by) else {
        return Ok(None);
    };
    let Some(column) = crate::partitions::key_column(p, spec) else {
        return Err(Error::internal(format!(
            "{} has no partition field for partition {}",
            node.name, p.label
        )));
    };
    let mut inside = Vec::new();
    if let Some(t) = now {
        let field = t
            .metadata
            .current_schema()
            .as_struct()
            .field_by_name(&column)
            .cloned();
        if let Some(iceberg::spec::Type::Primitive(ty)) =
            field.as_ref().map(|f| f.field_type.as_ref())
        {
            let (_, filters) = crate::partitions::input_filter(&column, ty, p);
            let bound = prune::bind(t, &filters);
            if bound.len() == filters.len() {
                let spec_id = t.metadata.default_partition_spec_id();
                for f in &svc.tables.live_files(t).await?.data {
                    if f.spec_id == spec_id
                        && prune::may_match(t, &bound, f)
                        && !inside.contains(f.file.partition())
                    {
                        inside.push(f.file.partition().clone());
                    }
                }
            }
        }
    }
    Ok(Some(crate::tables::write::Within {
        label: p.label.clone(),
        predicate: crate::partitions::output_predicate(&column, p),
        partitions: inside,
    }))
}

/// Puts an instance's earlier output (the files its snapshot at `p` added) back into
/// its table on the run's branch: nothing to do when the table's partitions hold
/// exactly those files; otherwise one commit that replaces those partitions by them
/// (or creates the table with them). Returns the table's pointer and the rows.
pub(super) async fn put_back(
    shared: &Shared,
    node: &PlanNode,
    p: &TablePointer,
) -> Result<(TablePointer, u64)> {
    let svc = &shared.svc;
    let table = &node.name;
    let name = node.display_name();
    let from = crate::tables::LoadedTable {
        name: table.clone(),
        pointer: p.clone(),
        metadata: svc.tables.metadata(&p.metadata_location).await?,
    };
    // The snapshot this instance made (its node in its summary), and no other.
    let made_here = from.metadata.current_snapshot().is_some_and(|s| {
        Some(s.snapshot_id()) == p.snapshot_id
            && s.summary().additional_properties.get("lh.node") == Some(&name)
    });
    if !made_here {
        return Err(Error::new(
            crate::error::Kind::Conflict,
            Code::Conflict,
            format!("the snapshot to reuse is not one {name} made"),
        ));
    }
    let added = svc.tables.added_files(&from).await?;
    let spec_id = added
        .first()
        .map_or(from.metadata.default_partition_spec_id(), |a| a.1);
    if added.iter().any(|a| a.1 != spec_id) {
        return Err(Error::new(
            crate::error::Kind::Conflict,
            Code::Conflict,
            "its files were written with several partition specs",
        ));
    }
    let files: Vec<iceberg::spec::DataFile> = added.into_iter().map(|a| a.0).collect();
    let rows = files.iter().map(|f| f.record_count()).sum();
    if !shared.may_act().await {
        return Err(Error::internal(
            "the run is no longer this server's (its lease was not renewed in time); nothing was written",
        ));
    }
    let (creating, mode, now) = instance_mode(shared, table).await?;
    let within = instance_within(svc, node, now.as_ref()).await?;
    if let Some(now) = &now {
        let live = svc.tables.live_files(now).await?;
        // Its partitions, and every partition of the table inside its run partition.
        let keys: std::collections::BTreeSet<String> = files
            .iter()
            .map(|f| f.partition())
            .chain(within.iter().flat_map(|w| w.partitions.iter()))
            .map(|part| crate::tables::partition::partition_key(spec_id, part))
            .collect();
        let there: std::collections::BTreeSet<&str> = live
            .data
            .iter()
            .filter(|f| keys.contains(&f.partition))
            .map(|f| f.url.as_str())
            .collect();
        let ours: std::collections::BTreeSet<&str> = files.iter().map(|f| f.file_path()).collect();
        if there == ours && live.position_deletes.is_empty() && live.equality_deletes.is_empty() {
            return Ok((p.clone(), rows));
        }
    }
    shared.by.require_table(
        Action::Write,
        &lh_catalog::RefExpr::named(&shared.target),
        table,
        "reusing a memoized output",
    )?;
    let job = WriteJob {
        branch: shared.run_branch.clone(),
        table: table.clone(),
        mode,
        source: Source::DataFiles {
            files,
            spec_id,
            from: from.metadata.clone(),
            label: format!("the earlier output of {name}"),
        },
        by: shared.by.clone(),
        grants_on: Some(shared.target.clone()),
        message: Some(format!("reuse {name} (run {})", &shared.id[..12])),
        properties: BTreeMap::from([
            ("lh.run".to_string(), shared.id.clone()),
            ("lh.node".to_string(), name.clone()),
            ("lh.cached".to_string(), "true".to_string()),
        ]),
        timeout: None,
        partition_by: node.partitioned_by.clone(),
        replaces: None,
        within,
    };
    let written = write_table(&svc.tables, &svc.import, job).await;
    drop(creating);
    let written = written?;
    let p = svc
        .catalog
        .get_table(&format!("@{}", written.commit), table)
        .await?;
    Ok((p, rows))
}
