//! The server's answer memory: one budget for every query answer the server holds at
//! once, charged by what an answer really holds (DuckDB's batches converted to Arrow,
//! the Arrow IPC stream not yet sent, the JSON text) and given back when it is sent.
//!
//! `max_result_bytes` bounds one answer; the slots bound how many run; but each answer
//! can hold its batches and its encoding at once, so four slots could hold eight times
//! the per-answer limit. DuckDB's `memory_limit` does not reach any of it: the chunks it
//! hands over are copied out of its buffer manager. The budget is what an operator
//! sizes the server by: its peak is DuckDB's memory plus this, plus a margin.
//!
//! A charge that would pass the budget fails at once (503, retryable): answers cannot
//! wait for each other's memory, since each holds its own until it is sent. One caller
//! holds at most three quarters of the budget, so a caller that reads its answers
//! slowly (or never) leaves the rest to everyone else.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::error::{Code, Error, Kind, Result};

/// The budget, shared by every answer of one server (cheap to clone).
#[derive(Clone, Debug)]
pub struct AnswerMemory(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    limit: u64,
    used: AtomicU64,
    /// What each caller's answers hold (only callers holding something).
    by_caller: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl AnswerMemory {
    pub fn new(limit: u64) -> AnswerMemory {
        AnswerMemory(Arc::new(Inner {
            limit,
            used: AtomicU64::new(0),
            by_caller: Default::default(),
        }))
    }

    /// The bytes charged now, by every answer.
    pub fn used(&self) -> u64 {
        self.0.used.load(Ordering::SeqCst)
    }

    pub fn limit(&self) -> u64 {
        self.0.limit
    }

    /// An empty charge, to grow as the answer does (lh's own work: no caller's share).
    pub fn charge(&self) -> Charge {
        self.charge_for(None)
    }

    /// An empty charge of `caller`'s answer, held to its share.
    pub fn charge_for(&self, caller: Option<&str>) -> Charge {
        Charge {
            memory: self.clone(),
            caller: caller.map(str::to_string),
            bytes: 0,
        }
    }

    /// What one caller may hold: all but a quarter of the budget.
    fn share(&self) -> u64 {
        self.0.limit - self.0.limit / 4
    }

    fn take(&self, caller: Option<&str>, bytes: u64) -> Result<()> {
        if let Some(c) = caller {
            let mut by = self.0.by_caller.lock().unwrap_or_else(|e| e.into_inner());
            let held = by.get(c).copied().unwrap_or(0);
            if held.saturating_add(bytes) > self.share() {
                return Err(Error::new(
                    Kind::Unavailable,
                    Code::AnswerMemoryFull,
                    format!(
                        "your answers the server holds would pass your share of its answer \
                         memory ({} of {} bytes; {held} in use)",
                        self.share(),
                        self.0.limit
                    ),
                )
                .with_hint(
                    "read the answers you asked for first, add a LIMIT or aggregate, or ask \
                     fewer at once",
                ));
            }
            self.take_total(bytes)?;
            *by.entry(c.to_string()).or_insert(0) += bytes;
            return Ok(());
        }
        self.take_total(bytes)
    }

    fn take_total(&self, bytes: u64) -> Result<()> {
        let inner = &self.0;
        let mut used = inner.used.load(Ordering::SeqCst);
        loop {
            let want = used.saturating_add(bytes);
            if want > inner.limit {
                return Err(Error::new(
                    Kind::Unavailable,
                    Code::AnswerMemoryFull,
                    format!(
                        "the answers the server holds would pass its answer memory of {} bytes \
                         ({} in use)",
                        inner.limit, used
                    ),
                )
                .with_hint(
                    "try again when other answers have been sent, add a LIMIT or aggregate, \
                     or raise the server's answer memory",
                ));
            }
            match inner
                .used
                .compare_exchange(used, want, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }

    /// Takes `bytes` whatever the budget holds (see [`Charge::set_anyway`]).
    fn take_anyway(&self, caller: Option<&str>, bytes: u64) {
        if let Some(c) = caller {
            let mut by = self.0.by_caller.lock().unwrap_or_else(|e| e.into_inner());
            *by.entry(c.to_string()).or_insert(0) += bytes;
        }
        self.0.used.fetch_add(bytes, Ordering::SeqCst);
    }

    fn give_back(&self, caller: Option<&str>, bytes: u64) {
        if let Some(c) = caller {
            let mut by = self.0.by_caller.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(held) = by.get_mut(c) {
                *held = held.saturating_sub(bytes);
                if *held == 0 {
                    by.remove(c);
                }
            }
        }
        self.0.used.fetch_sub(bytes, Ordering::SeqCst);
    }
}

/// Bytes of one answer charged to the budget; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    memory: AnswerMemory,
    caller: Option<String>,
    bytes: u64,
}

impl Charge {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Charges `bytes` more, or fails (the charge unchanged) when the budget has no room.
    pub fn grow(&mut self, bytes: u64) -> Result<()> {
        self.memory.take(self.caller.as_deref(), bytes)?;
        self.bytes += bytes;
        Ok(())
    }

    /// Sets the charge to what the answer holds now: grows (or fails) or gives back.
    pub fn set(&mut self, bytes: u64) -> Result<()> {
        if bytes > self.bytes {
            self.grow(bytes - self.bytes)
        } else {
            self.memory
                .give_back(self.caller.as_deref(), self.bytes - bytes);
            self.bytes = bytes;
            Ok(())
        }
    }

    /// Sets the charge to `bytes` even past the budget: for what is already held and
    /// must be sent (a change's answer, reserved for before the change and a little
    /// larger after it). What it holds past the budget refuses the next charges.
    pub fn set_anyway(&mut self, bytes: u64) {
        if bytes > self.bytes {
            self.memory
                .take_anyway(self.caller.as_deref(), bytes - self.bytes);
            self.bytes = bytes;
        } else {
            let _ = self.set(bytes);
        }
    }

    /// Moves `bytes` of this charge (at most all of it) into a charge of their own.
    pub fn split(&mut self, bytes: u64) -> Charge {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Charge {
            memory: self.memory.clone(),
            caller: self.caller.clone(),
            bytes,
        }
    }

    /// Another empty charge of the same caller.
    pub fn another(&self) -> Charge {
        Charge {
            memory: self.memory.clone(),
            caller: self.caller.clone(),
            bytes: 0,
        }
    }

    /// `piece` holding this charge: it is given back when the last handle of the piece
    /// is dropped, once the server has written it to the socket.
    pub fn attach(self, piece: Bytes) -> Bytes {
        if self.bytes == 0 {
            return piece;
        }
        Bytes::from_owner(Charged {
            piece,
            _charge: self,
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.memory.give_back(self.caller.as_deref(), self.bytes);
        }
    }
}

/// A piece of an answer and the charge it holds.
struct Charged {
    piece: Bytes,
    _charge: Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.piece
    }
}

/// Pieces of an answer, each charged for its own length: the charge goes piece by piece
/// as they are sent.
pub fn attach_each(mut charge: Charge, pieces: Vec<Bytes>) -> Vec<Bytes> {
    pieces
        .into_iter()
        .map(|p| {
            let part = charge.split(p.len() as u64);
            part.attach(p)
        })
        .collect()
}

/// Text written in pieces of [`Pieces::SIZE`] bytes (never one large buffer that doubles
/// as it grows), held to a size and charged to the answer memory as it is written.
pub struct Pieces {
    done: Vec<Bytes>,
    done_len: u64,
    current: Vec<u8>,
    charge: Charge,
    max_bytes: u64,
    /// What the text is, for the error past `max_bytes` ("the result as JSON").
    what: &'static str,
    hint: &'static str,
    /// Why a write through `io::Write` failed (the size, or the answer memory).
    failure: Option<Error>,
}

impl Pieces {
    const SIZE: usize = 1 << 20;

    pub fn new(charge: Charge, max_bytes: u64, what: &'static str) -> Pieces {
        Pieces {
            done: Vec::new(),
            done_len: 0,
            current: Vec::new(),
            charge,
            max_bytes,
            what,
            hint: "",
            failure: None,
        }
    }

    /// The hint of the error past `max_bytes`.
    pub fn with_hint(mut self, hint: &'static str) -> Pieces {
        self.hint = hint;
        self
    }

    /// Appends `b`, or fails: past `max_bytes`, or no room in the answer memory.
    pub fn put(&mut self, mut b: &[u8]) -> Result<()> {
        if self.done_len + (self.current.len() + b.len()) as u64 > self.max_bytes {
            let e = Error::new(
                Kind::TooLarge,
                Code::ResultTooLarge,
                format!(
                    "{} is larger than the limit of {} bytes",
                    self.what, self.max_bytes
                ),
            );
            return Err(match self.hint {
                "" => e,
                hint => e.with_hint(hint),
            });
        }
        while !b.is_empty() {
            if self.current.capacity() == 0 {
                // A new piece: charged whole before it is written into.
                self.charge.grow(Self::SIZE as u64)?;
                self.current.reserve_exact(Self::SIZE);
            }
            let n = (Self::SIZE - self.current.len()).min(b.len());
            self.current.extend_from_slice(&b[..n]);
            b = &b[n..];
            if self.current.len() == Self::SIZE {
                let piece = std::mem::take(&mut self.current);
                self.done_len += piece.len() as u64;
                self.done.push(piece.into());
            }
        }
        Ok(())
    }

    /// The error behind a failed `io::Write`.
    pub fn failed(&mut self, e: std::io::Error) -> Error {
        self.failure
            .take()
            .unwrap_or_else(|| Error::internal(format!("cannot write the result: {e}")))
    }

    pub fn finish(mut self) -> Result<Vec<Bytes>> {
        let last = std::mem::take(&mut self.current);
        self.done_len += last.len() as u64;
        if !last.is_empty() {
            self.done.push(last.into());
        }
        // What the last piece did not fill is given back.
        self.charge.set(self.done_len)?;
        Ok(attach_each(self.charge, self.done))
    }
}

impl std::io::Write for Pieces {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self.put(b) {
            Ok(()) => Ok(b.len()),
            Err(e) => {
                let message = e.message.clone();
                self.failure = Some(e);
                Err(std::io::Error::other(message))
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Text as the inside of a JSON string, escaped as serde_json escapes it, written into
/// the pieces as it is formatted.
pub struct JsonText<'a>(pub &'a mut Pieces);

impl std::fmt::Write for JsonText<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let bytes = s.as_bytes();
        let mut start = 0;
        for (i, &c) in bytes.iter().enumerate() {
            let escaped: &[u8] = match c {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0..=0x1f => b"",
                _ => continue,
            };
            self.write_raw(&bytes[start..i])?;
            if escaped.is_empty() {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let u = [
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(c >> 4) as usize],
                    HEX[(c & 0xf) as usize],
                ];
                self.write_raw(&u)?;
            } else {
                self.write_raw(escaped)?;
            }
            start = i + 1;
        }
        self.write_raw(&bytes[start..])
    }
}

impl JsonText<'_> {
    fn write_raw(&mut self, b: &[u8]) -> std::fmt::Result {
        if b.is_empty() {
            return Ok(());
        }
        self.0.put(b).map_err(|e| {
            self.0.failure = Some(e);
            std::fmt::Error
        })
    }
}

