//! The budget's decisions ([`BudgetState`]): what each launch, step, capture and tick of the
//! time schedule does to tracing, and what the trace notes and `metadata.sampling` say of it.
#![forbid(unsafe_code)]

use super::{
    Level, PACED_FIRST_NS, PACED_IDLE_NS, PACED_WINDOW_NS, measured_of, paced_level, sampled,
    window_of,
};
use crate::trace::{DurationHistogram, LaunchPeriods, SampledGraph, Sampling};
use std::collections::HashMap;

/// The time schedule's state ([`BudgetState::pace`]).
#[derive(Debug, Default, Clone, Copy)]
struct Pacing {
    /// The first tick: the schedule's time zero.
    started_at: Option<u64>,
    /// Launches and steps counted at the last tick, and when that count last changed.
    counted: u64,
    counted_changed_at: u64,
    /// Pauses the schedule made.
    pauses: u64,
}

/// What a step did, as the budget tells kinds of step apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum StepContent {
    /// Launched no graph.
    Eager,
    /// Launched this executable graph (the first one it launched).
    Replay(usize),
    /// Captured, created or instantiated a graph.
    Building,
}

/// Occurrences of one launch or step kind: seen, and traced.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    seen: u64,
    traced: u64,
}

/// Launches of one executable graph (keyed by its handle, which the driver may reuse after the
/// graph is destroyed: [`BudgetState::exec_created`] starts the count afresh).
#[derive(Debug, Default, Clone)]
struct ExecLaunches {
    /// CUPTI's id of the executable graph, when its creation was seen.
    id: Option<u32>,
    launches: u64,
    traced: u64,
    /// Launches counted by this graph's own schedule (outside step ranges).
    scheduled: u64,
    /// The last scheduled launch: when it started, and the switch count after its decision
    /// (`None` when that decision switched tracing: the switch's own cost follows it).
    last: Option<(u64, Option<u64>)>,
    /// Launch-to-launch host periods with no switch between them, [untraced, traced].
    periods: [DurationHistogram; 2],
}

impl ExecLaunches {
    /// Counts a launch, as traced when tracing is on as it goes ahead.
    fn count_launch(&mut self, tracing: bool) {
        self.launches += 1;
        self.traced += u64::from(tracing);
    }
}

/// Fewest periods on each side for [`SampledGraph::launch_periods`] to be written.
const MIN_LAUNCH_PERIODS: u64 = 5;

/// The running decisions. Every method returns `Some(on)` when tracing must be switched to
/// `on` now (the caller applies it before the launch or step goes ahead, unless another thread
/// is switching: then that thread applies it), `None` when it stays as it is.
#[derive(Debug)]
pub(crate) struct BudgetState {
    limit: u32,
    tracing: bool,
    /// Set when recording ends or a switch failed: no more switching.
    frozen: bool,
    execs: HashMap<usize, ExecLaunches>,
    /// Executable graphs whose handle was reused, with their final counts.
    retired: Vec<ExecLaunches>,
    steps: u64,
    steps_traced: u64,
    /// Per kind of step: what the last step of that kind did, and the counts of its content.
    step_kinds: HashMap<StepContent, Counts>,
    /// What the last step did: the next one is expected to do the same.
    last_content: StepContent,
    /// Stream captures under way: no pause until they end.
    captures: u32,
    pauses: u64,
    /// Tracing switches decided (pauses and resumes).
    switches: u64,
    /// When each applied resume happened (at most [`MAX_RESUMES_KEPT`]).
    resumed_at: Vec<u64>,
    /// Untraced occurrences after each pause that are measured ([`Level::Measured`]):
    /// [`measured_of`] the limit.
    measured_per_pause: u64,
    /// Of those, how many the current pause has left.
    measure_left: u64,
    /// Whether the latest untraced occurrence is measured.
    measuring: bool,
    /// Launches and steps counted, for the pacer to see whether anything is.
    counted: u64,
    pacing: Pacing,
}

/// Resume times kept for the trace: enough for the schedule over any run (one window per
/// doubling, per kind); a program that switches more keeps the first ones.
const MAX_RESUMES_KEPT: usize = 1 << 16;

