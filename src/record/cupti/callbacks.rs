//! The functions CUPTI calls: the subscriber callback (API enter/exit and graph resource
//! events), plus the state it shares with the recorder and the activity-buffer callbacks
//! (`buffers`).
//!
//! Every `extern "C"` function here catches panics: a panic never unwinds into CUPTI.
//! Locks: callbacks take [`ACTIVE`] only long enough to clone an `Arc`; the state lock is never
//! held while calling CUPTI or the driver from the subscriber callback.
#![forbid(unsafe_code)]

use super::budget::{BudgetState, Level, StepContent, SwitchOp};
use super::config::{
    CAPTURE_BEGIN_CBIDS, CAPTURE_END_CBIDS, GRAPH_BUILDING_START_CBIDS, GRAPH_LAUNCH_CBIDS,
    LAUNCH_CBIDS,
};
use super::decode::{RecordStore, api_display_name};
use super::error::CuptiError;
use super::graph::{Creation, GraphTable};
use super::loaded::{LoadedSnapshot, Queries};
use super::loader::{self, Cupti};
use super::markers::KeepWindows;
use super::params::{
    ApiCallback, FunctionName, GraphEvent, Handler, NVTX_RANGE_POP, NVTX_RANGE_PUSH_A,
    NVTX_RANGE_PUSH_EX, NVTX_RANGE_PUSH_W, NvtxCallback, ResourceCallback,
};
use super::result::SubscriberHandle;
use super::step_choice::{Choice, StepRangeChooser};
use super::sys;
use crate::trace::{Cell, Marker, NodeType, StrId};
use std::cell::{Cell as StdCell, RefCell};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
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

/// Sets which API calls keep activity records; returns how many switches CUPTI refused (all
/// of them where this CUPTI cannot choose per call).
pub(super) fn apply_api_filter(
    cupti: &Cupti,
    switches: impl IntoIterator<Item = (sys::CUpti_CallbackDomain, u32, bool)>,
) -> u32 {
    let mut failed = 0;
    for (domain, cbid, on) in switches {
        let done = cupti.enable_api_record(domain, cbid, on);
        failed += u32::from(!matches!(done, Some(Ok(()))));
    }
    failed
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

/// Whether call `cbid` of `domain`, entered with `stack` open on its thread, gets a record
/// from its callbacks: one of [`API_RECORDED`], and not a driver call made by a runtime call
/// (`cudaLaunchKernel` calls `cuLaunchKernel` under the same correlation id), which the API
/// kinds do not record either.
fn recorded_from_callbacks(domain: sys::CUpti_CallbackDomain, cbid: u32, stack: &[Frame]) -> bool {
    let inside_runtime = || {
        stack
            .iter()
            .any(|f| f.domain == sys::CUPTI_CB_DOMAIN_RUNTIME_API)
    };
    api_recorded(domain, cbid) && !(domain == sys::CUPTI_CB_DOMAIN_DRIVER_API && inside_runtime())
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

// ---------------------------------------------------------------------------------------------
// Thread-local API stack and library-call markers
// ---------------------------------------------------------------------------------------------

/// One CUDA API call active on this thread.
#[derive(Debug, Clone, Copy)]
struct Frame {
    domain: sys::CUpti_CallbackDomain,
    cbid: u32,
    name: FunctionName,
    wait_external: bool,
    record_external: bool,
    /// Host time it was entered, when its record is made from callbacks (else 0).
    entered: u64,
}

thread_local! {
    static API_STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    static LIBRARY_STACK: RefCell<Vec<StrId>> = const { RefCell::new(Vec::new()) };
    /// Set while the recorder itself calls the driver from a callback.
    static SELF_QUERY: StdCell<bool> = const { StdCell::new(false) };
    static SELF_CORR: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    /// This thread's open NVTX push ranges (default domain): `true` for a step range.
    static NVTX_STACK: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
    /// What this thread's open outermost step has done so far (for the budget's step kinds).
    static STEP_CONTENT: StdCell<StepContent> = const { StdCell::new(StepContent::Eager) };
    /// While the step range is being chosen: this thread's open outermost NVTX range, and the
    /// launches made inside it so far.
    static OUTER_RANGE: RefCell<Option<(Vec<u8>, u64)>> = const { RefCell::new(None) };
}

/// Opens a LibraryCall scope on this thread.
pub(crate) fn push_library_call(name: StrId) {
    let _ = LIBRARY_STACK.try_with(|s| s.borrow_mut().push(name));
}

/// Closes the innermost LibraryCall scope named `name` on this thread.
pub(crate) fn pop_library_call(name: StrId) {
    let _ = LIBRARY_STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        if let Some(i) = s.iter().rposition(|&n| n == name) {
            s.remove(i);
        }
    });
}

