//! Who may act and who may receive: agent tokens (the `agent_tokens`
//! setting) and the registry as a gate (`agent_registration`). With tokens
//! required, a command that acts as an agent must name a registered agent
//! and carry that agent's token, so that one agent cannot act as another,
//! nor as a name nobody holds, by mistake or because a prompt told it to.
//! With registration required, only registered agents act, and an address
//! nobody registered (a mistyped name, a role without members) is refused
//! instead of filling an inbox nobody reads.
//!
//! What is checked: every write and every wait whose request names an
//! acting agent (the command table's `acting` field), and every address a
//! caller writes (`send`/`reply --to`, an orch assignee, a council's
//! reviewers, and the assignee a leader's dispatch sends to). Reads are not:
//! they change nothing, and whoever can open the file can read it.
//!
//! With tokens required, the registry and the settings are guarded too, or
//! two commands would undo the rest (register a name of one's own, or turn
//! tokens off): once a registered agent holds a token, registering a name
//! that has none (a new one, or one registered before tokens) needs the
//! token of a registered agent that has one, which is recorded as its
//! `registered_by` (the team's lead registers the workers and hands them
//! their tokens), and so does changing a setting. Until some agent holds a
//! token (tokens were just turned on), registering is open, so that the
//! first agent, the lead, can join. A token is issued by `agent-register`,
//! printed once; only its SHA-256 is stored, and the token never enters a
//! message, an event or an idempotency record. A name that holds a token
//! registers again with that token; it is unregistered with it, or with
//! the token of the agent that registered it (how a lead re-issues a lost
//! token: unregister, register anew). `agent-unregister` answers for a name
//! nobody registered itself.
//!
//! Messages agents read never teach a way around the rule: a refusal says
//! whose token to pass and where from, and that a registered agent (the
//! lead) registers new agents; the operator's way out, when every token is
//! lost, is in docs/cli.md ("Who may act as whom"). This module must never decide anything
//! else about a command: it answers "may this caller act as this agent",
//! "who vouches for this registration or settings change" and "does this
//! address reach a registered agent", and nothing more.

use std::collections::BTreeSet;

use crate::address::Address;
use crate::call::{self, Call};
use crate::command::Command;
use crate::error::{EngineError, Vouched};
use crate::ids::IdSource;
use crate::model::{Agent, AgentRegistration, AgentTokens, Settings};
use crate::store::{AgentQuery, Store};

use super::tx::Tx;

/// Most registered agents a suggestion looks at: the registry's bound on
/// what one command reads (a registry is a team, not a directory).
const CANDIDATES_MAX: usize = 10_000;

/// Most names a refusal suggests.
const SUGGESTIONS: usize = 3;

/// Who a call acts as (if its command acts as an agent), and the token
/// it carries.
#[derive(Clone)]
pub(super) struct Caller {
    agent: Option<String>,
    token: Option<String>,
    command: Command,
}

impl Caller {
    /// The caller of `call`.
    pub(super) fn of(call: &Call) -> Caller {
        Caller {
            agent: call.request.actor().map(str::to_owned),
            token: call.agent_token.clone(),
            command: call.request.command(),
        }
    }

    /// The token the call carries: the acting agent's, or the one that
    /// vouches for a registration or a settings change.
    pub(super) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The registry's own commands, which may name an agent nobody
    /// registered: `agent-register` is how a name joins (whether it may is
    /// [`Tx::registrar`]'s to say), `agent-unregister` answers
    /// `agent_not_found` for one itself.
    fn names_the_registry(&self) -> bool {
        matches!(
            self.command,
            Command::AgentRegister | Command::AgentUnregister
        )
    }
}

/// The setting that lets only registered agents act, if one does: its
/// name as a message gives it, and how the agent shows it is itself.
fn registered_only(settings: &Settings) -> Option<(&'static str, &'static str)> {
    if settings.agent_tokens == AgentTokens::Required {
        Some(("agent_tokens required", WITH_TOKEN))
    } else if settings.agent_registration == AgentRegistration::Required {
        Some(("agent_registration required", ""))
    } else {
        None
    }
}

