//! The iceberg crate's FileIO over the S3 bucket: metadata files, manifest lists and
//! manifests are read and written through it (data files go through the warehouse's
//! upload and read cache instead).

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use serde::{Deserialize, Serialize};

use super::s3::Bucket;

/// A FileIO whose every path is an object of `bucket`. Metadata files, manifest lists
/// and manifests never change once written, so the small ones the server writes or
/// reads are kept in memory: a write that reads back what the previous one wrote (a
/// pipeline's next node, the next query's view) makes no round trip.
pub fn file_io(bucket: Bucket) -> (FileIO, Remembered) {
    let small = Arc::new(quick_cache::sync::Cache::new(SMALL_ENTRIES));
    let io = FileIOBuilder::new(Arc::new(S3Factory {
        storage: S3Storage {
            bucket: Some(bucket),
            small: Some(small.clone()),
        },
    }))
    .build();
    (io, Remembered(small))
}

/// A FileIO over `bucket` that keeps nothing in memory.
pub fn file_io_direct(bucket: Bucket) -> FileIO {
    FileIOBuilder::new(Arc::new(S3Factory {
        storage: S3Storage {
            bucket: Some(bucket),
            small: None,
        },
    }))
    .build()
}

/// The small files a [`file_io`] keeps in memory, for files written beside it.
#[derive(Clone)]
pub struct Remembered(Arc<SmallCache>);

impl std::fmt::Debug for Remembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remembered")
            .field("entries", &self.0.len())
            .finish()
    }
}

impl Remembered {
    /// Forgets `location` (a file removed).
    pub fn forget(&self, location: &str) {
        self.0.remove(location);
    }

    /// Keeps `bytes`, written at `location`, when they are small.
    pub fn keep(&self, location: &str, bytes: &Bytes) {
        if bytes.len() <= SMALL_BYTES {
            self.0.insert(location.to_string(), bytes.clone());
        }
    }
}

/// Objects up to this size are kept in memory, at most this many (64 MiB at worst).
const SMALL_BYTES: usize = 256 << 10;
const SMALL_ENTRIES: usize = 256;

type SmallCache = quick_cache::sync::Cache<String, Bytes>;

/// A storage factory for clients of an lh REST catalog (the iceberg crate's REST client
/// included): the bucket is reached with the `s3.*` properties the catalog's table
/// config carries (vended credentials, endpoint, region, path style).
pub fn client_storage_factory() -> Arc<dyn StorageFactory> {
    Arc::new(S3FromProps)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct S3FromProps;

#[typetag::serde]
impl StorageFactory for S3FromProps {
    fn build(&self, config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        let get = |k: &str| config.get(k).cloned();
        let missing = |k: &str| {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!("no {k} in the config"),
            )
        };
        let settings = super::s3::S3Settings {
            bucket: String::new(),
            prefix: String::new(),
            region: get("s3.region").unwrap_or_else(|| "us-east-1".into()),
            endpoint: get("s3.endpoint"),
            path_style: get("s3.path-style-access").is_some_and(|v| v == "true"),
            access_key_id: get("s3.access-key-id").ok_or_else(|| missing("s3.access-key-id"))?,
            secret_access_key: get("s3.secret-access-key")
                .ok_or_else(|| missing("s3.secret-access-key"))?,
            session_token: get("s3.session-token"),
            credentials_from: "vended".into(),
            timeout: std::time::Duration::from_secs(30),
        };
        Ok(Arc::new(PerBucket {
            settings,
            buckets: Default::default(),
        }))
    }
}

/// Objects of any bucket, each bucket's client made on first use.
#[derive(Debug, Serialize, Deserialize)]
struct PerBucket {
    #[serde(skip, default = "unset")]
    settings: super::s3::S3Settings,
    #[serde(skip)]
    buckets: std::sync::Mutex<std::collections::HashMap<String, S3Storage>>,
}

fn unset() -> super::s3::S3Settings {
    super::s3::S3Settings {
        bucket: String::new(),
        prefix: String::new(),
        region: String::new(),
        endpoint: None,
        path_style: false,
        access_key_id: String::new(),
        secret_access_key: String::new(),
        session_token: None,
        credentials_from: String::new(),
        timeout: std::time::Duration::from_secs(30),
    }
}

