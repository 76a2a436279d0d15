//! Council review's report: how the seats' findings are grouped and tallied
//! ([`group_findings`], [`tally_ballots`], [`count_verdicts`]) and the
//! report's shape ([`CouncilReport`], [`Group`], ...).
//!
//! Code, not judgement, and deterministic: the same answers give the same
//! groups in the same order, byte for byte, whatever order the seats
//! answered in or listed their findings in. The rule:
//!
//! - Findings anchored to lines group when they name the same `path` and
//!   `category` and their line ranges overlap or lie at most
//!   [`LINE_TOLERANCE`] lines apart. Within one path and category the
//!   findings are sorted by (first line, last line) and
//!   swept once: a finding joins the group before it when its first line is
//!   at most the group's last line (the largest so far) plus the tolerance,
//!   so chains merge transitively and the result depends only on the set of
//!   ranges.
//! - Findings anchored to a topic group when they name the same `topic` and
//!   `category`.
//! - A group's `count` is how many distinct seats raised it; `highest` is
//!   its most severe finding; `median` is the median of each seat's most
//!   severe finding in it: the most severe severity that more than half of
//!   those seats gave at least (for an even count, the less severe of the
//!   two middle values).
//! - Groups are sorted by highest severity, count, median (each most first),
//!   then by anchor (paths before topics; path, first line, last line; topic
//!   in list order), then category in list order, and numbered `G1`, `G2`, ...
//!   in that order. No two groups share all of these, so the order is total.
//!
//! Nothing here reads a store; the engine gathers the answers.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::council::{Anchor, Ballot, Category, Finding, Review, Severity, Topic, Verdict, Vote};
use super::model::TaskStatus;
use crate::vocabulary::vocabulary;

/// Line ranges at most this many lines apart group together.
pub const LINE_TOLERANCE: u64 = 3;

vocabulary! {
    /// Where a council is.
    pub enum CouncilStage ("council stage") {
        Reviewing = "reviewing" : "A first-round seat has not answered (or otherwise ended) yet.",
        Balloting = "balloting" : "Every first-round seat has ended; a ballot seat has not.",
        Complete = "complete" : "Every seat of every round has ended: the report is final.",
    }
}

/// The whole report on one council.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CouncilReport {
    /// The council.
    pub council_id: String,
    /// Its run.
    pub run_id: String,
    /// What is reviewed, one line.
    pub title: String,
    /// The revision reviewed, if the leader named one.
    pub revision: Option<String>,
    /// Whether the council has a ballot round.
    pub ballot: bool,
    /// Where it is.
    pub stage: CouncilStage,
    /// The first round's verdicts, counted over the seats that answered.
    pub verdicts: VerdictCounts,
    /// Every seat, A first: who holds it and how far it got.
    pub seats: Vec<SeatState>,
    /// The first-round seats that have not answered, by letter.
    pub unanswered: Vec<String>,
    /// The ballot seats that have not voted, by letter (empty without a ballot).
    pub unvoted: Vec<String>,
    /// The groups of findings, most severe first.
    pub groups: Vec<Group>,
    /// The line tolerance the groups were made with.
    pub line_tolerance: u64,
}

/// How many seats gave each verdict.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictCounts {
    /// `approve`.
    pub approve: u32,
    /// `changes`.
    pub changes: u32,
    /// `block`.
    pub block: u32,
}

/// One seat of a council: for the leader, so it names the reviewer.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeatState {
    /// The seat's letter.
    pub seat: String,
    /// Who holds it (an agent or a `role:NAME`).
    pub assignee: String,
    /// The first round's task.
    pub task_id: String,
    /// Its status.
    pub status: TaskStatus,
    /// Its current attempt's thread.
    pub thread_id: Option<String>,
    /// The seat's verdict, once it answered.
    pub verdict: Option<Verdict>,
    /// How many findings it gave, once it answered.
    pub findings: Option<u32>,
    /// The ballot round's task, if the council has one.
    pub ballot_task_id: Option<String>,
    /// Its status.
    pub ballot_status: Option<TaskStatus>,
    /// Whether the seat has voted.
    pub voted: bool,
}

/// What a group is about: `{"path", "lines": [first, last]}` or `{"topic"}`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupAnchor {
    /// The file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The lines the group's findings cover together, `[first, last]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<u64>>,
    /// The topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<Topic>,
}

