//! A component of the world `inbox:engine/plugin` that misbehaves on
//! request, so the plugin host's tests can prove their limits with a real
//! component instead of a mock: whatever a plugin does, the host returns a
//! clean error, rolls back and keeps the database intact.
//!
//! `execute` reads its request as one word:
//!
//! - `trap-mid-transaction`: opens a write transaction, writes a thread
//!   through the host's store, then traps before committing;
//! - `loop`: spins forever (the fuel limit must stop it);
//! - `grow`: allocates without end (the memory cap must stop it);
//! - `begin-and-return`: opens a write transaction, writes a thread and
//!   returns without committing (the host must roll back);
//! - anything else: a well-formed `version` response.
//!
//! Test-only: it is never shipped, and it holds no inbox rule.

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
    use crate::bindings::exports::inbox::engine::engine::{Guest, Response, Transcript};
    use crate::bindings::inbox::engine::store;
    use crate::bindings::inbox::engine::types::{Priority, Status, Thread, TxMode};

    struct Component;

    fn write_a_thread() {
        // Results are ignored on purpose: the test then checks the store.
        let _ = store::begin(TxMode::Write);
        let _ = store::insert_thread(&Thread {
            thread_id: "thr_partial".into(),
            run_id: None,
            task_id: None,
            subject: "must never be committed".into(),
            created_by: "fault".into(),
            assigned_to: "fault".into(),
            status: Status::Pending,
            priority: Priority::Normal,
            attempts: 0,
            max_attempts: 3,
            latest_message_id: None,
            last_event_id: 0,
            created_at: 0,
            updated_at: 0,
        });
    }

    impl Guest for Component {
        fn execute(request: String) -> Response {
            match request.as_str() {
                "trap-mid-transaction" => {
                    write_a_thread();
                    core::arch::wasm32::unreachable()
                }
                "loop" => {
                    let mut spins: u64 = 0;
                    loop {
                        spins = std::hint::black_box(spins.wrapping_add(1));
                    }
                }
                "grow" => {
                    let mut hoard: Vec<Vec<u8>> = Vec::new();
                    loop {
                        hoard.push(std::hint::black_box(vec![1; 1 << 20]));
                    }
                }
                "begin-and-return" => {
                    write_a_thread();
                    Response {
                        exit_code: 0,
                        json: r#"{"ok":true,"command":"version","engine_version":"fault","wire_version":1}"#.into(),
                    }
                }
                _ => Response {
                    exit_code: 0,
                    json: r#"{"ok":true,"command":"version","engine_version":"fault","wire_version":1}"#.into(),
                },
            }
        }

        fn run_script(_script: String) -> Result<Transcript, String> {
            Err("the fault component runs no scripts".into())
        }
    }

    // The export glue is unsafe (raw canonical-ABI entry points).
    #[allow(unsafe_code)]
    mod export {
        use super::Component;
        crate::bindings::export!(Component);
    }
}
