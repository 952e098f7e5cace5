//! The exchange of one invocation with a checked-out worker, the same for every runtime:
//! the invocation's folder moves into the worker's folder (or, for a worker that shares
//! no disk with the server, its files follow the request on the worker's channel), one
//! JSON line goes to the worker, its answer is awaited within the function's timeout,
//! the log the call wrote is sliced out, the answer becomes an [`Outcome`], and the
//! folder moves back (or the files the call wrote follow the answer). The result says
//! whether the worker may go back to the pool.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::RunnerError;
use crate::protocol::{Answer, Invocation, Outcome};
use crate::runtime::{DEFAULT_DISK_BYTES, Limits};
use crate::transfer::Sent;
use crate::worker::{Launcher, Worker, tail};

/// How an exchange ended.
#[derive(Debug)]
pub(crate) enum Exchanged {
    /// The worker could not take the request: it was gone before the call (nothing ran).
    NotSent,
    /// The call ran: its outcome and log, and whether the worker is fit for another
    /// call (otherwise it is stopped: it timed out, died or answered nonsense).
    Done {
        outcome: Outcome,
        log: String,
        healthy: bool,
    },
}

/// The worker's input was closed: it was gone before the call.
struct NotSent;

/// How often the size of a worker's folder is measured during a call.
const DISK_CHECK_EVERY: Duration = Duration::from_millis(200);

/// How a call ended before its answer.
enum Stopped {
    /// It ran past its timeout.
    Timeout,
    /// It wrote more than its disk limit into the worker's folder.
    Disk(u64),
    /// What it holds in the worker's folder could not be measured (more handles than
    /// are looked at, a folder it cannot be read, a freeze that did not finish).
    Unmeasurable,
}

