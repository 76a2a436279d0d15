//! Council review's shapes: the marker a council seat's task carries
//! ([`CouncilSeat`]), the closed lists a reviewer answers with ([`Verdict`],
//! [`Severity`], [`Category`], [`Topic`], [`Vote`]), the versioned answers
//! ([`Review`] for the first round, [`Ballot`] for the second) and the one
//! reading of a `done` payload into them, which refuses anything else with
//! the JSON path of the value at fault ([`AnswerError`]).
//!
//! Pure: nothing here reads a store or a clock. How answers are grouped and
//! tallied is in [`super::council_report`]; when a payload is checked and
//! how seats become tasks is the engine's (`engine::orch_council`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::JsonObject;
use crate::vocabulary::{Vocabulary, vocabulary};

/// The version of the first round's answer (`"council_review": 1`).
pub const REVIEW_VERSION: u64 = 1;
/// The version of the second round's answer (`"council_ballot": 1`).
pub const BALLOT_VERSION: u64 = 1;
/// Seats of one council, at most: one letter each, A to Z.
pub const MAX_SEATS: u32 = 26;
/// Seats of one council, at least: one reviewer is not a council.
pub const MIN_SEATS: u32 = 2;
/// Seats when the leader does not say.
pub const DEFAULT_SEATS: u32 = 3;
/// Findings in one answer, at most.
pub const MAX_FINDINGS: usize = 100;
/// A finding's `claim`, at most (characters).
pub const CLAIM_MAX_CHARS: usize = 2000;
/// A finding's `action`, at most (characters).
pub const ACTION_MAX_CHARS: usize = 2000;
/// A finding's `evidence`, at most (characters).
pub const EVIDENCE_MAX_CHARS: usize = 4000;
/// A ballot vote's `comment`, at most (characters).
pub const COMMENT_MAX_CHARS: usize = 1000;
/// An anchor's `path`, at most (bytes).
pub const PATH_MAX_BYTES: usize = 1024;
/// A `revision` (a commit id or ref), at most (characters).
pub const REVISION_MAX_CHARS: usize = 200;
/// The last line number an anchor may name.
pub const MAX_LINE: u64 = 100_000_000;
/// Files a council names, at most.
pub const MAX_FILES: usize = 200;
/// A council's `body`, at most (bytes).
pub const BODY_MAX_BYTES: usize = 64 << 10;
/// A council's `diff`, at most (bytes).
pub const DIFF_MAX_BYTES: usize = 128 << 10;
/// A council id, at most (bytes): its tasks' ids add a seat and a round.
pub const COUNCIL_ID_MAX_BYTES: usize = 100;

vocabulary! {
    /// A reviewer's overall judgement of the subject.
    pub enum Verdict ("verdict") {
        Approve = "approve" : "Good to go as it is (nits at most).",
        Changes = "changes" : "Good once the findings are addressed.",
        Block = "block" : "Must not go in as it is.",
    }
}

vocabulary! {
    /// How much a finding matters, most severe first.
    pub enum Severity ("severity") {
        Blocker = "blocker" : "Must be fixed before it goes in: wrong results, data loss, a hole.",
        Major = "major" : "Should be fixed before it goes in.",
        Minor = "minor" : "Worth fixing, need not hold it up.",
        Nit = "nit" : "Taste or polish; take it or leave it.",
    }
}

impl Severity {
    /// 3 for `blocker` down to 0 for `nit`: larger is more severe.
    pub fn rank(self) -> u8 {
        match self {
            Severity::Blocker => 3,
            Severity::Major => 2,
            Severity::Minor => 1,
            Severity::Nit => 0,
        }
    }
}

vocabulary! {
    /// What kind of problem a finding is.
    pub enum Category ("category") {
        Bug = "bug" : "Wrong behaviour: a wrong result, a crash, a broken edge case.",
        Security = "security" : "A way to read, change or break what one should not.",
        Performance = "performance" : "Too slow or too big for what it does.",
        Reliability = "reliability" : "Fails under load, concurrency, crashes or bad input.",
        Compatibility = "compatibility" : "Breaks a contract others rely on: wire, API, storage, CLI.",
        Maintainability = "maintainability" : "Hard to read, change or reuse: structure, names, duplication.",
        Testing = "testing" : "Missing, weak or wrong tests.",
        Documentation = "documentation" : "Missing, wrong or unclear docs, comments or messages.",
        Style = "style" : "Formatting and conventions.",
    }
}

