//! Secrets for pipelines (`lh secret set NAME [--on PATTERN]`, value on stdin): sealed
//! with the server key (`key`) in `lh_secrets`, readable by no API. A Python function
//! declares the ones it needs (`@lh.python(secrets=["STRIPE_KEY"])`); only its call gets
//! them, as environment variables, and only in a run whose target branch matches the
//! secret's pattern (a secret for `main` reaches only runs publishing to `main`, which a
//! protected `main` allows only to roles that may merge there). The run's logs, errors
//! and expectation details have every value replaced by `***` (`redact`: a best effort
//! against accidents, not against a function that encodes the value on purpose, which
//! is why the pattern matters). A function's cache key holds each secret's name and
//! version, never its value: setting a secret again makes the functions using it run
//! again.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Utc;
use sqlx::{AnyPool, Row};

use super::key::ServerKey;
use super::roles::Pattern;
use crate::error::{Code, Error, Kind, Result};

pub struct Secrets {
    pool: AnyPool,
    key: Arc<ServerKey>,
}

fn db(e: sqlx::Error) -> Error {
    crate::db::failed("secret storage", e)
}

/// The largest secret value.
pub const MAX_VALUE: usize = 64 * 1024;

/// Names a process environment uses for itself: no secret may replace them.
const RESERVED: &[&str] = &["PATH", "HOME", "LANG", "TMPDIR", "PWD", "SHELL", "USER"];

/// A secret's name: an environment variable's (`STRIPE_KEY`), not one the sandbox or
/// Python reads itself.
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        return Err(format!(
            "invalid secret name '{}': uppercase letters, digits and '_', as an environment variable (at most 64)",
            name.escape_debug()
        ));
    }
    if RESERVED.contains(&name)
        || ["LD_", "PYTHON", "LH_", "UV_", "BWRAP"]
            .iter()
            .any(|p| name.starts_with(p))
    {
        return Err(format!(
            "'{name}' is an environment variable the sandbox or Python reads: name the secret otherwise"
        ));
    }
    Ok(())
}

/// A secret as a function gets it.
pub struct Value {
    pub name: String,
    pub version: i64,
    pub value: String,
}

/// A secret as the store shows it: its name, version and scope, never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secret {
    pub name: String,
    /// Grows with each set (functions using it run again).
    pub version: i64,
    /// The branches whose runs get it (a pattern: `main`, `team-a.*`, `*`).
    pub refs: String,
    pub updated: crate::Updated,
}

impl Secrets {
    pub fn new(pool: AnyPool, key: Arc<ServerKey>) -> Secrets {
        Secrets { pool, key }
    }

