//! [`Response`]: the outcome of one command, as the JSON contract writes
//! it (`{"ok": true, "command": ..., ...}` or `{"ok": false, ...,
//! "error": {...}}`) and reads it back. It wraps the command table's
//! [`Output`]; the request and output types themselves are [`crate::wire`]'s.
//! This module must never decide an outcome: it only carries one.

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use crate::command::Output;
use crate::error::{EngineError, ErrorCode};

/// The outcome of one command, serialized as the JSON contract.
// One response is built per command and moved once or twice; boxing the
// success would cost an allocation per command for no gain.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// `{"ok": true, "command": ..., ...}`
    Success(Output),
    /// `{"ok": true, "command": ..., ..., "replayed": true}`: a write retried
    /// with its idempotency key, answered with its first outcome; nothing
    /// was applied this time.
    Replayed(Output),
    /// `{"ok": false, "command": ..., "error": {...}}`
    Failure {
        /// The command, when known (a request that did not decode may not say).
        command: Option<String>,
        /// What went wrong.
        error: EngineError,
    },
}

impl Response {
    /// A failure response.
    pub fn failure(command: Option<String>, error: EngineError) -> Response {
        Response::Failure { command, error }
    }

    /// True for a success, including the "no matching work" ones and
    /// replays.
    pub fn is_ok(&self) -> bool {
        self.output().is_some()
    }

    /// The output of a success (or a replay).
    pub fn output(&self) -> Option<&Output> {
        match self {
            Response::Success(output) | Response::Replayed(output) => Some(output),
            Response::Failure { .. } => None,
        }
    }

    /// The error of a failure.
    pub fn error(&self) -> Option<&EngineError> {
        match self {
            Response::Success(_) | Response::Replayed(_) => None,
            Response::Failure { error, .. } => Some(error),
        }
    }

    /// The error code of a failure.
    pub fn error_code(&self) -> Option<ErrorCode> {
        self.error().map(EngineError::code)
    }

    /// The process exit code: 0 success, 10 when a command that looks for
    /// something found nothing (empty `fetch`, `claim` with `next` and
    /// nothing to claim, a wait that did not wake: [`Found`]), else the
    /// error's class.
    pub fn exit_code(&self) -> u8 {
        match self {
            Response::Success(output) | Response::Replayed(output) if output.found_nothing() => 10,
            Response::Success(_) | Response::Replayed(_) => 0,
            Response::Failure { error, .. } => error.exit_code(),
        }
    }

    /// Reads back a response in the JSON contract, as another engine wrote
    /// it (a plugin in a sandbox, another process). Successes come back as
    /// their typed [`Output`]; failures as [`EngineError::Relayed`] with the
    /// same code and message, so `to_json` of the result is the input again.
    ///
    /// # Errors
    ///
    /// Text that is not a response of this wire version, with what is wrong.
    pub fn from_json(json: &str) -> Result<Response, String> {
        #[derive(Deserialize)]
        struct Envelope {
            ok: bool,
            #[serde(default)]
            replayed: bool,
            #[serde(default)]
            command: Option<String>,
            #[serde(default)]
            error: Option<ErrorBodyOwned>,
        }
        #[derive(Deserialize)]
        struct ErrorBodyOwned {
            code: String,
            message: String,
        }
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
        let envelope = Envelope::deserialize(&value).map_err(|e| format!("not a response: {e}"))?;
        if envelope.ok {
            let mut value = value;
            if let Some(object) = value.as_object_mut() {
                object.remove("replayed");
            }
            let output = Output::deserialize(value).map_err(|e| format!("bad output: {e}"))?;
            return Ok(if envelope.replayed {
                Response::Replayed(output)
            } else {
                Response::Success(output)
            });
        }
        let error = envelope
            .error
            .ok_or_else(|| "a failure without an `error` object".to_owned())?;
        let code = ErrorCode::parse(&error.code)
            .ok_or_else(|| format!("unknown error code `{}`", error.code))?;
        Ok(Response::failure(
            envelope.command,
            EngineError::Relayed {
                code,
                message: error.message,
            },
        ))
    }

    /// The JSON contract on one line.
    pub fn to_json(&self) -> String {
        // Serializing these types cannot fail: every map key is a string.
        serde_json::to_string(self).unwrap_or_else(|e| internal_error_json(&e))
    }

    /// The JSON contract, indented for people.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| internal_error_json(&e))
    }
}

fn internal_error_json(error: &serde_json::Error) -> String {
    serde_json::json!({
        "ok": false,
        "command": null,
        "error": {"code": "internal_error", "message": format!("could not serialize the response: {error}")},
    })
    .to_string()
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Response::Success(output) => {
                #[derive(Serialize)]
                struct Success<'a> {
                    ok: bool,
                    #[serde(flatten)]
                    output: &'a Output,
                }
                Success { ok: true, output }.serialize(serializer)
            }
            Response::Replayed(output) => {
                #[derive(Serialize)]
                struct Replayed<'a> {
                    ok: bool,
                    #[serde(flatten)]
                    output: &'a Output,
                    replayed: bool,
                }
                Replayed {
                    ok: true,
                    output,
                    replayed: true,
                }
                .serialize(serializer)
            }
            Response::Failure { command, error } => {
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("ok", &false)?;
                map.serialize_entry("command", command)?;
                map.serialize_entry(
                    "error",
                    &ErrorBody {
                        code: error.code().as_str(),
                        message: error.to_string(),
                    },
                )?;
                map.end()
            }
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: String,
}
