//! The web console: one page (HTML, JavaScript, CSS from `control-plane/console/`)
//! compiled into the binary and served at `/`. The page calls lh's API with the same
//! bearer tokens as every other client; its own files hold no data, so they are served
//! without a token. A strict Content-Security-Policy lets the page run only its own
//! script and talk only to this server, so that hostile text in the catalog (a commit
//! message, a table's values) cannot become script.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The console's policy: its own script and styles, requests to this server only, no
/// framing, no forms posted elsewhere, no base URL.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

struct Asset {
    name: &'static str,
    mime: &'static str,
    body: &'static [u8],
}

const INDEX: Asset = Asset {
    name: "index.html",
    mime: "text/html; charset=utf-8",
    body: include_bytes!("../console/index.html"),
};

/// The files under `/console/`.
const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        mime: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/app.js"),
    },
    Asset {
        name: "app.css",
        mime: "text/css; charset=utf-8",
        body: include_bytes!("../console/app.css"),
    },
    Asset {
        name: "favicon.svg",
        mime: "image/svg+xml",
        body: include_bytes!("../console/favicon.svg"),
    },
];

pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/console/{file}", get(asset))
}

async fn index(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => serve(a, &headers),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// An asset with its validator: browsers ask again each time (`no-cache`) and get 304
/// while the binary is the same.
fn serve(a: &Asset, headers: &HeaderMap) -> Response {
    let etag = format!("\"{}\"", &blake3::hash(a.body).to_hex()[..16]);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut r = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, a.mime)], a.body).into_response()
    };
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}
