//! Damage a trace can carry that parsing accepts (every field well-formed, the whole
//! inconsistent): found before the analysis, named in the input's notes
//! ([`super::InputSummary::damage`]), and left out of the figures it would corrupt.
//!
//! - API calls sharing a correlation id: which of them launched an op is unknown, so their ops
//!   are joined to no launch call (no step, no launch time).
//! - Graph edges to nodes the trace does not have, and every edge of a graph whose edges form a
//!   cycle: a predecessor walk over them would name causes that are not in front of the op.
//! - Kernels outside graphs that overlap the kernels after them on their stream beyond the
//!   clock's jitter ([`CLOCK_JITTER_NS`]) in any way but programmatic dependent launch's (a
//!   stream runs in order: see `overlapping_kernels`): left out, whatever the size.
//! - Every kernel of zero duration: not the timing of a run; every op is left out.
#![forbid(unsafe_code)]

use super::corr_set::CorrSet;
use super::thresholds::{CLOCK_JITTER_NS, DEPENDENT_LAUNCH_OVERLAP_NS};
use crate::trace::{GraphEdge, Trace};
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;

/// `trace` with its damage taken out (borrowed when it has none), and one note per kind of
/// damage found.
pub fn check(trace: &Trace) -> (Cow<'_, Trace>, Vec<String>) {
    let mut notes = Vec::new();
    let duplicated = duplicated_correlation_ids(trace);
    let dangling = dangling_edges(trace);
    let cyclic = cyclic_graphs(trace);
    let overlapping = overlapping_kernels(trace);
    let all_zero = all_zero_durations(trace);
    if duplicated.is_empty()
        && dangling == 0
        && cyclic.is_empty()
        && overlapping.is_empty()
        && !all_zero
    {
        return (Cow::Borrowed(trace), notes);
    }
    let mut fixed = trace.clone();
    if !duplicated.is_empty() {
        let calls = fixed
            .api_calls
            .iter()
            .filter(|a| duplicated.contains(&a.corr))
            .count();
        fixed.api_calls.retain(|a| !duplicated.contains(&a.corr));
        notes.push(format!(
            "damaged: {calls} API calls share {} correlation ids; the ops they launched are joined to no launch call (left out of the steps)",
            duplicated.len()
        ));
    }
    if dangling > 0 {
        let known: FxHashSet<u64> = fixed.graph.nodes.iter().map(|n| n.id).collect();
        fixed
            .graph
            .edges
            .retain(|e| known.contains(&e.from) && known.contains(&e.to));
        notes.push(format!(
            "damaged: {dangling} graph edges name nodes the trace does not have; left out of the causes"
        ));
    }
    if !cyclic.is_empty() {
        let graph_of: FxHashMap<u64, u32> =
            fixed.graph.nodes.iter().map(|n| (n.id, n.graph)).collect();
        let in_cycle = |e: &GraphEdge| graph_of.get(&e.to).is_some_and(|g| cyclic.contains(g));
        let edges = fixed.graph.edges.iter().filter(|e| in_cycle(e)).count();
        fixed.graph.edges.retain(|e| !in_cycle(e));
        let mut graphs: Vec<u32> = cyclic.into_iter().collect();
        graphs.sort_unstable();
        let names: Vec<String> = graphs.iter().map(u32::to_string).collect();
        notes.push(format!(
            "damaged: the edges of graph {} form a cycle (a graph is acyclic); its {edges} edges are left out of the causes",
            names.join(", ")
        ));
    }
    if all_zero {
        notes.push(format!(
            "damaged: all {} kernels have zero duration, so no figure can be made from them; every op is left out",
            fixed.kernels.len()
        ));
        fixed.kernels.clear();
        fixed.memcpys.clear();
        fixed.memsets.clear();
    } else if !overlapping.is_empty() {
        notes.push(format!(
            "damaged: {} kernels outside graphs overlap the kernels after them on their stream (a stream runs in order; programmatic dependent launch overlaps a kernel's tail with the next kernel only, which ends after it, by at most {:.0} µs); left out",
            overlapping.len(),
            DEPENDENT_LAUNCH_OVERLAP_NS as f64 / 1e3
        ));
        let mut index = 0;
        fixed.kernels.retain(|_| {
            index += 1;
            !overlapping.contains(&(index - 1))
        });
    }
    (Cow::Owned(fixed), notes)
}

