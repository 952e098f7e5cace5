//! Row-level diffs: the rows one table's version adds, removes and changes against
//! another's, computed from Iceberg's own structure.
//!
//! Two snapshots of one table usually share most of their data files (an append adds
//! files, a partition overwrite or a copy-on-write delete replaces some). A shared file
//! holds the same rows on both sides, so the rows that differ are in the files only one
//! side has: as multisets, A = S + A' and B = S + B', so B - A = B' - A' and A - B =
//! A' - B'. Only those files are read, and DuckDB compares them with `EXCEPT ALL`; the
//! cost grows with the change, not the table. When the two snapshots' delete files
//! differ (a merge-on-read delete touches rows of shared files), every file is read.
//!
//! Columns are matched by Iceberg field id: the compared columns are those both versions
//! have, under the newer version's names, the older values cast to a promoted type. With
//! a key, an added and a removed row with the same key are one changed row, with the
//! columns whose values differ.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use iceberg::spec::{NestedFieldRef, Schema, Type};
use lh_api::{Change, DiffScan, QueryColumn, RowChange, RowCounts, SchemaChange, SchemaChangeKind};
use lh_catalog::Commit;

use super::commits::{CommitCatalog, Session, View};
use super::view::view_sql;
use super::{QueryEngine, blocking, interruptible, sql_error};
use crate::duck::quote_ident;
use crate::error::{Code, Error, Result};
use crate::tables::LoadedTable;
use crate::tables::types::duckdb_type;
use crate::warehouse::cache::Pins;

/// At most this many rows come back from one row diff.
pub const MAX_ROWS: u64 = 10_000;

/// What to compare.
pub struct RowDiffRequest<'a> {
    pub from: &'a Commit,
    pub to: &'a Commit,
    pub table: &'a str,
    /// Columns (the newer version's names) that identify a row; empty: no key.
    pub key: &'a [String],
    /// Rows to return (counts are always whole).
    pub limit: u64,
    /// Compare every row, skipping no shared file (to check the skipping).
    pub full: bool,
    pub timeout: Duration,
}

/// A row diff's answer, before the API adds the refs' names.
pub struct RowDiff {
    pub key: Vec<String>,
    pub columns: Vec<QueryColumn>,
    pub counts: RowCounts,
    pub schema_changes: Vec<SchemaChange>,
    pub rows: Vec<RowChange>,
    pub truncated: bool,
    pub scan: DiffScan,
    pub elapsed_ms: u64,
}

/// A compared column: its name on each side, and the type both are read as.
struct Column {
    from: Option<String>,
    to: Option<String>,
    name: String,
    ty: String,
    /// The older version's type, when it differs (a promotion): its values are cast.
    from_ty: Option<String>,
}

