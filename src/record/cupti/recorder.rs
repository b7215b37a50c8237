//! The recorder: CUPTI activity tracing plus graph callbacks, turned into a [`Trace`].
#![forbid(unsafe_code)]

use super::budget::Budget;
use super::buffers;
use super::callbacks;
use super::config::{
    API_DOMAINS, ApiCallbacks, CAPTURE_END_CBIDS, Diagnostics, GRAPH_BUILDING_START_CBIDS,
    GRAPH_LAUNCH_CBIDS, KINDS, LAUNCH_CBIDS, RESOURCE_CBIDS, RecorderConfig, graph_building_cbids,
    paused_by_budget,
};
use super::error::CuptiError;
use super::loaded::Queries;
use super::loader::{self, Cupti};
use super::params;
use super::result::{Subscriber, SubscriberHandle};
use super::state::{self, ACTIVE, PANICS, Shared, State, WrapperCoverage, lock};
use super::sys;
use crate::record::step_range::StepRange;
use crate::settings::Setting;
use crate::trace::{ApiDomain, Cell, Marker, MarkerKind, Metadata, StrId, Trace};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Set while a Recorder exists (CUPTI allows one subscriber per process).
static CLAIMED: AtomicBool = AtomicBool::new(false);
/// cuptiActivityRegisterCallbacks succeeded once in this process (our callbacks are static).
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Records CUDA activity and graph structure in this process. At most one exists at a time.
///
/// Create it before the workload creates its CUDA context or loads modules, synchronise the
/// device before [`Recorder::finish`] so every record is complete, and call
/// [`Recorder::flush`] at step or cell boundaries so buffers are recycled.
#[derive(Debug)]
pub struct Recorder {
    shared: Arc<Shared>,
    cupti: &'static Cupti,
    subscriber: Option<Subscriber>,
    kinds_enabled: Vec<sys::CUpti_ActivityKind>,
    domains_enabled: Vec<sys::CUpti_CallbackDomain>,
    resource_enabled: Vec<u32>,
    api_enabled: Vec<(sys::CUpti_CallbackDomain, u32)>,
    torn_down: bool,
    /// Problems met during teardown (they become trace notes).
    teardown_problems: Vec<String>,
}

/// An open host range; it is recorded when dropped. Drop it on the thread that opened it.
#[derive(Debug)]
#[must_use = "the range ends when this guard is dropped"]
pub struct MarkerGuard {
    shared: Arc<Shared>,
    cupti: &'static Cupti,
    name: StrId,
    kind: MarkerKind,
    cell: Option<u32>,
    start: u64,
    thread: u32,
    /// Library-call ranges live on a per-thread stack: keep the guard on its thread.
    _not_send: PhantomData<*const ()>,
}

impl Drop for MarkerGuard {
    fn drop(&mut self) {
        let end = timestamp(self.cupti, &self.shared).max(self.start);
        if self.kind == MarkerKind::LibraryCall {
            callbacks::pop_library_call(self.name);
        }
        lock(&self.shared.state).markers.push(Marker {
            start: self.start,
            end,
            name: self.name,
            kind: self.kind,
            thread: self.thread,
            cell: self.cell,
        });
    }
}

/// The calls whose callbacks the budget decides in, or that only build graphs: never paused.
fn budget_decides_in(call: (sys::CUpti_CallbackDomain, u32)) -> bool {
    GRAPH_LAUNCH_CBIDS.contains(&call)
        || GRAPH_BUILDING_START_CBIDS.contains(&call)
        || CAPTURE_END_CBIDS.contains(&call)
        || graph_building_cbids().any(|c| *c == call && !paused_by_budget(call))
}

/// `cuptiGetTimestamp`, or 0 with the problem noted in the trace.
fn timestamp(cupti: &Cupti, shared: &Shared) -> u64 {
    cupti.timestamp().unwrap_or_else(|e| {
        lock(&shared.state).problem(e.brief());
        0
    })
}

impl Recorder {
    /// Loads CUPTI and the driver, subscribes, enables the activity kinds and callbacks.
    ///
    /// Must be called before the workload creates its CUDA context / loads modules (kernel
    /// instrumentation happens at module load). Fails with
    /// [`CuptiError::MultipleSubscribers`] under another profiler and
    /// [`CuptiError::AlreadyRecording`] if a Recorder exists.
    pub fn start(config: RecorderConfig) -> Result<Recorder, CuptiError> {
        let cupti = loader::cupti()?;
        loader::driver()?;
        if CLAIMED
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(CuptiError::AlreadyRecording);
        }
        let shared = Arc::new(shared_state(&config));
        // From here on, dropping `rec` (on any error) undoes what was done.
        let mut rec = Recorder {
            shared: shared.clone(),
            cupti,
            subscriber: None,
            kinds_enabled: Vec::new(),
            domains_enabled: Vec::new(),
            resource_enabled: Vec::new(),
            api_enabled: Vec::new(),
            torn_down: false,
            teardown_problems: Vec::new(),
        };
        rec.subscribe()?;
        *lock(&ACTIVE) = Some(shared);
        cupti.use_system_thread_ids()?;

