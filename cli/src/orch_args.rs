//! The `orch` command line: every command, flag and help text of the
//! leader's control plane, and how each turns into the engine's request.
//!
//! `orch` shares the `inbox` binary's global flags (`--db`, `--json`,
//! `--agent`), database discovery, JSON envelope and exit codes; its
//! subcommands are the engine's `orch-*` commands, grouped as people say
//! them (`orch run create` is `orch-run-create`). Flags are named like the
//! JSON fields they set (`--run` answers to `--run-id` too). Reading a plan
//! file is the host's share of input handling; whether a plan is valid is
//! the engine's to say. This module must never touch the database.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use inbox_engine::orch::council;
use inbox_engine::orch::model::RunStatus;
use inbox_engine::wire::*;
use inbox_engine::{EngineError, Priority, Request};

use crate::args::{CompletionsArgs, ManArgs, one_of, text};
use crate::fields::Notes;
use crate::request::read_text;
use inbox_host_native::Global;

const ROOT_HELP: &str = "\
orch is the leader's control plane over the same database as inbox: a run
holds a task graph; orch says what is ready, dispatches each attempt as an
inbox thread for its assignee, follows the thread (claimed, blocked, done,
failed), and applies review, retries with backoff, skipping and
cancellation. Workers never use orch: they use inbox on the threads it opens.

The leader's loop:
  orch run create --goal \"Ship the login page\"
  orch plan --file plan.json                   the whole task graph at once
  orch dispatch --all-ready                    one inbox thread per ready task
  orch wait                                    sleep until something needs you, then:
    orch answer T --summary \"...\"              a worker asked (blocked)
    orch accept T | orch reject T --reason ...   a task waits for review
    orch dispatch --all-ready                    tasks became ready
    orch retry T [--to AGENT]                    a task failed
  orch wait --after-event N                    resume from the cursor it printed
  orch status                                  the run at a glance

A council review (several reviewers on one subject, findings tallied):
  orch council --title \"...\" --diff-file d.diff --reviewer a,b,c [--ballot]
  orch council show                            the grouped, tallied report

--run may be left out: the only active run is meant (or, when none is
active, the newest). Output is for people unless --json is given: then
stdout is exactly one JSON object, as with inbox. Exit codes: 0 done, 10
nothing to do (wait timed out, nothing ready), 20 conflict (the task or run
has ended), 30 invalid input or transition, 40 not found, 50 storage error.

The database is --db, else $INBOX_DB, else the nearest .agents/coord.db
above the current folder; the leader is --agent, else $INBOX_AGENT.";

/// The `orch` command line.
#[derive(Debug, Parser)]
#[command(
    name = "orch",
    version,
    about = "The leader's control plane for AI agent teams: runs, task graphs, dispatch, review",
    long_about = ROOT_HELP,
    disable_help_subcommand = true,
    max_term_width = 100
)]
pub struct OrchCli {
    /// Flags every command takes.
    #[command(flatten)]
    pub global: Global,
    /// The command to run.
    #[command(subcommand)]
    pub command: OrchCommand,
}

