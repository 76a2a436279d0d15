//! Peer: a file-drop directory of `*.task.json` descriptors polled every
//! 2 s, as described in seed 001 (`/work/shared/seeds/001_d2b2cf195909a71a.txt`,
//! "File-queue inbox (--inbox)").
//!
//! How it is modelled: a writer creates `<name>.task.json` in the
//! recipient's folder (the seed's `echo '{...}' > ~/.fleet/inbox/note-$(date
//! +%s).task.json`; names here sort by sequence number so "sorted by
//! filename" is oldest first). The consumer polls the folder every [`POLL`]
//! (the seed's default 2000 ms), takes one descriptor per tick, sorted by
//! filename, renames it to `.processed` and writes a sibling `.result`
//! JSON, as the seed's lifecycle table says. For the claim workload several
//! workers share one folder and claim by renaming a descriptor to
//! `.claimed-<worker>` (the rename is atomic: a loser gets `ENOENT` and
//! counts a conflict); done writes `.result` and renames to `.processed`.
//! The claim workload drains without the 2 s tick (the seed takes one
//! descriptor per tick, which caps a consumer at 0.5 tasks/s; we measure the
//! file operations at their best instead).
//!
//! What it does not do: leases or reclaiming a descriptor whose worker died
//! (it stays `.claimed-*` for good), size or symlink checks, schema
//! validation, or anything of the coordinator behind the seed's poller.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{rename, task_line, write_new};

/// The seed's default poll interval (`AGENTS_FLEET_INBOX_POLL_MS`).
pub const POLL: Duration = Duration::from_millis(2000);

/// One process's view of a set of drop folders.
pub struct FileDrop {
    dir: PathBuf,
    fsync: bool,
}

impl FileDrop {
    /// A client of the drop folders under `dir`.
    pub fn new(dir: &Path, fsync: bool) -> FileDrop {
        FileDrop {
            dir: dir.to_path_buf(),
            fsync,
        }
    }

    /// Creates the drop folders; run once on an empty `dir`.
    pub fn prepare(dir: &Path) -> Result<()> {
        for member in ["lead", "worker"] {
            std::fs::create_dir_all(dir.join(member))?;
        }
        Ok(())
    }

    fn folder(&self, member: &str) -> PathBuf {
        self.dir.join(member)
    }

    /// Drops a task descriptor for the worker.
    pub fn send(&self, producer: usize, seq: u64) -> Result<()> {
        self.drop_into("worker", producer, seq)
    }

    /// Drops a descriptor into `member`'s folder.
    fn drop_into(&self, member: &str, producer: usize, seq: u64) -> Result<()> {
        let descriptor = serde_json::json!({
            "version": 1,
            "kind": "prompt",
            "prompt": task_line("lead", member, producer, seq),
            "createdAt": super::now_iso(),
        });
        let name = format!("{seq:012}-{producer:03}-{}.task.json", nanos());
        write_new(
            &self.folder(member).join(name),
            descriptor.to_string().as_bytes(),
            self.fsync,
        )
    }

    /// Pending descriptors in `member`'s folder, sorted by filename.
    fn pending(&self, member: &str) -> Result<Vec<String>> {
        let folder = self.folder(member);
        let mut names: Vec<String> = std::fs::read_dir(&folder)
            .with_context(|| format!("cannot list {}", folder.display()))?
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.ends_with(".task.json"))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Claims the first descriptor another worker has not renamed first.
    /// Returns the claimed name (or `None` when the folder is drained) and
    /// how many renames were lost to other workers.
    pub fn claim(&self, worker: usize) -> Result<(Option<String>, u32)> {
        let folder = self.folder("worker");
        let mut conflicts = 0;
        for name in self.pending("worker")? {
            let from = folder.join(&name);
            let to = folder.join(format!("{name}.claimed-{worker}"));
            match rename(&from, &to, self.fsync) {
                Ok(()) => return Ok((Some(name), conflicts)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => conflicts += 1,
                Err(e) => return Err(e).context("cannot rename a descriptor"),
            }
        }
        Ok((None, conflicts))
    }

    /// Finishes `name` claimed by `worker`: a `.result` and `.processed`.
    pub fn done(&self, name: &str, worker: usize) -> Result<()> {
        let folder = self.folder("worker");
        let result = serde_json::json!({
            "ok": true,
            "dispatchedAt": super::now_iso(),
            "descriptor": {"kind": "prompt"},
        });
        write_new(
            &folder.join(format!("{name}.result")),
            result.to_string().as_bytes(),
            self.fsync,
        )?;
        rename(
            &folder.join(format!("{name}.claimed-{worker}")),
            &folder.join(format!("{name}.processed")),
            self.fsync,
        )
        .context("cannot mark a descriptor processed")
    }

    /// Posts message `seq` to `to` (a request or an answer).
    pub fn post(&self, to: &str, seq: u64) -> Result<()> {
        self.drop_into(to, 0, seq)
    }

    /// The seed's poller as `me`: every [`POLL`], take the first pending
    /// descriptor (one per tick), mark it processed and write its result.
    /// True when one was taken, false at `timeout`.
    pub fn wait(&self, me: &str, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let folder = self.folder(me);
        loop {
            if let Some(name) = self.pending(me)?.into_iter().next() {
                rename(
                    &folder.join(&name),
                    &folder.join(format!("{name}.processed")),
                    self.fsync,
                )?;
                let result = serde_json::json!({"ok": true, "dispatchedAt": super::now_iso()});
                write_new(
                    &folder.join(format!("{name}.result")),
                    result.to_string().as_bytes(),
                    self.fsync,
                )?;
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            std::thread::sleep(POLL.min(deadline - now));
        }
    }
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}
