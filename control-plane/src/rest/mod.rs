//! The Iceberg REST catalog (`/iceberg/v1`), with an lh ref as the catalog's prefix, so
//! that any engine reads (and on a branch, writes) any branch, tag or commit.
//!
//! `GET /iceberg/v1/config?warehouse=<ref>` answers `defaults.prefix=<ref>`; every other
//! route is under `/iceberg/v1/{prefix}/`. The handlers are thin adapters: a table's
//! metadata is the file its lh pointer names at the ref (the table service reads it),
//! and every change (commit, multi-table transaction, create, drop, rename, register)
//! is one commit of the table service (`tables/commit.rs`), the same path lh's own
//! writes take. Namespaces are the namespace store's (`namespaces.rs`). Tags and
//! `branch@commit` are read-only. Errors follow the spec's error model
//! (`crate::http::IcebergError`).
//!
//! Here: the router. `oauth.rs` exchanges client credentials for a token; `config.rs`, `namespaces.rs` and `tables.rs` hold the handlers,
//! `names.rs` how paths name refs, namespaces and tables, `types.rs` the wire types.

mod answer;
mod config;
mod names;
mod namespaces;
mod oauth;
mod tables;
mod types;

pub use answer::MetadataAnswers;

use axum::Router;
use axum::routing::{get, post};

use crate::state::AppState;

/// Every route of the Iceberg REST catalog.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/iceberg/v1/config", get(config::config))
        .route("/iceberg/v1/oauth/tokens", post(oauth::tokens))
        .route(
            "/iceberg/v1/{prefix}/namespaces",
            get(namespaces::list_namespaces).post(namespaces::create_namespace),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}",
            get(namespaces::load_namespace)
                .head(namespaces::namespace_exists)
                .delete(namespaces::drop_namespace),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/properties",
            post(namespaces::update_properties),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/tables",
            get(tables::list_tables).post(tables::create_table),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}",
            get(tables::load_table)
                .head(tables::table_exists)
                .post(tables::commit_table)
                .delete(tables::drop_table),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/register",
            post(tables::register_table),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}/metrics",
            post(tables::report_metrics),
        )
        .route(
            "/iceberg/v1/{prefix}/tables/rename",
            post(tables::rename_table),
        )
        .route(
            "/iceberg/v1/{prefix}/transactions/commit",
            post(tables::commit_transaction),
        )
}
