//! A folder other programs write into and a bridge keeps (`inbox bridge`):
//! its files read, written and renamed without trusting what is in it, and
//! its changes waited for.
//!
//! Whatever lands in such a folder is hostile: a name may be a symbolic
//! link planted to make the bridge read or overwrite another file, a file
//! may be huge or still being written. So a file is opened without
//! following links and only if it is a regular file, read up to a bound,
//! and written by creating a fresh owner-only file beside it and renaming
//! it over the name (a rename replaces a planted link, never follows it).
//! A write or a rename asked about in advance ([`Folder::can_write`],
//! [`Folder::can_rename`]) is one whose name fits the file system and has
//! nothing in its way that a rename cannot replace or move (a folder, a
//! file marked immutable or append-only) or that this user did not create
//! (another user's file, a link, a FIFO, a socket, a device), so a caller
//! can refuse work it could not record before doing it; the writes and
//! renames that go with that question ([`Folder::write_over_own`],
//! [`Folder::rename_over_own`]) replace only this user's regular files,
//! never a file planted meanwhile. Which file a name
//! leads to, and which writing of it, is an [`Identity`]. The folder
//! itself is created owner-only and refused when another user owns it. A
//! file one level down (a team member's `members/NAME/inbox`) is
//! reached name by name from the folder (`openat`, never through a link),
//! and appended to under the `flock` its other writers take. A lock other
//! programs take by creating a folder (Node's `proper-lockfile`), and the
//! file written under it, are [`lock`]'s.
//!
//! [`Changes`] sleeps until one of the watched folders changes (inotify on
//! Linux, a plain sleep elsewhere), a stop is asked for, or a timeout. It
//! says only *that* something may have changed: callers always list the
//! folder again, so a missed or merged notification delays nothing beyond
//! the timeout. This module must never interpret a file's content.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod lock;

pub use lock::{FolderLock, Replaced, STALL_ENV, stall_at, stall_point};

/// A folder a bridge keeps, checked to be this user's own.
#[derive(Debug)]
pub struct Folder {
    path: PathBuf,
}

/// Why a file of the folder could not be read.
#[derive(Debug)]
pub enum ReadProblem {
    /// The name is a symbolic link: never followed.
    Symlink,
    /// Not a regular file (a folder, a FIFO, a device...).
    NotAFile,
    /// Larger than the bound (its size).
    TooLarge(u64),
    /// Gone since it was listed (another process moved it).
    Gone,
    /// Anything else the operating system said.
    Io(io::Error),
}

/// What [`Folder::read_file`] read.
#[derive(Debug)]
pub struct FileRead {
    /// The content.
    pub bytes: Vec<u8>,
    /// When it was last written.
    pub modified: std::time::SystemTime,
    /// The uid of its owner.
    pub owner: u32,
    /// Its permission bits.
    pub mode: u32,
    /// Which file it is.
    pub identity: Identity,
}

/// Which file a name leads to, and which writing of it: its device and
/// inode, and the times of its last content change and last status change
/// (nanoseconds). Reading the same file again, from a process started
/// again, finds the same identity; a file written anew under the same name
/// has another, even with the same bytes and a reused inode: its status
/// change time is the kernel's clock when it was created or written, which
/// no writer can set (a modification time can be).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Identity {
    /// Its device and inode: which file, whatever writing of it.
    pub fn file(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    fn of(meta: &std::fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Its fields as bytes of a fixed length (what a key is made from).
    pub fn to_bytes(&self) -> [u8; 48] {
        let fields = [
            self.dev.to_le_bytes(),
            self.ino.to_le_bytes(),
            self.modified.0.to_le_bytes(),
            self.modified.1.to_le_bytes(),
            self.changed.0.to_le_bytes(),
            self.changed.1.to_le_bytes(),
        ];
        let mut bytes = [0; 48];
        for (chunk, field) in bytes.chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&field);
        }
        bytes
    }
}

/// A page of a folder's names ([`Folder::names_after`]).
#[derive(Debug)]
pub struct NamePage {
    /// The names, in byte order.
    pub names: Vec<OsString>,
    /// Whether more names follow the last one.
    pub more: bool,
}

impl NamePage {
    /// Whether `name` falls within the range of names this page looked at
    /// (after `after`, up to its last name when more follow): a name in it
    /// but not on the page is no longer in the folder.
    pub fn covers(&self, after: Option<&OsStr>, name: &OsStr) -> bool {
        let name = name.as_bytes();
        after.is_none_or(|after| name > after.as_bytes())
            && (!self.more
                || self
                    .names
                    .last()
                    .is_some_and(|last| name <= last.as_bytes()))
    }
}

/// What [`Folder::look`] saw at a name, without opening it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Look {
    /// Which file it is.
    pub identity: Identity,
    /// The uid of its owner.
    pub owner: u32,
}

