//! The HTTP client of the lh API: one typed method per route, so that commands never
//! build a URL or escape a name themselves, and the server's errors turned into
//! [`CliError`]s.

use std::path::Path;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use lh_api::{
    CompactRequest, CompactResponse, CreateRef, DiffResponse, DropResponse, ErrorBody, GcRequest,
    GcResponse, ImportRequest, ImportResponse, LogPage, MergeRequest, MergeResponse, PlanResponse,
    QueryRequest, RefInfo, RefKind, RerunRequest, RunInfo, RunList, RunRequest, ServerInfo,
    TableDetail, TableList, Upload,
};
use reqwest::{Method, RequestBuilder, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{CliError, CliResult};

pub struct Client {
    http: reqwest::Client,
    endpoint: String,
    user: String,
    /// Sent as `Authorization: Bearer` with every request.
    token: Option<String>,
    /// The server's answer to `/info`, asked for once, when a command needs it.
    info: tokio::sync::OnceCell<ServerInfo>,
}

/// A query's answer.
pub struct QueryResult {
    pub commit: String,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    pub truncated: bool,
}

impl Client {
    pub fn new(endpoint: &str, user: &str, token: Option<&str>) -> CliResult<Client> {
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(5))
            .build()?;
        Ok(Client {
            http,
            endpoint: endpoint.to_string(),
            user: user.to_string(),
            token: token.map(str::to_string),
            info: tokio::sync::OnceCell::new(),
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self
            .http
            .request(method, format!("{}/api/v1{path}", self.endpoint))
            // The author a server without authentication records.
            .header("x-lh-user", &self.user);
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn send(&self, req: RequestBuilder) -> CliResult<Response> {
        let resp = req.send().await.map_err(|e| self.transport(e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) => Err(CliError::Api { status, body }),
            Err(_) => Err(CliError::Other(anyhow::anyhow!(
                "the server answered {status}: {}",
                text.chars().take(300).collect::<String>()
            ))),
        }
    }

    fn transport(&self, e: reqwest::Error) -> CliError {
        if e.is_connect() || e.is_timeout() {
            let mut reason = e.to_string();
            let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&e);
            while let Some(s) = src {
                reason = s.to_string();
                src = s.source();
            }
            CliError::Unreachable {
                endpoint: self.endpoint.clone(),
                reason,
            }
        } else {
            CliError::Other(anyhow::anyhow!("request to {} failed: {e}", self.endpoint))
        }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str, query: &[(&str, &str)]) -> CliResult<T> {
        let resp = self
            .send(self.request(Method::GET, path).query(query))
            .await?;
        Ok(resp.json().await?)
    }

    async fn text(&self, path: &str, query: &[(&str, &str)]) -> CliResult<String> {
        let resp = self
            .send(self.request(Method::GET, path).query(query))
            .await?;
        Ok(resp.text().await?)
    }

    async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> CliResult<T> {
        let resp = self
            .send(self.request(Method::POST, path).json(body))
            .await?;
        Ok(resp.json().await?)
    }

    async fn delete<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> CliResult<T> {
        let resp = self
            .send(self.request(Method::DELETE, path).query(query))
            .await?;
        Ok(resp.json().await?)
    }

    pub async fn create_token(&self, req: &lh_api::TokenCreate) -> CliResult<lh_api::TokenCreated> {
        self.post("/tokens", req).await
    }

    pub async fn audit(&self, query: &[(&str, &str)]) -> CliResult<lh_api::AuditList> {
        self.get("/audit", query).await
    }

    pub async fn list_roles(&self) -> CliResult<lh_api::RoleList> {
        self.get("/roles", &[]).await
    }

    pub async fn set_role(&self, name: &str, grants: &[String]) -> CliResult<lh_api::RoleInfo> {
        let body = lh_api::RoleSet {
            grants: grants.to_vec(),
        };
        let resp = self
            .send(
                self.request(Method::PUT, &format!("/roles/{}", segment(name)?))
                    .json(&body),
            )
            .await?;
        Ok(resp.json().await?)
    }

    /// Removes `/{what}/{name}` (a role, check, hook or secret), answered with no body.
    pub async fn remove(&self, what: &str, name: &str) -> CliResult<()> {
        self.send(self.request(Method::DELETE, &format!("/{what}/{}", segment(name)?)))
            .await?;
        Ok(())
    }

    pub async fn add_check(&self, req: &lh_api::CheckCreate) -> CliResult<lh_api::CheckInfo> {
        self.post("/checks", req).await
    }

    pub async fn list_checks(&self) -> CliResult<lh_api::CheckList> {
        self.get("/checks", &[]).await
    }

    pub async fn add_hook(&self, req: &lh_api::HookCreate) -> CliResult<lh_api::HookInfo> {
        self.post("/hooks", req).await
    }

    pub async fn list_hooks(&self) -> CliResult<lh_api::HookList> {
        self.get("/hooks", &[]).await
    }

    pub async fn set_secret(
        &self,
        name: &str,
        value: String,
        refs: Option<String>,
    ) -> CliResult<lh_api::SecretInfo> {
        let body = lh_api::SecretSet { value, refs };
        let resp = self
            .send(
                self.request(Method::PUT, &format!("/secrets/{}", segment(name)?))
                    .json(&body),
            )
            .await?;
        Ok(resp.json().await?)
    }

    pub async fn list_secrets(&self) -> CliResult<lh_api::SecretList> {
        self.get("/secrets", &[]).await
    }

    pub async fn list_tokens(&self) -> CliResult<lh_api::TokenList> {
        self.get("/tokens", &[]).await
    }

    pub async fn revoke_token(&self, id: &str) -> CliResult<lh_api::TokenInfo> {
        self.delete(&format!("/tokens/{}", segment(id)?), &[]).await
    }

    /// The server's version, catalog, warehouse, limits and default branch.
    pub async fn info(&self) -> CliResult<&ServerInfo> {
        self.info.get_or_try_init(|| self.get("/info", &[])).await
    }

    /// The ref a command works on: the one given (or the profile's active branch), else
    /// the server's default branch. The server decides what the default is; the CLI only
    /// asks for its name when it has to show or send one.
    pub async fn resolve_ref(&self, given: Option<String>) -> CliResult<String> {
        match given {
            Some(r) => Ok(r),
            None => Ok(self.info().await?.default_branch.clone()),
        }
    }

    pub async fn refs(&self, kind: RefKind) -> CliResult<Vec<RefInfo>> {
        self.get("/refs", &[("kind", kind.as_str())]).await
    }

    pub async fn get_ref(&self, name: &str) -> CliResult<RefInfo> {
        self.get(&format!("/refs/{}", segment(name)?), &[]).await
    }

    pub async fn create_ref(&self, req: &CreateRef) -> CliResult<RefInfo> {
        self.post("/refs", req).await
    }

    /// Protects a branch (`on`), or unprotects it.
    pub async fn protect_branch(
        &self,
        name: &str,
        on: bool,
        require_checks: &[String],
    ) -> CliResult<RefInfo> {
        let path = format!("/refs/{}/protect", segment(name)?);
        if on {
            let body = lh_api::ProtectRequest {
                require_checks: require_checks.to_vec(),
            };
            self.post(&path, &body).await
        } else {
            self.delete(&path, &[]).await
        }
    }

    pub async fn delete_ref(&self, name: &str, kind: RefKind) -> CliResult<()> {
        self.send(
            self.request(Method::DELETE, &format!("/refs/{}", segment(name)?))
                .query(&[("kind", kind.as_str())]),
        )
        .await?;
        Ok(())
    }

    pub async fn log(&self, at: &str, limit: usize) -> CliResult<LogPage> {
        self.log_filtered(at, limit, None, None, None).await
    }

    /// A page of `at`'s first-parent history: only the commits where `table` changed,
    /// stopping before `until`, from `page_token` on.
    pub async fn log_filtered(
        &self,
        at: &str,
        limit: usize,
        table: Option<&str>,
        until: Option<&str>,
        page_token: Option<&str>,
    ) -> CliResult<LogPage> {
        let limit = limit.to_string();
        let mut q = vec![("ref", at), ("limit", limit.as_str())];
        for (k, v) in [
            ("table", table),
            ("until", until),
            ("page_token", page_token),
        ] {
            if let Some(v) = v {
                q.push((k, v));
            }
        }
        self.get("/log", &q).await
    }

    /// The tables that differ between `from` and `to`; with `since_base`, between where
    /// `to` left `from` (their merge base) and `to`.
    pub async fn diff(
        &self,
        from: &str,
        to: &str,
        rows: bool,
        since_base: bool,
    ) -> CliResult<DiffResponse> {
        let flag = |b: bool| if b { "true" } else { "false" };
        self.get(
            "/diff",
            &[
                ("from", from),
                ("to", to),
                ("rows", flag(rows)),
                ("base", flag(since_base)),
            ],
        )
        .await
    }

    /// Column-level lineage of a table or column on a branch.
    pub async fn lineage(&self, name: &str, at: &str) -> CliResult<lh_api::LineageResponse> {
        self.get("/lineage", &[("name", name), ("ref", at)]).await
    }

    /// The rows of `table` that differ between two refs.
    pub async fn diff_rows(
        &self,
        from: &str,
        to: &str,
        table: &str,
        key: Option<&str>,
        limit: u64,
        full: bool,
    ) -> CliResult<lh_api::RowDiffResponse> {
        let limit = limit.to_string();
        let mut q = vec![
            ("from", from),
            ("to", to),
            ("table", table),
            ("limit", limit.as_str()),
        ];
        if let Some(k) = key {
            q.push(("key", k));
        }
        if full {
            q.push(("full", "true"));
        }
        self.get("/diff/rows", &q).await
    }

    pub async fn merge(&self, req: &MergeRequest) -> CliResult<MergeResponse> {
        self.post("/merge", req).await
    }

    /// What `merge` would do, nothing moved (a server without the route answers 404).
    pub async fn merge_preview(&self, req: &MergeRequest) -> CliResult<MergeResponse> {
        self.post("/merge/preview", req).await
    }

    pub async fn tables(&self, at: &str, namespace: Option<&str>) -> CliResult<TableList> {
        let mut q = vec![("ref", at)];
        if let Some(ns) = namespace {
            q.push(("namespace", ns));
        }
        self.get("/tables", &q).await
    }

    /// The tables at `at` with their rows, bytes and last change.
    pub async fn tables_with_totals(
        &self,
        at: &str,
        namespace: Option<&str>,
    ) -> CliResult<TableList> {
        let mut q = vec![("ref", at), ("stats", "true")];
        if let Some(ns) = namespace {
            q.push(("namespace", ns));
        }
        self.get("/tables", &q).await
    }

    pub async fn table(&self, name: &str, at: &str) -> CliResult<TableDetail> {
        self.get(&format!("/tables/{}", segment(name)?), &[("ref", at)])
            .await
    }

    pub async fn drop_table(&self, name: &str, at: &str) -> CliResult<DropResponse> {
        self.delete(&format!("/tables/{}", segment(name)?), &[("ref", at)])
            .await
    }

    pub async fn import(&self, name: &str, req: &ImportRequest) -> CliResult<ImportResponse> {
        self.post(&format!("/tables/{}/import", segment(name)?), req)
            .await
    }

    pub async fn expire(
        &self,
        name: &str,
        req: &lh_api::ExpireRequest,
    ) -> CliResult<lh_api::ExpireResponse> {
        self.post(&format!("/tables/{}/expire", segment(name)?), req)
            .await
    }

    pub async fn compact(&self, name: &str, req: &CompactRequest) -> CliResult<CompactResponse> {
        self.post(&format!("/tables/{}/compact", segment(name)?), req)
            .await
    }

    pub async fn gc(&self, req: &GcRequest) -> CliResult<GcResponse> {
        self.post("/gc", req).await
    }

    pub async fn plan_run(&self, req: &RunRequest) -> CliResult<PlanResponse> {
        self.post("/runs/plan", req).await
    }

    pub async fn start_run(&self, req: &RunRequest) -> CliResult<RunInfo> {
        self.post("/runs", req).await
    }

    pub async fn rerun(&self, run: &str, req: &RerunRequest) -> CliResult<RunInfo> {
        self.post(&format!("/runs/{}/rerun", segment(run)?), req)
            .await
    }

    pub async fn runs(&self, limit: usize) -> CliResult<RunList> {
        self.get("/runs", &[("limit", &limit.to_string())]).await
    }

    pub async fn run(&self, run: &str) -> CliResult<RunInfo> {
        self.get(&format!("/runs/{}", segment(run)?), &[]).await
    }

    /// A run's log, or one node's.
    pub async fn run_logs(&self, run: &str, node: Option<&str>) -> CliResult<String> {
        let q: Vec<(&str, &str)> = node.map(|n| ("node", n)).into_iter().collect();
        self.text(&format!("/runs/{}/logs", segment(run)?), &q)
            .await
    }

    pub async fn cancel_run(&self, run: &str) -> CliResult<RunInfo> {
        self.post(
            &format!("/runs/{}/cancel", segment(run)?),
            &serde_json::json!({}),
        )
        .await
    }

    /// Streams a file to the server, with a progress bar for large ones.
    pub async fn upload(&self, path: &Path, progress: bool) -> CliResult<Upload> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| CliError::invalid(format!("cannot read {}: {e}", path.display()), None))?;
        let size = file.metadata().await?.len();
        let bar = if progress && size > 16 << 20 {
            let b = ProgressBar::new(size);
            b.set_style(
                ProgressStyle::with_template(
                    "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b.set_message(format!("uploading {}", path.display()));
            b
        } else {
            ProgressBar::hidden()
        };
        let counter = bar.clone();
        let stream =
            tokio_util::io::ReaderStream::with_capacity(file, 1 << 20).inspect_ok(move |chunk| {
                counter.inc(chunk.len() as u64);
            });
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("upload")
            .to_string();
        let req = self
            .request(Method::POST, "/uploads")
            .query(&[("name", name.as_str())])
            .header("content-length", size)
            .body(reqwest::Body::wrap_stream(stream));
        let resp = self.send(req).await;
        bar.finish_and_clear();
        Ok(resp?.json().await?)
    }

    /// How far this user's running query named `id` is, in percent; `None` while
    /// DuckDB cannot tell.
    pub async fn query_progress(&self, id: &str) -> CliResult<Option<f64>> {
        let p: lh_api::QueryProgress = self.get(&format!("/query/progress/{id}"), &[]).await?;
        Ok(p.percentage)
    }

    pub async fn query(&self, req: &QueryRequest) -> CliResult<QueryResult> {
        let resp = self
            .send(self.request(Method::POST, "/query").json(req))
            .await?;
        let commit = resp
            .headers()
            .get(lh_api::COMMIT_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let truncated = resp.headers().contains_key(lh_api::TRUNCATED_HEADER);
        // A large answer comes as the server produces it; a break part-way means the
        // server stopped the query (its size limit or its timeout).
        let bytes = resp.bytes().await.map_err(|e| CliError::Api {
            status: 413,
            body: lh_api::ErrorBody {
                error: lh_api::ErrorDetail {
                    kind: "answer_broke_off".into(),
                    message: format!(
                        "the query's answer broke off ({e}): the server stopped the query \
                         part-way, at its result limit or its timeout (its log says which)"
                    ),
                    hint: Some(
                        "add a LIMIT or aggregate, or write the result to a file with --out FILE.parquet"
                            .into(),
                    ),
                    remedies: Vec::new(),
                    conflicts: Vec::new(),
                },
            },
        })?;
        let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
        let schema = reader.schema();
        let batches = reader.collect::<Result<Vec<_>, _>>()?;
        Ok(QueryResult {
            commit,
            schema,
            batches,
            truncated,
        })
    }
}

/// Percent-encodes one path segment (ref and table names may hold `/`, and nothing a
/// user types may change the route: `.` and `..`, which URLs resolve away even when
/// escaped, are refused).
fn segment(s: &str) -> CliResult<String> {
    if s.is_empty() || s == "." || s == ".." {
        return Err(CliError::invalid(
            format!("'{s}' is not a valid name or id"),
            None,
        ));
    }
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::segment;

    #[test]
    fn segments_cannot_change_the_route() {
        assert_eq!(segment("alice/fix-billing").unwrap(), "alice%2Ffix-billing");
        assert_eq!(segment("../refs").unwrap(), "..%2Frefs");
        assert_eq!(segment("a b?c#d").unwrap(), "a%20b%3Fc%23d");
        assert_eq!(segment("raw.orders").unwrap(), "raw.orders");
        for bad in ["", ".", ".."] {
            assert!(segment(bad).is_err(), "{bad:?}");
        }
    }
}
