//! SQL queries; results as an Arrow IPC stream.

use std::time::Duration;

use arrow::util::display::{ArrayFormatter, FormatOptions};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use lh_api::{QueryColumn, QueryRequest};

use crate::auth::{Action, Identity};
use crate::error::{Code, Error, Kind};
use crate::http::ApiResult;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/query", post(query))
}

/// Runs one read-only SQL statement on a ref; the result is an Arrow IPC stream and the
/// commit read is in the `x-lh-commit` header. With `Accept: application/json` (the web
/// console), the result is JSON instead: every value as text, as `lh query` prints it.
#[utoipa::path(post, path = "/api/v1/query", request_body = QueryRequest,
    responses((status = 200, content(
                  (Vec<u8> = "application/vnd.apache.arrow.stream"),
                  (lh_api::QueryJson = "application/json"))),
              (status = 400, body = lh_api::ErrorBody), (status = 504, body = lh_api::ErrorBody)))]
async fn query(
    State(s): State<AppState>,
    identity: Identity,
    headers: HeaderMap,
    Json(req): Json<QueryRequest>,
) -> ApiResult<Response> {
    let started = std::time::Instant::now();
    let at = req
        .reference
        .clone()
        .unwrap_or_else(|| lh_catalog::DEFAULT_BRANCH.to_string());
    identity.require_ref(Action::Read, &at, "querying it")?;
    let identity = crate::auth::history::scoped(&s.catalog, &identity, &at).await?;
    let readable = |table: &str| identity.can_table(Action::Read, &at, table);
    let json = wants_json(&headers);
    let out = s
        .queries
        .run_as(
            &req.sql,
            // The commit the history check found its limits for, not the ref again.
            &identity.reads(&at),
            req.timeout_ms.map(Duration::from_millis),
            req.max_rows,
            &readable,
            !identity.access.covers(crate::auth::Role::Reader),
            !json,
            Some(&identity.user),
        )
        .await?;
    if json {
        let limit = s.queries.limits().max_result_bytes;
        let charge = s.queries.answer_memory().charge_for(Some(&identity.user));
        // The batches (and their charge) go once the text is made; the text's pieces
        // give theirs back as they are sent.
        let pieces = tokio::task::spawn_blocking(move || json_answer(out, started, limit, charge))
            .await
            .map_err(|e| Error::internal(format!("cannot format the result: {e}")))??;
        let body = axum::body::Body::new(crate::query::ipc::IpcBody::from_pieces(pieces));
        let mut resp = body.into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return Ok(resp);
    }
    let body = match (out.ipc, out.streaming) {
        (Some(stream), _) => axum::body::Body::new(stream.finish()?),
        // Sent as DuckDB produces it: no length; an error breaks the stream off.
        (None, Some(crate::query::Streaming { first, rest, done })) => {
            let first = futures::stream::iter(first.into_iter().map(Ok));
            // A channel closed before the whole stream was sent is an error too: a
            // body that ended cleanly would read as a complete, shorter answer.
            let rest = futures::stream::unfold(Some(rest), move |rx| {
                let done = done.clone();
                async move {
                    let mut rx = rx?;
                    let item = match rx.recv().await {
                        Some(item) => item,
                        None if done.load(std::sync::atomic::Ordering::SeqCst) => return None,
                        None => Err(Error::internal("the query stopped part-way")),
                    };
                    match item {
                        Ok(piece) => Some((Ok(piece), Some(rx))),
                        Err(e) => {
                            tracing::warn!(error = %e.message, "a streamed query answer broke off");
                            Some((Err(std::io::Error::other(e.message)), None))
                        }
                    }
                }
            });
            axum::body::Body::from_stream(futures::StreamExt::chain(first, rest))
        }
        (None, None) => {
            return Err(Error::internal("the query's answer was not encoded").into());
        }
    };
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(lh_api::ARROW_STREAM),
    );
    if let Ok(v) = HeaderValue::from_str(&out.commit.to_hex()) {
        h.insert(lh_api::COMMIT_HEADER, v);
    }
    if out.truncated {
        h.insert(lh_api::TRUNCATED_HEADER, HeaderValue::from_static("true"));
    }
    h.insert(lh_api::FILES_READ_HEADER, HeaderValue::from(out.files_read));
    Ok(resp)
}

/// Whether the caller asked for JSON rather than Arrow (`Accept: application/json`
/// before Arrow's type, and not refused with `q=0`).
fn wants_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let acceptable: Vec<&str> = accept
        .split(',')
        .filter_map(|item| {
            let mut parts = item.split(';').map(str::trim);
            let media = parts.next()?;
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (!refused).then_some(media)
        })
        .collect();
    let json = acceptable
        .iter()
        .position(|t| t.eq_ignore_ascii_case("application/json"));
    let arrow = acceptable
        .iter()
        .position(|t| t.eq_ignore_ascii_case(lh_api::ARROW_STREAM));
    match (json, arrow) {
        (Some(j), Some(a)) => j < a,
        (Some(_), None) => true,
        _ => false,
    }
}

