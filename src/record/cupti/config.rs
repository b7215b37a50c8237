//! What the recorder enables: its settings ([`RecorderConfig`], [`ApiCallbacks`]), the
//! activity kinds, the resource and API callbacks, and which API calls keep activity records.
#![forbid(unsafe_code)]

use super::budget::TraceBudget;
use super::sys;
use crate::record::step_range::StepRange;
use crate::settings::{BadSetting, Setting, kept};

/// Recorder settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    /// Size of each host activity buffer handed to CUPTI (default 8 MiB). Rounded up to a
    /// multiple of 8 and to at least 1 KiB. Small values (e.g. 4 KiB) provoke dropped records.
    pub buffer_bytes: usize,
    /// `cuptiActivityEnableLatencyTimestamps(1)`: CUPTI fills kernel queued/submitted times
    /// (more overhead; the trace schema does not carry them yet).
    pub latency_timestamps: bool,
    /// Most activity buffers allocated at once (0: no limit). With tiny buffers, a small limit
    /// makes CUPTI drop records — the way to check that drops are reported, not hidden.
    pub max_buffers: usize,
    /// KIND_CUDA_EVENT: one record per executed event record (graph event-record nodes
    /// included) with its device timestamp. Off by default: the analysis does not need it and
    /// it costs host time on every cuEventRecord.
    pub event_records: bool,
    /// KIND_SYNCHRONIZATION: one record per synchronisation call. Off by default (`record`;
    /// `gapscope run` turns it on): the analysis reads host synchronisations from the API
    /// records of the `*Synchronize` calls, and once this kind has been enabled CUPTI slows
    /// every later API call, even after it is disabled (measured in benches/README.md, "The
    /// recorder").
    pub sync_records: bool,
    /// Which API calls get a callback (to tag graph nodes with the API and library call that
    /// created them). Every callback costs host time on that call.
    pub api_callbacks: ApiCallbacks,
    /// Record an activity record for every runtime and driver API call. Off by default: only
    /// the calls the analysis reads ([`api_record_wanted`]) are recorded, where CUPTI can
    /// filter by call (≥ 12.5): a program's many small calls (`cudaGetDevice`,
    /// `cuGetProcAddress`, …) each cost host time when recorded.
    pub all_api_calls: bool,
    /// Which launches and steps are traced (default: all). `gapscope record` sets a limit.
    pub trace_budget: TraceBudget,
    /// The NVTX range (default domain, ASCII name) that marks one step, if given; with a
    /// budget and none given, the recorder chooses one.
    pub step_range: StepRange,
    /// `cuptiActivityFlushPeriod`: CUPTI's worker hands back buffers at least this often
    /// (`None`: only when full or flushed). `gapscope record` sets it, so that the records it
    /// is handed as buffers complete ([`crate::record::spill`]) lag at most this far behind;
    /// `GAPSCOPE_CUPTI_FLUSH_PERIOD_MS` overrides it.
    pub flush_period_ms: Option<u32>,
}

/// Runtime and driver API calls whose activity records the analysis reads: launches (kernels,
/// graphs, host functions), copies and memsets (the launch side of device ops),
/// synchronisations, stream waits, event records, graph instantiation and stream capture.
pub fn api_record_wanted(name: &str) -> bool {
    const WANTED: [&str; 10] = [
        "Launch",
        "Memcpy",
        "Memset",
        "Synchronize",
        "WaitEvent",
        "EventRecord",
        "GraphInstantiate",
        "GraphUpload",
        "BeginCapture",
        "EndCapture",
    ];
    WANTED.iter().any(|w| name.contains(w))
}

/// API callbacks the recorder enables (also `gapscope run --cupti-api-callbacks` and
/// `GAPSCOPE_CUPTI_CALLBACKS` under `record`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum ApiCallbacks {
    /// Every runtime and driver API call.
    All,
    /// Only the calls that create non-kernel graph nodes or instantiate graphs (event waits and
    /// records, memsets/memcpys, host functions, cudaGraphAdd*, instantiation). Kernel nodes
    /// keep their library-call tag (from markers) but not their launch API name.
    #[default]
    GraphBuilding,
    /// As graph-building, plus kernel launches.
    GraphBuildingWithLaunches,
    /// None: graph nodes are not tagged with their creating API (nor external flags read from
    /// API parameters). For measuring what callbacks cost.
    Off,
}

