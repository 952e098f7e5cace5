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
/// (without one, the largest a body may be) until it has been read ([`Charged`]); one that would
/// pass the budget waits up to a minute for others to be read (its body still unread,
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
    let req = req.map(|body| {
        axum::body::Body::new(Charged {
            body,
            held: Some(held),
        })
    });
    next.run(req).await
}

/// A request body and its charge to the body budget, given back once the body has been
/// read to its end (or dropped unread): what a handler keeps of it is its own to bound
/// (a query's SQL, `lh_query::MAX_SQL_BYTES`, its ref and its caller's queue; a table's
/// properties and metadata, `lh_tables::commit`; a commit's message and properties,
/// `lh_catalog`). Held for the whole request, the charge let slow requests hold the
/// budget: four 16 MiB query bodies of two callers, their queries running for minutes
/// (the thirty-fourth review), and as much on any route that waits (a plan for a
/// planner, an import for a write slot: the thirty-sixth); another caller's 1 MB body
/// waited a minute and was refused.
struct Charged {
    body: axum::body::Body,
    held: Option<(
        tokio::sync::OwnedSemaphorePermit,
        tokio::sync::OwnedSemaphorePermit,
    )>,
}

impl http_body::Body for Charged {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let frame = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if matches!(frame, std::task::Poll::Ready(None | Some(Err(_)))) || self.body.is_end_stream()
        {
            self.held = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
