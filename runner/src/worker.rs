//! A warm worker and the [`Launcher`] that starts and stops it: the only part a runtime
//! writes itself.
//!
//! A [`Worker`] is a running worker harness (`python/lh/_worker.py`) as the pool and the
//! exchange see it: a writer to its stdin, the JSON lines of its stdout, its stderr kept
//! in a bounded log, its folder on this host, and the launcher's handle on it (a
//! container id, a child process). A launcher builds one from the worker's pipes, either
//! with [`Worker::piped`] (a local process) or by feeding the [`Output`] of
//! [`Worker::wire`] itself (an attached container).

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use crate::env::Env;
use crate::error::RunnerError;
use crate::protocol::Answer;
use crate::runtime::Limits;

/// Beyond this much log, the older half is dropped: a chatty function must not exhaust
/// the server's memory.
const LOG_MAX: usize = 4 << 20;
/// How much of the log is kept when it is cut.
const LOG_KEEP: usize = 2 << 20;
/// The longest line of a worker's stderr held back for its end; longer goes to the log
/// in pieces.
const LINE_MAX: usize = 64 << 10;

/// What makes two workers interchangeable: the environment, the code snapshot (the only
/// code a worker sees), the limits they were started with and the tenant whose calls
/// they serve. The pool keeps warm workers by this key, so a worker never serves
/// another project's code, nor calls run with other grants.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkerKey {
    /// Whose grants its calls read with ([`crate::Invocation::tenant`]).
    pub tenant: String,
    pub env: String,
    /// The code snapshot's folder on this host.
    pub code: PathBuf,
    pub memory_bytes: Option<u64>,
    pub cpus_milli: Option<u32>,
    /// A container's folder on a remote engine is sized by it, and its files by it.
    pub disk_bytes: Option<u64>,
}

/// Starts and stops the workers of one kind of runtime. Everything else (the pool, the
/// exchange of an invocation, timeouts, logs, outcomes) is shared by `PooledRuntime`.
#[async_trait::async_trait]
pub trait Launcher: Send + Sync + 'static {
    /// What the launcher holds of a running worker: a container id, a child process.
    type Handle: Send + 'static;

    /// The runtime's name, as `Runtime::name` gives it.
    const NAME: &'static str;
    /// What one worker is called in messages (`container`, `worker`).
    const NOUN: &'static str;
    /// The first words of the error when a new worker never says it is ready.
    const NOT_STARTED: &'static str;
    /// How long a new worker may take to say it is ready.
    const READY_TIMEOUT: Duration;

    /// The pool a worker for `env`, the snapshot `code` and `limits` belongs to.
    fn key(&self, env: &Env, code: &Path, limits: &Limits) -> WorkerKey {
        WorkerKey {
            tenant: String::new(),
            env: env.key.clone(),
            code: code.to_path_buf(),
            memory_bytes: limits.memory_bytes,
            cpus_milli: limits.cpus_milli,
            disk_bytes: limits.disk_bytes,
        }
    }

    /// Starts a worker for `env` within `limits`, with a folder of its own and the code
    /// snapshot `code` (read-only, and no other); the caller waits for it to say it is
    /// ready.
    async fn start(
        &self,
        env: &Env,
        code: &Path,
        limits: &Limits,
    ) -> Result<Worker<Self::Handle>, RunnerError>;

    /// Stops a worker and removes its folder.
    async fn stop(&self, worker: Worker<Self::Handle>);

    /// Why a worker whose output ended stopped (out of memory, an exit status...).
    async fn why_dead(&self, handle: &mut Self::Handle) -> String;

    /// Where a worker sees `dir`, its folder on this host (there, unless mounted
    /// elsewhere).
    fn worker_path(&self, dir: &Path) -> PathBuf {
        dir.to_path_buf()
    }

    /// Where a worker started for the snapshot `code` (its folder on this host) sees it.
    fn code_path(&self, code: &Path) -> PathBuf {
        code.to_path_buf()
    }

    /// Makes an invocation's folder, just moved into a worker's folder, usable by the
    /// worker (a container's user must be able to write into it, say).
    fn hand_over(&self, _inside: &Path) -> std::io::Result<()> {
        Ok(())
    }

    /// Moves the invocation's folder `work` into the worker, as `folder` inside the
    /// worker's folder: a rename on this host; a launcher whose workers share no disk
    /// with the server sends it over the wire.
    async fn send(
        &self,
        worker: &mut Worker<Self::Handle>,
        work: &Path,
        folder: &str,
    ) -> std::io::Result<()> {
        let inside = worker.dir.join(folder);
        std::fs::rename(work, &inside)?;
        if let Err(e) = self.hand_over(&inside) {
            let _ = std::fs::rename(&inside, work);
            return Err(e);
        }
        Ok(())
    }

    /// Brings the invocation's folder back to `work` after the call, the function's
    /// output in it.
    async fn receive(
        &self,
        worker: &mut Worker<Self::Handle>,
        folder: &str,
        work: &Path,
    ) -> std::io::Result<()> {
        std::fs::rename(worker.dir.join(folder), work)?;
        crate::sandbox::take_back(work)
    }

    /// Whether an invocation's folder crosses the worker's own channel (its files after
    /// the request line on stdin, the files the call wrote after the answer on stdout)
    /// instead of [`Launcher::send`] and [`Launcher::receive`]: for workers that share no
    /// disk with the server, at no cost beyond the bytes themselves.
    fn over_channel(&self) -> bool {
        false
    }

    /// Whether the exchange measures the worker's folder on this host while a call runs
    /// (a launcher whose folders are elsewhere bounds them there).
    fn measures_folder(&self) -> bool {
        true
    }

    /// The file listing the worker's processes (a cgroup's `cgroup.procs`), whose files
    /// removed but still open count toward the call's disk; none where it is unknown.
    fn tasks(&self, _handle: &Self::Handle) -> Option<PathBuf> {
        None
    }

    /// Whether the place that runs the workers answers (a Docker engine's ping); a worker
    /// that ended while it does not was lost with it, the function did not fail.
    async fn reachable(&self) -> bool {
        true
    }

    /// A line about the runtime's state, given how many workers are alive (idle or
    /// busy) and how many of them wait warm.
    fn describe(&self, live: usize, idle: usize) -> String;

    /// Removes whatever the launcher made besides the pool's workers.
    async fn shutdown(&self) {}

    /// Housekeeping of what the launcher keeps besides workers (a remote engine's cache
    /// volumes), called every few seconds; the launcher decides when it is due.
    async fn tidy(&self) {}

    /// Whether nothing the launcher made is left (after [`Launcher::shutdown`]; an
    /// engine still restoring its containers may keep some a moment longer).
    async fn cleared(&self) -> bool {
        true
    }
}

