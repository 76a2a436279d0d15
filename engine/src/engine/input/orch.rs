//! Input checks of the orch commands: one function per command, named
//! after its handler, pure like every check in `input`. A plan's problems
//! are reported with the JSON path of the value at fault (`tasks[3].needs[0]`).

use crate::address;
use crate::error::EngineError;
use crate::model::Priority;
use crate::orch::council;
use crate::orch::model::{RepoSpec, RetryPolicy, RunStatus};
use crate::orch::rules::{self, DEFAULT_RETRY};
use crate::orch::workspace;
use crate::validate as v;
use crate::wire::*;

/// The leader of an orch write and the run it names, if it names one.
#[derive(Clone)]
pub(in crate::engine) struct Leader {
    pub(in crate::engine) agent: String,
    pub(in crate::engine) run_id: Option<String>,
}

impl Leader {
    fn check(agent: &Option<String>, run_id: &Option<String>) -> Result<Leader, EngineError> {
        Ok(Leader {
            agent: v::agent("agent", agent)?.to_owned(),
            run_id: run(run_id)?,
        })
    }
}

fn run(run_id: &Option<String>) -> Result<Option<String>, EngineError> {
    Ok(v::optional_name("run_id", run_id)?.map(str::to_owned))
}

fn task_name(field: &str, value: &Option<String>) -> Result<String, EngineError> {
    Ok(v::name(
        field,
        value,
        "give the task id, as in the plan, e.g. api-login",
    )?
    .to_owned())
}

pub(in crate::engine) struct RunCreateInput {
    pub(in crate::engine) agent: String,
    pub(in crate::engine) run_id: Option<String>,
    pub(in crate::engine) goal: String,
    pub(in crate::engine) repo: Option<RepoSpec>,
}

pub(in crate::engine) fn orch_run_create(
    r: OrchRunCreateRequest,
) -> Result<RunCreateInput, EngineError> {
    let goal = v::required("goal", &r.goal, "say in one line what the run is for")?;
    v::line("goal", goal, v::SUBJECT_MAX_CHARS)?;
    let repo = repo_spec(&r)?;
    Ok(RunCreateInput {
        agent: v::agent("agent", &r.agent)?.to_owned(),
        run_id: run(&r.run_id)?,
        goal: goal.to_owned(),
        repo,
    })
}

/// The run's repository settings, if it names a repository; refuses
/// worktree settings without one.
fn repo_spec(r: &OrchRunCreateRequest) -> Result<Option<RepoSpec>, EngineError> {
    let Some(repo) = &r.repo else {
        let stray = [
            ("worktrees", r.worktrees.is_some()),
            ("base", r.base.is_some()),
            ("strict", r.strict),
        ];
        return match stray.iter().find(|(_, given)| *given) {
            Some((field, _)) => Err(EngineError::invalid(
                *field,
                "applies to a run with a repository; give `repo` too",
            )),
            None => Ok(None),
        };
    };
    let repo = absolute_path("repo", repo)?;
    let worktrees = match &r.worktrees {
        Some(folder) => absolute_path("worktrees", folder)?,
        None => workspace::default_worktrees(&repo),
    };
    if worktrees.split('/').any(|part| part == ".git") {
        return Err(EngineError::invalid(
            "worktrees",
            "is inside a .git folder, which is git's own; choose a folder of orch's",
        ));
    }
    Ok(Some(RepoSpec {
        repo,
        worktrees,
        base: revision("base", r.base.as_deref())?.unwrap_or_else(|| "HEAD".to_owned()),
        strict: r.strict,
        worktrees_named: r.worktrees.is_some(),
    }))
}

/// An absolute path, as the host made it (without a trailing `/`).
fn absolute_path(field: &str, path: &str) -> Result<String, EngineError> {
    // The same bound as an artifact's path: the longest path systems take.
    v::line(field, path, v::ARTIFACT_PATH_MAX_BYTES)?;
    let absolute = path.starts_with('/')
        || (path.len() > 2 && path.as_bytes()[1] == b':' && path.as_bytes()[2] == b'\\');
    if !absolute {
        return Err(EngineError::invalid(
            field,
            format!("`{path}` is not an absolute path; give the full path"),
        ));
    }
    let trimmed = path.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/" } else { trimmed }.to_owned())
}

