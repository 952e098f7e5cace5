//! Namespace handlers: list (by parent, paged), create, load, exists, drop, and
//! property updates. Each reads the request, calls one method of the REST catalog
//! service (`lh_tables::rest_catalog`) and words the answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::names::namespace;
use super::types::{Body, CreateNamespace, Params, ParentQuery, UpdateProperties};
use crate::auth::Identity;
use crate::http::IcebergResult;
use crate::state::AppState;

pub async fn list_namespaces(
    State(s): State<AppState>,
    identity: Identity,
    Path(prefix): Path<String>,
    Params(q): Params<ParentQuery>,
) -> IcebergResult<Json<serde_json::Value>> {
    let prefix = super::names::prefix(&prefix)?;
    let parent: Vec<String> = match &q.parent {
        Some(p) if !p.is_empty() => namespace(p)?,
        _ => Vec::new(),
    };
    let children = s
        .rest_catalog
        .namespaces_for(&identity, &prefix, &parent)
        .await?;
    let (page, next) = q.page.apply(
        children
            .into_iter()
            .map(|c| (c.last().cloned().unwrap_or_default(), c))
            .collect(),
    )?;
    Ok(Json(
        serde_json::json!({ "namespaces": page, "next-page-token": next }),
    ))
}

pub async fn create_namespace(
    State(s): State<AppState>,
    identity: Identity,
    Path(prefix): Path<String>,
    Body(req): Body<CreateNamespace>,
) -> IcebergResult<Json<serde_json::Value>> {
    let prefix = super::names::prefix(&prefix)?;
    s.rest_catalog
        .create_namespace_for(&identity, &prefix, &req.namespace, &req.properties)
        .await?;
    Ok(Json(
        serde_json::json!({ "namespace": req.namespace, "properties": req.properties }),
    ))
}

pub async fn load_namespace(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns)): Path<(String, String)>,
) -> IcebergResult<Json<serde_json::Value>> {
    let prefix = super::names::prefix(&prefix)?;
    let parts = namespace(&ns)?;
    let props = s
        .rest_catalog
        .namespace_for(&identity, &prefix, &lh_catalog::names::join_levels(&parts))
        .await?;
    Ok(Json(
        serde_json::json!({ "namespace": parts, "properties": props }),
    ))
}

pub async fn namespace_exists(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns)): Path<(String, String)>,
) -> IcebergResult<StatusCode> {
    let prefix = super::names::prefix(&prefix)?;
    let parts = namespace(&ns)?;
    s.rest_catalog
        .namespace_for(&identity, &prefix, &lh_catalog::names::join_levels(&parts))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn drop_namespace(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns)): Path<(String, String)>,
) -> IcebergResult<StatusCode> {
    let prefix = super::names::prefix(&prefix)?;
    let name = lh_catalog::names::join_levels(&namespace(&ns)?);
    s.rest_catalog
        .drop_namespace_for(&identity, &prefix, &name)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn update_properties(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns)): Path<(String, String)>,
    Body(req): Body<UpdateProperties>,
) -> IcebergResult<Json<serde_json::Value>> {
    let prefix = super::names::prefix(&prefix)?;
    let name = lh_catalog::names::join_levels(&namespace(&ns)?);
    let done = s
        .rest_catalog
        .update_properties_for(&identity, &prefix, &name, req.updates, &req.removals)
        .await?;
    Ok(Json(serde_json::json!({
        "updated": done.updated,
        "removed": done.removed,
        "missing": done.missing,
    })))
}
