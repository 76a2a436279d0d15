//! Seed 002's member inbox lines (Agent Teams: `members/<member>/inbox`,
//! one message per line, `{"type", "from", "to", "timestamp", "content"}`)
//! in and out of inbox.
//!
//! The mapping, in `docs/bridges.md` as tables: `from` and `to` are agent
//! names (`all` is `broadcast`). A `task_assignment` opens a thread for its
//! member, with `content.taskId` as the thread's task id; the thread a
//! `taskId` names is where its `task_completion` finishes it (`done`,
//! claimed first as the seed has no claim), its `blocking_notification`
//! blocks it with its `reason`, and its `message` or `task_status_request`
//! adds a message (an answer when it comes to a blocked thread from someone
//! else than the holder; progress from the holder; else a notice); without
//! a thread they open one of their own. A `team_broadcast` opens a thread
//! to `broadcast`, and an `idle_notification` a notice from the member,
//! which is its activity: presence follows. Types the seed lists beside the
//! standard ones (`task_status_response`, `acknowledgment`) are messages in
//! their task's thread, or notices.
//!
//! The body of a message is `content`'s text (`text`, `notes`, `reason` or
//! `description`, the first present); the payload keeps the rest of the
//! line (`payload.teams`, with `payload.teams_body` naming the field the
//! body came from) and its type (`payload.message_type`), so an export
//! gives an imported line back. A line has no id of its own, so its
//! idempotency key is `teams:<the first 24 hex digits of the SHA-256 of the
//! line>:<its line number>` (`:claim` for the claim before a `done` or a
//! block): the same line at the same place imports once, and two identical
//! lines (a message sent twice) are two messages. This module only maps:
//! the rules stay the engine's.

use std::collections::HashMap;

use inbox_engine::address::Address;
use inbox_engine::wire::{FinishRequest, MessageOutput, SendRequest, UpdateRequest};
use inbox_engine::{EventType, Kind, Request, Status};
use serde_json::{Map, Value as Json};

use super::apply::{Bus, Mapping, Skip, Tracked, hold, key, written};
use super::messages::Item;
use super::{ordered, title};

/// The fields of `content` a line's text may be in, in the order looked.
const BODY_FIELDS: [&str; 4] = ["text", "notes", "reason", "description"];

