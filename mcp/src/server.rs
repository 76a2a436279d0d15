//! The MCP server itself: the handshake, `tools/list` and `tools/call`
//! over the official Rust SDK (`rmcp`), on the transport of [`crate::stdio`].
//!
//! A call becomes a request ([`catalog`]), which runs off the async runtime
//! through the same code the command line runs (`inbox_host_native::run::execute`): its
//! own connection to the database, opened for the call and closed after it,
//! a wait blocked by the same watcher, no transaction held while it waits.
//! Calls run on the runtime's blocking pool, waits on threads of their
//! own, at most [`WAITS_AT_ONCE`] at once, so that open waits never keep a
//! read or a write waiting. The answer is the JSON `--json` prints, as the
//! tool's text; a refusal is a tool error (`isError: true`) with the same
//! JSON. While a wait runs, progress goes to a client that asked for it,
//! and the client's cancellation, or stdin closing, stops the wait. This
//! module must never decide what a call means; that is the catalog's and
//! the engine's.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_engine::{Call, Output, Response};
use inbox_host_native::Global;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, Implementation, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tokio::sync::oneshot;

use crate::catalog::ToolSpec;
use crate::guidance::{self, PROGRESS_EVERY_SECONDS, WAITS_AT_ONCE};
use crate::jsonrpc::LIMIT_REACHED;

/// The server: who it acts as, where, and its tools.
pub(crate) struct Server {
    global: Arc<Global>,
    agent: String,
    /// The agent's token, every call carries it: `--agent-token` (or
    /// `$INBOX_AGENT_TOKEN`), or the one `agent_register` issued in this
    /// session, which the agent could not otherwise pass back.
    agent_token: Mutex<Option<String>>,
    instructions: String,
    tools: Vec<ToolSpec>,
    listed: Vec<Tool>,
    /// How many waits run now (see [`Server::start`]).
    waits: Arc<AtomicUsize>,
    /// Set once stdin has closed: every wait stops.
    closed: Arc<AtomicBool>,
}

