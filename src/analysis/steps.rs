//! Splitting a timeline into cells and steps.
//!
//! A step is the device work launched inside one host step marker: an op belongs to the step
//! whose marker contains the start of its launching API call (joined by correlation id), so
//! eager launches and graph launches are treated alike and GPU lag behind the host does not
//! matter.
//!
//! A graph launch that no step marker encloses (real programs replay graphs outside their
//! NVTX step ranges, as vLLM, SGLang and torch.compile do) is a step of its own, and so is
//! every graph launch of a trace without step markers. Such steps are grouped into cells by
//! what the graph is, never by labels: [`GraphIdentity`] (kernel names in launch order and node
//! types). Replays of one executable graph form a cell; executable graphs of one identity that
//! are launched once each share a cell of first launches. Launches outside the markers of an
//! executable graph that the markers also launch are warm-up and left out.
#![forbid(unsafe_code)]

use super::discover::{self, StepFinding, StepSource};
use super::model::TraceTimeline;
use super::timeline::LaunchIndex;
use crate::trace::{GraphNode, MarkerKind, NodeType, Trace};
use serde::Serialize;
use std::collections::BTreeMap;

/// The steps of one cell, before attribution.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CellSteps {
    /// Index into the trace's `metadata.cells`, when markers name one.
    pub cell: Option<usize>,
    pub steps: Vec<Vec<usize>>,
    /// Set when one marked cell held both eager steps and graph replays (e.g. one NVTX range
    /// name around both in a user's program): the regime observed, which splits it in two.
    pub regime_split: Option<super::model::Regime>,
    /// Set for cells of graph launches outside step markers: what the graph is and how it
    /// was launched.
    pub graph_group: Option<GraphGroup>,
    /// Set for cells of eager steps found in the kernel sequence (no markers).
    pub found: Option<super::discover::FoundSteps>,
    /// Set for a cell of steps that launched torch.compile's Triton kernels and no graph
    /// replay: compiled code that ran eagerly (see [`split_mixed_regimes`]).
    pub compiled_without_graphs: bool,
    /// Steps that follow an interruption of the cell's loop (found in the kernel sequence):
    /// they have no period, as no step ran just before them.
    pub breaks: Vec<usize>,
}

/// Whether an op is a kernel that torch.compile (inductor) generated: inductor names its
/// Triton kernels `triton_poi_…`, `triton_red_…`, `triton_per_…`, `triton_tem_…`.
pub fn is_inductor_kernel(name: &str) -> bool {
    name.starts_with("triton_")
}

/// The fewest steps that make compiled-but-eager steps a phase of their own: graph trees run
/// a compiled function eagerly once or twice (warm-up) before they capture it, and those
/// steps stay with the others.
const COMPILED_PHASE_MIN_STEPS: usize = 3;

/// How the executable graphs of a discovered cell were launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GraphLaunch {
    /// One executable graph launched again and again.
    Replay,
    /// Executable graphs of one identity, each launched once (instantiated anew).
    Fresh,
}

impl GraphLaunch {
    pub fn label(self) -> &'static str {
        match self {
            GraphLaunch::Replay => "replay",
            GraphLaunch::Fresh => "fresh",
        }
    }
}

/// What a graph is, from the records: the names of the device ops of its first launch in start
/// order and, when the trace has the DAG, its node types with counts. Two executable graphs
/// captured from the same code have the same identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct GraphIdentity {
    pub op_names: Vec<String>,
    pub node_counts: BTreeMap<String, usize>,
}

impl GraphIdentity {
    /// A short stable id of the op-name sequence alone (FNV-1a), so that graphs that differ
    /// only in node types (mode 2 vs mode 1) share it and can be compared, in one trace or
    /// across trace sets.
    pub fn ops_key(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for name in &self.op_names {
            for b in name.bytes().chain(std::iter::once(0)) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{:08x}", h >> 32)
    }
}

/// A discovered cell of graph launches.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphGroup {
    /// Position of the identity among the trace's identities, in order of first launch (G1…).
    pub ordinal: usize,
    pub identity: GraphIdentity,
    pub launch: GraphLaunch,
    /// Executable graph ids of the cell's steps.
    pub execs: Vec<u32>,
}

