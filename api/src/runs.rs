//! Pipeline runs: the request, the plan, the record of a run and its nodes, lineage.

#[allow(unused_imports)]
use super::*;

/// Start a pipeline run (`lh run`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunRequest {
    /// An upload of the project folder as a tar archive.
    pub upload: String,
    /// The branch to publish to.
    #[serde(rename = "ref")]
    pub reference: String,
    /// `--param` values, as given (parsed by the declared types).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Run every node, even when an earlier run made the same output.
    #[serde(default)]
    pub no_cache: bool,
    /// Failed warning expectations also stop the run from publishing.
    #[serde(default)]
    pub strict: bool,
    /// The partitions to run, for a project whose models run per partition: one
    /// (`2026-11-03`), a range (`2026-11-01..2026-11-30`, both included) or a list
    /// (`eu,us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<String>,
    /// `lh run --select`: only these nodes run (`orders`, `+orders` with what it reads
    /// from, `orders+` with what reads it); an input made by a node left out is read
    /// from the branch. Empty: every node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub select: Vec<String>,
    /// A plan (`POST /api/v1/runs/plan`) also says, for each node, whether it would
    /// run or reuse an earlier output and why, and for each SQL model whose query
    /// changed since the project's last run, what kind of change it is (`lh run --plan`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changes: bool,
    /// A check instead of a run (`lh bisect --expectation`): only the project's
    /// expectations run, reading every table as it is at a commit of the branch;
    /// nothing is written or published. The run is recorded like any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<RunCheck>,
}

/// What a check run reads and runs (`RunRequest.check`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RunCheck {
    /// The commit whose tables the expectations read: a ref expression on the run's
    /// branch (`main`, `main@<hash>`, `main@<time>`).
    pub at: String,
    /// The expectations to run, each `function` or `file:function` (the file relative
    /// to the project's folder); empty: every expectation of the project.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expectations: Vec<String>,
}

/// A failed expectation's error when it ran and answered false (any other error is
/// the expectation failing to run: an exception, a missing table).
pub const EXPECTATION_NOT_MET: &str = "the expectation is not met";

/// What a run would do with a node, and what changed in it (`lh run --plan`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlannedChange {
    /// `run`, `reuse`, or `reuse?` (a Python model whose key matches but whose
    /// environment's lock is known only once it is resolved).
    pub action: String,
    /// Why: what differs from the key of the table's newest memoized output.
    pub reasons: Vec<String>,
    /// A SQL model whose query changed since the project's last run: `breaking` (a
    /// column removed or retyped that a downstream node reads), `non-breaking`, or
    /// `metadata-only` (the same parsed query: comments, layout); `unknown` when its
    /// output's columns cannot be had (the reason in `details`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// What the category rests on: columns added, removed, retyped, and who reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// The run whose code the query was compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared_with: Option<String>,
}

/// Column-level lineage of a table or column (`GET /api/v1/lineage`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LineageResponse {
    #[serde(rename = "ref")]
    pub reference: String,
    pub table: String,
    /// The column; absent: every column of the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// The steps that lead to it, nearest first.
    pub upstream: Vec<LineageEdge>,
    /// The steps that lead from it, nearest first.
    pub downstream: Vec<LineageEdge>,
    /// Models whose lineage could not be read, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unresolved: Vec<String>,
}

/// A model makes the column `to` (`namespace.table.column`) from the column `from`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LineageEdge {
    pub from: String,
    pub to: String,
    pub node: String,
    pub project: String,
}

/// Replay a run (`lh rerun`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RerunRequest {
    /// Reuse the outputs of the nodes that succeeded.
    #[serde(default)]
    pub from_failed: bool,
    /// New code (an upload of the project folder); the run's own code when absent.
    #[serde(default)]
    pub upload: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_final(self) -> bool {
        self != RunStatus::Running
    }
}

/// A node's state. Expectations end `passed`, `failed` or `warned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    Waiting,
    Running,
    Cached,
    Done,
    Passed,
    Warned,
    Failed,
    Skipped,
    /// Stopped while it ran, by a cancel of its run.
    Cancelled,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Waiting => "waiting",
            NodeStatus::Running => "running",
            NodeStatus::Cached => "cached",
            NodeStatus::Done => "done",
            NodeStatus::Passed => "passed",
            NodeStatus::Warned => "warned",
            NodeStatus::Failed => "failed",
            NodeStatus::Skipped => "skipped",
            NodeStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<NodeStatus> {
        Some(match s {
            "waiting" => NodeStatus::Waiting,
            "running" => NodeStatus::Running,
            "cached" => NodeStatus::Cached,
            "done" => NodeStatus::Done,
            "passed" => NodeStatus::Passed,
            "warned" => NodeStatus::Warned,
            "failed" => NodeStatus::Failed,
            "skipped" => NodeStatus::Skipped,
            "cancelled" => NodeStatus::Cancelled,
            _ => return None,
        })
    }

    pub fn is_final(self) -> bool {
        !matches!(self, NodeStatus::Waiting | NodeStatus::Running)
    }
}

