//! Identifiers for threads, messages and artifacts, and the [`IdSource`] hosts
//! inject to make them.
//!
//! Every id is a prefix (`thr_`, `msg_`, `art_`) and a body that sorts in
//! creation order. Production hosts use [`UlidIds`]: a ULID body (48 bits of
//! milliseconds, 80 random bits) that is unique across processes and monotonic
//! within one. Scripts and tests use [`SequentialIds`], which counts
//! (`thr_000001`) so transcripts are stable and readable.
//!
//! This module never draws entropy itself: [`UlidIds`] is seeded by the host
//! (from the OS, `crypto.getRandomValues`, a WIT import) and is deterministic
//! from there on.

use crate::time::Timestamp;

/// What an id names; decides its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdKind {
    /// `thr_`
    Thread,
    /// `msg_`
    Message,
    /// `art_`
    Artifact,
    /// `run_` (an orch run the leader did not name)
    Run,
}

impl IdKind {
    /// The prefix every id of this kind starts with.
    pub fn prefix(self) -> &'static str {
        match self {
            IdKind::Thread => "thr_",
            IdKind::Message => "msg_",
            IdKind::Artifact => "art_",
            IdKind::Run => "run_",
        }
    }
}

/// Makes new ids. The engine calls it inside a command, with the command's
/// time; an id source must never return the same id twice, and later calls
/// should sort after earlier ones.
pub trait IdSource {
    /// A fresh id of `kind`, starting with [`IdKind::prefix`].
    fn next_id(&mut self, kind: IdKind, now: Timestamp) -> String;
}

/// Production ids: `thr_01JH5...` with a ULID body.
///
/// Within one generator, ids strictly increase even when the clock stands
/// still or steps back (the random part is incremented, as the ULID spec
/// describes). Across processes, ids made in different milliseconds sort by
/// time, and the 80 random bits keep ids from colliding.
#[derive(Debug, Clone)]
pub struct UlidIds {
    rng: fastrand::Rng,
    /// The last id made, `None` before the first: a generator's first id
    /// always has fresh randomness, even at the clock's epoch.
    last: Option<ulid::Ulid>,
}

impl UlidIds {
    /// A generator seeded by the host. Give every process a different seed
    /// (OS randomness); two generators with the same seed make the same ids.
    pub fn from_seed(seed: u64) -> UlidIds {
        UlidIds {
            rng: fastrand::Rng::with_seed(seed),
            last: None,
        }
    }
}

impl IdSource for UlidIds {
    fn next_id(&mut self, kind: IdKind, now: Timestamp) -> String {
        let millis = u64::try_from(now.as_millis()).unwrap_or(0);
        let fresh = |rng: &mut fastrand::Rng| ulid::Ulid::from_parts(millis, rng.u128(..));
        let next = match self.last {
            // Same (or earlier: a clock stepped back) millisecond: stay
            // monotonic by incrementing. Overflowing 80 bits within a
            // millisecond would take 2^80 ids; if it ever happens, fall
            // back to fresh randomness.
            Some(last) if millis <= last.timestamp_ms() => {
                last.increment().unwrap_or_else(|_| fresh(&mut self.rng))
            }
            _ => fresh(&mut self.rng),
        };
        self.last = Some(next);
        let mut buf = [0; ulid::ULID_LEN];
        format!("{}{}", kind.prefix(), next.array_to_str(&mut buf))
    }
}

/// Deterministic ids for scripts and tests: `thr_000001`, `msg_000001`,
/// `art_000001`, one counter per kind.
#[derive(Debug, Clone, Default)]
pub struct SequentialIds {
    threads: u64,
    messages: u64,
    artifacts: u64,
    runs: u64,
}

impl SequentialIds {
    /// Counters at zero; the first thread is `thr_000001`.
    pub fn new() -> SequentialIds {
        SequentialIds::default()
    }
}

impl IdSource for SequentialIds {
    fn next_id(&mut self, kind: IdKind, _now: Timestamp) -> String {
        let counter = match kind {
            IdKind::Thread => &mut self.threads,
            IdKind::Message => &mut self.messages,
            IdKind::Artifact => &mut self.artifacts,
            IdKind::Run => &mut self.runs,
        };
        *counter += 1;
        format!("{}{:06}", kind.prefix(), counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulid_ids_are_prefixed_and_increase_even_within_one_millisecond() {
        let mut ids = UlidIds::from_seed(7);
        let t = Timestamp::from_millis(1_767_225_600_000);
        let a = ids.next_id(IdKind::Thread, t);
        let b = ids.next_id(IdKind::Thread, t);
        let c = ids.next_id(IdKind::Thread, t.plus_millis(-5));
        let d = ids.next_id(IdKind::Thread, t.plus_millis(1));
        assert!(a.starts_with("thr_") && a.len() == 4 + 26, "{a}");
        assert!(a < b && b < c && c < d, "{a} {b} {c} {d}");
    }

    #[test]
    fn ulid_ids_at_the_epoch_differ_between_generators() {
        let t = Timestamp::from_millis(0);
        let a = UlidIds::from_seed(1).next_id(IdKind::Thread, t);
        let b = UlidIds::from_seed(2).next_id(IdKind::Thread, t);
        assert_ne!(a, b);
        let before = UlidIds::from_seed(3).next_id(IdKind::Thread, Timestamp::from_millis(-5));
        assert_ne!(before, a);
    }

    #[test]
    fn ulid_ids_from_different_seeds_differ() {
        let t = Timestamp::from_millis(1_767_225_600_000);
        let a = UlidIds::from_seed(1).next_id(IdKind::Message, t);
        let b = UlidIds::from_seed(2).next_id(IdKind::Message, t);
        assert_ne!(a, b);
        assert_eq!(a[..14], b[..14], "same millisecond, same time part");
    }

    #[test]
    fn sequential_ids_count_per_kind() {
        let mut ids = SequentialIds::new();
        let t = Timestamp::from_millis(0);
        assert_eq!(ids.next_id(IdKind::Thread, t), "thr_000001");
        assert_eq!(ids.next_id(IdKind::Message, t), "msg_000001");
        assert_eq!(ids.next_id(IdKind::Message, t), "msg_000002");
        assert_eq!(ids.next_id(IdKind::Artifact, t), "art_000001");
    }
}
