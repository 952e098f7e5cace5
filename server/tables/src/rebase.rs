//! How a table write that lost its race is made again: lh's appends and partition
//! replaces (`write.rs`) and Iceberg REST clients' stale appends (the REST catalog's
//! `rebase_append`) alike are made again on the table as the winner left it, when that
//! is safe, at most [`MAX_REBASES`] times, with the same pauses.

use std::time::Duration;

/// How many times a write is made again on a table other writes keep moving.
pub const MAX_REBASES: u32 = 30;

/// The rebases of one write.
#[derive(Debug, Default)]
pub struct Rebases {
    done: u32,
}

impl Rebases {
    pub fn new() -> Rebases {
        Rebases::default()
    }

    /// Whether a write that lost may be made again (counting it as made).
    pub fn another(&mut self) -> bool {
        if self.done >= MAX_REBASES {
            return false;
        }
        self.done += 1;
        true
    }

    /// The pause before the rebase [`another`](Self::another) allowed: none before the
    /// first (lh's writers of one table on one server take turns: a loss is to another
    /// server or client), then jittered and growing, which spreads the writers out.
    pub async fn pause(&self) {
        if self.done > 1 {
            let cap = 10u64 << self.done.min(6);
            let jitter = (uuid::Uuid::new_v4().as_u128() % u128::from(cap)) as u64;
            tokio::time::sleep(Duration::from_millis(cap / 2 + jitter)).await;
        }
    }

    /// How many times the write was made again.
    pub fn count(&self) -> u32 {
        self.done
    }
}
