//! Whether a recording adds up: launch calls without the device work they launched (and
//! device work without its launch call), graph launches that replayed nothing, NVTX ranges
//! never ended — counted per kind, so that "0 dropped records" means what it says.
//!
//! What is not a loss: launches made while a stream was being captured (they build graph
//! nodes, not device work) — inside a `cudaStreamBeginCapture` … `cudaStreamEndCapture` window
//! of their thread, or followed on it by an end of capture before any launch that ran (the
//! trace budget can leave the begin unrecorded); and launches the trace budget left untraced,
//! which have no API record either (the trace's notes count them).
#![forbid(unsafe_code)]

use super::corr_set::CorrSet;
use crate::trace::Trace;
use rustc_hash::FxHashSet;
use serde::Serialize;

/// The counts of one trace; all zero when it adds up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Completeness {
    /// Kernel launch, copy and memset calls outside captures with no device record.
    pub launches_without_device_record: u64,
    /// Kernels, copies and memsets whose correlation id no API call of the trace has.
    pub device_records_without_launch: u64,
    /// Graph launch calls outside captures with no replayed op.
    pub graph_launches_without_ops: u64,
    /// NVTX ranges started and never ended (the recorder leaves them out).
    pub unended_ranges: u64,
    /// False when the trace holds no API calls: the launch-side counts were not checked.
    pub api_recorded: bool,
    /// The labels of the cells whose time the missing records fall in (filled by
    /// [`super::analyze`]).
    pub cells: Vec<String>,
    /// Host times (launch calls) and device times (records) of what is missing, to find the
    /// cells it touches.
    #[serde(skip)]
    pub(crate) host_times: Vec<u64>,
    #[serde(skip)]
    pub(crate) device_times: Vec<u64>,
}

impl Completeness {
    pub fn total(&self) -> u64 {
        self.launches_without_device_record
            + self.device_records_without_launch
            + self.graph_launches_without_ops
            + self.unended_ranges
    }

