#![forbid(unsafe_code)]
//! `gapscope analyze` and `gapscope export`, and the analysis output set and stdout that
//! `run` shares with `analyze`.

use super::args::{Format, OutputArgs};
use super::inputs::{expand_all, load_one};
use super::{
    Failure, PhaseTimer, bad_input, check_output_folder, note, print_stdout, print_stdout_with,
};
use gapscope::analysis::{Analysis, AnalysisOptions, Analyzer, Detail, rank_summary};
use gapscope::report;
use gapscope::report::PerfettoFormat;
use gapscope::report::output_set::Rendered;
use gapscope::trace::Trace;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `gapscope analyze TRACE… [-o DIR] [--summary FILE]`.
///
/// The traces are read and analysed one at a time. Without `-o` nothing draws the steps (no
/// Perfetto trace, no SVG), so each trace's detail is dropped once its cells are analysed:
/// memory holds one trace, however many are given.
pub fn command(
    traces: &[PathBuf],
    out: &OutputArgs,
    perfetto: PerfettoFormat,
    summary: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let mut timer = PhaseTimer::from_env();
    if let Some(dir) = &out.output {
        check_output_folder(dir)?;
    }
    // A folder stands for its trace files (as HTA's trace_dir).
    let paths = expand_all(traces)?;
    if let Some(file) = summary {
        super::refuse_input_as_output(file, &paths)?;
    }
    if summary.is_some() && paths.len() != 1 {
        return Err(bad_input(format!(
            "--summary summarises one rank: give one trace, not {} (run analyze once per rank)",
            paths.len()
        )));
    }
    let detail = if out.output.is_some() {
        Detail::Steps
    } else {
        Detail::Figures
    };
    let mut analyzer = Analyzer::new(AnalysisOptions::default(), detail);
    let mut kept = Vec::new();
    let mut collectives = None;
    for p in &paths {
        let mut trace = load_one(p, out.steps.step_range.as_deref())?;
        timer.part("load");
        if summary.is_some() {
            collectives = Some(rank_summary::owned_collective_ends(&trace));
        }
        analyzer.add(&mut trace, p.display().to_string());
        timer.part("analysis");
        if detail == Detail::Steps || summary.is_some() {
            kept.push(trace);
        }
    }
    timer.lap("load and analysis");
    let analysis = analyzer.finish();
    timer.lap("analysis across traces");
    note_damage(&analysis);
    check_origin_step(&analysis, out.origin.origin_step)?;
    let reports = report::output_set::analysis_reports(&analysis);
    print_summary(&reports, out)?;
    write_outputs(&kept, &reports, out, perfetto)?;
    if let (Some(file), Some(trace), Some(collectives)) = (summary, kept.first(), collectives) {
        let name = paths[0].display().to_string();
        let json = rank_summary::RankSummary::new(trace, &name, collectives, &analysis).to_json();
        gapscope::output::write_atomically(file, json.as_bytes())?;
        note(&format!("wrote {}", file.display()));
    }
    timer.lap("reports");
    // The process ends here: its exit gives the memory back at once, without freeing the
    // analysis's many small allocations one by one.
    drop(reports);
    std::mem::forget(analysis);
    std::mem::forget(kept);
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
    let mut analyzer = Analyzer::new(AnalysisOptions::default(), Detail::Steps);
    let mut loaded = Vec::new();
    let paths = expand_all(traces)?;
    super::refuse_input_as_output(output, &paths)?;
    for p in &paths {
        let mut trace = load_one(p, None)?;
        analyzer.add(&mut trace, p.display().to_string());
        loaded.push(trace);
    }
    let analysis = analyzer.finish();
    export_one(&loaded, &analysis, format, output, origin_step)?;
    note(&format!("wrote {}", output.display()));
    Ok(ExitCode::SUCCESS)
}

/// The analysis set into `-o DIR` when given ([`report::output_set::write_analysis_set`]), its
/// Perfetto trace in `perfetto`, then what was written, as notes.
pub fn write_outputs(
    traces: &[Trace],
    reports: &Rendered<'_, Analysis>,
    out: &OutputArgs,
    perfetto: PerfettoFormat,
) -> Result<(), Failure> {
    let Some(dir) = &out.output else {
        return Ok(());
    };
    let written = report::output_set::write_analysis_set(
        dir,
        traces,
        reports,
        out.origin.origin_step,
        perfetto,
    )?;
    if !written.iter().any(|n| n == "step.svg") {
        note("no eager/graphed pair in the input: no step.svg");
    }
    let open = format!("open {} at https://ui.perfetto.dev", perfetto.file_name());
    note_wrote("", dir, &written, Some(&open));
    Ok(())
}

