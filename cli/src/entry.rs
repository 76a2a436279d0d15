//! The entry point of the executables that run one command per process
//! (`inbox`, `orch`): on Linux (glibc or musl), a C `main` of our own
//! instead of the Rust runtime's, and the process's arguments as that
//! `main` received them ([`args_os`]).
//!
//! Before a Rust `main` runs, the standard library installs its
//! stack-overflow handler: with glibc it first finds the main thread's
//! stack with `pthread_getattr_np`, which reads and parses
//! `/proc/self/maps` (about 50 µs of every command), and with musl it maps
//! and installs an alternate signal stack (about ten system calls: `send`
//! 8 µs, `fetch` 16 µs and `--version` 14 µs faster without it). Everything
//! else that runtime does first is done here the same way:
//! - a standard descriptor that was closed is opened on `/dev/null`, so
//!   that no file the command opens (a database, a lock) becomes its stdout
//!   or stderr;
//! - `SIGPIPE` is ignored, so that a reader who closed the pipe is an error
//!   [`crate::output`] handles rather than a silent death;
//! - a panic exits 101 after the panic hook printed it;
//! - stdout is flushed before the exit.
//!
//! What is lost is the message naming a stack overflow: the process dies of
//! `SIGSEGV` instead. The standard library reads the arguments from glibc's
//! initializers, but musl does not hand them to initializers, so
//! [`args_os`] is where the commands read them on every platform. Elsewhere
//! (macOS), and in the executables' own unit tests, the executables keep a
//! Rust `main` ([`entry_point!`](crate::entry_point)). This module must
//! never decide anything about a command.

use std::ffi::{CStr, OsString, c_char};
use std::io::Write as _;
use std::os::fd::AsFd as _;
use std::os::raw::c_int;
use std::os::unix::ffi::OsStringExt as _;
use std::sync::OnceLock;

/// The arguments the C `main` received, when it ran.
static ARGS: OnceLock<Vec<OsString>> = OnceLock::new();

/// The process's arguments, the program's name first: as the C `main`
/// received them, else (a Rust `main`) as the standard library has them.
pub fn args_os() -> Vec<OsString> {
    match ARGS.get() {
        Some(args) => args.clone(),
        None => std::env::args_os().collect(),
    }
}

/// Keeps the arguments of the C `main` for [`args_os`].
///
/// # Safety
/// `argv` holds `argc` pointers to NUL-terminated strings, as the C
/// library hands them to `main`.
#[allow(unsafe_code)]
pub unsafe fn keep_args(argc: c_int, argv: *const *const c_char) {
    let count = usize::try_from(argc).unwrap_or(0);
    let args = (0..count)
        .map(|i| {
            // SAFETY: per the contract, `argv[i]` for `i < argc` is a C string.
            let arg = unsafe { CStr::from_ptr(*argv.add(i)) };
            OsString::from_vec(arg.to_bytes().to_vec())
        })
        .collect();
    let _ = ARGS.set(args);
}

/// The exit code of a command that panicked, as the Rust runtime's.
const PANICKED: u8 = 101;

/// Runs `command` as the whole process and returns its exit code.
pub fn run(command: fn() -> u8) -> c_int {
    open_closed_standard_descriptors();
    ignore_sigpipe();
    let code = std::panic::catch_unwind(command).unwrap_or(PANICKED);
    // Nothing else flushes stdout: the C library's exit knows only its own
    // buffers.
    let _ = std::io::stdout().flush();
    c_int::from(code)
}

/// Opens `/dev/null` on each of descriptors 0, 1 and 2 that is closed, in
/// that order, so that each open takes the lowest free number: the one that
/// was missing.
fn open_closed_standard_descriptors() {
    let closed = |fd: std::os::fd::BorrowedFd<'_>| {
        rustix::io::fcntl_getfd(fd) == Err(rustix::io::Errno::BADF)
    };
    let missing = [
        closed(std::io::stdin().as_fd()),
        closed(std::io::stdout().as_fd()),
        closed(std::io::stderr().as_fd()),
    ];
    for _ in missing.iter().filter(|m| **m) {
        // Kept open for the life of the process, as the runtime keeps it.
        if let Ok(null) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
        {
            let _ = std::os::fd::IntoRawFd::into_raw_fd(null);
        }
    }
}

/// Ignores `SIGPIPE`, as the Rust runtime does: writing to a pipe whose
/// reader has gone then fails with `EPIPE` instead of ending the process.
#[allow(unsafe_code)]
fn ignore_sigpipe() {
    // SAFETY: sets the disposition of one signal to "ignore", before the
    // command starts any thread; no handler code is involved.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Defines the executable's `main`, running `$command` (a `fn() -> u8`
/// returning the exit code): through [`run`] on Linux, as a plain Rust
/// `main` elsewhere and in the executable's own unit tests, whose harness
/// brings its `main`. The executable's crate must also say
/// `#![cfg_attr(all(target_os = "linux", not(test)), no_main)]`.
#[macro_export]
macro_rules! entry_point {
    ($command:path) => {
        /// The process's C entry point (see `inbox_cli::entry`).
        #[cfg(all(target_os = "linux", not(test)))]
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        extern "C" fn main(
            argc: ::std::os::raw::c_int,
            argv: *const *const ::std::os::raw::c_char,
        ) -> ::std::os::raw::c_int {
            // SAFETY: the C library's `argc` and `argv`.
            unsafe { $crate::entry::keep_args(argc, argv) };
            $crate::entry::run($command)
        }

        #[cfg(not(all(target_os = "linux", not(test))))]
        fn main() -> ::std::process::ExitCode {
            ::std::process::ExitCode::from($command())
        }
    };
}
