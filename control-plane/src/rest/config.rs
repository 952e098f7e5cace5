//! The catalog's configuration: the warehouse a client names (an lh ref) becomes the
//! prefix of every other route.

use axum::Json;
use axum::extract::State;

use super::types::{ConfigQuery, Params};
use crate::auth::Identity;
use crate::http::IcebergResult;
use crate::state::AppState;

pub async fn config(
    State(s): State<AppState>,
    identity: Identity,
    Params(q): Params<ConfigQuery>,
) -> IcebergResult<Json<serde_json::Value>> {
    let warehouse = match q.warehouse {
        Some(text) => super::names::prefix(&text)?,
        None => lh_catalog::ref_or_default(None)?,
    };
    s.rest_catalog.config_for(&identity, &warehouse).await?;
    let prefix =
        url::form_urlencoded::byte_serialize(warehouse.to_string().as_bytes()).collect::<String>();
    let endpoints = [
        "GET /v1/{prefix}/namespaces",
        "POST /v1/{prefix}/namespaces",
        "GET /v1/{prefix}/namespaces/{namespace}",
        "HEAD /v1/{prefix}/namespaces/{namespace}",
        "DELETE /v1/{prefix}/namespaces/{namespace}",
        "POST /v1/{prefix}/namespaces/{namespace}/properties",
        "GET /v1/{prefix}/namespaces/{namespace}/tables",
        "POST /v1/{prefix}/namespaces/{namespace}/tables",
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "POST /v1/{prefix}/namespaces/{namespace}/register",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
        "POST /v1/{prefix}/tables/rename",
        "POST /v1/{prefix}/transactions/commit",
    ];
    Ok(Json(serde_json::json!({
        "defaults": { "prefix": prefix },
        "overrides": {},
        "endpoints": endpoints,
    })))
}
