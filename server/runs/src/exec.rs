//! Executing a planned run on its temporary branch, then publishing it.

pub(crate) mod call;
pub(crate) mod memo;
mod partitioned;
use call::*;
use memo::*;
use partitioned::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use lh_api::{ImportMode, NodeStatus, RunStatus};

use crate::RunRecord;
use lh_catalog::{Commit, CommitMeta, MergeOptions, RefExpr, TableOp, TablePointer};
use lh_runner::{Invocation, InvocationKind, Outcome};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::project::{Lang, Materialize, NodeKind, Plan, PlanNode, Severity};
use super::store::{Claim, Lease, NodeRecord};
use super::{RunService, RunStart, kind_name, lang_name};
use crate::auth::secrets::redact;
use crate::auth::{Action, Identity};
use crate::duck::quote_ident;
use crate::error::{Code, Error, Result};
use crate::merges::Via;
use crate::query::view::view_name;
use crate::tables::write::{Source, WriteJob, write_table};

/// What every node task of a run shares.
struct Shared {
    svc: Arc<RunService>,
    id: String,
    run_branch: String,
    plan: Plan,
    /// The run's code snapshot: its content hash and its folder.
    code_hash: String,
    code_root: PathBuf,
    /// Who started it: the author of its commits, whose grants its writes need.
    by: Identity,
    /// The branch it publishes to: its writes are checked against `by`'s grants there.
    target: String,
    no_cache: bool,
    reuse: BTreeMap<String, TablePointer>,
    /// Environment key to lock, of every environment the run used.
    envs: Mutex<BTreeMap<String, String>>,
    /// This server's claim on the run: every record names it.
    claim: Claim,
    control: Control,
    /// The commit the run's branch started from.
    input_commit: String,
    /// Held by the instance of a partitioned model that creates its table, while it
    /// does: the other instances then overwrite partitions of it.
    creating: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Bytes of its functions' logs the run keeps so far (see [`MAX_RUN_LOG`]).
    logged: std::sync::atomic::AtomicUsize,
}

/// The most of its functions' logs a run keeps, all its nodes together (each call keeps
/// its last MiB; a project may have any number of nodes): a call past it keeps the end
/// of its log that fits, if any.
const MAX_RUN_LOG: usize = 64 << 20;

impl Shared {
    /// What the run keeps of a call's `log`, within [`MAX_RUN_LOG`].
    fn keep_log(&self, log: String) -> String {
        use std::sync::atomic::Ordering;
        let before = self.logged.fetch_add(log.len(), Ordering::Relaxed);
        let room = MAX_RUN_LOG.saturating_sub(before);
        if log.len() <= room {
            return log;
        }
        let kept = lh_runner::protocol::last(log, room);
        format!(
            "[lh] the run's logs passed {} MiB: this call keeps the end of its own\n{kept}",
            MAX_RUN_LOG >> 20
        )
    }

    /// The oldest memoized output the run may reuse (see `store::reusable_since`).
    fn reusable_since(&self) -> chrono::DateTime<Utc> {
        super::store::reusable_since(Utc::now(), self.svc.tables.retention().unreachable())
    }

    /// Whether this server may still act on the run: not lost, and its lease renewed
    /// recently enough that no other server can have taken it over. A heartbeat that is
    /// late (a busy server or database) is not a lost run: the lease is renewed here,
    /// which holds only while no other server has claimed the run.
    async fn may_act(&self) -> bool {
        if self.control.lost.load(Ordering::SeqCst) {
            return false;
        }
        if self
            .svc
            .lease_fresh(self.control.renewed.load(Ordering::SeqCst))
        {
            return true;
        }
        let now = Utc::now().timestamp_millis();
        match self
            .svc
            .store
            .renew(&self.id, &self.claim, self.svc.lease_until())
            .await
        {
            // Held, and renewed soon enough that the lease it set is still well ahead
            // (a renew that waited long may have set a deadline already past).
            Ok(Lease::Held { .. }) => {
                self.control.renewed.fetch_max(now, Ordering::SeqCst);
                self.svc.lease_fresh(now)
            }
            Ok(Lease::Lost) => {
                self.control.lost.store(true, Ordering::SeqCst);
                self.control.cancel.cancel();
                false
            }
            Err(e) => {
                tracing::warn!(run = %self.id, "cannot renew the run's lease before a write: {e}");
                false
            }
        }
    }
}

