//! [`GitWorkspace`]: orch's [`Workspace`] over the real `git`, run as a
//! child process. It does what the engine asks (resolve a revision, list
//! uncommitted paths, make, inspect, save and remove worktrees) and decides
//! nothing: which worktree, when, and what is safe are the engine's
//! (`inbox_engine::orch::workspace`).
//!
//! Every git runs with the caller's git settings but none of its `GIT_*`
//! location variables (a leader running orch from a git hook must not point
//! it at another repository), no terminal prompt, and no hooks. The
//! folders on the way to a worktree are made and checked in `folders`,
//! from the folder the leader named down, before every call that makes,
//! looks at, saves or removes a worktree: never through a symbolic link
//! the leader did not name. This module must never remove anything git
//! calls dirty, but for a worktree no attempt ever had (`discard`).
//!
//! A host may stop the process at a step of a dispatch ([`GitWorkspace::
//! stalling_at`]; the native host does so in test builds when
//! `INBOX_TEST_DISPATCH_STALL=STEP`): `reserved` (the attempt reserved,
//! before git makes its worktree), `made` (just after), `discarded` (an
//! unused worktree discarded, before its reservation is dropped): the
//! crash tests kill it there.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use inbox_engine::orch::model::Worktree;
use inbox_engine::orch::workspace::{
    GIT_MIN_VERSION, Place, RepoLook, Workspace, WorkspaceError, WorkspaceErrorKind, WorktreeLook,
};

mod folders;
pub mod holder;

/// Who the commits orch makes for saved work are by.
const ORCH_IDENTITY: (&str, &str) = ("orch", "orch@inbox.invalid");

/// Location variables that would point git elsewhere than asked.
const GIT_LOCATION_VARS: [&str; 7] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
];

/// orch's worktrees made and tidied with the `git` on `PATH`.
#[derive(Debug, Default)]
pub struct GitWorkspace {
    /// Whether git was found new enough, once asked.
    checked: Option<Result<(), WorkspaceError>>,
    /// Called at each named step of a dispatch (see the module docs).
    stall: Option<fn(&str)>,
}

impl GitWorkspace {
    /// A workspace that looks for git when first asked to do something.
    pub fn new() -> GitWorkspace {
        GitWorkspace::default()
    }

    /// The workspace, calling `stall` with the name of each step of a
    /// dispatch as it reaches it (see the module docs): the crash tests'
    /// way to stop a process there.
    pub fn stalling_at(self, stall: fn(&str)) -> GitWorkspace {
        GitWorkspace {
            stall: Some(stall),
            ..self
        }
    }

    /// Reached the dispatch step `step` (see [`GitWorkspace::stalling_at`]).
    fn step(&self, step: &str) {
        if let Some(stall) = self.stall {
            stall(step);
        }
    }

    /// Refuses (once for all) a missing git or one older than
    /// [`GIT_MIN_VERSION`].
    fn ready(&mut self) -> Result<(), WorkspaceError> {
        self.checked.get_or_insert_with(check_version).clone()
    }

