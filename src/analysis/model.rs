//! What the analysis produces; reports read only these types (and the traces for raw records).
#![forbid(unsafe_code)]

use super::stats::{Change, Geomean, Stat};
use crate::trace::NodeType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Kind of a device operation on the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Kernel,
    Memcpy,
    Memset,
}

/// One device operation (kernel, memcpy or memset) of one trace, in start order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Op {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub stream: u32,
    pub corr: u32,
    /// Kernel name, or the copy kind / "memset" (index into the trace's strings).
    pub name: u32,
    pub kind: OpKind,
    pub graph: u32,
    pub node: u64,
}

/// Whether a step ran eagerly or as a graph replay — observed from the records, never assumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Regime {
    Eager,
    Graphed,
}

impl Regime {
    pub fn label(self) -> &'static str {
        match self {
            Regime::Eager => "eager",
            Regime::Graphed => "graphed",
        }
    }
}

/// Defines [`Cause`] and, from its one list of variants, [`CauseKind`] (the cause without its
/// evidence), [`Cause::kind`] and [`CauseKind::ALL`]: the two enums cannot drift apart.
macro_rules! causes {
    (
        $(#[$cause_meta:meta])*
        pub enum Cause {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident $( ( $($tuple:tt)* ) )? $( { $($fields:tt)* } )?
            ),* $(,)?
        }
    ) => {
        $(#[$cause_meta])*
        pub enum Cause {
            $(
                $(#[$variant_meta])*
                $variant $( ( $($tuple)* ) )? $( { $($fields)* } )?
            ),*
        }

        /// A cause without its details, for aggregation.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum CauseKind {
            $($variant),*
        }

        impl Cause {
            pub fn kind(&self) -> CauseKind {
                match self {
                    $(Cause::$variant { .. } => CauseKind::$variant),*
                }
            }
        }

        impl CauseKind {
            /// Every kind, in the order of [`Cause`]'s variants.
            pub const ALL: [CauseKind; [$(stringify!($variant)),*].len()] = [$(CauseKind::$variant),*];
        }
    };
}

causes! {
    /// Why the device was idle during a gap, from evidence in the trace.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    pub enum Cause {
        /// The next op waits (through the DAG) on an external event-wait node; when an NCCL call
        /// created it, this is NCCL graph usage mode 2 ("mixing").
        /// (Boxed, as the other variant that carries names: every gap has a cause, and a cause
        /// of eight bytes keeps a million gaps small.)
        ExternalEventWait(Box<ExternalWait>),
        /// A host node (e.g. NCCL's proxy callback) precedes the next op.
        HostNode(Box<HostNodeEvidence>),
        /// A memset/memcpy node that left no device record precedes the next op.
        MemoryNode { node: u64, node_type: NodeType },
        /// The next op joins work from another stream.
        CrossStreamJoin { from_stream: u32 },
        /// Before the first op of a graph replay: the launch boundary.
        GraphLaunch,
        /// Before the first op of a graph replay whose launch call had not returned when the
        /// device went idle: the host's graph launch was the bottleneck.
        GraphLaunchHostBound {
            /// Duration of the launch call (e.g. `cuGraphLaunch`), ns.
            launch_call_ns: u64,
            /// The first launch of this executable graph in the trace.
            first_launch: bool,
        },
        /// A plain kernel-to-kernel edge inside a graph: the graph's own dependency latency.
        GraphDependency,
        /// Eager: the op was launched by the host after the device had gone idle.
        HostLaunchBound,
        /// Eager: the op was queued in stream order before the device went idle and nothing else
        /// held it: the device's own launch latency.
        StreamOrderLatency,
        /// Eager: the op's stream waited on an event (cudaStreamWaitEvent).
        StreamWait,
        /// Eager: a host synchronisation call held the launch back.
        Synchronization,
        /// No evidence found; kept visible.
        Unattributed,
    }
}

/// The evidence of [`Cause::ExternalEventWait`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ExternalWait {
    pub wait_node: u64,
    pub record_node: Option<u64>,
    /// The API call that created the wait node (e.g. `cudaStreamWaitEvent`).
    pub created_by: Option<String>,
    /// The library call it was made inside (e.g. `ncclAllGather`).
    pub library_call: Option<String>,
    /// How sure the evidence is that the wait node is external: sure from a recording, likely
    /// where the DAG was inferred ([`crate::trace::GraphDag::inferred`]: an Nsight Systems
    /// import), whose labels say "probably".
    #[serde(skip_serializing_if = "Confidence::is_sure")]
    pub confidence: Confidence,
}

