//! What a user query is, according to DuckDB's own parser (`json_serialize_sql`): one
//! read-only SELECT (DESCRIBE, SHOW and SUMMARIZE parse as SELECTs too), and the tables
//! it names. Anything else, whatever its text, is refused here.

use std::collections::HashMap;

use lh_api::remedy::Remedy;
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
    /// Comparisons of a table's column with constants that every row of the result
    /// passes (conjuncts of the top-level WHERE), for tables named once: what pruning
    /// may use to leave out files (see `prune.rs`).
    pub filters: std::collections::BTreeMap<TableRef, Vec<Filter>>,
}

/// `column op constant`, as DuckDB parsed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub column: String,
    pub op: Op,
    /// The constants (several for `IN`).
    pub values: Vec<Constant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
    /// Equal to one of the values.
    In,
}

impl Op {
    /// `a op b` as `b op' a`.
    fn flipped(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::Le => Op::Ge,
            Op::Gt => Op::Lt,
            Op::Ge => Op::Le,
            other => other,
        }
    }
}

/// A constant: an integer, text (which DuckDB casts to the column's type), or text cast
/// to a type (`DATE '2026-01-01'`: then DuckDB may cast the column instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constant {
    Integer(i64),
    Text(String),
    /// Text cast to `DATE`, `TIMESTAMP`, `TIMESTAMP WITH TIME ZONE` or `VARCHAR`.
    Typed {
        text: String,
        to: String,
    },
}

/// An `IN` list longer than this prunes nothing (its cost would grow with the files).
const MAX_IN_VALUES: usize = 256;

/// The deepest parse tree read. DuckDB's own `max_expression_depth` (1000) keeps every
/// tree it serializes far below this (about 2,100 levels at its limit); the bound is what
/// keeps a tree from outgrowing the stack of the threads that walk it (`lh-server` gives
/// them 16 MiB, see its `main`).
pub const MAX_TREE_DEPTH: usize = 8_000;

/// DuckDB's parse tree (`json_serialize_sql`) as JSON: any depth DuckDB serializes is
/// read (serde_json's recursion limit of 128 is lifted: `select 1+1+...` with 60 terms
/// once answered 500), bounded by [`MAX_TREE_DEPTH`], checked before parsing.
pub fn parse_tree(serialized: &str) -> Result<Value> {
    let depth = lh_core::json::depth(serialized.as_bytes());
    if depth > MAX_TREE_DEPTH {
        return Err(Error::bad_request(
            Code::SqlError,
            format!(
                "the statement nests {depth} levels deep, more than the {MAX_TREE_DEPTH} lh checks"
            ),
        ));
    }
    let mut de = serde_json::Deserializer::from_str(serialized);
    de.disable_recursion_limit();
    let v = <Value as serde::Deserialize>::deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| Error::internal(format!("cannot read DuckDB's parse of the query: {e}")))?;
    Ok(v)
}

/// How deeply subquery expressions (or lambdas) may nest in one another.
pub const MAX_EXPRESSION_NESTING: usize = 16;

/// The deepest chain of nodes of `class` nested in one another in a parse tree.
fn nesting(v: &Value, class: &str) -> usize {
    match v {
        Value::Object(m) => {
            let below = m.values().map(|x| nesting(x, class)).max().unwrap_or(0);
            below + usize::from(m.get("class").and_then(Value::as_str) == Some(class))
        }
        Value::Array(a) => a.iter().map(|x| nesting(x, class)).max().unwrap_or(0),
        _ => 0,
    }
}

/// A syntax error's place in the query, as DuckDB's own shell shows it: the line, with
/// its number, and a caret under the column DuckDB's parser stopped at (its `position`,
/// counted in characters of `text`). Other errors are returned as they are.
pub fn locate(mut e: Error, serialized: &str, text: &str) -> Error {
    let position = parse_tree(serialized).ok().and_then(|v| {
        v.get("position")
            .and_then(|p| p.as_str().and_then(|s| s.parse().ok()).or(p.as_u64()))
    });
    let Some(position) = position.map(|p| p as usize) else {
        return e;
    };
    if e.code != Code::SqlError {
        return e;
    }
    let Some(at) = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .nth(position)
    else {
        return e;
    };
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let number = text[..start].matches('\n').count() + 1;
    let line = text[start..end].trim_end_matches('\r');
    let prefix = format!("LINE {number}: ");
    let column = text[start..at].chars().count();
    e.message = format!(
        "{}\n{prefix}{line}\n{}^",
        e.message,
        " ".repeat(prefix.len() + column)
    );
    e
}

/// The line of a query a syntax error names (see [`locate`]), counted from 1.
pub fn error_line(message: &str) -> Option<usize> {
    let rest = &message[message.find("\nLINE ")? + 6..];
    rest[..rest.find(':')?].parse().ok()
}

