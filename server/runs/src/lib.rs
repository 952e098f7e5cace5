//! Pipeline runs: `lh run`, write-audit-publish.
//!
//! A run plans the project (without running user code), makes a temporary branch from
//! the target's head, runs every node on it (independent nodes in parallel, Python
//! functions in the runner's runtime, SQL models in DuckDB), runs each expectation as
//! soon as its inputs exist, and merges the temporary branch into the target only when
//! every node and every blocking expectation passed. Otherwise the target is untouched
//! and the temporary branch stays, for `lh query --ref`, until its TTL. Every run is
//! recorded (code snapshot, input commit, environment locks, parameters, per-node
//! status, timings, rows and logs) and can be replayed exactly.

use lh_auth as auth;
use lh_core::{db, duck, error};
use lh_query::{self as query, maintenance};
use lh_tables as tables;
use lh_warehouse as warehouse;

pub mod asked;
pub mod breaking;
mod changes;
pub mod code;
mod exec;
mod instances;
pub mod limits;
pub mod lineage;
pub mod merges;
mod partitions;
pub mod project;
pub mod refs;
pub mod store;
mod takeover;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use lh_api::{NodeStatus, RunStatus};
use lh_catalog::{Catalog, RefExpr, TablePointer};
use lh_runner::{EnvCache, Runtime};

use crate::auth::Identity;
use crate::error::{Code, Error, Kind, Result};
use crate::query::QueryEngine;
use crate::tables::Tables;
use crate::tables::write::ImportContext;
use code::CodeStore;
use project::{Lang, NodeKind, Plan, Planner};
use serde::{Deserialize, Serialize};
use store::{Claim, Lease, RunStore};

/// A run as the run service keeps it: who started it, on what, its state and its nodes.
/// (Its states are the vocabulary every client shares, `lh_api`'s.)
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub id: String,
    pub project: String,
    pub author: String,
    /// The branch it publishes to.
    pub target: String,
    /// The temporary branch it writes on (kept after a failure).
    pub run_branch: String,
    /// The content hash of the code snapshot.
    pub code_hash: String,
    /// The commit of the target the run read.
    pub input_commit: String,
    /// A check's run: only expectations, publishing nothing.
    pub check: bool,
    pub params: BTreeMap<String, serde_json::Value>,
    pub status: RunStatus,
    pub error: Option<String>,
    /// The merge commit that published it.
    pub merge_commit: Option<String>,
    pub no_cache: bool,
    pub strict: bool,
    pub rerun_of: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Python environment key to its lock (`uv pip freeze`).
    pub environments: BTreeMap<String, String>,
    pub nodes: Vec<RunNode>,
    /// Whether nodes are left out of `nodes` because they touch tables the caller may
    /// not read.
    pub nodes_hidden: bool,
}

/// One node of a run, as recorded: its state, timings, result and place in the DAG.
#[derive(Debug, Clone)]
pub struct RunNode {
    pub name: String,
    /// `model` or `expectation`.
    pub kind: String,
    /// `python` or `sql`.
    pub language: String,
    pub status: NodeStatus,
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    pub rows: Option<u64>,
    /// Its output came from an earlier run (memoization or `--from-failed`).
    pub cached: bool,
    /// Why a model's output was or was not reused.
    pub reason: Option<String>,
    pub error: Option<String>,
    pub traceback: Option<String>,
    /// What a failed expectation said.
    pub detail: Option<String>,
    /// The tables it reads.
    pub inputs: Vec<String>,
    /// The nodes it runs after: the edges of the run's DAG.
    pub depends_on: Vec<String>,
    /// For a model: the snapshot it made (or reused).
    pub output: Option<TablePointer>,
    /// The node's file and line.
    pub location: String,
}

/// How runs run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Nodes running at once.
    pub parallelism: usize,
    /// How long a failed run's branch is kept.
    pub branch_ttl: Duration,
    /// The Python that runs the planner (parsing only).
    pub planner_python: PathBuf,
    /// Where invocation folders are made.
    pub work_root: PathBuf,
    /// What no function may exceed.
    pub ceilings: limits::Ceilings,
    /// The most the environment cache keeps (least recently used go first).
    pub env_cache_bytes: u64,
    /// Environments used this recently are never evicted (warm workers may use them).
    pub env_keep_recent: Duration,
    /// How long a run stays this server's without a heartbeat: once it runs out, another
    /// server sharing the catalog takes the run over.
    pub lease: Duration,
}