// Every `orch` command.
#[doc(hidden)]
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum OrchCommand {
    /// Runs: create, list, cancel
    #[command(subcommand)]
    Run(RunCommand),
    /// Tasks one at a time: add, show
    #[command(subcommand)]
    Task(TaskCommand),
    /// Add a whole task graph from a JSON file, in one transaction
    #[command(
        long_about = "\
Add every task of a plan file to the run in one transaction: all or
nothing. The file is {\"tasks\": [...]} or just the array; each task has a
task_id, a title and an assignee, and optionally body, acceptance (a list of
criteria), needs (task ids of the run or the plan), priority, review (true:
the leader accepts each result) and a retry policy (max_attempts,
backoff_seconds, backoff_factor, max_backoff_seconds). Tasks may come in any
order. A plan with an unknown need, a repeated id or a cycle is refused as a
whole, naming the JSON path of the problem or the cycle.",
        after_help = "\
Examples:
  orch plan --file plan.json
  orch plan --run login --file - < plan.json

A plan file:
  {\"tasks\": [
    {\"task_id\": \"schema\", \"title\": \"Users table\", \"assignee\": \"db-worker\",
     \"acceptance\": [\"the migration runs twice\"]},
    {\"task_id\": \"api\", \"title\": \"Login API\", \"assignee\": \"backend\",
     \"needs\": [\"schema\"], \"review\": true}
  ]}"
    )]
    Plan(PlanArgs),
    /// The run at a glance: counts, what needs you, what is in flight
    #[command(
        long_about = "\
Show the run at a glance: its status and task counts, the tasks that need
the leader (ready, blocked, in review, failed), those in flight (dispatched,
running, waiting to retry) and those waiting on others, with what they wait
on. Always the current truth: what workers did since the last orch command
is taken into account, and nothing is changed by looking.",
        after_help = "\
Examples:
  orch status
  orch status --run login --json"
    )]
    Status(StatusArgs),
    /// List the tasks that can start now (priority, then age)
    #[command(
        long_about = "\
List the tasks whose needs are all done and that wait to be dispatched,
highest priority first, then in the order they were added. Exits 10 when
nothing is ready.",
        after_help = "\
Examples:
  orch ready
  orch ready --run login --json"
    )]
    Ready(ReadyArgs),
    /// Start attempts: open an inbox thread for each task's assignee
    #[command(
        long_about = "\
Start an attempt at one ready task (--task) or at every ready task
(--all-ready, in `orch ready` order, at most --limit): each opens an inbox
thread assigned to the task's assignee, with the task's title as subject and
its text, acceptance criteria, attempt number, run and task ids in the first
message. Workers find it with inbox fetch or claim --next. In a run with a
repository each attempt gets a git worktree: --task fails when git refuses
it and changes nothing; --all-ready dispatches every task it can and lists
those git refused, which stay ready with the reason (`orch status`).
Exits 10 when --all-ready dispatches nothing.",
        after_help = "\
Examples:
  orch dispatch --all-ready
  orch dispatch --task api --json"
    )]
    Dispatch(DispatchArgs),
    /// Accept a task in review: it is done
    #[command(after_help = "\
Examples:
  orch accept api
  orch accept api --summary \"Looks good\"")]
    Accept(AcceptArgs),
    /// Reject a task in review: a new attempt carries the reason
    #[command(
        long_about = "\
Reject the result of a task in review: its attempt is marked rejected and a
new attempt is dispatched to the same assignee; its thread carries the
reason (--reason, one line; details in --body) and the rejected result.",
        after_help = "\
Examples:
  orch reject api --reason \"Missing rate limiting\" --body \"Limit logins to 5 per minute per IP.\""
    )]
    Reject(RejectArgs),
    /// Answer a blocked task's question (its worker wakes)
    #[command(
        long_about = "\
Answer the question of a blocked task: the answer goes into its attempt's
thread, where the worker waiting in inbox wait-reply wakes, and the task
is running again.",
        after_help = "\
Examples:
  orch answer api --summary \"Use email and password for the MVP\""
    )]
    Answer(AnswerArgs),
    /// Try a failed task again (optionally with another assignee)
    #[command(
        long_about = "\
Start a new attempt at a failed task, now, whatever its retry policy says
(automatic retries have run out when a task is failed). The tasks skipped
because of it come back to pending, and a failed run is active again.",
        after_help = "\
Examples:
  orch retry api
  orch retry api --to backend-2"
    )]
    Retry(RetryArgs),
    /// Give a task to another agent; a live attempt is cancelled first
    #[command(
        long_about = "\
Give a task to another agent. If an attempt is under way, its thread is
cancelled first (the old worker's next command is refused) and a new
attempt is dispatched to the new assignee; otherwise the task just changes
hands.",
        after_help = "\
Examples:
  orch reassign api --to backend-2"
    )]
    Reassign(ReassignArgs),
    /// Cancel a task (--cascade: and skip the tasks that need it)
    #[command(
        long_about = "\
Cancel a task that has not ended: a live attempt's thread is cancelled (its
worker is fenced off). The tasks that need it, directly or through others,
are skipped; when there are any, say --cascade.",
        after_help = "\
Examples:
  orch cancel docs --reason \"Not needed after all\"
  orch cancel schema --cascade"
    )]
    Cancel(CancelTaskArgs),
    /// Wait until the run needs you (the leader's loop)
    #[command(
        long_about = "\
Block, without polling, until something in the run needs the leader: a task
ready, blocked or in review, an attempt or task failed, tasks skipped, the
run ended. Prints those events, the tasks that need the leader now, and
next_event_id: pass it as --after-event to the next wait. Without
--after-event it returns at once when a task already needs the leader. While
it waits it records what workers did and dispatches retries whose backoff
ended. Exits 10 on timeout.",
        after_help = "\
Examples:
  orch wait --timeout-seconds 600
  orch wait --after-event 42 --json"
    )]
    Wait(WaitArgs),
    /// The attempts' git worktrees: list them, tidy them up
    #[command(
        subcommand,
        long_about = "\
In a run with a repository (orch run create --repo), every attempt works in
a git worktree and on a branch of its own (orch/RUN/TASK/N), made from the
base at dispatch. When an attempt ends, whatever it left uncommitted
(untracked files too) is saved as a commit on refs/orch/wip/RUN/TASK/N and
a clean worktree is removed; its branch always stays. list shows every
attempt's worktree and where it is; gc does the tidying again for whatever
is left, removing exactly the clean ones.",
        after_help = "\
Examples:
  orch worktree list
  orch worktree gc --dry-run"
    )]
    Worktree(WorktreeCommand),
    /// Record what workers and the clock did (every orch write does this)
    #[command(after_help = "\
