//! One rank's HT-decode step on the GPU ([`HtDecode`]): the kernels of `kernels/ht_decode.cu`
//! compiled by NVRTC, this rank's inputs and every device buffer, and the enqueue methods of
//! one step (see [`super`] for the step's parts).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaModule, CudaSlice, CudaStream};
use cudarc::nvrtc::Ptx;

use super::config::{BlockLayout, HtDecodeConfig, HtDecodeError, drv};
use super::reference::{
    self, CheckReport, DeviceOutputs, RankInputs, generate_inputs, reference_all_gather,
    reference_step,
};
use crate::workload::cuda::{self, KernelArg};

/// The CUDA source of every HT-decode kernel.
pub const KERNEL_SOURCE: &str = include_str!("../../../kernels/ht_decode.cu");

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

const CONVERT_THREADS: u32 = 256;
const CONVERT_MAX_BLOCKS: usize = 4096;
/// Threads of `preprocess_metadata`: one warp per expert, at least 2 warps.
const PREPROCESS_THREADS: u32 = 256;
const COPY_THREADS: u32 = 128;
const COMBINE_THREADS: u32 = 128;
/// Byte written over outputs before a checked step, so unwritten elements fail the check.
pub const POISON_BYTE: u8 = 0xAB;

/// Whether an NVRTC library can be loaded (cudarc panics if it is missing).
pub fn nvrtc_available() -> bool {
    cuda::nvrtc_present()
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
    let code = cuda::nvrtc::compile(KERNEL_SOURCE, "ht_decode.cu", arch)?;
    cache
        .lock()
        .map_err(|_| poisoned())?
        .insert(arch.to_string(), code.clone());
    Ok(code)
}

fn poisoned() -> HtDecodeError {
    HtDecodeError::Nvrtc("PTX cache lock poisoned".into())
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
    f_convert: cuda::Kernel,
    f_preprocess: cuda::Kernel,
    f_dispatch: cuda::Kernel,
    f_standin: cuda::Kernel,
    f_combine: cuda::Kernel,
    inputs: RankInputs,
    buf: Buffers,
}

/// Allocates `len` elements (at least one) on `stream`, uninitialised (plain numbers only;
/// every buffer is written — upload, memset or kernel — before it is read).
fn alloc<T: cuda::PlainNumber>(
    stream: &Arc<CudaStream>,
    len: usize,
    what: &'static str,
) -> Result<CudaSlice<T>, HtDecodeError> {
    cuda::alloc_uninit::<T>(stream, len).map_err(drv(what))
}

/// Compiles the kernels for the context's device (the newest NVRTC target that loads) and
/// loads them: the module and the target it was built for.
fn load_module(ctx: &Arc<CudaContext>) -> Result<(Arc<CudaModule>, String), HtDecodeError> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(drv("compute capability"))?;
    let mut failures = Vec::new();
    for target in nvrtc_targets(major, minor) {
        let module = compile_kernels(&target)
            .and_then(|code| ctx.load_module(code).map_err(drv("cuModuleLoadData")));
        match module {
            Ok(m) => return Ok((m, target)),
            Err(HtDecodeError::Unavailable(why)) => return Err(HtDecodeError::Unavailable(why)),
            Err(e) => failures.push(format!("{target}: {e}")),
        }
    }
    Err(HtDecodeError::Nvrtc(failures.join("; ")))
}

