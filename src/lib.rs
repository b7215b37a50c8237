//! gapscope: where did my graphed step lose time, and did the fix remove it?
//!
//! Data flows one way: recording (`cupti`, `runner`) → [`trace`] → [`analysis`] → [`report`].
//! Everything from [`trace`] on is safe Rust and runs without a GPU.

pub mod analysis;
pub mod bundled;
pub mod cupti;
pub mod import;
pub mod inject;
pub mod merge;
pub mod record;
pub mod report;
pub mod runner;
pub mod synthetic;
pub mod trace;

/// A panic's message as one line, for panic hooks that must not print a multi-line report
/// (the injection library, examples).
pub fn panic_message(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
        .replace('\n', " ")
}
