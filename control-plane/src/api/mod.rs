//! The HTTP API (`/api/v1`): thin handlers over the catalog, the tables and the query
//! engine. Each resource module exposes a `router()`; `app()` assembles them with the
//! request-id, tracing and panic layers.

mod error;
pub mod openapi;
mod query;
mod refs;
mod runs;
mod tables;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, HeaderName, Request};
use lh_catalog::Catalog;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub use error::{ApiError, ApiResult};

use crate::query::QueryEngine;
use crate::tables::Tables;
use crate::tables::write::ImportContext;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub catalog: Catalog,
    pub tables: Arc<Tables>,
    pub queries: Arc<QueryEngine>,
    pub import: ImportContext,
    pub uploads: PathBuf,
    pub runs: Arc<crate::runs::RunService>,
    pub info: lh_api::ServerInfo,
}

/// The header naming who makes a change (until lh has authentication).
pub const USER_HEADER: &str = "x-lh-user";

/// The author of a change: the `x-lh-user` header, or `anonymous`.
pub fn author(headers: &HeaderMap) -> String {
    author_or(headers, "anonymous")
}

/// The author of a change: the `x-lh-user` header, or `default`.
pub fn author_or(headers: &HeaderMap, default: &str) -> String {
    headers
        .get(USER_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 200)
        .unwrap_or(default)
        .to_string()
}

/// The whole application.
pub fn app(state: AppState) -> Router {
    let request_id = HeaderName::from_static(lh_api::REQUEST_ID_HEADER);
    Router::new()
        .merge(refs::router())
        .merge(tables::router())
        .merge(query::router())
        .merge(runs::router())
        .merge(crate::rest::router())
        .merge(openapi::router())
        .with_state(state)
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
                let id = req
                    .headers()
                    .get(lh_api::REQUEST_ID_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-");
                tracing::info_span!("request", request_id = %id, method = %req.method(), path = %req.uri().path())
            }),
        )
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
}

/// Query-string pairs, repeated keys kept (`property=a=1&property=b=2`).
pub fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(raw.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}