/// Kernel launches: with them, captured kernel nodes are tagged with their launch API. They are
/// the hottest calls of an eager step, so only [`ApiCallbacks::All`] and
/// [`ApiCallbacks::GraphBuildingWithLaunches`] enable them.
pub(super) const LAUNCH_CBIDS: &[(sys::CUpti_CallbackDomain, u32)] = {
    use sys::CUPTI_CB_DOMAIN_DRIVER_API as D;
    use sys::CUPTI_CB_DOMAIN_RUNTIME_API as R;
    &[
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
        ),
    ]
};

/// Calls that eager code makes all the time and that also make graph nodes in a capture (or
/// set their external flags): event waits and records, async copies and memsets, host
/// functions. Their callbacks are the graph-building ones the trace budget pauses.
pub(super) const EAGER_HOT_CBIDS: &[(sys::CUpti_CallbackDomain, u32)] = {
    use sys::CUPTI_CB_DOMAIN_DRIVER_API as D;
    use sys::CUPTI_CB_DOMAIN_RUNTIME_API as R;
    &[
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuEventRecord),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010,
        ),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020),
    ]
};

/// Calls that only build graphs: explicit node creation, instantiation (and the recorder's own
/// node-type query, so that its records can be filtered out). Never paused.
pub(super) const GRAPH_ONLY_CBIDS: &[(sys::CUpti_CallbackDomain, u32)] = {
    use sys::CUPTI_CB_DOMAIN_DRIVER_API as D;
    use sys::CUPTI_CB_DOMAIN_RUNTIME_API as R;
    &[
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddEventRecordNode),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddEventWaitNode),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddKernelNode),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddKernelNode_v2),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddHostNode),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemsetNode),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemcpyNode),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddEmptyNode),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddChildGraphNode),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams),
        // The recorder's own type queries, so their records can be filtered out.
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphNodeGetType),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddEventRecordNode_v11010,
        ),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddEventWaitNode_v11010,
        ),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddKernelNode_v10000,
        ),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddHostNode_v10000),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddMemsetNode_v10000,
        ),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddMemcpyNode_v10000,
        ),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddEmptyNode_v10000,
        ),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddNode_v12020),
        (R, sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v10000),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithFlags_v11040,
        ),
        (
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_v12000,
        ),
    ]
};

/// Every graph-building call: [`EAGER_HOT_CBIDS`] then [`GRAPH_ONLY_CBIDS`].
pub(super) fn graph_building_cbids()
-> impl Iterator<Item = &'static (sys::CUpti_CallbackDomain, u32)> {
    EAGER_HOT_CBIDS.iter().chain(GRAPH_ONLY_CBIDS)
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            buffer_bytes: 8 << 20,
            latency_timestamps: false,
            max_buffers: 0,
            event_records: false,
            sync_records: false,
            api_callbacks: ApiCallbacks::default(),
            all_api_calls: false,
            trace_budget: TraceBudget::UNLIMITED,
            step_range: StepRange::default(),
            flush_period_ms: None,
        }
    }
}

/// Activity kinds the recorder enables, with the label used in error messages.
/// GRAPH_TRACE is deliberately absent: it suppresses per-kernel records of graph launches.
/// KIND_KERNEL is absent too: it serialises kernels.
pub(super) const KINDS: [(sys::CUpti_ActivityKind, &str); 7] = [
    (
        sys::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        "cuptiActivityEnable(CONCURRENT_KERNEL)",
    ),
    (
        sys::CUPTI_ACTIVITY_KIND_MEMCPY,
        "cuptiActivityEnable(MEMCPY)",
    ),
    (
        sys::CUPTI_ACTIVITY_KIND_MEMSET,
        "cuptiActivityEnable(MEMSET)",
    ),
    (
        sys::CUPTI_ACTIVITY_KIND_RUNTIME,
        "cuptiActivityEnable(RUNTIME)",
    ),
    (
        sys::CUPTI_ACTIVITY_KIND_DRIVER,
        "cuptiActivityEnable(DRIVER)",
    ),
    (
        sys::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
        "cuptiActivityEnable(SYNCHRONIZATION)",
    ),
    (
        sys::CUPTI_ACTIVITY_KIND_CUDA_EVENT,
        "cuptiActivityEnable(CUDA_EVENT)",
    ),
];

