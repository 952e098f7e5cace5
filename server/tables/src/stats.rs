//! An Iceberg `DataFile` entry for a Parquet file lh wrote, from the file's footer:
//! row count, size, and per-column sizes, value and null counts and bounds (keyed by
//! the Parquet field ids, which are the Iceberg field ids). Bounds follow Iceberg's
//! default metrics mode, `truncate(16)`: strings keep a 16-character lower bound and an
//! upper bound only when it is exact.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, PartitionSpec,
    PrimitiveType, Schema, Struct, Type,
};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::statistics::Statistics;

use crate::error::{Error, Result};

const TRUNCATE: usize = 16;

/// Reads the footer of the local Parquet file at `path` (known to the table as `url`).
pub fn data_file(
    path: &Path,
    url: &str,
    schema: &Schema,
    spec: &PartitionSpec,
    partition: Struct,
) -> Result<DataFile> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let reader = SerializedFileReader::new(file).map_err(|e| {
        Error::internal(format!(
            "cannot read the Parquet footer of {}: {e}",
            path.display()
        ))
    })?;
    let meta = reader.metadata();
    let mut column_sizes: HashMap<i32, u64> = HashMap::new();
    let mut value_counts: HashMap<i32, u64> = HashMap::new();
    let mut null_counts: HashMap<i32, u64> = HashMap::new();
    let mut lower: HashMap<i32, Datum> = HashMap::new();
    let mut upper: HashMap<i32, Datum> = HashMap::new();
    // A bound is only valid if every row group had one.
    let mut bounds_complete: HashMap<i32, bool> = HashMap::new();
    for rg in meta.row_groups() {
        for col in rg.columns() {
            let info = col.column_descr().self_type().get_basic_info();
            if !info.has_id() {
                continue;
            }
            let id = info.id();
            *column_sizes.entry(id).or_default() += col.compressed_size() as u64;
            *value_counts.entry(id).or_default() += col.num_values() as u64;
            let complete = bounds_complete.entry(id).or_insert(true);
            let Some(stats) = col.statistics() else {
                *complete = false;
                continue;
            };
            if let Some(n) = stats.null_count_opt() {
                *null_counts.entry(id).or_default() += n;
            }
            let Some(Type::Primitive(pt)) = schema.field_by_id(id).map(|f| (*f.field_type).clone())
            else {
                continue;
            };
            match bounds(stats, &pt) {
                Some((lo, hi)) => {
                    merge(&mut lower, id, lo, |new, old| new < old);
                    match hi {
                        Some(hi) => merge(&mut upper, id, hi, |new, old| new > old),
                        None => *complete = false,
                    }
                }
                None => *complete = false,
            }
        }
    }
    // Upper bounds are dropped unless known for every row group; lower bounds too.
    for (id, complete) in bounds_complete {
        if !complete {
            lower.remove(&id);
            upper.remove(&id);
        }
    }
    let split_offsets: Vec<i64> = meta
        .row_groups()
        .iter()
        .filter_map(|rg| rg.file_offset())
        .collect();
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(url.to_string())
        .file_format(DataFileFormat::Parquet)
        .partition(partition)
        .partition_spec_id(spec.spec_id())
        .record_count(meta.file_metadata().num_rows() as u64)
        .file_size_in_bytes(size)
        .column_sizes(column_sizes)
        .value_counts(value_counts)
        .null_value_counts(null_counts)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .split_offsets(Some(split_offsets))
        .build()
        .map_err(|e| Error::internal(format!("cannot describe data file {url}: {e}")))
}

/// A column of a Parquet file as Iceberg sees it: its field id (0 when it has none, which
/// matches no Iceberg field), its name in the file, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalColumn {
    pub id: i32,
    pub name: String,
    pub kind: PhysicalKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PhysicalKind {
    Primitive,
    Struct(Vec<PhysicalColumn>),
    List(Box<PhysicalColumn>),
    Map(Box<PhysicalColumn>, Box<PhysicalColumn>),
}

/// The columns of a Parquet file, nested ones with their fields, each with its field id.
pub fn physical_columns(path: &Path) -> Result<Vec<PhysicalColumn>> {
    let file = File::open(path)
        .map_err(|e| Error::internal(format!("cannot open data file {}: {e}", path.display())))?;
    let reader = SerializedFileReader::new(file).map_err(|e| {
        Error::internal(format!(
            "cannot read the Parquet footer of {}: {e}",
            path.display()
        ))
    })?;
    let root = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .root_schema_ptr();
    Ok(root.get_fields().iter().map(|f| physical(f)).collect())
}

