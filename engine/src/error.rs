//! Everything that can go wrong, with a stable machine code and an exit-code
//! class for each: [`EngineError`], [`StoreError`], [`ErrorCode`].
//!
//! Codes are part of the wire contract: agents branch on them, so a code is
//! never renamed or reused for a different meaning. Messages are for people
//! and agents reading them: they say what is wrong and what to do next, and
//! may be reworded freely.

use crate::model::{LeaseToken, Status};
use crate::time::Timestamp;
use crate::vocabulary::vocabulary;

vocabulary! {
    /// The stable, snake_case code of every error the engine or a store
    /// returns, in documentation order.
    pub enum ErrorCode ("error code") {
        InvalidRequest = "invalid_request" : "The request could not be decoded: unknown command or field, wrong JSON type, unknown kind/status/priority, or a CLI usage error.",
        MissingField = "missing_field" : "A required field is absent or blank.",
        InvalidValue = "invalid_value" : "A field is well-formed but not allowed: out of range, bad characters, or a kind the command does not take.",
        TooLong = "too_long" : "A text or JSON field is over its documented limit.",
        InvalidPayload = "invalid_payload" : "A payload or artifact metadata is not valid JSON or not a JSON object.",
        InvalidAnswer = "invalid_answer" : "A council seat's `done` payload does not follow the council's answer shape; the message names the value by its JSON path. The thread stays open: correct the payload and run `done` again.",
        InvalidState = "invalid_state" : "The command is not allowed in the thread's current status, e.g. an update on a thread nobody claimed.",
        NotAssigned = "not_assigned" : "Only the thread's assignee, or a registered member of the role it is sent to, may claim it; a broadcast is information nobody claims.",
        ThreadFinished = "thread_finished" : "The thread is done, failed or cancelled and accepts nothing more; usually someone else got there first: move on.",
        LeaseConflict = "lease_conflict" : "The thread has a live lease (held by anyone, the same agent name included).",
        LeaseLost = "lease_lost" : "The caller's lease was replaced by a newer claim; stop working on the thread.",
        NotLeaseHolder = "not_lease_holder" : "The caller never held the thread's current lease.",
        ThreadNotFound = "thread_not_found" : "No thread has that id.",
        MessageNotFound = "message_not_found" : "No message with that id exists (in that thread).",
        AgentNotFound = "agent_not_found" : "No registered agent has that name.",
        UnknownRecipient = "unknown_recipient" : "The database sends only to registered agents (`agent_registration required`) and the address names an agent, or a role, nobody registered; the message names the closest registered names. Check the name, or register the agent first.",
        RunNotFound = "run_not_found" : "No orch run has that id (or no run is active and none was named).",
        TaskNotFound = "task_not_found" : "The run has no task with that id (as the task asked for, or as a need).",
        CouncilNotFound = "council_not_found" : "The run has no council with that id (or no council at all when none was named).",
        RunExists = "run_exists" : "A run with that id already exists; pick another id.",
        TaskExists = "task_exists" : "The run (or the plan) already has a task with that id; task ids are unique in a run.",
        DependencyCycle = "dependency_cycle" : "The needs given would make a task wait, through others, on itself; the message names the cycle.",
        TaskNotReady = "task_not_ready" : "Only a `ready` task can be dispatched; the message says what it waits on.",
        TaskNotInReview = "task_not_in_review" : "Only a task in `review` can be accepted or rejected.",
        TaskNotFailed = "task_not_failed" : "Only a `failed` task can be retried (a live one can be reassigned).",
        TaskNotBlocked = "task_not_blocked" : "Only a `blocked` task can be answered.",
        TaskHasDependents = "task_has_dependents" : "Cancelling the task would skip tasks that need it; say --cascade to do that.",
        TaskInvalidState = "task_invalid_state" : "The command is not allowed in the task's status (e.g. reassigning a task in review).",
        TaskBeingDispatched = "task_being_dispatched" : "Another command is starting the task's next attempt: it reserved the attempt and git is making its worktree. Look again in a moment (`orch status`); a reservation whose command stopped is undone by the next `orch dispatch`, `orch wait` or `orch worktree gc`.",
        TaskFinished = "task_finished" : "The task has ended (done, failed, cancelled or skipped) and the command needs one that has not.",
        IdempotencyConflict = "idempotency_conflict" : "The idempotency key was already used for a different request; a retry must repeat the request exactly, and a new request needs a new key.",
        AgentTokenRequired = "agent_token_required" : "The database requires agent tokens and the command acts as a registered agent without its token, or registers an agent or changes a setting without the token of a registered agent: pass the token `agent register` printed, from its file (`--agent-token-file`, `$INBOX_AGENT_TOKEN_FILE`) or the environment (`$INBOX_AGENT_TOKEN`; `agent_token` in JSON). New agents are registered by a registered agent (the team's lead).",
        AgentTokenInvalid = "agent_token_invalid" : "The token given is not the acting agent's (another agent's, mistyped, or replaced), or, to register an agent or change a setting, no registered agent's; nothing was done.",
        AgentNotRegistered = "agent_not_registered" : "The database lets only registered agents act (`agent_tokens required` or `agent_registration required`) and the command acts as a name nobody registered; the message names the closest registered names. Act under your own registered name; new agents are registered by a registered agent (the team's lead).",
        CheckoutDirty = "checkout_dirty" : "Strict mode: the leader's checkout has uncommitted changes a new worktree would leave out; commit or stash them, or dispatch outside strict mode.",
        InvalidBase = "invalid_base" : "The base revision names no commit of the repository (unknown, a tree, an empty repository), or a task with no accepted branch.",
        WorktreeFailed = "worktree_failed" : "git could not make the attempt's worktree (its branch or folder exists, a symbolic link on the way, a permission); that task was not dispatched (with `--all-ready` it waits with the reason, and the other tasks are dispatched).",
        RepositoryNotFound = "repository_not_found" : "The run's repository is not a git repository (or is gone).",
        GitUnavailable = "git_unavailable" : "git is missing or older than 2.17, or this host runs no git (the npm package and the engine component do not): dispatch runs with a repository from the orch command line.",
        RunFinished = "run_finished" : "The run has ended; a succeeded or cancelled run changes no more (start another run).",
        StorageBusy = "storage_busy" : "The store stayed busy past its retry budget; retry.",
        SchemaTooNew = "schema_too_new" : "The store was written by a newer version of inbox; upgrade.",
        NotInitialized = "not_initialized" : "The store has not been initialized; run init.",
        StorageError = "storage_error" : "The store failed (I/O, corruption, host adapter error).",
        InternalError = "internal_error" : "A bug in inbox; please report it.",
    }
}

