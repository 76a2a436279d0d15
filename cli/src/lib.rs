//! The `inbox` and `orch` command lines as a library: the binaries only call
//! [`main`] and [`orch_main`], so that tests (argument fuzzing, benchmarks)
//! can drive the same parsers and the same code paths in process. Both share
//! everything after parsing: discovery, the engine call, waits, output.
//!
//! One invocation is one process and one engine call: parse the arguments,
//! open the database (an SQLite file, or PostgreSQL by URL), build the request, execute it (or, for `watch`
//! and `wait-reply`, block until it wakes), print the result and exit with
//! the contract's exit code. With `--json` the output is the engine's JSON
//! contract, byte for byte, usage errors included. This crate must never
//! apply an inbox rule of its own.

pub mod args;
mod bridge;
mod daemon;
mod fields;
mod generated;
pub mod interchange;
mod launch;
pub mod orch_args;
mod output;
mod render;
mod render_orch;
mod request;
pub mod serving;
mod tools;
mod transfer;

use std::ffi::OsString;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches};
use inbox_engine::{Call, EngineError, Request, Response};
use inbox_host_native::{HostClock, database, hosted, terminal};
use inbox_sqlite::Durability;

use args::{Cli, Command};
use inbox_host_native::Global;
use inbox_host_native::run::{Target, changed, execute_on, stopped};
use orch_args::{OrchCli, OrchCommand};

/// Runs `inbox` with the process's arguments and returns its exit code.
pub fn main() -> u8 {
    run_binary(Binary::Inbox)
}

/// Runs `orch` with the process's arguments and returns its exit code.
pub fn orch_main() -> u8 {
    run_binary(Binary::Orch)
}

/// Which command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Binary {
    Inbox,
    Orch,
}

/// A parsed command line: the global flags, the command's name (as the
/// JSON contract spells it) and what to do.
struct Invocation {
    global: Global,
    name: String,
    action: Action,
    /// Whether an engine call may go to the database's daemon
    /// ([`daemon`]): `inbox`'s may, `orch`'s run beside their worktrees.
    hand_over: bool,
}

// One per process, moved once: boxing the request would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Action {
    /// A tool that runs in the CLI alone.
    Tool(Box<dyn FnOnce(&Global) -> u8>),
    /// An engine request (or the reason it could not be built); for `init`,
    /// the durability to record.
    Engine {
        request: Result<Request, EngineError>,
        init: Option<Option<Durability>>,
        notes: Vec<String>,
    },
}

impl Binary {
    fn name(self) -> &'static str {
        match self {
            Binary::Inbox => "inbox",
            Binary::Orch => "orch",
        }
    }

    fn command(self) -> clap::Command {
        match self {
            Binary::Inbox => Cli::command(),
            Binary::Orch => OrchCli::command(),
        }
    }

    /// Parses a command line into what to run.
    ///
    /// Before it parses, clap copies every global flag into every
    /// subcommand of the tree, and drops the copies after: about 0.15 ms of
    /// a fresh process, most of it for subcommands the line does not name.
    /// So a line that names a subcommand (after any global flags, as in
    /// `inbox --db x.db send`) is parsed first by a tree that holds only
    /// that one (and the global flags). Anything else clap would answer
    /// (help, version, a usage error) comes from the whole tree, parsed
    /// again, so every text it prints stays the same.
    fn parse(self, raw: &[OsString]) -> Result<Invocation, clap::Error> {
        self.matches(raw)
            .and_then(|matches| self.invocation(&matches))
    }

    /// clap's reading of a command line (see [`Binary::parse`]).
    fn matches(self, raw: &[OsString]) -> Result<clap::ArgMatches, clap::Error> {
        let whole = self.command();
        // A reading without a subcommand is left to the whole tree too, so
        // that whatever clap says of such a line, it says as it always has.
        let named = self
            .command_naming(&whole, raw)
            .and_then(|mut only| only.try_get_matches_from_mut(raw).ok())
            .filter(|matches| matches.subcommand_name().is_some());
        match named {
            Some(matches) => Ok(matches),
            None => whole.try_get_matches_from(raw),
        }
    }

    /// A tree with the global flags of `whole` and only the subcommand
    /// the line names, if it names one (see [`first_word`]).
    fn command_naming(self, whole: &clap::Command, raw: &[OsString]) -> Option<clap::Command> {
        let name = first_word(whole, raw)?;
        let only = whole.find_subcommand(name)?.clone();
        let root = clap::Command::new(self.name())
            .args(whole.get_arguments().cloned())
            .subcommand(only);
        Some(root)
    }

    fn invocation(self, matches: &clap::ArgMatches) -> Result<Invocation, clap::Error> {
        let name = self.subcommand_name(matches);
        match self {
            Binary::Inbox => Cli::from_arg_matches(matches).map(|cli| inbox_invocation(cli, name)),
            Binary::Orch => {
                OrchCli::from_arg_matches(matches).map(|cli| orch_invocation(cli, name))
            }
        }
    }

    /// The command's name in the JSON contract: the subcommand for inbox,
    /// `orch-` and the subcommand path for orch (`orch-run-create`).
    fn subcommand_name(self, matches: &clap::ArgMatches) -> String {
        let mut path = Vec::new();
        let mut at = matches;
        while let Some((name, sub)) = at.subcommand() {
            path.push(name.to_owned());
            at = sub;
        }
        self.joined(&path)
    }

    fn joined(self, path: &[String]) -> String {
        match self {
            // `agent register` is `agent-register`, as orch's are joined.
            Binary::Inbox => path.join("-"),
            Binary::Orch => format!("orch-{}", path.join("-")),
        }
    }
}

