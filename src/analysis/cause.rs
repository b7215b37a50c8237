//! Gap attribution and per-cell figures.
//!
//! Every idle interval inside a step gets exactly one cause, found from evidence in this order:
//! graphed ops — the op's DAG predecessors (external event-wait nodes and the API and library
//! call that made them, host nodes, memory nodes without records, cross-stream joins), then the
//! launch boundary, then the graph's own dependency latency; eager ops — host synchronisation,
//! a launch issued after the device went idle, stream/event waits, then stream-order latency.
//! Without evidence a gap is "unattributed". A cause is never read from a kernel's name.
//! So attributed + unattributed = measured idle time exactly, per step.
#![forbid(unsafe_code)]

use super::cell::{CauseTotal, CellAnalysis, Observed, SequenceEntry};
use super::host_samples;
use super::model::{
    Cause, CauseKind, Confidence, ExternalWait, Gap, HostNodeEvidence, Op, Regime, Step,
    TraceTimeline,
};
use super::stats::Stat;
use super::steps::CellSteps;
use super::timeline::LaunchIndex;
use crate::trace::{NodeType, Trace};
use rustc_hash::FxHashMap;
use std::collections::HashSet;

/// Options of the analysis.
#[derive(Debug, Clone)]
pub struct AnalysisOptions {
    /// Eager: a gap counts as host launch-bound when the op's launch call returned no earlier
    /// than this many ns before the previous op ended (the device had nothing queued).
    pub launch_slack_ns: u64,
}

impl Default for AnalysisOptions {
    fn default() -> Self {
        AnalysisOptions {
            launch_slack_ns: 500,
        }
    }
}

/// Per-trace indexes shared by the cells of one trace.
pub struct TraceContext<'a> {
    trace: &'a Trace,
    launches: LaunchIndex<'a>,
    dag: DagIndex,
    /// (thread, start) of stream-wait API calls, sorted.
    stream_waits: Vec<(u32, u64)>,
    /// (start, end) of host synchronisation calls, sorted by start.
    host_syncs: Vec<(u64, u64)>,
    /// Executable graphs already launched (in step order), to flag first launches.
    launched_execs: rustc_hash::FxHashSet<u32>,
    /// Library-call ranges (ours and NCCL's NVTX ranges), per thread.
    library_calls: crate::trace::HostRanges,
    provenance: super::provenance::ProvenanceIndex,
    /// Per graph node: what stands in front of it, and the node-level cause if any.
    /// (A lock: steps are built on several threads.)
    node_causes: std::sync::Mutex<FxHashMap<u64, (Predecessors, Option<Cause>)>>,
    /// API-call starts per thread, for the tracer's share of marked cells: built the first time
    /// a cell needs it (traces with a trace budget), then shared by the trace's cells.
    call_starts: std::sync::OnceLock<super::tracer_share::CallStarts>,
    /// The trace's host samples per thread; `None` without them.
    host_samples: Option<super::host_samples::SampleIndex<'a>>,
}

impl<'a> TraceContext<'a> {
    pub fn new(trace: &'a Trace, launches: LaunchIndex<'a>) -> TraceContext<'a> {
        let wait_names = string_ids(trace, is_stream_wait_api);
        let mut stream_waits: Vec<(u32, u64)> = trace
            .api_calls
            .iter()
            .filter(|a| wait_names.contains(&a.name))
            .map(|a| (a.thread, a.start))
            .collect();
        stream_waits.sort_unstable();
        // SYNCHRONIZATION records where the recorder kept them; the API records of the
        // blocking `*Synchronize` calls otherwise (`record` leaves that kind off by default: once
        // enabled, CUPTI slows every later API call, even paused).
        let sync_api_names = string_ids(trace, is_blocking_sync_api);
        let mut host_syncs: Vec<(u64, u64)> = trace
            .syncs
            .iter()
            .filter(|s| is_blocking_sync(trace.str(s.kind)))
            .map(|s| (s.start, s.end))
            .chain(
                trace
                    .api_calls
                    .iter()
                    .filter(|a| sync_api_names.contains(&a.name))
                    .map(|a| (a.start, a.end)),
            )
            .collect();
        host_syncs.sort_unstable();
        TraceContext {
            trace,
            launches,
            dag: DagIndex::new(trace),
            stream_waits,
            host_syncs,
            launched_execs: Default::default(),
            node_causes: Default::default(),
            call_starts: Default::default(),
            library_calls: crate::trace::HostRanges::library_calls(trace, true),
            provenance: super::provenance::ProvenanceIndex::new(trace),
            host_samples: super::host_samples::SampleIndex::new(trace.host_samples.as_ref()),
        }
    }

    /// The trace's launch calls by correlation id.
    pub fn launches(&self) -> &LaunchIndex<'a> {
        &self.launches
    }

    /// Where each op of the trace came from.
    pub fn provenance(&self) -> &super::provenance::ProvenanceIndex {
        &self.provenance
    }

    /// The tracer's share of the step markers of metadata cell `cell`
    /// ([`super::tracer_share::of_marked_cell`]) that are of kind `steps`, with the trace's
    /// API-call index built once.
    fn tracer_share_of_marked_cell(
        &self,
        cell: usize,
        steps: super::tracer_share::StepsOf,
    ) -> Option<super::tracer_share::TracerShare> {
        self.trace.metadata.sampling.as_ref()?;
        let calls = self
            .call_starts
            .get_or_init(|| super::tracer_share::CallStarts::new(self.trace));
        super::tracer_share::of_marked_cell_with(self.trace, cell, calls, steps)
    }

    /// The library call that launched `op`: its graph node's tag, or the innermost
    /// library-call marker around its launch API call.
    fn library_call_of(&self, op: &Op) -> Option<String> {
        if op.graph != 0 {
            let node = self.dag.node(self.trace, op.node)?;
            return node.library_call.map(|s| self.trace.str(s).to_owned());
        }
        let (launched, _, thread) = self.launches.call(op.corr)?;
        let name = self.library_calls.innermost(thread, launched)?;
        Some(self.trace.str(name).to_owned())
    }
}