/// The step's device buffers, by name (several share an element type: a tuple would let two
/// be swapped unnoticed).
struct Buffers {
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

/// Allocates every buffer on `stream` and uploads this rank's inputs and the gathered
/// buffer's `remote` maps.
fn upload_buffers(
    stream: &Arc<CudaStream>,
    cfg: &HtDecodeConfig,
    layout: &BlockLayout,
    inputs: &RankInputs,
    remote: &[u8],
) -> Result<Buffers, HtDecodeError> {
    let mut topk = alloc::<i32>(stream, inputs.topk.len(), "alloc topk")?;
    let mut weights = alloc::<f32>(stream, inputs.weights.len(), "alloc weights")?;
    let mut tokens = alloc::<u16>(stream, inputs.tokens.len(), "alloc tokens")?;
    let routing_map = alloc::<u8>(stream, cfg.routing_map_bytes(), "alloc routing map")?;
    let mut gathered = alloc::<u8>(stream, cfg.gathered_bytes(), "alloc gathered")?;
    let block = alloc::<i32>(stream, layout.len, "alloc preprocessing block")?;
    let sparse_to_dense = alloc::<i32>(
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
        .memcpy_htod(remote, &mut gathered)
        .map_err(drv("upload gathered"))?;
    Ok(Buffers {
        topk,
        weights,
        tokens,
        routing_map,
        gathered,
        block,
        sparse_to_dense,
        recv,
        out,
    })
}

impl HtDecode {
    /// Compiles the kernels for the stream's device, generates this rank's inputs from
    /// `cfg.seed`, allocates and uploads every buffer, and fills the gathered buffer's other
    /// ranks' slots with their reference maps (own slot poisoned). Synchronises `stream`.
    pub fn new(stream: &Arc<CudaStream>, cfg: HtDecodeConfig) -> Result<Self, HtDecodeError> {
        cfg.validate()?;
        let ctx = stream.context().clone();
        ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
        let (module, target) = load_module(&ctx)?;
        let load = |name: &'static str| cuda::Kernel::load(&module, name).map_err(drv(name));
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
        // Only buffers created in this window are untracked; all their uses are ordered on the
        // caller's streams, and `new` synchronises before returning.
        cuda::set_event_tracking(&ctx, false);
        let buffers = upload_buffers(stream, &cfg, &layout, &inputs, &remote);
        if tracking {
            // Restores the caller's setting; buffers created from here on are tracked.
            cuda::set_event_tracking(&ctx, true);
        }
        let buf = buffers?;
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
            buf,
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
        &self.buf.routing_map
    }

    /// This rank's routing map and the gathered buffer at once, for the all-gather.
    pub fn gather_buffers(&mut self) -> (&CudaSlice<u8>, &mut CudaSlice<u8>) {
        (&self.buf.routing_map, &mut self.buf.gathered)
    }

    /// The all-gather's receive buffer: R maps of [`Self::routing_map_bytes_per_rank`] bytes,
    /// rank-major. Keep its length; it is re-read at every [`Self::after_gather`].
    pub fn gathered_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.buf.gathered
    }

    /// The gathered buffer, read-only.
    pub fn gathered(&self) -> &CudaSlice<u8> {
        &self.buf.gathered
    }

    /// Bytes each rank contributes to the all-gather (M·ceil(E/8)).
    pub fn routing_map_bytes_per_rank(&self) -> usize {
        self.cfg.routing_map_bytes()
    }

    /// The combine output `[T × H]` bf16.
    pub fn output(&self) -> &CudaSlice<u16> {
        &self.buf.out
    }

    fn bind(&self, stream: &CudaStream) -> Result<(), HtDecodeError> {
        if **stream.context() != *self.ctx {
            return Err(HtDecodeError::WrongContext);
        }
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))
    }

    fn ptr<T>(slice: &CudaSlice<T>, stream: &CudaStream) -> u64 {
        // Untracked buffers: no event wait or record happens here.
        cuda::device_addr(slice, stream)
    }

    fn memset<T>(
        slice: &CudaSlice<T>,
        offset: usize,
        bytes: usize,
        value: u8,
        stream: &CudaStream,
        what: &'static str,
    ) -> Result<(), HtDecodeError> {
        cuda::memset_d8(slice, offset, bytes, value, stream).map_err(drv(what))
    }

    fn launch(
        &self,
        f: &cuda::Kernel,
        grid: usize,
        threads: u32,
        stream: &CudaStream,
        args: &[KernelArg],
        what: &'static str,
    ) -> Result<(), HtDecodeError> {
        let grid = u32::try_from(grid.max(1)).map_err(|_| {
            HtDecodeError::Config(format!("{what}: grid of {grid} blocks too large"))
        })?;
        // `args` follow the kernel's parameter list in kernels/ht_decode.cu, and every address
        // is a live allocation of this struct.
        cuda::launch_kernel(f, (grid, 1, 1), (threads, 1, 1), stream, args).map_err(drv(what))
    }

    /// Step part 1: memset of the preprocessing block (0) and of the sparse-to-dense map
    /// (0xFF), then `convert_topk_to_routing_map`. Capturable.
    pub fn prepare(&mut self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        self.bind(stream)?;
        let c = &self.cfg;
        Self::memset(
            &self.buf.block,
            0,
            self.layout.len * 4,
            0,
            stream,
            "memset preprocessing block",
        )?;
        Self::memset(
            &self.buf.sparse_to_dense,
            0,
            c.max_tokens * c.experts * 4,
            0xFF,
            stream,
            "memset sparse-to-dense",
        )?;

        let topk = Self::ptr(&self.buf.topk, stream);
        let map = Self::ptr(&self.buf.routing_map, stream);
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
        let args = [
            KernelArg::U64(topk),
            KernelArg::I32(t),
            KernelArg::I32(k),
            KernelArg::I32(e),
            KernelArg::I32(m),
            KernelArg::I32(b),
            KernelArg::U64(map),
        ];
        self.launch(
            &self.f_convert,
            grid,
            CONVERT_THREADS,
            stream,
            &args,
            KERNEL_NAMES[0],
        )
    }

    /// Single-GPU stand-in for the routing all-gather: copies this rank's map into its slot
    /// of the gathered buffer (the other slots hold the other ranks' maps since [`Self::new`]).
    /// One device-to-device memcpy; capturable.
    pub fn emulate_all_gather(&mut self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        self.bind(stream)?;
        let bytes = self.cfg.routing_map_bytes();
        if self.buf.gathered.len() < self.cfg.gathered_bytes() {
            return Err(HtDecodeError::Config(
                "gathered buffer was replaced by a smaller one".into(),
            ));
        }
        cuda::memcpy_dtod(
            &mut self.buf.gathered,
            self.cfg.rank * bytes,
            &self.buf.routing_map,
            0,
            bytes,
            stream,
        )
        .map_err(drv("memcpy routing map → gathered"))
    }

    /// Step part 2, after the all-gather: `preprocess_metadata`, `dispatch`,
    /// `expert_standin` (if enabled), `combine`. Capturable.
    pub fn after_gather(&mut self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        self.bind(stream)?;
        if self.buf.gathered.len() < self.cfg.gathered_bytes() {
            return Err(HtDecodeError::Config(
                "gathered buffer was replaced by a smaller one".into(),
            ));
        }
        self.launch_preprocess(stream)?;
        self.launch_dispatch_and_combine(stream)
    }

    /// The step's scalar arguments as the kernels take them: tokens, top-k, experts, ranks,
    /// this rank, max tokens, bytes per row, hidden.
    fn int_args(&self) -> (i32, i32, i32, i32, i32, i32, i32, i32) {
        let c = &self.cfg;
        (
            as_i32(c.tokens),
            as_i32(c.top_k),
            as_i32(c.experts),
            as_i32(c.ranks),
            as_i32(c.rank),
            as_i32(c.max_tokens),
            as_i32(c.bytes_per_row()),
            as_i32(c.hidden),
        )
    }

    /// The address of `ints` 32-bit words into the preprocessing block.
    fn block_at(&self, stream: &Arc<CudaStream>, ints: usize) -> u64 {
        Self::ptr(&self.buf.block, stream) + (ints * 4) as u64
    }

    /// `preprocess_metadata`: the routing maps gathered → counts, offsets, sparse-to-dense.
    fn launch_preprocess(&self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        let (t, k, e, r, rank, m, b, _) = self.int_args();
        let l = &self.layout;
        let at = |ints: usize| self.block_at(stream, ints);
        let warps = (PREPROCESS_THREADS / 32) as usize;
        let args = [
            KernelArg::U64(Self::ptr(&self.buf.gathered, stream)),
            KernelArg::U64(Self::ptr(&self.buf.topk, stream)),
            KernelArg::I32(t),
            KernelArg::I32(k),
            KernelArg::I32(e),
            KernelArg::I32(r),
            KernelArg::I32(rank),
            KernelArg::I32(m),
            KernelArg::I32(b),
            KernelArg::U64(at(0)),
            KernelArg::U64(at(l.counts)),
            KernelArg::U64(at(l.offsets)),
            KernelArg::U64(at(l.local_counts)),
            KernelArg::U64(at(l.local_offsets)),
            KernelArg::U64(at(l.rank_counts)),
            KernelArg::U64(at(l.rank_prefix)),
            KernelArg::U64(Self::ptr(&self.buf.sparse_to_dense, stream)),
        ];
        let grid = self.cfg.experts.div_ceil(warps);
        self.launch(
            &self.f_preprocess,
            grid,
            PREPROCESS_THREADS,
            stream,
            &args,
            KERNEL_NAMES[1],
        )
    }

    /// `dispatch`, `expert_standin` (if enabled) and `combine`.
    fn launch_dispatch_and_combine(&self, stream: &Arc<CudaStream>) -> Result<(), HtDecodeError> {
        let c = &self.cfg;
        let (t, k, e, _, _, _, _, h) = self.int_args();
        let topk = Self::ptr(&self.buf.topk, stream);
        let s2d = Self::ptr(&self.buf.sparse_to_dense, stream);
        let recv = Self::ptr(&self.buf.recv, stream);
        let args = [
            KernelArg::U64(Self::ptr(&self.buf.tokens, stream)),
            KernelArg::U64(topk),
            KernelArg::U64(s2d),
            KernelArg::I32(t),
            KernelArg::I32(k),
            KernelArg::I32(e),
            KernelArg::I32(h),
            KernelArg::U64(recv),
        ];
        let pairs = c.recv_rows();
        self.launch(
            &self.f_dispatch,
            pairs,
            COPY_THREADS,
            stream,
            &args,
            KERNEL_NAMES[2],
        )?;

        if c.expert_standin {
            let args = [
                KernelArg::U64(recv),
                KernelArg::U64(self.block_at(stream, self.layout.local_offsets)),
                KernelArg::I32(e),
                KernelArg::I32(h),
            ];
            self.launch(
                &self.f_standin,
                pairs,
                COPY_THREADS,
                stream,
                &args,
                KERNEL_NAMES[3],
            )?;
        }

        let args = [
            KernelArg::U64(recv),
            KernelArg::U64(topk),
            KernelArg::U64(Self::ptr(&self.buf.weights, stream)),
            KernelArg::U64(s2d),
            KernelArg::I32(t),
            KernelArg::I32(k),
            KernelArg::I32(e),
            KernelArg::I32(h),
            KernelArg::U64(Self::ptr(&self.buf.out, stream)),
        ];
        self.launch(
            &self.f_combine,
            c.tokens,
            COMBINE_THREADS,
            stream,
            &args,
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
        let p = POISON_BYTE;
        let what = "poison outputs";
        let map = &self.buf.routing_map;
        Self::memset(map, 0, map.num_bytes(), p, stream, what)?;
        let own_bytes = self.cfg.routing_map_bytes();
        Self::memset(&self.buf.gathered, own, own_bytes, p, stream, what)?;
        Self::memset(
            &self.buf.block,
            0,
            self.buf.block.num_bytes(),
            p,
            stream,
            what,
        )?;
        let s2d = &self.buf.sparse_to_dense;
        Self::memset(s2d, 0, s2d.num_bytes(), p, stream, what)?;
        Self::memset(
            &self.buf.recv,
            0,
            self.buf.recv.num_bytes(),
            p,
            stream,
            what,
        )?;
        Self::memset(&self.buf.out, 0, self.buf.out.num_bytes(), p, stream, what)?;
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
            routing_map: get_u8(&self.buf.routing_map, c.routing_map_bytes())?,
            gathered: get_u8(&self.buf.gathered, c.gathered_bytes())?,
            block: get_i32(&self.buf.block, self.layout.len)?,
            sparse_to_dense: get_i32(&self.buf.sparse_to_dense, c.max_tokens * c.experts)?,
            recv: get_u16(&self.buf.recv, c.recv_rows() * c.hidden)?,
            out: get_u16(&self.buf.out, c.tokens * c.hidden)?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::htdecode::MAX_TOP_K;

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
    #[ignore = "needs libnvrtc on the library path (no GPU)"]
    fn ht_decode_kernels_compile_with_nvrtc() {
        assert!(nvrtc_available(), "no NVRTC library on the library path");
        match compile_kernels("compute_1") {
            Err(e @ HtDecodeError::Compile(_)) => {
                assert!(e.to_string().contains("compute_1"), "{e}")
            }
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
            if let Some(dir) = crate::settings::Setting::DumpPtx.read_os() {
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
}