/// One line of a member's inbox.
struct Line {
    kind: String,
    sender: String,
    recipient: String,
    content: Map<String, Json>,
    task_id: Option<String>,
    /// The field of `content` the body came from, and the body.
    body: Option<(&'static str, String)>,
    /// The line, for the payload.
    kept: Map<String, Json>,
    /// The line's idempotency key, without a step.
    key: String,
}

impl Line {
    fn parse(number: u64, text: &str) -> Result<Line, String> {
        let object = super::object(text)?;
        let text_of = |field: &str| match object.get(field) {
            Some(Json::String(text)) if !text.is_empty() => Ok(text.clone()),
            _ => Err(format!("has no `{field}` string")),
        };
        let kind = text_of("type")?;
        let from = text_of("from")?;
        let to = text_of("to")?;
        text_of("timestamp")?;
        let content = match object.get("content") {
            None | Some(Json::Null) => Map::new(),
            Some(Json::Object(content)) => content.clone(),
            Some(_) => return Err("`content` is not an object".into()),
        };
        let task_id = content
            .get("taskId")
            .and_then(Json::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        let body = BODY_FIELDS.into_iter().find_map(|field| {
            content
                .get(field)
                .and_then(Json::as_str)
                .map(|text| (field, text.to_owned()))
        });
        let digest = {
            use sha2::Digest as _;
            let hash = sha2::Sha256::digest(text.as_bytes());
            hash.iter()
                .take(12)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        Ok(Line {
            kind,
            sender: address(&from),
            recipient: address(&to),
            content,
            task_id,
            body,
            kept: object,
            key: key("teams", &digest, Some(&number.to_string())),
        })
    }

    fn body(&self) -> &str {
        self.body.as_ref().map_or("", |(_, text)| text.as_str())
    }

    fn text(&self, field: &str) -> Option<&str> {
        self.content.get(field).and_then(Json::as_str)
    }

    /// The task's name in a title: `task <taskId>`, or `the task`.
    fn task(&self) -> String {
        self.task_id
            .as_ref()
            .map_or_else(|| "the task".into(), |id| format!("task {id}"))
    }

    /// The summary (or subject) of the line's message.
    fn title(&self) -> String {
        let body = Some(self.body());
        match self.kind.as_str() {
            "task_assignment" => title(&[self.text("subject"), body], || {
                format!("Task {}", self.task_id.as_deref().unwrap_or_default())
            }),
            "task_completion" => title(&[body], || format!("Finished {}", self.task())),
            "blocking_notification" => title(&[body], || format!("Blocked on {}", self.task())),
            "task_status_request" => title(&[body], || format!("Status of {}?", self.task())),
            "team_broadcast" => title(&[body], || "Team broadcast".into()),
            "idle_notification" => match self
                .text("reason")
                .map(inbox_engine::validate::subject_from)
            {
                Some(reason) if !reason.is_empty() => format!("Idle: {reason}"),
                _ => "Idle".into(),
            },
            other => title(&[body], || other.to_owned()),
        }
    }

    /// The payload: the type and the line, its body's field left out.
    fn payload(&self) -> Json {
        let mut line = self.kept.clone();
        let mut payload = Map::new();
        payload.insert("message_type".into(), self.kind.clone().into());
        if let Some((field, _)) = self.body
            && let Some(Json::Object(content)) = line.get_mut("content")
        {
            content.remove(field);
            payload.insert("teams_body".into(), field.into());
        }
        payload.insert("teams".into(), Json::Object(line));
        Json::Object(payload)
    }

    fn key(&self, step: Option<&str>) -> String {
        match step {
            Some(step) => format!("{}:{step}", self.key),
            None => self.key.clone(),
        }
    }
}

/// A member's name as an inbox address: `all` is `broadcast`.
fn address(seed: &str) -> String {
    match seed {
        "all" => "broadcast".into(),
        other => super::address(other),
    }
}

/// An import of member inbox lines: the threads of the tasks seen so far.
#[derive(Default)]
pub(crate) struct TeamsImport {
    /// Open threads by `taskId`.
    tasks: HashMap<String, Tracked>,
}

impl Mapping for TeamsImport {
    fn apply(&mut self, number: u64, text: &str, bus: &mut Bus) -> Result<(), Skip> {
        let line = Line::parse(number, text).map_err(Skip::Malformed)?;
        let thread = line
            .task_id
            .as_ref()
            .and_then(|id| self.tasks.get(id))
            .filter(|t| t.is_open())
            .cloned();
        let written = run(bus, &line, thread)?;
        let thread = Tracked::of(&written.thread);
        match &line.task_id {
            Some(task) if thread.is_open() && line.kind == "task_assignment" => {
                self.tasks.insert(task.clone(), thread);
            }
            Some(task) if !thread.is_open() => {
                self.tasks.remove(task);
            }
            Some(task) => {
                if let Some(known) = self.tasks.get_mut(task) {
                    *known = thread;
                }
            }
            None => {}
        }
        Ok(())
    }
}

/// The line's commands.
fn run(bus: &mut Bus, line: &Line, thread: Option<Tracked>) -> Result<MessageOutput, Skip> {
    let kind = line.kind.as_str();
    let Some(mut thread) =
        thread.filter(|_| !matches!(kind, "team_broadcast" | "idle_notification"))
    else {
        let opens = match kind {
            "task_assignment" => Kind::Task,
            "blocking_notification" | "task_status_request" => Kind::Question,
            _ => Kind::Event,
        };
        return open(bus, line, opens);
    };
    match kind {
        "task_completion" => {
            hold(bus, &mut thread, &line.sender, line.key(Some("claim")))?;
            let request = FinishRequest {
                agent: Some(line.sender.clone()),
                thread_id: Some(thread.thread_id.clone()),
                summary: Some(line.title()),
                body: Some(line.body().to_owned()),
                payload: Some(line.payload()),
                ..FinishRequest::default()
            };
            written(bus.run(Request::Done(request), line.key(None))?)
        }
        "blocking_notification" => {
            hold(bus, &mut thread, &line.sender, line.key(Some("claim")))?;
            let request = UpdateRequest {
                agent: Some(line.sender.clone()),
                thread_id: Some(thread.thread_id.clone()),
                status: Some(Status::Blocked),
                summary: Some(line.title()),
                body: Some(line.body().to_owned()),
                payload: Some(line.payload()),
                ..UpdateRequest::default()
            };
            written(bus.run(Request::Update(request), line.key(None))?)
        }
        "task_assignment" => append(bus, line, &thread, Kind::Task),
        "task_status_request" => append(bus, line, &thread, Kind::Question),
        _ => {
            let holder = thread.holder.as_deref();
            let kind = if holder == Some(line.sender.as_str()) {
                Kind::Progress
            } else if thread.status == Status::Blocked {
                Kind::Answer
            } else {
                Kind::Event
            };
            append(bus, line, &thread, kind)
        }
    }
}

/// A thread of its own for `line`.
fn open(bus: &mut Bus, line: &Line, kind: Kind) -> Result<MessageOutput, Skip> {
    let task_id = line
        .task_id
        .clone()
        .filter(|_| kind == Kind::Task)
        .filter(|id| inbox_engine::validate::id("task_id", &Some(id.clone())).is_ok());
    let request = SendRequest {
        from_agent: Some(line.sender.clone()),
        to_agent: Some(line.recipient.clone()),
        task_id,
        subject: Some(line.title()),
        kind: Some(kind),
        body: Some(line.body().to_owned()),
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
        body: Some(line.body().to_owned()),
        payload: Some(line.payload()),
        ..SendRequest::default()
    };
    written(bus.run(Request::Send(request), line.key(None))?)
}

/// A message as a member inbox line: the line it was imported from, or one
/// made from the message.
pub(super) fn line(item: &Item<'_>) -> String {
    let message = item.message;
    let payload = &message.payload;
    // An imported line's payload holds it with its type; a payload an agent
    // wrote with a `teams` field of its own is not one.
    if let Some(Json::Object(kept)) = payload.get("teams")
        && kept.get("type").is_some_and(Json::is_string)
    {
        let mut kept = kept.clone();
        let field = payload.get("teams_body").and_then(Json::as_str);
        if let (Some(field), Some(Json::Object(content))) = (field, kept.get_mut("content")) {
            content.insert(field.to_owned(), message.body.clone().into());
        }
        let take = |field: &str| kept.get(field).cloned();
        let fields = [
            ("type", take("type")),
            ("from", take("from")),
            ("to", take("to")),
            ("timestamp", take("timestamp")),
            ("content", take("content")),
        ];
        return ordered(&fields, &kept);
    }
    let (kind, content) = made(item);
    let fields = [
        ("type", Some(kind.into())),
        ("from", Some(member(&message.from_agent).into())),
        ("to", Some(member(&message.to_agent).into())),
        ("timestamp", Some(message.created_at.to_string().into())),
        ("content", Some(content)),
    ];
    ordered(&fields, &Map::new())
}

/// The seed's type and content of a message written in inbox. The thread
/// is the task (`taskId` is its id); the text is the body, or the summary
/// when the body is empty.
fn made(item: &Item<'_>) -> (&'static str, Json) {
    let message = item.message;
    let task = Json::from(item.thread.thread_id.clone());
    let text = Json::from(if message.body.is_empty() {
        message.summary.clone()
    } else {
        message.body.clone()
    });
    let broadcast = !Address::stored(&item.thread.assigned_to).is_work();
    let (kind, fields) = match message.kind {
        _ if broadcast && item.opened => ("team_broadcast", vec![("text", text)]),
        Kind::Task if item.opened => {
            let mut fields = vec![
                ("taskId", task),
                ("subject", item.thread.subject.clone().into()),
            ];
            if !message.body.is_empty() {
                fields.push(("text", message.body.clone().into()));
            }
            ("task_assignment", fields)
        }
        Kind::Result => (
            "task_completion",
            vec![
                ("taskId", task),
                ("notes", text),
                ("status", item.thread.status.as_str().into()),
            ],
        ),
        Kind::Question if item.event_type == EventType::ThreadBlocked => (
            "blocking_notification",
            vec![("taskId", task), ("reason", text)],
        ),
        _ => ("message", vec![("taskId", task), ("text", text)]),
    };
    let content: Map<String, Json> = fields
        .into_iter()
        .map(|(field, value)| (field.to_owned(), value))
        .collect();
    (kind, Json::Object(content))
}

/// An inbox address as a member name: `broadcast` is `all`.
fn member(stored: &str) -> String {
    match Address::stored(stored) {
        Address::Broadcast => "all".into(),
        _ => stored.to_owned(),
    }
}