/// The first word of a command line that is neither one of `whole`'s own
/// flags nor a flag's value: the subcommand, in a line that names one.
/// `None` at anything it does not know for sure (a flag `whole` does not
/// define, a short flag, `--`), which leaves the line to the whole tree.
/// A wrong guess costs only time: the one-subcommand tree then fails to
/// read the line, and the whole tree reads it.
fn first_word<'a>(whole: &clap::Command, raw: &'a [OsString]) -> Option<&'a str> {
    let mut words = raw.iter().skip(1);
    while let Some(word) = words.next() {
        let word = word.to_str()?;
        let Some(flag) = word.strip_prefix("--") else {
            return (!word.starts_with('-')).then_some(word);
        };
        let (name, inline_value) = match flag.split_once('=') {
            Some((name, _)) => (name, true),
            None => (flag, false),
        };
        let arg = whole
            .get_arguments()
            .find(|arg| arg.get_long() == Some(name))?;
        if arg.get_action().takes_values() && !inline_value {
            words.next()?;
        }
    }
    None
}

/// A tool that works on the SQLite file itself: refused, before it runs,
/// when the database named is PostgreSQL.
fn file_tool(name: &str, tool: impl FnOnce(&Global) -> u8 + 'static) -> Action {
    let name = name.to_owned();
    Action::Tool(Box::new(move |global: &Global| {
        match database::file_only(global, &name) {
            Ok(()) => tool(global),
            Err(error) => finish(
                &Response::failure(Some(name.clone()), error),
                global.json,
                None,
                &[],
            ),
        }
    }))
}

fn inbox_invocation(cli: Cli, name: String) -> Invocation {
    let Cli { global, command } = cli;
    let action = match command {
        Command::Skill(args) => Action::Tool(Box::new(move |g: &Global| {
            tools::skill(&tools::INBOX_SKILL, args.install.as_deref(), g.json)
        })),
        Command::Script(args) => Action::Tool(Box::new(move |g: &Global| {
            tools::script(&args.file, g.json)
        })),
        Command::Export(args) => file_tool(&name, move |g| transfer::export(g, &args)),
        Command::Import(args) => file_tool(&name, move |g| transfer::import(g, &args)),
        Command::Bridge(args) => file_tool(&name, move |g| bridge::run(g, args)),
        Command::Completions(args) => completions_tool(Binary::Inbox, &name, args),
        Command::Man(args) => man_tool(Binary::Inbox, &name, args),
        Command::Mcp(_) => Action::Tool(Box::new(|g: &Global| launch::launch(launch::MCP, g))),
        Command::Serve(_) => Action::Tool(Box::new(|g: &Global| launch::launch(launch::SERVE, g))),
        Command::Daemon(_) => Action::Tool(Box::new(daemon::run)),
        command => {
            let init = match &command {
                Command::Init(args) => Some(args.durability),
                _ => None,
            };
            engine_action(&name, init, |notes| {
                command.request(global.agent.clone(), notes)
            })
        }
    };
    Invocation {
        global,
        name,
        action,
        hand_over: true,
    }
}

