//! Turning parsed arguments into the engine's [`inbox_engine::Request`]: the host's share
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

use inbox_engine::validate::{self as v, parse_json_object};
use inbox_engine::wire::*;
use inbox_engine::{EngineError, Request};

use crate::args::*;

use crate::fields::{Fields, Group, Notes};

impl Group for AgentArgs {
    fn request(self, agent: Option<String>, _: &mut Notes) -> Result<Request, EngineError> {
        Ok(match self.command {
            AgentCommand::Register(args) => Request::AgentRegister(AgentRegisterRequest {
                agent,
                roles: args.roles,
                description: args.description,
            }),
            AgentCommand::List(args) => Request::AgentList(AgentListRequest {
                role: args.role,
                limit: args.limit,
            }),
            AgentCommand::Unregister(AgentUnregisterArgs {}) => {
                Request::AgentUnregister(AgentUnregisterRequest { agent })
            }
        })
    }
}

impl Fields for ReadArgs {
    type Fields = ReadRequest;

    fn fields(self, agent: Option<String>, _: &mut Notes) -> Result<ReadRequest, EngineError> {
        Ok(ReadRequest {
            agent,
            include_read: self.include_read,
            since: self.since,
            after_event: self.after_event,
            limit: self.limit,
        })
    }
}

impl Fields for MarkReadArgs {
    type Fields = MarkReadRequest;

    fn fields(self, agent: Option<String>, _: &mut Notes) -> Result<MarkReadRequest, EngineError> {
        Ok(MarkReadRequest {
            agent,
            message_ids: self.message_ids,
            through_event: self.through_event,
        })
    }
}

impl Fields for SettingsArgs {
    type Fields = SettingsRequest;

    fn fields(self, _: Option<String>, _: &mut Notes) -> Result<SettingsRequest, EngineError> {
        let KeepArgs {
            keep_days,
            keep_messages,
            keep_read_hours,
        } = self.keep;
        Ok(SettingsRequest {
            agent_tokens: self.agent_tokens,
            agent_registration: self.agent_registration,
            auto_gc: self.auto_gc,
            keep_days,
            keep_messages,
            keep_read_hours,
        })
    }
}

impl Fields for GcArgs {
    type Fields = GcRequest;

    fn fields(self, _: Option<String>, _: &mut Notes) -> Result<GcRequest, EngineError> {
        let KeepArgs {
            keep_days,
            keep_messages,
            keep_read_hours,
        } = self.keep;
        Ok(GcRequest {
            keep_days,
            keep_messages,
            keep_read_hours,
            dry_run: self.dry_run,
            limit: self.limit,
        })
    }
}

impl Fields for InitArgs {
    type Fields = InitRequest;

    // `--durability` is the host's (a connection setting), not the engine's.
    fn fields(self, _: Option<String>, _: &mut Notes) -> Result<InitRequest, EngineError> {
        Ok(InitRequest {})
    }
}

impl Fields for SendArgs {
    type Fields = SendRequest;

    fn fields(self, agent: Option<String>, notes: &mut Notes) -> Result<SendRequest, EngineError> {
        let (body, payload) = content(self.content)?;
        Ok(SendRequest {
            from_agent: self.from.or(agent),
            to_agent: self.to,
            thread_id: self.thread,
            run_id: self.run,
            task_id: self.task,
            subject: self.subject,
            kind: self.kind,
            summary: self.summary,
            body,
            payload,
            priority: self.priority,
            max_attempts: self.max_attempts,
            pick: self.pick,
            artifacts: artifacts(&self.artifacts, notes)?,
        })
    }
}

impl Fields for FetchArgs {
    type Fields = FetchRequest;

    fn fields(self, agent: Option<String>, _: &mut Notes) -> Result<FetchRequest, EngineError> {
        Ok(FetchRequest {
            agent,
            status: self.status,
            limit: self.limit,
            unread: self.unread,
        })
    }
}

impl Fields for ClaimArgs {
    type Fields = ClaimRequest;

    fn fields(self, agent: Option<String>, _: &mut Notes) -> Result<ClaimRequest, EngineError> {
        Ok(ClaimRequest {
            agent,
            thread_id: self.thread,
            next: self.next,
            lease_seconds: self.lease_seconds,
        })
    }
}

impl Fields for RenewArgs {
    type Fields = RenewRequest;

    fn fields(self, agent: Option<String>, _: &mut Notes) -> Result<RenewRequest, EngineError> {
        Ok(RenewRequest {
            agent,
            thread_id: self.thread,
            lease_token: self.lease_token,
            lease_seconds: self.lease_seconds,
        })
    }
}

impl Fields for UpdateArgs {
    type Fields = UpdateRequest;

    fn fields(
        self,
        agent: Option<String>,
        notes: &mut Notes,
    ) -> Result<UpdateRequest, EngineError> {
        let (body, payload) = content(self.content)?;
        Ok(UpdateRequest {
            agent,
            thread_id: self.thread,
            lease_token: self.lease_token,
            status: self.status,
            summary: self.summary,
            body,
            payload,
            artifacts: artifacts(&self.artifacts, notes)?,
        })
    }
}

impl Fields for ReplyArgs {
    type Fields = ReplyRequest;

    fn fields(self, agent: Option<String>, notes: &mut Notes) -> Result<ReplyRequest, EngineError> {
        let (body, payload) = content(self.content)?;
        Ok(ReplyRequest {
            from_agent: self.from.or(agent),
            to_agent: self.to,
            thread_id: self.thread,
            lease_token: self.lease_token,
            kind: self.kind,
            summary: self.summary,
            body,
            payload,
            artifacts: artifacts(&self.artifacts, notes)?,
        })
    }
}