/// A git revision as given (`HEAD`, `main`, a commit id, `task:ID`):
/// one line that cannot be read as an option of git.
fn revision(field: &str, given: Option<&str>) -> Result<Option<String>, EngineError> {
    let Some(rev) = given else {
        return Ok(None);
    };
    v::line(field, rev, v::SUMMARY_MAX_CHARS)?;
    if rev.starts_with('-') || rev.chars().any(char::is_whitespace) {
        return Err(EngineError::invalid(
            field,
            format!(
                "`{rev}` is not a revision: no leading `-`, no spaces (e.g. HEAD, main, a commit id, task:ID)"
            ),
        ));
    }
    Ok(Some(rev.to_owned()))
}

#[derive(Clone)]
pub(in crate::engine) struct RunListInput {
    pub(in crate::engine) agent: Option<String>,
    pub(in crate::engine) statuses: Vec<RunStatus>,
    pub(in crate::engine) limit: usize,
}

pub(in crate::engine) fn orch_run_list(r: OrchRunListRequest) -> Result<RunListInput, EngineError> {
    Ok(RunListInput {
        agent: v::optional_agent("agent", &r.agent)?.map(str::to_owned),
        statuses: r.status,
        limit: v::limit(r.limit, v::DEFAULT_LIST_LIMIT)?,
    })
}

pub(in crate::engine) struct RunCancelInput {
    pub(in crate::engine) leader: Leader,
    pub(in crate::engine) reason: String,
}

pub(in crate::engine) fn orch_run_cancel(
    r: OrchRunCancelRequest,
) -> Result<RunCancelInput, EngineError> {
    let reason = r
        .reason
        .unwrap_or_else(|| "the run was cancelled".to_owned());
    v::line("reason", &reason, v::SUMMARY_MAX_CHARS)?;
    Ok(RunCancelInput {
        leader: Leader::check(&r.agent, &r.run_id)?,
        reason,
    })
}

/// A read of one run: which run, and how long its lists may be.
#[derive(Clone)]
pub(in crate::engine) struct RunRead {
    pub(in crate::engine) run_id: Option<String>,
    pub(in crate::engine) limit: usize,
}

pub(in crate::engine) fn orch_status(r: OrchStatusRequest) -> Result<RunRead, EngineError> {
    Ok(RunRead {
        run_id: run(&r.run_id)?,
        limit: v::limit(r.limit, v::DEFAULT_LIST_LIMIT)?,
    })
}

pub(in crate::engine) fn orch_ready(r: OrchReadyRequest) -> Result<RunRead, EngineError> {
    Ok(RunRead {
        run_id: run(&r.run_id)?,
        limit: v::limit(r.limit, v::DEFAULT_LIST_LIMIT)?,
    })
}

/// A task as checked: everything [`crate::orch::model::Task`] takes from the
/// leader.
pub(in crate::engine) struct NewTask {
    pub(in crate::engine) task_id: String,
    pub(in crate::engine) title: String,
    pub(in crate::engine) body: String,
    pub(in crate::engine) acceptance: Vec<String>,
    pub(in crate::engine) assignee: String,
    pub(in crate::engine) priority: Priority,
    pub(in crate::engine) needs: Vec<String>,
    pub(in crate::engine) retry: RetryPolicy,
    pub(in crate::engine) review: bool,
    pub(in crate::engine) base: Option<String>,
    /// The council seat it is (`orch council` only; a plan cannot say).
    pub(in crate::engine) council: Option<council::CouncilSeat>,
}

