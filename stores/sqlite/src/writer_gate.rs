//! The writer gate, `<db>-gate`: a native writer that has waited too long
//! for SQLite's write lock closes it, and other native writers hold back
//! until its transaction ends.
//!
//! SQLite's write lock has no queue: a writer that finds it taken sleeps in
//! its busy handler and tries again, and whoever tries at the right moment
//! gets it. Letting the writer that just finished take the lock again at
//! once is what keeps throughput up (its next transaction runs with its
//! cache warm and no context switch), but with many writer processes on few
//! cores some waiter loses race after race: the worst claim with 16 workers
//! waited 110–240 ms, and with 4 workers 45–165 ms (docs/BENCHMARKS.md,
//! section 2). The gate keeps the race and bounds the loser, as a mutex with
//! hand-off does:
//!
//! - a writer that has lost the race for [`STARVED`] takes the gate file's
//!   `flock`, exclusive; it then tries SQLite's lock every few tens of
//!   microseconds, and lets the gate go when its transaction ends;
//! - every other writer, before `BEGIN IMMEDIATE` and after each pause of
//!   its busy handler, looks at the gate (a shared `flock` taken and
//!   dropped), and while it is closed waits instead of trying SQLite's lock
//!   (that wait does not count as lost to the race); once it too has lost
//!   the race for [`STARVED`], it takes its turn at closing it.
//!
//! So the lock's holder can only be raced by the writer that closed the
//! gate, and no writer loses the race for much longer than [`STARVED`].
//!
//! Native writers also take the writer turn ([`crate::writer_turn`]) right
//! after looking at the gate, so they mostly wait asleep on the turn rather
//! than in SQLite's busy handler. Time asleep on the turn counts as lost to
//! the race: a writer that has slept [`STARVED`] wakes, closes the gate (so
//! that writers not yet asleep on the turn, the releaser coming back for it
//! included, hold back), and sleeps again until the busy budget. The
//! turn's holder is never held back by the gate: a starved writer that
//! closed it may be waiting for that very turn.
//!
//! Why a threshold this long, measured with 16 worker processes on 2 cores
//! (the bench's claim workload; all in the same runs, against the same
//! build without the gate):
//! - every hand-off the gate forces costs the throughput that the race
//!   kept: closing it after 5–12 ms of waiting took 35–50% of throughput,
//!   after 20 ms 35%, while the worst claim fell to 30–40 ms;
//! - after 40 ms it rarely closes: throughput stayed within the run's noise
//!   (0.82× and 1.03× in two runs), and the worst claim fell from 111–166 ms
//!   to 52–53 ms (from 136–164 ms to 42 ms with 4 workers). With an fsync
//!   per commit, 16 workers went from 692–736/s to 1,062–1,264/s;
//! - a queue in arrival order (measured on a branch) bounds every wait
//!   tighter but pays a hand-off per transaction: 20–65% of throughput;
//! - measured again once transactions were shorter (a transaction's WAL
//!   frames written at once, by a VFS since removed): three runs of each
//!   threshold, alternating, on one build. With 16 workers, after 40 ms:
//!   4,763–5,900/s, p99 43–48 ms, worst 53–57 ms; after 20 ms: 16% fewer
//!   (4,148–4,698/s), p99 31–36 ms, worst 38–48 ms; after 12 ms: 25% fewer
//!   (3,527–4,249/s), p99 29 ms, worst 35–40 ms. With an fsync per commit
//!   the rates were alike (973–1,458/s) and 12 ms took the p99 from
//!   50–57 ms to 36–41 ms. So a sooner gate still buys its tail with
//!   throughput, and the p99 stays above 20 ms even at 12 ms.
//!
//! While nobody starves, the gate costs a writer two system calls (a shared
//! `flock` taken and dropped) a millisecond at most, and a process one
//! `open` at its first write.
//!
//! The kernel lets go of a process's `flock` when it dies, so a writer that
//! crashes holding the gate holds nobody up. The gate only orders writers
//! that use it; SQLite's own lock still decides who writes, so a process
//! that does not know the gate (an older inbox, the `sqlite3` shell, the
//! wasm package) writes as before, and the writers here wait for it
//! through the busy handler. Nothing is lost if the file is missing,
//! replaced or unusable: writers then go straight to SQLite's lock.
//!
//! The file is created owner-only next to the database, never through a
//! symbolic link, and used only if it is a regular file of this user, so
//! another user cannot hold this user's writers back. It holds no data.
//! This module must never open the database or its `-wal`/`-shm` (closing a
//! descriptor of the database would drop SQLite's POSIX locks).

use std::cell::RefCell;
use std::fs::{File, TryLockError};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::writer_turn::{Taken, Turn};

/// The gate file's name is the database's with this suffix.
pub const SUFFIX: &str = "-gate";

/// How long a writer loses the race for SQLite's lock before it closes the
/// gate: hundreds of transactions, so that the race, which keeps throughput
/// up, decides almost every wait (see the module's notes for the
/// measurements behind it).
pub const STARVED: Duration = Duration::from_millis(40);

