//! A cell's analysis: one configuration (regime, mode, T, launch pattern) of one trace, with
//! what each stage found in it (steps, causes, coverage, host time, the tracer's share).
#![forbid(unsafe_code)]

use super::model::{CauseKind, OpKind, Regime, Step};
use super::stats::Stat;
use serde::Serialize;
use std::collections::BTreeMap;

/// What the recording shows about the graph topology, independent of what was asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Observed {
    pub regime: Option<Regime>,
    /// External event-wait / explicit event-record / host nodes per replayed executable graph
    /// (median over the cell's graphs).
    pub external_wait_nodes: usize,
    pub external_record_nodes: usize,
    pub host_nodes: usize,
    /// "2 (N external event nodes, from NCCL)" (or "not from NCCL": the serial-event shape
    /// built by hand) when the graphs hold external event-wait nodes, "1 (no external event
    /// nodes)" when a graphed cell has none, `None` for eager cells.
    pub graph_usage_mode: Option<String>,
    /// The external event-wait nodes were created inside NCCL calls.
    pub external_nodes_from_nccl: bool,
    /// Node types of the cell's first executable graph, with counts ("EventWait (external)",
    /// "Kernel", ...): what a comparison of two graphed cells can diff.
    pub node_counts: BTreeMap<String, usize>,
    /// Share (0…1) of the cell's device time (op durations summed) that graph replays ran;
    /// the rest eager launches (see [`super::coverage`]). `None` for a cell without ops.
    pub graph_coverage: Option<f64>,
    /// The same share counted in ops.
    pub graph_coverage_ops: Option<f64>,
    /// A graphed cell whose steps also launched eager ops: how many steps, how many ops.
    pub eager_in_graphed: Option<EagerInGraphed>,
    /// Device work in the steps' windows that the step markers left out (counted as idle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_out: Option<LeftOut>,
    /// The cell's steps launched torch.compile's Triton kernels and no graph replay: a
    /// compiled phase that ran eagerly (torch.compile skipped its CUDA graphs, or was not
    /// asked for them).
    pub compiled_without_graphs: bool,
    /// Share (0…1) of the cell's replayed ops whose graph node carries a provenance (NVTX
    /// ranges at its creation, or a library); `None` without replayed ops.
    pub replayed_with_provenance: Option<f64>,
    /// Share (0…1) of the cell's replayed ops whose graph node names the program's Python
    /// code that created it; `None` without replayed ops, or when the recording read no
    /// node's Python frames.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed_with_code: Option<f64>,
}

impl Observed {
    /// The graph usage mode without its evidence: "2" of "2 (2 external event nodes, …)".
    pub fn graph_usage_mode_short(&self) -> Option<&str> {
        let mode = self.graph_usage_mode.as_deref()?;
        mode.split(" (").next()
    }

    /// The share of device time graph replays ran, where it is not the one the regime
    /// implies (eager 0, graphed all of it): only then does it say something.
    pub fn graph_coverage_unimplied(&self) -> Option<f64> {
        let implied = match self.regime {
            Some(Regime::Eager) => Some(0.0),
            Some(Regime::Graphed) => Some(1.0),
            None => None,
        };
        // Beyond a float's rounding of a sum of durations.
        self.graph_coverage
            .filter(|&g| implied.is_none_or(|i: f64| (g - i).abs() > 1e-9))
    }
}

/// Graphed steps of a cell that launched eager ops as well.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EagerInGraphed {
    /// Steps with eager ops, of the cell's graphed steps.
    pub steps: usize,
    pub of: usize,
    /// The eager ops those steps launched, and their device time (ns).
    pub ops: usize,
    pub device_ns: u64,
}

/// Device work that ran inside a cell's step windows but was launched outside its steps (ops
/// without a launch call in the trace are not counted: the completeness check names those).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LeftOut {
    /// Ops that started in a step's window and belong to none of the cell's steps, and their
    /// device time in the windows (ns).
    pub ops: usize,
    pub device_ns: u64,
    /// Their share (0…1) of the device time in the windows (theirs and the steps' own ops').
    pub share: f64,
}

/// Per position of a cell's canonical op sequence: durations and the gap before, over steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SequenceEntry {
    pub name: String,
    pub kind: OpKind,
    pub duration: Stat,
    /// Idle time between the previous op (or the previous step) and this op.
    pub gap_before: Stat,
    /// The most frequent cause of that gap.
    pub gap_cause: CauseKind,
    /// Its label, from one representative step.
    pub gap_cause_label: String,
    /// The library call that launched this op (e.g. `ncclAllGather`): from the graph node's
    /// tag, or, eager, from the library-call marker around its launch.
    pub library_call: Option<String>,
    /// Where the op came from in the program (of the op at this position in a representative
    /// step); `None` when the trace holds nothing.
    pub provenance: Option<super::provenance::Provenance>,
    /// For a host-bound gap: the host code sampled in it, over the steps
    /// ([`super::host_samples`]); `None` when the gap is not host-bound or the trace has no
    /// host samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_time: Option<super::host_samples::HostTime>,
}