impl ErrorCode {
    /// The process exit code for this error: 20 conflict, 30 invalid input or
    /// transition, 40 not found, 50 storage or internal.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorCode::LeaseConflict
            | ErrorCode::LeaseLost
            | ErrorCode::NotLeaseHolder
            | ErrorCode::ThreadFinished
            | ErrorCode::TaskFinished
            | ErrorCode::TaskBeingDispatched
            | ErrorCode::RunFinished => 20,
            ErrorCode::InvalidRequest
            | ErrorCode::MissingField
            | ErrorCode::InvalidValue
            | ErrorCode::TooLong
            | ErrorCode::InvalidPayload
            | ErrorCode::InvalidAnswer
            | ErrorCode::InvalidState
            | ErrorCode::NotAssigned
            | ErrorCode::RunExists
            | ErrorCode::TaskExists
            | ErrorCode::DependencyCycle
            | ErrorCode::TaskNotReady
            | ErrorCode::TaskNotInReview
            | ErrorCode::TaskNotFailed
            | ErrorCode::TaskNotBlocked
            | ErrorCode::TaskHasDependents
            | ErrorCode::TaskInvalidState
            | ErrorCode::IdempotencyConflict
            | ErrorCode::AgentTokenRequired
            | ErrorCode::AgentTokenInvalid
            | ErrorCode::AgentNotRegistered
            | ErrorCode::CheckoutDirty
            | ErrorCode::InvalidBase
            | ErrorCode::WorktreeFailed => 30,
            ErrorCode::ThreadNotFound
            | ErrorCode::MessageNotFound
            | ErrorCode::AgentNotFound
            | ErrorCode::UnknownRecipient
            | ErrorCode::RunNotFound
            | ErrorCode::TaskNotFound
            | ErrorCode::RepositoryNotFound => 40,
            ErrorCode::CouncilNotFound => 40,
            ErrorCode::StorageBusy
            | ErrorCode::GitUnavailable
            | ErrorCode::SchemaTooNew
            | ErrorCode::NotInitialized
            | ErrorCode::StorageError
            | ErrorCode::InternalError => 50,
        }
    }
}

