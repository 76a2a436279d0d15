//! The command line: every command, flag and help text of `inbox`.
//!
//! Flags are named as in the specification (`--thread`, `--from`,
//! `--lease-seconds`); each also answers to its JSON field name where that
//! differs (`--thread-id`, `--from-agent`), so the wire format and the command
//! line never disagree on what a thing is called. Help is user interface:
//! it is snapshot-tested, and every frequent command carries examples that
//! can be copied as they are. This module must never touch the database.

use std::path::PathBuf;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use inbox_board::ServeArgs;
use inbox_engine::{AgentRegistration, AgentTokens, Kind, Priority, Status, Timestamp, Vocabulary};
use inbox_host_native::Global;
use inbox_sqlite::Durability;

const ROOT_HELP: &str = "\
inbox is the durable coordination bus of an AI agent team. A leader opens a
thread for each task; a worker claims it with a lease, reports progress, asks
when blocked and waits for the answer, then finishes with done or fail.
Everything lives in one SQLite file that every agent process shares.

The worker loop:
  inbox fetch --agent ME                         see work you could claim
  inbox claim --agent ME --next                  take the lease: now it is yours;
                                                 note its lease_token (T)
  inbox update --agent ME --thread THR --lease-token T --status in_progress --summary \"...\"
  inbox update --agent ME --thread THR --lease-token T --status blocked --summary \"question?\"
  inbox wait-reply --agent ME --thread THR --lease-token T   sleep until the answer arrives
  inbox done --agent ME --thread THR --lease-token T --summary \"what you did\"   (or fail)

Pass the token to every command about the thread: if your lease ran out and
another process took the thread over, the command is refused with lease_lost
instead of acting on work that is no longer yours.

Leaders open threads with send, inspect with list, show and watch, answer
with reply and stop work with cancel. Agent runtimes that speak MCP (Claude
Code, Codex, VS Code) get all of this as tools from `inbox mcp --agent ME`.

