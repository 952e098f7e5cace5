//! Tables at a ref: list, show, drop; uploads and imports.

use std::path::PathBuf;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use lh_api::{
    CompactRequest, CompactResponse, DropResponse, ExpireRequest, ExpireResponse, FileFormat,
    GcRequest, GcResponse, ImportRequest, ImportResponse, TableDetail, TableList, TableSummary,
    Upload,
};
use tokio::io::AsyncWriteExt;

use super::params::query_pairs;
use crate::auth::Identity;
use crate::error::{Code, Error, Kind, pointer};
use crate::http::ApiResult;
use crate::state::AppState;
use crate::tables::write::{self as import, ImportJob};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tables", get(list_tables))
        .route("/api/v1/tables/{name}", get(show_table).delete(drop_table))
        .route("/api/v1/tables/{name}/import", post(import_files))
        .route("/api/v1/tables/{name}/compact", post(compact))
        .route("/api/v1/tables/{name}/expire", post(expire))
        .route("/api/v1/uploads", post(upload))
        .route("/api/v1/gc", post(gc))
}

fn param(raw: &Option<String>, key: &str) -> Option<String> {
    query_pairs(raw.as_deref())
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn ref_param(raw: &Option<String>) -> crate::error::Result<lh_catalog::RefExpr> {
    Ok(lh_catalog::ref_or_default(param(raw, "ref"))?)
}

fn branch_param(raw: &Option<String>) -> crate::error::Result<String> {
    Ok(lh_catalog::branch_or_default(param(raw, "ref"))?)
}

/// The tables at a ref (`?ref=&namespace=`).
#[utoipa::path(get, path = "/api/v1/tables",
    params(("ref" = Option<String>, Query), ("namespace" = Option<String>, Query),
        ("stats" = Option<bool>, Query)),
    responses((status = 200, body = TableList)))]
async fn list_tables(
    State(s): State<AppState>,
    identity: Identity,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<TableList>> {
    let at = ref_param(&q)?;
    let ns = param(&q, "namespace");
    let stats = matches!(param(&q, "stats").as_deref(), Some("true" | "1"));
    let (commit, tables) = s.tables.list_for(&identity, &at, ns.as_deref()).await?;
    let totals = if stats {
        s.tables.totals(&tables).await
    } else {
        vec![Default::default(); tables.len()]
    };
    Ok(Json(TableList {
        commit: commit.id.to_hex(),
        tables: tables
            .into_iter()
            .zip(totals)
            .map(|(t, n): (_, lh_tables::Totals)| TableSummary {
                name: t.name,
                pointer: pointer(&t.pointer),
                rows: n.rows,
                bytes: n.bytes,
                updated_at: n.updated_at,
            })
            .collect(),
    }))
}

/// A table's schema, snapshots, rows, files and size at a ref.
#[utoipa::path(get, path = "/api/v1/tables/{name}", params(("name" = String, Path), ("ref" = Option<String>, Query)),
    responses((status = 200, body = TableDetail), (status = 404, body = lh_api::ErrorBody)))]
async fn show_table(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<TableDetail>> {
    let at = ref_param(&q)?;
    Ok(Json(table_detail(
        s.tables.detail_for(&identity, &at, &name).await?,
    )))
}

/// Removes a table from a branch (one commit; its files stay for other refs).
#[utoipa::path(delete, path = "/api/v1/tables/{name}", params(("name" = String, Path), ("ref" = Option<String>, Query)),
    responses((status = 200, body = DropResponse), (status = 404, body = lh_api::ErrorBody)))]
async fn drop_table(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<DropResponse>> {
    let commit = s
        .tables
        .drop_for(&identity, &branch_param(&q)?, &name)
        .await?;
    Ok(Json(DropResponse {
        table: name,
        commit: commit.id.to_hex(),
    }))
}

/// Rewrites a table's small files (and applies its delete files) into fewer, as one
/// commit that changes no row.
#[utoipa::path(post, path = "/api/v1/tables/{name}/compact", params(("name" = String, Path)),
    request_body = CompactRequest,
    responses((status = 200, body = CompactResponse), (status = 404, body = lh_api::ErrorBody),
        (status = 409, body = lh_api::ErrorBody)))]
