//! Branches, tags, history, diffs and merges: the HTTP edge of the refs service
//! (`runs::refs`). Each handler parses, calls one method, and words the answer.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use lh_api::{
    AssignRef, CommitInfo, CreateRef, DiffResponse, LogPage, MergeKind, MergeRequest,
    MergeResponse, RefInfo, RefKind, RowDiffResponse,
};
use lh_catalog::{DiffKind, LogQuery};

use super::params::query_pairs;
use crate::auth::Identity;
use crate::error::{Code, Error, pointer};
use crate::http::ApiResult;
use crate::query::diff::{ChangedRow, ColumnChange, ColumnChangeKind, DiffScan, RowCounts};
use crate::runs::breaking::BreakingChange;
use crate::runs::refs::{MergeAsk, RefView, RowsAsk, TableChange};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/info", get(info))
        .route("/api/v1/refs", get(list_refs).post(create_ref))
        .route("/api/v1/refs/{name}", get(get_ref).delete(delete_ref))
        .route("/api/v1/refs/{name}/assign", post(assign_ref))
        .route(
            "/api/v1/refs/{name}/protect",
            post(protect_branch).delete(unprotect_branch),
        )
        .route("/api/v1/log", get(log))
        .route("/api/v1/commits/{id}", get(get_commit))
        .route("/api/v1/diff", get(diff))
        .route("/api/v1/diff/rows", get(diff_rows))
        .route("/api/v1/merge", post(merge))
        .route("/api/v1/merge/preview", post(merge_preview))
}

fn ref_info(r: RefView) -> RefInfo {
    RefInfo {
        name: r.reference.name,
        kind: wire_kind(r.reference.kind),
        head: r.reference.head.to_hex(),
        protected: r.protected,
        required_checks: r.required_checks,
    }
}

fn wire_kind(kind: lh_catalog::RefKind) -> RefKind {
    match kind {
        lh_catalog::RefKind::Branch => RefKind::Branch,
        lh_catalog::RefKind::Tag => RefKind::Tag,
    }
}

fn commit_info(c: lh_catalog::Commit) -> CommitInfo {
    CommitInfo {
        id: c.id.to_hex(),
        parents: c.parents.iter().map(|p| p.to_hex()).collect(),
        author: c.author,
        message: c.message,
        timestamp: c.timestamp,
        properties: c.properties,
    }
}

/// The server: version, storage, catalog and limits.
#[utoipa::path(get, path = "/api/v1/info", responses((status = 200, body = lh_api::ServerInfo)))]
async fn info(State(s): State<AppState>, identity: Identity) -> Json<lh_api::ServerInfo> {
    let mut info = s.info.clone();
    info.runtime = s.runs.runtime().describe();
    info.auth = Some(lh_api::AuthInfo {
        mode: if s.tokens.is_some() { "tokens" } else { "off" }.to_string(),
        role: Some(identity.role_name().to_string()),
        user: Some(identity.user),
    });
    Json(info)
}

/// Every branch and tag (`?kind=branch|tag` to filter).
#[utoipa::path(get, path = "/api/v1/refs", params(("kind" = Option<String>, Query)),
    responses((status = 200, body = Vec<RefInfo>)))]
async fn list_refs(
    State(s): State<AppState>,
    identity: Identity,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Vec<RefInfo>>> {
    let kind = query_pairs(q.as_deref())
        .into_iter()
        .find(|(k, _)| k == "kind")
        .map(|(_, v)| v);
    let refs = s.refs.list(&identity, kind.as_deref()).await?;
    Ok(Json(refs.into_iter().map(ref_info).collect()))
}

/// Creates a branch or a tag from a ref expression (zero-copy).
#[utoipa::path(post, path = "/api/v1/refs", request_body = CreateRef,
    responses((status = 201, body = RefInfo), (status = 409, body = lh_api::ErrorBody)))]
async fn create_ref(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<CreateRef>,
) -> ApiResult<(StatusCode, Json<RefInfo>)> {
    let from = lh_catalog::ref_or_default(req.from)?;
    let kind = match req.kind {
        RefKind::Branch => lh_catalog::RefKind::Branch,
        RefKind::Tag => lh_catalog::RefKind::Tag,
    };
    let r = s.refs.create(&identity, &req.name, kind, &from).await?;
    Ok((StatusCode::CREATED, Json(ref_info(r))))
}

