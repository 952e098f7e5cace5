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

pub mod code;
mod exec;
pub mod limits;
pub mod project;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use lh_api::{NodeStatus, PlanResponse, PlannedInput, PlannedNode, RunInfo, RunNode, RunStatus};
use lh_catalog::Catalog;
use lh_runner::{EnvCache, Runtime};
use tokio_util::sync::CancellationToken;

use crate::auth::Identity;
use crate::error::{Code, Error, Kind, Result};
use crate::query::QueryEngine;
use crate::tables::Tables;
use crate::tables::write::ImportContext;
use code::CodeStore;
use project::{Lang, NodeKind, Plan, Planner};
use store::RunStore;

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
    running: Mutex<HashMap<String, CancellationToken>>,
    /// How a finished run publishes (set once the merger exists: its checks run runs).
    pub merger: std::sync::OnceLock<Arc<crate::merges::Merger>>,
    /// Where functions' secrets come from (set at start-up).
    pub secrets: std::sync::OnceLock<Arc<crate::auth::secrets::Secrets>>,
}

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
    pub no_cache: bool,
    pub strict: bool,
    /// For a replay: the run replayed, the commit to read, the outputs to reuse.
    pub rerun_of: Option<String>,
    pub input_commit: Option<String>,
    pub reuse: BTreeMap<String, lh_api::TablePointer>,
    /// For a replay: the parameter values, as they were.
    pub param_values: Option<BTreeMap<String, serde_json::Value>>,
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
            no_cache: true,
            strict: false,
            rerun_of: None,
            input_commit: Some(commit.to_string()),
            reuse: BTreeMap::new(),
            param_values: None,
        }
    }
}

