//! The `Inbox` class: an async factory, one method per engine command,
//! generated from the engine's command table (synchronous, or returning a
//! Promise for the commands that wait), and `execute` for the wire format.
//!
//! Every method takes the request object of the CLI's JSON contract without
//! its `command` (the method says which) and returns the whole response
//! object, `{ok: true, command, ...}`, exactly as `inbox <command> --json`
//! prints it. A refusal throws an `InboxError` (a real `Error` with `code`,
//! `exitCode`, `command` and `response`). "No matching work" is not an
//! error: an empty `fetch`, a `claim` with `next` and nothing to claim, or a
//! wait that timed out return normally, as the CLI prints them with exit 10.
//!
//! Nothing here interprets a request: it only converts, runs and reports.
//! Nothing here lists commands either: a command added to the engine's
//! table is a method here, with its TypeScript signature, on the next build.

use std::cell::RefCell;
use std::rc::Rc;

use inbox_engine::{Call, Command, Effect, EngineError, Executor, Response, Timestamp, Waiter};
use js_sys::{Promise, Uint8Array};
use wasm_bindgen::prelude::*;

use crate::backend::{self, Backend, OpenOptions, StoreKind};
use crate::js;
use crate::waits::{self, Shared, Waits};

/// The options `Inbox.open` accepts, for the message that refuses others.
const OPTIONS: &[&str] = &["store", "path", "bytes", "now"];

/// An inbox: the engine over one store, in this JS realm.
///
/// One instance is the only connection to its database: open one per
/// database (per worker, for OPFS) and share it.
#[wasm_bindgen]
pub struct Inbox {
    shared: Rc<RefCell<Shared>>,
}

#[wasm_bindgen]
impl Inbox {
    /// Opens an inbox. `options.store` is `"memory"` (the default),
    /// `"sqlite"` (SQLite in wasm memory; `options.bytes` starts from the
    /// bytes of `exportBytes()` or `inbox export`), `"opfs"` (SQLite
    /// persisted to the Origin Private File System as `options.path`,
    /// default `"inbox.db"`; dedicated workers only) or `"file"` (Node 22.16
    /// or later: the database file at `options.path`, created if missing,
    /// opened with Node's own SQLite and so shared with the `inbox` CLI and
    /// any other SQLite client through SQLite's locks; a write is in the
    /// file when the method returns). `options.now` starts the clock at an
    /// instant (`"2026-01-01T00:00:00Z"`), for tests; not with `"file"`,
    /// whose leases other processes judge by the machine's clock.
    pub async fn open(
        #[wasm_bindgen(unchecked_param_type = "OpenOptions | undefined")] options: JsValue,
    ) -> Result<Inbox, JsValue> {
        let options = open_options(&options)?;
        let backend = Backend::open(&options).await?;
        Ok(Inbox {
            shared: Rc::new(RefCell::new(Shared {
                backend: Some(backend),
                waits: Waits::default(),
            })),
        })
    }

