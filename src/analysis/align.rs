//! Alignment of op sequences (graphed ↔ eager, base ↔ head) and the pairing of cells: which
//! eager cell a graphed one is compared with, and which graph usage modes. The comparisons
//! themselves are [`super::cell_comparison`]'s.
//!
//! Sequences are aligned by a longest common subsequence over op names (`lcs.rs`), so an op
//! present in one regime only (a memset node, a fill kernel a framework adds before a replay)
//! leaves a one-sided entry instead of shifting every later pair.
#![forbid(unsafe_code)]

use super::cell::CellAnalysis;
use super::lcs::lcs_pairs;
use super::model::{Confidence, Regime};
use serde::Serialize;

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

/// What an eager ↔ graphed pair rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairBasis {
    /// The two cells' requests name the same workload (`gapscope run`, marked cells).
    Workload,
    /// The graph's op names and the eager step's, aligned (no shared marker).
    KernelSequence,
    /// The library kernels of a compiled graph (all but the compiler's own) and the eager
    /// step's kernels of those names, aligned (no shared marker).
    LibraryKernels,
}

/// How an eager ↔ graphed pair was made, said wherever the pair is shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pairing {
    pub basis: PairBasis,
    pub confidence: Confidence,
    /// e.g. "paired by kernel sequence: 87 % of the graph's 7 ops match the eager step's by
    /// name, in order (6 of 7; the eager step has 7)".
    pub text: String,
}

/// A graphed cell with no eager partner, and why, when an eager cell was there to pair with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotPaired {
    pub cell: usize,
    pub closest: Option<usize>,
    pub text: String,
}

/// Pairs each graphed cell with the eager cell of the same workload (and graph usage mode, when
/// the eager cells were run per mode), each pair saying how it was made. A discovered graph
/// cell (launches outside step markers) has no requested workload: it pairs with the eager
/// cell of its trace whose op sequence it matches best ([`KernelMatch::pairing`]), and with none
/// when no eager cell matches well enough — then, when the trace has eager cells, a
/// [`NotPaired`] says how close the closest came. Each pair is (eager cell, graphed cell, how).
pub fn pair_regimes(cells: &[CellAnalysis]) -> (Vec<(usize, usize, Pairing)>, Vec<NotPaired>) {
    let mut pairs = Vec::new();
    let mut not_paired = Vec::new();
    for (hi, head) in cells.iter().enumerate() {
        if head.observed.regime != Some(Regime::Graphed) {
            continue;
        }
        if head.graph_group.is_some() {
            match best_by_kernels(cells, head) {
                Ok((bi, pairing)) => pairs.push((bi, hi, pairing)),
                Err(Some(note)) => not_paired.push(NotPaired { cell: hi, ..note }),
                Err(None) => {}
            }
        } else if let Some(bi) = same_workload_eager(cells, head) {
            let key = head.workload_key_without(&["launch"]);
            let pairing = Pairing {
                basis: PairBasis::Workload,
                confidence: Confidence::Sure,
                text: if key.is_empty() {
                    "paired by workload: both cells' requests are the same".to_owned()
                } else {
                    format!("paired by workload: the same request ({key})")
                },
            };
            pairs.push((bi, hi, pairing));
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
/// whose graph has none — the mode-2-like graph against the mode-1-like one. Each pair is
/// (base cell, head cell).
pub fn pair_modes(cells: &[CellAnalysis]) -> Vec<(usize, usize)> {
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
        if let Some((bi, _)) = base {
            pairs.push((bi, hi));
        }
    }
    pairs
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