async fn compact(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    Json(req): Json<CompactRequest>,
) -> ApiResult<Json<CompactResponse>> {
    let at = lh_catalog::branch_or_default(req.reference)?;
    let target = req
        .target_file_size
        .unwrap_or(crate::maintenance::TARGET_FILE_BYTES);
    if target < 1 << 20 {
        return Err(
            Error::bad_request(Code::BadInput, "the target file size is at least 1 MiB").into(),
        );
    }
    let crate::maintenance::Compacted {
        table,
        commit,
        compacted,
        files_before,
        files_after,
        delete_files_removed,
        files_rewritten,
        rows,
    } = crate::maintenance::compact(&s.tables, &s.import, &at, &name, target, &identity).await?;
    Ok(Json(CompactResponse {
        table,
        commit,
        compacted,
        files_before,
        files_after,
        delete_files_removed,
        files_rewritten,
        rows,
    }))
}

/// Removes from a table's metadata on a branch the snapshots older than a cutoff that
/// no commit the server's retention keeps reads, as one commit that changes no row.
#[utoipa::path(post, path = "/api/v1/tables/{name}/expire", params(("name" = String, Path)),
    request_body = ExpireRequest,
    responses((status = 200, body = ExpireResponse), (status = 404, body = lh_api::ErrorBody),
        (status = 409, body = lh_api::ErrorBody)))]
async fn expire(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    Json(req): Json<ExpireRequest>,
) -> ApiResult<Json<ExpireResponse>> {
    let at = lh_catalog::branch_or_default(req.reference)?;
    let older_than = req.older_than_secs.unwrap_or(30 * 86400);
    if older_than > lh_api::units::MAX_CLIENT_SECS {
        return Err(crate::error::Error::bad_request(
            crate::error::Code::InvalidArgument,
            format!("older_than_secs {older_than} is longer than 100 years"),
        )
        .into());
    }
    let older_than = std::time::Duration::from_secs(older_than);
    let crate::maintenance::Expired {
        table,
        commit,
        snapshots_before,
        snapshots_after,
        expired,
        kept_commits,
    } = crate::maintenance::expire(&s.tables, &at, &name, older_than, &identity).await?;
    Ok(Json(ExpireResponse {
        table,
        commit,
        snapshots_before,
        snapshots_after,
        expired,
        kept_commits,
    }))
}

/// A table's detail as the API shows it.
fn table_detail(d: crate::tables::TableDetail) -> TableDetail {
    TableDetail {
        name: d.name,
        commit: d.commit,
        pointer: crate::error::pointer(&d.pointer),
        location: d.location,
        format_version: d.format_version,
        columns: d
            .columns
            .into_iter()
            .map(|c| lh_api::Column {
                id: c.id,
                name: c.name,
                data_type: c.data_type,
                required: c.required,
            })
            .collect(),
        rows: d.rows,
        files: d.files,
        size_bytes: d.size_bytes,
        delete_files: d.delete_files,
        snapshots: d
            .snapshots
            .into_iter()
            .map(|s| lh_api::SnapshotInfo {
                snapshot_id: s.snapshot_id,
                parent_id: s.parent_id,
                timestamp: s.timestamp,
                operation: s.operation,
                summary: s.summary,
            })
            .collect(),
        partition_by: d.partition_by,
        partition_spec_id: d.partition_spec_id,
        partitions: d
            .partitions
            .into_iter()
            .map(|p| lh_api::PartitionInfo {
                partition: p.partition,
                spec_id: p.spec_id,
                rows: p.rows,
                files: p.files,
                size_bytes: p.size_bytes,
            })
            .collect(),
        partition_count: d.partition_count,
    }
}