    /// `git ARGS` in `dir`, succeeded, its stdout trimmed.
    fn run(&mut self, dir: &str, args: &[&str]) -> Result<String, WorkspaceError> {
        let output = self.output(dir, args, &[])?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout)
                .trim_end()
                .to_owned())
        } else {
            Err(failed(args, &output))
        }
    }

    /// `git ARGS` in `dir` with `env`, whatever its exit.
    fn output(
        &mut self,
        dir: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Output, WorkspaceError> {
        self.ready()?;
        let mut command = git();
        command
            .arg("-C")
            .arg(dir)
            .args(["-c", "core.hooksPath=/dev/null"])
            .args(args);
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().map_err(|e| {
            WorkspaceError::new(
                WorkspaceErrorKind::Unavailable,
                format!("cannot run git: {e}"),
            )
        })
    }

    /// Whether `git ARGS` in `dir` succeeds (a yes/no question to git).
    fn holds(&mut self, dir: &str, args: &[&str]) -> Result<bool, WorkspaceError> {
        Ok(self.output(dir, args, &[])?.status.success())
    }

    /// The commit `rev` names in `repo`, if it names one.
    fn commit(&mut self, repo: &str, rev: &str) -> Result<Option<String>, WorkspaceError> {
        let spec = format!("{rev}^{{commit}}");
        let output = self.output(repo, &["rev-parse", "--verify", "--quiet", &spec], &[])?;
        let id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        Ok((output.status.success() && !id.is_empty()).then_some(id))
    }

    /// The uncommitted paths of the checkout at `dir`, untracked files
    /// included (ignored ones not).
    fn uncommitted(&mut self, dir: &str) -> Result<Vec<String>, WorkspaceError> {
        let args = ["status", "--porcelain=v1", "-z", "--untracked-files=all"];
        let output = self.output(dir, &args, &[])?;
        if !output.status.success() {
            return Err(failed(&args, &output));
        }
        Ok(porcelain_paths(&output.stdout))
    }

    /// The tree everything in the worktree at `dir` would commit as, built
    /// in an index of orch's own (the worktree's index is left alone).
    fn current_tree(&mut self, dir: &str) -> Result<String, WorkspaceError> {
        let index = self.run(dir, &["rev-parse", "--git-path", "orch-wip-index"])?;
        let index = absolute_in(dir, &index);
        let env = [("GIT_INDEX_FILE", index.as_str())];
        let result = (|| {
            for args in [&["read-tree", "HEAD"][..], &["add", "-A"][..]] {
                let output = self.output(dir, args, &env)?;
                if !output.status.success() {
                    return Err(failed(args, &output));
                }
            }
            let output = self.output(dir, &["write-tree"], &env)?;
            if !output.status.success() {
                return Err(failed(&["write-tree"], &output));
            }
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        })();
        let _ = std::fs::remove_file(&index);
        result
    }
}

impl Workspace for GitWorkspace {
    fn look(&mut self, repo: &str, base: &str) -> Result<RepoLook, WorkspaceError> {
        self.ready()?;
        let top = self.output(repo, &["rev-parse", "--show-toplevel"], &[])?;
        if !top.status.success() {
            return Err(WorkspaceError::new(
                WorkspaceErrorKind::NotARepository,
                first_line(&top.stderr),
            ));
        }
        Ok(RepoLook {
            commit: self.commit(repo, base)?,
            uncommitted: self.uncommitted(repo)?,
        })
    }

    fn create(&mut self, worktree: &Worktree, place: &Place) -> Result<(), WorkspaceError> {
        self.step("reserved");
        self.ready()?;
        let made = folders::make(place, &worktree.path)?;
        // The worktree's own folder is made above, empty, never a link, so
        // git checks out into it rather than wherever a link would lead.
        let args = [
            "worktree",
            "add",
            "-b",
            &worktree.branch,
            &worktree.path,
            &worktree.base_commit,
        ];
        let refusal = match self.output(&worktree.repo, &args, &[]) {
            Ok(output) if output.status.success() => {
                self.step("made");
                return Ok(());
            }
            Ok(output) => refused(first_line(&output.stderr)),
            Err(error) => error,
        };
        folders::take_back(&made);
        Err(refusal)
    }

    /// Nobody ever worked in a worktree orch discards, so git removes it
    /// whatever its state: whole, half checked out and still locked by a
    /// `git worktree add` that was killed, or gone. A folder git does not
    /// know is removed only when empty (what `create` made before git
    /// started); anything else in it stays, and the discard is refused. Its
    /// branch is deleted only while it still points at the base commit.
    fn discard(&mut self, worktree: &Worktree, place: &Place) -> Result<(), WorkspaceError> {
        folders::never_links(place, &worktree.path)?;
        let repo = worktree.repo.as_str();
        let path = worktree.path.as_str();
        let args = ["worktree", "remove", "--force", "--force", path];
        let removed = self.output(repo, &args, &[])?.status.success();
        let folder = Path::new(path);
        if !removed && folder.symlink_metadata().is_ok() {
            std::fs::remove_dir(folder).map_err(|e| {
                refused(format!("{path} is not a worktree git made, and it is not empty ({e}); look at it and remove it"))
            })?;
        }
        // The branch goes only while it is where git made it, on the base
        // commit: deleting it then loses no commit, whoever made it.
        let branch = format!("refs/heads/{}", worktree.branch);
        if self.commit(repo, &branch)?.as_deref() == Some(worktree.base_commit.as_str()) {
            self.run(repo, &["branch", "-D", &worktree.branch])?;
        }
        remove_empty_parents(folder);
        self.step("discarded");
        Ok(())
    }

