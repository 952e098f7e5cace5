//! Projects and their plans: `lh_project.yml`, Python files with decorated models and
//! expectations, and `NAME.sql` models, read into a DAG without running user code. The
//! Python files are parsed (by `lh._plan`, Python's own `ast`), the SQL by DuckDB's
//! parser. Every mistake is reported with its file and line, before anything runs.

mod file;
pub use file::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use lh_catalog::Commit;
use lh_runner::{EnvSpec, Limits};
use serde::{Deserialize, Serialize};

use super::limits::Ceilings;
use super::partitions::{self, Partition, PartitionsDecl};
use crate::error::{Code, Error, Kind, Result};
use crate::query::QueryEngine;
use crate::tables::Tables;

/// A planned pipeline.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub project: ProjectFile,
    /// Parameter values of this run.
    pub params: BTreeMap<String, serde_json::Value>,
    pub nodes: Vec<PlanNode>,
    /// Node indexes in an order where every node comes after its inputs.
    pub order: Vec<usize>,
    /// The nodes `lh run --select` chose (empty: all), as given: a replay selects them
    /// again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub select: Vec<String>,
}

impl Plan {
    /// The names of the nodes `node` runs after: its edges in the run's DAG.
    pub fn dependency_names(&self, node: usize) -> Vec<String> {
        self.nodes[node]
            .depends_on()
            .into_iter()
            .filter_map(|d| self.nodes.get(d).map(PlanNode::display_name))
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Materialize {
    Replace,
    Append,
    /// Replace the partitions the output's rows fall in, keep the others.
    #[serde(rename = "overwrite_partitions")]
    OverwritePartitions,
}

impl Materialize {
    fn parse(text: &str) -> Option<Materialize> {
        match text {
            "replace" => Some(Materialize::Replace),
            "append" => Some(Materialize::Append),
            "overwrite_partitions" => Some(Materialize::OverwritePartitions),
            _ => None,
        }
    }
}

/// What a model may say about its materialization.
const MATERIALIZE_CHOICES: &str = "'replace', 'append' or 'overwrite_partitions'";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warn,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum NodeKind {
    Model { materialize: Materialize },
    Expectation { severity: Severity },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "language", rename_all = "lowercase")]
pub enum Lang {
    Python {
        function: String,
        env: EnvSpec,
        memory_bytes: Option<u64>,
        cpus_milli: Option<u32>,
        timeout_secs: u64,
        /// The secrets it declared (`@lh.python(secrets=[...])`), as environment variables.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        secrets: Vec<String>,
    },
    Sql {
        sql: String,
        /// The project's `resources.timeout` (a SQL file has no decorators).
        #[serde(default = "default_timeout_secs")]
        timeout_secs: u64,
    },
}

/// A function's timeout when neither it nor the project sets one.
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;

fn default_timeout_secs() -> u64 {
    DEFAULT_TIMEOUT_SECS
}

impl Lang {
    pub fn limits(&self) -> Limits {
        match self {
            Lang::Python {
                memory_bytes,
                cpus_milli,
                timeout_secs,
                ..
            } => Limits {
                memory_bytes: *memory_bytes,
                cpus_milli: *cpus_milli,
                timeout: Duration::from_secs(*timeout_secs),
                disk_bytes: None,
            },
            Lang::Sql { timeout_secs, .. } => Limits {
                timeout: Duration::from_secs(*timeout_secs),
                ..Limits::default()
            },
        }
    }
}

impl Plan {
    /// The expectations alone, reading every table from the ref (what a check runs on a
    /// merge's would-be result).
    pub fn expectations_only(mut self) -> Plan {
        self.nodes
            .retain(|n| matches!(n.kind, NodeKind::Expectation { .. }));
        for n in &mut self.nodes {
            for i in &mut n.inputs {
                i.producer = None;
            }
        }
        self.order = (0..self.nodes.len()).collect();
        self
    }