/// Host calls that block the launching thread (a stream wait only makes the device wait).
fn is_blocking_sync(kind: &str) -> bool {
    !kind.contains("wait")
}

/// The ids of the trace's strings that `wanted` picks.
fn string_ids(trace: &Trace, wanted: fn(&str) -> bool) -> HashSet<u32> {
    (0u32..)
        .zip(&trace.strings)
        .filter(|(_, s)| wanted(s))
        .map(|(i, _)| i)
        .collect()
}

/// A cell label for people: `gapscope record` labels its one cell with the whole command line,
/// which reports cut short before the script's name; with a step range it becomes
/// "`decode_step` steps (torch_graphs.py)". Other labels are kept.
fn recorded_label(trace: &Trace, label: &str) -> String {
    let workload = &trace.metadata.workload;
    let text = |key: &str| workload.get(key).and_then(|v| v.as_str());
    match (text("command"), text("step_range")) {
        (Some(command), Some(range)) if command == label => {
            format!("`{range}` steps ({})", program_name(command))
        }
        _ => label.to_owned(),
    }
}

/// The program a command line runs: its first script argument (`python -u x/torch_graphs.py
/// --n 5`, `torchrun --nproc-per-node 2 serve.py` → the `.py`), else the executable's name.
fn program_name(command: &str) -> &str {
    const SCRIPTS: [&str; 4] = [".py", ".sh", ".js", ".rb"];
    fn base(word: &str) -> &str {
        word.rsplit('/').next().unwrap_or(word)
    }
    let mut words = command.split_whitespace();
    let first = words.next().unwrap_or(command);
    words
        .find(|w| SCRIPTS.iter().any(|ext| w.ends_with(ext)))
        .map_or_else(|| base(first), base)
}

/// `cudaStreamSynchronize`, `cuCtxSynchronize`, `cudaEventSynchronize`, … (every
/// `*Synchronize` call blocks the calling thread until the device catches up).
fn is_blocking_sync_api(name: &str) -> bool {
    name.starts_with("cu") && name.contains("Synchronize")
}

fn is_stream_wait_api(name: &str) -> bool {
    name.starts_with("cudaStreamWaitEvent") || name.starts_with("cuStreamWaitEvent")
}

/// The graph DAG indexed for predecessor walks.
struct DagIndex {
    nodes: FxHashMap<u64, usize>,
    preds: FxHashMap<u64, Vec<u64>>,
    /// Node indices of each graph.
    by_graph: FxHashMap<u32, Vec<usize>>,
}

impl DagIndex {
    fn new(trace: &Trace) -> DagIndex {
        let nodes = trace
            .graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id, i))
            .collect::<FxHashMap<_, _>>();
        let mut preds: FxHashMap<u64, Vec<u64>> = FxHashMap::default();
        for e in &trace.graph.edges {
            if nodes.contains_key(&e.from) || nodes.contains_key(&e.to) {
                preds.entry(e.to).or_default().push(e.from);
            }
        }
        let mut by_graph: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
        for (i, n) in trace.graph.nodes.iter().enumerate() {
            by_graph.entry(n.graph).or_default().push(i);
        }
        DagIndex {
            nodes,
            preds,
            by_graph,
        }
    }

    /// The nodes of graph `graph`.
    fn graph_nodes<'t>(
        &'t self,
        trace: &'t Trace,
        graph: u32,
    ) -> impl Iterator<Item = &'t crate::trace::GraphNode> + 't {
        self.by_graph
            .get(&graph)
            .into_iter()
            .flatten()
            .map(move |&i| &trace.graph.nodes[i])
    }

    fn node<'t>(&self, trace: &'t Trace, id: u64) -> Option<&'t crate::trace::GraphNode> {
        self.nodes.get(&id).map(|&i| &trace.graph.nodes[i])
    }

    /// Predecessors of a node; a clone without edges of its own uses its template's.
    fn preds_of(&self, trace: &Trace, id: u64) -> &[u64] {
        if let Some(p) = self.preds.get(&id) {
            return p;
        }
        match self.node(trace, id).and_then(|n| n.cloned_from) {
            Some(template) => self.preds.get(&template).map_or(&[], Vec::as_slice),
            None => &[],
        }
    }
}

/// Evidence gathered from the unrecorded nodes in front of a graph node. The same for every
/// replay of a graph, so it is computed once per node.
#[derive(Default)]
struct Predecessors {
    external_wait: Option<u64>,
    host: Option<u64>,
    /// Memset/memcpy nodes in front: recorded ops if the step has them, else causes.
    memory: Vec<(u64, NodeType)>,
    /// Kernel nodes in front (the walk stops at them).
    kernels: Vec<u64>,
}

