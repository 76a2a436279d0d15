//! The command set, defined once.
//!
//! [`for_each_command!`](crate::for_each_command) holds the table: one row
//! per command with its variant, wire name, handler, JavaScript method name,
//! request and output types, and [`Effect`]. Everything that lists commands
//! is generated from it: here the [`Command`] names and the [`Request`] and
//! [`Output`] enums with their decoding; in the engine the dispatch to each
//! command's input check and handler; in the wasm package one method per
//! command. Tests, help and generated docs iterate [`Command::ALL`].
//!
//! Adding a command is: a row here, its request and output types in
//! [`crate::wire`], its input check in the engine's `input` module, its
//! handler, and its CLI arguments. Nothing else may need a change; a second
//! list of commands anywhere is a defect. This module only describes the
//! set: it must never apply a rule.

use serde::{Deserialize, Serialize};

use crate::vocabulary::Vocabulary;
use crate::wire::*;

/// The command table. Invokes `$callback! { ... }` with one entry per
/// command, in documentation order:
///
/// ```text
/// {
///     docs: ["...", ...],           // what the command does (doc comment lines)
///     variant: Send,                // the Request / Output / Command variant
///     name: "send",                 // the wire and command-line name
///     handler: send,                // input check and handler function name
///     js: [send],                   // the JavaScript method (first ident)
///     request: SendRequest,         // request fields (crate::wire)
///     acting: [from_agent],         // [field]: the request field naming the
///                                   // agent the command acts as (whose
///                                   // token it needs when tokens are
///                                   // required); [] when it acts as nobody
///     output: MessageOutput,        // success fields (crate::wire)
///     or_nothing: [],               // [or_nothing]: the command looks for
///                                   // something and may find nothing, which
///                                   // exits 10 (when crate::wire::Found says so)
///     effect: Write,                // crate::Effect of its requests...
///     writes_if: [],                // ...except Write when this bool field is true
///     transactions: [],             // [own]: the handler opens its own transactions;
///                                   // [preview]: a read that runs in a write
///                                   // transaction rolled back (orch reads);
///                                   // [starts]: a write that may start attempts,
///                                   // whose worktrees git makes before it
///                                   // (the engine's `starting` steps);
///                                   // [records]: a wait whose look first records
///                                   // what it waits on, in one write transaction
///                                   // that is kept (orch-wait)
/// }
/// ```
///
/// A consumer outside this crate must have the request and output types in
/// scope (`use inbox_engine::wire::*`).
#[macro_export]
macro_rules! for_each_command {
    ($callback:ident) => {
        $crate::__command_rows! { $callback;
            /// Prepare the store (schema, settings). Safe to repeat.
            Init = "init" init(InitRequest) -> InitOutput: Write, own;
            /// Open a thread, or add a message to one.
            Send = "send" send(SendRequest by from_agent) -> MessageOutput: Write;
            /// List threads an agent could claim now. Never changes anything.
            Fetch = "fetch" fetch(FetchRequest by agent) -> ThreadsOutput or_nothing: Read;
            /// Take a lease on a thread: the only way to own work.
            Claim = "claim" claim(ClaimRequest by agent) -> ClaimOutput or_nothing: Write;
            /// Extend the caller's lease from now.
            Renew = "renew" renew(RenewRequest by agent) -> LeaseOutput: Write;
            /// Report progress, or block on a question.
            Update = "update" update(UpdateRequest by agent) -> MessageOutput: Write;
            /// Add a message to a thread (answers unblock a blocked thread).
            Reply = "reply" reply(ReplyRequest by from_agent) -> MessageOutput: Write;
            /// Finish a thread with a result.
            Done = "done" done(FinishRequest by agent) -> MessageOutput: Write;
            /// Finish a thread as failed.
            Fail = "fail" fail(FinishRequest by agent) -> MessageOutput: Write;
            /// Stop a thread that has not finished.
            Cancel = "cancel" cancel(CancelRequest by agent) -> MessageOutput: Write;
            /// List threads by filters, newest first.
            List = "list" list(ListRequest by agent) -> ThreadsOutput: Read;
            /// One thread and its messages, a page at a time (with
            /// `mark_read`, also moves the reader's cursor).
            Show = "show" show(ShowRequest by agent) -> ShowOutput: Read (mark_read writes);
            /// Wait for activity on the threads an agent created or is
            /// assigned (the engine looks once; a host blocks until it wakes).
            Watch = "watch" watch(WatchRequest by agent) -> WatchOutput or_nothing: Wait;
            /// Wait for a reply in one thread (the engine looks once; a host
            /// blocks until it wakes).
            WaitReply = "wait-reply" wait_reply/waitReply(WaitReplyRequest by agent) -> WaitReplyOutput or_nothing: Wait;
            /// The mailbox view: messages addressed to an agent, its roles or
            /// everyone, across threads, oldest first (unread only unless
            /// `include_read`). Reading consumes nothing.
            Read = "read" mailbox/read(ReadRequest by agent) -> MailboxOutput or_nothing: Read;
            /// Mark messages read (by id, or all up to an event) by moving
            /// the reader's cursor in each of their threads.
            MarkRead = "mark-read" mark_read/markRead(MarkReadRequest by agent) -> MarkReadOutput: Write;
            /// Register an agent (or replace its roles and description), so
            /// that `role:NAME` and `broadcast` reach it.
            AgentRegister = "agent-register" agent_register/agentRegister(AgentRegisterRequest by agent) -> AgentOutput: Write;
            /// The registered agents with their roles, presence and what they
            /// hold now, and their roles with what waits on them.
            AgentList = "agent-list" agent_list/agentList(AgentListRequest) -> AgentsOutput: Read;
            /// Remove an agent from the registry (its threads stay).
            AgentUnregister = "agent-unregister" agent_unregister/agentUnregister(AgentUnregisterRequest by agent) -> AgentOutput: Write;
            /// Show the database-wide settings (agent tokens, registration,
            /// retention), changing those given.
            Settings = "settings" settings(SettingsRequest) -> SettingsOutput: Write;
            /// Remove what the retention limits allow: finished threads past
            /// their time and broadcasts everyone has read, with their
            /// messages and events.
            Gc = "gc" gc(GcRequest) -> GcOutput: Write;
            /// Record lapsed leases now (every write does this first).
            Sweep = "sweep" sweep(SweepRequest) -> SweepOutput: Write, own;
            /// Report the engine and wire versions.
            Version = "version" version(VersionRequest) -> VersionOutput: Read, own;
            /// orch: start a run, the goal a task graph will serve.
            OrchRunCreate = "orch-run-create" orch_run_create/orchRunCreate(OrchRunCreateRequest by agent) -> RunOutput: Write;
            /// orch: list runs, newest first, as they are now.
            OrchRunList = "orch-run-list" orch_run_list/orchRunList(OrchRunListRequest) -> RunsOutput: Read, preview;
            /// orch: cancel a run, every task of it that has not ended and
            /// their live threads.
            OrchRunCancel = "orch-run-cancel" orch_run_cancel/orchRunCancel(OrchRunCancelRequest by agent) -> RunOutput: Write;
            /// orch: a run at a glance: counts by status, what waits on the
            /// leader, what is in flight, what waits on what.
            OrchStatus = "orch-status" orch_status/orchStatus(OrchStatusRequest) -> StatusOutput: Read, preview;
            /// orch: add one task to a run.
            OrchTaskAdd = "orch-task-add" orch_task_add/orchTaskAdd(OrchTaskAddRequest by agent) -> TaskOutput: Write;
            /// orch: add a whole task graph in one transaction.
            OrchPlan = "orch-plan" orch_plan/orchPlan(OrchPlanRequest by agent) -> PlanOutput: Write;
            /// orch: one task with its attempts, its thread, what it waits on
            /// and what needs it.
            OrchTaskShow = "orch-task-show" orch_task_show/orchTaskShow(OrchTaskShowRequest) -> TaskShowOutput: Read, preview;
            /// orch: the ready queue: tasks that can start now, by priority
            /// then the order they were added.
            OrchReady = "orch-ready" orch_ready/orchReady(OrchReadyRequest) -> TasksOutput or_nothing: Read, preview;
            /// orch: start attempts: open each task's inbox thread for its
            /// assignee.
            OrchDispatch = "orch-dispatch" orch_dispatch/orchDispatch(OrchDispatchRequest by agent) -> DispatchOutput or_nothing: Write, starts;
            /// orch: accept a task in review: it is done.
            OrchAccept = "orch-accept" orch_accept/orchAccept(OrchTaskRequest by agent) -> TaskOutput: Write;
            /// orch: reject a task in review: a new attempt carries the
            /// reason and the rejected result.
            OrchReject = "orch-reject" orch_reject/orchReject(OrchTaskRequest by agent) -> TaskOutput: Write, starts;
            /// orch: answer a blocked task's question in its thread.
            OrchAnswer = "orch-answer" orch_answer/orchAnswer(OrchTaskRequest by agent) -> TaskOutput: Write;
            /// orch: try a failed task again (optionally with another
            /// assignee); the tasks it skipped come back.
            OrchRetry = "orch-retry" orch_retry/orchRetry(OrchTaskRequest by agent) -> TaskOutput: Write, starts;
            /// orch: give a task to another agent; a live attempt's thread is
            /// cancelled first, so its worker is fenced off.
            OrchReassign = "orch-reassign" orch_reassign/orchReassign(OrchTaskRequest by agent) -> TaskOutput: Write, starts;
            /// orch: cancel a task (with `cascade`, skipping the tasks that
            /// need it).
            OrchCancel = "orch-cancel" orch_cancel/orchCancel(OrchTaskRequest by agent) -> TaskOutput: Write;
            /// orch: wait until the run needs the leader (the engine records
            /// what the attempts' threads did, then looks once; a host blocks
            /// until it wakes).
            OrchWait = "orch-wait" orch_wait/orchWait(OrchWaitRequest) -> OrchWaitOutput or_nothing: Wait, records;
            /// orch: every attempt's git worktree, with where it is (live,
            /// uncommitted, saved, commits, merged, removed, missing).
            OrchWorktreeList = "orch-worktree-list" orch_worktree_list/orchWorktreeList(OrchWorktreeListRequest) -> WorktreesOutput: Read, own;
            /// orch: tidy the ended attempts' worktrees: save what is
            /// uncommitted on a ref of its own, remove exactly the clean
            /// ones (their branches stay).
            OrchWorktreeGc = "orch-worktree-gc" orch_worktree_gc/orchWorktreeGc(OrchWorktreeGcRequest) -> WorktreeGcOutput: Write, own;
            /// orch: record what the attempts' threads and the clock have made
            /// true (every orch write does this first).
            OrchReconcile = "orch-reconcile" orch_reconcile/orchReconcile(OrchReconcileRequest) -> ReconcileOutput: Write, starts;
            /// orch: start a council review of one subject: a task per
            /// reviewer's seat, dispatched at once, each answered in a checked
            /// shape (and a ballot round on the grouped findings, if asked).
            OrchCouncil = "orch-council" orch_council/orchCouncil(OrchCouncilRequest by agent) -> CouncilOutput: Write;
            /// orch: a council's report: the seats' findings grouped and
            /// tallied by code, the verdicts and votes, and which seats have
            /// not answered.
            OrchCouncilShow = "orch-council-show" orch_council_show/orchCouncilShow(OrchCouncilShowRequest) -> CouncilShowOutput: Read, preview;
        }
    };
}