/// The pause of a writer that holds the gate between tries of SQLite's
/// lock: the lock's holder finishes its transaction in about 100 µs, and
/// nobody else may take the lock meanwhile.
pub(crate) const HOLDER_PAUSE: Duration = Duration::from_micros(20);

/// The pause between looks at a closed gate: it opens when one
/// transaction ends.
const CLOSED_PAUSE: Duration = Duration::from_micros(100);

/// The longest pause between looks at a closed gate.
const CLOSED_LONGEST_PAUSE: Duration = Duration::from_millis(2);

/// The longest pause of a starved writer between looks at a gate another
/// starved writer holds.
const STARVED_LONGEST_PAUSE: Duration = Duration::from_micros(200);

/// How long after seeing the gate open a writer begins without looking
/// again.
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// How long a writer holds back at most, in all: the busy handler's budget
/// then decides.
const BUDGET: Duration = crate::store::durability::BUSY_BUDGET;

/// A database's writer gate, as one store uses it.
#[derive(Debug)]
pub struct WriterGate {
    /// The database's path: its gate file and writer turn are named
    /// after it.
    db: PathBuf,
    /// The file, opened at the first write; `None` before, or when it
    /// cannot be used (then writers go straight to SQLite's lock).
    file: Option<File>,
    /// Whether opening was tried and failed: not tried again.
    unusable: bool,
    /// Whether this writer closed the gate; it opens it when its
    /// transaction ends.
    closed: bool,
    /// When the current write began to wait for the lock.
    started: Option<Instant>,
    /// When this writer last saw the gate open.
    seen_open: Option<Instant>,
    /// How long the current write was held back by a gate another writer
    /// closed: that time is not lost to the race.
    held: Duration,
    /// The database's writer turn (see [`crate::writer_turn`]), mapped at
    /// the first write; `None` before, or when it cannot be used.
    turn: Option<Turn>,
    /// Whether the turn was given up for good: its file could not be used,
    /// or a holder kept it past the busy budget.
    turn_unusable: bool,
}

thread_local! {
    /// The gate of the write that is beginning on this thread, for the busy
    /// handler, which SQLite calls with no context of ours.
    static BEGINNING: RefCell<Option<WriterGate>> = const { RefCell::new(None) };
}

impl WriterGate {
    /// The gate of the database at `db`. Touches nothing yet.
    pub fn new(db: &Path) -> WriterGate {
        WriterGate {
            db: db.to_path_buf(),
            file: None,
            unusable: false,
            closed: false,
            started: None,
            seen_open: None,
            held: Duration::ZERO,
            turn: None,
            turn_unusable: false,
        }
    }

    /// Runs `begin`, the start of a write transaction, with this gate
    /// before it and in its busy handler, and gives the gate back. The gate
    /// stays closed afterwards if this writer closed it:
    /// [`WriterGate::transaction_ended`] opens it.
    pub fn beginning<T>(mut self, begin: impl FnOnce() -> T) -> (T, Option<WriterGate>) {
        let now = Instant::now();
        self.started = Some(now);
        self.held = Duration::ZERO;
        // A write looks before it begins, the first one of a process
        // included: a writer that always wins the race would otherwise
        // never see the gate. But not again within LOOK_EVERY of seeing it
        // open: two system calls per write cost an in-process send 5%, and
        // a gate's closer can wait a millisecond more after 40.
        if self
            .seen_open
            .is_none_or(|seen| now.duration_since(seen) >= LOOK_EVERY)
        {
            self.hold_back();
        }
        self.take_turn();
        BEGINNING.with(|beginning| *beginning.borrow_mut() = Some(self));
        let result = begin();
        let mut gate = BEGINNING.with(|beginning| beginning.borrow_mut().take());
        if let Some(gate) = &mut gate {
            gate.started = None;
        }
        (result, gate)
    }

    /// Gives the writer turn back, and opens the gate if this writer closed
    /// it.
    pub fn transaction_ended(&mut self) {
        if let Some(turn) = &mut self.turn {
            turn.give_back();
        }
        if self.closed {
            self.closed = false;
            if let Some(file) = &self.file {
                let _ = file.unlock();
            }
        }
    }

    /// Waits while another writer holds the gate closed, and closes it once
    /// this writer has waited [`STARVED`]. Returns at once when the gate is
    /// this writer's or cannot be used.
    fn hold_back(&mut self) {
        let Some(started) = self.started else {
            return;
        };
        // The turn's holder goes next whatever the gate says: holding it
        // back would make a starved writer that closed the gate and waits
        // for the turn wait for the budget.
        if self.closed || self.turn.as_ref().is_some_and(Turn::held) || self.file().is_none() {
            return;
        }
        let mut looks = 0u32;
        loop {
            // Time held back is not time lost to the race: counting it
            // made every writer behind a closed gate starve in turn, and
            // the gate closed for nearly every transaction.
            let raced = started.elapsed().saturating_sub(self.held);
            let starved = raced >= STARVED;
            if starved && self.close() {
                return;
            }
            if !self.closed_by_another() {
                self.seen_open = Some(Instant::now());
                return;
            }
            // A holder that keeps the gate this long is stuck (a stopped
            // process): past the budget, SQLite's lock alone decides.
            if started.elapsed() >= BUDGET {
                return;
            }
            let pause = closed_pause(starved, looks);
            looks = looks.saturating_add(1);
            let paused = Instant::now();
            std::thread::sleep(pause);
            if !starved {
                self.held += paused.elapsed();
            }
        }
    }

