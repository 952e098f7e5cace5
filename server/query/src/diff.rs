//! Row-level diffs: the rows one table's version adds, removes and changes against
//! another's, computed from Iceberg's own structure.
//!
//! Two snapshots of one table usually share most of their data files (an append adds
//! files, a partition overwrite or a copy-on-write delete replaces some). A shared file
//! holds the same rows on both sides, so the rows that differ are in the files only one
//! side has: as multisets, A = S + A' and B = S + B', so B - A = B' - A' and A - B =
//! A' - B'. Only those files are read, and DuckDB compares them with `EXCEPT ALL`; the
//! cost grows with the change, not the table. A file is shared when each side lists it
//! exactly once. When the two snapshots' delete files differ (a merge-on-read delete
//! touches rows of shared files), every file is read.
//!
//! Both versions are read through one schema, the newer one's (the higher schema id),
//! columns matched by field id as every view does: a shared file reads the same on both
//! sides, a renamed column is one column, a promoted one is read in its wider type, and
//! a column added since reads NULL where the older files lack it (so a backfill shows).
//! Two tables of one name but different uuids (dropped and made again) share no field
//! ids: their columns are matched by name, each read through its own schema. With a
//! key, an added and a removed row with the same key (NULL matching NULL) are one
//! changed row, with the columns whose values differ.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use iceberg::spec::{NestedFieldRef, Schema, Type};
use lh_catalog::{Commit, DiffKind};

use super::commits::{CommitCatalog, Session, View};
use super::view::view_sql_as;
use super::{QueryEngine, blocking, sql_error};
use crate::duck::quote_ident;
use crate::error::{Code, Error, Kind, Result};
use crate::tables::LoadedTable;
use crate::tables::files::LiveFiles;
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
    /// The whole diff's: reading the files, comparing, formatting.
    pub timeout: Duration,
    /// Who asks, held to its share of the query slots.
    pub caller: Option<&'a str>,
}

/// A row diff's answer, before the API adds the refs' names.
pub struct RowDiff {
    /// The key rows are matched by (the newer version's names); empty: rows are only
    /// added or removed.
    pub key: Vec<String>,
    /// The columns compared (those both versions have), in the rows' order.
    pub columns: Vec<ComparedColumn>,
    pub counts: RowCounts,
    pub schema_changes: Vec<ColumnChange>,
    /// At most the request's limit: changed, then added, then removed, each by key.
    pub rows: Vec<ChangedRow>,
    /// Whether the limit left rows out.
    pub truncated: bool,
    pub scan: DiffScan,
    pub elapsed_ms: u64,
    /// The answer memory the rows' text holds, given back when the diff is dropped.
    pub charge: super::memory::Charge,
}

/// A column a row diff compares: the newer version's name and its DuckDB type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComparedColumn {
    pub name: String,
    pub type_name: String,
}

/// How many rows a table's change added, removed and (with a key) changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCounts {
    pub added: u64,
    pub removed: u64,
    /// Rows whose key is on both sides with other values (only with a key).
    pub changed: Option<u64>,
}

/// A change of a table's column between two versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnChange {
    pub kind: ColumnChangeKind,
    /// The column's name (nested fields dotted): the newer one, or the dropped one's.
    pub column: String,
    /// What it was: the old name (renamed) or the old type (retyped).
    pub from: Option<String>,
    /// What it is: the new name, or the new type (retyped, added).
    pub to: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnChangeKind {
    Added,
    Dropped,
    Renamed,
    Retyped,
}

/// One row that differs, its values as text (null as None) in the compared columns'
/// order: the new values of an added or changed row, the old ones of a removed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedRow {
    pub change: DiffKind,
    pub values: Vec<Option<String>>,
    /// A changed row's old values.
    pub before: Option<Vec<Option<String>>>,
    /// A changed row's columns whose values differ.
    pub changed_columns: Vec<String>,
}

