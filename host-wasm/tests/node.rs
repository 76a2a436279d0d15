//! The `Inbox` class in Node, through wasm-bindgen-test: the worker loop on
//! every store Node has, and an error crossing into JS as an `InboxError`.

#![cfg(target_family = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{get, obj, open, show, text, worker_loop};
use wasm_bindgen::JsCast;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen_test]
async fn the_worker_loop_runs_on_the_memory_store() {
    let inbox = open(r#"{"store":"memory"}"#).await;
    worker_loop(&inbox).await;
}

#[wasm_bindgen_test]
async fn the_worker_loop_runs_on_sqlite_in_wasm_and_survives_export_and_import() {
    let inbox = open(r#"{"store":"sqlite"}"#).await;
    let id = worker_loop(&inbox).await;
    let bytes = inbox.export_bytes().unwrap();
    let options = obj(r#"{"store":"sqlite"}"#);
    js_sys::Reflect::set(&options, &"bytes".into(), &bytes).unwrap();
    let copy = inbox_host_wasm::Inbox::open(options).await.unwrap();
    let shown = copy
        .show(obj(&format!(r#"{{"thread_id":"{id}"}}"#)))
        .unwrap();
    assert_eq!(text(&shown, "thread.status"), "done");
}

#[wasm_bindgen_test]
async fn a_refusal_is_an_inbox_error_with_code_and_exit_code() {
    let inbox = open("{}").await;
    let error = inbox
        .claim(obj(r#"{"agent":"worker","thread_id":"thr_missing"}"#))
        .unwrap_err();
    assert!(error.is_instance_of::<js_sys::Error>(), "{}", show(&error));
    assert_eq!(text(&error, "code"), "thread_not_found");
    assert_eq!(get(&error, "exitCode").as_f64(), Some(40.0));
    assert_eq!(text(&error, "name"), "InboxError");
}