impl BudgetState {
    /// Tracing starts on.
    pub fn new(limit: u32) -> BudgetState {
        BudgetState {
            limit,
            tracing: true,
            frozen: false,
            execs: HashMap::new(),
            retired: Vec::new(),
            steps: 0,
            steps_traced: 0,
            step_kinds: HashMap::new(),
            last_content: StepContent::Eager,
            captures: 0,
            pauses: 0,
            switches: 0,
            resumed_at: Vec::new(),
            measured_per_pause: u64::from(measured_of(limit)),
            measure_left: 0,
            measuring: false,
            counted: 0,
            pacing: Pacing::default(),
        }
    }

    /// No launch or step is measured after a pause from now on.
    pub fn stop_measuring(&mut self) {
        self.measured_per_pause = 0;
        self.measure_left = 0;
    }

    /// What the recorder should record now.
    pub fn level(&self) -> Level {
        if self.tracing {
            Level::Traced
        } else if self.measuring {
            Level::Measured
        } else {
            Level::Off
        }
    }

    /// An occurrence (launch or step) was decided: when it runs untraced, it is measured while
    /// its pause has measured occurrences left.
    fn occurrence_decided(&mut self) {
        self.counted += 1;
        if !self.tracing {
            self.measuring = self.measure_left > 0;
            self.measure_left = self.measure_left.saturating_sub(1);
        }
    }

    /// Whether the device and API kinds are enabled now.
    pub fn tracing(&self) -> bool {
        self.tracing
    }

    fn switch_to(&mut self, on: bool) -> Option<bool> {
        // A pause inside a capture would hide the captured nodes' creating calls.
        if self.frozen || on == self.tracing || (!on && self.captures > 0) {
            return None;
        }
        self.tracing = on;
        self.pauses += u64::from(!on);
        self.switches += 1;
        if !on {
            self.measure_left = self.measured_per_pause;
        }
        Some(on)
    }

    /// A graph was instantiated: its handle starts with no launches.
    pub fn exec_created(&mut self, exec: usize, id: u32) {
        let fresh = ExecLaunches {
            id: Some(id),
            ..Default::default()
        };
        if let Some(old) = self.execs.insert(exec, fresh)
            && old.launches > 0
        {
            self.retired.push(old);
        }
    }

    /// A launch of executable graph `exec` outside any step range, entered at host time `at`
    /// (ns): the period from its previous launch is kept when no tracing switch was decided
    /// between them (nor at the previous one, whose switch would be inside the period).
    pub fn graph_launch(&mut self, exec: usize, at: u64) -> Option<bool> {
        // The period from the previous launch ran under the state before this decision.
        let (before, was_tracing) = (self.switches, self.tracing);
        let e = self.execs.entry(exec).or_default();
        let want = sampled(e.scheduled, self.limit);
        e.scheduled += 1;
        let switch = self.switch_to(want);
        self.occurrence_decided();
        let (after, tracing) = (self.switches, self.tracing);
        let e = self.execs.entry(exec).or_default();
        if let Some((prev, Some(switches))) = e.last
            && switches == before
        {
            e.periods[usize::from(was_tracing)].add(at.saturating_sub(prev));
        }
        e.last = Some((at, (after == before).then_some(after)));
        e.count_launch(tracing);
        switch
    }

    /// A launch of `exec` inside a step range: the step's decision covers it.
    pub fn graph_launch_in_step(&mut self, exec: usize) {
        self.counted += 1;
        let tracing = self.tracing;
        self.execs.entry(exec).or_default().count_launch(tracing);
    }

    /// A step range started (on the thread that will launch its work): sampled as a step of
    /// the kind the last step was.
    pub fn step_started(&mut self) -> Option<bool> {
        let kind = self.step_kinds.entry(self.last_content).or_default();
        let want = sampled(kind.seen, self.limit);
        kind.seen += 1;
        self.steps += 1;
        let switch = self.switch_to(want);
        self.occurrence_decided();
        let tracing = self.tracing;
        self.step_kinds.entry(self.last_content).or_default().traced += u64::from(tracing);
        self.steps_traced += u64::from(tracing);
        switch
    }

    /// The step range that started last ended, having done `content`: the next step is
    /// expected to do the same.
    pub fn step_ended(&mut self, content: StepContent) {
        self.last_content = content;
    }

    /// A graph is being created or instantiated: tracing resumes, so that its nodes are seen
    /// with their creating calls (it pauses again at the next launch or step over budget).
    pub fn graph_building(&mut self) -> Option<bool> {
        self.switch_to(true)
    }

    /// A stream capture begins: tracing resumes and stays on until every capture has ended.
    pub fn capture_began(&mut self) -> Option<bool> {
        self.captures += 1;
        self.switch_to(true)
    }

