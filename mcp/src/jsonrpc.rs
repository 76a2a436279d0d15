//! What a line on stdin is, judged before the MCP SDK (`rmcp`) sees it:
//! a message to pass on, an error to answer with, or a notification or
//! client response to leave unanswered. This is where JSON-RPC 2.0's rules
//! for bad input live, so that every request gets an answer:
//!
//! - a line that is not JSON (or not UTF-8) is a parse error (`-32700`);
//!   JSON that is not a request object is an invalid request (`-32600`),
//!   and so is a batch (MCP has had none since 2025-06-18), each request
//!   in it answered with its id;
//! - a method this server serves whose `params` do not have the MCP shape
//!   is invalid params (`-32602`), with serde's reason (rmcp would read it
//!   as an unknown method and answer `-32601`);
//! - an answer carries the request's id whenever one can be read (a string
//!   or an integer, as MCP allows), else `null`, as JSON-RPC 2.0 says;
//! - a notification, or a client's response, is never answered, however
//!   wrong (JSON-RPC 2.0 forbids it); why it was dropped goes to stderr.
//!
//! This module must never read or write the streams, nor decide what a
//! well-formed request means: [`crate::stdio`] moves the lines, rmcp and
//! [`crate::server`] answer the requests.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode,
    GetMeta as _, InitializeRequestParams, JsonRpcMessage, PaginatedRequestParams, ProtocolVersion,
};
use serde::Deserialize as _;
use serde_json::{Map, Value, json};

/// The longest line (one message) the server reads, in bytes: a request
/// carries at most a 1 MiB body, a 256 KiB payload and their JSON escapes;
/// `inbox daemon` takes calls of the same size. A longer line is refused
/// without being kept.
pub(crate) const MESSAGE_MAX_BYTES: usize = 16 << 20;

/// inbox's JSON-RPC error code for a limit of the server reached (waits
/// or requests at once): in JSON-RPC's range for servers' own errors, away
/// from the codes MCP and its SDKs give meanings to.
pub(crate) const LIMIT_REACHED: ErrorCode = ErrorCode(-32050);

/// How much of a client's text an answer quotes, in characters.
const QUOTED_MAX_CHARS: usize = 200;

/// What to do with one line.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// A message for rmcp.
    Pass(Box<ClientJsonRpcMessage>),
    /// The answer to write back: one JSON-RPC response, or an array of
    /// them for a batch.
    Answer(Value),
    /// Nothing to answer (a notification or a response); why, for stderr.
    Drop(String),
}

/// What `line` (without its newline) is. `handshake_begun` says whether
/// rmcp already has the session's first request (see [`begins_session`]):
/// before that, rmcp ends the session on a notification or a response, so
/// those are dropped here.
pub(crate) fn triage(line: &[u8], handshake_begun: bool) -> Verdict {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(error) => {
            return Verdict::Answer(error_answer(
                Value::Null,
                ErrorCode::PARSE_ERROR,
                format!(
                    "Parse error: the line is not JSON ({}); send one JSON-RPC 2.0 message per line, in UTF-8",
                    quoted(&error.to_string())
                ),
            ));
        }
    };
    match value {
        Value::Object(object) => message(object, handshake_begun),
        Value::Array(items) => batch(&items),
        other => Verdict::Answer(error_answer(
            Value::Null,
            ErrorCode::INVALID_REQUEST,
            format!(
                "Invalid Request: a JSON-RPC message is a JSON object, not {}; send {{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ..., \"params\": {{...}}}}",
                kind(&other)
            ),
        )),
    }
}

/// Whether passing `request` to rmcp starts its session, after which
/// notifications and responses may follow: `initialize`, or a request
/// that carries the protocol version in its `_meta` (MCP's lifecycle
/// without `initialize`), as rmcp's handshake reads them.
pub(crate) fn begins_session(request: &ClientRequest) -> bool {
    match request {
        ClientRequest::InitializeRequest(_) => true,
        ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_) => false,
        other => {
            let meta = other.get_meta();
            meta.protocol_version().is_some()
                && meta
                    .missing_required_keys(&ProtocolVersion::V_2026_07_28)
                    .is_empty()
        }
    }
}

/// A JSON-RPC 2.0 error response to the request `id`.
pub(crate) fn error_answer(id: Value, code: ErrorCode, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message}})
}

/// The answer to a line longer than [`MESSAGE_MAX_BYTES`], to the request
/// `id` read from its start (`null` if none could be).
pub(crate) fn too_long(id: Value) -> Value {
    error_answer(
        id,
        ErrorCode::INVALID_REQUEST,
        format!(
            "Invalid Request: the message is over {MESSAGE_MAX_BYTES} bytes ({} MiB), the most one line may hold, and was not read; send a smaller one (a body holds at most 1 MiB: put more in an artifact)",
            MESSAGE_MAX_BYTES >> 20
        ),
    )
}