/// Why a name of the folder cannot be written ([`Folder::can_write`]) or
/// renamed ([`Folder::can_rename`]).
#[derive(Debug)]
pub enum Blocked {
    /// Longer than the file system allows (its length, the limit).
    TooLong {
        /// The name's length in bytes.
        length: usize,
        /// The file system's limit.
        max: u64,
    },
    /// A folder is in the way, at this name (the name itself, or the one
    /// it is written under first): a rename cannot replace it.
    Folder(OsString),
    /// Something this user did not create is at this name: another
    /// user's file, or anything that is not a regular file (a link, a
    /// FIFO, a socket, a device). It is left as it is, never replaced.
    Foreign {
        /// The name.
        at: OsString,
        /// What it is (`a symbolic link`, `a file of uid 1001`, ...).
        what: String,
    },
    /// The name (or the folder itself, `.`) is marked immutable or
    /// append-only (`chattr +i`, `+a`): no rename can replace or move it,
    /// whoever runs it, until the mark is taken off.
    Fixed {
        /// The name.
        at: OsString,
        /// `immutable` or `append-only`.
        mark: &'static str,
    },
    /// The folder cannot be written, or the name not looked at.
    Io(io::Error),
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocked::TooLong { length, max } => write!(
                f,
                "the name would be {length} bytes, over the file system's limit of {max}"
            ),
            Blocked::Folder(at) => write!(f, "a folder is in the way at {}", at.to_string_lossy()),
            Blocked::Foreign { at, what } => write!(
                f,
                "{what} is in the way at {}, which the bridge's user did not create",
                at.to_string_lossy()
            ),
            Blocked::Fixed { at, mark } => {
                let flag = if *mark == IMMUTABLE { "i" } else { "a" };
                write!(
                    f,
                    "{} is marked {mark}, so no rename can replace or move it (`chattr -{flag}` it)",
                    at.to_string_lossy()
                )
            }
            Blocked::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The name [`Folder::write_atomically`] writes `name` under first: hidden,
/// of a fixed length (so it fits wherever `name` does), and the same for
/// the same `name` (so a crashed write's leftover is found and replaced).
pub fn temporary_name(name: &OsStr) -> OsString {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::hash::DefaultHasher::new();
    name.as_bytes().hash(&mut hasher);
    OsString::from(format!(".inbox-{:016x}.tmp", hasher.finish()))
}

impl Folder {
    /// The folder at `path`, created (owner-only, its parents as needed) if
    /// it does not exist. Refused (`InvalidInput`, the message naming the
    /// folder) when it is a symbolic link, not a folder, or another user's.
    pub fn ensure(path: &Path) -> io::Result<Folder> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(path)?;
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let meta = std::fs::symlink_metadata(path)?;
        if meta.file_type().is_symlink() {
            return Err(refused(format!(
                "{} is a symbolic link; name the folder it points to instead",
                path.display()
            )));
        }
        if !meta.is_dir() {
            return Err(refused(format!("{} is not a folder", path.display())));
        }
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            return Err(refused(format!(
                "{} belongs to another user (uid {}, you are {me}); a bridge never writes into a \
                 folder someone else controls",
                path.display(),
                meta.uid()
            )));
        }
        Ok(Folder {
            path: path.to_path_buf(),
        })
    }

    /// The folder's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the folder is still there (it may be removed at run time;
    /// [`Folder::ensure`] then creates it again).
    pub fn exists(&self) -> bool {
        std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_dir())
    }

    /// The names in the folder ending with `suffix`, in byte order (the
    /// order a bridge processes them in).
    pub fn names_ending(&self, suffix: &str) -> io::Result<Vec<OsString>> {
        let mut names: Vec<OsString> = std::fs::read_dir(&self.path)?
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .filter(|name| {
                let bytes = name.as_bytes();
                bytes.len() > suffix.len() && bytes.ends_with(suffix.as_bytes())
            })
            .collect();
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        Ok(names)
    }

    /// The first `limit` names in byte order after `after` (all names when
    /// `None`) that end with `suffix`. Whatever the folder holds (other
    /// users may fill a shared one), at most `limit` names are kept at
    /// once: a caller goes through a large folder a page at a time.
    pub fn names_after(
        &self,
        suffix: &str,
        after: Option<&OsStr>,
        limit: usize,
    ) -> io::Result<NamePage> {
        use std::collections::BinaryHeap;
        let mut smallest: BinaryHeap<Vec<u8>> = BinaryHeap::with_capacity(limit + 1);
        let mut more = false;
        for entry in std::fs::read_dir(&self.path)? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name().into_vec();
            let wanted = name.len() > suffix.len()
                && name.ends_with(suffix.as_bytes())
                && after.is_none_or(|after| name.as_slice() > after.as_bytes());
            if !wanted {
                continue;
            }
            smallest.push(name);
            if smallest.len() > limit {
                smallest.pop();
                more = true;
            }
        }
        let names = smallest
            .into_sorted_vec()
            .into_iter()
            .map(OsString::from_vec)
            .collect();
        Ok(NamePage { names, more })
    }

    /// `name`'s path in the folder.
    pub fn join(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// The content of the regular file `name`, at most `max` bytes, with its
    /// modification time; never through a symbolic link, never more than
    /// `max + 1` bytes read.
    pub fn read(
        &self,
        name: &OsStr,
        max: u64,
    ) -> Result<(Vec<u8>, std::time::SystemTime), ReadProblem> {
        self.read_file(name, max)
            .map(|read| (read.bytes, read.modified))
    }

    /// [`Folder::read`], saying also who owns the file and which file it
    /// is, both from the file that was read (not from its name, which may
    /// lead elsewhere by now).
    pub fn read_file(&self, name: &OsStr, max: u64) -> Result<FileRead, ReadProblem> {
        let path = self.join(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            // Never block on a FIFO planted under a descriptor's name.
            .custom_flags(libc_flags::NOFOLLOW | libc_flags::NONBLOCK)
            .open(&path);
        let mut file = match file {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ReadProblem::Gone),
            Err(_) if is_symlink(&path) => return Err(ReadProblem::Symlink),
            Err(e) => return Err(ReadProblem::Io(e)),
        };
        let meta = file.metadata().map_err(ReadProblem::Io)?;
        if !meta.is_file() {
            return Err(ReadProblem::NotAFile);
        }
        if meta.len() > max {
            return Err(ReadProblem::TooLarge(meta.len()));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        (&mut file)
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(ReadProblem::Io)?;
        // It grew between the size check and the read.
        if bytes.len() as u64 > max {
            return Err(ReadProblem::TooLarge(bytes.len() as u64));
        }
        let modified = meta.modified().map_err(ReadProblem::Io)?;
        Ok(FileRead {
            bytes,
            modified,
            owner: meta.uid(),
            mode: meta.mode() & 0o7777,
            identity: Identity::of(&meta),
        })
    }

    /// Which file `name` is now (the name itself, never a link's target).
    pub fn identity(&self, name: &OsStr) -> io::Result<Identity> {
        self.look(name).map(|look| look.identity)
    }

    /// Which file `name` is now and who owns it (the name itself, never a
    /// link's target), without opening it.
    pub fn look(&self, name: &OsStr) -> io::Result<Look> {
        std::fs::symlink_metadata(self.join(name)).map(|meta| Look {
            identity: Identity::of(&meta),
            owner: meta.uid(),
        })
    }

    /// The folder's permission bits (with the sticky bit, `0o1000`).
    pub fn mode(&self) -> io::Result<u32> {
        Ok(std::fs::symlink_metadata(&self.path)?.mode() & 0o7777)
    }

    /// The folder's mode when users other than its owner may write into it
    /// (group or others write permission, sticky or not: in a sticky
    /// folder they still add files, and names in the way of the owner's).
    pub fn writable_by_others(&self) -> io::Result<Option<u32>> {
        let mode = std::fs::symlink_metadata(&self.path)?.mode() & 0o7777;
        Ok((mode & 0o022 != 0).then_some(mode))
    }

    /// Whether `name` could be written (by [`Folder::write_atomically`]) or
    /// renamed to (by [`Folder::rename`]) now, asked before doing anything
    /// that cannot be taken back: the name fits the file system's limit,
    /// the folder may be written and is not marked append-only, and at
    /// the name and at its [`temporary_name`] there is nothing, or a
    /// regular file of this user's that is not marked immutable or
    /// append-only. Anything else there (a folder, another user's file, a
    /// link, a FIFO, a socket, a device) is not this user's to replace,
    /// though a folder's owner could (sticky or not): in a folder others
    /// may write, it is a stranger's. [`Folder::write_over_own`] and
    /// [`Folder::rename_over_own`] keep to this answer.
    pub fn can_write(&self, name: &OsStr) -> Result<(), Blocked> {
        self.can_take(&[name.to_owned(), temporary_name(name)])
    }

    /// Whether an entry could be renamed to `name` now (by
    /// [`Folder::rename_over_own`]): [`Folder::can_write`]'s question for
    /// the name alone (a rename writes under no other).
    pub fn can_rename_to(&self, name: &OsStr) -> Result<(), Blocked> {
        self.can_take(&[name.to_owned()])
    }

    /// [`Folder::can_write`] for `names`, the first of which is the name
    /// that ends up written.
    fn can_take(&self, names: &[OsString]) -> Result<(), Blocked> {
        let name = &names[0];
        let max = rustix::fs::statvfs(&self.path)
            .map_err(|e| Blocked::Io(e.into()))?
            .f_namemax;
        let length = name.len();
        if length as u64 > max {
            return Err(Blocked::TooLong { length, max });
        }
        self.can_change()?;
        for at in names {
            if self.own_or_nothing(at)? {
                self.not_fixed(at)?;
            }
        }
        Ok(())
    }

    /// Whether a regular file of this user's is at `at` (`true`) or
    /// nothing (`false`); refused when anything else is.
    fn own_or_nothing(&self, at: &OsStr) -> Result<bool, Blocked> {
        let meta = match std::fs::symlink_metadata(self.join(at)) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Blocked::Io(e)),
        };
        let kind = meta.file_type();
        let what = if kind.is_dir() {
            return Err(Blocked::Folder(at.to_owned()));
        } else if kind.is_symlink() {
            "a symbolic link".to_owned()
        } else if !kind.is_file() {
            "something that is not a regular file (a FIFO, a socket or a device)".to_owned()
        } else if meta.uid() != rustix::process::geteuid().as_raw() {
            format!("a file of another user (uid {})", meta.uid())
        } else {
            return Ok(true);
        };
        Err(Blocked::Foreign {
            at: at.to_owned(),
            what,
        })
    }

    /// Whether the entry `name` could be renamed to another name of the
    /// folder now (what it becomes is [`Folder::can_write`]'s question):
    /// the folder may be written and is not marked append-only, and the
    /// entry is not marked immutable or append-only.
    pub fn can_rename(&self, name: &OsStr) -> Result<(), Blocked> {
        self.can_change()?;
        self.not_fixed(name)
    }

    /// Whether names may be added to, replaced in and removed from the
    /// folder: it is writable and searchable by this process, and not
    /// marked append-only (where names can only be added).
    fn can_change(&self) -> Result<(), Blocked> {
        use rustix::fs::{Access, AtFlags, CWD, accessat};
        accessat(
            CWD,
            &self.path,
            Access::WRITE_OK | Access::EXEC_OK,
            AtFlags::EACCESS,
        )
        .map_err(|e| Blocked::Io(e.into()))?;
        match fixed_mark(&self.path) {
            Some(mark) => Err(Blocked::Fixed {
                at: OsString::from("."),
                mark,
            }),
            None => Ok(()),
        }
    }

    /// Refuses the name `at` when it is marked immutable or append-only.
    fn not_fixed(&self, at: &OsStr) -> Result<(), Blocked> {
        match fixed_mark(&self.join(at)) {
            Some(mark) => Err(Blocked::Fixed {
                at: at.to_owned(),
                mark,
            }),
            None => Ok(()),
        }
    }

    /// Writes `bytes` as `name`, whole or not at all: into a fresh
    /// owner-only file beside it, synced, then renamed over `name`. A reader
    /// never sees a half-written file, and a link planted at `name` is
    /// replaced, not followed. The file beside it has a name of fixed
    /// length ([`temporary_name`]), so any `name` that fits the file
    /// system fits; it is removed again when the write fails.
    pub fn write_atomically(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        let temporary = self.join(&temporary_name(name));
        // A leftover of a process that stopped mid-write, or something
        // planted: either way not ours to write through.
        match std::fs::remove_file(&temporary) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        self.write_beside(name, &temporary, bytes, true)
    }

    /// [`Folder::write_atomically`] that replaces only what
    /// [`Folder::can_write`] allows: at `name` and at its
    /// [`temporary_name`], nothing or a regular file of this user's.
    /// Refused (`InvalidInput`, saying what is in the way) otherwise, and
    /// when something is planted at `name` meanwhile (where nothing was,
    /// nothing is replaced: in a sticky folder, what was this user's stays
    /// so, since only its owner can remove it).
    pub fn write_over_own(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        let temporary_name = temporary_name(name);
        let replaces = self.own_or_nothing(name).map_err(refused_by)?;
        if self.own_or_nothing(&temporary_name).map_err(refused_by)? {
            std::fs::remove_file(self.join(&temporary_name))?;
        }
        self.write_beside(name, &self.join(&temporary_name), bytes, replaces)
    }

    /// Writes `bytes` into the fresh file `temporary` and renames it to
    /// `name` (over what is there only if `replace`).
    fn write_beside(
        &self,
        name: &OsStr,
        temporary: &Path,
        bytes: &[u8],
        replace: bool,
    ) -> io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc_flags::NOFOLLOW)
            .open(temporary)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_data())
            .and_then(|()| {
                drop(file);
                rename_paths(temporary, &self.join(name), replace)
            });
        if written.is_err() {
            let _ = std::fs::remove_file(temporary);
        }
        written
    }

    /// The regular file `name`, opened for appending (created owner-only if
    /// missing), never through a link or a FIFO. Refused (`InvalidInput`)
    /// when it is not a regular file or not this user's.
    pub fn open_appending(&self, name: &OsStr) -> io::Result<File> {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc_flags::NOFOLLOW | libc_flags::NONBLOCK)
            .open(self.join(name))?;
        let meta = file.metadata()?;
        let me = rustix::process::geteuid().as_raw();
        if !meta.is_file() || meta.uid() != me {
            return Err(refused(format!(
                "{} is not a regular file of this user's",
                self.join(name).display()
            )));
        }
        Ok(file)
    }

    /// Renames `from` to `to` within the folder (replacing `to`).
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        std::fs::rename(self.join(from), self.join(to))
    }

    /// Renames `from` to `to` within the folder, replacing only what
    /// [`Folder::can_write`] allows at `to`: nothing, or a regular file of
    /// this user's (refused, `InvalidInput`, otherwise; see
    /// [`Folder::write_over_own`]).
    pub fn rename_over_own(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let replaces = self.own_or_nothing(to).map_err(refused_by)?;
        rename_paths(&self.join(from), &self.join(to), replaces)
    }

    /// Takes the folder's bridge lock, `.inbox-bridge.lock`: held for as
    /// long as the returned file is open, released by the kernel when the
    /// process dies. `Ok(None)` when another process holds it.
    pub fn lock(&self) -> io::Result<Option<File>> {
        use rustix::fs::{FlockOperation, flock};
        let file = inbox_sqlite::file::open_lock_file(&self.path.join(".inbox-bridge.lock"))?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(file)),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// A file inside a folder's subfolder (`members/NAME/inbox`), opened