/// What a row diff read: data files of each version, those both share (skipped: their
/// rows are the same on both sides), and whether every row had to be compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiffScan {
    pub files_from: u64,
    pub files_to: u64,
    pub files_shared: u64,
    /// Data files read, of both versions.
    pub files_read: u64,
    /// Why every file was compared, when the shared ones could not be skipped.
    pub full_because: Option<String>,
}

/// A compared column: its name in each side's view, and the name it is shown by.
struct Column {
    from: String,
    to: String,
    name: String,
    ty: String,
    /// Two tables of one name (another uuid): the older side's values cast to the
    /// newer's type, when they differ.
    cast: bool,
}

impl QueryEngine {
    /// The rows `req.table` adds, removes and changes from `req.from` to `req.to` (a
    /// table missing on one side is empty there). Under one query slot and, all of
    /// it (reading files included), the request's timeout.
    pub async fn row_diff(&self, req: RowDiffRequest<'_>) -> Result<RowDiff> {
        let started = Instant::now();
        let permit = match req.caller {
            Some(c) => self.slot_for(c).await?,
            None => super::Slot {
                _share: None,
                _slot: self.slot().await?,
            },
        };
        let cancelled = Arc::new(AtomicBool::new(false));
        let timeout = req.timeout;
        let table = req.table.to_string();
        let out = tokio::time::timeout(
            timeout,
            self.row_diff_within(req, permit, cancelled.clone(), started),
        )
        .await;
        match out {
            Ok(r) => r,
            Err(_) => {
                // The comparison's statements check this before each runs; the one
                // running is interrupted by `Interrupt` below (dropped with the future).
                cancelled.store(true, Ordering::SeqCst);
                Err(Error::new(
                    Kind::Timeout,
                    Code::Timeout,
                    format!(
                        "the row diff of '{table}' ran past the query timeout of {} ms and \
                         was stopped",
                        timeout.as_millis()
                    ),
                )
                .with_hint("name a narrower pair of refs, or raise the server's query timeout"))
            }
        }
    }