/// Removes the warehouse files that no commit of the catalog reaches (what failed or
/// refused writes left), once older than a grace period; `dry_run` lists them.
#[utoipa::path(post, path = "/api/v1/gc", request_body = GcRequest,
    responses((status = 200, body = GcResponse), (status = 400, body = lh_api::ErrorBody),
        (status = 409, body = lh_api::ErrorBody)))]
async fn gc(State(s): State<AppState>, Json(req): Json<GcRequest>) -> ApiResult<Json<GcResponse>> {
    use crate::tables::gc::{GcOptions, collect};
    let memo: &dyn crate::tables::gc::Memo = &s.runs.store;
    let options = GcOptions {
        older_than: req.older_than_secs.map(std::time::Duration::from_secs),
        dry_run: req.dry_run,
    };
    let r = collect(&s.tables, &options, Some(memo)).await?;
    Ok(Json(GcResponse {
        dry_run: r.dry_run,
        older_than_secs: r.older_than.as_secs(),
        table_versions: r.table_versions,
        scanned_files: r.scanned_files,
        live_files: r.live_files,
        recent_files: r.recent_files,
        foreign_files: r.foreign_files,
        removed_files: r.removed_files,
        removed_bytes: r.removed_bytes,
        removed_folders: r.removed_folders,
        removed: r.removed,
        unreadable: r.unreadable,
        protected_files: r.protected_files,
    }))
}

/// Stages a file for an import (`?name=orders.csv`; the body is the file).
#[utoipa::path(post, path = "/api/v1/uploads", params(("name" = String, Query)),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = Upload), (status = 413, body = lh_api::ErrorBody)))]
async fn upload(
    State(s): State<AppState>,
    RawQuery(q): RawQuery,
    body: Body,
) -> ApiResult<(StatusCode, Json<Upload>)> {
    let name = param(&q, "name").unwrap_or_else(|| "upload".into());
    let file_name = sanitize(&name);
    let id = uuid::Uuid::now_v7().simple().to_string();
    let dir = s.uploads.dir_of(&id);
    tokio::fs::create_dir_all(&dir).await.map_err(Error::from)?;
    let path = dir.join(&file_name);
    let max = s.max_upload_bytes;
    let result = async {
        let mut f = tokio::fs::File::create(&path).await?;
        let mut stream = body.into_data_stream();
        let mut bytes = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(std::io::Error::other)?;
            bytes += chunk.len() as u64;
            if bytes > max {
                return Ok(None);
            }
            f.write_all(&chunk).await?;
        }
        f.flush().await?;
        Ok::<Option<u64>, std::io::Error>(Some(bytes))
    }
    .await;
    match result {
        Ok(Some(bytes)) => {
            // Then any server sharing the warehouse takes its import.
            if let Err(mut e) = s.uploads.share(&s.tables.warehouse, &id, &path).await {
                let _ = tokio::fs::remove_dir_all(&dir).await;
                e.hint = Some(match e.hint.take() {
                    Some(h) => format!("{h}; nothing was kept, try the upload again"),
                    None => "nothing was kept; try the upload again".into(),
                });
                return Err(e.into());
            }
            Ok((StatusCode::CREATED, Json(Upload { id, bytes })))
        }
        Ok(None) => {
            let _ = tokio::fs::remove_dir_all(&dir).await;
            Err(Error::new(
                Kind::TooLarge,
                Code::UploadTooLarge,
                format!(
                    "'{name}' is larger than the largest upload this server takes ({} bytes); nothing was kept",
                    max
                ),
            )
            .with_hint("the server's limit is its --max-upload")
            .into())
        }
        Err(e) => {
            let _ = tokio::fs::remove_dir_all(&dir).await;
            Err(Error::bad_request(
                Code::UploadFailed,
                format!("the upload of '{name}' failed: {e}"),
            )
            .into())
        }
    }
}

/// A file name safe to store: its last component, with a plain character set.
fn sanitize(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let clean: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let clean = clean.trim_start_matches('.').to_string();
    if clean.is_empty() {
        "upload".into()
    } else {
        clean
    }
}

