//! Secrets kept in files: reading an agent token from the file a user
//! names (`--agent-token-file`, `$INBOX_AGENT_TOKEN_FILE`), and writing a
//! secret (the board's URL with its token, `inbox serve --url-file`) to a
//! file only its owner can read.
//!
//! A token on a command line is shown to every local user by `ps` for as
//! long as the process lives; a token in a file is shown to whoever may
//! read the file. So a token file must be the user's own and private, and
//! is refused otherwise, as ssh refuses a private key others can read. The
//! file is hostile as well: it may be a FIFO (never waited on), huge (read
//! no further than a token can be long) or not text. This module must
//! never print a secret: its refusals name the file, not what it holds.

use std::io::{Read as _, Write as _};
use std::path::Path;

use inbox_engine::EngineError;
use inbox_engine::call::AGENT_TOKEN_MAX_BYTES;

/// The flag the token file is given with, as refusals name it.
const TOKEN_FILE: &str = "agent_token_file";

/// The token the file at `path` holds: its text, without the surrounding
/// white space (the line end an editor or `echo` adds). The engine checks
/// the token itself, as it checks one given any other way.
pub fn read_token_file(path: &Path) -> Result<String, EngineError> {
    let shown = path.display();
    let refuse = |problem: String| EngineError::InvalidValue {
        field: TOKEN_FILE.into(),
        problem: format!("{shown}: {problem}"),
    };
    let file = open_without_waiting(path).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    let metadata = file
        .metadata()
        .map_err(|e| refuse(format!("cannot be read: {e}")))?;
    if !metadata.is_file() {
        return Err(refuse(
            "is not a regular file; put the token in a file of its own (mode 0600)".into(),
        ));
    }
    private(&metadata).map_err(refuse)?;
    // The token, a line end, and one byte more to know it is too long.
    let cap = AGENT_TOKEN_MAX_BYTES + 3;
    let mut bytes = Vec::with_capacity(cap);
    file.take(cap as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(format!("cannot be read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| refuse("is not UTF-8 text".into()))?;
    let token = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if token.len() > AGENT_TOKEN_MAX_BYTES || text.len() >= cap {
        return Err(EngineError::TooLong {
            field: TOKEN_FILE.into(),
            actual: usize::try_from(metadata.len()).ok(),
            limit: AGENT_TOKEN_MAX_BYTES,
            unit: "bytes",
        });
    }
    if token.is_empty() {
        return Err(refuse(
            "is empty; put the token `inbox agent register` printed in it".into(),
        ));
    }
    Ok(token.to_owned())
}

/// Opens a file to read without ever blocking on it (a FIFO or a device
/// would otherwise keep the command waiting for a writer).
fn open_without_waiting(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    options.open(path)
}

/// Whether a token file is private: owned by this user (or root), and
/// with no permission at all for its group or other users. Group read is
/// refused too: a group is often wider than its owner thinks (a shared
/// login's, every user's on some systems), and whoever reads the token
/// acts as the agent; group or other write would let them put their own
/// token in it. As ssh does for a private key, the mode must be 0600 or
/// stricter.
#[cfg(unix)]
fn private(metadata: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let me = rustix::process::geteuid().as_raw();
    if metadata.uid() != me && metadata.uid() != 0 {
        return Err(format!(
            "belongs to uid {}, not to you (uid {me}); keep the token in a file of your own",
            metadata.uid()
        ));
    }
    let mode = metadata.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "has permissions for its group or other users (mode {mode:04o}), who could read the token or replace it; \
             a token file must be yours alone: chmod 600 it"
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn private(_metadata: &std::fs::Metadata) -> Result<(), String> {
    Ok(())
}

/// Writes `content` to `path` so that only this user can ever read it: a
/// new file of mode 0600 beside it, then renamed over `path` (so a file or
/// link already there is replaced, never written through, and a reader
/// sees the old file or the whole new one). `field` names the flag in a
/// refusal.
pub fn write_private(path: &Path, content: &str, field: &str) -> Result<(), EngineError> {
    let shown = path.display();
    let refuse = |e: std::io::Error| EngineError::InvalidValue {
        field: field.into(),
        problem: format!("cannot be written: {shown}: {e}"),
    };
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| EngineError::InvalidValue {
        field: field.into(),
        problem: format!("{shown} names no file; give a file's path"),
    })?;
    // Unique enough: `create_new` refuses a name already taken.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let temporary = folder.join(format!(
        ".{}.{}.{nanos}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let written = options.open(&temporary).and_then(|mut file| {
        file.write_all(content.as_bytes())?;
        file.sync_all()
    });
    let renamed = written.and_then(|()| std::fs::rename(&temporary, path));
    if let Err(error) = renamed {
        let _ = std::fs::remove_file(&temporary);
        return Err(refuse(error));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, content: &[u8], mode: u32) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        path
    }

    #[test]
    fn a_private_token_file_is_read_without_its_line_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(dir.path(), "t", b"tok_abc\r\n", 0o600);
        assert_eq!(read_token_file(&path).unwrap(), "tok_abc");
        let read_only = file(dir.path(), "r", b"tok_abc\n", 0o400);
        assert_eq!(read_token_file(&read_only).unwrap(), "tok_abc");
    }

    #[test]
    fn a_token_file_others_may_read_or_change_or_that_is_not_a_token_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            file(dir.path(), "world", b"tok_abc\n", 0o644),
            file(dir.path(), "group-writable", b"tok_abc\n", 0o660),
            file(dir.path(), "group-readable", b"tok_abc\n", 0o640),
            file(dir.path(), "group-executable", b"tok_abc\n", 0o610),
            file(dir.path(), "other-executable", b"tok_abc\n", 0o601),
            file(dir.path(), "empty", b"\n", 0o600),
            file(dir.path(), "binary", &[0xff, 0xfe], 0o600),
        ];
        for path in &cases {
            let error = read_token_file(path).unwrap_err();
            let text = error.to_string();
            assert!(text.contains("agent_token_file"), "{text}");
            assert!(!text.contains("tok_abc"), "never quotes the token: {text}");
        }
        let big = file(dir.path(), "big", &[b'a'; 100_000], 0o600);
        assert!(matches!(
            read_token_file(&big),
            Err(EngineError::TooLong { .. })
        ));
        assert!(read_token_file(dir.path()).is_err(), "a folder");
    }

    #[test]
    fn a_private_file_is_written_with_mode_0600_over_what_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(dir.path(), "url", b"old", 0o644);
        write_private(&path, "http://x/#token=1\n", "url_file").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "http://x/#token=1\n"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
    }
}
