//! Addresses: who a thread or a message is for, and the one grammar that
//! names them wherever a recipient is named (`send --to`, `reply --to`, an
//! orch assignee).
//!
//! | Written              | Means                                               |
//! |----------------------|-----------------------------------------------------|
//! | `NAME`, `agent:NAME` | the agent NAME (stored as `NAME`)                   |
//! | `role:NAME`          | a pool: any member of role NAME may claim the work  |
//! | `broadcast`          | every agent, as information, never as work          |
//! | `broadcast:role:NAME`| every member of role NAME, as information           |
//!
//! Names follow the agent-name alphabet (no `:`), so an address is never
//! mistaken for a name. The canonical form is what the store keeps in
//! `assigned_to` and `to_agent`. This module parses and prints addresses and
//! lists an agent's own; which address may claim what is the engine's rule
//! (`engine::agents`), and it must never touch a store.

use std::fmt;

use crate::error::EngineError;
use crate::validate;

/// The grammar, as error messages and help text state it.
pub const ADDRESS_GRAMMAR: &str =
    "an agent name (or `agent:NAME`), `role:NAME`, `broadcast` or `broadcast:role:NAME`";

pub use crate::validate::BROADCAST;

/// A parsed address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Address {
    /// One agent.
    Agent(String),
    /// A pool: any member may fetch and claim.
    Role(String),
    /// Every registered agent, as information.
    Broadcast,
    /// Every member of a role, as information.
    RoleBroadcast(String),
}

impl Address {
    /// Parses `text` given in `field`, refusing anything outside the grammar.
    pub fn parse(field: &str, text: &str) -> Result<Address, EngineError> {
        let name = |value: &str| -> Result<String, EngineError> {
            validate::agent(field, &Some(value.to_owned())).map(str::to_owned)
        };
        if text == BROADCAST {
            return Ok(Address::Broadcast);
        }
        if let Some(role) = text.strip_prefix("broadcast:role:") {
            return Ok(Address::RoleBroadcast(role_name(field, role)?));
        }
        if let Some(role) = text.strip_prefix("role:") {
            return Ok(Address::Role(role_name(field, role)?));
        }
        if let Some(agent) = text.strip_prefix("agent:") {
            return Ok(Address::Agent(name(agent)?));
        }
        if text.contains(':') {
            return Err(EngineError::invalid(
                field,
                format!("`{text}` is not an address; write {ADDRESS_GRAMMAR}"),
            ));
        }
        Ok(Address::Agent(name(text)?))
    }

    /// Reads a stored (canonical) address. Anything that does not parse is
    /// taken as an agent name: databases written before addresses existed
    /// hold only names.
    pub fn stored(text: &str) -> Address {
        Address::parse("address", text).unwrap_or_else(|_| Address::Agent(text.to_owned()))
    }

    /// True for addresses that name work someone may claim (an agent or a
    /// role), false for broadcasts, which are information.
    pub fn is_work(&self) -> bool {
        matches!(self, Address::Agent(_) | Address::Role(_))
    }
}

/// An address work can be given to (an agent or a role's pool), as
/// stored: an orch assignee. A broadcast is refused: it is information.
pub fn work_address(field: &str, value: &Option<String>) -> Result<String, EngineError> {
    let text = validate::required(
        field,
        value,
        "give an agent name, e.g. backend-worker, or role:NAME",
    )?;
    let address = Address::parse(field, text)?;
    if !address.is_work() {
        return Err(EngineError::invalid(
            field,
            format!(
                "`{text}` is a broadcast, which is information; give work to an agent name or role:NAME"
            ),
        ));
    }
    Ok(address.to_string())
}

/// An optional address, as stored (`agent:NAME` becomes `NAME`): a filter
/// such as `list --assigned-to role:NAME`.
pub fn optional_address(
    field: &str,
    value: &Option<String>,
) -> Result<Option<String>, EngineError> {
    value
        .as_deref()
        .map(|text| Address::parse(field, text).map(|a| a.to_string()))
        .transpose()
}

/// A role name: the agent-name alphabet.
fn role_name(field: &str, role: &str) -> Result<String, EngineError> {
    role_checked(field, role).map(str::to_owned)
}

/// Checks a role name (as given to `agent register --role`).
pub fn role_checked<'a>(field: &str, role: &'a str) -> Result<&'a str, EngineError> {
    if role.is_empty() {
        return Err(EngineError::missing(
            field,
            "name the role, e.g. role:reviewer",
        ));
    }
    validate::agent(field, &Some(role.to_owned()))?;
    Ok(role)
}

impl fmt::Display for Address {
    /// The canonical form, as stored.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Agent(name) => f.write_str(name),
            Address::Role(role) => write!(f, "role:{role}"),
            Address::Broadcast => f.write_str(BROADCAST),
            Address::RoleBroadcast(role) => write!(f, "broadcast:role:{role}"),
        }
    }
}

/// The addresses that reach an agent with these roles: its name and its
/// roles (work it may claim), then, with `information`, the broadcasts.
pub fn addresses_of(name: &str, roles: &[String], information: bool) -> Vec<String> {
    let mut out = vec![name.to_owned()];
    out.extend(roles.iter().map(|r| Address::Role(r.clone()).to_string()));
    if information {
        out.push(BROADCAST.to_owned());
        out.extend(
            roles
                .iter()
                .map(|r| Address::RoleBroadcast(r.clone()).to_string()),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form_and_prints_it_back_canonically() {
        for (text, canonical) in [
            ("alice", "alice"),
            ("agent:alice", "alice"),
            ("role:reviewer", "role:reviewer"),
            ("broadcast", "broadcast"),
            ("broadcast:role:reviewer", "broadcast:role:reviewer"),
        ] {
            let address = Address::parse("to_agent", text).unwrap();
            assert_eq!(address.to_string(), canonical, "{text}");
        }
    }

    #[test]
    fn refuses_what_the_grammar_does_not_name() {
        for text in [
            "team:x",
            "role:",
            "role:a:b",
            "agent:",
            "agent:role:x",
            "broadcast:x",
            "broadcast:role:",
            " alice",
            "inbox",
        ] {
            let error = Address::parse("to_agent", text).unwrap_err();
            assert_eq!(
                error.code().as_str(),
                if text.ends_with(':') {
                    "missing_field"
                } else {
                    "invalid_value"
                },
                "{text}"
            );
        }
    }
}
