//! `inbox-conformance`: the one command that runs the transition-script
//! corpus (`tests/corpus/*.inbox`) on every host inbox has — the engine over
//! memory, over a SQLite file and over PostgreSQL (a throwaway cluster), the
//! engine component in wasmtime over memory and SQLite, the wasm package in
//! Node over both — and fails when any transcript differs by a byte from
//! the golden one (`tests/corpus/snapshots`) or from the first host's, with
//! a diff naming the host, the script and the step. `scripts/conformance`
//! builds what it needs and runs it with every host required.
//!
//! It lives beside the plugin crates because it loads the component (and so
//! links wasmtime). It must never hold a rule of the engine, and never write
//! a golden transcript: those change only through `cargo insta review` in
//! `tests/`.

// A command-line report is this program's output.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod compare;
mod hosts;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use inbox_conformance::CorpusScript;

use crate::hosts::{Host, Outcome, Setup, Unavailable};

/// Runs the transition-script corpus on every inbox host and compares the
/// transcripts byte for byte.
///
/// Exit status: 0 when every host that ran gave the golden transcripts; 1
/// when any differed, failed, or (with --require-all) could not run; 2 on a
/// usage or setup error.
#[derive(Parser)]
#[command(name = "inbox-conformance", version)]
struct Args {
    /// Run only this host (repeatable); all of them by default
    #[arg(long = "host", value_name = "HOST", value_enum)]
    hosts: Vec<Host>,

    /// Run only this script, by file stem, e.g. claim_race (repeatable)
    #[arg(long = "script", value_name = "NAME")]
    scripts: Vec<String>,

    /// Fail when a host cannot run here (no Node, no wasm package, no
    /// PostgreSQL) instead of skipping it
    #[arg(long)]
    require_all: bool,

    /// The engine component to test, instead of building
    /// plugins/engine-component from source
    #[arg(long, value_name = "PATH.wasm")]
    engine: Option<PathBuf>,

    /// The built wasm package for the Node hosts (scripts/build-wasm)
    #[arg(long, value_name = "DIR")]
    wasm_package: Option<PathBuf>,

    /// The golden transcripts, one insta snapshot per script
    #[arg(long, value_name = "DIR")]
    golden: Option<PathBuf>,
}

/// The verdict on one host.
enum Verdict {
    Ran { differing: Vec<String> },
    Skipped,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the chosen hosts; `Ok(false)` when any failed.
fn run(args: &Args) -> anyhow::Result<bool> {
    let scripts = chosen_scripts(&args.scripts)?;
    let golden_dir = args
        .golden
        .clone()
        .unwrap_or_else(|| inbox_conformance::corpus_dir().join("snapshots"));
    let golden = scripts
        .iter()
        .map(|s| compare::golden_text(&golden_dir.join(format!("{}.snap", s.name))))
        .collect::<anyhow::Result<Vec<String>>>()?;
    let hosts = if args.hosts.is_empty() {
        Host::ALL.to_vec()
    } else {
        args.hosts.clone()
    };
    let wasm_package = args
        .wasm_package
        .clone()
        .unwrap_or_else(|| inbox_plugin_build::workspace_root().join("host-wasm/pkg"));
    let mut setup = Setup::new(args.engine.clone(), wasm_package)?;

    println!(
        "{} scripts from {}, golden transcripts in {}\n",
        scripts.len(),
        inbox_conformance::corpus_dir().display(),
        golden_dir.display()
    );
    // The first host to run a script is the reference the others must equal
    // byte for byte (the golden file format forgives trailing newlines).
    let mut reference: Vec<Option<(Host, String)>> = vec![None; scripts.len()];
    let mut verdicts = Vec::new();
    let mut report = String::new();
    for host in hosts {
        let verdict = match setup.run(host, &scripts) {
            Ok(outcomes) => {
                let differing = judge(
                    host,
                    &scripts,
                    &golden,
                    &outcomes,
                    &mut reference,
                    &mut report,
                );
                let same = scripts.len() - differing.len();
                let mut line = format!("{:<18} {same}/{} identical", host.name(), scripts.len());
                if !differing.is_empty() {
                    line.push_str(&format!("; different: {}", differing.join(", ")));
                }
                println!("{line}");
                Verdict::Ran { differing }
            }
            Err(Unavailable(reason)) => {
                println!("{:<18} skipped: {reason}", host.name());
                Verdict::Skipped
            }
        };
        verdicts.push((host, verdict));
    }
    if !report.is_empty() {
        println!("\n{}", report.trim_end());
    }
    Ok(summarize(&verdicts, scripts.len(), args.require_all))
}

/// The scripts named on the command line, or the whole corpus.
fn chosen_scripts(names: &[String]) -> anyhow::Result<Vec<CorpusScript>> {
    let corpus = inbox_conformance::corpus();
    if corpus.is_empty() {
        anyhow::bail!(
            "no scripts in {}",
            inbox_conformance::corpus_dir().display()
        );
    }
    if names.is_empty() {
        return Ok(corpus);
    }
    names
        .iter()
        .map(|name| {
            corpus
                .iter()
                .find(|s| &s.name == name)
                .cloned()
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no script {name}.inbox in {}",
                        inbox_conformance::corpus_dir().display()
                    )
                })
        })
        .collect()
}

