//! The file peers as one process per message, the way a shell-scripted
//! agent would drive them: `inbox-bench-peer <jsonl|json-array|file-drop>
//! <send|claim|done> DIR [--fsync] ARGS...`.
//!
//! - `send DIR PRODUCER SEQ`: append / rewrite / drop one task message;
//! - `claim DIR WORKER`: print the claimed task's id, or exit 10 when none
//!   is left (like `inbox fetch`);
//! - `done DIR WORKER ID`: finish it.
//!
//! It links only the file peers (`inbox_bench::files`), not the rest of the
//! harness, so it starts as fast as a small Rust program can. It must never
//! do more per process than the peer itself does: that is why, alone among
//! the harness's command lines, it is read by hand and not with clap, which
//! adds about 0.15 ms to every process start here (some 15 % of a peer
//! process, which would inflate every per-process peer figure).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use inbox_bench::files::{filedrop::FileDrop, json_array::JsonArray, jsonl::Jsonl};

const USAGE: &str =
    "usage: inbox-bench-peer <jsonl|json-array|file-drop> <send|claim|done> DIR [--fsync] ARGS...";

/// The file peers.
#[derive(Clone, Copy)]
enum Peer {
    /// The per-member JSONL inbox with a line cursor (seed 002).
    Jsonl,
    /// The JSON-array inbox rewritten under a lock file.
    JsonArray,
    /// The folder of task descriptors (seed 001).
    FileDrop,
}

/// One operation.
enum Op {
    /// Task `seq` of `producer`.
    Send { producer: usize, seq: u64 },
    /// The next task for `worker`.
    Claim { worker: usize },
    /// `worker` finishes task `id` (file-drop: the descriptor's name).
    Done { worker: usize, id: String },
}

/// The team folder and its durability.
struct Folder {
    dir: PathBuf,
    /// fsync every write (full durability).
    fsync: bool,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(args).and_then(|(peer, folder, op)| run(peer, &folder, op)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("inbox-bench-peer: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The command line: `PEER OP DIR [--fsync] ARGS...` (`--fsync` anywhere).
fn parse(mut args: Vec<String>) -> Result<(Peer, Folder, Op)> {
    let fsync = args.iter().any(|a| a == "--fsync");
    args.retain(|a| a != "--fsync");
    let [peer, op, dir, rest @ ..] = args.as_slice() else {
        bail!("{USAGE}");
    };
    let peer = match peer.as_str() {
        "jsonl" => Peer::Jsonl,
        "json-array" => Peer::JsonArray,
        "file-drop" => Peer::FileDrop,
        other => bail!("unknown peer `{other}`\n{USAGE}"),
    };
    let number = |i: usize, what: &str| -> Result<u64> {
        let arg = rest
            .get(i)
            .with_context(|| format!("missing {what}\n{USAGE}"))?;
        arg.parse()
            .with_context(|| format!("{what} is not a number: `{arg}`"))
    };
    let op = match op.as_str() {
        "send" => Op::Send {
            producer: number(0, "PRODUCER")? as usize,
            seq: number(1, "SEQ")?,
        },
        "claim" => Op::Claim {
            worker: number(0, "WORKER")? as usize,
        },
        "done" => Op::Done {
            worker: number(0, "WORKER")? as usize,
            id: rest
                .get(1)
                .with_context(|| format!("missing ID\n{USAGE}"))?
                .clone(),
        },
        other => bail!("unknown operation `{other}`\n{USAGE}"),
    };
    let folder = Folder {
        dir: PathBuf::from(dir),
        fsync,
    };
    Ok((peer, folder, op))
}

/// The operation; the exit code (10: nothing to claim).
fn run(peer: Peer, f: &Folder, op: Op) -> Result<u8> {
    let (dir, fsync) = (&f.dir, f.fsync);
    let written = match (op, peer) {
        (Op::Send { producer, seq }, Peer::Jsonl) => Jsonl::new(dir, fsync).send(producer, seq),
        (Op::Send { producer, seq }, Peer::JsonArray) => {
            JsonArray::new(dir, fsync).send(producer, seq)
        }
        (Op::Send { producer, seq }, Peer::FileDrop) => {
            FileDrop::new(dir, fsync).send(producer, seq)
        }
        (Op::Claim { .. }, Peer::Jsonl) => return print(Jsonl::new(dir, fsync).claim()?),
        (Op::Claim { worker }, Peer::JsonArray) => {
            return print(JsonArray::new(dir, fsync).claim(worker)?);
        }
        (Op::Claim { worker }, Peer::FileDrop) => {
            return print(FileDrop::new(dir, fsync).claim(worker)?.0);
        }
        (Op::Done { id, .. }, Peer::Jsonl) => Jsonl::new(dir, fsync).done(&id),
        (Op::Done { id, .. }, Peer::JsonArray) => JsonArray::new(dir, fsync).done(&id),
        (Op::Done { worker, id }, Peer::FileDrop) => FileDrop::new(dir, fsync).done(&id, worker),
    };
    written.map(|()| 0)
}

/// Prints a claimed task's id (exit 0), or exit 10 when there was none.
fn print(claimed: Option<String>) -> Result<u8> {
    match claimed {
        Some(id) => {
            writeln!(std::io::stdout().lock(), "{id}")?;
            Ok(0)
        }
        None => Ok(10),
    }
}
