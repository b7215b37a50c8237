//! Host ranges (NVTX push/pop, library calls) indexed per thread, for "which ranges enclose
//! this instant on this thread": the recorder tags graph nodes with it, the analysis eager
//! launches and every op's provenance.
#![forbid(unsafe_code)]

use super::{MarkerKind, StrId, Trace};
use std::collections::HashMap;

/// The one rule for which host range marks a step when none is named, applied by
/// `gapscope record` while the program runs (`record::cupti::budget::step_choice`) and by the analysis
/// on a finished trace (`analysis::discover::step_range_hint`).
pub mod step_range_rule {
    /// Ranges of one name with device work inside that make it a step range: three periods.
    pub const MIN_RANGES: usize = 4;

    /// Whether ranges named `name` may be steps: library calls (NCCL's ranges) and
    /// C++-qualified names (`cub::DeviceScan::InclusiveScan`, a library's own range) are not.
    pub fn may_be_a_step(name: &str) -> bool {
        !name.is_empty() && !super::super::is_library_call_range(name) && !name.contains("::")
    }

    /// How candidates compare: the greater wins ([`rank`]).
    pub type Rank = (bool, u64, std::cmp::Reverse<usize>, bool);

    /// A candidate's [`Rank`]: enough ranges with work first, then the most device work (the
    /// outermost part of the step), then fewer ranges, then a whole name over the last parts
    /// of several.
    pub fn rank(with_work: usize, work: u64, whole_name: bool) -> Rank {
        (
            with_work >= MIN_RANGES,
            work,
            std::cmp::Reverse(with_work),
            whole_name,
        )
    }
}

/// How `--step-range NAME` names a range: by its whole name, or, as PARAM's benchmark ranges
/// are named (`[param|pytorch.model.alex_net|0|0|0|measure|forward]`), by the last of its
/// `|`-separated parts (`measure|forward`, `forward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeNameMatch {
    Whole,
    LastParts,
}

/// A range name's `|`-separated parts, the brackets around a name like
/// `[param|…|forward]` left out.
pub fn range_name_parts(name: &str) -> Vec<&str> {
    let inner = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    inner.split('|').collect()
}

/// Whether `--step-range pattern` names the range `name` ([`RangeNameMatch`]): the whole
/// name, or whole `|`-separated parts at its end (`forward` names `a|forward`, not `a|preforward`).
pub fn range_name_match(pattern: &str, name: &str) -> Option<RangeNameMatch> {
    if pattern == name {
        return Some(RangeNameMatch::Whole);
    }
    if pattern.is_empty() || !name.contains('|') {
        return None;
    }
    let (wanted, parts) = (range_name_parts(pattern), range_name_parts(name));
    parts
        .ends_with(&wanted)
        .then_some(RangeNameMatch::LastParts)
}

/// Of ranges (thread, start, end), sorted, those inside no other one on their thread: a range
/// nested in another it was matched with (a `record_function` around an inner range of the same
/// name) is one iteration, counted once, as its outermost range.
pub fn outermost(sorted: &[(u32, u64, u64)]) -> Vec<usize> {
    let mut kept: Vec<usize> = Vec::new();
    for (i, &(thread, start, end)) in sorted.iter().enumerate() {
        let inside = kept.last().is_some_and(|&k| {
            let (t, s, e) = sorted[k];
            t == thread && s <= start && end <= e
        });
        if !inside {
            kept.push(i);
        }
    }
    kept
}

/// In intervals sorted by start: the last one that starts at or before `t`, if `t` is not past
/// its end — the step-marker rule shared by the analysis, `Trace::select_cells` and the Kineto
/// import. `span` gives an item's (start, end).
pub fn last_containing<T>(sorted: &[T], span: impl Fn(&T) -> (u64, u64), t: u64) -> Option<usize> {
    let i = sorted.partition_point(|x| span(x).0 <= t).checked_sub(1)?;
    (t <= span(&sorted[i]).1).then_some(i)
}

