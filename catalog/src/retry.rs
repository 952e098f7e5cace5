//! Backoff between the attempts of an optimistic write. A write that lost its race
//! (the branch moved between its read and its compare-and-swap) starts again from the
//! new head; this spaces the attempts out and gives up after [`RETRY_DEADLINE`].
//! Used by the grouped commits (`group.rs`) and by merges (`catalog.rs`).

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// The longest a write keeps retrying against concurrent writers.
const RETRY_DEADLINE: Duration = Duration::from_secs(30);

/// Backoff between attempts of an optimistic write, bounded by [`RETRY_DEADLINE`].
pub(crate) struct Retry {
    started: Instant,
    attempt: u32,
}

impl Retry {
    pub(crate) fn new() -> Self {
        Retry {
            started: Instant::now(),
            attempt: 0,
        }
    }

    pub(crate) async fn wait(&mut self, branch: &str) -> Result<()> {
        self.attempt += 1;
        if self.started.elapsed() > RETRY_DEADLINE {
            return Err(Error::new(
                ErrorKind::Contention,
                format!(
                    "gave up after {} attempts: '{branch}' kept moving under concurrent writers; retry",
                    self.attempt
                ),
            ));
        }
        if self.attempt > 2 {
            // A little jitter so that a crowd of writers spreads out.
            let micros = rand_below(200 * u64::from(self.attempt.min(50)));
            tokio::time::sleep(Duration::from_micros(micros)).await;
        } else {
            tokio::task::yield_now().await;
        }
        Ok(())
    }
}

/// A cheap pseudo-random number below `n`, for jitter only.
fn rand_below(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let x = blake3::hash(&nanos.to_le_bytes());
    u64::from_le_bytes(x.as_bytes()[..8].try_into().expect("8 bytes")) % n.max(1)
}
