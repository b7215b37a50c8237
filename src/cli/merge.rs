#![forbid(unsafe_code)]
//! `gapscope merge TRACE…`: per-rank traces into one report and one Perfetto trace.

use super::analyze::wrote_line;
use super::args::ClockArg;
use super::inputs::{expand_all, load};
use super::{Failure, check_output_folder, note, print_stdout};
use gapscope::analysis::merge;
use gapscope::report;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn command(
    traces: &[PathBuf],
    output: Option<&Path>,
    json: bool,
    clock: Option<ClockArg>,
    perfetto: report::PerfettoFormat,
) -> Result<ExitCode, Failure> {
    if let Some(dir) = output {
        check_output_folder(dir)?;
    }
    let paths = expand_all(traces)?;
    let (traces, names) = load(&paths)?;
    // A refused merge is bad input (exit 2).
    let merged = merge::merge(traces, names, clock.map(Into::into)).map_err(|e| Failure {
        code: 2,
        error: e.into(),
    })?;
    let reports = report::output::merge_reports(&merged);
    print_stdout(if json {
        reports.json()
    } else {
        reports.markdown()
    })?;
    if let Some(dir) = output {
        let written = report::output::write_merge_set(dir, &reports, perfetto)?;
        note(&wrote_line(dir, &written));
    }
    Ok(ExitCode::SUCCESS)
}
