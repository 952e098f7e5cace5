//! The catalog's domain types: content hashes, table pointers, commits, references and
//! the requests that change them.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};

use crate::error::{Error, ErrorKind, Result};

/// A BLAKE3 content hash. Commits and tree nodes are stored under the hash of their
/// canonical encoding, so equal content has equal ids on every backend.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hash(pub(crate) [u8; 32]);

/// A commit's id: the hash of its encoding.
pub type CommitId = Hash;

impl Hash {
    pub(crate) fn of(bytes: &[u8]) -> Hash {
        Hash(*blake3::hash(bytes).as_bytes())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The full 64-character lowercase hex form.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from_digit((b >> 4) as u32, 16).unwrap_or('0'));
            s.push(char::from_digit((b & 15) as u32, 16).unwrap_or('0'));
        }
        s
    }

    /// The hash written as 64 hex digits (either case), or `None`. `str::parse` gives
    /// the catalog's error instead (`error.rs`, which builds on this module).
    pub(crate) fn from_hex(s: &str) -> Option<Hash> {
        if s.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, chunk) in s.as_bytes().chunks(2).enumerate() {
            let hi = (chunk[0] as char).to_digit(16)?;
            let lo = (chunk[1] as char).to_digit(16)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Some(Hash(out))
    }

    /// The first 12 hex characters, for display.
    pub fn short(&self) -> String {
        let mut s = self.to_hex();
        s.truncate(12);
        s
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.short())
    }
}

/// A stored node of the table tree (`tree.rs`). `children.len() == entries.len() + 1`;
/// at level 0 every child is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub level: u8,
    pub entries: Vec<(String, TablePointer)>,
    pub children: Vec<Option<Hash>>,
}

/// Where a table's current state lives: the Iceberg metadata file, the table's uuid and
/// the snapshot that file makes current (`None` for a table with no snapshot yet).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TablePointer {
    pub metadata_location: String,
    pub table_uuid: String,
    pub snapshot_id: Option<i64>,
}

/// A commit: an immutable state of every table, with its history and provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub id: CommitId,
    /// One parent for a plain commit, two for a merge (the target first), none for the root.
    pub parents: Vec<CommitId>,
    pub author: String,
    pub message: String,
    pub timestamp: DateTime<Utc>,
    pub properties: BTreeMap<String, String>,
    /// The root of the table tree (`None` when the catalog holds no table).
    pub(crate) tree: Option<Hash>,
    /// Length of the first-parent chain down to the root commit.
    pub(crate) depth: u64,
    /// 1 + the largest generation of the parents: a child always has a larger one.
    pub(crate) generation: u64,
    /// A first-parent ancestor at a power-of-two-ish distance, for O(log n) ancestor walks.
    pub(crate) skip: Option<CommitId>,
}

impl Commit {
    /// The number of commits on the first-parent chain below this one.
    pub fn depth(&self) -> u64 {
        self.depth
    }
}

/// Whether a reference can move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefKind {
    Branch,
    Tag,
}

impl RefKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RefKind::Branch => "branch",
            RefKind::Tag => "tag",
        }
    }
}

impl fmt::Display for RefKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named reference and the commit it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub name: String,
    pub kind: RefKind,
    pub head: CommitId,
}

/// What a retention policy keeps (`Catalog::retained_commits`).
#[derive(Debug, Clone, Default)]
pub struct Retained {
    /// The head of every ref.
    pub heads: Vec<Commit>,
    /// Every other commit kept.
    pub commits: Vec<Commit>,
}

/// A ref expression resolved to one commit.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub commit: Commit,
    /// The named ref the expression started from (`None` for `@<hash>`).
    pub reference: Option<Reference>,
    /// True when the expression names a branch's current head (`main`, not `main@...`):
    /// only such a ref can be written to.
    pub is_branch_head: bool,
}

