//! The loop search: the repeating units of a sequence of op identities ([`find_loops`]).
//!
//! How: a step of a loop holds some op exactly once (an embedding lookup, the LM head's GEMM,
//! a sampling kernel). Splitting the stream at each occurrence of such an *anchor* gives steps
//! that are alike, which prefix hashes compare in O(1) each (identical) or position by position
//! (a few ops differ), so every op identity can be tried as the anchor in O(n) each. A loop
//! opens at [`MIN_RUN`] steps in a row that differ from the first by at most 5 % of its ops
//! ([`opening_tolerance`]; identical below 20 ops): a decode loop's tokens need not be
//! identical, as PyTorch picks a vectorised or an unrolled variant of an elementwise kernel by
//! the alignment of its tensors, which moves with the position. The loop then takes every step
//! that differs from its unit by a few ops ([`off_unit_tolerance`]: a bookkeeping kernel every
//! N tokens, a few foreign kernels between two) and counts it off the unit; its unit is its
//! most frequent step. Ops that fit no loop are left over, and counted.
//!
//! The anchor whose loops cover most ops wins; among anchors that cover as much (within half a
//! percent of the stream), the one with the most steps — the smallest unit that tiles the
//! loop: not a layer of the model (every last layer's step holds the LM head and fits no unit,
//! so layers cover less), and not a group of N tokens (the token's unit covers as much, with N
//! times the steps). But a loop inside the one chosen, with many times its steps and most of
//! its ops, whose steps the host pauses between, is taken instead ([`PAUSE_RATIO`]): a
//! generate() call repeated exactly is a unit that covers its prefill too, yet the token, which
//! the host waits before (sampling, the stop check), is the step; a model's layers, launched
//! back to back, are not. Loops found, their ops are taken out and the search repeats on what is
//! left, so a program's loops (prefill and decode, two batch sizes, a warm-up) each become a
//! loop. The phase: a step starts at the op of the unit before which the host waited longest
//! (in a decode loop, the sampling and bookkeeping between tokens).
//!
//! Nothing is invented: a loop needs [`MIN_STEPS`] steps, [`MIN_RUN`] of them alike in a row
//! holding [`MIN_LOOP_OPS`] ops, which chance repeats in a long stream do not reach.
#![forbid(unsafe_code)]

use crate::analysis::lcs::banded_lcs;
use rustc_hash::FxHashMap;

/// Steps a loop needs: three periods.
pub const MIN_STEPS: usize = 4;
/// Steps alike in a row that open a loop (more when they hold under [`MIN_LOOP_OPS`] ops).
const MIN_RUN: usize = 3;
/// Ops a loop needs: short repeats occur by chance in any long stream.
const MIN_LOOP_OPS: usize = 24;
/// Anchors whose loops cover this share of the stream less than the best still compete, and
/// the one with more steps wins.
const COVERAGE_SLACK: f64 = 0.005;
/// Rounds of the search (one or more loops each).
const MAX_ROUNDS: usize = 16;
/// A loop of at least this many times the steps of the one chosen, covering at least
/// [`INNER_MIN_COVERAGE`] of its ops, whose steps the host pauses between, is the inner loop
/// of the one chosen, and is taken instead: a generate() call repeated exactly is a unit too,
/// and covers its prefill besides, but the token is the step.
const INNER_MIN_STEPS_RATIO: usize = 2;
const INNER_MIN_COVERAGE: f64 = 0.8;
/// The host pauses between a loop's steps when, over its identical steps, the longest median
/// wait before an op of the unit is this many times the unit's median one and at least
/// [`PAUSE_MIN_NS`]: a decode loop's sampling and stop check between tokens, which a model's
/// layers, launched back to back, do not have.
const PAUSE_RATIO: u64 = 5;
const PAUSE_MIN_NS: u64 = 20_000;

/// Ops a step may have more or fewer than its unit and still be a step of the loop (off the
/// unit): 5 % of the unit, at least 2, at most 32.
pub(super) fn off_unit_tolerance(unit_len: usize) -> usize {
    (unit_len / 20).clamp(2, 32)
}

