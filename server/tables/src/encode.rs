//! Table metadata as JSON, in the order its commits made it. The iceberg crate keeps a
//! table's snapshots, schemas, partition specs and sort orders in maps, so its JSON
//! listed them in another order each time: pyiceberg's `tbl.snapshots()` and
//! `inspect.snapshots()`, and Spark's `.snapshots` table, read them in that order
//! (pyiceberg's own integration suite failed on it, not the same tests each run).

use iceberg::spec::TableMetadata;

use crate::error::{Error, Result};

/// `metadata` as JSON: snapshots in commit order (sequence number, then time), schemas,
/// specs and sort orders by id, statistics by snapshot.
pub fn metadata_json(metadata: &TableMetadata) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(metadata)
        .map_err(|e| Error::internal(format!("cannot encode table metadata: {e}")))?;
    order(&mut v);
    Ok(v)
}

/// [`metadata_json`] as bytes, as a metadata file holds it.
pub fn metadata_bytes(metadata: &TableMetadata) -> Result<Vec<u8>> {
    serde_json::to_vec(&metadata_json(metadata)?)
        .map_err(|e| Error::internal(format!("cannot encode table metadata: {e}")))
}

fn order(v: &mut serde_json::Value) {
    let Some(m) = v.as_object_mut() else {
        return;
    };
    let int = |e: &serde_json::Value, k: &str| e.get(k).and_then(|x| x.as_i64()).unwrap_or(0);
    if let Some(s) = m.get_mut("snapshots").and_then(|s| s.as_array_mut()) {
        s.sort_by_key(|e| {
            (
                int(e, "sequence-number"),
                int(e, "timestamp-ms"),
                int(e, "snapshot-id"),
            )
        });
    }
    for (list, id) in [
        ("schemas", "schema-id"),
        ("partition-specs", "spec-id"),
        ("sort-orders", "order-id"),
        ("statistics", "snapshot-id"),
        ("partition-statistics", "snapshot-id"),
    ] {
        if let Some(s) = m.get_mut(list).and_then(|s| s.as_array_mut()) {
            s.sort_by_key(|e| int(e, id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshots made one after another come back in that order, every time, however
    /// the crate's map holds them.
    #[test]
    fn snapshots_schemas_and_specs_keep_their_order() {
        let mut v = serde_json::json!({
            "snapshots": [
                {"snapshot-id": 9, "sequence-number": 3, "timestamp-ms": 30},
                {"snapshot-id": 5, "sequence-number": 1, "timestamp-ms": 10},
                {"snapshot-id": 1, "sequence-number": 2, "timestamp-ms": 20},
            ],
            "schemas": [{"schema-id": 2}, {"schema-id": 0}, {"schema-id": 1}],
            "partition-specs": [{"spec-id": 1}, {"spec-id": 0}],
            "sort-orders": [{"order-id": 1}, {"order-id": 0}],
        });
        order(&mut v);
        let ids = |k: &str, id: &str| -> Vec<i64> {
            v[k].as_array()
                .unwrap()
                .iter()
                .map(|e| e[id].as_i64().unwrap())
                .collect()
        };
        assert_eq!(ids("snapshots", "snapshot-id"), [5, 1, 9]);
        assert_eq!(ids("schemas", "schema-id"), [0, 1, 2]);
        assert_eq!(ids("partition-specs", "spec-id"), [0, 1]);
        assert_eq!(ids("sort-orders", "order-id"), [0, 1]);
    }
}