/// Driver calls that begin a stream capture (the runtime's calls go through them). A capture
/// holds tracing on until it ends ([`CAPTURE_END_CBIDS`]).
pub(super) const CAPTURE_BEGIN_CBIDS: [(sys::CUpti_CallbackDomain, u32); 6] = {
    use sys::CUPTI_CB_DOMAIN_DRIVER_API as D;
    [
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph),
        (
            D,
            sys::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
        ),
    ]
};

/// Driver calls that end a stream capture.
pub(super) const CAPTURE_END_CBIDS: [(sys::CUpti_CallbackDomain, u32); 2] = {
    use sys::CUPTI_CB_DOMAIN_DRIVER_API as D;
    [
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz),
    ]
};

/// Driver calls that start building or instantiating a graph, captures included (the
/// runtime's calls go through them). Their callbacks stay on while tracing is paused, and each
/// resumes it, so that the graph-building callbacks and API records see every graph that is
/// made.
pub(super) const GRAPH_BUILDING_START_CBIDS: [(sys::CUpti_CallbackDomain, u32); 12] = {
    use sys::CUPTI_CB_DOMAIN_DRIVER_API as D;
    let c = CAPTURE_BEGIN_CBIDS;
    [
        c[0],
        c[1],
        c[2],
        c[3],
        c[4],
        c[5],
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphCreate),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphClone),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags),
        (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams),
    ]
};

/// Graph-building callbacks of calls that eager code makes all the time — event waits and
/// records, async copies and memsets, host functions, kernel launches: the only API callbacks
/// the trace budget pauses (a capture holds them on). The others only build graphs and never
/// pause, so an explicitly built graph is always seen with its creating calls.
pub(super) fn paused_by_budget(call: (sys::CUpti_CallbackDomain, u32)) -> bool {
    EAGER_HOT_CBIDS.contains(&call) || LAUNCH_CBIDS.contains(&call)
}

/// `cudaGraphLaunch`/`cuGraphLaunch` and their per-thread-stream forms: the calls the trace
/// budget counts.
pub(super) const GRAPH_LAUNCH_CBIDS: [(sys::CUpti_CallbackDomain, u32); 4] = [
    (
        sys::CUPTI_CB_DOMAIN_RUNTIME_API,
        sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    ),
    (
        sys::CUPTI_CB_DOMAIN_RUNTIME_API,
        sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
    ),
    (
        sys::CUPTI_CB_DOMAIN_DRIVER_API,
        sys::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    ),
    (
        sys::CUPTI_CB_DOMAIN_DRIVER_API,
        sys::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    ),
];

/// Resource callbacks the recorder enables (GRAPH_CREATED needs no handling but is cheap).
pub(super) const RESOURCE_CBIDS: [(u32, &str); 6] = [
    (
        sys::CUPTI_CBID_RESOURCE_CONTEXT_CREATED,
        "cuptiEnableCallback(RESOURCE, CONTEXT_CREATED)",
    ),
    (
        sys::CUPTI_CBID_RESOURCE_GRAPH_CREATED,
        "cuptiEnableCallback(RESOURCE, GRAPH_CREATED)",
    ),
    (
        sys::CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
        "cuptiEnableCallback(RESOURCE, GRAPHNODE_CREATED)",
    ),
    (
        sys::CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
        "cuptiEnableCallback(RESOURCE, GRAPHNODE_CLONED)",
    ),
    (
        sys::CUPTI_CBID_RESOURCE_GRAPHNODE_DEPENDENCY_CREATED,
        "cuptiEnableCallback(RESOURCE, GRAPHNODE_DEPENDENCY_CREATED)",
    ),
    (
        sys::CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED,
        "cuptiEnableCallback(RESOURCE, GRAPHEXEC_CREATED)",
    ),
];

pub(super) const API_DOMAINS: [(sys::CUpti_CallbackDomain, &str); 2] = [
    (
        sys::CUPTI_CB_DOMAIN_RUNTIME_API,
        "cuptiEnableDomain(RUNTIME_API)",
    ),
    (
        sys::CUPTI_CB_DOMAIN_DRIVER_API,
        "cuptiEnableDomain(DRIVER_API)",
    ),
];

