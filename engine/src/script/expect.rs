//! Expectations: what a step (or a waiter) must return, written after its
//! `=>`, and the check of a response against them.
//!
//! ```text
//! => ok                                  the command succeeded (exit 0 or 10)
//! => exit 10                             exactly this exit code
//! => lease_conflict                      this error code
//! => ok thread.status=blocked lease.lease_token=2
//! => exit 10 woke=false len(threads)=0   a list's length
//! => ok wakes(w1)                        waiter w1 finishes on this step
//! ```
//!
//! After the optional outcome come any number of assertions, each one of:
//! `PATH=VALUE` (the response's JSON at `PATH` equals `VALUE`, written in
//! the script's value syntax), `len(PATH)=N` (the array or object at `PATH`
//! has `N` items) and `wakes(NAME)` (the background waiter `NAME`, still
//! waiting before the step, has finished by its end). A `PATH` is keys and
//! array indexes separated by dots: `threads.0.thread_id`, `error.code`,
//! `message.payload.question`. This module checks values; it never runs
//! anything.

use std::fmt::Write as _;

use super::lex::Lexer;

/// Everything written after a step's `=>`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Expectation {
    /// `ok`, `exit N` or an error code, if given.
    pub(crate) outcome: Option<Outcome>,
    /// Field and length assertions on the response.
    pub(crate) checks: Vec<Check>,
    /// Waiters that must finish on this step.
    pub(crate) wakes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Exit(u8),
    Code(String),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Check {
    /// The value at the path equals this one.
    Equals(String, serde_json::Value),
    /// The array or object at the path has this many items.
    Length(String, usize),
}

/// Parses the text after `=>`.
pub(super) fn parse_expectation(spec: &str) -> Result<Expectation, String> {
    let mut words = Lexer { text: spec, pos: 0 };
    let mut expectation = Expectation {
        outcome: None,
        checks: Vec::new(),
        wakes: Vec::new(),
    };
    let mut first = true;
    loop {
        words.skip_space();
        let rest = words.rest();
        if rest.is_empty() {
            break;
        }
        let token = rest.split_whitespace().next().unwrap_or(rest);
        if std::mem::take(&mut first)
            && let Some(outcome) = outcome(token, &mut words)?
        {
            expectation.outcome = Some(outcome);
            continue;
        }
        if let Some(name) = call(token, "wakes") {
            words.pos += token.len();
            expectation.wakes.push(name.to_owned());
        } else {
            expectation.checks.push(check(&mut words)?);
        }
    }
    if expectation
        == (Expectation {
            outcome: None,
            checks: Vec::new(),
            wakes: Vec::new(),
        })
    {
        return Err(
            "expected something after `=>`: `ok`, `exit 10`, an error code, or `path=value`".into(),
        );
    }
    Ok(expectation)
}

/// Reads an outcome (`ok`, `exit N`, an error code) if `token` is one.
fn outcome(token: &str, words: &mut Lexer<'_>) -> Result<Option<Outcome>, String> {
    if token.contains(['=', '(']) {
        return Ok(None);
    }
    words.pos += token.len();
    Ok(Some(match token {
        "ok" => Outcome::Ok,
        "exit" => {
            let code = words.word().unwrap_or_default();
            Outcome::Exit(
                code.parse()
                    .map_err(|_| format!("`exit {code}`: `{code}` is not an exit code"))?,
            )
        }
        code if code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') => {
            Outcome::Code(code.to_owned())
        }
        other => {
            return Err(format!(
                "cannot read `{other}` after `=>`; write `ok`, `exit 10`, an error code such as `lease_conflict`, or `path=value`"
            ));
        }
    }))
}

/// `name(argument)` → `argument`, when `token` is that call.
fn call<'a>(token: &'a str, name: &str) -> Option<&'a str> {
    token
        .strip_prefix(name)?
        .strip_prefix('(')?
        .strip_suffix(')')
        .filter(|arg| !arg.is_empty())
}

/// Reads `PATH=VALUE` or `len(PATH)=N`.
fn check(words: &mut Lexer<'_>) -> Result<Check, String> {
    let rest = words.rest();
    let shown = rest.split_whitespace().next().unwrap_or(rest);
    let Some(eq) = rest.find('=') else {
        return Err(format!("expected `path=value` after `=>`, found `{shown}`"));
    };
    let left = &rest[..eq];
    if left.is_empty() || left.contains(char::is_whitespace) {
        return Err(format!("expected `path=value` after `=>`, found `{shown}`"));
    }
    words.pos += eq + 1;
    if let Some(path) = call(left, "len") {
        let path = checked_path(path)?;
        let count = words.word().unwrap_or_default();
        let count = count
            .parse()
            .map_err(|_| format!("`len({path})={count}`: `{count}` is not a count"))?;
        return Ok(Check::Length(path.to_owned(), count));
    }
    let path = checked_path(left)?;
    let value = words.value(&[])?;
    Ok(Check::Equals(path.to_owned(), value))
}

