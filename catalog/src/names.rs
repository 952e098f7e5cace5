//! Validation of the names users type: branch and tag names (git's ref rules) and table
//! names (lowercase identifiers joined by dots). Every error says what is wrong.

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

/// Checks a table name: two or more lowercase identifiers (`[a-z_][a-z0-9_]*`) joined by
/// dots, the last being the table and the others its (possibly nested) namespace.
pub fn validate_table_name(name: &str) -> Result<()> {
    let fail = |why: &str| {
        Err(Error::new(
            ErrorKind::InvalidName,
            format!("invalid table name '{}': {why}", printable(name)),
        ))
    };
    if name.len() > MAX_TABLE_NAME_LEN {
        return fail(&format!("longer than {MAX_TABLE_NAME_LEN} bytes"));
    }
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() < 2 {
        return fail("expected 'namespace.table'");
    }
    for part in parts {
        if let Err(why) = check_identifier(part) {
            return fail(&why);
        }
    }
    Ok(())
}

/// Checks a namespace: one or more lowercase identifiers joined by dots.
pub fn validate_namespace(name: &str) -> Result<()> {
    for part in name.split('.') {
        if let Err(why) = check_identifier(part) {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!("invalid namespace '{}': {why}", printable(name)),
            ));
        }
    }
    Ok(())
}

fn check_identifier(part: &str) -> std::result::Result<(), String> {
    let mut chars = part.chars();
    match chars.next() {
        None => return Err("empty part between dots".into()),
        Some(c) if !(c.is_ascii_lowercase() || c == '_') => {
            return Err(format!(
                "'{part}' must start with a lowercase letter or '_'"
            ));
        }
        _ => {}
    }
    if let Some(c) = chars.find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')) {
        return Err(format!(
            "'{}' is not allowed in '{part}' (use lowercase letters, digits and '_')",
            c.escape_debug()
        ));
    }
    Ok(())
}

/// The name as it can be shown in a message: control characters escaped, long names cut.
pub(crate) fn printable(name: &str) -> String {
    let mut s: String = name.chars().take(80).flat_map(char::escape_debug).collect();
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
            ("raw.or-ders", "'-' is not allowed in 'or-ders'"),
            ("raw.orders.", "empty part between dots"),
        ];
        for (name, want) in bad {
            let err = validate_table_name(name).unwrap_err().to_string();
            assert!(err.contains(want), "{name}: {err}");
        }
    }
}
