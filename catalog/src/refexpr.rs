//! Ref expressions: how users name a commit.
//!
//! | expression                   | meaning                                            |
//! |------------------------------|----------------------------------------------------|
//! | `main`                       | the head of a branch, or the commit of a tag       |
//! | `main@1a2b3c4d`              | a commit main was at, by hash (prefix >= 8)        |
//! | `@1a2b3c4d`                  | any commit, by hash (prefix >= 8)                  |
//! | `main@2026-11-28T10:00:00Z`  | main as it was at that time (RFC 3339)             |

use chrono::{DateTime, Utc};

use crate::error::{Error, ErrorKind, Result};
use crate::names::{printable, validate_ref_name};

/// The longest text after `@`: a whole hash, or a time with nanoseconds and an offset.
/// (A time with sixteen million digits of fraction parsed, and a query held it as
/// long as it ran: the thirty-fifth review.)
const MAX_AT_LEN: usize = 64;

/// The shortest hash prefix accepted.
pub const MIN_HASH_PREFIX: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefExpr {
    /// A branch or a tag.
    Named(String),
    /// A commit, by hash prefix (lowercase hex), that the named ref was at: on its
    /// first-parent line.
    NamedAtHash(String, String),
    /// The named ref as of a time.
    NamedAtTime(String, DateTime<Utc>),
    /// Any commit, by hash prefix (lowercase hex).
    Hash(String),
}

impl RefExpr {
    pub fn parse(s: &str) -> Result<RefExpr> {
        let Some((name, at)) = s.split_once('@') else {
            validate_ref_name(s)?;
            return Ok(RefExpr::Named(s.to_string()));
        };
        if at.len() > MAX_AT_LEN {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!(
                    "invalid ref '{}': what follows '@' is at most {MAX_AT_LEN} characters",
                    printable(s)
                ),
            ));
        }
        if name.is_empty() {
            return Ok(RefExpr::Hash(parse_hash_prefix(s, at)?));
        }
        validate_ref_name(name)?;
        if at.bytes().all(|b| b.is_ascii_hexdigit()) && !at.is_empty() {
            return Ok(RefExpr::NamedAtHash(
                name.to_string(),
                parse_hash_prefix(s, at)?,
            ));
        }
        match DateTime::parse_from_rfc3339(at) {
            Ok(t) => Ok(RefExpr::NamedAtTime(
                name.to_string(),
                t.with_timezone(&Utc),
            )),
            Err(_) => Err(Error::new(
                ErrorKind::InvalidName,
                format!(
                    "invalid ref '{s}': after '@' expected a commit hash (at least {MIN_HASH_PREFIX} hex characters) or a time such as 2026-11-28T10:00:00Z"
                ),
            )),
        }
    }

    /// A branch or tag lh names itself (a run's branch, the default branch): not parsed,
    /// as no user wrote it.
    pub fn named(name: impl Into<String>) -> RefExpr {
        RefExpr::Named(name.into())
    }

    /// The named ref the expression starts from, if any.
    pub fn ref_name(&self) -> Option<&str> {
        match self {
            RefExpr::Named(n) | RefExpr::NamedAtHash(n, _) | RefExpr::NamedAtTime(n, _) => Some(n),
            RefExpr::Hash(_) => None,
        }
    }
}

/// The expression as a user writes it (parsing it gives it back).
impl std::fmt::Display for RefExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefExpr::Named(n) => write!(f, "{n}"),
            RefExpr::NamedAtHash(n, h) => write!(f, "{n}@{h}"),
            RefExpr::NamedAtTime(n, t) => write!(
                f,
                "{n}@{}",
                t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            ),
            RefExpr::Hash(h) => write!(f, "@{h}"),
        }
    }
}

impl std::str::FromStr for RefExpr {
    type Err = Error;

    fn from_str(s: &str) -> Result<RefExpr> {
        RefExpr::parse(s)
    }
}

/// What resolves to a commit: a [`RefExpr`], or the text of one (parsed where it is
/// resolved: the server parses a client's text once, at its edge, and passes the
/// expression).
pub trait ToRefExpr: std::fmt::Display {
    fn to_ref_expr(&self) -> Result<std::borrow::Cow<'_, RefExpr>>;
}

impl ToRefExpr for RefExpr {
    fn to_ref_expr(&self) -> Result<std::borrow::Cow<'_, RefExpr>> {
        Ok(std::borrow::Cow::Borrowed(self))
    }
}

impl ToRefExpr for str {
    fn to_ref_expr(&self) -> Result<std::borrow::Cow<'_, RefExpr>> {
        RefExpr::parse(self).map(std::borrow::Cow::Owned)
    }
}

impl ToRefExpr for String {
    fn to_ref_expr(&self) -> Result<std::borrow::Cow<'_, RefExpr>> {
        self.as_str().to_ref_expr()
    }
}

fn parse_hash_prefix(expr: &str, h: &str) -> Result<String> {
    if h.len() < MIN_HASH_PREFIX || h.len() > 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "invalid ref '{expr}': a commit hash is {MIN_HASH_PREFIX} to 64 hex characters"
            ),
        ));
    }
    Ok(h.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(s: &str) -> String {
        match RefExpr::parse(s) {
            Ok(e) => format!("{e:?}"),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn parses() {
        let cases = [
            ("main", r#"Named("main")"#),
            ("alice/fix", r#"Named("alice/fix")"#),
            ("main@1A2b3c4d", r#"NamedAtHash("main", "1a2b3c4d")"#),
            ("@deadbeef00", r#"Hash("deadbeef00")"#),
            (
                "main@2026-11-28T10:00:00Z",
                "NamedAtTime(\"main\", 2026-11-28T10:00:00Z)",
            ),
            (
                "main@2026-11-28T11:00:00+01:00",
                "NamedAtTime(\"main\", 2026-11-28T10:00:00Z)",
            ),
            (
                "@abc",
                "error: invalid ref '@abc': a commit hash is 8 to 64 hex characters",
            ),
            (
                "main@abc",
                "error: invalid ref 'main@abc': a commit hash is 8 to 64 hex characters",
            ),
            (
                "@",
                "error: invalid ref '@': a commit hash is 8 to 64 hex characters",
            ),
            (
                "main@yesterday",
                "error: invalid ref 'main@yesterday': after '@' expected a commit hash (at least 8 hex characters) or a time such as 2026-11-28T10:00:00Z",
            ),
            (
                "ma in@deadbeef",
                "error: invalid ref name 'ma in': ' ' is not allowed (use letters, digits, '.', '_', '-' and '/')",
            ),
            ("", "error: invalid ref name '': a name cannot be empty"),
        ];
        // A time with a fraction past nanoseconds, however long, is refused before it
        // is parsed; the message quotes only its start.
        let long = format!("main@2026-12-07T16:10:00.{}Z", "0".repeat(1 << 20));
        let e = check(&long);
        assert!(
            e.contains("at most 64 characters"),
            "{}",
            &e[..200.min(e.len())]
        );
        assert!(e.len() < 300, "{}", e.len());
        assert!(check(&format!("@{}", "a".repeat(65))).contains("at most 64"));
        for (input, want) in cases {
            assert_eq!(check(input), want, "for {input:?}");
            // What parses is written back as an expression that parses to itself.
            if let Ok(e) = RefExpr::parse(input) {
                assert_eq!(RefExpr::parse(&e.to_string()).unwrap(), e, "for {input:?}");
            }
        }
    }
}
