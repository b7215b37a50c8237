//! Which NVTX ranges a budgeted recording keeps: a trace bounded by what was traced, not by
//! how long the program ran.
//!
//! The trace budget ([`super`]) switches tracing on and off; [`KeepWindows`] follows
//! it in host time: a window opens when tracing goes on and stays open while it is on and for
//! the next `untraced_kept` untraced launches or steps after each pause (so the trace holds
//! untraced steps next to traced ones, as many as the budget's windows, for the tracer's-share
//! measurement). A marker that overlaps a window is kept whole, nested ranges included: the
//! ranges open at any graph node's creation are kept, since building a graph always resumes
//! tracing and a stream capture holds it on. Every other marker only counts in a per-name
//! summary ([`MarkerKeeping`]): count and host-duration histogram.
#![forbid(unsafe_code)]

use crate::trace::{DurationHistogram, MarkerSample, OTHER_RANGE_NAMES, RangeSummary, StrId};
use std::collections::HashMap;

/// Windows kept at most (as the budget keeps resume times): a program that switches more
/// keeps no more markers once they are used up, and the trace notes say so.
pub(crate) const MAX_WINDOWS: usize = 1 << 16;

/// Range names summarised one by one at most; later names share one summary.
pub(crate) const MAX_SUMMARISED_NAMES: usize = 1024;

/// The host-time windows whose markers are kept, as the budget's decisions open and close them.
#[derive(Debug, Clone)]
pub(crate) struct KeepWindows {
    closed: Vec<(u64, u64)>,
    /// Start of the window open now.
    open: Option<u64>,
    /// Untraced occurrences kept after each pause.
    untraced_kept: u32,
    /// Untraced occurrences the open window still covers.
    left: u32,
    /// Every marker is kept from now on (switching failed: what was traced is not known).
    keep_all: bool,
    /// [`MAX_WINDOWS`] were used up.
    pub full: bool,
}

impl KeepWindows {
    /// Tracing starts on: a window is open from the start of the recording.
    pub fn new(untraced_kept: u32) -> KeepWindows {
        KeepWindows {
            closed: Vec::new(),
            open: Some(0),
            untraced_kept,
            left: untraced_kept,
            keep_all: false,
            full: false,
        }
    }

    /// The budget decided on a launch, step or graph building, leaving tracing `tracing`;
    /// `now` is the host time (read only when a window opens or closes).
    pub fn decided(&mut self, tracing: bool, now: impl FnOnce() -> u64) {
        if self.keep_all {
            return;
        }
        if tracing {
            self.left = self.untraced_kept;
            if self.open.is_none() {
                if self.closed.len() + 1 >= MAX_WINDOWS {
                    self.full = true;
                } else {
                    self.open = Some(now());
                }
            }
            return;
        }
        // An untraced launch or step (nothing else leaves tracing off).
        let Some(start) = self.open else {
            return;
        };
        // The K-th untraced occurrence closes the window as it starts: its range (started
        // just before) overlaps the window's end, the next one's does not.
        if self.left > 1 {
            self.left -= 1;
        } else {
            let end = now().max(start);
            self.closed.push((start, end));
            self.open = None;
        }
    }

    /// Untraced launches or steps kept after each pause.
    pub fn untraced_kept(&self) -> u32 {
        self.untraced_kept
    }

    /// Keep every marker from now on.
    pub fn keep_all(&mut self) {
        self.keep_all = true;
    }

    /// The windows as they stand, the open one to `u64::MAX`; `None` when every marker is kept.
    pub fn snapshot(&self) -> Option<Vec<(u64, u64)>> {
        if self.keep_all {
            return None;
        }
        let mut w = self.closed.clone();
        w.extend(self.open.map(|s| (s, u64::MAX)));
        Some(w)
    }
}

