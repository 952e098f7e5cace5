//! SQL queries; results as an Arrow IPC stream.

use std::time::Duration;

use arrow::util::display::{ArrayFormatter, FormatOptions};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lh_api::{QueryColumn, QueryProgress, QueryRequest};

use crate::auth::Identity;
use crate::error::Error;
use crate::http::ApiResult;
use crate::query::Ask;
use crate::query::memory::{JsonText, Pieces};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/query", post(query))
        .route("/api/v1/query/progress/{id}", get(progress))
}

/// A query's name for its progress (`QueryRequest::progress_id`): 1 to 64 letters,
/// digits, `-` or `_`.
fn progress_id(id: &str) -> Result<&str, Error> {
    let ok = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(id)
    } else {
        Err(Error::bad_request(
            crate::error::Code::InvalidArgument,
            "a query's progress id is 1 to 64 letters, digits, '-' or '_'",
        ))
    }
}

/// How far the caller's running query named `id` is (`progress_id` of its request), as
/// DuckDB's progress bar says: one's own queries only; 404 once it has ended.
#[utoipa::path(get, path = "/api/v1/query/progress/{id}",
    params(("id" = String, Path, description = "the query's progress_id")),
    responses((status = 200, body = QueryProgress), (status = 404, body = lh_api::ErrorBody)))]
async fn progress(
    State(s): State<AppState>,
    identity: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<QueryProgress>> {
    let percentage = s.queries.progress(&identity.user, progress_id(&id)?)?;
    Ok(Json(QueryProgress { percentage }))
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
    let at = lh_catalog::ref_or_default(req.reference.clone())?;
    let json = wants_json(&headers);
    let progress = req.progress_id.as_deref().map(progress_id).transpose()?;
    let ask = Ask {
        timeout: req.timeout_ms.map(Duration::from_millis),
        max_rows: req.max_rows,
        ipc: !json,
        progress,
        ..Ask::default()
    };
    let out = s.queries.query_for(&identity, &req.sql, &at, ask).await?;
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
/// formatted as text the way `lh query` prints it (nulls stay null). Held to the same
/// `max_bytes` as the Arrow answer, and charged to the server's answer memory
/// (`charge`), as it is written, byte by byte: text can be far larger than the Arrow it
/// comes from (a boolean is one bit there, `"false"` here, and one list value can
/// print as gigabytes). The text is handed back in pieces of about a megabyte, each
/// with its part of the charge.
fn json_answer(
    out: crate::query::QueryOutput,
    started: std::time::Instant,
    max_bytes: u64,
    charge: crate::query::memory::Charge,
) -> Result<Vec<bytes::Bytes>, Error> {
    use std::io::Write;
    let columns: Vec<QueryColumn> = out
        .schema
        .fields()
        .iter()
        .map(|f| QueryColumn {
            name: f.name().clone(),
            r#type: f.data_type().to_string(),
        })
        .collect();
    let mut buf = Pieces::new(charge, max_bytes, "the result as JSON")
        .with_hint("add a LIMIT or aggregate, or ask for Arrow (the CLI and lh.Client do)");
    buf.put(b"{\"columns\":")?;
    serde_json::to_writer(&mut buf, &columns).map_err(|e| buf.failed(e.into()))?;
    buf.put(b",\"rows\":[")?;
    let options = FormatOptions::default();
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
                buf.put(b",")?;
            }
            buf.put(b"[")?;
            for (j, f) in formatters.iter().enumerate() {
                if j > 0 {
                    buf.put(b",")?;
                }
                if nulls[j].as_ref().is_some_and(|n| n.is_null(i)) {
                    buf.put(b"null")?;
                } else {
                    // Formatted straight into the text, escaped as it comes.
                    buf.put(b"\"")?;
                    let written = std::fmt::Write::write_fmt(
                        &mut JsonText(&mut buf),
                        format_args!("{}", f.value(i)),
                    );
                    written
                        .map_err(|_| buf.failed(std::io::Error::other("cannot format a value")))?;
                    buf.put(b"\"")?;
                }
            }
            buf.put(b"]")?;
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
    .map_err(|e| buf.failed(e))?;
    drop(out);
    buf.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    /// Text escaped into the pieces reads back as serde_json's own escaping does.
    #[test]
    fn json_text_escapes_as_serde_json() {
        let memory = crate::query::memory::AnswerMemory::new(64 << 20);
        let mut p = Pieces::new(memory.charge(), 1 << 30, "the text");
        let text = "a\"b\\c\nd\re\tf\u{8}g\u{c}h\u{1}i\u{1f}j\u{7f}k\u{e9}l";
        p.put(b"\"").unwrap();
        std::fmt::Write::write_str(&mut JsonText(&mut p), text).unwrap();
        p.put(b"\"").unwrap();
        let pieces = p.finish().unwrap();
        let got: Vec<u8> = pieces.iter().flat_map(|b| b.to_vec()).collect();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            serde_json::to_string(text).unwrap()
        );
    }

    /// One value's text is held to the limit and charged as it is written, however
    /// small its Arrow: past the answer memory, or past `max_bytes`, it stops.
    #[test]
    fn one_huge_value_is_bounded_as_it_is_written() {
        let memory = crate::query::memory::AnswerMemory::new(8 << 20);
        let mut p = Pieces::new(memory.charge(), 1 << 30, "the text");
        let chunk = "false, ".repeat(1000);
        let mut written = 0usize;
        let e = loop {
            let r = std::fmt::Write::write_str(&mut JsonText(&mut p), &chunk);
            match r {
                Ok(()) => written += chunk.len(),
                Err(_) => break p.failed(std::io::Error::other("x")),
            }
            assert!(written < 64 << 20, "never stopped");
        };
        assert_eq!(e.code, Code::AnswerMemoryFull, "{}", e.message);
        assert!(memory.used() <= 8 << 20);
        drop(p);
        assert_eq!(memory.used(), 0);
        let mut p = Pieces::new(memory.charge(), 3 << 20, "the text");
        let e = loop {
            let r = std::fmt::Write::write_str(&mut JsonText(&mut p), &chunk);
            if r.is_err() {
                break p.failed(std::io::Error::other("x"));
            }
        };
        assert_eq!(e.code, Code::ResultTooLarge, "{}", e.message);
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