/// Correlation ids (other than 0, "none") that more than one API call carries.
fn duplicated_correlation_ids(trace: &Trace) -> FxHashSet<u32> {
    let ids = || trace.api_calls.iter().map(|a| a.corr).filter(|&c| c != 0);
    let mut seen = CorrSet::for_ids(ids());
    let mut duplicated = FxHashSet::default();
    for corr in ids() {
        if !seen.insert(corr) {
            duplicated.insert(corr);
        }
    }
    duplicated
}

/// Edges with an end that is no node of the trace.
fn dangling_edges(trace: &Trace) -> usize {
    let known: FxHashSet<u64> = trace.graph.nodes.iter().map(|n| n.id).collect();
    trace
        .graph
        .edges
        .iter()
        .filter(|e| !known.contains(&e.from) || !known.contains(&e.to))
        .count()
}

/// Graphs (by the id of the edges' target nodes) whose edges form a cycle: the nodes left
/// after repeatedly removing those without predecessors (Kahn's algorithm).
fn cyclic_graphs(trace: &Trace) -> FxHashSet<u32> {
    let graph_of: FxHashMap<u64, u32> = trace.graph.nodes.iter().map(|n| (n.id, n.graph)).collect();
    let edges: Vec<&GraphEdge> = trace
        .graph
        .edges
        .iter()
        .filter(|e| graph_of.contains_key(&e.from) && graph_of.contains_key(&e.to))
        .collect();
    let mut incoming: FxHashMap<u64, usize> = FxHashMap::default();
    let mut successors: FxHashMap<u64, Vec<u64>> = FxHashMap::default();
    for e in &edges {
        *incoming.entry(e.to).or_default() += 1;
        incoming.entry(e.from).or_default();
        successors.entry(e.from).or_default().push(e.to);
    }
    let mut ready: Vec<u64> = incoming
        .iter()
        .filter(|&(_, &n)| n == 0)
        .map(|(&id, _)| id)
        .collect();
    while let Some(id) = ready.pop() {
        for next in successors.get(&id).into_iter().flatten() {
            let n = incoming.get_mut(next).expect("every target counted");
            *n -= 1;
            if *n == 0 {
                ready.push(*next);
            }
        }
    }
    incoming
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .filter_map(|(id, _)| graph_of.get(&id).copied())
        .collect()
}

/// Indices of kernels outside graphs that end more than [`CLOCK_JITTER_NS`] after the next
/// kernel on their (device, stream) starts, unless the overlap is programmatic dependent
/// launch's: with the next kernel only (the one after it starts once this one has ended), which
/// ends after this one, by at most [`DEPENDENT_LAUNCH_OVERLAP_NS`]. The one named is the kernel
/// whose interval is impossible (a 1 s kernel covering its successors, a kernel that claims to
/// start long before its predecessor), not the successors it covers.
fn overlapping_kernels(trace: &Trace) -> FxHashSet<usize> {
    let mut eager: Vec<usize> = (0..trace.kernels.len())
        .filter(|&i| trace.kernels[i].graph == 0 && trace.kernels[i].end != 0)
        .collect();
    eager.sort_by_key(|&i| {
        let k = &trace.kernels[i];
        (k.device, k.stream, k.start, k.end)
    });
    let on_stream_after = |j: usize, by: usize| {
        let a = &trace.kernels[eager[j]];
        eager
            .get(j + by)
            .map(|&i| &trace.kernels[i])
            .filter(|k| (k.device, k.stream) == (a.device, a.stream))
    };
    (0..eager.len())
        .filter(|&j| {
            let a = &trace.kernels[eager[j]];
            let Some(next) = on_stream_after(j, 1) else {
                return false;
            };
            let overlap = a.end.saturating_sub(next.start);
            if overlap <= CLOCK_JITTER_NS {
                return false;
            }
            let dependent_launch = overlap <= DEPENDENT_LAUNCH_OVERLAP_NS
                && next.end >= a.end
                && on_stream_after(j, 2)
                    .is_none_or(|after| after.start.saturating_add(CLOCK_JITTER_NS) >= a.end);
            !dependent_launch
        })
        .map(|j| eager[j])
        .collect()
}

