//! A loaded table's answer (load, create, register, commit), sent in pieces: the table's
//! metadata is encoded once for all the answers that send one file at the same time,
//! and what that encoding holds is charged to the server's answer memory
//! (`--answer-memory`, `query/memory.rs`) until the last of them is sent. A table's
//! metadata can be 64 MiB of JSON (`commit::MAX_METADATA_BYTES`): the thirty-seventh
//! review's 22 loads of one such table at once, each encoded on its own and charged to
//! nothing, took the server to 1.9 GB.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use iceberg::spec::TableMetadata;

use crate::error::{Error, Result};
use crate::query::memory::{AnswerMemory, Charge};

/// The encodings being sent, by metadata location (cheap to share).
#[derive(Default)]
pub struct MetadataAnswers {
    live: Mutex<HashMap<String, Weak<Encoding>>>,
}

/// One file's metadata as JSON, once encoded, and its charge.
struct Encoding {
    json: tokio::sync::OnceCell<Bytes>,
    charge: Mutex<Charge>,
}

/// The JSON of an encoding, keeping it (and its charge) while a piece of an answer.
struct Held {
    json: Bytes,
    _encoding: Arc<Encoding>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.json
    }
}

/// What an answer says besides the metadata.
pub struct Answer {
    pub location: Option<String>,
    pub metadata: Arc<TableMetadata>,
    /// The metadata file's size as JSON, when known: what encoding it takes is charged
    /// before it is made.
    pub size: Option<u64>,
    /// `None` for a commit's answer, which has none.
    pub config: Option<BTreeMap<String, String>>,
    pub storage_credentials: Vec<serde_json::Value>,
}

impl MetadataAnswers {
    /// `answer` as a response, its metadata charged to `memory` for `caller` unless an
    /// answer being sent holds the same file's.
    pub async fn respond(
        &self,
        memory: &AnswerMemory,
        caller: &str,
        answer: Answer,
    ) -> Result<Response> {
        let metadata = self
            .encoded(memory, caller, answer.location.as_deref(), &answer)
            .await?;
        let mut head = serde_json::Map::new();
        if let Some(l) = &answer.location {
            head.insert("metadata-location".into(), l.clone().into());
        }
        let mut tail = serde_json::Map::new();
        if let Some(config) = &answer.config {
            tail.insert(
                "config".into(),
                serde_json::to_value(config).map_err(encoding_failed)?,
            );
        }
        if !answer.storage_credentials.is_empty() {
            tail.insert(
                "storage-credentials".into(),
                answer.storage_credentials.into(),
            );
        }
        // `{"metadata-location":…,"metadata":` + the metadata + `,"config":…}`.
        let mut first = serde_json::to_vec(&head).map_err(encoding_failed)?;
        first.pop();
        if !head.is_empty() {
            first.push(b',');
        }
        first.extend_from_slice(b"\"metadata\":");
        let mut last = serde_json::to_vec(&tail).map_err(encoding_failed)?;
        if tail.is_empty() {
            last = b"}".to_vec();
        } else {
            last[0] = b',';
        }
        let pieces = vec![Bytes::from(first), metadata, Bytes::from(last)];
        let mut resp =
            axum::body::Body::new(crate::query::ipc::IpcBody::from_pieces(pieces)).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }

    /// The metadata's JSON, shared with any answer sending the same file now.
    async fn encoded(
        &self,
        memory: &AnswerMemory,
        caller: &str,
        location: Option<&str>,
        answer: &Answer,
    ) -> Result<Bytes> {
        let fresh = || {
            Arc::new(Encoding {
                json: tokio::sync::OnceCell::new(),
                charge: Mutex::new(memory.charge_for(Some(caller))),
            })
        };
        let encoding = match location {
            None => fresh(),
            Some(l) => {
                let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
                match live.get(l).and_then(Weak::upgrade) {
                    Some(e) => e,
                    None => {
                        if live.len() >= 1024 {
                            live.retain(|_, e| e.strong_count() > 0);
                        }
                        let e = fresh();
                        live.insert(l.to_string(), Arc::downgrade(&e));
                        e
                    }
                }
            }
        };
        let json = encoding
            .json
            .get_or_try_init(|| async {
                let charge = |bytes: u64| {
                    encoding
                        .charge
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .set(bytes)
                };
                // While it is made, the encoding holds the metadata as a JSON tree and
                // as text: some three times the text.
                charge(3 * answer.size.unwrap_or(0))?;
                let metadata = answer.metadata.clone();
                let json = tokio::task::spawn_blocking(move || served_bytes(&metadata))
                    .await
                    .map_err(encoding_failed)??;
                charge(json.len() as u64)?;
                Ok::<_, Error>(json)
            })
            .await?
            .clone();
        Ok(Bytes::from_owner(Held {
            json,
            _encoding: encoding,
        }))
    }
}

/// [`super::types::served`] as text.
fn served_bytes(metadata: &TableMetadata) -> Result<Bytes> {
    Ok(serde_json::to_vec(&super::types::served(metadata))
        .map_err(encoding_failed)?
        .into())
}

fn encoding_failed(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("cannot encode table metadata: {e}"))
}