/// Host ranges by thread, sorted by start, each with the innermost range around it: ranges
/// of one thread nest (NVTX push/pop), so "which range encloses this instant" walks up from
/// the last range started before it, never through the ranges that closed in between.
#[derive(Debug, Default)]
pub struct HostRanges {
    by_thread: HashMap<u32, Vec<HostRange>>,
}

/// (start, end, name, index of the enclosing range).
type HostRange = (u64, u64, StrId, Option<usize>);

impl HostRanges {
    /// Ranges given as (thread, start, end, name).
    pub fn new(ranges: impl IntoIterator<Item = (u32, u64, u64, StrId)>) -> HostRanges {
        let mut by_thread: HashMap<u32, Vec<HostRange>> = HashMap::new();
        for (thread, start, end, name) in ranges {
            by_thread
                .entry(thread)
                .or_default()
                .push((start, end, name, None));
        }
        for v in by_thread.values_mut() {
            // Outer first when two start together.
            v.sort_unstable_by_key(|r| (r.0, std::cmp::Reverse(r.1)));
            let mut open: Vec<usize> = Vec::new();
            for i in 0..v.len() {
                while open.last().is_some_and(|&o| v[o].1 < v[i].0) {
                    open.pop();
                }
                v[i].3 = open.last().copied();
                open.push(i);
            }
        }
        HostRanges { by_thread }
    }

    /// The library-call ranges of `trace`: NVTX ranges a library opened around its calls
    /// (NCCL's, see [`super::is_library_call_range`]) and, with `ours_too`, gapscope's own
    /// library-call markers.
    pub fn library_calls(trace: &Trace, ours_too: bool) -> HostRanges {
        HostRanges::new(
            trace
                .markers
                .iter()
                .filter(|m| match m.kind {
                    MarkerKind::LibraryCall => ours_too,
                    MarkerKind::Range => super::is_library_call_range(trace.str(m.name)),
                    _ => false,
                })
                .map(|m| (m.thread, m.start, m.end, m.name)),
        )
    }

    /// The innermost range of `thread` that encloses `at`.
    pub fn innermost(&self, thread: u32, at: u64) -> Option<StrId> {
        self.open_at(thread, at).next()
    }

    /// Every range of `thread` that encloses `at`, outermost first.
    pub fn enclosing(&self, thread: u32, at: u64) -> Vec<StrId> {
        let mut names: Vec<StrId> = self.open_at(thread, at).collect();
        names.reverse();
        names
    }

    /// The ranges of `thread` open at `at`, innermost first: up from the last range started
    /// at or before it, past the ones that closed before `at`.
    fn open_at(&self, thread: u32, at: u64) -> impl Iterator<Item = StrId> + '_ {
        let v = self.by_thread.get(&thread).map_or(&[][..], Vec::as_slice);
        let mut next = v.partition_point(|r| r.0 <= at).checked_sub(1);
        std::iter::from_fn(move || {
            loop {
                let r = v[next?];
                next = r.3;
                if r.1 >= at {
                    return Some(r.2);
                }
            }
        })
    }
}

impl super::GraphDag {
    /// A DAG of `nodes` (sorted by id), `edges` and `execs` (each sorted, duplicates dropped),
    /// whose library calls are tagged from `ranges` ([`Self::tag_library_calls`]).
    pub fn new(
        mut nodes: Vec<super::GraphNode>,
        mut edges: Vec<super::GraphEdge>,
        mut execs: Vec<super::GraphExec>,
        inferred: bool,
        ranges: &HostRanges,
    ) -> super::GraphDag {
        nodes.sort_by_key(|n| n.id);
        edges.sort_by_key(|e| (e.from, e.to));
        edges.dedup();
        execs.sort_by_key(|x| (x.id, x.template));
        execs.dedup();
        let mut dag = super::GraphDag {
            nodes,
            edges,
            execs,
            inferred,
        };
        dag.tag_library_calls(ranges);
        dag
    }