    /// Sets a secret; returns its new version.
    pub async fn set(&self, name: &str, value: &str, refs: &str, by: &str) -> Result<Secret> {
        check_name(name).map_err(|m| Error::bad_request(Code::InvalidArgument, m))?;
        let refs = Pattern::parse(refs, "ref")?;
        if value.is_empty() || value.len() > MAX_VALUE {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!("a secret's value is 1 byte to {} KiB", MAX_VALUE / 1024),
            ));
        }
        let sealed = self.key.seal(&format!("secret:{name}"), value.as_bytes())?;
        let now = Utc::now().timestamp_millis();
        sqlx::query(
            "INSERT INTO lh_secrets (name, version, sealed, refs, updated_by, updated_at) \
             VALUES ($1, 1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET \
             version = lh_secrets.version + 1, sealed = excluded.sealed, refs = excluded.refs, \
             updated_by = excluded.updated_by, updated_at = excluded.updated_at",
        )
        .bind(name)
        .bind(sealed)
        .bind(refs.as_str())
        .bind(by)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        self.list()
            .await?
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| Error::internal("the secret just set is gone"))
    }

    pub async fn remove(&self, name: &str) -> Result<()> {
        crate::db::delete_named(&self.pool, "lh_secrets", name, || {
            Error::not_found(Code::SecretNotFound, format!("no secret '{name}'"))
        })
        .await
    }

    /// Names and versions; never a value.
    pub async fn list(&self) -> Result<Vec<Secret>> {
        let rows = sqlx::query(
            "SELECT name, version, refs, updated_by, updated_at FROM lh_secrets ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| {
                Ok(Secret {
                    name: r.try_get("name").map_err(db)?,
                    version: r.try_get("version").map_err(db)?,
                    refs: r.try_get("refs").map_err(db)?,
                    updated: crate::Updated::new(
                        r.try_get("updated_by").map_err(db)?,
                        r.try_get("updated_at").map_err(db)?,
                    ),
                })
            })
            .collect()
    }

    /// A secret's row, if a run on `target` may have it.
    async fn row_for(&self, name: &str, target: &str) -> Result<sqlx::any::AnyRow> {
        let row = sqlx::query("SELECT version, sealed, refs FROM lh_secrets WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?
            .ok_or_else(|| missing(name))?;
        let refs: String = row.try_get("refs").map_err(db)?;
        if !Pattern::parse(&refs, "ref").is_ok_and(|p| p.matches(target)) {
            return Err(Error::new(
                Kind::Forbidden,
                Code::PermissionDenied,
                format!(
                    "the secret '{name}' is given only to runs on branches matching '{refs}', not to a run on '{target}'"
                ),
            )
            .with_remedy(lh_api::remedy::Remedy::SetSecret {
                name: name.to_string(),
                widen: true,
            }));
        }
        Ok(row)
    }

    /// The versions of `names` for a run on `target` (for a cache key): a missing or
    /// withheld secret is an error.
    pub async fn versions(&self, names: &[String], target: &str) -> Result<BTreeMap<String, i64>> {
        let mut out = BTreeMap::new();
        for n in names {
            let row = self.row_for(n, target).await?;
            out.insert(n.clone(), row.try_get("version").map_err(db)?);
        }
        Ok(out)
    }

    /// The values of `names`, decrypted, for one function call of a run on `target`.
    pub async fn values(&self, names: &[String], target: &str) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        for n in names {
            let row = self.row_for(n, target).await?;
            let sealed: String = row.try_get("sealed").map_err(db)?;
            let value = self.key.open(&format!("secret:{n}"), &sealed)?;
            out.push(Value {
                name: n.clone(),
                version: row.try_get("version").map_err(db)?,
                value: String::from_utf8(value)
                    .map_err(|_| Error::internal(format!("secret '{n}' is not text")))?,
            });
        }
        Ok(out)
    }
}

fn missing(name: &str) -> Error {
    Error::new(
        Kind::NotFound,
        Code::SecretNotFound,
        format!("the function needs the secret '{name}', which is not set"),
    )
    .with_remedy(lh_api::remedy::Remedy::SetSecret {
        name: name.to_string(),
        widen: false,
    })
}

/// `text` with every secret value replaced by `***` (values under 4 bytes are left:
/// they would mask ordinary text and reveal little).
pub fn redact(text: &str, values: &[Value]) -> String {
    let mut out = text.to_string();
    for v in values {
        if v.value.len() >= 4 {
            out = out.replace(&v.value, "***");
            // A value printed line by line (a PEM key) is masked line by line too.
            for line in v.value.lines().filter(|l| l.trim().len() >= 8) {
                out = out.replace(line, "***");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_environment_variables_the_sandbox_does_not_use() {
        assert!(check_name("STRIPE_KEY").is_ok());
        assert!(check_name("_X1").is_ok());
        for bad in [
            "",
            "stripe",
            "A-B",
            "PATH",
            "LD_PRELOAD",
            "PYTHONPATH",
            "LH_TOKEN",
            "1A",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn redaction_masks_each_value_and_its_lines() {
        let values = vec![Value {
            name: "K".into(),
            version: 1,
            value: "sk_live_abcdef\nsecond-line-of-it".into(),
        }];
        let r = redact(
            "got sk_live_abcdef\nsecond-line-of-it and sk_live_abcdef",
            &values,
        );
        assert!(!r.contains("sk_live"), "{r}");
        assert!(!r.contains("second-line"), "{r}");
        assert!(r.contains("***"));
    }
}
