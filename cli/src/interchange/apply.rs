//! Running a file of message lines as engine commands: the driver the
//! `mailbox-jsonl` and `teams-jsonl` imports share.
//!
//! Lines run in batches (one write transaction each, see
//! `SqliteStore::begin_batch`), each committed once it has run for
//! [`BATCH_TIME`]: a batch holds SQLite's write lock, and agents writing
//! meanwhile wait for it, so no batch may come near their 10 s busy budget
//! (100,000 lines take several seconds). Each engine command is a
//! transaction of its own inside the batch, and each line's commands form a
//! group kept or dropped together, so a line inbox refuses halfway (a claim
//! granted, then the `done` refused) leaves nothing. A line that is not a
//! message of the format is *malformed*, one inbox's rules refuse is
//! *refused*: both are reported with their line number and skipped, never
//! fatal. What is fatal (the store failing, the file unreadable) stops the
//! import: the batch under way is rolled back, the ones committed stay, and
//! running the import again finishes it, since every command carries an
//! idempotency key the format derives from the line: a line imported before
//! is answered from its keys and counted as *present*. This module must
//! never decide what a line means: a [`Mapping`] does.

use std::io::BufRead;
use std::time::{Duration, Instant};

use inbox_engine::{Call, EngineError, ErrorCode, Output, Request, Response};
use inbox_host_native::{HostClock, NativeEngine};
use inbox_sqlite::SqliteStore;
use inbox_sqlite::lines::{Line, Lines};
use serde_json::Value as Json;

use super::InterchangeError;
use crate::args::Format;
use inbox_host_native::terminal;

/// The problems a report lists; the rest are counted.
const LISTED: usize = 100;

/// How far past its limit an over-long line is read to skip it: a line
/// that goes on further (`/dev/zero`) stops the import.
const SKIP_MOST: u64 = 64 << 20;

/// How long a batch runs before it is committed and the next begins.
const BATCH_TIME: Duration = Duration::from_millis(200);

/// How long the import lets go of the write lock between batches. SQLite's
/// locks are not fair: a writer waiting for one retries after a sleep (at
/// most 3 ms, see `open`'s busy handler), and an import that began its next
/// batch at once would win every time, holding agents up for the whole
/// file. 5 ms of every 200 lets each waiting writer in.
const YIELD: Duration = Duration::from_millis(5);

/// One format's meaning of a line.
pub(super) trait Mapping {
    /// Runs the commands line `number` (`text`) stands for through `bus`.
    /// A mapping keeps what it learns (which thread a task is in) only
    /// when it returns `Ok`: a skipped line's commands are undone.
    fn apply(&mut self, number: u64, text: &str, bus: &mut Bus) -> Result<(), Skip>;
}

/// Why a line was skipped, or the import stopped.
#[derive(Debug)]
pub(super) enum Skip {
    /// Not a message of the format.
    Malformed(String),
    /// A command inbox refused.
    Refused(EngineError),
    /// The store failed: the import stops and keeps nothing.
    Fatal(EngineError),
}

impl From<EngineError> for Skip {
    fn from(error: EngineError) -> Skip {
        match error.code() {
            ErrorCode::StorageError
            | ErrorCode::StorageBusy
            | ErrorCode::SchemaTooNew
            | ErrorCode::NotInitialized
            | ErrorCode::InternalError => Skip::Fatal(error),
            _ => Skip::Refused(error),
        }
    }
}

/// The engine a mapping runs its commands on.
pub(super) struct Bus {
    engine: NativeEngine,
    /// Whether a command of the current line was applied, not replayed.
    wrote: bool,
    /// When the batch under way began.
    began: Instant,
}

impl Bus {
    fn begin(&mut self) -> Result<(), InterchangeError> {
        self.began = Instant::now();
        Ok(self.engine.store_mut().begin_batch()?)
    }

    /// Commits the batch under way if it has run long enough, and begins
    /// the next; returns whether it committed.
    fn checkpoint(&mut self) -> Result<bool, InterchangeError> {
        if self.began.elapsed() < BATCH_TIME {
            return Ok(false);
        }
        self.engine.store_mut().end_batch(true)?;
        std::thread::sleep(YIELD);
        self.begin()?;
        Ok(true)
    }

    /// Runs `request` under idempotency key `key`.
    pub(super) fn run(&mut self, request: Request, key: String) -> Result<Output, Skip> {
        let call = Call {
            request,
            idempotency_key: Some(key),
            agent_token: None,
        };
        match inbox_host_native::execute_call(&mut self.engine, call) {
            Response::Success(output) => {
                self.wrote = true;
                Ok(output)
            }
            Response::Replayed(output) => Ok(output),
            Response::Failure { error, .. } => Err(Skip::from(error)),
        }
    }
}

