//! What a user query is, according to DuckDB's own parser (`json_serialize_sql`): one
//! read-only SELECT (DESCRIBE, SHOW and SUMMARIZE parse as SELECTs too), and the tables
//! it names. Anything else, whatever its text, is refused here.

use serde_json::Value;

use crate::error::{Code, Error, Result};

/// A table the query names: its dotted name parts, lowercased (`["raw", "orders"]`).
pub type TableRef = Vec<String>;

/// What a query reads and needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// The tables it names (CTE names included: a one-part name may be either).
    pub tables: Vec<TableRef>,
    /// The `$name` parameters it uses.
    pub params: Vec<String>,
    /// The names of its common table expressions.
    pub ctes: Vec<String>,
}

/// Checks the parse of a query and returns what it reads.
pub fn analyze(serialized: &str) -> Result<Analysis> {
    let v: Value = serde_json::from_str(serialized)
        .map_err(|e| Error::internal(format!("cannot read DuckDB's parse of the query: {e}")))?;
    if v.get("error").and_then(Value::as_bool) == Some(true) {
        let kind = v.get("error_type").and_then(Value::as_str).unwrap_or("");
        let msg = v
            .get("error_message")
            .and_then(Value::as_str)
            .unwrap_or("cannot parse the query");
        return Err(match kind {
            "not implemented" => Error::bad_request(
                Code::ReadOnly,
                "only read-only queries (SELECT, DESCRIBE, SHOW, SUMMARIZE) are allowed",
            )
            .with_hint("change tables with `lh table import` or `lh run`"),
            _ => Error::bad_request(Code::SqlError, format!("SQL error: {msg}")),
        });
    }
    let statements = v
        .get("statements")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    if statements != 1 {
        return Err(Error::bad_request(
            Code::SqlError,
            format!("expected one SQL statement, got {statements}"),
        ));
    }
    let mut out = Analysis::default();
    walk(&v, &mut out)?;
    for list in [&mut out.params, &mut out.ctes] {
        list.sort();
        list.dedup();
    }
    out.tables.sort();
    out.tables.dedup();
    Ok(out)
}

