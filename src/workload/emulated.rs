//! The emulated routing all-gather: R simulated ranks gathered locally by one copy kernel
//! (`coll_gather` in `kernels/emu.cu`), wrapped in exactly the capture topology NCCL 2.30.7
//! builds around a captured collective (`src/misc/strongstream.cc`, `src/enqueue.cc`), as
//! `examples/probe/emu.cu` reproduces it:
//!
//! captured (every mode):
//! 1. `cuEventRecord(scratch, origin)`, `cuStreamWaitEvent(side, scratch)`,
//!    `cuStreamUpdateCaptureDependencies(side, NULL, 0, SET)`: the side "capture stream" joins
//!    the capture with no dependencies;
//! 2. mode 2 only: `cuStreamWaitEvent(side, serial, CU_EVENT_WAIT_EXTERNAL)` → an external
//!    event-wait node, a root of the graph;
//! 3. `cuEventRecord(scratch, side)`, `cuStreamWaitEvent(origin, scratch)`; the copy kernel on
//!    the origin stream (so it depends on the wait node in mode 2);
//! 4. `cuEventRecord(scratch, origin)`, `cuStreamWaitEvent(side, scratch)`;
//! 5. mode 2 only: `cuStreamGetCaptureInfo(side)` → `cuGraphAddEventRecordNode(serial)` after
//!    the side stream's current dependencies → `cuStreamUpdateCaptureDependencies(side,
//!    &node, 1, SET)`: an explicit event-record node, off the origin stream's path;
//! 6. at the END of the step ([`RoutingAllGather::end_of_capture_join`], before
//!    `cuStreamEndCapture`): `cuEventRecord(scratch, side)`, `cuStreamWaitEvent(origin,
//!    scratch)`.
//!
//! eager: mode 2: `cuStreamWaitEvent(origin, serial)`, copy kernel, `cuEventRecord(serial,
//! origin)`; modes 0 and 1: the copy kernel only.
//!
//! Modes 0 and 1 build the same topology (no external nodes), as in NCCL 2.30.7.
//!
//! The module also holds the step of `examples/probe/emu.cu` ([`emu_step`]), graph capture helpers and a
//! whole emu.cu cell ([`run_emu_cell`]) so `examples/emu.rs` and a recorder-enabled variant
//! share them.

use crate::workload::collective::{
    Backend, GraphUsageMode, RoutingAllGather, RunnerError, ScopeGuard, ScopeHook, ck, open_scope,
    raw_ptr, require_untracked,
};
use crate::workload::spin::EmuKernels;
use cudarc::driver::sys::{
    self, CUevent_wait_flags, CUgraph, CUgraphExec, CUgraphNode, CUgraphNodeType,
    CUstreamCaptureMode, CUstreamCaptureStatus, CUstreamUpdateCaptureDependencies_flags,
};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream};
use std::ptr::{null, null_mut};
use std::sync::Arc;

/// Library-call scope of the emulated all-gather.
pub const EMULATED_SCOPE: &str = "ncclAllGather (emulated)";
/// Scope of the end-of-step join of the emulated side stream (creates no node, only an edge).
pub const EMULATED_JOIN_SCOPE: &str = "ncclAllGather (emulated): capture-stream join";

const SET_DEPS: u32 =
    CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32;
const WAIT_DEFAULT: u32 = CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT as u32;
const WAIT_EXTERNAL: u32 = CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL as u32;

/// Shape of the emulated all-gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmulatedConfig {
    /// Simulated ranks R (≥ 1).
    pub ranks: usize,
    /// This process's slot in the gathered buffer (< R).
    pub rank: usize,
    /// Bytes each rank contributes (a multiple of 16: the kernel copies int4).
    pub bytes_per_rank: usize,
    pub mode: GraphUsageMode,
}

impl EmulatedConfig {
    pub fn validate(&self) -> Result<(), RunnerError> {
        if self.ranks == 0 || self.rank >= self.ranks {
            return Err(RunnerError::Config(format!(
                "emulated all-gather: rank {} of {} ranks",
                self.rank, self.ranks
            )));
        }
        if self.bytes_per_rank == 0 || !self.bytes_per_rank.is_multiple_of(16) {
            return Err(RunnerError::Config(format!(
                "emulated all-gather: bytes per rank must be a positive multiple of 16, not {}",
                self.bytes_per_rank
            )));
        }
        if (self.bytes_per_rank / 16)
            .checked_mul(self.ranks)
            .is_none_or(|n| n > i32::MAX as usize)
        {
            return Err(RunnerError::Config(
                "emulated all-gather: buffer too large for the copy kernel".into(),
            ));
        }
        Ok(())
    }

    /// e.g. "emulated (8 simulated ranks, mode-2 topology)".
    pub fn describe(&self) -> String {
        let topo = match self.mode {
            GraphUsageMode::Two => "mode-2 topology".to_string(),
            m => format!("mode-{m} topology, same as mode 1: no external nodes"),
        };
        let ranks = if self.ranks == 1 {
            "1 simulated rank".to_string()
        } else {
            format!("{} simulated ranks", self.ranks)
        };
        format!("emulated ({ranks}, {topo})")
    }
}