impl ExternalWait {
    /// "external event-wait node 0x… (cudaStreamWaitEvent inside ncclAllGather), event-record
    /// node 0x…"; with [`Confidence::Likely`], "probably external: event-wait node 0x…
    /// created by cudaStreamWaitEvent inside ncclAllGather, …".
    fn label(&self) -> String {
        let ExternalWait {
            wait_node,
            record_node,
            created_by,
            library_call,
            confidence,
        } = self;
        let probable = *confidence == Confidence::Likely;
        let mut s = if probable {
            format!("probably external: event-wait node {wait_node:#x}")
        } else {
            format!("external event-wait node {wait_node:#x}")
        };
        match (created_by, library_call, probable) {
            (Some(api), Some(lib), true) => s += &format!(" created by {api} inside {lib}"),
            (Some(api), None, true) => s += &format!(" created by {api}"),
            (Some(api), Some(lib), false) => s += &format!(" ({api} inside {lib})"),
            (Some(api), None, false) => s += &format!(" ({api})"),
            (None, Some(lib), true) => s += &format!(" created inside {lib}"),
            (None, Some(lib), false) => s += &format!(" (inside {lib})"),
            (None, None, _) => {}
        }
        if let Some(r) = record_node {
            s += &format!(", event-record node {r:#x}");
        }
        if library_call
            .as_deref()
            .is_some_and(|l| l.starts_with("nccl"))
        {
            s += if probable {
                ": probably NCCL graph usage mode 2 (mixing)"
            } else {
                ": NCCL graph usage mode 2 (mixing)"
            };
        }
        if probable {
            s += " (node type inferred from the creating call: the trace records none)";
        }
        s
    }
}

/// The evidence of [`Cause::HostNode`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct HostNodeEvidence {
    pub node: u64,
    pub library_call: Option<String>,
}

impl Cause {
    /// One-line description naming the evidence (node ids, API, library, setting).
    pub fn label(&self) -> String {
        match self {
            Cause::ExternalEventWait(wait) => wait.label(),
            Cause::HostNode(host) => match &host.library_call {
                Some(lib) => format!("host node {:#x} (inside {lib}: proxy callback)", host.node),
                None => format!("host node {:#x}", host.node),
            },
            Cause::MemoryNode { node, node_type } => {
                format!("{} node {node:#x}", node_type_name(*node_type))
            }
            Cause::CrossStreamJoin { from_stream } => {
                format!("cross-stream join (waits on stream {from_stream})")
            }
            Cause::GraphLaunchHostBound {
                launch_call_ns,
                first_launch,
            } => format!(
                "graph launch host-bound (the launch call ran {:.1} µs{})",
                *launch_call_ns as f64 / 1e3,
                if *first_launch {
                    ", first launch of this executable graph"
                } else {
                    ""
                }
            ),
            _ => self.kind().label().to_owned(),
        }
    }
}

fn node_type_name(t: NodeType) -> &'static str {
    match t {
        NodeType::Memcpy => "memcpy",
        NodeType::Memset => "memset",
        _ => "memory",
    }
}

impl CauseKind {
    pub fn label(self) -> &'static str {
        match self {
            CauseKind::ExternalEventWait => "external event wait",
            CauseKind::HostNode => "host node",
            CauseKind::MemoryNode => "memset/memcpy node",
            CauseKind::CrossStreamJoin => "cross-stream join",
            CauseKind::GraphLaunch => "graph launch boundary",
            CauseKind::GraphLaunchHostBound => "graph launch host-bound",
            CauseKind::GraphDependency => "graph dependency latency",
            CauseKind::HostLaunchBound => "host launch-bound",
            CauseKind::StreamOrderLatency => "stream-order launch latency",
            CauseKind::StreamWait => "stream/event wait",
            CauseKind::Synchronization => "host synchronisation",
            CauseKind::Unattributed => "unattributed",
        }
    }
}