fn walk(v: &Value, out: &mut Analysis) -> Result<()> {
    match v {
        Value::Object(m) => {
            if m.get("type").and_then(Value::as_str) == Some("VALUE_PARAMETER")
                && let Some(id) = m.get("identifier").and_then(Value::as_str)
            {
                out.params.push(id.to_string());
            }
            if let Some(ctes) = m
                .get("cte_map")
                .and_then(|c| c.get("map"))
                .and_then(Value::as_array)
            {
                for c in ctes {
                    if let Some(k) = c.get("key").and_then(Value::as_str) {
                        out.ctes.push(k.to_ascii_lowercase());
                    }
                }
            }
            match m.get("type").and_then(Value::as_str) {
                Some("TABLE_FUNCTION") => check_table_function(m.get("function"))?,
                // json_serialize_plan plans SQL text of its own, unseen here.
                Some("FUNCTION") => {
                    let name = m
                        .get("function_name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_ascii_lowercase();
                    if SQL_TEXT_FUNCTIONS.contains(&name.as_str()) {
                        return Err(files_refused(&format!(
                            "{name}() works on SQL text that is not checked"
                        )));
                    }
                }
                // SHOW TABLES / SHOW DATABASES list every commit the server holds open.
                Some("SHOW_REF")
                    if matches!(
                        m.get("show_type").and_then(Value::as_str),
                        Some("SHOW_UNQUALIFIED" | "SHOW_FROM")
                    ) =>
                {
                    return Err(Error::bad_request(
                        Code::Forbidden,
                        "not allowed: SHOW TABLES and SHOW DATABASES (they list what other \
                         refs hold)",
                    )
                    .with_hint(
                        "`lh table ls --ref REF` lists a ref's tables; DESCRIBE ns.table shows one",
                    ));
                }
                _ => {}
            }
            if m.get("type").and_then(Value::as_str) == Some("BASE_TABLE") {
                if m.get("at_clause").is_some_and(|a| !a.is_null()) {
                    return Err(Error::bad_request(
                        Code::SqlError,
                        "AT (...) time travel is not supported in SQL",
                    )
                    .with_hint("choose the commit with --ref (main@<hash>, main@<time>)"));
                }
                let part = |k: &str| {
                    m.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_ascii_lowercase()
                };
                let parts: Vec<String> = [
                    part("catalog_name"),
                    part("schema_name"),
                    part("table_name"),
                ]
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect();
                // DuckDB reads a "table" named like a file (`FROM 'x.parquet'`, or
                // `FROM x.parquet`, whose parts it joins) as that file: a query sees
                // tables, never paths.
                let joined = parts.join(".");
                if looks_like_a_path(&joined) {
                    return Err(files_refused(&format!(
                        "'{joined}' is a file path, not a table"
                    )));
                }
                // Nor DuckDB's own catalog views, which describe every commit the server
                // holds open (and the files their views read).
                if is_system_name(&parts) {
                    return Err(files_refused(&format!(
                        "'{joined}' is DuckDB's catalog, not an lh table"
                    )));
                }
                out.tables.push(parts);
            }
            for x in m.values() {
                walk(x, out)?;
            }
        }
        Value::Array(a) => {
            for x in a {
                walk(x, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The table functions a query may call: they make rows from values. Every other one
/// (`read_parquet`, `glob`, `read_text`, `query`, `query_table`, `iceberg_scan`, ...)
/// reads files or runs SQL text the analysis never saw: the warehouse holds the files of
/// every ref, dropped tables and refused writes, and a query sees only the tables of its
/// ref.
const TABLE_FUNCTIONS: &[&str] = &[
    "range",
    "generate_series",
    "unnest",
    "repeat",
    "repeat_row",
    "json_each",
    "json_tree",
];

fn check_table_function(f: Option<&Value>) -> Result<()> {
    let name = f
        .and_then(|f| f.get("function_name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    let schema = f
        .and_then(|f| f.get("schema"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if (schema.is_empty() || schema.eq_ignore_ascii_case("main"))
        && TABLE_FUNCTIONS.contains(&name.as_str())
    {
        return Ok(());
    }
    Err(files_refused(&format!(
        "the table function {name}() is not allowed in lh queries"
    )))
}

/// Scalar functions that parse, plan or run SQL text given as a value.
const SQL_TEXT_FUNCTIONS: &[&str] = &[
    "json_serialize_plan",
    "json_serialize_sql",
    "json_execute_serialized_sql",
];

fn is_system_name(parts: &[String]) -> bool {
    const SCHEMAS: &[&str] = &["information_schema", "pg_catalog", "system", "temp"];
    const PREFIXES: &[&str] = &["duckdb_", "sqlite_", "pg_", "pragma_"];
    match parts {
        [one] => PREFIXES.iter().any(|p| one.starts_with(p)),
        [schema, _] => SCHEMAS.contains(&schema.as_str()),
        _ => false,
    }
}

fn looks_like_a_path(part: &str) -> bool {
    const FILES: &[&str] = &[
        ".parquet", ".csv", ".tsv", ".json", ".jsonl", ".ndjson", ".txt", ".gz", ".zst", ".arrow",
        ".avro", ".db", ".ddb", ".duckdb",
    ];
    part.contains(['/', '\\', ':', '*', '?']) || FILES.iter().any(|e| part.ends_with(e))
}

fn files_refused(what: &str) -> Error {
    Error::bad_request(Code::Forbidden, format!("not allowed: {what}")).with_hint(
        "queries read the tables of their ref by name (raw.orders); only range, \
         generate_series, unnest, repeat, repeat_row, json_each and json_tree make rows \
         otherwise. Bring files in with `lh table import`",
    )
}
