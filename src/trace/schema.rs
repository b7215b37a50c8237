//! The trace file: the contract between recording and analysis.
//!
//! A trace file is one JSON document (UTF-8) holding everything one recording saw:
//! metadata, activity records, the graph DAG, step markers and the dropped-record count.
//! Every timestamp is in nanoseconds on one clock (CUPTI's, CLOCK_REALTIME on Linux), so host
//! records (API calls, markers) and device records (kernels) can be compared directly.
//!
//! Names (kernel names, API names, marker names, library calls) are interned in
//! [`Trace::strings`]; records refer to them by index ([`StrId`]). This keeps a million-kernel
//! trace small and fast to parse.
//!
//! The schema is versioned by [`SCHEMA_VERSION`]; a reader refuses any other version
//! (see [`crate::trace::read_trace`]). Bump it on any change a version-1 reader would misread.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Key in [`Cell::requested`] for the NCCL graph usage mode the workload asked for (0, 1 or 2):
/// written by the sweep, read by the alignment, the causes and the remedies.
pub const GRAPH_USAGE_MODE_KEY: &str = "graph_usage_mode";

/// Index into [`Trace::strings`].
pub type StrId = u32;

/// One recording: a process (one rank) over one or more cells of work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    pub schema_version: u32,
    pub metadata: Metadata,
    /// Interned strings; every `StrId` in this file indexes this list.
    pub strings: Vec<String>,
    #[serde(default)]
    pub kernels: Vec<Kernel>,
    #[serde(default)]
    pub memcpys: Vec<MemOp>,
    #[serde(default)]
    pub memsets: Vec<MemOp>,
    /// CUDA runtime and driver API calls (host time), joined to device work by `corr`.
    #[serde(default)]
    pub api_calls: Vec<ApiCall>,
    /// Host synchronisation calls (event/stream/context synchronize, stream wait event).
    #[serde(default)]
    pub syncs: Vec<Sync>,
    /// Executed event-record operations with their device timestamp (graph event-record nodes
    /// included: CUPTI's KIND_CUDA_EVENT).
    #[serde(default)]
    pub event_records: Vec<EventRecord>,
    /// Host ranges: step markers, NVTX ranges, library calls such as `ncclAllGather`.
    #[serde(default)]
    pub markers: Vec<Marker>,
    #[serde(default)]
    pub graph: GraphDag,
    /// Records CUPTI reported as dropped (plus kernels with zero timestamps). Never silent:
    /// every report shows it.
    #[serde(default)]
    pub dropped_records: u64,
    /// Python stacks of the program's threads sampled while it ran (`gapscope record
    /// --host-samples python`); absent without them, and in traces written before they existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_samples: Option<super::HostSamples>,
}

/// Where the trace came from and what ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// e.g. "gapscope 0.1.0".
    pub tool: String,
    pub source: Source,
    #[serde(default)]
    pub device: Option<DeviceInfo>,
    #[serde(default)]
    pub versions: Versions,
    /// Rank of the process that recorded this trace and the world size.
    #[serde(default)]
    pub rank: u32,
    #[serde(default = "one")]
    pub world: u32,
    /// The cells (configurations) this trace holds; step markers refer to them by index.
    #[serde(default)]
    pub cells: Vec<Cell>,
    /// Free-form workload description (HT decode shape, backend, library used...).
    #[serde(default)]
    pub workload: BTreeMap<String, serde_json::Value>,
    /// Free text shown in every report (e.g. "synthetic: not recorded on a GPU").
    #[serde(default)]
    pub notes: Vec<String>,
    /// What `gapscope record`'s trace budget left untraced; absent when every launch and step
    /// was traced (and in traces written before the budget existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    /// NVTX ranges the program started but never ended: the recorder leaves them out (their
    /// end is unknown). 0 in traces written before it was counted here (their notes say it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unended_ranges: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The part of a program a trace budget traced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sampling {
    /// Launches traced per executable graph, and steps traced.
    pub budget: u32,
    /// Executable graphs launched more often than traced.
    #[serde(default)]
    pub graphs: Vec<SampledGraph>,
    /// Step ranges started, and traced.
    #[serde(default)]
    pub steps: u64,
    #[serde(default)]
    pub steps_traced: u64,
    /// Host times (the kernels' clock, ns) at which tracing resumed after a pause: two traced
    /// steps with one of these between them are not consecutive (untraced steps ran between).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed_at: Vec<u64>,
    /// Which host ranges (NVTX markers) the recorder kept, and a summary of those it left
    /// out; absent when every marker was kept (and in traces written before markers were
    /// sampled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markers: Option<MarkerSample>,
    /// Untraced launches or steps *measured* after each pause: their device records (kernels,
    /// copies, memsets, with device timestamps) are in the trace without API records, so a
    /// device record without a launch call is one of them, not lost. 0 in traces recorded
    /// before measuring existed.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub measured_per_pause: u32,
    /// Pauses made on the recorder's time schedule, with nothing to count (no steps, no graph
    /// launches): the untraced work then is the time between windows, not whole steps.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub paced_pauses: u64,
}

