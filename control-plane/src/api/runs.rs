//! Pipeline runs: plan, start, follow, cancel, replay.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use lh_api::{PlanResponse, RerunRequest, RunInfo, RunList, RunRequest};

use super::params::query_pairs;
use crate::auth::{Action, Identity};
use crate::error::{Code, Error};
use crate::http::ApiResult;
use crate::runs::RunStart;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/runs", get(list_runs).post(start_run))
        .route("/api/v1/runs/plan", post(plan_run))
        .route("/api/v1/lineage", get(lineage))
        .route("/api/v1/runs/{id}", get(get_run))
        .route("/api/v1/runs/{id}/logs", get(run_logs))
        .route("/api/v1/runs/{id}/cancel", post(cancel_run))
        .route("/api/v1/runs/{id}/rerun", post(rerun))
}

/// Turns an uploaded project archive into a code snapshot (and drops the upload).
pub(super) async fn code_of(s: &AppState, upload: &str) -> Result<String, Error> {
    let file = s
        .uploads
        .file(&s.tables.warehouse, upload)
        .await?
        .ok_or_else(|| {
            Error::not_found(Code::UploadNotFound, format!("upload '{upload}' not found"))
        })?;
    let hash = s.runs.store_code(file).await;
    s.uploads.remove(&s.tables.warehouse, upload).await;
    hash
}

/// Plans a project without running it (`lh run --dry-run`).
#[utoipa::path(post, path = "/api/v1/runs/plan", request_body = RunRequest,
    responses((status = 200, body = PlanResponse), (status = 400, body = lh_api::ErrorBody)))]
async fn plan_run(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<RunRequest>,
) -> ApiResult<Json<PlanResponse>> {
    let at = if req.reference.is_empty() {
        lh_catalog::DEFAULT_BRANCH
    } else {
        req.reference.as_str()
    };
    identity.require_ref(Action::Run, at, "planning a pipeline on it")?;
    if req.check.is_some() {
        return Err(Error::bad_request(
            Code::InvalidArgument,
            "a check is run (POST /api/v1/runs), not planned",
        )
        .into());
    }
    let code = code_of(&s, &req.upload).await?;
    Ok(Json(
        s.runs
            .plan(
                &code,
                at,
                &req.params,
                req.partitions.as_deref(),
                &identity,
                req.changes.then_some(req.no_cache),
            )
            .await?,
    ))
}

/// Column-level lineage of `name` (a table, or `table.column`) on a branch: the steps
/// up to it and down from it through the models of every project's last succeeded run
/// there. Tables the caller may not read are left out.
#[utoipa::path(get, path = "/api/v1/lineage",
    params(("name" = String, Query), ("ref" = Option<String>, Query)),
    responses((status = 200, body = lh_api::LineageResponse), (status = 404, body = lh_api::ErrorBody)))]
async fn lineage(
    State(s): State<AppState>,
    identity: Identity,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> ApiResult<Json<lh_api::LineageResponse>> {
    use std::collections::{BTreeSet, VecDeque};
    let pairs = super::params::query_pairs(q.as_deref());
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let at = get("ref").unwrap_or_else(|| lh_catalog::DEFAULT_BRANCH.to_string());
    let name = get("name")
        .ok_or_else(|| Error::bad_request(Code::InvalidArgument, "'name' is required"))?;
    identity.require_ref(Action::Read, &at, "reading its lineage")?;
    if at.contains(['@', '~', '^']) {
        return Err(Error::bad_request(
            Code::InvalidArgument,
            format!("lineage reads the runs of a branch; '{at}' is no branch name"),
        )
        .into());
    }
    let head = s.catalog.resolve(&at).await?.commit;
    // A table the caller may not read reads as one that is not there.
    let not_found = || {
        Error::not_found(
            Code::TableNotFound,
            format!("'{name}' is neither a table nor a table's column at '{at}'"),
        )
    };
    let readable_table = async |t: &str| -> Option<Vec<String>> {
        if lh_catalog::names::validate_table_name(t).is_err()
            || !identity.can_table(Action::Read, &at, t)
        {
            return None;
        }
        let loaded = s.tables.load(&head, t).await.ok()??;
        Some(
            loaded
                .metadata
                .current_schema()
                .as_struct()
                .fields()
                .iter()
                .map(|f| f.name.clone())
                .collect(),
        )
    };
    let (table, column) = match readable_table(&name).await {
        Some(_) => (name.clone(), None),
        None => {
            let (t, c) = name.rsplit_once('.').ok_or_else(not_found)?;
            let cols = readable_table(t).await.ok_or_else(not_found)?;
            let c = cols
                .iter()
                .find(|x| x.eq_ignore_ascii_case(c))
                .ok_or_else(not_found)?;
            (t.to_string(), Some(c.clone()))
        }
    };
    let (edges, unresolved) = s.runs.lineage_edges(&at, &head).await?;
    let readable = |t: &str| identity.can_table(Action::Read, &at, t);
    let unresolved: Vec<String> = unresolved
        .into_iter()
        .filter(|u| u.tables.iter().all(|t| readable(t)))
        .map(|u| format!("{}: {}", u.model, u.why))
        .collect();
    // Columns compared as DuckDB does: without regard to case.
    let key = |(t, c): &(String, String)| (t.clone(), c.to_lowercase());
    let edges: Vec<_> = edges
        .into_iter()
        .filter(|e| readable(&e.from.0) && readable(&e.to.0))
        .collect();
    let starts = |e_side: &dyn Fn(&crate::runs::lineage::Edge) -> &(String, String)| {
        edges
            .iter()
            .map(e_side)
            .filter(|(t, c)| {
                *t == table
                    && column
                        .as_ref()
                        .is_none_or(|col| col.eq_ignore_ascii_case(c))
            })
            .map(key)
            .collect::<BTreeSet<_>>()
    };
    let walk = |start: BTreeSet<(String, String)>, up: bool| {
        let mut seen = start.clone();
        let mut queue: VecDeque<(String, String)> = start.into_iter().collect();
        let mut out = Vec::new();
        while let Some(at_col) = queue.pop_front() {
            for e in &edges {
                let (here, next) = if up {
                    (&e.to, &e.from)
                } else {
                    (&e.from, &e.to)
                };
                if key(here) == at_col {
                    out.push(lh_api::LineageEdge {
                        from: format!("{}.{}", e.from.0, e.from.1),
                        to: format!("{}.{}", e.to.0, e.to.1),
                        node: e.node.clone(),
                        project: e.project.clone(),
                    });
                    if seen.insert(key(next)) {
                        queue.push_back(key(next));
                    }
                }
            }
        }
        out
    };
    let upstream = walk(starts(&|e| &e.to), true);
    let downstream = walk(starts(&|e| &e.from), false);
    Ok(Json(lh_api::LineageResponse {
        reference: at,
        table,
        column,
        upstream,
        downstream,
        unresolved,
    }))
}

/// Starts a run of a project on a branch; it goes on in the background.
#[utoipa::path(post, path = "/api/v1/runs", request_body = RunRequest,
    responses((status = 201, body = RunInfo), (status = 400, body = lh_api::ErrorBody)))]
