//! `inbox bridge file-drop DIR`: seed 001's drop folder over inbox.
//!
//! Each `NAME.task.json`, in file-name order, is read (never through a
//! link, at most 64 KB), checked ([`super::descriptor`]) and sent as a new
//! thread; then `NAME.task.json.result` is written and the descriptor
//! renamed `.processed` (or `.failed` with the reason). The send carries an
//! idempotency key made of the name and the content, so a bridge killed
//! between the send and the rename sends nothing twice when it starts
//! again: the replay answers the same thread, and the files are finished.
//!
//! Beyond the seed, the bridge follows each thread it opened: when it
//! finishes, the outcome (status, summary, the result message, its
//! artifacts) is added to the `.result`, written whole and renamed over it.
//! Which results still wait is read back from the `.result` files at start
//! (`threadId` without `outcome`), so nothing is kept outside the folder
//! and the database. This module maps files to requests; it must never
//! apply an inbox rule.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::time::{Duration, SystemTime};

use inbox_engine::wire::*;
use inbox_engine::{EngineError, ErrorCode, EventId, Message, Output, Request, Status};
use inbox_host_native::folder::{Changes, Folder, ReadProblem, Woke};
use serde_json::json;

use super::descriptor::{self, Outcome, Refusal, ResultFile};
use super::{Bus, Lines, Stop, database_folder, folder_error, io_error, unexpected};
use crate::args::{FileDropArgs, Global};

const COMMAND: &str = "bridge-file-drop";

/// How long a descriptor that ends mid-JSON may still be being written:
/// younger, it is left for the next look; older, it is malformed.
const SETTLE: Duration = Duration::from_secs(2);

/// The bound on a `.result` read back at start (one with an outcome holds a
/// result message, at most a 1 MiB body plus its payload).
const RESULT_MAX_BYTES: u64 = 4 << 20;

/// Runs the bridge until it is stopped, or once with `--once`.
pub(crate) fn run(global: &Global, args: &FileDropArgs) -> u8 {
    let lines = Lines::new(global.json);
    let mut bridge = match FileDrop::start(global, args) {
        Ok(bridge) => bridge,
        Err(error) => return lines.fail(COMMAND, error),
    };
    let stop = match Stop::register() {
        Ok(stop) => stop,
        Err(e) => return lines.fail(COMMAND, io_error("cannot handle signals", &e)),
    };
    lines.action(
        "watching",
        json!({
            "dir": bridge.folder.path().display().to_string(),
            "database": bridge.bus.database,
            "notified": bridge.changes.notified(),
        }),
        &format!(
            "Watching {} for *.task.json (database: {})",
            Lines::safe(&bridge.folder.path().display().to_string()),
            Lines::safe(&bridge.bus.database)
        ),
    );
    let ended = bridge.run(args, &stop, &lines);
    match ended {
        Ok(()) => {
            let why = if stop.asked() { "signal" } else { "once" };
            lines.action("stopped", json!({ "reason": why }), "Stopped");
            0
        }
        Err(error) => lines.fail(COMMAND, error),
    }
}

/// The bridge's state: its folder, its connection, and the threads whose
/// outcome it still has to write.
struct FileDrop {
    folder: Folder,
    /// Held while the bridge runs: one bridge per folder.
    _lock: std::fs::File,
    changes: Changes,
    bus: Bus,
    from: String,
    to: Option<String>,
    trust_all: bool,
    /// Thread id → the descriptor it came from, until it finishes.
    following: BTreeMap<String, OsString>,
    /// The watch cursor: finishes after it are not seen yet.
    cursor: Option<EventId>,
    /// Descriptors cut short, left for a later look.
    settling: bool,
}

impl FileDrop {
    /// Opens the database and the folder, takes the folder's lock, and
    /// reads back which threads it follows.
    fn start(global: &Global, args: &FileDropArgs) -> Result<FileDrop, EngineError> {
        let bus = Bus::open(global)?;
        let folder = Folder::ensure(&args.dir).map_err(|e| folder_error(&args.dir, &e))?;
        let lock = super::lock(&folder)?;
        let changes = Changes::watch(&[folder.path(), database_folder(global).as_path()]);
        let mut bridge = FileDrop {
            folder,
            _lock: lock,
            changes,
            bus,
            from: args.from.clone(),
            to: args.to.clone(),
            trust_all: args.trust_all,
            following: BTreeMap::new(),
            cursor: None,
            settling: false,
        };
        // The cursor first, then the files: a thread that finishes in
        // between is seen by both, and written once (the second finds it
        // no longer followed).
        bridge.cursor = Some(bridge.bus.latest_event()?);
        bridge.read_following();
        Ok(bridge)
    }

