//! FFI leaf: stream capture, template graphs ([`Graph`]) and executable graphs ([`GraphExec`])
//! as owned handles, destroyed on drop.

use crate::workload::collective::{WorkloadError, ck};
use cudarc::driver::CudaStream;
use cudarc::driver::sys::{self, CUgraph, CUgraphExec, CUgraphNode, CUgraphNodeType};
use std::ptr::null_mut;

pub use cudarc::driver::sys::CUgraphNodeType as NodeType;

/// `cuStreamBeginCapture(stream, THREAD_LOCAL)`.
pub fn begin_capture(stream: &CudaStream) -> Result<(), WorkloadError> {
    // SAFETY: live stream.
    ck(
        unsafe {
            sys::cuStreamBeginCapture_v2(
                stream.cu_stream(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        },
        "cuStreamBeginCapture",
    )
}

/// `cuStreamEndCapture(stream)`: the call's result and the template graph it returned, if any
/// (a graph can come back with an error, and is then still ours to destroy).
pub fn end_capture(stream: &CudaStream) -> (Result<(), WorkloadError>, Option<Graph>) {
    let mut graph: CUgraph = null_mut();
    // SAFETY: live stream; an out-pointer to a local.
    let rc = unsafe { sys::cuStreamEndCapture(stream.cu_stream(), &mut graph) };
    let graph = (!graph.is_null()).then_some(Graph { graph });
    (ck(rc, "cuStreamEndCapture"), graph)
}

/// A template graph returned by a capture; destroyed on drop.
#[derive(Debug)]
pub struct Graph {
    graph: CUgraph,
}

impl Graph {
    /// `cuGraphInstantiateWithFlags(graph, 0)`.
    pub fn instantiate(&self) -> Result<GraphExec, WorkloadError> {
        let mut exec: CUgraphExec = null_mut();
        // SAFETY: live template graph; an out-pointer to a local.
        ck(
            unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, self.graph, 0) },
            "cuGraphInstantiateWithFlags",
        )?;
        Ok(GraphExec { exec })
    }

    /// The type of every node (`cuGraphGetNodes`, `cuGraphNodeGetType`).
    pub fn node_types(&self) -> Result<Vec<NodeType>, WorkloadError> {
        let mut n: usize = 0;
        // SAFETY: live graph owned by `self`; out-pointers to locals and to a buffer of `n`
        // nodes.
        unsafe {
            ck(
                sys::cuGraphGetNodes(self.graph, null_mut(), &mut n),
                "cuGraphGetNodes",
            )?;
            let mut nodes: Vec<CUgraphNode> = vec![null_mut(); n];
            ck(
                sys::cuGraphGetNodes(self.graph, nodes.as_mut_ptr(), &mut n),
                "cuGraphGetNodes",
            )?;
            nodes.truncate(n);
            let mut types = Vec::with_capacity(n);
            for node in nodes {
                let mut t = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
                ck(sys::cuGraphNodeGetType(node, &mut t), "cuGraphNodeGetType")?;
                types.push(t);
            }
            Ok(types)
        }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: the template graph cuStreamEndCapture returned, destroyed once, here. A
        // failure cannot be reported from Drop and leaks at worst.
        let _ = unsafe { sys::cuGraphDestroy(self.graph) };
    }
}

/// An executable graph; destroyed on drop.
#[derive(Debug)]
pub struct GraphExec {
    exec: CUgraphExec,
}

// SAFETY: a CUgraphExec may be launched from any thread; launches are serialised by `&self`
// users on one stream, and destruction happens once in Drop.
unsafe impl Send for GraphExec {}

impl GraphExec {
    /// `cuGraphLaunch(exec, stream)`.
    pub fn launch(&self, stream: &CudaStream) -> Result<(), WorkloadError> {
        // SAFETY: live exec and stream.
        ck(
            unsafe { sys::cuGraphLaunch(self.exec, stream.cu_stream()) },
            "cuGraphLaunch",
        )
    }

    pub fn raw(&self) -> CUgraphExec {
        self.exec
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        if !self.exec.is_null() {
            // SAFETY: created by cuGraphInstantiateWithFlags, destroyed once. A failure cannot
            // be reported from Drop and leaks at worst.
            let _ = unsafe { sys::cuGraphExecDestroy(self.exec) };
            self.exec = null_mut();
        }
    }
}
