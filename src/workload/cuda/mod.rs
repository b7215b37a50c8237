//! FFI leaf of the workload: every raw CUDA driver and NVRTC call the workload makes, behind
//! safe wrappers, so the rest of `workload` is `#![forbid(unsafe_code)]`.
//!
//! * this file: cudarc's loader checks, event tracking, plain-number buffers, bounds-checked
//!   memsets and copies, kernel launches, raw stream / event operations and the capture
//!   dependency edits NCCL's strong streams make;
//! * [`graph`]: stream capture, template graphs and executable graphs;
//! * [`nvrtc`]: compiling a kernel source.
//!
//! Raw calls go straight to the driver (not through cudarc's tracked wrappers) so that the API
//! calls a recorder sees are exactly the ones the workload means to make.
#![allow(unsafe_code)]

pub mod graph;
pub mod nvrtc;

use crate::workload::collective::{WorkloadError, ck};
use cudarc::driver::sys::{
    self, CUevent_wait_flags, CUgraph, CUgraphNode, CUstreamCaptureStatus,
    CUstreamUpdateCaptureDependencies_flags,
};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DriverError};
use std::ffi::c_void;
use std::ptr::{null, null_mut};

const SET_DEPS: u32 =
    CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32;
const WAIT_DEFAULT: u32 = CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT as u32;
const WAIT_EXTERNAL: u32 = CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL as u32;

/// Whether cudarc's driver loader finds libcuda under one of its candidate names (its loader
/// panics otherwise).
pub fn cudarc_finds_driver() -> bool {
    // SAFETY: only tries to dlopen cudarc's candidate names.
    unsafe { sys::is_culib_present() }
}

/// `cuDriverGetVersion` through cudarc. Call only after [`cudarc_finds_driver`] and a check
/// that libcuda has the symbol (cudarc panics on a missing one).
pub fn driver_version() -> Result<i32, WorkloadError> {
    let mut v = 0i32;
    // SAFETY: an out-pointer to a local; the library and symbol are checked by the caller.
    ck(
        unsafe { sys::cuDriverGetVersion(&mut v) },
        "cuDriverGetVersion",
    )?;
    Ok(v)
}

/// Whether cudarc finds an NVRTC library (its loader panics otherwise).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen cudarc's candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Turns cudarc's event tracking on or off for buffers and streams created from now on.
/// Off, cudarc adds no hidden `cuEventRecord` / `cuStreamWaitEvent` around our work (they would
/// change a captured topology); the workload then orders its streams explicitly, as
/// `examples/probe/emu.cu` does.
pub fn set_event_tracking(ctx: &CudaContext, on: bool) {
    // SAFETY: tracking only adds synchronisation; without it, ordering between streams is the
    // caller's job, which the workload does with explicit events and captures.
    unsafe {
        if on {
            ctx.enable_event_tracking();
        } else {
            ctx.disable_event_tracking();
        }
    }
}

/// Element types for which any bit pattern is a valid value, so a buffer may be allocated
/// without initialisation.
pub trait PlainNumber: cudarc::driver::DeviceRepr {}
impl PlainNumber for u8 {}
impl PlainNumber for u16 {}
impl PlainNumber for i32 {}
impl PlainNumber for u64 {}
impl PlainNumber for f32 {}

/// `len` elements (at least one) on `stream`, not initialised.
pub fn alloc_uninit<T: PlainNumber>(
    stream: &std::sync::Arc<CudaStream>,
    len: usize,
) -> Result<CudaSlice<T>, DriverError> {
    // SAFETY: every bit pattern is a valid `T` (PlainNumber), so reading before writing gives
    // unspecified numbers, never an invalid value.
    unsafe { stream.alloc::<T>(len.max(1)) }
}

/// The device address of a slice. With cudarc's event tracking off, `device_ptr` enqueues
/// nothing.
pub fn device_addr<T>(slice: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = slice.device_ptr(stream);
    p
}

fn out_of_range() -> DriverError {
    DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE)
}

