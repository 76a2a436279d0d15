//! The raw results of a run ([`Results`], written as JSON) and the Markdown
//! report made from them.
//!
//! Every sentence with a number in it is computed from this run's figures,
//! so the report stays true when the numbers move. This module must never
//! measure anything: it only reads [`Results`].

use inbox_bench_kit::markdown::{Doc, Table};
use inbox_bench_kit::rates::Workload;
use inbox_bench_kit::stats::{Spread, ratio_of};
use inbox_bench_kit::stores::StoreKind;
use serde::Serialize;

use crate::cli::{CliCosts, CliSection};
use crate::component::{ComponentFile, PAGE_BYTES};
use crate::costs::{CompileCosts, FuelCosts, InstanceMemory, InstantiateCosts};
use crate::engines::{EngineKind, STORES};
use crate::fmt::{fmt_bytes, fmt_count, fmt_percent, fmt_rate, fmt_ratio, fmt_seconds};
use crate::machine::Environment;
use crate::options::Sizes;
use crate::rates::Series;

/// Everything one run measured, as `results.json` holds it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Results {
    /// Whether this was a `--quick` smoke run.
    pub(crate) quick: bool,
    /// The sizes used.
    pub(crate) sizes: Sizes,
    /// The machine and versions.
    pub(crate) environment: Environment,
    /// The machine's load when the run started.
    pub(crate) load_start: String,
    /// The machine's load when it ended.
    pub(crate) load_end: String,
    /// The component file.
    pub(crate) component: ComponentFile,
    /// Loading the component.
    pub(crate) compile: CompileCosts,
    /// Instantiating it.
    pub(crate) instantiate: InstantiateCosts,
    /// The resident memory of live instances, or why it was not measured.
    pub(crate) instance_memory: Result<InstanceMemory, String>,
    /// Fuel per command.
    pub(crate) fuel: FuelCosts,
    /// Commands per second, every round.
    pub(crate) rates: Vec<Series>,
    /// Whole CLI processes.
    pub(crate) cli: CliSection,
    /// How long the run took, in seconds.
    pub(crate) seconds: f64,
}

/// The report: its Markdown and the lines worth printing at the end of a
/// run.
pub(crate) struct Report {
    /// The whole document.
    pub(crate) markdown: String,
    /// The summary's lines, for the terminal.
    pub(crate) headlines: Vec<String>,
}

impl Results {
    /// One series' rates.
    fn rate(&self, engine: EngineKind, store: StoreKind, workload: Workload) -> Option<Spread> {
        self.rates
            .iter()
            .find(|s| s.engine == engine && s.store == store && s.workload == workload)
            .and_then(|s| Spread::of(&s.ops_per_sec))
    }

    /// The component's rate over the built-in engine's, round by round (the
    /// two ran moments apart in the same round).
    fn paired_ratios(&self, store: StoreKind, workload: Workload) -> Option<Spread> {
        let of = |engine| {
            self.rates
                .iter()
                .find(|s| s.engine == engine && s.store == store && s.workload == workload)
        };
        let (component, built_in) = (of(EngineKind::Component)?, of(EngineKind::BuiltIn)?);
        let per_round: Vec<f64> = component
            .ops_per_sec
            .iter()
            .zip(&built_in.ops_per_sec)
            .filter_map(|(c, b)| ratio_of(Some(*c), Some(*b)))
            .collect();
        Spread::of(&per_round)
    }

    /// The median ratio of medians, component ÷ built-in.
    fn engine_ratio(&self, store: StoreKind, workload: Workload) -> Option<f64> {
        ratio_of(
            self.rate(EngineKind::Component, store, workload)
                .map(|s| s.median),
            self.rate(EngineKind::BuiltIn, store, workload)
                .map(|s| s.median),
        )
    }

    /// Seconds the component adds per operation (from the median rates).
    fn added_per_op(&self, store: StoreKind, workload: Workload) -> Option<f64> {
        let c = self.rate(EngineKind::Component, store, workload)?.median;
        let b = self.rate(EngineKind::BuiltIn, store, workload)?.median;
        (c > 0.0 && b > 0.0).then(|| 1.0 / c - 1.0 / b)
    }

