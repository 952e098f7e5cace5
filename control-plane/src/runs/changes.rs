//! What a run would change, said before it runs (`lh run --plan`).
//!
//! For each model: whether a run would reuse an earlier output or run it, and why,
//! from the parts of its key (see `exec::key_parts`) against those of the table's newest
//! memoized output, the parts a plan can know: code, parameters, materialization,
//! partitioning, the snapshots of the inputs it reads from the branch, and a Python
//! model's environment request. A model whose input another model of the run makes
//! runs when that one does; a Python model whose parts all match is `reuse?`: its
//! environment's lock is known only once the environment is resolved.
//!
//! For each SQL model whose query differs from the one in the project's last succeeded
//! run, a category: `metadata-only` when DuckDB parses both to the same tree (comments,
//! layout); otherwise the output columns of both queries on the branch are compared:
//! `breaking` when a column is removed or retyped that a downstream node reads (a SQL
//! node naming that column anywhere, a Python node declaring it in `lh.Model(columns=)`,
//! or declaring no columns: it reads them all), `non-breaking` otherwise.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use lh_api::PlannedChange;
use lh_catalog::Commit;

use super::RunService;
use super::exec::{key_parts, whole_input};
use super::project::{Lang, NodeKind, Plan, PlanNode};
use crate::error::Result;

impl RunService {
    /// The change of each node of `plan` (by index) if it ran on `head` now.
    pub(super) async fn changes(
        &self,
        plan: &Plan,
        code_hash: &str,
        head: &Commit,
    ) -> Result<BTreeMap<usize, PlannedChange>> {
        let previous: Option<(String, Plan)> =
            match self.store.last_plan(&plan.project.name).await? {
                Some((run, json)) => serde_json::from_str::<Plan>(&json).ok().map(|p| (run, p)),
                None => None,
            };
        let mut runs: HashSet<usize> = HashSet::new();
        let mut out = BTreeMap::new();
        for &i in &plan.order {
            let node = &plan.nodes[i];
            let mut change = match node.kind {
                NodeKind::Expectation { .. } => PlannedChange {
                    action: "run".into(),
                    reasons: vec!["expectations run on every run".into()],
                    category: None,
                    details: Vec::new(),
                    compared_with: None,
                },
                NodeKind::Model { .. } => self.reuse(plan, node, code_hash, head, &runs).await?,
            };
            if change.action == "run" && matches!(node.kind, NodeKind::Model { .. }) {
                runs.insert(i);
            }
            if let (Some((run, old)), Lang::Sql { sql, .. }) = (&previous, &node.lang) {
                let before = old.nodes.iter().find(|o| o.name == node.name);
                if let Some(Lang::Sql { sql: old_sql, .. }) = before.map(|o| &o.lang)
                    && old_sql != sql
                {
                    let (category, details) = self.category(plan, node, old_sql, head).await;
                    change.category = Some(category);
                    change.details = details;
                    change.compared_with = Some(run.clone());
                }
            }
            out.insert(i, change);
        }
        Ok(out)
    }

