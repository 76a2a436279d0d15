//! `inbox export --format F [FILE]` and `inbox import --format F FILE`: the
//! database as lines of JSON, in three formats (the `--sqlite` copies are
//! `crate::transfer`'s).
//!
//! - `jsonl`, inbox's own lossless dump: a row copy, `inbox_sqlite::dump`'s.
//! - `mailbox-jsonl`, seed 004's `mailbox.jsonl` ([`mailbox`]), and
//!   `teams-jsonl`, seed 002's member inbox lines ([`teams`]): one message
//!   per line. An export writes every message in the order it was written,
//!   from one read transaction ([`messages`]); an import runs each line as
//!   engine commands, so inbox's rules apply to it, in batches ([`apply`]):
//!   write transactions of a fifth of a second, a line's commands kept or
//!   dropped together, every command under an idempotency key of the
//!   line's, so a file imported twice adds nothing.
//!
//! Imports stream the file a line at a time and show a [`progress`] bar on
//! a terminal. This module opens files and the database and reports in the
//! JSON contract; it must never apply an inbox rule (the engine does) nor
//! decide what a line means (the formats' modules do).

mod apply;
pub mod mailbox;
mod messages;
mod progress;
mod teams;

use std::io::{BufRead, Write};
use std::path::Path;

use inbox_engine::{EngineError, ErrorCode, Response, StoreError};
use inbox_host_native::HostClock;
use inbox_sqlite::dump::{self, DumpError};
use inbox_sqlite::transfer::{self, TransferError};
use inbox_sqlite::{DbPath, SqliteStore, open};
use serde_json::{Map, Value as Json};

use crate::args::{ExportArgs, Format, ImportArgs};
use crate::{output, render};
use inbox_host_native::Global;
use inbox_host_native::terminal;

/// The longest line a message format's import reads: a message's body is
/// at most 1 MiB, its payload 256 KiB, and JSON may spell a character in
/// up to six bytes. A longer line is reported and skipped.
const MESSAGE_LINE_LIMIT: usize = 8 << 20;

/// Why an export or import did not happen; nothing was written then.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InterchangeError {
    /// The dump's own refusals.
    #[error(transparent)]
    Dump(#[from] DumpError),
    /// The file named cannot be read, or written where asked.
    #[error("{0}")]
    File(String),
    /// Flags that cannot go together.
    #[error("{0}")]
    Usage(String),
    /// Writing the lines failed part way.
    #[error("cannot write the lines: {0}")]
    Write(std::io::Error),
    /// The store failed, or the engine did (an import stops then).
    #[error("{0}")]
    Engine(EngineError),
    /// A line that goes on past any bound: not a file of lines.
    #[error(
        "line {line} goes on for more than {most} bytes without ending: this is not a file of JSON lines"
    )]
    Endless {
        /// Its number.
        line: u64,
        /// How far it was read.
        most: u64,
    },
    /// An import of lines stopped part way.
    #[error(
        "{error}; the import stopped at line {line}{}",
        match kept {
            0 => ", and nothing was imported".to_owned(),
            n => format!(
                ": the {n} lines before it are imported, and importing the file again \
                 finishes it (lines already imported are skipped)"
            ),
        }
    )]
    Stopped {
        /// The line it stopped at.
        line: u64,
        /// Lines read in batches committed before.
        kept: u64,
        /// Why.
        error: Box<InterchangeError>,
    },
}

impl InterchangeError {
    /// The error code the JSON contract reports it with.
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            InterchangeError::Dump(error) => error.code(),
            InterchangeError::File(_) => ErrorCode::InvalidValue,
            InterchangeError::Usage(_) => ErrorCode::InvalidRequest,
            InterchangeError::Write(_) => ErrorCode::StorageError,
            InterchangeError::Engine(error) => error.code(),
            InterchangeError::Stopped { error, .. } => error.code(),
            InterchangeError::Endless { .. } => ErrorCode::TooLong,
        }
    }

    /// Whether it is stdout's reader having closed it (`inbox export |
    /// head`): the reader's choice, not a failure.
    fn closed_pipe(&self) -> bool {
        let io = match self {
            InterchangeError::Write(e) | InterchangeError::Dump(DumpError::Write(e)) => e,
            _ => return false,
        };
        io.kind() == std::io::ErrorKind::BrokenPipe
    }
}

impl From<TransferError> for InterchangeError {
    fn from(error: TransferError) -> Self {
        match error {
            TransferError::File(problem)
            | TransferError::NotEmpty(problem)
            | TransferError::TooLarge(problem) => InterchangeError::File(problem),
            TransferError::Store(error) => InterchangeError::Engine(EngineError::Store(error)),
        }
    }
}

impl From<StoreError> for InterchangeError {
    fn from(error: StoreError) -> Self {
        InterchangeError::Engine(EngineError::Store(error))
    }
}

/// What an export wrote.
struct Exported {
    /// Lines of records (a dump's header and end line not counted).
    records: u64,
    /// Threads and messages, for a dump.
    threads: Option<u64>,
    messages: u64,
}

