//! Seed 004's mailbox log, `.agenties/mailbox.jsonl`, in and out of inbox:
//! one message per line, `{"id", "type", "from", "to", "subject"?, "body",
//! "metadata"?, "issueId"?, "agentId"?, "read", "createdAt"}`.
//!
//! The mapping, in `docs/bridges.md` as tables: `agent:<id>` is the agent
//! `<id>`, `orchestrator` and `user` the agents of those names, `role:NAME`
//! and `broadcast` the inbox addresses. `task-assigned` opens a thread for
//! its recipient; the thread is that agent's (or `agentId`'s) open task,
//! where its `task-done` finishes it (`done`, claiming it first as the log
//! never says who claimed), its `question` blocks it (`update --status
//! blocked`), its `status` is progress, an `answer` to it answers and
//! `cancel` cancels it; `review-request`, `review-result` and `custom` are
//! messages (kind `event`) with their type kept. A line whose thread cannot
//! be found (its task was trimmed from the log) becomes a notice: a thread
//! of its own, kind `event` (`question`: kind `question`). `read: true`
//! marks the message read by its recipient agent.
//!
//! Each message's payload keeps the line (`payload.mailbox`: everything but
//! `body` and `read`, which the message and the read cursor hold) and its
//! type (`payload.message_type`, as `inbox mcp`'s `send_message` writes
//! it), so an export gives an imported line back; a message written in
//! inbox is exported with its thread in `metadata.threadId`, which an
//! import follows. Idempotency keys are `mailbox:<id>` (and
//! `mailbox:<id>:claim`, `mailbox:<id>:read` for the claim and the read
//! mark). This module only maps: the rules stay the engine's.

use std::collections::HashMap;

use inbox_bridges::mailbox::MessageType;
use inbox_engine::address::Address;
use inbox_engine::wire::{CancelRequest, FinishRequest, MessageOutput, SendRequest, UpdateRequest};
use inbox_engine::{Kind, Request, Status};
use serde_json::{Map, Value as Json};

use super::apply::{Bus, Mapping, Skip, Tracked, hold, key, mark_read, written};
use super::messages::Item;
use super::{address, object, ordered, title};

/// The seed's names of the two parties that are not agents, which inbox
/// knows as agents of the same names.
const NAMED_PARTIES: [&str; 2] = ["orchestrator", "user"];

/// One line of the log.
struct Line {
    id: String,
    kind: MessageType,
    /// `from` and `to` as inbox addresses.
    sender: String,
    recipient: String,
    subject: Option<String>,
    body: String,
    agent_id: Option<String>,
    /// `metadata.threadId`: the inbox thread an export wrote it from.
    thread_ref: Option<String>,
    read: bool,
    /// The line without `body` and `read`: what the payload keeps.
    kept: Map<String, Json>,
}

impl Line {
    fn parse(text: &str) -> Result<Line, String> {
        let mut object = object(text)?;
        let body = match object.remove("body") {
            Some(Json::String(body)) => body,
            _ => return Err("has no `body` string".into()),
        };
        let read = match object.remove("read") {
            None | Some(Json::Null) => false,
            Some(Json::Bool(read)) => read,
            Some(_) => return Err("`read` is not true or false".into()),
        };
        let text_of = |field: &str, required: bool| match object.get(field) {
            Some(Json::String(text)) if !text.is_empty() => Ok(Some(text.clone())),
            None | Some(Json::Null) if !required => Ok(None),
            _ => Err(format!("has no `{field}` string")),
        };
        let id = text_of("id", true)?.unwrap_or_default();
        let kind_name = text_of("type", true)?.unwrap_or_default();
        let Some(kind) = MessageType::parse(&kind_name) else {
            let known: Vec<&str> = MessageType::ALL.iter().map(|t| t.as_str()).collect();
            return Err(format!(
                "has type `{kind_name}`; a mailbox.jsonl message's types are {}",
                known.join(", ")
            ));
        };
        let from = text_of("from", true)?.unwrap_or_default();
        let to = text_of("to", true)?.unwrap_or_default();
        text_of("createdAt", true)?;
        let thread_ref = match object.get("metadata") {
            None | Some(Json::Null) => None,
            Some(Json::Object(metadata)) => metadata
                .get("threadId")
                .and_then(Json::as_str)
                .map(str::to_owned),
            Some(_) => return Err("`metadata` is not an object".into()),
        };
        Ok(Line {
            id,
            kind,
            sender: address(&from),
            recipient: address(&to),
            subject: text_of("subject", false)?,
            agent_id: text_of("agentId", false)?,
            body,
            thread_ref,
            read,
            kept: object,
        })
    }