/// Ops in which the steps that open a loop may differ from the first of them: 5 % of the
/// unit, at most 32, and none in a unit under 20 ops (where chance makes short steps alike).
/// Tokens of a decode loop differ so: PyTorch picks a vectorised or an unrolled variant of an
/// elementwise kernel by the alignment of its tensors, which changes with the position, so no
/// two tokens in a row need be identical.
fn opening_tolerance(unit_len: usize) -> usize {
    (unit_len / 20).min(32)
}

/// A loop found in a sequence of op identities: its steps as position ranges `[start, end)`,
/// in order and disjoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopSpan {
    /// Positions of one step identical to the unit.
    pub unit: (usize, usize),
    pub steps: Vec<(usize, usize)>,
    /// Steps that are not identical to the unit.
    pub off_unit: usize,
}

impl LoopSpan {
    pub fn unit_len(&self) -> usize {
        self.unit.1 - self.unit.0
    }

    pub(super) fn start(&self) -> usize {
        self.steps[0].0
    }

    pub(super) fn end(&self) -> usize {
        self.steps[self.steps.len() - 1].1
    }

    pub(super) fn ops(&self) -> usize {
        self.steps.iter().map(|s| s.1 - s.0).sum()
    }

    fn accepted(&self) -> bool {
        self.steps.len() >= MIN_STEPS && self.ops() >= MIN_LOOP_OPS
    }
}

/// Polynomial prefix hashes of a sequence: the hash of any span in O(1).
struct SpanHashes {
    prefix: Vec<u64>,
    power: Vec<u64>,
}

const HASH_BASE: u64 = 0x100_0000_01b3_u64 | (1 << 40) | 1;

fn mix(x: u64) -> u64 {
    let mut x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl SpanHashes {
    fn new(symbols: &[u32]) -> SpanHashes {
        let mut prefix = Vec::with_capacity(symbols.len() + 1);
        let mut power = Vec::with_capacity(symbols.len() + 1);
        let (mut h, mut p) = (0u64, 1u64);
        prefix.push(h);
        power.push(p);
        for &s in symbols {
            h = h.wrapping_mul(HASH_BASE).wrapping_add(mix(u64::from(s)));
            p = p.wrapping_mul(HASH_BASE);
            prefix.push(h);
            power.push(p);
        }
        SpanHashes { prefix, power }
    }

    fn of(&self, start: usize, end: usize) -> u64 {
        self.prefix[end].wrapping_sub(self.prefix[start].wrapping_mul(self.power[end - start]))
    }
}

/// The search's state: the sequence, and which positions no loop has taken yet, as segments
/// (a step never spans a taken position).
struct Search<'a> {
    symbols: &'a [u32],
    gap_before: &'a [u64],
    prefer: &'a dyn Fn(&[u32]) -> Option<usize>,
    hashes: SpanHashes,
    /// Segment id per position; `u32::MAX` once a loop took it.
    segment: Vec<u32>,
    /// Where each segment ends (exclusive), by id.
    segment_ends: Vec<usize>,
}