/// How many times a run is taken over before it is failed: a run whose nodes bring
/// down every server driving it must not go round the servers for ever.
const MAX_CLAIMS: i64 = 4;

/// A run this server drives (from its claim on, while it is being resumed too, so
/// that its lease is renewed meanwhile).
struct Driving {
    claim: Claim,
    control: exec::Control,
    /// The task driving it, once started.
    task: Option<tokio::task::JoinHandle<()>>,
}

/// What a server taking a run over needs to go on as its first server would have: who
/// started it and how (stored with the run as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Resumable {
    user: String,
    roles: Vec<String>,
    token_id: Option<String>,
    publish: bool,
    reuse: BTreeMap<String, store::StoredPointer>,
}

pub struct RunService {
    pub(crate) catalog: Catalog,
    pub(crate) tables: Arc<Tables>,
    pub(crate) queries: Arc<QueryEngine>,
    pub(crate) import: ImportContext,
    pub store: RunStore,
    pub(crate) code: CodeStore,
    pub(crate) envs: EnvCache,
    pub(crate) runtime: Arc<dyn Runtime>,
    pub(crate) config: RunConfig,
    /// The folder holding the `lh` Python package, for the planner.
    pub(crate) harness: PathBuf,
    running: Mutex<HashMap<String, Driving>>,
    /// This server process, as run leases name it (`host-pid-random`).
    pub instance: String,
    /// Set while the server stops: no run is taken over any more.
    stopping: AtomicBool,
    /// How a finished run publishes (its checks run runs: see [`RunService::new`]).
    pub merger: Arc<crate::merges::Merger>,
    /// Where functions' secrets come from.
    pub secrets: Arc<crate::auth::secrets::Secrets>,
}

/// What a run service is made of.
pub struct RunParts {
    pub catalog: Catalog,
    pub tables: Arc<Tables>,
    pub queries: Arc<QueryEngine>,
    pub import: ImportContext,
    pub store: RunStore,
    pub code: CodeStore,
    pub envs: EnvCache,
    pub runtime: Arc<dyn Runtime>,
    pub config: RunConfig,
    /// The folder holding the `lh` Python package, for the planner.
    pub harness: PathBuf,
    pub secrets: Arc<crate::auth::secrets::Secrets>,
}

/// The run service as merge checks see it: they run a project's expectations as a run,
/// and the run service publishes through the merger that holds the checks, so the
/// checks hold it weakly (it is gone only while the server stops).
struct Expectations(std::sync::Weak<RunService>);

/// What starts a run.
#[derive(Debug, Clone)]
pub struct RunStart {
    pub code_hash: String,
    pub target: String,
    pub params: BTreeMap<String, String>,
    /// Who starts it: the author of its commits, whose grants its writes and its
    /// publish are checked against (its roles read again when it publishes).
    pub by: Identity,
    /// Whether its outputs are merged into the target when it succeeds (a check's run
    /// only reports).
    pub publish: bool,
    /// Only the project's expectations run, on the tables as they are (a check's run).
    pub expectations_only: bool,
    /// With `expectations_only`: only these (`function` or `file:function`); empty: all.
    pub only: Vec<String>,
    /// Whether its functions may be given secrets. A secret set on a branch reaches
    /// only runs that may publish there; a check publishes nothing, so one started by
    /// someone who may not publish to its (protected) branch may not read them.
    pub secrets: bool,
    pub no_cache: bool,
    pub strict: bool,
    /// For a replay: the run replayed, the commit to read, the outputs to reuse.
    pub rerun_of: Option<String>,
    pub input_commit: Option<String>,
    pub reuse: BTreeMap<String, TablePointer>,
    /// For a replay: the parameter values, as they were.
    pub param_values: Option<BTreeMap<String, serde_json::Value>>,
    /// The partitions it runs (`2026-11-03`, `2026-11-01..2026-11-30`, `eu,us`), for a
    /// project whose models run per partition.
    pub partitions: Option<String>,
    /// The nodes to run (`lh run --select`); empty: all.
    pub select: Vec<String>,
}