/// How the run service steers a run it drives.
#[derive(Clone)]
pub(crate) struct Control {
    pub cancel: CancellationToken,
    /// The run is no longer this server's: stop, record nothing, publish nothing.
    pub lost: Arc<AtomicBool>,
    /// When its lease was last renewed (Unix ms).
    pub renewed: Arc<AtomicI64>,
}

impl Control {
    pub fn new() -> Control {
        Control {
            cancel: CancellationToken::new(),
            lost: Arc::new(AtomicBool::new(false)),
            renewed: Arc::new(AtomicI64::new(Utc::now().timestamp_millis())),
        }
    }
}

pub(crate) struct Run {
    shared: Arc<Shared>,
    info: RunRecord,
    strict: bool,
    publish: bool,
    /// Each node's state when execution starts (all waiting, unless resumed).
    initial: Vec<NodeStatus>,
}

impl Run {
    pub fn new(
        svc: Arc<RunService>,
        info: RunRecord,
        plan: Plan,
        start: RunStart,
        claim: Claim,
        control: Control,
    ) -> Run {
        let code_root = svc.code.root().join(&info.code_hash);
        let shared = Arc::new(Shared {
            svc,
            id: info.id.clone(),
            run_branch: info.run_branch.clone(),
            plan,
            code_hash: info.code_hash.clone(),
            code_root,
            by: start.by,
            target: info.target.clone(),
            no_cache: start.no_cache,
            reuse: start.reuse,
            envs: Mutex::new(BTreeMap::new()),
            claim,
            control,
            input_commit: info.input_commit.clone(),
            creating: Mutex::new(BTreeMap::new()),
            logged: Default::default(),
        });
        Run {
            initial: vec![NodeStatus::Waiting; shared.plan.nodes.len()],
            shared,
            strict: start.strict,
            publish: start.publish,
            info,
        }
    }

    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// A run taken over: `initial` is each node's state as found; the models of
    /// `recovered` had their output committed on the run's branch (at these pointers)
    /// by the server that stopped, and are recorded done.
    pub async fn recover(
        &mut self,
        initial: Vec<NodeStatus>,
        recovered: Vec<(usize, TablePointer)>,
    ) {
        let svc = &self.shared.svc;
        for (i, p) in recovered {
            let mut rec = self.record(i);
            rec.status = NodeStatus::Done;
            rec.finished_at = Some(Utc::now());
            rec.reason = Some(
                "recovered: its output was committed on the run's branch before the server driving the run stopped".into(),
            );
            rec.rows = snapshot_count(svc, &p, "added-records").await;
            rec.output = Some(p);
            let _ = svc
                .store
                .update_node(&self.shared.id, &self.shared.claim, &rec)
                .await;
        }
        // A node recorded running had started on the stopped server: it starts again.
        for (i, s) in initial.iter().enumerate() {
            if *s == NodeStatus::Waiting {
                let rec = self.record(i);
                let _ = svc
                    .store
                    .update_node(&self.shared.id, &self.shared.claim, &rec)
                    .await;
            }
        }
        self.initial = initial;
    }

    fn is_lost(&self) -> bool {
        self.shared.control.lost.load(Ordering::SeqCst)
    }

    fn record(&self, i: usize) -> NodeRecord {
        let n = &self.shared.plan.nodes[i];
        NodeRecord::new(
            n.display_name(),
            0,
            kind_name(&n.kind).into(),
            lang_name(&n.lang).into(),
            n.location(),
            n.inputs.iter().map(|i| i.table.clone()).collect(),
            NodeStatus::Waiting,
        )
    }

