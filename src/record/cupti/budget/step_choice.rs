//! The step range `gapscope record` picks when none is given.
//!
//! Eager steps are sampled only when the budget knows where a step begins; without a step
//! range every eager launch is traced, which costs the program what tracing every launch
//! costs. So while no range is given, the outermost NVTX ranges of each thread are watched:
//! the first name whose ranges hold device work [`CHOOSE_AFTER`] times becomes the step range
//! (of names close behind it, the one whose ranges launched the most), as the analysis's hint
//! would name it (`discover::step_range_hint`). Library calls (NCCL's ranges) and C++-qualified
//! names are never steps. A program whose ranges never qualify stops being watched after
//! [`GIVE_UP_AFTER`] outermost ranges, so its launches stop paying for the watch.
#![forbid(unsafe_code)]

use crate::trace::step_range_rule;
use std::collections::HashMap;

/// Outermost ranges of one name with device work inside before it becomes the step range:
/// twice the rule's minimum, because the choice is made as the program runs and a name that
/// leads early (a warm-up range) must not win before the step's own ranges catch up.
pub(crate) const CHOOSE_AFTER: u32 = 2 * step_range_rule::MIN_RANGES as u32;
/// Outermost ranges seen, of any name, before watching stops with no choice.
pub(crate) const GIVE_UP_AFTER: u64 = 4096;
/// Names watched at most (a program naming each range afresh has no step range).
const MAX_NAMES: usize = 256;

/// Outermost ranges of one name: with device work inside, and the launches they held.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Seen {
    with_work: u32,
    launches: u64,
}

/// Where the watch stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Still watching.
    Watching,
    /// This name is the step range, chosen after this many of its ranges with device work and
    /// this many outermost ranges of every name.
    Chosen {
        name: String,
        with_work: u32,
        ranges: u64,
    },
    /// No name qualified within [`GIVE_UP_AFTER`] outermost ranges (or too many names).
    GaveUp { ranges: u64 },
}

/// The watch over a program's outermost NVTX ranges.
#[derive(Debug)]
pub(crate) struct StepRangeChooser {
    names: HashMap<Vec<u8>, Seen>,
    ranges: u64,
    choice: Choice,
}

impl Default for StepRangeChooser {
    fn default() -> Self {
        StepRangeChooser {
            names: HashMap::new(),
            ranges: 0,
            choice: Choice::Watching,
        }
    }
}

/// Whether ranges of this name can be steps ([`step_range_rule::may_be_a_step`]).
fn may_be_a_step(name: &[u8]) -> bool {
    std::str::from_utf8(name).is_ok_and(step_range_rule::may_be_a_step)
}

impl StepRangeChooser {
    #[cfg(test)]
    fn choice(&self) -> &Choice {
        &self.choice
    }

    /// Whether ranges that may be steps have held device work: then the program marks its
    /// steps (a choice is coming), else it marks none and time may pace the sampling.
    pub fn saw_step_like_ranges(&self) -> bool {
        !self.names.is_empty()
    }

    /// An outermost range named `name` ended on some thread, having launched `launches`
    /// kernels or graphs. Returns the choice when this range decided it.
    pub fn range_ended(&mut self, name: &[u8], launches: u64) -> Option<&Choice> {
        if self.choice != Choice::Watching {
            return None;
        }
        self.ranges += 1;
        if may_be_a_step(name) && launches > 0 {
            let known = self.names.contains_key(name);
            if known || self.names.len() < MAX_NAMES {
                let seen = self.names.entry(name.to_vec()).or_default();
                seen.with_work += 1;
                seen.launches += launches;
                if seen.with_work >= CHOOSE_AFTER {
                    self.choice = self.best();
                    return Some(&self.choice);
                }
            }
        }
        if self.ranges >= GIVE_UP_AFTER {
            self.choice = Choice::GaveUp {
                ranges: self.ranges,
            };
            return Some(&self.choice);
        }
        None
    }

