//! The [`Store`] trait and what passes through it: ref rows, ref updates and the write
//! batch that applies them atomically with the objects they need.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::model::{Hash, RefKind};

/// A ref as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRow {
    pub name: String,
    pub kind: RefKind,
    pub head: Hash,
}

/// One change of a ref: create (`expected: None`), move, or delete (`new: None`).
#[derive(Debug, Clone)]
pub struct RefUpdate {
    pub name: String,
    pub kind: RefKind,
    pub expected: Option<Hash>,
    pub new: Option<Hash>,
    /// The move leaves the history of `expected` (a branch assigned back or elsewhere):
    /// the ref log records the head it left, as a deletion does.
    pub rewinds: bool,
}

/// Everything one catalog operation writes, applied atomically or not at all.
#[derive(Debug, Default)]
pub struct WriteBatch {
    pub nodes: Vec<(Hash, Vec<u8>)>,
    pub commits: Vec<(Hash, Vec<u8>)>,
    pub refs: Vec<RefUpdate>,
    /// The time recorded in the ref log.
    pub at: DateTime<Utc>,
}

/// Why a batch was not written.
#[derive(Debug)]
pub enum WriteError {
    /// A ref was not where the update expected it (moved, created or deleted meanwhile).
    RefMoved {
        name: String,
    },
    Other(Error),
}

impl From<Error> for WriteError {
    fn from(e: Error) -> Self {
        WriteError::Other(e)
    }
}

/// The storage behind a catalog.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The stored bytes of these tree nodes; unknown ids are left out.
    async fn nodes(&self, ids: &[Hash]) -> Result<Vec<(Hash, Vec<u8>)>>;
    /// The stored bytes of these commits; unknown ids are left out.
    async fn commits(&self, ids: &[Hash]) -> Result<Vec<(Hash, Vec<u8>)>>;
    /// Up to `limit` stored tree nodes with an id above `after`, in id order: a scan of
    /// every node ever written, a page at a time.
    async fn nodes_after(&self, after: Option<Hash>, limit: usize) -> Result<Vec<(Hash, Vec<u8>)>>;
    /// Up to `limit` commit ids whose id lies within `[lo, hi]` (a hex prefix's range).
    async fn commits_in_range(&self, lo: Hash, hi: Hash, limit: usize) -> Result<Vec<Hash>>;
    async fn reference(&self, name: &str) -> Result<Option<RefRow>>;
    async fn references(&self) -> Result<Vec<RefRow>>;
    /// The last change of ref `name` at or before `at`: its kind and head (`None` if
    /// the change deleted it), or `None` when the ref had no change by then.
    async fn reference_at(
        &self,
        name: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<(RefKind, Option<Hash>)>>;
    /// Whether ref `name` was deleted after `at` (its ref log holds a deletion since).
    async fn deleted_since(&self, name: &str, at: DateTime<Utc>) -> Result<bool>;
    /// The heads ref `name` left without keeping them in its history (assigned
    /// elsewhere, or deleted), the latest first, at most `limit`.
    async fn left_heads(&self, name: &str, limit: usize) -> Result<Vec<Hash>>;
    /// The names of refs that left a head and do not exist now (deleted), matching the
    /// SQL `LIKE` pattern `like` (with `\\` as its escape), at most `limit`.
    async fn deleted_names(&self, like: &str, limit: usize) -> Result<Vec<String>>;
    /// Writes the objects and applies every ref update, or nothing.
    async fn write(&self, batch: WriteBatch) -> Result<(), WriteError>;
    /// A short description for logs and `lh info` (never a password).
    fn describe(&self) -> String;
}
