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
    let bodies = BodyMemory::new(max_body);
    Router::new()
        .merge(crate::api::router())
        .merge(crate::rest::router())
        .merge(crate::console::router())
        .with_state(state)
        // Bodies read whole, within their budget: only a request the guard let through
        // is charged.
        .layer(axum::middleware::from_fn_with_state(bodies, hold_body))
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

/// What the request bodies the server reads whole (JSON requests, a project's files) may
/// hold at once: four of the largest a body may be (`--max-request`), at least 64 MiB.
/// Found by the thirtieth review: 40 query bodies of 15 MB at once took the server from
/// 0.18 to 1.44 GB, and nothing bounded how many. A body charges its declared length
/// (without one, the largest a body may be) while its request is served ([`BodyCharge`]); one that would
/// pass the budget waits up to a minute for others to finish (its body still unread,
/// in the connection's buffers), then is refused (503). Small
/// bodies are not charged, nor uploads, which stream to disk.
///
/// One caller holds at most half of it (the thirty-first review: 40 slow bodies of one
/// caller, each declaring 16 MiB and sending a byte a second, held it all, and another
/// caller's query waited 17 s).
#[derive(Clone)]
struct BodyMemory {
    kib: std::sync::Arc<tokio::sync::Semaphore>,
    total_kib: u32,
    max_body: usize,
    /// Each caller's half, while it holds or waits for some.
    shares: std::sync::Arc<std::sync::Mutex<Shares>>,
}

type Shares = std::collections::HashMap<String, std::sync::Arc<tokio::sync::Semaphore>>;

/// Bodies up to this size are not charged.
const SMALL_BODY: usize = 64 << 10;

impl BodyMemory {
    fn new(max_body: usize) -> BodyMemory {
        let total = max_body.saturating_mul(4).max(64 << 20);
        let total_kib = u32::try_from(total >> 10).unwrap_or(u32::MAX);
        BodyMemory {
            kib: std::sync::Arc::new(tokio::sync::Semaphore::new(total_kib as usize)),
            total_kib,
            max_body,
            shares: Default::default(),
        }
    }

    /// `caller`'s half of the budget.
    fn share(&self, caller: &str) -> std::sync::Arc<tokio::sync::Semaphore> {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        // Shares nobody holds or waits for go (the map's own reference only).
        shares.retain(|_, s| std::sync::Arc::strong_count(s) > 1);
        let half = (self.total_kib / 2) as usize;
        shares
            .entry(caller.to_string())
            .or_insert_with(|| std::sync::Arc::new(tokio::sync::Semaphore::new(half)))
            .clone()
    }
}

async fn hold_body(
    axum::extract::State(bodies): axum::extract::State<BodyMemory>,
    req: Request<axum::body::Body>,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if req.uri().path() == "/api/v1/uploads" {
        return next.run(req).await;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let chunked = req.headers().contains_key(header::TRANSFER_ENCODING);
    let size = match declared {
        Some(n) => n.min(bodies.max_body),
        None if chunked => bodies.max_body,
        None => 0,
    };
    if size <= SMALL_BODY {
        return next.run(req).await;
    }
    let kib = u32::try_from(size.div_ceil(1 << 10))
        .unwrap_or(u32::MAX)
        .min(bodies.total_kib / 2);
    let caller = req
        .extensions()
        .get::<crate::auth::Identity>()
        .map_or_else(String::new, |i| i.user.clone());
    let share = bodies.share(&caller);
    let wait = async {
        let mine = share.acquire_many_owned(kib).await?;
        let all = bodies.kib.clone().acquire_many_owned(kib).await?;
        Ok::<_, tokio::sync::AcquireError>((mine, all))
    };
    let Ok(Ok(held)) = tokio::time::timeout(std::time::Duration::from_secs(60), wait).await else {
        return lh_core::http::ApiError(
            lh_core::error::Error::new(
                lh_core::error::Kind::Unavailable,
                lh_core::error::Code::RequestBodiesFull,
                "the server holds as many request bodies as it may at once",
            )
            .with_hint("send it again in a moment"),
        )
        .into_response();
    };
    let charge = BodyCharge(std::sync::Arc::new(std::sync::Mutex::new(Some(held))));
    let mut req = req;
    req.extensions_mut().insert(charge.clone());
    let response = next.run(req).await;
    charge.release();
    response
}

/// A request body's charge to the body budget ([`BodyMemory`]), held until its handler
/// answers, so that what the handler makes of the body (a commit's parsed updates, a
/// table's properties) stays within the budget too. A handler that then waits long
/// with little of it gives the charge back once it has bounded what it keeps: a query
/// ([`crate::api::query`]: its SQL at most 1 MiB, its ref a few hundred bytes, at
/// most 64 of its caller's queries waiting). Once (the thirty-fourth review) four 16
/// MiB query bodies of two callers held the whole budget while their queries ran for
/// minutes, and another caller's 1 MB body waited a minute and was refused; and (the
/// thirty-fifth) with every charge given back once its body was read, six 12 MB
/// commits of one caller took the server from 0.19 to 1.42 GB.
#[derive(Clone)]
pub struct BodyCharge(std::sync::Arc<std::sync::Mutex<Option<Held>>>);

type Held = (
    tokio::sync::OwnedSemaphorePermit,
    tokio::sync::OwnedSemaphorePermit,
);

impl BodyCharge {
    /// Gives the charge back (the handler keeps only what it has bounded).
    pub fn release(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}
