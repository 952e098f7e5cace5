//! Pruning: which data files of a table a query's filters leave out, from the manifests
//! alone: a file whose partition values or column bounds show that none of its rows
//! passes a filter (`sql::Filter`, a conjunct of the query's WHERE) is not in the
//! statement's view. Partition values decide through the transform (monotonic ones
//! for ranges, a bucket for equality only); bounds by the comparison itself; a column
//! all NULL in a file passes no comparison. A filter lh cannot read exactly (a constant
//! that does not convert to the column's type, a type without order here) prunes
//! nothing: pruning only ever leaves out files the query would not have read rows of.

use chrono::{NaiveDate, NaiveDateTime};
use iceberg::spec::{Datum, PrimitiveLiteral, PrimitiveType, Transform, Type};

use super::sql::{Constant, Filter, Op};
use crate::tables::LoadedTable;
use crate::tables::files::LiveFile;

/// A filter bound to a table: its column's field id, and the constants as its type.
#[derive(Debug, Clone)]
pub struct Bound {
    field: i32,
    op: Op,
    values: Vec<Datum>,
}

/// The filters of `filters` that bind to `table`'s current schema.
pub fn bind(table: &LoadedTable, filters: &[Filter]) -> Vec<Bound> {
    let schema = table.metadata.current_schema();
    filters
        .iter()
        .filter_map(|f| {
            let field = schema.as_struct().field_by_name(&f.column).or_else(|| {
                schema
                    .as_struct()
                    .fields()
                    .iter()
                    .find(|x| x.name.eq_ignore_ascii_case(&f.column))
            })?;
            let Type::Primitive(ty) = field.field_type.as_ref() else {
                return None;
            };
            let values = f
                .values
                .iter()
                .map(|c| datum(c, ty))
                .collect::<Option<Vec<_>>>()?;
            (!values.is_empty()).then_some(Bound {
                field: field.id,
                op: f.op,
                values,
            })
        })
        .collect()
}

/// A constant as DuckDB compares it with the column, when lh can say exactly: plain text
/// is cast to the column's type; text cast to a type makes DuckDB cast the column
/// instead unless the types agree (a date to a timestamp at midnight), so only those
/// cases are taken.
fn datum(c: &Constant, ty: &PrimitiveType) -> Option<Datum> {
    let bare_date = |t: &str| NaiveDate::parse_from_str(t.trim(), "%Y-%m-%d").ok();
    let midnight = |t: &str| {
        bare_date(t).and_then(|d| Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros()))
    };
    let days =
        |d: NaiveDate| i32::try_from((d - NaiveDate::from_ymd_opt(1970, 1, 1)?).num_days()).ok();
    match (ty, c) {
        (PrimitiveType::Int, Constant::Integer(i)) => i32::try_from(*i).ok().map(Datum::int),
        (PrimitiveType::Long, Constant::Integer(i)) => Some(Datum::long(*i)),
        (PrimitiveType::Int, Constant::Text(t)) => t.parse::<i32>().ok().map(Datum::int),
        (PrimitiveType::Long, Constant::Text(t)) => t.parse::<i64>().ok().map(Datum::long),
        (PrimitiveType::String, Constant::Text(t)) => Some(Datum::string(t)),
        (PrimitiveType::String, Constant::Typed { text, to }) if to == "VARCHAR" => {
            Some(Datum::string(text))
        }
        (PrimitiveType::Date, Constant::Text(t)) => days(bare_date(t)?).map(Datum::date),
        (PrimitiveType::Date, Constant::Typed { text, to }) if to == "DATE" => {
            days(bare_date(text)?).map(Datum::date)
        }
        (PrimitiveType::Timestamp, Constant::Text(t)) => micros(t).map(Datum::timestamp_micros),
        (PrimitiveType::Timestamp, Constant::Typed { text, to }) => match to.as_str() {
            "TIMESTAMP" => micros(text),
            "DATE" => midnight(text),
            _ => None,
        }
        .map(Datum::timestamp_micros),
        // lh's DuckDB reads a time without an offset in UTC.
        (PrimitiveType::Timestamptz, Constant::Text(t)) => micros(t)
            .or_else(|| {
                chrono::DateTime::parse_from_rfc3339(t)
                    .ok()
                    .map(|d| d.timestamp_micros())
            })
            .map(Datum::timestamptz_micros),
        (PrimitiveType::Timestamptz, Constant::Typed { text, to }) => match to.as_str() {
            "TIMESTAMP" => micros(text),
            "TIMESTAMP WITH TIME ZONE" => micros(text).or_else(|| {
                chrono::DateTime::parse_from_rfc3339(text)
                    .ok()
                    .map(|d| d.timestamp_micros())
            }),
            "DATE" => midnight(text),
            _ => None,
        }
        .map(Datum::timestamptz_micros),
        _ => None,
    }
}

