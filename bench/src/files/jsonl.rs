//! Peer: a per-member append-only JSONL inbox with a line cursor, as
//! described in seed 002 (`/work/shared/seeds/002_254229ef68197ef4.txt`,
//! "Inbox Protocol Reference").
//!
//! How it is modelled: each member has `members/<name>/inbox`, one JSON
//! message per line; a sender appends its line with one `O_APPEND` write
//! (the seed's `echo "$MESSAGE" >> inbox`). A reader keeps
//! `lastProcessedLine` in `members/<name>/state.json`, rewritten through a
//! temporary file and `mv`, and reads the whole file counting lines to find
//! the new ones, exactly as the seed's loop does. A waiting member polls the
//! inbox's size every [`POLL`] (the seed watches `stat` size/mtime and warns
//! against checking more often than every second). Several workers sharing
//! one member's inbox take the next line under an `flock` on
//! `members/<name>/state.lock` (the seed's suggested `flock -x`), so no line
//! is handed out twice; completion is a `task_completion` line appended to
//! the lead's inbox.
//!
//! What it does not do: leases (a worker that dies after taking a line loses
//! that task for good), fencing, retries, indexes, rotation, or any per-task
//! status other than "the cursor is past it". This module must never add
//! machinery the seed does not describe.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::fs::{FlockOperation, flock};

use super::{append_line, task_line, write_replace};

/// How often a waiting member looks at its inbox.
pub const POLL: Duration = Duration::from_secs(1);

/// One process's view of a team folder of JSONL inboxes.
pub struct Jsonl {
    dir: PathBuf,
    fsync: bool,
    /// The reader's cursor (lines processed) while waiting.
    cursor: usize,
    /// The inbox size seen at the last poll.
    seen_len: u64,
}

impl Jsonl {
    /// A client of the team folder `dir` (members `lead` and `worker`).
    pub fn new(dir: &Path, fsync: bool) -> Jsonl {
        Jsonl {
            dir: dir.to_path_buf(),
            fsync,
            cursor: 0,
            seen_len: 0,
        }
    }

    /// Creates the members' folders; run once on an empty `dir`.
    pub fn prepare(dir: &Path) -> Result<()> {
        for member in ["lead", "worker"] {
            let folder = dir.join("members").join(member);
            std::fs::create_dir_all(&folder)
                .with_context(|| format!("cannot create {}", folder.display()))?;
            File::create(folder.join("inbox"))?;
        }
        Ok(())
    }

    fn member(&self, name: &str) -> PathBuf {
        self.dir.join("members").join(name)
    }

    /// The line a `send` appends (also used by the `sh -c 'echo >>'` variant).
    pub fn line(producer: usize, seq: u64) -> String {
        task_line("lead", "worker", producer, seq)
    }

    /// The worker's inbox file.
    pub fn worker_inbox(dir: &Path) -> PathBuf {
        dir.join("members").join("worker").join("inbox")
    }

    /// Appends a task for `worker`.
    pub fn send(&self, producer: usize, seq: u64) -> Result<()> {
        append_line(
            &self.member("worker").join("inbox"),
            &Jsonl::line(producer, seq),
            self.fsync,
        )
    }

    /// Takes the next unprocessed line of `worker`'s inbox under the state
    /// lock and moves the cursor past it; `None` when all are processed.
    pub fn claim(&self) -> Result<Option<String>> {
        let folder = self.member("worker");
        let lock = File::create(folder.join("state.lock"))?;
        flock(&lock, FlockOperation::LockExclusive).context("cannot flock state.lock")?;
        let state_path = folder.join("state.json");
        let last = read_cursor(&state_path)?;
        let text = std::fs::read_to_string(folder.join("inbox"))?;
        let Some(line) = text.lines().nth(last) else {
            return Ok(None);
        };
        let id = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v["content"]["taskId"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("line-{last}"));
        let state = serde_json::json!({
            "lastProcessedLine": last + 1,
            "lastProcessedTimestamp": super::now_iso(),
        });
        write_replace(&state_path, state.to_string().as_bytes(), self.fsync)?;
        // The lock is released when `lock` is closed.
        Ok(Some(id))
    }

    /// Reports `task` done: a `task_completion` line in the lead's inbox.
    pub fn done(&self, task: &str) -> Result<()> {
        let line = serde_json::json!({
            "type": "task_completion",
            "from": "worker",
            "to": "lead",
            "timestamp": super::now_iso(),
            "content": {"taskId": task, "notes": "ok"},
        });
        append_line(
            &self.member("lead").join("inbox"),
            &line.to_string(),
            self.fsync,
        )
    }

    /// Posts message `seq` into `to`'s inbox (a request or an answer).
    pub fn post(&self, from: &str, to: &str, seq: u64) -> Result<()> {
        append_line(
            &self.member(to).join("inbox"),
            &task_line(from, to, 0, seq),
            self.fsync,
        )
    }

    /// Starts waiting as `me` from the end of its inbox.
    pub fn start_waiting(&mut self, me: &str) -> Result<()> {
        let inbox = self.member(me).join("inbox");
        let text = std::fs::read_to_string(&inbox).unwrap_or_default();
        self.cursor = text.lines().count();
        self.seen_len = text.len() as u64;
        Ok(())
    }

    /// Polls `me`'s inbox every [`POLL`] until new lines arrive (true) or
    /// `timeout` passes (false); processes them and saves the cursor.
    pub fn wait(&mut self, me: &str, timeout: Duration) -> Result<bool> {
        let folder = self.member(me);
        let inbox = folder.join("inbox");
        let deadline = Instant::now() + timeout;
        loop {
            let len = std::fs::metadata(&inbox).map_or(0, |m| m.len());
            if len != self.seen_len {
                let text = std::fs::read_to_string(&inbox)?;
                let lines = text.lines().count();
                self.seen_len = text.len() as u64;
                if lines > self.cursor {
                    self.cursor = lines;
                    let state = serde_json::json!({"lastProcessedLine": lines});
                    write_replace(
                        &folder.join("state.json"),
                        state.to_string().as_bytes(),
                        self.fsync,
                    )?;
                    return Ok(true);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            std::thread::sleep(POLL.min(deadline - now));
        }
    }
}

fn read_cursor(state: &Path) -> Result<usize> {
    match std::fs::read_to_string(state) {
        Ok(text) => Ok(serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["lastProcessedLine"].as_u64())
            .unwrap_or(0) as usize),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", state.display())),
    }
}