/// A running worker, idle in the pool or checked out for a call.
pub struct Worker<H> {
    /// The launcher's handle on the worker.
    pub handle: H,
    /// The worker's folder on this host; an invocation's folder moves in for the call.
    pub dir: PathBuf,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    answers: mpsc::Receiver<String>,
    log: Log,
    ended: Arc<AtomicBool>,
    landing: Arc<Mutex<Channel>>,
    /// The pool's slot, held for as long as the worker lives.
    pub(crate) permit: Option<OwnedSemaphorePermit>,
}

impl<H> std::fmt::Debug for Worker<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("dir", &self.dir).finish()
    }
}

impl<H> Worker<H> {
    /// A worker whose stdin is `input`; the launcher feeds what the worker prints into
    /// the returned [`Output`].
    pub fn wire(
        handle: H,
        dir: PathBuf,
        input: Pin<Box<dyn AsyncWrite + Send>>,
    ) -> (Worker<H>, Output) {
        let (tx, answers) = mpsc::channel(MAX_QUEUED_LINES);
        let log = Log::default();
        let ended = Arc::new(AtomicBool::new(false));
        let landing = Arc::new(Mutex::new(Channel::default()));
        let output = Output {
            answers: Answers {
                pending: Vec::new(),
                skipping: false,
                tx: Some(tx),
                ended: ended.clone(),
                landing: landing.clone(),
                receiving: None,
            },
            log: LogSink {
                pending: Vec::new(),
                log: log.clone(),
            },
        };
        let worker = Worker {
            handle,
            dir,
            input,
            answers,
            log,
            ended,
            landing,
            permit: None,
        };
        (worker, output)
    }