vocabulary! {
    /// What a finding that is not about particular lines is about.
    pub enum Topic ("topic") {
        Design = "design" : "The approach as a whole.",
        Scope = "scope" : "What it does or leaves out, against what was asked.",
        Tests = "tests" : "The tests as a whole.",
        Docs = "docs" : "The documentation as a whole.",
        Security = "security" : "Security as a whole.",
        Performance = "performance" : "Performance as a whole.",
        Compatibility = "compatibility" : "Compatibility and migration as a whole.",
        Process = "process" : "How the change is made: commits, splitting, rollout.",
    }
}

vocabulary! {
    /// A ballot vote on one group of findings.
    pub enum Vote ("vote") {
        Agree = "agree" : "The group's finding is real and should be acted on.",
        Disagree = "disagree" : "The group's finding is wrong or not worth acting on.",
    }
}

/// The marker on a council seat's task: which council, which seat, which
/// round. Seats are letters (`A`, `B`, ...) so that reviewers never learn
/// each other's names from what they are sent.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CouncilSeat {
    /// The council, unique in its run.
    pub council_id: String,
    /// The seat's letter.
    pub seat: String,
    /// 1: the review; 2: the ballot.
    pub round: u32,
    /// Seats of the council.
    pub seats: u32,
    /// Whether the council has a ballot round.
    pub ballot: bool,
    /// The revision the review is about, if the leader named one.
    pub revision: Option<String>,
}

/// The letter of seat `index` (0 is `A`).
pub fn seat_letter(index: u32) -> String {
    char::from_u32(u32::from('A') + index.min(MAX_SEATS - 1)).map_or_else(String::new, String::from)
}

/// The id of a seat's task: `<council>-A` in the first round,
/// `<council>-A-ballot` in the second.
pub fn seat_task_id(council_id: &str, seat: &str, round: u32) -> String {
    match round {
        1 => format!("{council_id}-{seat}"),
        _ => format!("{council_id}-{seat}-ballot"),
    }
}

/// Where a finding points: lines of a file, or a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// Lines `start` to `end` (both included) of `path`.
    Lines {
        /// The file, as the repository names it.
        path: String,
        /// The first line.
        start: u64,
        /// The last line.
        end: u64,
        /// The revision the line numbers are of, if the reviewer said.
        revision: Option<String>,
    },
    /// Not about particular lines.
    Topic(Topic),
}

/// One finding of a review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What it is about.
    pub anchor: Anchor,
    /// What kind of problem.
    pub category: Category,
    /// How much it matters.
    pub severity: Severity,
    /// What is wrong, in a sentence or two.
    pub claim: String,
    /// What to do about it (may be empty).
    pub action: String,
    /// Why the reviewer believes it: a quote, a case, a test (may be empty).
    pub evidence: String,
}

/// A first-round answer: `{"council_review": 1, "verdict": ..., "findings": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Review {
    /// The overall judgement.
    pub verdict: Verdict,
    /// What the reviewer found, in the reviewer's order.
    pub findings: Vec<Finding>,
}

/// One vote of a ballot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BallotVote {
    /// The group voted on (`G1`).
    pub group: String,
    /// Agree or disagree.
    pub vote: Vote,
    /// Why, optionally (may be empty).
    pub comment: String,
}

/// A second-round answer: `{"council_ballot": 1, "votes": [...]}`, one vote
/// per group, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ballot {
    /// The votes.
    pub votes: Vec<BallotVote>,
}

/// Why a payload is not a council answer: the JSON path of the value at
/// fault (`payload.findings[2].severity`) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerError {
    /// Where, from `payload`.
    pub path: String,
    /// What is wrong, and what is allowed.
    pub problem: String,
}