    fn fuel_of(&self, prefix: &str) -> Option<u64> {
        self.fuel
            .rows
            .iter()
            .find(|r| r.command.starts_with(prefix))
            .map(|r| r.memory)
    }
}

fn cell(spread: Option<&Spread>) -> String {
    spread.map_or("n/a".into(), |s| format!("{}/s", fmt_rate(s.median)))
}

fn range_cell(spread: Option<&Spread>) -> String {
    spread.map_or("n/a".into(), |s| {
        format!(
            "{}–{} ({})",
            fmt_rate(s.min),
            fmt_rate(s.max),
            fmt_percent(s.gap())
        )
    })
}

fn seconds_cell(s: &Spread) -> (String, String) {
    (
        fmt_seconds(s.median),
        format!("{}–{}", fmt_seconds(s.min), fmt_seconds(s.max)),
    )
}

/// `n` and the noun that goes with it: `1 round`, `3 rounds`.
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The headroom of `fuel` under `limit`: how many times over the budget
/// would cover it.
fn headroom(limit: u64, fuel: u64) -> String {
    if fuel == 0 {
        return "n/a".into();
    }
    let times = limit as f64 / fuel as f64;
    if times >= 100.0 {
        format!("{}×", fmt_count(times.round() as u64))
    } else {
        format!("{times:.1}×")
    }
}

/// Writes the report of `results`, whose raw figures are at `raw` (as the
/// report should name it).
pub(crate) fn render(results: &Results, raw: &str) -> Report {
    let mut d = Doc::new();
    let mut headlines = Vec::new();
    intro(&mut d, results, raw);
    summary(&mut d, &mut headlines, results);
    rates(&mut d, results);
    loading(&mut d, results);
    instantiating(&mut d, results);
    fuel(&mut d, results);
    size(&mut d, results);
    per_process(&mut d, results);
    definitions(&mut d, results);
    machine(&mut d, results);
    Report {
        markdown: d.finish(),
        headlines,
    }
}

/// The title, a warning on a run that is not representative, what is
/// measured and how to reproduce it.
fn intro(d: &mut Doc, r: &Results, raw: &str) {
    let sz = &r.sizes;
    d.heading(1, "Plugin benchmarks");
    d.paragraph("<!-- Generated by `cargo run --release -p inbox-plugin-bench` (plugins/bench); do not edit by hand. -->");
    let release = r.environment.profile == "release";
    if r.quick || !release {
        d.paragraph(format!(
            "> **Not representative**: {}{}. Only a full run of a release build (`cargo run --release -p inbox-plugin-bench`) writes `docs/plugin-benchmarks.md`.",
            if r.quick {
                "a `--quick` smoke run"
            } else {
                "a full run"
            },
            if release { "" } else { " of a debug build" }
        ));
    }
    d.paragraph("What running the inbox engine as a WebAssembly component in wasmtime (`inbox-plugin-host`) costs next to the engine built into the host, **measured in the same run**: commands per second through the JSON wire format over the same kinds of store, what compiling, loading and instantiating the component costs, the fuel each command burns against the default budget, the component's size, and what `--engine` adds to one `inbox` process. This machine is shared and noisy, so every rate is the median of several rounds, with the rounds' range; ratios between rows of the same run travel better than the absolute figures.");
    d.paragraph("Reproduce, from the repository root:");
    d.line("```sh");
    d.line("cargo build --release --locked -p inbox-cli --features plugin   # for the per-process section (else skipped)");
    d.line("cargo run --release --locked -p inbox-plugin-bench");
    d.paragraph("```");
    d.paragraph(format!(
        "It builds the component from source (`inbox_plugin_build::build(Guest::Engine)`: the `wasm` profile for `wasm32-unknown-unknown`, then wit-component), loads it {} each way, instantiates it {}, reads the fuel of a fixed command sequence, runs {} of the command workloads and, when `target/release/inbox` (or `--cli PATH`) is an `inbox` built with the `plugin` feature, times {} of each CLI invocation. `--quick` is a smoke run for CI (small sizes; report and raw figures in `target/plugin-bench-quick/`); `--help` lists the options. Raw figures of this run: `{raw}`.",
        plural(sz.compile_rounds, "time", "times"),
        plural(sz.instances, "time", "times"),
        plural(sz.rates.rounds, "round", "rounds"),
        plural(sz.cli.runs, "run", "runs"),
    ));
}

