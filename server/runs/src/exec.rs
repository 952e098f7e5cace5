//! Executing a planned run on its temporary branch, then publishing it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use lh_api::{ImportMode, NodeStatus, RunInfo, RunStatus, TablePointer};
use lh_catalog::{Commit, CommitMeta, MergeOptions, TableOp};
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
use crate::error::{Code, Error, Result, pointer};
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
}

impl Shared {
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
    info: RunInfo,
    strict: bool,
    publish: bool,
    /// Each node's state when execution starts (all waiting, unless resumed).
    initial: Vec<NodeStatus>,
}

impl Run {
    pub fn new(
        svc: Arc<RunService>,
        info: RunInfo,
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
        recovered: Vec<(usize, lh_catalog::TablePointer)>,
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
            rec.output = Some(pointer(&p));
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
            for (i, s) in status.iter_mut().enumerate() {
                if matches!(s, NodeStatus::Waiting | NodeStatus::Running) {
                    *s = NodeStatus::Skipped;
                    let mut rec = self.record(i);
                    rec.status = NodeStatus::Skipped;
                    rec.error = Some("the run was cancelled".into());
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
                resolutions: Vec::new(),
            };
            let merged = svc
                .merger
                .merge(
                    &self.shared.by,
                    &self.shared.run_branch,
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
        rec.output = Some(pointer(p));
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
        let p = catalog_pointer(&p);
        if current.as_ref() != Some(&p) {
            let op = TableOp::Put {
                table: table.clone(),
                expected: current.clone(),
                pointer: p.clone(),
            };
            shared.by.require_table(
                Action::Write,
                &shared.target,
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
        rec.output = Some(pointer(&p));
        rec.rows = snapshot_count(svc, &p, "total-records").await;
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
                .map(|inp| match inp.table.rsplit_once('.') {
                    Some((ns, t)) => vec![ns.to_string(), t.to_string()],
                    None => vec![inp.table.clone()],
                })
                .collect();
            let missing = |_: &str| Error::internal("input vanished");
            let pruned: BTreeMap<Vec<String>, Vec<crate::query::prune::Bound>> = names
                .iter()
                .zip(&inputs)
                .filter_map(|(n, i)| Some((n.clone(), i.part.as_ref()?.bound.clone())))
                .collect();
            let (views, pins) = svc
                .queries
                .views_of(&head, &names, &missing, &pruned)
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
            .memo_put(&fingerprint, &table, &pointer(&p), &shared.id, &parts_json)
            .await?;
        rec.output = Some(pointer(&p));
    }
    Ok(())
}

/// An input as a node reads it.
struct Input {
    pointer: lh_catalog::TablePointer,
    /// For an instance of a partitioned model: the input filtered to its partition.
    part: Option<PartInput>,
}

struct PartInput {
    /// The filter, SQL on the input's columns.
    sql: String,
    /// The same, bound to the input's schema for pruning.
    bound: Vec<crate::query::prune::Bound>,
    /// The key of what it reads: the data files that may hold the partition's rows,
    /// and the table's delete files.
    files: String,
}

/// How an instance of a partitioned model reads the input `t`: filtered to partition
/// `p` where they share its key, else whole (`None`).
async fn partition_input(
    svc: &RunService,
    t: &crate::tables::LoadedTable,
    p: &super::partitions::Partition,
) -> Result<Option<PartInput>> {
    use crate::query::prune;
    let Some((column, ty)) = super::partitions::shared_key(t, p) else {
        return Ok(None);
    };
    let (sql, filters) = super::partitions::input_filter(&column, &ty, p);
    let bound = prune::bind(t, &filters);
    let live = svc.tables.live_files(t).await?;
    let mut data: Vec<&str> = live
        .data
        .iter()
        .filter(|f| prune::may_match(t, &bound, f))
        .map(|f| f.url.as_str())
        .collect();
    data.sort_unstable();
    let mut deletes: Vec<&str> = live
        .position_deletes
        .iter()
        .map(|(u, _)| u.as_str())
        .chain(live.equality_deletes.iter().map(|d| d.url.as_str()))
        .collect();
    deletes.sort_unstable();
    let doc = serde_json::json!({
        "schema": t.metadata.current_schema_id(), "data": data, "deletes": deletes,
    });
    Ok(Some(PartInput {
        sql,
        bound,
        files: blake3::hash(doc.to_string().as_bytes())
            .to_hex()
            .to_string(),
    }))
}

/// How an instance writes its model's table: the first to find it missing creates it
/// (holding the table's turn to create while it does), the others overwrite partitions
/// of it (as it is now).
async fn instance_mode(
    shared: &Shared,
    table: &str,
) -> Result<(
    Option<tokio::sync::OwnedMutexGuard<()>>,
    ImportMode,
    Option<crate::tables::LoadedTable>,
)> {
    let lock = shared
        .creating
        .lock()
        .map_err(|_| Error::internal("a run's table lock is poisoned"))?
        .entry(table.to_string())
        .or_default()
        .clone();
    let turn = lock.lock_owned().await;
    let head = shared.svc.catalog.resolve(&shared.run_branch).await?.commit;
    Ok(match shared.svc.tables.load(&head, table).await? {
        Some(t) => (None, ImportMode::OverwritePartitions, Some(t)),
        None => (Some(turn), ImportMode::Create, None),
    })
}

/// What an instance of a partitioned model writes within: rows of its partition only,
/// replacing every partition of the table (`now`) inside it, rows or none.
async fn instance_within(
    svc: &RunService,
    node: &PlanNode,
    now: Option<&crate::tables::LoadedTable>,
) -> Result<Option<crate::tables::write::Within>> {
    use crate::query::prune;
    let (Some(p), Some(spec)) = (&node.partition, &node.partitioned_by) else {
        return Ok(None);
    };
    let Some(column) = super::partitions::key_column(p, spec) else {
        return Err(Error::internal(format!(
            "{} has no partition field for partition {}",
            node.name, p.label
        )));
    };
    let mut inside = Vec::new();
    if let Some(t) = now {
        let field = t
            .metadata
            .current_schema()
            .as_struct()
            .field_by_name(&column)
            .cloned();
        if let Some(iceberg::spec::Type::Primitive(ty)) =
            field.as_ref().map(|f| f.field_type.as_ref())
        {
            let (_, filters) = super::partitions::input_filter(&column, ty, p);
            let bound = prune::bind(t, &filters);
            if bound.len() == filters.len() {
                let spec_id = t.metadata.default_partition_spec_id();
                for f in &svc.tables.live_files(t).await?.data {
                    if f.spec_id == spec_id
                        && prune::may_match(t, &bound, f)
                        && !inside.contains(f.file.partition())
                    {
                        inside.push(f.file.partition().clone());
                    }
                }
            }
        }
    }
    Ok(Some(crate::tables::write::Within {
        label: p.label.clone(),
        predicate: super::partitions::output_predicate(&column, p),
        partitions: inside,
    }))
}

/// Puts an instance's earlier output (the files its snapshot at `p` added) back into
/// its table on the run's branch: nothing to do when the table's partitions hold
/// exactly those files; otherwise one commit that replaces those partitions by them
/// (or creates the table with them). Returns the table's pointer and the rows.
async fn put_back(
    shared: &Shared,
    node: &PlanNode,
    p: &TablePointer,
) -> Result<(TablePointer, u64)> {
    let svc = &shared.svc;
    let table = &node.name;
    let name = node.display_name();
    let from = crate::tables::LoadedTable {
        name: table.clone(),
        pointer: catalog_pointer(p),
        metadata: svc.tables.metadata(&p.metadata_location).await?,
    };
    // The snapshot this instance made (its node in its summary), and no other.
    let made_here = from.metadata.current_snapshot().is_some_and(|s| {
        Some(s.snapshot_id()) == p.snapshot_id
            && s.summary().additional_properties.get("lh.node") == Some(&name)
    });
    if !made_here {
        return Err(Error::new(
            crate::error::Kind::Conflict,
            Code::Conflict,
            format!("the snapshot to reuse is not one {name} made"),
        ));
    }
    let added = svc.tables.added_files(&from).await?;
    let spec_id = added
        .first()
        .map_or(from.metadata.default_partition_spec_id(), |a| a.1);
    if added.iter().any(|a| a.1 != spec_id) {
        return Err(Error::new(
            crate::error::Kind::Conflict,
            Code::Conflict,
            "its files were written with several partition specs",
        ));
    }
    let files: Vec<iceberg::spec::DataFile> = added.into_iter().map(|a| a.0).collect();
    let rows = files.iter().map(|f| f.record_count()).sum();
    if !shared.may_act().await {
        return Err(Error::internal(
            "the run is no longer this server's (its lease was not renewed in time); nothing was written",
        ));
    }
    let (creating, mode, now) = instance_mode(shared, table).await?;
    let within = instance_within(svc, node, now.as_ref()).await?;
    if let Some(now) = &now {
        let live = svc.tables.live_files(now).await?;
        // Its partitions, and every partition of the table inside its run partition.
        let keys: std::collections::BTreeSet<String> = files
            .iter()
            .map(|f| f.partition())
            .chain(within.iter().flat_map(|w| w.partitions.iter()))
            .map(|part| crate::tables::partition::partition_key(spec_id, part))
            .collect();
        let there: std::collections::BTreeSet<&str> = live
            .data
            .iter()
            .filter(|f| keys.contains(&f.partition))
            .map(|f| f.url.as_str())
            .collect();
        let ours: std::collections::BTreeSet<&str> = files.iter().map(|f| f.file_path()).collect();
        if there == ours && live.position_deletes.is_empty() && live.equality_deletes.is_empty() {
            return Ok((p.clone(), rows));
        }
    }
    shared.by.require_table(
        Action::Write,
        &shared.target,
        table,
        "reusing a memoized output",
    )?;
    let job = WriteJob {
        branch: shared.run_branch.clone(),
        table: table.clone(),
        mode,
        source: Source::DataFiles {
            files,
            spec_id,
            from: from.metadata.clone(),
            label: format!("the earlier output of {name}"),
        },
        by: shared.by.clone(),
        grants_on: Some(shared.target.clone()),
        message: Some(format!("reuse {name} (run {})", &shared.id[..12])),
        properties: BTreeMap::from([
            ("lh.run".to_string(), shared.id.clone()),
            ("lh.node".to_string(), name.clone()),
            ("lh.cached".to_string(), "true".to_string()),
        ]),
        timeout: None,
        partition_by: node.partitioned_by.clone(),
        replaces: None,
        within,
    };
    let written = write_table(&svc.tables, &svc.import, job).await;
    drop(creating);
    let written = written?;
    let p = svc
        .catalog
        .get_table(&format!("@{}", written.commit), table)
        .await?;
    Ok((pointer(&p), rows))
}

/// One call of a node's Python function: on its inputs at `head`, with `params`.
struct Call<'a> {
    node: &'a PlanNode,
    head: &'a Commit,
    kind: InvocationKind,
    params: &'a BTreeMap<String, serde_json::Value>,
    inputs: &'a [Input],
}

async fn invoke(shared: &Shared, call: Call<'_>, rec: &mut NodeRecord) -> Result<Outcome> {
    let work = shared.svc.config.work_root.join(format!(
        "{}-{}",
        shared.id,
        uuid::Uuid::new_v4().simple()
    ));
    let out = invoke_in(shared, call, rec, &work, None).await;
    let _ = std::fs::remove_dir_all(&work);
    out
}

/// Builds (or finds) the node's environment, unless the caller has it already (`env`),
/// writes its inputs, and calls the function in the runtime. The invocation's folder is
/// `work`.
async fn invoke_in(
    shared: &Shared,
    call: Call<'_>,
    rec: &mut NodeRecord,
    work: &std::path::Path,
    env: Option<lh_runner::Env>,
) -> Result<Outcome> {
    let Call {
        node,
        head,
        kind,
        params,
        inputs,
    } = call;
    let svc = &shared.svc;
    let Lang::Python {
        function,
        env: spec,
        secrets,
        ..
    } = &node.lang
    else {
        return Err(Error::internal("not a Python node"));
    };
    // Its declared secrets, and only those, for this call alone.
    let secrets = if secrets.is_empty() {
        Vec::new()
    } else {
        svc.secrets.values(secrets, &shared.target).await?
    };
    let env = match env {
        Some(env) => env,
        None => built_env(shared, spec, rec).await?.0,
    };
    if let Ok(mut e) = shared.envs.lock() {
        e.insert(env.key.clone(), env.lock.clone());
    }
    std::fs::create_dir_all(work)?;
    let mut files = BTreeMap::new();
    for (inp, read) in node.inputs.iter().zip(inputs) {
        let Some(arg) = &inp.arg else { continue };
        let path = work.join(format!("in-{arg}.arrow"));
        let filter = match (inp.filter.as_deref(), &read.part) {
            (Some(f), Some(p)) => Some(format!("({f}) AND {}", p.sql)),
            (None, Some(p)) => Some(p.sql.clone()),
            (f, None) => f.map(String::from),
        };
        svc.queries
            .export_arrow(
                head,
                &inp.table,
                inp.columns.as_deref(),
                filter.as_deref(),
                &path,
                node.lang.limits().timeout,
            )
            .await?;
        files.insert(arg.clone(), path);
    }
    // The function's own limits, and the server's bound on what it may write.
    let mut limits = node.lang.limits();
    limits.disk_bytes = Some(svc.config.ceilings.disk_bytes);
    let inv = Invocation {
        id: uuid::Uuid::new_v4().simple().to_string(),
        kind,
        file: shared.code_root.join(&node.file),
        function: function.clone(),
        root: shared.code_root.clone(),
        inputs: files,
        params: params.clone(),
        output: work.join("out.parquet"),
        env: lh_runner::SecretEnv(
            secrets
                .iter()
                .map(|v| (v.name.clone(), v.value.clone()))
                .collect(),
        ),
    };
    let result = svc
        .runtime
        .invoke(&env, &limits, work, inv)
        .await
        .map_err(|e| {
            Error::bad_request(Code::RuntimeFailed, format!("cannot run the function: {e}"))
        })?;
    // No secret value leaves in the run's record.
    rec.log.push_str(&redact(&result.log, &secrets));
    Ok(match result.outcome {
        Outcome::Failed { error, traceback } => Outcome::Failed {
            error: redact(&error, &secrets),
            traceback: redact(&traceback, &secrets),
        },
        Outcome::Expectation { passed, detail } => Outcome::Expectation {
            passed,
            detail: redact(&detail, &secrets),
        },
        o => o,
    })
}

/// The environment of `spec`, built if needed (said in the node's log).
async fn built_env(
    shared: &Shared,
    spec: &lh_runner::EnvSpec,
    rec: &mut NodeRecord,
) -> Result<(lh_runner::Env, bool)> {
    let started = std::time::Instant::now();
    let (env, built) = shared.svc.envs.get(spec).await.map_err(|e| {
        Error::bad_request(
            Code::EnvironmentFailed,
            format!("cannot build the Python environment: {e}"),
        )
    })?;
    if built {
        rec.log.push_str(&format!(
            "[lh] built Python environment {} in {:.1} s\n",
            env.key,
            started.elapsed().as_secs_f64()
        ));
    }
    Ok((env, built))
}

pub(super) fn catalog_pointer(p: &TablePointer) -> lh_catalog::TablePointer {
    lh_catalog::TablePointer {
        metadata_location: p.metadata_location.clone(),
        table_uuid: p.table_uuid.clone(),
        snapshot_id: p.snapshot_id,
    }
}

/// A node's fingerprint, the key of its memoized output: everything the node can read.
/// A Python function can import or open any file of its project, so its code is the
/// content hash of the whole code snapshot (every file shipped), not the files it seems
/// to import; a SQL model reads nothing but its text and its tables (DuckDB's sandbox
/// has no file access), so its text is its code. Then lh's own version (the harness that
/// calls functions and the writer of outputs), the environment's lock, the parameters,
/// and the snapshots of its inputs with their columns and filter; for an appending
/// model, also the snapshot it appends to.
///
/// Also returns the key's parts by name (a short hash each), which the memo table keeps
/// so that a later miss can say what changed.
fn fingerprint(
    shared: &Shared,
    node: &PlanNode,
    inputs: &[Input],
    params: &BTreeMap<String, serde_json::Value>,
    env_key: Option<&str>,
    current: Option<&lh_catalog::TablePointer>,
    secrets: &BTreeMap<String, i64>,
) -> Result<(String, BTreeMap<String, String>)> {
    let inputs: Vec<serde_json::Value> = node
        .inputs
        .iter()
        .zip(inputs)
        .map(|(i, read)| match &read.part {
            // Read filtered to a partition: the files that may hold its rows.
            Some(part) => serde_json::json!({
                "table": i.table, "files": part.files, "partition": part.sql,
                "columns": i.columns, "filter": i.filter, "arg": i.arg,
            }),
            None => whole_input(i, &read.pointer),
        })
        .collect();
    let (lang, code, detail) = code_of_node(node, &shared.code_hash);
    let materialize = materialization(node);
    let previous = appended_to(node, current);
    let parts = key_parts(
        node,
        &shared.code_hash,
        &inputs,
        params,
        env_key,
        previous.as_deref(),
        secrets,
    );
    let mut doc = serde_json::json!({
        "v": 2, "lh": env!("CARGO_PKG_VERSION"), "node": node.display_name(), "lang": lang, "detail": detail, "code": code, "env": env_key,
        "params": params, "inputs": inputs, "materialize": materialize, "previous": previous,
    });
    if !secrets.is_empty() {
        doc["secrets"] = serde_json::json!(secrets);
    }
    if let Some(spec) = &node.partitioned_by {
        doc["partitioned_by"] = serde_json::json!(spec);
    }
    Ok((
        blake3::hash(doc.to_string().as_bytes())
            .to_hex()
            .to_string(),
        parts,
    ))
}

/// A node's language, code (a Python function's code snapshot) and what names its code
/// in the snapshot (a SQL model: its text).
pub(super) fn code_of_node<'a>(
    node: &PlanNode,
    code_hash: &'a str,
) -> (&'static str, Option<&'a str>, serde_json::Value) {
    match &node.lang {
        Lang::Python {
            function,
            memory_bytes,
            ..
        } => (
            "python",
            Some(code_hash),
            serde_json::json!({"file": node.file, "function": function, "memory": memory_bytes}),
        ),
        Lang::Sql { sql, .. } => ("sql", None, serde_json::json!({"sql": sql})),
    }
}

fn materialization(node: &PlanNode) -> String {
    match node.kind {
        NodeKind::Model { materialize } => format!("{materialize:?}"),
        NodeKind::Expectation { .. } => String::new(),
    }
}

/// What a model adds to (an append, a partition overwrite) is part of its output; not
/// for an instance of a partitioned model, whose output is its partition alone.
fn appended_to(node: &PlanNode, current: Option<&lh_catalog::TablePointer>) -> Option<String> {
    match node.kind {
        _ if node.partition.is_some() => None,
        NodeKind::Model {
            materialize: Materialize::Append | Materialize::OverwritePartitions,
        } => current.map(|p| p.metadata_location.clone()),
        _ => None,
    }
}

/// An input as a node's key has it, read whole at `pointer`.
pub(super) fn whole_input(
    i: &super::project::PlanInput,
    pointer: &lh_catalog::TablePointer,
) -> serde_json::Value {
    serde_json::json!({
        "table": i.table, "metadata": pointer.metadata_location,
        "snapshot": pointer.snapshot_id,
        "columns": i.columns, "filter": i.filter, "arg": i.arg,
    })
}

/// The parts of a node's key by name, a short hash each (see [`fingerprint`]): what a
/// miss reports as changed, and what `lh run --plan` compares before running.
pub(super) fn key_parts(
    node: &PlanNode,
    code_hash: &str,
    inputs: &[serde_json::Value],
    params: &BTreeMap<String, serde_json::Value>,
    env_key: Option<&str>,
    previous: Option<&str>,
    secrets: &BTreeMap<String, i64>,
) -> BTreeMap<String, String> {
    let (_, code, detail) = code_of_node(node, code_hash);
    let short =
        |v: &serde_json::Value| blake3::hash(v.to_string().as_bytes()).to_hex()[..12].to_string();
    let mut parts = BTreeMap::from([
        (
            "lh version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        (
            "code".to_string(),
            match code {
                Some(snapshot) => format!("snapshot {}", &snapshot[..snapshot.len().min(12)]),
                None => short(&detail),
            },
        ),
        ("function".to_string(), short(&detail)),
        (
            "environment".to_string(),
            env_key.unwrap_or("-").to_string(),
        ),
        ("parameters".to_string(), short(&serde_json::json!(params))),
        ("materialization".to_string(), materialization(node)),
        (
            "partitioned_by".to_string(),
            node.partitioned_by.clone().unwrap_or_default(),
        ),
        (
            "the table appended to".to_string(),
            short(&serde_json::json!(previous)),
        ),
    ]);
    for (i, v) in node.inputs.iter().zip(inputs) {
        parts.insert(format!("input {}", i.table), short(v));
    }
    for (name, version) in secrets {
        parts.insert(format!("secret {name}"), format!("version {version}"));
    }
    parts
}

/// Why a model ran instead of reusing an output: the parts of its key that differ from
/// those of the newest memoized output of its table (`before`, JSON), or that there is
/// none.
fn why_not_reused(before: Option<&str>, now: &BTreeMap<String, String>) -> String {
    let Some(before) =
        before.and_then(|b| serde_json::from_str::<BTreeMap<String, String>>(b).ok())
    else {
        return "ran: no earlier output of this model".into();
    };
    let mut changed: Vec<String> = Vec::new();
    for (k, v) in now {
        match before.get(k) {
            Some(old) if old == v => {}
            Some(old) if k == "code" => changed.push(format!("code changed ({old} -> {v})")),
            Some(_) => changed.push(format!("{k} changed")),
            None => changed.push(format!("{k} is new")),
        }
    }
    for k in before.keys().filter(|k| !now.contains_key(*k)) {
        changed.push(format!("{k} is gone"));
    }
    if changed.is_empty() {
        // The same parts under another key: an output of an older lh or another project.
        return "ran: no earlier output with the same key".into();
    }
    format!("ran: {}", changed.join(", "))
}