/// One node of a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunNode {
    pub name: String,
    /// `model` or `expectation`.
    pub kind: String,
    /// `python` or `sql`.
    pub language: String,
    pub status: NodeStatus,
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub finished_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub rows: Option<u64>,
    /// The node's output came from an earlier run (memoization or `--from-failed`).
    #[serde(default)]
    pub cached: bool,
    /// Why a model's output was or was not reused: the run it came from, or the parts of
    /// its key (code, environment, parameters, inputs) that changed since the last time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub traceback: Option<String>,
    /// What a failed expectation said.
    #[serde(default)]
    pub detail: Option<String>,
    /// The tables it reads.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// The nodes it runs after (the producers of its inputs, and what it waits for):
    /// the edges of the run's DAG.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// For a model: the snapshot it made (or reused).
    #[serde(default)]
    pub output: Option<TablePointer>,
    /// The node's file and line.
    pub location: String,
}

/// A run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunInfo {
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
    /// A check's run: only expectations, on the tables at `input_commit`, publishing
    /// nothing (a protected branch's merge check, `lh bisect --expectation`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub check: bool,
    pub params: BTreeMap<String, serde_json::Value>,
    pub status: RunStatus,
    #[serde(default)]
    pub error: Option<String>,
    /// The merge commit that published it.
    #[serde(default)]
    pub merge_commit: Option<String>,
    pub no_cache: bool,
    pub strict: bool,
    #[serde(default)]
    pub rerun_of: Option<String>,
    pub created_at: DateTime<Utc>,
    #[serde(default)]
    pub finished_at: Option<DateTime<Utc>>,
    /// Python environment key to its lock (`uv pip freeze`).
    #[serde(default)]
    pub environments: BTreeMap<String, String>,
    pub nodes: Vec<RunNode>,
    /// Whether nodes are left out of `nodes` because they touch tables the caller may
    /// not read (how many is not told; nor are the run's parameters then).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nodes_hidden: bool,
    /// For a partitioned run: each partition and the state of its nodes (`failed` when
    /// one failed, `running`, `waiting`, `skipped`, `cached` when every one was reused,
    /// `done`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<RunPartition>,
}

/// A partition of a partitioned run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunPartition {
    pub partition: String,
    pub status: NodeStatus,
    /// Its nodes (the instances of the partitioned models).
    pub nodes: Vec<String>,
}

impl RunPartition {
    /// The partitions of a run's nodes, by their names (`analytics.t[2026-11-03]`), in
    /// the order they first appear.
    pub fn of(nodes: &[RunNode]) -> Vec<RunPartition> {
        let mut out: Vec<RunPartition> = Vec::new();
        for n in nodes {
            let Some(label) = n
                .name
                .strip_suffix(']')
                .and_then(|s| s.rsplit_once('['))
                .map(|(_, p)| p)
            else {
                continue;
            };
            match out.iter_mut().find(|p| p.partition == label) {
                Some(p) => p.nodes.push(n.name.clone()),
                None => out.push(RunPartition {
                    partition: label.to_string(),
                    status: NodeStatus::Done,
                    nodes: vec![n.name.clone()],
                }),
            }
        }
        for p in &mut out {
            let states: Vec<NodeStatus> = nodes
                .iter()
                .filter(|n| p.nodes.contains(&n.name))
                .map(|n| n.status)
                .collect();
            p.status = [
                NodeStatus::Failed,
                NodeStatus::Running,
                NodeStatus::Waiting,
                NodeStatus::Skipped,
            ]
            .into_iter()
            .find(|s| states.contains(s))
            .unwrap_or(if states.iter().all(|s| *s == NodeStatus::Cached) {
                NodeStatus::Cached
            } else {
                NodeStatus::Done
            });
        }
        out
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunInfo>,
}

/// A planned node, as `lh run --dry-run` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlannedNode {
    pub name: String,
    pub kind: String,
    pub language: String,
    pub location: String,
    pub inputs: Vec<PlannedInput>,
    #[serde(default)]
    pub output: Option<String>,
    /// Python nodes: the interpreter version and the packages.
    #[serde(default)]
    pub python: Option<String>,
    #[serde(default)]
    pub packages: BTreeMap<String, String>,
    /// Asked for with `changes`: what a run would do with it, and what changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<PlannedChange>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlannedInput {
    pub table: String,
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    #[serde(default)]
    pub filter: Option<String>,
    /// The node that makes it, or none when it is read from the branch.
    #[serde(default)]
    pub producer: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlanResponse {
    pub project: String,
    pub namespace: String,
    #[serde(rename = "ref")]
    pub reference: String,
    pub params: BTreeMap<String, serde_json::Value>,
    /// In execution order.
    pub nodes: Vec<PlannedNode>,
}