/// One change to one table in a commit, with the state the writer expects to replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableOp {
    /// Create (expected `None`) or update (expected `Some`) a table.
    Put {
        table: String,
        expected: Option<TablePointer>,
        pointer: TablePointer,
    },
    /// Remove a table that is expected to be at `expected`.
    Delete {
        table: String,
        expected: TablePointer,
    },
}

impl TableOp {
    pub fn table(&self) -> &str {
        match self {
            TableOp::Put { table, .. } | TableOp::Delete { table, .. } => table,
        }
    }

    pub(crate) fn expected(&self) -> Option<&TablePointer> {
        match self {
            TableOp::Put { expected, .. } => expected.as_ref(),
            TableOp::Delete { expected, .. } => Some(expected),
        }
    }

    pub(crate) fn new_value(&self) -> Option<&TablePointer> {
        match self {
            TableOp::Put { pointer, .. } => Some(pointer),
            TableOp::Delete { .. } => None,
        }
    }
}

/// Who made a change and why; recorded in the commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitMeta {
    pub author: String,
    pub message: String,
    pub properties: BTreeMap<String, String>,
}

impl CommitMeta {
    pub fn new(author: impl Into<String>, message: impl Into<String>) -> Self {
        CommitMeta {
            author: author.into(),
            message: message.into(),
            properties: BTreeMap::new(),
        }
    }

    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// Refuses a message or properties past [`MAX_COMMIT_META_BYTES`] each: a commit
    /// keeps them for good, and every log, graph and bisect of its history reads them
    /// (the thirty-sixth review: merges with 15 MB messages and 14 MB of properties
    /// made a log page 78 MB).
    pub fn check(&self) -> Result<()> {
        let props: usize = self.properties.iter().map(|(k, v)| k.len() + v.len()).sum();
        for (what, size) in [("message", self.message.len()), ("properties", props)] {
            if size > MAX_COMMIT_META_BYTES {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "a commit's {what} hold {size} bytes; at most {MAX_COMMIT_META_BYTES} (64 KiB)"
                    ),
                ));
            }
        }
        if self.author.len() > MAX_AUTHOR_BYTES {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a commit's author is at most {MAX_AUTHOR_BYTES} bytes"),
            ));
        }
        Ok(())
    }
}

/// A message lh writes itself (an import's file names, a transaction's tables), cut to
/// fit [`MAX_COMMIT_META_BYTES`] with a word of what was left out: a client's own
/// message past it is refused ([`CommitMeta::check`]), lh's own never (the
/// thirty-seventh review: a REST transaction of 330 tables, and an import of a file with
/// a 70 KB name, were refused once their data was written).
pub fn shortened_message(message: String) -> String {
    const ROOM: usize = MAX_COMMIT_META_BYTES - 64;
    if message.len() <= ROOM {
        return message;
    }
    let mut cut = ROOM;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{} ... ({} more bytes)",
        &message[..cut],
        message.len() - cut
    )
}

/// The most a commit's message, and its properties together, may hold.
pub const MAX_COMMIT_META_BYTES: usize = 64 << 10;

/// The longest author a commit may name.
pub const MAX_AUTHOR_BYTES: usize = 1024;

/// A table present at a ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableEntry {
    pub name: String,
    pub pointer: TablePointer,
}

/// How one table differs between two refs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDiff {
    pub table: String,
    /// The pointer at the first ref (`None`: added).
    pub from: Option<TablePointer>,
    /// The pointer at the second ref (`None`: removed).
    pub to: Option<TablePointer>,
}

