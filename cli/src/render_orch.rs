//! Output for people, for the orch commands: a run at a glance (counts,
//! then what needs the leader, what is in flight, what waits on what), and
//! one line per task, event or attempt, with full ids to copy into the next
//! command. Like [`crate::render`], it only renders what the engine
//! returned (already made terminal-safe) and never decides anything.

use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};
use inbox_engine::orch::council_report::{CouncilReport, Group, GroupAnchor};
use inbox_engine::orch::model::{Attempt, OrchEvent, Run, RunStatus, Task, TaskStatus};
use inbox_engine::wire::*;
use inbox_engine::{Output, Timestamp};

const DIM: Style = Style::new().dimmed();
const BOLD: Style = Style::new().bold();

fn paint(style: Style, text: impl std::fmt::Display) -> String {
    format!("{style}{text}{style:#}")
}

fn task_style(status: TaskStatus) -> Style {
    match status {
        TaskStatus::Pending => Style::new().dimmed(),
        TaskStatus::Ready => AnsiColor::Yellow.on_default(),
        TaskStatus::Dispatched | TaskStatus::Running => AnsiColor::Cyan.on_default(),
        TaskStatus::Blocked | TaskStatus::Review => AnsiColor::Magenta.on_default(),
        TaskStatus::RetryWait => AnsiColor::Yellow.on_default(),
        TaskStatus::Done => AnsiColor::Green.on_default(),
        TaskStatus::Failed => AnsiColor::Red.on_default(),
        TaskStatus::Cancelled | TaskStatus::Skipped => Style::new().dimmed(),
    }
}

fn run_style(status: RunStatus) -> Style {
    match status {
        RunStatus::Active => AnsiColor::Cyan.on_default(),
        RunStatus::Succeeded => AnsiColor::Green.on_default(),
        RunStatus::Failed => AnsiColor::Red.on_default(),
        RunStatus::Cancelled => Style::new().dimmed(),
    }
}

/// The text for an orch output, or `None` for an output that is not orch's.
pub(crate) fn success(output: &Output, now: Timestamp) -> Option<String> {
    let text = match output {
        Output::OrchRunCreate(out) => format!("Created run {}\n", run_line(&out.run)),
        Output::OrchRunCancel(out) => format!("Cancelled run {}\n", run_line(&out.run)),
        Output::OrchRunList(out) if out.runs.is_empty() => "No runs match.\n".to_owned(),
        Output::OrchRunList(out) => out
            .runs
            .iter()
            .map(|r| format!("{}\n", run_line(r)))
            .collect(),
        Output::OrchStatus(out) => status(out, now),
        Output::OrchReady(out) if out.tasks.is_empty() => "Nothing is ready.\n".to_owned(),
        Output::OrchReady(out) => task_lines(&out.tasks, now),
        Output::OrchTaskAdd(out) => format!("Added {}\n", whole_task_line(&out.task, &[], now)),
        Output::OrchPlan(out) => plan(out),
        Output::OrchDispatch(out) => dispatch(out),
        Output::OrchTaskShow(out) => task_show(out, now),
        Output::OrchAccept(out)
        | Output::OrchReject(out)
        | Output::OrchAnswer(out)
        | Output::OrchRetry(out)
        | Output::OrchReassign(out)
        | Output::OrchCancel(out) => task_changed(out, now),
        Output::OrchWait(out) => wait(out, now),
        Output::OrchReconcile(out) => reconcile(out, now),
        Output::OrchWorktreeList(out) if out.worktrees.is_empty() => {
            "No attempt has a worktree (runs get them with orch run create --repo).\n".to_owned()
        }
        Output::OrchWorktreeList(out) => worktree_lines(&out.worktrees),
        Output::OrchWorktreeGc(out) => worktree_gc(out),
        Output::OrchCouncil(out) => council_started(out),
        Output::OrchCouncilShow(out) => council_report(&out.council),
        _ => return None,
    };
    Some(text)
}

