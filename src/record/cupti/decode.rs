//! Decoding CUPTI activity records into trace records.
//!
//! [`RecordStore::add_record`] appends the trace record of one activity record, as
//! [`super::activity::read`] read it.
#![forbid(unsafe_code)]

use super::activity::{Activity, ApiCallSeen, KernelRecord};
use super::budget::markers::MarkerKeeping;
use super::sys;
use crate::trace::{ApiCall, ApiDomain, Kernel, Marker, MarkerKind, StrId, Sync, TraceBuilder};
use std::collections::HashMap;
use std::ffi::CStr;

/// Activity records decoded so far, with interned strings.
#[derive(Debug)]
pub(crate) struct RecordStore {
    pub builder: TraceBuilder,
    api_names: HashMap<(ApiDomain, u32), StrId>,
    /// Kernels CUPTI delivered with start = end = 0 (timestamp memory ran out).
    pub zero_timestamp_kernels: u64,
    /// Records of kinds we did not enable (should stay 0).
    pub unexpected_records: u64,
    /// The earliest API call (by start) that returned a sticky CUDA error: the fault after
    /// which the context is unusable and CUPTI may not hand back the device records.
    pub first_fault: Option<Fault>,
    /// Stream capture calls (begin or end) that returned an error, by call name and return
    /// value: captures that built no graph (another thread's unsafe call in global mode, an
    /// operation a capture does not allow).
    pub failed_captures: std::collections::BTreeMap<(StrId, u32), u64>,
    /// NVTX ranges (MARKER records) whose start arrived but not their end yet, by marker id.
    open_markers: HashMap<u32, OpenMarker>,
    /// NVTX range ends that arrived before their start (records come in no set order).
    early_marker_ends: HashMap<u32, u64>,
    /// With a trace budget: which NVTX ranges are kept, and the summary of the others
    /// (`None`: every range is kept).
    pub marker_keeping: Option<MarkerKeeping>,
}

/// An API call that returned a sticky CUDA error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    /// The `cudaError_t`/`CUresult` value (the sticky errors share their numbers).
    pub code: u32,
    pub api: StrId,
    pub start: u64,
}

/// The name of a sticky CUDA error (the context cannot be used after it), by its value, which
/// `cudaError_t` and `CUresult` share; `None` for every other return value.
pub(crate) fn sticky_error_name(code: u32) -> Option<&'static str> {
    Some(match code {
        700 => "illegal address",
        710 => "device-side assert triggered",
        714 => "hardware stack error",
        715 => "illegal instruction",
        716 => "misaligned address",
        717 => "invalid address space",
        718 => "invalid program counter",
        719 => "launch failure",
        _ => return None,
    })
}

/// Whether an API call (by display name) begins or ends a stream capture.
fn is_capture_call(name: &str) -> bool {
    name.contains("BeginCapture") || name.contains("EndCapture")
}

/// The name of a stream-capture error, by the value `cudaError_t` and `CUresult` share.
fn capture_error_name(code: u32) -> Option<&'static str> {
    Some(match code {
        900 => "capture unsupported",
        901 => "capture invalidated",
        902 => "capture merge",
        903 => "capture unmatched",
        904 => "capture unjoined",
        905 => "capture isolation",
        906 => "capture implicit",
        907 => "captured event",
        908 => "capture wrong thread",
        _ => return None,
    })
}

/// The trace note of stream captures that failed (`None` when none did): each capture call
/// that returned an error, with the error and how often.
pub(crate) fn failed_captures_note(
    failed: &std::collections::BTreeMap<(StrId, u32), u64>,
    trace: &crate::trace::Trace,
) -> Option<String> {
    if failed.is_empty() {
        return None;
    }
    let calls: Vec<String> = failed
        .iter()
        .map(|(&(name, code), n)| {
            let what = capture_error_name(code).map_or(String::new(), |w| format!(" ({w})"));
            format!("{} returned {code}{what} ×{n}", trace.str(name))
        })
        .collect();
    Some(format!(
        "stream captures failed: {}; no executable graph came of them, and nodes they made before failing stay in the graph DAG with no launch",
        calls.join(", ")
    ))
}

