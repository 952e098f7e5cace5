//! Partitioned writes: a table's Iceberg partition spec as DuckDB expressions.
//!
//! A write into a partitioned table computes each row's partition tuple in DuckDB
//! (`Partitioner::columns`), numbers the distinct tuples, and has DuckDB write one set of
//! files per tuple (`COPY ... PARTITION_BY`); each file's Iceberg partition value is the
//! tuple read back (`Partitioner::values`). The expressions follow the Iceberg spec's
//! transforms exactly (checked against iceberg-rust's own transforms by the tests
//! below): `year`, `month`, `day` and `hour` count whole units since 1970-01-01 00:00
//! UTC, rounding down; `truncate` rounds integers down to a multiple of the width and
//! keeps a string's first code points; `bucket` is the spec's 32-bit Murmur3 hash, taken
//! by a scalar function registered on the write's connection (`lh_bucket`) that applies
//! iceberg-rust's own bucket transform.
//!
//! `--partition-by 'day(ts), bucket(16, id)'` is parsed by [`parse_spec`].

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type};
use duckdb::vscalar::{ArrowFunctionSignature, VArrowScalar};
use iceberg::spec::{
    Literal, PartitionSpec, PrimitiveLiteral, PrimitiveType, Schema, Struct, Transform, Type,
    UnboundPartitionSpec,
};

use crate::duck::{quote_ident, quote_literal};
use crate::error::{Code, Error, Result};

/// At most this many partitions in one write: each is a set of open files while DuckDB
/// writes, and each a manifest entry.
pub const MAX_PARTITIONS_PER_WRITE: u64 = 10_000;

/// The fields `text` describes, unchecked against any schema: each a transform and a
/// column. What the planner checks before a model runs.
pub fn parse_fields(text: &str) -> Result<Vec<(Transform, String)>> {
    let bad = |msg: String| bad_spec(msg);
    let mut out = Vec::new();
    for part in split_fields(text) {
        let part = part.trim();
        if part.is_empty() {
            return Err(bad(format!("'{text}' has an empty partition field")));
        }
        let (transform, column) = match part.split_once('(') {
            None => (Transform::Identity, part.to_string()),
            Some((func, rest)) => {
                let args = rest
                    .strip_suffix(')')
                    .ok_or_else(|| bad(format!("'{part}' lacks its closing parenthesis")))?;
                let args: Vec<&str> = args.split(',').map(str::trim).collect();
                let func = func.trim().to_ascii_lowercase();
                let number = |what: &str| -> Result<u32> {
                    match args.as_slice() {
                        [n, _] => n.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                            bad(format!("'{part}': the {what} must be a positive integer"))
                        }),
                        _ => Err(bad(format!(
                            "'{part}' takes two arguments: {func}(N, column)"
                        ))),
                    }
                };
                let transform = match func.as_str() {
                    "identity" => Transform::Identity,
                    "year" | "years" => Transform::Year,
                    "month" | "months" => Transform::Month,
                    "day" | "days" => Transform::Day,
                    "hour" | "hours" => Transform::Hour,
                    "void" => Transform::Void,
                    "bucket" => Transform::Bucket(number("bucket count")?),
                    "truncate" => Transform::Truncate(number("width")?),
                    other => return Err(bad(format!("'{other}' is not a partition transform"))),
                };
                let column = match (&transform, args.as_slice()) {
                    (Transform::Bucket(_) | Transform::Truncate(_), [_, c]) => c.to_string(),
                    (Transform::Bucket(_) | Transform::Truncate(_), _) => unreachable!(),
                    (_, [c]) if !c.is_empty() => c.to_string(),
                    _ => return Err(bad(format!("'{part}' takes one column: {func}(column)"))),
                };
                (transform, column)
            }
        };
        out.push((transform, column.trim_matches('"').to_string()));
    }
    Ok(out)
}

fn bad_spec(msg: String) -> Error {
    Error::bad_request(Code::BadPartitionSpec, msg).with_hint(
        "write fields like 'day(ts), bucket(16, id), truncate(4, name), region' \
         (identity, year, month, day, hour, bucket, truncate, void)",
    )
}