    /// A stream capture ended (or failed to begin). Tracing stays as it is until the next
    /// decision.
    pub fn capture_ended(&mut self) {
        self.captures = self.captures.saturating_sub(1);
    }

    /// A tick of the pacer at host time `now` (ns): while the program marks no steps
    /// (`marked`: a step range is set or being chosen) and no launch or step has been counted
    /// for [`PACED_IDLE_NS`], tracing follows the time schedule ([`paced_level`]). Never
    /// pauses inside a capture; frozen, it does nothing.
    pub fn pace(&mut self, now: u64, marked: bool) {
        let start = *self.pacing.started_at.get_or_insert(now);
        if self.counted != self.pacing.counted {
            self.pacing.counted = self.counted;
            self.pacing.counted_changed_at = now;
        }
        let counting =
            self.counted > 0 && now.saturating_sub(self.pacing.counted_changed_at) < PACED_IDLE_NS;
        if marked || counting || self.frozen || self.limit == 0 {
            return;
        }
        let level = paced_level(now.saturating_sub(start));
        let was_tracing = self.tracing;
        self.switch_to(level == Level::Traced);
        if !self.tracing {
            self.measuring = level == Level::Measured;
        }
        self.pacing.pauses += u64::from(was_tracing && !self.tracing);
    }

    /// A resume was applied at host time `at` (ns).
    pub fn resumed(&mut self, at: u64) {
        if self.resumed_at.len() < MAX_RESUMES_KEPT {
            self.resumed_at.push(at);
        }
    }

    /// No more switching (recording is ending, or CUPTI refused a switch).
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    /// Launches of `exec` seen so far.
    #[cfg(test)]
    pub fn launches(&self, exec: usize) -> u64 {
        self.execs.get(&exec).map_or(0, |e| e.launches)
    }

    /// Step ranges seen so far.
    #[cfg(test)]
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Whether [`BudgetState::freeze`] was called.
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// What the budget left untraced, for the trace's metadata (`None` when it traced
    /// everything). Graphs whose creation was not seen (no CUPTI id) are left out.
    pub fn sampling(&self) -> Option<Sampling> {
        let mut graphs: Vec<SampledGraph> = self
            .execs
            .values()
            .chain(&self.retired)
            .filter(|e| e.launches > e.traced)
            .filter_map(|e| {
                let [untraced, traced] = &e.periods;
                Some(SampledGraph {
                    exec: e.id?,
                    launches: e.launches,
                    traced: e.traced,
                    launch_periods: (untraced.count >= MIN_LAUNCH_PERIODS
                        && traced.count >= MIN_LAUNCH_PERIODS)
                        .then(|| LaunchPeriods {
                            traced: traced.summary("traced"),
                            untraced: untraced.summary("untraced"),
                        }),
                })
            })
            .collect();
        graphs.sort_by_key(|g| g.exec);
        let paced = self.pacing.pauses > 0;
        (!graphs.is_empty() || self.steps > self.steps_traced || paced).then_some(Sampling {
            budget: self.limit,
            graphs,
            steps: self.steps,
            steps_traced: self.steps_traced,
            resumed_at: self.resumed_at.clone(),
            markers: None,
            measured_per_pause: u32::try_from(self.measured_per_pause).unwrap_or(u32::MAX),
            paced_pauses: self.pacing.pauses,
        })
    }

