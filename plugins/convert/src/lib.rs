//! The inbox engine's records to and from the WIT records of the package
//! `inbox:engine` (`plugins/wit/inbox.wit`), for both sides of the plugin
//! boundary: the guest (wit-bindgen's types, in `inbox-engine-component`)
//! and the host (wasmtime's `bindgen!` types, in `inbox-plugin-host`).
//!
//! The two generators make different Rust types from the same WIT, with the
//! same field and variant names, so one macro, [`wit_conversions!`], writes
//! the conversions for either: invoke it with the path of the generated
//! `types` module and it defines `<record>_to_wit` and `<record>_from_wit`
//! functions in the calling module. Field for field, no logic; this crate
//! must never hold an inbox rule.
//!
//! JSON objects (payloads, metadata) cross as text, and so do orch's records
//! (runs, tasks, attempts, orch events, their queries: the engine's JSON, as
//! the SQLite store keeps them). Text that does not decode becomes a [`StoreError`](https://docs.rs/inbox-engine) naming the
//! field, never a panic: each side checks what the other sent.
//!
//! Written as a macro rather than generic code because the generated types
//! share names, not traits; a macro costs one expansion per side and keeps a
//! single list of fields to update when the WIT changes.

/// Defines the conversions in the calling module. The argument is the path
/// of the generated module for `interface types`, e.g.
/// `crate::bindings::inbox::engine::types`. The calling crate must depend on
/// `inbox-engine` and `serde_json`.
#[macro_export]
macro_rules! wit_conversions {
    ($($types:tt)+) => {
        #[allow(dead_code, unused_imports, unreachable_pub, missing_docs)]
        mod wit_conversions_impl {
            use ::inbox_engine::store::{EventQuery, MessageQuery, ThreadOrder, ThreadQuery};
            use ::inbox_engine::{
                Artifact, Event, EventType, JsonObject, Kind, Lease, Message, Priority, ReadCursor,
                Status, StoreError, StoreErrorKind, StoreInfo, Thread, ThreadState, Timestamp,
                TxMode,
            };

            use $($types)+ as wit;

            $crate::__vocabulary!(status_to_wit, status_from_wit: Status <=> Status {
                Pending, Claimed, InProgress, Blocked, Done, Failed, Cancelled
            });
            $crate::__vocabulary!(kind_to_wit, kind_from_wit: Kind <=> Kind {
                Task, Progress, Question, Answer, Result, Control, Event
            });
            $crate::__vocabulary!(priority_to_wit, priority_from_wit: Priority <=> Priority { Low, Normal, High });
            $crate::__vocabulary!(event_type_to_wit, event_type_from_wit: EventType <=> EventType {
                ThreadCreated, MessageSent, ThreadClaimed, LeaseRenewed, LeaseExpired,
                ProgressReported, ThreadBlocked, QuestionAnswered, ThreadCompleted,
                ThreadFailed, ThreadCancelled
            });
            $crate::__vocabulary!(thread_order_to_wit, thread_order_from_wit: ThreadOrder <=> ThreadOrder { Queue, NewestFirst });
            $crate::__vocabulary!(tx_mode_to_wit, tx_mode_from_wit: TxMode <=> TxMode { Read, Write });
            $crate::__vocabulary!(store_error_kind_to_wit, store_error_kind_from_wit: StoreErrorKind <=> StoreErrorKind {
                Busy, SchemaTooNew, NotInitialized, Other
            });

            fn at(millis: i64) -> Timestamp {
                Timestamp::from_millis(millis)
            }

            /// A query limit across the boundary (`usize` is 32 bits inside).
            pub fn limit_to_wit(limit: usize) -> u64 {
                u64::try_from(limit).unwrap_or(u64::MAX)
            }

            /// A query limit from across the boundary.
            pub fn limit_from_wit(limit: u64) -> usize {
                usize::try_from(limit).unwrap_or(usize::MAX)
            }

            fn json_to_wit(object: &JsonObject) -> String {
                serde_json::Value::Object(object.clone()).to_string()
            }

            fn json_from_wit(text: &str, field: &str) -> Result<JsonObject, StoreError> {
                match serde_json::from_str(text) {
                    Ok(serde_json::Value::Object(object)) => Ok(object),
                    _ => Err(StoreError::other(format!(
                        "the other side of the plugin boundary sent a {field} that is not a JSON object"
                    ))),
                }
            }

            pub fn store_error_to_wit(error: &StoreError) -> wit::StoreError {
                wit::StoreError {
                    kind: store_error_kind_to_wit(error.kind),
                    message: error.message.clone(),
                }
            }

            pub fn store_error_from_wit(error: wit::StoreError) -> StoreError {
                StoreError::new(store_error_kind_from_wit(error.kind), error.message)
            }

            pub fn store_info_to_wit(info: StoreInfo) -> wit::StoreInfo {
                wit::StoreInfo {
                    location: info.location,
                    schema_version: info.schema_version,
                }
            }

            pub fn store_info_from_wit(info: wit::StoreInfo) -> StoreInfo {
                StoreInfo {
                    location: info.location,
                    schema_version: info.schema_version,
                }
            }

            pub fn thread_to_wit(thread: &Thread) -> wit::Thread {
                wit::Thread {
                    thread_id: thread.thread_id.clone(),
                    run_id: thread.run_id.clone(),
                    task_id: thread.task_id.clone(),
                    subject: thread.subject.clone(),
                    created_by: thread.created_by.clone(),
                    assigned_to: thread.assigned_to.clone(),
                    status: status_to_wit(thread.status),
                    priority: priority_to_wit(thread.priority),
                    attempts: thread.attempts,
                    max_attempts: thread.max_attempts,
                    latest_message_id: thread.latest_message_id.clone(),
                    last_event_id: thread.last_event_id,
                    created_at: thread.created_at.as_millis(),
                    updated_at: thread.updated_at.as_millis(),
                }
            }

            pub fn thread_from_wit(thread: wit::Thread) -> Thread {
                Thread {
                    thread_id: thread.thread_id,
                    run_id: thread.run_id,
                    task_id: thread.task_id,
                    subject: thread.subject,
                    created_by: thread.created_by,
                    assigned_to: thread.assigned_to,
                    status: status_from_wit(thread.status),
                    priority: priority_from_wit(thread.priority),
                    attempts: thread.attempts,
                    max_attempts: thread.max_attempts,
                    latest_message_id: thread.latest_message_id,
                    last_event_id: thread.last_event_id,
                    created_at: at(thread.created_at),
                    updated_at: at(thread.updated_at),
                }
            }

            pub fn lease_to_wit(lease: &Lease) -> wit::Lease {
                wit::Lease {
                    thread_id: lease.thread_id.clone(),
                    agent: lease.agent.clone(),
                    lease_token: lease.lease_token,
                    attempt: lease.attempt,
                    lease_seconds: lease.lease_seconds,
                    claimed_at: lease.claimed_at.as_millis(),
                    expires_at: lease.expires_at.as_millis(),
                    released_at: lease.released_at.map(Timestamp::as_millis),
                }
            }

            pub fn lease_from_wit(lease: wit::Lease) -> Lease {
                Lease {
                    thread_id: lease.thread_id,
                    agent: lease.agent,
                    lease_token: lease.lease_token,
                    attempt: lease.attempt,
                    lease_seconds: lease.lease_seconds,
                    claimed_at: at(lease.claimed_at),
                    expires_at: at(lease.expires_at),
                    released_at: lease.released_at.map(at),
                }
            }

            pub fn thread_state_to_wit(state: &ThreadState) -> wit::ThreadState {
                wit::ThreadState {
                    thread: thread_to_wit(&state.thread),
                    lease: state.lease.as_ref().map(lease_to_wit),
                }
            }

            pub fn thread_state_from_wit(state: wit::ThreadState) -> ThreadState {
                ThreadState {
                    thread: thread_from_wit(state.thread),
                    lease: state.lease.map(lease_from_wit),
                }
            }

            fn artifact_to_wit(artifact: &Artifact) -> wit::Artifact {
                wit::Artifact {
                    artifact_id: artifact.artifact_id.clone(),
                    message_id: artifact.message_id.clone(),
                    path: artifact.path.clone(),
                    kind: artifact.kind.clone(),
                    metadata: json_to_wit(&artifact.metadata),
                    absolute_path: artifact.absolute_path.clone(),
                    size_bytes: artifact.size_bytes,
                    sha256: artifact.sha256.clone(),
                    created_at: artifact.created_at.as_millis(),
                }
            }

            fn artifact_from_wit(artifact: wit::Artifact) -> Result<Artifact, StoreError> {
                Ok(Artifact {
                    metadata: json_from_wit(&artifact.metadata, "artifact metadata")?,
                    artifact_id: artifact.artifact_id,
                    message_id: artifact.message_id,
                    path: artifact.path,
                    kind: artifact.kind,
                    absolute_path: artifact.absolute_path,
                    size_bytes: artifact.size_bytes,
                    sha256: artifact.sha256,
                    created_at: at(artifact.created_at),
                })
            }

            pub fn message_to_wit(message: &Message) -> wit::Message {
                wit::Message {
                    message_id: message.message_id.clone(),
                    thread_id: message.thread_id.clone(),
                    event_id: message.event_id,
                    from_agent: message.from_agent.clone(),
                    to_agent: message.to_agent.clone(),
                    kind: kind_to_wit(message.kind),
                    summary: message.summary.clone(),
                    body: message.body.clone(),
                    payload: json_to_wit(&message.payload),
                    created_at: message.created_at.as_millis(),
                    artifacts: message.artifacts.iter().map(artifact_to_wit).collect(),
                }
            }

            pub fn message_from_wit(message: wit::Message) -> Result<Message, StoreError> {
                Ok(Message {
                    payload: json_from_wit(&message.payload, "message payload")?,
                    artifacts: message
                        .artifacts
                        .into_iter()
                        .map(artifact_from_wit)
                        .collect::<Result<_, _>>()?,
                    message_id: message.message_id,
                    thread_id: message.thread_id,
                    event_id: message.event_id,
                    from_agent: message.from_agent,
                    to_agent: message.to_agent,
                    kind: kind_from_wit(message.kind),
                    summary: message.summary,
                    body: message.body,
                    created_at: at(message.created_at),
                })
            }

            pub fn event_to_wit(event: &Event) -> wit::Event {
                wit::Event {
                    event_id: event.event_id,
                    thread_id: event.thread_id.clone(),
                    run_id: event.run_id.clone(),
                    task_id: event.task_id.clone(),
                    event_type: event_type_to_wit(event.event_type),
                    source: event.source.clone(),
                    message_id: event.message_id.clone(),
                    message_kind: event.message_kind.map(kind_to_wit),
                    status: status_to_wit(event.status),
                    summary: event.summary.clone(),
                    payload: json_to_wit(&event.payload),
                    created_at: event.created_at.as_millis(),
                }
            }

            pub fn event_from_wit(event: wit::Event) -> Result<Event, StoreError> {
                Ok(Event {
                    payload: json_from_wit(&event.payload, "event payload")?,
                    event_id: event.event_id,
                    thread_id: event.thread_id,
                    run_id: event.run_id,
                    task_id: event.task_id,
                    event_type: event_type_from_wit(event.event_type),
                    source: event.source,
                    message_id: event.message_id,
                    message_kind: event.message_kind.map(kind_from_wit),
                    status: status_from_wit(event.status),
                    summary: event.summary,
                    created_at: at(event.created_at),
                })
            }

            pub fn read_cursor_to_wit(cursor: &ReadCursor) -> wit::ReadCursor {
                wit::ReadCursor {
                    thread_id: cursor.thread_id.clone(),
                    agent: cursor.agent.clone(),
                    last_read_message_id: cursor.last_read_message_id.clone(),
                    last_read_event_id: cursor.last_read_event_id,
                    last_read_at: cursor.last_read_at.as_millis(),
                }
            }

            pub fn read_cursor_from_wit(cursor: wit::ReadCursor) -> ReadCursor {
                ReadCursor {
                    thread_id: cursor.thread_id,
                    agent: cursor.agent,
                    last_read_message_id: cursor.last_read_message_id,
                    last_read_event_id: cursor.last_read_event_id,
                    last_read_at: at(cursor.last_read_at),
                }
            }

            pub fn thread_query_to_wit(query: &ThreadQuery) -> wit::ThreadQuery {
                wit::ThreadQuery {
                    thread_id: query.thread_id.clone(),
                    statuses: query.statuses.iter().copied().map(status_to_wit).collect(),
                    assigned_to: query.assigned_to.clone(),
                    created_by: query.created_by.clone(),
                    agent: query.agent.clone(),
                    run_id: query.run_id.clone(),
                    task_id: query.task_id.clone(),
                    unread: query.unread.clone(),
                    released_leases: query.released_leases,
                    order: thread_order_to_wit(query.order),
                    limit: limit_to_wit(query.limit),
                }
            }

            pub fn thread_query_from_wit(query: wit::ThreadQuery) -> ThreadQuery {
                ThreadQuery {
                    thread_id: query.thread_id,
                    statuses: query.statuses.into_iter().map(status_from_wit).collect(),
                    assigned_to: query.assigned_to,
                    created_by: query.created_by,
                    agent: query.agent,
                    run_id: query.run_id,
                    task_id: query.task_id,
                    unread: query.unread,
                    released_leases: query.released_leases,
                    order: thread_order_from_wit(query.order),
                    limit: limit_from_wit(query.limit),
                }
            }

            pub fn event_query_to_wit(query: &EventQuery) -> wit::EventQuery {
                wit::EventQuery {
                    after_event: query.after_event,
                    thread_id: query.thread_id.clone(),
                    run_id: query.run_id.clone(),
                    agent: query.agent.clone(),
                    statuses: query.statuses.iter().copied().map(status_to_wit).collect(),
                    event_types: query.event_types.iter().copied().map(event_type_to_wit).collect(),
                    message_kinds: query.message_kinds.iter().copied().map(kind_to_wit).collect(),
                    source: query.source.clone(),
                    exclude_source: query.exclude_source.clone(),
                    limit: limit_to_wit(query.limit),
                }
            }

            pub fn event_query_from_wit(query: wit::EventQuery) -> EventQuery {
                EventQuery {
                    after_event: query.after_event,
                    thread_id: query.thread_id,
                    run_id: query.run_id,
                    agent: query.agent,
                    statuses: query.statuses.into_iter().map(status_from_wit).collect(),
                    event_types: query.event_types.into_iter().map(event_type_from_wit).collect(),
                    message_kinds: query.message_kinds.into_iter().map(kind_from_wit).collect(),
                    source: query.source,
                    exclude_source: query.exclude_source,
                    limit: limit_from_wit(query.limit),
                }
            }

            pub fn message_query_to_wit(query: &MessageQuery) -> wit::MessageQuery {
                wit::MessageQuery {
                    thread_id: query.thread_id.clone(),
                    from_agent: query.from_agent.clone(),
                    after_event: query.after_event,
                    newest_first: query.newest_first,
                    limit: limit_to_wit(query.limit),
                }
            }

            pub fn message_query_from_wit(query: wit::MessageQuery) -> MessageQuery {
                MessageQuery {
                    thread_id: query.thread_id,
                    from_agent: query.from_agent,
                    after_event: query.after_event,
                    newest_first: query.newest_first,
                    limit: limit_from_wit(query.limit),
                }
            }

            $crate::__json_records! {
                run: ::inbox_engine::orch::model::Run,
                task: ::inbox_engine::orch::model::Task,
                attempt: ::inbox_engine::orch::model::Attempt,
                orch_event: ::inbox_engine::orch::model::OrchEvent,
                run_query: ::inbox_engine::orch::query::RunQuery,
                task_query: ::inbox_engine::orch::query::TaskQuery,
                orch_event_query: ::inbox_engine::orch::query::OrchEventQuery,
                agent: ::inbox_engine::Agent,
                agent_query: ::inbox_engine::store::AgentQuery,
                mailbox_query: ::inbox_engine::store::MailboxQuery,
                idempotency: ::inbox_engine::IdempotencyRecord,
                settings: ::inbox_engine::Settings,
                thread_page: ::inbox_engine::store::ThreadPage,
            }
        }
        #[allow(unused_imports)]
        pub(crate) use wit_conversions_impl::*;
    };
}