pub(super) fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// The host ranges a trace budget kept: every marker that overlaps one of `kept_windows`
/// (tracing on, and the untraced occurrences just after each pause), and, for the others,
/// a per-name summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerSample {
    /// `[from, to]` host times (ns, sorted, disjoint): every marker overlapping one of them is
    /// in `markers`; two markers overlapping the same window have every marker between them
    /// kept too. A `to` of `u64::MAX`: open until the recording ended.
    #[serde(default)]
    pub kept_windows: Vec<[u64; 2]>,
    /// The markers left out, per name (the most frequent first).
    #[serde(default)]
    pub left_out: Vec<RangeSummary>,
}

/// Markers of one name, summarised: how many, and their host durations as a histogram of
/// fixed log buckets (see [`crate::trace::duration_bucket`]: 16 per power of two, so a
/// quantile read from it is within 1/32 of the true value).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeSummary {
    /// The range's name; [`OTHER_RANGE_NAMES`] for names past the recorder's limit on distinct
    /// names.
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// `[bucket, count]` pairs, by bucket, counts non-zero.
    #[serde(default)]
    pub buckets: Vec<[u64; 2]>,
}

/// [`RangeSummary::name`] of the ranges whose names were past the recorder's limit.
pub const OTHER_RANGE_NAMES: &str = "(other names)";

/// Launches of one executable graph (CUPTI's exec id, as kernels' `graph` holds it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledGraph {
    pub exec: u32,
    pub launches: u64,
    pub traced: u64,
    /// Host time from one launch of this graph to its next (outside step ranges), between
    /// launches with no tracing switch between them: what tracing adds to a replay, measured in
    /// the same run. Absent in traces recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_periods: Option<LaunchPeriods>,
}

/// [`SampledGraph::launch_periods`]: the launch-to-launch host periods (ns) while tracing was
/// on and while it was paused, as histograms (names "traced" and "untraced").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchPeriods {
    pub traced: RangeSummary,
    pub untraced: RangeSummary,
}

fn one() -> u32 {
    1
}

/// Origin of the records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// gapscope's CUPTI recorder (`gapscope run` or injection).
    #[default]
    Cupti,
    /// Imported from a torch.profiler (Kineto) Chrome trace: no graph DAG.
    Kineto,
    /// Imported from an Nsight Systems SQLite export: a graph DAG inferred from node creations
    /// ([`GraphDag::inferred`]).
    Nsys,
    /// Made by a generator or a test, not recorded on hardware.
    Synthetic,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub index: u32,
    /// Compute capability, e.g. "9.0".
    #[serde(default)]
    pub compute_capability: String,
}

/// Software versions, as reported by the libraries actually loaded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Versions {
    #[serde(default)]
    pub driver: Option<String>,
    #[serde(default)]
    pub cuda_runtime: Option<String>,
    #[serde(default)]
    pub cupti: Option<String>,
    #[serde(default)]
    pub nccl: Option<String>,
    /// Path of the NCCL library used, when one was loaded.
    #[serde(default)]
    pub nccl_library: Option<String>,
    /// The CUDA libraries the recorded process had loaded when the trace was written (NCCL,
    /// cuBLAS, cuBLASLt, the CUDA runtime, cuDNN), each as loaded; empty in traces written
    /// before the recorder listed them, and in imports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded: Vec<LoadedLibrary>,
}