/// Why a command was refused or failed. Returned inside a [`crate::Response`]
/// rather than panicking; a failed command has changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// See [`ErrorCode::InvalidRequest`].
    #[error("{message}")]
    InvalidRequest {
        /// What could not be decoded, and where.
        message: String,
    },
    /// See [`ErrorCode::MissingField`].
    #[error("`{field}` is required: {hint}")]
    MissingField {
        /// The field, as spelled in the request.
        field: String,
        /// What to put there.
        hint: String,
    },
    /// See [`ErrorCode::InvalidValue`].
    #[error("`{field}` {problem}")]
    InvalidValue {
        /// The field, as spelled in the request.
        field: String,
        /// What is wrong and what is allowed.
        problem: String,
    },
    /// See [`ErrorCode::TooLong`].
    #[error(
        "`{field}` is {} {unit} long; the limit is {limit} {unit}; shorten it or move the detail into an artifact",
        match actual { Some(n) => n.to_string(), None => format!("more than {limit}") }
    )]
    TooLong {
        /// The field, as spelled in the request.
        field: String,
        /// Its length; `None` when a host stopped reading it at the limit
        /// (a stream is not read past the limit plus one byte).
        actual: Option<usize>,
        /// The documented limit.
        limit: usize,
        /// `characters` or `bytes`.
        unit: &'static str,
    },
    /// See [`ErrorCode::InvalidPayload`].
    #[error("`{field}` must be a JSON object ({problem}); pass e.g. {{\"key\": \"value\"}}")]
    InvalidPayload {
        /// The field, as spelled in the request.
        field: String,
        /// What the parser said or what type was given.
        problem: String,
    },
    /// See [`ErrorCode::InvalidAnswer`].
    #[error(
        "{path}: {problem}. Thread {thread_id} is seat {seat} of council {council_id} and stays open: correct the payload and run `inbox done` again (`orch skill council-review` shows the shape)"
    )]
    InvalidAnswer {
        /// The seat's thread.
        thread_id: String,
        /// The council.
        council_id: String,
        /// The seat.
        seat: String,
        /// The JSON path of the value at fault, from `payload`.
        path: String,
        /// What is wrong and what is allowed.
        problem: String,
    },
    /// See [`ErrorCode::InvalidState`].
    #[error("thread {thread_id} is {status}: {message}")]
    InvalidState {
        /// The thread.
        thread_id: String,
        /// Its status when the command arrived.
        status: Status,
        /// Why the command is not allowed and what would be.
        message: String,
    },
    /// See [`ErrorCode::ThreadFinished`].
    #[error("thread {thread_id} is {status}: {message}")]
    ThreadFinished {
        /// The thread.
        thread_id: String,
        /// Its terminal status.
        status: Status,
        /// What this means for the caller.
        message: String,
    },
    /// See [`ErrorCode::NotAssigned`].
    #[error("thread {thread_id} is assigned to {assigned_to}, not {agent}; {hint}")]
    NotAssigned {
        /// The thread.
        thread_id: String,
        /// Who asked.
        agent: String,
        /// Who may claim it (an address).
        assigned_to: String,
        /// Who may claim it, and what to do.
        hint: String,
    },
    /// See [`ErrorCode::LeaseConflict`].
    #[error(
        "thread {thread_id} is held by {holder} (lease token {lease_token}) until {expires_at}; pick another thread or wait for the lease to end"
    )]
    LeaseConflict {
        /// The thread.
        thread_id: String,
        /// The current holder.
        holder: String,
        /// The live lease's token.
        lease_token: LeaseToken,
        /// When the live lease runs out unless renewed.
        expires_at: Timestamp,
    },
    /// See [`ErrorCode::LeaseLost`].
    #[error(
        "lease on thread {thread_id} was lost: it is now held by {holder} with lease token {lease_token}; stop working on it"
    )]
    LeaseLost {
        /// The thread.
        thread_id: String,
        /// Who holds the newer lease.
        holder: String,
        /// The newer lease's token.
        lease_token: LeaseToken,
    },
    /// See [`ErrorCode::NotLeaseHolder`].
    #[error(
        "{agent} does not hold thread {thread_id}; {holder} does; claim a thread of your own before working on it"
    )]
    NotLeaseHolder {
        /// The thread.
        thread_id: String,
        /// Who asked.
        agent: String,
        /// Who holds it.
        holder: String,
    },
    /// See [`ErrorCode::ThreadNotFound`].
    #[error(
        "thread {thread_id} not found; check the id (thread ids start with thr_) and the database"
    )]
    ThreadNotFound {
        /// The id asked for.
        thread_id: String,
    },
    /// See [`ErrorCode::MessageNotFound`].
    #[error(
        "message {message_id} not found in thread {thread_id}; message ids start with msg_ and belong to one thread"
    )]
    MessageNotFound {
        /// The thread searched.
        thread_id: String,
        /// The id asked for.
        message_id: String,
    },
    /// See [`ErrorCode::MessageNotFound`]: a message named without its thread.
    #[error("no message has id {message_id}; message ids start with msg_")]
    UnknownMessage {
        /// The id asked for.
        message_id: String,
    },
    /// See [`ErrorCode::IdempotencyConflict`].
    #[error(
        "idempotency key `{key}` was used for another request ({command} at {created_at}); repeat that request exactly to get its outcome, or use a new key"
    )]
    IdempotencyConflict {
        /// The key.
        key: String,
        /// The command it was first used with.
        command: String,
        /// When.
        created_at: Timestamp,
    },
    /// See [`ErrorCode::AgentTokenRequired`].
    #[error("{agent} is a registered agent and this database requires agent tokens: {hint}")]
    AgentTokenRequired {
        /// The agent the command acts as.
        agent: String,
        /// How to get or pass its token.
        hint: String,
    },
    /// See [`ErrorCode::AgentTokenInvalid`].
    #[error(
        "the agent token given is not {agent}'s (nothing was done): pass {agent}'s own token, the one `inbox agent register` printed for it, from its file (--agent-token-file PATH or $INBOX_AGENT_TOKEN_FILE) or the environment ($INBOX_AGENT_TOKEN)"
    )]
    AgentTokenInvalid {
        /// The agent the command acts as.
        agent: String,
    },
    /// See [`ErrorCode::AgentTokenRequired`]: an act a registered agent
    /// vouches for (a registration, a settings change), without a token.
    #[error(
        "{act} needs the token of a registered agent, as this database requires agent tokens (nothing was done): {}",
        act.who_does_it()
    )]
    VouchRequired {
        /// What needed it.
        act: Vouched,
    },
    /// See [`ErrorCode::AgentTokenInvalid`]: an act a registered agent
    /// vouches for, with a token that is no registered agent's.
    #[error(
        "the agent token given is no registered agent's, and {act} needs one, as this database requires agent tokens (nothing was done): {}",
        act.who_does_it()
    )]
    VouchInvalid {
        /// What needed it.
        act: Vouched,
    },
    /// See [`ErrorCode::AgentNotRegistered`].
    #[error(
        "{agent} is not a registered agent, and this database lets only registered agents act ({setting}); nothing was done. {} Act under your own registered name{then}; a new agent is registered by a registered agent (the team's lead).",
        did_you_mean(closest, *known)
    )]
    AgentNotRegistered {
        /// The agent the command acts as.
        agent: String,
        /// The setting that asks for it (`agent_tokens required`,
        /// `agent_registration required`).
        setting: &'static str,
        /// How an agent shows it is itself (with tokens: with its token,
        /// and where it comes from).
        then: &'static str,
        /// The registered names close to it, closest first (a few).
        closest: Vec<String>,
        /// How many registered names there are.
        known: usize,
    },
    /// See [`ErrorCode::UnknownRecipient`].
    #[error("{}", recipient_message(place, address, role.as_deref(), (closest, *known)))]
    UnknownRecipient {
        /// Where the address was written: `to_agent`, `tasks[2].assignee`,
        /// "task T3's assignee".
        place: String,
        /// The address, as stored.
        address: String,
        /// The role, when the address is a role's (`role:NAME` or
        /// `broadcast:role:NAME`) that no registered agent holds.
        role: Option<String>,
        /// The registered names (for a role, the `role:` addresses of the
        /// roles held) close to it, closest first (a few).
        closest: Vec<String>,
        /// How many registered names (or roles held) there are.
        known: usize,
    },
    /// See [`ErrorCode::CheckoutDirty`].
    #[error(
        "{repo} has {count} uncommitted paths ({}) that a worktree of the base would leave out, and the run is strict; commit or stash them, or dispatch outside strict mode",
        shown.join(", ")
    )]
    CheckoutDirty {
        /// The repository.
        repo: String,
        /// The first few paths.
        shown: Vec<String>,
        /// How many in all.
        count: usize,
    },
    /// See [`ErrorCode::InvalidBase`].
    #[error("base `{base}` in {repo}: {why}")]
    InvalidBase {
        /// The revision asked for.
        base: String,
        /// The repository.
        repo: String,
        /// What is wrong and what to do.
        why: String,
    },
    /// See [`ErrorCode::WorktreeFailed`].
    #[error("could not make the worktree {path}: {message}")]
    WorktreeFailed {
        /// The worktree's folder.
        path: String,
        /// What git said.
        message: String,
    },
    /// See [`ErrorCode::RepositoryNotFound`].
    #[error("{repo} is not a git repository: {message}")]
    RepositoryNotFound {
        /// The path.
        repo: String,
        /// What git said.
        message: String,
    },
    /// See [`ErrorCode::GitUnavailable`].
    #[error("{message}")]
    GitUnavailable {
        /// Why, and what to do.
        message: String,
    },
    /// See [`ErrorCode::AgentNotFound`].
    #[error("no registered agent is named {agent}; `inbox agent list` shows who is")]
    AgentNotFound {
        /// The name asked for.
        agent: String,
    },
    /// See [`ErrorCode::RunNotFound`].
    #[error("{message}")]
    RunNotFound {
        /// The id asked for, if one was.
        run_id: Option<String>,
        /// What was not found and what to do.
        message: String,
    },
    /// See [`ErrorCode::TaskNotFound`].
    #[error("{message}")]
    TaskNotFound {
        /// The run searched.
        run_id: String,
        /// The id asked for.
        task_id: String,
        /// Where it was named and what to do.
        message: String,
    },
    /// See [`ErrorCode::CouncilNotFound`].
    #[error("{message}")]
    CouncilNotFound {
        /// The run searched.
        run_id: String,
        /// What was not found and what to do.
        message: String,
    },
    /// See [`ErrorCode::RunExists`].
    #[error("run {run_id} already exists; pick another id, or leave it out for a new one")]
    RunExists {
        /// The id given.
        run_id: String,
    },
    /// See [`ErrorCode::TaskExists`].
    #[error("{message}")]
    TaskExists {
        /// The run.
        run_id: String,
        /// The id given twice.
        task_id: String,
        /// Where the other one is.
        message: String,
    },
    /// See [`ErrorCode::DependencyCycle`].
    #[error(
        "these needs make a cycle: {}; a task cannot wait, through others, on itself: drop one of these needs",
        cycle.join(" needs ")
    )]
    DependencyCycle {
        /// The run.
        run_id: String,
        /// The cycle, first task repeated at the end.
        cycle: Vec<String>,
    },
    /// A command not allowed in a task's status; `code` says which rule.
    #[error("task {task_id} is {status}: {message}")]
    TaskState {
        /// Which of the task-status codes.
        code: ErrorCode,
        /// The run.
        run_id: String,
        /// The task.
        task_id: String,
        /// Its status when the command arrived.
        status: crate::orch::model::TaskStatus,
        /// Why, and what would be allowed.
        message: String,
    },
    /// See [`ErrorCode::TaskHasDependents`].
    #[error(
        "cancelling task {task_id} would skip the tasks that need it ({}); add --cascade (cascade: true) to cancel it and skip them",
        dependents.join(", ")
    )]
    TaskHasDependents {
        /// The run.
        run_id: String,
        /// The task.
        task_id: String,
        /// The tasks that would be skipped, directly or through others.
        dependents: Vec<String>,
    },
    /// See [`ErrorCode::RunFinished`].
    #[error("run {run_id} is {status}: {message}")]
    RunFinished {
        /// The run.
        run_id: String,
        /// Its status.
        status: crate::orch::model::RunStatus,
        /// What this means for the caller.
        message: String,
    },
    /// A store failure; its own code says which.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// See [`ErrorCode::InternalError`].
    #[error("internal error: {message}; this is a bug in inbox, please report it")]
    Internal {
        /// What the engine found impossible.
        message: String,
    },
    /// An error reported across a boundary, kept as its code and message: a
    /// response read back from JSON (an engine in a sandbox or another
    /// process), or a host's own failure around the engine (a plugin that
    /// trapped). Never made by the engine itself.
    #[error("{message}")]
    Relayed {
        /// The code, as the other side reported it.
        code: ErrorCode,
        /// The message, verbatim.
        message: String,
    },
}

