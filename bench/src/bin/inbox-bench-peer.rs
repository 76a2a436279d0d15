//! The file peers as one process per message, the way a shell-scripted
//! agent would drive them: `inbox-bench-peer <jsonl|json-array|file-drop>
//! <send|claim|done> DIR [--fsync] ARGS...`.
//!
//! - `send PRODUCER SEQ`: append / rewrite / drop one task message;
//! - `claim WORKER`: print the claimed task's id, or exit 10 when none is
//!   left (like `inbox fetch`);
//! - `done WORKER ID`: finish it.
//!
//! It includes only the file peers' modules (`src/files/`), not the rest
//! of the harness, so it starts as fast as a small Rust program can. It must
//! never do more per process than the peer itself does.

// Shared with the harness, which uses the parts this binary does not
// (waiting, posting); unused here is expected.
#[allow(dead_code)]
#[path = "../files/mod.rs"]
mod files;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};

use files::{filedrop::FileDrop, json_array::JsonArray, jsonl::Jsonl};

fn main() -> ExitCode {
    match run() {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("inbox-bench-peer: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn number(args: &[String], i: usize) -> Result<u64> {
    args.get(i)
        .ok_or_else(|| anyhow!("missing argument {i}"))?
        .parse()
        .with_context(|| format!("argument {i} is not a number"))
}

fn run() -> Result<u8> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let fsync = args.iter().any(|a| a == "--fsync");
    args.retain(|a| a != "--fsync");
    let (Some(system), Some(op), Some(dir)) = (args.first(), args.get(1), args.get(2)) else {
        bail!(
            "usage: inbox-bench-peer <jsonl|json-array|file-drop> <send|claim|done> DIR [--fsync] ARGS..."
        );
    };
    let dir = Path::new(dir);
    let claimed: Option<String> = match (system.as_str(), op.as_str()) {
        ("jsonl", "send") => {
            return Jsonl::new(dir, fsync)
                .send(number(&args, 3)? as usize, number(&args, 4)?)
                .map(|()| 0);
        }
        ("jsonl", "claim") => Jsonl::new(dir, fsync).claim()?,
        ("jsonl", "done") => {
            let id = args.get(4).ok_or_else(|| anyhow!("missing task id"))?;
            return Jsonl::new(dir, fsync).done(id).map(|()| 0);
        }
        ("json-array", "send") => {
            return JsonArray::new(dir, fsync)
                .send(number(&args, 3)? as usize, number(&args, 4)?)
                .map(|()| 0);
        }
        ("json-array", "claim") => JsonArray::new(dir, fsync).claim(number(&args, 3)? as usize)?,
        ("json-array", "done") => {
            let id = args.get(4).ok_or_else(|| anyhow!("missing task id"))?;
            return JsonArray::new(dir, fsync).done(id).map(|()| 0);
        }
        ("file-drop", "send") => {
            return FileDrop::new(dir, fsync)
                .send(number(&args, 3)? as usize, number(&args, 4)?)
                .map(|()| 0);
        }
        ("file-drop", "claim") => {
            FileDrop::new(dir, fsync)
                .claim(number(&args, 3)? as usize)?
                .0
        }
        ("file-drop", "done") => {
            let id = args
                .get(4)
                .ok_or_else(|| anyhow!("missing descriptor name"))?;
            return FileDrop::new(dir, fsync)
                .done(id, number(&args, 3)? as usize)
                .map(|()| 0);
        }
        _ => bail!("unknown system or operation: {system} {op}"),
    };
    match claimed {
        Some(id) => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{id}")?;
            Ok(0)
        }
        None => Ok(10),
    }
}
