//! Seed 002's Agent Teams messages, and Claude Code's inbox entries, as
//! inbox operations and back.
//!
//! Inbound, a line (`{"type","from","to","timestamp","content"}`, one per
//! line of `members/<member>/inbox`) or a Claude Code entry
//! (`{"from","text","summary","timestamp","read"}` in `inboxes/<agent>.json`,
//! its `text` either plain or a JSON-encoded protocol message) is checked
//! and turned into an [`Inbound`]: which inbox operation it asks for, with
//! the whole original kept as the payload (`{"teams": ...}`). Outbound, an
//! inbox message to a bridged member becomes a seed line or an entry that
//! carries a marker (`inbox: {threadId, messageId, eventId, kind, member,
//! team}`), by which the bridge knows its own lines when it reads the file
//! again. A
//! marker is only a claim (anyone can write one): this module parses it,
//! the bridge checks it against the database. This module does no I/O and
//! must never decide what the engine decides (who may claim, whether a
//! transition is allowed).

use inbox_engine::wire::MailboxMessage;
use inbox_engine::{EventId, Kind, Priority};
use serde_json::{Map, Value, json};

/// The longest line read: a longer one is skipped (and said so) without
/// ever being held in memory whole.
pub(crate) const MAX_LINE_BYTES: usize = 1 << 20;

/// The payload key of everything the bridge ingested: a message carrying it
/// is never written back to a file.
pub(crate) const PAYLOAD_KEY: &str = "teams";

/// Why a line was skipped: logged as an action with this code, never fatal.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum LineProblem {
    /// Not JSON.
    #[error("malformed JSON: {0}")]
    Malformed(String),
    /// JSON, but not a seed 002 message.
    #[error("not an Agent Teams inbox message at '{path}': {problem}")]
    Schema {
        /// The failing field.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A message type the seed does not define.
    #[error(
        "unknown message type {0:?}; the seed defines task_assignment, task_status_request, message, team_broadcast, idle_notification, task_completion and blocking_notification"
    )]
    UnknownType(String),
    /// Longer than [`MAX_LINE_BYTES`].
    #[error("line is longer than {MAX_LINE_BYTES} bytes")]
    TooLong,
    /// Names no task, and the operation needs one.
    #[error("{0} names no taskId")]
    NoTask(&'static str),
    /// Carries the bridge's marker, but is not a line the bridge wrote to
    /// this member (a forged marker, a line copied from another member's or
    /// another team's file): neither applied nor taken as the bridge's.
    #[error(
        "carries the bridge's marker (inbox) but is not a message the bridge wrote to this member: {0}; not applied, and no cursor moved"
    )]
    UnverifiedMarker(String),
    /// Carries the marker of a message to this member (checked), but
    /// messages to the member before it are not in the file: the bridge
    /// writes in event order, so the line is not of its run (an agent wrote
    /// it from what `inbox read` shows) and is not trusted. It moves no
    /// cursor: the messages before it and its own are written.
    #[error(
        "carries the bridge's marker of message {0} to this member, but messages to it before that one are not in the file, so the bridge did not write this line: not trusted, no cursor moved; those messages and this one are written now"
    )]
    OutOfOrder(String),
}

impl LineProblem {
    /// A stable code for the bridge's action lines.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            LineProblem::Malformed(_) => "malformed_json",
            LineProblem::Schema { .. } => "schema_violation",
            LineProblem::UnknownType(_) => "unknown_type",
            LineProblem::TooLong => "too_long",
            LineProblem::NoTask(_) => "no_task",
            LineProblem::UnverifiedMarker(_) => "unverified_marker",
            LineProblem::OutOfOrder(_) => "out_of_order",
        }
    }
}

fn schema(path: &str, problem: &str) -> LineProblem {
    LineProblem::Schema {
        path: path.to_owned(),
        problem: problem.to_owned(),
    }
}

/// The marker the bridge puts on a line or entry it writes: which message
/// it is, and the member whose file it was written to. Read back, it is a
/// claim until the database confirms it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker {
    /// The message's thread.
    pub(crate) thread_id: String,
    /// The message.
    pub(crate) message_id: String,
    /// The message's event.
    pub(crate) event_id: EventId,
    /// The member (the folder's name) whose file it was written to.
    pub(crate) member: String,
    /// The team folder it was written in ([`Recipient::team`]).
    pub(crate) team: String,
}