    /// A worker whose stdin, stdout and stderr are pipes (a local process, say): two
    /// tasks read its stdout and stderr for as long as they stay open.
    pub fn piped(
        handle: H,
        dir: PathBuf,
        stdin: impl AsyncWrite + Send + 'static,
        stdout: impl AsyncRead + Send + Unpin + 'static,
        stderr: impl AsyncRead + Send + Unpin + 'static,
    ) -> Worker<H> {
        let (worker, output) = Worker::wire(handle, dir, Box::pin(stdin));
        let Output {
            mut answers,
            mut log,
        } = output;
        tokio::spawn(async move {
            pump(stdout, |bytes| answers.push(bytes)).await;
            answers.end();
        });
        tokio::spawn(async move {
            pump(stderr, |bytes| log.push(bytes)).await;
            log.end();
        });
        worker
    }

    /// Whether the worker's output ended: it is gone.
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Waits for the harness's first line, which says that it is ready.
    pub(crate) async fn ready(&mut self, timeout: Duration) -> bool {
        match tokio::time::timeout(timeout, self.answers.recv()).await {
            Ok(Some(line)) => {
                serde_json::from_str::<Answer>(&line).is_ok_and(|a| a.ready == Some(true))
            }
            _ => false,
        }
    }

    /// Writes a request line and then `size` bytes of each file (zeros make up for a
    /// file that shrank: the worker reads exactly the size it was told), flushed once: a
    /// small request is one write on the wire, not a line then files that wait on the
    /// peer's delayed acknowledgement.
    pub(crate) async fn send_with_files(
        &mut self,
        line: &str,
        files: &[(crate::transfer::Sent, PathBuf)],
    ) -> std::io::Result<()> {
        let mut out = tokio::io::BufWriter::with_capacity(256 << 10, &mut self.input);
        out.write_all(line.as_bytes()).await?;
        for (sent, path) in files {
            let file = tokio::fs::File::open(path).await?;
            let copied = tokio::io::copy(&mut file.take(sent.size), &mut out).await?;
            if copied < sent.size {
                let mut zeros = tokio::io::repeat(0).take(sent.size - copied);
                tokio::io::copy(&mut zeros, &mut out).await?;
            }
        }
        out.flush().await
    }

    /// The files listed by the next answer land in `dir`, at most `max_bytes` of them.
    pub(crate) fn expect_files(&self, dir: &Path, max_bytes: u64) {
        let mut c = self.landing.lock().unwrap_or_else(PoisonError::into_inner);
        c.expect = Some((dir.to_path_buf(), max_bytes));
        c.landed = None;
    }

    /// What became of the files the last answer listed (none: it listed none).
    pub(crate) fn landed(&self) -> Option<Result<(), String>> {
        let mut c = self.landing.lock().unwrap_or_else(PoisonError::into_inner);
        c.expect = None;
        c.landed.take()
    }

    /// The answer to invocation `id`, or `None` when the worker's output ended first.
    pub(crate) async fn answer(&mut self, id: &str) -> Option<String> {
        /// An answer's id, whatever else its line holds: a line with the call's id is
        /// its answer, and one of another shape fails the call (it was waited past,
        /// until the call's timeout).
        #[derive(serde::Deserialize)]
        struct Tagged {
            id: Option<String>,
        }
        // Skip stray lines (say, from a process the function forked) until our answer.
        loop {
            let line = self.answers.recv().await?;
            if serde_json::from_str::<Tagged>(&line).is_ok_and(|a| a.id.as_deref() == Some(id)) {
                return Some(line);
            }
        }
    }

    /// The worker's log so far.
    pub(crate) fn log(&self) -> &Log {
        &self.log
    }
}

/// The receiving ends of a worker's stdout and stderr, which its launcher feeds.
#[derive(Debug)]
pub struct Output {
    pub answers: Answers,
    pub log: LogSink,
}

impl Output {
    /// The worker's output ended: the rest of the log is kept, then the worker counts as
    /// gone.
    pub fn end(self) {
        self.log.end();
        self.answers.end();
    }
}

/// Lines of stdout kept until the worker's caller reads them; beyond that, stray
/// output (a process the function forked, writing while its worker sits idle) is
/// dropped rather than held in the server's memory.
const MAX_QUEUED_LINES: usize = 1024;

/// The longest line of stdout kept: an answer is far shorter; longer lines are stray.
const MAX_LINE: usize = 16 << 20;

/// Where the files an answer lists land, shared by a worker and its [`Answers`].
#[derive(Debug, Default)]
struct Channel {
    /// The folder the next answer's files go to, and the most they may hold.
    expect: Option<(PathBuf, u64)>,
    /// What became of the last answer's files.
    landed: Option<Result<(), String>>,
}

