//! Seed 001's task descriptor (`NAME.task.json`), exactly as the agents-fleet
//! file-queue defines it, and the JSON of its `.result` companion.
//!
//! A descriptor is `version` 1 of kind `prompt` (a prompt and an optional
//! `createdAt`) or `spawn_worker` (an `agent_type` from a closed list, the
//! prompt, an optional `name` and `task_id`, and the v2 crew fields `skill`,
//! `role`, `skills`, `model`, `cwd`). Unknown fields and empty strings are
//! refused, with the path that failed, in the seed's words ("schema
//! validation failed at 'prompt': required"). This module turns an accepted
//! descriptor into the fields of the inbox thread it opens and says what a
//! `.result` holds; it does no I/O and must never decide anything inbox's
//! engine decides (who may claim, what a status means).

use inbox_engine::{Artifact, Message, Status, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The file names a bridge picks up.
pub(crate) const SUFFIX: &str = ".task.json";

/// The seed's size limit: a larger descriptor is refused unread.
pub(crate) const MAX_BYTES: u64 = 64 * 1024;

/// `agent_type`'s closed list, as the seed gives it.
const AGENT_TYPES: [&str; 8] = [
    "general-purpose",
    "explorer",
    "coder",
    "reviewer",
    "tester",
    "custom",
    "coordinator",
    "researcher",
];

/// Fields every descriptor may have.
const COMMON_FIELDS: [&str; 4] = ["version", "kind", "prompt", "createdAt"];

/// Fields only `spawn_worker` may have (v1 and the v2 crew fields).
const SPAWN_FIELDS: [&str; 8] = [
    "agent_type",
    "name",
    "task_id",
    "skill",
    "role",
    "skills",
    "model",
    "cwd",
];

/// An accepted descriptor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Descriptor {
    /// `prompt` or `spawn_worker`.
    pub(crate) kind: &'static str,
    /// The object as written, every field checked.
    fields: Map<String, Value>,
}

/// Why a descriptor was refused: the `.result`'s `error`, and a stable code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum Refusal {
    /// Over [`MAX_BYTES`].
    #[error("descriptor is {0} bytes, larger than the 64 KB limit")]
    TooLarge(u64),
    /// A symbolic link under a descriptor's name.
    #[error("descriptor is a symbolic link; symlinks are refused")]
    Symlink,
    /// A folder, FIFO or device under a descriptor's name.
    #[error("descriptor is not a regular file")]
    NotAFile,
    /// Not JSON.
    #[error("malformed JSON: {0}")]
    Malformed(String),
    /// JSON, but not a descriptor.
    #[error("schema validation failed at '{path}': {problem}")]
    Schema {
        /// The failing field (`skills[1]`), or `(root)`.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `spawn_worker` while the bridge does not trust its folder.
    #[error(
        "spawn_worker is refused: anyone who can write this folder could start workers; start the \
         bridge with --trust-all to accept it"
    )]
    Untrusted,
    /// Nobody to send it to.
    #[error(
        "no recipient: the descriptor names no role or skill and the bridge has no --to; start it \
         with --to ADDRESS"
    )]
    NoRecipient,
    /// inbox refused the thread (the engine's code and message).
    #[error("inbox refused the thread ({code}): {message}")]
    Inbox {
        /// The engine's error code.
        code: String,
        /// The engine's message.
        message: String,
    },
    /// The file could not be read.
    #[error("descriptor could not be read: {0}")]
    Unreadable(String),
    /// A file of another user: whoever else can write the folder cannot
    /// send work as the bridge's user. Said, never written to a `.result`.
    #[error(
        "descriptor belongs to another user (uid {owner}); the bridge (uid {me}) takes only its own \
         user's files"
    )]
    NotOwner {
        /// The file's owner.
        owner: u32,
        /// The bridge's user.
        me: u32,
    },
    /// A file others may write, in a folder they may write: its content
    /// may not be its owner's.
    #[error(
        "descriptor can be written by other users (mode {0:04o}) in a folder they can write; \
         `chmod go-w` it before it is dropped"
    )]
    OthersCanWrite(u32),
    /// A file the bridge must write for the descriptor (`.result`,
    /// `.processed`) cannot be, or the descriptor cannot be renamed, so
    /// nothing is sent.
    #[error("{file} cannot be {done}: {problem}; the descriptor was not sent")]
    Unwritable {
        /// The name the bridge would write (or rename).
        file: String,
        /// `written` or `renamed`.
        done: &'static str,
        /// Why it cannot.
        problem: String,
        /// [`Refusal::code`]'s answer.
        code: &'static str,
    },
}