/// one name at a time from the folder, none of them through a link: a
/// subfolder swapped for a link between a listing and the open is refused,
/// not followed.
impl Folder {
    /// The names of the real subfolders (never links), in byte order.
    pub fn subfolders(&self) -> io::Result<Vec<OsString>> {
        let mut names: Vec<OsString> = std::fs::read_dir(&self.path)?
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .map(|entry| entry.file_name())
            .filter(|name| !name.as_bytes().starts_with(b"."))
            .collect();
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        Ok(names)
    }

    /// The subfolder `dir`, opened without following a link.
    fn open_subfolder(&self, dir: &OsStr) -> io::Result<std::os::fd::OwnedFd> {
        use rustix::fs::{Mode, OFlags, openat};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let top = rustix::fs::open(&self.path, flags, Mode::empty())?;
        Ok(openat(&top, dir, flags, Mode::empty())?)
    }

    /// The regular file `name` of the subfolder `dir`, open for reading
    /// (the caller seeks and reads a bounded amount): never through a link,
    /// never blocking on a FIFO.
    pub fn open_in(&self, dir: &OsStr, name: &OsStr) -> Result<File, ReadProblem> {
        use rustix::fs::{Mode, OFlags, openat};
        let problem = |e: rustix::io::Errno| match e {
            rustix::io::Errno::NOENT => ReadProblem::Gone,
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => ReadProblem::Symlink,
            e => ReadProblem::Io(e.into()),
        };
        let sub = self.open_subfolder(dir).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => ReadProblem::Gone,
            _ => ReadProblem::Symlink,
        })?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = openat(&sub, name, flags, Mode::empty()).map_err(problem)?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(ReadProblem::Io)?;
        if !meta.is_file() {
            return Err(ReadProblem::NotAFile);
        }
        Ok(file)
    }

    /// Appends `lines` to the file `name` of the subfolder `dir` (created
    /// owner-only if missing), under an exclusive `flock` on `lock` beside
    /// it, one `write` per line: the contention protocol of a file other
    /// writers append to with `flock -x` on the same lock file. Neither
    /// name is followed if it is a link.
    pub fn append_locked(
        &self,
        dir: &OsStr,
        name: &OsStr,
        lock: &OsStr,
        lines: &[Vec<u8>],
    ) -> io::Result<()> {
        use rustix::fs::{FlockOperation, Mode, OFlags, flock, openat};
        let lock_name = lock;
        let sub = self.open_subfolder(dir)?;
        let create = OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(0o600);
        let lock = File::from(openat(&sub, lock, create | OFlags::RDWR, mode)?);
        // Other holders append a line and let go; one that never does makes
        // this append fail (and be tried again later), not hang the caller.
        let started = std::time::Instant::now();
        loop {
            match flock(&lock, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK) if started.elapsed() < LOCK_PATIENCE => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!("{} is held by another process", lock_name.to_string_lossy()),
                    ));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let file = File::from(openat(
            &sub,
            name,
            create | OFlags::WRONLY | OFlags::APPEND,
            mode,
        )?);
        if !file.metadata()?.is_file() {
            return Err(refused(format!(
                "{} is not a regular file",
                name.to_string_lossy()
            )));
        }
        for line in lines {
            (&file).write_all(line)?;
        }
        file.sync_data()?;
        // Closing `lock` releases the flock.
        Ok(())
    }
}