/// What the analysis found damaged in each input (and left out), as notes.
pub fn note_damage(analysis: &Analysis) {
    for input in &analysis.inputs {
        for damage in &input.damage {
            note(&format!("{}: {damage}", input.path));
        }
    }
}

/// The widest message of a note: stderr lines, as the screen's, are at most
/// [`gapscope::report::summary::SCREEN_WIDTH`] characters with their "gapscope: note: ".
const NOTE_WIDTH: usize = gapscope::report::summary::SCREEN_WIDTH - "gapscope: note: ".len();

/// "wrote DIR/{a,b}", the one form every set's note takes, with `then` after it ("(open …)")
/// when all fits one note; else the folder once ("wrote into DIR:"), the files on the next
/// notes, and `then` on its own.
pub fn wrote_notes(
    prefix: &str,
    dir: &Path,
    written: &[String],
    then: Option<&str>,
) -> Vec<String> {
    let dir = gapscope::messages::printable(&dir.display().to_string()).into_owned();
    let fits = |line: &str| line.chars().count() <= NOTE_WIDTH;
    let whole = format!("{prefix}wrote {dir}/{{{}}}", written.join(","));
    let with_then = match then {
        Some(t) => format!("{whole} ({t})"),
        None => whole.clone(),
    };
    if fits(&with_then) {
        return vec![with_then];
    }
    let mut notes = if fits(&whole) {
        vec![whole]
    } else {
        let mut notes = vec![format!("{prefix}wrote into {dir}:")];
        let mut line = String::new();
        for name in written {
            let name = gapscope::messages::printable(name);
            if !line.is_empty() && !fits(&format!("  {line}, {name}")) {
                notes.push(format!("  {line},"));
                line.clear();
            }
            if !line.is_empty() {
                line.push_str(", ");
            }
            line.push_str(&name);
        }
        notes.push(format!("  {line}"));
        notes
    };
    notes.extend(then.map(str::to_owned));
    notes
}

/// Notes [`wrote_notes`].
pub fn note_wrote(prefix: &str, dir: &Path, written: &[String], then: Option<&str>) {
    for line in wrote_notes(prefix, dir, written, then) {
        note(&line);
    }
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

/// `--origin-step K` must name a step some cell has: checked before any output, whether or
/// not an output uses it.
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
        Format::Perfetto => PerfettoFormat::Protobuf.file_name(),
        Format::PerfettoJson => PerfettoFormat::Json.file_name(),
        Format::Svg => "step.svg",
    };
    if matches!(format, Format::Svg) && report::svg::worst_pair(analysis).is_none() {
        return Err(bad_input(
            "no eager/graphed pair in the input: nothing to draw, no SVG written".into(),
        ));
    }
    let reports = report::output_set::analysis_reports(analysis);
    gapscope::output::write_atomically_with(output, |w| {
        report::output_set::write_analysis_file(name, w, traces, &reports, origin_step)
    })?;
    Ok(())
}

/// stdout of `analyze` and `run`: the summary (with where the full report is), the whole
/// Markdown report (`--full`) or the JSON report (`--json`).
pub fn print_summary(reports: &Rendered<'_, Analysis>, out: &OutputArgs) -> Result<(), Failure> {
    let analysis = reports.value;
    if out.print.json() && out.output.is_none() && !reports.has_json() {
        // No output set shares it: written as it is made, not held.
        print_stdout_with(|w| report::json::write_analysis_json(analysis, w))
    } else if out.print.json() {
        print_stdout(reports.json())
    } else if out.print.full {
        print_stdout(reports.markdown())
    } else {
        let path = out
            .output
            .as_ref()
            .map(|d| d.join("report.md").display().to_string());
        print_stdout(&report::summary::fit_screen(
            &report::summary::analysis_summary(analysis, path.as_deref()),
        ))
    }
}
