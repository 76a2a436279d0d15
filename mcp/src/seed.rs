//! Seed 004's mailbox tools (`send_message`, `read_messages`, `mark_read`)
//! with the seed's own argument names, each a small mapping onto inbox's
//! commands, so an agent written for that mailbox works here unchanged.
//!
//! `read_messages({to?, since?, unreadOnly?, limit?})` is `read` for this
//! server's agent (another `to` is refused), and `mark_read({messageIds} |
//! {all: true})` is `mark-read` by ids or through every event so far.
//!
//! `send_message({type, to, subject?, body, metadata?, issueId?})`, plus
//! `threadId` to write into a thread, maps by `type`:
//!
//! | type | without `threadId`: opens a thread for `to` | with `threadId`: in that thread |
//! | --- | --- | --- |
//! | `task-assigned`, `review-request` | `send`, kind `task` (work `to` claims) | `send`, kind `task` |
//! | `question` | `send`, kind `question` | `send`, kind `question` |
//! | `status` | `send`, kind `event` (a notice; progress needs a thread) | `send`, kind `progress` |
//! | `custom` | `send`, kind `event` | `send`, kind `event` |
//! | `answer` | refused: an answer goes into the question's thread | `send`, kind `answer` (unblocks a blocked thread) |
//! | `task-done`, `review-result` | refused: a result finishes a thread you hold | `done` on that thread (the result) |
//! | `cancel` | refused: say which thread | `cancel` on that thread |
//!
//! A result is never a message anyone may send: in inbox only the lease
//! holder's `done` (or `fail`) writes one, which releases the lease and
//! ends the thread, so `task-done` and `review-result` are that `done`. The
//! subject is `subject`, else the body's first line; `metadata` becomes the
//! payload, with `issue_id` (from `issueId`) and `message_type` (the seed's
//! type, so a reader can tell a review request from a task) added to it.
//!
//! This module only maps arguments to requests: the rules stay the engine's.

use inbox_bridges::mailbox::MessageType;
use inbox_engine::wire::*;
use inbox_engine::{EngineError, Kind, Request, Response, Timestamp};
use serde::Deserialize;
use serde_json::Value;

use crate::schema::{Object, schema_of};

/// The seed's tools: each has a name, a description, an input schema and a
/// mapping below.
pub(crate) const TOOLS: &[SeedTool] = &[
    SeedTool::ReadMessages,
    SeedTool::SendMessage,
    SeedTool::MarkRead,
];

/// One of seed 004's tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SeedTool {
    /// `read_messages`, onto `read`.
    ReadMessages,
    /// `send_message`, onto `send` (or `done`, `cancel`).
    SendMessage,
    /// `mark_read`, onto `mark-read`.
    MarkRead,
}

impl SeedTool {
    /// The seed's name for it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            SeedTool::ReadMessages => "read_messages",
            SeedTool::SendMessage => "send_message",
            SeedTool::MarkRead => "mark_read",
        }
    }

    /// What it does and when to use it.
    pub(crate) fn description(self) -> &'static str {
        match self {
            SeedTool::ReadMessages => {
                "Read your mailbox (the mailbox's read_messages, inbox's read): the messages addressed to you, to your roles or to everyone, across threads, oldest first, unread only unless unreadOnly is false. Reading consumes nothing: mark_read marks them read. Each message carries its thread_id, kind, summary, body and payload (send_message's type is payload.message_type).\n\nWhen to use it: at the start of every turn, and when a leader wakes; then act on each message (claim a task's thread, answer a question in its thread) and mark_read what you handled."
            }
            SeedTool::MarkRead => {
                "Mark mailbox messages read (the mailbox's mark_read, inbox's mark-read): messageIds marks those messages (and, in each one's thread, everything before them); all: true marks every message of your mailbox so far. Give one of the two.\n\nWhen to use it: after handling what read_messages returned, so the next read_messages returns only what is new."
            }
            SeedTool::SendMessage => {
                "Send a message through the team's mailbox (send_message). Without threadId it opens a new thread for `to`: type task-assigned (or review-request) hands `to` work it fetches and claims; question asks; status and custom leave a notice. With threadId it writes into that thread: answer answers a question (and unblocks a blocked worker), question and status (progress) add to it; task-done or review-result finishes a thread you hold with its result (the same as done), cancel stops it (the same as cancel). subject defaults to the body's first line; metadata is kept as the message's payload, with issue_id and message_type added.\n\nWhen to use it: a leader handing out work or answering, a worker reporting, in the seed mailbox's terms; the answer's thread.thread_id is what later calls pass as threadId."
            }
        }
    }

    /// Whether the tool writes (and so takes an idempotency key).
    pub(crate) fn writes(self) -> bool {
        match self {
            SeedTool::ReadMessages => false,
            SeedTool::SendMessage | SeedTool::MarkRead => true,
        }
    }

    /// Its input schema.
    pub(crate) fn schema(self) -> Object {
        match self {
            SeedTool::ReadMessages => schema_of::<ReadMessages>(),
            SeedTool::SendMessage => schema_of::<SendMessage>(),
            SeedTool::MarkRead => schema_of::<MarkRead>(),
        }
    }
}