    async fn row_diff_within(
        &self,
        req: RowDiffRequest<'_>,
        permit: super::Slot,
        cancelled: Arc<AtomicBool>,
        started: Instant,
    ) -> Result<RowDiff> {
        let a = self.tables.load(req.from, req.table).await?;
        let b = self.tables.load(req.to, req.table).await?;
        if a.is_none() && b.is_none() {
            return Err(Error::not_found(
                Code::TableNotFound,
                format!("table '{}' is on neither side", req.table),
            ));
        }
        let same_table = match (&a, &b) {
            (Some(a), Some(b)) => a.pointer.table_uuid == b.pointer.table_uuid,
            _ => true,
        };
        let schema_changes = match (&a, &b) {
            (Some(a), Some(b)) if same_table => {
                schema_changes(a.metadata.current_schema(), b.metadata.current_schema())
            }
            (Some(a), Some(b)) => {
                schema_changes_by_name(a.metadata.current_schema(), b.metadata.current_schema())
            }
            _ => Vec::new(),
        };
        // The schema both sides are read through (see the module's doc).
        let newer = match (&a, &b) {
            (Some(a), Some(b)) if same_table => {
                let (sa, sb) = (a.metadata.current_schema(), b.metadata.current_schema());
                Some(if sa.schema_id() > sb.schema_id() {
                    sa.clone()
                } else {
                    sb.clone()
                })
            }
            _ => None,
        };
        let columns = compared_columns(a.as_ref(), b.as_ref(), newer.as_deref());
        if columns.is_empty() {
            return Err(Error::bad_request(
                Code::BadSchema,
                format!(
                    "the two versions of '{}' have no column in common",
                    req.table
                ),
            ));
        }
        let key = key_columns(&columns, req.key, req.table)?;

        // The data files each side reads, and those both share.
        let live = async |t: &Option<LoadedTable>| -> Result<Option<Arc<LiveFiles>>> {
            match t {
                Some(t) => Ok(Some(self.tables.live_files(t).await?)),
                None => Ok(None),
            }
        };
        let (files_a, files_b) = (live(&a).await?, live(&b).await?);
        let counts = |f: &Option<Arc<LiveFiles>>| -> HashMap<String, usize> {
            let mut m = HashMap::new();
            for d in f.iter().flat_map(|f| f.data.iter()) {
                *m.entry(d.url.clone()).or_insert(0) += 1;
            }
            m
        };
        let deletes = |f: &Option<Arc<LiveFiles>>| -> Vec<String> {
            let mut v: Vec<String> = f
                .iter()
                .flat_map(|f| {
                    f.position_deletes
                        .iter()
                        .map(|(u, _)| u.clone())
                        .chain(f.equality_deletes.iter().map(|d| d.url.clone()))
                })
                .collect();
            v.sort();
            v
        };
        let (in_a, in_b) = (counts(&files_a), counts(&files_b));
        let full_because = if req.full {
            Some("asked for a full comparison".to_string())
        } else if !same_table {
            Some("the two are different tables of one name (another uuid)".into())
        } else if deletes(&files_a) != deletes(&files_b) {
            Some("the versions' delete files differ: rows of shared files may differ".into())
        } else {
            None
        };
        // Listed once on each side: the same rows on both (a file listed twice on a
        // side, as a faulty writer may, is read).
        let shared: std::collections::HashSet<String> = match full_because {
            Some(_) => Default::default(),
            None => in_a
                .iter()
                .filter(|(u, n)| **n == 1 && in_b.get(*u) == Some(&1))
                .map(|(u, _)| u.clone())
                .collect(),
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
                        "__lh_from" => (&c.from, c.cast),
                        _ => (&c.to, false),
                    };
                    match cast {
                        true => format!("CAST({} AS {}) AS c{i}", quote_ident(name), c.ty),
                        false => format!("{} AS c{i}", quote_ident(name)),
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
                    let schema = newer.as_deref().unwrap_or(t.metadata.current_schema());
                    format!(
                        "{}CREATE VIEW {side}.v AS SELECT {} FROM {side}.t;\n",
                        view_sql_as(&parts, schema, &files),
                        select.join(", ")
                    )
                }
                None => {
                    let nulls: Vec<String> = columns
                        .iter()
                        .enumerate()
                        .map(|(i, c)| format!("CAST(NULL AS {}) AS c{i}", c.ty))
                        .collect();
                    format!(
                        "CREATE SCHEMA IF NOT EXISTS {side};\n\
                         CREATE VIEW {side}.v AS SELECT {} WHERE false;\n",
                        nulls.join(", ")
                    )
                }
            };
            views.push(View {
                name: format!("{side}.v"),
                sql,
                of: format!("the row diff's {side} side"),
            });
        }
        let scan = DiffScan {
            files_from: in_a.values().sum::<usize>() as u64,
            files_to: in_b.values().sum::<usize>() as u64,
            files_shared: shared.len() as u64,
            files_read,
            full_because,
        };

        let catalog = Arc::new(CommitCatalog::attach(&self.database)?);
        let database = self.database.clone();
        let session = blocking(move || {
            let session = Session::in_commit(&database, catalog)?;
            session.ensure_views(&views)?;
            Ok(session)
        })
        .await?;
        let _interrupt = Interrupt(Some(session.watch.clone()), cancelled.clone());
        let n = columns.len();
        let limit = req.limit.min(MAX_ROWS);
        let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        let key_idx = key.clone();
        let table = req.table.to_string();
        let max_bytes = self.limits.max_result_bytes;
        let charge = self.memory.charge_for(req.caller);
        // The slot and the read cache's pins go with the work: a diff stopped by its
        // timeout holds both until DuckDB has stopped.
        let (counts, rows, truncated, charge) = blocking(move || {
            let _permit = permit;
            let _pins = pins;
            let cmp = Compare {
                session: &session,
                cancelled: &cancelled,
                table: &table,
                max_bytes,
                charge: std::cell::RefCell::new(charge),
            };
            let (counts, rows, truncated) = cmp.run(n, &key_idx, &names, limit)?;
            Ok((counts, rows, truncated, cmp.charge.into_inner()))
        })
        .await?;
        Ok(RowDiff {
            key: key.iter().map(|&i| columns[i].name.clone()).collect(),
            columns: columns
                .iter()
                .map(|c| ComparedColumn {
                    name: c.name.clone(),
                    type_name: c.ty.clone(),
                })
                .collect(),
            counts,
            schema_changes,
            rows,
            truncated,
            scan,
            elapsed_ms: started.elapsed().as_millis() as u64,
            charge,
        })
    }
}

