//! The spec's token endpoint (`POST /iceberg/v1/oauth/tokens`), for clients that
//! exchange client credentials for a bearer token before anything else (pyiceberg's
//! `credential`, Spark's `credential`): the client secret is an lh token, and the
//! answer is that same token, to send as `Authorization: Bearer`. Clients that take a
//! token directly (`token`) never call it. Its errors follow OAuth 2 (RFC 6749 5.2).

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Form, Json};

use crate::state::AppState;

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": error, "error_description": description })),
    )
        .into_response()
}

pub async fn tokens(
    State(s): State<AppState>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let Some(tokens) = &s.tokens else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "this server runs with --no-auth: it takes requests without a token",
        );
    };
    match form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => {}
        Some(other) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                &format!(
                    "grant type '{}' is not supported: use client_credentials with an lh token as the client secret",
                    other.chars().take(100).collect::<String>()
                ),
            );
        }
        None => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "grant_type is missing",
            );
        }
    }
    let Some(secret) = form.get("client_secret") else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "client_secret is missing (it is an lh token)",
        );
    };
    match tokens.authenticate(secret.trim()).await {
        Ok(identity) => {
            tracing::debug!(user = %identity.user, "token exchanged");
            Json(serde_json::json!({
                "access_token": secret.trim(),
                "token_type": "bearer",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            }))
            .into_response()
        }
        Err(e) if e.kind == crate::error::Kind::Unauthenticated => oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "the client secret is not a valid lh token (unknown, revoked, expired or malformed)",
        ),
        Err(e) => crate::http::IcebergError(e).into_response(),
    }
}