    /// Takes the writer turn, asleep while another writer holds it. Time
    /// asleep is time lost to other writers: once it reaches [`STARVED`],
    /// this writer wakes, closes the gate (so that no writer that has not
    /// yet gone to sleep on the turn passes it), and sleeps again until
    /// the budget. A holder that keeps the turn past the budget (a stopped
    /// process) makes this writer give the turn up for good; SQLite's lock
    /// alone then decides, as for a writer without it.
    fn take_turn(&mut self) {
        let Some(started) = self.started else {
            return;
        };
        if self.turn.is_none() && !self.turn_unusable {
            self.turn = Turn::open(&self.db);
            self.turn_unusable = self.turn.is_none();
        }
        let budget_end = started + BUDGET;
        loop {
            let raced = started.elapsed().saturating_sub(self.held);
            let deadline = if self.closed || raced >= STARVED {
                budget_end
            } else {
                (Instant::now() + (STARVED - raced)).min(budget_end)
            };
            let Some(turn) = &mut self.turn else {
                return;
            };
            if turn.take(deadline) == Taken::Yes {
                return;
            }
            if Instant::now() >= budget_end {
                self.turn = None;
                self.turn_unusable = true;
                return;
            }
            self.hold_back();
        }
    }

    /// Takes the gate; `false` if another writer holds it.
    fn close(&mut self) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        match file.try_lock() {
            Ok(()) => {
                self.closed = true;
                true
            }
            Err(TryLockError::WouldBlock) => false,
            Err(TryLockError::Error(_)) => {
                self.unusable();
                false
            }
        }
    }

    /// Whether another writer holds the gate: a shared lock is refused.
    fn closed_by_another(&mut self) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                false
            }
            Err(TryLockError::WouldBlock) => true,
            Err(TryLockError::Error(_)) => {
                self.unusable();
                false
            }
        }
    }

    /// The file, opened (and created) on first use.
    fn file(&mut self) -> Option<&File> {
        if self.file.is_none() && !self.unusable {
            self.file = open(&crate::file::companion(&self.db, SUFFIX));
            self.unusable = self.file.is_none();
        }
        self.file.as_ref()
    }

    /// Gives the gate up for good: writers go straight to SQLite's lock.
    fn unusable(&mut self) {
        self.file = None;
        self.unusable = true;
        self.closed = false;
    }
}

/// The pause before the next look at a gate another writer closed: short
/// at first, since it opens when one transaction ends, then doubling, so
/// that a dozen writers held back do not keep the cores busy waking up
/// (which slows the writer they wait for). A starved writer waits for
/// another starved one with shorter pauses: it goes next.
fn closed_pause(starved: bool, looks: u32) -> Duration {
    let (first, longest) = if starved {
        (HOLDER_PAUSE, STARVED_LONGEST_PAUSE)
    } else {
        (CLOSED_PAUSE, CLOSED_LONGEST_PAUSE)
    };
    first.saturating_mul(1 << looks.min(8)).min(longest)
}

/// For the busy handler, after its pause: holds the beginning write back
/// while the gate is closed (see [`WriterGate::hold_back`]). Does nothing
/// when no write is beginning on this thread.
pub(crate) fn hold_back() {
    BEGINNING.with(|beginning| {
        if let Some(gate) = beginning.borrow_mut().as_mut() {
            gate.hold_back();
        }
    });
}

/// For the busy handler: whether the beginning write holds the gate, and
/// so should try SQLite's lock again soon.
pub(crate) fn holding() -> bool {
    BEGINNING.with(|beginning| beginning.borrow().as_ref().is_some_and(|gate| gate.closed))
}

/// For the busy handler: when the beginning write began to wait, if one
/// is beginning on this thread. Its budget counts from then, so that the
/// time it spent held back by the gate or asleep on the turn is not
/// granted a second time in SQLite's busy handler.
pub(crate) fn began_waiting() -> Option<Instant> {
    BEGINNING.with(|beginning| beginning.borrow().as_ref().and_then(|gate| gate.started))
}

impl Drop for WriterGate {
    fn drop(&mut self) {
        self.transaction_ended();
    }
}

/// Opens (creating owner-only) the gate file at `path`, if it is a regular
/// file of this user reached without a symbolic link.
fn open(path: &Path) -> Option<File> {
    let file = crate::file::open_lock_file(path).ok()?;
    let meta = file.metadata().ok()?;
    let mine = meta.uid() == rustix::process::geteuid().as_raw();
    (meta.is_file() && mine).then_some(file)
}
