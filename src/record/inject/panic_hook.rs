//! Panics of the injection library show as one `gapscope:` line on the program's stderr; a
//! panic while initialising is reported by [`super::InitializeInjection`] instead.

use super::messages::say;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

thread_local! {
    /// Set while the initialisation runs on this thread: its panic is reported by the caller.
    static INITIALISING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
/// The panic message of a failed initialisation.
static INIT_PANIC: Mutex<Option<String>> = Mutex::new(None);
/// Panics reported on stderr so far (each is caught before it reaches C); at most 3 are shown.
static PANICS_SHOWN: AtomicU32 = AtomicU32::new(0);

/// Panics show as one `gapscope:` line. This library has its own copy of std, so the hook only
/// sees this library's panics, never the host program's.
pub(super) fn install() {
    std::panic::set_hook(Box::new(|info| {
        let msg = crate::panic_message::one_line(info);
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = format!("panic: {msg}{at}");
        if INITIALISING.try_with(|i| i.get()).unwrap_or(false) {
            *INIT_PANIC.lock().unwrap_or_else(PoisonError::into_inner) = Some(msg);
            return;
        }
        match PANICS_SHOWN.fetch_add(1, Ordering::Relaxed) {
            0..3 => say(&format!("internal error, caught ({msg})")),
            3 => say("further internal errors not shown"),
            _ => {}
        }
    }));
}

/// Runs `f` as the initialisation, whose panic message [`take_init_panic`] hands back.
pub(super) fn initialising<T>(f: impl FnOnce() -> T) -> T {
    INITIALISING.with(|i| i.set(true));
    let result = f();
    INITIALISING.with(|i| i.set(false));
    result
}

/// The panic message of a failed initialisation (`panic` when none was caught).
pub(super) fn take_init_panic() -> String {
    INIT_PANIC
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .unwrap_or_else(|| "panic".into())
}
