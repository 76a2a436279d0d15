//! The folders on the way to an attempt's worktree: made and checked one
//! at a time from the folder the leader named (the repository, or the
//! worktrees folder given with `--worktrees`; see
//! [`inbox_engine::orch::workspace::place`]), each opened relative to the
//! one above without following a symbolic link, so a repository that holds
//! `.agents` as a link (or a link planted later) can never make orch write
//! a worktree or a `.gitignore` outside it. The same whole chain, from the
//! named folder down to the worktree's own, is walked again before every
//! later call that looks, saves or removes there ([`never_links`]): a link
//! planted at `.agents` or `.agents/worktrees` after the run started is
//! refused as one planted at the worktree. The engine decides which
//! folders these are; this module only walks them.
//!
//! On Linux every step is `mkdirat` and `openat(O_NOFOLLOW)` on the folder
//! opened before, so a folder swapped for a link between two steps is
//! refused, not followed. Elsewhere each step is checked with
//! `symlink_metadata`. The worktree's own folder is made here too, empty,
//! so git checks out into it rather than through a link it would follow.
//! Nothing here ever removes a folder that is not empty.
//!
//! What remains is a check before use: git takes the worktree's path as
//! text, not the folder this walk opened, and resolves it again itself. A
//! process that may write in a folder of the chain (the repository's
//! owner, or whoever may write in its `.agents`) can swap a folder for a
//! link in the moment between the walk and git's own use of the path, and
//! git then follows that link. No git command takes an opened folder, so
//! this window can be narrowed (the walk runs right before each git call)
//! but not closed here; whoever can do it can already change what the
//! repository holds and what the worker runs.

use std::path::{Path, PathBuf};

use inbox_engine::orch::workspace::{Place, WorkspaceError, WorkspaceErrorKind};

/// What the worktrees folder's `.gitignore` says: ignore everything.
const IGNORE_ALL: &[u8] = b"*\n";

/// Makes every folder of `place` that is missing, refusing a link or a file
/// where one goes; returns the folders it made, outermost first, for
/// [`take_back`]. `path` is the worktree's folder, which `place` must lead
/// to.
pub(super) fn make(place: &Place, path: &str) -> Result<Vec<PathBuf>, WorkspaceError> {
    let named = leads_to(place, path)?;
    // The named folder is the leader's: made with its parents, links in
    // its path followed.
    let named_is_new = std::fs::symlink_metadata(named).is_err();
    std::fs::create_dir_all(named)
        .map_err(|e| refused(format!("cannot make {}: {e}", named.display())))?;
    let mut walk = Walk::open(named)?;
    if named_is_new && place.ignore && place.worktrees_depth == 0 {
        walk.write_ignore(named)?;
    }
    let mut made = Vec::new();
    let mut at = named.to_path_buf();
    for (depth, name) in place.below.iter().enumerate() {
        at.push(name);
        let new = walk.step(name, &at)?;
        if new {
            made.push(at.clone());
        }
        if new && place.ignore && depth + 1 == place.worktrees_depth {
            walk.write_ignore(&at)?;
        }
    }
    Ok(made)
}

/// Removes the folders [`make`] made, innermost first, each only while it
/// is empty (`rmdir`): a dispatch git refused leaves no folder of its own
/// behind. A new worktrees folder keeps its `.gitignore`, and so stays.
/// Best effort.
pub(super) fn take_back(made: &[PathBuf]) {
    for folder in made.iter().rev() {
        if std::fs::remove_dir(folder).is_err() {
            break;
        }
    }
}

/// Refuses to work in a worktree when a folder on the way to it, from the
/// folder the leader named down to the worktree's own (every folder of
/// `place`, `.agents` and `.agents/worktrees` included for the default
/// worktrees folder), is now a symbolic link or not a folder: git would
/// follow it. A folder that is gone is fine (the worktree was removed):
/// nothing below it can be reached.
pub(super) fn never_links(place: &Place, path: &str) -> Result<(), WorkspaceError> {
    let named = leads_to(place, path)?;
    if !named.exists() {
        return Ok(());
    }
    let mut walk = Walk::open(named)?;
    let mut at = named.to_path_buf();
    for name in &place.below {
        at.push(name);
        if !walk.enter(name, &at)? {
            break;
        }
    }
    Ok(())
}

/// The named folder of `place`, once it is sure that `place` leads to
/// `path`, one plain folder name at a time.
fn leads_to<'a>(place: &'a Place, path: &str) -> Result<&'a Path, WorkspaceError> {
    let named = Path::new(&place.named);
    let mut full = named.to_path_buf();
    full.extend(&place.below);
    let plain = |part: &String| !part.contains('/') && part != ".." && part != ".";
    if full != Path::new(path) || !place.below.iter().all(plain) {
        return Err(refused(format!(
            "{path} is not below {} as its place says",
            place.named
        )));
    }
    Ok(named)
}

/// The refusal of a link (or a file) where orch's folder goes.
fn link_refused(at: &Path, is_link: bool) -> WorkspaceError {
    let what = match is_link {
        true => "a symbolic link",
        false => "not a folder",
    };
    refused(format!(
        "{} is {what}; orch makes and uses worktrees only through folders, never a link a repository may hold: remove it, or name a worktrees folder of your own with `orch run create --worktrees DIR`",
        at.display()
    ))
}

fn refused(message: String) -> WorkspaceError {
    WorkspaceError::new(WorkspaceErrorKind::Failed, message)
}

