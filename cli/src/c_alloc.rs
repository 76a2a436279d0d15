//! The C allocator (`malloc`, `free` and their kin) of the executables
//! when they are built for Linux with musl, as `scripts/install` builds
//! them: dlmalloc (the `dlmalloc` crate, the allocator the Rust standard
//! library uses on WebAssembly) behind one lock, serving Rust's allocations
//! and SQLite's alike. [`c_allocator!`](crate::c_allocator) puts it in an
//! executable; on every other target the executables keep the C library's
//! own allocator, and on Linux with glibc this module is only compiled for
//! its tests.
//!
//! Why musl, and why not its allocator. On a virtual machine, glibc's start
//! asks the processor for its features and cache sizes with some forty
//! `cpuid` instructions, each a trap to the hypervisor (3.6 to 3.9 µs here):
//! a glibc program starts about 200 µs later than a musl one, in every
//! command an agent runs. But musl's own allocator (mallocng) maps and
//! unmaps memory a few pages at a time: a `send` made 69 `mmap` and 36
//! `munmap` calls and took 87 page faults more than with glibc, which made
//! it slower than the glibc build overall. dlmalloc, like glibc's
//! allocator, reuses freed memory in place and takes it from the kernel in
//! large pieces. With it, a musl `send` touches about as many pages as a
//! glibc one and starts without the `cpuid` calls (docs/durability-and-speed.md
//! has the measurements).
//!
//! musl lets a statically linked program define these functions in place of
//! its own (its internal allocations use an allocator of its own, which it
//! also frees). This module must never allocate, panic or call into
//! anything that could allocate while it holds the lock: that would
//! deadlock the process. dlmalloc's defaults are kept: asking the kernel
//! for 1 MiB at a time instead of 64 KiB saved three `mmap` calls a
//! `send` and no time that could be measured.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard, PoisonError};

use dlmalloc::Dlmalloc;

/// The one heap of the process.
static HEAP: Mutex<Dlmalloc> = Mutex::new(Dlmalloc::new());

/// The heap, locked. dlmalloc leaves its state consistent between calls and
/// never panics inside one, so a poisoned lock (a panic elsewhere while it
/// was held, which this module never does) is taken over as it is.
fn heap() -> MutexGuard<'static, Dlmalloc> {
    HEAP.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The alignment every allocation has: `malloc`'s promise for any type.
const NATURAL_ALIGN: usize = 2 * std::mem::size_of::<usize>();

/// Sets `errno`, as C callers of a failed allocation may read it.
fn set_errno(code: c_int) {
    // SAFETY: the C library's per-thread errno, always valid to write.
    unsafe { *libc_errno() = code }
}

/// The calling thread's `errno`.
fn libc_errno() -> *mut c_int {
    // SAFETY: a C library function with no preconditions.
    unsafe { libc::__errno_location() }
}

/// Returns `p`, setting `errno` to `ENOMEM` if it is null.
fn or_enomem(p: *mut u8) -> *mut c_void {
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

/// C's `malloc`.
///
/// # Safety
/// As C's: the result is freed once, with [`free`] or [`realloc`].
pub unsafe fn malloc(size: usize) -> *mut c_void {
    // SAFETY: any size is accepted.
    or_enomem(unsafe { heap().c_malloc(size) })
}

/// C's `calloc`: `count` elements of `size` bytes, zeroed; null if the
/// product overflows.
///
/// # Safety
/// As [`malloc`].
pub unsafe fn calloc(count: usize, size: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    // SAFETY: any size is accepted; dlmalloc zeroes what the kernel did not.
    or_enomem(unsafe { heap().calloc(total, NATURAL_ALIGN) })
}

/// C's `realloc`.
///
/// # Safety
/// `p` is null or a live allocation of this module.
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: per the contract; a failed call leaves `p` valid.
    or_enomem(unsafe { heap().c_realloc(p.cast(), size) })
}

