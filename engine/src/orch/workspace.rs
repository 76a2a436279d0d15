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

use super::model::{AttemptStatus, RepoSpec, Worktree};

/// The oldest git that does everything asked of it (`git worktree remove`
/// came in 2.17); hosts refuse older ones with `git_unavailable`.
pub const GIT_MIN_VERSION: (u32, u32) = (2, 17);

/// Most refused tasks one `orch dispatch --all-ready` lists in full
/// (`refused`); it goes on through the whole ready queue all the same and
/// counts the refusals past these (`refused_more`).
pub const REFUSED_MAX: usize = 100;

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
    /// its folder, made at `place`: the named folder (made if missing) and
    /// the folders below it, each made if missing and refused when it is a
    /// symbolic link or not a folder; the worktrees folder gets a
    /// `.gitignore` of `*` when it is made here and `place.ignore`. What it
    /// made is taken back when git then refuses.
    fn create(&mut self, worktree: &Worktree, place: &Place) -> Result<(), WorkspaceError>;

    /// Takes back a worktree made for a dispatch that did not happen, or
    /// reserved by one that stopped half-way: removes its folder, whatever
    /// a git that was stopped left in it (nobody ever worked there), and
    /// deletes its branch while the branch is still on the base commit (so
    /// no commit is lost, whoever made it). What is already gone is fine.
    ///
    /// This and the calls below are refused when a folder of `place` on the
    /// way to the worktree (every folder below `place.named`, the worktree's
    /// own included) is now a symbolic link or not a folder: git would
    /// follow it out of the repository. A folder that is gone is fine.
    fn discard(&mut self, worktree: &Worktree, place: &Place) -> Result<(), WorkspaceError>;

    /// What `worktree` looks like now; `wip_ref` is its work-in-progress ref.
    fn inspect(
        &mut self,
        worktree: &Worktree,
        place: &Place,
        wip_ref: &str,
    ) -> Result<WorktreeLook, WorkspaceError>;

    /// Saves everything uncommitted in `worktree` (untracked files included)
    /// as a commit on top of its `HEAD`, on `wip_ref`, touching neither its
    /// branch nor its files; returns the commit.
    fn save(
        &mut self,
        worktree: &Worktree,
        place: &Place,
        wip_ref: &str,
    ) -> Result<String, WorkspaceError>;

    /// Removes the worktree's folder the way `git worktree remove` does
    /// without `--force`: git refuses one that is not clean.
    fn remove(&mut self, worktree: &Worktree, place: &Place) -> Result<(), WorkspaceError>;

    /// This process, named so that another process of this host can tell
    /// whether it still runs ([`Workspace::has_ended`]); recorded with the
    /// attempts it reserves. `None` when the host cannot tell.
    fn holder(&mut self) -> Option<String> {
        None
    }

    /// Whether the process `holder` names has certainly ended (a process of
    /// this machine that is gone); `false` when it runs or nobody can tell
    /// (another machine's). A reservation of an ended process is undone at
    /// once; any other only once it is older than the bound.
    fn has_ended(&mut self, _holder: &str) -> bool {
        false
    }
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
    worktree_path_of(worktrees, &component(run_id), &component(task_id), attempt)
}

fn worktree_path_of(worktrees: &str, run: &str, task: &str, attempt: u32) -> String {
    format!("{}/{run}/{task}/{attempt}", worktrees.trim_end_matches('/'))
}

/// Longest file name (one path component) the file systems orch's hosts
/// run on take (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Longest path, in bytes, with the terminating NUL (`PATH_MAX` of Linux).
pub const PATH_MAX: usize = 4096;

/// The longest attempt number, as a path component: attempts count in a
/// `u32`.
const ATTEMPT_MAX: u32 = u32::MAX;

