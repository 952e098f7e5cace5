//! The SQL of a table's view at its snapshot: columns read by Iceberg field id (nested
//! struct, list and map fields too), one branch of a UNION ALL per physical schema, and
//! the snapshot's delete files applied (position deletes by an anti join on file and row
//! number, equality deletes by a NOT EXISTS on their columns). Pure text: what files
//! there are comes from the table service (`tables/files.rs`), where the statements run
//! from the commit catalogs (`commits.rs`).

use std::path::PathBuf;

use iceberg::spec::Type;

use crate::duck::{quote_ident, quote_literal};
use crate::tables::LoadedTable;
use crate::tables::files::{EqualityDeleteFile, TableFiles};
use crate::tables::stats::{PhysicalColumn, PhysicalKind};
use crate::tables::types::duckdb_type;

/// The name a table's view has in a commit's catalog (DuckDB's, quoted: `a."b.t"` and
/// `"a.b".t` are two views).
pub fn view_name(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| quote_ident(p))
        .collect::<Vec<_>>()
        .join(".")
}

/// The statements that expose a table as a view at its snapshot.
///
/// Columns are matched by Iceberg field id, as the spec says: for each group of files
/// with the same physical columns, the view selects each current column from the
/// physical column with its field id (under whatever name it was written), casts it to
/// the current type (a no-op DuckDB removes when nothing changed, so projections and
/// filters still reach the Parquet reader), or yields NULL when the files predate the
/// column. Groups are combined with UNION ALL.
///
/// Position deletes (merge-on-read) name rows by data file and 0-based position: the
/// data files are read with their path and row number (`filename`, `file_row_number`),
/// and an anti join drops the rows the delete files name (their `file_path` taken as a
/// local path, in any spelling of a file URL). Equality deletes name rows by the values
/// of some columns: a row goes when a delete file of a later sequence number, in its
/// partition or unpartitioned, holds the same values (NULL matching NULL); each data
/// row carries its file's sequence number and partition for that test. Filters on the
/// table's columns still reach the Parquet reader below the joins.
pub fn view_sql(parts: &[String], table: &LoadedTable, files: &TableFiles) -> String {
    view_sql_as(parts, table.metadata.current_schema(), files)
}

