//! The graph DAG as the resource callbacks report it (safe code; the callbacks in
//! `callbacks.rs` turn CUDA handles into ids and call in here).
#![forbid(unsafe_code)]

use crate::trace::{GraphDag, GraphEdge, GraphExec, GraphNode, NodeType, StrId};
use std::collections::{HashMap, HashSet};

/// What the creating thread was doing when a node was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Creation {
    /// Outermost CUDA API call active on the thread.
    pub created_by: Option<StrId>,
    /// Innermost open LibraryCall marker on the thread.
    pub library_call: Option<StrId>,
    /// The outermost frame of a known library on the thread's stack (see
    /// [`crate::trace::GraphNode::library_frame`]).
    pub library_frame: Option<StrId>,
    /// The creating thread's Python frames (see [`crate::trace::GraphNode::python_stack`]).
    pub python_stack: Option<StrId>,
    /// An active `cudaStreamWaitEvent`/`cuStreamWaitEvent` was called with the external flag.
    pub wait_external: bool,
    /// An active `cudaEventRecordWithFlags`/`cuEventRecordWithFlags` had the external flag.
    pub record_external: bool,
    /// An active call adds nodes explicitly (`cudaGraphAdd*`, `cuGraphAdd*`).
    pub explicit_add: bool,
    /// When (CUPTI clock, ns) and on which thread (system id) the node was made: joined to
    /// the NVTX ranges of the program's own libraries (e.g. NCCL's `ncclAllGather`) once the
    /// recording ends, for nodes no library-call marker of ours enclosed.
    pub at: u64,
    pub thread: u32,
}

impl Creation {
    /// A node with only the creation's time and thread set (none when the time is unknown).
    fn when(&self) -> GraphNode {
        let known = self.at != 0;
        GraphNode {
            created_at: known.then_some(self.at),
            created_thread: known.then_some(self.thread),
            ..GraphNode::default()
        }
    }

    /// Whether a node of `node_type` made in these circumstances is "external" in the trace
    /// schema's sense: an event wait made with `cudaEventWaitExternal` (or added explicitly to
    /// a graph), an event record added explicitly or recorded with `cudaEventRecordExternal`.
    pub fn external(&self, node_type: NodeType) -> bool {
        match node_type {
            NodeType::EventWait => self.wait_external || self.explicit_add,
            NodeType::EventRecord => self.record_external || self.explicit_add,
            _ => false,
        }
    }
}

/// Graph nodes, edges and executable graphs seen so far.
#[derive(Debug, Default, Clone)]
pub(crate) struct GraphTable {
    nodes: HashMap<u64, GraphNode>,
    edges: Vec<GraphEdge>,
    execs: Vec<GraphExec>,
}

impl GraphTable {
    /// GRAPHNODE_CREATED. The first report of an id wins.
    pub fn node_created(&mut self, id: u64, graph: u32, node_type: NodeType, how: Creation) {
        self.nodes.entry(id).or_insert(GraphNode {
            id,
            graph,
            node_type,
            external: how.external(node_type),
            created_by: how.created_by,
            library_call: how.library_call,
            cloned_from: None,
            library_frame: how.library_frame,
            python_stack: how.python_stack,
            ..how.when()
        });
    }

    /// Whether `id` is known (to skip asking the driver for a clone's type).
    pub fn get(&self, id: u64) -> Option<&GraphNode> {
        self.nodes.get(&id)
    }

