//! What the subscriber callback does (API enter/exit, NVTX pushes and pops, graph resource
//! events), on the state it shares with the recorder ([`super::state`]); `params::entry`
//! catches its panics, so none unwinds into CUPTI.
//!
//! Locks: callbacks take [`ACTIVE`] only long enough to clone an `Arc`; the state lock is never
//! held while calling CUPTI or the driver from the subscriber callback.
#![forbid(unsafe_code)]

use super::budget::step_choice::Choice;
use super::budget::{Budget, BudgetState, Level, StepContent, SwitchOp};
use super::config::{
    CAPTURE_BEGIN_CBIDS, CAPTURE_END_CBIDS, GRAPH_BUILDING_START_CBIDS, GRAPH_LAUNCH_CBIDS,
    LAUNCH_CBIDS,
};
use super::decode::api_display_name;
use super::error::CuptiError;
use super::graph::Creation;
use super::loaded::Queries;
use super::loader::{self, Cupti};
use super::params::{
    ApiCallback, FunctionName, GraphEvent, Handler, NVTX_RANGE_POP, NVTX_RANGE_PUSH_A,
    NVTX_RANGE_PUSH_EX, NVTX_RANGE_PUSH_W, NvtxCallback, ResourceCallback,
};
use super::python_stack::CreatingStack;
use super::result::SubscriberHandle;
use super::state::{
    API_FROM_CALLBACKS, BUDGET_ON, NODE_FRAMES, PANICS, PAUSE_FILTER, SWITCH_AWAITS_PROGRAM_THREAD,
    Shared, State, WATCH_ARMED, WATCHING, WRAPPER_COVERAGE, WRAPPER_DECIDES, WrapperCoverage,
    active, api_recorded, current_thread_id, lock, lock_within,
};
use super::sys;
use crate::trace::{NodeType, StrId};
use std::cell::{Cell as StdCell, RefCell};
use std::sync::atomic::{Ordering, fence};

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

/// API enter/exit: this thread's stack of active CUDA API calls, then the budget's decisions.
/// The recorder's own driver calls (node types) only have their correlation ids noted.
fn on_api(d: &ApiCallback<'_>) {
    if SELF_QUERY.try_with(|q| q.get()).unwrap_or(false) {
        if d.domain() == sys::CUPTI_CB_DOMAIN_DRIVER_API && d.entering() {
            let _ = SELF_CORR.try_with(|c| c.borrow_mut().push(d.correlation_id()));
        }
        return;
    }
    if SWITCH_AWAITS_PROGRAM_THREAD.load(Ordering::Relaxed) && d.entering() {
        switch_for_the_pacer();
    }
    let launched = track_api_stack(d);
    if BUDGET_ON.load(Ordering::Relaxed) {
        budget_sees_call(d, launched);
    }
}

