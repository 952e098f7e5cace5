//! The catalog service: every versioning operation, written once over any [`Store`].
//!
//! Writes are optimistic. An operation reads the branch head, computes the new commit
//! (checking its per-table expectations against that head), and asks the store to move
//! the branch from that head to the new commit in the same transaction that stores the
//! new objects. When another writer moved the branch first, the operation starts again
//! from the new head: the per-table checks decide whether it still applies, so writers
//! on different tables never fail each other and no update is lost.

use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SubsecRound, Utc};
use tokio::sync::oneshot;

use crate::codec;
use crate::error::{Error, ErrorKind, Result, TableConflict};
use crate::model::*;
use crate::names::{validate_namespace, validate_ref_name, validate_table_name};
use crate::refexpr::RefExpr;
use crate::store::{
    PostgresStore, RefRow, RefUpdate, SqliteStore, SqliteSync, Store, WriteBatch, WriteError,
};
use crate::tree::{self, Missing};

/// The name of the branch every catalog starts with; it cannot be deleted.
pub const DEFAULT_BRANCH: &str = "main";

/// The longest a write keeps retrying against concurrent writers.
const RETRY_DEADLINE: Duration = Duration::from_secs(30);

/// The largest page of history.
pub const MAX_LOG_PAGE: usize = 1000;

/// Tuning of a catalog.
#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// How many tree nodes to keep decoded in memory.
    pub node_cache: u64,
    /// How many commits to keep decoded in memory.
    pub commit_cache: u64,
    /// Durability of the SQLite backend.
    pub sqlite_sync: SqliteSync,
}

impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            node_cache: 200_000,
            commit_cache: 200_000,
            sqlite_sync: SqliteSync::Full,
        }
    }
}

/// A versioned catalog of tables. Cloning is cheap and shares everything.
#[derive(Clone)]
pub struct Catalog {
    store: Arc<dyn Store>,
    nodes: Arc<quick_cache::sync::Cache<Hash, Arc<Node>>>,
    commits: Arc<quick_cache::sync::Cache<Hash, Arc<Commit>>>,
    /// Commit requests waiting for their branch's leader, by branch.
    queues: Arc<std::sync::Mutex<HashMap<String, Arc<std::sync::Mutex<Queue>>>>>,
}

/// The commit requests of one branch, and whether a leader is draining them.
#[derive(Default)]
struct Queue {
    pending: Vec<Request>,
    leader: bool,
}

struct Request {
    ops: Vec<TableOp>,
    meta: CommitMeta,
    reply: oneshot::Sender<Result<Commit>>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("store", &self.store.describe())
            .finish()
    }
}

impl Catalog {
    /// Opens the catalog at `url`: `sqlite:PATH` (or a plain path) or `postgres://...`,
    /// creating the schema and the `main` branch on first use.
    pub async fn open(url: &str) -> Result<Catalog> {
        Self::open_with(url, CatalogOptions::default()).await
    }

