//! The run service as a caller meets it: each method validates, authorizes and acts, for
//! lh's HTTP API. A run is seen by whoever may read its target, without the nodes that
//! touch tables the caller may not read.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use lh_catalog::RefExpr;

use crate::RunRecord;
use crate::lineage::Edge;

use crate::auth::{Action, Identity};
use crate::error::{Code, Error, Result};
use crate::{RunService, RunStart};

/// A run as asked for by a caller.
pub struct RunAsk {
    pub params: BTreeMap<String, String>,
    pub partitions: Option<String>,
    /// The nodes to run (`lh run --select`); empty: all.
    pub select: Vec<String>,
    pub no_cache: bool,
    pub strict: bool,
    /// A check of these expectations at this commit of the target (`lh bisect`, merge
    /// checks), publishing nothing.
    pub check: Option<(RefExpr, Vec<String>)>,
}

/// Column-level lineage of a table or column on a branch.
#[derive(Debug, Clone)]
pub struct Lineage {
    /// The branch.
    pub at: String,
    pub table: String,
    /// The column; None: every column of the table.
    pub column: Option<String>,
    /// The steps that lead to it, nearest first.
    pub upstream: Vec<Edge>,
    /// The steps that lead from it, nearest first.
    pub downstream: Vec<Edge>,
    /// Models whose lineage could not be read, each `model: why`.
    pub unresolved: Vec<String>,
}

/// A check (`at`) of a commit of another branch than `target`, the one it is recorded on,
/// or of no commit at all.
pub fn check_elsewhere(target: &str, at: &str) -> Error {
    Error::bad_request(
        Code::InvalidArgument,
        format!("a check reads a commit of the branch it runs on ('{target}'), not '{at}'"),
    )
    .with_hint(format!("e.g. {target}@<hash>"))
}

/// The most runs one listing answers.
pub const MAX_LISTED_RUNS: i64 = 1000;

impl RunService {
    /// Plans a project's run on `at` (`lh run --dry-run`): the caller may run there.
    /// `code` takes the uploaded project's snapshot, once the caller is allowed (a
    /// refused request keeps its upload).
    pub async fn plan_for(
        &self,
        identity: &Identity,
        at: &RefExpr,
        code: impl Future<Output = Result<String>>,
        ask: &RunAsk,
        changes: Option<bool>,
    ) -> Result<crate::Planned> {
        identity.require_ref(Action::Run, at, "planning a pipeline on it")?;
        let code = code.await?;
        self.plan(&code, at, ask, identity, changes).await
    }