impl RunStart {
    /// A run of a check: the project's expectations on `commit`, recorded against
    /// `target`, publishing nothing.
    pub fn check(code_hash: &str, target: &str, commit: &str, by: Identity) -> RunStart {
        RunStart {
            code_hash: code_hash.to_string(),
            target: target.to_string(),
            params: BTreeMap::new(),
            by,
            publish: false,
            expectations_only: true,
            only: Vec::new(),
            secrets: true,
            no_cache: true,
            strict: false,
            select: Vec::new(),
            rerun_of: None,
            input_commit: Some(commit.to_string()),
            reuse: BTreeMap::new(),
            param_values: None,
            partitions: None,
        }
    }
}

#[async_trait::async_trait]
impl crate::merges::checks::ExpectationRunner for Expectations {
    async fn run_expectations(
        &self,
        code: &str,
        target: &str,
        commit: &str,
        by: Identity,
        timeout: Duration,
    ) -> std::result::Result<String, String> {
        let Some(svc) = self.0.upgrade() else {
            return Err("the server is stopping".into());
        };
        let run = svc
            .start(RunStart::check(code, target, commit, by))
            .await
            .map_err(|e| e.message)?;
        let short = &run.id[..12.min(run.id.len())];
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let now = svc.get(&run.id).await.map_err(|e| e.message)?;
            if now.status.is_final() {
                let n = now.nodes.len();
                return match now.status {
                    RunStatus::Succeeded => Ok(format!(
                        "{n} expectation{} passed (run {short})",
                        if n == 1 { "" } else { "s" }
                    )),
                    _ => Err(format!(
                        "{} (run {short})",
                        now.error.unwrap_or_else(|| now.status.as_str().to_string())
                    )),
                };
            }
            if std::time::Instant::now() > deadline {
                let _ = svc.cancel(&run.id).await;
                return Err(format!(
                    "the expectations did not finish within {} s (run {short} cancelled)",
                    timeout.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

pub use changes::NodeChange;

/// A run planned without running it (`lh run --dry-run`): the plan, the ref expression
/// it was made on, and (asked for) what a run would do with each node, by its index in
/// `plan.nodes`.
#[derive(Debug)]
pub struct Planned {
    pub plan: Plan,
    pub at: String,
    pub changes: BTreeMap<usize, NodeChange>,
}

impl RunService {
    /// The run service of `parts`, publishing through the merger `merger` makes of the
    /// run service's expectations (its merge checks run them).
    pub async fn new(
        parts: RunParts,
        merger: impl FnOnce(
            Arc<dyn crate::merges::checks::ExpectationRunner>,
        ) -> Arc<crate::merges::Merger>,
    ) -> Result<Arc<RunService>> {
        let host = hostname();
        let instance = format!(
            "{host}-{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let RunParts {
            catalog,
            tables,
            queries,
            import,
            store,
            code,
            envs,
            runtime,
            config,
            harness,
            secrets,
        } = parts;
        let svc = Arc::new_cyclic(|weak| RunService {
            instance,
            stopping: AtomicBool::new(false),
            merger: merger(Arc::new(Expectations(weak.clone()))),
            secrets,
            catalog,
            tables,
            queries,
            import,
            store,
            code,
            envs,
            runtime,
            config,
            harness,
            running: Mutex::new(HashMap::new()),
        });
        // Expire the branches of old failed runs, now and then.
        let every =
            (svc.config.branch_ttl / 2).clamp(Duration::from_millis(500), Duration::from_secs(600));
        let weak = Arc::downgrade(&svc);
        tokio::spawn(async move {
            loop {
                {
                    let Some(svc) = weak.upgrade() else { return };
                    if let Err(e) = svc.expire_branches().await {
                        tracing::warn!("cannot expire run branches: {e}");
                    }
                    if let Err(e) = svc.sweep_code_and_environments().await {
                        tracing::warn!("cannot sweep code snapshots and environments: {e}");
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
        Ok(svc)
    }

    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    /// Stores an uploaded project archive as a code snapshot, here and in the warehouse
    /// (for the other servers: a run may be taken over, replayed or checked on any).
    pub async fn store_code(&self, tar: PathBuf) -> Result<String> {
        let code = self.code.clone();
        let archive = tar.clone();
        let hash = tokio::task::spawn_blocking(move || code.store_tar(&archive))
            .await
            .map_err(|e| Error::internal(format!("code task failed: {e}")))??;
        self.tables
            .warehouse
            .share_own(&format!("code/{hash}.tar"), &tar)
            .await?;
        Ok(hash)
    }

    /// The folder of code snapshot `hash`: on this server's disk, or unpacked from the
    /// warehouse's copy (stored by another server), checked against its hash.
    pub(crate) async fn code_path(&self, hash: &str) -> Result<PathBuf> {
        let missing = match self.code.path(hash) {
            Ok(p) => return Ok(p),
            Err(e) => e,
        };
        if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(missing);
        }
        let tmp = self
            .code
            .root()
            .join(format!(".fetch-{}.tar", uuid::Uuid::new_v4().simple()));
        let found = self
            .tables
            .warehouse
            .fetch_own(&format!("code/{hash}.tar"), &tmp)
            .await;
        if !matches!(found, Ok(true)) {
            let _ = std::fs::remove_file(&tmp);
            return match found {
                Err(e) => Err(e),
                _ => Err(missing),
            };
        }
        let code = self.code.clone();
        let archive = tmp.clone();
        let stored = tokio::task::spawn_blocking(move || code.store_tar(&archive))
            .await
            .map_err(|e| Error::internal(format!("code task failed: {e}")));
        let _ = std::fs::remove_file(&tmp);
        let stored = stored??;
        if stored != hash {
            return Err(Error::internal(format!(
                "the warehouse's copy of code snapshot {hash} holds other files ({stored})"
            )));
        }
        self.code.path(hash)
    }

    async fn planner_plan(
        &self,
        code_hash: &str,
        commit: &lh_catalog::Commit,
        at: &str,
        params: &BTreeMap<String, String>,
        selection: project::Selection<'_>,
        readable: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Plan> {
        let root = self.code_path(code_hash).await?;
        let planner = Planner {
            tables: &self.tables,
            queries: &self.queries,
            python: &self.config.planner_python,
            harness: &self.harness,
            ceilings: &self.config.ceilings,
            expectations: selection.expectations,
            select: selection.nodes,
            readable,
        };
        planner.plan(&root, commit, at, params).await
    }

    /// Plans a project against a ref without running anything (`lh run --dry-run`),
    /// for `by`: an input it may not read (at that commit, through its history) is
    /// planned as a table that is not there.
    pub async fn plan(
        &self,
        code_hash: &str,
        at: &RefExpr,
        ask: &asked::RunAsk,
        by: &Identity,
        changes: Option<bool>,
    ) -> Result<Planned> {
        let (params, partitions) = (&ask.params, ask.partitions.as_deref());
        let reader = crate::auth::history::scoped(&self.catalog, by, at).await?;
        let resolved = self.catalog.resolve(&reader.reads(at)).await?;
        let readable = |t: &str| reader.can_table(crate::auth::Action::Read, at, t);
        let at = at.to_string();
        let plan = self
            .planner_plan(
                code_hash,
                &resolved.commit,
                &at,
                params,
                project::Selection {
                    expectations: None,
                    nodes: &ask.select,
                },
                &readable,
            )
            .await?;
        let changes = changes.map(|no_cache| (no_cache, by));
        let plan = instances::apply(plan, partitions)?;
        let changes = match changes {
            Some((no_cache, by)) => {
                let of = changes::ChangesOf {
                    code_hash,
                    head: &resolved.commit,
                    target: &at,
                    no_cache,
                    by,
                };
                self.changes(&plan, &of).await?
            }
            None => BTreeMap::new(),
        };
        Ok(Planned { plan, at, changes })
    }

    /// Starts a run; it goes on in the background.
    pub async fn start(self: &Arc<Self>, start: RunStart) -> Result<RunRecord> {
        let resolved = self.catalog.resolve(&start.target).await?;
        crate::tables::require_branch(&start.target, &resolved)?;
        // A replay reads the commit the replayed run read.
        let input = match &start.input_commit {
            Some(c) => self.catalog.resolve(&format!("@{c}")).await?.commit,
            None => resolved.commit.clone(),
        };
        // A check of some expectations (`lh bisect`) plans only them, so only their
        // inputs must be at the commit, which its errors name. A merge check plans the
        // whole project, as a run would, on the would-be result.
        let some = start.expectations_only && !start.only.is_empty();
        let at = match some {
            true => format!("{}@{}", start.target, &input.id.to_hex()[..12]),
            false => start.target.clone(),
        };
        // Every table it reads, the starter may read, at the commit it reads (a check
        // or a replay reads an older one, whose history may bound the starter more); a
        // table it may not read is planned as one that is not there.
        let target = RefExpr::named(&start.target);
        let reader = crate::auth::history::scoped(
            &self.catalog,
            &start.by,
            &RefExpr::NamedAtHash(start.target.clone(), input.id.to_hex()),
        )
        .await?;
        let readable = |t: &str| reader.can_table(crate::auth::Action::Read, &target, t);
        let mut plan = self
            .planner_plan(
                &start.code_hash,
                &input,
                &at,
                &start.params,
                project::Selection {
                    expectations: some.then_some(start.only.as_slice()),
                    nodes: &start.select,
                },
                &readable,
            )
            .await?;
        if let Some(values) = &start.param_values {
            plan.params = values.clone();
        }
        if start.expectations_only {
            plan = plan.expectations_only().select(&start.only)?;
        } else {
            plan = instances::apply(plan, start.partitions.as_deref())?;
        }
        if !start.secrets
            && let Some(n) = plan
                .nodes
                .iter()
                .find(|n| matches!(&n.lang, Lang::Python { secrets, .. } if !secrets.is_empty()))
        {
            return Err(Error::new(
                Kind::Forbidden,
                Code::PermissionDenied,
                format!(
                    "{} reads secrets, which reach only runs that may publish to '{}': a \
                     protected branch, where that needs 'merge'",
                    n.display_name(),
                    start.target
                ),
            )
            .with_hint("check with an expectation that reads no secret"));
        }
        for n in &plan.nodes {
            // What it writes, history hides nothing of at the commit it starts from.
            if let Some(out) = n.output() {
                crate::auth::history::require_unhidden(
                    &self.catalog,
                    &reader,
                    &target,
                    out,
                    &format!("a run writing '{out}'"),
                )
                .await?;
            }
            for i in n.inputs.iter().filter(|i| i.producer.is_none()) {
                reader.require_table(
                    crate::auth::Action::Read,
                    &target,
                    &i.table,
                    &format!("a run reading '{}'", i.table),
                )?;
            }
        }
        let id = uuid::Uuid::now_v7().simple().to_string();
        let run_branch = format!("{}{id}", crate::tables::RUN_BRANCHES);
        let nodes: Vec<RunNode> = plan
            .order
            .iter()
            .map(|&i| {
                let n = &plan.nodes[i];
                RunNode {
                    name: n.display_name(),
                    kind: kind_name(&n.kind).into(),
                    language: lang_name(&n.lang).into(),
                    status: NodeStatus::Waiting,
                    started_at: None,
                    finished_at: None,
                    rows: None,
                    cached: false,
                    reason: None,
                    error: None,
                    traceback: None,
                    detail: None,
                    inputs: n.inputs.iter().map(|i| i.table.clone()).collect(),
                    depends_on: plan.dependency_names(i),
                    output: None,
                    location: n.location(),
                }
            })
            .collect();
        let info = RunRecord {
            id: id.clone(),
            project: plan.project.name.clone(),
            author: start.by.user.clone(),
            target: start.target.clone(),
            run_branch: run_branch.clone(),
            code_hash: start.code_hash.clone(),
            input_commit: input.id.to_hex(),
            check: start.expectations_only,
            params: plan.params.clone(),
            status: RunStatus::Running,
            error: None,
            merge_commit: None,
            no_cache: start.no_cache,
            strict: start.strict,
            rerun_of: start.rerun_of.clone(),
            created_at: Utc::now(),
            finished_at: None,
            environments: BTreeMap::new(),
            nodes_hidden: false,
            nodes,
        };
        let plan_json = serde_json::to_string(&plan).map_err(|e| Error::internal(e.to_string()))?;
        let resumable = serde_json::to_string(&Resumable {
            user: start.by.user.clone(),
            roles: start.by.access.roles.clone(),
            token_id: start.by.token_id.clone(),
            publish: start.publish,
            reuse: start
                .reuse
                .iter()
                .map(|(k, p)| (k.clone(), p.into()))
                .collect(),
        })
        .map_err(|e| Error::internal(e.to_string()))?;
        let claim = Claim {
            owner: self.instance.clone(),
            attempt: 1,
        };
        // Held here before it is recorded: this server's scan for orphaned runs never
        // takes a run it is starting.
        let control = self.hold(&id, &claim);
        // Recorded first, then its branch: a server stopping in between leaves a run
        // that the server taking it over fails (its branch missing), never a branch
        // that no run record names.
        if let Err(e) = self
            .store
            .insert_run(&info, &plan_json, &resumable, &claim, self.lease_until())
            .await
        {
            self.forget(&id);
            return Err(e);
        }
        if let Err(e) = self
            .catalog
            .create_branch(&run_branch, &format!("@{}", input.id))
            .await
        {
            self.forget(&id);
            let why = format!("cannot create the run's branch: {e}; nothing ran");
            let _ = self
                .store
                .finish_run(
                    &id,
                    &claim,
                    RunStatus::Failed,
                    Some(&why),
                    None,
                    &BTreeMap::new(),
                )
                .await;
            return Err(e.into());
        }
        let run = exec::Run::new(self.clone(), info.clone(), plan, start, claim, control);
        self.drive(run);
        Ok(info)
    }

    pub async fn get(&self, id: &str) -> Result<RunRecord> {
        let id = self.store.resolve_id(id).await?;
        Ok(self.store.get(&id).await?.0)
    }

    pub async fn list(&self, limit: i64) -> Result<Vec<RunRecord>> {
        self.store.list(limit.clamp(1, 1000)).await
    }

    pub async fn logs(&self, id: &str, node: Option<&str>) -> Result<Vec<(String, String)>> {
        let id = self.store.resolve_id(id).await?;
        self.store.logs(&id, node).await
    }

    /// Stops a running run: no node starts, running ones are stopped, nothing publishes.
    pub async fn cancel(&self, id: &str) -> Result<RunRecord> {
        let id = self.store.resolve_id(id).await?;
        // Recorded first, so that whichever server drives the run (or takes it over)
        // sees it at its next heartbeat; driven here, it stops at once too.
        let asked = self.store.request_cancel(&id).await?;
        if asked
            && let Some(c) = self
                .running
                .lock()
                .ok()
                .and_then(|r| r.get(&id).map(|d| d.control.cancel.clone()))
        {
            c.cancel();
        }
        match asked {
            true => {}
            false => {
                let run = self.store.get(&id).await?.0;
                return Err(Error::new(
                    Kind::Conflict,
                    Code::NotRunning,
                    format!(
                        "run {} is not running (it {})",
                        short(&id),
                        run.status.as_str()
                    ),
                ));
            }
        }
        // Wait (briefly) for the run to record the end.
        let tries = 100 + 2 * self.config.lease.as_millis() as usize / 50;
        for _ in 0..tries {
            let run = self.store.get(&id).await?.0;
            if run.status.is_final() {
                return Ok(run);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(self.store.get(&id).await?.0)
    }

    /// Replays a run: the same code (or `code`), environments, parameters and input
    /// commit, onto a new temporary branch; `from_failed` reuses the outputs of the
    /// nodes that succeeded.
    pub async fn rerun(
        self: &Arc<Self>,
        id: &str,
        from_failed: bool,
        code: Option<String>,
        by: Identity,
    ) -> Result<RunRecord> {
        let id = self.store.resolve_id(id).await?;
        let (old, old_plan) = self.store.get(&id).await?;
        // The partitions it ran, and the nodes it selected, again.
        let mut labels: Vec<String> = Vec::new();
        let mut select = Vec::new();
        if let Ok(plan) = serde_json::from_str::<Plan>(&old_plan) {
            select = plan.select.clone();
            for n in &plan.nodes {
                if let Some(p) = &n.partition
                    && !labels.contains(&p.label)
                {
                    labels.push(p.label.clone());
                }
            }
        }
        if old.check {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!(
                    "run {} is a check (expectations at a commit, publishing nothing): it is not replayed",
                    short(&id)
                ),
            )
            .with_hint("run the check again (a bisect step, or the merge it guarded)"));
        }
        if old.status == RunStatus::Running {
            return Err(Error::new(
                Kind::Conflict,
                Code::StillRunning,
                format!("run {} is still running", short(&id)),
            ));
        }
        let mut reuse = BTreeMap::new();
        // Outputs of a run too old for garbage collection to keep are made again.
        let fresh = old.created_at
            >= store::reusable_since(Utc::now(), self.tables.retention().unreachable());
        if from_failed && fresh {
            for n in &old.nodes {
                if matches!(n.status, NodeStatus::Done | NodeStatus::Cached)
                    && let Some(p) = &n.output
                {
                    reuse.insert(n.name.clone(), p.clone());
                }
            }
        }
        let start = RunStart {
            code_hash: code.unwrap_or_else(|| old.code_hash.clone()),
            target: old.target.clone(),
            params: BTreeMap::new(),
            by,
            publish: true,
            expectations_only: false,
            only: Vec::new(),
            secrets: true,
            no_cache: old.no_cache,
            strict: old.strict,
            rerun_of: Some(old.id.clone()),
            input_commit: Some(old.input_commit.clone()),
            reuse,
            param_values: Some(old.params.clone()),
            partitions: (!labels.is_empty()).then(|| labels.join(",")),
            select,
        };
        self.start(start).await
    }

    /// Removes the code snapshots no run refers to, and the environments used least
    /// recently while the cache is above its size.
    async fn sweep_code_and_environments(&self) -> Result<()> {
        let keep = self.store.code_hashes().await?;
        let grace = Duration::from_secs(24 * 3600);
        // The warehouse's copies first (any server of the warehouse may do it).
        let shared: Vec<String> = self
            .tables
            .warehouse
            .list_own("code/")
            .await?
            .into_iter()
            .filter(|(key, at)| {
                let hash = key
                    .strip_prefix("code/")
                    .and_then(|k| k.strip_suffix(".tar"))
                    .unwrap_or("");
                hash.len() == 64 && !keep.contains(hash) && at.elapsed().is_ok_and(|a| a > grace)
            })
            .map(|(k, _)| k)
            .collect();
        if !shared.is_empty() {
            self.tables.warehouse.remove_own(&shared).await?;
        }
        let code = self.code.clone();
        let removed = tokio::task::spawn_blocking(move || code.sweep(&keep, grace))
            .await
            .map_err(|e| Error::internal(format!("sweep task failed: {e}")))?;
        if removed > 0 {
            tracing::info!(
                snapshots = removed,
                "removed code snapshots no run refers to"
            );
        }
        let (envs, bytes) = self
            .envs
            .evict(self.config.env_cache_bytes, self.config.env_keep_recent)
            .await;
        if envs > 0 {
            tracing::info!(
                environments = envs,
                bytes,
                "evicted environments used least recently"
            );
        }
        Ok(())
    }

    async fn expire_branches(&self) -> Result<()> {
        let before =
            Utc::now() - chrono::Duration::from_std(self.config.branch_ttl).unwrap_or_default();
        for (id, branch) in self.store.expired(before).await? {
            match self.catalog.delete_branch(&branch, None).await {
                Ok(()) => tracing::info!(run = %id, branch = %branch, "expired a run branch"),
                Err(e) if e.kind() == lh_catalog::ErrorKind::RefNotFound => {}
                Err(e) => tracing::warn!(run = %id, "cannot expire branch {branch}: {e}"),
            }
        }
        Ok(())
    }
}

/// This machine's name, for the instance id of run leases.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "lh".into())
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

pub fn kind_name(k: &NodeKind) -> &'static str {
    match k {
        NodeKind::Model { .. } => "model",
        NodeKind::Expectation { .. } => "expectation",
    }
}

pub fn lang_name(l: &Lang) -> &'static str {
    match l {
        Lang::Python { .. } => "python",
        Lang::Sql { .. } => "sql",
    }
}