fn orch_invocation(cli: OrchCli, name: String) -> Invocation {
    let OrchCli { global, command } = cli;
    let action = match command {
        OrchCommand::Skill(args) => Action::Tool(Box::new(move |g: &Global| {
            let skill = match args.name.as_deref() {
                Some("council-review") => &tools::COUNCIL_SKILL,
                _ => &tools::ORCH_SKILL,
            };
            tools::skill(skill, args.install.as_deref(), g.json)
        })),
        OrchCommand::Completions(args) => completions_tool(Binary::Orch, &name, args),
        OrchCommand::Man(args) => man_tool(Binary::Orch, &name, args),
        command => engine_action(&name, None, |notes| {
            command.request(global.agent.clone(), notes)
        }),
    };
    Invocation {
        global,
        name,
        action,
        hand_over: false,
    }
}

/// `completions SHELL`, generated from `binary`'s own definition.
fn completions_tool(binary: Binary, name: &str, args: args::CompletionsArgs) -> Action {
    let name = name.to_owned();
    Action::Tool(Box::new(move |g: &Global| {
        generated::completions(binary.command(), args.shell, &name, g.json)
    }))
}

/// `man [--dir DIR]`, generated from `binary`'s own definition.
fn man_tool(binary: Binary, name: &str, args: args::ManArgs) -> Action {
    let name = name.to_owned();
    Action::Tool(Box::new(move |g: &Global| {
        generated::man(binary.command(), args.dir.as_deref(), &name, g.json)
    }))
}

/// The engine request a command's arguments make (`None`: a tool, which
/// cannot reach here), with the notes building it left.
fn engine_action(
    name: &str,
    init: Option<Option<Durability>>,
    build: impl FnOnce(&mut Vec<String>) -> Option<Result<Request, EngineError>>,
) -> Action {
    let mut notes = Vec::new();
    let request = build(&mut notes).unwrap_or_else(|| {
        Err(EngineError::Internal {
            message: format!("`{name}` does not go through the engine"),
        })
    });
    Action::Engine {
        request,
        init,
        notes,
    }
}

/// Parses the process's arguments as `binary` and runs the command.
fn run_binary(binary: Binary) -> u8 {
    let raw: Vec<OsString> = std::env::args_os().collect();
    if let Some(error) = environment_problem() {
        let json = raw.iter().any(|a| a == "--json");
        let response = Response::failure(subcommand_in(binary, &raw), error);
        return finish(&response, json, None, &[]);
    }
    match binary.parse(&raw) {
        Ok(invocation) => run(invocation),
        Err(error) => usage_error(binary, &raw, &error),
    }
}

/// What clap stopped at: help and version go to stdout with exit 0 (with
/// `--json`, as one JSON object: `{"ok": true, "command": ..., "help": ...}`
/// and the engine's `version` response); everything else is a usage error:
/// exit 30, and with `--json` still one JSON object.
fn usage_error(binary: Binary, raw: &[OsString], error: &clap::Error) -> u8 {
    let json = raw.iter().any(|a| a == "--json");
    // Finding the subcommand builds clap's whole command tree (about 1 MB
    // of allocations): only the JSON answers, which name it, pay for it, so
    // `--version` and plain `--help` cost what starting the binary costs.
    let command = || subcommand_in(binary, raw);
    let text = error.render().to_string();
    let (out, err, exit) = match (error.kind(), json) {
        (ErrorKind::DisplayHelp, false) | (ErrorKind::DisplayVersion, false) => {
            (text, String::new(), 0)
        }
        (ErrorKind::DisplayHelp, true) => {
            let fields = serde_json::json!({ "help": text });
            (
                output::success_json(command().as_deref(), fields),
                String::new(),
                0,
            )
        }
        (ErrorKind::DisplayVersion, true) => {
            (format!("{}\n", version().to_json()), String::new(), 0)
        }
        (_, true) => {
            let first = text.lines().next().unwrap_or("invalid arguments");
            let message = first.strip_prefix("error: ").unwrap_or(first);
            let bin = binary.name();
            let hint = match subcommand_words(binary, raw) {
                Some(words) => format!("; see `{bin} {words} --help`"),
                None => format!("; see `{bin} --help`"),
            };
            let response = Response::failure(
                command(),
                EngineError::InvalidRequest {
                    message: format!("{message}{hint}"),
                },
            );
            (format!("{}\n", response.to_json()), String::new(), 30)
        }
        // A usage error echoes what was typed, which may hold anything.
        (_, false) => (String::new(), terminal::safe(&text).into_owned(), 30),
    };
    output::deliver(&out, &err, exit, output::Effect::Read, || {
        "it was a usage error".to_owned()
    })
}

