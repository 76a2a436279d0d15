//! The server's tools, made from the command table: one tool per command
//! that [`guidance::exposure`] calls a tool, named like the command with
//! `-` read as `_` (`wait-reply` is `wait_reply`), described by the
//! table's doc lines and the guidance, and taking exactly the fields of the
//! command's request, whose JSON Schema comes from the request type itself
//! (the engine's `schema` feature). Then seed 004's mailbox tools
//! ([`seed`]).
//!
//! A call becomes a request the way every host makes one: the arguments are
//! the request's JSON fields, decoded by the engine (so a bad argument is
//! refused with the engine's own `invalid_request` and message). Before
//! that, the acting agent's field is filled in with the server's `--agent`
//! (a call naming another agent is refused), a wait's timeout is capped, and
//! artifacts named by path are described as `--artifact` describes them.
//! This module must never run a request or apply an inbox rule.

use inbox_engine::call::{AGENT_TOKEN, Envelope, IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_MAX_BYTES};
use inbox_engine::wire::*;
use inbox_engine::{Call, Command, Effect, EngineError, Response};
use serde_json::Value;

use crate::guidance::{self, Exposure, WAIT_CAP_SECONDS};
use crate::seed::{self, SeedTool};

/// A JSON object: tool arguments, input schemas.
pub(crate) use crate::schema::{Object, schema_of};

/// How a tool's calls become requests.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mapping {
    /// A command of the table: the arguments are its request's fields.
    Command(Command),
    /// One of seed 004's mailbox tools.
    Seed(SeedTool),
}

/// One tool as the server lists it.
#[derive(Clone, Debug)]
pub(crate) struct ToolSpec {
    /// Its name.
    pub(crate) name: String,
    /// What it does and when to use it.
    pub(crate) description: String,
    /// Its input schema.
    pub(crate) schema: Object,
    /// How a call becomes a request.
    pub(crate) mapping: Mapping,
}

impl ToolSpec {
    /// Whether a call may block (a wait): it runs with progress and can be
    /// cancelled while it waits.
    pub(crate) fn waits(&self) -> bool {
        match self.mapping {
            Mapping::Command(command) => command.effect() == Effect::Wait,
            Mapping::Seed(_) => false,
        }
    }

    /// The call (request and envelope) a call with `arguments` makes,
    /// acting as `agent` with its token, or the refusal to answer with. An
    /// `idempotency_key` argument is the envelope's, on every tool; an
    /// `agent_token` argument is ignored: the server's token is the only
    /// one its calls carry.
    pub(crate) fn request(
        &self,
        agent: &str,
        agent_token: Option<&str>,
        mut arguments: Object,
    ) -> Result<Call, Box<Response>> {
        arguments.remove(AGENT_TOKEN);
        let mut call = match self.mapping {
            Mapping::Command(command) => command_request(command, agent, arguments)?,
            Mapping::Seed(tool) => {
                let envelope = Envelope {
                    idempotency_key: arguments.remove(IDEMPOTENCY_KEY),
                    agent_token: None,
                };
                envelope.around(seed::request(tool, agent, arguments)?)?
            }
        };
        call.agent_token = agent_token.map(str::to_owned);
        Ok(call)
    }
}

/// Every tool: the commands' in table order, then seed 004's.
pub(crate) fn tools() -> Vec<ToolSpec> {
    let commands = Command::ALL.iter().filter_map(|&command| {
        let Exposure::Tool { when } = guidance::exposure(command) else {
            return None;
        };
        let mut schema = request_schema(command);
        if let Some(field) = command.acting_field() {
            remove_property(&mut schema, field);
        }
        let mut description = format!("{}\n\nWhen to use it: {when}", command.description());
        if takes_key(command) {
            add_idempotency_key(&mut schema);
        }
        if command.effect() == Effect::Wait {
            cap_timeout(&mut schema);
            description.push(' ');
            description.push_str(&guidance::waiting());
        }
        description.push_str("\n\n");
        description.push_str(guidance::ANSWERS);
        Some(ToolSpec {
            name: tool_name(command),
            description,
            schema,
            mapping: Mapping::Command(command),
        })
    });
    let seeds = seed::TOOLS.iter().map(|&tool| {
        let mut schema = tool.schema();
        if tool.writes() {
            add_idempotency_key(&mut schema);
        }
        ToolSpec {
            name: tool.name().to_owned(),
            description: format!("{}\n\n{}", tool.description(), guidance::ANSWERS),
            schema,
            mapping: Mapping::Seed(tool),
        }
    });
    commands.chain(seeds).collect()
}

/// A command's tool name: its wire name with `-` read as `_`, since tool
/// names are identifiers to many runtimes.
pub(crate) fn tool_name(command: Command) -> String {
    command.as_str().replace('-', "_")
}

/// Generates [`request_schema`] from the command table: one arm per
/// command, the schema of its request type.
macro_rules! request_schemas {
    ($({
        docs: [$($doc:tt)+],
        variant: $variant:ident,
        name: $name:tt,
        handler: $handler:ident,
        js: [$($js:ident)+],
        request: $request:ident,
        $($rest:tt)*
    })+) => {
        /// The input schema of `command`'s request.
        fn request_schema(command: Command) -> Object {
            match command { $(Command::$variant => schema_of::<$request>(),)+ }
        }
    };
}

inbox_engine::for_each_command!(request_schemas);