fn walk_predecessors(ctx: &TraceContext, node: u64) -> Predecessors {
    let trace = ctx.trace;
    let mut found = Predecessors::default();
    let mut stack: Vec<(u64, u32)> = ctx
        .dag
        .preds_of(trace, node)
        .iter()
        .map(|&p| (p, 0))
        .collect();
    let mut seen = HashSet::new();
    while let Some((id, depth)) = stack.pop() {
        if !seen.insert(id) || depth > 32 {
            continue;
        }
        let Some(n) = ctx.dag.node(trace, id) else {
            continue;
        };
        let walk_on = match n.node_type {
            NodeType::Kernel => {
                found.kernels.push(id);
                false
            }
            NodeType::Memcpy | NodeType::Memset => {
                found.memory.push((id, n.node_type));
                false
            }
            NodeType::EventWait => {
                if n.external {
                    found.external_wait.get_or_insert(id);
                }
                true
            }
            NodeType::Host => {
                found.host.get_or_insert(id);
                true
            }
            _ => true,
        };
        if walk_on {
            stack.extend(ctx.dag.preds_of(trace, id).iter().map(|&p| (p, depth + 1)));
        }
    }
    found
}

/// The explicit event-record node that pairs with an external wait: same graph, same library
/// call.
fn paired_record_node(ctx: &TraceContext, wait: &crate::trace::GraphNode) -> Option<u64> {
    ctx.dag
        .graph_nodes(ctx.trace, wait.graph)
        .filter(|n| {
            n.node_type == NodeType::EventRecord
                && n.external
                && n.library_call == wait.library_call
        })
        .map(|n| n.id)
        .min_by_key(|&id| id.abs_diff(wait.id))
}

/// The node-level part of a graphed cause (external wait or host node), cached per node.
fn node_cause(ctx: &TraceContext, preds: &Predecessors) -> Option<Cause> {
    let trace = ctx.trace;
    let name = |id: Option<u32>| id.map(|s| trace.str(s).to_owned());
    if let Some(wait) = preds.external_wait.and_then(|id| ctx.dag.node(trace, id)) {
        return Some(Cause::ExternalEventWait(Box::new(ExternalWait {
            wait_node: wait.id,
            record_node: paired_record_node(ctx, wait),
            created_by: name(wait.created_by),
            library_call: name(wait.library_call),
            confidence: if trace.graph.inferred {
                Confidence::Likely
            } else {
                Confidence::Sure
            },
        })));
    }
    let host = preds.host.and_then(|id| ctx.dag.node(trace, id))?;
    Some(Cause::HostNode(Box::new(HostNodeEvidence {
        node: host.id,
        library_call: name(host.library_call),
    })))
}

/// Leading gap of a replay: host-bound when the launch call had not returned (within the
/// slack) when the device went idle.
fn graph_launch_cause(
    ctx: &TraceContext,
    op: &Op,
    gap_start: u64,
    first_launch: bool,
    options: &AnalysisOptions,
) -> Cause {
    match ctx.launches.call(op.corr) {
        Some((start, end, _)) if end + options.launch_slack_ns > gap_start => {
            Cause::GraphLaunchHostBound {
                launch_call_ns: end - start,
                first_launch,
            }
        }
        _ => Cause::GraphLaunch,
    }
}

fn graphed_cause(
    ctx: &TraceContext,
    ops: &[Op],
    step_ops: &[usize],
    after: usize,
    before: Option<usize>,
    leading: bool,
    launch: impl Fn() -> Cause,
) -> Cause {
    let op = &ops[after];
    if ctx.dag.node(ctx.trace, op.node).is_none() {
        // No DAG for this node (e.g. an imported trace): only the launch boundary is certain.
        return if leading {
            launch()
        } else {
            Cause::Unattributed
        };
    }
    let mut cache = ctx
        .node_causes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (preds, cause) = cache.entry(op.node).or_insert_with(|| {
        let preds = walk_predecessors(ctx, op.node);
        let cause = node_cause(ctx, &preds);
        (preds, cause)
    });
    if let Some(cause) = cause {
        return cause.clone();
    }
    let in_step = |node: u64| step_ops.iter().any(|&i| ops[i].node == node);
    if let Some(&(node, node_type)) = preds.memory.iter().find(|m| !in_step(m.0)) {
        return Cause::MemoryNode { node, node_type };
    }
    if leading || (preds.kernels.is_empty() && preds.memory.is_empty()) {
        return launch();
    }
    if let Some(b) = before.map(|b| &ops[b])
        && b.stream != op.stream
        && (preds.kernels.contains(&b.node) || preds.memory.iter().any(|m| m.0 == b.node))
    {
        return Cause::CrossStreamJoin {
            from_stream: b.stream,
        };
    }
    Cause::GraphDependency
}

fn eager_cause(
    ctx: &TraceContext,
    ops: &[Op],
    gap: (u64, u64),
    after: usize,
    before: Option<usize>,
    options: &AnalysisOptions,
) -> Cause {
    let op = &ops[after];
    let Some((launch_start, launch_end, thread)) = ctx.launches.call(op.corr) else {
        return Cause::Unattributed;
    };
    // The host was blocked in a synchronisation call when the device went idle, and launched
    // this op only after it returned.
    let first_after = ctx.host_syncs.partition_point(|s| s.0 <= gap.0);
    if ctx.host_syncs[..first_after]
        .iter()
        .rev()
        .take(8)
        .any(|&(s, e)| s <= gap.0 && e >= gap.0 && launch_start >= e)
    {
        return Cause::Synchronization;
    }
    // The launch had not returned (within the slack) when the device went idle.
    if launch_end + options.launch_slack_ns > gap.0 {
        return Cause::HostLaunchBound;
    }
    // A stream wait issued on this thread between the previous op's launch and this one.
    let since = before
        .and_then(|b| ctx.launches.call(ops[b].corr))
        .map_or(0, |c| c.0);
    let lo = ctx.stream_waits.partition_point(|&w| w < (thread, since));
    let hi = ctx
        .stream_waits
        .partition_point(|&w| w < (thread, launch_start));
    if hi > lo {
        return Cause::StreamWait;
    }
    match before.map(|b| &ops[b]) {
        Some(b) if b.stream != op.stream => Cause::Unattributed,
        _ => Cause::StreamOrderLatency,
    }
}