/// `login (active): Ship the login page — 4 tasks: 1 done, 1 running, 2 pending`
fn run_line(run: &Run) -> String {
    format!(
        "{} ({}): {} — {}",
        paint(BOLD, &run.run_id),
        paint(run_style(run.status), run.status),
        run.goal,
        counts(run)
    )
}

fn counts(run: &Run) -> String {
    let total = run.counts.total();
    let parts: Vec<String> = TaskStatus::ALL
        .iter()
        .filter(|&&s| run.counts.of(s) > 0)
        .map(|&s| format!("{} {s}", run.counts.of(s)))
        .collect();
    match parts.is_empty() {
        true => "no tasks yet".to_owned(),
        false => format!("{}: {}", plural(total, "task"), parts.join(", ")),
    }
}

/// A whole task's line, as lists show it.
fn whole_task_line(task: &Task, waiting_on: &[String], now: Timestamp) -> String {
    let view = TaskView {
        task: task.clone(),
        waiting_on: waiting_on.to_vec(),
    };
    task_line(&TaskLine::from(view), now)
}

/// One task: id, status, title, assignee, and what matters about its status.
fn task_line(task: &TaskLine, now: Timestamp) -> String {
    let waiting_on = &task.waiting_on;
    let mut facts = vec![task.assignee.clone()];
    if task.attempts > 0 {
        facts.push(format!("attempt {}", task.attempts));
    }
    if let Some(thread) = task
        .thread_id
        .as_ref()
        .filter(|_| task.status.has_live_attempt())
    {
        facts.push(thread.clone());
    }
    let mut line = format!(
        "{:<12} {} {}  {}",
        task.task_id,
        paint(
            task_style(task.status),
            format!("{:<10}", task.status.as_str())
        ),
        task.title,
        paint(DIM, format!("({})", facts.join(", ")))
    );
    if !waiting_on.is_empty() {
        let _ = write!(line, "  waits on {}", waiting_on.join(", "));
    }
    if let Some(at) = task.retry_at {
        let left = at.as_millis() - now.as_millis();
        let _ = write!(line, "  next attempt in {}s", (left.max(0) + 999) / 1000);
    }
    if let Some(reason) = &task.reason {
        let label = match task.status {
            TaskStatus::Blocked => "asks",
            TaskStatus::Review => "result",
            _ => "why",
        };
        let _ = write!(line, "\n{:<12} {label}: {reason}", "");
    }
    line
}

fn task_lines(tasks: &[TaskLine], now: Timestamp) -> String {
    tasks
        .iter()
        .map(|t| format!("  {}\n", task_line(t, now)))
        .collect()
}

fn status(out: &StatusOutput, now: Timestamp) -> String {
    let mut text = format!("Run {}\n", run_line(&out.run));
    for (title, tasks) in [
        ("Needs you", &out.actionable),
        ("In flight", &out.in_flight),
        ("Waiting on others", &out.waiting),
    ] {
        if !tasks.is_empty() {
            let _ = write!(text, "{}:\n{}", paint(BOLD, title), task_lines(tasks, now));
        }
    }
    if out.run.status == RunStatus::Active && out.actionable.is_empty() {
        text.push_str("Nothing needs you now: `orch wait` sleeps until something does.\n");
    }
    text
}

fn plan(out: &PlanOutput) -> String {
    let ready = out
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Ready)
        .count();
    format!(
        "Added {} to run {} ({ready} ready): {}\n  next: orch dispatch --all-ready\n",
        plural(u64::try_from(out.tasks.len()).unwrap_or(u64::MAX), "task"),
        paint(BOLD, &out.run.run_id),
        counts(&out.run)
    )
}