/// `2026-11-03`, `2026-11-03 10:00[:00[.123456]]` (or with `T`): microseconds since
/// 1970 of that wall-clock time.
fn micros(t: &str) -> Option<i64> {
    let t = t.trim();
    if let Ok(d) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros());
    }
    for f in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(d) = NaiveDateTime::parse_from_str(t, f) {
            return Some(d.and_utc().timestamp_micros());
        }
    }
    None
}

/// Whether a file may hold rows that pass every filter.
pub fn may_match(table: &LoadedTable, filters: &[Bound], f: &LiveFile) -> bool {
    filters.iter().all(|b| may_pass(table, b, f))
}

fn may_pass(table: &LoadedTable, b: &Bound, f: &LiveFile) -> bool {
    let df = &f.file;
    // Every value NULL: no comparison is true.
    if let (Some(n), Some(nulls)) = (
        df.value_counts().get(&b.field),
        df.null_value_counts().get(&b.field),
    ) && *n > 0
        && n == nulls
    {
        return false;
    }
    let any = |test: &dyn Fn(Op, &Datum) -> bool| match b.op {
        Op::In => b.values.iter().any(|v| test(Op::Eq, v)),
        op => b.values.first().is_some_and(|v| test(op, v)),
    };
    // Column bounds.
    let lower = df.lower_bounds().get(&b.field);
    let upper = df.upper_bounds().get(&b.field);
    let in_bounds = |op: Op, v: &Datum| -> bool {
        use std::cmp::Ordering::*;
        let lo = lower.and_then(|l| l.partial_cmp(v));
        let hi = upper.and_then(|u| u.partial_cmp(v));
        !match op {
            Op::Eq | Op::In => lo == Some(Greater) || hi == Some(Less),
            Op::Lt => matches!(lo, Some(Greater | Equal)),
            Op::Le => lo == Some(Greater),
            Op::Gt => matches!(hi, Some(Less | Equal)),
            Op::Ge => hi == Some(Less),
        }
    };
    if !any(&in_bounds) {
        return false;
    }
    // Partition values of the fields the column's values decide.
    let Some(spec) = table.metadata.partition_spec_by_id(f.spec_id) else {
        return true;
    };
    for (i, pf) in spec.fields().iter().enumerate() {
        if pf.source_id != b.field || pf.transform == Transform::Void {
            continue;
        }
        let value = match df.partition().iter().nth(i) {
            None => continue,
            // The column is NULL in every row of this partition.
            Some(None) => return false,
            Some(Some(v)) => v,
        };
        let iceberg::spec::Literal::Primitive(value) = value else {
            continue;
        };
        let Ok(func) = iceberg::transform::create_transform_function(&pf.transform) else {
            continue;
        };
        let in_partition = |op: Op, v: &Datum| -> bool {
            // Ranges through a monotonic transform hold with their bound included.
            let op = match (&pf.transform, op) {
                (Transform::Identity, op) => op,
                (Transform::Bucket(_), Op::Eq | Op::In) => Op::Eq,
                (Transform::Bucket(_), _) => return true,
                (_, Op::Lt) => Op::Le,
                (_, Op::Gt) => Op::Ge,
                (_, op) => op,
            };
            let Ok(Some(t)) = func.transform_literal(v) else {
                return true;
            };
            compare(value, t.literal(), op)
        };
        if !any(&in_partition) {
            return false;
        }
    }
    true
}

