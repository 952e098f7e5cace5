//! What every HTTP handler can reach: the services the server is made of, built once
//! at start-up (`server::state`) and shared by lh's API (`api/`) and the Iceberg REST
//! catalog (`rest/`), which know nothing of each other.

use std::sync::Arc;

use lh_catalog::Catalog;

use crate::namespaces::Namespaces;
use crate::query::QueryEngine;
use crate::runs::RunService;
use crate::tables::Tables;
use crate::tables::write::ImportContext;

#[derive(Clone)]
pub struct AppState {
    pub catalog: Catalog,
    /// The table service: reads, writes and every commit of a table.
    pub tables: Arc<Tables>,
    pub queries: Arc<QueryEngine>,
    pub import: ImportContext,
    /// Uploads waiting for their import or run, seen by every server of the warehouse.
    pub uploads: crate::tables::staging::Staging,
    /// The largest file an upload may stage.
    pub max_upload_bytes: u64,
    pub runs: Arc<RunService>,
    /// Branches, tags, history, diffs and merges.
    pub refs: Arc<crate::runs::refs::Refs>,
    /// The Iceberg REST catalog's namespaces.
    pub namespaces: Arc<Namespaces>,
    /// The Iceberg REST catalog: namespaces and tables at a ref, for a caller.
    pub rest_catalog: Arc<crate::tables::rest_catalog::RestCatalog>,
    /// The Iceberg REST catalog's table answers being sent.
    pub metadata_answers: Arc<crate::rest::MetadataAnswers>,
    pub info: lh_api::ServerInfo,
    /// The protected branches (also checked by the table service's commits).
    pub protected: Arc<crate::auth::protected::ProtectedBranches>,
    /// The audit log of changes.
    pub audit: Arc<crate::auth::audit::AuditLog>,
    /// Bearer tokens; `None` with `--no-auth`.
    pub tokens: Option<Arc<crate::auth::tokens::Tokens>>,
    /// How branches take each other's changes: grants, required checks, hooks.
    pub merger: Arc<crate::merges::Merger>,
    /// What secrets are encrypted with at rest.
    pub key: Arc<crate::auth::key::ServerKey>,
    /// Pipeline secrets, sealed with `key`.
    pub secrets: Arc<crate::auth::secrets::Secrets>,
    /// The roles tokens name.
    pub roles: Arc<crate::auth::roles::Roles>,
    /// Who the Iceberg REST catalog gives the warehouse's S3 key.
    pub vending: crate::tables::vending::Vending,
    /// What every request is checked against first (`auth::guard`).
    pub guard: Arc<crate::auth::guard::Guard>,
}
