//! What a run would change, said before it runs (`lh run --plan`).
//!
//! For each model: whether a run would reuse an earlier output or run it, and why. The
//! parts of its key (see `exec::key_parts`) that a plan can know are computed as a run
//! would: code, parameters, materialization, partitioning, the snapshots of its inputs
//! (read from the branch, or the memoized output an upstream model would reuse), and a
//! Python model's environment request. The model is reused when a memoized output a run
//! may still reuse has the same parts; otherwise it runs, and the reasons are the parts
//! that differ from its newest output's. What a plan cannot know makes the answer
//! `reuse?`: a Python model's environment lock and secrets' versions, an instance of a
//! partitioned model, and anything that reads an uncertain model's output.
//!
//! For each SQL model whose query differs from the one in the project's last succeeded
//! run on the same branch, a category: `metadata-only` when DuckDB parses both to the
//! same tree and the settings in its comments are the same; otherwise the output
//! columns of both queries on the branch are compared: `breaking` when a column is
//! removed or retyped that a downstream node reads (a SQL node naming it, or reading
//! whole rows; a Python node declaring it in `lh.Model(columns=)`, or declaring no
//! columns, or filtering), `non-breaking` otherwise. The readers are the project's own
//! nodes and those of other projects' last succeeded runs on the same branch.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lh_catalog::{Commit, RefExpr, TablePointer};

use super::RunService;
use super::exec::memo::{key_parts, whole_input};
use super::project::{Lang, NodeKind, Plan, PlanNode};
use crate::auth::{Action, Identity};
use crate::error::Result;

/// What the plan says a model's output will be, for the models that read it.
#[derive(Clone)]
enum Output {
    /// Made again by this run.
    Made,
    /// A memoized output, reused.
    Reused(TablePointer),
    /// Not known before it runs.
    Unsure,
}

/// What a run would do with a node, and what changed (`lh run --dry-run --changes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeChange {
    /// `run`, `reuse`, or `reuse?` (a Python model whose key matches but whose
    /// environment's lock is known only once it is resolved).
    pub action: String,
    /// Why: what differs from the key of the table's newest memoized output.
    pub reasons: Vec<String>,
    /// A changed SQL model's category: `breaking`, `non-breaking`, `metadata-only` or
    /// `unknown` (the reason in `details`).
    pub category: Option<String>,
    /// What the category rests on.
    pub details: Vec<String>,
    /// The run whose code the query was compared with.
    pub compared_with: Option<String>,
}

/// What a plan of changes needs besides the plan.
pub(super) struct ChangesOf<'a> {
    pub code_hash: &'a str,
    pub head: &'a Commit,
    /// The branch planned on (runs on it are compared with).
    pub target: &'a str,
    pub no_cache: bool,
    /// Who asks: columns of tables they may not read are not told.
    pub by: &'a Identity,
}

impl RunService {
    /// The change of each node of `plan` (by index) if it ran on `head` now.
    pub(super) async fn changes(
        &self,
        plan: &Plan,
        of: &ChangesOf<'_>,
    ) -> Result<BTreeMap<usize, NodeChange>> {
        let previous = self.previous_plan(&plan.project.name, of.target).await?;
        // Other projects' last runs on the branch (their nodes read this one's tables
        // too), loaded for the first category.
        let mut others: Option<Vec<(String, Plan)>> = None;
        let mut outputs: HashMap<usize, Output> = HashMap::new();
        let mut out = BTreeMap::new();
        for &i in &plan.order {
            let node = &plan.nodes[i];
            let (mut change, output) = match node.kind {
                NodeKind::Expectation { .. } => (
                    NodeChange {
                        action: "run".into(),
                        reasons: vec!["expectations run on every run".into()],
                        category: None,
                        details: Vec::new(),
                        compared_with: None,
                    },
                    Output::Made,
                ),
                NodeKind::Model { .. } => self.reuse(plan, node, of, &outputs).await?,
            };
            outputs.insert(i, output);
            if let (Some((run, old)), Lang::Sql { sql, .. }) = (&previous, &node.lang) {
                let before = old
                    .nodes
                    .iter()
                    .find(|o| o.name == node.name && o.partition.is_none());
                if let Some(before) = before
                    && let Lang::Sql { sql: old_sql, .. } = &before.lang
                    && (old_sql != sql || before.kind != node.kind)
                {
                    if others.is_none() {
                        let mut all = Vec::new();
                        for p in self.store.projects_on(of.target).await? {
                            if p != plan.project.name
                                && let Some((_, other)) = self.previous_plan(&p, of.target).await?
                            {
                                all.push((p, other));
                            }
                        }
                        others = Some(all);
                    }
                    let others = others.as_deref().unwrap_or_default();
                    let (category, details) =
                        self.category(plan, others, node, before, old_sql, of).await;
                    change.category = Some(category);
                    change.details = details;
                    change.compared_with = Some(run.clone());
                }
            }
            out.insert(i, change);
        }
        Ok(out)
    }

