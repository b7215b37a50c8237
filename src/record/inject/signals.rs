//! Fatal signals (Linux, through the libc crate's declarations): the trace is written from a
//! handler of SIGTERM, SIGINT, SIGSEGV and SIGABRT left at their default action, then the
//! signal is raised again (see the trade-off in [`super`]'s documentation). Also the system
//! calls behind the stand-ins of [`super::exit_calls`].

use super::trace_writer::write_trace;
use crate::settings::Setting;
use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

/// Seconds a signal handler may spend writing the trace before SIGALRM ends the process.
const SIGNAL_WATCHDOG_S: u32 = 30;

/// `GAPSCOPE_SIGNAL_BACKTRACE=1`: a fatal signal (SIGSEGV, SIGABRT) prints the native frames of
/// the thread it hit, read once at start.
static SIGNAL_BACKTRACE: AtomicBool = AtomicBool::new(false);

use libc::{SIGABRT, SIGINT, SIGSEGV, SIGTERM};

/// Ends every thread of the process with `status` (what libc's `_exit` does).
pub fn exit_group(status: c_int) -> ! {
    loop {
        // SAFETY: exit_group takes one int and does not return.
        unsafe {
            libc::syscall(libc::SYS_exit_group, status);
        }
    }
}

/// libc's `exit` (the next definition after this library's): `atexit` handlers, static
/// destructors, stdio flushes, then the end of the process.
pub fn libc_exit(status: c_int) -> ! {
    // SAFETY: dlsym takes RTLD_NEXT and a NUL-terminated name and only reads the loader's
    // tables.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, c"exit".as_ptr()) };
    if next.is_null() {
        exit_group(status);
    }
    // SAFETY: the next `exit` in the search order is libc's, `void exit(int)`, which does
    // not return.
    let libc_exit: extern "C" fn(c_int) -> ! = unsafe { std::mem::transmute(next) };
    libc_exit(status)
}

/// A `sigaction` with `handler`, `flags` and an empty mask.
fn action(handler: libc::sighandler_t, flags: c_int) -> libc::sigaction {
    // SAFETY: `sigaction` is plain data (integers, a bit set, a pointer-sized handler),
    // for which all zeroes is a valid value; the fields that matter are set below.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    act
}

/// A handler given the signal's `siginfo_t` and the interrupted context (`SA_SIGINFO`).
pub type Handler = extern "C" fn(c_int, *mut libc::siginfo_t, *mut std::ffi::c_void);

/// Installs `handler` for `sig` (reset to the default on entry) if `sig` is at its default
/// action; returns whether it did.
pub fn install_if_default(sig: c_int, handler: Handler) -> bool {
    let mut old = action(libc::SIG_DFL, 0);
    // SAFETY: a null `act` only reads the current action into `old`, a valid sigaction.
    if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0
        || old.sa_sigaction != libc::SIG_DFL
    {
        return false;
    }
    let act = action(
        handler as libc::sighandler_t,
        libc::SA_RESETHAND | libc::SA_SIGINFO,
    );
    // SAFETY: `act` is a valid sigaction whose handler takes (int, siginfo_t*, void*), as
    // SA_SIGINFO calls it.
    unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) == 0 }
}

/// Whether `sig`, delivered now, would end the process by its default action (not
/// SIGKILL, which stands for the OOM killer's: no trace is written for it here).
pub fn ends_the_process(sig: c_int) -> bool {
    if ![
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
    ]
    .contains(&sig)
    {
        return false;
    }
    let mut old = action(libc::SIG_DFL, 0);
    // SAFETY: a null `act` only reads the current action into `old`, a valid sigaction.
    (unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) }) == 0
        && old.sa_sigaction == libc::SIG_DFL
}

/// libc's `kill`, as the system call (this library's `kill` stands in for libc's).
pub fn kill_syscall(pid: libc::pid_t, sig: c_int) -> c_int {
    // SAFETY: the kill system call takes two integers; errors set errno, as libc's does.
    unsafe { libc::syscall(libc::SYS_kill, pid, sig) as c_int }
}

/// SIGALRM at its default action (terminate) in `seconds`.
pub fn arm_watchdog(seconds: u32) {
    let act = action(libc::SIG_DFL, 0);
    // SAFETY: both calls are async-signal-safe and take plain values / a valid sigaction.
    unsafe {
        libc::sigaction(libc::SIGALRM, &act, std::ptr::null_mut());
        libc::alarm(seconds);
    }
}

/// Raises `sig` again; SA_RESETHAND already restored the default action, and the signal
/// is delivered when the handler returns.
pub fn reraise(sig: c_int) {
    // SAFETY: async-signal-safe, no pointers.
    unsafe {
        libc::raise(sig);
    }
}

/// Installs the trace-writing handler for each fatal signal left at its default action.
pub(super) fn install_handlers() {
    // Read here: a signal handler must not read the environment.
    SIGNAL_BACKTRACE.store(
        super::environment::switch(Setting::SignalBacktrace),
        Ordering::Relaxed,
    );
    for sig in [SIGTERM, SIGINT, SIGSEGV, SIGABRT] {
        install_if_default(sig, on_signal);
    }
}

extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, context: *mut std::ffi::c_void) {
    arm_watchdog(SIGNAL_WATCHDOG_S);
    if SIGNAL_BACKTRACE.load(Ordering::Relaxed) && sig != SIGTERM && sig != SIGINT {
        super::backtrace::print_backtrace(sig, info, context);
    }
    let _ = catch_unwind(AssertUnwindSafe(|| write_trace(Some(sig))));
    reraise(sig);
}
