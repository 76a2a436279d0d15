//! Transition scripts: a small text format for pinning down an agent
//! protocol as a sequence of commands on a deterministic clock, and the
//! runner that turns a script into a transcript.
//!
//! ```text
//! # A worker claims a task and finishes it.
//! send from_agent=lead to_agent=worker subject="Add login" task_id=T1
//! claim agent=worker thread_id=thr_000001 lease_seconds=600   => ok
//! advance 5m
//! spawn w1 wait-reply thread_id=thr_000001 agent=lead
//! done agent=worker thread_id=thr_000001 summary="Login added"
//! ```
//!
//! - A command line is a wire command name followed by `field=value` pairs,
//!   the same fields as the JSON request. Values are JSON where they look like
//!   JSON (`60`, `true`, `"quoted text"`, `{"k": 1}`), lists are written
//!   `[pending, blocked]`, and any other bare word is a string.
//! - `=> ok`, `=> exit 10` or `=> <error_code>` at the end of a line is an
//!   expectation; the runner reports every one that does not hold.
//! - `clock <timestamp>` sets the clock (never backwards); `advance <duration>`
//!   moves it (`250ms`, `30s`, `15m`, `2h`, `1d`, or sums like `1m30s`). Time
//!   starts at [`ManualClock::SCRIPT_EPOCH`] and only moves when told to.
//! - `spawn <name> <watch|wait-reply ...>` starts a background waiter, as if
//!   another agent process were blocked in that command. After every later
//!   step the waiters are polled, and when one finishes its response is
//!   printed. `advance` stops at every instant a waiter asked to be polled
//!   (heartbeats, sweeps, deadlines).
//! - `#` starts a comment; a line ending in `\` continues on the next.
//!
//! Ids come from [`SequentialIds`] (`thr_000001`, `msg_000001`, ...), so a
//! script can name the threads it creates. The runner only uses the
//! [`Store`] trait and the wire format, so every host runs the same script to
//! the same transcript, byte for byte. This module must never depend on a
//! particular store.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::engine::Engine;
use crate::ids::SequentialIds;
use crate::model::{EventId, Thread};
use crate::store::{EventQuery, Store, ThreadOrder, ThreadQuery, ThreadState, TxMode};
use crate::time::{ManualClock, Timestamp};
use crate::wait::{WaitStep, Waiter};
use crate::wire::{Request, Response};

/// A parsed script.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    steps: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq)]
struct Step {
    line: usize,
    text: String,
    action: StepAction,
    expect: Option<Expect>,
}

#[derive(Clone, Debug, PartialEq)]
enum StepAction {
    Command(serde_json::Value),
    Spawn(String, serde_json::Value),
    Clock(Timestamp),
    Advance(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Expect {
    Ok,
    Exit(u8),
    Code(String),
}

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

impl Script {
    /// Parses a script. Unknown command names are not errors here: they run
    /// and come back as `invalid_request`, like any other bad request.
    pub fn parse(text: &str) -> Result<Script, ScriptError> {
        let mut steps = Vec::new();
        let mut pending: Option<(usize, String)> = None;
        for (index, raw) in text.lines().enumerate() {
            let number = index + 1;
            let line = strip_comment(raw);
            let (start, mut joined) = pending.take().unwrap_or((number, String::new()));
            let continued = line.trim_end().ends_with('\\');
            let body = line.trim_end().trim_end_matches('\\');
            if !joined.is_empty() {
                joined.push(' ');
            }
            joined.push_str(body.trim());
            if continued {
                pending = Some((start, joined));
                continue;
            }
            if joined.trim().is_empty() {
                continue;
            }
            steps.push(parse_step(start, &joined)?);
        }
        if let Some((line, _)) = pending {
            return Err(ScriptError {
                line,
                message: "the last line ends in `\\` but nothing follows".into(),
            });
        }
        Ok(Script { steps })
    }

    /// Runs the script against `store` (fresh and initialized) and returns
    /// the transcript.
    pub fn run<S: Store>(&self, store: S) -> Result<Transcript, ScriptError> {
        Runner::new(store).run(self)
    }
}

/// Parses and runs `text` against `store`; see [`Script`].
pub fn run_script<S: Store>(text: &str, store: S) -> Result<Transcript, ScriptError> {
    Script::parse(text)?.run(store)
}

fn strip_comment(line: &str) -> &str {
    // A `#` starts a comment unless it is inside a quoted value.
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '#' if !in_string => return &line[..i],
            _ => {}
        }
    }
    line
}