    /// The plan of the project's newest succeeded run on `target` that ran models (a
    /// merge check's runs only expectations).
    pub(super) async fn previous_plan(
        &self,
        project: &str,
        target: &str,
    ) -> Result<Option<(String, Plan)>> {
        for (run, json) in self.store.last_plans(project, target, 20).await? {
            if let Ok(plan) = serde_json::from_str::<Plan>(&json)
                && plan
                    .nodes
                    .iter()
                    .any(|n| matches!(n.kind, NodeKind::Model { .. }))
            {
                return Ok(Some((run, plan)));
            }
        }
        Ok(None)
    }

    /// Whether a model would be reused, and why not; and what its output will be.
    async fn reuse(
        &self,
        plan: &Plan,
        node: &PlanNode,
        of: &ChangesOf<'_>,
        outputs: &HashMap<usize, Output>,
    ) -> Result<(NodeChange, Output)> {
        let change = |action: &str, reasons: Vec<String>| NodeChange {
            action: action.into(),
            reasons,
            category: None,
            details: Vec::new(),
            compared_with: None,
        };
        if of.no_cache {
            return Ok((change("run", vec!["--no-cache".into()]), Output::Made));
        }
        if node.partition.is_some() {
            return Ok((
                change(
                    "reuse?",
                    vec![
                        "an instance of a partitioned model: reuse is decided per partition \
                         when it runs (the run's record says)"
                            .into(),
                    ],
                ),
                Output::Unsure,
            ));
        }
        let mut made = Vec::new();
        let mut unsure = Vec::new();
        let mut skip: BTreeSet<String> = BTreeSet::new();
        let mut inputs = Vec::new();
        for inp in &node.inputs {
            let pointer = match inp.producer.map(|p| outputs.get(&p)) {
                Some(Some(Output::Reused(p))) => Some(p.clone()),
                Some(Some(Output::Made)) => {
                    made.push(format!("input {} is made again by this run", inp.table));
                    None
                }
                Some(_) => {
                    unsure.push(format!(
                        "input {} is known once the model making it has run",
                        inp.table
                    ));
                    None
                }
                None => match self.catalog.table_in(of.head, &inp.table).await? {
                    Some(p) => Some(p),
                    None => {
                        made.push(format!("input {} is not on the branch", inp.table));
                        None
                    }
                },
            };
            match pointer {
                Some(p) => inputs.push(whole_input(inp, &p)),
                None => {
                    skip.insert(format!("input {}", inp.table));
                    inputs.push(serde_json::Value::Null);
                }
            }
        }
        let params: BTreeMap<String, serde_json::Value> = node
            .params
            .iter()
            .filter_map(|(arg, p)| plan.params.get(p).map(|v| (arg.clone(), v.clone())))
            .collect();
        let (env_key, secrets) = match &node.lang {
            Lang::Python { env, secrets, .. } => (env.key().ok(), secrets.clone()),
            Lang::Sql { .. } => (None, Vec::new()),
        };
        let python = env_key.is_some();
        if python {
            unsure.push("its environment's lock is known once the environment is resolved".into());
        }
        if !secrets.is_empty() {
            unsure.push("its secrets' versions are checked when it runs".into());
        }
        let current = self.catalog.table_in(of.head, &node.name).await?;
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
            of.code_hash,
            &inputs,
            &params,
            env_key.as_deref(),
            previous.as_deref(),
            &BTreeMap::new(),
        );
        // The parts compared: all but what the plan cannot know.
        let differ = |before: &BTreeMap<String, String>| -> Vec<String> {
            let mut reasons = Vec::new();
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
                if !same {
                    reasons.push(match (k.as_str(), old) {
                        ("code", Some(o)) => format!("code changed ({o} -> {v})"),
                        (k, Some(_)) if k.starts_with("input ") => {
                            format!("{k} moved to another snapshot")
                        }
                        (k, Some(_)) => format!("{k} changed"),
                        (k, None) => format!("{k} is new"),
                    });
                }
            }
            for k in before.keys() {
                if !now.contains_key(k) && !k.starts_with("secret ") {
                    reasons.push(format!("{k} is gone"));
                }
            }
            reasons
        };
        let since =
            super::store::reusable_since(chrono::Utc::now(), self.tables.retention().unreachable());
        let memo: Vec<(BTreeMap<String, String>, TablePointer)> = self
            .store
            .memo_outputs(&node.name, since)
            .await?
            .into_iter()
            .filter_map(|(parts, p)| Some((serde_json::from_str(&parts).ok()?, p)))
            .collect();
        let matching = memo.iter().find(|(parts, _)| differ(parts).is_empty());
        if !made.is_empty() {
            return Ok((change("run", made), Output::Made));
        }
        let Some((_, pointer)) = matching else {
            let mut reasons = match memo.first() {
                Some((newest, _)) => differ(newest),
                None => match self.store.memo_latest_parts(&node.name).await? {
                    Some(_) => vec!["its earlier outputs are older than runs reuse".into()],
                    None => vec!["no earlier output of this model".into()],
                },
            };
            if reasons.is_empty() {
                reasons.push("no earlier output with the same key".into());
            }
            return Ok((change("run", reasons), Output::Made));
        };
        if !unsure.is_empty() {
            let mut reasons = vec![
                "an earlier output has the same code, parameters and inputs; reused if".into(),
            ];
            reasons.extend(unsure);
            return Ok((change("reuse?", reasons), Output::Unsure));
        }
        Ok((
            change(
                "reuse",
                vec!["an earlier output has the same code, parameters and inputs".into()],
            ),
            Output::Reused(pointer.clone()),
        ))
    }

    /// The category of a SQL model's change from its `before` node, and what it rests on.
    async fn category(
        &self,
        plan: &Plan,
        others: &[(String, Plan)],
        node: &PlanNode,
        before: &PlanNode,
        old_sql: &str,
        of: &ChangesOf<'_>,
    ) -> (String, Vec<String>) {
        let unknown = |why: String| ("unknown".to_string(), vec![why]);
        let Lang::Sql { sql, .. } = &node.lang else {
            return unknown("not a SQL model".into());
        };
        // Both queries read tables: only a reader of all of them is told their columns.
        for inp in node.inputs.iter().chain(&before.inputs) {
            if inp.producer.is_none()
                && !of
                    .by
                    .can_table(Action::Read, &RefExpr::named(of.target), &inp.table)
            {
                return unknown(format!("you may not read its input {}", inp.table));
            }
        }
        let settings_same = before.kind == node.kind
            && before.partitioned_by == node.partitioned_by
            && before
                .inputs
                .iter()
                .map(|i| i.whole)
                .eq(node.inputs.iter().map(|i| i.whole));
        let (old_tree, new_tree) = (
            self.queries.parse_tree(old_sql).await,
            self.queries.parse_tree(sql).await,
        );
        if let (Ok(a), Ok(b)) = (&old_tree, &new_tree)
            && a == b
            && settings_same
        {
            return (
                "metadata-only".into(),
                vec!["the same query as DuckDB parses it: comments and layout changed".into()],
            );
        }
        if !node.params.is_empty() || !before.params.is_empty() {
            return unknown(
                "the query takes parameters: its columns are known when it runs".into(),
            );
        }
        let tables = |n: &PlanNode| -> Vec<(String, bool)> {
            n.inputs.iter().map(|i| (i.table.clone(), i.bare)).collect()
        };
        let (old_cols, new_cols) = match (
            self.queries
                .output_columns(of.head, &tables(before), old_sql, &of.by.user)
                .await,
            self.queries
                .output_columns(of.head, &tables(node), sql, &of.by.user)
                .await,
        ) {
            (Ok(o), Ok(n)) => (o, n),
            (Err(e), _) | (_, Err(e)) => {
                return unknown(format!(
                    "its columns cannot be had on the branch: {}",
                    e.message
                ));
            }
        };
        // Who of the project reads this model's output, and which of its columns
        // (None: every column).
        // Each reader: its key (project, node), its name as told (None: not told), and
        // the columns it reads.
        type Reader = ((String, String), Option<String>, Option<BTreeSet<String>>);
        let mut readers: Vec<Reader> = Vec::new();
        for d in &plan.nodes {
            let key = (String::new(), d.display_name());
            if d.inputs.iter().any(|i| i.table == node.name)
                && !readers.iter().any(|(k, ..)| *k == key)
            {
                let cols = self.columns_read(d, &node.name).await;
                readers.push((key, Some(d.display_name()), cols));
            }
        }
        // And the nodes of other projects' last runs on the branch; those touching tables
        // the caller may not read are counted, not named.
        for (project, other) in others {
            for d in &other.nodes {
                let key = (project.clone(), d.name.clone());
                if !d.inputs.iter().any(|i| i.table == node.name)
                    || readers.iter().any(|(k, ..)| *k == key)
                {
                    continue;
                }
                let model = matches!(d.kind, NodeKind::Model { .. });
                let on = RefExpr::named(of.target);
                let visible = (!model || of.by.can_table(Action::Read, &on, &d.name))
                    && d.inputs
                        .iter()
                        .all(|i| of.by.can_table(Action::Read, &on, &i.table));
                let name = visible.then(|| format!("{} (project {project})", d.name));
                let cols = self.columns_read(d, &node.name).await;
                readers.push((key, name, cols));
            }
        }
        let reads = |col: &str| -> Vec<String> {
            let hit: Vec<&Reader> = readers
                .iter()
                .filter(|(_, _, cols)| {
                    cols.as_ref()
                        .is_none_or(|c| c.iter().any(|x| x.eq_ignore_ascii_case(col)))
                })
                .collect();
            let mut names: Vec<String> = hit.iter().filter_map(|(_, n, _)| n.clone()).collect();
            let hidden = hit.iter().filter(|(_, n, _)| n.is_none()).count();
            if hidden > 0 {
                names.push(format!(
                    "{hidden} node{} you may not see",
                    if hidden == 1 { "" } else { "s" }
                ));
            }
            names
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
        if !settings_same {
            details
                .push("its settings (materialization, partitioning, whole inputs) changed".into());
        }
        if details.is_empty() {
            details.push("the same columns; its rows or values may change".into());
        }
        let category = if breaking { "breaking" } else { "non-breaking" };
        (category.into(), details)
    }
}

