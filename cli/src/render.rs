//! Output for people: compact, aligned, readable at a glance.
//!
//! Lines carry full ids (they are meant to be copied into the next command),
//! statuses, ages and lease time left. Colour comes from `anstyle` styles and
//! is stripped by `anstream` when stdout is not a terminal or `NO_COLOR` is
//! set. Agents' text is made terminal-safe before any of it is formatted.
//! `--json` output never comes through here: it is the engine's JSON,
//! byte for byte. This module must never decide anything about threads; it
//! only renders what the engine returned.

use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};
use inbox_engine::wire::{
    AgentView, AgentsOutput, ClaimOutput, GcOutput, MailboxOutput, MessageOutput, SettingsOutput,
    ThreadView, WaitReplyOutput, WatchOutput,
};
use inbox_engine::{Lease, Message, Output, Response, Status, Timestamp};

use inbox_host_native::terminal;

/// What rendering needs besides the response.
pub(crate) struct Context {
    /// The engine's "now", for ages and time left.
    pub(crate) now: Timestamp,
    /// The acting agent, if any.
    pub(crate) agent: Option<String>,
    /// `send` opened a thread (rather than adding to one).
    pub(crate) new_thread: bool,
    /// The database's durability, for `init`.
    pub(crate) durability: Option<&'static str>,
    /// Which database the command used, and why (told on stderr).
    pub(crate) database: Option<String>,
}

impl Context {
    /// The context of a command that reports only which database it used
    /// (export, import, backup): the line saying which, and why.
    pub(crate) fn database(db: &inbox_sqlite::DbPath, cwd: &std::path::Path) -> Context {
        Context {
            now: Timestamp::from_millis(0),
            agent: None,
            new_thread: false,
            durability: None,
            database: Some(inbox_host_native::database::database_line(db, cwd)),
        }
    }
}

const DIM: Style = Style::new().dimmed();
const BOLD: Style = Style::new().bold();
const ERROR: Style = AnsiColor::Red.on_default().bold();

fn status_style(status: Status) -> Style {
    match status {
        Status::Pending => AnsiColor::Yellow.on_default(),
        Status::Claimed | Status::InProgress => AnsiColor::Cyan.on_default(),
        Status::Blocked => AnsiColor::Magenta.on_default(),
        Status::Done => AnsiColor::Green.on_default(),
        Status::Failed => AnsiColor::Red.on_default(),
        Status::Cancelled => Style::new().dimmed(),
    }
}

fn paint(style: Style, text: impl std::fmt::Display) -> String {
    format!("{style}{text}{style:#}")
}

/// Renders a response: `(stdout, stderr)`.
/// Every string the engine returned is made terminal-safe first (see
/// [`inbox_host_native::terminal`]), so the renderers below print fields as they are.
pub(crate) fn human(response: &Response, cx: &Context) -> (String, String) {
    match response {
        Response::Failure { error, .. } => (
            String::new(),
            format!(
                "{}: {}\n{}",
                paint(ERROR, format!("error[{}]", error.code())),
                terminal::safe(&error.to_string()),
                used(cx)
            ),
        ),
        Response::Replayed(output) => match terminal::safe_output(output) {
            Some(output) => (
                format!(
                    "{}{}",
                    paint(
                        DIM,
                        "Already done under this idempotency key; nothing was applied again. The first outcome:\n"
                    ),
                    success(&output, cx)
                ),
                used(cx),
            ),
            None => (
                format!("{}\n", terminal::safe(&response.to_json())),
                used(cx),
            ),
        },
        Response::Success(output) => match terminal::safe_output(output) {
            Some(output) => (success(&output, cx), used(cx)),
            // Fields that cannot be escaped one by one: the escaped JSON.
            None => (
                format!("{}\n", terminal::safe(&response.to_json())),
                used(cx),
            ),
        },
    }
}

/// The line that says which database the command used (stderr, dim).
fn used(cx: &Context) -> String {
    match &cx.database {
        Some(database) => paint(DIM, format!("database: {}", terminal::safe(database))) + "\n",
        None => String::new(),
    }
}