impl Fields for FinishArgs {
    type Fields = FinishRequest;

    fn fields(
        self,
        agent: Option<String>,
        notes: &mut Notes,
    ) -> Result<FinishRequest, EngineError> {
        let (body, payload) = content(self.content)?;
        Ok(FinishRequest {
            agent,
            thread_id: self.thread,
            lease_token: self.lease_token,
            summary: self.summary,
            body,
            payload,
            artifacts: artifacts(&self.artifacts, notes)?,
        })
    }
}

impl Fields for CancelArgs {
    type Fields = CancelRequest;

    fn fields(
        self,
        agent: Option<String>,
        notes: &mut Notes,
    ) -> Result<CancelRequest, EngineError> {
        Ok(CancelRequest {
            agent,
            thread_id: self.thread,
            reason: self.reason,
            artifacts: artifacts(&self.artifacts, notes)?,
        })
    }
}

impl Fields for ListArgs {
    type Fields = ListRequest;

    fn fields(self, agent: Option<String>, _: &mut Notes) -> Result<ListRequest, EngineError> {
        Ok(ListRequest {
            agent,
            status: self.status,
            created_by: self.created_by,
            assigned_to: self.assigned_to,
            run_id: self.run,
            task_id: self.task,
            limit: self.limit,
        })
    }
}

impl Fields for ShowArgs {
    type Fields = ShowRequest;

    fn fields(self, agent: Option<String>, _: &mut Notes) -> Result<ShowRequest, EngineError> {
        Ok(ShowRequest {
            thread_id: self.thread,
            agent,
            mark_read: self.mark_read,
            after_message: self.after_message,
            limit: self.limit,
        })
    }
}

impl Fields for WatchArgs {
    type Fields = WatchRequest;

    fn fields(self, agent: Option<String>, _: &mut Notes) -> Result<WatchRequest, EngineError> {
        Ok(WatchRequest {
            agent,
            status: self.status,
            kinds: self.kinds,
            after_event: self.after_event,
            timeout_seconds: self.timeout_seconds,
            limit: self.limit,
        })
    }
}

impl Fields for WaitReplyArgs {
    type Fields = WaitReplyRequest;

    fn fields(self, agent: Option<String>, _: &mut Notes) -> Result<WaitReplyRequest, EngineError> {
        Ok(WaitReplyRequest {
            thread_id: self.thread,
            agent,
            lease_token: self.lease_token,
            after_event: self.after_event,
            after_message: self.after_message,
            kinds: self.kinds,
            timeout_seconds: self.timeout_seconds,
        })
    }
}

fn content(args: ContentArgs) -> Result<(Option<String>, Option<serde_json::Value>), EngineError> {
    let stdin = Path::new("-");
    if args.body_file.as_deref() == Some(stdin) && args.payload_file.as_deref() == Some(stdin) {
        return Err(EngineError::InvalidValue {
            field: "payload_file".into(),
            problem: "and --body-file cannot both read stdin; put one of them in a file".into(),
        });
    }
    let body = match &args.body_file {
        Some(path) => Some(read_text("body_file", "body", path, v::BODY_MAX_BYTES)?),
        None => args.body,
    };
    let payload_text = match &args.payload_file {
        Some(path) => Some(read_text(
            "payload_file",
            "payload",
            path,
            v::PAYLOAD_MAX_BYTES,
        )?),
        None => args.payload_json,
    };
    let payload = payload_text
        .as_deref()
        .map(|text| parse_json_object("payload", text))
        .transpose()?;
    Ok((body, payload))
}

/// Reads a UTF-8 text file given by `flag` (`-` is stdin) for the request
/// field `field`, never more than `limit` bytes plus one: a file or stream
/// over the limit (`/dev/zero`, `yes |`) is refused as `too_long` without
/// being read further.
pub(crate) fn read_text(
    flag: &str,
    field: &str,
    path: &Path,
    limit: usize,
) -> Result<String, EngineError> {
    let shown = path.display();
    let unreadable = |e: std::io::Error| EngineError::InvalidValue {
        field: flag.into(),
        problem: format!("cannot be read: {shown}: {e}"),
    };
    let mut bytes = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let size = if path == Path::new("-") {
        std::io::stdin()
            .take(cap)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        None
    } else {
        let file = std::fs::File::open(path).map_err(unreadable)?;
        let size = file
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        file.take(cap).read_to_end(&mut bytes).map_err(unreadable)?;
        size
    };
    if bytes.len() > limit {
        return Err(EngineError::TooLong {
            field: field.into(),
            actual: size.and_then(|n| usize::try_from(n).ok()),
            limit,
            unit: "bytes",
        });
    }
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
        let path = text_path(i, path)?;
        let metadata = pick(&args.metadata, "artifact_metadata_json", i)?
            .map(|text| parse_json_object(&format!("artifacts[{i}].metadata"), &text))
            .transpose()?;
        let facts = inbox_host_native::artifact::file_facts(path, notes);
        out.push(ArtifactInput {
            path: Some(path.to_owned()),
            kind: pick(&args.kinds, "artifact_kind", i)?,
            metadata,
            absolute_path: facts.absolute_path,
            size_bytes: facts.size_bytes,
            sha256: facts.sha256,
        });
    }
    Ok(out)
}

/// An artifact path as text. Paths are recorded as text (JSON has no
/// other kind), so a file name that is not UTF-8 is refused, not mangled.
fn text_path(i: usize, path: &Path) -> Result<&str, EngineError> {
    path.to_str().ok_or_else(|| EngineError::InvalidValue {
        field: format!("artifacts[{i}].path"),
        problem: format!(
            "{} is not valid UTF-8, and artifact paths are stored as text; rename the file, or attach the folder that holds it",
            path.display()
        ),
    })
}