/// Runs `inv`, whose folder is `work`, on `worker` within `limits` (its timeout, and the
/// most it may write into the worker's folder, measured as it runs).
pub(crate) async fn exchange<L: Launcher>(
    launcher: &L,
    worker: &mut Worker<L::Handle>,
    work: &Path,
    inv: &Invocation,
    limits: &Limits,
) -> Result<Exchanged, RunnerError> {
    let timeout = limits.timeout;
    let folder = format!("inv-{}", inv.id);
    let channel = launcher.over_channel();
    let (line, files) = request(launcher, worker, work, inv, &folder, limits)?;
    if channel {
        worker.expect_files(work, limits.disk_bytes.unwrap_or(DEFAULT_DISK_BYTES));
    } else {
        // The invocation's folder moves into the worker's own folder for the call.
        launcher.send(worker, work, &folder).await?;
    }
    let log_start = worker.log().len();
    let dir = worker.dir.clone();
    let tasks = launcher.tasks(&worker.handle);
    let measured = launcher.measures_folder();
    let watch = async {
        let Some(max) = limits.disk_bytes.filter(|_| measured) else {
            return std::future::pending::<Stopped>().await;
        };
        loop {
            tokio::time::sleep(DISK_CHECK_EVERY).await;
            let dir = dir.clone();
            let tasks = tasks.clone();
            let used = tokio::task::spawn_blocking(move || dir_size(&dir, tasks.as_deref()))
                .await
                .unwrap_or(u64::MAX);
            if used == u64::MAX {
                return Stopped::Unmeasurable;
            }
            if used > max {
                return Stopped::Disk(max);
            }
        }
    };
    // The call's log as it grows, for whoever follows it.
    let log = worker.log().clone();
    let live = async {
        let Some(to) = inv.live.as_ref() else {
            return std::future::pending::<Stopped>().await;
        };
        let mut seen = log_start;
        loop {
            tokio::time::sleep(crate::protocol::LIVE_LOG_EVERY).await;
            let now = log.len();
            if now != seen {
                seen = now;
                to.send_replace(crate::protocol::last(
                    log.since(log_start),
                    crate::protocol::MAX_CALL_LOG,
                ));
            }
        }
    };
    let secrets = work.join(crate::protocol::SECRETS_FILE);
    let call = async {
        // The worker reads every file before the call starts: a worker gone on the way
        // ran nothing.
        let sent = worker.send_with_files(&line, &files).await;
        if channel {
            // The call's secrets left this host's disk.
            let _ = std::fs::remove_file(&secrets);
        }
        sent.map_err(|_| NotSent)?;
        Ok(worker.answer(&inv.id).await)
    };
    let reply = tokio::select! {
        r = tokio::time::timeout(timeout, call) => r.map_err(|_| Stopped::Timeout),
        stopped = watch => Err(stopped),
        stopped = live => Err(stopped),
    };
    if channel {
        let _ = std::fs::remove_file(&secrets);
    }
    let answer = match reply {
        Ok(Err(NotSent)) => {
            if !channel {
                let _ = launcher.receive(worker, &folder, work).await;
            }
            return Ok(Exchanged::NotSent);
        }
        Ok(Ok(answer)) => Ok(answer),
        Err(stopped) => Err(stopped),
    };
    // Give the log reader a moment to drain what the function printed last.
    tokio::time::sleep(Duration::from_millis(2)).await;
    // What the call printed, as its result keeps it (a node's log is stored with its run).
    let log = crate::protocol::last(worker.log().since(log_start), crate::protocol::MAX_CALL_LOG);
    // What became of the files the answer listed (over the channel).
    let landed = if channel { worker.landed() } else { None };
    let back = if channel {
        // An answer that listed no files brings nothing back; one whose files could not
        // be written here fails.
        landed
            .clone()
            .unwrap_or(Ok(()))
            .map_err(std::io::Error::other)
    } else {
        launcher.receive(worker, &folder, work).await
    };
    // A worker whose output ended, or a call past its timeout, while its engine does not
    // answer: lost with the engine (the function did not fail); the call's folder is
    // as it was sent, for another engine.
    let gone =
        matches!(answer, Ok(None) | Err(Stopped::Timeout)) && !matches!(landed, Some(Err(_)));
    if gone && !launcher.reachable().await {
        if channel {
            restore(work, &files);
        }
        return Err(RunnerError::EngineLost(format!(
            "its engine stopped answering during the call, and the {} is lost with it",
            L::NOUN
        )));
    }
    let (outcome, healthy) = match answer {
        Ok(Some(line)) => match serde_json::from_str::<Answer>(&line) {
            Ok(a) if a.id.as_deref() == Some(inv.id.as_str()) => {
                let retires = a.retires == Some(true);
                (a.outcome(), !retires)
            }
            _ => (
                Outcome::Failed {
                    // Bounded as every failure is: the line is the call's to write.
                    error: crate::protocol::bounded(
                        format!("the worker answered garbage: {}", tail(&line, 3)),
                        crate::protocol::MAX_MESSAGE,
                    ),
                    traceback: String::new(),
                },
                false,
            ),
        },
        Ok(None) => {
            // The output ended: the worker died during the call, or sent what cannot be
            // taken.
            let why = match landed {
                Some(Err(e)) => e,
                _ => launcher.why_dead(&mut worker.handle).await,
            };
            (
                Outcome::Failed {
                    error: crate::protocol::bounded(
                        format!("the {} died: {why}", L::NOUN),
                        crate::protocol::MAX_MESSAGE,
                    ),
                    traceback: crate::protocol::bounded(
                        tail(&log, 30),
                        crate::protocol::MAX_TRACEBACK,
                    ),
                },
                false,
            )
        }
        Err(Stopped::Timeout) => (Outcome::timed_out(timeout), false),
        Err(Stopped::Disk(max)) => (
            Outcome::Failed {
                error: format!(
                    "wrote more than {} MiB into its folder and was stopped",
                    max >> 20
                ),
                traceback: String::new(),
            },
            false,
        ),
        Err(Stopped::Unmeasurable) => (
            Outcome::Failed {
                error: "was stopped: what it holds in its folder could not be measured (more \
                        open files or threads than the measure looks at, a folder it made \
                        unreadable, or processes that would not pause)"
                    .into(),
                traceback: String::new(),
            },
            false,
        ),
    };
    // A folder that did not come back (an engine gone mid-call) fails a call that
    // succeeded; a failure keeps its own reason (out of memory, a timeout).
    let (outcome, healthy) = match back {
        Ok(()) => (outcome, healthy),
        Err(_) if matches!(outcome, Outcome::Failed { .. }) => (outcome, false),
        Err(e) => (
            Outcome::Failed {
                error: format!(
                    "the invocation's folder could not be brought back from the {}: {e}",
                    L::NOUN
                ),
                traceback: String::new(),
            },
            false,
        ),
    };
    Ok(Exchanged::Done {
        outcome,
        log,
        healthy,
    })
}