impl EngineError {
    /// The stable machine code.
    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::InvalidRequest { .. } => ErrorCode::InvalidRequest,
            EngineError::MissingField { .. } => ErrorCode::MissingField,
            EngineError::InvalidValue { .. } => ErrorCode::InvalidValue,
            EngineError::TooLong { .. } => ErrorCode::TooLong,
            EngineError::InvalidPayload { .. } => ErrorCode::InvalidPayload,
            EngineError::InvalidAnswer { .. } => ErrorCode::InvalidAnswer,
            EngineError::InvalidState { .. } => ErrorCode::InvalidState,
            EngineError::ThreadFinished { .. } => ErrorCode::ThreadFinished,
            EngineError::NotAssigned { .. } => ErrorCode::NotAssigned,
            EngineError::LeaseConflict { .. } => ErrorCode::LeaseConflict,
            EngineError::LeaseLost { .. } => ErrorCode::LeaseLost,
            EngineError::NotLeaseHolder { .. } => ErrorCode::NotLeaseHolder,
            EngineError::ThreadNotFound { .. } => ErrorCode::ThreadNotFound,
            EngineError::MessageNotFound { .. } | EngineError::UnknownMessage { .. } => {
                ErrorCode::MessageNotFound
            }
            EngineError::AgentNotFound { .. } => ErrorCode::AgentNotFound,
            EngineError::IdempotencyConflict { .. } => ErrorCode::IdempotencyConflict,
            EngineError::AgentTokenRequired { .. } | EngineError::VouchRequired { .. } => {
                ErrorCode::AgentTokenRequired
            }
            EngineError::AgentTokenInvalid { .. } | EngineError::VouchInvalid { .. } => {
                ErrorCode::AgentTokenInvalid
            }
            EngineError::AgentNotRegistered { .. } => ErrorCode::AgentNotRegistered,
            EngineError::UnknownRecipient { .. } => ErrorCode::UnknownRecipient,
            EngineError::CheckoutDirty { .. } => ErrorCode::CheckoutDirty,
            EngineError::InvalidBase { .. } => ErrorCode::InvalidBase,
            EngineError::WorktreeFailed { .. } => ErrorCode::WorktreeFailed,
            EngineError::RepositoryNotFound { .. } => ErrorCode::RepositoryNotFound,
            EngineError::GitUnavailable { .. } => ErrorCode::GitUnavailable,
            EngineError::RunNotFound { .. } => ErrorCode::RunNotFound,
            EngineError::TaskNotFound { .. } => ErrorCode::TaskNotFound,
            EngineError::CouncilNotFound { .. } => ErrorCode::CouncilNotFound,
            EngineError::RunExists { .. } => ErrorCode::RunExists,
            EngineError::TaskExists { .. } => ErrorCode::TaskExists,
            EngineError::DependencyCycle { .. } => ErrorCode::DependencyCycle,
            EngineError::TaskState { code, .. } => *code,
            EngineError::TaskHasDependents { .. } => ErrorCode::TaskHasDependents,
            EngineError::RunFinished { .. } => ErrorCode::RunFinished,
            EngineError::Store(error) => error.code(),
            EngineError::Internal { .. } => ErrorCode::InternalError,
            EngineError::Relayed { code, .. } => *code,
        }
    }

    /// The process exit code (see [`ErrorCode::exit_code`]).
    pub fn exit_code(&self) -> u8 {
        self.code().exit_code()
    }

    pub(crate) fn missing(field: impl Into<String>, hint: impl Into<String>) -> EngineError {
        EngineError::MissingField {
            field: field.into(),
            hint: hint.into(),
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, problem: impl Into<String>) -> EngineError {
        EngineError::InvalidValue {
            field: field.into(),
            problem: problem.into(),
        }
    }

    pub(crate) fn state(
        thread_id: &str,
        status: Status,
        message: impl Into<String>,
    ) -> EngineError {
        EngineError::InvalidState {
            thread_id: thread_id.to_owned(),
            status,
            message: message.into(),
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> EngineError {
        EngineError::Internal {
            message: message.into(),
        }
    }
}

/// The tail of a message naming the registered names close to one that
/// is not: "; the closest registered agents: bob, rob", or that none is
/// close, or that there are none.
fn closest_note(closest: &[String], known: usize, what: &str) -> String {
    match (closest, known) {
        (_, 0) => format!("; there are no {what} yet"),
        ([], _) => {
            format!("; none of the {what} ({known}) is close to it, `inbox agent list` shows them")
        }
        _ => format!("; the closest {what}: {}", closest.join(", ")),
    }
}

/// What a refusal of an unregistered actor suggests: the registered names
/// close to it, or where to see them.
fn did_you_mean(closest: &[String], known: usize) -> String {
    match (closest, known) {
        (_, 0) => "No agent is registered yet: the team's lead registers first.".to_owned(),
        ([], 1) => {
            "No registered name is close to it (`inbox agent list` shows the one registered agent)."
                .to_owned()
        }
        ([], _) => format!(
            "No registered name is close to it (`inbox agent list` shows the {known} registered agents)."
        ),
        ([one], _) => format!("Did you mean {one}?"),
        ([first @ .., last], _) => format!("Did you mean {} or {last}?", first.join(", ")),
    }
}

/// An act that, while agent tokens are required, a registered agent
/// vouches for with its token ([`EngineError::VouchRequired`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vouched {
    /// Registering an agent that holds no token: a new name, or one
    /// registered before tokens were required.
    Registration {
        /// The name registered.
        agent: String,
    },
    /// Changing database-wide settings.
    Settings {
        /// The settings it would change, by field name.
        changed: Vec<String>,
    },
}

impl Vouched {
    /// Who does it, and how: what a refused caller needs to know.
    fn who_does_it(&self) -> &'static str {
        match self {
            Vouched::Registration { .. } => {
                "a registered agent (the team's lead) registers new agents, with its own token from its file \
                 (--agent-token-file PATH or $INBOX_AGENT_TOKEN_FILE) or the environment ($INBOX_AGENT_TOKEN), \
                 and hands each the token registering prints"
            }
            Vouched::Settings { .. } => {
                "the team's lead or the operator changes settings, with a registered agent's token from its file \
                 (--agent-token-file PATH or $INBOX_AGENT_TOKEN_FILE) or the environment ($INBOX_AGENT_TOKEN); \
                 showing them needs none"
            }
        }
    }
}

