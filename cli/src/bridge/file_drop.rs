//! `inbox bridge file-drop DIR`: seed 001's drop folder over inbox.
//!
//! Each `NAME.task.json`, in file-name order, is read (never through a
//! link, at most 64 KB, only if the bridge's user owns it), checked
//! ([`super::descriptor`]) and sent as a new thread; then
//! `NAME.task.json.result` is written and the descriptor renamed
//! `.processed` (or `.failed` with the reason). Whether those two names can
//! be written (their length, a folder in the way) is asked before the send:
//! a descriptor that cannot be finished is refused unsent. What no check
//! can foresee, or a refusal that cannot even be renamed, leaves the
//! descriptor in place ("stuck"), reported once and tried again later; no
//! single file ever stops the bridge. The send carries an idempotency key
//! made of the name, the content and which file it is (device, inode, and
//! when it was written), so a bridge killed between the send and the rename
//! sends nothing twice when it starts again (the replay answers the same
//! thread, and the files are finished), while a file written anew under a
//! processed name is a new descriptor.
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
use std::time::{Duration, Instant, SystemTime};

use inbox_engine::wire::*;
use inbox_engine::{EngineError, ErrorCode, EventId, Message, Output, Request, Status};
use inbox_host_native::folder::{Blocked, Changes, FileRead, Folder, Identity, ReadProblem, Woke};
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

/// How many names of the folder the bridge holds at once: a folder with
/// more is gone through a page at a time, so a shared folder that other
/// users fill with names costs the bridge time, never unbounded memory.
const PAGE: usize = 256;

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
    /// Whether DIR may be writable by other users (`--shared-dir`).
    shared_dir: bool,
    /// Whether it is, as of the last look.
    shared_now: bool,
    /// The bridge's user: only its files are taken.
    me: u32,
    /// Thread id → the descriptor it came from, until it finishes.
    following: BTreeMap<String, OsString>,
    /// The watch cursor: finishes after it are not seen yet.
    cursor: Option<EventId>,
    /// Descriptors cut short, left for a later look.
    settling: bool,
    /// Descriptors whose files could not be written, by name (at most
    /// [`PAGE`]: past that the first is forgotten, and said again when next
    /// seen).
    stuck: BTreeMap<OsString, Stuck>,
    /// Where the next look at the folder starts: after the last name of a
    /// page that had more after it, or at the first name.
    page_after: Option<OsString>,
    /// How long a stuck descriptor that did not change is left alone.
    retry: Duration,
}

/// A descriptor left where it is because its files could not be written:
/// reported once, looked at again after [`FileDrop::retry`] or as soon as
/// it is another file, so it neither stops the bridge nor spins it.
struct Stuck {
    identity: Option<Identity>,
    error: String,
    retry_at: Instant,
}

impl Stuck {
    /// Whether the descriptor now `seen` is still to be left alone.
    fn waits(&self, seen: Option<Identity>) -> bool {
        self.identity == seen && Instant::now() < self.retry_at
    }
}