/// One column of a Parquet schema, read with the format's rules for lists (three levels,
/// or the legacy two) and maps.
fn physical(t: &parquet::schema::types::Type) -> PhysicalColumn {
    use parquet::basic::{ConvertedType, LogicalType};
    let info = t.get_basic_info();
    let id = if info.has_id() { info.id() } else { 0 };
    let name = info.name().to_string();
    let kind = if !t.is_group() {
        PhysicalKind::Primitive
    } else {
        let fields = t.get_fields();
        let logical = info.logical_type_ref();
        let converted = info.converted_type();
        let is_list =
            matches!(logical, Some(LogicalType::List)) || converted == ConvertedType::LIST;
        let is_map = matches!(logical, Some(LogicalType::Map))
            || matches!(converted, ConvertedType::MAP | ConvertedType::MAP_KEY_VALUE);
        match fields {
            [repeated] if is_list => {
                // Three levels: `repeated group list { element }`. Two (legacy): the
                // repeated field is the element: a primitive, a group of several fields,
                // or a group of one named `array` or `<list>_tuple`.
                let three_levels = repeated.is_group()
                    && repeated.get_fields().len() == 1
                    && repeated.name() != "array"
                    && repeated.name() != format!("{name}_tuple");
                let element = if three_levels {
                    physical(&repeated.get_fields()[0])
                } else {
                    physical(repeated)
                };
                PhysicalKind::List(Box::new(element))
            }
            [key_value] if is_map && key_value.is_group() && key_value.get_fields().len() == 2 => {
                let kv = key_value.get_fields();
                PhysicalKind::Map(Box::new(physical(&kv[0])), Box::new(physical(&kv[1])))
            }
            _ => PhysicalKind::Struct(fields.iter().map(|f| physical(f)).collect()),
        }
    };
    PhysicalColumn { id, name, kind }
}

fn merge(
    map: &mut HashMap<i32, Datum>,
    id: i32,
    value: Datum,
    better: impl Fn(&Datum, &Datum) -> bool,
) {
    match map.get(&id) {
        Some(old) if !better(&value, old) => {}
        _ => {
            map.insert(id, value);
        }
    }
}

/// The lower bound, and the upper bound when one can be given, of a column chunk.
fn bounds(stats: &Statistics, pt: &PrimitiveType) -> Option<(Datum, Option<Datum>)> {
    use PrimitiveType as P;
    let pair = |lo: Datum, hi: Datum| Some((lo, Some(hi)));
    match (stats, pt) {
        (Statistics::Boolean(s), P::Boolean) => {
            pair(Datum::bool(*s.min_opt()?), Datum::bool(*s.max_opt()?))
        }
        (Statistics::Int32(s), P::Int) => {
            pair(Datum::int(*s.min_opt()?), Datum::int(*s.max_opt()?))
        }
        (Statistics::Int32(s), P::Date) => {
            pair(Datum::date(*s.min_opt()?), Datum::date(*s.max_opt()?))
        }
        (Statistics::Int64(s), P::Long) => {
            pair(Datum::long(*s.min_opt()?), Datum::long(*s.max_opt()?))
        }
        (Statistics::Int64(s), P::Timestamp) => pair(
            Datum::timestamp_micros(*s.min_opt()?),
            Datum::timestamp_micros(*s.max_opt()?),
        ),
        (Statistics::Int64(s), P::Timestamptz) => pair(
            Datum::timestamptz_micros(*s.min_opt()?),
            Datum::timestamptz_micros(*s.max_opt()?),
        ),
        (Statistics::Int64(s), P::Time) => pair(
            Datum::time_micros(*s.min_opt()?).ok()?,
            Datum::time_micros(*s.max_opt()?).ok()?,
        ),
        (Statistics::Float(s), P::Float) => {
            let (lo, hi) = (*s.min_opt()?, *s.max_opt()?);
            (!lo.is_nan() && !hi.is_nan()).then(|| (Datum::float(lo), Some(Datum::float(hi))))
        }
        (Statistics::Double(s), P::Double) => {
            let (lo, hi) = (*s.min_opt()?, *s.max_opt()?);
            (!lo.is_nan() && !hi.is_nan()).then(|| (Datum::double(lo), Some(Datum::double(hi))))
        }
        (Statistics::Int32(s), P::Decimal { .. }) => {
            decimal(i128::from(*s.min_opt()?), i128::from(*s.max_opt()?), pt)
        }
        (Statistics::Int64(s), P::Decimal { .. }) => {
            decimal(i128::from(*s.min_opt()?), i128::from(*s.max_opt()?), pt)
        }
        (Statistics::FixedLenByteArray(s), P::Decimal { .. }) => {
            let lo = be_i128(s.min_bytes_opt()?)?;
            let hi = be_i128(s.max_bytes_opt()?)?;
            decimal(lo, hi, pt)
        }
        (Statistics::ByteArray(s), P::String) => {
            let lo = std::str::from_utf8(s.min_bytes_opt()?).ok()?;
            let hi = std::str::from_utf8(s.max_bytes_opt()?).ok()?;
            // A prefix of the minimum is still a lower bound; the maximum is only an
            // upper bound when it is exact and short enough to keep whole.
            let lo_trunc: String = lo.chars().take(TRUNCATE).collect();
            let upper =
                (s.max_is_exact() && hi.chars().count() <= TRUNCATE).then(|| Datum::string(hi));
            Some((Datum::string(lo_trunc), upper))
        }
        _ => None,
    }
}