/// Whose file a line is written to: the member, in the team folder `team`
/// (a digest of the folder's path, so that a line copied from another
/// team's folder is not taken as this one's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recipient<'a> {
    /// The team folder's identity.
    pub(crate) team: &'a str,
    /// The member's name in the folder.
    pub(crate) member: &'a str,
}

/// What a line asks of inbox.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Inbound {
    /// A line that says the bridge wrote it (to be checked).
    Own(Marker),
    /// `task_assignment`: a new thread for `to`.
    Open(Open),
    /// `message`, `task_status_request`: into the thread of `task`, or a
    /// new one.
    Say {
        /// The thread's task id, or its inbox thread id.
        task: Option<String>,
        /// The rest, as for a new thread.
        open: Open,
    },
    /// `team_broadcast`: a notice to `broadcast`.
    Broadcast(Open),
    /// `task_completion`: `member` finishes the thread of `task`.
    Complete {
        /// The task.
        task: String,
        /// Who finished it.
        member: String,
        /// The notes, in one line.
        summary: String,
        /// The payload.
        payload: Value,
    },
    /// `blocking_notification`: `member` is blocked on the thread of `task`.
    Block {
        /// The task.
        task: String,
        /// Who is blocked.
        member: String,
        /// Why, in one line.
        reason: String,
        /// The payload.
        payload: Value,
    },
    /// `idle_notification`: `member` is around.
    Presence {
        /// Who.
        member: String,
    },
}

/// A message or thread to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Open {
    /// The sender.
    pub(crate) from: String,
    /// The recipient: the member whose file it was in.
    pub(crate) to: String,
    /// One line.
    pub(crate) subject: String,
    /// The long form.
    pub(crate) body: String,
    /// `content.taskId`.
    pub(crate) task_id: Option<String>,
    /// `content.priority` (1 to 5, as the seed's example has it).
    pub(crate) priority: Option<Priority>,
    /// `task` for an assignment, `event` otherwise.
    pub(crate) kind: Kind,
    /// `{"teams": <the line>}`.
    pub(crate) payload: Value,
}

/// The inbox agent a name of the folder is (the coordinator may be
/// another name in inbox: `--lead`).
pub(crate) type Names<'a> = &'a dyn Fn(&str) -> String;

/// A checked line of `members/<owner>/inbox` (`owner` as an inbox agent).
pub(crate) fn parse_line(
    bytes: &[u8],
    owner: &str,
    names: Names<'_>,
) -> Result<Inbound, LineProblem> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| LineProblem::Malformed(e.to_string()))?;
    let Value::Object(fields) = value else {
        return Err(schema("(root)", "must be an object"));
    };
    if let Some(marker) = own_marker(fields.get("content")) {
        return marker.map(Inbound::Own);
    }
    let kind = text(&fields, "type")?.to_owned();
    let from = names(text(&fields, "from")?);
    text(&fields, "to")?;
    text(&fields, "timestamp")?;
    let content = match fields.get("content") {
        Some(Value::Object(content)) => content.clone(),
        Some(_) => return Err(schema("content", "must be an object")),
        None => return Err(schema("content", "required")),
    };
    let payload = payload("members", "line", Value::Object(fields));
    inbound(&kind, from, owner, &content, payload)
}

/// A checked unread entry of `inboxes/<owner>.json` (Claude Code): its
/// `text` a JSON protocol message (`{"type":...}`, fields beside `type`)
/// or plain text, which is a `message`.
pub(crate) fn parse_entry(
    entry: &Value,
    owner: &str,
    names: Names<'_>,
) -> Result<Inbound, LineProblem> {
    let Value::Object(fields) = entry else {
        return Err(schema("(entry)", "must be an object"));
    };
    if let Some(marker) = own_marker(Some(entry)) {
        return marker.map(Inbound::Own);
    }
    let from = names(text(fields, "from")?);
    let body = text(fields, "text")?;
    let payload = payload("inboxes", "entry", entry.clone());
    let structured = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| match v {
            Value::Object(o) if o.get("type").is_some_and(Value::is_string) => Some(o),
            _ => None,
        });
    let Some(content) = structured else {
        let mut content = Map::new();
        content.insert("text".into(), body.into());
        if let Some(summary) = fields.get("summary") {
            content.insert("subject".into(), summary.clone());
        }
        return inbound("message", from, owner, &content, payload);
    };
    let kind = content
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match inbound(kind, from.clone(), owner, &content, payload.clone()) {
        // Claude Code has more protocol messages than the seed (shutdown
        // and plan approvals): they are messages, kept whole.
        Err(LineProblem::UnknownType(_)) => {
            let mut plain = Map::new();
            plain.insert("text".into(), body.into());
            plain.insert("subject".into(), format!("{kind} from {from}").into());
            inbound("message", from, owner, &plain, payload)
        }
        other => other,
    }
}