/// Where an agent's token comes from, as refusals say it: the file and the
/// environment first (a command line is shown to every local user by `ps`).
const WITH_TOKEN: &str = ", with its token (from its file: --agent-token-file PATH or $INBOX_AGENT_TOKEN_FILE; or $INBOX_AGENT_TOKEN; `agent_token` in JSON)";

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// The engine's settings, once `caller` (if any) has shown that it may
    /// act as the agent it names: a registered one (when a setting lets
    /// only registered agents act), with its token (when tokens are
    /// required).
    pub(super) fn authenticate(
        &mut self,
        caller: Option<&Caller>,
    ) -> Result<Settings, EngineError> {
        let settings = self.store.settings()?.unwrap_or_default();
        let Some((caller, name)) = caller.and_then(|c| Some((c, c.agent.as_deref()?))) else {
            return Ok(settings);
        };
        let Some((setting, then)) = registered_only(&settings) else {
            return Ok(settings);
        };
        let Some(agent) = self.registered(name)? else {
            if caller.names_the_registry() {
                return Ok(settings);
            }
            let near = self.closest_agents(name)?;
            return Err(EngineError::AgentNotRegistered {
                agent: name.to_owned(),
                setting,
                then,
                closest: near.closest,
                known: near.known,
            });
        };
        if settings.agent_tokens == AgentTokens::Required {
            let own = check_token(&agent, caller);
            if own.is_err() && self.is_registrars_token(&agent, caller)? {
                return Ok(settings);
            }
            own?;
        }
        Ok(settings)
    }

    /// Whether `caller` unregisters `agent` with the token of the agent
    /// that registered it: a lead may take back a name it let in (to
    /// register it anew when its token is lost), nothing else.
    fn is_registrars_token(&mut self, agent: &Agent, caller: &Caller) -> Result<bool, EngineError> {
        let (Command::AgentUnregister, Some(registrar), Some(token)) =
            (caller.command, &agent.registered_by, caller.token())
        else {
            return Ok(false);
        };
        let Some(Agent {
            token_sha256: Some(stored),
            ..
        }) = self.registered(registrar)?
        else {
            return Ok(false);
        };
        Ok(same_digest(&stored, &call::sha256_hex(token.as_bytes())))
    }

    /// Who vouches for registering `name` (`before`: its record, if it is
    /// registered): when tokens are required and the name holds no token
    /// yet (it is new, or registered before tokens), the registered agent
    /// whose token the call carries, once any registered agent holds one.
    /// `None` when nobody needs to: tokens are off, the name's own token
    /// was checked ([`Tx::authenticate`]), or no agent holds a token yet,
    /// so that the first one (the team's lead) can join.
    pub(super) fn registrar(
        &mut self,
        settings: &Settings,
        name: &str,
        before: Option<&Agent>,
    ) -> Result<Option<String>, EngineError> {
        let holds_token = before.is_some_and(|a| a.token_sha256.is_some());
        if settings.agent_tokens == AgentTokens::Off || holds_token {
            return Ok(None);
        }
        self.voucher(Vouched::Registration {
            agent: name.to_owned(),
        })
    }

    /// Refuses a change of the settings (`changed`: the fields it changes,
    /// against `before`) while tokens are required, unless the call
    /// carries the token of a registered agent that has one (or no agent
    /// holds a token yet). Showing them changes nothing and needs none.
    pub(super) fn check_settings_change(
        &mut self,
        before: &Settings,
        changed: &[String],
    ) -> Result<(), EngineError> {
        if before.agent_tokens == AgentTokens::Off || changed.is_empty() {
            return Ok(());
        }
        self.voucher(Vouched::Settings {
            changed: changed.to_vec(),
        })
        .map(drop)
    }

    /// The registered agent whose token the call carries, for `act`; `None`
    /// when no registered agent holds a token yet. Looks at the registry
    /// as far as one command reads it ([`CANDIDATES_MAX`]): past that, an
    /// agent cannot vouch, and nobody is taken to hold no token.
    fn voucher(&mut self, act: Vouched) -> Result<Option<String>, EngineError> {
        let agents = self.store.agents(&AgentQuery {
            name: None,
            role: None,
            limit: CANDIDATES_MAX,
        })?;
        let whole = agents.len() < CANDIDATES_MAX;
        let given = self
            .agent_token
            .as_deref()
            .map(|token| call::sha256_hex(token.as_bytes()));
        let mut holders = false;
        for agent in agents {
            let Some(stored) = &agent.token_sha256 else {
                continue;
            };
            holders = true;
            if given
                .as_deref()
                .is_some_and(|given| same_digest(stored, given))
            {
                return Ok(Some(agent.name));
            }
        }
        match given {
            _ if !holders && whole => Ok(None),
            None => Err(EngineError::VouchRequired { act }),
            Some(_) => Err(EngineError::VouchInvalid { act }),
        }
    }

    /// Refuses an address that reaches no registered agent, when the
    /// settings send only to registered agents: an agent nobody registered,
    /// or a role (a pool or its broadcast) nobody holds. `broadcast` always
    /// reaches whoever is registered. `place` says where the address was
    /// written, for the message.
    pub(super) fn check_recipient(&mut self, place: &str, to: &Address) -> Result<(), EngineError> {
        let settings = self.store.settings()?.unwrap_or_default();
        if settings.agent_registration == AgentRegistration::Optional {
            return Ok(());
        }
        let (role, near) = match to {
            Address::Broadcast => return Ok(()),
            Address::Agent(name) => {
                if self.registered(name)?.is_some() {
                    return Ok(());
                }
                (None, self.closest_agents(name)?)
            }
            Address::Role(role) | Address::RoleBroadcast(role) => {
                let member = AgentQuery {
                    name: None,
                    role: Some(role.clone()),
                    limit: 1,
                };
                if !self.store.agents(&member)?.is_empty() {
                    return Ok(());
                }
                (Some(role.clone()), self.closest_roles(role)?)
            }
        };
        Err(EngineError::UnknownRecipient {
            place: place.to_owned(),
            address: to.to_string(),
            role,
            closest: near.closest,
            known: near.known,
        })
    }

    /// The registered agents' names closest to `name`.
    fn closest_agents(&mut self, name: &str) -> Result<Suggestions, EngineError> {
        let agents = self.store.agents(&AgentQuery {
            name: None,
            role: None,
            limit: CANDIDATES_MAX,
        })?;
        Ok(closest(name, agents.iter().map(|a| a.name.as_str())))
    }

    /// The roles registered agents hold closest to `role`, as addresses.
    fn closest_roles(&mut self, role: &str) -> Result<Suggestions, EngineError> {
        let agents = self.store.agents(&AgentQuery {
            name: None,
            role: None,
            limit: CANDIDATES_MAX,
        })?;
        let held: BTreeSet<&str> = agents
            .iter()
            .flat_map(|a| a.roles.iter().map(String::as_str))
            .collect();
        let near = closest(role, held);
        Ok(Suggestions {
            closest: near.closest.iter().map(|r| format!("role:{r}")).collect(),
            known: near.known,
        })
    }

    /// Gives `agent` a token if the settings require tokens and it has
    /// none: stores its hash on the agent and returns the token, to be
    /// shown this once.
    pub(super) fn issue_token(
        &mut self,
        settings: &Settings,
        agent: &mut Agent,
    ) -> Result<Option<String>, EngineError> {
        if settings.agent_tokens == AgentTokens::Off || agent.token_sha256.is_some() {
            return Ok(None);
        }
        let token = self.ids.secret().ok_or_else(|| {
            EngineError::internal(
                "this host has no secure random source, so it cannot issue agent tokens; \
                 register agents through one that has (the inbox command line)",
            )
        })?;
        agent.token_sha256 = Some(call::sha256_hex(token.as_bytes()));
        Ok(Some(token))
    }
}

