//! Fuzzing the command line: random argument vectors built from the real
//! vocabulary of `inbox` (every subcommand, flag, alias and allowed value,
//! read off the clap definition itself) mixed with garbage (random text,
//! unicode, invalid UTF-8, `--`, `=` forms, huge and negative numbers,
//! repeated and misplaced flags).
//!
//! - In process, `inbox_cli::args::Cli::try_parse_from` never panics, and
//!   every refusal is an ordinary clap error that renders.
//! - End to end, on a sample, the real binary with `--json` never panics
//!   (exit 101) or hangs, exits with a code of the contract, and prints
//!   exactly one JSON object (help, version, `skill` and `script` print
//!   text by design and are only checked for exit codes).
//!
//! `PROPTEST_CASES` (or `INBOX_FAULT_LONG=1`) runs longer.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use inbox_cli::args::Cli;
use inbox_fault::process::Inbox;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

/// One flag of the vocabulary.
#[derive(Clone, Debug)]
struct Flag {
    /// `--name` and its aliases.
    spellings: Vec<String>,
    /// Whether it takes a value.
    takes_value: bool,
    /// Its allowed values, if it has a fixed set.
    values: Vec<String>,
}

/// Every subcommand with its flags (global flags included).
fn vocabulary() -> &'static Vec<(String, Vec<Flag>)> {
    static VOCABULARY: OnceLock<Vec<(String, Vec<Flag>)>> = OnceLock::new();
    VOCABULARY.get_or_init(|| {
        // Subcommands are deferred: build the whole tree to see them all.
        let mut root = Cli::command();
        root.build();
        let flags_of = |command: &clap::Command| -> Vec<Flag> {
            command
                .get_arguments()
                .filter_map(|arg| {
                    let long = arg.get_long()?;
                    let mut spellings = vec![format!("--{long}")];
                    if let Some(aliases) = arg.get_all_aliases() {
                        spellings.extend(aliases.iter().map(|a| format!("--{a}")));
                    }
                    if let Some(short) = arg.get_short() {
                        spellings.push(format!("-{short}"));
                    }
                    Some(Flag {
                        spellings,
                        takes_value: arg.get_action().takes_values(),
                        values: arg
                            .get_possible_values()
                            .iter()
                            .map(|v| v.get_name().to_owned())
                            .collect(),
                    })
                })
                .collect()
        };
        let global = flags_of(&root);
        root.get_subcommands()
            .map(|sub| {
                let mut flags = flags_of(sub);
                flags.extend(global.iter().cloned());
                (sub.get_name().to_owned(), flags)
            })
            .collect()
    })
}

fn garbage() -> impl Strategy<Value = OsString> {
    prop_oneof![
        prop::sample::select(vec![
            "",
            " ",
            "-",
            "--",
            "---",
            "-x",
            "--x",
            "--=",
            "=",
            "--json=true",
            "--db=",
            "--limit=",
            "0",
            "-0",
            "-1",
            "+5",
            " 5",
            "5 ",
            "1e3",
            "0x10",
            "1_000",
            "00042",
            "NaN",
            "inf",
            "4294967295",
            "4294967296",
            "9223372036854775807",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775809",
            "99999999999999999999999999999999",
            "thr_000001",
            "thr_01JH5Q8Z3K4M2N6P7R8S9T0V1W",
            "lead",
            "worker",
            "inbox",
            "pending,blocked",
            "pending,,blocked",
            ",",
            "blocked,sleeping",
            "{}",
            "{\"a\":1}",
            "[1]",
            "{oops",
            "null",
            "two\nlines",
            "tab\t",
            "ü",
            "🚀",
            "\u{202e}",
            "-h",
            "--help",
            "-V",
            "--version",
            "help",
        ])
        .prop_map(OsString::from),
        "\\PC{0,12}".prop_map(OsString::from),
        "[a-z_-]{1,10}".prop_map(|s| OsString::from(format!("--{s}"))),
        // Not UTF-8 at all.
        prop::collection::vec(any::<u8>(), 1..6).prop_map(|mut bytes| {
            bytes.push(0xff);
            OsString::from_vec(bytes)
        }),
    ]
}

