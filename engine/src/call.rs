//! [`Call`]: a request as a host passes it, the command with its envelope.
//!
//! The envelope holds what is about the call rather than the command: the
//! idempotency key (`idempotency_key`), which makes a retried write return
//! its first outcome instead of applying twice, and the acting agent's token
//! (`agent_token`), its proof of identity when the database requires tokens.
//! On the wire the envelope's fields sit beside the command's own
//! (`{"command":"send","idempotency_key":"k1",...}`), so every host (the
//! CLI's `--idempotency-key` and `--agent-token`, the JavaScript methods, the
//! MCP tools, the engine component) passes them the same way. Which
//! commands take a key, what a replay returns and when a token is needed are
//! the engine's rules; this module only decodes and fingerprints.

use sha2::{Digest, Sha256};

use crate::command::{Effect, Request};
use crate::error::EngineError;
use crate::response::Response;

/// The envelope field that carries an idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency_key";

/// Longest idempotency key, in bytes.
pub const IDEMPOTENCY_KEY_MAX_BYTES: usize = 128;

/// The envelope field that carries the acting agent's token; also the
/// output field `agent-register` shows a new token in, once.
pub const AGENT_TOKEN: &str = "agent_token";

/// Longest agent token accepted, in bytes (inbox's are 68).
pub const AGENT_TOKEN_MAX_BYTES: usize = 256;

/// A request and its envelope.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The command.
    pub request: Request,
    /// A retried write with this key returns its first outcome (see the
    /// engine's `idempotent` step).
    pub idempotency_key: Option<String>,
    /// The acting agent's token (see the engine's `identity` step); a
    /// call that acts as nobody ignores it.
    pub agent_token: Option<String>,
}

impl From<Request> for Call {
    fn from(request: Request) -> Call {
        Call {
            request,
            idempotency_key: None,
            agent_token: None,
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
        let envelope = Envelope::take(&mut value);
        let request = Request::from_value(value)?;
        envelope.around(request)
    }

    /// Refuses an envelope the request cannot take: an idempotency key on
    /// anything but a write that runs in one engine transaction (reads and
    /// waits change nothing, `init` and `sweep` are safe to repeat), or a
    /// key or token that is blank, has control characters or is too long.
    /// Never quotes the token.
    pub fn check(&self) -> Result<(), EngineError> {
        if let Some(token) = &self.agent_token {
            visible_text(
                AGENT_TOKEN,
                token,
                AGENT_TOKEN_MAX_BYTES,
                "as `agent register` printed it",
            )?;
        }
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
        visible_text(
            IDEMPOTENCY_KEY,
            key,
            IDEMPOTENCY_KEY_MAX_BYTES,
            "e.g. a UUID",
        )
    }

    /// The JSON of the call: the request's, with the envelope's fields.
    pub fn to_value(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(&self.request).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            let fields = [
                (IDEMPOTENCY_KEY, &self.idempotency_key),
                (AGENT_TOKEN, &self.agent_token),
            ];
            for (field, given) in fields {
                if let Some(given) = given {
                    object.insert(field.into(), given.clone().into());
                }
            }
        }
        value
    }
}

/// The envelope's fields as JSON gave them, before the request is decoded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Envelope {
    /// `idempotency_key`, as given.
    pub idempotency_key: Option<serde_json::Value>,
    /// `agent_token`, as given.
    pub agent_token: Option<serde_json::Value>,
}

impl Envelope {
    /// Takes the envelope's fields out of a JSON call, leaving the request.
    pub fn take(value: &mut serde_json::Value) -> Envelope {
        let Some(object) = value.as_object_mut() else {
            return Envelope::default();
        };
        Envelope {
            idempotency_key: object.remove(IDEMPOTENCY_KEY),
            agent_token: object.remove(AGENT_TOKEN),
        }
    }

    /// `request` with this envelope. Each field may be absent, `null` or a
    /// string; anything else is refused as the request's.
    pub fn around(self, request: Request) -> Result<Call, Box<Response>> {
        let text = |field: &str, given: Option<serde_json::Value>| match given {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(Box::new(Response::failure(
                Some(request.command().as_str().to_owned()),
                EngineError::InvalidRequest {
                    message: format!(
                        "`{field}`: expected a string, got {}",
                        crate::model::json_type(&other)
                    ),
                },
            ))),
        };
        let idempotency_key = text(IDEMPOTENCY_KEY, self.idempotency_key)?;
        let agent_token = text(AGENT_TOKEN, self.agent_token)?;
        Ok(Call {
            request,
            idempotency_key,
            agent_token,
        })
    }
}

/// Refuses an envelope field that is blank, has control characters or is
/// over `limit` bytes.
fn visible_text(field: &str, text: &str, limit: usize, example: &str) -> Result<(), EngineError> {
    if text.trim().is_empty() || text.chars().any(char::is_control) {
        return Err(EngineError::invalid(
            field,
            format!("must be visible text without control characters, {example}"),
        ));
    }
    if text.len() > limit {
        return Err(EngineError::TooLong {
            field: field.to_owned(),
            actual: Some(text.len()),
            limit,
            unit: "bytes",
        });
    }
    Ok(())
}

/// The SHA-256 of a request's canonical JSON (its decoded fields, so two
/// spellings of the same request agree), lowercase hex: what an
/// idempotency key is checked against on a retry.
pub fn fingerprint(request: &Request) -> String {
    sha256_hex(&serde_json::to_vec(request).unwrap_or_default())
}

/// The SHA-256 of `bytes`, lowercase hex: a request's fingerprint, and
/// the only form in which an agent's token is stored.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
