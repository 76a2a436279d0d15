//! Input checks of the registry and mailbox commands (`agent-register`,
//! `agent-list`, `agent-unregister`, `read`, `mark-read`): pure, like every
//! check in `input`.

use crate::address;
use crate::error::EngineError;
use crate::model::EventId;
use crate::time::Timestamp;
use crate::validate as v;
use crate::wire::*;

/// Most roles one agent may hold.
pub(in crate::engine) const ROLES_MAX: usize = 32;

/// Most message ids one `mark-read` may name.
pub(in crate::engine) const MARK_READ_IDS_MAX: usize = 1000;

/// Default `read` page.
pub(in crate::engine) const DEFAULT_READ_LIMIT: u32 = 50;

pub(in crate::engine) struct AgentRegisterInput {
    pub(in crate::engine) agent: String,
    pub(in crate::engine) roles: Vec<String>,
    pub(in crate::engine) description: String,
}

pub(in crate::engine) fn agent_register(
    r: AgentRegisterRequest,
) -> Result<AgentRegisterInput, EngineError> {
    let agent = v::agent("agent", &r.agent)?.to_owned();
    if r.roles.len() > ROLES_MAX {
        return Err(EngineError::invalid(
            "roles",
            format!(
                "names {} roles; an agent may hold at most {ROLES_MAX}",
                r.roles.len()
            ),
        ));
    }
    let mut roles = Vec::with_capacity(r.roles.len());
    for (i, role) in r.roles.iter().enumerate() {
        // `role:NAME` is accepted as well as `NAME`: people copy addresses.
        let name = role.strip_prefix("role:").unwrap_or(role);
        roles.push(address::role_checked(&format!("roles[{i}]"), name)?.to_owned());
    }
    roles.sort();
    roles.dedup();
    let description = r.description.unwrap_or_default();
    if !description.is_empty() {
        v::line("description", &description, v::SUMMARY_MAX_CHARS)?;
    }
    Ok(AgentRegisterInput {
        agent,
        roles,
        description,
    })
}

pub(in crate::engine) struct AgentListInput {
    pub(in crate::engine) role: Option<String>,
    pub(in crate::engine) limit: usize,
}

pub(in crate::engine) fn agent_list(r: AgentListRequest) -> Result<AgentListInput, EngineError> {
    let role = match r.role.as_deref() {
        None => None,
        Some(role) => {
            let name = role.strip_prefix("role:").unwrap_or(role);
            Some(address::role_checked("role", name)?.to_owned())
        }
    };
    Ok(AgentListInput {
        role,
        limit: v::limit(r.limit, v::DEFAULT_LIST_LIMIT)?,
    })
}

pub(in crate::engine) fn agent_unregister(
    r: AgentUnregisterRequest,
) -> Result<String, EngineError> {
    Ok(v::agent("agent", &r.agent)?.to_owned())
}

pub(in crate::engine) struct MailboxInput {
    pub(in crate::engine) agent: String,
    pub(in crate::engine) unread_only: bool,
    pub(in crate::engine) since: Option<Timestamp>,
    pub(in crate::engine) after_event: EventId,
    pub(in crate::engine) limit: usize,
}

pub(in crate::engine) fn mailbox(r: ReadRequest) -> Result<MailboxInput, EngineError> {
    Ok(MailboxInput {
        agent: v::agent("agent", &r.agent)?.to_owned(),
        unread_only: !r.include_read,
        since: r.since,
        after_event: r.after_event.unwrap_or(0),
        limit: v::limit(r.limit, DEFAULT_READ_LIMIT)?,
    })
}

/// Which messages `mark-read` marks.
pub(in crate::engine) enum MarkTarget {
    /// These, by id.
    Messages(Vec<String>),
    /// Every message of the reader's mailbox up to this event.
    Through(EventId),
}

pub(in crate::engine) struct MarkReadInput {
    pub(in crate::engine) agent: String,
    pub(in crate::engine) target: MarkTarget,
}

pub(in crate::engine) fn mark_read(r: MarkReadRequest) -> Result<MarkReadInput, EngineError> {
    let agent = v::agent("agent", &r.agent)?.to_owned();
    let target = match (r.message_ids.is_empty(), r.through_event) {
        (false, Some(_)) => {
            return Err(EngineError::invalid(
                "through_event",
                "marks everything up to an event; give it or message_ids, not both",
            ));
        }
        (true, None) => {
            return Err(EngineError::missing(
                "message_ids",
                "name the messages read, or give through_event (the `next_event_id` of a read) to mark everything up to it",
            ));
        }
        (true, Some(event_id)) => MarkTarget::Through(event_id),
        (false, None) => {
            if r.message_ids.len() > MARK_READ_IDS_MAX {
                return Err(EngineError::invalid(
                    "message_ids",
                    format!(
                        "names {} messages; mark at most {MARK_READ_IDS_MAX} at once, or use through_event",
                        r.message_ids.len()
                    ),
                ));
            }
            for (i, id) in r.message_ids.iter().enumerate() {
                v::id(&format!("message_ids[{i}]"), &Some(id.clone()))?;
            }
            MarkTarget::Messages(r.message_ids)
        }
    };
    Ok(MarkReadInput { agent, target })
}
