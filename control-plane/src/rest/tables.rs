//! Table handlers: list, load, exists, metrics reports, commits, multi-table
//! transactions, create (staged or not), drop, rename, register. Each reads the request,
//! calls one method of the REST catalog service (`lh_tables::rest_catalog`: what is
//! checked, and every change one commit of the table service) and words the answer in
//! the spec's types.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::answer::{Answer, reserve};
use super::names::{ident_name, namespace, table_name};
use super::types::{
    Body, CommitTable, CommitTransaction, CreateTable, DropQuery, MetricsReport, Page, Params,
    Register, Rename, TableIdent, asks_for_credentials, bad_request,
};
use crate::auth::Identity;
use crate::http::IcebergResult;
use crate::query::memory::Charge;
use crate::state::AppState;
use crate::tables::commit::NewTable;
use crate::tables::rest_catalog::{Create, Loaded, TableChange};

pub async fn list_tables(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns)): Path<(String, String)>,
    Params(page): Params<Page>,
) -> IcebergResult<Json<serde_json::Value>> {
    let prefix = super::names::prefix(&prefix)?;
    let parts = namespace(&ns)?;
    let names = s
        .rest_catalog
        .tables_for(&identity, &prefix, &parts)
        .await?;
    let ids: Vec<(String, TableIdent)> = names
        .into_iter()
        .map(|name| {
            let ident = TableIdent {
                namespace: parts.clone(),
                name: name.clone(),
            };
            (name, ident)
        })
        .collect();
    let (page, next) = page.apply(ids)?;
    Ok(Json(
        serde_json::json!({ "identifiers": page, "next-page-token": next }),
    ))
}

/// A table as the spec answers it, with the storage access the caller gets.
/// `reserved`: the answer's charge, for a change already made (see [`Answer::reserved`]).
async fn answer(
    s: &AppState,
    identity: &Identity,
    headers: &HeaderMap,
    t: Loaded,
    reserved: Option<Charge>,
) -> IcebergResult<Response> {
    let storage = s
        .vending
        .storage_for(identity, asks_for_credentials(headers));
    let answer = Answer {
        size: s
            .tables
            .metadata_size(t.location.as_deref(), &t.metadata)
            .await?,
        location: t.location,
        metadata: t.metadata,
        config: Some(storage.config),
        storage_credentials: storage
            .credentials
            .into_iter()
            .map(|c| serde_json::json!({ "prefix": c.prefix, "config": c.config }))
            .collect(),
        reserved,
    };
    Ok(s.metadata_answers
        .respond(s.queries.answer_memory(), &identity.user, answer)
        .await?)
}

pub async fn load_table(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    headers: HeaderMap,
    identity: Identity,
) -> IcebergResult<Response> {
    let prefix = super::names::prefix(&prefix)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    let t = s.rest_catalog.load_for(&identity, &prefix, &name).await?;
    answer(&s, &identity, &headers, t, None).await
}