/// An interval in which the device (all streams together) was idle inside a step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gap {
    pub start: u64,
    pub end: u64,
    /// Stream of the op that ends the gap.
    pub stream: u32,
    /// Op (index into [`TraceTimeline::ops`]) that ended last before the gap, if any.
    pub before: Option<usize>,
    /// Op that starts at the gap's end.
    pub after: usize,
    pub cause: Cause,
}

impl Gap {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// One step: a dispatch+combine iteration (eager) or one graph replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Position among the cell's steps.
    pub index: usize,
    pub regime: Regime,
    /// Executable graph id of a replay.
    pub graph_exec: Option<u32>,
    /// True for the first launch of its executable graph in this trace.
    pub first_launch: bool,
    /// First op start and last op end.
    pub start: u64,
    pub end: u64,
    /// Where the step's window begins: the previous step's end (or `start` for the first
    /// step). `end - window_start == busy + idle` exactly.
    pub window_start: u64,
    /// Ops of the step (indices into [`TraceTimeline::ops`]), in start order.
    pub ops: Vec<usize>,
    pub gaps: Vec<Gap>,
    /// Time with at least one op running (union over streams).
    pub busy: u64,
    /// Sum of the gaps.
    pub idle: u64,
    /// Previous step's end → this step's end; `None` for a cell's first step.
    pub period: Option<u64>,
}

/// The ops of one trace in start order, with the per-stream view.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceTimeline {
    pub ops: Vec<Op>,
}

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
    pub eager_in_graphed: Option<super::coverage::EagerInGraphed>,
    /// Device work in the steps' windows that the step markers left out (counted as idle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_out: Option<super::left_out::LeftOut>,
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
    /// Durations of the launch calls of graph launches that held the device idle (the gaps
    /// caused by [`Cause::GraphLaunchHostBound`] in the steps behind the figures), ns. Kept
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

/// One position of the eager ↔ graphed alignment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlignedOp {
    pub name: String,
    /// Positions in the base (eager) and head (graphed) canonical sequences; one is `None`
    /// for an op present in one regime only.
    pub base: Option<usize>,
    pub head: Option<usize>,
    /// head − base medians, ns.
    pub duration_delta: Option<f64>,
    pub gap_before_delta: Option<f64>,
    pub base_gap_cause: Option<String>,
    pub head_gap_cause: Option<String>,
}

/// A kernel whose duration changed between the two cells of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelDelta {
    pub name: String,
    pub base: Stat,
    pub head: Stat,
    /// head − base medians, ns.
    pub delta: f64,
}

impl KernelDelta {
    /// The change as a share of the base's median; `None` without one.
    pub fn share_of_base(&self) -> Option<f64> {
        (self.base.median > 0.0).then(|| self.delta / self.base.median)
    }
}

/// The kernel-duration check of a comparison, over the kernels aligned on both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelDurations {
    /// How many kernels are aligned on both sides.
    pub aligned: usize,
    /// The largest |duration change| as a percentage of the base's
    /// ([`CellComparison::max_duration_delta_pct`], else over the aligned kernels).
    pub max_delta_pct: f64,
    /// When the durations are not within spread ([`CellComparison::durations_within_spread`]):
    /// the kernels whose change is beyond either side's spread, largest |change| first, at most
    /// [`KernelDurations::LISTED`] of them; when no kernel's is (an op that is no kernel moved),
    /// the aligned kernels that changed most. Empty when the durations are within spread.
    pub differing: Vec<KernelDelta>,
    /// How many kernels `differing` was chosen from (it lists the first
    /// [`KernelDurations::LISTED`]).
    pub differing_count: usize,
}

impl KernelDurations {
    /// How many of the differing kernels a comparison lists.
    pub const LISTED: usize = 5;
}

/// A slower cell of `compare` whose slowdown is mostly the host launching later
/// ([`CellComparison::host_bound_slowdown`]): the verdict carries a caution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HostBoundSlowdown {
    /// Index into [`Comparison::cells`].
    pub cell: usize,
    /// The part of the period growth that is host launch-bound gaps (0–1).
    pub share: f64,
}

/// What CUPTI itself may add to a recorded graph cell's host-bound launch gaps: its graph
/// launches cost more host time in proportion to the graph's nodes once CUPTI is attached.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CuptiLaunchCost {
    /// The graph's nodes (its ops where the node count is unknown).
    pub nodes: usize,
    /// Idle time per step (median, ns) waiting on host-bound graph launches.
    pub host_bound_per_step: f64,
}

