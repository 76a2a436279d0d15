//! Text from agents, made safe for a terminal.
//!
//! Subjects, bodies, summaries, paths and names are written by agents, and
//! an agent can be careless or hostile: an escape sequence in a body would
//! retitle the window, clear the screen, write to the clipboard (OSC 52) or
//! rewrite earlier lines when printed as it is. Everything the command line
//! prints for people goes through [`safe`] first, which replaces control
//! characters and bidirectional overrides with visible escapes (`\x1b`,
//! `\u{202e}`) and keeps newlines and tabs. `--json` output never comes
//! through here: it stays exact, and JSON escapes control characters itself.

use std::borrow::Cow;

use inbox_engine::Output;

/// Whether `c` must not reach a terminal as it is.
fn unsafe_char(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        // C0, DEL and C1 controls: ESC, CSI, OSC and friends.
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Bidirectional marks, embeddings, overrides and isolates, which
        // make text display in an order other than the one it has.
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            true
        }
        // Line and paragraph separators, which some terminals honour.
        '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

/// `text` with every unsafe character replaced by a visible escape;
/// borrowed when there is nothing to replace (the common case).
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !unsafe_char(c) {
            out.push(c);
        } else if u32::from(c) <= 0xff {
            out.push_str(&format!("\\x{:02x}", u32::from(c)));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    Cow::Owned(out)
}

/// A copy of `output` with every string in it made [`safe`], so that a
/// renderer can print any field as it is. Done on the whole output rather
/// than field by field, so no field (and no field a new command adds) can be
/// forgotten. `None` if the copy cannot be made (a value that does not
/// read back once escaped): then the caller must not print the output's
/// fields, only the escaped JSON (it fails closed, never open).
pub fn safe_output(output: &Output) -> Option<Output> {
    let mut value = serde_json::to_value(output).ok()?;
    if !clean(&mut value) {
        return Some(output.clone());
    }
    serde_json::from_value(value).ok()
}

/// Makes every string in `value` safe; returns whether anything changed.
fn clean(value: &mut serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(text) => match safe(text) {
            Cow::Borrowed(_) => false,
            Cow::Owned(replaced) => {
                *text = replaced;
                true
            }
        },
        serde_json::Value::Array(items) => items.iter_mut().fold(false, |any, v| clean(v) | any),
        serde_json::Value::Object(map) => {
            // Keys are field names, and payload keys agents chose: rebuild
            // the map only if one of them needs escaping.
            let mut changed = map.values_mut().fold(false, |any, v| clean(v) | any);
            if map.keys().any(|k| matches!(safe(k), Cow::Owned(_))) {
                let entries = std::mem::take(map);
                for (key, v) in entries {
                    map.insert(safe(&key).into_owned(), v);
                }
                changed = true;
            }
            changed
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_overrides_become_visible_escapes() {
        assert_eq!(
            safe("a\u{1b}]0;pwned\u{7}b\rc\u{202e}d\u{9b}e"),
            "a\\x1b]0;pwned\\x07b\\x0dc\\u{202e}d\\x9be"
        );
        assert_eq!(safe("two\nlines\tand tabs"), "two\nlines\tand tabs");
        assert!(matches!(safe("plain text, é, 漢字"), Cow::Borrowed(_)));
    }
}