type Read<T> = Result<T, AnswerError>;

fn refuse<T>(path: &str, problem: impl Into<String>) -> Read<T> {
    Err(AnswerError {
        path: path.to_owned(),
        problem: problem.into(),
    })
}

/// How a problem shows the value given: strings quoted, the rest by type.
fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => format!("{text:?}"),
        other => crate::model::json_type(other).to_owned(),
    }
}

/// `value` as an object whose keys are all among `fields`.
fn object<'a>(value: &'a Value, path: &str, what: &str, fields: &[&str]) -> Read<&'a JsonObject> {
    let Value::Object(object) = value else {
        return refuse(
            path,
            format!("got {}; {what} is a JSON object", shown(value)),
        );
    };
    known_fields(object, path, what, fields)
}

/// `object`, if its keys are all among `fields`.
fn known_fields<'a>(
    object: &'a JsonObject,
    path: &str,
    what: &str,
    fields: &[&str],
) -> Read<&'a JsonObject> {
    if let Some(key) = object.keys().find(|k| !fields.contains(&k.as_str())) {
        return refuse(
            &format!("{path}.{key}"),
            format!(
                "is not a field of {what}; its fields are {}",
                fields.join(", ")
            ),
        );
    }
    Ok(object)
}

/// The string at `key`: empty when absent and not `rule.required`; one
/// line unless `rule.multiline`; at most `max` characters.
fn text(object: &JsonObject, path: &str, key: &str, max: usize, rule: Text) -> Read<String> {
    let at = format!("{path}.{key}");
    let value = match object.get(key) {
        None if rule.required => return refuse(&at, format!("is missing; {}", rule.hint)),
        None => return Ok(String::new()),
        Some(Value::String(text)) => text,
        Some(other) => return refuse(&at, format!("got {}; it is a string", shown(other))),
    };
    let chars = value.chars().count();
    if chars > max {
        return refuse(&at, format!("is {chars} characters long; at most {max}"));
    }
    if rule.required && value.trim().is_empty() {
        return refuse(&at, format!("is blank; {}", rule.hint));
    }
    if !rule.multiline && value.chars().any(char::is_control) {
        return refuse(&at, "must be one line without control characters");
    }
    Ok(value.clone())
}

/// How [`text`] reads a string field.
#[derive(Clone, Copy)]
struct Text {
    required: bool,
    multiline: bool,
    hint: &'static str,
}

const OPTIONAL_PROSE: Text = Text {
    required: false,
    multiline: true,
    hint: "",
};

/// A value of the closed list `V` at `key` (required).
fn word<V: Vocabulary>(object: &JsonObject, path: &str, key: &str) -> Read<V> {
    let at = format!("{path}.{key}");
    let list = V::expected();
    match object.get(key) {
        None => refuse(&at, format!("is missing; one of {list}")),
        Some(Value::String(text)) => match V::parse(text) {
            Some(value) => Ok(value),
            None => refuse(&at, format!("{text:?} is not one of {list}")),
        },
        Some(other) => refuse(&at, format!("{} is not one of {list}", shown(other))),
    }
}

/// The version number at `key`, which must be `expected`.
fn version(object: &JsonObject, key: &str, expected: u64) -> Read<()> {
    let at = format!("payload.{key}");
    match object.get(key) {
        None => refuse(&at, format!("is missing; write \"{key}\": {expected}")),
        Some(Value::Number(n)) if n.as_u64() == Some(expected) => Ok(()),
        Some(other) => refuse(
            &at,
            format!(
                "{} is not a version this engine reads; write {expected}",
                match other {
                    Value::Number(n) => n.to_string(),
                    other => shown(other),
                }
            ),
        ),
    }
}

/// The list at `key` of `object`, at most `max` items.
fn list<'a>(object: &'a JsonObject, path: &str, key: &str, max: usize) -> Read<&'a [Value]> {
    let at = format!("{path}.{key}");
    match object.get(key) {
        None => refuse(&at, "is missing; give a list (empty if there is nothing)"),
        Some(Value::Array(items)) if items.len() > max => {
            refuse(&at, format!("has {} items; at most {max}", items.len()))
        }
        Some(Value::Array(items)) => Ok(items),
        Some(other) => refuse(&at, format!("got {}; it is a list", shown(other))),
    }
}