/// What building a step needs from the steps before it: where the previous one ended, and
/// whether this one is the first launch of its executable graph.
struct StepPlan {
    index: usize,
    ops: Vec<usize>,
    /// Start of the first op, and the latest end of any.
    start: u64,
    end: u64,
    /// The executable graph of the step's ops, if graphed.
    graph_exec: Option<u32>,
    prev_end: Option<u64>,
    first_launch: bool,
}

/// The order-dependent facts of each step, in one pass; the steps can then be built in any
/// order (on several threads) with the same result. Steps in `breaks` follow an interruption
/// of their loop: like steps after a tracing resume, they have no period.
fn plan_steps(
    ctx: &mut TraceContext,
    ops: &[Op],
    steps: Vec<Vec<usize>>,
    breaks: &[usize],
) -> Vec<StepPlan> {
    let mut prev_end = None;
    let mut resumes: Vec<u64> = ctx
        .trace
        .metadata
        .sampling
        .as_ref()
        .map_or_else(Vec::new, |s| s.resumed_at.clone());
    resumes.sort_unstable();
    let mut prev_launch = None;
    steps
        .into_iter()
        .enumerate()
        .map(|(index, step_ops)| {
            let start = ops[step_ops[0]].start;
            let end = step_ops.iter().map(|&i| ops[i].end).max().unwrap_or(start);
            let graph_exec = step_ops.iter().map(|&i| ops[i].graph).find(|&g| g != 0);
            // Where tracing resumed between this step's launch and the previous one's, untraced
            // steps ran between them: no period, and no gap reaching back to the previous one.
            let launch = ctx
                .launches
                .call(ops[step_ops[0]].corr)
                .map_or(start, |c| c.0);
            if let Some(before) = prev_launch.replace(launch)
                && resumed_between(&resumes, before, launch)
            {
                prev_end = None;
            }
            if breaks.contains(&index) {
                prev_end = None;
            }
            let plan = StepPlan {
                index,
                ops: step_ops,
                start,
                end,
                graph_exec,
                prev_end,
                first_launch: graph_exec.is_some_and(|g| ctx.launched_execs.insert(g)),
            };
            prev_end = Some(end);
            plan
        })
        .collect()
}

/// Whether a time in `resumes` (sorted) lies in `(after, until]`.
fn resumed_between(resumes: &[u64], after: u64, until: u64) -> bool {
    let i = resumes.partition_point(|&r| r <= after);
    resumes.get(i).is_some_and(|&r| r <= until)
}

/// Builds one step: window, gaps with causes, busy and idle time.
fn build_step(
    ctx: &TraceContext,
    timeline: &TraceTimeline,
    plan: StepPlan,
    options: &AnalysisOptions,
) -> Step {
    let StepPlan {
        index,
        ops: ops_idx,
        start,
        end,
        graph_exec,
        prev_end,
        first_launch,
    } = plan;
    let ops = &timeline.ops;
    let regime = if graph_exec.is_some() {
        Regime::Graphed
    } else {
        Regime::Eager
    };
    let window_start = prev_end.map_or(start, |p| p.min(end));
    // The last op of the previous step ends where the window starts.
    let mut covered_until = window_start;
    let mut last_ender: Option<usize> = None;
    let mut gaps = Vec::new();
    for (pos, &i) in ops_idx.iter().enumerate() {
        let op = &ops[i];
        let op_start = op.start.max(window_start);
        if op_start > covered_until {
            let leading = pos == 0;
            let cause = if op.graph != 0 {
                graphed_cause(ctx, ops, &ops_idx, i, last_ender, leading, || {
                    graph_launch_cause(ctx, op, covered_until, first_launch, options)
                })
            } else {
                eager_cause(ctx, ops, (covered_until, op_start), i, last_ender, options)
            };
            gaps.push(Gap {
                start: covered_until,
                end: op_start,
                stream: op.stream,
                before: last_ender,
                after: i,
                cause,
            });
        }
        let op_end = op.end.max(window_start);
        if op_end >= covered_until {
            covered_until = op_end;
            last_ender = Some(i);
        }
    }
    let idle: u64 = gaps.iter().map(Gap::len).sum();
    Step {
        index,
        regime,
        graph_exec,
        first_launch,
        start,
        end,
        window_start,
        ops: ops_idx,
        gaps,
        busy: (end - window_start) - idle,
        idle,
        period: prev_end.map(|_| end - window_start),
    }
}

