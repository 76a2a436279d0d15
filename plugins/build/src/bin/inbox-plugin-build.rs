//! `inbox-plugin-build [engine|fault]`: builds a component and prints its
//! path (default: the engine). `scripts/build-plugin` runs it.

use std::process::ExitCode;

use inbox_plugin_build::{Guest, build};

fn main() -> ExitCode {
    let guest = match std::env::args().nth(1).as_deref() {
        None | Some("engine") => Guest::Engine,
        Some("fault") => Guest::Fault,
        Some(other) => {
            eprintln!("usage: inbox-plugin-build [engine|fault] (not `{other}`)");
            return ExitCode::from(2);
        }
    };
    match build(guest) {
        Ok(path) => {
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            eprintln!("built {} ({size} bytes)", path.display());
            #[allow(clippy::print_stdout)] // the path is the output
            {
                println!("{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error[{}]: {error}", error.code());
            ExitCode::FAILURE
        }
    }
}