fn parse_step(line: usize, text: &str) -> Result<Step, ScriptError> {
    let err = |message: String| ScriptError { line, message };
    let (body, expect) = split_expectation(text).map_err(err)?;
    let mut words = Lexer { text: body, pos: 0 };
    let Some(first) = words.word() else {
        return Err(err("expected a command".into()));
    };
    let action = match first {
        "clock" => {
            let value = words
                .word()
                .ok_or_else(|| err("clock needs a timestamp".into()))?;
            StepAction::Clock(Timestamp::parse(value).map_err(|e| err(e.to_string()))?)
        }
        "advance" => {
            let value = words
                .word()
                .ok_or_else(|| err("advance needs a duration, e.g. 30s".into()))?;
            StepAction::Advance(parse_duration(value).map_err(err)?)
        }
        "spawn" => {
            let name = words.word().ok_or_else(|| {
                err("spawn needs a name and a command, e.g. spawn w1 wait-reply ...".into())
            })?;
            let command = words
                .word()
                .ok_or_else(|| err("spawn needs a command after the name".into()))?;
            StepAction::Spawn(
                name.to_owned(),
                request_value(command, &mut words).map_err(err)?,
            )
        }
        command => StepAction::Command(request_value(command, &mut words).map_err(err)?),
    };
    if let (StepAction::Clock(_) | StepAction::Advance(_), Some(rest)) = (&action, words.word()) {
        return Err(err(format!("unexpected `{rest}`")));
    }
    Ok(Step {
        line,
        text: body.trim().to_owned(),
        action,
        expect,
    })
}

fn split_expectation(text: &str) -> Result<(&str, Option<Expect>), String> {
    let mut in_string = false;
    let mut escaped = false;
    let bytes = text.as_bytes();
    for i in 0..bytes.len() {
        match bytes[i] {
            _ if escaped => escaped = false,
            b'\\' if in_string => escaped = true,
            b'"' => in_string = !in_string,
            b'=' if !in_string
                && bytes.get(i + 1) == Some(&b'>')
                && (i == 0 || bytes[i - 1] == b' ') =>
            {
                let spec = text[i + 2..].trim();
                let expect = match spec.split_whitespace().collect::<Vec<_>>().as_slice() {
                    ["ok"] => Expect::Ok,
                    ["exit", code] => Expect::Exit(
                        code.parse()
                            .map_err(|_| format!("`{code}` is not an exit code"))?,
                    ),
                    [code] if code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') => {
                        Expect::Code((*code).to_owned())
                    }
                    _ => {
                        return Err(format!(
                            "cannot read expectation `=> {spec}`; write `=> ok`, `=> exit 10` or `=> lease_conflict`"
                        ));
                    }
                };
                return Ok((&text[..i], Some(expect)));
            }
            _ => {}
        }
    }
    Ok((text, None))
}

