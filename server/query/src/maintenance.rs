//! Table maintenance that changes no row: compaction (`lh table compact`) and snapshot
//! expiry (`lh table expire`).
//!
//! A compaction picks, per partition, the data files under three quarters of the target
//! size when there are at least two (every data file when the table has delete files,
//! which it then applies and removes), reads their rows through the same view queries
//! use (deletes applied, columns by field id), and writes them with the table's
//! partitioning as one snapshot of operation `replace`: one ordinary commit, which
//! names exactly the files it replaces (a file gone meanwhile is a conflict, so no
//! deleted row comes back) and commutes with appends made meanwhile.

use std::collections::{BTreeMap, BTreeSet};

use lh_api::ImportMode;

use crate::auth::{Action, Identity};
use crate::error::{Code, Error, Result};
use crate::tables::Tables;
use crate::tables::write::{ImportContext, Replaces, Source, WriteJob, write_table};
use crate::view::{view_name, view_sql};
use crate::warehouse::cache::Pins;

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    pub table: String,
    /// The commit made; the head it found when there was nothing to compact.
    pub commit: String,
    pub compacted: bool,
    /// Data files of the table before and after.
    pub files_before: u64,
    pub files_after: u64,
    /// Delete files applied to the rows rewritten, and removed.
    pub delete_files_removed: u64,
    /// Data files rewritten, and the rows they held.
    pub files_rewritten: u64,
    pub rows: u64,
}

/// What an expiry of snapshots did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub table: String,
    /// The commit made; the head it found when nothing expired.
    pub commit: String,
    /// Snapshots in the table's metadata before and after.
    pub snapshots_before: u64,
    pub snapshots_after: u64,
    pub expired: u64,
    /// The commits the server's retention keeps (whose snapshots stay).
    pub kept_commits: u64,
}

/// After a write left `table` on `branch`: compacts it in the background when a
/// partition holds more than the server's `--auto-compact-files` small files (off by
/// default). The compaction is `by`'s, an ordinary commit; a failure (a conflict with
/// a later write, a protected branch) is logged and changes nothing.
pub fn after_write(
    tables: &std::sync::Arc<Tables>,
    ctx: &ImportContext,
    branch: &str,
    table: &str,
    by: &Identity,
) {
    let Some(limit) = ctx.auto_compact_files else {
        return;
    };
    if crate::tables::is_run_branch(branch) {
        return;
    }
    // One compaction of a table at a time: writes that follow while it runs add no
    // other (the next write after it looks again).
    static RUNNING: std::sync::Mutex<BTreeSet<(String, String)>> =
        std::sync::Mutex::new(BTreeSet::new());
    let key = (branch.to_string(), table.to_string());
    if !RUNNING.lock().expect("compactions").insert(key.clone()) {
        return;
    }
    struct Done((String, String));
    impl Drop for Done {
        fn drop(&mut self) {
            RUNNING.lock().expect("compactions").remove(&self.0);
        }
    }
    let done = Done(key);
    let (tables, ctx) = (tables.clone(), ctx.clone());
    let (branch, table, by) = (branch.to_string(), table.to_string(), by.clone());
    tokio::spawn(async move {
        let _done = done;
        let small = TARGET_FILE_BYTES / 4 * 3;
        let crowded = async {
            let head = tables.catalog.resolve(&branch).await?;
            let Some(t) = tables.load(&head.commit, &table).await? else {
                return Ok::<bool, Error>(false);
            };
            let live = tables.live_files(&t).await?;
            let mut per: BTreeMap<&str, usize> = BTreeMap::new();
            for f in live.data.iter().filter(|f| f.size < small) {
                *per.entry(&f.partition).or_default() += 1;
            }
            Ok(per.values().any(|n| *n > limit))
        };
        match crowded.await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(%table, %branch, error = %e.message, "auto-compaction: cannot read the table");
                return;
            }
        }
        match compact(&tables, &ctx, &branch, &table, TARGET_FILE_BYTES, &by).await {
            Ok(r) => tracing::info!(
                %table, %branch, files_before = r.files_before, files_after = r.files_after,
                "auto-compaction"
            ),
            Err(e) => tracing::warn!(%table, %branch, error = %e.message, "auto-compaction failed"),
        }
    });
}