/// Turns the table's compact rows into the explicit entries
/// [`for_each_command!`](crate::for_each_command) documents, so every
/// consumer matches one fixed shape.
#[doc(hidden)]
#[macro_export]
macro_rules! __command_rows {
    ($callback:ident; $(
        $(#[doc = $doc:tt])+
        $variant:ident = $name:tt $handler:ident $(/ $js:ident)? ($request:ident $(by $acting:ident)?) -> $output:ident
            $($or_nothing:ident)? : $effect:ident $(($flag:ident writes))? $(, $own:ident)? ;
    )+) => {
        $callback! { $(
            {
                docs: [$($doc)+],
                variant: $variant,
                name: $name,
                handler: $handler,
                js: [$($js)? $handler],
                request: $request,
                acting: [$($acting)?],
                output: $output,
                or_nothing: [$($or_nothing)?],
                effect: $effect,
                writes_if: [$($flag)?],
                transactions: [$($own)?],
            }
        )+ }
    };
}

/// What a command does to the store, as a host needs to know it: whether
/// waiters may have something new after it, whether it may block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Only reads: changes nothing, wakes nobody.
    Read,
    /// May change the store, so waiters should look again after it.
    Write,
    /// Reads once; a host that wants to block drives it with a
    /// [`crate::Waiter`] until it finds something or times out.
    Wait,
}

