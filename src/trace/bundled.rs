//! Traces bundled into the binary: the default input of `gapscope run` on a machine without a
//! GPU, so the main job works anywhere. They are real H200 recordings from `traces/`.
#![forbid(unsafe_code)]

use crate::trace::{Trace, TraceError, parse_trace};
use std::path::Path;

/// (file name under `traces/`, contents).
const BUNDLED: &[(&str, &[u8])] = &[
    (
        "emu-h200.json",
        include_bytes!("../../traces/emu-h200.json"),
    ),
    (
        "ht-decode-h200.json",
        include_bytes!("../../traces/ht-decode-h200.json"),
    ),
    // Real NCCL at R = 2 (rank 0 of each mode set; rank 1 beside it in traces/).
    (
        "ht-decode-2rank-h200/mode1-rank0.json",
        include_bytes!("../../traces/ht-decode-2rank-h200/mode1-rank0.json"),
    ),
    (
        "ht-decode-2rank-h200/mode2-rank0.json",
        include_bytes!("../../traces/ht-decode-2rank-h200/mode2-rank0.json"),
    ),
];

/// Parses the bundled traces; when none are bundled, a synthetic emu experiment that says so.
pub fn traces() -> Result<(Vec<Trace>, Vec<String>), TraceError> {
    if BUNDLED.is_empty() {
        return Ok((
            vec![crate::trace::synthetic::emu_experiment(200)],
            vec!["synthetic emu experiment (no real trace bundled)".to_owned()],
        ));
    }
    let mut traces = Vec::with_capacity(BUNDLED.len());
    let mut names = Vec::with_capacity(BUNDLED.len());
    for (name, bytes) in BUNDLED {
        let label = format!("traces/{name} (bundled)");
        traces.push(parse_trace(bytes, Path::new(&label))?);
        names.push(label);
    }
    Ok((traces, names))
}
