//! Council review, over orch's tasks: `orch-council` (one task per seat,
//! the first round dispatched at once, the ballot round's tasks pending on
//! it), `orch-council-show` (the report), the check every `done` on a seat's
//! thread goes through, the message each seat's attempt opens its thread
//! with, and the `council_completed` event.
//!
//! A council is nothing but its seats' tasks (found by id: `<council>-A`,
//! `<council>-A-ballot`, ...) and their threads' answers: no record of its
//! own, so every orch rule (dispatch, retries, cancellation, skipping)
//! applies to it unchanged. What reviewers are sent names seats, never
//! reviewers. The shapes and the grouping are in `orch::council` and
//! `orch::council_report`; nothing here reads a clock.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::Address;
use crate::error::EngineError;
use crate::ids::{IdKind, IdSource};
use crate::model::{JsonObject, Kind, Priority};
use crate::orch::council::{self, Ballot, CouncilSeat, Review};
use crate::orch::council_report::{self as report, CouncilReport, CouncilStage, Group, SeatState};
use crate::orch::model::{OrchEventType, Run, Task, TaskStatus};
use crate::orch::query::{TaskOrder, TaskQuery};
use crate::orch::rules::{DEFAULT_RETRY, TaskAction};
use crate::store::{MessageQuery, Store};
use crate::validate as v;
use crate::vocabulary::Vocabulary;
use crate::wire::*;

use super::input::{CouncilInput, CouncilRead, CouncilSubject, Holder, MessageDraft, NewTask};
use super::orch_steps::RunChange;
use super::tx::Tx;

