//! Shared helpers of the benchmark programs: timing samples and printing percentiles.

use std::time::{Duration, Instant};

/// Latency samples of one operation.
#[derive(Debug, Default)]
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn new() -> Self {
        Samples(Vec::new())
    }

    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    /// Times `f` once and records it.
    pub async fn time<T, F: std::future::Future<Output = T>>(&mut self, f: F) -> T {
        let start = Instant::now();
        let out = f.await;
        self.0.push(start.elapsed());
        out
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `p`-th percentile (0..=100), nearest rank.
    pub fn percentile(&self, p: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}
