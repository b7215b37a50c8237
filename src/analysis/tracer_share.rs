//! What tracing added to a cell's step period, measured in the same run. Under `gapscope
//! record`'s trace budget the measured launches and steps give each cell its untraced period
//! on the device's clock ([`super::untraced`]), set against its traced period; in traces
//! recorded before measuring existed, the untraced step ranges still have their NVTX markers,
//! so the host period between two untraced steps is set against that between two traced ones.
#![forbid(unsafe_code)]

use super::stats::Stat;
use super::thresholds::TRACER_SHARE_MIN_PERIODS;
use crate::trace::{MarkerKind, RangeSummary, Trace};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Which clock a [`TracerShare`]'s periods were read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareClock {
    /// The device's: the traced steps' period against the measured ones' (end to end).
    Device,
    /// The host's: step ranges or graph launches, start to next start (older traces).
    Host,
}

/// A cell's traced and untraced step periods (ns), and what tracing added.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TracerShare {
    pub clock: ShareClock,
    pub traced: Stat,
    pub untraced: Stat,
    /// traced / untraced median.
    pub ratio: f64,
    /// traced − untraced median (ns): what tracing added to each step.
    pub added_ns: f64,
}

impl TracerShare {
    /// "tracing ×1.12 on the device period (+15.2 µs: traced 142.1 µs n=63, untraced 126.9 µs
    /// n=135)".
    pub fn describe(&self) -> String {
        format!(
            "{} ({:+.1} µs: traced {:.1} µs n={}, untraced {:.1} µs n={})",
            self.describe_short(),
            self.added_ns / 1e3,
            self.traced.median / 1e3,
            self.traced.n,
            self.untraced.median / 1e3,
            self.untraced.n
        )
    }

    /// [`Self::describe`] without its figures: "tracing ×1.12 on the device period".
    pub fn describe_short(&self) -> String {
        let on = match self.clock {
            ShareClock::Device => "the device period",
            ShareClock::Host => "the host step",
        };
        format!("tracing ×{:.2} on {on}", self.ratio)
    }

    /// Whether a period difference between two cells (ns) is no larger than what tracing can
    /// explain: what it added to either cell's step.
    pub fn explains(shares: [Option<&TracerShare>; 2], difference_ns: f64) -> Option<bool> {
        let added = shares
            .iter()
            .flatten()
            .map(|s| s.added_ns.abs())
            .reduce(f64::max)?;
        Some(difference_ns.abs() <= added)
    }
}

/// A step marker as the share sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct StepSeen {
    start: u64,
    traced: bool,
    /// Whether it launched a graph; `None` for an untraced step whose traced neighbours
    /// disagree (or that has none).
    graphed: Option<bool>,
    /// The kept window it lies in (`None`: the trace keeps every marker; `Some(None)`: in none).
    window: Option<Option<usize>>,
}

impl StepSeen {
    fn of_kind(&self, steps: StepsOf) -> bool {
        match steps {
            StepsOf::All => true,
            StepsOf::Graphed => self.graphed == Some(true),
            StepsOf::Ungraphed => self.graphed == Some(false),
        }
    }
}

/// Gives each untraced step the kind of the traced steps on either side of it, when they agree
/// or only one side has any (`steps` sorted by start, one thread's).
fn infer_untraced_kinds(steps: &mut [StepSeen]) {
    let mut before = None;
    let mut after: Vec<Option<bool>> = vec![None; steps.len()];
    let mut next = None;
    for (i, s) in steps.iter().enumerate().rev() {
        after[i] = next;
        if s.traced {
            next = s.graphed;
        }
    }
    for (s, after) in steps.iter_mut().zip(after) {
        if s.traced {
            before = s.graphed;
        } else {
            // At the start or the end of the steps one side is enough: the budget traces the
            // first steps of each kind, so a change of kind shows in a traced step soon after.
            s.graphed = match (before, after) {
                (Some(b), Some(a)) => (a == b).then_some(a),
                (b, a) => b.or(a),
            };
        }
    }
}

