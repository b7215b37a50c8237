//! Where a traced process ends: the `atexit` handler, and this library's stand-ins for libc's
//! `exit`, `_exit` and `kill` (under `gapscope record`, which preloads it): each writes the
//! trace first (`super::trace_writer`), then does what libc's would.

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
use super::signals;
use super::trace_writer::{recording, write_trace};
use std::ffi::c_int;
use std::panic::catch_unwind;

pub(super) extern "C" fn at_exit() {
    let _ = catch_unwind(|| write_trace(None));
}

/// Stands in for libc's `_exit` when this library is preloaded: a traced process writes its
/// trace first; any other process (or this library linked into a program) just ends, as
/// libc's `_exit` would, through `exit_group`.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[unsafe(no_mangle)]
pub extern "C" fn _exit(status: c_int) -> ! {
    if recording() {
        let _ = catch_unwind(|| write_trace(None));
    }
    signals::exit_group(status)
}

/// Stands in for libc's `exit` when this library is preloaded: a traced process writes its
/// trace first, while every library is whole, then libc's `exit` runs its `atexit` handlers,
/// static destructors and stdio flushes as usual.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[unsafe(no_mangle)]
pub extern "C" fn exit(status: c_int) -> ! {
    if recording() {
        let _ = catch_unwind(|| write_trace(None));
    }
    signals::libc_exit(status)
}

/// Stands in for libc's `kill` when this library is preloaded. A traced process that sends
/// itself a signal whose action is the default (termination) writes its trace first: Python
/// ends on an unhandled KeyboardInterrupt (Ctrl-C) by resetting SIGINT to its default and
/// `kill(getpid(), SIGINT)`, which skips every `atexit` handler. Every call is then made as
/// libc's, through the `kill` system call.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[unsafe(no_mangle)]
pub extern "C" fn kill(pid: libc::pid_t, sig: c_int) -> c_int {
    if recording()
        && (pid == 0 || u32::try_from(pid).is_ok_and(|p| p == std::process::id()))
        && signals::ends_the_process(sig)
    {
        let _ = catch_unwind(|| write_trace(Some(sig)));
    }
    signals::kill_syscall(pid, sig)
}
