//! The `Inbox` class on a page in headless Chromium: the worker loop on the
//! memory store and on SQLite in wasm, with waits woken in the browser's
//! event loop.

#![cfg(target_family = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{open, worker_loop};
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn the_worker_loop_runs_on_a_page_on_both_stores() {
    for store in ["memory", "sqlite"] {
        let inbox = open(&format!(r#"{{"store":"{store}"}}"#)).await;
        worker_loop(&inbox).await;
        inbox.close();
    }
}

#[wasm_bindgen_test]
async fn opfs_on_the_page_thread_is_refused_with_a_storage_error() {
    let error = inbox_host_wasm::Inbox::open(common::obj(r#"{"store":"opfs"}"#))
        .await
        .err()
        .expect("OPFS sync access handles exist only in dedicated workers");
    assert_eq!(common::text(&error, "code"), "storage_error");
}