impl Versions {
    /// The libraries the trace names with their files: [`Versions::loaded`], and the NCCL of
    /// `nccl`/`nccl_library` when that list has none (a trace of gapscope's own workload).
    pub fn libraries(&self) -> Vec<LoadedLibrary> {
        let mut libraries = self.loaded.clone();
        if !libraries.iter().any(|l| l.library == CudaLibrary::Nccl)
            && let Some(path) = &self.nccl_library
        {
            libraries.insert(
                0,
                LoadedLibrary {
                    library: CudaLibrary::Nccl,
                    version: self.nccl.clone(),
                    path: path.clone(),
                },
            );
        }
        libraries
    }
}

/// One CUDA library mapped into the recorded process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadedLibrary {
    pub library: CudaLibrary,
    /// As the library reports it (`ncclGetVersion`, `cublasGetProperty`,
    /// `cudaRuntimeGetVersion`, `cudnnGetVersion`), else the version in its file name
    /// (`libnccl.so.2.28.9`: "2.28.9"); `None` when neither says.
    #[serde(default)]
    pub version: Option<String>,
    /// Its file, symbolic links resolved.
    pub path: String,
}

/// The CUDA libraries whose loaded copies a trace names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CudaLibrary {
    Nccl,
    Cublas,
    #[serde(rename = "cublaslt")]
    CublasLt,
    Cudart,
    Cudnn,
}

impl CudaLibrary {
    /// The name users know it by.
    pub fn display_name(self) -> &'static str {
        match self {
            CudaLibrary::Nccl => "NCCL",
            CudaLibrary::Cublas => "cuBLAS",
            CudaLibrary::CublasLt => "cuBLASLt",
            CudaLibrary::Cudart => "CUDA runtime",
            CudaLibrary::Cudnn => "cuDNN",
        }
    }
}

/// One configuration of work inside a trace (e.g. "graphed, mode 2, T=8, replay").
/// `requested` is what the workload asked for; the analysis derives the observed regime and
/// mode from the records and the DAG, and reports any mismatch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub label: String,
    #[serde(default)]
    pub requested: BTreeMap<String, serde_json::Value>,
    /// Step periods measured by the workload with CUDA events (ns per step, one value per timed
    /// run of steps), independent of tracing; shown beside the trace-derived period.
    #[serde(default)]
    pub event_periods_ns: Vec<f64>,
    /// Figures the workload measured itself (e.g. `%globaltimer` stamps: "gap_before_coll_us"),
    /// shown beside gapscope's own so the two can be checked against each other.
    #[serde(default)]
    pub reference: BTreeMap<String, f64>,
}

/// A kernel execution (CUPTI CONCURRENT_KERNEL record). In the file, one JSON array:
/// `[start, end, device, stream, corr, name, graph, node]` (millions of these: arrays halve
/// the size and the parse time of objects).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "KernelRow", from = "KernelRow")]
pub struct Kernel {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub stream: u32,
    /// Correlation id of the launching API call (`cudaLaunchKernel`, or `cudaGraphLaunch` for
    /// every kernel of a replay).
    pub corr: u32,
    pub name: StrId,
    /// Executable graph id; 0 outside graphs.
    #[serde(default)]
    pub graph: u32,
    /// Graph node id (of the executable graph's node); 0 outside graphs.
    #[serde(default)]
    pub node: u64,
}

/// A memcpy or memset executed on the device. In the file:
/// `[start, end, device, stream, corr, bytes, kind, graph, node]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "MemOpRow", from = "MemOpRow")]
pub struct MemOp {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub stream: u32,
    pub corr: u32,
    pub bytes: u64,
    /// Copy kind ("HtoD", "DtoD", ...) or "memset".
    pub kind: StrId,
    #[serde(default)]
    pub graph: u32,
    #[serde(default)]
    pub node: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiDomain {
    #[default]
    Runtime,
    Driver,
}

/// A host API call. In the file: `[start, end, corr, thread, name, domain]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "ApiCallRow", from = "ApiCallRow")]
pub struct ApiCall {
    pub start: u64,
    pub end: u64,
    pub corr: u32,
    pub thread: u32,
    pub name: StrId,
    #[serde(default)]
    pub domain: ApiDomain,
}

/// A host synchronisation call (CUPTI SYNCHRONIZATION record).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sync {
    pub start: u64,
    pub end: u64,
    pub corr: u32,
    /// e.g. "event_synchronize", "stream_wait_event", "stream_synchronize", "context_synchronize".
    pub kind: StrId,
    #[serde(default)]
    pub stream: u32,
    #[serde(default)]
    pub event: u32,
}