/// Adds `line` to the summary, and to the terminal's headlines without its
/// Markdown.
fn headline(d: &mut Doc, headlines: &mut Vec<String>, line: String) {
    headlines.push(line.replace("**", "").replace('`', ""));
    d.line(format!("- {line}"));
}

/// The summary: one line per section.
fn summary(d: &mut Doc, headlines: &mut Vec<String>, r: &Results) {
    d.heading(2, "Summary");
    d.paragraph("Medians; component ÷ built-in is the engine component's rate over the built-in engine's on the same kind of store in the same run (below 1: the component is slower by that factor).");
    for workload in Workload::ALL {
        headline(d, headlines, rates_headline(r, workload));
    }
    let c = &r.compile;
    headline(
        d,
        headlines,
        format!(
            "**loading**: compiling the component takes {} (`Plugin::from_file`); with wasmtime's cache warm, {} (`Plugin::from_file_cached`), {} faster",
            fmt_seconds(c.from_file.median),
            fmt_seconds(c.cached_warm.median),
            fmt_ratio(ratio_of(
                Some(c.from_file.median),
                Some(c.cached_warm.median)
            ))
        ),
    );
    let memory = match &r.instance_memory {
        Ok(m) => format!(
            "; each live instance adds at least {:.0} KiB of resident memory after one `send`",
            m.kib_after_send
        ),
        Err(_) => String::new(),
    };
    headline(
        d,
        headlines,
        format!(
            "**instantiating**: {} per instance (`Plugin::instantiate`){memory}",
            fmt_seconds(r.instantiate.instantiate.median)
        ),
    );
    headline(d, headlines, fuel_headline(r));
    headline(
        d,
        headlines,
        format!(
            "**size**: {} raw, {} gzip -9",
            fmt_bytes(r.component.raw),
            r.component.gzip9.map_or("n/a".into(), fmt_bytes)
        ),
    );
    match &r.cli {
        CliSection::Measured(costs) => {
            if let Some(line) = per_process_headline(costs) {
                headline(d, headlines, line);
            }
        }
        CliSection::Skipped { reason } => {
            d.line(format!("- **per process**: not measured: {reason}"));
            headlines.push(format!("per process: not measured: {reason}"));
        }
    }
    d.blank();
}

/// `**send**, component ÷ built-in: ...` over both stores.
fn rates_headline(r: &Results, workload: Workload) -> String {
    let per = |store| {
        let c = r.rate(EngineKind::Component, store, workload);
        let b = r.rate(EngineKind::BuiltIn, store, workload);
        format!(
            "{} ({} against {}, {} more per {})",
            fmt_ratio(r.engine_ratio(store, workload)),
            cell(c.as_ref()),
            cell(b.as_ref()),
            r.added_per_op(store, workload)
                .map_or("n/a".into(), fmt_seconds),
            if workload == Workload::Send {
                "command"
            } else {
                "pair"
            }
        )
    };
    format!(
        "**{}**, component ÷ built-in: {} over a SQLite file, {} over `MemoryStore`",
        workload.name(),
        per(StoreKind::SqliteFile),
        per(StoreKind::Memory)
    )
}

/// `**fuel** per command ...` for `send`, `claim` and `done`.
fn fuel_headline(r: &Results) -> String {
    let limit = r.fuel.limit;
    let fuel_line = |prefix: &str, name: &str| {
        r.fuel_of(prefix).map_or(format!("{name} n/a"), |f| {
            format!(
                "{name} {} units ({} headroom)",
                fmt_count(f),
                headroom(limit, f)
            )
        })
    };
    format!(
        "**fuel** per command, against the default budget of {} units: {}, {}, {}",
        fmt_count(limit),
        fuel_line("`send`", "`send`"),
        fuel_line("`claim`", "`claim`"),
        fuel_line("`done`", "`done`")
    )
}