/// A part of a period change (see [`CellComparison::largest_change`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PeriodPart<'a> {
    /// The idle time before ops, of the cause with this label (the base's where the gaps
    /// shrank, the head's where they grew); `gone`: no head op waits on this cause any more.
    Gap { cause: &'a str, gone: bool },
    /// The aligned ops' durations; `op` changed most (`op_delta` ns).
    OpDurations { op: &'a str, op_delta: f64 },
    /// Ops present on one side only.
    OneSidedOps,
}

/// Two cells of the same workload compared (eager vs graphed, or base vs head).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellComparison {
    pub key: String,
    pub base: usize,
    pub head: usize,
    pub base_label: String,
    pub head_label: String,
    /// head median period / base median period: the untraced periods' when both cells have
    /// one ([`CellAnalysis::untraced_period`]), else the traced.
    pub ratio: Option<f64>,
    /// The verdict, judged like `ratio` on the untraced periods when both cells have them, so
    /// that what tracing adds never flips it.
    pub change: Option<Change>,
    /// Whether `ratio` and `change` were judged on the untraced periods.
    #[serde(default)]
    pub judged_untraced: bool,
    /// Set when tracing made a cell's traced steps host-bound: its traced period is beyond its
    /// untraced one's spread and host-bound launch gaps are among its causes, so a
    /// device-side cause's cost is hidden in the traced samples (the untraced verdict stands).
    #[serde(default)]
    pub traced_host_bound: bool,
    /// Why there is no `change` though both cells have a period: a side has too few steps to
    /// judge ([`super::thresholds::MIN_STEPS_TO_JUDGE`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_verdict: Option<String>,
    pub aligned: Vec<AlignedOp>,
    /// Largest |duration delta| over aligned kernels as % of the base duration.
    pub max_duration_delta_pct: Option<f64>,
    /// True when every aligned kernel's duration delta is inside its run-to-run spread.
    pub durations_within_spread: bool,
    /// Period difference (head − base median, ns).
    pub period_delta: Option<f64>,
    /// Net change of the idle time before aligned ops (head − base medians, ns), grouped by
    /// their cause — the base's where the gap shrank (what the change removed), the head's
    /// where it grew — largest |change| first; ops present in the head only count with their
    /// gap.
    pub gap_growth_by_cause: Vec<(CauseKind, String, f64)>,
    /// Causes of [`CellComparison::gap_growth_by_cause`] that no gap of the head has: removed.
    pub causes_gone_in_head: Vec<CauseKind>,
    /// Whether the period difference is no larger than what tracing added to either cell's
    /// step (`None`: neither cell's tracer share is known, or the verdict was judged on
    /// untraced periods, which tracing cannot explain away).
    pub within_tracer_effect: Option<bool>,
    /// Head − base of the cells' untraced periods (ns): the device's measured ones, else the
    /// host step periods of the tracer's shares; the difference with tracing's own share
    /// taken out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untraced_period_delta: Option<f64>,
    /// Net change of aligned op durations (ns), and the time of one-sided ops (head only
    /// minus base only, ns). With the gap changes these decompose the period delta; what is
    /// left is overlap between streams and the difference between the median of a sum and
    /// the sum of medians.
    pub duration_delta_total: f64,
    pub one_sided_ops_total: f64,
    /// For an eager ↔ graphed pair: how it was made and how sure it is.
    pub pairing: Option<Pairing>,
    /// The host code whose share of the host-bound gaps changed most, when both cells have
    /// host samples that name code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_code_change: Option<super::host_samples::HostCodeChange>,
    /// For two graphed cells: how the head's graph differs from the base's, by node type
    /// (e.g. "+1 EventWait (external), +1 EventRecord (external)"); `None` when either has no
    /// DAG or they are the same.
    pub graph_difference: Option<String>,
    /// Whether the graphs differ ([`Self::graph_difference`]) only by external event nodes: then
    /// all of the period change follows from them.
    pub graphs_differ_only_by_external: bool,
    /// The part of a longer head period (0–1, above 1 when other parts shrank) that gaps on
    /// external event waits grew; `None` unless both the period and those gaps grew.
    pub external_event_share: Option<f64>,
    /// The kernel-duration check over the kernels aligned on both sides; `None` when there are
    /// none.
    pub kernel_durations: Option<KernelDurations>,
}

