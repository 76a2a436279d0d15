//! The JavaScript side of the engine's interfaces: the clock ([`JsClock`]),
//! the id seed, timers, JSON in and out, and errors as real JS `Error`s.
//!
//! This module is the only place that calls into JS globals
//! (`Date.now`, `crypto.getRandomValues`, `setTimeout`), so the rest of the
//! crate reads as plain Rust. It must never decide anything about a
//! command: it converts and reports.

use inbox_engine::{Clock, EngineError, Response, StoreError, Timestamp};
use js_sys::{Object, Reflect};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    // Present in browsers, workers and Node alike.
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &JsValue, millis: f64) -> JsValue;
    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(handle: &JsValue);
    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues, catch)]
    fn get_random_values(buffer: &js_sys::Uint32Array) -> Result<JsValue, JsValue>;
}

/// The wall clock (`Date.now()`), optionally shifted to start at a chosen
/// instant, like the CLI's `INBOX_NOW`: tests place commands at known times
/// while timers still run at real speed.
#[derive(Clone, Copy, Debug)]
pub struct JsClock {
    /// The chosen start and the `Date.now()` reading it corresponds to.
    start: Option<(Timestamp, f64)>,
}

impl JsClock {
    /// The system clock.
    pub fn system() -> JsClock {
        JsClock { start: None }
    }

    /// A clock that reads `start` now and runs at real speed from there.
    pub fn starting_at(start: Timestamp) -> JsClock {
        JsClock {
            start: Some((start, js_sys::Date::now())),
        }
    }
}

impl Clock for JsClock {
    /// `performance.now()`: monotonic in every browser, worker and Node.
    fn ticks(&mut self) -> u64 {
        let global = js_sys::global();
        let now = js_sys::Reflect::get(&global, &JsValue::from_str("performance"))
            .ok()
            .filter(|performance| performance.is_object())
            .and_then(|performance| {
                js_sys::Reflect::get(&performance, &JsValue::from_str("now"))
                    .ok()
                    .and_then(|now| now.dyn_into::<js_sys::Function>().ok())
                    .and_then(|now| now.call0(&performance).ok())
            })
            .and_then(|value| value.as_f64());
        now.unwrap_or_else(js_sys::Date::now).max(0.0) as u64
    }

    fn now(&mut self) -> Timestamp {
        let now = js_sys::Date::now();
        match self.start {
            None => Timestamp::from_millis(now as i64),
            Some((start, at)) => start.plus_millis((now - at).max(0.0) as i64),
        }
    }
}

/// 64 bits for the id generator's seed, from `crypto.getRandomValues` when
/// the runtime has it (every browser, worker and Node ≥ 19), else from the
/// clock and `Math.random`: ids only need to differ, not to be secret.
pub fn random_seed() -> u64 {
    let buffer = js_sys::Uint32Array::new_with_length(2);
    if get_random_values(&buffer).is_ok() {
        return (u64::from(buffer.get_index(0)) << 32) | u64::from(buffer.get_index(1));
    }
    let a = (js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    (a << 32) ^ (js_sys::Date::now() as u64)
}

/// 32 bytes for a secret (an agent's token) from `crypto.getRandomValues`;
/// `None` without it: unlike ids, a secret has no weaker fallback.
pub fn secret_bytes() -> Option<[u8; 32]> {
    let buffer = js_sys::Uint32Array::new_with_length(8);
    get_random_values(&buffer).ok()?;
    let mut bytes = [0; 32];
    for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&buffer.get_index(i as u32).to_le_bytes());
    }
    Some(bytes)
}

/// A pending `setTimeout`; cleared when dropped.
#[derive(Debug)]
pub struct Timer(JsValue);

impl Timer {
    /// Calls `f` once after `millis` milliseconds (clamped to what
    /// `setTimeout` accepts).
    pub fn after(millis: i64, f: impl FnOnce() + 'static) -> Timer {
        let handler = Closure::once_into_js(f);
        let millis = millis.clamp(0, i64::from(i32::MAX)) as f64;
        Timer(set_timeout(&handler, millis))
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        clear_timeout(&self.0);
    }
}