fn checked_path(path: &str) -> Result<&str, String> {
    let ok = !path.starts_with('.')
        && !path.ends_with('.')
        && !path.contains("..")
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(path)
    } else {
        Err(format!(
            "`{path}` is not a path; write keys and indexes separated by dots, e.g. threads.0.status"
        ))
    }
}

/// What the value at `path` is: keys into objects, indexes into arrays.
fn lookup<'a>(root: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.')
        .try_fold(root, |value, segment| match value {
            serde_json::Value::Array(items) => {
                segment.parse::<usize>().ok().and_then(|i| items.get(i))
            }
            serde_json::Value::Object(map) => map.get(segment),
            _ => None,
        })
}

/// The problems of `response` (its JSON, exit code and error code) against
/// the outcome and checks of `expectation`, one line each.
pub(crate) fn problems(
    expectation: &Expectation,
    json: &serde_json::Value,
    exit: u8,
    code: Option<&str>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(outcome) = &expectation.outcome
        && let Some(problem) = outcome_problem(outcome, exit, code)
    {
        problems.push(problem);
    }
    for check in &expectation.checks {
        if let Some(problem) = check_problem(check, json) {
            problems.push(problem);
        }
    }
    problems
}

fn outcome_problem(outcome: &Outcome, exit: u8, code: Option<&str>) -> Option<String> {
    let held = match outcome {
        Outcome::Ok => code.is_none(),
        Outcome::Exit(wanted) => exit == *wanted,
        Outcome::Code(wanted) => code == Some(wanted.as_str()),
    };
    if held {
        return None;
    }
    let wanted = match outcome {
        Outcome::Ok => "ok".to_owned(),
        Outcome::Exit(wanted) => format!("exit {wanted}"),
        Outcome::Code(wanted) => wanted.clone(),
    };
    let got = match code {
        Some(code) => code.to_owned(),
        None => format!("ok (exit {exit})"),
    };
    Some(format!("expected {wanted}, got {got}"))
}

fn check_problem(check: &Check, json: &serde_json::Value) -> Option<String> {
    let path = match check {
        Check::Equals(path, _) | Check::Length(path, _) => path,
    };
    let Some(found) = lookup(json, path) else {
        return Some(format!("`{path}` is not in the response"));
    };
    match check {
        Check::Equals(_, wanted) if found == wanted => None,
        Check::Equals(_, wanted) => Some(format!("`{path}` is {found}, expected {wanted}")),
        Check::Length(_, wanted) => {
            let length = match found {
                serde_json::Value::Array(items) => items.len(),
                serde_json::Value::Object(map) => map.len(),
                other => return Some(format!("`{path}` is {other}, not a list: it has no length")),
            };
            (length != *wanted).then(|| {
                let mut text = String::new();
                let _ = write!(text, "`len({path})` is {length}, expected {wanted}");
                text
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_outcomes_checks_lengths_and_wakes() {
        let e = parse_expectation(
            r#"exit 10 woke=false len(threads)=0 thread.summary="a b" wakes(w1)"#,
        )
        .unwrap();
        assert_eq!(e.outcome, Some(Outcome::Exit(10)));
        assert_eq!(
            e.checks,
            vec![
                Check::Equals("woke".into(), json!(false)),
                Check::Length("threads".into(), 0),
                Check::Equals("thread.summary".into(), json!("a b")),
            ]
        );
        assert_eq!(e.wakes, vec!["w1".to_owned()]);
        let fields_only = parse_expectation("error.code=lease_conflict").unwrap();
        assert_eq!(fields_only.outcome, None);
        assert_eq!(
            parse_expectation("lease_lost").unwrap().outcome,
            Some(Outcome::Code("lease_lost".into()))
        );
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for (spec, says) in [
            ("", "expected something"),
            ("exit x", "not an exit code"),
            ("Ok", "cannot read `Ok`"),
            ("ok thread..status=x", "is not a path"),
            ("ok woke", "expected `path=value`"),
            ("ok len(threads)=many", "is not a count"),
        ] {
            let error = parse_expectation(spec).unwrap_err();
            assert!(error.contains(says), "{spec:?}: {error}");
        }
    }

    #[test]
    fn checks_say_what_differs() {
        let response = json!({"ok": true, "threads": [{"status": "pending"}], "woke": false});
        let e = parse_expectation(
            "ok threads.0.status=claimed len(threads)=2 lease.agent=w woke=false",
        )
        .unwrap();
        assert_eq!(
            problems(&e, &response, 0, None),
            vec![
                "`threads.0.status` is \"pending\", expected \"claimed\"".to_owned(),
                "`len(threads)` is 1, expected 2".to_owned(),
                "`lease.agent` is not in the response".to_owned(),
            ]
        );
        let e = parse_expectation("lease_conflict").unwrap();
        assert_eq!(
            problems(&e, &response, 0, None),
            vec!["expected lease_conflict, got ok (exit 0)".to_owned()]
        );
    }
}