fn parse_duration(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not a duration; write e.g. 250ms, 30s, 15m, 2h, 1d or 1m30s");
    let mut total: i64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let number: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = number
            .checked_mul(unit)
            .and_then(|n| total.checked_add(n))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

fn request_value(command: &str, words: &mut Lexer<'_>) -> Result<serde_json::Value, String> {
    let mut object = serde_json::Map::new();
    object.insert("command".into(), command.into());
    while let Some((key, value)) = words.pair()? {
        if key == "command" {
            return Err("`command` is the first word, not a field".into());
        }
        if object.insert(key.clone(), value).is_some() {
            return Err(format!("`{key}` is given twice"));
        }
    }
    Ok(serde_json::Value::Object(object))
}

/// Splits a step into words and `key=value` pairs.
struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn skip_space(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn word(&mut self) -> Option<&'a str> {
        self.skip_space();
        let rest = self.rest();
        let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
        if len == 0 {
            return None;
        }
        self.pos += len;
        Some(&rest[..len])
    }

    fn pair(&mut self) -> Result<Option<(String, serde_json::Value)>, String> {
        self.skip_space();
        let rest = self.rest();
        if rest.is_empty() {
            return Ok(None);
        }
        let Some(eq) = rest.find('=') else {
            let word = rest.split_whitespace().next().unwrap_or(rest);
            return Err(format!("expected field=value, found `{word}`"));
        };
        let key = &rest[..eq];
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            let word = rest.split_whitespace().next().unwrap_or(rest);
            return Err(format!("expected field=value, found `{word}`"));
        }
        self.pos += eq + 1;
        let value = self.value(&[])?;
        Ok(Some((key.to_owned(), value)))
    }

    /// A value ends at whitespace, or at any of `stops` (inside lists).
    fn value(&mut self, stops: &[char]) -> Result<serde_json::Value, String> {
        let rest = self.rest();
        match rest.chars().next() {
            Some('"') | Some('{') => {
                let mut stream =
                    serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Value>();
                let value = match stream.next() {
                    Some(Ok(value)) => value,
                    Some(Err(e)) => return Err(format!("bad JSON value: {e}")),
                    None => return Err("expected a value".into()),
                };
                self.pos += stream.byte_offset();
                Ok(value)
            }
            Some('[') => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_space();
                    match self.rest().chars().next() {
                        Some(']') => {
                            self.pos += 1;
                            return Ok(serde_json::Value::Array(items));
                        }
                        Some(',') if !items.is_empty() => {
                            self.pos += 1;
                            self.skip_space();
                        }
                        None => return Err("a list is missing its closing `]`".into()),
                        _ => {}
                    }
                    if self.rest().starts_with(']') {
                        continue;
                    }
                    items.push(self.value(&[',', ']'])?);
                }
            }
            _ => {
                let len = rest
                    .find(|c: char| c.is_whitespace() || stops.contains(&c))
                    .unwrap_or(rest.len());
                let word = &rest[..len];
                self.pos += len;
                if word.is_empty() {
                    return Ok(serde_json::Value::String(String::new()));
                }
                // Numbers, booleans and null read as JSON; anything else is text.
                match serde_json::from_str::<serde_json::Value>(word) {
                    Ok(
                        v @ (serde_json::Value::Number(_)
                        | serde_json::Value::Bool(_)
                        | serde_json::Value::Null),
                    ) => Ok(v),
                    _ => Ok(serde_json::Value::String(word.to_owned())),
                }
            }
        }
    }
}

struct Runner<S: Store> {
    engine: Engine<S, ManualClock, SequentialIds>,
    waiters: BTreeMap<String, Waiter>,
    /// When each waiter wants to be polled next.
    wake_at: BTreeMap<String, Timestamp>,
    seen_event: EventId,
    threads: BTreeMap<String, String>,
    /// Agent names the script has mentioned, whose read cursors are reported.
    agents: std::collections::BTreeSet<String>,
    cursors: BTreeMap<(String, String), String>,
    out: String,
    failures: Vec<String>,
}

impl<S: Store> Runner<S> {
    fn new(store: S) -> Runner<S> {
        Runner {
            engine: Engine::new(
                store,
                ManualClock::new(ManualClock::SCRIPT_EPOCH),
                SequentialIds::new(),
            ),
            waiters: BTreeMap::new(),
            wake_at: BTreeMap::new(),
            seen_event: 0,
            threads: BTreeMap::new(),
            agents: std::collections::BTreeSet::new(),
            cursors: BTreeMap::new(),
            out: String::new(),
            failures: Vec::new(),
        }
    }

    fn now(&self) -> Timestamp {
        self.engine.clock().peek()
    }

