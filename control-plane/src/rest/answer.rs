//! A loaded table's answer (load, create, register, commit), sent in pieces: the table's
//! metadata is encoded once for all the answers that send one file at the same time,
//! and each caller holding one is charged for it in the server's answer memory
//! (`--answer-memory`, `query/memory.rs`, once however many of its answers hold it)
//! until its last is sent: one caller's share never pays for, or refuses, another's. A table's
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

/// One file's metadata as JSON, once encoded, and who holds answers of it: each caller
/// is charged once for it, for as long as one of its answers holds it.
struct Encoding {
    json: tokio::sync::OnceCell<Bytes>,
    holders: Mutex<HashMap<String, (usize, Charge)>>,
}

impl Encoding {
    /// Charges `caller` for holding `json` (nothing more when it holds it already).
    fn hold(
        self: &Arc<Self>,
        memory: &AnswerMemory,
        caller: &str,
        json: &Bytes,
        reserved: Option<Charge>,
    ) -> Result<Held> {
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        match holders.get_mut(caller) {
            Some((n, _)) => *n += 1,
            None => {
                let charge = match reserved {
                    Some(mut charge) => {
                        charge.set_anyway(json.len() as u64);
                        charge
                    }
                    None => {
                        let mut charge = memory.charge_for(Some(caller));
                        charge.grow(json.len() as u64)?;
                        charge
                    }
                };
                holders.insert(caller.to_string(), (1, charge));
            }
        }
        Ok(Held {
            json: json.clone(),
            encoding: self.clone(),
            caller: caller.to_string(),
        })
    }
}

/// The JSON of an encoding as a piece of one caller's answer, keeping the encoding and
/// that caller's charge for it until the piece is sent.
struct Held {
    json: Bytes,
    encoding: Arc<Encoding>,
    caller: String,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.json
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut holders = self
            .encoding
            .holders
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some((n, _)) = holders.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                holders.remove(&self.caller);
            }
        }
    }
}

/// What an answer says besides the metadata.
pub struct Answer {
    pub location: Option<String>,
    pub metadata: Arc<TableMetadata>,
    /// The metadata file's size as JSON (or an estimate): what encoding it takes is
    /// charged before it is made.
    pub size: u64,
    /// `None` for a commit's answer, which has none.
    pub config: Option<BTreeMap<String, String>>,
    pub storage_credentials: Vec<serde_json::Value>,
    /// For the answer of a change already made (a commit, a create): its charge, taken
    /// before the change (see [`reserve`]). The answer is sent on it whatever its size
    /// turns out to be: refused, its client would take the change for failed and may
    /// make it again (the thirty-ninth review: a commit applied, then answered 503);
    /// uncharged, unread answers of changes held gigabytes (the fortieth).
    pub reserved: Option<Charge>,
}