impl Search<'_> {
    fn same(&self, a: (usize, usize), b: (usize, usize)) -> bool {
        a.1 - a.0 == b.1 - b.0
            && self.hashes.of(a.0, a.1) == self.hashes.of(b.0, b.1)
            && self.symbols[a.0..a.1] == self.symbols[b.0..b.1]
    }

    /// Whether `step` differs from `unit` by at most `tol` ops: `tol` substitutions when the
    /// two are as long (counted position by position), else a banded LCS.
    fn near_within(&self, step: (usize, usize), unit: (usize, usize), tol: usize) -> bool {
        let a = &self.symbols[step.0..step.1];
        let b = &self.symbols[unit.0..unit.1];
        if a.len().abs_diff(b.len()) > tol {
            return false;
        }
        if self.same(step, unit) {
            return true;
        }
        if tol == 0 {
            return false;
        }
        if a.len() == b.len() {
            let mut differing = 0;
            for (x, y) in a.iter().zip(b) {
                differing += usize::from(x != y);
                if differing > tol {
                    break;
                }
            }
            if differing <= tol {
                return true;
            }
        }
        banded_lcs(a, b, tol) + tol >= a.len().max(b.len())
    }

    /// Whether `step` is a step of the loop of `unit`: within [`off_unit_tolerance`].
    fn near(&self, step: (usize, usize), unit: (usize, usize)) -> bool {
        self.near_within(step, unit, off_unit_tolerance(unit.1 - unit.0))
    }

    /// Whether the steps from `steps[0]` open a loop: [`MIN_RUN`] in a row, and at least
    /// [`MIN_LOOP_OPS`] ops of them (short steps repeat by chance), each within
    /// [`opening_tolerance`] of the first.
    fn opens(&self, steps: &[(usize, usize)]) -> bool {
        let Some(&first) = steps.first() else {
            return false;
        };
        let len = first.1 - first.0;
        let needed = MIN_RUN.max(MIN_LOOP_OPS.div_ceil(len.max(1)));
        let tol = opening_tolerance(len);
        steps.len() >= needed
            && steps[1..needed]
                .iter()
                .all(|&s| self.near_within(s, first, tol))
    }

    /// Occurrences of `anchor` at positions no loop took, grouped by segment.
    fn occurrences(&self, positions: &[u32], lo: usize, hi: usize) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut last_segment = u32::MAX;
        for &p in positions {
            let p = p as usize;
            if p < lo || p >= hi || self.segment[p] == u32::MAX {
                continue;
            }
            if self.segment[p] != last_segment || groups.is_empty() {
                groups.push(Vec::new());
                last_segment = self.segment[p];
            }
            groups.last_mut().expect("pushed").push(p);
        }
        groups
    }

    /// Where the segment of position `p` ends (exclusive), not past `hi`.
    fn segment_end(&self, p: usize, hi: usize) -> usize {
        self.segment_ends[self.segment[p] as usize].min(hi)
    }

    /// The loops of the stream split at the occurrences in `groups` (one list per segment),
    /// each step ending at the next occurrence or, for the last, where its segment (or `hi`)
    /// ends. A loop opens at [`MIN_RUN`] steps in a row that are alike (see [`Self::opens`])
    /// and takes every next step near its unit; its unit is then its most frequent step.
    fn loops_at(&self, groups: &[Vec<usize>], hi: usize) -> Vec<LoopSpan> {
        let mut loops = Vec::new();
        for occ in groups {
            let end = self.segment_end(*occ.last().expect("non-empty"), hi);
            let steps: Vec<(usize, usize)> = (0..occ.len())
                .map(|k| (occ[k], occ.get(k + 1).copied().unwrap_or(end)))
                .collect();
            let mut open: Option<LoopSpan> = None;
            let mut k = 0;
            while k < steps.len() {
                let step = steps[k];
                if let Some(cur) = open.as_mut() {
                    if self.near(step, cur.unit) {
                        cur.steps.push(step);
                        k += 1;
                        continue;
                    }
                    // The loop's last step runs on into other work: the unit, then the rest.
                    let len = cur.unit_len();
                    let head = (step.0, step.0 + len);
                    let ends_here = step.1 - step.0 > len
                        && self.near_within(head, cur.unit, opening_tolerance(len));
                    if ends_here {
                        cur.steps.push(head);
                    }
                    let done = self.settled(open.take().expect("open"));
                    if done.accepted() {
                        loops.push(done);
                    }
                    if ends_here {
                        k += 1;
                        continue;
                    }
                }
                if self.opens(&steps[k..]) {
                    open = Some(LoopSpan {
                        unit: step,
                        steps: Vec::new(),
                        off_unit: 0,
                    });
                } else {
                    k += 1;
                }
            }
            if let Some(done) = open.take().map(|l| self.settled(l))
                && done.accepted()
            {
                loops.push(done);
            }
        }
        loops
    }

    /// The loop with its most frequent step as the unit (of equally frequent ones, the
    /// first), and its steps that differ from it counted off the unit.
    fn settled(&self, mut l: LoopSpan) -> LoopSpan {
        let mut count: FxHashMap<(u64, usize), (usize, usize)> = FxHashMap::default();
        for (i, &(s, e)) in l.steps.iter().enumerate() {
            count
                .entry((self.hashes.of(s, e), e - s))
                .or_insert((0, i))
                .0 += 1;
        }
        if let Some(&(_, first)) = count
            .values()
            .max_by_key(|&&(n, first)| (n, std::cmp::Reverse(first)))
        {
            l.unit = l.steps[first];
        }
        l.off_unit = l.steps.iter().filter(|s| !self.same(**s, l.unit)).count();
        l
    }

    /// The anchor of the loop inside `best` (see [`INNER_MIN_STEPS_RATIO`]) with the most steps
    /// whose steps the host pauses between, else `best`'s. `scored`: (ops covered, steps,
    /// anchor) of every anchor; anchors with the same figures find the same loops, phased
    /// differently, so one of each is looked at.
    fn innermost_paused(
        &self,
        scored: &[(usize, usize, usize)],
        best: (usize, usize, usize),
        positions: &[Vec<u32>],
    ) -> usize {
        let mut inner: Vec<(usize, usize, usize)> = scored
            .iter()
            .copied()
            .filter(|s| {
                s.1 >= INNER_MIN_STEPS_RATIO * best.1
                    && s.0 as f64 >= INNER_MIN_COVERAGE * best.0 as f64
            })
            .collect();
        inner.sort_by_key(|s| (std::cmp::Reverse(s.1), std::cmp::Reverse(s.0), s.2));
        inner.dedup_by_key(|s| (s.0, s.1));
        let n = self.symbols.len();
        inner
            .into_iter()
            .find(|s| {
                let loops = self.loops_at(&self.occurrences(&positions[s.2], 0, n), n);
                loops
                    .iter()
                    .max_by_key(|l| l.ops())
                    .is_some_and(|l| self.paused_between_steps(l))
            })
            .map_or(best.2, |s| s.2)
    }

    /// Where the loop's steps identical to its unit start.
    fn identical_step_starts(&self, l: &LoopSpan) -> Vec<usize> {
        l.steps
            .iter()
            .filter(|s| self.same(**s, l.unit))
            .map(|s| s.0)
            .collect()
    }

    /// Whether the host pauses between the loop's steps: see [`PAUSE_RATIO`].
    fn paused_between_steps(&self, l: &LoopSpan) -> bool {
        let starts = self.identical_step_starts(l);
        if starts.len() < MIN_RUN {
            return false;
        }
        let median = |mut v: Vec<u64>| {
            let mid = v.len() / 2;
            *v.select_nth_unstable(mid).1
        };
        let by_offset: Vec<u64> = (0..l.unit_len())
            .map(|k| median(starts.iter().map(|&s| self.gap_before[s + k]).collect()))
            .collect();
        let peak = by_offset.iter().copied().max().unwrap_or(0);
        let typical = median(by_offset);
        peak >= PAUSE_MIN_NS && peak >= PAUSE_RATIO * typical.max(1)
    }

    /// Moves the loop's step boundaries to offset `k` of the unit: the offset `prefer` names,
    /// else the op before which the host waited longest (median over the identical steps).
    /// A step's new boundary is its op that the unit's op `k` is (the same occurrence of the
    /// same op, so a step with an op more or fewer keeps it); before the first boundary and
    /// after the last, a rotated unit's worth of ops within `lo..hi` makes a step if it is one.
    fn phased(&self, l: LoopSpan, lo: usize, hi: usize) -> LoopSpan {
        let (u0, len) = (l.unit.0, l.unit_len());
        let unit = &self.symbols[u0..u0 + len];
        let identical = self.identical_step_starts(&l);
        if identical.is_empty() || len < 2 {
            return l;
        }
        let median_gap = |k: usize| {
            let mut g: Vec<u64> = identical.iter().map(|&s| self.gap_before[s + k]).collect();
            let mid = g.len() / 2;
            *g.select_nth_unstable(mid).1
        };
        let k = match (self.prefer)(unit).filter(|&k| k < len) {
            Some(k) => k,
            None => {
                let mut best = (median_gap(0), 0);
                for k in 1..len {
                    let g = median_gap(k);
                    if g > best.0 {
                        best = (g, k);
                    }
                }
                best.1
            }
        };
        if k == 0 {
            return l;
        }
        // The op at offset k is the j-th occurrence of its symbol in the unit.
        let symbol = unit[k];
        let nth = unit[..k].iter().filter(|&&x| x == symbol).count();
        let boundary = |(s, e): (usize, usize)| {
            if self.hashes.of(s, s + k.min(e - s)) == self.hashes.of(u0, u0 + k) && s + k < e {
                return s + k;
            }
            (s..e)
                .filter(|&p| self.symbols[p] == symbol)
                .nth(nth)
                .unwrap_or((s + k).min(e))
        };
        let mut bounds: Vec<usize> = l.steps.iter().map(|&st| boundary(st)).collect();
        let rotated: Vec<u32> = unit[k..].iter().chain(&unit[..k]).copied().collect();
        let is_rotated_unit =
            |a: usize| a >= lo && a + len <= hi && self.symbols[a..a + len] == rotated[..];
        let first = bounds[0];
        let before = first.checked_sub(len).filter(|&a| is_rotated_unit(a));
        let last = *bounds.last().expect("steps");
        let mut end = last;
        if is_rotated_unit(last) {
            end = last + len;
        }
        if let Some(a) = before {
            bounds.insert(0, a);
        }
        bounds.push(end);
        bounds.dedup();
        let steps: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
        let Some(&unit) = steps
            .iter()
            .find(|s| s.1 - s.0 == len && self.symbols[s.0..s.1] == rotated[..])
        else {
            return l;
        };
        if steps.len() + 1 < l.steps.len() {
            return l;
        }
        let off_unit = steps.iter().filter(|s| !self.same(**s, unit)).count();
        LoopSpan {
            unit,
            steps,
            off_unit,
        }
    }
}