impl CellComparison {
    /// For a longer head period: the part of it (0–1) that is gaps grown because the host
    /// launched later (host launch-bound, graph launch host-bound). A host or recording
    /// difference between the runs (load, CUPTI's overhead) shows here, not in the graph.
    pub fn host_launch_share(&self) -> Option<f64> {
        let (host, _) = self.host_launch_split()?;
        Some(host / self.period_delta?)
    }

    /// A longer head period split in two (ns): the gaps grown because the host launched later
    /// (the positive parts, at most the whole change), and the rest of the change. The
    /// [`Self::host_launch_share`] of the period delta is the first.
    pub fn host_launch_split(&self) -> Option<(f64, f64)> {
        let delta = self.period_delta.filter(|&d| d > 0.0)?;
        let host: f64 = [CauseKind::HostLaunchBound, CauseKind::GraphLaunchHostBound]
            .into_iter()
            .map(|k| self.gap_growth_of(k))
            .filter(|&g| g > 0.0)
            .sum::<f64>()
            .min(delta);
        Some((host, delta - host))
    }

    /// [`Self::host_launch_split`] where the host's part is not nothing: what a line on the
    /// mode difference states.
    pub fn host_launch_part(&self) -> Option<(f64, f64)> {
        self.host_launch_split().filter(|&(host, _)| host > 0.0)
    }

    /// Whether the ops in one regime only changed the period at all (at least
    /// [`super::thresholds::GAP_GROWTH_MIN_NS`] either way).
    pub fn one_sided_ops_moved(&self) -> bool {
        self.one_sided_ops_total.abs() >= super::thresholds::GAP_GROWTH_MIN_NS
    }

    /// The cells whose slowdown is mostly the host launching later (see
    /// [`Self::host_launch_share`]): at least [`super::thresholds::HOST_BOUND_SHARE`] of the
    /// period grew there.
    pub fn host_bound_slowdown(&self) -> bool {
        self.change == Some(Change::Slower)
            && self
                .host_launch_share()
                .is_some_and(|s| s >= super::thresholds::HOST_BOUND_SHARE)
    }

    /// The aligned ops whose gap before changed most, with the change (head − base, ns),
    /// largest |change| first, at most `n`; changes under
    /// [`super::thresholds::GAP_DELTA_SHOWN_NS`] are left out.
    pub fn top_gap_deltas(&self, n: usize) -> Vec<(&AlignedOp, f64)> {
        let mut v: Vec<_> = self
            .aligned
            .iter()
            .filter_map(|a| Some((a, a.gap_before_delta.filter(|d| d.is_finite())?)))
            .filter(|(_, d)| d.abs() >= super::thresholds::GAP_DELTA_SHOWN_NS)
            .collect();
        v.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
        v.truncate(n);
        v
    }

    /// The [`Self::top_gap_deltas`] a report lists: at most
    /// [`super::thresholds::GAP_DELTAS_LISTED`].
    pub fn gap_deltas_listed(&self) -> Vec<(&AlignedOp, f64)> {
        self.top_gap_deltas(super::thresholds::GAP_DELTAS_LISTED)
    }

    /// The part of the period change that moved most, with its size (largest |ns|, head −
    /// base). A longer step can be mostly a longer kernel — a collective waiting for a slower
    /// peer rank — with every gap unchanged, so durations compete with the gaps.
    pub fn largest_change(&self) -> Option<(PeriodPart<'_>, f64)> {
        let gap = self.gap_growth_by_cause.first().map(|g| {
            let gone = self.causes_gone_in_head.contains(&g.0);
            (PeriodPart::Gap { cause: &g.1, gone }, g.2)
        });
        let durations = self
            .aligned
            .iter()
            .filter_map(|a| Some((a.name.as_str(), a.duration_delta?)))
            .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()))
            .map(|(op, op_delta)| {
                (
                    PeriodPart::OpDurations { op, op_delta },
                    self.duration_delta_total,
                )
            });
        let one_sided = (self.one_sided_ops_total != 0.0)
            .then_some((PeriodPart::OneSidedOps, self.one_sided_ops_total));
        [gap, durations, one_sided]
            .into_iter()
            .flatten()
            .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()))
    }

    /// The net gap change attributed to `kind` (ns, head − base).
    pub fn gap_growth_of(&self, kind: CauseKind) -> f64 {
        self.gap_growth_by_cause
            .iter()
            .filter(|g| g.0 == kind)
            .map(|g| g.2)
            .sum()
    }
}

