//! Commands per second of the kit's two engine workloads (`send`, and
//! `claim`+`done`: see [`inbox_bench_kit::rates`]) for each engine over
//! each kind of store, each series on a new store, in rounds.
//!
//! Rounds are the outer loop, and the engines swap places every round, so a
//! slow spell of this shared machine touches every series alike. This
//! module must never change a store except through the engine measured.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use inbox_bench_kit::rates::{self, Sizes, Workload};
use inbox_bench_kit::stores::StoreKind;
use inbox_plugin_host::Plugin;
use serde::Serialize;

use crate::engines::{self, EngineKind, STORES};

/// Every round's rate of one engine, store and workload.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Series {
    /// The engine.
    pub(crate) engine: EngineKind,
    /// The store.
    pub(crate) store: StoreKind,
    /// The workload.
    pub(crate) workload: Workload,
    /// Operations per second, one per round, in run order.
    pub(crate) ops_per_sec: Vec<f64>,
}

/// Runs every series for `sizes.rounds` rounds, new stores under `dir`.
pub(crate) fn measure(plugin: &Plugin, dir: &Path, sizes: Sizes) -> Result<Vec<Series>> {
    let mut series = Vec::new();
    for store in STORES {
        for workload in Workload::ALL {
            for engine in EngineKind::ALL {
                series.push(Series {
                    engine,
                    store,
                    workload,
                    ops_per_sec: Vec::new(),
                });
            }
        }
    }
    for round in 0..sizes.rounds {
        let started = Instant::now();
        for store in STORES {
            for workload in Workload::ALL {
                let mut order = EngineKind::ALL;
                if round % 2 == 1 {
                    order.reverse();
                }
                for engine in order {
                    let rate = one(plugin, dir, sizes, (engine, store, workload), round)?;
                    let slot = series
                        .iter_mut()
                        .find(|s| s.engine == engine && s.store == store && s.workload == workload)
                        .ok_or_else(|| anyhow!("no series for {}", engine.name()))?;
                    slot.ops_per_sec.push(rate);
                }
            }
        }
        eprintln!(
            "  round {}/{} in {:.1} s",
            round + 1,
            sizes.rounds,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(series)
}

/// One series' rate in one round, on a new store it removes after.
fn one(
    plugin: &Plugin,
    dir: &Path,
    sizes: Sizes,
    (engine, store, workload): (EngineKind, StoreKind, Workload),
    round: u64,
) -> Result<f64> {
    let name = format!("{}-{}-{}", engine.name(), store.name(), round);
    let mut caller = engines::fresh(engine, store, plugin, dir, &name).with_context(|| {
        format!(
            "cannot open the {} store for the {}",
            store.name(),
            engine.name()
        )
    })?;
    let rate = rates::rate(workload, caller.as_mut(), sizes).with_context(|| {
        format!(
            "{} through the {} over {}",
            workload.name(),
            engine.name(),
            store.name()
        )
    })?;
    drop(caller);
    store.remove(dir, &name)?;
    Ok(rate)
}