impl Refusal {
    /// A stable code for the `.result` and the bridge's JSON lines.
    pub(crate) fn code(&self) -> &str {
        match self {
            Refusal::TooLarge(_) => "too_large",
            Refusal::Symlink => "symlink",
            Refusal::NotAFile => "not_a_file",
            Refusal::Malformed(_) => "malformed_json",
            Refusal::Schema { .. } => "schema_violation",
            Refusal::Untrusted => "untrusted",
            Refusal::NoRecipient => "no_recipient",
            Refusal::Inbox { code, .. } => code,
            Refusal::Unreadable(_) => "unreadable",
            Refusal::NotOwner { .. } => "not_owner",
            Refusal::OthersCanWrite(_) => "writable_by_others",
            Refusal::Unwritable { code, .. } => code,
        }
    }
}

fn schema(path: impl Into<String>, problem: &str) -> Refusal {
    Refusal::Schema {
        path: path.into(),
        problem: problem.to_owned(),
    }
}

/// Whether `bytes` end before the JSON does: a writer may still be writing
/// the file (see the bridge's settle time).
pub(crate) fn is_truncated(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes).is_err_and(|e| e.is_eof())
}

/// Parses and checks a descriptor.
pub(crate) fn parse(bytes: &[u8]) -> Result<Descriptor, Refusal> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| Refusal::Malformed(e.to_string()))?;
    let Value::Object(fields) = value else {
        return Err(schema("(root)", "must be an object"));
    };
    let kind = match fields.get("kind") {
        None => return Err(schema("kind", "required")),
        Some(Value::String(k)) if k == "prompt" => "prompt",
        Some(Value::String(k)) if k == "spawn_worker" => "spawn_worker",
        Some(_) => return Err(schema("kind", "must be \"prompt\" or \"spawn_worker\"")),
    };
    check_known(&fields, kind)?;
    match fields.get("version") {
        None => return Err(schema("version", "required")),
        Some(v) if v.as_u64() == Some(1) => {}
        Some(_) => return Err(schema("version", "must be 1")),
    }
    required_text(&fields, "prompt")?;
    optional_text(&fields, "createdAt")?;
    if kind == "spawn_worker" {
        check_spawn(&fields)?;
    }
    Ok(Descriptor { kind, fields })
}

/// Refuses a field the descriptor's kind does not have.
fn check_known(fields: &Map<String, Value>, kind: &str) -> Result<(), Refusal> {
    for name in fields.keys() {
        let known = COMMON_FIELDS.contains(&name.as_str())
            || (kind == "spawn_worker" && SPAWN_FIELDS.contains(&name.as_str()));
        if !known {
            let problem = if SPAWN_FIELDS.contains(&name.as_str()) {
                "only a spawn_worker descriptor has this field"
            } else {
                "unknown field"
            };
            return Err(schema(name.as_str(), problem));
        }
    }
    Ok(())
}

/// `spawn_worker`'s own fields.
fn check_spawn(fields: &Map<String, Value>) -> Result<(), Refusal> {
    let agent_type = required_text(fields, "agent_type")?;
    if !AGENT_TYPES.contains(&agent_type) {
        return Err(schema(
            "agent_type",
            &format!("must be one of: {}", AGENT_TYPES.join(" | ")),
        ));
    }
    for name in ["name", "task_id", "skill", "role", "model", "cwd"] {
        optional_text(fields, name)?;
    }
    match fields.get("skills") {
        None => Ok(()),
        Some(Value::Array(skills)) => {
            for (i, skill) in skills.iter().enumerate() {
                text_value(skill, &format!("skills[{i}]"))?;
            }
            Ok(())
        }
        Some(_) => Err(schema("skills", "must be an array of strings")),
    }
}

fn required_text<'a>(fields: &'a Map<String, Value>, name: &str) -> Result<&'a str, Refusal> {
    match fields.get(name) {
        None => Err(schema(name, "required")),
        Some(value) => text_value(value, name),
    }
}

fn optional_text<'a>(
    fields: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<&'a str>, Refusal> {
    fields.get(name).map(|v| text_value(v, name)).transpose()
}

/// A string that is not empty ("Empty strings are rejected — omit the field
/// instead").
fn text_value<'a>(value: &'a Value, path: &str) -> Result<&'a str, Refusal> {
    match value {
        Value::String(s) if s.is_empty() => {
            Err(schema(path, "must not be empty; omit the field instead"))
        }
        Value::String(s) => Ok(s),
        _ => Err(schema(path, "must be a string")),
    }
}

