//! Two analyses compared (`gapscope compare BASE HEAD`): their cells matched and compared
//! ([`super::cell_comparison`]), `compare`'s threshold verdict, the remedies realised, and the
//! pictures every report draws of the pairs.
#![forbid(unsafe_code)]

use super::analyzer::Analysis;
use super::cell::CellAnalysis;
use super::cell_comparison::{CellComparison, compare_cells};
use super::stats::{Change, Geomean};
use serde::Serialize;

/// A slower cell of `compare` whose slowdown is mostly the host launching later
/// ([`CellComparison::host_bound_slowdown`]): the verdict carries a caution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HostBoundSlowdown {
    /// Index into [`Comparison::cells`].
    pub cell: usize,
    /// The part of the period growth that is host launch-bound gaps (0–1).
    pub share: f64,
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
    /// hardware as well as the change). See [`device_mismatch`].
    pub device_mismatch: Option<String>,
    /// Slower cells whose slowdown is mostly the host launching later: the verdict's caution.
    pub host_bound_slowdowns: Vec<HostBoundSlowdown>,
}

/// The slower cells of a comparison whose slowdown is mostly the host launching later
/// ([`CellComparison::host_bound_slowdown`]), each with that share.
pub fn host_bound_slowdowns(cells: &[CellComparison]) -> Vec<HostBoundSlowdown> {
    cells
        .iter()
        .enumerate()
        .filter(|(_, m)| m.host_bound_slowdown())
        .map(|(cell, m)| HostBoundSlowdown {
            cell,
            share: m.host_launch_share().unwrap_or(0.0),
        })
        .collect()
}

/// "2 without a verdict: too few steps (3 a side needed)" of the compared cells that have no
/// verdict ([`CellComparison::no_verdict`]); `None` when every one has.
pub fn unjudged_note(cells: &[CellComparison]) -> Option<String> {
    let unjudged = cells.iter().filter(|m| m.no_verdict.is_some()).count();
    (unjudged > 0).then(|| {
        format!(
            "{unjudged} without a verdict: too few steps ({} a side needed)",
            super::thresholds::MIN_STEPS_TO_JUDGE
        )
    })
}

/// "1 slower beyond its spread, within 1.02×" of the compared cells that are slower beyond the
/// spread but not by more than `threshold`: a PASS that still has "slower" rows says so.
pub fn slower_within_threshold_note(cells: &[CellComparison], threshold: f64) -> Option<String> {
    let within = cells
        .iter()
        .filter(|c| c.change == Some(Change::Slower) && !c.ratio.is_some_and(|r| r > threshold))
        .count();
    (within > 0).then(|| format!("{within} slower beyond its spread, within {threshold:.2}×"))
}

/// What a picture of one compared cell draws (`compare.svg`, `compare.perfetto-trace`): each
/// side's step nearest its median period, and the gap that changed most. Decided here so that
/// every picture shows the same steps and marks the same gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairPicture {
    /// Index into [`Comparison::cells`].
    pub cell: usize,
    /// Positions in the base cell's and the head cell's steps.
    pub base_step: usize,
    pub head_step: usize,
    /// Index into the pair's [`CellComparison::aligned`]: the op whose gap before changed most
    /// ([`CellComparison::top_gap_deltas`]); `None` when no gap changed enough to show.
    pub largest_gap_change: Option<usize>,
    /// Whether that gap's base cause is gone in the head ([`CellComparison::causes_gone_in_head`]).
    pub gone_in_head: bool,
}

/// The step of `cell` whose period is nearest its median period (its first step when no step
/// has a period); `None` without steps.
pub fn median_step(cell: &CellAnalysis) -> Option<usize> {
    let first = (!cell.steps.is_empty()).then_some(0);
    let Some(median) = cell.period.map(|p| p.median) else {
        return first;
    };
    cell.steps
        .iter()
        .enumerate()
        .filter_map(|(k, s)| Some((k, (s.period? as f64 - median).abs())))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .map(|(k, _)| k)
        .or(first)
}

/// The picture of compared cell `cell` of `c`; `None` when a side has no step.
pub fn pair_picture(c: &Comparison, cell: usize) -> Option<PairPicture> {
    let pair = c.cells.get(cell)?;
    let (base, head) = (c.base.cells.get(pair.base)?, c.head.cells.get(pair.head)?);
    let largest_gap_change = pair
        .top_gap_deltas(1)
        .first()
        .and_then(|(op, _)| pair.aligned.iter().position(|a| std::ptr::eq(a, *op)));
    let gone_in_head = largest_gap_change
        .and_then(|i| base.sequence.get(pair.aligned[i].base?))
        .is_some_and(|e| pair.causes_gone_in_head.contains(&e.gap_cause));
    Some(PairPicture {
        cell,
        base_step: median_step(base)?,
        head_step: median_step(head)?,
        largest_gap_change,
        gone_in_head,
    })
}

/// The picture of every compared cell that has steps on both sides, in cell order.
pub fn pair_pictures(c: &Comparison) -> Vec<PairPicture> {
    (0..c.cells.len())
        .filter_map(|i| pair_picture(c, i))
        .collect()
}