/// The partition spec that `text` describes for a table of `schema`: comma-separated
/// fields, each a column (identity) or `identity(c)`, `year(c)`, `month(c)`, `day(c)`,
/// `hour(c)`, `bucket(N, c)`, `truncate(W, c)`, or `void(c)`. Field names follow
/// Spark's: `c` for identity, `c_day`, `c_bucket`, `c_trunc`, ...
pub fn parse_spec(text: &str, schema: &Schema) -> Result<UnboundPartitionSpec> {
    let bad = bad_spec;
    let mut b = UnboundPartitionSpec::builder();
    let mut names = std::collections::BTreeSet::new();
    for (transform, column) in parse_fields(text)? {
        let part = match transform {
            Transform::Identity => column.clone(),
            Transform::Bucket(n) => format!("bucket({n}, {column})"),
            Transform::Truncate(w) => format!("truncate({w}, {column})"),
            ref t => format!("{t}({column})"),
        };
        let field = schema.as_struct().field_by_name(&column).ok_or_else(|| {
            bad(format!(
                "'{part}': the table has no column '{column}' (its columns: {})",
                schema
                    .as_struct()
                    .fields()
                    .iter()
                    .map(|f| f.name.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        transform.result_type(&field.field_type).map_err(|_| {
            bad(format!(
                "'{part}': {transform} cannot apply to '{column}', a {} column",
                field.field_type
            ))
        })?;
        let name = match transform {
            Transform::Identity => column.clone(),
            Transform::Year => format!("{column}_year"),
            Transform::Month => format!("{column}_month"),
            Transform::Day => format!("{column}_day"),
            Transform::Hour => format!("{column}_hour"),
            Transform::Bucket(_) => format!("{column}_bucket"),
            Transform::Truncate(_) => format!("{column}_trunc"),
            Transform::Void => format!("{column}_null"),
            Transform::Unknown => unreachable!(),
        };
        if !names.insert(name.clone()) {
            return Err(bad(format!(
                "'{text}' names the partition field '{name}' twice"
            )));
        }
        b = b
            .add_partition_field(field.id, name, transform)
            .map_err(|e| bad(format!("'{part}': {}", e.message())))?;
    }
    if names.is_empty() {
        return Err(bad("the partition spec is empty".to_string()));
    }
    let spec = b.build();
    // Checked now, so that a spec lh cannot write fails before anything is read.
    let bound = spec
        .clone()
        .bind(Arc::new(schema.clone()))
        .map_err(|e| bad(e.message().to_string()))?;
    Partitioner::new(&bound, schema)?;
    Ok(spec)
}

/// Whether `spec` partitions like `text` (same columns, same transforms, in order).
pub fn same_spec(text: &str, spec: &PartitionSpec, schema: &Schema) -> Result<bool> {
    let wanted = parse_spec(text, schema)?;
    Ok(wanted.fields().len() == spec.fields().len()
        && wanted
            .fields()
            .iter()
            .zip(spec.fields())
            .all(|(a, b)| a.source_id == b.source_id && a.transform == b.transform))
}

/// Splits on the commas between fields, not those inside `bucket(16, id)`.
fn split_fields(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// A partition spec as DuckDB computes it.
#[derive(Debug, Clone)]
pub struct Partitioner {
    fields: Vec<FieldExpr>,
    bucket: bool,
    /// What the columns a write adds are named with: no column of the table starts
    /// with it.
    prefix: String,
}

#[derive(Debug, Clone)]
struct FieldExpr {
    /// The DuckDB expression of the field's value, in lh's representation of its type
    /// (see `literal`).
    sql: String,
    /// The field's Iceberg type.
    result: PrimitiveType,
}

impl Partitioner {
    /// The partitioner of `spec`, or `None` when the spec partitions nothing (no field,
    /// or only `void` ones).
    pub fn new(spec: &PartitionSpec, schema: &Schema) -> Result<Option<Partitioner>> {
        if spec.fields().iter().all(|f| f.transform == Transform::Void) {
            return Ok(None);
        }
        let mut fields = Vec::new();
        let mut bucket = false;
        for f in spec.fields() {
            let source = schema.field_by_id(f.source_id).ok_or_else(|| {
                Error::bad_request(
                    Code::UnsupportedTable,
                    format!(
                        "partition field '{}' reads column id {}, which the table's schema lacks",
                        f.name, f.source_id
                    ),
                )
            })?;
            let Type::Primitive(ty) = source.field_type.as_ref() else {
                return Err(unsupported(&f.name, &f.transform, "a nested column"));
            };
            let result = match f.transform.result_type(&source.field_type) {
                Ok(Type::Primitive(p)) => p,
                _ => return Err(unsupported(&f.name, &f.transform, &ty.to_string())),
            };
            let c = quote_ident(&source.name);
            let sql = match (&f.transform, ty) {
                (Transform::Void, _) => format!("CAST(NULL AS {})", repr_type(&result)),
                (Transform::Identity, _) => repr(&c, ty)
                    .ok_or_else(|| unsupported(&f.name, &f.transform, &ty.to_string()))?,
                (Transform::Year, _) if temporal(ty) => {
                    format!(
                        "CAST(date_diff('year', {}, {}) AS INTEGER)",
                        epoch(ty),
                        utc(&c, ty)
                    )
                }
                (Transform::Month, _) if temporal(ty) => {
                    format!(
                        "CAST(date_diff('month', {}, {}) AS INTEGER)",
                        epoch(ty),
                        utc(&c, ty)
                    )
                }
                (Transform::Day, _) if temporal(ty) => format!(
                    "CAST(date_diff('day', DATE '1970-01-01', CAST({} AS DATE)) AS INTEGER)",
                    utc(&c, ty)
                ),
                (Transform::Hour, PrimitiveType::Timestamp | PrimitiveType::Timestamptz) => {
                    format!(
                        "CAST(date_diff('hour', TIMESTAMP '1970-01-01', {}) AS INTEGER)",
                        utc(&c, ty)
                    )
                }
                (Transform::Truncate(w), PrimitiveType::Int | PrimitiveType::Long) => {
                    format!("({c} - ((({c} % {w}) + {w}) % {w}))")
                }
                (Transform::Truncate(w), PrimitiveType::String) => format!("left({c}, {w})"),
                (Transform::Bucket(n), _) => {
                    bucket = true;
                    let arg = match ty {
                        PrimitiveType::Int | PrimitiveType::Long => format!("CAST({c} AS BIGINT)"),
                        PrimitiveType::Date => {
                            format!("CAST(date_diff('day', DATE '1970-01-01', {c}) AS BIGINT)")
                        }
                        PrimitiveType::Time => format!(
                            "CAST(date_diff('microsecond', TIME '00:00:00', {c}) AS BIGINT)"
                        ),
                        PrimitiveType::Timestamp | PrimitiveType::Timestamptz => {
                            format!("epoch_us({c})")
                        }
                        PrimitiveType::String => c.clone(),
                        PrimitiveType::Binary => format!("CAST({c} AS BLOB)"),
                        _ => return Err(unsupported(&f.name, &f.transform, &ty.to_string())),
                    };
                    format!("lh_bucket({n}, {arg})")
                }
                _ => return Err(unsupported(&f.name, &f.transform, &ty.to_string())),
            };
            // An infinite date or timestamp has no partition: the write fails rather than
            // file it under NULL (which readers take for "no value").
            let sql = match (&f.transform, ty) {
                (
                    Transform::Year
                    | Transform::Month
                    | Transform::Day
                    | Transform::Hour
                    | Transform::Identity
                    | Transform::Bucket(_),
                    PrimitiveType::Date | PrimitiveType::Timestamp | PrimitiveType::Timestamptz,
                ) => format!(
                    "CASE WHEN isinf({c}) THEN error({}) ELSE {sql} END",
                    quote_literal(&format!(
                        "lh cannot partition by an infinite date or timestamp (column {})",
                        source.name
                    ))
                ),
                _ => sql,
            };
            fields.push(FieldExpr { sql, result });
        }
        let mut prefix = "lh_p".to_string();
        while schema
            .as_struct()
            .fields()
            .iter()
            .any(|f| f.name.to_ascii_lowercase().starts_with(&prefix))
        {
            prefix.insert(0, '_');
        }
        Ok(Some(Partitioner {
            fields,
            bucket,
            prefix,
        }))
    }

    /// The column holding a row's `i`-th partition value while a write partitions.
    pub fn column(&self, i: usize) -> String {
        format!("{}{i}", self.prefix)
    }

    /// The column numbering a row's partition tuple while a write partitions.
    pub fn part_column(&self) -> String {
        format!("{}part", self.prefix)
    }

    /// `expr AS lh_p0, ...`: the partition columns, for a SELECT over the table's rows.
    pub fn columns(&self) -> Vec<String> {
        self.fields
            .iter()
            .enumerate()
            .map(|(i, f)| format!("{} AS {}", f.sql, self.column(i)))
            .collect()
    }

    pub fn width(&self) -> usize {
        self.fields.len()
    }

    /// Registers what the expressions call on `conn`.
    pub fn prepare(&self, conn: &duckdb::Connection) -> Result<()> {
        if self.bucket {
            conn.register_scalar_function::<BucketFn>("lh_bucket")
                .map_err(|e| Error::internal(format!("cannot register lh_bucket: {e}")))?;
        }
        Ok(())
    }

    /// The partition values of each row of `batch`, whose columns are the partition
    /// columns in order.
    pub fn values(&self, batch: &RecordBatch) -> Result<Vec<Struct>> {
        if batch.num_columns() != self.fields.len() {
            return Err(Error::internal("partition tuple of the wrong width"));
        }
        let mut out = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let mut values = Vec::with_capacity(self.fields.len());
            for (i, f) in self.fields.iter().enumerate() {
                values.push(literal(batch.column(i), row, &f.result)?);
            }
            out.push(Struct::from_iter(values));
        }
        Ok(out)
    }
}

fn unsupported(name: &str, transform: &Transform, ty: &str) -> Error {
    Error::bad_request(
        Code::UnsupportedTable,
        format!("partition field '{name}' ({transform} of {ty}) is not one lh can write"),
    )
    .with_hint(
        "lh writes identity, year, month, day, hour, truncate (of integers and strings) and \
         bucket (of integers, dates, times, timestamps, strings and binary) partitions",
    )
}

fn temporal(ty: &PrimitiveType) -> bool {
    matches!(
        ty,
        PrimitiveType::Date | PrimitiveType::Timestamp | PrimitiveType::Timestamptz
    )
}

fn epoch(ty: &PrimitiveType) -> &'static str {
    match ty {
        PrimitiveType::Date => "DATE '1970-01-01'",
        _ => "TIMESTAMP '1970-01-01'",
    }
}

/// A timestamp with time zone as the UTC wall clock (lh's DuckDB runs in UTC).
fn utc(c: &str, ty: &PrimitiveType) -> String {
    match ty {
        PrimitiveType::Timestamptz => format!("CAST({c} AS TIMESTAMP)"),
        _ => c.to_string(),
    }
}

/// How an identity value travels from DuckDB: dates as days, times and timestamps as
/// microseconds, uuids as text, the rest as themselves.
fn repr(c: &str, ty: &PrimitiveType) -> Option<String> {
    Some(match ty {
        PrimitiveType::Boolean
        | PrimitiveType::Int
        | PrimitiveType::Long
        | PrimitiveType::Float
        | PrimitiveType::Double
        | PrimitiveType::String
        | PrimitiveType::Decimal { .. } => c.to_string(),
        PrimitiveType::Binary | PrimitiveType::Fixed(_) => format!("CAST({c} AS BLOB)"),
        PrimitiveType::Date => {
            format!("CAST(date_diff('day', DATE '1970-01-01', {c}) AS INTEGER)")
        }
        PrimitiveType::Time => {
            format!("CAST(date_diff('microsecond', TIME '00:00:00', {c}) AS BIGINT)")
        }
        PrimitiveType::Timestamp | PrimitiveType::Timestamptz => format!("epoch_us({c})"),
        PrimitiveType::Uuid => format!("CAST({c} AS VARCHAR)"),
        PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs => return None,
    })
}

fn repr_type(ty: &PrimitiveType) -> String {
    match ty {
        PrimitiveType::Boolean => "BOOLEAN".into(),
        PrimitiveType::Int | PrimitiveType::Date => "INTEGER".into(),
        PrimitiveType::Float => "FLOAT".into(),
        PrimitiveType::Double => "DOUBLE".into(),
        PrimitiveType::Decimal { precision, scale } => format!("DECIMAL({precision}, {scale})"),
        PrimitiveType::String | PrimitiveType::Uuid => "VARCHAR".into(),
        PrimitiveType::Binary | PrimitiveType::Fixed(_) => "BLOB".into(),
        _ => "BIGINT".into(),
    }
}

/// The Iceberg literal of row `row` of `array`, a partition value of type `ty` in the
/// representation `repr` gives it.
fn literal(array: &ArrayRef, row: usize, ty: &PrimitiveType) -> Result<Option<Literal>> {
    if array.is_null(row) {
        return Ok(None);
    }
    let wrong = || {
        Error::internal(format!(
            "partition value of type {ty} came back from DuckDB as {}",
            array.data_type()
        ))
    };
    let cast = |to: &DataType| -> Result<ArrayRef> {
        if array.data_type() == to {
            Ok(array.clone())
        } else {
            arrow::compute::cast(&array.slice(row, 1), to).map_err(|_| wrong())
        }
    };
    // A cast array holds the one row.
    let at = |a: &ArrayRef| {
        if a.len() == 1 && array.len() != 1 {
            0
        } else {
            row
        }
    };
    // A value the cast could not carry is an error, never a default.
    let cast = |to: &DataType| -> Result<ArrayRef> {
        let a = cast(to)?;
        if a.is_null(at(&a)) {
            Err(wrong())
        } else {
            Ok(a)
        }
    };
    let p = match ty {
        PrimitiveType::Boolean => {
            let a = cast(&DataType::Boolean)?;
            PrimitiveLiteral::Boolean(a.as_boolean().value(at(&a)))
        }
        PrimitiveType::Int | PrimitiveType::Date => {
            let a = cast(&DataType::Int32)?;
            PrimitiveLiteral::Int(a.as_primitive::<Int32Type>().value(at(&a)))
        }
        PrimitiveType::Long
        | PrimitiveType::Time
        | PrimitiveType::Timestamp
        | PrimitiveType::Timestamptz => {
            let a = cast(&DataType::Int64)?;
            PrimitiveLiteral::Long(a.as_primitive::<Int64Type>().value(at(&a)))
        }
        PrimitiveType::Float => {
            let a = cast(&DataType::Float32)?;
            PrimitiveLiteral::Float(a.as_primitive::<Float32Type>().value(at(&a)).into())
        }
        PrimitiveType::Double => {
            let a = cast(&DataType::Float64)?;
            PrimitiveLiteral::Double(a.as_primitive::<Float64Type>().value(at(&a)).into())
        }
        PrimitiveType::Decimal { precision, scale } => {
            let a = cast(&DataType::Decimal128(*precision as u8, *scale as i8))?;
            PrimitiveLiteral::Int128(a.as_primitive::<Decimal128Type>().value(at(&a)))
        }
        PrimitiveType::String => {
            let a = cast(&DataType::Utf8)?;
            PrimitiveLiteral::String(a.as_string::<i32>().value(at(&a)).to_string())
        }
        PrimitiveType::Uuid => {
            let a = cast(&DataType::Utf8)?;
            let u =
                uuid::Uuid::parse_str(a.as_string::<i32>().value(at(&a))).map_err(|_| wrong())?;
            PrimitiveLiteral::UInt128(u.as_u128())
        }
        PrimitiveType::Binary | PrimitiveType::Fixed(_) => {
            let a = cast(&DataType::Binary)?;
            PrimitiveLiteral::Binary(a.as_binary::<i32>().value(at(&a)).to_vec())
        }
        PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs => return Err(wrong()),
    };
    Ok(Some(Literal::Primitive(p)))
}

/// `lh_bucket(N, value)`: Iceberg's bucket transform, by iceberg-rust (values come as
/// the spec hashes them: integers, dates, times and timestamps as 64-bit integers).
struct BucketFn;

impl VArrowScalar for BucketFn {
    type State = ();

    fn invoke(
        _: &Self::State,
        input: RecordBatch,
    ) -> std::result::Result<Arc<dyn Array>, Box<dyn std::error::Error>> {
        let n = input.column(0).as_primitive::<Int32Type>();
        if n.is_empty() {
            return Ok(arrow::array::new_empty_array(&DataType::Int32));
        }
        let count = n.value(0);
        if count <= 0 || n.iter().any(|v| v != Some(count)) {
            return Err("lh_bucket takes one positive bucket count".into());
        }
        let f = iceberg::transform::create_transform_function(&Transform::Bucket(count as u32))?;
        let values = input.column(1).clone();
        // DuckDB hands over text and blobs as views; iceberg-rust hashes plain arrays.
        let values = match values.data_type() {
            DataType::Utf8View | DataType::LargeUtf8 => {
                arrow::compute::cast(&values, &DataType::Utf8)?
            }
            DataType::BinaryView | DataType::LargeBinary => {
                arrow::compute::cast(&values, &DataType::Binary)?
            }
            _ => values,
        };
        Ok(f.transform(values)?)
    }

    fn signatures() -> Vec<ArrowFunctionSignature> {
        [DataType::Int64, DataType::Utf8, DataType::Binary]
            .into_iter()
            .map(|t| ArrowFunctionSignature::exact(vec![DataType::Int32, t], DataType::Int32))
            .collect()
    }
}

/// A spec as users write it: `day(ts), bucket(16, id)`.
pub fn describe(spec: &PartitionSpec, schema: &Schema) -> String {
    spec.fields()
        .iter()
        .map(|f| {
            let col = schema
                .field_by_id(f.source_id)
                .map(|c| c.name.clone())
                .unwrap_or_else(|| format!("#{}", f.source_id));
            match f.transform {
                Transform::Identity => col,
                Transform::Bucket(n) => format!("bucket({n}, {col})"),
                Transform::Truncate(w) => format!("truncate({w}, {col})"),
                ref t => format!("{t}({col})"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A partition tuple as the user reads it (`ts_day=2026-11-03/id_bucket=7`).
pub fn display(spec: &PartitionSpec, schema: &Schema, value: &Struct) -> String {
    let Ok(ty) = spec.partition_type(schema) else {
        return String::new();
    };
    spec.fields()
        .iter()
        .zip(ty.fields())
        .zip(value.iter())
        .map(|((f, t), v)| {
            format!(
                "{}={}",
                f.name,
                f.transform.to_human_string(&t.field_type, v)
            )
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A file's partition as a key: its spec id and partition values, with the values of a
/// promoted type (int to long, float to double) spelled as the wider type, so that files
/// written before and after a promotion compare equal.
pub fn partition_key(spec_id: i32, partition: &iceberg::spec::Struct) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{Datum, NestedField};

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::optional(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "n",
                    Type::Primitive(PrimitiveType::Int),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "d",
                    Type::Primitive(PrimitiveType::Date),
                )),
                Arc::new(NestedField::optional(
                    4,
                    "ts",
                    Type::Primitive(PrimitiveType::Timestamp),
                )),
                Arc::new(NestedField::optional(
                    5,
                    "tz",
                    Type::Primitive(PrimitiveType::Timestamptz),
                )),
                Arc::new(NestedField::optional(
                    6,
                    "s",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::optional(
                    7,
                    "b",
                    Type::Primitive(PrimitiveType::Binary),
                )),
                Arc::new(NestedField::optional(
                    8,
                    "t",
                    Type::Primitive(PrimitiveType::Time),
                )),
            ])
            .build()
            .unwrap()
    }

    #[test]
    fn specs_parse_with_their_errors() {
        let s = schema();
        let spec = parse_spec("day(ts), bucket(16, id), truncate(4, s), n", &s).unwrap();
        let names: Vec<_> = spec.fields().iter().map(|f| f.name.clone()).collect();
        assert_eq!(names, ["ts_day", "id_bucket", "s_trunc", "n"]);
        for (bad, says) in [
            ("day(nope)", "no column 'nope'"),
            ("bucket(0, id)", "positive integer"),
            ("bucket(id)", "two arguments"),
            ("hour(d)", "cannot apply"),
            ("frobnicate(id)", "not a partition transform"),
            ("day(ts", "closing parenthesis"),
            ("id, id", "twice"),
            ("id,,n", "empty"),
            ("truncate(4, d)", "cannot apply"),
        ] {
            let e = parse_spec(bad, &s).unwrap_err();
            assert!(e.message.contains(says), "{bad}: {}", e.message);
        }
    }

    /// Every transform lh writes, computed by DuckDB, equals iceberg-rust's, on values
    /// around the epoch (negative ones round down), unicode text and bytes.
    #[test]
    fn duckdb_computes_what_iceberg_rust_computes() {
        let s = schema();
        let conn = duckdb::Connection::open_in_memory().unwrap();
        conn.execute_batch("SET TimeZone = 'UTC'").ok();
        let rows = [
            (
                0i64,
                0i32,
                "1970-01-01",
                "1970-01-01 00:00:00",
                "héllo wörld",
                "00:00:00",
            ),
            (
                -1,
                -1,
                "1969-12-31",
                "1969-12-31 23:59:59.999999",
                "a",
                "23:59:59.999999",
            ),
            (
                34,
                7,
                "2026-11-03",
                "2026-11-03 17:45:12.5",
                "iceberg",
                "12:00:01",
            ),
            (
                -1000,
                -13,
                "1900-02-28",
                "1900-02-28 00:00:00.000001",
                "日本語のテキスト",
                "00:00:00.000001",
            ),
            (
                i64::MAX - 5,
                -2_147_483_000,
                "2400-12-31",
                "2262-04-11 23:47:16",
                "",
                "05:06:07",
            ),
        ];
        conn.execute_batch(
            "CREATE TABLE t (id BIGINT, n INTEGER, d DATE, ts TIMESTAMP, tz TIMESTAMPTZ, s VARCHAR, b BLOB, t TIME)",
        )
        .unwrap();
        for (id, n, d, ts, st, t) in rows {
            conn.execute(
                "INSERT INTO t VALUES (?, ?, CAST(? AS DATE), CAST(? AS TIMESTAMP), CAST(? AS TIMESTAMP) AT TIME ZONE 'UTC', ?, encode(?), CAST(? AS TIME))",
                duckdb::params![id, n, d, ts, ts, st, st, t],
            )
            .unwrap();
        }
        let spec_text = "identity(id), year(d), month(d), day(d), year(ts), month(ts), day(ts), hour(ts), \
             hour(tz), day(tz), bucket(16, id), bucket(7, n), bucket(5, d), bucket(9, ts), \
             bucket(11, tz), bucket(13, s), bucket(3, b), bucket(8, t), truncate(10, id), \
             truncate(3, n), truncate(2, s), identity(d), identity(ts), identity(s), identity(t), identity(b)";
        // One field per column and transform: names repeat, so bind specs one by one.
        for field in split_fields(spec_text) {
            let unbound = parse_spec(field, &s).unwrap();
            let spec = unbound.bind(Arc::new(s.clone())).unwrap();
            let p = Partitioner::new(&spec, &s).unwrap().unwrap();
            p.prepare(&conn).unwrap();
            let f = &spec.fields()[0];
            let src = s.field_by_id(f.source_id).unwrap();
            let text = match src.name.as_str() {
                "b" => "decode(b)".to_string(),
                c => format!("CAST({} AS VARCHAR)", quote_ident(c)),
            };
            let sql = format!("SELECT {}, {text} FROM t", p.columns().join(", "));
            let mut stmt = conn.prepare(&sql).unwrap();
            let batches: Vec<RecordBatch> = stmt.query_arrow([]).unwrap().collect();
            let func = iceberg::transform::create_transform_function(&f.transform).unwrap();
            let Type::Primitive(pt) = src.field_type.as_ref() else {
                panic!()
            };
            for batch in batches {
                let got = p.values(&batch.project(&[0]).unwrap()).unwrap();
                let text = batch.column(1).as_string::<i32>();
                for (row, value) in got.iter().enumerate() {
                    let raw = text.value(row);
                    let datum = match pt {
                        PrimitiveType::Long => Datum::long(raw.parse::<i64>().unwrap()),
                        PrimitiveType::Int => Datum::int(raw.parse::<i32>().unwrap()),
                        PrimitiveType::Date => Datum::date_from_str(raw).unwrap(),
                        PrimitiveType::Timestamp => {
                            Datum::timestamp_from_str(raw.replace(' ', "T")).unwrap()
                        }
                        PrimitiveType::Timestamptz => {
                            Datum::timestamptz_from_str(format!("{}:00", raw.replace(' ', "T")))
                                .unwrap()
                        }
                        PrimitiveType::String => Datum::string(raw),
                        PrimitiveType::Binary => Datum::binary(raw.as_bytes().to_vec()),
                        PrimitiveType::Time => Datum::time_from_str(raw).unwrap(),
                        _ => unreachable!(),
                    };
                    let want = func.transform_literal(&datum).unwrap();
                    let got = value.iter().next().unwrap().cloned();
                    let want = want.map(|d| Literal::Primitive(d.literal().clone()));
                    assert_eq!(got, want, "{field} of {raw}");
                }
            }
        }
    }

    #[test]
    fn specs_read_as_written() {
        let s = schema();
        let text = "day(ts), bucket(16, id), truncate(4, s), n";
        let spec = parse_spec(text, &s)
            .unwrap()
            .bind(Arc::new(s.clone()))
            .unwrap();
        assert_eq!(describe(&spec, &s), text);
        let v = Struct::from_iter([
            Some(Literal::date(20_395)),
            Some(Literal::int(3)),
            Some(Literal::string("abcd")),
            None,
        ]);
        assert_eq!(
            display(&spec, &s, &v),
            "ts_day=2025-11-03/id_bucket=3/s_trunc=abcd/n=null"
        );
    }

    #[test]
    fn a_promoted_partition_value_keys_as_its_wider_type() {
        let ints = iceberg::spec::Struct::from_iter([
            Some(iceberg::spec::Literal::int(7)),
            Some(iceberg::spec::Literal::float(1.5)),
            None,
        ]);
        let longs = iceberg::spec::Struct::from_iter([
            Some(iceberg::spec::Literal::long(7)),
            Some(iceberg::spec::Literal::double(1.5)),
            None,
        ]);
        assert_eq!(partition_key(0, &ints), partition_key(0, &longs));
        assert_ne!(partition_key(0, &ints), partition_key(1, &longs));
        let other = iceberg::spec::Struct::from_iter([
            Some(iceberg::spec::Literal::long(8)),
            Some(iceberg::spec::Literal::double(1.5)),
            None,
        ]);
        assert_ne!(partition_key(0, &other), partition_key(0, &longs));
        let text = iceberg::spec::Struct::from_iter([Some(iceberg::spec::Literal::string("7"))]);
        assert_ne!(
            partition_key(0, &text),
            partition_key(
                0,
                &iceberg::spec::Struct::from_iter([Some(iceberg::spec::Literal::long(7))])
            )
        );
    }
}