/// What an accepted descriptor becomes in inbox.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Thread {
    /// The recipient address.
    pub(crate) to: String,
    /// One line for the thread.
    pub(crate) subject: String,
    /// The prompt.
    pub(crate) body: String,
    /// The descriptor's task id, if any.
    pub(crate) task_id: Option<String>,
    /// `{"file_drop": {"descriptor": NAME, <the descriptor's fields>}}`.
    pub(crate) payload: Value,
}

impl Descriptor {
    fn text(&self, name: &str) -> Option<&str> {
        self.fields.get(name).and_then(Value::as_str)
    }

    /// The thread this descriptor opens: to its `role` (or else `skill`) as
    /// `role:NAME`, else to `default_to`.
    pub(crate) fn thread(&self, file: &str, default_to: Option<&str>) -> Result<Thread, Refusal> {
        let to = match (self.text("role").or(self.text("skill")), default_to) {
            (Some(role), _) => format!("role:{role}"),
            (None, Some(to)) => to.to_owned(),
            (None, None) => return Err(Refusal::NoRecipient),
        };
        let prompt = self.text("prompt").unwrap_or_default();
        let subject = self.text("name").map_or_else(
            || inbox_engine::validate::subject_from(prompt),
            str::to_owned,
        );
        let mut seed = self.fields.clone();
        seed.insert("descriptor".into(), file.into());
        Ok(Thread {
            to,
            subject,
            body: prompt.to_owned(),
            task_id: self.text("task_id").map(str::to_owned),
            payload: json!({ "file_drop": seed }),
        })
    }
}

/// A `.result` companion: the seed's shape (`ok`, then `dispatchedAt` and
/// `descriptor.kind`, or `error` and `failedAt`) in the seed's camelCase,
/// with what inbox adds: the thread's id and address, a stable error code,
/// and the thread's outcome once it finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResultFile {
    pub(crate) ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dispatched_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) descriptor: Option<KindOnly>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failed_at: Option<String>,
    /// How the thread ended; absent until it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<Outcome>,
}

/// `descriptor` in a `.result`: its kind, as the seed writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KindOnly {
    pub(crate) kind: String,
}

/// How a thread a descriptor opened ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Outcome {
    /// `done`, `failed` or `cancelled`.
    pub(crate) status: Status,
    /// When it ended.
    pub(crate) finished_at: Timestamp,
    /// The finishing message's summary.
    pub(crate) summary: Option<String>,
    /// The message that finished it (inbox's message, as `show --json`
    /// prints it).
    pub(crate) result: Option<Message>,
    /// That message's artifacts (files, logs, patches, links).
    pub(crate) artifacts: Vec<Artifact>,
}

impl ResultFile {
    /// The `.result` of a descriptor that opened a thread.
    pub(crate) fn dispatched(kind: &str, at: String, thread_id: String, to: String) -> ResultFile {
        ResultFile {
            dispatched_at: Some(at),
            descriptor: Some(KindOnly { kind: kind.into() }),
            thread_id: Some(thread_id),
            to: Some(to),
            ..ResultFile::empty(true)
        }
    }

    /// The `.result` of a refused descriptor.
    pub(crate) fn failed(refusal: &Refusal, at: String) -> ResultFile {
        ResultFile {
            error: Some(refusal.to_string()),
            code: Some(refusal.code().to_owned()),
            failed_at: Some(at),
            ..ResultFile::empty(false)
        }
    }

    fn empty(ok: bool) -> ResultFile {
        ResultFile {
            ok,
            dispatched_at: None,
            descriptor: None,
            thread_id: None,
            to: None,
            error: None,
            code: None,
            failed_at: None,
            outcome: None,
        }
    }

