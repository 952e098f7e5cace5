//! An S3-compatible bucket (AWS S3, Cloudflare R2, MinIO, Garage, Ceph) as the
//! warehouse: its settings, read from the standard AWS sources, and the object
//! operations the rest of the warehouse needs, over one client.
//!
//! Settings come, each from the first source that has it: credentials from
//! `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`), else the
//! profile (`AWS_PROFILE`, else `default`) in `~/.aws/credentials`; the region from
//! `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile in `~/.aws/config`, else
//! `us-east-1`; the endpoint from `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the
//! profile's `endpoint_url`, else AWS's; path-style addressing from `--s3-path-style`
//! or the profile's `s3 = addressing_style = path`.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectMeta, ObjectStore, PutPayload,
    RetryConfig, WriteMultipart,
};
use tokio::io::AsyncReadExt;

use crate::error::{Code, Error, Kind, Result};

/// Files larger than this go up in parts, several at once.
const MULTIPART_ABOVE: u64 = 16 << 20;
/// The size of one part (S3 allows 10 000 parts; larger files get larger parts).
const PART_BYTES: u64 = 16 << 20;
/// Parts of one file in flight at once.
const PARTS_IN_FLIGHT: usize = 8;

/// Where the bucket is and how to reach it. Debug output never shows the secret.
#[derive(Clone)]
pub struct S3Settings {
    pub bucket: String,
    /// The key prefix of the warehouse in the bucket, without slashes at either end
    /// (empty: the bucket's root).
    pub prefix: String,
    pub region: String,
    /// None: AWS's own endpoint for the region.
    pub endpoint: Option<String>,
    pub path_style: bool,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    /// Where the credentials came from, for `lh info`.
    pub credentials_from: String,
    /// The longest one request may take (a stalled server fails, after retries, instead
    /// of hanging).
    pub timeout: Duration,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("path_style", &self.path_style)
            .field("access_key_id", &self.access_key_id)
            .field("credentials_from", &self.credentials_from)
            .finish_non_exhaustive()
    }
}

/// The bucket and prefix of `s3://bucket/prefix` (also `s3a://`, as Hadoop spells it).
pub fn parse_url(url: &str) -> Option<(String, String)> {
    let rest = url
        .strip_prefix("s3://")
        .or_else(|| url.strip_prefix("s3a://"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let valid_bucket = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !bucket.starts_with(['-', '.'])
        && !bucket.ends_with(['-', '.']);
    if !valid_bucket {
        return None;
    }
    let prefix = prefix.trim_matches('/').to_string();
    let bad = prefix
        .split('/')
        .any(|p| (p.is_empty() && !prefix.is_empty()) || p == "." || p == "..");
    (!bad).then(|| (bucket.to_string(), prefix))
}

impl S3Settings {
    /// The settings for the warehouse `url`, from the process's environment and the
    /// AWS configuration files.
    pub fn from_env(url: &str, path_style: bool) -> Result<S3Settings> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::from_sources(url, path_style, &env, dirs::home_dir().as_deref())
    }

    fn from_sources(
        url: &str,
        path_style: bool,
        env: &HashMap<String, String>,
        home: Option<&Path>,
    ) -> Result<S3Settings> {
        let (bucket, prefix) = parse_url(url).ok_or_else(|| {
            Error::bad_request(
                Code::UnsupportedWarehouse,
                format!("'{url}' is not an S3 location: use s3://BUCKET/PREFIX"),
            )
        })?;
        let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
        let profile = get("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let aws_file = |var: &str, name: &str| -> Option<PathBuf> {
            get(var)
                .map(PathBuf::from)
                .or_else(|| home.map(|h| h.join(".aws").join(name)))
        };
        let credentials = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials")
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|t| ini_section(&t, &profile))
            .unwrap_or_default();
        let config_section = if profile == "default" {
            "default".to_string()
        } else {
            format!("profile {profile}")
        };
        let config = aws_file("AWS_CONFIG_FILE", "config")
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|t| ini_section(&t, &config_section))
            .unwrap_or_default();

        let (access_key_id, secret_access_key, session_token, credentials_from) =
            match (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")) {
                (Some(k), Some(s)) => (k, s, get("AWS_SESSION_TOKEN"), "environment".into()),
                _ => match (
                    credentials.get("aws_access_key_id"),
                    credentials.get("aws_secret_access_key"),
                ) {
                    (Some(k), Some(s)) => (
                        k.clone(),
                        s.clone(),
                        credentials.get("aws_session_token").cloned(),
                        format!("profile {profile}"),
                    ),
                    _ => {
                        return Err(Error::bad_request(
                            Code::ObjectStore,
                            format!("no credentials for the S3 warehouse {url}"),
                        )
                        .with_hint(format!(
                            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put the keys \
                             in the profile '{profile}' of ~/.aws/credentials"
                        )));
                    }
                },
            };
        let region = get("AWS_REGION")
            .or_else(|| get("AWS_DEFAULT_REGION"))
            .or_else(|| config.get("region").cloned())
            .unwrap_or_else(|| "us-east-1".into());
        let endpoint = get("AWS_ENDPOINT_URL_S3")
            .or_else(|| get("AWS_ENDPOINT_URL"))
            .or_else(|| config.get("endpoint_url").cloned())
            .map(|e| e.trim_end_matches('/').to_string());
        if let Some(e) = &endpoint
            && url::Url::parse(e)
                .ok()
                .is_none_or(|u| !matches!(u.scheme(), "http" | "https") || u.host().is_none())
        {
            return Err(Error::bad_request(
                Code::ObjectStore,
                format!("the S3 endpoint '{e}' is not an http(s):// URL"),
            ));
        }
        let path_style = path_style || config.get("addressing_style").is_some_and(|s| s == "path");
        Ok(S3Settings {
            bucket,
            prefix,
            region,
            endpoint,
            path_style,
            access_key_id,
            secret_access_key,
            session_token,
            credentials_from,
            timeout: Duration::from_secs(30),
        })
    }

    /// The warehouse's canonical URL: `s3://bucket/prefix`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// The endpoint clients reach the bucket at.
    pub fn endpoint_or_default(&self) -> String {
        self.endpoint
            .clone()
            .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", self.region))
    }
}