/// How long [`Folder::append_locked`] waits for another holder of the lock.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// Open flags the standard library does not name.
mod libc_flags {
    pub(super) const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    pub(super) const NONBLOCK: i32 = rustix::fs::OFlags::NONBLOCK.bits() as i32;
}

/// [`Blocked::Fixed`]'s marks.
const IMMUTABLE: &str = "immutable";
const APPEND_ONLY: &str = "append-only";

/// The mark (immutable, append-only) that keeps the entry at `path` (never
/// a link's target) from being renamed or replaced, read without opening
/// it (`statx`). `None` when it has none, is not there, or the system
/// does not say.
#[cfg(target_os = "linux")]
fn fixed_mark(path: &Path) -> Option<&'static str> {
    use rustix::fs::{AtFlags, CWD, StatxAttributes, StatxFlags, statx};
    let found = statx(CWD, path, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::empty()).ok()?;
    let marked = |attribute: StatxAttributes| {
        found.stx_attributes_mask.contains(attribute) && found.stx_attributes.contains(attribute)
    };
    if marked(StatxAttributes::IMMUTABLE) {
        Some(IMMUTABLE)
    } else if marked(StatxAttributes::APPEND) {
        Some(APPEND_ONLY)
    } else {
        None
    }
}

#[cfg(not(target_os = "linux"))]
fn fixed_mark(_path: &Path) -> Option<&'static str> {
    None
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// A folder this module will not use; the message names it. Its kind,
/// `InvalidInput`, tells it apart from what the operating system said.
fn refused(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// A write or rename refused by what [`Folder::can_write`] found.
fn refused_by(blocked: Blocked) -> io::Error {
    match blocked {
        Blocked::Io(e) => e,
        blocked => refused(blocked.to_string()),
    }
}

/// Renames `from` to `to`: over what is at `to` if `replace`, else only
/// where nothing is (`RENAME_NOREPLACE`; something planted there meanwhile
/// refuses it, `AlreadyExists`). A file system without that flag gets a
/// plain rename.
fn rename_paths(from: &Path, to: &Path, replace: bool) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    if replace {
        return std::fs::rename(from, to);
    }
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => std::fs::rename(from, to),
        Err(rustix::io::Errno::EXIST) => Err(refused(format!(
            "{} was created by someone else meanwhile; it is left as it is",
            to.display()
        ))),
        done => done.map_err(io::Error::from),
    }
}