        let diagnostics = Diagnostics::from_env();
        rec.apply_settings(&config, &diagnostics);
        rec.register_buffers(&config)?;
        rec.enable_kinds(&config, &diagnostics)?;
        rec.enable_callbacks(&config, &diagnostics)?;
        if config.trace_budget.is_limited() {
            rec.start_budget_and_pacing(&diagnostics);
        }
        Ok(rec)
    }

    /// The diagnostic CUPTI settings (`GAPSCOPE_CUPTI_*`) and the defaults that need a CUPTI
    /// call, each noted in the trace. Per-thread buffers are set before the buffer callbacks
    /// are registered, as CUPTI requires.
    fn apply_settings(&self, config: &RecorderConfig, diagnostics: &Diagnostics) {
        let cupti = self.cupti;
        // Per-thread buffers (CUPTI's default since 12.3) are set before the buffer callbacks
        // are registered, as CUPTI requires.
        // The trace note of one diagnostic CUPTI setting: done, refused, or not in this CUPTI.
        let setting = |rc: Option<sys::CUptiResult>, call: &str, done: String| match rc {
            Some(sys::CUPTI_SUCCESS) => done,
            Some(rc) => format!("{call} failed: {}", cupti.result_name(rc)),
            None => format!(
                "this CUPTI has no {}",
                call.split('(').next().unwrap_or(call)
            ),
        };
        let mut notes = Vec::new();
        if let Some(on) = diagnostics.per_thread_buffers {
            notes.push(setting(
                cupti.set_attribute(loader::ATTR_PER_THREAD_ACTIVITY_BUFFER, u8::from(on)),
                "cuptiActivitySetAttribute(PER_THREAD_ACTIVITY_BUFFER)",
                format!(
                    "per-thread activity buffers set to {on} (GAPSCOPE_CUPTI_PER_THREAD_BUFFERS)"
                ),
            ));
        }
        state::NODE_FRAMES.store(!diagnostics.skip_node_frames, Ordering::Relaxed);
        state::PAUSE_FILTER.store(!diagnostics.keep_filter_on_pause, Ordering::Relaxed);
        if diagnostics.keep_filter_on_pause {
            notes.push(
                "trace budget: pauses leave the API record filter on (GAPSCOPE_BUDGET_PAUSE_FILTER=0)"
                    .to_owned(),
            );
        }
        if diagnostics.skip_node_frames {
            notes.push(
                "graph nodes made without their library function and Python code (GAPSCOPE_CUPTI_NODE_FRAMES=0)"
                    .to_owned(),
            );
        }
        // Kernel, copy and memset records in pinned host memory rather than CUPTI's default
        // device memory: after a sticky CUDA error (a device-side assert, an illegal address)
        // CUPTI can still read them back, so the trace keeps the work before the fault.
        let pinned = diagnostics.host_pinned.unwrap_or(true);
        let pinned_rc = cupti.set_attribute(
            loader::ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED,
            u8::from(pinned),
        );
        if diagnostics.host_pinned.is_some() || pinned_rc != Some(sys::CUPTI_SUCCESS) {
            notes.push(setting(
                pinned_rc,
                "cuptiActivitySetAttribute(MEM_ALLOCATION_TYPE_HOST_PINNED)",
                format!(
                    "device records kept in pinned host memory: {pinned} (GAPSCOPE_CUPTI_HOST_PINNED)"
                ),
            ));
        }
        for &(attr, value) in &diagnostics.size_attributes {
            notes.push(setting(
                cupti.set_attribute(attr, value),
                &format!("cuptiActivitySetAttribute({attr})"),
                format!("activity attribute {attr} set to {value} (GAPSCOPE_CUPTI_ATTR)"),
            ));
        }
        if let Some(ms) = diagnostics.flush_period_ms.or(config.flush_period_ms) {
            notes.push(setting(
                cupti.set_flush_period(ms),
                "cuptiActivityFlushPeriod",
                if diagnostics.flush_period_ms.is_some() {
                    format!("worker flush period set to {ms} ms (GAPSCOPE_CUPTI_FLUSH_PERIOD_MS)")
                } else {
                    format!("worker flush period set to {ms} ms, so that completed buffers reach gapscope record as the program runs")
                },
            ));
        }
        for note in notes {
            lock(&self.shared.state).problem(note);
        }
    }

    /// Sizes the activity buffers, registers their callbacks (once per process) and turns on
    /// the timestamps the records need.
    fn register_buffers(&self, config: &RecorderConfig) -> Result<(), CuptiError> {
        let cupti = self.cupti;
        let bytes = config.buffer_bytes.max(1024).next_multiple_of(8);
        buffers::set_buffer_bytes(bytes, config.max_buffers);
        if !REGISTERED.load(Ordering::Acquire) {
            // Both are static functions: valid for the whole process.
            cupti.register_buffer_callbacks(
                Some(buffers::buffer_requested),
                Some(buffers::buffer_completed),
            )?;
            REGISTERED.store(true, Ordering::Release);
        }
        cupti.enable_latency_timestamps(config.latency_timestamps)?;
        // Only with CUDA_EVENT records, which are what carry those timestamps: kept off, no
        // cudaEventRecord (the program's own timing events included) pays for them.
        if config.event_records {
            self.enable_event_device_timestamps()?;
        }

        Ok(())
    }

    /// Enables the activity kinds the configuration asks for, and the API record filter.
    fn enable_kinds(
        &mut self,
        config: &RecorderConfig,
        diagnostics: &Diagnostics,
    ) -> Result<(), CuptiError> {
        let cupti = self.cupti;
        for (kind, label) in KINDS {
            if kind == sys::CUPTI_ACTIVITY_KIND_CUDA_EVENT && !config.event_records {
                continue;
            }
            if kind == sys::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION && !config.sync_records {
                lock(&self.shared.state).problem(
                    "SYNCHRONIZATION activity off: host synchronisations are read from the API records of the *Synchronize calls (GAPSCOPE_CUPTI_SYNC=1 records them)",
                );
                continue;
            }
            let api_kind =
                kind == sys::CUPTI_ACTIVITY_KIND_RUNTIME || kind == sys::CUPTI_ACTIVITY_KIND_DRIVER;
            if api_kind && diagnostics.api_from_callbacks {
                continue;
            }
            if diagnostics
                .skip_kinds
                .iter()
                .any(|s| label.contains(s.as_str()))
            {
                lock(&self.shared.state).problem(format!("{label} skipped (GAPSCOPE_CUPTI_SKIP)"));
                continue;
            }
            cupti
                .enable_kind(kind, true)
                .map_err(|e| e.labelled(label))?;
            self.kinds_enabled.push(kind);
        }
        // Graph-level records (one per graph launch): the analysis does not read them yet.
        if diagnostics.graph_trace {
            let label = "cuptiActivityEnable(GRAPH_TRACE)";
            let done = cupti.enable_kind(sys::CUPTI_ACTIVITY_KIND_GRAPH_TRACE, true);
            match done.map_err(|e| e.labelled(label)) {
                Ok(()) => self
                    .kinds_enabled
                    .push(sys::CUPTI_ACTIVITY_KIND_GRAPH_TRACE),
                Err(e) => {
                    lock(&self.shared.state).problem(format!("{}: {e}", Setting::CuptiGraphTrace))
                }
            }
        }
        if !config.all_api_calls {
            self.filter_api_records(diagnostics);
        }
        Ok(())
    }

    /// Enables the resource callbacks (graph structure) and the API callbacks the
    /// configuration asks for.
    fn enable_callbacks(
        &mut self,
        config: &RecorderConfig,
        diagnostics: &Diagnostics,
    ) -> Result<(), CuptiError> {
        let cupti = self.cupti;
        let sub = self.subscriber_handle();
        for (cbid, label) in RESOURCE_CBIDS {
            cupti
                .enable_callback(sub, sys::CUPTI_CB_DOMAIN_RESOURCE, cbid, true)
                .map_err(|e| e.labelled(label))?;
            self.resource_enabled.push(cbid);
        }
        match config.api_callbacks {
            ApiCallbacks::All => {
                for (domain, label) in API_DOMAINS {
                    cupti
                        .enable_domain(sub, domain, true)
                        .map_err(|e| e.labelled(label))?;
                    self.domains_enabled.push(domain);
                }
            }
            ApiCallbacks::Off => {}
            ApiCallbacks::GraphBuilding | ApiCallbacks::GraphBuildingWithLaunches => {
                let launches = if config.api_callbacks == ApiCallbacks::GraphBuildingWithLaunches {
                    LAUNCH_CBIDS
                } else {
                    &[]
                };
                for &(domain, cbid) in graph_building_cbids().chain(launches) {
                    let done = cupti.enable_callback(sub, domain, cbid, true);
                    // An older CUPTI may not know a newer call: record what could not be
                    // enabled rather than refuse to trace.
                    match done.map_err(|e| e.labelled("cuptiEnableCallback(API)")) {
                        Ok(()) => self.api_enabled.push((domain, cbid)),
                        Err(e) => lock(&self.shared.state).problem(format!("{e} (cbid {cbid})")),
                    }
                }
            }
        }
        if diagnostics.api_from_callbacks {
            self.record_api_from_callbacks(diagnostics);
        }
        Ok(())
    }

    /// Starts the trace budget's decisions and, with `GAPSCOPE_BUDGET_PACE=1`, its time
    /// schedule.
    fn start_budget_and_pacing(&mut self, diagnostics: &Diagnostics) {
        // NVTX ranges of untraced work are summarised, not all kept (see `markers`).
        lock(&self.shared.state).records.marker_keeping = Some(Default::default());
        self.start_budget(diagnostics);
        if diagnostics.pacing {
            lock(&self.shared.state).problem(
                "trace budget: programs with no steps or graph launches to count are sampled by time (GAPSCOPE_BUDGET_PACE=1)",
            );
            self.keep_launch_callbacks_for_pacing();
            self.pace_periodically();
        }
    }

    /// The pacer thread decides but never switches CUPTI itself: a program thread does, at its
    /// next outermost API call (`callbacks::pace`). So that a program with no graph launches
    /// or ranges (an eager loop) makes such calls, the kernel-launch callbacks stay on for the
    /// whole recording, at every level, and are no longer the step-range watch's to switch.
    fn keep_launch_callbacks_for_pacing(&mut self) {
        let sub = self.subscriber_handle();
        for &(domain, cbid) in LAUNCH_CBIDS {
            if self.api_enabled.contains(&(domain, cbid)) || self.domains_enabled.contains(&domain)
            {
                continue;
            }
            let done = self.cupti.enable_callback(sub, domain, cbid, true);
            match done.map_err(|e| e.labelled("cuptiEnableCallback(pacing)")) {
                Ok(()) => self.api_enabled.push((domain, cbid)),
                Err(e) => lock(&self.shared.state).problem(format!("{e} (cbid {cbid})")),
            }
        }
        if let Some(budget) = &self.shared.budget {
            lock(&budget.watch_callbacks).retain(|c| !LAUNCH_CBIDS.contains(c));
            lock(&budget.api_callbacks).retain(|c| !LAUNCH_CBIDS.contains(c));
        }
    }

    /// Hands the budget the kinds it pauses (every device and API kind enabled so far; NVTX
    /// markers stay on) and enables the callbacks it decides in: graph launches, graph
    /// building, and NVTX pushes and pops (to count steps of the step range, or, with none
    /// given, to choose one: `step_choice`).
    fn start_budget(&mut self, diagnostics: &Diagnostics) {
        let sub = self.subscriber_handle();
        if let Some(budget) = &self.shared.budget {
            if diagnostics.no_measuring {
                lock(&budget.decisions).stop_measuring();
                lock(&self.shared.state).problem(
                    "trace budget: no launches or steps measured after a pause, no untraced periods (GAPSCOPE_BUDGET_MEASURE=0)",
                );
            }
            *lock(&budget.kinds) = self.kinds_enabled.clone();
            // The eager-hot graph-building callbacks pause too; the budget's own and the calls
            // that only build graphs never do.
            *lock(&budget.api_callbacks) = self
                .api_enabled
                .iter()
                .copied()
                .filter(|&c| {
                    paused_by_budget(c) || (state::api_recorded(c.0, c.1) && !budget_decides_in(c))
                })
                .collect();
            budget.subscriber.store(sub.to_bits(), Ordering::SeqCst);
        }
        let nvtx = [
            params::NVTX_RANGE_PUSH_A,
            params::NVTX_RANGE_PUSH_W,
            params::NVTX_RANGE_PUSH_EX,
            params::NVTX_RANGE_POP,
        ]
        .map(|cbid| (sys::CUPTI_CB_DOMAIN_NVTX, cbid));
        // The runtime's graph launch callbacks decide before the runtime call goes ahead: a
        // resume made in the driver's callback alone comes too late for the runtime call's
        // API record (seen on an H200), and the launch would look measured.
        let budget_cbids = GRAPH_LAUNCH_CBIDS
            .iter()
            .chain(&GRAPH_BUILDING_START_CBIDS)
            .chain(&CAPTURE_END_CBIDS)
            .chain(&nvtx);
        for &(domain, cbid) in budget_cbids {
            // Already on, by call or (ApiCallbacks::All) by domain.
            if self.api_enabled.contains(&(domain, cbid)) || self.domains_enabled.contains(&domain)
            {
                continue;
            }
            let done = self.cupti.enable_callback(sub, domain, cbid, true);
            if let Err(e) = done.map_err(|e| e.labelled("cuptiEnableCallback(trace budget)")) {
                // Without its callbacks the budget cannot count: trace everything instead.
                if let Some(budget) = &self.shared.budget {
                    lock(&budget.decisions).freeze();
                    lock(&budget.markers).keep_all();
                }
                lock(&self.shared.state).problem(format!(
                    "{e} (cbid {cbid}): no trace budget, every step traced"
                ));
                return;
            }
            self.api_enabled.push((domain, cbid));
        }
        if let Some(budget) = &self.shared.budget
            && budget.chooser.is_some()
        {
            // Launch callbacks the recorder has on anyway need no arming by the watch.
            *lock(&budget.watch_callbacks) = LAUNCH_CBIDS
                .iter()
                .copied()
                .filter(|c| !self.api_enabled.contains(c) && !self.domains_enabled.contains(&c.0))
                .collect();
            state::WATCHING.store(true, Ordering::SeqCst);
        }
        state::WRAPPER_COVERAGE.store(WrapperCoverage::Unknown as u8, Ordering::SeqCst);
        state::WRAPPER_DECIDES.store(diagnostics.launch_wrapper, Ordering::SeqCst);
        state::BUDGET_ON.store(true, Ordering::Relaxed);
    }

    /// The step range of this recording as it stands: the one given, or the one chosen so
    /// far (a copy: it outlives [`Recorder::finish`]).
    pub fn step_range(&self) -> StepRange {
        self.shared.step_range.clone()
    }

    /// Every runtime (with `runtime`) and driver (with `driver`) call CUPTI names, and whether
    /// [`api_record_wanted`] keeps its record.
    fn api_calls_wanted(
        &self,
        diagnostics: &Diagnostics,
        runtime: bool,
        driver: bool,
    ) -> Vec<(sys::CUpti_CallbackDomain, u32, bool)> {
        let domains = [
            (
                runtime,
                sys::CUPTI_CB_DOMAIN_RUNTIME_API,
                sys::CUPTI_RUNTIME_TRACE_CBID_SIZE,
            ),
            (
                driver,
                sys::CUPTI_CB_DOMAIN_DRIVER_API,
                sys::CUPTI_DRIVER_TRACE_CBID_SIZE,
            ),
        ];
        let mut calls = Vec::new();
        for (on, domain, size) in domains {
            if !on {
                continue;
            }
            for cbid in 1..size {
                if let Some(name) = self.cupti.callback_name(domain, cbid) {
                    calls.push((domain, cbid, diagnostics.api_record_wanted(&name)));
                }
            }
        }
        calls
    }

    /// Enables the enter and exit callbacks of every API call [`api_record_wanted`] keeps, which
    /// make their records (`GAPSCOPE_CUPTI_API_FROM=callbacks`).
    fn record_api_from_callbacks(&mut self, diagnostics: &Diagnostics) {
        let sub = self.subscriber_handle();
        let mut recorded = 0;
        for (domain, cbid, wanted) in self.api_calls_wanted(diagnostics, true, true) {
            if !wanted || !state::record_api_from_callbacks(domain, cbid) {
                continue;
            }
            recorded += 1;
            if self.api_enabled.contains(&(domain, cbid)) || self.domains_enabled.contains(&domain)
            {
                continue;
            }
            let done = self.cupti.enable_callback(sub, domain, cbid, true);
            match done.map_err(|e| e.labelled("cuptiEnableCallback(API record)")) {
                Ok(()) => self.api_enabled.push((domain, cbid)),
                Err(e) => lock(&self.shared.state).problem(format!("{e} (cbid {cbid})")),
            }
        }
        state::API_FROM_CALLBACKS.store(true, Ordering::SeqCst);
        lock(&self.shared.state).problem(format!(
            "API activity: calls to {recorded} API functions recorded from their enter and exit callbacks, the RUNTIME and DRIVER kinds off (GAPSCOPE_CUPTI_API_FROM=callbacks)"
        ));
    }

    /// Leaves only the API calls of [`api_record_wanted`] with activity records; says in the
    /// trace notes what was left out, or that this CUPTI cannot filter.
    fn filter_api_records(&self, diagnostics: &Diagnostics) {
        let runtime_on = self
            .kinds_enabled
            .contains(&sys::CUPTI_ACTIVITY_KIND_RUNTIME);
        let driver_on = self
            .kinds_enabled
            .contains(&sys::CUPTI_ACTIVITY_KIND_DRIVER);
        if !runtime_on && !driver_on {
            return;
        }
        if self.cupti.api_filter().is_none() {
            lock(&self.shared.state).problem(
                "this CUPTI cannot record API calls selectively (no cuptiActivityEnableRuntimeApi): every API call is recorded, at a higher overhead",
            );
            return;
        }
        if let Some(only) = &diagnostics.api_only {
            lock(&self.shared.state).problem(format!(
                "API activity limited to calls named like {} (GAPSCOPE_CUPTI_API_ONLY)",
                only.join(", ")
            ));
        }
        let switches = self.api_calls_wanted(diagnostics, runtime_on, driver_on);
        let failed = callbacks::apply_api_filter(self.cupti, switches.iter().copied());
        if let Some(budget) = &self.shared.budget {
            // Re-enabling the API kinds after a pause records every call again.
            *lock(&budget.api_filter) = Some(switches);
        }
        let mut state = lock(&self.shared.state);
        if diagnostics.api_only.is_none() {
            state.problem(
                "API activity: only launches, copies, memsets, synchronisations, stream waits, event records, graph instantiation and capture calls are recorded (GAPSCOPE_CUPTI_API=all records every call)",
            );
        }
        if failed > 0 {
            state.problem(format!(
                "cuptiActivityEnable{{Runtime,Driver}}Api failed for {failed} call ids (those stay recorded)"
            ));
        }
    }

    /// `cuptiActivityEnableCudaEventDeviceTimestamps(1)` where CUPTI has it (13.0+); without it
    /// CUDA_EVENT records may carry no device timestamp, which the trace notes say.
    fn enable_event_device_timestamps(&self) -> Result<(), CuptiError> {
        if let Some(done) = self.cupti.enable_event_device_timestamps() {
            return done;
        }
        lock(&self.shared.state).problem(
            "this CUPTI has no cuptiActivityEnableCudaEventDeviceTimestamps: event records may lack device timestamps",
        );
        Ok(())
    }

    /// Also records NVTX ranges (`CUPTI_ACTIVITY_KIND_MARKER`) as [`MarkerKind::Range`]
    /// markers. They reach CUPTI only when the process runs with `NVTX_INJECTION64_PATH`
    /// naming libcupti (set before its first NVTX call).
    pub fn enable_nvtx_markers(&mut self) -> Result<(), CuptiError> {
        let kind = sys::CUPTI_ACTIVITY_KIND_MARKER;
        if self.torn_down || self.kinds_enabled.contains(&kind) {
            return Ok(());
        }
        self.cupti
            .enable_kind(kind, true)
            .map_err(|e| e.labelled("cuptiActivityEnable(MARKER)"))?;
        self.kinds_enabled.push(kind);
        Ok(())
    }

    fn subscriber_handle(&self) -> SubscriberHandle {
        self.subscriber
            .as_ref()
            .map_or(SubscriberHandle::from_bits(0), Subscriber::handle)
    }

    fn subscribe(&mut self) -> Result<(), CuptiError> {
        let callback = params::entry::<callbacks::Subscribed>;
        self.subscriber = Some(self.cupti.subscribe(callback)?);
        Ok(())
    }

    /// `cuptiGetTimestamp`: now, in ns, on the clock of the activity records. Returns 0 (and
    /// notes the problem in the trace) if CUPTI fails.
    pub fn timestamp(&self) -> u64 {
        timestamp(self.cupti, &self.shared)
    }

    /// Adds a cell (configuration) and returns its index for [`Recorder::step`]. The cells
    /// added here replace `metadata.cells` in [`Recorder::finish`] when any were added.
    pub fn add_cell(&self, cell: Cell) -> u32 {
        let mut state = lock(&self.shared.state);
        state.cells.push(cell);
        (state.cells.len() - 1) as u32
    }

    fn marker(&self, name: &str, kind: MarkerKind, cell: Option<u32>) -> MarkerGuard {
        let id = lock(&self.shared.state).records.intern(name);
        if kind == MarkerKind::LibraryCall {
            callbacks::push_library_call(id);
        }
        MarkerGuard {
            shared: self.shared.clone(),
            cupti: self.cupti,
            name: id,
            kind,
            cell,
            start: self.timestamp(),
            thread: state::current_thread_id(),
            _not_send: PhantomData,
        }
    }

    /// A step of `cell`: a [`MarkerKind::Step`] range named "step", recorded on drop.
    pub fn step(&self, cell: u32) -> MarkerGuard {
        self.marker("step", MarkerKind::Step, Some(cell))
    }

    /// A library call such as `ncclAllGather` ([`MarkerKind::LibraryCall`]). Graph nodes
    /// created on this thread while it is open get `library_call = name`.
    pub fn library_call(&self, name: &str) -> MarkerGuard {
        self.marker(name, MarkerKind::LibraryCall, None)
    }

    /// Any other host range ([`MarkerKind::Range`]).
    pub fn range(&self, name: &str) -> MarkerGuard {
        self.marker(name, MarkerKind::Range, None)
    }

    fn read_dropped(&self) -> Result<(), CuptiError> {
        let n = self.cupti.dropped_records()?;
        self.shared.dropped.fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }

    fn flush_with(&self, flag: u32, label: &'static str) -> Result<(), CuptiError> {
        let _one_at_a_time = lock(&self.shared.flush_lock);
        // Completed buffers come back through our static callback, which does not take
        // `flush_lock`.
        self.cupti.flush_all(flag).map_err(|e| e.labelled(label))?;
        self.read_dropped()
    }

    /// `cuptiActivityFlushAll(0)`: hands completed buffers to the recorder. Call it at step or
    /// cell boundaries (outside timed regions).
    pub fn flush(&self) -> Result<(), CuptiError> {
        self.flush_with(0, "cuptiActivityFlushAll(0)")
    }

    /// Flushes completed activity buffers every `period` from a thread of its own until
    /// recording ends, so that buffers that never fill (a short or slow program's) are handed
    /// over as they complete: CUPTI's own flush period returns only full ones. A default
    /// flush (flag 0) waits for no device work and may run beside the program's threads.
    pub fn flush_periodically(&self, period: std::time::Duration) {
        let cupti = self.cupti;
        self.tick_while_recording("gapscope-flush", period, move |shared| {
            let _one_at_a_time = lock(&shared.flush_lock);
            if shared.flush_stopped.load(Ordering::Acquire) {
                return false;
            }
            // Buffers come back through our static callback, which does not take `flush_lock`.
            let _ = cupti.flush_all(0);
            true
        });
    }

    /// With a trace budget: ticks its time schedule every [`super::budget::PACE_TICK`] until
    /// recording ends, so that a program with nothing the budget counts (no steps, no graph
    /// launches) is sampled too instead of traced whole.
    fn pace_periodically(&self) {
        if self.shared.budget.is_some() {
            self.tick_while_recording("gapscope-pace", super::budget::PACE_TICK, |shared| {
                callbacks::pace(shared);
                true
            });
        }
    }

    /// Runs `tick` every `period` on a thread of its own while this recorder is the active
    /// one, until `tick` returns false.
    fn tick_while_recording(
        &self,
        name: &str,
        period: std::time::Duration,
        mut tick: impl FnMut(&Shared) -> bool + Send + 'static,
    ) {
        let shared = Arc::clone(&self.shared);
        let _ = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // No signal runs its handler on this thread: a trace written from a handler
                // takes `flush_lock`, which the flush thread may hold.
                let all = nix::sys::signal::SigSet::all();
                let _ = nix::sys::signal::pthread_sigmask(
                    nix::sys::signal::SigmaskHow::SIG_BLOCK,
                    Some(&all),
                    None,
                );
                loop {
                    std::thread::sleep(period);
                    let recording = lock(&ACTIVE)
                        .as_ref()
                        .is_some_and(|a| Arc::ptr_eq(a, &shared));
                    if !recording || !tick(&shared) {
                        return;
                    }
                }
            });
    }

    /// From now on, hands each completed activity buffer's records (and the graph, markers,
    /// sampling and dropped counts so far) to `writer` as it completes (see
    /// [`crate::record::spill`]), until the trace is finished.
    pub fn deliver_to(&self, writer: crate::record::spill::SpillWriter) {
        buffers::start_delivering(writer);
    }

    /// From now on, keeps process `pid`'s tracing flag in `out` (see
    /// [`crate::record::env::TracingFlag`]), saying whether API calls are traced now; the
    /// error when it cannot be written (then `record` reads no host samples of this process).
    pub fn say_tracing_in(&self, out: &std::path::Path, pid: u32) -> std::io::Result<()> {
        let tracing = self
            .shared
            .budget
            .as_ref()
            .is_none_or(|b| matches!(*lock(&b.applied), Some(super::budget::Level::Traced)));
        let flag = crate::record::env::TracingFlag::create(out, pid, tracing)?;
        let _ = self.shared.tracing_flag.set(flag);
        Ok(())
    }

    /// Records lost so far: reported dropped by CUPTI plus kernels with zero timestamps.
    pub fn dropped_records(&self) -> u64 {
        let zero = lock(&self.shared.state).records.zero_timestamp_kernels;
        self.shared.dropped.load(Ordering::Relaxed) + zero
    }

    /// CUPTI API version of the loaded libcupti (e.g. 130001).
    pub fn cupti_version(&self) -> u32 {
        self.cupti.version()
    }

    /// Where libcupti was loaded from.
    pub fn cupti_path(&self) -> &'static str {
        self.cupti.path()
    }

    /// Stops recording: disables the activity kinds, flushes every buffer (forced), reads the
    /// dropped count, disables callbacks and unsubscribes. Idempotent. Errors other than the
    /// flush's are kept as notes (the records are still good).
    fn teardown(&mut self) -> Result<(), CuptiError> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        // No periodic flush from here on: a program exiting from another thread keeps
        // launching while CUPTI is torn down.
        self.shared.flush_stopped.store(true, Ordering::Release);
        let mut notes = Vec::new();
        // Flush only what we enabled: when start failed early (e.g. another profiler holds
        // CUPTI) there is nothing of ours to flush.
        let had_kinds = !self.kinds_enabled.is_empty();
        // The budget stops switching first, and its switch token is kept until the kinds are
        // off and flushed. The waits are bounded: this may run in a signal handler that
        // interrupted a thread holding them.
        let shared = self.shared.clone();
        let mut switch_token = None;
        if let Some(budget) = &shared.budget {
            state::BUDGET_ON.store(false, Ordering::Relaxed);
            state::WATCHING.store(false, Ordering::SeqCst);
            state::WRAPPER_DECIDES.store(false, Ordering::SeqCst);
            if let Some(note) = wrapper_note(state::WRAPPER_COVERAGE.load(Ordering::SeqCst)) {
                lock(&shared.state).problem(note);
            }
            let wait = std::time::Duration::from_millis(200);
            match state::lock_within(&budget.decisions, wait) {
                Some(mut decisions) => decisions.freeze(),
                None => notes.push("trace budget: could not stop its switching".into()),
            }
            match state::lock_within(&budget.applied, wait) {
                Some(applied) => {
                    // The kinds the level last applied has off are off already.
                    if let Some(level) = *applied {
                        let paused = lock(&budget.kinds);
                        self.kinds_enabled.retain(|&k| {
                            !paused.contains(&k) || super::budget::kind_on_at(k, level)
                        });
                    }
                    switch_token = Some(applied);
                }
                None => {
                    notes.push("trace budget: a switch was under way when recording ended".into())
                }
            }
        }
        for kind in std::mem::take(&mut self.kinds_enabled) {
            if let Err(e) = self.cupti.enable_kind(kind, false) {
                notes.push(format!("{e} (kind {kind})"));
            }
        }
        let flushed = if had_kinds {
            self.flush_with(
                sys::CUPTI_ACTIVITY_FLAG_FLUSH_FORCED,
                "cuptiActivityFlushAll(FORCED)",
            )
        } else {
            Ok(())
        };
        drop(switch_token);
        let sub = self.subscriber_handle();
        for cbid in std::mem::take(&mut self.resource_enabled) {
            let done = self
                .cupti
                .enable_callback(sub, sys::CUPTI_CB_DOMAIN_RESOURCE, cbid, false);
            if let Err(e) = done.map_err(|e| e.labelled("cuptiEnableCallback(0)")) {
                notes.push(e.to_string());
            }
        }
        for (domain, cbid) in std::mem::take(&mut self.api_enabled) {
            let done = self.cupti.enable_callback(sub, domain, cbid, false);
            if let Err(e) = done.map_err(|e| e.labelled("cuptiEnableCallback(0)")) {
                notes.push(e.to_string());
            }
        }
        for domain in std::mem::take(&mut self.domains_enabled) {
            let done = self.cupti.enable_domain(sub, domain, false);
            if let Err(e) = done.map_err(|e| e.labelled("cuptiEnableDomain(0)")) {
                notes.push(e.to_string());
            }
        }
        if let Some(Err(e)) = self.subscriber.take().map(Subscriber::unsubscribe) {
            notes.push(e.to_string());
        }
        // Unsubscribing ended the watch's launch callbacks too.
        state::WATCH_ARMED.store(false, Ordering::SeqCst);
        state::API_FROM_CALLBACKS.store(false, Ordering::SeqCst);
        state::clear_api_recorded();
        {
            let mut active = lock(&ACTIVE);
            if active
                .as_ref()
                .is_some_and(|a| Arc::ptr_eq(a, &self.shared))
            {
                *active = None;
            }
        }
        buffers::release_free_buffers();
        CLAIMED.store(false, Ordering::Release);
        self.teardown_problems.extend(notes);
        flushed
    }

    /// Stops recording and builds the trace: forced flush, dropped records accumulated,
    /// callbacks disabled, unsubscribed, records sorted. Synchronise the device first.
    ///
    /// `metadata` is stored as given, except: `cells` is replaced by the cells added with
    /// [`Recorder::add_cell`] when any were; `versions.cupti` is filled when empty; problems
    /// met while recording are appended to `notes`; the CUDA libraries loaded now are listed
    /// in `versions.loaded` and fill `versions.nccl`, `nccl_library` and `cuda_runtime` where
    /// they are empty.
    pub fn finish(self, metadata: Metadata) -> Result<Trace, CuptiError> {
        self.finish_walking(metadata, true)
    }

    /// [`Recorder::finish`] from a signal handler: the loaded libraries are those listed at
    /// the last context creation or graph instantiation (walking them again takes the
    /// dynamic loader's lock, which the interrupted thread may hold).
    pub fn finish_from_signal_handler(self, metadata: Metadata) -> Result<Trace, CuptiError> {
        self.finish_walking(metadata, false)
    }

    fn finish_walking(mut self, mut metadata: Metadata, walk: bool) -> Result<Trace, CuptiError> {
        // The whole trace is written now: no more deliveries, and no more gaps to sample.
        buffers::stop_delivering();
        self.shared.say_tracing(false);
        self.teardown()?;
        if walk {
            // Recording has stopped: the runtime may be asked its version.
            self.shared.refresh_loaded(Queries::WithRuntime);
        }
        match self.shared.loaded.try_lock() {
            Ok(loaded) => loaded.fill(&mut metadata.versions),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                p.into_inner().fill(&mut metadata.versions)
            }
            Err(std::sync::TryLockError::WouldBlock) => metadata
                .notes
                .push("recorder: the loaded CUDA libraries were being listed: not named".into()),
        }
        let mut state = std::mem::replace(&mut *lock(&self.shared.state), State::new());
        let dropped = self.shared.dropped.load(Ordering::Relaxed);

        if !state.cells.is_empty() {
            metadata.cells = std::mem::take(&mut state.cells);
        }
        if metadata.versions.cupti.is_none() {
            metadata.versions.cupti = Some(format!("CUPTI API {}", self.cupti.version()));
        }
        for (msg, n) in &state.problems {
            metadata.notes.push(if *n > 1 {
                format!("recorder: {msg} ({n} times)")
            } else {
                format!("recorder: {msg}")
            });
        }
        self.note_budget(&mut metadata, &state);
        for msg in &self.teardown_problems {
            metadata.notes.push(format!("recorder: {msg}"));
        }
        note_what_was_lost(&mut metadata, &state, dropped);
        let zero = state.records.zero_timestamp_kernels;
        let mut builder = state.records.builder;
        // Device and driver as read at context creation (never from the driver now: this may
        // run in a signal handler).
        if let Some((devices, driver)) = state.devices {
            if metadata.device.is_none() {
                let ordinal = builder.trace.kernels.first().map_or(0, |k| k.device);
                metadata.device = devices.into_iter().find(|d| d.index == ordinal);
            }
            if metadata.versions.driver.is_none() {
                metadata.versions.driver = driver;
            }
        }
        builder.trace.metadata = metadata;
        let t = &mut builder.trace;
        let self_corr = state.self_corr;
        t.api_calls
            .retain(|a| !(a.domain == ApiDomain::Driver && self_corr.contains(&a.corr)));
        // NVTX ranges decoded from MARKER records are already in `t.markers`.
        t.markers.extend(state.markers);
        // NVTX ranges of NCCL's own API calls tag the nodes NCCL made inside them.
        // Our own library-call markers tagged their nodes at creation already.
        let library_ranges = crate::trace::HostRanges::library_calls(t, false);
        t.graph = state.graph.into_dag(&library_ranges);
        t.dropped_records = dropped + zero;

        t.demangle_kernel_names();
        t.sort_records();
        Ok(builder.finish())
    }

    /// The trace budget's notes and sampling record: the step range chosen, the decisions,
    /// and the NVTX ranges of untraced work summarised.
    fn note_budget(&self, metadata: &mut Metadata, state: &State) {
        let Some(budget) = &self.shared.budget else {
            return;
        };
        let step_range = self.shared.step_range.name();
        let longest = budget.switch_ns.load(Ordering::Relaxed);
        if let Some(chooser) = &budget.chooser {
            metadata
                .notes
                .push(format!("recorder: {}", lock(chooser).note()));
        }
        let decisions = lock(&budget.decisions);
        for note in decisions.notes(step_range, longest) {
            metadata.notes.push(format!("recorder: {note}"));
        }
        metadata.sampling = decisions.sampling();
        let windows = lock(&budget.markers).clone();
        if let Some(sample) = state.records.marker_sample(&windows) {
            let names = sample.left_out.len();
            let left_out: u64 = sample.left_out.iter().map(|r| r.count).sum();
            metadata.notes.push(format!(
                "recorder: {left_out} NVTX ranges of untraced work left out, summarised per name ({names} names: count and host durations, metadata.sampling.markers); the ranges around traced work and {} untraced steps or launches after each pause are kept",
                windows.untraced_kept()
            ));
            if windows.full {
                metadata.notes.push(format!(
                    "recorder: tracing switched more than {} times: no NVTX ranges kept after that",
                    super::budget::markers::MAX_WINDOWS
                ));
            }
            metadata
                .sampling
                .get_or_insert_with(Default::default)
                .markers = Some(sample);
        }
    }
}