/// API enter/exit: maintain this thread's stack of active CUDA API calls.
fn on_api(d: &ApiCallback<'_>) {
    let (domain, cbid) = (d.domain(), d.cbid());
    if SELF_QUERY.try_with(|q| q.get()).unwrap_or(false) {
        if domain == sys::CUPTI_CB_DOMAIN_DRIVER_API && d.entering() {
            let _ = SELF_CORR.try_with(|c| c.borrow_mut().push(d.correlation_id()));
        }
        return;
    }
    let mut launched = None;
    let _ = API_STACK.try_with(|stack| {
        let mut stack = stack.borrow_mut();
        if d.entering() {
            if WATCHING.load(Ordering::Relaxed)
                && is_any_launch(domain, cbid)
                && !stack.iter().any(|f| is_any_launch(f.domain, f.cbid))
            {
                let _ = OUTER_RANGE.try_with(|r| {
                    if let Some((_, launches)) = r.borrow_mut().as_mut() {
                        *launches += 1;
                    }
                });
            }
            // The outermost graph launch (a runtime launch calls the driver's) decides.
            if BUDGET_ON.load(Ordering::Relaxed)
                && is_graph_launch(domain, cbid)
                && !stack.iter().any(|f| is_graph_launch(f.domain, f.cbid))
            {
                launched = d.launched_graph_exec();
            }
            let (wait_external, record_external) = d.external_flags();
            let entered = if API_FROM_CALLBACKS.load(Ordering::Relaxed)
                && recorded_from_callbacks(domain, cbid, &stack)
            {
                loader::loaded().map_or(0, now)
            } else {
                0
            };
            stack.push(Frame {
                domain,
                cbid,
                name: d.function_name(),
                wait_external,
                record_external,
                entered,
            });
        } else if let Some(i) = stack
            .iter()
            .rposition(|f| f.domain == domain && f.cbid == cbid)
        {
            // Normally the top; an exit without its enter (tracing enabled mid-call) pops
            // nothing, and frames left above a matching one are dropped with it.
            let entered = stack[i].entered;
            stack.truncate(i);
            if entered != 0 {
                api_call_exited(d, entered);
            }
        }
    });
    if !BUDGET_ON.load(Ordering::Relaxed) {
        return;
    }
    let entering = d.entering();
    // Most calls are none of the budget's: decide that before taking any lock.
    let capture_begin = is_capture_begin(domain, cbid);
    let capture_end = !entering && is_capture_end(domain, cbid);
    let building = entering && !capture_begin && is_graph_building_start(domain, cbid);
    if launched.is_none() && !capture_begin && !capture_end && !building {
        return;
    }
    let Some(shared) = active() else {
        return;
    };
    if let Some(exec) = launched {
        if inside_step() {
            step_did(StepContent::Replay(exec));
            if let Some(budget) = &shared.budget {
                lock(&budget.decisions).graph_launch_in_step(exec);
            }
        } else {
            // The launch's host time, for what tracing adds to a replay (`launch_periods`).
            let at = loader::loaded().map_or(0, now);
            budget_decides(&shared, |b| b.graph_launch(exec, at));
        }
    } else if capture_begin {
        if entering {
            step_did(StepContent::Building);
            budget_decides(&shared, |b| b.capture_began());
        } else if d.returned() != 0
            && let Some(budget) = &shared.budget
        {
            // No capture began: it must not hold tracing on.
            lock(&budget.decisions).capture_ended();
        }
    } else if capture_end {
        if let Some(budget) = &shared.budget {
            lock(&budget.decisions).capture_ended();
        }
    } else {
        step_did(StepContent::Building);
        budget_decides(&shared, |b| b.graph_building());
    }
}

/// The exit of a call recorded from callbacks: its API record.
fn api_call_exited(d: &ApiCallback<'_>, entered: u64) {
    let (domain, cbid) = (d.domain(), d.cbid());
    let Some(cupti) = loader::loaded() else {
        return;
    };
    let Some(shared) = active() else {
        return;
    };
    // As the API kinds would: no record of a call made while the budget has tracing off (the
    // calls it decides in are never paused).
    if let Some(budget) = &shared.budget
        && !lock(&budget.decisions).tracing()
    {
        return;
    }
    let end = now(cupti);
    let returned = d.returned();
    let api_domain = if domain == sys::CUPTI_CB_DOMAIN_RUNTIME_API {
        crate::trace::ApiDomain::Runtime
    } else {
        crate::trace::ApiDomain::Driver
    };
    let call = super::activity::ApiCallSeen {
        domain: api_domain,
        cbid,
        start: entered,
        end: end.max(entered),
        corr: d.correlation_id(),
        thread: current_thread_id(),
        returned,
    };
    let resolve = |domain: crate::trace::ApiDomain, cbid: u32| cupti.api_call_name(domain, cbid);
    lock(&shared.state).records.add_api_call(call, &resolve);
}

/// Notes what the open step on this thread did: building a graph outranks a replay, which
/// outranks running eagerly.
fn step_did(content: StepContent) {
    if !inside_step() {
        return;
    }
    let _ = STEP_CONTENT.try_with(|c| {
        let now = c.get();
        let rank = |x: StepContent| match x {
            StepContent::Eager => 0,
            StepContent::Replay(_) => 1,
            StepContent::Building => 2,
        };
        if rank(content) > rank(now) {
            c.set(content);
        }
    });
}

fn is_graph_building_start(domain: sys::CUpti_CallbackDomain, cbid: u32) -> bool {
    GRAPH_BUILDING_START_CBIDS.contains(&(domain, cbid))
}

fn is_capture_begin(domain: sys::CUpti_CallbackDomain, cbid: u32) -> bool {
    CAPTURE_BEGIN_CBIDS.contains(&(domain, cbid))
}

fn is_capture_end(domain: sys::CUpti_CallbackDomain, cbid: u32) -> bool {
    CAPTURE_END_CBIDS.contains(&(domain, cbid))
}

fn is_graph_launch(domain: sys::CUpti_CallbackDomain, cbid: u32) -> bool {
    GRAPH_LAUNCH_CBIDS.contains(&(domain, cbid))
}

