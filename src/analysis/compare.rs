//! Two analyses, or two cells, compared: the period verdict (judged on the untraced periods
//! where both cells have them), what the difference is made of, and `compare`'s threshold
//! verdict. [`super::align`] finds which ops and cells correspond; this module judges them.
#![forbid(unsafe_code)]

use super::align::align_names;
use super::stats::{Change, Geomean, Stat};
use super::thresholds::{GAP_GROWTH_MIN_NS, RESOLUTION_NS};
use super::{
    AlignedOp, Analysis, CauseKind, CellAnalysis, CellComparison, Comparison, HostBoundSlowdown,
    KernelDelta, KernelDurations, NotPaired, OpKind,
};
use std::collections::BTreeMap;

/// Compares two cells of the same workload: period, aligned ops, and what the gap growth is
/// attributed to.
pub fn compare_cells(
    base_index: usize,
    head_index: usize,
    base: &CellAnalysis,
    head: &CellAnalysis,
) -> CellComparison {
    let ops = align_ops(base, head);
    let verdict = period_verdict(base, head);
    let (untraced, period_delta) = (verdict.untraced, verdict.period_delta);
    let head_causes: std::collections::BTreeSet<CauseKind> =
        head.sequence.iter().map(|e| e.gap_cause).collect();
    let causes_gone_in_head = ops
        .gap_growth_by_cause
        .iter()
        .map(|g| g.0)
        .filter(|k| !head_causes.contains(k))
        .collect();
    let (graph_difference, graphs_differ_only_by_external) = graph_difference(base, head);
    let external = ops
        .gap_growth_by_cause
        .iter()
        .filter(|g| g.0 == CauseKind::ExternalEventWait)
        .map(|g| g.2)
        .sum::<f64>();
    CellComparison {
        kernel_durations: kernel_durations(
            &ops.aligned,
            base,
            head,
            ops.max_pct,
            ops.within_spread,
        ),
        external_event_share: period_delta
            .filter(|&d| d > 0.0 && external > 0.0)
            .map(|d| external / d),
        graphs_differ_only_by_external,
        key: head.workload_key(),
        base: base_index,
        head: head_index,
        base_label: base.label.clone(),
        head_label: head.label.clone(),
        ratio: verdict.ratio,
        change: verdict.change,
        judged_untraced: untraced.is_some(),
        traced_host_bound: traced_host_bound(base) || traced_host_bound(head),
        no_verdict: verdict.no_verdict,
        aligned: ops.aligned,
        max_duration_delta_pct: ops.max_pct,
        durations_within_spread: ops.within_spread,
        period_delta,
        gap_growth_by_cause: ops.gap_growth_by_cause,
        causes_gone_in_head,
        within_tracer_effect: period_delta
            .filter(|_| untraced.is_none())
            .and_then(|d| within_tracer_effect(base, head, d)),
        untraced_period_delta: untraced
            .map(|(b, h)| h.median - b.median)
            .or_else(|| untraced_host_delta(base, head)),
        duration_delta_total: ops.duration_delta_total,
        one_sided_ops_total: ops.one_sided_ops_total,
        pairing: None,
        graph_difference,
        host_code_change: base
            .host_time
            .as_ref()
            .zip(head.host_time.as_ref())
            .and_then(|(b, h)| super::host_samples::HostCodeChange::between(b, h)),
    }
}

/// Head − base of the cells' untraced host step periods (the tracers' shares), ns.
fn untraced_host_delta(base: &CellAnalysis, head: &CellAnalysis) -> Option<f64> {
    base.tracer_share
        .as_ref()
        .zip(head.tracer_share.as_ref())
        .map(|(b, h)| h.untraced.median - b.untraced.median)
}

/// Whether the traced period difference `delta` is no more than tracing added to either
/// cell's step — unless the untraced host step periods differ beyond their spread: then the
/// difference is the program's, whatever tracing added besides, and "not a finding" would
/// contradict the untraced figure printed beside it.
fn within_tracer_effect(base: &CellAnalysis, head: &CellAnalysis, delta: f64) -> Option<bool> {
    let untraced_beyond_spread = super::remedy::Saving::between_untraced_host_periods(head, base)
        .is_some_and(|s| s.p10 > 0.0 || s.p90 < 0.0);
    if untraced_beyond_spread {
        return Some(false);
    }
    super::tracer_share::TracerShare::explains(
        [base.tracer_share.as_ref(), head.tracer_share.as_ref()],
        delta,
    )
}

