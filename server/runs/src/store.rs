//! Run records: runs, their nodes (status, timings, rows, errors, logs), and the
//! memoization table, in the server's database (the same SQLite file or PostgreSQL
//! database as the catalog, through one SQL dialect that both accept; see `db.rs`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use lh_api::{NodeStatus, RunStatus};
use lh_catalog::TablePointer;
use serde::{Deserialize, Serialize};

use crate::{RunNode, RunRecord};
use sqlx::{AnyPool, Row};

use crate::error::{Code, Error, Result};

pub struct RunStore {
    pool: AnyPool,
}

fn db(e: sqlx::Error) -> Error {
    crate::db::failed("run storage", e)
}

fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn time(v: Option<i64>) -> Option<DateTime<Utc>> {
    v.and_then(DateTime::from_timestamp_micros)
}

/// The right to drive a run: the server's instance and the number of the claim (a
/// run taken over is claimed again, with the next number). Every record a driver makes
/// names its claim, so a server that lost its run records nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub owner: String,
    pub attempt: i64,
}

/// What a heartbeat finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// Still this server's; `cancel`: someone asked to cancel it.
    Held { cancel: bool },
    /// Another server took it over, or it ended.
    Lost,
}

/// A table pointer as run records store it (a node's output, the memo table, the outputs
/// a resumable run reuses): JSON with the fields lh has always written, in their order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredPointer {
    metadata_location: String,
    table_uuid: String,
    snapshot_id: Option<i64>,
}

impl From<&TablePointer> for StoredPointer {
    fn from(p: &TablePointer) -> StoredPointer {
        StoredPointer {
            metadata_location: p.metadata_location.clone(),
            table_uuid: p.table_uuid.clone(),
            snapshot_id: p.snapshot_id,
        }
    }
}

impl From<StoredPointer> for TablePointer {
    fn from(p: StoredPointer) -> TablePointer {
        TablePointer {
            metadata_location: p.metadata_location,
            table_uuid: p.table_uuid,
            snapshot_id: p.snapshot_id,
        }
    }
}

fn pointer_json(p: &TablePointer) -> String {
    serde_json::to_string(&StoredPointer::from(p)).unwrap_or_default()
}

fn read_pointer(json: &str) -> Option<TablePointer> {
    serde_json::from_str::<StoredPointer>(json)
        .ok()
        .map(TablePointer::from)
}

/// A node as the executor records it.
#[derive(Debug, Clone)]
pub struct NodeRecord {
    pub name: String,
    pub position: i64,
    pub kind: String,
    pub language: String,
    pub location: String,
    pub inputs: Vec<String>,
    pub status: NodeStatus,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub rows: Option<u64>,
    pub cached: bool,
    /// Why the output was or was not reused.
    pub reason: Option<String>,
    pub fingerprint: Option<String>,
    pub output: Option<TablePointer>,
    pub error: Option<String>,
    pub traceback: Option<String>,
    pub detail: Option<String>,
    pub log: String,
}

impl NodeRecord {
    /// A node that has not run yet: `status`, and no result.
    pub fn new(
        name: String,
        position: i64,
        kind: String,
        language: String,
        location: String,
        inputs: Vec<String>,
        status: NodeStatus,
    ) -> NodeRecord {
        NodeRecord {
            name,
            position,
            kind,
            language,
            location,
            inputs,
            status,
            started_at: None,
            finished_at: None,
            rows: None,
            cached: false,
            reason: None,
            fingerprint: None,
            output: None,
            error: None,
            traceback: None,
            detail: None,
            log: String::new(),
        }
    }
}

impl RunStore {
    /// The run store over the server's database (`db::open`).
    pub fn new(pool: AnyPool) -> RunStore {
        RunStore { pool }
    }