    fn inspect(
        &mut self,
        worktree: &Worktree,
        place: &Place,
        wip_ref: &str,
    ) -> Result<WorktreeLook, WorkspaceError> {
        folders::never_links(place, &worktree.path)?;
        let repo = worktree.repo.as_str();
        let exists = Path::new(&worktree.path).join(".git").exists();
        let range = format!("{}..{}", worktree.base_commit, worktree.branch);
        let commits = self
            .run(repo, &["rev-list", "--count", &range])
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let merged = self.holds(
            repo,
            &["merge-base", "--is-ancestor", &worktree.branch, "HEAD"],
        )?;
        let saved = self.commit(repo, wip_ref)?;
        let uncommitted = match exists {
            true => self.uncommitted(&worktree.path)?,
            false => Vec::new(),
        };
        let saved_is_current = match (&saved, uncommitted.is_empty()) {
            (Some(_), false) => {
                let saved_tree = self.run(repo, &["rev-parse", &format!("{wip_ref}^{{tree}}")])?;
                self.current_tree(&worktree.path)? == saved_tree
            }
            _ => false,
        };
        Ok(WorktreeLook {
            exists,
            uncommitted,
            commits,
            merged,
            saved,
            saved_is_current,
        })
    }

    fn save(
        &mut self,
        worktree: &Worktree,
        place: &Place,
        wip_ref: &str,
    ) -> Result<String, WorkspaceError> {
        folders::never_links(place, &worktree.path)?;
        let dir = worktree.path.as_str();
        let tree = self.current_tree(dir)?;
        let message = format!(
            "orch: work {} left uncommitted on {}",
            worktree.path, worktree.branch
        );
        let (name, email) = ORCH_IDENTITY;
        let env = [
            ("GIT_AUTHOR_NAME", name),
            ("GIT_AUTHOR_EMAIL", email),
            ("GIT_COMMITTER_NAME", name),
            ("GIT_COMMITTER_EMAIL", email),
        ];
        let args = ["commit-tree", &tree, "-p", "HEAD", "-m", &message];
        let output = self.output(dir, &args, &env)?;
        if !output.status.success() {
            return Err(failed(&args, &output));
        }
        let commit = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        self.run(&worktree.repo, &["update-ref", wip_ref, &commit])?;
        Ok(commit)
    }

    fn remove(&mut self, worktree: &Worktree, place: &Place) -> Result<(), WorkspaceError> {
        folders::never_links(place, &worktree.path)?;
        let output = self.output(&worktree.repo, &["worktree", "remove", &worktree.path], &[])?;
        if !output.status.success() {
            return Err(refused(first_line(&output.stderr)));
        }
        remove_empty_parents(Path::new(&worktree.path));
        Ok(())
    }

    fn holder(&mut self) -> Option<String> {
        holder::this_process()
    }

    fn has_ended(&mut self, holder: &str) -> bool {
        holder::has_ended(holder)
    }
}

/// The task's and the run's folders of a worktree removed, once empty
/// (never a folder with anything left in it).
fn remove_empty_parents(worktree: &Path) {
    let mut folder = worktree.parent();
    for _ in 0..2 {
        let Some(dir) = folder else { break };
        if std::fs::remove_dir(dir).is_err() {
            break;
        }
        folder = dir.parent();
    }
}

/// `git`, without the variables that would point it at another repository
/// and without ever prompting.
fn git() -> Command {
    let mut command = Command::new("git");
    for var in GIT_LOCATION_VARS {
        command.env_remove(var);
    }
    command
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    command
}