fn dispatch(out: &DispatchOutput) -> String {
    if out.dispatched.is_empty() && out.refused.is_empty() {
        return "Nothing is ready to dispatch.\n".to_owned();
    }
    let n = out.dispatched.len();
    let mut text = match n {
        0 => "Dispatched nothing.\n".to_owned(),
        _ => format!("Dispatched {n} task{}:\n", if n == 1 { "" } else { "s" }),
    };
    for d in &out.dispatched {
        let _ = writeln!(text, "  {}", attempt_line(&d.task.task_id, &d.attempt));
    }
    if !out.refused.is_empty() {
        let n = u64::try_from(out.refused.len())
            .unwrap_or(u64::MAX)
            .saturating_add(out.refused_more);
        let _ = writeln!(
            text,
            "{}",
            paint(
                AnsiColor::Red.on_default(),
                format!(
                    "Not dispatched: {} (each waits, ready, with the reason in `orch status`):",
                    plural(n, "task")
                )
            )
        );
        for r in &out.refused {
            let _ = writeln!(text, "  {:<12} {}: {}", r.task_id, r.code, r.message);
        }
        if out.refused_more > 0 {
            let _ = writeln!(
                text,
                "  ... and {} more refused, not listed here (`orch ready` lists the ready tasks with their reasons)",
                out.refused_more
            );
        }
    }
    text
}

fn attempt_line(task_id: &str, a: &Attempt) -> String {
    let mut line = format!(
        "{task_id:<12} attempt {} → {}  {}  {}",
        a.attempt,
        a.assignee,
        paint(BOLD, &a.thread_id),
        a.status
    );
    if let Some(reason) = &a.reason {
        let _ = write!(line, ": {reason}");
    }
    if let Some(w) = &a.worktree {
        let _ = write!(
            line,
            "\n{:14} worktree {} (branch {}, from {} at {})",
            "",
            w.path,
            w.branch,
            w.base,
            short(&w.base_commit)
        );
        if w.left_out_count > 0 {
            let _ = write!(
                line,
                "\n{:14} {}",
                "",
                paint(
                    AnsiColor::Yellow.on_default(),
                    format!(
                        "left out: {} uncommitted in the leader's checkout ({})",
                        plural(w.left_out_count, "path"),
                        w.left_out.join(", ")
                    )
                )
            );
        }
    }
    line
}

/// A commit id's first 12 digits.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

fn worktree_line(view: &WorktreeView) -> String {
    let w = &view.worktree;
    let mut facts = vec![w.branch.clone()];
    if view.commits > 0 {
        facts.push(plural(view.commits, "commit"));
    }
    if view.uncommitted > 0 {
        facts.push(format!("{} uncommitted", plural(view.uncommitted, "path")));
    }
    if let Some(saved) = &view.saved {
        facts.push(format!("saved on {} ({})", view.wip_ref, short(saved)));
    }
    format!(
        "{}/{} #{}  {:<11}  {}\n      {}",
        view.run_id,
        view.task_id,
        view.attempt,
        view.state,
        facts.join(" · "),
        w.path
    )
}

fn worktree_lines(views: &[WorktreeView]) -> String {
    let mut text = String::new();
    for view in views {
        let _ = writeln!(text, "{}", worktree_line(view));
    }
    text
}

fn worktree_gc(out: &WorktreeGcOutput) -> String {
    let (removed, saved) = match out.dry_run {
        true => ("Would remove", "would save"),
        false => ("Removed", "saved"),
    };
    let mut text = format!(
        "{removed} {}, {saved} the work of {}, kept {}.\n",
        plural(out.removed.len() as u64, "worktree"),
        plural(out.saved.len() as u64, "worktree"),
        plural(out.kept.len() as u64, "worktree"),
    );
    for (label, views) in [
        ("removed", &out.removed),
        ("saved", &out.saved),
        ("kept", &out.kept),
    ] {
        for view in views.iter() {
            let _ = writeln!(text, "{label:<8} {}", worktree_line(view));
        }
    }
    text
}

fn task_show(out: &TaskShowOutput, now: Timestamp) -> String {
    let t = &out.task.task;
    let mut text = format!("Task {}\n", whole_task_line(t, &out.task.waiting_on, now));
    let _ = writeln!(
        text,
        "  run {} · priority {} · review {}",
        t.run_id,
        t.priority,
        if t.review { "yes" } else { "no" }
    );
    if !t.needs.is_empty() {
        let _ = writeln!(text, "  needs {}", t.needs.join(", "));
    }
    if !out.needed_by.is_empty() {
        let _ = writeln!(text, "  needed by {}", out.needed_by.join(", "));
    }
    for a in &out.attempts {
        let _ = writeln!(text, "  {}", attempt_line(&t.task_id, a));
    }
    if let Some(thread) = &out.thread {
        let _ = writeln!(
            text,
            "  thread {} is {} (inbox show --thread {})",
            thread.thread.thread_id, thread.thread.status, thread.thread.thread_id
        );
    }
    text
}