/// One seat's tasks, as stored now.
struct SeatTasks {
    review: Task,
    ballot: Option<Task>,
}

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    pub(super) fn orch_council(
        &mut self,
        input: CouncilInput,
    ) -> Result<CouncilOutput, EngineError> {
        let CouncilInput {
            leader,
            council_id,
            subject,
            seats,
            ballot,
        } = input;
        let mut change = self.open_run(leader.run_id.as_deref(), false)?;
        for reviewer in seats.iter().collect::<BTreeSet<_>>() {
            self.check_recipient("`reviewers`", &Address::stored(reviewer))?;
        }
        let council_id = council_id.unwrap_or_else(|| self.ids.next_id(IdKind::Council, self.now));
        let markers = seat_markers(&council_id, &seats, ballot, &subject.revision);
        self.expect_new_council(&change.run, &markers)?;
        let first_round: Vec<String> = markers
            .iter()
            .filter(|(m, _)| m.round == 1)
            .map(|(m, _)| council::seat_task_id(&m.council_id, &m.seat, 1))
            .collect();
        let mut statuses = BTreeMap::new();
        let mut tasks = Vec::with_capacity(markers.len());
        for (seat, assignee) in markers {
            let round = seat.round;
            let spec = seat_task(&subject, seat, assignee, &first_round);
            let mut task = self.add_task(&mut change, spec, &mut statuses, &leader.agent)?;
            if round == 1 {
                let draft = review_draft(&task, 1, subject_payload(&subject));
                self.start_attempt_with(
                    &mut change,
                    &mut task,
                    TaskAction::Dispatch,
                    &leader.agent,
                    draft,
                    None,
                )?;
                statuses.insert(task.task_id.clone(), task.status);
            }
            tasks.push(task);
        }
        self.settle_run(&mut change, &leader.agent)?;
        self.save_run(&change)?;
        Ok(CouncilOutput {
            event_id: change.last_event_id(),
            run: change.run,
            council_id,
            tasks,
        })
    }

    pub(super) fn orch_council_show(
        &mut self,
        input: CouncilRead,
    ) -> Result<CouncilShowOutput, EngineError> {
        let run = self.current_run(input.run_id.as_deref())?;
        let council_id = match input.council_id {
            Some(id) => id,
            None => self.newest_council(&run)?,
        };
        let council = self.council_report(&run, &council_id)?;
        Ok(CouncilShowOutput { run, council })
    }

    /// Refuses a council whose seats' task ids the run already has.
    fn expect_new_council(
        &mut self,
        run: &Run,
        markers: &[(CouncilSeat, &String)],
    ) -> Result<(), EngineError> {
        for (seat, _) in markers {
            let task_id = council::seat_task_id(&seat.council_id, &seat.seat, seat.round);
            if self.store.task(&run.run_id, &task_id)?.is_some() {
                return Err(EngineError::TaskExists {
                    run_id: run.run_id.clone(),
                    task_id: task_id.clone(),
                    message: format!(
                        "council_id: run {} already has a task {task_id}, which a seat of council {} would be; pick another council id",
                        run.run_id, seat.council_id
                    ),
                });
            }
        }
        Ok(())
    }

    /// The council the run added a seat of last.
    fn newest_council(&mut self, run: &Run) -> Result<String, EngineError> {
        let query = TaskQuery::in_statuses(&run.run_id, &[], TaskOrder::Added);
        let newest = self
            .store
            .tasks(&query)?
            .into_iter()
            .rev()
            .find_map(|t| t.council.map(|c| c.council_id));
        newest.ok_or_else(|| EngineError::CouncilNotFound {
            run_id: run.run_id.clone(),
            message: format!(
                "run {} has no council yet; start one with `orch council --title ... --reviewer ...`",
                run.run_id
            ),
        })
    }

    /// Every seat of a council, A first, as stored now.
    fn council_seats(
        &mut self,
        run_id: &str,
        council_id: &str,
    ) -> Result<(CouncilSeat, Vec<SeatTasks>), EngineError> {
        let first = self
            .store
            .task(run_id, &council::seat_task_id(council_id, "A", 1))?
            .and_then(|t| {
                t.council
                    .clone()
                    .filter(|c| c.council_id == council_id && c.round == 1)
            });
        let Some(marker) = first else {
            return Err(EngineError::CouncilNotFound {
                run_id: run_id.to_owned(),
                message: format!(
                    "run {run_id} has no council {council_id}; `orch council show` without an id shows the newest"
                ),
            });
        };
        let mut seats = Vec::with_capacity(marker.seats as usize);
        for index in 0..marker.seats {
            let letter = council::seat_letter(index);
            let review = self.seat_task(run_id, council_id, &letter, 1)?;
            let ballot = match marker.ballot {
                true => Some(self.seat_task(run_id, council_id, &letter, 2)?),
                false => None,
            };
            seats.push(SeatTasks { review, ballot });
        }
        Ok((marker, seats))
    }

    fn seat_task(
        &mut self,
        run_id: &str,
        council_id: &str,
        seat: &str,
        round: u32,
    ) -> Result<Task, EngineError> {
        let task_id = council::seat_task_id(council_id, seat, round);
        self.store.task(run_id, &task_id)?.ok_or_else(|| {
            EngineError::internal(format!("council {council_id} has lost its task {task_id}"))
        })
    }

    /// The answer a seat's task finished its thread with, if it is done.
    fn answer_of(&mut self, task: &Task) -> Result<Option<JsonObject>, EngineError> {
        if task.status != TaskStatus::Done {
            return Ok(None);
        }
        Ok(self
            .attempt_result(task)?
            .filter(|m| m.kind == Kind::Result)
            .map(|m| m.payload))
    }

    /// The first round's answers, by seat letter.
    fn reviews(&mut self, seats: &[SeatTasks]) -> Result<Vec<(String, Review)>, EngineError> {
        let mut reviews = Vec::new();
        for seat in seats {
            let Some(payload) = self.answer_of(&seat.review)? else {
                continue;
            };
            if let (Ok(review), Some(marker)) =
                (council::read_review(&payload), &seat.review.council)
            {
                reviews.push((marker.seat.clone(), review));
            }
        }
        Ok(reviews)
    }

    /// The ballots cast, by seat letter, over `groups`.
    fn ballots(
        &mut self,
        seats: &[SeatTasks],
        groups: &[String],
    ) -> Result<Vec<(String, Ballot)>, EngineError> {
        let mut ballots = Vec::new();
        for task in seats.iter().filter_map(|s| s.ballot.as_ref()) {
            let Some(payload) = self.answer_of(task)? else {
                continue;
            };
            if let (Ok(ballot), Some(marker)) =
                (council::read_ballot(&payload, groups), &task.council)
            {
                ballots.push((marker.seat.clone(), ballot));
            }
        }
        Ok(ballots)
    }

    /// The groups of a council's first-round answers.
    fn council_groups(
        &mut self,
        run_id: &str,
        council_id: &str,
    ) -> Result<Vec<Group>, EngineError> {
        let (_, seats) = self.council_seats(run_id, council_id)?;
        let reviews = self.reviews(&seats)?;
        Ok(report::group_findings(&reviews))
    }

    /// The whole report on a council, as its seats' tasks and threads are now.
    fn council_report(
        &mut self,
        run: &Run,
        council_id: &str,
    ) -> Result<CouncilReport, EngineError> {
        let (marker, seats) = self.council_seats(&run.run_id, council_id)?;
        let reviews = self.reviews(&seats)?;
        let mut groups = report::group_findings(&reviews);
        let ids: Vec<String> = groups.iter().map(|g| g.group.clone()).collect();
        let ballots = self.ballots(&seats, &ids)?;
        if marker.ballot {
            report::tally_ballots(&mut groups, &ballots);
        }
        let answered = |seat: &str| reviews.iter().any(|(s, _)| s == seat);
        let states: Vec<SeatState> = seats
            .iter()
            .map(|s| seat_state(s, &reviews, &ballots))
            .collect();
        Ok(CouncilReport {
            council_id: council_id.to_owned(),
            run_id: run.run_id.clone(),
            title: seats
                .first()
                .map(|s| s.review.title.clone())
                .unwrap_or_default(),
            revision: marker.revision.clone(),
            ballot: marker.ballot,
            stage: stage(&seats),
            verdicts: report::count_verdicts(&reviews),
            unanswered: states
                .iter()
                .filter(|s| !answered(&s.seat))
                .map(|s| s.seat.clone())
                .collect(),
            unvoted: states
                .iter()
                .filter(|s| s.ballot_task_id.is_some() && !s.voted)
                .map(|s| s.seat.clone())
                .collect(),
            seats: states,
            groups,
            line_tolerance: report::LINE_TOLERANCE,
        })
    }

    /// `done` on a council seat's thread: its payload must be the seat's
    /// round's answer, or the `done` is refused and nothing changes. Every
    /// other thread passes untouched (one task lookup for orch's threads).
    pub(super) fn check_council_answer(
        &mut self,
        holder: &Holder,
        draft: &MessageDraft,
        run_id: Option<&str>,
        task_id: Option<&str>,
    ) -> Result<(), EngineError> {
        let (Some(run_id), Some(task_id)) = (run_id, task_id) else {
            return Ok(());
        };
        let Some(seat) = self.store.task(run_id, task_id)?.and_then(|t| t.council) else {
            return Ok(());
        };
        let payload = &draft.payload;
        let read = match seat.round {
            1 => council::read_review(payload).map(drop),
            _ => {
                let groups = self.council_groups(run_id, &seat.council_id)?;
                let ids: Vec<String> = groups.into_iter().map(|g| g.group).collect();
                council::read_ballot(payload, &ids).map(drop)
            }
        };
        read.map_err(|e| EngineError::InvalidAnswer {
            thread_id: holder.thread_id.clone(),
            council_id: seat.council_id.clone(),
            seat: seat.seat.clone(),
            path: e.path,
            problem: e.problem,
        })
    }

    /// The first message of a seat's next attempt: the review's text with
    /// the subject the attempt before carried, or the ballot over the groups
    /// as they are now.
    pub(super) fn council_draft(
        &mut self,
        task: &Task,
        seat: &CouncilSeat,
        number: u32,
    ) -> Result<MessageDraft, EngineError> {
        if seat.round == 1 {
            let subject = self.previous_subject(task)?;
            return Ok(review_draft(task, number, subject));
        }
        let groups = self.council_groups(&task.run_id, &seat.council_id)?;
        Ok(ballot_draft(task, seat, number, &groups))
    }

    /// The subject the task's current (last) attempt's thread opened with.
    fn previous_subject(&mut self, task: &Task) -> Result<serde_json::Value, EngineError> {
        let Some(thread_id) = task.thread_id.clone() else {
            return Ok(serde_json::Value::Null);
        };
        let query = MessageQuery {
            thread_id,
            from_agent: None,
            after_event: 0,
            newest_first: false,
            limit: 1,
        };
        let first = self.store.messages(&query)?.into_iter().next();
        Ok(first
            .and_then(|m| m.payload.get("subject").cloned())
            .unwrap_or(serde_json::Value::Null))
    }

    /// After a seat's task ended: when every seat of its council has ended,
    /// records `council_completed`, which wakes `orch wait`.
    pub(super) fn council_settled(
        &mut self,
        change: &mut RunChange,
        seat: &CouncilSeat,
    ) -> Result<(), EngineError> {
        let (_, seats) = self.council_seats(&change.run.run_id, &seat.council_id)?;
        if stage(&seats) != CouncilStage::Complete {
            return Ok(());
        }
        let summary = format!(
            "council {} is complete: `orch council show {}` has its report",
            seat.council_id, seat.council_id
        );
        let mut payload = JsonObject::new();
        payload.insert("council_id".into(), seat.council_id.clone().into());
        let source = v::ORCH_AGENT;
        self.emit(
            change,
            None,
            OrchEventType::CouncilCompleted,
            source,
            summary,
            payload,
        )?;
        Ok(())
    }
}