/// An environment variable the command line reads as text that is not
/// text: said by name, rather than as clap's anonymous "invalid UTF-8 in
/// one or more arguments".
fn environment_problem() -> Option<EngineError> {
    let agent = std::env::var_os("INBOX_AGENT")?;
    agent.to_str().is_none().then(|| EngineError::InvalidValue {
        field: "INBOX_AGENT".into(),
        problem: format!(
            "is not valid UTF-8 ({}); set it to the agent's name, e.g. export INBOX_AGENT=backend-worker",
            agent.to_string_lossy()
        ),
    })
}

/// The command the raw arguments name, if any, as the JSON contract
/// spells it.
fn subcommand_in(binary: Binary, raw: &[OsString]) -> Option<String> {
    let words = subcommand_path(binary, raw);
    (!words.is_empty()).then(|| binary.joined(&words))
}

/// The subcommand words the raw arguments name, as typed (`run create`).
fn subcommand_words(binary: Binary, raw: &[OsString]) -> Option<String> {
    let words = subcommand_path(binary, raw);
    (!words.is_empty()).then(|| words.join(" "))
}

/// The subcommands named in the raw arguments, outermost first. Only
/// errors and help ask, so it builds the whole tree (subcommands are
/// otherwise built only when they are the one parsed).
fn subcommand_path(binary: Binary, raw: &[OsString]) -> Vec<String> {
    let mut at = binary.command();
    at.build();
    let mut path = Vec::new();
    for arg in raw.iter().skip(1).filter_map(|a| a.to_str()) {
        if let Some(sub) = at.find_subcommand(arg) {
            path.push(arg.to_owned());
            at = sub.clone();
        }
    }
    path
}

/// The engine's `version` response (`inbox --version --json`).
fn version() -> Response {
    Response::Success(inbox_engine::Output::Version(
        inbox_engine::engine::version(),
    ))
}

