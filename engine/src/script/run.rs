//! Running a parsed script against a store: each step's response, what it
//! changed in the store, what background waiters returned, and every
//! expectation that did not hold, as one transcript.
//!
//! The runner uses only the [`Store`] trait, the wire format and the
//! [`Waiter`], so every host produces the same transcript, byte for byte.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::call::Call;
use crate::engine::Engine;
use crate::ids::SequentialIds;
use crate::model::{EventId, Thread};
use crate::orch::model::OrchEvent;
use crate::orch::query::OrchEventQuery;
use crate::response::Response;
use crate::store::{AgentQuery, EventQuery, Store, ThreadOrder, ThreadQuery, ThreadState, TxMode};
use crate::time::{ManualClock, Timestamp};
use crate::wait::{WaitStep, Waiter};

use super::expect::{Expectation, problems};
use super::parse::{Script, Step, StepAction};
use super::{ScriptError, Transcript};

impl Script {
    /// Runs the script against `store` (fresh and initialized) and returns
    /// the transcript.
    pub fn run<S: Store>(&self, store: S) -> Result<Transcript, ScriptError> {
        Runner::new(store).run(self)
    }
}

/// A background waiter and what the script expects it to finish with.
struct Background {
    waiter: Waiter,
    /// When it wants to be polled next.
    wake_at: Timestamp,
    /// The `spawn` line's expectation, and that line.
    expect: Option<(usize, Expectation)>,
}