/// The default target size of compacted files.
pub const TARGET_FILE_BYTES: u64 = 256 << 20;

/// Compacts `table` on `branch` as `by`.
pub async fn compact(
    tables: &Tables,
    ctx: &ImportContext,
    branch: &str,
    table: &str,
    target: u64,
    by: &Identity,
) -> Result<Compacted> {
    tables
        .require_unhidden(by, branch, table, "compacting it")
        .await?;
    let (resolved, t) = maintained(tables, branch, table, by, "compacting a table").await?;
    crate::tables::snapshot::check_writable(&format!("table '{table}'"), &t.metadata)?;
    let live = tables.live_files(&t).await?;
    let delete_files: BTreeSet<String> = live
        .position_deletes
        .iter()
        .map(|(u, _)| u.clone())
        .chain(live.equality_deletes.iter().map(|d| d.url.clone()))
        .collect();
    let before = live.data.len() as u64;
    let small = target / 4 * 3;
    let picked: BTreeSet<String> = if !delete_files.is_empty() {
        live.data.iter().map(|f| f.url.clone()).collect()
    } else {
        let mut by_partition: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for f in live.data.iter().filter(|f| f.size < small) {
            by_partition.entry(&f.partition).or_default().push(&f.url);
        }
        by_partition
            .into_values()
            .filter(|files| files.len() > 1)
            .flatten()
            .map(String::from)
            .collect()
    };
    if picked.is_empty() {
        return Ok(Compacted {
            table: table.to_string(),
            commit: resolved.commit.id.to_hex(),
            compacted: false,
            files_before: before,
            files_after: before,
            delete_files_removed: 0,
            files_rewritten: 0,
            rows: 0,
        });
    }
    let mut pins = Pins::none();
    let files = tables
        .file_groups_where(&t, &mut pins, |f| picked.contains(&f.url))
        .await?;
    let parts: Vec<String> = match lh_catalog::names::to_sql(table) {
        Some((ns, name)) => vec![ns, name],
        None => return Err(Error::internal("a table name without a namespace")),
    };
    let setup = vec![view_sql(&parts, &t, &files)];
    let job = WriteJob {
        branch: branch.to_string(),
        table: table.to_string(),
        mode: ImportMode::Append,
        source: Source::Query {
            setup,
            sql: format!("SELECT * FROM {}", view_name(&parts)),
            params: BTreeMap::new(),
            label: format!("the compaction of {table}"),
        },
        by: by.clone(),
        grants_on: None,
        message: Some(format!(
            "compact {table}: {} data files{}",
            picked.len(),
            if delete_files.is_empty() {
                String::new()
            } else {
                format!(" and {} delete files", delete_files.len())
            }
        )),
        properties: BTreeMap::new(),
        timeout: None,
        partition_by: None,
        replaces: Some(Replaces {
            files: picked.clone(),
            deletes: !delete_files.is_empty(),
            delete_files: delete_files.clone(),
        }),
        within: None,
    };
    let written = write_table(tables, ctx, job).await?;
    drop(pins);
    Ok(Compacted {
        table: table.to_string(),
        commit: written.commit,
        compacted: true,
        files_before: before,
        files_after: before - picked.len() as u64 + written.files,
        delete_files_removed: delete_files.len() as u64,
        files_rewritten: picked.len() as u64,
        rows: written.rows,
    })
}

/// The table a maintenance task works on, at the head of `branch`, which `by` may write.
async fn maintained(
    tables: &Tables,
    branch: &str,
    table: &str,
    by: &Identity,
    what: &str,
) -> Result<(lh_catalog::Resolved, crate::tables::LoadedTable)> {
    lh_catalog::names::validate_table_name(table)?;
    let at = lh_catalog::RefExpr::named(branch);
    by.require_table(Action::Write, &at, table, what)?;
    let resolved = tables.catalog.resolve(&at).await?;
    crate::tables::require_branch(branch, &resolved)?;
    let t = tables.load(&resolved.commit, table).await?.ok_or_else(|| {
        Error::not_found(
            Code::TableNotFound,
            format!("table '{table}' not found on '{branch}'"),
        )
    })?;
    Ok((resolved, t))
}