/// The two cells' step sequences aligned op by op, and what their differences add up to.
struct OpAlignment {
    aligned: Vec<AlignedOp>,
    /// Gap growth by cause (at least 1 ns), largest first, each named by its largest part.
    gap_growth_by_cause: Vec<(CauseKind, String, f64)>,
    /// The largest op duration change, as a percentage of the base's.
    max_pct: Option<f64>,
    /// Whether every aligned op's duration change is within its spread.
    within_spread: bool,
    duration_delta_total: f64,
    one_sided_ops_total: f64,
}

fn align_ops(base: &CellAnalysis, head: &CellAnalysis) -> OpAlignment {
    let base_names: Vec<String> = base.sequence.iter().map(|e| e.name.clone()).collect();
    let head_names: Vec<String> = head.sequence.iter().map(|e| e.name.clone()).collect();
    let mut aligned = Vec::new();
    let mut growth: BTreeMap<CauseKind, (String, f64, f64)> = BTreeMap::new();
    let mut max_pct: Option<f64> = None;
    let mut within_spread = true;
    let (mut duration_delta_total, mut one_sided_ops_total) = (0.0, 0.0);
    let mut add_growth = |kind: CauseKind, label: &str, d: f64| {
        let e = growth.entry(kind).or_insert((String::new(), 0.0, 0.0));
        e.1 += d;
        // Name the cause by its largest contribution.
        if d.abs() > e.2 {
            e.2 = d.abs();
            e.0 = label.to_owned();
        }
    };
    for (bi, hi) in align_names(&base_names, &head_names) {
        let b = bi.map(|i| &base.sequence[i]);
        let h = hi.map(|i| &head.sequence[i]);
        let (duration_delta, gap_before_delta) = match (b, h) {
            (Some(b), Some(h)) => {
                let dd = h.duration.median - b.duration.median;
                let noise = b.duration.spread().max(h.duration.spread());
                // Differences below CUPTI's timestamp resolution for kernels are none.
                if dd.abs() > noise.max(RESOLUTION_NS) {
                    within_spread = false;
                }
                if b.duration.median > 0.0 {
                    let pct = 100.0 * dd.abs() / b.duration.median;
                    max_pct = Some(max_pct.map_or(pct, |m: f64| m.max(pct)));
                }
                let gd = h.gap_before.median - b.gap_before.median;
                duration_delta_total += dd;
                // A gap that shrank is booked under what caused it in the base (the cause a
                // fix removed); one that grew, under the head's cause.
                let by = if gd < 0.0 { b } else { h };
                add_growth(by.gap_cause, &by.gap_cause_label, gd);
                (Some(dd), Some(gd))
            }
            (None, Some(h)) => {
                add_growth(h.gap_cause, &h.gap_cause_label, h.gap_before.median);
                one_sided_ops_total += h.duration.median;
                (None, None)
            }
            (Some(b), None) => {
                one_sided_ops_total -= b.duration.median + b.gap_before.median;
                (None, None)
            }
            (None, None) => (None, None),
        };
        aligned.push(AlignedOp {
            name: h.or(b).map(|e| e.name.clone()).unwrap_or_default(),
            base: bi,
            head: hi,
            duration_delta,
            gap_before_delta,
            base_gap_cause: b.map(|e| e.gap_cause_label.clone()),
            head_gap_cause: h.map(|e| e.gap_cause_label.clone()),
        });
    }
    let mut gap_growth_by_cause: Vec<(CauseKind, String, f64)> = growth
        .into_iter()
        .filter(|(_, (_, d, _))| d.abs() >= GAP_GROWTH_MIN_NS)
        .map(|(k, (l, d, _))| (k, l, d))
        .collect();
    gap_growth_by_cause.sort_by(|a, b| b.2.abs().total_cmp(&a.2.abs()));
    OpAlignment {
        aligned,
        gap_growth_by_cause,
        max_pct,
        within_spread,
        duration_delta_total,
        one_sided_ops_total,
    }
}

/// The period verdict of head against base: on the untraced periods where both were measured
/// (tracing never flips a verdict), else on the traced ones.
struct PeriodVerdict<'c> {
    ratio: Option<f64>,
    change: Option<Change>,
    /// The untraced periods the verdict was judged on, when it was.
    untraced: Option<(&'c Stat, &'c Stat)>,
    no_verdict: Option<String>,
    /// Traced period difference (ns).
    period_delta: Option<f64>,
}