impl MetadataAnswers {
    /// `answer` as a response, its metadata charged to `memory` for `caller` unless an
    /// answer being sent holds the same file's.
    pub async fn respond(
        &self,
        memory: &AnswerMemory,
        caller: &str,
        mut answer: Answer,
    ) -> Result<Response> {
        let location = answer.location.clone();
        let metadata = self
            .encoded(memory, caller, location.as_deref(), &mut answer)
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
        answer: &mut Answer,
    ) -> Result<Bytes> {
        let fresh = || {
            Arc::new(Encoding {
                json: tokio::sync::OnceCell::new(),
                holders: Mutex::new(HashMap::new()),
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
        // Made by one of the callers waiting for it, charged to that caller while it is
        // made: the metadata as a JSON tree and as text, some three times the text.
        let json = encoding
            .json
            .get_or_try_init(|| async {
                let mut making = memory.charge_for(Some(caller));
                // (a change's answer is made whatever it takes: its charge was reserved)
                if let Err(e) = making.grow(3 * answer.size)
                    && answer.reserved.is_none()
                {
                    return Err(e);
                }
                let metadata = answer.metadata.clone();
                tokio::task::spawn_blocking(move || served_bytes(&metadata))
                    .await
                    .map_err(encoding_failed)?
            })
            .await?
            .clone();
        Ok(Bytes::from_owner(encoding.hold(
            memory,
            caller,
            &json,
            answer.reserved.take(),
        )?))
    }
}

/// The charge of a change's answer, taken before the change: `bytes`, what its metadata
/// is expected to take. Refused (503) while the caller's answers hold its share, so
/// that nothing is changed whose answer could not be held.
pub fn reserve(memory: &AnswerMemory, caller: &str, bytes: u64) -> Result<Charge> {
    let mut charge = memory.charge_for(Some(caller));
    charge.grow(bytes.max(1))?;
    Ok(charge)
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

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::TableCreation;
    use iceberg::spec::{NestedField, PrimitiveType, Schema, TableMetadataBuilder, Type};

    fn metadata() -> Arc<TableMetadata> {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        let creation = TableCreation::builder()
            .name("t".into())
            .location("file:///w/t".into())
            .schema(schema)
            .build();
        Arc::new(
            TableMetadataBuilder::from_table_creation(creation)
                .unwrap()
                .build()
                .unwrap()
                .metadata,
        )
    }

    fn answer(m: &Arc<TableMetadata>) -> Answer {
        Answer {
            location: Some("file:///w/t/metadata/00000.metadata.json".into()),
            metadata: m.clone(),
            size: 100,
            config: None,
            storage_credentials: Vec::new(),
            reserved: None,
        }
    }

    /// The thirty-eighth review: a shared answer was charged to the caller who asked
    /// first, for as long as anyone held it. Each caller holding one is charged for it,
    /// and only while it does.
    #[tokio::test]
    async fn each_caller_holding_a_shared_answer_is_charged_for_it() {
        let memory = AnswerMemory::new(1 << 20);
        let answers = MetadataAnswers::default();
        let m = metadata();
        let a1 = answers
            .encoded(&memory, "alice", Some("l"), &mut answer(&m))
            .await
            .unwrap();
        let len = a1.len() as u64;
        assert_eq!(memory.used(), len);
        // Alice's second answer of it costs her nothing more; Bob's is his.
        let a2 = answers
            .encoded(&memory, "alice", Some("l"), &mut answer(&m))
            .await
            .unwrap();
        let b = answers
            .encoded(&memory, "bob", Some("l"), &mut answer(&m))
            .await
            .unwrap();
        assert_eq!(memory.used(), 2 * len);
        assert_eq!(
            (a1.as_ptr(), a2.as_ptr()),
            (b.as_ptr(), b.as_ptr()),
            "one encoding"
        );
        drop((a1, a2));
        assert_eq!(memory.used(), len, "alice's charge ends with her answers");
        drop(b);
        assert_eq!(memory.used(), 0);
        // A caller whose share is full is refused; another is not.
        let tight = AnswerMemory::new(4 * len);
        let mut full = tight.charge_for(Some("mallory"));
        full.grow(3 * len - 1).unwrap();
        let err = answers
            .encoded(&tight, "mallory", Some("l"), &mut answer(&m))
            .await
            .unwrap_err();
        assert_eq!(err.code, crate::error::Code::AnswerMemoryFull);
        // The answer of a change already made is sent on its reservation, even when it
        // turns out larger; what it holds past the share refuses mallory's next charge.
        let mut made = answer(&m);
        made.reserved = Some(reserve(&tight, "mallory", 1).unwrap());
        let sent = answers
            .encoded(&tight, "mallory", Some("l"), &mut made)
            .await
            .unwrap();
        assert_eq!(sent.len() as u64, len);
        assert_eq!(tight.used(), 4 * len - 1);
        assert!(reserve(&tight, "mallory", 1).is_err());
        drop(full);
        let b = answers
            .encoded(&tight, "bob", Some("l"), &mut answer(&m))
            .await
            .unwrap();
        assert_eq!(tight.used(), 2 * len);
        drop((b, sent));
        assert_eq!(tight.used(), 0);
    }
}
