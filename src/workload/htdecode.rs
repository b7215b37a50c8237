//! The HT-decode workload: nccl_ep's `ncclEpUpdateHandle` + dispatch + combine for one rank,
//! as CUDA kernels (`kernels/ht_decode.cu`) compiled at run time by NVRTC.
//!
//! One step, enqueued on one stream, capturable in a CUDA graph (no allocation, no
//! synchronisation, no event inside the enqueue methods):
//!
//! 1. [`HtDecode::prepare`]: memset of the preprocessing block to 0, memset of the
//!    sparse-to-dense map to 0xFF, `convert_topk_to_routing_map`;
//! 2. the routing all-gather of [`HtDecode::routing_map`] into [`HtDecode::gathered_mut`]
//!    (`ranks` × [`HtDecode::routing_map_bytes_per_rank`] bytes, rank-major) by a collective
//!    backend, or [`HtDecode::emulate_all_gather`] on one GPU;
//! 3. [`HtDecode::after_gather`]: `preprocess_metadata`, `dispatch`, `expert_standin`
//!    (optional), `combine`.
//!
//! Inputs come from a seeded RNG per rank ([`super::reference::generate_inputs`]); every rank
//! of a run must use the same [`HtDecodeConfig::seed`], so that the gathered maps are the
//! ones [`super::reference::reference_all_gather`] rebuilds.
//!
//! The device buffers are allocated with cudarc's event tracking switched off, so no cudarc
//! call adds event records or waits around our launches (they would show up as extra nodes
//! and gaps in the very traces this crate analyses). The price: ordering between streams is
//! the caller's job, as with plain CUDA.
//!
//! Correctness on a GPU: `cargo test --release ht_decode -- --nocapture`, or
//! [`run_correctness_check`] from the release binary (no Rust toolchain needed).

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DriverError, result,
    sys,
};
use cudarc::nvrtc::Ptx;

use super::reference::{
    self, BlockLayout, CheckReport, DeviceOutputs, RankInputs, generate_inputs,
    reference_all_gather, reference_step,
};

/// The CUDA source of every HT-decode kernel.
pub const KERNEL_SOURCE: &str = include_str!("../../kernels/ht_decode.cu");

const KERNEL_NAMES: [&str; 5] = [
    "convert_topk_to_routing_map",
    "preprocess_metadata",
    "dispatch",
    "expert_standin",
    "combine",
];

/// Names of the kernels of one step, in launch order (`expert_standin` only when enabled).
pub fn kernel_names() -> &'static [&'static str] {
    &KERNEL_NAMES
}

/// Largest top-k the combine kernel supports (its `MAX_TOP_K`).
pub const MAX_TOP_K: usize = 64;
const CONVERT_THREADS: u32 = 256;
const CONVERT_MAX_BLOCKS: usize = 4096;
/// Threads of `preprocess_metadata`: one warp per expert, at least 2 warps.
const PREPROCESS_THREADS: u32 = 256;
const COPY_THREADS: u32 = 128;
const COMBINE_THREADS: u32 = 128;
/// Byte written over outputs before a checked step, so unwritten elements fail the check.
pub const POISON_BYTE: u8 = 0xAB;

/// Errors of the HT-decode workload.
#[derive(Debug, thiserror::Error)]
pub enum HtDecodeError {
    #[error("invalid HT decode config: {0}")]
    Config(String),
    #[error("CUDA driver error in {what}: {source}")]
    Driver {
        what: &'static str,
        #[source]
        source: DriverError,
    },
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    #[error("CUDA unavailable: {0}")]
    Unavailable(String),
    #[error("the stream belongs to another CUDA context than this HtDecode's")]
    WrongContext,
}

fn drv(what: &'static str) -> impl FnOnce(DriverError) -> HtDecodeError {
    move |source| HtDecodeError::Driver { what, source }
}

/// Shape and inputs of one rank's HT-decode step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtDecodeConfig {
    /// Tokens of this step, T (1…512 in the sweep).
    pub tokens: usize,
    /// Hidden size H.
    pub hidden: usize,
    /// Experts per token K.
    pub top_k: usize,
    /// Experts E; rank r owns experts `r·E/R .. (r+1)·E/R`.
    pub experts: usize,
    /// Ranks R.
    pub ranks: usize,
    /// Rows of the routing map, M ≥ T (rows ≥ T are zero).
    pub max_tokens: usize,
    /// Run the `expert_standin` kernel (scale expert e's rows by 0.01·(e+1)).
    pub expert_standin: bool,
    /// This rank, `< ranks`.
    pub rank: usize,
    /// Base seed of every rank's inputs (the same on all ranks of a run).
    pub seed: u64,
}