    pub async fn execute(self) {
        // Instrumented, never entered across an await: an entered span stays current on
        // the worker thread while the task sleeps, and other tasks' spans then close out
        // of order (tracing panics on that, which took down whatever task hit it).
        let span = tracing::info_span!("run", run = %self.shared.id, project = %self.info.project);
        self.execute_in_span().instrument(span).await
    }

    async fn execute_in_span(self) {
        let svc = self.shared.svc.clone();
        let id = self.shared.id.clone();
        let plan = &self.shared.plan;
        let n = plan.nodes.len();
        let mut status = self.initial.clone();
        debug_assert_eq!(status.len(), n);
        let mut tasks: JoinSet<(usize, NodeRecord)> = JoinSet::new();
        let parallelism = svc.config.parallelism.max(1);
        let mut cancelled = false;
        loop {
            // Start what is ready; skip what can no longer run.
            let mut progressed = true;
            while progressed {
                progressed = false;
                for &i in &plan.order {
                    if status[i] != NodeStatus::Waiting {
                        continue;
                    }
                    let producers = plan.nodes[i].depends_on();
                    if producers
                        .iter()
                        .any(|&p| matches!(status[p], NodeStatus::Failed | NodeStatus::Skipped))
                    {
                        status[i] = NodeStatus::Skipped;
                        let mut rec = self.record(i);
                        rec.status = NodeStatus::Skipped;
                        rec.error = Some("an input failed".into());
                        let _ = svc.store.update_node(&id, &self.shared.claim, &rec).await;
                        progressed = true;
                        continue;
                    }
                    let ready = producers
                        .iter()
                        .all(|&p| matches!(status[p], NodeStatus::Done | NodeStatus::Cached));
                    if ready && tasks.len() < parallelism && !cancelled {
                        status[i] = NodeStatus::Running;
                        let shared = self.shared.clone();
                        let rec = self.record(i);
                        tasks.spawn(async move {
                            let rec = run_node(&shared, i, rec).await;
                            (i, rec)
                        });
                        progressed = true;
                    }
                }
            }
            if tasks.is_empty() {
                break;
            }
            tokio::select! {
                _ = self.shared.control.cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    tasks.abort_all();
                }
                done = tasks.join_next() => match done {
                    Some(Ok((i, rec))) => status[i] = rec.status,
                    Some(Err(_)) => {} // aborted by a cancel; recorded below
                    None => {}
                }
            }
        }
        if self.is_lost() {
            tracing::warn!("the run is no longer this server's: nothing more is recorded here");
            return;
        }
        if cancelled {
            // A node stopped while it ran was cancelled; one that never started, skipped.
            for (i, s) in status.iter_mut().enumerate() {
                if matches!(s, NodeStatus::Waiting | NodeStatus::Running) {
                    let (now, why) = if *s == NodeStatus::Running {
                        (NodeStatus::Cancelled, "cancelled while it ran")
                    } else {
                        (NodeStatus::Skipped, "the run was cancelled")
                    };
                    *s = now;
                    let mut rec = self.record(i);
                    rec.status = now;
                    rec.error = Some(why.into());
                    let _ = svc.store.update_node(&id, &self.shared.claim, &rec).await;
                }
            }
        }

