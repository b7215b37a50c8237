//! A trace's eager ops read as a sequence of op identities, and the loops found in it
//! ([`find_loops`]) kept, joined and pooled into cells of steps ([`discover`]).
//!
//! Runs of one unit that a short interruption splits ([`JOIN_UNITS`]: a generate() call's
//! prefill between two calls) and that run at the same period are one loop, one cell; the
//! step after each interruption has no period. A loop of fewer ops in all than one step of
//! another (a prefill's layers, inside that interruption or beside it) is the inner structure
//! of one pass, not a loop of the program: its ops are left over. So are loops of a one-op unit
//! beside loops of longer units or graph replays (a burst of one kernel: autotuning's fills),
//! and loops that time one kernel after an L2 flush ([`is_benchmark_unit`]: torch.compile's
//! autotuning, between a program's eager and compiled phases).
#![forbid(unsafe_code)]

use super::loops::{LoopSpan, find_loops, off_unit_tolerance};
use crate::analysis::lcs::{banded_lcs, lcs_pairs};
use crate::analysis::model::{Op, OpKind, TraceTimeline};
use crate::analysis::stats::{Change, Stat};
use crate::analysis::timeline::LaunchIndex;
use crate::trace::Trace;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// A cell of steps found in the kernel sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundSteps {
    /// Position of the unit among the trace's units, in order of first appearance (E1…).
    pub ordinal: usize,
    /// Ops of the unit (an identical step).
    pub unit_ops: usize,
    pub steps: usize,
    /// Steps that differ from the unit by a few ops (a sampling or bookkeeping kernel every N
    /// steps): kept in the cell, counted here.
    pub off_unit_steps: usize,
    /// Runs of the loop in this cell: one, or more that interruptions split (a generate()
    /// call's prefill between two calls), joined; the first step after each interruption has
    /// no period.
    pub runs_joined: usize,
    /// The median step period (ns) of each group of runs that ran at one period, in order: one
    /// entry, or several when the loop ran at different periods (a warm-up call, then the
    /// timed ones), all pooled into this one cell.
    pub run_medians: Vec<u64>,
    /// The step marker the steps were found inside (a `ProfilerStep` around a whole
    /// generate call), if any.
    pub inside_marker: Option<String>,
}

impl FoundSteps {
    pub fn label(&self) -> String {
        format!(
            "eager loop E{} (steps of {} ops found in the kernel sequence)",
            self.ordinal, self.unit_ops
        )
    }

    /// "unit of 6 ops, 99 steps in 3 runs, 2 off the unit".
    pub fn describe(&self) -> String {
        let joined = match (self.runs_joined, self.run_medians.as_slice()) {
            (n, medians) if medians.len() > 1 => format!(
                " in {n} runs at different periods (medians {} µs)",
                medians
                    .iter()
                    .map(|&m| format!("{:.2}", m as f64 / 1e3))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            (n, _) if n > 1 => format!(" in {n} runs"),
            _ => String::new(),
        };
        let off = if self.off_unit_steps > 0 {
            format!(", {} off the unit", self.off_unit_steps)
        } else {
            String::new()
        };
        format!(
            "unit of {} ops, {} steps{joined}{off}",
            self.unit_ops, self.steps
        )
    }
}

/// A cell of steps found: its steps (ops as timeline indices, in start order) and what it is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FoundCell {
    pub steps: Vec<Vec<usize>>,
    /// Steps that follow an interruption of the loop: no period reaches back past it.
    pub breaks: Vec<usize>,
    pub found: FoundSteps,
}

/// Steps found among some eager ops of a trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Discovered {
    /// Each loop's cell.
    pub cells: Vec<FoundCell>,
    /// Ops of loops whose steps each launch a graph too: they belong to graph replays (a
    /// framework's fill kernels beside each replay), not to eager steps.
    pub beside_graphs: usize,
    /// Eager ops in no step.
    pub left_over: usize,
}

