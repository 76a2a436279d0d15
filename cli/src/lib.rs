//! The `inbox` command line as a library: the binary in `main.rs` only calls
//! [`main`], so that tests (argument fuzzing, benchmarks) can drive the same
//! parser and the same code paths in process.
//!
//! One invocation is one process and one engine call: parse the arguments,
//! open the SQLite database, build the request, execute it (or, for `watch`
//! and `wait-reply`, block until it wakes), print the result and exit with
//! the contract's exit code. With `--json` the output is the engine's JSON
//! contract, byte for byte, usage errors included. This crate must never
//! apply an inbox rule of its own.

pub mod args;
mod render;
mod request;
mod runner;

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches};
use inbox_engine::{Effect, EngineError, Executor, Request, Response, StoreError};
use inbox_host_native::{Durability, HostClock, SqliteStore, open, watch};

use args::{Cli, Command};

const SKILL: &str = include_str!("../SKILL.md");

/// Runs `inbox` with the process's arguments and returns its exit code.
pub fn main() -> ExitCode {
    let raw: Vec<OsString> = std::env::args_os().collect();
    let parsed = Cli::command()
        .try_get_matches_from(&raw)
        .and_then(|matches| {
            let name = matches.subcommand_name().unwrap_or_default().to_owned();
            Cli::from_arg_matches(&matches).map(|cli| (cli, name))
        });
    match parsed {
        Ok((cli, name)) => ExitCode::from(run(cli, &name)),
        Err(error) => usage_error(&raw, &error),
    }
}

/// Help and version go to stdout with exit 0; everything else clap refuses
/// is a usage error: exit 30, and with `--json` still one JSON object.
fn usage_error(raw: &[OsString], error: &clap::Error) -> ExitCode {
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    if raw.iter().any(|a| a == "--json") {
        let rendered = error.render().to_string();
        let first = rendered.lines().next().unwrap_or("invalid arguments");
        let message = first.strip_prefix("error: ").unwrap_or(first);
        let command_line = Cli::command();
        let command = raw
            .iter()
            .skip(1)
            .filter_map(|a| a.to_str())
            .find(|a| command_line.find_subcommand(a).is_some())
            .map(str::to_owned);
        let hint = match &command {
            Some(command) => format!("; see `inbox {command} --help`"),
            None => "; see `inbox --help`".to_owned(),
        };
        let response = Response::failure(
            command,
            EngineError::InvalidRequest {
                message: format!("{message}{hint}"),
            },
        );
        print_stdout(&format!("{}\n", response.to_json()));
    } else {
        let _ = error.print();
    }
    ExitCode::from(30)
}

fn print_stdout(text: &str) {
    // A closed pipe (`inbox list | head`) is not an error worth a panic.
    let _ = anstream::stdout().write_all(text.as_bytes());
}

fn print_stderr(text: &str) {
    let _ = anstream::stderr().write_all(text.as_bytes());
}