/// The share for the step markers of metadata cell `cell`, when the trace budget left enough of
/// them untraced (a marker is traced when an API call was recorded inside it on its thread: the
/// API kinds pause with the rest). When the recorder kept only some markers (`sampling.markers`),
/// two steps are consecutive only inside one of its kept windows: the steps between two windows
/// are left out.
pub fn of_marked_cell(trace: &Trace, cell: usize) -> Option<TracerShare> {
    trace.metadata.sampling.as_ref()?;
    of_marked_cell_with(trace, cell, &CallStarts::new(trace), StepsOf::All)
}

/// Which steps of a marked cell a share is measured on: when one range held steps that ran
/// differently (`steps::split_mixed_regimes`), each half's share is its own steps'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepsOf {
    /// Every step of the range.
    All,
    /// The steps that launched a graph: a traced step is one when a graph launch call was
    /// recorded inside it, an untraced one when the traced steps on either side of it on its
    /// thread are, or the one side that has any (nothing of an untraced step is recorded but
    /// its marker).
    Graphed,
    /// The steps that launched none, told apart as [`StepsOf::Graphed`] (eager steps and
    /// compiled ones without graphs are not told apart: the eager half of such a split pools
    /// them, as the compiled half's share over all the range's steps does).
    Ungraphed,
}

/// The start times of a trace's API calls, per thread, sorted: what tells a traced step marker
/// from an untraced one, and one that launched a graph. Built once per trace and shared by its
/// cells.
#[derive(Debug, Default)]
pub struct CallStarts {
    per_thread: FxHashMap<u32, Vec<u64>>,
    graph_launches: FxHashMap<u32, Vec<u64>>,
}

impl CallStarts {
    pub fn new(trace: &Trace) -> CallStarts {
        let mut per_thread: FxHashMap<u32, Vec<u64>> = FxHashMap::default();
        let mut graph_launches: FxHashMap<u32, Vec<u64>> = FxHashMap::default();
        let mut is_graph_launch = FxHashMap::default();
        for c in &trace.api_calls {
            per_thread.entry(c.thread).or_default().push(c.start);
            let graph = *is_graph_launch
                .entry(c.name)
                .or_insert_with(|| crate::trace::is_graph_launch_call(trace.str(c.name)));
            if graph {
                graph_launches.entry(c.thread).or_default().push(c.start);
            }
        }
        for starts in per_thread.values_mut().chain(graph_launches.values_mut()) {
            starts.sort_unstable();
        }
        CallStarts {
            per_thread,
            graph_launches,
        }
    }

    /// Whether an API call on `thread` starts within `[start, end]`.
    fn any_within(&self, thread: u32, start: u64, end: u64) -> bool {
        Self::within(&self.per_thread, thread, start, end)
    }

    /// Whether a graph launch call on `thread` starts within `[start, end]`.
    fn graph_launch_within(&self, thread: u32, start: u64, end: u64) -> bool {
        Self::within(&self.graph_launches, thread, start, end)
    }

    fn within(starts: &FxHashMap<u32, Vec<u64>>, thread: u32, start: u64, end: u64) -> bool {
        starts.get(&thread).is_some_and(|s| {
            let i = s.partition_point(|&t| t < start);
            s.get(i).is_some_and(|&t| t <= end)
        })
    }
}

