//! The environment `gapscope record` hands the program it runs, and that the injected recorder
//! reads back: the parent and child halves of one contract, in one place.
#![forbid(unsafe_code)]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Environment variable naming the folder the traces are written to.
pub const OUT_VAR: &str = crate::settings::Setting::Out.name();

/// Launches traced per executable graph and steps traced (`gapscope record --trace-budget`).
pub const TRACE_BUDGET_VAR: &str = crate::settings::Setting::TraceBudget.name();

/// Set (to `1`) by `gapscope record`: the injected recorder delivers as it goes.
pub const SPILL_VAR: &str = crate::settings::Setting::Spill.name();

/// Trace file name for a rank name: `trace-<rank>.json`.
pub fn trace_file_name(rank_name: &str) -> String {
    format!("trace-{rank_name}.json")
}

/// Set (to `1`) by `gapscope record` when it samples host stacks: the injected recorder keeps
/// a [`TracingFlag`] in the trace folder.
pub const TRACING_FLAG_VAR: &str = crate::settings::Setting::TracingFlag.name();

/// Host samples name the code in the gaps of traced steps only, so `record` reads a process's
/// stacks only while its recorder traces: the reads (py-spy's `process_vm_readv` calls take the
/// program's memory-map lock, which its own `mmap`s then wait for) stay inside the windows the
/// tracer's share already covers, and untraced steps run as without them.
const TRACING_FLAG_PREFIX: &str = ".gapscope-tracing-";

/// The file in the trace folder `out` through which process `pid` says whether it traces.
pub fn tracing_flag_path(out: &Path, pid: u32) -> PathBuf {
    out.join(format!("{TRACING_FLAG_PREFIX}{pid}"))
}

/// Whether a file in the trace folder is a [`TracingFlag`] (removed when the recording ends).
pub fn is_tracing_flag(name: &str) -> bool {
    name.starts_with(TRACING_FLAG_PREFIX)
}

/// The recorder's side: one byte, `1` while API calls are traced, `0` otherwise.
#[derive(Debug)]
pub struct TracingFlag {
    file: File,
}

impl TracingFlag {
    /// Creates process `pid`'s flag in `out`, saying `tracing`; the error when it cannot (the
    /// recording goes on; `record` then takes no host samples of that process).
    pub fn create(out: &Path, pid: u32, tracing: bool) -> std::io::Result<TracingFlag> {
        let file = File::create(tracing_flag_path(out, pid))?;
        let flag = TracingFlag { file };
        flag.set(tracing);
        Ok(flag)
    }

    /// One write of one byte: called at each switch of the trace budget (rare).
    pub fn set(&self, tracing: bool) {
        let _ = self.file.write_at(if tracing { b"1" } else { b"0" }, 0);
    }
}

/// `record`'s side: whether the process whose flag `file` is says it traces (`None` before it
/// wrote one).
pub fn reads_tracing(file: &File) -> Option<bool> {
    let mut byte = [0u8; 1];
    match file.read_at(&mut byte, 0) {
        Ok(1) => Some(byte[0] == b'1'),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_says_what_the_recorder_last_set() {
        let dir = tempfile::tempdir().unwrap();
        let flag = TracingFlag::create(dir.path(), 42, true).unwrap();
        let path = tracing_flag_path(dir.path(), 42);
        assert!(is_tracing_flag(
            &path.file_name().unwrap().to_string_lossy()
        ));
        let read = File::open(&path).unwrap();
        assert_eq!(reads_tracing(&read), Some(true));
        flag.set(false);
        assert_eq!(reads_tracing(&read), Some(false));
        flag.set(true);
        assert_eq!(reads_tracing(&read), Some(true));
        let empty = File::create(dir.path().join("empty")).unwrap();
        assert_eq!(reads_tracing(&empty), None);
        assert!(TracingFlag::create(&dir.path().join("missing"), 1, true).is_err());
    }
}
