//! Combining what two branches appended to one table, for a merge (`lh merge`, a run's
//! publish): when both sides only appended since the merge base (the target may also
//! have compacted), the merged table is the target's with the source's new data files
//! appended, in one new snapshot, instead of a conflict. Anything else that changed the
//! table on both sides (an overwrite, a delete, a schema or partitioning change, the
//! table replaced) stays a conflict.

use std::collections::{BTreeSet, HashMap};

use iceberg::spec::{Operation, TableMetadata};
use lh_catalog::TablePointer;

use super::commit::{Base, Put};
use super::snapshot::{self, SnapshotOp};
use super::{LoadedTable, Tables};
use crate::error::Result;

impl Tables {
    /// The version of `table` that takes both sides' appends, written (and kept: a
    /// merge that does not land leaves it to `lh gc`), or `None` when the sides do not
    /// commute.
    pub async fn combine_appends(
        &self,
        table: &str,
        base: Option<&TablePointer>,
        ours: Option<&TablePointer>,
        theirs: Option<&TablePointer>,
    ) -> Result<Option<TablePointer>> {
        let (Some(base), Some(ours), Some(theirs)) = (base, ours, theirs) else {
            return Ok(None);
        };
        let load = async |p: &TablePointer| -> Result<LoadedTable> {
            Ok(LoadedTable {
                name: table.to_string(),
                pointer: p.clone(),
                metadata: self.metadata(&p.metadata_location).await?,
            })
        };
        // A merge base whose files garbage collection freed (past the retention) cannot
        // tell what each side did: no combining.
        let b = match load(base).await {
            Ok(b) => b,
            Err(e) if e.code == crate::error::Code::Collected => return Ok(None),
            Err(e) => return Err(e),
        };
        let (o, t) = (load(ours).await?, load(theirs).await?);
        let same = |x: &TableMetadata, y: &TableMetadata| {
            x.uuid() == y.uuid()
                && x.current_schema_id() == y.current_schema_id()
                && x.default_partition_spec_id() == y.default_partition_spec_id()
        };
        if !same(&b.metadata, &o.metadata) || !same(&b.metadata, &t.metadata) {
            return Ok(None);
        }
        if snapshot::check_writable(table, &o.metadata).is_err() {
            return Ok(None);
        }
        let since = b.metadata.current_snapshot_id();
        if !only(&t.metadata, since, &[Operation::Append])
            || !only(&o.metadata, since, &[Operation::Append, Operation::Replace])
        {
            return Ok(None);
        }
        let before: BTreeSet<String> = self
            .live_files(&b)
            .await?
            .data
            .iter()
            .map(|f| f.url.clone())
            .collect();
        let added: Vec<_> = self
            .live_files(&t)
            .await?
            .data
            .iter()
            .filter(|f| !before.contains(&f.url))
            .map(|f| (*f.file).clone())
            .collect();
        if added.is_empty() {
            return Ok(None);
        }
        let props = HashMap::from([(
            "lh.merged-appends".to_string(),
            format!(
                "{} files from snapshot {}",
                added.len(),
                t.metadata.current_snapshot_id().unwrap_or(0)
            ),
        )]);
        let produced = snapshot::produce(
            self.warehouse.io(),
            &o.metadata,
            SnapshotOp::Append,
            added,
            props,
        )
        .await?;
        let put = Put {
            table: table.to_string(),
            current: Some(o),
            base: Base::AsRead,
            requirements: Vec::new(),
            updates: produced.updates,
            files: produced.files,
        };
        Ok(Some(self.write_put(put).await?.keep()))
    }
}

/// Whether every snapshot made since `since` (the newest first, back to it) is one of
/// `ops`.
fn only(m: &TableMetadata, since: Option<i64>, ops: &[Operation]) -> bool {
    let mut at = m.current_snapshot();
    while let Some(s) = at {
        if Some(s.snapshot_id()) == since {
            return true;
        }
        if !ops.contains(&s.summary().operation) {
            return false;
        }
        at = s.parent_snapshot_id().and_then(|p| m.snapshot_by_id(p));
    }
    since.is_none()
}
