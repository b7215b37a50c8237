//! Synthetic traces shaped like the recorder's output, for tests, benchmarks and the
//! no-GPU fallback before real traces exist. Every trace made here says so in its metadata
//! (`Source::Synthetic` and a note), and reports repeat it.
//!
//! The modelled step is `examples/probe/emu.cu`'s: spin 5 µs → collective stand-in → spin 10 µs →
//! spin 5 µs on one stream. Graphed cells carry the DAG NCCL builds in graph usage mode 2
//! (an external event-wait node in front of the collective, an explicit event-record node
//! after it, both created inside `ncclAllGather`) or mode 1 (neither).
#![forbid(unsafe_code)]

pub mod kineto;

use crate::trace::{
    ApiCall, Cell, GraphEdge, GraphExec, GraphNode, Kernel, Marker, MarkerKind, Metadata, NodeType,
    Source, StrId, Trace, TraceBuilder,
};
use std::collections::BTreeMap;

/// One cell of a synthetic trace.
#[derive(Debug, Clone)]
pub struct SyntheticCell {
    pub graphed: bool,
    /// 1 or 2 (0 behaves as 1).
    pub mode: u8,
    pub steps: usize,
    /// Device idle before the collective, ns (graphed mode 2 is larger: the external wait).
    pub gap_before_collective: u64,
    /// Device idle before every other kernel, ns.
    pub gap_other: u64,
    /// Extra kernels per step before the collective (to scale a trace up).
    pub extra_kernels: usize,
    /// Eager only: a kernel the graphed regime does not have (e.g. a framework's fill kernel).
    pub eager_only_kernel: bool,
}

impl SyntheticCell {
    /// The emu.cu step with gaps like those `examples/probe/emu.cu` measured on an H200.
    pub fn emu(graphed: bool, mode: u8, steps: usize) -> SyntheticCell {
        let gap_before_collective = match (graphed, mode) {
            (false, _) => 1_500,
            (true, 2) => 1_650,
            (true, _) => 750,
        };
        SyntheticCell {
            graphed,
            mode,
            steps,
            gap_before_collective,
            gap_other: if graphed { 700 } else { 1_200 },
            extra_kernels: 0,
            eager_only_kernel: false,
        }
    }

    fn label(&self) -> String {
        format!(
            "{} mode={} T=1 emu",
            if self.graphed { "graphed" } else { "eager" },
            self.mode
        )
    }
}

/// Deterministic jitter of ±`amplitude` ns.
struct Jitter(u64);

impl Jitter {
    fn next(&mut self, amplitude: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if amplitude == 0 {
            return 0;
        }
        (self.0 >> 33) % (2 * amplitude + 1)
    }
}

const STREAM: u32 = 13;

/// Builds one trace holding the given cells one after another.
pub fn trace(cells: &[SyntheticCell], seed: u64) -> Trace {
    let metadata = Metadata {
        tool: format!("gapscope {}", env!("CARGO_PKG_VERSION")),
        source: Source::Synthetic,
        notes: vec!["synthetic trace: generated, not recorded on a GPU".to_owned()],
        cells: cells
            .iter()
            .map(|c| Cell {
                label: c.label(),
                requested: BTreeMap::from([
                    (
                        "regime".to_owned(),
                        (if c.graphed { "graphed" } else { "eager" }).into(),
                    ),
                    (
                        crate::trace::GRAPH_USAGE_MODE_KEY.to_owned(),
                        u64::from(c.mode).into(),
                    ),
                    ("tokens".to_owned(), 1u64.into()),
                    ("backend".to_owned(), "emulated".into()),
                ]),
                event_periods_ns: Vec::new(),
                reference: Default::default(),
            })
            .collect(),
        ..Metadata::default()
    };
    let mut b = TraceBuilder::new(metadata);
    let mut generator = Generator {
        now: 1_000_000,
        corr: 1,
        next_graph: 1,
        jitter: Jitter(seed | 1),
    };
    for (i, cell) in cells.iter().enumerate() {
        generator.cell(&mut b, i as u32, cell);
    }
    b.finish()
}