/// Why attempts of `task_id` (or, with `None`, of any task) in run `run_id`
/// could never get a worktree under `spec`, or `Ok` when they can: the one
/// rule, applied when a task is added (`orch task add`, `orch plan`) and a
/// run is created, so that a dispatch never fails for certain.
///
/// - Each id becomes one path component and one part of the branch name
///   (see [`component`]): it must fit in [`NAME_MAX`] bytes once encoded
///   (an id of 128 `/` is 384).
/// - The attempt's folder, with the `.git` file git writes in it, and the
///   loose ref files of its branch and work-in-progress ref in the
///   repository's `.git`, must fit in [`PATH_MAX`] with any attempt number.
///
/// git's own ref-name rules (`git check-ref-format`) need no check: an
/// encoded id holds only ASCII letters, digits, `_`, `-` and `%XX`, so no
/// part starts with `.` or `-`, ends with `.lock`, or holds `..`, `@{`,
/// `//` or a character git refuses.
///
/// The error is the field at fault (`run_id`, `task_id` or `worktrees`)
/// and what to do.
pub fn unworkable(
    spec: &RepoSpec,
    run_id: &str,
    task_id: Option<&str>,
) -> Result<(), (&'static str, String)> {
    let run = component(run_id);
    if run.len() > NAME_MAX {
        return Err(("run_id", too_long_component(&run)));
    }
    // With no task yet, the shortest one a run could hold.
    let task = component(task_id.unwrap_or("x"));
    if task_id.is_some() && task.len() > NAME_MAX {
        return Err(("task_id", too_long_component(&task)));
    }
    let folder = worktree_path_of(&spec.worktrees, &run, &task, ATTEMPT_MAX);
    let refs = [
        format!("orch/{run}/{task}/{ATTEMPT_MAX}"),
        format!("wip/{run}/{task}/{ATTEMPT_MAX}"),
    ];
    let longest = [
        format!("{folder}/.git"),
        format!("{}/.git/logs/refs/heads/{}.lock", spec.repo, refs[0]),
        format!("{}/.git/logs/refs/orch/{}.lock", spec.repo, refs[1]),
    ]
    .into_iter()
    .max_by_key(String::len)
    .unwrap_or_default();
    if longest.len() >= PATH_MAX {
        let shown: String = longest.chars().take(60).collect();
        let (field, fix) = match task_id {
            Some(_) => ("task_id", "choose a shorter task id"),
            None => (
                "worktrees",
                "choose a worktrees folder with a shorter path, or a shorter run id",
            ),
        };
        return Err((
            field,
            format!(
                "makes a path for the attempts' worktrees of {} bytes ({shown}...), and a path holds at most {}; {fix}",
                longest.len(),
                PATH_MAX - 1
            ),
        ));
    }
    Ok(())
}

fn too_long_component(encoded: &str) -> String {
    format!(
        "becomes a folder and branch part of {} bytes ({}...): every character but ASCII letters, digits, `_` and `-` takes 3 bytes there, and a file name holds at most {NAME_MAX}; choose a shorter id",
        encoded.len(),
        &encoded[..encoded.len().min(40)],
    )
}

/// Whether two ids name the same worktree folders and branches on a file
/// system that ignores case (macOS's by default, Windows', a case-folded
/// Linux folder): the same once ASCII case is folded. Ids are ASCII, and
/// [`component`] keeps case and writes `%XX` in capitals, so comparing the
/// ids is comparing their components.
pub fn same_folder(a: &str, b: &str) -> bool {
    folder_key(a) == folder_key(b)
}

/// What [`same_folder`] compares: the id with ASCII case folded.
pub fn folder_key(id: &str) -> String {
    id.to_ascii_lowercase()
}

/// Where a worktree's folder is, and which folders on the way to it orch
/// must never reach through a symbolic link, when it makes the worktree and
/// every time after (looking, saving, removing): everything below the
/// folder the leader named. The leader names the repository, and may name
/// the worktrees folder (`--worktrees`); what a repository holds
/// (`.agents` committed as a link, say) was not named, so the default
/// worktrees folder, `REPO/.agents/worktrees`, is walked from the
/// repository. Links in the named folder's own path are the leader's
/// choice and are followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The folder the leader named: the worktrees folder, or the
    /// repository for the default one.
    pub named: String,
    /// The folders below it, one component each, down to the attempt's
    /// own (the last): each must be a folder, never a link, and is made
    /// when missing.
    pub below: Vec<String>,
    /// How many of `below` lead to the worktrees folder (0: it is `named`).
    pub worktrees_depth: usize,
    /// The worktrees folder is inside the repository: when orch makes it,
    /// it gets a `.gitignore` of `*`, so the leader's checkout never lists
    /// the worktrees.
    pub ignore: bool,
}