impl GraphGroup {
    pub fn label(&self) -> String {
        let kernels = self.identity.op_names.len();
        match self.launch {
            GraphLaunch::Replay => match self.execs.first() {
                Some(&exec) if exec != crate::trace::kineto::UNNAMED_GRAPH => format!(
                    "graph G{} replays (exec {exec}, {kernels} ops)",
                    self.ordinal
                ),
                _ => format!(
                    "graph G{} launches (graph ids not recorded, {kernels} ops)",
                    self.ordinal
                ),
            },
            GraphLaunch::Fresh => format!(
                "graph G{} first launches ({} executable graphs, {kernels} ops)",
                self.ordinal,
                self.execs.len()
            ),
        }
    }
}

/// Node type as reports name it: "EventWait (external)", "Kernel", ...
pub fn node_type_label(n: &GraphNode) -> String {
    let mut name = format!("{:?}", n.node_type);
    if n.external && matches!(n.node_type, NodeType::EventWait | NodeType::EventRecord) {
        name += " (external)";
    }
    name
}

/// Node types with counts of the nodes the program built into `nodes` (one graph's): nodes
/// that instantiation adds on its own (no template node) are left out when any node is a
/// clone.
pub fn node_counts<'t>(nodes: impl IntoIterator<Item = &'t GraphNode>) -> BTreeMap<String, usize> {
    let nodes: Vec<&GraphNode> = nodes.into_iter().collect();
    let any_clone = nodes.iter().any(|n| n.cloned_from.is_some());
    let mut counts = BTreeMap::new();
    for n in nodes
        .into_iter()
        .filter(|n| !any_clone || n.cloned_from.is_some())
    {
        *counts.entry(node_type_label(n)).or_insert(0usize) += 1;
    }
    counts
}

/// Splits cells whose steps mix eager work and graph replays into one cell per regime, so
/// the two can be aligned against each other. Regimes are read from the records.
///
/// Eager steps that launched torch.compile's Triton kernels ([`is_inductor_kernel`]) are a
/// third kind when there are enough of them (three or more): a compiled phase
/// whose CUDA graphs torch.compile skipped ("skipping cudagraphs due to …") runs its step
/// range eagerly, and would otherwise be counted as more steps of the eager phase beside it.
pub fn split_mixed_regimes(
    cells: Vec<CellSteps>,
    trace: &Trace,
    timeline: &TraceTimeline,
) -> Vec<CellSteps> {
    let mut out = Vec::with_capacity(cells.len());
    for cell in cells {
        if cell.graph_group.is_some() || cell.found.is_some() {
            out.push(cell);
            continue;
        }
        let graphed = |ops: &Vec<usize>| ops.iter().any(|&i| timeline.ops[i].graph != 0);
        let compiled = |ops: &Vec<usize>| {
            ops.iter()
                .any(|&i| is_inductor_kernel(trace.str(timeline.ops[i].name)))
        };
        let (g, e): (Vec<_>, Vec<_>) = cell.steps.into_iter().partition(graphed);
        let (c, e): (Vec<_>, Vec<_>) = e.into_iter().partition(compiled);
        let (c, e) = if c.len() >= COMPILED_PHASE_MIN_STEPS {
            (c, e)
        } else {
            // A warm-up step or two: with the eager steps, in their order.
            let mut e: Vec<Vec<usize>> = e.into_iter().chain(c).collect();
            e.sort_by_key(|ops| ops.first().copied());
            (Vec::new(), e)
        };
        let kinds = [
            (Some(super::model::Regime::Eager), false, e),
            (Some(super::model::Regime::Graphed), false, g),
            (None, true, c),
        ];
        let split = kinds.iter().filter(|k| !k.2.is_empty()).count() > 1;
        for (regime, compiled_without_graphs, steps) in kinds {
            if steps.is_empty() {
                continue;
            }
            out.push(CellSteps {
                cell: cell.cell,
                steps,
                regime_split: regime.filter(|_| split),
                graph_group: None,
                found: None,
                compiled_without_graphs,
                breaks: Vec::new(),
            });
        }
    }
    out
}