    /// Whether a model would be reused, and why not.
    async fn reuse(
        &self,
        plan: &Plan,
        node: &PlanNode,
        code_hash: &str,
        head: &Commit,
        runs: &HashSet<usize>,
    ) -> Result<PlannedChange> {
        let mut reasons = Vec::new();
        let mut skip: BTreeSet<String> = BTreeSet::new();
        let mut inputs = Vec::new();
        for inp in &node.inputs {
            if let Some(p) = inp.producer {
                // Made by this run: the same as its memoized output when that one is
                // reused, new when it runs.
                if runs.contains(&p) {
                    reasons.push(format!("input {} is made again by this run", inp.table));
                }
                skip.insert(format!("input {}", inp.table));
                inputs.push(serde_json::Value::Null);
                continue;
            }
            match self.catalog.table_in(head, &inp.table).await? {
                Some(pointer) => inputs.push(whole_input(inp, &pointer)),
                None => {
                    reasons.push(format!("input {} is not on the branch", inp.table));
                    skip.insert(format!("input {}", inp.table));
                    inputs.push(serde_json::Value::Null);
                }
            }
        }
        if node.partition.is_some() {
            return Ok(PlannedChange {
                action: "run".into(),
                reasons: vec![
                    "an instance of a partitioned model: reuse is decided per partition when \
                     it runs (lh runs show)"
                        .into(),
                ],
                category: None,
                details: Vec::new(),
                compared_with: None,
            });
        }
        let params: BTreeMap<String, serde_json::Value> = node
            .params
            .iter()
            .filter_map(|(arg, p)| plan.params.get(p).map(|v| (arg.clone(), v.clone())))
            .collect();
        let env_key = match &node.lang {
            Lang::Python { env, .. } => env.key().ok(),
            Lang::Sql { .. } => None,
        };
        let current = self.catalog.table_in(head, &node.name).await?;
        let previous = match node.kind {
            NodeKind::Model {
                materialize:
                    super::project::Materialize::Append
                    | super::project::Materialize::OverwritePartitions,
            } => current.map(|p| p.metadata_location),
            _ => None,
        };
        let now = key_parts(
            node,
            code_hash,
            &inputs,
            &params,
            env_key.as_deref(),
            previous.as_deref(),
            &BTreeMap::new(),
        );
        let before: Option<BTreeMap<String, String>> = self
            .store
            .memo_latest_parts(&node.name)
            .await?
            .and_then(|b| serde_json::from_str(&b).ok());
        let python = matches!(node.lang, Lang::Python { .. });
        match before {
            None => reasons.push("no earlier output of this model".into()),
            Some(before) => {
                for (k, v) in &now {
                    // A SQL model's text is both its code and its function.
                    let sql_function = k == "function" && !python;
                    if skip.contains(k) || k.starts_with("secret ") || sql_function {
                        continue;
                    }
                    let old = before.get(k);
                    let same = match (k.as_str(), old) {
                        // The request's key; the lock after it is known once resolved.
                        ("environment", Some(o)) if python => {
                            o.split(" lock ").next() == Some(v.as_str())
                        }
                        (_, Some(o)) => o == v,
                        (_, None) => false,
                    };
                    if same {
                        continue;
                    }
                    reasons.push(match (k.as_str(), old) {
                        ("code", Some(o)) => format!("code changed ({o} -> {v})"),
                        (k, Some(_)) if k.starts_with("input ") => {
                            format!("{k} moved to another snapshot")
                        }
                        (k, Some(_)) => format!("{k} changed"),
                        (k, None) => format!("{k} is new"),
                    });
                }
                for k in before.keys() {
                    if !now.contains_key(k) && !k.starts_with("secret ") {
                        reasons.push(format!("{k} is gone"));
                    }
                }
            }
        }
        let action = match (reasons.is_empty(), python) {
            (false, _) => "run",
            (true, false) => "reuse",
            (true, true) => "reuse?",
        };
        if reasons.is_empty() {
            reasons.push(match python {
                true => "the same code, parameters and inputs as its newest output; reused if \
                         its environment resolves to the same lock"
                    .into(),
                false => "the same code, parameters and inputs as its newest output".into(),
            });
        }
        Ok(PlannedChange {
            action: action.into(),
            reasons,
            category: None,
            details: Vec::new(),
            compared_with: None,
        })
    }

