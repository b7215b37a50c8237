//! The recorder's shared state: what the callbacks collect ([`State`]), what they share with
//! the [`super::Recorder`] ([`Shared`], [`Budget`]), and the process-wide switches the hot
//! callbacks read before taking any lock.
#![forbid(unsafe_code)]

use super::budget::Budget;
use super::decode::RecordStore;
use super::graph::GraphTable;
use super::loaded::{LoadedSnapshot, Queries};
use super::sys;
use crate::trace::{Cell, Marker};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
    /// The NVTX range that marks one step: given, or chosen by the budget's watch.
    pub step_range: crate::record::step_range::StepRange,
    /// The CUDA libraries loaded, as last walked (at context creation and graph
    /// instantiation: a trace written from a signal handler cannot walk).
    pub loaded: Mutex<LoadedSnapshot>,
    /// Under `gapscope record` sampling host stacks: where the recorder says whether it traces
    /// (set at each budget switch, see [`crate::record::env::TracingFlag`]).
    pub tracing_flag: std::sync::OnceLock<crate::record::env::TracingFlag>,
}

impl Shared {
    /// Tells `record` (through the tracing flag, when there is one) whether API calls are
    /// traced now.
    pub fn say_tracing(&self, tracing: bool) {
        if let Some(flag) = self.tracing_flag.get() {
            flag.set(tracing);
        }
    }
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

/// Set while a recorder with a trace budget is recording: graph launch callbacks read it
/// before anything else, so without a budget they cost no lock.
pub(crate) static BUDGET_ON: AtomicBool = AtomicBool::new(false);

/// Set while a budget's step-range watch runs (see `step_choice`): launch callbacks read it
/// before anything else.
pub(crate) static WATCHING: AtomicBool = AtomicBool::new(false);

/// Whether the watch's launch callbacks (`Budget::watch_callbacks`) are on.
pub(crate) static WATCH_ARMED: AtomicBool = AtomicBool::new(false);

/// Set when the budget's time schedule (the pacer thread) changed what should be recorded: the
/// next outermost API call of a program thread switches CUPTI. CUPTI is never switched from
/// the pacer thread itself: recordings paced that way on an H100 came back damaged (every
/// record of a program carrying one correlation id; launches recorded twice) while no
/// recording switched from the program's own callbacks ever did.
pub(crate) static SWITCH_AWAITS_PROGRAM_THREAD: AtomicBool = AtomicBool::new(false);

/// Whether the preloaded library's graph-launch wrapper (`launch_wrapper`) makes the budget's
/// decisions (`GAPSCOPE_BUDGET_LAUNCH_WRAPPER=1`; else CUPTI's callbacks make them).
pub(crate) static WRAPPER_DECIDES: AtomicBool = AtomicBool::new(false);

/// Whether the wrapper is known to see this program's graph launches
/// ([`WrapperCoverage`] as a number).
pub(crate) static WRAPPER_COVERAGE: AtomicU8 = AtomicU8::new(WrapperCoverage::Unknown as u8);

/// What the graph launches seen by CUPTI's callbacks so far say of the preloaded library's
/// wrapper: once one came through it, the graph-launch callbacks are paused with the other
/// budget callbacks; once one did not, they stay on for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum WrapperCoverage {
    Unknown = 0,
    Covers = 1,
    Bypassed = 2,
}

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
