#![forbid(unsafe_code)]
//! Command-line inputs: a folder stands for its trace files, Kineto files are imported,
//! `--step-range` marks the steps, `--base-select`/`--head-select` keep some cells.

use super::{Failure, bad_input};
use gapscope::analysis::{self, Analysis, AnalysisOptions};
use gapscope::trace::{self, Trace, TraceError};
use std::path::{Path, PathBuf};

/// The analysis with default options; `names` name the traces in reports.
pub fn analyze(traces: &[Trace], names: &[String]) -> Analysis {
    analysis::analyze(traces, names, &AnalysisOptions::default())
}

/// gapscope's own outputs, which a folder once used as `-o` holds: never traces.
const OUTPUT_NAMES: [&str; 3] = ["report.json", "compare.json", "trace.perfetto.json"];

/// A file, or every `*.json` file of a folder (sorted), gapscope's own outputs left out.
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
            let output = p
                .file_name()
                .is_some_and(|n| OUTPUT_NAMES.iter().any(|o| n == *o));
            (name.ends_with(".json") || name.ends_with(".json.gz")) && !output
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Failure {
            code: 2,
            error: anyhow::anyhow!(
                "{}: no *.json or *.json.gz trace files in this folder",
                path.display()
            ),
        });
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

pub fn load(paths: &[PathBuf]) -> Result<(Vec<Trace>, Vec<String>), Failure> {
    load_with_steps(paths, None)
}

/// Loads traces; with `step_range`, plain ranges of that name (NVTX ranges, torch
/// `record_function`s) become the steps.
pub fn load_with_steps(
    paths: &[PathBuf],
    step_range: Option<&str>,
) -> Result<(Vec<Trace>, Vec<String>), Failure> {
    let mut traces = Vec::with_capacity(paths.len());
    for p in paths {
        // A gapscope trace, or a torch.profiler (Kineto) one imported; opened once, so a pipe
        // works. Bad input exits 2 either way.
        traces.push(trace::read_any(p)?);
    }
    if let Some(name) = step_range {
        for (t, p) in traces.iter_mut().zip(paths) {
            if t.mark_steps(name) == 0 {
                eprintln!("gapscope: note: {}: no range named '{name}'", p.display());
            }
        }
    }
    Ok((
        traces,
        paths.iter().map(|p| p.display().to_string()).collect(),
    ))
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