Examples:
  orch reconcile --run login")]
    Reconcile(ReconcileArgs),
    /// Council review: several reviewers on one subject, findings tallied
    #[command(
        long_about = "\
Start a council review of one subject: one orch task per seat (A, B, C,
...), each assigned to its reviewer and dispatched at once as its own inbox
thread, which carries the subject (title, body, files, diff, revision) and
the answer's shape. Reviewers are known to each other by seat letter only.
Each finishes its thread with `inbox done` and a council_review payload; a
payload of another shape is refused with the JSON path of the value at
fault, and the reviewer corrects it. --reviewer names agents (one seat
each) or role:NAME (whose members fill the seats the agents leave); --seats
defaults to one per reviewer named (at least 3 with a role). With --ballot, a second
round follows once every seat answered: its tasks become ready (orch wait
wakes), `orch dispatch --all-ready` starts them, and each seat votes on the
grouped findings. orch wait wakes with council_completed when every seat
has ended; `orch council show` is the grouped, tallied report. Reviewers
learn the shape from `orch skill council-review`.",
        after_help = "\
Examples:
  orch council --title \"Review the login API\" --diff-file change.diff \\
      --reviewer alice --reviewer bob --reviewer carol --ballot --id login-review
  orch council --title \"Review src/login.rs\" --file src/login.rs --revision 3f2c1e0 \\
      --body \"Is the lockout right?\" --reviewer role:reviewer --seats 3
  orch council show login-review"
    )]
    Council(CouncilArgs),
    /// Print (or install) the SKILL.md that teaches a leader orch (or reviewers a council)
    #[command(after_help = "\
Examples:
  orch skill
  orch skill --install ~/.claude/skills
  orch skill council-review            the reviewers' skill: how to answer a council")]
    Skill(OrchSkillArgs),
    /// Print the completion script for a shell: bash, zsh, fish, powershell, elvish
    #[command(
        long_about = "\
Print the script that teaches SHELL to complete orch's commands, flags and
values, generated from this binary's own command definitions, so it always
matches the orch installed. Install it once where the shell looks for
completions; run it again after an upgrade. Needs no database.",
        after_help = "\
Examples:
  orch completions bash > ~/.local/share/bash-completion/completions/orch
  orch completions zsh > ~/.zfunc/_orch           # a folder on $fpath, before compinit
  orch completions fish > ~/.config/fish/completions/orch.fish
  orch completions powershell | Out-String | Invoke-Expression   # in $PROFILE"
    )]
    Completions(CompletionsArgs),
    /// Print the man page, or write every command's page into a folder
    #[command(
        long_about = "\
Print the orch(1) man page (roff), generated from this binary's own command
definitions: the overview, the global options and the commands, each named
by its own page. With --dir, write that page and every command's
(orch-plan.1, orch-run-create.1, ...) into DIR, where `man orch-COMMAND`
finds them; a page already there is replaced, a symbolic link in its place
is replaced rather than followed. Needs no database.",
        after_help = "\
Examples:
  orch man | man -l -
  orch man --dir ~/.local/share/man/man1
  man orch-dispatch"
    )]
    Man(ManArgs),
}

// `orch skill`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct OrchSkillArgs {
    /// Which skill [default: orch, the leader's]
    #[arg(value_name = "SKILL", value_parser = ["orch", "council-review"])]
    pub name: Option<String>,
    /// Write it to DIR/<skill>/SKILL.md instead of printing it
    #[arg(long, value_name = "DIR")]
    pub install: Option<PathBuf>,
}

// `orch council` starts a council; `orch council show` reads one.
#[doc(hidden)]
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CouncilArgs {
    /// `show`, or none to start a council.
    #[command(subcommand)]
    pub command: Option<CouncilCommand>,
    /// What a new council reviews, and who.
    #[command(flatten)]
    pub start: CouncilStartArgs,
}