/// [`view_sql`] with the columns of `schema`, one of the table's schemas (a row diff
/// reads both versions of a table through the newer one's): columns are matched by
/// field id, so each file reads as that schema has it.
pub fn view_sql_as(parts: &[String], schema: &iceberg::spec::Schema, files: &TableFiles) -> String {
    let mut sql = String::new();
    let [ns, _] = parts else {
        unreachable!("checked by the caller")
    };
    sql.push_str(&format!(
        "CREATE SCHEMA IF NOT EXISTS {};\n",
        quote_ident(ns)
    ));
    let qualified = view_name(parts);
    let fields = schema.as_struct().fields();
    // The view's own columns (file, position, sequence, partition, keys) get a prefix no
    // column of the table starts with, so that none can stand in for them.
    let p = internal_prefix(fields);
    let positions = !files.position_deletes.is_empty() && !files.groups.is_empty();
    let equalities = !files.equality_deletes.is_empty() && !files.groups.is_empty();
    let select = |physical: Option<&[PhysicalColumn]>| -> String {
        let mut cols: Vec<String> = fields
            .iter()
            .map(|f| {
                let value = match physical.and_then(|cols| cols.iter().find(|c| c.id == f.id)) {
                    Some(c) => read_as(&quote_ident(&c.name), &f.field_type, c, 0),
                    None => format!("CAST(NULL AS {})", duckdb_type(&f.field_type)),
                };
                format!("{value} AS {}", quote_ident(&f.name))
            })
            .collect();
        if positions || equalities {
            cols.push(format!("{p}file"));
        }
        if positions {
            cols.push(format!("file_row_number AS {p}pos"));
        }
        cols.join(", ")
    };
    let list = |paths: &[PathBuf]| -> String {
        paths
            .iter()
            .map(|p| quote_literal(&p.display().to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let body = if files.groups.is_empty() {
        format!("SELECT {} WHERE false", select(None))
    } else {
        let mut options = String::new();
        if positions || equalities {
            options.push_str(&format!(", filename = '{p}file'"));
        }
        if positions {
            options.push_str(", file_row_number = true");
        }
        let parts: Vec<String> = files
            .groups
            .iter()
            .map(|(cols, paths)| {
                format!(
                    "SELECT {} FROM read_parquet([{}]{options})",
                    select(Some(cols)),
                    list(paths)
                )
            })
            .collect();
        parts.join(" UNION ALL ")
    };
    let body = if positions || equalities {
        let names: Vec<String> = fields.iter().map(|f| quote_ident(&f.name)).collect();
        let mut rows = format!("({body})");
        if equalities {
            let values: Vec<String> = files
                .data
                .iter()
                .map(|(p, seq, part)| {
                    format!(
                        "({}, {seq}::BIGINT, {})",
                        quote_literal(&p.display().to_string()),
                        quote_literal(part)
                    )
                })
                .collect();
            rows = format!(
                "(SELECT __lh_d.*, __lh_m.seq AS {p}seq, __lh_m.part AS {p}part \
                 FROM {rows} AS __lh_d JOIN (VALUES {}) AS __lh_m(file, seq, part) \
                 ON __lh_m.file = __lh_d.{p}file)",
                values.join(", ")
            );
        }
        let mut body = format!("SELECT {} FROM {rows} AS __lh_rows", names.join(", "));
        if positions && files.objects.is_empty() {
            body.push_str(&format!(
                " ANTI JOIN (\
                 SELECT regexp_replace(file_path, '^file:(//localhost|//)?', '') AS file, pos \
                 FROM read_parquet([{}])) AS __lh_deletes \
                 ON __lh_deletes.file = __lh_rows.{p}file AND __lh_deletes.pos = __lh_rows.{p}pos",
                list(&files.position_deletes)
            ));
        } else if positions {
            // S3: a delete names the object (`s3://bucket/key`, or `s3a://`); the rows
            // come from the read cache's local copy of it.
            let map: Vec<String> = files
                .objects
                .iter()
                .map(|(local, object)| {
                    format!(
                        "({}, {})",
                        quote_literal(&local.display().to_string()),
                        quote_literal(object)
                    )
                })
                .collect();
            body.push_str(&format!(
                " ANTI JOIN (\
                 SELECT __lh_map.local AS file, __lh_d.pos AS pos \
                 FROM read_parquet([{}]) AS __lh_d \
                 JOIN (VALUES {}) AS __lh_map(local, object) \
                 ON __lh_map.object = regexp_replace(__lh_d.file_path, '^s3[an]?://', '')) AS __lh_deletes \
                 ON __lh_deletes.file = __lh_rows.{p}file AND __lh_deletes.pos = __lh_rows.{p}pos",
                list(&files.position_deletes),
                map.join(", ")
            ));
        }
        if equalities {
            let mut sets: Vec<(&[i32], Vec<&EqualityDeleteFile>)> = Vec::new();
            for d in &files.equality_deletes {
                match sets
                    .iter_mut()
                    .find(|(ids, _)| *ids == d.field_ids.as_slice())
                {
                    Some((_, ds)) => ds.push(d),
                    None => sets.push((&d.field_ids, vec![d])),
                }
            }
            let tests: Vec<String> = sets
                .iter()
                .map(|(ids, deletes)| {
                    let key_fields: Vec<_> = ids
                        .iter()
                        .filter_map(|id| fields.iter().find(|f| f.id == *id))
                        .collect();
                    let rows: Vec<String> = deletes
                        .iter()
                        .map(|d| {
                            let keys: Vec<String> = key_fields
                                .iter()
                                .enumerate()
                                .map(|(i, f)| {
                                    let ty = duckdb_type(&f.field_type);
                                    match d.columns.iter().find(|c| c.id == f.id) {
                                        Some(c) => format!(
                                            "CAST({} AS {ty}) AS {p}k{i}",
                                            quote_ident(&c.name)
                                        ),
                                        None => format!("CAST(NULL AS {ty}) AS {p}k{i}"),
                                    }
                                })
                                .collect();
                            let part = d
                                .partition
                                .as_deref()
                                .map_or("CAST(NULL AS VARCHAR)".to_string(), quote_literal);
                            format!(
                                "SELECT {}, {}::BIGINT AS {p}seq, {part} AS {p}part \
                                 FROM read_parquet([{}])",
                                keys.join(", "),
                                d.sequence,
                                quote_literal(&d.path.display().to_string())
                            )
                        })
                        .collect();
                    let matches: Vec<String> = key_fields
                        .iter()
                        .enumerate()
                        .map(|(i, f)| {
                            format!(
                                "__lh_e.{p}k{i} IS NOT DISTINCT FROM __lh_rows.{}",
                                quote_ident(&f.name)
                            )
                        })
                        .collect();
                    format!(
                        "NOT EXISTS (SELECT 1 FROM ({}) AS __lh_e \
                         WHERE __lh_e.{p}seq > __lh_rows.{p}seq \
                         AND (__lh_e.{p}part IS NULL OR __lh_e.{p}part = __lh_rows.{p}part) \
                         AND {})",
                        rows.join(" UNION ALL "),
                        matches.join(" AND ")
                    )
                })
                .collect();
            body.push_str(&format!(" WHERE {}", tests.join(" AND ")));
        }
        body
    } else {
        body
    };
    sql.push_str(&format!("CREATE VIEW {qualified} AS {body};\n"));
    sql
}

/// A prefix for a view's own columns that no column of the table starts with (DuckDB
/// compares names regardless of case).
fn internal_prefix(fields: &[iceberg::spec::NestedFieldRef]) -> String {
    let taken = |p: &str| fields.iter().any(|f| f.name.to_lowercase().starts_with(p));
    let mut p = "__lh_".to_string();
    let mut n = 0;
    while taken(&p) {
        n += 1;
        p = format!("__lh{n}_");
    }
    p
}

/// The expression that reads the physical column `src` (described by `physical`) as a
/// column of Iceberg type `ty`, matching nested fields by field id as the top-level ones
/// are: a struct field renamed since the file was written reads under its new name, one
/// added since reads as NULL, one dropped is not read. When the file's layout is the
/// schema's (the usual case), a plain cast, which DuckDB removes when the types agree, so
/// that projections and filters still reach the Parquet reader.
fn read_as(src: &str, ty: &Type, physical: &PhysicalColumn, depth: usize) -> String {
    if same_layout(ty, physical) {
        return format!("CAST({src} AS {})", duckdb_type(ty));
    }
    let field =
        |parent: &str, name: &str| format!("struct_extract({parent}, {})", quote_literal(name));
    match (ty, &physical.kind) {
        (Type::Struct(st), PhysicalKind::Struct(children)) => {
            let fields: Vec<String> = st
                .fields()
                .iter()
                .map(|f| {
                    let value = match children.iter().find(|c| c.id == f.id) {
                        Some(c) => read_as(&field(src, &c.name), &f.field_type, c, depth + 1),
                        None => format!("CAST(NULL AS {})", duckdb_type(&f.field_type)),
                    };
                    format!("{} := {value}", quote_ident(&f.name))
                })
                .collect();
            format!(
                "CASE WHEN {src} IS NULL THEN NULL ELSE struct_pack({}) END",
                fields.join(", ")
            )
        }
        (Type::List(l), PhysicalKind::List(element)) => {
            let x = format!("__lh_x{depth}");
            format!(
                "list_transform({src}, lambda {x}: {})",
                read_as(&x, &l.element_field.field_type, element, depth + 1)
            )
        }
        (Type::Map(m), PhysicalKind::Map(key, value)) => {
            let e = format!("__lh_e{depth}");
            format!(
                "map_from_entries(list_transform(map_entries({src}), lambda {e}: struct_pack(\
                 key := {}, value := {})))",
                read_as(&field(&e, "key"), &m.key_field.field_type, key, depth + 1),
                read_as(
                    &field(&e, "value"),
                    &m.value_field.field_type,
                    value,
                    depth + 1
                )
            )
        }
        // A file whose column is of another kind than the schema says: DuckDB's cast
        // decides (and fails clearly when it cannot).
        _ => format!("CAST({src} AS {})", duckdb_type(ty)),
    }
}

/// Whether a physical column has the nested fields of `ty`, in its order, with its names
/// and field ids (primitive types may differ: a cast promotes them).
fn same_layout(ty: &Type, physical: &PhysicalColumn) -> bool {
    match (ty, &physical.kind) {
        (Type::Primitive(_), PhysicalKind::Primitive) => true,
        (Type::Struct(st), PhysicalKind::Struct(children)) => {
            st.fields().len() == children.len()
                && st
                    .fields()
                    .iter()
                    .zip(children)
                    .all(|(f, c)| f.id == c.id && f.name == c.name && same_layout(&f.field_type, c))
        }
        (Type::List(l), PhysicalKind::List(element)) => {
            l.element_field.id == element.id && same_layout(&l.element_field.field_type, element)
        }
        (Type::Map(m), PhysicalKind::Map(key, value)) => {
            m.key_field.id == key.id
                && m.value_field.id == value.id
                && same_layout(&m.key_field.field_type, key)
                && same_layout(&m.value_field.field_type, value)
        }
        _ => false,
    }
}
