//! The one place where errors become HTTP responses: a status code from the error's
//! kind, and a JSON body with the stable code, the message and the hint. Server-side
//! failures are logged with the request's span and shown without internals.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lh_api::{ErrorBody, ErrorDetail};

use crate::error::{Error, Kind};

/// An error on its way to the client.
pub struct ApiError(pub Error);

impl<E: Into<Error>> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError(e.into())
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

pub fn status(kind: Kind) -> StatusCode {
    match kind {
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::BadRequest => StatusCode::BAD_REQUEST,
        Kind::Conflict => StatusCode::CONFLICT,
        Kind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let e = self.0;
        let status = status(e.kind);
        let message = if status.is_server_error() {
            tracing::error!(code = e.code, message = %e.message, "request failed");
            match e.kind {
                Kind::Internal => {
                    "internal server error; the server log has the details".to_string()
                }
                _ => e.message,
            }
        } else {
            e.message
        };
        let body = ErrorBody {
            error: ErrorDetail {
                kind: e.code.to_string(),
                message,
                hint: e.hint,
                conflicts: e.conflicts,
            },
        };
        (status, Json(body)).into_response()
    }
}