impl std::fmt::Display for Vouched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Vouched::Registration { agent } => write!(f, "registering {agent}"),
            Vouched::Settings { changed } => {
                write!(f, "changing the settings ({})", changed.join(", "))
            }
        }
    }
}

/// [`EngineError::UnknownRecipient`]'s message.
fn recipient_message(
    place: &str,
    address: &str,
    role: Option<&str>,
    (closest, known): (&[String], usize),
) -> String {
    let rule = "this database sends only to registered agents (agent_registration required)";
    match role {
        None => format!(
            "{place}: no registered agent is named {address}, and {rule}{}; check the name, or register the agent first with `inbox agent register --agent {address}`",
            closest_note(closest, known, "registered agents")
        ),
        Some(role) => format!(
            "{place}: no registered agent holds role {role} (the address is {address}), and {rule}{}; check the role, or register a member first with `inbox agent register --agent NAME --role {role}`",
            closest_note(closest, known, "roles held")
        ),
    }
}

/// What kind of store failure happened; decides the error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreErrorKind {
    /// Another writer held the store past the retry budget.
    Busy,
    /// Written by a newer version.
    SchemaTooNew,
    /// No schema yet.
    NotInitialized,
    /// Anything else: I/O, corruption, a broken host adapter, misuse of the
    /// transaction protocol.
    Other,
}