Output is for people unless --json is given: then stdout is exactly one JSON
object, {\"ok\": true, \"command\": ..., ...} or {\"ok\": false, \"error\":
{\"code\", \"message\"}}. Exit codes: 0 done, 10 nothing to do (empty fetch,
wait timed out), 20 conflict (lease held or lost), 30 invalid input or
transition, 40 not found, 50 storage error.

The database is --db, else $INBOX_DB, else the nearest .agents/coord.db
above the current folder (create it with `inbox init`).";

/// The `inbox` command line.
#[derive(Debug, Parser)]
#[command(
    name = "inbox",
    version,
    about = "The durable coordination bus for AI agent teams",
    long_about = ROOT_HELP,
    disable_help_subcommand = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Flags every command takes.
    #[command(flatten)]
    pub global: Global,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Defines [`Command`], the subcommands, from three lists: the commands the
/// engine runs (each variant named like the engine's `Request` variant, its
/// arguments turned into that request's fields by
/// [`crate::fields::Fields`]), groups of them under one word (`agent
/// register`: each subcommand a request named `agent-register`, built by
/// [`crate::fields::Group`]) and the tools that run in the CLI alone.
/// The list here is the only list of commands in this crate.
macro_rules! command_line {
    (
        engine: { $($(#[$meta:meta])* $variant:ident($args:ident),)+ }
        groups: { $($(#[$group_meta:meta])* $group:ident($group_args:ident),)+ }
        tools: { $($(#[$tool_meta:meta])* $tool:ident($tool_args:ident),)+ }
    ) => {
        /// Every command.
        #[derive(Debug, Subcommand)]
#[command(defer = true)]
        pub enum Command {
            $($(#[$meta])* $variant($args),)+
            $($(#[$group_meta])* $group($group_args),)+
            $($(#[$tool_meta])* $tool($tool_args),)+
        }

        impl Command {
            /// The engine request these arguments make, or `None` for a
            /// tool that runs in the CLI alone.
            pub(crate) fn request(
                self,
                agent: Option<String>,
                notes: &mut crate::fields::Notes,
            ) -> Option<Result<inbox_engine::Request, inbox_engine::EngineError>> {
                use crate::fields::{Fields, Group};
                match self {
                    $(Command::$variant(args) => {
                        Some(args.fields(agent, notes).map(inbox_engine::Request::$variant))
                    })+
                    $(Command::$group(args) => Some(args.request(agent, notes)),)+
                    $(Command::$tool(_) => None,)+
                }
            }
        }
    };
}

command_line! {
    engine: {
    /// Create the database (or upgrade it) and set its durability
    #[command(
        long_about = "\
Create the database file (and its folder) if needed, with owner-only
permissions, create or upgrade its schema and switch it to WAL mode. Safe to
run again. Other commands never create a database, so a typo in --db fails
loudly instead of starting an empty bus.",
        after_help = "\
Examples:
  inbox init
  inbox init --db .agents/coord.db --durability full"
    )]
    Init(InitArgs),

    /// Open a thread for an agent, or add a message to one
    #[command(
        long_about = "\
Open a new thread for an agent: without --thread, it creates the thread
(status pending, assigned to --to) with its first message, a task unless
--kind says otherwise. With --thread, it adds a message to that thread.
The leader's way to hand out work.",
        after_help = "\
Examples:
  inbox send --from lead --to backend-worker --subject \"Post CRUD routes\" --task T4
  inbox send --from lead --to backend-worker --subject \"Fix flaky test\" --priority high \\
      --body-file task.md --artifact tests/flaky.log --artifact-kind log
  inbox send --from lead --thread thr_01JH... --summary \"Also cover DELETE\""
    )]
    Send(SendArgs),

    /// List threads you could claim now (claims nothing)
    #[command(
        long_about = "\
List the threads --agent could claim right now: assigned to it, with no live
lease and attempts left, high priority first, then oldest. fetch never
changes anything, not even a read cursor: it is safe to run in a loop. A
thread whose lease ran out is a candidate again. To see every thread, claimed
or finished, use list. Exits 10 when there is nothing to claim.",
        after_help = "\
Examples:
  inbox fetch --agent backend-worker --json
  inbox fetch --agent backend-worker --status pending,blocked --limit 5
  inbox fetch --agent backend-worker --unread"
    )]
    Fetch(FetchArgs),

    /// Take the lease on a thread: the only way to own work
    #[command(
        long_about = "\
Take the lease on a thread assigned to --agent: the one named by --thread, or
with --next the first one fetch would list. Only claim grants ownership, and
only one live lease exists per thread: claiming a held thread fails with
lease_conflict (exit 20) whoever asks, even under the same agent name. --next
picks and leases in one step, so workers sharing a queue never collide; it
exits 10 when nothing is claimable. The answer carries the lease token: pass it
as --lease-token to later commands to be fenced off for sure if another process
claims the thread after your lease runs out.",
        after_help = "\
Examples:
  inbox claim --agent backend-worker --next --json
  inbox claim --agent backend-worker --thread thr_01JH... --lease-seconds 900 --json"
    )]
    Claim(ClaimArgs),

    /// Extend your lease from now
    #[command(
        long_about = "\
Extend your lease so it runs --lease-seconds from now (default: its current
length). Every update and reply from the holder also renews it, and a holder
blocked in wait-reply is renewed automatically; use renew during long silent
work.",
        after_help = "\
Examples:
  inbox renew --agent backend-worker --thread thr_01JH... --lease-token 1"
    )]
    Renew(RenewArgs),

    /// Report progress, or block on a question
    #[command(
        long_about = "\
Report progress on a thread you hold. --status in_progress says you are
working; --status blocked says you cannot go on without an answer, and the
summary must say exactly what is missing. Then wait for the answer with
wait-reply instead of sleeping.",
        after_help = "\
Examples:
  inbox update --agent backend-worker --thread thr_01JH... --lease-token 1 --status in_progress \\
      --summary \"Implementing post CRUD routes\"
  inbox update --agent backend-worker --thread thr_01JH... --lease-token 1 --status blocked \\
      --summary \"Need auth decision\" \\
      --payload-json '{\"question\":\"Should admin auth use email/password in MVP?\"}'"
    )]
    Update(UpdateArgs),

    /// Add a message inside a thread (an answer unblocks it)
    #[command(
        long_about = "\
Add a message inside an existing thread: an answer to a blocked worker (the
default kind; it sends the thread back to work), a question, progress or a
control instruction. The recipient defaults to the other party.",
        after_help = "\
Examples:
  inbox reply --from lead --to backend-worker --thread thr_01JH... --kind answer \\
      --summary \"Use email/password for MVP\" \\
      --body \"Use a simple credential flow for the first iteration.\""
    )]
    Reply(ReplyArgs),

    /// Finish a thread you hold, with its result
    #[command(
        long_about = "\
Finish a thread you hold: records a result message, releases the lease and
makes the thread done for good. The summary says what was achieved; put the
details in --body or --body-file and attach files with --artifact.",
        after_help = "\
Examples:
  inbox done --agent backend-worker --thread thr_01JH... --lease-token 1 \\
      --summary \"Post CRUD implemented\" \\
      --body-file result.md --artifact src/posts.rs --artifact-kind patch"
    )]
    Done(FinishArgs),

    /// Finish a thread you hold as failed
    #[command(
        long_about = "\
Give up on a thread you hold: records a result message saying why, releases
the lease and makes the thread failed for good. Retrying is the leader's
decision, not the worker's.",
        after_help = "\
Examples:
  inbox fail --agent backend-worker --thread thr_01JH... --lease-token 1 \\
      --summary \"Schema migration needs DBA access\""
    )]
    Fail(FinishArgs),

    /// Stop a thread that has not finished
    #[command(
        long_about = "\
Stop a thread that has not finished, whoever holds it: records a control
message with the reason and releases any lease. A worker waiting in
wait-reply wakes with that message.",
        after_help = "\
Examples:
  inbox cancel --agent lead --thread thr_01JH... --reason \"Superseded by T9\""
    )]
    Cancel(CancelArgs),

    /// List threads by status, creator or assignee (the leader's view)
    #[command(
        long_about = "\
List threads by status, creator, assignee, run or task, newest first.
Unlike fetch, which shows only what an agent could claim now, list shows
every thread that matches, whoever holds it and however it ended. With
--agent, the threads that agent created or is assigned. To follow activity
as it happens, use watch.",
        after_help = "\
Examples:
  inbox list --status blocked
  inbox list --agent lead --status pending,claimed,in_progress,blocked
  inbox list --run R7 --json"
    )]
    List(ListArgs),

    /// Show one thread's whole history (the thread-history command)
    #[command(
        long_about = "\
The thread-history command: show one thread with its full message history,
oldest first, each message with its artifacts. With --mark-read, moves
--agent's read cursor to the newest message, so fetch --unread stops listing
the thread until something new arrives.",
        after_help = "\
Examples:
  inbox show --thread thr_01JH...
  inbox show --agent backend-worker --thread thr_01JH... --mark-read --json"
    )]
    Show(ShowArgs),

    /// Wait for activity on all your threads (the leader's wait)
    #[command(
        long_about = "\
Block until something happens on any thread --agent created or is assigned
(every thread without --agent), then print those events. --status keeps the
events that leave a thread in one of those statuses; --kinds keeps those that
write a message of one of those kinds (result,question: wake when a task is
finished or a worker asks, not on progress). wait-reply follows one thread
and returns one message; watch follows many threads and returns events. It
starts after the latest event unless --after-event says where; resume from
the printed next_event_id. Exits 10 on timeout.",
        after_help = "\
Examples:
  inbox watch --agent lead --status blocked,done,failed --timeout-seconds 600
  inbox watch --agent lead --kinds result,question --json
  inbox watch --agent lead --after-event 127 --json"
    )]
    Watch(WatchArgs),

    /// Wait for a reply in one thread (the worker's wait)
    #[command(
        name = "wait-reply",
        long_about = "\
Block until a reply arrives in one thread, then print it: the normal wait of
a blocked worker, instead of sleeping. A reply is a message of one of --kinds
(answer, control, result) written by someone else. Without a cursor it starts
after your own last message in the thread, so an answer that came in between
your question and this wait is not missed. While you hold the thread's lease,
waiting keeps it alive: exactly the lease you held when the wait began (the
one --lease-token names, or else the one your agent name held); if another
process takes the thread over, the wait ends with lease_lost (exit 20).
Exits 10 on timeout.",
        after_help = "\
Examples:
  inbox wait-reply --agent backend-worker --thread thr_01JH... --lease-token 1 --timeout-seconds 1800 --json
  inbox wait-reply --agent lead --thread thr_01JH... --kinds result
  inbox wait-reply --thread thr_01JH... --after-event 51"
    )]
    WaitReply(WaitReplyArgs),

    /// Read your mailbox: new messages to you, your roles or everyone
    #[command(
        long_about = "\
The mailbox view: the messages addressed to --agent, to its roles
(role:NAME) or to everyone (broadcast), across all threads, oldest first,
in one call. Only unread ones unless --include-read: a message is unread
while it comes after your read cursor in its thread. Reading consumes
nothing and moves no cursor; mark what you handled with mark-read (or show
--mark-read). Resume from the printed next_event_id with --after-event.
Exits 10 when there is nothing to read.",
        after_help = "\
Examples:
  inbox read --agent reviewer-1 --json
  inbox read --agent lead --since 2026-11-25T09:00:00Z --include-read
  inbox mark-read --agent reviewer-1 --through-event 212"
    )]
    Read(ReadArgs),

    /// Mark mailbox messages read (by id, or all up to an event)
    #[command(
        long_about = "\
Mark messages read for --agent: the ones named by --message-ids, or every
message of its mailbox up to --through-event (the next_event_id a read
printed). Marking moves the agent's read cursor in each message's thread to
that message, so earlier messages of the thread count as read too, and
fetch --unread and show agree with it. Nothing is deleted.",
        after_help = "\
Examples:
  inbox mark-read --agent reviewer-1 --message-ids msg_01JH...,msg_01JJ...
  inbox mark-read --agent reviewer-1 --through-event 212 --json"
    )]
    MarkRead(MarkReadArgs),

    /// Show or change the database-wide settings: agent tokens, registration, retention
    #[command(
        long_about = "\
Show the settings every process applies to this database, and change the
ones given. --agent-tokens required makes every write or wait act as a
registered agent and carry its token (--agent-token-file, or
$INBOX_AGENT_TOKEN_FILE or $INBOX_AGENT_TOKEN): agent register prints an
agent's token once, and only its hash is stored. The first agent to
register then joins freely (the team's lead); every later one, and one
registered before tokens, is registered with the token of a registered
agent, and so is every change of a setting while tokens are required.
--agent-registration required lets only registered agents act and receive:
a name nobody registered is refused as the acting agent
(agent_not_registered) and as an address (unknown_recipient, which names
the closest registered names); a role must have a registered member. The
retention limits are what gc removes by; with --auto-gc on, writes remove
it as they go, a few threads at a time, so the file stops growing.",
        after_help = "\
Examples:
  inbox settings
  inbox settings --agent-tokens required
  inbox settings --agent-registration required --agent-token-file lead.token
  inbox settings --auto-gc on --keep-days 7 --keep-messages 5000 --keep-read-hours 24"
    )]
    Settings(SettingsArgs),

    /// Remove finished threads past the retention limits
    #[command(
        long_about = "\
Remove what the retention limits allow, each thread whole (its messages,
artifacts' records, events and read cursors): finished threads (done,
failed, cancelled; those of an orch run only once the run succeeded or was
cancelled) and broadcasts every agent they reach has read. First those read
by everyone they are for and idle for more than --keep-read-hours, then
those idle for more than --keep-days, then, while the database holds more
than --keep-messages messages, the oldest. What nobody read is never read
by everyone: a broadcast waits for every registered agent it reaches, and
for one besides its sender (with none, it stays until cancelled; then
--keep-days takes it); a finished thread only its creator wrote in waits
for --keep-days. Open work is never removed, nor the thread holding the
newest event (so event ids are never reused and every waiter's cursor
stays valid). Idempotency keys older than --keep-days go too. Limits
default to the database's settings. --dry-run shows what would go.",
        after_help = "\
Examples:
  inbox gc --dry-run
  inbox gc
  inbox gc --keep-days 1 --keep-messages 1000 --json"
    )]
    Gc(GcArgs),

    }
    groups: {
    /// Register agents and their roles, list who is around
    #[command(
        long_about = "\
The agent registry. Registering is optional for an agent addressed by name;
it is what makes role:NAME and broadcast reach an agent. agent list shows
each agent's roles, what it holds now and its presence: active (holds a
live lease or acted in the last 5 minutes), idle (acted in the last hour) or
gone. Acting means writing: every command that records an event, register
and mark-read; reads never count.",
        after_help = "\
Examples:
  inbox agent register --agent reviewer-1 --role reviewer --description \"Reviews Rust changes\"
  inbox agent list
  inbox agent unregister --agent reviewer-1"
    )]
    Agent(AgentArgs),
    }
    tools: {
    /// Print (or install) the SKILL.md that teaches agents this CLI
    #[command(after_help = "\
Examples:
  inbox skill
  inbox skill --install ~/.claude/skills")]
    Skill(SkillArgs),

    /// Run a transition script on a scratch in-memory inbox
    #[command(
        long_about = "\
Run a transition script (the format of tests/corpus/*.inbox) against a fresh
in-memory inbox with a deterministic clock and ids, and print the transcript:
every step's response and what it changed. Use it to pin down an agent
protocol. The database is not touched. Exits 1 if an expectation (=> ...) in
the script does not hold.",
        after_help = "\
Examples:
  inbox script protocol.inbox"
    )]
    Script(ScriptArgs),

    /// Write the database to a file: as JSON lines, or an SQLite copy
    #[command(
        long_about = "\
Write the database out, by default as JSON lines (--format jsonl): every row
of every table (threads, messages, artifacts, leases, events, read cursors,
agents, settings, idempotency keys, orch's runs, tasks and attempts) with its
ids and timestamps exactly, one record per line after a header line, in one
consistent snapshot; `inbox import` brings it back, and exporting the result
again gives the same bytes. --format mailbox-jsonl writes every message as a
line of a mailbox.jsonl log, --format teams-jsonl as a line of the
per-member JSONL inboxes (docs/bridges.md has the mappings). FILE is written
owner-only (0600) under a temporary name beside it, then renamed; without
FILE, or with -, the lines go to stdout. --sqlite FILE writes a consistent,
self-contained SQLite copy instead (no -wal or -shm beside it): to back up
or move a bus, or hand it to the wasm package (Inbox.open({store:
\"sqlite\", bytes})). Safe while agents run. FILE must not exist unless
--force is given; a symbolic link at FILE is replaced, never followed.",
        after_help = "\
Examples:
  inbox export backup.jsonl
  inbox export --format mailbox-jsonl .agenties/mailbox.jsonl --force
  inbox export --format teams-jsonl - | jq -c 'select(.type == \"task_completion\")'
  inbox export --sqlite backup.db"
    )]
    Export(ExportArgs),

    /// Bring a file in: JSON lines, a mailbox log, or an SQLite copy
    #[command(
        long_about = "\
Bring FILE (- for stdin) into this database, which is created if it does
not exist. Agents may run meanwhile: their writes wait for the import's.

--format jsonl (the default) reads a dump made by `inbox export`, in one
write transaction: its rows are copied as they are, ids and timestamps
included; rows already present with the same values are skipped, so
importing a file twice adds nothing, and a row whose id is present with
other values, like a file cut short, refuses the whole file.

--format mailbox-jsonl reads a mailbox.jsonl log and --format
teams-jsonl per-member JSONL inbox lines: each line becomes inbox commands
(a task-assigned or task_assignment opens a thread, task-done or
task_completion finishes it, a question or blocking_notification blocks it,
...; docs/bridges.md has every mapping), under inbox's rules, with an
idempotency key per line, so importing a file twice adds nothing. A line
that is not a message of the format, or that inbox refuses, is reported
with its number and skipped; the summary counts them. Lines are committed
a fifth of a second's worth at a time, each line whole, so agents' writes
are never held up long; an import that stops (a storage error) is finished
by running it again. On a terminal a progress bar shows how far a large
file got.

--sqlite FILE copies an inbox database file (made by `inbox export
--sqlite`, the wasm package's exportBytes(), or any inbox database, an
older schema included) into a new or empty database, after SQLite's
integrity check. A database that already holds threads or orch runs is
refused unless --replace is given; then its content is first saved as
<database>.before-import-<time> beside it, and its history is replaced:
restart waits that were running (their event cursors belong to the old
history).",
        after_help = "\
Examples:
  inbox --db .agents/coord.db import backup.jsonl
  inbox import --format mailbox-jsonl .agenties/mailbox.jsonl
  inbox import --format teams-jsonl ~/.claude/teams/alpha/members/backend-dev/inbox
  inbox import --sqlite team.db --replace"
    )]
    Import(ImportArgs),

    /// Keep a file-based queue or inbox in step with this database
    #[command(
        long_about = "\
Run a bridge: a long-running process that keeps a file-based system other
tools already use working, with this database as the durable, leased store
behind it. `file-drop DIR` ingests the *.task.json descriptors dropped in DIR;
`teams DIR` keeps an Agent Teams folder's member inboxes in step. Each
bridge prints one line per action (--json: one JSON object per line), stops
cleanly on SIGINT or SIGTERM between two files (or lines), and continues
exactly where it stopped when started again. docs/bridges.md maps every
field.",
        after_help = "\
Examples:
  inbox bridge file-drop ~/.fleet/inbox --to lead
  inbox bridge file-drop .agents/drop --to role:builder --trust-all --json
  inbox bridge file-drop .agents/drop --to lead --once
  inbox bridge teams ~/.claude/teams/team-alpha --lead lead --json"
    )]
    Bridge(BridgeArgs),

    /// Serve these commands to an agent runtime over MCP (stdio)
    #[command(
        long_about = "\
Run a Model Context Protocol server on stdin and stdout, acting as --agent
(else $INBOX_AGENT) on the same database as every other command: register
it with an agent runtime (Claude Code, Codex, VS Code, ...) and its agent
gets inbox's commands as tools (fetch, claim, update, wait_reply, done, ...,
orch's, and the mailbox tool send_message), each taking the fields of the
command's JSON request and answering exactly what --json prints. The agent
fields are this server's --agent: a tool call naming another agent is
refused. Waiting tools (wait_reply, watch, orch_wait) wait at most 50 s per
call, below the 60 s after which runtimes give up on a tool call: a wait
that times out answers woke: false and the cursor to call again with.
stdout carries the protocol alone; notes go to stderr. The server is the
inbox-mcp program installed beside inbox, which this command starts.",
        after_help = "\
Examples:
  claude mcp add inbox -- inbox mcp --agent backend-worker
  inbox mcp --agent lead --db /work/team/.agents/coord.db"
    )]
    Mcp(McpArgs),

    /// Serve a live board of the threads to a browser (HTTP, local)
    #[command(
        long_about = "\
Serve a live board of this database to a web browser: threads in columns by
status (pending, in progress, blocked, done, failed, cancelled) with filters
and a search box, each thread's whole history, orch runs with their task
graph, and the registered agents. The page updates within a second of any
change made by any process (Server-Sent Events, driven by the same waiting
as `watch`). It listens on 127.0.0.1 only, and prints the URL to open as
its first line on stdout. The board is read-only unless started with
--write: then a person can answer a blocked thread, cancel one or send a new
task from it, as --as NAME, and every write must carry the token printed in
the URL (so another local user's browser tab cannot act through it).
--listen ADDR serves another address, which lets other machines read the
board: only ask for it on a network you trust. The server is the
inbox-serve program installed beside inbox, which this command starts.",
        after_help = "\
Examples:
  inbox serve --open
  inbox serve --write --as alice --port 0
  inbox serve --db postgres://board@db.example/inbox --listen 0.0.0.0 --port 8080"
    )]
    Serve(ServeArgs),

    /// Keep the database open for other commands: each then costs less
    #[command(
        long_about = "\
Keep this SQLite database open in one long-lived process, so that the other
inbox commands on it hand their call to it over a Unix socket next to the
database (DB-daemon) instead of opening the file, reading its schema and
preparing their statements afresh: a command then costs little more than
starting the binary. The daemon runs each call with the same engine and the
same rules as the command would, one call at a time, and answers the same;
the commands run the call themselves whenever no daemon answers (none
started, stopped, another build of inbox). A call that could not start
within 55 s (other writers holding the database) is refused with
storage_busy and never runs later; one that may have run says so and
what to do. Waits
(watch, wait-reply), init, --engine and orch's commands always run in the
command. Only the user who started it can use it. It prints what it serves
as its first line on stdout and runs until SIGINT or SIGTERM.",
        after_help = "\
Examples:
  inbox daemon &
  inbox daemon --db /work/team/.agents/coord.db --json"
    )]
    Daemon(DaemonArgs),
    /// Print the completion script for a shell: bash, zsh, fish, powershell, elvish
    #[command(
        long_about = "\
Print the script that teaches SHELL to complete inbox's commands, flags and
values (statuses, kinds, priorities, ...), generated from this binary's own
command definitions, so it always matches the inbox installed. Install it
once where the shell looks for completions; run it again after an upgrade.
Needs no database.",
        after_help = "\
Examples:
  inbox completions bash > ~/.local/share/bash-completion/completions/inbox
  inbox completions zsh > ~/.zfunc/_inbox         # a folder on $fpath, before compinit
  inbox completions fish > ~/.config/fish/completions/inbox.fish
  inbox completions powershell | Out-String | Invoke-Expression   # in $PROFILE"
    )]
    Completions(CompletionsArgs),

    /// Print the man page, or write every command's page into a folder
    #[command(
        long_about = "\
Print the inbox(1) man page (roff), generated from this binary's own command
definitions: the overview, the global options and the commands, each named
by its own page. With --dir, write that page and every command's
(inbox-send.1, inbox-agent-register.1, ...) into DIR, where `man inbox-COMMAND`
finds them; a page already there is replaced, a symbolic link in its place
is replaced rather than followed. Needs no database.",
        after_help = "\
Examples:
  inbox man | man -l -
  inbox man --dir ~/.local/share/man/man1
  man inbox-claim"
    )]
    Man(ManArgs),
    }
}

