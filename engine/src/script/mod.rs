//! Transition scripts: a small text format for pinning down an agent
//! protocol as a sequence of commands on a deterministic clock, and the
//! runner that turns a script into a transcript.
//!
//! ```text
//! # A worker claims a task and finishes it.
//! send from_agent=lead to_agent=worker subject="Add login" task_id=T1
//! claim agent=worker thread_id=thr_000001 lease_seconds=600   => ok thread.status=claimed
//! spawn w1 wait-reply thread_id=thr_000001 agent=lead          => ok woke=true message.kind=result
//! advance 5m
//! done agent=worker thread_id=thr_000001 summary="Login added" => ok wakes(w1)
//! ```
//!
//! - A command line is a wire command name followed by `field=value` pairs,
//!   the same fields as the JSON request. Values are JSON where they look like
//!   JSON (`60`, `true`, `"quoted text"`, `{"k": 1}`), lists are written
//!   `[pending, blocked]`, and any other bare word is a string.
//! - `=> ...` at the end of a line is an expectation, and the runner reports
//!   every one that does not hold: an outcome (`ok`, `exit 10`, or an error
//!   code such as `lease_conflict`), then any number of assertions on the
//!   response: `path=value` (the JSON at a dotted path such as
//!   `thread.status` or `threads.0.lease.lease_token` equals the value),
//!   `len(path)=n` (a list has `n` items) and `wakes(name)` (that background
//!   waiter finishes on this step). See `expect` for the details.
//! - `clock <timestamp>` sets the clock (never backwards); `advance <duration>`
//!   moves it (`250ms`, `30s`, `15m`, `2h`, `1d`, or sums like `1m30s`). Time
//!   starts at [`ManualClock::SCRIPT_EPOCH`] and only moves when told to.
//! - `spawn <name> <watch|wait-reply ...>` starts a background waiter, as if
//!   another agent process were blocked in that command. After every later
//!   step the waiters are polled, and when one finishes its response is
//!   printed. `advance` stops at every instant a waiter asked to be polled
//!   (heartbeats, sweeps, deadlines). An expectation on a `spawn` line is
//!   what the waiter must finish with; a waiter with one that is still
//!   waiting when the script ends is a failure.
//! - `#` starts a comment; a line ending in `\` continues on the next.
//!
//! Ids come from [`SequentialIds`] (`thr_000001`, `msg_000001`, ...), so a
//! script can name the threads it creates. The runner only uses the
//! [`Store`] trait and the wire format, so every host runs the same script to
//! the same transcript, byte for byte. This module must never depend on a
//! particular store.
//!
//! [`ManualClock::SCRIPT_EPOCH`]: crate::ManualClock::SCRIPT_EPOCH
//! [`SequentialIds`]: crate::SequentialIds
//! [`Store`]: crate::Store

mod expect;
mod lex;
mod parse;
mod run;

pub use parse::Script;

use crate::store::Store;

/// A script that could not be parsed or run, with the line it is about.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ScriptError {
    /// 1-based line number in the script.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// The result of running a script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcript {
    /// Every step's response and the changes it made, as text.
    pub text: String,
    /// Expectations that did not hold, one line each (empty when all held).
    pub failures: Vec<String>,
}

/// Parses and runs `text` against `store`; see [`Script`].
pub fn run_script<S: Store>(text: &str, store: S) -> Result<Transcript, ScriptError> {
    Script::parse(text)?.run(store)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[test]
    fn parses_values_like_json_with_bare_words_and_lists() {
        let script = Script::parse(
            r#"fetch agent=w status=[pending, blocked] limit=5 unread=true # comment
send from_agent=a to_agent=b subject="Fix #12 now" payload={"n": [1, 2]} => ok"#,
        )
        .unwrap();
        assert_eq!(
            script.steps[0].action,
            parse::StepAction::Command(serde_json::json!({
                "command": "fetch", "agent": "w", "status": ["pending", "blocked"], "limit": 5, "unread": true
            }))
        );
        assert_eq!(
            script.steps[1]
                .expect
                .as_ref()
                .and_then(|e| e.outcome.clone()),
            Some(expect::Outcome::Ok)
        );
        assert_eq!(
            script.steps[1].action,
            parse::StepAction::Command(serde_json::json!({
                "command": "send", "from_agent": "a", "to_agent": "b", "subject": "Fix #12 now", "payload": {"n": [1, 2]}
            }))
        );
    }

    #[test]
    fn durations_add_up() {
        assert_eq!(parse::parse_duration("1m30s"), Ok(90_000));
        assert_eq!(parse::parse_duration("250ms"), Ok(250));
        assert!(parse::parse_duration("5").is_err());
        assert!(parse::parse_duration("5 minutes").is_err());
    }

    #[test]
    fn reports_the_line_of_a_bad_step() {
        let err = Script::parse("\n\nclaim agent=w thread_id").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.message.contains("field=value"), "{}", err.message);
    }

    fn failures(script: &str) -> Vec<String> {
        run_script(script, MemoryStore::new()).unwrap().failures
    }

    const OPEN: &str = "send from_agent=lead to_agent=worker subject=s\n";

    #[test]
    fn field_assertions_hold_or_say_what_differs() {
        let held = format!(
            "{OPEN}claim agent=worker thread_id=thr_000001 => ok thread.status=claimed lease.lease_token=1 len(thread.lease)=7"
        );
        assert_eq!(failures(&held), Vec::<String>::new());
        let wrong = format!(
            "{OPEN}claim agent=worker thread_id=thr_000001 => ok thread.status=pending lease.agent=lead"
        );
        assert_eq!(
            failures(&wrong),
            vec![
                "line 2: `thread.status` is \"claimed\", expected \"pending\"".to_owned(),
                "line 2: `lease.agent` is \"worker\", expected \"lead\"".to_owned(),
            ]
        );
    }

    #[test]
    fn a_waiter_is_checked_when_it_finishes_and_must_finish() {
        let reply = "reply from_agent=lead thread_id=thr_000001 summary=go";
        let held = format!(
            "{OPEN}spawn w1 wait-reply agent=worker thread_id=thr_000001 => ok woke=true message.summary=go\n{reply} => ok wakes(w1)"
        );
        assert_eq!(failures(&held), Vec::<String>::new());
        let wrong = format!(
            "{OPEN}spawn w1 wait-reply agent=worker thread_id=thr_000001 => ok message.summary=stop\n{reply}"
        );
        assert_eq!(
            failures(&wrong),
            vec!["line 2 (waiter w1): `message.summary` is \"go\", expected \"stop\"".to_owned()]
        );
        let never = format!(
            "{OPEN}spawn w1 wait-reply agent=worker thread_id=thr_000001 => ok woke=true\nadvance 1m => wakes(w1)"
        );
        assert_eq!(
            failures(&never),
            vec![
                "line 3: waiter w1 is still waiting; expected this step to wake it".to_owned(),
                "line 2: waiter w1 never finished, so its expectation was never met".to_owned(),
            ]
        );
    }

    #[test]
    fn a_step_without_a_response_cannot_assert_one() {
        assert_eq!(
            failures("advance 1m => ok"),
            vec!["line 1: `advance 1m` produces no response to check".to_owned()]
        );
    }
}