/// One branch or tag.
#[utoipa::path(get, path = "/api/v1/refs/{name}", params(("name" = String, Path)),
    responses((status = 200, body = RefInfo), (status = 404, body = lh_api::ErrorBody)))]
async fn get_ref(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
) -> ApiResult<Json<RefInfo>> {
    Ok(Json(ref_info(s.refs.get(&identity, &name).await?)))
}

/// Protects a branch: from now on it changes only by a merge.
#[utoipa::path(post, path = "/api/v1/refs/{name}/protect", params(("name" = String, Path)),
    responses((status = 200, body = RefInfo), (status = 404, body = lh_api::ErrorBody)))]
async fn protect_branch(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    Json(req): Json<lh_api::ProtectRequest>,
) -> ApiResult<Json<RefInfo>> {
    let r = s
        .refs
        .protect(&identity, &name, &req.require_checks)
        .await?;
    Ok(Json(ref_info(r)))
}

/// Unprotects a branch.
#[utoipa::path(delete, path = "/api/v1/refs/{name}/protect", params(("name" = String, Path)),
    responses((status = 200, body = RefInfo), (status = 404, body = lh_api::ErrorBody)))]
async fn unprotect_branch(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
) -> ApiResult<Json<RefInfo>> {
    Ok(Json(ref_info(s.refs.unprotect(&identity, &name).await?)))
}

/// Deletes a branch (`?kind=branch`, optionally `&expected=<commit>`) or a tag (`?kind=tag`).
#[utoipa::path(delete, path = "/api/v1/refs/{name}",
    params(("name" = String, Path), ("kind" = String, Query), ("expected" = Option<String>, Query)),
    responses((status = 204), (status = 404, body = lh_api::ErrorBody)))]
async fn delete_ref(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<StatusCode> {
    let pairs = query_pairs(q.as_deref());
    if pairs.iter().filter(|(k, _)| k == "kind").count() > 1 {
        return Err(
            Error::bad_request(Code::InvalidArgument, "kind is given more than once").into(),
        );
    }
    let get = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let kind = match get("kind").as_deref() {
        Some("tag") => lh_catalog::RefKind::Tag,
        Some("branch") | None => lh_catalog::RefKind::Branch,
        Some(other) => {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!("unknown ref kind '{other}'"),
            )
            .into());
        }
    };
    let expected = get("expected");
    s.refs
        .delete(&identity, &name, kind, expected.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Points a branch at another commit, if it is still at the expected one.
#[utoipa::path(post, path = "/api/v1/refs/{name}/assign", params(("name" = String, Path)),
    request_body = AssignRef, responses((status = 200, body = RefInfo), (status = 409, body = lh_api::ErrorBody)))]
async fn assign_ref(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    Json(req): Json<AssignRef>,
) -> ApiResult<Json<RefInfo>> {
    let r = s
        .refs
        .assign(
            &identity,
            &name,
            &super::params::ref_expr(&req.to)?,
            &req.expected,
        )
        .await?;
    Ok(Json(ref_info(r)))
}

/// A page of a ref's history, newest first, following first parents
/// (`?ref=&limit=&page_token=&property=k=v`); `table=` keeps the commits where that table
/// changed, `until=REF` stops before that commit.
#[utoipa::path(get, path = "/api/v1/log",
    params(("ref" = Option<String>, Query), ("limit" = Option<usize>, Query),
           ("page_token" = Option<String>, Query), ("property" = Option<String>, Query),
           ("table" = Option<String>, Query), ("until" = Option<String>, Query)),
    responses((status = 200, body = LogPage)))]