/// Checks one task; `at` is its JSON path (`task`, `tasks[3]`), which every
/// field's error names.
fn new_task(spec: TaskSpec, at: &str) -> Result<NewTask, EngineError> {
    let field = |name: &str| format!("{at}.{name}");
    let task_id = task_name(&field("task_id"), &spec.task_id)?;
    let retry = retry_policy(&spec, at)?;
    let title = v::required(
        &field("title"),
        &spec.title,
        "say in one line what the work is",
    )?;
    v::line(&field("title"), title, v::SUBJECT_MAX_CHARS)?;
    let body = v::body(spec.body).map_err(|e| at_path(e, &field("body")))?;
    if spec.acceptance.len() > rules::MAX_ACCEPTANCE {
        return Err(EngineError::invalid(
            field("acceptance"),
            format!(
                "has {} criteria; at most {}",
                spec.acceptance.len(),
                rules::MAX_ACCEPTANCE
            ),
        ));
    }
    for (i, criterion) in spec.acceptance.iter().enumerate() {
        v::line(
            &format!("{at}.acceptance[{i}]"),
            criterion,
            v::SUMMARY_MAX_CHARS,
        )?;
    }
    let assignee = address::work_address(&field("assignee"), &spec.assignee)?;
    if spec.needs.len() > rules::MAX_NEEDS {
        return Err(EngineError::invalid(
            field("needs"),
            format!(
                "has {} needs; at most {}",
                spec.needs.len(),
                rules::MAX_NEEDS
            ),
        ));
    }
    let mut needs: Vec<String> = Vec::with_capacity(spec.needs.len());
    for (i, need) in spec.needs.into_iter().enumerate() {
        let need = task_name(&format!("{at}.needs[{i}]"), &Some(need))?;
        if !needs.contains(&need) {
            needs.push(need);
        }
    }
    Ok(NewTask {
        retry,
        title: title.to_owned(),
        task_id,
        body,
        acceptance: spec.acceptance,
        assignee,
        priority: spec.priority.unwrap_or(Priority::Normal),
        base: task_base(&field("base"), spec.base.as_deref(), &needs)?,
        needs,
        review: spec.review.unwrap_or(false),
        council: None,
    })
}

/// A task's base: a revision, or `task:ID` naming a task it needs (whose
/// accepted branch it starts from).
fn task_base(
    field: &str,
    given: Option<&str>,
    needs: &[String],
) -> Result<Option<String>, EngineError> {
    let base = revision(field, given)?;
    if let Some(dependency) = base.as_deref().and_then(|b| b.strip_prefix("task:"))
        && !needs.iter().any(|n| n == dependency)
    {
        return Err(EngineError::invalid(
            field,
            format!("names task {dependency}, which the task does not need; add it to `needs`"),
        ));
    }
    Ok(base)
}

fn retry_policy(spec: &TaskSpec, at: &str) -> Result<RetryPolicy, EngineError> {
    let max_attempts = v::bounded(
        &format!("{at}.max_attempts"),
        spec.max_attempts.map(u64::from),
        u64::from(DEFAULT_RETRY.max_attempts),
        u64::from(v::MAX_ATTEMPTS_LIMIT),
    )?;
    let seconds = |name: &str, value: Option<u64>, default: u64| match value {
        None => Ok(default),
        Some(s) if s <= rules::MAX_BACKOFF_SECONDS => Ok(s),
        Some(s) => Err(EngineError::invalid(
            format!("{at}.{name}"),
            format!(
                "is {s}; it must be between 0 and {}",
                rules::MAX_BACKOFF_SECONDS
            ),
        )),
    };
    let backoff_factor = spec.backoff_factor.unwrap_or(DEFAULT_RETRY.backoff_factor);
    if !(1.0..=rules::MAX_BACKOFF_FACTOR).contains(&backoff_factor) {
        return Err(EngineError::invalid(
            format!("{at}.backoff_factor"),
            format!(
                "is {backoff_factor}; it must be between 1 and {}",
                rules::MAX_BACKOFF_FACTOR
            ),
        ));
    }
    Ok(RetryPolicy {
        max_attempts: u32::try_from(max_attempts).unwrap_or(v::MAX_ATTEMPTS_LIMIT),
        backoff_seconds: seconds(
            "backoff_seconds",
            spec.backoff_seconds,
            DEFAULT_RETRY.backoff_seconds,
        )?,
        backoff_factor,
        max_backoff_seconds: seconds(
            "max_backoff_seconds",
            spec.max_backoff_seconds,
            DEFAULT_RETRY.max_backoff_seconds,
        )?,
    })
}

