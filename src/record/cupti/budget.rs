//! The trace budget: which graph launches and steps pay for kernel tracing.
//!
//! CUPTI's kernel tracing costs host time on every launch (+2.3–4.8 µs per graph launch on an H200,
//! the same under torch.profiler), and the analysis needs a sample of each cell's steps, not
//! every one of a serving loop's thousands. So each executable graph's first `limit` launches
//! and the first `limit` step ranges are traced; after that, launches of that graph and further
//! steps run with the device and API activity kinds and the graph-building callbacks disabled,
//! and tracing resumes as soon as something under budget starts (a new graph's first launch, a
//! graph still under its limit) or a graph is captured, created or instantiated.
//! The decisions are made here, in safe code; `callbacks` calls CUPTI when they change.
#![forbid(unsafe_code)]

use super::sys;
use crate::trace::{SampledGraph, Sampling};
use std::collections::HashMap;

/// One CUPTI call of a pause or resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SwitchOp {
    /// `cuptiEnableCallback(on, …)` for one API callback.
    Callback {
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
    },
    /// `cuptiActivityEnable`/`cuptiActivityDisable` of one kind.
    Kind(sys::CUpti_ActivityKind),
    /// `cuptiActivityEnable{Runtime,Driver}Api` for one call (the filter, after a resume).
    ApiRecord {
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
        on: bool,
    },
}

/// The CUPTI calls that switch tracing `on` or off, in order: a resume turns the callbacks on
/// first (so they see everything the kinds record), then the kinds, then the per-call API
/// filter again (re-enabling an API kind records every call); a pause turns the kinds off,
/// then the callbacks.
pub(crate) fn switch_plan(
    on: bool,
    kinds: &[sys::CUpti_ActivityKind],
    callbacks: &[(sys::CUpti_CallbackDomain, u32)],
    api_filter: Option<&[(sys::CUpti_CallbackDomain, u32, bool)]>,
) -> Vec<SwitchOp> {
    let callbacks = callbacks
        .iter()
        .map(|&(domain, cbid)| SwitchOp::Callback { domain, cbid });
    let kinds = kinds.iter().map(|&k| SwitchOp::Kind(k));
    if on {
        let filter = api_filter
            .unwrap_or_default()
            .iter()
            .map(|&(domain, cbid, on)| SwitchOp::ApiRecord { domain, cbid, on });
        callbacks.chain(kinds).chain(filter).collect()
    } else {
        kinds.chain(callbacks).collect()
    }
}

/// How much of a program `gapscope record` traces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceBudget {
    /// Launches traced per executable graph, and step ranges traced in all; 0: no limit.
    pub limit: u32,
    /// The NVTX range (default domain, ASCII name) that marks one eager step, if any.
    pub step_range: Option<String>,
}

impl TraceBudget {
    /// No limit: everything is traced (the recorder's default; `gapscope run` wants every step).
    pub const UNLIMITED: TraceBudget = TraceBudget {
        limit: 0,
        step_range: None,
    };

    /// Whether any launch or step can go untraced.
    pub fn is_limited(&self) -> bool {
        self.limit > 0
    }
}

impl Default for TraceBudget {
    fn default() -> Self {
        TraceBudget::UNLIMITED
    }
}