/// Generates [`Command`], [`Request`] and [`Output`] from the table.
macro_rules! define_commands {
    ($({
        docs: [$($doc:tt)+],
        variant: $variant:ident,
        name: $name:tt,
        handler: $handler:ident,
        js: [$($js:ident)+],
        request: $request:ident,
        acting: [$($acting:ident)?],
        output: $output:ident,
        or_nothing: [$($or_nothing:ident)?],
        effect: $effect:ident,
        writes_if: [$($flag:ident)?],
        transactions: [$($own:ident)?],
    })+) => {
        /// Which command: the name shared by the wire format, the command
        /// line, the JavaScript API and every response's `command` field.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        pub enum Command {
            $($(#[doc = $doc])+ #[serde(rename = $name)] $variant,)+
        }

        impl Vocabulary for Command {
            const NOUN: &'static str = "command";
            const ALL: &'static [Command] = &[$(Command::$variant,)+];

            fn as_str(self) -> &'static str {
                match self { $(Command::$variant => $name,)+ }
            }

            fn description(self) -> &'static str {
                match self { $(Command::$variant => concat!($($doc),+).trim_ascii_start(),)+ }
            }
        }

        impl Command {
            /// The effect of this command's requests, unless a request says
            /// otherwise (see [`Request::effect`]).
            pub fn effect(self) -> Effect {
                match self { $(Command::$variant => Effect::$effect,)+ }
            }

            /// The request field that makes a request of this command a
            /// write (`show`'s `mark_read`), if there is one.
            pub fn writes_if(self) -> Option<&'static str> {
                match self { $(Command::$variant => None $(.or(Some(stringify!($flag))))?,)+ }
            }

            /// Whether the command looks for something and may find
            /// nothing (exit 10): the table's `or_nothing`.
            pub fn may_find_nothing(self) -> bool {
                match self { $(Command::$variant => false $(|| !stringify!($or_nothing).is_empty())?,)+ }
            }

            /// Whether each look of this wait first records what it waits
            /// on, in a write transaction (the table's `records`): a host
            /// must not run it against a store it may not write.
            pub fn records_first(self) -> bool {
                match self { $(Command::$variant => false $(|| stringify!($own) == "records")?,)+ }
            }

            /// Whether the command opens its own transactions (the
            /// table's `own`: `init`, `sweep`, `version`).
            pub fn opens_own_transactions(self) -> bool {
                match self { $(Command::$variant => false $(|| stringify!($own) == "own")?,)+ }
            }

            /// The request field naming the agent this command acts as
            /// (the table's `acting`): the agent whose token it carries
            /// when the database requires tokens, and the field the MCP
            /// server fills in with its own agent.
            pub fn acting_field(self) -> Option<&'static str> {
                match self { $(Command::$variant => None $(.or(Some(stringify!($acting))))?,)+ }
            }

            /// A request of this command with every field left out.
            pub fn empty_request(self) -> Request {
                match self { $(Command::$variant => Request::$variant($request::default()),)+ }
            }
        }

        /// One command, as every host passes it to the engine.
        #[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "command")]
        pub enum Request {
            $($(#[doc = $doc])+ #[serde(rename = $name)] $variant($request),)+
        }

        impl Request {
            /// Which command this is.
            pub fn command(&self) -> Command {
                match self { $(Request::$variant(_) => Command::$variant,)+ }
            }

            /// What this request does to the store: its command's effect,
            /// or [`Effect::Write`] where the table names a field that makes
            /// a read write (`show` with `mark_read`).
            pub fn effect(&self) -> Effect {
                match self {
                    $(Request::$variant(_request) => {
                        $(if _request.$flag { return Effect::Write; })?
                        Effect::$effect
                    })+
                }
            }

            /// The agent this request acts as: its table's `acting` field,
            /// if given.
            pub fn actor(&self) -> Option<&str> {
                match self {
                    $(Request::$variant(_request) => None $(.or(_request.$acting.as_deref()))?,)+
                }
            }

            /// Decodes the fields of `command`'s request.
            pub(crate) fn decode_fields(command: Command, fields: serde_json::Value) -> Result<Request, String> {
                match command { $(Command::$variant => decode(fields).map(Request::$variant),)+ }
            }
        }

        /// What a successful command returns, tagged by `command`.
        #[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "command")]
        pub enum Output {
            $(#[doc = concat!("`", $name, "`")] #[serde(rename = $name)] $variant($output),)+
        }

        impl Output {
            /// Which command produced it.
            pub fn command(&self) -> Command {
                match self { $(Output::$variant(_) => Command::$variant,)+ }
            }

            /// Whether a command that looks for something (`fetch`,
            /// `claim` with `next`, a wait, ...) found nothing, which exits
            /// 10. Which commands look is the table's `or_nothing`; what
            /// counts as nothing is each output's [`Found`].
            pub fn found_nothing(&self) -> bool {
                match self {
                    $(Output::$variant(_out) => {
                        false $(|| (!stringify!($or_nothing).is_empty() && !Found::found(_out)))?
                    })+
                }
            }
        }
    };
}

for_each_command!(define_commands);

impl Command {
    /// Every command, in documentation order.
    pub const ALL: &'static [Command] = <Command as Vocabulary>::ALL;

    /// The wire and command-line name.
    pub fn as_str(self) -> &'static str {
        Vocabulary::as_str(self)
    }

    /// What the command does, in one sentence.
    pub fn description(self) -> &'static str {
        Vocabulary::description(self)
    }

    /// Parses a command name; `None` for anything else.
    pub fn parse(text: &str) -> Option<Command> {
        <Command as Vocabulary>::parse(text)
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decodes one command's fields. Decoding each command's struct directly
/// (rather than the tagged enum, which serde buffers) lets
/// serde_path_to_error name the field that failed: "`lease_seconds`:
/// invalid value ...".
fn decode<T: serde::de::DeserializeOwned>(fields: serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(fields).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner().to_string();
        if path == "." || path.is_empty() || inner.starts_with("unknown field") {
            inner
        } else {
            format!("`{path}`: {inner}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_decode_as_their_serde_tag() {
        for &command in Command::ALL {
            let json = serde_json::to_value(command.empty_request()).unwrap_or_default();
            assert_eq!(json["command"], command.as_str());
            let back = Request::from_value(json);
            assert!(back.is_ok_and(|r| r.command() == command), "{command}");
        }
    }

    #[test]
    fn descriptions_are_one_sentence_without_leading_space() {
        for &command in Command::ALL {
            let text = command.description();
            assert!(
                !text.starts_with(' ') && text.ends_with('.'),
                "{command}: {text:?}"
            );
        }
    }
}