/// The emulated backend. See the module documentation for the exact topology.
pub struct EmulatedAllGather {
    ctx: Arc<CudaContext>,
    kernels: EmuKernels,
    side: Arc<CudaStream>,
    serial: CudaEvent,
    scratch: CudaEvent,
    /// R × bytes: the other simulated ranks' maps in their slots (slot `rank` unused).
    peers: CudaSlice<u8>,
    /// Where the copy kernel writes its stamps when no stamp address is set.
    own_stamp: CudaSlice<u64>,
    stamp: Option<u64>,
    cfg: EmulatedConfig,
    hook: Option<ScopeHook>,
    join_pending: bool,
}

impl EmulatedAllGather {
    /// Creates the side capture stream, the `serial` and `scratch` events (timing disabled) and
    /// the peer buffer (zeros until [`Self::set_peer_maps`]). Records `serial` once on the idle
    /// side stream, as emu.cu records it once on its idle stream before any step. The context
    /// must have cudarc event tracking off (see `collective::open_context`).
    pub fn new(
        ctx: &Arc<CudaContext>,
        kernels: &EmuKernels,
        cfg: EmulatedConfig,
    ) -> Result<EmulatedAllGather, RunnerError> {
        cfg.validate()?;
        if ctx.is_event_tracking() {
            return Err(RunnerError::Config(
                "cudarc event tracking is on: call CudaContext::disable_event_tracking() (or use collective::open_context) before creating the emulated all-gather".into(),
            ));
        }
        require_untracked(ctx)?;
        let side = ctx
            .new_stream()
            .map_err(|e| RunnerError::cuda("cuStreamCreate", e))?;
        let serial = ctx
            .new_event(None)
            .map_err(|e| RunnerError::cuda("cuEventCreate", e))?;
        let scratch = ctx
            .new_event(None)
            .map_err(|e| RunnerError::cuda("cuEventCreate", e))?;
        let peers = side
            .alloc_zeros::<u8>(cfg.ranks * cfg.bytes_per_rank)
            .map_err(|e| RunnerError::cuda("cuMemAlloc", e))?;
        let own_stamp = side
            .alloc_zeros::<u64>(2)
            .map_err(|e| RunnerError::cuda("cuMemAlloc", e))?;
        serial
            .record(&side)
            .map_err(|e| RunnerError::cuda("cuEventRecord", e))?;
        side.synchronize()
            .map_err(|e| RunnerError::cuda("cuStreamSynchronize", e))?;
        Ok(EmulatedAllGather {
            ctx: ctx.clone(),
            kernels: kernels.clone(),
            side,
            serial,
            scratch,
            peers,
            own_stamp,
            stamp: None,
            cfg,
            hook: None,
            join_pending: false,
        })
    }

    pub fn config(&self) -> EmulatedConfig {
        self.cfg
    }

    /// Switches the topology for later calls (emu.cu uses one side stream and one serial event
    /// for both modes).
    pub fn set_mode(&mut self, mode: GraphUsageMode) {
        self.cfg.mode = mode;
    }

    /// Fills the other simulated ranks' maps: `maps` is R × bytes_per_rank in gathered layout;
    /// slot `rank` is ignored (it comes from `send` at every call). Eager and synchronous.
    pub fn set_peer_maps(&mut self, maps: &[u8]) -> Result<(), RunnerError> {
        if maps.len() != self.peers.len() {
            return Err(RunnerError::Config(format!(
                "peer maps: {} bytes given, {} expected (ranks × bytes per rank)",
                maps.len(),
                self.peers.len()
            )));
        }
        self.side
            .memcpy_htod(maps, &mut self.peers)
            .map_err(|e| RunnerError::cuda("cuMemcpyHtoDAsync", e))?;
        self.side
            .synchronize()
            .map_err(|e| RunnerError::cuda("cuStreamSynchronize", e))
    }

    /// Device address of two u64 where the copy kernel writes its %globaltimer start and end
    /// (emu.cu's `p + 2`); `None`: an internal buffer.
    pub fn set_stamp(&mut self, stamp: Option<u64>) {
        self.stamp = stamp;
    }

    /// The side "capture stream" (for labelling streams in a trace).
    pub fn side_stream(&self) -> &Arc<CudaStream> {
        &self.side
    }

    /// NCCL's `serialEvent` stand-in.
    pub fn serial_event(&self) -> &CudaEvent {
        &self.serial
    }

    /// True between a captured all-gather and its [`RoutingAllGather::end_of_capture_join`].
    pub fn join_pending(&self) -> bool {
        self.join_pending
    }

    /// Forgets a pending join after a capture was abandoned (its `cuStreamEndCapture` failed or
    /// was never reached): the next capture starts clean.
    pub fn abandon_capture(&mut self) {
        self.join_pending = false;
    }

