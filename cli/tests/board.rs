//! `inbox serve`, the live board's HTTP API, end to end: the server runs as
//! a real process (`inbox serve --port 0`, handed over to `inbox-serve`),
//! spoken to with plain HTTP/1.1 over a TcpStream (so a test can send any
//! Host, Origin or token it likes), while other agents use the CLI as
//! separate processes on the same database. The page itself is tested in
//! headless Chromium by `cli/tests/board/board.test.mjs`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::TestEnv;

/// A running `inbox serve`, stopped when dropped.
struct Board {
    child: Child,
    address: SocketAddr,
    /// The first line it printed on stdout.
    printed: String,
    /// The token, from the URL printed (or `--url-file`'s).
    token: String,
    /// Everything it wrote on stderr so far.
    stderr: Arc<Mutex<String>>,
}

impl Board {
    fn start(env: &TestEnv, extra: &[&str]) -> Board {
        let mut args = vec!["serve", "--port", "0"];
        args.extend_from_slice(extra);
        Board::start_with(env, &args, |_| {})
    }

    /// [`Board::start`] on the database `url` names (`$INBOX_DB`), rather
    /// than the test's SQLite file.
    fn start_on(env: &TestEnv, extra: &[&str], url: &str) -> Board {
        let mut args = vec!["serve", "--port", "0"];
        args.extend_from_slice(extra);
        Board::start_with(env, &args, |command| {
            command.env("INBOX_DB", url);
        })
    }

    /// `inbox ARGS` (a `serve` command line, whole), `prepare`d, read up
    /// to its URL.
    fn start_with(env: &TestEnv, args: &[&str], prepare: impl FnOnce(&mut Command)) -> Board {
        let mut command = env.command(args);
        command
            .env_remove("INBOX_NOW")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        prepare(&mut command);
        let mut child = command.spawn().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut from = child.stderr.take().unwrap();
        let into = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = from.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                into.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut printed = String::new();
        stdout.read_line(&mut printed).unwrap();
        let printed = printed.trim().to_owned();
        let url_file = args
            .iter()
            .position(|a| *a == "--url-file")
            .map(|at| env.dir().join(args[at + 1]));
        let found = board_url(&printed, url_file.as_deref());
        let Some((address, Some(token))) = found.as_deref().and_then(parse_url) else {
            // Stopped here, or a failed test would leave it running.
            let _ = child.kill();
            let _ = child.wait();
            let said = stderr.lock().unwrap().clone();
            panic!("no board URL with a token: {printed} {found:?}\n{said}");
        };
        Board {
            child,
            address,
            printed,
            token,
            stderr,
        }
    }

