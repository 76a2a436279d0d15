//! What the MCP server adds to the command table, in one place: for every
//! command, whether it is a tool and when an agent should use it (which of
//! its request fields is the acting agent, filled in with the server's own,
//! is the table's `acting`); the text that teaches the call-again loop of
//! the waiting tools; the server's instructions.
//!
//! What a command does comes from the table (its doc lines), its input
//! schema from its request type; this module only says what an agent in a
//! runtime needs on top. The match below is exhaustive on purpose: a new
//! command does not compile until someone decides what it is here. It must
//! never build or run a request.

use inbox_engine::Command;

/// The longest a waiting tool waits in one call, in seconds. Agent runtimes
/// give up on a tool call after a minute or so (60 s is a common default),
/// and a call they gave up on is lost work: its answer is thrown away.
pub(crate) const WAIT_CAP_SECONDS: u64 = 50;

/// The most waits (calls of the waiting tools) one server runs at once.
/// Each holds a thread and a watch on the database while it waits; an
/// agent has one or two open, and a client that opens more is refused
/// rather than let to exhaust the host.
pub(crate) const WAITS_AT_ONCE: usize = 16;

/// How often a waiting tool tells a client that asked for progress that it
/// is still waiting, in seconds: often enough for clients that reset their
/// timeout on progress, rarely enough to be no traffic.
pub(crate) const PROGRESS_EVERY_SECONDS: u64 = 5;

/// What a command is to the MCP server.
pub(crate) enum Exposure {
    /// A tool named like the command (`-` read as `_`).
    Tool {
        /// When an agent should call it.
        when: &'static str,
    },
    /// Not a tool (each arm says why).
    Hidden,
}

/// What `command` is to the MCP server.
pub(crate) fn exposure(command: Command) -> Exposure {
    use Exposure::{Hidden, Tool};
    match command {
        // Not a tool: it creates the database; run `inbox init` before the
        // server starts.
        Command::Init => Hidden,
        // Not a tool: agents open threads with send_message, seed 004's
        // mailbox tool, which maps onto send.
        Command::Send => Hidden,
        Command::Fetch => Tool {
            when: "At the start of a turn, to see the work you could claim now: threads assigned to you that nobody holds. It changes nothing; an empty list means there is nothing to do. Then claim one.",
        },
        Command::Claim => Tool {
            when: "Before working on a thread: the only way to own it. next: true takes the first thread fetch would list (all three answer fields are null when there is none). Keep the lease_token it returns and pass it to update, renew, wait_reply, done and fail on that thread: if your lease ran out and someone else took the thread, they refuse with lease_lost instead of letting you act on work that is no longer yours.",
        },
        Command::Renew => Tool {
            when: "During long silent work on a thread you hold, before lease.expires_at; update, reply and wait_reply keep the lease alive too.",
        },
        Command::Update => Tool {
            when: "While you hold a thread: status in_progress to report progress; status blocked when you cannot go on, with a summary that says exactly what is missing, then wait_reply for the answer.",
        },
        Command::Reply => Tool {
            when: "To answer a question in a thread (kind answer, the default, unblocks a blocked worker), or to add a question, progress or control message to a thread you take part in.",
        },
        Command::Done => Tool {
            when: "When the work of a thread you hold is finished: the summary says what was achieved, body the details. The lease is released and the thread is done for good.",
        },
        Command::Fail => Tool {
            when: "When you cannot finish a thread you hold: the summary says why. Retrying is the leader's decision, not yours.",
        },
        Command::Cancel => Tool {
            when: "To stop a thread that has not finished, whoever holds it (a leader withdrawing work); a worker waiting in it wakes with the reason.",
        },
        Command::List => Tool {
            when: "To look over the threads you created or are assigned, by status, creator, assignee, run or task, newest first; unlike fetch, it shows held and finished threads too.",
        },
        Command::Show => Tool {
            when: "To read one thread's whole history, oldest first, a page at a time; mark_read: true moves your read cursor to the newest message shown.",
        },
        Command::Watch => Tool {
            when: "To wait for activity on every thread you created or are assigned: a leader waiting for results and questions passes kinds [\"result\", \"question\"]. wait_reply follows one thread; watch follows all of yours.",
        },
        Command::WaitReply => Tool {
            when: "After asking (update with status blocked), to wait for the answer in that thread instead of sleeping; while you wait, your lease on the thread stays alive.",
        },
        // Not tools: the mailbox is served as seed 004's read_messages and
        // mark_read, with the seed's argument names (see seed.rs); a second
        // `mark_read` with other arguments could not even have its name.
        Command::Read | Command::MarkRead => Hidden,
        Command::AgentRegister => Tool {
            when: "Once at the start, to join the team's registry with your roles: threads sent to role:NAME become yours to fetch and claim, and broadcasts reach you. Calling it again replaces your roles and description.",
        },
        Command::AgentList => Tool {
            when: "To see who is on the team: each agent's roles, presence (active, idle, gone) and what it holds, and each role with what waits on it; before sending to an agent or a role:NAME.",
        },
        Command::AgentUnregister => Tool {
            when: "When you leave the team for good: role:NAME and broadcast stop reaching you (your threads stay).",
        },
        // Not tools: database-wide settings (turning agent tokens off among
        // them) and retention are the operator's, not an agent's.
        Command::Settings | Command::Gc => Hidden,
        // Not a tool: housekeeping that every write does first.
        Command::Sweep => Hidden,
        // Not a tool: the server's version is in the MCP handshake.
        Command::Version => Hidden,
        Command::OrchRunCreate => Tool {
            when: "Leader: to start a run, the goal a task graph serves; then orch_plan its tasks.",
        },
        // `agent` filters the list here (runs that leader created): it is
        // not who acts (the table names no acting field), so it stays an
        // argument.
        Command::OrchRunList => Tool {
            when: "Leader: to find runs, newest first (agent: only the runs that leader created).",
        },
        Command::OrchRunCancel => Tool {
            when: "Leader: to stop a run and every task of it that has not ended.",
        },
        Command::OrchStatus => Tool {
            when: "Leader: the run at a glance, any time: what needs you (ready, blocked, in review, failed), what is in flight, what waits on what.",
        },
        Command::OrchTaskAdd => Tool {
            when: "Leader: to add one task to a run after planning.",
        },
        Command::OrchPlan => Tool {
            when: "Leader: to add a whole task graph at once (all or nothing), right after orch_run_create.",
        },
        Command::OrchTaskShow => Tool {
            when: "Leader: one task in full: its text, attempts, thread and what it waits on.",
        },
        Command::OrchReady => Tool {
            when: "Leader: the tasks that can start now; orch_dispatch starts them.",
        },
        Command::OrchDispatch => Tool {
            when: "Leader: to start ready tasks (all_ready: true for all of them): each becomes an inbox thread its assignee fetches and claims.",
        },
        Command::OrchAccept => Tool {
            when: "Leader: a task waits in review and its result is good.",
        },
        Command::OrchReject => Tool {
            when: "Leader: a task waits in review and its result is not good enough: summary says why; a new attempt carries it.",
        },
        Command::OrchAnswer => Tool {
            when: "Leader: a task is blocked on a worker's question: summary is the answer.",
        },
        Command::OrchRetry => Tool {
            when: "Leader: a task failed and should be tried again (to: another assignee).",
        },
        Command::OrchReassign => Tool {
            when: "Leader: give a task to another agent (to); a live attempt is cancelled first.",
        },
        Command::OrchCancel => Tool {
            when: "Leader: stop one task (cascade: true also skips the tasks that need it).",
        },
        Command::OrchWait => Tool {
            when: "Leader: to wait until the run needs you (a result to review, a question, a failure, tasks ready), instead of polling orch_status.",
        },
        Command::OrchWorktreeList => Tool {
            when: "Leader, in a run with a repository: to see every attempt's git worktree (folder, branch, base) and where it is, before merging a branch or cleaning up.",
        },
        Command::OrchWorktreeGc => Tool {
            when: "Leader, in a run with a repository: to tidy ended attempts' worktrees (uncommitted work saved on a ref, clean ones removed; branches stay); dry_run: true says what it would do.",
        },
        // Not a tool: housekeeping that every orch write and orch_wait do first.
        Command::OrchReconcile => Hidden,
        Command::OrchCouncil => Tool {
            when: "Leader: to have several reviewers review one subject (title, and a body, files or a diff) on their own: one task per seat, dispatched at once; their findings come back grouped and tallied (ballot: true adds a round where every seat votes on the groups). Reviewers answer by done with a council_review payload (`orch skill council-review`).",
        },
        Command::OrchCouncilShow => Tool {
            when: "Leader: a council's report once orch_wait woke with council_completed (or any time): the findings grouped and tallied, the verdicts and votes, and which seats have not answered.",
        },
    }
}

