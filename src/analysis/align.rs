//! Alignment of op sequences (graphed ↔ eager, base ↔ head) and cell comparisons.
//!
//! Sequences are aligned by a longest common subsequence over op names, so an op present in one
//! regime only (a memset node, a fill kernel a framework adds before a replay) leaves a one-sided
//! entry instead of shifting every later pair.
#![forbid(unsafe_code)]

use super::stats::{Change, Geomean};
use super::{AlignedOp, Analysis, CauseKind, CellAnalysis, CellComparison, Comparison, Regime};
use crate::trace::Trace;
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
    let (ratio, change, period_delta) = match (&base.period, &head.period) {
        (Some(b), Some(h)) if b.median > 0.0 => (
            Some(h.median / b.median),
            // Judged on run-to-run samples where there are enough steps, else on the
            // per-step spread.
            Change::from_runs(&base.period_block_medians, &head.period_block_medians)
                .or(Some(Change::between(b, h))),
            Some(h.median - b.median),
        ),
        _ => (None, None, None),
    };
    let mut gap_growth_by_cause: Vec<(CauseKind, String, f64)> = growth
        .into_iter()
        .filter(|(_, (_, d, _))| d.abs() >= 1.0)
        .map(|(k, (l, d, _))| (k, l, d))
        .collect();
    gap_growth_by_cause.sort_by(|a, b| b.2.abs().total_cmp(&a.2.abs()));
    let head_causes: std::collections::BTreeSet<CauseKind> =
        head.sequence.iter().map(|e| e.gap_cause).collect();
    let causes_gone_in_head = gap_growth_by_cause
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
        ratio,
        change,
        aligned,
        max_duration_delta_pct: max_pct,
        durations_within_spread: within_spread,
        period_delta,
        gap_growth_by_cause,
        causes_gone_in_head,
        duration_delta_total,
        one_sided_ops_total,
        graph_difference: graph_difference(base, head),
    }
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
/// the eager cells were run per mode). A discovered graph cell (launches outside step markers)
/// has no requested workload: it pairs with the eager cell of its trace whose op sequence it
/// aligns with best.
pub fn pair_regimes(
    cells: &[CellAnalysis],
    _traces: &[Trace],
    _timelines: &[super::TraceTimeline],
) -> Vec<CellComparison> {
    let mut pairs = Vec::new();
    for (hi, head) in cells.iter().enumerate() {
        if head.observed.regime != Some(Regime::Graphed) {
            continue;
        }
        let best = if head.graph_group.is_some() {
            best_aligned_eager(cells, head)
        } else {
            same_workload_eager(cells, head)
        };
        if let Some(bi) = best {
            pairs.push(compare_cells(bi, hi, &cells[bi], head));
        }
    }
    pairs
}

fn same_workload_eager(cells: &[CellAnalysis], head: &CellAnalysis) -> Option<usize> {
    // An eager step has no launch pattern: pair it with every graphed pattern.
    let key = head.workload_key_without(&["launch"]);
    let candidates = cells.iter().enumerate().filter(|(_, c)| {
        c.observed.regime == Some(Regime::Eager)
            && c.graph_group.is_none()
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

/// The eager cell of `head`'s trace whose op names align with most of `head`'s (at least
/// half of them), first on ties.
fn best_aligned_eager(cells: &[CellAnalysis], head: &CellAnalysis) -> Option<usize> {
    let names =
        |c: &CellAnalysis| -> Vec<String> { c.sequence.iter().map(|e| e.name.clone()).collect() };
    let head_names = names(head);
    let mut best: Option<(usize, usize)> = None;
    for (ci, c) in cells.iter().enumerate() {
        if c.trace != head.trace || c.observed.regime != Some(Regime::Eager) {
            continue;
        }
        let matched = lcs_pairs(&names(c), &head_names).len();
        if 2 * matched >= head_names.len().max(1) && best.is_none_or(|(_, m)| matched > m) {
            best = Some((ci, matched));
        }
    }
    best.map(|(ci, _)| ci)
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

/// `compare BASE HEAD`: matches cells by workload and observed regime, and checks the head
/// against `threshold` (a ratio, e.g. 1.02): a cell breaches it when its period ratio exceeds
/// it and the difference is larger than the run-to-run spread.
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
    Comparison {
        base,
        head,
        cells,
        unmatched,
        geomean_ratio: Geomean::of(&ratios),
        threshold,
        breached,
        realised,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
