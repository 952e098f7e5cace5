//! The OpenAPI document, generated from the handlers and types. It is committed as
//! `control-plane/openapi.json`; a test fails when the two drift.

use axum::routing::get;
use axum::{Json, Router};
use utoipa::OpenApi;

use crate::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lh",
        description = "The lh server: a versioned catalog of Iceberg tables, and SQL on any ref."
    ),
    paths(
        super::refs::info,
        super::refs::list_refs,
        super::refs::create_ref,
        super::refs::get_ref,
        super::refs::delete_ref,
        super::refs::assign_ref,
        super::refs::protect_branch,
        super::refs::unprotect_branch,
        super::refs::log,
        super::refs::get_commit,
        super::refs::diff,
        super::refs::diff_rows,
        super::runs::lineage,
        super::refs::merge,
        super::refs::merge_preview,
        super::tables::list_tables,
        super::tables::show_table,
        super::tables::drop_table,
        super::tables::upload,
        super::tables::import_files,
        super::tables::compact,
        super::tables::expire,
        super::tables::gc,
        super::query::query,
        super::query::progress,
        super::runs::plan_run,
        super::runs::start_run,
        super::runs::list_runs,
        super::runs::get_run,
        super::runs::run_logs,
        super::runs::cancel_run,
        super::runs::rerun,
        super::audit::audit,
        super::tokens::create_token,
        super::tokens::list_tokens,
        super::tokens::revoke_token,
        super::access::list_roles,
        super::access::set_role,
        super::access::remove_role,
        super::access::list_checks,
        super::access::add_check,
        super::access::remove_check,
        super::access::list_hooks,
        super::access::add_hook,
        super::access::remove_hook,
        super::access::list_secrets,
        super::access::set_secret,
        super::access::remove_secret,
    )
)]
pub struct ApiDoc;

/// The document as pretty JSON, as committed.
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
    // The version is the crate's, not a moving build detail.
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    doc.to_pretty_json()
        .expect("the OpenAPI document serialises")
        + "\n"
}

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/api/v1/openapi.json",
        get(|| async {
            Json(serde_json::from_str::<serde_json::Value>(&document()).unwrap_or_default())
        }),
    )
}

#[cfg(test)]
mod tests {
    /// Regenerate with `make openapi`.
    #[test]
    fn committed_openapi_document_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        if std::env::var_os("LH_UPDATE_OPENAPI").is_some() {
            std::fs::write(path, super::document()).expect("write openapi.json");
            return;
        }
        assert!(
            committed == super::document(),
            "control-plane/openapi.json is out of date: run `make openapi`"
        );
    }
}