    /// The category of a SQL model's change from `old_sql`, and what it rests on.
    async fn category(
        &self,
        plan: &Plan,
        node: &PlanNode,
        old_sql: &str,
        head: &Commit,
    ) -> (String, Vec<String>) {
        let Lang::Sql { sql, .. } = &node.lang else {
            return ("unknown".into(), vec!["not a SQL model".into()]);
        };
        let (old_tree, new_tree) = (
            self.queries.parse_tree(old_sql).await,
            self.queries.parse_tree(sql).await,
        );
        if let (Ok(a), Ok(b)) = (&old_tree, &new_tree)
            && a == b
        {
            return (
                "metadata-only".into(),
                vec!["the same query as DuckDB parses it: comments and layout changed".into()],
            );
        }
        if !node.params.is_empty() {
            return (
                "unknown".into(),
                vec!["the query takes parameters: its columns are known when it runs".into()],
            );
        }
        let inputs: Vec<(Vec<String>, bool)> = node
            .inputs
            .iter()
            .map(|i| {
                let parts = match i.table.rsplit_once('.') {
                    Some((ns, t)) => vec![ns.to_string(), t.to_string()],
                    None => vec![i.table.clone()],
                };
                (parts, i.bare)
            })
            .collect();
        let (old_cols, new_cols) = match (
            self.queries.output_columns(head, &inputs, old_sql).await,
            self.queries.output_columns(head, &inputs, sql).await,
        ) {
            (Ok(o), Ok(n)) => (o, n),
            (Err(e), _) | (_, Err(e)) => {
                return (
                    "unknown".into(),
                    vec![format!(
                        "its columns cannot be had on the branch: {}",
                        e.message
                    )],
                );
            }
        };
        // Who reads this model's output, and which of its columns.
        let mut readers: Vec<(String, Option<BTreeSet<String>>)> = Vec::new();
        for d in &plan.nodes {
            for inp in d.inputs.iter().filter(|i| i.table == node.name) {
                let read = match (&d.lang, &inp.columns) {
                    (Lang::Sql { sql, .. }, _) => match self.queries.parse_tree(sql).await {
                        Ok(tree) => columns_named(&tree),
                        Err(_) => None,
                    },
                    (Lang::Python { .. }, Some(cols)) => Some(cols.iter().cloned().collect()),
                    (Lang::Python { .. }, None) => None,
                };
                readers.push((d.display_name(), read));
            }
        }
        let reads = |col: &str| -> Vec<String> {
            readers
                .iter()
                .filter(|(_, cols)| {
                    cols.as_ref()
                        .is_none_or(|c| c.iter().any(|x| x.eq_ignore_ascii_case(col)))
                })
                .map(|(n, _)| n.clone())
                .collect()
        };
        let mut breaking = false;
        let mut details = Vec::new();
        for (name, ty) in &old_cols {
            let now = new_cols.iter().find(|(n, _)| n == name);
            let what = match now {
                None => format!("removes column {name}"),
                Some((_, t)) if t != ty => format!("retypes column {name} ({ty} -> {t})"),
                Some(_) => continue,
            };
            let by = reads(name);
            if by.is_empty() {
                details.push(format!("{what}: nothing downstream reads it"));
            } else {
                breaking = true;
                details.push(format!("{what}, read by {}", by.join(", ")));
            }
        }
        for (name, ty) in &new_cols {
            if !old_cols.iter().any(|(n, _)| n == name) {
                details.push(format!("adds column {name} ({ty})"));
            }
        }
        if details.is_empty() {
            details.push("the same columns; its rows or values may change".into());
        }
        let category = if breaking { "breaking" } else { "non-breaking" };
        (category.into(), details)
    }
}

/// The column names a parsed statement names anywhere (their last part), or None when
/// it selects `*` (it reads every column).
fn columns_named(tree: &serde_json::Value) -> Option<BTreeSet<String>> {
    fn walk(v: &serde_json::Value, out: &mut BTreeSet<String>, star: &mut bool) {
        match v {
            serde_json::Value::Object(m) => {
                match m.get("class").and_then(|c| c.as_str()) {
                    Some("COLUMN_REF") => {
                        if let Some(name) = m
                            .get("column_names")
                            .and_then(|n| n.as_array())
                            .and_then(|n| n.last())
                            .and_then(|n| n.as_str())
                        {
                            out.insert(name.to_string());
                        }
                    }
                    Some("STAR") => *star = true,
                    _ => {}
                }
                m.values().for_each(|v| walk(v, out, star));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out, star)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    let mut star = false;
    walk(tree, &mut out, &mut star);
    (!star).then_some(out)
}