/// The start half of an NVTX range.
#[derive(Debug, Clone, Copy)]
struct OpenMarker {
    start: u64,
    name: StrId,
    thread: u32,
}

/// Names of `CUpti_ActivitySynchronizationType`, as the trace schema spells them.
pub(crate) fn sync_kind_name(kind: u32) -> &'static str {
    match kind {
        sys::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE => "event_synchronize",
        sys::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT => "stream_wait_event",
        sys::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE => "stream_synchronize",
        sys::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE => "context_synchronize",
        _ => "unknown",
    }
}

/// Drops CUPTI's version tag from a runtime API name (`cudaLaunchKernel_v7000` →
/// `cudaLaunchKernel`, `cudaStreamWaitEvent_ptsz_v7000` → `cudaStreamWaitEvent_ptsz`), so names
/// match the API as programmers write it. Driver suffixes such as `_v2` are part of the real
/// symbol and are kept (the tag is `_v` followed by at least four digits).
pub(crate) fn api_display_name(name: &str) -> &str {
    if let Some(i) = name.rfind("_v") {
        let digits = &name[i + 2..];
        if digits.len() >= 4 && digits.bytes().all(|b| b.is_ascii_digit()) {
            return &name[..i];
        }
    }
    name
}

impl RecordStore {
    /// The trace's marker sample under `windows`, `None` when every marker was kept.
    pub(crate) fn marker_sample(
        &self,
        windows: &super::budget::markers::KeepWindows,
    ) -> Option<crate::trace::MarkerSample> {
        let strings = &self.builder.trace.strings;
        let name = |id: StrId| strings.get(id as usize).cloned().unwrap_or_default();
        self.marker_keeping
            .as_ref()?
            .sample(windows.snapshot().unwrap_or_default(), name)
    }

    pub fn new() -> RecordStore {
        RecordStore {
            builder: TraceBuilder::new(Default::default()),
            api_names: HashMap::new(),
            zero_timestamp_kernels: 0,
            first_fault: None,
            failed_captures: Default::default(),
            unexpected_records: 0,
            open_markers: HashMap::new(),
            early_marker_ends: HashMap::new(),
            marker_keeping: None,
        }
    }

    /// NVTX ranges started but never ended (e.g. the program stopped inside one).
    pub fn unclosed_markers(&self) -> usize {
        self.open_markers.len()
    }

    /// Pairs the start and end MARKER records of one NVTX range (same id) into a
    /// [`MarkerKind::Range`] trace marker. Instantaneous marks (`nvtxMark`) are skipped.
    fn add_marker_half(&mut self, flags: u32, id: u32, ts: u64, name: StrId, thread: u32) {
        if flags & sys::CUPTI_ACTIVITY_FLAG_MARKER_START != 0 {
            let open = OpenMarker {
                start: ts,
                name,
                thread,
            };
            match self.early_marker_ends.remove(&id) {
                Some(end) => self.push_marker(open, end),
                None => {
                    self.open_markers.insert(id, open);
                }
            }
        } else if flags & sys::CUPTI_ACTIVITY_FLAG_MARKER_END != 0 {
            match self.open_markers.remove(&id) {
                Some(open) => self.push_marker(open, ts),
                None => {
                    self.early_marker_ends.insert(id, ts);
                }
            }
        }
    }

    fn push_marker(&mut self, open: OpenMarker, end: u64) {
        // A timestamp of 0 means CUPTI could not take one: such a range would span from 1970.
        if open.start == 0 || end == 0 {
            return;
        }
        let end = end.max(open.start);
        if let Some(keeping) = &mut self.marker_keeping
            && !keeping.keep(open.name, open.start, end)
        {
            return;
        }
        self.builder.trace.markers.push(Marker {
            start: open.start,
            end,
            name: open.name,
            kind: MarkerKind::Range,
            thread: open.thread,
            cell: None,
        });
    }