const REVIEW_FIELDS: &[&str] = &["council_review", "verdict", "findings"];
const FINDING_FIELDS: &[&str] = &[
    "anchor", "category", "severity", "claim", "action", "evidence",
];
const LINES_FIELDS: &[&str] = &["path", "lines", "revision"];
const TOPIC_FIELDS: &[&str] = &["topic"];
const BALLOT_FIELDS: &[&str] = &["council_ballot", "votes"];
const VOTE_FIELDS: &[&str] = &["group", "vote", "comment"];

/// Reads a first-round answer, or says which value is wrong.
pub fn read_review(payload: &JsonObject) -> Read<Review> {
    let object = known_fields(payload, "payload", "a council review", REVIEW_FIELDS)?;
    version(object, "council_review", REVIEW_VERSION)?;
    let verdict = word::<Verdict>(object, "payload", "verdict")?;
    let findings = list(object, "payload", "findings", MAX_FINDINGS)?
        .iter()
        .enumerate()
        .map(|(i, item)| finding(item, &format!("payload.findings[{i}]")))
        .collect::<Read<Vec<_>>>()?;
    Ok(Review { verdict, findings })
}

fn finding(value: &Value, path: &str) -> Read<Finding> {
    let object = object(value, path, "a finding", FINDING_FIELDS)?;
    let Some(anchor) = object.get("anchor") else {
        return refuse(
            &format!("{path}.anchor"),
            "is missing; give {\"path\": ..., \"lines\": [first, last]} or {\"topic\": ...}",
        );
    };
    let claim = Text {
        required: true,
        multiline: true,
        hint: "say what is wrong",
    };
    Ok(Finding {
        anchor: read_anchor(anchor, &format!("{path}.anchor"))?,
        category: word(object, path, "category")?,
        severity: word(object, path, "severity")?,
        claim: text(object, path, "claim", CLAIM_MAX_CHARS, claim)?,
        action: text(object, path, "action", ACTION_MAX_CHARS, OPTIONAL_PROSE)?,
        evidence: text(object, path, "evidence", EVIDENCE_MAX_CHARS, OPTIONAL_PROSE)?,
    })
}

fn read_anchor(value: &Value, path: &str) -> Read<Anchor> {
    if value.get("topic").is_some() {
        let object = object(value, path, "a topic anchor", TOPIC_FIELDS)?;
        return Ok(Anchor::Topic(word(object, path, "topic")?));
    }
    let object = object(value, path, "a lines anchor", LINES_FIELDS)?;
    let file = Text {
        required: true,
        multiline: false,
        hint: "name the file, or use {\"topic\": ...} for a finding about no lines",
    };
    let revision = Text {
        required: false,
        multiline: false,
        hint: "",
    };
    let file_path = text(object, path, "path", PATH_MAX_BYTES, file)?;
    let (start, end) = lines(object.get("lines"), &format!("{path}.lines"))?;
    let revision = text(object, path, "revision", REVISION_MAX_CHARS, revision)?;
    Ok(Anchor::Lines {
        path: file_path,
        start,
        end,
        revision: (!revision.is_empty()).then_some(revision),
    })
}

/// `[first, last]`: two whole numbers, 1 ≤ first ≤ last ≤ [`MAX_LINE`].
fn lines(value: Option<&Value>, path: &str) -> Read<(u64, u64)> {
    let hint = format!("give [first, last], two line numbers from 1 to {MAX_LINE}, first ≤ last");
    let Some(Value::Array(items)) = value else {
        return match value {
            None => refuse(path, format!("is missing; {hint}")),
            Some(other) => refuse(path, format!("got {}; {hint}", shown(other))),
        };
    };
    let numbers: Vec<Option<u64>> = items.iter().map(Value::as_u64).collect();
    match numbers.as_slice() {
        [Some(first), Some(last)] if (1..=*last).contains(first) && *last <= MAX_LINE => {
            Ok((*first, *last))
        }
        _ => refuse(path, format!("is {}; {hint}", Value::Array(items.clone()))),
    }
}