/// Interrupts DuckDB's statement when dropped (a diff's future dropped by its timeout
/// or by a client that left), and marks the diff cancelled, so that no later statement
/// of it starts.
struct Interrupt(Option<Arc<lh_core::duck::Watch>>, Arc<AtomicBool>);

impl Drop for Interrupt {
    fn drop(&mut self) {
        if let Some(h) = self.0.take()
            && !self.1.swap(true, Ordering::SeqCst)
        {
            h.interrupt();
        }
    }
}

/// The columns compared. One table (the same uuid): every column of the newer schema,
/// read by field id on both sides (a column added since reads NULL where the older
/// version's files lack it, as in the table itself). Two tables of one name: the
/// columns both have by name. One side only: its columns.
fn compared_columns(
    a: Option<&LoadedTable>,
    b: Option<&LoadedTable>,
    newer: Option<&Schema>,
) -> Vec<Column> {
    let fields = |t: Option<&LoadedTable>| -> Vec<NestedFieldRef> {
        t.map(|t| t.metadata.current_schema().as_struct().fields().to_vec())
            .unwrap_or_default()
    };
    let plain = |f: &NestedFieldRef| Column {
        from: f.name.clone(),
        to: f.name.clone(),
        name: f.name.clone(),
        ty: duckdb_type(&f.field_type),
        cast: false,
    };
    if let Some(schema) = newer {
        return schema.as_struct().fields().iter().map(plain).collect();
    }
    match (a, b) {
        (Some(_), Some(_)) => {
            let (fa, fb) = (fields(a), fields(b));
            fb.iter()
                .filter_map(|f| {
                    let old = fa.iter().find(|o| o.name == f.name)?;
                    let ty = duckdb_type(&f.field_type);
                    Some(Column {
                        cast: duckdb_type(&old.field_type) != ty,
                        ..plain(f)
                    })
                })
                .collect()
        }
        (Some(_), None) => fields(a).iter().map(plain).collect(),
        _ => fields(b).iter().map(plain).collect(),
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
pub fn schema_changes(a: &Schema, b: &Schema) -> Vec<ColumnChange> {
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
            None => out.push(ColumnChange {
                kind: ColumnChangeKind::Added,
                column: name.clone(),
                from: None,
                to: Some(duckdb_type(ty)),
            }),
            Some((_, old, old_ty)) => {
                if old != name {
                    out.push(ColumnChange {
                        kind: ColumnChangeKind::Renamed,
                        column: name.clone(),
                        from: Some(old.clone()),
                        to: Some(name.clone()),
                    });
                }
                if ty.is_primitive() && old_ty != ty {
                    out.push(ColumnChange {
                        kind: ColumnChangeKind::Retyped,
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
            out.push(ColumnChange {
                kind: ColumnChangeKind::Dropped,
                column: name.clone(),
                from: None,
                to: None,
            });
        }
    }
    out
}

/// The top-level columns added, dropped and retyped from `a` to `b`, by name (ignoring
/// case): for two tables of one name with different uuids, whose field ids say nothing.
pub fn schema_changes_by_name(a: &Schema, b: &Schema) -> Vec<ColumnChange> {
    let (fa, fb) = (a.as_struct().fields(), b.as_struct().fields());
    let find = |fs: &[NestedFieldRef], name: &str| {
        fs.iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
            .cloned()
    };
    let mut out = Vec::new();
    for f in fb {
        match find(fa, &f.name) {
            None => out.push(ColumnChange {
                kind: ColumnChangeKind::Added,
                column: f.name.clone(),
                from: None,
                to: Some(duckdb_type(&f.field_type)),
            }),
            // By the type DuckDB reads: nested field ids, docs and nullability aside.
            Some(old) if duckdb_type(&old.field_type) != duckdb_type(&f.field_type) => {
                out.push(ColumnChange {
                    kind: ColumnChangeKind::Retyped,
                    column: f.name.clone(),
                    from: Some(duckdb_type(&old.field_type)),
                    to: Some(duckdb_type(&f.field_type)),
                })
            }
            Some(_) => {}
        }
    }
    for f in fa {
        if find(fb, &f.name).is_none() {
            out.push(ColumnChange {
                kind: ColumnChangeKind::Dropped,
                column: f.name.clone(),
                from: None,
                to: None,
            });
        }
    }
    out
}

/// The comparison of the views `__lh_from.v` and `__lh_to.v` (columns `c0..c{n-1}`),
/// in a session of its own; no statement starts once the diff is cancelled.
struct Compare<'a> {
    session: &'a Session,
    cancelled: &'a AtomicBool,
    table: &'a str,
    /// The rows' text is held to this, as a query's answer is.
    max_bytes: u64,
    /// The answer memory the rows (read out of DuckDB, then as text) hold.
    charge: std::cell::RefCell<super::memory::Charge>,
}

impl Compare<'_> {
    fn check(&self) -> Result<()> {
        match self.cancelled.load(Ordering::SeqCst) {
            true => Err(Error::new(
                Kind::Timeout,
                Code::Interrupted,
                "the row diff was stopped",
            )),
            false => Ok(()),
        }
    }

    fn execute(&self, sql: &str) -> Result<()> {
        self.check()?;
        self.session
            .conn
            .execute_batch(sql)
            .map_err(|e| diff_error(self.table, e))
    }

    fn count(&self, sql: &str) -> Result<u64> {
        self.check()?;
        let v: i64 = self
            .session
            .conn
            .query_row(sql, [], |r| r.get(0))
            .map_err(|e| diff_error(self.table, e))?;
        Ok(v as u64)
    }

    /// The rows of `sql`, charged to the answer memory batch by batch as they come.
    fn fetch(&self, sql: &str) -> Result<Fetched<'_>> {
        self.check()?;
        let mut stmt = self
            .session
            .conn
            .prepare(sql)
            .map_err(|e| diff_error(self.table, e))?;
        let mut fetched = Fetched {
            batches: Vec::new(),
            bytes: 0,
            charge: &self.charge,
        };
        for batch in stmt
            .query_arrow([])
            .map_err(|e| diff_error(self.table, e))?
        {
            let size = batch.get_array_memory_size() as u64;
            self.charge.borrow_mut().grow(size)?;
            fetched.bytes += size;
            fetched.batches.push(batch);
        }
        Ok(fetched)
    }

    /// A batch's values as text (null as None), each value held to the rows' limit and
    /// charged as it is written.
    fn cells(&self, batch: &RecordBatch) -> Result<Vec<Vec<Option<String>>>> {
        let too_large = || self.too_large();
        let mut charge = self.charge.borrow_mut();
        cells(batch, &mut |v| {
            super::memory::text_of(v, self.max_bytes, &mut charge, &too_large)
        })
    }

    /// The counts, and at most `limit` rows.
    fn run(
        &self,
        n: usize,
        key: &[usize],
        names: &[String],
        limit: u64,
    ) -> Result<(RowCounts, Vec<ChangedRow>, bool)> {
        let all = (0..n)
            .map(|i| format!("c{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.execute(&format!(
            "CREATE TABLE added AS SELECT {all} FROM __lh_to.v EXCEPT ALL SELECT {all} FROM __lh_from.v;"
        ))?;
        self.execute(&format!(
            "CREATE TABLE removed AS SELECT {all} FROM __lh_from.v EXCEPT ALL SELECT {all} FROM __lh_to.v;"
        ))?;
        let added = self.count("SELECT count(*) FROM added")?;
        let removed = self.count("SELECT count(*) FROM removed")?;
        if key.is_empty() {
            let counts = RowCounts {
                added,
                removed,
                changed: None,
            };
            if limit == 0 {
                return Ok((counts, Vec::new(), added + removed > 0));
            }
            let batches = self.fetch(&format!(
                "SELECT * FROM (SELECT 1 AS ord, {all} FROM added UNION ALL \
                 SELECT 2, {all} FROM removed) ORDER BY ALL LIMIT {}",
                limit + 1
            ))?;
            let mut out = Vec::new();
            let mut bytes = 0u64;
            for batch in batches.iter() {
                for row in self.cells(batch)? {
                    bytes += row_bytes(&row);
                    let change = match row[0].as_deref() {
                        Some("1") => DiffKind::Added,
                        _ => DiffKind::Removed,
                    };
                    out.push(ChangedRow {
                        change,
                        values: row[1..].to_vec(),
                        before: None,
                        changed_columns: Vec::new(),
                    });
                }
                self.held(bytes)?;
            }
            let truncated = out.len() as u64 > limit;
            out.truncate(limit as usize);
            return Ok((counts, out, truncated));
        }
        // Rows pair by key, NULL matching NULL (as GROUP BY groups them).
        let on = |l: &str, r: &str| -> String {
            key.iter()
                .map(|&i| format!("{l}.c{i} IS NOT DISTINCT FROM {r}.c{i}"))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        let k: Vec<String> = key.iter().map(|&i| format!("c{i}")).collect();
        let group = k.join(", ");
        // A key that repeats among the rows that changed cannot pair them.
        let repeated = self.count(&format!(
            "SELECT (SELECT count(*) FROM (SELECT {group} FROM added GROUP BY {group} HAVING count(*) > 1)) \
             + (SELECT count(*) FROM (SELECT {group} FROM removed GROUP BY {group} HAVING count(*) > 1))"
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
        let changed = self.count(&format!(
            "SELECT count(*) FROM added n SEMI JOIN removed o ON {}",
            on("n", "o")
        ))?;
        let counts = RowCounts {
            added: added - changed,
            removed: removed - changed,
            changed: Some(changed),
        };
        if limit == 0 {
            return Ok((counts, Vec::new(), added + removed > 0));
        }
        let list = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join(", ");
        let keys = |side: &str| {
            key.iter()
                .map(|&i| format!("{side}.c{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let order: Vec<String> = (1..=key.len() + 1).map(|i| i.to_string()).collect();
        let sql = format!(
            "SELECT * FROM (\
             SELECT 0 AS ord, {kn}, {new}, {old}, {differs} FROM added n JOIN removed o ON {on} \
             UNION ALL SELECT 1, {kn}, {new}, {nulls}, {falses} FROM added n ANTI JOIN removed o ON {on} \
             UNION ALL SELECT 2, {ko}, {nulls}, {old}, {falses} FROM removed o ANTI JOIN added n ON {on}\
             ) ORDER BY {order} LIMIT {}",
            limit + 1,
            on = on("n", "o"),
            kn = keys("n"),
            ko = keys("o"),
            new = list(&|i| format!("n.c{i}")),
            old = list(&|i| format!("o.c{i}")),
            nulls = list(&|_| "NULL".to_string()),
            differs = list(&|i| format!("n.c{i} IS DISTINCT FROM o.c{i}")),
            falses = list(&|_| "false".to_string()),
            order = order.join(", "),
        );
        let batches = self.fetch(&sql)?;
        let mut out = Vec::new();
        let skip = 1 + key.len();
        let mut bytes = 0u64;
        for batch in batches.iter() {
            for row in self.cells(batch)? {
                bytes += row_bytes(&row);
                let new = row[skip..skip + n].to_vec();
                let old = row[skip + n..skip + 2 * n].to_vec();
                let flags = &row[skip + 2 * n..];
                out.push(match row[0].as_deref() {
                    Some("0") => ChangedRow {
                        change: DiffKind::Changed,
                        values: new,
                        before: Some(old),
                        changed_columns: flags
                            .iter()
                            .zip(names)
                            .filter(|(f, _)| f.as_deref() == Some("true"))
                            .map(|(_, n)| n.clone())
                            .collect(),
                    },
                    Some("1") => ChangedRow {
                        change: DiffKind::Added,
                        values: new,
                        before: None,
                        changed_columns: Vec::new(),
                    },
                    _ => ChangedRow {
                        change: DiffKind::Removed,
                        values: old,
                        before: None,
                        changed_columns: Vec::new(),
                    },
                });
            }
            self.held(bytes)?;
        }
        let truncated = out.len() as u64 > limit;
        out.truncate(limit as usize);
        Ok((counts, out, truncated))
    }

    fn held(&self, bytes: u64) -> Result<()> {
        if bytes > self.max_bytes {
            return Err(self.too_large());
        }
        Ok(())
    }

    fn too_large(&self) -> Error {
        Error::new(
            Kind::TooLarge,
            Code::ResultTooLarge,
            format!(
                "the rows of the diff are larger than the limit of {} bytes",
                self.max_bytes
            ),
        )
        .with_hint("ask for fewer rows (--limit); the counts come whole")
    }
}

/// Batches read out of DuckDB and what they are charged; the charge goes with them.
struct Fetched<'a> {
    batches: Vec<RecordBatch>,
    bytes: u64,
    charge: &'a std::cell::RefCell<super::memory::Charge>,
}

impl std::ops::Deref for Fetched<'_> {
    type Target = Vec<RecordBatch>;

    fn deref(&self) -> &Vec<RecordBatch> {
        &self.batches
    }
}

impl Drop for Fetched<'_> {
    fn drop(&mut self) {
        let mut c = self.charge.borrow_mut();
        let now = c.bytes();
        let _ = c.set(now.saturating_sub(self.bytes));
    }
}

fn row_bytes(row: &[Option<String>]) -> u64 {
    row.iter()
        .map(|c| c.as_ref().map_or(4, |s| s.len() as u64 + 3))
        .sum()
}

/// A batch's values as text, as `lh query` prints them (null as None), each made by
/// `text`.
fn cells(
    batch: &RecordBatch,
    text: &mut dyn FnMut(&dyn std::fmt::Display) -> Result<String>,
) -> Result<Vec<Vec<Option<String>>>> {
    let options = FormatOptions::default();
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::internal(format!("cannot format the diff: {e}")))?;
    let nulls: Vec<_> = batch.columns().iter().map(|c| c.logical_nulls()).collect();
    let mut rows = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let mut row = Vec::with_capacity(formatters.len());
        for (j, f) in formatters.iter().enumerate() {
            row.push(match nulls[j].as_ref().is_some_and(|n| n.is_null(i)) {
                true => None,
                false => Some(text(&f.value(i))?),
            });
        }
        rows.push(row);
    }
    Ok(rows)
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
                    c.kind,
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
                    ColumnChangeKind::Retyped,
                    "id",
                    Some("INTEGER"),
                    Some("BIGINT")
                ),
                (
                    ColumnChangeKind::Renamed,
                    "total",
                    Some("amount"),
                    Some("total")
                ),
                (
                    ColumnChangeKind::Retyped,
                    "total",
                    Some("FLOAT"),
                    Some("DOUBLE")
                ),
                // A new column under an old one's name is a new column; the old one is
                // dropped.
                (ColumnChangeKind::Added, "note", None, Some("VARCHAR")),
                (
                    ColumnChangeKind::Renamed,
                    "address.town",
                    Some("address.city"),
                    Some("address.town")
                ),
                (ColumnChangeKind::Dropped, "note", None, None),
            ]
        );
        assert!(schema_changes(&a, &a).is_empty());
    }
}
