//! Webhooks: the check webhooks a merge waits for, and the post-merge webhooks it only
//! tells (`lh hook add`), with retries, never blocking.
//!
//! Every request is a JSON POST of the merge (`payload`) with the headers
//! `X-Lh-Event` (`merge.check` or `merge.done`), `X-Lh-Delivery` (a fresh id) and, when
//! the hook has a secret, `X-Lh-Signature: sha256=<hex HMAC-SHA256 of the body>`; the
//! body holds `sent_at`, so a receiver can refuse replays. Redirects are not followed
//! (a signed request goes only where the admin said).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use lh_catalog::{DiffKind, MergeKind, MergeOutcome};
use sqlx::{AnyPool, Row};

use crate::auth::Identity;
use crate::auth::key::ServerKey;
use crate::auth::roles::Pattern;
use crate::db::time;
use crate::error::{Code, Error, Result};

/// The merge as hooks see it.
pub fn payload(
    event: &str,
    by: &Identity,
    from: &str,
    into: &str,
    out: &MergeOutcome,
) -> serde_json::Value {
    let tables: Vec<serde_json::Value> = out.tables.iter().map(table_json).collect();
    serde_json::json!({
        "event": event,
        "from": from,
        "into": into,
        "base": out.base_head.to_hex(),
        "head": out.head.to_hex(),
        "kind": match out.kind {
            MergeKind::UpToDate => "up_to_date",
            MergeKind::FastForward => "fast_forward",
            MergeKind::MergeCommit => "merge_commit",
        },
        "author": by.user,
        "tables": tables,
        "sent_at": Utc::now().to_rfc3339(),
    })
}

/// A table the merge changed, as a payload gives it (`lh diff --output json`'s fields).
fn table_json(d: &lh_catalog::TableDiff) -> serde_json::Value {
    let pointer = |p: &Option<lh_catalog::TablePointer>| {
        p.as_ref().map(|p| {
            serde_json::json!({
                "metadata_location": p.metadata_location,
                "table_uuid": p.table_uuid,
                "snapshot_id": p.snapshot_id,
            })
        })
    };
    serde_json::json!({
        "table": d.table,
        "change": match d.change() {
            DiffKind::Added => "added",
            DiffKind::Removed => "removed",
            DiffKind::Changed => "changed",
        },
        "from": pointer(&d.from),
        "to": pointer(&d.to),
    })
}

/// `sha256=<hex>` of the body under the secret.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let tag = ring::hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

pub struct Delivery<'a> {
    pub url: &'a str,
    pub event: &'a str,
    pub body: &'a serde_json::Value,
    pub secret: Option<&'a [u8]>,
    pub timeout: Duration,
}

/// The longest answer kept, for the user's message.
const ANSWER_CHARS: usize = 500;