    fn run(mut self, script: &Script) -> Result<Transcript, ScriptError> {
        self.snapshot_changes(true)
            .map_err(|message| ScriptError { line: 0, message })?;
        for step in &script.steps {
            let _ = writeln!(self.out, "-- line {} --", step.line);
            let _ = writeln!(self.out, "> {}", step.text);
            let response = match &step.action {
                StepAction::Command(value) => {
                    self.note_agents(value);
                    let response = match Request::from_value(value.clone()) {
                        Ok(request) => self.engine.execute(request),
                        Err(failure) => *failure,
                    };
                    self.print_response(&response);
                    Some(response)
                }
                StepAction::Spawn(name, value) => {
                    if self.waiters.contains_key(name) {
                        return Err(ScriptError {
                            line: step.line,
                            message: format!("a waiter named {name} is still waiting"),
                        });
                    }
                    match Request::from_value(value.clone()).and_then(Waiter::new) {
                        Ok(waiter) => {
                            let _ = writeln!(self.out, "waiter {name} started at {}", self.now());
                            self.waiters.insert(name.clone(), waiter);
                            self.wake_at.insert(name.clone(), self.now());
                            None
                        }
                        Err(failure) => {
                            self.print_response(&failure);
                            Some(*failure)
                        }
                    }
                }
                StepAction::Clock(at) => {
                    if *at < self.now() {
                        return Err(ScriptError {
                            line: step.line,
                            message: format!("clock cannot go back from {} to {at}", self.now()),
                        });
                    }
                    self.advance_to(*at);
                    let _ = writeln!(self.out, "now {}", self.now());
                    None
                }
                StepAction::Advance(millis) => {
                    let target = self.now().plus_millis(*millis);
                    self.advance_to(target);
                    let _ = writeln!(self.out, "now {}", self.now());
                    None
                }
            };
            self.poll_waiters(None);
            if let Some(expect) = &step.expect {
                self.check(step, expect, response.as_ref());
            }
            self.snapshot_changes(false)
                .map_err(|message| ScriptError {
                    line: step.line,
                    message,
                })?;
            self.out.push('\n');
        }
        for name in self.waiters.keys() {
            let _ = writeln!(
                self.out,
                "waiter {name} is still waiting at the end of the script"
            );
        }
        Ok(Transcript {
            text: self.out,
            failures: self.failures,
        })
    }

    /// Remembers the agent names a request mentions, so that their read
    /// cursors can be reported (a store cannot list cursors).
    fn note_agents(&mut self, request: &serde_json::Value) {
        for field in [
            "agent",
            "from_agent",
            "to_agent",
            "created_by",
            "assigned_to",
        ] {
            if let Some(name) = request.get(field).and_then(|v| v.as_str()) {
                self.agents.insert(name.to_owned());
            }
        }
    }

    fn print_response(&mut self, response: &Response) {
        let _ = writeln!(self.out, "exit {} at {}", response.exit_code(), self.now());
        let _ = writeln!(self.out, "{}", response.to_json_pretty());
    }

    fn check(&mut self, step: &Step, expect: &Expect, response: Option<&Response>) {
        let Some(response) = response else {
            self.failures.push(format!(
                "line {}: `{}` produces no response to check",
                step.line, step.text
            ));
            return;
        };
        let got_code = response.error_code().map(|c| c.as_str());
        let held = match expect {
            Expect::Ok => response.is_ok(),
            Expect::Exit(code) => response.exit_code() == *code,
            Expect::Code(code) => got_code == Some(code.as_str()),
        };
        if !held {
            let wanted = match expect {
                Expect::Ok => "ok".to_owned(),
                Expect::Exit(code) => format!("exit {code}"),
                Expect::Code(code) => code.clone(),
            };
            let got = match got_code {
                Some(code) => code.to_owned(),
                None => format!("ok (exit {})", response.exit_code()),
            };
            let message = format!("line {}: expected {wanted}, got {got}", step.line);
            let _ = writeln!(self.out, "!! {message}");
            self.failures.push(message);
        }
    }

    /// Moves the clock to `target`, stopping wherever a waiter wants a poll.
    fn advance_to(&mut self, target: Timestamp) {
        loop {
            let next = self
                .wake_at
                .values()
                .copied()
                .filter(|&t| t > self.now() && t <= target)
                .min();
            match next {
                Some(at) => {
                    self.engine.clock_mut().set(at);
                    self.poll_waiters(Some(at));
                }
                None => break,
            }
        }
        self.engine.clock_mut().set(target);
    }

    /// Polls waiters: all of them (after a step, as if the store changed), or
    /// only those due at `due`.
    fn poll_waiters(&mut self, due: Option<Timestamp>) {
        let names: Vec<String> = self.waiters.keys().cloned().collect();
        for name in names {
            if let Some(at) = due
                && self.wake_at.get(&name).is_some_and(|&t| t > at)
            {
                continue;
            }
            let Some(waiter) = self.waiters.get_mut(&name) else {
                continue;
            };
            match waiter.poll(&mut self.engine) {
                WaitStep::Pending { within } => {
                    let millis = i64::try_from(within.as_millis()).unwrap_or(i64::MAX);
                    let until = self.now().plus_millis(millis);
                    self.wake_at.insert(name, until);
                }
                WaitStep::Finished(response) => {
                    self.waiters.remove(&name);
                    self.wake_at.remove(&name);
                    let _ = writeln!(self.out, "waiter {name} finished:");
                    self.print_response(&response);
                }
            }
        }
    }

