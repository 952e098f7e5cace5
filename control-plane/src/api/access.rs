//! Who may do what, as admins set it: roles (`lh role`), the checks protected branches
//! require (`lh check`) and the webhooks told of merges (`lh hook`).

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, put};
use axum::{Json, Router};
use lh_api::{
    CheckCreate, CheckInfo, CheckList, HookCreate, HookInfo, HookList, RoleInfo, RoleList, RoleSet,
    SecretInfo, SecretList, SecretSet,
};

use crate::auth::Identity;
use crate::error::{Code, Error};
use crate::http::ApiResult;
use crate::merges::checks::{CheckDef, EXPECTATIONS_TIMEOUT, WEBHOOK_TIMEOUT};
use crate::merges::hooks::HookDef;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/roles", get(list_roles))
        .route("/api/v1/roles/{name}", put(set_role).delete(remove_role))
        .route("/api/v1/checks", get(list_checks).post(add_check))
        .route("/api/v1/checks/{name}", delete(remove_check))
        .route("/api/v1/hooks", get(list_hooks).post(add_hook))
        .route("/api/v1/hooks/{name}", delete(remove_hook))
        .route("/api/v1/secrets", get(list_secrets))
        .route(
            "/api/v1/secrets/{name}",
            put(set_secret).delete(remove_secret),
        )
}

/// A secret as the API shows it.
fn secret_info(s: crate::auth::secrets::Secret) -> SecretInfo {
    SecretInfo {
        name: s.name,
        version: s.version,
        refs: s.refs,
        updated_by: s.updated.by,
        updated_at: s.updated.at.to_rfc3339(),
    }
}

/// A role as the API shows it.
fn role_info(r: crate::auth::roles::RoleDef) -> RoleInfo {
    let (updated_by, updated_at) = match r.updated {
        Some(u) => (Some(u.by), Some(u.at.to_rfc3339())),
        None => (None, None),
    };
    RoleInfo {
        name: r.name,
        builtin: r.builtin,
        grants: r.grants,
        updated_by,
        updated_at,
    }
}

/// Every pipeline secret's name and version (never a value).
#[utoipa::path(get, path = "/api/v1/secrets", responses((status = 200, body = SecretList)))]
async fn list_secrets(State(s): State<AppState>) -> ApiResult<Json<SecretList>> {
    Ok(Json(SecretList {
        secrets: s
            .secrets
            .list()
            .await?
            .into_iter()
            .map(secret_info)
            .collect(),
    }))
}

/// Sets a secret (a new version); the value is never answered back.
#[utoipa::path(put, path = "/api/v1/secrets/{name}", params(("name" = String, Path)),
    request_body = SecretSet, responses((status = 200, body = SecretInfo), (status = 400, body = lh_api::ErrorBody)))]
async fn set_secret(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    Json(req): Json<SecretSet>,
) -> ApiResult<Json<SecretInfo>> {
    let refs = req.refs.as_deref().unwrap_or("*");
    let info = s
        .secrets
        .set(&name, &req.value, refs, &identity.user)
        .await?;
    tracing::info!(secret = %name, version = info.version, by = %identity.user, "secret set");
    Ok(Json(secret_info(info)))
}

/// Removes a secret.
#[utoipa::path(delete, path = "/api/v1/secrets/{name}", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = lh_api::ErrorBody)))]
async fn remove_secret(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    s.secrets.remove(&name).await?;
    tracing::info!(secret = %name, by = %identity.user, "secret removed");
    Ok(StatusCode::NO_CONTENT)
}

/// Every role: the built-in ones, then those admins defined.
#[utoipa::path(get, path = "/api/v1/roles", responses((status = 200, body = RoleList)))]
async fn list_roles(State(s): State<AppState>) -> ApiResult<Json<RoleList>> {
    Ok(Json(RoleList {
        roles: s.roles.list().await?.into_iter().map(role_info).collect(),
    }))
}

/// Defines a role, or replaces its grants (takes effect at the next request).
#[utoipa::path(put, path = "/api/v1/roles/{name}", params(("name" = String, Path)),
    request_body = RoleSet, responses((status = 200, body = RoleInfo), (status = 400, body = lh_api::ErrorBody)))]
async fn set_role(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    Json(req): Json<RoleSet>,
) -> ApiResult<Json<RoleInfo>> {
    let info = s.roles.set(&name, &req.grants, &identity.user).await?;
    tracing::info!(role = %name, grants = ?info.grants, by = %identity.user, "role set");
    Ok(Json(role_info(info)))
}

/// Removes a role no live token has.
#[utoipa::path(delete, path = "/api/v1/roles/{name}", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = lh_api::ErrorBody), (status = 409, body = lh_api::ErrorBody)))]
async fn remove_role(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    s.roles.remove(&name).await?;
    tracing::info!(role = %name, by = %identity.user, "role removed");
    Ok(StatusCode::NO_CONTENT)
}