/// Launches of one executable graph (keyed by its handle, which the driver may reuse after the
/// graph is destroyed: [`BudgetState::exec_created`] starts the count afresh).
#[derive(Debug, Default, Clone, Copy)]
struct ExecLaunches {
    /// CUPTI's id of the executable graph, when its creation was seen.
    id: Option<u32>,
    launches: u64,
    traced: u64,
}

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
    pauses: u64,
}

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
            pauses: 0,
        }
    }

    /// Whether the device and API kinds are enabled now.
    pub fn tracing(&self) -> bool {
        self.tracing
    }

    fn switch_to(&mut self, on: bool) -> Option<bool> {
        if self.frozen || on == self.tracing {
            return None;
        }
        self.tracing = on;
        self.pauses += u64::from(!on);
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

    /// A launch of executable graph `exec` outside any step range.
    pub fn graph_launch(&mut self, exec: usize) -> Option<bool> {
        let limit = u64::from(self.limit);
        let e = self.execs.entry(exec).or_default();
        let want = limit == 0 || e.launches < limit;
        // The launch is traced when tracing is on as it goes ahead: `want`, unless frozen.
        let traced = if self.frozen { self.tracing } else { want };
        e.launches += 1;
        e.traced += u64::from(traced);
        self.switch_to(want)
    }

    /// A step range started (on the thread that will launch its work).
    pub fn step_started(&mut self) -> Option<bool> {
        let want = self.limit == 0 || self.steps < u64::from(self.limit);
        self.steps += 1;
        let switch = self.switch_to(want);
        self.steps_traced += u64::from(self.tracing);
        switch
    }

    /// A graph is being captured, created or instantiated: tracing resumes, so that its nodes
    /// are seen with their creating calls (it pauses again at the next launch or step over
    /// budget).
    pub fn graph_building(&mut self) -> Option<bool> {
        self.switch_to(true)
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
                Some(SampledGraph {
                    exec: e.id?,
                    launches: e.launches,
                    traced: e.traced,
                })
            })
            .collect();
        graphs.sort_by_key(|g| g.exec);
        (!graphs.is_empty() || self.steps > self.steps_traced).then_some(Sampling {
            budget: self.limit,
            graphs,
            steps: self.steps,
            steps_traced: self.steps_traced,
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
                "trace budget {}: kernel and API tracing paused after each executable graph's first {} launches; traced {}{}",
                self.limit,
                self.limit,
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
        }
        if self.pauses > 0 {
            notes.push(format!(
                "trace budget: tracing paused {} time(s), the longest pause or resume took {:.1} µs; `gapscope record --trace-budget 0` traces everything",
                self.pauses,
                longest_switch_ns as f64 / 1e3
            ));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_is_traced_for_its_first_launches_then_paused() {
        let mut b = BudgetState::new(3);
        b.exec_created(0xa, 7);
        let switches: Vec<Option<bool>> = (0..5).map(|_| b.graph_launch(0xa)).collect();
        assert_eq!(switches, [None, None, None, Some(false), None]);
        assert!(!b.tracing());
        let notes = b.notes(None, 0);
        assert!(
            notes[0].contains("graph exec 7: 3 of 5 launches"),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.contains("paused 1 time")),
            "{notes:?}"
        );
        let sampling = b.sampling().expect("something was left out");
        let graph = SampledGraph {
            exec: 7,
            launches: 5,
            traced: 3,
        };
        assert_eq!(sampling.graphs, [graph]);
        assert_eq!((sampling.budget, sampling.steps), (3, 0));
    }

    #[test]
    fn a_new_graph_resumes_tracing_for_its_first_launch() {
        let mut b = BudgetState::new(2);
        for _ in 0..3 {
            b.graph_launch(0xa);
        }
        assert!(!b.tracing());
        assert_eq!(b.graph_launch(0xb), Some(true), "fresh graph: traced");
        assert_eq!(
            b.graph_launch(0xa),
            Some(false),
            "over-budget graph: paused"
        );
        assert_eq!(b.graph_launch(0xc), Some(true));
        assert_eq!(b.graph_launch(0xd), None, "still on");
    }

    #[test]
    fn a_resume_turns_callbacks_on_first_and_the_filter_last_a_pause_the_kinds_first() {
        let kinds = [10, 11];
        let callbacks = [(1, 7), (2, 8)];
        let filter = [(1, 3, true), (2, 4, false)];
        let on = switch_plan(true, &kinds, &callbacks, Some(&filter));
        assert_eq!(
            on,
            [
                SwitchOp::Callback { domain: 1, cbid: 7 },
                SwitchOp::Callback { domain: 2, cbid: 8 },
                SwitchOp::Kind(10),
                SwitchOp::Kind(11),
                SwitchOp::ApiRecord {
                    domain: 1,
                    cbid: 3,
                    on: true
                },
                SwitchOp::ApiRecord {
                    domain: 2,
                    cbid: 4,
                    on: false
                },
            ]
        );
        let off = switch_plan(false, &kinds, &callbacks, Some(&filter));
        assert_eq!(
            off,
            [
                SwitchOp::Kind(10),
                SwitchOp::Kind(11),
                SwitchOp::Callback { domain: 1, cbid: 7 },
                SwitchOp::Callback { domain: 2, cbid: 8 },
            ],
            "a pause leaves the filter as it is"
        );
        assert_eq!(
            switch_plan(true, &kinds, &[], None).len(),
            2,
            "no filter: kinds only"
        );
    }

    #[test]
    fn building_a_graph_resumes_tracing_until_the_next_launch_over_budget() {
        let mut b = BudgetState::new(1);
        b.graph_launch(0xa);
        assert_eq!(b.graph_launch(0xa), Some(false));
        assert_eq!(
            b.graph_building(),
            Some(true),
            "capture while paused: resumed"
        );
        assert_eq!(b.graph_building(), None, "already on");
        assert_eq!(
            b.graph_launch(0xa),
            Some(false),
            "over budget again: paused"
        );
        assert_eq!(b.launches(0xa), 3);
        b.freeze();
        assert_eq!(b.graph_building(), None, "frozen");
    }

    #[test]
    fn a_reused_handle_counts_afresh_after_instantiation() {
        let mut b = BudgetState::new(1);
        b.exec_created(0xa, 1);
        b.graph_launch(0xa);
        assert_eq!(b.graph_launch(0xa), Some(false));
        b.exec_created(0xa, 2);
        assert_eq!(
            b.graph_launch(0xa),
            Some(true),
            "a new graph under the old handle"
        );
        let notes = b.notes(None, 0);
        assert!(
            notes[0].contains("graph exec 1: 1 of 2 launches"),
            "{notes:?}"
        );
        assert!(!notes[0].contains("graph exec 2"), "{notes:?}");
    }

    #[test]
    fn steps_after_the_limit_are_paused() {
        let mut b = BudgetState::new(2);
        let switches: Vec<Option<bool>> = (0..4).map(|_| b.step_started()).collect();
        assert_eq!(switches, [None, None, Some(false), None]);
        let sampling = b.sampling().unwrap();
        assert_eq!((sampling.steps, sampling.steps_traced), (4, 2));
        assert!(sampling.graphs.is_empty());
        let notes = b.notes(Some("decode_step"), 0);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("2 of 4 `decode_step` steps")),
            "{notes:?}"
        );
    }

    #[test]
    fn frozen_never_switches() {
        let mut b = BudgetState::new(1);
        b.graph_launch(0xa);
        b.freeze();
        assert_eq!(b.graph_launch(0xa), None);
        assert!(b.tracing(), "left as it was when frozen");
    }
}