/// Whether `[start, end]` overlaps one of `windows` (sorted, disjoint).
pub(crate) fn overlaps(windows: &[(u64, u64)], start: u64, end: u64) -> bool {
    let i = windows.partition_point(|w| w.0 <= end);
    i > 0 && windows[i - 1].1 >= start
}

/// The markers left out so far, summarised, and the windows that decide (see the module doc).
#[derive(Debug, Clone, Default)]
pub(crate) struct MarkerKeeping {
    /// `None`: keep everything (no windows known, or switching failed).
    windows: Option<Vec<(u64, u64)>>,
    left_out: HashMap<StrId, DurationHistogram>,
    /// Names past [`MAX_SUMMARISED_NAMES`].
    other: DurationHistogram,
}

impl MarkerKeeping {
    /// Decides with `windows` from now on (a [`KeepWindows::snapshot`]).
    pub fn set_windows(&mut self, windows: Option<Vec<(u64, u64)>>) {
        self.windows = windows;
    }

    /// Whether a marker `[start, end]` named `name` is kept; if not, it is summarised.
    pub fn keep(&mut self, name: StrId, start: u64, end: u64) -> bool {
        let Some(windows) = &self.windows else {
            return true;
        };
        if overlaps(windows, start, end) {
            return true;
        }
        let room = self.left_out.len() < MAX_SUMMARISED_NAMES;
        let h = match self.left_out.get_mut(&name) {
            Some(h) => h,
            None if room => self.left_out.entry(name).or_default(),
            None => &mut self.other,
        };
        h.add(end.saturating_sub(start));
        false
    }

    /// Markers left out so far.
    pub fn left_out(&self) -> u64 {
        self.left_out.values().map(|h| h.count).sum::<u64>() + self.other.count
    }