/// Whether a command's tool takes an idempotency key: the writes that run
/// in one engine transaction (the engine refuses a key anywhere else).
fn takes_key(command: Command) -> bool {
    (command.effect() == Effect::Write || command.writes_if().is_some())
        && !command.opens_own_transactions()
}

/// Adds the envelope's `idempotency_key` to a writing tool's schema.
fn add_idempotency_key(schema: &mut Object) {
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert(
            IDEMPOTENCY_KEY.into(),
            serde_json::json!({
                "type": "string",
                "maxLength": IDEMPOTENCY_KEY_MAX_BYTES,
                "description": "Makes the call safe to retry: a call repeated with the same key and the same arguments returns its first result (with \"replayed\": true) and changes nothing. Use a fresh key (e.g. a UUID) for each new write.",
            }),
        );
    }
}

fn remove_property(schema: &mut Object, field: &str) {
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.remove(field);
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|name| name != field);
    }
}

/// States the waiting tools' cap in their schema, so that a client that
/// checks arguments knows it (the server caps a larger value anyway).
fn cap_timeout(schema: &mut Object) {
    let Some(Value::Object(properties)) = schema.get_mut("properties") else {
        return;
    };
    if let Some(Value::Object(timeout)) = properties.get_mut("timeout_seconds") {
        timeout.insert("maximum".into(), WAIT_CAP_SECONDS.into());
        timeout.insert("default".into(), WAIT_CAP_SECONDS.into());
        timeout.insert(
            "description".into(),
            format!(
                "How long to wait before answering woke: false (default and most {WAIT_CAP_SECONDS}; a larger value waits {WAIT_CAP_SECONDS})."
            )
            .into(),
        );
    }
}

/// The request a call of a command's tool makes.
fn command_request(
    command: Command,
    agent: &str,
    mut arguments: Object,
) -> Result<Call, Box<Response>> {
    let refuse =
        |error: EngineError| Box::new(Response::failure(Some(command.as_str().into()), error));
    let acts_as = format!("this MCP server acts as `{agent}` (inbox mcp --agent {agent})");
    inbox_host_native::hosted::act_as(command, agent, &mut arguments, &acts_as).map_err(refuse)?;
    if command.effect() == Effect::Wait {
        cap_wait(&mut arguments);
    }
    describe_artifacts(&mut arguments);
    arguments.insert("command".into(), command.as_str().into());
    Call::from_value(Value::Object(arguments))
}

/// A wait waits at most [`WAIT_CAP_SECONDS`], and that long when the call
/// does not say. Anything but a whole number is left for the engine to
/// refuse.
fn cap_wait(arguments: &mut Object) {
    let capped = match arguments.get("timeout_seconds") {
        None | Some(Value::Null) => WAIT_CAP_SECONDS,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(seconds) => seconds.min(WAIT_CAP_SECONDS),
            None => return,
        },
        Some(_) => return,
    };
    arguments.insert("timeout_seconds".into(), capped.into());
}

/// Artifacts given by path alone get the absolute path, size and digest
/// this host can see, as `--artifact PATH` records them; an artifact that
/// says any of those is passed on as given.
fn describe_artifacts(arguments: &mut Object) {
    let Some(Value::Array(artifacts)) = arguments.get_mut("artifacts") else {
        return;
    };
    for artifact in artifacts {
        let Value::Object(artifact) = artifact else {
            continue;
        };
        let described = ["absolute_path", "size_bytes", "sha256"]
            .iter()
            .any(|field| artifact.contains_key(*field));
        let Some(Value::String(path)) = artifact.get("path") else {
            continue;
        };
        if described {
            continue;
        }
        let mut notes = Vec::new();
        let facts = inbox_host_native::artifact::describe_artifact(path, &mut notes);
        for note in notes {
            crate::log(&format!("note: {note}"));
        }
        if let Some(absolute) = facts.absolute_path {
            artifact.insert("absolute_path".into(), absolute.into());
        }
        if let Some(size) = facts.size_bytes {
            artifact.insert("size_bytes".into(), size.into());
        }
        if let Some(digest) = facts.sha256 {
            artifact.insert("sha256".into(), digest.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tool's schema is an object schema, self-contained, and has no
    /// field for the acting agent; every acting field the command table
    /// names is a real field of the request (so renaming one fails here).
    #[test]
    fn schemas_are_self_contained_and_leave_out_the_acting_agent() {
        for tool in tools() {
            let text = serde_json::to_string(&tool.schema).unwrap_or_default();
            assert_eq!(
                tool.schema.get("type"),
                Some(&Value::from("object")),
                "{}",
                tool.name
            );
            assert!(!text.contains("$ref"), "{}: {text}", tool.name);
            if let Mapping::Command(command) = tool.mapping
                && let Some(field) = command.acting_field()
            {
                let full = request_schema(command);
                assert!(
                    full["properties"].get(field).is_some(),
                    "{}: {field}",
                    tool.name
                );
                assert!(
                    tool.schema["properties"].get(field).is_none(),
                    "{}",
                    tool.name
                );
            }
        }
    }

    #[test]
    fn tool_names_are_unique_identifiers() {
        let names: Vec<String> = tools().into_iter().map(|t| t.name).collect();
        for name in &names {
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}"
            );
            assert_eq!(names.iter().filter(|n| *n == name).count(), 1, "{name}");
        }
    }
}