impl TableDiff {
    pub fn change(&self) -> DiffKind {
        match (&self.from, &self.to) {
            (None, _) => DiffKind::Added,
            (_, None) => DiffKind::Removed,
            _ => DiffKind::Changed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffKind {
    Added,
    Removed,
    Changed,
}

/// A page of history, newest first.
#[derive(Debug, Clone)]
pub struct LogPage {
    pub commits: Vec<Commit>,
    /// Pass back as [`LogQuery::page_token`] for the next page; `None` at the root.
    pub next_page_token: Option<String>,
}

/// What a log call returns: where to start, how many, and an optional property filter.
#[derive(Debug, Clone)]
pub struct LogQuery {
    pub page_token: Option<String>,
    pub limit: usize,
    /// Only commits whose properties hold all of these key/value pairs.
    pub properties: BTreeMap<String, String>,
    /// Only commits where this table changed: its pointer differs from the first
    /// parent's (added, removed or written).
    pub table: Option<String>,
    /// Stop before this commit (exclusive); a history that does not reach it is an
    /// error.
    pub until: Option<CommitId>,
}

impl Default for LogQuery {
    fn default() -> Self {
        LogQuery {
            page_token: None,
            limit: 50,
            properties: BTreeMap::new(),
            table: None,
            until: None,
        }
    }
}

/// The outcome of a merge.
#[derive(Debug, Clone)]
pub struct MergeOutcome {
    /// The head of the target branch after the merge.
    pub head: CommitId,
    pub kind: MergeKind,
    /// The tables the merge brought into the target.
    pub tables: Vec<TableDiff>,
    /// The target's head the merge was made against (its head before the merge).
    pub base_head: CommitId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeKind {
    /// The source was already contained in the target: nothing changed.
    UpToDate,
    /// The target had not moved since the merge base: it now points at the source.
    FastForward,
    /// A merge commit with both parents was made.
    MergeCommit,
}

/// Options of a merge.
#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    pub meta: CommitMeta,
    /// Fail with [`crate::ErrorKind::RefConflict`] unless the target is at this commit.
    pub expected_head: Option<CommitId>,
    /// Always make a merge commit, even when a fast-forward is possible.
    pub no_fast_forward: bool,
    /// Make the merge's commit but move no ref: the outcome's `head` is the commit the
    /// target would point at, to be checked and then assigned (expecting `base_head`).
    pub prepare: bool,
    /// Tables changed on both sides that the caller combined: each is taken as its
    /// `pointer` when the merge finds exactly the three versions it was made from;
    /// otherwise the table is a conflict as usual.
    pub resolutions: Vec<Resolution>,
    /// A table changed on both sides (and not resolved) is taken whole from this side
    /// (`None`: it is a conflict), unless `sides` names it.
    pub prefer: Option<Side>,
    /// Per table: the side a table changed on both sides is taken from.
    pub sides: std::collections::BTreeMap<String, Side>,
}

/// A side of a merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// What is merged (its version replaces the target's).
    Source,
    /// The branch merged into (it keeps its version).
    Target,
}

/// A table version that combines both sides of a merge (see [`MergeOptions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub table: String,
    /// The table at the merge base, at the target, and at the source.
    pub base: Option<TablePointer>,
    pub ours: Option<TablePointer>,
    pub theirs: Option<TablePointer>,
    pub pointer: TablePointer,
}

/// What [`crate::Catalog::check_integrity`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntegrityReport {
    pub refs: usize,
    pub commits: usize,
    pub nodes: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// lh's own long messages are cut to fit, at a character's boundary, and then pass
    /// the check a client's message is held to; a client's own long one is refused.
    #[test]
    fn long_messages_are_cut_when_lh_writes_them_and_refused_from_clients() {
        let long = format!("import t from {}", "é".repeat(40_000));
        let cut = shortened_message(long.clone());
        assert!(cut.len() <= MAX_COMMIT_META_BYTES, "{}", cut.len());
        assert!(cut.ends_with("more bytes)"), "{}", &cut[cut.len() - 40..]);
        assert!(CommitMeta::new("lh", cut).check().is_ok());
        let refused = CommitMeta::new("alice", long).check().unwrap_err();
        assert!(refused.to_string().contains("at most 65536"), "{refused}");
        assert_eq!(shortened_message("short".into()), "short");
    }
}