async fn log(
    State(s): State<AppState>,
    identity: Identity,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<LogPage>> {
    let mut query = LogQuery::default();
    let mut at = None;
    let mut until = None;
    for (k, v) in query_pairs(q.as_deref()) {
        match k.as_str() {
            "ref" => at = Some(v),
            "limit" => {
                query.limit = v.parse().map_err(|_| {
                    Error::bad_request(
                        Code::InvalidArgument,
                        format!("limit '{v}' is not a number"),
                    )
                })?
            }
            "page_token" => query.page_token = Some(v),
            "table" => query.table = Some(v),
            "until" => until = Some(v),
            "property" => {
                let (pk, pv) = v.split_once('=').ok_or_else(|| {
                    Error::bad_request(
                        Code::InvalidArgument,
                        format!("property filter '{v}' is not KEY=VALUE"),
                    )
                })?;
                query.properties.insert(pk.to_string(), pv.to_string());
            }
            _ => {}
        }
    }
    let at = lh_catalog::ref_or_default(at)?;
    let until = until.as_deref().map(super::params::ref_expr).transpose()?;
    let page = s.refs.log(&identity, &at, query, until.as_ref()).await?;
    Ok(Json(LogPage {
        commits: page.commits.into_iter().map(commit_info).collect(),
        next_page_token: page.next_page_token,
    }))
}

/// One commit, by full hash or unique prefix.
#[utoipa::path(get, path = "/api/v1/commits/{id}", params(("id" = String, Path)),
    responses((status = 200, body = CommitInfo), (status = 404, body = lh_api::ErrorBody)))]
async fn get_commit(
    State(s): State<AppState>,
    identity: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<CommitInfo>> {
    Ok(Json(commit_info(s.refs.commit(&identity, &id).await?)))
}

/// The tables that differ between two refs; with `rows=true`, each changed table's
/// rows added and removed and its schema changes too; with `base=true`, between where
/// `to` left `from` (their merge base, the answer's `from_commit`) and `to`.
#[utoipa::path(get, path = "/api/v1/diff", params(("from" = String, Query), ("to" = String, Query),
        ("rows" = Option<bool>, Query), ("base" = Option<bool>, Query)),
    responses((status = 200, body = DiffResponse)))]
async fn diff(
    State(s): State<AppState>,
    identity: Identity,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<DiffResponse>> {
    let pairs = query_pairs(q.as_deref());
    let get = |key: &str| required(&pairs, key);
    let (from, to) = (get("from")?, get("to")?);
    let rows = flag(&pairs, "rows")?;
    let since_base = flag(&pairs, "base")?;
    let d = s
        .refs
        .diff(
            &identity,
            &super::params::ref_expr(&from)?,
            &super::params::ref_expr(&to)?,
            rows,
            since_base,
        )
        .await?;
    Ok(Json(DiffResponse {
        from,
        to,
        from_commit: d.from.id.to_hex(),
        to_commit: d.to.id.to_hex(),
        tables: d.tables.into_iter().map(table_diff).collect(),
    }))
}

fn required(pairs: &[(String, String)], key: &str) -> Result<String, Error> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| Error::bad_request(Code::InvalidArgument, format!("'{key}' is required")))
}

fn flag(pairs: &[(String, String)], key: &str) -> Result<bool, Error> {
    match pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
    {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some(v) => Err(Error::bad_request(
            Code::InvalidArgument,
            format!("'{key}' is true or false, not '{v}'"),
        )),
    }
}

/// The rows that differ in one table between two refs: counts, then at most `limit`
/// rows (default 100, at most 10,000); with `key` (comma-separated columns), an added
/// and a removed row with the same key are one changed row. Shared data files are
/// skipped unless `full=true`.
#[utoipa::path(get, path = "/api/v1/diff/rows", params(("from" = String, Query), ("to" = String, Query),
        ("table" = String, Query), ("key" = Option<String>, Query), ("limit" = Option<u64>, Query),
        ("full" = Option<bool>, Query)),
    responses((status = 200, body = RowDiffResponse), (status = 400, body = lh_api::ErrorBody)))]
