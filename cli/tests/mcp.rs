//! `inbox mcp`, end to end with a real MCP client: the official Rust SDK's
//! (`rmcp`) starts `inbox mcp --agent NAME` as a child process, as an agent
//! runtime does, and drives it through the handshake, `tools/list` and
//! `tools/call`, while other agents use the CLI as separate processes on
//! the same database. Every command runs on the real clock (waits and
//! leases elapse in real time); bounds on time are generous.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ProgressNotificationParam, Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::common::{TestEnv, inbox_bin};

/// A client that keeps the progress notifications it receives.
#[derive(Clone, Default)]
struct Client {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

type Session = RunningService<RoleClient, Client>;

/// `inbox mcp --agent AGENT` in the test's folder, connected.
async fn connect(env: &TestEnv, agent: &str) -> (Session, Client) {
    connect_with(env, agent, None).await
}

/// As [`connect`], with `$INBOX_AGENT_TOKEN` set to `token`.
async fn connect_with(env: &TestEnv, agent: &str, token: Option<&str>) -> (Session, Client) {
    connect_to(env, agent, token, None).await
}

/// As [`connect_with`], on the database `db` names (`$INBOX_DB`) rather
/// than the folder's.
async fn connect_to(
    env: &TestEnv,
    agent: &str,
    token: Option<&str>,
    db: Option<&str>,
) -> (Session, Client) {
    let mut command = tokio::process::Command::new(inbox_bin());
    command
        .args(["mcp", "--agent", agent])
        .current_dir(env.dir())
        .env_remove("INBOX_DB")
        .env_remove("INBOX_AGENT")
        .env_remove("INBOX_AGENT_TOKEN")
        .env_remove("INBOX_NOW");
    if let Some(token) = token {
        command.env("INBOX_AGENT_TOKEN", token);
    }
    if let Some(db) = db {
        command.env("INBOX_DB", db);
    }
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = Client::default();
    let session = client.clone().serve(transport).await.unwrap();
    (session, client)
}

/// Calls `tool` with `arguments`; returns whether it was a tool error and
/// the JSON of its text.
async fn call(session: &Session, tool: &str, arguments: Value) -> (bool, Value) {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object");
    };
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let result = session.call_tool(params).await.unwrap();
    read(&result)
}

fn read(result: &CallToolResult) -> (bool, Value) {
    let text = result
        .content
        .first()
        .and_then(|block| block.as_text())
        .map(|text| text.text.clone())
        .unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (result.is_error == Some(true), json)
}

/// `inbox args... --json` on the real clock, as another process.
fn cli(env: &TestEnv, args: &[&str], status: i32) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let output = env.command(&all).env_remove("INBOX_NOW").output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(status),
        "inbox {all:?}: {stdout}"
    );
    serde_json::from_str(&stdout).unwrap()
}

