//! The recorder's shared state: what the callbacks collect ([`State`]), what they share with
//! the [`super::Recorder`] ([`Shared`], [`Budget`]), and the process-wide switches the hot
//! callbacks read before taking any lock.
#![forbid(unsafe_code)]

use super::budget::{BudgetState, Level};
use super::decode::RecordStore;
use super::graph::GraphTable;
use super::loaded::{LoadedSnapshot, Queries};
use super::markers::KeepWindows;
use super::step_choice::StepRangeChooser;
use super::sys;
use crate::trace::{Cell, Marker};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

/// Locks a mutex, ignoring poisoning (a panic caught at the FFI edge must not stop recording).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks a mutex within `limit` (retrying every millisecond), ignoring poisoning; `None` when
/// it stayed held, e.g. by a thread that a signal handler running this interrupted.
pub(crate) fn lock_within<T>(
    m: &Mutex<T>,
    limit: std::time::Duration,
) -> Option<MutexGuard<'_, T>> {
    let until = std::time::Instant::now() + limit;
    loop {
        match m.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// Everything the callbacks collect for one recorder.
#[derive(Debug)]
pub(crate) struct State {
    pub records: RecordStore,
    pub graph: GraphTable,
    pub markers: Vec<Marker>,
    pub cells: Vec<Cell>,
    /// Correlation ids of the driver calls the recorder itself made (cuGraphNodeGetType): their
    /// DRIVER activity records are removed from the trace.
    pub self_corr: HashSet<u32>,
    /// Problems met inside callbacks (message → count); they become trace notes.
    pub problems: BTreeMap<String, u64>,
    /// The devices and driver version, read when the first CUDA context was created, so a
    /// trace written from a signal handler (where the driver must not be called) names them.
    pub devices: Option<(Vec<crate::trace::DeviceInfo>, Option<String>)>,
}

impl State {
    pub fn new() -> State {
        State {
            records: RecordStore::new(),
            graph: GraphTable::default(),
            markers: Vec::new(),
            cells: Vec::new(),
            self_corr: HashSet::new(),
            problems: BTreeMap::new(),
            devices: None,
        }
    }

    pub fn problem(&mut self, message: impl Into<String>) {
        *self.problems.entry(message.into()).or_insert(0) += 1;
    }
}

#[cfg(target_os = "linux")]
pub(crate) fn current_thread_id() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn current_thread_id() -> u32 {
    0
}

/// State shared between a [`super::Recorder`] and the callbacks.
#[derive(Debug)]
pub(crate) struct Shared {
    pub state: Mutex<State>,
    /// Records CUPTI reported dropped (cuptiActivityGetNumDroppedRecords resets on read).
    pub dropped: AtomicU64,
    /// cuptiActivityFlushAll must not run on several threads at once.
    pub flush_lock: Mutex<()>,
    /// Set when recording ends: the periodic flush thread stops (checked under `flush_lock`,
    /// so no flush of it runs while the recorder tears CUPTI down).
    pub flush_stopped: std::sync::atomic::AtomicBool,
    /// The trace budget, when one is set (`None`: everything is traced).
    pub budget: Option<Budget>,
    /// The CUDA libraries loaded, as last walked (at context creation and graph
    /// instantiation: a trace written from a signal handler cannot walk).
    pub loaded: Mutex<LoadedSnapshot>,
}

impl Shared {
    /// Walks the loaded libraries again, holding no lock while it walks (the walk takes the
    /// loader's lock, which a thread inside our callbacks may hold).
    pub fn refresh_loaded(&self, queries: Queries) {
        let mut snapshot = lock(&self.loaded).clone();
        snapshot.refresh(queries);
        *lock(&self.loaded) = snapshot;
    }
}

/// A trace budget at work: its decisions, the kinds it switches and the step range it counts.
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
    /// (README, "Recording").
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
    /// The step range's name, compared with NVTX push messages: the one given, or the one
    /// `chooser` picked.
    pub step_range: OnceLock<String>,
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
    /// A budget of `config` (limited), tracing on, nothing applied or switched yet.
    pub fn new(config: &super::budget::TraceBudget) -> Budget {
        Budget {
            decisions: Mutex::new(BudgetState::new(config.limit)),
            applied: Mutex::new(Some(Level::Traced)),
            dirty: AtomicBool::new(false),
            kinds: Mutex::new(Vec::new()),
            api_filter: Mutex::new(None),
            api_callbacks: Mutex::new(Vec::new()),
            subscriber: AtomicUsize::new(0),
            switch_ns: AtomicU64::new(0),
            step_range: config
                .step_range
                .clone()
                .map(OnceLock::from)
                .unwrap_or_default(),
            chooser: config.step_range.is_none().then(Default::default),
            watch_callbacks: Mutex::new(Vec::new()),
            // As many untraced occurrences kept after each pause as a traced window holds.
            markers: Mutex::new(KeepWindows::new(super::budget::measured_of(config.limit))),
        }
    }
}

