//! `timeline` → `steps` (markers and graph launches → steps and cells; `discover` finds
//! eager steps in the kernel sequence when nothing marks them) → `align` (graphed ↔
//! eager kernels) → `cause` (each gap's cause) → `stats`; `remedy` turns causes into changes to
//! make, `merge` compares ranks. The types every stage shares are in `model`. Safe Rust, no GPU
//! needed.
#![forbid(unsafe_code)]

pub mod align;
pub mod cause;
pub mod completeness;
pub mod coverage;
pub mod discover;
pub mod merge;
mod model;
pub mod provenance;
pub mod remedy;
pub mod stats;
pub mod steps;
pub mod timeline;
pub mod tracer_share;
pub mod validate;

pub use model::*;

use crate::trace::Trace;

/// Options of the analysis.
#[derive(Debug, Clone)]
pub struct AnalysisOptions {
    /// Eager: a gap counts as host launch-bound when the op's launch call returned no earlier
    /// than this many ns before the previous op ended (the device had nothing queued).
    pub launch_slack_ns: u64,
}

impl Default for AnalysisOptions {
    fn default() -> Self {
        AnalysisOptions {
            launch_slack_ns: 500,
        }
    }
}

/// With several inputs, cells of different inputs can carry the same label (one program's
/// ranks, or two recordings of one workload): such labels then say whose they are: `[rank N]`
/// when the inputs are distinct ranks, else the input's file name when those differ
/// (`[mode2-rank0]`), else `[input N]` (the order of the inputs). Labels no other input has stay.
fn name_inputs_in_labels(cells: &mut [CellAnalysis], traces: &[Trace], paths: &[String]) {
    use std::collections::{BTreeMap, BTreeSet};
    let mut inputs_of: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for c in cells.iter() {
        inputs_of
            .entry(c.label.clone())
            .or_default()
            .insert(c.trace);
    }
    let distinct = |names: &[String]| names.iter().collect::<BTreeSet<_>>().len() == names.len();
    let ranks: Vec<String> = traces
        .iter()
        .map(|t| format!("rank {}", t.metadata.rank))
        .collect();
    let files: Vec<String> = (0..traces.len())
        .map(|i| paths.get(i).map_or_else(String::new, |p| file_stem(p)))
        .collect();
    let tags: Vec<String> = if distinct(&ranks) {
        ranks
    } else if distinct(&files) && files.iter().all(|f| !f.is_empty()) {
        files
    } else {
        (0..traces.len()).map(|i| format!("input {i}")).collect()
    };
    for cell in cells {
        if inputs_of
            .get(&cell.label)
            .is_some_and(|inputs| inputs.len() > 1)
        {
            cell.label = format!("{} [{}]", cell.label, tags[cell.trace]);
        }
    }
}

/// `traces/x/mode2-rank0.json (bundled)` → `mode2-rank0`.
fn file_stem(path: &str) -> String {
    let path = path.split(" (").next().unwrap_or(path);
    let name = path.rsplit('/').next().unwrap_or(path);
    let name = name.strip_suffix(".gz").unwrap_or(name);
    name.strip_suffix(".json").unwrap_or(name).to_owned()
}

/// Analyses traces: one [`CellAnalysis`] per cell, and eager ↔ graphed pairs.
/// `paths` name the traces in reports (same order as `traces`).
pub fn analyze(traces: &[Trace], paths: &[String], options: &AnalysisOptions) -> Analysis {
    let mut analysis = Analysis::default();
    // Per input, the cells its missing records fall in.
    let mut touched: Vec<Vec<usize>> = Vec::with_capacity(traces.len());
    for (i, trace) in traces.iter().enumerate() {
        // Damage that parsing accepts is taken out here, and named in the input's summary.
        let (checked, damage) = validate::check(trace);
        let completeness = completeness::check(trace);
        let recorded = trace;
        let trace = &*checked;
        let timeline = timeline::build(trace);
        // One index of launch calls for splitting into steps and for attribution.
        let launches = steps::LaunchIndex::new(trace);
        let (cells, found) = steps::split_cells(trace, &timeline, &launches);
        let cells = steps::split_mixed_regimes(cells, &timeline);
        analysis.inputs.push(InputSummary {
            path: paths.get(i).cloned().unwrap_or_default(),
            source: trace.metadata.source,
            device: trace.metadata.device.as_ref().map(|d| d.name.clone()),
            versions: trace.metadata.versions.clone(),
            dropped_records: trace.dropped_records,
            notes: trace
                .metadata
                .notes
                .iter()
                .cloned()
                .chain(
                    (trace.metadata.source == crate::trace::Source::Kineto)
                        .then(|| provenance::KINETO_NOTE.to_owned()),
                )
                .collect(),
            kernels: recorded.kernels.len(),
            damage,
            completeness,
            steps: found,
        });
        let mut ctx = cause::TraceContext::new(trace, launches);
        let first_cell = analysis.cells.len();
        for cell in cells {
            analysis
                .cells
                .push(cause::analyze_cell(i, &mut ctx, &timeline, cell, options));
        }
        coverage::measure(
            &timeline,
            ctx.launches(),
            ctx.provenance(),
            &mut analysis.cells[first_cell..],
        );
        touched.push(
            completeness::touched_cells(
                &analysis.inputs[i].completeness,
                &analysis.cells[first_cell..],
                &timeline,
                ctx.launches(),
            )
            .into_iter()
            .map(|c| first_cell + c)
            .collect::<Vec<usize>>(),
        );
        analysis.timelines.push(timeline);
    }
    name_inputs_in_labels(&mut analysis.cells, traces, paths);
    for (input, cells) in analysis.inputs.iter_mut().zip(touched) {
        input.completeness.cells = cells
            .into_iter()
            .map(|c| analysis.cells[c].label.clone())
            .collect();
    }
    (analysis.regime_pairs, analysis.not_paired) = align::pair_regimes(&analysis.cells);
    let ratios: Vec<f64> = analysis
        .regime_pairs
        .iter()
        .filter_map(|p| p.ratio)
        .collect();
    analysis.geomean_ratio = stats::Geomean::of(&ratios);
    analysis.mode_pairs = align::pair_modes(&analysis.cells);
    (analysis.remedies, analysis.withheld_remedies) = remedy::remedies(&analysis);
    analysis
}