    pub fn intern(&mut self, s: &str) -> StrId {
        self.builder.intern(s)
    }

    /// Interns a record's name (`?` when it has none).
    fn intern_name(&mut self, name: Option<&CStr>) -> StrId {
        match name {
            Some(name) => self.builder.intern(&name.to_string_lossy()),
            None => self.builder.intern("?"),
        }
    }

    /// Appends one runtime or driver API call (from its activity record, or from its enter and
    /// exit callbacks), noting the first sticky error it returned.
    pub fn add_api_call(
        &mut self,
        call: ApiCallSeen,
        resolve: &dyn Fn(ApiDomain, u32) -> Option<String>,
    ) {
        let name = self.api_name(call.domain, call.cbid, resolve);
        if call.returned != 0 && is_capture_call(self.builder.trace.str(name)) {
            *self
                .failed_captures
                .entry((name, call.returned))
                .or_default() += 1;
        }
        if sticky_error_name(call.returned).is_some()
            && self
                .first_fault
                .as_ref()
                .is_none_or(|f| call.start < f.start)
        {
            self.first_fault = Some(Fault {
                code: call.returned,
                api: name,
                start: call.start,
            });
        }
        self.builder.trace.api_calls.push(ApiCall {
            start: call.start,
            end: call.end,
            corr: call.corr,
            thread: call.thread,
            name,
            domain: call.domain,
        });
    }

    fn api_name(
        &mut self,
        domain: ApiDomain,
        cbid: u32,
        resolve: &dyn Fn(ApiDomain, u32) -> Option<String>,
    ) -> StrId {
        if let Some(&id) = self.api_names.get(&(domain, cbid)) {
            return id;
        }
        let name = resolve(domain, cbid).unwrap_or_else(|| match domain {
            ApiDomain::Runtime => format!("runtime_cbid_{cbid}"),
            ApiDomain::Driver => format!("driver_cbid_{cbid}"),
        });
        let id = self.builder.intern(api_display_name(&name));
        self.api_names.insert((domain, cbid), id);
        id
    }

    /// Appends a kernel; one with no timestamps (CUPTI ran out of timestamp memory) is counted
    /// as dropped instead.
    fn add_kernel(&mut self, k: KernelRecord<'_>) {
        if k.start == 0 && k.end == 0 {
            self.zero_timestamp_kernels += 1;
            return;
        }
        let name = self.intern_name(k.name);
        self.builder.trace.kernels.push(Kernel {
            start: k.start,
            end: k.end,
            device: k.device,
            stream: k.stream,
            corr: k.corr,
            name,
            graph: k.graph,
            node: k.node,
        });
    }