/// Diagnostic switches for measuring what each piece of recording costs, read from the
/// environment in one place (under `record` and `gapscope run` alike); every one that is set is
/// noted in the trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Diagnostics {
    /// `GAPSCOPE_CUPTI_SKIP=DRIVER,RUNTIME`: activity kinds left off (matched, upper-cased,
    /// against the kinds' labels).
    pub skip_kinds: Vec<String>,
    /// `GAPSCOPE_CUPTI_API_ONLY=Launch,EventRecord`: record only the API calls whose names hold
    /// one of these, in place of [`api_record_wanted`].
    pub api_only: Option<Vec<String>>,
    /// `GAPSCOPE_CUPTI_PER_THREAD_BUFFERS=0|1`: CUPTI's per-thread activity buffers.
    pub per_thread_buffers: Option<bool>,
    /// `GAPSCOPE_CUPTI_HOST_PINNED=0|1`: CUPTI's device-record buffers in pinned host memory
    /// (`CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED`) rather than device memory.
    pub host_pinned: Option<bool>,
    /// `GAPSCOPE_CUPTI_NODE_FRAMES=0`: graph nodes are made without reading the creating
    /// thread's frames (no library function, no Python code in their provenance), to measure
    /// their cost.
    pub skip_node_frames: bool,
    /// `GAPSCOPE_BUDGET_PAUSE_FILTER=0`: a budget's pause leaves the per-call API record filter
    /// as it is (by default it switches off the calls the filter keeps: see
    /// `budget::switch_plan`), to measure what that saves.
    pub keep_filter_on_pause: bool,
    /// `GAPSCOPE_CUPTI_API_FROM=callbacks`: the API calls kept are recorded from their enter
    /// and exit callbacks, and the RUNTIME and DRIVER activity kinds are never enabled.
    pub api_from_callbacks: bool,
    /// `GAPSCOPE_CUPTI_GRAPH_TRACE=1`: graph-level records too (CUPTI refuses them beside
    /// CONCURRENT_KERNEL, so skip that kind as well).
    pub graph_trace: bool,
    /// `GAPSCOPE_CUPTI_ATTR=0=67108864,6=4`: `size_t` activity attributes set before any kind
    /// is enabled (numbers as in `CUpti_ActivityAttribute`: 0 device buffer size, 2 its pool
    /// limit, 6 device buffers preallocated, …).
    pub size_attributes: Vec<(u32, usize)>,
    /// `GAPSCOPE_CUPTI_FLUSH_PERIOD_MS=N`: `cuptiActivityFlushPeriod(N)`, the period of CUPTI's
    /// worker thread in place of its own heuristics.
    pub flush_period_ms: Option<u32>,
    /// `GAPSCOPE_BUDGET_MEASURE=0`: a budget's pause goes straight to recording nothing, with
    /// no measured launches or steps after it (no untraced periods), to measure what
    /// measuring costs.
    pub no_measuring: bool,
    /// `GAPSCOPE_BUDGET_PACE=1`: a program with no steps or graph launches to count is sampled
    /// by the time schedule ([`super::budget::paced_level`]), not traced whole. Off by default:
    /// recordings in which the pacer thread had switched CUPTI came out damaged on an H100
    /// (one correlation id for every kernel and API call, or launch records doubled).
    pub pacing: bool,
    /// `GAPSCOPE_BUDGET_LAUNCH_WRAPPER=1`: graph launches decided in the preloaded library's
    /// `cudaGraphLaunch` (`launch_wrapper`), their CUPTI callbacks paused between windows. Off
    /// by default until it has run on a GPU.
    pub launch_wrapper: bool,
}

/// `GAPSCOPE_CUPTI_SKIP`'s words: the kinds of [`KINDS`] (a word matches the kinds whose
/// names hold it).
const SKIP_EXPECTED: &str = "activity kinds, comma-separated, of CONCURRENT_KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, SYNCHRONIZATION, CUDA_EVENT";

/// The kind a [`KINDS`] label enables: `CONCURRENT_KERNEL` of
/// `cuptiActivityEnable(CONCURRENT_KERNEL)`.
fn kind_name(label: &str) -> &str {
    label
        .trim_start_matches("cuptiActivityEnable(")
        .trim_end_matches(')')
}

impl Diagnostics {
    /// From the environment (under `record` and `gapscope run` alike): a value refused is said
    /// in one line and its default taken; `gapscope record` refuses it before the program runs
    /// ([`crate::record::inject::refused_settings`]).
    pub fn from_env() -> Diagnostics {
        let (diagnostics, refused) = Diagnostics::read(&Setting::environment_value);
        for e in refused {
            crate::messages::warning(&format!("{e}; using the default"));
        }
        diagnostics
    }