impl Default for HtDecodeConfig {
    fn default() -> Self {
        HtDecodeConfig {
            tokens: 1,
            hidden: 7168,
            top_k: 8,
            experts: 256,
            ranks: 8,
            max_tokens: 1,
            expert_standin: true,
            rank: 0,
            seed: 0x005e_ed0f_47de_c0de,
        }
    }
}

impl HtDecodeConfig {
    /// The default config with T = M = `tokens`.
    pub fn with_tokens(tokens: usize) -> Self {
        HtDecodeConfig {
            tokens,
            max_tokens: tokens,
            ..Default::default()
        }
    }

    /// Bytes of one routing-map row, ceil(E/8).
    pub fn bytes_per_row(&self) -> usize {
        self.experts.div_ceil(8)
    }

    /// Bytes of one rank's routing map, M·ceil(E/8).
    pub fn routing_map_bytes(&self) -> usize {
        self.max_tokens * self.bytes_per_row()
    }

    /// Bytes of the gathered maps, R·M·ceil(E/8).
    pub fn gathered_bytes(&self) -> usize {
        self.ranks * self.routing_map_bytes()
    }

    /// Rows of the receive buffer, T·K.
    pub fn recv_rows(&self) -> usize {
        self.tokens * self.top_k
    }

    /// This rank's experts.
    pub fn local_experts(&self) -> Range<usize> {
        let per = self.experts / self.ranks.max(1);
        self.rank * per..(self.rank + 1) * per
    }

    /// Checks the shape; every device element count must fit the kernels' `int`s.
    pub fn validate(&self) -> Result<(), HtDecodeError> {
        let bad = |m: String| Err(HtDecodeError::Config(m));
        if self.tokens == 0 {
            return bad("tokens must be ≥ 1".into());
        }
        if self.max_tokens < self.tokens {
            return bad(format!(
                "max_tokens {} < tokens {}",
                self.max_tokens, self.tokens
            ));
        }
        if self.hidden == 0 || self.experts == 0 || self.ranks == 0 {
            return bad("hidden, experts and ranks must be ≥ 1".into());
        }
        if self.top_k == 0 || self.top_k > self.experts || self.top_k > MAX_TOP_K {
            return bad(format!(
                "top_k {} must be in 1..={}",
                self.top_k,
                self.experts.min(MAX_TOP_K)
            ));
        }
        if !self.experts.is_multiple_of(self.ranks) {
            return bad(format!(
                "experts {} not divisible by ranks {}",
                self.experts, self.ranks
            ));
        }
        if self.rank >= self.ranks {
            return bad(format!("rank {} ≥ ranks {}", self.rank, self.ranks));
        }
        let limit = i32::MAX as u128;
        let sizes = [
            (
                "gathered bytes",
                self.ranks as u128 * self.routing_map_bytes() as u128,
            ),
            (
                "sparse-to-dense entries",
                self.max_tokens as u128 * self.experts as u128,
            ),
            (
                "receive elements",
                self.recv_rows() as u128 * self.hidden as u128,
            ),
            ("token elements", self.tokens as u128 * self.hidden as u128),
            (
                "preprocessing block ints",
                BlockLayout::new(self.experts, self.ranks).len as u128,
            ),
        ];
        for (what, n) in sizes {
            if n > limit {
                return bad(format!("{what} = {n} exceed i32"));
            }
        }
        Ok(())
    }
}

/// Whether a CUDA driver and at least one device are present, checked without letting
/// cudarc's loader panic: `libcuda.so.1` is opened with libloading first.
pub fn cuda_available() -> Result<usize, String> {
    // SAFETY: loading the CUDA driver runs only its initialisers; the handle is dropped.
    let lib = unsafe { libloading::Library::new("libcuda.so.1") };
    if let Err(e) = lib {
        return Err(format!("cannot load libcuda.so.1: {e}"));
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(n as usize),
        Ok(_) => Err("no CUDA device".into()),
        Err(e) => Err(format!("cuInit/cuDeviceGetCount: {e}")),
    }
}

/// Whether an NVRTC library can be loaded (cudarc panics if it is missing).
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// NVRTC targets tried for a compute capability, in order: a CUBIN (`sm_XY`), then PTX
/// (`compute_XY`).
pub fn nvrtc_targets(major: i32, minor: i32) -> [String; 2] {
    [
        format!("sm_{major}{minor}"),
        format!("compute_{major}{minor}"),
    ]
}

/// Compiles [`KERNEL_SOURCE`] with NVRTC for `arch`; cached per arch. `sm_XY` gives a CUBIN
/// (loads under CUDA minor-version compatibility even when this NVRTC is newer than the
/// driver), `compute_XY` gives PTX (JIT-compiled by the driver, which must be at least as new
/// as this NVRTC).
pub fn compile_kernels(arch: &str) -> Result<Ptx, HtDecodeError> {
    static CACHE: OnceLock<Mutex<HashMap<String, Ptx>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(p) = cache.lock().map_err(|_| poisoned())?.get(arch) {
        return Ok(p.clone());
    }
    if !nvrtc_available() {
        return Err(HtDecodeError::Unavailable(
            "no NVRTC library (libnvrtc.so*) on the library path".into(),
        ));
    }
    let code = nvrtc_compile(arch)?;
    cache
        .lock()
        .map_err(|_| poisoned())?
        .insert(arch.to_string(), code.clone());
    Ok(code)
}

