//! Grouped commits. Concurrent commits to one branch in this process queue up; the
//! first of them starts a leader task that applies every queued request in order, each
//! checked against the state the previous ones left, and stores the resulting chain of
//! commits in one transaction. Each request still gets its own commit, its own
//! conflicts and its own answer, but eight writers cost about one transaction, not
//! eight. `Catalog::commit` validates a request and hands it to [`CommitQueues`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use tokio::sync::oneshot;

use crate::ancestry::{make_commit, seal};
use crate::error::{Error, ErrorKind, Result, TableConflict};
use crate::model::{Commit, CommitMeta, Hash, RefKind, TableOp, TablePointer};
use crate::objects::Objects;
use crate::retry::Retry;
use crate::store::{RefUpdate, WriteError};
use crate::tree;

/// The commit queues of a catalog, one per branch. Cloning shares them.
#[derive(Clone, Default)]
pub(crate) struct CommitQueues {
    /// Commit requests waiting for their branch's leader, by branch.
    queues: Arc<Mutex<HashMap<String, Arc<Mutex<Queue>>>>>,
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

impl CommitQueues {
    /// Commits the (validated) `ops` to `branch` with the other requests queued for it,
    /// and waits for this request's answer.
    pub(crate) async fn commit(
        &self,
        objects: &Objects,
        branch: &str,
        ops: Vec<TableOp>,
        meta: CommitMeta,
    ) -> Result<Commit> {
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
            let objects = objects.clone();
            let branch = branch.to_string();
            tokio::spawn(async move { drain(&objects, branch, queue).await });
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Storage,
                "the commit was abandoned by its writer task; it may or may not have landed",
            ))
        })
    }

    fn queue(&self, branch: &str) -> Arc<Mutex<Queue>> {
        let mut queues = self.queues.lock().expect("queues lock");
        queues.entry(branch.to_string()).or_default().clone()
    }
}

/// The leader: drains the queue of `branch`, one batch at a time.
async fn drain(objects: &Objects, branch: String, queue: Arc<Mutex<Queue>>) {
    /// Hands leadership back if the batch panics; the queued callers then get errors.
    /// (Only on a panic: on a normal return leadership was handed back under the
    /// lock, and a new leader may already be draining requests queued since.)
    struct Guard(Arc<Mutex<Queue>>);
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
        commit_batch(objects, &branch, batch).await;
    }
}

/// Applies a batch of commit requests to `branch` as one chain of commits.
async fn commit_batch(objects: &Objects, branch: &str, requests: Vec<Request>) {
    let mut retry = Retry::new();
    let outcome = loop {
        match try_commit_batch(objects, branch, &requests).await {
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
    objects: &Objects,
    branch: &str,
    requests: &[Request],
) -> Result<Option<Vec<Result<Commit>>>> {
    let row = objects.expect_kind(branch, RefKind::Branch).await?;
    let head = objects.commit_by_id(row.head).await?;
    let keys: Vec<&str> = requests
        .iter()
        .flat_map(|r| r.ops.iter().map(TableOp::table))
        .collect();
    let mut view = HashMap::new();
    let root0 = head.tree;
    objects
        .prefetch(&mut view, |v| tree::missing_for_keys(v, root0, &keys))
        .await?;

    let mut parent = head.clone();
    let mut chain: HashMap<Hash, Arc<Commit>> = HashMap::new();
    let mut nodes = Vec::new();
    let mut commits = Vec::new();
    let mut results = Vec::with_capacity(requests.len());
    for req in requests {
        let root = parent.tree;
        let tables: Vec<&str> = req.ops.iter().map(TableOp::table).collect();
        let current: Vec<Option<TablePointer>> = objects
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
        let (new_root, new_nodes) = objects
            .run_tree(&mut view, |v| tree::apply(v, root, &edits))
            .await?;
        for n in new_nodes {
            view.insert(n.id, n.node.clone());
            nodes.push(n);
        }
        let mut commit = make_commit(&[&parent], new_root, req.meta.clone(), Utc::now());
        let bytes = seal(objects, &mut commit, &parent, &chain).await?;
        let commit = Arc::new(commit);
        chain.insert(commit.id, commit.clone());
        commits.push((commit.clone(), bytes));
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
        rewinds: false,
    };
    match objects
        .write_new(nodes, commits, vec![update], parent.timestamp)
        .await
    {
        Ok(()) => Ok(Some(results)),
        Err(WriteError::RefMoved { .. }) => Ok(None),
        Err(WriteError::Other(e)) => Err(e),
    }
}
