//! Types across the three systems a table meets: Arrow (what DuckDB reads a source
//! file as), Iceberg (what the table's schema says) and DuckDB SQL (what lh casts to
//! when it writes Parquet, and what query views declare).

use std::sync::Arc;

use arrow::datatypes::{DataType, Schema as ArrowSchema};
use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};

use crate::duck::quote_ident;
use crate::error::{Code, Error, Result};

/// An Iceberg schema for columns DuckDB inferred, with fresh field ids (top-level
/// columns first, 1..n, then nested fields). Every column is optional.
pub fn iceberg_schema_from_arrow(schema: &ArrowSchema) -> Result<Schema> {
    let mut next_id = schema.fields().len() as i32 + 1;
    let mut fields = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        let name = column_name(f.name())?;
        let ty = iceberg_type(f.name(), f.data_type(), &mut next_id)?;
        fields.push(Arc::new(NestedField::optional(i as i32 + 1, name, ty)));
    }
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| Error::bad_request(Code::BadSchema, format!("cannot build a schema: {e}")))
}

/// Column names are kept as the source has them, but must be usable: not empty, no
/// dots (Iceberg uses them as path separators).
fn column_name(name: &str) -> Result<String> {
    if name.is_empty() {
        return Err(Error::bad_request(
            Code::BadSchema,
            "a column has an empty name",
        ));
    }
    if name.contains('.') {
        return Err(Error::bad_request(
            Code::BadSchema,
            format!("column '{name}' has a '.' in its name, which Iceberg does not allow"),
        )
        .with_hint("rename the column in the source file"));
    }
    Ok(name.to_string())
}

fn iceberg_type(column: &str, dt: &DataType, next_id: &mut i32) -> Result<Type> {
    let mut fresh = || {
        let id = *next_id;
        *next_id += 1;
        id
    };
    let p = |t| Ok(Type::Primitive(t));
    match dt {
        DataType::Boolean => p(PrimitiveType::Boolean),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            p(PrimitiveType::Int)
        }
        DataType::Int64 | DataType::UInt32 => p(PrimitiveType::Long),
        DataType::UInt64 => p(PrimitiveType::Decimal {
            precision: 20,
            scale: 0,
        }),
        DataType::Float16 | DataType::Float32 => p(PrimitiveType::Float),
        DataType::Float64 => p(PrimitiveType::Double),
        DataType::Decimal32(pr, s) | DataType::Decimal64(pr, s) | DataType::Decimal128(pr, s)
            if *pr <= 38 && *s >= 0 =>
        {
            p(PrimitiveType::Decimal {
                precision: u32::from(*pr),
                scale: *s as u32,
            })
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => p(PrimitiveType::String),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => p(PrimitiveType::Binary),
        DataType::Date32 | DataType::Date64 => p(PrimitiveType::Date),
        DataType::Time32(_) | DataType::Time64(_) => p(PrimitiveType::Time),
        DataType::Timestamp(_, None) => p(PrimitiveType::Timestamp),
        DataType::Timestamp(_, Some(_)) => p(PrimitiveType::Timestamptz),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            let id = fresh();
            let element = iceberg_type(column, f.data_type(), next_id)?;
            Ok(Type::List(ListType::new(Arc::new(
                NestedField::list_element(id, element, false),
            ))))
        }
        DataType::Struct(fields) => {
            let ids: Vec<i32> = fields.iter().map(|_| fresh()).collect();
            let mut out: Vec<NestedFieldRef> = Vec::new();
            for (f, id) in fields.iter().zip(ids) {
                let ty = iceberg_type(column, f.data_type(), next_id)?;
                out.push(Arc::new(NestedField::optional(
                    id,
                    column_name(f.name())?,
                    ty,
                )));
            }
            Ok(Type::Struct(StructType::new(out)))
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(unsupported(column, dt));
            };
            let (key_id, value_id) = (fresh(), fresh());
            let key = iceberg_type(column, kv[0].data_type(), next_id)?;
            let value = iceberg_type(column, kv[1].data_type(), next_id)?;
            Ok(Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(key_id, key)),
                Arc::new(NestedField::map_value_element(value_id, value, false)),
            )))
        }
        DataType::Dictionary(_, v) => iceberg_type(column, v, next_id),
        _ => Err(unsupported(column, dt)),
    }
}