    /// GRAPHNODE_CLONED: `id` in `graph` is a copy of `template`. Type, external flag and
    /// provenance come from the template when it is known, else from `fallback_type`/`how`.
    pub fn node_cloned(
        &mut self,
        id: u64,
        graph: u32,
        template: u64,
        fallback_type: NodeType,
        how: Creation,
    ) {
        // Instantiation may report the clone as created before it reports the clone: the
        // clone record carries the template's provenance, so it replaces that entry.
        let node = match self.nodes.get(&template) {
            Some(t) => GraphNode {
                id,
                graph,
                node_type: t.node_type,
                external: t.external,
                created_by: t.created_by,
                library_call: t.library_call,
                cloned_from: Some(template),
                library_frame: t.library_frame,
                python_stack: t.python_stack,
                ..how.when()
            },
            None => GraphNode {
                id,
                graph,
                node_type: fallback_type,
                external: how.external(fallback_type),
                created_by: how.created_by,
                library_call: how.library_call,
                cloned_from: Some(template),
                library_frame: how.library_frame,
                python_stack: how.python_stack,
                ..how.when()
            },
        };
        if self.nodes.contains_key(&template) {
            self.nodes.insert(id, node);
        } else {
            self.nodes
                .entry(id)
                .and_modify(|n| n.cloned_from = Some(template))
                .or_insert(node);
        }
    }

    /// GRAPHNODE_DEPENDENCY_CREATED: `node` depends on `dependency`.
    pub fn dependency_created(&mut self, node: u64, dependency: u64) {
        self.edges.push(GraphEdge {
            from: dependency,
            to: node,
        });
    }

    /// GRAPHEXEC_CREATED.
    pub fn exec_created(&mut self, id: u32, template: u32) {
        self.execs.push(GraphExec { id, template });
    }

    /// The DAG for the trace: nodes sorted by id, edges with at least one known end (edges of
    /// internal graphs whose nodes were never reported are dropped), deduplicated and sorted.
    /// Nodes made outside our library-call markers take the innermost of `library_ranges`
    /// (thread, start, end, name) that encloses their creation on their thread; clones follow
    /// their templates.
    pub fn into_dag(self, ranges: &crate::trace::HostRanges) -> GraphDag {
        let nodes: Vec<GraphNode> = self.nodes.into_values().collect();
        let known: HashSet<u64> = nodes.iter().map(|n| n.id).collect();
        let edges: Vec<GraphEdge> = self
            .edges
            .into_iter()
            .filter(|e| known.contains(&e.from) || known.contains(&e.to))
            .collect();
        GraphDag::new(nodes, edges, self.execs, false, ranges)
    }