    /// The nodes named in `only` (each `function` or `file:function`, the file relative
    /// to the project's folder); all of them when it is empty. A name that matches no
    /// node is an error that lists what there is.
    pub fn select(mut self, only: &[String]) -> Result<Plan> {
        if only.is_empty() {
            return Ok(self);
        }
        select_nodes(&mut self.nodes, only)?;
        self.order = (0..self.nodes.len()).collect();
        Ok(self)
    }
}

/// The nodes `selectors` select (`lh run --select`: a node by its name or its table's
/// name without the namespace, `+` before for what it reads from, after for what reads
/// it, transitively), their inputs' producers renumbered; and each input whose producer
/// was left out (node, input, that producer's name): it is read from the branch. A
/// selector that names no node is an error that lists the nodes.
#[allow(clippy::type_complexity)]
fn select_graph(
    nodes: Vec<PlanNode>,
    selectors: &[String],
) -> Result<(Vec<PlanNode>, Vec<(usize, usize, String)>)> {
    let n = nodes.len();
    let deps: Vec<Vec<usize>> = nodes.iter().map(PlanNode::depends_on).collect();
    let mut readers = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &p in d {
            readers[p].push(i);
        }
    }
    let reach = |from: usize, edges: &[Vec<usize>], into: &mut Vec<bool>| {
        let mut stack = vec![from];
        while let Some(x) = stack.pop() {
            for &y in &edges[x] {
                if !into[y] {
                    into[y] = true;
                    stack.push(y);
                }
            }
        }
    };
    let mut keep = vec![false; n];
    for s in selectors {
        let up = s.starts_with('+');
        let down = s.len() > 1 && s.ends_with('+');
        let name = s.trim_start_matches('+').trim_end_matches('+');
        let found: Vec<usize> = (0..n)
            .filter(|&i| {
                let full = &nodes[i].name;
                full == name || full.rsplit_once('.').is_some_and(|(_, t)| t == name)
            })
            .collect();
        if found.is_empty() {
            let there: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
            return Err(Error::new(
                Kind::NotFound,
                Code::NodeNotFound,
                format!("--select '{s}': the project has no node '{name}'"),
            )
            .with_hint(format!("its nodes: {}", there.join(", "))));
        }
        for i in found {
            keep[i] = true;
            if up {
                reach(i, &deps, &mut keep);
            }
            if down {
                reach(i, &readers, &mut keep);
            }
        }
    }
    let new_index: Vec<Option<usize>> = keep
        .iter()
        .scan(0usize, |next, &k| {
            Some(k.then(|| {
                *next += 1;
                *next - 1
            }))
        })
        .collect();
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let mut kept = Vec::new();
    let mut read = Vec::new();
    for (i, mut node) in nodes.into_iter().enumerate() {
        if !keep[i] {
            continue;
        }
        let at = kept.len();
        for (j, input) in node.inputs.iter_mut().enumerate() {
            if let Some(p) = input.producer {
                input.producer = new_index[p];
                if input.producer.is_none() {
                    read.push((at, j, names[p].clone()));
                }
            }
        }
        node.after = node.after.iter().filter_map(|&a| new_index[a]).collect();
        kept.push(node);
    }
    Ok((kept, read))
}

/// Which nodes of a project a plan keeps: a check's expectations, or `lh run --select`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selection<'a> {
    /// A check's plan: only these expectations (empty: all of them).
    pub expectations: Option<&'a [String]>,
    /// The nodes to run (see [`Planner::select`]); empty: all.
    pub nodes: &'a [String],
}

/// Keeps the nodes named in `only` (see `Plan::select`), or says which it lacks.
fn select_nodes(nodes: &mut Vec<PlanNode>, only: &[String]) -> Result<()> {
    if only.is_empty() {
        return Ok(());
    }
    let matches = |n: &PlanNode, want: &str| match want.rsplit_once(':') {
        Some((file, name)) => {
            let file = file.trim_start_matches("./");
            n.name == name && n.file == file
        }
        None => n.name == want,
    };
    for want in only {
        if !nodes.iter().any(|n| matches(n, want)) {
            let there: Vec<String> = nodes
                .iter()
                .map(|n| format!("{}:{}", n.file, n.name))
                .collect();
            return Err(Error::new(
                Kind::NotFound,
                Code::NodeNotFound,
                format!("the project has no expectation '{want}'"),
            )
            .with_hint(match there.is_empty() {
                true => "the project has no expectations".to_string(),
                false => format!("its expectations: {}", there.join(", ")),
            }));
        }
    }
    nodes.retain(|n| only.iter().any(|w| matches(n, w)));
    Ok(())
}

/// A model or an expectation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanNode {
    /// A model's output table (`analytics.orders`); an expectation's function name.
    pub name: String,
    #[serde(flatten)]
    pub kind: NodeKind,
    #[serde(flatten)]
    pub lang: Lang,
    /// The file (relative to the project) and line.
    pub file: String,
    pub line: u32,
    pub inputs: Vec<PlanInput>,
    /// Argument (Python) or `$name` (SQL) to the parameter it takes.
    pub params: BTreeMap<String, String>,
    /// A model's partition spec (`day(order_date), bucket(4, id)`), for the table it
    /// creates or repartitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitioned_by: Option<String>,
    /// For an instance of a model that runs per partition: its partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<Partition>,
    /// Nodes it waits for besides its inputs' producers (every instance of a
    /// partitioned model it reads).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<usize>,
}

impl PlanNode {
    /// Whether the node runs once per partition in a project with `decl`.
    pub fn per_partition(&self, decl: Option<&PartitionsDecl>) -> bool {
        decl.is_some()
            && matches!(
                self.kind,
                NodeKind::Model {
                    materialize: Materialize::OverwritePartitions
                }
            )
    }

    pub fn output(&self) -> Option<&str> {
        match self.kind {
            NodeKind::Model { .. } => Some(&self.name),
            NodeKind::Expectation { .. } => None,
        }
    }

    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// Its name in the run: the table or expectation, with the partition of an
    /// instance (`analytics.orders[2026-11-03]`).
    pub fn display_name(&self) -> String {
        match &self.partition {
            Some(p) => partitions::instance_name(&self.name, p),
            None => self.name.clone(),
        }
    }