/// A result as JSON ([`QueryJson`]): the columns with their Arrow types, and each value
/// formatted as text the way `lh query` prints it (nulls stay null). Written straight
/// into the body and held to the same `max_bytes` as the Arrow answer: text can be far
/// larger than the Arrow it comes from (a boolean is one bit there, `"false"` here).
/// The text is written in pieces of about a megabyte, each charged to the server's
/// answer memory (`charge`) as it is written, and handed back with its part of it.
fn json_answer(
    out: crate::query::QueryOutput,
    started: std::time::Instant,
    max_bytes: u64,
    charge: crate::query::memory::Charge,
) -> Result<Vec<bytes::Bytes>, Error> {
    use std::io::Write;
    let too_large = || {
        Error::new(
            Kind::TooLarge,
            Code::ResultTooLarge,
            format!("the result as JSON is larger than the limit of {max_bytes} bytes"),
        )
        .with_hint("add a LIMIT or aggregate, or ask for Arrow (the CLI and lh.Client do)")
    };
    let failed = |e: std::io::Error| Error::internal(format!("cannot write the result: {e}"));
    let columns: Vec<QueryColumn> = out
        .schema
        .fields()
        .iter()
        .map(|f| QueryColumn {
            name: f.name().clone(),
            r#type: f.data_type().to_string(),
        })
        .collect();
    let mut buf = Pieces::new(charge);
    buf.extend_from_slice(b"{\"columns\":");
    serde_json::to_writer(&mut buf, &columns).map_err(|e| failed(e.into()))?;
    buf.extend_from_slice(b",\"rows\":[");
    let options = FormatOptions::default();
    let mut cell = String::new();
    let mut first_row = true;
    for batch in &out.batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::internal(format!("cannot format the result: {e}")))?;
        // Logical nulls: a column of DuckDB's NULL type has no validity buffer.
        let nulls: Vec<_> = batch.columns().iter().map(|c| c.logical_nulls()).collect();
        for i in 0..batch.num_rows() {
            if !std::mem::take(&mut first_row) {
                buf.push(b',');
            }
            buf.push(b'[');
            for (j, f) in formatters.iter().enumerate() {
                if j > 0 {
                    buf.push(b',');
                }
                if nulls[j].as_ref().is_some_and(|n| n.is_null(i)) {
                    buf.extend_from_slice(b"null");
                } else {
                    cell.clear();
                    std::fmt::Write::write_fmt(&mut cell, format_args!("{}", f.value(i)))
                        .map_err(|e| Error::internal(format!("cannot format the result: {e}")))?;
                    serde_json::to_writer(&mut buf, &cell).map_err(|e| failed(e.into()))?;
                }
            }
            buf.push(b']');
            if buf.len() > max_bytes {
                return Err(too_large());
            }
            buf.cut()?;
        }
    }
    write!(
        buf,
        "],\"truncated\":{},\"commit\":\"{}\",\"files_read\":{},\"elapsed_ms\":{}}}",
        out.truncated,
        out.commit.to_hex(),
        out.files_read,
        started.elapsed().as_millis()
    )
    .map_err(failed)?;
    drop(out);
    buf.finish()
}

/// Text written in pieces of about [`Pieces::SIZE`] bytes (never one large buffer that
/// doubles as it grows), charged to the answer memory as it is written.
struct Pieces {
    done: Vec<bytes::Bytes>,
    done_len: u64,
    current: Vec<u8>,
    charge: crate::query::memory::Charge,
}

impl Pieces {
    const SIZE: usize = 1 << 20;

    fn new(charge: crate::query::memory::Charge) -> Pieces {
        Pieces {
            done: Vec::new(),
            done_len: 0,
            current: Vec::with_capacity(Self::SIZE),
            charge,
        }
    }

    fn push(&mut self, b: u8) {
        self.current.push(b);
    }

    fn extend_from_slice(&mut self, b: &[u8]) {
        self.current.extend_from_slice(b);
    }

    /// The bytes written.
    fn len(&self) -> u64 {
        self.done_len + self.current.len() as u64
    }

    /// Ends the current piece once it is full, and charges what is held (or fails: the
    /// server's answer memory has no room).
    fn cut(&mut self) -> Result<(), Error> {
        if self.current.len() >= Self::SIZE {
            let mut piece = std::mem::replace(&mut self.current, Vec::with_capacity(Self::SIZE));
            piece.shrink_to_fit();
            self.done_len += piece.len() as u64;
            self.done.push(piece.into());
        }
        self.charge
            .set(self.done_len + self.current.capacity() as u64)
    }

    fn finish(mut self) -> Result<Vec<bytes::Bytes>, Error> {
        let last = std::mem::take(&mut self.current);
        self.done_len += last.len() as u64;
        self.done.push(last.into());
        self.charge.set(self.done_len)?;
        Ok(crate::query::memory::attach_each(self.charge, self.done))
    }
}

impl std::io::Write for Pieces {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.current.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn json_only_when_asked_for_before_arrow() {
        assert!(wants_json(&accept("application/json")));
        assert!(wants_json(&accept("application/json, */*")));
        assert!(wants_json(&accept(
            "application/json;q=0.9, application/vnd.apache.arrow.stream;q=0"
        )));
        assert!(!wants_json(&accept("application/json;q=0")));
        assert!(!wants_json(&accept(
            "application/vnd.apache.arrow.stream, application/json"
        )));
        assert!(!wants_json(&accept("*/*")));
        assert!(!wants_json(&HeaderMap::new()));
    }
}