/// Every seat of a new council with its reviewer: the first round's seats,
/// then (with a ballot) the second round's, each in seat order.
fn seat_markers<'a>(
    council_id: &str,
    seats: &'a [String],
    ballot: bool,
    revision: &Option<String>,
) -> Vec<(CouncilSeat, &'a String)> {
    let rounds = if ballot { 2 } else { 1 };
    let count = u32::try_from(seats.len()).unwrap_or(u32::MAX);
    (1..=rounds)
        .flat_map(|round| (0..count).zip(seats).map(move |(i, a)| (i, a, round)))
        .map(|(index, assignee, round)| {
            let seat = CouncilSeat {
                council_id: council_id.to_owned(),
                seat: council::seat_letter(index),
                round,
                seats: count,
                ballot,
                revision: revision.clone(),
            };
            (seat, assignee)
        })
        .collect()
}

/// Where a council is, from its seats' tasks.
fn stage(seats: &[SeatTasks]) -> CouncilStage {
    if seats.iter().any(|s| !s.review.status.is_terminal()) {
        CouncilStage::Reviewing
    } else if seats
        .iter()
        .filter_map(|s| s.ballot.as_ref())
        .any(|t| !t.status.is_terminal())
    {
        CouncilStage::Balloting
    } else {
        CouncilStage::Complete
    }
}

