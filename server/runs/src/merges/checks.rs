//! Checks a protected branch can require (`lh check add`, `lh branch protect main
//! --require-checks NAME...`), run on a merge's would-be result before the branch moves:
//!
//! - a **webhook**: the merge's diff POSTed to a URL, signed with a shared secret
//!   (`hooks::sign`); a 2xx answer passes, anything else or no answer within the
//!   timeout blocks, and the answer's text is shown to the user;
//! - **expectations**: an lh project (uploaded like a run's) whose expectations run, as a
//!   run of their own, on the prepared merge commit; the merge passes if they do.
//!
//! Every required check runs, concurrently, so a blocked merge reports them all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use lh_catalog::MergeOutcome;
use sqlx::{AnyPool, Row};

use super::hooks::{self, Delivery, check_name};
use crate::auth::Identity;
use crate::auth::key::ServerKey;
use crate::error::{Code, Error, Kind, Result};

/// What runs an lh project's expectations for a check (the run service: `runs`
/// publishes through the merger, so the merger knows it only by this).
#[async_trait::async_trait]
pub trait ExpectationRunner: Send + Sync {
    /// Runs the expectations of the project in code snapshot `code` on `commit`, as a
    /// run recorded against `target`, publishing nothing; `Ok` with a summary when they
    /// pass, `Err` with what failed (or that it ran past `timeout`, then cancelled).
    async fn run_expectations(
        &self,
        code: &str,
        target: &str,
        commit: &str,
        by: Identity,
        timeout: Duration,
    ) -> std::result::Result<String, String>;
}

pub struct Checks {
    pool: AnyPool,
    key: Arc<ServerKey>,
    http: reqwest::Client,
    /// What runs expectations: the run service (which publishes through the merger
    /// that holds these checks).
    runs: Arc<dyn ExpectationRunner>,
}

fn db(e: sqlx::Error) -> Error {
    crate::db::failed("check storage", e)
}

pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(600);

/// A check as listed: what it runs and who set it up, never its secret.
#[derive(Debug, Clone)]
pub struct CheckDef {
    pub name: String,
    /// `webhook` or `expectations`.
    pub kind: String,
    /// The webhook's URL, or the project's code snapshot.
    pub target: String,
    pub timeout: Duration,
    /// Whether its requests are signed.
    pub signed: bool,
    /// The branches that require it.
    pub branches: Vec<String>,
    pub updated_by: String,
    /// When it was last set (RFC 3339).
    pub updated_at: String,
}

/// One check's verdict on a merge's would-be result.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub name: String,
    /// `webhook` or `expectations`.
    pub kind: String,
    pub passed: bool,
    /// The hook's answer, or the expectations' outcome.
    pub message: String,
    /// How long the check took.
    pub took: Duration,
}

/// A check as stored.
struct Check {
    name: String,
    kind: String,
    target: String,
    secret: Option<String>,
    timeout: Duration,
}

impl Checks {
    pub fn new(
        pool: AnyPool,
        key: Arc<ServerKey>,
        http: reqwest::Client,
        runs: Arc<dyn ExpectationRunner>,
    ) -> Checks {
        Checks {
            pool,
            key,
            http,
            runs,
        }
    }