/// Ops per stretch of the timeline when ops are assigned to step markers.
const OPS_PER_STRETCH: usize = 1 << 16;

/// No step marker holds the op's launch (in [`split_cells`]' assignment).
const NO_MARKER: u32 = u32::MAX;

/// Splits the timeline into cells of steps (see the module doc), and says how the eager steps
/// were found.
///
/// Without step markers, eager steps are looked for in the kernel sequence
/// ([`super::discover`]); so they are inside a marked cell of one step (one `ProfilerStep`
/// around a whole generate call), whose graph launches then make graph cells as unmarked ones
/// do. Cells of steps found keep the op order of the timeline.
pub fn split_cells(
    trace: &Trace,
    timeline: &TraceTimeline,
    launches: &LaunchIndex<'_>,
) -> (Vec<CellSteps>, StepFinding) {
    let mut markers: Vec<(u64, u64, Option<u32>, u32)> = trace
        .markers
        .iter()
        .filter(|m| m.kind == MarkerKind::Step)
        .map(|m| (m.start, m.end, m.cell, m.name))
        .collect();
    let graphs = timeline.ops.iter().any(|o| o.graph != 0);
    if markers.is_empty() {
        return split_unmarked(trace, timeline, launches, graphs);
    }
    markers.sort_unstable();
    let (per_marker, mut unmarked_graph_ops) = ops_per_marker(&markers, timeline, launches);
    let mut cells: BTreeMap<Option<u32>, (CellSteps, u32)> = BTreeMap::new();
    for (marker, ops) in markers.iter().zip(per_marker) {
        if ops.is_empty() {
            continue;
        }
        cells
            .entry(marker.2)
            .or_insert_with(|| {
                (
                    CellSteps {
                        cell: marker.2.map(|c| c as usize),
                        ..Default::default()
                    },
                    marker.3,
                )
            })
            .0
            .steps
            .push(ops);
    }
    // A cell of one step has no period: loops inside it are its steps.
    let mut finding = StepFinding {
        chosen_step_range: trace.metadata.chosen_step_range().map(str::to_owned),
        chosen_on_import: trace.metadata.source == crate::trace::Source::Nsys,
        ..Default::default()
    };
    let mut found_inside = Vec::new();
    cells.retain(|_, (cell, name)| {
        if cell.steps.len() != 1 {
            return true;
        }
        let (eager, graphed): (Vec<usize>, Vec<usize>) = cell.steps[0]
            .iter()
            .partition(|&&i| timeline.ops[i].graph == 0);
        let found = discover::discover(trace, timeline, launches, &eager, Some(trace.str(*name)));
        if found.cells.is_empty() {
            return true;
        }
        let f = finding_of(&found, eager.len(), graphs);
        if finding.source == StepSource::KernelSequence {
            // Several cells of one step each: one finding for the trace.
            finding.loops.extend(f.loops);
            finding.eager_ops += f.eager_ops;
            finding.left_over += f.left_over;
            finding.beside_graphs += f.beside_graphs;
        } else {
            finding = f;
        }
        found_inside.extend(found_cells(found));
        unmarked_graph_ops.extend(graphed);
        false
    });
    unmarked_graph_ops.sort_unstable();
    // Launches outside the markers of an executable graph that the markers also launch are
    // that step's warm-up (as `gapscope run` does), not steps of their own.
    let marked_graphs: rustc_hash::FxHashSet<u32> = cells
        .values()
        .flat_map(|c| c.0.steps.iter().flatten())
        .map(|&i| timeline.ops[i].graph)
        .filter(|&g| g != 0)
        .collect();
    unmarked_graph_ops.retain(|&i| !marked_graphs.contains(&timeline.ops[i].graph));
    let mut out: Vec<CellSteps> = cells.into_values().map(|c| c.0).collect();
    out.extend(found_inside);
    out.extend(group_graph_launches(trace, timeline, &unmarked_graph_ops));
    (out, finding)
}