/// The operation of a message of type `kind`.
fn inbound(
    kind: &str,
    from: String,
    owner: &str,
    content: &Map<String, Value>,
    payload: Value,
) -> Result<Inbound, LineProblem> {
    let task = content
        .get("taskId")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    let open = |kind_of: Kind| Open {
        subject: subject(content, &from, kind),
        body: body(content),
        task_id: task.clone(),
        priority: priority(content),
        kind: kind_of,
        payload: payload.clone(),
        from: from.clone(),
        to: owner.to_owned(),
    };
    Ok(match kind {
        "task_assignment" => Inbound::Open(open(Kind::Task)),
        "message" | "task_status_request" => Inbound::Say {
            task: task.clone(),
            open: open(Kind::Event),
        },
        "team_broadcast" => Inbound::Broadcast(open(Kind::Event)),
        "task_completion" => Inbound::Complete {
            task: task.ok_or(LineProblem::NoTask("task_completion"))?,
            summary: one_line(content, &["notes", "text", "summary"], "task completed"),
            member: from,
            payload,
        },
        "blocking_notification" => Inbound::Block {
            task: task.ok_or(LineProblem::NoTask("blocking_notification"))?,
            reason: one_line(content, &["reason", "text"], "blocked"),
            member: from,
            payload,
        },
        "idle_notification" => Inbound::Presence { member: from },
        other => return Err(LineProblem::UnknownType(other.to_owned())),
    })
}

/// A required, non-empty string field.
fn text<'a>(fields: &'a Map<String, Value>, name: &str) -> Result<&'a str, LineProblem> {
    match fields.get(name) {
        None => Err(schema(name, "required")),
        Some(Value::String(s)) if s.is_empty() => Err(schema(name, "must not be empty")),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(schema(name, "must be a string")),
    }
}

fn subject(content: &Map<String, Value>, from: &str, kind: &str) -> String {
    let given = ["subject", "summary", "text", "description"]
        .iter()
        .filter_map(|k| content.get(*k).and_then(Value::as_str))
        .map(one_line_of)
        .find(|s| !s.is_empty());
    given.unwrap_or_else(|| match content.get("taskId").and_then(Value::as_str) {
        Some(task) => format!("{kind} {task} from {from}"),
        None => format!("{kind} from {from}"),
    })
}

fn body(content: &Map<String, Value>) -> String {
    ["text", "description", "notes"]
        .iter()
        .find_map(|k| content.get(*k).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned()
}

fn one_line(content: &Map<String, Value>, keys: &[&str], otherwise: &str) -> String {
    keys.iter()
        .filter_map(|k| content.get(*k).and_then(Value::as_str))
        .map(one_line_of)
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| otherwise.to_owned())
}