fn nvrtc_compile(arch: &str) -> Result<Ptx, HtDecodeError> {
    use cudarc::nvrtc::{result as nv, sys as nvsys};
    struct Program(nvsys::nvrtcProgram);
    impl Drop for Program {
        fn drop(&mut self) {
            // SAFETY: created by create_program and destroyed once, here.
            let _ = unsafe { nv::destroy_program(self.0) };
        }
    }
    let err =
        |what: &str, e: nv::NvrtcError| HtDecodeError::Nvrtc(format!("{what} ({arch}): {e:?}"));
    let src = CString::new(KERNEL_SOURCE).expect("kernel source has no NUL");
    let name = CString::new("ht_decode.cu").expect("no NUL");
    let prog = Program(nv::create_program(&src, Some(&name)).map_err(|e| err("create", e))?);
    let options = [format!("--gpu-architecture={arch}")];
    // SAFETY: prog is a live program; `src` and `name` outlive it.
    if let Err(e) = unsafe { nv::compile_program(prog.0, &options) } {
        // SAFETY: prog is live.
        let log = unsafe { nv::get_program_log(prog.0) }
            .map(|l| {
                let bytes: Vec<u8> = l
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        return Err(HtDecodeError::Nvrtc(format!(
            "compile ({arch}, options {options:?}): {e:?}\n{log}"
        )));
    }
    if arch.starts_with("sm_") {
        let mut size = 0usize;
        // SAFETY: prog compiled; the buffer holds `size` bytes.
        unsafe { nvsys::nvrtcGetCUBINSize(prog.0, &mut size) }
            .result()
            .map_err(|e| err("nvrtcGetCUBINSize", e))?;
        let mut cubin = vec![0u8; size];
        unsafe { nvsys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) }
            .result()
            .map_err(|e| err("nvrtcGetCUBIN", e))?;
        Ok(Ptx::from_binary(cubin))
    } else {
        // SAFETY: prog compiled.
        let ptx = unsafe { nv::get_ptx(prog.0) }.map_err(|e| err("nvrtcGetPTX", e))?;
        let bytes: Vec<u8> = ptx
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Ok(Ptx::from_src(String::from_utf8_lossy(&bytes).into_owned()))
    }
}

fn poisoned() -> HtDecodeError {
    HtDecodeError::Nvrtc("PTX cache lock poisoned".into())
}

/// Pointer to a kernel argument for `cuLaunchKernel`.
fn arg<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

fn as_i32(n: usize) -> i32 {
    // validate() bounds every size passed to a kernel
    i32::try_from(n).expect("size checked by HtDecodeConfig::validate")
}

/// One rank's HT-decode step: the compiled module, its inputs and every device buffer.
pub struct HtDecode {
    cfg: HtDecodeConfig,
    layout: BlockLayout,
    ctx: Arc<CudaContext>,
    target: String,
    _module: Arc<CudaModule>,
    f_convert: CudaFunction,
    f_preprocess: CudaFunction,
    f_dispatch: CudaFunction,
    f_standin: CudaFunction,
    f_combine: CudaFunction,
    inputs: RankInputs,
    topk: CudaSlice<i32>,
    weights: CudaSlice<f32>,
    tokens: CudaSlice<u16>,
    routing_map: CudaSlice<u8>,
    gathered: CudaSlice<u8>,
    block: CudaSlice<i32>,
    sparse_to_dense: CudaSlice<i32>,
    recv: CudaSlice<u16>,
    out: CudaSlice<u16>,
}

/// Allocates `len` elements (at least one) on `stream`, uninitialised.
fn alloc<T: cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    len: usize,
    what: &'static str,
) -> Result<CudaSlice<T>, HtDecodeError> {
    // SAFETY: every buffer is written (upload, memset or kernel) before it is read.
    unsafe { stream.alloc::<T>(len.max(1)) }.map_err(drv(what))
}

