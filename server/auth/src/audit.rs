//! The audit log: every request whose route changes something (any action but read),
//! whether it succeeded or was refused, with who (user, role, token), when, from where
//! (the peer address), what (the route, the path, the status) and the request id that
//! ties it to the server log. Written by the guard before the response leaves, so a
//! change the client saw is in the log. Rows live in `lh_audit`, next to the catalog.

use chrono::{DateTime, TimeZone, Utc};
use sqlx::{AnyPool, Row};

use crate::error::{Error, Result};

pub struct AuditLog {
    pool: AnyPool,
}

fn db(e: sqlx::Error) -> Error {
    crate::db::failed("audit log", e)
}

/// One request, as recorded.
pub struct Record<'a> {
    pub user: &'a str,
    pub role: &'a str,
    pub token_id: Option<&'a str>,
    pub action: &'a str,
    pub method: &'a str,
    pub route: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub remote: Option<String>,
    pub request_id: Option<&'a str>,
}

/// One request of the log, as read back.
#[derive(Debug, Clone)]
pub struct Entry {
    pub at: DateTime<Utc>,
    pub user: String,
    pub role: String,
    pub token_id: Option<String>,
    /// The permission the route needs: write, run, merge or admin.
    pub action: String,
    pub method: String,
    /// The route as the server declares it (`/api/v1/refs/{name}/assign`).
    pub route: String,
    /// The path as asked.
    pub path: String,
    /// The answer's status.
    pub status: u16,
    /// The peer address the request came from.
    pub remote: Option<String>,
    pub request_id: Option<String>,
}

/// Which entries to list.
#[derive(Default)]
pub struct Filter {
    pub since: Option<DateTime<Utc>>,
    pub user: Option<String>,
    pub limit: i64,
}

impl AuditLog {
    pub fn new(pool: AnyPool) -> AuditLog {
        AuditLog { pool }
    }

    pub async fn record(&self, r: Record<'_>) -> Result<()> {
        sqlx::query(
            "INSERT INTO lh_audit (id, at, user_name, role, token_id, action, method, route, path, status, remote, request_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(Utc::now().timestamp_millis())
        .bind(r.user)
        .bind(r.role)
        .bind(r.token_id)
        .bind(r.action)
        .bind(r.method)
        .bind(r.route)
        .bind(r.path)
        .bind(i32::from(r.status))
        .bind(r.remote)
        .bind(r.request_id)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// Entries, newest first.
    pub async fn list(&self, f: &Filter) -> Result<Vec<Entry>> {
        let rows = sqlx::query(
            "SELECT at, user_name, role, token_id, action, method, route, path, status, remote, request_id \
             FROM lh_audit WHERE at >= $1 AND ($2 = '' OR user_name = $2) ORDER BY at DESC, id DESC LIMIT $3",
        )
        .bind(f.since.map_or(0, |s| s.timestamp_millis()))
        .bind(f.user.clone().unwrap_or_default())
        .bind(f.limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| {
                let at: i64 = r.try_get("at").map_err(db)?;
                let status: i32 = r.try_get("status").map_err(db)?;
                Ok(Entry {
                    at: Utc.timestamp_millis_opt(at).single().unwrap_or_default(),
                    user: r.try_get("user_name").map_err(db)?,
                    role: r.try_get("role").map_err(db)?,
                    token_id: r.try_get("token_id").map_err(db)?,
                    action: r.try_get("action").map_err(db)?,
                    method: r.try_get("method").map_err(db)?,
                    route: r.try_get("route").map_err(db)?,
                    path: r.try_get("path").map_err(db)?,
                    status: u16::try_from(status).unwrap_or(0),
                    remote: r.try_get("remote").map_err(db)?,
                    request_id: r.try_get("request_id").map_err(db)?,
                })
            })
            .collect()
    }
}