/// The cells of a trace with no step markers: loops found in the eager kernel sequence, else
/// the whole trace as one eager step; graph launches grouped by graph.
fn split_unmarked(
    trace: &Trace,
    timeline: &TraceTimeline,
    launches: &LaunchIndex<'_>,
    graphs: bool,
) -> (Vec<CellSteps>, StepFinding) {
    let (eager, graphed): (Vec<usize>, Vec<usize>) =
        (0..timeline.ops.len()).partition(|&i| timeline.ops[i].graph == 0);
    let found = discover::discover(trace, timeline, launches, &eager, None);
    let mut finding = finding_of(&found, eager.len(), graphs);
    finding.step_range_hint = discover::step_range_hint(trace, timeline, launches);
    let mut cells = found_cells(found);
    if cells.is_empty() && graphed.is_empty() {
        // No graphs, no markers, no repetition: the whole trace is one eager step.
        if timeline.ops.is_empty() {
            return (Vec::new(), finding);
        }
        cells.push(CellSteps {
            cell: (trace.metadata.cells.len() == 1).then_some(0),
            steps: vec![(0..timeline.ops.len()).collect()],
            ..Default::default()
        });
    }
    cells.extend(group_graph_launches(trace, timeline, &graphed));
    (cells, finding)
}

/// Each op to the step marker its launch lies in (`markers` sorted): the ops of each marker in
/// timeline order, and the graph ops in none.
fn ops_per_marker(
    markers: &[(u64, u64, Option<u32>, u32)],
    timeline: &TraceTimeline,
    launches: &LaunchIndex<'_>,
) -> (Vec<Vec<usize>>, Vec<usize>) {
    let spans: Vec<(u64, u64)> = markers.iter().map(|m| (m.0, m.1)).collect();
    // Each op to the marker its launch lies in, stretches of the timeline on the threads there
    // are; then the ops go to their markers' lists in timeline order.
    let mut marker_of = vec![NO_MARKER; timeline.ops.len()];
    let stretches: Vec<(usize, &mut [u32])> = marker_of
        .chunks_mut(OPS_PER_STRETCH)
        .enumerate()
        .map(|(k, chunk)| (k * OPS_PER_STRETCH, chunk))
        .collect();
    crate::parallel_map(stretches, |(first, chunk)| {
        for (slot, op) in chunk.iter_mut().zip(&timeline.ops[first..]) {
            if let Some(m) = launches.call(op.corr).and_then(|(launched, _, _)| {
                crate::trace::last_containing(&spans, |&mk| mk, launched)
            }) {
                *slot = m as u32;
            }
        }
    });
    let mut per_marker: Vec<Vec<usize>> = vec![Vec::new(); markers.len()];
    let mut unmarked_graph_ops = Vec::new();
    for (i, (&m, op)) in marker_of.iter().zip(&timeline.ops).enumerate() {
        if m != NO_MARKER {
            per_marker[m as usize].push(i);
        } else if op.graph != 0 {
            unmarked_graph_ops.push(i);
        }
    }
    (per_marker, unmarked_graph_ops)
}

fn finding_of(found: &discover::Discovered, eager_ops: usize, graphs: bool) -> StepFinding {
    StepFinding {
        source: if found.cells.is_empty() {
            StepSource::NoRepetition
        } else {
            StepSource::KernelSequence
        },
        loops: found.cells.iter().map(|c| c.found.clone()).collect(),
        eager_ops,
        left_over: found.left_over,
        beside_graphs: found.beside_graphs,
        graphs,
        step_range_hint: None,
        chosen_step_range: None,
        chosen_on_import: false,
    }
}

