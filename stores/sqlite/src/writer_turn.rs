//! The writer turn, `<db>-turn`: a lock word in a shared mapping of a
//! sidecar file that native writers take before `BEGIN IMMEDIATE` and give
//! back when the transaction ends, so that a writer waiting for another
//! sleeps in the kernel (a futex) and is woken by the one it waits for,
//! instead of polling SQLite's lock from its busy handler.
//!
//! Why: SQLite's write lock has no queue. With 16 writer processes on 2
//! cores, a dozen waiters woke up every 50 µs to 2 ms to try it, and those
//! wake-ups took the cores from the writer they waited for: claim + done
//! fell to about 0.6× the one-worker rate (docs/BENCHMARKS.md, section 2).
//! With the turn, a release wakes one sleeper, and the releasing writer may
//! take the turn again at once (it has its cache warm and no context switch
//! to pay), as a plain mutex allows, but only for [`FAIR_EVERY`]: past that,
//! its release hands the turn to the sleeper it wakes, as WebKit's
//! "eventually fair" locks do. Without that bound, a writer woken to find
//! the turn taken again went back to the end of the queue, and the worst
//! claim grew past what the writer gate allows. And a sleeper woken by a
//! release that its releaser then took back keeps its place: it sleeps
//! again in a second lane that releases wake first ([`AGAIN`]). Who waits
//! too long anyway is the writer gate's business ([`crate::writer_gate`]),
//! which calls in here.
//!
//! The word holds the owning thread's id, with [`WAITERS`] set once a
//! writer sleeps on it, or [`HANDED_OFF`] between a fair release and the
//! woken sleeper taking it; a release of a word with [`WAITERS`] wakes one
//! sleeper. This is the scheme of `pthread_mutex_t`, written here rather
//! than taken from the C library because a process-shared mutex needs what
//! not every supported glibc has (a timed lock on the monotonic clock
//! arrived in 2.30): a sleeper here wakes by itself after a slice of at
//! most [`OWNER_CHECK_EVERY`], measured by the kernel on the monotonic
//! clock, and so
//! - takes the turn over when its owner thread no longer exists (a writer
//!   killed in its transaction), which the kernel would otherwise never
//!   tell it;
//! - gives up at the caller's deadline (a stopped owner, or one the caller
//!   has waited for long enough), and the caller goes to SQLite's lock as
//!   a writer without the turn does.
//!
//! The turn only orders writers; SQLite's lock still decides who writes.
//! So nothing depends on it for correctness: a process that does not know
//! it (an older inbox, the `sqlite3` shell, the wasm package) writes as
//! before, writers here wait for it in the busy handler, and a turn taken
//! over wrongly (an owner in another pid namespace looks dead) only lets
//! two writers race for SQLite's lock as they did without it. A file that
//! cannot be used (missing, of another user, reached through a link, of
//! the wrong size, on a file system that cannot map it) means no turn.
//!
//! This module must never open the database or its `-wal`/`-shm` (closing
//! a descriptor of the database would drop SQLite's POSIX locks). It is
//! allowed `unsafe` for three things only: mapping the file, viewing the
//! mapped word as an atomic, and letting the handle move between threads;
//! each is justified where it happens.
#![allow(unsafe_code)]

use std::fs::File;
use std::num::NonZeroU32;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rustix::thread::futex;
use rustix::time::{ClockId, Timespec};

/// The turn file's name is the database's with this suffix.
pub const SUFFIX: &str = "-turn";

/// The file's size: one page, the least a mapping takes. Only its first
/// word is used; a new file is all zeros, an unowned turn, so it needs no
/// setting up and two processes creating it at once agree.
const SIZE: u64 = 4096;

/// Set in the word while a writer sleeps on it, or may: its release must
/// wake one. Thread ids stay below 2^22 (`pid_max`), far under this bit.
const WAITERS: u32 = 1 << 31;

/// The word of a turn handed off by its releaser to the sleeper it woke:
/// no thread has this id, and only a writer that has slept may take it.
const HANDED_OFF: u32 = WAITERS - 1;

/// How long a writer may keep taking the turn back while others sleep on
/// it before its release hands the turn to a sleeper: long enough for a
/// few transactions with a warm cache per hand-off, short enough that 15
/// sleepers ahead of a writer cost it milliseconds, not tens of them.
/// Measured (docs/lab-log.md): once the checkpoint thread
/// stopped running a pass at every commit, 250 µs kept the 16-worker claim
/// p99 under 20 ms (16.5 and 19.9 ms, against 22.2 ms with 375 µs), halved
/// the worst claim, and cost 7% of the rate. Public so that the benchmark's
/// report quotes it.
pub const FAIR_EVERY: Duration = Duration::from_micros(250);