/// Keeps this thread's stack of active API calls (and, while the step range is being chosen,
/// counts the outermost launches); returns the executable graph an outermost graph launch is
/// about to launch, when the budget counts launches.
fn track_api_stack(d: &ApiCallback<'_>) -> Option<usize> {
    let (domain, cbid) = (d.domain(), d.cbid());
    let mut launched = None;
    let _ = API_STACK.try_with(|stack| {
        let mut stack = stack.borrow_mut();
        if d.entering() {
            // A launch through the preloaded library's wrapper was counted and decided there.
            let wrapped = is_graph_launch(domain, cbid) && in_launch_wrapper();
            if WATCHING.load(Ordering::Relaxed)
                && !wrapped
                && is_any_launch(domain, cbid)
                && !stack.iter().any(|f| is_any_launch(f.domain, f.cbid))
            {
                count_watched_launch();
            }
            // The outermost graph launch (a runtime launch calls the driver's) decides.
            if BUDGET_ON.load(Ordering::Relaxed)
                && is_graph_launch(domain, cbid)
                && !stack.iter().any(|f| is_graph_launch(f.domain, f.cbid))
            {
                if wrapped {
                    wrapper_covers_launches();
                } else {
                    launched = d.launched_graph_exec();
                    launch_bypassed_wrapper();
                }
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
    launched
}

/// What the budget decides on a call: graph launches, captures and graph building.
fn budget_sees_call(d: &ApiCallback<'_>, launched: Option<usize>) {
    let (domain, cbid) = (d.domain(), d.cbid());
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
        graph_launch_decided(&shared, exec);
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

/// The budget's decision on an outermost launch of `exec`, from CUPTI's callback or from the
/// preloaded library's wrapper.
fn graph_launch_decided(shared: &Shared, exec: usize) {
    if inside_step() {
        step_did(StepContent::Replay(exec));
        if let Some(budget) = &shared.budget {
            lock(&budget.decisions).graph_launch_in_step(exec);
        }
    } else {
        // The launch's host time, for what tracing adds to a replay (`launch_periods`).
        let at = loader::loaded().map_or(0, now);
        budget_decides(shared, |b| b.graph_launch(exec, at));
    }
}

/// Counts a launch in this thread's open outermost range, while the step range is chosen.
fn count_watched_launch() {
    let _ = OUTER_RANGE.try_with(|r| {
        if let Some((_, launches)) = r.borrow_mut().as_mut() {
            *launches += 1;
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Graph launches decided in the preloaded library's wrapper (`launch_wrapper`)
// ---------------------------------------------------------------------------------------------
//
// Between sampled windows a replay should cost what it costs the program. CUPTI's graph-launch
// callbacks (a runtime and a driver one, each entered and left) add host time to every replay
// (benches/README.md); the wrapper decides before the runtime runs, and once CUPTI's callbacks
// have seen a launch come through it, they are paused with the budget's other callbacks.

thread_local! {
    /// Set while this thread runs a graph launch the wrapper decided on.
    static IN_LAUNCH_WRAPPER: StdCell<bool> = const { StdCell::new(false) };
}

fn in_launch_wrapper() -> bool {
    IN_LAUNCH_WRAPPER.try_with(|w| w.get()).unwrap_or(false)
}

/// The wrapper is about to launch `exec`: the budget decides here, as on an outermost launch in
/// a callback. Returns whether the caller must call [`graph_launch_wrapper_left`] after the
/// launch (false where the callbacks decide: no budget, a nested call, the setting off).
pub(super) fn graph_launch_wrapper_entered(exec: usize) -> bool {
    if !BUDGET_ON.load(Ordering::Relaxed) || !WRAPPER_DECIDES.load(Ordering::Relaxed) {
        return false;
    }
    let outermost = API_STACK
        .try_with(|s| s.borrow().is_empty())
        .unwrap_or(false);
    if !outermost || in_launch_wrapper() || IN_LAUNCH_WRAPPER.try_with(|w| w.set(true)).is_err() {
        return false;
    }
    if SWITCH_AWAITS_PROGRAM_THREAD.load(Ordering::Relaxed) {
        switch_for_the_pacer();
    }
    if WATCHING.load(Ordering::Relaxed) {
        count_watched_launch();
    }
    if let Some(shared) = active() {
        graph_launch_decided(&shared, exec);
    }
    true
}

/// The wrapper's launch returned.
pub(super) fn graph_launch_wrapper_left() {
    let _ = IN_LAUNCH_WRAPPER.try_with(|w| w.set(false));
}

/// A launch came through the wrapper: unless one bypassed it, the graph-launch callbacks join
/// the budget's paused callbacks (off below `Level::Traced`, from its next switch on).
fn wrapper_covers_launches() {
    if WRAPPER_COVERAGE
        .compare_exchange(
            WrapperCoverage::Unknown as u8,
            WrapperCoverage::Covers as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_err()
    {
        return;
    }
    if let Some(shared) = active()
        && let Some(budget) = &shared.budget
    {
        let mut paused = lock(&budget.api_callbacks);
        for call in GRAPH_LAUNCH_CBIDS {
            if !paused.contains(&call) {
                paused.push(call);
            }
        }
    }
}

/// A graph launch the wrapper did not see (a driver call, a runtime the wrapper does not
/// stand in for): the graph-launch callbacks stay on for the rest of the recording. (This
/// callback ran, so they are on now.)
fn launch_bypassed_wrapper() {
    let before = WRAPPER_COVERAGE.swap(WrapperCoverage::Bypassed as u8, Ordering::SeqCst);
    if before == WrapperCoverage::Covers as u8
        && let Some(shared) = active()
        && let Some(budget) = &shared.budget
    {
        lock(&budget.api_callbacks).retain(|c| !GRAPH_LAUNCH_CBIDS.contains(c));
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
    if decide_only(budget, decide) {
        apply_budget(shared, budget, loader::loaded());
    }
}

/// Lets the budget decide; when the level changed, marks the switch pending (`dirty`) and
/// says so.
fn decide_only(budget: &Budget, decide: impl FnOnce(&mut BudgetState) -> Option<bool>) -> bool {
    let changed = {
        let mut decisions = lock(&budget.decisions);
        let before = decisions.level();
        decide(&mut decisions);
        // In the decisions' lock, so the windows follow them in order.
        lock(&budget.markers).decided(decisions.tracing(), || loader::loaded().map_or(0, now));
        decisions.level() != before
    };
    if changed {
        budget.dirty.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }
    changed
}

/// One tick of the budget's time schedule ([`BudgetState::pace`]), from the pacer thread. It
/// only decides: the switch is made by the next outermost API call of a program thread
/// ([`switch_for_the_pacer`]; see [`SWITCH_AWAITS_PROGRAM_THREAD`]).
pub(super) fn pace(shared: &Shared) {
    let Some(budget) = &shared.budget else {
        return;
    };
    // A program that pushes no range holding work marks no steps, though a chooser watches
    // it: time paces its sampling (a model library's generate()).
    let marked = shared.step_range.name().is_some()
        || (WATCHING.load(Ordering::Relaxed)
            && budget
                .chooser
                .as_ref()
                .is_some_and(|c| lock(c).saw_step_like_ranges()));
    pace_at(budget, loader::loaded().map_or(0, now), marked);
}

/// [`pace`] at host time `now` (ns).
fn pace_at(budget: &Budget, now: u64, marked: bool) {
    if decide_only(budget, |b| {
        b.pace(now, marked);
        None
    }) {
        SWITCH_AWAITS_PROGRAM_THREAD.store(true, Ordering::SeqCst);
    }
}

/// At the entry of an API call of a program thread while the pacer's decision waits: applies
/// it there, when the call is the thread's outermost (a switch inside a call is what the
/// pacer thread's were).
fn switch_for_the_pacer() {
    let outermost = API_STACK
        .try_with(|s| s.borrow().is_empty())
        .unwrap_or(false);
    if !outermost || !SWITCH_AWAITS_PROGRAM_THREAD.swap(false, Ordering::SeqCst) {
        return;
    }
    if let Some(shared) = active() {
        apply_pending(&shared, loader::loaded());
    }
}

/// Applies the budget's pending decision (where another thread holds the switch token, that
/// thread applies the latest decision itself: `dirty`).
fn apply_pending(shared: &Shared, cupti: Option<&Cupti>) {
    if let Some(budget) = &shared.budget {
        apply_budget(shared, budget, cupti);
    }
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
                shared.say_tracing(target == Level::Traced);
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
) -> Result<(), SwitchError> {
    let Some(cupti) = cupti else {
        return Err(SwitchError::NotLoaded);
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
        Err(SwitchError::Refused(failed))
    }
}

/// Why the budget's switch did not happen; displays inside the trace note that says so.
#[derive(Debug, thiserror::Error)]
enum SwitchError {
    #[error("libcupti not loaded")]
    NotLoaded,
    /// Each switch CUPTI refused (`op: CUPTI_ERROR_…`).
    #[error("{}", .0.join(", "))]
    Refused(Vec<String>),
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
            // Steps count for a budget only.
            let step_range = shared
                .budget
                .as_ref()
                .and(shared.step_range.name())
                .map(str::as_bytes);
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
        shared.step_range.choose(name);
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
        python_stack: None,
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
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.brief())]
struct GraphCallbackError(#[from] CuptiError);

/// Why the driver did not give a node's type.
#[derive(Debug, thiserror::Error)]
enum NodeTypeError {
    #[error("libcuda not loaded")]
    NoDriver,
    #[error("cuGraphNodeGetType failed (CUresult {0})")]
    Failed(u32),
}

/// Asks the driver for a node's type (CUpti_GraphData.nodeType reads 0 for every node on
/// CUDA 13.0). Returns the type and the correlation ids of the driver calls this made.
fn driver_node_type(gd: &GraphEvent<'_>) -> (Result<u32, NodeTypeError>, Vec<u32>) {
    let Some(driver) = loader::driver_loaded() else {
        return (Err(NodeTypeError::NoDriver), Vec::new());
    };
    let _ = SELF_QUERY.try_with(|q| q.set(true));
    let found = gd.driver_node_type(driver);
    let _ = SELF_QUERY.try_with(|q| q.set(false));
    let corr = SELF_CORR
        .try_with(|c| std::mem::take(&mut *c.borrow_mut()))
        .unwrap_or_default();
    (found.map_err(NodeTypeError::Failed), corr)
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
        sys::CUPTI_CBID_RESOURCE_GRAPHNODE_DEPENDENCY_CREATED => gd
            .node_id(cupti)
            .map_err(GraphCallbackError::from)
            .and_then(|node| {
                let dep = gd.dependency_id(cupti)?;
                lock(&shared.state).graph.dependency_created(node, dep);
                Ok(())
            }),
        _ => gd
            .exec_id(cupti)
            .map_err(GraphCallbackError::from)
            .and_then(|exec| {
                // A reused handle starts its count afresh even if the template is unknown.
                if let Some(budget) = &shared.budget {
                    lock(&budget.decisions).exec_created(gd.exec_handle(), exec);
                }
                let template = gd.graph_id(cupti)?;
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
    found: Result<u32, NodeTypeError>,
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

fn node_created(
    cupti: &Cupti,
    shared: &Shared,
    gd: &GraphEvent<'_>,
) -> Result<(), GraphCallbackError> {
    let id = gd.node_id(cupti)?;
    let graph = gd.graph_id(cupti)?;
    let (ty, corr) = driver_node_type(gd);
    let raw = raw_creation(now(cupti));
    // The library calls on the stack (node creation is not a hot path). Without a
    // library-call marker of ours, the program's own NCCL call tags the node (its NVTX ranges,
    // when it emits them, are joined when the recording ends).
    let with_frames = NODE_FRAMES.load(Ordering::Relaxed);
    let libraries = if with_frames {
        super::frames::calling_libraries()
    } else {
        super::frames::LibraryFrames::default()
    };
    let python = if with_frames {
        super::python_stack::creating_stack()
    } else {
        CreatingStack::None
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
    match python {
        CreatingStack::Frames(frames) => how.python_stack = Some(state.records.intern(&frames)),
        CreatingStack::RefusedFirst(note) => state.problem(note),
        CreatingStack::None => {}
    }
    state.graph.node_created(id, graph, node_type, how);
    Ok(())
}

fn node_cloned(
    cupti: &Cupti,
    shared: &Shared,
    gd: &GraphEvent<'_>,
) -> Result<(), GraphCallbackError> {
    let id = gd.node_id(cupti)?;
    let template = gd.original_node_id(cupti)?;
    let graph = gd.graph_id(cupti)?;
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
    use crate::record::cupti::budget::step_choice;
    use crate::record::cupti::params::testing;
    use crate::record::cupti::state::{ACTIVE, clear_api_recorded, record_api_from_callbacks};
    use std::ffi::c_void;
    use std::sync::Arc;

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
        super::super::recorder::shared_state(&super::super::RecorderConfig {
            trace_budget: super::super::budget::TraceBudget { limit },
            step_range: crate::record::step_range::StepRange::new(step_range.map(str::to_owned)),
            ..Default::default()
        })
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

    #[test]
    fn the_pacer_thread_decides_and_a_program_thread_switches() {
        use super::super::budget::PACED_FIRST_NS;
        let shared = shared_with_budget(4, None);
        let budget = shared.budget.as_ref().unwrap();
        pace_at(budget, 0, false);
        assert!(
            !SWITCH_AWAITS_PROGRAM_THREAD.load(Ordering::SeqCst),
            "no change yet"
        );
        // Past the first traced stretch with nothing counted: the schedule pauses.
        pace_at(budget, PACED_FIRST_NS + 1, false);
        assert!(!lock(&budget.decisions).tracing(), "the schedule pauses");
        assert!(SWITCH_AWAITS_PROGRAM_THREAD.load(Ordering::SeqCst));
        assert!(budget.dirty.load(Ordering::SeqCst));
        assert_eq!(
            *lock(&budget.applied),
            Some(Level::Traced),
            "the pacer thread switched nothing"
        );
        // The program thread's next outermost call switches (here without libcupti: the
        // switch is refused and noted, which shows it was attempted there).
        assert!(SWITCH_AWAITS_PROGRAM_THREAD.swap(false, Ordering::SeqCst));
        apply_pending(&shared, None);
        assert_eq!(*lock(&budget.applied), None);
        assert!(!budget.dirty.load(Ordering::SeqCst));
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

    /// The graph-launch callbacks of `exec`: the runtime's launch (with the driver's launch it
    /// makes inside), or the driver's alone.
    struct GraphLaunchCalls {
        runtime: [sys::CUpti_CallbackData; 2],
        driver: [sys::CUpti_CallbackData; 2],
    }

    impl GraphLaunchCalls {
        const RT: (sys::CUpti_CallbackDomain, u32) = (
            sys::CUPTI_CB_DOMAIN_RUNTIME_API,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
        );
        const DRV: (sys::CUpti_CallbackDomain, u32) = (
            sys::CUPTI_CB_DOMAIN_DRIVER_API,
            sys::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
        );

        fn of(exec: &usize) -> GraphLaunchCalls {
            GraphLaunchCalls {
                runtime: launch_callbacks(exec),
                driver: launch_callbacks(exec),
            }
        }

        fn runtime_launch(&self) {
            let ((rt, rt_cbid), (drv, drv_cbid)) = (Self::RT, Self::DRV);
            api(rt, rt_cbid, &self.runtime[0]);
            api(drv, drv_cbid, &self.driver[0]); // the runtime's own driver call
            api(drv, drv_cbid, &self.driver[1]);
            api(rt, rt_cbid, &self.runtime[1]);
        }

        fn driver_launch(&self) {
            let (drv, drv_cbid) = Self::DRV;
            api(drv, drv_cbid, &self.driver[0]);
            api(drv, drv_cbid, &self.driver[1]);
        }
    }

    /// A recorder's shared state with a budget of `limit`, active with its budget on, as while
    /// recording.
    fn recording_with_budget(limit: u32, step_range: Option<&str>) -> Arc<Shared> {
        let shared = Arc::new(shared_with_budget(limit, step_range));
        *lock(&ACTIVE) = Some(shared.clone());
        BUDGET_ON.store(true, Ordering::Relaxed);
        shared
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
        let shared = recording_with_budget(8, Some("decode_step"));
        let exec: usize = 0xe5ec;
        let calls = GraphLaunchCalls::of(&exec);
        let runtime_launch = || calls.runtime_launch();
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

    /// A launch through the preloaded library's wrapper is decided there once (its callbacks
    /// decide nothing) and puts the graph-launch callbacks among those the budget pauses; a
    /// launch that bypasses the wrapper is decided in its callback and keeps them on for good.
    #[test]
    fn the_launch_wrapper_decides_once_and_a_bypassing_launch_keeps_the_callbacks_on() {
        let _one = lock(&super::super::recorder::TEST_RECORDER_LOCK);
        let shared = recording_with_budget(8, None);
        WRAPPER_DECIDES.store(true, Ordering::SeqCst);
        WRAPPER_COVERAGE.store(WrapperCoverage::Unknown as u8, Ordering::SeqCst);
        let exec: usize = 0xa11c;
        let calls = GraphLaunchCalls::of(&exec);
        let wrapped_launch = |callbacks_on: bool| {
            assert!(graph_launch_wrapper_entered(exec));
            if callbacks_on {
                calls.runtime_launch();
            }
            graph_launch_wrapper_left();
        };
        let budget = shared.budget.as_ref().unwrap();
        let paused_launch_callbacks = || {
            let paused = lock(&budget.api_callbacks);
            GRAPH_LAUNCH_CBIDS
                .iter()
                .filter(|c| paused.contains(c))
                .count()
        };
        wrapped_launch(true);
        assert_eq!(
            WRAPPER_COVERAGE.load(Ordering::SeqCst),
            WrapperCoverage::Covers as u8
        );
        assert_eq!(paused_launch_callbacks(), GRAPH_LAUNCH_CBIDS.len());
        wrapped_launch(false); // between windows: no callback at all
        wrapped_launch(true);
        assert_eq!(
            lock(&budget.decisions).launches(exec),
            3,
            "each launch once"
        );
        // A driver launch the wrapper never saw.
        calls.driver_launch();
        assert_eq!(lock(&budget.decisions).launches(exec), 4);
        assert_eq!(
            WRAPPER_COVERAGE.load(Ordering::SeqCst),
            WrapperCoverage::Bypassed as u8
        );
        assert_eq!(paused_launch_callbacks(), 0, "on for good");
        wrapped_launch(true);
        assert_eq!(
            WRAPPER_COVERAGE.load(Ordering::SeqCst),
            WrapperCoverage::Bypassed as u8
        );
        assert_eq!(paused_launch_callbacks(), 0);
        assert_eq!(lock(&budget.decisions).launches(exec), 5);
        // With the setting off, the wrapper leaves every decision to the callbacks.
        WRAPPER_DECIDES.store(false, Ordering::SeqCst);
        assert!(!graph_launch_wrapper_entered(exec));
        *lock(&ACTIVE) = None;
        BUDGET_ON.store(false, Ordering::Relaxed);
        WRAPPER_COVERAGE.store(WrapperCoverage::Unknown as u8, Ordering::SeqCst);
    }

    /// With no step range given, the outermost range around kernel launches becomes the step
    /// range at its eighth occurrence; a range around host work only, and a nested range with
    /// the same launches, do not; from then on its pushes are steps of the budget.
    #[test]
    fn with_no_step_range_the_outermost_range_around_launches_is_chosen() {
        let _one = lock(&super::super::recorder::TEST_RECORDER_LOCK);
        let shared = recording_with_budget(8, None);
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
            assert_eq!(shared.step_range.name(), None);
            nvtx_call(NVTX_RANGE_PUSH_A, c"load_batch");
            nvtx_call(NVTX_RANGE_POP, c"");
            nvtx_call(NVTX_RANGE_PUSH_A, c"decode_step");
            nvtx_call(NVTX_RANGE_PUSH_A, c"attention");
            kernel_launch();
            nvtx_call(NVTX_RANGE_POP, c"");
            kernel_launch();
            nvtx_call(NVTX_RANGE_POP, c"");
        }
        let chosen = shared.step_range.chosen().map(str::to_owned);
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