/// Whether a loop's unit (its op names) is a benchmark's: one kernel, run after zeroing an
/// int buffer as large as the L2 cache (Triton's `do_bench` and inductor's benchmarker flush
/// the cache this way before each timed run: `cache.zero_()`, a `FillFunctor<int>` kernel).
fn is_benchmark_unit<'n>(names: impl Iterator<Item = &'n String>) -> bool {
    let names: Vec<&String> = names.collect();
    let flushes = names.iter().filter(|n| n.contains(L2_FLUSH_KERNEL)).count();
    names.len() == 2 && flushes == 1
}

/// The kernel of `cache.zero_()` on the int buffer a benchmark flushes L2 with.
const L2_FLUSH_KERNEL: &str = "FillFunctor<int>";

/// API calls that launch, capture or instantiate a graph: eager ops that repeat with each of
/// them are the graph's, not a step's (`cudaStreamIsCapturing`, which eager code calls too, is
/// not one).
fn is_graph_work_api(name: &str) -> bool {
    [
        "GraphLaunch",
        "BeginCapture",
        "EndCapture",
        "GraphInstantiate",
    ]
    .iter()
    .any(|w| name.contains(w))
}

/// Distinct op-name sequences of the trace's graph launches (the first few), for phasing.
fn graph_sequences(timeline: &TraceTimeline) -> Vec<Vec<u32>> {
    const MAX: usize = 8;
    let mut by_launch: FxHashMap<(u32, u32), Vec<u32>> = FxHashMap::default();
    let mut order: Vec<(u32, u32)> = Vec::new();
    for o in timeline.ops.iter().filter(|o| o.graph != 0) {
        by_launch
            .entry((o.corr, o.graph))
            .or_insert_with(|| {
                order.push((o.corr, o.graph));
                Vec::new()
            })
            .push(o.name);
    }
    let mut seqs: Vec<Vec<u32>> = Vec::new();
    for key in order {
        let seq = &by_launch[&key];
        if !seqs.contains(seq) {
            seqs.push(seq.clone());
            if seqs.len() == MAX {
                break;
            }
        }
    }
    seqs
}

/// The offset in `unit` (op names) that starts a graph's sequence, when a rotation of the unit
/// aligns with half of a graph's ops or more: the graph then does the step's work, and the two
/// start at the same op.
fn graph_phase(unit: &[u32], graphs: &[Vec<u32>]) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for g in graphs {
        let Some(&first) = g.first() else {
            continue;
        };
        for k in (0..unit.len()).filter(|&k| unit[k] == first) {
            let rotated: Vec<u32> = unit[k..].iter().chain(&unit[..k]).copied().collect();
            let matched = lcs_pairs(&rotated, g).len();
            if 2 * matched >= g.len().min(unit.len()) && best.is_none_or(|b| matched > b.0) {
                best = Some((matched, k));
            }
        }
    }
    best.map(|b| b.1)
}

/// Ops as symbols: one per (name, kind, stream), numbered in order of first appearance.
struct Symbols {
    /// Each op's symbol, in the order given.
    symbols: Vec<u32>,
    /// Each symbol's op name.
    name_of: Vec<u32>,
    /// Whether each symbol is a kernel's.
    kernel_symbol: Vec<bool>,
}

fn symbols_of<'o>(ops: impl Iterator<Item = &'o Op>) -> Symbols {
    let mut ids: FxHashMap<(u32, u8, u32), u32> = FxHashMap::default();
    let (mut name_of, mut kernel_symbol) = (Vec::new(), Vec::new());
    let symbols = ops
        .map(|op| {
            let next = ids.len() as u32;
            *ids.entry((op.name, op.kind as u8, op.stream))
                .or_insert_with(|| {
                    name_of.push(op.name);
                    kernel_symbol.push(op.kind == OpKind::Kernel);
                    next
                })
        })
        .collect();
    Symbols {
        symbols,
        name_of,
        kernel_symbol,
    }
}

