//! Checked inputs: what validation turns each request into before the
//! engine opens a transaction.
//!
//! Every check here is a pure function of the request (see
//! [`crate::validate`]); nothing may read the store, so a request that fails
//! here costs no transaction at all.

use crate::error::EngineError;
use crate::model::{EventId, JsonObject, Kind, LeaseToken, Priority, Status};
use crate::rules::Action;
use crate::store::{ThreadOrder, ThreadQuery};
use crate::validate::{self as v, ArtifactDraft};
use crate::wire::*;

use super::DEFAULT_REPLY_KINDS;

#[derive(Clone)]
pub(super) struct MessageDraft {
    pub(super) kind: Kind,
    pub(super) summary: String,
    pub(super) body: String,
    pub(super) payload: JsonObject,
    pub(super) artifacts: Vec<ArtifactDraft>,
}

impl MessageDraft {
    pub(super) fn check(
        kind: Kind,
        summary: &str,
        body: &Option<String>,
        payload: &Option<serde_json::Value>,
        artifacts: &[ArtifactInput],
    ) -> Result<MessageDraft, EngineError> {
        v::line("summary", summary, v::SUMMARY_MAX_CHARS)?;
        Ok(MessageDraft {
            kind,
            summary: summary.to_owned(),
            body: v::body(body)?,
            payload: v::object("payload", payload, v::PAYLOAD_MAX_BYTES)?,
            artifacts: v::artifacts(artifacts)?,
        })
    }
}

pub(super) struct NewThread<'a> {
    pub(super) to: &'a str,
    pub(super) subject: &'a str,
    pub(super) run_id: Option<&'a str>,
    pub(super) task_id: Option<&'a str>,
    pub(super) priority: Priority,
    pub(super) max_attempts: u32,
}

pub(super) struct SendInput<'a> {
    pub(super) from: &'a str,
    pub(super) target: SendTarget<'a>,
}

pub(super) enum SendTarget<'a> {
    New(NewThread<'a>, MessageDraft),
    Existing(AppendInput<'a>),
}

impl<'a> SendInput<'a> {
    pub(super) fn check(r: &'a SendRequest) -> Result<SendInput<'a>, EngineError> {
        let from = v::agent("from_agent", &r.from_agent)?;
        if r.thread_id.is_some() {
            for (field, given) in [
                ("subject", r.subject.is_some()),
                ("run_id", r.run_id.is_some()),
                ("task_id", r.task_id.is_some()),
                ("priority", r.priority.is_some()),
                ("max_attempts", r.max_attempts.is_some()),
            ] {
                if given {
                    return Err(EngineError::invalid(
                        field,
                        "only applies when opening a thread; leave it out when sending into one",
                    ));
                }
            }
            let kind = r.kind.unwrap_or(Kind::Task);
            let allowed = [
                Kind::Task,
                Kind::Progress,
                Kind::Question,
                Kind::Answer,
                Kind::Control,
                Kind::Event,
            ];
            v::kind_in(
                "kind",
                kind,
                &allowed,
                "; results are written by done and fail",
            )?;
            let append = AppendInput::check(
                from,
                &r.to_agent,
                &r.thread_id,
                None,
                kind,
                &r.summary,
                &r.body,
                &r.payload,
                &r.artifacts,
            )?;
            return Ok(SendInput {
                from,
                target: SendTarget::Existing(append),
            });
        }
        let to = v::agent("to_agent", &r.to_agent)?;
        let subject = v::required("subject", &r.subject, "say in one line what the work is")?;
        v::line("subject", subject, v::SUBJECT_MAX_CHARS)?;
        let kind = r.kind.unwrap_or(Kind::Task);
        let allowed = [Kind::Task, Kind::Question, Kind::Control, Kind::Event];
        v::kind_in("kind", kind, &allowed, " to open a thread")?;
        let summary = r.summary.as_deref().unwrap_or(subject);
        let max_attempts = v::bounded(
            "max_attempts",
            r.max_attempts.map(u64::from),
            u64::from(v::DEFAULT_MAX_ATTEMPTS),
            u64::from(v::MAX_ATTEMPTS_LIMIT),
        )?;
        let new = NewThread {
            to,
            subject,
            run_id: v::optional_name("run_id", &r.run_id)?,
            task_id: v::optional_name("task_id", &r.task_id)?,
            priority: r.priority.unwrap_or(Priority::Normal),
            max_attempts: u32::try_from(max_attempts).unwrap_or(v::DEFAULT_MAX_ATTEMPTS),
        };
        let draft = MessageDraft::check(kind, summary, &r.body, &r.payload, &r.artifacts)?;
        Ok(SendInput {
            from,
            target: SendTarget::New(new, draft),
        })
    }
}

pub(super) struct AppendInput<'a> {
    pub(super) from: &'a str,
    pub(super) to: Option<&'a str>,
    pub(super) thread_id: &'a str,
    pub(super) lease_token: Option<LeaseToken>,
    pub(super) draft: MessageDraft,
}

impl<'a> AppendInput<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check(
        from: &'a str,
        to: &'a Option<String>,
        thread_id: &'a Option<String>,
        lease_token: Option<LeaseToken>,
        kind: Kind,
        summary: &'a Option<String>,
        body: &'a Option<String>,
        payload: &'a Option<serde_json::Value>,
        artifacts: &'a [ArtifactInput],
    ) -> Result<AppendInput<'a>, EngineError> {
        let summary = v::required("summary", summary, "say in one line what this message is")?;
        Ok(AppendInput {
            from,
            to: v::optional_agent("to_agent", to)?,
            thread_id: v::id("thread_id", thread_id)?,
            lease_token,
            draft: MessageDraft::check(kind, summary, body, payload, artifacts)?,
        })
    }

    pub(super) fn reply(r: &'a ReplyRequest) -> Result<AppendInput<'a>, EngineError> {
        let from = v::agent("from_agent", &r.from_agent)?;
        let kind = r.kind.unwrap_or(Kind::Answer);
        let allowed = [Kind::Answer, Kind::Question, Kind::Progress, Kind::Control];
        v::kind_in(
            "kind",
            kind,
            &allowed,
            "; results are written by done and fail",
        )?;
        AppendInput::check(
            from,
            &r.to_agent,
            &r.thread_id,
            r.lease_token,
            kind,
            &r.summary,
            &r.body,
            &r.payload,
            &r.artifacts,
        )
    }
}