    /// Whose task the line is about: `agentId`, else the worker's side of
    /// the exchange.
    fn worker(&self) -> &str {
        match (&self.agent_id, self.kind.sent_by_worker()) {
            (Some(agent), _) => agent.as_str(),
            (None, true) => self.sender.as_str(),
            (None, false) => self.recipient.as_str(),
        }
    }

    /// One line for a subject or summary.
    fn title(&self) -> String {
        title(&[self.subject.as_deref(), Some(&self.body)], || {
            self.kind.as_str().to_owned()
        })
    }

    /// The payload: the line's type, its issue, and the line itself.
    fn payload(&self) -> Json {
        let mut payload = Map::new();
        payload.insert("message_type".into(), self.kind.as_str().into());
        if let Some(issue) = self.kept.get("issueId").filter(|i| i.is_string()) {
            payload.insert("issue_id".into(), issue.clone());
        }
        payload.insert("mailbox".into(), Json::Object(self.kept.clone()));
        Json::Object(payload)
    }

    fn key(&self, step: Option<&str>) -> String {
        key("mailbox", &self.id, step)
    }
}

/// An import of a mailbox log: what it learned of the threads so far.
#[derive(Default)]
pub(crate) struct MailboxImport {
    /// Each agent's open task thread: where its task-done, question and
    /// status go, and answers and cancellations for it.
    tasks: HashMap<String, Tracked>,
    /// Question threads an agent opened without a task: where answers to
    /// it go.
    questions: HashMap<String, Tracked>,
    /// Threads by the `metadata.threadId` an inbox export gave them.
    named: HashMap<String, Tracked>,
}

/// Where a line landed.
struct Landed {
    written: MessageOutput,
    /// The line opened a notice (no thread of its own kind could be
    /// found) rather than writing where it belongs.
    notice: bool,
}

impl Mapping for MailboxImport {
    fn apply(&mut self, _number: u64, text: &str, bus: &mut Bus) -> Result<(), Skip> {
        let line = Line::parse(text).map_err(Skip::Malformed)?;
        let thread = self.thread_of(&line);
        let landed = self.run(&line, thread, bus)?;
        if line.read {
            mark_read(bus, &landed.written.message, line.key(Some("read")))?;
        }
        self.remember(&line, &landed);
        Ok(())
    }
}

impl MailboxImport {
    /// The open thread `line` belongs in, if any: the one its
    /// `metadata.threadId` names, else (but for a new task, which opens
    /// one) its agent's task, else (an answer) its agent's question.
    fn thread_of(&self, line: &Line) -> Option<Tracked> {
        let named = line.thread_ref.as_ref().and_then(|r| self.named.get(r));
        if line.kind == MessageType::TaskAssigned {
            return named.filter(|t| t.is_open()).cloned();
        }
        let worker = line.worker();
        let asked = (line.kind == MessageType::Answer)
            .then(|| self.questions.get(worker))
            .flatten();
        named
            .or_else(|| self.tasks.get(worker))
            .or(asked)
            .filter(|t| t.is_open())
            .cloned()
    }