impl HtDecode {
    /// Compiles the kernels for the stream's device, generates this rank's inputs from
    /// `cfg.seed`, allocates and uploads every buffer, and fills the gathered buffer's other
    /// ranks' slots with their reference maps (own slot poisoned). Synchronises `stream`.
    pub fn new(stream: &Arc<CudaStream>, cfg: HtDecodeConfig) -> Result<Self, HtDecodeError> {
        cfg.validate()?;
        let ctx = stream.context().clone();
        ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(drv("compute capability"))?;
        let mut failures = Vec::new();
        let mut loaded = None;
        for target in nvrtc_targets(major, minor) {
            let module = compile_kernels(&target)
                .and_then(|code| ctx.load_module(code).map_err(drv("cuModuleLoadData")));
            match module {
                Ok(m) => {
                    loaded = Some((m, target));
                    break;
                }
                Err(HtDecodeError::Unavailable(why)) => {
                    return Err(HtDecodeError::Unavailable(why));
                }
                Err(e) => failures.push(format!("{target}: {e}")),
            }
        }
        let (module, target) = loaded.ok_or_else(|| HtDecodeError::Nvrtc(failures.join("; ")))?;
        let load = |name: &'static str| module.load_function(name).map_err(drv(name));
        let (f_convert, f_preprocess, f_dispatch, f_standin, f_combine) = (
            load(KERNEL_NAMES[0])?,
            load(KERNEL_NAMES[1])?,
            load(KERNEL_NAMES[2])?,
            load(KERNEL_NAMES[3])?,
            load(KERNEL_NAMES[4])?,
        );

        let inputs = generate_inputs(&cfg, cfg.rank);
        let layout = BlockLayout::new(cfg.experts, cfg.ranks);
        let mut remote = reference_all_gather(&cfg);
        let own = cfg.rank * cfg.routing_map_bytes()..(cfg.rank + 1) * cfg.routing_map_bytes();
        remote[own].fill(POISON_BYTE);

        // No event tracking on our buffers (see the module doc); restore the context's state.
        let tracking = ctx.is_event_tracking();
        // SAFETY: only buffers created in this window are untracked; we order all their uses
        // on the caller's streams and synchronise before returning.
        unsafe { ctx.disable_event_tracking() };
        let buffers = (|| -> Result<_, HtDecodeError> {
            let mut topk = alloc::<i32>(stream, inputs.topk.len(), "alloc topk")?;
            let mut weights = alloc::<f32>(stream, inputs.weights.len(), "alloc weights")?;
            let mut tokens = alloc::<u16>(stream, inputs.tokens.len(), "alloc tokens")?;
            let routing_map = alloc::<u8>(stream, cfg.routing_map_bytes(), "alloc routing map")?;
            let mut gathered = alloc::<u8>(stream, cfg.gathered_bytes(), "alloc gathered")?;
            let block = alloc::<i32>(stream, layout.len, "alloc preprocessing block")?;
            let s2d = alloc::<i32>(
                stream,
                cfg.max_tokens * cfg.experts,
                "alloc sparse-to-dense",
            )?;
            let recv = alloc::<u16>(stream, cfg.recv_rows() * cfg.hidden, "alloc recv")?;
            let out = alloc::<u16>(stream, cfg.tokens * cfg.hidden, "alloc out")?;
            stream
                .memcpy_htod(&inputs.topk, &mut topk)
                .map_err(drv("upload topk"))?;
            stream
                .memcpy_htod(&inputs.weights, &mut weights)
                .map_err(drv("upload weights"))?;
            stream
                .memcpy_htod(&inputs.tokens, &mut tokens)
                .map_err(drv("upload tokens"))?;
            stream
                .memcpy_htod(&remote, &mut gathered)
                .map_err(drv("upload gathered"))?;
            Ok((
                topk,
                weights,
                tokens,
                routing_map,
                gathered,
                block,
                s2d,
                recv,
                out,
            ))
        })();
        if tracking {
            // SAFETY: restores the caller's setting; buffers created from here on are tracked.
            unsafe { ctx.enable_event_tracking() };
        }
        let (topk, weights, tokens, routing_map, gathered, block, sparse_to_dense, recv, out) =
            buffers?;
        let mut me = HtDecode {
            cfg,
            layout,
            ctx,
            target,
            _module: module,
            f_convert,
            f_preprocess,
            f_dispatch,
            f_standin,
            f_combine,
            inputs,
            topk,
            weights,
            tokens,
            routing_map,
            gathered,
            block,
            sparse_to_dense,
            recv,
            out,
        };
        me.poison_outputs(stream)?;
        stream
            .synchronize()
            .map_err(drv("synchronize after setup"))?;
        Ok(me)
    }

    /// The config this step was built with.
    pub fn config(&self) -> &HtDecodeConfig {
        &self.cfg
    }

    /// The NVRTC target the loaded module was built for (`sm_90`: CUBIN, `compute_90`: PTX).
    pub fn nvrtc_target(&self) -> &str {
        &self.target
    }

    /// This rank's inputs (host copy).
    pub fn inputs(&self) -> &RankInputs {
        &self.inputs
    }

    /// This rank's routing map, the all-gather's send buffer (M·ceil(E/8) bytes).
    pub fn routing_map(&self) -> &CudaSlice<u8> {
        &self.routing_map
    }

