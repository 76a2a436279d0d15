//! The board's JSON API: `POST /api/COMMAND` with the command's JSON
//! request as the body (the fields `--json` commands take), answered with
//! exactly what `inbox COMMAND --json` prints, and an HTTP status that says
//! what its exit code says.
//!
//! Only the commands a board needs are served, and only with the board's
//! token (see [`crate::guard`]): reads (threads, a thread's history, the
//! agents, orch's runs, status and ready queue) always; `send`, `reply`
//! and `cancel` only on a board started with `--write`, made as the
//! board's `--as` agent
//! (a write naming another agent is refused, as `inbox mcp` refuses it).
//! Every request is decoded and checked by the engine and runs on a
//! blocking thread through the same code as a command
//! (`inbox_host_native::run::execute`), on a connection opened for it and closed after:
//! an open costs about a millisecond on SQLite, far below what a person
//! notices, and nothing is held between requests that another process
//! could be kept waiting on. This module must never apply an inbox rule.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use inbox_engine::{Call, Command, EngineError};
use serde_json::Value;

use crate::Board;
use crate::error::{BoardError, json};

/// The largest request body: a task's body is at most 1 MiB of text, and
/// its JSON escaping needs a little more.
pub(crate) const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// The reads the board serves to whoever has its token.
const READS: &[Command] = &[
    Command::List,
    Command::Show,
    Command::AgentList,
    Command::OrchRunList,
    Command::OrchStatus,
    Command::OrchTaskShow,
    Command::OrchReady,
    Command::Version,
];

/// The writes a board started with `--write` serves.
const WRITES: &[Command] = &[Command::Send, Command::Reply, Command::Cancel];

/// The API's routes.
pub(crate) fn routes() -> Router<Arc<Board>> {
    Router::new()
        .route("/api/board", get(about))
        .route("/api/{command}", post(call))
}

/// `GET /api/board`: what the page needs to know of this board: whether
/// it may write, and as whom.
async fn about(State(board): State<Arc<Board>>) -> Response {
    let about = serde_json::json!({
        "ok": true,
        "command": "board",
        "write": board.guard.writes(),
        "as": board.human,
    });
    json(StatusCode::OK, about.to_string())
}

/// `POST /api/COMMAND`.
async fn call(
    State(board): State<Arc<Board>>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let command = match served(&name) {
        Ok(command) => command,
        Err(refusal) => return refusal.answer(None),
    };
    let writes = WRITES.contains(&command);
    if writes && let Err(refusal) = board.guard.may_write() {
        return refusal.answer(Some(command.as_str()));
    }
    let call = match request(&board, command, writes, body) {
        Ok(call) => call,
        Err(refusal) => return *refusal,
    };
    let global = Arc::clone(&board.global);
    let ran =
        tokio::task::spawn_blocking(move || inbox_host_native::run::execute(&global, call, None));
    let response = match ran.await {
        Ok(Some(response)) => response,
        Ok(None) | Err(_) => inbox_engine::Response::failure(
            Some(command.as_str().into()),
            EngineError::Internal {
                message: format!("{command} stopped before it answered"),
            },
        ),
    };
    answer(&response)
}

/// The command a path names, if the board serves it.
fn served(name: &str) -> Result<Command, BoardError> {
    Command::parse(name)
        .filter(|command| READS.contains(command) || WRITES.contains(command))
        .ok_or_else(|| BoardError::NotServed {
            what: format!("`/api/{name}`"),
            served: format!(
                "it serves {}",
                READS
                    .iter()
                    .chain(WRITES)
                    .map(|c| format!("/api/{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// The call a body makes, decoded by the engine; a write made as the
/// board's agent, with the agent token the board was started with.
fn request(
    board: &Board,
    command: Command,
    writes: bool,
    body: Result<Bytes, BytesRejection>,
) -> Result<Call, Box<Response>> {
    let refuse = |error: EngineError| {
        Box::new(answer(&inbox_engine::Response::failure(
            Some(command.as_str().into()),
            error,
        )))
    };
    let body = body.map_err(|rejection| {
        let mut refusal = refuse(EngineError::TooLong {
            field: "body".into(),
            actual: None,
            limit: BODY_LIMIT,
            unit: "bytes",
        });
        // axum knows why the body could not be read (413 when too large).
        *refusal.status_mut() = rejection.status();
        refusal
    })?;
    let mut fields = if body.is_empty() {
        serde_json::Map::new()
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(fields)) => fields,
            Ok(_) => {
                return Err(refuse(invalid(
                    "the body must be a JSON object of the request's fields",
                )));
            }
            Err(error) => {
                return Err(refuse(invalid(&format!(
                    "the body is not valid JSON: {error}"
                ))));
            }
        }
    };
    if writes {
        let acts_as = format!(
            "this board writes as `{0}` (inbox serve --as {0})",
            board.human
        );
        inbox_host_native::hosted::act_as(command, &board.human, &mut fields, &acts_as)
            .map_err(refuse)?;
    }
    fields.insert("command".into(), command.as_str().into());
    let mut call =
        Call::from_value(Value::Object(fields)).map_err(|refusal| Box::new(answer(&refusal)))?;
    // `show` with `mark_read` writes (a read cursor): only a writing board.
    if !writes && call.request.effect() != inbox_engine::Effect::Read {
        return Err(Box::new(
            BoardError::ReadOnly.answer(Some(command.as_str())),
        ));
    }
    call.agent_token = if writes {
        board.global.agent_token.clone()
    } else {
        None
    };
    Ok(call)
}

fn invalid(message: &str) -> EngineError {
    EngineError::InvalidRequest {
        message: message.to_owned(),
    }
}

/// An engine response as HTTP: the JSON `--json` prints, with the status
/// its exit code means (10, "nothing found", is still a success).
pub(crate) fn answer(response: &inbox_engine::Response) -> Response {
    let status = match response.exit_code() {
        0 | 10 => StatusCode::OK,
        20 => StatusCode::CONFLICT,
        30 => StatusCode::BAD_REQUEST,
        40 => StatusCode::NOT_FOUND,
        _ => match response.error().map(EngineError::code) {
            Some(inbox_engine::ErrorCode::StorageBusy) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        },
    };
    json(status, response.to_json())
}