    /// Which store this inbox uses: `"memory"`, `"sqlite"`, `"opfs"` or
    /// `"file"`.
    #[wasm_bindgen(
        getter,
        unchecked_return_type = "\"memory\" | \"sqlite\" | \"opfs\" | \"file\""
    )]
    pub fn store(&self) -> String {
        self.shared
            .borrow()
            .backend
            .as_ref()
            .map_or("closed", |b| b.kind().as_str())
            .to_owned()
    }

    /// How many `watch`/`waitReply` Promises are still pending.
    #[wasm_bindgen(getter, js_name = pendingWaits)]
    pub fn pending_waits(&self) -> usize {
        self.shared.borrow().waits.len()
    }

    /// Runs one wire-format request (`{command: "send", ...}`, or its JSON
    /// text) and returns the wire-format response, failures included: this
    /// never throws for a refused command, like `inbox --json`. `watch` and
    /// `wait-reply` here are single polls; use `watch()` / `waitReply()` to
    /// wait.
    #[wasm_bindgen(unchecked_return_type = "Response")]
    pub fn execute(
        &self,
        #[wasm_bindgen(unchecked_param_type = "(Request & Envelope) | string")] request: JsValue,
    ) -> Result<JsValue, JsValue> {
        let response = match decode(None, &request) {
            Ok(call) => self.run(call)?,
            Err(response) => *response,
        };
        Ok(js::parse_json(&response.to_json()))
    }

    /// The whole database as the bytes of an SQLite file (stores `sqlite`,
    /// `opfs` and `file`, a self-contained copy): persist them with your host's storage API and pass them
    /// back as `Inbox.open({store: "sqlite", bytes})`, or open the file with
    /// the native CLI (`inbox --db FILE`).
    #[wasm_bindgen(js_name = exportBytes)]
    pub fn export_bytes(&self) -> Result<Uint8Array, JsValue> {
        let mut state = self.shared.borrow_mut();
        let backend = state
            .backend
            .as_mut()
            .ok_or_else(|| js::failure(None, backend::closed()))?;
        let bytes = backend.export()?;
        Ok(Uint8Array::from(bytes.as_slice()))
    }

    /// Closes the database. Pending waits reject with an `InboxError`
    /// (`storage_error`); later calls throw. Call it before dropping an
    /// inbox whose waits are pending, or before opening the same OPFS file
    /// again.
    pub fn close(&self) {
        let backend = self.shared.borrow_mut().backend.take();
        drop(backend);
        waits::abandon(
            &self.shared,
            js::failure(
                None,
                EngineError::Store(inbox_engine::StoreError::other(
                    "the inbox was closed while this wait was pending",
                )),
            ),
        );
    }
}

impl Inbox {
    /// Runs a typed method's command and reports its response.
    fn command(&self, command: Command, request: &JsValue) -> Result<JsValue, JsValue> {
        let call = decode(Some(command), request).map_err(|r| error_of(&r))?;
        let response = self.run(call)?;
        js::response_to_js(&response)
    }

    /// Executes one call, then lets pending waits look at what it wrote.
    fn run(&self, call: Call) -> Result<Response, JsValue> {
        let writes = call.request.effect() == Effect::Write;
        let response = {
            let mut state = self.shared.borrow_mut();
            let Some(backend) = state.backend.as_mut() else {
                return Err(js::failure(
                    Some(call.request.command().as_str()),
                    backend::closed(),
                ));
            };
            backend.execute_call(call)
        };
        if writes && response.is_ok() && !self.shared.borrow().waits.is_empty() {
            waits::poll(&self.shared, None);
        }
        Ok(response)
    }

    fn wait(&self, command: Command, request: &JsValue) -> Promise {
        let shared = Rc::clone(&self.shared);
        let waiter = decode(Some(command), request).and_then(Waiter::for_call);
        let closed = shared.borrow().backend.is_none();
        let mut waiter = Some(waiter);
        Promise::new(&mut |resolve, reject| match waiter.take() {
            Some(Ok(_)) if closed => {
                let _ = reject.call1(
                    &JsValue::UNDEFINED,
                    &js::failure(Some(command.as_str()), backend::closed()),
                );
            }
            Some(Ok(waiter)) => waits::start(&shared, waiter, resolve, reject),
            Some(Err(response)) => {
                let _ = reject.call1(&JsValue::UNDEFINED, &error_of(&response));
            }
            None => {}
        })
    }
}

/// The error a failed decode reports.
fn error_of(response: &Response) -> JsValue {
    match js::response_to_js(response) {
        Ok(value) | Err(value) => value,
    }
}

/// Turns a JS request into the engine's [`Call`] (the request, with its
/// envelope's `idempotency_key` if given). A typed method fills in
/// `command` and refuses a request that names another one.
fn decode(command: Option<Command>, request: &JsValue) -> Result<Call, Box<Response>> {
    let invalid = |message: String| {
        Box::new(Response::failure(
            command.map(|c| c.as_str().to_owned()),
            EngineError::InvalidRequest { message },
        ))
    };
    let json = js::request_json(request).map_err(invalid)?;
    let Some(command) = command else {
        return Call::from_json(&json);
    };
    let mut value: serde_json::Value = serde_json::from_str(&json)
        .map_err(|e| invalid(format!("request is not valid JSON: {e}")))?;
    let Some(object) = value.as_object_mut() else {
        return Err(invalid(format!(
            "a `{command}` request is an object of its fields, e.g. {{\"agent\": \"worker\"}}"
        )));
    };
    match object.get("command") {
        None => {
            object.insert("command".to_owned(), command.as_str().into());
        }
        Some(serde_json::Value::String(named)) if named == command.as_str() => {}
        Some(named) => {
            return Err(invalid(format!(
                "this method runs `{command}` but the request names {named}; drop its `command` field, or pass it to execute()"
            )));
        }
    }
    Call::from_value(value)
}