impl RunService {
    /// The columns of `table` that node `d` reads, over all its inputs of it (None:
    /// every column): a SQL node's column references (see `columns_named`), a Python
    /// node's declared columns; a Python input with no columns declared, or with a
    /// filter (SQL over any of its columns), reads them all.
    pub(super) async fn columns_read(&self, d: &PlanNode, table: &str) -> Option<BTreeSet<String>> {
        let mut all = BTreeSet::new();
        for inp in d.inputs.iter().filter(|i| i.table == table) {
            let read = match (&d.lang, &inp.columns, &inp.filter) {
                (Lang::Sql { sql, .. }, _, _) => {
                    columns_named(&self.queries.parse_tree(sql).await.ok()?, table)
                }
                (Lang::Python { .. }, Some(cols), None) => Some(cols.iter().cloned().collect()),
                (Lang::Python { .. }, _, _) => None,
            };
            all.extend(read?);
        }
        Some(all)
    }
}

/// The names a parsed statement may read columns of `table` by: every part of every
/// column reference, and the columns of `USING` joins; None when it may read every
/// column (`*`, `COLUMNS(...)`, a natural or positional join, a positional reference, a
/// whole row by its table's name, or a statement that is no plain query).
fn columns_named(tree: &serde_json::Value, table: &str) -> Option<BTreeSet<String>> {
    struct Seen {
        names: BTreeSet<String>,
        /// References of one part: a column, or a whole row by its table's name.
        singles: BTreeSet<String>,
    }
    fn walk(v: &serde_json::Value, seen: &mut Seen, all: &mut bool) {
        match v {
            serde_json::Value::Object(m) => {
                match m.get("class").and_then(|c| c.as_str()) {
                    Some("COLUMN_REF") => {
                        let parts: Vec<&str> = m
                            .get("column_names")
                            .and_then(|n| n.as_array())
                            .into_iter()
                            .flatten()
                            .filter_map(|n| n.as_str())
                            .collect();
                        if let [one] = parts.as_slice() {
                            seen.singles.insert(one.to_string());
                        }
                        seen.names.extend(parts.iter().map(|p| p.to_string()));
                    }
                    Some("STAR" | "POSITIONAL_REFERENCE" | "COLUMNS") => *all = true,
                    _ => {}
                }
                if let Some(t) = m.get("type").and_then(|t| t.as_str())
                    && (t.contains("NATURAL") || t.contains("POSITIONAL") || t == "SHOW_REF")
                {
                    *all = true;
                }
                if let Some(ref_type) = m.get("ref_type").and_then(|t| t.as_str())
                    && (ref_type.contains("NATURAL") || ref_type.contains("POSITIONAL"))
                {
                    *all = true;
                }
                if let Some(cols) = m.get("using_columns").and_then(|c| c.as_array()) {
                    seen.names
                        .extend(cols.iter().filter_map(|c| c.as_str().map(String::from)));
                }
                if m.contains_key("pivots") || m.contains_key("unpivot_names") {
                    *all = true;
                }
                m.values().for_each(|v| walk(v, seen, all));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, seen, all)),
            _ => {}
        }
    }
    let statements = tree["statements"].as_array()?;
    if statements.iter().any(|s| {
        s["node"]["type"].as_str() != Some("SELECT_NODE")
            && s["node"]["type"].as_str() != Some("SET_OPERATION_NODE")
            && s["node"]["type"].as_str() != Some("CTE_NODE")
    }) {
        return None;
    }
    let mut seen = Seen {
        names: BTreeSet::new(),
        singles: BTreeSet::new(),
    };
    let mut all = false;
    walk(tree, &mut seen, &mut all);
    // A whole row named by its table (`SELECT o FROM t AS o`, `to_json(t)`): a
    // reference of one part that is the table's name or an alias of it.
    let short = table.rsplit('.').next().unwrap_or(table);
    let mut names = aliases_of(tree, short);
    names.push(short.to_string());
    if seen
        .singles
        .iter()
        .any(|n| names.iter().any(|a| a.eq_ignore_ascii_case(n)))
    {
        all = true;
    }
    (!all).then_some(seen.names)
}

/// The aliases the statement gives the table `short` (its base table references).
fn aliases_of(tree: &serde_json::Value, short: &str) -> Vec<String> {
    fn walk(v: &serde_json::Value, short: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("type").and_then(|t| t.as_str()) == Some("BASE_TABLE")
                    && m.get("table_name")
                        .and_then(|t| t.as_str())
                        .is_some_and(|t| t.eq_ignore_ascii_case(short))
                    && let Some(a) = m.get("alias").and_then(|a| a.as_str())
                    && !a.is_empty()
                {
                    out.push(a.to_string());
                }
                m.values().for_each(|v| walk(v, short, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, short, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(tree, short, &mut out);
    out
}