    /// This rank's routing map and the gathered buffer at once, for the all-gather.
    pub fn gather_buffers(&mut self) -> (&CudaSlice<u8>, &mut CudaSlice<u8>) {
        (&self.routing_map, &mut self.gathered)
    }

    /// The all-gather's receive buffer: R maps of [`Self::routing_map_bytes_per_rank`] bytes,
    /// rank-major. Keep its length; it is re-read at every [`Self::after_gather`].
    pub fn gathered_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.gathered
    }

    /// The gathered buffer, read-only.
    pub fn gathered(&self) -> &CudaSlice<u8> {
        &self.gathered
    }

    /// Bytes each rank contributes to the all-gather (M·ceil(E/8)).
    pub fn routing_map_bytes_per_rank(&self) -> usize {
        self.cfg.routing_map_bytes()
    }

    /// The combine output `[T × H]` bf16.
    pub fn output(&self) -> &CudaSlice<u16> {
        &self.out
    }

    fn bind(&self, stream: &CudaStream) -> Result<(), HtDecodeError> {
        if **stream.context() != *self.ctx {
            return Err(HtDecodeError::WrongContext);
        }
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))
    }

    fn ptr<T>(slice: &CudaSlice<T>, stream: &CudaStream) -> u64 {
        // Untracked buffers: no event wait or record happens here.
        let (p, _sync) = slice.device_ptr(stream);
        p
    }

    fn memset(
        &self,
        ptr: u64,
        value: u8,
        bytes: usize,
        stream: &CudaStream,
        what: &'static str,
    ) -> Result<(), HtDecodeError> {
        // SAFETY: ptr..ptr+bytes lies inside one of our allocations.
        unsafe { result::memset_d8_async(ptr, value, bytes, stream.cu_stream()) }.map_err(drv(what))
    }

    fn launch(
        &self,
        f: &CudaFunction,
        grid: usize,
        threads: u32,
        stream: &CudaStream,
        args: &mut [*mut c_void],
        what: &'static str,
    ) -> Result<(), HtDecodeError> {
        let grid = u32::try_from(grid.max(1)).map_err(|_| {
            HtDecodeError::Config(format!("{what}: grid of {grid} blocks too large"))
        })?;
        // SAFETY: `args` point at locals of the caller that match the kernel's signature in
        // kernels/ht_decode.cu, and every pointer is a live allocation of this struct.
        unsafe {
            result::launch_kernel(
                f.cu_function(),
                (grid, 1, 1),
                (threads, 1, 1),
                0,
                stream.cu_stream(),
                args,
            )
        }
        .map_err(drv(what))
    }

    /// Step part 1: memset of the preprocessing block (0) and of the sparse-to-dense map
    /// (0xFF), then `convert_topk_to_routing_map`. Capturable.
    pub fn prepare(&mut self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        self.bind(stream)?;
        let c = &self.cfg;
        let block = Self::ptr(&self.block, stream);
        let s2d = Self::ptr(&self.sparse_to_dense, stream);
        self.memset(
            block,
            0,
            self.layout.len * 4,
            stream,
            "memset preprocessing block",
        )?;
        self.memset(
            s2d,
            0xFF,
            c.max_tokens * c.experts * 4,
            stream,
            "memset sparse-to-dense",
        )?;

        let topk = Self::ptr(&self.topk, stream);
        let map = Self::ptr(&self.routing_map, stream);
        let (t, k, e, m, b) = (
            as_i32(c.tokens),
            as_i32(c.top_k),
            as_i32(c.experts),
            as_i32(c.max_tokens),
            as_i32(c.bytes_per_row()),
        );
        let grid = c
            .routing_map_bytes()
            .div_ceil(CONVERT_THREADS as usize)
            .min(CONVERT_MAX_BLOCKS);
        let mut args = [
            arg(&topk),
            arg(&t),
            arg(&k),
            arg(&e),
            arg(&m),
            arg(&b),
            arg(&map),
        ];
        self.launch(
            &self.f_convert,
            grid,
            CONVERT_THREADS,
            stream,
            &mut args,
            KERNEL_NAMES[0],
        )
    }

    /// Single-GPU stand-in for the routing all-gather: copies this rank's map into its slot
    /// of the gathered buffer (the other slots hold the other ranks' maps since [`Self::new`]).
    /// One device-to-device memcpy; capturable.
    pub fn emulate_all_gather(&mut self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        self.bind(stream)?;
        let bytes = self.cfg.routing_map_bytes();
        if self.gathered.len() < self.cfg.gathered_bytes() {
            return Err(HtDecodeError::Config(
                "gathered buffer was replaced by a smaller one".into(),
            ));
        }
        let src = Self::ptr(&self.routing_map, stream);
        let dst = Self::ptr(&self.gathered, stream) + (self.cfg.rank * bytes) as u64;
        // SAFETY: both ranges lie inside our allocations.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }
            .map_err(drv("memcpy routing map → gathered"))
    }

    /// Step part 2, after the all-gather: `preprocess_metadata`, `dispatch`,
    /// `expert_standin` (if enabled), `combine`. Capturable.
    pub fn after_gather(&mut self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        self.bind(stream)?;
        let c = &self.cfg;
        if self.gathered.len() < c.gathered_bytes() {
            return Err(HtDecodeError::Config(
                "gathered buffer was replaced by a smaller one".into(),
            ));
        }
        let (t, k, e, r, rank, m, b, h) = (
            as_i32(c.tokens),
            as_i32(c.top_k),
            as_i32(c.experts),
            as_i32(c.ranks),
            as_i32(c.rank),
            as_i32(c.max_tokens),
            as_i32(c.bytes_per_row()),
            as_i32(c.hidden),
        );
        let gathered = Self::ptr(&self.gathered, stream);
        let topk = Self::ptr(&self.topk, stream);
        let weights = Self::ptr(&self.weights, stream);
        let tokens = Self::ptr(&self.tokens, stream);
        let s2d = Self::ptr(&self.sparse_to_dense, stream);
        let recv = Self::ptr(&self.recv, stream);
        let out = Self::ptr(&self.out, stream);
        let base = Self::ptr(&self.block, stream);
        let l = &self.layout;
        let at = |ints: usize| base + (ints * 4) as u64;
        let (header, counts, offsets, local_counts, local_offsets, rank_counts, rank_prefix) = (
            base,
            at(l.counts),
            at(l.offsets),
            at(l.local_counts),
            at(l.local_offsets),
            at(l.rank_counts),
            at(l.rank_prefix),
        );

        let warps = (PREPROCESS_THREADS / 32) as usize;
        let mut args = [
            arg(&gathered),
            arg(&topk),
            arg(&t),
            arg(&k),
            arg(&e),
            arg(&r),
            arg(&rank),
            arg(&m),
            arg(&b),
            arg(&header),
            arg(&counts),
            arg(&offsets),
            arg(&local_counts),
            arg(&local_offsets),
            arg(&rank_counts),
            arg(&rank_prefix),
            arg(&s2d),
        ];
        let grid = c.experts.div_ceil(warps);
        self.launch(
            &self.f_preprocess,
            grid,
            PREPROCESS_THREADS,
            stream,
            &mut args,
            KERNEL_NAMES[1],
        )?;

        let mut args = [
            arg(&tokens),
            arg(&topk),
            arg(&s2d),
            arg(&t),
            arg(&k),
            arg(&e),
            arg(&h),
            arg(&recv),
        ];
        let pairs = c.recv_rows();
        self.launch(
            &self.f_dispatch,
            pairs,
            COPY_THREADS,
            stream,
            &mut args,
            KERNEL_NAMES[2],
        )?;

        if c.expert_standin {
            let mut args = [arg(&recv), arg(&local_offsets), arg(&e), arg(&h)];
            self.launch(
                &self.f_standin,
                pairs,
                COPY_THREADS,
                stream,
                &mut args,
                KERNEL_NAMES[3],
            )?;
        }

        let mut args = [
            arg(&recv),
            arg(&topk),
            arg(&weights),
            arg(&s2d),
            arg(&t),
            arg(&k),
            arg(&e),
            arg(&h),
            arg(&out),
        ];
        self.launch(
            &self.f_combine,
            c.tokens,
            COMBINE_THREADS,
            stream,
            &mut args,
            KERNEL_NAMES[4],
        )
    }

    /// A whole single-GPU step: [`Self::prepare`], [`Self::emulate_all_gather`],
    /// [`Self::after_gather`]. Capturable.
    pub fn step_emulated(&mut self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        self.prepare(stream)?;
        self.emulate_all_gather(stream)?;
        self.after_gather(stream)
    }

    /// Fills every buffer a step writes with [`POISON_BYTE`] (this rank's slot of the
    /// gathered buffer included), so an element the step fails to write fails the check.
    /// Not for use inside a capture that is replayed as a timed step.
    pub fn poison_outputs(&mut self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        self.bind(stream)?;
        let own = self.cfg.rank * self.cfg.routing_map_bytes();
        let targets = [
            (
                Self::ptr(&self.routing_map, stream),
                self.routing_map.num_bytes(),
            ),
            (
                Self::ptr(&self.gathered, stream) + own as u64,
                self.cfg.routing_map_bytes(),
            ),
            (Self::ptr(&self.block, stream), self.block.num_bytes()),
            (
                Self::ptr(&self.sparse_to_dense, stream),
                self.sparse_to_dense.num_bytes(),
            ),
            (Self::ptr(&self.recv, stream), self.recv.num_bytes()),
            (Self::ptr(&self.out, stream), self.out.num_bytes()),
        ];
        for (p, n) in targets {
            self.memset(p, POISON_BYTE, n, stream, "poison outputs")?;
        }
        Ok(())
    }

    /// Synchronises `stream` and downloads every buffer a step writes.
    pub fn download(&self, stream: &Arc<CudaStream>) -> Result<DeviceOutputs, HtDecodeError> {
        self.bind(stream)?;
        stream
            .synchronize()
            .map_err(drv("synchronize before download"))?;
        let c = &self.cfg;
        let get_u8 =
            |s: &CudaSlice<u8>, n: usize| stream.clone_dtoh(&s.slice(..n)).map_err(drv("download"));
        let get_i32 = |s: &CudaSlice<i32>, n: usize| {
            stream.clone_dtoh(&s.slice(..n)).map_err(drv("download"))
        };
        let get_u16 = |s: &CudaSlice<u16>, n: usize| {
            stream.clone_dtoh(&s.slice(..n)).map_err(drv("download"))
        };
        Ok(DeviceOutputs {
            routing_map: get_u8(&self.routing_map, c.routing_map_bytes())?,
            gathered: get_u8(&self.gathered, c.gathered_bytes())?,
            block: get_i32(&self.block, self.layout.len)?,
            sparse_to_dense: get_i32(&self.sparse_to_dense, c.max_tokens * c.experts)?,
            recv: get_u16(&self.recv, c.recv_rows() * c.hidden)?,
            out: get_u16(&self.out, c.tokens * c.hidden)?,
        })
    }

    /// Downloads the step's buffers (synchronising `stream`) and compares them with the CPU
    /// reference of this rank's step: routing map, gathered maps, metadata, sparse-to-dense
    /// map and receive buffer exactly; combine output within relative L2 ≤ 1e-2. Poison the
    /// outputs ([`Self::poison_outputs`]) before the step so unwritten elements fail.
    pub fn check_against_reference(
        &self,
        stream: &Arc<CudaStream>,
    ) -> Result<CheckReport, HtDecodeError> {
        let got = self.download(stream)?;
        let want = reference_step(&self.cfg, &self.inputs, &reference_all_gather(&self.cfg));
        Ok(reference::compare(&self.cfg, &want, &got))
    }
}