/// Runs the command `name` (as the command line spelled it).
fn run(cli: Cli, name: &str) -> u8 {
    let Cli { global, command } = cli;
    let json = global.json;
    match &command {
        Command::Skill(args) => return skill(args.install.as_deref(), json),
        Command::Script(args) => return script(&args.file, json),
        _ => {}
    }
    let fail = |error: EngineError| Response::failure(Some(name.to_owned()), error);

    let clock = match HostClock::from_env() {
        Ok(clock) => clock,
        Err(e) => {
            return finish(
                &fail(EngineError::InvalidValue {
                    field: inbox_host_native::clock::NOW_ENV.into(),
                    problem: e.to_string(),
                }),
                json,
                None,
                &[],
            );
        }
    };
    let mut notes = Vec::new();
    let init_durability = match &command {
        Command::Init(args) => Some(args.durability),
        _ => None,
    };
    let request = match command.request(global.agent.clone(), &mut notes) {
        Some(Ok(request)) => request,
        Some(Err(error)) => return finish(&fail(error), json, None, &notes),
        None => {
            let message = format!("`{name}` does not go through the engine");
            return finish(&fail(EngineError::Internal { message }), json, None, &notes);
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let env_db = std::env::var_os("INBOX_DB").map(PathBuf::from);
    let (db_path, _) =
        inbox_host_native::resolve_db_path(global.db.as_deref(), env_db.as_deref(), &cwd);

    // A wait arms its watch before it opens the database, so that no commit
    // between the first query and the first sleep goes unnoticed.
    let waits = request.effect() == Effect::Wait;
    let mut watcher = waits.then(|| watch::ChangeWatcher::arm(&db_path));
    let engine = match runner::EngineChoice::load(global.engine.as_deref()) {
        Ok(engine) => engine,
        Err(error) => return finish(&fail(error), json, None, &notes),
    };
    let (store, durability) = match open_store(init_durability, &db_path) {
        Ok(opened) => opened,
        Err(error) => return finish(&fail(EngineError::Store(error)), json, None, &notes),
    };
    let new_thread = matches!(&request, Request::Send(r) if r.thread_id.is_none());
    let mut engine = match engine.start(store, clock) {
        Ok(engine) => engine,
        Err(error) => return finish(&fail(error), json, None, &notes),
    };
    let response = match (request, watcher.as_mut()) {
        (request, Some(watcher)) => {
            watch::wait(&mut engine, runner::Runner::store, request, watcher)
        }
        (request, None) => engine.execute(request),
    };
    let context = render::Context {
        now: engine.now(),
        agent: global.agent,
        new_thread,
        durability: Some(durability.as_str()),
    };
    finish(&response, json, Some(&context), &notes)
}

/// Opens the database: created by `init` (`init` is `Some`, with the
/// durability to record, if given), otherwise it must already exist.
fn open_store(
    init: Option<Option<Durability>>,
    path: &Path,
) -> Result<(SqliteStore, Durability), StoreError> {
    let (store, durability) = match init {
        Some(chosen) => {
            let mut store = open::open_or_create(path)?;
            inbox_engine::Store::initialize(&mut store)?;
            let durability = match chosen {
                Some(chosen) => {
                    open::set_durability(&store, chosen)?;
                    chosen
                }
                None => open::stored_durability(&store)?,
            };
            (store, durability)
        }
        _ => open::open_existing(path, None)?,
    };
    Ok((store, durability))
}

fn finish(
    response: &Response,
    json: bool,
    context: Option<&render::Context>,
    notes: &[String],
) -> u8 {
    for note in notes {
        print_stderr(&format!("note: {note}\n"));
    }
    if json {
        print_stdout(&format!("{}\n", response.to_json()));
    } else {
        let fallback;
        let context = match context {
            Some(context) => context,
            None => {
                fallback = render::Context {
                    now: inbox_engine::Timestamp::from_millis(0),
                    agent: None,
                    new_thread: false,
                    durability: None,
                };
                &fallback
            }
        };
        let (out, err) = render::human(response, context);
        print_stdout(&out);
        print_stderr(&err);
    }
    response.exit_code()
}

/// `inbox skill`: print SKILL.md, or write it to DIR/inbox/SKILL.md.
fn skill(install: Option<&Path>, json: bool) -> u8 {
    let Some(dir) = install else {
        if json {
            let body = serde_json::json!({"ok": true, "command": "skill", "skill": SKILL});
            print_stdout(&format!("{body}\n"));
        } else {
            print_stdout(SKILL);
        }
        return 0;
    };
    let target = dir.join("inbox").join("SKILL.md");
    let target = std::path::absolute(&target).unwrap_or(target);
    let written = target
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&target, SKILL));
    match written {
        Ok(()) => {
            if json {
                let body = serde_json::json!({"ok": true, "command": "skill", "installed": target.display().to_string()});
                print_stdout(&format!("{body}\n"));
            } else {
                print_stdout(&format!("Installed {}\n", target.display()));
            }
            0
        }
        Err(e) => {
            let response = Response::failure(
                Some("skill".into()),
                EngineError::InvalidValue {
                    field: "install".into(),
                    problem: format!("cannot write {}: {e}", target.display()),
                },
            );
            finish(&response, json, None, &[])
        }
    }
}

/// `inbox script FILE`: run a transition script in memory and print its
/// transcript. Exit 0 when every expectation held, 1 when one did not, 30
/// when the script cannot be read or parsed. With `--json`:
/// `{"ok": true, "command": "script", "transcript": ..., "failures": [...]}`,
/// or the usual error object.
fn script(file: &Path, json: bool) -> u8 {
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map(|_| text)
    } else {
        std::fs::read_to_string(file)
    };
    let fail = |problem: String| {
        let response = Response::failure(
            Some("script".into()),
            EngineError::InvalidValue {
                field: "file".into(),
                problem,
            },
        );
        finish(&response, json, None, &[])
    };
    let text = match text {
        Ok(text) => text,
        Err(e) => return fail(format!("cannot be read: {}: {e}", file.display())),
    };
    match inbox_engine::run_script(&text, inbox_engine::MemoryStore::new()) {
        Ok(transcript) => {
            if json {
                let body = serde_json::json!({
                    "ok": true,
                    "command": "script",
                    "transcript": transcript.text,
                    "failures": transcript.failures,
                });
                print_stdout(&format!("{body}\n"));
            } else {
                print_stdout(&transcript.text);
                for failure in &transcript.failures {
                    print_stderr(&format!("expectation failed: {failure}\n"));
                }
            }
            if transcript.failures.is_empty() { 0 } else { 1 }
        }
        Err(e) => fail(format!("{} does not parse: {e}", file.display())),
    }
}
