//! Peer: a JSON-array inbox rewritten under a lock file per message, the
//! way several agent-team tools keep a member's inbox today (issue 4 of the
//! tracker: "a JSON-array inbox rewritten under a lock file per message").
//!
//! How it is modelled: each member's inbox is one file holding a JSON array
//! of messages (`inboxes/<name>.json`). Every change (a new message, a
//! message marked claimed or done) takes the lock by creating
//! `<name>.json.lock` with `O_EXCL` (retrying with short jittered sleeps
//! while it exists), reads and parses the whole array, changes it,
//! serializes the whole array to a temporary file, renames it over the
//! inbox, and deletes the lock file. A claim marks the first `pending`
//! message `claimed` by the worker; done marks it `done`.
//!
//! What it does not do: stale-lock detection (a writer that dies holding the
//! lock blocks everyone until someone deletes the file), leases, fencing,
//! waiting (it is not in the wake or round-trip workloads: its readers poll
//! exactly like the JSONL peer's), or compaction: the array only grows, so
//! every write costs O(inbox size). This module must never add machinery
//! the description does not have.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::{task_id, task_line, write_replace};

/// One process's view of a folder of JSON-array inboxes.
pub struct JsonArray {
    dir: PathBuf,
    fsync: bool,
    jitter: u64,
}

/// How long a writer waits for the lock before giving up.
const LOCK_BUDGET: Duration = Duration::from_secs(30);

impl JsonArray {
    /// A client of the folder `dir`.
    pub fn new(dir: &Path, fsync: bool) -> JsonArray {
        JsonArray {
            dir: dir.to_path_buf(),
            fsync,
            jitter: u64::from(std::process::id()) | 1,
        }
    }

    /// Creates the worker's empty inbox; run once on an empty `dir`.
    pub fn prepare(dir: &Path) -> Result<()> {
        let folder = dir.join("inboxes");
        std::fs::create_dir_all(&folder)?;
        std::fs::write(folder.join("worker.json"), b"[]")?;
        Ok(())
    }

    fn inbox(&self) -> PathBuf {
        self.dir.join("inboxes").join("worker.json")
    }

    /// Appends a task to the worker's array.
    pub fn send(&mut self, producer: usize, seq: u64) -> Result<()> {
        let mut message: Value = serde_json::from_str(&task_line("lead", "worker", producer, seq))?;
        message["id"] = Value::from(task_id(producer, seq));
        message["status"] = Value::from("pending");
        self.update(|array| {
            array.push(message);
            Ok(None)
        })
        .map(drop)
    }

    /// Marks the first pending task claimed by `worker`; `None` if none.
    pub fn claim(&mut self, worker: usize) -> Result<Option<String>> {
        self.update(|array| {
            let Some(message) = array.iter_mut().find(|m| m["status"] == "pending") else {
                return Ok(None);
            };
            message["status"] = Value::from("claimed");
            message["claimedBy"] = Value::from(format!("worker-{worker}"));
            Ok(message["id"].as_str().map(str::to_owned))
        })
    }

    /// Marks `task` done.
    pub fn done(&mut self, task: &str) -> Result<()> {
        self.update(|array| {
            if let Some(message) = array.iter_mut().find(|m| m["id"] == task) {
                message["status"] = Value::from("done");
            }
            Ok(None)
        })
        .map(drop)
    }

    /// Lock, read the whole array, change it, write it back, unlock.
    fn update(
        &mut self,
        change: impl FnOnce(&mut Vec<Value>) -> Result<Option<String>>,
    ) -> Result<Option<String>> {
        let inbox = self.inbox();
        let lock = self.lock(&inbox)?;
        let result = (|| {
            let text = std::fs::read(&inbox)
                .with_context(|| format!("cannot read {}", inbox.display()))?;
            let mut array: Vec<Value> = serde_json::from_slice(&text)
                .with_context(|| format!("{} is not a JSON array", inbox.display()))?;
            let out = change(&mut array)?;
            let bytes = serde_json::to_vec(&array)?;
            write_replace(&inbox, &bytes, self.fsync)?;
            Ok(out)
        })();
        let _ = std::fs::remove_file(&lock);
        result
    }

    fn lock(&mut self, inbox: &Path) -> Result<PathBuf> {
        let mut lock = inbox.as_os_str().to_owned();
        lock.push(".lock");
        let lock = PathBuf::from(lock);
        let start = Instant::now();
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)
            {
                Ok(_) => return Ok(lock),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if start.elapsed() > LOCK_BUDGET {
                        bail!("{} stayed locked for {LOCK_BUDGET:?}", inbox.display());
                    }
                    // 50 to 550 µs, jittered so waiting writers spread out.
                    self.jitter ^= self.jitter << 13;
                    self.jitter ^= self.jitter >> 7;
                    self.jitter ^= self.jitter << 17;
                    std::thread::sleep(Duration::from_micros(50 + self.jitter % 500));
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", lock.display()));
                }
            }
        }
    }
}