/// Refuses `caller` unless it carries `agent`'s token. An agent registered
/// before tokens were required has none yet: registering it again gives
/// it one ([`Tx::registrar`] says who may), and is the only thing it may do
/// until then.
fn check_token(agent: &Agent, caller: &Caller) -> Result<(), EngineError> {
    let name = &agent.name;
    match (&agent.token_sha256, caller.token()) {
        (None, _) if caller.command == Command::AgentRegister => Ok(()),
        (None, _) => Err(EngineError::AgentTokenRequired {
            hint: "it has no token yet (it registered before tokens were required): \
                   registering it again issues one, which the team's lead does with its own token \
                   (only the first agent to hold a token registers without one)"
                .to_owned(),
            agent: name.clone(),
        }),
        (Some(_), None) => Err(EngineError::AgentTokenRequired {
            hint: format!(
                "pass the token `inbox agent register` printed for it from its file \
                 (--agent-token-file PATH or $INBOX_AGENT_TOKEN_FILE) or the environment \
                 ($INBOX_AGENT_TOKEN; `agent_token` in JSON); if {name}'s token is lost, \
                 the team's lead or the operator issues it a new one"
            ),
            agent: name.clone(),
        }),
        (Some(stored), Some(token)) if same_digest(stored, &call::sha256_hex(token.as_bytes())) => {
            Ok(())
        }
        (Some(_), Some(_)) => Err(EngineError::AgentTokenInvalid {
            agent: name.clone(),
        }),
    }
}