/// What an import did, line by line.
#[derive(Debug, Default)]
pub(super) struct Summary {
    /// Lines read (blank ones not counted).
    lines: u64,
    /// Lines whose commands ran now.
    imported: u64,
    /// Lines imported before: every command answered from its key.
    present: u64,
    malformed: u64,
    refused: u64,
    /// Lines read in batches already committed.
    committed: u64,
    /// The number of the last line read.
    last: u64,
    /// The first [`LISTED`] problems.
    problems: Vec<Problem>,
}

#[derive(Debug)]
struct Problem {
    line: u64,
    reason: &'static str,
    code: ErrorCode,
    message: String,
}

impl Summary {
    fn skipped(&mut self, line: u64, skip: Skip) {
        let (reason, code, message) = match skip {
            Skip::Malformed(message) => {
                self.malformed += 1;
                ("malformed", ErrorCode::InvalidValue, message)
            }
            Skip::Refused(error) | Skip::Fatal(error) => {
                self.refused += 1;
                ("refused", error.code(), error.to_string())
            }
        };
        if self.problems.len() < LISTED {
            self.problems.push(Problem {
                line,
                reason,
                code,
                message,
            });
        }
    }

    /// The report: `base` with the counts and problems added, and the
    /// same for people.
    pub(super) fn report(&self, mut base: Json, shown: &str, format: Format) -> (Json, String) {
        base["lines"] = self.lines.into();
        base["imported"] = self.imported.into();
        base["present"] = self.present.into();
        base["malformed"] = self.malformed.into();
        base["refused"] = self.refused.into();
        base["problems"] = self
            .problems
            .iter()
            .map(|p| {
                serde_json::json!({
                    "line": p.line, "reason": p.reason, "code": p.code.as_str(), "message": p.message,
                })
            })
            .collect::<Vec<_>>()
            .into();
        let mut human = format!(
            "Imported {} of {} lines of {} ({}): {} already imported, {} malformed, {} refused\n",
            self.imported,
            self.lines,
            terminal::safe(shown),
            format.as_str(),
            self.present,
            self.malformed,
            self.refused,
        );
        for p in &self.problems {
            human.push_str(&format!(
                "  line {}: skipped, {} ({}): {}\n",
                p.line,
                p.reason,
                p.code.as_str(),
                terminal::safe(&p.message)
            ));
        }
        let unlisted = (self.malformed + self.refused).saturating_sub(self.problems.len() as u64);
        if unlisted > 0 {
            human.push_str(&format!("  and {unlisted} more skipped lines\n"));
        }
        (base, human)
    }
}

