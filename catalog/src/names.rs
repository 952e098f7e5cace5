//! Validation of the names users type: branch and tag names (git's ref rules) and table
//! and namespace names (levels joined by dots, a level other than a lowercase identifier
//! double-quoted: `raw.orders`, `"my-db"."Sales 2026"`). Every error says what is wrong.

use crate::error::{Error, ErrorKind, Result};

/// The longest branch or tag name, in bytes.
pub const MAX_REF_NAME_LEN: usize = 250;
/// The longest table name, in bytes.
pub const MAX_TABLE_NAME_LEN: usize = 255;

/// Checks a branch or tag name: letters, digits, `.`, `_`, `-` and `/`; not empty; at
/// most 250 bytes; no `..`, no leading `-`, and git's rules on `/`-separated components.
pub fn validate_ref_name(name: &str) -> Result<()> {
    let fail = |why: &str| {
        Err(Error::new(
            ErrorKind::InvalidName,
            format!("invalid ref name '{}': {why}", printable(name)),
        ))
    };
    if name.is_empty() {
        return fail("a name cannot be empty");
    }
    if name.len() > MAX_REF_NAME_LEN {
        return fail(&format!("longer than {MAX_REF_NAME_LEN} bytes"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
    {
        return fail(&format!(
            "'{}' is not allowed (use letters, digits, '.', '_', '-' and '/')",
            c.escape_debug()
        ));
    }
    if name.starts_with('-') {
        return fail("a name cannot start with '-'");
    }
    if name.contains("..") {
        return fail("'..' is not allowed");
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return fail("'/' separates non-empty components");
    }
    if name.ends_with('.') || name.ends_with(".lock") {
        return fail("a name cannot end with '.' or '.lock'");
    }
    if name.split('/').any(|c| c.starts_with('.')) {
        return fail("a component cannot start with '.'");
    }
    Ok(())
}

/// Checks a table name: two or more levels as [`join_levels`] writes them, the last
/// being the table and the others its (possibly nested) namespace. A level is any
/// non-empty text without control characters (Iceberg's names: `my-db`, `TEST NS`,
/// `new.db`); one other than a lowercase identifier is double-quoted, as in SQL
/// (`"my-db"."Sales 2026"`), so that each table has one spelling.
pub fn validate_table_name(name: &str) -> Result<()> {
    checked(name, "table name", 2).map(|_| ())
}

/// Checks a namespace: one or more levels as [`join_levels`] writes them.
pub fn validate_namespace(name: &str) -> Result<()> {
    checked(name, "namespace", 1).map(|_| ())
}

/// The levels of `name`, checked: at least `min`, each a level lh takes, and `name`
/// their one spelling.
fn checked(name: &str, what: &str, min: usize) -> Result<Vec<String>> {
    let fail = |why: &str| {
        Err(Error::new(
            ErrorKind::InvalidName,
            format!("invalid {what} '{}': {why}", printable(name)),
        ))
    };
    if name.len() > MAX_TABLE_NAME_LEN {
        return fail(&format!("longer than {MAX_TABLE_NAME_LEN} bytes"));
    }
    let levels = match parse_levels(name) {
        Ok(l) => l,
        Err(why) => return fail(&why),
    };
    if levels.len() < min {
        return fail("expected 'namespace.table'");
    }
    let spelled = join_levels(&levels);
    if spelled != name {
        return fail(&format!("write it {spelled}"));
    }
    Ok(levels)
}

/// The levels of a name written as [`join_levels`] writes it, or as a user may (a plain
/// level quoted: `raw."orders"` is `raw.orders`).
pub fn levels(text: &str) -> Result<Vec<String>> {
    parse_levels(text).map_err(|why| {
        Error::new(
            ErrorKind::InvalidName,
            format!("invalid name '{}': {why}", printable(text)),
        )
    })
}

/// `text`'s one spelling (see [`levels`]).
pub fn canonical(text: &str) -> Result<String> {
    Ok(join_levels(&levels(text)?))
}

/// Whether a level is written as it is: a lowercase identifier (`[a-z_][a-z0-9_]*`).
pub fn is_plain(level: &str) -> bool {
    check_identifier(level).is_ok()
}

/// A level as a name writes it: as it is when plain, else double-quoted (`"` doubled).
pub fn quote_level(level: &str) -> std::borrow::Cow<'_, str> {
    if is_plain(level) {
        level.into()
    } else {
        format!("\"{}\"", level.replace('"', "\"\"")).into()
    }
}

/// Levels as one name: each as [`quote_level`] writes it, joined by dots.
pub fn join_levels<S: AsRef<str>>(levels: &[S]) -> String {
    levels
        .iter()
        .map(|l| quote_level(l.as_ref()))
        .collect::<Vec<_>>()
        .join(".")
}

/// A table name's namespace and table, as text: (`sales.eu`, `orders`) of
/// `sales.eu.orders`, (`"my-db"`, `"T"`) of `"my-db"."T"`. `None` without a dot outside
/// quotes.
pub fn split_table(name: &str) -> Option<(&str, &str)> {
    let mut quoted = false;
    let mut last = None;
    for (i, c) in name.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => last = Some(i),
            _ => {}
        }
    }
    last.map(|i| (&name[..i], &name[i + 1..]))
}