fn seat_state(
    seat: &SeatTasks,
    reviews: &[(String, Review)],
    ballots: &[(String, Ballot)],
) -> SeatState {
    let letter = seat
        .review
        .council
        .as_ref()
        .map_or_else(String::new, |c| c.seat.clone());
    let review = reviews.iter().find(|(s, _)| *s == letter);
    SeatState {
        voted: ballots.iter().any(|(s, _)| *s == letter),
        seat: letter,
        assignee: seat.review.assignee.clone(),
        task_id: seat.review.task_id.clone(),
        status: seat.review.status,
        thread_id: seat.review.thread_id.clone(),
        verdict: review.map(|(_, r)| r.verdict),
        findings: review.map(|(_, r)| u32::try_from(r.findings.len()).unwrap_or(u32::MAX)),
        ballot_task_id: seat.ballot.as_ref().map(|t| t.task_id.clone()),
        ballot_status: seat.ballot.as_ref().map(|t| t.status),
    }
}

/// A seat's task as `orch council` adds it: the first round's text, or the
/// ballot's (which needs every first-round seat).
fn seat_task(
    subject: &CouncilSubject,
    seat: CouncilSeat,
    assignee: &str,
    first_round: &[String],
) -> NewTask {
    let (body, needs) = match seat.round {
        1 => (review_text(subject, &seat), Vec::new()),
        _ => (ballot_intro(&seat, &subject.title), first_round.to_vec()),
    };
    NewTask {
        task_id: council::seat_task_id(&seat.council_id, &seat.seat, seat.round),
        title: subject.title.clone(),
        body,
        acceptance: Vec::new(),
        assignee: assignee.to_owned(),
        priority: Priority::Normal,
        needs,
        retry: DEFAULT_RETRY,
        review: false,
        base: None,
        council: Some(seat),
    }
}