/// A thread from `lead` to `worker`, opened through the CLI.
fn send(env: &TestEnv, subject: &str) -> String {
    let sent = cli(
        env,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            subject,
        ],
        0,
    );
    sent["thread"]["thread_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_handshake_lists_one_tool_per_command_with_schemas_that_leave_out_the_agent() {
    let env = TestEnv::initialized();
    let (session, _) = connect(&env, "worker").await;
    let info = session.peer_info().unwrap();
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("inbox")
    );
    let instructions = info.instructions.clone().unwrap_or_default();
    assert!(instructions.contains("`worker`"), "{instructions}");

    let tools = session.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in [
        "fetch",
        "claim",
        "renew",
        "update",
        "reply",
        "done",
        "fail",
        "cancel",
        "list",
        "show",
        "watch",
        "wait_reply",
        "orch_plan",
        "orch_dispatch",
        "orch_wait",
        "send_message",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    for hidden in ["init", "sweep", "version", "send", "read", "orch_reconcile"] {
        assert!(!names.contains(&hidden), "{hidden} is listed: {names:?}");
    }
    for tool in &tools {
        let properties = tool
            .input_schema
            .get("properties")
            .cloned()
            .unwrap_or_default();
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(
            description.contains("When to use it") || tool.name == "send_message",
            "{}",
            tool.name
        );
        assert!(properties.get("from_agent").is_none(), "{}", tool.name);
        // orch_run_list's `agent` filters runs by their creator: an argument.
        if tool.name != "orch_run_list" {
            assert!(
                properties.get("agent").is_none(),
                "{}: {properties}",
                tool.name
            );
        }
    }
    for waiting in ["watch", "wait_reply", "orch_wait"] {
        let tool = tools.iter().find(|t| t.name == waiting).unwrap();
        let timeout = &tool.input_schema["properties"]["timeout_seconds"];
        assert_eq!(timeout["maximum"], 50, "{waiting}: {timeout}");
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(
            description.contains("call the tool again with after_event"),
            "{description}"
        );
    }
    let claim = tools.iter().find(|t| t.name == "claim").unwrap();
    assert_eq!(claim.input_schema["additionalProperties"], false);
    assert!(
        claim.input_schema["properties"]
            .get("lease_seconds")
            .is_some()
    );
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_sent_with_send_message_is_fetched_claimed_and_finished_through_tools() {
    let env = TestEnv::initialized();
    let (lead, _) = connect(&env, "lead").await;
    let (worker, _) = connect(&env, "worker").await;

    let (error, sent) = call(
        &lead,
        "send_message",
        json!({"type": "task-assigned", "to": "worker", "subject": "Add login", "body": "Email and password.", "issueId": "ISS-7"}),
    )
    .await;
    assert!(!error, "{sent}");
    assert_eq!(sent["command"], "send");
    assert_eq!(sent["message"]["kind"], "task");
    assert_eq!(sent["message"]["from_agent"], "lead");
    assert_eq!(
        sent["message"]["payload"],
        json!({"issue_id": "ISS-7", "message_type": "task-assigned"})
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();

    let (error, fetched) = call(&worker, "fetch", json!({})).await;
    assert!(!error, "{fetched}");
    assert_eq!(fetched["threads"][0]["thread_id"], thread.as_str());

    let (error, claimed) = call(&worker, "claim", json!({"next": true})).await;
    assert!(!error, "{claimed}");
    assert_eq!(claimed["lease"]["agent"], "worker");
    let token = claimed["lease"]["lease_token"].clone();

    let (error, updated) = call(
        &worker,
        "update",
        json!({"thread_id": thread, "lease_token": token, "status": "in_progress", "summary": "Working"}),
    )
    .await;
    assert!(!error, "{updated}");
    let (error, done) = call(
        &worker,
        "done",
        json!({"thread_id": thread, "lease_token": token, "summary": "Login shipped"}),
    )
    .await;
    assert!(!error, "{done}");
    assert_eq!(done["thread"]["status"], "done");

    // A tool answers exactly what the CLI prints for the same request.
    let (error, shown) = call(&worker, "show", json!({"thread_id": thread})).await;
    assert!(!error, "{shown}");
    let printed = cli(&env, &["show", "--agent", "worker", "--thread", &thread], 0);
    assert_eq!(shown, printed);
    lead.cancel().await.unwrap();
    worker.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn read_messages_and_mark_read_are_the_mailbox_with_the_seed_s_arguments() {
    let env = TestEnv::initialized();
    let (lead, _) = connect(&env, "lead").await;
    let (worker, _) = connect(&env, "worker").await;
    for subject in ["First", "Second"] {
        let (error, sent) = call(
            &lead,
            "send_message",
            json!({"type": "question", "to": "worker", "subject": subject, "body": "?"}),
        )
        .await;
        assert!(!error, "{sent}");
    }
    let (error, read) = call(
        &worker,
        "read_messages",
        json!({"unreadOnly": true, "limit": 10}),
    )
    .await;
    assert!(!error, "{read}");
    assert_eq!(read["command"], "read");
    let messages = read["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{read}");
    assert_eq!(messages[0]["summary"], "First");
    assert_eq!(messages[0]["payload"]["message_type"], "question");

    let first = messages[0]["message_id"].as_str().unwrap();
    let (error, marked) = call(&worker, "mark_read", json!({"messageIds": [first]})).await;
    assert!(!error, "{marked}");
    let (_, read) = call(&worker, "read_messages", json!({})).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 1, "{read}");
    let (error, marked) = call(&worker, "mark_read", json!({"all": true})).await;
    assert!(!error, "{marked}");
    let (_, read) = call(&worker, "read_messages", json!({})).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 0, "{read}");
    let (_, read) = call(&worker, "read_messages", json!({"unreadOnly": false})).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 2, "{read}");

    let (error, refused) = call(&worker, "read_messages", json!({"to": "lead"})).await;
    assert!(
        error && refused["error"]["code"] == "invalid_value",
        "{refused}"
    );
    let (error, refused) = call(&worker, "mark_read", json!({})).await;
    assert!(
        error && refused["error"]["code"] == "missing_field",
        "{refused}"
    );
    lead.cancel().await.unwrap();
    worker.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_reply_is_woken_by_a_reply_from_another_process_and_reports_progress() {
    let env = TestEnv::initialized();
    let thread = send(&env, "Add login");
    let (worker, client) = connect(&env, "worker").await;
    let (_, claimed) = call(&worker, "claim", json!({"thread_id": thread})).await;
    let token = claimed["lease"]["lease_token"].clone();
    let (error, blocked) = call(
        &worker,
        "update",
        json!({"thread_id": thread, "lease_token": token, "status": "blocked", "summary": "Email or SSO?"}),
    )
    .await;
    assert!(!error, "{blocked}");

    let waiting = {
        let params = CallToolRequestParams::new("wait_reply").with_arguments(
            json!({"thread_id": thread, "lease_token": token, "timeout_seconds": 40})
                .as_object()
                .cloned()
                .unwrap(),
        );
        let peer = worker.peer().clone();
        tokio::spawn(async move { peer.call_tool(params).await })
    };
    // Long enough for a progress notification (every 5 s) to come first.
    tokio::time::sleep(Duration::from_millis(6000)).await;
    assert!(
        !waiting.is_finished(),
        "wait_reply answered before any reply"
    );
    let replied_at = Instant::now();
    cli(
        &env,
        &[
            "reply",
            "--from",
            "lead",
            "--thread",
            &thread,
            "--summary",
            "Email",
        ],
        0,
    );
    let (error, woke) = read(&waiting.await.unwrap().unwrap());
    assert!(
        replied_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        replied_at.elapsed()
    );
    assert!(!error, "{woke}");
    assert_eq!(woke["woke"], true, "{woke}");
    assert_eq!(woke["message"]["summary"], "Email");
    assert_eq!(woke["thread"]["status"], "in_progress");
    let progress = client.progress.lock().unwrap().clone();
    assert!(!progress.is_empty(), "no progress while waiting");
    assert!(
        progress.iter().all(|p| p.total == Some(50.0)),
        "{progress:?}"
    );
    worker.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_that_times_out_answers_woke_false_with_the_cursor_to_resume_from() {
    let env = TestEnv::initialized();
    let (lead, _) = connect(&env, "lead").await;
    let started = Instant::now();
    let (error, watched) = call(&lead, "watch", json!({"timeout_seconds": 1})).await;
    assert!(!error, "{watched}");
    assert_eq!(watched["woke"], false);
    assert!(watched["next_event_id"].is_u64(), "{watched}");
    assert!(started.elapsed() < Duration::from_secs(10));
    lead.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_wait_stops_at_once_and_the_server_serves_the_next_call() {
    let env = TestEnv::initialized();
    let thread = send(&env, "Add login");
    let (worker, _) = connect(&env, "worker").await;
    // A short lease: while wait_reply waits it renews the lease (a third
    // of the way through); once the wait has stopped, the lease lapses.
    let (_, claimed) = call(
        &worker,
        "claim",
        json!({"thread_id": thread, "lease_seconds": 3}),
    )
    .await;
    let token = claimed["lease"]["lease_token"].clone();

    let params = CallToolRequestParams::new("wait_reply").with_arguments(
        json!({"thread_id": thread, "lease_token": token})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let options = PeerRequestOptions::with_timeout(Duration::from_millis(1500));
    let handle = worker
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(params)),
            options,
        )
        .await
        .unwrap();
    // The client gives up after 1.5 s and sends notifications/cancelled.
    let given_up = handle.await_response().await;
    assert!(given_up.is_err(), "{given_up:?}");

    let asked = Instant::now();
    let (error, listed) = call(&worker, "list", json!({})).await;
    assert!(!error, "{listed}");
    assert!(asked.elapsed() < Duration::from_secs(5));

    // Had the wait gone on, it would keep renewing the lease.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let shown = cli(&env, &["show", "--thread", &thread], 0);
    assert_eq!(shown["thread"]["lease"], Value::Null, "{shown}");
    assert_eq!(shown["thread"]["status"], "pending", "{shown}");
    worker.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_arguments_are_tool_errors_in_the_json_contract_and_change_nothing() {
    let env = TestEnv::initialized();
    let thread = send(&env, "Add login");
    let before = cli(&env, &["show", "--thread", &thread], 0);
    let (worker, _) = connect(&env, "worker").await;

    let (error, refused) = call(
        &worker,
        "claim",
        json!({"thread_id": thread, "lease_seconds": "long"}),
    )
    .await;
    assert!(error);
    assert_eq!(refused["ok"], false);
    assert_eq!(refused["command"], "claim");
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("lease_seconds"),
        "{refused}"
    );

    let (error, refused) = call(
        &worker,
        "claim",
        json!({"thread_id": thread, "agent": "lead"}),
    )
    .await;
    assert!(error);
    assert_eq!(refused["error"]["code"], "invalid_value", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("acts as `worker`"),
        "{refused}"
    );

    let (error, refused) = call(
        &worker,
        "claim",
        json!({"thread_id": thread, "colour": "red"}),
    )
    .await;
    assert!(error);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{refused}"
    );

    let (error, refused) = call(
        &worker,
        "send_message",
        json!({"type": "answer", "to": "lead", "body": "Yes"}),
    )
    .await;
    assert!(error);
    assert_eq!(refused["command"], "send_message");
    assert_eq!(refused["error"]["code"], "missing_field", "{refused}");

    let (error, refused) = call(
        &worker,
        "done",
        json!({"thread_id": thread, "summary": "x"}),
    )
    .await;
    assert!(error, "done on a thread nobody claimed: {refused}");

    let unknown = worker
        .call_tool(CallToolRequestParams::new("launch_rockets"))
        .await;
    assert!(unknown.is_err(), "{unknown:?}");

    let after = cli(&env, &["show", "--thread", &thread], 0);
    assert_eq!(before, after);
    worker.cancel().await.unwrap();
}

#[test]
fn the_server_needs_an_agent_and_an_initialized_database() {
    let env = TestEnv::new();
    let run = env.run(&["mcp"]);
    assert_eq!(run.status, 30, "{run}");
    assert!(run.stdout.is_empty(), "stdout is the protocol's: {run}");
    assert!(run.stderr.contains(r#""code":"missing_field""#), "{run}");

    let run = env.run(&["mcp", "--agent", "worker"]);
    assert_eq!(run.status, 50, "{run}");
    assert!(run.stderr.contains(r#""code":"not_initialized""#), "{run}");

    // With --json, as every command, the refusal is stdout's one object.
    let refused = env.json(&["mcp", "--agent", "worker"], 50);
    assert_eq!(refused["command"], "mcp");
    assert_eq!(refused["error"]["code"], "not_initialized");

    // Nothing speaking MCP on stdin: a usage error, not a failure of inbox.
    let env = TestEnv::initialized();
    let refused = env.json(&["mcp", "--agent", "worker"], 30);
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
}

#[test]
fn inbox_mcp_without_the_server_beside_it_says_how_to_install_it() {
    let env = TestEnv::initialized();
    let alone = env.dir().join("bin");
    std::fs::create_dir(&alone).unwrap();
    std::fs::copy(inbox_bin(), alone.join("inbox")).unwrap();
    let mut command = std::process::Command::new(alone.join("inbox"));
    command
        .args(["mcp", "--agent", "worker", "--json"])
        .current_dir(env.dir())
        .stdin(Stdio::null());
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(30), "{stdout}");
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["command"], "mcp");
    assert_eq!(json["error"]["code"], "invalid_value");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cargo install --path cli"),
        "{json}"
    );
}

/// A client that retries a tool call after a timeout passes the same
/// `idempotency_key`: the retry is answered with the first result, marked
/// replayed, and nothing is written twice. Reads refuse a key.
#[tokio::test(flavor = "multi_thread")]
async fn a_retried_call_with_its_idempotency_key_is_answered_once() {
    let env = TestEnv::initialized();
    let (session, _) = connect(&env, "lead").await;
    let tools = session.list_all_tools().await.unwrap();
    let schema = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        serde_json::to_value(tool.input_schema.as_ref()).unwrap()
    };
    assert!(schema("send_message")["properties"]["idempotency_key"].is_object());
    assert!(schema("claim")["properties"]["idempotency_key"].is_object());
    assert!(
        schema("fetch")["properties"]
            .get("idempotency_key")
            .is_none()
    );

    let message = json!({"type": "task-assigned", "to": "worker", "body": "Build it", "idempotency_key": "k-1"});
    let (error, first) = call(&session, "send_message", message.clone()).await;
    assert!(!error, "{first}");
    let (error, again) = call(&session, "send_message", message).await;
    assert!(!error, "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["thread"]["thread_id"], first["thread"]["thread_id"]);
    let listed = cli(&env, &["list"], 0);
    assert_eq!(listed["threads"].as_array().unwrap().len(), 1, "{listed}");

    let other =
        json!({"type": "task-assigned", "to": "worker", "body": "Other", "idempotency_key": "k-1"});
    let (error, refused) = call(&session, "send_message", other).await;
    assert!(error, "{refused}");
    assert_eq!(
        refused["error"]["code"], "idempotency_conflict",
        "{refused}"
    );
    let (error, read) = call(&session, "list", json!({"idempotency_key": "k-2"})).await;
    assert!(error, "{read}");
    assert_eq!(read["error"]["code"], "invalid_value", "{read}");
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn with_tokens_required_the_server_acts_with_its_agent_s_token() {
    let env = TestEnv::initialized();
    cli(&env, &["settings", "--agent-tokens", "required"], 0);
    // The lead joins first (no agent holds a token yet), then vouches for
    // the worker with its own token.
    let lead = cli(&env, &["agent", "register", "--agent", "lead"], 0);
    let lead = lead["agent_token"].as_str().unwrap().to_owned();
    let registered = cli(
        &env,
        &[
            "agent",
            "register",
            "--agent",
            "worker",
            "--agent-token",
            &lead,
        ],
        0,
    );
    let token = registered["agent_token"].as_str().unwrap().to_owned();
    let sent = cli(
        &env,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "Tokened work",
            "--agent-token",
            &lead,
        ],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();

    // A server for a name nobody registered may not act at all (the
    // worker's token does not help): it is told to register.
    let (session, _) = connect_with(&env, "stranger", Some(&token)).await;
    for (tool, args) in [
        ("claim", json!({"thread_id": thread})),
        ("cancel", json!({"thread_id": thread, "reason": "Mine now"})),
        (
            "send_message",
            json!({"type": "task-assigned", "to": "worker", "body": "Do this"}),
        ),
    ] {
        let (error, refused) = call(&session, tool, args).await;
        assert!(error, "{tool}: {refused}");
        assert_eq!(
            refused["error"]["code"], "agent_not_registered",
            "{tool}: {refused}"
        );
    }
    session.cancel().await.unwrap();

    // A server without the token cannot act as the registered worker, and
    // a token passed as a tool argument is not the server's.
    let (session, _) = connect(&env, "worker").await;
    let (error, refused) = call(
        &session,
        "claim",
        json!({"thread_id": thread, "agent_token": token}),
    )
    .await;
    assert!(error, "{refused}");
    assert_eq!(
        refused["error"]["code"], "agent_token_required",
        "{refused}"
    );
    session.cancel().await.unwrap();

    // With $INBOX_AGENT_TOKEN, every call carries it, a wait's too.
    let (session, _) = connect_with(&env, "worker", Some(&token)).await;
    let (error, claimed) = call(&session, "claim", json!({"thread_id": thread})).await;
    assert!(!error, "{claimed}");
    let (error, waited) = call(
        &session,
        "wait_reply",
        json!({"thread_id": thread, "timeout_seconds": 0}),
    )
    .await;
    assert!(!error && waited["woke"] == false, "{waited}");
    session.cancel().await.unwrap();

    // A server for a new name cannot register itself: joining is vouched
    // for by a registered agent's token, and the server holds none.
    let (session, _) = connect(&env, "newcomer").await;
    let (error, refused) = call(&session, "agent_register", json!({"roles": ["crew"]})).await;
    assert!(error, "{refused}");
    assert_eq!(
        refused["error"]["code"], "agent_token_required",
        "{refused}"
    );
    session.cancel().await.unwrap();

    // Registered by the lead, the newcomer's server acts with its token
    // and may change its own roles; no second token is issued.
    let joined = cli(
        &env,
        &[
            "agent",
            "register",
            "--agent",
            "newcomer",
            "--agent-token",
            &lead,
        ],
        0,
    );
    let newcomer = joined["agent_token"].as_str().unwrap().to_owned();
    assert_eq!(joined["agent"]["registered_by"], "lead", "{joined}");
    let (session, _) = connect_with(&env, "newcomer", Some(&newcomer)).await;
    let (error, again) = call(&session, "agent_register", json!({"roles": ["crew", "qa"]})).await;
    assert!(!error, "{again}");
    assert!(again.get("agent_token").is_none(), "{again}");
    session.cancel().await.unwrap();
}

/// Over PostgreSQL: two waits in one server share one listening
/// connection (one per process, as the store promises), and each wakes
/// when another process answers its thread.
#[tokio::test(flavor = "multi_thread")]
async fn over_postgres_concurrent_waits_share_one_listener_and_wake_for_their_answers() {
    // The cluster's synchronous client runs a runtime of its own: off
    // this one's.
    let started = tokio::task::block_in_place(|| {
        inbox_pg_cluster::PgCluster::start_or_skip("mcp over postgres")
    });
    let Some(cluster) = started else {
        return;
    };
    let url = cluster.url("postgres");
    let env = TestEnv::new();
    let cli_pg = |args: &[&str]| -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let output = env.command(&all).env("INBOX_DB", &url).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "inbox {all:?}: {stdout}");
        serde_json::from_str(&stdout).unwrap()
    };
    cli_pg(&["init"]);
    let (worker, _) = connect_to(&env, "worker", None, Some(&url)).await;
    let mut waits = Vec::new();
    let mut threads = Vec::new();
    for subject in ["First", "Second"] {
        let sent = cli_pg(&[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            subject,
        ]);
        let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
        let (_, claimed) = call(&worker, "claim", json!({"thread_id": thread})).await;
        let token = claimed["lease"]["lease_token"].clone();
        let params = CallToolRequestParams::new("wait_reply").with_arguments(
            json!({"thread_id": thread, "lease_token": token, "timeout_seconds": 40})
                .as_object()
                .cloned()
                .unwrap(),
        );
        let peer = worker.peer().clone();
        waits.push(tokio::spawn(async move { peer.call_tool(params).await }));
        threads.push(thread);
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let listeners: i64 = tokio::task::block_in_place(|| {
        cluster
            .admin()
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'inbox-listen'",
                &[],
            )
            .unwrap()
            .get(0)
    });
    assert_eq!(listeners, 1, "one listening connection for the two waits");
    for (thread, wait) in threads.iter().zip(waits) {
        assert!(!wait.is_finished(), "a wait answered before its reply");
        let replied_at = Instant::now();
        cli_pg(&[
            "reply",
            "--from",
            "lead",
            "--thread",
            thread,
            "--summary",
            thread,
        ]);
        let (error, woke) = read(&wait.await.unwrap().unwrap());
        assert!(!error, "{woke}");
        assert_eq!(woke["woke"], true, "{woke}");
        assert_eq!(woke["message"]["summary"], thread.as_str(), "{woke}");
        assert!(
            replied_at.elapsed() < Duration::from_secs(5),
            "{:?}",
            replied_at.elapsed()
        );
    }
    worker.cancel().await.unwrap();
}

/// The most waits one server runs at once, as `inbox mcp` says it
/// (mcp/src/guidance.rs); the refusal's `data` names it too, so a
/// change there fails here.
const WAITS_AT_ONCE: usize = 16;

/// The JSON-RPC code of a refusal for a limit of the server reached.
const LIMIT_REACHED: i32 = -32050;

/// `inbox mcp --agent AGENT` as a bare process, spoken to in raw lines:
/// what a client that gets the protocol wrong sends.
struct Raw {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Raw {
    fn start(env: &TestEnv, agent: &str) -> Raw {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(inbox_bin())
            .args(["mcp", "--agent", agent])
            .current_dir(env.dir())
            .env_remove("INBOX_DB")
            .env_remove("INBOX_AGENT")
            .env_remove("INBOX_AGENT_TOKEN")
            .env_remove("INBOX_NOW")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Raw {
            child,
            stdin,
            lines,
        }
    }

    /// Started and past the handshake.
    fn connected(env: &TestEnv, agent: &str) -> Raw {
        let mut raw = Raw::start(env, agent);
        raw.send(br#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#);
        let answer = raw.next();
        assert_eq!(answer["id"], "init", "{answer}");
        assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
        raw.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        raw
    }

    /// Writes `line` and its newline.
    fn send(&mut self, line: &[u8]) {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line the server writes, as JSON; every answer comes within
    /// a generous bound, or the server gave none.
    fn next(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(20))
            .expect("the server wrote no answer");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Writes `line` and returns the one answer it gets.
    fn ask(&mut self, line: &[u8]) -> Value {
        self.send(line);
        self.next()
    }

    /// Sends a ping with `id`; the next line must be its answer, so no line
    /// sent before it was answered.
    fn ping_is_next(&mut self, id: u64) {
        let answer =
            self.ask(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).as_bytes());
        assert_eq!(
            answer["id"], id,
            "an answer came that was not the ping's: {answer}"
        );
        assert!(answer["result"].is_object(), "{answer}");
    }

    /// Closes stdin and returns the exit status, which must come.
    fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let began = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "the server did not exit after stdin closed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts `answer` is a JSON-RPC error with `code` for the request `id`.
#[track_caller]
fn assert_error(answer: &Value, id: Value, code: i32) {
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer.get("id"), Some(&id), "{answer}");
    assert_eq!(answer["error"]["code"], code, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.len() > 20, "say what to do: {answer}");
}

/// Every line a client sends gets an answer, the JSON-RPC 2.0 error of its
/// kind when it is wrong (with the request's id whenever it can be read,
/// else `null`), and the server serves the next line; a notification is
/// never answered, however it is wrong.
#[test]
fn every_bad_line_gets_its_json_rpc_error_and_the_server_serves_the_next() {
    let env = TestEnv::initialized();
    let mut raw = Raw::connected(&env, "worker");
    let parse = -32700;
    let invalid = -32600;
    let no_method = -32601;
    let params = -32602;

    // Not JSON, cut short, not UTF-8: parse errors, id null.
    for line in [
        &b"not json"[..],
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list""#,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/\xff\"}",
    ] {
        assert_error(&raw.ask(line), Value::Null, parse);
    }
    // JSON that is not a message object.
    for line in ["42", "\"tools/list\"", "null", "true", "{}", "[]"] {
        assert_error(&raw.ask(line.as_bytes()), Value::Null, invalid);
    }
    // A batch: MCP has none; each request in it is answered with its id.
    let answer = raw.ask(
        br#"[{"jsonrpc":"2.0","id":5,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/initialized"},7]"#,
    );
    let answers = answer.as_array().unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(answers.len(), 2, "{answer}");
    assert_error(&answers[0], json!(5), invalid);
    assert_error(&answers[1], Value::Null, invalid);
    // Requests that are not JSON-RPC 2.0 requests: the id comes back when
    // it is one.
    assert_error(
        &raw.ask(br#"{"id":10,"method":"tools/list"}"#),
        json!(10),
        invalid,
    );
    assert_error(
        &raw.ask(br#"{"jsonrpc":"1.0","id":"a","method":"tools/list"}"#),
        json!("a"),
        invalid,
    );
    assert_error(
        &raw.ask(br#"{"jsonrpc":"2.0","id":{"n":1},"method":"tools/list"}"#),
        Value::Null,
        invalid,
    );
    assert_error(
        &raw.ask(br#"{"jsonrpc":"2.0","id":11,"method":7}"#),
        json!(11),
        invalid,
    );
    assert_error(
        &raw.ask(br#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#),
        Value::Null,
        invalid,
    );
    assert_error(
        &raw.ask(br#"{"jsonrpc":"2.0","id":12,"method":"tools/list","result":{}}"#),
        json!(12),
        invalid,
    );
    // Unknown methods, and params of the wrong shape for known ones.
    assert_error(
        &raw.ask(br#"{"jsonrpc":"2.0","id":20,"method":"tools/launch"}"#),
        json!(20),
        no_method,
    );
    for (id, shape) in [
        (21, r#""params":[1]"#),
        (22, r#""params":"list""#),
        (23, r#""params":{"name":5}"#),
        (24, r#""params":{"arguments":{}}"#),
        (25, r#""params":{"name":"list","arguments":"x"}"#),
        (26, r#""params":{"name":"list","arguments":[1]}"#),
        (27, r#""params":{"name":"launch_rockets"}"#),
    ] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call",{shape}}}"#);
        assert_error(&raw.ask(line.as_bytes()), json!(id), params);
    }
    assert_error(
        &raw.ask(br#"{"jsonrpc":"2.0","id":28,"method":"tools/list","params":{"cursor":5}}"#),
        json!(28),
        params,
    );
    assert_error(
        &raw.ask(br#"{"jsonrpc":"2.0","id":"no-params","method":"tools/call"}"#),
        json!("no-params"),
        params,
    );
    // An argument of the wrong type is the tool's own refusal, which a
    // model can read and correct (MCP's tool execution error).
    let answer = raw.ask(
        br#"{"jsonrpc":"2.0","id":29,"method":"tools/call","params":{"name":"claim","arguments":{"thread_id":5}}}"#,
    );
    assert_eq!(answer["id"], 29, "{answer}");
    assert_eq!(answer["result"]["isError"], true, "{answer}");

    // Notifications, well-formed or not, are never answered.
    for line in [
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{"x":1}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
        r#"{"method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/no_such_thing","params":[]}"#,
        r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
        r#"{"jsonrpc":"2.0","id":99,"result":{}}"#,
        "",
        "   ",
    ] {
        raw.send(line.as_bytes());
    }
    raw.ping_is_next(30);

    // A line over the size limit is answered (with its id when it comes
    // first) and the server reads on from the next line.
    let big = "x".repeat(17 << 20);
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{{"name":"list","arguments":{{"label":"{big}"}}}}}}"#
    );
    assert_error(&raw.ask(line.as_bytes()), json!(31), invalid);
    raw.ping_is_next(32);
    let line =
        format!(r#"{{"params":{{"text":"{big}"}},"jsonrpc":"2.0","id":33,"method":"ping"}}"#);
    assert_error(&raw.ask(line.as_bytes()), Value::Null, invalid);
    raw.ping_is_next(34);

    // Through all of it, the server still serves.
    let listed = raw.ask(br#"{"jsonrpc":"2.0","id":40,"method":"tools/list"}"#);
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{listed}"
    );
    let status = raw.close();
    assert!(status.success(), "{status:?}");
}

/// A request that reuses the id of one still in flight is refused with
/// that id (without the refusal, one of the two would never be answered);
/// once the first is answered, its id is free again.
#[test]
fn a_request_reusing_an_id_in_flight_is_refused_and_the_first_is_answered() {
    let env = TestEnv::initialized();
    let mut raw = Raw::connected(&env, "lead");
    raw.send(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"watch","arguments":{"timeout_seconds":2}}}"#);
    let refused = raw.ask(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    assert_error(&refused, json!(1), -32600);
    let woke = raw.next();
    assert_eq!(woke["id"], 1, "{woke}");
    assert!(woke["result"]["content"].is_array(), "{woke}");
    let listed = raw.ask(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    assert!(listed["result"]["tools"].is_array(), "{listed}");
}

/// Messages before the handshake: requests are answered, a notification
/// is ignored (it used to end the session), and the handshake still works.
#[test]
fn before_the_handshake_bad_lines_are_answered_and_notifications_ignored() {
    let env = TestEnv::initialized();
    let mut raw = Raw::start(&env, "worker");
    assert_error(&raw.ask(b"{oops"), Value::Null, -32700);
    raw.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    raw.send(br#"{"jsonrpc":"2.0","id":"r","result":{}}"#);
    let pong = raw.ask(br#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#);
    assert_eq!(pong["id"], "p", "{pong}");
    let answer = raw.ask(br#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#);
    assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
}

/// The same answers through the official Rust SDK's client: a request of
/// the wrong shape for `tools/call` and an unknown tool are invalid params.
#[tokio::test(flavor = "multi_thread")]
async fn through_the_rust_sdk_wrong_tool_calls_are_invalid_params() {
    use rmcp::model::{CustomRequest, ErrorCode};
    use rmcp::service::ServiceError;
    let env = TestEnv::initialized();
    let (session, _) = connect(&env, "worker").await;
    let code = |result: Result<_, ServiceError>| match result {
        Err(ServiceError::McpError(error)) => error.code,
        other => panic!("{other:?}"),
    };
    let unknown = session
        .call_tool(CallToolRequestParams::new("launch_rockets"))
        .await;
    assert_eq!(code(unknown.map(|_| ())), ErrorCode::INVALID_PARAMS);
    for params in [
        json!({"name": "list", "arguments": "all"}),
        json!({"name": ["list"]}),
        json!([1, 2]),
    ] {
        let sent = session
            .send_request(ClientRequest::CustomRequest(CustomRequest::new(
                "tools/call",
                Some(params.clone()),
            )))
            .await;
        assert_eq!(
            code(sent.map(|_| ())),
            ErrorCode::INVALID_PARAMS,
            "{params}"
        );
    }
    // And the session goes on.
    let (error, listed) = call(&session, "list", json!({})).await;
    assert!(!error, "{listed}");
    session.cancel().await.unwrap();
}

/// Waits run beside the server's other calls, never in their way: with
/// the most waits a server runs at once open, reads still answer, one more
/// wait is refused at once with a JSON-RPC error that says what to do, and
/// cancelling a wait frees its place.
#[tokio::test(flavor = "multi_thread")]
async fn waits_past_the_cap_are_refused_and_reads_answer_while_waits_are_open() {
    let env = TestEnv::initialized();
    let (lead, _) = connect(&env, "lead").await;
    let watch = |seconds: u64| {
        CallToolRequestParams::new("watch").with_arguments(
            json!({"timeout_seconds": seconds})
                .as_object()
                .cloned()
                .unwrap(),
        )
    };
    // More waits than the server runs at once, sent together.
    let extra = 3;
    let mut open = Vec::new();
    for _ in 0..WAITS_AT_ONCE + extra {
        let handle = lead
            .send_cancellable_request(
                ClientRequest::CallToolRequest(Request::new(watch(45))),
                PeerRequestOptions::no_options(),
            )
            .await
            .unwrap();
        open.push(handle);
    }
    // The extra ones are refused at once; the others go on waiting.
    let mut refusals = Vec::new();
    let began = Instant::now();
    while refusals.len() < extra {
        let mut waiting = Vec::new();
        for mut handle in open {
            match handle.rx.try_recv() {
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => waiting.push(handle),
                Ok(Err(rmcp::service::ServiceError::McpError(error))) => refusals.push(error),
                other => panic!("a wait answered before its time: {other:?}"),
            }
        }
        open = waiting;
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "{} waits past the cap were refused, not {extra}",
            refusals.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(open.len(), WAITS_AT_ONCE);
    for refusal in &refusals {
        assert_eq!(refusal.code.0, LIMIT_REACHED, "{refusal:?}");
        assert!(refusal.message.contains("cancel one"), "{refusal:?}");
        assert_eq!(
            refusal.data.as_ref().map(|d| d["waits_at_once"].clone()),
            Some(json!(WAITS_AT_ONCE)),
            "{refusal:?}"
        );
    }
    // Reads answer at once while the waits are open, several at a time.
    let asked = Instant::now();
    let reads: Vec<_> = (0..8)
        .map(|i| {
            let peer = lead.peer().clone();
            let tool = if i % 2 == 0 { "list" } else { "fetch" };
            tokio::spawn(async move {
                peer.call_tool(CallToolRequestParams::new(tool).with_arguments(Default::default()))
                    .await
            })
        })
        .collect();
    for asked in reads {
        let (error, answer) = read(&asked.await.unwrap().unwrap());
        assert!(!error, "{answer}");
    }
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "reads waited behind the waits: {:?}",
        asked.elapsed()
    );
    // The waits are still open, and one more is still refused.
    for handle in &mut open {
        assert!(handle.rx.try_recv().is_err(), "a wait answered early");
    }
    let refused = lead.call_tool(watch(1)).await;
    assert!(
        matches!(&refused, Err(rmcp::service::ServiceError::McpError(e)) if e.code.0 == LIMIT_REACHED),
        "{refused:?}"
    );
    // Cancelling one wait frees its place for another.
    open.pop().unwrap().cancel(None).await.unwrap();
    let began = Instant::now();
    loop {
        match lead.call_tool(watch(0)).await {
            Ok(result) => {
                let (error, woke) = read(&result);
                assert!(!error, "{woke}");
                break;
            }
            Err(error) => assert!(
                began.elapsed() < Duration::from_secs(10),
                "the cancelled wait kept its place: {error:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for handle in open {
        handle.cancel(None).await.unwrap();
    }
    lead.cancel().await.unwrap();
}

/// Closing stdin ends the server, waits and all, without waiting for them.
#[test]
fn closing_stdin_stops_open_waits_and_the_server_exits() {
    let env = TestEnv::initialized();
    let mut raw = Raw::connected(&env, "lead");
    for id in 1..=3 {
        raw.send(
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"watch","arguments":{{"timeout_seconds":45}}}}}}"#)
                .as_bytes(),
        );
    }
    raw.ping_is_next(4);
    let status = raw.close();
    assert!(status.success(), "{status:?}");
}