/// The first line of `text` as a subject or summary: inbox takes no
/// control characters there (a terminal escape in a line is shown, not
/// obeyed, and the whole text stays in the body and the payload).
fn one_line_of(text: &str) -> String {
    let line = inbox_engine::validate::subject_from(text);
    line.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

/// Longer strings are left out of a payload that would be over inbox's
/// limit (the long text is the message's body already).
const PAYLOAD_STRING_MAX: usize = 4096;

/// `{"teams": {"layout": LAYOUT, KEY: ORIGINAL}}`, the original whole when
/// it fits inbox's payload limit, else with its long strings replaced by a
/// note of their size, else its envelope only.
fn payload(layout: &str, key: &str, original: Value) -> Value {
    let limit = inbox_engine::validate::PAYLOAD_MAX_BYTES - 1024;
    let wrap = |value: Value| json!({ PAYLOAD_KEY: { "layout": layout, key: value } });
    let full = wrap(original.clone());
    if full.to_string().len() <= limit {
        return full;
    }
    let mut slim = original;
    shorten(&mut slim);
    let slim = wrap(slim);
    if slim.to_string().len() <= limit {
        return slim;
    }
    json!({ PAYLOAD_KEY: { "layout": layout, "truncated": true } })
}

fn shorten(value: &mut Value) {
    match value {
        Value::String(s) if s.len() > PAYLOAD_STRING_MAX => {
            *s = format!(
                "({} bytes, left out: the message body has the text)",
                s.len()
            );
        }
        Value::Array(items) => items.iter_mut().for_each(shorten),
        Value::Object(fields) => fields.values_mut().for_each(shorten),
        _ => {}
    }
}

/// The seed's example priority is 4 of (presumably) 1 to 5.
fn priority(content: &Map<String, Value>) -> Option<Priority> {
    let p = content.get("priority")?.as_f64()?;
    Some(if p >= 4.0 {
        Priority::High
    } else if p <= 2.0 {
        Priority::Low
    } else {
        Priority::Normal
    })
}

/// The marker of a line or entry that has one (an `inbox` field), or why
/// it is not one the bridge writes. `None`: no marker.
fn own_marker(holder: Option<&Value>) -> Option<Result<Marker, LineProblem>> {
    let marker = holder?.get("inbox")?;
    let unverified = |why: &str| LineProblem::UnverifiedMarker(why.to_owned());
    let text = |name: &str| {
        marker
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| unverified(&format!("its marker has no {name}")))
    };
    let parsed = (|| {
        Ok(Marker {
            thread_id: text("threadId")?,
            message_id: text("messageId")?,
            event_id: marker
                .get("eventId")
                .and_then(Value::as_u64)
                .ok_or_else(|| unverified("its marker has no eventId"))?,
            member: text("member")?,
            team: text("team")?,
        })
    })();
    Some(parsed)
}

/// The seed type an inbox message to a member is written as.
pub(crate) fn seed_type(message: &MailboxMessage) -> &'static str {
    if message.message.to_agent.starts_with("broadcast") {
        return "team_broadcast";
    }
    match message.message.kind {
        Kind::Task => "task_assignment",
        Kind::Result => "task_completion",
        Kind::Question => "blocking_notification",
        _ => "message",
    }
}

/// The words of `message` as the bridge writes them.
fn words(message: &MailboxMessage) -> String {
    let m = &message.message;
    if m.body.is_empty() {
        m.summary.clone()
    } else {
        format!("{}\n\n{}", m.summary, m.body)
    }
}

/// Whether a seed 002 line (parsed) says what the bridge writes for
/// `message`: its time and its words under the field its type has. A line
/// with a message's ids and other words is not that message delivered.
pub(crate) fn line_says(message: &MailboxMessage, line: &Value) -> bool {
    let field = match seed_type(message) {
        "task_completion" => "notes",
        "blocking_notification" => "reason",
        _ => "text",
    };
    line["timestamp"] == message.message.created_at.to_string().as_str()
        && line["content"][field] == words(message).as_str()
}

/// Whether a Claude Code entry says what the bridge writes for `message`:
/// its time, summary and words (a task's inside its JSON-encoded `text`).
pub(crate) fn entry_says(message: &MailboxMessage, entry: &Value) -> bool {
    let m = &message.message;
    let text = entry["text"].as_str().unwrap_or_default();
    let words_match = if seed_type(message) == "task_assignment" {
        serde_json::from_str::<Value>(text)
            .is_ok_and(|t| t["description"] == words(message).as_str())
    } else {
        text == words(message)
    };
    entry["timestamp"] == m.created_at.to_string().as_str()
        && entry["summary"] == m.summary.as_str()
        && words_match
}

/// `content` of an outbound line: the seed's fields for its type, the task
/// (the thread's task id, else its thread id, which a reply may name as
/// `taskId`), and the bridge's marker.
fn content(message: &MailboxMessage, to: Recipient<'_>, task: &str) -> Map<String, Value> {
    let text = words(message);
    let mut c = Map::new();
    c.insert("taskId".into(), task.into());
    match seed_type(message) {
        "task_assignment" => {
            c.insert("subject".into(), message.subject.clone().into());
            c.insert("text".into(), text.into());
        }
        "task_completion" => {
            c.insert("status".into(), message.thread_status.as_str().into());
            c.insert("notes".into(), text.into());
        }
        "blocking_notification" => {
            c.insert("reason".into(), text.into());
        }
        _ => {
            c.insert("text".into(), text.into());
        }
    }
    c.insert("inbox".into(), marker(message, to));
    c
}