/// The request a call of `tool` makes, acting as `agent`.
pub(crate) fn request(
    tool: SeedTool,
    agent: &str,
    arguments: Object,
) -> Result<Request, Box<Response>> {
    let refuse = |error: EngineError| Box::new(Response::failure(Some(tool.name().into()), error));
    match tool {
        SeedTool::ReadMessages => {
            let args: ReadMessages = decode(arguments).map_err(refuse)?;
            read_messages(agent, args).map_err(refuse)
        }
        SeedTool::SendMessage => {
            let args: SendMessage = decode(arguments).map_err(refuse)?;
            send_message(agent, args).map_err(refuse)
        }
        SeedTool::MarkRead => {
            let args: MarkRead = decode(arguments).map_err(refuse)?;
            mark_read(agent, args).map_err(refuse)
        }
    }
}

/// Decodes a tool's arguments, naming the argument that is wrong as the
/// engine names a request field.
fn decode<T: serde::de::DeserializeOwned>(arguments: Object) -> Result<T, EngineError> {
    serde_path_to_error::deserialize(Value::Object(arguments)).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner().to_string();
        let message = if path == "." || inner.starts_with("unknown field") {
            inner
        } else {
            format!("`{path}`: {inner}")
        };
        EngineError::InvalidRequest { message }
    })
}

/// `send_message`'s arguments, with the seed's names (`issueId`), and
/// `threadId` to write into a thread.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SendMessage {
    /// What the message is; see the tool's description for what each does.
    #[serde(rename = "type")]
    kind: MessageType,
    /// Who it is for: an agent's name, role:NAME (any member of the role may claim it) or broadcast (every agent, as information); on a new thread, who may claim it. In a thread it defaults to the other party; task-done, review-result and cancel go to the thread's parties whatever it says.
    #[serde(default)]
    to: Option<String>,
    /// One line; the body's first line if absent.
    #[serde(default)]
    subject: Option<String>,
    /// The message itself (markdown).
    body: String,
    /// Structured data for programs: kept as the message's payload.
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
    /// The issue it is about: kept in the payload as issue_id.
    #[serde(default)]
    issue_id: Option<String>,
    /// Write into this thread (thr_...) instead of opening one.
    #[serde(default)]
    thread_id: Option<String>,
}

