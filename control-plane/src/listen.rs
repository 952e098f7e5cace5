//! Serving connections: HTTP/1.1 and HTTP/2 over TCP (hyper, through hyper-util's auto
//! builder, as `axum::serve` does), with the bounds `axum::serve` leaves out. Once
//! (the third review): 400 connections trickling a header byte every 10 s stayed open
//! past 70 s, and 13,000 idle connections were accepted.
//!
//! - HTTP/1.1 only: no client of lh speaks HTTP/2 without TLS, and hyper bounds an
//!   HTTP/2 connection's silence by nothing.
//! - A request's head must arrive within [`ConnLimits::header_read_timeout`] of the
//!   connection starting to wait for it (hyper's timer: on a kept-alive connection this
//!   is also how long it may sit idle between requests); a connection that never sends
//!   a request is closed after as long.
//! - A request's body must keep coming: by 20 s after the request plus 1 ms for each
//!   KiB ([`MinRate`]), so a large upload goes at its pace and a trickle is cut off.
//! - A connection on which no byte moved for [`ConnLimits::idle_timeout`] while no
//!   request of it is being answered is closed (HTTP/2 included).
//! - At most [`ConnLimits::max_connections`] are open at once: past it the server stops
//!   accepting until one closes (the kernel's backlog holds the rest).
//! - One peer (an IPv4 address, an IPv6 /64) holds at most
//!   [`ConnLimits::max_per_peer`] of them: a connection past it is closed as it is
//!   accepted. Once (the thirty-second review), one process without a token kept 8,000
//!   connections open or queued, and other clients' requests waited 35 s or timed out.
//! - A connection that has not sent a byte within [`ConnLimits::first_byte_timeout`] is
//!   closed: a client sends its request as soon as it connects.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tower::ServiceExt;

/// The bounds on connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub header_read_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_per_peer: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_read_timeout: Duration::from_secs(20),
            first_byte_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(120),
            max_connections: 2048,
            // A quarter: the rest stays for everyone else (a load balancer in front of
            // the server is one peer, and keeps its connections alive).
            max_per_peer: 512,
        }
    }
}

/// Who a connection comes from, as the per-peer bound counts: an IPv4 address, or an
/// IPv6 address's /64 (one host may hold a whole /64).
fn peer_of(addr: &SocketAddr) -> std::net::IpAddr {
    match addr.ip() {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                std::net::IpAddr::V6(std::net::Ipv6Addr::from(s))
            }
        },
        v4 => v4,
    }
}

/// The connections each peer holds open.
#[derive(Default)]
struct Peers(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One of a peer's connections, given back when dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    peer: std::net::IpAddr,
}

impl Peers {
    /// A slot for `peer`, unless it holds `max` already.
    fn take(self: &Arc<Self>, peer: std::net::IpAddr, max: usize) -> Option<PeerSlot> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(peer).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: self.clone(),
            peer,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.peers.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets the requests in
/// flight finish (each connection is shut down gracefully).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let peers = Arc::new(Peers::default());
    let mut refused_at: Option<Instant> = None;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let (stream, addr) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, say: wait a little rather than spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Some(peer_slot) = peers.take(peer_of(&addr), limits.max_per_peer.max(1)) else {
            // Closed at once (its slot is free again); said at most once a minute.
            if refused_at.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                refused_at = Some(Instant::now());
                tracing::warn!(%addr, max = limits.max_per_peer, "a peer holds the most connections one may: closing its new ones");
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched {
            inner: stream,
            activity: activity.clone(),
        });
        let service = hyper_util::service::TowerToHyperService::new(
            app.clone()
                .map_request(move |req: axum::http::Request<hyper::body::Incoming>| {
                    let (mut parts, body) = req.into_parts();
                    parts.extensions.insert(ConnectInfo::<SocketAddr>(addr));
                    axum::http::Request::from_parts(parts, MinRate::new(body))
                })
                .map_future({
                    let activity = activity.clone();
                    move |fut| {
                        let busy = Busy::new(activity.clone());
                        async move {
                            let out = fut.await;
                            drop(busy);
                            out
                        }
                    }
                }),
        );
        let builder = builder.clone();
        let watch = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let _peer_slot = peer_slot;
            let conn = builder.serve_connection(io, service);
            let mut conn = std::pin::pin!(watch.watch(conn.into_owned()));
            let mut tick = tokio::time::interval(
                Duration::from_secs(1)
                    .min(limits.idle_timeout)
                    .min(limits.first_byte_timeout),
            );
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(%addr, error = %e, "connection ended");
                        }
                        break;
                    }
                    _ = tick.tick() => {
                        let started = activity.start.elapsed();
                        let silent = !activity.seen.load(Ordering::Relaxed)
                            && started > limits.header_read_timeout;
                        let mute = activity.last_ms.load(Ordering::Relaxed) == 0
                            && started > limits.first_byte_timeout;
                        if silent || mute || activity.idle_for() > limits.idle_timeout {
                            tracing::debug!(%addr, "closing an idle connection");
                            break;
                        }
                    }
                }
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// When a connection last moved a byte, and how many of its requests are being
/// answered.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    busy: AtomicUsize,
    /// Whether a request has come.
    seen: std::sync::atomic::AtomicBool,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            seen: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Notes that a byte moved now (never 0: 0 is "nothing yet").
    fn touch(&self) {
        self.last_ms.store(
            (self.start.elapsed().as_millis() as u64).max(1),
            Ordering::Relaxed,
        );
    }

    /// How long nothing happened: zero while a request is being answered.
    fn idle_for(&self) -> Duration {
        if self.busy.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// A request being answered (until its response's head is ready; a streamed body
/// then moves bytes, or the connection goes idle).
struct Busy(Arc<Activity>);

impl Busy {
    fn new(a: Arc<Activity>) -> Busy {
        a.busy.fetch_add(1, Ordering::Relaxed);
        a.seen.store(true, Ordering::Relaxed);
        Busy(a)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A stream that notes when bytes move.
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let out = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(out, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        out
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let out = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(out, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        out
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let out = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(out, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        out
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body that must keep coming: by [`MinRate::GRACE`] after the server starts
/// reading it plus 1 ms per KiB received, else it ends in an error (the handler's read
/// fails, the connection goes). The time a request waits before its body is read (for
/// room in the body budget, `app::hold_body`) is the server's, not the client's: once,
/// under load, bodies that waited their turn were cut off as they were first read.
pub struct MinRate<B> {
    inner: B,
    /// When the server first asked for the body.
    start: Option<Instant>,
    bytes: u64,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl<B> MinRate<B> {
    const GRACE: Duration = Duration::from_secs(20);

    fn new(inner: B) -> MinRate<B> {
        MinRate {
            inner,
            start: None,
            bytes: 0,
            sleep: Box::pin(tokio::time::sleep(Self::GRACE)),
        }
    }

    fn deadline(&mut self) -> Instant {
        let start = *self.start.get_or_insert_with(Instant::now);
        start + Self::GRACE + Duration::from_millis(self.bytes / 1024)
    }
}

impl<B> hyper::body::Body for MinRate<B>
where
    B: hyper::body::Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use hyper::body::Buf;
        // The clock starts at the first read.
        self.deadline();
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    self.bytes += d.remaining() as u64;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => loop {
                let deadline = tokio::time::Instant::from_std(self.deadline());
                if self.sleep.deadline() != deadline {
                    self.sleep.as_mut().reset(deadline);
                }
                match self.sleep.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(()) if Instant::now() >= self.deadline() => {
                        return Poll::Ready(Some(Err("the request body came too slowly".into())));
                    }
                    Poll::Ready(()) => {}
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
