//! A throwaway PostgreSQL cluster for tests: `initdb` in a temporary
//! folder, `postgres` listening on a Unix socket inside it and, only when
//! a test asks ([`Options`]), on a free loopback TCP port, with TLS (a
//! throwaway certificate authority and server certificate made with the
//! `openssl` command) or with password authentication over TCP. `fsync`
//! is off (a test never survives a power loss); it runs as the `postgres`
//! OS user when the tests run as root (PostgreSQL refuses to run as root).
//! A test may stop, start and restart it on the same data folder, and
//! SIGKILL one of its backends. Stopped and deleted when dropped. It must
//! never touch a server it did not start: it signals only the postmaster
//! it spawned and that postmaster's own children, never a system service.
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

/// What a test needs of its cluster beyond the Unix socket (every option
/// off by default: a socket only, trust authentication, no TLS).
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Also listen on a free TCP port of `127.0.0.1` ([`PgCluster::tcp_port`]).
    pub tcp: bool,
    /// Serve TLS (`ssl = on`) with a certificate for `localhost` (only:
    /// `127.0.0.1` is a name it does not hold) signed by a throwaway
    /// authority
    /// ([`PgCluster::ca_cert`]). Needs `tcp`: PostgreSQL never speaks TLS
    /// on a Unix socket.
    pub tls: bool,
    /// Ask TCP clients for a SCRAM-SHA-256 password (`pg_hba.conf`); the
    /// socket stays `trust`, so [`PgCluster::admin`] still connects.
    /// Needs `tcp`.
    pub scram: bool,
    /// Listen on TCP at this address rather than `127.0.0.1`, trusting
    /// the one client address given with it: for workers in another
    /// network namespace, which reach the server over a veth pair and
    /// nothing else. The address must already be on an interface. Needs
    /// `tcp`.
    pub listen_on: Option<(std::net::Ipv4Addr, std::net::Ipv4Addr)>,
}

/// A cluster, running unless a test stopped it.
pub struct PgCluster {
    /// The postmaster, while it runs.
    child: Option<Child>,
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    options: Options,
}

/// The socket's port number when there is no TCP port: it only names the
/// socket file in the private folder, so any fixed number works.
const PORT: u16 = 5432;

impl PgCluster {
    /// Starts a cluster, or returns `None` (after saying why on stderr)
    /// when PostgreSQL is not installed and `INBOX_REQUIRE_POSTGRES` is
    /// not set. With it set, a missing PostgreSQL fails the test.
    pub fn start_or_skip(test: &str) -> Option<PgCluster> {
        PgCluster::start_or_skip_with(test, Options::default())
    }

    /// [`PgCluster::start_or_skip`] with `options`.
    pub fn start_or_skip_with(test: &str, options: Options) -> Option<PgCluster> {
        match bin_dir() {
            Some(bin) => Some(PgCluster::create(bin, options)),
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

    fn create(bin: PathBuf, options: Options) -> PgCluster {
        assert!(
            options.tcp || !(options.tls || options.scram || options.listen_on.is_some()),
            "TLS, passwords and an address are for TCP clients: set Options::tcp too"
        );
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
        if options.tls {
            make_certificates(dir.path(), &data, owner);
        }
        if options.scram {
            // Rewriting the file initdb made keeps its owner and mode.
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
            )
            .unwrap();
        }
        if let Some((_, client)) = options.listen_on {
            trust_tcp_client(&data, client);
        }
        let port = if options.tcp { free_port() } else { PORT };
        let mut server = PgCluster {
            child: None,
            dir,
            bin,
            port,
            options,
        };
        server.start();
        server
    }

    /// Starts the postmaster again on the same data folder (after
    /// [`PgCluster::stop`]) and waits until it accepts connections.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "the cluster is already running");
        let data = self.socket_dir();
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .unwrap();
        let listen = match self.options.listen_on {
            Some((address, _)) => address.to_string(),
            None if self.options.tcp => "127.0.0.1".to_owned(),
            None => String::new(),
        };
        let mut postgres = Command::new(self.bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&data)
            .args(["-c", &format!("listen_addresses={listen}")])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=100"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if self.options.tls {
            // Paths relative to the data folder, where the key is private.
            postgres.args(["-c", "ssl=on", "-c", "ssl_cert_file=server.crt"]);
            postgres.args(["-c", "ssl_key_file=server.key"]);
        }
        as_owner(&mut postgres, owner(), &data);
        self.child = Some(postgres.spawn().expect("cannot start postgres"));
        self.wait_ready();
    }

    /// Stops the postmaster with a fast shutdown (SIGINT: every session
    /// is ended, open transactions roll back, the data is kept) and waits
    /// until it has exited.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        signal(child.id(), rustix::process::Signal::INT);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// A real restart: [`PgCluster::stop`], then [`PgCluster::start`].
    pub fn restart(&mut self) {
        self.stop();
        self.start();
    }

    /// SIGKILLs backend `pid` (a `pg_stat_activity.pid`), as the kernel's
    /// out-of-memory killer or an operator's `kill -9` would; PostgreSQL
    /// then ends every other session and recovers from its log before it
    /// accepts connections again, which this waits for (its log says it
    /// is ready once more). Refuses a pid that is not a child of this
    /// cluster's postmaster.
    pub fn kill_backend(&self, pid: i32) {
        const READY: &str = "ready to accept connections";
        let ready_before = self.log().matches(READY).count();
        let postmaster = self.child.as_ref().expect("the cluster is stopped").id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // The parent pid is the second field after the `(command)`.
        let after_name = &stat[stat.rfind(')').unwrap() + 1..];
        let parent: u32 = after_name
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            parent, postmaster,
            "pid {pid} is not one of this cluster's backends"
        );
        signal(pid.unsigned_abs(), rustix::process::Signal::KILL);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.log().matches(READY).count() == ready_before {
            assert!(
                Instant::now() < deadline,
                "the server did not recover within 30 s; its log: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The loopback TCP port ([`Options::tcp`]).
    pub fn tcp_port(&self) -> u16 {
        assert!(
            self.options.tcp,
            "the cluster was started without Options::tcp"
        );
        self.port
    }

    /// The certificate of the authority that signed the server's
    /// ([`Options::tls`]), in PEM: what a client that verifies trusts.
    pub fn ca_cert(&self) -> PathBuf {
        assert!(
            self.options.tls,
            "the cluster was started without Options::tls"
        );
        self.dir.path().join("tls").join("ca.crt")
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
            .port(self.port)
            .user("postgres")
            .dbname(dbname);
        config
    }

    /// A `postgresql://` URL for database `dbname` as the superuser, over
    /// the socket: what a user passes as `--db` or `$INBOX_DB`.
    pub fn url(&self, dbname: &str) -> String {
        format!(
            "postgresql://postgres@/{dbname}?host={}&port={}",
            self.socket_dir().display(),
            self.port
        )
    }

    /// A plain client to the `postgres` database, for setting tests up.
    pub fn admin(&self) -> postgres::Client {
        self.config("postgres").connect(postgres::NoTls).unwrap()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("postgres exited ({status}); its log: {}", self.log());
            }
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
        self.stop();
    }
}