/// An executed event record (CUPTI CUDA_EVENT record): `device_ts` is when the GPU reached it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    pub device_ts: u64,
    pub corr: u32,
    pub stream: u32,
    pub event: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    /// One step of work: every device operation whose launching API call starts inside this
    /// host range belongs to the step.
    Step,
    /// A library call such as `ncclAllGather`; graph nodes created inside it are tagged with it.
    LibraryCall,
    /// Any other NVTX-style range.
    #[default]
    Range,
}

/// A host range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub start: u64,
    pub end: u64,
    pub name: StrId,
    #[serde(default)]
    pub kind: MarkerKind,
    #[serde(default)]
    pub thread: u32,
    /// Index into `metadata.cells` for step markers.
    #[serde(default)]
    pub cell: Option<u32>,
}

/// The graph DAG of every graph created in the recording: template (captured) graphs and the
/// clones that instantiation makes for executable graphs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphDag {
    #[serde(default)]
    pub nodes: Vec<GraphNode>,
    #[serde(default)]
    pub edges: Vec<GraphEdge>,
    #[serde(default)]
    pub execs: Vec<GraphExec>,
    /// Node types, external flags and edges were inferred by an import rather than recorded:
    /// from the API call that created each node and the order of creation (Nsight Systems
    /// records node creations without them). Causes read from this DAG are probable, not
    /// certain. `false` in recordings.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inferred: bool,
}

/// CUDA graph node types (numbering of `CUgraphNodeType`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeType {
    #[default]
    Kernel,
    Memcpy,
    Memset,
    Host,
    ChildGraph,
    Empty,
    EventWait,
    EventRecord,
    ExtSemaphoreSignal,
    ExtSemaphoreWait,
    MemAlloc,
    MemFree,
    BatchMemOp,
    Conditional,
    Other,
}

impl NodeType {
    /// Maps a `CUgraphNodeType` value.
    pub fn from_cuda(value: u32) -> NodeType {
        match value {
            0 => NodeType::Kernel,
            1 => NodeType::Memcpy,
            2 => NodeType::Memset,
            3 => NodeType::Host,
            4 => NodeType::ChildGraph,
            5 => NodeType::Empty,
            6 => NodeType::EventWait,
            7 => NodeType::EventRecord,
            8 => NodeType::ExtSemaphoreSignal,
            9 => NodeType::ExtSemaphoreWait,
            10 => NodeType::MemAlloc,
            11 => NodeType::MemFree,
            12 => NodeType::BatchMemOp,
            13 => NodeType::Conditional,
            _ => NodeType::Other,
        }
    }
}

/// One node of a graph.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphNode {
    /// CUPTI graph node id ((graph id << 32) | index).
    pub id: u64,
    /// Graph id (template graph, or the executable graph for clones).
    pub graph: u32,
    #[serde(rename = "type")]
    pub node_type: NodeType,
    /// For event-wait nodes: made with `cudaEventWaitExternal`. For event-record nodes: made
    /// explicitly (`cudaGraphAddEventRecordNode` or an external record) rather than by capture.
    #[serde(default)]
    pub external: bool,
    /// The CUDA API call that created the node (e.g. `cudaStreamWaitEvent`).
    #[serde(default)]
    pub created_by: Option<StrId>,
    /// The library call around that API call (e.g. `ncclAllGather`), from a LibraryCall marker
    /// open on the creating thread.
    #[serde(default)]
    pub library_call: Option<StrId>,
    /// For a clone made at instantiation: the template node it was cloned from.
    #[serde(default)]
    pub cloned_from: Option<u64>,
    /// When (ns, the trace's clock) and on which thread the node was created (a clone: when
    /// its executable graph was instantiated): the NVTX ranges open there are the node's
    /// provenance. Absent in traces recorded before the recorder wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_thread: Option<u32>,
    /// The function of a known library (cuBLAS, cuBLASLt, cuDNN, NCCL, libtorch_cuda,
    /// libtorch_python, a Triton launcher) that the program called when the node was created:
    /// the outermost frame on the creating thread's stack inside that library (e.g.
    /// `cublasLtMatmul`, `at::native::add_kernel`), or the library's file name alone
    /// (`libtorch_cuda`) when no symbol table names its frames. Absent when no such frame was
    /// found, and in traces recorded before the recorder looked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_frame: Option<StrId>,
    /// The creating thread's Python frames when the node was created, innermost first, one
    /// per line as `file<TAB>line<TAB>function` (line 0 when unknown): where in the program's
    /// code the node came from. Absent when the thread ran no Python code, and in traces
    /// recorded before the recorder read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_stack: Option<StrId>,
}

