//! The experiment of `examples/probe/emu.cu` on the emulated all-gather: its step
//! ([`emu_step`]: spin → collective stand-in → spin → spin), its buffers ([`EmuSetup`]), one
//! whole cell ([`run_emu_cell`]) and its statistics, shared by `examples/emu.rs` and
//! `gapscope run --workload emu`.
#![forbid(unsafe_code)]

use crate::workload::capture::{GraphExec, GraphNodeCounts, Launch, capture_graph};
use crate::workload::collective::emulated::{EmulatedAllGather, EmulatedConfig};
use crate::workload::collective::{
    GraphUsageMode, LibraryCallGuard, RoutingAllGather, WorkloadError,
};
use crate::workload::cuda;
use crate::workload::device::raw_ptr;
use crate::workload::spin::EmuKernels;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream};
use std::sync::Arc;

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
) -> Result<(), WorkloadError> {
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
    pub launch: Launch,
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
            self.launch.emu_cu_label(),
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
    fn cell_begin(&mut self, _mode: GraphUsageMode, _graphed: bool, _launch: Launch) {}
    /// Around the capture of graph `index` of the cell (guard dropped after instantiation).
    fn capture(&mut self, _index: usize) -> Option<LibraryCallGuard> {
        None
    }
    /// Around timed step `index` (an eager step or a graph launch); guard dropped after it.
    fn step(&mut self, _index: usize) -> Option<LibraryCallGuard> {
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
    pub fn new(ordinal: usize, iters: usize) -> Result<EmuSetup, WorkloadError> {
        if iters == 0 {
            return Err(WorkloadError::Config("iters must be ≥ 1".into()));
        }
        let ctx = crate::workload::device::open_context(ordinal)?;
        let kernels = EmuKernels::load(&ctx)?;
        let origin = ctx
            .new_stream()
            .map_err(|e| WorkloadError::cuda("cuStreamCreate", e))?;
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
            .map_err(|e| WorkloadError::cuda("cuMemcpyHtoDAsync", e))?;
        let recv = origin
            .alloc_zeros::<u8>(total)
            .map_err(|e| WorkloadError::cuda("cuMemAlloc", e))?;
        let stamps = origin
            .alloc_zeros::<u64>(8 * iters)
            .map_err(|e| WorkloadError::cuda("cuMemAlloc", e))?;
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let ev_a = ctx
            .new_event(timing)
            .map_err(|e| WorkloadError::cuda("cuEventCreate", e))?;
        let ev_b = ctx
            .new_event(timing)
            .map_err(|e| WorkloadError::cuda("cuEventCreate", e))?;
        origin
            .synchronize()
            .map_err(|e| WorkloadError::cuda("cuStreamSynchronize", e))?;
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
    pub fn stamp_addr(&self, i: usize) -> Result<u64, WorkloadError> {
        Ok(raw_ptr(&self.stamps, &self.origin)? + 64 * i as u64)
    }

    /// One emu.cu step with the emulated backend, stamping slot `slot`.
    pub fn step(&mut self, capturing: bool, slot: usize) -> Result<(), WorkloadError> {
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
    pub fn verify_gather(&self) -> Result<(), WorkloadError> {
        let got = self
            .origin
            .clone_dtoh(&self.recv)
            .map_err(|e| WorkloadError::cuda("cuMemcpyDtoHAsync", e))?;
        self.origin
            .synchronize()
            .map_err(|e| WorkloadError::cuda("cuStreamSynchronize", e))?;
        match got.iter().zip(&self.expected).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(WorkloadError::Config(format!(
                "emulated all-gather result wrong at byte {i} (rank slot {}): got {}, expected {}",
                i / EMU_BYTES_PER_RANK,
                got[i],
                self.expected[i]
            ))),
        }
    }
}

/// One cell of emu.cu: `mode`, eager or graphed, launched as `launch`; timed over `setup.iters`
/// steps after warm-up (graphed: `iters` launches; eager: 50 steps), exactly as emu.cu.
pub fn run_emu_cell(
    setup: &mut EmuSetup,
    mode: GraphUsageMode,
    graphed: bool,
    launch: Launch,
    obs: &mut dyn EmuObserver,
) -> Result<EmuCellResult, WorkloadError> {
    let iters = setup.iters;
    setup.ag.set_mode(mode);
    obs.cell_begin(mode, graphed, launch);
    let mut execs: Vec<GraphExec> = Vec::new();
    let mut nodes = None;
    if graphed {
        for i in 0..launch.graphs(iters) {
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
            execs[launch.exec_index(i)].launch(&setup.origin)?;
        }
    } else {
        for i in 0..50 {
            setup.step(false, i % iters)?;
        }
    }
    cuda::synchronize(&setup.origin)?;
    cuda::record_event(&setup.ev_a, &setup.origin)?;
    for i in 0..iters {
        let guard = obs.step(i);
        if graphed {
            execs[launch.exec_index(i)].launch(&setup.origin)?;
        } else {
            setup.step(false, i)?;
        }
        drop(guard);
    }
    cuda::record_event(&setup.ev_b, &setup.origin)?;
    cuda::synchronize_event(&setup.ev_b)?;
    let ms = cuda::elapsed_ms(&setup.ev_a, &setup.ev_b)?;
    let h = setup
        .origin
        .clone_dtoh(&setup.stamps)
        .map_err(|e| WorkloadError::cuda("cuMemcpyDtoHAsync", e))?;
    setup
        .origin
        .synchronize()
        .map_err(|e| WorkloadError::cuda("cuStreamSynchronize", e))?;
    let slot0_only = graphed && launch != Launch::Fresh;
    let result = EmuCellResult {
        launch,
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

    #[test]
    fn launches_follow_emu_cu() {
        assert_eq!(Launch::from_emu_cu_arg(Some("single")), Launch::Replay);
        assert_eq!(Launch::from_emu_cu_arg(Some("alt")), Launch::Alternating);
        assert_eq!(Launch::from_emu_cu_arg(Some("per")), Launch::Fresh);
        assert_eq!(Launch::from_emu_cu_arg(None), Launch::Fresh);
        assert_eq!(Launch::Replay.graphs(400), 1);
        assert_eq!(Launch::Alternating.graphs(400), 2);
        assert_eq!(Launch::Fresh.graphs(400), 400);
        assert_eq!(Launch::Alternating.exec_index(5), 1);
        assert_eq!(Launch::Fresh.exec_index(5), 5);
        assert_eq!(Launch::Replay.exec_index(5), 0);
        // Traces and cell labels say replay / fresh; emu.cu's own lines keep its words.
        assert_eq!(
            [Launch::Replay, Launch::Fresh, Launch::Alternating].map(Launch::label),
            ["replay", "fresh", "alternating"]
        );
        assert_eq!(Launch::Fresh.emu_cu_label(), "exec-per-step");
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
            launch: Launch::Replay,
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