/// What an eager ↔ graphed pair rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairBasis {
    /// The two cells' requests name the same workload (`gapscope run`, marked cells).
    Workload,
    /// The graph's op names and the eager step's, aligned (no shared marker).
    KernelSequence,
    /// The library kernels of a compiled graph (all but the compiler's own) and the eager
    /// step's kernels of those names, aligned (no shared marker).
    LibraryKernels,
}

/// How sure a pair, or a cause's evidence, is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Part of the ops match (a compiler's kernels on one side, the library's on the other);
    /// for a cause: evidence inferred, not recorded (a graph node's type read from the call
    /// that created it).
    Likely,
    /// Declared, or nearly every op matches on both sides; for a cause: recorded.
    Sure,
}

impl Confidence {
    pub fn is_sure(&self) -> bool {
        *self == Confidence::Sure
    }
}

/// How an eager ↔ graphed pair was made, said wherever the pair is shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pairing {
    pub basis: PairBasis,
    pub confidence: Confidence,
    /// e.g. "paired by kernel sequence: 87 % of the graph's 7 ops match the eager step's by
    /// name, in order (6 of 7; the eager step has 7)".
    pub text: String,
}

/// A graphed cell with no eager partner, and why, when an eager cell was there to pair with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotPaired {
    pub cell: usize,
    pub closest: Option<usize>,
    pub text: String,
}

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
    /// What [`super::validate::check`] found damaged and left out, one line per kind.
    pub damage: Vec<String>,
    /// What the recording lost without saying (see [`super::completeness`]).
    pub completeness: super::completeness::Completeness,
    /// How the trace's eager steps were found (markers, the kernel sequence, or not at all).
    pub steps: super::discover::StepFinding,
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
    pub remedies: Vec<super::remedy::Remedy>,
    /// Remedies whose evidence is there but whose predicted saving is inside its spread or
    /// immaterial ([`super::remedy::remedies`]): not given, said in the report.
    pub withheld_remedies: Vec<super::remedy::Withheld>,
    /// What the screen and the report lead with: the cell the user can gain most on, its
    /// largest cause and its fix ([`super::headline`]).
    pub headline: Option<super::headline::Headline>,
    /// Per input trace, its op timeline (reports draw from it).
    #[serde(skip)]
    pub timelines: Vec<TraceTimeline>,
}

impl Analysis {
    /// The largest gaps over every cell as (cell, position in its sequence), largest median
    /// first (ties in cell, then sequence, order), at most
    /// [`super::thresholds::LARGEST_GAPS_LISTED`]: the list a screen shows.
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
        gaps.truncate(super::thresholds::LARGEST_GAPS_LISTED);
        gaps
    }
}

/// `compare BASE HEAD`: the same workloads in two sets of traces (e.g. mode 2 vs mode 1, or
/// main vs a PR).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub base: Analysis,
    pub head: Analysis,
    /// Matched cells; `base`/`head` index `base.cells` / `head.cells`.
    pub cells: Vec<CellComparison>,
    /// Cells of one side with no match on the other (labels).
    pub unmatched: Vec<String>,
    /// Geomean of head/base period ratios, with range.
    pub geomean_ratio: Option<Geomean>,
    /// The allowed slowdown (e.g. 1.02 = 2 %) and whether any matched cell exceeded it by
    /// more than the run-to-run spread.
    pub threshold: f64,
    pub breached: Vec<String>,
    /// Matched cells whose base had a remedy with a predicted saving: predicted vs measured.
    pub realised: Vec<super::remedy::RemedyCheck>,
    /// BASE and HEAD name different devices: one line saying which (the ratios then compare
    /// hardware as well as the change). See [`super::compare::device_mismatch`].
    pub device_mismatch: Option<String>,
    /// Slower cells whose slowdown is mostly the host launching later: the verdict's caution.
    pub host_bound_slowdowns: Vec<HostBoundSlowdown>,
}