/// `**per process**: ...`, when both `list` rows were measured.
fn per_process_headline(costs: &CliCosts) -> Option<String> {
    let row = |key: &str| costs.rows.iter().find(|x| x.key == key);
    let (b, cw) = (row("list-builtin")?, row("list-component")?);
    Some(format!(
        "**per process**: `inbox list` takes {} with the built-in engine and {} with `--engine` and a warm cache ({})",
        fmt_seconds(b.seconds.median),
        fmt_seconds(cw.seconds.median),
        fmt_ratio(ratio_of(Some(cw.seconds.median), Some(b.seconds.median)))
    ))
}

/// Commands per second, and the same as time per operation.
fn rates(d: &mut Doc, r: &Results) {
    let sz = &r.sizes;
    d.heading(2, "Commands per second");
    let mut table = Table::new(
        format!(
            "One engine, one store, one caller, requests back to back, {} timed after {} untimed in each round; median of {} rounds, each on a new store. **send**: `{{\"command\":\"send\",\"from_agent\":\"lead\",\"to_agent\":\"worker\",\"subject\":\"Benchmark task N\"}}`, a new thread each. **claim+done**: {} threads queued for the worker first (not timed), then pairs of `{{\"command\":\"claim\",\"agent\":\"worker\",\"next\":true}}` and `done` with the thread id and lease token read from the claim's JSON response; the rate is pairs per second (two write transactions each). **range**: the slowest and fastest round, and their gap as a share of the median. **÷ built-in**: the component's median over the built-in engine's on the same store.",
            sz.rates.ops,
            sz.rates.warmup,
            sz.rates.rounds,
            sz.rates.ops + sz.rates.warmup
        ),
        [
            "store",
            "engine",
            "send/s",
            "send range",
            "÷ built-in",
            "claim+done/s",
            "claim+done range",
            "÷ built-in",
        ],
    )
    .left(2);
    for store in STORES {
        for engine in EngineKind::ALL {
            let mut cells = vec![store.label().to_owned(), engine.label().to_owned()];
            for workload in Workload::ALL {
                let s = r.rate(engine, store, workload);
                cells.push(cell(s.as_ref()));
                cells.push(range_cell(s.as_ref()));
                cells.push(match engine {
                    EngineKind::BuiltIn => "1.00×".to_owned(),
                    EngineKind::Component => fmt_ratio(r.engine_ratio(store, workload)),
                });
            }
            table.row(cells);
        }
    }
    d.table(&table);
    per_operation(d, r);
}

/// The rates as time per operation, and the ratio round by round.
fn per_operation(d: &mut Doc, r: &Results) {
    d.heading(3, "Per operation");
    let mut table = Table::new(
        "The same medians as time per operation, and what the component adds to each. **ratio per round**: component ÷ built-in within each round (the two ran moments apart), the lowest, median and highest over the rounds: a steadier view of the ratio on a noisy machine than the ratio of medians.",
        [
            "store",
            "workload",
            "built-in",
            "component",
            "the component adds",
            "ratio per round (min / median / max)",
        ],
    )
    .left(2);
    for store in STORES {
        for workload in Workload::ALL {
            let per_op = |engine| {
                r.rate(engine, store, workload)
                    .filter(|s| s.median > 0.0)
                    .map_or("n/a".into(), |s| fmt_seconds(1.0 / s.median))
            };
            let paired = r.paired_ratios(store, workload).map_or("n/a".into(), |s| {
                format!(
                    "{} / {} / {}",
                    fmt_ratio(Some(s.min)),
                    fmt_ratio(Some(s.median)),
                    fmt_ratio(Some(s.max))
                )
            });
            table.row(vec![
                store.label().to_owned(),
                workload.name().to_owned(),
                per_op(EngineKind::BuiltIn),
                per_op(EngineKind::Component),
                r.added_per_op(store, workload)
                    .map_or("n/a".into(), fmt_seconds),
                paired,
            ]);
        }
    }
    d.table(&table);
}

