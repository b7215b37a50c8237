//! A trace budget at work while recording ([`Budget`]): shared by the recorder and the
//! callbacks.
#![forbid(unsafe_code)]

use super::super::sys;
use super::markers::KeepWindows;
use super::step_choice::StepRangeChooser;
use super::{BudgetState, Level, TraceBudget, measured_of};
use crate::record::step_range::StepRange;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

/// A trace budget at work: its decisions, the kinds it switches and the watch that chooses the
/// step range it counts (the step range itself is the recorder's, [`StepRange`]).
#[derive(Debug)]
pub(crate) struct Budget {
    /// What tracing should be; held only while deciding, never while CUPTI is called (a CUPTI
    /// call may wait for a thread that is inside one of our callbacks).
    pub decisions: Mutex<BudgetState>,
    /// What is recorded, as last applied (`None` after a switch CUPTI refused: not known).
    /// Held by the one thread switching; callbacks only `try_lock` it, never wait (see
    /// `apply_budget`).
    pub applied: Mutex<Option<Level>>,
    /// Set when a decision changed what tracing should be and it may not be applied yet.
    pub dirty: AtomicBool,
    /// The activity kinds the budget switches (set once they are enabled): the API kinds go
    /// off below [`Level::Traced`], the device kinds below [`Level::Measured`]. A kind left on,
    /// even with every call filtered out, costs host time on the launches after the budget
    /// (docs/recording.md).
    pub kinds: Mutex<Vec<sys::CUpti_ActivityKind>>,
    /// With a per-call API record filter in use: every call's switch, applied again after the
    /// API kinds are resumed (re-enabling a kind records every call again).
    pub api_filter: Mutex<Option<Vec<(sys::CUpti_CallbackDomain, u32, bool)>>>,
    /// The eager-hot graph-building API callbacks ([`super::config::paused_by_budget`]), off
    /// while paused, so that a paused step runs none of ours but the budget's own. A capture,
    /// graph creation or instantiation resumes tracing first (see [`is_graph_building_start`])
    /// and a capture holds it on until it ends, so no graph is built unseen.
    pub api_callbacks: Mutex<Vec<(sys::CUpti_CallbackDomain, u32)>>,
    /// The subscriber those callbacks belong to (a `CUpti_SubscriberHandle`).
    pub subscriber: AtomicUsize,
    /// Longest time one pause or resume took, in ns (for the trace notes).
    pub switch_ns: AtomicU64,
    /// With no step range given: the watch over outermost NVTX ranges that picks one.
    pub chooser: Option<Mutex<StepRangeChooser>>,
    /// The kernel-launch callbacks the watch needs to see device work inside a range, enabled
    /// at the first outermost range and disabled once the watch ends; only those the recorder
    /// had not enabled anyway.
    pub watch_callbacks: Mutex<Vec<(sys::CUpti_CallbackDomain, u32)>>,
    /// The host-time windows whose NVTX ranges are kept (see `markers`); updated with the
    /// decisions (taken inside `decisions`' lock, never the other way round).
    pub markers: Mutex<KeepWindows>,
}

impl Budget {
    /// A budget of `config` (limited), tracing on, nothing applied or switched yet; it watches
    /// for a step range unless `step_range` was given.
    pub fn new(config: &TraceBudget, step_range: &StepRange) -> Budget {
        Budget {
            decisions: Mutex::new(BudgetState::new(config.limit)),
            applied: Mutex::new(Some(Level::Traced)),
            dirty: AtomicBool::new(false),
            kinds: Mutex::new(Vec::new()),
            api_filter: Mutex::new(None),
            api_callbacks: Mutex::new(Vec::new()),
            subscriber: AtomicUsize::new(0),
            switch_ns: AtomicU64::new(0),
            chooser: (!step_range.is_given()).then(Default::default),
            watch_callbacks: Mutex::new(Vec::new()),
            // As many untraced occurrences kept after each pause as a traced window holds.
            markers: Mutex::new(KeepWindows::new(measured_of(config.limit))),
        }
    }
}