/// Analyses one cell of one trace.
pub fn analyze_cell(
    trace_index: usize,
    ctx: &mut TraceContext,
    timeline: &TraceTimeline,
    mut cell: CellSteps,
    options: &AnalysisOptions,
) -> CellAnalysis {
    let trace = ctx.trace;
    let meta_cell = cell.cell.and_then(|c| trace.metadata.cells.get(c));
    let plans = plan_steps(
        ctx,
        &timeline.ops,
        std::mem::take(&mut cell.steps),
        &cell.breaks,
    );
    let ctx: &TraceContext = ctx;
    let steps = crate::parallel_map(plans, |plan| build_step(ctx, timeline, plan, options));
    let figures_from = figure_steps(&steps);
    let period = Stat::of_ns(figures_from.iter().filter_map(|s| s.period));
    let in_order: Vec<f64> = figures_from
        .iter()
        .filter_map(|s| s.period.map(|p| p as f64))
        .collect();
    let period_block_medians = super::stats::block_medians(&in_order, 10);
    let period_runs = Stat::of(&mut period_block_medians.clone());
    let first_launch_period = Stat::of_ns(
        steps
            .iter()
            .filter(|s| s.first_launch)
            .filter_map(|s| s.period),
    );
    let with_period: Vec<&Step> = figures_from
        .iter()
        .copied()
        .filter(|s| s.period.is_some())
        .collect();
    let busy = Stat::of_ns(with_period.iter().map(|s| s.busy));
    let idle = Stat::of_ns(with_period.iter().map(|s| s.idle));
    let idle_by_cause = idle_by_cause(&with_period);
    let host_bound_launch_calls = Stat::of_ns(figures_from.iter().flat_map(|s| {
        s.gaps.iter().filter_map(|g| match g.cause {
            Cause::GraphLaunchHostBound { launch_call_ns, .. } => Some(launch_call_ns),
            _ => None,
        })
    }));
    let host_before_launch = host_before_launch(&with_period);
    let mut sequence = canonical_sequence(ctx, timeline, &with_period);
    let host_time = ctx.host_samples.as_ref().and_then(|index| {
        add_to_sequence(
            index,
            trace,
            &ctx.launches,
            &timeline.ops,
            &with_period,
            &mut sequence,
        )
    });
    let mut observed = observe(ctx, &steps);
    observed.compiled_without_graphs = cell.compiled_without_graphs;
    let (label, requested) = label_and_request(trace, &cell, meta_cell);
    let tracer_share = tracer_share(ctx, &cell);
    let mismatches = mismatches(&requested, &observed);
    let mut event_periods = meta_cell
        .map(|c| c.event_periods_ns.clone())
        .unwrap_or_default();
    CellAnalysis {
        trace: trace_index,
        label,
        requested,
        observed,
        mismatches,
        steps,
        period,
        first_launch_period,
        period_runs,
        period_block_medians,
        event_period: Stat::of(&mut event_periods),
        busy,
        idle,
        idle_by_cause,
        host_bound_launch_calls,
        host_before_launch,
        host_time,
        sequence,
        reference: meta_cell.map(|c| c.reference.clone()).unwrap_or_default(),
        sampled: super::cell::Sampled::of_cell(
            trace.metadata.sampling.as_ref(),
            cell.graph_group.as_ref(),
        ),
        tracer_share,
        graph_group: cell.graph_group,
        found: cell.found,
        untraced_period: None,
        untraced_window_medians: Vec::new(),
        first_launches_inflated_by_cupti: false,
        cupti_launch_cost: None,
    }
}

/// The steps a cell's figures come from: all but a graph's first launches, unless that leaves
/// none.
fn figure_steps(steps: &[Step]) -> Vec<&Step> {
    let steady: Vec<&Step> = steps.iter().filter(|s| !s.first_launch).collect();
    if steady.is_empty() {
        steps.iter().collect()
    } else {
        steady
    }
}

/// Per step, the host's time before its launches in the gaps it held the device idle: a host
/// launch-bound gap whole, a host-bound graph launch's less its launch call; `None` when no
/// step has such a gap.
fn host_before_launch(steps: &[&Step]) -> Option<Stat> {
    let mut any = false;
    let per_step = steps.iter().map(|s| {
        s.gaps
            .iter()
            .filter_map(|g| match g.cause {
                Cause::GraphLaunchHostBound { launch_call_ns, .. } => {
                    Some(g.len().saturating_sub(launch_call_ns))
                }
                Cause::HostLaunchBound => Some(g.len()),
                _ => None,
            })
            .inspect(|_| any = true)
            .sum::<u64>()
    });
    let stat = Stat::of_ns(per_step.collect::<Vec<_>>());
    stat.filter(|_| any)
}

/// A cell's label and requested values: its graph's or loop's, else the recorded cell's, with
/// the regime of a marked cell split by what its steps ran and a compiled phase that made no
/// graphs said.
fn label_and_request(
    trace: &Trace,
    cell: &CellSteps,
    meta_cell: Option<&crate::trace::Cell>,
) -> (
    String,
    std::collections::BTreeMap<String, serde_json::Value>,
) {
    let mut requested = meta_cell.map(|c| c.requested.clone()).unwrap_or_default();
    let mut label = match (&cell.graph_group, &cell.found) {
        (Some(g), _) => g.label(),
        (None, Some(f)) => f.label(),
        (None, None) => meta_cell.map_or_else(
            || "all steps".to_owned(),
            |c| recorded_label(trace, &c.label),
        ),
    };
    if let Some(regime) = cell.regime_split {
        // One marked cell held both regimes; each half is labelled by what was observed.
        label = format!("{label} ({})", regime.label());
        requested.insert("regime".into(), regime.label().into());
    }
    if cell.compiled_without_graphs {
        label = format!("{label} (compiled, no graphs)");
    }
    (label, requested)
}

/// What tracing added to the cell's steps: a replayed graph's from its launches, a marked
/// cell's from its untraced steps (each half of a split range from its own).
fn tracer_share(ctx: &TraceContext, cell: &CellSteps) -> Option<super::tracer_share::TracerShare> {
    match &cell.graph_group {
        Some(g) if g.launch == super::steps::GraphLaunch::Replay => g
            .execs
            .first()
            .and_then(|&exec| super::tracer_share::of_graph_replays(ctx.trace, exec)),
        Some(_) => None,
        None => {
            use super::tracer_share::StepsOf;
            let steps = match cell.regime_split {
                Some(super::model::Regime::Graphed) => StepsOf::Graphed,
                Some(super::model::Regime::Eager) => StepsOf::Ungraphed,
                None => StepsOf::All,
            };
            cell.cell
                .and_then(|c| ctx.tracer_share_of_marked_cell(c, steps))
        }
    }
}

