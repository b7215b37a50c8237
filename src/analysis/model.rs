//! The vocabulary every stage of the analysis shares: device ops, steps, the gaps between ops and
//! their causes, and how sure a piece of evidence is. No stage's own types, no decisions.
#![forbid(unsafe_code)]

use crate::trace::NodeType;
use serde::{Deserialize, Serialize};

/// Kind of a device operation on the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Kernel,
    Memcpy,
    Memset,
}

/// One device operation (kernel, memcpy or memset) of one trace, in start order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Op {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub stream: u32,
    pub corr: u32,
    /// Kernel name, or the copy kind / "memset" (index into the trace's strings).
    pub name: u32,
    pub kind: OpKind,
    pub graph: u32,
    pub node: u64,
}

/// Whether a step ran eagerly or as a graph replay — observed from the records, never assumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Regime {
    Eager,
    Graphed,
}

impl Regime {
    pub fn label(self) -> &'static str {
        match self {
            Regime::Eager => "eager",
            Regime::Graphed => "graphed",
        }
    }
}

/// Defines [`Cause`] and, from its one list of variants, [`CauseKind`] (the cause without its
/// evidence), [`Cause::kind`] and [`CauseKind::ALL`]: the two enums cannot drift apart.
macro_rules! causes {
    (
        $(#[$cause_meta:meta])*
        pub enum Cause {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident $( ( $($tuple:tt)* ) )? $( { $($fields:tt)* } )?
            ),* $(,)?
        }
    ) => {
        $(#[$cause_meta])*
        pub enum Cause {
            $(
                $(#[$variant_meta])*
                $variant $( ( $($tuple)* ) )? $( { $($fields)* } )?
            ),*
        }

        /// A cause without its details, for aggregation.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum CauseKind {
            $($variant),*
        }

        impl Cause {
            pub fn kind(&self) -> CauseKind {
                match self {
                    $(Cause::$variant { .. } => CauseKind::$variant),*
                }
            }
        }

        impl CauseKind {
            /// Every kind, in the order of [`Cause`]'s variants.
            pub const ALL: [CauseKind; [$(stringify!($variant)),*].len()] = [$(CauseKind::$variant),*];
        }
    };
}

causes! {
    /// Why the device was idle during a gap, from evidence in the trace.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    pub enum Cause {
        /// The next op waits (through the DAG) on an external event-wait node; when an NCCL call
        /// created it, this is NCCL graph usage mode 2 ("mixing").
        /// (Boxed, as the other variant that carries names: every gap has a cause, and a cause
        /// of eight bytes keeps a million gaps small.)
        ExternalEventWait(Box<ExternalWait>),
        /// A host node (e.g. NCCL's proxy callback) precedes the next op.
        HostNode(Box<HostNodeEvidence>),
        /// A memset/memcpy node that left no device record precedes the next op.
        MemoryNode { node: u64, node_type: NodeType },
        /// The next op joins work from another stream.
        CrossStreamJoin { from_stream: u32 },
        /// Before the first op of a graph replay: the launch boundary.
        GraphLaunch,
        /// Before the first op of a graph replay whose launch call had not returned when the
        /// device went idle: the host's graph launch was the bottleneck.
        GraphLaunchHostBound {
            /// Duration of the launch call (e.g. `cuGraphLaunch`), ns.
            launch_call_ns: u64,
            /// The first launch of this executable graph in the trace.
            first_launch: bool,
        },
        /// A plain kernel-to-kernel edge inside a graph: the graph's own dependency latency.
        GraphDependency,
        /// Eager: the op was launched by the host after the device had gone idle.
        HostLaunchBound,
        /// Eager: the op was queued in stream order before the device went idle and nothing else
        /// held it: the device's own launch latency.
        StreamOrderLatency,
        /// Eager: the op's stream waited on an event (cudaStreamWaitEvent).
        StreamWait,
        /// Eager: a host synchronisation call held the launch back.
        Synchronization,
        /// No evidence found; kept visible.
        Unattributed,
    }
}

/// The evidence of [`Cause::ExternalEventWait`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ExternalWait {
    pub wait_node: u64,
    pub record_node: Option<u64>,
    /// The API call that created the wait node (e.g. `cudaStreamWaitEvent`).
    pub created_by: Option<String>,
    /// The library call it was made inside (e.g. `ncclAllGather`).
    pub library_call: Option<String>,
    /// How sure the evidence is that the wait node is external: sure from a recording, likely
    /// where the DAG was inferred ([`crate::trace::GraphDag::inferred`]: an Nsight Systems
    /// import), whose labels say "probably".
    #[serde(skip_serializing_if = "Confidence::is_sure")]
    pub confidence: Confidence,
}