pub async fn table_exists(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> IcebergResult<StatusCode> {
    let prefix = super::names::prefix(&prefix)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    s.rest_catalog.exists_for(&identity, &prefix, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A client's scan or commit report (Java clients send one after each scan): logged,
/// for the table at the ref.
pub async fn report_metrics(
    State(s): State<AppState>,
    identity: Identity,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    Body(report): Body<MetricsReport>,
) -> IcebergResult<StatusCode> {
    let prefix = super::names::prefix(&prefix)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    s.rest_catalog
        .report_for(
            &identity,
            &prefix,
            &name,
            &report.report_type,
            report.snapshot_id,
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn change(c: CommitTable) -> TableChange {
    TableChange {
        requirements: c.requirements,
        updates: c.updates,
    }
}

pub async fn commit_table(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    identity: Identity,
    Body(c): Body<CommitTable>,
) -> IcebergResult<Response> {
    let prefix = super::names::prefix(&prefix)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    // Its answer holds about what the table's metadata does now and what the change
    // adds, which is about what the request says (the forty-first review: reserving
    // only the metadata as it was let one writer's fourteen unread answers of 7.6 MB
    // schemas hold 1.6 times the whole answer memory, and every other load was 503).
    let now = match s.rest_catalog.load_for(&identity, &prefix, &name).await {
        Ok(t) => s
            .tables
            .metadata_size(t.location.as_deref(), &t.metadata)
            .await
            .unwrap_or(0),
        Err(_) => 0,
    };
    let adds = serde_json::to_vec(&c.updates).map_or(0, |v| v.len() as u64);
    let reserved = reserve(s.queries.answer_memory(), &identity.user, now + adds)?;
    let t = s
        .rest_catalog
        .commit_for(&identity, &prefix, &name, change(c))
        .await?;
    let answer = Answer {
        size: s
            .tables
            .metadata_size(t.location.as_deref(), &t.metadata)
            .await?,
        location: t.location,
        metadata: t.metadata,
        config: None,
        storage_credentials: Vec::new(),
        reserved: Some(reserved),
    };
    Ok(s.metadata_answers
        .respond(s.queries.answer_memory(), &identity.user, answer)
        .await?)
}

/// A multi-table transaction: all the tables' changes land in one lh commit, or none do.
pub async fn commit_transaction(
    State(s): State<AppState>,
    Path(prefix): Path<String>,
    identity: Identity,
    Body(req): Body<CommitTransaction>,
) -> IcebergResult<StatusCode> {
    let prefix = super::names::prefix(&prefix)?;
    let mut changes = Vec::new();
    for c in req.table_changes {
        let id = c
            .identifier
            .as_ref()
            .ok_or_else(|| bad_request("every table change of a transaction names its table"))?;
        changes.push((ident_name(id)?, change(c)));
    }
    s.rest_catalog
        .transaction_for(&identity, &prefix, changes)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn create_table(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
    headers: HeaderMap,
    identity: Identity,
    Body(req): Body<CreateTable>,
) -> IcebergResult<Response> {
    let prefix = super::names::prefix(&prefix)?;
    let parts = namespace(&ns)?;
    let name = table_name(&parts, &req.name)?;
    // Its answer holds about what the request does.
    let size = serde_json::to_vec(&(&req.schema, &req.partition_spec, &req.properties))
        .map_or(0, |v| v.len() as u64);
    let reserved = reserve(s.queries.answer_memory(), &identity.user, 4096 + size)?;
    let create = Create {
        table: NewTable {
            location: req.location,
            schema: req.schema,
            partition_spec: req.partition_spec,
            sort_order: req.write_order,
            properties: req.properties,
        },
        stage: req.stage_create,
    };
    let t = s
        .rest_catalog
        .create_for(&identity, &prefix, &parts, &name, create)
        .await?;
    answer(&s, &identity, &headers, t, Some(reserved)).await
}

/// Drops a table from the branch. Its files stay, purge or not: other refs and history
/// still read them (an lh commit can always be travelled back to).
pub async fn drop_table(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    identity: Identity,
    Params(q): Params<DropQuery>,
) -> IcebergResult<StatusCode> {
    let prefix = super::names::prefix(&prefix)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    let purge = match q
        .purge_requested
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => {
            return Err(bad_request(format!("purgeRequested is true or false, not '{v}'")).into());
        }
    };
    s.rest_catalog
        .drop_for(&identity, &prefix, &name, purge)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn rename_table(
    State(s): State<AppState>,
    Path(prefix): Path<String>,
    identity: Identity,
    Body(req): Body<Rename>,
) -> IcebergResult<StatusCode> {
    let prefix = super::names::prefix(&prefix)?;
    let from = ident_name(&req.source)?;
    let to = ident_name(&req.destination)?;
    s.rest_catalog
        .rename_for(&identity, &prefix, &from, &to, &req.destination.namespace)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn register_table(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
    headers: HeaderMap,
    identity: Identity,
    Body(req): Body<Register>,
) -> IcebergResult<Response> {
    let prefix = super::names::prefix(&prefix)?;
    let name = table_name(&namespace(&ns)?, &req.name)?;
    let reserved = reserve(s.queries.answer_memory(), &identity.user, 4096)?;
    let t = s
        .rest_catalog
        .register_for(&identity, &prefix, &name, &req.metadata_location)
        .await?;
    answer(&s, &identity, &headers, t, Some(reserved)).await
}
