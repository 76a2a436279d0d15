//! The file-drop bridge's record of the descriptors it sent and has not
//! finished, `DIR/.inbox-bridge-file-drop.jsonl`: an intent log, so that
//! this bridge sends a descriptor once, whatever happens to it between its
//! send and its files (a crash, a `chattr -i` or `chmod` that changes its
//! status-change time and so its idempotency key, retention removing the
//! key after `keep_days`).
//!
//! An entry names the descriptor as the bridge read it (its name, device
//! and inode, the SHA-256 of its content), the idempotency key its send
//! used, what its `.result` says (kind, recipient) and, once the send
//! answered, its thread. It is written before the send, given its thread
//! right after, and removed once the descriptor is renamed. A file that
//! matches an entry is that descriptor: its files are finished for the
//! entry's thread, and it is never sent again (without a thread yet, it is
//! sent again under the entry's own key, which replays). A file that does
//! not match (another inode, or the same one with other content) is a new
//! descriptor, and the entry is forgotten.
//!
//! The record is one JSON line per change, appended to a file the bridge
//! holds open: no rename and no wait for the disk on the common path (the
//! database's own normal durability). It is emptied when no entry is left
//! and written again whole when it grows, and it holds at most
//! [`MAX_ENTRIES`] entries: past that, the caller leaves new descriptors
//! unsent. This module remembers; it never decides what is sent.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write as _;
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};

use inbox_host_native::folder::{FileRead, Folder, ReadProblem};
use serde::{Deserialize, Serialize};

/// The record's name in the drop folder (not a descriptor's: it does not
/// end in `.task.json`).
pub(crate) const NAME: &str = ".inbox-bridge-file-drop.jsonl";

/// How many descriptors may be sent and not finished at once.
pub(crate) const MAX_ENTRIES: usize = 256;

/// Past this many bytes appended, the record is written again whole
/// (only its live entries).
const REWRITE_AT: u64 = 1 << 20;

/// The bound on the record read back at start: its live entries (each
/// under 2 KB) and what was appended since it was last written whole.
const READ_MAX: u64 = 4 << 20;

/// A descriptor sent (or about to be) and not finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Which file it was: device, inode.
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    /// The SHA-256 of its content, in hex.
    pub(crate) sha256: String,
    /// The idempotency key its send used.
    pub(crate) key: String,
    /// Its kind, for its `.result`.
    pub(crate) kind: String,
    /// Where it was sent.
    pub(crate) to: String,
    /// The thread it opened, once the send answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) thread: Option<String>,
}

impl Entry {
    /// The entry for `read`, to be sent under `key`.
    pub(crate) fn sending(read: &FileRead, key: String, kind: &str, to: &str) -> Entry {
        let (dev, ino) = read.identity.file();
        Entry {
            dev,
            ino,
            sha256: super::sha256_hex(&[&read.bytes]),
            key,
            kind: kind.to_owned(),
            to: to.to_owned(),
            thread: None,
        }
    }

    /// Whether `read` is the file this entry was made from, as it was.
    fn matches(&self, read: &FileRead) -> bool {
        read.identity.file() == (self.dev, self.ino)
            && self.sha256 == super::sha256_hex(&[&read.bytes])
    }
}

/// One line of the record: `name`'s entry now (`None`: it has none).
#[derive(Serialize, Deserialize)]
struct Line {
    /// The descriptor's name, its bytes in hex (a name need not be UTF-8).
    name: String,
    #[serde(default)]
    entry: Option<Entry>,
}

/// Why a change could not be recorded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unrecorded {
    /// [`MAX_ENTRIES`] are sent and not finished.
    #[error(
        "{MAX_ENTRIES} descriptors were sent and are not finished (see their `stuck` lines); no \
         other is sent until one of them is"
    )]
    Full,
    /// The record could not be written.
    #[error("the bridge's record of sent descriptors ({NAME}) could not be written: {0}")]
    Io(#[from] std::io::Error),
}

/// The record, read back at start and kept in step with every change.
pub(crate) struct Sent {
    entries: BTreeMap<OsString, Entry>,
    /// The record, open for appending (once it could be written whole).
    file: Option<File>,
    /// Bytes appended since the record was last written whole.
    appended: u64,
    /// An append failed: the file may lack a change, so it is written
    /// whole before the next change counts as recorded.
    behind: bool,
}