/// Host instants of graph launches, captures and instantiations (API calls, and the launches
/// of replayed ops), sorted, once each.
fn graph_work_instants(
    trace: &Trace,
    timeline: &TraceTimeline,
    launches: &LaunchIndex,
) -> Vec<u64> {
    let graph_apis: Vec<bool> = trace.strings.iter().map(|s| is_graph_work_api(s)).collect();
    let mut instants: Vec<u64> = trace
        .api_calls
        .iter()
        .filter(|a| graph_apis.get(a.name as usize).copied().unwrap_or(false))
        .map(|a| a.start)
        .chain(
            timeline
                .ops
                .iter()
                .filter(|o| o.graph != 0)
                .filter_map(|o| launches.call(o.corr).map(|c| c.0)),
        )
        .collect();
    instants.sort_unstable();
    instants.dedup();
    instants
}

/// Positions of `ops` in launch order: the host's, when every op has its launch call
/// (`calls`; streams make the device's start order vary step to step), else as given.
fn launch_order(
    calls: &[Option<(u64, u64, u32)>],
    timeline: &TraceTimeline,
    ops: &[usize],
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ops.len()).collect();
    if calls.iter().all(Option::is_some) {
        order.sort_by_key(|&k| {
            (
                calls[k].map_or(0, |c| c.0),
                timeline.ops[ops[k]].corr,
                ops[k],
            )
        });
    }
    order
}

/// The gap before each op in `order`: from the previous op's launch call's end to its own's
/// start when every op has its call, else between the ops on the device.
fn gaps_before(
    order: &[usize],
    calls: &[Option<(u64, u64, u32)>],
    timeline: &TraceTimeline,
    ops: &[usize],
) -> Vec<u64> {
    let by_host = calls.iter().all(Option::is_some);
    (0..order.len())
        .map(|p| {
            let Some(prev) = p.checked_sub(1) else {
                return 0;
            };
            let (k, j) = (order[p], order[prev]);
            if by_host {
                let (a, b) = (calls[k].map_or(0, |c| c.0), calls[j].map_or(0, |c| c.1));
                a.saturating_sub(b)
            } else {
                let (a, b) = (&timeline.ops[ops[k]], &timeline.ops[ops[j]]);
                a.start.saturating_sub(b.end)
            }
        })
        .collect()
}