    fn launch_copy(&self, origin: &CudaStream, send: u64, recv: u64) -> Result<(), RunnerError> {
        let own = raw_ptr(&self.own_stamp, origin)?;
        let peers = raw_ptr(&self.peers, origin)?;
        self.kernels.coll_gather(
            origin,
            send,
            peers,
            recv,
            (self.cfg.bytes_per_rank / 16) as i32,
            self.cfg.ranks as i32,
            self.cfg.rank as i32,
            self.stamp.unwrap_or(own),
        )
    }

    fn captured(&mut self, origin: &CudaStream, send: u64, recv: u64) -> Result<(), RunnerError> {
        let s = origin.cu_stream();
        let c = self.side.cu_stream();
        let serial = self.serial.cu_event();
        let mixing = self.cfg.mode.is_mixing();
        // ncclStrongStreamAcquire: side stream joined with no dependencies.
        self.order(s, c)?;
        // SAFETY: plain driver calls on live handles owned by `self` or `origin`.
        unsafe {
            ck(
                sys::cuStreamUpdateCaptureDependencies_v2(c, null_mut(), null(), 0, SET_DEPS),
                "cuStreamUpdateCaptureDependencies",
            )?;
            if mixing {
                ck(
                    sys::cuStreamWaitEvent(c, serial, WAIT_EXTERNAL),
                    "cuStreamWaitEvent",
                )?;
            }
        }
        // ncclLaunchPrepare: the user stream waits on the side stream.
        self.order(c, s)?;
        self.launch_copy(origin, send, recv)?;
        // ncclLaunchFinish / ncclStrongStreamRelease.
        self.order(s, c)?;
        if mixing {
            self.record_node_on_side()?;
        }
        self.join_pending = true;
        Ok(())
    }

    /// NCCL's recordEventOnStream in a capture: an explicit event-record node on `serial`
    /// after the side stream's current dependencies; the side stream advanced to it.
    /// `after` waits for the work queued on `before` so far (record `scratch`, then wait on
    /// it): the join NCCL's strong streams make, an edge when capturing.
    fn order(&self, before: sys::CUstream, after: sys::CUstream) -> Result<(), RunnerError> {
        let scratch = self.scratch.cu_event();
        // SAFETY: live streams and an event owned by `self`.
        unsafe {
            ck(sys::cuEventRecord(scratch, before), "cuEventRecord")?;
            ck(
                sys::cuStreamWaitEvent(after, scratch, WAIT_DEFAULT),
                "cuStreamWaitEvent",
            )
        }
    }

    fn record_node_on_side(&mut self) -> Result<(), RunnerError> {
        let c = self.side.cu_stream();
        let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut graph: CUgraph = null_mut();
        let mut deps: *const CUgraphNode = null();
        let mut nd: usize = 0;
        // SAFETY: out-pointers to locals; the returned array is copied before the next call.
        let deps: Vec<CUgraphNode> = unsafe {
            ck(
                sys::cuStreamGetCaptureInfo_v3(
                    c,
                    &mut status,
                    null_mut(),
                    &mut graph,
                    &mut deps,
                    null_mut(),
                    &mut nd,
                ),
                "cuStreamGetCaptureInfo",
            )?;
            if status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE || graph.is_null() {
                return Err(RunnerError::Config(format!(
                    "emulated all-gather called with capturing=true but the side stream is not capturing ({status:?})"
                )));
            }
            if nd == 0 || deps.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(deps, nd).to_vec()
            }
        };
        let mut node: CUgraphNode = null_mut();
        // SAFETY: `graph` is the live capture graph; `node` and `deps` are valid for the calls.
        unsafe {
            ck(
                sys::cuGraphAddEventRecordNode(&mut node, graph, null(), 0, self.serial.cu_event()),
                "cuGraphAddEventRecordNode",
            )?;
            for d in &deps {
                ck(
                    sys::cuGraphAddDependencies_v2(graph, d, &node, null(), 1),
                    "cuGraphAddDependencies",
                )?;
            }
            ck(
                sys::cuStreamUpdateCaptureDependencies_v2(c, &mut node, null(), 1, SET_DEPS),
                "cuStreamUpdateCaptureDependencies",
            )?;
        }
        Ok(())
    }

    fn eager(&mut self, origin: &CudaStream, send: u64, recv: u64) -> Result<(), RunnerError> {
        let s = origin.cu_stream();
        let serial = self.serial.cu_event();
        let mixing = self.cfg.mode.is_mixing();
        if mixing {
            // SAFETY: live handles.
            unsafe {
                ck(
                    sys::cuStreamWaitEvent(s, serial, WAIT_DEFAULT),
                    "cuStreamWaitEvent",
                )?
            };
        }
        self.launch_copy(origin, send, recv)?;
        if mixing {
            // SAFETY: live handles.
            unsafe { ck(sys::cuEventRecord(serial, s), "cuEventRecord")? };
        }
        Ok(())
    }
}