fn idle_by_cause(steps: &[&Step]) -> Vec<CauseTotal> {
    let mut per_kind: FxHashMap<CauseKind, (Vec<f64>, String)> = FxHashMap::default();
    for (i, step) in steps.iter().enumerate() {
        for gap in &step.gaps {
            let kind = gap.cause.kind();
            let entry = per_kind
                .entry(kind)
                // The first step's gap names the example, as the step sequence's causes do,
                // so that a fresh graph per step (new node ids each) cites one node everywhere.
                .or_insert_with(|| (vec![0.0; steps.len()], gap.cause.label()));
            entry.0[i] += gap.len() as f64;
        }
    }
    let mut totals: Vec<CauseTotal> = per_kind
        .into_iter()
        .filter_map(|(cause, (mut v, example))| {
            Some(CauseTotal {
                cause,
                example,
                per_step: Stat::of(&mut v)?,
            })
        })
        .collect();
    totals.sort_by(|a, b| {
        b.per_step
            .median
            .total_cmp(&a.per_step.median)
            .then(a.cause.cmp(&b.cause))
    });
    totals
}

/// The most common op-name sequence among the steps, with per-position figures over every
/// step (steps with another sequence are aligned to it first).
fn canonical_sequence(
    ctx: &TraceContext,
    timeline: &TraceTimeline,
    steps: &[&Step],
) -> Vec<SequenceEntry> {
    let trace = ctx.trace;
    let ops = &timeline.ops;
    let seqs: Vec<Vec<u32>> = steps
        .iter()
        .map(|s| s.ops.iter().map(|&i| ops[i].name).collect())
        .collect();
    // Most frequent sequence; ties go to the one seen first.
    let mut counts: FxHashMap<&[u32], (usize, usize)> = FxHashMap::default();
    for (i, seq) in seqs.iter().enumerate() {
        counts.entry(seq.as_slice()).or_insert((0, i)).0 += 1;
    }
    let Some(representative_step) = counts
        .values()
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|&(_, first)| first)
    else {
        return Vec::new();
    };
    let canonical = seqs[representative_step].clone();
    let len = canonical.len();
    let n = steps.len();
    // Empty rows (a step count of 0) make no samples; then there is nothing to report.
    if n == 0 {
        return Vec::new();
    }
    // Threads only for a sequence with many samples (a thread costs more than a few blocks).
    let threads = if len * n >= PARALLEL_SEQUENCE_SAMPLES {
        crate::worker_threads()
    } else {
        1
    };
    // Per step: how its ops match the canonical positions, and the position of the op each
    // gap ends at.
    let columns: Vec<Column> =
        crate::parallel_map_on(threads, steps.iter().zip(&seqs).collect(), |(s, seq)| {
            Column::of(s, seq, &canonical)
        });
    // The positions in blocks, each block filled and summarised on its own (rows of samples
    // that stay small and lie together), on the threads there are.
    let blocks: Vec<std::ops::Range<usize>> = (0..len)
        .step_by(SEQUENCE_BLOCK)
        .map(|p0| p0..len.min(p0 + SEQUENCE_BLOCK))
        .collect();
    let entry = |p: usize, durations: &mut [f64], gaps_before: &mut [f64], causes: &[CauseSeen]| {
        let representative = &ops[steps[representative_step].ops[p]];
        let (gap_cause, gap_cause_label) = causes
            .iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(k, _, l)| (*k, l.clone()))
            .unwrap_or((CauseKind::Unattributed, "no gap".to_owned()));
        Some(SequenceEntry {
            name: trace.str(canonical[p]).to_owned(),
            kind: representative.kind,
            duration: Stat::of(samples(durations))?,
            gap_before: Stat::of(samples(gaps_before))?,
            gap_cause,
            gap_cause_label,
            library_call: ctx.library_call_of(representative),
            provenance: ctx.provenance.of(trace, &ctx.launches, representative),
            host_time: None,
        })
    };
    let block = |rows: std::ops::Range<usize>| {
        let p0 = rows.start;
        let (mut durations, mut gaps_before, causes) = block_samples(rows, steps, &columns, ops);
        durations
            .chunks_mut(n)
            .zip(gaps_before.chunks_mut(n))
            .zip(&causes)
            .enumerate()
            .map(|(k, ((durations, gaps_before), causes))| {
                entry(p0 + k, durations, gaps_before, causes)
            })
            .collect::<Vec<_>>()
    };
    crate::parallel_map_on(threads, blocks, block)
        .into_iter()
        .flatten()
        .flatten()
        .collect()
}

