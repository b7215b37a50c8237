//! The untraced period of each cell, on the device's clock.
//!
//! Under `gapscope record`'s trace budget the launches and steps just after each pause are
//! *measured*: their kernels, copies and memsets are recorded with device timestamps, with no
//! API records and none of the callbacks whose host cost makes traced steps slower than the
//! program's own ([`crate::trace::Sampling::measured_per_pause`]). Their ops have no launch
//! call, so nothing can place them in a step range or attribute their gaps: they are taken out
//! of the timeline before steps are formed, and give each cell the periods it ran at untraced.
//! A period is end to end, as a traced step's is, and only between two measured launches or
//! steps that ran one after the other. Each window of measured launches or steps is a run:
//! its median is one run-to-run sample, as a traced cell's block medians are.
#![forbid(unsafe_code)]

use super::model::{Op, TraceTimeline};
use super::stats::Stat;
use super::steps::CellSteps;
use super::thresholds::UNTRACED_MIN_PERIODS;
use super::timeline::LaunchIndex;
use crate::trace::Trace;
use rustc_hash::FxHashMap;

/// Whether `trace`'s device records without a launch call are measured ones.
pub fn measures(trace: &Trace) -> bool {
    trace
        .metadata
        .sampling
        .as_ref()
        .is_some_and(|s| s.measured_per_pause > 0)
}

/// Takes the measured ops (those without a launch call) out of `timeline`, in start order;
/// none when the trace does not measure.
pub fn take_measured(
    trace: &Trace,
    timeline: &mut TraceTimeline,
    launches: &LaunchIndex<'_>,
) -> Vec<Op> {
    if !measures(trace) {
        return Vec::new();
    }
    timeline
        .ops
        .extract_if(.., |op| launches.call(op.corr).is_none())
        .collect()
}

/// Each cell's untraced step periods (ns) per measured window, in the cells' order: from the
/// measured launches of its most launched executable graph when its steps replay one, else
/// from the measured ops on the stream its steps start on, cut into steps as its traced steps
/// are. Empty for a cell with nothing measured.
pub fn periods(
    cells: &[CellSteps],
    timeline: &TraceTimeline,
    measured: &[Op],
) -> Vec<Vec<Vec<f64>>> {
    if measured.is_empty() {
        return vec![Vec::new(); cells.len()];
    }
    cells
        .iter()
        .map(|cell| match main_graph(cell, timeline) {
            Some(exec) => graph_periods(cell, timeline, measured, exec),
            // Marked steps, or a loop found in the kernel sequence (whose measured windows
            // follow its traced ones on the recorder's time schedule).
            None => eager_periods(cell, timeline, measured),
        })
        .collect()
}

