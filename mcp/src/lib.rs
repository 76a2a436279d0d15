//! inbox as a Model Context Protocol server on stdio (`inbox-mcp`), acting
//! as one agent on one database. `inbox mcp ARGS` starts it with the same
//! arguments (read with `inbox`'s own parser, then handed to [`run`]); run
//! by itself it takes the same flags (`inbox-mcp --agent NAME [--db PATH]`).
//!
//! It is a program of its own so that the async runtime and the MCP SDK it
//! needs are never linked into `inbox` or `orch`. The modules: [`catalog`]
//! makes the tools from the command table, [`guidance`] holds everything
//! the server says beyond the table, [`seed`] maps the `mailbox.jsonl`
//! tools onto commands, [`schema`] makes a tool's input schema, [`server`] speaks MCP, [`stdio`] carries it on stdin and
//! stdout and [`jsonrpc`] judges each line that comes in. Requests run
//! through the same code as the command line's (`inbox_host_native::run::execute`).
//! stdout carries the protocol and nothing else: whatever this program has
//! to say for people goes to stderr.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use inbox_engine::EngineError;
use inbox_host_native::Global;
use rmcp::ServiceExt;

mod catalog;
mod guidance;
mod jsonrpc;
mod schema;
mod seed;
mod server;
mod stdio;

/// The most calls other than waits that run at once, on the runtime's
/// blocking pool; more wait their turn (they take milliseconds). Waits
/// run beside them, on threads of their own (see `server`).
const CALLS_AT_ONCE: usize = 32;

/// How long calls still running when the session ends may take to finish
/// before the process exits (a write cut short rolls back whole).
const FINISHING: Duration = Duration::from_secs(2);

/// Serves MCP on stdin and stdout as the agent the global flags name,
/// until the client ends the session, and returns the exit code.
pub fn run(global: Global) -> ExitCode {
    // As in every command, `--json` puts a refusal on stdout as one JSON
    // object; otherwise stdout is left to the protocol alone.
    let json = global.json;
    let refuse = |error: EngineError| refuse(error, json);
    let agent = match inbox_engine::validate::agent("agent", &global.agent) {
        Ok(agent) => agent.to_owned(),
        Err(EngineError::MissingField { .. }) => {
            return refuse(EngineError::MissingField {
                field: "agent".into(),
                hint: "inbox mcp acts as one agent: pass --agent NAME or set INBOX_AGENT".into(),
            });
        }
        Err(error) => return refuse(error),
    };
    // Refused now rather than at every call: a runtime shows a server
    // that does not start, and its stderr says why.
    let database = match inbox_host_native::run::check_database(&global) {
        Ok(database) => database,
        Err(error) => return refuse(error),
    };
    log(&format!("inbox mcp: serving as {agent} on {database}"));
    let closed = Arc::new(AtomicBool::new(false));
    let server = server::Server::new(global, agent, &database, Arc::clone(&closed));
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(CALLS_AT_ONCE)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return refuse(EngineError::Internal {
                message: format!("cannot start the async runtime: {error}"),
            });
        }
    };
    let served = runtime.block_on(async {
        let running = match server.serve(stdio::Stdio::open(closed)).await {
            Ok(running) => running,
            // Nothing that speaks MCP is on the other end (stdin closed,
            // or not a handshake): a usage error, not a failure of inbox.
            Err(error) => {
                return Err(EngineError::InvalidRequest {
                    message: format!(
                        "no MCP session: {error}; inbox mcp is started by an agent runtime (see `inbox mcp --help`)"
                    ),
                });
            }
        };
        running
            .waiting()
            .await
            .map_err(|error| EngineError::Internal {
                message: format!("the MCP session stopped: {error}"),
            })
    });
    // Not a plain drop, which would wait for a read of stdin still blocked
    // on a thread (when stdin is not a pipe) until the client closes it.
    runtime.shutdown_timeout(FINISHING);
    match served {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => refuse(error),
    }
}

/// Says why the server cannot run or stopped (see `hosted::refuse`).
fn refuse(error: EngineError, json: bool) -> ExitCode {
    inbox_host_native::hosted::refuse("mcp", error, json)
}

/// A line for people, on stderr.
fn log(line: &str) {
    inbox_host_native::hosted::log(line);
}
