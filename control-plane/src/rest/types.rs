//! The Iceberg REST catalog's wire types: requests, answers, pagination, and the JSON
//! body and query-string extractors whose rejections are the spec's 400.

use std::collections::{BTreeMap, HashMap};

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use iceberg::spec::{Schema, SortOrder, TableMetadata, UnboundPartitionSpec};
use iceberg::{TableRequirement, TableUpdate};
use serde::{Deserialize, Serialize};

use crate::error::{Code, Error};
use crate::http::{IcebergError, IcebergResult};
use crate::tables::commit::GC_ENABLED;

/// A malformed request, as the spec's 400.
pub fn bad_request(message: impl Into<String>) -> Error {
    Error::bad_request(Code::BadRequest, message)
}

/// A JSON body whose rejection (malformed JSON, an unknown requirement or update, a
/// missing field) is the spec's 400, not axum's plain-text 422.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = IcebergError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(r) => Err(bad_request(r.body_text()).into()),
        }
    }
}

/// Query parameters, rejected in the spec's model too.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = IcebergError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(Params(v)),
            Err(r) => Err(bad_request(r.body_text()).into()),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct TableIdent {
    pub namespace: Vec<String>,
    pub name: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CreateNamespace {
    pub namespace: Vec<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub struct UpdateProperties {
    #[serde(default)]
    pub removals: Vec<String>,
    #[serde(default)]
    pub updates: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CreateTable {
    pub name: String,
    #[serde(default)]
    pub location: Option<String>,
    pub schema: Schema,
    #[serde(default)]
    pub partition_spec: Option<UnboundPartitionSpec>,
    #[serde(default)]
    pub write_order: Option<SortOrder>,
    #[serde(default)]
    pub stage_create: bool,
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub struct CommitTable {
    #[serde(default)]
    pub identifier: Option<TableIdent>,
    #[serde(default)]
    pub requirements: Vec<TableRequirement>,
    #[serde(default)]
    pub updates: Vec<TableUpdate>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CommitTransaction {
    pub table_changes: Vec<CommitTable>,
}

#[derive(Debug, Deserialize)]
pub struct Rename {
    pub source: TableIdent,
    pub destination: TableIdent,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Register {
    pub name: String,
    pub metadata_location: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DropQuery {
    /// `true`/`false`, as Java clients send it, or `True`/`False` (pyiceberg).
    #[serde(default)]
    pub purge_requested: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MetricsReport {
    pub report_type: String,
    #[serde(default)]
    pub snapshot_id: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct ConfigQuery {
    pub warehouse: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ParentQuery {
    pub parent: Option<String>,
    #[serde(flatten)]
    pub page: Page,
}

/// The spec's pagination of listings: without `pageToken`, everything in one answer;
/// with it (empty for the first page), at most `pageSize` entries after the token, and a
/// `next-page-token` (the last entry's key) while more remain.
#[derive(Debug, Default, Deserialize)]
pub struct Page {
    #[serde(rename = "pageToken")]
    token: Option<String>,
    #[serde(rename = "pageSize")]
    size: Option<String>,
}

impl Page {
    /// `items` sorted by their key.
    pub fn apply<T>(&self, items: Vec<(String, T)>) -> IcebergResult<(Vec<T>, Option<String>)> {
        let size = match self.size.as_deref() {
            None => usize::MAX,
            Some(v) => match v.parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(
                        bad_request(format!("pageSize '{v}' is not a positive integer")).into(),
                    );
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

/// Table metadata as clients get it: with `gc.enabled=false`, because a table's files
/// are shared by every ref and every older commit that sees it, so no client may delete
/// them; `lh gc` removes what nothing reads.
pub fn served(metadata: &TableMetadata) -> serde_json::Value {
    let mut v = crate::tables::encode::metadata_json(metadata).unwrap_or(serde_json::Value::Null);
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

/// Whether the client asked for vended credentials
/// (`X-Iceberg-Access-Delegation: vended-credentials`).
pub fn asks_for_credentials(headers: &HeaderMap) -> bool {
    headers
        .get_all("x-iceberg-access-delegation")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|m| m.trim() == "vended-credentials"))
}
