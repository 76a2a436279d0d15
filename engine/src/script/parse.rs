//! Reading a transition script: lines into [`Step`]s, each a command, a
//! waiter, a clock step or an expectation about what a step returns.
//!
//! This module only reads text; it never runs anything (see `run`).

use crate::time::Timestamp;

use super::ScriptError;
use super::expect::{Expectation, parse_expectation};
use super::lex::Lexer;

/// A parsed script.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    pub(super) steps: Vec<Step>,
}

/// One line (or continued lines) of a script.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Step {
    /// Where it starts in the script, 1-based.
    pub(super) line: usize,
    /// The step as written, without its expectation.
    pub(super) text: String,
    pub(super) action: StepAction,
    pub(super) expect: Option<Expectation>,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum StepAction {
    /// A request, as JSON.
    Command(serde_json::Value),
    /// A background waiter: its name and its request.
    Spawn(String, serde_json::Value),
    /// Set the clock.
    Clock(Timestamp),
    /// Move the clock, in milliseconds.
    Advance(i64),
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

    /// The lines of commands and waiters that state no expectation (`=>`),
    /// and so accept whatever they return. A corpus that pins a protocol
    /// down has none: a snapshot refresh could otherwise accept a
    /// regression on such a step.
    pub fn unstated_lines(&self) -> Vec<usize> {
        self.steps
            .iter()
            .filter(|step| matches!(step.action, StepAction::Command(_) | StepAction::Spawn(..)))
            .filter(|step| step.expect.is_none())
            .map(|step| step.line)
            .collect()
    }
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
    let (body, spec) = split_expectation(text);
    let expect = spec.map(parse_expectation).transpose().map_err(err)?;
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

/// Splits a step at its ` => `, outside quoted values: the step, and the
/// expectation's text if there is one.
fn split_expectation(text: &str) -> (&str, Option<&str>) {
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
                return (&text[..i], Some(text[i + 2..].trim()));
            }
            _ => {}
        }
    }
    (text, None)
}

pub(super) fn parse_duration(text: &str) -> Result<i64, String> {
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