/// A row of a `median | range` table of seconds.
fn seconds_row(label: &str, s: &Spread) -> Vec<String> {
    let (median, range) = seconds_cell(s);
    vec![label.to_owned(), median, range]
}

/// Compiling and loading the component from the cache.
fn loading(d: &mut Doc, r: &Results) {
    let c = &r.compile;
    d.heading(2, "Loading the component");
    let mut table = Table::new(
        format!(
            "Wall time to turn the component file into a `Plugin` ready to instantiate, {} each way (in each round: `from_file`, then the cold and the warm cached load, the cache in a new folder). wasmtime compiles on one thread here (the host builds it without `parallel-compilation`).",
            plural(r.sizes.compile_rounds, "round", "rounds")
        ),
        ["how", "median", "range"],
    );
    table.row(seconds_row(
        "`Plugin::from_file`: read, compile (Cranelift), check the world; no cache",
        &c.from_file,
    ));
    table.row(seconds_row(
        "`Plugin::from_file_cached`, empty cache folder: compile, then write the compiled code to the cache",
        &c.cached_cold,
    ));
    table.row(seconds_row(
        "`Plugin::from_file_cached`, warm cache folder: read the compiled code back instead of compiling",
        &c.cached_warm,
    ));
    d.table(&table);
    d.paragraph(format!(
        "The cold load left {} in {} in the cache folder. The CLI keeps this cache in `$INBOX_ENGINE_CACHE`, else `$XDG_CACHE_HOME/inbox/engines` or `~/.cache/inbox/engines`, so only the first `inbox --engine` process after a new component pays the compile.",
        fmt_bytes(c.cache_bytes),
        plural(c.cache_files, "file", "files")
    ));
}

/// Instantiating, and the memory an instance holds.
fn instantiating(d: &mut Doc, r: &Results) {
    d.heading(2, "Instantiating");
    let mut table = Table::new(
        format!(
            "Wall time of {} instances each way, over a new `MemoryStore` (made before the timer starts; the instance dropped after it stops), on a fixed clock.",
            r.sizes.instances
        ),
        ["what", "median", "range"],
    );
    table.row(seconds_row(
        "`Plugin::instantiate`: a wasmtime store, the linker, the instance and its start code",
        &r.instantiate.instantiate,
    ));
    table.row(seconds_row(
        "`Plugin::instantiate` and the instance's first command (a `send`)",
        &r.instantiate.instantiate_and_send,
    ));
    if let Some(s) = r.rate(EngineKind::Component, StoreKind::Memory, Workload::Send) {
        table.row(vec![
            "for comparison: one `send` on a live instance over `MemoryStore` (from the median rate above)".to_owned(),
            fmt_seconds(1.0 / s.median),
            String::new(),
        ]);
    }
    d.table(&table);
    instance_memory(d, r);
}

/// The component's declared memory and what a live instance holds.
fn instance_memory(d: &mut Doc, r: &Results) {
    let declared: u64 = r.component.memories.iter().map(|m| m.min_pages).sum();
    let maxima: Vec<String> = r
        .component
        .memories
        .iter()
        .filter_map(|m| m.max_pages)
        .map(|p| format!("{p} pages"))
        .collect();
    d.paragraph(format!(
        "**Memory.** The component's core modules ({}) define {} starting at {} pages of 64 KiB ({}){}: the engine's stack, static data and first heap. wasmtime caps growth at `Limits::DEFAULT.memory_bytes`, {}. The host's API does not expose an instance's current memory size, so what a live instance costs is read from outside: this process's resident memory (`VmRSS` in `/proc/self/status`, which counts only pages the process has touched) with instances held alive, divided by their number.",
        r.component.core_modules,
        plural(
            r.component.memories.len() as u64,
            "linear memory",
            "linear memories"
        ),
        fmt_count(declared),
        fmt_bytes(declared * PAGE_BYTES),
        if maxima.is_empty() {
            ", with no maximum of its own".to_owned()
        } else {
            format!(", at most {}", maxima.join(", "))
        },
        fmt_bytes(inbox_plugin_host::Limits::DEFAULT.memory_bytes as u64),
    ));
    match &r.instance_memory {
        Ok(m) => {
            let mut table = Table::new(
                "",
                [
                    "instances held alive",
                    "resident memory per instance, instantiated",
                    "after one `send` each",
                ],
            )
            .left(0);
            table.row(vec![
                m.instances.to_string(),
                format!("{:.1} KiB", m.kib_instantiated),
                format!("{:.1} KiB", m.kib_after_send),
            ]);
            d.table(&table);
            d.paragraph("Linear memory is mapped per instance, so its pages show up here once a command touches them. The host's side of an instance (the wasmtime store, the instance's bookkeeping) comes from the process heap, which can reuse memory the run freed earlier (compiling the component frees far more than this), so these figures are a lower bound on what an instance costs.");
        }
        Err(why) => d.paragraph(format!("Not measured: {why}.")),
    }
}

