//! Git worktrees for code-writing attempts: what orch asks of a host that
//! runs git ([`Workspace`]), and the rules about worktrees, which are the
//! engine's: how branches, folders and work-in-progress refs are named,
//! what a dispatch refuses, what happens to a worktree when its attempt
//! ends, what state a worktree is in and which ones are safe to remove.
//!
//! The host only does what it is told, with the real git: it resolves a
//! revision, lists uncommitted paths, creates and removes worktrees and
//! saves uncommitted work as a commit on a ref. It never decides. Nothing
//! here runs git or touches a file.

use serde::{Deserialize, Serialize};

use crate::vocabulary::vocabulary;

use super::model::{AttemptStatus, Worktree};

/// The oldest git that does everything asked of it (`git worktree remove`
/// came in 2.17); hosts refuse older ones with `git_unavailable`.
pub const GIT_MIN_VERSION: (u32, u32) = (2, 17);

/// Most uncommitted paths an attempt records as left out.
pub const LEFT_OUT_MAX: usize = 50;

/// What a repository looks like before a dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoLook {
    /// The base revision, resolved to a commit; `None` when it names no
    /// commit (unknown, a tree, an unborn branch).
    pub commit: Option<String>,
    /// The checkout's uncommitted paths, untracked files included, in the
    /// order git lists them.
    pub uncommitted: Vec<String>,
}

/// What a worktree looks like now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorktreeLook {
    /// Its folder is a worktree of the repository.
    pub exists: bool,
    /// Its uncommitted paths, untracked files included.
    pub uncommitted: Vec<String>,
    /// Commits on its branch since its base commit.
    pub commits: u32,
    /// Its branch's tip is in the repository's `HEAD`.
    pub merged: bool,
    /// The commit its work-in-progress ref holds, if there is one.
    pub saved: Option<String>,
    /// That commit holds exactly what is uncommitted now.
    pub saved_is_current: bool,
}

/// Why the host could not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WorkspaceError {
    /// What kind of failure.
    pub kind: WorkspaceErrorKind,
    /// What git said, and what to do.
    pub message: String,
}

/// The kinds of [`WorkspaceError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkspaceErrorKind {
    /// No git, or one older than [`GIT_MIN_VERSION`].
    Unavailable,
    /// The path is not a git repository.
    NotARepository,
    /// git refused (the branch or folder exists, a permission...).
    Failed,
}

impl WorkspaceError {
    /// A failure of `kind`.
    pub fn new(kind: WorkspaceErrorKind, message: impl Into<String>) -> WorkspaceError {
        WorkspaceError {
            kind,
            message: message.into(),
        }
    }
}

/// What orch asks of a host that runs git. Every call is synchronous and
/// may run git; none decides anything.
pub trait Workspace {
    /// `base` in `repo` resolved to a commit, and the checkout's
    /// uncommitted paths.
    fn look(&mut self, repo: &str, base: &str) -> Result<RepoLook, WorkspaceError>;

    /// Makes `worktree`: its branch, new, at its base commit, checked out in
    /// its folder (made, with its parents, if missing).
    fn create(&mut self, worktree: &Worktree) -> Result<(), WorkspaceError>;

    /// Takes back a worktree made for a dispatch that did not happen:
    /// removes the untouched folder and deletes its branch.
    fn discard(&mut self, worktree: &Worktree) -> Result<(), WorkspaceError>;

    /// What `worktree` looks like now; `wip_ref` is its work-in-progress ref.
    fn inspect(
        &mut self,
        worktree: &Worktree,
        wip_ref: &str,
    ) -> Result<WorktreeLook, WorkspaceError>;

    /// Saves everything uncommitted in `worktree` (untracked files included)
    /// as a commit on top of its `HEAD`, on `wip_ref`, touching neither its
    /// branch nor its files; returns the commit.
    fn save(&mut self, worktree: &Worktree, wip_ref: &str) -> Result<String, WorkspaceError>;