/// Whether `partition op value` may hold; true when they do not compare.
fn compare(partition: &PrimitiveLiteral, value: &PrimitiveLiteral, op: Op) -> bool {
    use std::cmp::Ordering::*;
    let Some(o) = partition.partial_cmp(value) else {
        return true;
    };
    if std::mem::discriminant(partition) != std::mem::discriminant(value) {
        return true;
    }
    match op {
        Op::Eq | Op::In => o == Equal,
        Op::Lt => o == Less,
        Op::Le => o != Greater,
        Op::Gt => o == Greater,
        Op::Ge => o != Less,
    }
}

#[cfg(test)]
mod tests {
    use lh_api::ImportMode;

    use crate::sql::{self, Constant, Filter, Op};
    use crate::tables::write::tests_support::job;
    use crate::tables::write::write_table;

    fn filters(q: &str) -> Vec<(String, Vec<Filter>)> {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        let s: String = conn
            .query_row("SELECT json_serialize_sql(?::VARCHAR)", [q], |r| r.get(0))
            .unwrap();
        sql::analyze(&s)
            .unwrap()
            .filters
            .into_iter()
            .map(|(k, v)| (k.join("."), v))
            .collect()
    }

    fn f(column: &str, op: Op, values: Vec<Constant>) -> Filter {
        Filter {
            column: column.into(),
            op,
            values,
        }
    }

    #[test]
    fn filters_come_from_the_top_level_where_only() {
        use Constant::*;
        assert_eq!(
            filters(
                "SELECT * FROM raw.t WHERE ts >= DATE '2026-01-01' AND 5 > n AND s IN ('a', 'b') AND k BETWEEN 1 AND 3"
            ),
            vec![(
                "raw.t".into(),
                vec![
                    f(
                        "ts",
                        Op::Ge,
                        vec![Typed {
                            text: "2026-01-01".into(),
                            to: "DATE".into()
                        }]
                    ),
                    f("n", Op::Lt, vec![Integer(5)]),
                    f("s", Op::In, vec![Text("a".into()), Text("b".into())]),
                    f("k", Op::Ge, vec![Integer(1)]),
                    f("k", Op::Le, vec![Integer(3)]),
                ]
            )]
        );
        // Qualified through aliases of a regular join, either side.
        assert_eq!(
            filters(
                "SELECT * FROM raw.t AS x LEFT JOIN raw.u ON x.id = u.id WHERE x.a = 1 AND u.b < 'z'"
            ),
            vec![
                ("raw.t".into(), vec![f("a", Op::Eq, vec![Integer(1)])]),
                ("raw.u".into(), vec![f("b", Op::Lt, vec![Text("z".into())])]),
            ]
        );
        for none in [
            // Not every row passes it.
            "SELECT * FROM raw.t WHERE a = 1 OR b = 2",
            // The table is read twice.
            "SELECT * FROM raw.t WHERE a = 1 AND b IN (SELECT b FROM raw.t)",
            "SELECT * FROM raw.t x JOIN raw.t y ON x.id = y.id WHERE x.a = 1",
            // Which row an ASOF join matches depends on the rows a filter removes.
            "SELECT * FROM raw.t x ASOF JOIN raw.u y ON x.ts >= y.ts WHERE y.a = 1",
            // An unqualified column of a join; an expression; a decimal; a subquery.
            "SELECT * FROM raw.t JOIN raw.u USING (id) WHERE a = 1",
            "SELECT * FROM raw.t WHERE a + 1 = 2",
            "SELECT * FROM raw.t WHERE a = 1.5",
            "SELECT * FROM (SELECT * FROM raw.t) WHERE a = 1",
            "SELECT * FROM raw.t WHERE a = 1 UNION ALL SELECT * FROM raw.u",
            "SELECT * FROM raw.t WHERE a IS NULL",
            // Columns renamed in the FROM; a sample, taken before the WHERE.
            "SELECT * FROM raw.t AS x(b, a) WHERE a = 1",
            "SELECT * FROM raw.t WHERE a = 1 USING SAMPLE 10 ROWS",
            "SELECT * FROM raw.t TABLESAMPLE 10% WHERE a = 1",
        ] {
            assert_eq!(filters(none), vec![], "{none}");
        }
    }