    /// The nodes it runs after: its inputs' producers and what it waits for.
    pub fn depends_on(&self) -> Vec<usize> {
        let mut d: Vec<usize> = self.inputs.iter().filter_map(|i| i.producer).collect();
        d.extend(self.after.iter().copied());
        d.sort();
        d.dedup();
        d
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanInput {
    /// The Python argument it is passed as (`None` for SQL).
    pub arg: Option<String>,
    pub table: String,
    pub columns: Option<Vec<String>>,
    pub filter: Option<String>,
    /// The node that makes it, when the project does.
    pub producer: Option<usize>,
    /// Referenced without a namespace in SQL: exposed under its bare name too.
    pub bare: bool,
    /// Read whole by an instance of a partitioned model (`lh.Model(..., whole=True)`,
    /// `-- lh.whole: TABLE`), not filtered to its partition.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole: bool,
    /// Where it is declared.
    pub line: u32,
    /// A SQL model's other readings of its `schema.table`, tried in order when `table`
    /// (the folded name) is neither made by the project nor readable: as written, then
    /// the schema as one level (as a query reads them: lh-query's `named`). Emptied once
    /// planned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub or_else: Vec<String>,
}

/// The largest Python or SQL file of a project (the server's planner parses each).
pub const MAX_SOURCE_FILE: u64 = 1 << 20;
/// The most nodes a project has (each is stored with every run and shown in its answers).
pub const MAX_NODES: usize = 2_000;
/// The most of the Python planner's answer read (its functions, their inputs).
const MAX_PLANNER_ANSWER: usize = 16 << 20;

/// A planner's output, each stream read to at most [`MAX_PLANNER_ANSWER`] bytes and one
/// more (a longer answer is refused; the planner is stopped with it).
async fn bounded_output(mut child: tokio::process::Child) -> std::io::Result<std::process::Output> {
    use tokio::io::AsyncReadExt;
    let limit = MAX_PLANNER_ANSWER as u64 + 1;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let out = child.stdout.take();
    let err = child.stderr.take();
    let killer = &mut child;
    let read_out = async {
        if let Some(o) = out {
            o.take(limit).read_to_end(&mut stdout).await?;
        }
        // Past the bound the planner is stopped (it would wait to write the rest).
        if stdout.len() > MAX_PLANNER_ANSWER {
            let _ = killer.start_kill();
        }
        Ok::<_, std::io::Error>(())
    };
    let read_err = async {
        if let Some(e) = err {
            // Its end is read and dropped: the planner never waits to write.
            let mut e = e;
            let mut sink = [0u8; 8192];
            loop {
                let n = e.read(&mut sink).await?;
                if n == 0 {
                    break;
                }
                let room = (64usize << 10).saturating_sub(stderr.len());
                stderr.extend_from_slice(&sink[..n.min(room)]);
            }
        }
        Ok::<_, std::io::Error>(())
    };
    let (a, b) = tokio::join!(read_out, read_err);
    a?;
    b?;
    let status = child.wait().await?;
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

/// The Python planner's address space and time.
const PLANNER_MEMORY: u64 = 2 << 30;
const PLANNER_TIME: std::time::Duration = std::time::Duration::from_secs(60);
/// Planners running at once (each may take [`PLANNER_MEMORY`]); a plan waits for one at
/// most [`PLANNER_TIME`], then is refused as busy.
const MAX_PLANNERS: usize = 2;
static PLANNERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_PLANNERS);
/// The problems an invalid project's answer lists (the rest are counted).
pub const MAX_PROBLEMS_SHOWN: usize = 100;

/// The longest name of a node (an expectation's function, a model's table).
pub const MAX_NODE_NAME: usize = 255;

/// What planning needs.
pub struct Planner<'a> {
    pub tables: &'a Tables,
    pub queries: &'a QueryEngine,
    /// A Python that runs `lh._plan` (parsing only).
    pub python: &'a Path,
    /// The folder holding the `lh` package.
    pub harness: &'a Path,
    /// What no function may exceed.
    pub ceilings: &'a Ceilings,
    /// A check's plan: only these expectations (see `Plan::select`; empty: all of
    /// them), every input read from the commit, and only their inputs need to exist.
    pub expectations: Option<&'a [String]>,
    /// `lh run --select`: the nodes to run (`orders`, `+orders`, `orders+`, `+orders+`:
    /// with what it reads from, with what reads it, both); empty: all. An input made by
    /// a node left out is read from the branch, where it must be.
    pub select: &'a [String],
    /// The tables the one who plans may read: any other input is "neither a table nor
    /// made by the project", as a table that is not there (its existence is not told).
    pub readable: &'a (dyn Fn(&str) -> bool + Sync),
}

fn loc(file: &str, line: u32, message: impl std::fmt::Display) -> String {
    if line > 0 {
        format!("{file}:{line}: {message}")
    } else {
        format!("{file}: {message}")
    }
}

fn invalid(problems: Vec<String>) -> Error {
    let n = problems.len();
    let mut msg = format!(
        "the project is not valid ({n} problem{})",
        if n == 1 { "" } else { "s" }
    );
    // The first problems are what a user fixes first; a file of 100,000 broken
    // functions does not make an answer of 100,000 lines.
    for p in problems.iter().take(MAX_PROBLEMS_SHOWN) {
        msg.push_str("\n  ");
        msg.push_str(p);
    }
    if n > MAX_PROBLEMS_SHOWN {
        msg.push_str(&format!("\n  ... and {} more", n - MAX_PROBLEMS_SHOWN));
    }
    Error::bad_request(Code::InvalidProject, msg)
}

#[derive(Debug, Deserialize)]
struct PyPlan {
    functions: Vec<PyFunction>,
    errors: Vec<PyError>,
}

#[derive(Debug, Deserialize)]
struct PyError {
    file: String,
    line: u32,
    message: String,
}

#[derive(Debug, Deserialize)]
struct PyFunction {
    file: String,
    line: u32,
    function: String,
    kind: String,
    decorators: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
    inputs: Vec<PyInput>,
}

#[derive(Debug, Deserialize)]
struct PyInput {
    arg: String,
    kind: String,
    name: String,
    #[serde(default)]
    columns: Option<Vec<String>>,
    #[serde(default)]
    filter: Option<String>,
    /// Read whole by a partitioned model, not filtered to its partition.
    #[serde(default)]
    whole: bool,
    line: u32,
}

impl Planner<'_> {
    /// Plans the project at `root` against the tables of `commit` (where inputs the
    /// project does not make must exist).
    /// Plans the project in `root` against `commit`.
    pub async fn plan(
        &self,
        root: &Path,
        commit: &Commit,
        at: &str,
        given: &BTreeMap<String, String>,
    ) -> Result<Plan> {
        // Parsing is CPU work on the client's text: off the async threads.
        let project = {
            let root = root.to_path_buf();
            tokio::task::spawn_blocking(move || read_project_file(&root))
                .await
                .map_err(|e| Error::internal(format!("reading the project file failed: {e}")))??
        };
        let params = resolve_params(&project, given)?;
        let (py_files, sql_files) = project_files(root)?;
        // The planner parses every Python file on the server's host: each is bounded, and
        // so is the planner's memory and time (a 2 MB file took it 1.4 GB).
        let too_large: Vec<String> = py_files
            .iter()
            .chain(&sql_files)
            .filter_map(|f| {
                let len = std::fs::metadata(root.join(f)).ok()?.len();
                (len > MAX_SOURCE_FILE).then(|| {
                    format!(
                        "{f}: {} KiB, past the {} KiB a project's Python or SQL file may hold",
                        len >> 10,
                        MAX_SOURCE_FILE >> 10
                    )
                })
            })
            .collect();
        if !too_large.is_empty() {
            return Err(invalid(too_large));
        }
        let mut problems = Vec::new();
        let mut nodes: Vec<PlanNode> = Vec::new();

        // Python: parsed by lh._plan, never imported.
        if !py_files.is_empty() {
            let _planning = tokio::time::timeout(PLANNER_TIME, PLANNERS.acquire())
                .await
                .map_err(|_| {
                    Error::new(
                        Kind::Unavailable,
                        Code::PlannersBusy,
                        format!(
                            "the server is planning {MAX_PLANNERS} other projects and none \
                             finished within {} s",
                            PLANNER_TIME.as_secs()
                        ),
                    )
                    .with_hint("try again in a minute")
                })?
                .map_err(|_| Error::internal("the planners are closed"))?;
            let planner = tokio::process::Command::new(self.python)
                .args(["-I", "-c", "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]),) * 2); sys.path.insert(0, sys.argv[2]); sys.argv = sys.argv[2:]; import lh._plan as p; p.main(sys.argv[1:])"])
                .arg(PLANNER_MEMORY.to_string())
                .arg(self.harness)
                .args(&py_files)
                .current_dir(root)
                .kill_on_drop(true)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| Error::internal(format!("cannot run the Python planner: {e}")))?;
            let out = tokio::time::timeout(PLANNER_TIME, bounded_output(planner))
                .await
                .map_err(|_| {
                    Error::bad_request(
                        Code::InvalidProject,
                        format!(
                            "planning the project's Python files took more than {} s",
                            PLANNER_TIME.as_secs()
                        ),
                    )
                })?
                .map_err(|e| Error::internal(format!("cannot run the Python planner: {e}")))?;
            if out.stdout.len() > MAX_PLANNER_ANSWER {
                return Err(Error::bad_request(
                    Code::InvalidProject,
                    format!(
                        "the project's Python files declare more than the planner answers for \
                         ({} MiB of functions): a project holds at most {MAX_NODES} nodes",
                        MAX_PLANNER_ANSWER >> 20
                    ),
                ));
            }
            if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("MemoryError")
            {
                return Err(Error::bad_request(
                    Code::InvalidProject,
                    format!(
                        "planning the project's Python files took more than {} MiB of memory",
                        PLANNER_MEMORY >> 20
                    ),
                ));
            }
            if !out.status.success() {
                return Err(Error::internal(format!(
                    "the Python planner failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
            // Literals nest as deep as Python's own limit lets them (about 1,000): past
            // serde_json's 128, read on the server's deep stacks.
            let mut de = serde_json::Deserializer::from_slice(&out.stdout);
            de.disable_recursion_limit();
            let plan: PyPlan = serde::Deserialize::deserialize(&mut de).map_err(|e| {
                Error::internal(format!("cannot read the Python planner's answer: {e}"))
            })?;
            for e in plan.errors {
                problems.push(loc(&e.file, e.line, e.message));
            }
            for f in plan.functions {
                match self.python_node(&project, f) {
                    Ok(n) => nodes.push(n),
                    Err(p) => problems.extend(p),
                }
            }
        }

        // SQL: one SELECT per file, its output named after the file.
        for file in &sql_files {
            match self.sql_node(&project, root, file).await {
                Ok(n) => nodes.push(n),
                Err(p) => problems.extend(p),
            }
        }

        // Names are stored with each run and shown in columns: bounded. (A table's name
        // is bounded by the catalog's rules; an expectation's is a function's.)
        nodes.retain(|n| {
            let fits = n.name.len() <= MAX_NODE_NAME;
            if !fits {
                problems.push(format!(
                    "{}: a node's name is at most {MAX_NODE_NAME} bytes, not {}",
                    n.location(),
                    n.name.len()
                ));
            }
            fits
        });
        // One writer per table, one name per expectation.
        let mut owners: HashMap<String, Vec<String>> = HashMap::new();
        for n in &nodes {
            let key = match n.kind {
                NodeKind::Model { .. } => format!("table {}", n.name),
                NodeKind::Expectation { .. } => format!("expectation {}", n.name),
            };
            owners.entry(key).or_default().push(n.location());
        }
        let mut dupes: Vec<(&String, &Vec<String>)> =
            owners.iter().filter(|(_, l)| l.len() > 1).collect();
        dupes.sort();
        for (what, locations) in dupes {
            problems.push(format!(
                "{what} is defined more than once: {}",
                locations.join(", ")
            ));
        }
        if nodes.is_empty() && problems.is_empty() {
            problems.push("the project has no model and no expectation".into());
        }
        if nodes.len() > MAX_NODES {
            problems.push(format!(
                "the project has {} nodes: a project holds at most {MAX_NODES}",
                nodes.len()
            ));
        }

        // A check's plan: its expectations (a project that does not parse says so first).
        if let Some(only) = self.expectations
            && problems.is_empty()
        {
            nodes.retain(|n| matches!(n.kind, NodeKind::Expectation { .. }));
            select_nodes(&mut nodes, only)?;
        }

        // Parameters are declared; inputs exist or are made by the project.
        let producers: HashMap<String, usize> = nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.output().map(|o| (o.to_string(), i)))
            .collect();
        #[allow(clippy::needless_range_loop)] // the inputs' producers are set in place
        for i in 0..nodes.len() {
            for p in nodes[i].params.values() {
                if partitions::PARAMS.contains(&p.as_str()) {
                    if !nodes[i].per_partition(project.partitions.as_ref()) {
                        problems.push(loc(&nodes[i].file, nodes[i].line, format!("'{p}' is given only to a model that runs per partition (materialize 'overwrite_partitions' in a project that declares partitions: in {PROJECT_FILE})")));
                    }
                } else if !project.parameters.contains_key(p) {
                    problems.push(loc(&nodes[i].file, nodes[i].line, format!("unknown parameter '{p}' (declare it under parameters: in {PROJECT_FILE})")));
                }
            }
            for j in 0..nodes[i].inputs.len() {
                // A SQL model's `"FIN".t` is fin.t, or else "FIN".t as written; its
                // `"a.b".t` the nested a.b's t, or else the table t of the one namespace
                // `a.b` (as in queries).
                let or_else = std::mem::take(&mut nodes[i].inputs[j].or_else);
                if !or_else.is_empty()
                    && !producers.contains_key(&nodes[i].inputs[j].table)
                    && !self.visible(commit, &nodes[i].inputs[j].table).await?
                {
                    for other in or_else {
                        if producers.contains_key(&other) || self.visible(commit, &other).await? {
                            nodes[i].inputs[j].table = other;
                            break;
                        }
                    }
                }
                let table = nodes[i].inputs[j].table.clone();
                let line = nodes[i].inputs[j].line.max(nodes[i].line);
                if let Err(e) = lh_catalog::names::validate_table_name(&table) {
                    problems.push(loc(&nodes[i].file, line, e));
                    continue;
                }
                match producers.get(&table) {
                    Some(&p) if p == i => problems.push(loc(
                        &nodes[i].file,
                        nodes[i].line,
                        format!("{} reads its own output", nodes[i].name),
                    )),
                    Some(&p) => nodes[i].inputs[j].producer = Some(p),
                    None => {
                        if !self.visible(commit, &table).await? {
                            problems.push(loc(
                                &nodes[i].file,
                                line,
                                format!("input '{table}' is neither a table on '{at}' nor made by the project"),
                            ));
                        }
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Err(invalid(problems));
        }
        if !self.select.is_empty() {
            let (kept, read) = select_graph(nodes, self.select)?;
            nodes = kept;
            for (i, j, by) in read {
                let table = nodes[i].inputs[j].table.clone();
                if !self.visible(commit, &table).await? {
                    problems.push(loc(
                        &nodes[i].file,
                        nodes[i].inputs[j].line.max(nodes[i].line),
                        format!(
                            "input '{table}' is made by {by}, which is not selected, and is not a \
                             table on '{at}' yet: select it too (--select +{})",
                            nodes[i].name
                        ),
                    ));
                }
            }
            if !problems.is_empty() {
                return Err(invalid(problems));
            }
        }
        let order = topological(&nodes)?;
        Ok(Plan {
            project,
            params,
            nodes,
            order,
            select: self.select.to_vec(),
        })
    }

    /// Whether `table` is a table at `commit` that the one who plans may read (one it may
    /// not is planned as one that is not there).
    async fn visible(&self, commit: &Commit, table: &str) -> Result<bool> {
        Ok((self.readable)(table) && self.tables.catalog.table_in(commit, table).await?.is_some())
    }

    fn python_node(
        &self,
        project: &ProjectFile,
        f: PyFunction,
    ) -> std::result::Result<PlanNode, Vec<String>> {
        let mut problems = Vec::new();
        let str_arg = |deco: &str, key: &str| -> Option<String> {
            f.decorators
                .get(deco)
                .and_then(|d| d.get(key))
                .and_then(|v| v.as_str().map(String::from))
        };
        let kind = if f.kind == "model" {
            let materialize = match str_arg("model", "materialize").as_deref() {
                None => Materialize::Replace,
                Some(text) => Materialize::parse(text).unwrap_or_else(|| {
                    problems.push(loc(
                        &f.file,
                        f.line,
                        format!("@lh.model(materialize='{text}'): use {MATERIALIZE_CHOICES}"),
                    ));
                    Materialize::Replace
                }),
            };
            NodeKind::Model { materialize }
        } else {
            let severity = match str_arg("expectation", "severity").as_deref() {
                None | Some("error") => Severity::Error,
                Some("warn") => Severity::Warn,
                Some(other) => {
                    problems.push(loc(
                        &f.file,
                        f.line,
                        format!("@lh.expectation(severity='{other}'): use 'error' or 'warn'"),
                    ));
                    Severity::Error
                }
            };
            NodeKind::Expectation { severity }
        };
        let name = match kind {
            NodeKind::Model { .. } => {
                let ns = str_arg("model", "namespace").unwrap_or_else(|| project.namespace.clone());
                let table = str_arg("model", "name").unwrap_or_else(|| f.function.clone());
                let full = format!("{ns}.{table}");
                if let Err(e) = lh_catalog::names::validate_table_name(&full) {
                    problems.push(loc(&f.file, f.line, e));
                }
                full
            }
            NodeKind::Expectation { .. } => f.function.clone(),
        };
        // The environment: the project's Python and packages, and the function's own.
        let python = f
            .decorators
            .get("python")
            .and_then(|d| d.get("version"))
            .and_then(|v| {
                v.as_str()
                    .map(String::from)
                    .or_else(|| v.as_f64().map(|x| x.to_string()))
            })
            .unwrap_or_else(|| project.python.clone());
        let mut packages = project.packages.clone();
        if let Some(extra) = f.decorators.get("python").and_then(|d| d.get("packages")) {
            match extra.as_object() {
                Some(map) => {
                    for (k, v) in map {
                        match v.as_str() {
                            Some(v) => {
                                packages.insert(k.clone(), v.to_string());
                            }
                            None => problems.push(loc(&f.file, f.line, format!("@lh.python(packages=...): the version of '{k}' must be a string"))),
                        }
                    }
                }
                None => problems.push(loc(
                    &f.file,
                    f.line,
                    "@lh.python(packages=...) must be a dict of name to version",
                )),
            }
        }
        let mut secrets = Vec::new();
        if let Some(list) = f.decorators.get("python").and_then(|d| d.get("secrets")) {
            match list.as_array() {
                Some(items) => {
                    for item in items {
                        match item.as_str().map(crate::auth::secrets::check_name) {
                            Some(Ok(())) => {
                                let n = item.as_str().unwrap_or_default().to_string();
                                if !secrets.contains(&n) {
                                    secrets.push(n);
                                }
                            }
                            Some(Err(e)) => problems.push(loc(
                                &f.file,
                                f.line,
                                format!("@lh.python(secrets=...): {e}"),
                            )),
                            None => problems.push(loc(
                                &f.file,
                                f.line,
                                "@lh.python(secrets=...) lists names (strings)",
                            )),
                        }
                    }
                }
                None if list.is_null() => {}
                None => problems.push(loc(
                    &f.file,
                    f.line,
                    "@lh.python(secrets=...) must be a list of names",
                )),
            }
        }
        let env = EnvSpec {
            python,
            packages,
            source_builds: project.source_builds,
        };
        if let Err(e) = env.requirements() {
            problems.push(loc(&f.file, f.line, e));
        }
        // Limits: the project's defaults, then the function's.
        let res = project.resources.clone().unwrap_or_default();
        let deco = f.decorators.get("resources");
        let get = |k: &str| deco.and_then(|d| d.get(k)).cloned();
        let memory = get("memory")
            .and_then(|v| v.as_str().map(String::from))
            .or(res.memory);
        let timeout = get("timeout")
            .and_then(|v| v.as_str().map(String::from))
            .or(res.timeout);
        let cpus = match get("cpus") {
            Some(v) => match v.as_f64() {
                Some(c) => Some(c),
                None => {
                    problems.push(loc(&f.file, f.line, format!("cpus {v} is not a number")));
                    None
                }
            },
            None => res.cpus,
        };
        let ceilings = self.ceilings;
        let memory_bytes = match ceilings.memory(memory.as_deref()) {
            Ok(b) => Some(b),
            Err(e) => {
                problems.push(loc(&f.file, f.line, e));
                None
            }
        };
        let default_timeout = Duration::from_secs(DEFAULT_TIMEOUT_SECS);
        let timeout_secs = match ceilings.timeout(timeout.as_deref(), default_timeout) {
            Ok(d) => d.as_secs().max(1),
            Err(e) => {
                problems.push(loc(&f.file, f.line, e));
                DEFAULT_TIMEOUT_SECS
            }
        };
        let cpus_milli = match ceilings.cpus(cpus) {
            Ok(c) => c,
            Err(e) => {
                problems.push(loc(&f.file, f.line, e));
                None
            }
        };
        let mut inputs = Vec::new();
        let mut params = BTreeMap::new();
        for i in f.inputs {
            if let Some(Err(e)) = i.filter.as_deref().map(one_expression) {
                problems.push(loc(
                    &f.file,
                    i.line.max(f.line),
                    format!("the filter of '{}': {e}", i.name),
                ));
            }
            match i.kind.as_str() {
                "model" => {
                    let table = if i.name.contains('.') {
                        i.name.clone()
                    } else {
                        format!("{}.{}", project.namespace, i.name)
                    };
                    inputs.push(PlanInput {
                        arg: Some(i.arg),
                        table,
                        columns: i.columns,
                        filter: i.filter,
                        producer: None,
                        bare: false,
                        whole: i.whole,
                        line: i.line,
                        or_else: Vec::new(),
                    });
                }
                _ => {
                    params.insert(i.arg, i.name);
                }
            }
        }
        let partitioned_by = match f
            .decorators
            .get("model")
            .and_then(|d| d.get("partitioned_by"))
        {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => match partition_text(v) {
                Ok(text) => Some(text),
                Err(e) => {
                    problems.push(loc(
                        &f.file,
                        f.line,
                        format!("@lh.model(partitioned_by=...): {e}"),
                    ));
                    None
                }
            },
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(PlanNode {
            partitioned_by,
            partition: None,
            after: Vec::new(),
            name,
            kind,
            lang: Lang::Python {
                function: f.function,
                env,
                memory_bytes,
                cpus_milli,
                timeout_secs,
                secrets,
            },
            file: f.file,
            line: f.line,
            inputs,
            params,
        })
    }

    async fn sql_node(
        &self,
        project: &ProjectFile,
        root: &Path,
        file: &str,
    ) -> std::result::Result<PlanNode, Vec<String>> {
        let text = std::fs::read_to_string(root.join(file))
            .map_err(|e| vec![loc(file, 0, format!("cannot read: {e}"))])?;
        let stem = Path::new(file)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let name = format!("{}.{stem}", project.namespace);
        if !is_identifier(&stem) {
            return Err(vec![loc(
                file,
                0,
                format!(
                    "a SQL model's file name is its table: '{stem}' must be a lowercase identifier"
                ),
            )]);
        }
        // Limits: the project's timeout (the DuckDB memory limit is the server's).
        let timeout = project
            .resources
            .as_ref()
            .and_then(|r| r.timeout.as_deref());
        let timeout_secs = match self
            .ceilings
            .timeout(timeout, Duration::from_secs(DEFAULT_TIMEOUT_SECS))
        {
            Ok(d) => d.as_secs().max(1),
            Err(e) => return Err(vec![loc(PROJECT_FILE, 0, e)]),
        };
        let analysis = self.queries.analyze(&text).await.map_err(|e| {
            // A syntax error says its line (and shows it, with a caret).
            let line = crate::query::sql::error_line(&e.message).map_or(1, |l| l as u32);
            let msg = match e.code {
                Code::ReadOnly => "a SQL model is one SELECT".to_string(),
                _ => e.message.trim_start_matches("SQL error: ").to_string(),
            };
            vec![loc(file, line, msg)]
        })?;
        let settings = sql_settings(file, &text)?;
        let whole: Vec<String> = settings
            .whole
            .iter()
            .map(|t| match t.contains('.') {
                true => t.clone(),
                false => format!("{}.{t}", project.namespace),
            })
            .collect();
        let mut inputs = Vec::new();
        for parts in &analysis.tables {
            let (table, bare) = match parts.as_slice() {
                [one] if analysis.ctes.iter().any(|c| c.eq_ignore_ascii_case(one)) => continue,
                // In the project's namespace, spelled as names are (`"FIN".orders`).
                [one] => (
                    format!(
                        "{}.{}",
                        project.namespace,
                        lh_catalog::names::quote_level(&lh_catalog::names::fold(one))
                    ),
                    true,
                ),
                [schema, table] => (lh_catalog::names::from_sql_folded(schema, table), false),
                _ => (parts.join("."), false),
            };
            let or_else = match parts.as_slice() {
                [schema, t] => {
                    let readings = [
                        lh_catalog::names::from_sql(schema, t),
                        lh_catalog::names::join_levels(&[schema, t]),
                    ];
                    let mut or_else: Vec<String> = Vec::new();
                    for r in readings {
                        if r != table
                            && !or_else.contains(&r)
                            && lh_catalog::names::validate_table_name(&r).is_ok()
                        {
                            or_else.push(r);
                        }
                    }
                    or_else
                }
                _ => Vec::new(),
            };
            if parts.len() > 2 {
                return Err(vec![loc(
                    file,
                    1,
                    format!(
                        "'{}' names a catalog; lh tables are namespace.table",
                        parts.join(".")
                    ),
                )]);
            }
            inputs.push(PlanInput {
                arg: None,
                whole: whole.contains(&table),
                table,
                columns: None,
                filter: None,
                producer: None,
                bare,
                line: 1,
                or_else,
            });
        }
        // A bare name is the project's table, made a view in DuckDB's `main` (as a run
        // makes it): the table `main.t` would be that view too (the fortieth review).
        if project.namespace != "main" {
            let in_main = |t: &str| {
                analysis.tables.iter().any(|p| {
                    matches!(p.as_slice(), [s, n] if s.eq_ignore_ascii_case("main") && n.eq_ignore_ascii_case(t))
                })
            };
            if let Some(i) = inputs.iter().find(|i| {
                i.bare
                    && lh_catalog::names::split_table(&i.table)
                        .and_then(|(_, t)| lh_catalog::names::levels(t).ok())
                        .is_some_and(|l| l.len() == 1 && in_main(&l[0]))
            }) {
                let bare = lh_catalog::names::split_table(&i.table).map_or("", |(_, t)| t);
                return Err(vec![loc(
                    file,
                    1,
                    format!(
                        "the query reads '{bare}', the project's {}, and main.{bare}, another \
                         table, but in a model both are DuckDB's main.{bare}: write {} for \
                         the project's",
                        i.table, i.table
                    ),
                )]);
            }
        }
        let params = analysis
            .params
            .iter()
            .map(|p| (p.clone(), p.clone()))
            .collect();
        if let Some(t) = whole
            .iter()
            .find(|t| !inputs.iter().any(|i: &PlanInput| &i.table == *t))
        {
            return Err(vec![loc(
                file,
                1,
                format!("lh.whole names '{t}', which the query does not read"),
            )]);
        }
        let SqlSettings {
            materialize,
            partitioned_by,
            ..
        } = settings;
        Ok(PlanNode {
            partitioned_by,
            partition: None,
            after: Vec::new(),
            name,
            kind: NodeKind::Model { materialize },
            lang: Lang::Sql {
                sql: text,
                timeout_secs,
            },
            file: file.to_string(),
            line: 1,
            inputs,
            params,
        })
    }
}

/// An order where every node comes after the nodes it reads from; a cycle is an error
/// that names it.
pub(super) fn topological(nodes: &[PlanNode]) -> Result<Vec<usize>> {
    let n = nodes.len();
    let deps: Vec<Vec<usize>> = nodes.iter().map(PlanNode::depends_on).collect();
    let mut indegree: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut ready: BTreeSet<(String, usize)> = (0..n)
        .filter(|&i| indegree[i] == 0)
        .map(|i| (nodes[i].location(), i))
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(first) = ready.iter().next().cloned() {
        ready.remove(&first);
        let i = first.1;
        order.push(i);
        for (j, d) in deps.iter().enumerate() {
            if d.contains(&i) {
                indegree[j] -= 1;
                if indegree[j] == 0 {
                    ready.insert((nodes[j].location(), j));
                }
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk back along inputs from a node that never became ready until a node repeats.
    let stuck: BTreeSet<usize> = (0..n).filter(|i| !order.contains(i)).collect();
    let mut path = vec![*stuck.iter().next().expect("a stuck node")];
    loop {
        let last = *path.last().expect("non-empty");
        let next = deps[last]
            .iter()
            .copied()
            .find(|d| stuck.contains(d))
            .expect("a stuck node has a stuck input");
        if let Some(pos) = path.iter().position(|&p| p == next) {
            let mut cycle: Vec<usize> = path[pos..].to_vec();
            cycle.reverse();
            cycle.push(cycle[0]);
            let names: Vec<String> = cycle.iter().map(|&i| nodes[i].name.clone()).collect();
            let places: Vec<String> = cycle[..cycle.len() - 1]
                .iter()
                .map(|&i| format!("{} ({})", nodes[i].name, nodes[i].location()))
                .collect();
            return Err(invalid(vec![format!(
                "cycle: {} [{}]",
                names.join(" -> "),
                places.join(", ")
            )]));
        }
        path.push(next);
    }
}

#[cfg(test)]
mod tests {
    use super::one_expression;

    #[test]
    fn an_input_filter_is_one_expression() {
        for ok in [
            "amount > 0",
            "(a = 1 OR b = 2) AND c IN (1, 2)",
            "name = ')' OR note = '--x;'",
            "\"we(ird\" > 0",
            "a - -1 > 0",
        ] {
            assert!(one_expression(ok).is_ok(), "{ok}");
        }
        for bad in [
            "x > 0) OR (true",
            "x > 0 --",
            "x > 0; DROP TABLE t",
            "(x > 0",
            "x = 'open",
            "x > 0 /* c */",
            ") UNION SELECT * FROM t WHERE (true",
        ] {
            assert!(one_expression(bad).is_err(), "{bad}");
        }
    }
}