/// What ended a [`Changes::wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woke {
    /// A watched folder changed (or may have).
    Changed,
    /// The timeout passed.
    Timeout,
    /// The stop descriptor became readable.
    Stop,
}

/// Waits for any of a few folders to change.
pub struct Changes {
    folders: Vec<PathBuf>,
    #[cfg(target_os = "linux")]
    inotify: Option<inotify::Watch>,
}

impl Changes {
    /// Watches `folders` (those that exist now; see [`Changes::rewatch`]).
    pub fn watch(folders: &[&Path]) -> Changes {
        let folders: Vec<PathBuf> = folders.iter().map(|f| f.to_path_buf()).collect();
        Changes {
            #[cfg(target_os = "linux")]
            inotify: inotify::Watch::new(&folders).ok(),
            folders,
        }
    }

    /// Whether changes are noticed by notification rather than only by the
    /// timeout.
    pub fn notified(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.inotify.is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Watches the folders again: a folder that was removed and created
    /// again is a new folder, which the old watch does not see.
    pub fn rewatch(&mut self) {
        #[cfg(target_os = "linux")]
        {
            self.inotify = inotify::Watch::new(&self.folders).ok();
        }
    }

    /// Sleeps until a watched folder changes, `stop` becomes readable, or
    /// `timeout` passes.
    pub fn wait(&mut self, timeout: Duration, stop: Option<std::os::fd::BorrowedFd<'_>>) -> Woke {
        #[cfg(target_os = "linux")]
        if let Some(watch) = &mut self.inotify {
            return watch.wait(timeout, stop);
        }
        sleep_or_stop(timeout, stop)
    }
}

/// Without notifications: sleeps `timeout`, ending early on `stop`.
fn sleep_or_stop(timeout: Duration, stop: Option<std::os::fd::BorrowedFd<'_>>) -> Woke {
    use rustix::event::{PollFd, PollFlags, poll};
    let timespec = timespec(timeout);
    let mut fds: Vec<PollFd<'_>> = stop.iter().map(|s| PollFd::new(s, PollFlags::IN)).collect();
    match poll(&mut fds, Some(&timespec)) {
        Ok(0) => Woke::Timeout,
        Ok(_) => Woke::Stop,
        Err(_) => Woke::Changed,
    }
}

fn timespec(timeout: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(timeout.subsec_nanos()),
    }
}

