//! Turning parsed arguments into the engine's [`Request`]: the host's share
//! of input handling, i.e. what needs the file system or the command line.
//!
//! - `--body-file` and `--payload-file` are read here (`-` is stdin); they
//!   must be UTF-8;
//! - `--payload-json` and `--artifact-metadata-json` are parsed with the
//!   engine's own JSON check, so every host reports the same error;
//! - each `--artifact` keeps the path as given, plus its absolute form and,
//!   when it is a readable file, its size and SHA-256 digest.
//!
//! Everything else (required fields, limits, allowed kinds) is left to the
//! engine: this module must never duplicate a rule.

use std::io::Read;
use std::path::Path;

use inbox_engine::validate::parse_json_object;
use inbox_engine::wire::*;
use inbox_engine::{EngineError, Kind, Priority, Request, Status};
use sha2::{Digest, Sha256};

use crate::args::*;

/// A notice for the user that does not stop the command (e.g. an artifact
/// that does not exist yet is recorded without a digest).
pub(crate) type Notes = Vec<String>;

/// Builds the request for `command` (every command that reaches the engine).
pub(crate) fn build(
    command: &Command,
    agent: Option<&str>,
    notes: &mut Notes,
) -> Result<Request, EngineError> {
    let agent = agent.map(str::to_owned);
    Ok(match command {
        Command::Init(_) => Request::Init(InitRequest {}),
        Command::Send(a) => {
            let (body, payload) = content(&a.content)?;
            Request::Send(SendRequest {
                from_agent: a.from.clone().or(agent),
                to_agent: a.to.clone(),
                thread_id: a.thread.clone(),
                run_id: a.run.clone(),
                task_id: a.task.clone(),
                subject: a.subject.clone(),
                kind: a.kind.as_deref().and_then(Kind::parse),
                summary: a.summary.clone(),
                body,
                payload,
                priority: a.priority.as_deref().and_then(Priority::parse),
                max_attempts: a.max_attempts,
                artifacts: artifacts(&a.artifacts, notes)?,
            })
        }
        Command::Fetch(a) => Request::Fetch(FetchRequest {
            agent,
            status: statuses(&a.status),
            limit: a.limit,
            unread: a.unread,
        }),
        Command::Claim(a) => Request::Claim(ClaimRequest {
            agent,
            thread_id: a.thread.clone(),
            next: a.next,
            lease_seconds: a.lease_seconds,
        }),
        Command::Renew(a) => Request::Renew(RenewRequest {
            agent,
            thread_id: a.thread.clone(),
            lease_token: a.lease_token,
            lease_seconds: a.lease_seconds,
        }),
        Command::Update(a) => {
            let (body, payload) = content(&a.content)?;
            Request::Update(UpdateRequest {
                agent,
                thread_id: a.thread.clone(),
                lease_token: a.lease_token,
                status: a.status.as_deref().and_then(Status::parse),
                summary: a.summary.clone(),
                body,
                payload,
                artifacts: artifacts(&a.artifacts, notes)?,
            })
        }
        Command::Reply(a) => {
            let (body, payload) = content(&a.content)?;
            Request::Reply(ReplyRequest {
                from_agent: a.from.clone().or(agent),
                to_agent: a.to.clone(),
                thread_id: a.thread.clone(),
                lease_token: a.lease_token,
                kind: a.kind.as_deref().and_then(Kind::parse),
                summary: a.summary.clone(),
                body,
                payload,
                artifacts: artifacts(&a.artifacts, notes)?,
            })
        }
        Command::Done(a) | Command::Fail(a) => {
            let (body, payload) = content(&a.content)?;
            let finish = FinishRequest {
                agent,
                thread_id: a.thread.clone(),
                lease_token: a.lease_token,
                summary: a.summary.clone(),
                body,
                payload,
                artifacts: artifacts(&a.artifacts, notes)?,
            };
            if matches!(command, Command::Done(_)) {
                Request::Done(finish)
            } else {
                Request::Fail(finish)
            }
        }
        Command::Cancel(a) => Request::Cancel(CancelRequest {
            agent,
            thread_id: a.thread.clone(),
            reason: a.reason.clone(),
            artifacts: artifacts(&a.artifacts, notes)?,
        }),
        Command::List(a) => Request::List(ListRequest {
            agent,
            status: statuses(&a.status),
            created_by: a.created_by.clone(),
            assigned_to: a.assigned_to.clone(),
            run_id: a.run.clone(),
            task_id: a.task.clone(),
            limit: a.limit,
        }),
        Command::Show(a) => Request::Show(ShowRequest {
            thread_id: a.thread.clone(),
            agent,
            mark_read: a.mark_read,
        }),
        Command::Watch(a) => Request::Watch(WatchRequest {
            agent,
            status: statuses(&a.status),
            after_event: a.after_event,
            timeout_seconds: a.timeout_seconds,
            limit: a.limit,
        }),
        Command::WaitReply(a) => Request::WaitReply(WaitReplyRequest {
            thread_id: a.thread.clone(),
            agent,
            lease_token: a.lease_token,
            after_event: a.after_event,
            after_message: a.after_message.clone(),
            kinds: a.kinds.iter().filter_map(|k| Kind::parse(k)).collect(),
            timeout_seconds: a.timeout_seconds,
        }),
        Command::Skill(_) | Command::Script(_) => {
            return Err(EngineError::InvalidRequest {
                message: "this command does not go through the engine".into(),
            });
        }
    })
}