/// `inbox export [--format F] [FILE|-] [--force]`.
pub(crate) fn export(global: &Global, args: &ExportArgs) -> u8 {
    let (db, cwd) = inbox_host_native::database::resolve_db(global);
    let context = render::Context::database(&db, &cwd);
    let target = args.file.as_deref().filter(|f| *f != Path::new("-"));
    let result = if target.is_none() && global.json {
        Err(InterchangeError::Usage(
            "--json prints its one JSON object on stdout, where the lines would go; name a FILE to \
             write them to"
                .into(),
        ))
    } else {
        open::open_existing(&db.path, None)
            .map_err(InterchangeError::from)
            .and_then(|(mut store, _)| export_to(&mut store, args.format, target, args.force))
    };
    let exported = match result {
        Ok(exported) => exported,
        Err(error) if error.closed_pipe() => return 0,
        Err(error) => return refuse("export", &error, global.json, &context, &db.notes),
    };
    let shown = target.map_or_else(|| "-".to_owned(), |t| t.display().to_string());
    let mut fields = serde_json::json!({
        "format": args.format.as_str(),
        "database": db.path.display().to_string(),
        "file": shown,
        "records": exported.records,
        "messages": exported.messages,
    });
    let what = match exported.threads {
        Some(threads) => {
            fields["threads"] = threads.into();
            format!(
                "{} records ({threads} threads, {} messages)",
                exported.records, exported.messages
            )
        }
        None => format!("{} messages", exported.messages),
    };
    let place = match target {
        Some(_) => terminal::safe(&shown).into_owned(),
        None => "stdout".to_owned(),
    };
    let human = format!("Exported {what} as {} to {place}\n", args.format.as_str());
    // The lines themselves took stdout: the report goes to stderr.
    let report = Report {
        json: global.json,
        to_stderr: target.is_none(),
    };
    report.deliver("export", fields, human, &context, &db.notes)
}

/// Writes `format`'s lines of `store` to `target`, or stdout.
fn export_to(
    store: &mut SqliteStore,
    format: Format,
    target: Option<&Path>,
    force: bool,
) -> Result<Exported, InterchangeError> {
    match target {
        Some(path) => transfer::write_file(path, force, |out| write_lines(store, format, out)),
        None => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let exported = write_lines(store, format, &mut out)?;
            out.flush().map_err(InterchangeError::Write)?;
            Ok(exported)
        }
    }
}

fn write_lines(
    store: &mut SqliteStore,
    format: Format,
    out: &mut dyn Write,
) -> Result<Exported, InterchangeError> {
    let messages = match format {
        Format::Jsonl => {
            let dumped = dump::export(store, out)?;
            return Ok(Exported {
                records: dumped.records,
                threads: Some(dumped.threads),
                messages: dumped.messages,
            });
        }
        Format::MailboxJsonl => messages::export(store, out, mailbox::line)?,
        Format::TeamsJsonl => messages::export(store, out, teams::line)?,
    };
    Ok(Exported {
        records: messages,
        threads: None,
        messages,
    })
}

/// `inbox import [--format F] FILE|-`.
pub(crate) fn import(global: &Global, args: &ImportArgs, file: &Path) -> u8 {
    let (db, cwd) = inbox_host_native::database::resolve_db(global);
    let context = render::Context::database(&db, &cwd);
    match import_file(global, args.format, file, &db) {
        Ok((fields, human)) => Report {
            json: global.json,
            to_stderr: false,
        }
        .deliver("import", fields, human, &context, &db.notes),
        Err(error) => refuse("import", &error, global.json, &context, &db.notes),
    }
}

/// Opens the file (before the database, so a wrong name creates nothing),
/// then the database (created if missing), and imports.
fn import_file(
    global: &Global,
    format: Format,
    file: &Path,
    db: &DbPath,
) -> Result<(Json, String), InterchangeError> {
    let (input, size) = open_input(file)?;
    let clock = HostClock::from_env().map_err(|e| {
        InterchangeError::Engine(EngineError::InvalidValue {
            field: inbox_host_native::clock::NOW_ENV.into(),
            problem: e.to_string(),
        })
    })?;
    let (mut store, _) = open::init(&db.path, None)?;
    let shown = file.display().to_string();
    let mut bar = progress::Progress::start(size, global.json, &shown);
    let mut progress = |bytes: u64| {
        if let Some(bar) = bar.as_mut() {
            bar.update(bytes);
        }
    };
    let base = serde_json::json!({
        "format": format.as_str(),
        "database": db.path.display().to_string(),
        "file": shown,
    });
    let result = match format {
        Format::Jsonl => dump::import(&mut store, input, &mut progress)
            .map_err(InterchangeError::from)
            .map(|imported| dump_report(base, imported, &shown)),
        Format::MailboxJsonl | Format::TeamsJsonl => {
            // The two seeds' lines differ only in how a line maps.
            let mut mapping: Box<dyn apply::Mapping> = if format == Format::MailboxJsonl {
                Box::<mailbox::MailboxImport>::default()
            } else {
                Box::<teams::TeamsImport>::default()
            };
            apply::import(
                store,
                clock,
                input,
                MESSAGE_LINE_LIMIT,
                mapping.as_mut(),
                &mut progress,
            )
            .map(|summary| summary.report(base, &shown, format))
        }
    };
    if let Some(bar) = bar.as_mut() {
        bar.finish();
    }
    result
}

