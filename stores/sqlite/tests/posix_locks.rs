//! POSIX locks belong to a process, and closing any descriptor of a file
//! drops all of the process's locks on it. SQLite's connections in WAL mode
//! hold a shared lock on the database file for as long as they are open:
//! it is what stops another process's last connection from checkpointing
//! and deleting the `-wal` and `-shm` under them. A long-lived host (the
//! MCP server, `inbox serve`) opens the database again for each call while
//! other calls' connections stay open, so opening must never drop them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use inbox_sqlite::open_existing;

/// The lock ranges this process holds on `file`, from `/proc/locks`.
fn my_locks(file: &Path) -> Vec<String> {
    let ino = std::fs::metadata(file).unwrap().ino();
    let pid = std::process::id().to_string();
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let ours = fields.get(4) == Some(&pid.as_str())
                && fields
                    .get(5)
                    .is_some_and(|id| id.ends_with(&format!(":{ino}")));
            ours.then(|| fields[3..].join(" "))
        })
        .collect()
}

#[test]
fn opening_a_database_again_keeps_the_open_connections_locks() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("team.inbox.db");
    drop(inbox_sqlite::open::init(&db, None).unwrap());

    let (first, _) = open_existing(&db, None).unwrap();
    let held = my_locks(&db);
    assert!(
        !held.is_empty(),
        "an open connection holds a lock on the file"
    );

    let (second, _) = open_existing(&db, None).unwrap();
    assert_eq!(my_locks(&db), held, "opening again dropped them");
    drop(second);
    assert_eq!(my_locks(&db), held, "closing the second dropped them");
    drop(first);
}
