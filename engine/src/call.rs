//! [`Call`]: a request as a host passes it, the command with its envelope.
//!
//! The envelope holds what is about the call rather than the command: today
//! the idempotency key (`idempotency_key`), which makes a retried write
//! return its first outcome instead of applying twice. On the wire the
//! envelope's fields sit beside the command's own
//! (`{"command":"send","idempotency_key":"k1",...}`), so every host (the
//! CLI's `--idempotency-key`, the JavaScript methods, the MCP tools, the
//! engine component) passes them the same way. Which commands take a key
//! and what a replay returns are the engine's rules; this module only
//! decodes and fingerprints.

use sha2::{Digest, Sha256};

use crate::command::{Effect, Request};
use crate::error::EngineError;
use crate::validate;
use crate::wire::Response;

/// The envelope field that carries an idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency_key";

/// Longest idempotency key, in bytes.
pub const IDEMPOTENCY_KEY_MAX_BYTES: usize = 128;

/// A request and its envelope.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The command.
    pub request: Request,
    /// A retried write with this key returns its first outcome (see the
    /// engine's `idempotent` step).
    pub idempotency_key: Option<String>,
}

impl From<Request> for Call {
    fn from(request: Request) -> Call {
        Call {
            request,
            idempotency_key: None,
        }
    }
}

impl Call {
    /// Decodes a JSON call: a request whose object may also hold the
    /// envelope's fields. On failure, the error response to send back.
    pub fn from_json(json: &str) -> Result<Call, Box<Response>> {
        let value: serde_json::Value = serde_json::from_str(json).map_err(|error| {
            Box::new(Response::failure(
                None,
                EngineError::InvalidRequest {
                    message: format!("request is not valid JSON: {error}"),
                },
            ))
        })?;
        Call::from_value(value)
    }

    /// Decodes a call already parsed as JSON; see [`Call::from_json`].
    pub fn from_value(mut value: serde_json::Value) -> Result<Call, Box<Response>> {
        let key = value
            .as_object_mut()
            .and_then(|object| object.remove(IDEMPOTENCY_KEY));
        let request = Request::from_value(value)?;
        Call::with_key(request, key)
    }

    /// `request` with the envelope's key as JSON gave it (absent, `null`
    /// or a string; anything else is refused as the request's).
    pub fn with_key(
        request: Request,
        key: Option<serde_json::Value>,
    ) -> Result<Call, Box<Response>> {
        let idempotency_key = match key {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(key)) => Some(key),
            Some(other) => {
                return Err(Box::new(Response::failure(
                    Some(request.command().as_str().to_owned()),
                    EngineError::InvalidRequest {
                        message: format!(
                            "`{IDEMPOTENCY_KEY}`: expected a string, got {}",
                            validate::json_type(&other)
                        ),
                    },
                )));
            }
        };
        Ok(Call {
            request,
            idempotency_key,
        })
    }

    /// Refuses an envelope the request cannot take: an idempotency key on
    /// anything but a write that runs in one engine transaction (reads and
    /// waits change nothing, `init` and `sweep` are safe to repeat), or a
    /// key that is blank, has control characters or is too long.
    pub fn check(&self) -> Result<(), EngineError> {
        let Some(key) = &self.idempotency_key else {
            return Ok(());
        };
        let command = self.request.command();
        if self.request.effect() != Effect::Write || command.opens_own_transactions() {
            return Err(EngineError::invalid(
                IDEMPOTENCY_KEY,
                format!(
                    "only applies to writes; `{command}` is safe to repeat as it is, leave the key out"
                ),
            ));
        }
        if key.trim().is_empty() || key.chars().any(char::is_control) {
            return Err(EngineError::invalid(
                IDEMPOTENCY_KEY,
                "must be visible text without control characters, e.g. a UUID",
            ));
        }
        if key.len() > IDEMPOTENCY_KEY_MAX_BYTES {
            return Err(EngineError::TooLong {
                field: IDEMPOTENCY_KEY.to_owned(),
                actual: Some(key.len()),
                limit: IDEMPOTENCY_KEY_MAX_BYTES,
                unit: "bytes",
            });
        }
        Ok(())
    }

    /// The JSON of the call: the request's, with the envelope's fields.
    pub fn to_value(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(&self.request).unwrap_or_default();
        if let (Some(key), Some(object)) = (&self.idempotency_key, value.as_object_mut()) {
            object.insert(IDEMPOTENCY_KEY.into(), key.clone().into());
        }
        value
    }
}

/// The SHA-256 of a request's canonical JSON (its decoded fields, so two
/// spellings of the same request agree), lowercase hex: what an
/// idempotency key is checked against on a retry.
pub fn fingerprint(request: &Request) -> String {
    let json = serde_json::to_vec(request).unwrap_or_default();
    Sha256::digest(&json)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
