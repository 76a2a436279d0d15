//! `inbox serve`, the live board's HTTP API, end to end: the server runs as
//! a real process (`inbox serve --port 0`, handed over to `inbox-serve`),
//! spoken to with plain HTTP/1.1 over a TcpStream (so a test can send any
//! Host, Origin or token it likes), while other agents use the CLI as
//! separate processes on the same database. The page itself is tested in
//! headless Chromium by `cli/tests/board/board.test.mjs`.

#![cfg(feature = "serve")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::TestEnv;

/// A running `inbox serve`, stopped when dropped.
struct Board {
    child: Child,
    address: SocketAddr,
    token: Option<String>,
    stderr: String,
}

impl Board {
    fn start(env: &TestEnv, extra: &[&str]) -> Board {
        Board::start_on(env, extra, None)
    }

    /// [`Board::start`] on the database `url` names (`$INBOX_DB`), rather
    /// than the test's SQLite file.
    fn start_on(env: &TestEnv, extra: &[&str], url: Option<&str>) -> Board {
        let mut args = vec!["serve", "--port", "0"];
        args.extend_from_slice(extra);
        let mut command = env.command(&args);
        if let Some(url) = url {
            command.env("INBOX_DB", url);
        }
        command
            .env_remove("INBOX_NOW")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut url = String::new();
        stdout.read_line(&mut url).unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut said = String::new();
        // Its lines for people: the board, writes or not, any warning.
        for _ in 0..(2 + usize::from(extra.contains(&"--listen"))) {
            stderr.read_line(&mut said).unwrap();
        }
        let url = url.trim().to_owned();
        let rest = url
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("{url}"));
        let (host, fragment) = rest.split_once('/').unwrap();
        let token = fragment.strip_prefix("#token=").map(str::to_owned);
        let address = host.parse().unwrap_or_else(|_| panic!("{url}"));
        Board {
            child,
            address,
            token,
            stderr: said,
        }
    }

    /// `POST /api/COMMAND` with `body` and extra headers.
    fn post(&self, command: &str, body: &str, headers: &[(&str, &str)]) -> Answer {
        let host = self.address.to_string();
        let mut all = vec![
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
        ];
        all.extend_from_slice(headers);
        request(self.address, "POST", &format!("/api/{command}"), &all, body)
    }

    /// `POST /api/COMMAND` with the board's token.
    fn write(&self, command: &str, body: &str) -> Answer {
        let bearer = format!("Bearer {}", self.token.as_deref().unwrap());
        self.post(command, body, &[("Authorization", &bearer)])
    }
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
    assert!(board.token.is_none(), "no token without --write");
    assert!(board.stderr.contains("read-only"), "{}", board.stderr);
    assert!(board.address.ip().is_loopback());

    let listed = board.post("list", "{}", &[]);
    assert_eq!(listed.status, 200, "{listed:?}");
    assert_eq!(listed.json()["threads"][0]["subject"], "T1");
    let about = request(
        board.address,
        "GET",
        "/api/board",
        &[("Host", &board.address.to_string())],
        "",
    );
    assert_eq!(about.json()["write"], false);

    let send = r#"{"to_agent":"w1","subject":"sneaky"}"#;
    assert_eq!(board.post("send", send, &[]).refused(403), "read_only");
    // Even a write dressed as a read: show with mark_read moves a cursor.
    let list = listed.json();
    let thread = list["threads"][0]["thread_id"].as_str().unwrap();
    let show = format!(r#"{{"thread_id":"{thread}","agent":"w1","mark_read":true}}"#);
    assert_eq!(board.post("show", &show, &[]).refused(403), "read_only");

    let page = request(
        board.address,
        "GET",
        "/",
        &[("Host", &board.address.to_string())],
        "",
    );
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<title>inbox board</title>"));
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

#[test]
fn writes_need_the_token_and_the_boards_own_origin() {
    let env = TestEnv::initialized();
    let board = Board::start(&env, &["--write", "--as", "alice"]);
    let token = board.token.clone().unwrap();
    assert_eq!(token.len(), 64, "256 bits of hex");
    let send = r#"{"to_agent":"w1","subject":"From the board"}"#;

    assert_eq!(
        board.post("send", send, &[]).refused(403),
        "write_token_required"
    );
    let wrong = format!("Bearer {}", "0".repeat(64));
    assert_eq!(
        board
            .post("send", send, &[("Authorization", &wrong)])
            .refused(403),
        "write_token_invalid"
    );
    let bearer = format!("Bearer {token}");
    let evil = [
        ("Authorization", bearer.as_str()),
        ("Origin", "http://evil.example"),
    ];
    assert_eq!(
        board.post("send", send, &evil).refused(403),
        "origin_refused"
    );
    let cross = [
        ("Authorization", bearer.as_str()),
        ("Sec-Fetch-Site", "cross-site"),
    ];
    assert_eq!(
        board.post("send", send, &cross).refused(403),
        "origin_refused"
    );
    let rebound = request(
        board.address,
        "POST",
        "/api/list",
        &[("Host", &format!("evil.example:{}", board.address.port()))],
        "{}",
    );
    assert_eq!(rebound.refused(403), "host_refused");
    assert_eq!(env.json(&["list"], 0)["threads"], serde_json::json!([]));

    let origin = format!("http://{}", board.address);
    let own = [
        ("Authorization", bearer.as_str()),
        ("Origin", origin.as_str()),
    ];
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
    let host = board.address.to_string();
    let elsewhere = request(board.address, "GET", "/etc/passwd", &[("Host", &host)], "");
    assert_eq!(elsewhere.refused(404), "not_served");
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
        "GET /api/events HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n",
        board.address
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
fn a_board_on_another_address_says_so() {
    let env = TestEnv::initialized();
    let board = Board::start(&env, &["--listen", "0.0.0.0"]);
    assert!(
        board.stderr.contains("warning: listening on 0.0.0.0"),
        "{}",
        board.stderr
    );
    // The URL names loopback, which reaches it from this machine.
    assert!(board.address.ip().is_loopback());
    assert_eq!(board.post("list", "{}", &[]).status, 200);
}

/// The board over PostgreSQL (a build with the `postgres` feature): the
/// same API and event stream on a database named by URL, fed by CLI
/// processes that share nothing with the server but that URL, and a write
/// from the board that those processes then see.
#[cfg(feature = "postgres")]
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
    let board = Board::start_on(&env, &["--write", "--as", "alice"], Some(&url));

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
