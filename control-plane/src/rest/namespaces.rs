//! Namespace handlers: list (by parent, paged), create, load, exists, drop, and
//! property updates, over the namespace store (`crate::namespaces`).

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::names::{at, branch, namespace};
use super::types::{Body, CreateNamespace, Params, ParentQuery, UpdateProperties, bad_request};
use crate::auth::{Action, Identity};
use crate::error::{Code, Error, Kind};
use crate::http::IcebergResult;
use crate::namespaces::not_found;
use crate::state::AppState;

pub async fn list_namespaces(
    State(s): State<AppState>,
    identity: Identity,
    Path(prefix): Path<String>,
    Params(q): Params<ParentQuery>,
) -> IcebergResult<Json<serde_json::Value>> {
    let a = at(&s, &prefix, &identity).await?;
    let all = s.namespaces.at(&a.commit).await?;
    let parent: Vec<String> = match &q.parent {
        Some(p) if !p.is_empty() => namespace(p)?,
        _ => Vec::new(),
    };
    if !parent.is_empty() && !all.contains_key(&parent.join(".")) {
        return Err(not_found(&parent.join(".")).into());
    }
    let children: BTreeSet<Vec<String>> = all
        .keys()
        .map(|k| k.split('.').map(String::from).collect::<Vec<_>>())
        .filter(|parts| parts.len() == parent.len() + 1 && parts.starts_with(&parent))
        // Namespaces the identity may not read are not listed.
        .filter(|parts| identity.can_namespace(Action::Read, &prefix, &parts.join(".")))
        .collect();
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
    let name = req.namespace.join(".");
    identity.require_namespace_everywhere(Action::Write, &name, "creating a namespace")?;
    let a = branch(&s, &prefix, &identity).await?;
    if req.namespace.is_empty() {
        return Err(bad_request("a namespace has at least one level").into());
    }
    lh_catalog::names::validate_namespace(&name).map_err(|e| bad_request(e.to_string()))?;
    s.namespaces
        .create(&a.commit, &name, &req.properties)
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
    let a = at(&s, &prefix, &identity).await?;
    let parts = namespace(&ns)?;
    let props = s.namespaces.get(&a.commit, &parts.join(".")).await?;
    Ok(Json(
        serde_json::json!({ "namespace": parts, "properties": props }),
    ))
}

pub async fn namespace_exists(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns)): Path<(String, String)>,
) -> IcebergResult<StatusCode> {
    let a = at(&s, &prefix, &identity).await?;
    let parts = namespace(&ns)?;
    s.namespaces.get(&a.commit, &parts.join(".")).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn drop_namespace(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns)): Path<(String, String)>,
) -> IcebergResult<StatusCode> {
    let name = namespace(&ns)?.join(".");
    identity.require_namespace_everywhere(Action::Write, &name, "dropping a namespace")?;
    let a = branch(&s, &prefix, &identity).await?;
    s.namespaces.remove(&a.commit, &a.expr, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn update_properties(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns)): Path<(String, String)>,
    Body(req): Body<UpdateProperties>,
) -> IcebergResult<Json<serde_json::Value>> {
    let name = namespace(&ns)?.join(".");
    identity.require_namespace_everywhere(
        Action::Write,
        &name,
        "changing a namespace's properties",
    )?;
    let a = branch(&s, &prefix, &identity).await?;
    let mut props = s.namespaces.get(&a.commit, &name).await?;
    if let Some(k) = req.removals.iter().find(|k| req.updates.contains_key(*k)) {
        return Err(Error::new(
            Kind::Unprocessable,
            Code::PropertyConflict,
            format!("'{k}' is both updated and removed"),
        )
        .into());
    }
    let mut removed = Vec::new();
    let mut missing = Vec::new();
    for k in &req.removals {
        if props.remove(k).is_some() {
            removed.push(k.clone())
        } else {
            missing.push(k.clone())
        }
    }
    let updated: Vec<String> = req.updates.keys().cloned().collect();
    props.extend(req.updates);
    s.namespaces.set_properties(&name, &props).await?;
    Ok(Json(
        serde_json::json!({ "updated": updated, "removed": removed, "missing": missing }),
    ))
}