/// A token: usually a real flag (of this subcommand or another) with a
/// real, borderline or garbage value; sometimes garbage.
fn token(flags: Vec<Flag>, others: Vec<Flag>) -> impl Strategy<Value = Vec<OsString>> {
    let own = prop::sample::select(flags);
    let foreign = prop::sample::select(others);
    let flag = prop_oneof![6 => own, 1 => foreign];
    prop_oneof![
        8 => (flag, any::<prop::sample::Index>(), 0u8..6, garbage(), any::<prop::sample::Index>()).prop_map(
            |(flag, spelling, how, junk, value)| {
                let name = spelling.get(&flag.spellings).clone();
                let value = match how {
                    0 | 1 if !flag.values.is_empty() => OsString::from(value.get(&flag.values)),
                    0 | 1 => OsString::from(["1", "60", "lead", "w1", "thr_000001", "x"][value.index(6)]),
                    2 => junk,
                    _ => OsString::from(["0", "1000", "1001", "86401", "-5", "18446744073709551616"][value.index(6)]),
                };
                match (flag.takes_value, how) {
                    (true, 5) => {
                        let mut joined = OsString::from(format!("{name}="));
                        joined.push(value);
                        vec![joined]
                    }
                    (true, 4) => vec![OsString::from(name)],
                    (true, _) => vec![OsString::from(name), value],
                    (false, 3) => vec![OsString::from(format!("{name}=yes"))],
                    (false, _) => vec![OsString::from(name)],
                }
            }
        ),
        2 => garbage().prop_map(|g| vec![g]),
    ]
}

/// `inbox SUBCOMMAND TOKENS...` (or, now and then, a garbage subcommand).
fn argv() -> impl Strategy<Value = Vec<OsString>> {
    let vocabulary = vocabulary().clone();
    let all: Vec<Flag> = vocabulary
        .iter()
        .flat_map(|(_, f)| f.iter().cloned())
        .collect();
    prop::sample::select(vocabulary)
        .prop_flat_map(move |(name, flags)| {
            let sub = prop_oneof![
                10 => Just(OsString::from(name)),
                1 => garbage(),
            ];
            (sub, prop::collection::vec(token(flags, all.clone()), 0..8))
        })
        .prop_map(|(sub, tokens)| {
            let mut argv = vec![OsString::from("inbox"), sub];
            argv.extend(tokens.into_iter().flatten());
            argv
        })
}

/// The errors clap may answer with; anything else (an internal error, an
/// I/O or formatting failure) is a bug.
const USAGE_ERRORS: &[ErrorKind] = &[
    ErrorKind::InvalidValue,
    ErrorKind::UnknownArgument,
    ErrorKind::InvalidSubcommand,
    ErrorKind::NoEquals,
    ErrorKind::ValueValidation,
    ErrorKind::TooManyValues,
    ErrorKind::TooFewValues,
    ErrorKind::WrongNumberOfValues,
    ErrorKind::ArgumentConflict,
    ErrorKind::MissingRequiredArgument,
    ErrorKind::MissingSubcommand,
    ErrorKind::InvalidUtf8,
    ErrorKind::DisplayHelp,
    ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand,
    ErrorKind::DisplayVersion,
];

fn config(cases: u32, file: &'static str) -> Config {
    Config {
        cases: common::cases(cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(file))),
        ..Config::default()
    }
}

/// A folder holding an initialized database, shared by the end-to-end cases.
fn project() -> &'static std::path::Path {
    static PROJECT: OnceLock<tempfile::TempDir> = OnceLock::new();
    PROJECT
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let inbox = common::inbox();
            let status = std::process::Command::new(inbox.bin())
                .args(["init"])
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
            std::fs::write(dir.path().join("body.md"), "a body\n").unwrap();
            dir
        })
        .path()
}

