//! The progress bar of a long import: one line on stderr, redrawn in place,
//! shown only to a person (stderr is a terminal), never with `--json`, and
//! only for a file large enough to take a while.
//!
//! A few lines of our own rather than `indicatif`: the bar is one line
//! redrawn at most ten times a second from a byte count, and `indicatif`
//! (with `console`, `unicode-width` and their kin) would add five crates
//! and their build time to a binary whose every command is a process of
//! its own, for features an import does not use. The file's name is the
//! user's and goes through `terminal::safe`. This module must never write
//! to stdout: that is where the report (or the lines) go.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use crate::output;
use inbox_host_native::terminal;

/// Smaller files finish before a bar would tell anyone anything.
const LARGE: u64 = 1 << 20;

/// How often the bar may be redrawn.
const EVERY: Duration = Duration::from_millis(100);

/// The bar's width in cells, between its brackets.
const WIDTH: u64 = 30;

/// A progress bar being drawn.
pub(super) struct Progress {
    total: u64,
    label: String,
    last: Option<Instant>,
}

impl Progress {
    /// A bar for a file of `size` bytes, if one should be shown: stderr is
    /// a terminal, the output is not `--json`, and the size is known and
    /// large.
    pub(super) fn start(size: Option<u64>, json: bool, label: &str) -> Option<Progress> {
        let total = size.filter(|s| *s >= LARGE)?;
        if json || !std::io::stderr().is_terminal() {
            return None;
        }
        Some(Progress {
            total,
            label: terminal::safe(label).into_owned(),
            last: None,
        })
    }

    /// Redraws the bar for `done` bytes read, at most every [`EVERY`].
    pub(super) fn update(&mut self, done: u64) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < EVERY)
        {
            return;
        }
        self.last = Some(now);
        output::stderr(&self.line(done));
    }

    /// Clears the bar, so the report starts on a clean line.
    pub(super) fn finish(&mut self) {
        if self.last.is_some() {
            output::stderr("\r\x1b[2K");
        }
    }

    /// `\r importing FILE [#########.......]  45%`, clearing what an
    /// earlier, longer line left.
    fn line(&self, done: u64) -> String {
        let done = done.min(self.total);
        let filled = done * WIDTH / self.total.max(1);
        let percent = done * 100 / self.total.max(1);
        let bar: String = (0..WIDTH)
            .map(|cell| if cell < filled { '#' } else { '.' })
            .collect();
        format!("\r\x1b[2Kimporting {} [{bar}] {percent:>3}%", self.label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_with_the_bytes_read() {
        let bar = Progress {
            total: 2 << 20,
            label: "log.jsonl".into(),
            last: None,
        };
        assert!(bar.line(1 << 20).ends_with(&format!(
            "[{}{}]  50%",
            "#".repeat(15),
            ".".repeat(15)
        )));
        assert!(bar.line(9 << 20).ends_with("100%"), "never past the end");
        assert!(
            Progress::start(Some(1), false, "x").is_none(),
            "small files get none"
        );
        assert!(
            Progress::start(Some(LARGE), true, "x").is_none(),
            "--json gets none"
        );
    }
}
