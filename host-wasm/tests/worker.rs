//! The OPFS store in a dedicated worker of headless Chromium: what one
//! `Inbox` wrote is there after it is closed and the file reopened.

#![cfg(target_family = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{obj, open, text, worker_loop};
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[wasm_bindgen_test]
async fn opfs_persists_a_thread_across_close_and_reopen() {
    // A fresh file name per run: OPFS outlives the test's page.
    let path = format!("worker-test-{}.db", js_sys::Date::now() as u64);
    let options = format!(r#"{{"store":"opfs","path":"{path}"}}"#);
    let inbox = open(&options).await;
    assert_eq!(inbox.store(), "opfs");
    let id = worker_loop(&inbox).await;
    inbox.close();

    let reopened = open(&options).await;
    let shown = reopened
        .show(obj(&format!(r#"{{"thread_id":"{id}"}}"#)))
        .unwrap();
    assert_eq!(text(&shown, "thread.status"), "done");
    assert_eq!(text(&shown, "thread.subject"), "Add login");
    reopened.close();
}
