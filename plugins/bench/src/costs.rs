//! What the component costs apart from running commands: compiling it
//! (with and without wasmtime's cache), instantiating it, the memory an
//! instance holds, and the fuel each command burns.
//!
//! Only the host crate's public API is used (`Plugin`, `PluginEngine`), so
//! every figure is what an embedding host gets; where that API does not
//! expose a number (an instance's linear memory), the figure comes from
//! outside (the process's resident memory) and the report says so. This
//! module must never change the host or reach into an instance.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use inbox_engine::{ManualClock, MemoryStore, Store};
use inbox_plugin_host::{Limits, Plugin};
use serde::Serialize;

use inbox_bench_kit::rates::{CLAIM_NEXT_JSON, JsonEngine, done_json, lease_of, send_json};
use inbox_bench_kit::stats::Spread;
use inbox_bench_kit::stores;

use crate::engines::Component;

/// Seconds to load the component, three ways, one sample per round.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CompileCosts {
    /// `Plugin::from_file`: read and compile, no cache.
    pub(crate) from_file: Spread,
    /// `Plugin::from_file_cached` with an empty cache folder: compile and
    /// write the compiled code to the cache.
    pub(crate) cached_cold: Spread,
    /// `Plugin::from_file_cached` again with the folder the cold load
    /// filled: read the compiled code back.
    pub(crate) cached_warm: Spread,
    /// What the cold load left in the cache folder (the last round's), in
    /// bytes and files.
    pub(crate) cache_bytes: u64,
    /// Files in that folder.
    pub(crate) cache_files: u64,
}

/// Loads the component at `component` `rounds` times each way; cache
/// folders go under `dir`, a new one per round.
pub(crate) fn compile(component: &Path, rounds: u64, dir: &Path) -> Result<CompileCosts> {
    let limits = Limits::default();
    let mut from_file = Vec::new();
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    let (mut cache_bytes, mut cache_files) = (0, 0);
    for round in 0..rounds {
        let start = Instant::now();
        let plugin = Plugin::from_file(component, limits)?;
        from_file.push(start.elapsed().as_secs_f64());
        drop(plugin);

        let cache = dir.join(format!("wasmtime-cache-{round}"));
        std::fs::create_dir_all(&cache)
            .with_context(|| format!("cannot create {}", cache.display()))?;
        let start = Instant::now();
        let plugin = Plugin::from_file_cached(component, limits, &cache)?;
        cold.push(start.elapsed().as_secs_f64());
        drop(plugin);
        (cache_bytes, cache_files) = folder_size(&cache);
        if cache_files == 0 {
            bail!(
                "wasmtime wrote nothing to the cache folder {}: a warm load would measure another compile",
                cache.display()
            );
        }

        let start = Instant::now();
        let plugin = Plugin::from_file_cached(component, limits, &cache)?;
        warm.push(start.elapsed().as_secs_f64());
        drop(plugin);
        eprintln!("  load round {}/{rounds}", round + 1);
    }
    let spread = |samples: &[f64]| Spread::of(samples).ok_or_else(|| anyhow!("no load rounds"));
    Ok(CompileCosts {
        from_file: spread(&from_file)?,
        cached_cold: spread(&cold)?,
        cached_warm: spread(&warm)?,
        cache_bytes,
        cache_files,
    })
}

/// Total bytes and files under `dir` (0 for what cannot be read).
fn folder_size(dir: &Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    let mut total = (0, 0);
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if meta.is_dir() {
            let (bytes, files) = folder_size(&entry.path());
            total.0 += bytes;
            total.1 += files;
        } else {
            total.0 += meta.len();
            total.1 += 1;
        }
    }
    total
}

/// Seconds per instance, one sample per instance.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct InstantiateCosts {
    /// `Plugin::instantiate` over an initialized `MemoryStore`.
    pub(crate) instantiate: Spread,
    /// `Plugin::instantiate` and the instance's first command (a `send`),
    /// what a host that makes an instance per request pays.
    pub(crate) instantiate_and_send: Spread,
}

/// Instantiates `count` times each way. The store is made before the timer
/// starts and the instance dropped after it stops: the figure is the
/// instantiation alone.
pub(crate) fn instantiate(plugin: &Plugin, count: u64) -> Result<InstantiateCosts> {
    let mut alone = Vec::new();
    let mut with_send = Vec::new();
    for i in 0..count {
        let store = stores::memory()?;
        let start = Instant::now();
        let instance = plugin.instantiate(store, clock(), i)?;
        alone.push(start.elapsed().as_secs_f64());
        drop(instance);

        let store = stores::memory()?;
        let start = Instant::now();
        let mut instance = Component(plugin.instantiate(store, clock(), i)?);
        instance.expect_exit(&send_json(i), 0)?;
        with_send.push(start.elapsed().as_secs_f64());
        drop(instance);
    }
    let spread = |samples: &[f64]| Spread::of(samples).ok_or_else(|| anyhow!("no instances"));
    Ok(InstantiateCosts {
        instantiate: spread(&alone)?,
        instantiate_and_send: spread(&with_send)?,
    })
}

/// The process's resident memory that live instances add, per instance.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct InstanceMemory {
    /// Instances held alive at once.
    pub(crate) instances: u64,
    /// Resident KiB per instance just after instantiation.
    pub(crate) kib_instantiated: f64,
    /// Resident KiB per instance after each ran one `send`.
    pub(crate) kib_after_send: f64,
}