/// The longest a sleeper sleeps before it looks whether the owner thread
/// still exists: a transaction takes about 100 µs, so an owner that holds
/// the turn this long is slow, stopped or dead.
const OWNER_CHECK_EVERY: Duration = Duration::from_millis(20);

/// The two lanes sleepers wait in (futex bitsets): a writer's first sleep
/// is in [`FIRST`]; once woken, by a release or at the end of its slice,
/// it sleeps in [`AGAIN`], and a release wakes a sleeper there before one
/// in [`FIRST`]. Why: the kernel keeps a word's sleepers in arrival order,
/// and a woken writer that finds the turn taken back (its releaser may
/// retake it for [`FAIR_EVERY`]) went to the end of that order, so with 16
/// writers a claim now and then waited through the queue several times:
/// with the second lane the claim p99 of 16 worker processes fell from
/// 29-37 ms to 21-25 ms, and with an fsync per commit from 24-36 ms to
/// 10-13 ms (docs/lab-log.md). A writer of an older inbox
/// sleeps with every bit set and is woken by either lane's wake; its plain
/// wake wakes either lane.
const FIRST: NonZeroU32 = NonZeroU32::MIN;
const AGAIN: NonZeroU32 = NonZeroU32::MIN.saturating_add(1);

/// A database's writer turn, mapped.
#[derive(Debug)]
pub struct Turn {
    /// The mapped page; its first word is the lock.
    map: NonNull<AtomicU32>,
    /// This thread's id when the turn was taken, `None` when not held.
    held_as: Option<u32>,
    /// Since when this writer has kept taking the turn back without
    /// sleeping for it or handing it off.
    streak: Option<Instant>,
    /// The longest this writer sleeps before it looks at the owner:
    /// [`OWNER_CHECK_EVERY`] (tests lengthen it to control who wakes).
    slice: Duration,
}

// SAFETY: `Turn` owns its mapping, which is valid in any thread; the word
// is an atomic. (A `NonNull` is not `Send` by default only because it
// could point at anything.)
unsafe impl Send for Turn {}

/// How [`Turn::take`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// This writer holds the turn until [`Turn::give_back`].
    Yes,
    /// The deadline passed first.
    TimedOut,
}

