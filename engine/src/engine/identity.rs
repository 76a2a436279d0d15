//! Agent tokens: when the database requires them (the `agent_tokens`
//! setting), a command that acts as a registered agent must carry that
//! agent's token, so that one agent cannot act as another by mistake or
//! because a prompt told it to.
//!
//! What is checked: every write and every wait whose request names an
//! acting agent (the command table's `acting` field) that is registered.
//! Reads are not: they change nothing, and whoever can open the file can
//! read it anyway. Names nobody registered have no identity to protect.
//! `agent-register` issues an agent its token when it has none and prints
//! it once; only its SHA-256 is stored, and the token never enters a
//! message, an event or an idempotency record. This module must never
//! decide anything else about a command: it answers "may this caller act
//! as this agent" and nothing more.

use crate::call::{self, Call};
use crate::command::Request;
use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::{Agent, AgentTokens, Settings};
use crate::store::Store;

use super::tx::Tx;

/// Who a call acts as, and the token it carries.
pub(super) struct Caller {
    agent: String,
    token: Option<String>,
    /// An `agent-register`: the one command an agent without a token may
    /// run while tokens are required (it gets one).
    registering: bool,
}

impl Caller {
    /// The caller of `call`, if its command acts as an agent.
    pub(super) fn of(call: &Call) -> Option<Caller> {
        Some(Caller {
            agent: call.request.actor()?.to_owned(),
            token: call.agent_token.clone(),
            registering: matches!(call.request, Request::AgentRegister(_)),
        })
    }
}

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// The engine's settings, once `caller` (if any) has shown that it may
    /// act as the agent it names.
    pub(super) fn authenticate(
        &mut self,
        caller: Option<&Caller>,
    ) -> Result<Settings, EngineError> {
        let settings = self.store.settings()?.unwrap_or_default();
        let Some(caller) = caller else {
            return Ok(settings);
        };
        if settings.agent_tokens == AgentTokens::Off {
            return Ok(settings);
        }
        let Some(agent) = self.registered(&caller.agent)? else {
            return Ok(settings);
        };
        let name = agent.name;
        match (agent.token_sha256, &caller.token) {
            (None, _) if caller.registering => Ok(settings),
            (None, _) => Err(EngineError::AgentTokenRequired {
                hint: format!(
                    "it has no token yet (it registered before tokens were required); run `inbox agent register --agent {name}` once to get one"
                ),
                agent: name,
            }),
            (Some(_), None) => Err(EngineError::AgentTokenRequired {
                hint: format!(
                    "pass the token `inbox agent register` printed for it with --agent-token or $INBOX_AGENT_TOKEN (`agent_token` in JSON); \
                     if it is lost, an operator turns tokens off (`inbox settings --agent-tokens off`), runs `inbox agent unregister --agent {name}`, \
                     turns them on again and the agent registers anew"
                ),
                agent: name,
            }),
            (Some(stored), Some(token))
                if same_digest(&stored, &call::sha256_hex(token.as_bytes())) =>
            {
                Ok(settings)
            }
            (Some(_), Some(_)) => Err(EngineError::AgentTokenInvalid { agent: name }),
        }
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
                 turn them off with `inbox settings --agent-tokens off`",
            )
        })?;
        agent.token_sha256 = Some(call::sha256_hex(token.as_bytes()));
        Ok(Some(token))
    }
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