    /// What the budget left untraced, for the trace notes (empty when nothing was), with the
    /// longest time one pause or resume took.
    pub fn notes(&self, step_range: Option<&str>, longest_switch_ns: u64) -> Vec<String> {
        let mut notes = Vec::new();
        let mut execs: Vec<&ExecLaunches> = self
            .execs
            .values()
            .chain(&self.retired)
            .filter(|e| e.launches > e.traced)
            .collect();
        execs.sort_by_key(|e| (std::cmp::Reverse(e.launches), e.id));
        if !execs.is_empty() {
            let shown: Vec<String> = execs
                .iter()
                .take(8)
                .map(|e| {
                    let id = e.id.map_or("?".to_string(), |id| id.to_string());
                    format!("graph exec {id}: {} of {} launches", e.traced, e.launches)
                })
                .collect();
            let more = execs.len().saturating_sub(shown.len());
            notes.push(format!(
                "trace budget {}: each executable graph's first {} launches traced, then a window of {} launches at each doubling of the count; traced {}{}",
                self.limit,
                self.limit,
                window_of(self.limit),
                shown.join(", "),
                if more > 0 {
                    format!(" (and {more} more graphs)")
                } else {
                    String::new()
                }
            ));
        }
        if self.steps > self.steps_traced {
            notes.push(format!(
                "trace budget {}: {} of {} `{}` steps traced",
                self.limit,
                self.steps_traced,
                self.steps,
                step_range.unwrap_or("step")
            ));
            let mut kinds: Vec<_> = self.step_kinds.iter().collect();
            kinds.sort_by_key(|(content, _)| **content);
            let exec_id = |exec: usize| {
                self.execs
                    .get(&exec)
                    .and_then(|e| e.id)
                    .map_or("?".to_owned(), |id| id.to_string())
            };
            let shown: Vec<String> = kinds
                .iter()
                .map(|(content, c)| {
                    let what = match content {
                        StepContent::Eager => "eager".to_owned(),
                        StepContent::Replay(exec) => {
                            format!("after replays of exec {}", exec_id(*exec))
                        }
                        StepContent::Building => "after graph building".to_owned(),
                    };
                    format!("{what} {} of {}", c.traced, c.seen)
                })
                .collect();
            if kinds.len() > 1 {
                notes.push(format!(
                    "trace budget {}: steps sampled per kind (each kind is what the step before did): {}",
                    self.limit,
                    shown.join(", ")
                ));
            }
        }
        if self.pacing.pauses > 0 {
            notes.push(format!(
                "trace budget: no steps or graph launches to count for a while, so tracing followed time {} time(s): on for the first {} ms, then a window of {} ms at each doubling of the time, each followed by as long measured",
                self.pacing.pauses,
                PACED_FIRST_NS / 1_000_000,
                PACED_WINDOW_NS / 1_000_000,
            ));
        }
        if self.pauses > 0 {
            let measured = if self.measured_per_pause > 0 {
                format!(
                    ", the {} launches or steps after each pause measured (device records, no API records)",
                    self.measured_per_pause
                )
            } else {
                String::new()
            };
            notes.push(format!(
                "trace budget: tracing paused {} time(s){measured}, the longest switch took {:.1} µs; `gapscope record --trace-budget 0` traces everything",
                self.pauses,
                longest_switch_ns as f64 / 1e3
            ));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::sys;
    use super::super::*;
    use super::*;
    use crate::trace::{SampledGraph, Sampling};
    use std::collections::HashMap;

    #[test]
    fn a_graph_is_traced_for_its_first_launches_then_paused() {
        let mut b = BudgetState::new(4);
        b.exec_created(0xa, 7);
        // Launch 4 is the first left out (windows of 1: the next is launch 8).
        let switches: Vec<Option<bool>> = (0..6).map(|_| b.graph_launch(0xa, 0)).collect();
        assert_eq!(switches, [None, None, None, None, Some(false), None]);
        assert!(!b.tracing());
        let notes = b.notes(None, 0);
        assert!(
            notes[0].contains("graph exec 7: 4 of 6 launches"),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.contains("paused 1 time")),
            "{notes:?}"
        );
        let sampling = b.sampling().expect("something was left out");
        let graph = SampledGraph {
            exec: 7,
            launches: 6,
            traced: 4,
            launch_periods: None,
        };
        assert_eq!(sampling.graphs, [graph]);
        assert_eq!((sampling.budget, sampling.steps), (4, 0));
        assert_eq!(b.graph_launch(0xa, 0), None, "launch 6");
        assert_eq!(b.graph_launch(0xa, 0), None, "launch 7");
        assert_eq!(
            b.graph_launch(0xa, 0),
            Some(true),
            "launch 8: the next window"
        );
    }

    /// 400 launches of one graph under a budget of 16, traced ones 30 µs apart and untraced
    /// ones 20 µs apart, with a switch costing 500 µs inside the launch that decides it: the
    /// periods kept are exactly 30 and 20 µs, none spans a switch.
    #[test]
    fn launch_periods_keep_what_tracing_adds_and_leave_out_the_switches() {
        let mut b = BudgetState::new(16);
        b.exec_created(0xa, 3);
        let mut at = 0u64;
        for _ in 0..400 {
            let switched = b.graph_launch(0xa, at).is_some();
            at += if b.tracing() { 30_000 } else { 20_000 } + if switched { 500_000 } else { 0 };
        }
        let sampling = b.sampling().expect("launches were left out");
        let g = &sampling.graphs[0];
        assert_eq!((g.exec, g.launches), (3, 400));
        let p = g.launch_periods.as_ref().expect("both sides measured");
        let (traced, untraced) = (&p.traced, &p.untraced);
        assert_eq!((traced.min_ns, traced.max_ns), (30_000, 30_000));
        assert_eq!((untraced.min_ns, untraced.max_ns), (20_000, 20_000));
        assert_eq!(
            traced.count + untraced.count + b.switches,
            399,
            "one period left out after each switch: {g:?}"
        );
        assert!(traced.count >= 15 && untraced.count >= 100, "{g:?}");
    }

    #[test]
    fn no_launch_periods_without_enough_untraced_launches() {
        let mut b = BudgetState::new(4);
        b.exec_created(0xa, 3);
        for i in 0..7 {
            b.graph_launch(0xa, i * 1_000);
        }
        let sampling = b.sampling().expect("launches were left out");
        assert_eq!(sampling.graphs[0].launch_periods, None);
    }

    /// Seven launches of `exec` under a budget of 4: the last three are left out.
    fn over_budget(b: &mut BudgetState, exec: usize) {
        for _ in 0..7 {
            b.graph_launch(exec, 0);
        }
        assert!(!b.tracing(), "launch 6 is left out");
    }

    #[test]
    fn a_new_graph_resumes_tracing_for_its_first_launch() {
        let mut b = BudgetState::new(4);
        over_budget(&mut b, 0xa);
        assert_eq!(b.graph_launch(0xb, 0), Some(true), "fresh graph: traced");
        assert_eq!(
            b.graph_launch(0xa, 0),
            Some(false),
            "launch 7 of 0xa: left out"
        );
        assert_eq!(b.graph_launch(0xa, 0), Some(true), "launch 8: sampled");
        assert_eq!(b.graph_launch(0xa, 0), Some(false), "launch 9: left out");
        assert_eq!(b.graph_launch(0xc, 0), Some(true));
        assert_eq!(b.graph_launch(0xd, 0), None, "still on");
    }

    #[test]
    fn a_resume_turns_callbacks_on_first_and_the_filter_last_a_pause_the_kinds_first() {
        let (kernel, runtime) = (
            sys::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
            sys::CUPTI_ACTIVITY_KIND_RUNTIME,
        );
        let kinds = [kernel, runtime];
        let callbacks = [(1, 7), (2, 8)];
        let filter = [(1, 3, true), (2, 4, false)];
        let plan = |from, to, filter_off| {
            switch_plan(from, to, &kinds, &callbacks, Some(&filter), filter_off)
        };
        let callbacks_switched = [
            SwitchOp::Callback { domain: 1, cbid: 7 },
            SwitchOp::Callback { domain: 2, cbid: 8 },
        ];
        let record = |domain, cbid, on| SwitchOp::ApiRecord { domain, cbid, on };
        let filter_applied = [record(1, 3, true), record(2, 4, false)];
        assert_eq!(
            plan(Level::Off, Level::Traced, false),
            [
                &callbacks_switched[..],
                &[SwitchOp::Kind(kernel), SwitchOp::Kind(runtime)],
                &filter_applied,
            ]
            .concat()
        );
        assert_eq!(
            plan(Level::Traced, Level::Off, false),
            [
                &[SwitchOp::Kind(kernel), SwitchOp::Kind(runtime)][..],
                &callbacks_switched,
            ]
            .concat(),
            "a pause leaves the filter as it is"
        );
        assert_eq!(
            plan(Level::Traced, Level::Off, true)[0],
            record(1, 3, false),
            "or first switches off the calls it records"
        );
        assert_eq!(
            switch_plan(Level::Off, Level::Traced, &kinds, &[], None, false).len(),
            2,
            "no filter: kinds only"
        );
        // A pause measures first: the API kind and the callbacks go, the device kinds stay.
        assert_eq!(
            plan(Level::Traced, Level::Measured, true),
            [
                &[record(1, 3, false), SwitchOp::Kind(runtime)][..],
                &callbacks_switched,
            ]
            .concat()
        );
        assert_eq!(
            plan(Level::Measured, Level::Off, true),
            [SwitchOp::Kind(kernel)],
            "then the device kinds alone"
        );
        assert_eq!(
            plan(Level::Measured, Level::Traced, true),
            [
                &callbacks_switched[..],
                &[SwitchOp::Kind(runtime)],
                &filter_applied,
            ]
            .concat(),
            "a resume from measuring turns on what measuring left off"
        );
    }

    #[test]
    fn the_untraced_occurrences_after_each_pause_are_measured_twice_as_many_as_a_window_holds() {
        // limit 8: windows of 2; launches 0-7 traced, 8-15 not, 16-17 traced, 18-31 not,
        // 32-33 traced: of the untraced, four after each pause are measured.
        let mut b = BudgetState::new(8);
        b.exec_created(0xa, 1);
        let levels: Vec<Level> = (0..34)
            .map(|_| {
                b.graph_launch(0xa, 0);
                b.level()
            })
            .collect();
        use Level::{Measured as M, Off as O, Traced as T};
        assert_eq!(
            levels,
            [
                T, T, T, T, T, T, T, T, M, M, M, M, O, O, O, O, T, T, M, M, M, M, O, O, O, O, O, O,
                O, O, O, O, T, T
            ]
        );
    }

    #[test]
    fn building_a_graph_resumes_tracing_until_the_next_launch_over_budget() {
        let mut b = BudgetState::new(4);
        over_budget(&mut b, 0xa);
        assert_eq!(
            b.graph_building(),
            Some(true),
            "graph built while paused: resumed"
        );
        assert_eq!(b.graph_building(), None, "already on");
        assert_eq!(
            b.graph_launch(0xa, 0),
            Some(false),
            "launch 7: left out again, paused"
        );
        assert_eq!(b.graph_launch(0xa, 0), Some(true), "launch 8: sampled");
        assert_eq!(b.launches(0xa), 9);
        b.freeze();
        assert_eq!(b.graph_building(), None, "frozen");
    }

    #[test]
    fn a_reused_handle_counts_afresh_after_instantiation() {
        let mut b = BudgetState::new(4);
        b.exec_created(0xa, 1);
        over_budget(&mut b, 0xa);
        b.exec_created(0xa, 2);
        assert_eq!(
            b.graph_launch(0xa, 0),
            Some(true),
            "a new graph under the old handle"
        );
        let notes = b.notes(None, 0);
        assert!(
            notes[0].contains("graph exec 1: 4 of 7 launches"),
            "{notes:?}"
        );
        assert!(!notes[0].contains("graph exec 2"), "{notes:?}");
    }

    #[test]
    fn steps_after_the_limit_are_paused() {
        let mut b = BudgetState::new(4);
        let switches: Vec<Option<bool>> = (0..6).map(|_| b.step_started()).collect();
        assert_eq!(switches, [None, None, None, None, Some(false), None]);
        let sampling = b.sampling().unwrap();
        assert_eq!((sampling.steps, sampling.steps_traced), (6, 4));
        assert!(sampling.graphs.is_empty());
        let notes = b.notes(Some("decode_step"), 0);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("4 of 6 `decode_step` steps")),
            "{notes:?}"
        );
    }

    #[test]
    fn frozen_never_switches() {
        let mut b = BudgetState::new(4);
        b.graph_launch(0xa, 0);
        b.freeze();
        assert_eq!(b.graph_launch(0xa, 0), None);
        assert!(b.tracing(), "left as it was when frozen");
    }

    #[test]
    fn the_sample_keeps_one_window_of_a_quarter_of_the_limit_at_each_doubling() {
        assert!((0..1000).all(|n| sampled(n, 0)), "0: everything");
        let traced: Vec<u64> = (0..1100).filter(|&n| sampled(n, 64)).collect();
        // The first 64, then a window of 16 at 128, 256, 512 and 1024.
        let windows: Vec<(u64, u64)> = traced
            .chunk_by(|a, b| b == &(a + 1))
            .map(|w| (w[0], w.len() as u64))
            .collect();
        assert_eq!(
            windows,
            [(0, 64), (128, 16), (256, 16), (512, 16), (1024, 16)]
        );
        // A quarter of the limit per doubling: a logarithmic count over a long run.
        let long = (0..700_000u64).filter(|&n| sampled(n, 64)).count();
        assert_eq!(long, 64 + 16 * 13);
        // A 300-step phase under the default limit runs mostly untraced.
        let default = super::super::TraceBudget::DEFAULT_LIMIT;
        let phase = (0..300u64).filter(|&n| sampled(n, default)).count();
        assert!(phase * 8 < 300, "{phase} of 300 traced");
        assert!(sampled(u64::MAX, 1) || !sampled(u64::MAX, 1), "no overflow");
        assert!(sampled(u64::MAX, u32::MAX) || !sampled(u64::MAX, u32::MAX));
    }

    #[test]
    fn a_long_eager_phase_leaves_the_graphed_phase_its_own_sample() {
        let mut b = BudgetState::new(64);
        let traced = |b: &mut BudgetState, content: StepContent, steps: u32| {
            let mut n = 0;
            for _ in 0..steps {
                b.step_started();
                n += u32::from(b.tracing());
                b.step_ended(content);
            }
            n
        };
        let eager = traced(&mut b, StepContent::Eager, 320);
        assert_eq!(
            eager,
            64 + 16 + 16,
            "320 eager steps: windows at 128 and 256"
        );
        // One capture step, then the replays: the first replay step is still sampled as a
        // step after a capture (what the step before did), the rest as replays of exec 0xa.
        b.capture_began();
        assert_eq!(traced(&mut b, StepContent::Building, 1), 1);
        b.capture_ended();
        let replays = traced(&mut b, StepContent::Replay(0xa), 200);
        assert_eq!(replays, 1 + 64 + 16, "of 200 replay steps");
        let notes = b.notes(Some("decode_step"), 0).join("\n");
        // The capture step was sampled as eager (the step before it was) and held on.
        assert!(
            notes.contains("eager 97 of 321")
                && notes.contains("after graph building 1 of 1")
                && notes.contains("after replays of exec ? 80 of 199"),
            "{notes}"
        );
    }

    #[test]
    fn time_paces_the_sample_while_nothing_is_counted() {
        use Level::{Measured as M, Off as O, Traced as T};
        let ms = 1_000_000;
        let at = |t: u64| paced_level(t * ms);
        // On for the first 500 ms, measured for 100; then a window at 1 s, 2 s, 4 s ….
        assert_eq!([at(0), at(499), at(500), at(599), at(600)], [T, T, M, M, O]);
        assert_eq!(
            [at(999), at(1000), at(1099), at(1100), at(1199), at(1200)],
            [O, T, T, M, M, O]
        );
        assert_eq!(
            [at(1999), at(2000), at(2150), at(2250), at(4050)],
            [O, T, M, O, T]
        );
        // Over a 64 s run: 500 ms, then 100 ms at 1, 2, 4, 8, 16 and 32 s.
        let traced = (0..64_000).filter(|&t| at(t) == T).count();
        assert_eq!(traced, 500 + 100 * 6);

        let mut b = BudgetState::new(16);
        let levels: Vec<Level> = [0, 300, 550, 700, 1050, 1150, 1300]
            .map(|t| {
                b.pace(t * ms, false);
                b.level()
            })
            .to_vec();
        assert_eq!(levels, [T, T, M, O, T, M, O]);
        let sampling = b.sampling().expect("the schedule paused");
        assert_eq!(sampling.paced_pauses, 2);
        assert!(
            b.notes(None, 0)
                .iter()
                .any(|n| n.contains("followed time 2 time(s)")),
            "{:?}",
            b.notes(None, 0)
        );
    }

    /// The recorder's time schedule applied to a whole-traced recording of
    /// `examples/transformers_generate.py` (one H200, default `record` before the schedule
    /// existed): what a paced recording of it keeps — API records in traced windows, device
    /// records in traced and measured ones — until the first graph launch, after which the
    /// counted schedule takes over (kept whole here).
    fn paced(trace: &crate::trace::Trace) -> crate::trace::Trace {
        let mut t = trace.clone();
        let t0 = t.api_calls.iter().map(|c| c.start).min().unwrap_or(0);
        let graphed_from = t
            .api_calls
            .iter()
            .filter(|c| t.str(c.name).starts_with("cudaGraphLaunch"))
            .map(|c| c.start)
            .min()
            .unwrap_or(u64::MAX);
        let level = |at: u64| {
            if at >= graphed_from {
                Level::Traced
            } else {
                paced_level(at.saturating_sub(t0))
            }
        };
        let launched: HashMap<u32, u64> = t.api_calls.iter().map(|c| (c.corr, c.start)).collect();
        let kept = |corr: u32, start: u64| {
            level(launched.get(&corr).copied().unwrap_or(start)) != Level::Off
        };
        t.api_calls.retain(|c| level(c.start) == Level::Traced);
        t.kernels.retain(|k| kept(k.corr, k.start));
        t.memcpys.retain(|m| kept(m.corr, m.start));
        t.memsets.retain(|m| kept(m.corr, m.start));
        let windows = (0..graphed_from.saturating_sub(t0) / 1_000_000)
            .filter(|&ms| {
                paced_level(ms * 1_000_000) == Level::Traced
                    && paced_level((ms + 1) * 1_000_000) != Level::Traced
            })
            .count();
        t.metadata.sampling = Some(Sampling {
            budget: 16,
            graphs: Vec::new(),
            steps: 0,
            steps_traced: 0,
            resumed_at: Vec::new(),
            markers: None,
            measured_per_pause: 4,
            paced_pauses: windows as u64,
        });
        t
    }

    #[test]
    fn a_paced_generate_loop_keeps_a_small_trace_one_cell_and_its_untraced_period() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/traces/transformers-generate-record-h200.json.gz"
        );
        let whole = crate::trace::read_trace(std::path::Path::new(path)).unwrap();
        let t = paced(&whole);
        let json = serde_json::to_vec(&t).unwrap();
        let a = crate::analysis::analyze(
            std::slice::from_ref(&t),
            &["paced".into()],
            &Default::default(),
        );
        // One cell for the token loop, found in the kernel sequence, with its untraced period
        // from the measured windows and the tracer's share read on the device clock (≈ 1: the
        // recording traced everything, so its measured and traced windows ran alike).
        let eager: Vec<_> = a.cells.iter().filter(|c| c.graph_group.is_none()).collect();
        assert_eq!(
            eager.len(),
            1,
            "{:?}",
            a.cells.iter().map(|c| &c.label).collect::<Vec<_>>()
        );
        let cell = eager[0];
        assert!(cell.found.is_some(), "{}", cell.label);
        let untraced = cell
            .untraced_period
            .expect("measured windows give the loop its period");
        assert!(
            untraced.n >= crate::analysis::thresholds::UNTRACED_MIN_PERIODS,
            "{untraced:?}"
        );
        let share = cell.tracer_share.as_ref().expect("a tracer's share");
        assert!((0.9..1.1).contains(&share.ratio), "{share:?}");
        // Under 5 MB of trace (the whole recording: 144,638 kernels, about 17 MB).
        assert!(json.len() < 5_000_000, "{} bytes", json.len());
        assert!(
            t.kernels.len() * 3 < whole.kernels.len() * 2,
            "{}",
            t.kernels.len()
        );
    }

    #[test]
    fn counted_launches_or_marked_steps_keep_the_time_schedule_out() {
        let ms = 1_000_000;
        let mut b = BudgetState::new(16);
        b.pace(0, false);
        b.exec_created(0xa, 1);
        b.graph_launch(0xa, 0);
        // A launch was counted 100 ms ago: the counted schedule keeps control.
        b.pace(700 * ms, false);
        assert!(b.tracing());
        b.pace(800 * ms, false);
        assert!(b.tracing(), "counted within the idle time");
        // Nothing counted for 200 ms: time takes over (off at 900 ms).
        b.pace(1_000 * ms + 1, false);
        assert!(b.tracing(), "1 s: a window");
        b.pace(1_300 * ms, false);
        assert_eq!(b.level(), Level::Off);
        // A marked program (a step range set or being chosen) is never paced.
        let mut marked = BudgetState::new(16);
        marked.pace(0, true);
        marked.pace(700 * ms, true);
        assert!(marked.tracing());
        // Nor is one inside a capture.
        let mut capturing = BudgetState::new(16);
        capturing.pace(0, false);
        capturing.capture_began();
        capturing.pace(700 * ms, false);
        assert!(capturing.tracing());
    }

    #[test]
    fn no_pause_while_a_capture_is_under_way() {
        let mut b = BudgetState::new(4);
        let first: Vec<Option<bool>> = (0..6).map(|_| b.step_started()).collect();
        assert_eq!(
            first,
            [None, None, None, None, Some(false), None],
            "step 4 is left out"
        );
        assert_eq!(b.capture_began(), Some(true), "a capture resumes tracing");
        // A step range pushed inside the capture (the captured function marks its steps).
        for _ in 0..4 {
            assert_eq!(b.step_started(), None, "held on during the capture");
            assert!(b.tracing());
        }
        assert_eq!(b.graph_launch(0xa, 0), None);
        b.capture_ended();
        b.capture_ended(); // an unmatched end changes nothing
        let later: Vec<Option<bool>> = (0..8).map(|_| b.step_started()).collect();
        assert!(later.contains(&Some(false)), "pauses again: {later:?}");
    }
}
