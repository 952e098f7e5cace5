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
            let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
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
                let refs: Vec<&RecordBatch> = batches.iter().collect();
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
                    w.write(b)?;
                }
                out.write_all(&buf)?;
            }
        }
    }
    out.flush()?;
    Ok(())
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