/// orch's records and queries cross the boundary as the engine's JSON (the
/// shape the SQLite store keeps them in): a module per record with
/// `to_json` and `from_json`, the latter reporting text that does not
/// decode as a [`StoreError`](https://docs.rs/inbox-engine) rather than
/// panicking. Used by [`wit_conversions!`] only.
#[doc(hidden)]
#[macro_export]
macro_rules! __json_records {
    ($($name:ident: $type:ty,)+) => { $(
        pub mod $name {
            pub fn to_json(value: &$type) -> String {
                // Records of plain data always serialize.
                ::serde_json::to_string(value).unwrap_or_default()
            }

            pub fn from_json(text: &str) -> Result<$type, ::inbox_engine::StoreError> {
                ::serde_json::from_str(text).map_err(|e| {
                    ::inbox_engine::StoreError::other(format!(
                        concat!("a ", stringify!($name), " record across the plugin boundary does not decode: {}"),
                        e
                    ))
                })
            }
        }
    )+ };
}

/// One vocabulary enum both ways, as the two named functions. The variants
/// are spelled the same on both sides. Used by [`wit_conversions!`] only.
#[doc(hidden)]
#[macro_export]
macro_rules! __vocabulary {
    ($to:ident, $from:ident : $engine:ident <=> $wit:ident { $($variant:ident),+ $(,)? }) => {
        pub fn $to(value: $engine) -> wit::$wit {
            match value {
                $($engine::$variant => wit::$wit::$variant,)+
            }
        }

        pub fn $from(value: wit::$wit) -> $engine {
            match value {
                $(wit::$wit::$variant => $engine::$variant,)+
            }
        }
    };
}