fn unsupported(column: &str, dt: &DataType) -> Error {
    Error::bad_request(
        Code::UnsupportedType,
        format!("column '{column}' has type {dt}, which an Iceberg table cannot store"),
    )
    .with_hint("convert the column (for example to a string) before importing")
}

/// The DuckDB type that holds an Iceberg type, as SQL.
pub fn duckdb_type(ty: &Type) -> String {
    match ty {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => "BOOLEAN".into(),
            PrimitiveType::Int => "INTEGER".into(),
            PrimitiveType::Long => "BIGINT".into(),
            PrimitiveType::Float => "FLOAT".into(),
            PrimitiveType::Double => "DOUBLE".into(),
            PrimitiveType::Decimal { precision, scale } => format!("DECIMAL({precision},{scale})"),
            PrimitiveType::Date => "DATE".into(),
            PrimitiveType::Time => "TIME".into(),
            PrimitiveType::Timestamp => "TIMESTAMP".into(),
            PrimitiveType::Timestamptz => "TIMESTAMPTZ".into(),
            PrimitiveType::TimestampNs => "TIMESTAMP_NS".into(),
            PrimitiveType::TimestamptzNs => "TIMESTAMPTZ".into(),
            PrimitiveType::String => "VARCHAR".into(),
            PrimitiveType::Uuid => "UUID".into(),
            PrimitiveType::Fixed(_) | PrimitiveType::Binary => "BLOB".into(),
        },
        Type::Struct(s) => {
            let fields: Vec<String> = s
                .fields()
                .iter()
                .map(|f| format!("{} {}", quote_ident(&f.name), duckdb_type(&f.field_type)))
                .collect();
            format!("STRUCT({})", fields.join(", "))
        }
        Type::List(l) => format!("{}[]", duckdb_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "MAP({}, {})",
            duckdb_type(&m.key_field.field_type),
            duckdb_type(&m.value_field.field_type)
        ),
    }
}

/// The Iceberg type as people read it: `long`, `decimal(12,2)`, `list<string>`,
/// `struct<a: int, b: string>`, `map<string, long>`.
pub fn display_type(ty: &Type) -> String {
    match ty {
        Type::Primitive(PrimitiveType::Decimal { precision, scale }) => {
            format!("decimal({precision},{scale})")
        }
        Type::Primitive(p) => p.to_string(),
        Type::Struct(s) => {
            let fields: Vec<String> = s
                .fields()
                .iter()
                .map(|f| format!("{}: {}", f.name, display_type(&f.field_type)))
                .collect();
            format!("struct<{}>", fields.join(", "))
        }
        Type::List(l) => format!("list<{}>", display_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{}, {}>",
            display_type(&m.key_field.field_type),
            display_type(&m.value_field.field_type)
        ),
    }
}