    /// Processes, then sleeps until something changes, until stopped.
    fn run(&mut self, args: &FileDropArgs, stop: &Stop, lines: &Lines) -> Result<(), EngineError> {
        let poll = Duration::from_millis(args.run.poll_ms);
        let mut first = true;
        loop {
            self.keep_folder(lines)?;
            self.ingest(stop, lines)?;
            if first {
                // Threads that finished while no bridge ran.
                self.check_followed(lines)?;
                first = false;
            }
            self.write_outcomes(lines)?;
            // `--once` still waits for a file being written to settle: it
            // is there, only not finished.
            if (args.run.once && !self.settling) || stop.asked() {
                return Ok(());
            }
            let timeout = if self.settling {
                poll.min(SETTLE / 4)
            } else {
                poll
            };
            if self.changes.wait(timeout, Some(stop.fd())) == Woke::Stop {
                return Ok(());
            }
        }
    }

    /// Creates the folder again if it was removed (and watches the new one).
    fn keep_folder(&mut self, lines: &Lines) -> Result<(), EngineError> {
        if self.folder.exists() {
            return Ok(());
        }
        let path = self.folder.path().to_path_buf();
        self.folder = Folder::ensure(&path).map_err(|e| folder_error(&path, &e))?;
        if let Ok(Some(lock)) = self.folder.lock() {
            self._lock = lock;
        }
        self.changes.rewatch();
        lines.action(
            "recreated",
            json!({ "dir": path.display().to_string() }),
            &format!("Recreated {}", Lines::safe(&path.display().to_string())),
        );
        Ok(())
    }

    /// Every descriptor in the folder, in name order, until a stop.
    fn ingest(&mut self, stop: &Stop, lines: &Lines) -> Result<(), EngineError> {
        self.settling = false;
        let names = match self.folder.names_ending(descriptor::SUFFIX) {
            Ok(names) => names,
            // Removed meanwhile: recreated on the next turn.
            Err(_) => return Ok(()),
        };
        for name in names {
            if stop.asked() {
                break;
            }
            self.ingest_one(&name, lines)?;
        }
        Ok(())
    }

    /// One descriptor, to its end: dispatched, refused, or left to settle.
    fn ingest_one(&mut self, name: &OsStr, lines: &Lines) -> Result<(), EngineError> {
        let shown = name.to_string_lossy().into_owned();
        let bytes = match self.folder.read(name, descriptor::MAX_BYTES) {
            Ok((bytes, modified)) if still_written(&bytes, modified) => {
                self.settling = true;
                return Ok(());
            }
            Ok((bytes, _)) => bytes,
            Err(ReadProblem::Gone) => return Ok(()),
            Err(problem) => return self.refuse(name, &shown, &unreadable(problem), lines),
        };
        let thread = descriptor::parse(&bytes).and_then(|d| {
            if d.kind == "spawn_worker" && !self.trust_all {
                return Err(Refusal::Untrusted);
            }
            Ok((d.kind, d.thread(&shown, self.to.as_deref())?))
        });
        let (kind, thread) = match thread {
            Ok(thread) => thread,
            Err(refusal) => return self.refuse(name, &shown, &refusal, lines),
        };
        let to = thread.to.clone();
        let thread_id = match self.bus.execute(self.send(thread), Some(key(name, &bytes))) {
            Ok(Output::Send(sent)) => sent.thread.thread.thread_id,
            Ok(other) => return Err(unexpected(&other)),
            Err(error) => {
                let refusal = inbox_refusal(error)?;
                return self.refuse(name, &shown, &refusal, lines);
            }
        };
        let now = self.bus.now();
        let result = ResultFile::dispatched(kind, now, thread_id.clone(), to.clone());
        self.finish_file(name, &result, ".processed")?;
        self.following.insert(thread_id.clone(), name.to_owned());
        lines.action(
            "dispatched",
            json!({ "descriptor": shown, "thread_id": thread_id, "to": to }),
            &format!(
                "{} -> thread {thread_id} for {}",
                Lines::safe(&shown),
                Lines::safe(&to)
            ),
        );
        Ok(())
    }

