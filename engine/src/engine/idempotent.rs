//! Idempotency keys: a write retried with the same key and the same request
//! returns its first outcome and changes nothing; the same key with another
//! request is refused (`idempotency_conflict`).
//!
//! The key is looked up first thing in the write's transaction, before the
//! lapse sweep, and the outcome is recorded in the same transaction as the
//! write, so a write and its record commit together or not at all: a crash
//! between them cannot make a retry apply twice. Only writes that run in
//! one engine transaction take a key (not `init` and `sweep`, which manage
//! their own, nor reads and waits, which change nothing). Failed commands
//! record nothing: they changed nothing, so a retry simply runs again.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::call::{self, Call};
use crate::command::Command;
use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::IdempotencyRecord;
use crate::store::Store;

use super::tx::Tx;

/// A key to honour in the next write transaction.
#[derive(Clone)]
pub(super) struct Pending {
    key: String,
    command: Command,
    fingerprint: String,
}

impl Pending {
    /// The call's key, checked ([`Call::check`]); `None` without one.
    pub(super) fn of(call: &Call) -> Result<Option<Pending>, EngineError> {
        call.check()?;
        Ok(call.idempotency_key.as_ref().map(|key| Pending {
            key: key.clone(),
            command: call.request.command(),
            fingerprint: call::fingerprint(&call.request),
        }))
    }
}

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// The first outcome of this key's write, if it was applied; refuses a
    /// key used for another request.
    pub(super) fn replay<T: DeserializeOwned>(
        &mut self,
        pending: &Pending,
    ) -> Result<Option<T>, EngineError> {
        let Some(record) = self.store.idempotency(&pending.key)? else {
            return Ok(None);
        };
        if record.command != pending.command.as_str()
            || record.request_sha256 != pending.fingerprint
        {
            return Err(EngineError::IdempotencyConflict {
                key: record.key,
                command: record.command,
                created_at: record.created_at,
            });
        }
        serde_json::from_value(record.output)
            .map(Some)
            .map_err(|e| {
                EngineError::internal(format!(
                    "the outcome kept for idempotency key {} does not decode: {e}",
                    pending.key
                ))
            })
    }

    /// Records `output` as the outcome of this key's write, without a new
    /// agent token in it: a token is shown once and stored only as a hash,
    /// so a replay of `agent-register` answers without it.
    pub(super) fn remember<T: Serialize>(
        &mut self,
        pending: Pending,
        output: &T,
    ) -> Result<(), EngineError> {
        let mut output = serde_json::to_value(output)
            .map_err(|e| EngineError::internal(format!("an outcome does not encode: {e}")))?;
        if let Some(object) = output.as_object_mut() {
            object.remove(call::AGENT_TOKEN);
        }
        self.store.put_idempotency(&IdempotencyRecord {
            key: pending.key,
            command: pending.command.as_str().to_owned(),
            request_sha256: pending.fingerprint,
            output,
            created_at: self.now,
        })?;
        Ok(())
    }
}