        // Publish, or keep the branch for inspection.
        let envs = self
            .shared
            .envs
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        let mut failed = Vec::new();
        let mut skipped = 0;
        for &i in &plan.order {
            let node = &plan.nodes[i];
            match (&node.kind, status[i]) {
                (_, NodeStatus::Skipped) => skipped += 1,
                (NodeKind::Model { .. }, NodeStatus::Failed) => {
                    failed.push(format!("{} failed", node.display_name()))
                }
                (NodeKind::Expectation { .. }, NodeStatus::Failed) => {
                    failed.push(format!("expectation {} failed", node.name))
                }
                (NodeKind::Expectation { .. }, NodeStatus::Warned) if self.strict => {
                    failed.push(format!(
                        "expectation {} failed (a warning, which --strict makes blocking)",
                        node.name
                    ))
                }
                _ => {}
            }
        }
        let mut problems = failed;
        if skipped > 0 && !problems.is_empty() {
            problems.push(format!(
                "{skipped} node{} skipped",
                if skipped == 1 { "" } else { "s" }
            ));
        }
        let (final_status, error, merge) = if cancelled {
            (
                RunStatus::Cancelled,
                Some("the run was cancelled; nothing was published".to_string()),
                None,
            )
        } else if !problems.is_empty() {
            (
                RunStatus::Failed,
                Some(format!("{}; nothing was published", problems.join(", "))),
                None,
            )
        } else if !self.publish {
            (RunStatus::Succeeded, None, None)
        } else if !self.still_ours().await {
            return;
        } else {
            let meta = CommitMeta::new(
                &self.shared.by.user,
                format!("lh run {} ({})", self.info.project, id),
            )
            .with_property("lh.run", &id)
            .with_property("lh.project", &self.info.project)
            .with_property("lh.code", &self.info.code_hash);
            let options = MergeOptions {
                meta,
                expected_head: None,
                no_fast_forward: true,
                prepare: false,
                ..MergeOptions::default()
            };
            let merged = svc
                .merger
                .merge(
                    &self.shared.by,
                    &RefExpr::named(&self.shared.run_branch),
                    &self.info.target,
                    Via::RunPublish,
                    options,
                )
                .await;
            match merged.map(|m| m.outcome) {
                Ok(out) => {
                    // With the starter's grants as they are now.
                    let by = svc.merger.current(&self.shared.by).await.ok();
                    if let Some(by) = &by {
                        for t in &out.tables {
                            crate::maintenance::after_write(
                                &svc.tables,
                                &svc.import,
                                &self.info.target,
                                &t.table,
                                by,
                            );
                        }
                    }
                    // Already in the target (published by the server that stopped):
                    // the merge commit is the one that names the run.
                    let head = match out.kind {
                        lh_catalog::MergeKind::UpToDate => {
                            svc.published(&self.info).await.ok().flatten()
                        }
                        _ => Some(out.head.to_hex()),
                    };
                    if let Err(e) = svc
                        .catalog
                        .delete_branch(&self.shared.run_branch, None)
                        .await
                    {
                        tracing::warn!("cannot delete the run branch after publishing: {e}");
                    }
                    (RunStatus::Succeeded, None, head)
                }
                // The merge failed, but the run may be in the target already (a
                // server that lost it published it meanwhile).
                Err(_) if matches!(svc.published(&self.info).await, Ok(Some(_))) => {
                    let merge = svc.published(&self.info).await.ok().flatten();
                    (RunStatus::Succeeded, None, merge)
                }
                Err(e) => (
                    RunStatus::Failed,
                    Some(format!(
                        "cannot publish into '{}': {}; nothing was published (the run branch '{}' is kept)",
                        self.info.target, e.message, self.shared.run_branch
                    )),
                    None,
                ),
            }
        };
        match svc
            .store
            .finish_run(
                &id,
                &self.shared.claim,
                final_status,
                error.as_deref(),
                merge.as_deref(),
                &envs,
            )
            .await
        {
            Ok(true) => {
                tracing::info!(status = final_status.as_str(), "run finished");
                // A check's run wrote nothing: its branch, at the commit it read, goes
                // whatever the outcome (a failed run that publishes keeps its own for
                // inspection); once its end is recorded as this server's, so that no
                // server takes it over and finds its branch gone.
                if !self.publish
                    && let Err(e) = svc
                        .catalog
                        .delete_branch(&self.shared.run_branch, None)
                        .await
                {
                    tracing::warn!("cannot delete the run branch: {e}");
                }
            }
            Ok(false) => tracing::warn!(
                "the run ended here but is no longer this server's; its end is not recorded here"
            ),
            Err(e) => tracing::error!("cannot record the end of run {id}: {e}"),
        }
    }

    /// Whether the run is still this server's just before it publishes (its lease
    /// renewed): a server that lost it publishes nothing.
    async fn still_ours(&self) -> bool {
        if self.is_lost() {
            return false;
        }
        let svc = &self.shared.svc;
        let now = Utc::now().timestamp_millis();
        match svc
            .store
            .renew(&self.shared.id, &self.shared.claim, svc.lease_until())
            .await
        {
            // Held, and renewed soon enough that the lease it set is still well ahead.
            Ok(Lease::Held { .. }) => {
                self.shared.control.renewed.fetch_max(now, Ordering::SeqCst);
                svc.lease_fresh(now)
            }
            Ok(Lease::Lost) => {
                self.shared.control.lost.store(true, Ordering::SeqCst);
                tracing::warn!(
                    "the run was taken over by another server before it published: nothing is published here"
                );
                false
            }
            Err(e) => {
                // Not knowing whether it is still ours, it does not publish: the lease
                // runs out and a server that reaches the database goes on.
                tracing::warn!("cannot renew the run's lease before publishing: {e}");
                self.shared.control.lost.store(true, Ordering::SeqCst);
                false
            }
        }
    }
}