// `--artifact` and its companions.
#[doc(hidden)]
#[derive(Debug, Args, Default)]
pub struct ArtifactArgs {
    /// Attach a file, log, patch or URL (repeat for several)
    #[arg(long = "artifact", value_name = "PATH", allow_hyphen_values = true, value_parser = text_path())]
    pub paths: Vec<PathBuf>,
    /// Kind of each --artifact, in order; one kind applies to all [default: file]
    #[arg(long = "artifact-kind", value_name = "KIND")]
    pub kinds: Vec<String>,
    /// JSON object about each --artifact, in order; one applies to all
    #[arg(long = "artifact-metadata-json", value_name = "JSON")]
    pub metadata: Vec<String>,
}

// `--body`, `--body-file`, `--payload-json`, `--payload-file`.
#[doc(hidden)]
#[derive(Debug, Args, Default)]
pub struct ContentArgs {
    /// The long form, for people and agents reading it
    #[arg(long, conflicts_with = "body_file", allow_hyphen_values = true, value_parser = text())]
    pub body: Option<String>,
    /// Read the body from a UTF-8 file (- for stdin)
    #[arg(long, value_name = "PATH")]
    pub body_file: Option<PathBuf>,
    /// Structured data for programs: a JSON object
    #[arg(long, value_name = "JSON", conflicts_with = "payload_file")]
    pub payload_json: Option<String>,
    /// Read the payload's JSON object from a file (- for stdin); for payloads
    /// too large for one command-line argument (128 KiB on Linux)
    #[arg(long, value_name = "PATH")]
    pub payload_file: Option<PathBuf>,
}

