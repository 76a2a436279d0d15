//! Checkpoints of a long-lived connection, run by a thread of their own so
//! that no command waits for one.
//!
//! A connection that stays open (an embedding host, a bridge, a wait)
//! leaves the WAL to grow between checkpoints, and copying it back into
//! the database, with its fsyncs, used to be done by whichever commit took
//! the WAL past SQLite's threshold: one send in about eighty paid a few
//! milliseconds for all of them. Here the commit only nudges a thread
//! (from SQLite's WAL hook, [`Checkpointer::hook`]), and the thread
//! checkpoints on a connection of its own:
//! - `PASSIVE` first: it copies what it can without waiting for anyone, so
//!   writers go on committing while it runs;
//! - `RESTART` once the WAL has grown past [`RESTART_FRAMES`] all the same
//!   (writers that never pause leave no moment at which a passive
//!   checkpoint has copied everything, so SQLite would never start the WAL
//!   over): it holds new writers back only while it copies what the
//!   passive pass left, and then the next commit writes from the top of
//!   the WAL again;
//! - and should the thread fall far behind (starved of a CPU on a loaded
//!   machine, or in a long passive pass while the writer never pauses),
//!   the commit that takes the WAL past [`BACKSTOP_FRAMES`] waits for the
//!   thread's pass to end and restarts the WAL itself, so the WAL stays
//!   bounded whatever the thread does.
//!
//! A checkpoint is housekeeping: a busy one is left to the next nudge, and
//! an error is dropped (the commits are already durable in the WAL). The
//! thread stops when its [`Checkpointer`] is dropped. This module must
//! never run a command's statements; it only checkpoints.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use rusqlite::Connection;
use rusqlite::hooks::Wal;

use crate::file::FileIdentity;

/// WAL frames after which a commit asks for a checkpoint: SQLite's own
/// default (`wal_autocheckpoint`).
pub const CHECKPOINT_FRAMES: c_int = 1000;

/// WAL frames past which the thread restarts the WAL, blocking writers for
/// the rest of the copy: 8 MiB of 2 KiB pages, half of the
/// `journal_size_limit` the WAL is cut back to.
pub const RESTART_FRAMES: c_int = 4000;

/// The thread's name, as `ps -L` and `/proc/PID/task/*/comm` show it (at
/// most 15 bytes on Linux).
pub const THREAD_NAME: &str = "inbox-wal-ckpt";

/// WAL frames past which a commit restarts the WAL itself, as a backstop
/// for a thread that has fallen behind: 16 MiB of 2 KiB pages, the
/// `journal_size_limit` the WAL file is cut back to.
pub const BACKSTOP_FRAMES: c_int = 8000;

/// A thread that checkpoints one database when nudged.
pub struct Checkpointer {
    nudges: SyncSender<()>,
    /// Held by the thread for each pass, and by a backstop commit: SQLite
    /// does not wait for another connection's checkpoint (it answers busy
    /// at once), so without this turn a backstop that met the thread's
    /// passive pass gave up, and a writer that never pauses grew the WAL
    /// for as long as that pass ran.
    turn: Arc<Mutex<()>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread with its own connection `conn` to the database
    /// whose files `files` identifies; it checks them before every
    /// checkpoint and stops checkpointing if they were replaced.
    pub fn start(conn: Connection, files: Option<FileIdentity>) -> std::io::Result<Checkpointer> {
        // One pending nudge is enough: a checkpoint copies everything
        // committed before it starts.
        let (nudges, wakes) = sync_channel(1);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let turn = Arc::new(Mutex::new(()));
        let thread_turn = Arc::clone(&turn);
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || run(&conn, files.as_ref(), &wakes, &stopped, &thread_turn))?;
        Ok(Checkpointer {
            nudges,
            turn,
            stop,
            thread: Some(thread),
        })
    }

    /// The WAL hook for the connection whose commits this thread follows:
    /// a nudge once the WAL is long enough, never a wait.
    pub fn hook(&self) -> impl FnMut(&mut Wal, c_int) -> rusqlite::Result<()> + Send + 'static {
        let nudges = self.nudges.clone();
        let turn = Arc::clone(&self.turn);
        move |wal, frames| {
            if frames >= BACKSTOP_FRAMES {
                // The thread has fallen far behind (starved of a CPU, or
                // its restarts kept meeting a writer): this commit, which
                // holds no lock any more, waits for the thread's pass to
                // end and starts the WAL over itself, which bounds it
                // whatever the thread does. Busy (another process is
                // checkpointing, or reading an old snapshot) leaves it to
                // the next commit.
                let _turn = take_turn(&turn);
                crate::open::as_checkpoint(|| {
                    let _ = wal.checkpoint_v2(rusqlite::wal::CheckpointMode::RESTART);
                });
            } else if frames >= CHECKPOINT_FRAMES {
                nudge(&nudges);
            }
            Ok(())
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        nudge(&self.nudges);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Wakes the thread without ever waiting: if a nudge is already pending,
/// a checkpoint is due anyway, and if the thread has stopped, a commit must
/// not fail for it.
fn nudge(nudges: &SyncSender<()>) {
    match nudges.try_send(()) {
        Ok(()) | Err(TrySendError::Full(()) | TrySendError::Disconnected(())) => {}
    }
}

/// Waits for the turn to checkpoint. The turn guards no data, so a pass
/// that panicked leaves nothing to repair.
fn take_turn(turn: &Mutex<()>) -> MutexGuard<'_, ()> {
    turn.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The thread's loop: a checkpoint per nudge, until told to stop.
fn run(
    conn: &Connection,
    files: Option<&FileIdentity>,
    wakes: &Receiver<()>,
    stop: &AtomicBool,
    turn: &Mutex<()>,
) {
    crate::open::mark_checkpoint_thread();
    while wakes.recv().is_ok() && !stop.load(Ordering::Acquire) {
        if files.is_some_and(|f| f.check().is_err()) {
            // The database was replaced under this process: its commands
            // stop before writing (see `file`), and so does this thread.
            return;
        }
        let _turn = take_turn(turn);
        checkpoint(conn);
    }
}

/// One round: passive, then a restart if the WAL is still long.
fn checkpoint(conn: &Connection) {
    if wal_checkpoint(conn, "PASSIVE").is_some_and(|frames| frames >= RESTART_FRAMES) {
        let _ = wal_checkpoint(conn, "RESTART");
    }
}

/// Runs one checkpoint in `mode`; returns the WAL's length in frames, or
/// `None` if it could not run.
fn wal_checkpoint(conn: &Connection, mode: &str) -> Option<c_int> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        row.get(1)
    })
    .ok()
}
