//! The Iceberg REST catalog (`/iceberg/v1`), with an lh ref as the catalog's prefix, so
//! that any engine reads (and on a branch, writes) any branch, tag or commit.
//!
//! `GET /iceberg/v1/config?warehouse=<ref>` answers `defaults.prefix=<ref>`; every other
//! route is under `/iceberg/v1/{prefix}/`. A table's metadata is the file its lh pointer
//! names at the ref. A commit checks the client's requirements against the table at the
//! branch head, applies its updates, writes the next metadata file, and makes one lh
//! commit that expects the pointer it started from: a table that moved meanwhile is the
//! spec's 409, which clients retry. A multi-table transaction is one lh commit. Tags and
//! `branch@commit` are read-only. Errors follow the spec's error model.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use iceberg::spec::{
    FormatVersion, Schema, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec,
};
use iceberg::{TableRequirement, TableUpdate};
use lh_catalog::{Commit, CommitMeta, TableOp, TablePointer};
use serde::{Deserialize, Serialize};

use crate::api::AppState;
use crate::error::{Error, Kind};

/// A REST catalog error, in the spec's model.
pub struct RestError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

type RestResult<T> = Result<T, RestError>;

fn rest(status: StatusCode, kind: &'static str, message: impl Into<String>) -> RestError {
    RestError {
        status,
        kind,
        message: message.into(),
    }
}

impl From<Error> for RestError {
    fn from(e: Error) -> Self {
        let (status, kind) = match (e.kind, e.code) {
            (Kind::NotFound, "table_not_found") => (StatusCode::NOT_FOUND, "NoSuchTableException"),
            (Kind::NotFound, _) => (StatusCode::NOT_FOUND, "NotFoundException"),
            (Kind::Conflict, "already_exists") => (StatusCode::CONFLICT, "AlreadyExistsException"),
            (Kind::Conflict, _) => (StatusCode::CONFLICT, "CommitFailedException"),
            (Kind::BadRequest, _) => (StatusCode::BAD_REQUEST, "BadRequestException"),
            (Kind::Unavailable, _) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailableException",
            ),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "ServerError"),
        };
        if status.is_server_error() {
            tracing::error!(code = e.code, message = %e.message, "Iceberg REST request failed");
        }
        rest(status, kind, e.message)
    }
}

impl From<lh_catalog::Error> for RestError {
    fn from(e: lh_catalog::Error) -> Self {
        Error::from(e).into()
    }
}

impl From<iceberg::Error> for RestError {
    fn from(e: iceberg::Error) -> Self {
        rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            format!("{e}"),
        )
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": { "message": self.message, "type": self.kind, "code": self.status.as_u16() }
        });
        (self.status, Json(body)).into_response()
    }
}

/// A JSON body whose rejection (malformed JSON, an unknown requirement or update, a
/// missing field) is the spec's 400, not axum's plain-text 422.
struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = RestError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(r) => Err(rest(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                r.body_text(),
            )),
        }
    }
}

/// Query parameters, rejected in the spec's model too.
struct Params<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(Params(v)),
            Err(r) => Err(rest(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                r.body_text(),
            )),
        }
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/iceberg/v1/config", get(config))
        .route(
            "/iceberg/v1/{prefix}/namespaces",
            get(list_namespaces).post(create_namespace),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}",
            get(load_namespace)
                .head(namespace_exists)
                .delete(drop_namespace),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/properties",
            post(update_properties),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/tables",
            get(list_tables).post(create_table),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}",
            get(load_table)
                .head(table_exists)
                .post(commit_table)
                .delete(drop_table),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/register",
            post(register_table),
        )
        .route(
            "/iceberg/v1/{prefix}/namespaces/{ns}/tables/{table}/metrics",
            post(report_metrics),
        )
        .route("/iceberg/v1/{prefix}/tables/rename", post(rename_table))
        .route(
            "/iceberg/v1/{prefix}/transactions/commit",
            post(commit_transaction),
        )
}

// ------------------------------------------------------------------ wire types