async fn start_run(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<RunRequest>,
) -> ApiResult<(StatusCode, Json<RunInfo>)> {
    let target = if req.reference.is_empty() {
        lh_catalog::DEFAULT_BRANCH
    } else {
        req.reference.as_str()
    };
    identity.require_ref(Action::Run, target, "running a pipeline on it")?;
    // A check reads a commit of the branch it is recorded on and publishes nothing.
    let checked = match &req.check {
        Some(check) => {
            // A check publishes nothing; whether its functions may have the branch's
            // secrets is whether its starter may publish there.
            let secrets = s.protected.check_publish(&identity, target).await.is_ok();
            if crate::auth::ref_of(&check.at).as_deref() != Some(target) {
                return Err(Error::bad_request(
                    Code::InvalidArgument,
                    format!(
                        "a check reads a commit of the branch it runs on ('{target}'), not '{}'",
                        check.at
                    ),
                )
                .with_hint(format!("e.g. {target}@<hash>"))
                .into());
            }
            if req.partitions.is_some() {
                return Err(Error::bad_request(
                    Code::InvalidArgument,
                    "a check runs expectations on the tables as they are: it takes no partitions",
                )
                .into());
            }
            let at = s.catalog.resolve(&check.at).await?;
            Some((at.commit.id.to_hex(), check.expectations.clone(), secrets))
        }
        None => {
            s.protected.check_publish(&identity, target).await?;
            None
        }
    };
    let code = code_of(&s, &req.upload).await?;
    let mut start = RunStart {
        code_hash: code,
        target: req.reference,
        params: req.params,
        by: identity.clone(),
        publish: true,
        expectations_only: false,
        only: Vec::new(),
        secrets: true,
        no_cache: req.no_cache,
        strict: req.strict,
        rerun_of: None,
        input_commit: None,
        reuse: Default::default(),
        param_values: None,
        partitions: req.partitions,
    };
    if let Some((commit, only, secrets)) = checked {
        start.secrets = secrets;
        start.publish = false;
        start.expectations_only = true;
        start.only = only;
        start.no_cache = true;
        start.input_commit = Some(commit);
    }
    Ok((StatusCode::CREATED, Json(s.runs.start(start).await?)))
}

/// Whether `identity` may see what a node of a run on `target` did: a model's table
/// it may read, an expectation whose inputs it may read.
fn node_visible(identity: &Identity, target: &str, n: &lh_api::RunNode) -> bool {
    let model = n.kind == "model";
    let table = crate::runs::partitions::table_of(&n.name);
    (!model || identity.can_table(Action::Read, target, table))
        && n.inputs
            .iter()
            .all(|t| identity.can_table(Action::Read, target, t))
}