impl QueryEngine {
    /// The rows `req.table` adds, removes and changes from `req.from` to `req.to` (a
    /// table missing on one side is empty there).
    pub async fn row_diff(&self, req: RowDiffRequest<'_>) -> Result<RowDiff> {
        let started = Instant::now();
        let a = self.tables.load(req.from, req.table).await?;
        let b = self.tables.load(req.to, req.table).await?;
        if a.is_none() && b.is_none() {
            return Err(Error::not_found(
                Code::TableNotFound,
                format!("table '{}' is on neither side", req.table),
            ));
        }
        let columns = compared_columns(a.as_ref(), b.as_ref());
        let schema_changes = match (&a, &b) {
            (Some(a), Some(b)) => {
                schema_changes(a.metadata.current_schema(), b.metadata.current_schema())
            }
            _ => Vec::new(),
        };
        let key = key_columns(&columns, req.key, req.table)?;

        // The data files each side reads, and those both share.
        let files_a = match &a {
            Some(t) => Some(self.tables.live_files(t).await?),
            None => None,
        };
        let files_b = match &b {
            Some(t) => Some(self.tables.live_files(t).await?),
            None => None,
        };
        let urls = |f: &Option<Arc<crate::tables::files::LiveFiles>>| -> HashSet<String> {
            f.as_ref()
                .map(|f| f.data.iter().map(|d| d.url.clone()).collect())
                .unwrap_or_default()
        };
        let deletes = |f: &Option<Arc<crate::tables::files::LiveFiles>>| -> HashSet<String> {
            f.as_ref()
                .map(|f| {
                    f.position_deletes
                        .iter()
                        .map(|(u, _)| u.clone())
                        .chain(f.equality_deletes.iter().map(|d| d.url.clone()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (urls_a, urls_b) = (urls(&files_a), urls(&files_b));
        let full_because = if req.full {
            Some("asked for a full comparison".to_string())
        } else if deletes(&files_a) != deletes(&files_b) {
            Some("the versions' delete files differ: rows of shared files may differ".into())
        } else {
            None
        };
        let shared: HashSet<String> = match full_because {
            Some(_) => HashSet::new(),
            None => urls_a.intersection(&urls_b).cloned().collect(),
        };
        let mut pins = Pins::none();
        let mut views = Vec::new();
        let mut files_read = 0u64;
        for (side, t) in [("__lh_from", &a), ("__lh_to", &b)] {
            let select: Vec<String> = columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let (name, cast) = match side {
                        "__lh_from" => (&c.from, c.from_ty.is_some()),
                        _ => (&c.to, false),
                    };
                    match name {
                        Some(n) if cast => format!("CAST({} AS {}) AS c{i}", quote_ident(n), c.ty),
                        Some(n) => format!("{} AS c{i}", quote_ident(n)),
                        None => format!("CAST(NULL AS {}) AS c{i}", c.ty),
                    }
                })
                .collect();
            let sql = match t {
                Some(t) => {
                    let files = self
                        .tables
                        .file_groups_where(t, &mut pins, |f| !shared.contains(&f.url))
                        .await?;
                    files_read += files.groups.iter().map(|g| g.1.len() as u64).sum::<u64>();
                    let parts = [side.to_string(), "t".to_string()];
                    format!(
                        "{}CREATE VIEW {side}.v AS SELECT {} FROM {side}.t;\n",
                        view_sql(&parts, t, &files),
                        select.join(", ")
                    )
                }
                None => format!(
                    "CREATE SCHEMA IF NOT EXISTS {side};\n\
                     CREATE VIEW {side}.v AS SELECT {} WHERE false;\n",
                    select.join(", ")
                ),
            };
            views.push(View {
                name: format!("{side}.v"),
                sql,
            });
        }
        let scan = DiffScan {
            files_from: urls_a.len() as u64,
            files_to: urls_b.len() as u64,
            files_shared: shared.len() as u64,
            files_read,
            full_because,
        };

        let _permit = self.slot().await?;
        let catalog = Arc::new(CommitCatalog::attach(&self.database)?);
        let database = self.database.clone();
        let session = blocking(move || {
            let session = Session::in_commit(&database, catalog)?;
            session.ensure_views(&views)?;
            Ok(session)
        })
        .await?;
        let handle = session.conn.interrupt_handle();
        let n = columns.len();
        let limit = req.limit.min(MAX_ROWS);
        let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        let key_idx = key.clone();
        let table = req.table.to_string();
        let task = blocking(move || {
            let _pins = pins;
            compare(&session, n, &key_idx, &names, limit, &table)
        });
        let (counts, rows, truncated) = interruptible(handle, req.timeout, task, || {
            format!(
                "the row diff ran past the query timeout of {} ms and was stopped",
                req.timeout.as_millis()
            )
        })
        .await?;
        Ok(RowDiff {
            key: key.iter().map(|&i| columns[i].name.clone()).collect(),
            columns: columns
                .iter()
                .map(|c| QueryColumn {
                    name: c.name.clone(),
                    r#type: c.ty.clone(),
                })
                .collect(),
            counts,
            schema_changes,
            rows,
            truncated,
            scan,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }
}

/// The columns compared: those both versions have (by field id), named and typed as the
/// newer version has them; every column of the one side there is.
fn compared_columns(a: Option<&LoadedTable>, b: Option<&LoadedTable>) -> Vec<Column> {
    let fields = |t: Option<&LoadedTable>| -> Vec<NestedFieldRef> {
        t.map(|t| t.metadata.current_schema().as_struct().fields().to_vec())
            .unwrap_or_default()
    };
    let (fa, fb) = (fields(a), fields(b));
    match (a.is_some(), b.is_some()) {
        (true, true) => fb
            .iter()
            .filter_map(|f| {
                let old = fa.iter().find(|o| o.id == f.id)?;
                let (ty, old_ty) = (duckdb_type(&f.field_type), duckdb_type(&old.field_type));
                Some(Column {
                    from: Some(old.name.clone()),
                    to: Some(f.name.clone()),
                    name: f.name.clone(),
                    from_ty: (old_ty != ty).then_some(old_ty),
                    ty,
                })
            })
            .collect(),
        (true, false) => fa
            .iter()
            .map(|f| Column {
                from: Some(f.name.clone()),
                to: None,
                name: f.name.clone(),
                ty: duckdb_type(&f.field_type),
                from_ty: None,
            })
            .collect(),
        _ => fb
            .iter()
            .map(|f| Column {
                from: None,
                to: Some(f.name.clone()),
                name: f.name.clone(),
                ty: duckdb_type(&f.field_type),
                from_ty: None,
            })
            .collect(),
    }
}

/// The positions of the key's columns among the compared ones; a key must name
/// distinct compared columns (exactly, or in another case when that is unambiguous).
fn key_columns(columns: &[Column], key: &[String], table: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for k in key {
        let exact: Vec<usize> = (0..columns.len())
            .filter(|&i| columns[i].name == *k)
            .collect();
        let found = if exact.len() == 1 {
            exact
        } else {
            (0..columns.len())
                .filter(|&i| columns[i].name.eq_ignore_ascii_case(k))
                .collect()
        };
        match found.as_slice() {
            [i] if !out.contains(i) => out.push(*i),
            [_] => {
                return Err(Error::bad_request(
                    Code::BadKey,
                    format!("key column '{k}' is named twice"),
                ));
            }
            _ => {
                let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
                return Err(Error::bad_request(
                    Code::BadKey,
                    format!("key column '{k}' is not a column both versions of '{table}' have"),
                )
                .with_hint(format!("the columns compared: {}", names.join(", "))));
            }
        }
    }
    Ok(out)
}

/// The columns added, dropped, renamed and retyped from `a` to `b`, by field id (nested
/// struct fields too, dotted).
pub fn schema_changes(a: &Schema, b: &Schema) -> Vec<SchemaChange> {
    fn walk(fields: &[NestedFieldRef], prefix: &str, out: &mut Vec<(i32, String, Type)>) {
        for f in fields {
            let name = format!("{prefix}{}", f.name);
            if let Type::Struct(s) = f.field_type.as_ref() {
                walk(s.fields(), &format!("{name}."), out);
            }
            out.push((f.id, name, f.field_type.as_ref().clone()));
        }
    }
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    walk(a.as_struct().fields(), "", &mut fa);
    walk(b.as_struct().fields(), "", &mut fb);
    let mut out = Vec::new();
    for (id, name, ty) in &fb {
        match fa.iter().find(|(i, ..)| i == id) {
            None => out.push(SchemaChange {
                change: SchemaChangeKind::Added,
                column: name.clone(),
                from: None,
                to: Some(duckdb_type(ty)),
            }),
            Some((_, old, old_ty)) => {
                if old != name {
                    out.push(SchemaChange {
                        change: SchemaChangeKind::Renamed,
                        column: name.clone(),
                        from: Some(old.clone()),
                        to: Some(name.clone()),
                    });
                }
                if ty.is_primitive() && old_ty != ty {
                    out.push(SchemaChange {
                        change: SchemaChangeKind::Retyped,
                        column: name.clone(),
                        from: Some(duckdb_type(old_ty)),
                        to: Some(duckdb_type(ty)),
                    });
                }
            }
        }
    }
    for (id, name, _) in &fa {
        if !fb.iter().any(|(i, ..)| i == id) {
            out.push(SchemaChange {
                change: SchemaChangeKind::Dropped,
                column: name.clone(),
                from: None,
                to: None,
            });
        }
    }
    out
}

/// Compares the views `__lh_from.v` and `__lh_to.v` (columns `c0..c{n-1}`) in `session`:
/// the counts, and at most `limit` rows.
fn compare(
    session: &Session,
    n: usize,
    key: &[usize],
    names: &[String],
    limit: u64,
    table: &str,
) -> Result<(RowCounts, Vec<RowChange>, bool)> {
    let conn = &session.conn;
    let cols: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let all = cols.join(", ");
    conn.execute_batch(&format!(
        "CREATE TABLE added AS SELECT {all} FROM __lh_to.v EXCEPT ALL SELECT {all} FROM __lh_from.v;\n\
         CREATE TABLE removed AS SELECT {all} FROM __lh_from.v EXCEPT ALL SELECT {all} FROM __lh_to.v;"
    ))
    .map_err(|e| diff_error(table, e))?;
    let count = |sql: &str| -> Result<u64> {
        let v: i64 = conn
            .query_row(sql, [], |r| r.get(0))
            .map_err(|e| diff_error(table, e))?;
        Ok(v as u64)
    };
    let added = count("SELECT count(*) FROM added")?;
    let removed = count("SELECT count(*) FROM removed")?;
    let fetch = |sql: &str| -> Result<Vec<RecordBatch>> {
        let mut stmt = conn.prepare(sql).map_err(|e| diff_error(table, e))?;
        Ok(stmt
            .query_arrow([])
            .map_err(|e| diff_error(table, e))?
            .collect())
    };
    if key.is_empty() {
        let rows = fetch(&format!(
            "SELECT * FROM (SELECT 1 AS ord, {all} FROM added UNION ALL \
             SELECT 2, {all} FROM removed) ORDER BY ALL LIMIT {}",
            limit + 1
        ))?;
        let mut out = Vec::new();
        for batch in &rows {
            let text = cells(batch)?;
            for row in text {
                let change = match row[0].as_deref() {
                    Some("1") => Change::Added,
                    _ => Change::Removed,
                };
                out.push(RowChange {
                    change,
                    values: row[1..].to_vec(),
                    before: None,
                    changed_columns: Vec::new(),
                });
            }
        }
        let truncated = out.len() as u64 > limit;
        out.truncate(limit as usize);
        let counts = RowCounts {
            added,
            removed,
            changed: None,
        };
        return Ok((counts, out, truncated));
    }
    let k: Vec<String> = key.iter().map(|&i| format!("c{i}")).collect();
    let using = k.join(", ");
    // A key that repeats among the rows that changed cannot pair them.
    let repeated = count(&format!(
        "SELECT (SELECT count(*) FROM (SELECT {using} FROM added GROUP BY ALL HAVING count(*) > 1)) \
         + (SELECT count(*) FROM (SELECT {using} FROM removed GROUP BY ALL HAVING count(*) > 1))"
    ))?;
    if repeated > 0 {
        let key_names: Vec<&str> = key.iter().map(|&i| names[i].as_str()).collect();
        return Err(Error::bad_request(
            Code::BadKey,
            format!(
                "the key ({}) is not unique among the rows that differ: {repeated} key \
                 values repeat on one side",
                key_names.join(", ")
            ),
        )
        .with_hint("name columns that identify a row, or diff without --key"));
    }
    let changed = count(&format!(
        "SELECT count(*) FROM added SEMI JOIN removed USING ({using})"
    ))?;
    let counts = RowCounts {
        added: added - changed,
        removed: removed - changed,
        changed: Some(changed),
    };
    let new: Vec<String> = (0..n).map(|i| format!("n.c{i}")).collect();
    let old: Vec<String> = (0..n).map(|i| format!("o.c{i}")).collect();
    let nulls: Vec<String> = (0..n).map(|_| "NULL".to_string()).collect();
    let differs: Vec<String> = (0..n)
        .map(|i| format!("n.c{i} IS DISTINCT FROM o.c{i}"))
        .collect();
    let falses: Vec<String> = (0..n).map(|_| "false".to_string()).collect();
    let keys_n: Vec<String> = key.iter().map(|&i| format!("n.c{i}")).collect();
    let keys_o: Vec<String> = key.iter().map(|&i| format!("o.c{i}")).collect();
    let order: Vec<String> = (1..=key.len() + 1).map(|i| i.to_string()).collect();
    let sql = format!(
        "SELECT * FROM (\
         SELECT 0 AS ord, {kn}, {new}, {old}, {differs} FROM added n JOIN removed o USING ({using}) \
         UNION ALL SELECT 1, {kn}, {new}, {nulls}, {falses} FROM added n ANTI JOIN removed o USING ({using}) \
         UNION ALL SELECT 2, {ko}, {nulls}, {old}, {falses} FROM removed o ANTI JOIN added n USING ({using})\
         ) ORDER BY {order} LIMIT {}",
        limit + 1,
        kn = keys_n.join(", "),
        ko = keys_o.join(", "),
        new = new.join(", "),
        old = old.join(", "),
        nulls = nulls.join(", "),
        differs = differs.join(", "),
        falses = falses.join(", "),
        order = order.join(", "),
    );
    let batches = fetch(&sql)?;
    let mut out = Vec::new();
    let skip = 1 + key.len();
    for batch in &batches {
        for row in cells(batch)? {
            let new = row[skip..skip + n].to_vec();
            let old = row[skip + n..skip + 2 * n].to_vec();
            let flags = &row[skip + 2 * n..];
            out.push(match row[0].as_deref() {
                Some("0") => RowChange {
                    change: Change::Changed,
                    values: new,
                    before: Some(old),
                    changed_columns: flags
                        .iter()
                        .zip(names)
                        .filter(|(f, _)| f.as_deref() == Some("true"))
                        .map(|(_, n)| n.clone())
                        .collect(),
                },
                Some("1") => RowChange {
                    change: Change::Added,
                    values: new,
                    before: None,
                    changed_columns: Vec::new(),
                },
                _ => RowChange {
                    change: Change::Removed,
                    values: old,
                    before: None,
                    changed_columns: Vec::new(),
                },
            });
        }
    }
    let truncated = out.len() as u64 > limit;
    out.truncate(limit as usize);
    Ok((counts, out, truncated))
}

/// A batch's values as text, as `lh query` prints them (null as None).
fn cells(batch: &RecordBatch) -> Result<Vec<Vec<Option<String>>>> {
    let options = FormatOptions::default();
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::internal(format!("cannot format the diff: {e}")))?;
    let nulls: Vec<_> = batch.columns().iter().map(|c| c.logical_nulls()).collect();
    Ok((0..batch.num_rows())
        .map(|i| {
            formatters
                .iter()
                .enumerate()
                .map(|(j, f)| {
                    (!nulls[j].as_ref().is_some_and(|n| n.is_null(i)))
                        .then(|| f.value(i).to_string())
                })
                .collect()
        })
        .collect())
}

fn diff_error(table: &str, e: duckdb::Error) -> Error {
    let mut err = sql_error(e);
    if err.code == Code::SqlError {
        err.message = format!("cannot compare the versions of '{table}': {}", err.message);
    }
    err
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, StructType, Type};

    use super::*;

    fn field(id: i32, name: &str, ty: PrimitiveType) -> NestedFieldRef {
        NestedField::optional(id, name, Type::Primitive(ty)).into()
    }

    #[test]
    fn schema_changes_are_matched_by_field_id() {
        let a = Schema::builder()
            .with_fields(vec![
                field(1, "id", PrimitiveType::Int),
                field(2, "amount", PrimitiveType::Float),
                field(3, "note", PrimitiveType::String),
                NestedField::optional(
                    5,
                    "address",
                    Type::Struct(StructType::new(vec![field(
                        6,
                        "city",
                        PrimitiveType::String,
                    )])),
                )
                .into(),
            ])
            .build()
            .unwrap();
        let b = Schema::builder()
            .with_fields(vec![
                field(1, "id", PrimitiveType::Long),
                field(2, "total", PrimitiveType::Double),
                field(4, "note", PrimitiveType::String),
                NestedField::optional(
                    5,
                    "address",
                    Type::Struct(StructType::new(vec![field(
                        6,
                        "town",
                        PrimitiveType::String,
                    )])),
                )
                .into(),
            ])
            .build()
            .unwrap();
        let got = schema_changes(&a, &b);
        let got: Vec<_> = got
            .iter()
            .map(|c| {
                (
                    c.change,
                    c.column.as_str(),
                    c.from.as_deref(),
                    c.to.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    SchemaChangeKind::Retyped,
                    "id",
                    Some("INTEGER"),
                    Some("BIGINT")
                ),
                (
                    SchemaChangeKind::Renamed,
                    "total",
                    Some("amount"),
                    Some("total")
                ),
                (
                    SchemaChangeKind::Retyped,
                    "total",
                    Some("FLOAT"),
                    Some("DOUBLE")
                ),
                // A new column under an old one's name is a new column; the old one is
                // dropped.
                (SchemaChangeKind::Added, "note", None, Some("VARCHAR")),
                (
                    SchemaChangeKind::Renamed,
                    "address.town",
                    Some("address.city"),
                    Some("address.town")
                ),
                (SchemaChangeKind::Dropped, "note", None, None),
            ]
        );
        assert!(schema_changes(&a, &a).is_empty());
    }
}
