//! Workload 13: the live board (`inbox serve`). Two figures, each against
//! a baseline measured in the same run: commit to visible, from just
//! before a real `inbox send` process starts to its event arriving on the
//! board's event stream (`GET /api/events`, what an open page holds), with
//! a waiting `inbox watch --json` process on the same commit as the
//! baseline (what a CLI leader sees); and the server's idle CPU with 20
//! open streams, against 1 and 0.
//!
//! The servers are started the way a person starts them (`inbox serve
//! --port 0`, the URL read from its first line), on databases in this
//! run's scratch folder, and stopped by their guards even on error. This
//! module must never time anything before its observers are in place: the
//! stream has sent its `hello` and the watch process has had time to block
//! before a send starts, or a latency would include their start-up.

use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use inbox_bench_kit::markdown::Table;
use inbox_bench_kit::stats::{Summary, ratio};
use serde_json::Value;

use super::{check, latency_cells, progress};
use crate::ctx::Ctx;
use crate::fmt::{fmt_ratio, fmt_us};
use crate::proc::{
    ChildGuard, Lines, Rng, clock_ticks_per_second, cpu_ticks, run_checked, threads_cpu_nanos,
    us_between,
};
use crate::report::Section;
use crate::sse::EventStream;

/// Sends before the timed ones (page cache, the server's first requests).
const WARMUP: usize = 3;

/// How long a `inbox watch` process is given to start and block before the
/// send, as in the wake workload's CLI waiters.
const WATCH_SETTLE: Duration = Duration::from_millis(40);

/// How long any one observation may take before the run fails.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Open event streams on the idle boards: the target's 20 and the two
/// baselines.
const STREAMS: [usize; 3] = [0, 1, 20];

/// The commit-to-visible target, p50 in µs.
const TARGET_P50_US: f64 = 250_000.0;

/// The idle target, % of one core with 20 streams.
const TARGET_IDLE_PCT: f64 = 1.0;

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("board", "13. The live board");
    let dir = ctx.tmp.path().join("board");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;

    let n: usize = ctx.size(100, 10);
    progress(&format!("board: {n} sends, board stream and `inbox watch`"));
    let sends = latency(ctx, &dir, n)?;
    let (board, watch) = (Summary::of(&sends.board), Summary::of(&sends.watch));
    latency_table(&mut section, &sends, n);

    let window = Duration::from_secs(ctx.size(20, 3));
    progress(&format!(
        "board: idle CPU with {STREAMS:?} open streams over {window:?}"
    ));
    let idle = idle(ctx, &dir, window)?;
    let ticks = clock_ticks_per_second();
    idle_table(&mut section, &idle, ticks);
    let pct = |streams: usize| {
        idle.iter()
            .find(|i| i.streams == streams)
            .map_or(f64::NAN, |i| i.stat_pct(ticks))
    };
    let (twenty, one, none) = (pct(20), pct(1), pct(0));

    section.notes.push(
        "The server reads the event stream once, whatever the number of pages: one follower \
         thread waits in the same `watch` as `inbox watch` (on SQLite, asleep on the \
         database's change watcher) and hands each event to every open stream. So a commit \
         wakes the server's follower and a waiting `inbox watch` process the same way; what \
         the board adds is forwarding the event to the stream's socket."
            .into(),
    );
    let nanos = |streams: usize| {
        idle.iter()
            .find(|i| i.streams == streams)
            .map_or(f64::NAN, |i| i.nanos as f64)
    };
    let growth = ratio(nanos(20), nanos(0));
    section.notes.push(if growth.is_some_and(|g| g <= 1.5) {
        format!(
            "The idle cost does not grow with the open streams (20 ÷ none: {}, threads' \
             schedstat): it is the follower's own wait, which sleeps until a commit wakes \
             it, with the same safety looks as a plain `inbox watch`.",
            fmt_ratio(growth)
        )
    } else {
        format!(
            "The idle cost grows with the open streams (20 ÷ none: {}, threads' schedstat).",
            fmt_ratio(growth)
        )
    });
    section.notes.push(
        "The browser test (`cli/tests/board/`) goes one step further, to the card in the \
         page's DOM: the page fetches the thread through the API after the event and renders \
         it. This section stops at the event's arrival, which is what the server controls."
            .into(),
    );
    section.notes.push(
        "`inbox-serve` is a program of its own, which `inbox serve` starts; `inbox` and \
         `orch` link no HTTP stack, so a plain command's cost is what section 8 measures \
         against a baseline build."
            .into(),
    );

    section.checks.push(check(
        "board commit to visible p50 ≤ 250 ms (`inbox send` started → its event on the board's stream)",
        format!(
            "{} (p99 {}; `inbox watch` {})",
            fmt_us(board.p50),
            fmt_us(board.p99),
            fmt_us(watch.p50)
        ),
        board.p50 <= TARGET_P50_US,
        format!(
            "{} over; the `inbox send` process alone took {} (p50): see the table",
            fmt_us(board.p50 - TARGET_P50_US),
            fmt_us(Summary::of(&sends.send).p50)
        ),
    ));
    section.checks.push(check(
        "board idle CPU ≤ 1 % of a core with 20 open event streams",
        format!("{twenty:.2} % (1 stream {one:.2} %, none {none:.2} %)"),
        twenty <= TARGET_IDLE_PCT,
        format!(
            "{:.2} points over; with no stream open it is {none:.2} %, so the cost is {}",
            twenty - TARGET_IDLE_PCT,
            if twenty > 2.0 * none.max(0.01) {
                "the streams'"
            } else {
                "the server's own, not the streams'"
            }
        ),
    ));
    section.headlines.push(format!(
        "commit to visible (`inbox send` started → its event on the board's stream) p50 {} / \
         p99 {}, {} a waiting `inbox watch` CLI process on the same commits (p50 {}); idle \
         with 20 open streams {twenty:.2} % of a core (1: {one:.2} %, none: {none:.2} %)",
        fmt_us(board.p50),
        fmt_us(board.p99),
        fmt_ratio(ratio(board.p50, watch.p50)),
        fmt_us(watch.p50),
    ));
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}