/// Sends `signal` to `pid`, ignoring a process already gone.
fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// A TCP port of `127.0.0.1` that nothing listens on now (the kernel's
/// pick; another program could take it before the server does, which a
/// failed start would show).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A throwaway certificate authority (`<dir>/tls/ca.crt`) and a server
/// certificate it signed for `localhost` alone, put in `data`
/// as `server.crt` and `server.key` (the key private to the server's
/// user, as PostgreSQL demands). A separate authority, not a self-signed
/// server certificate, because a verifying client refuses a certificate
/// authority's own certificate as a server's.
fn make_certificates(dir: &Path, data: &Path, owner: Option<(u32, u32)>) {
    let tls = dir.join("tls");
    std::fs::create_dir(&tls).unwrap();
    std::fs::write(
        tls.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2";
    openssl(
        &tls,
        &format!("req -x509 {key} -keyout ca.key -out ca.crt -subj /CN=inbox-test-ca"),
    );
    openssl(
        &tls,
        &format!("req {key} -keyout server.key -out server.csr -subj /CN=localhost"),
    );
    openssl(
        &tls,
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
         -extfile server.ext -out server.crt",
    );
    for file in ["server.crt", "server.key"] {
        std::fs::copy(tls.join(file), data.join(file)).unwrap();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(data.join(file), Some(uid), Some(gid)).unwrap();
        }
    }
    set_mode(&data.join("server.key"), 0o600);
}

/// Runs the `openssl` command with `args` (split on spaces) in `dir`.
fn openssl(dir: &Path, args: &str) {
    let out = Command::new("openssl")
        .args(args.split_whitespace())
        .current_dir(dir)
        .output()
        .expect("cannot run `openssl`, which makes the TLS test's certificates (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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

/// Lets `client` connect over TCP without a password (the test's own
/// namespace is the only thing that can send from it).
fn trust_tcp_client(data: &Path, client: std::net::Ipv4Addr) {
    let hba = data.join("pg_hba.conf");
    let mut rules = std::fs::read_to_string(&hba).unwrap();
    rules.push_str(&format!("host all all {client}/32 trust\n"));
    std::fs::write(&hba, rules).unwrap();
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The recipe for database roles in docs/postgres.md, as (what a
/// superuser runs, what the schema's owner runs): the SQL between its
/// `roles-recipe-*` markers, so that what the docs tell operators is what
/// tests run.
pub fn roles_recipe() -> (String, String) {
    let readme = include_str!("../../../docs/postgres.md");
    let block = |marker: &str| -> String {
        let start = readme
            .find(&format!("<!-- {marker} -->"))
            .unwrap_or_else(|| panic!("docs/postgres.md has no {marker} marker"));
        let sql = &readme[start..];
        let open = sql.find("```sql\n").unwrap() + "```sql\n".len();
        let close = open + sql[open..].find("```").unwrap();
        sql[open..close].to_owned()
    };
    (block("roles-recipe-superuser"), block("roles-recipe-owner"))
}
