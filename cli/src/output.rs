//! Printing: listings as aligned columns, JSON or CSV; query results as a table,
//! JSON, CSV or a Parquet file. Data goes to stdout, everything else to stderr.

use std::io::Write;

use arrow::record_batch::RecordBatch;
use serde::Serialize;

use crate::args::OutputFormat;
use crate::error::CliResult;

/// A listing: rows of cells under headers, or the items themselves as JSON.
pub fn listing<T: Serialize>(
    format: OutputFormat,
    headers: &[&str],
    items: &[T],
    row: impl Fn(&T) -> Vec<String>,
) -> CliResult<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match format {
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut out, items)?;
            writeln!(out)?;
        }
        OutputFormat::Csv => {
            let mut w = csv::Writer::from_writer(&mut out);
            w.write_record(headers)?;
            for item in items {
                w.write_record(row(item))?;
            }
            w.flush()?;
        }
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> = items.iter().map(&row).collect();
            aligned(&mut out, headers, &rows)?;
        }
    }
    out.flush()?;
    Ok(())
}

/// One item: JSON as is, or key/value lines.
pub fn item<T: Serialize>(
    format: OutputFormat,
    value: &T,
    lines: &[(&str, String)],
) -> CliResult<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match format {
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut out, value)?;
            writeln!(out)?;
        }
        OutputFormat::Csv => {
            let mut w = csv::Writer::from_writer(&mut out);
            w.write_record(lines.iter().map(|(k, _)| *k))?;
            w.write_record(lines.iter().map(|(_, v)| v.as_str()))?;
            w.flush()?;
        }
        OutputFormat::Table => {
            let width = lines
                .iter()
                .map(|(k, _)| k.len())
                .max()
                .unwrap_or(0)
                .min(80);
            for (k, v) in lines {
                writeln!(out, "{k:<width$}  {v}")?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// Columns padded to their widest cell, two spaces apart; headers in capitals.
pub fn aligned(
    out: &mut impl Write,
    headers: &[&str],
    rows: &[Vec<String>],
) -> std::io::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| -> String {
        let n = cells.len();
        let mut s = String::new();
        for (i, c) in cells.into_iter().enumerate() {
            if i + 1 == n {
                s.push_str(&c);
            } else {
                let pad = widths[i] - c.chars().count();
                s.push_str(&c);
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s.trim_end().to_string()
    };
    writeln!(
        out,
        "{}",
        line(headers.iter().map(|h| h.to_uppercase()).collect())
    )?;
    for r in rows {
        writeln!(out, "{}", line(r.clone()))?;
    }
    Ok(())
}

/// A query result on stdout.
pub fn batches(
    format: OutputFormat,
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
) -> CliResult<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    write_batches(&mut out, format, schema, batches)
}

/// A query result into `out`.
pub fn write_batches(
    out: &mut impl Write,
    format: OutputFormat,
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
) -> CliResult<()> {
    match format {
        OutputFormat::Table => {
            let table = if batches.is_empty() {
                arrow::util::pretty::pretty_format_batches(&[RecordBatch::new_empty(
                    schema.clone(),
                )])?
            } else {
                arrow::util::pretty::pretty_format_batches(batches)?
            };
            writeln!(out, "{table}")?;
        }
        // Each batch is rendered into a buffer and written with `write_all`, so that a
        // closed stdout surfaces as an I/O error (a broken pipe), not a format error.
        OutputFormat::Json => {
            let mut buf = Vec::new();
            {
                // Nulls are written out, so that every object has every column.
                let mut w = arrow::json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow::json::writer::JsonArray>(&mut buf);
                let plain = batches
                    .iter()
                    .map(|b| representable(b, Writer::Json))
                    .collect::<CliResult<Vec<_>>>()?;
                let refs: Vec<&RecordBatch> = plain.iter().collect();
                w.write_batches(&refs)?;
                w.finish()?;
            }
            buf.push(b'\n');
            out.write_all(&buf)?;
        }
        OutputFormat::Csv => {
            let empty = [RecordBatch::new_empty(schema.clone())];
            let all = if batches.is_empty() {
                &empty[..]
            } else {
                batches
            };
            for (i, b) in all.iter().enumerate() {
                let mut buf = Vec::new();
                {
                    let mut w = arrow::csv::WriterBuilder::new()
                        .with_header(i == 0)
                        .build(&mut buf);
                    w.write(&representable(b, Writer::Csv)?)?;
                }
                out.write_all(&buf)?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Writer {
    Csv,
    Json,
}

/// The batch with every column the writer cannot encode turned into text: for CSV, a
/// nested value (struct, list, map) becomes its JSON text, as one cell; what JSON cannot
/// hold as such (a union, which no Iceberg table has but a query can make, or a map
/// keyed by numbers) becomes its displayed form.
fn representable(batch: &RecordBatch, writer: Writer) -> CliResult<RecordBatch> {
    use arrow::datatypes::{DataType, Field, Schema};
    let nested = |t: &DataType| {
        matches!(
            t,
            DataType::Struct(_)
                | DataType::List(_)
                | DataType::LargeList(_)
                | DataType::FixedSizeList(..)
                | DataType::ListView(_)
                | DataType::LargeListView(_)
                | DataType::Map(..)
        )
    };
    // What arrow's JSON encoder refuses: unions, and maps keyed by anything but text.
    fn no_json(t: &DataType) -> bool {
        match t {
            DataType::Union(..) => true,
            DataType::Map(entries, _) => match entries.data_type() {
                DataType::Struct(kv) => {
                    !matches!(kv[0].data_type(), DataType::Utf8 | DataType::LargeUtf8)
                        || no_json(kv[1].data_type())
                }
                _ => true,
            },
            DataType::Struct(fs) => fs.iter().any(|f| no_json(f.data_type())),
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::FixedSizeList(f, _)
            | DataType::ListView(f)
            | DataType::LargeListView(f) => no_json(f.data_type()),
            DataType::Dictionary(_, v) => no_json(v),
            _ => false,
        }
    }
    let schema = batch.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| no_json(f.data_type()) || (writer == Writer::Csv && nested(f.data_type())))
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        let t = f.data_type();
        let text = if no_json(t) {
            Some(displayed(c)?)
        } else if writer == Writer::Csv && nested(t) {
            Some(json_texts(f, c)?)
        } else {
            None
        };
        match text {
            Some(a) => {
                fields.push(Field::new(f.name(), DataType::Utf8, true));
                columns.push(std::sync::Arc::new(a) as arrow::array::ArrayRef);
            }
            None => {
                fields.push(f.as_ref().clone());
                columns.push(c.clone());
            }
        }
    }
    Ok(RecordBatch::try_new(
        std::sync::Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// Each value of a nested column as JSON text (null stays null).
fn json_texts(
    field: &arrow::datatypes::Field,
    column: &arrow::array::ArrayRef,
) -> CliResult<arrow::array::StringArray> {
    let one = RecordBatch::try_new(
        std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
            field.clone().with_name("v"),
        ])),
        vec![column.clone()],
    )?;
    let mut buf = Vec::new();
    {
        let mut w = arrow::json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, arrow::json::writer::LineDelimited>(&mut buf);
        w.write(&one)?;
        w.finish()?;
    }
    let mut out = arrow::array::StringBuilder::with_capacity(column.len(), buf.len());
    for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let row: serde_json::Value = serde_json::from_slice(line)?;
        match row.get("v") {
            None | Some(serde_json::Value::Null) => out.append_null(),
            Some(v) => out.append_value(v.to_string()),
        }
    }
    Ok(out.finish())
}

/// Each value as the table output shows it (null stays null).
fn displayed(column: &arrow::array::ArrayRef) -> CliResult<arrow::array::StringArray> {
    let fmt = arrow::util::display::ArrayFormatter::try_new(
        column.as_ref(),
        &arrow::util::display::FormatOptions::default(),
    )?;
    Ok((0..column.len())
        .map(|i| column.is_valid(i).then(|| fmt.value(i).to_string()))
        .collect())
}

/// A query result into a Parquet file.
pub fn parquet_file(
    path: &std::path::Path,
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
) -> CliResult<u64> {
    let file = std::fs::File::create(path)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None)?;
    let mut rows = 0;
    for b in batches {
        rows += b.num_rows() as u64;
        w.write(b)?;
    }
    w.close()?;
    Ok(rows)
}

/// `1.2 MB` style sizes.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `1 table`, `2 tables`.
pub fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The first 12 characters of a hash.
pub fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}