impl PerBucket {
    fn storage(&self, location: &str) -> iceberg::Result<S3Storage> {
        let (bucket, _) = super::s3::parse_url(location).ok_or_else(|| {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!("'{location}' is not an s3:// location"),
            )
        })?;
        let mut all = self.buckets.lock().expect("bucket lock");
        if let Some(s) = all.get(&bucket) {
            return Ok(s.clone());
        }
        let mut settings = self.settings.clone();
        settings.bucket = bucket.clone();
        let b = Bucket::connect(settings).map_err(err)?;
        let s = S3Storage {
            bucket: Some(b),
            small: None,
        };
        all.insert(bucket, s.clone());
        Ok(s)
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for PerBucket {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        self.storage(path)?.exists(path).await
    }
    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        self.storage(path)?.metadata(path).await
    }
    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.storage(path)?.read(path).await
    }
    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        self.storage(path)?.reader(path).await
    }
    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.storage(path)?.write(path, bs).await
    }
    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        self.storage(path)?.writer(path).await
    }
    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.storage(path)?.delete(path).await
    }
    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.storage(path)?.delete_prefix(path).await
    }
    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        while let Some(p) = paths.next().await {
            self.delete(&p).await?;
        }
        Ok(())
    }
    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(
            Arc::new(self.storage(path)?),
            path.to_string(),
        ))
    }
    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(
            Arc::new(self.storage(path)?),
            path.to_string(),
        ))
    }
}

fn err(e: crate::error::Error) -> iceberg::Error {
    iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.message)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct S3Factory {
    storage: S3Storage,
}

#[typetag::serde]
impl StorageFactory for S3Factory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.storage.clone()))
    }
}

/// Serializable because iceberg's storages are; the client is not carried across.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct S3Storage {
    #[serde(skip)]
    bucket: Option<Bucket>,
    #[serde(skip)]
    small: Option<Arc<SmallCache>>,
}

impl S3Storage {
    fn cached(&self, path: &str) -> Option<Bytes> {
        self.small.as_ref()?.get(path)
    }

    fn keep(&self, path: &str, bytes: &Bytes) {
        if let Some(c) = &self.small
            && bytes.len() <= SMALL_BYTES
        {
            c.insert(path.to_string(), bytes.clone());
        }
    }

    /// The bucket and the key below the warehouse prefix of `location`.
    fn at(&self, location: &str) -> iceberg::Result<(&Bucket, String)> {
        let bucket = self.bucket.as_ref().ok_or_else(|| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "the S3 client is not set up",
            )
        })?;
        let key = super::object_key(&bucket.settings, location).ok_or_else(|| {
            iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!(
                    "'{location}' is outside the warehouse {}",
                    bucket.settings.url()
                ),
            )
        })?;
        Ok((bucket, key))
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for S3Storage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        let (b, key) = self.at(path)?;
        b.exists(&key).await.map_err(err)
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        if let Some(bytes) = self.cached(path) {
            return Ok(FileMetadata {
                size: bytes.len() as u64,
            });
        }
        let (b, key) = self.at(path)?;
        let o = b.head(&key).await.map_err(err)?;
        Ok(FileMetadata { size: o.size })
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        if let Some(bytes) = self.cached(path) {
            return Ok(bytes);
        }
        let (b, key) = self.at(path)?;
        let bytes = b.get(&key).await.map_err(err)?;
        self.keep(path, &bytes);
        Ok(bytes)
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        let (b, key) = self.at(path)?;
        Ok(Box::new(Reader {
            bucket: b.clone(),
            key,
            cached: self.cached(path),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        let (b, key) = self.at(path)?;
        b.put(&key, bs.clone()).await.map_err(err)?;
        self.keep(path, &bs);
        Ok(())
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        let (b, key) = self.at(path)?;
        Ok(Box::new(Writer {
            bucket: b.clone(),
            key,
            buf: WriteBuffer::default(),
            keep: self.small.clone().map(|c| (c, path.to_string())),
        }))
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        let (b, key) = self.at(path)?;
        b.delete(&key).await.map_err(err)
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        let (b, key) = self.at(path)?;
        let keys = b
            .list(&key)
            .await
            .map_err(err)?
            .into_iter()
            .map(|o| o.key)
            .collect();
        b.delete_many(keys).await.map_err(err)
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        while let Some(p) = paths.next().await {
            self.delete(&p).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

struct Reader {
    bucket: Bucket,
    key: String,
    cached: Option<Bytes>,
}

#[async_trait]
impl FileRead for Reader {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        if let Some(all) = &self.cached
            && range.end <= all.len() as u64
        {
            return Ok(all.slice(range.start as usize..range.end as usize));
        }
        let (bytes, _) = self
            .bucket
            .get_range(&self.key, range, None)
            .await
            .map_err(err)?;
        Ok(bytes)
    }
}

/// Metadata files and manifests are small: buffered, and put as one object on close,
/// so that a failed write leaves no partial object.
struct Writer {
    bucket: Bucket,
    key: String,
    buf: WriteBuffer,
    /// Where to keep the written bytes, when small.
    keep: Option<(Arc<SmallCache>, String)>,
}

#[async_trait]
impl FileWrite for Writer {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        self.buf.push(&bs)
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        let bytes = self.buf.finish()?;
        self.bucket
            .put(&self.key, bytes.clone())
            .await
            .map_err(err)?;
        if let Some((cache, path)) = &self.keep
            && bytes.len() <= SMALL_BYTES
        {
            cache.insert(path.clone(), bytes);
        }
        Ok(())
    }
}

/// Files written to a [`capture_io`] FileIO, in the order they were closed.
#[derive(Debug, Clone, Default)]
pub struct Captured(Arc<std::sync::Mutex<Vec<(String, Bytes)>>>);

impl Captured {
    pub fn take(&self) -> Vec<(String, Bytes)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn push(&self, path: &str, bytes: Bytes) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((path.to_string(), bytes));
    }

    fn get(&self, path: &str) -> Option<Bytes> {
        let files = self.0.lock().unwrap_or_else(|e| e.into_inner());
        files
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, b)| b.clone())
    }
}