/// DuckDB's `FIELD_IDS` option for `COPY ... TO (FORMAT parquet)`, so that the Parquet
/// columns carry the Iceberg field ids.
pub fn duckdb_field_ids(schema: &Schema) -> String {
    fn nested(ty: &Type) -> Vec<String> {
        match ty {
            Type::Primitive(_) => vec![],
            Type::Struct(s) => s
                .fields()
                .iter()
                .map(|f| field(&f.name, f.id, &f.field_type))
                .collect(),
            Type::List(l) => vec![field(
                "element",
                l.element_field.id,
                &l.element_field.field_type,
            )],
            Type::Map(m) => vec![
                field("key", m.key_field.id, &m.key_field.field_type),
                field("value", m.value_field.id, &m.value_field.field_type),
            ],
        }
    }
    fn field(name: &str, id: i32, ty: &Type) -> String {
        let inner = nested(ty);
        if inner.is_empty() {
            format!("{}: {id}", quote_ident(name))
        } else {
            format!(
                "{}: {{__duckdb_field_id: {id}, {}}}",
                quote_ident(name),
                inner.join(", ")
            )
        }
    }
    let fields: Vec<String> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| field(&f.name, f.id, &f.field_type))
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// Whether a source column of Iceberg type `src` can be appended to a column of type
/// `dst` without losing information (the check of `--mode append`).
pub fn assignable(src: &Type, dst: &Type) -> bool {
    use PrimitiveType as P;
    match (src, dst) {
        (Type::Primitive(a), Type::Primitive(b)) => {
            a == b
                || matches!(
                    (a, b),
                    (P::Int, P::Long)
                        | (P::Int, P::Double)
                        | (P::Long, P::Double)
                        | (P::Float, P::Double)
                        | (P::Timestamp, P::TimestampNs)
                )
                || matches!((a, b), (P::Decimal { precision: p1, scale: s1 }, P::Decimal { precision: p2, scale: s2 })
                    if s1 == s2 && p1 <= p2)
                || matches!((a, b), (P::Int, P::Decimal { precision, scale }) if precision - scale >= 10)
                || matches!((a, b), (P::Long, P::Decimal { precision, scale }) if precision - scale >= 19)
        }
        (Type::List(a), Type::List(b)) => {
            assignable(&a.element_field.field_type, &b.element_field.field_type)
        }
        (Type::Map(a), Type::Map(b)) => {
            assignable(&a.key_field.field_type, &b.key_field.field_type)
                && assignable(&a.value_field.field_type, &b.value_field.field_type)
        }
        (Type::Struct(a), Type::Struct(b)) => {
            a.fields().len() == b.fields().len()
                && a.fields().iter().all(|fa| {
                    b.fields()
                        .iter()
                        .find(|fb| fb.name == fa.name)
                        .is_some_and(|fb| assignable(&fa.field_type, &fb.field_type))
                })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    #[test]
    fn nested_schema_maps_both_ways() {
        let arrow = ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("l", DataType::Utf8, true))),
                true,
            ),
            Field::new(
                "addr",
                DataType::Struct(
                    vec![
                        Field::new("city", DataType::Utf8, true),
                        Field::new("zip", DataType::Int32, true),
                    ]
                    .into(),
                ),
                true,
            ),
            Field::new("price", DataType::Decimal128(12, 2), true),
            Field::new(
                "at",
                DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
        ]);
        let schema = iceberg_schema_from_arrow(&arrow).unwrap();
        let shown: Vec<String> = schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| format!("{}:{}:{}", f.id, f.name, display_type(&f.field_type)))
            .collect();
        assert_eq!(
            shown,
            [
                "1:id:long",
                "2:name:string",
                "3:tags:list<string>",
                "4:addr:struct<city: string, zip: int>",
                "5:price:decimal(12,2)",
                "6:at:timestamptz"
            ]
        );
        assert_eq!(
            duckdb_field_ids(&schema),
            r#"{"id": 1, "name": 2, "tags": {__duckdb_field_id: 3, "element": 7}, "addr": {__duckdb_field_id: 4, "city": 8, "zip": 9}, "price": 5, "at": 6}"#
        );
        let addr = &schema.as_struct().fields()[3].field_type;
        assert_eq!(
            duckdb_type(addr),
            r#"STRUCT("city" VARCHAR, "zip" INTEGER)"#
        );
    }

    #[test]
    fn append_compatibility() {
        let long = Type::Primitive(PrimitiveType::Long);
        let int = Type::Primitive(PrimitiveType::Int);
        let s = Type::Primitive(PrimitiveType::String);
        assert!(assignable(&int, &long));
        assert!(!assignable(&long, &int));
        assert!(!assignable(&s, &long));
        assert!(assignable(&long, &Type::Primitive(PrimitiveType::Double)));
    }
}