/// A count of the current snapshot's summary (`added-records`, `total-records`) of the
/// table version `p`, if it has one.
async fn snapshot_count(svc: &RunService, p: &lh_catalog::TablePointer, key: &str) -> Option<u64> {
    let m = svc.tables.metadata(&p.metadata_location).await.ok()?;
    m.current_snapshot()?
        .summary()
        .additional_properties
        .get(key)?
        .parse()
        .ok()
}

/// Runs one node to its end state (never panics on user errors: they are the record).
async fn run_node(shared: &Shared, i: usize, mut rec: NodeRecord) -> NodeRecord {
    let svc = &shared.svc;
    rec.status = NodeStatus::Running;
    rec.started_at = Some(Utc::now());
    let _ = svc.store.update_node(&shared.id, &shared.claim, &rec).await;
    let node = &shared.plan.nodes[i];
    let span = tracing::info_span!("node", run = %shared.id, node = %node.display_name());
    if let Err(e) = node_body(shared, node, &mut rec).instrument(span).await {
        rec.status = NodeStatus::Failed;
        rec.error = Some(e.message.clone());
    }
    rec.finished_at = Some(Utc::now());
    if let Err(e) = svc.store.update_node(&shared.id, &shared.claim, &rec).await {
        tracing::error!("cannot record node {}: {e}", node.display_name());
    }
    rec
}