    /// The file's bytes: pretty JSON and a final newline, for people and
    /// `jq` alike.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// A `.result` read back: its thread, when it still waits for an outcome.
    pub(crate) fn awaiting(bytes: &[u8]) -> Option<String> {
        let file: ResultFile = serde_json::from_slice(bytes).ok()?;
        file.thread_id.filter(|_| file.ok && file.outcome.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(text: &str) -> String {
        parse(text.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn the_seed_s_own_examples_are_accepted() {
        let prompt = r#"{"version":1,"kind":"prompt","prompt":"your prompt text","createdAt":"2026-05-30T12:34:56.000Z"}"#;
        assert_eq!(parse(prompt.as_bytes()).unwrap().kind, "prompt");
        let spawn = r#"{"version":1,"kind":"spawn_worker","agent_type":"coder","skill":"fleet-coder",
            "name":"feature-x-impl","prompt":"Implement feature X","skills":["vitest-patterns"],"task_id":"T-1"}"#;
        let spawn = parse(spawn.as_bytes()).unwrap();
        let thread = spawn.thread("x.task.json", Some("lead")).unwrap();
        assert_eq!(thread.to, "role:fleet-coder");
        assert_eq!(thread.subject, "feature-x-impl");
        assert_eq!(thread.task_id.as_deref(), Some("T-1"));
        assert_eq!(thread.payload["file_drop"]["descriptor"], "x.task.json");
        assert_eq!(thread.payload["file_drop"]["skills"][0], "vitest-patterns");
    }

    #[test]
    fn role_wins_over_skill_and_the_flag_is_the_default() {
        let both = r#"{"version":1,"kind":"spawn_worker","agent_type":"coder","skill":"s","role":"r","prompt":"p"}"#;
        let thread = parse(both.as_bytes())
            .unwrap()
            .thread("f", Some("lead"))
            .unwrap();
        assert_eq!(thread.to, "role:r");
        let plain = parse(br#"{"version":1,"kind":"prompt","prompt":"Fix it\nsoon"}"#).unwrap();
        let thread = plain.thread("f", Some("worker-1")).unwrap();
        assert_eq!(
            (thread.to.as_str(), thread.subject.as_str()),
            ("worker-1", "Fix it")
        );
        assert_eq!(plain.thread("f", None), Err(Refusal::NoRecipient));
        let escapes =
            parse(br#"{"version":1,"kind":"prompt","prompt":"\tFix\tthe \u001b[31mbug"}"#).unwrap();
        let thread = escapes.thread("f", Some("w")).unwrap();
        assert_eq!(thread.subject, "Fix the  [31mbug");
        assert_eq!(thread.body, "\tFix\tthe \u{1b}[31mbug");
    }

    #[test]
    fn schema_violations_name_the_failing_path() {
        assert_eq!(
            refusal(r#"{"version":1,"kind":"prompt"}"#),
            "schema validation failed at 'prompt': required"
        );
        assert_eq!(
            refusal(r#"{"version":1,"kind":"prompt","prompt":""}"#),
            "schema validation failed at 'prompt': must not be empty; omit the field instead"
        );
        assert_eq!(
            refusal(r#"{"version":2,"kind":"prompt","prompt":"p"}"#),
            "schema validation failed at 'version': must be 1"
        );
        assert_eq!(
            refusal(r#"{"version":1,"kind":"prompt","prompt":"p","extra":1}"#),
            "schema validation failed at 'extra': unknown field"
        );
        assert_eq!(
            refusal(r#"{"version":1,"kind":"prompt","prompt":"p","role":"r"}"#),
            "schema validation failed at 'role': only a spawn_worker descriptor has this field"
        );
        assert_eq!(
            refusal(r#"{"version":1,"kind":"spawn_worker","prompt":"p","agent_type":"boss"}"#),
            "schema validation failed at 'agent_type': must be one of: general-purpose | explorer | \
             coder | reviewer | tester | custom | coordinator | researcher"
        );
        assert_eq!(
            refusal(
                r#"{"version":1,"kind":"spawn_worker","prompt":"p","agent_type":"coder","skills":["a",""]}"#
            ),
            "schema validation failed at 'skills[1]': must not be empty; omit the field instead"
        );
        assert_eq!(
            refusal(
                r#"{"version":1,"kind":"spawn_worker","prompt":"p","agent_type":"coder","permissionOverrides":{}}"#
            ),
            "schema validation failed at 'permissionOverrides': unknown field"
        );
        assert_eq!(
            refusal("[1]"),
            "schema validation failed at '(root)': must be an object"
        );
        assert_eq!(
            refusal(r#"{"version":1,"kind":"task","prompt":"p"}"#),
            "schema validation failed at 'kind': must be \"prompt\" or \"spawn_worker\""
        );
        assert!(refusal("{nope").starts_with("malformed JSON: "));
    }

    #[test]
    fn a_file_cut_short_is_told_apart_from_a_malformed_one() {
        assert!(is_truncated(b""));
        assert!(is_truncated(br#"{"version":1,"kind":"pro"#));
        assert!(!is_truncated(br#"{"version":1}"#));
        assert!(!is_truncated(b"{nope}"));
    }
}