impl RoutingAllGather for EmulatedAllGather {
    fn all_gather(
        &mut self,
        stream: &Arc<CudaStream>,
        send: &CudaSlice<u8>,
        recv: &mut CudaSlice<u8>,
        capturing: bool,
    ) -> Result<(), RunnerError> {
        if stream.context() != &self.ctx {
            return Err(RunnerError::Config(
                "emulated all-gather: stream belongs to another context".into(),
            ));
        }
        let bytes = self.cfg.bytes_per_rank;
        if send.len() != bytes || recv.len() < bytes * self.cfg.ranks {
            return Err(RunnerError::Config(format!(
                "emulated all-gather: send {} bytes (expected {bytes}), recv {} bytes (expected ≥ {})",
                send.len(),
                recv.len(),
                bytes * self.cfg.ranks
            )));
        }
        let send_ptr = raw_ptr(send, stream)?;
        let recv_ptr = raw_ptr(recv, stream)?;
        let _scope = open_scope(&self.hook, EMULATED_SCOPE);
        if capturing {
            self.captured(stream, send_ptr, recv_ptr)
        } else {
            self.eager(stream, send_ptr, recv_ptr)
        }
    }

    fn end_of_capture_join(&mut self, origin: &Arc<CudaStream>) -> Result<(), RunnerError> {
        if !self.join_pending {
            return Ok(());
        }
        let _scope = open_scope(&self.hook, EMULATED_JOIN_SCOPE);
        self.order(self.side.cu_stream(), origin.cu_stream())?;
        self.join_pending = false;
        Ok(())
    }

    fn set_kernel_stamp(&mut self, addr: Option<u64>) {
        self.stamp = addr;
    }

    fn describe(&self) -> String {
        self.cfg.describe()
    }

    fn scope_name(&self) -> &'static str {
        EMULATED_SCOPE
    }

    fn set_scope_hook(&mut self, hook: Option<ScopeHook>) {
        self.hook = hook;
    }

    fn ranks(&self) -> usize {
        self.cfg.ranks
    }

    fn mode(&self) -> GraphUsageMode {
        self.cfg.mode
    }

    fn backend(&self) -> Backend {
        Backend::Emulated
    }
}

// ---------------------------------------------------------------------------------------------
// Graph capture helpers.

/// Node counts of a graph, as emu.cu prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphNodeCounts {
    pub kernels: usize,
    pub event_waits: usize,
    pub event_records: usize,
    pub other: usize,
}

impl GraphNodeCounts {
    /// emu.cu's line: "mode=2 graph nodes: kernels=4 evwait=1 evrecord=1 other=0".
    pub fn line(&self, mode: GraphUsageMode) -> String {
        format!(
            "mode={mode} graph nodes: kernels={} evwait={} evrecord={} other={}",
            self.kernels, self.event_waits, self.event_records, self.other
        )
    }
}

/// Counts the nodes of `graph` by type.
///
/// # Safety
/// `graph` must be a live `CUgraph` not used concurrently by another thread.
pub unsafe fn count_graph_nodes(graph: CUgraph) -> Result<GraphNodeCounts, RunnerError> {
    let mut n: usize = 0;
    // SAFETY: `graph` is live (caller's contract); out-pointers to locals / a sized buffer.
    unsafe {
        ck(
            sys::cuGraphGetNodes(graph, null_mut(), &mut n),
            "cuGraphGetNodes",
        )?;
        let mut nodes: Vec<CUgraphNode> = vec![null_mut(); n];
        ck(
            sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n),
            "cuGraphGetNodes",
        )?;
        nodes.truncate(n);
        let mut c = GraphNodeCounts::default();
        for node in nodes {
            let mut t = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            ck(sys::cuGraphNodeGetType(node, &mut t), "cuGraphNodeGetType")?;
            match t {
                CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL => c.kernels += 1,
                CUgraphNodeType::CU_GRAPH_NODE_TYPE_WAIT_EVENT => c.event_waits += 1,
                CUgraphNodeType::CU_GRAPH_NODE_TYPE_EVENT_RECORD => c.event_records += 1,
                _ => c.other += 1,
            }
        }
        Ok(c)
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
    pub fn launch(&self, stream: &CudaStream) -> Result<(), RunnerError> {
        // SAFETY: live exec and stream.
        unsafe {
            ck(
                sys::cuGraphLaunch(self.exec, stream.cu_stream()),
                "cuGraphLaunch",
            )
        }
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

/// Captures `body` on `origin` in thread-local mode, then, in emu.cu's order: ends the capture,
/// instantiates (flags 0), counts the template graph's nodes, destroys the template.
/// On any error the capture is ended and everything made so far destroyed.
pub fn capture_graph<F>(
    origin: &CudaStream,
    body: F,
) -> Result<(GraphExec, GraphNodeCounts), RunnerError>
where
    F: FnOnce() -> Result<(), RunnerError>,
{
    // SAFETY: live stream.
    unsafe {
        ck(
            sys::cuStreamBeginCapture_v2(
                origin.cu_stream(),
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            ),
            "cuStreamBeginCapture",
        )?;
    }
    let body_result = body();
    let mut graph: CUgraph = null_mut();
    // SAFETY: ends the capture begun above (also after a failed body, to release the stream).
    let end = unsafe { sys::cuStreamEndCapture(origin.cu_stream(), &mut graph) };
    let destroy_graph = |g: CUgraph| {
        if !g.is_null() {
            // SAFETY: the template graph returned by cuStreamEndCapture, destroyed once.
            let _ = unsafe { sys::cuGraphDestroy(g) };
        }
    };
    if let Err(e) = body_result {
        destroy_graph(graph);
        return Err(e);
    }
    if let Err(e) = ck(end, "cuStreamEndCapture") {
        destroy_graph(graph);
        return Err(e);
    }
    if graph.is_null() {
        return Err(RunnerError::Config(
            "cuStreamEndCapture returned no graph".into(),
        ));
    }
    let mut exec: CUgraphExec = null_mut();
    // SAFETY: live template graph; out-pointer to a local.
    if let Err(e) = ck(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) },
        "cuGraphInstantiateWithFlags",
    ) {
        destroy_graph(graph);
        return Err(e);
    }
    let exec = GraphExec { exec };
    // SAFETY: the live template graph returned by cuStreamEndCapture, destroyed just below.
    let counts = unsafe { count_graph_nodes(graph) };
    destroy_graph(graph);
    Ok((exec, counts?))
}