impl Sent {
    /// Reads the record of `folder` back (another user's file, or lines
    /// cut short by a crash, are not read), forgets the entries whose name
    /// holds another file now, and writes it again whole. Refused only
    /// when it is there and cannot be read.
    pub(crate) fn open(folder: &Folder) -> std::io::Result<Sent> {
        let mut entries = read_back(folder)?;
        entries.retain(|name, entry| {
            folder
                .look(name)
                .is_ok_and(|look| look.identity.file() == (entry.dev, entry.ino))
        });
        let mut sent = Sent {
            entries,
            file: None,
            appended: 0,
            behind: true,
        };
        // A folder where it cannot be written now (append-only, full)
        // keeps it as it is: every change tries again, and nothing is
        // recorded, so nothing is sent, until one succeeds.
        let _ = sent.rewrite(folder);
        Ok(sent)
    }

    /// The entry of `name` when the file `read` is the one it was made
    /// from. An entry the file no longer matches (another file, other
    /// content: a new descriptor) is forgotten.
    pub(crate) fn resumable(
        &mut self,
        folder: &Folder,
        name: &OsStr,
        read: &FileRead,
    ) -> Option<Entry> {
        let entry = self.entries.get(name)?;
        if entry.matches(read) {
            return Some(entry.clone());
        }
        // Not recorded: the next start forgets it too (another file).
        let _ = self.remove(folder, name);
        None
    }

    /// Records `entry` for `name` (new, or with its thread now).
    pub(crate) fn put(
        &mut self,
        folder: &Folder,
        name: &OsStr,
        entry: Entry,
    ) -> Result<(), Unrecorded> {
        if !self.entries.contains_key(name) && self.entries.len() >= MAX_ENTRIES {
            return Err(Unrecorded::Full);
        }
        self.entries.insert(name.to_owned(), entry);
        self.record(folder, name)
    }

    /// Forgets `name`'s entry (its descriptor is finished, or gone).
    pub(crate) fn remove(&mut self, folder: &Folder, name: &OsStr) -> Result<(), Unrecorded> {
        if self.entries.remove(name).is_none() {
            return Ok(());
        }
        if let Some(file) = self
            .file
            .as_ref()
            .filter(|_| self.entries.is_empty() && !self.behind)
        {
            match file.set_len(0) {
                Ok(()) => {
                    self.appended = 0;
                    return Ok(());
                }
                Err(e) => {
                    self.behind = true;
                    return Err(e.into());
                }
            }
        }
        self.record(folder, name)
    }

    /// Forgets the entries whose names `gone` says are no longer in the
    /// folder.
    pub(crate) fn forget(&mut self, folder: &Folder, mut gone: impl FnMut(&OsStr) -> bool) {
        let names: Vec<OsString> = self
            .entries
            .keys()
            .filter(|name| gone(name))
            .cloned()
            .collect();
        for name in names {
            // Not recorded: the next start forgets it too (no such name).
            let _ = self.remove(folder, &name);
        }
    }

    /// Appends `name`'s entry now; writes the record whole instead when it
    /// grew past [`REWRITE_AT`] or lacks an earlier change.
    fn record(&mut self, folder: &Folder, name: &OsStr) -> Result<(), Unrecorded> {
        let file = match &mut self.file {
            Some(file) if !self.behind && self.appended <= REWRITE_AT => file,
            _ => return self.rewrite(folder),
        };
        let line = line_of(name, self.entries.get(name));
        match file.write_all(&line) {
            Ok(()) => {
                self.appended += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.behind = true;
                Err(e.into())
            }
        }
    }

    /// Writes the record whole, and appends to the new file from then on.
    fn rewrite(&mut self, folder: &Folder) -> Result<(), Unrecorded> {
        self.behind = true;
        let bytes = whole(&self.entries);
        // Never over another user's file: it is not the bridge's record.
        folder.write_over_own(OsStr::new(NAME), &bytes)?;
        self.file = Some(folder.open_appending(OsStr::new(NAME))?);
        self.appended = bytes.len() as u64;
        self.behind = false;
        Ok(())
    }
}

/// The entries the record holds, each name's last line winning; nothing
/// from a file of another user (not the bridge's), and no line cut short.
fn read_back(folder: &Folder) -> std::io::Result<BTreeMap<OsString, Entry>> {
    let me = rustix::process::geteuid().as_raw();
    let mut entries = BTreeMap::new();
    if folder.look(OsStr::new(NAME)).is_ok_and(|l| l.owner != me) {
        return Ok(entries);
    }
    let bytes = match folder.read_file(OsStr::new(NAME), READ_MAX) {
        Ok(read) => read.bytes,
        // Never written, or something that is not the bridge's (replaced).
        Err(ReadProblem::Gone | ReadProblem::Symlink | ReadProblem::NotAFile) => {
            return Ok(entries);
        }
        Err(ReadProblem::TooLarge(size)) => {
            return Err(std::io::Error::other(format!(
                "{NAME} is {size} bytes, more than the bridge ever writes; it is not the bridge's \
                 record: move it away"
            )));
        }
        Err(ReadProblem::Io(e)) => return Err(e),
    };
    for line in bytes.split(|b| *b == b'\n') {
        let Ok(line) = serde_json::from_slice::<Line>(line) else {
            continue;
        };
        let Some(name) = from_hex(&line.name) else {
            continue;
        };
        match line.entry {
            Some(entry) => entries.insert(name, entry),
            None => entries.remove(&name),
        };
    }
    Ok(entries)
}