async fn diff_rows(
    State(s): State<AppState>,
    identity: Identity,
    RawQuery(q): RawQuery,
) -> ApiResult<axum::response::Response> {
    let pairs = query_pairs(q.as_deref());
    let get = |key: &str| required(&pairs, key);
    let (from, to, table) = (get("from")?, get("to")?, get("table")?);
    let key: Vec<String> = match pairs.iter().find(|(k, _)| k == "key") {
        Some((_, v)) => v.split(',').map(|k| k.trim().to_string()).collect(),
        None => Vec::new(),
    };
    let limit = match pairs.iter().find(|(k, _)| k == "limit") {
        Some((_, v)) => v.parse::<u64>().map_err(|_| {
            Error::bad_request(
                Code::InvalidArgument,
                format!("'limit' is a number of rows, not '{v}'"),
            )
        })?,
        None => 100,
    };
    let full = flag(&pairs, "full")?;
    let (from_at, to_at) = (
        super::params::ref_expr(&from)?,
        super::params::ref_expr(&to)?,
    );
    let ask = RowsAsk {
        from: &from_at,
        to: &to_at,
        table: &table,
        key: &key,
        limit,
        full,
    };
    let rows = s.refs.diff_rows(&identity, ask).await?;
    let (a, b, d) = (rows.from, rows.to, rows.diff);
    // The answer's JSON is written in pieces charged to the answer memory, as a query's
    // is, while the rows' text (charged too) is still held.
    let pieces = d.charge.another();
    let max_bytes = s.queries.limits().max_result_bytes;
    let answer = RowDiffResponse {
        from,
        to,
        from_commit: a.id.to_hex(),
        to_commit: b.id.to_hex(),
        table,
        key: d.key,
        columns: d
            .columns
            .into_iter()
            .map(|c| lh_api::QueryColumn {
                name: c.name,
                r#type: c.type_name,
            })
            .collect(),
        counts: row_counts(d.counts),
        schema_changes: d.schema_changes.into_iter().map(schema_change).collect(),
        rows: d.rows.into_iter().map(row_change).collect(),
        truncated: d.truncated,
        scan: diff_scan(d.scan),
        elapsed_ms: d.elapsed_ms,
    };
    let charge = d.charge;
    let body = tokio::task::spawn_blocking(move || {
        let mut text = crate::query::memory::Pieces::new(pieces, 2 * max_bytes, "the diff as JSON")
            .with_hint("ask for fewer rows (--limit); the counts come whole");
        serde_json::to_writer(&mut text, &answer).map_err(|e| text.failed(e.into()))?;
        drop((answer, charge));
        text.finish()
    })
    .await
    .map_err(|e| Error::internal(format!("cannot write the diff: {e}")))??;
    let mut resp =
        axum::body::Body::new(crate::query::ipc::IpcBody::from_pieces(body)).into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// Merges a ref into a branch, atomically; conflicts are listed and nothing changes.
#[utoipa::path(post, path = "/api/v1/merge", request_body = MergeRequest,
    responses((status = 200, body = MergeResponse), (status = 409, body = lh_api::ErrorBody)))]
async fn merge(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<MergeRequest>,
) -> ApiResult<Json<MergeResponse>> {
    merge_or_preview(&s, &identity, req, false).await
}

/// What a merge would do, held to the same permissions, without moving the target: its
/// tables, conflicts and breaking changes (`lh merge --dry-run`). A protected target's
/// checks do not run; the prepared commit is an unreachable object. A route of its own,
/// so that a server that does not know it answers 404 rather than merging.
#[utoipa::path(post, path = "/api/v1/merge/preview", request_body = MergeRequest,
    responses((status = 200, body = MergeResponse), (status = 409, body = lh_api::ErrorBody)))]
async fn merge_preview(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<MergeRequest>,
) -> ApiResult<Json<MergeResponse>> {
    merge_or_preview(&s, &identity, req, true).await
}

