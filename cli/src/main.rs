//! `inbox`: the durable coordination bus for AI agent teams, on the command
//! line. Everything lives in the `inbox_cli` library; see `lib.rs`, and
//! `entry.rs` for why the entry point is its own on Linux.
#![cfg_attr(all(target_os = "linux", not(test)), no_main)]

inbox_cli::entry_point!(inbox_cli::main);
inbox_cli::c_allocator!();