fn decimal(lo: i128, hi: i128, pt: &PrimitiveType) -> Option<(Datum, Option<Datum>)> {
    let lo = Datum::try_from_bytes(&minimal_be(lo), pt.clone()).ok()?;
    let hi = Datum::try_from_bytes(&minimal_be(hi), pt.clone()).ok()?;
    Some((lo, Some(hi)))
}

fn be_i128(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut buf = [fill; 16];
    buf[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(buf))
}

/// Big-endian two's complement in the fewest bytes (Iceberg's decimal serialization).
fn minimal_be(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let (b, next) = (bytes[start], bytes[start + 1]);
        if (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    bytes[start..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_bytes_round_trip() {
        for v in [
            0i128,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            1_000_000,
            -98_765_432_109,
        ] {
            assert_eq!(be_i128(&minimal_be(v)), Some(v), "{v}");
        }
        assert_eq!(minimal_be(127), vec![0x7f]);
        assert_eq!(minimal_be(128), vec![0x00, 0x80]);
        assert_eq!(minimal_be(-1), vec![0xff]);
    }

    /// Lists in each of the layouts writers use, maps and structs, with their field ids.
    #[test]
    fn physical_columns_follow_the_parquet_list_and_map_rules() {
        let message = parquet::schema::parser::parse_message_type(
            "message m {
               optional group three (LIST) = 1 { repeated group list { optional int32 element = 2; } }
               optional group legacy (LIST) = 3 { repeated int32 array = 4; }
               optional group pairs (LIST) = 5 { repeated group array { required int32 a = 6; } }
               optional group structs (LIST) = 7 { repeated group element { required int32 a = 8; required int32 b = 9; } }
               optional group m (MAP) = 10 { repeated group key_value { required binary key (UTF8) = 11; optional int64 value = 12; } }
               optional group s = 13 { optional int32 x = 14; }
             }",
        )
        .unwrap();
        let cols: Vec<PhysicalColumn> = message.get_fields().iter().map(|f| physical(f)).collect();
        let leaf = |id, name: &str| PhysicalColumn {
            id,
            name: name.into(),
            kind: PhysicalKind::Primitive,
        };
        let col = |id, name: &str, kind| PhysicalColumn {
            id,
            name: name.into(),
            kind,
        };
        assert_eq!(
            cols,
            vec![
                col(1, "three", PhysicalKind::List(Box::new(leaf(2, "element")))),
                col(3, "legacy", PhysicalKind::List(Box::new(leaf(4, "array")))),
                col(
                    5,
                    "pairs",
                    PhysicalKind::List(Box::new(col(
                        0,
                        "array",
                        PhysicalKind::Struct(vec![leaf(6, "a")])
                    )))
                ),
                col(
                    7,
                    "structs",
                    PhysicalKind::List(Box::new(col(
                        0,
                        "element",
                        PhysicalKind::Struct(vec![leaf(8, "a"), leaf(9, "b")])
                    )))
                ),
                col(
                    10,
                    "m",
                    PhysicalKind::Map(Box::new(leaf(11, "key")), Box::new(leaf(12, "value")))
                ),
                col(13, "s", PhysicalKind::Struct(vec![leaf(14, "x")])),
            ]
        );
    }
}