/// A kernel or graph launch: device work, for the step range's watch.
fn is_any_launch(domain: sys::CUpti_CallbackDomain, cbid: u32) -> bool {
    is_graph_launch(domain, cbid) || LAUNCH_CBIDS.contains(&(domain, cbid))
}

/// Whether this thread is inside a step range (whose decision then covers its launches).
fn inside_step() -> bool {
    NVTX_STACK
        .try_with(|s| s.borrow().contains(&true))
        .unwrap_or(false)
}

/// Lets the budget decide and, when what tracing should be changed, applies it.
///
/// With launches on several threads at once, a launch can go ahead under the state before
/// another thread's switch is applied, and a switch can land inside another thread's launch;
/// the counts in the notes are of decisions.
fn budget_decides(shared: &Shared, decide: impl FnOnce(&mut BudgetState) -> Option<bool>) {
    let Some(budget) = &shared.budget else {
        return;
    };
    let changed = {
        let mut decisions = lock(&budget.decisions);
        let before = decisions.level();
        decide(&mut decisions);
        // In the decisions' lock, so the windows follow them in order.
        lock(&budget.markers).decided(decisions.tracing(), || loader::loaded().map_or(0, now));
        decisions.level() != before
    };
    if !changed {
        return;
    }
    budget.dirty.store(true, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    apply_budget(shared, budget, loader::loaded());
}

/// One tick of the budget's time schedule ([`BudgetState::pace`]), from the pacer thread.
pub(super) fn pace(shared: &Shared) {
    let Some(budget) = &shared.budget else {
        return;
    };
    let marked = budget.step_range.get().is_some() || WATCHING.load(Ordering::Relaxed);
    let now = loader::loaded().map_or(0, now);
    budget_decides(shared, |b| {
        b.pace(now, marked);
        None
    });
}

/// Brings CUPTI to what the decisions say, unless another thread is already doing so: that
/// thread sees `dirty` when it is done and applies the latest decision too. No thread ever
/// waits here, so a CUPTI call made while switching cannot deadlock with a callback. Once the
/// budget is frozen (recording ends, or a switch failed) nothing is switched any more.
pub(super) fn apply_budget(shared: &Shared, budget: &Budget, cupti: Option<&Cupti>) {
    while budget.dirty.load(Ordering::SeqCst) {
        let Some(mut applied) = lock_within(&budget.applied, std::time::Duration::ZERO) else {
            return;
        };
        budget.dirty.store(false, Ordering::SeqCst);
        let (target, frozen) = {
            let decisions = lock(&budget.decisions);
            (decisions.level(), decisions.is_frozen())
        };
        let Some(from) = *applied else {
            // Not known since a refused switch (which froze the budget).
            drop(applied);
            fence(Ordering::SeqCst);
            continue;
        };
        if frozen || from == target {
            drop(applied);
            fence(Ordering::SeqCst);
            continue;
        }
        match switch_kinds(budget, cupti, from, target) {
            Ok(()) => {
                *applied = Some(target);
                if target == Level::Traced
                    && let Some(cupti) = cupti
                {
                    lock(&budget.decisions).resumed(now(cupti));
                }
            }
            Err(failed) => {
                *applied = None;
                lock(&budget.decisions).freeze();
                lock(&budget.markers).keep_all();
                lock(&shared.state).problem(format!(
                    "trace budget: switching recording from {from:?} to {target:?} failed ({failed}); switching stopped",
                ));
            }
        }
        drop(applied);
        fence(Ordering::SeqCst);
    }
}

/// Enables or disables the budget's kinds and graph-building callbacks to go from level `from`
/// to `to`; when the API kinds come back on, applies the per-call API record filter again.
fn switch_kinds(
    budget: &Budget,
    cupti: Option<&Cupti>,
    from: Level,
    to: Level,
) -> Result<(), String> {
    let Some(cupti) = cupti else {
        return Err("libcupti not loaded".into());
    };
    let began = std::time::Instant::now();
    // Planned from copies: no lock of ours is held while CUPTI runs.
    let plan = {
        let kinds = lock(&budget.kinds).clone();
        let filter = lock(&budget.api_filter).clone();
        let api_callbacks = lock(&budget.api_callbacks).clone();
        let filter = filter.as_deref().filter(|_| cupti.api_filter().is_some());
        let filter_off = PAUSE_FILTER.load(Ordering::Relaxed);
        super::budget::switch_plan(from, to, &kinds, &api_callbacks, filter, filter_off)
    };
    // The recorder's live subscriber: it unsubscribes only after freezing the budget and
    // taking the switch token.
    let subscriber = SubscriberHandle::from_bits(budget.subscriber.load(Ordering::SeqCst));
    let mut failed = Vec::new();
    let mut refused_records = 0;
    for op in plan {
        let done = match op {
            SwitchOp::Callback { domain, cbid } => {
                cupti.enable_callback(subscriber, domain, cbid, to > from)
            }
            SwitchOp::Kind(kind) => cupti.enable_kind(kind, to > from),
            SwitchOp::ApiRecord { domain, cbid, on } => {
                if cupti.api_filter().is_some() {
                    refused_records += apply_api_filter(cupti, [(domain, cbid, on)]);
                }
                Ok(())
            }
        };
        if let Err(e) = done {
            failed.push(format!("{op:?}: {}", e.result_name()));
        }
    }
    if refused_records > 0 {
        failed.push(format!("{refused_records} API record switches"));
    }
    let took = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
    budget.switch_ns.fetch_max(took, Ordering::Relaxed);
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join(", "))
    }
}