    fn send(&self, thread: descriptor::Thread) -> Request {
        Request::Send(SendRequest {
            from_agent: Some(self.from.clone()),
            to_agent: Some(thread.to),
            subject: Some(thread.subject),
            body: Some(thread.body),
            task_id: thread.task_id,
            payload: Some(thread.payload),
            ..SendRequest::default()
        })
    }

    /// Writes a refusal's `.result` and renames the descriptor `.failed`.
    fn refuse(
        &mut self,
        name: &OsStr,
        shown: &str,
        refusal: &Refusal,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        let result = ResultFile::failed(refusal, self.bus.now());
        self.finish_file(name, &result, ".failed")?;
        lines.action(
            "refused",
            json!({ "descriptor": shown, "code": refusal.code(), "error": refusal.to_string() }),
            &format!(
                "{} refused: {}",
                Lines::safe(shown),
                Lines::safe(&refusal.to_string())
            ),
        );
        Ok(())
    }

    /// The `.result` first, then the rename: once the descriptor is gone
    /// from its name its result is there. A bridge stopped in between
    /// finds the descriptor again and finishes it (the send replays).
    fn finish_file(
        &self,
        name: &OsStr,
        result: &ResultFile,
        suffix: &str,
    ) -> Result<(), EngineError> {
        let write = self
            .folder
            .write_atomically(&with_suffix(name, ".result"), &result.to_bytes())
            .and_then(|()| self.folder.rename(name, &with_suffix(name, suffix)));
        write.map_err(|e| folder_error(&self.folder.join(name), &e))
    }

    /// The `.result` files of dispatched descriptors without an outcome.
    fn read_following(&mut self) {
        let Ok(names) = self.folder.names_ending(".task.json.result") else {
            return;
        };
        for result in names {
            let Ok((bytes, _)) = self.folder.read(&result, RESULT_MAX_BYTES) else {
                continue;
            };
            if let Some(thread) = ResultFile::awaiting(&bytes) {
                let bytes = result.as_bytes();
                let descriptor = OsStr::from_bytes(&bytes[..bytes.len() - ".result".len()]);
                self.following.insert(thread, descriptor.to_owned());
            }
        }
    }

    /// Each followed thread once, by its state now.
    fn check_followed(&mut self, lines: &Lines) -> Result<(), EngineError> {
        let threads: Vec<String> = self.following.keys().cloned().collect();
        for thread in threads {
            self.write_outcome(&thread, None, lines)?;
        }
        Ok(())
    }

    /// Every followed thread that finished since the cursor.
    fn write_outcomes(&mut self, lines: &Lines) -> Result<(), EngineError> {
        loop {
            let watched = match self.bus.execute(watch(self.cursor), None)? {
                Output::Watch(watched) => watched,
                other => return Err(unexpected(&other)),
            };
            self.cursor = Some(watched.next_event_id);
            for event in &watched.events {
                if self.following.contains_key(&event.thread_id) {
                    self.write_outcome(&event.thread_id, event.message_id.as_deref(), lines)?;
                }
            }
            if watched.events.len() < WATCH_PAGE as usize {
                return Ok(());
            }
        }
    }

    /// Adds the outcome of `thread` to its `.result`, if it has finished.
    fn write_outcome(
        &mut self,
        thread: &str,
        message: Option<&str>,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        let Some(name) = self.following.get(thread).cloned() else {
            return Ok(());
        };
        let Some(outcome) = self.outcome(thread, message)? else {
            return Ok(());
        };
        let result_name = with_suffix(&name, ".result");
        let read = self.folder.read(&result_name, RESULT_MAX_BYTES);
        let mut result = read
            .ok()
            .and_then(|(bytes, _)| serde_json::from_slice::<ResultFile>(&bytes).ok())
            // Removed or spoiled by someone else: written again whole.
            .unwrap_or_else(|| ResultFile {
                thread_id: Some(thread.to_owned()),
                ..ResultFile::failed(&Refusal::Unreadable("lost".into()), String::new())
            });
        let status = outcome.status;
        result.outcome = Some(outcome);
        self.folder
            .write_atomically(&result_name, &result.to_bytes())
            .map_err(|e| folder_error(&self.folder.join(&result_name), &e))?;
        self.following.remove(thread);
        let shown = name.to_string_lossy().into_owned();
        lines.action(
            "finished",
            json!({ "descriptor": shown, "thread_id": thread, "status": status }),
            &format!(
                "{} finished: thread {thread} is {}",
                Lines::safe(&shown),
                status.as_str()
            ),
        );
        Ok(())
    }