    /// What it wrote on stderr, once `until` holds of it (at most 10 s).
    fn stderr_once(&self, until: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let said = self.stderr.lock().unwrap().clone();
            if until(&said) || Instant::now() > deadline {
                return said;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn host(&self) -> String {
        self.address.to_string()
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// `POST /api/COMMAND` with `body`, the token and extra headers.
    fn post(&self, command: &str, body: &str, headers: &[(&str, &str)]) -> Answer {
        let bearer = self.bearer();
        let mut all = vec![("Authorization", bearer.as_str())];
        all.extend_from_slice(headers);
        self.post_as(command, body, &all)
    }

    /// `POST /api/COMMAND` with `body` and these headers only (and Host).
    fn post_as(&self, command: &str, body: &str, headers: &[(&str, &str)]) -> Answer {
        let host = self.host();
        let mut all = vec![
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
        ];
        all.extend_from_slice(headers);
        request(self.address, "POST", &format!("/api/{command}"), &all, body)
    }

    /// `GET PATH` with the token.
    fn get(&self, path: &str) -> Answer {
        let (host, bearer) = (self.host(), self.bearer());
        let headers = [("Host", host.as_str()), ("Authorization", bearer.as_str())];
        request(self.address, "GET", path, &headers, "")
    }

    /// A write: `POST /api/COMMAND` with the board's token.
    fn write(&self, command: &str, body: &str) -> Answer {
        self.post(command, body, &[])
    }
}

/// The board's URL: the first line it printed (the URL, or with
/// `--json` an object with `url`), or what `--url-file` holds.
fn board_url(printed: &str, url_file: Option<&std::path::Path>) -> Option<String> {
    if let Some(path) = url_file {
        return std::fs::read_to_string(path)
            .ok()
            .map(|url| url.trim().to_owned());
    }
    if printed.starts_with('{') {
        let started: Value = serde_json::from_str(printed).ok()?;
        return started["url"].as_str().map(str::to_owned);
    }
    Some(printed.to_owned())
}

/// The address and token of a board's URL, `http://HOST:PORT/#token=T`.
fn parse_url(url: &str) -> Option<(SocketAddr, Option<String>)> {
    let rest = url.strip_prefix("http://")?;
    let (host, fragment) = rest.split_once('/')?;
    let token = fragment.strip_prefix("#token=").map(str::to_owned);
    Some((host.parse().ok()?, token))
}

impl Drop for Board {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The refusal's code, after checking the JSON contract's shape.
    fn refused(&self, status: u16) -> String {
        assert_eq!(self.status, status, "{self:?}");
        let json = self.json();
        assert_eq!(json["ok"], false, "{self:?}");
        assert!(json["error"]["message"].is_string(), "{self:?}");
        json["error"]["code"].as_str().unwrap().to_owned()
    }
}

/// One request on a connection of its own, read to its end.
fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    Answer {
        status: status.parse().unwrap(),
        headers,
        body: body.to_owned(),
    }
}

#[test]
fn a_read_only_board_reads_refuses_writes_and_sets_the_security_headers() {
    let env = TestEnv::initialized();
    env.json(
        &["send", "--from", "lead", "--to", "w1", "--subject", "T1"],
        0,
    );
    let board = Board::start(&env, &[]);
    assert_eq!(board.token.len(), 64, "a token on a read-only board too");
    let said = board.stderr_once(|s| s.contains("read-only"));
    assert!(said.contains("read-only"), "{said}");
    assert!(board.address.ip().is_loopback());

    let listed = board.post("list", "{}", &[]);
    assert_eq!(listed.status, 200, "{listed:?}");
    assert_eq!(listed.json()["threads"][0]["subject"], "T1");
    let about = board.get("/api/board");
    assert_eq!(about.json()["write"], false);

    let send = r#"{"to_agent":"w1","subject":"sneaky"}"#;
    assert_eq!(board.post("send", send, &[]).refused(403), "read_only");
    // Even a write dressed as a read: show with mark_read moves a cursor.
    let list = listed.json();
    let thread = list["threads"][0]["thread_id"].as_str().unwrap();
    let show = format!(r#"{{"thread_id":"{thread}","agent":"w1","mark_read":true}}"#);
    assert_eq!(board.post("show", &show, &[]).refused(403), "read_only");

    // The page's files are all that is served without the token.
    let page = request(board.address, "GET", "/", &[("Host", &board.host())], "");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<title>inbox board</title>"));
    assert!(!page.body.contains(&board.token));
    let csp = page.header("content-security-policy").unwrap();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(listed.header("x-content-type-options"), Some("nosniff"));
    let listed_after = env.json(&["list"], 0);
    assert_eq!(listed_after["threads"].as_array().unwrap().len(), 1);
}

/// Runs `curl ARGS` as the uid 64123, another local user: its stdout.
/// `None` when this test cannot (not root, or no curl).
fn curl_as_another_user(args: &[&str]) -> Option<String> {
    use std::os::unix::process::CommandExt as _;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: another local user needs root (a child with another uid)");
        return None;
    }
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(args)
        .uid(64123)
        .gid(64123)
        .stdin(Stdio::null())
        .output();
    match output {
        Ok(output) => Some(String::from_utf8_lossy(&output.stdout).into_owned()),
        Err(error) => {
            eprintln!("skipped: curl cannot run ({error})");
            None
        }
    }
}

#[test]
fn every_call_but_the_pages_files_needs_the_token_even_a_read_from_another_local_user() {
    let env = TestEnv::initialized();
    env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "w1",
            "--subject",
            "private",
        ],
        0,
    );
    let board = Board::start(&env, &[]);
    let host = board.host();
    let anonymous = [("Host", host.as_str())];
    for (method, path) in [
        ("POST", "/api/list"),
        ("POST", "/api/show"),
        ("POST", "/api/agent-list"),
        ("GET", "/api/board"),
        ("GET", "/api/events"),
        ("GET", "/api/no-such"),
        ("GET", "/etc/passwd"),
    ] {
        let answer = request(board.address, method, path, &anonymous, "{}");
        assert_eq!(answer.refused(401), "token_required", "{method} {path}");
        assert!(answer.header("www-authenticate").is_some(), "{answer:?}");
        assert!(!answer.body.contains("private"), "{answer:?}");
    }
    let wrong = format!("Bearer {}", "0".repeat(64));
    for given in [wrong.as_str(), "Bearer ", "Basic abc", board.token.as_str()] {
        let answer = board.post_as("list", "{}", &[("Authorization", given)]);
        let code = answer.refused(401);
        assert!(
            code == "token_invalid" || code == "token_required",
            "{given}: {code}"
        );
    }
    for file in [
        "/",
        "/board.js",
        "/views.js",
        "/markdown.js",
        "/board.css",
        "/favicon.svg",
    ] {
        assert_eq!(
            request(board.address, "GET", file, &anonymous, "").status,
            200,
            "{file}"
        );
    }
    assert_eq!(board.post("list", "{}", &[]).status, 200);