impl FileDrop {
    /// Opens the database and the folder, takes the folder's lock, and
    /// reads back which threads it follows.
    fn start(global: &Global, args: &FileDropArgs) -> Result<FileDrop, EngineError> {
        let bus = Bus::open(global)?;
        let folder = Folder::ensure(&args.dir).map_err(|e| folder_error(&args.dir, &e))?;
        let shared_now = check_private(&folder, args.shared_dir)?;
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
            shared_dir: args.shared_dir,
            shared_now,
            me: rustix::process::geteuid().as_raw(),
            following: BTreeMap::new(),
            cursor: None,
            settling: false,
            stuck: BTreeMap::new(),
            page_after: None,
            retry: Duration::from_millis(args.run.poll_ms).max(Duration::from_secs(1)),
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
            if stop.asked() {
                return Ok(());
            }
            // The rest of a folder larger than a page, before any sleep.
            if self.page_after.is_some() {
                continue;
            }
            // `--once` still waits for a file being written to settle: it
            // is there, only not finished.
            if args.run.once && !self.settling {
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

    /// Creates the folder again if it was removed (and watches the new one);
    /// stops the bridge if it was opened to other users meanwhile.
    fn keep_folder(&mut self, lines: &Lines) -> Result<(), EngineError> {
        if self.folder.exists() {
            self.shared_now = check_private(&self.folder, self.shared_dir)?;
            return Ok(());
        }
        let path = self.folder.path().to_path_buf();
        self.folder = Folder::ensure(&path).map_err(|e| folder_error(&path, &e))?;
        self.shared_now = check_private(&self.folder, self.shared_dir)?;
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

    /// The next page of descriptors in the folder, in name order, until a
    /// stop. A folder that holds more than a page is gone through a page
    /// per call, so that whatever other users drop into a shared folder,
    /// the bridge keeps at most [`PAGE`] names at once.
    fn ingest(&mut self, stop: &Stop, lines: &Lines) -> Result<(), EngineError> {
        if self.page_after.is_none() {
            self.settling = false;
        }
        let after = self.page_after.take();
        let page = match self
            .folder
            .names_after(descriptor::SUFFIX, after.as_deref(), PAGE)
        {
            Ok(page) => page,
            // Removed meanwhile: recreated on the next turn.
            Err(_) => return Ok(()),
        };
        // Forget what was stuck under names that are gone.
        self.stuck.retain(|name, _| {
            !page.covers(after.as_deref(), name)
                || page
                    .names
                    .binary_search_by(|n| n.as_bytes().cmp(name.as_bytes()))
                    .is_ok()
        });
        if page.more {
            self.page_after = page.names.last().cloned();
        }
        for name in page.names {
            if stop.asked() {
                break;
            }
            self.ingest_one(&name, lines)?;
        }
        Ok(())
    }

    /// One descriptor, to its end: dispatched, refused, left to settle, or
    /// left where it is (stuck) when its files cannot be written.
    fn ingest_one(&mut self, name: &OsStr, lines: &Lines) -> Result<(), EngineError> {
        let seen = self.folder.identity(name).ok();
        if self.stuck.get(name).is_some_and(|stuck| stuck.waits(seen)) {
            return Ok(());
        }
        let file = Seen {
            name,
            shown: name.to_string_lossy().into_owned(),
            identity: seen,
        };
        let read = match self.folder.read_file(name, descriptor::MAX_BYTES) {
            Ok(read) if read.owner != self.me => {
                let refusal = Refusal::NotOwner {
                    owner: read.owner,
                    me: self.me,
                };
                return self.refuse(&file, &refusal, lines);
            }
            Ok(read) if self.shared_now && read.mode & 0o022 != 0 => {
                return self.refuse(&file, &Refusal::OthersCanWrite(read.mode), lines);
            }
            Ok(read) if still_written(&read.bytes, read.modified) => {
                self.settling = true;
                return Ok(());
            }
            Ok(read) => read,
            Err(ReadProblem::Gone) => return Ok(()),
            Err(problem) => return self.refuse(&file, &unreadable(problem), lines),
        };
        let (kind, thread) = match self.accept(&file, &read.bytes) {
            Ok(accepted) => accepted,
            Err(refusal) => return self.refuse(&file, &refusal, lines),
        };
        let to = thread.to.clone();
        let sent = self
            .bus
            .execute_keyed(self.send(thread), Some(key(name, &read)));
        let (thread_id, replayed) = match sent {
            Ok((Output::Send(sent), replayed)) => (sent.thread.thread.thread_id, replayed),
            Ok((other, _)) => return Err(unexpected(&other)),
            Err(error) => {
                let refusal = inbox_refusal(error)?;
                return self.refuse(&file, &refusal, lines);
            }
        };
        let result = ResultFile::dispatched(kind, self.bus.now(), thread_id, to);
        self.finish_dispatched(&file, result, replayed, lines)
    }

    /// Writes a sent descriptor's `.result` and renames it `.processed`;
    /// leaves it in place (stuck) when that fails.
    fn finish_dispatched(
        &mut self,
        file: &Seen<'_>,
        result: ResultFile,
        replayed: bool,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        let thread_id = result.thread_id.clone().unwrap_or_default();
        let to = result.to.clone().unwrap_or_default();
        let finished = self.finish_file(file.name, &result);
        if !matches!(finished, Err(Unfinished::Result(..))) {
            self.following
                .insert(thread_id.clone(), file.name.to_owned());
        }
        let finished = match finished {
            // Taken away by someone after the send: its `.result` is there.
            Err(Unfinished::Rename(_, e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            finished => finished,
        };
        if let Err(unfinished) = finished {
            let error = format!(
                "thread {thread_id} was sent, but {unfinished}; the descriptor is left in place and \
                 tried again (the send replays, nothing is sent twice)"
            );
            self.stuck(file, Some(&thread_id), "unwritable", error, lines);
            return Ok(());
        }
        self.stuck.remove(file.name);
        lines.action(
            "dispatched",
            json!({ "descriptor": file.shown, "thread_id": thread_id, "to": to }),
            &format!(
                "{} -> thread {thread_id} for {}",
                Lines::safe(&file.shown),
                Lines::safe(&to)
            ),
        );
        if replayed {
            // Sent before a stop: its thread may have finished since.
            self.write_outcome(&thread_id, None, lines)?;
        }
        Ok(())
    }

    /// What seed 001 and this bridge refuse before sending: the content,
    /// a `spawn_worker` without `--trust-all`, no recipient, and a
    /// descriptor whose `.result` or `.processed` could not be written.
    fn accept(
        &self,
        file: &Seen<'_>,
        bytes: &[u8],
    ) -> Result<(&'static str, descriptor::Thread), Refusal> {
        let descriptor = descriptor::parse(bytes)?;
        if descriptor.kind == "spawn_worker" && !self.trust_all {
            return Err(Refusal::Untrusted);
        }
        let thread = descriptor.thread(&file.shown, self.to.as_deref())?;
        for suffix in [".result", ".processed"] {
            self.writable(file.name, suffix)?;
        }
        Ok((descriptor.kind, thread))
    }

    /// Refuses a descriptor whose file `NAME{suffix}` cannot be written now.
    fn writable(&self, name: &OsStr, suffix: &str) -> Result<(), Refusal> {
        let output = with_suffix(name, suffix);
        self.folder.can_write(&output).map_err(|blocked| {
            let (code, problem) = match &blocked {
                Blocked::TooLong { .. } => {
                    ("name_too_long", format!("{blocked}; use a shorter name"))
                }
                Blocked::Folder(_) => ("output_in_the_way", format!("{blocked}; remove it")),
                Blocked::Io(_) => ("unwritable", blocked.to_string()),
            };
            Refusal::Unwritable {
                file: output.to_string_lossy().into_owned(),
                problem,
                code,
            }
        })
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

    /// Writes a refusal's `.result` and renames the descriptor `.failed`;
    /// renamed without its `.result` when that cannot be written (the
    /// line says why), and left in place (stuck) when even the rename
    /// fails.
    fn refuse(
        &mut self,
        file: &Seen<'_>,
        refusal: &Refusal,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        let result = ResultFile::failed(refusal, self.bus.now());
        let result_name = with_suffix(file.name, ".result");
        let unwritten = self
            .folder
            .write_atomically(&result_name, &result.to_bytes())
            .err();
        let failed = with_suffix(file.name, ".failed");
        match self.folder.rename(file.name, &failed) {
            Ok(()) => {}
            // Taken away meanwhile: nothing is left to refuse.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                let error = format!(
                    "{refusal}; it could not be renamed {} either ({e}), so it is left in place",
                    failed.to_string_lossy()
                );
                self.stuck(file, None, refusal.code(), error, lines);
                return Ok(());
            }
        }
        self.stuck.remove(file.name);
        let mut fields = json!({
            "descriptor": file.shown, "code": refusal.code(), "error": refusal.to_string()
        });
        let mut human = format!(
            "{} refused: {}",
            Lines::safe(&file.shown),
            Lines::safe(&refusal.to_string())
        );
        if let Some(e) = unwritten {
            let why = format!(
                "{} could not be written: {e}",
                result_name.to_string_lossy()
            );
            human.push_str(&format!(" ({})", Lines::safe(&why)));
            fields["result_error"] = why.into();
        }
        lines.action("refused", fields, &human);
        Ok(())
    }

    /// Leaves a descriptor whose files could not be written where it is,
    /// and says so once (again only when the reason or the file changes).
    fn stuck(
        &mut self,
        file: &Seen<'_>,
        thread: Option<&str>,
        code: &str,
        error: String,
        lines: &Lines,
    ) {
        let known = self
            .stuck
            .get(file.name)
            .is_some_and(|stuck| stuck.identity == file.identity && stuck.error == error);
        let human = format!(
            "{} stuck: {}",
            Lines::safe(&file.shown),
            Lines::safe(&error)
        );
        let fields = json!({
            "descriptor": file.shown, "thread_id": thread, "code": code, "error": error
        });
        if self.stuck.len() >= PAGE && !self.stuck.contains_key(file.name) {
            self.stuck.pop_first();
        }
        self.stuck.insert(
            file.name.to_owned(),
            Stuck {
                identity: file.identity,
                error,
                retry_at: Instant::now() + self.retry,
            },
        );
        if !known {
            lines.action("stuck", fields, &human);
        }
    }

    /// The `.result` first, then the rename to `.processed`: once the
    /// descriptor is gone from its name its result is there. A bridge
    /// stopped in between finds the descriptor again and finishes it (the
    /// send replays).
    fn finish_file(&self, name: &OsStr, result: &ResultFile) -> Result<(), Unfinished> {
        let result_name = with_suffix(name, ".result");
        self.folder
            .write_atomically(&result_name, &result.to_bytes())
            .map_err(|e| Unfinished::Result(result_name, e))?;
        let to = with_suffix(name, ".processed");
        self.folder
            .rename(name, &to)
            .map_err(|e| Unfinished::Rename(to, e))
    }

    /// The `.result` files of dispatched descriptors without an outcome.
    fn read_following(&mut self) {
        let mut after: Option<OsString> = None;
        loop {
            let Ok(page) = self
                .folder
                .names_after(".task.json.result", after.as_deref(), PAGE)
            else {
                return;
            };
            after = page.more.then(|| page.names.last().cloned()).flatten();
            self.follow_results(page.names);
            if after.is_none() {
                return;
            }
        }
    }

    /// [`FileDrop::read_following`] for one page of `.result` files.
    fn follow_results(&mut self, names: Vec<OsString>) {
        for result in names {
            // Only the bridge's own: another user's could name any thread.
            let Ok(read) = self.folder.read_file(&result, RESULT_MAX_BYTES) else {
                continue;
            };
            if read.owner != self.me {
                continue;
            }
            if let Some(thread) = ResultFile::awaiting(&read.bytes) {
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
        let read = self.folder.read_file(&result_name, RESULT_MAX_BYTES);
        let mut result = read
            .ok()
            .filter(|read| read.owner == self.me)
            .and_then(|read| serde_json::from_slice::<ResultFile>(&read.bytes).ok())
            // Removed or spoiled by someone else: written again whole.
            .unwrap_or_else(|| ResultFile {
                thread_id: Some(thread.to_owned()),
                ..ResultFile::failed(&Refusal::Unreadable("lost".into()), String::new())
            });
        let status = outcome.status;
        result.outcome = Some(outcome);
        let written = self
            .folder
            .write_atomically(&result_name, &result.to_bytes());
        self.following.remove(thread);
        let shown = name.to_string_lossy().into_owned();
        if let Err(e) = written {
            // The thread keeps its outcome; only this file lacks it. Not a
            // reason to stop bridging the other descriptors.
            let error = format!(
                "{} could not be written: {e}; the outcome is in inbox (inbox show --thread \
                 {thread})",
                result_name.to_string_lossy()
            );
            lines.action(
                "outcome_unwritten",
                json!({ "descriptor": shown, "thread_id": thread, "status": status, "error": error }),
                &format!("{} finished, unwritten: {}", Lines::safe(&shown), Lines::safe(&error)),
            );
            return Ok(());
        }
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

/// The idempotency key of a descriptor: its name, which file it is (its
/// device and inode and when it was written, [`Identity`]) and its
/// content. A bridge started again after a crash finds the same file and
/// replays the send; a file written anew under the same name, even with
/// the same content, is a new descriptor with a new key, and so is one in
/// another folder.
fn key(name: &OsStr, read: &FileRead) -> String {
    let identity = read.identity.to_bytes();
    format!(
        "file-drop:{}",
        super::sha256_hex(&[name.as_bytes(), &[0], &identity, &read.bytes])
    )
}

/// A descriptor in hand: its name, as shown to people, and which file it
/// was when the bridge looked.
struct Seen<'a> {
    name: &'a OsStr,
    shown: String,
    identity: Option<Identity>,
}

/// Why a dispatched descriptor could not be finished.
enum Unfinished {
    /// Its `.result` (the name) could not be written.
    Result(OsString, std::io::Error),
    /// It could not be renamed (to the name).
    Rename(OsString, std::io::Error),
}

impl std::fmt::Display for Unfinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unfinished::Result(name, e) => {
                write!(f, "{} could not be written ({e})", name.to_string_lossy())
            }
            Unfinished::Rename(name, e) => {
                write!(
                    f,
                    "it could not be renamed {} ({e})",
                    name.to_string_lossy()
                )
            }
        }
    }
}

/// Refuses a folder users other than its owner may write, unless the
/// bridge was started with `--shared-dir`: whoever can write it could drop
/// descriptors, or rename the owner's own files into new ones. Says
/// whether it is such a folder (then allowed).
fn check_private(folder: &Folder, shared: bool) -> Result<bool, EngineError> {
    let mode = folder
        .writable_by_others()
        .map_err(|e| folder_error(folder.path(), &e))?;
    match mode {
        Some(mode) if !shared => Err(EngineError::Relayed {
            code: ErrorCode::InvalidValue,
            message: format!(
                "{} can be written by other users (mode {mode:04o}), who could then make the \
                 bridge send work; `chmod go-w` it, or start the bridge with --shared-dir (other \
                 users' descriptors are refused either way)",
                folder.path().display()
            ),
        }),
        mode => Ok(mode.is_some()),
    }
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