fn run_binary(inbox: &Inbox, argv: &[OsString]) -> Result<(), TestCaseError> {
    // No `/` reaches the binary, so that nothing it writes (`init --db`,
    // `skill --install`) can land outside the scratch folder; no NUL either,
    // since no process can be given one in an argument.
    let mut args: Vec<OsString> = argv
        .iter()
        .skip(1)
        .map(|a| {
            let bytes: Vec<u8> = a
                .as_bytes()
                .iter()
                .map(|&b| if b == b'/' || b == 0 { b'_' } else { b })
                .collect();
            OsString::from_vec(bytes)
        })
        .collect();
    let sub = args
        .first()
        .and_then(|a| a.to_str())
        .unwrap_or("")
        .to_owned();
    // Waits must not wait: give them a zero timeout (a repeated flag is
    // then a usage error, which is fine).
    let waits = inbox_engine::Command::parse(&sub)
        .is_some_and(|c| c.effect() == inbox_engine::Effect::Wait);
    if waits {
        args.extend(["--timeout-seconds".into(), "0".into()]);
    }
    args.push("--json".into());
    let mut command = std::process::Command::new(inbox.bin());
    command
        .args(&args)
        .current_dir(project())
        .env_remove("INBOX_DB")
        .env_remove("INBOX_AGENT")
        .env_remove("INBOX_NOW")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    // A server (`serve`, `daemon`) runs until it is stopped: one still
    // running after a few seconds is stopped, and its first line (where it
    // listens) is checked as any command's answer. Anything else must end
    // by itself.
    let server = matches!(sub.as_str(), "serve" | "daemon");
    let limit = Duration::from_secs(if server { 3 } else { 20 });
    let deadline = std::time::Instant::now() + limit;
    let mut stopped = false;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            if !server {
                return Err(TestCaseError::fail(format!("inbox {args:?} hung")));
            }
            stopped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // A server stopped while serving answered as a success would.
    let code = if stopped {
        Some(0)
    } else {
        output.status.code()
    };
    let shown = format!("inbox {args:?}\nexit {code:?}\nstdout: {stdout}\nstderr: {stderr}");
    prop_assert!(!stderr.contains("panicked"), "{}", shown);
    prop_assert!(
        matches!(code, Some(0 | 10 | 20 | 30 | 40 | 50)),
        "{}",
        shown
    );
    let text_by_design = matches!(sub.as_str(), "skill" | "script")
        || args
            .iter()
            .any(|a| ["-h", "--help", "-V", "--version"].iter().any(|h| a == *h));
    if !text_by_design {
        let line = stdout.strip_suffix('\n').unwrap_or(&stdout);
        prop_assert!(!line.contains('\n'), "more than one line: {}", shown);
        let json: serde_json::Value =
            serde_json::from_str(line).map_err(|e| TestCaseError::fail(format!("{e}: {shown}")))?;
        let ok = json["ok"].as_bool();
        prop_assert_eq!(ok, Some(matches!(code, Some(0 | 10))), "{}", shown);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(4000, "tests/fuzz_cli_args.proptest-regressions"))]

    #[test]
    fn the_argument_parser_never_panics_and_refuses_with_ordinary_usage_errors(argv in argv()) {
        match Cli::try_parse_from(&argv) {
            Ok(cli) => {
                let _ = format!("{cli:?}");
            }
            Err(error) => {
                prop_assert!(USAGE_ERRORS.contains(&error.kind()), "{:?}: {}", error.kind(), error);
                prop_assert!(!error.render().to_string().is_empty());
            }
        }
    }
}

proptest! {
    #![proptest_config(config(300, "tests/fuzz_cli_args.proptest-regressions"))]

    #[test]
    fn the_binary_answers_random_argument_vectors_with_one_json_object_and_a_contract_exit_code(argv in argv()) {
        run_binary(&common::inbox(), &argv)?;
    }
}

#[test]
fn the_clap_definition_passes_clap_own_consistency_checks() {
    Cli::command().debug_assert();
}

#[test]
fn the_vocabulary_holds_every_command_and_its_flags() {
    let vocabulary = vocabulary();
    let claim = &vocabulary.iter().find(|(n, _)| n == "claim").unwrap().1;
    assert!(
        claim
            .iter()
            .any(|f| f.spellings.contains(&"--lease-seconds".to_owned()))
    );
    assert!(
        claim
            .iter()
            .any(|f| f.spellings.contains(&"--thread-id".to_owned()))
    );
    let send = &vocabulary.iter().find(|(n, _)| n == "send").unwrap().1;
    let priority = send
        .iter()
        .find(|f| f.spellings[0] == "--priority")
        .unwrap();
    assert_eq!(priority.values, ["low", "normal", "high"]);
    assert!(vocabulary.len() >= 16, "{}", vocabulary.len());
}