/// Free text (a summary, a body, a subject): it may start with `-` (a diff,
/// "-5% latency"), but a value that is exactly the shape of a flag
/// (`--json`, `--thread`) is taken for what it almost surely is, a flag
/// whose text was forgotten, and refused, so `inbox done --summary --json`
/// still answers in JSON.
pub(crate) fn text() -> impl TypedValueParser<Value = String> {
    clap::builder::StringValueParser::new().try_map(|value: String| {
        if looks_like_a_flag(&value) {
            Err(format!(
                "`{value}` looks like a flag, not text; give the text this option needs before any other flag"
            ))
        } else {
            Ok(value)
        }
    })
}

/// [`text`] for a path (`--artifact`), which may not be UTF-8.
fn text_path() -> impl TypedValueParser<Value = PathBuf> {
    clap::builder::PathBufValueParser::new().try_map(|path: PathBuf| {
        match path.to_str() {
            Some(value) if looks_like_a_flag(value) => Err(format!(
                "`{value}` looks like a flag, not a path; give the path this option needs before any other flag"
            )),
            _ => Ok(path),
        }
    })
}

/// An instant, as the engine writes them (RFC 3339 in UTC, e.g.
/// `2026-11-25T09:00:00Z`), refused in the engine's words.
fn timestamp() -> impl TypedValueParser<Value = Timestamp> {
    clap::builder::StringValueParser::new()
        .try_map(|value: String| Timestamp::parse(&value).map_err(|e| e.to_string()))
}