/// The loops of a sequence of op identities, in order. The phase: the offset in a unit that
/// `prefer` gives (the start of a graph that does the same work), else where the host waited
/// longest: `gap_before[p]` is how long the host (or, without launch records, the device)
/// waited before position `p`.
pub fn find_loops(
    symbols: &[u32],
    gap_before: &[u64],
    prefer: &dyn Fn(&[u32]) -> Option<usize>,
) -> Vec<LoopSpan> {
    assert_eq!(symbols.len(), gap_before.len());
    let n = symbols.len();
    if n < MIN_LOOP_OPS {
        return Vec::new();
    }
    let mut search = Search {
        symbols,
        gap_before,
        prefer,
        hashes: SpanHashes::new(symbols),
        segment: vec![0; n],
        segment_ends: vec![n],
    };
    let alphabet = symbols.iter().max().map_or(0, |&m| m as usize + 1);
    let mut found: Vec<LoopSpan> = Vec::new();
    for _ in 0..MAX_ROUNDS {
        // Positions of each symbol not taken yet.
        let mut positions: Vec<Vec<u32>> = vec![Vec::new(); alphabet];
        for (p, &s) in symbols.iter().enumerate() {
            if search.segment[p] != u32::MAX {
                positions[s as usize].push(p as u32);
            }
        }
        let free = positions.iter().map(Vec::len).sum::<usize>();
        // Every anchor's loops; of the anchors whose loops cover as much as the best (within
        // the slack), the one with the most steps.
        let mut scored: Vec<(usize, usize, usize)> = Vec::new();
        for (anchor, pos) in positions.iter().enumerate() {
            if pos.len() <= MIN_RUN {
                continue;
            }
            let loops = search.loops_at(&search.occurrences(pos, 0, n), n);
            let covered: usize = loops.iter().map(LoopSpan::ops).sum();
            let steps: usize = loops.iter().map(|l| l.steps.len()).sum();
            if covered > 0 {
                scored.push((covered, steps, anchor));
            }
        }
        let Some(top) = scored.iter().map(|s| s.0).max() else {
            break;
        };
        let slack = (COVERAGE_SLACK * free as f64) as usize;
        let Some(&best) = scored
            .iter()
            .filter(|s| s.0 + slack >= top)
            .max_by_key(|s| (s.1, s.0, std::cmp::Reverse(s.2)))
        else {
            break;
        };
        let anchor = search.innermost_paused(&scored, best, &positions);
        let loops = search.loops_at(&search.occurrences(&positions[anchor], 0, n), n);
        // Phase each loop within its neighbours' bounds, then take its positions.
        let mut bounds_lo = 0;
        for i in 0..loops.len() {
            let l = &loops[i];
            let seg = search.segment[l.start()];
            let mut lo = l.start().saturating_sub(l.unit_len()).max(bounds_lo);
            while lo < l.start() && search.segment[lo] != seg {
                lo += 1;
            }
            let next = loops.get(i + 1).map_or(n, LoopSpan::start);
            let hi = (l.end() + l.unit_len()).min(next).min(n);
            let hi = search.segment_end(l.start(), hi);
            let l = search.phased(l.clone(), lo, hi);
            bounds_lo = l.end();
            for p in l.start()..l.end() {
                search.segment[p] = u32::MAX;
            }
            found.push(l);
        }
        // Renumber the segments left.
        search.segment_ends.clear();
        let mut in_segment = false;
        for p in 0..n {
            if search.segment[p] == u32::MAX {
                if in_segment {
                    search.segment_ends.push(p);
                }
                in_segment = false;
            } else {
                search.segment[p] = search.segment_ends.len() as u32;
                in_segment = true;
            }
        }
        if in_segment {
            search.segment_ends.push(n);
        }
    }
    found.sort_by_key(LoopSpan::start);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream from a pattern of letters, one op per letter; no host gaps.
    fn stream(s: &str) -> Vec<u32> {
        s.bytes().map(u32::from).collect()
    }

    fn loops(symbols: &[u32]) -> Vec<LoopSpan> {
        find_loops(symbols, &vec![0; symbols.len()], &|_| None)
    }

    fn lengths(l: &LoopSpan) -> Vec<usize> {
        l.steps.iter().map(|s| s.1 - s.0).collect()
    }
    /// Calls of generate(): a prefill of `prefill` ops, then `tokens` tokens of `token` ops
    /// (their layers repeat inside), `calls` times exactly; the host waits `pause` ns before
    /// each token's first op (sampling, the stop check) and 5 µs before any other op.
    fn generate_calls(calls: usize, tokens: usize, pause: u64) -> (Vec<u32>, Vec<u64>, usize) {
        let prefill: Vec<u32> = (100..140).collect();
        // Embedding, 4 layers of 8 ops, LM head and sampling: 36 ops.
        let token: Vec<u32> = std::iter::once(1)
            .chain((0..4).flat_map(|_| 10..18))
            .chain([2, 3, 4])
            .collect();
        let (mut symbols, mut gaps) = (Vec::new(), Vec::new());
        for _ in 0..calls {
            symbols.extend(&prefill);
            gaps.extend(std::iter::repeat_n(5_000, prefill.len()));
            for _ in 0..tokens {
                symbols.extend(&token);
                gaps.push(pause);
                gaps.extend(std::iter::repeat_n(5_000, token.len() - 1));
            }
        }
        (symbols, gaps, token.len())
    }

    #[test]
    fn the_step_of_repeated_generate_calls_is_the_token_the_host_pauses_before() {
        let (symbols, gaps, token) = generate_calls(6, 16, 600_000);
        let found = find_loops(&symbols, &gaps, &|_| None);
        assert!(!found.is_empty());
        assert!(
            found.iter().all(|l| l.unit_len() == token),
            "units {:?}, the token has {token} ops",
            found.iter().map(LoopSpan::unit_len).collect::<Vec<_>>()
        );
        assert!(found.iter().map(|l| l.steps.len()).sum::<usize>() >= 6 * 15);
        // Without the pause nothing marks the token as the step: the whole call, repeated
        // exactly and covering its prefill too, stays the unit.
        let (symbols, gaps, token) = generate_calls(6, 16, 5_000);
        let found = find_loops(&symbols, &gaps, &|_| None);
        assert!(found.iter().all(|l| l.unit_len() > token));
    }

    #[test]
    fn a_repeated_unit_is_found_with_every_step() {
        let s = stream(&"abcdefgh".repeat(20));
        let found = loops(&s);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].unit_len(), 8);
        assert_eq!(found[0].steps.len(), 20);
        assert_eq!(found[0].off_unit, 0);
        assert_eq!(found[0].ops(), s.len());
    }

    #[test]
    fn a_bookkeeping_op_every_n_steps_stays_with_its_step_and_is_counted() {
        // 40 steps of 10 ops; every 8th step ends with an extra "z".
        let mut text = String::new();
        for i in 0..40 {
            text += "abcdefghij";
            if i % 8 == 7 {
                text += "z";
            }
        }
        let s = stream(&text);
        let found = loops(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        let l = &found[0];
        assert_eq!(l.unit_len(), 10, "the token's unit, not 8 tokens of 81 ops");
        assert_eq!(l.steps.len(), 40);
        assert_eq!(l.off_unit, 5);
        assert_eq!(l.ops(), s.len(), "no op dropped");
        assert_eq!(lengths(l).iter().filter(|&&n| n == 11).count(), 5);
    }

    #[test]
    fn a_model_layer_is_not_the_step_when_the_token_holds_more() {
        // A token: an embedding, 6 identical layers of 4 ops, a head of 3 ops; 12 tokens.
        let token = format!("e{}nhs", "qkvo".repeat(6));
        let s = stream(&token.repeat(12));
        let found = loops(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].unit_len(), token.len());
        assert_eq!(found[0].steps.len(), 12);
    }

    #[test]
    fn tokens_of_which_no_two_in_a_row_are_identical_are_one_loop() {
        // Tokens of 40 ops whose second op comes in three variants, in a pattern of 4
        // tokens (B A C A): no 3 identical in a row, every token within 2 ops of another.
        let mut s: Vec<u32> = Vec::new();
        for t in 0..32 {
            s.push(1000);
            s.push([2000, 2001, 2000, 2002][t % 4]);
            s.extend(0..38);
        }
        let found = loops(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        let l = &found[0];
        assert_eq!((l.unit_len(), l.steps.len(), l.ops()), (40, 32, s.len()));
        assert_eq!(
            s[l.unit.0 + 1],
            2000,
            "the most frequent variant is the unit"
        );
        assert_eq!(l.off_unit, 16);
    }

    #[test]
    fn steps_that_differ_open_no_loop_when_short() {
        // Units under 20 ops open only on identical steps: 12-op steps, every one differing
        // from the one before in its last op, are no loop.
        let mut s: Vec<u32> = Vec::new();
        for t in 0..100u32 {
            s.extend(0..11);
            s.push(100 + t);
        }
        assert!(loops(&s).is_empty());
    }

    #[test]
    fn two_loops_one_after_another_are_two_loops() {
        let text = "abcdef".repeat(30) + &"uvwxyz0123".repeat(20);
        let found = loops(&stream(&text));
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].unit_len(), found[0].steps.len()), (6, 30));
        assert_eq!((found[1].unit_len(), found[1].steps.len()), (10, 20));
    }

    #[test]
    fn a_stream_without_repetition_has_no_loop() {
        // Pseudo-random ops from an alphabet of 4 and of 300: chance repeats make no loop.
        for alphabet in [4u64, 300] {
            let mut x = 7u64;
            let s: Vec<u32> = (0..50_000)
                .map(|_| {
                    x = mix(x);
                    (x % alphabet) as u32
                })
                .collect();
            assert!(loops(&s).is_empty(), "alphabet {alphabet}");
        }
        assert!(loops(&stream("abc")).is_empty());
        assert!(loops(&[]).is_empty());
    }

    #[test]
    fn the_phase_is_where_the_host_waits_longest() {
        let s = stream(&"abcdef".repeat(10));
        // The host waits before every "d" (index 3 of the unit).
        let gaps: Vec<u64> = s
            .iter()
            .map(|&c| if c == u32::from(b'd') { 50 } else { 1 })
            .collect();
        let found = find_loops(&s, &gaps, &|_| None);
        assert_eq!(found.len(), 1);
        let l = &found[0];
        assert!(l.steps.iter().all(|st| s[st.0] == u32::from(b'd')), "{l:?}");
        // The first "abc" is before the first step; 9 whole steps, the last ends the stream.
        assert_eq!(l.steps.len(), 9);
        assert_eq!(l.start(), 3);
    }
}