/// The file to read, buffered, and its size when known (for the bar).
fn open_input(file: &Path) -> Result<(Box<dyn BufRead>, Option<u64>), InterchangeError> {
    if file == Path::new("-") {
        return Ok((Box::new(std::io::stdin().lock()), None));
    }
    let shown = file.display();
    let opened = std::fs::File::open(file)
        .map_err(|e| InterchangeError::File(format!("{shown} cannot be read: {e}")))?;
    let meta = opened
        .metadata()
        .map_err(|e| InterchangeError::File(format!("{shown} cannot be read: {e}")))?;
    if meta.is_dir() {
        return Err(InterchangeError::File(format!(
            "{shown} is a folder; name a file of JSON lines"
        )));
    }
    let size = meta.is_file().then_some(meta.len());
    Ok((
        Box::new(std::io::BufReader::with_capacity(1 << 16, opened)),
        size,
    ))
}

/// A dump's import, in the JSON contract and for people.
fn dump_report(mut fields: Json, imported: dump::Imported, shown: &str) -> (Json, String) {
    fields["records"] = imported.records.into();
    fields["added"] = imported.added.into();
    fields["present"] = imported.present.into();
    fields["kept"] = imported.kept.into();
    let human = format!(
        "Imported {} records from {}: {} added, {} already present{}\n",
        imported.records,
        terminal::safe(shown),
        imported.added,
        imported.present,
        match imported.kept {
            0 => String::new(),
            n => format!(", {n} setting(s) kept as this database has them"),
        }
    );
    (fields, human)
}

/// Where a report goes: the JSON contract's one object, or text for people
/// on stdout (or on stderr, when stdout carried the lines).
struct Report {
    json: bool,
    to_stderr: bool,
}

impl Report {
    fn deliver(
        &self,
        command: &str,
        fields: Json,
        human: String,
        context: &render::Context,
        notes: &[String],
    ) -> u8 {
        let notes = crate::note_lines(notes);
        let used = context
            .database
            .as_ref()
            .map(|d| format!("database: {}\n", terminal::safe(d)))
            .unwrap_or_default();
        let (out, err) = match (self.json, self.to_stderr) {
            (true, _) => (output::success_json(Some(command), fields), notes),
            (false, false) => (human, format!("{notes}{used}")),
            (false, true) => (String::new(), format!("{notes}{used}{human}")),
        };
        output::deliver(&out, &err, 0, output::Effect::Changed, || {
            format!("the {command} took effect")
        })
    }
}

/// A refusal in the JSON contract's shape, with the error's own code.
fn refuse(
    command: &str,
    error: &InterchangeError,
    json: bool,
    context: &render::Context,
    notes: &[String],
) -> u8 {
    let relayed = EngineError::Relayed {
        code: error.code(),
        message: error.to_string(),
    };
    let response = Response::failure(Some(command.to_owned()), relayed);
    crate::finish(&response, json, Some(context), notes)
}

/// A line as a JSON object, or what it is instead (the seeds' lines are
/// objects; anything else is a malformed line).
fn object(text: &str) -> Result<Map<String, Json>, String> {
    match serde_json::from_str::<Json>(text) {
        Ok(Json::Object(object)) => Ok(object),
        Ok(_) => Err("is not a JSON object".into()),
        Err(e) => Err(format!("is not JSON ({e})")),
    }
}

/// A seed's name of an agent as an inbox address: `agent:<id>` is the
/// agent `<id>`; anything else (an agent's name, `role:NAME`, `broadcast`)
/// is inbox's as it stands, for the engine to check.
fn address(seed: &str) -> String {
    seed.strip_prefix("agent:").unwrap_or(seed).to_owned()
}

/// The first of `candidates` with a line of text in it, made a one-line
/// title ([`inbox_engine::validate::subject_from`]), else `fallback`.
fn title(candidates: &[Option<&str>], fallback: impl FnOnce() -> String) -> String {
    candidates
        .iter()
        .flatten()
        .map(|text| inbox_engine::validate::subject_from(text))
        .find(|line| !line.is_empty())
        .unwrap_or_else(fallback)
}

/// A JSON object written with `first`'s fields in that order (those that
/// are `Some`), then `rest`'s other fields in name order: the seeds' lines
/// put their fields in a documented order, and a reader comparing files
/// line by line sees the same order every time.
fn ordered(first: &[(&str, Option<Json>)], rest: &Map<String, Json>) -> String {
    let mut out = String::from("{");
    let mut field = |key: &str, value: &Json| {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&Json::from(key).to_string());
        out.push(':');
        out.push_str(&value.to_string());
    };
    for (key, value) in first {
        if let Some(value) = value {
            field(key, value);
        }
    }
    for (key, value) in rest {
        if !first.iter().any(|(k, _)| k == key) {
            field(key, value);
        }
    }
    out.push('}');
    out
}