/// Checks the parse of a query and returns what it reads.
pub fn analyze(serialized: &str) -> Result<Analysis> {
    let v = parse_tree(serialized)?;
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
            .with_remedy(Remedy::WriteByImportOrRun),
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
    // DuckDB's optimizer takes time exponential in the nesting of subquery and lambda
    // expressions (24 nested lambdas: 7.6 s; 100: never done), in a phase its
    // interrupt does not reach: bounded before anything is planned.
    for (class, what) in [("SUBQUERY", "subqueries"), ("LAMBDA", "lambdas")] {
        let depth = nesting(&v, class);
        if depth > MAX_EXPRESSION_NESTING {
            return Err(Error::bad_request(
                Code::SqlError,
                format!(
                    "the statement nests {depth} {what} in one another, more than the \
                     {MAX_EXPRESSION_NESTING} lh plans"
                ),
            )
            .with_hint("use a CTE or a join instead of nesting"));
        }
    }
    // DuckDB expands a macro by copying its arguments into its body, before anything its
    // interrupt reaches: `fmod` uses each argument twice, so 16 nested calls (136 bytes)
    // made 65,536 copies, and minutes of CPU and gigabytes past the query's timeout and
    // memory (found by the nineteenth review). Bounded by what the expansion adds.
    // Column aliases the same way: `select 1+1 AS a0, a0+a0 AS a1, ...` has the binder
    // copy each alias's expression where it is used (found by the twentieth review).
    let added =
        size(&v, &MACROS, Some(&HashMap::new())).saturating_sub(size(&v, &HashMap::new(), None));
    if added > MAX_MACRO_EXPANSION {
        return Err(Error::bad_request(
            Code::SqlError,
            format!(
                "the statement's macros (fmod, nullif, round_even, ...) and column aliases \
                 would expand into more than {MAX_MACRO_EXPANSION} more expressions{}",
                if added == u64::MAX {
                    String::new()
                } else {
                    format!(" ({added})")
                }
            ),
        )
        .with_hint(
            "compute the nested value once, in a CTE or a subquery, and use it from there",
        ));
    }
    let mut out = Analysis::default();
    walk(&v, &mut out)?;
    if let Some(node) = v.pointer("/statements/0/node") {
        out.filters = filters(node, &out.tables);
    }
    for list in [&mut out.params, &mut out.ctes] {
        list.sort();
        list.dedup();
    }
    out.tables.sort();
    out.tables.dedup();
    Ok(out)
}

/// The most expressions DuckDB's macros may add to one statement as it expands them
/// (about a second of DuckDB's binding; one use of a macro adds its body and the copies
/// of its arguments).
pub const MAX_MACRO_EXPANSION: u64 = 20_000;

/// Refuses SQL whose simple `CASE x WHEN a THEN .. WHEN b THEN .. END` expressions
/// nest so that DuckDB's parser, which copies `x` into each WHEN (`CASE WHEN x = a ..`),
/// would make more than [`MAX_MACRO_EXPANSION`] more tokens' worth of tree: that copy
/// happens before any check of the parse tree, with no timeout (found by the
/// twenty-first review: 15 nested in 563 bytes took 3 s and 600 MB past a 1 s timeout).
/// Read from the text, with strings, quoted names and comments skipped.
pub fn check_case_copies(sql: &str) -> Result<()> {
    // DuckDB strips its Unicode spaces outside what its own quote tracking takes for
    // quotes: `'..'`, `".."` and `--` comments, but not block comments, backslash
    // escapes or `$` (a `'` in `/* */` made it keep every later U+00A0 in a name, which
    // the scan below read as a space: found by the twenty-eighth review). Where the two
    // readings could differ, the query is refused rather than guessed at.
    if sql.chars().any(unicode_space) && (sql.contains("/*") || sql.contains(['\\', '$'])) {
        return Err(Error::bad_request(
            Code::SqlError,
            "the statement mixes a non-ASCII space (a no-break or other Unicode space) with a \
             block comment, a backslash or a '$', which lh cannot check as DuckDB reads it",
        )
        .with_hint(
            "replace the no-break spaces with ordinary ones (often pasted from a web page)",
        ));
    }
    let tokens = tokens(sql);
    let mut at = 0;
    let expanded = case_seq(&tokens, &mut at, &[]);
    let added = expanded.saturating_sub(tokens.len() as u64);
    if added > MAX_MACRO_EXPANSION {
        return Err(Error::bad_request(
            Code::SqlError,
            format!(
                "the statement's CASE expressions nest so that DuckDB would copy their \
                 operands into more than {MAX_MACRO_EXPANSION} more expressions"
            ),
        )
        .with_hint(
            "compute the nested value once, in a CTE or a subquery, and use it from there",
        ));
    }
    Ok(())
}

/// The words (lowercased) and symbols of SQL text, without strings, quoted names and
/// comments (a string is a token of its own), by the rules of the PostgreSQL scanner
/// DuckDB's parser uses: identifiers go on through digits and `$` (`a$b$` is one),
/// `E'..'` strings take backslash escapes, `$tag$..$tag$` quotes only where a token
/// starts, and block comments nest. (Found by the twenty-second review: a tokenizer of
/// simpler rules hid a CASE nest behind `E'\''` or `a$b$`.)
/// The Unicode spaces DuckDB's parser reads as spaces outside quotes
/// (`Parser::StripUnicodeSpaces`).
fn unicode_space(c: char) -> bool {
    matches!(
        c,
        '\u{a0}' | '\u{2000}'
            ..='\u{200b}' | '\u{202f}' | '\u{205f}' | '\u{2060}' | '\u{3000}' | '\u{feff}'
    )
}