    /// Nodes made outside gapscope's own library-call markers take the innermost of `ranges`
    /// (library-call ranges, [`HostRanges::library_calls`]) that encloses their creation on
    /// their thread; clones follow their templates.
    pub fn tag_library_calls(&mut self, ranges: &HostRanges) {
        for node in &mut self.nodes {
            if node.library_call.is_none()
                && node.cloned_from.is_none()
                && let (Some(at), Some(thread)) = (node.created_at, node.created_thread)
            {
                node.library_call = ranges.innermost(thread, at);
            }
        }
        let tagged: HashMap<u64, StrId> = self
            .nodes
            .iter()
            .filter_map(|n| n.library_call.map(|l| (n.id, l)))
            .collect();
        for node in &mut self.nodes {
            if node.library_call.is_none()
                && let Some(t) = node.cloned_from
            {
                node.library_call = tagged.get(&t).copied();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_range_names_a_whole_name_or_whole_parts_at_its_end() {
        let param = "[param|pytorch.model.alex_net|0|0|0|measure|forward]";
        assert_eq!(range_name_match(param, param), Some(RangeNameMatch::Whole));
        for last in [
            "forward",
            "measure|forward",
            "param|pytorch.model.alex_net|0|0|0|measure|forward",
        ] {
            assert_eq!(
                range_name_match(last, param),
                Some(RangeNameMatch::LastParts),
                "{last}"
            );
        }
        for not in ["ward", "measure", "warmup|forward", "", "forward]"] {
            assert_eq!(range_name_match(not, param), None, "{not}");
        }
        // A name without `|` is named whole or not at all.
        assert_eq!(range_name_match("step", "decode_step"), None);
        assert_eq!(range_name_parts("a|b"), ["a", "b"]);
    }

    #[test]
    fn a_range_inside_another_on_its_thread_counts_once() {
        // Thread 1: outer 0..100 around inner 10..90, then 200..300; thread 2: 50..60.
        let sorted = [(1, 0, 100), (1, 10, 90), (1, 200, 300), (2, 50, 60)];
        assert_eq!(outermost(&sorted), vec![0, 2, 3]);
    }

    #[test]
    fn the_innermost_open_range_of_the_same_thread_encloses() {
        // Thread 1: outer 0..100 holding inner 10..20, then a sibling 30..40; thread 2 spans all.
        let ranges = HostRanges::new([
            (1, 30, 40, 3),
            (1, 0, 100, 1),
            (1, 10, 20, 2),
            (2, 0, 1000, 9),
        ]);
        assert_eq!(ranges.innermost(1, 15), Some(2));
        assert_eq!(
            ranges.innermost(1, 25),
            Some(1),
            "the inner range closed at 20"
        );
        assert_eq!(ranges.innermost(1, 35), Some(3));
        assert_eq!(ranges.innermost(1, 100), Some(1), "ends are inclusive");
        assert_eq!(ranges.innermost(1, 101), None);
        assert_eq!(ranges.innermost(2, 15), Some(9), "another thread's ranges");
        assert_eq!(ranges.innermost(3, 15), None, "a thread without ranges");
        assert_eq!(ranges.enclosing(1, 15), [1, 2], "outermost first");
        assert_eq!(ranges.enclosing(1, 25), [1]);
        assert_eq!(ranges.enclosing(1, 101), [] as [StrId; 0]);
        assert_eq!(ranges.enclosing(3, 15), [] as [StrId; 0]);
        assert_eq!(HostRanges::default().innermost(1, 0), None);
    }

    #[test]
    fn the_last_interval_started_holds_an_instant_until_its_end() {
        let sorted = [(0, 100), (10, 20), (10, 50), (200, 300)];
        let at = |t| last_containing(&sorted, |&s| s, t);
        assert_eq!(at(5), Some(0));
        assert_eq!(
            at(15),
            Some(2),
            "of two starting together, the later in order"
        );
        assert_eq!(
            at(60),
            None,
            "the last started (10..50) has ended: no fallback to 0..100"
        );
        assert_eq!(at(300), Some(3));
        assert_eq!(at(301), None);
        assert_eq!(last_containing(&[] as &[(u64, u64)], |&s| s, 1), None);
    }
}