// `orch council show`.
#[doc(hidden)]
#[derive(Debug, Subcommand)]
pub enum CouncilCommand {
    /// A council's report: findings grouped and tallied, verdicts, votes
    #[command(
        long_about = "\
Show a council's report: the seats' findings grouped by code (the same
file and category with lines at most 3 apart, or the same topic and
category), each group with how many seats raised it, its highest and median
severity, the seats' verdicts and, with a ballot, the agree and disagree
votes; the verdict counts; every seat with its reviewer and status; and the
seats that have not answered or voted. The same answers always give the same
report. Without COUNCIL, the run's newest council.",
        after_help = "\
Examples:
  orch council show
  orch council show login-review --json"
    )]
    Show(CouncilShowArgs),
}

// `orch council` (start).
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct CouncilStartArgs {
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
    /// An id of your choosing, unique in the run [default: a new council_... id]
    #[arg(long, visible_alias = "council-id", value_name = "COUNCIL_ID")]
    pub id: Option<String>,
    /// What is reviewed, one line
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub title: Option<String>,
    /// What the reviewers should know: the request, the context
    #[arg(long, conflicts_with = "body_file", allow_hyphen_values = true, value_parser = text())]
    pub body: Option<String>,
    /// Read the body from a UTF-8 file (- for stdin)
    #[arg(long, value_name = "PATH")]
    pub body_file: Option<PathBuf>,
    /// A file under review, by path (repeat for several; its content is not sent)
    #[arg(long, visible_alias = "files", value_name = "PATH", allow_hyphen_values = true, value_parser = text())]
    pub file: Vec<String>,
    /// The change under review, as a diff
    #[arg(long, conflicts_with = "diff_file", allow_hyphen_values = true, value_parser = text())]
    pub diff: Option<String>,
    /// Read the diff from a UTF-8 file (- for stdin)
    #[arg(long, value_name = "PATH")]
    pub diff_file: Option<PathBuf>,
    /// The commit id or ref the review is about
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,
    /// A reviewer: an agent (one seat) or role:NAME, in seat order (repeat or comma-separate)
    #[arg(
        long,
        visible_alias = "reviewers",
        value_delimiter = ',',
        value_name = "AGENT"
    )]
    pub reviewer: Vec<String>,
    /// How many seats, 2 to 26 [default: one per reviewer, at least 3 with a role]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub seats: Option<u32>,
    /// Add a second round: every seat votes on the grouped findings
    #[arg(long)]
    pub ballot: bool,
}

// `orch council show`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct CouncilShowArgs {
    /// The council [default: the run's newest]
    #[arg(value_name = "COUNCIL_ID")]
    pub council: Option<String>,
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
}

// `orch run ...`.
#[doc(hidden)]
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum RunCommand {
    /// Start a run: the goal a task graph will serve
    #[command(after_help = "\
Examples:
  orch run create --goal \"Ship the login page\"
  orch run create --goal \"Ship the login page\" --id login --json")]
    Create(RunCreateArgs),
    /// List runs, newest first
    #[command(after_help = "\
Examples:
  orch run list
  orch run list --status active --json")]
    List(RunListArgs),
    /// Cancel a run and every task of it that has not ended
    #[command(after_help = "\
Examples:
  orch run cancel --run login --reason \"Priorities changed\"")]
    Cancel(RunCancelArgs),
}

/// `orch task ...`.
// Parsed once per process; boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum TaskCommand {
    /// Add one task to the run
    #[command(after_help = "\
Examples:
  orch task add --task api --title \"Login API\" --assignee backend --needs schema --review
  orch task add --task docs --title \"Document login\" --assignee writer --body-file docs.md \\
      --acceptance \"covers password reset\" --max-attempts 2")]
    Add(TaskAddArgs),
    /// One task: its attempts, its thread, what it waits on
    #[command(after_help = "\
Examples:
  orch task show api
  orch task show api --json")]
    Show(TaskShowArgs),
}

// `orch worktree ...`.
#[doc(hidden)]
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum WorktreeCommand {
    /// Every attempt's worktree: folder, branch, base and state
    #[command(
        long_about = "\
List every attempt's git worktree with where it is: live (its attempt is
on), uncommitted (ended with changes not saved yet), saved (ended with
changes saved on its refs/orch/wip/... ref; kept until committed or
discarded), commits (clean; its branch has commits HEAD lacks), merged
(clean; nothing unmerged), removed (the folder is gone, the branch stays) or
missing (its attempt is on but the folder is gone).",
        after_help = "\
Examples:
  orch worktree list
  orch worktree list --run login --json"
    )]
    List(WorktreeListArgs),
    /// Save uncommitted work of ended attempts, remove the clean worktrees
    #[command(
        long_about = "\
Tidy the worktrees of ended attempts: save what is uncommitted (untracked
files too) as a commit on the attempt's refs/orch/wip/... ref, then remove
exactly the clean worktrees, the way git worktree remove does without
--force; their branches stay, for the leader to merge. A live attempt's
worktree is never touched, nor one with uncommitted changes.",
        after_help = "\
Examples:
  orch worktree gc --dry-run
  orch worktree gc --run login --json"
    )]
    Gc(WorktreeGcArgs),
}