/// `--` and then only lowercase letters, digits and dashes: `--json`.
fn looks_like_a_flag(value: &str) -> bool {
    value.strip_prefix("--").is_some_and(|name| {
        name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    })
}

/// A value of one of the engine's vocabularies: `Status`, `Kind`,
/// `Priority`, `Durability`. It offers every value the vocabulary has and
/// refuses only spellings outside it, in the engine's words; whether a
/// command allows a value is the engine's to say.
pub(crate) fn one_of<V: Vocabulary + Send + Sync>() -> VocabularyParser<V> {
    VocabularyParser(std::marker::PhantomData)
}

/// See [`one_of`].
#[derive(Clone, Copy)]
pub struct VocabularyParser<V>(std::marker::PhantomData<V>);

impl<V: Vocabulary + Send + Sync> TypedValueParser for VocabularyParser<V> {
    type Value = V;

    fn parse_ref(
        &self,
        command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<V, clap::Error> {
        let text = value.to_string_lossy();
        V::parse(&text).ok_or_else(|| {
            let field = arg.map_or_else(String::new, |a| format!("`{}`: ", a.get_id()));
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!(
                    "{field}{}\n\nFor more information, try '--help'.\n",
                    V::unknown(&text)
                ),
            )
            .with_cmd(command)
        })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            V::ALL.iter().map(|v| PossibleValue::new(v.as_str())),
        ))
    }
}

// `init`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Commit durability for every process: normal (crash-safe, no fsync per
    /// commit) or full (fsync per commit, survives power loss)
    #[arg(long, value_parser = one_of::<Durability>())]
    pub durability: Option<Durability>,
}

// The retention limits, as `settings` stores them and `gc` applies them.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct KeepArgs {
    /// Finished threads idle for more days than this go [stored default: 7]
    #[arg(long, value_name = "DAYS", allow_negative_numbers = true)]
    pub keep_days: Option<u32>,
    /// Beyond this many messages, the oldest finished threads go [stored default: 5000]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub keep_messages: Option<u32>,
    /// Threads read by everyone they are for and idle for more hours than this go first [stored default: 24]
    #[arg(long, value_name = "HOURS", allow_negative_numbers = true)]
    pub keep_read_hours: Option<u32>,
}

