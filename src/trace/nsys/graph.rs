//! The graph DAG of an Nsight Systems export, inferred.
//!
//! nsys records each node's creation (`CUDA_GRAPH_NODE_EVENTS`: node id, time, thread, and for
//! a clone made at instantiation a second row with the template node's id) but no node type, no external flag
//! and no edges. They are inferred here, and the DAG says so ([`GraphDag::inferred`]):
//! - the creating call: the innermost runtime API call open on the creating thread at the
//!   creation time (a driver call where no runtime call is open), joined by time, as the
//!   recorder's callbacks would have seen it;
//! - the type: from the node's own device records (a kernel, copy or memset record carries
//!   its `graphNodeId`), else from the creating call — a node made inside
//!   `cudaStreamWaitEvent` during capture is an event-wait node, and capture makes one only
//!   for an external wait (`cudaEventWaitExternal`); inside `cudaEventRecord*`, an external
//!   event-record node; so both are taken as external, which the wording "probably" carries;
//! - the edges: a captured graph's nodes in creation order, one after the other (what capture
//!   on one stream makes; a capture that forks to other streams is not told apart); a clone
//!   takes its template's type, creating call and edges;
//! - the library call: the innermost library-call NVTX range (NCCL's) open at creation.
#![forbid(unsafe_code)]

use crate::trace::{
    ApiDomain, GraphDag, GraphEdge, GraphExec, GraphNode, HostRanges, NodeType, Trace,
};
use rustc_hash::FxHashMap;

/// One row of `CUDA_GRAPH_NODE_EVENTS`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Creation {
    pub id: u64,
    pub original: Option<u64>,
    pub at: u64,
    pub thread: u32,
}

/// The node type a creating call makes during capture (or explicit construction), if known.
fn type_of_creator(name: &str) -> Option<NodeType> {
    let has = |s: &str| name.contains(s);
    Some(if has("StreamWaitEvent") || has("EventWaitNode") {
        NodeType::EventWait
    } else if has("EventRecord") {
        NodeType::EventRecord
    } else if has("LaunchHostFunc") || has("HostNode") {
        NodeType::Host
    } else if has("Memset") {
        NodeType::Memset
    } else if has("Memcpy") {
        NodeType::Memcpy
    } else if has("LaunchKernel") || has("LaunchCooperativeKernel") || has("KernelNode") {
        NodeType::Kernel
    } else {
        return None;
    })
}

/// Nodes made by graph construction calls or by instantiation have edges nsys cannot show:
/// only captured nodes are chained.
fn is_captured_by(name: &str) -> bool {
    !(name.contains("GraphAdd") || name.contains("GraphInstantiate"))
}

/// Builds `trace.graph` from the creation events, the trace's API calls, device records and
/// NVTX ranges; executable graphs already in it (graph mode's launches) are kept.
pub(super) fn infer(trace: &mut Trace, mut creations: Vec<Creation>) {
    creations.sort_unstable_by_key(|c| (c.at, c.id));
    let mut recorded: FxHashMap<u64, NodeType> = FxHashMap::default();
    for k in &trace.kernels {
        recorded.insert(k.node, NodeType::Kernel);
    }
    for (ops, t) in [
        (&trace.memcpys, NodeType::Memcpy),
        (&trace.memsets, NodeType::Memset),
    ] {
        for m in ops {
            recorded.insert(m.node, t);
        }
    }
    recorded.remove(&0);
    let calls = |domain: ApiDomain| {
        HostRanges::new(
            trace
                .api_calls
                .iter()
                .filter(move |a| a.domain == domain)
                .map(|a| (a.thread, a.start, a.end, a.name)),
        )
    };
    let (runtime, driver) = (calls(ApiDomain::Runtime), calls(ApiDomain::Driver));
    let mut nodes: Vec<GraphNode> = Vec::with_capacity(creations.len());
    let mut index: FxHashMap<u64, usize> = FxHashMap::default();
    for c in &creations {
        // A clone is reported twice: made, then made from its template (same id and time).
        if let Some(&i) = index.get(&c.id) {
            let n: &mut GraphNode = &mut nodes[i];
            n.cloned_from = n.cloned_from.or(c.original);
            continue;
        }
        let creator = runtime
            .innermost(c.thread, c.at)
            .or_else(|| driver.innermost(c.thread, c.at));
        let by_call = creator.and_then(|s| type_of_creator(trace.str(s)));
        let node_type = recorded
            .get(&c.id)
            .copied()
            .or(by_call)
            .unwrap_or(NodeType::Other);
        index.insert(c.id, nodes.len());
        nodes.push(GraphNode {
            id: c.id,
            graph: (c.id >> 32) as u32,
            node_type,
            external: is_external(node_type, by_call),
            created_by: creator,
            cloned_from: c.original,
            created_at: Some(c.at),
            created_thread: Some(c.thread),
            ..GraphNode::default()
        });
    }
    follow_templates(&mut nodes, &index, &recorded);
    let edges = chain_captures(trace, &nodes, &index);
    let execs: Vec<GraphExec> = nodes
        .iter()
        .filter_map(|n| {
            n.cloned_from.map(|t| GraphExec {
                id: n.graph,
                template: (t >> 32) as u32,
            })
        })
        .chain(std::mem::take(&mut trace.graph.execs))
        .collect();
    let ranges = HostRanges::library_calls(trace, false);
    let dag = GraphDag::new(nodes, edges, execs, true, &ranges);
    trace.graph = dag;
}