async fn node_body(shared: &Shared, node: &PlanNode, rec: &mut NodeRecord) -> Result<()> {
    let svc = &shared.svc;
    let head = svc.catalog.resolve(&shared.run_branch).await?.commit;
    // The inputs as they are on the run's branch now (upstream outputs included); an
    // instance of a partitioned model reads them filtered to its partition.
    let mut inputs = Vec::new();
    for inp in &node.inputs {
        let t = svc.tables.load(&head, &inp.table).await?.ok_or_else(|| {
            Error::not_found(
                Code::TableNotFound,
                format!("input '{}' is not on the run's branch", inp.table),
            )
        })?;
        let part = match &node.partition {
            Some(p) if !inp.whole => partition_input(svc, &t, p).await?,
            _ => None,
        };
        inputs.push(Input {
            pointer: t.pointer.clone(),
            part,
        });
    }
    let partition_params = node.partition.as_ref().map(|p| p.params());
    let params: BTreeMap<String, serde_json::Value> = node
        .params
        .iter()
        .filter_map(|(arg, p)| {
            partition_params
                .as_ref()
                .and_then(|pp| pp.get(p))
                .or_else(|| shared.plan.params.get(p))
                .map(|v| (arg.clone(), v.clone()))
        })
        .collect();

    if let NodeKind::Expectation { severity } = node.kind {
        let Lang::Python { .. } = &node.lang else {
            return Err(Error::internal("only Python expectations exist"));
        };
        let call = Call {
            node,
            head: &head,
            kind: InvocationKind::Expectation,
            params: &params,
            inputs: &inputs,
        };
        let outcome = invoke(shared, call, rec).await?;
        match outcome {
            Outcome::Expectation { passed: true, .. } => rec.status = NodeStatus::Passed,
            Outcome::Expectation {
                passed: false,
                detail,
            } => {
                rec.status = match severity {
                    Severity::Error => NodeStatus::Failed,
                    Severity::Warn => NodeStatus::Warned,
                };
                rec.error = Some(lh_api::EXPECTATION_NOT_MET.into());
                rec.detail = (!detail.is_empty()).then_some(detail);
            }
            Outcome::Failed { error, traceback } => {
                rec.status = NodeStatus::Failed;
                rec.error = Some(error);
                rec.traceback = (!traceback.is_empty()).then_some(traceback);
            }
            Outcome::Model { .. } => {
                return Err(Error::internal("an expectation answered like a model"));
            }
        }
        return Ok(());
    }

    let NodeKind::Model { materialize } = node.kind else {
        unreachable!()
    };
    let table = node.name.clone();
    let current = svc.catalog.table_in(&head, &table).await?;
    // Only this node writes its table on the run's branch: a table other than at the
    // input commit is its output, committed already (by a server that drove the run
    // before this one). Never written twice: an append would append again.
    let input = svc
        .catalog
        .resolve(&format!("@{}", shared.input_commit))
        .await?
        .commit;
    let original = svc.catalog.table_in(&input, &table).await?;
    // (The instances of a partitioned model all write its table: each overwrites its
    // partitions, which is the same when done twice.)
    if let Some(p) = current
        .as_ref()
        .filter(|p| Some(*p) != original.as_ref() && node.partition.is_none())
    {
        rec.status = NodeStatus::Done;
        rec.reason = Some(
            "recovered: its output was committed on the run's branch by the server that drove the run before".into(),
        );
        rec.output = Some(p.clone());
        return Ok(());
    }
    // A Python model's environment is part of its key by what is installed in it (its
    // lock), not only by what the project asked for: a range such as `>=1,<2` may
    // resolve to another version once an evicted environment is built again.
    let python_env = match &node.lang {
        Lang::Python { env, .. } => Some(built_env(shared, env, rec).await?.0),
        Lang::Sql { .. } => None,
    };
    let env_key = python_env.as_ref().map(|built| {
        format!(
            "{} lock {}",
            built.key,
            &blake3::hash(built.lock.as_bytes()).to_hex()[..16]
        )
    });
    // A secret enters the key by its name and version, never its value.
    let secret_versions = match &node.lang {
        Lang::Python { secrets, .. } if !secrets.is_empty() => {
            svc.secrets.versions(secrets, &shared.target).await?
        }
        _ => BTreeMap::new(),
    };
    let (fingerprint, parts) = fingerprint(
        shared,
        node,
        &inputs,
        &params,
        env_key.as_deref(),
        current.as_ref(),
        &secret_versions,
    )?;
    rec.fingerprint = Some(fingerprint.clone());
    let parts_json = serde_json::to_string(&parts).unwrap_or_default();

    // Reuse: the replayed run's output (--from-failed), or a memoized one.
    let reused = match shared.reuse.get(&node.display_name()) {
        Some(p) => {
            rec.reason = Some("reused: the output of the replayed run (--from-failed)".into());
            Some(p.clone())
        }
        None if !shared.no_cache => {
            match svc
                .store
                .memo_get(&fingerprint, shared.reusable_since())
                .await?
                .filter(|(t, _, _)| *t == table)
            {
                Some((_, p, run)) => {
                    rec.reason = Some(format!(
                        "reused: the output of run {} (same code, environment, parameters and inputs)",
                        &run[..run.len().min(12)]
                    ));
                    Some(p)
                }
                None => {
                    let before = svc.store.memo_latest_parts(&table).await?;
                    rec.reason = Some(why_not_reused(before.as_deref(), &parts));
                    None
                }
            }
        }
        None => {
            rec.reason = Some("ran: --no-cache".into());
            None
        }
    };
    // An instance's output is its files, put back into its partitions.
    let reused = match (reused, &node.partition) {
        (Some(p), Some(_)) => match put_back(shared, node, &p).await {
            Ok((p, rows)) => {
                rec.status = NodeStatus::Cached;
                rec.cached = true;
                rec.rows = Some(rows);
                rec.output = Some(p);
                return Ok(());
            }
            Err(e) => {
                rec.reason = Some(format!(
                    "ran: the output to reuse cannot be put back ({})",
                    e.message
                ));
                None
            }
        },
        (reused, _) => reused,
    };
    if let Some(p) = reused {
        if current.as_ref() != Some(&p) {
            let op = TableOp::Put {
                table: table.clone(),
                expected: current.clone(),
                pointer: p.clone(),
            };
            shared.by.require_table(
                Action::Write,
                &RefExpr::named(&shared.target),
                &table,
                "reusing a memoized output",
            )?;
            let meta = CommitMeta::new(&shared.by.user, format!("reuse {table} (memoized)"))
                .with_property("lh.run", &shared.id)
                .with_property("lh.node", &node.name)
                .with_property("lh.cached", "true");
            svc.catalog
                .commit(&shared.run_branch, vec![op], meta)
                .await?;
        }
        rec.status = NodeStatus::Cached;
        rec.cached = true;
        rec.rows = snapshot_count(svc, &p, "total-records").await;
        rec.output = Some(p);
        return Ok(());
    }

    let mut mode = match (materialize, &current) {
        (_, None) => ImportMode::Create,
        (Materialize::Replace, Some(_)) => ImportMode::Replace,
        (Materialize::Append, Some(_)) => ImportMode::Append,
        (Materialize::OverwritePartitions, Some(_)) => ImportMode::OverwritePartitions,
    };
    let props = BTreeMap::from([
        ("lh.run".to_string(), shared.id.clone()),
        ("lh.node".to_string(), node.display_name()),
    ]);
    // The files a SQL model's views read stay in the read cache until its write ends.
    let mut input_pins = crate::warehouse::cache::Pins::none();
    let (source, work) = match &node.lang {
        Lang::Sql { sql, .. } => {
            // The same views as queries read, made in the write's own database.
            let names: Vec<Vec<String>> = node
                .inputs
                .iter()
                .map(|inp| match lh_catalog::names::to_sql(&inp.table) {
                    Some((ns, t)) => vec![ns, t],
                    None => vec![inp.table.clone()],
                })
                .collect();
            // Each input's view by the input's own name, never its SQL spelling read
            // back (`"a.b".t` is one level or nested: the name says which).
            let named: BTreeMap<Vec<String>, String> = names
                .iter()
                .zip(&node.inputs)
                .map(|(n, i)| (n.clone(), i.table.clone()))
                .collect();
            let missing = |_: &str| Error::internal("input vanished");
            let pruned: BTreeMap<Vec<String>, Vec<crate::query::prune::Bound>> = names
                .iter()
                .zip(&inputs)
                .filter_map(|(n, i)| Some((n.clone(), i.part.as_ref()?.bound.clone())))
                .collect();
            let (views, pins) = svc
                .queries
                .views_of(&head, &names, &named, &missing, &pruned)
                .await?;
            input_pins = pins;
            let mut setup: Vec<String> = views.into_iter().map(|v| v.sql).collect();
            // An input filtered to the partition: its view renamed, and a view of the
            // partition's rows in its place.
            for (k, (parts, i)) in names.iter().zip(&inputs).enumerate() {
                let (Some(part), [ns, _]) = (&i.part, parts.as_slice()) else {
                    continue;
                };
                // (No lh table has a space in its name.)
                let all = format!("lh unfiltered {k}");
                setup.push(format!(
                    "ALTER VIEW {} RENAME TO {};",
                    view_name(parts),
                    quote_ident(&all)
                ));
                setup.push(format!(
                    "CREATE VIEW {} AS SELECT * FROM {}.{} WHERE {};",
                    view_name(parts),
                    quote_ident(ns),
                    quote_ident(&all),
                    part.sql
                ));
            }
            // A table the SQL names without a namespace is exposed under its bare name too.
            for (inp, parts) in node.inputs.iter().zip(&names) {
                if let (true, [_, table]) = (inp.bare, parts.as_slice()) {
                    setup.push(format!(
                        "CREATE OR REPLACE VIEW main.{} AS SELECT * FROM {};",
                        quote_ident(table),
                        view_name(parts)
                    ));
                }
            }
            let source = Source::Query {
                setup,
                sql: sql.clone(),
                params: params.clone(),
                label: format!("model {}", node.name),
            };
            (source, None)
        }
        Lang::Python { .. } => {
            let work = svc.config.work_root.join(format!(
                "{}-{}",
                shared.id,
                uuid::Uuid::new_v4().simple()
            ));
            let call = Call {
                node,
                head: &head,
                kind: InvocationKind::Model,
                params: &params,
                inputs: &inputs,
            };
            let outcome = invoke_in(shared, call, rec, &work, python_env).await;
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&work);
                    return Err(e);
                }
            };
            match outcome {
                Outcome::Model { .. } => {}
                Outcome::Failed { error, traceback } => {
                    let _ = std::fs::remove_dir_all(&work);
                    rec.status = NodeStatus::Failed;
                    rec.error = Some(error);
                    rec.traceback = (!traceback.is_empty()).then_some(traceback);
                    return Ok(());
                }
                Outcome::Expectation { .. } => {
                    return Err(Error::internal("a model answered like an expectation"));
                }
            }
            // The function's process wrote into this folder: its output must be a
            // regular file of the folder, never a link planted to make the server read
            // something else (another table's files, a file of the host).
            let out = work.join("out.parquet");
            if !std::fs::symlink_metadata(&out).is_ok_and(|m| m.file_type().is_file()) {
                let _ = std::fs::remove_dir_all(&work);
                rec.status = NodeStatus::Failed;
                rec.error = Some(
                    "the function's output is not a regular file (a link or a folder was put in its place); nothing was read".into(),
                );
                return Ok(());
            }
            let source = Source::Files {
                format: lh_api::FileFormat::Parquet,
                files: vec![out],
                names: vec![format!("the output of {}", node.name)],
            };
            (source, Some(work))
        }
    };
    // The first instance of a partitioned model to write creates its table; the others
    // wait for it, then overwrite their partitions.
    let (creating, within) = match &node.partition {
        Some(_) => {
            let (turn, m, now) = instance_mode(shared, &table).await?;
            mode = m;
            (turn, instance_within(svc, node, now.as_ref()).await?)
        }
        None => (None, None),
    };
    let job = WriteJob {
        branch: shared.run_branch.clone(),
        table: table.clone(),
        mode,
        source,
        by: shared.by.clone(),
        grants_on: Some(shared.target.clone()),
        message: Some(format!(
            "{} {table} (run {})",
            lang_name(&node.lang),
            &shared.id[..12]
        )),
        properties: props,
        // A SQL model is its query: its timeout bounds the write. A Python model's
        // timeout bounded its function; writing its output is lh's own work.
        timeout: match &node.lang {
            Lang::Sql { .. } => Some(node.lang.limits().timeout),
            Lang::Python { .. } => None,
        },
        partition_by: node.partitioned_by.clone(),
        replaces: None,
        within,
    };
    if svc.import.writers.available_permits() == 0 {
        rec.log.push_str(
            "[lh] every write slot of the server is busy (--max-concurrent-writes): this output waits for one\n",
        );
    }
    if !shared.may_act().await {
        return Err(Error::internal(
            "the run is no longer this server's (its lease was not renewed in time); nothing was written",
        ));
    }
    let written = write_table(&svc.tables, &svc.import, job).await;
    drop(creating);
    drop(input_pins);
    if let Some(w) = work {
        let _ = std::fs::remove_dir_all(w);
    }
    let written = written?;
    let p = svc
        .catalog
        .get_table(&format!("@{}", written.commit), &table)
        .await?;
    rec.status = NodeStatus::Done;
    rec.rows = Some(written.rows);
    // An instance that wrote no rows added no files of its own: nothing to reuse later.
    if node.partition.is_none() || written.rows > 0 {
        svc.store
            .memo_put(&fingerprint, &table, &p, &shared.id, &parts_json)
            .await?;
        rec.output = Some(p);
    }
    Ok(())
}
