//! Files of JSON lines read one line at a time in bounded memory: the
//! reader every JSONL import shares (`inbox import --format jsonl`,
//! `mailbox-jsonl`, `teams-jsonl`).
//!
//! A line is held whole only up to a limit the caller states; a longer one
//! is reported as [`Line::TooLong`], and a caller that goes on reads past
//! the rest of it ([`Lines::skip_rest`]) in small pieces, never buffered, up
//! to a bound of its own, so a file of any size (or an input that never
//! ends, like `/dev/zero`) costs at most the limit. Lines are numbered
//! from 1, as editors and `sed -n` number them, and counted in bytes read,
//! for a progress bar. This module must never interpret a line: what one
//! means is its caller's business.

use std::io::{BufRead, Read};

/// One line of the file, without its `\n` (or `\r\n`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// The line, valid UTF-8 and within the limit.
    Text(String),
    /// Longer than the limit: its start was read, not kept; the next
    /// read continues inside it unless [`Lines::skip_rest`] reads past it.
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
            return Ok(Some((self.number, Line::TooLong)));
        }
        if buffer.last() == Some(&b'\r') {
            buffer.pop();
        }
        let line = String::from_utf8(buffer).map_or(Line::NotUtf8, Line::Text);
        Ok(Some((self.number, line)))
    }

    /// Reads past the rest of the over-long line just returned, through
    /// its newline (or the end of the file), reading at most `most` bytes:
    /// `false` if the line goes on beyond them.
    ///
    /// # Errors
    ///
    /// The reader's.
    pub fn skip_rest(&mut self, most: u64) -> std::io::Result<bool> {
        let mut skipped = 0;
        while skipped < most {
            let available = self.reader.fill_buf()?;
            if available.is_empty() {
                return Ok(true);
            }
            let room = usize::try_from(most - skipped).unwrap_or(usize::MAX);
            let (used, found) = match available.iter().position(|b| *b == b'\n') {
                Some(at) if at < room => (at + 1, true),
                _ => (available.len().min(room), false),
            };
            self.reader.consume(used);
            self.bytes += used as u64;
            skipped += used as u64;
            if found {
                return Ok(true);
            }
        }
        Ok(false)
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
            if line.1 == Line::TooLong {
                assert!(lines.skip_rest(1 << 20).unwrap());
            }
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

    #[test]
    fn a_line_that_never_ends_is_skipped_only_so_far() {
        let endless = std::io::Read::take(std::io::repeat(b'x'), 1 << 30);
        let mut lines = Lines::new(std::io::BufReader::new(endless), 8);
        assert_eq!(lines.next_line().unwrap(), Some((1, Line::TooLong)));
        assert!(!lines.skip_rest(1000).unwrap());
        assert_eq!(lines.bytes_read(), 9 + 1000);
    }
}
