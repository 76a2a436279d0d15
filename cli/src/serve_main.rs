//! `inbox-serve`: the live board (the `inbox-board` crate), started by
//! `inbox serve ARGS` or by hand with the same flags, which `inbox`'s own
//! parser reads here.

use std::process::ExitCode;

use inbox_cli::args::Command;
use inbox_engine::EngineError;

fn main() -> ExitCode {
    // As in every command, `--json` puts a refusal (even of the arguments)
    // on stdout as one JSON object.
    let json = std::env::args_os().any(|a| a == "--json");
    match inbox_cli::serving::arguments("serve", json) {
        Ok(cli) => match cli.command {
            Command::Serve(args) => inbox_board::run(cli.global, args),
            _ => inbox_host_native::hosted::refuse(
                "serve",
                EngineError::Internal {
                    message: "the arguments are not `serve`'s".into(),
                },
                json,
            ),
        },
        Err(exit) => exit,
    }
}
