//! The file-based peers: the ways agent teams coordinate today through
//! plain files, each in its own module, implemented faithfully and
//! minimally from the descriptions they come from.
//!
//! - [`jsonl`]: a per-member append-only JSONL inbox with a line cursor
//!   (seed 002);
//! - [`json_array`]: a JSON-array inbox rewritten under a lock file per
//!   message;
//! - [`filedrop`]: a directory of `*.task.json` descriptors polled every 2 s
//!   (seed 001).
//!
//! This module tree depends only on std, serde_json, rustix and anyhow, so
//! the `inbox-bench-peer` helper binary (one process per message, like the
//! `inbox` CLI) links it without the Redis and PostgreSQL clients or the
//! engine. It must never import anything else from the harness. `fsync`
//! everywhere means "the full-durability variant": every write is fsynced
//! (and its folder, when a file is created or renamed) before it returns.

pub mod filedrop;
pub mod json_array;
pub mod jsonl;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// One message as the seed's JSONL protocol writes it (a `task_assignment`
/// of about 200 bytes); every file peer stores this same line, so the
/// systems move the same bytes.
pub fn task_line(from: &str, to: &str, producer: usize, seq: u64) -> String {
    serde_json::json!({
        "type": "task_assignment",
        "from": from,
        "to": to,
        "timestamp": now_iso(),
        "content": {
            "taskId": task_id(producer, seq),
            "subject": format!("Implement benchmark task {producer}-{seq}"),
            "priority": 4,
        },
    })
    .to_string()
}

/// The task id every system uses for message `seq` of `producer`.
pub fn task_id(producer: usize, seq: u64) -> String {
    format!("t-{producer}-{seq}")
}

/// Appends `line` and a newline to `path` (created if missing) in one
/// `write`, like the seed's `echo "$MESSAGE" >> inbox`: open with
/// `O_APPEND`, write, close. With `fsync`, the data is synced first.
pub fn append_line(path: &Path, line: &str, fsync: bool) -> Result<()> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    file.write_all(&bytes)
        .with_context(|| format!("cannot append to {}", path.display()))?;
    if fsync {
        file.sync_data()
            .with_context(|| format!("cannot fsync {}", path.display()))?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` through a temporary file and a rename (the
/// seed's `jq ... > state.json.tmp; mv state.json.tmp state.json`), so a
/// reader never sees half a file. With `fsync`, the file and then its
/// folder are synced.
pub fn write_replace(path: &Path, bytes: &[u8], fsync: bool) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut file =
            File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        file.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        if fsync {
            file.sync_all()?;
        }
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    if fsync && let Some(dir) = path.parent() {
        fsync_dir(dir)?;
    }
    Ok(())
}

/// Creates `path` with `bytes`; with `fsync`, syncs it and its folder.
pub fn write_new(path: &Path, bytes: &[u8], fsync: bool) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    if fsync {
        file.sync_all()?;
        if let Some(dir) = path.parent() {
            fsync_dir(dir)?;
        }
    }
    Ok(())
}

/// fsyncs a folder, so a file created or renamed in it survives power loss.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot fsync the folder {}", dir.display()))
}

/// Renames `from` to `to`; with `fsync`, syncs the folder after.
pub fn rename(from: &Path, to: &Path, fsync: bool) -> std::io::Result<()> {
    std::fs::rename(from, to)?;
    if fsync && let Some(dir) = to.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The current time as RFC 3339 UTC with milliseconds, as the seeds write
/// timestamps.
pub fn now_iso() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_timestamps_look_right() {
        let now = super::now_iso();
        assert_eq!(now.len(), 24, "{now}");
        assert!(now.starts_with("20") && now.ends_with('Z'), "{now}");
    }
}