struct Generator {
    now: u64,
    corr: u32,
    next_graph: u32,
    jitter: Jitter,
}

struct KernelSpec {
    name: StrId,
    duration: u64,
    gap_before: u64,
    node: u64,
}

impl Generator {
    fn cell(&mut self, b: &mut TraceBuilder, cell: u32, c: &SyntheticCell) {
        let spin = b.intern("spin");
        let coll = b.intern("coll");
        let extra = b.intern("expert_standin");
        let fill = b.intern("fill");
        let launch = b.intern("cudaLaunchKernel");
        let graph_launch = b.intern("cudaGraphLaunch");
        let wait_api = b.intern("cudaStreamWaitEvent");
        let step_name = b.intern("step");
        let nodes = c.graphed.then(|| self.build_graph(b, c));
        let exec = nodes.as_ref().map_or(0, |n| n.exec);
        let node_of = |k: usize| nodes.as_ref().map_or(0, |n| n.kernels[k]);

        let mut specs: Vec<KernelSpec> = Vec::new();
        let mut push = |name, duration, gap_before, node| {
            specs.push(KernelSpec {
                name,
                duration,
                gap_before,
                node,
            })
        };
        push(spin, 5_000, c.gap_other, node_of(0));
        if c.eager_only_kernel && !c.graphed {
            push(fill, 1_000, c.gap_other, 0);
        }
        for e in 0..c.extra_kernels {
            push(extra, 3_000, c.gap_other, node_of(4 + e));
        }
        push(coll, 2_000, c.gap_before_collective, node_of(1));
        push(spin, 10_000, c.gap_other, node_of(2));
        push(spin, 5_000, c.gap_other, node_of(3));

        for _ in 0..c.steps {
            let marker_start = self.now;
            let graph_corr = self.corr;
            if c.graphed {
                b.trace.api_calls.push(ApiCall {
                    start: self.now + 100,
                    end: self.now + 2_100,
                    corr: graph_corr,
                    thread: 1,
                    name: graph_launch,
                    domain: Default::default(),
                });
                self.corr += 1;
            }
            // The host runs ahead of the device in both regimes: launches finish before the
            // previous kernel ends, so eager gaps are stream-order latency.
            let mut host = self.now + 100;
            for spec in &specs {
                let gap = spec.gap_before + self.jitter.next(40);
                let start = self.now + gap;
                let end = start + spec.duration + self.jitter.next(20);
                let corr = if c.graphed {
                    graph_corr
                } else {
                    if c.mode == 2 && spec.name == coll {
                        b.trace.api_calls.push(ApiCall {
                            start: host,
                            end: host + 300,
                            corr: self.corr,
                            thread: 1,
                            name: wait_api,
                            domain: Default::default(),
                        });
                        self.corr += 1;
                        host += 400;
                    }
                    let corr = self.corr;
                    b.trace.api_calls.push(ApiCall {
                        start: host,
                        end: host + 1_500,
                        corr,
                        thread: 1,
                        name: launch,
                        domain: Default::default(),
                    });
                    host += 1_600;
                    self.corr += 1;
                    corr
                };
                b.trace.kernels.push(Kernel {
                    start,
                    end,
                    device: 0,
                    stream: STREAM,
                    corr,
                    name: spec.name,
                    graph: exec,
                    node: spec.node,
                });
                self.now = end;
            }
            b.trace.markers.push(Marker {
                start: marker_start,
                end: host.max(marker_start + 2_200),
                name: step_name,
                kind: MarkerKind::Step,
                thread: 1,
                cell: Some(cell),
            });
        }
    }