/// Reads a ballot over `groups` (their ids, `G1`...): every group voted on
/// exactly once, no other.
pub fn read_ballot(payload: &JsonObject, groups: &[String]) -> Read<Ballot> {
    let object = known_fields(payload, "payload", "a council ballot", BALLOT_FIELDS)?;
    version(object, "council_ballot", BALLOT_VERSION)?;
    let items = list(object, "payload", "votes", groups.len().max(1))?;
    let mut votes: Vec<BallotVote> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("payload.votes[{i}]");
        let vote = ballot_vote(item, &path, groups)?;
        if let Some(first) = votes.iter().position(|v| v.group == vote.group) {
            return refuse(
                &format!("{path}.group"),
                format!(
                    "{} is voted on twice (also votes[{first}]); one vote per group",
                    vote.group
                ),
            );
        }
        votes.push(vote);
    }
    if let Some(missing) = groups
        .iter()
        .find(|g| !votes.iter().any(|v| &v.group == *g))
    {
        return refuse(
            "payload.votes",
            format!(
                "has no vote on {missing}; vote on every group once ({})",
                groups.join(", ")
            ),
        );
    }
    Ok(Ballot { votes })
}

fn ballot_vote(value: &Value, path: &str, groups: &[String]) -> Read<BallotVote> {
    let object = object(value, path, "a vote", VOTE_FIELDS)?;
    let group_rule = Text {
        required: true,
        multiline: false,
        hint: "name the group voted on, e.g. G1",
    };
    let group = text(object, path, "group", 16, group_rule)?;
    if !groups.contains(&group) {
        let known = match groups.is_empty() {
            true => "this ballot has no groups: answer with an empty votes list".to_owned(),
            false => format!("the groups are {}", groups.join(", ")),
        };
        return refuse(
            &format!("{path}.group"),
            format!("{group:?} is not a group of this ballot; {known}"),
        );
    }
    Ok(BallotVote {
        group,
        vote: word(object, path, "vote")?,
        comment: text(object, path, "comment", COMMENT_MAX_CHARS, OPTIONAL_PROSE)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(json: &str) -> JsonObject {
        match serde_json::from_str(json) {
            Ok(Value::Object(object)) => object,
            other => panic!("not an object: {other:?}"),
        }
    }

    fn review_error(json: &str) -> String {
        match read_review(&payload(json)) {
            Ok(review) => panic!("accepted: {review:?}"),
            Err(e) => format!("{}: {}", e.path, e.problem),
        }
    }

    #[test]
    fn a_review_reads_with_both_anchors() {
        let review = read_review(&payload(
            r#"{"council_review": 1, "verdict": "changes", "findings": [
                {"anchor": {"path": "src/a.rs", "lines": [10, 14], "revision": "abc"},
                 "category": "bug", "severity": "major", "claim": "off by one", "action": "use <=", "evidence": "line 12"},
                {"anchor": {"topic": "tests"}, "category": "testing", "severity": "minor", "claim": "no test"}]}"#,
        ));
        let review = review.unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(review.verdict, Verdict::Changes);
        assert_eq!(
            review.findings[0].anchor,
            Anchor::Lines {
                path: "src/a.rs".into(),
                start: 10,
                end: 14,
                revision: Some("abc".into())
            }
        );
        assert_eq!(review.findings[1].anchor, Anchor::Topic(Topic::Tests));
        assert_eq!(review.findings[1].evidence, "");
    }

    #[test]
    fn every_wrong_value_is_named_by_its_path() {
        let base = r#"{"anchor": {"topic": "design"}, "category": "bug", "severity": "nit", "claim": "c"}"#;
        let with = |finding: &str| {
            format!(
                r#"{{"council_review": 1, "verdict": "approve", "findings": [{base}, {base}, {finding}]}}"#
            )
        };
        let cases = [
            (
                with(
                    r#"{"anchor": {"topic": "design"}, "category": "bug", "severity": "huge", "claim": "c"}"#,
                ),
                r#"payload.findings[2].severity: "huge" is not one of blocker, major, minor, nit"#,
            ),
            (
                with(
                    r#"{"anchor": {"path": "a", "lines": [5, 2]}, "category": "bug", "severity": "nit", "claim": "c"}"#,
                ),
                "payload.findings[2].anchor.lines: is [5,2]; give [first, last]",
            ),
            (
                with(r#"{"anchor": {"topic": "design"}, "category": "bug", "severity": "nit"}"#),
                "payload.findings[2].claim: is missing; say what is wrong",
            ),
            (
                with(
                    r#"{"anchor": {"topic": "design"}, "category": "bug", "severity": "nit", "claim": "c", "sevrity": 1}"#,
                ),
                "payload.findings[2].sevrity: is not a field of a finding",
            ),
            (
                with(
                    r#"{"anchor": {"topic": "vibes"}, "category": "bug", "severity": "nit", "claim": "c"}"#,
                ),
                r#"payload.findings[2].anchor.topic: "vibes" is not one of design"#,
            ),
            (
                r#"{"council_review": 2, "verdict": "approve", "findings": []}"#.to_owned(),
                "payload.council_review: 2 is not a version this engine reads; write 1",
            ),
            (
                r#"{"verdict": "approve", "findings": []}"#.to_owned(),
                "payload.council_review: is missing",
            ),
            (
                r#"{"council_review": 1, "verdict": "maybe", "findings": []}"#.to_owned(),
                r#"payload.verdict: "maybe" is not one of approve, changes, block"#,
            ),
            (
                r#"{"council_review": 1, "verdict": "approve"}"#.to_owned(),
                "payload.findings: is missing",
            ),
        ];
        for (json, expected) in cases {
            let error = review_error(&json);
            assert!(error.starts_with(expected), "{error}\nexpected: {expected}");
        }
    }

    #[test]
    fn a_ballot_votes_on_every_group_once() {
        let groups = vec!["G1".to_owned(), "G2".to_owned()];
        let read = |json: &str| read_ballot(&payload(json), &groups);
        let ok = read(
            r#"{"council_ballot": 1, "votes": [{"group": "G2", "vote": "agree"}, {"group": "G1", "vote": "disagree", "comment": "not a bug"}]}"#,
        );
        assert_eq!(ok.map(|b| b.votes.len()), Ok(2));
        let problems = [
            (
                r#"{"council_ballot": 1, "votes": [{"group": "G1", "vote": "agree"}]}"#,
                "payload.votes: has no vote on G2",
            ),
            (
                r#"{"council_ballot": 1, "votes": [{"group": "G1", "vote": "agree"}, {"group": "G1", "vote": "agree"}]}"#,
                "payload.votes[1].group: G1 is voted on twice",
            ),
            (
                r#"{"council_ballot": 1, "votes": [{"group": "G9", "vote": "agree"}, {"group": "G1", "vote": "agree"}]}"#,
                r#"payload.votes[0].group: "G9" is not a group of this ballot; the groups are G1, G2"#,
            ),
            (
                r#"{"council_ballot": 1, "votes": [{"group": "G1", "vote": "yes"}, {"group": "G2", "vote": "agree"}]}"#,
                r#"payload.votes[0].vote: "yes" is not one of agree, disagree"#,
            ),
        ];
        for (json, expected) in problems {
            let error = read(json).map_err(|e| format!("{}: {}", e.path, e.problem));
            assert!(
                error.as_ref().is_err_and(|e| e.starts_with(expected)),
                "{error:?}\nexpected: {expected}"
            );
        }
    }

    #[test]
    fn seats_are_letters_and_their_tasks_say_the_round() {
        assert_eq!(seat_letter(0), "A");
        assert_eq!(seat_letter(25), "Z");
        assert_eq!(seat_task_id("c1", "B", 1), "c1-B");
        assert_eq!(seat_task_id("c1", "B", 2), "c1-B-ballot");
    }
}