// `settings`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct SettingsArgs {
    /// required: writes and waits must act as a registered agent, with
    /// its token; off: names are trusted
    #[arg(long, value_parser = one_of::<AgentTokens>())]
    pub agent_tokens: Option<AgentTokens>,
    /// required: only registered agents act, and sending to an agent or
    /// role nobody registered is refused; optional: any name may
    #[arg(long, value_parser = one_of::<AgentRegistration>())]
    pub agent_registration: Option<AgentRegistration>,
    /// on: writes remove what the retention limits allow as they go; off:
    /// only gc does
    #[arg(long, value_name = "on|off", value_parser = clap::builder::BoolishValueParser::new())]
    pub auto_gc: Option<bool>,
    /// The retention limits.
    #[command(flatten)]
    pub keep: KeepArgs,
}

// `gc`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct GcArgs {
    /// The limits for this run [default: the database's settings].
    #[command(flatten)]
    pub keep: KeepArgs,
    /// Show what would be removed, and remove nothing
    #[arg(long)]
    pub dry_run: bool,
    /// At most this many threads; the answer says more: true when there are more [default: 1000]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `send`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct SendArgs {
    /// Who sends it [default: --agent]
    #[arg(long, visible_alias = "from-agent", value_name = "AGENT")]
    pub from: Option<String>,
    /// Who it is for: NAME, role:NAME (any member may claim), broadcast or
    /// broadcast:role:NAME (information for all)
    #[arg(long, visible_alias = "to-agent", value_name = "ADDRESS")]
    pub to: Option<String>,
    /// Add to this thread instead of opening one
    #[arg(long, visible_alias = "thread-id", value_name = "THREAD_ID")]
    pub thread: Option<String>,
    /// One line that says what the work is (new threads)
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub subject: Option<String>,
    /// The orchestration run this belongs to (new threads)
    #[arg(long, visible_alias = "run-id", value_name = "RUN_ID")]
    pub run: Option<String>,
    /// The leader's task id (new threads)
    #[arg(long, visible_alias = "task-id", value_name = "TASK_ID")]
    pub task: Option<String>,
    /// Message kind [default: task; event to a broadcast]
    #[arg(long, value_parser = one_of::<Kind>())]
    pub kind: Option<Kind>,
    /// One line for this message [default on a new thread: the subject]
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub summary: Option<String>,
    /// Body and payload.
    #[command(flatten)]
    pub content: ContentArgs,
    /// Queue priority (new threads) [default: normal]
    #[arg(long, value_parser = one_of::<Priority>())]
    pub priority: Option<Priority>,
    /// Claims allowed before an expired lease fails the thread (new threads) [default: 3]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_attempts: Option<u32>,
    /// With --to role:NAME: assign the thread now to the member that got
    /// the role's work least recently, skipping members who are gone
    #[arg(long)]
    pub pick: bool,
    /// Attached artifacts.
    #[command(flatten)]
    pub artifacts: ArtifactArgs,
}

// `fetch`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// Statuses to include, comma-separated [default: pending]
    #[arg(long, value_delimiter = ',', value_parser = one_of::<Status>())]
    pub status: Vec<Status>,
    /// At most this many [default: 20]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
    /// Only threads with messages from others you have not marked read (show --mark-read)
    #[arg(long)]
    pub unread: bool,
}

// `claim`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ClaimArgs {
    /// The thread to claim
    #[arg(long, visible_alias = "thread-id", value_name = "THREAD_ID")]
    pub thread: Option<String>,
    /// Claim the first thread fetch would list, picked and leased in one
    /// step; exit 10 when nothing is claimable
    #[arg(long)]
    pub next: bool,
    /// How long the lease lasts unless renewed [default: 900]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub lease_seconds: Option<u64>,
}

// `renew`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct RenewArgs {
    /// The thread you hold
    #[arg(long, visible_alias = "thread-id", value_name = "THREAD_ID")]
    pub thread: Option<String>,
    /// The token claim returned: refuses the renewal if someone else claimed since
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub lease_token: Option<u64>,
    /// New lease length [default: the current one]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub lease_seconds: Option<u64>,
}

// `update`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The thread you hold
    #[arg(long, visible_alias = "thread-id", value_name = "THREAD_ID")]
    pub thread: Option<String>,
    /// The token claim returned: refuses the update if someone else claimed since
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub lease_token: Option<u64>,
    /// in_progress (working) or blocked (waiting for an answer) [default: unchanged]
    #[arg(long, value_parser = one_of::<Status>(), hide_possible_values = true)]
    pub status: Option<Status>,
    /// What happened; when blocked, exactly what is missing
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub summary: Option<String>,
    /// Body and payload.
    #[command(flatten)]
    pub content: ContentArgs,
    /// Attached artifacts.
    #[command(flatten)]
    pub artifacts: ArtifactArgs,
}

// `reply`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ReplyArgs {
    /// Who replies [default: --agent]
    #[arg(long, visible_alias = "from-agent", value_name = "AGENT")]
    pub from: Option<String>,
    /// Who it is for [default: the other party of the thread]
    #[arg(long, visible_alias = "to-agent", value_name = "AGENT")]
    pub to: Option<String>,
    /// The thread
    #[arg(long, visible_alias = "thread-id", value_name = "THREAD_ID")]
    pub thread: Option<String>,
    /// For a holder's reply: the token claim returned
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub lease_token: Option<u64>,
    /// answer, question, progress or control [default: answer]
    #[arg(long, value_parser = one_of::<Kind>(), hide_possible_values = true)]
    pub kind: Option<Kind>,
    /// One line: the answer itself, or what the message is
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub summary: Option<String>,
    /// Body and payload.
    #[command(flatten)]
    pub content: ContentArgs,
    /// Attached artifacts.
    #[command(flatten)]
    pub artifacts: ArtifactArgs,
}

// `done` and `fail`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct FinishArgs {
    /// The thread you hold
    #[arg(long, visible_alias = "thread-id", value_name = "THREAD_ID")]
    pub thread: Option<String>,
    /// The token claim returned: refuses if someone else claimed since
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub lease_token: Option<u64>,
    /// One line: the result, or why it failed
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub summary: Option<String>,
    /// Body and payload.
    #[command(flatten)]
    pub content: ContentArgs,
    /// Attached artifacts.
    #[command(flatten)]
    pub artifacts: ArtifactArgs,
}

// `cancel`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The thread
    #[arg(long, visible_alias = "thread-id", value_name = "THREAD_ID")]
    pub thread: Option<String>,
    /// Why, in one line
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub reason: Option<String>,
    /// Attached artifacts.
    #[command(flatten)]
    pub artifacts: ArtifactArgs,
}

