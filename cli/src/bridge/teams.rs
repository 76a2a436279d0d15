//! `inbox bridge teams DIR`: an Agent Teams folder kept in step with inbox,
//! both ways.
//!
//! The folder is seed 002's (`members/<member>/inbox`, JSONL appended by
//! anyone) or Claude Code's (`inboxes/<agent>.json`, a JSON array rewritten
//! whole under a lock). Inbound, each line (or unread entry) is mapped by
//! [`super::teams_line`] and applied through the engine under an idempotency
//! key made of the member's file and the line's bytes: applying a line again
//! (after a crash, a restart without a hint, a rotation that moved lines)
//! writes nothing twice. Outbound, each member's mailbox is read after a
//! cursor and every message to it is appended to its file with a marker
//! (thread, message and event id).
//!
//! Where the bridge is: the database holds the truth (every applied line is
//! an idempotency record; every outbound line is in the member's file with
//! its event id, which the inbound scan reads back). The bridge's hint
//! ([`super::teams_hint`]) is kept beside the database, never in the team
//! folder (which every agent writes): per member its read offset, line
//! number and file identity, and its outbound cursor.
//!
//! The outbound cursor decides what a member is never sent again, so it is
//! made only of facts the bridge checks: the hint's cursor (its own file,
//! no further than the database's newest event), else the newest event of
//! the bridge's first start on the folder (a member it never wrote to),
//! and the bridge's own lines in the member's file. A line is the bridge's
//! own when its marker names a message the database has, with that event
//! and thread, in that member's mailbox, written to that member, with
//! that message's time and words (a marker is text anyone can write or
//! copy); anything else carrying a marker is
//! said (`skipped`, `unverified_marker`) and moves nothing. The bridge
//! writes a member's messages in event order, so its own lines run on from
//! the cursor: it moves over them (a crash after an append and before the
//! hint's save writes nothing twice), but over a line of its own only
//! where every message before it is in the file too. One after a gap (an
//! agent that read a message's ids and wrote its marker) is said
//! (`skipped`, `out_of_order`) and not trusted: the messages in the gap
//! and its own are written. A hint cursor ahead of the
//! database is said (`hint_ignored`) and dropped; a member whose cursor is
//! dropped, or all of them when the hint is lost while their files show
//! the bridge was here, restart from the first of the bridge's own lines
//! in the file, else from the member's first unread message (said,
//! `cursor_rebuilt`): what was sent while the bridge was down is never
//! skipped. A Claude Code file is replaced under its lock only while the
//! lock is still the bridge's ([`inbox_host_native::folder::lock`]); a
//! race lost to another writer is said (`lost_race`) and its messages wait
//! for the next pass.
//!
//! This module maps files to requests; it must never apply an inbox rule
//! itself, and never write a member's file except by appending (seed 002)
//! or replacing it whole under its lock (Claude Code).

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{BufReader, Seek as _, SeekFrom};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use inbox_engine::wire::*;
use inbox_engine::{EngineError, ErrorCode, EventId, Kind, Output, Request, Status};
use inbox_host_native::folder::{Changes, Folder, ReadProblem, Replaced, Woke, stall_point};
use serde_json::{Value, json};

use super::teams_hint::{self, Found, Hint, Place};
use super::teams_line::{self, Inbound, LineProblem, MAX_LINE_BYTES, Marker, Open, Recipient};
use super::{Bus, Lines, Stop, bridge_s_own, database_folder, folder_error, io_error, unexpected};
use crate::args::TeamsArgs;
use inbox_host_native::Global;

const COMMAND: &str = "bridge-teams";

/// A member's seed 002 inbox, and the lock its writers take.
const INBOX: &str = "inbox";
const INBOX_LOCK: &str = "inbox.lock";

/// The bound on a Claude Code inbox file read whole.
const ENTRIES_MAX_BYTES: u64 = 64 << 20;

/// A Claude Code lock older than this is a crashed holder's
/// (`proper-lockfile`'s default).
const LOCK_STALE: Duration = Duration::from_secs(10);
const LOCK_PATIENCE: Duration = Duration::from_secs(30);

/// A bridge claim for a member: members of a file-based team renew nothing,
/// so the lease is the longest inbox grants.
const MEMBER_LEASE_SECONDS: u64 = 86_400;

/// Which layout a team folder has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Seed 002: `members/<member>/inbox`.
    Members,
    /// Claude Code: `inboxes/<agent>.json`.
    Inboxes,
}

impl Layout {
    fn folder(self) -> &'static str {
        match self {
            Layout::Members => "members",
            Layout::Inboxes => "inboxes",
        }
    }

    /// What the folder calls its coordinator.
    fn lead(self) -> &'static str {
        match self {
            Layout::Members => "coordinator",
            Layout::Inboxes => "team-lead",
        }
    }
}

/// Runs the bridge until it is stopped, or once with `--once`.
pub(crate) fn run(global: &Global, args: &TeamsArgs) -> u8 {
    let lines = Lines::new(global.json);
    let mut bridge = match Teams::start(global, args) {
        Ok(bridge) => bridge,
        Err(error) => return lines.fail(COMMAND, error),
    };
    let stop = match Stop::register() {
        Ok(stop) => stop,
        Err(e) => return lines.fail(COMMAND, io_error("cannot handle signals", &e)),
    };
    let dir = bridge.root.path().display().to_string();
    lines.action(
        "watching",
        json!({
            "dir": dir,
            "layout": bridge.layout.folder(),
            "database": bridge.bus.database,
            "notified": bridge.changes.notified(),
        }),
        &format!(
            "Watching {} ({}/) (database: {})",
            Lines::safe(&dir),
            bridge.layout.folder(),
            Lines::safe(&bridge.bus.database)
        ),
    );
    if let Err(error) = bridge.check_hint(&lines) {
        return lines.fail(COMMAND, error);
    }
    match bridge.run(args, &stop, &lines) {
        Ok(()) => {
            let why = if stop.asked() { "signal" } else { "once" };
            lines.action("stopped", json!({ "reason": why }), "Stopped");
            0
        }
        Err(error) => lines.fail(COMMAND, error),
    }
}