/// The marker of `message` written to `to`'s file.
fn marker(message: &MailboxMessage, to: Recipient<'_>) -> Value {
    json!({
        "threadId": message.message.thread_id,
        "messageId": message.message.message_id,
        "eventId": message.message.event_id,
        "kind": message.message.kind.as_str(),
        "member": to.member,
        "team": to.team,
    })
}

/// A seed 002 line (with its newline) for `message`, written to `to` as
/// from `from` (the sender's name in the folder).
pub(crate) fn seed_line(
    message: &MailboxMessage,
    to: Recipient<'_>,
    from: &str,
    task: &str,
) -> Vec<u8> {
    let addressee = if seed_type(message) == "team_broadcast" {
        "all"
    } else {
        to.member
    };
    // In the seed's order (type first), which a JSON map would sort away:
    // people and `grep` read these lines too.
    let text = |v: &str| Value::from(v).to_string();
    let line = format!(
        "{{\"type\":{},\"from\":{},\"to\":{},\"timestamp\":{},\"content\":{}}}\n",
        text(seed_type(message)),
        text(from),
        text(addressee),
        text(&message.message.created_at.to_string()),
        Value::Object(content(message, to, task)),
    );
    line.into_bytes()
}

/// A Claude Code inbox entry for `message` to `to`: `text` is the seed's
/// message (type and content, JSON-encoded, as Claude Code encodes its
/// protocol messages) for a task, plain text otherwise.
pub(crate) fn claude_entry(
    message: &MailboxMessage,
    to: Recipient<'_>,
    from: &str,
    task: &str,
) -> Value {
    let m = &message.message;
    let kind = seed_type(message);
    let text = if kind == "task_assignment" {
        let mut c = content(message, to, task);
        c.remove("inbox");
        // Claude Code's own task_assignment says `description`.
        if let Some(text) = c.remove("text") {
            c.insert("description".into(), text);
        }
        c.insert("type".into(), kind.into());
        c.insert("assignedBy".into(), from.into());
        Value::Object(c).to_string()
    } else {
        words(message)
    };
    json!({
        "from": from,
        "text": text,
        "summary": m.summary,
        "timestamp": m.created_at.to_string(),
        "read": false,
        "inbox": marker(message, to),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Result<Inbound, LineProblem> {
        parse_line(text.as_bytes(), "backend-dev", &str::to_owned)
    }

    #[test]
    fn the_seed_s_examples_map_to_operations() {
        let assignment = r#"{"type":"task_assignment","from":"coordinator","to":"backend-dev","timestamp":"2026-02-15T10:30:00Z","content":{"taskId":"a1b2","subject":"Implement user authentication API","priority":4,"estimatedHours":8}}"#;
        let Ok(Inbound::Open(open)) = line(assignment) else {
            panic!("not an open");
        };
        assert_eq!(open.to, "backend-dev");
        assert_eq!(open.from, "coordinator");
        assert_eq!(open.subject, "Implement user authentication API");
        assert_eq!(open.task_id.as_deref(), Some("a1b2"));
        assert_eq!(open.priority, Some(Priority::High));
        assert_eq!(
            open.payload["teams"]["line"]["content"]["estimatedHours"],
            8
        );

        let done = r#"{"type":"task_completion","from":"backend-dev","to":"coordinator","timestamp":"2026-02-15T16:00:00Z","content":{"taskId":"a1b2","actualHours":7.5,"notes":"Implemented with JWT"}}"#;
        assert!(
            matches!(line(done), Ok(Inbound::Complete { task, member, summary, .. })
            if task == "a1b2" && member == "backend-dev" && summary == "Implemented with JWT")
        );

        let blocked = r#"{"type":"blocking_notification","from":"tester","to":"coordinator","timestamp":"2026-02-15T14:00:00Z","content":{"taskId":"b2c3","blockedBy":["a1b2"],"reason":"Cannot test yet"}}"#;
        assert!(
            matches!(line(blocked), Ok(Inbound::Block { reason, .. }) if reason == "Cannot test yet")
        );

        let idle = r#"{"type":"idle_notification","from":"backend-dev","to":"coordinator","timestamp":"2026-02-15T15:30:00Z","content":{"reason":"no_assigned_tasks"}}"#;
        assert!(matches!(line(idle), Ok(Inbound::Presence { member }) if member == "backend-dev"));

        let hello = r#"{"type":"message","from":"coordinator","to":"backend-dev","timestamp":"2026-02-15T11:15:00Z","content":{"text":"Hello"}}"#;
        assert!(
            matches!(line(hello), Ok(Inbound::Say { task: None, open }) if open.subject == "Hello")
        );
    }

    #[test]
    fn a_long_text_is_the_body_and_a_control_character_no_refusal() {
        let text = "y".repeat(300_000);
        let long = json!({"type":"message","from":"lead","to":"w","timestamp":"t",
            "content":{"text": format!("Look\u{1b}[31m here\n{text}")}});
        let Ok(Inbound::Say { open, .. }) = line(&long.to_string()) else {
            panic!("not a message");
        };
        assert_eq!(open.subject, "Look [31m here");
        assert!(open.body.len() > 300_000);
        let payload = open.payload.to_string();
        assert!(
            payload.len() < inbox_engine::validate::PAYLOAD_MAX_BYTES,
            "{}",
            payload.len()
        );
        assert!(payload.contains("left out"));
    }

    #[test]
    fn bad_lines_say_why() {
        assert_eq!(line("{nope").unwrap_err().code(), "malformed_json");
        assert_eq!(
            line(r#"{"type":"message","from":"a","to":"b","timestamp":"t"}"#).unwrap_err(),
            schema("content", "required")
        );
        assert_eq!(
            line(r#"{"type":"gossip","from":"a","to":"b","timestamp":"t","content":{}}"#)
                .unwrap_err()
                .code(),
            "unknown_type"
        );
        assert_eq!(
            line(r#"{"type":"task_completion","from":"a","to":"b","timestamp":"t","content":{}}"#)
                .unwrap_err()
                .code(),
            "no_task"
        );
        assert_eq!(line("[]").unwrap_err().code(), "schema_violation");
    }

    #[test]
    fn a_marker_is_a_claim_with_every_field_or_a_problem() {
        let marked = r#"{"type":"message","from":"lead","to":"w","timestamp":"t","content":{"text":"x","inbox":{"threadId":"thr_1","messageId":"msg_1","eventId":7,"kind":"event","member":"w","team":"t1"}}}"#;
        assert_eq!(
            line(marked),
            Ok(Inbound::Own(Marker {
                thread_id: "thr_1".into(),
                message_id: "msg_1".into(),
                event_id: 7,
                member: "w".into(),
                team: "t1".into(),
            }))
        );
        // Without the member or team it was written to (or any other
        // field), or not an object: never taken as the bridge's, never
        // applied.
        for marker in [
            r#"{"threadId":"thr_1","messageId":"msg_1","eventId":7}"#,
            r#"{"threadId":"thr_1","messageId":"msg_1","eventId":7,"member":"w"}"#,
            r#"{"threadId":"thr_1","messageId":"msg_1","eventId":"7","member":"w","team":"t1"}"#,
            r#"{"eventId":7}"#,
            r#""msg_1""#,
        ] {
            let text = format!(
                r#"{{"type":"message","from":"lead","to":"w","timestamp":"t","content":{{"inbox":{marker}}}}}"#
            );
            assert_eq!(
                line(&text).unwrap_err().code(),
                "unverified_marker",
                "{marker}"
            );
        }
        let entry =
            json!({"from":"lead","text":"x","timestamp":"t","read":false,"inbox":{"eventId":9}});
        assert_eq!(
            parse_entry(&entry, "w", &str::to_owned).unwrap_err().code(),
            "unverified_marker"
        );
    }

    #[test]
    fn claude_code_entries_are_plain_or_protocol_messages() {
        let plain = json!({"from":"team-lead","text":"Look at the tests","summary":"tests","timestamp":"t","read":false});
        assert!(
            matches!(parse_entry(&plain, "worker", &str::to_owned), Ok(Inbound::Say { open, .. })
            if open.to == "worker" && open.subject == "tests" && open.body == "Look at the tests")
        );
        let idle = json!({"from":"worker","text":"{\"type\":\"idle_notification\",\"from\":\"worker\"}","timestamp":"t","read":false});
        assert!(matches!(
            parse_entry(&idle, "team-lead", &str::to_owned),
            Ok(Inbound::Presence { .. })
        ));
        let shutdown = json!({"from":"team-lead","text":"{\"type\":\"shutdown_request\"}","timestamp":"t","read":false});
        assert!(
            matches!(parse_entry(&shutdown, "worker", &str::to_owned), Ok(Inbound::Say { open, .. })
            if open.subject == "shutdown_request from team-lead")
        );
    }
}