    /// Starts a run of `ask` on branch `target`: the caller may run there, and publish
    /// there unless it is a check (whose functions get the branch's secrets only if its
    /// starter may publish there). `code` takes the uploaded project's snapshot, once
    /// the run is allowed (a refused request keeps its upload).
    pub async fn start_for(
        self: &Arc<Self>,
        identity: &Identity,
        target: &str,
        code: impl Future<Output = Result<String>>,
        ask: RunAsk,
    ) -> Result<RunRecord> {
        identity.require_ref(
            Action::Run,
            &RefExpr::named(target),
            "running a pipeline on it",
        )?;
        let protected = &self.merger.protected;
        // A check reads a commit of the branch it is recorded on and publishes nothing.
        let checked = match &ask.check {
            Some((at, expectations)) => {
                let secrets = protected.check_publish(identity, target).await.is_ok();
                if at.ref_name() != Some(target) {
                    return Err(check_elsewhere(target, &at.to_string()));
                }
                if ask.partitions.is_some() {
                    return Err(Error::bad_request(
                        Code::InvalidArgument,
                        "a check runs expectations on the tables as they are: it takes no partitions",
                    ));
                }
                let at = self.catalog.resolve(at).await?;
                Some((at.commit.id.to_hex(), expectations.clone(), secrets))
            }
            None => {
                protected.check_publish(identity, target).await?;
                None
            }
        };
        let mut start = RunStart {
            code_hash: code.await?,
            target: target.to_string(),
            params: ask.params,
            by: identity.clone(),
            publish: true,
            expectations_only: false,
            only: Vec::new(),
            secrets: true,
            no_cache: ask.no_cache,
            strict: ask.strict,
            rerun_of: None,
            input_commit: None,
            reuse: Default::default(),
            param_values: None,
            partitions: ask.partitions,
            select: ask.select,
        };
        if checked.is_some() && !start.select.is_empty() {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                "a check runs the expectations it names: it takes no --select",
            ));
        }
        if let Some((commit, only, secrets)) = checked {
            start.secrets = secrets;
            start.publish = false;
            start.expectations_only = true;
            start.only = only;
            start.no_cache = true;
            start.input_commit = Some(commit);
        }
        self.start(start).await
    }

    /// A run `identity` may see (it may read the run's target), as it sees it.
    pub async fn get_for(&self, identity: &Identity, id: &str) -> Result<RunRecord> {
        Ok(as_seen(identity, self.readable(identity, id).await?))
    }

    async fn readable(&self, identity: &Identity, id: &str) -> Result<RunRecord> {
        let run = self.get(id).await?;
        identity.require_ref(
            Action::Read,
            &RefExpr::named(&run.target),
            "reading its runs",
        )?;
        Ok(run)
    }

    /// Recent runs, newest first, of the refs `identity` may read, as it sees them.
    pub async fn list_for(&self, identity: &Identity, limit: i64) -> Result<Vec<RunRecord>> {
        if !(1..=MAX_LISTED_RUNS).contains(&limit) {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!("a listing holds 1 to {MAX_LISTED_RUNS} runs, not {limit}"),
            ));
        }
        Ok(self
            .list(limit)
            .await?
            .into_iter()
            .filter(|r| identity.can_ref(Action::Read, &RefExpr::named(&r.target)))
            .map(|r| as_seen(identity, r))
            .collect())
    }

    /// The logs of a run's nodes (`node`: one) that `identity` may see, by node.
    pub async fn logs_for(
        &self,
        identity: &Identity,
        id: &str,
        node: Option<&str>,
    ) -> Result<Vec<(String, String)>> {
        let run = self.readable(identity, id).await?;
        let logs = self.logs(id, node).await?;
        // The logs of nodes touching tables the caller may not read are left out.
        Ok(logs
            .into_iter()
            .filter(|(name, _)| {
                run.nodes
                    .iter()
                    .find(|n| &n.name == name)
                    .is_some_and(|n| node_visible(identity, &run.target, n))
            })
            .collect())
    }

    /// Stops a run: the caller may read and run on its target.
    pub async fn cancel_for(&self, identity: &Identity, id: &str) -> Result<RunRecord> {
        let run = self.readable(identity, id).await?;
        identity.require_ref(
            Action::Run,
            &RefExpr::named(&run.target),
            "cancelling its runs",
        )?;
        self.cancel(id).await
    }

    /// Replays a run (with `code`, new code, taken once the replay is allowed): the
    /// caller may run and publish on its target.
    pub async fn rerun_for(
        self: &Arc<Self>,
        identity: &Identity,
        id: &str,
        from_failed: bool,
        code: Option<impl Future<Output = Result<String>>>,
    ) -> Result<RunRecord> {
        let original = self.get(id).await?;
        identity.require_ref(
            Action::Run,
            &RefExpr::named(&original.target),
            "running a pipeline on it",
        )?;
        self.merger
            .protected
            .check_publish(identity, &original.target)
            .await?;
        let code = match code {
            Some(c) => Some(c.await?),
            None => None,
        };
        self.rerun(id, from_failed, code, identity.clone()).await
    }

    /// Column-level lineage of `name` (a table, or `table.column`) on branch `at`: the
    /// steps up to it and down from it through the models of every project's last
    /// succeeded run there. Tables the caller may not read are left out; one it names
    /// reads as one that is not there.
    pub async fn lineage_for(
        &self,
        identity: &Identity,
        at: &RefExpr,
        name: &str,
    ) -> Result<Lineage> {
        identity.require_ref(Action::Read, at, "reading its lineage")?;
        if !matches!(at, RefExpr::Named(_)) {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!("lineage reads the runs of a branch; '{at}' is no branch name"),
            ));
        }
        let name = name.to_string();
        let head = self.catalog.resolve(at).await?.commit;
        // A table the caller may not read reads as one that is not there.
        let not_found = || {
            Error::not_found(
                Code::TableNotFound,
                format!("'{name}' is neither a table nor a table's column at '{at}'"),
            )
        };
        let readable_table = async |t: &str| -> Option<Vec<String>> {
            if lh_catalog::names::validate_table_name(t).is_err()
                || !identity.can_table(Action::Read, at, t)
            {
                return None;
            }
            let loaded = self.tables.load(&head, t).await.ok()??;
            Some(
                loaded
                    .metadata
                    .current_schema()
                    .as_struct()
                    .fields()
                    .iter()
                    .map(|f| f.name.clone())
                    .collect(),
            )
        };
        let (table, column) = match readable_table(&name).await {
            Some(_) => (name.clone(), None),
            None => {
                // `ns.table.column`, each part spelled as names are (`"Col 1"`).
                let (t, c) = lh_catalog::names::split_table(&name).ok_or_else(not_found)?;
                let c = lh_catalog::names::levels(c)
                    .ok()
                    .and_then(|mut l| (l.len() == 1).then(|| l.remove(0)))
                    .unwrap_or_else(|| c.to_string());
                let c = c.as_str();
                let cols = readable_table(t).await.ok_or_else(not_found)?;
                let c = cols
                    .iter()
                    .find(|x| x.eq_ignore_ascii_case(c))
                    .ok_or_else(not_found)?;
                (t.to_string(), Some(c.clone()))
            }
        };
        let at = at.to_string();
        let (edges, unresolved) = self.lineage_edges(&at, &head).await?;
        let on = RefExpr::named(&at);
        let readable = |t: &str| identity.can_table(Action::Read, &on, t);
        let unresolved: Vec<String> = unresolved
            .into_iter()
            .filter(|u| u.tables.iter().all(|t| readable(t)))
            .map(|u| format!("{}: {}", u.model, u.why))
            .collect();
        // Columns compared as DuckDB does: without regard to case.
        let key = |(t, c): &(String, String)| (t.clone(), c.to_lowercase());
        let edges: Vec<_> = edges
            .into_iter()
            .filter(|e| readable(&e.from.0) && readable(&e.to.0))
            .collect();
        let starts = |e_side: &dyn Fn(&Edge) -> &(String, String)| {
            edges
                .iter()
                .map(e_side)
                .filter(|(t, c)| {
                    *t == table
                        && column
                            .as_ref()
                            .is_none_or(|col| col.eq_ignore_ascii_case(c))
                })
                .map(key)
                .collect::<BTreeSet<_>>()
        };
        let walk = |start: BTreeSet<(String, String)>, up: bool| {
            let mut seen = start.clone();
            let mut queue: VecDeque<(String, String)> = start.into_iter().collect();
            let mut out = Vec::new();
            while let Some(at_col) = queue.pop_front() {
                for e in &edges {
                    let (here, next) = if up {
                        (&e.to, &e.from)
                    } else {
                        (&e.from, &e.to)
                    };
                    if key(here) == at_col {
                        out.push(e.clone());
                        if seen.insert(key(next)) {
                            queue.push_back(key(next));
                        }
                    }
                }
            }
            out
        };
        let upstream = walk(starts(&|e| &e.to), true);
        let downstream = walk(starts(&|e| &e.from), false);
        Ok(Lineage {
            at,
            table,
            column,
            upstream,
            downstream,
            unresolved,
        })
    }
}

