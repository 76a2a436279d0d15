//! Input validation: the documented limits and the checks every request goes
//! through before the engine opens a transaction.
//!
//! Everything here is a pure function of the request. Checks that need
//! stored state (is the thread terminal, who holds the lease) belong to
//! [`crate::rules`] and [`crate::engine`]. A value that passes here can be
//! stored by every store without truncation.

use crate::error::EngineError;
use crate::model::{Artifact, JsonObject, Kind, Status};
use crate::time::Timestamp;
use crate::wire::ArtifactInput;

/// The agent name the engine writes as when it acts on its own (lease expiry).
/// Agents may not use it.
pub const SYSTEM_AGENT: &str = "inbox";

/// The agent name orch writes as when it records what a thread or the clock
/// did (an attempt that failed, a retry after its backoff). Agents may not
/// use it either.
pub const ORCH_AGENT: &str = "orch";

/// The address `broadcast`, reserved: no agent may take it as a name.
pub const BROADCAST: &str = "broadcast";

/// Agent names, run ids and task ids: at most this many bytes.
pub const NAME_MAX_BYTES: usize = 128;
/// Thread subjects: at most this many characters, one line.
pub const SUBJECT_MAX_CHARS: usize = 500;
/// Message summaries and cancel reasons: at most this many characters, one line.
pub const SUMMARY_MAX_CHARS: usize = 1000;
/// Message bodies: at most this many bytes (1 MiB).
pub const BODY_MAX_BYTES: usize = 1 << 20;
/// Payloads, as compact JSON: at most this many bytes (256 KiB).
pub const PAYLOAD_MAX_BYTES: usize = 256 << 10;
/// Artifacts on one message: at most this many.
pub const ARTIFACTS_MAX: usize = 32;
/// Artifact paths: at most this many bytes.
pub const ARTIFACT_PATH_MAX_BYTES: usize = 4096;
/// Artifact kinds: at most this many bytes of `[a-z0-9_.-]`.
pub const ARTIFACT_KIND_MAX_BYTES: usize = 64;
/// Artifact metadata, as compact JSON: at most this many bytes (16 KiB).
pub const METADATA_MAX_BYTES: usize = 16 << 10;
/// Lease length when `claim` does not say.
pub const DEFAULT_LEASE_SECONDS: u64 = 900;
/// Longest lease (24 hours); renew for longer work.
pub const MAX_LEASE_SECONDS: u64 = 86_400;
/// Claims allowed per thread when `send` does not say.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Most claims a thread may allow.
pub const MAX_ATTEMPTS_LIMIT: u32 = 100;
/// `fetch` results when the request does not say.
pub const DEFAULT_FETCH_LIMIT: u32 = 20;
/// `list` results when the request does not say.
pub const DEFAULT_LIST_LIMIT: u32 = 50;
/// `show` messages per page when the request does not say.
pub const DEFAULT_SHOW_LIMIT: u32 = 100;
/// `watch` events per wake when the request does not say.
pub const DEFAULT_WATCH_LIMIT: u32 = 100;
/// Largest `limit` any command accepts.
pub const MAX_LIMIT: u32 = 1000;
/// How long a wait blocks when the request does not say.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// Longest wait (24 hours).
pub const MAX_TIMEOUT_SECONDS: u64 = 86_400;

/// A required field: present and not blank.
pub fn required<'a>(
    field: &str,
    value: &'a Option<String>,
    hint: &str,
) -> Result<&'a str, EngineError> {
    match value.as_deref() {
        Some(v) if !v.trim().is_empty() => Ok(v),
        _ => Err(EngineError::missing(field, hint)),
    }
}

/// An agent name: 1 to 128 bytes of [`AGENT_NAME_CHARS`], starting with a
/// letter or digit, not the reserved `inbox`.
pub fn agent<'a>(field: &str, value: &'a Option<String>) -> Result<&'a str, EngineError> {
    let name = required(field, value, "give the agent name, e.g. backend-worker")?;
    name_like(field, name, Alphabet::Agent)?;
    if name == SYSTEM_AGENT || name == ORCH_AGENT {
        return Err(EngineError::invalid(
            field,
            format!("`{name}` is reserved for the engine's own messages; pick another agent name"),
        ));
    }
    if name == BROADCAST {
        return Err(EngineError::invalid(
            field,
            "`broadcast` is the address of every agent, not a name; pick another agent name",
        ));
    }
    Ok(name)
}

/// An optional agent name (see [`agent`]).
pub fn optional_agent<'a>(
    field: &str,
    value: &'a Option<String>,
) -> Result<Option<&'a str>, EngineError> {
    match value {
        None => Ok(None),
        Some(_) => agent(field, value).map(Some),
    }
}