fn found_cells(found: discover::Discovered) -> Vec<CellSteps> {
    found
        .cells
        .into_iter()
        .map(|c| CellSteps {
            steps: c.steps,
            breaks: c.breaks,
            found: Some(c.found),
            ..Default::default()
        })
        .collect()
}

/// Groups graph ops (indices into the timeline, in start order) into launches — ops sharing
/// a launch correlation id and graph id — and the launches into cells by [`GraphIdentity`]:
/// one cell per executable graph launched more than once, one cell for the executable graphs
/// of an identity launched once each.
fn group_graph_launches(
    trace: &Trace,
    timeline: &TraceTimeline,
    graph_ops: &[usize],
) -> Vec<CellSteps> {
    if graph_ops.is_empty() {
        return Vec::new();
    }
    let mut by_launch: BTreeMap<(u32, u32), Vec<usize>> = BTreeMap::new();
    for &i in graph_ops {
        let op = &timeline.ops[i];
        by_launch.entry((op.corr, op.graph)).or_default().push(i);
    }
    let mut steps: Vec<(u32, Vec<usize>)> = by_launch
        .into_iter()
        .map(|((_, graph), ops)| (graph, ops))
        .collect();
    steps.sort_by_key(|(_, ops)| ops[0]);

    let mut nodes_by_graph: BTreeMap<u32, Vec<&GraphNode>> = BTreeMap::new();
    for n in &trace.graph.nodes {
        nodes_by_graph.entry(n.graph).or_default().push(n);
    }
    // Each executable graph's identity, from its first launch; launches per exec.
    let mut identity_of: BTreeMap<u32, usize> = BTreeMap::new();
    let mut identities: Vec<GraphIdentity> = Vec::new();
    let mut index_of: rustc_hash::FxHashMap<GraphIdentity, usize> = Default::default();
    let mut launches_of: BTreeMap<u32, usize> = BTreeMap::new();
    for (graph, ops) in &steps {
        *launches_of.entry(*graph).or_default() += 1;
        if identity_of.contains_key(graph) {
            continue;
        }
        let identity = GraphIdentity {
            op_names: ops
                .iter()
                .map(|&i| trace.str(timeline.ops[i].name).to_owned())
                .collect(),
            node_counts: node_counts(nodes_by_graph.get(graph).into_iter().flatten().copied()),
        };
        let index = *index_of.entry(identity).or_insert_with_key(|identity| {
            identities.push(identity.clone());
            identities.len() - 1
        });
        identity_of.insert(*graph, index);
    }
    // Cells in order of their first launch.
    let mut cells: Vec<CellSteps> = Vec::new();
    let mut cell_of: BTreeMap<(usize, GraphLaunch, u32), usize> = BTreeMap::new();
    for (graph, ops) in steps {
        let identity = identity_of[&graph];
        let launch = if launches_of[&graph] > 1 {
            GraphLaunch::Replay
        } else {
            GraphLaunch::Fresh
        };
        // Replays: one cell per exec; fresh: one cell per identity.
        let exec_key = if launch == GraphLaunch::Replay {
            graph
        } else {
            0
        };
        let at = *cell_of
            .entry((identity, launch, exec_key))
            .or_insert_with(|| {
                cells.push(CellSteps {
                    cell: None,
                    steps: Vec::new(),
                    regime_split: None,
                    found: None,
                    compiled_without_graphs: false,
                    breaks: Vec::new(),
                    graph_group: Some(GraphGroup {
                        ordinal: identity + 1,
                        identity: identities[identity].clone(),
                        launch,
                        execs: Vec::new(),
                    }),
                });
                cells.len() - 1
            });
        let cell = &mut cells[at];
        if let Some(g) = cell.graph_group.as_mut()
            && g.execs.last() != Some(&graph)
        {
            g.execs.push(graph);
        }
        cell.steps.push(ops);
    }
    cells
}