/// The bridge's state.
struct Teams {
    root: Folder,
    /// The team folder's identity in the bridge's markers: a digest of its
    /// canonical path.
    team: String,
    layout: Layout,
    /// `DIR/members` or `DIR/inboxes`.
    folder: Folder,
    /// Held while the bridge runs: one bridge per team folder.
    _lock: std::fs::File,
    changes: Changes,
    database_folder: PathBuf,
    bus: Bus,
    /// `--lead`: the inbox agent the folder's coordinator is.
    lead: Option<String>,
    /// The members (folder names) watched now.
    members: Vec<String>,
    /// Where the hint is kept, beside the database.
    hint_path: PathBuf,
    hint: Hint,
    saved: Hint,
    /// The newest event of the bridge's first start on this folder: a
    /// member it never wrote to gets what is sent after it.
    since: EventId,
    /// The `out_of_order` lines said, per member and event: said once.
    said_out_of_order: HashSet<(String, EventId)>,
    /// The problem last reported for a member's file, said once until it
    /// changes or goes away.
    problems: HashMap<String, String>,
    /// Whether the last keyed write was a replay (a line applied before).
    replayed: bool,
    /// Thread id → the task id lines name it by.
    tasks: HashMap<String, String>,
    /// Claude Code: per member, the keys of the entries in its file checked
    /// to be the bridge's own, with their event (not checked again while
    /// they stay).
    own_entries: HashMap<String, HashMap<String, EventId>>,
}

impl Teams {
    /// Opens the database and the folder, takes the folder's lock.
    fn start(global: &Global, args: &TeamsArgs) -> Result<Teams, EngineError> {
        let layout = detect(&args.dir)?;
        let bus = Bus::open(global)?;
        let root = Folder::ensure(&args.dir).map_err(|e| folder_error(&args.dir, &e))?;
        let inner = args.dir.join(layout.folder());
        let folder = Folder::ensure(&inner).map_err(|e| folder_error(&inner, &e))?;
        let lock = super::lock(&root)?;
        let team = team_id(&args.dir).map_err(|e| folder_error(&args.dir, &e))?;
        let hint_path = teams_hint::path(
            &inbox_host_native::database::resolve_db(global).0.path,
            &team,
        );
        let database_folder = database_folder(global);
        let changes = Changes::watch(&[folder.path(), database_folder.as_path()]);
        Ok(Teams {
            root,
            team,
            layout,
            folder,
            _lock: lock,
            changes,
            database_folder,
            bus,
            lead: args.lead.clone(),
            members: Vec::new(),
            hint_path,
            saved: Hint::default(),
            hint: Hint::default(),
            since: 0,
            said_out_of_order: HashSet::new(),
            problems: HashMap::new(),
            replayed: false,
            tasks: HashMap::new(),
            own_entries: HashMap::new(),
        })
    }

    /// Both directions, then sleeps until something changes, until stopped.
    fn run(&mut self, args: &TeamsArgs, stop: &Stop, lines: &Lines) -> Result<(), EngineError> {
        let poll = Duration::from_millis(args.run.poll_ms);
        loop {
            self.refresh_members();
            for member in self.members.clone() {
                if stop.asked() {
                    break;
                }
                self.inbound(&member, stop, lines)?;
                self.save_hint()?;
            }
            if stop.asked() {
                return Ok(());
            }
            self.settle();
            for member in self.members.clone() {
                if stop.asked() {
                    break;
                }
                self.outbound(&member, lines)?;
                self.save_hint()?;
            }
            if args.run.once || stop.asked() {
                return Ok(());
            }
            if self.changes.wait(poll, Some(stop.fd())) == Woke::Stop {
                return Ok(());
            }
        }
    }

    /// The members now; a new one is watched (its folder, for appends).
    fn refresh_members(&mut self) {
        let members = match self.layout {
            Layout::Members => self.folder.subfolders(),
            Layout::Inboxes => self.folder.names_ending(".json").map(|names| {
                names
                    .into_iter()
                    .filter(|n| !n.as_encoded_bytes().starts_with(b"."))
                    .collect()
            }),
        };
        let members: Vec<String> = members
            .unwrap_or_default()
            .into_iter()
            .filter_map(|name| name.into_string().ok())
            .map(|name| match self.layout {
                Layout::Members => name,
                Layout::Inboxes => name.trim_end_matches(".json").to_owned(),
            })
            .collect();
        if members == self.members {
            return;
        }
        self.members = members;
        if self.layout == Layout::Members {
            let mut folders = vec![
                self.folder.path().to_path_buf(),
                self.database_folder.clone(),
            ];
            folders.extend(self.members.iter().map(|m| self.folder.join(OsStr::new(m))));
            let folders: Vec<&Path> = folders.iter().map(PathBuf::as_path).collect();
            self.changes = Changes::watch(&folders);
        }
    }

    /// The inbox agent a name of the folder is.
    fn agent(&self, name: &str) -> String {
        match &self.lead {
            Some(lead) if name == self.layout.lead() => lead.clone(),
            _ => name.to_owned(),
        }
    }

    /// The folder's name for an inbox agent.
    fn member_name(&self, agent: &str) -> String {
        match &self.lead {
            Some(lead) if agent == lead => self.layout.lead().to_owned(),
            _ => agent.to_owned(),
        }
    }

    fn place(&mut self, member: &str) -> &mut Place {
        self.hint.members.entry(member.to_owned()).or_default()
    }

    /// Writes the hint if it changed.
    fn save_hint(&mut self) -> Result<(), EngineError> {
        if self.hint == self.saved {
            return Ok(());
        }
        teams_hint::write(&self.hint_path, &self.hint)
            .map_err(|e| folder_error(&self.hint_path, &e))?;
        self.saved = self.hint.clone();
        Ok(())
    }

    /// Takes the hint found at the start, checked against the database. A
    /// spoiled one, or one of a database further on than this one, is said
    /// and no member's cursor is taken from it (`lost`); a member whose
    /// cursor is ahead of the database (a hint edited, a database put back
    /// from a copy) is said, its file read again from its start and its
    /// cursor found again ([`Teams::first_cursor`]). Without a hint, whether
    /// the bridge was here is settled once every file was read
    /// ([`Teams::settle`]).
    fn check_hint(&mut self, lines: &Lines) -> Result<(), EngineError> {
        let latest = self.bus.latest_event()?;
        let mut hint = match teams_hint::read(&self.hint_path) {
            Found::Hint(hint) => hint,
            Found::Spoiled(why) => whole_hint_ignored(&why, lines),
            Found::Missing => Hint::default(),
        };
        if let Some(since) = hint.since.filter(|s| *s > latest) {
            let why = format!(
                "{} is of a database further on (first start at event {since}, the database's \
                 newest is {latest})",
                self.hint_path.display()
            );
            hint = whole_hint_ignored(&why, lines);
        }
        let ahead: Vec<(String, EventId)> = hint
            .members
            .iter()
            .filter_map(|(m, p)| {
                let known = p.ahead.keys().next_back().copied().max(p.outbound);
                known.filter(|k| *k > latest).map(|k| (m.clone(), k))
            })
            .collect();
        for (member, known) in ahead {
            let error = format!(
                "the hint's outbound cursor (event {known}) is ahead of the database (event \
                 {latest}); dropped: the member's file is read again from its start and its \
                 cursor found again from the bridge's own lines there (checked), else from its \
                 first unread message"
            );
            lines.action(
                "hint_ignored",
                json!({ "member": member, "error": error }),
                &format!("{}: {error}", Lines::safe(&member)),
            );
            let rebuild = Place {
                rebuild: true,
                ..Place::default()
            };
            hint.members.insert(member, rebuild);
        }
        self.since = *hint.since.get_or_insert(latest);
        self.hint = hint;
        self.save_hint()
    }

