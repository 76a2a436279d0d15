//! Identifiers for threads, messages and artifacts, and the [`IdSource`] hosts
//! inject to make them.
//!
//! Every id is a prefix (`thr_`, `msg_`, `art_`) and a body that sorts in
//! creation order. Production hosts use [`UlidIds`]: a ULID body (48 bits of
//! milliseconds, 80 random bits) that is unique across processes and monotonic
//! within one. Scripts and tests use [`SequentialIds`], which counts
//! (`thr_000001`) so transcripts are stable and readable.
//!
//! Secrets (an agent's token, `tok_` and 64 hex digits) come from the same
//! source but never from its seeded generator: a host hands [`UlidIds`] a
//! [`SecretSource`] that draws fresh bytes from a cryptographic random
//! source each time, and a host without one cannot issue tokens.
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
    /// `council_` (an orch council the leader did not name)
    Council,
}

impl IdKind {
    /// The prefix every id of this kind starts with.
    pub fn prefix(self) -> &'static str {
        match self {
            IdKind::Thread => "thr_",
            IdKind::Message => "msg_",
            IdKind::Artifact => "art_",
            IdKind::Run => "run_",
            IdKind::Council => "council_",
        }
    }
}

/// What every secret starts with.
pub const SECRET_PREFIX: &str = "tok_";

/// Makes new ids. The engine calls it inside a command, with the command's
/// time; an id source must never return the same id twice, and later calls
/// should sort after earlier ones.
pub trait IdSource {
    /// A fresh id of `kind`, starting with [`IdKind::prefix`].
    fn next_id(&mut self, kind: IdKind, now: Timestamp) -> String;

    /// A fresh secret (an agent's token), starting with [`SECRET_PREFIX`]:
    /// nobody may be able to guess it, so it must come from a
    /// cryptographic random source. `None` when this source has none.
    fn secret(&mut self) -> Option<String>;
}

/// Draws 32 bytes from a cryptographic random source (the OS's
/// `getrandom`, `crypto.getRandomValues`, a WIT import), or `None` if it
/// fails. A plain function so that [`UlidIds`] stays `Clone` and `Debug`.
pub type SecretSource = fn() -> Option<[u8; 32]>;

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
    /// Where secrets come from, if the host has a source fit for them.
    secrets: Option<SecretSource>,
}

impl UlidIds {
    /// A generator seeded by the host. Give every process a different seed
    /// (OS randomness); two generators with the same seed make the same ids.
    pub fn from_seed(seed: u64) -> UlidIds {
        UlidIds {
            rng: fastrand::Rng::with_seed(seed),
            last: None,
            secrets: None,
        }
    }

    /// The same generator, making its secrets from `source`. Without one,
    /// [`IdSource::secret`] says `None`: the seeded generator behind the
    /// ids is predictable from its seed and never makes a secret.
    pub fn with_secrets(mut self, source: SecretSource) -> UlidIds {
        self.secrets = Some(source);
        self
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

    fn secret(&mut self) -> Option<String> {
        let bytes = (self.secrets?)()?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Some(format!("{SECRET_PREFIX}{hex}"))
    }
}

/// Deterministic ids for scripts and tests: `thr_000001`, `msg_000001`,
/// `art_000001`, one counter per kind; secrets `tok_000001`, which are
/// secret only in name, so that transcripts can show and use them.
#[derive(Debug, Clone, Default)]
pub struct SequentialIds {
    threads: u64,
    messages: u64,
    artifacts: u64,
    runs: u64,
    councils: u64,
    secrets: u64,
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
            IdKind::Council => &mut self.councils,
        };
        *counter += 1;
        format!("{}{:06}", kind.prefix(), counter)
    }

    fn secret(&mut self) -> Option<String> {
        self.secrets += 1;
        Some(format!("{SECRET_PREFIX}{:06}", self.secrets))
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
    fn ulid_secrets_come_from_the_secret_source_only() {
        assert_eq!(UlidIds::from_seed(1).secret(), None);
        let mut ids = UlidIds::from_seed(1).with_secrets(|| Some([0xab; 32]));
        let secret = ids.secret().unwrap_or_default();
        assert_eq!(secret, format!("tok_{}", "ab".repeat(32)));
        let failing = UlidIds::from_seed(1).with_secrets(|| None).secret();
        assert_eq!(failing, None);
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