/// One block of canonical positions (`rows`), as samples: a row per position, a column per
/// step, each op's duration and the gap before it (NaN: the step had no op matched to that
/// position), and the causes seen before each position with their counts.
fn block_samples(
    rows: std::ops::Range<usize>,
    steps: &[&Step],
    columns: &[Column],
    ops: &[Op],
) -> (Vec<f64>, Vec<f64>, Vec<Vec<CauseSeen>>) {
    // One row per position of the block, one column per step. NaN: the step had no op
    // matched to that position.
    let (p0, width, n) = (rows.start, rows.len(), steps.len());
    let mut durations = vec![f64::NAN; width * n];
    let mut gaps_before = vec![f64::NAN; width * n];
    let mut causes: Vec<Vec<CauseSeen>> = vec![Vec::new(); width];
    for (col, (s, c)) in steps.iter().zip(columns).enumerate() {
        let matched: &[(usize, usize)] = match &c.pairs {
            Some(pairs) => {
                let from = pairs.partition_point(|&(p, _)| p < rows.start);
                let to = pairs.partition_point(|&(p, _)| p < rows.end);
                &pairs[from..to]
            }
            None => &[],
        };
        let identity = c.pairs.is_none();
        let pairs = identity
            .then(|| rows.clone().map(|p| (p, p)))
            .into_iter()
            .flatten()
            .chain(matched.iter().copied());
        let first_q = if identity {
            rows.start
        } else {
            matched.first().map_or(usize::MAX, |m| m.1)
        };
        let mut g = c.gap_q.partition_point(|&q| q < first_q);
        for (p, q) in pairs {
            let op = &ops[s.ops[q]];
            let at = (p - p0) * n + col;
            durations[at] = (op.end - op.start) as f64;
            while g < c.gap_q.len() && c.gap_q[g] < q {
                g += 1;
            }
            // A later gap ending at the same op stands in for an earlier one.
            let mut gap = None;
            while g < c.gap_q.len() && c.gap_q[g] == q {
                gap = Some(&s.gaps[g]);
                g += 1;
            }
            match gap {
                Some(gap) => {
                    gaps_before[at] = gap.len() as f64;
                    let kind = gap.cause.kind();
                    let seen = &mut causes[p - p0];
                    match seen.iter_mut().find(|c| c.0 == kind) {
                        Some(c) => c.1 += 1,
                        None => seen.push((kind, 1, gap.cause.label())),
                    }
                }
                None => gaps_before[at] = 0.0,
            }
        }
    }
    (durations, gaps_before, causes)
}

/// Canonical positions summarised together (a block's samples: positions × steps).
const SEQUENCE_BLOCK: usize = 256;

/// Samples (positions × steps) from which a canonical sequence is summarised on several threads.
const PARALLEL_SEQUENCE_SAMPLES: usize = 1 << 16;

/// Gap cause kinds seen at a position: how often, and the label of the first.
type CauseSeen = (CauseKind, usize, String);

/// How one step lines up with the canonical sequence.
struct Column {
    /// The (position, op) pairs matched by alignment; `None` when the step's sequence is the
    /// canonical one (op `p` at position `p`).
    pairs: Option<Vec<(usize, usize)>>,
    /// Per gap of the step, the position in its ops of the op the gap ends at (gaps and ops
    /// are both in start order); `usize::MAX` when not found.
    gap_q: Vec<usize>,
}

impl Column {
    fn of(s: &Step, seq: &[u32], canonical: &[u32]) -> Column {
        let mut gap_q = Vec::with_capacity(s.gaps.len());
        let mut q = 0;
        for g in &s.gaps {
            while q < s.ops.len() && s.ops[q] != g.after {
                q += 1;
            }
            gap_q.push(if q < s.ops.len() { q } else { usize::MAX });
        }
        Column {
            pairs: (seq != canonical).then(|| super::lcs::lcs_pairs(canonical, seq)),
            gap_q,
        }
    }
}

/// The samples of a row (the values that are not NaN), moved to its front.
fn samples(row: &mut [f64]) -> &mut [f64] {
    let mut kept = 0;
    for i in 0..row.len() {
        if !row[i].is_nan() {
            row[kept] = row[i];
            kept += 1;
        }
    }
    &mut row[..kept]
}

/// What the DAG and records show: regime and the nodes NCCL's modes add.
fn observe(ctx: &TraceContext, steps: &[Step]) -> Observed {
    let trace = ctx.trace;
    let graphed = steps.iter().any(|s| s.regime == Regime::Graphed);
    let regime = match (steps.is_empty(), graphed) {
        (true, _) => None,
        (false, true) => Some(Regime::Graphed),
        (false, false) => Some(Regime::Eager),
    };
    let mut execs: Vec<u32> = steps.iter().filter_map(|s| s.graph_exec).collect();
    execs.sort_unstable();
    execs.dedup();
    let mut per_exec: Vec<(usize, usize, usize, bool)> = execs
        .iter()
        .map(|&g| {
            let nodes = ctx.dag.graph_nodes(trace, g);
            let (mut waits, mut records, mut hosts, mut nccl) = (0, 0, 0, false);
            for n in nodes {
                let from_nccl = n
                    .library_call
                    .is_some_and(|l| trace.str(l).starts_with("nccl"));
                match n.node_type {
                    NodeType::EventWait if n.external => {
                        waits += 1;
                        nccl |= from_nccl;
                    }
                    NodeType::EventRecord if n.external => records += 1,
                    NodeType::Host => hosts += 1,
                    _ => {}
                }
            }
            (waits, records, hosts, nccl)
        })
        .collect();
    per_exec.sort_unstable();
    let typical = per_exec.get(per_exec.len() / 2).copied();
    let has_dag = execs.iter().any(|&g| ctx.dag.by_graph.contains_key(&g));
    // Node types of one executable graph (the first): what a mode comparison can diff.
    let node_counts = super::steps::node_counts(
        execs
            .first()
            .into_iter()
            .flat_map(|&g| ctx.dag.graph_nodes(trace, g)),
    );
    // "mode 1" / "mode 2" whatever the source, with the evidence in parentheses.
    let graph_usage_mode = match (regime, typical) {
        (Some(Regime::Graphed), Some((w, r, _, from_nccl))) if w > 0 => {
            let whose = if from_nccl {
                "from NCCL"
            } else {
                "not from NCCL"
            };
            Some(format!("2 ({} external event nodes, {whose})", w + r))
        }
        (Some(Regime::Graphed), Some(_)) if has_dag => {
            Some("1 (no external event nodes)".to_owned())
        }
        (Some(Regime::Graphed), _) => Some("unknown (no graph DAG in the trace)".to_owned()),
        _ => None,
    };
    let external_nodes_from_nccl = typical.is_some_and(|(w, _, _, nccl)| w > 0 && nccl);
    let (w, r, h, _) = typical.unwrap_or_default();
    Observed {
        regime,
        external_wait_nodes: w,
        external_record_nodes: r,
        host_nodes: h,
        graph_usage_mode,
        external_nodes_from_nccl,
        node_counts,
        ..Observed::default() // coverage: filled once every cell of the trace is known
    }
}