    /// Every filter, pruned or not, gives the rows DuckDB gives on every file; and a
    /// day's query reads its day's files only.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pruned_queries_return_what_full_scans_return() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = crate::tests::setup(dir.path()).await;
        let mut csv = String::from("id,ts,s,d,n\n");
        for i in 0..200i64 {
            let day = 1 + i % 20;
            csv.push_str(&format!(
                "{i},2026-10-{day:02} {:02}:30:00,{},2026-10-{day:02},{}\n",
                i % 24,
                ["apple", "apricot", "banana", "blueberry", "cherry"][i as usize % 5],
                if i % 7 == 0 {
                    String::new()
                } else {
                    (i % 13).to_string()
                }
            ));
        }
        let mut j = job(&ctx, "raw.p", ImportMode::Create, "p.csv", &csv);
        j.partition_by = Some("day(ts), bucket(4, id), truncate(2, s)".into());
        write_table(&tables, &ctx, j).await.unwrap();
        // The same rows in one file: the reference.
        let mut j = job(&ctx, "raw.flat", ImportMode::Create, "p.csv", &csv);
        j.partition_by = None;
        write_table(&tables, &ctx, j).await.unwrap();
        let all_files = {
            let head = tables.catalog.resolve("main").await.unwrap().commit;
            let t = tables.load(&head, "raw.p").await.unwrap().unwrap();
            tables.live_files(&t).await.unwrap().data.len() as u64
        };
        assert!(all_files > 50, "{all_files}");
        let mut pruned_somewhere = 0;
        for cond in [
            "ts >= '2026-10-05' AND ts < '2026-10-06'",
            "ts >= TIMESTAMP '2026-10-05 12:00:00' AND ts <= '2026-10-07'",
            "ts > '2026-10-19 23:30'",
            "ts < '2026-10-01 01:00:00'",
            "ts BETWEEN '2026-10-03' AND '2026-10-04'",
            "d = DATE '2026-10-09'",
            "d IN ('2026-10-01', '2026-10-20')",
            "id = 42",
            "id IN (7, 8, 199)",
            "42 = id",
            "id > 190",
            "s = 'banana'",
            "s < 'b'",
            "s >= 'blue'",
            "s IN ('cherry', 'zzz')",
            "n = 3",
            "n < 1",
            "n >= 12 AND id < 100",
            "n = 12",
            "n >= 12",
            "ts = '2026-10-10 10:30:00'",
            "ts >= '2031-01-01'",
            // A DATE cast drops a time of day; DuckDB compares the column as a date.
            "ts > DATE '2026-10-05 23:59'",
            "d = TIMESTAMP '2026-10-09 00:00:00'",
            "d < '2026-10-03 12:00'",
            "s = CAST('banana' AS VARCHAR)",
            "ts >= CAST('2026-10-18' AS TIMESTAMP WITH TIME ZONE)",
        ] {
            let q = |from: &str| {
                format!(
                    "SELECT id, CAST(ts AS VARCHAR) AS ts, s, n FROM {from} WHERE {cond} ORDER BY id"
                )
            };
            let got = engine.run(&q("raw.p"), "main", None, None).await.unwrap();
            // A subquery is never pruned: every file.
            let want = engine
                .run(&q("(SELECT * FROM raw.flat)"), "main", None, None)
                .await
                .unwrap();
            assert_eq!(want.files_read, 1);
            let text = |b: &[arrow::array::RecordBatch]| {
                arrow::util::pretty::pretty_format_batches(b)
                    .unwrap()
                    .to_string()
            };
            assert_eq!(text(&got.batches), text(&want.batches), "{cond}");
            if got.files_read < all_files {
                pruned_somewhere += 1;
            }
            if cond.starts_with("ts >= '2026-10-05' AND") || cond.contains("BETWEEN") {
                // One day of twenty, in at most its 4 buckets x 5 prefixes.
                assert!(got.files_read <= 20, "{cond}: {} files", got.files_read);
            }
        }
        assert!(pruned_somewhere >= 15, "{pruned_somewhere}");
    }
}
