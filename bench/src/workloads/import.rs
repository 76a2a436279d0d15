//! Workload 11: importing a mailbox log. It writes a seed 004
//! `mailbox.jsonl` of 100,000 lines (5,000 with `--quick`) as a team would
//! have written it, then times the real `inbox import --format
//! mailbox-jsonl` on a new database (every line run as inbox commands in
//! one batch), the same import again (every line already there: answered
//! from its idempotency keys), the export of the result as a mailbox log,
//! and the lossless dump of that database out and into another new one. It
//! reports lines per second of each, one process each, wall time from
//! spawn to exit. It must never time the generation of the log or the
//! `init`s.

use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use inbox_bench_kit::markdown::Table;

use super::progress;
use crate::ctx::Ctx;
use crate::fmt::{fmt_rate, fmt_us};
use crate::proc::run_checked;
use crate::report::Section;

/// The agents the generated log's tasks go to, in turn.
const AGENTS: u64 = 8;

/// Writes a log of about `lines` lines to `path`: tasks given to the agents
/// in turn, each assigned (and read), reported on, asked about and answered
/// (every other task), and done; a status to everyone every tenth task.
/// Returns the number of lines written.
fn write_log(path: &Path, lines: u64) -> Result<u64> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let mut written = 0;
    let mut task = 0;
    while written < lines {
        for line in task_lines(task) {
            writeln!(out, "{line}")?;
            written += 1;
        }
        task += 1;
    }
    out.flush()?;
    Ok(written)
}

/// The lines of task `n`.
fn task_lines(n: u64) -> Vec<String> {
    let agent = format!("agent:ag_{}", n % AGENTS);
    let at = |minute: u64| format!("2026-05-10T{:02}:{:02}:00Z", (n / 60) % 24, minute % 60);
    let line = |id: &str, kind: &str, from: &str, to: &str, body: &str, read: bool| {
        format!(
            r#"{{"id":"msg_{n}_{id}","type":"{kind}","from":"{from}","to":"{to}","body":"{body}","read":{read},"createdAt":"{}"}}"#,
            at(n)
        )
    };
    let mut lines = vec![
        line(
            "a",
            "task-assigned",
            "orchestrator",
            &agent,
            &format!("Task {n}: update the handler and its tests"),
            true,
        ),
        line(
            "s",
            "status",
            &agent,
            "orchestrator",
            "Running tests...",
            false,
        ),
    ];
    if n.is_multiple_of(2) {
        lines.push(line(
            "q",
            "question",
            &agent,
            "orchestrator",
            "Keep the old endpoint?",
            true,
        ));
        lines.push(line(
            "r",
            "answer",
            "orchestrator",
            &agent,
            "Yes, for one release",
            true,
        ));
    }
    lines.push(line(
        "d",
        "task-done",
        &agent,
        "orchestrator",
        "Done: 3 files changed, tests pass",
        false,
    ));
    if n.is_multiple_of(10) {
        lines.push(line(
            "b",
            "status",
            &agent,
            "broadcast",
            "Merged to main",
            false,
        ));
    }
    lines
}

/// Runs `inbox args...` on `db` and returns its wall time in µs and its
/// JSON answer.
fn inbox(ctx: &Ctx, db: &Path, args: &[&str]) -> Result<(f64, serde_json::Value)> {
    let mut cmd = ctx.inbox(db);
    cmd.args(args).arg("--json");
    let (us, output) = run_checked(&mut cmd, &[])?;
    let answer = serde_json::from_slice(&output.stdout).context("inbox did not answer JSON")?;
    Ok((us, answer))
}

/// A timed step: what, how many lines, how long.
struct Step {
    what: String,
    lines: u64,
    us: f64,
}