/// Imports `input` into `store` with `mapping`, in batches; `progress` is
/// told the bytes read after each line.
pub(super) fn import(
    store: SqliteStore,
    clock: HostClock,
    input: impl BufRead,
    limit: usize,
    mapping: &mut dyn Mapping,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary, InterchangeError> {
    let engine = inbox_engine::Engine::new(store, clock, inbox_host_native::host_ids());
    let mut bus = Bus {
        engine,
        wrote: false,
        began: Instant::now(),
    };
    bus.begin()?;
    let mut lines = Lines::new(input, limit);
    let mut summary = Summary::default();
    let result = each_line(&mut bus, &mut lines, limit, mapping, progress, &mut summary);
    let ended = bus.engine.store_mut().end_batch(result.is_ok());
    match result.and_then(|()| ended.map_err(InterchangeError::from)) {
        Ok(()) => Ok(summary),
        Err(error) => Err(InterchangeError::Stopped {
            line: summary.last,
            kept: summary.committed,
            error: Box::new(error),
        }),
    }
}

fn each_line<R: BufRead>(
    bus: &mut Bus,
    lines: &mut Lines<R>,
    limit: usize,
    mapping: &mut dyn Mapping,
    progress: &mut dyn FnMut(u64),
    summary: &mut Summary,
) -> Result<(), InterchangeError> {
    while let Some((number, line)) = lines
        .next_line()
        .map_err(|e| InterchangeError::File(format!("the file cannot be read: {e}")))?
    {
        summary.last = number;
        progress(lines.bytes_read());
        let text = match line {
            Line::Text(text) if text.trim().is_empty() => continue,
            Line::Text(text) => text,
            Line::TooLong => {
                if !lines
                    .skip_rest(SKIP_MOST)
                    .map_err(|e| InterchangeError::File(format!("the file cannot be read: {e}")))?
                {
                    return Err(InterchangeError::Endless {
                        line: number,
                        most: SKIP_MOST,
                    });
                }
                summary.lines += 1;
                let message = format!("is longer than {limit} bytes; no message of the format is");
                summary.skipped(number, Skip::Malformed(message));
                continue;
            }
            Line::NotUtf8 => {
                summary.lines += 1;
                summary.skipped(number, Skip::Malformed("is not UTF-8 text".into()));
                continue;
            }
        };
        summary.lines += 1;
        one_line(bus, mapping, number, &text, summary)?;
        if bus.checkpoint()? {
            summary.committed = summary.lines;
        }
    }
    Ok(())
}

/// Runs one line's commands as a group: all kept, or none.
fn one_line(
    bus: &mut Bus,
    mapping: &mut dyn Mapping,
    number: u64,
    text: &str,
    summary: &mut Summary,
) -> Result<(), InterchangeError> {
    bus.wrote = false;
    bus.engine.store_mut().begin_group()?;
    let applied = mapping.apply(number, text, bus);
    bus.engine.store_mut().end_group(applied.is_ok())?;
    match applied {
        Ok(()) if bus.wrote => summary.imported += 1,
        Ok(()) => summary.present += 1,
        Err(Skip::Fatal(error)) => return Err(InterchangeError::Engine(error)),
        Err(skip) => summary.skipped(number, skip),
    }
    Ok(())
}

/// What an import knows of a thread it wrote to: enough to decide whether
/// the next line's sender must claim it first.
#[derive(Clone, Debug)]
pub(super) struct Tracked {
    /// The thread.
    pub(super) thread_id: String,
    /// Its status after the last command.
    pub(super) status: inbox_engine::Status,
    /// Who holds its live lease, if anyone.
    pub(super) holder: Option<String>,
}

impl Tracked {
    /// The thread as a command left it.
    pub(super) fn of(view: &inbox_engine::wire::ThreadView) -> Tracked {
        Tracked {
            thread_id: view.thread.thread_id.clone(),
            status: view.thread.status,
            holder: view.lease.as_ref().map(|lease| lease.agent.clone()),
        }
    }

    /// Whether it still takes messages.
    pub(super) fn is_open(&self) -> bool {
        !self.status.is_terminal()
    }
}

/// The message a writing command wrote, and the thread after it.
pub(super) fn written(output: Output) -> Result<inbox_engine::wire::MessageOutput, Skip> {
    match output {
        Output::Send(out)
        | Output::Reply(out)
        | Output::Update(out)
        | Output::Done(out)
        | Output::Fail(out)
        | Output::Cancel(out) => Ok(out),
        other => Err(Skip::Fatal(EngineError::Internal {
            message: format!("{} wrote no message", other.command()),
        })),
    }
}

/// Makes `agent` the holder of `thread` (a `claim` under `key`) unless it
/// already is: in inbox only the holder finishes or blocks a thread, and a
/// log records the outcome without the claim before it.
pub(super) fn hold(
    bus: &mut Bus,
    thread: &mut Tracked,
    agent: &str,
    key: String,
) -> Result<(), Skip> {
    if thread.holder.as_deref() == Some(agent) {
        return Ok(());
    }
    let claim = inbox_engine::wire::ClaimRequest {
        agent: Some(agent.to_owned()),
        thread_id: Some(thread.thread_id.clone()),
        ..Default::default()
    };
    match bus.run(Request::Claim(claim), key)? {
        Output::Claim(inbox_engine::wire::ClaimOutput {
            claimed: Some(lease),
        }) => {
            *thread = Tracked::of(&lease.thread);
            Ok(())
        }
        _ => Err(Skip::Fatal(EngineError::Internal {
            message: "a claim took no lease".into(),
        })),
    }
}

/// Marks `message` read by its recipient (`mark-read` under `key`), when
/// that is an agent: a role's or a broadcast's readers each have their own
/// read state, which one flag cannot say.
pub(super) fn mark_read(
    bus: &mut Bus,
    message: &inbox_engine::Message,
    key: String,
) -> Result<(), Skip> {
    let inbox_engine::address::Address::Agent(reader) =
        inbox_engine::address::Address::stored(&message.to_agent)
    else {
        return Ok(());
    };
    let request = inbox_engine::wire::MarkReadRequest {
        agent: Some(reader),
        message_ids: vec![message.message_id.clone()],
        through_event: None,
    };
    bus.run(Request::MarkRead(request), key).map(drop)
}

/// An idempotency key of `prefix` for the line `id` names, with `step`
/// (`claim`, `read`) for a line's later commands: `prefix:id[:step]`, or,
/// for an id too long for a key (128 bytes) or holding control characters,
/// its SHA-256 in its place.
pub(super) fn key(prefix: &str, id: &str, step: Option<&str>) -> String {
    use sha2::Digest as _;
    let step = step.map_or_else(String::new, |s| format!(":{s}"));
    let plain = format!("{prefix}:{id}{step}");
    if plain.len() <= inbox_engine::call::IDEMPOTENCY_KEY_MAX_BYTES
        && !id.chars().any(char::is_control)
    {
        return plain;
    }
    let digest = sha2::Sha256::digest(id.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{prefix}:sha256:{hex}{step}")
}
