//! `inbox export` and `inbox import`: a whole database out to a file of its
//! own, and one brought back in, as an SQLite copy (`--sqlite FILE`, see
//! `inbox_sqlite::transfer`) or as lines of JSON (`--format`, see
//! [`crate::interchange`]).
//!
//! Tools of the CLI, not engine commands: the engine does no I/O. They find
//! the database exactly as every command does, open it with the same checks,
//! and report in the JSON contract. This module only adapts; it must never
//! decide what a copy holds.

use std::path::Path;

use inbox_engine::{EngineError, ErrorCode, Response};
use inbox_sqlite::transfer::{self, TransferError};
use inbox_sqlite::{SqliteStore, open};

use crate::args::{ExportArgs, ImportArgs};
use crate::{output, render};
use inbox_host_native::Global;
use inbox_host_native::terminal;

/// `inbox export`: `--sqlite FILE [--force]` here, the line formats in
/// [`crate::interchange`].
pub(crate) fn export(global: &Global, args: &ExportArgs) -> u8 {
    let Some(sqlite) = &args.sqlite else {
        return crate::interchange::export(global, args);
    };
    let (db, cwd) = inbox_host_native::database::resolve_db(global);
    let context = render::Context::database(&db, &cwd);
    let result = open::open_existing(&db.path, None)
        .map_err(TransferError::Store)
        .and_then(|(store, _)| transfer::export(&store, sqlite, args.force));
    match result {
        Ok(exported) => {
            let file = exported.file.display().to_string();
            let fields = serde_json::json!({
                "database": db.path.display().to_string(),
                "file": file,
                "bytes": exported.bytes,
                "threads": exported.threads,
            });
            let human = format!(
                "Exported a copy to {} ({} threads, {} bytes)\n",
                terminal::safe(&file),
                exported.threads,
                exported.bytes
            );
            report("export", global.json, fields, human, &context, &db.notes)
        }
        Err(error) => refuse("export", error, global.json, &context, &db.notes),
    }
}

/// `inbox import`: `--sqlite FILE [--replace]` here, the line formats in
/// [`crate::interchange`].
pub(crate) fn import(global: &Global, args: &ImportArgs) -> u8 {
    let sqlite = match (&args.sqlite, &args.file) {
        (Some(sqlite), _) => sqlite,
        (None, Some(file)) => return crate::interchange::import(global, args, file),
        // The parser requires one of the two.
        (None, None) => return crate::interchange::import(global, args, Path::new("-")),
    };
    let (db, cwd) = inbox_host_native::database::resolve_db(global);
    let context = render::Context::database(&db, &cwd);
    let now = backup_stamp();
    let result = open::init(&db.path, None)
        .map_err(TransferError::Store)
        .and_then(|(mut store, _): (SqliteStore, _)| {
            transfer::import(&mut store, sqlite, args.replace, &now)
        });
    match result {
        Ok(imported) => {
            let backup = imported.backup.as_ref().map(|p| p.display().to_string());
            let fields = serde_json::json!({
                "database": db.path.display().to_string(),
                "file": sqlite.display().to_string(),
                "threads": imported.threads,
                "messages": imported.messages,
                "events": imported.events,
                "backup": backup,
            });
            let mut human = format!(
                "Imported {} threads, {} messages and {} events from {}\n",
                imported.threads,
                imported.messages,
                imported.events,
                terminal::safe(&sqlite.display().to_string())
            );
            if let Some(backup) = &backup {
                human.push_str(&format!(
                    "The previous content is saved in {}\n",
                    terminal::safe(backup)
                ));
            }
            report("import", global.json, fields, human, &context, &db.notes)
        }
        Err(error) => refuse("import", error, global.json, &context, &db.notes),
    }
}

fn report(
    command: &str,
    json: bool,
    fields: serde_json::Value,
    human: String,
    context: &render::Context,
    notes: &[String],
) -> u8 {
    let notes = crate::note_lines(notes);
    let (out, err) = if json {
        (output::success_json(Some(command), fields), notes)
    } else {
        let used = context
            .database
            .as_ref()
            .map(|d| format!("database: {}\n", terminal::safe(d)))
            .unwrap_or_default();
        (human, format!("{notes}{used}"))
    };
    output::deliver(&out, &err, 0, output::Effect::Changed, || {
        format!("the {command} took effect")
    })
}

fn refuse(
    command: &str,
    error: TransferError,
    json: bool,
    context: &render::Context,
    notes: &[String],
) -> u8 {
    let error = match error {
        TransferError::File(problem) => EngineError::InvalidValue {
            field: "sqlite".into(),
            problem,
        },
        TransferError::NotEmpty(message) => EngineError::Relayed {
            code: ErrorCode::InvalidState,
            message,
        },
        TransferError::TooLarge(message) => EngineError::Relayed {
            code: ErrorCode::TooLong,
            message,
        },
        TransferError::Store(error) => EngineError::Store(error),
    };
    let response = Response::failure(Some(command.to_owned()), error);
    crate::finish(&response, json, Some(context), notes)
}

/// The time in a backup's name: `20261125T031500Z`, sortable and safe in a
/// file name.
fn backup_stamp() -> String {
    use inbox_engine::Clock as _;
    let now = inbox_host_native::HostClock::system().now().to_string();
    now.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(15)
        .collect::<String>()
        + "Z"
}