/// Runs the step for each T in `tokens` on GPU 0 (default shape: H 7168, K 8, E 256, R 8,
/// M = T; the rank varies with T) with the single-GPU all-gather stand-in, eagerly (two
/// steps back to back, so the memsets' reset is exercised) and as a captured CUDA graph
/// launched twice, checking each against the CPU reference. Returns one line per T; `Err`
/// holds the same lines when any check fails or CUDA is missing.
pub fn run_correctness_check(tokens: &[usize]) -> Result<String, String> {
    let n = cuda_available()?;
    let ctx = CudaContext::new(0).map_err(|e| format!("CudaContext::new(0): {e}"))?;
    let name = ctx.name().unwrap_or_else(|_| "?".into());
    let cc = ctx.compute_capability().map_err(|e| e.to_string())?;
    // a created stream: the legacy default stream cannot be captured
    let stream = ctx.new_stream().map_err(|e| format!("new stream: {e}"))?;
    let mut lines = vec![format!(
        "ht_decode correctness on {name} (cc {}.{}, {n} device(s))",
        cc.0, cc.1
    )];
    let mut all_ok = true;
    for (i, &t) in tokens.iter().enumerate() {
        let mut cfg = HtDecodeConfig::with_tokens(t);
        cfg.rank = (i * 3) % cfg.ranks;
        let line = match check_one(&stream, cfg.clone()) {
            Ok((target, eager, graph)) => {
                all_ok &= eager.passed() && graph.passed();
                format!(
                    "T={t} rank={} R={} H={} K={} E={} ({target}): eager {} | graph {}",
                    cfg.rank,
                    cfg.ranks,
                    cfg.hidden,
                    cfg.top_k,
                    cfg.experts,
                    eager.summary(),
                    graph.summary()
                )
            }
            Err(e) => {
                all_ok = false;
                format!("T={t}: ERROR {e}")
            }
        };
        lines.push(line);
    }
    let text = lines.join("\n");
    if all_ok { Ok(text) } else { Err(text) }
}