/// The executable graph most of a cell's steps launch, if its steps launch any.
fn main_graph(cell: &CellSteps, timeline: &TraceTimeline) -> Option<u32> {
    let mut counts: FxHashMap<u32, usize> = FxHashMap::default();
    for step in &cell.steps {
        if let Some(g) = step
            .iter()
            .map(|&i| timeline.ops[i].graph)
            .find(|&g| g != 0)
        {
            *counts.entry(g).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by_key(|&(g, n)| (n, std::cmp::Reverse(g)))
        .map(|(g, _)| g)
}

/// End-to-end periods between consecutive launches of `exec` that were both measured, per run
/// of measured launches. A run is cut where the launches' correlation ids jump (launches ran
/// unrecorded between them: every API call takes an id), and the last launch of each run is
/// left out: the switch that ends measuring is made in its call, and its records can still
/// arrive, its period holding the switch (seen on an H200).
fn graph_periods(
    cell: &CellSteps,
    timeline: &TraceTimeline,
    measured: &[Op],
    exec: u32,
) -> Vec<Vec<f64>> {
    // (end, measured, corr) of every launch of `exec`: the cell's traced steps, the measured.
    let mut launches: Vec<(u64, bool, u32)> = cell
        .steps
        .iter()
        .filter(|s| s.iter().any(|&i| timeline.ops[i].graph == exec))
        .filter_map(|s| s.iter().map(|&i| timeline.ops[i].end).max())
        .map(|end| (end, false, 0))
        .collect();
    let mut by_launch: FxHashMap<u32, u64> = FxHashMap::default();
    for op in measured.iter().filter(|op| op.graph == exec) {
        let end = by_launch.entry(op.corr).or_default();
        *end = (*end).max(op.end);
    }
    launches.extend(by_launch.into_iter().map(|(corr, end)| (end, true, corr)));
    launches.sort_unstable();
    launches
        .chunk_by(|a, b| a.1 == b.1)
        .filter(|run| run[0].1)
        .flat_map(consecutive_launches)
        .filter(|run| run.len() > 2)
        .map(|run| {
            run[..run.len() - 1]
                .windows(2)
                .map(|w| (w[1].0 - w[0].0) as f64)
                .collect()
        })
        .collect()
}

/// A run of measured launches cut where the correlation id steps by more than twice its
/// median step: the launches on either side did not run one after the other.
fn consecutive_launches(run: &[(u64, bool, u32)]) -> Vec<&[(u64, bool, u32)]> {
    let steps: Vec<u32> = run
        .windows(2)
        .map(|w| w[1].2.wrapping_sub(w[0].2))
        .collect();
    let mut sorted = steps.clone();
    sorted.sort_unstable();
    let Some(&median) = sorted.get(sorted.len() / 2) else {
        return vec![run];
    };
    let mut out = Vec::new();
    let mut from = 0;
    for (i, &step) in steps.iter().enumerate() {
        if step > 2 * median.max(1) {
            out.push(&run[from..=i]);
            from = i + 1;
        }
    }
    out.push(&run[from..]);
    out
}

/// A traced step's shape on one stream: the names of its ops there, in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StepShape {
    stream: u32,
    names: Vec<u32>,
}

/// The shape most of the cell's steps have on the stream their first op runs on.
fn step_shape(cell: &CellSteps, timeline: &TraceTimeline) -> Option<StepShape> {
    let mut counts: FxHashMap<StepShape, usize> = FxHashMap::default();
    for step in &cell.steps {
        let Some(&first) = step.first() else {
            continue;
        };
        let stream = timeline.ops[first].stream;
        let names = step
            .iter()
            .map(|&i| &timeline.ops[i])
            .filter(|op| op.stream == stream)
            .map(|op| op.name)
            .collect();
        *counts.entry(StepShape { stream, names }).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|(a, n), (b, m)| {
            n.cmp(m)
                .then_with(|| (b.stream, &b.names).cmp(&(a.stream, &a.names)))
        })
        .map(|(s, _)| s)
}

/// Periods of the measured eager steps that follow this cell's traced steps on its stream:
/// each run of measured ops there (up to the next traced op or graph op on that stream) that
/// starts right after one of the cell's steps is cut into steps of the cell's shape, and the
/// periods are taken between adjacent steps of exactly that shape.
fn eager_periods(cell: &CellSteps, timeline: &TraceTimeline, measured: &[Op]) -> Vec<Vec<f64>> {
    let Some(shape) = step_shape(cell, timeline) else {
        return Vec::new();
    };
    if shape.names.is_empty() {
        return Vec::new();
    }
    // The start of every traced op on the stream, and whether it is one of this cell's.
    let ours: rustc_hash::FxHashSet<usize> = cell.steps.iter().flatten().copied().collect();
    let traced: Vec<(u64, bool)> = timeline
        .ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.stream == shape.stream)
        .map(|(i, op)| (op.start, ours.contains(&i) && op.graph == 0))
        .collect();
    let on_stream: Vec<&Op> = measured
        .iter()
        .filter(|op| op.stream == shape.stream)
        .collect();
    let mut periods = Vec::new();
    let mut run: Vec<&Op> = Vec::new();
    let mut run_is_ours = false;
    let flush = |run: &mut Vec<&Op>, ours: bool, periods: &mut Vec<Vec<f64>>| {
        if ours {
            let mut window = Vec::new();
            run_periods(run, &shape, &mut window);
            if !window.is_empty() {
                periods.push(window);
            }
        }
        run.clear();
    };
    for op in on_stream {
        // The traced ops between the previous measured op and this one end the run.
        let prev = run.last().map_or(0, |p| p.start);
        let lo = traced.partition_point(|t| t.0 <= prev);
        let hi = traced.partition_point(|t| t.0 < op.start);
        if op.graph != 0 || run.is_empty() || lo < hi {
            flush(&mut run, run_is_ours, &mut periods);
            // A run is this cell's when one of its ops is among the last traced ops before
            // it, fewer than a step's worth: a window that ends mid-step (the recorder's time
            // schedule cuts a loop anywhere) leaves a partial step after the cell's last one.
            run_is_ours = traced[..hi]
                .iter()
                .rev()
                .take(shape.names.len())
                .any(|t| t.1);
        }
        if op.graph == 0 {
            run.push(op);
        }
    }
    flush(&mut run, run_is_ours, &mut periods);
    periods
}