    /// Once every member's file was read after no hint could be taken: if
    /// the hint was there but not taken, or any file holds a line of the
    /// bridge's own (checked), the bridge was here and its hint was lost,
    /// so every member without a cursor has it found again
    /// ([`Teams::first_cursor`]) rather than taken from this start.
    fn settle(&mut self) {
        if self.hint.settled {
            return;
        }
        let lost = self.hint.lost
            || self.members.iter().any(|m| {
                self.hint
                    .members
                    .get(m)
                    .is_some_and(|p| !p.ahead.is_empty())
            });
        if lost {
            for member in self.members.clone() {
                let place = self.place(&member);
                if place.outbound.is_none() {
                    place.rebuild = true;
                }
            }
        }
        self.hint.lost = false;
        self.hint.settled = true;
    }

    /// The cursor of a member the hint has none for. A member the bridge
    /// never wrote to gets what was sent after its first start on the
    /// folder. One whose cursor was dropped or lost restarts just before
    /// the first of the bridge's own lines in its file (every message after
    /// it that the file lacks is written), else before its first unread
    /// message; said.
    fn first_cursor(
        &mut self,
        member: &str,
        agent: &str,
        lines: &Lines,
    ) -> Result<EventId, EngineError> {
        if !self.place(member).rebuild {
            return Ok(self.since);
        }
        let first_own = self.place(member).ahead.keys().next().copied();
        let (cursor, reason) = match first_own {
            Some(first) => (
                first.saturating_sub(1),
                format!(
                    "no cursor kept for it: it restarts at the first of the bridge's own lines in \
                     its file (event {first}); every later message the file lacks is written, \
                     earlier ones are taken as delivered"
                ),
            ),
            None => match self.first_unread(agent)? {
                Some(first) => (
                    first.saturating_sub(1),
                    format!(
                        "no cursor kept for it and no line of the bridge's own in its file: every \
                         message from its first unread one (event {first}) on is written"
                    ),
                ),
                // Nothing unread and nothing of the bridge's: nothing waits.
                None => {
                    self.place(member).rebuild = false;
                    return self.bus.latest_event();
                }
            },
        };
        lines.action(
            "cursor_rebuilt",
            json!({ "member": member, "after_event": cursor, "reason": reason }),
            &format!("{}: {reason}", Lines::safe(member)),
        );
        self.place(member).rebuild = false;
        Ok(cursor)
    }

    /// The event of `agent`'s first unread message.
    fn first_unread(&mut self, agent: &str) -> Result<Option<EventId>, EngineError> {
        let read = Request::Read(ReadRequest {
            agent: Some(agent.to_owned()),
            limit: Some(1),
            ..ReadRequest::default()
        });
        match self.bus.execute(read, None)? {
            Output::Read(mailbox) => Ok(mailbox.messages.first().map(|m| m.message.event_id)),
            other => Err(unexpected(&other)),
        }
    }

    /// Whether `marker` (on a line of `member`'s file) names a message the
    /// bridge wrote to `member`: the database has it, with that event and
    /// thread, in the member's mailbox (the engine's rule of who gets what),
    /// not taken in from a file, and the marker names this member. `Err`
    /// says why not.
    fn check_own(
        &mut self,
        member: &str,
        marker: &Marker,
        written: &Value,
    ) -> Result<Result<(), String>, EngineError> {
        if marker.team != self.team {
            return Ok(Err("it was written in another team's folder".to_owned()));
        }
        if marker.member != member {
            return Ok(Err(format!(
                "it was written to {:?}'s file, not this one",
                marker.member
            )));
        }
        let read = Request::Read(ReadRequest {
            agent: Some(self.agent(member)),
            include_read: true,
            after_event: Some(marker.event_id.saturating_sub(1)),
            limit: Some(1),
            ..ReadRequest::default()
        });
        let mailbox = match self.bus.execute(read, None)? {
            Output::Read(mailbox) => mailbox,
            other => return Err(unexpected(&other)),
        };
        let found = mailbox.messages.first().filter(|m| {
            m.message.event_id == marker.event_id
                && m.message.message_id == marker.message_id
                && m.message.thread_id == marker.thread_id
        });
        Ok(match found {
            None => Err(format!(
                "the database has no message {} with event {} in thread {} to this member",
                marker.message_id, marker.event_id, marker.thread_id
            )),
            Some(m) if m.message.payload.contains_key(teams_line::PAYLOAD_KEY) => Err(format!(
                "message {} was taken in from a file; the bridge never writes it back",
                marker.message_id
            )),
            Some(m) if !self.says(m, written) => Err(format!(
                "its time or words are not those of message {}",
                marker.message_id
            )),
            Some(_) => Ok(()),
        })
    }

    /// Whether `written` (a line or entry) says what the bridge writes for
    /// `message` in this layout.
    fn says(&self, message: &MailboxMessage, written: &Value) -> bool {
        match self.layout {
            Layout::Members => teams_line::line_says(message, written),
            Layout::Inboxes => teams_line::entry_says(message, written),
        }
    }

    /// A marked line or entry (`written`, parsed): its event when the
    /// bridge wrote it to `at.member` (checked), else said as skipped.
    fn own(
        &mut self,
        at: &Position<'_>,
        marker: &Marker,
        written: &Value,
        lines: &Lines,
    ) -> Result<Option<EventId>, EngineError> {
        match self.check_own(at.member, marker, written)? {
            Ok(()) => Ok(Some(marker.event_id)),
            Err(why) => {
                self.report_line(at, &LineProblem::UnverifiedMarker(why), lines);
                Ok(None)
            }
        }
    }

    // ---- Inbound ------------------------------------------------------------

    /// The member's new lines (or unread entries), each applied once.
    fn inbound(&mut self, member: &str, stop: &Stop, lines: &Lines) -> Result<(), EngineError> {
        match self.layout {
            Layout::Members => self.inbound_lines(member, stop, lines),
            Layout::Inboxes => self.inbound_entries(member, stop, lines),
        }
    }