// ---------------------------------------------------------------------------------------------
// The step of examples/probe/emu.cu.

/// One step of `examples/probe/emu.cu`: spin 5 µs → routing all-gather (the collective stand-in) → spin
/// 10 µs → spin 5 µs, all on `origin`; when capturing, the backend's side stream is joined back
/// at the end (emu.cu's placement, before the caller's `cuStreamEndCapture`). `stamps` is the
/// device address of this step's 8 u64: [spin5 start, end, coll start, end, spin10 start, end,
/// spin5 start, end]; the all-gather's pair is handed to the backend through
/// [`RoutingAllGather::set_kernel_stamp`] (the emulated copy kernel writes it; NCCL cannot).
pub fn emu_step(
    kernels: &EmuKernels,
    origin: &Arc<CudaStream>,
    ag: &mut dyn RoutingAllGather,
    send: &CudaSlice<u8>,
    recv: &mut CudaSlice<u8>,
    capturing: bool,
    stamps: u64,
) -> Result<(), RunnerError> {
    kernels.spin(origin, 5000, stamps)?;
    ag.set_kernel_stamp(Some(stamps + 16));
    ag.all_gather(origin, send, recv, capturing)?;
    kernels.spin(origin, 10000, stamps + 32)?;
    kernels.spin(origin, 5000, stamps + 48)?;
    if capturing {
        ag.end_of_capture_join(origin)?;
    }
    Ok(())
}

/// How graphed steps are launched (emu.cu's second argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LaunchPattern {
    /// "single": one executable graph replayed.
    Single,
    /// "alt": two executable graphs taking turns.
    Alternating,
    /// anything else: a new executable graph for every step.
    PerStep,
}

impl LaunchPattern {
    /// emu.cu's rule: first letter 's' → single, 'a' → alternating, else (or absent) per step.
    pub fn from_arg(arg: Option<&str>) -> LaunchPattern {
        match arg.and_then(|a| a.bytes().next()) {
            Some(b's') => LaunchPattern::Single,
            Some(b'a') => LaunchPattern::Alternating,
            _ => LaunchPattern::PerStep,
        }
    }

    /// emu.cu's output label.
    pub fn label(self) -> &'static str {
        match self {
            LaunchPattern::Single => "single-exec",
            LaunchPattern::Alternating => "two-execs-alternating",
            LaunchPattern::PerStep => "exec-per-step",
        }
    }

    /// Executable graphs captured for `iters` steps.
    pub fn graphs(self, iters: usize) -> usize {
        match self {
            LaunchPattern::Single => 1,
            LaunchPattern::Alternating => 2,
            LaunchPattern::PerStep => iters,
        }
    }

    /// Which executable graph step `i` launches.
    pub fn exec_index(self, i: usize) -> usize {
        match self {
            LaunchPattern::Single => 0,
            LaunchPattern::Alternating => i % 2,
            LaunchPattern::PerStep => i,
        }
    }
}

/// Medians of one emu.cu cell, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EmuStats {
    pub gap_before_coll: f64,
    pub coll_dur: f64,
    pub gap_after_coll: f64,
    pub gap_spin: f64,
    pub gap_between_steps: f64,
}

