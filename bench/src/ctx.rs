//! One run's context: the scratch folder, the servers, the binaries, the
//! size of the run, and how to name a [`Target`] for a system.
//!
//! It owns the lifetimes: fields are declared so that the servers stop
//! before the scratch folder holding their data is deleted. It must never
//! run a workload itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, anyhow, bail};

use crate::peers::{Durability, System, Target};
use crate::proc::which;
use crate::services::{PostgresServer, RedisServer, TempDir};

/// The binaries a run uses.
pub(crate) struct Bins {
    /// `target/release/installed/bin/inbox`: the build users install
    /// (`cargo install --path cli --locked`); every SQLite figure is
    /// this binary's.
    pub(crate) inbox: PathBuf,
    /// `target/release/installed/bin/orch`.
    pub(crate) orch: PathBuf,
    /// `target/release/installed/bin/inbox-serve`, the board's server. Workloads start it
    /// as people do, through `inbox serve`, which runs the one beside
    /// `inbox`; located here so a missing build fails the run at its
    /// start, not in its last section.
    pub(crate) serve: PathBuf,
    /// The file peers' one-process-per-message helper.
    pub(crate) peer: PathBuf,
    /// The process-spawn floor of issue 20's targets: a Rust `fn main() {}`
    /// as cargo builds it by default, dynamically linked, as `inbox` is.
    pub(crate) noop: PathBuf,
    /// The SQLite floor: one row committed from a fresh process, with
    /// inbox's SQLite and connection settings and nothing else, linked as
    /// the spawn floor and `inbox` are.
    pub(crate) sqlite_floor: PathBuf,
    /// This harness (for worker and waiter child processes).
    pub(crate) me: PathBuf,
    pub(crate) redis_cli: PathBuf,
    pub(crate) psql: PathBuf,
}

impl Bins {
    /// Finds the binaries measured in `release` (see [`release_dir`]) and
    /// the harness's own helpers next to this executable, so a smoke run
    /// can take a debug build of the harness while it measures the
    /// installed release build.
    pub(crate) fn locate(release: &Path) -> Result<Bins> {
        let me = std::env::current_exe()?;
        let dir = me
            .parent()
            .ok_or_else(|| anyhow!("cannot tell where the harness binary is"))?
            .to_path_buf();
        let need_in = |dir: &Path, name: &str| -> Result<PathBuf> {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                bail!(
                    "{} is missing; build it with `cargo install --path cli --locked --root target/release/{INSTALLED} --bin inbox --bin orch --bin inbox-serve` and `cargo build --release -p inbox-bench --bins` (scripts/bench does)",
                    path.display()
                )
            }
        };
        let need = |name: &str| need_in(&dir, name);
        let installed = release.join(INSTALLED).join("bin");
        let pg_bin = crate::services::postgres_bin_dir();
        let pg_extra: Vec<String> = pg_bin.iter().map(|p| p.display().to_string()).collect();
        let pg_extra: Vec<&str> = pg_extra.iter().map(String::as_str).collect();
        Ok(Bins {
            inbox: need_in(&installed, "inbox")?,
            orch: need_in(&installed, "orch")?,
            serve: need_in(&installed, "inbox-serve")?,
            peer: need("inbox-bench-peer")?,
            noop: need("inbox-bench-noop")?,
            sqlite_floor: need(SQLITE_FLOOR)?,
            redis_cli: which("redis-cli", &[]).ok_or_else(|| {
                anyhow!("redis-cli is not installed (apt-get install -y redis-server)")
            })?,
            psql: which("psql", &pg_extra)
                .ok_or_else(|| anyhow!("psql is not installed (apt-get install -y postgresql)"))?,
            me,
        })
    }
}

/// The release folder the measured binaries are built into and found in:
/// `$CARGO_TARGET_DIR/release`, else `target/release` under `root`.
pub(crate) fn release_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("release")
}

/// Where the harness installs the binaries it measures (`--root` of
/// `cargo install`), in [`release_dir`].
pub(crate) const INSTALLED: &str = "installed";

/// The SQLite floor's executable.
pub(crate) const SQLITE_FLOOR: &str = "inbox-bench-sqlite-floor";

