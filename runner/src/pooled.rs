//! [`PooledRuntime`]: a [`Runtime`] made of a warm pool of workers (`pool.rs`) that a
//! [`Launcher`] starts and stops, and the one exchange of an invocation with a worker
//! (`exchange.rs`). The Docker and process runtimes are this type over their launchers.

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::env::Env;
use crate::error::RunnerError;
use crate::exchange::{Exchanged, exchange};
use crate::pool::{Evict, Pool, PoolConfig};
use crate::protocol::Invocation;
use crate::runtime::{InvokeResult, Limits, Runtime};
use crate::worker::{Launcher, WorkerKey};

/// How often idle workers past their idle time are looked for.
const EVICT_EVERY: Duration = Duration::from_secs(5);

/// Runs functions in warm workers of launcher `L`.
pub struct PooledRuntime<L: Launcher> {
    pool: Pool<L>,
}

impl<L: Launcher> std::fmt::Debug for PooledRuntime<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledRuntime")
            .field("runtime", &L::NAME)
            .finish()
    }
}

impl<L: Launcher> PooledRuntime<L> {
    /// The runtime; idle workers are evicted in the background for as long as it lives
    /// (when made inside a Tokio runtime).
    pub fn with_launcher(launcher: L, config: PoolConfig) -> Arc<PooledRuntime<L>> {
        let rt = Arc::new(PooledRuntime {
            pool: Pool::new(launcher, config),
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let weak: Weak<PooledRuntime<L>> = Arc::downgrade(&rt);
            handle.spawn(async move {
                loop {
                    tokio::time::sleep(EVICT_EVERY).await;
                    let Some(rt) = weak.upgrade() else { return };
                    rt.pool.evict(Evict::Expired).await;
                    // Housekeeping of its own: a slow engine must not hold up the eviction
                    // of idle workers.
                    let tidy = rt.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(
                            Duration::from_secs(300),
                            tidy.pool.launcher().tidy(),
                        )
                        .await;
                    });
                }
            });
        }
        rt
    }

    /// The launcher that starts and stops this runtime's workers.
    pub fn launcher(&self) -> &L {
        self.pool.launcher()
    }

    /// How many workers wait warm.
    pub fn idle_workers(&self) -> usize {
        self.pool.idle()
    }

    /// How many workers for `env`, the snapshot `code` and `limits` wait warm.
    pub fn warm_for(&self, env: &Env, code: &Path, limits: &Limits) -> usize {
        self.pool
            .idle_for(&self.pool.launcher().key(env, code, limits))
    }

    /// How many workers are alive, idle or busy.
    pub fn live_workers(&self) -> usize {
        self.pool.live()
    }

    /// Whether the place that runs the workers answers.
    pub async fn reachable(&self) -> bool {
        self.pool.launcher().reachable().await
    }
}

#[async_trait::async_trait]
impl<L: Launcher> Runtime for PooledRuntime<L> {
    fn name(&self) -> &'static str {
        L::NAME
    }

    async fn invoke(
        &self,
        env: &Env,
        limits: &Limits,
        work: &Path,
        inv: Invocation,
    ) -> Result<InvokeResult, RunnerError> {
        let started = Instant::now();
        let key = WorkerKey {
            tenant: inv.tenant.clone(),
            ..self.pool.launcher().key(env, &inv.root, limits)
        };
        // A warm worker killed between invocations costs one retry, not a failure.
        for _ in 0..2 {
            let (mut worker, cold) = match self.pool.checkout(&key, env, limits).await {
                Ok(w) => w,
                Err(e) if !self.pool.launcher().reachable().await => {
                    return Err(RunnerError::EngineLost(format!(
                        "its engine does not answer: {e}"
                    )));
                }
                Err(e) => return Err(e),
            };
            let done = exchange(self.pool.launcher(), &mut worker, work, &inv, limits).await;
            match done {
                Ok(Exchanged::Done {
                    outcome,
                    log,
                    healthy,
                }) => {
                    if healthy {
                        self.pool.checkin(key, worker).await;
                    } else {
                        self.pool.discard(worker).await;
                    }
                    return Ok(InvokeResult {
                        outcome,
                        log,
                        duration: started.elapsed(),
                        cold,
                    });
                }
                Ok(Exchanged::NotSent) => {
                    self.pool.discard(worker).await;
                    if cold {
                        return Err(RunnerError::Worker(format!(
                            "cannot send to a new {}",
                            L::NOUN
                        )));
                    }
                }
                Err(e) => {
                    self.pool.discard(worker).await;
                    return Err(e);
                }
            }
        }
        Err(RunnerError::Worker(format!(
            "no {} could take the call",
            L::NOUN
        )))
    }

    fn describe(&self) -> String {
        self.pool
            .launcher()
            .describe(self.pool.live(), self.pool.idle())
    }

    async fn shutdown(&self) {
        self.pool.shutdown().await;
    }
}