/// The names close to `wanted`, at most [`SUGGESTIONS`], closest first
/// (ties by name), and how many names there were. Close is an edit
/// distance of at most a third of `wanted`'s length (and at least 2),
/// where a swap of two neighbouring characters counts as one edit (`bbo`
/// is one from `bob`): a name further off is another name, not a typo. A
/// name's length apart from `wanted` is a lower bound of its distance, so
/// names that cannot be close, or beat the ones kept, are not measured:
/// the cost stays near linear in the registry's size.
fn closest<'a>(wanted: &str, names: impl IntoIterator<Item = &'a str>) -> Suggestions {
    let near = (wanted.len() / 3).max(2);
    let mut best: Vec<(usize, &str)> = Vec::with_capacity(SUGGESTIONS + 1);
    let mut known = 0;
    for name in names {
        known += 1;
        let bound = name.len().abs_diff(wanted.len());
        let worst = match best.last() {
            Some(&(d, _)) if best.len() == SUGGESTIONS => d,
            _ => near,
        };
        if bound > worst {
            continue;
        }
        let distance = strsim::osa_distance(wanted, name);
        if distance > near {
            continue;
        }
        let at = best.partition_point(|&(d, n)| (d, n) <= (distance, name));
        best.insert(at, (distance, name));
        best.truncate(SUGGESTIONS);
    }
    Suggestions {
        closest: best.into_iter().map(|(_, name)| name.to_owned()).collect(),
        known,
    }
}

/// What [`closest`] found.
struct Suggestions {
    closest: Vec<String>,
    known: usize,
}

/// Compares two hex digests in time that does not depend on where they
/// differ, so that timing says nothing about a stored digest.
fn same_digest(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(wanted: &str, names: &[&str]) -> Vec<String> {
        closest(wanted, names.iter().copied()).closest
    }

    #[test]
    fn a_swap_a_slip_or_a_case_is_close_and_another_name_is_not() {
        let team = ["alice", "bob", "bobby", "lead", "backend-worker-1"];
        assert_eq!(near("bbo", &team), ["bob"]);
        assert_eq!(near("Bob", &team), ["bob"]);
        assert_eq!(near("alcie", &team), ["alice"]);
        assert_eq!(near("backend-worker-2", &team), ["backend-worker-1"]);
        assert!(near("zed-the-stranger", &team).is_empty());
        assert!(near("bob", &[]).is_empty());
    }

    #[test]
    fn at_most_three_closest_first_then_by_name() {
        let team = ["w4", "w3", "w2", "w1", "w10", "w123"];
        assert_eq!(near("w0", &team), ["w1", "w10", "w2"]);
        let found = closest("w0", team.iter().copied());
        assert_eq!(found.known, 6);
    }

    #[test]
    fn a_large_registry_is_answered_with_a_bounded_list() {
        let names: Vec<String> = (0..CANDIDATES_MAX)
            .map(|i| format!("agent-{i:05}"))
            .collect();
        let found = closest("agent-0000", names.iter().map(String::as_str));
        assert_eq!(found.closest.len(), SUGGESTIONS);
        assert_eq!(found.known, CANDIDATES_MAX);
    }
}