/// The table a SQL statement names by DuckDB's schema and table (`"my-db"."T"`: schema
/// `my-db`, table `T`): a dotted schema is a nested namespace, a level between each two
/// dots, as lh has always read `"a.b".t` (`"My DB.sales".t` is `"My DB".sales.t`, the
/// schema [`to_sql`] gives that table); any other schema is one level. (A query reads
/// the one-level `"a.b".t` when there is no nested one: see lh-query's `named`.)
pub fn from_sql(schema: &str, table: &str) -> String {
    let nested: Vec<&str> = schema.split('.').collect();
    if nested.len() > 1 && nested.iter().all(|l| !l.is_empty()) {
        let mut levels = nested;
        levels.push(table);
        join_levels(&levels)
    } else {
        join_levels(&[schema, table])
    }
}

/// [`from_sql`] with each part folded to lowercase where that makes it plain, as SQL
/// folds an unquoted name (`RAW.Orders` is `raw.orders`; `"Sales 2026"` stays).
pub fn from_sql_folded(schema: &str, table: &str) -> String {
    from_sql(&fold(schema), &fold(table))
}

/// A part of a SQL name folded to lowercase where that makes it plain (its dotted
/// parts, for a schema).
pub fn fold(part: &str) -> std::borrow::Cow<'_, str> {
    let lower = part.to_ascii_lowercase();
    if lower != part && lower.split('.').all(is_plain) {
        lower.into()
    } else {
        part.into()
    }
}

/// The schema and table that name a table in SQL (the inverse of [`from_sql`]).
pub fn to_sql(name: &str) -> Option<(String, String)> {
    let mut levels = parse_levels(name).ok()?;
    let table = levels.pop()?;
    if levels.is_empty() {
        return None;
    }
    Some((levels.join("."), table))
}

fn parse_levels(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut levels = Vec::new();
    let mut rest = text;
    loop {
        let level = if let Some(quoted) = rest.strip_prefix('"') {
            let mut level = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    None => return Err("a quoted level has no closing '\"'".into()),
                    Some((i, '"')) => {
                        if quoted[i + 1..].starts_with('"') {
                            level.push('"');
                            chars.next();
                        } else {
                            break i + 1;
                        }
                    }
                    Some((_, c)) => level.push(c),
                }
            };
            rest = &quoted[end..];
            if level.is_empty() {
                return Err("a level cannot be empty".into());
            }
            if let Some(c) = level.chars().find(|c| c.is_control()) {
                return Err(format!(
                    "'{}' is not allowed in a name (a control character)",
                    c.escape_debug()
                ));
            }
            if !rest.is_empty() && !rest.starts_with('.') {
                return Err("a quoted level is followed by '.' or nothing".into());
            }
            level
        } else {
            let (part, after) = match rest.find('.') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            };
            check_identifier(part)?;
            rest = after;
            part.to_string()
        };
        levels.push(level);
        match rest.strip_prefix('.') {
            None => return Ok(levels),
            Some(after) => rest = after,
        }
    }
}

fn check_identifier(part: &str) -> std::result::Result<(), String> {
    let mut chars = part.chars();
    match chars.next() {
        None => return Err("empty part between dots".into()),
        Some(c) if !(c.is_ascii_lowercase() || c == '_') => {
            return Err(format!(
                "'{part}' must start with a lowercase letter or '_' (or be quoted: \"{part}\")"
            ));
        }
        _ => {}
    }
    if let Some(c) = chars.find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')) {
        return Err(format!(
            "'{}' is not allowed in '{part}' unquoted (use lowercase letters, digits and '_', or quote it: \"{part}\")",
            c.escape_debug()
        ));
    }
    Ok(())
}

