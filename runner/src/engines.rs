//! Several engines as one [`Runtime`] (`--docker-host` given more than once): a call
//! goes to the engine with the lowest load, counting its running calls against its warm
//! workers for the call (so a warm worker draws the call, and a crowd of calls spreads
//! once the warm ones are taken); an engine that stops answering (a call lost with it,
//! or two failed pings) is taken out of placement until it answers again with nothing
//! of ours running, and a call it lost is run once more on another engine.
//!
//! A call has no effect outside its own folder (a worker has no network), and the
//! exchange puts a lost call's folder back as it was sent (nothing that landed from the
//! lost engine stays), so running it again elsewhere repeats nothing.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use crate::env::Env;
use crate::error::RunnerError;
use crate::pooled::PooledRuntime;
use crate::protocol::Invocation;
use crate::runtime::{InvokeResult, Limits, Runtime};
use crate::worker::Launcher;

/// How often engines out of placement are asked whether they answer again.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// What placement needs of one engine's runtime.
#[async_trait::async_trait]
pub trait Placeable: Runtime {
    /// How many workers for this call wait warm there.
    fn warm(&self, env: &Env, code: &Path, limits: &Limits) -> usize;
    /// Whether the engine answers.
    async fn answers(&self) -> bool;
    /// Forgets the workers of an engine that stopped answering (they are gone), and
    /// removes what is left of them there, before it takes calls again; whether
    /// nothing is left (an engine still restoring its containers may keep some).
    async fn reset(&self) -> bool;
}

#[async_trait::async_trait]
impl<L: Launcher> Placeable for PooledRuntime<L> {
    fn warm(&self, env: &Env, code: &Path, limits: &Limits) -> usize {
        self.warm_for(env, code, limits)
    }

    async fn answers(&self) -> bool {
        self.reachable().await
    }

    async fn reset(&self) -> bool {
        self.shutdown().await;
        self.launcher().cleared().await
    }
}

/// One engine of several.
struct Member {
    /// Where it is (its URL).
    name: String,
    rt: Arc<dyn Placeable>,
    up: AtomicBool,
    /// Calls running there now.
    calls: AtomicUsize,
    /// Why and since when it is out of placement.
    down: Mutex<Option<(SystemTime, String)>>,
    /// Pings missed in a row while in placement.
    missed: AtomicUsize,
    /// One recovery at a time.
    recovering: tokio::sync::Mutex<()>,
}

impl Member {
    fn take_down(&self, why: &str) {
        let mut d = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        if self.up.swap(false, Ordering::AcqRel) || d.is_none() {
            tracing::warn!(engine = %self.name, "engine out of placement: {why}");
            *d = Some((SystemTime::now(), why.to_string()));
        }
    }

    /// An engine in placement that misses two pings in a row leaves it (an engine gone
    /// from the network ends no stream).
    async fn check(&self) {
        if !self.up.load(Ordering::Acquire) {
            return;
        }
        if self.rt.answers().await {
            self.missed.store(0, Ordering::Release);
        } else if self.missed.fetch_add(1, Ordering::AcqRel) + 1 >= 2 {
            self.take_down("it does not answer its pings");
        }
    }

    /// Takes the engine back when it answers again and none of its calls still runs
    /// (a reset removes every container of ours there); whether it is up.
    async fn probe(&self) -> bool {
        if self.up.load(Ordering::Acquire) {
            return true;
        }
        let _one = self.recovering.lock().await;
        if self.up.load(Ordering::Acquire) {
            return true;
        }
        if self.calls.load(Ordering::Acquire) > 0
            || !self.rt.answers().await
            || !self.rt.reset().await
        {
            return false;
        }
        self.missed.store(0, Ordering::Release);
        *self.down.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.up.store(true, Ordering::Release);
        tracing::info!(engine = %self.name, "engine answers again: back in placement");
        true
    }
}

/// Counts a call on an engine for as long as it runs.
struct Busy<'a>(&'a AtomicUsize);