/// `to` depends on `from` (`from` must finish before `to` starts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GraphEdge {
    pub from: u64,
    pub to: u64,
}

/// An executable graph and the template graph it was instantiated from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphExec {
    pub id: u32,
    pub template: u32,
}

/// File form of [`Kernel`].
type KernelRow = (u64, u64, u32, u32, u32, StrId, u32, u64);

impl From<Kernel> for KernelRow {
    fn from(k: Kernel) -> Self {
        (
            k.start, k.end, k.device, k.stream, k.corr, k.name, k.graph, k.node,
        )
    }
}

impl From<KernelRow> for Kernel {
    fn from(r: KernelRow) -> Self {
        let (start, end, device, stream, corr, name, graph, node) = r;
        Kernel {
            start,
            end,
            device,
            stream,
            corr,
            name,
            graph,
            node,
        }
    }
}

/// File form of [`MemOp`].
type MemOpRow = (u64, u64, u32, u32, u32, u64, StrId, u32, u64);

impl From<MemOp> for MemOpRow {
    fn from(m: MemOp) -> Self {
        (
            m.start, m.end, m.device, m.stream, m.corr, m.bytes, m.kind, m.graph, m.node,
        )
    }
}

impl From<MemOpRow> for MemOp {
    fn from(r: MemOpRow) -> Self {
        let (start, end, device, stream, corr, bytes, kind, graph, node) = r;
        MemOp {
            start,
            end,
            device,
            stream,
            corr,
            bytes,
            kind,
            graph,
            node,
        }
    }
}

/// File form of [`ApiCall`].
type ApiCallRow = (u64, u64, u32, u32, StrId, ApiDomain);

impl From<ApiCall> for ApiCallRow {
    fn from(a: ApiCall) -> Self {
        (a.start, a.end, a.corr, a.thread, a.name, a.domain)
    }
}

impl From<ApiCallRow> for ApiCall {
    fn from(r: ApiCallRow) -> Self {
        let (start, end, corr, thread, name, domain) = r;
        ApiCall {
            start,
            end,
            corr,
            thread,
            name,
            domain,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_name_the_loaded_libraries_and_the_workloads_own_nccl() {
        let own = Versions {
            nccl: Some("2.28.3".into()),
            nccl_library: Some("/usr/lib/libnccl.so.2.28.3".into()),
            ..Versions::default()
        };
        let nccl = LoadedLibrary {
            library: CudaLibrary::Nccl,
            version: Some("2.28.3".into()),
            path: "/usr/lib/libnccl.so.2.28.3".into(),
        };
        assert_eq!(own.libraries(), std::slice::from_ref(&nccl));
        let cublas = LoadedLibrary {
            library: CudaLibrary::Cublas,
            version: None,
            path: "/x/libcublas.so.13".into(),
        };
        let loaded = Versions {
            loaded: vec![cublas.clone(), nccl.clone()],
            ..own.clone()
        };
        assert_eq!(loaded.libraries(), [cublas, nccl], "listed once, as loaded");
        assert!(Versions::default().libraries().is_empty());

        // In the file: `loaded` only when there is one, with snake_case library names.
        let json = serde_json::to_value(&loaded).unwrap();
        assert_eq!(json["loaded"][0]["library"], "cublas");
        assert_eq!(json["loaded"][0]["version"], serde_json::Value::Null);
        let back: Versions = serde_json::from_value(json).unwrap();
        assert_eq!(back, loaded);
        let old = serde_json::to_value(&own).unwrap();
        assert!(old.get("loaded").is_none(), "{old}");
        assert_eq!(serde_json::from_value::<Versions>(old).unwrap(), own);
        let lt: CudaLibrary = serde_json::from_str("\"cublaslt\"").unwrap();
        assert_eq!(lt, CudaLibrary::CublasLt);
    }
}