/// Renames the field of a check's error to its place in the request.
fn at_path(error: EngineError, path: &str) -> EngineError {
    match error {
        EngineError::TooLong {
            actual,
            limit,
            unit,
            ..
        } => EngineError::TooLong {
            field: path.to_owned(),
            actual,
            limit,
            unit,
        },
        other => other,
    }
}

pub(in crate::engine) struct PlanInput {
    pub(in crate::engine) leader: Leader,
    pub(in crate::engine) tasks: Vec<NewTask>,
    /// `orch-task-add`: its one task is at `task`, not `tasks[0]`.
    pub(in crate::engine) single: bool,
}

pub(in crate::engine) fn orch_task_add(r: OrchTaskAddRequest) -> Result<PlanInput, EngineError> {
    let leader = Leader::check(&r.agent, &r.run_id)?;
    let Some(spec) = r.task else {
        return Err(EngineError::missing(
            "task",
            "give the task: its task_id, title and assignee at least",
        ));
    };
    Ok(PlanInput {
        leader,
        tasks: vec![new_task(spec, "task")?],
        single: true,
    })
}

pub(in crate::engine) fn orch_plan(r: OrchPlanRequest) -> Result<PlanInput, EngineError> {
    let leader = Leader::check(&r.agent, &r.run_id)?;
    if r.tasks.is_empty() {
        return Err(EngineError::missing(
            "tasks",
            "a plan adds at least one task: {\"tasks\": [{\"task_id\": ..., \"title\": ..., \"assignee\": ...}]}",
        ));
    }
    if r.tasks.len() > rules::MAX_PLAN_TASKS {
        return Err(EngineError::invalid(
            "tasks",
            format!(
                "has {} tasks; one plan adds at most {}: split it",
                r.tasks.len(),
                rules::MAX_PLAN_TASKS
            ),
        ));
    }
    let tasks = r
        .tasks
        .into_iter()
        .enumerate()
        .map(|(i, spec)| new_task(spec, &format!("tasks[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PlanInput {
        leader,
        tasks,
        single: false,
    })
}

#[derive(Clone)]
pub(in crate::engine) struct DispatchInput {
    pub(in crate::engine) leader: Leader,
    /// One task, or `None` for every ready one.
    pub(in crate::engine) task_id: Option<String>,
    pub(in crate::engine) limit: usize,
}

pub(in crate::engine) fn orch_dispatch(
    r: OrchDispatchRequest,
) -> Result<DispatchInput, EngineError> {
    let leader = Leader::check(&r.agent, &r.run_id)?;
    let task_id = match (&r.task_id, r.all_ready) {
        (Some(_), true) => {
            return Err(EngineError::invalid(
                "all_ready",
                "cannot be combined with task_id; dispatch one task or every ready one",
            ));
        }
        (None, false) => {
            return Err(EngineError::missing(
                "task_id",
                "name the task to dispatch, or say all_ready (--all-ready) for every ready task",
            ));
        }
        (Some(_), false) => Some(task_name("task_id", &r.task_id)?),
        (None, true) => None,
    };
    if task_id.is_some() && r.limit.is_some() {
        return Err(EngineError::invalid("limit", "only applies with all_ready"));
    }
    Ok(DispatchInput {
        leader,
        task_id,
        limit: v::limit(r.limit, v::MAX_LIMIT)?,
    })
}

#[derive(Clone)]
pub(in crate::engine) struct TaskRead {
    pub(in crate::engine) run_id: Option<String>,
    pub(in crate::engine) task_id: String,
}

pub(in crate::engine) fn orch_task_show(r: OrchTaskShowRequest) -> Result<TaskRead, EngineError> {
    Ok(TaskRead {
        run_id: run(&r.run_id)?,
        task_id: task_name("task_id", &r.task_id)?,
    })
}

/// A leader's decision about one task, checked for what its command takes.
#[derive(Clone)]
pub(in crate::engine) struct Decision {
    pub(in crate::engine) leader: Leader,
    pub(in crate::engine) task_id: String,
    pub(in crate::engine) summary: Option<String>,
    pub(in crate::engine) body: String,
    pub(in crate::engine) to: Option<String>,
    pub(in crate::engine) cascade: bool,
}

/// Which fields of [`OrchTaskRequest`] a command takes.
struct Takes {
    summary: Need,
    body: bool,
    to: Need,
    cascade: bool,
}

#[derive(PartialEq)]
enum Need {
    No,
    Optional,
    Required(&'static str),
}

fn decision(r: OrchTaskRequest, takes: Takes) -> Result<Decision, EngineError> {
    let leader = Leader::check(&r.agent, &r.run_id)?;
    let task_id = task_name("task_id", &r.task_id)?;
    let refuse =
        |field: &str| EngineError::invalid(field, "is not taken by this command; leave it out");
    let summary = match (&takes.summary, &r.summary) {
        (Need::No, Some(_)) => return Err(refuse("summary")),
        (Need::Required(hint), None) => return Err(EngineError::missing("summary", *hint)),
        (_, Some(text)) => {
            v::line("summary", text, v::SUMMARY_MAX_CHARS)?;
            Some(text.clone())
        }
        (_, None) => None,
    };
    if !takes.body && r.body.is_some() {
        return Err(refuse("body"));
    }
    let to = match (&takes.to, &r.to) {
        (Need::No, Some(_)) => return Err(refuse("to")),
        (Need::Required(hint), None) => return Err(EngineError::missing("to", *hint)),
        (_, Some(_)) => Some(address::work_address("to", &r.to)?),
        (_, None) => None,
    };
    if !takes.cascade && r.cascade {
        return Err(refuse("cascade"));
    }
    Ok(Decision {
        leader,
        task_id,
        summary,
        body: v::body(r.body)?,
        to,
        cascade: r.cascade,
    })
}

pub(in crate::engine) fn orch_accept(r: OrchTaskRequest) -> Result<Decision, EngineError> {
    let takes = Takes {
        summary: Need::Optional,
        body: false,
        to: Need::No,
        cascade: false,
    };
    decision(r, takes)
}

pub(in crate::engine) fn orch_reject(r: OrchTaskRequest) -> Result<Decision, EngineError> {
    let hint = "say in one line why the result is not accepted; the next attempt's worker reads it";
    let takes = Takes {
        summary: Need::Required(hint),
        body: true,
        to: Need::No,
        cascade: false,
    };
    decision(r, takes)
}

pub(in crate::engine) fn orch_answer(r: OrchTaskRequest) -> Result<Decision, EngineError> {
    let hint = "write the answer in one line (details in body)";
    let takes = Takes {
        summary: Need::Required(hint),
        body: true,
        to: Need::No,
        cascade: false,
    };
    decision(r, takes)
}

pub(in crate::engine) fn orch_retry(r: OrchTaskRequest) -> Result<Decision, EngineError> {
    let takes = Takes {
        summary: Need::Optional,
        body: false,
        to: Need::Optional,
        cascade: false,
    };
    decision(r, takes)
}

pub(in crate::engine) fn orch_reassign(r: OrchTaskRequest) -> Result<Decision, EngineError> {
    let hint = "name the agent who takes the task over";
    let takes = Takes {
        summary: Need::Optional,
        body: false,
        to: Need::Required(hint),
        cascade: false,
    };
    decision(r, takes)
}

pub(in crate::engine) fn orch_cancel(r: OrchTaskRequest) -> Result<Decision, EngineError> {
    let takes = Takes {
        summary: Need::Optional,
        body: false,
        to: Need::No,
        cascade: true,
    };
    decision(r, takes)
}

#[derive(Clone)]
pub(in crate::engine) struct OrchWaitInput {
    pub(in crate::engine) run_id: Option<String>,
    pub(in crate::engine) after_event: Option<crate::model::EventId>,
    pub(in crate::engine) limit: usize,
}

pub(in crate::engine) fn orch_wait(r: OrchWaitRequest) -> Result<OrchWaitInput, EngineError> {
    v::timeout(r.timeout_seconds)?;
    Ok(OrchWaitInput {
        run_id: run(&r.run_id)?,
        after_event: r.after_event,
        limit: v::limit(r.limit, v::DEFAULT_WATCH_LIMIT)?,
    })
}

pub(in crate::engine) fn orch_reconcile(
    r: OrchReconcileRequest,
) -> Result<Option<String>, EngineError> {
    run(&r.run_id)
}

/// `orch worktree list` and `gc`: which run, and whether to do anything.
#[derive(Clone)]
pub(in crate::engine) struct WorktreeInput {
    pub(in crate::engine) run_id: Option<String>,
    pub(in crate::engine) dry_run: bool,
}

pub(in crate::engine) fn orch_worktree_list(
    r: OrchWorktreeListRequest,
) -> Result<WorktreeInput, EngineError> {
    Ok(WorktreeInput {
        run_id: run(&r.run_id)?,
        dry_run: true,
    })
}

pub(in crate::engine) fn orch_worktree_gc(
    r: OrchWorktreeGcRequest,
) -> Result<WorktreeInput, EngineError> {
    Ok(WorktreeInput {
        run_id: run(&r.run_id)?,
        dry_run: r.dry_run,
    })
}

/// `orch-council`, checked: the subject, and one reviewer address per seat
/// in seat order.
pub(in crate::engine) struct CouncilInput {
    pub(in crate::engine) leader: Leader,
    pub(in crate::engine) council_id: Option<String>,
    pub(in crate::engine) subject: CouncilSubject,
    /// One address per seat: `seats[0]` holds seat A.
    pub(in crate::engine) seats: Vec<String>,
    pub(in crate::engine) ballot: bool,
}

/// What a council reviews, as every seat is sent it.
pub(in crate::engine) struct CouncilSubject {
    pub(in crate::engine) title: String,
    pub(in crate::engine) body: String,
    pub(in crate::engine) files: Vec<String>,
    pub(in crate::engine) diff: String,
    pub(in crate::engine) revision: Option<String>,
}

pub(in crate::engine) fn orch_council(r: OrchCouncilRequest) -> Result<CouncilInput, EngineError> {
    let leader = Leader::check(&r.agent, &r.run_id)?;
    let council_id = v::optional_name("council_id", &r.council_id)?.map(str::to_owned);
    if let Some(id) = council_id
        .as_deref()
        .filter(|id| id.len() > council::COUNCIL_ID_MAX_BYTES)
    {
        return Err(EngineError::TooLong {
            field: "council_id".into(),
            actual: Some(id.len()),
            limit: council::COUNCIL_ID_MAX_BYTES,
            unit: "bytes",
        });
    }
    let seats = council_seats(&r.reviewers, r.seats)?;
    Ok(CouncilInput {
        leader,
        council_id,
        subject: council_subject(r.title, r.body, r.files, r.diff, r.revision)?,
        seats,
        ballot: r.ballot,
    })
}

fn council_subject(
    title: Option<String>,
    body: Option<String>,
    files: Vec<String>,
    diff: Option<String>,
    revision: Option<String>,
) -> Result<CouncilSubject, EngineError> {
    let title = v::required("title", &title, "say in one line what is reviewed")?.to_owned();
    v::line("title", &title, v::SUBJECT_MAX_CHARS)?;
    let body = limited("body", body.unwrap_or_default(), council::BODY_MAX_BYTES)?;
    let diff = limited("diff", diff.unwrap_or_default(), council::DIFF_MAX_BYTES)?;
    if files.len() > council::MAX_FILES {
        let problem = format!(
            "names {} files; at most {}",
            files.len(),
            council::MAX_FILES
        );
        return Err(EngineError::invalid("files", problem));
    }
    for (i, file) in files.iter().enumerate() {
        v::line(&format!("files[{i}]"), file, council::PATH_MAX_BYTES)?;
    }
    if body.trim().is_empty() && diff.trim().is_empty() && files.is_empty() {
        return Err(EngineError::missing(
            "body",
            "give the reviewers something to review: a body, files or a diff",
        ));
    }
    if let Some(revision) = &revision {
        v::line("revision", revision, council::REVISION_MAX_CHARS)?;
    }
    Ok(CouncilSubject {
        title,
        body,
        files,
        diff,
        revision,
    })
}

/// `text`, if it is at most `max` bytes.
fn limited(field: &str, text: String, max: usize) -> Result<String, EngineError> {
    if text.len() > max {
        return Err(EngineError::TooLong {
            field: field.to_owned(),
            actual: Some(text.len()),
            limit: max,
            unit: "bytes",
        });
    }
    Ok(text)
}

/// Who holds each seat: the reviewers in the order named, then the roles
/// among them in turn for the seats left. An agent holds one seat at most
/// (two answers of one agent are not independent); a role's members may
/// fill several.
fn council_seats(reviewers: &[String], seats: Option<u32>) -> Result<Vec<String>, EngineError> {
    if reviewers.is_empty() {
        return Err(EngineError::missing(
            "reviewers",
            "name the reviewers: agents (one seat each) or role:NAME",
        ));
    }
    let mut named: Vec<String> = Vec::with_capacity(reviewers.len());
    for (i, reviewer) in reviewers.iter().enumerate() {
        let field = format!("reviewers[{i}]");
        let address = address::work_address(&field, &Some(reviewer.clone()))?;
        if let Some(first) = named.iter().position(|n| *n == address) {
            let problem =
                format!("names {address} again (also reviewers[{first}]); name each reviewer once");
            return Err(EngineError::invalid(field, problem));
        }
        named.push(address);
    }
    let roles: Vec<&String> = named.iter().filter(|n| n.starts_with("role:")).collect();
    let count = u32::try_from(named.len()).unwrap_or(u32::MAX);
    let default = match roles.is_empty() {
        true => count,
        false => count.max(council::DEFAULT_SEATS),
    };
    let seats = seats.unwrap_or(default);
    if !(council::MIN_SEATS..=council::MAX_SEATS).contains(&seats) {
        let problem = format!(
            "is {seats}; a council has {} to {} seats",
            council::MIN_SEATS,
            council::MAX_SEATS
        );
        return Err(EngineError::invalid("seats", problem));
    }
    if seats < count {
        let problem = format!("names {count} reviewers for {seats} seats; name one per seat");
        return Err(EngineError::invalid("reviewers", problem));
    }
    if seats > count && roles.is_empty() {
        let problem = format!(
            "names {count} agents for {seats} seats; an agent holds one seat at most (its answers would not be independent): name {seats}, add a role:NAME whose members fill the rest, or ask for {count} seats"
        );
        return Err(EngineError::invalid("reviewers", problem));
    }
    let extra = (0..(seats - count) as usize).map(|i| roles[i % roles.len()].clone());
    Ok(named.iter().cloned().chain(extra).collect())
}

/// `orch-council-show`, checked.
#[derive(Clone)]
pub(in crate::engine) struct CouncilRead {
    pub(in crate::engine) run_id: Option<String>,
    pub(in crate::engine) council_id: Option<String>,
}

pub(in crate::engine) fn orch_council_show(
    r: OrchCouncilShowRequest,
) -> Result<CouncilRead, EngineError> {
    Ok(CouncilRead {
        run_id: run(&r.run_id)?,
        council_id: v::optional_name("council_id", &r.council_id)?.map(str::to_owned),
    })
}
