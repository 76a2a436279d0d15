//! The MCP server itself: the handshake, `tools/list` and `tools/call`
//! over the official Rust SDK (`rmcp`), on the transport of [`crate::stdio`].
//!
//! A call becomes a request ([`catalog`]), which runs on a blocking thread
//! through the same code the command line runs (`inbox_cli::execute`): its
//! own connection to the database, opened for the call and closed after it,
//! a wait blocked by the same watcher, no transaction held while it waits.
//! The answer is the JSON `--json` prints, as the tool's text; a refusal is
//! a tool error (`isError: true`) with the same JSON. While a wait runs,
//! progress goes to a client that asked for it, and the client's
//! cancellation stops the wait. This module must never decide what a call
//! means; that is the catalog's and the engine's.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_cli::args::Global;
use inbox_engine::{Output, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, Implementation, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::catalog::ToolSpec;
use crate::guidance::{self, PROGRESS_EVERY_SECONDS};

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
}

impl Server {
    /// A server acting as `agent` (the name in `global`) on the database
    /// `global` names, which `database` describes for people.
    pub(crate) fn new(global: Global, agent: String, database: &str) -> Server {
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
        let global = Arc::clone(&self.global);
        let cancelled = context.ct.clone();
        let mut running = tokio::task::spawn_blocking(move || {
            inbox_cli::execute(&global, call, Some(&|| cancelled.is_cancelled()))
        });
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
            // answer; this one only ends the request.
            Ok(None) => Err(ErrorData::invalid_request(
                format!("{} was cancelled by the client", tool.name),
                None,
            )),
            Err(error) => Err(ErrorData::internal_error(
                format!("{} stopped unexpectedly: {error}", tool.name),
                None,
            )),
        }
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