    /// Template graph and its executable clone; returns the clone's kernel node ids
    /// (spin, coll, spin, spin, extras...).
    fn build_graph(&mut self, b: &mut TraceBuilder, c: &SyntheticCell) -> GraphIds {
        let template = self.next_graph;
        let exec = self.next_graph + 1;
        self.next_graph += 2;
        let launch = b.intern("cudaLaunchKernel");
        let wait_api = b.intern("cudaStreamWaitEvent");
        let record_api = b.intern("cudaGraphAddEventRecordNode");
        let nccl = b.intern("ncclAllGather");
        let id = |graph: u32, index: u64| (u64::from(graph) << 32) | index;
        // (index, type, external, created_by, library_call)
        let mut spec: Vec<(u64, NodeType, bool, StrId, Option<StrId>)> = vec![
            (0, NodeType::Kernel, false, launch, None),
            (1, NodeType::Kernel, false, launch, Some(nccl)),
            (2, NodeType::Kernel, false, launch, None),
            (3, NodeType::Kernel, false, launch, None),
        ];
        for e in 0..c.extra_kernels as u64 {
            spec.push((10 + e, NodeType::Kernel, false, launch, None));
        }
        let mut edges: Vec<(u64, u64)> = Vec::new();
        let mut chain = vec![0u64];
        chain.extend((0..c.extra_kernels as u64).map(|e| 10 + e));
        chain.extend([1, 2, 3]);
        for w in chain.windows(2) {
            edges.push((w[0], w[1]));
        }
        if c.mode == 2 {
            spec.push((4, NodeType::EventWait, true, wait_api, Some(nccl)));
            spec.push((5, NodeType::EventRecord, true, record_api, Some(nccl)));
            edges.push((4, 1));
            edges.push((1, 5));
        }
        for (graph, cloned) in [(template, false), (exec, true)] {
            for &(index, node_type, external, created_by, library_call) in &spec {
                b.trace.graph.nodes.push(GraphNode {
                    id: id(graph, index),
                    graph,
                    node_type,
                    external,
                    created_by: Some(created_by),
                    library_call,
                    cloned_from: cloned.then_some(id(template, index)),
                    ..GraphNode::default()
                });
            }
            for &(from, to) in &edges {
                b.trace.graph.edges.push(GraphEdge {
                    from: id(graph, from),
                    to: id(graph, to),
                });
            }
        }
        b.trace.graph.execs.push(GraphExec { id: exec, template });
        let mut kernels = vec![id(exec, 0), id(exec, 1), id(exec, 2), id(exec, 3)];
        kernels.extend((0..c.extra_kernels as u64).map(|e| id(exec, 10 + e)));
        GraphIds { exec, kernels }
    }
}

struct GraphIds {
    exec: u32,
    kernels: Vec<u64>,
}

/// The four cells of the emu experiment (eager/graphed × mode 2/1), `steps` steps each.
pub fn emu_experiment(steps: usize) -> Trace {
    trace(
        &[
            SyntheticCell::emu(false, 2, steps),
            SyntheticCell::emu(true, 2, steps),
            SyntheticCell::emu(false, 1, steps),
            SyntheticCell::emu(true, 1, steps),
        ],
        42,
    )
}

/// A trace of eager kernels and graph replays launched one after another by one host thread
/// on one stream, with no step markers (unless added): for the tests and the benchmark of
/// steps found in the kernel sequence. Host-bound like an eager decode loop: each launch
/// call takes 2 µs, and a kernel starts when both its launch and the previous kernel are done.
pub struct KernelStream {
    b: TraceBuilder,
    host: u64,
    device: u64,
    corr: u32,
    launch: StrId,
    graph_launch: StrId,
}

impl Default for KernelStream {
    fn default() -> Self {
        Self::new()
    }
}

impl KernelStream {
    pub fn new() -> KernelStream {
        let mut b = TraceBuilder::new(Metadata {
            tool: format!("gapscope {}", env!("CARGO_PKG_VERSION")),
            source: Source::Synthetic,
            notes: vec!["synthetic trace: generated, not recorded on a GPU".to_owned()],
            ..Metadata::default()
        });
        let launch = b.intern("cudaLaunchKernel");
        let graph_launch = b.intern("cudaGraphLaunch");
        KernelStream {
            b,
            host: 1_000_000,
            device: 1_000_000,
            corr: 1,
            launch,
            graph_launch,
        }
    }