/// Fuel per command against the default budget.
fn fuel(d: &mut Doc, r: &Results) {
    let limit = r.fuel.limit;
    d.heading(2, "Fuel per command");
    let mut table = Table::new(
        format!(
            "`PluginEngine::fuel_used()` after each command of a fixed sequence on a new store, fixed clock and seed (fuel is roughly one unit per wasm instruction; the host's side of each import, the store's own work included, burns none). Every call gets `Limits::DEFAULT.fuel` = {} units; **headroom** is that budget over the command's fuel. {}",
            fmt_count(limit),
            if r.fuel.deterministic {
                "A second run of the sequence on a new `MemoryStore` burned exactly the same fuel, command for command."
            } else {
                "**A second run of the sequence on a new `MemoryStore` burned different fuel**: the figures are not deterministic."
            }
        ),
        [
            "command",
            "fuel, `MemoryStore`",
            "fuel, SQLite file",
            "share of the budget",
            "headroom",
        ],
    );
    for row in &r.fuel.rows {
        let most = row.memory.max(row.sqlite_file);
        table.row(vec![
            row.command.clone(),
            fmt_count(row.memory),
            fmt_count(row.sqlite_file),
            format!("{:.4} %", most as f64 / limit as f64 * 100.0),
            headroom(limit, most),
        ]);
    }
    d.table(&table);
}

/// The component file's size.
fn size(d: &mut Doc, r: &Results) {
    d.heading(2, "Size of the component");
    let mut table = Table::new(
        format!(
            "`{}`, as `inbox_plugin_build::build(Guest::Engine)` writes it (profile `wasm`: `opt-level = \"s\"`, LTO, one codegen unit).",
            r.component
                .path
                .rsplit('/')
                .next()
                .unwrap_or(&r.component.path)
        ),
        ["file", "raw", "gzip -9"],
    );
    table.row(vec![
        "`inbox-engine.wasm`".to_owned(),
        fmt_bytes(r.component.raw),
        r.component.gzip9.map_or("n/a (no gzip)".into(), fmt_bytes),
    ]);
    d.table(&table);
}

/// Whole `inbox` processes, or why they were not measured.
fn per_process(d: &mut Doc, r: &Results) {
    d.heading(2, "Per process: the CLI");
    let costs = match &r.cli {
        CliSection::Measured(costs) => costs,
        CliSection::Skipped { reason } => {
            d.paragraph(format!("Not measured in this run: {reason}."));
            return;
        }
    };
    let mut table = Table::new(
        format!(
            "Wall time of whole `inbox` processes (`{}`, {}), from spawn to exit, stdout and stderr piped, on one database file (WAL, normal durability) holding {} threads plus those the `send` rows add; rows interleaved, {} runs each ({} with the cache off: each compiles the component). Every process opens the database, runs one command and exits; `--engine` processes also load the component (from the warm cache unless off) and instantiate it.",
            costs.binary, costs.version, costs.threads, r.sizes.cli.runs, r.sizes.cli.cold_runs
        ),
        ["invocation", "median", "range", "÷ built-in"],
    );
    let median_of = |key: &str| {
        costs
            .rows
            .iter()
            .find(|x| x.key == key)
            .map(|x| x.seconds.median)
    };
    for row in &costs.rows {
        let baseline = match row.key {
            "list-component" | "list-component-cold" => median_of("list-builtin"),
            "send-component" => median_of("send-builtin"),
            "list-builtin" | "send-builtin" => Some(row.seconds.median),
            _ => None,
        };
        let rel = baseline.map_or(String::new(), |b| {
            fmt_ratio(ratio_of(Some(row.seconds.median), Some(b)))
        });
        let (median, range) = seconds_cell(&row.seconds);
        table.row(vec![format!("`{}`", row.command), median, range, rel]);
    }
    d.table(&table);
    d.paragraph(
        "`inbox --version` parses the arguments and exits: the floor of starting this binary.",
    );
}

