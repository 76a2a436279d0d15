//! `runScript`: a transition script run inside wasm, so a JS user can pin an
//! agent protocol down exactly as `inbox script` does natively, and so the
//! test suite can check that wasm transcripts equal the native golden ones.
//!
//! The script runner (its fixed clock, sequential ids, transcript format)
//! is the engine's; this only picks the store.

use inbox_engine::{EngineError, MemoryStore, Store};
use js_sys::{Array, Object, Reflect};
use wasm_bindgen::prelude::*;

use crate::js;

/// Runs a transition script against a fresh store (`"memory"`, the default,
/// or `"sqlite"`) and returns `{text, failures}`: the transcript and the
/// expectations that did not hold. Throws an `InboxError` when the script
/// does not parse.
#[wasm_bindgen(js_name = runScript, unchecked_return_type = "Transcript")]
pub fn run_script(
    text: &str,
    #[wasm_bindgen(unchecked_param_type = "\"memory\" | \"sqlite\" | undefined")] store: JsValue,
) -> Result<JsValue, JsValue> {
    let store = store.as_string().unwrap_or_else(|| "memory".to_owned());
    let transcript = match store.as_str() {
        "memory" => run(text, MemoryStore::new()),
        #[cfg(feature = "sqlite")]
        "sqlite" => run(text, crate::sqlite::open_in_memory(None)?),
        other => {
            return Err(js::invalid(format!(
                "runScript runs on store \"memory\" or \"sqlite\", not \"{other}\""
            )));
        }
    }?;
    let result = Object::new();
    let failures: Array = transcript
        .failures
        .iter()
        .map(|f| JsValue::from_str(f))
        .collect();
    // Setting properties on a fresh object cannot fail.
    let _ = Reflect::set(&result, &"text".into(), &transcript.text.into());
    let _ = Reflect::set(&result, &"failures".into(), &failures);
    Ok(result.into())
}

fn run<S: Store>(text: &str, store: S) -> Result<inbox_engine::Transcript, JsValue> {
    inbox_engine::run_script(text, store).map_err(|e| {
        js::failure(
            None,
            EngineError::InvalidRequest {
                message: format!("line {}: {}", e.line, e.message),
            },
        )
    })
}
