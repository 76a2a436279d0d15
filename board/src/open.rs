//! `--open`: the board in the default browser, without putting the token
//! where other local users can read it.
//!
//! A command line is shown to every local user (`ps`, `/proc/*/cmdline`)
//! for as long as the opener and the browser run, so the URL with its
//! token is never on one. As Jupyter does (`jpserver-PID-open.html`), the
//! board writes a small HTML file that sends the browser on to the URL,
//! and the opener is given that file's name alone. The file is 0600 in a
//! fresh 0700 folder of its own: in `$XDG_RUNTIME_DIR` when that is this
//! user's own and private, else in the temp folder (`$TMPDIR`, `/tmp`). It
//! is removed after [`KEPT_FOR`], when the browser has long read it, or
//! when the board stops, whichever comes first.
//!
//! This module must never write the token anywhere but that file, and
//! never into a file or folder it did not make itself.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use inbox_host_native::hosted;

/// How long the file is kept: the browser reads it once, as it starts.
pub(crate) const KEPT_FOR: Duration = Duration::from_secs(60);

/// The file's name in its folder.
const FILE_NAME: &str = "open.html";

/// The file the browser was sent to, and its folder: both are removed
/// when this is dropped.
pub(crate) struct Redirect {
    folder: PathBuf,
}

impl Drop for Redirect {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.folder.join(FILE_NAME));
        let _ = std::fs::remove_dir(&self.folder);
    }
}

/// Opens `url` (the board's, with its token) in the default browser
/// through a private redirect file. A failure is only a warning: the URL
/// is printed anyway.
pub(crate) fn browser(url: &str) -> Option<Redirect> {
    let redirect = match write(url) {
        Ok(redirect) => redirect,
        Err(error) => {
            hosted::log(&format!(
                "warning: could not open a browser: cannot write the page that opens the board ({error}); open the board's URL"
            ));
            return None;
        }
    };
    let link = file_url(&redirect.folder.join(FILE_NAME));
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    // The browser has no use for the agent's token this board writes with.
    let opened = std::process::Command::new(opener)
        .arg(&link)
        .env_remove("INBOX_AGENT_TOKEN")
        .env_remove("INBOX_AGENT_TOKEN_FILE")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match opened {
        // Reaped by a thread of its own, so that no zombie is left.
        Ok(mut child) => {
            let _ = std::thread::Builder::new()
                .name("board-opener".into())
                .spawn(move || child.wait());
            hosted::log(&format!(
                "inbox serve: opening the board in the browser through {link} (removed in {} s)",
                KEPT_FOR.as_secs()
            ));
            Some(redirect)
        }
        Err(error) => {
            hosted::log(&format!(
                "warning: could not open a browser ({opener}: {error}); open the board's URL"
            ));
            None
        }
    }
}

/// Writes the redirect file in a fresh private folder.
fn write(url: &str) -> std::io::Result<Redirect> {
    let redirect = Redirect {
        folder: fresh_folder(&base())?,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let mut file = options.open(redirect.folder.join(FILE_NAME))?;
    file.write_all(page(url).as_bytes())?;
    Ok(redirect)
}

/// The `file://` URL of `path` (absolute), its bytes percent-encoded
/// but for those a path may hold as they are.
fn file_url(path: &Path) -> String {
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    #[cfg(not(unix))]
    let bytes = path.to_string_lossy().into_owned().into_bytes();
    let mut url = String::from("file://");
    for byte in bytes {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url
}

/// The redirect: a script that replaces the file's entry in the history
/// with the board's URL, whose fragment the board's page then clears.
/// The token is in the fragment, which the browser sends to no server
/// and in no Referer. There is no `<meta http-equiv="refresh">` fallback:
/// the board's page is a script, so a browser that runs none has no use
/// for the URL, and a meta refresh would leave this file's entry, and so
/// the token, in the history for longer.
fn page(url: &str) -> String {
    // A JSON string is a JavaScript string; `<` escaped so that nothing
    // in it can end the script element.
    let literal = serde_json::to_string(url)
        .unwrap_or_default()
        .replace('<', "\\u003c");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n\
         <title>Opening the inbox board</title>\n\
         <script>location.replace({literal});</script>\n</head>\n<body>\n\
         <p>Opening the board. If nothing happens, open the URL <code>inbox serve</code> printed \
         (the board needs JavaScript).</p>\n</body>\n</html>\n"
    )
}

/// Where the fresh folder goes: `$XDG_RUNTIME_DIR` if it is this user's
/// own and no one else may enter it, else the temp folder.
fn base() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|runtime| runtime.is_absolute() && owned_and_private(runtime))
        .unwrap_or_else(std::env::temp_dir)
}

/// Whether `path` is a folder (not a link) of this user's that no one
/// else may read, write or enter.
#[cfg(unix)]
fn owned_and_private(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path).is_ok_and(|metadata| {
        metadata.is_dir()
            && metadata.uid() == rustix::process::geteuid().as_raw()
            && metadata.mode() & 0o077 == 0
    })
}

#[cfg(not(unix))]
fn owned_and_private(_path: &Path) -> bool {
    false
}

/// A new folder in `base` that only this user may enter: its name is
/// random, `mkdir` makes it or fails (it never reuses or follows what is
/// there), and what it made is checked before anything is written in it.
fn fresh_folder(base: &Path) -> std::io::Result<PathBuf> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(std::io::Error::other)?;
    let name: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let folder = base.join(format!("inbox-board-{name}"));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(&folder)?;
    if !owned_and_private(&folder) {
        let _ = std::fs::remove_dir(&folder);
        return Err(std::io::Error::other(format!(
            "{} is not a private folder of this user's",
            folder.display()
        )));
    }
    Ok(folder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_sends_the_browser_to_the_url_and_nothing_in_it_ends_the_script() {
        let page = page("http://127.0.0.1:7/#token=ab</script><x>");
        assert!(
            page.contains(
                r#"location.replace("http://127.0.0.1:7/#token=ab\u003c/script>\u003cx>")"#
            )
        );
        assert_eq!(page.matches("</script>").count(), 1);
        assert!(!page.contains("http-equiv"));
    }

    #[test]
    fn file_urls_encode_what_a_url_cannot_hold() {
        assert_eq!(
            file_url(Path::new("/run/user/1000/inbox-board-ab/open.html")),
            "file:///run/user/1000/inbox-board-ab/open.html"
        );
        assert_eq!(
            file_url(Path::new("/tmp/a b#c%d?é/open.html")),
            "file:///tmp/a%20b%23c%25d%3F%C3%A9/open.html"
        );
    }
}