struct Runner<S: Store> {
    engine: Engine<S, ManualClock, SequentialIds>,
    waiters: BTreeMap<String, Background>,
    /// Waiters that finished during the current step (for `wakes(NAME)`).
    finished: BTreeSet<String>,
    seen_event: EventId,
    threads: BTreeMap<String, String>,
    /// Agent names the script has mentioned, whose read cursors are reported.
    agents: BTreeSet<String>,
    cursors: BTreeMap<(String, String), String>,
    /// The registry as last described, by agent name.
    registry: BTreeMap<String, String>,
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
            finished: BTreeSet::new(),
            seen_event: 0,
            threads: BTreeMap::new(),
            agents: BTreeSet::new(),
            cursors: BTreeMap::new(),
            registry: BTreeMap::new(),
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
            self.step(step)?;
        }
        self.report_unfinished();
        Ok(Transcript {
            text: self.out,
            failures: self.failures,
        })
    }

    /// One step: its action and response, the waiters it woke, its
    /// expectation, and what it changed.
    fn step(&mut self, step: &Step) -> Result<(), ScriptError> {
        let _ = writeln!(self.out, "-- line {} --", step.line);
        let _ = writeln!(self.out, "> {}", step.text);
        self.finished.clear();
        let response = self.act(step)?;
        self.poll_waiters(None);
        if let Some(expect) = &step.expect {
            self.check_step(step, expect, response.as_ref());
        }
        self.snapshot_changes(false)
            .map_err(|message| ScriptError {
                line: step.line,
                message,
            })?;
        self.out.push('\n');
        Ok(())
    }

    /// Runs the step's action; the response it printed, if it has one.
    fn act(&mut self, step: &Step) -> Result<Option<Response>, ScriptError> {
        let refuse = |message: String| ScriptError {
            line: step.line,
            message,
        };
        Ok(match &step.action {
            StepAction::Command(value) => {
                self.note_agents(value);
                let response = match Call::from_value(value.clone()) {
                    Ok(call) => self.engine.execute_call(call),
                    Err(failure) => *failure,
                };
                self.print_response(&response);
                Some(response)
            }
            StepAction::Spawn(name, value) => {
                if self.waiters.contains_key(name) {
                    return Err(refuse(format!("a waiter named {name} is still waiting")));
                }
                self.spawn(step, name, value)
            }
            StepAction::Clock(at) => {
                if *at < self.now() {
                    return Err(refuse(format!(
                        "clock cannot go back from {} to {at}",
                        self.now()
                    )));
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
        })
    }

    /// Starts a background waiter; a request that cannot wait is the
    /// step's response instead.
    fn spawn(&mut self, step: &Step, name: &str, value: &serde_json::Value) -> Option<Response> {
        match Call::from_value(value.clone()).and_then(Waiter::for_call) {
            Ok(waiter) => {
                let _ = writeln!(self.out, "waiter {name} started at {}", self.now());
                let background = Background {
                    waiter,
                    wake_at: self.now(),
                    expect: step.expect.clone().map(|e| (step.line, e)),
                };
                self.waiters.insert(name.to_owned(), background);
                None
            }
            Err(failure) => {
                self.print_response(&failure);
                Some(*failure)
            }
        }
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

    /// Checks a step's expectation: its response (a spawned waiter's is
    /// checked when it finishes) and the waiters it must have woken.
    fn check_step(&mut self, step: &Step, expect: &Expectation, response: Option<&Response>) {
        let spawned = matches!(step.action, StepAction::Spawn(..)) && response.is_none();
        let asserts_response = expect.outcome.is_some() || !expect.checks.is_empty();
        match response {
            Some(response) => self.check_response(step.line, None, expect, response),
            None if asserts_response && !spawned => self.fail(format!(
                "line {}: `{}` produces no response to check",
                step.line, step.text
            )),
            None => {}
        }
        for name in &expect.wakes {
            if !self.finished.contains(name) {
                let state = if self.waiters.contains_key(name) {
                    "is still waiting"
                } else {
                    "was not waiting"
                };
                self.fail(format!(
                    "line {}: waiter {name} {state}; expected this step to wake it",
                    step.line
                ));
            }
        }
    }

    /// Checks `response` against the outcome and field checks of `expect`,
    /// written on `line` (for a waiter, the `spawn` line).
    fn check_response(
        &mut self,
        line: usize,
        waiter: Option<&str>,
        expect: &Expectation,
        response: &Response,
    ) {
        let json: serde_json::Value = serde_json::from_str(&response.to_json()).unwrap_or_default();
        let code = response.error_code().map(|c| c.as_str());
        let whose = waiter.map_or(String::new(), |name| format!(" (waiter {name})"));
        for problem in problems(expect, &json, response.exit_code(), code) {
            self.fail(format!("line {line}{whose}: {problem}"));
        }
    }

    /// Records a failed expectation, in the transcript and the list.
    fn fail(&mut self, message: String) {
        let _ = writeln!(self.out, "!! {message}");
        self.failures.push(message);
    }

    /// Moves the clock to `target`, stopping wherever a waiter wants a poll.
    fn advance_to(&mut self, target: Timestamp) {
        loop {
            let next = self
                .waiters
                .values()
                .map(|w| w.wake_at)
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
            let Some(background) = self.waiters.get_mut(&name) else {
                continue;
            };
            if due.is_some_and(|at| background.wake_at > at) {
                continue;
            }
            match background.waiter.poll(&mut self.engine) {
                WaitStep::Pending { within } => {
                    let millis = i64::try_from(within.as_millis()).unwrap_or(i64::MAX);
                    background.wake_at = self.engine.clock().peek().plus_millis(millis);
                }
                WaitStep::Finished(response) => self.finish(&name, &response),
            }
        }
    }

    /// A waiter finished: prints what it returned and checks it.
    fn finish(&mut self, name: &str, response: &Response) {
        let Some(background) = self.waiters.remove(name) else {
            return;
        };
        self.finished.insert(name.to_owned());
        let _ = writeln!(self.out, "waiter {name} finished:");
        self.print_response(response);
        if let Some((line, expect)) = &background.expect {
            self.check_response(*line, Some(name), expect, response);
        }
    }

    /// Waiters still waiting when the script ends: said in the transcript,
    /// and a failure when the script expected them to finish.
    fn report_unfinished(&mut self) {
        let unfinished: Vec<(String, Option<usize>)> = self
            .waiters
            .iter()
            .map(|(name, b)| (name.clone(), b.expect.as_ref().map(|(line, _)| *line)))
            .collect();
        for (name, expected_on) in unfinished {
            let _ = writeln!(
                self.out,
                "waiter {name} is still waiting at the end of the script"
            );
            if let Some(line) = expected_on {
                self.fail(format!(
                    "line {line}: waiter {name} never finished, so its expectation was never met"
                ));
            }
        }
    }

    /// Prints threads whose stored record changed and events written since
    /// the last call. The first call only records the starting state.
    fn snapshot_changes(&mut self, first: bool) -> Result<(), String> {
        let World {
            mut threads,
            events,
            orch_events,
            cursors,
            registry,
        } = self.read_everything()?;
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
        // Threads retention removed, with everything of theirs.
        let present: std::collections::BTreeSet<&str> = threads
            .iter()
            .map(|s| s.thread.thread_id.as_str())
            .collect();
        let removed: Vec<String> = (self.threads.keys())
            .filter(|id| !present.contains(id.as_str()))
            .cloned()
            .collect();
        for id in removed {
            self.threads.remove(&id);
            self.cursors.retain(|(thread, _), _| *thread != id);
            lines.push(format!("  thread {id} removed"));
        }
        let mut described: Vec<(u64, String)> = events
            .iter()
            .map(|event| {
                let line = format!(
                    "  event {} {} {} by {} -> {}: {}",
                    event.event_id,
                    event.event_type,
                    event.thread_id,
                    event.source,
                    event.status,
                    event.summary
                );
                (event.event_id, line)
            })
            .collect();
        described.extend(
            orch_events
                .iter()
                .map(|event| (event.event_id, describe_orch_event(event))),
        );
        described.sort_by_key(|(id, _)| *id);
        for (id, line) in described {
            self.seen_event = self.seen_event.max(id);
            lines.push(line);
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
        lines.extend(self.registry_changes(registry));
        if !first {
            self.print_changes(&lines);
        }
        Ok(())
    }

    /// Agents registered, changed or unregistered since the last look.
    fn registry_changes(&mut self, registry: Vec<crate::Agent>) -> Vec<String> {
        let mut lines = Vec::new();
        let now: BTreeMap<String, String> = registry
            .into_iter()
            .map(|a| {
                let line = format!(
                    "agent {} roles=[{}] seen={} last_assigned_event={}",
                    a.name,
                    a.roles.join(", "),
                    a.seen_at,
                    a.last_assigned_event
                );
                (a.name, line)
            })
            .collect();
        for (name, line) in &now {
            if self.registry.get(name) != Some(line) {
                lines.push(format!("  {line}"));
            }
        }
        for name in self.registry.keys().filter(|n| !now.contains_key(*n)) {
            lines.push(format!("  agent {name} unregistered"));
        }
        self.registry = now;
        lines
    }

    /// Every thread, the events since the last look, the read cursors of
    /// the agents mentioned so far and the registry, in one read transaction.
    fn read_everything(&mut self) -> Result<World, String> {
        let seen = self.seen_event;
        let store = self.engine.store_mut();
        store.begin(TxMode::Read).map_err(|e| e.to_string())?;
        let agents = &self.agents;
        let read = (|| {
            let threads = store.threads(&ThreadQuery::all(ThreadOrder::NewestFirst, usize::MAX))?;
            let events = store.events(&EventQuery::after_event(seen, usize::MAX))?;
            let orch_events = store.orch_events(&OrchEventQuery {
                after_event: seen,
                run_id: None,
                event_types: Vec::new(),
                limit: usize::MAX,
            })?;
            let mut cursors = Vec::new();
            for state in &threads {
                for agent in agents {
                    if let Some(cursor) = store.read_cursor(&state.thread.thread_id, agent)? {
                        cursors.push(cursor);
                    }
                }
            }
            let registry = store.agents(&AgentQuery {
                name: None,
                role: None,
                limit: usize::MAX,
            })?;
            Ok::<_, crate::StoreError>(World {
                threads,
                events,
                orch_events,
                cursors,
                registry,
            })
        })();
        let _ = store.commit();
        read.map_err(|e| e.to_string())
    }

    fn print_changes(&mut self, lines: &[String]) {
        if lines.is_empty() {
            self.out.push_str("no changes\n");
            return;
        }
        self.out.push_str("changes:\n");
        for line in lines {
            self.out.push_str(line);
            self.out.push('\n');
        }
    }
}

/// What [`Runner::read_everything`] reads.
struct World {
    threads: Vec<ThreadState>,
    events: Vec<crate::Event>,
    orch_events: Vec<OrchEvent>,
    cursors: Vec<crate::ReadCursor>,
    registry: Vec<crate::Agent>,
}

fn describe_orch_event(event: &OrchEvent) -> String {
    let subject = match &event.task_id {
        Some(task) => format!("{}/{task}", event.run_id),
        None => event.run_id.clone(),
    };
    let status = event
        .task_status
        .map_or_else(|| event.run_status.to_string(), |s| s.to_string());
    format!(
        "  event {} {} {subject} by {} -> {status}: {}",
        event.event_id, event.event_type, event.source, event.summary
    )
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
