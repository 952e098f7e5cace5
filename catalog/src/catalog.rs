//! The catalog service: every versioning operation, written once over any [`Store`].
//!
//! Writes are optimistic. An operation reads the branch head, computes the new commit
//! (checking its per-table expectations against that head), and asks the store to move
//! the branch from that head to the new commit in the same transaction that stores the
//! new objects. When another writer moved the branch first, the operation starts again
//! from the new head: the per-table checks decide whether it still applies, so writers
//! on different tables never fail each other and no update is lost.
//!
//! The layers below keep the rest: `objects.rs` loads and caches objects and writes
//! batches, `ancestry.rs` builds commits (depth, generation, skip pointer) and answers
//! ancestry and merge-base questions, `group.rs` groups concurrent commits to a branch,
//! and `retry.rs` spaces out the attempts of a write that lost its race.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use chrono::Utc;

use crate::ancestry::{is_ancestor, make_commit, merge_base, seal};
use crate::codec;
use crate::error::{Error, ErrorKind, Result, TableConflict};
use crate::group::CommitQueues;
use crate::model::*;
use crate::names::{validate_namespace, validate_ref_name, validate_table_name};
use crate::objects::Objects;
use crate::refexpr::{RefExpr, ToRefExpr};
use crate::retry::Retry;
use crate::store::{PostgresStore, RefRow, RefUpdate, SqliteStore, SqliteSync, Store, WriteError};
use crate::tree;

/// The name of the branch every catalog starts with; it cannot be deleted.
pub const DEFAULT_BRANCH: &str = "main";

/// The ref expression a request is about: the one it names, or (named none) the default
/// branch. The one place that decides it, for lh's API and the Iceberg REST catalog's
/// warehouse alike.
pub fn ref_or_default(named: Option<String>) -> Result<RefExpr> {
    match named {
        Some(text) => RefExpr::parse(&text),
        None => Ok(RefExpr::named(DEFAULT_BRANCH)),
    }
}

/// The branch a request changes: the one it names, or (named none) the default branch.
/// A ref expression that names a commit (`main@1a2b3c4d`) is refused: changes go to a
/// branch's head.
pub fn branch_or_default(named: Option<String>) -> Result<String> {
    match ref_or_default(named)? {
        RefExpr::Named(name) => Ok(name),
        other => Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("'{other}' names a commit, not a branch: a change goes to a branch's head"),
        )),
    }
}