fn check_one(
    stream: &Arc<CudaStream>,
    cfg: HtDecodeConfig,
) -> Result<(String, CheckReport, CheckReport), HtDecodeError> {
    let mut dec = HtDecode::new(stream, cfg)?;
    // eager: two steps back to back
    dec.poison_outputs(stream)?;
    dec.step_emulated(stream)?;
    dec.step_emulated(stream)?;
    let eager = dec.check_against_reference(stream)?;

    // graph: capture one step, launch it twice
    dec.poison_outputs(stream)?;
    stream
        .synchronize()
        .map_err(drv("synchronize before capture"))?;
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(drv("cuStreamBeginCapture"))?;
    let enqueued = dec.step_emulated(stream);
    let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    enqueued?;
    let graph = ended
        .map_err(drv("cuStreamEndCapture / instantiate"))?
        .ok_or_else(|| HtDecodeError::Config("stream capture produced no graph".into()))?;
    graph.launch().map_err(drv("cuGraphLaunch"))?;
    graph.launch().map_err(drv("cuGraphLaunch"))?;
    let graphed = dec.check_against_reference(stream)?;
    Ok((dec.nvrtc_target().to_string(), eager, graphed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_matches_the_design() {
        let c = HtDecodeConfig::default();
        assert_eq!(
            (c.hidden, c.top_k, c.experts, c.ranks, c.tokens),
            (7168, 8, 256, 8, 1)
        );
        assert_eq!(c.max_tokens, 1);
        c.validate().unwrap();
        let c = HtDecodeConfig::with_tokens(512);
        assert_eq!(c.bytes_per_row(), 32);
        assert_eq!(c.routing_map_bytes(), 512 * 32);
        assert_eq!(c.gathered_bytes(), 8 * 512 * 32);
        assert_eq!(c.local_experts(), 0..32);
        c.validate().unwrap();
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let ok = HtDecodeConfig::with_tokens(8);
        for bad in [
            HtDecodeConfig {
                tokens: 0,
                ..ok.clone()
            },
            HtDecodeConfig {
                max_tokens: 7,
                ..ok.clone()
            },
            HtDecodeConfig {
                top_k: 0,
                ..ok.clone()
            },
            HtDecodeConfig {
                top_k: 65,
                experts: 512,
                ..ok.clone()
            },
            HtDecodeConfig {
                experts: 100,
                ..ok.clone()
            },
            HtDecodeConfig {
                rank: 8,
                ..ok.clone()
            },
            HtDecodeConfig {
                tokens: 1 << 20,
                max_tokens: 1 << 20,
                ..ok.clone()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(HtDecodeError::Config(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn kernel_names_appear_in_the_source_as_extern_c_kernels() {
        for name in kernel_names() {
            let decl = format!("extern \"C\" __global__ void {name}(");
            assert!(KERNEL_SOURCE.contains(&decl), "{name} not declared");
        }
        assert!(!KERNEL_SOURCE.contains("#include"));
        assert!(KERNEL_SOURCE.contains(&format!("#define MAX_TOP_K {MAX_TOP_K}")));
    }

    /// Compiles the kernels with NVRTC when a libnvrtc is on the library path (no GPU
    /// needed): `LD_LIBRARY_PATH=/path/to/nvrtc/lib cargo test nvrtc`.
    #[test]
    fn ht_decode_kernels_compile_with_nvrtc() {
        if !nvrtc_available() {
            eprintln!("skipped: no NVRTC library (ht_decode_kernels_compile_with_nvrtc)");
            return;
        }
        match compile_kernels("compute_1") {
            Err(HtDecodeError::Nvrtc(msg)) => assert!(msg.contains("compute_1"), "{msg}"),
            other => panic!("a bad arch must fail with an NVRTC error, got {other:?}"),
        }
        for arch in ["sm_80", "sm_90"] {
            let cubin = compile_kernels(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
            let bytes = cubin.as_bytes().map(<[u8]>::to_vec);
            assert!(bytes.is_none(), "binary code is not exposed as an image");
            assert!(
                format!("{cubin:?}").contains("Binary"),
                "{arch}: not a CUBIN"
            );
        }
        for arch in ["compute_80", "compute_90"] {
            let ptx = compile_kernels(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
            let text = ptx.to_src();
            if let Some(dir) = std::env::var_os("GAPSCOPE_DUMP_PTX") {
                let path = std::path::Path::new(&dir).join(format!("ht_decode.{arch}.ptx"));
                std::fs::write(&path, &text).unwrap();
            }
            for name in kernel_names() {
                assert!(
                    text.contains(&format!(".entry {name}(")),
                    "{arch}: no entry {name}"
                );
            }
        }
    }

    /// The GPU check, listed as ignored (visibly) where there is no GPU. Run it on a machine
    /// with a CUDA GPU and NVRTC: `cargo test --release ht_decode -- --ignored --nocapture`, or
    /// `gapscope check-kernels` from the release binary.
    #[test]
    #[ignore = "needs a CUDA GPU and NVRTC: cargo test --release ht_decode -- --ignored"]
    fn ht_decode_matches_cpu_reference_on_gpu() {
        if let Err(why) = cuda_available() {
            panic!("no CUDA GPU: {why}");
        }
        match run_correctness_check(&[1, 8, 512]) {
            Ok(text) => eprintln!("{text}"),
            Err(text) => panic!("HT decode does not match the CPU reference:\n{text}"),
        }
    }
}
