//! Graph coverage of each cell: how much of its device work graph replays launched, and how
//! much eager launches — torch.compile falls back to eager silently ("skipping cudagraphs due
//! to …"), and a graphed phase that still launches eager kernels shows it here.
//!
//! The work of a cell is its steps' ops. Graph cells found from launches outside step markers
//! hold only graph ops, so for those the eager ops launched around their replays count too:
//! an eager op that no step holds belongs to the graph launch before it on its thread, when
//! the next launch on that thread is of the same cell or it came within one median launch
//! interval of the cell.
#![forbid(unsafe_code)]

use super::cell::{CellAnalysis, EagerInGraphed};
use super::model::{Regime, TraceTimeline};
use super::provenance::ProvenanceIndex;
use super::timeline::LaunchIndex;
use rustc_hash::FxHashMap;

/// Per op of a cell: launched by a graph replay, or eagerly.
#[derive(Default)]
struct Tally {
    graph_ops: usize,
    graph_ns: u64,
    eager_ops: usize,
    eager_ns: u64,
    graph_ops_with_provenance: usize,
    graph_ops_with_code: usize,
    in_graphed: EagerInGraphed,
}

/// Fills each cell's `observed.graph_coverage*` and `eager_in_graphed`, and the share of its
/// replayed ops that carry a provenance. `cells` are one trace's.
pub fn measure(
    timeline: &TraceTimeline,
    launches: &LaunchIndex,
    provenance: &ProvenanceIndex,
    cells: &mut [CellAnalysis],
) {
    let ops = &timeline.ops;
    let mut around: FxHashMap<(usize, usize), Vec<usize>> = FxHashMap::default();
    for (cell, step, op) in eager_around_graph_launches(timeline, launches, cells) {
        around.entry((cell, step)).or_default().push(op);
    }
    for (ci, cell) in cells.iter_mut().enumerate() {
        let mut t = Tally::default();
        for (si, step) in cell.steps.iter().enumerate() {
            let mut eager = (0usize, 0u64);
            let around = around.get(&(ci, si)).map_or(&[][..], Vec::as_slice);
            for &i in step.ops.iter().chain(around) {
                let op = &ops[i];
                let ns = op.end - op.start;
                if op.graph != 0 {
                    t.graph_ops += 1;
                    t.graph_ns += ns;
                    t.graph_ops_with_provenance +=
                        usize::from(provenance.node_has_provenance(op.node));
                    t.graph_ops_with_code += usize::from(provenance.node_has_code(op.node));
                } else {
                    eager.0 += 1;
                    eager.1 += ns;
                }
            }
            t.eager_ops += eager.0;
            t.eager_ns += eager.1;
            if step.regime == Regime::Graphed {
                t.in_graphed.of += 1;
                if eager.0 > 0 {
                    t.in_graphed.steps += 1;
                    t.in_graphed.ops += eager.0;
                    t.in_graphed.device_ns += eager.1;
                }
            }
        }
        let share = |part: f64, whole: f64| (whole > 0.0).then(|| part / whole);
        let o = &mut cell.observed;
        o.graph_coverage = share(t.graph_ns as f64, (t.graph_ns + t.eager_ns) as f64)
            .or_else(|| share(t.graph_ops as f64, (t.graph_ops + t.eager_ops) as f64));
        o.graph_coverage_ops = share(t.graph_ops as f64, (t.graph_ops + t.eager_ops) as f64);
        o.eager_in_graphed = (t.in_graphed.steps > 0).then_some(t.in_graphed);
        o.replayed_with_provenance = share(t.graph_ops_with_provenance as f64, t.graph_ops as f64);
        o.replayed_with_code = share(t.graph_ops_with_code as f64, t.graph_ops as f64)
            .filter(|_| provenance.any_code());
    }
}

/// Eager ops no step holds, given to the graph launch before them (see the module doc):
/// (cell, step, op index).
fn eager_around_graph_launches(
    timeline: &TraceTimeline,
    launches: &LaunchIndex,
    cells: &[CellAnalysis],
) -> Vec<(usize, usize, usize)> {
    let ops = &timeline.ops;
    // Graph launches of the discovered graph cells: (thread, start, cell, step).
    let mut graph_launches: Vec<(u32, u64, usize, usize)> = Vec::new();
    let mut held = vec![false; ops.len()];
    for (ci, cell) in cells.iter().enumerate() {
        for (si, step) in cell.steps.iter().enumerate() {
            for &i in &step.ops {
                held[i] = true;
            }
            if cell.graph_group.is_none() {
                continue;
            }
            let first = step.ops.iter().find(|&&i| ops[i].graph != 0);
            if let Some((start, _, thread)) = first.and_then(|&i| launches.call(ops[i].corr)) {
                graph_launches.push((thread, start, ci, si));
            }
        }
    }
    if graph_launches.is_empty() {
        return Vec::new();
    }
    graph_launches.sort_unstable();
    let median_interval = median_launch_intervals(&graph_launches, cells.len());
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if held[i] || op.graph != 0 {
            continue;
        }
        let Some((start, _, thread)) = launches.call(op.corr) else {
            continue;
        };
        let after = graph_launches.partition_point(|l| (l.0, l.1) <= (thread, start));
        let Some(&(t, launched, cell, step)) = after.checked_sub(1).map(|p| &graph_launches[p])
        else {
            continue;
        };
        if t != thread {
            continue;
        }
        let next_same_cell = graph_launches
            .get(after)
            .is_some_and(|n| n.0 == thread && n.2 == cell);
        let soon = median_interval[cell].is_some_and(|m| start - launched <= m);
        if next_same_cell || soon {
            out.push((cell, step, i));
        }
    }
    out
}

/// Per cell, the median interval between its consecutive launches on one thread.
fn median_launch_intervals(sorted: &[(u32, u64, usize, usize)], cells: usize) -> Vec<Option<u64>> {
    let mut intervals: Vec<Vec<u64>> = vec![Vec::new(); cells];
    let mut last: Vec<Option<(u32, u64)>> = vec![None; cells];
    for &(thread, start, cell, _) in sorted {
        if let Some((t, previous)) = last[cell]
            && t == thread
        {
            intervals[cell].push(start - previous);
        }
        last[cell] = Some((thread, start));
    }
    intervals
        .into_iter()
        .map(|mut v| {
            v.sort_unstable();
            v.get(v.len() / 2).copied()
        })
        .collect()
}