impl Server {
    /// A server acting as `agent` (the name in `global`) on the database
    /// `global` names, which `database` describes for people; `closed` is
    /// set once its client has closed stdin.
    pub(crate) fn new(
        global: Global,
        agent: String,
        database: &str,
        closed: Arc<AtomicBool>,
    ) -> Server {
        let tools = crate::catalog::tools();
        let listed = tools
            .iter()
            .map(|tool| {
                Tool::new(
                    tool.name.clone(),
                    tool.description.clone(),
                    Arc::new(tool.schema.clone()),
                )
            })
            .collect();
        Server {
            instructions: guidance::instructions(&agent, database),
            agent_token: Mutex::new(global.agent_token.clone()),
            global: Arc::new(global),
            agent,
            tools,
            listed,
            waits: Arc::new(AtomicUsize::new(0)),
            closed,
        }
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let Some(tool) = self.tools.iter().find(|t| t.name == request.name) else {
            return Err(ErrorData::invalid_params(
                format!("there is no tool `{}`; tools/list names them", request.name),
                None,
            ));
        };
        let arguments = request.arguments.unwrap_or_default();
        let token = self.token();
        let call = match tool.request(&self.agent, token.as_deref(), arguments) {
            Ok(call) => call,
            Err(refusal) => return Ok(answer(&refusal)),
        };
        let mut running = self.start(tool, call, &context)?;
        let progress = context.meta.get_progress_token().filter(|_| tool.waits());
        let started = Instant::now();
        let every = Duration::from_secs(PROGRESS_EVERY_SECONDS);
        let finished = loop {
            tokio::select! {
                finished = &mut running => break finished,
                () = tokio::time::sleep(every), if progress.is_some() => {
                    if let Some(token) = &progress {
                        let waited = started.elapsed().as_secs();
                        let note = ProgressNotificationParam::new(token.clone(), waited as f64)
                            .with_total(guidance::WAIT_CAP_SECONDS as f64)
                            .with_message(format!("{} waiting, {waited} s so far", tool.name));
                        // A client that went away is told nothing more;
                        // the wait goes on until it ends or is cancelled.
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
            }
        };
        match finished {
            Ok(Some(response)) => {
                self.keep_token(&response);
                Ok(answer(&response))
            }
            // The client cancelled the call and no longer waits for an
            // answer (or closed stdin); this one only ends the request.
            Ok(None) => Err(ErrorData::invalid_request(
                if self.closed.load(Ordering::SeqCst) {
                    format!("{} stopped: the client closed stdin", tool.name)
                } else {
                    format!("{} was cancelled by the client", tool.name)
                },
                None,
            )),
            Err(_) => Err(ErrorData::internal_error(
                format!(
                    "{} stopped unexpectedly (see the server's stderr)",
                    tool.name
                ),
                None,
            )),
        }
    }

    /// Starts `call` off the async runtime; its response comes on the
    /// receiver (`None` when it was stopped). A call stops when the client
    /// cancels it or closes stdin.
    ///
    /// A wait runs on a thread of its own, never on the blocking pool that
    /// every other call runs on: however many waits are open, a read or a
    /// write finds a thread at once. Waits are bounded instead: past
    /// [`WAITS_AT_ONCE`] one is refused at once, and a wait's place is free
    /// again as soon as its thread has stopped.
    fn start(
        &self,
        tool: &ToolSpec,
        call: Call,
        context: &RequestContext<RoleServer>,
    ) -> Result<oneshot::Receiver<Option<Response>>, ErrorData> {
        let global = Arc::clone(&self.global);
        let cancelled = context.ct.clone();
        let closed = Arc::clone(&self.closed);
        let stop = move || cancelled.is_cancelled() || closed.load(Ordering::SeqCst);
        let (done, finished) = oneshot::channel();
        if !tool.waits() {
            tokio::task::spawn_blocking(move || {
                let _ = done.send(inbox_host_native::run::execute(&global, call, Some(&stop)));
            });
            return Ok(finished);
        }
        let place = WaitPlace::take(&self.waits).ok_or_else(|| self.too_many_waits(&tool.name))?;
        std::thread::Builder::new()
            .name("inbox-mcp-wait".into())
            .spawn(move || {
                let response = inbox_host_native::run::execute(&global, call, Some(&stop));
                drop(place);
                let _ = done.send(response);
            })
            .map_err(|error| {
                ErrorData::internal_error(
                    format!("{} cannot start a thread to wait on: {error}", tool.name),
                    None,
                )
            })?;
        Ok(finished)
    }
}

impl Server {
    /// The refusal of a wait past [`WAITS_AT_ONCE`].
    fn too_many_waits(&self, tool: &str) -> ErrorData {
        let waiting: Vec<&str> = self
            .tools
            .iter()
            .filter(|tool| tool.waits())
            .map(|tool| tool.name.as_str())
            .collect();
        ErrorData::new(
            LIMIT_REACHED,
            format!(
                "{tool} refused: this server already runs {WAITS_AT_ONCE} waits ({}), the most it runs at once. Let one of them answer or cancel one, then call {tool} again; other tools are not limited by this",
                waiting.join(", ")
            ),
            Some(serde_json::json!({ "waits_at_once": WAITS_AT_ONCE })),
        )
    }
}

/// A place among the [`WAITS_AT_ONCE`] waits a server runs at once, held
/// by a wait's thread until it stops.
struct WaitPlace(Arc<AtomicUsize>);

impl WaitPlace {
    fn take(waits: &Arc<AtomicUsize>) -> Option<WaitPlace> {
        waits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| {
                (open < WAITS_AT_ONCE).then_some(open + 1)
            })
            .ok()
            .map(|_| WaitPlace(Arc::clone(waits)))
    }
}

impl Drop for WaitPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Server {
    fn token(&self) -> Option<String> {
        self.agent_token.lock().map_or(None, |token| token.clone())
    }

    /// Adopts the token an `agent_register` of this session issued.
    fn keep_token(&self, response: &Response) {
        if let Response::Success(Output::AgentRegister(out)) = response
            && let Some(token) = &out.agent_token
            && let Ok(mut kept) = self.agent_token.lock()
        {
            *kept = Some(token.clone());
        }
    }
}

/// A response as a tool's result: the JSON contract as its text, an error
/// when the command was refused or failed.
fn answer(response: &Response) -> CallToolResult {
    let content = vec![ContentBlock::text(response.to_json())];
    if response.is_ok() {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("inbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.instructions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.listed.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.listed.iter().find(|tool| tool.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context)
            .await
            .map(CallToolResponse::from)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method: String = request.method.chars().take(100).collect();
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!(
                "Method not found: `{method}`; this server serves initialize, ping, tools/list and tools/call"
            ),
            None,
        ))
    }
}