    /// Records a new run, claimed by `claim` until `lease_until` (Unix ms); `start` is
    /// what a server taking it over needs to resume it (JSON).
    pub async fn insert_run(
        &self,
        run: &RunRecord,
        plan_json: &str,
        start: &str,
        claim: &Claim,
        lease_until: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO lh_runs (id, project, author, target, run_branch, code_hash, input_commit, params, plan, no_cache, strict, status, error, merge_commit, environments, rerun_of, created_at, finished_at, start, owner, attempt, lease_until, is_check)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)",
        )
        .bind(&run.id)
        .bind(&run.project)
        .bind(&run.author)
        .bind(&run.target)
        .bind(&run.run_branch)
        .bind(&run.code_hash)
        .bind(&run.input_commit)
        .bind(serde_json::to_string(&run.params).unwrap_or_default())
        .bind(plan_json)
        .bind(run.no_cache as i64)
        .bind(run.strict as i64)
        .bind(run.status.as_str())
        .bind(run.error.clone())
        .bind(run.merge_commit.clone())
        .bind(serde_json::to_string(&run.environments).unwrap_or_default())
        .bind(run.rerun_of.clone())
        .bind(micros(run.created_at))
        .bind(run.finished_at.map(micros))
        .bind(start)
        .bind(&claim.owner)
        .bind(claim.attempt)
        .bind(lease_until)
        .bind(run.check as i64)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        for (i, n) in run.nodes.iter().enumerate() {
            let rec = NodeRecord::new(
                n.name.clone(),
                i as i64,
                n.kind.clone(),
                n.language.clone(),
                n.location.clone(),
                n.inputs.clone(),
                n.status,
            );
            self.insert_node(&run.id, &rec).await?;
        }
        Ok(())
    }

    async fn insert_node(&self, run: &str, n: &NodeRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO lh_run_nodes (run_id, node, position, kind, language, location, inputs, status, started_at, finished_at, rows_written, cached, fingerprint, output, error, traceback, detail, log, cache_reason)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)",
        )
        .bind(run)
        .bind(&n.name)
        .bind(n.position)
        .bind(&n.kind)
        .bind(&n.language)
        .bind(&n.location)
        .bind(serde_json::to_string(&n.inputs).unwrap_or_default())
        .bind(n.status.as_str())
        .bind(n.started_at.map(micros))
        .bind(n.finished_at.map(micros))
        .bind(n.rows.map(|r| r as i64))
        .bind(n.cached as i64)
        .bind(n.fingerprint.clone())
        .bind(n.output.as_ref().map(pointer_json))
        .bind(n.error.clone())
        .bind(n.traceback.clone())
        .bind(n.detail.clone())
        .bind(&n.log)
        .bind(n.reason.clone())
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// Records a node's new state, if `claim` still drives its run (a server that lost
    /// its run to another records nothing more).
    pub async fn update_node(&self, run: &str, claim: &Claim, n: &NodeRecord) -> Result<()> {
        sqlx::query(
            "UPDATE lh_run_nodes SET status = $1, started_at = $2, finished_at = $3, rows_written = $4, cached = $5, fingerprint = $6, output = $7, error = $8, traceback = $9, detail = $10, log = $11, cache_reason = $12
             WHERE run_id = $13 AND node = $14
               AND EXISTS (SELECT 1 FROM lh_runs r WHERE r.id = $13 AND r.owner = $15 AND r.attempt = $16)",
        )
        .bind(n.status.as_str())
        .bind(n.started_at.map(micros))
        .bind(n.finished_at.map(micros))
        .bind(n.rows.map(|r| r as i64))
        .bind(n.cached as i64)
        .bind(n.fingerprint.clone())
        .bind(n.output.as_ref().map(pointer_json))
        .bind(n.error.clone())
        .bind(n.traceback.clone())
        .bind(n.detail.clone())
        .bind(&n.log)
        .bind(n.reason.clone())
        .bind(run)
        .bind(&n.name)
        .bind(&claim.owner)
        .bind(claim.attempt)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// A running node's log so far (its prints, as they happen), if `claim` still drives
    /// its run and the node is still running: its final record always has the last word.
    pub async fn update_node_log(
        &self,
        run: &str,
        claim: &Claim,
        node: &str,
        log: &str,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE lh_run_nodes SET log = $1
             WHERE run_id = $2 AND node = $3 AND status = 'running'
               AND EXISTS (SELECT 1 FROM lh_runs r WHERE r.id = $2 AND r.owner = $4 AND r.attempt = $5)",
        )
        .bind(log)
        .bind(run)
        .bind(node)
        .bind(&claim.owner)
        .bind(claim.attempt)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// Records how a run ended, if `claim` still drives it; whether it did.
    pub async fn finish_run(
        &self,
        id: &str,
        claim: &Claim,
        status: RunStatus,
        error: Option<&str>,
        merge_commit: Option<&str>,
        environments: &BTreeMap<String, String>,
    ) -> Result<bool> {
        let r = sqlx::query(
            "UPDATE lh_runs SET status = $1, error = $2, merge_commit = $3, environments = $4, finished_at = $5, lease_until = 0
             WHERE id = $6 AND owner = $7 AND attempt = $8 AND status = 'running'",
        )
        .bind(status.as_str())
        .bind(error.map(String::from))
        .bind(merge_commit.map(String::from))
        .bind(serde_json::to_string(environments).unwrap_or_default())
        .bind(micros(Utc::now()))
        .bind(id)
        .bind(&claim.owner)
        .bind(claim.attempt)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(r.rows_affected() == 1)
    }

    /// Renews `claim`'s lease on a running run until `until` (Unix ms): whether it still
    /// holds it, and whether someone asked for the run's cancellation.
    pub async fn renew(&self, id: &str, claim: &Claim, until: i64) -> Result<Lease> {
        let row = sqlx::query(
            "UPDATE lh_runs SET lease_until = CASE WHEN lease_until < $1 THEN $1 ELSE lease_until END
             WHERE id = $2 AND owner = $3 AND attempt = $4 AND status = 'running'
             RETURNING cancel_requested",
        )
        .bind(until)
        .bind(id)
        .bind(&claim.owner)
        .bind(claim.attempt)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        Ok(match row {
            Some(r) => Lease::Held {
                cancel: r.get::<i64, _>(0) != 0,
            },
            None => Lease::Lost,
        })
    }

    /// Gives a run's lease up (a server stopping, a resume that failed): another
    /// server takes it at once. A claim given back does not count against the run's
    /// claims (only servers that stopped while driving it do); the next claim is told
    /// from this one by its owner, a server instance that never comes back.
    pub async fn release(&self, id: &str, claim: &Claim) -> Result<()> {
        sqlx::query(
            "UPDATE lh_runs SET lease_until = 0, attempt = attempt - 1 WHERE id = $1 AND owner = $2 AND attempt = $3 AND status = 'running'",
        )
        .bind(id)
        .bind(&claim.owner)
        .bind(claim.attempt)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// Marks the nodes of a run that never finished as skipped (a run ended by the
    /// server that took it over, without running them), if `claim` still drives it.
    pub async fn skip_unfinished(&self, id: &str, claim: &Claim) -> Result<()> {
        sqlx::query(
            "UPDATE lh_run_nodes SET status = 'skipped' WHERE run_id = $1 AND status IN ('waiting', 'running')
               AND EXISTS (SELECT 1 FROM lh_runs r WHERE r.id = $1 AND r.owner = $2 AND r.attempt = $3)",
        )
        .bind(id)
        .bind(&claim.owner)
        .bind(claim.attempt)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// Running runs whose lease ran out before `now` (Unix ms): their server stopped.
    pub async fn orphaned(&self, now: i64) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT id FROM lh_runs WHERE status = 'running' AND lease_until < $1 ORDER BY created_at",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Claims an orphaned run for `owner` until `until`: the claim, if this server won
    /// it (the lease still ran out, no other server claimed it first).
    pub async fn claim(
        &self,
        id: &str,
        owner: &str,
        now: i64,
        until: i64,
    ) -> Result<Option<Claim>> {
        let row = sqlx::query(
            "UPDATE lh_runs SET owner = $1, lease_until = $2, attempt = attempt + 1
             WHERE id = $3 AND status = 'running' AND lease_until < $4
             RETURNING attempt",
        )
        .bind(owner)
        .bind(until)
        .bind(id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        Ok(row.map(|r| Claim {
            owner: owner.to_string(),
            attempt: r.get(0),
        }))
    }

    /// What resuming a run needs besides its record: how it was started (JSON, none
    /// for a run of an older server) and whether its cancellation was asked for.
    pub async fn resume_state(&self, id: &str) -> Result<(Option<String>, bool)> {
        let row = sqlx::query("SELECT start, cancel_requested FROM lh_runs WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .map_err(db)?;
        Ok((row.get(0), row.get::<i64, _>(1) != 0))
    }

    /// Asks for a running run's cancellation (its driver, on any server, sees it at its
    /// next heartbeat); whether it was running.
    pub async fn request_cancel(&self, id: &str) -> Result<bool> {
        let r = sqlx::query(
            "UPDATE lh_runs SET cancel_requested = 1 WHERE id = $1 AND status = 'running'",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(r.rows_affected() == 1)
    }

    /// The full id of the run `prefix` names (a unique prefix of 8 characters or more).
    pub async fn resolve_id(&self, prefix: &str) -> Result<String> {
        if prefix.len() < 8 || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!("'{prefix}' is not a run id (8 to 32 hex characters)"),
            ));
        }
        let rows =
            sqlx::query("SELECT id FROM lh_runs WHERE id >= $1 AND id < $2 ORDER BY id LIMIT 2")
                .bind(prefix.to_ascii_lowercase())
                .bind(format!("{}g", prefix.to_ascii_lowercase()))
                .fetch_all(&self.pool)
                .await
                .map_err(db)?;
        match rows.as_slice() {
            [] => Err(
                Error::not_found(Code::RunNotFound, format!("no run with id '{prefix}'"))
                    .with_remedy(lh_api::remedy::Remedy::ListRuns),
            ),
            [one] => Ok(one.get::<String, _>(0)),
            _ => Err(Error::bad_request(
                Code::AmbiguousRun,
                format!("'{prefix}' matches more than one run; give more characters"),
            )),
        }
    }

    /// A run, with its nodes in plan order; also its stored plan (JSON).
    pub async fn get(&self, id: &str) -> Result<(RunRecord, String)> {
        let row = sqlx::query(
            "SELECT id, project, author, target, run_branch, code_hash, input_commit, params, plan, no_cache, strict, status, error, merge_commit, environments, rerun_of, created_at, finished_at, is_check FROM lh_runs WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?
        .ok_or_else(|| Error::not_found(Code::RunNotFound, format!("no run with id '{id}'")))?;
        let status = match row.get::<String, _>(11).as_str() {
            "running" => RunStatus::Running,
            "succeeded" => RunStatus::Succeeded,
            "cancelled" => RunStatus::Cancelled,
            _ => RunStatus::Failed,
        };
        let plan: String = row.get(8);
        let mut nodes = self.nodes(id).await?;
        // The DAG's edges come from the stored plan, by node name.
        if let Ok(p) = serde_json::from_str::<super::project::Plan>(&plan) {
            let deps: std::collections::HashMap<String, Vec<String>> = (0..p.nodes.len())
                .map(|i| (p.nodes[i].display_name(), p.dependency_names(i)))
                .collect();
            for n in &mut nodes {
                if let Some(d) = deps.get(&n.name) {
                    n.depends_on = d.clone();
                }
            }
        }
        let info = RunRecord {
            id: row.get(0),
            project: row.get(1),
            author: row.get(2),
            target: row.get(3),
            run_branch: row.get(4),
            code_hash: row.get(5),
            input_commit: row.get(6),
            check: row.get::<i64, _>(18) != 0,
            params: serde_json::from_str(&row.get::<String, _>(7)).unwrap_or_default(),
            no_cache: row.get::<i64, _>(9) != 0,
            strict: row.get::<i64, _>(10) != 0,
            status,
            error: row.get(12),
            merge_commit: row.get(13),
            environments: serde_json::from_str(&row.get::<String, _>(14)).unwrap_or_default(),
            rerun_of: row.get(15),
            created_at: time(Some(row.get(16))).unwrap_or_default(),
            finished_at: time(row.get(17)),
            nodes_hidden: false,
            nodes,
        };
        Ok((info, plan))
    }

    async fn nodes(&self, id: &str) -> Result<Vec<RunNode>> {
        let rows = sqlx::query(
            "SELECT node, kind, language, location, inputs, status, started_at, finished_at, rows_written, cached, output, error, traceback, detail, cache_reason FROM lh_run_nodes WHERE run_id = $1 ORDER BY position",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| RunNode {
                name: r.get(0),
                kind: r.get(1),
                language: r.get(2),
                location: r.get(3),
                inputs: serde_json::from_str(&r.get::<String, _>(4)).unwrap_or_default(),
                depends_on: Vec::new(),
                status: NodeStatus::parse(&r.get::<String, _>(5)).unwrap_or(NodeStatus::Failed),
                started_at: time(r.get(6)),
                finished_at: time(r.get(7)),
                rows: r.get::<Option<i64>, _>(8).map(|v| v as u64),
                cached: r.get::<i64, _>(9) != 0,
                output: r
                    .get::<Option<String>, _>(10)
                    .and_then(|o| read_pointer(&o)),
                error: r.get(11),
                traceback: r.get(12),
                detail: r.get(13),
                reason: r.get(14),
            })
            .collect())
    }

    /// The log of one node, or of every node in plan order.
    pub async fn logs(&self, id: &str, node: Option<&str>) -> Result<Vec<(String, String)>> {
        // One node's log is read alone (a run's logs together may be large).
        let rows = match node {
            None => sqlx::query(
                "SELECT node, log FROM lh_run_nodes WHERE run_id = $1 ORDER BY position",
            )
            .bind(id)
            .fetch_all(&self.pool)
            .await
            .map_err(db)?,
            Some(n) => sqlx::query(
                "SELECT node, log FROM lh_run_nodes WHERE run_id = $1 AND node = $2 \
                 ORDER BY position",
            )
            .bind(id)
            .bind(n)
            .fetch_all(&self.pool)
            .await
            .map_err(db)?,
        };
        let found: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        if let Some(n) = node
            && found.is_empty()
        {
            return Err(Error::not_found(
                Code::NodeNotFound,
                format!("the run has no node '{n}'"),
            ));
        }
        Ok(found)
    }

    /// The newest runs, newest first.
    pub async fn list(&self, limit: i64) -> Result<Vec<RunRecord>> {
        let rows = sqlx::query("SELECT id FROM lh_runs ORDER BY created_at DESC, id DESC LIMIT $1")
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        let mut out = Vec::new();
        for r in rows {
            out.push(self.get(&r.get::<String, _>(0)).await?.0);
        }
        Ok(out)
    }

    /// Finished runs older than `before` whose branches may still exist.
    pub async fn expired(&self, before: DateTime<Utc>) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT id, run_branch FROM lh_runs WHERE status <> 'running' AND finished_at < $1",
        )
        .bind(micros(before))
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The code snapshots that runs refer to.
    pub async fn code_hashes(&self) -> Result<std::collections::HashSet<String>> {
        // A check's project is kept as long as the check.
        let rows = sqlx::query(
            "SELECT DISTINCT code_hash FROM lh_runs UNION SELECT target FROM lh_checks WHERE kind = 'expectations'",
        )
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The memoized output of `fingerprint`: its table, pointer and the run that made it;
    /// none when it was memoized before `not_before` (see `reusable_since`).
    pub async fn memo_get(
        &self,
        fingerprint: &str,
        not_before: DateTime<Utc>,
    ) -> Result<Option<(String, TablePointer, String)>> {
        let row = sqlx::query(
            "SELECT table_name, pointer, run_id FROM lh_memo WHERE fingerprint = $1 AND created_at >= $2",
        )
        .bind(fingerprint)
        .bind(micros(not_before))
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        Ok(row.and_then(|r| {
            let p: String = r.get(1);
            read_pointer(&p).map(|p| (r.get(0), p, r.get(2)))
        }))
    }

    /// The newest succeeded runs of `project` on `target` (at most `limit`), newest
    /// first: their ids and plans (JSON).
    pub async fn last_plans(
        &self,
        project: &str,
        target: &str,
        limit: i64,
    ) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT id, plan FROM lh_runs WHERE project = $1 AND target = $2 \
             AND status = 'succeeded' AND is_check = 0 ORDER BY created_at DESC, id DESC LIMIT $3",
        )
        .bind(project)
        .bind(target)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The projects with a succeeded run on `target`.
    pub async fn projects_on(&self, target: &str) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT DISTINCT project FROM lh_runs WHERE target = $1 AND status = 'succeeded' \
             AND is_check = 0 ORDER BY project",
        )
        .bind(target)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows.into_iter().map(|r| r.get(0)).collect())
    }

    /// The memoized outputs of `table` a run may still reuse (made at `not_before` or
    /// later), newest first: their key parts (JSON) and pointers.
    pub async fn memo_outputs(
        &self,
        table: &str,
        not_before: DateTime<Utc>,
    ) -> Result<Vec<(String, TablePointer)>> {
        let rows = sqlx::query(
            "SELECT parts, pointer FROM lh_memo WHERE table_name = $1 AND parts IS NOT NULL \
             AND created_at >= $2 ORDER BY created_at DESC LIMIT 1000",
        )
        .bind(table)
        .bind(micros(not_before))
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                let p: String = r.get(1);
                Some((r.get(0), read_pointer(&p)?))
            })
            .collect())
    }

    /// The key parts of the newest memoized output of `table` (JSON), if any.
    pub async fn memo_latest_parts(&self, table: &str) -> Result<Option<String>> {
        let row = sqlx::query(
            "SELECT parts FROM lh_memo WHERE table_name = $1 AND parts IS NOT NULL ORDER BY created_at DESC LIMIT 1",
        )
        .bind(table)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn memo_put(
        &self,
        fingerprint: &str,
        table: &str,
        pointer: &TablePointer,
        run: &str,
        parts: &str,
    ) -> Result<()> {
        // The newest output of a key is the one to reuse (the table holds it, so a
        // partition put back finds it there already); a run storing the same key at the
        // same moment made an output as right.
        sqlx::query("DELETE FROM lh_memo WHERE fingerprint = $1")
            .bind(fingerprint)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        let r = sqlx::query("INSERT INTO lh_memo (fingerprint, table_name, pointer, run_id, created_at, parts) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(fingerprint)
            .bind(table)
            .bind(pointer_json(pointer))
            .bind(run)
            .bind(micros(Utc::now()))
            .bind(parts)
            .execute(&self.pool)
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(_)
                if self
                    .memo_get(fingerprint, Utc::now() - chrono::Duration::hours(1))
                    .await?
                    .is_some() =>
            {
                Ok(())
            }
            Err(e) => Err(db(e)),
        }
    }
}