// `orch worktree list`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct WorktreeListArgs {
    /// The run.
    #[command(flatten)]
    pub run: WorktreeRunArg,
}

// `orch worktree gc`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct WorktreeGcArgs {
    /// The run.
    #[command(flatten)]
    pub run: WorktreeRunArg,
    /// Say what would be saved and removed, and do nothing
    #[arg(long)]
    pub dry_run: bool,
}

// `--run` of the worktree commands, which default to every run.
#[doc(hidden)]
#[derive(Debug, Args, Default)]
pub struct WorktreeRunArg {
    /// Only this run's [default: every run with a repository]
    #[arg(long, visible_alias = "run-id", value_name = "RUN_ID")]
    pub run: Option<String>,
}

// `--run`.
#[doc(hidden)]
#[derive(Debug, Args, Default)]
pub struct RunArg {
    /// The run [default: the only active run, else the newest]
    #[arg(long, visible_alias = "run-id", value_name = "RUN_ID")]
    pub run: Option<String>,
}

// `orch run create`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct RunCreateArgs {
    /// What the run is for, one line
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub goal: Option<String>,
    /// An id of your choosing [default: a new run_... id]
    #[arg(long, visible_alias = "run-id", value_name = "RUN_ID")]
    pub id: Option<String>,
    /// A git repository the run's attempts work in, each in a worktree and
    /// on a branch of its own
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
    /// The folder orch makes the worktrees in, used as named, symbolic links
    /// and all [default: REPO/.agents/worktrees, never reached through a link]
    #[arg(long, value_name = "DIR", requires = "repo")]
    pub worktrees: Option<PathBuf>,
    /// The revision attempts start from, resolved at each dispatch [default: HEAD]
    #[arg(
        long,
        value_name = "REV",
        requires = "repo",
        allow_hyphen_values = true
    )]
    pub base: Option<String>,
    /// Refuse to dispatch while the repository's checkout has uncommitted
    /// changes a worktree would leave out
    #[arg(long, requires = "repo")]
    pub strict: bool,
}

// `orch run list`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct RunListArgs {
    /// Only runs in these statuses, comma-separated
    #[arg(long, value_delimiter = ',', value_parser = one_of::<RunStatus>())]
    pub status: Vec<RunStatus>,
    /// Only runs this leader created (the global --agent is not a filter here)
    #[arg(long, value_name = "AGENT")]
    pub created_by: Option<String>,
    /// At most this many [default: 50]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `orch run cancel`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct RunCancelArgs {
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
    /// Why, one line; written to every cancelled thread
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub reason: Option<String>,
}

// A task's description, as `orch task add` takes it (a plan file has the
// same fields).
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct TaskAddArgs {
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
    /// The task's id, unique in the run
    #[arg(long, visible_alias = "task-id", value_name = "TASK_ID")]
    pub task: Option<String>,
    /// One line that says what the work is
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub title: Option<String>,
    /// The long form, sent to the worker
    #[arg(long, conflicts_with = "body_file", allow_hyphen_values = true, value_parser = text())]
    pub body: Option<String>,
    /// Read the body from a UTF-8 file (- for stdin)
    #[arg(long, value_name = "PATH")]
    pub body_file: Option<PathBuf>,
    /// A criterion the result must meet (repeat for several)
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub acceptance: Vec<String>,
    /// Who does it: the agent its threads are assigned to
    #[arg(long, value_name = "AGENT")]
    pub assignee: Option<String>,
    /// Queue order [default: normal]
    #[arg(long, value_parser = one_of::<Priority>())]
    pub priority: Option<Priority>,
    /// Tasks that must be done first (comma-separated or repeated)
    #[arg(long, value_delimiter = ',', value_name = "TASK_ID")]
    pub needs: Vec<String>,
    /// Attempts in all, the first included [default: 3]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_attempts: Option<u32>,
    /// Wait before the second attempt [default: 30]
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub backoff_seconds: Option<u64>,
    /// Each later wait is the one before times this [default: 2]
    #[arg(long, value_name = "FACTOR", allow_negative_numbers = true)]
    pub backoff_factor: Option<f64>,
    /// Longest wait between attempts [default: 600]
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub max_backoff_seconds: Option<u64>,
    /// A finished attempt waits for orch accept
    #[arg(long)]
    pub review: bool,
    /// In a run with a repository: the revision its attempts start from,
    /// or task:ID for the accepted branch of a task it needs [default: the run's]
    #[arg(long, value_name = "REV", allow_hyphen_values = true)]
    pub base: Option<String>,
}