/// [`of_marked_cell`] of the cell's `steps` only, with the trace's API-call index already
/// built ([`CallStarts::new`] of the same trace): a period counts when both its steps are of
/// that kind.
pub fn of_marked_cell_with(
    trace: &Trace,
    cell: usize,
    calls: &CallStarts,
    steps_of: StepsOf,
) -> Option<TracerShare> {
    let sampling = trace.metadata.sampling.as_ref()?;
    let windows = sampling.markers.as_ref().map(|m| m.kept_windows.as_slice());
    // The kept window a marker overlaps (every marker overlaps one when windows exist).
    let window_of = |start: u64, end: u64| {
        windows.map(|w| {
            let i = w.partition_point(|w| w[0] <= end);
            i.checked_sub(1).filter(|&i| w[i][1] >= start)
        })
    };
    let mut per_thread: FxHashMap<u32, Vec<StepSeen>> = FxHashMap::default();
    for m in trace
        .markers
        .iter()
        .filter(|m| m.kind == MarkerKind::Step && m.cell == Some(cell as u32))
    {
        let traced = calls.any_within(m.thread, m.start, m.end);
        per_thread.entry(m.thread).or_default().push(StepSeen {
            start: m.start,
            traced,
            graphed: traced.then(|| calls.graph_launch_within(m.thread, m.start, m.end)),
            window: window_of(m.start, m.end),
        });
    }
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for steps in per_thread.values_mut() {
        steps.sort_unstable();
        if steps_of != StepsOf::All {
            infer_untraced_kinds(steps);
        }
        for w in steps.windows(2) {
            // Not consecutive: steps between two kept windows were left out.
            if w[0].window != w[1].window || w[0].window == Some(None) {
                continue;
            }
            if !(w[0].of_kind(steps_of) && w[1].of_kind(steps_of)) {
                continue;
            }
            let period = w[1].start.saturating_sub(w[0].start) as f64;
            match (w[0].traced, w[1].traced) {
                (true, true) => on.push(period),
                (false, false) => off.push(period),
                _ => {}
            }
        }
    }
    TracerShare::of(Stat::of(&mut on)?, Stat::of(&mut off)?)
}

/// The share for the replays of executable graph `exec` launched outside step ranges, from
/// the recorder's launch-to-launch host periods with tracing on and paused
/// (`sampling.graphs[].launch_periods`, histograms: quantiles within 1/32). A replay cell's
/// step is one launch, so its host period is the step's.
pub fn of_graph_replays(trace: &Trace, exec: u32) -> Option<TracerShare> {
    let periods = trace
        .metadata
        .sampling
        .as_ref()?
        .graphs
        .iter()
        .find(|g| g.exec == exec)?
        .launch_periods
        .as_ref()?;
    TracerShare::of(stat_of(&periods.traced)?, stat_of(&periods.untraced)?)
}

fn stat_of(h: &RangeSummary) -> Option<Stat> {
    Some(Stat {
        n: usize::try_from(h.count).ok()?,
        median: h.quantile(0.5)?,
        p10: h.quantile(0.1)?,
        p90: h.quantile(0.9)?,
        min: h.min_ns as f64,
        max: h.max_ns as f64,
    })
}

impl TracerShare {
    /// `None` unless each side has [`TRACER_SHARE_MIN_PERIODS`] periods and the untraced median is positive.
    fn of(traced: Stat, untraced: Stat) -> Option<TracerShare> {
        Self::on(ShareClock::Host, traced, untraced)
    }

    /// A cell's traced device period against its measured untraced one ([`super::untraced`]).
    pub fn of_device(traced: Stat, untraced: Stat) -> Option<TracerShare> {
        Self::on(ShareClock::Device, traced, untraced)
    }

