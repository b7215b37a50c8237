//! Splitting a timeline into cells and steps.
//!
//! A step is the device work launched inside one host step marker: an op belongs to the step
//! whose marker contains the start of its launching API call (joined by correlation id), so
//! eager launches and graph launches are treated alike and GPU lag behind the host does not
//! matter. Without step markers, each graph launch is a step.

use super::TraceTimeline;
use crate::trace::{MarkerKind, Trace};
use std::collections::BTreeMap;

/// The steps of one cell, before attribution.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CellSteps {
    /// Index into the trace's `metadata.cells`, when markers name one.
    pub cell: Option<usize>,
    pub steps: Vec<Vec<usize>>,
    /// Set when one marked cell held both eager steps and graph replays (e.g. one NVTX range
    /// name around both in a user's program): the regime observed, which splits it in two.
    pub regime_split: Option<super::Regime>,
}

/// Splits cells whose steps mix eager work and graph replays into one cell per regime, so
/// the two can be aligned against each other. Regimes are read from the records.
pub fn split_mixed_regimes(cells: Vec<CellSteps>, timeline: &TraceTimeline) -> Vec<CellSteps> {
    let mut out = Vec::with_capacity(cells.len());
    for cell in cells {
        let graphed = |ops: &Vec<usize>| ops.iter().any(|&i| timeline.ops[i].graph != 0);
        let (g, e): (Vec<_>, Vec<_>) = cell.steps.into_iter().partition(graphed);
        if g.is_empty() || e.is_empty() {
            out.push(CellSteps {
                steps: if g.is_empty() { e } else { g },
                ..cell
            });
            continue;
        }
        for (regime, steps) in [(super::Regime::Eager, e), (super::Regime::Graphed, g)] {
            out.push(CellSteps {
                cell: cell.cell,
                steps,
                regime_split: Some(regime),
            });
        }
    }
    out
}

/// Launch calls by correlation id, for joining ops to host markers and launch times.
pub struct LaunchIndex {
    by_corr: Vec<(u32, u64, u64, u32)>,
    /// When no correlation id repeats and the ids are dense (as CUPTI and Kineto number
    /// them): `by_corr` index by `corr - first`, `u32::MAX` for none. A lookup is then one
    /// load instead of a binary search over a million calls, with the same answer.
    dense: Vec<u32>,
    first: u32,
}

impl LaunchIndex {
    pub fn new(trace: &Trace) -> LaunchIndex {
        let mut by_corr: Vec<(u32, u64, u64, u32)> = trace
            .api_calls
            .iter()
            .map(|a| (a.corr, a.start, a.end, a.thread))
            .collect();
        // Usually nearly sorted already (calls are recorded in order): a run-detecting sort.
        by_corr.sort_by_key(|e| e.0);
        let unique = by_corr.windows(2).all(|w| w[0].0 != w[1].0);
        let first = by_corr.first().map_or(0, |e| e.0);
        let span = by_corr.last().map_or(0, |e| (e.0 - first) as usize + 1);
        let mut dense = Vec::new();
        if unique && span <= 4 * by_corr.len() + 1024 {
            dense = vec![u32::MAX; span];
            for (i, e) in by_corr.iter().enumerate() {
                dense[(e.0 - first) as usize] = i as u32;
            }
        }
        LaunchIndex {
            by_corr,
            dense,
            first,
        }
    }

    /// (start, end, thread) of the API call with this correlation id.
    pub fn call(&self, corr: u32) -> Option<(u64, u64, u32)> {
        let i = if self.dense.is_empty() {
            self.by_corr.binary_search_by_key(&corr, |e| e.0).ok()?
        } else {
            let slot = *self.dense.get(corr.checked_sub(self.first)? as usize)?;
            (slot != u32::MAX).then_some(slot as usize)?
        };
        let e = self.by_corr[i];
        Some((e.1, e.2, e.3))
    }
}

/// Splits the timeline into cells of steps (see the module doc).
pub fn split_cells(
    trace: &Trace,
    timeline: &TraceTimeline,
    launches: &LaunchIndex,
) -> Vec<CellSteps> {
    let mut markers: Vec<(u64, u64, Option<u32>)> = trace
        .markers
        .iter()
        .filter(|m| m.kind == MarkerKind::Step)
        .map(|m| (m.start, m.end, m.cell))
        .collect();
    if markers.is_empty() {
        return vec![steps_from_graph_launches(trace, timeline)];
    }
    markers.sort_unstable();
    let mut per_marker: Vec<Vec<usize>> = vec![Vec::new(); markers.len()];
    for (i, op) in timeline.ops.iter().enumerate() {
        let Some((launched, _, _)) = launches.call(op.corr) else {
            continue;
        };
        // The last marker starting at or before the launch; it must also contain it.
        let m = markers.partition_point(|mk| mk.0 <= launched);
        if m > 0 && launched <= markers[m - 1].1 {
            per_marker[m - 1].push(i);
        }
    }
    let mut cells: BTreeMap<Option<u32>, CellSteps> = BTreeMap::new();
    for (marker, ops) in markers.iter().zip(per_marker) {
        if ops.is_empty() {
            continue;
        }
        cells
            .entry(marker.2)
            .or_insert_with(|| CellSteps {
                cell: marker.2.map(|c| c as usize),
                steps: Vec::new(),
                regime_split: None,
            })
            .steps
            .push(ops);
    }
    cells.into_values().collect()
}

/// No step markers: each graph launch (ops sharing a graph id and launch correlation id) is a
/// step; a trace without graphs is one step.
fn steps_from_graph_launches(trace: &Trace, timeline: &TraceTimeline) -> CellSteps {
    let cell = (trace.metadata.cells.len() == 1).then_some(0);
    let mut launches: BTreeMap<(u32, u32), Vec<usize>> = BTreeMap::new();
    for (i, op) in timeline.ops.iter().enumerate() {
        if op.graph != 0 {
            launches.entry((op.corr, op.graph)).or_default().push(i);
        }
    }
    let mut steps: Vec<Vec<usize>> = launches.into_values().collect();
    if steps.is_empty() && !timeline.ops.is_empty() {
        steps.push((0..timeline.ops.len()).collect());
    }
    steps.sort_by_key(|ops| ops[0]);
    CellSteps {
        cell,
        steps,
        regime_split: None,
    }
}