impl<'a> Busy<'a> {
    fn new(n: &'a AtomicUsize) -> Busy<'a> {
        n.fetch_add(1, Ordering::AcqRel);
        Busy(n)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Several engines, one runtime.
pub struct Engines {
    members: Vec<Member>,
    /// Where the search for the least loaded engine starts (turns, for ties).
    turn: AtomicUsize,
    name: &'static str,
}

impl Engines {
    /// The engines, by their names (URLs); those out of placement are probed in the
    /// background for as long as the runtime lives (when made inside a Tokio runtime).
    pub fn new(engines: Vec<(String, Arc<dyn Placeable>)>) -> Arc<Engines> {
        let name = engines.first().map_or("docker", |(_, rt)| rt.name());
        let members = engines
            .into_iter()
            .map(|(name, rt)| Member {
                name,
                rt,
                up: AtomicBool::new(true),
                calls: AtomicUsize::new(0),
                down: Mutex::new(None),
                missed: AtomicUsize::new(0),
                recovering: tokio::sync::Mutex::new(()),
            })
            .collect();
        let engines = Arc::new(Engines {
            members,
            turn: AtomicUsize::new(0),
            name,
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let weak: Weak<Engines> = Arc::downgrade(&engines);
            handle.spawn(async move {
                loop {
                    tokio::time::sleep(PROBE_EVERY).await;
                    let Some(e) = weak.upgrade() else { return };
                    for m in &e.members {
                        m.check().await;
                        m.probe().await;
                    }
                }
            });
        }
        engines
    }

    /// Whether engine `i` is in placement.
    pub fn is_up(&self, i: usize) -> bool {
        self.members[i].up.load(Ordering::Acquire)
    }

    /// The engine for a call: among those in placement (other than `not`), one with a
    /// warm worker for it, else any; the least busy of them, ties taken in turn. When
    /// none is in placement, each is asked whether it answers again.
    async fn place(
        &self,
        env: &Env,
        code: &Path,
        limits: &Limits,
        not: Option<usize>,
    ) -> Option<usize> {
        if let Some(i) = self.pick(env, code, limits, not) {
            return Some(i);
        }
        for (i, m) in self.members.iter().enumerate() {
            if Some(i) != not {
                m.probe().await;
            }
        }
        self.pick(env, code, limits, not)
    }

    fn pick(&self, env: &Env, code: &Path, limits: &Limits, not: Option<usize>) -> Option<usize> {
        let n = self.members.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| (start + k) % n)
            .filter(|i| Some(*i) != not && self.is_up(*i))
            .min_by_key(|i| {
                let m = &self.members[*i];
                m.calls.load(Ordering::Acquire) as i64 - m.rt.warm(env, code, limits) as i64
            })
    }

    fn none_answers(&self) -> RunnerError {
        let why: Vec<String> = self
            .members
            .iter()
            .map(|m| {
                let d = m.down.lock().unwrap_or_else(PoisonError::into_inner);
                match d.as_ref() {
                    Some((_, why)) => format!("{} ({why})", m.name),
                    None => m.name.clone(),
                }
            })
            .collect();
        RunnerError::Sandbox(format!(
            "no {} engine answers: {}",
            self.name,
            why.join("; ")
        ))
    }
}

#[async_trait::async_trait]
impl Runtime for Engines {
    fn name(&self) -> &'static str {
        self.name
    }

    async fn invoke(
        &self,
        env: &Env,
        limits: &Limits,
        work: &Path,
        inv: Invocation,
    ) -> Result<InvokeResult, RunnerError> {
        let Some(first) = self.place(env, &inv.root, limits, None).await else {
            return Err(self.none_answers());
        };
        let m = &self.members[first];
        let lost = {
            let _busy = Busy::new(&m.calls);
            match m.rt.invoke(env, limits, work, inv.clone()).await {
                Err(RunnerError::EngineLost(why)) => why,
                other => return other,
            }
        };
        let lost = format!("the engine at {} {lost}", m.name);
        m.take_down(&lost);
        // Once more, elsewhere.
        let Some(second) = self.place(env, &inv.root, limits, Some(first)).await else {
            return Err(RunnerError::EngineLost(format!(
                "{lost}; no other engine answers"
            )));
        };
        let other = &self.members[second];
        let _busy = Busy::new(&other.calls);
        match other.rt.invoke(env, limits, work, inv).await {
            Ok(mut r) => {
                r.log = format!("--- lh: {lost}; run again on {} ---\n{}", other.name, r.log);
                Ok(r)
            }
            Err(RunnerError::EngineLost(why)) => {
                let again = format!("the engine at {} {why}", other.name);
                other.take_down(&again);
                Err(RunnerError::EngineLost(format!("{lost}; then {again}")))
            }
            Err(e) => Err(e),
        }
    }

    fn describe(&self) -> String {
        let parts: Vec<String> = self
            .members
            .iter()
            .map(|m| {
                let d = m.down.lock().unwrap_or_else(PoisonError::into_inner);
                match d.as_ref() {
                    Some((since, why)) => format!(
                        "{}: out of placement for {} s ({why})",
                        m.name,
                        since.elapsed().unwrap_or_default().as_secs()
                    ),
                    None => format!("{}: {}", m.name, m.rt.describe()),
                }
            })
            .collect();
        format!("{} engines; {}", self.members.len(), parts.join("; "))
    }

    async fn shutdown(&self) {
        for m in &self.members {
            m.rt.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{InvocationKind, Outcome};
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    /// An engine whose answers the test sets: whether it answers, whether it has a warm
    /// worker, and whether a call is lost with it.
    #[derive(Default)]
    struct Fake {
        answers: AtomicBool,
        warm: AtomicBool,
        loses: AtomicBool,
        calls: AtomicUsize,
        resets: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Runtime for Fake {
        fn name(&self) -> &'static str {
            "docker"
        }
        async fn invoke(
            &self,
            _env: &Env,
            _limits: &Limits,
            _work: &Path,
            _inv: Invocation,
        ) -> Result<InvokeResult, RunnerError> {
            self.calls.fetch_add(1, Ordering::AcqRel);
            tokio::time::sleep(Duration::from_millis(20)).await;
            if self.loses.load(Ordering::Acquire) {
                return Err(RunnerError::EngineLost("stopped answering".into()));
            }
            Ok(InvokeResult {
                outcome: Outcome::Model { rows: 1 },
                log: String::new(),
                duration: Duration::ZERO,
                cold: false,
            })
        }
        fn describe(&self) -> String {
            "fake".into()
        }
        async fn shutdown(&self) {}
    }

    #[async_trait::async_trait]
    impl Placeable for Fake {
        fn warm(&self, _env: &Env, _code: &Path, _limits: &Limits) -> usize {
            usize::from(self.warm.load(Ordering::Acquire))
        }
        async fn answers(&self) -> bool {
            self.answers.load(Ordering::Acquire)
        }
        async fn reset(&self) -> bool {
            self.resets.fetch_add(1, Ordering::AcqRel);
            true
        }
    }

    fn fake() -> Arc<Fake> {
        let f = Fake::default();
        f.answers.store(true, Ordering::Release);
        Arc::new(f)
    }

    fn inv() -> Invocation {
        Invocation {
            id: "1".into(),
            kind: InvocationKind::Model,
            file: PathBuf::from("m.py"),
            function: "f".into(),
            root: PathBuf::from("/code"),
            inputs: BTreeMap::new(),
            params: BTreeMap::new(),
            output: PathBuf::from("out"),
            env: Default::default(),
            live: None,
            tenant: String::new(),
        }
    }

    fn env() -> Env {
        Env {
            key: "k".into(),
            dir: PathBuf::from("/env"),
            python: PathBuf::from("/env/bin/python"),
            base_prefix: PathBuf::from("/usr"),
            python_version: "3.11".into(),
            lock: String::new(),
        }
    }

    async fn call(e: &Engines) -> Result<InvokeResult, RunnerError> {
        e.invoke(&env(), &Limits::default(), Path::new("/w"), inv())
            .await
    }

    #[tokio::test]
    async fn warm_first_else_the_least_busy_and_a_lost_call_runs_once_elsewhere() {
        let (a, b) = (fake(), fake());
        let e = Engines::new(vec![
            ("a".into(), a.clone() as Arc<dyn Placeable>),
            ("b".into(), b.clone() as Arc<dyn Placeable>),
        ]);
        // The warm engine takes every call.
        b.warm.store(true, Ordering::Release);
        for _ in 0..4 {
            call(&e).await.unwrap();
        }
        assert_eq!(b.calls.load(Ordering::Acquire), 4);
        assert_eq!(a.calls.load(Ordering::Acquire), 0);
        // A crowd of calls is not piled onto the one warm engine.
        let all: Vec<_> = (0..4).map(|_| call(&e)).collect();
        futures::future::join_all(all).await;
        assert!(
            a.calls.load(Ordering::Acquire) >= 1,
            "spread once the warm one is taken"
        );
        a.calls.store(0, Ordering::Release);
        b.calls.store(4, Ordering::Release);
        // Neither warm: calls at once spread over both.
        b.warm.store(false, Ordering::Release);
        let all: Vec<_> = (0..6).map(|_| call(&e)).collect();
        futures::future::join_all(all).await;
        assert_eq!(a.calls.load(Ordering::Acquire), 3);
        assert_eq!(b.calls.load(Ordering::Acquire), 7);
        // An engine that loses its call: run once more on the other, said in the log,
        // and out of placement.
        a.loses.store(true, Ordering::Release);
        a.answers.store(false, Ordering::Release);
        let (before_a, before_b) = (
            a.calls.load(Ordering::Acquire),
            b.calls.load(Ordering::Acquire),
        );
        for _ in 0..3 {
            let r = call(&e).await.unwrap();
            assert_eq!(r.outcome, Outcome::Model { rows: 1 });
        }
        assert!(!e.is_up(0));
        assert!(
            a.calls.load(Ordering::Acquire) - before_a <= 1,
            "a is out of placement"
        );
        assert!(b.calls.load(Ordering::Acquire) - before_b >= 3);
        assert!(
            e.describe().contains("a: out of placement"),
            "{}",
            e.describe()
        );
        // Both lost: a clear error naming both.
        b.loses.store(true, Ordering::Release);
        b.answers.store(false, Ordering::Release);
        e.members[0].up.store(true, Ordering::Release);
        let err = call(&e).await.unwrap_err().to_string();
        assert!(err.contains("the engine at"), "{err}");
        let err = call(&e).await.unwrap_err().to_string();
        assert!(
            err.contains("no docker engine answers: a (") && err.contains("b ("),
            "{err}"
        );
        // An engine that answers again is reset and back in placement.
        a.loses.store(false, Ordering::Release);
        a.answers.store(true, Ordering::Release);
        call(&e).await.unwrap();
        assert!(e.is_up(0));
        assert!(a.resets.load(Ordering::Acquire) >= 1);
    }
}