/// emu.cu's statistics over the stamps `h` (8 u64 per step, `iters` steps). With one or two
/// executable graphs replayed, only slot 0 is read (the last replay of graph 0), and the
/// between-steps gap is 0, exactly as emu.cu. Differences wrap like C's unsigned arithmetic.
/// A median over no sample is NaN (emu.cu would read out of bounds).
pub fn emu_stats(h: &[u64], iters: usize, slot0_only: bool) -> EmuStats {
    let d = |a: u64, b: u64| a.wrapping_sub(b) as f64 / 1e3;
    let (mut g1, mut g2, mut g3, mut g0, mut kd) = (vec![], vec![], vec![], vec![], vec![]);
    if slot0_only {
        if h.len() >= 8 {
            let q = &h[0..8];
            g1.push(d(q[2], q[1]));
            g2.push(d(q[4], q[3]));
            g3.push(d(q[6], q[5]));
            g0.push(0.0);
            kd.push(d(q[3], q[2]));
        }
    } else {
        for i in 1..iters.min(h.len() / 8) {
            let q = &h[8 * i..8 * i + 8];
            g1.push(d(q[2], q[1]));
            g2.push(d(q[4], q[3]));
            g3.push(d(q[6], q[5]));
            g0.push(d(q[0], h[8 * (i - 1) + 7]));
            kd.push(d(q[3], q[2]));
        }
    }
    EmuStats {
        gap_before_coll: median(g1),
        coll_dur: median(kd),
        gap_after_coll: median(g2),
        gap_spin: median(g3),
        gap_between_steps: median(g0),
    }
}

/// emu.cu's median: the element at len/2 of the sorted samples (NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Result of one emu.cu cell (mode × eager/graphed).
#[derive(Debug, Clone, PartialEq)]
pub struct EmuCellResult {
    pub pattern: LaunchPattern,
    pub mode: GraphUsageMode,
    pub graphed: bool,
    /// Node counts of the first captured graph (graphed cells).
    pub nodes: Option<GraphNodeCounts>,
    /// CUDA-event period per step, µs.
    pub period_us: f64,
    pub stats: EmuStats,
}

impl EmuCellResult {
    /// emu.cu's result line.
    pub fn line(&self) -> String {
        format!(
            "{} mode={} {:<7} period_us={:.2} gap_before_coll={:.2} coll_dur={:.2} gap_after_coll={:.2} gap_spin={:.2} gap_between_steps={:.2}",
            self.pattern.label(),
            self.mode,
            if self.graphed { "graphed" } else { "eager" },
            self.period_us,
            self.stats.gap_before_coll,
            self.stats.coll_dur,
            self.stats.gap_after_coll,
            self.stats.gap_spin,
            self.stats.gap_between_steps
        )
    }
}

/// Hooks a recorder-enabled variant of emu uses; every method has a no-op default.
pub trait EmuObserver {
    /// Before a cell's captures / warm-up.
    fn cell_begin(&mut self, _mode: GraphUsageMode, _graphed: bool, _pattern: LaunchPattern) {}
    /// Around the capture of graph `index` of the cell (guard dropped after instantiation).
    fn capture(&mut self, _index: usize) -> Option<ScopeGuard> {
        None
    }
    /// Around timed step `index` (an eager step or a graph launch); guard dropped after it.
    fn step(&mut self, _index: usize) -> Option<ScopeGuard> {
        None
    }
    /// After the cell's timing and statistics.
    fn cell_end(&mut self, _result: &EmuCellResult) {}
}

/// The observer that does nothing.
pub struct NoObserver;
impl EmuObserver for NoObserver {}

/// Everything emu.cu allocates: origin stream `s`, kernels, the emulated all-gather (its side
/// stream is emu.cu's `c`), a local map, the gathered buffer, the stamps and the timing events.
pub struct EmuSetup {
    pub ctx: Arc<CudaContext>,
    pub origin: Arc<CudaStream>,
    pub kernels: EmuKernels,
    pub ag: EmulatedAllGather,
    pub send: CudaSlice<u8>,
    pub recv: CudaSlice<u8>,
    /// 8 u64 per step, `iters` steps.
    pub stamps: CudaSlice<u64>,
    pub ev_a: CudaEvent,
    pub ev_b: CudaEvent,
    pub iters: usize,
    /// The expected gathered result.
    pub expected: Vec<u8>,
}

/// emu.cu's shape: 8 ranks × 8 KiB routing map.
pub const EMU_RANKS: usize = 8;
pub const EMU_BYTES_PER_RANK: usize = 8192;

/// Deterministic content of simulated rank `r`'s map.
pub fn emu_map_byte(r: usize, j: usize) -> u8 {
    (r.wrapping_mul(131) ^ j.wrapping_mul(7) ^ (j >> 8)) as u8
}