    /// Seed 002: the lines after the hint's offset, until a stop or the
    /// last complete line.
    fn inbound_lines(
        &mut self,
        member: &str,
        stop: &Stop,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        let file = match self.folder.open_in(OsStr::new(member), OsStr::new(INBOX)) {
            Ok(file) => file,
            Err(ReadProblem::Gone) => return Ok(()),
            Err(problem) => {
                let error = read_problem(&problem);
                self.report_file(member, "unreadable", &error, lines);
                return Ok(());
            }
        };
        self.problems.remove(&format!("unreadable:{member}"));
        let meta = file.metadata().map_err(|e| io_error("inbox file", &e))?;
        let place = self.place(member).clone();
        let mut place = if place.inode == meta.ino() && place.offset <= meta.len() {
            place
        } else {
            // Rotated, rewritten or new: read from the start; every line
            // already applied replays.
            if place.offset > 0 {
                lines.action(
                    "rotated",
                    json!({ "member": member, "lines_before": place.line }),
                    &format!(
                        "{}: inbox rotated or rewritten, read again from its start",
                        Lines::safe(member)
                    ),
                );
            }
            Place {
                inode: meta.ino(),
                outbound: place.outbound,
                ahead: place.ahead,
                rebuild: place.rebuild,
                ..Place::default()
            }
        };
        let mut reader = BufReader::new(file);
        reader
            .seek(SeekFrom::Start(place.offset))
            .map_err(|e| io_error("inbox file", &e))?;
        while !stop.asked() {
            let Some((piece, length)) =
                next_line(&mut reader).map_err(|e| io_error("inbox file", &e))?
            else {
                break;
            };
            let at = Position {
                member,
                line: place.line + 1,
            };
            if let Some(event) = self.apply_line(&at, piece, lines)? {
                note_own(&mut place, event, at.line);
            }
            place.offset += length;
            place.line += 1;
            *self.place(member) = place.clone();
        }
        *self.place(member) = place;
        Ok(())
    }