pub(super) struct FetchInput<'a> {
    pub(super) agent: &'a str,
    pub(super) statuses: Vec<Status>,
    pub(super) limit: usize,
    pub(super) unread: bool,
}

impl<'a> FetchInput<'a> {
    pub(super) fn check(r: &'a FetchRequest) -> Result<FetchInput<'a>, EngineError> {
        let open = [
            Status::Pending,
            Status::Claimed,
            Status::InProgress,
            Status::Blocked,
        ];
        let mut statuses = v::statuses("status", &r.status, &open)?;
        if statuses.is_empty() {
            statuses.push(Status::Pending);
        }
        Ok(FetchInput {
            agent: v::agent("agent", &r.agent)?,
            statuses,
            limit: v::limit(r.limit, v::DEFAULT_FETCH_LIMIT)?,
            unread: r.unread,
        })
    }
}

pub(super) struct UpdateInput<'a> {
    pub(super) agent: &'a str,
    pub(super) thread_id: &'a str,
    pub(super) lease_token: Option<LeaseToken>,
    pub(super) action: Action,
    pub(super) draft: MessageDraft,
}

impl<'a> UpdateInput<'a> {
    pub(super) fn check(r: &'a UpdateRequest) -> Result<UpdateInput<'a>, EngineError> {
        let (action, kind, hint) = match r.status {
            None => (
                Action::Report,
                Kind::Progress,
                "say in one line what progress was made",
            ),
            Some(Status::InProgress) => (
                Action::Start,
                Kind::Progress,
                "say in one line what you are doing",
            ),
            Some(Status::Blocked) => (
                Action::Block,
                Kind::Question,
                "say exactly what is missing, as a question someone can answer",
            ),
            Some(other) => {
                let hint = match other {
                    Status::Done => "; finish with done",
                    Status::Failed => "; finish with fail",
                    Status::Cancelled => "; stop with cancel",
                    _ => "",
                };
                return Err(EngineError::invalid(
                    "status",
                    format!("`{other}` cannot be set by update; use in_progress or blocked{hint}"),
                ));
            }
        };
        let summary = v::required("summary", &r.summary, hint)?;
        Ok(UpdateInput {
            agent: v::agent("agent", &r.agent)?,
            thread_id: v::id("thread_id", &r.thread_id)?,
            lease_token: r.lease_token,
            action,
            draft: MessageDraft::check(kind, summary, &r.body, &r.payload, &r.artifacts)?,
        })
    }
}

pub(super) struct FinishInput<'a> {
    pub(super) agent: &'a str,
    pub(super) thread_id: &'a str,
    pub(super) lease_token: Option<LeaseToken>,
    pub(super) action: Action,
    pub(super) draft: MessageDraft,
}