    /// The outcome of `thread` if it has finished: its status, when, and
    /// the message that finished it (`message`, else its last result).
    fn outcome(
        &mut self,
        thread: &str,
        message: Option<&str>,
    ) -> Result<Option<Outcome>, EngineError> {
        let mut after = None;
        let mut last_result: Option<Message> = None;
        loop {
            let request = Request::Show(ShowRequest {
                thread_id: Some(thread.to_owned()),
                after_message: after.clone(),
                limit: Some(inbox_engine::validate::MAX_LIMIT),
                ..ShowRequest::default()
            });
            let shown = match self.bus.execute(request, None) {
                Ok(Output::Show(shown)) => shown,
                Ok(other) => return Err(unexpected(&other)),
                Err(error) if error.code() == ErrorCode::ThreadNotFound => {
                    // Removed by retention before its outcome was seen.
                    self.following.remove(thread);
                    return Ok(None);
                }
                Err(error) => return Err(error),
            };
            if !shown.thread.thread.status.is_terminal() {
                return Ok(None);
            }
            after = shown.messages.last().map(|m| m.message_id.clone());
            for m in shown.messages {
                let finishing = message.map_or(m.kind == inbox_engine::Kind::Result, |id| {
                    id == m.message_id
                });
                if finishing {
                    last_result = Some(m);
                }
            }
            if !shown.more {
                return Ok(Some(outcome_of(&shown.thread.thread, last_result)));
            }
        }
    }
}

/// `.result`'s `outcome`: status, when, and the finishing message.
fn outcome_of(thread: &inbox_engine::Thread, message: Option<Message>) -> Outcome {
    Outcome {
        status: thread.status,
        finished_at: thread.updated_at,
        summary: message.as_ref().map(|m| m.summary.clone()),
        artifacts: message
            .as_ref()
            .map(|m| m.artifacts.clone())
            .unwrap_or_default(),
        result: message,
    }
}

/// At most this many events per look.
const WATCH_PAGE: u32 = 1000;

/// A look (never a block) at the threads that finished after `cursor`.
fn watch(cursor: Option<EventId>) -> Request {
    Request::Watch(WatchRequest {
        status: vec![Status::Done, Status::Failed, Status::Cancelled],
        after_event: cursor,
        timeout_seconds: Some(0),
        limit: Some(WATCH_PAGE),
        ..WatchRequest::default()
    })
}

/// Whether `bytes` look like a file still being written: the JSON stops
/// short and the file changed within [`SETTLE`].
fn still_written(bytes: &[u8], modified: SystemTime) -> bool {
    let recent = modified.elapsed().map_or(true, |age| age < SETTLE);
    recent && descriptor::is_truncated(bytes)
}

/// The idempotency key of a descriptor: its name and content, so a
/// restarted bridge replays the send, and another file never collides.
fn key(name: &OsStr, bytes: &[u8]) -> String {
    format!(
        "file-drop:{}",
        super::sha256_hex(&[name.as_bytes(), &[0], bytes])
    )
}

fn with_suffix(name: &OsStr, suffix: &str) -> OsString {
    let mut name = name.to_owned();
    name.push(suffix);
    name
}

fn unreadable(problem: ReadProblem) -> Refusal {
    match problem {
        ReadProblem::Symlink => Refusal::Symlink,
        ReadProblem::NotAFile => Refusal::NotAFile,
        ReadProblem::TooLarge(size) => Refusal::TooLarge(size),
        ReadProblem::Gone => Refusal::Unreadable("it was removed".into()),
        ReadProblem::Io(e) => Refusal::Unreadable(e.to_string()),
    }
}

/// A send inbox refused: the descriptor's fault (a bad address, a field
/// over its limit) is its refusal; the bridge's own (its token, the
/// database) stops the bridge, leaving the descriptor for the next start.
fn inbox_refusal(error: EngineError) -> Result<Refusal, EngineError> {
    let code = error.code();
    if super::bridge_s_own(code) {
        return Err(error);
    }
    Ok(Refusal::Inbox {
        code: code.as_str().to_owned(),
        message: error.to_string(),
    })
}