/// Creates a table from, appends to or replaces a table with staged files.
#[utoipa::path(post, path = "/api/v1/tables/{name}/import", params(("name" = String, Path)),
    request_body = ImportRequest,
    responses((status = 200, body = ImportResponse), (status = 400, body = lh_api::ErrorBody), (status = 409, body = lh_api::ErrorBody)))]
async fn import_files(
    State(s): State<AppState>,
    identity: Identity,
    Path(name): Path<String>,
    Json(req): Json<ImportRequest>,
) -> ApiResult<Json<ImportResponse>> {
    // Refused before any file is read (the commit checks again).
    s.tables
        .require_writable(&identity, &req.reference, &name, "importing into it")
        .await?;
    let mut files = Vec::new();
    for id in &req.uploads {
        let file: Option<PathBuf> = s.uploads.file(&s.tables.warehouse, id).await?;
        match file {
            Some(f) => files.push(f),
            None => {
                return Err(Error::not_found(
                    Code::UploadNotFound,
                    format!("upload '{id}' not found (uploads are kept until imported)"),
                )
                .into());
            }
        }
    }
    // A file's name, never the client's path to it: names go into the commit message,
    // which every reader of the branch's log sees.
    let names: Vec<String> = if req.file_names.len() == files.len() {
        req.file_names
            .iter()
            .map(|n| {
                n.rsplit(['/', '\\'])
                    .find(|p| !p.is_empty())
                    .unwrap_or("?")
                    .to_string()
            })
            .collect()
    } else {
        files
            .iter()
            .map(|f| {
                f.file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("?")
                    .to_string()
            })
            .collect()
    };
    let format = match req.format {
        Some(f) => f,
        None => {
            let formats: Vec<Option<FileFormat>> =
                names.iter().map(|n| FileFormat::from_path(n)).collect();
            match formats.first().copied().flatten() {
                Some(f) if formats.iter().all(|x| *x == Some(f)) => f,
                _ => {
                    return Err(Error::bad_request(
                        Code::UnknownFormat,
                        format!("cannot tell the format of {}: expected .csv, .parquet or .json (.ndjson, .jsonl), all alike", names.join(", ")),
                    )
                    .with_hint("give it with --format csv|parquet|json")
                    .into());
                }
            }
        }
    };
    let job = ImportJob {
        branch: req.reference.clone(),
        table: name,
        mode: req.mode,
        format,
        files,
        names,
        by: identity.clone(),
        partition_by: req.partition_by.clone(),
    };
    let (branch, table) = (job.branch.clone(), job.table.clone());
    // An import refused to this identity (its role, a protected branch) or stopped by
    // something passing (a timeout, a server shutting down) keeps its uploads, for a
    // retry by someone allowed or later; one the request itself dooms (bad data, a
    // table that exists, a ref that is no branch) drops them, as a success does.
    // Unused uploads go after a day.
    let result = import::import(&s.tables, &s.import, job).await;
    let keep = result.as_ref().is_err_and(|e| {
        matches!(e.code, Code::PermissionDenied | Code::BranchProtected)
            || matches!(e.kind, Kind::Timeout | Kind::Unavailable)
    });
    if !keep {
        for id in &req.uploads {
            s.uploads.remove(&s.tables.warehouse, id).await;
        }
    }
    let result = result?;
    crate::maintenance::after_write(&s.tables, &s.import, &branch, &table, &identity);
    let import::Imported {
        table,
        commit,
        snapshot_id,
        rows,
        files,
        bytes,
        partitions,
        rebased,
    } = result;
    Ok(Json(ImportResponse {
        table,
        commit,
        snapshot_id,
        rows,
        files,
        bytes,
        partitions,
        rebased,
    }))
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn upload_names_are_made_safe() {
        assert_eq!(sanitize("../../etc/passwd"), "passwd");
        assert_eq!(sanitize("orders 2026.csv"), "orders_2026.csv");
        assert_eq!(sanitize(".hidden"), "hidden");
        assert_eq!(sanitize(""), "upload");
    }
}