    /// Every switch from `get` ([`Setting::parse_from`]'s rule), with the values refused (each
    /// left at its default).
    pub(crate) fn read(get: &dyn Fn(Setting) -> Option<String>) -> (Diagnostics, Vec<BadSetting>) {
        let mut refused = Vec::new();
        let list = |text: &str| -> Vec<String> {
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let kind_names: Vec<&str> = KINDS.iter().map(|&(_, label)| kind_name(label)).collect();
        let skip_kinds = kept(
            Setting::CuptiSkip.parse_from(get, SKIP_EXPECTED, |t| {
                let words: Vec<String> = list(t).iter().map(|w| w.to_uppercase()).collect();
                let known = |w: &String| kind_names.iter().any(|k| k.contains(w.as_str()));
                (!words.is_empty() && words.iter().all(known)).then_some(words)
            }),
            &mut refused,
        );
        let api_only = kept(
            Setting::CuptiApiOnly.parse_from(
                get,
                "parts of API call names, comma-separated (e.g. `Launch,EventRecord`)",
                |t| Some(list(t)).filter(|parts| !parts.is_empty()),
            ),
            &mut refused,
        );
        let api_from_callbacks = kept(
            Setting::CuptiApiFrom.parse_from(get, "`callbacks` (or unset)", |t| {
                (t == "callbacks").then_some(true)
            }),
            &mut refused,
        );
        let size_attributes = kept(
            Setting::CuptiAttr.parse_from(
                get,
                "`ATTR=VALUE` pairs of numbers, comma-separated (e.g. `0=67108864`)",
                |t| {
                    let pairs = list(t);
                    let pair = |p: &String| {
                        let (attr, value) = p.split_once('=')?;
                        Some((attr.trim().parse().ok()?, value.trim().parse().ok()?))
                    };
                    let parsed: Option<Vec<(u32, usize)>> = pairs.iter().map(pair).collect();
                    parsed.filter(|p| !p.is_empty())
                },
            ),
            &mut refused,
        );
        let flush_period_ms = kept(
            Setting::CuptiFlushPeriodMs
                .parse_from(get, "a number of milliseconds", |t| t.parse::<u32>().ok()),
            &mut refused,
        );
        let mut switch = |setting: Setting| kept(setting.switch_from(get), &mut refused);
        let diagnostics = Diagnostics {
            skip_kinds: skip_kinds.unwrap_or_default(),
            api_only,
            per_thread_buffers: switch(Setting::CuptiPerThreadBuffers),
            host_pinned: switch(Setting::CuptiHostPinned),
            skip_node_frames: switch(Setting::CuptiNodeFrames) == Some(false),
            keep_filter_on_pause: switch(Setting::BudgetPauseFilter) == Some(false),
            api_from_callbacks: api_from_callbacks.unwrap_or(false),
            graph_trace: switch(Setting::CuptiGraphTrace) == Some(true),
            size_attributes: size_attributes.unwrap_or_default(),
            flush_period_ms,
            no_measuring: switch(Setting::BudgetMeasure) == Some(false),
            pacing: switch(Setting::BudgetPace) == Some(true),
            launch_wrapper: switch(Setting::BudgetLaunchWrapper) == Some(true),
        };
        (diagnostics, refused)
    }

    /// Whether the API call `name` keeps its activity record.
    pub fn api_record_wanted(&self, name: &str) -> bool {
        match &self.api_only {
            Some(only) => only.iter().any(|w| name.contains(w.as_str())),
            None => api_record_wanted(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnostics_read_every_switch_and_default_to_none() {
        assert_eq!(
            Diagnostics::read(&|_| None),
            (Diagnostics::default(), Vec::new())
        );
        let (d, refused) = Diagnostics::read(&|name| {
            Some(
                match name {
                    Setting::CuptiSkip => " driver, ,runtime",
                    Setting::CuptiApiOnly => "Launch,EventRecord",
                    Setting::CuptiPerThreadBuffers => "0",
                    Setting::CuptiHostPinned => "1",
                    Setting::CuptiNodeFrames => "0",
                    Setting::CuptiGraphTrace => "1",
                    Setting::CuptiAttr => "0=67108864, 6=4,",
                    Setting::CuptiFlushPeriodMs => " 10",
                    Setting::BudgetPauseFilter => "0",
                    Setting::CuptiApiFrom => "callbacks",
                    Setting::BudgetMeasure => "0",
                    Setting::BudgetPace => "1",
                    Setting::BudgetLaunchWrapper => "1",
                    _ => return None,
                }
                .to_owned(),
            )
        });
        assert_eq!(refused, []);
        assert_eq!(d.skip_kinds, ["DRIVER", "RUNTIME"]);
        assert!(d.no_measuring && d.pacing && d.launch_wrapper);
        assert_eq!(d.per_thread_buffers, Some(false));
        assert_eq!(d.host_pinned, Some(true));
        assert!(d.skip_node_frames);
        assert!(d.keep_filter_on_pause);
        assert!(d.api_from_callbacks);
        assert!(d.graph_trace);
        assert_eq!(d.size_attributes, [(0, 67108864), (6, 4)]);
        assert_eq!(d.flush_period_ms, Some(10));
        assert!(d.api_record_wanted("cudaGraphLaunch_v10000"));
        assert!(!d.api_record_wanted("cudaMemcpyAsync_v3020"));
        assert!(Diagnostics::default().api_record_wanted("cudaMemcpyAsync_v3020"));
    }

    /// A value a switch does not take is refused, one line each, and its default kept: never
    /// half-read (`GAPSCOPE_CUPTI_ATTR`'s good pairs are not kept without its bad one).
    #[test]
    fn diagnostics_refuse_bad_values_and_keep_their_defaults() {
        let (d, refused) = Diagnostics::read(&|name| {
            Some(
                match name {
                    Setting::CuptiSkip => "driver,nonsense",
                    Setting::CuptiAttr => "0=67108864,bad",
                    Setting::CuptiFlushPeriodMs => "-5",
                    Setting::CuptiHostPinned => "yes",
                    Setting::BudgetPace => "1",
                    _ => return None,
                }
                .to_owned(),
            )
        });
        assert_eq!(
            refused.iter().map(BadSetting::parts).collect::<Vec<_>>(),
            [
                (Setting::CuptiSkip, "driver,nonsense", SKIP_EXPECTED),
                (
                    Setting::CuptiAttr,
                    "0=67108864,bad",
                    "`ATTR=VALUE` pairs of numbers, comma-separated (e.g. `0=67108864`)"
                ),
                (
                    Setting::CuptiFlushPeriodMs,
                    "-5",
                    "a number of milliseconds"
                ),
                (Setting::CuptiHostPinned, "yes", "`0` or `1`"),
            ]
        );
        assert_eq!(
            d,
            Diagnostics {
                pacing: true,
                ..Diagnostics::default()
            }
        );
    }

    /// `GAPSCOPE_CUPTI_SKIP`'s refusal names every kind it can skip.
    #[test]
    fn the_skip_refusal_names_every_kind() {
        for (_, label) in KINDS {
            let kind = kind_name(label);
            assert!(SKIP_EXPECTED.contains(kind), "{kind}");
        }
        assert!(!SKIP_EXPECTED.contains("GRAPH_TRACE"));
    }

    #[test]
    fn the_budget_pauses_only_the_eager_hot_callbacks() {
        use sys::CUPTI_CB_DOMAIN_DRIVER_API as D;
        use sys::CUPTI_CB_DOMAIN_RUNTIME_API as R;
        assert!(paused_by_budget((
            R,
            sys::CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020
        )));
        assert!(paused_by_budget((
            D,
            sys::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel
        )));
        // Calls that only build graphs keep their callbacks whatever the budget.
        for call in [
            (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphAddEventWaitNode),
            (
                R,
                sys::CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddEventRecordNode_v11010,
            ),
            (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags),
            (D, sys::CUPTI_DRIVER_TRACE_CBID_cuGraphNodeGetType),
        ] {
            assert!(GRAPH_ONLY_CBIDS.contains(&call), "{call:?}");
            assert!(!paused_by_budget(call), "{call:?}");
        }
        // The budget's own: capture begins and ends, graph building starts, graph launches.
        for &call in GRAPH_BUILDING_START_CBIDS
            .iter()
            .chain(&CAPTURE_END_CBIDS)
            .chain(&GRAPH_LAUNCH_CBIDS)
        {
            assert!(!paused_by_budget(call), "{call:?}");
        }
        assert!(
            CAPTURE_BEGIN_CBIDS
                .iter()
                .all(|c| GRAPH_BUILDING_START_CBIDS.contains(c))
        );
    }
}