/// The name as it can be shown in a message: control characters escaped, long names cut.
pub(crate) fn printable(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars().take(80) {
        if c.is_control() {
            s.extend(c.escape_debug());
        } else {
            s.push(c);
        }
    }
    if name.chars().count() > 80 {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_ref(name: &str) -> String {
        match validate_ref_name(name) {
            Ok(()) => "ok".into(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn ref_names() {
        let cases = [
            ("main", "ok"),
            ("alice.fix-billing", "ok"),
            ("feature/x_1", "ok"),
            ("v1.2.3", "ok"),
            ("", "invalid ref name '': a name cannot be empty"),
            ("-x", "invalid ref name '-x': a name cannot start with '-'"),
            ("a..b", "invalid ref name 'a..b': '..' is not allowed"),
            (
                "a b",
                "invalid ref name 'a b': ' ' is not allowed (use letters, digits, '.', '_', '-' and '/')",
            ),
            (
                "a@b",
                "invalid ref name 'a@b': '@' is not allowed (use letters, digits, '.', '_', '-' and '/')",
            ),
            (
                "a/",
                "invalid ref name 'a/': '/' separates non-empty components",
            ),
            (
                "a//b",
                "invalid ref name 'a//b': '/' separates non-empty components",
            ),
            (
                "x.lock",
                "invalid ref name 'x.lock': a name cannot end with '.' or '.lock'",
            ),
            (
                "a/.b",
                "invalid ref name 'a/.b': a component cannot start with '.'",
            ),
            (
                "é",
                "invalid ref name 'é': 'é' is not allowed (use letters, digits, '.', '_', '-' and '/')",
            ),
        ];
        for (name, want) in cases {
            assert_eq!(check_ref(name), want, "for {name:?}");
        }
        assert_eq!(check_ref(&"a".repeat(250)), "ok");
        assert!(check_ref(&"a".repeat(251)).ends_with("longer than 250 bytes"));
    }

    #[test]
    fn table_names() {
        let ok = ["raw.orders", "a.b.c", "_x.y_1", "analytics.daily_2026"];
        for name in ok {
            assert!(validate_table_name(name).is_ok(), "{name}");
        }
        let bad = [
            ("orders", "expected 'namespace.table'"),
            (
                "Raw.orders",
                "'Raw' must start with a lowercase letter or '_'",
            ),
            ("raw..orders", "empty part between dots"),
            ("raw.1st", "'1st' must start with a lowercase letter or '_'"),
            ("raw.or-ders", "'-' is not allowed in 'or-ders' unquoted"),
            ("raw.orders.", "empty part between dots"),
            ("raw.\"orders\"", "write it raw.orders"),
            ("raw.\"\"", "a level cannot be empty"),
            ("raw.\"a\nb\"", "a control character"),
            ("raw.\"ab", "no closing"),
            ("raw.\"a\"b", "followed by '.' or nothing"),
        ];
        for (name, want) in bad {
            let err = validate_table_name(name).unwrap_err().to_string();
            assert!(err.contains(want), "{name}: {err}");
        }
    }

    /// Any level Iceberg allows has one spelling, and reads back as it was.
    #[test]
    fn levels_are_quoted_when_not_plain() {
        let cases: [(&[&str], &str); 5] = [
            (&["raw", "orders"], "raw.orders"),
            (&["my-db", "Sales 2026"], "\"my-db\".\"Sales 2026\""),
            (&["new.db", "ta.ble"], "\"new.db\".\"ta.ble\""),
            (&["a", "b", "say \"hi\""], "a.b.\"say \"\"hi\"\"\""),
            (&["TEST NS", "t"], "\"TEST NS\".t"),
        ];
        for (levels, text) in cases {
            assert_eq!(join_levels(levels), text);
            assert_eq!(super::levels(text).unwrap(), levels);
            assert!(validate_table_name(text).is_ok(), "{text}");
        }
        assert_eq!(canonical("raw.\"orders\"").unwrap(), "raw.orders");
        assert_eq!(split_table("\"a.b\".\"c.d\""), Some(("\"a.b\"", "\"c.d\"")));
        assert_eq!(split_table("sales.eu.orders"), Some(("sales.eu", "orders")));
        assert_eq!(from_sql("a.b", "t"), "a.b.t");
        assert_eq!(from_sql("my-db", "T"), "\"my-db\".\"T\"");
        assert_eq!(from_sql("a.b-c", "t"), "a.\"b-c\".t");
        assert_eq!(from_sql("My DB.sales", "t"), "\"My DB\".sales.t");
        assert_eq!(from_sql("a..b", "t"), "\"a..b\".t");
        assert_eq!(from_sql(".a", "t"), "\".a\".t");
        assert_eq!(from_sql_folded("RAW", "Orders"), "raw.orders");
        assert_eq!(
            from_sql_folded("my-db", "Sales 2026"),
            "\"my-db\".\"Sales 2026\""
        );
        for name in [
            "a.b.t",
            "\"my-db\".\"T\"",
            "a.\"b-c\".t",
            "\"My DB\".sales.t",
        ] {
            let (schema, table) = to_sql(name).unwrap();
            assert_eq!(from_sql(&schema, &table), name);
        }
    }
}
