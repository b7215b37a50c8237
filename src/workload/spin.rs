//! The stand-in kernels of `kernels/emu.cu` (`spin`, `coll`, `coll_gather`), compiled at run
//! time with NVRTC, and launchers with exactly `examples/probe/emu.cu`'s launch shapes.
//!
//! Launches go straight to `cuLaunchKernel` ([`crate::workload::cuda::launch_kernel`]) with
//! raw device addresses: no cudarc event tracking, no context re-binding, so the API calls a
//! recorder sees are the same as emu.cu's (one launch per kernel). The calling thread must have
//! the context current (cudarc's constructors make it so; call `CudaContext::bind_to_thread`
//! once on a new thread).
#![forbid(unsafe_code)]

use crate::workload::collective::WorkloadError;
use crate::workload::cuda::{Kernel, KernelArg, launch_kernel};
use crate::workload::device::check_nvrtc;
use cudarc::driver::{CudaContext, CudaModule, CudaStream};
use std::sync::Arc;

/// Source of `kernels/emu.cu`.
pub const EMU_CU: &str = include_str!("../../kernels/emu.cu");

/// `spin<<<1, 32>>>`, as in emu.cu.
pub const SPIN_GRID: (u32, u32, u32) = (1, 1, 1);
pub const SPIN_BLOCK: (u32, u32, u32) = (32, 1, 1);
/// `coll<<<8, 256>>>`, as in emu.cu (also used by `coll_gather`).
pub const COLL_GRID: (u32, u32, u32) = (8, 1, 1);
pub const COLL_BLOCK: (u32, u32, u32) = (256, 1, 1);

/// The compiled kernels of `kernels/emu.cu`.
#[derive(Debug, Clone)]
pub struct EmuKernels {
    pub spin: Kernel,
    pub coll: Kernel,
    pub coll_gather: Kernel,
    _module: Arc<CudaModule>,
}

impl EmuKernels {
    /// Compiles `kernels/emu.cu` for the context's device and loads it.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<EmuKernels, WorkloadError> {
        check_nvrtc()?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| WorkloadError::cuda("cuDeviceGetAttribute", e))?;
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
            name: Some("emu.cu".into()),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(EMU_CU, opts).map_err(|e| {
            WorkloadError::Nvrtc {
                source_name: "kernels/emu.cu",
                detail: format!("{e:?}").replace('\n', " "),
            }
        })?;
        let module = ctx
            .load_module(ptx)
            .map_err(|e| WorkloadError::cuda("cuModuleLoadData", e))?;
        let get = |name: &str| {
            Kernel::load(&module, name).map_err(|e| WorkloadError::cuda("cuModuleGetFunction", e))
        };
        Ok(EmuKernels {
            spin: get("spin")?,
            coll: get("coll")?,
            coll_gather: get("coll_gather")?,
            _module: module,
        })
    }

    /// `spin<<<1, 32, 0, stream>>>(ns, stamp)`: busy-waits `ns` nanoseconds of %globaltimer and
    /// writes its start and end stamps to `stamp[0..2]` (a device address of two u64).
    pub fn spin(&self, stream: &CudaStream, ns: u64, stamp: u64) -> Result<(), WorkloadError> {
        // spin(unsigned long long ns, unsigned long long* stamp)
        let args = [KernelArg::U64(ns), KernelArg::U64(stamp)];
        launch(&self.spin, SPIN_GRID, SPIN_BLOCK, stream, &args)
    }

    /// `coll_gather<<<8, 256, 0, stream>>>`: `dst[slot rank] = local`, every other slot from
    /// `peers` (same layout as `dst`). Sizes in int4 (16-byte) elements per rank.
    #[allow(clippy::too_many_arguments)]
    pub fn coll_gather(
        &self,
        stream: &CudaStream,
        local: u64,
        peers: u64,
        dst: u64,
        n_per_rank: i32,
        ranks: i32,
        rank: i32,
        stamp: u64,
    ) -> Result<(), WorkloadError> {
        // coll_gather(const int4* local, const int4* peers, int4* dst, int n_per_rank,
        //             int ranks, int rank, unsigned long long* stamp)
        let args = [
            KernelArg::U64(local),
            KernelArg::U64(peers),
            KernelArg::U64(dst),
            KernelArg::I32(n_per_rank),
            KernelArg::I32(ranks),
            KernelArg::I32(rank),
            KernelArg::U64(stamp),
        ];
        launch(&self.coll_gather, COLL_GRID, COLL_BLOCK, stream, &args)
    }
}

fn launch(
    f: &Kernel,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    stream: &CudaStream,
    args: &[KernelArg],
) -> Result<(), WorkloadError> {
    launch_kernel(f, grid, block, stream, args)
        .map_err(|e| WorkloadError::cuda("cuLaunchKernel", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_has_the_three_kernels() {
        for k in [
            "extern \"C\" __global__ void spin(unsigned long long ns, unsigned long long* stamp)",
            "extern \"C\" __global__ void coll(const int4* src, int4* dst, int n, unsigned long long* stamp)",
            "extern \"C\" __global__ void coll_gather(",
            "%%globaltimer",
        ] {
            assert!(EMU_CU.contains(k), "kernels/emu.cu lacks {k}");
        }
    }
}