/// Puts the invocation's folder back as it was sent (`files`): whatever landed from a
/// lost call goes, so that a call run again elsewhere finds only its inputs.
fn restore(work: &Path, files: &[(Sent, PathBuf)]) {
    let keep: std::collections::HashSet<&Path> = files.iter().map(|(_, p)| p.as_path()).collect();
    if let Ok(now) = crate::transfer::listing(work) {
        for (_, p) in now {
            if !keep.contains(p.as_path()) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// The request line, with paths as the worker sees them: the invocation's folder inside
/// the worker's folder, the code snapshot where the launcher mounts it.
///
/// For a worker reached over its channel, the line also lists the folder's files, whose
/// bytes follow it (returned with where they are here), and asks for the files the call
/// writes back, at most the call's disk limit.
fn request<L: Launcher>(
    launcher: &L,
    worker: &Worker<L::Handle>,
    work: &Path,
    inv: &Invocation,
    folder: &str,
    limits: &Limits,
) -> Result<(String, Vec<(Sent, PathBuf)>), RunnerError> {
    let seen = launcher.worker_path(&worker.dir).join(folder);
    let code = launcher.code_path(&inv.root);
    let view = |p: &Path| -> PathBuf {
        if let Ok(rel) = p.strip_prefix(work) {
            seen.join(rel)
        } else if let Ok(rel) = p.strip_prefix(&inv.root) {
            code.join(rel)
        } else {
            p.to_path_buf()
        }
    };
    let mut req = inv.clone();
    req.file = view(&inv.file);
    req.root = view(&inv.root);
    req.output = view(&inv.output);
    for p in req.inputs.values_mut() {
        *p = view(p);
    }
    let mut value = serde_json::to_value(&req).map_err(|e| RunnerError::Worker(e.to_string()))?;
    if !inv.env.is_empty() {
        // The call's process reads the secrets from its own folder and removes the file;
        // the request line, which the worker's parent reads, never holds them.
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let file = work.join(crate::protocol::SECRETS_FILE);
        // Truncated if there: a call retried on another worker writes it again.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&file)?;
        f.write_all(
            &serde_json::to_vec(&inv.env).map_err(|e| RunnerError::Worker(e.to_string()))?,
        )?;
        value["secrets_file"] = serde_json::json!(view(&file));
    }
    let mut files = Vec::new();
    if launcher.over_channel() {
        files = crate::transfer::listing(work)?;
        let listed: Vec<&Sent> = files.iter().map(|(s, _)| s).collect();
        value["channel"] = serde_json::json!({
            "folder": folder,
            "files": listed,
            "return_max": limits.disk_bytes.unwrap_or(DEFAULT_DISK_BYTES),
        });
    }
    let line = serde_json::to_string(&value).map_err(|e| RunnerError::Worker(e.to_string()))?;
    Ok((line + "\n", files))
}

/// What the worker's folder `dir` holds on disk, as a build's folders are measured
/// (`env::disk_used_still`, with the worker's processes stopped meanwhile): each file
/// once, every entry at least a block (countless empty files count), what the worker's
/// `tasks` removed but still hold, and a folder that cannot be read as full (a call must
/// not hide its files from the measure); nothing once the worker's folder is gone.
fn dir_size(dir: &Path, tasks: Option<&Path>) -> u64 {
    if !dir.exists() {
        return 0;
    }
    crate::env::disk_used_still(&[dir.to_path_buf()], tasks)
}