impl Step {
    fn rate(&self) -> f64 {
        self.lines as f64 / (self.us / 1e6).max(f64::EPSILON)
    }
}

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("import", "11. Importing a mailbox log");
    let size: u64 = ctx.size(100_000, 5_000);
    let dir = ctx.tmp.path();
    let log = dir.join("import-mailbox.jsonl");
    let lines = write_log(&log, size)?;
    let bytes = std::fs::metadata(&log)?.len();
    section.intro.push(format!(
        "**A seed 004 `mailbox.jsonl` of {lines} lines ({:.1} MiB)**, as a team writes it: \
         tasks for {AGENTS} agents in turn, each assigned (and read by its agent), reported \
         on, asked about and answered (every other task) and done, with a status to everyone \
         every tenth task. Each step is one `inbox` process on a SQLite file at normal \
         durability, timed from spawn to exit: the import into a new database (every line run \
         as inbox commands, committed a fifth of a second's worth at a time), the same import \
         again (every line already there, answered from its idempotency keys), the export of \
         the result as a mailbox log, and inbox's own lossless dump of that database out and \
         into another new one (rows per second).",
        bytes as f64 / 1_048_576.0
    ));
    let db = dir.join("import.db");
    let copy = dir.join("import-copy.db");
    let path = |p: &Path| p.display().to_string();
    inbox(ctx, &db, &["init"])?;
    inbox(ctx, &copy, &["init"])?;
    let log_arg = path(&log);
    let import = ["import", "--format", "mailbox-jsonl", log_arg.as_str()];
    let mut steps = Vec::new();

    progress(&format!("import: {lines} lines into a new database"));
    let (us, first) = inbox(ctx, &db, &import)?;
    if first["imported"].as_u64() != Some(lines) {
        bail!("the import did not take every line: {first}");
    }
    steps.push(Step {
        what: "import into a new database".into(),
        lines,
        us,
    });

    progress("import: the same file again");
    let (us, again) = inbox(ctx, &db, &import)?;
    if again["present"].as_u64() != Some(lines) {
        bail!("the second import did not find every line there: {again}");
    }
    steps.push(Step {
        what: "the same import again (adds nothing)".into(),
        lines,
        us,
    });

    progress("import: export as a mailbox log");
    let out = path(&dir.join("import-out.jsonl"));
    let (us, exported) = inbox(
        ctx,
        &db,
        &["export", "--format", "mailbox-jsonl", &out, "--force"],
    )?;
    let messages = exported["records"].as_u64().unwrap_or(0);
    steps.push(Step {
        what: "export as a mailbox log".into(),
        lines: messages,
        us,
    });

    progress("import: the lossless dump, out and in");
    let dump = path(&dir.join("import-dump.jsonl"));
    let (us, dumped) = inbox(ctx, &db, &["export", &dump, "--force"])?;
    let records = dumped["records"].as_u64().unwrap_or(0);
    steps.push(Step {
        what: "dump (`export --format jsonl`)".into(),
        lines: records,
        us,
    });
    let (us, _) = inbox(ctx, &copy, &["import", &dump])?;
    steps.push(Step {
        what: "dump imported into a new database".into(),
        lines: records,
        us,
    });

    let mut table = Table::new(
        format!("**{lines}-line mailbox log**: one process per step, wall time."),
        vec!["step", "lines or rows", "time", "per second"],
    );
    for step in &steps {
        table.row(vec![
            step.what.clone(),
            step.lines.to_string(),
            fmt_us(step.us),
            fmt_rate(step.rate()),
        ]);
    }
    section.tables.push(table);
    section.headlines.push(format!(
        "{lines}-line mailbox log imported at {} ({} the second time, adding nothing)",
        fmt_rate(steps[0].rate()),
        fmt_rate(steps[1].rate()),
    ));
    section.notes.push(
        "A mailbox import lets go of the write lock between batches (each about 0.2 s), so \
         agents writing meanwhile wait for one batch, never for the whole file. The dump's \
         import is one transaction (all its rows or none), holding the lock throughout: \
         agents' writes wait for it, up to their 10 s busy budget."
            .into(),
    );
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}
