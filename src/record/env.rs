//! The environment `gapscope record` hands the program it runs, and that the injected recorder
//! reads back: the parent and child halves of one contract, in one place.
#![forbid(unsafe_code)]

/// Environment variable naming the folder the traces are written to.
pub const OUT_VAR: &str = crate::settings::Setting::Out.name();

/// Set (to `1`) by `gapscope record`: the injected recorder delivers as it goes.
pub const SPILL_VAR: &str = crate::settings::Setting::Spill.name();

/// Trace file name for a rank name: `trace-<rank>.json`.
pub fn trace_file_name(rank_name: &str) -> String {
    format!("trace-{rank_name}.json")
}
