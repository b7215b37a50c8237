//! The stand-in kernels of `kernels/emu.cu` (`spin`, `coll`, `coll_gather`), compiled at run
//! time with NVRTC, and launchers with exactly `examples/probe/emu.cu`'s launch shapes.
//!
//! Launches go straight to `cuLaunchKernel` with raw device addresses: no cudarc event
//! tracking, no context re-binding, so the API calls a recorder sees are the same as emu.cu's
//! (one launch per kernel). The calling thread must have the context current (cudarc's
//! constructors make it so; call `CudaContext::bind_to_thread` once on a new thread).

use crate::workload::collective::{RunnerError, check_nvrtc};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use std::ffi::c_void;
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
    pub spin: CudaFunction,
    pub coll: CudaFunction,
    pub coll_gather: CudaFunction,
    _module: Arc<CudaModule>,
}

impl EmuKernels {
    /// Compiles `kernels/emu.cu` for the context's device and loads it.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<EmuKernels, RunnerError> {
        check_nvrtc()?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| RunnerError::cuda("cuDeviceGetAttribute", e))?;
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
            name: Some("emu.cu".into()),
            ..Default::default()
        };
        let ptx =
            cudarc::nvrtc::compile_ptx_with_opts(EMU_CU, opts).map_err(|e| RunnerError::Nvrtc {
                source_name: "kernels/emu.cu",
                detail: format!("{e:?}").replace('\n', " "),
            })?;
        let module = ctx
            .load_module(ptx)
            .map_err(|e| RunnerError::cuda("cuModuleLoadData", e))?;
        let get = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| RunnerError::cuda("cuModuleGetFunction", e))
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
    pub fn spin(&self, stream: &CudaStream, ns: u64, stamp: u64) -> Result<(), RunnerError> {
        let (mut a, mut b) = (ns, stamp);
        let mut params: [*mut c_void; 2] = [
            (&mut a) as *mut u64 as *mut c_void,
            (&mut b) as *mut u64 as *mut c_void,
        ];
        launch(&self.spin, SPIN_GRID, SPIN_BLOCK, stream, &mut params)
    }

    /// `coll<<<8, 256, 0, stream>>>(src, dst, n, stamp)`: copies `n` int4 from `src` to `dst`.
    pub fn coll(
        &self,
        stream: &CudaStream,
        src: u64,
        dst: u64,
        n: i32,
        stamp: u64,
    ) -> Result<(), RunnerError> {
        let (mut s, mut d, mut n, mut st) = (src, dst, n, stamp);
        let mut params: [*mut c_void; 4] = [
            (&mut s) as *mut u64 as *mut c_void,
            (&mut d) as *mut u64 as *mut c_void,
            (&mut n) as *mut i32 as *mut c_void,
            (&mut st) as *mut u64 as *mut c_void,
        ];
        launch(&self.coll, COLL_GRID, COLL_BLOCK, stream, &mut params)
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
    ) -> Result<(), RunnerError> {
        let (mut l, mut p, mut d) = (local, peers, dst);
        let (mut n, mut r, mut k, mut st) = (n_per_rank, ranks, rank, stamp);
        let mut params: [*mut c_void; 7] = [
            (&mut l) as *mut u64 as *mut c_void,
            (&mut p) as *mut u64 as *mut c_void,
            (&mut d) as *mut u64 as *mut c_void,
            (&mut n) as *mut i32 as *mut c_void,
            (&mut r) as *mut i32 as *mut c_void,
            (&mut k) as *mut i32 as *mut c_void,
            (&mut st) as *mut u64 as *mut c_void,
        ];
        launch(
            &self.coll_gather,
            COLL_GRID,
            COLL_BLOCK,
            stream,
            &mut params,
        )
    }
}

fn launch(
    f: &CudaFunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    stream: &CudaStream,
    params: &mut [*mut c_void],
) -> Result<(), RunnerError> {
    // SAFETY: `params` points at locals of the caller that outlive this call (cuLaunchKernel
    // copies the values), their types match the kernel signatures in kernels/emu.cu, and the
    // function belongs to a module kept alive by `EmuKernels`.
    unsafe {
        cudarc::driver::result::launch_kernel(
            f.cu_function(),
            grid,
            block,
            0,
            stream.cu_stream(),
            params,
        )
    }
    .map_err(|e| RunnerError::cuda("cuLaunchKernel", e))
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
