//! The step range of a recording: the NVTX range whose ranges are the program's steps, given
//! with `gapscope record --step-range NAME` or chosen by the recorder while the program runs.
//! Its one home on the record side: the variable it travels in from `record` to the program,
//! its reading there, the name the recorder holds, and what the trace says of it. It does not
//! hang on the trace budget: `--trace-budget 0` traces every step and still marks them (only
//! the choosing needs a budget, whose watch does it: `cupti::budget::step_choice`).
#![forbid(unsafe_code)]

use crate::settings::Setting;
use crate::trace::Trace;
use std::sync::OnceLock;

/// The variable `gapscope record` hands the step range to the program in.
pub const STEP_RANGE_VAR: &str = Setting::StepRange.name();

/// A recording's step range: the name given, or else the one the recorder chooses while the
/// program runs (the first choice stands). Shared by the recorder and its callbacks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepRange {
    name: OnceLock<String>,
    given: bool,
}

impl StepRange {
    /// The step range `given`, or, with none, one for the recorder to choose.
    pub fn new(given: Option<String>) -> StepRange {
        StepRange {
            given: given.is_some(),
            name: given.map(OnceLock::from).unwrap_or_default(),
        }
    }

    /// The step range `gapscope record` handed the injected process (a name, or one to
    /// choose).
    pub fn from_env() -> StepRange {
        StepRange::new(Setting::StepRange.read())
    }

    /// The name, when it was given.
    pub fn given(&self) -> Option<&str> {
        self.name().filter(|_| self.given)
    }

    /// The name NVTX ranges are compared with: the one given, or the one chosen so far.
    pub fn name(&self) -> Option<&str> {
        self.name.get().map(String::as_str)
    }

    /// Whether the user named it (then the recorder chooses none).
    pub fn is_given(&self) -> bool {
        self.given
    }

    /// The recorder's choice; ignored when a name was given or one was chosen already.
    pub fn choose(&self, name: String) {
        if !self.given {
            let _ = self.name.set(name);
        }
    }

    /// The name, when the recorder chose it.
    pub fn chosen(&self) -> Option<&str> {
        self.name().filter(|_| !self.given)
    }

    /// Marks the trace's ranges of this name as steps of cell 0 and says in its workload which
    /// range that was and whether the recorder chose it; a trace with no step range is left
    /// as it is.
    pub fn mark(&self, trace: &mut Trace) {
        if let Some(name) = self.name() {
            trace.mark_steps(name);
            trace.metadata.set_step_range(name, !self.given);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Cell, Marker, MarkerKind, Metadata, TraceBuilder};

    /// A trace with two `step` ranges and one `forward` range.
    fn ranges() -> Trace {
        let mut b = TraceBuilder::new(Metadata {
            cells: vec![Cell::default()],
            ..Default::default()
        });
        let step = b.intern("step");
        let other = b.intern("forward");
        b.trace.markers = [(1, 5, step), (2, 3, other), (6, 9, step)]
            .into_iter()
            .map(|(start, end, name)| Marker {
                start,
                end,
                name,
                ..Default::default()
            })
            .collect();
        b.finish()
    }

    fn step_markers(t: &Trace) -> usize {
        t.markers
            .iter()
            .filter(|m| m.kind == MarkerKind::Step && m.cell == Some(0))
            .count()
    }

    /// Issue 58 d: a step range given with `--trace-budget 0`, where no budget exists, marks
    /// its steps as under a budget (the recorder holds it apart from the budget).
    #[test]
    fn a_given_step_range_marks_its_steps_and_is_not_chosen() {
        let given = StepRange::new(Some("step".into()));
        given.choose("forward".into());
        assert_eq!(given.name(), Some("step"), "a given name stands");
        assert_eq!(given.chosen(), None);
        let mut t = ranges();
        given.mark(&mut t);
        assert_eq!(step_markers(&t), 2);
        assert_eq!(t.metadata.workload["step_range"], "step");
        assert_eq!(t.metadata.chosen_step_range(), None);
        t.validate().unwrap();
    }

    #[test]
    fn a_chosen_step_range_says_so_and_the_first_choice_stands() {
        let open = StepRange::new(None);
        let mut t = ranges();
        open.mark(&mut t);
        assert_eq!(t, ranges(), "nothing chosen: the trace unchanged");
        open.choose("step".into());
        open.choose("forward".into());
        assert_eq!(open.chosen(), Some("step"));
        open.clone().mark(&mut t);
        assert_eq!(step_markers(&t), 2);
        assert_eq!(t.metadata.chosen_step_range(), Some("step"));
    }
}