/// What every waiting tool's description adds: the cap and the loop.
pub(crate) fn waiting() -> String {
    format!(
        "It waits at most {WAIT_CAP_SECONDS} seconds per call (timeout_seconds: default and most {WAIT_CAP_SECONDS}), because agent runtimes give up on a tool call after about a minute. An answer with woke: false means nothing arrived yet and is not an error: call the tool again with after_event set to the next_event_id it returned, and repeat until woke is true. While it waits it reports progress every {PROGRESS_EVERY_SECONDS} seconds if the call asked for progress, and cancelling the call stops the wait at once. One server runs at most {WAITS_AT_ONCE} waits at once: past that, a wait is refused at once (let one answer or cancel one)."
    )
}

/// What every tool's description ends with: what it answers.
pub(crate) const ANSWERS: &str = "It answers exactly the JSON `inbox --json` prints: {\"ok\": true, \"command\": ..., ...}; a refusal is a tool error whose text is {\"ok\": false, \"command\": ..., \"error\": {\"code\", \"message\"}}, and a refused call changes nothing.";

/// The server's instructions, sent in the MCP handshake.
pub(crate) fn instructions(agent: &str, database: &str) -> String {
    format!(
        "inbox is the durable coordination bus of this agent team: a leader opens a thread for each task, a worker claims it with a lease, reports progress, asks when blocked and waits for the answer, then finishes with done or fail. You act as the agent `{agent}` (every tool fills in its agent fields with that name) on the database {database}.\n\
         The worker loop: fetch (what could I claim?) -> claim with next: true (keep the lease_token) -> update with status in_progress -> when blocked, update with status blocked and a summary of what is missing, then wait_reply until woke is true -> done (or fail), passing the thread_id and lease_token each time.\n\
         The mailbox: read_messages at the start of a turn (your unread messages, to you, your roles or everyone), then mark_read. The leader: send_message opens a thread for an agent or a role:NAME (type task-assigned) or adds to one (threadId); watch with kinds [\"result\", \"question\"] waits for results and questions; reply with kind answer answers; orch_* tools run a whole task graph.\n\
         Waiting tools (wait_reply, watch, orch_wait) return within {WAIT_CAP_SECONDS} s: woke: false is not an error, call again with after_event = next_event_id."
    )
}