impl Turn {
    /// Maps the turn file of the database at `db`, creating it owner-only;
    /// `None` when it cannot be used (see the module's notes).
    pub fn open(db: &Path) -> Option<Turn> {
        let file = open_file(&crate::file::companion(db, SUFFIX))?;
        let len = usize::try_from(SIZE).ok()?;
        // SAFETY: a fresh shared mapping of the whole file, which is SIZE
        // bytes (checked by `open_file`), at an address the kernel picks;
        // other mappings of the file (other stores, other processes) touch
        // its word only atomically, as this one does. The file may
        // be shortened by another process of this user, which would fault
        // an access; that user can as well delete the database.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &file,
                0,
            )
        }
        .ok()?;
        Some(Turn {
            map: NonNull::new(ptr.cast::<AtomicU32>())?,
            held_as: None,
            streak: None,
            slice: OWNER_CHECK_EVERY,
        })
    }

    /// Takes the turn, sleeping while another writer holds it, until
    /// `deadline`. Takes it over from an owner thread that no longer
    /// exists.
    pub fn take(&mut self, deadline: Instant) -> Taken {
        let me = this_thread();
        let word = self.word();
        let mut slept = false;
        loop {
            let seen = word.load(Ordering::Relaxed);
            // A turn handed off is for a writer that has slept on it.
            if seen == 0 || (slept && seen & !WAITERS == HANDED_OFF) {
                // Once this writer has slept, it cannot tell whether others
                // still sleep, so it takes the turn marked, and its release
                // wakes one.
                let mine = if slept { me | WAITERS } else { me };
                if word
                    .compare_exchange(seen, mine, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    break;
                }
                continue;
            }
            let marked = seen | WAITERS;
            if seen != marked
                && word
                    .compare_exchange(seen, marked, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Taken::TimedOut;
            }
            let lane = if slept { AGAIN } else { FIRST };
            slept = true;
            let slice = deadline.duration_since(now).min(self.slice);
            match sleep(word, marked, slice, lane) {
                // The owner died holding it (or the sleeper a hand-off was
                // for did): take it over, unless someone else just did.
                Err(rustix::io::Errno::TIMEDOUT)
                    if !crate::file::process_runs(marked & !WAITERS)
                        && word
                            .compare_exchange(
                                marked,
                                me | WAITERS,
                                Ordering::Acquire,
                                Ordering::Relaxed,
                            )
                            .is_ok() =>
                {
                    break;
                }
                // Woken, timed out on a live owner, interrupted by a
                // signal, or the word changed before the sleep: look again.
                _ => {}
            }
        }
        self.held_as = Some(me);
        if slept || self.streak.is_none() {
            self.streak = Some(Instant::now());
        }
        Taken::Yes
    }

    /// Whether this writer holds the turn.
    pub fn held(&self) -> bool {
        self.held_as.is_some()
    }

    /// Gives the turn back if this writer holds it. If others sleep on it,
    /// one is woken; and if this writer has kept taking the turn back for
    /// [`FAIR_EVERY`], the turn is handed to that sleeper rather than
    /// freed, so that this writer cannot take it again first.
    pub fn give_back(&mut self) {
        let Some(me) = self.held_as.take() else {
            return;
        };
        let fair = self
            .streak
            .is_some_and(|since| since.elapsed() >= FAIR_EVERY);
        let word = self.word();
        let mut seen = word.load(Ordering::Relaxed);
        // Only a word that is still ours is released: one taken over (this
        // thread looked dead from another pid namespace) is the new
        // owner's.
        while seen & !WAITERS == me {
            let sleepers = seen & WAITERS != 0;
            let next = if sleepers && fair { HANDED_OFF } else { 0 };
            match word.compare_exchange_weak(seen, next, Ordering::Release, Ordering::Relaxed) {
                Ok(_) if !sleepers => {
                    self.streak = None;
                    return;
                }
                Ok(_) => {
                    let woken = wake_one(word);
                    if next == HANDED_OFF {
                        self.streak = None;
                        if woken == 0 {
                            self.unhand();
                        }
                    }
                    return;
                }
                Err(now) => seen = now,
            }
        }
    }

    /// Frees a turn handed off when nobody was asleep to take it (the
    /// sleepers had all left at their deadlines), waking whoever marked it
    /// since.
    fn unhand(&self) {
        let word = self.word();
        let mut seen = word.load(Ordering::Relaxed);
        while seen & !WAITERS == HANDED_OFF {
            match word.compare_exchange_weak(seen, 0, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => {
                    if seen & WAITERS != 0 {
                        wake_one(word);
                    }
                    return;
                }
                Err(now) => seen = now,
            }
        }
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: the mapping is page-aligned, readable and writable, and
        // lives as long as `self`; every process that touches the word
        // does so atomically.
        unsafe { self.map.as_ref() }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.give_back();
        if let Ok(len) = usize::try_from(SIZE) {
            // SAFETY: the mapping `open` made, with its length; no
            // reference to it outlives `self`.
            let _ = unsafe { rustix::mm::munmap(self.map.as_ptr().cast(), len) };
        }
    }
}

/// Sleeps on `word` while it holds `seen`, in `lane`, for at most `slice`
/// (measured by the kernel on the monotonic clock).
fn sleep(word: &AtomicU32, seen: u32, slice: Duration, lane: NonZeroU32) -> rustix::io::Result<()> {
    // A bitset wait takes an absolute time on the monotonic clock.
    let now = rustix::time::clock_gettime(ClockId::Monotonic);
    let until = Timespec::try_from(slice)
        .ok()
        .and_then(|slice| now.checked_add(slice))
        .unwrap_or(now);
    futex::wait_bitset(word, futex::Flags::empty(), seen, Some(&until), lane)
}

/// Wakes one sleeper on `word`, one already woken before ([`AGAIN`]) if
/// any; returns how many woke.
fn wake_one(word: &AtomicU32) -> usize {
    let wake = |lane| futex::wake_bitset(word, futex::Flags::empty(), 1, lane).unwrap_or(0);
    match wake(AGAIN) {
        0 => wake(FIRST),
        woken => woken,
    }
}

/// This thread's id, asked of the kernel once per thread rather than once
/// per write.
fn this_thread() -> u32 {
    thread_local! {
        static ID: u32 = rustix::thread::gettid().as_raw_nonzero().get().unsigned_abs();
    }
    ID.with(|id| *id)
}