// `orch task show`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct TaskShowArgs {
    /// The task
    #[arg(value_name = "TASK_ID")]
    pub task: Option<String>,
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
}

// `orch plan`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
    /// The plan: a JSON file (- for stdin)
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
}

// `orch status`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
    /// At most this many tasks in each list [default: 50]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `orch ready`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ReadyArgs {
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
    /// At most this many [default: 50]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `orch dispatch`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct DispatchArgs {
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
    /// The ready task to dispatch
    #[arg(long, visible_alias = "task-id", value_name = "TASK_ID")]
    pub task: Option<String>,
    /// Dispatch every ready task instead
    #[arg(long)]
    pub all_ready: bool,
    /// With --all-ready: dispatch at most this many [default: 1000]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// The task a decision is about, and its run.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct TaskTarget {
    /// The task
    #[arg(value_name = "TASK_ID")]
    pub task: Option<String>,
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
}

// `orch accept`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct AcceptArgs {
    /// The task and its run.
    #[command(flatten)]
    pub target: TaskTarget,
    /// A note for the record, one line
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub summary: Option<String>,
}

// `orch reject`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct RejectArgs {
    /// The task and its run.
    #[command(flatten)]
    pub target: TaskTarget,
    /// Why the result is not accepted, one line (the next attempt reads it)
    #[arg(long, visible_alias = "summary", allow_hyphen_values = true, value_parser = text())]
    pub reason: Option<String>,
    /// Details for the next attempt
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub body: Option<String>,
}

// `orch answer`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The task and its run.
    #[command(flatten)]
    pub target: TaskTarget,
    /// The answer, one line
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub summary: Option<String>,
    /// The long form
    #[arg(long, conflicts_with = "body_file", allow_hyphen_values = true, value_parser = text())]
    pub body: Option<String>,
    /// Read the body from a UTF-8 file (- for stdin)
    #[arg(long, value_name = "PATH")]
    pub body_file: Option<PathBuf>,
}

// `orch retry`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The task and its run.
    #[command(flatten)]
    pub target: TaskTarget,
    /// Give the new attempt to this agent
    #[arg(long, value_name = "AGENT")]
    pub to: Option<String>,
}

// `orch reassign`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ReassignArgs {
    /// The task and its run.
    #[command(flatten)]
    pub target: TaskTarget,
    /// The new assignee
    #[arg(long, value_name = "AGENT")]
    pub to: Option<String>,
}

// `orch cancel`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct CancelTaskArgs {
    /// The task and its run.
    #[command(flatten)]
    pub target: TaskTarget,
    /// Why, one line
    #[arg(long, visible_alias = "summary", allow_hyphen_values = true, value_parser = text())]
    pub reason: Option<String>,
    /// Also skip the tasks that need it
    #[arg(long)]
    pub cascade: bool,
}

// `orch wait`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
    /// Wake on actionable events after this one (the last wait's next_event_id)
    #[arg(long, value_name = "EVENT_ID", allow_negative_numbers = true)]
    pub after_event: Option<u64>,
    /// Give up after this long; exit 10 [default: 300]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub timeout_seconds: Option<u64>,
    /// At most this many events [default: 100]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `orch reconcile`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The run.
    #[command(flatten)]
    pub run: RunArg,
}

/// The largest plan file `orch plan` reads (64 MiB): ten thousand tasks
/// with long bodies, and a stop for `--file /dev/zero`.
const PLAN_MAX_BYTES: usize = 64 << 20;