/// The part of an answer line that says files follow it.
#[derive(Deserialize)]
struct Announce {
    files: Option<Vec<crate::transfer::Sent>>,
}

/// Turns a worker's stdout into answer lines, and the files an answer lists (their bytes
/// follow its line) into files of the folder its caller expects them in: the line is
/// handed over once they all arrived. Dropping it marks the worker as gone.
#[derive(Debug)]
pub struct Answers {
    pending: Vec<u8>,
    /// In a line longer than [`MAX_LINE`], dropped up to its end.
    skipping: bool,
    /// None once the stream cannot be trusted (files nobody expected, a listing that
    /// leaves its folder): the worker counts as gone.
    tx: Option<mpsc::Sender<String>>,
    ended: Arc<AtomicBool>,
    landing: Arc<Mutex<Channel>>,
    /// An answer whose files are arriving.
    receiving: Option<(String, crate::transfer::Landing)>,
}

impl Answers {
    /// Takes bytes of stdout; each complete line becomes an answer.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.tx.is_some() {
            if let Some((_, landing)) = self.receiving.as_mut() {
                // Files written here: off the async threads where the runtime allows.
                let n = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                    Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                        tokio::task::block_in_place(|| landing.take(bytes))
                    }
                    _ => landing.take(bytes),
                };
                bytes = &bytes[n..];
                self.delivered();
                continue;
            }
            let Some(i) = bytes.iter().position(|b| *b == b'\n') else {
                self.pending.extend_from_slice(bytes);
                if self.pending.len() > MAX_LINE {
                    self.pending.clear();
                    if self.expecting() {
                        self.broken("the worker answered with a line too long".into());
                    }
                    self.skipping = true;
                }
                return;
            };
            self.pending.extend_from_slice(&bytes[..=i]);
            bytes = &bytes[i + 1..];
            let line = std::mem::take(&mut self.pending);
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            self.line(String::from_utf8_lossy(&line).trim_end().to_string());
        }
    }

    /// A complete line: an answer, held back while the files it lists arrive. While a
    /// call over the channel is in flight, its answer is the only line the worker
    /// writes: any other line means the stream cannot be trusted.
    fn line(&mut self, line: String) {
        let expected = self
            .landing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .expect
            .take();
        let Some((dir, max)) = expected else {
            self.send(line);
            return;
        };
        let landing = match serde_json::from_str::<Announce>(&line) {
            Ok(Announce { files: Some(files) }) => {
                crate::transfer::Landing::new(&dir, files, max).map_err(|e| format!("sent {e}"))
            }
            _ => Err(format!(
                "answered without listing its files: {}",
                tail(&line, 1).chars().take(200).collect::<String>()
            )),
        };
        match landing {
            Ok(mut landing) => {
                // Files of no bytes land at once.
                landing.take(&[]);
                self.receiving = Some((line, landing));
                self.delivered();
            }
            Err(e) => self.broken(format!("the worker {e}")),
        }
    }

    /// What follows cannot be told apart from files or answers: the worker is done.
    fn broken(&mut self, why: String) {
        self.landed(Err(why));
        self.tx = None;
    }

    /// Hands over the answer whose files all arrived.
    fn delivered(&mut self) {
        if self.receiving.as_ref().is_some_and(|(_, l)| l.done())
            && let Some((line, landing)) = self.receiving.take()
        {
            self.landed(landing.finish());
            self.send(line);
        }
    }

    /// Whether a call over the channel waits for its answer.
    fn expecting(&self) -> bool {
        self.landing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .expect
            .is_some()
    }

    fn landed(&self, result: Result<(), String>) {
        self.landing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .landed = Some(result);
    }

    fn send(&self, line: String) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(line);
        }
    }

    /// Stdout ended.
    pub fn end(self) {}
}

impl Drop for Answers {
    fn drop(&mut self) {
        if !self.pending.is_empty() && !self.skipping && self.receiving.is_none() {
            let rest = std::mem::take(&mut self.pending);
            self.send(String::from_utf8_lossy(&rest).trim_end().to_string());
        }
        self.ended.store(true, Ordering::Release);
    }
}

/// Turns a worker's stderr into its log, a line at a time.
#[derive(Debug)]
pub struct LogSink {
    pending: Vec<u8>,
    log: Log,
}