#[derive(Debug, Serialize, Deserialize)]
struct TableIdent {
    namespace: Vec<String>,
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CreateNamespace {
    namespace: Vec<String>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct UpdateProperties {
    #[serde(default)]
    removals: Vec<String>,
    #[serde(default)]
    updates: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CreateTable {
    name: String,
    #[serde(default)]
    location: Option<String>,
    schema: Schema,
    #[serde(default)]
    partition_spec: Option<UnboundPartitionSpec>,
    #[serde(default)]
    write_order: Option<SortOrder>,
    #[serde(default)]
    stage_create: bool,
    #[serde(default)]
    properties: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct CommitTable {
    #[serde(default)]
    identifier: Option<TableIdent>,
    #[serde(default)]
    requirements: Vec<TableRequirement>,
    #[serde(default)]
    updates: Vec<TableUpdate>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CommitTransaction {
    table_changes: Vec<CommitTable>,
}

#[derive(Debug, Deserialize)]
struct Rename {
    source: TableIdent,
    destination: TableIdent,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Register {
    name: String,
    metadata_location: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
struct LoadTableResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata_location: Option<String>,
    metadata: serde_json::Value,
    config: BTreeMap<String, String>,
}

/// The table property that tells engines' maintenance not to delete files: Spark's
/// `DROP TABLE ... PURGE`, `expire_snapshots` and `remove_orphan_files` (and pyiceberg's
/// purge) check it before deleting anything on the client.
const GC_ENABLED: &str = "gc.enabled";

/// Table metadata as clients get it: with `gc.enabled=false`, because a table's files
/// are shared by every ref and every older commit that sees it, so no client may delete
/// them; `lh gc` removes what nothing reads.
fn served(metadata: &TableMetadata) -> serde_json::Value {
    let mut v = serde_json::to_value(metadata).unwrap_or(serde_json::Value::Null);
    if let Some(m) = v.as_object_mut() {
        let props = m
            .entry("properties")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(p) = props.as_object_mut() {
            p.insert(GC_ENABLED.into(), "false".into());
        }
    }
    v
}

// ------------------------------------------------------------------ refs and names

/// The ref a prefix names, and whether writes are allowed there.
struct At {
    expr: String,
    commit: Commit,
    writable: bool,
}

async fn at(s: &AppState, prefix: &str) -> RestResult<At> {
    let expr = prefix.to_string();
    let resolved = s.catalog.resolve(&expr).await.map_err(|e| {
        let status = match e.kind() {
            lh_catalog::ErrorKind::RefNotFound => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        };
        let kind = if status == StatusCode::NOT_FOUND {
            "NoSuchReferenceException"
        } else {
            "BadRequestException"
        };
        rest(
            status,
            kind,
            format!("{} (the catalog prefix is an lh ref)", e.message()),
        )
    })?;
    Ok(At {
        expr,
        writable: resolved.is_branch_head,
        commit: resolved.commit,
    })
}

fn writable(a: &At) -> RestResult<()> {
    if a.writable {
        return Ok(());
    }
    Err(rest(
        StatusCode::FORBIDDEN,
        "ForbiddenException",
        format!(
            "'{}' is read-only (a tag or a fixed commit); write to a branch",
            a.expr
        ),
    ))
}

/// A namespace as a path parameter: levels separated by the unit separator (0x1F).
fn namespace(raw: &str) -> RestResult<Vec<String>> {
    let parts: Vec<String> = raw.split('\u{1f}').map(String::from).collect();
    let joined = parts.join(".");
    lh_catalog::names::validate_namespace(&joined).map_err(|e| {
        rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            e.to_string(),
        )
    })?;
    Ok(parts)
}

fn table_name(ns: &[String], table: &str) -> RestResult<String> {
    let name = format!("{}.{table}", ns.join("."));
    lh_catalog::names::validate_table_name(&name).map_err(|e| {
        rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            e.to_string(),
        )
    })?;
    Ok(name)
}

fn ident_name(id: &TableIdent) -> RestResult<String> {
    table_name(&id.namespace, &id.name)
}

/// Every namespace at a ref: the created ones, and every prefix of a table's namespace.
async fn namespaces_at(
    s: &AppState,
    commit: &Commit,
) -> RestResult<BTreeMap<String, BTreeMap<String, String>>> {
    let mut out = s.runs.store.namespaces().await?;
    for t in s.catalog.tables_in(commit, None).await? {
        let parts: Vec<&str> = t.name.split('.').collect();
        for i in 1..parts.len() {
            out.entry(parts[..i].join(".")).or_default();
        }
    }
    Ok(out)
}

fn no_namespace(ns: &str) -> RestError {
    rest(
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
        format!("namespace '{ns}' does not exist"),
    )
}

fn no_table(name: &str, at: &str) -> RestError {
    rest(
        StatusCode::NOT_FOUND,
        "NoSuchTableException",
        format!("table '{name}' does not exist at '{at}'"),
    )
}

// ------------------------------------------------------------------ config and namespaces

#[derive(Debug, Deserialize)]
struct ConfigQuery {
    warehouse: Option<String>,
}

/// The catalog's configuration: the warehouse (an lh ref) becomes the prefix.
async fn config(
    State(s): State<AppState>,
    Params(q): Params<ConfigQuery>,
) -> RestResult<Json<serde_json::Value>> {
    let warehouse = q
        .warehouse
        .unwrap_or_else(|| lh_catalog::DEFAULT_BRANCH.to_string());
    at(&s, &warehouse).await?;
    let prefix = url::form_urlencoded::byte_serialize(warehouse.as_bytes()).collect::<String>();
    let endpoints = [
        "GET /v1/{prefix}/namespaces",
        "POST /v1/{prefix}/namespaces",
        "GET /v1/{prefix}/namespaces/{namespace}",
        "HEAD /v1/{prefix}/namespaces/{namespace}",
        "DELETE /v1/{prefix}/namespaces/{namespace}",
        "POST /v1/{prefix}/namespaces/{namespace}/properties",
        "GET /v1/{prefix}/namespaces/{namespace}/tables",
        "POST /v1/{prefix}/namespaces/{namespace}/tables",
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "POST /v1/{prefix}/namespaces/{namespace}/register",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
        "POST /v1/{prefix}/tables/rename",
        "POST /v1/{prefix}/transactions/commit",
    ];
    Ok(Json(serde_json::json!({
        "defaults": { "prefix": prefix },
        "overrides": {},
        "endpoints": endpoints,
    })))
}

#[derive(Debug, Deserialize)]
struct ParentQuery {
    parent: Option<String>,
    #[serde(flatten)]
    page: Page,
}

/// The spec's pagination of listings: without `pageToken`, everything in one answer;
/// with it (empty for the first page), at most `pageSize` entries after the token, and a
/// `next-page-token` (the last entry's key) while more remain.
#[derive(Debug, Default, Deserialize)]
struct Page {
    #[serde(rename = "pageToken")]
    token: Option<String>,
    #[serde(rename = "pageSize")]
    size: Option<String>,
}

impl Page {
    /// `items` sorted by their key.
    fn apply<T>(&self, items: Vec<(String, T)>) -> RestResult<(Vec<T>, Option<String>)> {
        let size = match self.size.as_deref() {
            None => usize::MAX,
            Some(v) => match v.parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(rest(
                        StatusCode::BAD_REQUEST,
                        "BadRequestException",
                        format!("pageSize '{v}' is not a positive integer"),
                    ));
                }
            },
        };
        let Some(token) = &self.token else {
            return Ok((items.into_iter().map(|(_, v)| v).collect(), None));
        };
        let mut rest_of: Vec<(String, T)> = items
            .into_iter()
            .filter(|(k, _)| token.is_empty() || k.as_str() > token.as_str())
            .collect();
        let next = (rest_of.len() > size).then(|| rest_of[size - 1].0.clone());
        rest_of.truncate(size);
        Ok((rest_of.into_iter().map(|(_, v)| v).collect(), next))
    }
}

async fn list_namespaces(
    State(s): State<AppState>,
    Path(prefix): Path<String>,
    Params(q): Params<ParentQuery>,
) -> RestResult<Json<serde_json::Value>> {
    let a = at(&s, &prefix).await?;
    let all = namespaces_at(&s, &a.commit).await?;
    let parent: Vec<String> = match &q.parent {
        Some(p) if !p.is_empty() => namespace(p)?,
        _ => Vec::new(),
    };
    if !parent.is_empty() && !all.contains_key(&parent.join(".")) {
        return Err(no_namespace(&parent.join(".")));
    }
    let children: BTreeSet<Vec<String>> = all
        .keys()
        .map(|k| k.split('.').map(String::from).collect::<Vec<_>>())
        .filter(|parts| parts.len() == parent.len() + 1 && parts.starts_with(&parent))
        .collect();
    let (page, next) = q.page.apply(
        children
            .into_iter()
            .map(|c| (c.last().cloned().unwrap_or_default(), c))
            .collect(),
    )?;
    Ok(Json(
        serde_json::json!({ "namespaces": page, "next-page-token": next }),
    ))
}

async fn create_namespace(
    State(s): State<AppState>,
    Path(prefix): Path<String>,
    Body(req): Body<CreateNamespace>,
) -> RestResult<Json<serde_json::Value>> {
    let a = at(&s, &prefix).await?;
    writable(&a)?;
    let name = req.namespace.join(".");
    if req.namespace.is_empty() {
        return Err(rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            "a namespace has at least one level",
        ));
    }
    lh_catalog::names::validate_namespace(&name).map_err(|e| {
        rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            e.to_string(),
        )
    })?;
    if namespaces_at(&s, &a.commit).await?.contains_key(&name)
        || !s
            .runs
            .store
            .create_namespace(&name, &req.properties)
            .await?
    {
        return Err(rest(
            StatusCode::CONFLICT,
            "AlreadyExistsException",
            format!("namespace '{name}' already exists"),
        ));
    }
    Ok(Json(
        serde_json::json!({ "namespace": req.namespace, "properties": req.properties }),
    ))
}