/// `value` as text, held to `limit` bytes and charged to `charge` as it grows (one value
/// can print as gigabytes); `too_large` is the error past the limit.
pub fn text_of(
    value: impl std::fmt::Display,
    limit: u64,
    charge: &mut Charge,
    too_large: &dyn Fn() -> Error,
) -> Result<String> {
    struct Bounded<'a> {
        text: String,
        limit: u64,
        charge: &'a mut Charge,
        charged: u64,
        failure: Option<Error>,
        too_large: &'a dyn Fn() -> Error,
    }
    impl std::fmt::Write for Bounded<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            if (self.text.len() + s.len()) as u64 > self.limit {
                self.failure = Some((self.too_large)());
                return Err(std::fmt::Error);
            }
            self.text.push_str(s);
            let held = self.text.capacity() as u64;
            if held > self.charged {
                if let Err(e) = self.charge.grow(held - self.charged) {
                    self.failure = Some(e);
                    return Err(std::fmt::Error);
                }
                self.charged = held;
            }
            Ok(())
        }
    }
    let mut b = Bounded {
        text: String::new(),
        limit,
        charge,
        charged: 0,
        failure: None,
        too_large,
    };
    match std::fmt::Write::write_fmt(&mut b, format_args!("{value}")) {
        Ok(()) => Ok(b.text),
        Err(_) => Err(b
            .failure
            .take()
            .unwrap_or_else(|| Error::internal("cannot format a value"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_fail_past_the_limit_and_go_when_dropped() {
        let m = AnswerMemory::new(100);
        let mut a = m.charge();
        a.grow(60).unwrap();
        let mut b = m.charge();
        let e = b.grow(50).unwrap_err();
        assert_eq!(e.code, Code::AnswerMemoryFull);
        assert_eq!(b.bytes(), 0, "a refused charge takes nothing");
        b.grow(40).unwrap();
        assert_eq!(m.used(), 100);
        a.set(10).unwrap();
        assert_eq!(m.used(), 50);
        let piece = a.split(10).attach(Bytes::from_static(b"0123456789"));
        assert_eq!(a.bytes(), 0);
        assert_eq!(m.used(), 50, "the piece holds its part");
        let copy = piece.clone();
        drop(piece);
        assert_eq!(m.used(), 50, "until its last handle goes");
        assert_eq!(&copy[..], b"0123456789");
        drop(copy);
        assert_eq!(m.used(), 40);
        let pieces = attach_each(
            b,
            vec![Bytes::from(vec![0u8; 30]), Bytes::from(vec![1u8; 10])],
        );
        assert_eq!(m.used(), 40);
        drop(pieces);
        assert_eq!(m.used(), 0);
    }

    #[test]
    fn one_caller_holds_at_most_three_quarters() {
        let m = AnswerMemory::new(100);
        let mut a = m.charge_for(Some("sam"));
        a.grow(70).unwrap();
        let mut more = a.another();
        let e = more.grow(10).unwrap_err();
        assert!(e.message.contains("your share"), "{}", e.message);
        more.grow(5).unwrap();
        let mut b = m.charge_for(Some("quinn"));
        b.grow(25).unwrap();
        assert_eq!(m.used(), 100);
        drop(a);
        drop(more);
        let mut again = m.charge_for(Some("sam"));
        again.grow(75).unwrap();
        assert!(m.0.by_caller.lock().unwrap().len() == 2);
        drop(again);
        drop(b);
        assert!(
            m.0.by_caller.lock().unwrap().is_empty(),
            "no caller is kept once it holds nothing"
        );
        assert_eq!(m.used(), 0);
    }
}