/// Cuts a run of measured ops into steps and pushes the end-to-end periods between adjacent
/// ones. A step starts at each occurrence of the shortest prefix of the shape's names that
/// occurs once in the shape, and counts when it holds as many ops as the shape: a loop whose
/// tokens differ in a kernel variant or two (a vectorised or unrolled elementwise kernel,
/// chosen by alignment) keeps its steps, where an exact match of every name would lose most.
fn run_periods(run: &[&Op], shape: &StepShape, periods: &mut Vec<f64>) {
    let n = shape.names.len();
    let anchor = &shape.names[..anchor_len(&shape.names)];
    let starts: Vec<usize> = (0..run.len().saturating_sub(anchor.len() - 1))
        .filter(|&i| {
            run[i..i + anchor.len()]
                .iter()
                .map(|op| op.name)
                .eq(anchor.iter().copied())
        })
        .collect();
    // Each start with the next start (or the run's end) exactly one step after it.
    let step_end = |from: usize| run[from..from + n].iter().map(|op| op.end).max();
    let mut previous_end: Option<u64> = None;
    for (k, &from) in starts.iter().enumerate() {
        let next = starts.get(k + 1).copied().unwrap_or(run.len());
        let end = (next == from + n).then(|| step_end(from)).flatten();
        if let (Some(prev), Some(end)) = (previous_end, end) {
            periods.push(end.saturating_sub(prev) as f64);
        }
        previous_end = end;
    }
}

/// The length of the shortest prefix of `names` that occurs once in it (all of it at most).
fn anchor_len(names: &[u32]) -> usize {
    (1..names.len())
        .find(|&k| names.windows(k).filter(|w| *w == &names[..k]).count() == 1)
        .unwrap_or(names.len())
}