// ---------------------------------------------------------------------------------------------
// NVTX callbacks (only with a trace budget and a step range)
// ---------------------------------------------------------------------------------------------

fn on_nvtx(event: &NvtxCallback<'_>) {
    let cbid = event.cbid();
    match cbid {
        NVTX_RANGE_POP => {
            let (popped, depth) = NVTX_STACK
                .try_with(|s| {
                    let mut s = s.borrow_mut();
                    (s.pop(), s.len())
                })
                .unwrap_or((None, 1));
            if popped.is_some() && depth == 0 && WATCHING.load(Ordering::Relaxed) {
                outermost_range_ended();
            } else if depth == 0
                && WATCH_ARMED.load(Ordering::Relaxed)
                && let Some(shared) = active()
            {
                disarm_watch(&shared);
            }
            if popped == Some(true)
                && !inside_step()
                && let Some(shared) = active()
                && let Some(budget) = &shared.budget
            {
                let content = STEP_CONTENT
                    .try_with(|c| c.replace(StepContent::Eager))
                    .unwrap_or(StepContent::Eager);
                lock(&budget.decisions).step_ended(content);
            }
        }
        NVTX_RANGE_PUSH_A | NVTX_RANGE_PUSH_W | NVTX_RANGE_PUSH_EX => {
            let Some(shared) = active() else {
                return;
            };
            let step_range = shared
                .budget
                .as_ref()
                .and_then(|b| b.step_range.get())
                .map(String::as_bytes);
            let message = event.pushed_message();
            let is_step = step_range.is_some() && message == step_range;
            let outermost_step = is_step && !inside_step();
            let depth = NVTX_STACK
                .try_with(|s| {
                    let mut s = s.borrow_mut();
                    s.push(is_step);
                    s.len()
                })
                .unwrap_or(0);
            if depth == 1
                && WATCHING.load(Ordering::Relaxed)
                && let Some(budget) = &shared.budget
            {
                outermost_range_began(&shared, budget, message.unwrap_or_default());
            }
            if outermost_step {
                let _ = STEP_CONTENT.try_with(|c| c.set(StepContent::Eager));
                budget_decides(&shared, |b| b.step_started());
            }
        }
        _ => {}
    }
}

/// An outermost NVTX range began on this thread while the step range is being chosen: its
/// launches are counted from now on, with the launch callbacks on from the first such range.
fn outermost_range_began(shared: &Shared, budget: &Budget, name: &[u8]) {
    let _ = OUTER_RANGE.try_with(|r| *r.borrow_mut() = Some((name.to_vec(), 0)));
    if !WATCH_ARMED.load(Ordering::SeqCst) {
        switch_watch_callbacks(shared, budget, true);
    }
}

/// This thread's outermost NVTX range ended while the step range is being chosen: the watch
/// counts it and, once it has chosen (or given up), stops with its callbacks.
fn outermost_range_ended() {
    let Some((name, launches)) = OUTER_RANGE.try_with(|r| r.take()).ok().flatten() else {
        return;
    };
    let Some(shared) = active() else {
        return;
    };
    let Some(budget) = &shared.budget else {
        return;
    };
    let Some(chooser) = &budget.chooser else {
        return;
    };
    let chosen = {
        let mut chooser = lock(chooser);
        match chooser.range_ended(&name, launches) {
            None => return,
            Some(Choice::Chosen { name, .. }) => Some(name.clone()),
            Some(_) => None,
        }
    };
    if let Some(name) = chosen {
        let _ = budget.step_range.set(name);
    }
    WATCHING.store(false, Ordering::SeqCst);
    disarm_watch(&shared);
}

/// Turns the watch's launch callbacks off once it has ended, if they are on (retried at later
/// pops when another thread was switching).
fn disarm_watch(shared: &Shared) {
    if let Some(budget) = &shared.budget
        && !WATCHING.load(Ordering::SeqCst)
    {
        switch_watch_callbacks(shared, budget, false);
    }
}

/// Enables or disables the kernel-launch callbacks of the step-range watch, holding the
/// budget's switch token (so never while recording ends); when another thread holds it, does
/// nothing: the next outermost range tries again.
fn switch_watch_callbacks(shared: &Shared, budget: &Budget, on: bool) {
    let Some(cupti) = loader::loaded() else {
        return;
    };
    let Some(_token) = lock_within(&budget.applied, std::time::Duration::ZERO) else {
        return;
    };
    if WATCH_ARMED.load(Ordering::SeqCst) == on || lock(&budget.decisions).is_frozen() {
        return;
    }
    WATCH_ARMED.store(on, Ordering::SeqCst);
    // The recorder's live subscriber: the watch stops, under `WATCHING`, before it
    // unsubscribes.
    let subscriber = SubscriberHandle::from_bits(budget.subscriber.load(Ordering::SeqCst));
    let calls = lock(&budget.watch_callbacks).clone();
    for (domain, cbid) in calls {
        if let Err(e) = cupti.enable_callback(subscriber, domain, cbid, on) {
            lock(&shared.state).problem(format!(
                "step range watch: cuptiEnableCallback({on}, cbid {cbid}) failed: {}",
                e.result_name()
            ));
        }
    }
}

/// The current thread's circumstances, with the API name still raw.
struct RawCreation {
    outermost: Option<&'static [u8]>,
    library_call: Option<StrId>,
    wait_external: bool,
    record_external: bool,
    explicit_add: bool,
    at: u64,
    thread: u32,
}

