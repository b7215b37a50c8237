//! Steps found in the kernel stream itself, for programs that mark none: a model library's
//! `generate()`, a serving engine's loop, a benchmark script. A decode step launches the same
//! sequence of device ops again and again, so the eager ops (graph replays make graph cells of
//! their own) are read as a sequence of identities — name, kind, stream; the trace holds no
//! grid or block — in launch order, and its repeating units are looked for.
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
//! Then runs of one unit that a short interruption splits ([`JOIN_UNITS`]: a generate() call's
//! prefill between two calls) and that run at the same period are one loop, one cell; the
//! step after each interruption has no period. A loop of fewer ops in all than one step of
//! another (a prefill's layers, inside that interruption or beside it) is the inner structure
//! of one pass, not a loop of the program: its ops are left over. So are loops of a one-op unit
//! beside loops of longer units or graph replays (a burst of one kernel: autotuning's fills),
//! and loops that time one kernel after an L2 flush ([`is_benchmark_unit`]: torch.compile's
//! autotuning, between a program's eager and compiled phases).
//!
//! Nothing is invented: a loop needs [`MIN_STEPS`] steps, [`MIN_RUN`] of them alike in a row
//! holding [`MIN_LOOP_OPS`] ops, which chance repeats in a long stream do not reach.
#![forbid(unsafe_code)]

use super::model::{Op, TraceTimeline};
use super::stats::{Change, Stat};
use super::timeline::LaunchIndex;
use crate::trace::{MarkerKind, Trace, step_range_rule};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Steps a loop needs: three periods.
pub const MIN_STEPS: usize = 4;
/// Steps alike in a row that open a loop (more when they hold under [`MIN_LOOP_OPS`] ops).
pub const MIN_RUN: usize = 3;
/// Ops a loop needs: short repeats occur by chance in any long stream.
pub const MIN_LOOP_OPS: usize = 24;
/// Anchors whose loops cover this share of the stream less than the best still compete, and
/// the one with more steps wins.
const COVERAGE_SLACK: f64 = 0.005;
/// Rounds of the search (one or more loops each).
const MAX_ROUNDS: usize = 16;
/// A loop of at least this many times the steps of the one chosen, covering at least
/// [`INNER_MIN_COVERAGE`] of its ops, whose steps the host pauses between, is the inner loop
/// of the one chosen, and is taken instead: a generate() call repeated exactly is a unit too,
/// and covers its prefill besides, but the token is the step.
pub const INNER_MIN_STEPS_RATIO: usize = 2;
pub const INNER_MIN_COVERAGE: f64 = 0.8;
/// The host pauses between a loop's steps when, over its identical steps, the longest median
/// wait before an op of the unit is this many times the unit's median one and at least
/// [`PAUSE_MIN_NS`]: a decode loop's sampling and stop check between tokens, which a model's
/// layers, launched back to back, do not have.
pub const PAUSE_RATIO: u64 = 5;
pub const PAUSE_MIN_NS: u64 = 20_000;

/// Ops a step may have more or fewer than its unit and still be a step of the loop (off the
/// unit): 5 % of the unit, at least 2, at most 32.
pub fn off_unit_tolerance(unit_len: usize) -> usize {
    (unit_len / 20).clamp(2, 32)
}