fn tokens(sql: &str) -> Vec<String> {
    // DuckDB reads these Unicode spaces as spaces before it scans (its
    // `Parser::StripUnicodeSpaces`), and no other (found by the twenty-fourth and
    // twenty-fifth reviews: U+00A0 and U+200B made a nest one identifier here, and
    // U+2028, which DuckDB keeps in a name, made a false END).
    let spaced: String = sql
        .chars()
        .map(|c| if unicode_space(c) { ' ' } else { c })
        .collect();
    let b = spaced.as_bytes();
    let ident_start = |c: u8| c.is_ascii_alphabetic() || c == b'_' || c >= 0x80;
    let ident_cont = |c: u8| ident_start(c) || c.is_ascii_digit() || c == b'$';
    let mut out = Vec::new();
    let mut i = 0;
    // The end of a quoted run opened at `from` (just past its quote): a doubled quote is
    // the quote itself; with `backslash`, a backslash escapes the next byte.
    let quoted = |from: usize, quote: u8, backslash: bool| {
        let mut j = from;
        while j < b.len() {
            if backslash && b[j] == b'\\' {
                j += 2;
            } else if b[j] == quote {
                if b.get(j + 1) == Some(&quote) {
                    j += 2;
                } else {
                    return j + 1;
                }
            } else {
                j += 1;
            }
        }
        b.len()
    };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'-' && next == Some(b'-') {
            while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                i += 1;
            }
        } else if c == b'/' && next == Some(b'*') {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'\'' {
            i = quoted(i + 1, b'\'', false);
            out.push("'".to_string());
        } else if c == b'"' {
            i = quoted(i + 1, b'"', false);
            out.push("'".to_string());
        } else if matches!(c, b'e' | b'E') && next == Some(b'\'') {
            i = quoted(i + 2, b'\'', true);
            // A string continued after a line break (`E'a'` newline `'b'`) keeps its
            // escapes (the twenty-fourth review hid a nest behind one), and `--`
            // comments count as spaces on the way (the twenty-ninth: `E'' --c` newline
            // `'\' end \''` is one string to DuckDB).
            loop {
                let mut j = i;
                let mut line_break = false;
                while j < b.len() {
                    if b[j].is_ascii_whitespace() || b[j] == 0x0b {
                        line_break |= b[j] == b'\n' || b[j] == b'\r';
                        j += 1;
                    } else if b[j] == b'-' && b.get(j + 1) == Some(&b'-') {
                        while j < b.len() && b[j] != b'\n' && b[j] != b'\r' {
                            j += 1;
                        }
                    } else {
                        break;
                    }
                }
                if line_break && b.get(j) == Some(&b'\'') {
                    i = quoted(j + 1, b'\'', true);
                } else {
                    break;
                }
            }
            out.push("'".to_string());
        } else if matches!(c, b'b' | b'B' | b'x' | b'X' | b'n' | b'N') && next == Some(b'\'') {
            i = quoted(i + 2, b'\'', false);
            out.push("'".to_string());
        } else if matches!(c, b'u' | b'U')
            && next == Some(b'&')
            && matches!(b.get(i + 2), Some(b'\'' | b'"'))
        {
            i = quoted(i + 3, b[i + 2], false);
            out.push("'".to_string());
        } else if c == b'$' {
            // `$1` is a parameter; `$$` or `$tag$` opens a string ending at its like.
            let tag_end = b[i + 1..]
                .iter()
                .position(|&x| !(ident_start(x) || x.is_ascii_digit()))
                .map(|p| i + 1 + p);
            let is_tag =
                tag_end.is_some_and(|e| b[e] == b'$' && (e == i + 1 || ident_start(b[i + 1])));
            match tag_end {
                Some(e) if is_tag => {
                    let tag = &b[i..=e];
                    i = b[e + 1..]
                        .windows(tag.len())
                        .position(|w| w == tag)
                        .map_or(b.len(), |p| e + 1 + p + tag.len());
                    out.push("'".to_string());
                }
                _ => {
                    i += 1;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                    out.push(String::new());
                }
            }
        } else if ident_start(c) {
            let start = i;
            while i < b.len() && ident_cont(b[i]) {
                i += 1;
            }
            out.push(String::from_utf8_lossy(&b[start..i]).to_ascii_lowercase());
        } else if c.is_ascii_digit() || (c == b'.' && next.is_some_and(|d| d.is_ascii_digit())) {
            // A number ends where its digits, fraction and exponent do: `1when` is `1`
            // then `when` (found by the twenty-third review: it hid a WHEN a level).
            // (`_` only between digits: `1_end` is `1` then `_end`.)
            let digits = |i: &mut usize| {
                while *i < b.len()
                    && (b[*i].is_ascii_digit()
                        || (b[*i] == b'_' && b.get(*i + 1).is_some_and(u8::is_ascii_digit)))
                {
                    *i += 1;
                }
            };
            digits(&mut i);
            if b.get(i) == Some(&b'.') && b.get(i + 1) != Some(&b'.') {
                i += 1;
                digits(&mut i);
            }
            if matches!(b.get(i), Some(b'e' | b'E')) {
                let mut j = i + 1;
                if matches!(b.get(j), Some(b'+' | b'-')) {
                    j += 1;
                }
                if b.get(j).is_some_and(u8::is_ascii_digit) {
                    i = j;
                    digits(&mut i);
                }
            }
            out.push(String::new());
        } else {
            out.push(String::new());
            i += 1;
        }
    }
    out
}

/// The tokens from `at` up to one of `stop` (or the end), each counted once but a
/// CASE, counted as its copies.
fn case_seq(t: &[String], at: &mut usize, stop: &[&str]) -> u64 {
    let mut n = 0u64;
    while *at < t.len() {
        let w = t[*at].as_str();
        if stop.contains(&w) {
            return n;
        }
        *at += 1;
        n = n.saturating_add(if w == "case" { case_size(t, at) } else { 1 });
    }
    n
}

/// A CASE's tokens with its operand copied into each WHEN, from after its `case` to
/// after its `end`.
fn case_size(t: &[String], at: &mut usize) -> u64 {
    let mut n = 1u64;
    let operand = if t.get(*at).map(String::as_str) == Some("when") {
        0
    } else {
        case_seq(t, at, &["when", "end"])
    };
    let mut whens = 0u64;
    while let Some(w) = t.get(*at).map(String::as_str) {
        *at += 1;
        match w {
            "when" => {
                whens += 1;
                n = n.saturating_add(case_seq(t, at, &["then", "end"]));
            }
            "then" | "else" => n = n.saturating_add(case_seq(t, at, &["when", "else", "end"])),
            "end" => break,
            _ => n = n.saturating_add(1),
        }
    }
    n.saturating_add(operand.saturating_mul(whens.max(1)))
}

/// A scalar macro DuckDB ships: the expressions its body adds, and how many times it
/// uses an argument at most (each argument is counted that many times).
#[derive(Debug, Clone, Copy)]
struct Macro {
    body: u64,
    uses: u64,
}

