//! `docs/state-machine.md` and `docs/errors.md` are checked against the code: their
//! generated sections (between `<!-- BEGIN GENERATED: x -->` and `<!-- END GENERATED: x -->`)
//! must equal what this test renders from the transition table, the
//! vocabularies, the error codes and the limits. To refresh them after a
//! change: `INBOX_UPDATE_DOCS=1 cargo test -p inbox-engine --test reference_docs`.

// Tests report failures by panicking; this one reads and writes the docs,
// which the engine's purity lints (engine/clippy.toml) are not about.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods
)]

use inbox_engine::orch::council::{self, Category, Severity, Topic, Verdict, Vote};
use inbox_engine::orch::council_report::{CouncilStage, LINE_TOLERANCE};
use inbox_engine::orch::model::{OrchEventType, RunStatus, TaskStatus};
use inbox_engine::orch::rules::{self as orch_rules, TASK_TRANSITIONS};
use inbox_engine::orch::workspace as orch_workspace;
use inbox_engine::rules::{TRANSITIONS, Target};
use inbox_engine::validate as v;
use inbox_engine::vocabulary::Vocabulary;
use inbox_engine::{Command, Effect, ErrorCode, EventType, Kind, Priority, Status};

fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut out = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        " --- |".repeat(header.len())
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

fn code(text: &str) -> String {
    format!("`{text}`")
}

