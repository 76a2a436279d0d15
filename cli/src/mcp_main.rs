//! `inbox-mcp`: inbox as a Model Context Protocol server on stdio (the
//! `inbox-mcp` crate), started by `inbox mcp ARGS` or by hand with the same
//! flags, which `inbox`'s own parser reads here.

use std::process::ExitCode;

fn main() -> ExitCode {
    // As in every command, `--json` puts a refusal (even of the arguments)
    // on stdout as one JSON object.
    let json = std::env::args_os().any(|a| a == "--json");
    match inbox_cli::serving::arguments("mcp", json) {
        Ok(cli) => inbox_mcp::run(cli.global),
        Err(exit) => exit,
    }
}