impl LogSink {
    /// Takes bytes of stderr; complete lines go to the log, and so does a line longer
    /// than [`LINE_MAX`] so far (output that never ends a line is held to the log's
    /// bound, and each chunk is scanned once).
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let cut = match bytes.iter().rposition(|b| *b == b'\n') {
            Some(i) => self.pending.len() - bytes.len() + i + 1,
            None if self.pending.len() >= LINE_MAX => self.pending.len(),
            None => return,
        };
        let lines: Vec<u8> = self.pending.drain(..cut).collect();
        self.log.push(&String::from_utf8_lossy(&lines));
    }

    /// Stderr ended.
    pub fn end(self) {}
}

impl Drop for LogSink {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.log.push(&String::from_utf8_lossy(&rest));
        }
    }
}

/// What a worker wrote to stderr over its life, bounded; a call's part of it is the
/// slice from the length it had when the call began.
#[derive(Debug, Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Kept>>);

/// The part of a worker's log kept, and how many bytes of its whole output lie before it
/// (positions in the log are in the whole output: they outlive a cut).
#[derive(Debug, Default)]
pub(crate) struct Kept {
    text: String,
    dropped: usize,
}

/// What a cut log starts with.
const DROPPED: &str = "[... earlier output dropped ...]\n";

impl Log {
    fn push(&self, text: &str) {
        let mut l = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        l.text.push_str(text);
        if l.text.len() > LOG_MAX {
            let cut = l.text.len() - LOG_KEEP;
            let cut = (cut..l.text.len())
                .find(|i| l.text.is_char_boundary(*i))
                .unwrap_or(l.text.len());
            l.text.replace_range(..cut, DROPPED);
            l.dropped += cut - DROPPED.len();
        }
    }

    /// Where the log ends now, in the worker's whole output.
    pub(crate) fn len(&self) -> usize {
        let l = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        l.dropped + l.text.len()
    }

    /// The log from `start` (a position [`Log::len`] gave) on: all that is kept of it
    /// when it was cut since (the kept part begins with the word that it was).
    pub(crate) fn since(&self, start: usize) -> String {
        let l = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let from = start.saturating_sub(l.dropped);
        if l.dropped > 0 && from < DROPPED.len() {
            return l.text.clone();
        }
        l.text.get(from..).unwrap_or_default().to_string()
    }
}

