//! Opening the GPU for the workload: driver and NVRTC checks before cudarc is touched (its
//! dynamic loader panics when a library or symbol is missing), the device context with cudarc's
//! event tracking off, and raw device addresses of buffers.
#![forbid(unsafe_code)]

use crate::workload::collective::WorkloadError;
use crate::workload::cuda;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;

/// Symbols of libcuda the workload (and cudarc under it) calls: checked up front because
/// cudarc's loader panics on a missing symbol.
const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuGetErrorString",
    "cuGetErrorName",
    "cuDriverGetVersion",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuStreamCreate",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventElapsedTime_v2",
    "cuStreamWaitEvent",
    "cuStreamSynchronize",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuStreamGetCaptureInfo_v3",
    "cuStreamUpdateCaptureDependencies_v2",
    "cuGraphAddEventRecordNode",
    "cuGraphAddDependencies_v2",
    "cuGraphGetNodes",
    "cuGraphNodeGetType",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuLaunchKernel",
];

/// Checks that libcuda opens and has every symbol the workload uses, without letting cudarc
/// panic. Returns the driver version (e.g. 13000) on success.
pub fn check_cuda_driver() -> Result<i32, WorkloadError> {
    crate::cuda::library()
        .map_err(|e| WorkloadError::Unavailable(format!("cannot load libcuda.so.1 ({e})")))?;
    if let Some(sym) = crate::cuda::missing_symbol(DRIVER_SYMBOLS) {
        return Err(WorkloadError::Unavailable(format!(
            "libcuda.so.1 lacks {sym}: driver too old for gapscope (needs CUDA 12.8+ driver)"
        )));
    }
    if !cuda::cudarc_finds_driver() {
        return Err(WorkloadError::Unavailable(
            "cudarc cannot find libcuda under any of its candidate names".into(),
        ));
    }
    cuda::driver_version()
}

/// Checks that NVRTC can be loaded by cudarc (it panics otherwise).
pub fn check_nvrtc() -> Result<(), WorkloadError> {
    if cuda::nvrtc_present() {
        Ok(())
    } else {
        Err(WorkloadError::Unavailable(
            "cannot load NVRTC (libnvrtc.so / libnvrtc.so.13 / .12 ...): add the CUDA lib64 directory to LD_LIBRARY_PATH".into(),
        ))
    }
}

/// Checks the driver, NVRTC and a GPU, then retains device `ordinal`'s primary context with
/// cudarc's event tracking **disabled**: tracking would insert hidden `cuStreamWaitEvent` /
/// `cuEventRecord` calls around every kernel argument, which changes a captured topology and
/// can break a capture (waits on events recorded outside it). The workload orders its streams
/// explicitly, as `examples/probe/emu.cu` does.
pub fn open_context(ordinal: usize) -> Result<Arc<CudaContext>, WorkloadError> {
    check_cuda_driver()?;
    check_nvrtc()?;
    let n = crate::cuda::device_count().map_err(|e| match e {
        crate::cuda::NoDevices::Library(e) => {
            WorkloadError::Unavailable(format!("cannot load libcuda.so.1 ({e})"))
        }
        crate::cuda::NoDevices::Driver(e) => {
            WorkloadError::Unavailable(format!("cuInit/cuDeviceGetCount: {e:?}").replace('\n', " "))
        }
    })?;
    if n == 0 {
        return Err(WorkloadError::Unavailable(
            "the CUDA driver reports no device".into(),
        ));
    }
    if ordinal >= n {
        return Err(WorkloadError::Config(format!(
            "device {ordinal} requested, {n} present"
        )));
    }
    let ctx = CudaContext::new(ordinal)
        .map_err(|e| WorkloadError::cuda("cuDevicePrimaryCtxRetain", e))?;
    cuda::set_event_tracking(&ctx, false);
    Ok(ctx)
}

/// Refuses contexts where cudarc manages stream synchronisation (see [`open_context`]).
pub(crate) fn require_untracked(ctx: &CudaContext) -> Result<(), WorkloadError> {
    if ctx.is_managing_stream_synchronization() {
        Err(WorkloadError::Config(
            "cudarc event tracking is on for this context: call CudaContext::disable_event_tracking() (or use workload::device::open_context) before creating streams and buffers, or its hidden event waits change the captured topology".into(),
        ))
    } else {
        Ok(())
    }
}

/// The raw device address of a slice. With event tracking off (checked), cudarc's
/// `device_ptr` enqueues nothing.
pub(crate) fn raw_ptr<T>(slice: &CudaSlice<T>, stream: &CudaStream) -> Result<u64, WorkloadError> {
    require_untracked(stream.context())?;
    Ok(cuda::device_addr(slice, stream))
}