fn success(output: &Output, cx: &Context) -> String {
    match output {
        Output::Init(out) => format!(
            "Initialized {} (schema version {}, durability {})\n",
            out.database.as_deref().unwrap_or("(in memory)"),
            out.schema_version,
            cx.durability.unwrap_or("normal"),
        ),
        Output::Send(out) if cx.new_thread => {
            let t = &out.thread.thread;
            let mut text = format!(
                "Opened {} for {}: {}\n",
                paint(BOLD, &t.thread_id),
                t.assigned_to,
                t.subject
            );
            let mut facts = vec![
                paint(status_style(t.status), t.status),
                format!("priority {}", t.priority),
            ];
            if let Some(task) = &t.task_id {
                facts.push(format!("task {task}"));
            }
            if let Some(run) = &t.run_id {
                facts.push(format!("run {run}"));
            }
            facts.push(format!("message {}", out.message.message_id));
            facts.push(format!("event {}", out.event_id));
            let _ = writeln!(text, "  {}", facts.join(" · "));
            if let Some(route) = &out.route {
                let reach = match (&route.picked, route.members) {
                    (Some(picked), n) => {
                        format!("picked {picked} of {n} members of {}", route.address)
                    }
                    (None, 0) => format!(
                        "no registered agent is reached by {} yet: the thread waits until one registers",
                        route.address
                    ),
                    (None, n) => format!("{} reaches {n} registered agents", route.address),
                };
                let _ = writeln!(text, "  {}", paint(DIM, reach));
            }
            text
        }
        Output::Send(out) | Output::Reply(out) => message_sent(out),
        Output::Update(out) => {
            let t = &out.thread;
            let mut facts = vec![
                paint(status_style(t.thread.status), t.thread.status),
                format!("{} {}", out.message.kind, out.message.message_id),
            ];
            if let Some(lease) = &t.lease {
                facts.push(format!("lease {}", until(cx.now, lease.expires_at)));
            }
            facts.push(format!("event {}", out.event_id));
            format!(
                "Updated {}: {}\n  {}\n",
                paint(BOLD, &t.thread.thread_id),
                out.message.summary,
                facts.join(" · ")
            )
        }
        Output::Done(out) => finished("Done", out),
        Output::Fail(out) => finished("Failed", out),
        Output::Cancel(out) => finished("Cancelled", out),
        Output::Claim(ClaimOutput {
            claimed: Some(claimed),
        }) => leased(
            "Claimed",
            &claimed.thread,
            &claimed.lease,
            claimed.event_id,
            cx.now,
        ),
        Output::Claim(_) => format!(
            "Nothing to claim for {}.\n",
            cx.agent.as_deref().unwrap_or("this agent")
        ),
        Output::Renew(out) => leased(
            "Renewed the lease on",
            &out.thread,
            &out.lease,
            out.event_id,
            cx.now,
        ),
        Output::Fetch(out) if out.threads.is_empty() => format!(
            "Nothing to claim for {}.\n",
            cx.agent.as_deref().unwrap_or("this agent")
        ),
        Output::List(out) if out.threads.is_empty() => "No threads match.\n".to_owned(),
        Output::Fetch(out) | Output::List(out) => threads_table(&out.threads, cx.now),
        Output::Show(out) => {
            let mut text = thread_header(&out.thread, cx.now);
            for (i, message) in out.messages.iter().enumerate() {
                text.push('\n');
                text.push_str(&message_block(i + 1, message, cx.now));
            }
            if let (true, Some(last)) = (out.more, out.messages.last()) {
                let _ = writeln!(
                    text,
                    "\n{}",
                    paint(
                        DIM,
                        format!(
                            "More messages follow: inbox show --thread {} --after-message {}",
                            out.thread.thread.thread_id, last.message_id
                        )
                    )
                );
            }
            if let Some(cursor) = &out.read_cursor {
                let _ = writeln!(
                    text,
                    "\n{}",
                    paint(
                        DIM,
                        format!(
                            "{} has read up to {} ({})",
                            cursor.agent,
                            cursor.last_read_message_id,
                            ago(cx.now, cursor.last_read_at)
                        )
                    )
                );
            }
            text
        }
        Output::Watch(out) => watch(out, cx.now),
        Output::Read(out) => mailbox(out, cx),
        Output::MarkRead(out) => match out.cursors.len() {
            0 => "Nothing new to mark: those messages were read already.\n".to_owned(),
            n => format!(
                "Marked read in {n} thread{}: {}\n",
                if n == 1 { "" } else { "s" },
                out.cursors
                    .iter()
                    .map(|c| format!("{} up to event {}", c.thread_id, c.last_read_event_id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        Output::AgentRegister(out) => {
            let mut text = format!("Registered {}", agent_line(&out.agent, cx.now));
            if let Some(token) = &out.agent_token {
                let _ = writeln!(
                    text,
                    "  agent token: {token}\n  {}",
                    paint(
                        DIM,
                        "shown this once, only its hash is kept: give it to the agent in a file of its own \
                         (chmod 600; --agent-token-file or INBOX_AGENT_TOKEN_FILE) or as INBOX_AGENT_TOKEN"
                    )
                );
            }
            text
        }
        Output::Settings(out) => settings(out),
        Output::Gc(out) => gc(out),
        Output::AgentUnregister(out) => {
            format!("Unregistered {}", agent_line(&out.agent, cx.now))
        }
        Output::AgentList(out) => agents(out, cx.now),
        Output::WaitReply(out) => wait_reply(out, cx.now),
        // A command with no rendering of its own: its fields as indented
        // JSON (which escapes every control character), so a new command
        // prints something readable before anyone writes a renderer for it.
        other => crate::render_orch::success(other, cx.now).unwrap_or_else(|| fields(other)),
    }
}

fn settings(out: &SettingsOutput) -> String {
    let s = &out.settings;
    let mut text = String::new();
    if !out.changed.is_empty() {
        let _ = writeln!(text, "Changed {}", out.changed.join(", "));
    }
    let _ = writeln!(text, "agent tokens   {}", s.agent_tokens);
    let _ = writeln!(text, "registration   {}", s.agent_registration);
    let auto = if s.auto_gc {
        "on"
    } else {
        "off (only `inbox gc`)"
    };
    let _ = writeln!(text, "auto gc        {auto}");
    let _ = writeln!(
        text,
        "retention      finished threads idle > {} days; read ones idle > {} hours; at most {} messages",
        s.keep_days, s.keep_read_hours, s.keep_messages
    );
    text
}

fn gc(out: &GcOutput) -> String {
    let verb = if out.dry_run {
        "Would remove"
    } else {
        "Removed"
    };
    let mut text = format!(
        "{verb} {} ({}) and {}; {} left\n",
        crate::render_orch::plural(out.removed.len() as u64, "thread"),
        crate::render_orch::plural(out.removed_messages, "message"),
        crate::render_orch::plural(out.expired_keys, "idempotency key"),
        crate::render_orch::plural(out.messages_left, "message"),
    );
    for removed in &out.removed {
        let _ = writeln!(
            text,
            "  {} {} · {} · {}",
            removed.thread_id,
            paint(status_style(removed.status), removed.status),
            removed.reason,
            crate::render_orch::plural(removed.messages, "message")
        );
    }
    if out.more {
        let _ = writeln!(text, "{}", paint(DIM, "More to remove: run it again."));
    }
    text
}

/// An output's fields as indented JSON, without the `command` tag.
fn fields(output: &Output) -> String {
    let mut value = serde_json::to_value(output).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.remove("command");
    }
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

fn leased(verb: &str, view: &ThreadView, lease: &Lease, event_id: u64, now: Timestamp) -> String {
    let t = &view.thread;
    format!(
        "{verb} {}: {}\n  lease token {} · attempt {} of {} · {} · event {}\n",
        paint(BOLD, &t.thread_id),
        t.subject,
        lease.lease_token,
        lease.attempt,
        t.max_attempts,
        until(now, lease.expires_at),
        event_id
    )
}

fn message_sent(out: &MessageOutput) -> String {
    let t = &out.thread.thread;
    format!(
        "Sent {} {} to {} in {} ({}) · event {}\n",
        out.message.kind,
        out.message.message_id,
        out.message.to_agent,
        paint(BOLD, &t.thread_id),
        paint(status_style(t.status), t.status),
        out.event_id
    )
}

fn finished(verb: &str, out: &MessageOutput) -> String {
    format!(
        "{verb} {}: {}\n  {} {} · event {}\n",
        paint(BOLD, &out.thread.thread.thread_id),
        out.message.summary,
        out.message.kind,
        out.message.message_id,
        out.event_id
    )
}

/// `3s`, `12m`, `5h`, `2d`, rounded to the nearest unit (a 900 s lease
/// read a few milliseconds later is still "15m").
fn span(millis: i64) -> String {
    let s = (millis.unsigned_abs() + 500) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3569 => format!("{}m", (s + 30) / 60),
        3570..=84_599 => format!("{}h", (s + 1800) / 3600),
        _ => format!("{}d", (s + 43_200) / 86_400),
    }
}

fn ago(now: Timestamp, then: Timestamp) -> String {
    format!("{} ago", span(now.as_millis() - then.as_millis()))
}

fn until(now: Timestamp, at: Timestamp) -> String {
    let left = at.as_millis() - now.as_millis();
    if left > 0 {
        format!("expires in {} ({at})", span(left))
    } else {
        format!("expired {} ago ({at})", span(left))
    }
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

fn threads_table(threads: &[ThreadView], now: Timestamp) -> String {
    let header = [
        "THREAD",
        "STATUS",
        "PRIORITY",
        "UPDATED",
        "ASSIGNED TO",
        "LEASE",
        "SUBJECT",
    ];
    let rows: Vec<[String; 7]> = threads
        .iter()
        .map(|v| {
            let t = &v.thread;
            let lease = match &v.lease {
                Some(l) => format!(
                    "{}#{} {} left",
                    l.agent,
                    l.lease_token,
                    span(l.expires_at.as_millis() - now.as_millis())
                ),
                None => "-".to_owned(),
            };
            [
                t.thread_id.clone(),
                t.status.to_string(),
                t.priority.to_string(),
                ago(now, t.updated_at),
                t.assigned_to.clone(),
                lease,
                clip(&t.subject, 60),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let line = |cells: Vec<String>, styles: [Option<Style>; 7], text: &mut String| {
        let mut out = Vec::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            let last = i == cells.len() - 1;
            let styled = match styles[i] {
                Some(style) => paint(style, cell),
                None => cell.clone(),
            };
            out.push(if last {
                styled
            } else {
                format!("{styled}{}", " ".repeat(pad))
            });
        }
        let _ = writeln!(text, "{}", out.join("  "));
    };
    line(
        header.iter().map(|h| h.to_string()).collect(),
        [Some(DIM); 7],
        &mut text,
    );
    for (row, view) in rows.into_iter().zip(threads) {
        let mut styles = [None; 7];
        styles[1] = Some(status_style(view.thread.status));
        line(row.to_vec(), styles, &mut text);
    }
    text
}

fn thread_header(view: &ThreadView, now: Timestamp) -> String {
    let t = &view.thread;
    let mut text = format!(
        "{}  {}\n",
        paint(BOLD, &t.thread_id),
        paint(BOLD, &t.subject)
    );
    let mut facts = vec![
        paint(status_style(t.status), t.status),
        format!("assigned to {}", t.assigned_to),
        format!("created by {} {}", t.created_by, ago(now, t.created_at)),
        format!("attempt {} of {}", t.attempts, t.max_attempts),
    ];
    if t.priority != inbox_engine::Priority::Normal {
        facts.push(format!("priority {}", t.priority));
    }
    let _ = writeln!(text, "{}", facts.join(" · "));
    let mut more = Vec::new();
    if let Some(lease) = &view.lease {
        more.push(format!(
            "held by {} (lease token {}), {}",
            lease.agent,
            lease.lease_token,
            until(now, lease.expires_at)
        ));
    }
    if let Some(task) = &t.task_id {
        more.push(format!("task {task}"));
    }
    if let Some(run) = &t.run_id {
        more.push(format!("run {run}"));
    }
    if !more.is_empty() {
        let _ = writeln!(text, "{}", more.join(" · "));
    }
    text
}

fn message_block(index: usize, m: &Message, now: Timestamp) -> String {
    let mut text = format!(
        "{} {} → {} · {} · {} · {}\n",
        paint(BOLD, format!("[{index}]")),
        m.from_agent,
        m.to_agent,
        paint(BOLD, m.kind),
        ago(now, m.created_at),
        paint(DIM, &m.message_id),
    );
    let _ = writeln!(text, "    {}", m.summary);
    for line in m.body.lines() {
        let _ = writeln!(text, "    {}", paint(DIM, "│ ").to_owned() + line);
    }
    if !m.payload.is_empty() {
        let payload = serde_json::to_string(&m.payload).unwrap_or_default();
        let _ = writeln!(text, "    payload {}", clip(&payload, 200));
    }
    for a in &m.artifacts {
        let mut facts = Vec::new();
        if let Some(size) = a.size_bytes {
            facts.push(bytes(size));
        }
        if let Some(digest) = &a.sha256 {
            facts.push(format!("sha256 {}", &digest[..digest.len().min(12)]));
        }
        let facts = if facts.is_empty() {
            String::new()
        } else {
            format!(" ({})", facts.join(", "))
        };
        let _ = writeln!(
            text,
            "    {} {} {}{facts}",
            paint(DIM, "artifact"),
            a.kind,
            a.path
        );
    }
    text
}

fn bytes(n: u64) -> String {
    match n {
        0..=1023 => format!("{n} B"),
        1024..=1_048_575 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

fn watch(out: &WatchOutput, now: Timestamp) -> String {
    if !out.woke {
        return format!(
            "No matching activity before the timeout; resume with --after-event {}.\n",
            out.next_event_id
        );
    }
    let mut text = String::new();
    for e in &out.events {
        let _ = writeln!(
            text,
            "{}  {}  {}  by {} → {}  {}  {}",
            paint(DIM, format!("#{}", e.event_id)),
            e.thread_id,
            paint(BOLD, e.event_type),
            e.source,
            paint(status_style(e.status), e.status),
            e.summary,
            paint(DIM, ago(now, e.created_at)),
        );
    }
    let _ = writeln!(
        text,
        "next event: {} (resume with --after-event {})",
        out.next_event_id, out.next_event_id
    );
    text
}

fn wait_reply(out: &WaitReplyOutput, now: Timestamp) -> String {
    let Some(message) = out.message.as_ref().filter(|_| out.woke) else {
        return format!(
            "No reply before the timeout; {} is {}. Resume with --after-event {}.\n",
            out.thread.thread.thread_id, out.thread.thread.status, out.next_event_id
        );
    };
    let mut text = format!(
        "{} from {} in {} ({}, now {})\n",
        paint(BOLD, message.kind),
        message.from_agent,
        out.thread.thread.thread_id,
        ago(now, message.created_at),
        paint(
            status_style(out.thread.thread.status),
            out.thread.thread.status
        ),
    );
    let block = message_block(1, message, now);
    // Drop the block's own header line; keep summary, body and artifacts.
    for line in block.lines().skip(1) {
        let _ = writeln!(text, "{line}");
    }
    let _ = writeln!(text, "next event: {}", out.next_event_id);
    text
}

/// `read`: each message with its thread, oldest first.
fn mailbox(out: &MailboxOutput, cx: &Context) -> String {
    let who = cx.agent.as_deref().unwrap_or("this agent");
    if out.messages.is_empty() {
        return format!(
            "No new messages for {who}; resume with --after-event {}.\n",
            out.next_event_id
        );
    }
    let mut text = String::new();
    for (i, m) in out.messages.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        let _ = writeln!(
            text,
            "{}  {} ({})",
            paint(BOLD, &m.message.thread_id),
            m.subject,
            paint(status_style(m.thread_status), m.thread_status)
        );
        text.push_str(&message_block(i + 1, &m.message, cx.now));
    }
    let next = if out.more {
        format!(
            "More messages follow: inbox read --after-event {}",
            out.next_event_id
        )
    } else {
        format!(
            "Mark them read: inbox mark-read --through-event {}",
            out.next_event_id
        )
    };
    let _ = writeln!(text, "\n{}", paint(DIM, next));
    text
}

/// One agent on one line: name, presence, roles, holdings.
fn agent_line(a: &AgentView, now: Timestamp) -> String {
    let mut facts = vec![
        a.presence.to_string(),
        format!("last active {}", ago(now, a.last_active_at)),
    ];
    if !a.roles.is_empty() {
        facts.push(format!("roles {}", a.roles.join(", ")));
    }
    if !a.holds.is_empty() {
        facts.push(format!("holds {}", a.holds.join(", ")));
    }
    if let Some(by) = &a.registered_by {
        facts.push(format!("registered by {by}"));
    }
    let description = if a.description.is_empty() {
        String::new()
    } else {
        format!("\n  {}", a.description)
    };
    format!(
        "{}: {}{description}\n",
        paint(BOLD, &a.name),
        facts.join(" · ")
    )
}

/// `agent list`: the agents, then their roles.
fn agents(out: &AgentsOutput, now: Timestamp) -> String {
    let mut text = String::new();
    if out.agents.is_empty() {
        text.push_str("No registered agents match.\n");
    }
    for a in &out.agents {
        text.push_str(&agent_line(a, now));
    }
    if !out.roles.is_empty() {
        text.push('\n');
    }
    for r in &out.roles {
        let waiting = if r.waiting > 0 && r.present == 0 {
            paint(
                ERROR,
                format!("{} waiting, nobody present to claim", r.waiting),
            )
        } else {
            format!("{} waiting", r.waiting)
        };
        let _ = writeln!(
            text,
            "role:{}  {} members ({} present) · {waiting}",
            r.role, r.members, r.present
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use inbox_engine::wire::VersionOutput;

    #[test]
    fn an_output_without_a_renderer_prints_its_fields() {
        let cx = Context {
            now: Timestamp::from_millis(0),
            agent: None,
            new_thread: false,
            durability: None,
            database: None,
        };
        let output = Output::Version(VersionOutput {
            engine_version: "1.2.3".into(),
            wire_version: 1,
        });
        assert_eq!(
            success(&output, &cx),
            "{\n  \"engine_version\": \"1.2.3\",\n  \"wire_version\": 1\n}\n"
        );
    }
}