/// `cuptiGetTimestamp`, 0 ("unknown") on failure.
fn now(cupti: &Cupti) -> u64 {
    cupti.timestamp().unwrap_or(0)
}

/// The circumstances of a node made now (`at`, CUPTI clock) on this thread.
fn raw_creation(at: u64) -> RawCreation {
    let mut raw = RawCreation {
        at,
        thread: current_thread_id(),
        outermost: None,
        library_call: LIBRARY_STACK
            .try_with(|s| s.borrow().last().copied())
            .ok()
            .flatten(),
        wait_external: false,
        record_external: false,
        explicit_add: false,
    };
    let _ = API_STACK.try_with(|stack| {
        let stack = stack.borrow();
        raw.outermost = stack.first().and_then(|f| f.name.to_bytes());
        for f in stack.iter() {
            raw.wait_external |= f.wait_external;
            raw.record_external |= f.record_external;
            if let Some(name) = f.name.to_bytes() {
                raw.explicit_add |=
                    name.starts_with(b"cudaGraphAdd") || name.starts_with(b"cuGraphAdd");
            }
        }
    });
    raw
}

fn intern_creation(state: &mut State, raw: &RawCreation) -> Creation {
    let created_by = raw.outermost.map(|name| {
        let name = String::from_utf8_lossy(name);
        state.records.intern(api_display_name(&name))
    });
    Creation {
        created_by,
        library_call: raw.library_call,
        library_frame: None,
        wait_external: raw.wait_external,
        record_external: raw.record_external,
        explicit_add: raw.explicit_add,
        at: raw.at,
        thread: raw.thread,
    }
}

// ---------------------------------------------------------------------------------------------
// Graph resource callbacks
// ---------------------------------------------------------------------------------------------

/// A graph callback's failure, as a trace note says it.
fn failed(e: CuptiError) -> String {
    e.brief()
}

/// Asks the driver for a node's type (CUpti_GraphData.nodeType reads 0 for every node on
/// CUDA 13.0). Returns the type and the correlation ids of the driver calls this made.
fn driver_node_type(gd: &GraphEvent<'_>) -> (Result<u32, String>, Vec<u32>) {
    let Some(driver) = loader::driver_loaded() else {
        return (Err("libcuda not loaded".into()), Vec::new());
    };
    let _ = SELF_QUERY.try_with(|q| q.set(true));
    let found = gd.driver_node_type(driver);
    let _ = SELF_QUERY.try_with(|q| q.set(false));
    let corr = SELF_CORR
        .try_with(|c| std::mem::take(&mut *c.borrow_mut()))
        .unwrap_or_default();
    (
        found.map_err(|rc| format!("cuGraphNodeGetType failed (CUresult {rc})")),
        corr,
    )
}

fn on_resource(event: &ResourceCallback<'_>) {
    let cbid = event.cbid();
    if cbid == sys::CUPTI_CBID_RESOURCE_CONTEXT_CREATED {
        if let Some(shared) = active()
            && lock(&shared.state).devices.is_none()
        {
            let devices: Vec<_> = (0..64).map_while(loader::device_info).collect();
            let version = loader::driver_version();
            lock(&shared.state)
                .devices
                .get_or_insert((devices, version));
        }
        if let Some(shared) = active() {
            shared.refresh_loaded(Queries::WithoutRuntime);
        }
        return;
    }
    let Some(graph) = event.graph() else {
        return;
    };
    let (Some(shared), Some(cupti)) = (active(), loader::loaded()) else {
        return;
    };
    let Ok(gd) = graph else {
        lock(&shared.state).problem("graph callback without CUpti_GraphData");
        return;
    };
    let result = match cbid {
        sys::CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED => node_created(cupti, &shared, &gd),
        sys::CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED => node_cloned(cupti, &shared, &gd),
        sys::CUPTI_CBID_RESOURCE_GRAPHNODE_DEPENDENCY_CREATED => {
            gd.node_id(cupti).map_err(failed).and_then(|node| {
                let dep = gd.dependency_id(cupti).map_err(failed)?;
                lock(&shared.state).graph.dependency_created(node, dep);
                Ok(())
            })
        }
        _ => gd.exec_id(cupti).map_err(failed).and_then(|exec| {
            // A reused handle starts its count afresh even if the template is unknown.
            if let Some(budget) = &shared.budget {
                lock(&budget.decisions).exec_created(gd.exec_handle(), exec);
            }
            let template = gd.graph_id(cupti).map_err(failed)?;
            lock(&shared.state).graph.exec_created(exec, template);
            // The libraries a program loads late (torch's NCCL on its first collective) are
            // loaded by its first capture.
            shared.refresh_loaded(Queries::WithoutRuntime);
            Ok(())
        }),
    };
    if let Err(e) = result {
        lock(&shared.state).problem(format!("graph callback {cbid}: {e}; event skipped"));
    }
}

fn node_type_or_fallback(
    state: &mut State,
    found: Result<u32, String>,
    cupti_type: u32,
) -> NodeType {
    match found {
        Ok(t) => NodeType::from_cuda(t),
        Err(e) => {
            state.problem(format!(
                "{e}; node type taken from CUPTI (may read as kernel)"
            ));
            NodeType::from_cuda(cupti_type)
        }
    }
}