/// The notes of what the recording lost or left out: panics caught, records of kinds not
/// enabled, ranges never ended, failed captures, and the first sticky CUDA error.
fn note_what_was_lost(metadata: &mut Metadata, state: &State, dropped: u64) {
    let panics = PANICS.swap(0, Ordering::Relaxed);
    if panics > 0 {
        metadata.notes.push(format!(
            "recorder: {panics} panics caught in CUPTI callbacks; some records may be missing"
        ));
    }
    if state.records.unexpected_records > 0 {
        metadata.notes.push(format!(
            "recorder: {} activity records of kinds not enabled were ignored",
            state.records.unexpected_records
        ));
    }

    let unclosed = state.records.unclosed_markers();
    metadata.unended_ranges = unclosed as u64;
    if unclosed > 0 {
        metadata.notes.push(format!(
            "recorder: {unclosed} NVTX ranges were started but never ended (left out)"
        ));
    }
    let zero = state.records.zero_timestamp_kernels;
    if let Some(note) = super::decode::failed_captures_note(
        &state.records.failed_captures,
        &state.records.builder.trace,
    ) {
        metadata.notes.push(format!("recorder: {note}"));
    }
    if let Some(fault) = &state.records.first_fault {
        metadata.notes.push(fault_note(
            fault,
            &state.records.builder.trace,
            dropped + zero,
        ));
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Never panic in drop; errors here have nowhere to go (finish reports them).
        let _ = self.teardown();
    }
}

