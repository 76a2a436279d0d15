//! The teams bridge's hint: for each member, where the bridge is in its
//! file and what it has written there, kept beside the database, where
//! the team's agents do not write.
//!
//! The hint is `<database>-bridge-teams-<team>.json` (`team`: the team
//! folder's digest, as in the bridge's markers), owner-only, replaced whole
//! (a fresh file renamed over it). It is read only if it is a regular file
//! of this user that nobody else may write; anything else is said and
//! left alone, never followed or trusted. The hint an older bridge kept in
//! the team folder itself (`DIR/.inbox-bridge-teams.json`) is never read:
//! anyone on the team can write it. This module reads and writes the file;
//! it must never decide what a cursor may be (the bridge checks every value
//! against the database and the member's file).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use inbox_engine::EventId;
use inbox_host_native::folder::temporary_name;
use serde::{Deserialize, Serialize};

/// The bound on a hint read.
const MAX_BYTES: u64 = 16 << 20;

/// Where the bridge is in one member's file, and what it wrote there.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Place {
    /// Bytes read (always at a line's end).
    pub(crate) offset: u64,
    /// Lines read.
    pub(crate) line: u64,
    /// The file's inode: another one (rotated, rewritten) is read from 0.
    pub(crate) inode: u64,
    /// The outbound cursor: every message to the member up to this event
    /// is in its file (or was sent before the bridge's first start), each
    /// once. `None` until the bridge has looked at the member's mailbox.
    #[serde(default)]
    pub(crate) outbound: Option<EventId>,
    /// The bridge's own lines found in the file past the cursor (event →
    /// line, checked): messages already there, never written again; the
    /// cursor moves over them only where they run on from it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) ahead: BTreeMap<EventId, u64>,
    /// The member's cursor was dropped or lost: it is found again from its
    /// file and the database (never from the first start), and this stays
    /// set until it is, across restarts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) rebuild: bool,
    /// Claude Code: the keys of the entries applied that are still unread
    /// (the file keeps them until the agent reads them), and of the marked
    /// entries found not the bridge's (said once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) applied: Vec<String>,
}

/// The hint's content.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Hint {
    /// The database's newest event when the bridge first started on this
    /// team folder: a member it has never written to gets every message
    /// after it. `None` in a hint of an older bridge.
    #[serde(default)]
    pub(crate) since: Option<EventId>,
    /// Whether the bridge has read every member's file since it found no
    /// hint it could take: until then it does not know whether it was here
    /// before (a member's file with a line of its own says it was).
    #[serde(default)]
    pub(crate) settled: bool,
    /// The hint was there but could not be taken (spoiled, of a database
    /// further on): the bridge was here, so every member's cursor is found
    /// again once settled.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) lost: bool,
    /// Per member (its name in the folder).
    #[serde(default)]
    pub(crate) members: BTreeMap<String, Place>,
}

/// What was found where the hint is kept.
#[derive(Debug)]
pub(crate) enum Found {
    /// The hint, to be checked.
    Hint(Hint),
    /// No hint: the bridge never ran with this database on this folder,
    /// or its hint was removed.
    Missing,
    /// Something the bridge cannot take (why).
    Spoiled(String),
}

/// Where the hint of the team folder `team` (its digest) is kept for the
/// database at `database`.
pub(crate) fn path(database: &Path, team: &str) -> PathBuf {
    inbox_sqlite::file::companion(database, &format!("-bridge-teams-{team}.json"))
}

/// The hint at `path`: read without following a link, only if it is a
/// regular file of this user that nobody else may write, up to a bound.
pub(crate) fn read(path: &Path) -> Found {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Found::Missing,
        Err(e) => return Found::Spoiled(format!("{} cannot be read: {e}", path.display())),
    };
    let spoiled = |why: String| Found::Spoiled(format!("{} {why}", path.display()));
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(e) => return spoiled(format!("cannot be read: {e}")),
    };
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_file() {
        return spoiled("is not a regular file".into());
    }
    if meta.uid() != me {
        return spoiled(format!("belongs to another user (uid {})", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return spoiled(format!(
            "can be written by other users (mode {:04o})",
            meta.mode() & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    if let Err(e) = file.take(MAX_BYTES + 1).read_to_end(&mut bytes) {
        return spoiled(format!("cannot be read: {e}"));
    }
    if bytes.len() as u64 > MAX_BYTES {
        return spoiled(format!("is over {MAX_BYTES} bytes"));
    }
    match serde_json::from_slice(&bytes) {
        Ok(hint) => Found::Hint(hint),
        Err(e) => spoiled(format!("is not a hint of this bridge: {e}")),
    }
}

/// Writes `hint` at `path`, whole or not at all: into a fresh owner-only
/// file beside it (never through a link), synced, then renamed over it.
pub(crate) fn write(path: &Path, hint: &Hint) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(hint).unwrap_or_default();
    bytes.push(b'\n');
    let name = path.file_name().unwrap_or(OsStr::new("hint"));
    let temporary = path.with_file_name(temporary_name(name));
    match std::fs::remove_file(&temporary) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temporary)?;
    let written = file
        .write_all(&bytes)
        .and_then(|()| file.sync_data())
        .and_then(|()| {
            drop(file);
            std::fs::rename(&temporary, path)
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}