/// The subject as every first-round message's payload carries it.
fn subject_payload(subject: &CouncilSubject) -> serde_json::Value {
    serde_json::json!({
        "title": subject.title,
        "revision": subject.revision,
        "files": subject.files,
        "body": subject.body,
        "diff": subject.diff,
    })
}

/// The closed lists, as the messages' payloads carry them.
fn lists() -> serde_json::Value {
    fn all<V: Vocabulary>() -> Vec<&'static str> {
        V::ALL.iter().map(|v| v.as_str()).collect()
    }
    serde_json::json!({
        "verdict": all::<council::Verdict>(),
        "severity": all::<council::Severity>(),
        "category": all::<council::Category>(),
        "topic": all::<council::Topic>(),
        "vote": all::<council::Vote>(),
    })
}

const REVIEW_EXAMPLE: &str = r#"{"council_review": 1, "verdict": "changes", "findings": [{"anchor": {"path": "src/a.rs", "lines": [10, 14]}, "category": "bug", "severity": "major", "claim": "what is wrong", "action": "what to do", "evidence": "why you believe it"}, {"anchor": {"topic": "tests"}, "category": "testing", "severity": "minor", "claim": "..."}]}"#;

/// A first-round seat's task text: who it is (a seat, never a name), the
/// subject, and how to answer.
fn review_text(subject: &CouncilSubject, seat: &CouncilSeat) -> String {
    let mut text = format!(
        "You hold seat {} of {} on council {}. Review the subject below on your own; the other seats review it too, and everyone is known by seat letter only.\n\nSubject: {}\n",
        seat.seat, seat.seats, seat.council_id, subject.title
    );
    if let Some(revision) = &subject.revision {
        text.push_str(&format!("Revision: {revision}\n"));
    }
    if !subject.files.is_empty() {
        text.push_str("Files:\n");
        for file in &subject.files {
            text.push_str(&format!("- {file}\n"));
        }
    }
    if !subject.body.is_empty() {
        text.push_str(&format!("\n{}\n", subject.body));
    }
    if !subject.diff.is_empty() {
        text.push_str(&format!("\nDiff:\n{}\n", subject.diff));
    }
    text.push_str(&format!(
        "\nAnswer by finishing this thread with `inbox done` and a payload of this shape (`orch skill council-review` explains it):\n{REVIEW_EXAMPLE}\n- verdict: {}\n- anchor: {{\"path\", \"lines\": [first, last], \"revision\"}} or {{\"topic\"}}, a topic being one of {}\n- category: {}\n- severity: {}\nA payload of another shape is refused with the path of the value at fault, and the thread stays yours: correct it and run done again.\n",
        council::Verdict::expected(),
        council::Topic::expected(),
        council::Category::expected(),
        council::Severity::expected(),
    ));
    text
}

/// A ballot seat's task text before its groups are known.
fn ballot_intro(seat: &CouncilSeat, title: &str) -> String {
    format!(
        "You hold seat {} of {} on council {}: once every seat has reviewed \"{title}\", vote on each group of findings. The groups are in this task's thread when it is dispatched.\n",
        seat.seat, seat.seats, seat.council_id
    )
}

/// The first message of a first-round attempt.
fn review_draft(task: &Task, number: u32, subject: serde_json::Value) -> MessageDraft {
    let mut payload = seat_payload(task, number);
    payload.insert("subject".into(), subject);
    let mut answer = JsonObject::new();
    answer.insert("shape".into(), "council_review".into());
    answer.insert("version".into(), council::REVIEW_VERSION.into());
    answer.insert("lists".into(), lists());
    answer.insert("skill".into(), "orch skill council-review".into());
    payload.insert("answer".into(), answer.into());
    MessageDraft {
        kind: Kind::Task,
        summary: task.title.clone(),
        body: task.body.clone(),
        payload,
        artifacts: Vec::new(),
    }
}

