//! `timeline` → `steps` (markers and graph launches → steps and cells; `discover` finds
//! eager steps in the kernel sequence when nothing marks them) → `align` (graphed ↔
//! eager kernels) → `cause` (each gap's cause) → `stats`; `remedy` turns causes into changes to
//! make, `merge` compares ranks, `trial` judges `gapscope try`'s variants. The types every stage shares are in `model`. Safe Rust, no GPU
//! needed.
#![forbid(unsafe_code)]

pub mod align;
pub mod cause;
pub mod compare;
pub mod completeness;
mod corr_set;
pub mod coverage;
pub mod discover;
pub mod headline;
pub mod host_samples;
pub mod left_out;
pub mod merge;
mod model;
pub mod provenance;
pub mod rank_summary;
pub mod remedy;
pub mod stats;
pub mod steps;
pub mod thresholds;
pub mod timeline;
pub mod tracer_share;
pub mod trial;
pub mod untraced;
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
fn name_inputs_in_labels(cells: &mut [CellAnalysis], ranks: &[u32], paths: &[String]) {
    use std::collections::{BTreeMap, BTreeSet};
    let mut inputs_of: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for c in cells.iter() {
        inputs_of
            .entry(c.label.clone())
            .or_default()
            .insert(c.trace);
    }
    let distinct = |names: &[String]| names.iter().collect::<BTreeSet<_>>().len() == names.len();
    let ranks: Vec<String> = ranks.iter().map(|r| format!("rank {r}")).collect();
    let files: Vec<String> = (0..ranks.len())
        .map(|i| paths.get(i).map_or_else(String::new, |p| file_stem(p)))
        .collect();
    let tags: Vec<String> = if distinct(&ranks) {
        ranks
    } else if distinct(&files) && files.iter().all(|f| !f.is_empty()) {
        files
    } else {
        (0..ranks.len()).map(|i| format!("input {i}")).collect()
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
    let mut analyzer = Analyzer::new(options.clone(), Detail::Steps);
    for (i, trace) in traces.iter().enumerate() {
        analyzer.add_borrowed(trace, paths.get(i).cloned().unwrap_or_default());
    }
    analyzer.finish()
}

/// What an [`Analyzer`] keeps of each trace beyond the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Every step's ops and gaps and the op timelines: what the Perfetto trace and the step
    /// SVG draw.
    Steps,
    /// The figures only (what the Markdown and JSON reports and the summaries print): each
    /// trace's timeline and its steps' ops and gaps are dropped once its cells are analysed,
    /// so memory holds one trace's detail at a time.
    Figures,
}

/// The analysis of traces added one at a time: each trace is analysed when added; the
/// comparisons across traces (labels, pairs, remedies) are made by [`Analyzer::finish`].
/// The result is [`analyze`]'s, whatever the order of the calls around it.
pub struct Analyzer {
    options: AnalysisOptions,
    detail: Detail,
    analysis: Analysis,
    ranks: Vec<u32>,
    paths: Vec<String>,
    /// Per input, the cells its missing records fall in.
    touched: Vec<Vec<usize>>,
}

impl Analyzer {
    pub fn new(options: AnalysisOptions, detail: Detail) -> Analyzer {
        Analyzer {
            options,
            detail,
            analysis: Analysis::default(),
            ranks: Vec::new(),
            paths: Vec::new(),
            touched: Vec::new(),
        }
    }

    /// Analyses `trace` (named `path` in reports), moving its device records (kernels,
    /// memcpys, memsets) into the analysis's timeline instead of copying them: `trace`
    /// keeps everything else, which is all the reports read of it. A damaged trace (see
    /// [`validate`]) is analysed on its checked copy and keeps its records.
    pub fn add(&mut self, trace: &mut Trace, path: String) {
        // Both checks read the device records: before they move.
        let ((checked, damage), completeness) = checks(trace);
        let checked = match checked {
            std::borrow::Cow::Owned(checked) => Some(checked),
            std::borrow::Cow::Borrowed(_) => None,
        };
        let kernels = trace.kernels.len();
        let recorded = Recorded {
            path,
            kernels,
            damage,
            completeness,
        };
        match checked {
            Some(checked) => {
                let timeline = timeline::build(&checked);
                self.add_checked(&checked, recorded, timeline);
            }
            None => {
                let timeline = timeline::build_taking(trace);
                self.add_checked(trace, recorded, timeline);
            }
        }
    }

    /// [`Analyzer::add`] of a trace that stays as it is: its device ops are copied.
    pub fn add_borrowed(&mut self, trace: &Trace, path: String) {
        // Damage that parsing accepts is taken out here, and named in the input's summary.
        let ((checked, damage), completeness) = checks(trace);
        let recorded = Recorded {
            path,
            kernels: trace.kernels.len(),
            damage,
            completeness,
        };
        let timeline = timeline::build(&checked);
        self.add_checked(&checked, recorded, timeline);
    }

