//! What the component file is: its size raw and compressed, and the linear
//! memory its core modules declare (read from the binary, so the report can
//! say how much memory an instance starts with without a hook into the
//! host).
//!
//! Read-only: it must never change the file, and it reads only the few
//! section headers it needs; anything it does not understand it skips
//! rather than guesses.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use serde::Serialize;

/// Bytes in one WebAssembly page (the only page size Rust's wasm32 target
/// uses).
pub(crate) const PAGE_BYTES: u64 = 65_536;

/// The component file's sizes and declared memory.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ComponentFile {
    /// Where it was built.
    pub(crate) path: String,
    /// Its size in bytes.
    pub(crate) raw: u64,
    /// Its size after `gzip -9`, or `None` when no gzip program ran.
    pub(crate) gzip9: Option<u64>,
    /// The linear memories its core modules define (imports not counted).
    pub(crate) memories: Vec<Memory>,
    /// How many core modules it embeds (the engine, and whatever shims
    /// wit-component added).
    pub(crate) core_modules: usize,
}

/// One linear memory as a core module declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Memory {
    /// Pages the memory starts with: the module's stack, static data and
    /// initial heap.
    pub(crate) min_pages: u64,
    /// The most pages it may grow to, if the module caps it.
    pub(crate) max_pages: Option<u64>,
}

/// Measures the component at `path`.
pub(crate) fn measure(path: &Path) -> Result<ComponentFile> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut memories = Vec::new();
    let core_modules = declared_memories(&bytes, &mut memories);
    Ok(ComponentFile {
        path: path.display().to_string(),
        raw: bytes.len() as u64,
        gzip9: gzip9(path),
        memories,
        core_modules,
    })
}

/// `gzip -9` of the file, as `scripts/build-wasm` and the wasm benchmark
/// measure their module, so the figures compare; `None` without gzip.
fn gzip9(path: &Path) -> Option<u64> {
    let out = Command::new("gzip")
        .args(["-9", "-c"])
        .arg(path)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout.len() as u64)
}

/// Collects the memories every core module inside `bytes` (a component or
/// a core module) defines into `out`; returns how many core modules it
/// walked. Malformed input stops the walk where it stops making sense.
pub(crate) fn declared_memories(bytes: &[u8], out: &mut Vec<Memory>) -> usize {
    match bytes.get(..8) {
        // A core module: version 1.
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => {
            module_memories(&bytes[8..], out);
            1
        }
        // A component (layer 1): walk its sections for embedded modules.
        Some([0, b'a', b's', b'm', _, _, 1, 0]) => {
            let mut modules = 0;
            for (id, payload) in sections(&bytes[8..]) {
                match id {
                    // A core module section holds a whole module; a nested
                    // component section a whole component.
                    1 | 4 => modules += declared_memories(payload, out),
                    _ => {}
                }
            }
            modules
        }
        _ => 0,
    }
}

/// The memory section (id 5) of a core module's sections.
fn module_memories(sections_bytes: &[u8], out: &mut Vec<Memory>) {
    for (id, payload) in sections(sections_bytes) {
        if id != 5 {
            continue;
        }
        let mut at = 0;
        let Some(count) = leb_u64(payload, &mut at) else {
            return;
        };
        for _ in 0..count {
            let Some(&flags) = payload.get(at) else {
                return;
            };
            at += 1;
            // Bit 0: a maximum follows. Bit 3 (custom page sizes) changes
            // the page size; no Rust target emits it, so such a memory is
            // left out rather than misread.
            if flags & 0x08 != 0 {
                return;
            }
            let Some(min_pages) = leb_u64(payload, &mut at) else {
                return;
            };
            let max_pages = if flags & 0x01 != 0 {
                match leb_u64(payload, &mut at) {
                    Some(max) => Some(max),
                    None => return,
                }
            } else {
                None
            };
            out.push(Memory {
                min_pages,
                max_pages,
            });
        }
    }
}

/// The `(id, payload)` of each section in `bytes` (after the preamble),
/// stopping at the first one that runs past the end.
fn sections(bytes: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let id = *bytes.get(at)?;
        at += 1;
        let size = usize::try_from(leb_u64(bytes, &mut at)?).ok()?;
        let payload = bytes.get(at..at.checked_add(size)?)?;
        at += size;
        Some((id, payload))
    })
}

/// An unsigned LEB128 number at `*at`, advancing past it.
fn leb_u64(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module with one memory section: `count` memories of
    /// (flags, min[, max]).
    fn module(memory_section: &[u8]) -> Vec<u8> {
        let mut m = vec![0, b'a', b's', b'm', 1, 0, 0, 0];
        // A custom section first, so the walk has to skip one.
        m.extend([0, 3, 1, b'x', 9]);
        m.push(5);
        m.push(memory_section.len() as u8);
        m.extend(memory_section);
        m
    }

    #[test]
    fn reads_a_core_modules_memory() {
        let mut out = Vec::new();
        // One memory, min 17 pages, max 300 (LEB128: 0xac 0x02).
        assert_eq!(
            declared_memories(&module(&[1, 1, 17, 0xac, 0x02]), &mut out),
            1
        );
        assert_eq!(
            out,
            [Memory {
                min_pages: 17,
                max_pages: Some(300)
            }]
        );
    }

    #[test]
    fn finds_the_modules_inside_a_component() {
        let core = module(&[1, 0, 18]);
        let mut component = vec![0, b'a', b's', b'm', 0x0d, 0, 1, 0];
        // A core type section to skip, then the core module section.
        component.extend([3, 1, 0]);
        component.push(1);
        component.push(core.len() as u8);
        component.extend(&core);
        let mut out = Vec::new();
        assert_eq!(declared_memories(&component, &mut out), 1);
        assert_eq!(
            out,
            [Memory {
                min_pages: 18,
                max_pages: None
            }]
        );
    }

    #[test]
    fn stops_on_truncated_input() {
        let mut bytes = module(&[1, 0, 18]);
        bytes.truncate(bytes.len() - 1);
        let mut out = Vec::new();
        declared_memories(&bytes, &mut out);
        assert!(out.is_empty());
        assert_eq!(declared_memories(b"not wasm", &mut out), 0);
    }
}