    pub async fn open_with(url: &str, options: CatalogOptions) -> Result<Catalog> {
        let store: Arc<dyn Store> = if url.starts_with("postgres://")
            || url.starts_with("postgresql://")
        {
            Arc::new(PostgresStore::open(url).await?)
        } else {
            let path = url
                .strip_prefix("sqlite://")
                .or_else(|| url.strip_prefix("sqlite:"))
                .unwrap_or(url);
            if path.is_empty() || path.contains("://") {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "unsupported catalog URL '{url}': use sqlite:PATH or postgres://USER@HOST/DB"
                    ),
                ));
            }
            Arc::new(SqliteStore::open(path, options.sqlite_sync).await?)
        };
        Self::with_store(store, &options).await
    }

    /// A catalog over any store; creates the `main` branch with an empty root commit
    /// when the store has no `main` yet.
    pub async fn with_store(store: Arc<dyn Store>, options: &CatalogOptions) -> Result<Catalog> {
        let catalog = Catalog {
            store,
            nodes: Arc::new(quick_cache::sync::Cache::new(options.node_cache as usize)),
            commits: Arc::new(quick_cache::sync::Cache::new(options.commit_cache as usize)),
            queues: Arc::default(),
        };
        if catalog.store.reference(DEFAULT_BRANCH).await?.is_none() {
            let mut root = catalog.make_commit(
                &[],
                None,
                CommitMeta::new("lh", "create the catalog"),
                Utc::now(),
            );
            let bytes = codec::encode_commit(&root);
            root.id = Hash::of(&bytes);
            let batch = WriteBatch {
                commits: vec![(root.id, bytes)],
                refs: vec![RefUpdate {
                    name: DEFAULT_BRANCH.into(),
                    kind: RefKind::Branch,
                    expected: None,
                    new: Some(root.id),
                }],
                at: root.timestamp,
                ..Default::default()
            };
            match catalog.store.write(batch).await {
                // Another process created it first: use theirs.
                Ok(()) | Err(WriteError::RefMoved { .. }) => {}
                Err(WriteError::Other(e)) => return Err(e),
            }
        }
        Ok(catalog)
    }

    /// Where the catalog is stored, for people (no secrets).
    pub fn describe(&self) -> String {
        self.store.describe()
    }

    // ---------------------------------------------------------------- refs

    /// Every branch and tag, by name.
    pub async fn list_refs(&self) -> Result<Vec<Reference>> {
        Ok(self
            .store
            .references()
            .await?
            .into_iter()
            .map(reference)
            .collect())
    }

    /// One branch or tag.
    pub async fn get_ref(&self, name: &str) -> Result<Reference> {
        validate_ref_name(name)?;
        self.store
            .reference(name)
            .await?
            .map(reference)
            .ok_or_else(|| not_found_ref(name))
    }

    /// Creates a branch at the commit `from` resolves to. O(1): no data is copied.
    pub async fn create_branch(&self, name: &str, from: &str) -> Result<Reference> {
        self.create_ref(name, RefKind::Branch, from).await
    }

    /// Creates a tag at the commit `from` resolves to. Tags never move.
    pub async fn create_tag(&self, name: &str, from: &str) -> Result<Reference> {
        self.create_ref(name, RefKind::Tag, from).await
    }

    async fn create_ref(&self, name: &str, kind: RefKind, from: &str) -> Result<Reference> {
        validate_ref_name(name)?;
        let target = self.resolve(from).await?;
        let update = RefUpdate {
            name: name.into(),
            kind,
            expected: None,
            new: Some(target.commit.id),
        };
        match self.write(vec![], vec![], vec![update]).await {
            Ok(()) => Ok(Reference {
                name: name.into(),
                kind,
                head: target.commit.id,
            }),
            Err(WriteError::RefMoved { .. }) => {
                let existing = self.store.reference(name).await?;
                let what = existing.map(|r| r.kind.as_str()).unwrap_or("ref");
                Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("a {what} named '{name}' already exists"),
                ))
            }
            Err(WriteError::Other(e)) => Err(e),
        }
    }

    /// Deletes a branch; with `expected`, only if it is still at that commit.
    pub async fn delete_branch(&self, name: &str, expected: Option<CommitId>) -> Result<()> {
        validate_ref_name(name)?;
        if name == DEFAULT_BRANCH {
            return Err(Error::new(
                ErrorKind::NotAllowed,
                format!("the default branch '{DEFAULT_BRANCH}' cannot be deleted"),
            ));
        }
        self.delete_ref(name, RefKind::Branch, expected).await
    }

    /// Deletes a tag.
    pub async fn delete_tag(&self, name: &str) -> Result<()> {
        validate_ref_name(name)?;
        self.delete_ref(name, RefKind::Tag, None).await
    }

    async fn delete_ref(
        &self,
        name: &str,
        kind: RefKind,
        expected: Option<CommitId>,
    ) -> Result<()> {
        let current = self.expect_kind(name, kind).await?;
        if let Some(e) = expected
            && e != current.head
        {
            return Err(moved_error(name, e, current.head));
        }
        let update = RefUpdate {
            name: name.into(),
            kind,
            expected: Some(current.head),
            new: None,
        };
        match self.write(vec![], vec![], vec![update]).await {
            Ok(()) => Ok(()),
            Err(WriteError::RefMoved { .. }) => Err(Error::new(
                ErrorKind::RefConflict,
                format!("{kind} '{name}' changed while it was being deleted; nothing was deleted"),
            )),
            Err(WriteError::Other(e)) => Err(e),
        }
    }

    /// Points branch `name` at the commit `to` resolves to (a reset), provided the branch
    /// is still at `expected`.
    pub async fn assign_branch(
        &self,
        name: &str,
        expected: CommitId,
        to: &str,
    ) -> Result<Reference> {
        validate_ref_name(name)?;
        let current = self.expect_kind(name, RefKind::Branch).await?;
        if current.head != expected {
            return Err(moved_error(name, expected, current.head));
        }
        let target = self.resolve(to).await?;
        let update = RefUpdate {
            name: name.into(),
            kind: RefKind::Branch,
            expected: Some(expected),
            new: Some(target.commit.id),
        };
        match self.write(vec![], vec![], vec![update]).await {
            Ok(()) => Ok(Reference {
                name: name.into(),
                kind: RefKind::Branch,
                head: target.commit.id,
            }),
            Err(WriteError::RefMoved { .. }) => {
                let now = self.store.reference(name).await?;
                match now {
                    Some(r) => Err(moved_error(name, expected, r.head)),
                    None => Err(not_found_ref(name)),
                }
            }
            Err(WriteError::Other(e)) => Err(e),
        }
    }

    /// The ref `name`, which must be of `kind`.
    async fn expect_kind(&self, name: &str, kind: RefKind) -> Result<RefRow> {
        let row = self.store.reference(name).await?.ok_or_else(|| {
            Error::new(ErrorKind::RefNotFound, format!("{kind} '{name}' not found"))
        })?;
        if row.kind != kind {
            return Err(Error::new(
                ErrorKind::NotAllowed,
                format!("'{name}' is a {}, not a {kind}", row.kind),
            ));
        }
        Ok(row)
    }

    // ---------------------------------------------------------------- reading

    /// Resolves a ref expression (see [`RefExpr`]) to one commit.
    pub async fn resolve(&self, expr: &str) -> Result<Resolved> {
        match RefExpr::parse(expr)? {
            RefExpr::Named(name) => {
                let row = self
                    .store
                    .reference(&name)
                    .await?
                    .ok_or_else(|| not_found_ref(&name))?;
                let commit = self.commit_by_id(row.head).await?;
                let is_branch_head = row.kind == RefKind::Branch;
                Ok(Resolved {
                    commit: (*commit).clone(),
                    reference: Some(reference(row)),
                    is_branch_head,
                })
            }
            RefExpr::Hash(prefix) => {
                let commit = self.commit_by_prefix(&prefix).await?;
                Ok(Resolved {
                    commit: (*commit).clone(),
                    reference: None,
                    is_branch_head: false,
                })
            }
            RefExpr::NamedAtHash(name, prefix) => {
                let row = self
                    .store
                    .reference(&name)
                    .await?
                    .ok_or_else(|| not_found_ref(&name))?;
                let commit = self.commit_by_prefix(&prefix).await?;
                let head = self.commit_by_id(row.head).await?;
                if !self.is_ancestor(&commit, &head).await? {
                    return Err(Error::new(
                        ErrorKind::RefNotFound,
                        format!(
                            "commit {} is not on the history of '{name}'",
                            commit.id.short()
                        ),
                    ));
                }
                Ok(Resolved {
                    commit: (*commit).clone(),
                    reference: Some(reference(row)),
                    is_branch_head: false,
                })
            }
            RefExpr::NamedAtTime(name, at) => {
                let found = self.store.reference_at(&name, at).await?;
                let Some((kind, Some(head))) = found else {
                    return Err(Error::new(
                        ErrorKind::RefNotFound,
                        format!("'{name}' did not exist at {}", at.to_rfc3339()),
                    ));
                };
                let commit = self.commit_by_id(head).await?;
                Ok(Resolved {
                    commit: (*commit).clone(),
                    reference: Some(Reference { name, kind, head }),
                    is_branch_head: false,
                })
            }
        }
    }

    /// The metadata location of every table pointer the catalog has ever stored, in any
    /// commit of any ref, past or present, reachable or not (a write that lost its race
    /// stored nothing: its transaction rolled back): what must never be garbage-collected
    /// while the catalog keeps its history. A scan of the stored tree nodes, a page at a
    /// time.
    pub async fn all_metadata_locations(&self) -> Result<BTreeSet<String>> {
        const PAGE: usize = 1000;
        let mut out = BTreeSet::new();
        let mut after = None;
        loop {
            let page = self.store.nodes_after(after, PAGE).await?;
            for (_, bytes) in &page {
                for (_, pointer) in codec::decode_node(bytes)?.entries {
                    out.insert(pointer.metadata_location);
                }
            }
            match page.last() {
                Some((id, _)) if page.len() == PAGE => after = Some(*id),
                _ => return Ok(out),
            }
        }
    }

    /// A commit by its full id.
    pub async fn get_commit(&self, id: CommitId) -> Result<Commit> {
        Ok((*self.commit_by_id(id).await?).clone())
    }

    /// The pointer of `table` at a ref; an error of kind [`ErrorKind::TableNotFound`]
    /// when the table is not there.
    pub async fn get_table(&self, at: &str, table: &str) -> Result<TablePointer> {
        validate_table_name(table)?;
        let resolved = self.resolve(at).await?;
        self.table_in(&resolved.commit, table)
            .await?
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::TableNotFound,
                    format!("table '{table}' not found at '{at}'"),
                )
            })
    }

    /// The pointer of `table` in a commit, if the table is there.
    pub async fn table_in(&self, commit: &Commit, table: &str) -> Result<Option<TablePointer>> {
        let mut found = self.lookup_many(commit.tree, &[table]).await?;
        Ok(found.pop().flatten())
    }

    /// Every table at a ref, or those under `namespace` (nested namespaces included),
    /// sorted by name.
    pub async fn list_tables(&self, at: &str, namespace: Option<&str>) -> Result<Vec<TableEntry>> {
        if let Some(ns) = namespace {
            validate_namespace(ns)?;
        }
        let resolved = self.resolve(at).await?;
        self.tables_in(&resolved.commit, namespace).await
    }

    /// Every table of a commit, or those under `namespace`, sorted by name.
    pub async fn tables_in(
        &self,
        commit: &Commit,
        namespace: Option<&str>,
    ) -> Result<Vec<TableEntry>> {
        let prefix = namespace.map(|ns| format!("{ns}.")).unwrap_or_default();
        let root = commit.tree;
        let mut view = HashMap::new();
        self.prefetch(&mut view, |v| tree::missing_for_prefix(v, root, &prefix))
            .await?;
        let entries = self
            .run_tree(&mut view, |v| tree::scan_prefix(v, root, &prefix))
            .await?;
        Ok(entries
            .into_iter()
            .map(|(name, pointer)| TableEntry { name, pointer })
            .collect())
    }

    /// A page of the history of a ref, newest first, following first parents (the
    /// history of the branch itself; a merge commit stands for what it merged).
    pub async fn log(&self, at: &str, query: &LogQuery) -> Result<LogPage> {
        if query.limit == 0 || query.limit > MAX_LOG_PAGE {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a log page holds 1 to {MAX_LOG_PAGE} commits, not {}",
                    query.limit
                ),
            ));
        }
        let mut next = match &query.page_token {
            Some(token) => Some(token.parse::<Hash>().map_err(|_| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("invalid page token '{token}'"),
                )
            })?),
            None => Some(self.resolve(at).await?.commit.id),
        };
        let mut commits = Vec::new();
        while let Some(id) = next {
            if commits.len() == query.limit {
                break;
            }
            let c = self.commit_by_id(id).await?;
            next = c.parents.first().copied();
            if query
                .properties
                .iter()
                .all(|(k, v)| c.properties.get(k) == Some(v))
            {
                commits.push((*c).clone());
            }
        }
        Ok(LogPage {
            commits,
            next_page_token: next.map(|h| h.to_hex()),
        })
    }

    /// The tables that differ from ref `from` to ref `to`, sorted by name.
    pub async fn diff(&self, from: &str, to: &str) -> Result<Vec<TableDiff>> {
        let a = self.resolve(from).await?;
        let b = self.resolve(to).await?;
        self.diff_trees(a.commit.tree, b.commit.tree).await
    }

    /// The tables that differ between two commits.
    pub async fn diff_commits(&self, from: &Commit, to: &Commit) -> Result<Vec<TableDiff>> {
        self.diff_trees(from.tree, to.tree).await
    }

    async fn diff_trees(&self, a: Option<Hash>, b: Option<Hash>) -> Result<Vec<TableDiff>> {
        let mut differ = tree::Differ::new(a, b);
        let mut changes = Vec::new();
        while let Some((side, id)) = differ.run(&mut changes) {
            let node = self.node(id).await?;
            differ.provide(side, node);
        }
        Ok(changes
            .into_iter()
            .map(|(table, from, to)| TableDiff { table, from, to })
            .collect())
    }

    // ---------------------------------------------------------------- writing

    /// Commits `ops` to `branch`. Each op states the pointer it expects the table to have
    /// (`None` for a new table); the commit fails with [`ErrorKind::Conflict`], naming
    /// every such table, when any of them differs at the branch head. Commits to other
    /// tables made meanwhile are kept.
    ///
    /// Concurrent commits to one branch in this process are grouped: one task (the
    /// leader) applies every queued request in order, each checked against the state the
    /// previous ones left, and stores the resulting chain of commits in one transaction.
    /// Each request still gets its own commit, its own conflicts and its own answer, but
    /// eight writers cost about one transaction, not eight.
    pub async fn commit(
        &self,
        branch: &str,
        ops: Vec<TableOp>,
        meta: CommitMeta,
    ) -> Result<Commit> {
        validate_ref_name(branch)?;
        if ops.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a commit must change at least one table",
            ));
        }
        let mut seen = HashSet::new();
        for op in &ops {
            validate_table_name(op.table())?;
            if !seen.insert(op.table()) {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("table '{}' appears twice in one commit", op.table()),
                ));
            }
        }
        let (reply, answer) = oneshot::channel();
        let queue = self.queue(branch);
        let lead = {
            let mut q = queue.lock().expect("queue lock");
            q.pending.push(Request { ops, meta, reply });
            !std::mem::replace(&mut q.leader, true)
        };
        if lead {
            // The leader runs as its own task so that a caller that gives up (a client
            // that disconnects) cannot strand the requests queued behind it.
            let this = self.clone();
            let branch = branch.to_string();
            tokio::spawn(async move { this.lead(branch, queue).await });
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Storage,
                "the commit was abandoned by its writer task; it may or may not have landed",
            ))
        })
    }

    fn queue(&self, branch: &str) -> Arc<std::sync::Mutex<Queue>> {
        let mut queues = self.queues.lock().expect("queues lock");
        queues.entry(branch.to_string()).or_default().clone()
    }

    /// Drains the queue of `branch`, one batch at a time.
    async fn lead(&self, branch: String, queue: Arc<std::sync::Mutex<Queue>>) {
        /// Hands leadership back if the batch panics; the queued callers then get errors.
        /// (Only on a panic: on a normal return leadership was handed back under the
        /// lock, and a new leader may already be draining requests queued since.)
        struct Guard(Arc<std::sync::Mutex<Queue>>);
        impl Drop for Guard {
            fn drop(&mut self) {
                if std::thread::panicking()
                    && let Ok(mut q) = self.0.lock()
                {
                    q.leader = false;
                    q.pending.clear();
                }
            }
        }
        let _guard = Guard(queue.clone());
        loop {
            let batch = {
                let mut q = queue.lock().expect("queue lock");
                if q.pending.is_empty() {
                    q.leader = false;
                    return;
                }
                std::mem::take(&mut q.pending)
            };
            self.commit_batch(&branch, batch).await;
        }
    }

    /// Applies a batch of commit requests to `branch` as one chain of commits.
    async fn commit_batch(&self, branch: &str, requests: Vec<Request>) {
        let mut retry = Retry::new();
        let outcome = loop {
            match self.try_commit_batch(branch, &requests).await {
                Ok(Some(results)) => break Ok(results),
                Ok(None) => {
                    if let Err(e) = retry.wait(branch).await {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        match outcome {
            Ok(results) => {
                for (req, result) in requests.into_iter().zip(results) {
                    let _ = req.reply.send(result);
                }
            }
            Err(e) => {
                for req in requests {
                    let copy = Error::new(e.kind(), e.message().to_string());
                    let _ = req.reply.send(Err(copy));
                }
            }
        }
    }

    /// One attempt at a batch: `Ok(None)` when the branch moved under it (retry).
    async fn try_commit_batch(
        &self,
        branch: &str,
        requests: &[Request],
    ) -> Result<Option<Vec<Result<Commit>>>> {
        let row = self.expect_kind(branch, RefKind::Branch).await?;
        let head = self.commit_by_id(row.head).await?;
        let keys: Vec<&str> = requests
            .iter()
            .flat_map(|r| r.ops.iter().map(TableOp::table))
            .collect();
        let mut view = HashMap::new();
        let root0 = head.tree;
        self.prefetch(&mut view, |v| tree::missing_for_keys(v, root0, &keys))
            .await?;

        let mut parent = head.clone();
        let mut chain: HashMap<Hash, Arc<Commit>> = HashMap::new();
        let mut nodes = Vec::new();
        let mut commits = Vec::new();
        let mut results = Vec::with_capacity(requests.len());
        for req in requests {
            let root = parent.tree;
            let tables: Vec<&str> = req.ops.iter().map(TableOp::table).collect();
            let current: Vec<Option<TablePointer>> = self
                .run_tree(&mut view, |v| {
                    tables.iter().map(|t| tree::lookup(v, root, t)).collect()
                })
                .await?;
            let conflicts: Vec<TableConflict> = req
                .ops
                .iter()
                .zip(current)
                .filter(|(op, cur)| op.expected() != cur.as_ref())
                .map(|(op, cur)| TableConflict {
                    table: op.table().to_string(),
                    expected: op.expected().cloned(),
                    actual: cur,
                    incoming: None,
                })
                .collect();
            if !conflicts.is_empty() {
                let names: Vec<&str> = conflicts.iter().map(|c| c.table.as_str()).collect();
                results.push(Err(Error::conflict(
                    format!(
                        "conflict on {}: changed on '{branch}' since it was read; nothing was committed",
                        names.join(", ")
                    ),
                    conflicts,
                )));
                continue;
            }
            let edits: Vec<(String, Option<TablePointer>)> = req
                .ops
                .iter()
                .map(|op| (op.table().to_string(), op.new_value().cloned()))
                .collect();
            let (new_root, new_nodes) = self
                .run_tree(&mut view, |v| tree::apply(v, root, &edits))
                .await?;
            for n in new_nodes {
                view.insert(n.id, n.node.clone());
                nodes.push(n);
            }
            let mut commit = self.make_commit(&[&parent], new_root, req.meta.clone(), Utc::now());
            let bytes = self.seal(&mut commit, &parent, &chain).await?;
            let commit = Arc::new(commit);
            chain.insert(commit.id, commit.clone());
            commits.push((commit.id, bytes));
            results.push(Ok((*commit).clone()));
            parent = commit;
        }
        if commits.is_empty() {
            return Ok(Some(results));
        }
        let update = RefUpdate {
            name: branch.into(),
            kind: RefKind::Branch,
            expected: Some(head.id),
            new: Some(parent.id),
        };
        let objects = nodes.iter().map(|n| (n.id, n.bytes.clone())).collect();
        match self
            .write_at(objects, commits, vec![update], parent.timestamp)
            .await
        {
            Ok(()) => {
                for n in nodes {
                    self.nodes.insert(n.id, n.node);
                }
                for (id, c) in chain {
                    self.commits.insert(id, c);
                }
                Ok(Some(results))
            }
            Err(WriteError::RefMoved { .. }) => Ok(None),
            Err(WriteError::Other(e)) => Err(e),
        }
    }

    /// Merges the commit `from` resolves to into `into`, three-way from their merge
    /// base: a table changed on one side only takes that side; changed on both sides to
    /// different pointers is a conflict. All conflicts are reported and nothing changes.
    pub async fn merge(
        &self,
        from: &str,
        into: &str,
        options: MergeOptions,
    ) -> Result<MergeOutcome> {
        validate_ref_name(into)?;
        let source = self.resolve(from).await?;
        let source = self.commit_by_id(source.commit.id).await?;
        let mut retry = Retry::new();
        loop {
            let row = self.expect_kind(into, RefKind::Branch).await?;
            if let Some(e) = options.expected_head
                && e != row.head
            {
                return Err(moved_error(into, e, row.head));
            }
            let target = self.commit_by_id(row.head).await?;
            let base = self.merge_base(&source, &target).await?;
            let base_tree = match &base {
                Some(b) if b.id == source.id => {
                    return Ok(MergeOutcome {
                        head: target.id,
                        kind: MergeKind::UpToDate,
                        tables: Vec::new(),
                    });
                }
                Some(b) => b.tree,
                None => None,
            };
            let fast_forward =
                !options.no_fast_forward && base.as_ref().is_some_and(|b| b.id == target.id);
            if fast_forward {
                let tables = self.diff_trees(target.tree, source.tree).await?;
                let update = RefUpdate {
                    name: into.into(),
                    kind: RefKind::Branch,
                    expected: Some(target.id),
                    new: Some(source.id),
                };
                match self.write(vec![], vec![], vec![update]).await {
                    Ok(()) => {
                        return Ok(MergeOutcome {
                            head: source.id,
                            kind: MergeKind::FastForward,
                            tables,
                        });
                    }
                    Err(WriteError::RefMoved { .. }) => {
                        retry.wait(into).await?;
                        continue;
                    }
                    Err(WriteError::Other(e)) => return Err(e),
                }
            }
            // What the source changed since the base, against what the target holds.
            let incoming = self.diff_trees(base_tree, source.tree).await?;
            let names: Vec<&str> = incoming.iter().map(|d| d.table.as_str()).collect();
            let ours = self.lookup_many(target.tree, &names).await?;
            let mut edits = Vec::new();
            let mut taken = Vec::new();
            let mut conflicts = Vec::new();
            for (change, ours) in incoming.into_iter().zip(ours) {
                if ours == change.from {
                    edits.push((change.table.clone(), change.to.clone()));
                    taken.push(TableDiff {
                        table: change.table,
                        from: ours,
                        to: change.to,
                    });
                } else if ours != change.to {
                    conflicts.push(TableConflict {
                        table: change.table,
                        expected: change.from,
                        actual: ours,
                        incoming: Some(change.to),
                    });
                }
            }
            if !conflicts.is_empty() {
                let names: Vec<&str> = conflicts.iter().map(|c| c.table.as_str()).collect();
                return Err(Error::conflict(
                    format!(
                        "cannot merge '{from}' into '{into}': {} changed on both sides ({}); nothing was merged",
                        if conflicts.len() == 1 {
                            "a table was"
                        } else {
                            "tables were"
                        },
                        names.join(", ")
                    ),
                    conflicts,
                ));
            }
            let (root, nodes) = self.edit_tree(target.tree, &edits).await?;
            let mut meta = options.meta.clone();
            if meta.message.is_empty() {
                meta.message = format!("merge {from} into {into}");
            }
            let commit = self.make_commit(&[&target, &source], root, meta, Utc::now());
            match self.write_commit(into, &target, commit, nodes).await {
                Ok(c) => {
                    return Ok(MergeOutcome {
                        head: c.id,
                        kind: MergeKind::MergeCommit,
                        tables: taken,
                    });
                }
                Err(WriteError::RefMoved { .. }) => retry.wait(into).await?,
                Err(WriteError::Other(e)) => return Err(e),
            }
        }
    }

    /// The best common ancestor of two commits (the one with the largest generation).
    pub async fn merge_base_of(&self, a: CommitId, b: CommitId) -> Result<Option<Commit>> {
        let a = self.commit_by_id(a).await?;
        let b = self.commit_by_id(b).await?;
        Ok(self.merge_base(&a, &b).await?.map(|c| (*c).clone()))
    }

    /// Reads every commit and tree node reachable from any ref, checking each object's
    /// hash and the tree's invariants. Costs a full scan: an administrator's tool.
    pub async fn check_integrity(&self) -> Result<IntegrityReport> {
        let refs = self.store.references().await?;
        let mut report = IntegrityReport {
            refs: refs.len(),
            ..Default::default()
        };
        let mut seen_commits = HashSet::new();
        let mut stack: Vec<Hash> = refs.iter().map(|r| r.head).collect();
        let mut roots = Vec::new();
        while let Some(id) = stack.pop() {
            if !seen_commits.insert(id) {
                continue;
            }
            let c = self.commit_by_id(id).await?;
            for p in &c.parents {
                let pc = self.commit_by_id(*p).await?;
                if pc.generation >= c.generation {
                    return Err(Error::corrupt(format!(
                        "commit {id}: generation not above its parent's"
                    )));
                }
                stack.push(*p);
            }
            roots.extend(c.tree);
        }
        report.commits = seen_commits.len();
        // Each node: its id, expected level, and exclusive lower and upper key bounds.
        type NodeCheck = (Hash, Option<u8>, Option<String>, Option<String>);
        let mut seen_nodes = HashSet::new();
        let mut nodes: Vec<NodeCheck> = roots.into_iter().map(|r| (r, None, None, None)).collect();
        while let Some((id, level, lo, hi)) = nodes.pop() {
            if !seen_nodes.insert(id) {
                continue;
            }
            let n = self.node(id).await?;
            let bad = |why: &str| Err(Error::corrupt(format!("tree node {id}: {why}")));
            if level.is_some_and(|l| l != n.level) {
                return bad("wrong level");
            }
            if n.children.len() != n.entries.len() + 1 {
                return bad("children do not match entries");
            }
            for (i, (k, _)) in n.entries.iter().enumerate() {
                if tree::key_level(k) != n.level {
                    return bad(&format!("key '{k}' at the wrong level"));
                }
                if lo.as_ref().is_some_and(|lo| k <= lo) || hi.as_ref().is_some_and(|hi| k >= hi) {
                    return bad(&format!("key '{k}' out of its range"));
                }
                if i > 0 && n.entries[i - 1].0 >= *k {
                    return bad("keys not sorted");
                }
            }
            for (i, child) in n.children.iter().enumerate() {
                if let Some(c) = child {
                    if n.level == 0 {
                        return bad("a child below level 0");
                    }
                    let clo = if i == 0 {
                        lo.clone()
                    } else {
                        Some(n.entries[i - 1].0.clone())
                    };
                    let chi = n.entries.get(i).map(|e| e.0.clone()).or_else(|| hi.clone());
                    nodes.push((*c, Some(n.level - 1), clo, chi));
                }
            }
        }
        report.nodes = seen_nodes.len();
        Ok(report)
    }

    // ---------------------------------------------------------------- internals

    fn make_commit(
        &self,
        parents: &[&Commit],
        tree: Option<Hash>,
        meta: CommitMeta,
        now: DateTime<Utc>,
    ) -> Commit {
        // Keep the first-parent chain's times non-decreasing, at the precision stored.
        let mut timestamp = now.trunc_subsecs(6);
        if let Some(p) = parents.first()
            && p.timestamp > timestamp
        {
            timestamp = p.timestamp;
        }
        let depth = parents.first().map_or(0, |p| p.depth + 1);
        let generation = parents.iter().map(|p| p.generation + 1).max().unwrap_or(0);
        Commit {
            id: Hash([0; 32]),
            parents: parents.iter().map(|p| p.id).collect(),
            author: meta.author,
            message: meta.message,
            timestamp,
            properties: meta.properties,
            tree,
            depth,
            generation,
            skip: None, // set by `write_commit`, which can walk the history
        }
    }

    /// Stores a new commit and moves `branch` from `head` to it.
    async fn write_commit(
        &self,
        branch: &str,
        head: &Arc<Commit>,
        mut commit: Commit,
        nodes: Vec<tree::NewNode>,
    ) -> Result<Commit, WriteError> {
        let bytes = self.seal(&mut commit, head, &HashMap::new()).await?;
        let update = RefUpdate {
            name: branch.into(),
            kind: RefKind::Branch,
            expected: Some(head.id),
            new: Some(commit.id),
        };
        let node_objects: Vec<(Hash, Vec<u8>)> =
            nodes.iter().map(|n| (n.id, n.bytes.clone())).collect();
        self.write_at(
            node_objects,
            vec![(commit.id, bytes)],
            vec![update],
            commit.timestamp,
        )
        .await?;
        for n in nodes {
            self.nodes.insert(n.id, n.node);
        }
        self.commits.insert(commit.id, Arc::new(commit.clone()));
        Ok(commit)
    }

    /// Sets the commit's skip pointer and id; returns its encoding. `unstored` holds
    /// commits of the same batch that the store does not have yet.
    async fn seal(
        &self,
        commit: &mut Commit,
        parent: &Arc<Commit>,
        unstored: &HashMap<Hash, Arc<Commit>>,
    ) -> Result<Vec<u8>> {
        commit.skip = if commit.depth == 0 {
            None
        } else {
            let target = skip_depth(commit.depth);
            let mut walk = parent.clone();
            // Walk the batch's own commits first, then stored history.
            while walk.depth > target && unstored.contains_key(&walk.id) {
                let next = walk.parents[0];
                walk = match unstored.get(&next) {
                    Some(c) => c.clone(),
                    None => self.commit_by_id(next).await?,
                };
            }
            Some(self.ancestor_at_depth(walk, target).await?.id)
        };
        let bytes = codec::encode_commit(commit);
        commit.id = Hash::of(&bytes);
        Ok(bytes)
    }

    async fn write(
        &self,
        nodes: Vec<(Hash, Vec<u8>)>,
        commits: Vec<(Hash, Vec<u8>)>,
        refs: Vec<RefUpdate>,
    ) -> Result<(), WriteError> {
        self.write_at(nodes, commits, refs, Utc::now().trunc_subsecs(6))
            .await
    }

    async fn write_at(
        &self,
        mut nodes: Vec<(Hash, Vec<u8>)>,
        commits: Vec<(Hash, Vec<u8>)>,
        refs: Vec<RefUpdate>,
        at: DateTime<Utc>,
    ) -> Result<(), WriteError> {
        // One order for every writer, so that concurrent inserts cannot deadlock.
        nodes.sort_by_key(|n| n.0);
        nodes.dedup_by(|a, b| a.0 == b.0);
        self.store
            .write(WriteBatch {
                nodes,
                commits,
                refs,
                at,
            })
            .await
    }

    async fn commit_by_id(&self, id: CommitId) -> Result<Arc<Commit>> {
        if let Some(c) = self.commits.get(&id) {
            return Ok(c);
        }
        let rows = self.store.commits(&[id]).await?;
        let Some((_, bytes)) = rows.into_iter().next() else {
            return Err(Error::new(
                ErrorKind::RefNotFound,
                format!("commit {id} not found"),
            ));
        };
        if Hash::of(&bytes) != id {
            return Err(Error::corrupt(format!(
                "commit {id}: stored bytes do not match its id"
            )));
        }
        let c = Arc::new(codec::decode_commit(id, &bytes)?);
        self.commits.insert(id, c.clone());
        Ok(c)
    }

    async fn commit_by_prefix(&self, prefix: &str) -> Result<Arc<Commit>> {
        if prefix.len() == 64 {
            return self.commit_by_id(prefix.parse()?).await;
        }
        let lo: Hash = format!("{prefix:0<64}").parse()?;
        let hi: Hash = format!("{prefix:f<64}").parse()?;
        let found = self.store.commits_in_range(lo, hi, 10).await?;
        match found.as_slice() {
            [] => Err(Error::new(
                ErrorKind::RefNotFound,
                format!("no commit with a hash starting with '{prefix}'"),
            )),
            [one] => self.commit_by_id(*one).await,
            _ => Err(Error::ambiguous(prefix, found)),
        }
    }

    async fn node(&self, id: Hash) -> Result<Arc<Node>> {
        let mut view = HashMap::new();
        self.load_into(&mut view, &[id]).await?;
        Ok(view.remove(&id).expect("loaded"))
    }

    /// Adds the nodes `ids` to `view`, from the cache or the store.
    async fn load_into(&self, view: &mut HashMap<Hash, Arc<Node>>, ids: &[Hash]) -> Result<()> {
        let mut wanted = Vec::new();
        for id in ids {
            match self.nodes.get(id) {
                Some(n) => {
                    view.insert(*id, n);
                }
                None => wanted.push(*id),
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let rows = self.store.nodes(&wanted).await?;
        for (id, bytes) in rows {
            if Hash::of(&bytes) != id {
                return Err(Error::corrupt(format!(
                    "tree node {id}: stored bytes do not match its id"
                )));
            }
            let node = Arc::new(codec::decode_node(&bytes)?);
            self.nodes.insert(id, node.clone());
            view.insert(id, node);
        }
        if let Some(lost) = wanted.iter().find(|id| !view.contains_key(id)) {
            return Err(Error::corrupt(format!(
                "tree node {lost} is missing from storage"
            )));
        }
        Ok(())
    }

    /// Loads, level by level in batches, what `missing` says an operation needs.
    async fn prefetch(
        &self,
        view: &mut HashMap<Hash, Arc<Node>>,
        missing: impl Fn(&HashMap<Hash, Arc<Node>>) -> Vec<Hash>,
    ) -> Result<()> {
        loop {
            let m = missing(view);
            if m.is_empty() {
                return Ok(());
            }
            self.load_into(view, &m).await?;
        }
    }

    /// Runs a tree algorithm, loading any node it still lacks and running it again.
    async fn run_tree<T>(
        &self,
        view: &mut HashMap<Hash, Arc<Node>>,
        op: impl Fn(&HashMap<Hash, Arc<Node>>) -> Result<T, Missing>,
    ) -> Result<T> {
        loop {
            match op(view) {
                Ok(v) => return Ok(v),
                Err(Missing(id)) => self.load_into(view, &[id]).await?,
            }
        }
    }

    async fn lookup_many(
        &self,
        root: Option<Hash>,
        tables: &[&str],
    ) -> Result<Vec<Option<TablePointer>>> {
        let mut view = HashMap::new();
        self.prefetch(&mut view, |v| tree::missing_for_keys(v, root, tables))
            .await?;
        self.run_tree(&mut view, |v| {
            tables.iter().map(|t| tree::lookup(v, root, t)).collect()
        })
        .await
    }

    async fn edit_tree(
        &self,
        root: Option<Hash>,
        edits: &[(String, Option<TablePointer>)],
    ) -> Result<(Option<Hash>, Vec<tree::NewNode>)> {
        let keys: Vec<&str> = edits.iter().map(|(k, _)| k.as_str()).collect();
        let mut view = HashMap::new();
        self.prefetch(&mut view, |v| tree::missing_for_keys(v, root, &keys))
            .await?;
        self.run_tree(&mut view, |v| tree::apply(v, root, edits))
            .await
    }

    /// The first-parent ancestor of `c` at `depth`, in O(log n) steps over skip pointers
    /// (the walk of Bitcoin's `CBlockIndex::GetAncestor`).
    async fn ancestor_at_depth(&self, c: Arc<Commit>, depth: u64) -> Result<Arc<Commit>> {
        let mut walk = c;
        while walk.depth > depth {
            let here = walk.depth;
            let hs = skip_depth(here) as i128;
            let hsp = skip_depth(here - 1) as i128;
            let target = depth as i128;
            let take_skip = walk.skip.is_some()
                && (hs == target || (hs > target && !(hsp < hs - 2 && hsp >= target)));
            let next = if take_skip {
                walk.skip.expect("checked")
            } else {
                *walk.parents.first().ok_or_else(|| {
                    Error::corrupt(format!("commit {} has depth {here} but no parent", walk.id))
                })?
            };
            walk = self.commit_by_id(next).await?;
        }
        Ok(walk)
    }

    /// Whether `a` is `b` or one of its ancestors.
    async fn is_ancestor(&self, a: &Arc<Commit>, b: &Arc<Commit>) -> Result<bool> {
        if a.id == b.id {
            return Ok(true);
        }
        if a.generation >= b.generation {
            return Ok(false);
        }
        // Most lookups are on the first-parent chain: O(log n).
        if a.depth < b.depth && self.ancestor_at_depth(b.clone(), a.depth).await?.id == a.id {
            return Ok(true);
        }
        // Otherwise walk every parent, never below a's generation.
        let mut stack = vec![b.clone()];
        let mut seen = HashSet::new();
        while let Some(c) = stack.pop() {
            for p in &c.parents {
                if *p == a.id {
                    return Ok(true);
                }
                if seen.insert(*p) {
                    let pc = self.commit_by_id(*p).await?;
                    if pc.generation > a.generation {
                        stack.push(pc);
                    }
                }
            }
        }
        Ok(false)
    }

    /// The common ancestor of `a` and `b` with the largest generation. Walks down from
    /// both in order of generation, so a commit is examined only after every commit
    /// above it: the first one reached from both sides is the answer.
    async fn merge_base(&self, a: &Arc<Commit>, b: &Arc<Commit>) -> Result<Option<Arc<Commit>>> {
        if a.id == b.id {
            return Ok(Some(a.clone()));
        }
        let mut flags: HashMap<Hash, u8> = HashMap::new();
        let mut heap = BinaryHeap::new();
        flags.insert(a.id, 1);
        *flags.entry(b.id).or_default() |= 2;
        heap.push((a.generation, a.id));
        heap.push((b.generation, b.id));
        let mut popped = HashSet::new();
        while let Some((_, id)) = heap.pop() {
            if !popped.insert(id) {
                continue;
            }
            let f = flags[&id];
            if f == 3 {
                return Ok(Some(self.commit_by_id(id).await?));
            }
            let c = self.commit_by_id(id).await?;
            for p in &c.parents {
                let entry = flags.entry(*p).or_default();
                if *entry == 0 {
                    let pc = self.commit_by_id(*p).await?;
                    heap.push((pc.generation, pc.id));
                }
                *entry |= f;
            }
        }
        Ok(None)
    }
}

/// Where a commit at depth `d` points its skip pointer: a first-parent ancestor at a
/// depth that makes any ancestor reachable in O(log d) steps (Bitcoin's
/// `GetSkipHeight`).
fn skip_depth(d: u64) -> u64 {
    fn invert_lowest_one(n: u64) -> u64 {
        n & n.wrapping_sub(1)
    }
    if d < 2 {
        0
    } else if d & 1 == 1 {
        invert_lowest_one(invert_lowest_one(d - 1)) + 1
    } else {
        invert_lowest_one(d)
    }
}

/// Backoff between attempts of an optimistic write, bounded by [`RETRY_DEADLINE`].
struct Retry {
    started: Instant,
    attempt: u32,
}

impl Retry {
    fn new() -> Self {
        Retry {
            started: Instant::now(),
            attempt: 0,
        }
    }

    async fn wait(&mut self, branch: &str) -> Result<()> {
        self.attempt += 1;
        if self.started.elapsed() > RETRY_DEADLINE {
            return Err(Error::new(
                ErrorKind::Contention,
                format!(
                    "gave up after {} attempts: '{branch}' kept moving under concurrent writers; retry",
                    self.attempt
                ),
            ));
        }
        if self.attempt > 2 {
            // A little jitter so that a crowd of writers spreads out.
            let micros = rand_below(200 * u64::from(self.attempt.min(50)));
            tokio::time::sleep(Duration::from_micros(micros)).await;
        } else {
            tokio::task::yield_now().await;
        }
        Ok(())
    }
}

/// A cheap pseudo-random number below `n`, for jitter only.
fn rand_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let x = blake3::hash(&nanos.to_le_bytes());
    u64::from_le_bytes(x.as_bytes()[..8].try_into().expect("8 bytes")) % n.max(1)
}

fn reference(row: RefRow) -> Reference {
    Reference {
        name: row.name,
        kind: row.kind,
        head: row.head,
    }
}

fn not_found_ref(name: &str) -> Error {
    Error::new(
        ErrorKind::RefNotFound,
        format!("no branch or tag named '{name}'"),
    )
}

fn moved_error(name: &str, expected: CommitId, actual: CommitId) -> Error {
    Error::new(
        ErrorKind::RefConflict,
        format!(
            "'{name}' is at {}, not at the expected {}; nothing was changed",
            actual.short(),
            expected.short()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::skip_depth;

    #[test]
    fn skip_depth_points_below() {
        for d in 1..10_000u64 {
            assert!(skip_depth(d) < d, "{d}");
        }
        assert_eq!(skip_depth(8), 0);
        assert_eq!(skip_depth(12), 8);
    }
}