    /// Removes the worktree's folder the way `git worktree remove` does
    /// without `--force`: git refuses one that is not clean.
    fn remove(&mut self, worktree: &Worktree) -> Result<(), WorkspaceError>;
}

/// One run or task id as a single ref and path component: ASCII letters,
/// digits, `_` and `-` as they are, every other byte as `%XX`. Ids never
/// hold `%`, so no two ids share a component, and none holds `/`, `.`,
/// `:` or `@`, which git refuses or reads specially in ref names.
pub fn component(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The branch of attempt `attempt` of a task: `orch/RUN/TASK/N`. Every
/// orch branch has exactly these four parts, so none is the folder of
/// another (git cannot hold both `a/b` and `a/b/c`).
pub fn branch_name(run_id: &str, task_id: &str, attempt: u32) -> String {
    format!(
        "orch/{}/{}/{attempt}",
        component(run_id),
        component(task_id)
    )
}

/// The attempt's folder: `WORKTREES/RUN/TASK/N`.
pub fn worktree_path(worktrees: &str, run_id: &str, task_id: &str, attempt: u32) -> String {
    format!(
        "{}/{}/{}/{attempt}",
        worktrees.trim_end_matches('/'),
        component(run_id),
        component(task_id)
    )
}

/// The ref an ended attempt's uncommitted work is saved on, beside (not
/// on) its branch: `refs/orch/wip/RUN/TASK/N`.
pub fn wip_ref(worktree: &Worktree) -> String {
    let name = worktree
        .branch
        .strip_prefix("orch/")
        .unwrap_or(&worktree.branch);
    format!("refs/orch/wip/{name}")
}

/// The default folder of a repository's worktrees: `REPO/.agents/worktrees`.
pub fn default_worktrees(repo: &str) -> String {
    format!("{}/.agents/worktrees", repo.trim_end_matches('/'))
}

vocabulary! {
    /// Where an attempt's worktree is, as `orch worktree list` says it.
    pub enum WorktreeState ("worktree state") {
        Live = "live" : "Its attempt is still on: the worker works there.",
        Missing = "missing" : "Its attempt is still on, but its folder is gone.",
        Uncommitted = "uncommitted" : "Its attempt ended with uncommitted changes, not saved yet.",
        Saved = "saved" : "Its attempt ended with uncommitted changes, saved on its work-in-progress ref; kept until they are committed or discarded.",
        Commits = "commits" : "Clean, and its branch has commits the repository's HEAD lacks; the branch keeps them once the folder goes.",
        Merged = "merged" : "Clean, and nothing on its branch is missing from the repository's HEAD.",
        Removed = "removed" : "Its folder is gone; its branch (and any saved work) remain.",
        Unknown = "unknown" : "This host runs no git, so it cannot look.",
    }
}

impl WorktreeState {
    /// What an attempt's worktree is, from its attempt's status and a look.
    pub fn of(status: AttemptStatus, look: &WorktreeLook) -> WorktreeState {
        let live = status == AttemptStatus::Live;
        match (live, look.exists) {
            (true, true) => WorktreeState::Live,
            (true, false) => WorktreeState::Missing,
            (false, false) => WorktreeState::Removed,
            (false, true) if !look.uncommitted.is_empty() => match look.saved_is_current {
                true => WorktreeState::Saved,
                false => WorktreeState::Uncommitted,
            },
            (false, true) if look.commits > 0 && !look.merged => WorktreeState::Commits,
            (false, true) => WorktreeState::Merged,
        }
    }

    /// Whether `orch worktree gc` may remove it: an ended attempt's clean
    /// worktree, whose branch keeps every commit it has.
    pub fn removable(self) -> bool {
        matches!(self, WorktreeState::Commits | WorktreeState::Merged)
    }
}

/// What became of a worktree when orch tidied it up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tidied {
    /// Nothing to do (gone, or its attempt is still on).
    Left,
    /// Its uncommitted work was saved on its ref; the folder stays.
    Saved,
    /// It was clean: its folder was removed (its branch stays).
    Removed,
}