/// One finding as a group lists it.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupFinding {
    /// The seat that raised it.
    pub seat: String,
    /// How much it matters, to that seat.
    pub severity: Severity,
    /// Its own lines, `[first, last]` (`null` for a topic).
    pub lines: Option<Vec<u64>>,
    /// The revision its lines are of, if the seat said.
    pub revision: Option<String>,
    /// What is wrong.
    pub claim: String,
    /// What to do.
    pub action: String,
    /// Why the seat believes it.
    pub evidence: String,
}

/// A seat's verdict, as a group lists the seats that raised it.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeatVerdict {
    /// The seat.
    pub seat: String,
    /// Its verdict on the whole subject.
    pub verdict: Verdict,
}

/// One vote on a group.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVote {
    /// The seat.
    pub seat: String,
    /// Agree or disagree.
    pub vote: Vote,
    /// Why (may be empty).
    pub comment: String,
}

/// A group's ballot tally.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupBallot {
    /// Seats that agree.
    pub agree: u32,
    /// Seats that disagree.
    pub disagree: u32,
    /// Every vote, by seat.
    pub votes: Vec<GroupVote>,
}

/// Findings of several seats about the same thing, tallied.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// `G1`, `G2`, ... in report order.
    pub group: String,
    /// What it is about.
    pub anchor: GroupAnchor,
    /// What kind of problem.
    pub category: Category,
    /// How many distinct seats raised it.
    pub count: u32,
    /// Those seats, by letter.
    pub seats: Vec<String>,
    /// The most severe of its findings.
    pub highest: Severity,
    /// The median of each seat's most severe finding in it.
    pub median: Severity,
    /// The verdicts of the seats that raised it.
    pub verdicts: Vec<SeatVerdict>,
    /// Its findings, by seat, then by lines, severity (most first) and text.
    pub findings: Vec<GroupFinding>,
    /// The ballot's tally (`null` until the council has a ballot round).
    pub ballot: Option<GroupBallot>,
}

/// One finding on its way into a group.
struct Item<'a> {
    seat: &'a str,
    verdict: Verdict,
    finding: &'a Finding,
}

impl Item<'_> {
    fn lines(&self) -> (u64, u64) {
        match &self.finding.anchor {
            Anchor::Lines { start, end, .. } => (*start, *end),
            Anchor::Topic(_) => (0, 0),
        }
    }

    /// The order of a group's findings: by seat, then by content (lines,
    /// most severe first, the texts), never by the order they came in.
    fn listing(&self, other: &Item<'_>) -> std::cmp::Ordering {
        let key = |item: &Item<'_>| {
            let f = item.finding;
            let revision = match &f.anchor {
                Anchor::Lines { revision, .. } => revision.clone(),
                Anchor::Topic(_) => None,
            };
            (
                item.lines(),
                Reverse(f.severity.rank()),
                f.claim.clone(),
                f.action.clone(),
                f.evidence.clone(),
                revision,
            )
        };
        self.seat
            .cmp(other.seat)
            .then_with(|| key(self).cmp(&key(other)))
    }
}

/// What findings must share to group: the bucket a sweep runs in.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Bucket<'a> {
    Lines(&'a str, Category),
    Topic(Topic, Category),
}

/// The position of a group in the report, after its tallies.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    Lines(String, u64, u64, Category),
    Topic(Topic, Category),
}

/// Groups the findings of `reviews` (seat letter, answer), in report order.
pub fn group_findings(reviews: &[(String, Review)]) -> Vec<Group> {
    let mut buckets: BTreeMap<Bucket<'_>, Vec<Item<'_>>> = BTreeMap::new();
    for (seat, review) in reviews {
        for finding in &review.findings {
            let bucket = match &finding.anchor {
                Anchor::Lines { path, .. } => Bucket::Lines(path, finding.category),
                Anchor::Topic(topic) => Bucket::Topic(*topic, finding.category),
            };
            let item = Item {
                seat,
                verdict: review.verdict,
                finding,
            };
            buckets.entry(bucket).or_default().push(item);
        }
    }
    let mut groups: Vec<(Place, Group)> = Vec::new();
    for (bucket, items) in buckets {
        for cluster in sweep(&bucket, items) {
            groups.push(tally(&bucket, cluster));
        }
    }
    groups.sort_by(|(a_place, a), (b_place, b)| {
        order_key(a)
            .cmp(&order_key(b))
            .then_with(|| a_place.cmp(b_place))
    });
    groups
        .into_iter()
        .enumerate()
        .map(|(i, (_, mut group))| {
            group.group = format!("G{}", i + 1);
            group
        })
        .collect()
}