/// Idle time of one cause, per step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CauseTotal {
    pub cause: CauseKind,
    /// Label of its gap in the first step that has one (names nodes and APIs).
    pub example: String,
    pub per_step: Stat,
}

/// A cell: one configuration (regime, mode, T, launch pattern) of one trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellAnalysis {
    /// Index of the trace among the inputs.
    pub trace: usize,
    pub label: String,
    pub requested: BTreeMap<String, serde_json::Value>,
    pub observed: Observed,
    /// Differences between requested and observed (regime, mode), one line each.
    pub mismatches: Vec<String>,
    /// Not serialised with the cell (reports add it on request).
    #[serde(skip)]
    pub steps: Vec<Step>,
    /// Trace-derived period of steady-state steps (first launches excluded).
    pub period: Option<Stat>,
    /// Period of first launches of executable graphs (graphs instantiated anew).
    pub first_launch_period: Option<Stat>,
    /// Run-to-run spread of the period: the medians of up to 10 consecutive blocks of steps
    /// (and their summary). Differences between cells are judged on these, not on the
    /// per-step spread.
    pub period_runs: Option<Stat>,
    pub period_block_medians: Vec<f64>,
    /// Period from CUDA events, measured by the workload independently of the trace.
    pub event_period: Option<Stat>,
    pub busy: Option<Stat>,
    pub idle: Option<Stat>,
    pub idle_by_cause: Vec<CauseTotal>,
    /// Durations of the launch calls of graph launches that held the device idle (the gaps caused
    /// by [`super::model::Cause::GraphLaunchHostBound`] in the steps behind the figures), ns. Kept
    /// here because the steps' gaps may be dropped ([`super::Detail::Figures`]).
    #[serde(skip)]
    pub host_bound_launch_calls: Option<Stat>,
    /// Per step with a period, the host's time before its launches in its host-bound gaps: a
    /// host launch-bound gap whole, a host-bound graph launch's less its launch call, summed,
    /// ns. The host ran other code there while the device waited (what
    /// [`super::remedy::RemedyKind::HostCodeBeforeLaunch`] would save).
    #[serde(skip)]
    pub host_before_launch: Option<Stat>,
    /// The host code sampled in all the cell's host-bound gaps together
    /// ([`super::host_samples`]); `None` without host samples or host-bound gaps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_time: Option<super::host_samples::HostTime>,
    pub sequence: Vec<SequenceEntry>,
    /// Figures the workload measured itself (see [`crate::trace::Cell::reference`]).
    pub reference: BTreeMap<String, f64>,
    /// For a cell of graph launches outside step markers: the graph's identity and how its
    /// executable graphs were launched (see [`super::steps`]).
    pub graph_group: Option<super::steps::GraphGroup>,
    /// For a cell of eager steps found in the kernel sequence (no step markers): its unit and
    /// steps (see [`super::discover`]).
    pub found: Option<super::discover::FoundSteps>,
    /// When `gapscope record`'s trace budget traced only part of this cell's work: how much.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampled: Option<Sampled>,
    /// What tracing added to this cell's host step period, from the untraced steps of the
    /// same run (step-range cells and graph replays under a trace budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracer_share: Option<super::tracer_share::TracerShare>,
    /// The cell's step period as the program ran it untraced, on the device's clock: from
    /// the launches and steps `gapscope record` measured after each pause
    /// ([`super::untraced`]). The figure to compare with the program's own period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untraced_period: Option<Stat>,
    /// The median of each measured window's periods: the untraced period's run-to-run samples.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub untraced_window_medians: Vec<f64>,
    /// Whether the cell has first launches that CUPTI recorded: its kernel tracing inflates
    /// them (each new executable graph is set up inside its first launch), so reports say so.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub first_launches_inflated_by_cupti: bool,
    /// For a CUPTI-recorded graph cell whose steps lose time to host-bound graph launches: how
    /// much CUPTI itself may have added, from the graph's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cupti_launch_cost: Option<CuptiLaunchCost>,
}

/// The part of a cell's launches or steps a trace budget traced (the rest ran untraced).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sampled {
    pub traced: u64,
    pub of: u64,
    /// "launches" (of one executable graph) or "steps" (step ranges).
    pub unit: &'static str,
}

impl Sampled {
    /// What a cell of `graph_group` (`None`: a cell of step ranges) traced of its work, from
    /// the trace's record of its budget.
    pub fn of_cell(
        sampling: Option<&crate::trace::Sampling>,
        graph_group: Option<&super::steps::GraphGroup>,
    ) -> Option<Sampled> {
        let sampling = sampling?;
        match graph_group {
            Some(g) if g.launch == super::steps::GraphLaunch::Replay => {
                let exec = *g.execs.first()?;
                let graph = sampling.graphs.iter().find(|s| s.exec == exec)?;
                Some(Sampled {
                    traced: graph.traced,
                    of: graph.launches,
                    unit: "launches",
                })
            }
            // Fresh graphs: every first launch was traced.
            Some(_) => None,
            None => (sampling.steps > sampling.steps_traced).then_some(Sampled {
                traced: sampling.steps_traced,
                of: sampling.steps,
                unit: "steps",
            }),
        }
    }