/// `cuMemsetD8Async` of bytes `offset..offset + bytes` of `slice` (checked to lie inside it).
pub fn memset_d8<T>(
    slice: &CudaSlice<T>,
    offset: usize,
    bytes: usize,
    value: u8,
    stream: &CudaStream,
) -> Result<(), DriverError> {
    if offset
        .checked_add(bytes)
        .is_none_or(|end| end > slice.num_bytes())
    {
        return Err(out_of_range());
    }
    let ptr = device_addr(slice, stream) + offset as u64;
    // SAFETY: the range lies inside one live allocation (checked above).
    unsafe { cudarc::driver::result::memset_d8_async(ptr, value, bytes, stream.cu_stream()) }
}

/// `cuMemcpyDtoDAsync` of `bytes` bytes from `src[src_offset..]` to `dst[dst_offset..]` (both
/// ranges checked to lie inside their slices).
pub fn memcpy_dtod(
    dst: &mut CudaSlice<u8>,
    dst_offset: usize,
    src: &CudaSlice<u8>,
    src_offset: usize,
    bytes: usize,
    stream: &CudaStream,
) -> Result<(), DriverError> {
    let fits = |off: usize, len: usize| off.checked_add(bytes).is_some_and(|end| end <= len);
    if !fits(dst_offset, dst.len()) || !fits(src_offset, src.len()) {
        return Err(out_of_range());
    }
    let d = device_addr(dst, stream) + dst_offset as u64;
    let s = device_addr(src, stream) + src_offset as u64;
    // SAFETY: both ranges lie inside live allocations (checked above).
    unsafe { cudarc::driver::result::memcpy_dtod_async(d, s, bytes, stream.cu_stream()) }
}

/// One kernel argument: C `int`, or a 64-bit value (`unsigned long long`, or a device address
/// for any pointer parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelArg {
    I32(i32),
    U64(u64),
}

impl KernelArg {
    fn width(self) -> usize {
        match self {
            KernelArg::I32(_) => 4,
            KernelArg::U64(_) => 8,
        }
    }
}

/// A kernel function with its parameter widths, read once from the driver when it is loaded
/// (`cuFuncGetParamInfo`), so every launch can check its arguments without a driver call.
#[derive(Debug, Clone)]
pub struct Kernel {
    f: cudarc::driver::CudaFunction,
    param_widths: Vec<usize>,
}

impl Kernel {
    /// `cuModuleGetFunction(module, name)` and the function's parameter list.
    pub fn load(
        module: &std::sync::Arc<cudarc::driver::CudaModule>,
        name: &str,
    ) -> Result<Kernel, DriverError> {
        let f = module.load_function(name)?;
        let mut param_widths = Vec::new();
        loop {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: `f` is a loaded kernel; both out-pointers are to live locals. Past the
            // last parameter the driver answers CUDA_ERROR_INVALID_VALUE.
            let rc = unsafe {
                sys::cuFuncGetParamInfo(f.cu_function(), param_widths.len(), &mut offset, &mut size)
            };
            match rc {
                sys::cudaError_enum::CUDA_SUCCESS => param_widths.push(size),
                sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE => break,
                other => return Err(DriverError(other)),
            }
        }
        Ok(Kernel { f, param_widths })
    }
}

/// The most parameters [`launch_kernel`] passes (gapscope's kernels take up to a dozen).
const MAX_KERNEL_PARAMS: usize = 32;

/// `cuLaunchKernel(kernel, grid, block, 0 bytes shared, stream, args)`, after checking `args`
/// against the kernel's parameter list (count and widths; CUDA_ERROR_INVALID_VALUE when they
/// differ).
pub fn launch_kernel(
    kernel: &Kernel,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    stream: &CudaStream,
    args: &[KernelArg],
) -> Result<(), DriverError> {
    let matches = args.len() == kernel.param_widths.len()
        && args
            .iter()
            .zip(&kernel.param_widths)
            .all(|(a, &w)| a.width() == w);
    if !matches {
        return Err(DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE));
    }
    // On the stack: this runs inside timed steps.
    let mut params = [std::ptr::null_mut::<c_void>(); MAX_KERNEL_PARAMS];
    let Some(params) = params.get_mut(..args.len()) else {
        return Err(DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE));
    };
    for (p, a) in params.iter_mut().zip(args) {
        *p = match a {
            KernelArg::I32(v) => (v as *const i32).cast_mut().cast::<c_void>(),
            KernelArg::U64(v) => (v as *const u64).cast_mut().cast::<c_void>(),
        };
    }
    // SAFETY: every parameter points into `args`, alive until after the call; the driver only
    // reads them (it copies the values at launch); their count and widths match the kernel's
    // parameter list (checked above); the function belongs to a module its owner keeps loaded.
    unsafe {
        cudarc::driver::result::launch_kernel(
            kernel.f.cu_function(),
            grid,
            block,
            0,
            stream.cu_stream(),
            params,
        )
    }
}