/// C's `free`.
///
/// # Safety
/// `p` is null or a live allocation of this module, freed once.
pub unsafe fn free(p: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { heap().c_free(p.cast()) }
}

/// C's `aligned_alloc` and `memalign`: null (`EINVAL`) unless `align` is a
/// power of two.
///
/// # Safety
/// As [`malloc`].
pub unsafe fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // SAFETY: `align` is a power of two.
    or_enomem(unsafe { heap().c_memalign(align, size) })
}

/// C's `posix_memalign`: `EINVAL` unless `align` is a power of two and a
/// multiple of a pointer's size, `ENOMEM` if there is no memory; `*out` is
/// written only on success.
///
/// # Safety
/// `out` is valid for a write.
pub unsafe fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    // SAFETY: `align` is a power of two.
    let p = unsafe { heap().c_memalign(align, size) };
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: per the contract.
    unsafe { *out = p.cast() };
    0
}

/// C's `malloc_usable_size`, which this allocator cannot answer: stops the
/// process rather than let a caller trust a wrong size.
pub fn no_usable_size() -> ! {
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        b"inbox: malloc_usable_size was called, which inbox's allocator (dlmalloc, \
          cli/src/c_alloc.rs) does not support; please report it\n",
    );
    std::process::abort()
}

/// Makes [`crate::c_alloc`] the C allocator of the executable it is
/// invoked in, when it is built for Linux with musl; elsewhere it expands
/// to nothing. The symbols are defined in the executable's own crate, whose
/// objects are always linked: a linker takes an object out of a library
/// only for a symbol still missing when it reads that library, and
/// `malloc` may not be missing yet when it reads this one, so defined here
/// they could be left out, silently, for musl's own.
#[macro_export]
macro_rules! c_allocator {
    () => {
        #[cfg(all(target_os = "linux", target_env = "musl"))]
        #[allow(unsafe_code)]
        mod c_allocator {
            use ::std::ffi::{c_int, c_void};

            #[unsafe(no_mangle)]
            unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
                // SAFETY: the C contract is the function's.
                unsafe { $crate::c_alloc::malloc(size) }
            }

            #[unsafe(no_mangle)]
            unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
                // SAFETY: as above.
                unsafe { $crate::c_alloc::calloc(count, size) }
            }

            #[unsafe(no_mangle)]
            unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
                // SAFETY: as above.
                unsafe { $crate::c_alloc::realloc(p, size) }
            }

            #[unsafe(no_mangle)]
            unsafe extern "C" fn free(p: *mut c_void) {
                // SAFETY: as above.
                unsafe { $crate::c_alloc::free(p) }
            }

            #[unsafe(no_mangle)]
            unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
                // SAFETY: as above.
                unsafe { $crate::c_alloc::aligned_alloc(align, size) }
            }

            #[unsafe(no_mangle)]
            unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
                // SAFETY: as above.
                unsafe { $crate::c_alloc::aligned_alloc(align, size) }
            }

            /// dlmalloc does not say how large an allocation is. Nothing
            /// inbox links asks; defined so that nothing ever takes musl's
            /// own, which would read this heap as musl's and answer wrong.
            #[unsafe(no_mangle)]
            extern "C" fn malloc_usable_size(_p: *mut c_void) -> usize {
                $crate::c_alloc::no_usable_size()
            }

            #[unsafe(no_mangle)]
            unsafe extern "C" fn posix_memalign(
                out: *mut *mut c_void,
                align: usize,
                size: usize,
            ) -> c_int {
                // SAFETY: as above.
                unsafe { $crate::c_alloc::posix_memalign(out, align, size) }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `len` bytes at `p` with a pattern that depends on `seed`.
    unsafe fn fill(p: *mut c_void, len: usize, seed: u8) {
        for i in 0..len {
            // SAFETY: the caller's allocation holds `len` bytes.
            unsafe { *p.cast::<u8>().add(i) = seed.wrapping_add(i as u8) };
        }
    }

    unsafe fn holds(p: *const c_void, len: usize, seed: u8) -> bool {
        // SAFETY: the caller's allocation holds `len` bytes.
        (0..len).all(|i| unsafe { *p.cast::<u8>().add(i) } == seed.wrapping_add(i as u8))
    }

    #[test]
    fn memory_holds_what_was_written_until_freed_and_realloc_keeps_it() {
        unsafe {
            let p = malloc(100);
            assert!(!p.is_null());
            assert_eq!(p as usize % NATURAL_ALIGN, 0);
            fill(p, 100, 7);
            let q = malloc(5000);
            fill(q, 5000, 9);
            assert!(holds(p, 100, 7), "a second allocation overlapped the first");
            let p = realloc(p, 100_000);
            assert!(holds(p, 100, 7), "growing lost the contents");
            let p = realloc(p, 10);
            assert!(holds(p, 10, 7), "shrinking lost the contents");
            assert!(holds(q, 5000, 9));
            free(p);
            free(q);
            free(std::ptr::null_mut());
            let r = realloc(std::ptr::null_mut(), 64);
            assert!(!r.is_null());
            free(r);
        }
    }

    #[test]
    fn calloc_zeroes_even_reused_memory_and_refuses_an_overflowing_size() {
        unsafe {
            let dirty = malloc(4096);
            fill(dirty, 4096, 1);
            free(dirty);
            let p = calloc(512, 8).cast::<u8>();
            assert!(!p.is_null());
            assert!((0..4096).all(|i| *p.add(i) == 0));
            free(p.cast());
            assert!(calloc(usize::MAX / 2, 3).is_null());
            assert_eq!(*libc_errno(), libc::ENOMEM);
        }
    }

    #[test]
    fn aligned_allocations_are_aligned_and_bad_alignments_refused() {
        unsafe {
            for align in [8, 16, 64, 4096, 1 << 16] {
                let p = aligned_alloc(align, 100);
                assert_eq!(p as usize % align, 0, "aligned_alloc({align})");
                free(p);
                let mut out = std::ptr::null_mut();
                assert_eq!(posix_memalign(&mut out, align, 3000), 0);
                assert_eq!(out as usize % align, 0, "posix_memalign({align})");
                free(out);
            }
            let mut out = std::ptr::null_mut();
            assert_eq!(posix_memalign(&mut out, 24, 10), libc::EINVAL);
            assert_eq!(posix_memalign(&mut out, 4, 10), libc::EINVAL);
            assert!(out.is_null(), "written although refused");
            assert!(aligned_alloc(48, 10).is_null());
        }
    }

    #[test]
    fn an_impossible_size_is_null_with_enomem_not_a_crash() {
        unsafe {
            assert!(malloc(usize::MAX - 4096).is_null());
            assert_eq!(*libc_errno(), libc::ENOMEM);
            let p = malloc(10);
            assert!(realloc(p, usize::MAX - 4096).is_null());
            free(p);
        }
    }

    #[test]
    fn threads_allocating_at_once_never_share_memory() {
        let threads: Vec<_> = (0..8u8)
            .map(|t| {
                std::thread::spawn(move || unsafe {
                    let mut live: Vec<(usize, usize)> = Vec::new();
                    for i in 0..4000usize {
                        let len = 1 + (i * 37 + usize::from(t) * 11) % 3000;
                        let p = malloc(len);
                        fill(p, len, t);
                        live.push((p as usize, len));
                        if i % 3 == 0 {
                            let (q, qlen) = live.swap_remove(i % live.len());
                            assert!(holds(q as *const c_void, qlen, t));
                            free(q as *mut c_void);
                        }
                    }
                    for (p, len) in live {
                        assert!(holds(p as *const c_void, len, t));
                        free(p as *mut c_void);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a thread saw memory another wrote");
        }
    }
}