    /// One line: applied, or skipped and said why. Returns the event id of
    /// a line the bridge wrote itself (checked).
    fn apply_line(
        &mut self,
        at: &Position<'_>,
        piece: Piece,
        lines: &Lines,
    ) -> Result<Option<EventId>, EngineError> {
        let bytes = match piece {
            Piece::Line(bytes) => bytes,
            Piece::TooLong => {
                self.report_line(at, &LineProblem::TooLong, lines);
                return Ok(None);
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let owner = self.agent(at.member);
        let parsed = teams_line::parse_line(&bytes, &owner, &|n| self.agent(n));
        let inbound = match parsed {
            Ok(Inbound::Own(marker)) => {
                let written = serde_json::from_slice(&bytes).unwrap_or_default();
                return self.own(at, &marker, &written, lines);
            }
            Ok(inbound) => inbound,
            Err(problem) => {
                self.report_line(at, &problem, lines);
                return Ok(None);
            }
        };
        let key = line_key(at.member, &bytes, &inbound);
        self.apply(at, &inbound, &key, lines)?;
        Ok(None)
    }

    /// Claude Code: the unread entries not applied in this run.
    fn inbound_entries(
        &mut self,
        member: &str,
        stop: &Stop,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        let Some(entries) = self.read_entries(member) else {
            return Ok(());
        };
        let owner = self.agent(member);
        let known: HashSet<String> = self.place(member).applied.drain(..).collect();
        let ours = self.own_entries.remove(member).unwrap_or_default();
        let mut still_ours = HashMap::new();
        let mut applied = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            if stop.asked() {
                // What was not looked at stays unapplied.
                applied.extend(known.iter().cloned());
                still_ours.extend(ours.iter().map(|(k, v)| (k.clone(), *v)));
                break;
            }
            let at = Position {
                member,
                line: index as u64 + 1,
            };
            let key = entry_key(member, entry);
            let parsed = teams_line::parse_entry(entry, &owner, &|n| self.agent(n));
            let marked = match ours.get(&key) {
                Some(event) => Some(Marked::Own(*event)),
                None => self.marked_entry(&at, entry, &parsed, known.contains(&key), lines)?,
            };
            match marked {
                Some(Marked::Own(event)) => {
                    note_own(self.place(member), event, at.line);
                    still_ours.insert(key, event);
                    continue;
                }
                Some(Marked::Other) => {
                    applied.push(key);
                    continue;
                }
                None => {}
            }
            // Read ones were delivered before the bridge saw them.
            if entry.get("read").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if !known.contains(&key) {
                match parsed {
                    Ok(inbound) => self.apply(&at, &inbound, &key, lines)?,
                    Err(problem) => self.report_line(&at, &problem, lines),
                }
            }
            applied.push(key);
        }
        applied.sort();
        applied.dedup();
        self.place(member).applied = applied;
        self.own_entries.insert(member.to_owned(), still_ours);
        Ok(())
    }

    /// A Claude Code entry that carries a marker, read or not, checked once
    /// while it stays in the file (`said`: found not the bridge's before).
    /// `None`: no marker.
    fn marked_entry(
        &mut self,
        at: &Position<'_>,
        entry: &Value,
        parsed: &Result<Inbound, LineProblem>,
        said: bool,
        lines: &Lines,
    ) -> Result<Option<Marked>, EngineError> {
        let marker = match parsed {
            Ok(Inbound::Own(marker)) => marker,
            Err(LineProblem::UnverifiedMarker(_)) if said => return Ok(Some(Marked::Other)),
            Err(problem @ LineProblem::UnverifiedMarker(_)) => {
                self.report_line(at, problem, lines);
                return Ok(Some(Marked::Other));
            }
            _ => return Ok(None),
        };
        if said {
            return Ok(Some(Marked::Other));
        }
        Ok(Some(match self.own(at, marker, entry, lines)? {
            Some(event) => Marked::Own(event),
            None => Marked::Other,
        }))
    }

    /// A Claude Code inbox, or `None` while it is missing or not a JSON
    /// array (being written by a tool that does not rename).
    fn read_entries(&self, member: &str) -> Option<Vec<Value>> {
        let name = format!("{member}.json");
        let (bytes, _) = self
            .folder
            .read(OsStr::new(&name), ENTRIES_MAX_BYTES)
            .ok()?;
        match serde_json::from_slice(&bytes).ok()? {
            Value::Array(entries) => Some(entries),
            _ => None,
        }
    }

    /// Applies one mapped line under `key`.
    fn apply(
        &mut self,
        at: &Position<'_>,
        inbound: &Inbound,
        key: &str,
        lines: &Lines,
    ) -> Result<(), EngineError> {
        let done = match inbound {
            Inbound::Own(_) => return Ok(()),
            Inbound::Open(open) => self.open(open, None, key).map(|t| ("opened", Some(t))),
            Inbound::Say { task, open } => self.say(task.as_deref(), open, key),
            Inbound::Broadcast(open) => {
                let mut open = open.clone();
                open.to = "broadcast".into();
                self.open(&open, None, key).map(|t| ("broadcast", Some(t)))
            }
            Inbound::Complete {
                task,
                member,
                summary,
                payload,
            } => self.complete(task, member, summary, payload, key),
            Inbound::Block {
                task,
                member,
                reason,
                payload,
            } => self.block(task, member, reason, payload, key),
            Inbound::Presence { member } => self.presence(member, key).map(|()| ("present", None)),
        };
        match done {
            Ok((action, thread)) => {
                self.report_applied(at, action, inbound, thread.as_deref(), lines);
                Ok(())
            }
            Err(error) if bridge_s_own(error.code()) => Err(error),
            Err(error) => {
                self.report_refused(at, &error, lines);
                Ok(())
            }
        }
    }

    /// A new thread (or, with `thread`, a message into it); its id.
    fn open(
        &mut self,
        open: &Open,
        thread: Option<&str>,
        key: &str,
    ) -> Result<String, EngineError> {
        let appending = thread.is_some();
        let request = Request::Send(SendRequest {
            from_agent: Some(open.from.clone()),
            to_agent: Some(open.to.clone()),
            thread_id: thread.map(str::to_owned),
            subject: (!appending).then(|| open.subject.clone()),
            summary: appending.then(|| open.subject.clone()),
            task_id: if appending {
                None
            } else {
                open.task_id.clone()
            },
            priority: if appending { None } else { open.priority },
            kind: Some(open.kind),
            body: Some(open.body.clone()),
            payload: Some(open.payload.clone()),
            ..SendRequest::default()
        });
        match self.execute(request, key)? {
            Some(Output::Send(sent)) => Ok(sent.thread.thread.thread_id),
            Some(other) => Err(unexpected(&other)),
            None => Ok(thread.unwrap_or_default().to_owned()),
        }
    }

    /// A message into the thread `task` names, else a new thread. To a
    /// blocked thread, from someone other than its holder, it is the answer
    /// that unblocks it.
    fn say(
        &mut self,
        task: Option<&str>,
        open: &Open,
        key: &str,
    ) -> Result<(&'static str, Option<String>), EngineError> {
        let found = match task {
            Some(task) => self.find_thread(task, &open.to)?,
            None => None,
        };
        let Some(thread) = found else {
            return self.open(open, None, key).map(|t| ("opened", Some(t)));
        };
        let mut open = open.clone();
        let holder = thread.lease.as_ref().map(|l| l.agent.clone());
        if thread.thread.status == Status::Blocked && holder.as_deref() != Some(&open.from) {
            open.kind = Kind::Answer;
        }
        let id = thread.thread.thread_id;
        self.open(&open, Some(&id), key)
            .map(|t| ("message", Some(t)))
    }

    /// `member` finishes the thread of `task`: `done` as its holder, or,
    /// when it does not hold it yet, a claim for it first.
    fn complete(
        &mut self,
        task: &str,
        member: &str,
        summary: &str,
        payload: &Value,
        key: &str,
    ) -> Result<(&'static str, Option<String>), EngineError> {
        let thread = self.thread_for(task, member)?;
        let done = Request::Done(FinishRequest {
            agent: Some(member.to_owned()),
            thread_id: Some(thread.clone()),
            summary: Some(summary.to_owned()),
            payload: Some(payload.clone()),
            ..FinishRequest::default()
        });
        self.as_holder(&thread, member, done, key)?;
        Ok(("done", Some(thread)))
    }

    /// `member` is blocked on the thread of `task`: `update --status
    /// blocked` with the reason, claimed for it first if need be.
    fn block(
        &mut self,
        task: &str,
        member: &str,
        reason: &str,
        payload: &Value,
        key: &str,
    ) -> Result<(&'static str, Option<String>), EngineError> {
        let thread = self.thread_for(task, member)?;
        let update = Request::Update(UpdateRequest {
            agent: Some(member.to_owned()),
            thread_id: Some(thread.clone()),
            status: Some(Status::Blocked),
            summary: Some(reason.to_owned()),
            payload: Some(payload.clone()),
            ..UpdateRequest::default()
        });
        self.as_holder(&thread, member, update, key)?;
        Ok(("blocked", Some(thread)))
    }

    /// Runs a holder's `request` (under `key:step`); if `member` does not
    /// hold the thread, claims it for `member` (under `key:claim`) and runs
    /// it again. Each step has its own key, so a crash between them
    /// replays the first and applies the second.
    fn as_holder(
        &mut self,
        thread: &str,
        member: &str,
        request: Request,
        key: &str,
    ) -> Result<(), EngineError> {
        let step = format!("{key}:{}", request.command().as_str());
        let first = self.execute(request.clone(), &step);
        match first {
            Ok(_) => return Ok(()),
            Err(error) if bridge_s_own(error.code()) => return Err(error),
            Err(_) => {}
        }
        let claim = Request::Claim(ClaimRequest {
            agent: Some(member.to_owned()),
            thread_id: Some(thread.to_owned()),
            lease_seconds: Some(MEMBER_LEASE_SECONDS),
            ..ClaimRequest::default()
        });
        self.execute(claim, &format!("{key}:claim"))?;
        self.execute(request, &step).map(|_| ())
    }

    /// `idle_notification`: the member registered again, with the roles
    /// and description it has (registering counts as activity).
    fn presence(&mut self, member: &str, key: &str) -> Result<(), EngineError> {
        let listed = match self.bus.execute(
            Request::AgentList(AgentListRequest {
                limit: Some(inbox_engine::validate::MAX_LIMIT),
                ..AgentListRequest::default()
            }),
            None,
        )? {
            Output::AgentList(listed) => listed,
            other => return Err(unexpected(&other)),
        };
        let known = listed.agents.into_iter().find(|a| a.name == member);
        let register = Request::AgentRegister(AgentRegisterRequest {
            agent: Some(member.to_owned()),
            roles: known.as_ref().map(|a| a.roles.clone()).unwrap_or_default(),
            description: known.map(|a| a.description).filter(|d| !d.is_empty()),
        });
        self.execute(register, key).map(|_| ())
    }

    /// Runs `request` under `key`. `Ok(None)`: the key was used for another
    /// request, which means this line was applied before (what it found
    /// then differs from now: a thread opened since, a role changed).
    /// Whether it wrote nothing is kept for the action line.
    fn execute(&mut self, request: Request, key: &str) -> Result<Option<Output>, EngineError> {
        match self.bus.execute_keyed(request, Some(key.to_owned())) {
            Ok((output, replayed)) => {
                self.replayed = replayed;
                Ok(Some(output))
            }
            Err(error) if error.code() == ErrorCode::IdempotencyConflict => {
                self.replayed = true;
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// The thread `task` names (a task id, or an inbox thread id), for
    /// `member`; refused when there is none.
    fn thread_for(&mut self, task: &str, member: &str) -> Result<String, EngineError> {
        match self.find_thread(task, member)? {
            Some(thread) => Ok(thread.thread.thread_id),
            None => Err(EngineError::Relayed {
                code: ErrorCode::ThreadNotFound,
                message: format!("no thread has task id {task:?}"),
            }),
        }
    }

    /// The thread `task` names: the thread itself for a `thr_` id, else of
    /// the threads with that task id the first unfinished one assigned to
    /// `member`, else the first unfinished one, else the newest.
    fn find_thread(&mut self, task: &str, member: &str) -> Result<Option<ThreadView>, EngineError> {
        if task.starts_with("thr_") {
            let show = Request::Show(ShowRequest {
                thread_id: Some(task.to_owned()),
                limit: Some(1),
                ..ShowRequest::default()
            });
            match self.bus.execute(show, None) {
                Ok(Output::Show(shown)) => return Ok(Some(shown.thread)),
                Ok(other) => return Err(unexpected(&other)),
                Err(error) if bridge_s_own(error.code()) => return Err(error),
                Err(_) => {}
            }
        }
        let list = Request::List(ListRequest {
            task_id: Some(task.to_owned()),
            limit: Some(inbox_engine::validate::MAX_LIMIT),
            ..ListRequest::default()
        });
        let threads = match self.bus.execute(list, None) {
            Ok(Output::List(listed)) => listed.threads,
            Ok(other) => return Err(unexpected(&other)),
            Err(error) if bridge_s_own(error.code()) => return Err(error),
            // A task id inbox does not take names no thread.
            Err(_) => return Ok(None),
        };
        let open = |t: &&ThreadView| !t.thread.status.is_terminal();
        let pick = threads
            .iter()
            .filter(open)
            .find(|t| t.thread.assigned_to == member)
            .or_else(|| threads.iter().find(open))
            .or_else(|| threads.first());
        Ok(pick.cloned())
    }

    // ---- Outbound -----------------------------------------------------------

    /// Every message to `member` after its cursor, in event order, appended
    /// to its file, but those whose line of the bridge's own runs on from
    /// the cursor (checked by the inbound scan): the cursor moves over
    /// them. One that comes after a message the file lacks was not written
    /// in the bridge's run (the bridge writes in event order), so it is not
    /// trusted: said once (`out_of_order`), and its message is written with
    /// the others.
    fn outbound(&mut self, member: &str, lines: &Lines) -> Result<(), EngineError> {
        let agent = self.agent(member);
        let mut cursor = match self.place(member).outbound {
            Some(cursor) => cursor,
            None => self.first_cursor(member, &agent, lines)?,
        };
        self.move_cursor(member, cursor);
        // Whether a message the file lacks came before, in this walk.
        let mut gap = false;
        loop {
            let mailbox = self.mailbox_after(&agent, cursor)?;
            let (missing, late) = self.split_by_file(member, mailbox.messages, &mut gap);
            for (line, message) in &late {
                self.report_out_of_order(member, *line, message, lines);
            }
            if !missing.is_empty() && !self.append(member, &missing, lines)? {
                return Ok(());
            }
            cursor = cursor.max(mailbox.next_event_id);
            self.move_cursor(member, cursor);
            if !mailbox.more {
                return Ok(());
            }
        }
    }

    /// `agent`'s messages after `cursor`, read or not, a page of them.
    fn mailbox_after(
        &mut self,
        agent: &str,
        cursor: EventId,
    ) -> Result<MailboxOutput, EngineError> {
        let read = Request::Read(ReadRequest {
            agent: Some(agent.to_owned()),
            include_read: true,
            after_event: Some(cursor),
            limit: Some(100),
            ..ReadRequest::default()
        });
        match self.bus.execute(read, None)? {
            Output::Read(mailbox) => Ok(mailbox),
            other => Err(unexpected(&other)),
        }
    }

    /// Of `messages` (in event order), those to write (not ingested from a
    /// file, and not in the member's file in a run from the cursor), and of
    /// those the ones whose line in the file comes after a message the file
    /// lacks (`gap`, kept across pages), with the line they are at.
    fn split_by_file(
        &mut self,
        member: &str,
        messages: Vec<MailboxMessage>,
        gap: &mut bool,
    ) -> (Vec<MailboxMessage>, Vec<(u64, MailboxMessage)>) {
        let ahead = &self.place(member).ahead;
        let mut missing = Vec::new();
        let mut late = Vec::new();
        for message in messages {
            if message
                .message
                .payload
                .contains_key(teams_line::PAYLOAD_KEY)
            {
                continue;
            }
            match ahead.get(&message.message.event_id) {
                Some(line) if *gap => {
                    late.push((*line, message.clone()));
                    missing.push(message);
                }
                Some(_) => {}
                None => {
                    *gap = true;
                    missing.push(message);
                }
            }
        }
        (missing, late)
    }

    /// `member`'s cursor at `cursor`: its own lines at or before it are
    /// behind it.
    fn move_cursor(&mut self, member: &str, cursor: EventId) {
        let place = self.place(member);
        place.outbound = Some(cursor);
        place.ahead.retain(|event, _| *event > cursor);
    }

    /// Appends `messages` to `member`'s file, in the layout's way; `false`
    /// when the file could not be written (said once).
    fn append(
        &mut self,
        member: &str,
        messages: &[MailboxMessage],
        lines: &Lines,
    ) -> Result<bool, EngineError> {
        let mut written = Vec::with_capacity(messages.len());
        for message in messages {
            let task = self.task_of(&message.message.thread_id)?;
            let from = self.member_name(&message.message.from_agent);
            written.push((message, task, from));
        }
        let to = Recipient {
            team: &self.team,
            member,
        };
        let result = match self.layout {
            Layout::Members => {
                let bytes: Vec<Vec<u8>> = written
                    .iter()
                    .map(|(m, task, from)| teams_line::seed_line(m, to, from, task))
                    .collect();
                self.folder
                    .append_locked(
                        OsStr::new(member),
                        OsStr::new(INBOX),
                        OsStr::new(INBOX_LOCK),
                        &bytes,
                    )
                    .map(|()| Replaced::Done)
            }
            Layout::Inboxes => {
                let entries: Vec<Value> = written
                    .iter()
                    .map(|(m, task, from)| teams_line::claude_entry(m, to, from, task))
                    .collect();
                self.append_entries(member, entries)
            }
        };
        match result {
            Ok(Replaced::Done) => {}
            Ok(Replaced::LostRace(error)) => {
                // Another writer had the file: nothing is said written and
                // the cursor stays; the next pass finds in the file what
                // landed (the bridge's own entries, checked) and writes the
                // rest.
                self.report_lost_race(member, messages, &error, lines);
                return Ok(false);
            }
            Err(error) => {
                // The member's file, not the bridge: a link planted there,
                // a spoiled array. The messages wait (the cursor stays) and
                // the bridge goes on with the other members.
                self.report_file(member, "unwritable", &error.to_string(), lines);
                return Ok(false);
            }
        }
        self.problems.remove(&format!("unwritable:{member}"));
        for (message, _, _) in &written {
            self.report_written(member, message, lines);
        }
        Ok(true)
    }

    /// Claude Code: the array read, extended and written whole under
    /// `<agent>.json.lock`, replaced only while that lock is still the
    /// bridge's and the file is still what was read.
    fn append_entries(&self, member: &str, entries: Vec<Value>) -> std::io::Result<Replaced> {
        let name = OsString::from(format!("{member}.json"));
        let mut lock = name.clone();
        lock.push(".lock");
        let held = self.folder.lock_folder(&lock, LOCK_STALE, LOCK_PATIENCE)?;
        let read = match self.folder.read(&name, ENTRIES_MAX_BYTES) {
            Ok((bytes, _)) => Some(bytes),
            Err(ReadProblem::Gone) => None,
            Err(problem) => return Err(invalid_data(&name, &read_problem(&problem))),
        };
        let mut all = match read.as_deref() {
            None => Vec::new(),
            Some(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Vec::new(),
            Some(bytes) => match serde_json::from_slice::<Value>(bytes) {
                Ok(Value::Array(all)) => all,
                _ => return Err(invalid_data(&name, "is not a JSON array; left as it is")),
            },
        };
        stall_point("read");
        all.extend(entries);
        let mut bytes = serde_json::to_vec_pretty(&all).unwrap_or_default();
        bytes.push(b'\n');
        held.replace(&name, read.as_deref(), &bytes)
    }

    /// The id lines name a thread by: its task id, else its thread id.
    fn task_of(&mut self, thread: &str) -> Result<String, EngineError> {
        if let Some(task) = self.tasks.get(thread) {
            return Ok(task.clone());
        }
        let show = Request::Show(ShowRequest {
            thread_id: Some(thread.to_owned()),
            limit: Some(1),
            ..ShowRequest::default()
        });
        let task = match self.bus.execute(show, None)? {
            Output::Show(shown) => shown
                .thread
                .thread
                .task_id
                .unwrap_or_else(|| thread.to_owned()),
            other => return Err(unexpected(&other)),
        };
        self.tasks.insert(thread.to_owned(), task.clone());
        Ok(task)
    }

    // ---- Action lines ---------------------------------------------------------

    fn report_applied(
        &self,
        at: &Position<'_>,
        action: &str,
        inbound: &Inbound,
        thread: Option<&str>,
        lines: &Lines,
    ) {
        let thread = thread.filter(|t| !t.is_empty());
        lines.action(
            action,
            json!({
                "member": at.member, "line": at.line, "type": type_of(inbound),
                "thread_id": thread, "replayed": self.replayed,
            }),
            &format!(
                "{} line {}: {} -> {action}{}{}",
                Lines::safe(at.member),
                at.line,
                type_of(inbound),
                thread.map(|t| format!(" thread {t}")).unwrap_or_default(),
                if self.replayed {
                    " (applied before)"
                } else {
                    ""
                }
            ),
        );
    }

    fn report_line(&self, at: &Position<'_>, problem: &LineProblem, lines: &Lines) {
        lines.action(
            "skipped",
            json!({ "member": at.member, "line": at.line, "code": problem.code(), "error": problem.to_string() }),
            &format!(
                "{} line {} skipped: {}",
                Lines::safe(at.member),
                at.line,
                Lines::safe(&problem.to_string())
            ),
        );
    }

    /// A line of the bridge's own after a gap in `member`'s file: said once.
    fn report_out_of_order(
        &mut self,
        member: &str,
        line: u64,
        message: &MailboxMessage,
        lines: &Lines,
    ) {
        let m = &message.message;
        if !self
            .said_out_of_order
            .insert((member.to_owned(), m.event_id))
        {
            return;
        }
        let at = Position { member, line };
        let problem = LineProblem::OutOfOrder(format!("{} (event {})", m.message_id, m.event_id));
        self.report_line(&at, &problem, lines);
    }

    fn report_refused(&self, at: &Position<'_>, error: &EngineError, lines: &Lines) {
        lines.action(
            "refused",
            json!({ "member": at.member, "line": at.line, "code": error.code().as_str(), "error": error.to_string() }),
            &format!(
                "{} line {} refused: {}",
                Lines::safe(at.member),
                at.line,
                Lines::safe(&error.to_string())
            ),
        );
    }

    /// A member's file the bridge cannot use: said once, until it changes.
    fn report_file(&mut self, member: &str, action: &str, error: &str, lines: &Lines) {
        let said = self
            .problems
            .insert(format!("{action}:{member}"), error.to_owned());
        if said.as_deref() == Some(error) {
            return;
        }
        lines.action(
            action,
            json!({ "member": member, "error": error }),
            &format!("{}: {}", Lines::safe(member), Lines::safe(error)),
        );
    }

    /// Another writer had `member`'s file: `messages` are not written now.
    fn report_lost_race(
        &self,
        member: &str,
        messages: &[MailboxMessage],
        error: &str,
        lines: &Lines,
    ) {
        let ids: Vec<&str> = messages
            .iter()
            .map(|m| m.message.message_id.as_str())
            .collect();
        lines.action(
            "lost_race",
            json!({ "member": member, "message_ids": ids, "error": error }),
            &format!(
                "{}: {} message(s) not written now, tried again on the next pass: {}",
                Lines::safe(member),
                ids.len(),
                Lines::safe(error)
            ),
        );
    }

    fn report_written(&self, member: &str, message: &MailboxMessage, lines: &Lines) {
        let kind = teams_line::seed_type(message);
        let m = &message.message;
        lines.action(
            "written",
            json!({ "member": member, "type": kind, "thread_id": m.thread_id, "message_id": m.message_id, "event_id": m.event_id }),
            &format!(
                "{} <- {kind} from {} (thread {})",
                Lines::safe(member),
                Lines::safe(&m.from_agent),
                m.thread_id
            ),
        );
    }
}

/// The whole hint not taken (`why`): said; a fresh one, `lost`, so that
/// every member's cursor is found again once settled.
fn whole_hint_ignored(why: &str, lines: &Lines) -> Hint {
    let error = format!(
        "{why}: not taken; every member's cursor is found again from the bridge's own lines in \
         its file (checked), else from its first unread message, and the hint written anew"
    );
    lines.action(
        "hint_ignored",
        json!({ "member": null, "error": error }),
        &Lines::safe(&error),
    );
    Hint {
        lost: true,
        ..Hint::default()
    }
}

/// Notes a line of the bridge's own (checked) for `event` at `line` of
/// the member's file: a message already there, kept while it is past the
/// cursor (or no cursor is known yet).
fn note_own(place: &mut Place, event: EventId, line: u64) {
    if place.outbound.is_none_or(|cursor| event > cursor) {
        place.ahead.entry(event).or_insert(line);
    }
}

/// What a Claude Code entry with a marker is.
enum Marked {
    /// The bridge's own (checked): its message's event.
    Own(EventId),
    /// Not the bridge's (said once).
    Other,
}

/// Where a line is, for the action lines.
struct Position<'a> {
    member: &'a str,
    /// 1-based (the entry's index, for Claude Code).
    line: u64,
}

/// What [`next_line`] read.
enum Piece {
    /// A complete line, without its newline.
    Line(Vec<u8>),
    /// A line over [`MAX_LINE_BYTES`], read past but not kept.
    TooLong,
}

/// The next complete line and the bytes it took (newline included), or
/// `None` at the end or before a line still being written (no newline
/// yet: it is read again on the next look). Never holds more than
/// [`MAX_LINE_BYTES`] of one line.
fn next_line<R: std::io::BufRead>(reader: &mut R) -> std::io::Result<Option<(Piece, u64)>> {
    let mut line = Vec::new();
    let mut too_long = false;
    let mut taken: u64 = 0;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(None);
        }
        let (chunk, newline) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if !too_long {
            line.extend_from_slice(&buf[..chunk - usize::from(newline)]);
            if line.len() > MAX_LINE_BYTES {
                too_long = true;
                line = Vec::new();
            }
        }
        reader.consume(chunk);
        taken += chunk as u64;
        if newline {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let piece = if too_long {
                Piece::TooLong
            } else {
                Piece::Line(line)
            };
            return Ok(Some((piece, taken)));
        }
    }
}

/// Which layout `dir` has: `members/` (seed 002) or `inboxes/` (Claude
/// Code), refused when it has neither or both.
fn detect(dir: &Path) -> Result<Layout, EngineError> {
    let has = |name: &str| std::fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.is_dir());
    match (has("members"), has("inboxes")) {
        (true, false) => Ok(Layout::Members),
        (false, true) => Ok(Layout::Inboxes),
        (true, true) => Err(refused(format!(
            "{} has both members/ (Agent Teams JSONL inboxes) and inboxes/ (Claude Code); bridge one team folder \
             per layout",
            dir.display()
        ))),
        (false, false) => Err(refused(format!(
            "{} is not a team folder: it has neither members/<member>/inbox (Agent Teams JSONL inboxes) nor \
             inboxes/<agent>.json (Claude Code agent teams)",
            dir.display()
        ))),
    }
}

/// The team folder's identity in markers: the first 16 hex digits of the
/// SHA-256 of its canonical path, which also names its hint beside the
/// database (a folder moved elsewhere is another team: the lines it had
/// are not taken as the bridge's, and it starts afresh).
fn team_id(dir: &Path) -> std::io::Result<String> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::fs::canonicalize(dir)?;
    let mut id = super::sha256_hex(&[path.as_os_str().as_bytes()]);
    id.truncate(16);
    Ok(id)
}

