//! The Markdown writer both reports are written with: a [`Doc`] of blocks
//! (headings, paragraphs, lists, tables) separated by blank lines, and
//! [`Table`], which a harness can also keep as data (the main benchmark
//! saves each section's tables as JSON and renders them again later).
//!
//! It owns the Markdown syntax only: every cell and sentence arrives as
//! text, already formatted. It must never compute or format a figure.

use serde::{Deserialize, Serialize};

/// A document being written, block by block; each block ends with a blank
/// line.
#[derive(Debug, Default)]
pub struct Doc {
    lines: Vec<String>,
}

impl Doc {
    /// An empty document.
    pub fn new() -> Doc {
        Doc::default()
    }

    /// One line as it is (no blank line after it).
    pub fn line(&mut self, line: impl Into<String>) {
        self.lines.push(line.into());
    }

    /// A blank line.
    pub fn blank(&mut self) {
        self.lines.push(String::new());
    }

    /// A heading of `level` (1 for `#`).
    pub fn heading(&mut self, level: usize, title: &str) {
        self.line(format!("{} {title}", "#".repeat(level)));
        self.blank();
    }

    /// A paragraph (or any block given as one piece of text).
    pub fn paragraph(&mut self, text: impl Into<String>) {
        self.line(text);
        self.blank();
    }

    /// A bulleted list, one item per entry (a blank line after it, even
    /// when it is empty).
    pub fn bullets<T: Into<String>>(&mut self, items: impl IntoIterator<Item = T>) {
        for item in items {
            self.line(format!("- {}", item.into()));
        }
        self.blank();
    }

    /// A table: its caption as a paragraph (if any), then the table.
    pub fn table(&mut self, table: &Table) {
        if !table.caption.is_empty() {
            self.paragraph(table.caption.as_str());
        }
        self.line(row(&table.header));
        let rule: Vec<&str> = (0..table.header.len())
            .map(|i| if i < table.left { "---" } else { "---:" })
            .collect();
        self.line(row(&rule));
        for cells in &table.rows {
            self.line(row(cells));
        }
        self.blank();
    }

    /// A two-column table without a header (`| | |`) of names and values,
    /// as both reports describe the machine.
    pub fn key_values<K: AsRef<str>, V: AsRef<str>>(&mut self, rows: &[(K, V)]) {
        self.line("| | |");
        self.line("| --- | --- |");
        for (key, value) in rows {
            self.line(format!("| {} | {} |", key.as_ref(), value.as_ref()));
        }
        self.blank();
    }

    /// The whole document, ending with a newline.
    pub fn finish(self) -> String {
        self.lines.join("\n") + "\n"
    }
}

/// `| a | b |`.
fn row<T: AsRef<str>>(cells: &[T]) -> String {
    let cells: Vec<&str> = cells.iter().map(AsRef::as_ref).collect();
    format!("| {} |", cells.join(" | "))
}

/// One table: a caption (what the columns and ratios are), a header and
/// rows of formatted cells; the first [`Table::left`] columns are aligned
/// left, the others (figures) right.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Table {
    /// The paragraph before the table (empty: none).
    pub caption: String,
    /// Column names.
    pub header: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
    /// How many columns, from the first, are aligned left.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub left: usize,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl Table {
    /// A table with `caption` and column names, the first column aligned
    /// left and the others right.
    pub fn new<T: AsRef<str>>(
        caption: impl Into<String>,
        header: impl IntoIterator<Item = T>,
    ) -> Table {
        Table {
            caption: caption.into(),
            header: header.into_iter().map(|h| h.as_ref().to_owned()).collect(),
            rows: Vec::new(),
            left: 1,
        }
    }

    /// Aligns the first `columns` columns left (all of them: text tables).
    pub fn left(mut self, columns: usize) -> Table {
        self.left = columns;
        self
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

/// GitHub's anchor of a heading: lowercase, spaces to dashes, punctuation
/// dropped.
pub fn anchor(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() {
                Some(c.to_ascii_lowercase())
            } else if c == ' ' || c == '-' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn anchors_match_github() {
        assert_eq!(
            anchor("1. Send throughput (in process)"),
            "1-send-throughput-in-process"
        );
    }

    #[test]
    fn renders_blocks_and_tables() {
        let mut table = Table::new("Caption", ["a", "b"]);
        table.row(vec!["x".into(), "1".into()]);
        let mut doc = Doc::new();
        doc.heading(2, "Title");
        doc.table(&table);
        doc.table(&Table::new("", ["c", "d", "e"]).left(2));
        doc.key_values(&[("date", "today")]);
        doc.bullets(["one"]);
        assert_eq!(
            doc.finish(),
            "## Title\n\nCaption\n\n| a | b |\n| --- | ---: |\n| x | 1 |\n\n\
             | c | d | e |\n| --- | --- | ---: |\n\n\
             | | |\n| --- | --- |\n| date | today |\n\n- one\n\n"
        );
    }

    #[test]
    fn tables_saved_without_alignment_load_with_the_default() {
        let table: Table =
            serde_json::from_str(r#"{"caption":"c","header":["a","b"],"rows":[]}"#).unwrap();
        assert_eq!((table.caption.as_str(), table.left), ("c", 1));
        let saved = serde_json::to_string(&Table::new("c", ["a"])).unwrap();
        assert!(!saved.contains("left"), "{saved}");
    }
}