/// A failure reported by a [`crate::Store`]. The engine rolls the transaction
/// back and returns it as an error response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    /// Which code to report.
    pub kind: StoreErrorKind,
    /// What failed and what to do, in the store's words.
    pub message: String,
}

impl StoreError {
    /// A failure of `kind`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> StoreError {
        StoreError {
            kind,
            message: message.into(),
        }
    }

    /// An [`StoreErrorKind::Other`] failure.
    pub fn other(message: impl Into<String>) -> StoreError {
        StoreError::new(StoreErrorKind::Other, message)
    }

    /// [`crate::Store::update_thread`] of a thread that is not stored.
    pub fn missing_thread(thread_id: &str) -> StoreError {
        StoreError::other(format!("thread {thread_id} does not exist"))
    }

    /// [`crate::Store::update_thread`] that would change a field fixed
    /// when the thread was opened ([`crate::Thread::keeps_fixed_fields_of`]).
    pub fn fixed_fields_changed(thread_id: &str) -> StoreError {
        StoreError::other(format!(
            "thread {thread_id}: the update would change a field fixed when the thread was opened \
             (only its status, attempts, latest message, last event and updated_at change); \
             this is a bug in the engine, please report it"
        ))
    }

    /// The stable machine code.
    pub fn code(&self) -> ErrorCode {
        match self.kind {
            StoreErrorKind::Busy => ErrorCode::StorageBusy,
            StoreErrorKind::SchemaTooNew => ErrorCode::SchemaTooNew,
            StoreErrorKind::NotInitialized => ErrorCode::NotInitialized,
            StoreErrorKind::Other => ErrorCode::StorageError,
        }
    }
}