/// A running `inbox serve` and the address it listens on.
struct Board {
    child: ChildGuard,
    /// `127.0.0.1:PORT`, from the URL it printed.
    host: String,
    /// The token in the URL's fragment (`#token=...`): every read needs it.
    token: String,
    /// Keeps the reader of its stdout (one line, then nothing) alive.
    _stdout: Lines,
}

impl Board {
    /// `inbox serve --port 0` on `db`, read-only, on loopback; its log goes
    /// to a file beside the database, quoted if it does not start.
    fn start(ctx: &Ctx, db: &Path) -> Result<Board> {
        let log = db.with_extension("serve.log");
        let stderr =
            File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let mut cmd = ctx.inbox(db);
        cmd.args(["serve", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = ChildGuard::spawn(&mut cmd, "inbox serve")?;
        let stdout = child.lines()?;
        let url = stdout.next(Duration::from_secs(30)).map_err(|e| {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            anyhow!("{e}: {}", said.trim())
        })?;
        // The CPU figures are read by this pid: `inbox` must have handed
        // its process over to the server (exec), not be waiting on it.
        let exe = std::fs::read_link(format!("/proc/{}/exe", child.pid())).ok();
        if exe.as_ref().and_then(|e| e.canonicalize().ok()) != ctx.bins.serve.canonicalize().ok() {
            bail!(
                "pid {} runs {exe:?}, not {}",
                child.pid(),
                ctx.bins.serve.display()
            );
        }
        let host = url
            .1
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .filter(|host| !host.is_empty())
            .ok_or_else(|| anyhow!("inbox serve printed `{}`, not its URL", url.1))?
            .to_owned();
        let token = url
            .1
            .split_once("#token=")
            .map(|(_, token)| token.to_owned())
            .ok_or_else(|| anyhow!("inbox serve printed `{}`, a URL without its token", url.1))?;
        Ok(Board {
            child,
            host,
            token,
            _stdout: stdout,
        })
    }

    /// A new event stream, once its `hello` arrived; with the event id the
    /// hello names (the newest event when it connected).
    fn stream(&self) -> Result<(EventStream, u64)> {
        let stream = EventStream::connect(&self.host, "/api/events", &self.token)?;
        let (_, hello) = stream.next(TIMEOUT)?;
        match (hello.name.as_str(), hello.id) {
            ("hello", Some(id)) => Ok((stream, id)),
            _ => bail!("the board's stream began with {hello:?}, not its hello"),
        }
    }
}

/// `inbox init` on a new database at `db`.
fn init(ctx: &Ctx, db: &Path) -> Result<()> {
    run_checked(ctx.inbox(db).args(["init", "--json"]), &[]).map(drop)
}

/// The latencies of the timed sends, in µs, each from just before the
/// `inbox send` process was started.
struct Sends {
    /// To its event on the board's stream.
    board: Vec<f64>,
    /// To the waiting `inbox watch` process's line.
    watch: Vec<f64>,
    /// To the `inbox send` process's exit.
    send: Vec<f64>,
}

/// `n` timed sends (after [`WARMUP`]), each seen by the board's stream and
/// by an `inbox watch` process started for it.
fn latency(ctx: &Ctx, dir: &Path, n: usize) -> Result<Sends> {
    let db = dir.join("latency.db");
    init(ctx, &db)?;
    let board = Board::start(ctx, &db)?;
    let (stream, mut cursor) = board.stream()?;
    let mut rng = Rng::new(n as u64);
    let mut sends = Sends {
        board: Vec::with_capacity(n),
        watch: Vec::with_capacity(n),
        send: Vec::with_capacity(n),
    };
    for i in 0..WARMUP + n {
        let mut watch_cmd = ctx.inbox(&db);
        watch_cmd
            .args([
                "watch",
                "--json",
                "--timeout-seconds",
                "30",
                "--after-event",
            ])
            .arg(cursor.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut watcher = ChildGuard::spawn(&mut watch_cmd, "inbox watch")?;
        let woken = watcher.lines()?;
        std::thread::sleep(WATCH_SETTLE + rng.between(Duration::ZERO, Duration::from_millis(10)));

        let mut send_cmd = ctx.inbox(&db);
        send_cmd
            .args(["send", "--from", "lead", "--to", "worker", "--json"])
            .arg("--subject")
            .arg(format!("Board benchmark task {i}"));
        // The send runs on a thread so this one reads the two observers
        // while it is still exiting; each side timestamps on arrival.
        let (sent, seen, woke) = std::thread::scope(|scope| {
            let sender = scope.spawn(move || {
                let t0 = Instant::now();
                run_checked(&mut send_cmd, &[]).map(|(_, out)| (t0, Instant::now(), out))
            });
            let seen = next_change(&stream, cursor);
            let woke = woken.next(TIMEOUT);
            let sent = sender
                .join()
                .map_err(|_| anyhow!("the sending thread panicked"))?;
            Ok::<_, anyhow::Error>((sent?, seen?, woke?))
        })?;
        let (t0, exited, out) = sent;
        let event = serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .and_then(|v| v["message"]["event_id"].as_u64())
            .ok_or_else(|| anyhow!("inbox send printed no message.event_id"))?;
        if seen.1 != event {
            bail!(
                "the board's stream sent event {} after {cursor}, the send made {event}",
                seen.1
            );
        }
        if !watch_saw(&woke.1, event) {
            bail!("inbox watch woke without event {event}: {}", woke.1);
        }
        let code = watcher.wait_code()?;
        if code != 0 {
            bail!("inbox watch exited with {code}: {}", woke.1);
        }
        cursor = event;
        if i >= WARMUP {
            sends.board.push(us_between(t0, seen.0));
            sends.watch.push(us_between(t0, woke.0));
            sends.send.push(us_between(t0, exited));
        }
    }
    Ok(sends)
}

/// The next change on the stream after `cursor`: when it arrived and its
/// id. A `resync` (the stream fell behind) fails the run.
fn next_change(stream: &EventStream, cursor: u64) -> Result<(Instant, u64)> {
    loop {
        let (at, event) = stream.next(TIMEOUT)?;
        match (event.name.as_str(), event.id) {
            ("", Some(id)) if id > cursor => return Ok((at, id)),
            ("", _) | ("hello", _) => {}
            _ => bail!("the board's stream sent {event:?}"),
        }
    }
}

/// Whether a `watch --json` line lists `event`.
fn watch_saw(line: &str, event: u64) -> bool {
    serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| {
            v["events"]
                .as_array()
                .map(|events| events.iter().any(|e| e["event_id"].as_u64() == Some(event)))
        })
        .unwrap_or(false)
}

fn latency_table(section: &mut Section, sends: &Sends, n: usize) {
    section.intro.push(format!(
        "**Commit to visible.** A new SQLite database (normal durability), `inbox serve \
         --port 0` on it (the harness reads the URL from its first line of output) and one \
         event stream, `GET /api/events` on a plain HTTP/1.1 connection read as it arrives \
         (what an open page holds). Then {n} times, after {WARMUP} untimed: an `inbox watch \
         --json --after-event CURSOR` process is started on the same database and given {} ms \
         to block (what a CLI leader waits in), and the harness starts a real `inbox send` \
         process and measures from just before starting it to the arrival of the stream's \
         event with the send's event id, and to the watch process's line. Both observe the \
         same commit, so the ratio is the board's delay against what a CLI leader sees, and \
         the per-send difference is what the board adds. Both include the `inbox send` \
         process itself, timed to its exit in the last row.",
        WATCH_SETTLE.as_millis()
    ));
    let watch_p50 = Summary::of(&sends.watch).p50;
    let mut table = Table::new(
        "**Commit to visible**: p50/p99/max from just before the `inbox send` process \
         started; last column: p50 as a multiple of the `inbox watch` process's, on the same \
         sends. The difference row is negative where the board's event arrived first.",
        [
            "observer",
            "sends",
            "p50",
            "p99",
            "max",
            "p50 ÷ inbox watch",
        ],
    );
    let added: Vec<f64> = sends
        .board
        .iter()
        .zip(&sends.watch)
        .map(|(b, w)| b - w)
        .collect();
    let rows: [(&str, &[f64], bool); 4] = [
        (
            "the board's event stream (`GET /api/events`)",
            &sends.board,
            true,
        ),
        (
            "`inbox watch --json` CLI process (baseline)",
            &sends.watch,
            true,
        ),
        (
            "board minus `inbox watch`, per send (what the board adds)",
            &added,
            false,
        ),
        (
            "the `inbox send` process itself, to its exit",
            &sends.send,
            false,
        ),
    ];
    for (label, samples, ratioed) in rows {
        let s = Summary::of(samples);
        let mut cells = vec![label.to_owned(), s.n.to_string()];
        cells.extend(latency_cells(&s));
        cells.push(if ratioed {
            fmt_ratio(ratio(s.p50, watch_p50))
        } else {
            "—".into()
        });
        table.row(cells);
    }
    section.tables.push(table);
}

/// One idle board's CPU over the window.
struct Idle {
    streams: usize,
    /// utime + stime from `/proc/PID/stat`, in clock ticks.
    ticks: u64,
    /// The sum of its threads' `schedstat`, in ns.
    nanos: u64,
    /// The window, measured.
    seconds: f64,
}

impl Idle {
    /// % of one core from the clock ticks.
    fn stat_pct(&self, ticks_per_second: u64) -> f64 {
        self.ticks as f64 / ticks_per_second.max(1) as f64 / self.seconds * 100.0
    }

    /// % of one core from the threads' schedstat.
    fn nanos_pct(&self) -> f64 {
        self.nanos as f64 / 1e9 / self.seconds * 100.0
    }
}

/// One board per entry of [`STREAMS`], each on a database in a folder of
/// its own (the change watcher watches the folder), all idle over the
/// same window.
fn idle(ctx: &Ctx, dir: &Path, window: Duration) -> Result<Vec<Idle>> {
    let mut boards = Vec::new();
    for streams in STREAMS {
        let folder = dir.join(format!("idle-{streams}"));
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("cannot create {}", folder.display()))?;
        let db = folder.join("board.db");
        init(ctx, &db)?;
        let board = Board::start(ctx, &db)?;
        let open = (0..streams)
            .map(|_| board.stream().map(|(stream, _)| stream))
            .collect::<Result<Vec<_>>>()?;
        boards.push((streams, board, open));
    }
    // Let start-up finish before counting.
    std::thread::sleep(Duration::from_millis(ctx.size(1000, 500)));
    let sample = |board: &Board| -> Result<(u64, u64)> {
        let pid = board.child.pid();
        Ok((cpu_ticks(pid)?, threads_cpu_nanos(pid)?))
    };
    let before = boards
        .iter()
        .map(|(_, board, _)| sample(board))
        .collect::<Result<Vec<_>>>()?;
    let t0 = Instant::now();
    std::thread::sleep(window);
    let seconds = t0.elapsed().as_secs_f64();
    let mut out = Vec::new();
    for ((streams, board, open), (ticks, nanos)) in boards.iter().zip(before) {
        let (ticks_after, nanos_after) = sample(board)?;
        // A board that died in the window would read as idle: it must
        // still answer a new stream.
        board
            .stream()
            .with_context(|| format!("the board with {streams} streams stopped answering"))?;
        if open.len() != *streams {
            bail!("{} of {streams} streams open", open.len());
        }
        out.push(Idle {
            streams: *streams,
            ticks: ticks_after.saturating_sub(ticks),
            nanos: nanos_after.saturating_sub(nanos),
            seconds,
        });
    }
    Ok(out)
}

fn idle_table(section: &mut Section, idle: &[Idle], ticks_per_second: u64) {
    let seconds = idle.first().map_or(0.0, |i| i.seconds);
    section.intro.push(format!(
        "**Idle cost.** Three boards at once, each on a new database in a folder of its own, \
         with {}, {} and {} open event streams (each had its `hello`), left alone for {seconds:.0} s \
         after a moment to settle; then a new stream is opened on each to check it still \
         answers. CPU time of the `inbox-serve` process: user + system from `/proc/PID/stat` \
         (every thread), in clock ticks of 1/{ticks_per_second} s (`sysconf(_SC_CLK_TCK)`), \
         so one tick is {:.2} % of a core over the window; and, finer, the sum of its \
         threads' `/proc/PID/task/*/schedstat`.",
        STREAMS[0],
        STREAMS[1],
        STREAMS[2],
        100.0 / ticks_per_second.max(1) as f64 / seconds.max(f64::MIN_POSITIVE)
    ));
    let none = idle.iter().find(|i| i.streams == 0).map(|i| i.nanos as f64);
    let mut table = Table::new(
        format!(
            "**Idle board CPU** over {seconds:.1} s, as a share of one core; last column: the \
             threads' CPU time as a multiple of the board with no stream open."
        ),
        [
            "open streams",
            "CPU (stat)",
            "% of a core (stat)",
            "CPU (threads' schedstat)",
            "% of a core (schedstat)",
            "÷ no stream",
        ],
    );
    for i in idle {
        table.row(vec![
            i.streams.to_string(),
            format!(
                "{} tick{} = {:.0} ms",
                i.ticks,
                if i.ticks == 1 { "" } else { "s" },
                i.ticks as f64 * 1e3 / ticks_per_second.max(1) as f64
            ),
            format!("{:.2} %", i.stat_pct(ticks_per_second)),
            format!("{:.1} ms", i.nanos as f64 / 1e6),
            format!("{:.3} %", i.nanos_pct()),
            fmt_ratio(none.and_then(|none| ratio(i.nanos as f64, none))),
        ]);
    }
    section.tables.push(table);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_line_is_checked_for_the_event() {
        let line = r#"{"ok":true,"command":"watch","woke":true,"next_event_id":4,"events":[{"event_id":4}]}"#;
        assert!(watch_saw(line, 4));
        assert!(!watch_saw(line, 5));
        assert!(!watch_saw("error: no", 4));
    }
}
