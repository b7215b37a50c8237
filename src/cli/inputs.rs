#![forbid(unsafe_code)]
//! Command-line inputs: a folder stands for its trace files, Kineto files are imported,
//! `--step-range` marks the steps, `--base-select`/`--head-select` keep some cells.

use super::{Failure, bad_input, note};
use gapscope::analysis::{self, Analysis, AnalysisOptions, rank_summary};
use gapscope::trace::{self, Trace, TraceError};
use std::path::{Path, PathBuf};

/// The analysis with default options; `names` name the traces in reports.
pub fn analyze(traces: &[Trace], names: &[String]) -> Analysis {
    analysis::analyze(traces, names, &AnalysisOptions::default())
}

/// The JSON files gapscope writes into an `-o` folder: reports, not traces, so a folder once
/// used as `-o` (or holding a trace beside its outputs) is still a folder of traces.
const OWN_OUTPUTS: [&str; 3] = ["report.json", "compare.json", "trace.perfetto.json"];

/// A file, or every `*.json` and `*.json.gz` file of a folder (sorted) but gapscope's own
/// outputs ([`OWN_OUTPUTS`], skipped with a note).
pub fn expand(path: &Path) -> Result<Vec<PathBuf>, Failure> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|source| TraceError::Io {
            path: path.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        // torch.profiler also writes `.json.gz`, which the import reads as is.
        .filter(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".json") || name.ends_with(".json.gz")
        })
        .collect();
    files.sort();
    let (outputs, files): (Vec<PathBuf>, Vec<PathBuf>) = files.into_iter().partition(|p| {
        p.file_name()
            .is_some_and(|n| OWN_OUTPUTS.iter().any(|o| n == *o))
    });
    let skipped = if outputs.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = outputs
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        format!(
            "{}: {} skipped (gapscope's own outputs, not traces; name one to read it anyway)",
            path.display(),
            names.join(", ")
        )
    };
    if files.is_empty() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "{}: no *.json or *.json.gz trace files in this folder{}",
            path.display(),
            if outputs.is_empty() {
                ""
            } else {
                " (only gapscope's own outputs)"
            }
        )));
    }
    if !skipped.is_empty() {
        note(&skipped);
    }
    Ok(files)
}

/// Every path expanded ([`expand`]), in order.
pub fn expand_all(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Failure> {
    Ok(paths
        .iter()
        .map(|p| expand(p))
        .collect::<Result<Vec<_>, _>>()?
        .concat())
}

/// Loads traces; with `step_range`, plain ranges of that name (NVTX ranges, torch
/// `record_function`s) become the steps.
pub fn load_with_steps(
    paths: &[PathBuf],
    step_range: Option<&str>,
) -> Result<(Vec<Trace>, Vec<String>), Failure> {
    let traces = paths
        .iter()
        .map(|p| load_one(p, step_range))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((
        traces,
        paths.iter().map(|p| p.display().to_string()).collect(),
    ))
}

/// Loads one trace (a gapscope trace or a Kineto trace, imported); with `step_range`, its
/// plain ranges of that name become the steps.
pub fn load_one(path: &Path, step_range: Option<&str>) -> Result<Trace, Failure> {
    // A gapscope trace, or a torch.profiler (Kineto) one imported; opened once, so a pipe
    // works. Bad input exits 2 either way.
    let mut trace = if trace::nsys::is_report_file(path) {
        let (trace, command) = trace::nsys::read_report(path).map_err(TraceError::from)?;
        note(&format!(
            "{}: an Nsight Systems report, exported to a temporary SQLite file with `{command}`",
            path.display(),
        ));
        trace
    } else {
        trace::read_any(path)?
    };
    match step_range {
        Some(name) if trace.mark_steps(name) == 0 => {
            note(&format!("{}: no range named '{name}'", path.display()));
        }
        // An import that marks no steps gets the step range `record` would have chosen.
        None if trace.metadata.source == trace::Source::Nsys => {
            analysis::discover::choose_step_range(&mut trace);
        }
        _ => {}
    }
    Ok(trace)
}

/// Whether `path` is a rank summary (`analyze --summary`) rather than a trace, from its
/// first bytes; `false` when it cannot be read (the trace reader then says why). Only a
/// regular file is peeked at: a pipe's or FIFO's bytes, once read, are gone for the reader.
pub fn is_summary_file(path: &Path) -> bool {
    use std::io::Read;
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = Vec::with_capacity(256);
    std::fs::File::open(path)
        .and_then(|f| f.take(256).read_to_end(&mut head))
        .is_ok_and(|_| rank_summary::looks_like_summary(&head))
}

/// `KEY=VALUE`: keeps only the cells whose request has it ([`Trace::select_cells`]).
pub fn select(traces: &mut [Trace], selection: Option<&str>, flag: &str) -> Result<(), Failure> {
    let Some(selection) = selection else {
        return Ok(());
    };
    let Some((key, value)) = selection.split_once('=') else {
        return Err(bad_input(format!(
            "{flag} {selection}: expected KEY=VALUE, e.g. graph_usage_mode=2"
        )));
    };
    let kept: usize = traces.iter_mut().map(|t| t.select_cells(key, value)).sum();
    if kept == 0 {
        return Err(bad_input(format!(
            "{flag} {selection}: no cell's request has {key}={value}"
        )));
    }
    Ok(())
}
