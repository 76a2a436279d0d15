//! What a host can say about an artifact a caller names by its path:
//! its absolute form and, for a readable file, its size and SHA-256 digest,
//! as `--artifact PATH` and the MCP server's tools record them. URLs are
//! kept as they are. This module must never judge an artifact: a path that
//! is missing, a folder or unreadable is still recorded, with a note.

use std::path::Path;

use inbox_engine::wire::ArtifactInput;
use sha2::{Digest, Sha256};

/// An artifact named by `path` alone, with what this host can say about
/// it (see [`file_facts`]): what `--artifact PATH` records.
pub fn describe_artifact(path: &str, notes: &mut Vec<String>) -> ArtifactInput {
    let facts = file_facts(path, notes);
    ArtifactInput {
        path: Some(path.to_owned()),
        kind: None,
        metadata: None,
        absolute_path: facts.absolute_path,
        size_bytes: facts.size_bytes,
        sha256: facts.sha256,
    }
}

/// What [`file_facts`] found.
pub struct Facts {
    /// The path made absolute, without `.` and `..`; `None` for a URL.
    pub absolute_path: Option<String>,
    /// The size of a readable regular file.
    pub size_bytes: Option<u64>,
    /// The SHA-256 digest of a readable regular file, in hex.
    pub sha256: Option<String>,
}

/// What this host can say about an artifact path: its absolute form (see
/// [`normalize`]) and, for a readable file, size and digest. URLs are kept as they are;
/// a path that is missing, a folder or unreadable is still recorded, with a
/// note saying why it has no digest.
pub fn file_facts(path: &str, notes: &mut Vec<String>) -> Facts {
    let mut facts = Facts {
        absolute_path: None,
        size_bytes: None,
        sha256: None,
    };
    if path.contains("://") {
        return facts;
    }
    facts.absolute_path = std::path::absolute(path)
        .ok()
        .map(|p| normalize(&p).display().to_string());
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            notes.push(format!(
                "artifact {path} cannot be read ({e}); recorded without size or digest"
            ));
            return facts;
        }
    };
    if !meta.is_file() {
        notes.push(format!(
            "artifact {path} is not a regular file; recorded without size or digest"
        ));
        return facts;
    }
    match digest(path) {
        Ok((size, hex)) => {
            facts.size_bytes = Some(size);
            facts.sha256 = Some(hex);
        }
        Err(e) => notes.push(format!(
            "artifact {path} cannot be read ({e}); recorded without size or digest"
        )),
    }
    facts
}

/// Resolves `.` and `..` in an absolute path without touching the file
/// system, so `src/../docs/a.md` is recorded as `/project/docs/a.md`.
/// Symbolic links are left as they are: the path names what the sender
/// named; size and digest come from the file the link points to.
fn normalize(path: &Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The size and SHA-256 digest (hex) of the file at `path`.
fn digest(path: &str) -> std::io::Result<(u64, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let size = std::io::copy(&mut file, &mut hasher)?;
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    Ok((size, hex))
}
