//! The store as the catalog's operations see it: commits and tree nodes by id, decoded,
//! checked against their hashes and kept in caches (they never change); the tree
//! algorithms of `tree.rs` run over the nodes they need, loaded in batches; refs read
//! with the errors the operations give; and write batches that keep what they stored
//! in the caches. `catalog.rs`, `group.rs` and `ancestry.rs` all build on this layer,
//! which knows nothing of them.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, SubsecRound, Utc};

use crate::codec;
use crate::error::{Error, ErrorKind, Result};
use crate::model::{Commit, CommitId, Hash, Node, RefKind, TablePointer};
use crate::store::{RefRow, RefUpdate, Store, WriteBatch, WriteError};
use crate::tree::{self, Missing};

/// A store behind caches of decoded objects. Cloning is cheap and shares everything.
#[derive(Clone)]
pub(crate) struct Objects {
    pub(crate) store: Arc<dyn Store>,
    nodes: Arc<quick_cache::sync::Cache<Hash, Arc<Node>>>,
    commits: Arc<quick_cache::sync::Cache<Hash, Arc<Commit>>>,
}

impl Objects {
    /// `store` behind caches of `nodes` tree nodes and `commits` commits.
    pub(crate) fn new(store: Arc<dyn Store>, nodes: u64, commits: u64) -> Objects {
        Objects {
            store,
            nodes: Arc::new(quick_cache::sync::Cache::new(nodes as usize)),
            commits: Arc::new(quick_cache::sync::Cache::new(commits as usize)),
        }
    }

    /// The ref `name`, which must be of `kind`.
    pub(crate) async fn expect_kind(&self, name: &str, kind: RefKind) -> Result<RefRow> {
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

    pub(crate) async fn commit_by_id(&self, id: CommitId) -> Result<Arc<Commit>> {
        if let Some(c) = self.commits.get(&id) {
            return Ok(c);
        }
        let rows = self.store.commits(&[id]).await?;
        let Some((_, bytes)) = rows.into_iter().next() else {
            return Err(Error::new(
                ErrorKind::RefNotFound,
                format!("commit {} not found", id.short()),
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

    /// The commits whose hash starts with `prefix`, at most `limit` of them.
    pub(crate) async fn commits_by_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<CommitId>> {
        let lo: Hash = format!("{prefix:0<64}").parse()?;
        let hi: Hash = format!("{prefix:f<64}").parse()?;
        self.store.commits_in_range(lo, hi, limit).await
    }

    pub(crate) async fn commit_by_prefix(&self, prefix: &str) -> Result<Arc<Commit>> {
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

    pub(crate) async fn node(&self, id: Hash) -> Result<Arc<Node>> {
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
    pub(crate) async fn prefetch(
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
    pub(crate) async fn run_tree<T>(
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

    pub(crate) async fn lookup_many(
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

    pub(crate) async fn edit_tree(
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

    /// Applies ref updates that store no object, at the current time.
    pub(crate) async fn write_refs(&self, refs: Vec<RefUpdate>) -> Result<(), WriteError> {
        self.write_at(vec![], vec![], refs, Utc::now().trunc_subsecs(6))
            .await
    }

    /// Stores new tree nodes and sealed commits (with their encodings) together with
    /// the ref updates, at `at`; once stored, they stay decoded in the caches.
    pub(crate) async fn write_new(
        &self,
        nodes: Vec<tree::NewNode>,
        commits: Vec<(Arc<Commit>, Vec<u8>)>,
        refs: Vec<RefUpdate>,
        at: DateTime<Utc>,
    ) -> Result<(), WriteError> {
        let (node_rows, decoded): (Vec<_>, Vec<_>) = nodes
            .into_iter()
            .map(|n| ((n.id, n.bytes), (n.id, n.node)))
            .unzip();
        let (commit_rows, sealed): (Vec<_>, Vec<_>) = commits
            .into_iter()
            .map(|(c, bytes)| ((c.id, bytes), c))
            .unzip();
        self.write_at(node_rows, commit_rows, refs, at).await?;
        for (id, node) in decoded {
            self.nodes.insert(id, node);
        }
        for c in sealed {
            self.commits.insert(c.id, c);
        }
        Ok(())
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
}