fn refused(message: String) -> EngineError {
    EngineError::Relayed {
        code: ErrorCode::InvalidValue,
        message,
    }
}

/// The idempotency key of a line: its member's file and its bytes. Not
/// its line number: the seed's own rotation and clean-up rewrite the file
/// and move lines, which must not apply them again. A broadcast, which its
/// writer appends to every member's file, is keyed by its bytes alone: one
/// broadcast, however many files it is in.
fn line_key(member: &str, bytes: &[u8], inbound: &Inbound) -> String {
    match inbound {
        Inbound::Broadcast(_) => format!("teams:broadcast:{}", super::sha256_hex(&[bytes])),
        _ => format!(
            "teams:members:{}",
            super::sha256_hex(&[member.as_bytes(), b"/inbox\0", bytes])
        ),
    }
}

/// The idempotency key of a Claude Code entry: its file and its fields but
/// `read` (which the agent flips when it reads it).
fn entry_key(member: &str, entry: &Value) -> String {
    let mut entry = entry.clone();
    if let Some(fields) = entry.as_object_mut() {
        fields.remove("read");
    }
    let bytes = serde_json::to_vec(&entry).unwrap_or_default();
    format!(
        "teams:inboxes:{}",
        super::sha256_hex(&[member.as_bytes(), b".json\0", &bytes])
    )
}