/// What every seat's first message carries, as orch's other tasks' do,
/// plus the seat (never a reviewer's name).
fn seat_payload(task: &Task, number: u32) -> JsonObject {
    let mut payload = JsonObject::new();
    payload.insert("run_id".into(), task.run_id.clone().into());
    payload.insert("task_id".into(), task.task_id.clone().into());
    payload.insert("attempt".into(), number.into());
    payload.insert("acceptance".into(), serde_json::Value::Array(Vec::new()));
    if let Ok(seat) = serde_json::to_value(&task.council) {
        payload.insert("council".into(), seat);
    }
    payload
}

/// The first message of a ballot attempt: the groups, by seat letter.
fn ballot_draft(task: &Task, seat: &CouncilSeat, number: u32, groups: &[Group]) -> MessageDraft {
    let mut body = format!(
        "You hold seat {} of {} on council {}. Every seat has reviewed \"{}\"; their findings are grouped below by code (the same file and category with lines at most {} apart, or the same topic and category). Vote on every group once: agree if the finding is real and worth acting on, disagree if not.\n\n",
        seat.seat,
        seat.seats,
        seat.council_id,
        task.title,
        report::LINE_TOLERANCE
    );
    for group in groups {
        body.push_str(&group_text(group));
    }
    let votes: Vec<String> = groups
        .iter()
        .map(|g| {
            format!(
                "{{\"group\": \"{}\", \"vote\": \"agree\", \"comment\": \"...\"}}",
                g.group
            )
        })
        .collect();
    body.push_str(&format!(
        "\nAnswer by finishing this thread with `inbox done` and this payload, one vote ({}) per group (`orch skill council-review` explains it):\n{{\"council_ballot\": 1, \"votes\": [{}]}}\n",
        council::Vote::expected(),
        votes.join(", ")
    ));
    let mut payload = seat_payload(task, number);
    let mut shown: Vec<Group> = groups.to_vec();
    if groups_size(&shown) > v::PAYLOAD_MAX_BYTES / 2 {
        // Too long to carry whole: the body lists every finding.
        shown.iter_mut().for_each(|g| g.findings.clear());
    }
    payload.insert(
        "groups".into(),
        serde_json::to_value(&shown).unwrap_or_default(),
    );
    let mut answer = JsonObject::new();
    answer.insert("shape".into(), "council_ballot".into());
    answer.insert("version".into(), council::BALLOT_VERSION.into());
    answer.insert("lists".into(), lists());
    payload.insert("answer".into(), answer.into());
    super::orch_steps::truncate_body(&mut body);
    MessageDraft {
        kind: Kind::Task,
        summary: format!("Ballot: {}", task.title)
            .chars()
            .take(v::SUMMARY_MAX_CHARS)
            .collect(),
        body,
        payload,
        artifacts: Vec::new(),
    }
}

fn groups_size(groups: &[Group]) -> usize {
    serde_json::to_string(groups).map_or(usize::MAX, |s| s.len())
}

/// One group as a ballot lists it: what it is about, who raised it, and
/// each finding.
fn group_text(group: &Group) -> String {
    let anchor = match (&group.anchor.path, &group.anchor.lines, group.anchor.topic) {
        (Some(path), Some(lines), _) => format!("{path}:{}-{}", lines[0], lines[1]),
        (_, _, Some(topic)) => format!("topic {topic}"),
        _ => String::new(),
    };
    let mut text = format!(
        "{}  {anchor}  {}  raised by {} ({} of them), highest {}, median {}\n",
        group.group,
        group.category,
        group.seats.join(", "),
        group.count,
        group.highest,
        group.median
    );
    for f in &group.findings {
        let lines = f
            .lines
            .as_ref()
            .map_or_else(String::new, |l| format!(", lines {}-{}", l[0], l[1]));
        text.push_str(&format!(
            "  {} ({}{lines}): {}\n",
            f.seat, f.severity, f.claim
        ));
        if !f.action.is_empty() {
            text.push_str(&format!("    action: {}\n", f.action));
        }
        if !f.evidence.is_empty() {
            text.push_str(&format!("    evidence: {}\n", f.evidence));
        }
    }
    text
}