/// The loops of the eager ops `ops` (timeline indices) of `trace`: see the module doc.
pub(crate) fn discover(
    trace: &Trace,
    timeline: &TraceTimeline,
    launches: &LaunchIndex,
    ops: &[usize],
    inside_marker: Option<&str>,
) -> Discovered {
    let calls: Vec<Option<(u64, u64, u32)>> = ops
        .iter()
        .map(|&i| launches.call(timeline.ops[i].corr))
        .collect();
    let by_host = calls.iter().all(Option::is_some);
    let order = launch_order(&calls, timeline, ops);
    let Symbols {
        symbols,
        name_of,
        kernel_symbol,
    } = symbols_of(order.iter().map(|&k| &timeline.ops[ops[k]]));
    let gap_before = gaps_before(&order, &calls, timeline, ops);
    let graphs = graph_sequences(timeline);
    let prefer = |unit: &[u32]| {
        let names: Vec<u32> = unit.iter().map(|&s| name_of[s as usize]).collect();
        graph_phase(&names, &graphs)
    };
    let loops = find_loops(&symbols, &gap_before, &prefer);

    // A loop whose steps each hold a graph's launch, capture or instantiation is a graph's.
    let graph_launches = graph_work_instants(trace, timeline, launches);
    let host_at = |p: usize| calls[order[p]].map(|c| c.0);
    let holds_graph_launch = |from: Option<u64>, to: Option<u64>| match (from, to) {
        (Some(a), Some(b)) => {
            let i = graph_launches.partition_point(|&t| t < a);
            graph_launches.get(i).is_some_and(|&t| t < b)
        }
        _ => false,
    };

    let mut out = Discovered::default();
    let mut taken = 0;
    let mut kept: Vec<LoopSpan> = Vec::new();
    for l in &loops {
        // A step computes: a unit of copies and memsets alone (a library's set-up) is none.
        if !symbols[l.unit.0..l.unit.1]
            .iter()
            .any(|&s| kernel_symbol[s as usize])
        {
            continue;
        }
        let with_graph = l
            .steps
            .iter()
            .zip(l.steps.iter().skip(1).map(|s| host_at(s.0)).chain([None]))
            .filter(|(s, next)| {
                let end = next.or_else(|| host_at(s.1 - 1).map(|t| t + 1));
                holds_graph_launch(host_at(s.0), end)
            })
            .count();
        if by_host && 4 * with_graph >= l.steps.len() {
            out.beside_graphs += l.ops();
            taken += l.ops();
            continue;
        }
        kept.push(l.clone());
    }
    // When each step started: the host's launch of its first op, else the op's start.
    let started = |p: usize| match calls[order[p]] {
        Some(c) if by_host => c.0,
        _ => timeline.ops[ops[order[p]]].start,
    };
    let periods = |l: &LoopSpan| -> Vec<f64> {
        l.steps
            .windows(2)
            .map(|w| started(w[1].0).saturating_sub(started(w[0].0)) as f64)
            .collect()
    };
    let unit_of = |l: &LoopSpan| &symbols[l.unit.0..l.unit.1];
    let mut joined = join_runs(kept, &unit_of, &periods);
    // A loop of fewer ops in all than one step of another is the inner structure of one pass
    // (a prefill's layers), not a loop of the program: its ops are left over.
    let longest_unit = joined.iter().map(|r| r[0].unit_len()).max().unwrap_or(0);
    joined.retain(|runs| runs.iter().map(LoopSpan::ops).sum::<usize>() >= longest_unit);
    // One op repeated is any burst of one kernel (torch.compile's autotuning fills and
    // benchmarks, a cache's initialisation): beside a loop of real steps or graph replays it is
    // no step of the program, and its ops are left over.
    if longest_unit > 1 || !graphs.is_empty() {
        joined.retain(|runs| runs[0].unit_len() > 1);
    }
    // A benchmark loop beside real steps or graph replays is the framework's timing of a
    // kernel, not a step of the program.
    if longest_unit > 2 || !graphs.is_empty() {
        joined.retain(|runs| {
            let names = unit_of(&runs[0]).iter().map(|&s| name_of[s as usize]);
            !is_benchmark_unit(names.filter_map(|n| trace.strings.get(n as usize)))
        });
    }
    let step_ops = |(s, e): (usize, usize)| {
        let mut step: Vec<usize> = (s..e).map(|p| ops[order[p]]).collect();
        step.sort_unstable();
        step
    };
    let (cells, pooled) = pool_into_cells(&joined, &unit_of, &periods, &step_ops, inside_marker);
    out.cells = cells;
    taken += pooled;
    out.left_over = ops.len() - taken;
    out
}

/// Whether two runs' units are one loop's: identical, or within [`off_unit_tolerance`] of each
/// other, as a step is of its loop (a run's unit is its most frequent step, and a short run —
/// a paced recording's window of a few tokens — may settle on another variant of the token).
fn same_loop_unit(a: &[u32], b: &[u32]) -> bool {
    if a == b {
        return true;
    }
    let tol = off_unit_tolerance(a.len().max(b.len()));
    a.len().abs_diff(b.len()) <= tol && banded_lcs(a, b, tol) + tol >= a.len().max(b.len())
}

