//! The longest common subsequence of two sequences (of op names, say): what aligns a graph's
//! ops with an eager step's, a step with its cell's canonical sequence, or one loop body with
//! another, so that an op present on one side only leaves a gap instead of shifting every
//! later pair.
#![forbid(unsafe_code)]

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

/// LCS length of `a` and `b` over alignments that stay within `band` of the diagonal: exact
/// whenever the LCS leaves at most `band` ops of each unmatched.
pub(super) fn banded_lcs(a: &[u32], b: &[u32], band: usize) -> usize {
    let m = b.len();
    let mut prev = vec![0usize; m + 1];
    let mut cur = vec![0usize; m + 1];
    for i in 1..=a.len() {
        let lo = i.saturating_sub(band).max(1);
        let hi = (i + band).min(m);
        if lo > 1 {
            cur[lo - 1] = 0;
        }
        for j in lo..=hi {
            cur[j] = if a[i - 1] == b[j - 1] {
                prev[j - 1] + 1
            } else {
                prev[j].max(cur[j - 1])
            };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[m]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banded_lcs_is_exact_within_the_band() {
        assert_eq!(banded_lcs(&[1, 2, 3, 4], &[1, 2, 9, 3, 4], 2), 4);
        assert_eq!(banded_lcs(&[1, 2, 3], &[1, 2, 3], 2), 3);
        assert_eq!(banded_lcs(&[], &[1], 2), 0);
    }
}
