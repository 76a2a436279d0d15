//! `orch`: the leader's control plane for AI agent teams, on the command
//! line. Everything lives in the `inbox_cli` library; see `lib.rs`.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(inbox_cli::orch_main())
}