/// Whether git is there and new enough.
fn check_version() -> Result<(), WorkspaceError> {
    let unavailable = |why: String| {
        let (major, minor) = GIT_MIN_VERSION;
        WorkspaceError::new(
            WorkspaceErrorKind::Unavailable,
            format!("{why}; orch's worktrees need git {major}.{minor} or newer on PATH"),
        )
    };
    let output = git()
        .arg("--version")
        .output()
        .map_err(|e| unavailable(format!("git could not be run ({e})")))?;
    let text = String::from_utf8_lossy(&output.stdout);
    match parse_version(&text) {
        Some(version) if version >= GIT_MIN_VERSION => Ok(()),
        Some((major, minor)) => Err(unavailable(format!("git is {major}.{minor}"))),
        None => Err(unavailable(format!(
            "`git --version` said {:?}",
            text.trim()
        ))),
    }
}

/// `(major, minor)` of `git version 2.47.3` (and of vendor suffixes).
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let version = text.trim().strip_prefix("git version ")?;
    let mut parts = version.split(['.', ' ']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The paths of `git status --porcelain=v1 -z` output (a rename's new path
/// only).
fn porcelain_paths(stdout: &[u8]) -> Vec<String> {
    let mut paths = Vec::new();
    let mut entries = stdout.split(|&b| b == 0).filter(|e| !e.is_empty());
    while let Some(entry) = entries.next() {
        if entry.len() < 4 {
            continue;
        }
        let (status, path) = entry.split_at(3);
        paths.push(String::from_utf8_lossy(path).into_owned());
        // A rename or copy is followed by its old path.
        if status[0] == b'R' || status[0] == b'C' {
            entries.next();
        }
    }
    paths
}

/// `path` as git printed it, made absolute from `dir`.
fn absolute_in(dir: &str, path: &str) -> String {
    let path = PathBuf::from(path);
    if path.is_absolute() {
        path.display().to_string()
    } else {
        Path::new(dir).join(path).display().to_string()
    }
}

/// What git said went wrong: its first `fatal:` or `error:` line (git
/// may print progress first, as `worktree add` prints "Preparing
/// worktree"), else its first line.
fn first_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.clone().next();
    lines
        .find(|l| l.starts_with("fatal:") || l.starts_with("error:"))
        .or(first)
        .unwrap_or("git failed")
        .to_owned()
}

fn failed(args: &[&str], output: &Output) -> WorkspaceError {
    WorkspaceError::new(
        WorkspaceErrorKind::Failed,
        format!(
            "git {} failed: {}",
            args.join(" "),
            first_line(&output.stderr)
        ),
    )
}

fn refused(message: String) -> WorkspaceError {
    WorkspaceError::new(WorkspaceErrorKind::Failed, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_vendor_suffixes() {
        assert_eq!(parse_version("git version 2.47.3\n"), Some((2, 47)));
        assert_eq!(
            parse_version("git version 2.39.5 (Apple Git-154)"),
            Some((2, 39))
        );
        assert_eq!(parse_version("git version 2.17.0.windows.1"), Some((2, 17)));
        assert_eq!(parse_version("not git"), None);
    }

    #[test]
    fn git_s_complaint_is_found_after_its_progress() {
        let said = b"Preparing worktree (new branch 'orch/r/a/1')\nfatal: a branch named 'orch/r/a/1' already exists\n";
        assert_eq!(
            first_line(said),
            "fatal: a branch named 'orch/r/a/1' already exists"
        );
        assert_eq!(first_line(b"\n  only this\n"), "only this");
        assert_eq!(first_line(b""), "git failed");
    }

    #[test]
    fn porcelain_lists_every_path_once() {
        let out = b" M src/a.rs\0?? new file.txt\0R  b.rs\0old.rs\0A  c.rs\0";
        assert_eq!(
            porcelain_paths(out),
            ["src/a.rs", "new file.txt", "b.rs", "c.rs"]
        );
    }
}