fn mismatches(
    requested: &std::collections::BTreeMap<String, serde_json::Value>,
    observed: &Observed,
) -> Vec<String> {
    let mut out = Vec::new();
    let observed_regime = observed.regime.map(Regime::label);
    if let (Some(asked), Some(seen)) = (
        requested.get("regime").and_then(|v| v.as_str()),
        observed_regime,
    ) && asked != seen
    {
        out.push(format!("asked for {asked}, observed {seen}"));
    }
    if observed.regime == Some(Regime::Graphed)
        && let Some(mode) = requested
            .get(crate::trace::GRAPH_USAGE_MODE_KEY)
            .and_then(|v| v.as_u64())
    {
        let mixing = observed.external_wait_nodes > 0;
        let ranks = requested.get("ranks").and_then(|v| v.as_u64()).unwrap_or(2);
        let backend = requested
            .get("backend")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if mode == 2 && !mixing {
            let why = if backend == "nccl" && ranks == 1 {
                " (expected: NCCL's one-rank shortcut builds no strong-stream nodes)"
            } else {
                ""
            };
            out.push(format!(
                "asked for graph usage mode 2, but the graph has no external event-wait node{why}"
            ));
        } else if mode != 2 && mixing {
            out.push(format!(
                "asked for graph usage mode {mode}, but the graph has {} external event-wait node(s): mode 2 behaviour",
                observed.external_wait_nodes
            ));
        }
    }
    out
}

/// Where a step's gaps sit in a cell's op sequence: the position of each gap's op (matched by
/// name and occurrence: the k-th op of that name in the step is the sequence's k-th of it),
/// `None` for an op the sequence does not have.
pub struct Positions<'s> {
    position: FxHashMap<(&'s str, usize), usize>,
}

impl<'s> Positions<'s> {
    pub fn new(sequence: &'s [SequenceEntry]) -> Positions<'s> {
        let mut position = FxHashMap::default();
        let mut seen: FxHashMap<&str, usize> = FxHashMap::default();
        for (p, e) in sequence.iter().enumerate() {
            let k = seen.entry(e.name.as_str()).or_default();
            position.insert((e.name.as_str(), *k), p);
            *k += 1;
        }
        Positions { position }
    }

    /// The position of each of `step`'s gaps.
    pub fn of_gaps(&self, trace: &Trace, ops: &[Op], step: &Step) -> Vec<Option<usize>> {
        let mut seen: FxHashMap<u32, usize> = FxHashMap::default();
        let mut occurrence: FxHashMap<usize, usize> = FxHashMap::default();
        for &i in &step.ops {
            let k = seen.entry(ops[i].name).or_default();
            occurrence.insert(i, *k);
            *k += 1;
        }
        step.gaps
            .iter()
            .map(|g| {
                let k = *occurrence.get(&g.after)?;
                let name = trace.str(ops.get(g.after)?.name);
                self.position.get(&(name, k)).copied()
            })
            .collect()
    }
}

/// Sets [`SequenceEntry::host_time`] of each position of `sequence` whose gap is host-bound:
/// the host-bound gaps before the op at that position in `steps` ([`Positions`]), each on the
/// thread of its op's launch call. Returns the host time of every host-bound gap of the steps
/// together ([`host_samples::CELL_TOP_CODES`] codes), `None` when they have none.
fn add_to_sequence(
    index: &host_samples::SampleIndex,
    trace: &Trace,
    launches: &LaunchIndex,
    ops: &[Op],
    steps: &[&Step],
    sequence: &mut [SequenceEntry],
) -> Option<host_samples::HostTime> {
    let mut gaps: Vec<Vec<(u64, u64, u32)>> = vec![Vec::new(); sequence.len()];
    let mut per_step = Vec::with_capacity(steps.len());
    let positions = Positions::new(sequence);
    for step in steps {
        let mut in_step = 0;
        for (g, p) in step.gaps.iter().zip(positions.of_gaps(trace, ops, step)) {
            let thread = launches.call(ops[g.after].corr).map(|c| c.2);
            if let (Some(p), Some(thread), true) =
                (p, thread, host_samples::is_host_bound(g.cause.kind()))
            {
                gaps[p].push((g.start, g.end, thread));
                in_step += g.len();
            }
        }
        per_step.push(in_step);
    }
    for (entry, gaps) in sequence.iter_mut().zip(&gaps) {
        if host_samples::is_host_bound(entry.gap_cause) {
            entry.host_time = Some(index.attribute(gaps));
        }
    }
    let all = gaps.concat();
    (!all.is_empty()).then(|| host_samples::HostTime {
        per_step: Stat::of_ns(per_step),
        ..index.attribute_top(&all, host_samples::CELL_TOP_CODES)
    })
}

#[cfg(test)]
mod tests {
    use super::program_name;

    #[test]
    fn program_name_is_the_script_else_the_executable() {
        for (command, name) in [
            (
                "/opt/venv/bin/python -u /w/benches/../examples/torch_graphs.py --n 5",
                "torch_graphs.py",
            ),
            (
                "python -m torch.distributed.run --nproc-per-node 2 serve.py",
                "serve.py",
            ),
            ("torchrun --nproc-per-node 8 launch.sh", "launch.sh"),
            ("./build/my_app --scale 1.5", "my_app"),
            ("bench", "bench"),
        ] {
            assert_eq!(program_name(command), name, "{command}");
        }
    }
}