fn node_created(cupti: &Cupti, shared: &Shared, gd: &GraphEvent<'_>) -> Result<(), String> {
    let id = gd.node_id(cupti).map_err(failed)?;
    let graph = gd.graph_id(cupti).map_err(failed)?;
    let (ty, corr) = driver_node_type(gd);
    let raw = raw_creation(now(cupti));
    // The library calls on the stack (node creation is not a hot path). Without a
    // library-call marker of ours, the program's own NCCL call tags the node (its NVTX ranges,
    // when it emits them, are joined when the recording ends).
    let libraries = if NODE_FRAMES.load(Ordering::Relaxed) {
        super::frames::calling_libraries()
    } else {
        super::frames::LibraryFrames::default()
    };
    let mut state = lock(&shared.state);
    state.self_corr.extend(corr);
    let node_type = node_type_or_fallback(&mut state, ty, gd.cupti_node_type());
    let mut how = intern_creation(&mut state, &raw);
    if how.library_call.is_none()
        && let Some(name) = libraries.nccl
    {
        how.library_call = Some(state.records.intern(&name));
    }
    how.library_frame = libraries.frame.map(|name| state.records.intern(&name));
    state.graph.node_created(id, graph, node_type, how);
    Ok(())
}

fn node_cloned(cupti: &Cupti, shared: &Shared, gd: &GraphEvent<'_>) -> Result<(), String> {
    let id = gd.node_id(cupti).map_err(failed)?;
    let template = gd.original_node_id(cupti).map_err(failed)?;
    let graph = gd.graph_id(cupti).map_err(failed)?;
    let known = lock(&shared.state).graph.get(template).is_some();
    let (ty, corr) = if known {
        (Ok(sys::CU_GRAPH_NODE_TYPE_KERNEL), Vec::new()) // unused: copied from the template
    } else {
        driver_node_type(gd)
    };
    let raw = raw_creation(now(cupti));
    let mut state = lock(&shared.state);
    state.self_corr.extend(corr);
    let fallback = node_type_or_fallback(&mut state, ty, gd.cupti_node_type());
    let how = intern_creation(&mut state, &raw);
    state.graph.node_cloned(id, graph, template, fallback, how);
    Ok(())
}

/// What the subscriber callback does: the recorder subscribes
/// [`super::params::entry`]`::<Subscribed>`.
pub(crate) struct Subscribed;

impl Handler for Subscribed {
    fn api(call: &ApiCallback<'_>) {
        on_api(call);
    }

    fn nvtx(event: &NvtxCallback<'_>) {
        on_nvtx(event);
    }

    fn resource(event: &ResourceCallback<'_>) {
        on_resource(event);
    }

