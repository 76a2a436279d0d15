//! The real servers the peers run on: `redis-server` and PostgreSQL, each
//! started by the harness on 127.0.0.1 with a random free port and a data
//! folder inside the run's scratch folder, and stopped and deleted when its
//! guard is dropped, on success and on error alike.
//!
//! It owns finding the server binaries, their configuration (stated in the
//! report: what "normal" and "full" durability mean for each) and their
//! lifetimes. It must never touch a server it did not start: it signals only
//! the pids it spawned, and never a system-wide service.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use crate::proc::{ChildGuard, free_port, which};

/// A scratch folder that is deleted with everything in it when dropped.
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `/tmp/inbox-bench-<pid>-<nanos>` (or under `$TMPDIR`),
    /// readable by other users so the `postgres` user can reach its data
    /// folder inside it.
    pub(crate) fn new() -> Result<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!("inbox-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        set_mode(&path, 0o755)?;
        Ok(TempDir { path })
    }

    /// The folder.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh empty subfolder `name` (emptied if it exists).
    pub(crate) fn fresh(&self, name: &str) -> Result<PathBuf> {
        let dir = self.path.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot empty {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", path.display()))
}

/// A `redis-server` on 127.0.0.1.
pub(crate) struct RedisServer {
    child: ChildGuard,
    /// The port it listens on.
    pub(crate) port: u16,
    dir: PathBuf,
}

/// How each Redis server is configured, as printed in the report.
pub(crate) const REDIS_NORMAL_CONFIG: &str =
    "`appendonly no`, `save \"\"` (no AOF, no RDB snapshots: nothing is fsynced per write)";
/// The durable configuration.
pub(crate) const REDIS_FULL_CONFIG: &str = "`appendonly yes`, `appendfsync always`, `save \"\"` (every write is fsynced to the AOF before the reply)";

impl RedisServer {
    /// Starts a server; `durable` turns on the AOF with an fsync per write.
    pub(crate) fn start(base: &Path, durable: bool) -> Result<RedisServer> {
        let binary = which("redis-server", &[]).ok_or_else(|| {
            anyhow!("redis-server is not installed; run scripts/bench (it installs it) or `apt-get install -y redis-server`")
        })?;
        let port = free_port()?;
        let dir = base.join(if durable {
            "redis-full"
        } else {
            "redis-normal"
        });
        std::fs::create_dir_all(&dir)?;
        let mut cmd = Command::new(binary);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .args(["--save", "", "--daemonize", "no", "--protected-mode", "no"])
            .args(["--logfile", "redis.log"]);
        if durable {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = ChildGuard::spawn(&mut cmd, "redis-server")?;
        let server = RedisServer { child, port, dir };
        server.wait_ready()?;
        Ok(server)
    }

    /// The connection URL.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        let client = redis::Client::open(self.url())?;
        loop {
            let attempt = client
                .get_connection()
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            match attempt {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    bail!(
                        "redis-server on port {} did not answer within 15 s: {e} (see {})",
                        self.port,
                        self.dir.join("redis.log").display()
                    )
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// `redis-server --version`, e.g. `7.0.15`.
    pub(crate) fn version() -> String {
        Command::new("redis-server")
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                text.split_whitespace()
                    .find_map(|w| w.strip_prefix("v=").map(str::to_owned))
            })
            .unwrap_or_else(|| "unknown".into())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.child.signal(rustix::process::Signal::TERM);
        self.child.wait_timeout(Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A PostgreSQL cluster on 127.0.0.1 with trust authentication, run as the
/// `postgres` OS user when the harness runs as root (PostgreSQL refuses to
/// run as root).
pub(crate) struct PostgresServer {
    child: ChildGuard,
    /// The port it listens on.
    pub(crate) port: u16,
    dir: PathBuf,
}

/// How the cluster is configured, as printed in the report.
pub(crate) const PG_CONFIG: &str = "`fsync=on`, `full_page_writes=on`, `wal_level=replica` (the defaults); \
     normal-durability sessions `SET synchronous_commit = off` (commits return before the WAL flush; a crash \
     loses at most the last ~600 ms of commits, never consistency), full-durability sessions keep \
     `synchronous_commit = on` (every commit waits for its WAL fsync)";

impl PostgresServer {
    /// Runs `initdb` in a fresh folder and starts `postgres` on it.
    pub(crate) fn start(base: &Path) -> Result<PostgresServer> {
        let bin = postgres_bin_dir().ok_or_else(|| {
            anyhow!("PostgreSQL is not installed (no initdb on PATH or under /usr/lib/postgresql/*/bin); run scripts/bench or `apt-get install -y postgresql`")
        })?;
        let dir = base.join("pg");
        std::fs::create_dir_all(&dir)?;
        set_mode(&dir, 0o700)?;
        let owner = if rustix::process::geteuid().is_root() {
            let (uid, gid) = user_ids("postgres").ok_or_else(|| {
                anyhow!("running as root, but there is no `postgres` OS user to run PostgreSQL as (it comes with the Debian package)")
            })?;
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .with_context(|| format!("cannot give {} to the postgres user", dir.display()))?;
            Some((uid, gid))
        } else {
            None
        };
        let as_owner = |cmd: &mut Command| {
            use std::os::unix::process::CommandExt;
            if let Some((uid, gid)) = owner {
                cmd.uid(uid).gid(gid);
            }
            cmd.current_dir(&dir).env_remove("PGDATA");
        };

        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&dir)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
            .args(["--locale", "C"]);
        as_owner(&mut initdb);
        let out = initdb.output().context("cannot run initdb")?;
        if !out.status.success() {
            bail!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }

        let port = free_port()?;
        let log = std::fs::File::create(dir.join("server.log"))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.join("server.log"), Some(uid), Some(gid))?;
        }
        let mut cmd = Command::new(bin.join("postgres"));
        cmd.arg("-D")
            .arg(&dir)
            .args(["-p", &port.to_string()])
            .arg("-k")
            .arg(&dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            .args(["-c", "full_page_writes=on", "-c", "max_connections=80"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        as_owner(&mut cmd);
        let child = ChildGuard::spawn(&mut cmd, "postgres")?;
        let server = PostgresServer { child, port, dir };
        server.wait_ready()?;
        Ok(server)
    }

    /// The connection string (TCP, trust authentication).
    pub(crate) fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match postgres::Client::connect(&self.conninfo(), postgres::NoTls) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => bail!(
                    "postgres on port {} did not accept connections within 30 s: {e} (see {})",
                    self.port,
                    self.dir.join("server.log").display()
                ),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The server's version, e.g. `15.18 (Debian 15.18-0+deb12u1)`.
    pub(crate) fn version(&self) -> String {
        postgres::Client::connect(&self.conninfo(), postgres::NoTls)
            .and_then(|mut c| c.query_one("SHOW server_version", &[]))
            .map(|row| row.get::<_, String>(0))
            .unwrap_or_else(|_| "unknown".into())
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // SIGINT is PostgreSQL's "fast shutdown": roll back sessions, write a
        // checkpoint, exit.
        self.child.signal(rustix::process::Signal::INT);
        self.child.wait_timeout(Duration::from_secs(15));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The folder holding `initdb` and `postgres`: on PATH, else the newest
/// `/usr/lib/postgresql/<version>/bin` (where Debian puts them).
pub(crate) fn postgres_bin_dir() -> Option<PathBuf> {
    if let Some(initdb) = which("initdb", &[]) {
        let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        if let Some(dir) = real.parent()
            && dir.join("postgres").is_file()
        {
            return Some(dir.to_path_buf());
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The uid and gid of OS user `name`, from `/etc/passwd`.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((uid, gid))
    })
}