/// `cuEventRecord(event, stream)`.
pub fn record_event(event: &CudaEvent, stream: &CudaStream) -> Result<(), WorkloadError> {
    // SAFETY: live event and stream (borrowed for the call).
    ck(
        unsafe { sys::cuEventRecord(event.cu_event(), stream.cu_stream()) },
        "cuEventRecord",
    )
}

/// `cuStreamWaitEvent(stream, event, flags)`; `external`: `CU_EVENT_WAIT_EXTERNAL` (in a
/// capture, an external event-wait node).
pub fn wait_event(
    stream: &CudaStream,
    event: &CudaEvent,
    external: bool,
) -> Result<(), WorkloadError> {
    let flags = if external {
        WAIT_EXTERNAL
    } else {
        WAIT_DEFAULT
    };
    // SAFETY: live event and stream.
    ck(
        unsafe { sys::cuStreamWaitEvent(stream.cu_stream(), event.cu_event(), flags) },
        "cuStreamWaitEvent",
    )
}

/// `cuStreamSynchronize(stream)`.
pub fn synchronize(stream: &CudaStream) -> Result<(), WorkloadError> {
    // SAFETY: live stream.
    ck(
        unsafe { sys::cuStreamSynchronize(stream.cu_stream()) },
        "cuStreamSynchronize",
    )
}

/// `cuEventSynchronize(event)`.
pub fn synchronize_event(event: &CudaEvent) -> Result<(), WorkloadError> {
    // SAFETY: live event.
    ck(
        unsafe { sys::cuEventSynchronize(event.cu_event()) },
        "cuEventSynchronize",
    )
}

/// `cuEventElapsedTime(start, end)` in ms.
pub fn elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Result<f32, WorkloadError> {
    let mut ms: f32 = 0.0;
    // SAFETY: live events; an out-pointer to a local.
    ck(
        unsafe { sys::cuEventElapsedTime_v2(&mut ms, start.cu_event(), end.cu_event()) },
        "cuEventElapsedTime",
    )?;
    Ok(ms)
}

/// `cuStreamUpdateCaptureDependencies(stream, NULL, 0, SET)`: a capturing stream continues with
/// no dependencies (NCCL's strong-stream acquire).
pub fn clear_capture_dependencies(stream: &CudaStream) -> Result<(), WorkloadError> {
    // SAFETY: live stream; an empty dependency list.
    ck(
        unsafe {
            sys::cuStreamUpdateCaptureDependencies_v2(
                stream.cu_stream(),
                null_mut(),
                null(),
                0,
                SET_DEPS,
            )
        },
        "cuStreamUpdateCaptureDependencies",
    )
}

/// NCCL's recordEventOnStream inside a capture: an explicit event-record node on `event` after
/// `stream`'s current capture dependencies, then `stream` advanced to that node. Errors when
/// `stream` is not capturing.
pub fn append_event_record_node(
    stream: &CudaStream,
    event: &CudaEvent,
) -> Result<(), WorkloadError> {
    let c = stream.cu_stream();
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut graph: CUgraph = null_mut();
    let mut deps: *const CUgraphNode = null();
    let mut nd: usize = 0;
    // SAFETY: out-pointers to locals; the returned array is copied before the next driver call.
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
            return Err(WorkloadError::Config(format!(
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
    // SAFETY: `graph` is the live capture graph of `stream` (checked active above); `node` and
    // `deps` are valid for the calls.
    unsafe {
        ck(
            sys::cuGraphAddEventRecordNode(&mut node, graph, null(), 0, event.cu_event()),
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
        )
    }
}