fn statuses(given: &[String]) -> Vec<Status> {
    given.iter().filter_map(|s| Status::parse(s)).collect()
}

fn content(args: &ContentArgs) -> Result<(Option<String>, Option<serde_json::Value>), EngineError> {
    let stdin = Path::new("-");
    if args.body_file.as_deref() == Some(stdin) && args.payload_file.as_deref() == Some(stdin) {
        return Err(EngineError::InvalidValue {
            field: "payload_file".into(),
            problem: "and --body-file cannot both read stdin; put one of them in a file".into(),
        });
    }
    let body = match &args.body_file {
        Some(path) => Some(read_text("body_file", path)?),
        None => args.body.clone(),
    };
    let payload_text = match &args.payload_file {
        Some(path) => Some(read_text("payload_file", path)?),
        None => args.payload_json.clone(),
    };
    let payload = payload_text
        .as_deref()
        .map(|text| parse_json_object("payload", text))
        .transpose()?;
    Ok((body, payload))
}

/// Reads a UTF-8 text file given by `flag` (`-` is stdin).
fn read_text(flag: &str, path: &Path) -> Result<String, EngineError> {
    let shown = path.display();
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().read_to_end(&mut bytes).map(drop)
    } else {
        std::fs::File::open(path).and_then(|mut file| file.read_to_end(&mut bytes).map(drop))
    };
    read.map_err(|e| EngineError::InvalidValue {
        field: flag.into(),
        problem: format!("cannot be read: {shown}: {e}"),
    })?;
    String::from_utf8(bytes).map_err(|e| EngineError::InvalidValue {
        field: flag.into(),
        problem: format!(
            "{shown} is not UTF-8 text (invalid byte at offset {}); attach binary files with --artifact instead",
            e.utf8_error().valid_up_to()
        ),
    })
}

/// Pairs each `--artifact` with its kind and metadata: by position, or one
/// value for all.
fn artifacts(args: &ArtifactArgs, notes: &mut Notes) -> Result<Vec<ArtifactInput>, EngineError> {
    let n = args.paths.len();
    let pick = |values: &[String], flag: &str, i: usize| -> Result<Option<String>, EngineError> {
        match values.len() {
            0 => Ok(None),
            1 => Ok(values.first().cloned()),
            len if len == n => Ok(values.get(i).cloned()),
            len => Err(EngineError::InvalidValue {
                field: flag.into(),
                problem: format!(
                    "is given {len} times for {n} --artifact; give it once (for all) or once per --artifact, in order"
                ),
            }),
        }
    };
    if n == 0 && !(args.kinds.is_empty() && args.metadata.is_empty()) {
        return Err(EngineError::InvalidValue {
            field: "artifact_kind".into(),
            problem: "--artifact-kind and --artifact-metadata-json describe an --artifact; add the --artifact".into(),
        });
    }
    let mut out = Vec::with_capacity(n);
    for (i, path) in args.paths.iter().enumerate() {
        let metadata = pick(&args.metadata, "artifact_metadata_json", i)?
            .map(|text| parse_json_object(&format!("artifacts[{i}].metadata"), &text))
            .transpose()?;
        let facts = file_facts(path, notes);
        out.push(ArtifactInput {
            path: Some(path.clone()),
            kind: pick(&args.kinds, "artifact_kind", i)?,
            metadata,
            absolute_path: facts.absolute_path,
            size_bytes: facts.size_bytes,
            sha256: facts.sha256,
        });
    }
    Ok(out)
}

struct Facts {
    absolute_path: Option<String>,
    size_bytes: Option<u64>,
    sha256: Option<String>,
}

/// What this host can say about an artifact path: its absolute form (see
/// [`normalize`]) and, for a readable file, size and digest. URLs are kept as they are;
/// a path that is missing, a folder or unreadable is still recorded, with a
/// note saying why it has no digest.
fn file_facts(path: &str, notes: &mut Notes) -> Facts {
    let mut facts = Facts {
        absolute_path: None,
        size_bytes: None,
        sha256: None,
    };
    if path.contains("://") {
        return facts;
    }
    facts.absolute_path = std::path::absolute(path)
        .ok()
        .map(|p| normalize(&p).display().to_string());
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            notes.push(format!(
                "artifact {path} cannot be read ({e}); recorded without size or digest"
            ));
            return facts;
        }
    };
    if !meta.is_file() {
        notes.push(format!(
            "artifact {path} is not a regular file; recorded without size or digest"
        ));
        return facts;
    }
    match digest(path) {
        Ok((size, hex)) => {
            facts.size_bytes = Some(size);
            facts.sha256 = Some(hex);
        }
        Err(e) => notes.push(format!(
            "artifact {path} cannot be read ({e}); recorded without size or digest"
        )),
    }
    facts
}

/// Resolves `.` and `..` in an absolute path without touching the file
/// system, so `src/../docs/a.md` is recorded as `/project/docs/a.md`.
/// Symbolic links are left as they are: the path names what the sender
/// named; size and digest come from the file the link points to.
fn normalize(path: &Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn digest(path: &str) -> std::io::Result<(u64, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let size = std::io::copy(&mut file, &mut hasher)?;
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    Ok((size, hex))
}