/// Reads `from` until it ends, handing each chunk to `to`.
async fn pump(mut from: impl AsyncRead + Unpin, mut to: impl FnMut(&[u8])) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => to(&buf[..n]),
        }
    }
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the thirteenth review: an answer line of the wrong shape (a call can write
    /// its own) was skipped as stray, and the call waited for its timeout; a line with the
    /// call's id is its answer, whatever it holds, and lines of other calls are skipped.
    #[tokio::test]
    async fn a_line_with_the_calls_id_is_its_answer_whatever_its_shape() {
        let (mut worker, mut output) = Worker::wire(
            (),
            PathBuf::from("/nonexistent"),
            Box::pin(tokio::io::sink()),
        );
        output
            .answers
            .push(b"{\"id\": \"other\", \"ok\": true, \"rows\": 1}\nnot json\n");
        output
            .answers
            .push(b"{\"id\": \"mine\", \"ok\": \"yes\", \"rows\": \"many\"}\n");
        let line = worker.answer("mine").await.expect("the call's own line");
        assert!(line.contains("\"many\""), "{line}");
        assert!(serde_json::from_str::<Answer>(&line).is_err());
    }

    /// Found by the eleventh review: stderr that never ended a line was kept whole and
    /// scanned again with every chunk (a server's memory and CPU for one call's output).
    #[test]
    fn a_line_that_never_ends_goes_to_the_log_in_pieces() {
        let log = Log::default();
        let mut sink = LogSink {
            pending: Vec::new(),
            log: log.clone(),
        };
        let chunk = vec![b'y'; 64 << 10];
        for _ in 0..(64 << 20) / chunk.len() {
            sink.push(&chunk);
            assert!(sink.pending.len() < LINE_MAX, "{}", sink.pending.len());
        }
        let kept = log.since(0).len();
        assert!((LOG_KEEP..=LOG_MAX).contains(&kept), "{kept}");
        assert_eq!(log.len(), 64 << 20, "positions count the whole output");
        sink.push(b"end\n");
        assert!(log.since(0).ends_with("yend\n"));
        // A call that began before a cut gets what is kept of its output, one after it
        // its own part.
        assert!(log.since(0).starts_with(DROPPED));
        let start = log.len();
        sink.push(b"next call\n");
        assert_eq!(log.since(start), "next call\n");
    }

    #[tokio::test]
    async fn output_becomes_answer_lines_and_a_log() {
        let (mut w, mut out) = Worker::wire((), PathBuf::new(), Box::pin(tokio::io::sink()));
        out.answers.push(b"{\"ready\": tr");
        out.answers
            .push(b"ue}\r\n{\"id\": \"a\", \"ok\": true, \"rows\": 1}\nstray\n");
        out.log.push(b"one\ntw");
        assert_eq!(w.log().since(0), "one\n");
        assert!(w.ready(Duration::from_secs(1)).await);
        assert_eq!(
            w.answer("a").await.as_deref(),
            Some("{\"id\": \"a\", \"ok\": true, \"rows\": 1}")
        );
        assert!(!w.ended());
        out.end();
        assert_eq!(w.log().since(4), "tw");
        assert!(w.ended());
        assert_eq!(w.answer("b").await, None, "a stray line is not an answer");
    }

    #[tokio::test]
    async fn files_follow_an_answer_over_the_channel() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, mut out) = Worker::wire((), PathBuf::new(), Box::pin(tokio::io::sink()));
        out.answers.push(b"{\"ready\": true}\n");
        assert!(w.ready(Duration::from_secs(1)).await);
        // The answer is handed over once its files (an empty one among them) arrived,
        // whatever pieces the bytes come in.
        w.expect_files(dir.path(), 1 << 20);
        let line = br#"{"id": "a", "ok": true, "rows": 1, "files": [{"path": "empty", "size": 0}, {"path": "sub/out", "size": 5}]}"#;
        out.answers.push(&line[..10]);
        out.answers.push(&line[10..]);
        out.answers.push(b"\nhel");
        assert!(
            w.answers.try_recv().is_err(),
            "held back while files arrive"
        );
        out.answers.push(b"lo");
        assert!(w.answer("a").await.is_some());
        assert_eq!(w.landed(), Some(Ok(())));
        assert_eq!(std::fs::read(dir.path().join("sub/out")).unwrap(), b"hello");
        assert_eq!(std::fs::read(dir.path().join("empty")).unwrap(), b"");
        // Only empty files: handed over at once.
        w.expect_files(dir.path(), 1 << 20);
        out.answers
            .push(b"{\"id\": \"b\", \"ok\": true, \"files\": [{\"path\": \"e\", \"size\": 0}]}\n");
        assert!(w.answer("b").await.is_some());
        // A line that lists no files while a call waits: the stream is not trusted.
        w.expect_files(dir.path(), 1 << 20);
        out.answers.push(b"{\"id\": \"c\", \"ok\": true}\n");
        assert_eq!(w.answer("c").await, None);
        assert!(
            w.landed()
                .unwrap()
                .unwrap_err()
                .contains("without listing its files")
        );
    }

    #[tokio::test]
    async fn files_nobody_expects_or_that_leave_the_folder_end_the_worker() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, mut out) = Worker::wire((), PathBuf::new(), Box::pin(tokio::io::sink()));
        w.expect_files(dir.path(), 1 << 20);
        out.answers
            .push(b"{\"id\": \"a\", \"files\": [{\"path\": \"../x\", \"size\": 1}]}\nx");
        assert_eq!(w.answer("a").await, None);
        assert!(
            w.landed()
                .unwrap()
                .unwrap_err()
                .contains("leaves the folder")
        );
        assert!(!dir.path().parent().unwrap().join("x").exists());
        let (mut w, mut out) = Worker::wire((), PathBuf::new(), Box::pin(tokio::io::sink()));
        w.expect_files(dir.path(), 4);
        out.answers
            .push(b"{\"id\": \"a\", \"files\": [{\"path\": \"big\", \"size\": 5}]}\n12345");
        assert_eq!(
            w.answer("a").await,
            None,
            "more than the call may bring back"
        );
    }

    #[test]
    fn the_log_keeps_its_newest_part() {
        let log = Log::default();
        let line = format!("{}\n", "x".repeat(1023));
        for _ in 0..(LOG_MAX / line.len() + 1) {
            log.push(&line);
        }
        let text = log.since(0);
        assert!(text.starts_with("[... earlier output dropped ...]\n"));
        assert!(text.len() <= LOG_KEEP + 64);
    }
}
