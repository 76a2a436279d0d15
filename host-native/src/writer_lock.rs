//! The writer lock file, `<db>-lock`: how a process that cannot take
//! SQLite's locks (the wasm package in Node, which has no `fcntl`) keeps
//! SQLite's writers out of a database while it synchronizes with the file.
//!
//! The protocol, between such a host and every inbox process:
//!
//! - the host creates `<db>-lock` exclusively (`O_EXCL`), writing who it is
//!   ([`Holder`]), and removes it when done, within milliseconds;
//! - every inbox writer, holding SQLite's write lock, looks for the file
//!   before it writes anything; while a live holder has it, the writer lets
//!   go of SQLite's lock and waits, within its busy budget;
//! - SQLite's own locks stay what they are, so the host, having created the
//!   file, waits until no process holds SQLite's write lock (a writer that
//!   looked before the file existed); from then on no one else writes.
//!
//! A holder that died leaves its file behind. [`judge`] decides when a file
//! no longer counts: at once when its process is known to be gone (same
//! host and process namespace, no such process), and in any case once it is
//! [`STALE_AFTER_MS`] old, far longer than any holder keeps it.
//!
//! This module is pure: it names, formats and judges lock files, and tells
//! a dead holder from its `/proc` stat line, given as bytes. It must never
//! read or write a file (the native store and [`crate::shared_file`] do).

use serde::{Deserialize, Serialize};

/// The lock file's name is the database's with this suffix.
pub const SUFFIX: &str = "-lock";

/// After this long a lock file no longer counts, whoever wrote it: a holder
/// keeps it for milliseconds, and gives up before [`HOLD_LIMIT_MS`].
pub const STALE_AFTER_MS: u64 = 60_000;

/// The longest a holder may keep the lock before it must give up without
/// writing, well inside [`STALE_AFTER_MS`].
pub const HOLD_LIMIT_MS: u64 = 20_000;

/// Who holds the lock: the file's content, one JSON object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's process id.
    pub pid: u32,
    /// Its process namespace (`/proc/self/ns/pid`), when it has one: process
    /// ids mean something only within one.
    pub pid_ns: Option<String>,
    /// Its host name.
    pub host: String,
    /// Random, so that a holder recognizes its own file.
    pub nonce: String,
    /// What holds it, for the message a waiting writer shows.
    pub by: String,
}

impl Holder {
    /// The file's content.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a lock file's content; `None` if it is not one (yet: a holder
    /// writes it just after creating it).
    pub fn parse(bytes: &[u8]) -> Option<Holder> {
        serde_json::from_slice(bytes).ok()
    }

    /// Says who holds the lock, for messages.
    pub fn describe(&self) -> String {
        format!("{} (process {} on {})", self.by, self.pid, self.host)
    }
}

/// The process asking, to tell whether a holder's process id is checkable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Me {
    /// This process's namespace, as [`Holder::pid_ns`].
    pub pid_ns: Option<String>,
    /// This host's name.
    pub host: String,
}

/// Whether a lock file keeps writers out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It does: wait for it to go.
    Held(Option<Holder>),
    /// It does not: its holder is gone, or it is too old to be anyone's.
    Stale,
}

/// Judges a lock file of `content`, `age_ms` old, for the process `me`;
/// `alive` says whether a process id of `me`'s namespace runs.
pub fn judge(content: &[u8], age_ms: u64, me: &Me, mut alive: impl FnMut(u32) -> bool) -> Verdict {
    if age_ms >= STALE_AFTER_MS {
        return Verdict::Stale;
    }
    let holder = Holder::parse(content);
    if let Some(h) = &holder {
        let checkable = h.host == me.host && h.pid_ns.is_some() && h.pid_ns == me.pid_ns;
        if checkable && !alive(h.pid) {
            return Verdict::Stale;
        }
    }
    Verdict::Held(holder)
}

/// Whether a `/proc/<pid>/stat` line is a dead task's: its state, the first
/// field after the name (which is in parentheses and may hold anything,
/// parentheses included), is `Z` (zombie) or `X` (dead). A zombie will never
/// let go of a lock it holds itself, so a killed holder whose parent has
/// not reaped it yet holds nobody up. Here, not with the reading, so that
/// the native store and the wasm package in Node judge a holder alike.
pub fn stat_says_dead(stat: &[u8]) -> bool {
    let after_name = stat.iter().rposition(|&b| b == b')').map_or(0, |i| i + 1);
    let state = stat[after_name..].iter().find(|b| !b.is_ascii_whitespace());
    matches!(state, Some(b'Z' | b'X' | b'x'))
}

/// The message for a writer that waited its whole budget for a holder.
pub fn still_held(db: &str, holder: Option<&Holder>) -> String {
    let who = holder.map_or_else(|| "another process".to_owned(), Holder::describe);
    format!(
        "{db} is being synchronized by {who}, which holds {db}{SUFFIX}; retry in a moment. \
         If no such process runs, delete {db}{SUFFIX} (it stops counting by itself after {} s)",
        STALE_AFTER_MS / 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_says_whether_the_task_is_dead() {
        assert!(!stat_says_dead(b"42 (inbox) S 1 42 42 0 -1"));
        assert!(!stat_says_dead(b"42 (inbox) R 1 42 42 0 -1"));
        assert!(stat_says_dead(b"42 (inbox) Z 1 42 42 0 -1"));
        assert!(stat_says_dead(b"42 (inbox) X 1 42 42 0 -1"));
        // The name is whatever the process chose, parentheses included:
        // the state follows the last one.
        assert!(!stat_says_dead(b"42 (a) Z (b) S 1 42 42 0 -1"));
        assert!(stat_says_dead(b"42 (a) S (b) Z 1 42 42 0 -1"));
    }

    fn me() -> Me {
        Me {
            pid_ns: Some("pid:[1]".into()),
            host: "h".into(),
        }
    }

    fn holder(host: &str, ns: Option<&str>) -> Vec<u8> {
        Holder {
            pid: 42,
            pid_ns: ns.map(str::to_owned),
            host: host.into(),
            nonce: "n".into(),
            by: "inbox-wasm".into(),
        }
        .to_bytes()
    }

    #[test]
    fn a_live_holder_holds_and_a_dead_one_of_this_namespace_does_not() {
        let file = holder("h", Some("pid:[1]"));
        assert!(matches!(
            judge(&file, 5, &me(), |_| true),
            Verdict::Held(Some(_))
        ));
        assert_eq!(judge(&file, 5, &me(), |_| false), Verdict::Stale);
    }

    #[test]
    fn another_namespace_or_host_counts_until_the_file_is_old() {
        for file in [
            holder("other", Some("pid:[1]")),
            holder("h", Some("pid:[2]")),
            holder("h", None),
        ] {
            assert!(matches!(
                judge(&file, 5, &me(), |_| false),
                Verdict::Held(_)
            ));
            assert_eq!(
                judge(&file, STALE_AFTER_MS, &me(), |_| true),
                Verdict::Stale
            );
        }
    }

    #[test]
    fn a_file_being_written_counts() {
        assert_eq!(judge(b"", 0, &me(), |_| false), Verdict::Held(None));
    }
}
