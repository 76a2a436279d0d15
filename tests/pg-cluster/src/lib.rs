//! A throwaway PostgreSQL cluster for tests: `initdb` in a temporary
//! folder, `postgres` listening only on a Unix socket inside it (no TCP
//! port, so nothing else on the machine can reach it or clash with it),
//! `fsync` off (a test never survives a power loss), run as the `postgres`
//! OS user when the tests run as root (PostgreSQL refuses to run as root).
//! Stopped and deleted when dropped. It must never touch a server it did
//! not start: it signals only the pid it spawned, never a system service.
//! The approach is the benchmark harness's (`bench/src/services.rs`).
//!
//! Test support only (a dev-dependency): it panics on any failure to set
//! the cluster up, as a test would.

// A failure to set up the cluster fails the test that asked for it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// The client these tests use, for callers that have no dependency on it.
pub use postgres;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running cluster.
pub struct PgCluster {
    child: Child,
    dir: tempfile::TempDir,
}

/// The socket's port number: only names the socket file in the private
/// folder, so any fixed number works.
const PORT: u16 = 5432;

impl PgCluster {
    /// Starts a cluster, or returns `None` (after saying why on stderr)
    /// when PostgreSQL is not installed and `INBOX_REQUIRE_POSTGRES` is
    /// not set. With it set, a missing PostgreSQL fails the test.
    pub fn start_or_skip(test: &str) -> Option<PgCluster> {
        match bin_dir() {
            Some(bin) => Some(PgCluster::start(&bin)),
            None if std::env::var_os("INBOX_REQUIRE_POSTGRES").is_some() => panic!(
                "{test}: INBOX_REQUIRE_POSTGRES is set but PostgreSQL is not installed \
                 (no initdb on PATH or under /usr/lib/postgresql/*/bin)"
            ),
            None => {
                eprintln!(
                    "SKIPPED {test}: PostgreSQL is not installed (no initdb on PATH or under \
                     /usr/lib/postgresql/*/bin); install it (apt-get install postgresql) or set \
                     INBOX_REQUIRE_POSTGRES=1 to make this a failure"
                );
                None
            }
        }
    }

    fn start(bin: &Path) -> PgCluster {
        let dir = tempfile::Builder::new()
            .prefix("inbox-pg-test-")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let owner = owner();
        if let Some((uid, gid)) = owner {
            // The postgres user must reach its data folder inside ours.
            set_mode(dir.path(), 0o755);
            std::os::unix::fs::chown(&data, Some(uid), Some(gid)).unwrap();
        }
        set_mode(&data, 0o700);
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
            .args(["--locale", "C"]);
        as_owner(&mut initdb, owner, &data);
        let out = initdb.output().expect("cannot run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let mut postgres = Command::new(bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-p", &PORT.to_string()])
            .arg("-k")
            .arg(&data)
            .args(["-c", "listen_addresses="])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=100"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        as_owner(&mut postgres, owner, &data);
        let child = postgres.spawn().expect("cannot start postgres");
        let server = PgCluster { child, dir };
        server.wait_ready();
        server
    }

    /// The folder holding the server's socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's log (its stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// A client configuration for database `dbname` as the superuser.
    pub fn config(&self, dbname: &str) -> postgres::Config {
        let mut config = postgres::Config::new();
        config
            .host_path(self.socket_dir())
            .port(PORT)
            .user("postgres")
            .dbname(dbname);
        config
    }

    /// A `postgresql://` URL for database `dbname` as the superuser, over
    /// the socket: what a user passes as `--db` or `$INBOX_DB`.
    pub fn url(&self, dbname: &str) -> String {
        format!(
            "postgresql://postgres@/{dbname}?host={}&port={PORT}",
            self.socket_dir().display()
        )
    }

    /// A plain client to the `postgres` database, for setting tests up.
    pub fn admin(&self) -> postgres::Client {
        self.config("postgres").connect(postgres::NoTls).unwrap()
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.config("postgres").connect(postgres::NoTls) {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => panic!(
                    "postgres did not accept connections within 30 s: {e}; its log: {}",
                    std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
                ),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // SIGINT is PostgreSQL's fast shutdown: end the sessions, exit.
        if let Some(pid) = i32::try_from(self.child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The folder holding `initdb` and `postgres`: on PATH, else the newest
/// `/usr/lib/postgresql/<version>/bin` (where Debian puts them).
fn bin_dir() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).find(|dir| dir.join("initdb").is_file()));
    if let Some(dir) = on_path {
        let real = std::fs::canonicalize(dir.join("initdb")).ok()?;
        let dir = real.parent()?;
        if dir.join("postgres").is_file() {
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

/// The `postgres` OS user's ids when running as root (PostgreSQL will not
/// run as root); `None` otherwise (it runs as us).
fn owner() -> Option<(u32, u32)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let ids = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"postgres") && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    });
    Some(ids.expect(
        "running as root, but there is no `postgres` OS user to run PostgreSQL as \
         (it comes with the Debian package)",
    ))
}

fn as_owner(cmd: &mut Command, owner: Option<(u32, u32)>, data: &Path) {
    if let Some((uid, gid)) = owner {
        cmd.uid(uid).gid(gid);
    }
    cmd.current_dir(data).env_remove("PGDATA");
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