/// `key = value` pairs of one `[section]` of an AWS ini file (a nested `s3 =` block's
/// keys included, as the CLI writes `addressing_style`).
fn ini_section(text: &str, section: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.starts_with(';') || t.is_empty() {
            continue;
        }
        if let Some(name) = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            inside = name.trim() == section;
            continue;
        }
        if inside && let Some((k, v)) = t.split_once('=') {
            let v = v.trim();
            if !v.is_empty() {
                out.insert(k.trim().to_string(), v.to_string());
            }
        }
    }
    out
}

/// One object as listed.
#[derive(Debug, Clone)]
pub struct Object {
    /// The key below the warehouse prefix.
    pub key: String,
    pub size: u64,
    pub modified: std::time::SystemTime,
    pub etag: Option<String>,
}

/// The bucket, through one client (its connection pool shared by every caller).
#[derive(Clone)]
pub struct Bucket {
    pub settings: S3Settings,
    store: Arc<dyn ObjectStore>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Runs one request to the store, logging what it was and how long it took (`LH_LOG=debug`).
async fn timed<T>(op: &str, key: &str, request: impl Future<Output = Result<T>>) -> Result<T> {
    let start = std::time::Instant::now();
    let r = request.await;
    tracing::debug!(
        op,
        key,
        ms = start.elapsed().as_secs_f64() * 1000.0,
        ok = r.is_ok(),
        "s3 request"
    );
    r
}

impl Bucket {
    pub fn connect(settings: S3Settings) -> Result<Bucket> {
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&settings.bucket)
            .with_region(&settings.region)
            .with_access_key_id(&settings.access_key_id)
            .with_secret_access_key(&settings.secret_access_key)
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(settings.timeout.min(Duration::from_secs(5)))
                    .with_timeout(settings.timeout)
                    .with_allow_http(
                        settings
                            .endpoint
                            .as_deref()
                            .is_some_and(|e| e.starts_with("http://")),
                    ),
            )
            // Over TLS the body is protected in transit; signing it too would hash every
            // byte on both ends (as the AWS SDKs, lh leaves it unsigned there). A plain-HTTP
            // endpoint keeps the signed payload, the only integrity check it has.
            .with_unsigned_payload(
                settings
                    .endpoint
                    .as_deref()
                    .is_none_or(|e| e.starts_with("https://")),
            )
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: 3,
                retry_timeout: settings.timeout,
            });
        if let Some(t) = &settings.session_token {
            b = b.with_token(t);
        }
        match (&settings.endpoint, settings.path_style) {
            (Some(e), true) => b = b.with_endpoint(e),
            // Virtual-hosted style on a custom endpoint: the bucket is part of the host.
            (Some(e), false) => {
                let mut u = url::Url::parse(e).map_err(|err| {
                    Error::bad_request(Code::ObjectStore, format!("bad S3 endpoint {e}: {err}"))
                })?;
                let host = format!("{}.{}", settings.bucket, u.host_str().unwrap_or_default());
                u.set_host(Some(&host)).map_err(|err| {
                    Error::bad_request(Code::ObjectStore, format!("bad S3 endpoint {e}: {err}"))
                })?;
                b = b
                    .with_endpoint(u.as_str().trim_end_matches('/'))
                    .with_virtual_hosted_style_request(true);
            }
            (None, path_style) => b = b.with_virtual_hosted_style_request(!path_style),
        }
        let store = b.build().map_err(|e| {
            Error::bad_request(
                Code::ObjectStore,
                format!("cannot set up the S3 client: {e}"),
            )
        })?;
        Ok(Bucket {
            settings,
            store: Arc::new(store),
        })
    }

    /// The full key of `key` (below the prefix).
    fn full(&self, key: &str) -> Result<Key> {
        let full = if self.settings.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.settings.prefix)
        };
        Key::parse(&full).map_err(|e| {
            Error::bad_request(
                Code::OutsideWarehouse,
                format!("bad object key '{full}': {e}"),
            )
        })
    }

    /// The key below the prefix of a full key.
    fn relative(&self, full: &Key) -> String {
        let s = full.as_ref();
        if self.settings.prefix.is_empty() {
            s.to_string()
        } else {
            s.strip_prefix(&self.settings.prefix)
                .map(|r| r.trim_start_matches('/').to_string())
                .unwrap_or_else(|| s.to_string())
        }
    }

    /// A clear error for a failed operation `what` on `key`.
    fn error(&self, what: &str, key: &str, e: object_store::Error) -> Error {
        let place = format!(
            "s3://{}/{} at {}",
            self.settings.bucket,
            self.full(key).map(|k| k.to_string()).unwrap_or_default(),
            self.settings.endpoint_or_default()
        );
        let (kind, msg, hint) = match &e {
            // A file a table version names, gone: what gc does past the retention.
            object_store::Error::NotFound { .. } if what == "cannot read" => {
                return crate::error::collected(&place);
            }
            object_store::Error::NotFound { .. } => (
                Kind::NotFound,
                format!("{what} {place}: no such object"),
                None,
            ),
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => (
                Kind::Forbidden,
                format!("{what} {place}: access denied ({e})"),
                Some(format!(
                    "check the key ({}, from the {}) and its permissions on the bucket",
                    self.settings.access_key_id, self.settings.credentials_from
                )),
            ),
            _ => (
                Kind::Unavailable,
                format!("{what} {place} failed: {e}"),
                Some("is the S3 server up and reachable? lh retried 3 times".to_string()),
            ),
        };
        let mut err = Error::new(kind, Code::ObjectStore, msg);
        err.hint = hint;
        err
    }

    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<Option<String>> {
        timed("put", key, async {
            let r = self
                .store
                .put(&self.full(key)?, PutPayload::from_bytes(bytes))
                .await
                .map_err(|e| self.error("cannot write", key, e))?;
            Ok(r.e_tag)
        })
        .await
    }

    /// Uploads a local file (in parts, several at once, when it is large); returns the
    /// object's ETag. A failed upload is aborted: no object appears.
    pub async fn upload(&self, key: &str, path: &Path) -> Result<Option<String>> {
        timed("upload", key, async {
            let size = tokio::fs::metadata(path).await?.len();
            if size <= MULTIPART_ABOVE {
                let bytes = tokio::fs::read(path).await?;
                return self.put(key, Bytes::from(bytes)).await;
            }
            let full = self.full(key)?;
            let upload = self
                .store
                .put_multipart(&full)
                .await
                .map_err(|e| self.error("cannot start an upload of", key, e))?;
            let part = PART_BYTES.max(size.div_ceil(9_000)) as usize;
            let mut w = WriteMultipart::new_with_chunk_size(upload, part);
            let mut file = tokio::fs::File::open(path).await?;
            let mut buf = vec![0u8; 1 << 20];
            let sent: Result<()> = async {
                loop {
                    let n = file.read(&mut buf).await?;
                    if n == 0 {
                        break;
                    }
                    w.wait_for_capacity(PARTS_IN_FLIGHT)
                        .await
                        .map_err(|e| self.error("cannot upload", key, e))?;
                    w.write(&buf[..n]);
                }
                Ok(())
            }
            .await;
            // Every part sent before completing: a failed one aborts the upload, so that no
            // unfinished upload stays behind in the bucket.
            let sent = match sent {
                Ok(()) => w
                    .wait_for_capacity(0)
                    .await
                    .map_err(|e| self.error("cannot upload", key, e)),
                Err(e) => Err(e),
            };
            if let Err(e) = sent {
                let _ = w.abort().await;
                return Err(e);
            }
            let r = w
                .finish()
                .await
                .map_err(|e| self.error("cannot finish the upload of", key, e))?;
            Ok(r.e_tag)
        })
        .await
    }

    pub async fn get(&self, key: &str) -> Result<Bytes> {
        timed("get", key, async {
            let r = self
                .store
                .get(&self.full(key)?)
                .await
                .map_err(|e| self.error("cannot read", key, e))?;
            r.bytes()
                .await
                .map_err(|e| self.error("cannot read", key, e))
        })
        .await
    }

    /// Bytes `range` of `key`, only from the version with ETag `etag` when given.
    pub async fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
    ) -> Result<(Bytes, ObjectMeta)> {
        timed("get range", key, async {
            let opts = GetOptions {
                range: Some(GetRange::Bounded(range)),
                if_match: etag.map(str::to_string),
                ..Default::default()
            };
            let r = self
                .store
                .get_opts(&self.full(key)?, opts)
                .await
                .map_err(|e| self.error("cannot read", key, e))?;
            let meta = r.meta.clone();
            let bytes = r
                .bytes()
                .await
                .map_err(|e| self.error("cannot read", key, e))?;
            Ok((bytes, meta))
        })
        .await
    }

    pub async fn head(&self, key: &str) -> Result<Object> {
        timed("head", key, async {
            let m = self
                .store
                .head(&self.full(key)?)
                .await
                .map_err(|e| self.error("cannot look up", key, e))?;
            Ok(self.object(m))
        })
        .await
    }

    pub async fn exists(&self, key: &str) -> Result<bool> {
        timed("head", key, async {
            match self.store.head(&self.full(key)?).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(self.error("cannot look up", key, e)),
            }
        })
        .await
    }

    fn object(&self, m: ObjectMeta) -> Object {
        Object {
            key: self.relative(&m.location),
            size: m.size,
            modified: m.last_modified.into(),
            etag: m.e_tag,
        }
    }

    /// Every object below `key_prefix` (a folder: `""` is the whole warehouse).
    pub async fn list(&self, key_prefix: &str) -> Result<Vec<Object>> {
        timed("list", key_prefix, async {
            let prefix = if key_prefix.is_empty() && self.settings.prefix.is_empty() {
                None
            } else {
                Some(self.full(key_prefix.trim_end_matches('/'))?)
            };
            let found: Vec<ObjectMeta> = self
                .store
                .list(prefix.as_ref())
                .try_collect()
                .await
                .map_err(|e| self.error("cannot list", key_prefix, e))?;
            Ok(found.into_iter().map(|m| self.object(m)).collect())
        })
        .await
    }

    /// Removes an object; one that is not there is not an error.
    pub async fn delete(&self, key: &str) -> Result<()> {
        timed("delete", key, async {
            match self.store.delete(&self.full(key)?).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.error("cannot remove", key, e)),
            }
        })
        .await
    }

    /// Removes objects, several requests at once; the first error is returned after
    /// every removal was tried.
    pub async fn delete_many(&self, keys: Vec<String>) -> Result<()> {
        let jobs: Vec<_> = keys
            .into_iter()
            .map(|k| {
                let b = self.clone();
                async move { b.delete(&k).await }
            })
            .collect();
        let results: Vec<Result<()>> = futures::stream::iter(jobs)
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Checks at start-up that the key may write, read, list and remove in the
    /// warehouse, with a probe object; says which permission is missing.
    pub async fn probe(&self) -> Result<()> {
        let key = format!(".lh-probe/{}", uuid::Uuid::new_v4().simple());
        let body = Bytes::from_static(b"lh probe");
        let step = |what: &'static str| {
            move |e: Error| {
                let mut err = Error::new(
                    e.kind,
                    Code::ObjectStore,
                    format!(
                        "the S3 warehouse {} is not usable: {what} failed: {}",
                        self.settings.url(),
                        e.message
                    ),
                );
                err.hint = e.hint;
                err
            }
        };
        self.put(&key, body.clone()).await.map_err(step("write"))?;
        let read = self.get(&key).await.map_err(step("read"));
        let listed = self.list(".lh-probe").await.map_err(step("list"));
        let deleted = self.delete(&key).await.map_err(step("remove"));
        if read? != body {
            return Err(Error::new(
                Kind::Unavailable,
                Code::ObjectStore,
                "the S3 warehouse returned other bytes than it was given",
            ));
        }
        if !listed?.iter().any(|o| o.key == key) {
            return Err(Error::new(
                Kind::Unavailable,
                Code::ObjectStore,
                "the S3 warehouse does not list an object just written",
            ));
        }
        deleted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn urls_name_a_bucket_and_a_clean_prefix() {
        assert_eq!(
            parse_url("s3://lh-data/wh/"),
            Some(("lh-data".into(), "wh".into()))
        );
        assert_eq!(
            parse_url("s3a://lh-data"),
            Some(("lh-data".into(), "".into()))
        );
        assert_eq!(parse_url("s3://b/a/b"), None, "bucket too short");
        for bad in [
            "s3://Bad_Bucket/x",
            "s3://lh-data/a//b",
            "s3://lh-data/../x",
            "gs://x/y",
        ] {
            assert_eq!(parse_url(bad), None, "{bad}");
        }
    }

    #[test]
    fn settings_come_from_the_environment_before_the_profile() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = PROFILEKEY\naws_secret_access_key = psecret\n\
             [team]\naws_access_key_id = TEAMKEY\naws_secret_access_key = tsecret\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".aws/config"),
            "[profile team]\nregion = eu-west-3\nendpoint_url = http://127.0.0.1:3900\n\
             s3 =\n  addressing_style = path\n",
        )
        .unwrap();
        let s = S3Settings::from_sources(
            "s3://lh-data/wh",
            false,
            &env(&[("AWS_PROFILE", "team")]),
            Some(home.path()),
        )
        .unwrap();
        assert_eq!(s.access_key_id, "TEAMKEY");
        assert_eq!(s.region, "eu-west-3");
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:3900"));
        assert!(s.path_style);
        assert_eq!(s.credentials_from, "profile team");
        assert!(!format!("{s:?}").contains("tsecret"), "no secret in Debug");

        let s = S3Settings::from_sources(
            "s3://lh-data",
            false,
            &env(&[
                ("AWS_ACCESS_KEY_ID", "ENVKEY"),
                ("AWS_SECRET_ACCESS_KEY", "esecret"),
                ("AWS_REGION", "auto"),
            ]),
            Some(home.path()),
        )
        .unwrap();
        assert_eq!(
            (s.access_key_id.as_str(), s.region.as_str()),
            ("ENVKEY", "auto")
        );
        assert!(!s.path_style && s.endpoint.is_none());

        let none = tempfile::tempdir().unwrap();
        let e = S3Settings::from_sources("s3://lh-data", false, &env(&[]), Some(none.path()))
            .unwrap_err();
        assert!(e.message.contains("no credentials"), "{}", e.message);
        let e = S3Settings::from_sources(
            "s3://lh-data",
            false,
            &env(&[
                ("AWS_ACCESS_KEY_ID", "k"),
                ("AWS_SECRET_ACCESS_KEY", "s"),
                ("AWS_ENDPOINT_URL", "ftp://x"),
            ]),
            None,
        )
        .unwrap_err();
        assert!(e.message.contains("not an http"), "{}", e.message);
    }
}