    /// Analyses `trace`, checked by [`validate`], whose device ops are `timeline`.
    fn add_checked(&mut self, trace: &Trace, recorded: Recorded, mut timeline: TraceTimeline) {
        let i = self.analysis.inputs.len();
        // One index of launch calls for splitting into steps and for attribution.
        let launches = timeline::LaunchIndex::new(trace);
        let measured = untraced::take_measured(trace, &mut timeline, &launches);
        let (cells, found) = steps::split_cells(trace, &timeline, &launches);
        let cells = steps::split_mixed_regimes(cells, trace, &timeline);
        let untraced_periods = untraced::periods(&cells, &timeline, &measured);
        self.analysis.inputs.push(InputSummary {
            path: recorded.path.clone(),
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
            kernels: recorded.kernels,
            trace_budget: trace.metadata.sampling.as_ref().map(|s| s.budget),
            damage: recorded.damage,
            completeness: recorded.completeness,
            steps: found,
        });
        self.ranks.push(trace.metadata.rank);
        self.paths.push(recorded.path);
        let mut ctx = cause::TraceContext::new(trace, launches);
        let first_cell = self.analysis.cells.len();
        for (cell, untraced_windows) in cells.into_iter().zip(untraced_periods) {
            let mut cell = cause::analyze_cell(i, &mut ctx, &timeline, cell, &self.options);
            if let Some((stat, medians)) = untraced::stat(&untraced_windows) {
                cell.untraced_period = Some(stat);
                cell.untraced_window_medians = medians;
            }
            // Where the device measured both, the tracer's share is read on its clock.
            if let (Some(traced), Some(untraced)) = (cell.period, cell.untraced_period)
                && let Some(share) = tracer_share::TracerShare::of_device(traced, untraced)
            {
                cell.tracer_share = Some(share);
            }
            self.analysis.cells.push(cell);
        }
        let cells = &mut self.analysis.cells[first_cell..];
        coverage::measure(&timeline, ctx.launches(), ctx.provenance(), cells);
        left_out::measure(&timeline, ctx.launches(), cells);
        self.touched.push(
            completeness::touched_cells(
                &self.analysis.inputs[i].completeness,
                cells,
                &timeline,
                ctx.launches(),
            )
            .into_iter()
            .map(|c| first_cell + c)
            .collect(),
        );
        if self.detail == Detail::Figures {
            for step in cells.iter_mut().flat_map(|c| &mut c.steps) {
                step.ops = Vec::new();
                step.gaps = Vec::new();
            }
        }
        self.analysis.timelines.push(match self.detail {
            Detail::Steps => timeline,
            Detail::Figures => TraceTimeline::default(),
        });
    }

    /// The comparisons across the traces added: labels of cells several inputs share, the
    /// cells missing records touch, eager ↔ graphed and mode pairs, the geomean, remedies.
    pub fn finish(self) -> Analysis {
        let mut analysis = self.analysis;
        name_inputs_in_labels(&mut analysis.cells, &self.ranks, &self.paths);
        for (input, cells) in analysis.inputs.iter_mut().zip(self.touched) {
            input.completeness.cells = cells
                .into_iter()
                .map(|c| analysis.cells[c].label.clone())
                .collect();
        }
        tracer_share::mark_cupti_costs(&mut analysis);
        (analysis.regime_pairs, analysis.not_paired) = compare::regime_pairs(&analysis.cells);
        let ratios: Vec<f64> = analysis
            .regime_pairs
            .iter()
            .filter_map(|p| p.ratio)
            .collect();
        analysis.geomean_ratio = stats::Geomean::of(&ratios);
        analysis.mode_pairs = compare::mode_pairs(&analysis.cells);
        (analysis.remedies, analysis.withheld_remedies) = remedy::remedies(&analysis);
        analysis.headline = headline::headline(&analysis);
        analysis
    }
}

/// [`validate::check`] and [`completeness::check`] of `trace`, side by side when there are
/// threads to spare: both only read it, and each is a pass over every record.
fn checks(trace: &Trace) -> (ValidatedTrace<'_>, completeness::Completeness) {
    if crate::worker_threads() < 2 {
        return (validate::check(trace), completeness::check(trace));
    }
    std::thread::scope(|scope| {
        let completeness = scope.spawn(|| completeness::check(trace));
        let validated = validate::check(trace);
        match completeness.join() {
            Ok(completeness) => (validated, completeness),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// What [`validate::check`] returns: the trace with its damage taken out, and what was.
type ValidatedTrace<'t> = (std::borrow::Cow<'t, Trace>, Vec<String>);

/// What an input was before [`validate`] took its damage out.
struct Recorded {
    path: String,
    /// Kernels the trace recorded.
    kernels: usize,
    damage: Vec<String>,
    completeness: completeness::Completeness,
}