/// The [`Place`] of `worktree` under `spec`.
pub fn place(spec: &RepoSpec, worktree: &Worktree) -> Place {
    let root = |path: &str| match path.trim_end_matches('/') {
        "" => "/".to_owned(),
        trimmed => trimmed.to_owned(),
    };
    let worktrees = spec.worktrees.trim_end_matches('/');
    let own: Vec<String> = worktree
        .path
        .strip_prefix(worktrees)
        .unwrap_or(&worktree.path)
        .split('/')
        .filter(|part| !part.is_empty())
        .map(str::to_owned)
        .collect();
    let repo = spec.repo.trim_end_matches('/');
    let ignore = worktrees
        .strip_prefix(repo)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    if spec.worktrees_named || worktrees != default_worktrees(repo) {
        return Place {
            named: root(worktrees),
            below: own,
            worktrees_depth: 0,
            ignore,
        };
    }
    let mut below = vec![".agents".to_owned(), "worktrees".to_owned()];
    below.extend(own);
    Place {
        named: root(repo),
        below,
        worktrees_depth: 2,
        ignore,
    }
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
        Reserved = "reserved" : "Its attempt is being dispatched: git is making it, with no lock held, for a command that has not committed yet (one whose command stopped is undone by the next `orch dispatch`, `orch wait` or `orch worktree gc`).",
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
        if status == AttemptStatus::Reserved {
            return WorktreeState::Reserved;
        }
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
    place: &Place,
    status: AttemptStatus,
) -> Result<Tidied, WorkspaceError> {
    let wip = wip_ref(worktree);
    let look = workspace.inspect(worktree, place, &wip)?;
    match WorktreeState::of(status, &look) {
        WorktreeState::Uncommitted => {
            workspace.save(worktree, place, &wip)?;
            Ok(Tidied::Saved)
        }
        state if state.removable() => {
            workspace.remove(worktree, place)?;
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

    fn spec(repo: &str, worktrees: Option<&str>) -> RepoSpec {
        RepoSpec {
            repo: repo.into(),
            worktrees: worktrees.map_or_else(|| default_worktrees(repo), str::to_owned),
            base: "HEAD".into(),
            strict: false,
            worktrees_named: worktrees.is_some(),
        }
    }

    #[test]
    fn ids_that_could_never_be_a_worktree_are_named_with_their_field() {
        let s = spec("/repo", None);
        assert_eq!(unworkable(&s, "r", Some("api")), Ok(()));
        // 1 + 84 × 3 = 253 bytes fits; 1 + 85 × 3 = 256 does not.
        assert_eq!(
            unworkable(&s, "r", Some(&format!("a{}", ".".repeat(84)))),
            Ok(())
        );
        let field = |r: Result<(), (&'static str, String)>| r.err().map(|(f, _)| f);
        assert_eq!(
            field(unworkable(&s, "r", Some(&format!("a{}", ".".repeat(85))))),
            Some("task_id")
        );
        assert_eq!(
            field(unworkable(&s, &format!("a{}", "/".repeat(127)), None)),
            Some("run_id")
        );
        // Letters only: 128 bytes as they are.
        assert_eq!(
            unworkable(&s, &"r".repeat(128), Some(&"t".repeat(128))),
            Ok(())
        );
        let deep = spec("/repo", Some(&format!("/{}", "w".repeat(4080))));
        assert_eq!(field(unworkable(&deep, "r", None)), Some("worktrees"));
        let deep = spec("/repo", Some(&format!("/{}", "w".repeat(3850))));
        assert_eq!(unworkable(&deep, "r", Some("api")), Ok(()));
        assert_eq!(
            field(unworkable(
                &deep,
                "r",
                Some(&format!("a{}", ".".repeat(84)))
            )),
            Some("task_id")
        );
        assert!(same_folder("Api/x", "aPI/X") && !same_folder("api", "api2"));
    }

    #[test]
    fn the_default_worktrees_folder_is_walked_from_the_repository() {
        let wt = |s: &RepoSpec| Worktree {
            repo: s.repo.clone(),
            path: worktree_path(&s.worktrees, "r", "a/b", 2),
            branch: branch_name("r", "a/b", 2),
            base: "HEAD".into(),
            base_commit: "c0ffee".into(),
            left_out: Vec::new(),
            left_out_count: 0,
        };
        let default = spec("/repo", None);
        let place_of = place(&default, &wt(&default));
        assert_eq!(place_of.named, "/repo");
        assert_eq!(place_of.below, [".agents", "worktrees", "r", "a%2Fb", "2"]);
        assert_eq!((place_of.worktrees_depth, place_of.ignore), (2, true));
        // Named, even as the default path: used as named.
        let named = spec("/repo", Some("/repo/.agents/worktrees"));
        let place_of = place(&named, &wt(&named));
        assert_eq!(place_of.named, "/repo/.agents/worktrees");
        assert_eq!(place_of.below, ["r", "a%2Fb", "2"]);
        assert_eq!((place_of.worktrees_depth, place_of.ignore), (0, true));
        let outside = spec("/repo", Some("/srv/wt"));
        assert!(!place(&outside, &wt(&outside)).ignore);
        let sibling = spec("/repo", Some("/repo2/wt"));
        assert!(!place(&sibling, &wt(&sibling)).ignore);
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