/// The state a recorder of `config` shares with its callbacks: a budget only when it is
/// limited, the step range whether or not there is one.
pub(super) fn shared_state(config: &RecorderConfig) -> Shared {
    let step_range = config.step_range.clone();
    Shared {
        state: Mutex::new(State::new()),
        dropped: Default::default(),
        flush_lock: Mutex::new(()),
        flush_stopped: Default::default(),
        budget: config
            .trace_budget
            .is_limited()
            .then(|| Budget::new(&config.trace_budget, &step_range)),
        step_range,
        loaded: Default::default(),
        tracing_flag: Default::default(),
    }
}

/// Serialises the tests that start a real Recorder (one per process at a time).
/// The trace's note on how the budget saw graph launches (`None` where it saw none).
fn wrapper_note(coverage: u8) -> Option<&'static str> {
    if coverage == WrapperCoverage::Covers as u8 {
        Some(
            "trace budget: graph launches decided in the preloaded library's cudaGraphLaunch, their CUPTI callbacks off between sampled windows",
        )
    } else if coverage == WrapperCoverage::Bypassed as u8 {
        Some(
            "trace budget: a graph launch bypassed the preloaded library's cudaGraphLaunch (a driver call, or a runtime it does not stand in for), so the graph-launch callbacks stayed on between sampled windows",
        )
    } else {
        None
    }
}