    /// The best of the names by [`step_range_rule::rank`] (the analysis's rule): of those with
    /// the rule's minimum of ranges with work (ranges that alternate within a step are level),
    /// the one whose ranges launched the most, the outermost part of the step; then the name.
    fn best(&self) -> Choice {
        let rank = |s: &Seen| step_range_rule::rank(s.with_work as usize, s.launches, true);
        let (name, seen) = self
            .names
            .iter()
            .filter(|(_, s)| s.with_work as usize >= step_range_rule::MIN_RANGES)
            .max_by(|a, b| (rank(a.1), b.0).cmp(&(rank(b.1), a.0)))
            .expect("the name that reached CHOOSE_AFTER qualifies");
        Choice::Chosen {
            name: String::from_utf8_lossy(name).into_owned(),
            with_work: seen.with_work,
            ranges: self.ranges,
        }
    }

    /// What the trace notes say about the choice.
    pub fn note(&self) -> String {
        match &self.choice {
            Choice::Chosen {
                name,
                with_work,
                ranges,
            } => format!(
                "step range `{name}` chosen by the recorder: the outermost NVTX range with device work inside, chosen at its {with_work}th such range ({ranges} outermost ranges seen); from then on its steps were sampled like graph launches (the ranges before were traced as the work around them). `gapscope record --step-range NAME` chooses another"
            ),
            Choice::GaveUp { ranges } => format!(
                "no step range chosen: no outermost NVTX range held device work {CHOOSE_AFTER} times within {ranges} ranges; eager work was sampled with graph launches, or by time where nothing was counted. `gapscope record --step-range NAME` names one"
            ),
            Choice::Watching => format!(
                "no step range chosen: no outermost NVTX range held device work {CHOOSE_AFTER} times ({} ranges seen); eager work was sampled with graph launches, or by time where nothing was counted",
                self.ranges
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chosen(c: &StepRangeChooser) -> Option<&str> {
        match c.choice() {
            Choice::Chosen { name, .. } => Some(name),
            _ => None,
        }
    }

    #[test]
    fn a_range_with_work_is_chosen_at_its_eighth_occurrence() {
        let mut c = StepRangeChooser::default();
        for i in 0..CHOOSE_AFTER - 1 {
            assert_eq!(c.range_ended(b"decode_step", 12), None, "range {i}");
            // A range around host work only never counts.
            assert_eq!(c.range_ended(b"tokenize", 0), None);
        }
        assert!(c.range_ended(b"decode_step", 12).is_some());
        assert_eq!(chosen(&c), Some("decode_step"));
        assert!(c.note().contains("`decode_step` chosen"), "{}", c.note());
        // The choice stands.
        assert_eq!(c.range_ended(b"other", 100), None);
        assert_eq!(chosen(&c), Some("decode_step"));
    }

    #[test]
    fn of_alternating_ranges_the_one_that_launched_more_is_chosen() {
        let mut c = StepRangeChooser::default();
        for _ in 0..CHOOSE_AFTER {
            // `sample` comes first in each step but launches little.
            c.range_ended(b"sample", 2);
            c.range_ended(b"forward", 40);
        }
        assert_eq!(chosen(&c), Some("forward"));
    }

    #[test]
    fn library_calls_and_qualified_names_are_never_steps() {
        let mut c = StepRangeChooser::default();
        for _ in 0..2 * CHOOSE_AFTER {
            c.range_ended(b"ncclAllGather", 3);
            c.range_ended(b"cub::DeviceScan::InclusiveScan", 3);
            c.range_ended(&[0xff, 0xfe], 3);
        }
        assert_eq!(c.choice(), &Choice::Watching);
    }

    #[test]
    fn watching_stops_when_nothing_qualifies() {
        let mut c = StepRangeChooser::default();
        for i in 0..GIVE_UP_AFTER - 1 {
            assert_eq!(c.range_ended(b"load_batch", 0), None, "range {i}");
        }
        assert_eq!(
            c.range_ended(b"load_batch", 0),
            Some(&Choice::GaveUp {
                ranges: GIVE_UP_AFTER
            })
        );
        assert!(c.note().starts_with("no step range chosen"));
    }

    #[test]
    fn names_beyond_the_cap_are_not_watched() {
        let mut c = StepRangeChooser::default();
        for i in 0..MAX_NAMES {
            c.range_ended(format!("request {i}").as_bytes(), 1);
        }
        for _ in 0..CHOOSE_AFTER {
            c.range_ended(b"late_step", 5);
        }
        assert_eq!(c.choice(), &Choice::Watching);
    }
}