/// Runs a parsed command.
fn run(invocation: Invocation) -> u8 {
    let Invocation {
        mut global,
        name,
        action,
        hand_over,
    } = invocation;
    if let Err(error) = global.resolve_agent_token() {
        let response = Response::failure(Some(name), error);
        return finish(&response, global.json, None, &[]);
    }
    // A bridge runs for hours in this process, its command line shown by
    // `ps` to every local user all that time (`mcp` and `serve` are
    // handed over without the token: see `launch`).
    if name.starts_with("bridge")
        && std::env::args_os().any(|word| hosted::on_command_line(&word, "--agent-token"))
    {
        hosted::log(&format!(
            "warning: --agent-token puts the token in this process's command line, which every local user can read with `ps` while it runs; give it with --agent-token-file or $INBOX_AGENT_TOKEN instead (`inbox {name}`)"
        ));
    }
    let (request, init_durability, mut notes) = match action {
        Action::Tool(tool) => return tool(&global),
        Action::Engine {
            request,
            init,
            notes,
        } => (request, init, notes),
    };
    let json = global.json;
    let fail = |error: EngineError| Response::failure(Some(name.clone()), error);

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
    notes.extend(inbox_host_native::HostClock::ignored_override());
    let request = match request {
        Ok(request) => request,
        Err(error) => return finish(&fail(error), json, None, &notes),
    };
    let (db, cwd) = inbox_host_native::database::Database::resolve(&global);
    notes.extend(db.notes().iter().cloned());
    let new_thread = matches!(&request, Request::Send(r) if r.thread_id.is_none());
    let on = Target {
        db: &db,
        engine: global.engine.as_deref(),
        init: init_durability,
        exits_after: true,
    };
    let call = Call {
        request,
        idempotency_key: global.idempotency_key.clone(),
        agent_token: global.agent_token.clone(),
    };
    let handed = if hand_over {
        daemon::hand_over(on, &call, &clock)
    } else {
        daemon::Handed::NotRun
    };
    let mut database = db.line(&cwd);
    let executed = match handed {
        daemon::Handed::Ran(answered) if json => {
            let ran = &answered.ran;
            return finish_json(&answered.json, ran.exit, ran.changed, &notes);
        }
        daemon::Handed::Ran(answered) => match answered.executed() {
            Ok(executed) => {
                database.push_str(", through inbox daemon");
                executed
            }
            Err(error) => return finish(&fail(error), json, None, &notes),
        },
        daemon::Handed::Failed(error) => return finish(&fail(error), json, None, &notes),
        daemon::Handed::NotRun => match execute_on(on, call, clock, None) {
            Ok(Some(executed)) => executed,
            // Only a stop ends a wait without an answer, and a command has none.
            Ok(None) => return finish(&fail(stopped()), json, None, &notes),
            Err(error) => return finish(&fail(error), json, None, &notes),
        },
    };
    let context = render::Context {
        now: executed.now,
        agent: global.agent,
        new_thread,
        durability: Some(executed.durability),
        database: Some(database),
    };
    finish(&executed.response, json, Some(&context), &notes)
}

/// The notes a command leaves for people on stderr, one `note:` line each,
/// made safe for a terminal because they may quote agents' text.
pub(crate) fn note_lines(notes: &[String]) -> String {
    notes
        .iter()
        .map(|note| format!("note: {}\n", terminal::safe(note)))
        .collect()
}

/// Delivers a command's response: the JSON contract, or text for people.
pub(crate) fn finish(
    response: &Response,
    json: bool,
    context: Option<&render::Context>,
    notes: &[String],
) -> u8 {
    if json {
        return finish_json(
            &response.to_json(),
            response.exit_code(),
            changed(response),
            notes,
        );
    }
    let fallback = render::Context {
        now: inbox_engine::Timestamp::from_millis(0),
        agent: None,
        new_thread: false,
        durability: None,
        database: None,
    };
    let (out, err) = render::human(response, context.unwrap_or(&fallback));
    deliver(
        &out,
        &err,
        response.exit_code(),
        changed(response),
        notes,
        || response.to_json(),
    )
}

/// Delivers a response already in the JSON contract (`line`, one line),
/// with its exit code and whether it changed the store.
fn finish_json(line: &str, exit: u8, changed: bool, notes: &[String]) -> u8 {
    deliver(&format!("{line}\n"), "", exit, changed, notes, || {
        line.to_owned()
    })
}

