//! Checkpoints of a long-lived connection, run by a thread of their own so
//! that no command waits for one.
//!
//! A connection that stays open (an embedding host, a bridge, a wait)
//! leaves the WAL to grow between checkpoints, and copying it back into
//! the database, with its fsyncs, used to be done by whichever commit took
//! the WAL past SQLite's threshold: one send in about eighty paid a few
//! milliseconds for all of them. Here a commit only nudges a thread
//! (from SQLite's WAL hook, [`Checkpointer::hook`]), once for each
//! [`CHECKPOINT_FRAMES`] the WAL grows, and the thread checkpoints on a
//! connection of its own:
//! - `PASSIVE` first: it copies what it can without waiting for anyone, so
//!   writers go on committing while it runs;
//! - `RESTART` once the WAL has grown past [`RESTART_FRAMES`] all the same
//!   (writers that never pause leave no moment at which a passive
//!   checkpoint has copied everything, so SQLite would never start the WAL
//!   over): it holds new writers back only while it copies what the
//!   passive passes before it left (a few more passes catch up with the
//!   commits made during the first, so little is left), and then the next
//!   commit writes from the top of the WAL again;
//! - the thread runs at a lower priority than the writers, so that on a
//!   machine with few cores a pass does not take the processor from the
//!   writer that holds the write lock;
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

use std::cell::Cell;
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
        let mut asked = Asked::default();
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
                as_checkpoint(|| {
                    let _ = wal.checkpoint_v2(rusqlite::wal::CheckpointMode::RESTART);
                });
            } else if asked.due(frames) {
                nudge(&nudges);
            }
            Ok(())
        }
    }
}

/// When a connection last asked for a checkpoint, so that it asks once
/// per [`CHECKPOINT_FRAMES`] the WAL grows, not at every commit.
///
/// A passive pass leaves the WAL as long as it was: only a writer that
/// begins once everything is copied starts it over, and writers that keep
/// committing while the thread copies seldom do. Asking at every commit
/// past the threshold ran a pass, with its two fsyncs, for every commit
/// until the WAL reached [`RESTART_FRAMES`]: a quarter of an fsync per
/// write in process, and with a thread per connection, connections taking
/// turns spent more on those passes than on their own transactions
/// (docs/lab-log.md).
#[derive(Default)]
struct Asked {
    /// The WAL's length in frames at the last ask (0: never asked).
    at: c_int,
}

impl Asked {
    /// Whether a commit that left the WAL `frames` long asks for a pass;
    /// if so, remembers it.
    fn due(&mut self, frames: c_int) -> bool {
        // Shorter than at the last ask: the WAL has started over since.
        let grown = if frames < self.at {
            frames
        } else {
            frames - self.at
        };
        let due = frames >= CHECKPOINT_FRAMES && grown >= CHECKPOINT_FRAMES;
        if due {
            self.at = frames;
        }
        due
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
    mark_checkpoint_thread();
    yield_to_writers();
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

/// Frames a restart may find left to copy: it holds every writer back
/// while it copies them and syncs the database.
const RESTART_LEFT: c_int = 64;

/// Passive passes at most before a restart, catching up with the writers
/// that committed while the pass before ran.
const CATCH_UP_PASSES: usize = 4;

/// Lowers this thread's priority (Linux gives each thread its own nice
/// value): a pass is housekeeping, and on a machine with few cores a pass
/// that takes the processor from a writer holding the write lock holds up
/// every writer. The backstop in [`Checkpointer::hook`] bounds the WAL if
/// the thread gets too little time.
fn yield_to_writers() {
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), NICE);
}

/// The checkpoint thread's nice value.
#[cfg(target_os = "linux")]
const NICE: i32 = 10;

/// One round: passive, then, if the WAL is still long, passive passes
/// until little is left to copy, and a restart.
fn checkpoint(conn: &Connection) {
    let Some(mut pass) = wal_checkpoint(conn, "PASSIVE") else {
        return;
    };
    if pass.log < RESTART_FRAMES {
        return;
    }
    for _ in 0..CATCH_UP_PASSES {
        if pass.log - pass.copied <= RESTART_LEFT {
            break;
        }
        match wal_checkpoint(conn, "PASSIVE") {
            Some(next) => pass = next,
            None => return,
        }
    }
    let _ = wal_checkpoint(conn, "RESTART");
}

/// What a checkpoint reported, in WAL frames.
struct Pass {
    /// The WAL's length.
    log: c_int,
    /// How many of them are now in the database file.
    copied: c_int,
}

/// Runs one checkpoint in `mode`, or `None` if it could not run.
fn wal_checkpoint(conn: &Connection, mode: &str) -> Option<Pass> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        Ok(Pass {
            log: row.get(1)?,
            copied: row.get(2)?,
        })
    })
    .ok()
}

/// Runs `checkpoint` with the busy handler's short checkpoint budget: a
/// commit that checkpoints has already committed, and must not wait long.
pub(crate) fn as_checkpoint(checkpoint: impl FnOnce()) {
    IN_CHECKPOINT.with(|flag| flag.set(true));
    checkpoint();
    IN_CHECKPOINT.with(|flag| flag.set(false));
}

/// Marks the calling thread as one that only checkpoints: its busy
/// handler gives up after `CHECKPOINT_BUDGET` (see `open`).
pub(crate) fn mark_checkpoint_thread() {
    IN_CHECKPOINT.with(|flag| flag.set(true));
}

/// Whether the calling thread is checkpointing now (see [`as_checkpoint`]
/// and [`mark_checkpoint_thread`]): the busy handler then gives up sooner.
pub(crate) fn in_checkpoint() -> bool {
    IN_CHECKPOINT.with(Cell::get)
}

thread_local! {
    static IN_CHECKPOINT: Cell<bool> = const { Cell::new(false) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_asks_once_per_threshold_of_growth() {
        let mut asked = Asked::default();
        assert!(!asked.due(CHECKPOINT_FRAMES - 1));
        assert!(asked.due(CHECKPOINT_FRAMES));
        // The commits after it, while the pass runs and after, do not ask
        // again until the WAL has grown by the threshold once more.
        assert!(!asked.due(CHECKPOINT_FRAMES + 12));
        assert!(!asked.due(2 * CHECKPOINT_FRAMES - 1));
        assert!(asked.due(2 * CHECKPOINT_FRAMES + 5));
    }

    #[test]
    fn a_wal_that_started_over_is_counted_from_its_top() {
        let mut asked = Asked::default();
        assert!(asked.due(3 * CHECKPOINT_FRAMES));
        assert!(!asked.due(12));
        assert!(!asked.due(CHECKPOINT_FRAMES - 1));
        assert!(asked.due(CHECKPOINT_FRAMES));
    }
}