/// An optional run or task id: 1 to 128 bytes of [`ID_NAME_CHARS`],
/// starting with a letter or digit.
pub fn optional_name<'a>(
    field: &str,
    value: &'a Option<String>,
) -> Result<Option<&'a str>, EngineError> {
    match value.as_deref() {
        None => Ok(None),
        Some("") => Err(EngineError::missing(
            field,
            "leave it out or give a non-empty value",
        )),
        Some(v) => name_like(field, v, Alphabet::Id).map(Some),
    }
}

/// A required run or task id: 1 to 128 bytes of [`ID_NAME_CHARS`],
/// starting with a letter or digit.
pub fn name<'a>(
    field: &str,
    value: &'a Option<String>,
    hint: &str,
) -> Result<&'a str, EngineError> {
    name_like(field, required(field, value, hint)?, Alphabet::Id)
}

/// The characters an agent name may hold after its first, which is an
/// ASCII letter or digit. Names are printed in terminals and compared by
/// byte, so only visible ASCII without look-alikes is allowed: no spaces,
/// controls, invisible or bidirectional characters, no homoglyphs from other
/// scripts. `:` is kept out for addresses (`role:NAME`).
pub const AGENT_NAME_CHARS: &str = "ASCII letters, digits, `.`, `_`, `@` and `-`";

/// Run and task ids: as agent names, plus `:` and `/` (`feat/login`).
pub const ID_NAME_CHARS: &str = "ASCII letters, digits, `.`, `_`, `@`, `:`, `/` and `-`";

/// Which alphabet a name is checked against.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Alphabet {
    Agent,
    Id,
}

impl Alphabet {
    fn allows(self, c: char) -> bool {
        c.is_ascii_alphanumeric()
            || matches!(c, '.' | '_' | '@' | '-')
            || (self == Alphabet::Id && matches!(c, ':' | '/'))
    }

    fn described(self) -> &'static str {
        match self {
            Alphabet::Agent => AGENT_NAME_CHARS,
            Alphabet::Id => ID_NAME_CHARS,
        }
    }
}

fn name_like<'a>(field: &str, value: &'a str, alphabet: Alphabet) -> Result<&'a str, EngineError> {
    if value.len() > NAME_MAX_BYTES {
        return Err(EngineError::TooLong {
            field: field.to_owned(),
            actual: Some(value.len()),
            limit: NAME_MAX_BYTES,
            unit: "bytes",
        });
    }
    let refuse = |what: String| {
        EngineError::invalid(
            field,
            format!(
                "{what}; a name starts with an ASCII letter or digit and holds only {}",
                alphabet.described()
            ),
        )
    };
    if let Some(c) = value.chars().find(|&c| !alphabet.allows(c)) {
        return Err(refuse(format!("contains {c:?}")));
    }
    if !value.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(refuse("does not start with a letter or digit".into()));
    }
    Ok(value)
}

/// A thread or message id given by the caller: present. Unknown ids are
/// reported as not found by the engine, which says what ids look like.
pub fn id<'a>(field: &str, value: &'a Option<String>) -> Result<&'a str, EngineError> {
    required(
        field,
        value,
        "give the id, e.g. thr_01JH5Q8Z3K4M2N6P7R8S9T0V1W",
    )
}

/// One line of text: not blank, no control characters, at most `max` characters.
pub fn line(field: &str, value: &str, max: usize) -> Result<(), EngineError> {
    if value.trim().is_empty() {
        return Err(EngineError::missing(
            field,
            "write one line that says what happened",
        ));
    }
    let chars = value.chars().count();
    if chars > max {
        return Err(EngineError::TooLong {
            field: field.to_owned(),
            actual: Some(chars),
            limit: max,
            unit: "characters",
        });
    }
    if value.chars().any(char::is_control) {
        return Err(EngineError::invalid(
            field,
            "must be one line without control characters; put details in `body`",
        ));
    }
    Ok(())
}

/// A message body: at most [`BODY_MAX_BYTES`]. Takes the text by value, so
/// a megabyte body is moved into the message, never copied.
pub fn body(value: Option<String>) -> Result<String, EngineError> {
    let body = value.unwrap_or_default();
    if body.len() > BODY_MAX_BYTES {
        return Err(EngineError::TooLong {
            field: "body".to_owned(),
            actual: Some(body.len()),
            limit: BODY_MAX_BYTES,
            unit: "bytes",
        });
    }
    Ok(body)
}

