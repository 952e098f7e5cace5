//! The C heap's account: what DuckDB, SQLite and the C libraries the server links hold,
//! and the most they may hold together.
//!
//! DuckDB's `memory_limit` covers what its buffer manager holds (hash tables, sorts,
//! cached blocks), not the vectors an expression makes: one list function applied per
//! element (`list_transform(range(300), x -> range(1000000))`) took a server given
//! 256 MB to 6 GB, and on past its query's timeout, which DuckDB does not look at inside
//! an expression. `lh-server` therefore defines `malloc` and its kin itself (mimalloc's,
//! counted: its `heap.rs`), so that every allocation DuckDB makes, under its memory
//! limit or not, goes through [`take`]. Past [`limit`] an allocation is refused: DuckDB
//! then ends the statement that asked with an out-of-memory error and the server goes on.
//! Rust's own allocations go to mimalloc directly and are not counted here (what they
//! may hold is bounded where they are made: answers, requests, uploads).
//!
//! The account is in usable bytes (what mimalloc gave, not what was asked), so that a
//! block is given back exactly as it was charged. Small allocations may pass the limit
//! by [`RESERVE`]: a statement whose large allocation was refused must still be able to
//! make its error message, and the server its answer.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Allocations up to this size may use the [`RESERVE`].
pub const SMALL: usize = 64 << 10;
/// What small allocations may take past the limit.
pub const RESERVE: usize = 64 << 20;

std::thread_local! {
    /// This thread's allocations are charged but never refused ([`exempt`]).
    static EXEMPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with this thread's allocations exempt from the limit (still charged): lh's
/// own reading of a statement through DuckDB (its parse tree), whose size the request's
/// bounds hold, and where a refusal reached a binding that does not expect one (the
/// thirty-first review: duckdb-rs read a null error message after a refused parameter
/// bind, and the server died).
pub fn exempt<T>(f: impl FnOnce() -> T) -> T {
    let before = EXEMPT.with(|e| e.replace(true));
    let out = f();
    EXEMPT.with(|e| e.set(before));
    out
}

static USED: AtomicUsize = AtomicUsize::new(0);
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Sets the most the C heap may hold (set once, at start-up; before it, nothing is
/// refused).
pub fn set_limit(bytes: u64) {
    LIMIT.store(
        usize::try_from(bytes).unwrap_or(usize::MAX),
        Ordering::Relaxed,
    );
}

/// The most the C heap may hold, when `lh-server` set one.
pub fn limit() -> Option<u64> {
    match LIMIT.load(Ordering::Relaxed) {
        usize::MAX => None,
        n => Some(n as u64),
    }
}

/// What the C heap holds now (0 in a process whose `malloc` is not `lh-server`'s).
pub fn used() -> u64 {
    USED.load(Ordering::Relaxed) as u64
}

/// How many allocations were refused since the server started.
pub fn refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Charges `size` bytes about to be allocated, unless that passes the limit (then
/// nothing is charged and the allocation must fail).
#[inline]
pub fn take(size: usize) -> bool {
    let limit = LIMIT.load(Ordering::Relaxed);
    let limit = if limit == usize::MAX || EXEMPT.try_with(|e| e.get()).unwrap_or(false) {
        usize::MAX
    } else if size <= SMALL {
        limit.saturating_add(RESERVE)
    } else {
        limit
    };
    let before = USED.fetch_add(size, Ordering::Relaxed);
    if before.saturating_add(size) <= limit {
        return true;
    }
    USED.fetch_sub(size, Ordering::Relaxed);
    REFUSED.fetch_add(1, Ordering::Relaxed);
    false
}

/// Charges bytes an allocation got beyond what [`take`] charged (its usable size is
/// larger than asked).
#[inline]
pub fn add(bytes: usize) {
    if bytes != 0 {
        USED.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Gives back what a freed block (or a failed or shrunk allocation) was charged.
#[inline]
pub fn give_back(bytes: usize) {
    if bytes != 0 {
        USED.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the account is the process's.
    #[test]
    fn past_the_limit_only_small_allocations_pass_and_nothing_is_charged_for_a_refusal() {
        assert!(take(1 << 30), "no limit before one is set");
        give_back(1 << 30);
        let base = used() as usize;
        set_limit((base + (10 << 20)) as u64);
        assert!(take(8 << 20));
        assert!(!take(4 << 20), "past the limit");
        assert_eq!(
            used() as usize,
            base + (8 << 20),
            "a refusal charges nothing"
        );
        assert!(refused() >= 1);
        assert!(take(SMALL), "a small one uses the reserve");
        assert!(!take(RESERVE), "the reserve is only for small ones");
        give_back(SMALL);
        give_back(8 << 20);
        assert_eq!(used() as usize, base);
        assert!(
            exempt(|| take(RESERVE * 2)),
            "an exempt thread is charged, not refused"
        );
        give_back(RESERVE * 2);
        assert!(!take(RESERVE * 2), "and only while it is exempt");
        set_limit(u64::MAX);
        assert_eq!(limit(), None);
    }
}