/// Ops in which the steps that open a loop may differ from the first of them: 5 % of the
/// unit, at most 32, and none in a unit under 20 ops (where chance makes short steps alike).
/// Tokens of a decode loop differ so: PyTorch picks a vectorised or an unrolled variant of an
/// elementwise kernel by the alignment of its tensors, which changes with the position, so no
/// two tokens in a row need be identical.
pub fn opening_tolerance(unit_len: usize) -> usize {
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

    fn start(&self) -> usize {
        self.steps[0].0
    }

    fn end(&self) -> usize {
        self.steps[self.steps.len() - 1].1
    }

    fn ops(&self) -> usize {
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

/// LCS length of `a` and `b` over alignments that stay within `band` of the diagonal: exact
/// whenever the LCS leaves at most `band` ops of each unmatched.
fn banded_lcs(a: &[u32], b: &[u32], band: usize) -> usize {
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
pub struct FoundCell {
    pub steps: Vec<Vec<usize>>,
    /// Steps that follow an interruption of the loop: no period reaches back past it.
    pub breaks: Vec<usize>,
    pub found: FoundSteps,
}

/// Steps found among some eager ops of a trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovered {
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
pub fn is_benchmark_unit<'n>(names: impl Iterator<Item = &'n String>) -> bool {
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
            let matched = super::lcs::lcs_pairs(&rotated, g).len();
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
                    kernel_symbol.push(op.kind == super::model::OpKind::Kernel);
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
pub fn discover(
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
pub const JOIN_UNITS: usize = 2;

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

/// A repeated host range around device work, for the note that names the flag to pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RangeHint {
    /// What to pass to `--step-range`: a range's whole name, or the last `|`-separated parts
    /// that several names share (`forward` for `[…|warmup|forward]` and `[…|measure|forward]`).
    pub name: String,
    /// Ranges it names with device work launched inside, each counted once (the outermost).
    pub ranges: usize,
    /// How many range names it stands for (1 for a whole name).
    pub names: usize,
}

impl RangeHint {
    /// `--step-range NAME`, NAME quoted for a POSIX shell where it needs it, so the flag works
    /// as written.
    pub fn flag(&self) -> String {
        format!("--step-range {}", shell_word(&self.name))
    }
}

/// `word` as a POSIX shell reads it back: as it is when it holds only characters no shell
/// treats specially, else in single quotes (a quote inside closed, escaped and reopened).
pub fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.,:/=@%+".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The fewest steps that give a period: a hint to fall back on when no range repeats
/// [`MIN_STEPS`] times (a benchmark's warm-up and measured iteration).
pub const MIN_HINT_RANGES: usize = 2;

/// The plain host range (NVTX, `record_function`) that most looks like a step: ranges that
/// one `--step-range` argument names (a whole name, or the last `|`-separated parts of several:
/// [`crate::trace::range_name_match`]), at least [`step_range_rule::MIN_RANGES`] of them with
/// device work launched inside (else at least [`MIN_HINT_RANGES`]), never overlapping each
/// other on a thread but where one lies inside another (that counts once, as the flag counts
/// it); of several, the best by [`step_range_rule::rank`] — the rule `gapscope record` follows
/// too. Names [`step_range_rule::may_be_a_step`] refuses are not steps.
pub fn step_range_hint(
    trace: &Trace,
    timeline: &TraceTimeline,
    launches: &LaunchIndex,
) -> Option<RangeHint> {
    let mut launched: Vec<(u32, u64)> = timeline
        .ops
        .iter()
        .filter_map(|o| launches.call(o.corr).map(|c| (c.2, c.0)))
        .collect();
    launched.sort_unstable();
    let mut by_name: FxHashMap<u32, Vec<(u32, u64, u64)>> = FxHashMap::default();
    for m in &trace.markers {
        if m.kind == MarkerKind::Range && step_range_rule::may_be_a_step(trace.str(m.name)) {
            by_name
                .entry(m.name)
                .or_default()
                .push((m.thread, m.start, m.end));
        }
    }
    // Each name stands for itself, and its last parts for every name they end.
    let whole: std::collections::HashSet<&str> = by_name.keys().map(|&n| trace.str(n)).collect();
    // (a suffix, the argument) → the ranges it names (thread, start, end), and of how many names.
    type Named = (Vec<(u32, u64, u64)>, usize);
    let mut candidates: std::collections::BTreeMap<(bool, String), Named> = Default::default();
    for (&name, ranges) in &by_name {
        let text = trace.str(name);
        let parts = crate::trace::range_name_parts(text);
        let suffixes = (1..parts.len()).map(|from| parts[from..].join("|"));
        for (is_suffix, key) in std::iter::once((false, text.to_owned())).chain(
            suffixes
                .filter(|s| !whole.contains(s.as_str()))
                .map(|s| (true, s)),
        ) {
            let entry = candidates.entry((is_suffix, key)).or_default();
            entry.0.extend_from_slice(ranges);
            entry.1 += 1;
        }
    }
    let mut best: Option<(step_range_rule::Rank, RangeHint)> = None;
    for ((is_suffix, name), (mut ranges, names)) in candidates {
        ranges
            .sort_unstable_by_key(|&(thread, start, end)| (thread, start, std::cmp::Reverse(end)));
        let ranges: Vec<(u32, u64, u64)> = crate::trace::outermost(&ranges)
            .into_iter()
            .map(|i| ranges[i])
            .collect();
        let overlapping = ranges
            .windows(2)
            .any(|w| w[0].0 == w[1].0 && w[1].1 < w[0].2);
        if overlapping {
            continue;
        }
        let (mut with_work, mut ops) = (0, 0);
        for &(thread, start, end) in &ranges {
            let from = launched.partition_point(|&l| l < (thread, start));
            let to = launched.partition_point(|&l| l <= (thread, end));
            if to > from {
                with_work += 1;
                ops += to - from;
            }
        }
        if with_work < MIN_HINT_RANGES {
            continue;
        }
        let rank = step_range_rule::rank(with_work, ops as u64, !is_suffix);
        if best.as_ref().is_none_or(|(b, _)| rank > *b) {
            let hint = RangeHint {
                name,
                ranges: with_work,
                names,
            };
            best = Some((rank, hint));
        }
    }
    best.map(|(_, hint)| hint)
}

/// For an import that marks no steps (an Nsight Systems export), the step range
/// `gapscope record` would have chosen: the plain host range [`step_range_hint`] names, when
/// [`step_range_rule::MIN_RANGES`] of its ranges hold device work. Its ranges become the steps
/// ([`Trace::mark_steps`]) and the workload says it was chosen, as `record`'s choice does
/// ([`crate::trace::Metadata::chosen_step_range`]). Returns the name; `None` (the trace unchanged) when the trace has
/// step markers or no range qualifies.
pub fn choose_step_range(trace: &mut Trace) -> Option<String> {
    if trace.markers.iter().any(|m| m.kind == MarkerKind::Step) {
        return None;
    }
    let hint = {
        let timeline = super::timeline::build(trace);
        let launches = LaunchIndex::new(trace);
        step_range_hint(trace, &timeline, &launches)?
    };
    if hint.ranges < step_range_rule::MIN_RANGES
        || hint.names > 1
        || trace.mark_steps(&hint.name) == 0
    {
        return None;
    }
    trace.metadata.set_step_range(&hint.name, true);
    Some(hint.name)
}

/// How a trace's eager steps were found, for every report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// Step markers (`--step-range`, `ProfilerStep`, `gapscope run`'s own).
    #[default]
    Markers,
    /// Loops found in the kernel sequence.
    KernelSequence,
    /// Neither markers nor a repeating sequence.
    NoRepetition,
}

/// What a trace's reports say about its steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepFinding {
    pub source: StepSource,
    /// The loops found, one per eager cell they made.
    pub loops: Vec<FoundSteps>,
    /// Eager ops searched, those in no step, and those of loops beside graph replays.
    pub eager_ops: usize,
    pub left_over: usize,
    pub beside_graphs: usize,
    /// The trace has graph replays (their cells need no markers).
    pub graphs: bool,
    /// Without step markers: a repeated host range that could mark the steps.
    pub step_range_hint: Option<RangeHint>,
    /// The step range `gapscope record` chose when none was given (its steps are the markers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen_step_range: Option<String>,
    /// That range was chosen when the trace was imported ([`choose_step_range`]), not by
    /// `gapscope record`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub chosen_on_import: bool,
}

impl StepFinding {
    /// Lines for the screen and the report: how the steps were found, and the flag to pass.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let beside = if self.beside_graphs > 0 {
            format!(
                "; {} ops repeat beside each graph replay and belong to the replays",
                self.beside_graphs
            )
        } else {
            String::new()
        };
        match self.source {
            StepSource::Markers => {
                match (&self.chosen_step_range, self.chosen_on_import) {
                    (Some(name), false) => lines.push(format!(
                        "Steps: the NVTX range `{name}`, which `gapscope record` chose (the outermost range around device work); `gapscope record --step-range NAME` chooses another"
                    )),
                    (Some(name), true) => lines.push(format!(
                        "Steps: the NVTX range `{name}`, chosen on import as `gapscope record` chooses (the outermost range around device work); `--step-range NAME` chooses another"
                    )),
                    (None, _) => {}
                }
            }
            StepSource::KernelSequence => {
                let where_ = match self.loops.first().and_then(|l| l.inside_marker.as_deref()) {
                    Some(m) => format!("inside the one step marker `{m}`"),
                    None => "no step markers".to_owned(),
                };
                let loops: Vec<String> = self
                    .loops
                    .iter()
                    .map(|l| format!("E{} {}", l.ordinal, l.describe()))
                    .collect();
                lines.push(format!(
                    "Steps found from the kernel sequence ({where_}): {}; {} of {} eager ops left over{beside}",
                    loops.join("; "),
                    self.left_over,
                    self.eager_ops
                ));
            }
            StepSource::NoRepetition if self.eager_ops > 0 => lines.push(format!(
                "Steps: no step markers, and no repeating sequence among the {} eager ops: {}{beside}",
                self.eager_ops,
                if self.graphs {
                    "they are in no cell"
                } else {
                    "they are one step, with no period"
                }
            )),
            StepSource::NoRepetition => {}
        }
        if let Some(h) = &self.step_range_hint {
            let which = if h.names > 1 {
                format!(
                    "the host ranges ending in `|{}` ({} names) repeat",
                    h.name, h.names
                )
            } else {
                format!("the host range `{}` repeats", h.name)
            };
            lines.push(format!(
                "Step range: {which} around device work ({} ranges): pass `{}` to make each one a step",
                h.ranges,
                h.flag()
            ));
        }
        lines
    }
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

    #[test]
    fn the_hinted_flag_is_quoted_for_the_shell_where_it_must_be() {
        let flag = |name: &str| {
            RangeHint {
                name: name.to_owned(),
                ranges: 4,
                names: 1,
            }
            .flag()
        };
        assert_eq!(flag("decode_step"), "--step-range decode_step");
        assert_eq!(flag("## forward ##"), "--step-range '## forward ##'");
        assert_eq!(flag("measure|forward"), "--step-range 'measure|forward'");
        assert_eq!(flag("it's"), "--step-range 'it'\\''s'");
    }

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

    #[test]
    fn banded_lcs_is_exact_within_the_band() {
        assert_eq!(banded_lcs(&[1, 2, 3, 4], &[1, 2, 9, 3, 4], 2), 4);
        assert_eq!(banded_lcs(&[1, 2, 3], &[1, 2, 3], 2), 3);
        assert_eq!(banded_lcs(&[], &[1], 2), 0);
    }
}