/// A payload or metadata: absent (an empty object) or a JSON object of at
/// most `max` bytes as compact JSON. Takes the value by value (no copy).
pub fn object(
    field: &str,
    value: Option<serde_json::Value>,
    max: usize,
) -> Result<JsonObject, EngineError> {
    let object = match value {
        None => return Ok(JsonObject::new()),
        Some(serde_json::Value::Object(object)) => object,
        Some(other) => {
            return Err(EngineError::InvalidPayload {
                field: field.to_owned(),
                problem: format!("got {}", crate::model::json_type(&other)),
            });
        }
    };
    let size = compact_size(&object);
    if size > max {
        return Err(EngineError::TooLong {
            field: field.to_owned(),
            actual: Some(size),
            limit: max,
            unit: "bytes",
        });
    }
    Ok(object)
}

/// The length of `object` as compact JSON, counted without writing it out.
fn compact_size(object: &JsonObject) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, object) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// Parses JSON text given on a command line (`--payload-json`) into a
/// payload value, reporting bad JSON as `invalid_payload`. Hosts call this so
/// every host reports the same error for the same text.
pub fn parse_json_object(field: &str, text: &str) -> Result<serde_json::Value, EngineError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| EngineError::InvalidPayload {
            field: field.to_owned(),
            problem: format!("not valid JSON: {e}"),
        })?;
    if !value.is_object() {
        return Err(EngineError::InvalidPayload {
            field: field.to_owned(),
            problem: format!("got {}", crate::model::json_type(&value)),
        });
    }
    Ok(value)
}

/// Artifacts to attach, checked and ready to receive ids.
pub fn artifacts(inputs: Vec<ArtifactInput>) -> Result<Vec<ArtifactDraft>, EngineError> {
    if inputs.len() > ARTIFACTS_MAX {
        return Err(EngineError::invalid(
            "artifacts",
            format!(
                "has {} entries; at most {ARTIFACTS_MAX} per message; attach an archive or a listing instead",
                inputs.len()
            ),
        ));
    }
    inputs
        .into_iter()
        .enumerate()
        .map(|(i, input)| {
            let field = |name: &str| format!("artifacts[{i}].{name}");
            let path = required(&field("path"), &input.path, "give the file path or URL")?;
            if path.len() > ARTIFACT_PATH_MAX_BYTES {
                return Err(EngineError::TooLong {
                    field: field("path"),
                    actual: Some(path.len()),
                    limit: ARTIFACT_PATH_MAX_BYTES,
                    unit: "bytes",
                });
            }
            if path.chars().any(char::is_control) {
                return Err(EngineError::invalid(
                    field("path"),
                    "contains control characters",
                ));
            }
            let kind = input.kind.as_deref().unwrap_or("file");
            let kind_ok = !kind.is_empty()
                && kind.len() <= ARTIFACT_KIND_MAX_BYTES
                && kind
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
            if !kind_ok {
                return Err(EngineError::invalid(
                    field("kind"),
                    format!(
                        "`{kind}` is not an artifact kind; use 1 to {ARTIFACT_KIND_MAX_BYTES} characters of a-z, 0-9, _ . - such as file, log, patch, url"
                    ),
                ));
            }
            let metadata = object(&field("metadata"), input.metadata, METADATA_MAX_BYTES)?;
            if let Some(absolute) = &input.absolute_path
                && (absolute.is_empty()
                    || absolute.len() > ARTIFACT_PATH_MAX_BYTES
                    || absolute.chars().any(char::is_control))
            {
                return Err(EngineError::invalid(
                    field("absolute_path"),
                    format!("must be 1 to {ARTIFACT_PATH_MAX_BYTES} bytes without control characters"),
                ));
            }
            // Stores keep sizes as signed 64-bit integers (SQLite's INTEGER);
            // no file is larger, so a bigger number is a mistake, not a size.
            if let Some(size) = input.size_bytes
                && i64::try_from(size).is_err()
            {
                return Err(EngineError::invalid(
                    field("size_bytes"),
                    format!("is {size}; a file size is at most {}", i64::MAX),
                ));
            }
            if let Some(digest) = &input.sha256 {
                let hex = digest.len() == 64
                    && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                if !hex {
                    return Err(EngineError::invalid(
                        field("sha256"),
                        "must be a SHA-256 digest: 64 lowercase hexadecimal digits",
                    ));
                }
            }
            Ok(ArtifactDraft {
                path: path.to_owned(),
                kind: kind.to_owned(),
                metadata,
                absolute_path: input.absolute_path,
                size_bytes: input.size_bytes,
                sha256: input.sha256,
            })
        })
        .collect()
}

/// A checked artifact that has no id yet.
#[derive(Clone, Debug, PartialEq)]
pub struct ArtifactDraft {
    /// Where the content is.
    pub path: String,
    /// What it is.
    pub kind: String,
    /// About it.
    pub metadata: JsonObject,
    /// The path made absolute by the sending host.
    pub absolute_path: Option<String>,
    /// The file's size, if the sending host read it.
    pub size_bytes: Option<u64>,
    /// The file's SHA-256 digest, if the sending host read it.
    pub sha256: Option<String>,
}