fn type_of(inbound: &Inbound) -> &'static str {
    match inbound {
        Inbound::Own(_) => "own",
        Inbound::Open(_) => "task_assignment",
        Inbound::Say { .. } => "message",
        Inbound::Broadcast(_) => "team_broadcast",
        Inbound::Complete { .. } => "task_completion",
        Inbound::Block { .. } => "blocking_notification",
        Inbound::Presence { .. } => "idle_notification",
    }
}

fn read_problem(problem: &ReadProblem) -> String {
    match problem {
        ReadProblem::Symlink => "is a symbolic link (never followed)".into(),
        ReadProblem::NotAFile => "is not a regular file".into(),
        ReadProblem::TooLarge(size) => format!("is {size} bytes, over the bound"),
        ReadProblem::Gone => "is gone".into(),
        ReadProblem::Io(e) => e.to_string(),
    }
}

fn invalid_data(name: &OsStr, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{} {what}", name.to_string_lossy()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &[u8]) -> Vec<(String, u64)> {
        let mut reader = std::io::Cursor::new(text.to_vec());
        let mut out = Vec::new();
        while let Some((piece, n)) = next_line(&mut reader).unwrap() {
            let shown = match piece {
                Piece::Line(l) => String::from_utf8(l).unwrap(),
                Piece::TooLong => "<too long>".into(),
            };
            out.push((shown, n));
        }
        out
    }

    #[test]
    fn lines_end_at_newlines_and_a_partial_one_waits() {
        assert_eq!(
            pieces(b"a\r\nbb\n\ncc"),
            vec![("a".into(), 3), ("bb".into(), 3), (String::new(), 1)]
        );
        let mut long = vec![b'x'; MAX_LINE_BYTES + 10];
        long.extend_from_slice(b"\nok\n");
        assert_eq!(
            pieces(&long),
            vec![
                ("<too long>".into(), MAX_LINE_BYTES as u64 + 11),
                ("ok".into(), 3)
            ]
        );
    }
}