impl OrchCommand {
    /// The engine request these arguments make, or `None` for the tools
    /// that run in the CLI alone (`skill`, `completions`, `man`).
    pub(crate) fn request(
        self,
        agent: Option<String>,
        _notes: &mut Notes,
    ) -> Option<Result<Request, EngineError>> {
        let decide = |target: TaskTarget, agent: Option<String>| OrchTaskRequest {
            agent,
            run_id: target.run.run,
            task_id: target.task,
            ..OrchTaskRequest::default()
        };
        let request = match self {
            OrchCommand::Skill(_) | OrchCommand::Completions(_) | OrchCommand::Man(_) => {
                return None;
            }
            OrchCommand::Run(RunCommand::Create(a)) => run_create(a, agent),
            OrchCommand::Worktree(WorktreeCommand::List(a)) => {
                Ok(Request::OrchWorktreeList(OrchWorktreeListRequest {
                    run_id: a.run.run,
                }))
            }
            OrchCommand::Worktree(WorktreeCommand::Gc(a)) => {
                Ok(Request::OrchWorktreeGc(OrchWorktreeGcRequest {
                    run_id: a.run.run,
                    dry_run: a.dry_run,
                }))
            }
            OrchCommand::Run(RunCommand::List(a)) => Ok(Request::OrchRunList(OrchRunListRequest {
                agent: a.created_by,
                status: a.status,
                limit: a.limit,
            })),
            OrchCommand::Run(RunCommand::Cancel(a)) => {
                Ok(Request::OrchRunCancel(OrchRunCancelRequest {
                    agent,
                    run_id: a.run.run,
                    reason: a.reason,
                }))
            }
            OrchCommand::Task(TaskCommand::Add(a)) => task_add(a, agent),
            OrchCommand::Task(TaskCommand::Show(a)) => {
                Ok(Request::OrchTaskShow(OrchTaskShowRequest {
                    run_id: a.run.run,
                    task_id: a.task,
                }))
            }
            OrchCommand::Plan(a) => plan(a, agent),
            OrchCommand::Status(a) => Ok(Request::OrchStatus(OrchStatusRequest {
                run_id: a.run.run,
                limit: a.limit,
            })),
            OrchCommand::Ready(a) => Ok(Request::OrchReady(OrchReadyRequest {
                run_id: a.run.run,
                limit: a.limit,
            })),
            OrchCommand::Dispatch(a) => Ok(Request::OrchDispatch(OrchDispatchRequest {
                agent,
                run_id: a.run.run,
                task_id: a.task,
                all_ready: a.all_ready,
                limit: a.limit,
            })),
            OrchCommand::Accept(a) => Ok(Request::OrchAccept(OrchTaskRequest {
                summary: a.summary,
                ..decide(a.target, agent)
            })),
            OrchCommand::Reject(a) => Ok(Request::OrchReject(OrchTaskRequest {
                summary: a.reason,
                body: a.body,
                ..decide(a.target, agent)
            })),
            OrchCommand::Answer(a) => answer(a, agent, decide),
            OrchCommand::Retry(a) => Ok(Request::OrchRetry(OrchTaskRequest {
                to: a.to,
                ..decide(a.target, agent)
            })),
            OrchCommand::Reassign(a) => Ok(Request::OrchReassign(OrchTaskRequest {
                to: a.to,
                ..decide(a.target, agent)
            })),
            OrchCommand::Cancel(a) => Ok(Request::OrchCancel(OrchTaskRequest {
                summary: a.reason,
                cascade: a.cascade,
                ..decide(a.target, agent)
            })),
            OrchCommand::Wait(a) => Ok(Request::OrchWait(OrchWaitRequest {
                run_id: a.run.run,
                after_event: a.after_event,
                timeout_seconds: a.timeout_seconds,
                limit: a.limit,
            })),
            OrchCommand::Reconcile(a) => Ok(Request::OrchReconcile(OrchReconcileRequest {
                run_id: a.run.run,
            })),
            OrchCommand::Council(CouncilArgs {
                command: Some(CouncilCommand::Show(a)),
                ..
            }) => Ok(Request::OrchCouncilShow(OrchCouncilShowRequest {
                run_id: a.run.run,
                council_id: a.council,
            })),
            OrchCommand::Council(a) => council(a.start, agent),
        };
        Some(request)
    }
}

/// A path given on the command line, absolute (from the current folder),
/// as the engine takes repository and worktree folders.
fn absolute(path: &std::path::Path) -> Result<String, EngineError> {
    let absolute = std::path::absolute(path).map_err(|e| EngineError::InvalidValue {
        field: "repo".into(),
        problem: format!("{}: {e}", path.display()),
    })?;
    absolute
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| EngineError::InvalidValue {
            field: "repo".into(),
            problem: format!("{} is not valid UTF-8", absolute.display()),
        })
}

fn run_create(a: RunCreateArgs, agent: Option<String>) -> Result<Request, EngineError> {
    Ok(Request::OrchRunCreate(OrchRunCreateRequest {
        agent,
        run_id: a.id,
        goal: a.goal,
        repo: a.repo.as_deref().map(absolute).transpose()?,
        worktrees: a.worktrees.as_deref().map(absolute).transpose()?,
        base: a.base,
        strict: a.strict,
    }))
}