/// Compares one host's outcomes with the golden transcripts and with the
/// reference host's; appends a diff to `report` for each difference and
/// returns the names of the scripts that differed.
fn judge(
    host: Host,
    scripts: &[CorpusScript],
    golden: &[String],
    outcomes: &[Outcome],
    reference: &mut [Option<(Host, String)>],
    report: &mut String,
) -> Vec<String> {
    let mut differing = Vec::new();
    for (((script, golden), outcome), reference) in scripts
        .iter()
        .zip(golden)
        .zip(outcomes)
        .zip(reference.iter_mut())
    {
        let name = script.name.as_str();
        let problem = match outcome {
            Err(error) => Some(format!(
                "--- {}: {name}.inbox did not run: {error}\n",
                host.name()
            )),
            Ok(transcript) if !transcript.failures.is_empty() => Some(format!(
                "--- {}: {name}.inbox: expectations in the script failed:\n{}\n",
                host.name(),
                transcript.failures.join("\n")
            )),
            Ok(transcript) if !compare::same_as_golden(&transcript.text, golden) => {
                Some(compare::describe_difference(
                    host.name(),
                    name,
                    "the golden transcript",
                    golden,
                    &transcript.text,
                ))
            }
            Ok(transcript) => match reference {
                Some((first, text)) if *text != transcript.text => {
                    Some(compare::describe_difference(
                        host.name(),
                        name,
                        first.name(),
                        text,
                        &transcript.text,
                    ))
                }
                Some(_) => None,
                None => {
                    *reference = Some((host, transcript.text.clone()));
                    None
                }
            },
        };
        if let Some(problem) = problem {
            report.push_str(&problem);
            report.push('\n');
            differing.push(name.to_owned());
        }
    }
    differing
}

/// Prints the last line and says whether the run passed.
fn summarize(verdicts: &[(Host, Verdict)], scripts: usize, require_all: bool) -> bool {
    let ran: Vec<&(Host, Verdict)> = verdicts
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Ran { .. }))
        .collect();
    let skipped: Vec<&str> = verdicts
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Skipped))
        .map(|(host, _)| host.name())
        .collect();
    let failed: Vec<String> = verdicts
        .iter()
        .filter_map(|(host, verdict)| match verdict {
            Verdict::Ran { differing } if !differing.is_empty() => {
                Some(format!("{} ({})", host.name(), differing.join(", ")))
            }
            _ => None,
        })
        .collect();
    let skipped_note = if skipped.is_empty() {
        String::new()
    } else {
        format!("; skipped: {}", skipped.join(", "))
    };
    if !failed.is_empty() {
        println!(
            "\nFAILED: transcripts differ on {}{skipped_note}",
            failed.join("; ")
        );
        return false;
    }
    if require_all && !skipped.is_empty() {
        println!(
            "\nFAILED: --require-all, and these hosts could not run: {}",
            skipped.join(", ")
        );
        return false;
    }
    if ran.is_empty() {
        println!("\nFAILED: no host could run");
        return false;
    }
    println!(
        "\nok: {} transcripts on {} hosts, byte-identical to the golden ones and to each other{skipped_note}",
        scripts * ran.len(),
        ran.len()
    );
    true
}