    /// The line's commands.
    fn run(&self, line: &Line, thread: Option<Tracked>, bus: &mut Bus) -> Result<Landed, Skip> {
        let Some(mut thread) = thread else {
            let kind = match line.kind {
                MessageType::TaskAssigned => Kind::Task,
                MessageType::Question => Kind::Question,
                _ => Kind::Event,
            };
            let opened =
                line.kind == MessageType::TaskAssigned || line.kind == MessageType::Question;
            let written = open(bus, line, kind)?;
            return Ok(Landed {
                written,
                notice: !opened,
            });
        };
        let written = match line.kind {
            MessageType::TaskDone => {
                hold(bus, &mut thread, &line.sender, line.key(Some("claim")))?;
                finish(bus, line, &thread)?
            }
            MessageType::Question => {
                hold(bus, &mut thread, &line.sender, line.key(Some("claim")))?;
                block(bus, line, &thread)?
            }
            MessageType::Cancel => cancel(bus, line, &thread)?,
            MessageType::TaskAssigned => append(bus, line, &thread, Kind::Task)?,
            MessageType::Answer => append(bus, line, &thread, Kind::Answer)?,
            MessageType::Status => append(bus, line, &thread, Kind::Progress)?,
            MessageType::ReviewRequest | MessageType::ReviewResult | MessageType::Custom => {
                append(bus, line, &thread, Kind::Event)?
            }
        };
        Ok(Landed {
            written,
            notice: false,
        })
    }

    /// Keeps what the line taught: the thread it opened or changed, under
    /// the names later lines find it by.
    fn remember(&mut self, line: &Line, landed: &Landed) {
        let thread = Tracked::of(&landed.written.thread);
        if let Some(reference) = &line.thread_ref {
            self.named.insert(reference.clone(), thread.clone());
        }
        let worker = line.worker().to_owned();
        if landed.notice {
            return;
        }
        match line.kind {
            MessageType::TaskAssigned => {
                self.tasks.insert(worker, thread.clone());
            }
            MessageType::Question if !self.tasks.contains_key(&worker) => {
                self.questions.insert(worker, thread.clone());
            }
            _ => {}
        }
        // Every map holding this thread learns its new state; a finished
        // thread is forgotten.
        for map in [&mut self.tasks, &mut self.questions, &mut self.named] {
            map.retain(|_, t| t.thread_id != thread.thread_id || thread.is_open());
            for tracked in map.values_mut() {
                if tracked.thread_id == thread.thread_id {
                    *tracked = thread.clone();
                }
            }
        }
    }
}

/// A thread of its own for `line`: its task, its question, or a notice.
fn open(bus: &mut Bus, line: &Line, kind: Kind) -> Result<MessageOutput, Skip> {
    let request = SendRequest {
        from_agent: Some(line.sender.clone()),
        to_agent: Some(line.recipient.clone()),
        subject: Some(line.title()),
        kind: Some(kind),
        body: Some(line.body.clone()),
        payload: Some(line.payload()),
        ..SendRequest::default()
    };
    written(bus.run(Request::Send(request), line.key(None))?)
}

/// `line` as a message of `kind` in `thread`.
fn append(bus: &mut Bus, line: &Line, thread: &Tracked, kind: Kind) -> Result<MessageOutput, Skip> {
    let request = SendRequest {
        from_agent: Some(line.sender.clone()),
        to_agent: Some(line.recipient.clone()),
        thread_id: Some(thread.thread_id.clone()),
        kind: Some(kind),
        summary: Some(line.title()),
        body: Some(line.body.clone()),
        payload: Some(line.payload()),
        ..SendRequest::default()
    };
    written(bus.run(Request::Send(request), line.key(None))?)
}

/// `task-done`: `done` by the sender, who holds the thread.
fn finish(bus: &mut Bus, line: &Line, thread: &Tracked) -> Result<MessageOutput, Skip> {
    let request = FinishRequest {
        agent: Some(line.sender.clone()),
        thread_id: Some(thread.thread_id.clone()),
        summary: Some(line.title()),
        body: Some(line.body.clone()),
        payload: Some(line.payload()),
        ..FinishRequest::default()
    };
    written(bus.run(Request::Done(request), line.key(None))?)
}