/// The id of the request whose first bytes are `start` (a line cut at
/// [`MESSAGE_MAX_BYTES`]), if its top-level `id` comes before the cut and
/// is one a request may have; else `null`.
pub(crate) fn id_of_start(start: &[u8]) -> Value {
    struct Seek<'a>(&'a mut Value);
    impl<'de> serde::de::Visitor<'de> for Seek<'_> {
        type Value = ();
        fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("a JSON-RPC message")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == "id" {
                    let id: Value = map.next_value()?;
                    *self.0 = echoed(Some(&id));
                    return Ok(());
                }
                map.next_value::<serde::de::IgnoredAny>()?;
            }
            Ok(())
        }
    }
    let start = start.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(start);
    let mut id = Value::Null;
    let mut reader = serde_json::Deserializer::from_slice(start);
    // The line is cut short, so this ends in an error once the id is
    // found or the cut is reached: only what was seen by then counts.
    let _ = serde::Deserializer::deserialize_map(&mut reader, Seek(&mut id));
    id
}

/// One message object.
fn message(object: Map<String, Value>, handshake_begun: bool) -> Verdict {
    let has_id = object.contains_key("id");
    let replies = object.contains_key("result") || object.contains_key("error");
    match object.get("method") {
        Some(Value::String(_)) if !has_id => notification(object, handshake_begun),
        None if replies => response(object, handshake_begun),
        _ => request(object),
    }
}

/// A request: answered here when it is not a JSON-RPC 2.0 request, or
/// when a method this server serves is given params of the wrong shape.
fn request(object: Map<String, Value>) -> Verdict {
    let id = echoed(object.get("id"));
    let invalid = |problem: &str| {
        Verdict::Answer(error_answer(
            id.clone(),
            ErrorCode::INVALID_REQUEST,
            format!("Invalid Request: {problem}"),
        ))
    };
    if object.get("jsonrpc") != Some(&Value::from("2.0")) {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    let Some(Value::String(method)) = object.get("method") else {
        return invalid(
            "`method` must be a string naming an MCP method (\"tools/list\", \"tools/call\", ...)",
        );
    };
    if id.is_null() {
        return invalid(
            "`id` must be a string or an integer (MCP allows no other), or absent for a notification",
        );
    }
    if id.is_u64() && !id.is_i64() {
        return invalid(
            "`id` is over 9223372036854775807, the largest integer id this server reads",
        );
    }
    if object.contains_key("result") || object.contains_key("error") {
        return invalid("a request has a `method` and no `result` or `error`");
    }
    let invalid_params = |reason: String| {
        Verdict::Answer(error_answer(
            id.clone(),
            ErrorCode::INVALID_PARAMS,
            format!("Invalid params for `{}`: {reason}", quoted(method)),
        ))
    };
    let params = object.get("params");
    if let Some(params) = params
        && !params.is_object()
    {
        return invalid_params(format!("`params` must be an object, not {}", kind(params)));
    }
    if let Err(reason) = check_params(method, params) {
        return invalid_params(reason);
    }
    let method = method.clone();
    match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(object)) {
        Ok(JsonRpcMessage::Request(request))
            if !(serves(&method) && matches!(request.request, ClientRequest::CustomRequest(_))) =>
        {
            Verdict::Pass(Box::new(JsonRpcMessage::Request(request)))
        }
        // A method this server serves that rmcp could not read as itself.
        Ok(_) => Verdict::Answer(error_answer(
            id,
            ErrorCode::INVALID_PARAMS,
            format!(
                "Invalid params for `{}`: they do not have the shape the MCP specification gives them",
                quoted(&method)
            ),
        )),
        Err(error) => Verdict::Answer(error_answer(
            id,
            ErrorCode::INVALID_REQUEST,
            format!("Invalid Request: {}", quoted(&error.to_string())),
        )),
    }
}

/// The methods this server serves: their params are checked here.
fn serves(method: &str) -> bool {
    matches!(method, "initialize" | "ping" | "tools/list" | "tools/call")
}

/// Whether `params` have the shape `method` takes, when this server
/// serves it; serde's reason when not.
fn check_params(method: &str, params: Option<&Value>) -> Result<(), String> {
    let reason = |error: serde_json::Error| quoted(&error.to_string());
    match (method, params) {
        ("tools/call", None) => {
            Err("tools/call takes params {\"name\": TOOL, \"arguments\": {...}}".into())
        }
        ("tools/call", Some(params)) => CallToolRequestParams::deserialize(params)
            .map(drop)
            .map_err(reason),
        ("tools/list", Some(params)) => PaginatedRequestParams::deserialize(params)
            .map(drop)
            .map_err(reason),
        ("initialize", None) => Err(
            "initialize takes params {\"protocolVersion\", \"capabilities\", \"clientInfo\"}"
                .into(),
        ),
        ("initialize", Some(params)) => InitializeRequestParams::deserialize(params)
            .map(drop)
            .map_err(reason),
        _ => Ok(()),
    }
}