    /// The non-zero counts, named: "2 launches without a device record, 1 NVTX range never
    /// ended"; empty when the trace adds up.
    pub fn describe(&self) -> String {
        [
            (
                self.launches_without_device_record,
                "launch call(s) without a device record",
            ),
            (
                self.device_records_without_launch,
                "device record(s) without a launch call",
            ),
            (
                self.graph_launches_without_ops,
                "graph launch(es) that replayed no op",
            ),
            (self.unended_ranges, "NVTX range(s) never ended"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// What kind of launch an API call is, by its name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LaunchKind {
    /// A kernel launch, copy or memset: one device record expected.
    Work,
    Graph,
    CaptureBegin,
    CaptureEnd,
}

fn launch_kind(name: &str) -> Option<LaunchKind> {
    if crate::trace::is_graph_launch_call(name) {
        return Some(LaunchKind::Graph);
    }
    let name = name
        .strip_prefix("cuda")
        .or_else(|| name.strip_prefix("cu"))?;
    if name.starts_with("StreamBeginCapture") {
        Some(LaunchKind::CaptureBegin)
    } else if name.starts_with("StreamEndCapture") {
        Some(LaunchKind::CaptureEnd)
    } else if (name.starts_with("Launch") && !name.starts_with("LaunchHostFunc"))
        || name.starts_with("Memcpy")
        || name.starts_with("Memset")
    {
        Some(LaunchKind::Work)
    } else {
        None
    }
}

/// Counts what does not add up in `trace` (see the module doc).
pub fn check(trace: &Trace) -> Completeness {
    let mut c = Completeness {
        unended_ranges: trace.metadata.unended_ranges,
        api_recorded: !trace.api_calls.is_empty(),
        ..Completeness::default()
    };
    // (corr, start) of every device record, in the trace's order.
    let device_records = || {
        trace.kernels.iter().map(|k| (k.corr, k.start)).chain(
            trace
                .memcpys
                .iter()
                .chain(&trace.memsets)
                .map(|m| (m.corr, m.start)),
        )
    };
    if !c.api_recorded {
        return c;
    }
    let device = CorrSet::of(device_records().map(|(corr, _)| corr));
    let kinds: Vec<Option<LaunchKind>> = trace.strings.iter().map(|s| launch_kind(s)).collect();
    let mut calls: Vec<(u32, u64, u32, LaunchKind)> = trace
        .api_calls
        .iter()
        .filter_map(|a| Some((a.thread, a.start, a.corr, (*kinds.get(a.name as usize)?)?)))
        .collect();
    calls.sort_unstable_by_key(|&(thread, start, corr, _)| (thread, start, corr));
    // Per thread in time order: launches without a record wait until the thread shows
    // whether they were captured (an end of capture comes first) or lost (a launch that ran).
    let mut pending: Vec<(u64, LaunchKind)> = Vec::new();
    let mut thread = None;
    let mut capturing = false;
    let lose = |pending: &mut Vec<(u64, LaunchKind)>, c: &mut Completeness| {
        for (at, kind) in pending.drain(..) {
            match kind {
                LaunchKind::Graph => c.graph_launches_without_ops += 1,
                _ => c.launches_without_device_record += 1,
            }
            c.host_times.push(at);
        }
    };
    for &(t, start, corr, kind) in &calls {
        if thread != Some(t) {
            lose(&mut pending, &mut c);
            thread = Some(t);
            capturing = false;
        }
        match kind {
            LaunchKind::CaptureBegin => {
                lose(&mut pending, &mut c);
                capturing = true;
            }
            LaunchKind::CaptureEnd => {
                pending.clear();
                capturing = false;
            }
            LaunchKind::Work | LaunchKind::Graph if capturing => {}
            LaunchKind::Work | LaunchKind::Graph => {
                if device.contains(corr) {
                    lose(&mut pending, &mut c);
                } else {
                    pending.push((start, kind));
                }
            }
        }
    }
    lose(&mut pending, &mut c);
    // Under a trace budget that measures, device records without a launch call are the
    // measured launches' and steps' (see `crate::trace::Sampling::measured_per_pause`).
    if super::untraced::measures(trace) {
        return c;
    }
    // Each correlation id of a device record once, with the start of its last record.
    let api = CorrSet::of(trace.api_calls.iter().map(|a| a.corr));
    let mut counted = FxHashSet::default();
    for (corr, start) in device_records().rev() {
        if !api.contains(corr) && counted.insert(corr) {
            c.device_records_without_launch += 1;
            c.device_times.push(start);
        }
    }
    c
}

/// The cells of one trace that the missing records fall in: a launch call inside the host
/// span of a cell's launches, a device record inside its steps.
pub(crate) fn touched_cells(
    c: &Completeness,
    cells: &[super::cell::CellAnalysis],
    timeline: &super::model::TraceTimeline,
    launches: &super::timeline::LaunchIndex,
) -> Vec<usize> {
    let mut touched = Vec::new();
    for (i, cell) in cells.iter().enumerate() {
        let ops = cell.steps.iter().flat_map(|s| &s.ops);
        let host = ops
            .filter_map(|&o| launches.call(timeline.ops[o].corr))
            .fold(None, |span: Option<(u64, u64)>, (start, end, _)| {
                Some(span.map_or((start, end), |(a, b)| (a.min(start), b.max(end))))
            });
        let device = match (cell.steps.first(), cell.steps.last()) {
            (Some(first), Some(last)) => Some((first.window_start, last.end)),
            _ => None,
        };
        let within = |span: Option<(u64, u64)>, times: &[u64]| {
            span.is_some_and(|(a, b)| times.iter().any(|&t| a <= t && t <= b))
        };
        if within(host, &c.host_times) || within(device, &c.device_times) {
            touched.push(i);
        }
    }
    touched
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_calls_are_told_apart_by_name() {
        assert!(launch_kind("cudaLaunchKernel") == Some(LaunchKind::Work));
        assert!(launch_kind("cuLaunchKernelEx") == Some(LaunchKind::Work));
        assert!(launch_kind("cudaMemcpyAsync") == Some(LaunchKind::Work));
        assert!(launch_kind("cuMemsetD32Async") == Some(LaunchKind::Work));
        assert!(launch_kind("cudaGraphLaunch") == Some(LaunchKind::Graph));
        assert!(launch_kind("cudaStreamBeginCapture") == Some(LaunchKind::CaptureBegin));
        assert!(launch_kind("cuStreamEndCapture") == Some(LaunchKind::CaptureEnd));
        assert!(
            launch_kind("cudaLaunchHostFunc").is_none(),
            "no device record"
        );
        assert!(launch_kind("cudaStreamSynchronize").is_none());
        assert!(launch_kind("ncclAllGather").is_none());
    }
}
