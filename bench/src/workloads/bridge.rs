//! Workload 10: the bridges. How long a descriptor dropped into a folder
//! takes to become an inbox thread through `inbox bridge file-drop` (woken
//! by inotify), against seed 001's own poller (every 2 s, one descriptor
//! per tick) measured in the same run on the same machine.
//!
//! Each descriptor is written beside the folder and renamed into it (a
//! writer's atomic drop), one at a time; the clock stops when the bridge's
//! `dispatched` line is read, which it prints after the thread committed,
//! the `.result` was written and the descriptor renamed `.processed`: an
//! upper bound of "the thread exists". The seed's poller is modelled as
//! the seed describes it (list, take the first by name, rename, write the
//! `.result`) and timed to its `.result`. This module must never measure
//! the two on one folder.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};
use inbox_bench::files::filedrop::POLL;
use inbox_bench_kit::markdown::Table;
use inbox_bench_kit::stats::Summary;

use super::{check, latency_cells, progress};
use crate::ctx::Ctx;
use crate::fmt::{fmt_ratio, fmt_us};
use crate::peers::Durability;
use crate::peers::inbox::create;
use crate::report::Section;

/// A descriptor of about the size the seed's examples have.
fn descriptor(i: usize) -> String {
    format!(
        "{{\"version\":1,\"kind\":\"prompt\",\"prompt\":\"Summarise the changes of batch {i} and \
         list the workers' last activity.\"}}"
    )
}

/// Drops descriptor `i` into `dir`: written beside it, renamed in.
fn drop_one(dir: &Path, i: usize) -> Result<Instant> {
    let staged = dir.with_extension(format!("staged-{i}"));
    std::fs::write(&staged, descriptor(i))?;
    let landed = Instant::now();
    std::fs::rename(&staged, dir.join(format!("d-{i:06}.task.json")))?;
    Ok(landed)
}

/// Latencies (µs) of `n` descriptors through `inbox bridge file-drop`.
fn through_bridge(ctx: &Ctx, n: usize) -> Result<Vec<f64>> {
    let db = ctx.tmp.path().join("bridge.db");
    create(&db, Durability::Normal)?;
    let dir = ctx.tmp.path().join("bridge-drop");
    std::fs::create_dir_all(&dir)?;
    let mut child = ctx
        .inbox(&db)
        .args(["bridge", "file-drop"])
        .arg(&dir)
        .args(["--to", "worker", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start inbox bridge file-drop")?;
    let mut lines = BufReader::new(child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?);
    let mut next = || -> Result<String> {
        let mut line = String::new();
        lines.read_line(&mut line)?;
        Ok(line)
    };
    let started = next()?;
    if !started.contains("\"watching\"") {
        return Err(anyhow!("the bridge did not start: {started}"));
    }
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let landed = drop_one(&dir, i)?;
        let line = next()?;
        samples.push(landed.elapsed().as_secs_f64() * 1e6);
        if !line.contains("\"dispatched\"") {
            return Err(anyhow!("the bridge answered {line}"));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(samples)
}

/// Latencies (µs) of `n` descriptors through seed 001's poller.
fn through_poller(ctx: &Ctx, n: usize) -> Result<Vec<f64>> {
    let dir = ctx.tmp.path().join("poller-drop");
    std::fs::create_dir_all(&dir)?;
    let (done, finished) = mpsc::channel::<()>();
    let poller_dir = dir.clone();
    let poller = std::thread::spawn(move || seed_poller(&poller_dir, n, &done));
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        // Land at points spread evenly over the poller's tick (the middles
        // of n equal slices), as writers unaware of it do; the same in
        // every run.
        let tick = POLL.as_millis() as u64;
        let offset = (2 * i as u64 + 1) * tick / (2 * n as u64);
        std::thread::sleep(Duration::from_millis(offset));
        let landed = drop_one(&dir, i)?;
        finished.recv().map_err(|_| anyhow!("the poller stopped"))?;
        samples.push(landed.elapsed().as_secs_f64() * 1e6);
    }
    poller
        .join()
        .map_err(|_| anyhow!("the poller panicked"))??;
    Ok(samples)
}

/// Seed 001's poller: every [`POLL`], the first descriptor by name is
/// renamed `.processed` beside its `.result`.
fn seed_poller(dir: &Path, n: usize, done: &mpsc::Sender<()>) -> Result<()> {
    let mut handled = 0;
    while handled < n {
        std::thread::sleep(POLL);
        let mut names: Vec<String> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.ends_with(".task.json"))
            .collect();
        names.sort();
        if let Some(name) = names.first() {
            std::fs::rename(dir.join(name), dir.join(format!("{name}.processed")))?;
            std::fs::write(dir.join(format!("{name}.result")), "{\"ok\":true}")?;
            handled += 1;
            let _ = done.send(());
        }
    }
    Ok(())
}

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("bridge", "10. Bridges: a dropped descriptor to a thread");
    let (n_bridge, n_poller) = (ctx.size(500, 40), ctx.size(30, 4));
    section.intro.push(format!(
        "**From a descriptor landing in a drop folder to its thread**: each `*.task.json` is \
         written beside the folder and renamed into it, one at a time. `inbox bridge file-drop` \
         (woken by inotify; the clock stops when its `dispatched` line is read, printed after \
         the thread committed at normal durability, the `.result` was written and the \
         descriptor renamed) takes {n_bridge}; seed 001's poller (every 2 s, one descriptor \
         per tick; the clock stops at its `.result`) takes {n_poller}, landing at points spread \
         evenly over its tick. Same run, same machine."
    ));
    progress(&format!(
        "bridge: {n_bridge} descriptors through inbox bridge file-drop"
    ));
    let bridge = Summary::of(&through_bridge(ctx, n_bridge)?);
    progress(&format!(
        "bridge: {n_poller} descriptors through a 2 s poller"
    ));
    let poller = Summary::of(&through_poller(ctx, n_poller)?);
    let mut table = Table::new(
        "**Descriptor landing → thread**, latency.",
        vec!["consumer", "n", "p50", "p99", "max", "p50 ÷ bridge's"],
    );
    let mut row = |name: &str, s: &Summary| {
        let mut cells = vec![name.to_owned(), s.n.to_string()];
        cells.extend(latency_cells(s));
        cells.push(fmt_ratio(inbox_bench_kit::stats::ratio(s.p50, bridge.p50)));
        table.row(cells);
    };
    row("inbox bridge file-drop (inotify)", &bridge);
    row("seed 001's poller (2 s)", &poller);
    section.tables.push(table);
    section.headlines.push(format!(
        "a dropped descriptor is a thread in {} (p50) through the bridge, {} through seed 001's 2 s poll",
        fmt_us(bridge.p50),
        fmt_us(poller.p50)
    ));
    section.checks.push(check(
        "descriptor landing → thread p50 ≤ 10 ms",
        fmt_us(bridge.p50),
        bridge.p50 <= 10_000.0,
        "the bridge is slower than the target".into(),
    ));
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}
