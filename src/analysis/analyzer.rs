//! The analysis of a set of traces: each trace checked, split into cells and steps, and its
//! gaps attributed ([`Analyzer::add`]); then what is judged across the traces: labels, pairs,
//! remedies, the headline ([`Analyzer::finish`]). [`Analysis`] holds it all.
#![forbid(unsafe_code)]

use super::align::NotPaired;
use super::cause::{self, AnalysisOptions};
use super::cell::{CellAnalysis, CuptiLaunchCost};
use super::cell_comparison::{self, CellComparison};
use super::model::{CauseKind, TraceTimeline};
use super::stats::{self, Geomean};
use super::{
    completeness, coverage, discover, headline, left_out, provenance, remedy, steps, thresholds,
    timeline, tracer_share, untraced, validate,
};
use crate::trace::Trace;
use serde::Serialize;

/// Per trace: what reports must show about the input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InputSummary {
    pub path: String,
    pub source: crate::trace::Source,
    pub device: Option<String>,
    pub versions: crate::trace::Versions,
    pub dropped_records: u64,
    pub notes: Vec<String>,
    pub kernels: usize,
    /// What [`validate::check`] found damaged and left out, one line per kind.
    pub damage: Vec<String>,
    /// What the recording lost without saying (see [`completeness`]).
    pub completeness: completeness::Completeness,
    /// How the trace's eager steps were found (markers, the kernel sequence, or not at all).
    pub steps: discover::StepFinding,
    /// `gapscope record`'s trace budget, when the recording had one: cells with no tracer share
    /// then say that all their work was traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_budget: Option<u32>,
}

/// Everything `analyze` found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Analysis {
    pub inputs: Vec<InputSummary>,
    pub cells: Vec<CellAnalysis>,
    /// Eager vs graphed of the same workload and graph usage mode.
    pub regime_pairs: Vec<CellComparison>,
    /// Graphed cells of a trace with eager cells that were not paired, and why.
    pub not_paired: Vec<NotPaired>,
    /// Geometric mean of graphed/eager period ratios over the pairs, with range.
    pub geomean_ratio: Option<Geomean>,
    /// Graphed graph usage mode 1 (or 0) as base vs graphed mode 2 as head, same workload and
    /// launch pattern: what mode 2 costs and which gaps it comes from.
    pub mode_pairs: Vec<CellComparison>,
    /// For each cause with a known fix: the fix and its predicted saving, by cell.
    pub remedies: Vec<remedy::Remedy>,
    /// Remedies whose evidence is there but whose predicted saving is inside its spread or
    /// immaterial ([`remedy::remedies`]): not given, said in the report.
    pub withheld_remedies: Vec<remedy::Withheld>,
    /// What the screen and the report lead with: the cell the user can gain most on, its
    /// largest cause and its fix ([`headline`]).
    pub headline: Option<headline::Headline>,
    /// Per input trace, its op timeline (reports draw from it).
    #[serde(skip)]
    pub timelines: Vec<TraceTimeline>,
}

impl Analysis {
    /// The cells with their pairs, as the stages after pairing read them.
    pub fn paired(&self) -> cell_comparison::Paired<'_> {
        cell_comparison::Paired {
            cells: &self.cells,
            regime_pairs: &self.regime_pairs,
            mode_pairs: &self.mode_pairs,
        }
    }

    /// The largest gaps over every cell as (cell, position in its sequence), largest median
    /// first (ties in cell, then sequence, order), at most
    /// [`thresholds::LARGEST_GAPS_LISTED`]: the list a screen shows.
    pub fn largest_gaps(&self) -> Vec<(usize, usize)> {
        let mut gaps: Vec<(usize, usize)> = self
            .cells
            .iter()
            .enumerate()
            .flat_map(|(c, cell)| cell.largest_gaps().into_iter().map(move |i| (c, i)))
            .collect();
        let median = |&(c, i): &(usize, usize)| self.cells[c].sequence[i].gap_before.median;
        // One stable sort over every cell: ties stay in cell, then sequence, order.
        gaps.sort_by(|x, y| median(y).total_cmp(&median(x)));
        gaps.truncate(thresholds::LARGEST_GAPS_LISTED);
        gaps
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
        mark_cupti_costs(&mut analysis);
        (analysis.regime_pairs, analysis.not_paired) =
            cell_comparison::regime_pairs(&analysis.cells);
        let ratios: Vec<f64> = analysis
            .regime_pairs
            .iter()
            .filter_map(|p| p.ratio)
            .collect();
        analysis.geomean_ratio = stats::Geomean::of(&ratios);
        analysis.mode_pairs = cell_comparison::mode_pairs(&analysis.cells);
        (analysis.remedies, analysis.withheld_remedies) = remedy::remedies(&analysis.paired());
        analysis.headline = headline::headline(&analysis.paired(), &analysis.remedies);
        analysis
    }
}

/// What CUPTI itself adds that the reports say beside each cell it recorded (not a Kineto
/// import, not a synthetic trace): that its first launches are inflated by kernel tracing
/// ([`CellAnalysis::first_launches_inflated_by_cupti`]), and, for a graph cell whose steps
/// lose time to host-bound graph launches, the graph's size behind CUPTI's per-node launch cost
/// ([`CellAnalysis::cupti_launch_cost`]).
fn mark_cupti_costs(a: &mut Analysis) {
    for c in &mut a.cells {
        let recorded = a.inputs.get(c.trace).map(|i| i.source) == Some(crate::trace::Source::Cupti);
        if !recorded {
            continue;
        }
        c.first_launches_inflated_by_cupti = c.first_launch_period.is_some();
        c.cupti_launch_cost = c.graph_group.as_ref().and_then(|group| {
            let host_bound = c
                .idle_by_cause
                .iter()
                .find(|t| t.cause == CauseKind::GraphLaunchHostBound)?;
            let nodes = match group.identity.node_counts.values().sum::<usize>() {
                0 => group.identity.op_names.len(),
                n => n,
            };
            Some(CuptiLaunchCost {
                nodes,
                host_bound_per_step: host_bound.per_step.median,
            })
        });
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