/// Every check, with the branches requiring it (never a secret).
#[utoipa::path(get, path = "/api/v1/checks", responses((status = 200, body = CheckList)))]
async fn list_checks(State(s): State<AppState>) -> ApiResult<Json<CheckList>> {
    Ok(Json(CheckList {
        checks: s
            .merger
            .checks
            .list()
            .await?
            .into_iter()
            .map(check_info)
            .collect(),
    }))
}

fn check_info(c: CheckDef) -> CheckInfo {
    CheckInfo {
        name: c.name,
        kind: c.kind,
        target: c.target,
        timeout_secs: c.timeout.as_secs(),
        signed: c.signed,
        branches: c.branches,
        updated_by: c.updated_by,
        updated_at: c.updated_at,
    }
}

/// Adds a check (or replaces one of that name): a webhook, or an uploaded project's
/// expectations.
#[utoipa::path(post, path = "/api/v1/checks", request_body = CheckCreate,
    responses((status = 201, body = CheckInfo), (status = 400, body = lh_api::ErrorBody)))]
async fn add_check(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<CheckCreate>,
) -> ApiResult<(StatusCode, Json<CheckInfo>)> {
    let (kind, target, default_timeout) = match (&req.webhook, &req.upload) {
        (Some(url), None) => {
            crate::merges::hooks::check_url(url)?;
            ("webhook", url.clone(), WEBHOOK_TIMEOUT)
        }
        (None, Some(upload)) => {
            if req.secret.is_some() {
                return Err(Error::bad_request(
                    Code::InvalidArgument,
                    "a secret signs webhook requests: an expectations check has none",
                )
                .into());
            }
            (
                "expectations",
                super::runs::code_of(&s, upload).await?,
                EXPECTATIONS_TIMEOUT,
            )
        }
        _ => {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                "a check is either a webhook (--webhook URL) or a project's expectations (--expectations DIR)",
            )
            .into());
        }
    };
    let timeout = req.timeout_secs.map_or(default_timeout, |t| {
        Duration::from_secs(t.clamp(1, 6 * 3600))
    });
    s.merger
        .checks
        .put(
            &req.name,
            kind,
            &target,
            req.secret.as_deref(),
            timeout,
            &identity.user,
        )
        .await?;
    tracing::info!(check = %req.name, kind, by = %identity.user, "check added");
    let info = s
        .merger
        .checks
        .list()
        .await?
        .into_iter()
        .find(|c| c.name == req.name)
        .ok_or_else(|| Error::internal("the check just added is gone"))?;
    Ok((StatusCode::CREATED, Json(check_info(info))))
}

/// Removes a check no branch requires.
#[utoipa::path(delete, path = "/api/v1/checks/{name}", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = lh_api::ErrorBody), (status = 409, body = lh_api::ErrorBody)))]
async fn remove_check(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    s.merger.checks.remove(&name).await?;
    tracing::info!(check = %name, by = %identity.user, "check removed");
    Ok(StatusCode::NO_CONTENT)
}

/// Every post-merge webhook (never a secret).
#[utoipa::path(get, path = "/api/v1/hooks", responses((status = 200, body = HookList)))]
async fn list_hooks(State(s): State<AppState>) -> ApiResult<Json<HookList>> {
    Ok(Json(HookList {
        hooks: s
            .merger
            .hooks
            .list()
            .await?
            .into_iter()
            .map(hook_info)
            .collect(),
    }))
}

fn hook_info(h: HookDef) -> HookInfo {
    HookInfo {
        name: h.name,
        url: h.url,
        refs: h.refs,
        signed: h.signed,
        updated_by: h.updated_by,
        updated_at: h.updated_at,
    }
}

/// Adds a post-merge webhook (or replaces one of that name).
#[utoipa::path(post, path = "/api/v1/hooks", request_body = HookCreate,
    responses((status = 201, body = HookInfo), (status = 400, body = lh_api::ErrorBody)))]
async fn add_hook(
    State(s): State<AppState>,
    identity: Identity,
    Json(req): Json<HookCreate>,
) -> ApiResult<(StatusCode, Json<HookInfo>)> {
    let info = s
        .merger
        .hooks
        .put(
            &req.name,
            &req.url,
            req.refs.as_deref().unwrap_or("*"),
            req.secret.as_deref(),
            &identity.user,
        )
        .await?;
    tracing::info!(hook = %req.name, by = %identity.user, "hook added");
    Ok((StatusCode::CREATED, Json(hook_info(info))))
}

/// Removes a post-merge webhook.
#[utoipa::path(delete, path = "/api/v1/hooks/{name}", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = lh_api::ErrorBody)))]
async fn remove_hook(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    s.merger.hooks.remove(&name).await?;
    tracing::info!(hook = %name, by = %identity.user, "hook removed");
    Ok(StatusCode::NO_CONTENT)
}