    /// Appends one activity record to the matching list.
    ///
    /// `resolve` names a runtime/driver callback id (`cuptiGetCallbackName`).
    pub fn add_record(
        &mut self,
        record: Activity<'_>,
        resolve: &dyn Fn(ApiDomain, u32) -> Option<String>,
    ) {
        match record {
            Activity::Kernel(k) => self.add_kernel(k),
            Activity::Memcpy { mut op, copy_kind } => {
                op.kind = self
                    .builder
                    .intern(crate::trace::memcpy_kind_name(copy_kind));
                self.builder.trace.memcpys.push(op);
            }
            Activity::Memset(mut op) => {
                op.kind = self.builder.intern("memset");
                self.builder.trace.memsets.push(op);
            }
            Activity::Api(call) => self.add_api_call(call, resolve),
            Activity::Sync(s) => {
                let kind = self.builder.intern(sync_kind_name(s.sync_type));
                self.builder.trace.syncs.push(Sync {
                    start: s.start,
                    end: s.end,
                    corr: s.corr,
                    kind,
                    stream: s.stream,
                    event: s.event,
                });
            }
            Activity::Event(e) => self.builder.trace.event_records.push(e),
            Activity::Marker(m) => {
                // The name comes with the start record only.
                let name = if m.flags & sys::CUPTI_ACTIVITY_FLAG_MARKER_START != 0 {
                    self.intern_name(m.name)
                } else {
                    0
                };
                self.add_marker_half(m.flags, m.id, m.timestamp, name, m.thread);
            }
            Activity::Other => self.unexpected_records += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::cupti::activity::testing;
    use crate::trace::Trace;
    use std::ffi::CString;

    fn no_names(_: ApiDomain, _: u32) -> Option<String> {
        None
    }

    #[test]
    fn api_names_lose_cupti_version_tags_only() {
        assert_eq!(
            api_display_name("cudaLaunchKernel_v7000"),
            "cudaLaunchKernel"
        );
        assert_eq!(
            api_display_name("cudaStreamWaitEvent_ptsz_v7000"),
            "cudaStreamWaitEvent_ptsz"
        );
        assert_eq!(
            api_display_name("cudaGraphAddNode_v12020"),
            "cudaGraphAddNode"
        );
        assert_eq!(api_display_name("cuMemcpyHtoD_v2"), "cuMemcpyHtoD_v2");
        assert_eq!(api_display_name("cuLaunchKernel"), "cuLaunchKernel");
        assert_eq!(
            api_display_name("cudaStreamWaitEvent"),
            "cudaStreamWaitEvent"
        );
    }

    #[test]
    fn decodes_a_kernel_record() {
        let name = CString::new("_Z4spinm").unwrap();
        let mut k = sys::ActivityKernel {
            kind: sys::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
            ..Default::default()
        };
        k.start = 1_000;
        k.end = 6_000;
        k.deviceId = 3;
        k.streamId = 13;
        k.correlationId = 42;
        k.name = name.as_ptr();
        k.graphId = 7;
        k.graphNodeId = (7u64 << 32) | 2;
        let mut store = RecordStore::new();
        store.add_record(testing::read(&k), &no_names);
        let t = &store.builder.trace;
        assert_eq!(t.kernels.len(), 1);
        let got = t.kernels[0];
        assert_eq!(
            (got.start, got.end, got.device, got.stream),
            (1_000, 6_000, 3, 13)
        );
        assert_eq!((got.corr, got.graph, got.node), (42, 7, (7u64 << 32) | 2));
        assert_eq!(t.str(got.name), "_Z4spinm");
    }

    #[test]
    fn failed_stream_captures_are_counted_by_call_and_error_and_noted() {
        let names = |_: ApiDomain, cbid: u32| {
            Some(match cbid {
                1 => "cuStreamBeginCapture_v2".to_owned(),
                2 => "cuStreamEndCapture".to_owned(),
                _ => "cuLaunchKernel".to_owned(),
            })
        };
        let mut store = RecordStore::new();
        let call = |cbid, returned| ApiCallSeen {
            domain: ApiDomain::Driver,
            cbid,
            start: 10,
            end: 20,
            corr: cbid,
            thread: 1,
            returned,
        };
        for (cbid, returned) in [(1, 0), (2, 901), (2, 901), (1, 900), (2, 0), (3, 900)] {
            store.add_api_call(call(cbid, returned), &names);
        }
        let note =
            failed_captures_note(&store.failed_captures, &store.builder.trace).expect("a note");
        assert_eq!(
            note,
            "stream captures failed: cuStreamBeginCapture_v2 returned 900 (capture unsupported) ×1, cuStreamEndCapture returned 901 (capture invalidated) ×2; no executable graph came of them, and nodes they made before failing stay in the graph DAG with no launch"
        );
        assert!(
            failed_captures_note(&RecordStore::new().failed_captures, &store.builder.trace)
                .is_none()
        );
    }

    #[test]
    fn zero_timestamp_kernels_count_as_dropped() {
        let k = sys::ActivityKernel {
            kind: sys::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
            ..Default::default()
        };
        let mut store = RecordStore::new();
        store.add_record(testing::read(&k), &no_names);
        assert!(store.builder.trace.kernels.is_empty());
        assert_eq!(store.zero_timestamp_kernels, 1);
    }

    #[test]
    fn the_earliest_call_returning_a_sticky_error_is_the_fault() {
        let mut store = RecordStore::new();
        let call = |cbid: u32, start: u64, returned: u32| {
            let mut a = sys::CUpti_ActivityAPI {
                kind: sys::CUPTI_ACTIVITY_KIND_RUNTIME,
                ..Default::default()
            };
            a.cbid = cbid;
            a.start = start;
            a.end = start + 1;
            a.returnValue = returned;
            a
        };
        let names = |_: ApiDomain, cbid: u32| Some(format!("call{cbid}_v7000"));
        // Not sticky (cudaErrorNotReady, invalid value): no fault.
        for a in [call(1, 10, 600), call(2, 20, 1)] {
            store.add_record(testing::read(&a), &names);
        }
        assert_eq!(store.first_fault, None);
        // Records arrive in no set order: the earliest sticky one wins.
        for a in [call(3, 50, 710), call(4, 40, 710), call(5, 60, 719)] {
            store.add_record(testing::read(&a), &names);
        }
        let fault = store.first_fault.clone().expect("a fault");
        assert_eq!((fault.code, fault.start), (710, 40));
        assert_eq!(store.builder.trace.strings[fault.api as usize], "call4");
        assert_eq!(sticky_error_name(719), Some("launch failure"));
        assert_eq!(sticky_error_name(2), None);
    }

    #[test]
    fn decodes_memcpy_memset_api_sync_event() {
        let mut store = RecordStore::new();
        let mut m = sys::CUpti_ActivityMemcpy6 {
            kind: sys::CUPTI_ACTIVITY_KIND_MEMCPY,
            ..Default::default()
        };
        m.copyKind = sys::CUPTI_ACTIVITY_MEMCPY_KIND_DTOD as u8;
        m.bytes = 4096;
        m.start = 10;
        m.end = 20;
        m.correlationId = 5;
        let mut s = sys::CUpti_ActivityMemset4 {
            kind: sys::CUPTI_ACTIVITY_KIND_MEMSET,
            ..Default::default()
        };
        s.bytes = 64;
        s.start = 30;
        s.end = 31;
        let mut a = sys::CUpti_ActivityAPI {
            kind: sys::CUPTI_ACTIVITY_KIND_RUNTIME,
            ..Default::default()
        };
        a.cbid = 211;
        a.start = 1;
        a.end = 2;
        a.threadId = 99;
        a.correlationId = 5;
        let mut d = a;
        d.kind = sys::CUPTI_ACTIVITY_KIND_DRIVER;
        d.cbid = 307;
        let mut y = sys::CUpti_ActivitySynchronization2 {
            kind: sys::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
            ..Default::default()
        };
        y.type_ = sys::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
        y.start = 3;
        y.end = 4;
        y.cudaEventId = 8;
        let mut e = sys::CUpti_ActivityCudaEvent2 {
            kind: sys::CUPTI_ACTIVITY_KIND_CUDA_EVENT,
            ..Default::default()
        };
        e.deviceTimestamp = 777;
        e.correlationId = 9;
        e.eventId = 8;
        let resolve = |dom: ApiDomain, cbid: u32| {
            (dom == ApiDomain::Runtime && cbid == 211).then(|| "cudaLaunchKernel_v7000".to_string())
        };
        store.add_record(testing::read(&m), &resolve);
        store.add_record(testing::read(&s), &resolve);
        store.add_record(testing::read(&a), &resolve);
        store.add_record(testing::read(&d), &resolve);
        store.add_record(testing::read(&y), &resolve);
        store.add_record(testing::read(&e), &resolve);
        let t = &store.builder.trace;
        assert_eq!(t.memcpys.len(), 1);
        assert_eq!(t.str(t.memcpys[0].kind), "DtoD");
        assert_eq!(t.memcpys[0].bytes, 4096);
        assert_eq!(t.str(t.memsets[0].kind), "memset");
        assert_eq!(t.api_calls.len(), 2);
        assert_eq!(t.str(t.api_calls[0].name), "cudaLaunchKernel");
        assert_eq!(t.api_calls[0].thread, 99);
        assert_eq!(t.api_calls[1].domain, ApiDomain::Driver);
        assert_eq!(t.str(t.api_calls[1].name), "driver_cbid_307");
        assert_eq!(t.str(t.syncs[0].kind), "stream_wait_event");
        assert_eq!(t.syncs[0].event, 8);
        assert_eq!(t.event_records[0].device_ts, 777);
        assert_eq!(store.unexpected_records, 0);
    }

    #[test]
    fn unknown_kinds_are_counted_not_decoded() {
        let r = sys::CUpti_ActivityAPI {
            kind: sys::CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
            ..Default::default()
        };
        let mut store = RecordStore::new();
        store.add_record(testing::read(&r), &no_names);
        assert_eq!(store.unexpected_records, 1);
    }

    fn marker_half(
        flags: u32,
        id: u32,
        ts: u64,
        name: Option<&CString>,
    ) -> sys::CUpti_ActivityMarker2 {
        let mut m = sys::CUpti_ActivityMarker2 {
            kind: sys::CUPTI_ACTIVITY_KIND_MARKER,
            flags,
            timestamp: ts,
            id,
            objectKind: sys::CUPTI_ACTIVITY_OBJECT_THREAD,
            ..Default::default()
        };
        m.objectId.pt = sys::CUpti_ActivityObjectKindId__bindgen_ty_1 {
            processId: 1,
            threadId: 77,
        };
        m.name = name.map_or(std::ptr::null(), |n| n.as_ptr());
        m
    }

    #[test]
    fn nvtx_marker_halves_pair_by_id_in_any_order() {
        let step = CString::new("step").unwrap();
        let fwd = CString::new("forward").unwrap();
        let start = sys::CUPTI_ACTIVITY_FLAG_MARKER_START;
        let end = sys::CUPTI_ACTIVITY_FLAG_MARKER_END;
        let records = [
            marker_half(start, 1, 100, Some(&step)),
            // End before start: records come in no guaranteed order.
            marker_half(end, 2, 180, None),
            marker_half(start, 2, 120, Some(&fwd)),
            marker_half(end, 1, 200, None),
            // An nvtxMark: skipped.
            marker_half(
                sys::CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS,
                3,
                150,
                Some(&fwd),
            ),
            // Started, never ended.
            marker_half(start, 4, 300, Some(&step)),
        ];
        let mut store = RecordStore::new();
        for r in &records {
            store.add_record(testing::read(r), &no_names);
        }
        let t = &store.builder.trace;
        assert_eq!(store.unexpected_records, 0);
        assert_eq!(store.unclosed_markers(), 1);
        let mut got: Vec<_> = t
            .markers
            .iter()
            .map(|m| (t.str(m.name), m.start, m.end, m.kind, m.thread, m.cell))
            .collect();
        got.sort_by_key(|g| g.1);
        assert_eq!(
            got,
            [
                ("step", 100, 200, MarkerKind::Range, 77, None),
                ("forward", 120, 180, MarkerKind::Range, 77, None),
            ]
        );
    }

    /// A decode loop as `gapscope record` sees it under the default budget: `steps` steps of
    /// 64 µs on one thread, each an NVTX range `decode_step` holding a `forward` range, the
    /// budget deciding at each step's push and the windows following it, MARKER records
    /// decoded in buffers of 4,096 records after the decisions; a traced step also has its
    /// launch call and kernel. Returns the trace as the recorder finishes it.
    fn budgeted_decode_loop(steps: u64, budget_limit: u32) -> (Trace, RecordStore) {
        use super::super::budget::markers::{KeepWindows, MarkerKeeping};
        use super::super::budget::{BudgetState, StepContent};
        let step = CString::new("decode_step").unwrap();
        let forward = CString::new("forward").unwrap();
        let (start, end) = (
            sys::CUPTI_ACTIVITY_FLAG_MARKER_START,
            sys::CUPTI_ACTIVITY_FLAG_MARKER_END,
        );
        let mut budget = BudgetState::new(budget_limit);
        let mut windows = KeepWindows::new(crate::record::cupti::budget::measured_of(budget_limit));
        let mut store = RecordStore::new();
        if budget_limit > 0 {
            store.marker_keeping = Some(MarkerKeeping::default());
        }
        let launch = store.intern("cudaLaunchKernel");
        let kernel = store.intern("decode_kernel");
        let mut buffer = Vec::new();
        let flush = |store: &mut RecordStore, buffer: &mut Vec<_>, w: &KeepWindows| {
            if let Some(k) = &mut store.marker_keeping {
                k.set_windows(w.snapshot());
            }
            for r in buffer.drain(..) {
                store.add_record(testing::read(&r), &no_names);
            }
        };
        for i in 0..steps {
            let at = 1_000_000 + i * 64_000;
            let id = (2 * i) as u32;
            buffer.push(marker_half(start, id, at, Some(&step)));
            budget.step_started();
            let tracing = budget_limit == 0 || budget.tracing();
            windows.decided(tracing, || at + 100);
            buffer.push(marker_half(start, id + 1, at + 1_000, Some(&forward)));
            if tracing {
                let corr = i as u32 + 1;
                store.builder.trace.api_calls.push(ApiCall {
                    start: at + 2_000,
                    end: at + 5_000,
                    corr,
                    thread: 77,
                    name: launch,
                    domain: ApiDomain::Runtime,
                });
                store.builder.trace.kernels.push(Kernel {
                    start: at + 10_000,
                    end: at + 40_000,
                    corr,
                    name: kernel,
                    stream: 7,
                    ..Default::default()
                });
            }
            buffer.push(marker_half(end, id + 1, at + 50_000, None));
            buffer.push(marker_half(end, id, at + 60_000, None));
            budget.step_ended(StepContent::Eager);
            if buffer.len() >= 4_096 {
                flush(&mut store, &mut buffer, &windows);
            }
        }
        flush(&mut store, &mut buffer, &windows);
        let mut trace = store.builder.trace.clone();
        trace.metadata.cells = vec![Default::default()];
        trace.metadata.sampling = budget.sampling();
        if let (Some(sampling), Some(k)) = (&mut trace.metadata.sampling, &store.marker_keeping) {
            let strings = trace.strings.clone();
            sampling.markers = k.sample(windows.snapshot().unwrap(), |id| {
                strings[id as usize].clone()
            });
        }
        trace.mark_steps("decode_step");
        (trace, store)
    }

    /// Issue 25 d: 700,000 steps under the default budget make a trace well under 5 MB, with
    /// every left-out range counted in the summary, and the tracer's share still measured.
    #[test]
    fn a_700k_step_loop_keeps_a_bounded_trace_and_its_tracer_share() {
        let steps = 700_000u64;
        let (trace, store) = budgeted_decode_loop(steps, 64);
        let json = serde_json::to_vec(&trace).unwrap();
        let sample = trace
            .metadata
            .sampling
            .as_ref()
            .unwrap()
            .markers
            .as_ref()
            .unwrap();
        let left_out: u64 = sample.left_out.iter().map(|r| r.count).sum();
        assert_eq!(
            trace.markers.len() as u64 + left_out,
            2 * steps,
            "every range is kept or counted"
        );
        for name in ["decode_step", "forward"] {
            let kept = trace
                .markers
                .iter()
                .filter(|m| trace.str(m.name) == name)
                .count() as u64;
            let summary = sample.left_out.iter().find(|r| r.name == name).unwrap();
            assert_eq!(kept + summary.count, steps, "{name}: kept or counted");
        }
        assert_eq!(sample.left_out.len(), 2);
        let step_summary = sample
            .left_out
            .iter()
            .find(|r| r.name == "decode_step")
            .unwrap();
        let median = step_summary.quantile(0.5).unwrap();
        assert!((median - 60_000.0).abs() <= 60_000.0 / 32.0, "{median}");
        let traced = trace.metadata.sampling.as_ref().unwrap().steps_traced;
        let kept_steps = trace.markers.len() as u64 / 2;
        assert!(
            kept_steps < 3 * traced,
            "{kept_steps} steps kept, {traced} traced"
        );
        let memory = store.builder.trace.markers.capacity() * std::mem::size_of::<Marker>();
        eprintln!(
            "700,000 steps, budget 64: {} bytes of trace JSON, {} markers kept ({} steps traced), {} left out in {} summaries ({} buckets), {} windows; kept markers hold {} bytes in memory, open ranges {}",
            json.len(),
            trace.markers.len(),
            traced,
            left_out,
            sample.left_out.len(),
            sample
                .left_out
                .iter()
                .map(|r| r.buckets.len())
                .sum::<usize>(),
            sample.kept_windows.len(),
            memory,
            store.unclosed_markers(),
        );
        assert!(json.len() < 500_000, "{} bytes", json.len());
        // The trace reads back, and analyze measures the tracer's share from it.
        let back = crate::trace::parse_trace(&json, std::path::Path::new("t.json")).unwrap();
        assert_eq!(back.metadata.sampling, trace.metadata.sampling);
        let share = crate::analysis::tracer_share::of_marked_cell(&back, 0).expect("a share");
        assert!(share.untraced.n >= 200, "{share:?}");
        assert!(share.traced.n >= 200, "{share:?}");
        let a = crate::analysis::analyze(&[back], &["t".into()], &Default::default());
        assert!(
            a.cells.iter().any(|c| c.tracer_share.is_some()),
            "analyze states the share"
        );
    }

    /// With `--trace-budget 0` (no budget) every range is kept and nothing is summarised.
    #[test]
    fn without_a_budget_every_range_is_kept() {
        let (trace, store) = budgeted_decode_loop(5_000, 0);
        assert_eq!(trace.markers.len(), 10_000);
        assert!(store.marker_keeping.is_none());
        assert_eq!(trace.metadata.sampling, None);
    }

    /// The fields we read sit at the same offsets in Kernel9 (CUDA 12.x) and the kernel record
    /// of these bindings, so a 12.x libcupti under 13.0 bindings decodes correctly.
    #[cfg(cupti_kernel = "10")]
    #[test]
    fn kernel9_and_kernel10_share_the_fields_we_read() {
        use std::mem::offset_of;
        type K = sys::ActivityKernel;
        type K9 = sys::CUpti_ActivityKernel9;
        assert_eq!(offset_of!(K, start), offset_of!(K9, start));
        assert_eq!(offset_of!(K, end), offset_of!(K9, end));
        assert_eq!(offset_of!(K, deviceId), offset_of!(K9, deviceId));
        assert_eq!(offset_of!(K, streamId), offset_of!(K9, streamId));
        assert_eq!(offset_of!(K, correlationId), offset_of!(K9, correlationId));
        assert_eq!(offset_of!(K, name), offset_of!(K9, name));
        assert_eq!(offset_of!(K, graphNodeId), offset_of!(K9, graphNodeId));
        assert_eq!(offset_of!(K, graphId), offset_of!(K9, graphId));
    }
}
