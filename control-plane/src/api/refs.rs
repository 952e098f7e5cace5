//! Branches, tags, history, diffs and merges.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use lh_api::{
    AssignRef, CommitInfo, CreateRef, DiffResponse, LogPage, MergeKind, MergeRequest,
    MergeResponse, RefInfo, RefKind, RowDiffResponse,
};
use lh_catalog::{CommitMeta, LogQuery, MergeOptions};

use super::params::query_pairs;
use crate::auth::{Action, Identity};
use crate::error::{Code, Error, table_diff};
use crate::http::ApiResult;
use crate::merges::Via;
use crate::query::diff::RowDiffRequest;
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

pub(crate) fn ref_info(r: lh_catalog::Reference) -> RefInfo {
    RefInfo {
        name: r.name,
        kind: match r.kind {
            lh_catalog::RefKind::Branch => RefKind::Branch,
            lh_catalog::RefKind::Tag => RefKind::Tag,
        },
        head: r.head.to_hex(),
        protected: false,
        required_checks: Vec::new(),
    }
}

pub(crate) fn commit_info(c: lh_catalog::Commit) -> CommitInfo {
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
    let refs = s.catalog.list_refs().await?;
    let protected = s.protected.list().await?;
    Ok(Json(
        refs.into_iter()
            .filter(|r| kind.as_deref().is_none_or(|k| k == r.kind.as_str()))
            // Refs the identity may not read are not listed.
            .filter(|r| identity.access.on_ref(Action::Read, &r.name))
            .map(ref_info)
            .map(|mut r| {
                r.protected = r.kind == RefKind::Branch && protected.contains(&r.name);
                r
            })
            .collect(),
    ))
}

/// Creates a branch or a tag from a ref expression (zero-copy).
#[utoipa::path(post, path = "/api/v1/refs", request_body = CreateRef,
    responses((status = 201, body = RefInfo), (status = 409, body = lh_api::ErrorBody)))]
async fn create_ref(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<CreateRef>,
) -> ApiResult<(StatusCode, Json<RefInfo>)> {
    let from = req
        .from
        .unwrap_or_else(|| lh_catalog::DEFAULT_BRANCH.to_string());
    identity.require_ref(Action::Read, &from, "creating a ref from it")?;
    if crate::tables::is_run_branch(&req.name) {
        return Err(crate::tables::run_branch_refused(&req.name, "creating it").into());
    }
    identity.require_ref(
        Action::Write,
        &req.name,
        &format!("creating the {} '{}'", req.kind.as_str(), req.name),
    )?;
    // A new ref holds every table of its source: none the identity could read there
    // and not here (history's limits on the source included), and it is made from the
    // very commit that was checked.
    let reads = crate::auth::history::scoped(&s.catalog, &identity, &from).await?;
    let pinned = reads.reads(&from);
    if !reads.access.on_ref_every_namespace(
        Action::Read,
        &crate::auth::ref_of(&from).unwrap_or_default(),
    ) {
        let source = s.catalog.resolve(&pinned).await?.commit;
        let tables: Vec<String> = s
            .catalog
            .tables_in(&source, None)
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect();
        crate::merges::require_no_widening(&identity, &reads, &from, &req.name, &tables)?;
    }
    let r = match req.kind {
        RefKind::Branch => s.catalog.create_branch(&req.name, &pinned).await?,
        RefKind::Tag => s.catalog.create_tag(&req.name, &pinned).await?,
    };
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
    identity.require_ref(Action::Read, &name, "reading it")?;
    let mut r = ref_info(s.catalog.get_ref(&name).await?);
    r.protected = r.kind == RefKind::Branch && s.protected.is_protected(&r.name).await?;
    if r.protected {
        r.required_checks = s.merger.checks.required(&r.name).await?;
    }
    Ok(Json(r))
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
    let r = s.catalog.get_ref(&name).await?;
    if r.kind != lh_catalog::RefKind::Branch {
        return Err(Error::bad_request(
            Code::NotABranch,
            format!("'{name}' is a tag: tags never move, only branches are protected"),
        )
        .into());
    }
    // The checks first: a missing one refuses the whole request.
    s.merger.checks.require(&name, &req.require_checks).await?;
    if s.protected.protect(&name, &identity.user).await? {
        tracing::info!(branch = %name, by = %identity.user, "branch protected");
    }
    let mut info = ref_info(r);
    info.protected = true;
    info.required_checks = s.merger.checks.required(&name).await?;
    Ok(Json(info))
}