/// Writes a command's output and its notes, and says on stderr what
/// happened to a change whose result could not be written.
fn deliver(
    out: &str,
    err: &str,
    exit: u8,
    changed: bool,
    notes: &[String],
    json: impl FnOnce() -> String,
) -> u8 {
    let effect = if changed {
        output::Effect::Changed
    } else {
        output::Effect::Read
    };
    // The contract puts `ok` first in every response.
    let lost = || {
        let json = json();
        if json.starts_with("{\"ok\":true") {
            format!("the command took effect; its result was: {json}")
        } else {
            format!("the command failed: {json}")
        }
    };
    output::deliver(
        out,
        &format!("{}{err}", note_lines(notes)),
        exit,
        effect,
        lost,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parse made of a line, to compare: the parsed arguments, or
    /// the text clap answers with.
    fn reading(binary: Binary, matches: Result<clap::ArgMatches, clap::Error>) -> String {
        let parsed = matches.and_then(|m| match binary {
            Binary::Inbox => Cli::from_arg_matches(&m).map(|cli| format!("{cli:?}")),
            Binary::Orch => OrchCli::from_arg_matches(&m).map(|cli| format!("{cli:?}")),
        });
        parsed.unwrap_or_else(|error| format!("error: {}", error.render()))
    }

    fn line(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    /// Every subcommand path of `command`, nested ones included.
    fn paths(command: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        for sub in command.get_subcommands() {
            let mut path = prefix.to_vec();
            path.push(sub.get_name().to_owned());
            out.push(path.clone());
            paths(sub, &path, out);
        }
    }

    #[test]
    fn a_line_naming_a_subcommand_reads_as_the_whole_tree_reads_it() {
        for binary in [Binary::Inbox, Binary::Orch] {
            let mut all = Vec::new();
            let mut whole = binary.command();
            // Builds the deferred subcommands, so that nested ones are listed.
            whole.build();
            paths(&whole, &[], &mut all);
            assert!(all.len() > 15, "{} has its subcommands", binary.name());
            for path in all {
                let path: Vec<&str> = path.iter().map(String::as_str).collect();
                let bin = [binary.name()];
                // Global flags before the subcommand, some of whose values
                // look like a subcommand or a flag.
                let before: [&[&str]; 5] = [
                    &[],
                    &["--json", "--db", "x.db"],
                    &["--agent=a1", "--idempotency-key", "send"],
                    &["--agent", "--json"],
                    &["--", "--json"],
                ];
                let after: [&[&str]; 4] =
                    [&[], &["--json", "--agent", "a1"], &["--help"], &["--nope"]];
                for (first, extra) in before
                    .iter()
                    .flat_map(|b| after.iter().map(move |a| (b, a)))
                {
                    let words = [&bin[..], first, &path, extra].concat();
                    let raw = line(&words);
                    let whole = reading(binary, binary.command().try_get_matches_from(&raw));
                    assert_eq!(reading(binary, binary.matches(&raw)), whole, "{words:?}");
                }
            }
        }
    }

    #[test]
    fn the_commands_agents_run_most_are_read_by_the_one_subcommand_tree() {
        let lines = [
            (
                Binary::Inbox,
                "inbox send --from lead --to role:dev --subject -x --body b --priority high \
                 --json --db x.db",
            ),
            (Binary::Inbox, "inbox claim --agent w --next --json"),
            (
                Binary::Inbox,
                "inbox --db x.db --json claim --agent w --next",
            ),
            (Binary::Inbox, "inbox --agent=w --json fetch --unread"),
            (Binary::Inbox, "inbox fetch --agent=w --limit 5 --unread"),
            (
                Binary::Inbox,
                "inbox done --agent w --thread thr_1 --lease-token 7 --summary ok \
                 --idempotency-key k",
            ),
            (Binary::Inbox, "inbox agent register --agent w --json"),
            (Binary::Orch, "orch run create --agent lead --json"),
            (Binary::Orch, "orch wait --agent lead --timeout-seconds 5"),
            (Binary::Orch, "orch --db x.db --agent lead status"),
        ];
        for (binary, text) in lines {
            let words: Vec<&str> = text.split_whitespace().collect();
            let raw = line(&words);
            let only = binary
                .command_naming(&binary.command(), &raw)
                .expect("the line names a subcommand")
                .try_get_matches_from_mut(&raw);
            assert!(only.is_ok(), "{words:?}: {:?}", only.err());
            let whole = reading(binary, binary.command().try_get_matches_from(&raw));
            assert!(!whole.starts_with("error"), "{words:?}: {whole}");
            assert_eq!(reading(binary, only), whole, "{words:?}");
        }
    }

    #[test]
    fn a_line_that_names_no_subcommand_for_sure_uses_the_whole_tree() {
        for words in [
            &["inbox"][..],
            &["inbox", "--json"],
            &["inbox", "help"],
            &["inbox", "sned"],
            &["inbox", "--nope", "send"],
            &["inbox", "-h", "send"],
            &["inbox", "--", "send"],
            &["inbox", "--agent", "send"],
        ] {
            assert!(
                Binary::Inbox
                    .command_naming(&Binary::Inbox.command(), &line(words))
                    .is_none(),
                "{words:?}"
            );
        }
    }
}
