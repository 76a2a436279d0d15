//! `inbox bridge file-drop DIR`: seed 001's drop folder over inbox.
//!
//! Each `NAME.task.json`, in file-name order, is read (never through a
//! link, at most 64 KB, only if the bridge's user owns it), checked
//! ([`super::descriptor`]) and sent as a new thread; then
//! `NAME.task.json.result` is written and the descriptor renamed
//! `.processed` (or `.failed` with the reason). Whether those renames can
//! happen (the names' length, a folder or an immutable file in the way,
//! the descriptor itself immutable) is asked before the send: a
//! descriptor that cannot be finished is refused unsent. What no check
//! can foresee, or a refusal that cannot even be renamed, leaves the
//! descriptor in place ("stuck"), reported once and tried again later; no
//! single file ever stops the bridge. Another user's file is passed over:
//! said once, nothing written for it.
//!
//! A descriptor is sent once. Before its send it is recorded
//! ([`super::sent`]: which file, its content, the send's idempotency key),
//! and its thread right after; the record goes when the descriptor is
//! renamed. A file found again that matches its record (a retry, a restart
//! after a crash, whatever happened to its times or to the key) has its
//! files finished for that thread, and is never sent again. Otherwise the
//! send's key is made of the name, the content and which file it is
//! (device, inode, and when it was written), so a file written anew under a
//! processed name is a new descriptor.
//!
//! Beyond the seed, the bridge follows each thread it opened: when it
//! finishes, the outcome (status, summary, the result message, its
//! artifacts) is added to the `.result`, written whole and renamed over it.
//! Which results still wait is read back from the `.result` files at start
//! (`threadId` without `outcome`). This module maps files to requests; it
//! must never apply an inbox rule.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::time::{Duration, Instant, SystemTime};

use inbox_engine::wire::*;
use inbox_engine::{EngineError, ErrorCode, EventId, Message, Output, Request, Status};
use inbox_host_native::folder::{
    Blocked, Changes, FileRead, Folder, Identity, ReadProblem, Woke, stall_point,
};
use serde_json::json;