#[async_trait::async_trait]
impl crate::merges::checks::ExpectationRunner for Arc<RunService> {
    async fn run_expectations(
        &self,
        code: &str,
        target: &str,
        commit: &str,
        by: Identity,
        timeout: Duration,
    ) -> std::result::Result<String, String> {
        let run = self
            .start(RunStart::check(code, target, commit, by))
            .await
            .map_err(|e| e.message)?;
        let short = &run.id[..12.min(run.id.len())];
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let now = self.get(&run.id).await.map_err(|e| e.message)?;
            if now.status.is_final() {
                let n = now.nodes.len();
                return match now.status {
                    RunStatus::Succeeded => Ok(format!(
                        "{n} expectation{} passed (run {short})",
                        if n == 1 { "" } else { "s" }
                    )),
                    _ => Err(format!(
                        "{} (run {short}: lh runs show {short})",
                        now.error.unwrap_or_else(|| now.status.as_str().to_string())
                    )),
                };
            }
            if std::time::Instant::now() > deadline {
                let _ = self.cancel(&run.id).await;
                return Err(format!(
                    "the expectations did not finish within {} s (run {short} cancelled)",
                    timeout.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl RunService {
    #[allow(clippy::too_many_arguments)]
    pub async fn new(
        catalog: Catalog,
        tables: Arc<Tables>,
        queries: Arc<QueryEngine>,
        import: ImportContext,
        store: RunStore,
        code: CodeStore,
        envs: EnvCache,
        runtime: Arc<dyn Runtime>,
        config: RunConfig,
        harness: PathBuf,
    ) -> Result<Arc<RunService>> {
        let failed = store.fail_interrupted().await?;
        if failed > 0 {
            tracing::warn!(
                runs = failed,
                "runs left running by a stopped server are marked failed"
            );
        }
        let svc = Arc::new(RunService {
            merger: std::sync::OnceLock::new(),
            secrets: std::sync::OnceLock::new(),
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

    /// Stores an uploaded project archive as a code snapshot.
    pub async fn store_code(&self, tar: PathBuf) -> Result<String> {
        let code = self.code.clone();
        tokio::task::spawn_blocking(move || code.store_tar(&tar))
            .await
            .map_err(|e| Error::internal(format!("code task failed: {e}")))?
    }

    async fn planner_plan(
        &self,
        code_hash: &str,
        commit: &lh_catalog::Commit,
        at: &str,
        params: &BTreeMap<String, String>,
    ) -> Result<Plan> {
        let root = self.code.path(code_hash)?;
        let planner = Planner {
            tables: &self.tables,
            queries: &self.queries,
            python: &self.config.planner_python,
            harness: &self.harness,
            ceilings: &self.config.ceilings,
        };
        planner.plan(&root, commit, at, params).await
    }

    /// Plans a project against a ref without running anything (`lh run --dry-run`).
    pub async fn plan(
        &self,
        code_hash: &str,
        at: &str,
        params: &BTreeMap<String, String>,
    ) -> Result<PlanResponse> {
        let resolved = self.catalog.resolve(at).await?;
        let plan = self
            .planner_plan(code_hash, &resolved.commit, at, params)
            .await?;
        Ok(plan_response(&plan, at))
    }

    /// Starts a run; it goes on in the background.
    pub async fn start(self: &Arc<Self>, start: RunStart) -> Result<RunInfo> {
        let resolved = self.catalog.resolve(&start.target).await?;
        crate::tables::require_branch(&start.target, &resolved)?;
        // A replay reads the commit the replayed run read.
        let input = match &start.input_commit {
            Some(c) => self.catalog.resolve(&format!("@{c}")).await?.commit,
            None => resolved.commit.clone(),
        };
        let mut plan = self
            .planner_plan(&start.code_hash, &input, &start.target, &start.params)
            .await?;
        if let Some(values) = &start.param_values {
            plan.params = values.clone();
        }
        if start.expectations_only {
            plan = plan.expectations_only();
        }
        // Every table it reads, the starter may read.
        for n in &plan.nodes {
            for i in n.inputs.iter().filter(|i| i.producer.is_none()) {
                start.by.require_table(
                    crate::auth::Action::Read,
                    &start.target,
                    &i.table,
                    &format!("a run reading '{}'", i.table),
                )?;
            }
        }
        let id = uuid::Uuid::now_v7().simple().to_string();
        let run_branch = format!("{}{id}", crate::tables::RUN_BRANCHES);
        self.catalog
            .create_branch(&run_branch, &format!("@{}", input.id))
            .await?;
        let nodes: Vec<RunNode> = plan
            .order
            .iter()
            .map(|&i| {
                let n = &plan.nodes[i];
                RunNode {
                    name: n.name.clone(),
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
                    output: None,
                    location: n.location(),
                }
            })
            .collect();
        let info = RunInfo {
            id: id.clone(),
            project: plan.project.name.clone(),
            author: start.by.user.clone(),
            target: start.target.clone(),
            run_branch: run_branch.clone(),
            code_hash: start.code_hash.clone(),
            input_commit: input.id.to_hex(),
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
            nodes,
        };
        let plan_json = serde_json::to_string(&plan).map_err(|e| Error::internal(e.to_string()))?;
        if let Err(e) = self.store.insert_run(&info, &plan_json).await {
            let _ = self.catalog.delete_branch(&run_branch, None).await;
            return Err(e);
        }
        let cancel = CancellationToken::new();
        if let Ok(mut r) = self.running.lock() {
            r.insert(id.clone(), cancel.clone());
        }
        let svc = self.clone();
        let run = exec::Run::new(svc.clone(), info.clone(), plan, start, cancel);
        tokio::spawn(async move {
            run.execute().await;
            if let Ok(mut r) = svc.running.lock() {
                r.remove(&id);
            }
        });
        Ok(info)
    }

    pub async fn get(&self, id: &str) -> Result<RunInfo> {
        let id = self.store.resolve_id(id).await?;
        Ok(self.store.get(&id).await?.0)
    }

    pub async fn list(&self, limit: i64) -> Result<Vec<RunInfo>> {
        self.store.list(limit.clamp(1, 1000)).await
    }

    pub async fn logs(&self, id: &str, node: Option<&str>) -> Result<Vec<(String, String)>> {
        let id = self.store.resolve_id(id).await?;
        self.store.logs(&id, node).await
    }

    /// Stops a running run: no node starts, running ones are stopped, nothing publishes.
    pub async fn cancel(&self, id: &str) -> Result<RunInfo> {
        let id = self.store.resolve_id(id).await?;
        let token = self.running.lock().ok().and_then(|r| r.get(&id).cloned());
        match token {
            Some(t) => t.cancel(),
            None => {
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
        for _ in 0..100 {
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
    ) -> Result<RunInfo> {
        let id = self.store.resolve_id(id).await?;
        let (old, _) = self.store.get(&id).await?;
        if old.status == RunStatus::Running {
            return Err(Error::new(
                Kind::Conflict,
                Code::StillRunning,
                format!("run {} is still running", short(&id)),
            ));
        }
        let mut reuse = BTreeMap::new();
        if from_failed {
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
            no_cache: old.no_cache,
            strict: old.strict,
            rerun_of: Some(old.id.clone()),
            input_commit: Some(old.input_commit.clone()),
            reuse,
            param_values: Some(old.params.clone()),
        };
        self.start(start).await
    }

    /// Removes the code snapshots no run refers to, and the environments used least
    /// recently while the cache is above its size.
    async fn sweep_code_and_environments(&self) -> Result<()> {
        let keep = self.store.code_hashes().await?;
        let code = self.code.clone();
        let removed =
            tokio::task::spawn_blocking(move || code.sweep(&keep, Duration::from_secs(24 * 3600)))
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

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

pub(crate) fn kind_name(k: &NodeKind) -> &'static str {
    match k {
        NodeKind::Model { .. } => "model",
        NodeKind::Expectation { .. } => "expectation",
    }
}

pub(crate) fn lang_name(l: &Lang) -> &'static str {
    match l {
        Lang::Python { .. } => "python",
        Lang::Sql { .. } => "sql",
    }
}

fn plan_response(plan: &Plan, at: &str) -> PlanResponse {
    let nodes = plan
        .order
        .iter()
        .map(|&i| {
            let n = &plan.nodes[i];
            let (python, packages) = match &n.lang {
                Lang::Python { env, .. } => (Some(env.python.clone()), env.packages.clone()),
                Lang::Sql { .. } => (None, BTreeMap::new()),
            };
            PlannedNode {
                name: n.name.clone(),
                kind: kind_name(&n.kind).into(),
                language: lang_name(&n.lang).into(),
                location: n.location(),
                inputs: n
                    .inputs
                    .iter()
                    .map(|inp| PlannedInput {
                        table: inp.table.clone(),
                        columns: inp.columns.clone(),
                        filter: inp.filter.clone(),
                        producer: inp.producer.map(|p| plan.nodes[p].name.clone()),
                    })
                    .collect(),
                output: n.output().map(String::from),
                python,
                packages,
            }
        })
        .collect();
    PlanResponse {
        project: plan.project.name.clone(),
        namespace: plan.project.namespace.clone(),
        reference: at.to_string(),
        params: plan.params.clone(),
        nodes,
    }
}
