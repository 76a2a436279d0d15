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

#[wasm_bindgen_test]
async fn a_second_inbox_on_an_open_opfs_file_is_refused_until_the_first_closes() {
    let path = format!("worker-twice-{}.db", js_sys::Date::now() as u64);
    let options = format!(r#"{{"store":"opfs","path":"{path}"}}"#);
    let first = open(&options).await;
    let error = inbox_host_wasm::Inbox::open(obj(&options))
        .await
        .err()
        .expect("one connection per database: the second open must fail");
    assert_eq!(text(&error, "code"), "storage_error");
    assert!(
        text(&error, "message").contains("already open in this worker"),
        "{}",
        text(&error, "message")
    );
    // The first inbox is unaffected, and after it closes the file opens again.
    first
        .send(obj(
            r#"{"from_agent":"lead","to_agent":"worker","subject":"Still here"}"#,
        ))
        .unwrap();
    first.close();
    let second = open(&options).await;
    let listed = second.list(obj("{}")).unwrap();
    assert_eq!(text(&listed, "threads.0.subject"), "Still here");
    second.close();
}
