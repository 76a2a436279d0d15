//! Files of JSON lines read one line at a time in bounded memory: the
//! reader every JSONL import shares (`inbox import --format jsonl`,
//! `mailbox-jsonl`, `teams-jsonl`).
//!
//! A line is held whole only up to a limit the caller states; a longer one
//! is reported as [`Line::TooLong`] and the rest of it is read past in
//! small pieces, never buffered, so a file of any size (or a line of
//! gigabytes with no newline) costs at most the limit. Lines are numbered
//! from 1, as editors and `sed -n` number them, and counted in bytes read,
//! for a progress bar. This module must never interpret a line: what one
//! means is its caller's business.

use std::io::{BufRead, Read};

/// One line of the file, without its `\n` (or `\r\n`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// The line, valid UTF-8 and within the limit.
    Text(String),
    /// Longer than the limit: it was read past, not kept.
    TooLong,
    /// Not valid UTF-8.
    NotUtf8,
}

/// The lines of `reader`, each at most `limit` bytes long.
pub struct Lines<R> {
    reader: R,
    limit: usize,
    number: u64,
    bytes: u64,
}

impl<R: BufRead> Lines<R> {
    /// Lines of `reader`, each held only up to `limit` bytes.
    pub fn new(reader: R, limit: usize) -> Lines<R> {
        Lines {
            reader,
            limit,
            number: 0,
            bytes: 0,
        }
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// The next line and its number, or `None` at the end of the file.
    ///
    /// # Errors
    ///
    /// The reader's own errors (a file that cannot be read).
    pub fn next_line(&mut self) -> std::io::Result<Option<(u64, Line)>> {
        let mut buffer = Vec::new();
        let cap = u64::try_from(self.limit)
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let read = (&mut self.reader)
            .take(cap)
            .read_until(b'\n', &mut buffer)?;
        if read == 0 {
            return Ok(None);
        }
        self.bytes += read as u64;
        self.number += 1;
        let ended = buffer.last() == Some(&b'\n');
        if ended {
            buffer.pop();
        } else if buffer.len() > self.limit {
            self.skip_rest()?;
            return Ok(Some((self.number, Line::TooLong)));
        }
        if buffer.last() == Some(&b'\r') {
            buffer.pop();
        }
        let line = String::from_utf8(buffer).map_or(Line::NotUtf8, Line::Text);
        Ok(Some((self.number, line)))
    }

    /// Reads past the rest of an over-long line, through its newline.
    fn skip_rest(&mut self) -> std::io::Result<()> {
        loop {
            let available = self.reader.fill_buf()?;
            if available.is_empty() {
                return Ok(());
            }
            let (used, found) = match available.iter().position(|b| *b == b'\n') {
                Some(at) => (at + 1, true),
                None => (available.len(), false),
            };
            self.reader.consume(used);
            self.bytes += used as u64;
            if found {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn all(text: &[u8], limit: usize) -> Vec<(u64, Line)> {
        let mut lines = Lines::new(std::io::BufReader::with_capacity(4, text), limit);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            out.push(line);
        }
        assert_eq!(lines.bytes_read(), text.len() as u64);
        out
    }

    #[test]
    fn lines_are_numbered_and_a_long_one_is_skipped_whole() {
        let text = b"one\r\n0123456789abc\nthree\n\xff\nlast";
        assert_eq!(
            all(text, 5),
            vec![
                (1, Line::Text("one".into())),
                (2, Line::TooLong),
                (3, Line::Text("three".into())),
                (4, Line::NotUtf8),
                (5, Line::Text("last".into())),
            ]
        );
    }

    #[test]
    fn a_line_of_exactly_the_limit_fits_and_one_more_byte_does_not() {
        assert_eq!(all(b"12345\n", 5), vec![(1, Line::Text("12345".into()))]);
        assert_eq!(all(b"123456", 5), vec![(1, Line::TooLong)]);
        assert_eq!(all(b"12345", 5), vec![(1, Line::Text("12345".into()))]);
        assert_eq!(all(b"\n\n", 5).len(), 2);
    }
}
