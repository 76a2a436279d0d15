//! What every plugin host test needs: the real components, built from
//! source by `inbox-plugin-build` once per test binary, compiled once.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::OnceLock;

use inbox_engine::{ManualClock, Timestamp};
use inbox_plugin_build::Guest;
use inbox_plugin_host::{Limits, Plugin};

/// 2026-01-01T00:00:00Z, the scripts' epoch.
pub(crate) fn clock() -> ManualClock {
    ManualClock::new(ManualClock::SCRIPT_EPOCH)
}

pub(crate) fn at(text: &str) -> Timestamp {
    Timestamp::parse(text).unwrap()
}

fn built(guest: Guest) -> PathBuf {
    static ENGINE: OnceLock<PathBuf> = OnceLock::new();
    static FAULT: OnceLock<PathBuf> = OnceLock::new();
    let cell = match guest {
        Guest::Engine => &ENGINE,
        Guest::Fault => &FAULT,
    };
    cell.get_or_init(|| {
        inbox_plugin_build::build(guest).unwrap_or_else(|e| panic!("building {guest:?}: {e}"))
    })
    .clone()
}

/// The engine component, compiled with the default limits.
pub(crate) fn engine_plugin() -> Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN
        .get_or_init(|| Plugin::from_file(&built(Guest::Engine), Limits::default()).unwrap())
        .clone()
}

/// The engine component with other limits (compiled again).
pub(crate) fn engine_plugin_with(limits: Limits) -> Plugin {
    Plugin::from_file(&built(Guest::Engine), limits).unwrap()
}

/// The fault component with `limits`.
pub(crate) fn fault_plugin(limits: Limits) -> Plugin {
    Plugin::from_file(&built(Guest::Fault), limits).unwrap()
}

/// The component file of `guest`.
pub(crate) fn component_path(guest: Guest) -> PathBuf {
    built(guest)
}