#[cfg(target_os = "linux")]
use linux::Walk;
#[cfg(not(target_os = "linux"))]
use portable::Walk;

#[cfg(target_os = "linux")]
mod linux {
    //! Each step relative to the folder opened before, never following a
    //! link: `mkdirat`, then `openat(O_DIRECTORY | O_NOFOLLOW)`.

    use std::io::Write as _;
    use std::os::fd::OwnedFd;
    use std::path::Path;

    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    use rustix::io::Errno;

    use super::{IGNORE_ALL, link_refused, refused};
    use inbox_engine::orch::workspace::WorkspaceError;

    const FOLDER: OFlags = OFlags::RDONLY
        .union(OFlags::DIRECTORY)
        .union(OFlags::NOFOLLOW)
        .union(OFlags::CLOEXEC);

    /// The folder reached so far, open.
    pub(super) struct Walk(OwnedFd);

    impl Walk {
        /// Opens the named folder (links in its path followed: the leader
        /// named it).
        pub(super) fn open(named: &Path) -> Result<Walk, WorkspaceError> {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            rustix::fs::open(named, flags, Mode::empty())
                .map(Walk)
                .map_err(|e| refused(format!("cannot open {}: {e}", named.display())))
        }

        /// Makes `name` in the current folder if it is missing and moves
        /// into it; `at` is its path, for messages. Whether it was made.
        pub(super) fn step(&mut self, name: &str, at: &Path) -> Result<bool, WorkspaceError> {
            let new = match rustix::fs::mkdirat(&self.0, name, Mode::from_raw_mode(0o777)) {
                Ok(()) => true,
                Err(Errno::EXIST) => false,
                Err(e) => return Err(refused(format!("cannot make {}: {e}", at.display()))),
            };
            match rustix::fs::openat(&self.0, name, FOLDER, Mode::empty()) {
                Ok(fd) => {
                    self.0 = fd;
                    Ok(new)
                }
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    let is_link = rustix::fs::statat(&self.0, name, AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
                    Err(link_refused(at, is_link))
                }
                Err(e) => Err(refused(format!("cannot open {}: {e}", at.display()))),
            }
        }

        /// Moves into `name` in the current folder, never through a link;
        /// `at` is its path, for messages. Whether it exists.
        pub(super) fn enter(&mut self, name: &str, at: &Path) -> Result<bool, WorkspaceError> {
            match rustix::fs::openat(&self.0, name, FOLDER, Mode::empty()) {
                Ok(fd) => {
                    self.0 = fd;
                    Ok(true)
                }
                Err(Errno::NOENT) => Ok(false),
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    let is_link = rustix::fs::statat(&self.0, name, AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
                    Err(link_refused(at, is_link))
                }
                Err(e) => Err(refused(format!("cannot open {}: {e}", at.display()))),
            }
        }

        /// Writes the current folder's `.gitignore`, which must not exist
        /// (the folder was just made: anything there was planted).
        pub(super) fn write_ignore(&mut self, at: &Path) -> Result<(), WorkspaceError> {
            let flags =
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let cannot = |e: &dyn std::fmt::Display| {
                refused(format!("cannot write {}/.gitignore: {e}", at.display()))
            };
            let fd = rustix::fs::openat(&self.0, ".gitignore", flags, Mode::from_raw_mode(0o666))
                .map_err(|e| cannot(&e))?;
            std::fs::File::from(fd)
                .write_all(IGNORE_ALL)
                .map_err(|e| cannot(&e))
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod portable {
    //! Each step checked with `symlink_metadata` before it is used.

    use std::path::{Path, PathBuf};

    use super::{IGNORE_ALL, link_refused, refused};
    use inbox_engine::orch::workspace::WorkspaceError;

    /// The folder reached so far.
    pub(super) struct Walk(PathBuf);

    impl Walk {
        pub(super) fn open(named: &Path) -> Result<Walk, WorkspaceError> {
            Ok(Walk(named.to_path_buf()))
        }

        pub(super) fn step(&mut self, name: &str, at: &Path) -> Result<bool, WorkspaceError> {
            let next = self.0.join(name);
            let new = match std::fs::create_dir(&next) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
                Err(e) => return Err(refused(format!("cannot make {}: {e}", at.display()))),
            };
            let meta = std::fs::symlink_metadata(&next)
                .map_err(|e| refused(format!("cannot open {}: {e}", at.display())))?;
            if !meta.is_dir() {
                return Err(link_refused(at, meta.file_type().is_symlink()));
            }
            self.0 = next;
            Ok(new)
        }

        pub(super) fn enter(&mut self, name: &str, at: &Path) -> Result<bool, WorkspaceError> {
            let next = self.0.join(name);
            let meta = match std::fs::symlink_metadata(&next) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(refused(format!("cannot open {}: {e}", at.display()))),
            };
            if !meta.is_dir() {
                return Err(link_refused(at, meta.file_type().is_symlink()));
            }
            self.0 = next;
            Ok(true)
        }

        pub(super) fn write_ignore(&mut self, at: &Path) -> Result<(), WorkspaceError> {
            use std::io::Write as _;
            // `create_new` is O_EXCL: it never follows a link planted there.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(self.0.join(".gitignore"))
                .and_then(|mut f| f.write_all(IGNORE_ALL))
                .map_err(|e| refused(format!("cannot write {}/.gitignore: {e}", at.display())))
        }
    }
}