/// The mapping of `send_message` (see the module's table).
fn send_message(agent: &str, args: SendMessage) -> Result<Request, EngineError> {
    let payload = payload(&args)?;
    let line = args
        .subject
        .clone()
        .unwrap_or_else(|| inbox_engine::validate::subject_from(&args.body));
    let me = Some(agent.to_owned());
    let needs_thread = |what: &str| EngineError::MissingField {
        field: "threadId".into(),
        hint: format!(
            "{what}: give the thread's id (thread.thread_id in the answer that opened or claimed it)"
        ),
    };
    let Some(thread_id) = args.thread_id else {
        let kind = match args.kind {
            MessageType::TaskAssigned | MessageType::ReviewRequest => Kind::Task,
            MessageType::Question => Kind::Question,
            MessageType::Status | MessageType::Custom => Kind::Event,
            MessageType::Answer => {
                return Err(needs_thread("an answer goes into the question's thread"));
            }
            MessageType::TaskDone | MessageType::ReviewResult => {
                return Err(needs_thread("a result finishes the thread you hold"));
            }
            MessageType::Cancel => return Err(needs_thread("cancel stops one thread")),
        };
        // Said with the seed's name here; the engine would say `to_agent`.
        let Some(to) = args.to else {
            return Err(EngineError::MissingField {
                field: "to".into(),
                hint: "say which agent the new thread is for".into(),
            });
        };
        return Ok(Request::Send(SendRequest {
            from_agent: me,
            to_agent: Some(to),
            subject: Some(line),
            kind: Some(kind),
            body: Some(args.body),
            payload: Some(payload),
            ..SendRequest::default()
        }));
    };
    let thread_id = Some(thread_id);
    let kind = match args.kind {
        MessageType::TaskAssigned | MessageType::ReviewRequest => Kind::Task,
        MessageType::Question => Kind::Question,
        MessageType::Answer => Kind::Answer,
        MessageType::Status => Kind::Progress,
        MessageType::Custom => Kind::Event,
        MessageType::TaskDone | MessageType::ReviewResult => {
            return Ok(Request::Done(FinishRequest {
                agent: me,
                thread_id,
                summary: Some(line),
                body: Some(args.body),
                payload: Some(payload),
                ..FinishRequest::default()
            }));
        }
        MessageType::Cancel => {
            return Ok(Request::Cancel(CancelRequest {
                agent: me,
                thread_id,
                reason: Some(line),
                ..CancelRequest::default()
            }));
        }
    };
    Ok(Request::Send(SendRequest {
        from_agent: me,
        to_agent: args.to,
        thread_id,
        kind: Some(kind),
        summary: Some(line),
        body: Some(args.body),
        payload: Some(payload),
        ..SendRequest::default()
    }))
}

/// `metadata`, with `issue_id` and `message_type` added; a metadata that
/// already says either differently is refused rather than overwritten.
fn payload(args: &SendMessage) -> Result<Value, EngineError> {
    let mut payload = args.metadata.clone().unwrap_or_default();
    let added = [
        ("issue_id", args.issue_id.clone()),
        ("message_type", Some(args.kind.as_str().to_owned())),
    ];
    for (key, value) in added {
        let Some(value) = value else { continue };
        match payload.get(key) {
            Some(Value::String(given)) if *given == value => {}
            Some(given) => {
                return Err(EngineError::InvalidValue {
                    field: "metadata".into(),
                    problem: format!(
                        "says {key} is {given}, but this message's {key} is `{value}`; leave {key} out of metadata"
                    ),
                });
            }
            None => {
                payload.insert(key.into(), value.into());
            }
        }
    }
    Ok(Value::Object(payload))
}

/// `read_messages`'s arguments, with the seed's names.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ReadMessages {
    /// Whose mailbox: yours (the default); any other agent is refused.
    #[serde(default)]
    to: Option<String>,
    /// Only messages written at or after this time (RFC 3339 in UTC, e.g. 2026-05-10T14:00:00Z).
    #[serde(default)]
    since: Option<String>,
    /// Only messages you have not marked read (default true).
    #[serde(default)]
    unread_only: Option<bool>,
    /// At most this many messages, oldest first (default 50).
    #[serde(default)]
    limit: Option<u32>,
}

/// `read_messages` onto `read`: the seed's `to` is the reader, which is
/// this server's agent; `unreadOnly` is `read`'s default, `include_read`
/// its opposite.
fn read_messages(agent: &str, args: ReadMessages) -> Result<Request, EngineError> {
    if let Some(to) = args.to.filter(|to| to != agent) {
        return Err(EngineError::InvalidValue {
            field: "to".into(),
            problem: format!(
                "is `{to}`, but this MCP server reads the mailbox of `{agent}` (inbox mcp --agent {agent}); leave it out"
            ),
        });
    }
    let since = args
        .since
        .map(|text| {
            Timestamp::parse(&text).map_err(|e| EngineError::InvalidValue {
                field: "since".into(),
                problem: e.to_string(),
            })
        })
        .transpose()?;
    Ok(Request::Read(ReadRequest {
        agent: Some(agent.to_owned()),
        include_read: !args.unread_only.unwrap_or(true),
        since,
        after_event: None,
        limit: args.limit,
    }))
}