/// The largest page of history.
pub const MAX_LOG_PAGE: usize = 1000;
/// A log filtered by table walks at most this many commits per page (a page may then
/// hold fewer commits than asked for, with a token for the rest).
pub const MAX_LOG_WALK: usize = 20_000;

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
    objects: Objects,
    queues: CommitQueues,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("store", &self.store().describe())
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
            objects: Objects::new(store, options.node_cache, options.commit_cache),
            queues: CommitQueues::default(),
        };
        if catalog.store().reference(DEFAULT_BRANCH).await?.is_none() {
            let mut root = make_commit(
                &[],
                None,
                CommitMeta::new("lh", "create the catalog"),
                Utc::now(),
            );
            let bytes = codec::encode_commit(&root);
            root.id = Hash::of(&bytes);
            let update = RefUpdate {
                name: DEFAULT_BRANCH.into(),
                kind: RefKind::Branch,
                expected: None,
                new: Some(root.id),
                rewinds: false,
            };
            let at = root.timestamp;
            match catalog
                .objects
                .write_new(vec![], vec![(Arc::new(root), bytes)], vec![update], at)
                .await
            {
                // Another process created it first: use theirs.
                Ok(()) | Err(WriteError::RefMoved { .. }) => {}
                Err(WriteError::Other(e)) => return Err(e),
            }
        }
        Ok(catalog)
    }

    /// Where the catalog is stored, for people (no secrets).
    pub fn describe(&self) -> String {
        self.store().describe()
    }

    // ---------------------------------------------------------------- refs

    /// Every branch and tag, by name.
    pub async fn list_refs(&self) -> Result<Vec<Reference>> {
        Ok(self
            .store()
            .references()
            .await?
            .into_iter()
            .map(reference)
            .collect())
    }

    /// One branch or tag.
    pub async fn get_ref(&self, name: &str) -> Result<Reference> {
        validate_ref_name(name)?;
        self.store()
            .reference(name)
            .await?
            .map(reference)
            .ok_or_else(|| not_found_ref(name))
    }

    /// Creates a branch at the commit `from` resolves to. O(1): no data is copied.
    pub async fn create_branch<E: ToRefExpr + ?Sized>(
        &self,
        name: &str,
        from: &E,
    ) -> Result<Reference> {
        self.create_ref(name, RefKind::Branch, from).await
    }

    /// Creates a tag at the commit `from` resolves to. Tags never move.
    pub async fn create_tag<E: ToRefExpr + ?Sized>(
        &self,
        name: &str,
        from: &E,
    ) -> Result<Reference> {
        self.create_ref(name, RefKind::Tag, from).await
    }

    async fn create_ref<E: ToRefExpr + ?Sized>(
        &self,
        name: &str,
        kind: RefKind,
        from: &E,
    ) -> Result<Reference> {
        validate_ref_name(name)?;
        let target = self.resolve(from).await?;
        let update = RefUpdate {
            name: name.into(),
            kind,
            expected: None,
            new: Some(target.commit.id),
            rewinds: false,
        };
        match self.objects.write_refs(vec![update]).await {
            Ok(()) => Ok(Reference {
                name: name.into(),
                kind,
                head: target.commit.id,
            }),
            Err(WriteError::RefMoved { .. }) => {
                let existing = self.store().reference(name).await?;
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
        let current = self.objects.expect_kind(name, kind).await?;
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
            rewinds: false,
        };
        match self.objects.write_refs(vec![update]).await {
            Ok(()) => Ok(()),
            Err(WriteError::RefMoved { .. }) => Err(Error::new(
                ErrorKind::RefConflict,
                format!("{kind} '{name}' changed while it was being deleted; nothing was deleted"),
            )),
            Err(WriteError::Other(e)) => Err(e),
        }
    }

    /// The heads ref `name` left out of its history (deleted, or assigned where they are
    /// not ancestors), the latest first, at most `limit`: what it once held.
    pub async fn left_heads(&self, name: &str, limit: usize) -> Result<Vec<CommitId>> {
        self.store().left_heads(name, limit).await
    }

    /// Refs deleted (and not made again) whose names match `pattern` (`*`: any run of
    /// characters), at most `limit`: what they held is still theirs for read grants.
    pub async fn deleted_refs(&self, pattern: &str, limit: usize) -> Result<Vec<String>> {
        let mut like = String::with_capacity(pattern.len());
        for c in pattern.chars() {
            match c {
                '*' => like.push('%'),
                '%' | '_' | '\\' => {
                    like.push('\\');
                    like.push(c);
                }
                c => like.push(c),
            }
        }
        self.store().deleted_names(&like, limit).await
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
        let current = self.objects.expect_kind(name, RefKind::Branch).await?;
        if current.head != expected {
            return Err(moved_error(name, expected, current.head));
        }
        let target = self.resolve(to).await?;
        // Whether the branch leaves its head out of its history (a reset back, or to
        // another line): the ref log records what it held.
        let keeps = self
            .merge_base_of(expected, target.commit.id)
            .await?
            .is_some_and(|b| b.id == expected);
        let update = RefUpdate {
            name: name.into(),
            kind: RefKind::Branch,
            expected: Some(expected),
            new: Some(target.commit.id),
            rewinds: !keeps,
        };
        match self.objects.write_refs(vec![update]).await {
            Ok(()) => Ok(Reference {
                name: name.into(),
                kind: RefKind::Branch,
                head: target.commit.id,
            }),
            Err(WriteError::RefMoved { .. }) => {
                let now = self.store().reference(name).await?;
                match now {
                    Some(r) => Err(moved_error(name, expected, r.head)),
                    None => Err(not_found_ref(name)),
                }
            }
            Err(WriteError::Other(e)) => Err(e),
        }
    }

    // ---------------------------------------------------------------- reading

    /// Resolves a ref expression (see [`RefExpr`]) to one commit.
    pub async fn resolve<E: ToRefExpr + ?Sized>(&self, expr: &E) -> Result<Resolved> {
        match expr.to_ref_expr()?.into_owned() {
            RefExpr::Named(name) => {
                let row = self
                    .store()
                    .reference(&name)
                    .await?
                    .ok_or_else(|| not_found_ref(&name))?;
                let commit = self.objects.commit_by_id(row.head).await?;
                let is_branch_head = row.kind == RefKind::Branch;
                Ok(Resolved {
                    commit: (*commit).clone(),
                    reference: Some(reference(row)),
                    is_branch_head,
                })
            }
            RefExpr::Hash(prefix) => {
                let commit = self.objects.commit_by_prefix(&prefix).await?;
                Ok(Resolved {
                    commit: (*commit).clone(),
                    reference: None,
                    is_branch_head: false,
                })
            }
            RefExpr::NamedAtHash(name, prefix) => {
                let row = self
                    .store()
                    .reference(&name)
                    .await?
                    .ok_or_else(|| not_found_ref(&name))?;
                // A commit the ref was at: on its first-parent line, as its log lists
                // it (a merged branch's own commits never were the ref's state, and
                // walking from one listed that branch's history: the thirty-fifth
                // review). Whether a commit of that prefix is elsewhere is not told.
                let head = row.head;
                let mut on_line = Vec::new();
                for id in self.objects.commits_by_prefix(&prefix, 16).await? {
                    if self.on_first_parent_line(id, head).await? {
                        on_line.push(id);
                    }
                }
                let commit = match on_line.as_slice() {
                    [] => {
                        return Err(Error::new(
                            ErrorKind::RefNotFound,
                            format!("no commit '{prefix}' on the history of '{name}'"),
                        ));
                    }
                    [one] => self.objects.commit_by_id(*one).await?,
                    _ => return Err(Error::ambiguous(&prefix, on_line)),
                };
                Ok(Resolved {
                    commit: (*commit).clone(),
                    reference: Some(reference(row)),
                    is_branch_head: false,
                })
            }
            RefExpr::NamedAtTime(name, at) => {
                // What this ref held, not what an earlier ref of the same name did: a
                // deleted ref has no past, nor has a name re-created since `at`.
                let gone = || {
                    Error::new(
                        ErrorKind::RefNotFound,
                        format!(
                            "'{name}' did not exist at {} as the ref that has the name now",
                            at.to_rfc3339()
                        ),
                    )
                };
                if self.store().reference(&name).await?.is_none()
                    || self.store().deleted_since(&name, at).await?
                {
                    return Err(gone());
                }
                let found = self.store().reference_at(&name, at).await?;
                let Some((kind, Some(head))) = found else {
                    return Err(Error::new(
                        ErrorKind::RefNotFound,
                        format!("'{name}' did not exist at {}", at.to_rfc3339()),
                    ));
                };
                let commit = self.objects.commit_by_id(head).await?;
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
            let page = self.store().nodes_after(after, PAGE).await?;
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
        Ok((*self.objects.commit_by_id(id).await?).clone())
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
        let mut found = self.objects.lookup_many(commit.tree, &[table]).await?;
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
        self.objects
            .prefetch(&mut view, |v| tree::missing_for_prefix(v, root, &prefix))
            .await?;
        let entries = self
            .objects
            .run_tree(&mut view, |v| tree::scan_prefix(v, root, &prefix))
            .await?;
        Ok(entries
            .into_iter()
            .map(|(name, pointer)| TableEntry { name, pointer })
            .collect())
    }

    /// A page of the history of a ref, newest first, following first parents (the
    /// history of the branch itself; a merge commit stands for what it merged).
    pub async fn log<E: ToRefExpr + ?Sized>(&self, at: &E, query: &LogQuery) -> Result<LogPage> {
        self.log_where(at, query, |_| std::future::ready(Ok::<bool, Error>(true)))
            .await
    }

    /// [`log`](Self::log), where a commit the query would list counts only when `keep`
    /// says so: one it refuses is walked past as if it matched nothing, so that the page
    /// ends, and its token points, where kept commits and the walk's bound say, never
    /// next to a refused one (a caller's view of history: a commit that changed a table
    /// it may not read there).
    pub async fn log_where<E, K, F, Er>(
        &self,
        at: &E,
        query: &LogQuery,
        mut keep: K,
    ) -> std::result::Result<LogPage, Er>
    where
        E: ToRefExpr + ?Sized,
        K: FnMut(Arc<Commit>) -> F,
        F: std::future::Future<Output = std::result::Result<bool, Er>>,
        Er: From<Error>,
    {
        if query.limit == 0 || query.limit > MAX_LOG_PAGE {
            return Err(Er::from(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a log page holds 1 to {MAX_LOG_PAGE} commits, not {}",
                    query.limit
                ),
            )));
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
        if let Some(t) = &query.table {
            validate_table_name(t)?;
        }
        let mut commits = Vec::new();
        // With a table filter: the table's pointer in the commit looked at last (the
        // next commit's parent), and the commits walked without a match.
        let mut pointer: Option<(Hash, Option<TablePointer>)> = None;
        let mut walked = 0usize;
        while let Some(id) = next {
            if commits.len() == query.limit || walked >= MAX_LOG_WALK {
                break;
            }
            if query.until == Some(id) {
                next = None;
                break;
            }
            let c = self.objects.commit_by_id(id).await?;
            next = c.parents.first().copied();
            if next.is_none()
                && let Some(until) = query.until
            {
                return Err(Er::from(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "commit {} is not in the first-parent history of '{at}'",
                        until.short()
                    ),
                )));
            }
            let changed = match &query.table {
                None => true,
                Some(t) => {
                    walked += 1;
                    let here = match pointer.take() {
                        Some((parent, p)) if parent == id => p,
                        _ => self.table_in(&c, t).await?,
                    };
                    let before = match next {
                        None => None,
                        Some(parent_id) => {
                            let parent = self.objects.commit_by_id(parent_id).await?;
                            let p = if parent.tree == c.tree {
                                here.clone()
                            } else {
                                self.table_in(&parent, t).await?
                            };
                            pointer = Some((parent_id, p.clone()));
                            p
                        }
                    };
                    here != before
                }
            };
            if changed
                && query
                    .properties
                    .iter()
                    .all(|(k, v)| c.properties.get(k) == Some(v))
                && keep(c.clone()).await?
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
            let node = self.objects.node(id).await?;
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
    /// eight writers cost about one transaction, not eight (see `group.rs`).
    pub async fn commit(
        &self,
        branch: &str,
        ops: Vec<TableOp>,
        meta: CommitMeta,
    ) -> Result<Commit> {
        validate_ref_name(branch)?;
        meta.check()?;
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
        self.queues.commit(&self.objects, branch, ops, meta).await
    }

    /// Merges the commit `from` resolves to into `into`, three-way from their merge
    /// base: a table changed on one side only takes that side; changed on both sides to
    /// different pointers is a conflict. All conflicts are reported and nothing changes.
    pub async fn merge<E: ToRefExpr + ?Sized>(
        &self,
        from: &E,
        into: &str,
        options: MergeOptions,
    ) -> Result<MergeOutcome> {
        validate_ref_name(into)?;
        options.meta.check()?;
        let source = self.resolve(from).await?;
        let source = self.objects.commit_by_id(source.commit.id).await?;
        let mut retry = Retry::new();
        loop {
            let row = self.objects.expect_kind(into, RefKind::Branch).await?;
            if let Some(e) = options.expected_head
                && e != row.head
            {
                return Err(moved_error(into, e, row.head));
            }
            let target = self.objects.commit_by_id(row.head).await?;
            let base = merge_base(&self.objects, &source, &target).await?;
            let base_tree = match &base {
                Some(b) if b.id == source.id => {
                    return Ok(MergeOutcome {
                        head: target.id,
                        kind: MergeKind::UpToDate,
                        tables: Vec::new(),
                        base_head: target.id,
                    });
                }
                Some(b) => b.tree,
                None => None,
            };
            let fast_forward =
                !options.no_fast_forward && base.as_ref().is_some_and(|b| b.id == target.id);
            if fast_forward {
                let tables = self.diff_trees(target.tree, source.tree).await?;
                if options.prepare {
                    return Ok(MergeOutcome {
                        head: source.id,
                        kind: MergeKind::FastForward,
                        tables,
                        base_head: target.id,
                    });
                }
                let update = RefUpdate {
                    name: into.into(),
                    kind: RefKind::Branch,
                    expected: Some(target.id),
                    new: Some(source.id),
                    rewinds: false,
                };
                match self.objects.write_refs(vec![update]).await {
                    Ok(()) => {
                        return Ok(MergeOutcome {
                            head: source.id,
                            kind: MergeKind::FastForward,
                            tables,
                            base_head: target.id,
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
            let ours = self.objects.lookup_many(target.tree, &names).await?;
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
                } else if let Some(r) = options.resolutions.iter().find(|r| {
                    r.table == change.table
                        && r.base == change.from
                        && r.ours == ours
                        && r.theirs == change.to
                }) {
                    edits.push((change.table.clone(), Some(r.pointer.clone())));
                    taken.push(TableDiff {
                        table: change.table,
                        from: ours,
                        to: Some(r.pointer.clone()),
                    });
                } else if ours != change.to {
                    match options.sides.get(&change.table).copied().or(options.prefer) {
                        Some(Side::Source) => {
                            edits.push((change.table.clone(), change.to.clone()));
                            taken.push(TableDiff {
                                table: change.table,
                                from: ours,
                                to: change.to,
                            });
                        }
                        // The target keeps its own version.
                        Some(Side::Target) => {}
                        None => conflicts.push(TableConflict {
                            table: change.table,
                            expected: change.from,
                            actual: ours,
                            incoming: Some(change.to),
                        }),
                    }
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
            let (root, nodes) = self.objects.edit_tree(target.tree, &edits).await?;
            let mut meta = options.meta.clone();
            if meta.message.is_empty() {
                meta.message = format!("merge {from} into {into}");
            }
            let commit = make_commit(&[&target, &source], root, meta, Utc::now());
            let branch = (!options.prepare).then_some(into);
            match self.write_commit(branch, &target, commit, nodes).await {
                Ok(c) => {
                    return Ok(MergeOutcome {
                        head: c.id,
                        kind: MergeKind::MergeCommit,
                        tables: taken,
                        base_head: target.id,
                    });
                }
                Err(WriteError::RefMoved { .. }) => retry.wait(into).await?,
                Err(WriteError::Other(e)) => return Err(e),
            }
        }
    }

    /// Whether commit `a` is `b` or one of its ancestors (through any parent).
    /// Whether `a` is `b` or on `b`'s first-parent line (the history `log` walks from
    /// `b`).
    pub async fn on_first_parent_line(&self, a: CommitId, b: CommitId) -> Result<bool> {
        let a = self.objects.commit_by_id(a).await?;
        let b = self.objects.commit_by_id(b).await?;
        if a.depth > b.depth {
            return Ok(false);
        }
        Ok(
            crate::ancestry::ancestor_at_depth(&self.objects, b, a.depth)
                .await?
                .id
                == a.id,
        )
    }

    pub async fn is_ancestor(&self, a: CommitId, b: CommitId) -> Result<bool> {
        let a = self.objects.commit_by_id(a).await?;
        let b = self.objects.commit_by_id(b).await?;
        is_ancestor(&self.objects, &a, &b).await
    }

    /// The best common ancestor of two commits (the one with the largest generation).
    pub async fn merge_base_of(&self, a: CommitId, b: CommitId) -> Result<Option<Commit>> {
        let a = self.objects.commit_by_id(a).await?;
        let b = self.objects.commit_by_id(b).await?;
        Ok(merge_base(&self.objects, &a, &b)
            .await?
            .map(|c| (*c).clone()))
    }

    /// The commits a retention policy keeps: the head of every ref, and every commit
    /// no older than its window: the longest `window(branch)` of the branches it is
    /// reachable from, or `unreachable` when no branch reaches it (a deleted branch's
    /// commits, a tag's history). Heads first, each commit once.
    pub async fn retained_commits(
        &self,
        window: &(dyn Fn(&str) -> std::time::Duration + Sync),
        unreachable: std::time::Duration,
        now: chrono::DateTime<Utc>,
    ) -> Result<Retained> {
        let refs = self.store().references().await?;
        let young = |c: &Commit, w: std::time::Duration| {
            (now - c.timestamp).to_std().map_or(true, |age| age <= w)
        };
        let mut out = Retained::default();
        let mut kept: HashSet<Hash> = HashSet::new();
        for r in &refs {
            if kept.insert(r.head) {
                out.heads
                    .push((*self.objects.commit_by_id(r.head).await?).clone());
            }
        }
        // Branches with the longest window first: a commit is walked once, from the
        // branch that keeps it longest.
        let mut branches: Vec<(std::time::Duration, Hash)> = refs
            .iter()
            .filter(|r| r.kind == RefKind::Branch)
            .map(|r| (window(&r.name), r.head))
            .collect();
        branches.sort_by_key(|b| std::cmp::Reverse(b.0));
        let mut reached: HashSet<Hash> = HashSet::new();
        // What `branch@{time}` reads at the window's far end: the newest commit of the
        // branch's first-parent history older than its window.
        for &(w, head) in &branches {
            let mut at = head;
            loop {
                let c = self.objects.commit_by_id(at).await?;
                if !young(&c, w) {
                    if kept.insert(at) {
                        out.commits.push((*c).clone());
                    }
                    break;
                }
                match c.parents.first() {
                    Some(p) => at = *p,
                    None => break,
                }
            }
        }
        for (w, head) in branches {
            let mut stack = vec![head];
            while let Some(id) = stack.pop() {
                if !reached.insert(id) {
                    continue;
                }
                let c = self.objects.commit_by_id(id).await?;
                stack.extend(c.parents.iter().copied());
                if young(&c, w) && kept.insert(id) {
                    out.commits.push((*c).clone());
                }
            }
        }
        // Commits no branch reaches: every commit of the store, a page at a time.
        const PAGE: usize = 1000;
        let hi = Hash([0xff; 32]);
        let mut lo = Hash([0; 32]);
        loop {
            let page = self.store().commits_in_range(lo, hi, PAGE).await?;
            for id in &page {
                if reached.contains(id) || kept.contains(id) {
                    continue;
                }
                let c = self.objects.commit_by_id(*id).await?;
                if young(&c, unreachable) {
                    kept.insert(*id);
                    out.commits.push((*c).clone());
                }
            }
            match page.last() {
                Some(last) if page.len() == PAGE && *last != lo => lo = *last,
                _ => return Ok(out),
            }
        }
    }

    /// Reads every commit and tree node reachable from any ref, checking each object's
    /// hash and the tree's invariants. Costs a full scan: an administrator's tool.
    pub async fn check_integrity(&self) -> Result<IntegrityReport> {
        let refs = self.store().references().await?;
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
            let c = self.objects.commit_by_id(id).await?;
            for p in &c.parents {
                let pc = self.objects.commit_by_id(*p).await?;
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
            let n = self.objects.node(id).await?;
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

    fn store(&self) -> &dyn Store {
        &*self.objects.store
    }

    /// Stores a new commit and moves `branch` from `head` to it.
    /// Writes a commit on `head` and moves `branch` to it (`None`: moves no ref, for a
    /// prepared merge).
    async fn write_commit(
        &self,
        branch: Option<&str>,
        head: &Arc<Commit>,
        mut commit: Commit,
        nodes: Vec<tree::NewNode>,
    ) -> Result<Commit, WriteError> {
        let bytes = seal(&self.objects, &mut commit, head, &HashMap::new()).await?;
        let update = branch.map(|b| RefUpdate {
            name: b.into(),
            kind: RefKind::Branch,
            expected: Some(head.id),
            new: Some(commit.id),
            rewinds: false,
        });
        let commit = Arc::new(commit);
        let at = commit.timestamp;
        self.objects
            .write_new(
                nodes,
                vec![(commit.clone(), bytes)],
                update.into_iter().collect(),
                at,
            )
            .await?;
        Ok((*commit).clone())
    }
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
