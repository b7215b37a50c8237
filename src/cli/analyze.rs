#![forbid(unsafe_code)]
//! `gapscope analyze` and `gapscope export`, and the analysis output set and stdout that
//! `run` shares with `analyze`.

use super::args::{Format, OutputArgs};
use super::inputs::{analyze, expand_all, load, load_with_steps};
use super::{Failure, PhaseTimer, bad_input, print_stdout};
use gapscope::analysis::Analysis;
use gapscope::report;
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
    write_outputs(&traces, &analysis, out)?;
    print_summary(&analysis, out)?;
    timer.lap("reports");
    Ok(ExitCode::SUCCESS)
}

/// `gapscope export TRACE… --format F -o FILE`: one file, written atomically.
pub fn export(
    traces: &[PathBuf],
    format: Format,
    output: &Path,
    origin_step: Option<usize>,
) -> Result<ExitCode, Failure> {
    let (traces, names) = load(traces)?;
    let analysis = analyze(&traces, &names);
    export_one(&traces, &analysis, format, output, origin_step)?;
    eprintln!("wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}

/// The analysis set into `-o DIR` when given ([`report::output::write_analysis_set`]).
pub fn write_outputs(
    traces: &[Trace],
    analysis: &Analysis,
    out: &OutputArgs,
) -> Result<(), Failure> {
    let Some(dir) = &out.output else {
        return Ok(());
    };
    check_origin_step(analysis, out.origin_step)?;
    let written = report::output::write_analysis_set(dir, traces, analysis, out.origin_step)?;
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
    match format {
        Format::Markdown => trace::write_atomically(
            output,
            report::markdown::analysis_markdown(analysis).as_bytes(),
        )?,
        Format::Json => {
            trace::write_atomically(output, report::json::analysis_json(analysis).as_bytes())?
        }
        Format::Perfetto => {
            let opts = report::perfetto::PerfettoOptions { origin_step };
            trace::write_atomically_with(output, |w| {
                report::perfetto::write_chrome_trace(w, traces, analysis, &opts)
            })?
        }
        Format::Svg => {
            let Some(pair) = report::svg::worst_pair(analysis) else {
                return Err(bad_input(
                    "no eager/graphed pair in the input: nothing to draw, no SVG written".into(),
                ));
            };
            let step = origin_step.unwrap_or(1);
            trace::write_atomically(
                output,
                report::svg::step_svg(traces, analysis, pair, step).as_bytes(),
            )?
        }
    }
    Ok(())
}

/// stdout of `analyze` and `run`: the summary (with where the full report is), the whole
/// Markdown report (`--full`) or the JSON report (`--json`).
pub fn print_summary(analysis: &Analysis, out: &OutputArgs) -> Result<(), Failure> {
    if out.json {
        print_stdout(&report::json::analysis_json(analysis))
    } else if out.full {
        print_stdout(&report::markdown::analysis_markdown(analysis))
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
