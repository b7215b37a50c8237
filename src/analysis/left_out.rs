//! Device work a cell's step markers leave out. A step's window runs from the previous step's
//! end to its own end, and its idle time is that window less its own ops' busy time: a step
//! range around part of an iteration (`--step-range '## forward ##'` of a training step) leaves
//! the rest of the iteration's device work (the backward pass) in the windows, where it counts
//! as idle. The ops that ran in a cell's windows but belong to none of its steps are measured
//! here, and a cell whose steps leave out a material share of the device work says so.
#![forbid(unsafe_code)]

use super::cell::{CellAnalysis, LeftOut};
use super::model::TraceTimeline;
use super::thresholds::LEFT_OUT_MIN_SHARE;
use super::timeline::LaunchIndex;

/// Fills `observed.left_out` of each cell of marked steps (graph-launch cells and loops found
/// in the kernel sequence have no markers to move) whose windows hold at least
/// [`LEFT_OUT_MIN_SHARE`] of device work from outside its steps. `cells` are one trace's.
pub fn measure(timeline: &TraceTimeline, launches: &LaunchIndex, cells: &mut [CellAnalysis]) {
    let ops = &timeline.ops;
    for cell in cells.iter_mut() {
        if cell.graph_group.is_some() || cell.found.is_some() || cell.steps.is_empty() {
            continue;
        }
        let mut own: Vec<usize> = cell
            .steps
            .iter()
            .flat_map(|s| s.ops.iter().copied())
            .collect();
        own.sort_unstable();
        let (mut own_ns, mut out_ns, mut out_ops) = (0u64, 0u64, 0usize);
        for step in &cell.steps {
            let (from, to) = (step.window_start, step.end);
            // Ops are in start order: those that started in the window.
            let first = ops.partition_point(|o| o.start < from);
            let last = ops.partition_point(|o| o.start < to);
            for (i, op) in ops.iter().enumerate().take(last).skip(first) {
                let ns = op.end.min(to).saturating_sub(op.start);
                if own.binary_search(&i).is_ok() {
                    own_ns += ns;
                } else if launches.call(op.corr).is_some() {
                    out_ns += ns;
                    out_ops += 1;
                }
            }
        }
        let total = own_ns + out_ns;
        if total == 0 {
            continue;
        }
        let share = out_ns as f64 / total as f64;
        if share >= LEFT_OUT_MIN_SHARE {
            cell.observed.left_out = Some(LeftOut {
                ops: out_ops,
                device_ns: out_ns,
                share,
            });
        }
    }
}
