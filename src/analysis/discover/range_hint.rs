//! The repeated host range that could mark a trace's steps: named in a hint when nothing marks
//! them ([`step_range_hint`]), and chosen as the steps on import ([`choose_step_range`]).
#![forbid(unsafe_code)]

use crate::analysis::model::TraceTimeline;
use crate::analysis::timeline::LaunchIndex;
use crate::messages::shell_word;
use crate::trace::{MarkerKind, Trace, step_range_rule};
use rustc_hash::FxHashMap;
use serde::Serialize;

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
/// The fewest steps that give a period: a hint to fall back on when no range repeats
/// [`MIN_STEPS`](super::loops::MIN_STEPS) times (a benchmark's warm-up and measured iteration).
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
        let timeline = crate::analysis::timeline::build(trace);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