/// Parses one line of the JSON contract into a JS object.
pub fn parse_json(json: &str) -> JsValue {
    // The engine writes valid JSON; a failure here would be a bug, reported
    // as a JS exception rather than a panic.
    js_sys::JSON::parse(json).unwrap_or_else(|e| e)
}

/// The JSON text of a JS value given as a request: a string is taken as JSON
/// already, anything else goes through `JSON.stringify`.
pub fn request_json(request: &JsValue) -> Result<String, String> {
    if let Some(text) = request.as_string() {
        return Ok(text);
    }
    if request.is_undefined() || request.is_null() {
        return Ok("{}".to_owned());
    }
    match js_sys::JSON::stringify(request) {
        Ok(text) => text.as_string().ok_or_else(|| {
            "the request has no JSON form (a function?); pass a plain object".to_owned()
        }),
        Err(e) => Err(format!(
            "the request cannot be written as JSON ({}); pass a plain object of strings, numbers, booleans, arrays and objects",
            error_text(&e)
        )),
    }
}

/// The message of a JS exception, for wrapping it in an inbox error.
pub fn error_text(error: &JsValue) -> String {
    if let Some(error) = error.dyn_ref::<js_sys::Error>() {
        return String::from(error.message());
    }
    error.as_string().unwrap_or_else(|| format!("{error:?}"))
}

/// The response as a JS object (`{"ok": true, ...}`), or, for a failure, an
/// `InboxError`: a real `Error` whose `message` is the engine's, with
/// `code`, `exitCode`, `command` and the whole `response` attached.
pub fn response_to_js(response: &Response) -> Result<JsValue, JsValue> {
    let object = parse_json(&response.to_json());
    match response {
        Response::Success(_) | Response::Replayed(_) => Ok(object),
        Response::Failure { error, command } => Err(inbox_error(
            error,
            command.as_deref(),
            response.exit_code(),
            object,
        )),
    }
}

/// A failure response as an `InboxError`.
pub fn failure(command: Option<&str>, error: EngineError) -> JsValue {
    let response = Response::failure(command.map(str::to_owned), error);
    match response_to_js(&response) {
        Ok(value) | Err(value) => value,
    }
}

/// A store failure (opening, importing, exporting) as an `InboxError`.
pub fn store_failure(error: StoreError) -> JsValue {
    failure(None, EngineError::Store(error))
}

/// A bad argument to something other than a command (open options, export
/// of a memory store) as an `invalid_request` `InboxError`.
pub fn invalid(message: impl Into<String>) -> JsValue {
    failure(
        None,
        EngineError::InvalidRequest {
            message: message.into(),
        },
    )
}

fn inbox_error(
    error: &EngineError,
    command: Option<&str>,
    exit_code: u8,
    response: JsValue,
) -> JsValue {
    let js_error = js_sys::Error::new(&error.to_string());
    js_error.set_name("InboxError");
    let fields: [(&str, JsValue); 4] = [
        ("code", JsValue::from_str(error.code().as_str())),
        ("exitCode", JsValue::from(exit_code)),
        ("command", command.map_or(JsValue::NULL, JsValue::from_str)),
        ("response", response),
    ];
    for (name, value) in fields {
        // Setting a property on a fresh Error cannot fail.
        let _ = Reflect::set(&js_error, &JsValue::from_str(name), &value);
    }
    js_error.into()
}

/// A property of an options object, `undefined` when the options are not an
/// object.
pub fn option(options: &JsValue, name: &str) -> JsValue {
    if options.is_object() {
        Reflect::get(options, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
    } else {
        JsValue::UNDEFINED
    }
}

/// The own property names of an options object, to refuse misspelled ones.
pub fn option_names(options: &JsValue) -> Vec<String> {
    match options.dyn_ref::<Object>() {
        Some(object) => Object::keys(object)
            .iter()
            .filter_map(|key| key.as_string())
            .collect(),
        None => Vec::new(),
    }
}
