//! Decoding a JSON request (`{"command": "send", ...}`) into the command
//! table's [`Request`], with a refusal in the JSON contract's shape
//! ([`Response`]) that names the field and the number that failed. This
//! module must never check a value against a rule: that is the engine's.

use crate::command::{Command, Request};
use crate::error::EngineError;
use crate::response::Response;
use crate::vocabulary::Vocabulary as _;

impl Request {
    /// Decodes a JSON request. On failure, returns the error response to
    /// send back, naming the command when the JSON said which.
    pub fn from_json(json: &str) -> Result<Request, Box<Response>> {
        let value: serde_json::Value = serde_json::from_str(json)
            .map_err(|error| invalid(None, format!("request is not valid JSON: {error}")))?;
        Request::from_value(value)
    }

    /// Decodes a request already parsed as JSON; see [`Request::from_json`].
    pub fn from_value(mut value: serde_json::Value) -> Result<Request, Box<Response>> {
        let name = match value.get("command") {
            Some(serde_json::Value::String(name)) => name.clone(),
            _ => {
                return Err(invalid(
                    None,
                    "a request is a JSON object with a string \"command\" field, e.g. {\"command\":\"fetch\",\"agent\":\"worker\"}".into(),
                ));
            }
        };
        let Some(command) = Command::parse(&name) else {
            return Err(invalid(None, Command::unknown(&name)));
        };
        if let Some(object) = value.as_object_mut() {
            object.remove("command");
        }
        let numbers = field_numbers(&value);
        Request::decode_fields(command, value)
            .map_err(|message| invalid(Some(command), explain_numbers(message, &numbers)))
    }
}

/// The numbers a request gives outside its payloads (`lease_seconds`,
/// `artifacts[0].size_bytes`), by path, as written. Payload numbers are
/// kept exactly as written (serde_json's `arbitrary_precision`), which
/// leaves serde to say only "invalid number" when such a number does not
/// fit a field; these let the message say which number.
fn field_numbers(fields: &serde_json::Value) -> Vec<(String, String)> {
    let mut numbers = Vec::new();
    let Some(object) = fields.as_object() else {
        return numbers;
    };
    for (key, value) in object {
        match value {
            serde_json::Value::Number(n) => numbers.push((key.clone(), n.to_string())),
            serde_json::Value::Array(items) if key == "artifacts" => {
                for (i, item) in items.iter().enumerate() {
                    let Some(item) = item.as_object() else {
                        continue;
                    };
                    for (field, value) in item {
                        if let serde_json::Value::Number(n) = value {
                            numbers.push((format!("{key}[{i}].{field}"), n.to_string()));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    numbers
}

/// Rewrites serde's bare "invalid number" with the number and what the
/// field takes: every number field of a request is a whole number from 0.
fn explain_numbers(message: String, numbers: &[(String, String)]) -> String {
    let Some((path, _)) = message
        .strip_prefix('`')
        .and_then(|m| m.split_once("`: invalid number"))
    else {
        return message;
    };
    match numbers.iter().find(|(p, _)| p == path) {
        Some((_, number)) => format!(
            "`{path}`: {number} is not a number this field takes: a whole number from 0, within its limit"
        ),
        None => message,
    }
}

fn invalid(command: Option<Command>, message: String) -> Box<Response> {
    Box::new(Response::failure(
        command.map(|c| c.as_str().to_owned()),
        EngineError::InvalidRequest { message },
    ))
}