/// A FileIO that writes nowhere: what the iceberg crate's writers write to it (a
/// snapshot's manifests and manifest list) is kept in memory, for the caller to write
/// at once with the metadata file that names them: on object storage one round trip
/// instead of one per file, each waiting for the last.
pub fn capture_io() -> (FileIO, Captured) {
    let files = Captured::default();
    let io = FileIOBuilder::new(Arc::new(CaptureFactory {
        storage: CaptureStorage {
            files: files.clone(),
        },
    }))
    .build();
    (io, files)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CaptureFactory {
    storage: CaptureStorage,
}

#[typetag::serde]
impl StorageFactory for CaptureFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.storage.clone()))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CaptureStorage {
    #[serde(skip)]
    files: Captured,
}

impl CaptureStorage {
    fn captured(&self, path: &str) -> iceberg::Result<Bytes> {
        self.files.get(path).ok_or_else(|| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!(
                    "'{path}' was not written here (a capturing FileIO reads only what it took)"
                ),
            )
        })
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for CaptureStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        Ok(self.files.get(path).is_some())
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        Ok(FileMetadata {
            size: self.captured(path)?.len() as u64,
        })
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.captured(path)
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        Ok(Box::new(CapturedReader(self.captured(path)?)))
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.files.push(path, bs);
        Ok(())
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        Ok(Box::new(CaptureWriter {
            files: self.files.clone(),
            path: path.to_string(),
            buf: WriteBuffer::default(),
        }))
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.files
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, _)| p != path);
        Ok(())
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.files
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, _)| !p.starts_with(path));
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        while let Some(p) = paths.next().await {
            self.delete(&p).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

struct CapturedReader(Bytes);

#[async_trait]
impl FileRead for CapturedReader {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        if range.end > self.0.len() as u64 || range.start > range.end {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::DataInvalid,
                format!("range {range:?} is beyond {} bytes", self.0.len()),
            ));
        }
        Ok(self.0.slice(range.start as usize..range.end as usize))
    }
}

struct CaptureWriter {
    files: Captured,
    path: String,
    buf: WriteBuffer,
}

#[async_trait]
impl FileWrite for CaptureWriter {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        self.buf.push(&bs)
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        self.files.push(&self.path, self.buf.finish()?);
        Ok(())
    }
}

/// What a writer of small files (metadata, manifests) holds until it closes: the file
/// is put whole, so that a failed write leaves no partial object.
#[derive(Default)]
struct WriteBuffer {
    bytes: BytesMut,
    closed: bool,
}

impl WriteBuffer {
    fn push(&mut self, bs: &[u8]) -> iceberg::Result<()> {
        if self.closed {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "write after close",
            ));
        }
        self.bytes.extend_from_slice(bs);
        Ok(())
    }

    fn finish(&mut self) -> iceberg::Result<Bytes> {
        if std::mem::replace(&mut self.closed, true) {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "closed twice",
            ));
        }
        Ok(std::mem::take(&mut self.bytes).freeze())
    }
}