// `list`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Statuses to include, comma-separated [default: all]
    #[arg(long, value_delimiter = ',', value_parser = one_of::<Status>())]
    pub status: Vec<Status>,
    /// Threads this agent created
    #[arg(long, value_name = "AGENT")]
    pub created_by: Option<String>,
    /// Threads assigned to this address (NAME, role:NAME, broadcast)
    #[arg(long, value_name = "ADDRESS")]
    pub assigned_to: Option<String>,
    /// Threads of this run
    #[arg(long, visible_alias = "run-id", value_name = "RUN_ID")]
    pub run: Option<String>,
    /// Threads of this task
    #[arg(long, visible_alias = "task-id", value_name = "TASK_ID")]
    pub task: Option<String>,
    /// At most this many [default: 50]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `show`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The thread
    #[arg(long, visible_alias = "thread-id", value_name = "THREAD_ID")]
    pub thread: Option<String>,
    /// Move --agent's read cursor to the newest message shown
    #[arg(long)]
    pub mark_read: bool,
    /// Only messages after this one: the next page of a long thread
    #[arg(long, value_name = "MESSAGE_ID")]
    pub after_message: Option<String>,
    /// At most this many messages [default: 100]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `watch`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Only events that leave a thread in one of these statuses, comma-separated
    #[arg(long, value_delimiter = ',', value_parser = one_of::<Status>())]
    pub status: Vec<Status>,
    /// Only events that write a message of one of these kinds, comma-separated
    #[arg(long, value_delimiter = ',', value_parser = one_of::<Kind>())]
    pub kinds: Vec<Kind>,
    /// Resume after this event id [default: the latest event]
    #[arg(long, value_name = "EVENT_ID", allow_negative_numbers = true)]
    pub after_event: Option<u64>,
    /// Give up after this long, exit 10 [default: 300]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub timeout_seconds: Option<u64>,
    /// At most this many events per wake [default: 100]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `wait-reply`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct WaitReplyArgs {
    /// The thread
    #[arg(long, visible_alias = "thread-id", value_name = "THREAD_ID")]
    pub thread: Option<String>,
    /// Only messages after this one
    #[arg(long, value_name = "MESSAGE_ID")]
    pub after_message: Option<String>,
    /// Only messages after this event id
    #[arg(long, value_name = "EVENT_ID", allow_negative_numbers = true)]
    pub after_event: Option<u64>,
    /// Kinds that count as a reply, comma-separated [default: answer,control,result]
    #[arg(long, value_delimiter = ',', value_parser = one_of::<Kind>())]
    pub kinds: Vec<Kind>,
    /// Give up after this long, exit 10 [default: 300]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub timeout_seconds: Option<u64>,
    /// For a waiting holder: the token claim returned, used for the lease heartbeat
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub lease_token: Option<u64>,
}

// `read`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// Also messages already read
    #[arg(long)]
    pub include_read: bool,
    /// Only messages written at or after this instant (RFC 3339, UTC)
    #[arg(long, value_name = "TIME", value_parser = timestamp())]
    pub since: Option<Timestamp>,
    /// Resume after this event id (the next_event_id of the last read)
    #[arg(long, value_name = "EVENT_ID", allow_negative_numbers = true)]
    pub after_event: Option<u64>,
    /// At most this many messages [default: 50]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `mark-read`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct MarkReadArgs {
    /// The messages read, comma-separated
    #[arg(long, value_delimiter = ',', value_name = "MESSAGE_ID")]
    pub message_ids: Vec<String>,
    /// Or: every message of your mailbox up to this event id
    #[arg(long, value_name = "EVENT_ID", allow_negative_numbers = true)]
    pub through_event: Option<u64>,
}

// `agent`: the registry's commands.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: AgentCommand,
}

// `agent register`, `agent list`, `agent unregister`.
#[doc(hidden)]
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum AgentCommand {
    /// Register --agent (or replace its roles and description)
    #[command(
        long_about = "\
Register --agent with its roles and a description, or replace them: the
roles given are its roles from now on. Safe to repeat, and it counts as
activity, so a long-waiting agent may register again to stay present.
When the database requires agent tokens, registering prints the agent's
token once; the first agent (the team's lead) registers freely, every
later one with the token of a registered agent (--agent-token-file),
recorded as its registered_by, and a registered agent again with its own.",
        after_help = "\
Examples:
  inbox agent register --agent reviewer-1 --role reviewer,rust --description \"Reviews Rust changes\"
  inbox agent register --agent worker-2 --role crew --agent-token-file lead.token --json"
    )]
    Register(AgentRegisterArgs),
    /// The registered agents, their roles, presence and what they hold
    #[command(after_help = "\
Examples:
  inbox agent list
  inbox agent list --role reviewer --json")]
    List(AgentListArgs),
    /// Remove --agent from the registry (its threads stay)
    #[command(after_help = "\
Examples:
  inbox agent unregister --agent reviewer-1")]
    Unregister(AgentUnregisterArgs),
}

// `agent register`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct AgentRegisterArgs {
    /// Its roles, comma-separated (repeat or list): role:NAME reaches it
    #[arg(
        long = "role",
        visible_alias = "roles",
        value_delimiter = ',',
        value_name = "ROLE"
    )]
    pub roles: Vec<String>,
    /// What it does, in one line
    #[arg(long, allow_hyphen_values = true, value_parser = text())]
    pub description: Option<String>,
}

// `agent list`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct AgentListArgs {
    /// Only members of this role
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
    /// At most this many agents [default: 50]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub limit: Option<u32>,
}

// `agent unregister`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct AgentUnregisterArgs {}

// `skill`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct SkillArgs {
    /// Write it to DIR/inbox/SKILL.md instead of printing it
    #[arg(long, value_name = "DIR")]
    pub install: Option<PathBuf>,
}

// `completions`, for `inbox` and `orch`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

// `man`, for `inbox` and `orch`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write every page (the binary's and one per command) into DIR instead
    /// of printing the binary's
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

// `export`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// What to write
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub format: Format,
    /// The file to write [default: -, stdout]
    #[arg(value_name = "FILE", allow_hyphen_values = true)]
    pub file: Option<PathBuf>,
    /// Write an SQLite database of its own to FILE instead
    #[arg(long, value_name = "FILE", conflicts_with_all = ["format", "file"])]
    pub sqlite: Option<PathBuf>,
    /// Replace FILE if it exists
    #[arg(long)]
    pub force: bool,
}

