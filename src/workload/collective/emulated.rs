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
//! The step of `examples/probe/emu.cu` and whole emu.cu cells are in [`crate::workload::emu`];
//! graph capture in [`crate::workload::capture`].
#![forbid(unsafe_code)]

use crate::workload::collective::{
    Backend, GraphUsageMode, LibraryCallHook, RoutingAllGather, WorkloadError, open_library_call,
};
use crate::workload::cuda;
use crate::workload::device::raw_ptr;
use crate::workload::spin::EmuKernels;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream};
use std::sync::Arc;

/// Library call of the emulated all-gather.
pub const EMULATED_LIBRARY_CALL: &str = "ncclAllGather (emulated)";
/// Library call of the end-of-step join of the emulated side stream (creates no node, only an
/// edge).
pub const EMULATED_JOIN_LIBRARY_CALL: &str = "ncclAllGather (emulated): capture-stream join";

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
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.ranks == 0 || self.rank >= self.ranks {
            return Err(WorkloadError::Config(format!(
                "emulated all-gather: rank {} of {} ranks",
                self.rank, self.ranks
            )));
        }
        if self.bytes_per_rank == 0 || !self.bytes_per_rank.is_multiple_of(16) {
            return Err(WorkloadError::Config(format!(
                "emulated all-gather: bytes per rank must be a positive multiple of 16, not {}",
                self.bytes_per_rank
            )));
        }
        if (self.bytes_per_rank / 16)
            .checked_mul(self.ranks)
            .is_none_or(|n| n > i32::MAX as usize)
        {
            return Err(WorkloadError::Config(
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
    hook: Option<LibraryCallHook>,
    join_pending: bool,
}

impl EmulatedAllGather {
    /// Creates the side capture stream, the `serial` and `scratch` events (timing disabled) and
    /// the peer buffer (zeros until [`Self::set_peer_maps`]). Records `serial` once on the idle
    /// side stream, as emu.cu records it once on its idle stream before any step. The context
    /// must have cudarc event tracking off (see `device::open_context`).
    pub fn new(
        ctx: &Arc<CudaContext>,
        kernels: &EmuKernels,
        cfg: EmulatedConfig,
    ) -> Result<EmulatedAllGather, WorkloadError> {
        cfg.validate()?;
        if ctx.is_event_tracking() {
            return Err(WorkloadError::Config(
                "cudarc event tracking is on: call CudaContext::disable_event_tracking() (or use workload::device::open_context) before creating the emulated all-gather".into(),
            ));
        }
        let side = ctx
            .new_stream()
            .map_err(|e| WorkloadError::cuda("cuStreamCreate", e))?;
        let serial = ctx
            .new_event(None)
            .map_err(|e| WorkloadError::cuda("cuEventCreate", e))?;
        let scratch = ctx
            .new_event(None)
            .map_err(|e| WorkloadError::cuda("cuEventCreate", e))?;
        let peers = side
            .alloc_zeros::<u8>(cfg.ranks * cfg.bytes_per_rank)
            .map_err(|e| WorkloadError::cuda("cuMemAlloc", e))?;
        let own_stamp = side
            .alloc_zeros::<u64>(2)
            .map_err(|e| WorkloadError::cuda("cuMemAlloc", e))?;
        serial
            .record(&side)
            .map_err(|e| WorkloadError::cuda("cuEventRecord", e))?;
        side.synchronize()
            .map_err(|e| WorkloadError::cuda("cuStreamSynchronize", e))?;
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
    pub fn set_peer_maps(&mut self, maps: &[u8]) -> Result<(), WorkloadError> {
        if maps.len() != self.peers.len() {
            return Err(WorkloadError::Config(format!(
                "peer maps: {} bytes given, {} expected (ranks × bytes per rank)",
                maps.len(),
                self.peers.len()
            )));
        }
        self.side
            .memcpy_htod(maps, &mut self.peers)
            .map_err(|e| WorkloadError::cuda("cuMemcpyHtoDAsync", e))?;
        self.side
            .synchronize()
            .map_err(|e| WorkloadError::cuda("cuStreamSynchronize", e))
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

    fn launch_copy(&self, origin: &CudaStream, send: u64, recv: u64) -> Result<(), WorkloadError> {
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

    fn captured(&mut self, origin: &CudaStream, send: u64, recv: u64) -> Result<(), WorkloadError> {
        let mixing = self.cfg.mode.is_mixing();
        // ncclStrongStreamAcquire: side stream joined with no dependencies.
        self.order(origin, &self.side)?;
        cuda::clear_capture_dependencies(&self.side)?;
        if mixing {
            cuda::wait_event(&self.side, &self.serial, true)?;
        }
        // ncclLaunchPrepare: the user stream waits on the side stream.
        self.order(&self.side, origin)?;
        self.launch_copy(origin, send, recv)?;
        // ncclLaunchFinish / ncclStrongStreamRelease.
        self.order(origin, &self.side)?;
        if mixing {
            // NCCL's recordEventOnStream in a capture: an explicit event-record node on
            // `serial` after the side stream's current dependencies.
            cuda::append_event_record_node(&self.side, &self.serial)?;
        }
        self.join_pending = true;
        Ok(())
    }

    /// `after` waits for the work queued on `before` so far (record `scratch`, then wait on
    /// it): the join NCCL's strong streams make, an edge when capturing.
    fn order(&self, before: &CudaStream, after: &CudaStream) -> Result<(), WorkloadError> {
        cuda::record_event(&self.scratch, before)?;
        cuda::wait_event(after, &self.scratch, false)
    }

    fn eager(&mut self, origin: &CudaStream, send: u64, recv: u64) -> Result<(), WorkloadError> {
        let mixing = self.cfg.mode.is_mixing();
        if mixing {
            cuda::wait_event(origin, &self.serial, false)?;
        }
        self.launch_copy(origin, send, recv)?;
        if mixing {
            cuda::record_event(&self.serial, origin)?;
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
    ) -> Result<(), WorkloadError> {
        if stream.context() != &self.ctx {
            return Err(WorkloadError::Config(
                "emulated all-gather: stream belongs to another context".into(),
            ));
        }
        let bytes = self.cfg.bytes_per_rank;
        if send.len() != bytes || recv.len() < bytes * self.cfg.ranks {
            return Err(WorkloadError::Config(format!(
                "emulated all-gather: send {} bytes (expected {bytes}), recv {} bytes (expected ≥ {})",
                send.len(),
                recv.len(),
                bytes * self.cfg.ranks
            )));
        }
        let send_ptr = raw_ptr(send, stream)?;
        let recv_ptr = raw_ptr(recv, stream)?;
        let _call = open_library_call(&self.hook, EMULATED_LIBRARY_CALL);
        if capturing {
            self.captured(stream, send_ptr, recv_ptr)
        } else {
            self.eager(stream, send_ptr, recv_ptr)
        }
    }

    fn end_of_capture_join(&mut self, origin: &Arc<CudaStream>) -> Result<(), WorkloadError> {
        if !self.join_pending {
            return Ok(());
        }
        let _call = open_library_call(&self.hook, EMULATED_JOIN_LIBRARY_CALL);
        self.order(&self.side, origin)?;
        self.join_pending = false;
        Ok(())
    }

    fn set_kernel_stamp(&mut self, addr: Option<u64>) {
        self.stamp = addr;
    }

    fn describe(&self) -> String {
        self.cfg.describe()
    }

    fn library_call_name(&self) -> &'static str {
        EMULATED_LIBRARY_CALL
    }

    fn set_library_call_hook(&mut self, hook: Option<LibraryCallHook>) {
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
}