fn sections() -> Vec<(&'static str, String)> {
    let statuses = table(
        &["status", "terminal", "meaning"],
        Status::ALL
            .iter()
            .map(|s| {
                vec![
                    code(s.as_str()),
                    if s.is_terminal() {
                        "yes".into()
                    } else {
                        "no".into()
                    },
                    s.description().into(),
                ]
            })
            .collect(),
    );
    let transitions = table(
        &["trigger", "from", "to", "event", "effect"],
        TRANSITIONS
            .iter()
            .map(|t| {
                let from = if t.from.is_empty() {
                    "(new thread)".to_owned()
                } else {
                    t.from
                        .iter()
                        .map(|s| code(s.as_str()))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let to = match t.to {
                    Target::To(s) => code(s.as_str()),
                    Target::Same => "unchanged".into(),
                    Target::Unblocked => "`in_progress` with a live lease, else `pending`".into(),
                };
                let event = t
                    .event
                    .map_or("(the command's)".to_owned(), |e| code(e.as_str()));
                vec![t.trigger.to_owned(), from, to, event, t.effect.to_owned()]
            })
            .collect(),
    );
    let events = table(
        &["event_type", "meaning"],
        EventType::ALL
            .iter()
            .map(|e| vec![code(e.as_str()), e.description().into()])
            .collect(),
    );
    let kinds = table(
        &["kind", "meaning"],
        Kind::ALL
            .iter()
            .map(|k| vec![code(k.as_str()), k.description().into()])
            .collect(),
    );
    let priorities = table(
        &["priority", "meaning"],
        Priority::ALL
            .iter()
            .map(|p| vec![code(p.as_str()), p.description().into()])
            .collect(),
    );
    let mut exits = vec![
        vec!["0".into(), "success".into()],
        vec!["10".into(), "no matching work: empty `fetch`, nothing for `claim --next`, a `watch`, `wait-reply` or `orch wait` that did not wake, an empty `orch ready`, nothing for `orch dispatch --all-ready` (`ok` is still `true`)".into()],
    ];
    for (exit, meaning) in [
        (20, "conflict"),
        (30, "invalid input or invalid transition"),
        (40, "not found"),
        (50, "storage or internal error"),
    ] {
        let codes: Vec<String> = ErrorCode::ALL
            .iter()
            .filter(|c| c.exit_code() == exit)
            .map(|c| code(c.as_str()))
            .collect();
        exits.push(vec![
            exit.to_string(),
            format!("{meaning}: {}", codes.join(", ")),
        ]);
    }
    let exit_codes = table(&["exit", "meaning"], exits);
    let errors = table(
        &["code", "exit", "when"],
        ErrorCode::ALL
            .iter()
            .map(|c| {
                vec![
                    code(c.as_str()),
                    c.exit_code().to_string(),
                    c.description().into(),
                ]
            })
            .collect(),
    );
    let limits = table(
        &["what", "limit"],
        vec![
            vec![
                "agent names".into(),
                format!(
                    "1 to {} bytes of {}, starting with a letter or digit; `{}` and `{}` are reserved",
                    v::NAME_MAX_BYTES,
                    v::AGENT_NAME_CHARS,
                    v::SYSTEM_AGENT,
                    v::ORCH_AGENT
                ),
            ],
            vec![
                "run ids, task ids".into(),
                format!(
                    "1 to {} bytes of {}, starting with a letter or digit",
                    v::NAME_MAX_BYTES,
                    v::ID_NAME_CHARS
                ),
            ],
            vec![
                "`subject`".into(),
                format!("1 to {} characters, one line", v::SUBJECT_MAX_CHARS),
            ],
            vec![
                "`summary`, `reason`".into(),
                format!("1 to {} characters, one line", v::SUMMARY_MAX_CHARS),
            ],
            vec!["`body`".into(), format!("{} bytes", v::BODY_MAX_BYTES)],
            vec![
                "`payload`".into(),
                format!(
                    "a JSON object of at most {} bytes as compact JSON",
                    v::PAYLOAD_MAX_BYTES
                ),
            ],
            vec!["artifacts per message".into(), v::ARTIFACTS_MAX.to_string()],
            vec![
                "artifact `path`".into(),
                format!(
                    "1 to {} bytes, no control characters",
                    v::ARTIFACT_PATH_MAX_BYTES
                ),
            ],
            vec![
                "artifact `kind`".into(),
                format!(
                    "1 to {} bytes of `a-z 0-9 _ . -`; default `file`",
                    v::ARTIFACT_KIND_MAX_BYTES
                ),
            ],
            vec![
                "artifact `metadata`".into(),
                format!("a JSON object of at most {} bytes", v::METADATA_MAX_BYTES),
            ],
            vec![
                "`lease_seconds`".into(),
                format!(
                    "1 to {}; default {}",
                    v::MAX_LEASE_SECONDS,
                    v::DEFAULT_LEASE_SECONDS
                ),
            ],
            vec![
                "`max_attempts`".into(),
                format!(
                    "1 to {}; default {}",
                    v::MAX_ATTEMPTS_LIMIT,
                    v::DEFAULT_MAX_ATTEMPTS
                ),
            ],
            vec![
                "`limit`".into(),
                format!(
                    "1 to {}; default {} (`fetch`), {} (`list`), {} (`watch`), {} (`show`, messages)",
                    v::MAX_LIMIT,
                    v::DEFAULT_FETCH_LIMIT,
                    v::DEFAULT_LIST_LIMIT,
                    v::DEFAULT_WATCH_LIMIT,
                    v::DEFAULT_SHOW_LIMIT
                ),
            ],
            vec![
                "`timeout_seconds`".into(),
                format!(
                    "0 to {}; default {}",
                    v::MAX_TIMEOUT_SECONDS,
                    v::DEFAULT_TIMEOUT_SECONDS
                ),
            ],
        ],
    );
    let commands = table(
        &["command", "effect", "what it does"],
        Command::ALL
            .iter()
            .map(|c| {
                let effect = match (c.effect(), c.writes_if()) {
                    (Effect::Read, Some(flag)) => format!("reads (writes with `{flag}`)"),
                    (Effect::Read, None) => "reads".to_owned(),
                    (Effect::Write, _) => "writes".to_owned(),
                    (Effect::Wait, _) if c.records_first() => {
                        "waits (the engine records, then looks once; a host blocks)".to_owned()
                    }
                    (Effect::Wait, _) => "waits (the engine reads once; a host blocks)".to_owned(),
                };
                vec![code(c.as_str()), effect, c.description().to_owned()]
            })
            .collect(),
    );
    let mut all = vec![
        ("commands", commands),
        ("statuses", statuses),
        ("transitions", transitions),
        ("events", events),
        ("kinds", kinds),
        ("priorities", priorities),
        ("exit-codes", exit_codes),
        ("errors", errors),
        ("limits", limits),
    ];
    all.extend(orch_sections());
    all
}

/// The orch reference: task and run statuses, the task transition table,
/// orch's events and its retry defaults, for `docs/orch.md`.
fn orch_sections() -> Vec<(&'static str, String)> {
    let yes_no = |b: bool| if b { "yes".to_owned() } else { "no".to_owned() };
    let task_statuses = table(
        &["status", "ended", "needs the leader", "meaning"],
        TaskStatus::ALL
            .iter()
            .map(|s| {
                vec![
                    code(s.as_str()),
                    yes_no(s.is_terminal()),
                    yes_no(TaskStatus::ACTIONABLE.contains(s)),
                    s.description().into(),
                ]
            })
            .collect(),
    );
    let run_statuses = table(
        &["status", "meaning"],
        RunStatus::ALL
            .iter()
            .map(|s| vec![code(s.as_str()), s.description().into()])
            .collect(),
    );
    let transitions = table(
        &["trigger", "from", "to", "effect"],
        TASK_TRANSITIONS
            .iter()
            .map(|t| {
                let from = if t.from.is_empty() {
                    "(new task)".to_owned()
                } else {
                    t.from.iter().map(|s| code(s.as_str())).collect::<Vec<_>>().join(", ")
                };
                let to = match t.to {
                    orch_rules::Target::To(s) => code(s.as_str()),
                    orch_rules::Target::FromNeeds => {
                        "`ready` if every need is done, `skipped` if one failed, was cancelled or skipped, else `pending`".into()
                    }
                    orch_rules::Target::ReviewOrDone => "`review` if the task asks for review, else `done`".into(),
                    orch_rules::Target::RetryOrFail => "`retry_wait` while attempts remain, else `failed`".into(),
                };
                vec![t.trigger.to_owned(), from, to, t.effect.to_owned()]
            })
            .collect(),
    );
    let events = table(
        &["event_type", "wakes `orch wait`", "meaning"],
        OrchEventType::ALL
            .iter()
            .map(|e| {
                vec![
                    code(e.as_str()),
                    yes_no(OrchEventType::ACTIONABLE.contains(e)),
                    e.description().into(),
                ]
            })
            .collect(),
    );
    let d = orch_rules::DEFAULT_RETRY;
    let limits = table(
        &["what", "limit"],
        vec![
            vec![
                "`max_attempts`".into(),
                format!("1 to {}; default {}", v::MAX_ATTEMPTS_LIMIT, d.max_attempts),
            ],
            vec![
                "`backoff_seconds`".into(),
                format!(
                    "0 to {}; default {}",
                    orch_rules::MAX_BACKOFF_SECONDS,
                    d.backoff_seconds
                ),
            ],
            vec![
                "`backoff_factor`".into(),
                format!(
                    "1 to {}; default {}",
                    orch_rules::MAX_BACKOFF_FACTOR,
                    d.backoff_factor
                ),
            ],
            vec![
                "`max_backoff_seconds`".into(),
                format!(
                    "0 to {}; default {}",
                    orch_rules::MAX_BACKOFF_SECONDS,
                    d.max_backoff_seconds
                ),
            ],
            vec!["`needs` per task".into(), orch_rules::MAX_NEEDS.to_string()],
            vec![
                "`acceptance` criteria per task".into(),
                orch_rules::MAX_ACCEPTANCE.to_string(),
            ],
            vec![
                "tasks per `orch plan`".into(),
                orch_rules::MAX_PLAN_TASKS.to_string(),
            ],
            vec![
                "`title`, `goal`".into(),
                format!("1 to {} characters, one line", v::SUBJECT_MAX_CHARS),
            ],
            vec![
                "a run or task id, in a run with a repository".into(),
                format!(
                    "at most {} bytes once encoded (a character other than a letter, digit, `_` or `-` takes 3); the worktree's paths at most {} bytes; no two tasks' ids (or two runs' over one repository) that differ only in case",
                    orch_workspace::NAME_MAX,
                    orch_workspace::PATH_MAX - 1
                ),
            ],
            vec![
                "tasks git refuses in one `orch dispatch --all-ready`".into(),
                format!(
                    "{}, then it stops looking (the rest stay ready)",
                    orch_workspace::REFUSED_MAX
                ),
            ],
        ],
    );
    let mut sections = vec![
        ("orch-task-statuses", task_statuses),
        ("orch-run-statuses", run_statuses),
        ("orch-transitions", transitions),
        ("orch-events", events),
        ("orch-limits", limits),
    ];
    sections.extend(council_sections());
    sections
}

/// One closed list of council review: each value and what it means.
fn closed_list<V: Vocabulary>(name: &str) -> String {
    table(
        &[name, "meaning"],
        V::ALL
            .iter()
            .map(|value| vec![code(value.as_str()), value.description().into()])
            .collect(),
    )
}

fn council_sections() -> Vec<(&'static str, String)> {
    let limits = table(
        &["what", "limit"],
        vec![
            vec![
                "seats".into(),
                format!(
                    "{} to {}; default: one per reviewer named, at least {} when a role is among them",
                    council::MIN_SEATS,
                    council::MAX_SEATS,
                    council::DEFAULT_SEATS
                ),
            ],
            vec![
                "`council_id`".into(),
                format!(
                    "1 to {} bytes of {}",
                    council::COUNCIL_ID_MAX_BYTES,
                    v::ID_NAME_CHARS
                ),
            ],
            vec![
                "`body`".into(),
                format!("{} bytes", council::BODY_MAX_BYTES),
            ],
            vec![
                "`diff`".into(),
                format!("{} bytes", council::DIFF_MAX_BYTES),
            ],
            vec![
                "`files`".into(),
                format!(
                    "{} paths of at most {} bytes, one line each",
                    council::MAX_FILES,
                    council::PATH_MAX_BYTES
                ),
            ],
            vec![
                "`revision`".into(),
                format!("{} characters, one line", council::REVISION_MAX_CHARS),
            ],
            vec![
                "findings per review".into(),
                council::MAX_FINDINGS.to_string(),
            ],
            vec![
                "`claim`".into(),
                format!("1 to {} characters", council::CLAIM_MAX_CHARS),
            ],
            vec![
                "`action`".into(),
                format!("{} characters", council::ACTION_MAX_CHARS),
            ],
            vec![
                "`evidence`".into(),
                format!("{} characters", council::EVIDENCE_MAX_CHARS),
            ],
            vec![
                "anchor `path`".into(),
                format!("{} characters, one line", council::PATH_MAX_BYTES),
            ],
            vec![
                "anchor `lines`".into(),
                format!("[first, last], 1 ≤ first ≤ last ≤ {}", council::MAX_LINE),
            ],
            vec![
                "ballot `comment`".into(),
                format!("{} characters", council::COMMENT_MAX_CHARS),
            ],
            vec![
                "grouping tolerance".into(),
                format!("{LINE_TOLERANCE} lines"),
            ],
            vec![
                "a whole answer".into(),
                format!("the `payload` limit, {} bytes", v::PAYLOAD_MAX_BYTES),
            ],
        ],
    );
    vec![
        ("council-verdicts", closed_list::<Verdict>("verdict")),
        ("council-severities", closed_list::<Severity>("severity")),
        ("council-categories", closed_list::<Category>("category")),
        ("council-topics", closed_list::<Topic>("topic")),
        ("council-votes", closed_list::<Vote>("vote")),
        ("council-stages", closed_list::<CouncilStage>("stage")),
        ("council-limits", limits),
    ]
}

/// Refreshes the generated sections of `file` (relative to the repository
/// root) that it has markers for; fails when a section differs.
fn check(file: &str, required: &[&str]) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(file);
    let original = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut doc = original.clone();
    for (name, body) in sections() {
        let begin = format!("<!-- BEGIN GENERATED: {name} -->\n");
        let end = format!("<!-- END GENERATED: {name} -->");
        let Some(at) = doc.find(&begin) else {
            assert!(
                !required.contains(&name),
                "{file} lacks the `{name}` section markers"
            );
            continue;
        };
        let start = at + begin.len();
        let stop = start
            + doc[start..]
                .find(&end)
                .unwrap_or_else(|| panic!("{file}: `{name}` section is not closed"));
        doc.replace_range(start..stop, &body);
    }
    if doc == original {
        return;
    }
    if std::env::var_os("INBOX_UPDATE_DOCS").is_some() {
        std::fs::write(&path, doc).unwrap_or_else(|e| panic!("write {file}: {e}"));
        return;
    }
    panic!(
        "{file} is out of date with the code; refresh it with\n  INBOX_UPDATE_DOCS=1 cargo test -p inbox-engine --test reference_docs"
    );
}

#[test]
fn orch_doc_matches_the_code() {
    check(
        "docs/orch.md",
        &[
            "orch-task-statuses",
            "orch-run-statuses",
            "orch-transitions",
            "orch-events",
            "orch-limits",
            "council-verdicts",
            "council-severities",
            "council-categories",
            "council-topics",
            "council-votes",
            "council-stages",
            "council-limits",
        ],
    );
}

#[test]
fn state_machine_doc_matches_the_code() {
    check(
        "docs/state-machine.md",
        &[
            "statuses",
            "transitions",
            "events",
            "kinds",
            "priorities",
            "exit-codes",
            "errors",
            "limits",
        ],
    );
}

#[test]
fn readme_exit_and_error_codes_match_the_code() {
    check("docs/errors.md", &["exit-codes", "errors"]);
}