/// `mark_read`'s arguments, with the seed's names.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct MarkRead {
    /// The messages to mark read (msg_... ids from read_messages).
    #[serde(default)]
    message_ids: Option<Vec<String>>,
    /// Mark every message of your mailbox so far instead.
    #[serde(default)]
    all: Option<bool>,
}

/// `mark_read` onto `mark-read`: `messageIds` are its `message_ids`;
/// `all` is "through the newest event there is", which `through_event`
/// says as the largest event id a store holds (i64::MAX: SQLite's
/// integers), so every message written before the call is marked and none
/// after it.
fn mark_read(agent: &str, args: MarkRead) -> Result<Request, EngineError> {
    let all = args.all.unwrap_or(false);
    let ids = args.message_ids.unwrap_or_default();
    let through_event = match (all, ids.is_empty()) {
        (true, true) => Some(i64::MAX.unsigned_abs()),
        (false, false) => None,
        (true, false) => {
            return Err(EngineError::InvalidValue {
                field: "all".into(),
                problem: "marks every message; give it or messageIds, not both".into(),
            });
        }
        (false, true) => {
            return Err(EngineError::MissingField {
                field: "messageIds".into(),
                hint: "name the messages read (their message_id), or pass all: true".into(),
            });
        }
    };
    Ok(Request::MarkRead(MarkReadRequest {
        agent: Some(agent.to_owned()),
        message_ids: ids,
        through_event,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(arguments: Value) -> Result<Request, Box<Response>> {
        let Value::Object(arguments) = arguments else {
            return Err(Box::new(Response::failure(
                None,
                EngineError::Internal {
                    message: "not an object".into(),
                },
            )));
        };
        request(SeedTool::SendMessage, "lead", arguments)
    }

    #[test]
    fn a_task_opens_a_thread_for_to_with_the_metadata_as_payload() {
        let request = map(serde_json::json!({
            "type": "task-assigned", "to": "worker", "body": "Add login\n\ndetails",
            "metadata": {"files": ["a.rs"]}, "issueId": "ISS-7"
        }));
        let Ok(Request::Send(send)) = request else {
            panic!("{request:?}");
        };
        assert_eq!(send.from_agent.as_deref(), Some("lead"));
        assert_eq!(send.to_agent.as_deref(), Some("worker"));
        assert_eq!(send.subject.as_deref(), Some("Add login"));
        assert_eq!(send.kind, Some(Kind::Task));
        assert_eq!(
            send.payload,
            Some(
                serde_json::json!({"files": ["a.rs"], "issue_id": "ISS-7", "message_type": "task-assigned"})
            )
        );
    }

    #[test]
    fn results_finish_the_thread_and_answers_need_one() {
        let done = map(
            serde_json::json!({"type": "task-done", "to": "orchestrator", "body": "Shipped", "threadId": "thr_1"}),
        );
        assert!(
            matches!(done, Ok(Request::Done(ref f)) if f.summary.as_deref() == Some("Shipped")),
            "{done:?}"
        );
        let untold = map(serde_json::json!({"type": "question", "body": "Which?"}));
        assert!(untold.is_err_and(|r| r.to_json().contains("`to` is required")));
        let answer = map(serde_json::json!({"type": "answer", "to": "worker", "body": "Yes"}));
        let Err(refused) = answer else {
            panic!("{answer:?}");
        };
        assert!(
            refused.to_json().contains("\"code\":\"missing_field\""),
            "{}",
            refused.to_json()
        );
    }

    #[test]
    fn unknown_arguments_and_types_are_refused_by_name() {
        let refused = map(serde_json::json!({"type": "shout", "to": "w", "body": "x"}));
        assert!(refused.is_err_and(|r| r.to_json().contains("shout")));
        let refused =
            map(serde_json::json!({"type": "status", "to": "w", "body": "x", "priority": "high"}));
        assert!(refused.is_err_and(|r| r.to_json().contains("priority")));
    }
}