fn task_add(a: TaskAddArgs, agent: Option<String>) -> Result<Request, EngineError> {
    let body = match &a.body_file {
        Some(path) => Some(read_text(
            "--body-file",
            "body",
            path,
            inbox_engine::validate::BODY_MAX_BYTES,
        )?),
        None => a.body,
    };
    let task = TaskSpec {
        task_id: a.task,
        title: a.title,
        body,
        acceptance: a.acceptance,
        assignee: a.assignee,
        priority: a.priority,
        needs: a.needs,
        max_attempts: a.max_attempts,
        backoff_seconds: a.backoff_seconds,
        backoff_factor: a.backoff_factor,
        max_backoff_seconds: a.max_backoff_seconds,
        review: a.review.then_some(true),
        base: a.base,
    };
    Ok(Request::OrchTaskAdd(OrchTaskAddRequest {
        agent,
        run_id: a.run.run,
        task: Some(task),
    }))
}

/// `orch council`: the body and diff may come from files.
fn council(a: CouncilStartArgs, agent: Option<String>) -> Result<Request, EngineError> {
    let body = match &a.body_file {
        Some(path) => Some(read_text(
            "--body-file",
            "body",
            path,
            council::BODY_MAX_BYTES,
        )?),
        None => a.body,
    };
    let diff = match &a.diff_file {
        Some(path) => Some(read_text(
            "--diff-file",
            "diff",
            path,
            council::DIFF_MAX_BYTES,
        )?),
        None => a.diff,
    };
    Ok(Request::OrchCouncil(OrchCouncilRequest {
        agent,
        run_id: a.run.run,
        council_id: a.id,
        title: a.title,
        body,
        files: a.file,
        diff,
        revision: a.revision,
        reviewers: a.reviewer,
        seats: a.seats,
        ballot: a.ballot,
    }))
}

fn answer(
    a: AnswerArgs,
    agent: Option<String>,
    decide: impl FnOnce(TaskTarget, Option<String>) -> OrchTaskRequest,
) -> Result<Request, EngineError> {
    let body = match &a.body_file {
        Some(path) => Some(read_text(
            "--body-file",
            "body",
            path,
            inbox_engine::validate::BODY_MAX_BYTES,
        )?),
        None => a.body,
    };
    Ok(Request::OrchAnswer(OrchTaskRequest {
        summary: a.summary,
        body,
        ..decide(a.target, agent)
    }))
}

/// `orch plan --file`: the file's tasks, each decoded on its own so that a
/// problem is reported at its JSON path (`tasks[3]: unknown field ...`).
fn plan(a: PlanArgs, agent: Option<String>) -> Result<Request, EngineError> {
    let Some(path) = a.file else {
        return Err(EngineError::MissingField {
            field: "file".into(),
            hint: "give the plan file: orch plan --file plan.json (see orch plan --help)".into(),
        });
    };
    let text = read_text("--file", "file", &path, PLAN_MAX_BYTES)?;
    let shown = path.display();
    let invalid = |problem: String| EngineError::InvalidRequest {
        message: format!("{shown}: {problem}"),
    };
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
    let items = match value {
        serde_json::Value::Array(items) => items,
        serde_json::Value::Object(mut object)
            if object.len() == 1 && object.contains_key("tasks") =>
        {
            match object.remove("tasks") {
                Some(serde_json::Value::Array(items)) => items,
                _ => return Err(invalid("`tasks` must be an array of tasks".into())),
            }
        }
        _ => {
            return Err(invalid(
                "a plan is {\"tasks\": [...]} or an array of tasks, and nothing else".into(),
            ));
        }
    };
    let tasks = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            // The path inside the task too: `tasks[0].needs[1]: invalid type`.
            serde_path_to_error::deserialize::<_, TaskSpec>(item).map_err(|e| {
                let mut inner = e.path().to_string();
                let problem = e.into_inner().to_string();
                // An unknown field's path ends in the field, which the
                // problem names already.
                if problem.starts_with("unknown field") {
                    inner = inner
                        .rsplit_once('.')
                        .map_or(String::new(), |(at, _)| at.to_owned());
                }
                let at = if inner == "." || inner.is_empty() {
                    format!("tasks[{i}]")
                } else {
                    format!("tasks[{i}].{inner}")
                };
                invalid(format!("{at}: {problem}"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Request::OrchPlan(OrchPlanRequest {
        agent,
        run_id: a.run.run,
        tasks,
    }))
}
