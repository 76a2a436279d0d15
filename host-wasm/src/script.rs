//! `runScript` and `runScriptOn`: a transition script run inside wasm, so a
//! JS user can pin an agent protocol down exactly as `inbox script` does
//! natively, and so the test suite can check that the transcripts of every
//! store (memory, SQLite in wasm memory, OPFS, a file through Node's SQLite)
//! equal the native golden ones.
//!
//! The script runner (its fixed clock, sequential ids, transcript format)
//! is the engine's; this only picks the store, always a new, empty
//! database: [`Fresh`] is the one place that opens one.

use inbox_engine::{EngineError, MemoryStore};
use js_sys::{Array, Object, Reflect};
use wasm_bindgen::prelude::*;

use crate::backend::{StoreKind, Stores};
use crate::inbox::{check_names, describe, store_option};
use crate::js;

/// The options `runScriptOn` accepts, for the message that refuses others.
const OPTIONS: &[&str] = &["store", "path"];

/// Runs a transition script against a fresh store (`"memory"`, the default,
/// or `"sqlite"`) and returns `{text, failures}`: the transcript and the
/// expectations that did not hold. Throws an `InboxError` when the script
/// does not parse. `runScriptOn` runs one on any store.
#[wasm_bindgen(js_name = runScript, unchecked_return_type = "Transcript")]
pub fn run_script(
    text: &str,
    #[wasm_bindgen(unchecked_param_type = "\"memory\" | \"sqlite\" | undefined")] store: JsValue,
) -> Result<JsValue, JsValue> {
    let name = store.as_string().unwrap_or_else(|| "memory".to_owned());
    let store = match StoreKind::parse(&name) {
        Some(kind @ (StoreKind::Memory | StoreKind::Sqlite)) => kind,
        _ => {
            return Err(js::invalid(format!(
                "runScript runs on store \"memory\" or \"sqlite\", not \"{name}\"; runScriptOn(text, {{store, path}}) runs on \"opfs\" and \"file\" too"
            )));
        }
    };
    Fresh::open_now(store, None)?.run(text)
}

/// Runs a transition script on a new, empty database of the store that
/// `options` name, as `Inbox.open` takes them: `store` is `"memory"` (the
/// default), `"sqlite"`, `"opfs"` (a dedicated worker) or `"file"` (Node
/// 22.16 or later), and `path` names the new database of `"opfs"` and
/// `"file"`. A path that already holds a database is refused and left as it
/// is: a script never runs against real data. The OPFS database is removed
/// when the run ends; the file stays, for the CLI to look at. Resolves to
/// `{text, failures}` as `runScript` returns them; rejects with an
/// `InboxError` for bad options, a store that cannot open, or a script that
/// does not parse.
#[wasm_bindgen(js_name = runScriptOn, unchecked_return_type = "Transcript")]
pub async fn run_script_on(
    text: String,
    #[wasm_bindgen(unchecked_param_type = "ScriptOptions | undefined")] options: JsValue,
) -> Result<JsValue, JsValue> {
    let (store, path) = script_options(&options)?;
    Fresh::open(store, path.as_deref()).await?.run(&text)
}

/// A new, empty database of one of the stores, for one run.
enum Fresh {
    /// The engine's in-memory store.
    Memory(MemoryStore),
    /// SQLite in wasm memory.
    #[cfg(feature = "sqlite")]
    Sqlite(crate::sqlite::WasmStore),
    /// SQLite in OPFS, with the file it holds: removed after the run.
    #[cfg(feature = "sqlite")]
    Opfs(crate::sqlite::WasmStore, crate::sqlite::OpfsFile),
    /// A database file through Node's SQLite.
    #[cfg(feature = "sqlite")]
    File(crate::sqlite::WasmStore),
}

