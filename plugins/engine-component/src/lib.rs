//! The inbox engine as a WebAssembly component: the world `inbox:engine/plugin`
//! of `plugins/wit/inbox.wit`. Storage, time and entropy are imported from
//! the host; the engine's entry points (`execute`, `run-script`) are exported.
//!
//! This crate is a thin adapter, as `host-wasm` is for JavaScript: it turns
//! the host's store imports into the engine's [`inbox_engine::Store`] trait
//! and passes the wire format through. It must never hold an inbox rule of
//! its own, and it imports nothing but our interfaces (no WASI): built for
//! `wasm32-unknown-unknown` and componentized with `wit-component` by
//! `inbox-plugin-build`, the engine inside the sandbox cannot see a file.
//!
//! - `host_store`: the engine's `Store` trait over the `store` import;
//! - `convert`: engine records to and from the WIT records (one macro,
//!   shared with the host, in `inbox-plugin-convert`).
//!
//! On a native target the crate is empty.

/// Engine records to and from the WIT records.
#[cfg(target_family = "wasm")]
mod convert {
    inbox_plugin_convert::wit_conversions!(crate::bindings::inbox::engine::types);
}
#[cfg(target_family = "wasm")]
mod host_store;

/// The bindings wit-bindgen generates for the world. Its glue (canonical ABI
/// lifting and lowering) is the only unsafe code in the crate.
#[cfg(target_family = "wasm")]
#[allow(unsafe_code, missing_docs, unreachable_pub, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        default_bindings_module: "crate::bindings",
    });
}

#[cfg(target_family = "wasm")]
mod component {
    use std::cell::RefCell;

    use inbox_engine::{Clock, Engine, Timestamp, UlidIds};

    use crate::bindings::exports::inbox::engine::engine::{Guest, Response, Transcript};
    use crate::bindings::inbox::engine::{clock, entropy};
    use crate::host_store::HostStore;

    /// The host's clock.
    struct HostClock;

    impl Clock for HostClock {
        fn now(&mut self) -> Timestamp {
            Timestamp::from_millis(clock::now())
        }
    }

    thread_local! {
        // One engine per instance, made on the first command: the id
        // generator keeps its state (monotonic ids) between commands, and
        // its seed is asked of the host once.
        static ENGINE: RefCell<Option<Engine<HostStore, HostClock, UlidIds>>> =
            const { RefCell::new(None) };
    }

    /// A secret's bytes from the host's cryptographic source, asked each
    /// time one is needed; `None` when the host has none.
    fn secret_bytes() -> Option<[u8; 32]> {
        entropy::secret_bytes().try_into().ok()
    }

    struct Component;

    impl Guest for Component {
        fn execute(request: String) -> Response {
            let response = ENGINE.with_borrow_mut(|engine| {
                engine
                    .get_or_insert_with(|| {
                        let ids = UlidIds::from_seed(entropy::seed()).with_secrets(secret_bytes);
                        Engine::new(HostStore, HostClock, ids)
                    })
                    .execute_json(&request)
            });
            Response {
                exit_code: response.exit_code(),
                json: response.to_json(),
            }
        }

        fn run_script(script: String) -> Result<Transcript, String> {
            let transcript =
                inbox_engine::run_script(&script, HostStore).map_err(|e| e.to_string())?;
            Ok(Transcript {
                text: transcript.text,
                failures: transcript.failures,
            })
        }
    }

    // The export glue is unsafe (raw canonical-ABI entry points).
    #[allow(unsafe_code)]
    mod export {
        use super::Component;
        crate::bindings::export!(Component);
    }
}