async fn merge_or_preview(
    s: &AppState,
    identity: &Identity,
    req: MergeRequest,
    dry_run: bool,
) -> ApiResult<Json<MergeResponse>> {
    let from = super::params::ref_expr(&req.from)?;
    let mut sides = std::collections::BTreeMap::new();
    for (tables, side) in [
        (&req.take_source, lh_catalog::Side::Source),
        (&req.take_dest, lh_catalog::Side::Target),
    ] {
        for t in tables {
            if sides.insert(t.clone(), side).is_some_and(|was| was != side) {
                return Err(Error::bad_request(
                    Code::InvalidArgument,
                    format!("'{t}' is taken from both sides"),
                )
                .into());
            }
        }
    }
    let ask = MergeAsk {
        from: &from,
        into: &req.into,
        expected_head: req.expected_head.as_deref(),
        message: req.message.clone().unwrap_or_default(),
        properties: req.properties.clone(),
        no_fast_forward: req.no_fast_forward,
        dry_run,
        prefer: req.strategy.map(|s| match s {
            lh_api::MergeStrategy::SourceWins => lh_catalog::Side::Source,
            lh_api::MergeStrategy::DestWins => lh_catalog::Side::Target,
        }),
        sides,
    };
    let done = s.refs.merge(identity, ask).await?;
    let out = done.merged.outcome;
    Ok(Json(MergeResponse {
        into: req.into,
        head: out.head.to_hex(),
        kind: match out.kind {
            lh_catalog::MergeKind::UpToDate => MergeKind::UpToDate,
            lh_catalog::MergeKind::FastForward => MergeKind::FastForward,
            lh_catalog::MergeKind::MergeCommit => MergeKind::MergeCommit,
        },
        dry_run,
        tables: done.tables.into_iter().map(table_diff).collect(),
        checks: done.merged.checks.into_iter().map(check_result).collect(),
        breaking: done.breaking.into_iter().map(breaking_change).collect(),
        breaking_unknown: done.breaking_unknown,
    }))
}

/// A check's verdict on a merge, as the API gives it.
fn check_result(v: crate::merges::checks::Verdict) -> lh_api::CheckResult {
    lh_api::CheckResult {
        name: v.name,
        kind: v.kind,
        passed: v.passed,
        message: v.message,
        millis: v.took.as_millis() as u64,
    }
}

fn change(kind: DiffKind) -> lh_api::Change {
    match kind {
        DiffKind::Added => lh_api::Change::Added,
        DiffKind::Removed => lh_api::Change::Removed,
        DiffKind::Changed => lh_api::Change::Changed,
    }
}

/// A table's change between two commits, as the API gives it.
fn table_diff(t: TableChange) -> lh_api::TableDiff {
    lh_api::TableDiff {
        table: t.table,
        change: change(t.change),
        from: t.from.as_ref().map(pointer),
        to: t.to.as_ref().map(pointer),
        rows: t.rows.map(row_counts),
        rows_error: t.rows_error,
        schema_changes: t.schema_changes.into_iter().map(schema_change).collect(),
    }
}

fn row_counts(c: RowCounts) -> lh_api::RowCounts {
    lh_api::RowCounts {
        added: c.added,
        removed: c.removed,
        changed: c.changed,
    }
}

fn schema_change(c: ColumnChange) -> lh_api::SchemaChange {
    lh_api::SchemaChange {
        change: match c.kind {
            ColumnChangeKind::Added => lh_api::SchemaChangeKind::Added,
            ColumnChangeKind::Dropped => lh_api::SchemaChangeKind::Dropped,
            ColumnChangeKind::Renamed => lh_api::SchemaChangeKind::Renamed,
            ColumnChangeKind::Retyped => lh_api::SchemaChangeKind::Retyped,
        },
        column: c.column,
        from: c.from,
        to: c.to,
    }
}

fn row_change(r: ChangedRow) -> lh_api::RowChange {
    lh_api::RowChange {
        change: change(r.change),
        values: r.values,
        before: r.before,
        changed_columns: r.changed_columns,
    }
}

fn diff_scan(s: DiffScan) -> lh_api::DiffScan {
    lh_api::DiffScan {
        files_from: s.files_from,
        files_to: s.files_to,
        files_shared: s.files_shared,
        files_read: s.files_read,
        full_because: s.full_because,
    }
}

fn breaking_change(b: BreakingChange) -> lh_api::BreakingChange {
    lh_api::BreakingChange {
        table: b.table,
        change: b.change.map(schema_change),
        readers: b
            .readers
            .into_iter()
            .map(|r| lh_api::ColumnReader {
                project: r.project,
                node: r.node,
                kind: r.kind,
                run: r.run,
            })
            .collect(),
        hidden_readers: b.hidden_readers,
    }
}