impl Fresh {
    /// Opens a new database of `store`; `path` is the file of `"opfs"` and
    /// `"file"`.
    async fn open(store: StoreKind, path: Option<&str>) -> Result<Fresh, JsValue> {
        // The OPFS pool installs itself asynchronously; every other store
        // opens at once.
        #[cfg(feature = "sqlite")]
        if store == StoreKind::Opfs {
            let (sqlite, file) = crate::sqlite::create_opfs(path.unwrap_or_default()).await?;
            return Ok(Fresh::Opfs(sqlite, file));
        }
        Fresh::open_now(store, path)
    }

    /// Opens a new database of any store but `"opfs"`, synchronously.
    #[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
    fn open_now(store: StoreKind, path: Option<&str>) -> Result<Fresh, JsValue> {
        match store {
            StoreKind::Memory => Ok(Fresh::Memory(MemoryStore::new())),
            #[cfg(feature = "sqlite")]
            StoreKind::Sqlite => Ok(Fresh::Sqlite(crate::sqlite::open_in_memory(None)?)),
            #[cfg(feature = "sqlite")]
            StoreKind::File => Ok(Fresh::File(crate::sqlite::create_file(
                path.unwrap_or_default(),
            )?)),
            #[cfg(feature = "sqlite")]
            StoreKind::Opfs => Err(js::invalid(
                "store \"opfs\" opens asynchronously: use runScriptOn(text, {store: \"opfs\", path})",
            )),
            #[cfg(not(feature = "sqlite"))]
            StoreKind::Sqlite | StoreKind::Opfs | StoreKind::File => Err(js::invalid(format!(
                "store \"{}\" needs SQLite, which this memory-only build leaves out; use the full inbox-wasm package",
                store.as_str()
            ))),
        }
    }

    /// Runs `text` on the database and returns the transcript as JS.
    fn run(self, text: &str) -> Result<JsValue, JsValue> {
        let transcript = match self {
            Fresh::Memory(store) => run(text, Stores::Memory(store)),
            #[cfg(feature = "sqlite")]
            Fresh::Sqlite(store) => run(text, Stores::Sqlite(store)),
            #[cfg(feature = "sqlite")]
            Fresh::Opfs(store, file) => {
                // The run closes the connection (it owns the store), then
                // the file goes, whatever the run gave.
                let transcript = run(text, Stores::Sqlite(store));
                file.remove()?;
                transcript
            }
            #[cfg(feature = "sqlite")]
            Fresh::File(store) => run(text, Stores::File(store)),
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
}

/// Runs `text` over `store`: one function over [`Stores`], so that the
/// script runner's engine is in the module once, whatever the store.
fn run(text: &str, store: Stores) -> Result<inbox_engine::Transcript, JsValue> {
    inbox_engine::run_script(text, store).map_err(|e| {
        js::failure(
            None,
            EngineError::InvalidRequest {
                message: format!("line {}: {}", e.line, e.message),
            },
        )
    })
}

/// Reads and checks `runScriptOn`'s options: the store, and the path of a
/// store kept in a file (required there, refused elsewhere).
fn script_options(options: &JsValue) -> Result<(StoreKind, Option<String>), JsValue> {
    let why = " (a script brings its own clock and starts from an empty database)";
    check_names(options, "runScriptOn", OPTIONS, why)?;
    let store = store_option(options)?;
    let in_file = matches!(store, StoreKind::Opfs | StoreKind::File);
    let path = match js::option(options, "path") {
        v if v.is_undefined() && in_file => {
            return Err(js::invalid(format!(
                "store \"{}\" needs `path`, a new database file for the script, e.g. \"script.db\"",
                store.as_str()
            )));
        }
        v if v.is_undefined() => None,
        v if !in_file => {
            return Err(js::invalid(format!(
                "`path` names a database file and goes with store: \"opfs\" or \"file\", not \"{}\" (got {})",
                store.as_str(),
                describe(&v)
            )));
        }
        v => match v.as_string() {
            Some(path) if !path.is_empty() && !path.contains('\0') => Some(path),
            _ => {
                return Err(js::invalid(format!(
                    "`path` must be a non-empty file name, not {}",
                    describe(&v)
                )));
            }
        },
    };
    Ok((store, path))
}