    /// Host time now (ns), e.g. to open a range.
    pub fn host_now(&self) -> u64 {
        self.host
    }

    fn call(&mut self, name: StrId, host_gap: u64) -> (u32, u64) {
        self.host += host_gap;
        let corr = self.corr;
        self.corr += 1;
        self.b.trace.api_calls.push(ApiCall {
            start: self.host,
            end: self.host + 2_000,
            corr,
            thread: 1,
            name,
            domain: Default::default(),
        });
        self.host += 2_000;
        (corr, self.host)
    }

    fn run(&mut self, name: &str, corr: u32, launched: u64, duration: u64, graph: u32, node: u64) {
        let name = self.b.intern(name);
        let start = self.device.max(launched + 500) + 300;
        self.device = start + duration;
        self.b.trace.kernels.push(Kernel {
            start,
            end: self.device,
            device: 0,
            stream: STREAM,
            corr,
            name,
            graph,
            node,
        });
    }

    /// One eager kernel, launched after `host_gap` ns of host work, running `duration` ns.
    pub fn kernel(&mut self, name: &str, host_gap: u64, duration: u64) {
        let (corr, launched) = self.call(self.launch, host_gap);
        self.run(name, corr, launched, duration, 0, 0);
    }

    /// Eager kernels, one launch each, 1 µs of host work before each and 3 µs on the device.
    pub fn kernels(&mut self, names: &[&str]) {
        for name in names {
            self.kernel(name, 1_000, 3_000);
        }
    }

    /// One launch of executable graph `exec` running `names` (3 µs each), after `host_gap` ns.
    pub fn replay(&mut self, exec: u32, names: &[&str], host_gap: u64) {
        let (corr, launched) = self.call(self.graph_launch, host_gap);
        for (i, name) in names.iter().enumerate() {
            self.run(
                name,
                corr,
                launched,
                3_000,
                exec,
                (u64::from(exec) << 32) | i as u64,
            );
        }
    }

    /// A host range (an NVTX range, not a step marker) from `start` to now.
    pub fn range(&mut self, name: &str, start: u64) {
        let name = self.b.intern(name);
        self.b.trace.markers.push(Marker {
            start,
            end: self.host,
            name,
            kind: MarkerKind::Range,
            thread: 1,
            cell: None,
        });
    }

    pub fn finish(self) -> Trace {
        self.b.finish()
    }
}

/// Host samples every `every_ns` over the span of `trace`'s API calls, on each `(thread,
/// stack)` given (stacks innermost first): what `gapscope record --host-samples python`
/// would add to a program that ran one code throughout, for tests of the attribution.
pub fn host_samples_over(
    trace: &Trace,
    every_ns: u64,
    threads: &[(u32, Vec<crate::trace::HostFrame>)],
) -> crate::trace::HostSamples {
    let start = trace.api_calls.iter().map(|a| a.start).min().unwrap_or(0);
    let end = trace.api_calls.iter().map(|a| a.end).max().unwrap_or(0);
    let mut out = crate::trace::HostSamples {
        sampler: "synthetic".into(),
        rate_hz: u32::try_from(1_000_000_000 / every_ns.max(1)).unwrap_or(u32::MAX),
        clock: "synthetic: the trace's clock".into(),
        ..Default::default()
    };
    for (_, stack) in threads {
        let first = out.frames.len() as u32;
        out.frames.extend(stack.iter().cloned());
        out.stacks
            .push((first..first + stack.len() as u32).collect());
    }
    let mut time = start;
    while time <= end {
        for (k, (thread, _)) in threads.iter().enumerate() {
            out.samples.push(crate::trace::HostSample {
                time,
                read_ns: 0,
                thread: *thread,
                stack: k as u32,
            });
        }
        time += every_ns.max(1);
    }
    out
}