/// Refuses `options` unless it is an options object (or nothing) whose
/// names are all in `allowed`; `function` names the call in the message,
/// and `why` says, after the list, why others are refused.
pub(crate) fn check_names(
    options: &JsValue,
    function: &str,
    allowed: &[&str],
    why: &str,
) -> Result<(), JsValue> {
    if !(options.is_undefined() || options.is_null() || options.is_object()) {
        return Err(js::invalid(format!(
            "{function} takes an options object, e.g. {{store: \"sqlite\"}}"
        )));
    }
    match js::option_names(options)
        .into_iter()
        .find(|name| !allowed.contains(&name.as_str()))
    {
        Some(unknown) => Err(js::invalid(format!(
            "unknown option `{unknown}`; {function} takes {}{why}",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The `store` option: `memory` when absent.
pub(crate) fn store_option(options: &JsValue) -> Result<StoreKind, JsValue> {
    match js::option(options, "store") {
        v if v.is_undefined() => Ok(StoreKind::Memory),
        v => v
            .as_string()
            .and_then(|s| StoreKind::parse(&s))
            .ok_or_else(|| {
                js::invalid(format!(
                    "`store` must be \"memory\", \"sqlite\", \"opfs\" or \"file\", not {}",
                    describe(&v)
                ))
            }),
    }
}

/// Reads and checks `Inbox.open`'s options.
fn open_options(options: &JsValue) -> Result<OpenOptions, JsValue> {
    check_names(options, "Inbox.open", OPTIONS, "")?;
    let store = store_option(options)?;
    let path = match js::option(options, "path") {
        v if v.is_undefined() && store == StoreKind::File => {
            return Err(js::invalid(
                "store: \"file\" needs `path`, the database file, e.g. \".agents/coord.db\"",
            ));
        }
        v if v.is_undefined() => "inbox.db".to_owned(),
        v if !matches!(store, StoreKind::Opfs | StoreKind::File) => {
            return Err(js::invalid(format!(
                "`path` names a database file and goes with store: \"opfs\" or \"file\", not \"{}\" (got {})",
                store.as_str(),
                describe(&v)
            )));
        }
        v => match v.as_string() {
            Some(path) if !path.is_empty() && !path.contains('\0') => path,
            _ => {
                return Err(js::invalid(format!(
                    "`path` must be a non-empty file name, not {}",
                    describe(&v)
                )));
            }
        },
    };
    let bytes = match js::option(options, "bytes") {
        v if v.is_undefined() => None,
        v if store != StoreKind::Sqlite => {
            return Err(js::invalid(format!(
                "`bytes` (a database to start from) goes with store: \"sqlite\", not \"{}\" (got {})",
                store.as_str(),
                describe(&v)
            )));
        }
        v if v.is_instance_of::<Uint8Array>() => Some(Uint8Array::from(v).to_vec()),
        v if v.is_instance_of::<js_sys::ArrayBuffer>() => Some(Uint8Array::new(&v).to_vec()),
        v => {
            return Err(js::invalid(format!(
                "`bytes` must be a Uint8Array or ArrayBuffer of a database file, not {}",
                describe(&v)
            )));
        }
    };
    let now = match js::option(options, "now") {
        v if v.is_undefined() => None,
        v => {
            let text = v.as_string().ok_or_else(|| {
                js::invalid(format!(
                    "`now` must be a timestamp string like \"2026-01-01T00:00:00Z\", not {}",
                    describe(&v)
                ))
            })?;
            Some(
                Timestamp::parse(&text)
                    .map_err(|e| js::invalid(format!("`now` is not a timestamp: {e}")))?,
            )
        }
    };
    if now.is_some() && matches!(store, StoreKind::File) {
        // A shared file's leases are judged by the one clock every process
        // on the machine reads; a clock of this Inbox's own would expire
        // other agents' live leases (see docs/safety.md#time).
        return Err(js::invalid(
            "`now` cannot be used with store \"file\": a database shared with other processes \
             keeps the machine's time, or one process's clock would expire the others' leases; \
             use `now` with store \"memory\" or \"sqlite\""
                .to_owned(),
        ));
    }
    Ok(OpenOptions {
        store,
        path,
        bytes,
        now,
    })
}

/// A short description of a JS value for error messages.
pub(crate) fn describe(value: &JsValue) -> String {
    if let Some(text) = value.as_string() {
        return format!("\"{text}\"");
    }
    if let Some(number) = value.as_f64() {
        return number.to_string();
    }
    if value.is_null() {
        return "null".to_owned();
    }
    value
        .js_typeof()
        .as_string()
        .unwrap_or_else(|| "a value".to_owned())
}

/// Generates one `Inbox` method per row of the engine's command table: a
/// synchronous method for most commands, a Promise for those that wait
/// ([`Effect::Wait`]). wasm-bindgen's own declarations of them are left out
/// (`skip_typescript`) in favour of typed signatures written from the same
/// rows into an `interface Inbox`, which TypeScript merges into the class.
/// The request is optional in every signature, as in the types: a missing
/// field is the engine's `missing_field`, with a hint, not a type error.
macro_rules! methods {
    ($({
        docs: [$($doc:tt)+],
        variant: $variant:ident,
        name: $name:tt,
        handler: $handler:ident,
        js: [$js:ident $($_snake:ident)?],
        request: $request:ident,
        acting: [$($acting:ident)?],
        output: $output:ident,
        or_nothing: [$($or_nothing:ident)?],
        effect: $effect:ident,
        writes_if: [$($flag:ident)?],
        transactions: [$($own:ident)?],
    })+) => {
        $(methods!(@method $effect, [$($doc)+], $variant, $handler, $js);)+

        /// The typed signature of every generated method.
        #[wasm_bindgen(typescript_custom_section)]
        const METHODS_TS: &str = concat!(
            "export interface Inbox {\n",
            $(methods!(@signature $effect, [$($doc)+], $name, $js, $request),)+
            "}\n",
        );
    };
    (@method Wait, [$($doc:tt)+], $variant:ident, $handler:ident, $js:ident) => {
        #[wasm_bindgen]
        impl Inbox {
            $(#[doc = $doc])+
            #[wasm_bindgen(js_name = $js, skip_typescript)]
            pub fn $handler(&self, request: JsValue) -> Promise {
                self.wait(Command::$variant, &request)
            }
        }
    };
    (@method $effect:ident, [$($doc:tt)+], $variant:ident, $handler:ident, $js:ident) => {
        #[wasm_bindgen]
        impl Inbox {
            $(#[doc = $doc])+
            #[wasm_bindgen(js_name = $js, skip_typescript)]
            pub fn $handler(&self, request: JsValue) -> Result<JsValue, JsValue> {
                self.command(Command::$variant, &request)
            }
        }
    };
    (@signature Wait, [$($doc:tt)+], $name:tt, $js:ident, $request:ident) => {
        concat!(
            "  /**", $($doc, "\n   *",)+
            " Resolves when a later command of this inbox commits what it waits for, or when\n",
            "   * `timeout_seconds` pass (`woke: false`); rejects with an `InboxError` for a bad request.\n",
            "   */\n",
            "  ", stringify!($js), "(request?: ", stringify!($request),
            " & Credentials): Promise<Success<\"", $name, "\">>;\n",
        )
    };
    (@signature Write, [$($doc:tt)+], $name:tt, $js:ident, $request:ident) => {
        concat!(
            "  /**", $($doc, "\n   *",)+ "/\n",
            "  ", stringify!($js), "(request?: ", stringify!($request),
            " & Envelope): Success<\"", $name, "\">;\n",
        )
    };
    (@signature $effect:ident, [$($doc:tt)+], $name:tt, $js:ident, $request:ident) => {
        concat!(
            "  /**", $($doc, "\n   *",)+ "/\n",
            "  ", stringify!($js), "(request?: ", stringify!($request),
            "): Success<\"", $name, "\">;\n",
        )
    };
}

inbox_engine::for_each_command!(methods);