impl ArtifactDraft {
    /// The stored artifact.
    pub fn into_artifact(self, artifact_id: String, message_id: &str, now: Timestamp) -> Artifact {
        Artifact {
            artifact_id,
            message_id: message_id.to_owned(),
            path: self.path,
            kind: self.kind,
            metadata: self.metadata,
            absolute_path: self.absolute_path,
            size_bytes: self.size_bytes,
            sha256: self.sha256,
            created_at: now,
        }
    }
}

/// A number in `1..=max`, or `default` when absent.
pub fn bounded(
    field: &str,
    value: Option<u64>,
    default: u64,
    max: u64,
) -> Result<u64, EngineError> {
    match value {
        None => Ok(default),
        Some(v) if (1..=max).contains(&v) => Ok(v),
        Some(v) => Err(EngineError::invalid(
            field,
            format!("is {v}; it must be between 1 and {max}"),
        )),
    }
}

/// A wait timeout in `0..=MAX_TIMEOUT_SECONDS` (0 polls once).
pub fn timeout(value: Option<u64>) -> Result<u64, EngineError> {
    match value {
        None => Ok(DEFAULT_TIMEOUT_SECONDS),
        Some(v) if v <= MAX_TIMEOUT_SECONDS => Ok(v),
        Some(v) => Err(EngineError::invalid(
            "timeout_seconds",
            format!("is {v}; it must be between 0 and {MAX_TIMEOUT_SECONDS}"),
        )),
    }
}

/// A `limit` in `1..=MAX_LIMIT`, or `default`.
pub fn limit(value: Option<u32>, default: u32) -> Result<usize, EngineError> {
    let v = bounded(
        "limit",
        value.map(u64::from),
        u64::from(default),
        u64::from(MAX_LIMIT),
    )?;
    Ok(usize::try_from(v).unwrap_or(usize::MAX))
}

/// A kind the command accepts.
pub fn kind_in(field: &str, kind: Kind, allowed: &[Kind], hint: &str) -> Result<Kind, EngineError> {
    if allowed.contains(&kind) {
        Ok(kind)
    } else {
        let list: Vec<&str> = allowed.iter().map(|k| k.as_str()).collect();
        Err(EngineError::invalid(
            field,
            format!(
                "`{kind}` is not allowed here; use one of {}{hint}",
                list.join(", ")
            ),
        ))
    }
}

/// `given` without repeats, in the order first given.
pub fn distinct<T: Copy + PartialEq>(given: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(given.len());
    for &item in given {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// A status filter: deduplicated, each value allowed.
pub fn statuses(
    field: &str,
    given: &[Status],
    allowed: &[Status],
) -> Result<Vec<Status>, EngineError> {
    if let Some(status) = given.iter().find(|s| !allowed.contains(s)) {
        let list: Vec<&str> = allowed.iter().map(|s| s.as_str()).collect();
        return Err(EngineError::invalid(
            field,
            format!(
                "`{status}` cannot be used here; use any of {}",
                list.join(", ")
            ),
        ));
    }
    Ok(distinct(given))
}

/// The body's first non-blank line as a subject, shortened to the subject's
/// limit (with an ellipsis) since nobody wrote it as one (an MCP
/// message without a subject, a bridged descriptor's prompt). A tab or an
/// escape in it becomes a space: a subject is one plain line, and the body
/// keeps the text as written.
pub fn subject_from(body: &str) -> String {
    let line: String = body
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = line.trim();
    if line.chars().count() <= SUBJECT_MAX_CHARS {
        return line.to_owned();
    }
    let mut short: String = line.chars().take(SUBJECT_MAX_CHARS - 1).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::{SUBJECT_MAX_CHARS, subject_from};

    #[test]
    fn a_subject_is_the_body_s_first_non_blank_line_as_one_plain_line() {
        assert_eq!(
            subject_from("\n  \n  Fix the build  \nthen test"),
            "Fix the build"
        );
        assert_eq!(subject_from("a\tb\u{1b}[2Jc"), "a b [2Jc");
        assert_eq!(subject_from("   \n\t\n"), "");
    }

    #[test]
    fn a_long_first_line_is_cut_to_the_subject_limit_with_an_ellipsis() {
        let exact = "é".repeat(SUBJECT_MAX_CHARS);
        assert_eq!(
            subject_from(&exact),
            exact,
            "a line at the limit is kept whole"
        );
        let long = "é".repeat(SUBJECT_MAX_CHARS + 1);
        let subject = subject_from(&long);
        assert_eq!(subject.chars().count(), SUBJECT_MAX_CHARS);
        assert!(subject.ends_with('…'));
        assert_eq!(
            subject.trim_end_matches('…'),
            "é".repeat(SUBJECT_MAX_CHARS - 1)
        );
    }
}
