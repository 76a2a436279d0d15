//! What the wasm-bindgen tests share: JSON literals as JS objects, and the
//! worker loop each runtime runs through the `Inbox` class.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_host_wasm::Inbox;
use js_sys::{JSON, Reflect};
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;

/// A JS object from JSON text.
pub(crate) fn obj(json: &str) -> JsValue {
    JSON::parse(json).unwrap_or_else(|e| panic!("bad test JSON {json}: {e:?}"))
}

/// A property path of a JS value, e.g. `get(&v, "thread.thread_id")`.
pub(crate) fn get(value: &JsValue, path: &str) -> JsValue {
    path.split('.').fold(value.clone(), |v, key| {
        Reflect::get(&v, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
    })
}

/// A string property.
pub(crate) fn text(value: &JsValue, path: &str) -> String {
    get(value, path)
        .as_string()
        .unwrap_or_else(|| panic!("{path} is not a string in {}", show(value)))
}

/// A JS value as JSON text, for messages.
pub(crate) fn show(value: &JsValue) -> String {
    JSON::stringify(value)
        .ok()
        .and_then(|s| s.as_string())
        .unwrap_or_else(|| format!("{value:?}"))
}

/// Opens an inbox with the given options object.
pub(crate) async fn open(options: &str) -> Inbox {
    Inbox::open(obj(options))
        .await
        .unwrap_or_else(|e| panic!("Inbox.open({options}) failed: {}", show(&e)))
}

/// The leader/worker loop: send, claim next, block on a question, a
/// `waitReply` Promise woken by the leader's answer, done. Returns the
/// thread id.
pub(crate) async fn worker_loop(inbox: &Inbox) -> String {
    let sent = inbox
        .send(obj(
            r#"{"from_agent":"lead","to_agent":"worker","subject":"Add login"}"#,
        ))
        .unwrap();
    let id = text(&sent, "thread.thread_id");
    let claim = inbox
        .claim(obj(r#"{"agent":"worker","next":true}"#))
        .unwrap();
    assert_eq!(text(&claim, "lease.thread_id"), id);
    inbox
        .update(obj(&format!(
            r#"{{"agent":"worker","thread_id":"{id}","lease_token":1,"status":"blocked","summary":"Which provider?"}}"#
        )))
        .unwrap();
    let waiting = inbox.wait_reply(obj(&format!(
        r#"{{"agent":"worker","thread_id":"{id}","lease_token":1,"timeout_seconds":30}}"#
    )));
    assert_eq!(inbox.pending_waits(), 1);
    inbox
        .reply(obj(&format!(
            r#"{{"from_agent":"lead","thread_id":"{id}","kind":"answer","summary":"GitHub"}}"#
        )))
        .unwrap();
    let answer = JsFuture::from(waiting).await.unwrap();
    assert_eq!(get(&answer, "woke"), JsValue::TRUE, "{}", show(&answer));
    assert_eq!(text(&answer, "message.summary"), "GitHub");
    let done = inbox
        .done(obj(&format!(
            r#"{{"agent":"worker","thread_id":"{id}","lease_token":1,"summary":"Login works"}}"#
        )))
        .unwrap();
    assert_eq!(text(&done, "thread.status"), "done");
    id
}