/// What each figure is.
fn definitions(d: &mut Doc, r: &Results) {
    d.heading(2, "What each figure is");
    d.bullets([
        "**In process, one caller** for the rates: no process starts, no concurrency, no other writer. The requests are the wasm benchmark's (`docs/wasm-benchmarks.md`), lighter than the main benchmark's (no `body`, no `task_id`).".to_owned(),
        "**built-in**: `inbox_engine::Engine` over the store, on the system clock (`HostClock::system()`) with production ids (`host_ids()`), called with the request as JSON text (`Engine::execute_json`) and its response encoded back to JSON text (`Response::to_json`), which is what the CLI's `--json` does.".to_owned(),
        "**component**: `inbox_plugin_host::PluginEngine` (`Plugin::instantiate` of the component with `Limits::default()`, the same clock, an OS seed for ids) called with the same JSON text (`PluginEngine::execute_json`). Inside wasm the engine decodes the request, runs it against the host's store through the component's imports (each record copied across the boundary), and encodes the response; each call is metered with fuel and capped in memory. The claim's response is parsed with `serde_json` on both sides alike.".to_owned(),
        "**SQLite file**: the native host's `SqliteStore` on a new file in the temporary folder, created as `inbox init` creates it (`open_or_create`, `initialize`, the default durability `normal`: WAL with `synchronous = NORMAL`, no fsync per commit) and reopened with `open_existing` and the long-lived checkpoint policy (`Lifetime::LongLived`) an embedding host uses, as the repository's other in-process benchmarks do. Both engines get a file set up exactly so.".to_owned(),
        "**`MemoryStore`**: the engine's in-memory store, initialized first. It answers `claim` with `next` by filtering and sorting the threads it holds (done ones included), so its claim rate depends on how many threads were queued.".to_owned(),
        "**Fuel** is deterministic for a given component, request sequence, clock and seed; it measures the wasm work of a command, not its wall time.".to_owned(),
        format!(
            "**This harness** was built in the `{}` profile; the component always in the `wasm` profile.",
            r.environment.profile
        ),
    ]);
}

/// The machine, versions and sizes of the run.
fn machine(d: &mut Doc, r: &Results) {
    let (e, sz) = (&r.environment, &r.sizes);
    let m = &e.machine;
    d.heading(2, "Machine and versions");
    d.key_values(&[
        ("date", m.date.clone()),
        ("CPU", format!("{} ({} logical CPUs)", m.cpu, m.cpus)),
        ("memory", m.memory.clone()),
        ("kernel", m.kernel.clone()),
        ("temporary folder", m.filesystem.clone()),
        (
            "machine load (start / end of run)",
            format!("{} / {}", r.load_start, r.load_end),
        ),
        ("inbox commit", format!("`{}`", e.commit)),
        ("wasmtime", e.wasmtime.clone()),
        ("SQLite (bundled by rusqlite)", e.sqlite.clone()),
        ("rustc", e.rustc.clone()),
        ("harness profile", e.profile.to_owned()),
        (
            "sizes",
            format!(
                "{} timed + {} untimed operations per round and series, {}; {} of loading; {} each way; {} per CLI row",
                sz.rates.ops,
                sz.rates.warmup,
                plural(sz.rates.rounds, "round", "rounds"),
                plural(sz.compile_rounds, "round", "rounds"),
                plural(sz.instances, "instance", "instances"),
                plural(sz.cli.runs, "run", "runs")
            ),
        ),
        ("run time", format!("{:.0} s", r.seconds)),
    ]);
}