/// Opens (creating owner-only) the turn file at `path`, if it is a regular
/// file of this user reached without a symbolic link, [`SIZE`] bytes long
/// (a new file is grown to it; growing only adds zeros, so two processes
/// doing it at once agree).
fn open_file(path: &Path) -> Option<File> {
    let file = crate::file::open_lock_file(path).ok()?;
    let meta = file.metadata().ok()?;
    let mine = meta.uid() == rustix::process::geteuid().as_raw();
    if !meta.is_file() || !mine {
        return None;
    }
    match meta.len() {
        0 => file.set_len(SIZE).ok()?,
        SIZE => {}
        _ => return None,
    }
    Some(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("coord.db");
        (dir, db)
    }

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn a_free_turn_is_taken_and_given_back() {
        let (_dir, db) = db();
        let mut a = Turn::open(&db).unwrap();
        let mut b = Turn::open(&db).unwrap();
        assert_eq!(a.take(soon(0)), Taken::Yes);
        assert!(a.held());
        assert_eq!(b.take(soon(30)), Taken::TimedOut, "held by a");
        a.give_back();
        assert!(!a.held());
        assert_eq!(b.take(soon(0)), Taken::Yes);
    }

    #[test]
    fn a_sleeper_is_woken_when_the_turn_is_given_back() {
        let (_dir, db) = db();
        let mut a = Turn::open(&db).unwrap();
        assert_eq!(a.take(soon(0)), Taken::Yes);
        let waiter = {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut b = Turn::open(&db).unwrap();
                let asked = Instant::now();
                let taken = b.take(soon(10_000));
                (taken, asked.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        a.give_back();
        let (taken, waited) = waiter.join().unwrap();
        assert_eq!(taken, Taken::Yes);
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    }

    #[test]
    fn a_turn_whose_owner_thread_is_gone_is_taken_over() {
        let (_dir, db) = db();
        let owner = {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut a = Turn::open(&db).unwrap();
                assert_eq!(a.take(soon(0)), Taken::Yes);
                // Leaves without giving it back, as a killed writer does.
                std::mem::forget(a);
            })
        };
        owner.join().unwrap();
        let mut b = Turn::open(&db).unwrap();
        assert_eq!(b.take(soon(5_000)), Taken::Yes);
    }

    /// Not a test of its own: the writer process the tests below start,
    /// which takes the turn of the database `INBOX_TURN_CHILD` names, says
    /// so, and keeps it.
    #[test]
    #[ignore = "run by the tests below, in a child process"]
    fn child_holding_the_turn() {
        let Some(db) = std::env::var_os("INBOX_TURN_CHILD") else {
            return;
        };
        let mut turn = Turn::open(Path::new(&db)).unwrap();
        assert_eq!(turn.take(soon(0)), Taken::Yes);
        println!("held");
        std::thread::sleep(Duration::from_secs(60));
    }

    /// A child process holding the turn of `db`, once it holds it.
    fn holder(db: &Path) -> std::process::Child {
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "writer_turn::tests::child_holding_the_turn"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env("INBOX_TURN_CHILD", db)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("held") {
            line.clear();
            assert_ne!(out.read_line(&mut line).unwrap(), 0, "the child ended");
        }
        child
    }

    #[test]
    fn a_killed_holder_holds_nobody_up_even_unreaped() {
        let (_dir, db) = db();
        let mut child = holder(&db);
        let mut turn = Turn::open(&db).unwrap();
        assert_eq!(turn.take(soon(30)), Taken::TimedOut, "the child holds it");
        child.kill().unwrap();
        // Not reaped yet: the child is a zombie.
        let asked = Instant::now();
        assert_eq!(turn.take(soon(5_000)), Taken::Yes);
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "{:?}",
            asked.elapsed()
        );
        child.wait().unwrap();
    }

    #[test]
    fn a_stopped_holder_is_waited_for_until_the_deadline_only() {
        let (_dir, db) = db();
        let mut child = holder(&db);
        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
        let mut turn = Turn::open(&db).unwrap();
        let asked = Instant::now();
        assert_eq!(turn.take(soon(200)), Taken::TimedOut);
        let waited = asked.elapsed();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_writer_that_kept_the_turn_hands_it_to_a_sleeper() {
        let (_dir, db) = db();
        let mut a = Turn::open(&db).unwrap();
        assert_eq!(a.take(soon(0)), Taken::Yes);
        let (tid, sleeper) = std::sync::mpsc::channel();
        let waiter = {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut b = Turn::open(&db).unwrap();
                tid.send(rustix::thread::gettid().as_raw_nonzero().get())
                    .unwrap();
                assert_eq!(b.take(soon(10_000)), Taken::Yes);
                std::thread::sleep(Duration::from_millis(50));
                b.give_back();
            })
        };
        // Until the sleeper is asleep on the word (its only way to block
        // once it has marked the word).
        let sleeper = sleeper.recv().unwrap();
        while a.word().load(Ordering::Relaxed) & WAITERS == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        until_asleep(sleeper);
        // `a` has kept the turn past its streak: even though it asks again
        // at once, the turn is the sleeper's.
        a.streak = Some(Instant::now() - FAIR_EVERY);
        a.give_back();
        assert_eq!(a.take(soon(0)), Taken::TimedOut, "handed to the sleeper");
        waiter.join().unwrap();
        assert_eq!(a.take(soon(0)), Taken::Yes);
    }

    /// Until the thread `tid` of this process is asleep.
    fn until_asleep(tid: i32) {
        let stat = format!("/proc/self/task/{tid}/stat");
        while !std::fs::read_to_string(&stat).unwrap().contains(") S ") {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A writer that takes the turn of `db` when it can, says so on
    /// `order`, and gives it back; returns its thread id once started.
    fn queued_writer(
        db: &Path,
        name: &'static str,
        order: &std::sync::mpsc::Sender<&'static str>,
    ) -> (i32, std::thread::JoinHandle<()>) {
        let (db, order) = (db.to_path_buf(), order.clone());
        let (tid, started) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            let mut turn = Turn::open(&db).unwrap();
            // No slice ends during the test: only releases wake.
            turn.slice = Duration::from_secs(60);
            tid.send(rustix::thread::gettid().as_raw_nonzero().get())
                .unwrap();
            assert_eq!(turn.take(soon(60_000)), Taken::Yes);
            order.send(name).unwrap();
            turn.give_back();
        });
        (started.recv().unwrap(), writer)
    }

    #[test]
    fn a_sleeper_woken_to_find_the_turn_taken_keeps_its_place() {
        let (_dir, db) = db();
        let mut a = Turn::open(&db).unwrap();
        assert_eq!(a.take(soon(0)), Taken::Yes);
        let (order, taken) = std::sync::mpsc::channel();
        let (b, b_writer) = queued_writer(&db, "b", &order);
        until_asleep(b);
        let (c, c_writer) = queued_writer(&db, "c", &order);
        until_asleep(c);
        // b, the first asleep, is woken while `a` still holds the turn, as
        // when a releaser takes it back before its sleeper runs; it sleeps
        // again, and c has slept longer in the kernel's order.
        assert_eq!(wake_one(a.word()), 1);
        std::thread::sleep(Duration::from_millis(20));
        until_asleep(b);
        a.give_back();
        b_writer.join().unwrap();
        c_writer.join().unwrap();
        let order: Vec<_> = taken.try_iter().collect();
        assert_eq!(order, ["b", "c"], "b keeps its place ahead of c");
    }

    #[test]
    fn a_hand_off_nobody_takes_is_taken_over() {
        let (_dir, db) = db();
        let mut a = Turn::open(&db).unwrap();
        a.word().store(HANDED_OFF | WAITERS, Ordering::Relaxed);
        assert_eq!(a.take(soon(5_000)), Taken::Yes);
    }

    #[test]
    fn the_turn_is_exclusive() {
        let (_dir, db) = db();
        let inside = std::sync::Arc::new(AtomicU32::new(0));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (db, inside) = (db.clone(), inside.clone());
                std::thread::spawn(move || {
                    let mut turn = Turn::open(&db).unwrap();
                    for _ in 0..2_000 {
                        assert_eq!(turn.take(soon(10_000)), Taken::Yes);
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        turn.give_back();
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
    }

    #[test]
    fn a_file_of_another_size_or_a_link_is_not_used() {
        let (dir, db) = db();
        std::fs::write(crate::file::companion(&db, SUFFIX), b"not a turn").unwrap();
        assert!(Turn::open(&db).is_none());
        let other = dir.path().join("other.db");
        let target = dir.path().join("target");
        std::fs::write(&target, vec![0u8; 4096]).unwrap();
        std::os::unix::fs::symlink(&target, crate::file::companion(&other, SUFFIX)).unwrap();
        assert!(Turn::open(&other).is_none());
    }
}
