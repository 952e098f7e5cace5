//! The HTTP client of the lh API: typed requests, and the server's errors turned into
//! [`CliError`]s.

use std::path::Path;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use lh_api::{ErrorBody, QueryRequest, Upload};
use reqwest::{Method, RequestBuilder, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{CliError, CliResult};

pub struct Client {
    http: reqwest::Client,
    endpoint: String,
    user: String,
}

/// A query's answer.
pub struct QueryResult {
    pub commit: String,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    pub truncated: bool,
}

impl Client {
    pub fn new(endpoint: &str, user: &str) -> CliResult<Client> {
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(5))
            .build()?;
        Ok(Client {
            http,
            endpoint: endpoint.to_string(),
            user: user.to_string(),
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}/api/v1{path}", self.endpoint))
            .header("x-lh-user", &self.user)
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

    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> CliResult<T> {
        let resp = self
            .send(self.request(Method::GET, path).query(query))
            .await?;
        Ok(resp.json().await?)
    }

    pub async fn text(&self, path: &str, query: &[(&str, &str)]) -> CliResult<String> {
        let resp = self
            .send(self.request(Method::GET, path).query(query))
            .await?;
        Ok(resp.text().await?)
    }

    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> CliResult<T> {
        let resp = self
            .send(self.request(Method::POST, path).json(body))
            .await?;
        Ok(resp.json().await?)
    }

    pub async fn delete(&self, path: &str, query: &[(&str, &str)]) -> CliResult<Response> {
        self.send(self.request(Method::DELETE, path).query(query))
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
        let bytes = resp.bytes().await?;
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