#[cfg(test)]
pub(crate) static TEST_RECORDER_LOCK: Mutex<()> = Mutex::new(());

/// The trace note of a sticky CUDA error: what it was, the first call that returned it, and
/// what the recording lost with it (CUPTI cannot read device records back from a faulted
/// context: they are counted as dropped).
fn fault_note(fault: &super::decode::Fault, trace: &crate::trace::Trace, lost: u64) -> String {
    let error = super::decode::sticky_error_name(fault.code).unwrap_or("a sticky error");
    let api = trace
        .strings
        .get(fault.api as usize)
        .map_or("an API call", String::as_str);
    let since_first = trace
        .api_calls
        .iter()
        .map(|a| a.start)
        .min()
        .map_or(0, |first| fault.start.saturating_sub(first));
    let kept = if lost > 0 {
        format!(
            "{lost} {} dropped (CUPTI could not read them back from the faulted context); the API calls and NVTX ranges are kept",
            if lost == 1 {
                "record was"
            } else {
                "records were"
            }
        )
    } else {
        "no record was dropped".to_owned()
    };
    format!(
        "the program hit a CUDA fault: {error} (error {}), first returned by {api} {:.3} s after the first recorded API call; {kept}",
        fault.code,
        since_first as f64 / 1e9,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 56 g / 58 d: `--trace-budget 0 --step-range NAME` made no budget, and the step
    /// range lived only in the budget, so its steps went unmarked. The recorder holds it apart.
    #[test]
    fn a_step_range_is_the_recorders_with_or_without_a_budget() {
        use crate::record::cupti::TraceBudget;
        for limit in [0, 16] {
            let shared = shared_state(&RecorderConfig {
                trace_budget: TraceBudget { limit },
                step_range: StepRange::new(Some("decode_step".into())),
                ..Default::default()
            });
            assert_eq!(shared.budget.is_some(), limit > 0);
            assert_eq!(shared.step_range.name(), Some("decode_step"), "{limit}");
            assert_eq!(shared.step_range.chosen(), None);
            assert!(
                shared.budget.is_none_or(|b| b.chooser.is_none()),
                "nothing to choose"
            );
        }
        let open = shared_state(&RecorderConfig {
            trace_budget: TraceBudget { limit: 16 },
            ..Default::default()
        });
        assert!(
            open.budget.is_some_and(|b| b.chooser.is_some()),
            "a budget chooses one"
        );
        assert_eq!(open.step_range.name(), None);
    }

    #[test]
    fn default_config() {
        let c = RecorderConfig::default();
        assert_eq!(c.buffer_bytes, 8 * 1024 * 1024);
        assert!(!c.latency_timestamps);
    }

    /// Runs only where libcupti and a driver exist; it records nothing (no CUDA work) but
    /// checks start/finish and the one-recorder rule.
    #[test]
    #[ignore = "needs an NVIDIA driver and libcupti (run with --ignored)"]
    fn start_and_finish_without_work() {
        let _one = lock(&TEST_RECORDER_LOCK);
        let rec = match Recorder::start(RecorderConfig {
            buffer_bytes: 4096,
            ..Default::default()
        }) {
            Ok(r) => r,
            Err(e) => panic!("needs an NVIDIA driver and libcupti: {e}"),
        };
        assert!(matches!(
            Recorder::start(RecorderConfig::default()),
            Err(CuptiError::AlreadyRecording)
        ));
        let cell = rec.add_cell(Cell {
            label: "empty".into(),
            ..Default::default()
        });
        {
            let _s = rec.step(cell);
            let _l = rec.library_call("ncclAllGather");
        }
        rec.flush().unwrap();
        let trace = rec.finish(Metadata::default()).unwrap();
        trace.validate().unwrap();
        assert_eq!(trace.markers.len(), 2);
        assert_eq!(trace.metadata.cells.len(), 1);
    }
}