/// The untraced period of a cell from its measured windows' periods, when there are enough of
/// them, with each window's median (its run-to-run samples).
pub fn stat(windows: &[Vec<f64>]) -> Option<(Stat, Vec<f64>)> {
    let mut all: Vec<f64> = windows.iter().flatten().copied().collect();
    if all.len() < UNTRACED_MIN_PERIODS {
        return None;
    }
    let medians = windows
        .iter()
        .filter_map(|w| Stat::of(&mut w.clone()).map(|s| s.median))
        .collect();
    Some((Stat::of(&mut all)?, medians))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::OpKind;

    fn op(start: u64, len: u64, stream: u32, corr: u32, name: u32, graph: u32) -> Op {
        Op {
            start,
            end: start + len,
            device: 0,
            stream,
            corr,
            name,
            kind: OpKind::Kernel,
            graph,
            node: 0,
        }
    }

    /// Eager steps of three ops (names 1, 2, 3) every `period` ns from `t0`, the first corr
    /// `corr0`.
    fn eager_steps(t0: u64, period: u64, steps: u64, corr0: u32) -> Vec<Op> {
        named_steps(&[1, 2, 3], t0, period, steps, corr0)
    }

    /// Eager steps of ops named `names`, 10 ns apart, every `period` ns from `t0`, corr ids
    /// counted from `corr0`.
    fn named_steps(names: &[u32], t0: u64, period: u64, steps: u64, corr0: u32) -> Vec<Op> {
        let n = names.len() as u64;
        (0..steps)
            .flat_map(|s| {
                names.iter().enumerate().map(move |(k, &name)| {
                    let k = k as u64;
                    op(
                        t0 + s * period + k * 10,
                        5,
                        7,
                        corr0 + (s * n + k) as u32,
                        name,
                        0,
                    )
                })
            })
            .collect()
    }

    #[test]
    fn measured_eager_steps_after_a_cells_traced_steps_give_its_untraced_periods() {
        // 4 traced steps at 100 ns, then 6 measured at 60 ns, then 2 traced again.
        let traced_a = eager_steps(0, 100, 4, 0);
        let measured = eager_steps(400, 60, 6, 100);
        let traced_b = eager_steps(1000, 100, 2, 200);
        let ops: Vec<Op> = traced_a.iter().chain(&traced_b).copied().collect();
        let timeline = TraceTimeline { ops };
        let cell = CellSteps {
            steps: (0..6).map(|s| (s * 3..s * 3 + 3).collect()).collect(),
            ..Default::default()
        };
        let p = periods(&[cell], &timeline, &measured);
        assert_eq!(
            p[0],
            vec![vec![60.0; 5]],
            "five periods between six measured steps"
        );
    }

    #[test]
    fn steps_whose_first_kernel_comes_back_inside_them_are_cut_by_their_whole_sequence() {
        // A step of gemm, gelu, gemm (names 1, 2, 1), as a stack of MLP layers launches.
        let steps = |t0, period, n, corr0| named_steps(&[1, 2, 1], t0, period, n, corr0);
        let timeline = TraceTimeline {
            ops: steps(0, 100, 3, 0),
        };
        let cell = CellSteps {
            steps: (0..3).map(|s| (s * 3..s * 3 + 3).collect()).collect(),
            ..Default::default()
        };
        let p = periods(&[cell], &timeline, &steps(300, 70, 5, 100));
        assert_eq!(p[0], vec![vec![70.0; 4]]);
    }

    #[test]
    fn a_measured_run_after_another_cells_steps_is_not_this_cells() {
        let traced = eager_steps(0, 100, 4, 0);
        let measured = eager_steps(400, 60, 6, 100);
        let timeline = TraceTimeline {
            ops: traced.clone(),
        };
        let ours = CellSteps {
            steps: vec![(0..3).collect(), (3..6).collect()],
            ..Default::default()
        };
        let theirs = CellSteps {
            steps: vec![(6..9).collect(), (9..12).collect()],
            ..Default::default()
        };
        let p = periods(&[ours, theirs], &timeline, &measured);
        assert!(
            p[0].is_empty(),
            "the run follows the other cell's last step"
        );
        assert_eq!(p[1].concat().len(), 5);
    }

    #[test]
    fn replay_periods_come_from_adjacent_measured_launches_only() {
        // Graph 9: launches every 50 ns; 0-3 traced, 4-7 measured, 8-9 traced, 10-12 measured,
        // the last of each measured run (7, 12) ending 15 ns late (its call switched).
        let launch = |k: u64, corr: u32| {
            [
                op(k * 50, 10, 3, corr, 1, 9),
                op(k * 50 + 20, 10, 3, corr, 2, 9),
            ]
        };
        let (mut traced, mut measured) = (Vec::new(), Vec::new());
        for k in 0..13u64 {
            let mut ops = launch(k, k as u32);
            if k == 7 || k == 12 {
                for op in &mut ops {
                    op.end += 15;
                }
            }
            if (4..8).contains(&k) || k >= 10 {
                measured.extend(ops);
            } else {
                traced.extend(ops);
            }
        }
        let timeline = TraceTimeline { ops: traced };
        let cell = CellSteps {
            steps: (0..6).map(|s| vec![2 * s, 2 * s + 1]).collect(),
            ..Default::default()
        };
        let p = periods(&[cell], &timeline, &measured);
        assert_eq!(
            p[0],
            vec![vec![50.0; 2], vec![50.0]],
            "each window's periods but its last"
        );
    }

    #[test]
    fn a_measured_looking_launch_after_unrecorded_ones_starts_no_period() {
        // Launches every 50 ns, corr ids 10 apart; 0-2 traced, 3-7 measured, 8-29 unrecorded,
        // 30 recorded without its API record (a resume), 31-32 traced.
        let launch = |k: u64| [op(k * 50, 10, 3, 10 * k as u32, 1, 9)];
        let (mut traced, mut measured) = (Vec::new(), Vec::new());
        for k in (0..8u64).chain(30..33) {
            if (3..8).contains(&k) || k == 30 {
                measured.extend(launch(k));
            } else {
                traced.extend(launch(k));
            }
        }
        let timeline = TraceTimeline { ops: traced };
        let cell = CellSteps {
            steps: (0..5).map(|s| vec![s]).collect(),
            ..Default::default()
        };
        let p = periods(&[cell], &timeline, &measured);
        assert_eq!(
            p[0],
            vec![vec![50.0; 3]],
            "launches 3-6; 7 is the run's last"
        );
    }

    #[test]
    fn traces_that_do_not_measure_keep_every_op() {
        let mut trace = crate::trace::synthetic::emu_experiment(1);
        let mut timeline = super::super::timeline::build(&trace);
        let before = timeline.ops.len();
        trace.metadata.sampling = None;
        let launches = LaunchIndex::new(&trace);
        assert!(take_measured(&trace, &mut timeline, &launches).is_empty());
        assert_eq!(timeline.ops.len(), before);
    }
}
