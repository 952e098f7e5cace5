//! lh's HTTP API (`/api/v1`): thin handlers over the catalog, the table service, the
//! query engine and the run service. Each resource module exposes a `router()`;
//! `router()` here puts them together with the OpenAPI document. Errors become
//! responses in `crate::http`.

mod access;
mod audit;
pub mod openapi;
mod params;
mod query;
mod refs;
mod runs;
mod tables;
mod tokens;

use axum::Router;

use crate::state::AppState;

/// Every route of lh's API.
pub fn router() -> Router<AppState> {
    Router::new()
        .merge(refs::router())
        .merge(tables::router())
        .merge(query::router())
        .merge(runs::router())
        .merge(tokens::router())
        .merge(access::router())
        .merge(audit::router())
        .merge(openapi::router())
}
