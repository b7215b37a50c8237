//! Alignment of op sequences (graphed ↔ eager, base ↔ head) and cell comparisons.
//!
//! Sequences are aligned by a longest common subsequence over op names, so an op present in one
//! regime only (a memset node, a fill kernel a framework adds before a replay) leaves a one-sided
//! entry instead of shifting every later pair.
#![forbid(unsafe_code)]

use super::stats::{Change, Geomean, Stat};
use super::{
    AlignedOp, Analysis, CauseKind, CellAnalysis, CellComparison, Comparison, Confidence,
    NotPaired, PairBasis, Pairing, Regime,
};
use std::collections::BTreeMap;

/// Above this many DP cells (n × m) the alignment falls back to a greedy linear matcher:
/// a "step" of tens of thousands of kernels (e.g. a profiler annotation around a whole
/// iteration) must not cost gigabytes.
const LCS_MAX_CELLS: usize = 4_000_000;

/// Matched index pairs (i in `a`, j in `b`) of a longest common subsequence, in order (exact
/// up to `LCS_MAX_CELLS`, greedy beyond).
pub fn lcs_pairs<T: PartialEq>(a: &[T], b: &[T]) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    if n.saturating_mul(m) > LCS_MAX_CELLS {
        return greedy_pairs(a, b);
    }
    // lengths[i][j] = LCS of a[i..], b[j..]; (n+1)(m+1) cells, steps are short.
    let width = m + 1;
    let mut lengths = vec![0u32; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lengths[i * width + j] = if a[i] == b[j] {
                lengths[(i + 1) * width + j + 1] + 1
            } else {
                lengths[(i + 1) * width + j].max(lengths[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut pairs = Vec::new();
    while i < n && j < m {
        if a[i] == b[j] {
            pairs.push((i, j));
            i += 1;
            j += 1;
        } else if lengths[(i + 1) * width + j] >= lengths[i * width + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

/// Linear-time matching for long sequences: walk both; on a mismatch, look a short window
/// ahead in each for the nearest resynchronisation and skip the unmatched ops.
fn greedy_pairs<T: PartialEq>(a: &[T], b: &[T]) -> Vec<(usize, usize)> {
    const WINDOW: usize = 32;
    let (mut i, mut j) = (0, 0);
    let mut pairs = Vec::with_capacity(a.len().min(b.len()));
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            pairs.push((i, j));
            i += 1;
            j += 1;
            continue;
        }
        // Smallest skip (di in a, dj in b) that makes the two agree again.
        let best = (1..=WINDOW)
            .flat_map(|d| (0..=d).map(move |di| (di, d - di)))
            .find(|&(di, dj)| i + di < a.len() && j + dj < b.len() && a[i + di] == b[j + dj]);
        match best {
            Some((di, dj)) => {
                i += di;
                j += dj;
            }
            None => {
                i += 1;
                j += 1;
            }
        }
    }
    pairs
}

/// Full alignment of two name sequences: every position of each appears once, matched or not.
pub fn align_names(a: &[String], b: &[String]) -> Vec<(Option<usize>, Option<usize>)> {
    let pairs = lcs_pairs(a, b);
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    for (pi, pj) in pairs.into_iter().chain(std::iter::once((a.len(), b.len()))) {
        while i < pi {
            out.push((Some(i), None));
            i += 1;
        }
        while j < pj {
            out.push((None, Some(j)));
            j += 1;
        }
        if pi < a.len() {
            out.push((Some(pi), Some(pj)));
            i = pi + 1;
            j = pj + 1;
        }
    }
    out
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
    CellComparison {
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
        within_tracer_effect: period_delta.filter(|_| untraced.is_none()).and_then(|d| {
            super::tracer_share::TracerShare::explains(
                [base.tracer_share.as_ref(), head.tracer_share.as_ref()],
                d,
            )
        }),
        untraced_period_delta: untraced.map(|(b, h)| h.median - b.median).or_else(|| {
            base.tracer_share
                .as_ref()
                .zip(head.tracer_share.as_ref())
                .map(|(b, h)| h.untraced.median - b.untraced.median)
        }),
        duration_delta_total: ops.duration_delta_total,
        one_sided_ops_total: ops.one_sided_ops_total,
        pairing: None,
        graph_difference: graph_difference(base, head),
        host_code_change: base
            .host_time
            .as_ref()
            .zip(head.host_time.as_ref())
            .and_then(|(b, h)| super::host_samples::HostCodeChange::between(b, h)),
    }
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
                // Sub-100 ns differences are below CUPTI's timestamp resolution for kernels.
                if dd.abs() > noise.max(100.0) {
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
        .filter(|(_, (_, d, _))| d.abs() >= 1.0)
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

/// Node-type count differences between two cells' graphs, e.g. "+1 EventWait (external)".
fn graph_difference(base: &CellAnalysis, head: &CellAnalysis) -> Option<String> {
    let (b, h) = (&base.observed.node_counts, &head.observed.node_counts);
    if b.is_empty() || h.is_empty() {
        return None;
    }
    let parts: Vec<String> = b
        .keys()
        .chain(h.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter_map(|k| {
            let d = *h.get(k).unwrap_or(&0) as i64 - *b.get(k).unwrap_or(&0) as i64;
            (d != 0).then(|| format!("{d:+} {k}"))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Pairs each graphed cell with the eager cell of the same workload (and graph usage mode, when
/// the eager cells were run per mode), each pair saying how it was made. A discovered graph
/// cell (launches outside step markers) has no requested workload: it pairs with the eager
/// cell of its trace whose op sequence it matches best ([`KernelMatch::pairing`]), and with none
/// when no eager cell matches well enough — then, when the trace has eager cells, a
/// [`NotPaired`] says how close the closest came.
pub fn pair_regimes(cells: &[CellAnalysis]) -> (Vec<CellComparison>, Vec<NotPaired>) {
    let mut pairs = Vec::new();
    let mut not_paired = Vec::new();
    for (hi, head) in cells.iter().enumerate() {
        if head.observed.regime != Some(Regime::Graphed) {
            continue;
        }
        if head.graph_group.is_some() {
            match best_by_kernels(cells, head) {
                Ok((bi, pairing)) => {
                    let mut pair = compare_cells(bi, hi, &cells[bi], head);
                    pair.pairing = Some(pairing);
                    pairs.push(pair);
                }
                Err(Some(note)) => not_paired.push(NotPaired { cell: hi, ..note }),
                Err(None) => {}
            }
        } else if let Some(bi) = same_workload_eager(cells, head) {
            let mut pair = compare_cells(bi, hi, &cells[bi], head);
            let key = head.workload_key_without(&["launch"]);
            pair.pairing = Some(Pairing {
                basis: PairBasis::Workload,
                confidence: Confidence::Sure,
                text: if key.is_empty() {
                    "paired by workload: both cells' requests are the same".to_owned()
                } else {
                    format!("paired by workload: the same request ({key})")
                },
            });
            pairs.push(pair);
        }
    }
    (pairs, not_paired)
}

fn same_workload_eager(cells: &[CellAnalysis], head: &CellAnalysis) -> Option<usize> {
    // An eager step has no launch pattern: pair it with every graphed pattern.
    let key = head.workload_key_without(&["launch"]);
    let candidates = cells.iter().enumerate().filter(|(_, c)| {
        c.observed.regime == Some(Regime::Eager)
            && c.graph_group.is_none()
            && c.found.is_none()
            && c.workload_key_without(&["launch"]) == key
    });
    let mut best: Option<usize> = None;
    for (ci, c) in candidates {
        let same_mode = c.requested_mode() == head.requested_mode();
        if best.is_none() || same_mode {
            best = Some(ci);
            if same_mode {
                break;
            }
        }
    }
    best
}

/// Kernels a compiler generated for one program (torch inductor's `triton_poi_fused_…`):
/// eager code runs library kernels in their place, so they cannot match by name.
fn compiler_generated(name: &str) -> bool {
    name.starts_with("triton")
}

/// How an eager cell's step and a graph's ops match by name, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelMatch {
    pub matched: usize,
    pub graph_ops: usize,
    pub eager_ops: usize,
    /// The graph's ops a library provides (all but compiler-generated ones), and how many of
    /// them matched.
    pub library_ops: usize,
    pub library_matched: usize,
    /// The eager step's ops whose names are among the graph's library kernels: as many as the
    /// graph's when both run one step of the same work.
    pub eager_library: usize,
}

impl KernelMatch {
    pub fn of(eager: &CellAnalysis, graph: &CellAnalysis) -> KernelMatch {
        let e: Vec<&str> = eager.sequence.iter().map(|x| x.name.as_str()).collect();
        let g: Vec<&str> = graph.sequence.iter().map(|x| x.name.as_str()).collect();
        let pairs = lcs_pairs(&e, &g);
        let library: std::collections::BTreeSet<&str> = g
            .iter()
            .copied()
            .filter(|n| !compiler_generated(n))
            .collect();
        KernelMatch {
            matched: pairs.len(),
            graph_ops: g.len(),
            eager_ops: e.len(),
            library_ops: g.iter().filter(|n| !compiler_generated(n)).count(),
            library_matched: pairs
                .iter()
                .filter(|&&(_, j)| !compiler_generated(g[j]))
                .count(),
            eager_library: e.iter().filter(|n| library.contains(*n)).count(),
        }
    }

    fn share(part: usize, of: usize) -> f64 {
        part as f64 / of.max(1) as f64
    }

    /// The pair this match supports, if any: sure when 80 % of both sides' ops match; likely
    /// when half the graph's do, or, for a graph of compiler-generated kernels, 80 % of its
    /// library kernels (GEMMs, attention, collectives: what a compiler keeps and calls in
    /// the same order, where it fuses the elementwise work around them into kernels of its
    /// own). Eager and graphed steps of different sizes (one holding two tokens) make it
    /// likely at best: measured in ops, or for a compiled graph in its library kernels.
    pub fn pairing(&self) -> Option<Pairing> {
        let graph_share = Self::share(self.matched, self.graph_ops);
        let eager_share = Self::share(self.matched, self.eager_ops);
        let library_share = Self::share(self.library_matched, self.library_ops);
        let compiled = self.graph_ops - self.library_ops;
        let pct = (100.0 * graph_share).round();
        let mut basis = PairBasis::KernelSequence;
        let mut text = format!(
            "paired by kernel sequence: {pct} % of the graph's {} ops match the eager step's by name, in order ({} of {}; the eager step has {})",
            self.graph_ops, self.matched, self.graph_ops, self.eager_ops
        );
        let library_pairs =
            compiled > 0 && self.library_matched >= 2 && library_share >= 0.8 && eager_share >= 0.1;
        let mut size = Self::share(self.eager_ops, self.graph_ops);
        let mut size_of = "ops";
        let confidence = if graph_share >= 0.8 && eager_share >= 0.8 {
            Confidence::Sure
        } else if library_pairs {
            basis = PairBasis::LibraryKernels;
            size = Self::share(self.eager_library, self.library_ops);
            size_of = "library kernels";
            text = format!(
                "paired by library kernels: {} of the graph's {} library kernels (GEMMs, attention, collectives) match the eager step's by name, in order, and the eager step runs {} kernels of those names; the graph's {compiled} compiler-generated kernels stand for the eager step's other {} ops",
                self.library_matched,
                self.library_ops,
                self.eager_library,
                self.eager_ops - self.eager_library
            );
            Confidence::Likely
        } else if graph_share >= 0.5 && eager_share >= 0.25 {
            Confidence::Likely
        } else {
            return None;
        };
        let confidence = if (0.67..=1.5).contains(&size) {
            confidence
        } else {
            text += &format!("; the eager step holds {size:.1}× the graph's {size_of}");
            Confidence::Likely
        };
        if confidence == Confidence::Likely {
            text += " — likely, not certain";
        }
        Some(Pairing {
            basis,
            confidence,
            text,
        })
    }
}

/// The eager cell of `head`'s trace whose op names match `head`'s best, with how the pair was
/// made; else, when the trace has eager cells, a note naming the closest (cell 0: filled in by
/// the caller).
fn best_by_kernels(
    cells: &[CellAnalysis],
    head: &CellAnalysis,
) -> Result<(usize, Pairing), Option<NotPaired>> {
    let mut best: Option<(usize, KernelMatch, Pairing)> = None;
    let mut closest: Option<(usize, KernelMatch)> = None;
    let mut ties = 0;
    for (ci, c) in cells.iter().enumerate() {
        if c.trace != head.trace || c.observed.regime != Some(Regime::Eager) {
            continue;
        }
        let m = KernelMatch::of(c, head);
        if closest.is_none_or(|(_, b)| m.matched > b.matched) {
            closest = Some((ci, m));
        }
        let Some(p) = m.pairing() else {
            continue;
        };
        let steps = |i: usize| cells[i].steps.len();
        let rank = |m: &KernelMatch, p: &Pairing| (p.confidence, m.matched);
        match &best {
            Some((bi, bm, bp)) if rank(bm, bp) > rank(&m, &p) => {}
            Some((bi, bm, bp)) if rank(bm, bp) == rank(&m, &p) => {
                ties += 1;
                if steps(ci) > steps(*bi) {
                    best = Some((ci, m, p));
                }
            }
            _ => {
                ties = 0;
                best = Some((ci, m, p));
            }
        }
    }
    match best {
        Some((ci, _, mut p)) => {
            if ties > 0 {
                p.text += &format!(
                    "; {} other eager cell(s) match as well: the one with the most steps",
                    ties
                );
            }
            Ok((ci, p))
        }
        None => Err(closest.map(|(ci, m)| NotPaired {
            cell: 0,
            closest: Some(ci),
            text: format!(
                "not paired: the closest eager cell, `{}`, shares {} of the graph's {} ops by name ({} %), too few to say it does the same work",
                cells[ci].label,
                m.matched,
                m.graph_ops,
                (100.0 * KernelMatch::share(m.matched, m.graph_ops)).round()
            ),
        })),
    }
}

/// Pairs each graphed mode-2 cell with the graphed mode-1 cell (else mode 0) of the same
/// workload and launch pattern: base = the mode without mixing, head = mode 2.
///
/// Discovered graph cells have no requested mode: there, a cell whose graph has external
/// event-wait nodes is paired with a cell of the same trace, op sequence and launch pattern
/// whose graph has none — the mode-2-like graph against the mode-1-like one.
pub fn pair_modes(cells: &[CellAnalysis]) -> Vec<CellComparison> {
    let graphed = |c: &&CellAnalysis| c.observed.regime == Some(Regime::Graphed);
    let mut pairs = Vec::new();
    for (hi, head) in cells.iter().enumerate().filter(|(_, c)| graphed(c)) {
        let base = if head.graph_group.is_some() {
            if head.observed.external_wait_nodes == 0 {
                continue;
            }
            let key = head.workload_key();
            cells.iter().enumerate().find(|(_, c)| {
                graphed(c)
                    && c.graph_group.is_some()
                    && c.trace == head.trace
                    && c.observed.external_wait_nodes == 0
                    && c.workload_key() == key
            })
        } else {
            if head.requested_mode() != Some(2) {
                continue;
            }
            let key = head.workload_key();
            [1, 0].into_iter().find_map(|mode| {
                cells.iter().enumerate().find(|(_, c)| {
                    graphed(c) && c.requested_mode() == Some(mode) && c.workload_key() == key
                })
            })
        };
        if let Some((bi, b)) = base {
            pairs.push(compare_cells(bi, hi, b, head));
        }
    }
    pairs
}

/// `--threshold`: a head/base period ratio of at least 1 (1.02: 2 % slower allowed; 1: no
/// slowdown beyond the spread). Below 1 it would say "no cell slower than 0.50×" of cells that
/// are slower: a cell breaches only when it is slower beyond the spread, so its ratio is above
/// 1 whatever the threshold below that. The error is one line naming the value.
pub fn check_threshold(threshold: f64) -> Result<(), String> {
    if threshold.is_finite() && threshold >= 1.0 {
        Ok(())
    } else {
        Err(format!(
            "--threshold {threshold:?}: expected the largest head/base period ratio allowed, at least 1 (1.02 allows 2 % slower; 1 allows no slowdown beyond the spread)"
        ))
    }
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
        let found = base.cells.iter().enumerate().position(|(bi, b)| {
            !used[bi]
                && b.observed.regime == h.observed.regime
                && b.workload_key() == h.workload_key()
        });
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
    Comparison {
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

    fn names(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn alignment_with_inserted_and_missing_kernels() {
        // Graphed adds a memset node in front and lacks the eager-only "fill".
        let eager = names("convert fill gather prep dispatch combine");
        let graphed = names("memset convert gather prep dispatch combine");
        let a = align_names(&eager, &graphed);
        assert_eq!(
            a,
            vec![
                (None, Some(0)),
                (Some(0), Some(1)),
                (Some(1), None),
                (Some(2), Some(2)),
                (Some(3), Some(3)),
                (Some(4), Some(4)),
                (Some(5), Some(5)),
            ]
        );
    }

    #[test]
    fn long_sequences_align_greedily_in_linear_time() {
        // 3000 × 3001 > the DP limit: an op inserted in the middle is still one-sided.
        let a: Vec<u32> = (0..3000).map(|i| i % 7).collect();
        let mut b = a.clone();
        b.insert(1500, 99);
        let pairs = lcs_pairs(&a, &b);
        assert_eq!(pairs.len(), 3000);
        assert!(pairs.iter().all(|&(i, j)| a[i] == b[j]));
        assert!(!pairs.iter().any(|&(_, j)| j == 1500));
    }

    #[test]
    fn lcs_of_identical_and_disjoint() {
        let a = names("a b c");
        assert_eq!(lcs_pairs(&a, &a), vec![(0, 0), (1, 1), (2, 2)]);
        assert!(lcs_pairs(&a, &names("x y")).is_empty());
        assert_eq!(align_names(&a, &[]).len(), 3);
    }
}