impl ExternalWait {
    /// "external event-wait node 0x… (cudaStreamWaitEvent inside ncclAllGather), event-record
    /// node 0x…"; with [`Confidence::Likely`], "probably external: event-wait node 0x…
    /// created by cudaStreamWaitEvent inside ncclAllGather, …".
    fn label(&self) -> String {
        let ExternalWait {
            wait_node,
            record_node,
            created_by,
            library_call,
            confidence,
        } = self;
        let probable = *confidence == Confidence::Likely;
        let mut s = if probable {
            format!("probably external: event-wait node {wait_node:#x}")
        } else {
            format!("external event-wait node {wait_node:#x}")
        };
        match (created_by, library_call, probable) {
            (Some(api), Some(lib), true) => s += &format!(" created by {api} inside {lib}"),
            (Some(api), None, true) => s += &format!(" created by {api}"),
            (Some(api), Some(lib), false) => s += &format!(" ({api} inside {lib})"),
            (Some(api), None, false) => s += &format!(" ({api})"),
            (None, Some(lib), true) => s += &format!(" created inside {lib}"),
            (None, Some(lib), false) => s += &format!(" (inside {lib})"),
            (None, None, _) => {}
        }
        if let Some(r) = record_node {
            s += &format!(", event-record node {r:#x}");
        }
        if library_call
            .as_deref()
            .is_some_and(|l| l.starts_with("nccl"))
        {
            s += if probable {
                ": probably NCCL graph usage mode 2 (mixing)"
            } else {
                ": NCCL graph usage mode 2 (mixing)"
            };
        }
        if probable {
            s += " (node type inferred from the creating call: the trace records none)";
        }
        s
    }
}

/// The evidence of [`Cause::HostNode`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct HostNodeEvidence {
    pub node: u64,
    pub library_call: Option<String>,
}

impl Cause {
    /// One-line description naming the evidence (node ids, API, library, setting).
    pub fn label(&self) -> String {
        match self {
            Cause::ExternalEventWait(wait) => wait.label(),
            Cause::HostNode(host) => match &host.library_call {
                Some(lib) => format!("host node {:#x} (inside {lib}: proxy callback)", host.node),
                None => format!("host node {:#x}", host.node),
            },
            Cause::MemoryNode { node, node_type } => {
                format!("{} node {node:#x}", node_type_name(*node_type))
            }
            Cause::CrossStreamJoin { from_stream } => {
                format!("cross-stream join (waits on stream {from_stream})")
            }
            Cause::GraphLaunchHostBound {
                launch_call_ns,
                first_launch,
            } => format!(
                "graph launch host-bound (the launch call ran {:.1} µs{})",
                *launch_call_ns as f64 / 1e3,
                if *first_launch {
                    ", first launch of this executable graph"
                } else {
                    ""
                }
            ),
            _ => self.kind().label().to_owned(),
        }
    }
}

fn node_type_name(t: NodeType) -> &'static str {
    match t {
        NodeType::Memcpy => "memcpy",
        NodeType::Memset => "memset",
        _ => "memory",
    }
}

impl CauseKind {
    pub fn label(self) -> &'static str {
        match self {
            CauseKind::ExternalEventWait => "external event wait",
            CauseKind::HostNode => "host node",
            CauseKind::MemoryNode => "memset/memcpy node",
            CauseKind::CrossStreamJoin => "cross-stream join",
            CauseKind::GraphLaunch => "graph launch boundary",
            CauseKind::GraphLaunchHostBound => "graph launch host-bound",
            CauseKind::GraphDependency => "graph dependency latency",
            CauseKind::HostLaunchBound => "host launch-bound",
            CauseKind::StreamOrderLatency => "stream-order launch latency",
            CauseKind::StreamWait => "stream/event wait",
            CauseKind::Synchronization => "host synchronisation",
            CauseKind::Unattributed => "unattributed",
        }
    }
}

/// An interval in which the device (all streams together) was idle inside a step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gap {
    pub start: u64,
    pub end: u64,
    /// Stream of the op that ends the gap.
    pub stream: u32,
    /// Op (index into [`TraceTimeline::ops`]) that ended last before the gap, if any.
    pub before: Option<usize>,
    /// Op that starts at the gap's end.
    pub after: usize,
    pub cause: Cause,
}

impl Gap {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// One step: a dispatch+combine iteration (eager) or one graph replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Position among the cell's steps.
    pub index: usize,
    pub regime: Regime,
    /// Executable graph id of a replay.
    pub graph_exec: Option<u32>,
    /// True for the first launch of its executable graph in this trace.
    pub first_launch: bool,
    /// First op start and last op end.
    pub start: u64,
    pub end: u64,
    /// Where the step's window begins: the previous step's end (or `start` for the first
    /// step). `end - window_start == busy + idle` exactly.
    pub window_start: u64,
    /// Ops of the step (indices into [`TraceTimeline::ops`]), in start order.
    pub ops: Vec<usize>,
    pub gaps: Vec<Gap>,
    /// Time with at least one op running (union over streams).
    pub busy: u64,
    /// Sum of the gaps.
    pub idle: u64,
    /// Previous step's end → this step's end; `None` for a cell's first step.
    pub period: Option<u64>,
}

/// The ops of one trace in start order, with the per-stream view.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceTimeline {
    pub ops: Vec<Op>,
}

/// How sure a pair, or a cause's evidence, is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Part of the ops match (a compiler's kernels on one side, the library's on the other);
    /// for a cause: evidence inferred, not recorded (a graph node's type read from the call
    /// that created it).
    Likely,
    /// Declared, or nearly every op matches on both sides; for a cause: recorded.
    Sure,
}

impl Confidence {
    pub fn is_sure(&self) -> bool {
        *self == Confidence::Sure
    }
}
