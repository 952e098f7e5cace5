//! Where errors become HTTP responses, for both of the server's HTTP surfaces: the
//! status code comes from the error's kind here (`status`) and nowhere else. lh's API
//! (`/api/v1`) answers with lh's body (`ApiError`: the stable code, the message, the
//! hint, the conflicting tables); the Iceberg REST catalog (`/iceberg/v1`) with the
//! spec's error model (`IcebergError`: the message, the exception type, the code).
//! Server-side failures are logged with the request's span; lh's body hides internals.
//!
//! Also here, because both surfaces record who makes a change: the `x-lh-user` header.

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use lh_api::{ErrorBody, ErrorDetail};

use crate::error::{Code, Error, Kind};

/// The HTTP status of an error kind, on either surface.
pub fn status(kind: Kind) -> StatusCode {
    match kind {
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::BadRequest => StatusCode::BAD_REQUEST,
        Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
        Kind::Forbidden => StatusCode::FORBIDDEN,
        Kind::Conflict => StatusCode::CONFLICT,
        Kind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        Kind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error on its way to a client of lh's API.
pub struct ApiError(pub Error);

impl<E: Into<Error>> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError(e.into())
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let e = self.0;
        let status = status(e.kind);
        let message = if status.is_server_error() {
            tracing::error!(code = e.code.as_str(), message = %e.message, "request failed");
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
                hint: lh_api::remedy::hint_text(e.hint.as_deref(), &e.remedies),
                remedies: e.remedies,
                conflicts: e.conflicts,
            },
        };
        with_challenge(status, (status, Json(body)).into_response())
    }
}

/// A 401 names the scheme it wants (RFC 6750).
fn with_challenge(status: StatusCode, mut response: Response) -> Response {
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer realm=\"lh\""),
        );
    }
    response
}

/// An error on its way to a client of the Iceberg REST catalog, in the spec's model:
/// `{"error": {"message", "type", "code"}}`.
pub struct IcebergError(pub Error);

impl<E: Into<Error>> From<E> for IcebergError {
    fn from(e: E) -> Self {
        IcebergError(e.into())
    }
}

pub type IcebergResult<T> = Result<T, IcebergError>;

/// The spec's exception type of an error: by kind, and for the kinds the spec splits,
/// by code.
fn iceberg_type(e: &Error) -> &'static str {
    match (e.kind, e.code) {
        (Kind::NotFound, Code::TableNotFound) => "NoSuchTableException",
        (Kind::NotFound, Code::NamespaceNotFound) => "NoSuchNamespaceException",
        (Kind::NotFound, Code::PrefixNotFound) => "NoSuchReferenceException",
        (Kind::NotFound, _) => "NotFoundException",
        (Kind::Conflict, Code::AlreadyExists) => "AlreadyExistsException",
        (Kind::Conflict, Code::NamespaceNotEmpty) => "NamespaceNotEmptyException",
        (Kind::Conflict, _) => "CommitFailedException",
        (Kind::BadRequest, _) => "BadRequestException",
        (Kind::Unauthenticated, _) => "NotAuthorizedException",
        (Kind::Forbidden, _) => "ForbiddenException",
        (Kind::Unprocessable, _) => "UnprocessableEntityException",
        (Kind::Unavailable, _) => "ServiceUnavailableException",
        (Kind::Internal, Code::CommitStateUnknown) => "CommitStateUnknownException",
        (Kind::Internal | Kind::Timeout | Kind::TooLarge, _) => "ServerError",
    }
}

impl IntoResponse for IcebergError {
    fn into_response(self) -> Response {
        let e = self.0;
        // The spec's error model has no 504 or 413: to a REST client those are server
        // errors (`ServerError`, 500), as they always were.
        let status = match e.kind {
            Kind::Timeout | Kind::TooLarge => StatusCode::INTERNAL_SERVER_ERROR,
            kind => status(kind),
        };
        let mut message = e.message.clone();
        if status.is_server_error() {
            tracing::error!(code = e.code.as_str(), message = %e.message, "Iceberg REST request failed");
            // As lh's API: internals stay in the log (a commit-state-unknown is told).
            if e.kind == Kind::Internal && e.code != Code::CommitStateUnknown {
                message = "internal server error; the server log has the details".to_string();
            }
        }
        let body = serde_json::json!({
            "error": { "message": message, "type": iceberg_type(&e), "code": status.as_u16() }
        });
        with_challenge(status, (status, Json(body)).into_response())
    }
}

/// The header naming who makes a change on a server started with `--no-auth`.
pub const USER_HEADER: &str = "x-lh-user";

/// The author of a change under `--no-auth`: the `x-lh-user` header, or `anonymous`.
pub fn author(headers: &HeaderMap) -> String {
    headers
        .get(USER_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 200)
        .unwrap_or("anonymous")
        .to_string()
}