/// The pair a comparison's picture leads with (`compare.svg`): among the cells whose period
/// changed beyond the spread, else among all, the one whose period moved most (the untraced
/// periods' change where both were measured).
pub fn headline_picture(c: &Comparison) -> Option<PairPicture> {
    let moved = |m: &CellComparison| {
        let delta = m.untraced_period_delta.or(m.period_delta).unwrap_or(0.0);
        let beyond = matches!(m.change, Some(Change::Faster | Change::Slower));
        (beyond, delta.abs())
    };
    let cell = c
        .cells
        .iter()
        .enumerate()
        .filter(|(i, _)| pair_picture(c, *i).is_some())
        .max_by(|x, y| {
            let (a, b) = (moved(x.1), moved(y.1));
            a.0.cmp(&b.0).then(a.1.total_cmp(&b.1))
        })?
        .0;
    pair_picture(c, cell)
}

/// `--threshold`: a head/base period ratio of at least 1 (1.02: 2 % slower allowed; 1: no
/// slowdown beyond the spread). Below 1 it would say "no cell slower than 0.50×" of cells that
/// are slower: a cell breaches only when it is slower beyond the spread, so its ratio is above
/// 1 whatever the threshold below that. The error is one line naming the value.
pub fn check_threshold(threshold: f64) -> Result<(), BadThreshold> {
    if threshold.is_finite() && threshold >= 1.0 {
        Ok(())
    } else {
        Err(BadThreshold { threshold })
    }
}

/// A `--threshold` that [`check_threshold`] refuses: typed for the command line (bad input).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "--threshold {threshold:?}: expected the largest head/base period ratio allowed, at least 1 (1.02 allows 2 % slower; 1 allows no slowdown beyond the spread)"
)]
pub struct BadThreshold {
    pub threshold: f64,
}

/// The devices BASE and HEAD ran on, when both name theirs and they differ: one line saying so.
/// (Inputs that name no device, e.g. synthetic traces, are left out of the test.)
pub fn device_mismatch(base: &Analysis, head: &Analysis) -> Option<String> {
    let devices = |a: &Analysis| -> Vec<String> {
        let mut names: Vec<String> = a.inputs.iter().filter_map(|i| i.device.clone()).collect();
        names.sort_unstable();
        names.dedup();
        names
    };
    let (b, h) = (devices(base), devices(head));
    (!b.is_empty() && !h.is_empty() && b != h).then(|| {
        format!(
            "BASE ran on {} and HEAD on {}: the ratios compare different hardware, not only the change",
            b.join(", "),
            h.join(", ")
        )
    })
}

/// `compare BASE HEAD`: matches cells by workload and observed regime, and checks the head
/// against `threshold` (a ratio, e.g. 1.02, see [`check_threshold`]): a cell breaches it when
/// its period ratio exceeds it and the difference is larger than the run-to-run spread.
pub fn compare(base: Analysis, head: Analysis, threshold: f64) -> Comparison {
    let mut cells = Vec::new();
    let mut unmatched = Vec::new();
    let mut used = vec![false; base.cells.len()];
    for (hi, h) in head.cells.iter().enumerate() {
        let key = h.match_key();
        let found = base
            .cells
            .iter()
            .enumerate()
            .position(|(bi, b)| !used[bi] && b.match_key() == key);
        match found {
            Some(bi) => {
                used[bi] = true;
                cells.push(compare_cells(bi, hi, &base.cells[bi], h));
            }
            None => unmatched.push(format!("head only: {}", h.label)),
        }
    }
    for (bi, b) in base.cells.iter().enumerate() {
        if !used[bi] {
            unmatched.push(format!("base only: {}", b.label));
        }
    }
    let ratios: Vec<f64> = cells.iter().filter_map(|c| c.ratio).collect();
    let breached = cells
        .iter()
        .filter(|c| c.change == Some(Change::Slower) && c.ratio.is_some_and(|r| r > threshold))
        .map(|c| {
            format!(
                "{}: {:.3}x (threshold {threshold:.3}x)",
                c.head_label,
                c.ratio.unwrap_or(f64::NAN)
            )
        })
        .collect();
    let realised = super::remedy::realised(&base.cells, &base.remedies, &head.cells, &cells);
    let device_mismatch = device_mismatch(&base, &head);
    let host_bound_slowdowns = host_bound_slowdowns(&cells);
    Comparison {
        host_bound_slowdowns,
        base,
        head,
        cells,
        unmatched,
        geomean_ratio: Geomean::of(&ratios),
        threshold,
        breached,
        realised,
        device_mismatch,
    }
}

/// The fixes of a selection of an input's cells (`compare --base-select`) are those the
/// analysis of the whole input gave them: a selection leaves out cells a fix is judged by (the
/// mode-1 twin beside a mode-2 graph), and `analyze` and `compare` must give one answer.
/// A selected cell takes the remedies of the whole input's cell with the same label and match
/// key; the selection's own are dropped.
pub fn adopt_remedies(selected: &mut Analysis, whole: &Analysis) {
    let same = |w: usize| {
        let cell = &whole.cells[w];
        selected
            .cells
            .iter()
            .position(|c| c.label == cell.label && c.match_key() == cell.match_key())
    };
    selected.remedies = whole
        .remedies
        .iter()
        .filter_map(|r| {
            Some(super::remedy::Remedy {
                cell: same(r.cell)?,
                ..r.clone()
            })
        })
        .collect();
    selected.withheld_remedies = whole
        .withheld_remedies
        .iter()
        .filter_map(|w| {
            let cell = same(w.remedy.cell)?;
            let mut w = w.clone();
            w.remedy.cell = cell;
            Some(w)
        })
        .collect();
}
