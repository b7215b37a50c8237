//! Two cells of the same workload compared (eager ↔ graphed, mode 1 ↔ mode 2, base ↔ head): the
//! period verdict, the ops aligned, and what the period change is made of. [`super::align`] pairs
//! the cells; [`super::compare`] compares two whole analyses with these.
#![forbid(unsafe_code)]

use super::align::{NotPaired, Pairing, align_names};
use super::cell::CellAnalysis;
use super::model::{CauseKind, OpKind};
use super::stats::{Change, Stat};
use super::thresholds::{GAP_GROWTH_MIN_NS, RESOLUTION_NS};
use serde::Serialize;
use std::collections::BTreeMap;

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

/// An analysis's cells with their pairs, borrowed: what the stages after pairing read (the
/// remedies, the headline).
#[derive(Debug, Clone, Copy)]
pub struct Paired<'a> {
    pub cells: &'a [CellAnalysis],
    /// Eager vs graphed of the same workload ([`regime_pairs`]).
    pub regime_pairs: &'a [CellComparison],
    /// Graph usage mode 1 (or 0) vs mode 2 of the same workload ([`mode_pairs`]).
    pub mode_pairs: &'a [CellComparison],
}

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
    let untraced_beyond_spread = super::saving::Saving::between_untraced_host_periods(head, base)
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
        use super::saving::Saving;
        if pair.judged_untraced && Saving::between_untraced_periods(head, base).is_some() {
            PairPeriods::Untraced
        } else if Saving::between_untraced_host_periods(head, base).is_some() {
            PairPeriods::UntracedHost
        } else {
            PairPeriods::Traced
        }
    }

    /// What moving from cell `from` to cell `to` saves a step, on these periods.
    pub fn saving(self, from: &CellAnalysis, to: &CellAnalysis) -> Option<super::saving::Saving> {
        use super::saving::Saving;
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