/// Whether `identity` may see what a node of a run on `target` did: a model's table
/// it may read, an expectation whose inputs it may read.
fn node_visible(identity: &Identity, target: &str, n: &crate::RunNode) -> bool {
    let target = &RefExpr::named(target);
    let model = n.kind == "model";
    let table = crate::partitions::table_of(&n.name);
    (!model || identity.can_table(Action::Read, target, table))
        && n.inputs
            .iter()
            .all(|t| identity.can_table(Action::Read, target, t))
}

/// A run as `identity` sees it: nodes touching tables it may not read are left out
/// (their names are tables', their errors may hold data), and `nodes_hidden` says so
/// (not how many); so are the edges to them, the partitions' lists of them, a run error
/// that names one of them, and the run's parameters and environments (a parameter may
/// name a hidden table or a file).
fn as_seen(identity: &Identity, mut run: RunRecord) -> RunRecord {
    let target = run.target.clone();
    let (shown, hidden): (Vec<_>, Vec<_>) = std::mem::take(&mut run.nodes)
        .into_iter()
        .partition(|n| node_visible(identity, &target, n));
    if hidden.is_empty() {
        run.nodes = shown;
        return run;
    }
    let gone: std::collections::BTreeSet<&str> = hidden.iter().map(|n| n.name.as_str()).collect();
    run.nodes = shown
        .into_iter()
        .map(|mut n| {
            n.depends_on.retain(|d| !gone.contains(d.as_str()));
            n
        })
        .collect();
    run.nodes_hidden = true;
    run.params.clear();
    run.environments.clear();
    if run.error.as_deref().is_some_and(|e| {
        hidden
            .iter()
            .any(|n| e.contains(crate::partitions::table_of(&n.name)))
    }) {
        run.error = Some("the run failed in a node that touches tables you may not read".into());
    }
    run
}