/// The oldest memoized output a run reuses: one memoized within the catch-all
/// retention window, less a margin (a day, or half a shorter window), so that no run
/// reuses an output garbage collection may be about to forget and free.
pub fn reusable_since(now: DateTime<Utc>, catch_all: std::time::Duration) -> DateTime<Utc> {
    let margin = (catch_all / 2).min(std::time::Duration::from_secs(86400));
    now - chrono::Duration::from_std(catch_all - margin).unwrap_or(chrono::Duration::MAX / 2)
}

#[async_trait::async_trait]
impl crate::tables::gc::Memo for RunStore {
    async fn kept(&self, since: DateTime<Utc>) -> Result<Vec<TablePointer>> {
        let rows = sqlx::query("SELECT pointer FROM lh_memo WHERE created_at >= $1")
            .bind(micros(since))
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        Ok(rows
            .iter()
            .filter_map(|r| read_pointer(&r.get::<String, _>(0)))
            .collect())
    }

    async fn forget_before(&self, before: DateTime<Utc>) -> Result<u64> {
        let r = sqlx::query("DELETE FROM lh_memo WHERE created_at < $1")
            .bind(micros(before))
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(r.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pointers are stored as lh has always written them (`lh_api::TablePointer`'s
    /// JSON), so records written before read back, and after read the same.
    #[test]
    fn pointers_are_stored_as_before() {
        for (snapshot_id, json) in [
            (
                Some(42),
                r#"{"metadata_location":"s3://b/a/t-1/metadata/1.json","table_uuid":"u-1","snapshot_id":42}"#,
            ),
            (
                None,
                r#"{"metadata_location":"s3://b/a/t-1/metadata/1.json","table_uuid":"u-1","snapshot_id":null}"#,
            ),
        ] {
            let p = TablePointer {
                metadata_location: "s3://b/a/t-1/metadata/1.json".into(),
                table_uuid: "u-1".into(),
                snapshot_id,
            };
            let api = lh_api::TablePointer {
                metadata_location: p.metadata_location.clone(),
                table_uuid: p.table_uuid.clone(),
                snapshot_id,
            };
            assert_eq!(serde_json::to_string(&api).unwrap(), json);
            assert_eq!(pointer_json(&p), json);
            assert_eq!(read_pointer(json), Some(p));
        }
    }
}
