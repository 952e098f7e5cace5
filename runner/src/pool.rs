//! The warm pool: workers kept between calls, by [`WorkerKey`] (environment and
//! limits), so that a warm call starts no worker and imports nothing it already has.
//!
//! A call checks a worker out (a warm one when there is one, else a new one from the
//! launcher, which must say it is ready) and hands it back or discards it. The pool
//! keeps its limits: at most `max_workers` alive at once, idle or busy (a full pool
//! stops its oldest idle worker to make room, or waits), at most `max_idle` idle per
//! key, and none idle longer than `idle_timeout`. Workers whose output ended while they
//! waited are dropped instead of handed out.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::env::Env;
use crate::error::RunnerError;
use crate::runtime::Limits;
use crate::worker::{Launcher, Worker, WorkerKey, tail};

/// The limits of a pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Stop a worker idle for this long.
    pub idle_timeout: Duration,
    /// At most this many workers at once, idle or busy (`None`: no limit).
    pub max_workers: Option<usize>,
    /// At most this many idle workers per environment and limits (`None`: no limit).
    pub max_idle: Option<usize>,
}

struct Idle<H> {
    worker: Worker<H>,
    since: Instant,
}

/// Which idle workers [`Pool::evict`] stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evict {
    /// Those idle past the idle timeout, or gone.
    Expired,
    /// All of them.
    All,
}

pub(crate) struct Pool<L: Launcher> {
    launcher: Arc<L>,
    config: PoolConfig,
    idle: Mutex<HashMap<WorkerKey, Vec<Idle<L::Handle>>>>,
    /// One permit per live worker; without `max_workers`, more permits than can be used.
    slots: Arc<Semaphore>,
    capacity: usize,
    /// Told when a worker comes back to the pool, to calls waiting for a worker.
    returned: Notify,
}

impl<L: Launcher> Pool<L> {
    pub(crate) fn new(launcher: L, config: PoolConfig) -> Pool<L> {
        let capacity = config
            .max_workers
            .map_or(Semaphore::MAX_PERMITS, |n| n.max(1));
        Pool {
            launcher: Arc::new(launcher),
            config,
            idle: Mutex::new(HashMap::new()),
            slots: Arc::new(Semaphore::new(capacity)),
            capacity,
            returned: Notify::new(),
        }
    }

    pub(crate) fn launcher(&self) -> &L {
        &self.launcher
    }

    /// A worker for `key`: a warm one (`cold` false), or a new one.
    pub(crate) async fn checkout(
        &self,
        key: &WorkerKey,
        env: &Env,
        limits: &Limits,
    ) -> Result<(Worker<L::Handle>, bool), RunnerError> {
        loop {
            if let Some(w) = self.take_warm(key) {
                return Ok((w, false));
            }
            // A slot, freeing an idle worker of another kind if the pool is full.
            if let Ok(p) = self.slots.clone().try_acquire_owned() {
                return Ok((self.start(env, &key.code, limits, p).await?, true));
            }
            // (Not one of this key: one checked in since is this call's to take.)
            if self.evict_oldest_but(key).await {
                continue;
            }
            // Every slot is busy: wait for a worker to come back (a warm one of this
            // key, or an idle one to stop) or for a slot to free.
            let back = self.returned.notified();
            tokio::pin!(back);
            back.as_mut().enable();
            if self.idle() > 0 {
                continue;
            }
            tokio::select! {
                () = &mut back => {}
                p = self.slots.clone().acquire_owned() => {
                    let p = p.map_err(|_| {
                        RunnerError::Worker(format!("the {} pool is closed", L::NOUN))
                    })?;
                    return Ok((self.start(env, &key.code, limits, p).await?, true));
                }
            }
        }
    }