    /// How many nodes, edges and executable graphs it holds (grows with every change).
    pub fn size(&self) -> (usize, usize, usize) {
        (self.nodes.len(), self.edges.len(), self.execs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_rules() {
        let wait = Creation {
            wait_external: true,
            ..Default::default()
        };
        assert!(wait.external(NodeType::EventWait));
        assert!(!wait.external(NodeType::EventRecord));
        assert!(!wait.external(NodeType::Kernel));
        let plain = Creation::default();
        assert!(!plain.external(NodeType::EventWait));
        assert!(!plain.external(NodeType::EventRecord));
        let added = Creation {
            explicit_add: true,
            ..Default::default()
        };
        assert!(added.external(NodeType::EventRecord));
        assert!(added.external(NodeType::EventWait));
        assert!(!added.external(NodeType::Host));
        let rec = Creation {
            record_external: true,
            ..Default::default()
        };
        assert!(rec.external(NodeType::EventRecord));
    }

    #[test]
    fn clones_copy_the_template_and_unknown_edges_are_dropped() {
        let mut g = GraphTable::default();
        let t_wait = (1u64 << 32) | 1;
        let t_kernel = (1u64 << 32) | 2;
        g.node_created(
            t_wait,
            1,
            NodeType::EventWait,
            Creation {
                created_by: Some(3),
                library_call: Some(4),
                wait_external: true,
                ..Default::default()
            },
        );
        g.node_created(t_kernel, 1, NodeType::Kernel, Creation::default());
        g.dependency_created(t_kernel, t_wait);
        let c_wait = (5u64 << 32) | 1;
        let c_kernel = (5u64 << 32) | 2;
        let at_instantiate = Creation {
            created_by: Some(9),
            ..Default::default()
        };
        g.node_cloned(c_wait, 5, t_wait, NodeType::Kernel, at_instantiate);
        g.node_cloned(c_kernel, 5, t_kernel, NodeType::Kernel, at_instantiate);
        g.dependency_created(c_kernel, c_wait);
        g.dependency_created(c_kernel, c_wait); // reported twice: kept once
        g.dependency_created(900, 901); // internal graph: both unknown
        g.exec_created(5, 1);
        let dag = g.into_dag(&Default::default());
        assert_eq!(dag.nodes.len(), 4);
        let clone = dag.nodes.iter().find(|n| n.id == c_wait).unwrap();
        assert_eq!(clone.node_type, NodeType::EventWait);
        assert!(clone.external);
        assert_eq!(clone.created_by, Some(3));
        assert_eq!(clone.library_call, Some(4));
        assert_eq!(clone.cloned_from, Some(t_wait));
        assert_eq!(clone.graph, 5);
        assert_eq!(
            dag.edges,
            vec![
                GraphEdge {
                    from: t_wait,
                    to: t_kernel
                },
                GraphEdge {
                    from: c_wait,
                    to: c_kernel
                },
            ]
        );
        assert_eq!(dag.execs, vec![GraphExec { id: 5, template: 1 }]);
    }

    #[test]
    fn nodes_made_inside_a_library_nvtx_range_are_tagged_with_it_and_clones_follow() {
        let mut g = GraphTable::default();
        let (wait, kernel, other_thread, ours) = (
            (1u64 << 32) | 1,
            (1u64 << 32) | 2,
            (1u64 << 32) | 3,
            (1u64 << 32) | 4,
        );
        let at = |at, thread| Creation {
            at,
            thread,
            ..Default::default()
        };
        g.node_created(wait, 1, NodeType::EventWait, at(150, 7));
        g.node_created(kernel, 1, NodeType::Kernel, at(500, 7));
        g.node_created(other_thread, 1, NodeType::Kernel, at(150, 8));
        // Inside a library-call marker of ours: that tag stays.
        g.node_created(
            ours,
            1,
            NodeType::Kernel,
            Creation {
                library_call: Some(42),
                ..at(160, 7)
            },
        );
        g.node_cloned(
            (5u64 << 32) | 1,
            5,
            wait,
            NodeType::Kernel,
            Creation::default(),
        );
        // Thread 7: ncclGroupEnd (10) encloses ncclAllGather (11) around t = 150.
        let ranges = crate::trace::HostRanges::new([
            (7, 100, 300, 10),
            (7, 140, 200, 11),
            (8, 400, 600, 12),
        ]);
        let dag = g.into_dag(&ranges);
        let tag = |id: u64| dag.nodes.iter().find(|n| n.id == id).unwrap().library_call;
        assert_eq!(tag(wait), Some(11), "innermost enclosing range");
        assert_eq!(
            tag(kernel),
            None,
            "made after every range on its thread ended"
        );
        assert_eq!(
            tag(other_thread),
            None,
            "ranges of other threads do not count"
        );
        assert_eq!(tag(ours), Some(42));
        let wait_node = dag.nodes.iter().find(|n| n.id == wait).unwrap();
        assert_eq!(
            (wait_node.created_at, wait_node.created_thread),
            (Some(150), Some(7)),
            "the creation is kept for the analysis' provenance"
        );
        let clone = dag.nodes.iter().find(|n| n.id == (5u64 << 32) | 1).unwrap();
        assert_eq!(clone.created_at, None, "its creation time was unknown");
        assert_eq!(
            tag((5u64 << 32) | 1),
            Some(11),
            "the clone follows its template"
        );
    }

    #[test]
    fn clone_of_unknown_template_uses_fallback() {
        let mut g = GraphTable::default();
        g.node_cloned(
            10,
            2,
            77,
            NodeType::Host,
            Creation {
                created_by: Some(1),
                ..Default::default()
            },
        );
        let dag = g.into_dag(&Default::default());
        assert_eq!(dag.nodes[0].node_type, NodeType::Host);
        assert_eq!(dag.nodes[0].cloned_from, Some(77));
        assert_eq!(dag.nodes[0].created_by, Some(1));
    }
}