fn period_verdict<'c>(base: &'c CellAnalysis, head: &'c CellAnalysis) -> PeriodVerdict<'c> {
    // No verdict from a side of too few steps: its p10–p90 is those steps, not a spread.
    let no_verdict = match (&base.period, &head.period) {
        (Some(b), Some(h)) => super::stats::too_few_steps(b.n.min(h.n), "a verdict"),
        _ => None,
    };
    let (traced_ratio, traced_change, period_delta) = match (&base.period, &head.period) {
        (Some(b), Some(h)) if b.median > 0.0 => (
            Some(h.median / b.median),
            // Judged on run-to-run samples where there are enough steps, else on the
            // per-step spread.
            Change::from_runs(&base.period_block_medians, &head.period_block_medians)
                .or(Some(Change::between(b, h)))
                .filter(|_| no_verdict.is_none()),
            Some(h.median - b.median),
        ),
        _ => (None, None, None),
    };
    // The untraced periods, where both were measured, decide: tracing never flips a verdict.
    let untraced = match (&base.untraced_period, &head.untraced_period) {
        (Some(b), Some(h)) if b.median > 0.0 => Some((b, h)),
        _ => None,
    };
    let (ratio, change) = match untraced {
        Some((b, h)) => (
            Some(h.median / b.median),
            // Judged on the measured windows' medians where each cell has several, else on
            // the per-step spread.
            Change::from_windows(&base.untraced_window_medians, &head.untraced_window_medians)
                .or(Some(Change::between(b, h))),
        ),
        None => (traced_ratio, traced_change),
    };
    PeriodVerdict {
        ratio,
        change,
        untraced,
        no_verdict,
        period_delta,
    }
}

/// Whether tracing made a cell's traced steps host-bound: its traced period lies beyond its
/// untraced period's p90 and some of its idle time waits on the host's launches.
fn traced_host_bound(cell: &CellAnalysis) -> bool {
    let (Some(traced), Some(untraced)) = (&cell.period, &cell.untraced_period) else {
        return false;
    };
    traced.median > untraced.p90
        && cell.idle_by_cause.iter().any(|c| {
            matches!(
                c.cause,
                CauseKind::GraphLaunchHostBound | CauseKind::HostLaunchBound
            ) && c.per_step.median > 0.0
        })
}