/// Unprotects a branch.
#[utoipa::path(delete, path = "/api/v1/refs/{name}/protect", params(("name" = String, Path)),
    responses((status = 200, body = RefInfo), (status = 404, body = lh_api::ErrorBody)))]
async fn unprotect_branch(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
) -> ApiResult<Json<RefInfo>> {
    let was = s.protected.unprotect(&name).await?;
    s.merger.checks.require(&name, &[]).await?;
    let r = s.catalog.get_ref(&name).await;
    if was {
        tracing::info!(branch = %name, by = %identity.user, "branch unprotected");
    }
    Ok(Json(ref_info(r?)))
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
    let expected = match get("expected") {
        Some(e) => Some(s.catalog.resolve(&format!("@{e}")).await?.commit.id),
        None => None,
    };
    match get("kind").as_deref() {
        // Tags never move: deleting one (and making it again elsewhere) is an admin's.
        Some("tag") => {
            identity.require(Action::Admin, &format!("deleting the tag '{name}'"))?;
            s.catalog.delete_tag(&name).await?
        }
        Some("branch") | None => {
            // A branch's deletion takes every table of it away; a run's is an admin's.
            identity.require_ref_whole(Action::Merge, &name, "deleting it")?;
            if crate::tables::is_run_branch(&name) {
                identity.require(Action::Admin, &format!("deleting the run branch '{name}'"))?;
            }
            s.protected.check_direct(&name, "deleting it").await?;
            s.catalog.delete_branch(&name, expected).await?
        }
        Some(other) => {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!("unknown ref kind '{other}'"),
            )
            .into());
        }
    }
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
    identity.require_ref(Action::Merge, &name, "pointing it at another commit")?;
    identity.require_ref(Action::Read, &req.to, "pointing a branch at it")?;
    if crate::tables::is_run_branch(&name) {
        return Err(crate::tables::run_branch_refused(&name, "pointing it elsewhere").into());
    }
    // One resolution of each side: what is checked is what the branch moves to.
    let expected = s
        .catalog
        .resolve(&format!("@{}", req.expected))
        .await?
        .commit;
    let to = s.catalog.resolve(&req.to).await?.commit;
    let diffs = s.catalog.diff_commits(&expected, &to).await?;
    let changed: Vec<String> = diffs.iter().map(|d| d.table.clone()).collect();
    // Every table the move changes, the identity may merge there (as for a merge), and
    // read where it comes from.
    let refused: Vec<&str> = changed
        .iter()
        .map(String::as_str)
        .filter(|t| !identity.can_table(Action::Merge, &name, t))
        .collect();
    if !refused.is_empty() {
        return Err(crate::auth::roles::refused(
            &identity.user,
            &identity.access,
            Action::Merge,
            "pointing it at another commit",
            &format!(" on table(s) {} of '{name}'", refused.join(", ")),
        )
        .into());
    }
    let reads = crate::auth::history::scoped(&s.catalog, &identity, &req.to).await?;
    crate::merges::require_no_widening(&identity, &reads, &req.to, &name, &changed)?;
    let here = crate::auth::history::scoped(&s.catalog, &identity, &name).await?;
    crate::merges::require_no_overwrite(&identity, &here, &name, &diffs)?;
    s.protected
        .check_direct(&name, "pointing it at another commit")
        .await?;
    Ok(Json(ref_info(
        s.catalog
            .assign_branch(&name, expected.id, &format!("@{}", to.id.to_hex()))
            .await?,
    )))
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
    let mut at = lh_catalog::DEFAULT_BRANCH.to_string();
    let mut until = None;
    for (k, v) in query_pairs(q.as_deref()) {
        match k.as_str() {
            "ref" => at = v,
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
    identity.require_ref(Action::Read, &at, "reading its history")?;
    // With a table: the history of the commit checked, not of the ref again.
    let mut log_at = at.clone();
    if let Some(t) = &query.table {
        let scoped = crate::auth::history::scoped(&s.catalog, &identity, &at).await?;
        scoped.require_table(Action::Read, &at, t, "reading its history")?;
        log_at = scoped.reads(&at);
    }
    if let Some(u) = until {
        identity.require_ref(Action::Read, &u, "reading its history")?;
        query.until = Some(s.catalog.resolve(&u).await?.commit.id);
    }
    let page = s.catalog.log(&log_at, &query).await?;
    let mut commits = Vec::with_capacity(page.commits.len());
    let filtered = !query.properties.is_empty();
    let limits = crate::auth::history::Limits::of(
        &s.catalog,
        &identity,
        crate::auth::ref_of(&at).as_deref(),
    )
    .await?;
    for c in page.commits {
        let had = c.properties.len();
        let seen = commit_as_seen(&s, &identity, limits.as_ref(), &at, c).await?;
        // A commit whose properties are hidden is not found by them either.
        if filtered && had > 0 && seen.properties.is_empty() {
            continue;
        }
        commits.push(seen);
    }
    Ok(Json(LogPage {
        commits,
        next_page_token: page.next_page_token,
    }))
}

/// A commit as `identity` sees it through `at`: one that changed a table it may not
/// read (against its first parent) has its message and properties replaced, since
/// they may name that table or its source ("create hr.salaries from ..."); the tables
/// it may read are named instead. Whoever reads every namespace of the ref sees all.
async fn commit_as_seen(
    s: &AppState,
    identity: &Identity,
    limits: Option<&crate::auth::history::Limits>,
    at: &str,
    c: lh_catalog::Commit,
) -> Result<CommitInfo, Error> {
    // What history allows of this commit, read through `at`'s ref.
    let identity = &match limits {
        Some(l) => l.at(&s.catalog, &c).await?,
        None => identity.clone(),
    };
    let whole = match crate::auth::ref_of(at) {
        Some(name) => identity.access.on_ref_every_namespace(Action::Read, &name),
        None => identity.access.covers(crate::auth::Role::Reader),
    };
    let Some(parent) = c.parents.first().copied().filter(|_| !whole) else {
        return Ok(commit_info(c));
    };
    let parent = s.catalog.get_commit(parent).await?;
    let changed = s.catalog.diff_commits(&parent, &c).await?;
    let (seen, hidden): (Vec<_>, Vec<_>) = changed
        .iter()
        .map(|d| d.table.as_str())
        .partition(|t| identity.can_table(Action::Read, at, t));
    if hidden.is_empty() {
        return Ok(commit_info(c));
    }
    let mut info = commit_info(c);
    info.message = match seen.is_empty() {
        true => format!("(changes {} table(s) you may not read)", hidden.len()),
        false => format!(
            "(changes {} and {} table(s) you may not read)",
            seen.join(", "),
            hidden.len()
        ),
    };
    info.properties.clear();
    Ok(info)
}

/// One commit, by full hash or unique prefix.
#[utoipa::path(get, path = "/api/v1/commits/{id}", params(("id" = String, Path)),
    responses((status = 200, body = CommitInfo), (status = 404, body = lh_api::ErrorBody)))]