/// Two or more kernels with timestamps, every one of zero duration.
fn all_zero_durations(trace: &Trace) -> bool {
    let mut timed = trace.kernels.iter().filter(|k| k.end != 0).peekable();
    timed.peek().is_some() && trace.kernels.len() >= 2 && timed.all(|k| k.start == k.end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::synthetic::{self, SyntheticCell};

    fn graphed() -> Trace {
        synthetic::trace(&[SyntheticCell::emu(true, 2, 10)], 3)
    }

    #[test]
    fn a_sound_trace_is_borrowed_as_it_is() {
        let t = synthetic::emu_experiment(10);
        let (checked, notes) = check(&t);
        assert!(matches!(checked, Cow::Borrowed(_)));
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn each_kind_of_damage_is_named_and_taken_out() {
        let mut t = graphed();
        let corr = t.api_calls[0].corr;
        t.api_calls[1].corr = corr;
        t.graph.edges.push(GraphEdge {
            from: 0xdead,
            to: t.graph.nodes[0].id,
        });
        let first = t.graph.edges[0];
        t.graph.edges.push(GraphEdge {
            from: first.to,
            to: first.from,
        });
        let (checked, notes) = check(&t);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].contains("2 API calls share 1 correlation ids"),
            "{notes:?}"
        );
        assert!(notes[1].contains("1 graph edges name nodes"), "{notes:?}");
        assert!(notes[2].contains("form a cycle"), "{notes:?}");
        assert!(checked.api_calls.iter().all(|a| a.corr != corr));
        assert!(cyclic_graphs(&checked).is_empty());
        assert_eq!(dangling_edges(&checked), 0);
    }

    #[test]
    fn an_overlap_on_one_stream_beyond_the_tolerance_is_left_out() {
        let mut t = synthetic::trace(&[SyntheticCell::emu(false, 1, 10)], 3);
        let n = t.kernels.len();
        // The fourth kernel claims to end 1 s after the fifth, on its stream, starts.
        t.kernels[3].end += 1_000_000_000;
        let (checked, notes) = check(&t);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("1 kernels outside graphs overlap"),
            "{notes:?}"
        );
        assert_eq!(checked.kernels.len(), n - 1);
        assert!(!checked.kernels.contains(&t.kernels[3]));
        // Programmatic dependent launch: the fifth kernel starts 2 µs before the fourth ends,
        // then ends after it. Not damage.
        let mut t = synthetic::trace(&[SyntheticCell::emu(false, 1, 10)], 3);
        t.kernels[4].start = t.kernels[3].end - 2_000;
        assert!(check(&t).1.is_empty());
        // The clock's jitter, whatever the kernels' shape: not damage.
        let mut t = synthetic::trace(&[SyntheticCell::emu(false, 1, 10)], 3);
        t.kernels[3].end = t.kernels[4].start + CLOCK_JITTER_NS;
        assert!(check(&t).1.is_empty());
    }

    #[test]
    fn an_overlap_under_a_millisecond_is_damage_unless_it_is_dependent_launch() {
        let base = || synthetic::trace(&[SyntheticCell::emu(false, 1, 10)], 3);
        // The fourth kernel ends 100 µs after the fifth starts, after the fifth has ended.
        let mut nested = base();
        nested.kernels[3].end = nested.kernels[4].start + 100_000;
        // The fourth kernel ends 2 µs after the fifth: the fifth runs inside it.
        let mut inside = base();
        inside.kernels[3].end = inside.kernels[4].end + 2_000;
        for (what, t) in [("nested", nested), ("inside", inside)] {
            let n = t.kernels.len();
            let (checked, notes) = check(&t);
            assert_eq!(notes.len(), 1, "{what}: {notes:?}");
            assert!(
                notes[0].contains("1 kernels outside graphs overlap"),
                "{what}: {notes:?}"
            );
            assert_eq!(checked.kernels.len(), n - 1, "{what}");
            assert!(!checked.kernels.contains(&t.kernels[3]), "{what}");
        }
    }

    /// 36 kernels of 500 µs starting 20 µs apart on one stream: each (but the last two) still
    /// runs when the kernel after its successor starts, which no launch does.
    #[test]
    fn a_chain_of_kernels_overlapping_their_successors_is_left_out() {
        let mut t = synthetic::trace(&[SyntheticCell::emu(false, 1, 10)], 3);
        let first = t.kernels[0].start;
        t.kernels.truncate(36);
        for (i, k) in t.kernels.iter_mut().enumerate() {
            k.start = first + 20_000 * i as u64;
            k.end = k.start + 500_000;
        }
        let (checked, notes) = check(&t);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("34 kernels outside graphs overlap"),
            "{notes:?}"
        );
        // The last two: a dependent launch's overlap, and nothing after.
        assert_eq!(checked.kernels.len(), 2);
    }

    #[test]
    fn all_zero_durations_leave_no_op() {
        let mut t = synthetic::emu_experiment(5);
        for k in &mut t.kernels {
            k.end = k.start;
        }
        let (checked, notes) = check(&t);
        assert!(notes[0].contains("zero duration"), "{notes:?}");
        assert!(checked.kernels.is_empty() && checked.memcpys.is_empty());
    }
}