/// Event nodes made by a capturing call are external ones (see the module doc).
fn is_external(node_type: NodeType, by_call: Option<NodeType>) -> bool {
    matches!(node_type, NodeType::EventWait | NodeType::EventRecord) && by_call == Some(node_type)
}

/// A clone (made at instantiation, inside `cudaGraphInstantiate`) takes its template's creating
/// call, type (where its own records name none) and external flag.
fn follow_templates(
    nodes: &mut [GraphNode],
    index: &FxHashMap<u64, usize>,
    recorded: &FxHashMap<u64, NodeType>,
) {
    for i in 0..nodes.len() {
        let Some(template) = nodes[i].cloned_from.and_then(|t| index.get(&t)).copied() else {
            continue;
        };
        let t = nodes[template];
        let n = &mut nodes[i];
        n.created_by = t.created_by.or(n.created_by);
        if !recorded.contains_key(&n.id) {
            n.node_type = t.node_type;
        }
        n.external = t.external && n.node_type == t.node_type;
    }
}

/// Edges: each captured graph's nodes in creation order, and the same edges between the
/// clones of every executable graph made from it.
fn chain_captures(
    trace: &Trace,
    nodes: &[GraphNode],
    index: &FxHashMap<u64, usize>,
) -> Vec<GraphEdge> {
    let captured = |n: &GraphNode| {
        n.cloned_from.is_none() && n.created_by.is_none_or(|s| is_captured_by(trace.str(s)))
    };
    // Nodes are in creation order already.
    let mut last_of_graph: FxHashMap<u32, u64> = FxHashMap::default();
    let mut edges = Vec::new();
    for n in nodes.iter().filter(|n| captured(n)) {
        if let Some(prev) = last_of_graph.insert(n.graph, n.id) {
            edges.push(GraphEdge {
                from: prev,
                to: n.id,
            });
        }
    }
    // template node → its clones, per executable graph.
    let mut clones: FxHashMap<(u64, u32), u64> = FxHashMap::default();
    for n in nodes {
        if let Some(t) = n.cloned_from
            && index.contains_key(&t)
        {
            clones.insert((t, n.graph), n.id);
        }
    }
    let exec_graphs: Vec<u32> = {
        let mut g: Vec<u32> = clones.keys().map(|k| k.1).collect();
        g.sort_unstable();
        g.dedup();
        g
    };
    let template_edges = edges.len();
    for i in 0..template_edges {
        let e = edges[i];
        for &g in &exec_graphs {
            if let (Some(&from), Some(&to)) = (clones.get(&(e.from, g)), clones.get(&(e.to, g))) {
                edges.push(GraphEdge { from, to });
            }
        }
    }
    edges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creating_calls_name_node_types() {
        for (call, t) in [
            ("cudaStreamWaitEvent", Some(NodeType::EventWait)),
            ("cuStreamWaitEvent", Some(NodeType::EventWait)),
            ("cudaEventRecordWithFlags", Some(NodeType::EventRecord)),
            ("cudaGraphAddEventWaitNode", Some(NodeType::EventWait)),
            ("cudaMemcpyAsync", Some(NodeType::Memcpy)),
            ("cudaMemsetAsync", Some(NodeType::Memset)),
            ("cudaLaunchHostFunc", Some(NodeType::Host)),
            ("cudaLaunchKernel", Some(NodeType::Kernel)),
            ("cuLaunchKernelEx", Some(NodeType::Kernel)),
            ("cudaGraphInstantiateWithFlags", None),
        ] {
            assert_eq!(type_of_creator(call), t, "{call}");
        }
        assert!(is_captured_by("cudaStreamWaitEvent"));
        assert!(!is_captured_by("cudaGraphAddKernelNode"));
        assert!(!is_captured_by("cudaGraphInstantiateWithFlags"));
    }
}