// `import`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// What FILE holds
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub format: Format,
    /// The file to read (- for stdin)
    #[arg(
        value_name = "FILE",
        allow_hyphen_values = true,
        required_unless_present = "sqlite"
    )]
    pub file: Option<PathBuf>,
    /// Copy this inbox database file instead
    #[arg(long, value_name = "FILE", conflicts_with_all = ["format", "file"])]
    pub sqlite: Option<PathBuf>,
    /// With --sqlite: replace what the database holds (saved beside it first)
    // `requires` alone lets `import FILE --replace` through (clap 4.6):
    // the conflict with FILE says it.
    #[arg(long, requires = "sqlite", conflicts_with_all = ["file", "format"])]
    pub replace: bool,
}

// `bridge`: one subcommand per file-based system.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct BridgeArgs {
    /// Which system.
    #[command(subcommand)]
    pub command: BridgeCommand,
}

// `bridge file-drop`.
#[doc(hidden)]
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum BridgeCommand {
    /// Turn *.task.json descriptors dropped into DIR into threads
    #[command(
        long_about = "\
Watch DIR (created owner-only if missing, and again if it is removed) for
task descriptors, NAME.task.json: version 1, kind prompt or spawn_worker
(with its crew fields skill, role, skills, model, cwd). Each one, in file
name order, becomes an inbox thread from --from to its role (role, else
skill, as role:NAME) or else to --to, and is renamed NAME.task.json.processed
beside a NAME.task.json.result that says {\"ok\":true,...,\"threadId\":...}.
What the format refuses (over 64 KB, a symbolic link, malformed JSON, a schema
violation, spawn_worker without --trust-all) is renamed .failed beside a
.result with the reason, and so is one whose .result or .processed could
not be written (a name too long for them, a folder or a file the bridge did
not create in the way): nothing is sent for it. One that cannot even be
renamed is left in place and reported (stuck); the others go on. A file of
another user is passed over: nothing is written for it. When a thread
finishes, its outcome (status, summary, result message, artifacts) is
written into its .result, atomically. A file written again under a name
already processed is a new descriptor; one sent is never sent again, even
after a crash. DIR must not be writable by other users unless it is sticky
(chmod +t) and --shared-dir is given. Wakes on the folder changing
(inotify), with --poll-ms as the fallback; one bridge per folder.",
        after_help = "\
Examples:
  inbox bridge file-drop ~/.fleet/inbox --from fleet --to lead
  echo '{\"version\":1,\"kind\":\"prompt\",\"prompt\":\"Summarise today\"}' > ~/.fleet/inbox/note.task.json"
    )]
    FileDrop(FileDropArgs),
    /// Keep an Agent Teams folder's member inboxes in step with inbox
    #[command(
        long_about = "\
Bridge a team folder both ways. DIR is either the Agent Teams layout,
DIR/members/<member>/inbox (JSONL, one message per line), or the one Claude
Code agent teams use, DIR/inboxes/<agent>.json (a JSON array of {from, text,
summary, timestamp, read} entries); a folder with neither is refused.
Inbound, each line other tools append (an unread entry, for Claude Code)
becomes an inbox operation: task_assignment opens a thread for the member,
task_completion claims it for the member and finishes it,
blocking_notification blocks it with its reason, message and
task_status_request go into the thread their taskId names (or a new one),
team_broadcast goes to broadcast, idle_notification registers the member
again (activity). Each line is applied once, under an idempotency key made
of its file and content; malformed lines are reported and skipped.
Outbound, every message inbox delivers to a bridged member (a task, a reply,
an answer, a broadcast) is appended to its inbox file as a JSONL inbox line
(under flock on inbox.lock; for Claude Code, the array rewritten under
<agent>.json.lock and renamed). Lines the bridge ingested are never written
back. One bridge per folder.",
        after_help = "\
Examples:
  inbox bridge teams ~/.claude/teams/team-alpha --lead lead
  MESSAGE='{\"type\":\"message\",\"from\":\"coordinator\",\"to\":\"backend-dev\",\"timestamp\":\"'$(date -u +%Y-%m-%dT%H:%M:%SZ)'\",\"content\":{\"text\":\"Hello\"}}'
  echo \"$MESSAGE\" >> ~/.claude/teams/team-alpha/members/backend-dev/inbox"
    )]
    Teams(TeamsArgs),
}

// `bridge teams`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct TeamsArgs {
    /// The team folder (with members/ or inboxes/)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The inbox agent that is the folder's coordinator (the Agent Teams coordinator, Claude Code's team-lead)
    #[arg(long, value_name = "NAME")]
    pub lead: Option<String>,
    #[command(flatten)]
    pub run: BridgeRunArgs,
}

// `bridge file-drop`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct FileDropArgs {
    /// The folder descriptors are dropped into
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Recipient of descriptors that name no role or skill: an address
    #[arg(long, value_name = "ADDRESS")]
    pub to: Option<String>,
    /// Sender of the threads it opens
    #[arg(long, value_name = "AGENT", default_value = "file-drop")]
    pub from: String,
    /// Accept spawn_worker descriptors (anyone who can write DIR may send them)
    // The seed's own flag name is accepted too, for its users' scripts.
    #[arg(long, visible_alias = "inbox-trust-all")]
    pub trust_all: bool,
    /// Run on a DIR other users may write, if it is sticky (their descriptors are passed over)
    #[arg(long)]
    pub shared_dir: bool,
    #[command(flatten)]
    pub run: BridgeRunArgs,
}

// How every bridge runs.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct BridgeRunArgs {
    /// Process what is there now, then exit
    #[arg(long)]
    pub once: bool,
    /// Look again at least this often, even without a notification
    #[arg(long, value_name = "MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub poll_ms: u64,
}

/// The line formats `export` and `import` speak besides `--sqlite`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// inbox's own dump: every row of every table
    Jsonl,
    /// a mailbox.jsonl log: one message per line
    MailboxJsonl,
    /// a member's JSONL inbox (members/<member>/inbox): one message per line
    TeamsJsonl,
}

impl Format {
    /// Its name on the command line and in the JSON contract.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::MailboxJsonl => "mailbox-jsonl",
            Format::TeamsJsonl => "teams-jsonl",
        }
    }
}

// `mcp`: everything it takes is a global flag (`--agent`, `--db`).
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct McpArgs {}

// `daemon`: everything it takes is a global flag (`--db`, `--json`).
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct DaemonArgs {}

// `script`.
#[doc(hidden)]
#[derive(Debug, Args)]
pub struct ScriptArgs {
    /// The script file (- for stdin)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}