/// Never lose work: an ended attempt's worktree with uncommitted changes
/// has them saved on its work-in-progress ref (unless already saved as they
/// are) and stays; a clean one is removed, its branch keeping every commit.
/// A live attempt's worktree is never touched.
pub fn tidy(
    workspace: &mut dyn Workspace,
    worktree: &Worktree,
    status: AttemptStatus,
) -> Result<Tidied, WorkspaceError> {
    let wip = wip_ref(worktree);
    let look = workspace.inspect(worktree, &wip)?;
    match WorktreeState::of(status, &look) {
        WorktreeState::Uncommitted => {
            workspace.save(worktree, &wip)?;
            Ok(Tidied::Saved)
        }
        state if state.removable() => {
            workspace.remove(worktree)?;
            Ok(Tidied::Removed)
        }
        _ => Ok(Tidied::Left),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_become_single_components_that_never_collide() {
        assert_eq!(component("api-login_2"), "api-login_2");
        assert_eq!(component("feat/login"), "feat%2Flogin");
        assert_eq!(component("a.b:c@d"), "a%2Eb%3Ac%40d");
        // `a/b` + `c` and `a` + `b/c` differ, and no name is a folder of another.
        assert_ne!(branch_name("a/b", "c", 1), branch_name("a", "b/c", 1));
        assert_eq!(branch_name("r", "t/1", 2), "orch/r/t%2F1/2");
        assert_eq!(branch_name("r", "t", 1).split('/').count(), 4);
        assert_eq!(branch_name("r/x", "t/y/z", 10).split('/').count(), 4);
    }

    #[test]
    fn paths_and_refs_follow_the_branch() {
        let wt = Worktree {
            repo: "/repo".into(),
            path: worktree_path("/repo/.agents/worktrees/", "run", "api", 3),
            branch: branch_name("run", "api", 3),
            base: "HEAD".into(),
            base_commit: "c0ffee".into(),
            left_out: Vec::new(),
            left_out_count: 0,
        };
        assert_eq!(wt.path, "/repo/.agents/worktrees/run/api/3");
        assert_eq!(wip_ref(&wt), "refs/orch/wip/run/api/3");
        assert_eq!(default_worktrees("/repo/"), "/repo/.agents/worktrees");
    }

    #[test]
    fn only_clean_worktrees_of_ended_attempts_are_removable() {
        let look = |exists, dirty: bool, commits, merged, saved: bool| WorktreeLook {
            exists,
            uncommitted: if dirty { vec!["a".into()] } else { vec![] },
            commits,
            merged,
            saved: saved.then(|| "c".to_owned()),
            saved_is_current: saved,
        };
        let ended = AttemptStatus::Failed;
        let cases = [
            (
                AttemptStatus::Live,
                look(true, true, 0, false, false),
                WorktreeState::Live,
            ),
            (
                AttemptStatus::Live,
                look(false, false, 0, false, false),
                WorktreeState::Missing,
            ),
            (
                ended,
                look(true, true, 0, false, false),
                WorktreeState::Uncommitted,
            ),
            (
                ended,
                look(true, true, 0, false, true),
                WorktreeState::Saved,
            ),
            (
                ended,
                look(true, false, 2, false, false),
                WorktreeState::Commits,
            ),
            (
                ended,
                look(true, false, 2, true, false),
                WorktreeState::Merged,
            ),
            (
                ended,
                look(true, false, 0, false, false),
                WorktreeState::Merged,
            ),
            (
                ended,
                look(false, false, 0, false, false),
                WorktreeState::Removed,
            ),
        ];
        for (status, look, state) in cases {
            assert_eq!(WorktreeState::of(status, &look), state, "{look:?}");
            let removable = matches!(state, WorktreeState::Commits | WorktreeState::Merged);
            assert_eq!(state.removable(), removable);
        }
    }
}
