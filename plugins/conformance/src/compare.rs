//! Judging one transcript: the golden text a script must produce, and, when
//! a host produced something else, a diff a person can act on: which host,
//! which script, which step (the script line the transcript's `-- line N --`
//! marker names), then the lines around the first difference. This module
//! must never run a host or rewrite a golden transcript.

use std::fmt::Write as _;
use std::path::Path;

use similar::TextDiff;

/// The text of a golden transcript: an insta snapshot is a YAML header
/// between two `---` lines, then the transcript.
///
/// # Errors
///
/// When the file cannot be read or has no header.
pub(crate) fn golden_text(snapshot: &Path) -> anyhow::Result<String> {
    let file = std::fs::read_to_string(snapshot).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the golden transcript {}: {e}",
            snapshot.display()
        )
    })?;
    let body = file
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map(|(_, body)| body)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{} is not an insta snapshot (no `---` header)",
                snapshot.display()
            )
        })?;
    Ok(body.to_owned())
}

/// Whether a host's transcript is the golden one. insta ends the file with
/// one newline of its own whatever the text ends with, so the comparison
/// ignores trailing newlines and nothing else; hosts are also compared with
/// each other byte for byte (see `main`), where no file format intervenes.
pub(crate) fn same_as_golden(transcript: &str, golden: &str) -> bool {
    transcript.trim_end_matches('\n') == golden.trim_end_matches('\n')
}

/// A readable account of how `actual` (from `host`) differs from
/// `expected` (`against` names what it was compared with): the step of the
/// first difference, then a unified diff with a few lines of context.
pub(crate) fn describe_difference(
    host: &str,
    script: &str,
    against: &str,
    expected: &str,
    actual: &str,
) -> String {
    // Both end in one newline, so a missing final newline is not reported
    // as a difference the golden file format would forgive anyway.
    let expected = format!("{}\n", expected.trim_end_matches('\n'));
    let actual = format!("{}\n", actual.trim_end_matches('\n'));
    // The step is where the two texts part, read top to bottom (a line diff
    // may align a missing step's closing brace with an earlier one).
    let first_changed = expected
        .lines()
        .zip(actual.lines())
        .position(|(e, a)| e != a)
        .or_else(|| {
            let shorter = expected.lines().count().min(actual.lines().count());
            Some(shorter)
        });
    let diff = TextDiff::from_lines(&expected, &actual);
    let mut out = format!("--- {host}: {script}.inbox differs from {against}\n");
    match first_changed.and_then(|index| step_at(&expected, index)) {
        Some((line, command)) => {
            let _ = writeln!(
                out,
                "first difference in the step at tests/corpus/{script}.inbox line {line}: {command}"
            );
        }
        None => {
            let _ = writeln!(out, "first difference before the first step");
        }
    }
    let _ = write!(
        out,
        "{}",
        diff.unified_diff().context_radius(3).header(against, host)
    );
    out
}

/// The step that produced line `index` of a transcript: the script line of
/// the nearest `-- line N --` marker above it, and the command echoed after
/// the marker (`> send ...`).
fn step_at(transcript: &str, index: usize) -> Option<(usize, String)> {
    let lines: Vec<&str> = transcript.lines().collect();
    let upto = index.min(lines.len().saturating_sub(1));
    let (at, marker) = lines[..=upto]
        .iter()
        .enumerate()
        .rev()
        .find(|(_, line)| line.starts_with("-- line ") && line.ends_with(" --"))?;
    let number = marker
        .trim_start_matches("-- line ")
        .trim_end_matches(" --")
        .parse()
        .ok()?;
    let command = lines
        .get(at + 1)
        .filter(|line| line.starts_with("> "))
        .map_or_else(
            || "(no command echoed)".to_owned(),
            |line| format!("`{line}`"),
        );
    Some((number, command))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN: &str = "-- line 4 --\n> send subject=a\nexit 0\n{\n  \"a\": 1\n}\n-- line 7 --\n> claim agent=w\nexit 0\n{\n  \"lease\": 1\n}\n";

    #[test]
    fn a_difference_names_the_host_the_script_and_the_step() {
        let actual = GOLDEN.replace("\"lease\": 1", "\"lease\": 2");
        let report = describe_difference("node/sqlite", "claim_race", "golden", GOLDEN, &actual);
        insta::assert_snapshot!(report, @r#"
        --- node/sqlite: claim_race.inbox differs from golden
        first difference in the step at tests/corpus/claim_race.inbox line 7: `> claim agent=w`
        --- golden
        +++ node/sqlite
        @@ -8,5 +8,5 @@
         > claim agent=w
         exit 0
         {
        -  "lease": 1
        +  "lease": 2
         }
        "#);
    }

    #[test]
    fn a_missing_tail_is_reported_at_the_last_step() {
        let actual = GOLDEN.split("-- line 7 --").next().unwrap_or_default();
        let report = describe_difference("memory", "s", "golden", GOLDEN, actual);
        assert!(report.contains("line 7: `> claim agent=w`"), "{report}");
    }

    #[test]
    fn only_trailing_newlines_are_forgiven_against_the_golden_file() {
        assert!(same_as_golden("a\nb\n", "a\nb"));
        assert!(!same_as_golden("a\nb \n", "a\nb"));
        assert!(!same_as_golden("a\n\nb", "a\nb"));
    }
}
