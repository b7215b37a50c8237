//! Graph capture helpers: capturing a step into an executable graph ([`capture_graph`]), the
//! node counts emu.cu prints, and how graphed steps are launched ([`Launch`]).
#![forbid(unsafe_code)]

use crate::workload::collective::WorkloadError;
use crate::workload::cuda::graph::{self, NodeType};
use cudarc::driver::CudaStream;

pub use crate::workload::cuda::graph::GraphExec;

/// How graphed steps are launched (`--launch`; emu.cu's second argument).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum Launch {
    /// One executable graph replayed every step (steady state).
    Replay,
    /// A freshly instantiated executable graph per step (first launches).
    Fresh,
    /// Two executable graphs taking turns (emu.cu's "alt"; not offered by `--launch`).
    #[value(skip)]
    Alternating,
}

impl Launch {
    /// emu.cu's rule for its argument: first letter 's' → replay ("single"), 'a' →
    /// alternating, else (or absent) fresh.
    pub fn from_emu_cu_arg(arg: Option<&str>) -> Launch {
        match arg.and_then(|a| a.bytes().next()) {
            Some(b's') => Launch::Replay,
            Some(b'a') => Launch::Alternating,
            _ => Launch::Fresh,
        }
    }

    /// The label written in cell labels and traces (`requested["launch"]`).
    pub fn label(self) -> &'static str {
        match self {
            Launch::Replay => "replay",
            Launch::Fresh => "fresh",
            Launch::Alternating => "alternating",
        }
    }

    /// The label emu.cu prints at the start of its result lines (kept so the lines can be
    /// compared with the C program's).
    pub fn emu_cu_label(self) -> &'static str {
        match self {
            Launch::Replay => "single-exec",
            Launch::Alternating => "two-execs-alternating",
            Launch::Fresh => "exec-per-step",
        }
    }

    /// Executable graphs captured for `steps` steps.
    pub fn graphs(self, steps: usize) -> usize {
        match self {
            Launch::Replay => 1,
            Launch::Alternating => 2,
            Launch::Fresh => steps,
        }
    }

    /// Which executable graph step `i` launches.
    pub fn exec_index(self, i: usize) -> usize {
        match self {
            Launch::Replay => 0,
            Launch::Alternating => i % 2,
            Launch::Fresh => i,
        }
    }
}

/// Node counts of a graph, as emu.cu prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphNodeCounts {
    pub kernels: usize,
    pub event_waits: usize,
    pub event_records: usize,
    pub other: usize,
}

impl GraphNodeCounts {
    /// Counts node types.
    pub fn of(types: &[NodeType]) -> GraphNodeCounts {
        let mut c = GraphNodeCounts::default();
        for t in types {
            match t {
                NodeType::CU_GRAPH_NODE_TYPE_KERNEL => c.kernels += 1,
                NodeType::CU_GRAPH_NODE_TYPE_WAIT_EVENT => c.event_waits += 1,
                NodeType::CU_GRAPH_NODE_TYPE_EVENT_RECORD => c.event_records += 1,
                _ => c.other += 1,
            }
        }
        c
    }

    /// emu.cu's line: "mode=2 graph nodes: kernels=4 evwait=1 evrecord=1 other=0".
    pub fn line(&self, mode: crate::workload::collective::GraphUsageMode) -> String {
        format!(
            "mode={mode} graph nodes: kernels={} evwait={} evrecord={} other={}",
            self.kernels, self.event_waits, self.event_records, self.other
        )
    }
}

/// Captures `body` on `origin` in thread-local mode, then, in emu.cu's order: ends the capture,
/// instantiates (flags 0), counts the template graph's nodes, destroys the template.
/// On any error the capture is ended and everything made so far destroyed.
pub fn capture_graph<F>(
    origin: &CudaStream,
    body: F,
) -> Result<(GraphExec, GraphNodeCounts), WorkloadError>
where
    F: FnOnce() -> Result<(), WorkloadError>,
{
    graph::begin_capture(origin)?;
    let body_result = body();
    // Ended also after a failed body, to release the stream; the template (if any) is
    // destroyed when `template` drops, on every path.
    let (ended, template) = graph::end_capture(origin);
    body_result?;
    ended?;
    let template = template
        .ok_or_else(|| WorkloadError::Config("cuStreamEndCapture returned no graph".into()))?;
    let exec = template.instantiate()?;
    let counts = template.node_types().map(|t| GraphNodeCounts::of(&t));
    drop(template);
    Ok((exec, counts?))
}
