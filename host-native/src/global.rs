//! The flags every surface takes (`--db`, `--json`, `--agent`, the
//! idempotency key, the agent token, `--engine`): one definition, which
//! `inbox`'s and `orch`'s command lines flatten into theirs and the servers
//! read with them. This module must never act on a flag; it only holds
//! them (and reads the token file a flag names).

use std::path::PathBuf;

use clap::Args;

// Flags every command takes.
#[doc(hidden)]
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// The database: a file, or a postgres:// URL [default: $INBOX_DB, else the nearest .agents/coord.db]
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub db: Option<PathBuf>,
    /// Print exactly one JSON object on stdout (for agents)
    #[arg(long, global = true)]
    pub json: bool,
    /// The acting agent: who claims, updates, reads or waits
    #[arg(long, global = true, env = "INBOX_AGENT", value_name = "NAME")]
    pub agent: Option<String>,
    /// Make a write safe to retry: a command repeated with the same key
    /// returns its first outcome (marked "replayed") and changes nothing
    #[arg(long, global = true, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// A file holding the acting agent's token, when the database requires
    /// agent tokens (agent register prints it once): yours alone (chmod
    /// 600), the token on one line; unlike a command line, other users'
    /// `ps` does not show it
    #[arg(
        long,
        global = true,
        env = "INBOX_AGENT_TOKEN_FILE",
        value_name = "PATH"
    )]
    pub agent_token_file: Option<PathBuf>,
    /// The acting agent's token itself; prefer --agent-token-file or the
    /// environment variable, which other users' `ps` does not show
    #[arg(
        long,
        global = true,
        env = "INBOX_AGENT_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub agent_token: Option<String>,
    /// Run the command through this engine component (.wasm, built by
    /// scripts/build-plugin) instead of the built-in engine
    // Shown only in builds with the `plugin` feature; other builds refuse it
    // with a message that says how to get one.
    #[arg(long, global = true, env = "INBOX_ENGINE", value_name = "PATH")]
    #[cfg_attr(not(feature = "plugin"), arg(hide = true))]
    pub engine: Option<PathBuf>,
}

impl Global {
    /// Reads the agent token from `--agent-token-file` (or
    /// `$INBOX_AGENT_TOKEN_FILE`) into `agent_token`, where every command
    /// and server takes it from. A token given both ways is refused rather
    /// than one silently chosen. Done once, after parsing, by whatever
    /// parsed the command line.
    pub fn resolve_agent_token(&mut self) -> Result<(), inbox_engine::EngineError> {
        let Some(path) = self.agent_token_file.take() else {
            return Ok(());
        };
        if self.agent_token.is_some() {
            return Err(inbox_engine::EngineError::InvalidValue {
                field: "agent_token_file".into(),
                problem: "is given, and a token too (--agent-token or $INBOX_AGENT_TOKEN); give the token one way"
                    .into(),
            });
        }
        self.agent_token = Some(crate::secret::read_token_file(&path)?);
        Ok(())
    }
}