    // Another local user: the database file is 0600, and the board lets
    // it read no more than the file does. Nor does the server show it
    // the token: not in its command line, not in its environment.
    let url = format!("http://{}/api/list", board.address);
    let refused = curl_as_another_user(&["--request", "POST", "--data", "{}", &url]);
    if let Some(refused) = refused {
        let json: Value =
            serde_json::from_str(&refused).unwrap_or_else(|e| panic!("{e}: {refused}"));
        assert_eq!(json["error"]["code"], "token_required", "{json}");
        assert!(!refused.contains("private"));
        let pid = board.child.id();
        let proc = |what: &str| format!("file:///proc/{pid}/{what}");
        let cmdline = curl_as_another_user(&[&proc("cmdline")]).unwrap_or_default();
        assert!(
            cmdline.contains("serve") && !cmdline.contains(&board.token),
            "{cmdline}"
        );
        let environ = curl_as_another_user(&[&proc("environ")]).unwrap_or_default();
        assert!(!environ.contains(&board.token), "{environ}");
    }
}

#[test]
fn writes_need_the_token_and_the_boards_own_origin() {
    let env = TestEnv::initialized();
    let board = Board::start(&env, &["--write", "--as", "alice"]);
    let token = board.token.clone();
    assert_eq!(token.len(), 64, "256 bits of hex");
    let send = r#"{"to_agent":"w1","subject":"From the board"}"#;

    assert_eq!(
        board.post_as("send", send, &[]).refused(401),
        "token_required"
    );
    let wrong = format!("Bearer {}", "0".repeat(64));
    assert_eq!(
        board
            .post_as("send", send, &[("Authorization", &wrong)])
            .refused(401),
        "token_invalid"
    );
    let evil = [("Origin", "http://evil.example")];
    assert_eq!(
        board.post("send", send, &evil).refused(403),
        "origin_refused"
    );
    let cross = [("Sec-Fetch-Site", "cross-site")];
    assert_eq!(
        board.post("send", send, &cross).refused(403),
        "origin_refused"
    );
    let bearer = board.bearer();
    let rebound = request(
        board.address,
        "POST",
        "/api/list",
        &[
            ("Host", &format!("evil.example:{}", board.address.port())),
            ("Authorization", &bearer),
        ],
        "{}",
    );
    assert_eq!(rebound.refused(403), "host_refused");
    assert_eq!(env.json(&["list"], 0)["threads"], serde_json::json!([]));

    let origin = format!("http://{}", board.address);
    let own = [("Origin", origin.as_str())];
    let sent = board.post("send", send, &own);
    assert_eq!(sent.status, 200, "{sent:?}");
    assert_eq!(sent.json()["message"]["from_agent"], "alice");
    // The board writes as its --as agent only.
    let other = r#"{"to_agent":"w1","subject":"x","from_agent":"lead"}"#;
    assert_eq!(board.write("send", other).refused(400), "invalid_value");

    let thread = sent.json()["thread"]["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cancel = format!(r#"{{"thread_id":"{thread}","reason":"not needed"}}"#);
    let cancelled = board.write("cancel", &cancel);
    assert_eq!(cancelled.status, 200, "{cancelled:?}");
    let shown = env.json(&["show", "--thread", &thread], 0);
    assert_eq!(shown["thread"]["status"], "cancelled");
}

#[test]
fn bad_requests_get_the_json_error_shape_and_a_matching_status() {
    let env = TestEnv::initialized();
    let board = Board::start(&env, &["--write"]);
    assert_eq!(
        board.post("list", "{bad", &[]).refused(400),
        "invalid_request"
    );
    assert_eq!(
        board.post("list", "[1]", &[]).refused(400),
        "invalid_request"
    );
    let status = r#"{"status":["nope"]}"#;
    assert_eq!(
        board.post("list", status, &[]).refused(400),
        "invalid_request"
    );
    let unknown = r#"{"thread_id":"thr_01JH0000000000000000000000"}"#;
    assert_eq!(
        board.post("show", unknown, &[]).refused(404),
        "thread_not_found"
    );
    assert_eq!(board.post("claim", "{}", &[]).refused(404), "not_served");
    assert_eq!(board.post("no-such", "{}", &[]).refused(404), "not_served");
    assert_eq!(board.get("/etc/passwd").refused(404), "not_served");
    let big = format!(r#"{{"summary":"{}"}}"#, "x".repeat(3 * 1024 * 1024));
    assert_eq!(board.write("send", &big).refused(413), "too_long");
    let missing = r#"{"to_agent":"w1"}"#;
    assert_eq!(board.write("send", missing).refused(400), "missing_field");
}

/// Reads an event stream until an event with `id` has come; returns the
/// `data:` lines seen, by id.
fn read_until(stream: &mut BufReader<TcpStream>, id: u64) -> Vec<(u64, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut events = Vec::new();
    let mut current = None;
    while Instant::now() < deadline {
        let mut line = String::new();
        if stream.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let line = line.trim_end();
        if let Some(value) = line.strip_prefix("id: ") {
            current = value.parse().ok();
        } else if let (Some(data), Some(at)) = (line.strip_prefix("data: "), current) {
            events.push((at, data.to_owned()));
            if at >= id {
                return events;
            }
        }
    }
    panic!("no event {id} in 10 s; saw {events:?}");
}

fn subscribe(board: &Board, last: Option<u64>) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(board.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = format!(
        "GET /api/events HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nAuthorization: {}\r\n",
        board.address,
        board.bearer()
    );
    if let Some(last) = last {
        head.push_str(&format!("Last-Event-ID: {last}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    BufReader::new(stream)
}

#[test]
fn the_event_stream_delivers_another_process_commit_and_resumes_from_last_event_id() {
    let env = TestEnv::initialized();
    let first = env.json(
        &["send", "--from", "lead", "--to", "w1", "--subject", "T1"],
        0,
    );
    let start = first["thread"]["last_event_id"].as_u64().unwrap();
    let board = Board::start(&env, &[]);

    let mut stream = subscribe(&board, None);
    let hello = read_until(&mut stream, start);
    assert_eq!(hello.last().unwrap().0, start, "hello names the head");

    let sent = env.json(
        &["send", "--from", "lead", "--to", "w1", "--subject", "T2"],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap();
    let events = read_until(&mut stream, start + 1);
    let (id, data) = events.last().unwrap();
    assert_eq!(*id, start + 1);
    let data: Value = serde_json::from_str(data).unwrap();
    assert_eq!(data["thread_id"], thread);
    assert_eq!(data["event_type"], "thread_created");
    assert_eq!(data["status"], "pending");
    drop(stream);

    // Another commit while no page listens; a page that saw `start`
    // reconnects and hears both, in order.
    env.json(&["claim", "--agent", "w1", "--thread", thread], 0);
    let mut resumed = subscribe(&board, Some(start));
    let missed = read_until(&mut resumed, start + 2);
    let ids: Vec<u64> = missed.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [start + 1, start + 2]);
    assert!(missed[1].1.contains("thread_claimed"), "{missed:?}");
}

#[test]
fn a_board_on_another_address_says_so_and_still_refuses_other_hosts() {
    let env = TestEnv::initialized();
    let board = Board::start(&env, &["--listen", "0.0.0.0"]);
    let said = board.stderr_once(|s| s.contains("warning: listening on 0.0.0.0"));
    assert!(said.contains("warning: listening on 0.0.0.0"), "{said}");
    // The URL names loopback, which reaches it from this machine.
    assert!(board.address.ip().is_loopback());
    assert_eq!(board.post("list", "{}", &[]).status, 200);
    // Listening everywhere, it answers to any address of this machine,
    // and to no name: a web page whose site's name an attacker points at
    // this machine (DNS rebinding) names that site.
    let port = board.address.port();
    let bearer = board.bearer();
    let with_host = |host: String| {
        let headers = [("Host", host.as_str()), ("Authorization", bearer.as_str())];
        request(board.address, "POST", "/api/list", &headers, "{}")
    };
    for host in [
        format!("192.0.2.7:{port}"),
        format!("[::1]:{port}"),
        format!("localhost:{port}"),
    ] {
        assert_eq!(with_host(host.clone()).status, 200, "{host}");
    }
    for host in [
        format!("evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        String::new(),
    ] {
        assert_eq!(
            with_host(host.clone()).refused(403),
            "host_refused",
            "{host}"
        );
    }
}

#[test]
fn every_loopback_listen_address_prints_a_url_that_works() {
    let env = TestEnv::initialized();
    let lines: [&[&str]; 5] = [
        &["--listen", "127.0.0.2:0"],
        &["--listen", "127.0.0.3", "--port", "0"],
        &["--listen", "[::1]:0"],
        &["--listen", "::1", "--port", "0"],
        &["--listen", "localhost:0"],
    ];
    for extra in lines {
        let mut args = vec!["serve"];
        args.extend_from_slice(extra);
        let board = Board::start_with(&env, &args, |_| {});
        assert!(
            board.address.ip().is_loopback(),
            "{extra:?}: {}",
            board.printed
        );
        assert_ne!(board.address.port(), 0);
        let listed = board.post("list", "{}", &[]);
        assert_eq!(
            listed.status, 200,
            "{extra:?}: {} {listed:?}",
            board.printed
        );
        let said = board.stderr_once(|s| s.contains("read-only"));
        assert!(!said.contains("warning"), "{extra:?}: {said}");
    }
    // The port given twice, or a name that would be looked up: refused.
    let twice = env.json(&["serve", "--listen", "127.0.0.2:0", "--port", "0"], 30);
    assert_eq!(twice["error"]["code"], "invalid_value", "{twice}");
    let named = env.json(&["serve", "--listen", "example.com:0"], 30);
    assert_eq!(named["error"]["code"], "invalid_request", "{named}");
}

/// The board over PostgreSQL: the
/// same API and event stream on a database named by URL, fed by CLI
/// processes that share nothing with the server but that URL, and a write
/// from the board that those processes then see.
#[test]
fn over_postgres_the_board_lists_streams_and_writes_what_cli_processes_share() {
    let Some(cluster) = inbox_pg_cluster::PgCluster::start_or_skip("board: postgres") else {
        return;
    };
    cluster
        .admin()
        .batch_execute("CREATE DATABASE inbox")
        .unwrap();
    let url = cluster.url("inbox");
    let env = TestEnv::new();
    let cli = |args: &[&str]| -> Value {
        let mut command = env.command(args);
        command
            .arg("--json")
            .env("INBOX_DB", &url)
            .env_remove("INBOX_NOW");
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "inbox {args:?}: {stdout}");
        serde_json::from_str(&stdout).unwrap()
    };
    cli(&["init"]);
    let first = cli(&["send", "--from", "lead", "--to", "w1", "--subject", "T1"]);
    let start = first["thread"]["last_event_id"].as_u64().unwrap();
    let board = Board::start_on(&env, &["--write", "--as", "alice"], &url);

    let mut stream = subscribe(&board, None);
    assert_eq!(read_until(&mut stream, start).last().unwrap().0, start);
    let sent = cli(&["send", "--from", "lead", "--to", "w1", "--subject", "T2"]);
    let second = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let events = read_until(&mut stream, start + 1);
    let data: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(data["thread_id"], second.as_str());

    let listed = board.post("list", "{}", &[]).json();
    let subjects: Vec<&str> = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["subject"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, ["T2", "T1"]);

    let cancel = format!(r#"{{"thread_id":"{second}","reason":"not needed"}}"#);
    assert_eq!(board.write("cancel", &cancel).status, 200);
    let shown = cli(&["show", "--thread", &second]);
    assert_eq!(shown["thread"]["status"], "cancelled");
    assert!(read_until(&mut stream, start + 2)[0].1.contains("cancel"));
}

/// How many descriptors the process `pid` has open.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// What process `pid`'s descriptors lead to, for a failure's message.
fn descriptor_targets(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or_else(
        |_| Vec::new(),
        |entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|entry| std::fs::read_link(entry.path()).ok())
                .map(|target| target.display().to_string())
                .collect()
        },
    )
}

/// The threads of process `pid`, and its resident memory in kB.
fn resident_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Sends `GET /api/events` on a connection of its own and reads the
/// answer's status line and, for a refusal, its body; an accepted stream
/// stays open in the returned reader.
fn open_stream(board: &Board) -> (u16, BufReader<TcpStream>) {
    let mut stream = subscribe(board, None);
    let mut status = String::new();
    stream.read_line(&mut status).unwrap();
    let code = status.split(' ').nth(1).unwrap().parse().unwrap();
    (code, stream)
}

/// The rest of an answer whose status line was read: its headers and
/// its body (as long as its Content-Length says).
fn answer_of(stream: &mut BufReader<TcpStream>) -> String {
    let mut rest = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
        rest.push_str(&line);
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    rest.push_str(&String::from_utf8_lossy(&body));
    rest
}

#[test]
fn streams_and_connections_are_bounded_reads_still_answer_and_gone_clients_hold_nothing() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let env = TestEnv::initialized();
    env.json(
        &["send", "--from", "lead", "--to", "w1", "--subject", "T1"],
        0,
    );
    let board = Board::start(&env, &[]);
    let pid = board.child.id();
    assert_eq!(board.post("list", "{}", &[]).status, 200);
    let baseline = descriptors(pid);
    let sockets_before = descriptor_targets(pid)
        .iter()
        .filter(|target| target.starts_with("socket:"))
        .count();

    // Far more event streams than the board keeps: the first ones open,
    // the rest are refused with 503 and the JSON error shape.
    let mut open = Vec::new();
    let mut refused = 0;
    for _ in 0..200 {
        let (status, mut stream) = open_stream(&board);
        match status {
            200 => open.push(stream),
            503 => {
                let rest = answer_of(&mut stream);
                assert!(rest.contains("\"too_many_streams\""), "{rest}");
                assert!(
                    rest.to_ascii_lowercase().contains("retry-after: "),
                    "{rest}"
                );
                refused += 1;
            }
            other => panic!("a stream answered {other}"),
        }
    }
    assert!(
        !open.is_empty() && refused > 0,
        "{} open, {refused} refused",
        open.len()
    );
    assert!(open.len() <= 64, "{} streams open", open.len());
    // A read still answers, promptly enough for a person (liveness only).
    let started = Instant::now();
    assert_eq!(board.post("list", "{}", &[]).status, 200);
    assert!(started.elapsed() < Duration::from_secs(10));

    // Far more connections than the board serves, saying nothing: those
    // past the limit are told so at once, in the JSON error shape.
    let mut idle = Vec::new();
    let mut told = 0;
    for _ in 0..400 {
        let connection = TcpStream::connect(board.address).unwrap();
        connection
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut first = [0u8; 512];
        match (&connection).read(&mut first) {
            Ok(n) if n > 0 => {
                let said = String::from_utf8_lossy(&first[..n]);
                assert!(said.starts_with("HTTP/1.1 503"), "{said}");
                assert!(said.contains("\"too_many_connections\""), "{said}");
                told += 1;
            }
            _ => idle.push(connection),
        }
    }
    assert!(told > 0, "no connection was refused");
    let (descriptors_full, memory_full) = (descriptors(pid), resident_kb(pid));
    assert!(
        descriptors_full < baseline + 256 + 64 + 16,
        "{descriptors_full} descriptors open (baseline {baseline})"
    );
    assert!(memory_full < 200 * 1024, "{memory_full} kB resident");

    // A client that says nothing is let go (10 s for a request's head).
    // The first one was accepted: the streams left places free.
    let mut slow = idle.remove(0);
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        slow.read(&mut byte).unwrap_or(0),
        0,
        "the idle connection stays open"
    );

    // Every client goes away: the server gives back what they held.
    // Sockets are what clients hold; the database's descriptors are the
    // engine threads' (at most 8), which SQLite keeps open while another
    // connection of the process holds a lock on the file, whoever asked.
    drop(idle);
    drop(open);
    drop(slow);
    let sockets = |pid| {
        descriptor_targets(pid)
            .iter()
            .filter(|target| target.starts_with("socket:"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while sockets(pid) > sockets_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        sockets(pid) <= sockets_before && descriptors(pid) <= baseline + 4 + 8 * 3,
        "{} descriptors still open (baseline {baseline}, {sockets_before} sockets): {:?}",
        descriptors(pid),
        descriptor_targets(pid)
    );
    let (status, _stream) = open_stream(&board);
    assert_eq!(status, 200, "a stream opens again");
    assert_eq!(board.post("list", "{}", &[]).status, 200);
}

/// How many sockets process `pid` holds.
fn sockets(pid: u32) -> usize {
    descriptor_targets(pid)
        .iter()
        .filter(|target| target.starts_with("socket:"))
        .count()
}

/// A stranger's connection (no token: the page's files need none) that
/// asks for the page's script `requests` times in a row, pipelined, and
/// never reads an answer.
fn stalled_pipeline(board: &Board, requests: usize) -> TcpStream {
    let stream = TcpStream::connect(board.address).unwrap();
    stream.set_nonblocking(true).unwrap();
    let all = format!("GET /board.js HTTP/1.1\r\nHost: {}\r\n\r\n", board.host()).repeat(requests);
    let mut sent = 0;
    // Until all is sent or the server stops reading (its answers fill
    // the connection).
    while let Ok(n) = (&stream).write(&all.as_bytes()[sent..]) {
        sent += n;
        if n == 0 || sent == all.len() {
            break;
        }
    }
    stream
}

#[test]
fn connections_that_stop_reading_are_let_go_and_the_owner_gets_in_again() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let env = TestEnv::initialized();
    env.json(
        &["send", "--from", "lead", "--to", "w1", "--subject", "T1"],
        0,
    );
    let board = Board::start(&env, &[]);
    let pid = board.child.id();
    assert_eq!(board.post("list", "{}", &[]).status, 200);
    let before = sockets(pid);

    // More connections than the board serves, each with more answers
    // asked for than any socket holds, none read.
    let stalled: Vec<TcpStream> = (0..300).map(|_| stalled_pipeline(&board, 2000)).collect();
    // Every place is taken: the owner too is turned away, for now.
    let (host, bearer) = (board.host(), board.bearer());
    let page = || {
        let headers = [("Host", host.as_str()), ("Authorization", bearer.as_str())];
        request(board.address, "GET", "/", &headers, "")
    };
    assert_eq!(page().refused(503), "too_many_connections");

    // Connections whose answers make no way for 10 s are closed: the
    // owner's page and its reads get in again (liveness, generous).
    let deadline = Instant::now() + Duration::from_secs(60);
    let loaded = loop {
        let loaded = page();
        if loaded.status == 200 || Instant::now() > deadline {
            break loaded;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(loaded.status, 200, "{loaded:?}");
    assert!(loaded.body.contains("board.js"), "{}", loaded.body);
    assert_eq!(board.post("list", "{}", &[]).status, 200);
    while sockets(pid) > before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        sockets(pid) <= before,
        "{} sockets still open (before: {before})",
        sockets(pid)
    );
    drop(stalled);
}

#[test]
fn event_streams_whose_client_stops_reading_are_let_go_and_give_their_place_back() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let env = TestEnv::initialized();
    let board = Board::start(&env, &["--write"]);
    // Every stream's place taken by a client (the owner's token, say a
    // page in a frozen tab) that asks for the events and reads nothing,
    // its own buffer kept small as a stalled reader's would be.
    let stalled: Vec<TcpStream> = (0..64)
        .map(|_| {
            let stream = subscribe(&board, None).into_inner();
            let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&stream, 4096);
            stream
        })
        .collect();
    let (status, mut refused) = open_stream(&board);
    let refusal = answer_of(&mut refused);
    assert_eq!(status, 503, "{refusal}");
    assert!(refusal.contains("too_many_streams"), "{refusal}");

    // News comes, more than the stalled connections hold, until a
    // stream's place is free again (liveness, generous).
    let send = r#"{"to_agent":"w1","subject":"news"}"#;
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut sent = 0;
    let reopened = loop {
        for _ in 0..50 {
            assert_eq!(board.write("send", send).status, 200);
        }
        sent += 50;
        let (status, stream) = open_stream(&board);
        if status == 200 || Instant::now() > deadline {
            break (status, stream);
        }
    };
    assert_eq!(reopened.0, 200, "no place came back after {sent} events");
    // The new page hears what happens next.
    let mut fresh = reopened.1;
    let head = read_until(&mut fresh, 0).last().unwrap().0;
    assert_eq!(board.write("send", send).status, 200);
    assert!(read_until(&mut fresh, head + 1).last().unwrap().0 > head);
    drop(stalled);
}

#[test]
fn a_connection_is_answered_a_hundred_times_at_most_then_closed() {
    let env = TestEnv::initialized();
    let board = Board::start(&env, &[]);
    let mut stream = TcpStream::connect(board.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let one = format!(
        "GET /favicon.svg HTTP/1.1\r\nHost: {}\r\n\r\n",
        board.host()
    );
    stream.write_all(one.repeat(150).as_bytes()).unwrap();
    let mut stream = BufReader::new(stream);
    let mut answers = 0;
    let mut last = String::new();
    loop {
        let mut status = String::new();
        match stream.read_line(&mut status) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        last = answer_of(&mut stream);
        answers += 1;
    }
    assert_eq!(answers, 100);
    assert!(
        last.to_ascii_lowercase().contains("connection: close"),
        "{last}"
    );
}

/// The command line of process `pid`, its words joined by spaces.
fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

/// A private file in the test's folder holding `content`.
fn private_file(env: &TestEnv, name: &str, content: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = env.dir().join(name);
    std::fs::write(&path, content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

#[test]
fn no_token_reaches_stderr_or_a_servers_command_line() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let env = TestEnv::initialized();
    env.json(&["settings", "--agent-tokens", "required"], 0);
    let alice = env.json(&["agent", "register", "--agent", "alice"], 0);
    let agent_token = alice["agent_token"].as_str().unwrap().to_owned();
    let file = private_file(&env, "alice.token", &format!("{agent_token}\n"));
    let file = file.to_str().unwrap();
    let send = r#"{"to_agent":"w1","subject":"from the board"}"#;

    // The agent token on inbox's command line, in a file, in the
    // environment: the server runs with none on its own, and its writes,
    // which need the token, work.
    let given: [(&[&str], Option<&str>); 3] = [
        (&["--agent-token", &agent_token], None),
        (&["--agent-token-file", file], None),
        (&[], Some(agent_token.as_str())),
    ];
    for (flags, environment) in given {
        let mut args = vec!["serve", "--port", "0", "--write", "--as", "alice"];
        args.extend_from_slice(flags);
        let board = Board::start_with(&env, &args, |command| {
            if let Some(token) = environment {
                command.env("INBOX_AGENT_TOKEN", token);
            }
        });
        let line = command_line(board.child.id());
        assert!(line.contains("inbox-serve"), "{line}");
        assert!(
            !line.contains(&agent_token) && !line.contains(&board.token),
            "{line}"
        );
        let sent = board.write("send", send);
        assert_eq!(sent.status, 200, "{flags:?}: {sent:?}");
        let said = board.stderr_once(|s| s.contains("writes are on"));
        assert!(said.contains("writes are on"), "{said}");
        assert!(
            !said.contains(&agent_token) && !said.contains(&board.token),
            "{said}"
        );
        assert!(!said.contains("warning"), "{said}");
    }

    // --url-file: the URL with its token in a private file; stdout shows
    // it without, and so does stderr.
    let board = Board::start(
        &env,
        &[
            "--write",
            "--as",
            "alice",
            "--url-file",
            "board.url",
            "--agent-token-file",
            file,
        ],
    );
    let written = env.dir().join("board.url");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&written).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        !board.printed.contains(&board.token) && !board.printed.contains('#'),
        "{}",
        board.printed
    );
    assert_eq!(board.printed, format!("http://{}/", board.address));
    assert_eq!(board.write("send", send).status, 200);
    let said = board.stderr_once(|s| s.contains("writes are on"));
    assert!(
        said.contains("board.url") && !said.contains(&board.token),
        "{said}"
    );
}

/// A browser opener that writes down the command line it was given, in
/// a folder of the test's own, and the `PATH` that finds it first: the
/// file it writes to, and that `PATH`.
fn fake_opener(env: &TestEnv) -> (std::path::PathBuf, String) {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = env.dir().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let opener = bin.join("xdg-open");
    std::fs::write(
        &opener,
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$0.args.tmp\" && mv \"$0.args.tmp\" \"$0.args\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (bin.join("xdg-open.args"), path)
}

/// What the fake opener was given, once it has run (at most 10 s).
fn opened_with(args: &std::path::Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(given) = std::fs::read_to_string(args) {
            return given;
        }
        assert!(Instant::now() < deadline, "the opener was not run");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A folder in the test's folder with this mode.
fn folder(env: &TestEnv, name: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = env.dir().join(name);
    std::fs::create_dir(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn open_hands_the_browser_a_private_file_and_no_secret_on_a_command_line() {
    use rustix::process::Signal;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    use std::os::unix::process::CommandExt as _;
    if !cfg!(target_os = "linux") {
        return;
    }
    let env = TestEnv::initialized();
    let (args, path) = fake_opener(&env);
    let root = rustix::process::geteuid().is_root();
    // Every folder on the way is open to other users, as /tmp is: only
    // the board's own folder and file keep them out.
    std::fs::set_permissions(env.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let temp = folder(&env, "tmp", 0o1777);
    let private = folder(&env, "run-private", 0o700);
    let shared = folder(&env, "run-shared", 0o755);
    let others = folder(&env, "run-others", 0o700);
    if root {
        let stranger = Some(rustix::process::Uid::from_raw(64123));
        rustix::fs::chown(&others, stranger, None).unwrap();
    }
    // The runtime folder is used when it is the user's own and private;
    // otherwise a fresh private folder in the temp folder is.
    let cases = [
        (Some(&private), &private, Signal::INT),
        (Some(&shared), &temp, Signal::TERM),
        // Not root: no other user, so the folder is this user's.
        (
            Some(&others),
            if root { &temp } else { &others },
            Signal::INT,
        ),
        (None, &temp, Signal::TERM),
    ];
    for (runtime, expected, stop) in cases {
        let _ = std::fs::remove_file(&args);
        let mut board = Board::start_with(&env, &["serve", "--port", "0", "--open"], |command| {
            command.env("PATH", &path).env("TMPDIR", &temp);
            match runtime {
                Some(runtime) => command.env("XDG_RUNTIME_DIR", runtime),
                None => command.env_remove("XDG_RUNTIME_DIR"),
            };
        });
        let given = opened_with(&args);
        assert!(!given.contains(&board.token), "{given}");
        let file = std::path::PathBuf::from(
            given
                .trim()
                .strip_prefix("file://")
                .unwrap_or_else(|| panic!("the opener was not given a file: {given}")),
        );
        let own = file.parent().unwrap().to_owned();
        assert_eq!(
            own.parent(),
            Some(expected.as_path()),
            "{runtime:?}: {given}"
        );
        let me = rustix::process::geteuid().as_raw();
        for (path, mode) in [(&own, 0o700), (&file, 0o600)] {
            let metadata = std::fs::symlink_metadata(path).unwrap();
            assert_eq!(metadata.mode() & 0o7777, mode, "{}", path.display());
            assert_eq!(metadata.uid(), me, "{}", path.display());
        }

        // Another local user cannot read it.
        if root {
            let read = Command::new("cat")
                .arg(&file)
                .uid(64123)
                .gid(64123)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&read.stderr);
            assert!(!read.status.success(), "another user read it");
            assert!(said.contains("Permission denied"), "{said}");
            assert!(read.stdout.is_empty());
        } else {
            eprintln!("skipped: reading as another local user needs root");
        }

        // Its owner's browser is sent on to the board with its token,
        // which works.
        let html = std::fs::read_to_string(&file).unwrap();
        let target: String = html
            .split_once("location.replace(")
            .and_then(|(_, rest)| rest.split_once(')'))
            .and_then(|(literal, _)| serde_json::from_str(literal).ok())
            .unwrap_or_else(|| panic!("no redirect in {html}"));
        assert_eq!(
            parse_url(&target),
            Some((board.address, Some(board.token.clone())))
        );
        assert!(!html.contains("http-equiv"), "{html}");
        assert_eq!(board.post("list", "{}", &[]).status, 200);
        let said = board.stderr_once(|s| s.contains("read-only"));
        assert!(!said.contains(&board.token), "{said}");

        // Stopped, the board takes its file away.
        let pid = rustix::process::Pid::from_child(&board.child);
        rustix::process::kill_process(pid, stop).unwrap();
        let _ = board.child.wait();
        assert!(!own.exists(), "{} is left behind", own.display());
    }
}

#[test]
fn inbox_mcp_runs_without_the_token_on_its_command_line() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let env = TestEnv::initialized();
    let token = "tok_not_on_the_command_line_0123456789";
    let mut server = env
        .command(&["mcp", "--agent", "w1", "--agent-token", token])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = server.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut line = command_line(pid);
    while !line.contains("inbox-mcp") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        line = command_line(pid);
    }
    assert!(
        line.contains("inbox-mcp") && line.contains("--agent w1"),
        "{line}"
    );
    assert!(!line.contains(token), "{line}");
    // It was handed over in the environment, which only its user reads.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ.contains(&format!("INBOX_AGENT_TOKEN={token}")),
        "not handed over"
    );
    let _ = server.kill();
    let output = server.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains(token), "{stderr}");
}

#[test]
fn a_server_run_by_hand_with_the_token_on_its_command_line_is_warned() {
    let env = TestEnv::initialized();
    let serve = std::path::Path::new(crate::common::inbox_bin()).with_file_name("inbox-serve");
    let token = "tok_typed_by_hand_0123456789";
    let mut command = Command::new(serve);
    command
        .args(["--port", "0", "--db"])
        .arg(env.db())
        .args(["--agent-token", token]);
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let mut child = command.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("warning: --agent-token"), "{stderr}");
    assert!(!stderr.contains(token), "{stderr}");
}