#[cfg(target_os = "linux")]
mod inotify {
    use std::mem::MaybeUninit;
    use std::os::fd::{BorrowedFd, OwnedFd};
    use std::path::PathBuf;
    use std::time::Duration;

    use rustix::event::{PollFd, PollFlags, poll};
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

    use super::{Woke, timespec};

    /// One inotify descriptor watching every folder.
    pub(super) struct Watch {
        fd: OwnedFd,
    }

    impl Watch {
        pub(super) fn new(folders: &[PathBuf]) -> std::io::Result<Watch> {
            let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
            let flags = WatchFlags::CREATE
                | WatchFlags::MODIFY
                | WatchFlags::CLOSE_WRITE
                | WatchFlags::MOVED_TO
                | WatchFlags::MOVED_FROM
                | WatchFlags::DELETE
                | WatchFlags::DELETE_SELF
                | WatchFlags::MOVE_SELF;
            for folder in folders {
                inotify::add_watch(&fd, folder, flags)?;
            }
            Ok(Watch { fd })
        }

        pub(super) fn wait(&mut self, timeout: Duration, stop: Option<BorrowedFd<'_>>) -> Woke {
            let timespec = timespec(timeout);
            let mut fds = vec![PollFd::new(&self.fd, PollFlags::IN)];
            if let Some(stop) = &stop {
                fds.push(PollFd::new(stop, PollFlags::IN));
            }
            match poll(&mut fds, Some(&timespec)) {
                Ok(0) => Woke::Timeout,
                Ok(_) if fds.get(1).is_some_and(|s| !s.revents().is_empty()) => Woke::Stop,
                Ok(_) => {
                    self.drain();
                    Woke::Changed
                }
                // Interrupted (a signal): the caller looks again.
                Err(_) => Woke::Changed,
            }
        }