/// Holds `count` instances over `MemoryStore`s alive and reads the
/// process's resident set before, after instantiating them and after one
/// `send` in each. One instance is made and dropped first, so lazily
/// allocated process-wide state does not count against the instances.
pub(crate) fn instance_memory(plugin: &Plugin, count: u64) -> Result<InstanceMemory> {
    if count == 0 {
        bail!("no instances to measure");
    }
    drop(plugin.instantiate(stores::memory()?, clock(), 0)?);
    let before = resident_kib()?;
    let mut held: Vec<Component<MemoryStore, ManualClock>> = Vec::new();
    for i in 0..count {
        held.push(Component(plugin.instantiate(
            stores::memory()?,
            clock(),
            i,
        )?));
    }
    let instantiated = resident_kib()?;
    for (i, instance) in (0..).zip(held.iter_mut()) {
        instance.expect_exit(&send_json(i), 0)?;
    }
    let after_send = resident_kib()?;
    drop(held);
    let per = |kib: u64| kib.saturating_sub(before) as f64 / count as f64;
    Ok(InstanceMemory {
        instances: count,
        kib_instantiated: per(instantiated),
        kib_after_send: per(after_send),
    })
}

/// This process's resident set size in KiB (Linux `/proc/self/status`).
fn resident_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")
        .context("cannot read /proc/self/status (resident memory is measured on Linux only)")?;
    vm_rss_kib(&status).ok_or_else(|| anyhow!("/proc/self/status has no VmRSS line"))
}

/// The `VmRSS:` figure of a `/proc/<pid>/status` text, in KiB.
pub(crate) fn vm_rss_kib(status: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        line.strip_prefix("VmRSS:")?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    })
}

/// The fuel one command burned, over each store.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct FuelRow {
    /// What ran.
    pub(crate) command: String,
    /// Over a `MemoryStore`.
    pub(crate) memory: u64,
    /// Over a SQLite file.
    pub(crate) sqlite_file: u64,
}

/// Fuel per command and whether it repeated exactly.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct FuelCosts {
    /// Each command of the sequence, in order.
    pub(crate) rows: Vec<FuelRow>,
    /// Whether a second run of the sequence over a new `MemoryStore` burned
    /// exactly the same fuel, command for command.
    pub(crate) deterministic: bool,
    /// The budget every call gets (`Limits::DEFAULT.fuel`).
    pub(crate) limit: u64,
}

/// Runs a fixed sequence (init, send, fetch, claim, show, done, list, then
/// a `list` of `list_threads` threads) on a fixed clock and seed, over a
/// `MemoryStore` twice and over a SQLite file under `dir` once, reading
/// `fuel_used` after each command.
pub(crate) fn fuel(plugin: &Plugin, dir: &Path, list_threads: u64) -> Result<FuelCosts> {
    let first = fuel_sequence(
        Component(plugin.instantiate(MemoryStore::new(), clock(), 1)?),
        list_threads,
    )?;
    let again = fuel_sequence(
        Component(plugin.instantiate(MemoryStore::new(), clock(), 1)?),
        list_threads,
    )?;
    let path = dir.join("fuel.db");
    stores::remove_sqlite(&path)?;
    // Created empty: the sequence's own `init` initializes it.
    let created = inbox_sqlite::open::open_or_create(&path)
        .map_err(|e| anyhow!("cannot create {}: {e}", path.display()))?;
    let sqlite = fuel_sequence(
        Component(plugin.instantiate(created, clock(), 1)?),
        list_threads,
    )?;
    stores::remove_sqlite(&path)?;
    let deterministic = first == again;
    let rows = first
        .into_iter()
        .zip(sqlite)
        .map(|((command, memory), (_, sqlite_file))| FuelRow {
            command,
            memory,
            sqlite_file,
        })
        .collect();
    Ok(FuelCosts {
        rows,
        deterministic,
        limit: Limits::DEFAULT.fuel,
    })
}

/// The sequence, returning (what ran, fuel) per recorded command.
fn fuel_sequence<S: Store + 'static>(
    mut engine: Component<S, ManualClock>,
    list_threads: u64,
) -> Result<Vec<(String, u64)>> {
    let mut rows = Vec::new();
    let mut run = |engine: &mut Component<S, ManualClock>,
                   label: &str,
                   request: &str,
                   exit: u8|
     -> Result<String> {
        let answer = engine.expect_exit(request, exit)?;
        rows.push((label.to_owned(), engine.0.fuel_used()));
        Ok(answer.json)
    };
    run(
        &mut engine,
        "`init` (a new store)",
        r#"{"command":"init"}"#,
        0,
    )?;
    run(&mut engine, "`send` (a new thread)", &send_json(0), 0)?;
    run(
        &mut engine,
        "`fetch` (one candidate)",
        r#"{"command":"fetch","agent":"worker"}"#,
        0,
    )?;
    let claimed = run(&mut engine, "`claim` with `next`", CLAIM_NEXT_JSON, 0)?;
    let lease = lease_of(&claimed)?;
    run(
        &mut engine,
        "`show` (a thread of one message)",
        &format!(r#"{{"command":"show","thread_id":"{}"}}"#, lease.thread_id),
        0,
    )?;
    run(&mut engine, "`done`", &done_json(&lease), 0)?;
    run(
        &mut engine,
        "`list` (one thread)",
        r#"{"command":"list"}"#,
        0,
    )?;
    for seq in 1..list_threads {
        engine.expect_exit(&send_json(seq), 0)?;
    }
    run(
        &mut engine,
        &format!("`list` of {list_threads} threads (`limit` {list_threads})"),
        &format!(r#"{{"command":"list","limit":{list_threads}}}"#),
        0,
    )?;
    Ok(rows)
}

/// The fixed clock of the measurements that must repeat exactly.
fn clock() -> ManualClock {
    ManualClock::new(ManualClock::SCRIPT_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_resident_set_from_proc_status() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t    4242 kB\nThreads:\t1\n";
        assert_eq!(vm_rss_kib(status), Some(4242));
        assert_eq!(vm_rss_kib("Name:\tx\n"), None);
    }
}
