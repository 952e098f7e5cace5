//! The audit log (`lh audit`), for admins.

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};
use lh_api::{AuditEntry, AuditList};

use super::params::query_pairs;
use crate::auth::audit::{Entry, Filter};
use crate::error::{Code, Error};
use crate::http::ApiResult;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/audit", get(audit))
}

/// Requests that changed something or tried to, newest first
/// (`?since=<RFC 3339>&user=&limit=`, at most 10000).
#[utoipa::path(get, path = "/api/v1/audit",
    params(("since" = Option<String>, Query), ("user" = Option<String>, Query), ("limit" = Option<i64>, Query)),
    responses((status = 200, body = AuditList)))]
async fn audit(State(s): State<AppState>, RawQuery(q): RawQuery) -> ApiResult<Json<AuditList>> {
    let mut f = Filter {
        limit: 100,
        ..Filter::default()
    };
    for (k, v) in query_pairs(q.as_deref()) {
        match k.as_str() {
            "since" => {
                f.since = Some(
                    chrono::DateTime::parse_from_rfc3339(&v)
                        .map_err(|e| {
                            Error::bad_request(
                                Code::InvalidParameter,
                                format!("since: '{v}' is not an RFC 3339 time: {e}"),
                            )
                        })?
                        .with_timezone(&chrono::Utc),
                )
            }
            "user" => f.user = Some(v),
            "limit" => {
                f.limit = v
                    .parse::<i64>()
                    .ok()
                    .filter(|n| (1..=10_000).contains(n))
                    .ok_or_else(|| {
                        Error::bad_request(
                            Code::InvalidParameter,
                            format!("limit: '{v}' is not a number from 1 to 10000"),
                        )
                    })?
            }
            other => {
                return Err(Error::bad_request(
                    Code::UnknownParameter,
                    format!("unknown parameter '{other}' (since, user, limit)"),
                )
                .into());
            }
        }
    }
    Ok(Json(AuditList {
        entries: s.audit.list(&f).await?.into_iter().map(entry).collect(),
    }))
}

fn entry(e: Entry) -> AuditEntry {
    AuditEntry {
        at: e.at,
        user: e.user,
        role: e.role,
        token_id: e.token_id,
        action: e.action,
        method: e.method,
        route: e.route,
        path: e.path,
        status: e.status,
        remote: e.remote,
        request_id: e.request_id,
    }
}