        /// Reads every pending event: callers list the folder again anyway.
        fn drain(&mut self) {
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(&self.fd, &mut buf);
            while reader.next().is_ok() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team() -> (tempfile::TempDir, Folder) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("members/worker")).unwrap();
        let folder = Folder::ensure(&dir.path().join("members")).unwrap();
        (dir, folder)
    }

    #[test]
    fn appends_wait_for_the_flock_other_writers_hold() {
        let (dir, folder) = team();
        let lock_path = dir.path().join("members/worker/inbox.lock");
        let held = File::create(&lock_path).unwrap();
        rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        let started = std::time::Instant::now();
        let lines = [b"one\n".to_vec(), b"two\n".to_vec()];
        let worker = OsStr::new("worker");
        folder
            .append_locked(
                worker,
                OsStr::new("inbox"),
                OsStr::new("inbox.lock"),
                &lines,
            )
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(90));
        releaser.join().unwrap();
        let file = folder.open_in(worker, OsStr::new("inbox")).unwrap();
        let mut text = String::new();
        (&file).read_to_string(&mut text).unwrap();
        assert_eq!(text, "one\ntwo\n");
    }

    #[test]
    fn a_member_folder_or_file_that_is_a_link_is_refused() {
        let (dir, folder) = team();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("inbox"), "secret\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("members/linked")).unwrap();
        std::os::unix::fs::symlink(
            elsewhere.join("inbox"),
            dir.path().join("members/worker/inbox"),
        )
        .unwrap();
        assert_eq!(folder.subfolders().unwrap(), [OsString::from("worker")]);
        let linked = OsStr::new("linked");
        assert!(matches!(
            folder.open_in(linked, OsStr::new("inbox")),
            Err(ReadProblem::Symlink)
        ));
        assert!(matches!(
            folder.open_in(OsStr::new("worker"), OsStr::new("inbox")),
            Err(ReadProblem::Symlink)
        ));
        let line = [b"x\n".to_vec()];
        let lock = OsStr::new("inbox.lock");
        assert!(
            folder
                .append_locked(OsStr::new("worker"), OsStr::new("inbox"), lock, &line)
                .is_err()
        );
        assert!(
            folder
                .append_locked(linked, OsStr::new("inbox"), lock, &line)
                .is_err()
        );
        assert_eq!(
            std::fs::read_to_string(elsewhere.join("inbox")).unwrap(),
            "secret\n"
        );
    }

    #[test]
    fn an_identity_tells_a_file_written_anew_from_the_same_file() {
        let (dir, folder) = team();
        let path = dir.path().join("members/a.task.json");
        let name = OsStr::new("a.task.json");
        std::fs::write(&path, "same").unwrap();
        let first = folder.read_file(name, 100).unwrap();
        assert_eq!(
            folder.read_file(name, 100).unwrap().identity,
            first.identity
        );
        assert_eq!(folder.identity(name).unwrap(), first.identity);
        // Renamed away (as a bridge does) and written again with the same
        // bytes and the same modification time: another file.
        std::fs::rename(&path, dir.path().join("members/a.task.json.processed")).unwrap();
        std::fs::write(&path, "same").unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(first.modified)
            .unwrap();
        let again = folder.read_file(name, 100).unwrap();
        assert_eq!(again.bytes, first.bytes);
        assert_ne!(again.identity, first.identity);
    }

    #[test]
    fn a_write_is_asked_about_before_and_leaves_nothing_when_it_fails() {
        let (dir, folder) = team();
        let max = usize::try_from(rustix::fs::statvfs(folder.path()).unwrap().f_namemax).unwrap();
        let longest = OsString::from("x".repeat(max));
        assert!(folder.can_write(&longest).is_ok());
        folder.write_atomically(&longest, b"fits").unwrap();
        let over = OsString::from("x".repeat(max + 1));
        assert!(matches!(
            folder.can_write(&over),
            Err(Blocked::TooLong { .. })
        ));
        std::fs::create_dir(dir.path().join("members/taken")).unwrap();
        let taken = OsStr::new("taken");
        assert!(matches!(folder.can_write(taken), Err(Blocked::Folder(_))));
        assert!(folder.write_atomically(taken, b"no").is_err());
        let names: Vec<OsString> = std::fs::read_dir(folder.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            names.iter().all(|n| !n.as_bytes().ends_with(b".tmp")),
            "{names:?}"
        );
        // A folder where its temporary would go.
        let free = OsStr::new("free");
        std::fs::create_dir(folder.join(&temporary_name(free))).unwrap();
        assert!(
            matches!(folder.can_write(free), Err(Blocked::Folder(at)) if at == temporary_name(free))
        );
    }

    #[test]
    fn only_this_user_s_regular_files_are_written_or_renamed_over() {
        let (_dir, folder) = team();
        std::os::unix::fs::symlink("elsewhere", folder.join(OsStr::new("link"))).unwrap();
        let link = OsStr::new("link");
        assert!(matches!(
            folder.can_write(link),
            Err(Blocked::Foreign { .. })
        ));
        assert!(matches!(
            folder.can_rename_to(link),
            Err(Blocked::Foreign { .. })
        ));
        let refused = folder.write_over_own(link, b"no").unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidInput, "{refused}");
        std::fs::write(folder.join(OsStr::new("mine")), "old").unwrap();
        assert!(folder.rename_over_own(OsStr::new("mine"), link).is_err());
        assert!(is_symlink(&folder.join(link)));
        // Its own file, or nothing, is written and renamed over.
        folder.write_over_own(OsStr::new("mine"), b"new").unwrap();
        folder
            .write_over_own(OsStr::new("fresh"), b"fresh")
            .unwrap();
        folder
            .rename_over_own(OsStr::new("fresh"), OsStr::new("mine"))
            .unwrap();
        assert_eq!(
            std::fs::read(folder.join(OsStr::new("mine"))).unwrap(),
            b"fresh"
        );
        if rustix::process::geteuid().is_root() {
            // Another user's file, planted where nothing was.
            let theirs = folder.join(OsStr::new("theirs"));
            std::fs::write(&theirs, "theirs").unwrap();
            rustix::fs::chown(&theirs, Some(rustix::process::Uid::from_raw(64123)), None).unwrap();
            let blocked = folder.can_write(OsStr::new("theirs")).unwrap_err();
            assert!(blocked.to_string().contains("uid 64123"), "{blocked}");
            assert!(folder.write_over_own(OsStr::new("theirs"), b"no").is_err());
            assert_eq!(std::fs::read(&theirs).unwrap(), b"theirs");
        }
    }

    #[test]
    fn names_come_a_page_at_a_time_in_byte_order() {
        let (dir, folder) = team();
        for name in ["b.x", "a.x", "d.x", "c.x", "e.x", "skip.y", ".x"] {
            std::fs::write(dir.path().join("members").join(name), "").unwrap();
        }
        let mut seen = Vec::new();
        let mut after: Option<OsString> = None;
        loop {
            let page = folder.names_after(".x", after.as_deref(), 2).unwrap();
            assert!(page.names.len() <= 2);
            for name in &page.names {
                assert!(page.covers(after.as_deref(), name));
            }
            seen.extend(page.names.iter().cloned());
            if !page.more {
                assert!(page.covers(after.as_deref(), OsStr::new("zzz.x")));
                break;
            }
            assert!(!page.covers(after.as_deref(), OsStr::new("zzz.x")));
            after = page.names.last().cloned();
        }
        assert_eq!(seen, ["a.x", "b.x", "c.x", "d.x", "e.x"]);
    }
}
