//! The command line's own tools, which need no database: `inbox skill` and
//! `orch skill` (print or install the SKILL.md that teaches agents the CLI)
//! and `inbox script` (run a transition script in memory). What the command
//! line generates from its own definition (completions, man pages) is in
//! `generated`.
//!
//! Both report in the JSON contract with `--json`. Installing the skill
//! writes into a folder the user names, which may hold things the user did
//! not create: it never follows a symbolic link there.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use inbox_engine::{EngineError, Response};

use crate::{output, request};
use inbox_host_native::terminal;

/// A SKILL.md a binary prints and installs.
pub(crate) struct Skill {
    /// The command it teaches (`inbox`, `orch`): its folder, and the
    /// `command` of its JSON answer (`skill`, `orch-skill`).
    folder: &'static str,
    command: &'static str,
    text: &'static str,
}

/// The worker's skill: the inbox commands.
pub(crate) const INBOX_SKILL: Skill = Skill {
    folder: "inbox",
    command: "skill",
    text: include_str!("../SKILL.md"),
};

/// The leader's skill: the orch commands.
pub(crate) const ORCH_SKILL: Skill = Skill {
    folder: "orch",
    command: "orch-skill",
    text: include_str!("../ORCH-SKILL.md"),
};

/// The reviewers' skill: how to answer a council review.
pub(crate) const COUNCIL_SKILL: Skill = Skill {
    folder: "council-review",
    command: "orch-skill",
    text: include_str!("../COUNCIL-REVIEW-SKILL.md"),
};

/// The largest transition script `inbox script` reads (4 MiB): far above any
/// protocol worth pinning down, and a stop for `inbox script /dev/zero`.
const SCRIPT_MAX_BYTES: usize = 4 << 20;

/// `inbox skill` / `orch skill`: print the SKILL.md, or install it as
/// DIR/<folder>/SKILL.md.
pub(crate) fn skill(skill: &Skill, install: Option<&Path>, json: bool) -> u8 {
    let Some(dir) = install else {
        let out = if json {
            output::success_json(
                Some(skill.command),
                serde_json::json!({ "skill": skill.text }),
            )
        } else {
            skill.text.to_owned()
        };
        return output::deliver(&out, "", 0, output::Effect::Read, || {
            "SKILL.md was not printed".to_owned()
        });
    };
    match install_skill(skill, dir) {
        Ok(target) => {
            let shown = target.display().to_string();
            let out = if json {
                output::success_json(
                    Some(skill.command),
                    serde_json::json!({ "installed": shown }),
                )
            } else {
                format!("Installed {shown}\n")
            };
            output::deliver(&out, "", 0, output::Effect::Changed, || {
                format!("SKILL.md was installed as {shown}")
            })
        }
        Err(problem) => fail(
            skill.command,
            EngineError::InvalidValue {
                field: "install".into(),
                problem,
            },
            json,
        ),
    }
}

/// Writes SKILL.md into `dir/<folder>/`, creating that folder if needed. The
/// file is written beside its final name and renamed over it, so a
/// symbolic link planted at `SKILL.md` is replaced, never followed; a
/// folder that is itself a link is refused.
fn install_skill(skill: &Skill, dir: &Path) -> Result<PathBuf, String> {
    let named = dir.join(skill.folder);
    let folder = std::path::absolute(&named).unwrap_or(named);
    let shown = folder.display();
    match std::fs::symlink_metadata(&folder) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(format!(
                "{shown} is a symbolic link; remove it, or install into a folder of your own"
            ));
        }
        Ok(meta) if !meta.is_dir() => return Err(format!("{shown} exists and is not a folder")),
        Ok(_) => {}
        Err(_) => {
            std::fs::create_dir_all(&folder).map_err(|e| format!("cannot create {shown}: {e}"))?
        }
    }
    let target = folder.join("SKILL.md");
    replace_file(&folder, "SKILL.md", skill.text.as_bytes())?;
    Ok(target)
}

/// Writes `bytes` as `folder/name`: under a temporary name beside it,
/// synced, then renamed over it, so that a symbolic link planted at the
/// name is replaced, never followed, and no reader ever sees half a file.
/// The folder is the caller's to check.
pub(crate) fn replace_file(folder: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let target = folder.join(name);
    let temporary = folder.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
        .and_then(|()| std::fs::rename(&temporary, &target));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(format!("cannot write {}: {e}", target.display()));
    }
    Ok(())
}

/// `inbox script FILE`: run a transition script in memory and print its
/// transcript. Exit 0 when every expectation held, 1 when one did not, 30
/// when the script cannot be read or parsed. With `--json`:
/// `{"ok": true, "command": "script", "transcript": ..., "failures": [...]}`,
/// or the usual error object.
pub(crate) fn script(file: &Path, json: bool) -> u8 {
    let text = match request::read_text("file", "file", file, SCRIPT_MAX_BYTES) {
        Ok(text) => text,
        Err(error) => return fail("script", error, json),
    };
    let transcript = match inbox_engine::run_script(&text, inbox_engine::MemoryStore::new()) {
        Ok(transcript) => transcript,
        Err(e) => {
            let problem = format!("{} does not parse: {e}", file.display());
            let error = EngineError::InvalidValue {
                field: "file".into(),
                problem,
            };
            return fail("script", error, json);
        }
    };
    let exit = if transcript.failures.is_empty() { 0 } else { 1 };
    let (out, err) = if json {
        let fields = serde_json::json!({
            "transcript": transcript.text,
            "failures": transcript.failures,
        });
        (output::success_json(Some("script"), fields), String::new())
    } else {
        let failures = transcript
            .failures
            .iter()
            .map(|failure| format!("expectation failed: {}\n", terminal::safe(failure)))
            .collect();
        (terminal::safe(&transcript.text).into_owned(), failures)
    };
    output::deliver(&out, &err, exit, output::Effect::Read, || {
        "the transcript was lost".to_owned()
    })
}

/// A tool's refusal, in the JSON contract.
pub(crate) fn fail(command: &str, error: EngineError, json: bool) -> u8 {
    crate::finish(
        &Response::failure(Some(command.to_owned()), error),
        json,
        None,
        &[],
    )
}