/// Everything a workload needs.
pub(crate) struct Ctx {
    /// Small sizes and few iterations (the CI smoke run).
    pub(crate) quick: bool,
    pub(crate) redis_normal: RedisServer,
    pub(crate) redis_full: RedisServer,
    pub(crate) pg: PostgresServer,
    pub(crate) bins: Bins,
    /// Where plots and section JSON go (`docs/bench`).
    pub(crate) out_dir: PathBuf,
    /// Deleted last, after the servers stopped.
    pub(crate) tmp: TempDir,
}

impl Ctx {
    /// The durabilities every workload runs under.
    pub(crate) const DURABILITIES: [Durability; 2] = [Durability::Normal, Durability::Full];

    /// Picks a size: `full` normally, `quick` with `--quick`.
    pub(crate) fn size<T>(&self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }

    /// Where `system` keeps its data under `durability`.
    pub(crate) fn target(&self, system: System, durability: Durability) -> Target {
        let name = format!("{system:?}-{}", durability.as_str()).to_lowercase();
        let (path, url) = match system {
            System::Inbox
            | System::InboxNoGate
            | System::InboxDaemon
            | System::SqliteQueue
            | System::SqliteReplyRows => {
                (self.tmp.path().join(format!("{name}.db")), String::new())
            }
            System::RedisList | System::RedisStream => (
                PathBuf::new(),
                match durability {
                    Durability::Normal => self.redis_normal.url(),
                    Durability::Full => self.redis_full.url(),
                },
            ),
            System::Postgres | System::PostgresOrdered | System::PostgresOrderedInServer => {
                (PathBuf::new(), self.pg.conninfo())
            }
            System::InboxPg
            | System::InboxPgOneByOne
            | System::InboxPgNoNotify
            | System::InboxPgNoCommandReads => (
                PathBuf::from(self.pg.conninfo()),
                crate::peers::inbox_pg::url(self.pg.port, durability),
            ),
            System::Jsonl | System::JsonArray | System::FileDrop => {
                (self.tmp.path().join(name), String::new())
            }
        };
        Target {
            system,
            durability,
            path,
            url,
            thread: None,
        }
    }

    /// An `inbox` command on database `db` (no inherited agent or clock).
    pub(crate) fn inbox(&self, db: &Path) -> Command {
        let mut cmd = Command::new(&self.bins.inbox);
        cmd.env("INBOX_DB", db)
            .env_remove("INBOX_AGENT")
            .env_remove("INBOX_NOW");
        cmd
    }

    /// `orch` on `db`, with a clean environment.
    pub(crate) fn orch(&self, db: &Path) -> Command {
        let mut cmd = Command::new(&self.bins.orch);
        cmd.env("INBOX_DB", db)
            .env_remove("INBOX_AGENT")
            .env_remove("INBOX_NOW");
        cmd
    }

    /// `redis-cli` against the server of `durability`, raw output.
    pub(crate) fn redis_cli(&self, durability: Durability) -> Command {
        let port = match durability {
            Durability::Normal => self.redis_normal.port,
            Durability::Full => self.redis_full.port,
        };
        let mut cmd = Command::new(&self.bins.redis_cli);
        cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()]);
        cmd
    }

    /// `psql` on the cluster, quiet, unaligned, tuples only, with the
    /// session's `synchronous_commit` for `durability`.
    pub(crate) fn psql(&self, durability: Durability) -> Command {
        let mut cmd = Command::new(&self.bins.psql);
        cmd.args(["-h", "127.0.0.1", "-p", &self.pg.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-qAtX"])
            .env(
                "PGOPTIONS",
                match durability {
                    Durability::Normal => "-c synchronous_commit=off",
                    Durability::Full => "-c synchronous_commit=on",
                },
            );
        cmd
    }

    /// The file-peer helper: `inbox-bench-peer <system> <op> <dir> [--fsync] ...`.
    pub(crate) fn peer(&self, target: &Target, op: &str) -> Command {
        let system = match target.system {
            System::Jsonl => "jsonl",
            System::JsonArray => "json-array",
            _ => "file-drop",
        };
        let mut cmd = Command::new(&self.bins.peer);
        cmd.arg(system).arg(op).arg(&target.path);
        if target.durability.fsync() {
            cmd.arg("--fsync");
        }
        cmd
    }
}