/// A run as `identity` sees it: nodes touching tables it may not read are left out
/// (their names are tables', their errors may hold data), counted in `hidden_nodes`;
/// so are the edges to them, the partitions' lists of them, and a run error that names
/// one of them.
fn visible(identity: &Identity, mut run: RunInfo) -> RunInfo {
    let target = run.target.clone();
    let (shown, hidden): (Vec<_>, Vec<_>) = std::mem::take(&mut run.nodes)
        .into_iter()
        .partition(|n| node_visible(identity, &target, n));
    if hidden.is_empty() {
        run.nodes = shown;
        return run;
    }
    let gone: std::collections::BTreeSet<&str> = hidden.iter().map(|n| n.name.as_str()).collect();
    run.nodes = shown
        .into_iter()
        .map(|mut n| {
            n.depends_on.retain(|d| !gone.contains(d.as_str()));
            n
        })
        .collect();
    run.hidden_nodes = hidden.len();
    if !run.partitions.is_empty() {
        run.partitions = lh_api::RunPartition::of(&run.nodes);
    }
    if run.error.as_deref().is_some_and(|e| {
        hidden
            .iter()
            .any(|n| e.contains(crate::runs::partitions::table_of(&n.name)))
    }) {
        run.error = Some("the run failed in a node that touches tables you may not read".into());
    }
    run
}

/// A run `identity` may see: it may read the run's target.
async fn readable_run(s: &AppState, identity: &Identity, id: &str) -> Result<RunInfo, Error> {
    let run = s.runs.get(id).await?;
    identity.require_ref(Action::Read, &run.target, "reading its runs")?;
    Ok(run)
}

/// Recent runs, newest first (`?limit=`), of the refs the caller may read.
#[utoipa::path(get, path = "/api/v1/runs", params(("limit" = Option<i64>, Query)), responses((status = 200, body = RunList)))]
async fn list_runs(
    State(s): State<AppState>,
    identity: Identity,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<RunList>> {
    let limit = query_pairs(q.as_deref())
        .into_iter()
        .find(|(k, _)| k == "limit")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(20);
    Ok(Json(RunList {
        runs: s
            .runs
            .list(limit)
            .await?
            .into_iter()
            .filter(|r| identity.can_ref(Action::Read, &r.target))
            .map(|r| visible(&identity, r))
            .collect(),
    }))
}

/// One run, with its nodes.
#[utoipa::path(get, path = "/api/v1/runs/{id}", params(("id" = String, Path)),
    responses((status = 200, body = RunInfo), (status = 404, body = lh_api::ErrorBody)))]
async fn get_run(
    State(s): State<AppState>,
    identity: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<RunInfo>> {
    let run = readable_run(&s, &identity, &id).await?;
    Ok(Json(visible(&identity, run)))
}

/// The logs of a run's nodes (`?node=` for one), as text.
#[utoipa::path(get, path = "/api/v1/runs/{id}/logs", params(("id" = String, Path), ("node" = Option<String>, Query)),
    responses((status = 200, content_type = "text/plain", body = String)))]
async fn run_logs(
    State(s): State<AppState>,
    identity: Identity,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<String> {
    let run = readable_run(&s, &identity, &id).await?;
    let node = query_pairs(q.as_deref())
        .into_iter()
        .find(|(k, _)| k == "node")
        .map(|(_, v)| v);
    let logs = s.runs.logs(&id, node.as_deref()).await?;
    let mut out = String::new();
    for (name, log) in logs {
        // The logs of nodes touching tables the caller may not read are left out.
        let shown = run
            .nodes
            .iter()
            .find(|n| n.name == name)
            .is_some_and(|n| node_visible(&identity, &run.target, n));
        if log.is_empty() || !shown {
            continue;
        }
        if node.is_none() {
            out.push_str(&format!("=== {name}\n"));
        }
        out.push_str(&log);
        if !log.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Stops a running run; nothing it did is published.
#[utoipa::path(post, path = "/api/v1/runs/{id}/cancel", params(("id" = String, Path)),
    responses((status = 200, body = RunInfo), (status = 409, body = lh_api::ErrorBody)))]
async fn cancel_run(
    State(s): State<AppState>,
    identity: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<RunInfo>> {
    let run = readable_run(&s, &identity, &id).await?;
    identity.require_ref(Action::Run, &run.target, "cancelling its runs")?;
    Ok(Json(s.runs.cancel(&id).await?))
}

/// Replays a run: same code (or new code), environments, parameters and input commit.
#[utoipa::path(post, path = "/api/v1/runs/{id}/rerun", params(("id" = String, Path)), request_body = RerunRequest,
    responses((status = 201, body = RunInfo), (status = 404, body = lh_api::ErrorBody)))]
async fn rerun(
    State(s): State<AppState>,
    identity: Identity,
    Path(id): Path<String>,
    Json(req): Json<RerunRequest>,
) -> ApiResult<(StatusCode, Json<RunInfo>)> {
    let original = s.runs.get(&id).await?;
    identity.require_ref(Action::Run, &original.target, "running a pipeline on it")?;
    s.protected
        .check_publish(&identity, &original.target)
        .await?;
    let code = match &req.upload {
        Some(u) => Some(code_of(&s, u).await?),
        None => None,
    };
    let run = s
        .runs
        .rerun(&id, req.from_failed, code, identity.clone())
        .await?;
    Ok((StatusCode::CREATED, Json(run)))
}