/// The loops kept, as cells: one per unit (numbered by first appearance), the runs of one unit
/// that ran at different periods (a warm-up call, then the timed ones) pooled into its cell,
/// each run's median period kept beside it. Returns the cells and the ops their steps hold.
fn pool_into_cells<'s>(
    joined: &[Vec<LoopSpan>],
    unit_of: &dyn Fn(&LoopSpan) -> &'s [u32],
    periods: &dyn Fn(&LoopSpan) -> Vec<f64>,
    step_ops: &dyn Fn((usize, usize)) -> Vec<usize>,
    inside_marker: Option<&str>,
) -> (Vec<FoundCell>, usize) {
    let mut cells: Vec<FoundCell> = Vec::new();
    let mut taken = 0;
    let mut units: Vec<&[u32]> = Vec::new();
    let ordinals: Vec<usize> = joined
        .iter()
        .map(|runs| {
            let unit = unit_of(&runs[0]);
            match units.iter().position(|u| same_loop_unit(u, unit)) {
                Some(i) => i + 1,
                None => {
                    units.push(unit);
                    units.len()
                }
            }
        })
        .collect();
    let mut cell_of: FxHashMap<usize, usize> = FxHashMap::default();
    for (runs, &ordinal) in joined.iter().zip(&ordinals) {
        let run_median = Stat::of(&mut runs.iter().flat_map(periods).collect::<Vec<f64>>())
            .map_or(0, |s| s.median.round() as u64);
        if let Some(&at) = cell_of.get(&ordinal) {
            let cell: &mut FoundCell = &mut cells[at];
            for l in runs {
                cell.breaks.push(cell.steps.len());
                taken += l.ops();
                cell.steps.extend(l.steps.iter().map(|&se| step_ops(se)));
            }
            let found = &mut cell.found;
            found.steps = cell.steps.len();
            found.off_unit_steps += runs.iter().map(|l| l.off_unit).sum::<usize>();
            found.runs_joined += runs.len();
            found.run_medians.push(run_median);
            continue;
        }
        cell_of.insert(ordinal, cells.len());
        let mut steps: Vec<Vec<usize>> = Vec::new();
        let mut breaks = Vec::new();
        for l in runs {
            if !steps.is_empty() {
                breaks.push(steps.len());
            }
            taken += l.ops();
            steps.extend(l.steps.iter().map(|&se| step_ops(se)));
        }
        let found = FoundSteps {
            ordinal,
            unit_ops: runs[0].unit_len(),
            steps: steps.len(),
            // The runs' units are the same ops: each run's count is against the cell's unit.
            off_unit_steps: runs.iter().map(|l| l.off_unit).sum(),
            runs_joined: runs.len(),
            run_medians: vec![run_median],
            inside_marker: inside_marker.map(str::to_owned),
        };
        cells.push(FoundCell {
            steps,
            breaks,
            found,
        });
    }
    (cells, taken)
}

/// Interruptions of a loop that it outlasts: runs of one unit with at most this many units'
/// worth of other ops between them (a generate() call's prefill and set-up between two calls)
/// are one loop.
const JOIN_UNITS: usize = 2;

/// Joins runs of one unit (`loops`, in start order) that a short interruption splits
/// ([`JOIN_UNITS`]) and whose step periods differ by no more than their spread (the same loop
/// called again, not another batch size): each entry of the result is a loop's runs. Loops
/// inside such an interruption (a prefill's layers) are part of it, not loops of their own:
/// they are dropped, and their ops are left over.
fn join_runs<'u>(
    loops: Vec<LoopSpan>,
    unit_of: &dyn Fn(&LoopSpan) -> &'u [u32],
    periods: &dyn Fn(&LoopSpan) -> Vec<f64>,
) -> Vec<Vec<LoopSpan>> {
    let mut joined: Vec<Vec<LoopSpan>> = Vec::new();
    for l in loops {
        let unit = unit_of(&l);
        let same_loop = joined.iter().rposition(|runs| {
            let last = runs.last().expect("a run");
            if unit_of(last) != unit || l.start() - last.end() > JOIN_UNITS * unit.len() {
                return false;
            }
            let mut before: Vec<f64> = runs.iter().flat_map(periods).collect();
            let (before, now) = (Stat::of(&mut before), Stat::of(&mut periods(&l)));
            matches!((before, now), (Some(b), Some(n)) if Change::between(&b, &n) == Change::NoChange)
        });
        match same_loop {
            Some(i) => {
                joined.truncate(i + 1);
                joined[i].push(l);
            }
            None => joined.push(vec![l]),
        }
    }
    joined
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_benchmark_is_one_kernel_after_an_int_fill() {
        let fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)".to_owned();
        let kernel = "triton_poi_fused__scaled_dot_product_cudnn_attention_0".to_owned();
        let float_fill = fill.replace("FillFunctor<int>", "FillFunctor<float>");
        assert!(is_benchmark_unit([&fill, &kernel].into_iter()));
        assert!(!is_benchmark_unit([&float_fill, &kernel].into_iter()));
        assert!(!is_benchmark_unit([&fill, &kernel, &kernel].into_iter()));
        assert!(!is_benchmark_unit([&kernel, &kernel].into_iter()));
    }
}