    /// Hands a healthy worker back, or stops it when its key has idle workers enough.
    pub(crate) async fn checkin(&self, key: WorkerKey, worker: Worker<L::Handle>) {
        let max_idle = self.config.max_idle.unwrap_or(usize::MAX);
        let surplus = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            let list = idle.entry(key).or_default();
            if list.len() < max_idle {
                list.push(Idle {
                    worker,
                    since: Instant::now(),
                });
                None
            } else {
                Some(worker)
            }
        };
        self.returned.notify_waiters();
        if let Some(w) = surplus {
            self.launcher.stop(w).await;
        }
    }

    /// Stops a worker that must not be used again.
    pub(crate) async fn discard(&self, worker: Worker<L::Handle>) {
        self.launcher.stop(worker).await;
    }

    /// Stops idle workers; whether there were any.
    pub(crate) async fn evict(&self, which: Evict) -> bool {
        let timeout = self.config.idle_timeout;
        let mut gone = Vec::new();
        {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            match which {
                Evict::Expired => {
                    for v in idle.values_mut() {
                        let (keep, old): (Vec<_>, Vec<_>) = v
                            .drain(..)
                            .partition(|w| w.since.elapsed() < timeout && !w.worker.ended());
                        *v = keep;
                        gone.extend(old.into_iter().map(|w| w.worker));
                    }
                }
                Evict::All => {
                    gone.extend(idle.drain().flat_map(|(_, v)| v).map(|w| w.worker));
                }
            }
        }
        let any = !gone.is_empty();
        for w in gone {
            self.launcher.stop(w).await;
        }
        any
    }

    /// Stops the idle worker idle the longest, unless it is of `key` (then the caller
    /// takes it); whether one was stopped.
    async fn evict_oldest_but(&self, key: &WorkerKey) -> bool {
        let gone = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            let oldest = idle
                .iter()
                .filter(|(k, _)| *k != key)
                .flat_map(|(k, v)| v.iter().enumerate().map(move |(i, w)| (w.since, k, i)))
                .min_by_key(|(t, _, _)| *t)
                .map(|(_, k, i)| (k.clone(), i));
            oldest.and_then(|(k, i)| idle.get_mut(&k).map(|v| v.remove(i).worker))
        };
        match gone {
            Some(w) => {
                self.launcher.stop(w).await;
                true
            }
            None => false,
        }
    }

    /// Stops every idle worker, then whatever else the launcher made.
    pub(crate) async fn shutdown(&self) {
        self.evict(Evict::All).await;
        self.launcher.shutdown().await;
    }

    /// How many workers wait warm.
    pub(crate) fn idle(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(Vec::len)
            .sum()
    }

    /// How many workers of `key` wait warm.
    pub(crate) fn idle_for(&self, key: &WorkerKey) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .map_or(0, |v| v.iter().filter(|w| !w.worker.ended()).count())
    }

    /// How many workers are alive, idle or busy.
    pub(crate) fn live(&self) -> usize {
        self.capacity - self.slots.available_permits()
    }

    /// A warm worker of `key` still alive; gone ones found on the way are stopped in the
    /// background, so that the call does not wait for them.
    fn take_warm(&self, key: &WorkerKey) -> Option<Worker<L::Handle>> {
        let mut gone = Vec::new();
        let found = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            let list = idle.get_mut(key);
            let mut found = None;
            if let Some(list) = list {
                while let Some(w) = list.pop() {
                    if !w.worker.ended() {
                        found = Some(w.worker);
                        break;
                    }
                    gone.push(w.worker);
                }
            }
            found
        };
        if !gone.is_empty() {
            let launcher = self.launcher.clone();
            tokio::spawn(async move {
                for w in gone {
                    launcher.stop(w).await;
                }
            });
        }
        found
    }

    /// A new worker in slot `permit`, once it said it is ready.
    async fn start(
        &self,
        env: &Env,
        code: &Path,
        limits: &Limits,
        permit: OwnedSemaphorePermit,
    ) -> Result<Worker<L::Handle>, RunnerError> {
        let mut worker = self.launcher.start(env, code, limits).await?;
        worker.permit = Some(permit);
        if worker.ready(L::READY_TIMEOUT).await {
            return Ok(worker);
        }
        let log = worker.log().since(0);
        self.launcher.stop(worker).await;
        Err(RunnerError::Worker(format!(
            "{}:\n{}",
            L::NOT_STARTED,
            tail(&log, 20)
        )))
    }
}