/// DuckDB's own scalar macros, read from DuckDB itself (its catalog of functions) once:
/// each body parsed as DuckDB parses it, its parameters counted where they are used
/// (and through any macro it calls in turn).
static MACROS: std::sync::LazyLock<HashMap<String, Macro>> = std::sync::LazyLock::new(|| {
    read_macros().unwrap_or_else(|e| {
        // Without the table every macro counts once more than it is: still bounded, by
        // the tree's size, but say why.
        tracing::error!("cannot read DuckDB's macros: {e}");
        HashMap::new()
    })
});

fn read_macros() -> Result<HashMap<String, Macro>, duckdb::Error> {
    let conn = duckdb::Connection::open_in_memory()?;
    let mut stmt = conn.prepare(
        "SELECT lower(function_name), parameters, \
                json_serialize_sql('SELECT ' || macro_definition) \
         FROM duckdb_functions() \
         WHERE function_type = 'macro' AND schema_name IN ('main', 'pg_catalog') \
           AND macro_definition IS NOT NULL",
    )?;
    let rows = stmt.query_map([], |r| {
        let params: duckdb::types::Value = r.get(1)?;
        let params = match params {
            duckdb::types::Value::List(l) => l
                .into_iter()
                .filter_map(|p| match p {
                    duckdb::types::Value::Text(t) => Some(t.to_ascii_lowercase()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok((r.get::<_, String>(0)?, params, r.get::<_, String>(2)?))
    })?;
    let mut raw: Vec<(String, Vec<String>, Value)> = Vec::new();
    for row in rows {
        let (name, params, body) = row?;
        let Ok(tree) = parse_tree(&body) else {
            continue;
        };
        let Some(expr) = tree.pointer("/statements/0/node/select_list/0").cloned() else {
            continue;
        };
        raw.push((name, params, expr));
    }
    // A body may use another macro, which may use another: each round counts one more
    // level of that (DuckDB's own go two deep; they do not recurse).
    let mut known: HashMap<String, Macro> = HashMap::new();
    for _ in 0..4 {
        for (name, params, body) in &raw {
            let uses = params
                .iter()
                .map(|p| refs_to(body, p, &known))
                .max()
                .unwrap_or(0);
            known.insert(
                name.clone(),
                Macro {
                    body: expanded(body, &known),
                    uses,
                },
            );
        }
    }
    Ok(known)
}

/// The macro a node of a parse tree calls, if it is one of `macros`.
fn macro_call<'a>(
    m: &serde_json::Map<String, Value>,
    macros: &'a HashMap<String, Macro>,
) -> Option<&'a Macro> {
    if m.get("class").and_then(Value::as_str) != Some("FUNCTION") {
        return None;
    }
    let text = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
    let schema = text("schema");
    if !(text("catalog").is_empty() || text("catalog").eq_ignore_ascii_case("system"))
        || !(schema.is_empty() || schema == "main" || schema == "pg_catalog")
    {
        return None;
    }
    macros.get(&text("function_name").to_ascii_lowercase())
}

/// The nodes of a parse tree once every call of `macros` in it is expanded.
fn expanded(v: &Value, macros: &HashMap<String, Macro>) -> u64 {
    size(v, macros, None)
}

/// The nodes of a parse tree once every call of `macros` is expanded and, with
/// `aliases` (the sizes of the select list's aliases in scope), every use of a column
/// alias of the same SELECT replaced by its expression, as DuckDB's binder does. (A
/// name that is a column of the FROM as well counts as the alias: an over-count.)
fn size(v: &Value, macros: &HashMap<String, Macro>, aliases: Option<&HashMap<String, u64>>) -> u64 {
    match v {
        Value::Object(m) => {
            if aliases.is_some() && m.get("type").and_then(Value::as_str) == Some("SELECT_NODE") {
                return select_size(m, macros);
            }
            if let Some(scope) = aliases
                && m.get("class").and_then(Value::as_str) == Some("COLUMN_REF")
                && let Some(Value::Array(names)) = m.get("column_names")
                && let [Value::String(name)] = names.as_slice()
                && let Some(n) = scope.get(&name.to_ascii_lowercase())
            {
                return *n;
            }
            let called = macro_call(m, macros);
            let mut n = 1u64;
            for (k, x) in m {
                match (called, k.as_str(), x) {
                    (Some(mac), "children", Value::Array(args)) => {
                        n = n.saturating_add(mac.body);
                        for a in args {
                            n = n.saturating_add(
                                mac.uses.max(1).saturating_mul(size(a, macros, aliases)),
                            );
                        }
                    }
                    _ => n = n.saturating_add(size(x, macros, aliases)),
                }
            }
            n
        }
        Value::Array(a) => a
            .iter()
            .fold(0u64, |n, x| n.saturating_add(size(x, macros, aliases))),
        _ => 0,
    }
}

/// A SELECT's size with its aliases followed: each select-list entry may use the
/// aliases before it; the clauses after (WHERE, GROUP BY, HAVING, QUALIFY, ORDER BY)
/// any of them; its FROM and CTEs none.
fn select_size(m: &serde_json::Map<String, Value>, macros: &HashMap<String, Macro>) -> u64 {
    let none = HashMap::new();
    let mut scope: HashMap<String, u64> = HashMap::new();
    let mut n = 1u64;
    if let Some(Value::Array(list)) = m.get("select_list") {
        for e in list {
            let s = size(e, macros, Some(&scope));
            n = n.saturating_add(s);
            if let Some(alias) = e.get("alias").and_then(Value::as_str)
                && !alias.is_empty()
            {
                scope.insert(alias.to_ascii_lowercase(), s);
            }
        }
    }
    for (k, x) in m {
        let within = match k.as_str() {
            "select_list" => continue,
            "from_table" | "cte_map" => &none,
            _ => &scope,
        };
        n = n.saturating_add(size(x, macros, Some(within)));
    }
    n
}
/// How many times a macro's body uses its parameter `param` once expanded.
fn refs_to(v: &Value, param: &str, macros: &HashMap<String, Macro>) -> u64 {
    match v {
        Value::Object(m) => {
            if m.get("class").and_then(Value::as_str) == Some("COLUMN_REF")
                && let Some(Value::Array(names)) = m.get("column_names")
                && let [Value::String(name)] = names.as_slice()
                && name.eq_ignore_ascii_case(param)
            {
                return 1;
            }
            let called = macro_call(m, macros);
            m.iter().fold(0u64, |n, (k, x)| {
                let factor = match (called, k.as_str()) {
                    (Some(mac), "children") => mac.uses.max(1),
                    _ => 1,
                };
                n.saturating_add(factor.saturating_mul(refs_to(x, param, macros)))
            })
        }
        Value::Array(a) => a
            .iter()
            .fold(0u64, |n, x| n.saturating_add(refs_to(x, param, macros))),
        _ => 0,
    }
}

/// The functions a query may call (`functions.txt`): an allow-list, so that a function
/// or macro DuckDB adds, or one it expands into catalog reads (`pg_get_viewdef` is
/// `SELECT sql FROM duckdb_views() ...`, listing every commit's views the server holds
/// open), is refused until someone has looked at it.
/// Names are DuckDB's, compared without regard to case (as DuckDB binds them).
static ALLOWED_FUNCTIONS: std::sync::LazyLock<std::collections::HashSet<String>> =
    std::sync::LazyLock::new(|| {
        include_str!("functions.txt")
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_ascii_lowercase)
            .collect()
    });

/// DuckDB's JSON functions that recurse once per level of a value's nesting, and so
/// are not in `functions.txt`: a value nested 75,000 deep, which a query can make at run
/// time, overflowed the server's stack (the thirtieth review).
pub const RECURSIVE_JSON: [&str; 4] = [
    "json_contains",
    "json_group_structure",
    "json_merge_patch",
    "json_structure",
];

/// Whether a query may call the function `name` of `schema` in `catalog`, as DuckDB's
/// parser gives them.
pub fn function_allowed(catalog: &str, schema: &str, name: &str) -> bool {
    let catalog_ok = catalog.is_empty() || catalog.eq_ignore_ascii_case("system");
    let schema_ok = schema.is_empty()
        || schema.eq_ignore_ascii_case("main")
        || schema.eq_ignore_ascii_case("pg_catalog");
    catalog_ok && schema_ok && ALLOWED_FUNCTIONS.contains(&name.to_ascii_lowercase())
}

/// The most elements a list, or characters a padded or repeated text, that a function
/// of a query may make of one value. DuckDB holds a value whole, outside its memory
/// limit: `len(range(200000000))` took 18.6 GB of a server limited to 256 MB (found by
/// the twenty-sixth review). The functions that make a value of a size their arguments
/// say (not the size of their inputs) must say it with constants within these bounds.
pub const MAX_MADE_ELEMENTS: i64 = 1_000_000;
pub const MAX_MADE_WIDTH: i64 = 10_000;

/// An integer constant of the parse tree (`5`, `-3`), if `v` is one.
fn constant_int(v: &Value) -> Option<i64> {
    if v.get("class").and_then(Value::as_str) != Some("CONSTANT") {
        return None;
    }
    let value = v.get("value")?;
    if value.get("is_null").and_then(Value::as_bool) == Some(true) {
        return Some(0);
    }
    value.get("value")?.as_i64()
}

/// How deeply the structure given to `from_json` and `json_transform` may nest.
pub const MAX_JSON_STRUCTURE_DEPTH: usize = 64;

/// A text constant of the parse tree, if `v` is one.
fn constant_text(v: &Value) -> Option<&str> {
    if v.get("class").and_then(Value::as_str) != Some("CONSTANT") {
        return None;
    }
    v.get("value")?.get("value")?.as_str()
}

/// Refuses a call of a function that makes a value as large as its arguments say
/// (`range`, `repeat`, `lpad`, `list_resize`, a format's width...) unless they say it
/// with constants within [`MAX_MADE_ELEMENTS`] and [`MAX_MADE_WIDTH`].
fn check_value_size(name: &str, children: Option<&Value>) -> Result<()> {
    let args: &[Value] = children
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let refuse = |why: String, hint: &str| {
        Err(
            Error::bad_request(Code::Forbidden, format!("not allowed: {name}() {why}"))
                .with_hint(hint.to_string()),
        )
    };
    let within = |i: usize, max: i64| args.get(i).and_then(constant_int).map(|n| n <= max);
    if args.is_empty() {
        return Ok(()); // no value to make (DuckDB refuses the call itself)
    }
    match name.to_ascii_lowercase().as_str() {
        // The structure a JSON value is read into: DuckDB reads it recursively, so a
        // constant made of repeats (`repeat('[', 10000) || repeat('[', 10000) || ...`)
        // overflowed the server's stack (the thirty-first review). A text constant of
        // bounded nesting, as written in the statement.
        "json_transform" | "json_transform_strict" | "from_json" | "from_json_strict" => {
            match args.get(1).map(constant_text) {
                None => Ok(()),
                Some(Some(t)) if lh_core::json::depth(t.as_bytes()) <= MAX_JSON_STRUCTURE_DEPTH => {
                    Ok(())
                }
                Some(_) => refuse(
                    format!(
                        "takes the structure to read as a text constant nested at most \
                         {MAX_JSON_STRUCTURE_DEPTH} levels deep"
                    ),
                    "write the structure out, e.g. from_json(j, '{\"a\": [\"INTEGER\"]}')",
                ),
            }
        }
        "range" | "generate_series" => {
            // As long as a list that exists (`generate_subscripts`' own expansion): no
            // larger than what the query had already.
            let length_of = |v: &Value| {
                v.get("class").and_then(Value::as_str) == Some("FUNCTION")
                    && v.get("function_name")
                        .and_then(Value::as_str)
                        .is_some_and(|f| {
                            [
                                "len",
                                "length",
                                "array_length",
                                "list_length",
                                "cardinality",
                            ]
                            .contains(&f.to_ascii_lowercase().as_str())
                        })
            };
            if let [start, stop] = args
                && matches!(constant_int(start), Some(0 | 1))
                && length_of(stop)
            {
                return Ok(());
            }
            let ints: Option<Vec<i64>> = args.iter().map(constant_int).collect();
            let count = match ints.as_deref() {
                Some([stop]) => Some(*stop),
                Some([start, stop]) => Some(stop.saturating_sub(*start)),
                Some([start, stop, step]) => stop.saturating_sub(*start).checked_div(*step),
                _ => None,
            };
            match count {
                Some(n) if n <= MAX_MADE_ELEMENTS => Ok(()),
                _ => refuse(
                    format!(
                        "as a value makes a list as long as its arguments say: they must be \
                         integer constants of at most {MAX_MADE_ELEMENTS} elements"
                    ),
                    "as a table function it streams its rows: SELECT * FROM range(...), \
                     or unnest a smaller range",
                ),
            }
        }
        // Its fill value is copied into every new element: a constant, or none.
        "list_resize" | "array_resize" => match within(1, MAX_MADE_ELEMENTS) {
            _ if args.len() < 2 => Ok(()),
            Some(true)
                if args
                    .get(2)
                    .is_none_or(|v| constant_int(v).is_some() || constant_text(v).is_some()) =>
            {
                Ok(())
            }
            _ => refuse(
                format!(
                    "takes its new size as an integer constant of at most {MAX_MADE_ELEMENTS}, \
                     and a constant to fill with"
                ),
                "a query may not make a value larger than that",
            ),
        },
        "repeat" | "lpad" | "rpad" | "bar" | "bitstring" => {
            let at = if name.eq_ignore_ascii_case("bar") {
                3
            } else {
                1
            };
            if args.len() <= at {
                return Ok(()); // bar's default width, 80; too few for the others to bind
            }
            // `repeat` copies its first argument: a text constant (a list copied ten
            // thousand times made gigabytes: the twenty-ninth review).
            let copied = !name.eq_ignore_ascii_case("repeat")
                || args.first().and_then(constant_text).is_some();
            match within(at, MAX_MADE_WIDTH) {
                Some(true) if copied => Ok(()),
                _ => refuse(
                    format!(
                        "takes its count or width as an integer constant of at most \
                         {MAX_MADE_WIDTH} (and `repeat` a text constant to repeat)"
                    ),
                    "a query may not make a value larger than that",
                ),
            }
        }
        "printf" | "format" => {
            let widths_ok = args
                .first()
                .and_then(constant_text)
                .is_some_and(format_widths_bounded);
            if widths_ok {
                Ok(())
            } else {
                refuse(
                    format!(
                        "takes its format as a text constant, with widths and precisions of at \
                         most {MAX_MADE_WIDTH} written in it"
                    ),
                    "a query may not make a value larger than that",
                )
            }
        }
        _ => Ok(()),
    }
}

/// Whether every width and precision a format string writes (printf's `%08.3f`, fmt's
/// `{:>12}`) is at most [`MAX_MADE_WIDTH`] and none comes from an argument (`%*d`,
/// `{:{}}`).
fn format_widths_bounded(f: &str) -> bool {
    let b = f.as_bytes();
    let number = |i: &mut usize| -> Option<i64> {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        (*i > start).then(|| f[start..*i].parse::<i64>().unwrap_or(i64::MAX))
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                i += 1;
                while i < b.len() && b"-+ #0'".contains(&b[i]) {
                    i += 1;
                }
                if b.get(i) == Some(&b'*') {
                    return false;
                }
                if number(&mut i).is_some_and(|n| n > MAX_MADE_WIDTH) {
                    return false;
                }
                if b.get(i) == Some(&b'.') {
                    i += 1;
                    if b.get(i) == Some(&b'*') || number(&mut i).is_some_and(|n| n > MAX_MADE_WIDTH)
                    {
                        return false;
                    }
                }
                // (`%%` and a conversion letter: passed over.)
                i += 1;
            }
            b'{' => {
                let end = f[i..].find('}').map_or(b.len(), |e| i + e);
                let field = &f[i + 1..end.min(b.len())];
                if let Some((_, spec)) = field.split_once(':') {
                    if spec.contains('{') {
                        return false;
                    }
                    let mut j = 0;
                    let s = spec.as_bytes();
                    while j < s.len() {
                        if s[j].is_ascii_digit() {
                            let start = j;
                            while j < s.len() && s[j].is_ascii_digit() {
                                j += 1;
                            }
                            if spec[start..j]
                                .parse::<i64>()
                                .map_or(true, |n| n > MAX_MADE_WIDTH)
                            {
                                return false;
                            }
                        } else {
                            j += 1;
                        }
                    }
                }
                i = end + 1;
            }
            _ => i += 1,
        }
    }
    true
}

