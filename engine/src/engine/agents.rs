//! The agent registry and the addresses at work: who a thread reaches, who
//! may claim it, a role's rotation, presence, and the mailbox view (`read`,
//! `mark-read`).
//!
//! Every rule about addresses lives here: a name is one agent; `role:NAME`
//! is a pool any registered member may fetch and claim; `broadcast` and
//! `broadcast:role:NAME` are information every (member) agent reads and
//! nobody claims. The store is asked one address at a time and the engine
//! merges, so the store stays a plain index ([`crate::store::MailboxQuery`],
//! [`ThreadQuery`]). Presence is derived when asked, from what the agent
//! wrote, so that reads stay read-only.

use std::collections::BTreeMap;

use crate::address::{self, Address};
use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::{Agent, EventId, Lease, Message, Presence, ReadCursor, Status, Thread};
use crate::rules;
use crate::store::{AgentQuery, EventQuery, MailboxQuery, Store, ThreadOrder, ThreadQuery};
use crate::time::Timestamp;
use crate::wire::*;

use super::input::*;
use super::tx::Tx;

/// Most members a role's routing looks at. A registry is a team, not a
/// directory; the bound keeps one command's reads bounded all the same.
const MEMBERS_MAX: usize = 10_000;

/// Most live leases `agent-list` reads to say who holds what.
const LIVE_LEASES_MAX: usize = 100_000;

/// Most threads counted as waiting on one role.
const WAITING_MAX: usize = 1000;