/// Node-type count differences between two cells' graphs, e.g. "+1 EventWait (external)", and
/// whether every differing node type is an external event node.
fn graph_difference(base: &CellAnalysis, head: &CellAnalysis) -> (Option<String>, bool) {
    let (b, h) = (&base.observed.node_counts, &head.observed.node_counts);
    if b.is_empty() || h.is_empty() {
        return (None, false);
    }
    let parts: Vec<(String, i64)> = b
        .keys()
        .chain(h.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter_map(|k| {
            let d = *h.get(k).unwrap_or(&0) as i64 - *b.get(k).unwrap_or(&0) as i64;
            (d != 0).then(|| (k.to_string(), d))
        })
        .collect();
    if parts.is_empty() {
        return (None, false);
    }
    let text: Vec<String> = parts.iter().map(|(k, d)| format!("{d:+} {k}")).collect();
    let only_external = parts.iter().all(|(k, _)| k.ends_with("(external)"));
    (Some(text.join(", ")), only_external)
}

/// The kernel-duration check of `base` and `head` from their aligned ops, with the largest
/// change over all aligned ops (`max_pct`) and whether every one is within spread
/// (`within_spread`), as the op alignment found them; `None` when no kernel is aligned.
pub fn kernel_durations(
    aligned: &[AlignedOp],
    base: &CellAnalysis,
    head: &CellAnalysis,
    max_pct: Option<f64>,
    within_spread: bool,
) -> Option<KernelDurations> {
    let kernels: Vec<KernelDelta> = aligned
        .iter()
        .filter_map(|a| {
            let b = base.sequence.get(a.base?)?;
            let h = head.sequence.get(a.head?)?;
            (b.kind == OpKind::Kernel).then(|| KernelDelta {
                name: a.name.clone(),
                base: b.duration,
                head: h.duration,
                delta: a
                    .duration_delta
                    .unwrap_or(h.duration.median - b.duration.median),
            })
        })
        .collect();
    if kernels.is_empty() {
        return None;
    }
    let max_delta_pct = max_pct.map_or_else(
        || {
            kernels
                .iter()
                .filter(|k| k.base.median > 0.0)
                .map(|k| (k.delta / k.base.median * 100.0).abs())
                .fold(0.0, f64::max)
        },
        f64::abs,
    );
    let count = kernels.len();
    let mut differing = Vec::new();
    if !within_spread {
        let beyond = |k: &KernelDelta| k.delta.abs() > k.base.spread().max(k.head.spread());
        differing = if kernels.iter().any(beyond) {
            kernels.iter().filter(|k| beyond(k)).cloned().collect()
        } else {
            // The analysis judged otherwise (an op that is no kernel moved): the largest.
            kernels
        };
        differing.sort_by(|x, y| y.delta.abs().total_cmp(&x.delta.abs()));
    }
    let differing_count = differing.len();
    differing.truncate(KernelDurations::LISTED);
    Some(KernelDurations {
        aligned: count,
        max_delta_pct,
        differing,
        differing_count,
    })
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

/// Each graphed cell compared with its eager cell ([`super::align::pair_regimes`] pairs them),
/// and the graphed cells of a trace with eager cells that were not paired.
pub fn regime_pairs(cells: &[CellAnalysis]) -> (Vec<CellComparison>, Vec<NotPaired>) {
    let (pairs, not_paired) = super::align::pair_regimes(cells);
    let pairs = pairs
        .into_iter()
        .map(|(bi, hi, pairing)| {
            let mut pair = compare_cells(bi, hi, &cells[bi], &cells[hi]);
            pair.pairing = Some(pairing);
            pair
        })
        .collect();
    (pairs, not_paired)
}

/// Each graphed mode-2 cell compared with its mode-1 (else mode-0) cell
/// ([`super::align::pair_modes`] pairs them).
pub fn mode_pairs(cells: &[CellAnalysis]) -> Vec<CellComparison> {
    super::align::pair_modes(cells)
        .into_iter()
        .map(|(bi, hi)| compare_cells(bi, hi, &cells[bi], &cells[hi]))
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

/// Which periods a compared pair's difference is the program's on, best first: the untraced
/// periods it was judged on, else the untraced host step periods (the tracers' shares), else
/// the traced periods. One choice for the headline's mode-2 cost and the mode remedy's
/// saving, so that the two figures are one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairPeriods {
    Untraced,
    UntracedHost,
    Traced,
}

impl PairPeriods {
    pub fn of(pair: &CellComparison, base: &CellAnalysis, head: &CellAnalysis) -> PairPeriods {
        use super::remedy::Saving;
        if pair.judged_untraced && Saving::between_untraced_periods(head, base).is_some() {
            PairPeriods::Untraced
        } else if Saving::between_untraced_host_periods(head, base).is_some() {
            PairPeriods::UntracedHost
        } else {
            PairPeriods::Traced
        }
    }

    /// What moving from cell `from` to cell `to` saves a step, on these periods.
    pub fn saving(self, from: &CellAnalysis, to: &CellAnalysis) -> Option<super::remedy::Saving> {
        use super::remedy::Saving;
        match self {
            PairPeriods::Untraced => Saving::between_untraced_periods(from, to),
            PairPeriods::UntracedHost => Saving::between_untraced_host_periods(from, to),
            PairPeriods::Traced => Saving::between_periods(from, to),
        }
    }

    /// A cell's median period of this kind, ns.
    pub fn median(self, cell: &CellAnalysis) -> Option<f64> {
        match self {
            PairPeriods::Untraced => cell.untraced_period.map(|s| s.median),
            PairPeriods::UntracedHost => cell.tracer_share.as_ref().map(|s| s.untraced.median),
            PairPeriods::Traced => cell.period.map(|s| s.median),
        }
    }

    pub fn untraced(self) -> bool {
        self != PairPeriods::Traced
    }

    /// "untraced periods", as a remedy's basis names them.
    pub fn describe(self) -> &'static str {
        match self {
            PairPeriods::Untraced => "untraced periods",
            PairPeriods::UntracedHost => "untraced host step periods",
            PairPeriods::Traced => "periods",
        }
    }
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
    let realised = super::remedy::realised(&base, &head, &cells);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture's eager and graphed cells with untraced periods: base [10, 10.1, …] µs,
    /// head shifted by `untraced_delta`, in 6 windows each.
    fn with_untraced(untraced_delta: f64) -> (CellAnalysis, CellAnalysis) {
        let (_, a) = crate::report::fixtures::fixture();
        let (mut base, mut head) = (a.cells[0].clone(), a.cells[1].clone());
        for (cell, shift) in [(&mut base, 0.0), (&mut head, untraced_delta)] {
            let mut v: Vec<f64> = (0..30)
                .map(|i| 10_000.0 + 100.0 * (i % 5) as f64 + shift)
                .collect();
            cell.untraced_period = crate::analysis::stats::Stat::of(&mut v);
            cell.untraced_window_medians =
                (0..6).map(|w| 10_200.0 + 10.0 * w as f64 + shift).collect();
        }
        (base, head)
    }

    #[test]
    fn one_window_slowed_by_the_host_does_not_hide_a_difference_every_other_window_shows() {
        // Serial-event recording of a slow-host process (H200, call 3 round 4): mode 2's
        // windows beat mode 1's in 43 of 49 pairs, but two slow mode-1 windows put the p10 of
        // the pairwise differences below zero.
        let g1 = [30.7, 30.2, 30.8, 39.4, 33.3, 30.8, 39.1];
        let g2 = [36.9, 43.2, 62.6, 38.8, 48.0, 38.6, 40.4];
        assert_eq!(Change::from_runs(&g1, &g2), Some(Change::NoChange));
        assert_eq!(Change::from_windows(&g1, &g2), Some(Change::Slower));
        assert_eq!(Change::from_windows(&g2, &g1), Some(Change::Faster));
        assert_eq!(Change::from_windows(&g1, &g1), Some(Change::NoChange));
        assert_eq!(Change::from_windows(&g1[..3], &g2), None, "too few windows");
    }

    #[test]
    fn a_difference_beyond_the_untraced_spread_is_a_finding_whatever_the_traced_one() {
        let (base, mut head) = with_untraced(2_000.0);
        // The traced periods say the opposite, and within what tracing adds.
        head.period = base.period;
        head.period_block_medians = base.period_block_medians.clone();
        let c = compare_cells(0, 1, &base, &head);
        assert!(c.judged_untraced);
        assert_eq!(c.change, Some(Change::Slower));
        assert_eq!(c.untraced_period_delta, Some(2_000.0));
        assert_eq!(
            c.within_tracer_effect, None,
            "tracing cannot explain it away"
        );
        let ratio = c.ratio.unwrap();
        assert!((ratio - 12_200.0 / 10_200.0).abs() < 1e-9, "{ratio}");
        // Within the windows' spread: no change, even where the traced periods differ.
        let (base, mut head) = with_untraced(5.0);
        head.period.as_mut().unwrap().median *= 2.0;
        let c = compare_cells(0, 1, &base, &head);
        assert_eq!(c.change, Some(Change::NoChange));
        // Without untraced periods the traced verdict stands.
        let (_, a) = crate::report::fixtures::fixture();
        let c = compare_cells(0, 1, &a.cells[0], &a.cells[1]);
        assert!(!c.judged_untraced);
    }

    #[test]
    fn traced_steps_that_tracing_made_host_bound_are_flagged() {
        let (mut base, mut head) = with_untraced(0.0);
        base.idle_by_cause.clear();
        let untraced = head.untraced_period.unwrap();
        head.period.as_mut().unwrap().median = untraced.p90 * 1.5;
        let host_bound = |cause| crate::analysis::CauseTotal {
            cause,
            example: String::new(),
            per_step: crate::analysis::stats::Stat::of(&mut [3_000.0, 4_000.0]).unwrap(),
        };
        head.idle_by_cause = vec![host_bound(CauseKind::GraphLaunchHostBound)];
        assert!(compare_cells(0, 1, &base, &head).traced_host_bound);
        head.idle_by_cause = vec![host_bound(CauseKind::ExternalEventWait)];
        assert!(
            !compare_cells(0, 1, &base, &head).traced_host_bound,
            "slower traced, but not host-bound"
        );
        head.idle_by_cause = vec![host_bound(CauseKind::GraphLaunchHostBound)];
        head.period.as_mut().unwrap().median = untraced.median;
        assert!(
            !compare_cells(0, 1, &base, &head).traced_host_bound,
            "tracing did not slow it"
        );
    }
}