async fn get_commit(
    State(s): State<AppState>,
    identity: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<CommitInfo>> {
    let at = format!("@{id}");
    identity.require_ref(Action::Read, &at, "reading a commit")?;
    let commit = s.catalog.resolve(&at).await?.commit;
    let limits = crate::auth::history::Limits::of(&s.catalog, &identity, None).await?;
    Ok(Json(
        commit_as_seen(&s, &identity, limits.as_ref(), &at, commit).await?,
    ))
}

/// The tables that differ between two refs; with `rows=true`, each changed table's
/// rows added and removed and its schema changes too.
#[utoipa::path(get, path = "/api/v1/diff", params(("from" = String, Query), ("to" = String, Query),
        ("rows" = Option<bool>, Query)),
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
    identity.require_ref(Action::Read, &from, "diffing it")?;
    identity.require_ref(Action::Read, &to, "diffing it")?;
    let (on_from, on_to) = (
        crate::auth::history::scoped(&s.catalog, &identity, &from).await?,
        crate::auth::history::scoped(&s.catalog, &identity, &to).await?,
    );
    let a = s.catalog.resolve(&on_from.reads(&from)).await?;
    let b = s.catalog.resolve(&on_to.reads(&to)).await?;
    let tables = s.catalog.diff_commits(&a.commit, &b.commit).await?;
    // Tables the identity may not read on both sides are not listed.
    let tables: Vec<lh_catalog::TableDiff> = tables
        .into_iter()
        .filter(|d| {
            on_from.can_table(Action::Read, &from, &d.table)
                && on_to.can_table(Action::Read, &to, &d.table)
        })
        .collect();
    let mut out: Vec<lh_api::TableDiff> = tables.into_iter().map(table_diff).collect();
    if rows {
        // One query timeout for them all, and at most this many tables counted: a
        // listing stays a listing.
        const COUNTED: usize = 100;
        let deadline = std::time::Instant::now() + s.queries.limits().timeout;
        let mut counted = 0;
        for t in &mut out {
            if t.change != lh_api::Change::Changed {
                continue;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if counted == COUNTED || left.is_zero() {
                t.rows_error = Some(format!(
                    "not counted: a diff counts the rows of {COUNTED} tables within the query \
                     timeout (a diff of {} alone counts these)",
                    t.table
                ));
                continue;
            }
            counted += 1;
            let req = RowDiffRequest {
                from: &a.commit,
                to: &b.commit,
                table: &t.table,
                key: &[],
                limit: 0,
                full: false,
                timeout: left,
                caller: Some(&identity.user),
            };
            match s.queries.row_diff(req).await {
                Ok(d) => {
                    t.rows = Some(d.counts);
                    t.schema_changes = d.schema_changes;
                }
                Err(e) => t.rows_error = Some(e.message),
            }
        }
    }
    Ok(Json(DiffResponse {
        from,
        to,
        from_commit: a.commit.id.to_hex(),
        to_commit: b.commit.id.to_hex(),
        tables: out,
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
    lh_catalog::names::validate_table_name(&table)?;
    let key: Vec<String> = match pairs.iter().find(|(k, _)| k == "key") {
        Some((_, v)) => v.split(',').map(|k| k.trim().to_string()).collect(),
        None => Vec::new(),
    };
    if key.iter().any(|k| k.is_empty()) {
        return Err(Error::bad_request(Code::BadKey, "a key column's name is empty").into());
    }
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
    identity.require_table(Action::Read, &from, &table, "diffing it")?;
    identity.require_table(Action::Read, &to, &table, "diffing it")?;
    let mut reads = Vec::with_capacity(2);
    for side in [&from, &to] {
        let scoped = crate::auth::history::scoped(&s.catalog, &identity, side).await?;
        if !scoped.can_table(Action::Read, side, &table) {
            return Err(Error::not_found(
                Code::TableNotFound,
                format!("table '{table}' not found at '{side}'"),
            )
            .into());
        }
        // The commit checked, not the ref again: it may have moved since.
        reads.push(scoped.reads(side));
    }
    let a = s.catalog.resolve(&reads[0]).await?;
    let b = s.catalog.resolve(&reads[1]).await?;
    let req = RowDiffRequest {
        from: &a.commit,
        to: &b.commit,
        table: &table,
        key: &key,
        limit,
        full,
        timeout: s.queries.limits().timeout,
        caller: Some(&identity.user),
    };
    let d = s.queries.row_diff(req).await?;
    // The answer's JSON is written in pieces charged to the answer memory, as a query's
    // is, while the rows' text (charged too) is still held.
    let pieces = d.charge.another();
    let max_bytes = s.queries.limits().max_result_bytes;
    let answer = RowDiffResponse {
        from,
        to,
        from_commit: a.commit.id.to_hex(),
        to_commit: b.commit.id.to_hex(),
        table,
        key: d.key,
        columns: d.columns,
        counts: d.counts,
        schema_changes: d.schema_changes,
        rows: d.rows,
        truncated: d.truncated,
        scan: d.scan,
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
    let identity = identity.clone();
    let expected_head = match &req.expected_head {
        Some(e) => Some(s.catalog.resolve(&format!("@{e}")).await?.commit.id),
        None => None,
    };
    let mut meta = CommitMeta::new(
        identity.user.clone(),
        req.message.clone().unwrap_or_default(),
    );
    if let Some(key) = req
        .properties
        .keys()
        .find(|k| crate::error::is_reserved_property(k))
    {
        return Err(crate::error::reserved_property(key).into());
    }
    meta.properties = req.properties.clone();
    let options = MergeOptions {
        meta,
        expected_head,
        no_fast_forward: req.no_fast_forward,
        prepare: false,
        resolutions: Vec::new(),
    };
    let merged = match dry_run {
        true => crate::merges::Merged {
            outcome: s
                .merger
                .preview(&identity, &req.from, &req.into, options)
                .await?,
            checks: Vec::new(),
        },
        false => {
            s.merger
                .merge(&identity, &req.from, &req.into, Via::Merge, options)
                .await?
        }
    };
    let out = merged.outcome;
    let mut tables: Vec<lh_api::TableDiff> = out.tables.into_iter().map(table_diff).collect();
    let (breaking, breaking_unknown) =
        breaking_changes(s, &identity, &req.from, &req.into, &mut tables).await;
    Ok(Json(MergeResponse {
        into: req.into,
        head: out.head.to_hex(),
        kind: match out.kind {
            lh_catalog::MergeKind::UpToDate => MergeKind::UpToDate,
            lh_catalog::MergeKind::FastForward => MergeKind::FastForward,
            lh_catalog::MergeKind::MergeCommit => MergeKind::MergeCommit,
        },
        dry_run,
        tables,
        checks: merged.checks,
        breaking,
        breaking_unknown,
    }))
}

/// At most this many changed tables are looked at for breaking changes after a merge.
const MAX_TABLES_CHECKED: usize = 100;

/// The most the search for readers of a merge's breaking changes may take (the merge is
/// made: its answer waits only this long).
const BREAKING_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// The schema changes of the tables a merge brought (set on them), and which of those
/// (and of the tables it dropped) other projects' runs on the target read. The merge
/// is made: whatever goes wrong here is said, never an error.
async fn breaking_changes(
    s: &AppState,
    identity: &Identity,
    from: &str,
    into: &str,
    tables: &mut [lh_api::TableDiff],
) -> (Vec<lh_api::BreakingChange>, Option<String>) {
    let looked = tokio::time::timeout(
        BREAKING_BUDGET,
        look_for_breaking_changes(s, identity, from, into, tables),
    )
    .await;
    looked.unwrap_or_else(|_| {
        // Half an answer would read as "no change" for the tables not reached.
        for t in tables.iter_mut() {
            t.schema_changes.clear();
        }
        (
            Vec::new(),
            Some(format!(
                "schema changes and their readers were not looked for in full within {} s",
                BREAKING_BUDGET.as_secs()
            )),
        )
    })
}

async fn look_for_breaking_changes(
    s: &AppState,
    identity: &Identity,
    from: &str,
    into: &str,
    tables: &mut [lh_api::TableDiff],
) -> (Vec<lh_api::BreakingChange>, Option<String>) {
    use crate::query::diff::{schema_changes, schema_changes_by_name};
    use crate::runs::breaking::{Changed, breaks};
    let mut changed = Vec::new();
    let mut compared = 0;
    let mut unknown = None;
    for t in tables.iter_mut() {
        // Columns are told only to a reader of the table.
        if !identity.can_table(Action::Read, into, &t.table) {
            continue;
        }
        let (Some(a), to) = (&t.from, &t.to) else {
            continue;
        };
        if to
            .as_ref()
            .is_some_and(|b| a.metadata_location == b.metadata_location)
        {
            continue;
        }
        if compared == MAX_TABLES_CHECKED {
            unknown = Some(format!(
                "only the first {MAX_TABLES_CHECKED} changed tables were looked at"
            ));
            break;
        }
        compared += 1;
        match to {
            None => changed.push(Changed {
                table: t.table.clone(),
                columns: None,
            }),
            Some(b) => {
                let (ma, mb) = match (
                    s.tables.metadata(&a.metadata_location).await,
                    s.tables.metadata(&b.metadata_location).await,
                ) {
                    (Ok(ma), Ok(mb)) => (ma, mb),
                    (Err(e), _) | (_, Err(e)) => {
                        unknown = Some(format!(
                            "cannot read the metadata of '{}': {}",
                            t.table, e.message
                        ));
                        continue;
                    }
                };
                t.schema_changes = match a.table_uuid == b.table_uuid {
                    true => schema_changes(ma.current_schema(), mb.current_schema()),
                    false => schema_changes_by_name(ma.current_schema(), mb.current_schema()),
                };
                let columns: Vec<_> = t
                    .schema_changes
                    .iter()
                    .filter(|c| breaks(c))
                    .cloned()
                    .collect();
                if !columns.is_empty() {
                    changed.push(Changed {
                        table: t.table.clone(),
                        columns: Some(columns),
                    });
                }
            }
        }
    }
    match s.runs.breaking(into, from, &changed, identity).await {
        Ok(b) => (b, unknown),
        Err(e) => (Vec::new(), Some(e.message)),
    }
}
