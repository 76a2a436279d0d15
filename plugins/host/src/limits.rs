//! How much one call into a component may use: fuel (roughly, wasm
//! instructions) and linear memory. Both are enforced by wasmtime; this
//! module only configures them and remembers whether the memory cap was the
//! reason a call failed, so the error can say so.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// Limits applied to every call into a component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Fuel per call (about one unit per wasm instruction). The engine
    /// spends 40,000 to 120,000 units on a typical command and about 25
    /// million on a `list` of 1,000 threads (`docs/plugin-benchmarks.md`);
    /// the default, 2^33, leaves room for far larger calls and long
    /// transition scripts, and stops a tight runaway loop in about a second
    /// (release build).
    pub fuel: u64,
    /// The most linear memory the instance may have, in bytes.
    pub memory_bytes: usize,
}

impl Limits {
    /// 2^33 units of fuel (several seconds of wasm) and 256 MiB of memory.
    pub const DEFAULT: Limits = Limits {
        fuel: 1 << 33,
        memory_bytes: 256 << 20,
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// wasmtime's [`StoreLimits`], plus a note of whether it refused a memory
/// growth: a component usually turns that refusal into a trap of its own
/// (Rust aborts on allocation failure), and the host must still report "out
/// of memory" rather than "trapped".
#[derive(Debug)]
pub struct MemoryCap {
    limits: StoreLimits,
    refused: bool,
}

impl MemoryCap {
    /// A cap of `bytes` of linear memory, for one instance.
    pub fn new(bytes: usize) -> MemoryCap {
        MemoryCap {
            limits: StoreLimitsBuilder::new()
                .memory_size(bytes)
                .instances(4)
                .build(),
            refused: false,
        }
    }

    /// Whether a growth was refused since the last [`MemoryCap::reset`].
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// Forgets earlier refusals; called before each call.
    pub fn reset(&mut self) {
        self.refused = false;
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }
}