/// The record's bytes with only `entries`, one line each.
fn whole(entries: &BTreeMap<OsString, Entry>) -> Vec<u8> {
    entries
        .iter()
        .flat_map(|(name, entry)| line_of(name, Some(entry)))
        .collect()
}

fn line_of(name: &OsStr, entry: Option<&Entry>) -> Vec<u8> {
    let line = Line {
        name: name.as_bytes().iter().map(|b| format!("{b:02x}")).collect(),
        entry: entry.cloned(),
    };
    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

fn from_hex(text: &str) -> Option<OsString> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    bytes.map(OsString::from_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder() -> (tempfile::TempDir, Folder) {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::ensure(&dir.path().join("drop")).unwrap();
        (dir, folder)
    }

    fn entry_for(folder: &Folder, name: &str, text: &str) -> (FileRead, Entry) {
        std::fs::write(folder.join(OsStr::new(name)), text).unwrap();
        let read = folder.read_file(OsStr::new(name), 1000).unwrap();
        let entry = Entry::sending(&read, format!("key-{name}"), "prompt", "worker");
        (read, entry)
    }

    #[test]
    fn entries_survive_a_restart_until_removed_and_only_for_the_same_file() {
        let (_dir, folder) = folder();
        let mut sent = Sent::open(&folder).unwrap();
        let name = OsStr::new("a\u{e9}.task.json");
        let (read, mut entry) = entry_for(&folder, "a\u{e9}.task.json", "one");
        sent.put(&folder, name, entry.clone()).unwrap();
        entry.thread = Some("thr_1".into());
        sent.put(&folder, name, entry.clone()).unwrap();
        let (_, other) = entry_for(&folder, "b.task.json", "two");
        sent.put(&folder, OsStr::new("b.task.json"), other).unwrap();
        sent.remove(&folder, OsStr::new("b.task.json")).unwrap();
        drop(sent);

        // A line cut short by a crash is passed over.
        let mut file = folder.open_appending(OsStr::new(NAME)).unwrap();
        file.write_all(b"{\"name\":\"61\",\"entry\":{\"dev\"")
            .unwrap();
        let mut again = Sent::open(&folder).unwrap();
        assert_eq!(again.resumable(&folder, name, &read), Some(entry.clone()));
        assert!(
            again
                .resumable(&folder, OsStr::new("b.task.json"), &read)
                .is_none()
        );

        // Other content under the same inode: a new descriptor.
        std::fs::write(folder.join(name), "changed").unwrap();
        let changed = folder.read_file(name, 1000).unwrap();
        assert!(again.resumable(&folder, name, &changed).is_none());
        drop(again);
        assert!(Sent::open(&folder).unwrap().entries.is_empty());
        // Emptied when nothing is left.
        assert_eq!(
            std::fs::metadata(folder.join(OsStr::new(NAME)))
                .unwrap()
                .len(),
            0
        );
    }

    #[test]
    fn a_file_gone_or_replaced_is_forgotten_at_start_and_the_record_is_bounded() {
        let (_dir, folder) = folder();
        let mut sent = Sent::open(&folder).unwrap();
        for i in 0..MAX_ENTRIES {
            let name = format!("{i:03}.task.json");
            let (_, entry) = entry_for(&folder, &name, "x");
            sent.put(&folder, OsStr::new(&name), entry).unwrap();
        }
        let (_, entry) = entry_for(&folder, "over.task.json", "x");
        assert!(matches!(
            sent.put(&folder, OsStr::new("over.task.json"), entry),
            Err(Unrecorded::Full)
        ));
        drop(sent);
        std::fs::remove_file(folder.join(OsStr::new("000.task.json"))).unwrap();
        let path = folder.join(OsStr::new("001.task.json"));
        std::fs::rename(&path, folder.join(OsStr::new("keep"))).unwrap();
        std::fs::write(&path, "x").unwrap();
        let sent = Sent::open(&folder).unwrap();
        assert_eq!(sent.entries.len(), MAX_ENTRIES - 2);
    }
}