    fn on(clock: ShareClock, traced: Stat, untraced: Stat) -> Option<TracerShare> {
        (traced.n >= TRACER_SHARE_MIN_PERIODS
            && untraced.n >= TRACER_SHARE_MIN_PERIODS
            && untraced.median > 0.0)
            .then(|| TracerShare {
                clock,
                ratio: traced.median / untraced.median,
                added_ns: traced.median - untraced.median,
                traced,
                untraced,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{ApiCall, Marker, Sampling};

    /// 20 steps on one thread: the first 10 traced (an API call inside, 120 µs apart), the
    /// rest untraced (100 µs apart).
    /// A 50 µs step marker of cell 0 on thread 7.
    fn step_at(at: u64) -> Marker {
        Marker {
            start: at,
            end: at + 50_000,
            kind: MarkerKind::Step,
            thread: 7,
            cell: Some(0),
            ..Default::default()
        }
    }

    fn budgeted() -> Trace {
        let mut t = crate::trace::synthetic::emu_experiment(1);
        t.markers.clear();
        t.api_calls.clear();
        t.metadata.sampling = Some(Sampling {
            budget: 10,
            steps: 20,
            steps_traced: 10,
            ..Default::default()
        });
        let mut at = 1_000_000u64;
        for i in 0..20 {
            t.markers.push(step_at(at));
            if i < 10 {
                t.api_calls.push(ApiCall {
                    start: at + 1_000,
                    end: at + 2_000,
                    thread: 7,
                    ..Default::default()
                });
            }
            at += if i < 10 { 120_000 } else { 100_000 };
        }
        t
    }

    #[test]
    fn traced_and_untraced_steps_of_one_run_give_the_tracers_share() {
        let s = of_marked_cell(&budgeted(), 0).expect("both sides");
        assert_eq!(
            (s.traced.n, s.untraced.n),
            (9, 9),
            "the mixed pair is left out"
        );
        assert!((s.ratio - 1.2).abs() < 1e-9, "{s:?}");
        assert!((s.added_ns - 20_000.0).abs() < 1e-6);
        assert_eq!(
            TracerShare::explains([Some(&s), None], 15_000.0),
            Some(true)
        );
        assert_eq!(
            TracerShare::explains([Some(&s), None], -25_000.0),
            Some(false)
        );
        assert_eq!(TracerShare::explains([None, None], 1.0), None);
        assert!(
            s.describe()
                .starts_with("tracing ×1.20 on the host step (+20.0 µs")
        );
    }

    /// As the recorder keeps markers under a budget: 10 traced steps and the 10 untraced after
    /// the pause in one kept window, then steps left out (summarised), then a second window of
    /// 10 untraced steps 50 ms later. The pair across the two windows is not a period.
    #[test]
    fn steps_of_different_kept_windows_are_not_consecutive() {
        let mut t = budgeted();
        let first_end = t.markers.last().unwrap().end;
        let mut at = first_end + 50_000_000;
        let second_start = at;
        for _ in 0..10 {
            t.markers.push(step_at(at));
            at += 100_000;
        }
        let sampling = t.metadata.sampling.as_mut().unwrap();
        sampling.markers = Some(crate::trace::MarkerSample {
            kept_windows: vec![[0, first_end], [second_start, u64::MAX]],
            left_out: vec![crate::trace::RangeSummary {
                name: "step".into(),
                count: 500,
                ..Default::default()
            }],
        });
        let s = of_marked_cell(&t, 0).expect("both sides");
        assert_eq!(
            (s.traced.n, s.untraced.n),
            (9, 18),
            "9 + 9 untraced periods"
        );
        assert_eq!(
            s.untraced.max, 100_000.0,
            "no period spans the left-out steps"
        );
        assert!((s.ratio - 1.2).abs() < 1e-9, "{s:?}");
        // Without the windows the gap would count as one untraced period.
        t.metadata.sampling.as_mut().unwrap().markers = None;
        let s = of_marked_cell(&t, 0).unwrap();
        assert_eq!(s.untraced.n, 19);
    }

    /// One range around an eager phase and then a graphed one, as torch.compile's
    /// reduce-overhead loop runs: 10 traced eager steps (120 µs apart), 10 untraced (100 µs),
    /// 3 traced (120 µs), then 10 traced steps that each launch a graph (60 µs apart) and 10
    /// untraced (40 µs) to the end. Each half's share is its own steps'; pooled, both halves'
    /// periods mix.
    #[test]
    fn a_range_split_into_eager_and_graphed_steps_gets_a_share_per_half() {
        let mut t = budgeted();
        let graph_launch = t.strings.len() as crate::trace::StrId;
        t.strings.push("cudaGraphLaunch".into());
        let mut at = t.markers.last().unwrap().start + 100_000;
        let call = |at: u64, name| ApiCall {
            start: at + 1_000,
            end: at + 2_000,
            thread: 7,
            name,
            ..Default::default()
        };
        for _ in 0..3 {
            t.markers.push(step_at(at));
            t.api_calls.push(call(at, 0));
            at += 120_000;
        }
        for i in 0..20 {
            t.markers.push(step_at(at));
            if i < 10 {
                t.api_calls.push(call(at, graph_launch));
            }
            at += if i < 10 { 60_000 } else { 40_000 };
        }
        let calls = CallStarts::new(&t);
        let share = |steps| of_marked_cell_with(&t, 0, &calls, steps).expect("both sides");
        let eager = share(StepsOf::Ungraphed);
        assert_eq!((eager.traced.n, eager.untraced.n), (11, 9));
        assert!((eager.ratio - 1.2).abs() < 1e-9, "{eager:?}");
        let graphed = share(StepsOf::Graphed);
        assert_eq!((graphed.traced.n, graphed.untraced.n), (9, 9));
        assert!((graphed.ratio - 1.5).abs() < 1e-9, "{graphed:?}");
        assert!((graphed.added_ns - 20_000.0).abs() < 1e-6);
        let pooled = share(StepsOf::All);
        assert_eq!((pooled.traced.n, pooled.untraced.n), (21, 18));
    }

    /// An untraced step's kind is its traced neighbours' when they agree or only one side has
    /// any; unknown when they disagree.
    #[test]
    fn untraced_steps_take_the_kind_of_the_traced_steps_around_them() {
        let step = |traced, graphed| StepSeen {
            start: 0,
            traced,
            graphed,
            window: None,
        };
        let mut steps = [
            step(false, None),
            step(true, Some(false)),
            step(false, None),
            step(true, Some(false)),
            step(false, None),
            step(true, Some(true)),
            step(false, None),
        ];
        infer_untraced_kinds(&mut steps);
        let kinds: Vec<_> = steps.iter().map(|s| s.graphed).collect();
        assert_eq!(
            kinds,
            [
                Some(false),
                Some(false),
                Some(false),
                Some(false),
                None,
                Some(true),
                Some(true)
            ]
        );
    }

    #[test]
    fn no_share_without_a_budget_or_without_enough_of_each() {
        let mut t = budgeted();
        assert_eq!(of_marked_cell(&t, 1), None, "another cell");
        t.metadata.sampling = None;
        assert_eq!(of_marked_cell(&t, 0), None, "everything traced");
        let mut t = budgeted();
        t.markers.truncate(13);
        assert_eq!(of_marked_cell(&t, 0), None, "two untraced periods only");
    }

    /// The recorder's launch-period histograms of exec 5: 40 traced periods of 36 µs, 100
    /// untraced of 24 µs (and one of 25 ms, an untraced launch after a long host pause).
    #[test]
    fn graph_replays_get_their_share_from_the_launch_periods() {
        use crate::trace::{DurationHistogram, LaunchPeriods, SampledGraph};
        let (mut on, mut off) = (DurationHistogram::default(), DurationHistogram::default());
        (0..40).for_each(|_| on.add(36_000));
        (0..100).for_each(|_| off.add(24_000));
        off.add(25_000_000);
        let mut t = budgeted();
        t.metadata.sampling.as_mut().unwrap().graphs = vec![SampledGraph {
            exec: 5,
            launches: 300,
            traced: 60,
            launch_periods: Some(LaunchPeriods {
                traced: on.summary("traced"),
                untraced: off.summary("untraced"),
            }),
        }];
        let s = of_graph_replays(&t, 5).expect("both sides");
        assert_eq!((s.traced.n, s.untraced.n), (40, 101));
        // Bucket middles: within 1/32 of 36 and 24 µs.
        assert!(
            (s.traced.median - 36_000.0).abs() < 36_000.0 / 32.0,
            "{s:?}"
        );
        assert!(
            (s.untraced.median - 24_000.0).abs() < 24_000.0 / 32.0,
            "{s:?}"
        );
        assert!((s.ratio - 1.5).abs() < 0.1, "{s:?}");
        assert_eq!(s.untraced.max, 25_000_000.0);
        assert_eq!(of_graph_replays(&t, 6), None, "another graph");
        let periods = t.metadata.sampling.as_mut().unwrap().graphs[0]
            .launch_periods
            .as_mut()
            .unwrap();
        periods.traced = DurationHistogram::default().summary("traced");
        assert_eq!(of_graph_replays(&t, 5), None, "no traced periods");
    }
}