/// The function a bare column reference stands for when it is one of the keywords
/// DuckDB's binder turns into a call of the session's catalog or schema.
fn keyword_call(m: &serde_json::Map<String, Value>) -> Option<&'static str> {
    let names = m.get("column_names").and_then(Value::as_array)?;
    let [name] = names.as_slice() else {
        return None;
    };
    match name.as_str()?.to_ascii_lowercase().as_str() {
        "current_catalog" => Some("current_database"),
        "current_schema" => Some("current_schema"),
        "current_schemas" => Some("current_schemas"),
        _ => None,
    }
}

fn walk(v: &Value, out: &mut Analysis) -> Result<()> {
    walk_node(v, out, false)
}

/// `table_function`: `v` is the call of a table function (checked by its own list).
fn walk_node(v: &Value, out: &mut Analysis, table_function: bool) -> Result<()> {
    match v {
        Value::Object(m) => {
            if !table_function
                && matches!(
                    m.get("class").and_then(Value::as_str),
                    Some("FUNCTION" | "WINDOW")
                )
            {
                let text = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
                let name = text("function_name");
                if !function_allowed(text("catalog"), text("schema"), name) {
                    let shown = [text("catalog"), text("schema"), name]
                        .into_iter()
                        .filter(|p| !p.is_empty())
                        .collect::<Vec<_>>()
                        .join(".");
                    return Err(Error::bad_request(
                        Code::Forbidden,
                        format!(
                            "not allowed: the function {shown}() is not one lh queries may call"
                        ),
                    )
                    .with_hint(
                        if RECURSIVE_JSON.contains(&name.to_ascii_lowercase().as_str()) {
                            "this JSON function recurses once per level of a value's nesting, so \
                         that a deeply nested value would overflow the server's stack: \
                         json_extract, json_keys, json_type and json_transform read nested \
                         JSON without recursing"
                        } else {
                            "lh queries call DuckDB's functions of values (arithmetic, text, \
                         dates, lists, JSON, aggregates, windows); those that read the \
                         server's settings, session or catalog, or run SQL text, are left out"
                        },
                    ));
                }
                check_value_size(name, m.get("children"))?;
            }
            // Bare keywords DuckDB's binder makes calls of where no column has their
            // name (`current_catalog` is `current_database()`): held to the same list.
            if m.get("class").and_then(Value::as_str) == Some("COLUMN_REF")
                && let Some(call) = keyword_call(m)
                && !function_allowed("", "", call)
            {
                return Err(Error::bad_request(
                    Code::Forbidden,
                    format!("not allowed: {call}() is not one lh queries may call"),
                )
                .with_hint(
                    "lh queries call DuckDB's functions of values; those that read the \
                     server's settings, session or catalog are left out",
                ));
            }
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
            let is_table_function = m.get("type").and_then(Value::as_str) == Some("TABLE_FUNCTION");
            match m.get("type").and_then(Value::as_str) {
                Some("TABLE_FUNCTION") => check_table_function(m.get("function"))?,
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
                    .with_hint("DESCRIBE ns.table shows a table")
                    .with_remedy(Remedy::ListTables { at: None }));
                }
                _ => {}
            }
            if m.get("type").and_then(Value::as_str) == Some("BASE_TABLE") {
                if m.get("at_clause").is_some_and(|a| !a.is_null()) {
                    return Err(Error::bad_request(
                        Code::SqlError,
                        "AT (...) time travel is not supported in SQL",
                    )
                    .with_remedy(Remedy::ChooseCommit));
                }
                let parts = table_parts(v);
                // Checked as DuckDB reads names: in any case.
                let lower: TableRef = parts.iter().map(|p| p.to_ascii_lowercase()).collect();
                // DuckDB reads a "table" named like a file (`FROM 'x.parquet'`, or
                // `FROM x.parquet`, whose parts it joins) as that file: a query sees
                // tables, never paths.
                let joined = lower.join(".");
                if looks_like_a_path(&joined) {
                    return Err(files_refused(&format!(
                        "'{joined}' is a file path, not a table"
                    )));
                }
                // Nor DuckDB's own catalog views, which describe every commit the server
                // holds open (and the files their views read).
                if is_system_name(&lower) {
                    return Err(files_refused(&format!(
                        "'{joined}' is DuckDB's catalog, not an lh table"
                    )));
                }
                out.tables.push(parts);
            }
            for (k, x) in m {
                walk_node(x, out, is_table_function && k == "function")?;
            }
        }
        Value::Array(a) => {
            for x in a {
                walk_node(x, out, false)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The filters of a plain SELECT's WHERE on the tables of its FROM (base tables joined
/// by regular joins, each named once in the whole statement): a conjunct comparing one
/// table's column with constants holds for every row the WHERE keeps, NULL-extended
/// rows of outer joins included (a comparison with NULL is not true), so leaving out
/// files whose rows cannot pass it changes no result. ASOF and positional joins are
/// left alone: which row they match depends on rows the filter removes.
fn filters(node: &Value, named: &[TableRef]) -> std::collections::BTreeMap<TableRef, Vec<Filter>> {
    let mut out = std::collections::BTreeMap::new();
    if node.get("type").and_then(Value::as_str) != Some("SELECT_NODE") {
        return out;
    }
    // A sample is taken before the WHERE: fewer files would change which rows it takes.
    if node.get("sample").is_some_and(|s| !s.is_null()) {
        return out;
    }
    // alias (or table name) -> table
    let mut from: Vec<(String, TableRef)> = Vec::new();
    if !from_tables(node.get("from_table").unwrap_or(&Value::Null), &mut from) {
        return out;
    }
    let once = |t: &TableRef| named.iter().filter(|n| *n == t).count() == 1;
    let mut conjuncts = Vec::new();
    flatten_and(
        node.get("where_clause").unwrap_or(&Value::Null),
        &mut conjuncts,
    );
    for c in conjuncts {
        for (col, filter) in comparison(c) {
            let table = match col.as_slice() {
                [column] if from.len() == 1 => Some((from[0].1.clone(), column.clone())),
                [qualifier, column] => {
                    let mut matching = from
                        .iter()
                        .filter(|(alias, _)| alias.eq_ignore_ascii_case(qualifier));
                    match (matching.next(), matching.next()) {
                        (Some((_, t)), None) => Some((t.clone(), column.clone())),
                        _ => None,
                    }
                }
                _ => None,
            };
            let Some((table, column)) = table else {
                continue;
            };
            if !once(&table) {
                continue;
            }
            out.entry(table).or_insert_with(Vec::new).push(Filter {
                column: column.to_ascii_lowercase(),
                ..filter
            });
        }
    }
    out
}

/// The base tables of a FROM clause with the names their columns are qualified by;
/// false when it holds anything else (a subquery, a function, an ASOF join...).
fn from_tables(v: &Value, out: &mut Vec<(String, TableRef)>) -> bool {
    match v.get("type").and_then(Value::as_str) {
        Some("BASE_TABLE") => {
            // Columns renamed in the FROM (`t AS x(a, b)`), or a sample of the table:
            // left alone.
            if v.get("column_name_alias")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
                || v.get("sample").is_some_and(|s| !s.is_null())
            {
                return false;
            }
            let parts = table_parts(v);
            let alias = match lower(v, "alias") {
                a if a.is_empty() => lower(v, "table_name"),
                a => a,
            };
            out.push((alias, parts));
            true
        }
        Some("JOIN") => {
            let regular = matches!(
                v.get("ref_type").and_then(Value::as_str),
                Some("REGULAR" | "CROSS")
            ) && matches!(
                v.get("join_type").and_then(Value::as_str),
                Some("INNER" | "LEFT" | "RIGHT" | "FULL" | "OUTER")
            );
            regular
                && from_tables(v.get("left").unwrap_or(&Value::Null), out)
                && from_tables(v.get("right").unwrap_or(&Value::Null), out)
        }
        _ => false,
    }
}

/// A BASE_TABLE's dotted name, lowercased (`["raw", "orders"]`).
/// A table's name as written (lh's names keep their case: `"Sales 2026"`; the query
/// engine folds unquoted ones, `QueryEngine::named`).
fn table_parts(v: &Value) -> TableRef {
    ["catalog_name", "schema_name", "table_name"]
        .into_iter()
        .map(|k| v.get(k).and_then(Value::as_str).unwrap_or("").to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn lower(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase()
}

fn flatten_and<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    if v.get("type").and_then(Value::as_str) == Some("CONJUNCTION_AND") {
        for c in v
            .get("children")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            flatten_and(c, out);
        }
    } else if !v.is_null() {
        out.push(v);
    }
}

/// `column op constant` (either way round), `column BETWEEN a AND b` (two filters), or
/// `column IN (constants)`.
fn comparison(v: &Value) -> Vec<(Vec<String>, Filter)> {
    if v.get("type").and_then(Value::as_str) == Some("COMPARE_BETWEEN") {
        let half = |bound: &str, op| -> Option<(Vec<String>, Filter)> {
            let col = column_ref(v.get("input")?)?;
            Some((
                col,
                Filter {
                    column: String::new(),
                    op,
                    values: vec![constant(v.get(bound)?)?],
                },
            ))
        };
        return [half("lower", Op::Ge), half("upper", Op::Le)]
            .into_iter()
            .flatten()
            .collect();
    }
    one_comparison(v).into_iter().collect()
}

fn column_ref(v: &Value) -> Option<Vec<String>> {
    (v.get("class").and_then(Value::as_str) == Some("COLUMN_REF"))
        .then(|| {
            v.get("column_names").and_then(Value::as_array).map(|a| {
                a.iter()
                    .filter_map(|p| p.as_str().map(String::from))
                    .collect()
            })
        })
        .flatten()
}

fn one_comparison(v: &Value) -> Option<(Vec<String>, Filter)> {
    let column = column_ref;
    let filter = |op, values| Filter {
        column: String::new(),
        op,
        values,
    };
    let op = match v.get("type").and_then(Value::as_str)? {
        "COMPARE_EQUAL" => Op::Eq,
        "COMPARE_LESSTHAN" => Op::Lt,
        "COMPARE_LESSTHANOREQUALTO" => Op::Le,
        "COMPARE_GREATERTHAN" => Op::Gt,
        "COMPARE_GREATERTHANOREQUALTO" => Op::Ge,
        "COMPARE_IN" => {
            let children = v.get("children")?.as_array()?;
            let (first, rest) = children.split_first()?;
            let col = column(first)?;
            if rest.len() > MAX_IN_VALUES {
                return None;
            }
            let values = rest.iter().map(constant).collect::<Option<Vec<_>>>()?;
            return Some((col, filter(Op::In, values)));
        }
        _ => return None,
    };
    let (l, r) = (v.get("left")?, v.get("right")?);
    match (column(l), column(r)) {
        (Some(col), None) => Some((col, filter(op, vec![constant(r)?]))),
        (None, Some(col)) => Some((col, filter(op.flipped(), vec![constant(l)?]))),
        _ => None,
    }
}

/// A constant, or a cast of a text constant (`DATE '2026-01-01'`): integers and text
/// only (DuckDB casts them to the column's type; decimals and floats are left alone).
fn constant(v: &Value) -> Option<Constant> {
    if v.get("class").and_then(Value::as_str) == Some("CAST") {
        let target = v.pointer("/cast_type/id").and_then(Value::as_str)?;
        if v.get("try_cast").and_then(Value::as_bool) == Some(true)
            || !matches!(
                target,
                "DATE" | "TIMESTAMP" | "TIMESTAMP WITH TIME ZONE" | "VARCHAR"
            )
        {
            return None;
        }
        return match constant(v.get("child")?)? {
            Constant::Text(text) => Some(Constant::Typed {
                text,
                to: target.to_string(),
            }),
            _ => None,
        };
    }
    if v.get("class").and_then(Value::as_str) != Some("CONSTANT") {
        return None;
    }
    let value = v.get("value")?;
    if value.get("is_null").and_then(Value::as_bool) != Some(false) {
        return None;
    }
    match value.pointer("/type/id").and_then(Value::as_str)? {
        "TINYINT" | "SMALLINT" | "INTEGER" | "BIGINT" => {
            value.get("value")?.as_i64().map(Constant::Integer)
        }
        "VARCHAR" => value
            .get("value")?
            .as_str()
            .map(|s| Constant::Text(s.to_string())),
        _ => None,
    }
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
    Error::bad_request(Code::Forbidden, format!("not allowed: {what}"))
        .with_hint(
            "queries read the tables of their ref by name (raw.orders); only range, \
             generate_series, unnest, repeat, repeat_row, json_each and json_tree make rows \
             otherwise",
        )
        .with_remedy(Remedy::ImportFiles)
}