/// POSTs once: `Ok` with the answer's text on a 2xx, `Err` saying why not otherwise.
pub async fn deliver(
    http: &reqwest::Client,
    d: &Delivery<'_>,
) -> std::result::Result<String, String> {
    let body = serde_json::to_vec(d.body).map_err(|e| e.to_string())?;
    let mut req = http
        .post(d.url)
        .timeout(d.timeout)
        .header("content-type", "application/json")
        .header("x-lh-event", d.event)
        .header("x-lh-delivery", uuid::Uuid::now_v7().to_string());
    if let Some(secret) = d.secret {
        req = req.header("x-lh-signature", sign(secret, &body));
    }
    let resp = req.body(body).send().await.map_err(|e| {
        if e.is_timeout() {
            format!("no answer within {} s", d.timeout.as_secs_f32())
        } else {
            format!("cannot reach {}: {}", d.url, root_cause(&e))
        }
    })?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    let text: String = text.trim().chars().take(ANSWER_CHARS).collect();
    if status.is_success() {
        Ok(if text.is_empty() {
            format!("answered {}", status.as_u16())
        } else {
            text
        })
    } else {
        Err(format!(
            "answered {}{}",
            status.as_u16(),
            if text.is_empty() {
                String::new()
            } else {
                format!(": {text}")
            }
        ))
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

/// A client that follows no redirect.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

/// A hook's URL: https, or http to this machine only (an answer over plain HTTP from
/// elsewhere could be anyone's on the way, and a check's answer lets a merge through).
pub fn check_url(url: &str) -> Result<()> {
    let u = url::Url::parse(url).ok().filter(|u| u.host().is_some());
    let loopback = |u: &url::Url| match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match u {
        Some(u) if u.scheme() == "https" => Ok(()),
        Some(u) if u.scheme() == "http" && loopback(&u) => Ok(()),
        Some(u) if u.scheme() == "http" => Err(Error::bad_request(
            Code::InvalidArgument,
            format!(
                "'{}': a hook on another machine is called over https",
                url.escape_debug()
            ),
        )),
        _ => Err(Error::bad_request(
            Code::InvalidArgument,
            format!("'{}' is not an http(s):// URL", url.escape_debug()),
        )),
    }
}

/// A post-merge webhook as listed, never its secret.
#[derive(Debug, Clone)]
pub struct HookDef {
    pub name: String,
    pub url: String,
    /// The branch name pattern it matches.
    pub refs: String,
    /// Whether its requests are signed.
    pub signed: bool,
    pub updated_by: String,
    /// When it was last set (RFC 3339).
    pub updated_at: String,
}

/// The post-merge webhooks.
pub struct Hooks {
    pool: AnyPool,
    key: Arc<ServerKey>,
    http: reqwest::Client,
    /// The waits between attempts (three more after the first).
    pub backoff: Vec<Duration>,
}

fn db(e: sqlx::Error) -> Error {
    crate::db::failed("hook storage", e)
}

impl Hooks {
    pub fn new(pool: AnyPool, key: Arc<ServerKey>, http: reqwest::Client) -> Hooks {
        Hooks {
            pool,
            key,
            http,
            backoff: vec![
                Duration::from_millis(500),
                Duration::from_secs(2),
                Duration::from_secs(8),
            ],
        }
    }

    pub async fn put(
        &self,
        name: &str,
        url: &str,
        refs: &str,
        secret: Option<&str>,
        by: &str,
    ) -> Result<HookDef> {
        check_name(name, "hook")?;
        check_url(url)?;
        let refs = Pattern::parse(refs, "ref")?;
        let sealed = match secret {
            Some(s) => Some(self.key.seal(&format!("hook:{name}"), s.as_bytes())?),
            None => None,
        };
        let now = Utc::now().timestamp_millis();
        sqlx::query(
            "INSERT INTO lh_hooks (name, url, refs, secret, updated_by, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO UPDATE SET \
             url = excluded.url, refs = excluded.refs, secret = excluded.secret, \
             updated_by = excluded.updated_by, updated_at = excluded.updated_at",
        )
        .bind(name)
        .bind(url)
        .bind(refs.as_str())
        .bind(sealed.as_deref())
        .bind(by)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(HookDef {
            name: name.to_string(),
            url: url.to_string(),
            refs: refs.as_str().to_string(),
            signed: sealed.is_some(),
            updated_by: by.to_string(),
            updated_at: time(now),
        })
    }

    pub async fn remove(&self, name: &str) -> Result<()> {
        crate::db::delete_named(&self.pool, "lh_hooks", name, || {
            Error::not_found(Code::HookNotFound, format!("no hook '{name}'"))
        })
        .await
    }

    pub async fn list(&self) -> Result<Vec<HookDef>> {
        let rows = sqlx::query(
            "SELECT name, url, refs, secret, updated_by, updated_at FROM lh_hooks ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| {
                Ok(HookDef {
                    name: r.try_get("name").map_err(db)?,
                    url: r.try_get("url").map_err(db)?,
                    refs: r.try_get("refs").map_err(db)?,
                    signed: r
                        .try_get::<Option<String>, _>("secret")
                        .map_err(db)?
                        .is_some(),
                    updated_by: r.try_get("updated_by").map_err(db)?,
                    updated_at: time(r.try_get("updated_at").map_err(db)?),
                })
            })
            .collect()
    }

    /// Tells the hooks matching `into` of a merge, in the background.
    pub fn merged(self: &Arc<Self>, by: &Identity, from: &str, into: &str, out: &MergeOutcome) {
        let body = payload("merge.done", by, from, into, out);
        let me = self.clone();
        let into = into.to_string();
        tokio::spawn(async move {
            if let Err(e) = me.notify(&into, &body).await {
                tracing::warn!(error = %e.message, "cannot read the post-merge hooks");
            }
        });
    }

    async fn notify(&self, into: &str, body: &serde_json::Value) -> Result<()> {
        let rows = sqlx::query("SELECT name, url, refs, secret FROM lh_hooks")
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        for r in rows {
            let name: String = r.try_get("name").map_err(db)?;
            let refs: String = r.try_get("refs").map_err(db)?;
            if !Pattern::parse(&refs, "ref").is_ok_and(|p| p.matches(into)) {
                continue;
            }
            let url: String = r.try_get("url").map_err(db)?;
            let secret = match r.try_get::<Option<String>, _>("secret").map_err(db)? {
                Some(s) => match self.key.open(&format!("hook:{name}"), &s) {
                    Ok(v) => Some(v),
                    Err(e) => {
                        tracing::warn!(hook = %name, error = %e.message, "hook not told");
                        continue;
                    }
                },
                None => None,
            };
            let d = Delivery {
                url: &url,
                event: "merge.done",
                body,
                secret: secret.as_deref(),
                timeout: Duration::from_secs(10),
            };
            let mut waits = self.backoff.iter();
            loop {
                match deliver(&self.http, &d).await {
                    Ok(_) => {
                        tracing::debug!(hook = %name, into, "hook told of a merge");
                        break;
                    }
                    Err(why) => match waits.next() {
                        Some(wait) => {
                            tracing::debug!(hook = %name, %why, "hook delivery failed; retrying");
                            tokio::time::sleep(*wait).await;
                        }
                        None => {
                            tracing::warn!(hook = %name, into, %why, "hook delivery failed; giving up");
                            break;
                        }
                    },
                }
            }
        }
        Ok(())
    }
}

/// Whether `name` may name a check or a hook (`what`): a lowercase letter, then
/// lowercase letters, digits, '-' and '_', at most 64.
pub fn check_name(name: &str, what: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'));
    if !ok {
        return Err(Error::bad_request(
            Code::InvalidArgument,
            format!(
                "invalid {what} name '{}': a lowercase letter, then lowercase letters, digits, '-' and '_' (at most 64)",
                name.escape_debug()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_of_the_body() {
        // RFC 4231, test case 2.
        let s = sign(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            s,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    /// A payload's tables are what `lh_api::TableDiff` made of them before the refs
    /// service had a type of its own (receivers parse them).
    #[test]
    fn payload_tables_are_the_apis_table_diffs() {
        let p = |s: Option<i64>| lh_catalog::TablePointer {
            metadata_location: "file:///w/a/t-1/metadata/00001.metadata.json".into(),
            table_uuid: "0a0b".into(),
            snapshot_id: s,
        };
        let wire = |p: &lh_catalog::TablePointer| lh_api::TablePointer {
            metadata_location: p.metadata_location.clone(),
            table_uuid: p.table_uuid.clone(),
            snapshot_id: p.snapshot_id,
        };
        for (from, to, change) in [
            (None, Some(p(Some(7))), lh_api::Change::Added),
            (Some(p(None)), None, lh_api::Change::Removed),
            (Some(p(None)), Some(p(Some(-3))), lh_api::Change::Changed),
        ] {
            let d = lh_catalog::TableDiff {
                table: "a.t".into(),
                from,
                to,
            };
            let api = lh_api::TableDiff {
                table: d.table.clone(),
                change,
                from: d.from.as_ref().map(wire),
                to: d.to.as_ref().map(wire),
                rows: None,
                rows_error: None,
                schema_changes: Vec::new(),
            };
            assert_eq!(table_json(&d), serde_json::to_value(api).unwrap());
        }
    }
}
