//! What a check reports when a promise of inbox does not hold, and the
//! scratch folders the checks run in.
//!
//! A [`Failure`] names the check, the invariant that broke, the evidence,
//! and the database file it broke on; the folder holding that file is kept
//! (and printed) so that it can be inspected, while the folders of passing
//! runs are deleted. This module must never decide whether something is a
//! violation: the checks do.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A broken promise (or a harness that could not do its job).
#[derive(Debug)]
pub struct Failure {
    /// The check that found it: `crash`, `stop`, `load`.
    pub check: String,
    /// The invariant that broke, in words.
    pub invariant: String,
    /// The evidence: commands, outputs, rows.
    pub detail: String,
    /// The database it broke on, kept for inspection.
    pub database: Option<PathBuf>,
}

impl Failure {
    /// A violation of `invariant` found by `check`.
    pub fn violation(check: &str, invariant: &str, detail: impl Into<String>) -> Failure {
        Failure {
            check: check.to_owned(),
            invariant: invariant.to_owned(),
            detail: detail.into(),
            database: None,
        }
    }

    /// The harness itself could not run (a process would not start, a file
    /// could not be written): not a finding about inbox, but still a failure.
    pub fn harness(check: &str, detail: impl Into<String>) -> Failure {
        Failure::violation(check, "the harness can run its check", detail)
    }

    /// The same failure, its evidence prefixed with where it happened.
    pub fn context(mut self, prefix: &str) -> Failure {
        self.detail = format!("{prefix}: {}", self.detail);
        self
    }

    /// The same failure, pinned to the database it happened on.
    pub fn on(mut self, database: &Path) -> Failure {
        if self.database.is_none() {
            self.database = Some(database.to_owned());
        }
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: VIOLATION of: {}", self.check, self.invariant)?;
        for line in self.detail.lines() {
            writeln!(f, "  {line}")?;
        }
        if let Some(database) = &self.database {
            write!(f, "  database (kept): {}", database.display())?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// A scratch folder for one check: deleted when dropped, unless
/// [`Workdir::keep`] was called because the check failed.
#[derive(Debug)]
pub struct Workdir {
    path: PathBuf,
    keep: bool,
}

static WORKDIRS: AtomicUsize = AtomicUsize::new(0);

impl Workdir {
    /// A new empty folder under `base` (the system's temporary folder if
    /// `None`), named after the check and the seed.
    pub fn create(base: Option<&Path>, check: &str, seed: u64) -> Result<Workdir, Failure> {
        let base = base.map_or_else(std::env::temp_dir, Path::to_owned);
        let n = WORKDIRS.fetch_add(1, Ordering::Relaxed);
        let path = base.join(format!(
            "inbox-fault-{check}-seed{seed}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).map_err(|e| {
            Failure::harness(check, format!("cannot create {}: {e}", path.display()))
        })?;
        Ok(Workdir { path, keep: false })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the folder after the run (a check failed in it).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Runs `check` in this folder; on failure keeps the folder and says so.
    pub fn run<T>(mut self, check: impl FnOnce(&Path) -> Result<T, Failure>) -> Result<T, Failure> {
        let result = check(&self.path);
        if let Err(failure) = &result {
            self.keep();
            if failure.database.is_none() {
                eprintln!("kept the failing run's folder: {}", self.path.display());
            }
        }
        result
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
