//! The whole HTTP application: lh's API (`api::router`), the Iceberg REST catalog
//! (`rest::router`) and the web console's page (`console::router`) side by side, with the guard (`auth::guard`: Host, Origin, token,
//! permission), the body limit, and the request-id, tracing and panic layers every
//! request goes through.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, Request, header};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

use crate::state::AppState;

pub fn app(state: AppState) -> Router {
    let request_id = HeaderName::from_static(lh_api::REQUEST_ID_HEADER);
    let guard = state.guard.clone();
    let max_body = guard.max_request_bytes;
    Router::new()
        .merge(crate::api::router())
        .merge(crate::rest::router())
        .merge(crate::console::router())
        .with_state(state)
        // Host, Origin, token and the route's permission, before any handler (after
        // routing, which names the route).
        .layer(axum::middleware::from_fn_with_state(
            guard,
            crate::auth::guard::guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
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
        // No answer is ever read as another type than it says (the console's page
        // shares this origin: a text log must not become a page).
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
}