/// Most severe, most raised, highest median first.
fn order_key(group: &Group) -> (Reverse<u8>, Reverse<u32>, Reverse<u8>) {
    (
        Reverse(group.highest.rank()),
        Reverse(group.count),
        Reverse(group.median.rank()),
    )
}

/// Splits one bucket's findings into groups: for lines, the sorted sweep
/// with [`LINE_TOLERANCE`]; for a topic, one group.
fn sweep<'a>(bucket: &Bucket<'_>, mut items: Vec<Item<'a>>) -> Vec<Vec<Item<'a>>> {
    items.sort_by(|a, b| a.lines().cmp(&b.lines()).then_with(|| a.listing(b)));
    if matches!(bucket, Bucket::Topic(..)) {
        return vec![items];
    }
    let mut clusters: Vec<Vec<Item<'a>>> = Vec::new();
    let mut reach: u64 = 0;
    for item in items {
        let (start, end) = item.lines();
        match clusters.last_mut() {
            Some(cluster) if start <= reach.saturating_add(LINE_TOLERANCE) => {
                cluster.push(item);
                reach = reach.max(end);
            }
            _ => {
                clusters.push(vec![item]);
                reach = end;
            }
        }
    }
    clusters
}

/// One group's tallies, with its place in the report (`group` is set once
/// the order is known).
fn tally(bucket: &Bucket<'_>, mut items: Vec<Item<'_>>) -> (Place, Group) {
    items.sort_by(|a, b| a.listing(b));
    let mut per_seat: BTreeMap<&str, (Severity, Verdict)> = BTreeMap::new();
    for item in &items {
        let entry = per_seat
            .entry(item.seat)
            .or_insert((item.finding.severity, item.verdict));
        if item.finding.severity.rank() > entry.0.rank() {
            entry.0 = item.finding.severity;
        }
    }
    let mut severities: Vec<Severity> = per_seat.values().map(|(s, _)| *s).collect();
    severities.sort_by_key(|s| s.rank());
    let median = severities[(severities.len() - 1) / 2];
    let highest = severities[severities.len() - 1];
    let first = items.iter().map(|i| i.lines().0).min().unwrap_or(0);
    let last = items.iter().map(|i| i.lines().1).max().unwrap_or(0);
    let (place, anchor, category) = match bucket {
        Bucket::Lines(path, category) => (
            Place::Lines((*path).to_owned(), first, last, *category),
            GroupAnchor {
                path: Some((*path).to_owned()),
                lines: Some(vec![first, last]),
                topic: None,
            },
            *category,
        ),
        Bucket::Topic(topic, category) => (
            Place::Topic(*topic, *category),
            GroupAnchor {
                topic: Some(*topic),
                ..GroupAnchor::default()
            },
            *category,
        ),
    };
    let group = Group {
        group: String::new(),
        anchor,
        category,
        count: u32::try_from(per_seat.len()).unwrap_or(u32::MAX),
        seats: per_seat.keys().map(|s| (*s).to_owned()).collect(),
        highest,
        median,
        verdicts: per_seat
            .iter()
            .map(|(seat, (_, verdict))| SeatVerdict {
                seat: (*seat).to_owned(),
                verdict: *verdict,
            })
            .collect(),
        findings: items.iter().map(group_finding).collect(),
        ballot: None,
    };
    (place, group)
}

fn group_finding(item: &Item<'_>) -> GroupFinding {
    let finding = item.finding;
    let (lines, revision) = match &finding.anchor {
        Anchor::Lines {
            start,
            end,
            revision,
            ..
        } => (Some(vec![*start, *end]), revision.clone()),
        Anchor::Topic(_) => (None, None),
    };
    GroupFinding {
        seat: item.seat.to_owned(),
        severity: finding.severity,
        lines,
        revision,
        claim: finding.claim.clone(),
        action: finding.action.clone(),
        evidence: finding.evidence.clone(),
    }
}

/// Adds the ballots (seat letter, ballot) to `groups`: every group gets a
/// tally, its votes by seat.
pub fn tally_ballots(groups: &mut [Group], ballots: &[(String, Ballot)]) {
    let mut sorted: Vec<&(String, Ballot)> = ballots.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for group in groups.iter_mut() {
        let mut tally = GroupBallot::default();
        for (seat, ballot) in &sorted {
            for vote in ballot.votes.iter().filter(|v| v.group == group.group) {
                match vote.vote {
                    Vote::Agree => tally.agree += 1,
                    Vote::Disagree => tally.disagree += 1,
                }
                tally.votes.push(GroupVote {
                    seat: seat.clone(),
                    vote: vote.vote,
                    comment: vote.comment.clone(),
                });
            }
        }
        group.ballot = Some(tally);
    }
}

