#![forbid(unsafe_code)]
//! `gapscope analyze` and `gapscope export`, and the analysis output set and stdout that
//! `run` shares with `analyze`.

use super::args::{Format, OutputArgs};
use super::inputs::{analyze, expand_all, load, load_with_steps};
use super::{Failure, PhaseTimer, bad_input, print_stdout};
use gapscope::analysis::Analysis;
use gapscope::report;
use gapscope::report::output::Rendered;
use gapscope::trace::{self, Trace};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `gapscope analyze TRACE… [-o DIR]`.
pub fn command(traces: &[PathBuf], out: &OutputArgs) -> Result<ExitCode, Failure> {
    let mut timer = PhaseTimer::from_env();
    // A folder stands for its trace files (as HTA's trace_dir).
    let paths = expand_all(traces)?;
    let (traces, names) = load_with_steps(&paths, out.step_range.as_deref())?;
    timer.lap("load");
    let analysis = analyze(&traces, &names);
    timer.lap("analysis");
    let reports = report::output::analysis_reports(&analysis);
    write_outputs(&traces, &reports, out)?;
    print_summary(&reports, out)?;
    timer.lap("reports");
    Ok(ExitCode::SUCCESS)
}

/// `gapscope export TRACE… --format F -o FILE`: one file, written atomically (its folder made
/// if missing, as `analyze -o` does). A folder stands for its trace files, as for `analyze`.
pub fn export(
    traces: &[PathBuf],
    format: Format,
    output: &Path,
    origin_step: Option<usize>,
) -> Result<ExitCode, Failure> {
    let paths = expand_all(traces)?;
    let (traces, names) = load(&paths)?;
    let analysis = analyze(&traces, &names);
    export_one(&traces, &analysis, format, output, origin_step)?;
    eprintln!("wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}

/// The analysis set into `-o DIR` when given ([`report::output::write_analysis_set`]).
pub fn write_outputs(
    traces: &[Trace],
    reports: &Rendered<'_, Analysis>,
    out: &OutputArgs,
) -> Result<(), Failure> {
    let Some(dir) = &out.output else {
        return Ok(());
    };
    check_origin_step(reports.value, out.origin.origin_step)?;
    let written = report::output::write_analysis_set(dir, traces, reports, out.origin.origin_step)?;
    if !written.iter().any(|n| n == "step.svg") {
        eprintln!("gapscope: note: no eager/graphed pair in the input: no step.svg");
    }
    eprintln!(
        "wrote {}/{{{}}} (open the .perfetto.json at https://ui.perfetto.dev)",
        dir.display(),
        written.join(",")
    );
    Ok(())
}

/// The flag as the user spelled it: `--align-step` is the old name of `--origin-step`, kept
/// as an alias, and an error should name what was typed.
fn origin_step_flag() -> &'static str {
    let old = std::env::args_os().any(|a| {
        a.to_str()
            .is_some_and(|a| a == "--align-step" || a.starts_with("--align-step="))
    });
    if old { "--align-step" } else { "--origin-step" }
}

/// `--origin-step K` must name a step some cell has.
fn check_origin_step(analysis: &Analysis, origin_step: Option<usize>) -> Result<(), Failure> {
    let Some(k) = origin_step else {
        return Ok(());
    };
    let longest = analysis
        .cells
        .iter()
        .map(|c| c.steps.len())
        .max()
        .unwrap_or(0);
    if k >= longest {
        return Err(bad_input(format!(
            "{} {k}: no cell has a step {k} (steps count from 0; the longest cell has {longest})",
            origin_step_flag()
        )));
    }
    Ok(())
}

fn export_one(
    traces: &[Trace],
    analysis: &Analysis,
    format: Format,
    output: &Path,
    origin_step: Option<usize>,
) -> Result<(), Failure> {
    check_origin_step(analysis, origin_step)?;
    let name = match format {
        Format::Markdown => "report.md",
        Format::Json => "report.json",
        Format::Perfetto => "trace.perfetto.json",
        Format::Svg => "step.svg",
    };
    if matches!(format, Format::Svg) && report::svg::worst_pair(analysis).is_none() {
        return Err(bad_input(
            "no eager/graphed pair in the input: nothing to draw, no SVG written".into(),
        ));
    }
    let reports = report::output::analysis_reports(analysis);
    trace::write_atomically_with(output, |w| {
        report::output::write_analysis_file(name, w, traces, &reports, origin_step)
    })?;
    Ok(())
}

/// stdout of `analyze` and `run`: the summary (with where the full report is), the whole
/// Markdown report (`--full`) or the JSON report (`--json`).
pub fn print_summary(reports: &Rendered<'_, Analysis>, out: &OutputArgs) -> Result<(), Failure> {
    let analysis = reports.value;
    if out.json {
        print_stdout(reports.json())
    } else if out.full {
        print_stdout(reports.markdown())
    } else {
        let path = out
            .output
            .as_ref()
            .map(|d| d.join("report.md").display().to_string());
        print_stdout(&report::summary::analysis_summary(
            analysis,
            path.as_deref(),
        ))
    }
}