impl EmuSetup {
    /// Opens device `ordinal` (no panic when there is no GPU: an `Unavailable` error), compiles
    /// the kernels and allocates emu.cu's buffers for `iters` steps.
    pub fn new(ordinal: usize, iters: usize) -> Result<EmuSetup, RunnerError> {
        if iters == 0 {
            return Err(RunnerError::Config("iters must be ≥ 1".into()));
        }
        let ctx = crate::workload::collective::open_context(ordinal)?;
        let kernels = EmuKernels::load(&ctx)?;
        let origin = ctx
            .new_stream()
            .map_err(|e| RunnerError::cuda("cuStreamCreate", e))?;
        let cfg = EmulatedConfig {
            ranks: EMU_RANKS,
            rank: 0,
            bytes_per_rank: EMU_BYTES_PER_RANK,
            mode: GraphUsageMode::Two,
        };
        let mut ag = EmulatedAllGather::new(&ctx, &kernels, cfg)?;
        let total = EMU_RANKS * EMU_BYTES_PER_RANK;
        let expected: Vec<u8> = (0..total)
            .map(|i| emu_map_byte(i / EMU_BYTES_PER_RANK, i % EMU_BYTES_PER_RANK))
            .collect();
        ag.set_peer_maps(&expected)?;
        let send = origin
            .clone_htod(&expected[0..EMU_BYTES_PER_RANK])
            .map_err(|e| RunnerError::cuda("cuMemcpyHtoDAsync", e))?;
        let recv = origin
            .alloc_zeros::<u8>(total)
            .map_err(|e| RunnerError::cuda("cuMemAlloc", e))?;
        let stamps = origin
            .alloc_zeros::<u64>(8 * iters)
            .map_err(|e| RunnerError::cuda("cuMemAlloc", e))?;
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let ev_a = ctx
            .new_event(timing)
            .map_err(|e| RunnerError::cuda("cuEventCreate", e))?;
        let ev_b = ctx
            .new_event(timing)
            .map_err(|e| RunnerError::cuda("cuEventCreate", e))?;
        origin
            .synchronize()
            .map_err(|e| RunnerError::cuda("cuStreamSynchronize", e))?;
        Ok(EmuSetup {
            ctx,
            origin,
            kernels,
            ag,
            send,
            recv,
            stamps,
            ev_a,
            ev_b,
            iters,
            expected,
        })
    }

    /// Device address of step slot `i`'s 8 stamps.
    pub fn stamp_addr(&self, i: usize) -> Result<u64, RunnerError> {
        Ok(raw_ptr(&self.stamps, &self.origin)? + 64 * i as u64)
    }

    /// One emu.cu step with the emulated backend, stamping slot `slot`.
    pub fn step(&mut self, capturing: bool, slot: usize) -> Result<(), RunnerError> {
        let st = self.stamp_addr(slot)?;
        emu_step(
            &self.kernels,
            &self.origin,
            &mut self.ag,
            &self.send,
            &mut self.recv,
            capturing,
            st,
        )
    }

    /// Checks the gathered buffer against the expected all-gather result.
    pub fn verify_gather(&self) -> Result<(), RunnerError> {
        let got = self
            .origin
            .clone_dtoh(&self.recv)
            .map_err(|e| RunnerError::cuda("cuMemcpyDtoHAsync", e))?;
        self.origin
            .synchronize()
            .map_err(|e| RunnerError::cuda("cuStreamSynchronize", e))?;
        match got.iter().zip(&self.expected).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(RunnerError::Config(format!(
                "emulated all-gather result wrong at byte {i} (rank slot {}): got {}, expected {}",
                i / EMU_BYTES_PER_RANK,
                got[i],
                self.expected[i]
            ))),
        }
    }
}

