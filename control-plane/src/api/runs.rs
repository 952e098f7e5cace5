//! Pipeline runs: plan, start, follow, cancel, replay.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use lh_api::{PlanResponse, RerunRequest, RunInfo, RunList, RunRequest};

use super::params::query_pairs;
use crate::auth::Identity;
use crate::error::{Code, Error};
use crate::http::ApiResult;
use crate::runs::asked::RunAsk;
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
    let at =
        &lh_catalog::ref_or_default((!req.reference.is_empty()).then(|| req.reference.clone()))?;
    if req.check.is_some() {
        return Err(Error::bad_request(
            Code::InvalidArgument,
            "a check is run (POST /api/v1/runs), not planned",
        )
        .into());
    }
    let ask = RunAsk {
        params: req.params,
        partitions: req.partitions,
        select: req.select,
        no_cache: req.no_cache,
        strict: req.strict,
        check: None,
    };
    let changes = req.changes.then_some(req.no_cache);
    let code = code_of(&s, &req.upload);
    Ok(Json(plan_response(
        s.runs.plan_for(&identity, at, code, &ask, changes).await?,
    )))
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
    let pairs = super::params::query_pairs(q.as_deref());
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let at = lh_catalog::ref_or_default(get("ref"))?;
    let name = get("name")
        .ok_or_else(|| Error::bad_request(Code::InvalidArgument, "'name' is required"))?;
    let l = s.runs.lineage_for(&identity, &at, &name).await?;
    let edges = |edges: Vec<crate::runs::lineage::Edge>| {
        edges
            .into_iter()
            .map(|e| lh_api::LineageEdge {
                from: format!("{}.{}", e.from.0, e.from.1),
                to: format!("{}.{}", e.to.0, e.to.1),
                node: e.node,
                project: e.project,
            })
            .collect()
    };
    Ok(Json(lh_api::LineageResponse {
        reference: l.at,
        table: l.table,
        column: l.column,
        upstream: edges(l.upstream),
        downstream: edges(l.downstream),
        unresolved: l.unresolved,
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
    let target =
        &lh_catalog::branch_or_default((!req.reference.is_empty()).then(|| req.reference.clone()))?;
    let code = code_of(&s, &req.upload);
    let ask = RunAsk {
        params: req.params,
        partitions: req.partitions,
        select: req.select,
        no_cache: req.no_cache,
        strict: req.strict,
        check: match req.check {
            Some(c) => match lh_catalog::RefExpr::parse(&c.at) {
                Ok(at) => Some((at, c.expectations)),
                Err(_) => return Err(crate::runs::asked::check_elsewhere(target, &c.at).into()),
            },
            None => None,
        },
    };
    Ok((
        StatusCode::CREATED,
        Json(run_info(
            s.runs.start_for(&identity, target, code, ask).await?,
        )),
    ))
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
            .list_for(&identity, limit)
            .await?
            .into_iter()
            .map(run_info)
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
    Ok(Json(run_info(s.runs.get_for(&identity, &id).await?)))
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
    let node = query_pairs(q.as_deref())
        .into_iter()
        .find(|(k, _)| k == "node")
        .map(|(_, v)| v);
    let logs = s.runs.logs_for(&identity, &id, node.as_deref()).await?;
    let mut out = String::new();
    for (name, log) in logs {
        if log.is_empty() {
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
    Ok(Json(run_info(s.runs.cancel_for(&identity, &id).await?)))
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
    let code = req.upload.as_deref().map(|u| code_of(&s, u));
    let run = s
        .runs
        .rerun_for(&identity, &id, req.from_failed, code)
        .await?;
    Ok((StatusCode::CREATED, Json(run_info(run))))
}

/// A run as the API shows it (a partitioned run's partitions from its nodes).
fn run_info(r: crate::runs::RunRecord) -> RunInfo {
    let nodes: Vec<lh_api::RunNode> = r.nodes.into_iter().map(run_node).collect();
    RunInfo {
        partitions: lh_api::RunPartition::of(&nodes),
        id: r.id,
        project: r.project,
        author: r.author,
        target: r.target,
        run_branch: r.run_branch,
        code_hash: r.code_hash,
        input_commit: r.input_commit,
        check: r.check,
        params: r.params,
        status: r.status,
        error: r.error,
        merge_commit: r.merge_commit,
        no_cache: r.no_cache,
        strict: r.strict,
        rerun_of: r.rerun_of,
        created_at: r.created_at,
        finished_at: r.finished_at,
        environments: r.environments,
        nodes,
        nodes_hidden: r.nodes_hidden,
    }
}

fn run_node(n: crate::runs::RunNode) -> lh_api::RunNode {
    lh_api::RunNode {
        name: n.name,
        kind: n.kind,
        language: n.language,
        status: n.status,
        started_at: n.started_at,
        finished_at: n.finished_at,
        rows: n.rows,
        cached: n.cached,
        reason: n.reason,
        error: n.error,
        traceback: n.traceback,
        detail: n.detail,
        inputs: n.inputs,
        depends_on: n.depends_on,
        output: n.output.as_ref().map(crate::error::pointer),
        location: n.location,
    }
}

/// A planned run as the API shows it: its nodes in execution order.
fn plan_response(planned: crate::runs::Planned) -> PlanResponse {
    use crate::runs::project::Lang;
    let crate::runs::Planned {
        plan,
        at,
        mut changes,
    } = planned;
    let nodes = plan
        .order
        .iter()
        .map(|&i| {
            let n = &plan.nodes[i];
            let (python, packages) = match &n.lang {
                Lang::Python { env, .. } => (Some(env.python.clone()), env.packages.clone()),
                Lang::Sql { .. } => (None, Default::default()),
            };
            lh_api::PlannedNode {
                name: n.display_name(),
                kind: crate::runs::kind_name(&n.kind).into(),
                language: crate::runs::lang_name(&n.lang).into(),
                location: n.location(),
                inputs: n
                    .inputs
                    .iter()
                    .map(|inp| lh_api::PlannedInput {
                        table: inp.table.clone(),
                        columns: inp.columns.clone(),
                        filter: inp.filter.clone(),
                        producer: inp.producer.map(|p| plan.nodes[p].display_name()),
                    })
                    .collect(),
                output: n.output().map(String::from),
                python,
                packages,
                change: changes.remove(&i).map(|c| lh_api::PlannedChange {
                    action: c.action,
                    reasons: c.reasons,
                    category: c.category,
                    details: c.details,
                    compared_with: c.compared_with,
                }),
            }
        })
        .collect();
    PlanResponse {
        project: plan.project.name.clone(),
        namespace: plan.project.namespace.clone(),
        reference: at,
        params: plan.params.clone(),
        nodes,
    }
}