    /// "64 of 200 launches traced".
    pub fn describe(&self) -> String {
        format!("{} of {} {} traced", self.traced, self.of, self.unit)
    }
}

impl CellAnalysis {
    /// Why the cell has no period, when it has none ([`super::stats::why_no_period`]).
    pub fn why_no_period(&self) -> Option<String> {
        self.period
            .is_none()
            .then(|| super::stats::why_no_period(self.steps.len()))
    }

    /// The first op launched by an NCCL call (real or emulated), with its position.
    pub fn collective(&self) -> Option<(usize, &SequenceEntry)> {
        self.sequence.iter().enumerate().find(|(_, e)| {
            e.library_call
                .as_deref()
                .is_some_and(|l| l.starts_with("nccl"))
        })
    }

    /// Positions of the canonical sequence with a gap before them, largest median gap first
    /// (ties in sequence order).
    pub fn largest_gaps(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.sequence.len())
            .filter(|&i| self.sequence[i].gap_before.median > 0.0)
            .collect();
        order.sort_by(|&x, &y| {
            self.sequence[y]
                .gap_before
                .median
                .total_cmp(&self.sequence[x].gap_before.median)
        });
        order
    }

    /// The [`Self::largest_gaps`] a report lists: at most
    /// [`super::thresholds::LARGEST_GAPS_LISTED`].
    pub fn largest_gaps_listed(&self) -> Vec<usize> {
        let mut order = self.largest_gaps();
        order.truncate(super::thresholds::LARGEST_GAPS_LISTED);
        order
    }

    /// The largest gaps with host code sampled in them, largest first, at most
    /// [`super::thresholds::LARGEST_GAPS_LISTED`].
    pub fn largest_sampled_gaps_listed(&self) -> Vec<usize> {
        let mut order = self.largest_gaps();
        order.retain(|&i| self.sequence[i].host_time.is_some());
        order.truncate(super::thresholds::LARGEST_GAPS_LISTED);
        order
    }

    pub fn requested_u64(&self, key: &str) -> Option<u64> {
        self.requested.get(key).and_then(|v| v.as_u64())
    }

    /// The graph usage mode the workload asked for (0, 1 or 2), if it said.
    pub fn requested_mode(&self) -> Option<u64> {
        self.requested_u64(crate::trace::GRAPH_USAGE_MODE_KEY)
    }

    pub fn requested_str(&self, key: &str) -> Option<&str> {
        self.requested.get(key).and_then(|v| v.as_str())
    }
}

impl CellAnalysis {
    /// `requested` minus the graph usage mode and regime: cells with equal keys are the same
    /// workload, for pairing eager with graphed and base with head.
    pub fn workload_key(&self) -> String {
        self.workload_key_without(&[])
    }

    /// What `compare` and `try` match the cells of two sets by: the observed regime and the
    /// workload ([`Self::workload_key`]); cells of one key match in order (as ranks do).
    pub fn match_key(&self) -> (Option<Regime>, String) {
        (self.observed.regime, self.workload_key())
    }

    /// [`Self::workload_key`] leaving out `extra` keys too. A discovered graph cell adds its
    /// graph's op sequence (`graph`) and launch pattern (`launch`) as keys.
    pub fn workload_key_without(&self, extra: &[&str]) -> String {
        let discovered = self
            .graph_group
            .iter()
            .flat_map(|g| {
                [
                    ("graph", g.identity.ops_key()),
                    ("launch", format!("\"{}\"", g.launch.label())),
                ]
            })
            .chain(
                self.found
                    .iter()
                    .map(|f| ("loop", format!("\"E{}\"", f.ordinal))),
            );
        self.requested
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_string()))
            .chain(discovered)
            .filter(|(k, _)| !IGNORED_IN_KEY.contains(k) && !extra.contains(k))
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The launch pattern: requested (`launch`), else that of a discovered graph cell.
    pub fn launch_pattern(&self) -> Option<&str> {
        self.requested_str("launch")
            .or_else(|| self.graph_group.as_ref().map(|g| g.launch.label()))
    }
}

/// Request keys that do not distinguish workloads.
pub const IGNORED_IN_KEY: [&str; 2] = [crate::trace::GRAPH_USAGE_MODE_KEY, "regime"];

/// What CUPTI itself may add to a recorded graph cell's host-bound launch gaps: its graph
/// launches cost more host time in proportion to the graph's nodes once CUPTI is attached.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CuptiLaunchCost {
    /// The graph's nodes (its ops where the node count is unknown).
    pub nodes: usize,
    /// Idle time per step (median, ns) waiting on host-bound graph launches.
    pub host_bound_per_step: f64,
}