    /// For the trace: the final windows and the summaries, most frequent first; `None` when
    /// nothing was left out.
    pub fn sample(
        &self,
        windows: Vec<(u64, u64)>,
        name: impl Fn(StrId) -> String,
    ) -> Option<MarkerSample> {
        if self.left_out() == 0 {
            return None;
        }
        let mut left_out: Vec<RangeSummary> = self
            .left_out
            .iter()
            .map(|(&id, h)| h.summary(&name(id)))
            .collect();
        if self.other.count > 0 {
            left_out.push(self.other.summary(OTHER_RANGE_NAMES));
        }
        left_out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
        Some(MarkerSample {
            kept_windows: windows.into_iter().map(|(a, b)| [a, b]).collect(),
            left_out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::cupti::budget::{BudgetState, StepContent};

    /// Steps 0..n, one per µs, through the budget and the windows as the callbacks drive
    /// them; returns the windows and which steps' markers ([t, t + 500 ns]) are kept.
    fn run(limit: u32, n: u64) -> (Vec<(u64, u64)>, Vec<bool>, Vec<bool>) {
        let mut budget = BudgetState::new(limit);
        let mut windows = KeepWindows::new(crate::record::cupti::budget::measured_of(limit));
        let mut traced = Vec::new();
        for i in 0..n {
            let at = 1_000 + i * 1_000;
            budget.step_started();
            windows.decided(budget.tracing(), || at);
            traced.push(budget.tracing());
            budget.step_ended(StepContent::Eager);
        }
        let w = windows.snapshot().unwrap();
        let kept = (0..n)
            .map(|i| overlaps(&w, 1_000 + i * 1_000, 1_500 + i * 1_000))
            .collect();
        (w, kept, traced)
    }

    #[test]
    fn traced_steps_and_the_window_of_untraced_steps_after_each_pause_are_kept() {
        let (windows, kept, traced) = run(8, 200);
        for i in 0..200 {
            assert!(!traced[i] || kept[i], "traced step {i} kept");
        }
        // Budget 8: windows of 2 steps after the first 8; after each pause the first four
        // untraced steps are kept (fewer when the next traced window comes sooner).
        let mut expected = [false; 200];
        for i in 1..200 {
            if traced[i - 1] && !traced[i] {
                for e in expected.iter_mut().skip(i).take(4) {
                    *e = true;
                }
            }
        }
        for i in 0..200 {
            assert_eq!(kept[i], traced[i] || expected[i], "step {i}");
        }
        // Between windows every step is left out.
        let dropped = kept.iter().filter(|&&k| !k).count();
        assert!(dropped > 100, "{dropped} of 200 left out");
        // The windows are sorted and disjoint; the last is open.
        assert!(windows.windows(2).all(|w| w[0].1 < w[1].0), "{windows:?}");
        assert_eq!(
            windows.last().unwrap().1 == u64::MAX,
            traced[199] || kept[199]
        );
    }

    #[test]
    fn a_long_run_keeps_a_logarithmic_number_of_steps() {
        let (windows, kept, traced) = run(64, 700_000);
        let kept_n = kept.iter().filter(|&&k| k).count();
        let traced_n = traced.iter().filter(|&&t| t).count();
        assert_eq!(traced_n, 64 + 16 * 13, "one window of 16 per doubling");
        assert!(kept_n < 3 * traced_n, "{kept_n} kept of 700,000");
        assert!(kept_n > traced_n + 150, "untraced steps kept too: {kept_n}");
        assert!(windows.len() < 64, "{} windows", windows.len());
    }

    #[test]
    fn markers_outside_the_windows_are_summarised_per_name() {
        let mut keeping = MarkerKeeping::default();
        assert!(keeping.keep(1, 5, 10), "no windows: everything kept");
        keeping.set_windows(Some(vec![(100, 200), (1_000, u64::MAX)]));
        assert!(keeping.keep(1, 50, 100), "touches a window's start");
        assert!(keeping.keep(1, 150, 160));
        assert!(keeping.keep(1, 190, 300), "overlaps a window's end");
        assert!(keeping.keep(2, 5_000, 6_000), "inside the open window");
        assert!(!keeping.keep(1, 300, 400));
        assert!(!keeping.keep(1, 500, 700));
        assert!(!keeping.keep(2, 10, 20));
        assert_eq!(keeping.left_out(), 3);
        let s = keeping
            .sample(vec![(100, 200)], |id| format!("r{id}"))
            .unwrap();
        assert_eq!(s.kept_windows, [[100, 200]]);
        let names: Vec<(&str, u64, u64, u64)> = s
            .left_out
            .iter()
            .map(|r| (r.name.as_str(), r.count, r.min_ns, r.max_ns))
            .collect();
        assert_eq!(names, [("r1", 2, 100, 200), ("r2", 1, 10, 10)]);
        assert_eq!(s.left_out[0].total_ns, 300);
        // Switching failed: everything is kept again.
        keeping.set_windows(None);
        assert!(keeping.keep(1, 300, 400));
    }

    #[test]
    fn names_past_the_limit_share_one_summary() {
        let mut keeping = MarkerKeeping::default();
        keeping.set_windows(Some(Vec::new()));
        for id in 0..(MAX_SUMMARISED_NAMES as u32 + 10) {
            assert!(!keeping.keep(id, 0, 7));
        }
        let s = keeping.sample(Vec::new(), |id| id.to_string()).unwrap();
        assert_eq!(s.left_out.len(), MAX_SUMMARISED_NAMES + 1);
        let other = s
            .left_out
            .iter()
            .find(|r| r.name == OTHER_RANGE_NAMES)
            .unwrap();
        assert_eq!(other.count, 10);
    }

    #[test]
    fn keep_all_and_the_window_limit() {
        let mut w = KeepWindows::new(0);
        for i in 0..(2 * MAX_WINDOWS as u64) {
            w.decided(false, || 2 * i);
            w.decided(true, || 2 * i + 1);
        }
        assert!(w.full);
        assert_eq!(w.snapshot().unwrap().len(), MAX_WINDOWS - 1);
        w.keep_all();
        assert_eq!(w.snapshot(), None);
    }
}
