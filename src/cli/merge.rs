#![forbid(unsafe_code)]
//! `gapscope merge TRACE…`: per-rank traces (or their summaries) into one report and one
//! Perfetto trace.

use super::analyze::note_wrote;
use super::args::ClockArg;
use super::inputs::{expand_all, is_summary_file, load_one};
use super::{Failure, check_output_folder, note, print_stdout};
use gapscope::analysis::merge::{self, RankInput};
use gapscope::analysis::rank_summary::RankSummary;
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
    let mut ranks = Vec::with_capacity(paths.len());
    for p in &paths {
        ranks.push(if is_summary_file(p) {
            let s = RankSummary::read(p).map_err(Failure::bad_input)?;
            RankInput::Summary(s)
        } else {
            RankInput::Trace(Box::new(load_one(p, None)?))
        });
    }
    let summaries = ranks
        .iter()
        .filter(|r| matches!(r, RankInput::Summary(_)))
        .count();
    let names = paths.iter().map(|p| p.display().to_string()).collect();
    // A refused merge is bad input (exit 2).
    let merged =
        merge::merge_inputs(ranks, names, clock.map(Into::into)).map_err(Failure::bad_input)?;
    let reports = report::output_set::merge_reports(&merged);
    // The terminal gets plain lines of the screen's width; Markdown tables only in report.md.
    if json {
        print_stdout(reports.json())?;
    } else {
        print_stdout(&report::summary::fit_screen(&report::merge::merge_summary(
            &merged,
        )))?;
    }
    if let Some(dir) = output {
        let written = report::output_set::write_merge_set(
            dir,
            &reports,
            (summaries == 0).then_some(perfetto),
        )?;
        if summaries > 0 {
            note(&format!(
                "{summaries} of the inputs are rank summaries, which hold no timelines: no {}",
                perfetto.file_name()
            ));
        }
        note_wrote("", dir, &written, None);
    }
    Ok(ExitCode::SUCCESS)
}
