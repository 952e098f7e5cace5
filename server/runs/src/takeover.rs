//! Runs and servers: the server that starts a run claims it (a lease in the run store);
//! heartbeats renew the leases of the runs this server drives and read cancellations
//! asked for on any server; the take-over claims runs whose lease ran out and resumes
//! them (the nodes recorded finished keep their result, a model whose table moved on
//! the run's branch is recovered, a run found merged into its target just ends); a
//! clean stop gives the leases back.

#[allow(unused_imports)]
use super::*;

impl RunService {
    /// Starts the heartbeats of the runs this server drives (and their cancellations,
    /// asked for on any server) and the take-over of runs whose server stopped: once the
    /// server is whole (a run taken over publishes through the merger).
    pub fn begin(self: &Arc<Self>) {
        let tick =
            (self.config.lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
        // Looking for runs to take over is one indexed query: often, so that a run is
        // taken over soon after its lease runs out.
        let scan =
            (self.config.lease / 10).clamp(Duration::from_millis(100), Duration::from_millis(500));
        // Two loops: a slow take-over never delays a heartbeat.
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                {
                    let Some(svc) = weak.upgrade() else { return };
                    if svc.stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    svc.heartbeat().await;
                }
                tokio::time::sleep(tick).await;
            }
        });
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                {
                    let Some(svc) = weak.upgrade() else { return };
                    if svc.stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Err(e) = svc.take_over().await {
                        tracing::warn!("cannot look for runs to take over: {e}");
                    }
                }
                tokio::time::sleep(scan).await;
            }
        });
    }

    pub(crate) fn lease_until(&self) -> i64 {
        Utc::now().timestamp_millis() + self.config.lease.as_millis() as i64
    }

    /// Whether a driver whose lease was last renewed at `renewed` (Unix ms) may still
    /// act on its run: a margin before the lease runs out, so that a driver paused (or
    /// cut off from the database) stops before another server can have taken over.
    pub(crate) fn lease_fresh(&self, renewed: i64) -> bool {
        let margin = self.config.lease.as_millis() as i64 * 3 / 4;
        Utc::now().timestamp_millis() - renewed < margin
    }

    /// Registers a claimed run as this server's (before it is resumed or started).
    pub(crate) fn hold(&self, id: &str, claim: &Claim) -> exec::Control {
        let control = exec::Control::new();
        if let Ok(mut r) = self.running.lock() {
            r.insert(
                id.to_string(),
                Driving {
                    claim: claim.clone(),
                    control: control.clone(),
                    task: None,
                },
            );
        }
        control
    }

    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut r) = self.running.lock() {
            r.remove(id);
        }
    }

    /// Renews the lease of every run this server drives; a run another server took
    /// over is stopped here, a run someone asked to cancel is cancelled.
    pub(crate) async fn heartbeat(&self) {
        let driving: Vec<(String, Claim, exec::Control)> = match self.running.lock() {
            Ok(r) => r
                .iter()
                .map(|(id, d)| (id.clone(), d.claim.clone(), d.control.clone()))
                .collect(),
            Err(_) => return,
        };
        for (id, claim, control) in driving {
            let now = Utc::now().timestamp_millis();
            match self.store.renew(&id, &claim, self.lease_until()).await {
                Ok(Lease::Held { cancel }) => {
                    control.renewed.fetch_max(now, Ordering::SeqCst);
                    if cancel {
                        control.cancel.cancel();
                    }
                }
                Ok(Lease::Lost) => {
                    if !control.lost.swap(true, Ordering::SeqCst) {
                        tracing::warn!(run = %id, "the run is no longer this server's (its lease ran out and another server took it over): stopping it here");
                    }
                    control.cancel.cancel();
                }
                // The database is unreachable: the driver stops acting once its lease
                // is no longer fresh, and the lease runs out by itself if this lasts.
                Err(e) => tracing::warn!(run = %id, "cannot renew the run's lease: {e}"),
            }
        }
    }

    /// Claims the runs whose lease ran out (their server stopped) and resumes each in
    /// a task of its own.
    pub(crate) async fn take_over(self: &Arc<Self>) -> Result<()> {
        let now = Utc::now().timestamp_millis();
        for id in self.store.orphaned(now).await? {
            if self.stopping.load(Ordering::SeqCst) {
                break;
            }
            // Still driven here: its heartbeat is late (a busy server or database), its
            // server is not gone. Taking it over would stop the driver for nothing. (A
            // driver that knows it lost the run may be taken over again.)
            let driving = self.running.lock().is_ok_and(|r| {
                r.get(&id)
                    .is_some_and(|d| !d.control.lost.load(Ordering::SeqCst))
            });
            if driving {
                continue;
            }
            let Some(claim) = self
                .store
                .claim(&id, &self.instance, now, self.lease_until())
                .await?
            else {
                continue; // another server was first
            };
            tracing::warn!(run = %id, attempt = claim.attempt, "taking over a run whose server stopped");
            let control = self.hold(&id, &claim);
            let svc = self.clone();
            tokio::spawn(async move {
                if let Err(e) = svc.resume(&id, claim.clone(), control).await {
                    // Given back: another server (or this one) tries again, at most
                    // MAX_CLAIMS times in all.
                    tracing::error!(run = %id, "cannot resume the run (it is given back): {e}");
                    svc.forget(&id);
                    let _ = svc.store.release(&id, &claim).await;
                }
            });
        }
        Ok(())
    }

    /// Goes on with a run another server (or this one, before a restart) drove: the
    /// nodes it recorded as finished keep their result, a model whose output is
    /// committed on the run's branch is done, every other node runs (again); a run
    /// already published, or asked to cancel, just ends.
    pub(crate) async fn resume(
        self: &Arc<Self>,
        id: &str,
        claim: Claim,
        control: exec::Control,
    ) -> Result<()> {
        let (info, plan_json) = self.store.get(id).await?;
        let (start, cancel) = self.store.resume_state(id).await?;
        let finish = |status: RunStatus, error: Option<String>, merge: Option<String>| {
            let envs = info.environments.clone();
            let claim = claim.clone();
            let check = info.check.then(|| info.run_branch.clone());
            async move {
                self.store.skip_unfinished(id, &claim).await?;
                let r = self
                    .store
                    .finish_run(
                        id,
                        &claim,
                        status,
                        error.as_deref(),
                        merge.as_deref(),
                        &envs,
                    )
                    .await;
                // A check's run wrote nothing: its branch goes, once its end is ours.
                if let Some(branch) = &check
                    && matches!(r, Ok(true))
                {
                    let _ = self.catalog.delete_branch(branch, None).await;
                }
                self.forget(id);
                r.map(|_| ())
            }
        };
        let Some(start) = start.and_then(|s| serde_json::from_str::<Resumable>(&s).ok()) else {
            return finish(
                RunStatus::Failed,
                Some("the server driving the run stopped; a run an older lh server started cannot be resumed, nothing was published".into()),
                None,
            )
            .await;
        };
        // Published before its server stopped: the merge is on the target.
        if start.publish
            && let Some(merge) = self.published(&info).await?
        {
            let _ = self.catalog.delete_branch(&info.run_branch, None).await;
            return finish(RunStatus::Succeeded, None, Some(merge)).await;
        }
        if cancel {
            return finish(
                RunStatus::Cancelled,
                Some("the run was cancelled; nothing was published".into()),
                None,
            )
            .await;
        }
        if claim.attempt > MAX_CLAIMS {
            return finish(
                RunStatus::Failed,
                Some(match info.check {
                    true => format!(
                        "the servers driving the check stopped {} times while it ran",
                        claim.attempt - 1
                    ),
                    false => format!(
                        "the servers driving the run stopped {} times while it ran; nothing was published (the run branch '{}' is kept)",
                        claim.attempt - 1,
                        info.run_branch
                    ),
                }),
                None,
            )
            .await;
        }
        let head = match self.catalog.resolve(&info.run_branch).await {
            Ok(r) => r.commit,
            Err(e) if e.kind() == lh_catalog::ErrorKind::RefNotFound => {
                return finish(
                    RunStatus::Failed,
                    Some(format!(
                        "the server driving the run stopped and its branch '{}' is gone; nothing was published",
                        info.run_branch
                    )),
                    None,
                )
                .await;
            }
            Err(e) => return Err(e.into()),
        };
        let input = self
            .catalog
            .resolve(&format!("@{}", info.input_commit))
            .await?
            .commit;
        let plan: Plan = serde_json::from_str(&plan_json)
            .map_err(|e| Error::internal(format!("the stored plan cannot be read: {e}")))?;
        // Its code, from the warehouse when this server never had it.
        self.code_path(&info.code_hash).await?;
        let by = Identity {
            access: self.merger.roles.access(&start.roles).await?,
            user: start.user.clone(),
            token_id: start.token_id.clone(),
        };
        // Each node's state: finished ones as recorded; a model whose output is on the
        // run's branch (committed before its record) is done; the rest run.
        let recorded: HashMap<&str, &RunNode> =
            info.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut initial = vec![NodeStatus::Waiting; plan.nodes.len()];
        let mut recovered = Vec::new();
        for (i, node) in plan.nodes.iter().enumerate() {
            let Some(rec) = recorded.get(node.display_name().as_str()) else {
                continue;
            };
            if !matches!(rec.status, NodeStatus::Waiting | NodeStatus::Running) {
                initial[i] = rec.status;
                continue;
            }
            // (An instance of a partitioned model runs again: overwriting its
            // partitions twice is the same as once.)
            if let (NodeKind::Model { .. }, None) = (&node.kind, &node.partition) {
                let now = self.catalog.table_in(&head, &node.name).await?;
                let before = self.catalog.table_in(&input, &node.name).await?;
                if let Some(p) = now.filter(|p| Some(p) != before.as_ref()) {
                    initial[i] = NodeStatus::Done;
                    recovered.push((i, p));
                }
            }
        }
        let run_start = RunStart {
            code_hash: info.code_hash.clone(),
            target: info.target.clone(),
            params: BTreeMap::new(),
            by,
            publish: start.publish,
            expectations_only: false,
            only: Vec::new(),
            secrets: true,
            no_cache: info.no_cache,
            strict: info.strict,
            rerun_of: info.rerun_of.clone(),
            input_commit: Some(info.input_commit.clone()),
            reuse: start
                .reuse
                .into_iter()
                .map(|(k, p)| (k, p.into()))
                .collect(),
            param_values: None,
            partitions: None,
            // (Its plan, stored, holds the nodes it selected.)
            select: Vec::new(),
        };
        let mut run = exec::Run::new(self.clone(), info, plan, run_start, claim, control);
        run.recover(initial, recovered).await;
        self.drive(run);
        Ok(())
    }

    /// The merge commit by which run `info` was published on its target, if it was:
    /// the target's first-parent history since the run began, searched for the commit
    /// that names the run.
    pub(crate) async fn published(&self, info: &RunRecord) -> Result<Option<String>> {
        // Not contained in the target: not published, and nothing to search (the
        // target's history may be long and busy).
        match self.catalog.resolve(&info.run_branch).await {
            Ok(branch) => {
                let target = self.catalog.resolve(&info.target).await?.commit;
                let base = self
                    .catalog
                    .merge_base_of(branch.commit.id, target.id)
                    .await?;
                if base.map(|b| b.id) != Some(branch.commit.id) {
                    return Ok(None);
                }
            }
            // Deleted once published (or never made): the target's history says.
            Err(e) if e.kind() == lh_catalog::ErrorKind::RefNotFound => {}
            Err(e) => return Err(e.into()),
        }
        // First-parent timestamps never decrease: the walk stops at the run's start
        // (less a minute for the servers' clocks).
        let since = info.created_at - chrono::Duration::minutes(1);
        let mut query = lh_catalog::LogQuery {
            limit: 100,
            ..Default::default()
        };
        loop {
            let page = self.catalog.log(&info.target, &query).await?;
            for c in &page.commits {
                if c.properties.get("lh.run") == Some(&info.id) && c.parents.len() == 2 {
                    return Ok(Some(c.id.to_hex()));
                }
                if c.timestamp < since {
                    return Ok(None);
                }
            }
            match page.next_page_token {
                Some(t) => query.page_token = Some(t),
                None => return Ok(None),
            }
        }
    }

    /// Runs `run` (held with `hold`) in the background as this server's, until it
    /// ends or is lost; its entry goes when its task ends, a panic included.
    pub(crate) fn drive(self: &Arc<Self>, run: exec::Run) {
        let id = run.id().to_string();
        if self.stopping.load(Ordering::SeqCst) {
            // Stopping: left to its lease, for another server.
            self.forget(&id);
            return;
        }
        let inner = tokio::spawn(run.execute());
        let svc = self.clone();
        let done = id.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = inner.await
                && e.is_panic()
            {
                tracing::error!(run = %done, "the run's driver panicked; its lease runs out and another server takes it over");
            }
            svc.forget(&done);
        });
        if let Ok(mut r) = self.running.lock()
            && let Some(d) = r.get_mut(&id)
        {
            d.task = Some(task);
        }
    }

    /// The server stops: its runs are given up, each stopped here (its task waited
    /// for, so nothing of this server writes afterwards) and its lease released, so that
    /// another server sharing the catalog takes it over at once (or this one, when it
    /// starts again).
    pub async fn release_all(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        type Held = (
            String,
            Claim,
            exec::Control,
            Option<tokio::task::JoinHandle<()>>,
        );
        let driving: Vec<Held> = match self.running.lock() {
            Ok(mut r) => r
                .drain()
                .map(|(id, d)| (id, d.claim, d.control, d.task))
                .collect(),
            Err(_) => return,
        };
        for (_, _, control, _) in &driving {
            control.lost.store(true, Ordering::SeqCst);
            control.cancel.cancel();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        for (id, claim, _, task) in driving {
            if let Some(task) = task
                && tokio::time::timeout_at(deadline, task).await.is_err()
            {
                // Still busy: its lease is left to run out rather than given back.
                tracing::warn!(run = %id, "the run's driver did not stop in time; its lease runs out by itself");
                continue;
            }
            match self.store.release(&id, &claim).await {
                Ok(()) => {
                    tracing::info!(run = %id, "released the run for another server to take over")
                }
                Err(e) => {
                    tracing::warn!(run = %id, "cannot release the run (its lease runs out by itself): {e}")
                }
            }
        }
    }
}