/// How many of `reviews` gave each verdict.
pub fn count_verdicts(reviews: &[(String, Review)]) -> VerdictCounts {
    let mut counts = VerdictCounts::default();
    for (_, review) in reviews {
        match review.verdict {
            Verdict::Approve => counts.approve += 1,
            Verdict::Changes => counts.changes += 1,
            Verdict::Block => counts.block += 1,
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines(path: &str, start: u64, end: u64, category: Category, severity: Severity) -> Finding {
        Finding {
            anchor: Anchor::Lines {
                path: path.into(),
                start,
                end,
                revision: None,
            },
            category,
            severity,
            claim: format!("{path}:{start}-{end}"),
            action: String::new(),
            evidence: String::new(),
        }
    }

    fn topic(topic: Topic, category: Category, severity: Severity) -> Finding {
        Finding {
            anchor: Anchor::Topic(topic),
            category,
            severity,
            claim: format!("{topic}"),
            action: String::new(),
            evidence: String::new(),
        }
    }

    fn review(verdict: Verdict, findings: Vec<Finding>) -> Review {
        Review { verdict, findings }
    }

    #[test]
    fn overlapping_ranges_within_the_tolerance_merge_transitively() {
        use Category::Bug;
        use Severity::{Major, Minor};
        // 10-14 and 17-20 are 3 apart (merge); 22-25 is 2 after 20 (merge):
        // one chain 10-25. 29-30 is 4 after 25: a group of its own.
        let reviews = vec![
            (
                "A".to_owned(),
                review(Verdict::Changes, vec![lines("a.rs", 10, 14, Bug, Major)]),
            ),
            (
                "B".to_owned(),
                review(Verdict::Approve, vec![lines("a.rs", 22, 25, Bug, Minor)]),
            ),
            (
                "C".to_owned(),
                review(
                    Verdict::Block,
                    vec![
                        lines("a.rs", 17, 20, Bug, Minor),
                        lines("a.rs", 29, 30, Bug, Minor),
                    ],
                ),
            ),
        ];
        let groups = group_findings(&reviews);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].anchor.lines, Some(vec![10, 25]));
        assert_eq!(groups[0].count, 3);
        assert_eq!(groups[0].highest, Major);
        assert_eq!(groups[0].median, Minor);
        assert_eq!(groups[1].anchor.lines, Some(vec![29, 30]));
        assert_eq!(groups[1].seats, ["C"]);
    }

    #[test]
    fn different_paths_categories_and_topics_stay_apart() {
        use Severity::Major;
        let reviews = vec![(
            "A".to_owned(),
            review(
                Verdict::Changes,
                vec![
                    lines("a.rs", 1, 5, Category::Bug, Major),
                    lines("a.rs", 1, 5, Category::Style, Major),
                    lines("b.rs", 1, 5, Category::Bug, Major),
                    topic(Topic::Tests, Category::Testing, Major),
                    topic(Topic::Tests, Category::Testing, Severity::Nit),
                    topic(Topic::Docs, Category::Testing, Major),
                ],
            ),
        )];
        let groups = group_findings(&reviews);
        assert_eq!(groups.len(), 5);
        let tests = groups
            .iter()
            .find(|g| g.anchor.topic == Some(Topic::Tests))
            .map(|g| (g.count, g.findings.len()));
        assert_eq!(tests, Some((1, 2)), "one seat, two findings");
    }

    #[test]
    fn the_median_of_an_even_count_is_the_less_severe_middle() {
        use Category::Bug;
        let seats = [
            Severity::Blocker,
            Severity::Major,
            Severity::Minor,
            Severity::Nit,
        ];
        let reviews: Vec<(String, Review)> = seats
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let seat = char::from(b'A' + u8::try_from(i).unwrap_or(0)).to_string();
                (
                    seat,
                    review(Verdict::Changes, vec![lines("a.rs", 1, 2, Bug, *s)]),
                )
            })
            .collect();
        let groups = group_findings(&reviews);
        assert_eq!(
            (groups[0].highest, groups[0].median),
            (Severity::Blocker, Severity::Minor)
        );
        let three = group_findings(&reviews[..3]);
        assert_eq!(three[0].median, Severity::Major);
    }

    #[test]
    fn groups_sort_by_severity_then_count_then_anchor() {
        use Category::Bug;
        let reviews = vec![
            (
                "A".to_owned(),
                review(
                    Verdict::Changes,
                    vec![
                        lines("z.rs", 1, 1, Bug, Severity::Minor),
                        lines("a.rs", 1, 1, Bug, Severity::Minor),
                        lines("m.rs", 1, 1, Bug, Severity::Blocker),
                    ],
                ),
            ),
            (
                "B".to_owned(),
                review(
                    Verdict::Changes,
                    vec![lines("z.rs", 2, 2, Bug, Severity::Minor)],
                ),
            ),
        ];
        let order: Vec<(String, Option<String>)> = group_findings(&reviews)
            .into_iter()
            .map(|g| (g.group, g.anchor.path))
            .collect();
        assert_eq!(
            order,
            [
                ("G1".to_owned(), Some("m.rs".to_owned())),
                ("G2".to_owned(), Some("z.rs".to_owned())),
                ("G3".to_owned(), Some("a.rs".to_owned())),
            ]
        );
    }

    fn any_finding() -> impl Strategy<Value = Finding> {
        let category = prop::sample::select(Category::ALL.to_vec());
        let severity = prop::sample::select(Severity::ALL.to_vec());
        let path = prop::sample::select(vec!["a.rs", "b.rs"]);
        let by_lines = (path, 1u64..40, 0u64..6, category.clone(), severity.clone())
            .prop_map(|(p, start, len, c, s)| lines(p, start, start + len, c, s));
        let by_topic = (
            prop::sample::select(Topic::ALL.to_vec()),
            category,
            severity,
        )
            .prop_map(|(t, c, s)| topic(t, c, s));
        prop_oneof![3 => by_lines, 1 => by_topic]
    }

    fn any_council() -> impl Strategy<Value = Vec<(String, Review)>> {
        let verdict = prop::sample::select(Verdict::ALL.to_vec());
        prop::collection::vec((verdict, prop::collection::vec(any_finding(), 0..8)), 1..6).prop_map(
            |seats| {
                seats
                    .into_iter()
                    .enumerate()
                    .map(|(i, (verdict, findings))| {
                        let seat = char::from(b'A' + u8::try_from(i).unwrap_or(0)).to_string();
                        (seat, review(verdict, findings))
                    })
                    .collect()
            },
        )
    }

    proptest! {
        /// Whatever order seats answered in and listed their findings in,
        /// the report is the same, byte for byte.
        #[test]
        fn the_report_does_not_depend_on_the_order_of_seats_or_findings(
            council in any_council(),
            seed in any::<u64>(),
        ) {
            let expected = serde_json::to_string(&group_findings(&council)).unwrap_or_default();
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut shuffled = council.clone();
            rng.shuffle(&mut shuffled);
            for (_, review) in &mut shuffled {
                rng.shuffle(&mut review.findings);
            }
            let again = serde_json::to_string(&group_findings(&council)).unwrap_or_default();
            prop_assert_eq!(&again, &expected);
            let reordered = serde_json::to_string(&group_findings(&shuffled)).unwrap_or_default();
            prop_assert_eq!(&reordered, &expected);
        }

        /// Every two findings in different groups of one path and category
        /// are more than the tolerance apart; and every group is connected.
        #[test]
        fn groups_are_exactly_the_chains_within_the_tolerance(council in any_council()) {
            let groups = group_findings(&council);
            let total: usize = council.iter().map(|(_, r)| r.findings.len()).sum();
            prop_assert_eq!(groups.iter().map(|g| g.findings.len()).sum::<usize>(), total);
            for (i, a) in groups.iter().enumerate() {
                for b in &groups[i + 1..] {
                    if a.anchor.path.is_some() && a.anchor.path == b.anchor.path && a.category == b.category {
                        let (ra, rb) = (a.anchor.lines.clone().unwrap_or_default(), b.anchor.lines.clone().unwrap_or_default());
                        let gap = if ra[1] < rb[0] { rb[0] - ra[1] } else { ra[0].saturating_sub(rb[1]) };
                        prop_assert!(gap > LINE_TOLERANCE, "{:?} and {:?}", ra, rb);
                    }
                }
            }
        }
    }
}