/// Expires a table's snapshots on a branch (`lh table expire`): removes from its
/// metadata every snapshot older than `older_than` that no kept commit reads (see
/// `tables/retention.rs`), as one commit that changes no row. Every kept commit reads
/// its own table version, which stays as it was; `lh gc` then frees the files of the
/// snapshots expired.
pub async fn expire(
    tables: &Tables,
    branch: &str,
    table: &str,
    older_than: std::time::Duration,
    by: &Identity,
) -> Result<Expired> {
    tables
        .require_unhidden(by, branch, table, "expiring its snapshots")
        .await?;
    // An expiry changes no row: when another write (an append, an automatic
    // compaction) lands first, it reads the table again and expires from there.
    let mut attempt = 0;
    loop {
        match expire_once(tables, branch, table, older_than, by).await {
            Err(e) if e.kind == crate::error::Kind::Conflict && attempt < EXPIRE_RETRIES => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(
                    20 * attempt + rand::random::<u64>() % 50,
                ))
                .await;
            }
            other => return other,
        }
    }
}

/// How often an expiry that lost to another write tries again.
const EXPIRE_RETRIES: u64 = 5;

async fn expire_once(
    tables: &Tables,
    branch: &str,
    table: &str,
    older_than: std::time::Duration,
    by: &Identity,
) -> Result<Expired> {
    let (resolved, t) =
        maintained(tables, branch, table, by, "expiring a table's snapshots").await?;
    let m = &t.metadata;
    let kept = tables.kept().await?;
    // The snapshots kept commits read of this table, on any ref or commit.
    let mut read: BTreeSet<i64> = BTreeSet::new();
    for (location, snapshot) in kept.read.get(&t.pointer.table_uuid).into_iter().flatten() {
        match snapshot {
            Some(id) => {
                read.insert(*id);
            }
            None => {
                if let Some(id) = tables.metadata(location).await?.current_snapshot_id() {
                    read.insert(id);
                }
            }
        }
    }
    // And what the metadata's own refs (an engine's branches and tags) name.
    // (iceberg-rust lists them only in the metadata's JSON.)
    let json = serde_json::to_value(&**m).map_err(|e| Error::internal(e.to_string()))?;
    if let Some(refs) = json.get("refs").and_then(|r| r.as_object()) {
        read.extend(
            refs.values()
                .filter_map(|r| r.get("snapshot-id").and_then(|v| v.as_i64())),
        );
    }
    read.extend(m.current_snapshot_id());
    let cutoff = chrono::Utc::now().timestamp_millis()
        - i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
    let mut expired: Vec<i64> = m
        .snapshots()
        .filter(|s| s.timestamp_ms() < cutoff && !read.contains(&s.snapshot_id()))
        .map(|s| s.snapshot_id())
        .collect();
    expired.sort_unstable();
    let before = m.snapshots().count() as u64;
    let mut response = Expired {
        table: table.to_string(),
        commit: resolved.commit.id.to_hex(),
        snapshots_before: before,
        expired: expired.len() as u64,
        snapshots_after: before - expired.len() as u64,
        kept_commits: kept.commits as u64,
    };
    if expired.is_empty() {
        return Ok(response);
    }
    let next = iceberg::spec::TableMetadataBuilder::new_from_metadata(
        (**m).clone(),
        Some(t.pointer.metadata_location.clone()),
    )
    .remove_snapshots(&expired)
    .build()
    .map_err(|e| Error::internal(format!("cannot expire snapshots: {e}")))?
    .metadata;
    let put = crate::tables::commit::Put {
        table: table.to_string(),
        current: Some(t.clone()),
        base: crate::tables::commit::Base::Made(Box::new(next)),
        requirements: Vec::new(),
        updates: Vec::new(),
        files: Vec::new(),
    };
    let n = expired.len();
    let meta = lh_catalog::CommitMeta::new(
        &by.user,
        format!(
            "expire {n} snapshot{} of {table}",
            if n == 1 { "" } else { "s" }
        ),
    )
    .with_property("lh.operation", "expire");
    let committed = tables
        .commit(
            branch,
            by,
            vec![crate::tables::commit::Change::Put(put)],
            meta,
        )
        .await?;
    response.commit = committed.commit.id.to_hex();
    Ok(response)
}