async fn load_namespace(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
) -> RestResult<Json<serde_json::Value>> {
    let a = at(&s, &prefix).await?;
    let parts = namespace(&ns)?;
    let all = namespaces_at(&s, &a.commit).await?;
    let props = all
        .get(&parts.join("."))
        .ok_or_else(|| no_namespace(&parts.join(".")))?;
    Ok(Json(
        serde_json::json!({ "namespace": parts, "properties": props }),
    ))
}

async fn namespace_exists(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
) -> RestResult<StatusCode> {
    let a = at(&s, &prefix).await?;
    let parts = namespace(&ns)?;
    if namespaces_at(&s, &a.commit)
        .await?
        .contains_key(&parts.join("."))
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(no_namespace(&parts.join(".")))
    }
}

async fn drop_namespace(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
) -> RestResult<StatusCode> {
    let a = at(&s, &prefix).await?;
    writable(&a)?;
    let parts = namespace(&ns)?;
    let name = parts.join(".");
    let all = namespaces_at(&s, &a.commit).await?;
    if !all.contains_key(&name) {
        return Err(no_namespace(&name));
    }
    let inside = all.keys().any(|k| k.starts_with(&format!("{name}.")))
        || !s
            .catalog
            .tables_in(&a.commit, Some(&name))
            .await?
            .is_empty();
    if inside {
        return Err(rest(
            StatusCode::CONFLICT,
            "NamespaceNotEmptyException",
            format!("namespace '{name}' is not empty at '{}'", a.expr),
        ));
    }
    s.runs.store.drop_namespace(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn update_properties(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
    Body(req): Body<UpdateProperties>,
) -> RestResult<Json<serde_json::Value>> {
    let a = at(&s, &prefix).await?;
    writable(&a)?;
    let name = namespace(&ns)?.join(".");
    let all = namespaces_at(&s, &a.commit).await?;
    let mut props = all.get(&name).cloned().ok_or_else(|| no_namespace(&name))?;
    if let Some(k) = req.removals.iter().find(|k| req.updates.contains_key(*k)) {
        return Err(rest(
            StatusCode::UNPROCESSABLE_ENTITY,
            "UnprocessableEntityException",
            format!("'{k}' is both updated and removed"),
        ));
    }
    let mut removed = Vec::new();
    let mut missing = Vec::new();
    for k in &req.removals {
        if props.remove(k).is_some() {
            removed.push(k.clone())
        } else {
            missing.push(k.clone())
        }
    }
    let updated: Vec<String> = req.updates.keys().cloned().collect();
    props.extend(req.updates);
    s.runs.store.set_namespace_properties(&name, &props).await?;
    Ok(Json(
        serde_json::json!({ "updated": updated, "removed": removed, "missing": missing }),
    ))
}

// ------------------------------------------------------------------ tables

async fn list_tables(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
    Params(page): Params<Page>,
) -> RestResult<Json<serde_json::Value>> {
    let a = at(&s, &prefix).await?;
    let parts = namespace(&ns)?;
    let name = parts.join(".");
    if !namespaces_at(&s, &a.commit).await?.contains_key(&name) {
        return Err(no_namespace(&name));
    }
    let mut ids: Vec<(String, TableIdent)> = s
        .catalog
        .tables_in(&a.commit, Some(&name))
        .await?
        .into_iter()
        .filter_map(|t| {
            let rest = t.name.strip_prefix(&format!("{name}."))?;
            (!rest.contains('.')).then(|| {
                let ident = TableIdent {
                    namespace: parts.clone(),
                    name: rest.to_string(),
                };
                (rest.to_string(), ident)
            })
        })
        .collect();
    ids.sort_by(|a, b| a.0.cmp(&b.0));
    let (page, next) = page.apply(ids)?;
    Ok(Json(
        serde_json::json!({ "identifiers": page, "next-page-token": next }),
    ))
}

fn loaded(location: Option<String>, metadata: TableMetadata) -> Json<LoadTableResult> {
    Json(LoadTableResult {
        metadata_location: location,
        metadata: served(&metadata),
        // A local warehouse needs no credential and no setting: locations are absolute
        // `file://` URLs that every client's file IO opens. The config stays empty on
        // purpose: DuckDB's iceberg extension (1.5.5) takes any entry as vended S3
        // credentials and then fails for want of a region (measured; tested).
        config: BTreeMap::new(),
    })
}

async fn load_table(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> RestResult<Json<LoadTableResult>> {
    let a = at(&s, &prefix).await?;
    let name = table_name(&namespace(&ns)?, &table)?;
    let t = s
        .tables
        .load(&a.commit, &name)
        .await?
        .ok_or_else(|| no_table(&name, &a.expr))?;
    Ok(loaded(
        Some(t.pointer.metadata_location.clone()),
        (*t.metadata).clone(),
    ))
}

async fn table_exists(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> RestResult<StatusCode> {
    let a = at(&s, &prefix).await?;
    let name = table_name(&namespace(&ns)?, &table)?;
    match s.catalog.table_in(&a.commit, &name).await? {
        Some(_) => Ok(StatusCode::NO_CONTENT),
        None => Err(no_table(&name, &a.expr)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct MetricsReport {
    report_type: String,
    #[serde(default)]
    snapshot_id: Option<i64>,
}

/// A client's scan or commit report (Java clients send one after each scan): logged,
/// for the table at the ref.
async fn report_metrics(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    Body(report): Body<MetricsReport>,
) -> RestResult<StatusCode> {
    let a = at(&s, &prefix).await?;
    let name = table_name(&namespace(&ns)?, &table)?;
    if s.catalog.table_in(&a.commit, &name).await?.is_none() {
        return Err(no_table(&name, &a.expr));
    }
    if !matches!(report.report_type.as_str(), "scan-report" | "commit-report") {
        return Err(rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            format!(
                "unknown report-type '{}': expected scan-report or commit-report",
                report.report_type
            ),
        ));
    }
    tracing::debug!(table = %name, at = %a.expr, report = %report.report_type,
        snapshot = ?report.snapshot_id, "iceberg metrics report");
    Ok(StatusCode::NO_CONTENT)
}

/// A REST commit's metadata: its author is the `x-lh-user` header (pyiceberg sends it
/// with the catalog property `header.x-lh-user`), or `iceberg-rest`.
fn meta(headers: &HeaderMap, message: String) -> CommitMeta {
    CommitMeta::new(crate::api::author_or(headers, "iceberg-rest"), message)
        .with_property("lh.operation", "iceberg-rest")
}

fn pointer_of(location: &str, m: &TableMetadata) -> TablePointer {
    TablePointer {
        metadata_location: location.to_string(),
        table_uuid: m.uuid().to_string(),
        snapshot_id: m.current_snapshot_id(),
    }
}

async fn create_table(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
    headers: HeaderMap,
    Body(req): Body<CreateTable>,
) -> RestResult<Json<LoadTableResult>> {
    let a = at(&s, &prefix).await?;
    writable(&a)?;
    let parts = namespace(&ns)?;
    if !namespaces_at(&s, &a.commit)
        .await?
        .contains_key(&parts.join("."))
    {
        return Err(no_namespace(&parts.join(".")));
    }
    let name = table_name(&parts, &req.name)?;
    if s.catalog.table_in(&a.commit, &name).await?.is_some() {
        return Err(rest(
            StatusCode::CONFLICT,
            "AlreadyExistsException",
            format!("table '{name}' already exists at '{}'", a.expr),
        ));
    }
    let uuid = uuid::Uuid::now_v7();
    let location = req
        .location
        .clone()
        .unwrap_or_else(|| s.tables.warehouse.new_table_location(&name, &uuid));
    s.tables
        .warehouse
        .prepare_table_location(&location)
        .map_err(|_| {
            rest(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                format!("location '{location}' is outside the warehouse"),
            )
        })?;
    let mut properties = req.properties;
    let format = format_version(properties.remove("format-version").as_deref())?;
    let metadata = TableMetadataBuilder::new(
        req.schema,
        req.partition_spec
            .unwrap_or_else(|| UnboundPartitionSpec::builder().build()),
        req.write_order.unwrap_or_else(SortOrder::unsorted_order),
        location,
        format,
        properties,
    )?
    .assign_uuid(uuid)
    .build()?
    .metadata;
    if req.stage_create {
        // Nothing is stored: the client commits the table later (assert-create).
        return Ok(loaded(None, metadata));
    }
    let location = s.tables.write_metadata(&metadata, None)?;
    let op = TableOp::Put {
        table: name.clone(),
        expected: None,
        pointer: pointer_of(&location, &metadata),
    };
    s.catalog
        .commit(&a.expr, vec![op], meta(&headers, format!("create {name}")))
        .await
        .map_err(already_exists(&name))?;
    Ok(loaded(Some(location), metadata))
}

/// The format a new table asks for with the reserved `format-version` property (default 2).
fn format_version(asked: Option<&str>) -> RestResult<FormatVersion> {
    match asked {
        None | Some("2") => Ok(FormatVersion::V2),
        Some("1") => Ok(FormatVersion::V1),
        Some("3") => Ok(FormatVersion::V3),
        Some(v) => Err(rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            format!("unknown Iceberg format version '{v}'"),
        )),
    }
}

fn already_exists(name: &str) -> impl Fn(lh_catalog::Error) -> RestError + '_ {
    move |e| match e.kind() {
        lh_catalog::ErrorKind::Conflict => rest(
            StatusCode::CONFLICT,
            "AlreadyExistsException",
            format!("table '{name}' already exists"),
        ),
        _ => e.into(),
    }
}

/// The new metadata of one table change, checked against the table at the branch head.
/// Returns the op to commit, the metadata file written, the metadata (for the answer) and
/// what the change does, for the commit message.
async fn prepare_change(
    s: &AppState,
    a: &At,
    name: &str,
    change: CommitTable,
) -> RestResult<Prepared> {
    let current = s.tables.load(&a.commit, name).await?;
    let current_meta = current.as_ref().map(|t| (*t.metadata).clone());
    for r in &change.requirements {
        r.check(current_meta.as_ref()).map_err(|e| {
            let (status, kind) = match (r, &current_meta) {
                (_, None) if !matches!(r, TableRequirement::NotExist) => {
                    (StatusCode::NOT_FOUND, "NoSuchTableException")
                }
                _ => (StatusCode::CONFLICT, "CommitFailedException"),
            };
            rest(
                status,
                kind,
                format!("table '{name}': requirement failed: {}", e.message()),
            )
        })?;
    }
    let updates = change.updates;
    // Expiring snapshots is refused: the client deletes the expired snapshots' files
    // once the commit succeeds (Spark's and pyiceberg's procedures do), but older lh
    // commits, other refs and tags still read them. lh gc removes what nothing reads.
    if updates
        .iter()
        .any(|u| matches!(u, TableUpdate::RemoveSnapshots { .. }))
    {
        return Err(rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            format!(
                "table '{name}': lh keeps every snapshot, because older lh commits and other \
                 refs read their files; expiring them would let the client delete those \
                 files. Remove unreferenced files with `lh gc` instead"
            ),
        ));
    }
    // Nor may a client turn the file-deletion guard off.
    if updates.iter().any(|u| {
        matches!(u, TableUpdate::SetProperties { updates } if updates
            .get(GC_ENABLED)
            .is_some_and(|v| !v.eq_ignore_ascii_case("false")))
    }) {
        return Err(rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            format!(
                "table '{name}': {GC_ENABLED} stays false in lh, because other refs and older \
                 commits share the table's files. Remove unreferenced files with `lh gc`"
            ),
        ));
    }
    // A snapshot's files stay in the warehouse: the server reads manifest lists.
    for u in &updates {
        if let TableUpdate::AddSnapshot { snapshot } = u {
            s.tables
                .warehouse
                .local_path(snapshot.manifest_list())
                .map_err(|_| {
                    rest(
                        StatusCode::BAD_REQUEST,
                        "BadRequestException",
                        format!(
                            "manifest list '{}' is outside the warehouse",
                            snapshot.manifest_list()
                        ),
                    )
                })?;
        }
    }
    let what = describe(current.is_none(), &updates, name);
    let metadata = match &current {
        Some(t) => {
            let mut b = TableMetadataBuilder::new_from_metadata(
                (*t.metadata).clone(),
                Some(t.pointer.metadata_location.clone()),
            );
            for u in updates {
                b = u.apply(b)?;
            }
            b.build()?.metadata
        }
        None => create_from_updates(s, name, updates)?,
    };
    // Writes stay in the warehouse.
    s.tables
        .warehouse
        .local_path(metadata.location())
        .map_err(|_| {
            rest(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                format!(
                    "location '{}' is outside the warehouse",
                    metadata.location()
                ),
            )
        })?;
    let location = s.tables.write_metadata(
        &metadata,
        current
            .as_ref()
            .map(|t| t.pointer.metadata_location.as_str()),
    )?;
    let op = TableOp::Put {
        table: name.to_string(),
        expected: current.map(|t| t.pointer),
        pointer: pointer_of(&location, &metadata),
    };
    Ok(Prepared {
        op,
        location,
        metadata,
        what,
    })
}

struct Prepared {
    op: TableOp,
    location: String,
    metadata: TableMetadata,
    what: String,
}

/// What a change does, as in `append to sales.orders` or `create sales.big (append)`.
fn describe(created: bool, updates: &[TableUpdate], name: &str) -> String {
    let mut verbs: Vec<&str> = Vec::new();
    for u in updates {
        let verb = match u {
            TableUpdate::AddSnapshot { snapshot } => snapshot.summary().operation.as_str(),
            TableUpdate::AddSchema { .. } if !created => "schema change",
            TableUpdate::AddSpec { .. } if !created => "partition change",
            TableUpdate::SetProperties { .. } | TableUpdate::RemoveProperties { .. }
                if !created =>
            {
                "properties"
            }
            _ => continue,
        };
        if !verbs.contains(&verb) {
            verbs.push(verb);
        }
    }
    match (created, verbs.is_empty()) {
        (true, true) => format!("create {name}"),
        (true, false) => format!("create {name} ({})", verbs.join(", ")),
        (false, true) => format!("update {name}"),
        (false, false) => format!("{} {name}", verbs.join(", ")),
    }
}

/// A table made by a commit (a staged create): its schema, spec, order, location and
/// properties come from the updates, the rest of the updates apply on top.
fn create_from_updates(
    s: &AppState,
    name: &str,
    updates: Vec<TableUpdate>,
) -> RestResult<TableMetadata> {
    let mut schema = None;
    let mut spec = None;
    let mut order = None;
    let mut location = None;
    let mut props = HashMap::new();
    let mut uuid = None;
    let mut format = FormatVersion::V2;
    let mut rest_updates = Vec::new();
    for u in updates {
        match u {
            TableUpdate::AddSchema { schema: sch, .. } if schema.is_none() => schema = Some(sch),
            TableUpdate::AddSpec { spec: sp } if spec.is_none() => spec = Some(sp),
            TableUpdate::AddSortOrder { sort_order } if order.is_none() => order = Some(sort_order),
            TableUpdate::SetLocation { location: l } => location = Some(l),
            TableUpdate::SetProperties { mut updates } => {
                if let Some(v) = updates.remove("format-version") {
                    format = format_version(Some(&v))?;
                }
                props.extend(updates)
            }
            TableUpdate::AssignUuid { uuid: u } => uuid = Some(u),
            TableUpdate::UpgradeFormatVersion { format_version } => format = format_version,
            TableUpdate::SetCurrentSchema { .. }
            | TableUpdate::SetDefaultSpec { .. }
            | TableUpdate::SetDefaultSortOrder { .. } => {}
            other => rest_updates.push(other),
        }
    }
    let schema = schema.ok_or_else(|| {
        rest(
            StatusCode::BAD_REQUEST,
            "BadRequestException",
            "creating a table needs an add-schema update",
        )
    })?;
    let uuid = uuid.unwrap_or_else(uuid::Uuid::now_v7);
    let location = location.unwrap_or_else(|| s.tables.warehouse.new_table_location(name, &uuid));
    let mut b = TableMetadataBuilder::new(
        schema,
        spec.unwrap_or_else(|| UnboundPartitionSpec::builder().build()),
        order.unwrap_or_else(SortOrder::unsorted_order),
        location,
        format,
        props,
    )?
    .assign_uuid(uuid);
    for u in rest_updates {
        b = u.apply(b)?;
    }
    Ok(b.build()?.metadata)
}

/// Maps the catalog's conflict (the table moved since it was read) to the spec's 409.
fn commit_failed(e: lh_catalog::Error) -> RestError {
    match e.kind() {
        lh_catalog::ErrorKind::Conflict => rest(
            StatusCode::CONFLICT,
            "CommitFailedException",
            format!("{}; retry", e.message()),
        ),
        // The database was lost mid-transaction: the commit may have landed. Clients
        // must not delete what they wrote; neither does the server.
        lh_catalog::ErrorKind::Storage => rest(
            StatusCode::INTERNAL_SERVER_ERROR,
            "CommitStateUnknownException",
            format!(
                "the commit may or may not have landed: {}; load the table to see",
                e.message()
            ),
        ),
        _ => e.into(),
    }
}

/// Whether a failed catalog commit certainly changed nothing, so that the files
/// written for it can go.
fn refused(e: &lh_catalog::Error) -> bool {
    e.kind() != lh_catalog::ErrorKind::Storage
}

async fn commit_table(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    headers: HeaderMap,
    Body(change): Body<CommitTable>,
) -> RestResult<Json<serde_json::Value>> {
    let a = at(&s, &prefix).await?;
    writable(&a)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    let _gate = s.tables.commit_gate.read().await;
    let p = prepare_change(&s, &a, &name, change).await?;
    if let Err(e) = s
        .catalog
        .commit(&a.expr, vec![p.op], meta(&headers, p.what))
        .await
    {
        if refused(&e) {
            discard(&s, &p.location);
        }
        return Err(commit_failed(e));
    }
    Ok(Json(
        serde_json::json!({ "metadata-location": p.location, "metadata": served(&p.metadata) }),
    ))
}

/// A metadata file written for a commit that did not land.
fn discard(s: &AppState, location: &str) {
    if let Ok(p) = s.tables.warehouse.local_path(location) {
        let _ = std::fs::remove_file(p);
    }
}

async fn commit_transaction(
    State(s): State<AppState>,
    Path(prefix): Path<String>,
    headers: HeaderMap,
    Body(req): Body<CommitTransaction>,
) -> RestResult<StatusCode> {
    let a = at(&s, &prefix).await?;
    writable(&a)?;
    let _gate = s.tables.commit_gate.read().await;
    let mut ops = Vec::new();
    let mut written = Vec::new();
    let mut names = Vec::new();
    let mut whats = Vec::new();
    for change in req.table_changes {
        let id = change.identifier.as_ref().ok_or_else(|| {
            rest(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                "every table change of a transaction names its table",
            )
        })?;
        let name = ident_name(id)?;
        if names.contains(&name) {
            return Err(rest(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                format!("table '{name}' appears twice"),
            ));
        }
        match prepare_change(&s, &a, &name, change).await {
            Ok(p) => {
                ops.push(p.op);
                written.push(p.location);
                whats.push(p.what);
                names.push(name);
            }
            Err(e) => {
                written.iter().for_each(|l| discard(&s, l));
                return Err(e);
            }
        }
    }
    // All the tables' changes land in one lh commit, or none do.
    if let Err(e) = s
        .catalog
        .commit(&a.expr, ops, meta(&headers, whats.join("; ")))
        .await
    {
        if refused(&e) {
            written.iter().for_each(|l| discard(&s, l));
        }
        return Err(commit_failed(e));
    }
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DropQuery {
    /// `true`/`false`, as Java clients send it, or `True`/`False` (pyiceberg).
    #[serde(default)]
    purge_requested: Option<String>,
}

/// Drops a table from the branch. Its files stay, purge or not: other refs and history
/// still read them (an lh commit can always be travelled back to).
async fn drop_table(
    State(s): State<AppState>,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    headers: HeaderMap,
    Params(q): Params<DropQuery>,
) -> RestResult<StatusCode> {
    let a = at(&s, &prefix).await?;
    writable(&a)?;
    let name = table_name(&namespace(&ns)?, &table)?;
    let p = s
        .catalog
        .table_in(&a.commit, &name)
        .await?
        .ok_or_else(|| no_table(&name, &a.expr))?;
    let purge = match q
        .purge_requested
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => {
            return Err(rest(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                format!("purgeRequested is true or false, not '{v}'"),
            ));
        }
    };
    let purge = if purge {
        " (purge requested: files kept for other refs)"
    } else {
        ""
    };
    let op = TableOp::Delete {
        table: name.clone(),
        expected: p,
    };
    s.catalog
        .commit(
            &a.expr,
            vec![op],
            meta(&headers, format!("drop {name}{purge}")),
        )
        .await
        .map_err(commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn rename_table(
    State(s): State<AppState>,
    Path(prefix): Path<String>,
    headers: HeaderMap,
    Body(req): Body<Rename>,
) -> RestResult<StatusCode> {
    let a = at(&s, &prefix).await?;
    writable(&a)?;
    let from = ident_name(&req.source)?;
    let to = ident_name(&req.destination)?;
    let p = s
        .catalog
        .table_in(&a.commit, &from)
        .await?
        .ok_or_else(|| no_table(&from, &a.expr))?;
    if !namespaces_at(&s, &a.commit)
        .await?
        .contains_key(&req.destination.namespace.join("."))
    {
        return Err(no_namespace(&req.destination.namespace.join(".")));
    }
    if s.catalog.table_in(&a.commit, &to).await?.is_some() {
        return Err(rest(
            StatusCode::CONFLICT,
            "AlreadyExistsException",
            format!("table '{to}' already exists"),
        ));
    }
    let ops = vec![
        TableOp::Delete {
            table: from.clone(),
            expected: p.clone(),
        },
        TableOp::Put {
            table: to.clone(),
            expected: None,
            pointer: p,
        },
    ];
    s.catalog
        .commit(
            &a.expr,
            ops,
            meta(&headers, format!("rename {from} to {to}")),
        )
        .await
        .map_err(commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn register_table(
    State(s): State<AppState>,
    Path((prefix, ns)): Path<(String, String)>,
    headers: HeaderMap,
    Body(req): Body<Register>,
) -> RestResult<Json<LoadTableResult>> {
    let a = at(&s, &prefix).await?;
    writable(&a)?;
    let parts = namespace(&ns)?;
    let name = table_name(&parts, &req.name)?;
    s.tables
        .warehouse
        .local_path(&req.metadata_location)
        .map_err(|_| {
            rest(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                format!("'{}' is outside the warehouse", req.metadata_location),
            )
        })?;
    // Registered files may be of any age: garbage collection must not be removing them.
    let _gate = s.tables.commit_gate.read().await;
    let metadata = s
        .tables
        .metadata(&req.metadata_location)
        .await
        .map_err(|e| {
            rest(
                StatusCode::BAD_REQUEST,
                "BadRequestException",
                format!("cannot read '{}': {}", req.metadata_location, e.message),
            )
        })?;
    let op = TableOp::Put {
        table: name.clone(),
        expected: None,
        pointer: pointer_of(&req.metadata_location, &metadata),
    };
    s.catalog
        .commit(
            &a.expr,
            vec![op],
            meta(
                &headers,
                format!("register {name} from {}", req.metadata_location),
            ),
        )
        .await
        .map_err(already_exists(&name))?;
    Ok(loaded(Some(req.metadata_location), (*metadata).clone()))
}