    fn panicked() {
        PANICS.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::cupti::params::testing;
    use crate::record::cupti::step_choice;
    use std::ffi::c_void;

    /// An API enter or exit callback over `d`, as CUPTI makes it.
    fn api(domain: sys::CUpti_CallbackDomain, cbid: u32, d: &sys::CUpti_CallbackData) {
        on_api(&testing::api(domain, cbid, d));
    }

    #[test]
    fn api_stack_tracks_nested_calls_and_external_waits() {
        let wait = sys::cudaStreamWaitEvent_v3020_params {
            stream: std::ptr::null_mut(),
            event: std::ptr::null_mut(),
            flags: sys::cudaEventWaitExternal,
        };
        let outer = c"cudaStreamWaitEvent";
        let inner = c"cuStreamWaitEvent";
        let mut d = sys::CUpti_CallbackData {
            callbackSite: sys::CUPTI_API_ENTER,
            functionName: outer.as_ptr(),
            functionParams: &wait as *const _ as *const c_void,
            ..Default::default()
        };
        let rt = sys::CUPTI_CB_DOMAIN_RUNTIME_API;
        let drv = sys::CUPTI_CB_DOMAIN_DRIVER_API;
        let cbid_rt = sys::CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020;
        let cbid_drv = sys::CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent;
        let drv_params = sys::cuStreamWaitEvent_params {
            hStream: std::ptr::null_mut(),
            hEvent: std::ptr::null_mut(),
            Flags: 0,
        };
        api(rt, cbid_rt, &d);
        let mut di = d;
        di.functionName = inner.as_ptr();
        di.functionParams = &drv_params as *const _ as *const c_void;
        api(drv, cbid_drv, &di);
        let raw = raw_creation(0);
        assert!(raw.wait_external);
        assert!(!raw.explicit_add);
        assert_eq!(raw.outermost, Some(outer.to_bytes()));
        di.callbackSite = sys::CUPTI_API_EXIT;
        api(drv, cbid_drv, &di);
        d.callbackSite = sys::CUPTI_API_EXIT;
        api(rt, cbid_rt, &d);
        let raw = raw_creation(0);
        assert!(raw.outermost.is_none());
        assert!(!raw.wait_external);
        // An exit without an enter leaves the (empty) stack alone.
        api(rt, cbid_rt, &d);
        assert!(raw_creation(0).outermost.is_none());
    }

    #[test]
    fn library_calls_nest_per_thread() {
        push_library_call(4);
        push_library_call(7);
        assert_eq!(raw_creation(0).library_call, Some(7));
        pop_library_call(7);
        assert_eq!(raw_creation(0).library_call, Some(4));
        std::thread::spawn(|| assert_eq!(raw_creation(0).library_call, None))
            .join()
            .unwrap();
        pop_library_call(4);
        assert_eq!(raw_creation(0).library_call, None);
    }

    #[test]
    fn explicit_graph_add_is_detected() {
        let name = c"cudaGraphAddEventRecordNode";
        let d = sys::CUpti_CallbackData {
            callbackSite: sys::CUPTI_API_ENTER,
            functionName: name.as_ptr(),
            ..Default::default()
        };
        let cbid = sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddEventRecordNode_v11010;
        api(sys::CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &d);
        let raw = raw_creation(0);
        assert!(raw.explicit_add);
        let mut state = State::new();
        let how = intern_creation(&mut state, &raw);
        assert!(how.external(NodeType::EventRecord));
        assert_eq!(
            state.records.builder.trace.str(how.created_by.unwrap()),
            "cudaGraphAddEventRecordNode"
        );
        let mut exit = d;
        exit.callbackSite = sys::CUPTI_API_EXIT;
        api(sys::CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &exit);
        assert!(!raw_creation(0).explicit_add);
    }

    #[test]
    fn any_enclosing_step_range_counts_and_only_launch_calls_of_their_domain_are_launches() {
        NVTX_STACK.with(|s| s.borrow_mut().clear());
        assert!(!inside_step());
        NVTX_STACK.with(|s| s.borrow_mut().extend([false, true, false]));
        assert!(inside_step(), "a step range further out still encloses");
        NVTX_STACK.with(|s| s.borrow_mut().clear());
        assert!(is_graph_launch(
            sys::CUPTI_CB_DOMAIN_DRIVER_API,
            sys::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch
        ));
        assert!(!is_graph_launch(
            sys::CUPTI_CB_DOMAIN_RUNTIME_API,
            sys::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch
        ));
    }

    fn shared_with_budget(limit: u32, step_range: Option<&str>) -> Shared {
        Shared {
            state: Mutex::new(State::new()),
            dropped: AtomicU64::new(0),
            flush_lock: Mutex::new(()),
            flush_stopped: Default::default(),
            budget: Some(Budget::new(&super::super::budget::TraceBudget {
                limit,
                step_range: step_range.map(str::to_owned),
            })),
            loaded: Default::default(),
        }
    }

    #[test]
    fn a_switch_under_way_elsewhere_is_never_waited_for() {
        let shared = shared_with_budget(4, None);
        let budget = shared.budget.as_ref().unwrap();
        // Launch 4 is the first over budget: measured.
        for _ in 0..5 {
            lock(&budget.decisions).graph_launch(0xa, 0);
        }
        assert!(
            !lock(&budget.decisions).tracing(),
            "over budget: should pause"
        );
        budget.dirty.store(true, Ordering::SeqCst);
        let held = lock(&budget.applied); // another thread is switching
        apply_budget(&shared, budget, None);
        assert_eq!(*held, Some(Level::Traced), "left to the holder");
        assert!(
            budget.dirty.load(Ordering::SeqCst),
            "the holder will see it"
        );
        drop(held);
        // The holder's turn (here without libcupti: the switch fails, is noted, and stops).
        apply_budget(&shared, budget, None);
        assert_eq!(
            *lock(&budget.applied),
            None,
            "not known after a refused switch"
        );
        assert!(!budget.dirty.load(Ordering::SeqCst));
        let problems = &lock(&shared.state).problems;
        assert!(
            problems
                .keys()
                .any(|p| p.contains("switching recording from Traced to Measured failed")),
            "{problems:?}"
        );
        assert_eq!(lock(&budget.decisions).graph_launch(0xb, 0), None, "frozen");
    }

    /// A graph launch as CUPTI reports it: `params` is the launch's parameter block.
    fn launch_callbacks(params: &usize) -> [sys::CUpti_CallbackData; 2] {
        let enter = sys::CUpti_CallbackData {
            callbackSite: sys::CUPTI_API_ENTER,
            functionParams: (params as *const usize).cast(),
            ..Default::default()
        };
        let mut exit = enter;
        exit.callbackSite = sys::CUPTI_API_EXIT;
        [enter, exit]
    }

    #[test]
    fn api_calls_recorded_from_callbacks_are_kept_per_domain_and_cbid() {
        let _one = lock(&super::super::recorder::TEST_RECORDER_LOCK);
        let (rt, drv) = (
            sys::CUPTI_CB_DOMAIN_RUNTIME_API,
            sys::CUPTI_CB_DOMAIN_DRIVER_API,
        );
        assert!(record_api_from_callbacks(rt, 211));
        assert!(record_api_from_callbacks(drv, 1023));
        assert!(!record_api_from_callbacks(drv, 1024), "beyond the set");
        assert!(!record_api_from_callbacks(sys::CUPTI_CB_DOMAIN_NVTX, 8));
        assert!(api_recorded(rt, 211) && api_recorded(drv, 1023));
        assert!(!api_recorded(drv, 211) && !api_recorded(rt, 210));
        clear_api_recorded();
        assert!(!api_recorded(rt, 211) && !api_recorded(drv, 1023));
    }

    #[test]
    fn a_driver_call_made_by_a_runtime_call_gets_no_record_of_its_own() {
        let _one = lock(&super::super::recorder::TEST_RECORDER_LOCK);
        let (rt, drv) = (
            sys::CUPTI_CB_DOMAIN_RUNTIME_API,
            sys::CUPTI_CB_DOMAIN_DRIVER_API,
        );
        // cudaLaunchKernel (211) and cuLaunchKernel (307), both recorded.
        assert!(record_api_from_callbacks(rt, 211) && record_api_from_callbacks(drv, 307));
        let frame = |domain, cbid| Frame {
            domain,
            cbid,
            name: testing::no_name(),
            wait_external: false,
            record_external: false,
            entered: 1,
        };
        assert!(recorded_from_callbacks(rt, 211, &[]));
        assert!(
            recorded_from_callbacks(drv, 307, &[]),
            "called directly (Triton)"
        );
        assert!(
            !recorded_from_callbacks(drv, 307, &[frame(rt, 211)]),
            "inside cudaLaunchKernel: the runtime call's record is the launch's"
        );
        assert!(recorded_from_callbacks(drv, 307, &[frame(drv, 1)]));
        assert!(
            !recorded_from_callbacks(rt, 212, &[]),
            "not one of the recorded calls"
        );
        clear_api_recorded();
    }

    /// An NVTX push (`message`) or pop callback, as CUPTI makes it.
    fn nvtx_call(cbid: u32, message: &std::ffi::CStr) {
        testing::nvtx(cbid, message, on_nvtx);
    }

    #[test]
    fn the_budget_counts_each_launch_once_and_leaves_launches_inside_steps_to_the_step() {
        let _one = lock(&super::super::recorder::TEST_RECORDER_LOCK);
        let shared = Arc::new(shared_with_budget(8, Some("decode_step")));
        *lock(&ACTIVE) = Some(shared.clone());
        BUDGET_ON.store(true, Ordering::Relaxed);
        let exec: usize = 0xe5ec;
        let (rt, drv) = (
            sys::CUPTI_CB_DOMAIN_RUNTIME_API,
            sys::CUPTI_CB_DOMAIN_DRIVER_API,
        );
        let rt_cbid = sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000;
        let drv_cbid = sys::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch;
        let [rt_enter, rt_exit] = launch_callbacks(&exec);
        let [drv_enter, drv_exit] = launch_callbacks(&exec);
        let runtime_launch = || {
            api(rt, rt_cbid, &rt_enter);
            api(drv, drv_cbid, &drv_enter); // the runtime's own driver call
            api(drv, drv_cbid, &drv_exit);
            api(rt, rt_cbid, &rt_exit);
        };
        runtime_launch();
        runtime_launch();
        nvtx_call(NVTX_RANGE_PUSH_A, c"decode_step");
        nvtx_call(NVTX_RANGE_PUSH_A, c"inner");
        runtime_launch(); // inside the step: the step's decision covers it
        nvtx_call(NVTX_RANGE_POP, c"");
        nvtx_call(NVTX_RANGE_POP, c"");
        nvtx_call(NVTX_RANGE_PUSH_A, c"other_range");
        nvtx_call(NVTX_RANGE_POP, c"");
        *lock(&ACTIVE) = None;
        BUDGET_ON.store(false, Ordering::Relaxed);
        let budget = shared.budget.as_ref().unwrap();
        let decisions = lock(&budget.decisions);
        assert_eq!(
            decisions.launches(exec),
            3,
            "runtime launches, not their driver calls, the one inside the step included"
        );
        assert_eq!(decisions.steps(), 1, "only the step range's pushes");
        assert!(
            NVTX_STACK.with(|s| s.borrow().is_empty()),
            "pushes and pops pair up"
        );
    }

    /// With no step range given, the outermost range around kernel launches becomes the step
    /// range at its eighth occurrence; a range around host work only, and a nested range with
    /// the same launches, do not; from then on its pushes are steps of the budget.
    #[test]
    fn with_no_step_range_the_outermost_range_around_launches_is_chosen() {
        let _one = lock(&super::super::recorder::TEST_RECORDER_LOCK);
        let shared = Arc::new(shared_with_budget(8, None));
        *lock(&ACTIVE) = Some(shared.clone());
        BUDGET_ON.store(true, Ordering::Relaxed);
        WATCHING.store(true, Ordering::SeqCst);
        let drv = sys::CUPTI_CB_DOMAIN_DRIVER_API;
        let cbid = sys::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
        let params = 0usize;
        let [enter, exit] = launch_callbacks(&params);
        let kernel_launch = || {
            api(drv, cbid, &enter);
            api(drv, cbid, &exit);
        };
        let budget = shared.budget.as_ref().unwrap();
        for _ in 0..step_choice::CHOOSE_AFTER {
            assert_eq!(budget.step_range.get(), None);
            nvtx_call(NVTX_RANGE_PUSH_A, c"load_batch");
            nvtx_call(NVTX_RANGE_POP, c"");
            nvtx_call(NVTX_RANGE_PUSH_A, c"decode_step");
            nvtx_call(NVTX_RANGE_PUSH_A, c"attention");
            kernel_launch();
            nvtx_call(NVTX_RANGE_POP, c"");
            kernel_launch();
            nvtx_call(NVTX_RANGE_POP, c"");
        }
        let chosen = budget.step_range.get().cloned();
        let watching = WATCHING.load(Ordering::SeqCst);
        let steps_at_choice = lock(&budget.decisions).steps();
        nvtx_call(NVTX_RANGE_PUSH_A, c"decode_step");
        kernel_launch();
        nvtx_call(NVTX_RANGE_POP, c"");
        *lock(&ACTIVE) = None;
        BUDGET_ON.store(false, Ordering::Relaxed);
        WATCHING.store(false, Ordering::SeqCst);
        assert_eq!(chosen.as_deref(), Some("decode_step"));
        assert!(!watching, "the watch ends with its choice");
        assert_eq!(steps_at_choice, 0, "ranges before the choice are not steps");
        assert_eq!(lock(&budget.decisions).steps(), 1, "the next one is");
        let note = lock(budget.chooser.as_ref().unwrap()).note();
        assert!(note.contains("`decode_step` chosen"), "{note}");
    }
}