    /// Prints threads whose stored record changed and events written since
    /// the last call. The first call only records the starting state.
    fn snapshot_changes(&mut self, first: bool) -> Result<(), String> {
        let store = self.engine.store_mut();
        store.begin(TxMode::Read).map_err(|e| e.to_string())?;
        let agents = &self.agents;
        let read = (|| {
            let threads = store.threads(&ThreadQuery::all(ThreadOrder::NewestFirst, usize::MAX))?;
            let events = store.events(&EventQuery::after_event(self.seen_event, usize::MAX))?;
            let mut cursors = Vec::new();
            for state in &threads {
                for agent in agents {
                    if let Some(cursor) = store.read_cursor(&state.thread.thread_id, agent)? {
                        cursors.push(cursor);
                    }
                }
            }
            Ok::<_, crate::StoreError>((threads, events, cursors))
        })();
        let _ = store.commit();
        let (mut threads, events, cursors) = read.map_err(|e| e.to_string())?;
        threads.sort_by(|a, b| a.thread.thread_id.cmp(&b.thread.thread_id));
        let mut lines = Vec::new();
        for state in &threads {
            let line = describe_thread(state);
            if self.threads.get(&state.thread.thread_id) != Some(&line) {
                self.threads
                    .insert(state.thread.thread_id.clone(), line.clone());
                lines.push(format!("  {line}"));
            }
        }
        for event in &events {
            self.seen_event = self.seen_event.max(event.event_id);
            lines.push(format!(
                "  event {} {} {} by {} -> {}: {}",
                event.event_id,
                event.event_type,
                event.thread_id,
                event.source,
                event.status,
                event.summary
            ));
        }
        for cursor in &cursors {
            let key = (cursor.thread_id.clone(), cursor.agent.clone());
            let line = format!(
                "cursor {} {} read up to {} (event {})",
                cursor.thread_id,
                cursor.agent,
                cursor.last_read_message_id,
                cursor.last_read_event_id
            );
            if self.cursors.get(&key) != Some(&line) {
                self.cursors.insert(key, line.clone());
                lines.push(format!("  {line}"));
            }
        }
        if !first {
            if lines.is_empty() {
                self.out.push_str("no changes\n");
            } else {
                self.out.push_str("changes:\n");
                for line in lines {
                    self.out.push_str(&line);
                    self.out.push('\n');
                }
            }
        }
        Ok(())
    }
}

fn describe_thread(state: &ThreadState) -> String {
    let Thread {
        thread_id,
        status,
        assigned_to,
        attempts,
        max_attempts,
        ..
    } = &state.thread;
    let mut line = format!(
        "thread {thread_id} {status} assigned_to={assigned_to} attempts={attempts}/{max_attempts}"
    );
    if let Some(lease) = &state.lease {
        let _ = write!(
            line,
            " lease={}#{} expires={}",
            lease.agent, lease.lease_token, lease.expires_at
        );
        if let Some(released) = lease.released_at {
            let _ = write!(line, " released={released}");
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_values_like_json_with_bare_words_and_lists() {
        let script = Script::parse(
            r#"fetch agent=w status=[pending, blocked] limit=5 unread=true # comment
send from_agent=a to_agent=b subject="Fix #12 now" payload={"n": [1, 2]} => ok"#,
        )
        .unwrap();
        assert_eq!(
            script.steps[0].action,
            StepAction::Command(serde_json::json!({
                "command": "fetch", "agent": "w", "status": ["pending", "blocked"], "limit": 5, "unread": true
            }))
        );
        assert_eq!(script.steps[1].expect, Some(Expect::Ok));
        assert_eq!(
            script.steps[1].action,
            StepAction::Command(serde_json::json!({
                "command": "send", "from_agent": "a", "to_agent": "b", "subject": "Fix #12 now", "payload": {"n": [1, 2]}
            }))
        );
    }

    #[test]
    fn durations_add_up() {
        assert_eq!(parse_duration("1m30s"), Ok(90_000));
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5 minutes").is_err());
    }

    #[test]
    fn reports_the_line_of_a_bad_step() {
        let err = Script::parse("\n\nclaim agent=w thread_id").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.message.contains("field=value"), "{}", err.message);
    }
}