fn task_changed(out: &TaskOutput, now: Timestamp) -> String {
    let mut text = format!("{}\n", whole_task_line(&out.task, &[], now));
    if let Some(message) = &out.message {
        let _ = writeln!(
            text,
            "  wrote {} {} into {}",
            message.kind, message.message_id, message.thread_id
        );
    }
    for t in &out.affected {
        let _ = writeln!(text, "  also {}", whole_task_line(t, &[], now));
    }
    let _ = writeln!(text, "  run {}", run_line(&out.run));
    text
}

fn event_line(e: &OrchEvent) -> String {
    format!(
        "{}  {}  {}",
        paint(DIM, format!("#{}", e.event_id)),
        paint(BOLD, e.event_type),
        e.summary
    )
}

fn wait(out: &OrchWaitOutput, now: Timestamp) -> String {
    let resume = format!("resume with --after-event {}", out.next_event_id);
    if !out.woke {
        return format!("Nothing needs you before the timeout; {resume}.\n");
    }
    let mut text = String::new();
    for e in &out.events {
        let _ = writeln!(text, "{}", event_line(e));
    }
    let _ = writeln!(text, "Run {}", run_line(&out.run));
    if !out.actionable.is_empty() {
        let _ = write!(
            text,
            "{}:\n{}",
            paint(BOLD, "Needs you"),
            task_lines(&out.actionable, now)
        );
    }
    let _ = writeln!(text, "next event: {} ({resume})", out.next_event_id);
    text
}

fn reconcile(out: &ReconcileOutput, _now: Timestamp) -> String {
    let mut text = match out.events.len() {
        0 => "Nothing new to record.\n".to_owned(),
        n => format!("Recorded {n} changes:\n"),
    };
    for e in &out.events {
        let _ = writeln!(text, "  {}", event_line(e));
    }
    let _ = writeln!(text, "Run {}", run_line(&out.run));
    text
}

fn council_started(out: &CouncilOutput) -> String {
    let mut text = format!(
        "Started council {} in run {}:\n",
        paint(BOLD, &out.council_id),
        out.run.run_id
    );
    for task in &out.tasks {
        let thread = task
            .thread_id
            .as_deref()
            .unwrap_or("(waits for every seat's answer)");
        let _ = writeln!(
            text,
            "  {:<16} {} {:<12} {}",
            task.task_id,
            paint(
                task_style(task.status),
                format!("{:<10}", task.status.as_str())
            ),
            task.assignee,
            paint(DIM, thread)
        );
    }
    let _ = writeln!(
        text,
        "  next: orch wait (council_completed when every seat has ended), then orch council show {}",
        out.council_id
    );
    text
}

/// A council's report: the verdicts, the seats, then the groups as a table
/// (one row each) with every finding under its row.
fn council_report(r: &CouncilReport) -> String {
    let revision = r
        .revision
        .as_ref()
        .map_or_else(String::new, |v| format!(" @ {v}"));
    let mut text = format!(
        "Council {} ({}): {}{revision} — run {}\n",
        paint(BOLD, &r.council_id),
        r.stage,
        r.title,
        r.run_id
    );
    let answered = r.seats.len() - r.unanswered.len();
    let _ = writeln!(
        text,
        "Verdicts: {} approve, {} changes, {} block ({answered} of {} seats answered)",
        r.verdicts.approve,
        r.verdicts.changes,
        r.verdicts.block,
        r.seats.len()
    );
    let _ = write!(text, "{}:\n{}", paint(BOLD, "Seats"), seat_lines(r));
    if !r.unanswered.is_empty() {
        let _ = writeln!(text, "Not answered: {}", r.unanswered.join(", "));
    }
    if !r.unvoted.is_empty() {
        let _ = writeln!(text, "Not voted: {}", r.unvoted.join(", "));
    }
    if r.groups.is_empty() {
        text.push_str("No findings.\n");
        return text;
    }
    let _ = writeln!(
        text,
        "{}: {} (the same file and category within {} lines, or the same topic and category)",
        paint(BOLD, "Groups"),
        r.groups.len(),
        r.line_tolerance
    );
    text.push_str(&group_table(&r.groups, r.ballot));
    text
}