/// `question` in a task: `update --status blocked` by the holder.
fn block(bus: &mut Bus, line: &Line, thread: &Tracked) -> Result<MessageOutput, Skip> {
    let request = UpdateRequest {
        agent: Some(line.sender.clone()),
        thread_id: Some(thread.thread_id.clone()),
        status: Some(Status::Blocked),
        summary: Some(line.title()),
        body: Some(line.body.clone()),
        payload: Some(line.payload()),
        ..UpdateRequest::default()
    };
    written(bus.run(Request::Update(request), line.key(None))?)
}

/// `cancel`: inbox's cancel takes a reason, which is the line's title; the
/// rest of the line is not kept (see `docs/bridges.md`).
fn cancel(bus: &mut Bus, line: &Line, thread: &Tracked) -> Result<MessageOutput, Skip> {
    let request = CancelRequest {
        agent: Some(line.sender.clone()),
        thread_id: Some(thread.thread_id.clone()),
        reason: Some(line.title()),
        ..CancelRequest::default()
    };
    written(bus.run(Request::Cancel(request), line.key(None))?)
}

/// A message as a line of the log: the line it was imported from, or one
/// made from the message.
pub(super) fn line(item: &Item<'_>) -> String {
    let message = item.message;
    let order = |kept: &Map<String, Json>, field: &str| kept.get(field).cloned();
    // An imported line's payload holds it with its id; a payload an agent
    // wrote with a `mailbox` field of its own is not one.
    if let Some(Json::Object(kept)) = message.payload.get("mailbox")
        && kept.get("id").is_some_and(Json::is_string)
    {
        let fields = [
            ("id", order(kept, "id")),
            ("type", order(kept, "type")),
            ("from", order(kept, "from")),
            ("to", order(kept, "to")),
            ("subject", order(kept, "subject")),
            ("body", Some(message.body.clone().into())),
            ("metadata", order(kept, "metadata")),
            ("issueId", order(kept, "issueId")),
            ("agentId", order(kept, "agentId")),
            ("read", Some(item.read.into())),
            ("createdAt", order(kept, "createdAt")),
        ];
        return ordered(&fields, kept);
    }
    let mut metadata = message.payload.clone();
    metadata.insert("threadId".into(), item.thread.thread_id.clone().into());
    let fields = [
        ("id", Some(message.message_id.clone().into())),
        ("type", Some(seed_type(item).as_str().into())),
        ("from", Some(seed_address(&message.from_agent).into())),
        ("to", Some(seed_address(&message.to_agent).into())),
        ("subject", Some(message.summary.clone().into())),
        ("body", Some(message.body.clone().into())),
        ("metadata", Some(Json::Object(metadata))),
        ("issueId", item.thread.task_id.clone().map(Json::from)),
        ("read", Some(item.read.into())),
        ("createdAt", Some(message.created_at.to_string().into())),
    ];
    ordered(&fields, &Map::new())
}

/// The seed's type of a message written in inbox: the one `inbox mcp`'s
/// `send_message` recorded, else by its kind.
fn seed_type(item: &Item<'_>) -> MessageType {
    let message = item.message;
    let recorded = message
        .payload
        .get("message_type")
        .and_then(Json::as_str)
        .and_then(MessageType::parse);
    if let Some(recorded) = recorded {
        return recorded;
    }
    match message.kind {
        Kind::Task => MessageType::TaskAssigned,
        Kind::Result => MessageType::TaskDone,
        Kind::Question => MessageType::Question,
        Kind::Answer => MessageType::Answer,
        Kind::Progress => MessageType::Status,
        Kind::Control if message.payload.get("action") == Some(&Json::from("cancel")) => {
            MessageType::Cancel
        }
        Kind::Control | Kind::Event => MessageType::Custom,
    }
}

/// An inbox address as the seed's: an agent is `agent:<name>`, but for
/// `orchestrator` and `user`.
fn seed_address(stored: &str) -> String {
    match Address::stored(stored) {
        Address::Agent(name) if NAMED_PARTIES.contains(&name.as_str()) => name,
        Address::Agent(name) => format!("agent:{name}"),
        Address::Role(role) => format!("role:{role}"),
        Address::Broadcast => "broadcast".into(),
        Address::RoleBroadcast(role) => format!("broadcast:role:{role}"),
    }
}
