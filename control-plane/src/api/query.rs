//! SQL queries; results as an Arrow IPC stream.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use lh_api::QueryRequest;

use crate::auth::{Action, Identity};
use crate::error::Error;
use crate::http::ApiResult;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/query", post(query))
}

/// Runs one read-only SQL statement on a ref; the result is an Arrow IPC stream and the
/// commit read is in the `x-lh-commit` header.
#[utoipa::path(post, path = "/api/v1/query", request_body = QueryRequest,
    responses((status = 200, content_type = "application/vnd.apache.arrow.stream", body = Vec<u8>),
              (status = 400, body = lh_api::ErrorBody), (status = 504, body = lh_api::ErrorBody)))]
async fn query(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<QueryRequest>,
) -> ApiResult<Response> {
    let at = req
        .reference
        .clone()
        .unwrap_or_else(|| lh_catalog::DEFAULT_BRANCH.to_string());
    identity.require_ref(Action::Read, &at, "querying it")?;
    let readable = |table: &str| identity.can_table(Action::Read, &at, table);
    let out = s
        .queries
        .run_as(
            &req.sql,
            &at,
            req.timeout_ms.map(Duration::from_millis),
            req.max_rows,
            &readable,
            !identity.access.covers(crate::auth::Role::Reader),
        )
        .await?;
    // Sized for the whole answer at once: growing by doubling would copy a large
    // result several times over.
    let size: usize = out.batches.iter().map(|b| b.get_array_memory_size()).sum();
    let mut buf = Vec::with_capacity(size + (64 << 10));
    {
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut buf, &out.schema)
            .map_err(|e| Error::internal(format!("cannot encode the result: {e}")))?;
        for b in &out.batches {
            w.write(b)
                .map_err(|e| Error::internal(format!("cannot encode the result: {e}")))?;
        }
        w.finish()
            .map_err(|e| Error::internal(format!("cannot encode the result: {e}")))?;
    }
    let mut resp = buf.into_response();
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