/// A notification: passed on when rmcp can read it as one it knows (or as
/// a custom one), else dropped; never answered.
fn notification(object: Map<String, Value>, handshake_begun: bool) -> Verdict {
    let method = match object.get("method") {
        Some(Value::String(method)) => quoted(method),
        _ => String::new(),
    };
    if !handshake_begun {
        return Verdict::Drop(format!(
            "notification `{method}` before initialize (send initialize first)"
        ));
    }
    if object.get("jsonrpc") != Some(&Value::from("2.0")) {
        return Verdict::Drop(format!(
            "notification `{method}` without \"jsonrpc\": \"2.0\""
        ));
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(object)) {
        Ok(JsonRpcMessage::Notification(notification))
            if !(matches!(
                notification.notification,
                ClientNotification::CustomNotification(_)
            ) && knows_notification(&method)) =>
        {
            Verdict::Pass(Box::new(JsonRpcMessage::Notification(notification)))
        }
        Ok(_) => Verdict::Drop(format!(
            "notification `{method}` whose params do not have the shape MCP gives them"
        )),
        Err(error) => Verdict::Drop(format!(
            "notification `{method}`: {}",
            quoted(&error.to_string())
        )),
    }
}

/// The notifications a client sends that rmcp reads as themselves: one of
/// these read as a custom notification had params of the wrong shape.
fn knows_notification(method: &str) -> bool {
    matches!(
        method,
        "notifications/cancelled"
            | "notifications/progress"
            | "notifications/initialized"
            | "notifications/roots/list_changed"
    )
}

/// A client's response (to a request of the server's): passed on when
/// rmcp can read it, never answered.
fn response(object: Map<String, Value>, handshake_begun: bool) -> Verdict {
    if !handshake_begun {
        return Verdict::Drop("a response before initialize".into());
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(object)) {
        Ok(message @ (JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_))) => {
            Verdict::Pass(Box::new(message))
        }
        Ok(_) => Verdict::Drop("a response that is not one".into()),
        Err(error) => Verdict::Drop(format!("a response: {}", quoted(&error.to_string()))),
    }
}

/// A batch: refused, since MCP has none. Each request in it is answered
/// with its id, each item that is no message with `null`, notifications
/// and responses not at all; nothing in it runs.
fn batch(items: &[Value]) -> Verdict {
    let refusal = |id: Value| {
        error_answer(
            id,
            ErrorCode::INVALID_REQUEST,
            "Invalid Request: batches are not supported (MCP has had none since 2025-06-18) and nothing in this one ran; send each message on a line of its own".into(),
        )
    };
    if items.is_empty() {
        return Verdict::Answer(refusal(Value::Null));
    }
    let answers: Vec<Value> = items
        .iter()
        .filter_map(|item| match item {
            Value::Object(object) => {
                let unanswered = match object.get("method") {
                    Some(Value::String(_)) => !object.contains_key("id"),
                    None => object.contains_key("result") || object.contains_key("error"),
                    Some(_) => false,
                };
                (!unanswered).then(|| refusal(echoed(object.get("id"))))
            }
            _ => Some(refusal(Value::Null)),
        })
        .collect();
    if answers.is_empty() {
        Verdict::Drop("a batch of notifications and responses (MCP has no batches)".into())
    } else {
        Verdict::Answer(Value::Array(answers))
    }
}

/// The id an answer carries: the request's when it is a string or an
/// integer, else `null` (JSON-RPC 2.0: when the id cannot be read).
fn echoed(id: Option<&Value>) -> Value {
    match id {
        Some(Value::String(id)) => Value::from(id.as_str()),
        Some(Value::Number(id)) if id.is_i64() || id.is_u64() => Value::Number(id.clone()),
        _ => Value::Null,
    }
}

/// What kind of JSON `value` is, for a message.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A client's text as an answer quotes it: at most [`QUOTED_MAX_CHARS`].
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_MAX_CHARS) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Value {
        match triage(line.as_bytes(), true) {
            Verdict::Answer(answer) => answer,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn the_id_of_a_cut_line_is_read_when_it_comes_before_the_cut() {
        assert_eq!(
            id_of_start(br#"{"jsonrpc":"2.0","id":7,"params":{"x":"aaa"#),
            7
        );
        assert_eq!(id_of_start(br#"{"id":"a\"b","method"#), "a\"b");
        assert_eq!(id_of_start(br#"{"params":{"id":3,"x":"aaa"#), Value::Null);
        assert_eq!(id_of_start(br#"{"id":1.5,"#), Value::Null);
        assert_eq!(id_of_start(b"[1,2"), Value::Null);
    }

    #[test]
    fn answers_carry_the_id_only_when_a_request_may_have_it() {
        assert_eq!(answer(r#"{"id":1.5,"method":"ping"}"#)["id"], Value::Null);
        assert_eq!(answer(r#"{"id":null,"method":"ping"}"#)["id"], Value::Null);
        assert_eq!(answer(r#"{"id":"x","method":"ping"}"#)["id"], "x");
        let huge = answer(r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"ping"}"#);
        assert_eq!(huge["id"], u64::MAX, "{huge}");
        assert_eq!(
            huge["error"]["code"],
            ErrorCode::INVALID_REQUEST.0,
            "{huge}"
        );
    }

    #[test]
    fn long_client_text_is_quoted_short() {
        let method = "m".repeat(10_000);
        let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":3}}"#);
        let text = answer(&line).to_string();
        assert!(text.len() < 1000, "{text}");
    }
}