    /// Adds a check, or replaces one of that name.
    pub async fn put(
        &self,
        name: &str,
        kind: &str,
        target: &str,
        secret: Option<&str>,
        timeout: Duration,
        by: &str,
    ) -> Result<()> {
        check_name(name, "check")?;
        let sealed = match secret {
            Some(s) => Some(self.key.seal(&format!("check:{name}"), s.as_bytes())?),
            None => None,
        };
        sqlx::query(
            "INSERT INTO lh_checks (name, kind, target, secret, timeout_ms, updated_by, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (name) DO UPDATE SET \
             kind = excluded.kind, target = excluded.target, secret = excluded.secret, \
             timeout_ms = excluded.timeout_ms, updated_by = excluded.updated_by, \
             updated_at = excluded.updated_at",
        )
        .bind(name)
        .bind(kind)
        .bind(target)
        .bind(sealed)
        .bind(timeout.as_millis() as i64)
        .bind(by)
        .bind(Utc::now().timestamp_millis())
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// Removes a check no branch requires.
    pub async fn remove(&self, name: &str) -> Result<()> {
        let users = self.branches_requiring(name).await?;
        if !users.is_empty() {
            return Err(Error::new(
                Kind::Conflict,
                Code::NotAllowed,
                format!(
                    "check '{name}' is required by {}: protect them without it first",
                    users.join(", ")
                ),
            ));
        }
        crate::db::delete_named(&self.pool, "lh_checks", name, || not_found(name)).await
    }

    async fn branches_requiring(&self, name: &str) -> Result<Vec<String>> {
        crate::db::texts(
            &self.pool,
            "SELECT branch FROM lh_branch_checks WHERE check_name = $1 ORDER BY branch",
            name,
        )
        .await
    }

    pub async fn list(&self) -> Result<Vec<CheckDef>> {
        let rows = sqlx::query(
            "SELECT name, kind, target, secret, timeout_ms, updated_by, updated_at FROM lh_checks ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        let mut out = Vec::new();
        for r in rows {
            let name: String = r.try_get("name").map_err(db)?;
            let at: i64 = r.try_get("updated_at").map_err(db)?;
            let timeout: i64 = r.try_get("timeout_ms").map_err(db)?;
            out.push(CheckDef {
                branches: self.branches_requiring(&name).await?,
                kind: r.try_get("kind").map_err(db)?,
                target: r.try_get("target").map_err(db)?,
                signed: r
                    .try_get::<Option<String>, _>("secret")
                    .map_err(db)?
                    .is_some(),
                timeout: Duration::from_millis(timeout.max(0) as u64),
                updated_by: r.try_get("updated_by").map_err(db)?,
                updated_at: crate::db::time(at),
                name,
            });
        }
        Ok(out)
    }

    /// The checks a merge into `branch` must pass.
    pub async fn required(&self, branch: &str) -> Result<Vec<String>> {
        crate::db::texts(
            &self.pool,
            "SELECT check_name FROM lh_branch_checks WHERE branch = $1 ORDER BY check_name",
            branch,
        )
        .await
    }

    /// Makes `checks` the ones `branch` requires (each must exist).
    pub async fn require(&self, branch: &str, checks: &[String]) -> Result<()> {
        for c in checks {
            if self.get(c).await?.is_none() {
                return Err(not_found(c));
            }
        }
        let mut tx = self.pool.begin().await.map_err(db)?;
        sqlx::query("DELETE FROM lh_branch_checks WHERE branch = $1")
            .bind(branch)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        for c in checks {
            sqlx::query(
                "INSERT INTO lh_branch_checks (branch, check_name) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            )
            .bind(branch)
            .bind(c)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        }
        tx.commit().await.map_err(db)?;
        Ok(())
    }

    async fn get(&self, name: &str) -> Result<Option<Check>> {
        let row = sqlx::query(
            "SELECT name, kind, target, secret, timeout_ms FROM lh_checks WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        let Some(r) = row else {
            return Ok(None);
        };
        let timeout: i64 = r.try_get("timeout_ms").map_err(db)?;
        Ok(Some(Check {
            name: r.try_get("name").map_err(db)?,
            kind: r.try_get("kind").map_err(db)?,
            target: r.try_get("target").map_err(db)?,
            secret: r.try_get("secret").map_err(db)?,
            timeout: Duration::from_millis(timeout.max(0) as u64),
        }))
    }

    /// Runs every check `into` requires on the prepared merge `out`.
    pub async fn run_required(
        &self,
        by: &Identity,
        from: &str,
        into: &str,
        out: &MergeOutcome,
    ) -> Result<Vec<Verdict>> {
        let names = self.required(into).await?;
        let mut checks = Vec::new();
        for n in &names {
            // Removal is refused while a branch requires it; a race still fails closed.
            checks.push(self.get(n).await?.ok_or_else(|| not_found(n))?);
        }
        let runs = checks.iter().map(|c| self.run_one(c, by, from, into, out));
        Ok(futures::future::join_all(runs).await)
    }

    async fn run_one(
        &self,
        c: &Check,
        by: &Identity,
        from: &str,
        into: &str,
        out: &MergeOutcome,
    ) -> Verdict {
        let started = Instant::now();
        let verdict = match c.kind.as_str() {
            "webhook" => self.webhook(c, by, from, into, out).await,
            "expectations" => self.expectations(c, into, out).await,
            other => Err(format!("unknown check kind '{other}'")),
        };
        let (passed, message) = match verdict {
            Ok(m) => (true, m),
            Err(m) => (false, m),
        };
        tracing::info!(check = %c.name, into, passed, "merge check");
        Verdict {
            name: c.name.clone(),
            kind: c.kind.clone(),
            passed,
            message,
            took: started.elapsed(),
        }
    }

    async fn webhook(
        &self,
        c: &Check,
        by: &Identity,
        from: &str,
        into: &str,
        out: &MergeOutcome,
    ) -> std::result::Result<String, String> {
        let secret = match &c.secret {
            Some(s) => Some(
                self.key
                    .open(&format!("check:{}", c.name), s)
                    .map_err(|e| e.message)?,
            ),
            None => None,
        };
        let body = hooks::payload("merge.check", by, from, into, out);
        let d = Delivery {
            url: &c.target,
            event: "merge.check",
            body: &body,
            secret: secret.as_deref(),
            timeout: c.timeout,
        };
        hooks::deliver(&self.http, &d).await
    }

    /// Runs the project's expectations on the prepared commit; passes when they do.
    async fn expectations(
        &self,
        c: &Check,
        into: &str,
        out: &MergeOutcome,
    ) -> std::result::Result<String, String> {
        let by = Identity::admin(format!("check:{}", c.name));
        self.runs
            .run_expectations(&c.target, into, &out.head.to_hex(), by, c.timeout)
            .await
    }
}

fn not_found(name: &str) -> Error {
    Error::not_found(Code::CheckNotFound, format!("no check '{name}'"))
        .with_remedy(lh_api::remedy::Remedy::ListChecks)
}