fn seat_lines(r: &CouncilReport) -> String {
    let width = r.seats.iter().map(|s| s.assignee.len()).max().unwrap_or(0);
    let mut text = String::new();
    for s in &r.seats {
        let answer = match (s.verdict, s.findings) {
            (Some(verdict), Some(n)) => format!("{verdict}, {}", plural(n, "finding")),
            _ => "no answer".to_owned(),
        };
        let _ = write!(
            text,
            "  {}  {:<width$}  {} {}  {answer}",
            s.seat,
            s.assignee,
            s.task_id,
            paint(task_style(s.status), s.status)
        );
        if let (Some(id), Some(status)) = (&s.ballot_task_id, s.ballot_status) {
            let voted = if s.voted { "voted" } else { "not voted" };
            let _ = write!(
                text,
                "  · {id} {} ({voted})",
                paint(task_style(status), status)
            );
        }
        text.push('\n');
    }
    text
}

/// The groups as an aligned table, each row followed by its findings.
fn group_table(groups: &[Group], ballot: bool) -> String {
    let rows: Vec<[String; 6]> = groups
        .iter()
        .map(|g| {
            [
                g.group.clone(),
                group_anchor(&g.anchor),
                g.category.to_string(),
                format!("{} ({})", g.count, g.seats.join(",")),
                format!("{}/{}", g.highest, g.median),
                g.ballot
                    .as_ref()
                    .filter(|_| ballot)
                    .map_or_else(String::new, |b| {
                        format!("{} agree, {} disagree", b.agree, b.disagree)
                    }),
            ]
        })
        .collect();
    let header = [
        "group",
        "about",
        "category",
        "seats",
        "highest/median",
        "ballot",
    ];
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("  {}\n", padded.join("  ").trim_end())
    };
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let mut text = paint(DIM, line(&header).trim_end()) + "\n";
    for (row, group) in rows.iter().zip(groups) {
        text.push_str(&line(row));
        text.push_str(&group_findings(group));
    }
    text
}

fn group_anchor(anchor: &GroupAnchor) -> String {
    match (&anchor.path, &anchor.lines, anchor.topic) {
        (Some(path), Some(lines), _) if lines.len() == 2 => {
            format!("{path}:{}-{}", lines[0], lines[1])
        }
        (Some(path), _, _) => path.clone(),
        (_, _, Some(topic)) => format!("topic: {topic}"),
        _ => String::new(),
    }
}

fn group_findings(group: &Group) -> String {
    let mut text = String::new();
    for f in &group.findings {
        let lines = f
            .lines
            .as_ref()
            .filter(|l| l.len() == 2)
            .map_or_else(String::new, |l| format!(" {}-{}", l[0], l[1]));
        let _ = writeln!(text, "      {} {}{lines}: {}", f.seat, f.severity, f.claim);
        if !f.action.is_empty() {
            let _ = writeln!(text, "        {} {}", paint(DIM, "action:"), f.action);
        }
        if !f.evidence.is_empty() {
            let _ = writeln!(text, "        {} {}", paint(DIM, "evidence:"), f.evidence);
        }
    }
    if let Some(ballot) = &group.ballot {
        for v in &ballot.votes {
            let comment = if v.comment.is_empty() {
                String::new()
            } else {
                format!(": {}", v.comment)
            };
            let _ = writeln!(text, "      {} votes {}{comment}", v.seat, v.vote);
        }
    }
    text
}

/// `1 task`, `3 tasks`.
pub(crate) fn plural(n: impl Into<u64>, noun: &str) -> String {
    let n: u64 = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