/// One cell of emu.cu: `mode`, eager or graphed, with `pattern`; timed over `setup.iters`
/// steps after warm-up (graphed: `iters` launches; eager: 50 steps), exactly as emu.cu.
pub fn run_emu_cell(
    setup: &mut EmuSetup,
    mode: GraphUsageMode,
    graphed: bool,
    pattern: LaunchPattern,
    obs: &mut dyn EmuObserver,
) -> Result<EmuCellResult, RunnerError> {
    let iters = setup.iters;
    setup.ag.set_mode(mode);
    obs.cell_begin(mode, graphed, pattern);
    let mut execs: Vec<GraphExec> = Vec::new();
    let mut nodes = None;
    if graphed {
        for i in 0..pattern.graphs(iters) {
            let guard = obs.capture(i);
            let origin = setup.origin.clone();
            let captured = capture_graph(&origin, || setup.step(true, i));
            let (exec, counts) = captured.inspect_err(|_| setup.ag.abandon_capture())?;
            drop(guard);
            if i == 0 {
                nodes = Some(counts);
            }
            execs.push(exec);
        }
        for i in 0..iters {
            execs[pattern.exec_index(i)].launch(&setup.origin)?;
        }
    } else {
        for i in 0..50 {
            setup.step(false, i % iters)?;
        }
    }
    let s = setup.origin.cu_stream();
    // SAFETY (raw event calls below): live stream and events.
    unsafe {
        ck(sys::cuStreamSynchronize(s), "cuStreamSynchronize")?;
        ck(
            sys::cuEventRecord(setup.ev_a.cu_event(), s),
            "cuEventRecord",
        )?;
    }
    for i in 0..iters {
        let guard = obs.step(i);
        if graphed {
            execs[pattern.exec_index(i)].launch(&setup.origin)?;
        } else {
            setup.step(false, i)?;
        }
        drop(guard);
    }
    let mut ms: f32 = 0.0;
    unsafe {
        ck(
            sys::cuEventRecord(setup.ev_b.cu_event(), s),
            "cuEventRecord",
        )?;
        ck(
            sys::cuEventSynchronize(setup.ev_b.cu_event()),
            "cuEventSynchronize",
        )?;
        ck(
            sys::cuEventElapsedTime_v2(&mut ms, setup.ev_a.cu_event(), setup.ev_b.cu_event()),
            "cuEventElapsedTime",
        )?;
    }
    let h = setup
        .origin
        .clone_dtoh(&setup.stamps)
        .map_err(|e| RunnerError::cuda("cuMemcpyDtoHAsync", e))?;
    setup
        .origin
        .synchronize()
        .map_err(|e| RunnerError::cuda("cuStreamSynchronize", e))?;
    let slot0_only = graphed && pattern != LaunchPattern::PerStep;
    let result = EmuCellResult {
        pattern,
        mode,
        graphed,
        nodes,
        period_us: ms as f64 * 1000.0 / iters as f64,
        stats: emu_stats(&h, iters, slot0_only),
    };
    obs.cell_end(&result);
    drop(execs);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ranks: usize, mode: GraphUsageMode) -> EmulatedConfig {
        EmulatedConfig {
            ranks,
            rank: 0,
            bytes_per_rank: 8192,
            mode,
        }
    }

    #[test]
    fn describe_strings() {
        assert_eq!(
            cfg(8, GraphUsageMode::Two).describe(),
            "emulated (8 simulated ranks, mode-2 topology)"
        );
        assert_eq!(
            cfg(8, GraphUsageMode::One).describe(),
            "emulated (8 simulated ranks, mode-1 topology, same as mode 1: no external nodes)"
        );
        assert_eq!(
            cfg(1, GraphUsageMode::Zero).describe(),
            "emulated (1 simulated rank, mode-0 topology, same as mode 1: no external nodes)"
        );
    }

    #[test]
    fn config_validation() {
        assert!(cfg(8, GraphUsageMode::Two).validate().is_ok());
        let mut c = cfg(8, GraphUsageMode::Two);
        c.rank = 8;
        assert!(c.validate().is_err());
        c.rank = 0;
        c.bytes_per_rank = 100;
        assert!(c.validate().is_err());
        c.bytes_per_rank = 0;
        assert!(c.validate().is_err());
        assert!(cfg(0, GraphUsageMode::Two).validate().is_err());
    }

    #[test]
    fn launch_patterns_follow_emu_cu() {
        assert_eq!(
            LaunchPattern::from_arg(Some("single")),
            LaunchPattern::Single
        );
        assert_eq!(
            LaunchPattern::from_arg(Some("alt")),
            LaunchPattern::Alternating
        );
        assert_eq!(LaunchPattern::from_arg(Some("per")), LaunchPattern::PerStep);
        assert_eq!(LaunchPattern::from_arg(None), LaunchPattern::PerStep);
        assert_eq!(LaunchPattern::Single.graphs(400), 1);
        assert_eq!(LaunchPattern::Alternating.graphs(400), 2);
        assert_eq!(LaunchPattern::PerStep.graphs(400), 400);
        assert_eq!(LaunchPattern::Alternating.exec_index(5), 1);
        assert_eq!(LaunchPattern::PerStep.exec_index(5), 5);
        assert_eq!(LaunchPattern::Single.exec_index(5), 0);
    }

    #[test]
    fn stats_match_emu_cu() {
        // Two steps, 1 µs gaps everywhere, coll 3 µs, 2 µs between steps.
        let step = |t: u64| {
            vec![
                t,
                t + 5000,
                t + 6000,
                t + 9000,
                t + 10000,
                t + 20000,
                t + 21000,
                t + 26000,
            ]
        };
        let mut h = step(0);
        h.extend(step(28000));
        let s = emu_stats(&h, 2, false);
        assert_eq!(s.gap_before_coll, 1.0);
        assert_eq!(s.coll_dur, 3.0);
        assert_eq!(s.gap_after_coll, 1.0);
        assert_eq!(s.gap_spin, 1.0);
        assert_eq!(s.gap_between_steps, 2.0);
        let s0 = emu_stats(&h, 2, true);
        assert_eq!(s0.gap_between_steps, 0.0);
        assert_eq!(s0.coll_dur, 3.0);
        assert!(emu_stats(&h, 1, false).gap_before_coll.is_nan());
        assert_eq!(median(vec![3.0, 1.0, 2.0, 4.0]), 3.0);
    }

    #[test]
    fn result_line_format() {
        let r = EmuCellResult {
            pattern: LaunchPattern::Single,
            mode: GraphUsageMode::Two,
            graphed: false,
            nodes: None,
            period_us: 26.4,
            stats: EmuStats {
                gap_before_coll: 1.5,
                coll_dur: 2.0,
                gap_after_coll: 0.25,
                gap_spin: 0.126,
                gap_between_steps: 0.0,
            },
        };
        assert_eq!(
            r.line(),
            "single-exec mode=2 eager   period_us=26.40 gap_before_coll=1.50 coll_dur=2.00 gap_after_coll=0.25 gap_spin=0.13 gap_between_steps=0.00"
        );
        let n = GraphNodeCounts {
            kernels: 4,
            event_waits: 1,
            event_records: 1,
            other: 0,
        };
        assert_eq!(
            n.line(GraphUsageMode::Two),
            "mode=2 graph nodes: kernels=4 evwait=1 evrecord=1 other=0"
        );
    }
}