impl<'a> FinishInput<'a> {
    pub(super) fn check(
        r: &'a FinishRequest,
        action: Action,
    ) -> Result<FinishInput<'a>, EngineError> {
        let hint = match action {
            Action::Complete => "say in one line what the result is",
            _ => "say in one line why the work failed",
        };
        let summary = v::required("summary", &r.summary, hint)?;
        Ok(FinishInput {
            agent: v::agent("agent", &r.agent)?,
            thread_id: v::id("thread_id", &r.thread_id)?,
            lease_token: r.lease_token,
            action,
            draft: MessageDraft::check(Kind::Result, summary, &r.body, &r.payload, &r.artifacts)?,
        })
    }
}

pub(super) fn list_query(r: &ListRequest) -> Result<ThreadQuery, EngineError> {
    Ok(ThreadQuery {
        thread_id: None,
        statuses: v::statuses("status", &r.status, Status::ALL)?,
        assigned_to: v::optional_agent("assigned_to", &r.assigned_to)?.map(str::to_owned),
        created_by: v::optional_agent("created_by", &r.created_by)?.map(str::to_owned),
        involving: v::optional_agent("agent", &r.agent)?.map(str::to_owned),
        run_id: v::optional_name("run_id", &r.run_id)?.map(str::to_owned),
        task_id: v::optional_name("task_id", &r.task_id)?.map(str::to_owned),
        unread_by: None,
        order: ThreadOrder::NewestFirst,
        limit: v::limit(r.limit, v::DEFAULT_LIST_LIMIT)?,
    })
}

pub(super) struct WatchInput<'a> {
    pub(super) agent: Option<&'a str>,
    pub(super) statuses: Vec<Status>,
    pub(super) after_event: Option<EventId>,
    pub(super) limit: usize,
}

impl<'a> WatchInput<'a> {
    pub(super) fn check(r: &'a WatchRequest) -> Result<WatchInput<'a>, EngineError> {
        v::timeout(r.timeout_seconds)?;
        Ok(WatchInput {
            agent: v::optional_agent("agent", &r.agent)?,
            statuses: v::statuses("status", &r.status, Status::ALL)?,
            after_event: r.after_event,
            limit: v::limit(r.limit, v::DEFAULT_WATCH_LIMIT)?,
        })
    }
}

pub(super) struct WaitReplyInput<'a> {
    pub(super) thread_id: &'a str,
    pub(super) agent: Option<&'a str>,
    pub(super) after_event: Option<EventId>,
    pub(super) after_message: Option<&'a str>,
    pub(super) kinds: Vec<Kind>,
}

impl<'a> WaitReplyInput<'a> {
    pub(super) fn check(r: &'a WaitReplyRequest) -> Result<WaitReplyInput<'a>, EngineError> {
        v::timeout(r.timeout_seconds)?;
        if r.after_event.is_some() && r.after_message.is_some() {
            return Err(EngineError::invalid(
                "after_message",
                "cannot be combined with after_event; give one cursor",
            ));
        }
        let mut kinds = Vec::new();
        for &kind in &r.kinds {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.is_empty() {
            kinds.extend_from_slice(DEFAULT_REPLY_KINDS);
        }
        Ok(WaitReplyInput {
            thread_id: v::id("thread_id", &r.thread_id)?,
            agent: v::optional_agent("agent", &r.agent)?,
            after_event: r.after_event,
            after_message: match &r.after_message {
                None => None,
                Some(_) => Some(v::id("after_message", &r.after_message)?),
            },
            kinds,
        })
    }
}