use super::descriptor::{self, Outcome, Refusal, ResultFile};
use super::sent::{self, Entry, Sent};
use super::{Bus, Lines, Stop, database_folder, folder_error, io_error, unexpected};
use crate::args::FileDropArgs;
use inbox_host_native::Global;

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
    /// Other users' files passed over, by name, as they were when said (at
    /// most [`PAGE`], like `stuck`): said again only when they change.
    strangers: BTreeMap<OsString, Identity>,
    /// The descriptors sent and not finished.
    sent: Sent,
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
        let sent = open_sent(&folder)?;
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
            strangers: BTreeMap::new(),
            sent,
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
        // A new folder: what was recorded was of files that went with the
        // old one.
        self.sent = open_sent(&self.folder)?;
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
        // Forget what was stuck, passed over or sent under names that are
        // gone.
        let gone = |name: &OsStr| {
            page.covers(after.as_deref(), name)
                && page
                    .names
                    .binary_search_by(|n| n.as_bytes().cmp(name.as_bytes()))
                    .is_err()
        };
        self.stuck.retain(|name, _| !gone(name));
        self.strangers.retain(|name, _| !gone(name));
        self.sent.forget(&self.folder, gone);
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

    /// One descriptor, to its end: dispatched, refused, left to settle,
    /// left where it is (stuck) when its files cannot be written, or passed
    /// over when it is another user's.
    fn ingest_one(&mut self, name: &OsStr, lines: &Lines) -> Result<(), EngineError> {
        let look = self.folder.look(name).ok();
        let seen = look.map(|look| look.identity);
        if self.stuck.get(name).is_some_and(|stuck| stuck.waits(seen))
            || (seen.is_some() && self.strangers.get(name) == seen.as_ref())
        {
            return Ok(());
        }
        let file = Seen {
            name,
            shown: name.to_string_lossy().into_owned(),
            identity: seen,
        };
        // Another user's, known without opening it.
        if let Some(look) = look.filter(|look| look.owner != self.me) {
            self.pass_over(&file, look.owner, look.identity, lines);
            return Ok(());
        }
        let read = match self.folder.read_file(name, descriptor::MAX_BYTES) {
            Ok(read) if read.owner != self.me => {
                self.pass_over(&file, read.owner, read.identity, lines);
                return Ok(());
            }
            Ok(read) => read,
            Err(ReadProblem::Gone) => return Ok(()),
            Err(problem) => return self.refuse(&file, &unreadable(problem), lines),
        };
        // Sent before (this run or an earlier one): finished, never sent
        // again.
        if let Some(entry) = self.sent.resumable(&self.folder, name, &read) {
            return self.resume(&file, &read, entry, lines);
        }
        if self.shared_now && read.mode & 0o022 != 0 {
            return self.refuse(&file, &Refusal::OthersCanWrite(read.mode), lines);
        }
        if still_written(&read.bytes, read.modified) {
            self.settling = true;
            return Ok(());
        }
        let (kind, thread) = match self.accept(&file, &read.bytes) {
            Ok(accepted) => accepted,
            Err(refusal) => return self.refuse(&file, &refusal, lines),
        };
        let entry = Entry::sending(&read, key(name, &read), kind, &thread.to);
        self.send_recorded(&file, entry, thread, lines)
    }

    /// A descriptor that matches its record: its files finished for the
    /// thread it opened, or, if the send never answered, sent again under
    /// the recorded key (which replays it if it was made).
    fn resume(
        &mut self,
        file: &Seen<'_>,
        read: &FileRead,
        entry: Entry,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        if entry.thread.is_some() {
            return self.finish_dispatched(file, &entry, true, lines);
        }
        // The content is what was accepted then; the request is rebuilt
        // as it was (its recipient as recorded, whatever --to says now).
        let thread = descriptor::parse(&read.bytes)
            .and_then(|d| d.thread(&file.shown, Some(&entry.to)))
            .map(|thread| descriptor::Thread {
                to: entry.to.clone(),
                ..thread
            });
        match thread {
            Ok(thread) => self.send_recorded(file, entry, thread, lines),
            Err(refusal) => {
                let _ = self.sent.remove(&self.folder, file.name);
                self.refuse(file, &refusal, lines)
            }
        }
    }

    /// Records `entry`, sends `thread` under its key, records the thread
    /// it opened, and finishes the descriptor's files. Unrecorded, nothing
    /// is sent: the descriptor is left in place and tried again.
    fn send_recorded(
        &mut self,
        file: &Seen<'_>,
        mut entry: Entry,
        thread: descriptor::Thread,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        if let Err(unrecorded) = self.sent.put(&self.folder, file.name, entry.clone()) {
            let code = match unrecorded {
                sent::Unrecorded::Full => "too_many_unfinished",
                sent::Unrecorded::Io(_) => "unrecorded",
            };
            let error = format!("{unrecorded}; it was not sent, and is tried again later");
            self.stuck(file, None, code, error, lines);
            return Ok(());
        }
        let sent = self
            .bus
            .execute_keyed(self.send(thread), Some(entry.key.clone()));
        let (thread_id, replayed) = match sent {
            Ok((Output::Send(sent), replayed)) => (sent.thread.thread.thread_id, replayed),
            Ok((other, _)) => return Err(unexpected(&other)),
            Err(error) => {
                // The bridge's own failure leaves the record: the next
                // start sends again under the same key.
                let refusal = inbox_refusal(error)?;
                let _ = self.sent.remove(&self.folder, file.name);
                return self.refuse(file, &refusal, lines);
            }
        };
        entry.thread = Some(thread_id);
        // Unrecorded, the thread is still known to this run; a later
        // start finds the key (`keep_days`) as before this record existed.
        let _ = self.sent.put(&self.folder, file.name, entry.clone());
        stall_after_first_send();
        self.finish_dispatched(file, &entry, replayed, lines)
    }

    /// Writes a sent descriptor's `.result` and renames it `.processed`;
    /// leaves it in place (stuck) when that fails, its record kept so
    /// that it is finished later for the same thread.
    fn finish_dispatched(
        &mut self,
        file: &Seen<'_>,
        entry: &Entry,
        replayed: bool,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        let thread_id = entry.thread.clone().unwrap_or_default();
        let result = ResultFile::dispatched(
            &entry.kind,
            self.bus.now(),
            thread_id.clone(),
            entry.to.clone(),
        );
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
                "thread {thread_id} was sent, but {unfinished}; the descriptor is left in place, \
                 and its files are finished for this thread later (it is never sent again)"
            );
            self.stuck(file, Some(&thread_id), "unwritable", error, lines);
            return Ok(());
        }
        // Unrecorded, the next start forgets it anyway: its name is gone.
        let _ = self.sent.remove(&self.folder, file.name);
        self.stuck.remove(file.name);
        lines.action(
            "dispatched",
            json!({ "descriptor": file.shown, "thread_id": thread_id, "to": entry.to }),
            &format!(
                "{} -> thread {thread_id} for {}",
                Lines::safe(&file.shown),
                Lines::safe(&entry.to)
            ),
        );
        if replayed {
            // Sent before: its thread may have finished since.
            self.write_outcome(&thread_id, None, lines)?;
        }
        Ok(())
    }

    /// Says once that another user's file is left as it is: nothing is
    /// read from it or written for it (in a folder others can write, what
    /// strangers drop must not cost the owner files), said again only if
    /// it changes.
    fn pass_over(&mut self, file: &Seen<'_>, owner: u32, identity: Identity, lines: &Lines) {
        if self.strangers.get(file.name) == Some(&identity) {
            return;
        }
        if self.strangers.len() >= PAGE && !self.strangers.contains_key(file.name) {
            self.strangers.pop_first();
        }
        self.strangers.insert(file.name.to_owned(), identity);
        let refusal = Refusal::NotOwner { owner, me: self.me };
        let error = format!("{refusal}; it is left as it is, and nothing is written for it");
        lines.action(
            "passed_over",
            json!({
                "descriptor": file.shown, "code": refusal.code(), "owner": owner, "error": error
            }),
            &format!(
                "{} passed over: {}",
                Lines::safe(&file.shown),
                Lines::safe(&error)
            ),
        );
    }

    /// What seed 001 and this bridge refuse before sending: the content,
    /// a `spawn_worker` without `--trust-all`, no recipient, and a
    /// descriptor that could not be finished: one that cannot be renamed,
    /// or whose `.result` or `.processed` could not be written.
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
        self.folder
            .can_rename(file.name)
            .map_err(|blocked| unwritable(file.name.to_owned(), &blocked, "renamed"))?;
        let result = with_suffix(file.name, ".result");
        self.folder
            .can_write(&result)
            .map_err(|blocked| unwritable(result, &blocked, "written"))?;
        let processed = with_suffix(file.name, ".processed");
        self.folder
            .can_rename_to(&processed)
            .map_err(|blocked| unwritable(processed, &blocked, "written"))?;
        Ok((descriptor.kind, thread))
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
        // Not even `.failed` can it become (it cannot be renamed, or
        // something is at `.failed` that is not the bridge's to replace):
        // its `.result` would say it was refused while it waits where it is.
        let failed = with_suffix(file.name, ".failed");
        let renamable = self
            .folder
            .can_rename(file.name)
            .and_then(|()| self.folder.can_rename_to(&failed));
        if let Err(blocked) = renamable {
            let error = match refusal {
                Refusal::Unwritable {
                    done: "renamed", ..
                } => {
                    format!("{refusal}; it is left in place and tried again later")
                }
                _ => format!(
                    "{refusal}; it cannot be renamed .failed either ({blocked}), so it is left in \
                     place and nothing is written for it"
                ),
            };
            self.stuck(file, None, refusal.code(), error, lines);
            return Ok(());
        }
        let result = ResultFile::failed(refusal, self.bus.now());
        let result_name = with_suffix(file.name, ".result");
        let unwritten = self
            .folder
            .write_over_own(&result_name, &result.to_bytes())
            .err();
        match self.folder.rename_over_own(file.name, &failed) {
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
            .write_over_own(&result_name, &result.to_bytes())
            .map_err(|e| Unfinished::Result(result_name, e))?;
        let to = with_suffix(name, ".processed");
        self.folder
            .rename_over_own(name, &to)
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
        let written = self.folder.write_over_own(&result_name, &result.to_bytes());
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

/// The idempotency key of a new descriptor's send: its name, which file it
/// is (its device and inode and when it was written, [`Identity`]) and its
/// content. A file written anew under the same name, even with the same
/// content, is a new descriptor with a new key, and so is one in another
/// folder. (A descriptor sent before is known by its record, [`Sent`],
/// whose key is the one it was sent under.)
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
/// bridge was started with `--shared-dir` and the folder is sticky: whoever
/// can write it could drop descriptors, and, without the sticky bit, also
/// rename or remove the owner's own files (a `.processed` renamed back to
/// `.task.json` is a new job, run as the owner). Says whether it is such a
/// folder (then allowed).
fn check_private(folder: &Folder, shared: bool) -> Result<bool, EngineError> {
    let mode = folder.mode().map_err(|e| folder_error(folder.path(), &e))?;
    let refused = |message: String| EngineError::Relayed {
        code: ErrorCode::InvalidValue,
        message,
    };
    if mode & 0o022 == 0 {
        return Ok(false);
    }
    let shown = folder.path().display();
    if !shared {
        return Err(refused(format!(
            "{shown} can be written by other users (mode {mode:04o}), who could then make the \
             bridge send work; `chmod go-w` it, or make it sticky (`chmod +t`) and start the \
             bridge with --shared-dir (other users' descriptors are passed over either way)"
        )));
    }
    if mode & 0o1000 == 0 {
        return Err(refused(format!(
            "{shown} can be written by other users (mode {mode:04o}) and is not sticky, so they \
             can rename or remove the owner's files (a .processed renamed back to .task.json \
             would run again as the owner); `chmod +t` it, as /tmp is, or `chmod go-w` it"
        )));
    }
    Ok(true)
}

/// The record of descriptors sent and not finished, read back from
/// `folder`; the bridge does not start without it (it could send them
/// again).
fn open_sent(folder: &Folder) -> Result<Sent, EngineError> {
    Sent::open(folder).map_err(|e| {
        let path = folder.join(OsStr::new(sent::NAME));
        let error = std::io::Error::new(
            e.kind(),
            format!(
                "{e} (the record of descriptors sent and not finished: without it they could be \
                 sent again)"
            ),
        );
        folder_error(&path, &error)
    })
}

/// Test builds stop here once, after the first send and its record, when
/// [`inbox_host_native::folder::STALL_ENV`] says `file-drop-sent`: a test
/// can then break what comes next (the rename, the process) as no check
/// before the send could foresee.
fn stall_after_first_send() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| stall_point("file-drop-sent"));
}

/// The refusal of a descriptor whose file `file` (the descriptor itself,
/// or one the bridge would write for it) cannot be `done` ("renamed",
/// "written").
fn unwritable(file: OsString, blocked: &Blocked, done: &'static str) -> Refusal {
    let (code, problem) = match blocked {
        Blocked::TooLong { .. } => ("name_too_long", format!("{blocked}; use a shorter name")),
        Blocked::Folder(_) => ("output_in_the_way", format!("{blocked}; remove it")),
        Blocked::Foreign { .. } => (
            "output_in_the_way",
            format!("{blocked}; it is left as it is: remove it"),
        ),
        Blocked::Fixed { at, .. } if at == "." => ("unwritable", format!("the folder {blocked}")),
        Blocked::Fixed { at, .. } if *at == file && done == "renamed" => {
            ("unrenamable", blocked.to_string())
        }
        Blocked::Fixed { .. } => ("output_in_the_way", blocked.to_string()),
        Blocked::Io(_) => ("unwritable", blocked.to_string()),
    };
    Refusal::Unwritable {
        file: file.to_string_lossy().into_owned(),
        done,
        problem,
        code,
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