/// Page of mailbox messages `mark-read` walks at a time.
const MARK_PAGE: usize = 500;

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// The registered agent of that name.
    pub(super) fn registered(&mut self, name: &str) -> Result<Option<Agent>, EngineError> {
        let query = super::ahead::registered_query(name);
        Ok(self.store.agents(&query)?.pop())
    }

    /// The addresses that reach `agent`: its name and its roles' pools and,
    /// with `information`, the broadcasts it reads. Broadcasts reach
    /// registered agents only.
    pub(super) fn addresses_of(
        &mut self,
        agent: &str,
        information: bool,
    ) -> Result<Vec<String>, EngineError> {
        Ok(match self.registered(agent)? {
            Some(registered) => address::addresses_of(agent, &registered.roles, information),
            None => vec![agent.to_owned()],
        })
    }

    /// `query` once per address that reaches `agent` (its name and its
    /// roles' pools), merged in the query's order. `place` puts an address
    /// into the query: as `assigned_to` for `fetch` (the threads it may
    /// claim), as `agent` for `list` (the threads it created or that are
    /// assigned to it; a role's address matches `assigned_to` only, as no
    /// name has a `:`), so the query's other filters still apply.
    pub(super) fn threads_reaching(
        &mut self,
        agent: &str,
        query: &ThreadQuery,
        place: fn(&mut ThreadQuery, String),
        claimable_only: bool,
    ) -> Result<Vec<crate::store::ThreadState>, EngineError> {
        let addresses = self.addresses_of(agent, false)?;
        let mut rows = Vec::new();
        for address in addresses {
            let mut one = query.clone();
            place(&mut one, address);
            rows.extend(self.effective_threads(&one, claimable_only)?);
        }
        rows.sort_by(|a, b| query.compare(&a.thread, &b.thread));
        rows.dedup_by(|a, b| a.thread.thread_id == b.thread.thread_id);
        rows.truncate(query.limit);
        Ok(rows)
    }

    /// Events matching `query` on threads that reach `agent` (its name and
    /// roles), merged in id order.
    pub(super) fn events_reaching(
        &mut self,
        agent: &str,
        query: &EventQuery,
    ) -> Result<Vec<crate::model::Event>, EngineError> {
        let mut events = Vec::new();
        for address in self.addresses_of(agent, false)? {
            let mut one = query.clone();
            one.agent = Some(address);
            events.extend(self.store.events(&one)?);
        }
        events.sort_by_key(|e| e.event_id);
        events.dedup_by_key(|e| e.event_id);
        events.truncate(query.limit);
        Ok(events)
    }

    /// Refuses `agent` a claim of `thread` unless it is the assignee or a
    /// registered member of the role the thread is sent to.
    pub(super) fn check_may_claim(
        &mut self,
        thread: &Thread,
        agent: &str,
    ) -> Result<(), EngineError> {
        let hint = match Address::stored(&thread.assigned_to) {
            Address::Agent(name) if name == agent => return Ok(()),
            Address::Agent(_) => "only its assignee may claim it".to_owned(),
            Address::Role(role) => {
                let member = self
                    .registered(agent)?
                    .is_some_and(|a| a.roles.contains(&role));
                if member {
                    return Ok(());
                }
                format!(
                    "only a registered member of role {role} may claim it; join with `inbox agent register --agent {agent} --role {role}`"
                )
            }
            Address::Broadcast | Address::RoleBroadcast(_) => {
                "a broadcast is information for every agent, not work; read it with `inbox read`"
                    .to_owned()
            }
        };
        Err(EngineError::NotAssigned {
            thread_id: thread.thread_id.clone(),
            agent: agent.to_owned(),
            assigned_to: thread.assigned_to.clone(),
            hint,
        })
    }

    /// After `agent` claimed `thread` in event `event_id`: a claim from a
    /// role's pool moves the member to the back of the role's rotation.
    pub(super) fn note_role_claim(
        &mut self,
        thread: &Thread,
        agent: &str,
        event_id: EventId,
    ) -> Result<(), EngineError> {
        if !matches!(Address::stored(&thread.assigned_to), Address::Role(_)) {
            return Ok(());
        }
        if let Some(mut member) = self.registered(agent)? {
            member.last_assigned_event = event_id;
            self.store.put_agent(&member)?;
        }
        Ok(())
    }

    /// Where a new thread sent to `to` goes: the `assigned_to` to store,
    /// and for a role or a broadcast, who it reaches. With `pick`, a role's
    /// thread is assigned to the present member that got the role's work
    /// least recently (ties by name), who moves to the back of the rotation.
    pub(super) fn route(
        &mut self,
        to: &Address,
        pick: bool,
    ) -> Result<(String, Option<Route>), EngineError> {
        let members = match to {
            Address::Agent(name) => return Ok((name.clone(), None)),
            Address::Role(role) | Address::RoleBroadcast(role) => self.members(Some(role))?,
            Address::Broadcast => self.members(None)?,
        };
        let mut route = Route {
            address: to.to_string(),
            members: u32::try_from(members.len()).unwrap_or(u32::MAX),
            picked: None,
        };
        if pick {
            let views = self.agent_views(members.clone())?;
            let next = members
                .into_iter()
                .zip(views)
                .filter(|(_, view)| view.presence != Presence::Gone)
                .map(|(agent, _)| agent)
                .min_by(|a, b| {
                    (a.last_assigned_event, &a.name).cmp(&(b.last_assigned_event, &b.name))
                });
            if let Some(mut member) = next {
                // The thread's own event is the next one this transaction records.
                member.last_assigned_event = self.next_event_id;
                self.store.put_agent(&member)?;
                route.picked = Some(member.name.clone());
                return Ok((member.name, Some(route)));
            }
        }
        Ok((route.address.clone(), Some(route)))
    }

    /// Registered agents, of one role or all, by name.
    fn members(&mut self, role: Option<&String>) -> Result<Vec<Agent>, EngineError> {
        let query = AgentQuery {
            name: None,
            role: role.cloned(),
            limit: MEMBERS_MAX,
        };
        Ok(self.store.agents(&query)?)
    }

    /// Agents as `agent-list` shows them: with their presence and holdings.
    fn agent_views(&mut self, agents: Vec<Agent>) -> Result<Vec<AgentView>, EngineError> {
        let mut holds: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if !agents.is_empty() {
            for Lease {
                agent, thread_id, ..
            } in self.store.live_leases(self.now, LIVE_LEASES_MAX)?
            {
                holds.entry(agent).or_default().push(thread_id);
            }
        }
        let mut views = Vec::with_capacity(agents.len());
        for agent in agents {
            let wrote = self.store.last_event_by(&agent.name)?.map(|e| e.created_at);
            let last_active_at = wrote.map_or(agent.seen_at, |t| t.max(agent.seen_at));
            let mut held = holds.remove(&agent.name).unwrap_or_default();
            held.sort();
            views.push(AgentView {
                presence: rules::presence(last_active_at, !held.is_empty(), self.now),
                name: agent.name,
                roles: agent.roles,
                description: agent.description,
                registered_at: agent.registered_at,
                registered_by: agent.registered_by,
                last_active_at,
                holds: held,
            });
        }
        Ok(views)
    }

    fn view_of(&mut self, agent: Agent) -> Result<AgentView, EngineError> {
        self.agent_views(vec![agent])?
            .pop()
            .ok_or_else(|| EngineError::internal("an agent's view went missing"))
    }

    pub(super) fn agent_register(
        &mut self,
        input: AgentRegisterInput,
    ) -> Result<AgentOutput, EngineError> {
        let before = self.registered(&input.agent)?;
        let settings = self.store.settings()?.unwrap_or_default();
        let vouched = self.registrar(&settings, &input.agent, before.as_ref())?;
        let mut agent = Agent {
            registered_at: before.as_ref().map_or(self.now, |a| a.registered_at),
            last_assigned_event: before.as_ref().map_or(0, |a| a.last_assigned_event),
            registered_by: vouched.or_else(|| before.as_ref()?.registered_by.clone()),
            token_sha256: before.and_then(|a| a.token_sha256),
            name: input.agent,
            roles: input.roles,
            description: input.description,
            seen_at: self.now,
        };
        let agent_token = self.issue_token(&settings, &mut agent)?;
        self.store.put_agent(&agent)?;
        Ok(AgentOutput {
            agent: self.view_of(agent)?,
            agent_token,
        })
    }

    pub(super) fn agent_unregister(&mut self, name: String) -> Result<AgentOutput, EngineError> {
        let agent = self
            .registered(&name)?
            .ok_or(EngineError::AgentNotFound { agent: name })?;
        self.store.delete_agent(&agent.name)?;
        Ok(AgentOutput {
            agent: self.view_of(agent)?,
            agent_token: None,
        })
    }

    pub(super) fn agent_list(
        &mut self,
        input: AgentListInput,
    ) -> Result<AgentsOutput, EngineError> {
        let query = AgentQuery {
            name: None,
            role: input.role.clone(),
            limit: input.limit,
        };
        let agents = self.store.agents(&query)?;
        let agents = self.agent_views(agents)?;
        let mut names: Vec<String> = agents.iter().flat_map(|a| a.roles.clone()).collect();
        names.extend(input.role);
        names.sort();
        names.dedup();
        let mut roles = Vec::with_capacity(names.len());
        for role in names {
            roles.push(self.role_view(role)?);
        }
        Ok(AgentsOutput { agents, roles })
    }

    /// A role's members, how many are present, and what waits on it.
    fn role_view(&mut self, role: String) -> Result<RoleView, EngineError> {
        let members = self.members(Some(&role))?;
        let present = self
            .agent_views(members.clone())?
            .iter()
            .filter(|v| v.presence != Presence::Gone)
            .count();
        let waiting = ThreadQuery {
            assigned_to: Some(Address::Role(role.clone()).to_string()),
            statuses: vec![Status::Pending],
            ..ThreadQuery::all(ThreadOrder::Queue, WAITING_MAX)
        };
        let waiting = self.effective_threads(&waiting, true)?.len();
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(RoleView {
            role,
            members: count(members.len()),
            present: count(present),
            waiting: count(waiting),
        })
    }

    /// The reader's mailbox messages after `after_event`, oldest first, at
    /// most `limit` (one more to tell whether there are more).
    fn mailbox_page(
        &mut self,
        reader: &str,
        after_event: EventId,
        since: Option<Timestamp>,
        unread_only: bool,
        limit: usize,
    ) -> Result<Vec<Message>, EngineError> {
        let mut messages = Vec::new();
        for address in self.addresses_of(reader, true)? {
            let query = MailboxQuery {
                to_agent: address,
                after_event,
                since,
                reader: reader.to_owned(),
                unread_only,
                limit,
            };
            messages.extend(self.store.mailbox(&query)?);
        }
        messages.sort_by_key(|m| m.event_id);
        messages.truncate(limit);
        Ok(messages)
    }

    pub(super) fn mailbox(&mut self, input: MailboxInput) -> Result<MailboxOutput, EngineError> {
        let mut messages = self.mailbox_page(
            &input.agent,
            input.after_event,
            input.since,
            input.unread_only,
            input.limit.saturating_add(1),
        )?;
        let more = messages.len() > input.limit;
        messages.truncate(input.limit);
        let next_event_id = match messages.last() {
            Some(last) => last.event_id,
            None => input.after_event.max(self.store.latest_event_id()?),
        };
        let mut threads: BTreeMap<String, (String, Status)> = BTreeMap::new();
        let mut out = Vec::with_capacity(messages.len());
        for message in messages {
            if !threads.contains_key(&message.thread_id) {
                let state = self.load(&message.thread_id)?;
                let status = self.effective(&state);
                threads.insert(message.thread_id.clone(), (state.thread.subject, status));
            }
            let (subject, thread_status) = threads[&message.thread_id].clone();
            out.push(MailboxMessage {
                message,
                subject,
                thread_status,
            });
        }
        Ok(MailboxOutput {
            messages: out,
            next_event_id,
            more,
        })
    }

    pub(super) fn mark_read(
        &mut self,
        input: MarkReadInput,
    ) -> Result<MarkReadOutput, EngineError> {
        let agent = input.agent;
        let messages = match input.target {
            MarkTarget::Messages(ids) => {
                let mut found = Vec::with_capacity(ids.len());
                for message_id in ids {
                    match self.store.message(&message_id)? {
                        Some(message) => found.push(message),
                        None => return Err(EngineError::UnknownMessage { message_id }),
                    }
                }
                found
            }
            MarkTarget::Through(through) => self.unread_through(&agent, through)?,
        };
        // The newest marked message of each thread becomes its cursor.
        let mut newest: BTreeMap<String, Message> = BTreeMap::new();
        for message in messages {
            let keep = newest
                .get(&message.thread_id)
                .is_none_or(|m| m.event_id < message.event_id);
            if keep {
                newest.insert(message.thread_id.clone(), message);
            }
        }
        let mut cursors = Vec::new();
        for (thread_id, message) in newest {
            let behind = self
                .store
                .read_cursor(&thread_id, &agent)?
                .is_none_or(|c| c.last_read_event_id < message.event_id);
            if behind {
                let cursor = ReadCursor {
                    thread_id,
                    agent: agent.clone(),
                    last_read_message_id: message.message_id,
                    last_read_event_id: message.event_id,
                    last_read_at: self.now,
                };
                self.store.put_read_cursor(&cursor)?;
                cursors.push(cursor);
            }
        }
        self.seen(&agent)?;
        Ok(MarkReadOutput { cursors })
    }

    /// Every unread message of `reader`'s mailbox up to event `through`.
    fn unread_through(
        &mut self,
        reader: &str,
        through: EventId,
    ) -> Result<Vec<Message>, EngineError> {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let page = self.mailbox_page(reader, after, None, true, MARK_PAGE)?;
            let full = page.len() == MARK_PAGE;
            for message in page {
                if message.event_id > through {
                    return Ok(out);
                }
                after = message.event_id;
                out.push(message);
            }
            if !full {
                return Ok(out);
            }
        }
    }

    /// Records activity that writes no event (a registered agent's
    /// `mark-read`).
    fn seen(&mut self, agent: &str) -> Result<(), EngineError> {
        if let Some(mut registered) = self.registered(agent)? {
            registered.seen_at = self.now;
            self.store.put_agent(&registered)?;
        }
        Ok(())
    }
}