/// Set while a recorder with a trace budget is recording: graph launch callbacks read it
/// before anything else, so without a budget they cost no lock.
pub(crate) static BUDGET_ON: AtomicBool = AtomicBool::new(false);

/// Set while a budget's step-range watch runs (see `step_choice`): launch callbacks read it
/// before anything else.
pub(crate) static WATCHING: AtomicBool = AtomicBool::new(false);

/// Whether the watch's launch callbacks (`Budget::watch_callbacks`) are on.
pub(crate) static WATCH_ARMED: AtomicBool = AtomicBool::new(false);

/// Whether node creation walks the creating thread's frames for its library function
/// (`GAPSCOPE_CUPTI_NODE_FRAMES=0` turns it off, to measure what provenance costs).
pub(crate) static NODE_FRAMES: AtomicBool = AtomicBool::new(true);

/// Set with `GAPSCOPE_CUPTI_API_FROM=callbacks`: the API calls of [`API_RECORDED`] are recorded
/// from their enter and exit callbacks instead of the RUNTIME and DRIVER activity kinds (which,
/// once enabled, keep costing each call host time after they are paused).
pub(crate) static API_FROM_CALLBACKS: AtomicBool = AtomicBool::new(false);

/// Bit `cbid` of `[runtime, driver]`: the calls recorded from callbacks.
static API_RECORDED: [[AtomicU64; 16]; 2] = [
    [const { AtomicU64::new(0) }; 16],
    [const { AtomicU64::new(0) }; 16],
];

fn api_recorded_bit(domain: sys::CUpti_CallbackDomain, cbid: u32) -> Option<(usize, usize, u64)> {
    let d = match domain {
        sys::CUPTI_CB_DOMAIN_RUNTIME_API => 0,
        sys::CUPTI_CB_DOMAIN_DRIVER_API => 1,
        _ => return None,
    };
    let word = usize::try_from(cbid / 64).ok().filter(|&w| w < 16)?;
    Some((d, word, 1u64 << (cbid % 64)))
}

/// Records call `cbid` of `domain` from its callbacks (false when it is out of range).
pub(crate) fn record_api_from_callbacks(domain: sys::CUpti_CallbackDomain, cbid: u32) -> bool {
    let Some((d, w, bit)) = api_recorded_bit(domain, cbid) else {
        return false;
    };
    API_RECORDED[d][w].fetch_or(bit, Ordering::Relaxed);
    true
}

/// Whether call `cbid` of `domain` is recorded from its callbacks.
pub(crate) fn api_recorded(domain: sys::CUpti_CallbackDomain, cbid: u32) -> bool {
    api_recorded_bit(domain, cbid)
        .is_some_and(|(d, w, bit)| API_RECORDED[d][w].load(Ordering::Relaxed) & bit != 0)
}

/// Forgets every call recorded from callbacks (recording ended).
pub(crate) fn clear_api_recorded() {
    for words in &API_RECORDED {
        for w in words {
            w.store(0, Ordering::Relaxed);
        }
    }
}

/// Whether a budget's pause also switches off the API calls the record filter keeps (the
/// default; `GAPSCOPE_BUDGET_PAUSE_FILTER=0` leaves them on; see `budget::switch_plan`).
pub(crate) static PAUSE_FILTER: AtomicBool = AtomicBool::new(true);

/// The recorder the callbacks feed; `None` when none is recording.
pub(crate) static ACTIVE: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

/// Panics caught at the FFI boundary (reported as a trace note).
pub(crate) static PANICS: AtomicU64 = AtomicU64::new(0);

pub(super) fn active() -> Option<Arc<Shared>> {
    lock(&ACTIVE).clone()
}
