//! Bearer tokens: made, listed and revoked by admins (`lh token ...`).

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use lh_api::{TokenCreate, TokenCreated, TokenInfo, TokenList};

use crate::auth::tokens::{NewToken, Tokens};
use crate::auth::{Identity, Role};
use crate::error::{Code, Error, Kind};
use crate::http::ApiResult;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tokens", get(list_tokens).post(create_token))
        .route("/api/v1/tokens/{id}", delete(revoke_token))
}

fn store(s: &AppState) -> Result<&Tokens, Error> {
    s.tokens.as_deref().ok_or_else(|| {
        Error::new(
            Kind::Conflict,
            Code::NotAllowed,
            "this server runs with --no-auth: it has no tokens",
        )
    })
}

/// A token as the API shows it.
fn token_info(t: crate::auth::tokens::Token) -> TokenInfo {
    TokenInfo {
        id: t.id,
        name: t.name,
        user: t.user,
        role: t.role,
        created_by: t.created_by,
        created_at: t.created_at,
        expires_at: t.expires_at,
        revoked_at: t.revoked_at,
        last_used_at: t.last_used_at,
    }
}

/// Makes a token; the answer holds its secret, which is stored nowhere.
#[utoipa::path(post, path = "/api/v1/tokens", request_body = TokenCreate,
    responses((status = 201, body = TokenCreated)))]
async fn create_token(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<TokenCreate>,
) -> ApiResult<(StatusCode, Json<TokenCreated>)> {
    let tokens = store(&s)?;
    let user = req.user.unwrap_or_else(|| identity.user.clone());
    let role = req.role.as_deref().unwrap_or(Role::Reader.as_str());
    if s.roles.get(role).await?.is_none() {
        return Err(
            Error::not_found(Code::RoleNotFound, format!("no role '{role}'"))
                .with_remedy(lh_api::remedy::Remedy::ListRoles)
                .into(),
        );
    }
    let name = req.name.unwrap_or_else(|| user.clone());
    let (token, info) = tokens
        .create(NewToken {
            name: &name,
            user: &user,
            role,
            created_by: &identity.user,
            expires_in: req.expires_in_secs.map(Duration::from_secs),
        })
        .await?;
    tracing::info!(id = %info.id, user = %info.user, role = %info.role, by = %identity.user, "token created");
    Ok((
        StatusCode::CREATED,
        Json(TokenCreated {
            token,
            info: token_info(info),
        }),
    ))
}

/// Every token, revoked and expired ones included; never a secret.
#[utoipa::path(get, path = "/api/v1/tokens", responses((status = 200, body = TokenList)))]
async fn list_tokens(State(s): State<AppState>) -> ApiResult<Json<TokenList>> {
    Ok(Json(TokenList {
        tokens: store(&s)?
            .list()
            .await?
            .into_iter()
            .map(token_info)
            .collect(),
    }))
}

/// Revokes a token: its next request is refused.
#[utoipa::path(delete, path = "/api/v1/tokens/{id}",
    params(("id" = String, Path, description = "The token's id (not its secret)")),
    responses((status = 200, body = TokenInfo), (status = 404)))]
async fn revoke_token(
    State(s): State<AppState>,
    identity: Identity,
    Path(id): Path<String>,
) -> ApiResult<Json<TokenInfo>> {
    let info = store(&s)?.revoke(&id).await?;
    tracing::info!(id = %info.id, user = %info.user, by = %identity.user, "token revoked");
    Ok(Json(token_info(info)))
}
