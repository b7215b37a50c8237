//! `gapscope run`: the HT-decode experiment (or emu.cu's step) swept over graph usage modes,
//! eager and graphed regimes, launch patterns and T, recorded under CUPTI into one trace.
//!
//! Every cell is a [`Cell`] of the trace: what was requested (regime, mode, T, launch pattern,
//! backend) plus the step period measured with CUDA events in chunks of steps, independently of
//! the trace. Steps are host step markers; the analysis derives the regime and the mode in
//! effect from the records and the DAG, never from these labels.

use super::collective::{GraphUsageMode, RoutingAllGather, RunnerError, open_context};
use super::emulated::{
    EmuObserver, EmuSetup, EmulatedAllGather, EmulatedConfig, LaunchPattern, capture_graph,
    run_emu_cell,
};
use super::htdecode::{HtDecode, HtDecodeConfig, HtDecodeError};
use super::nccl::{NcclAllGather, RankInfo};
use super::spin::EmuKernels;
use crate::record::cupti::{ApiCallbacks, CuptiError, Recorder, RecorderConfig};
use crate::trace::{Cell, DeviceInfo, Metadata, Source, Trace, TraceError, Versions};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Errors of a sweep; each displays as one line.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Runner(#[from] RunnerError),
    #[error("CUPTI: {0}")]
    Recorder(#[from] CuptiError),
    #[error("HT decode: {0}")]
    HtDecode(#[from] HtDecodeError),
    #[error(transparent)]
    Trace(#[from] TraceError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// nccl_ep-style HT decode: routing map, routing all-gather, preprocessing, dispatch, combine.
    HtDecode,
    /// examples/probe/emu.cu's step: spin 5 µs → collective stand-in → spin 10 µs → spin 5 µs.
    Emu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// nccl with ≥ 2 GPUs (or under a launcher), emulated with one.
    Auto,
    Emulated,
    Nccl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Launch {
    /// One executable graph replayed every step (steady state).
    Replay,
    /// A freshly instantiated executable graph per step (first launches).
    Fresh,
}

impl Launch {
    fn label(self) -> &'static str {
        match self {
            Launch::Replay => "replay",
            Launch::Fresh => "fresh",
        }
    }
}

/// What `gapscope run` sweeps.
#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    #[arg(long, value_enum, default_value_t = Workload::HtDecode)]
    pub workload: Workload,
    /// Tokens per step (T), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8,16,32,64,128,256,512"
    )]
    pub tokens: Vec<usize>,
    /// Graph usage modes, comma-separated (0, 1, 2).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    pub modes: Vec<u8>,
    /// Graph launch patterns, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "replay,fresh"
    )]
    pub launch: Vec<Launch>,
    /// Timed steps per cell.
    #[arg(long, default_value_t = 200)]
    pub steps: usize,
    /// Untimed eager steps before timing (graph replays are all recorded: the report shows
    /// first launches apart).
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Simulated ranks of the emulated all-gather.
    #[arg(long, default_value_t = 8)]
    pub ranks: usize,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// CUPTI activity buffer size in KiB (tiny values provoke dropped records).
    #[arg(long, default_value_t = 8192)]
    pub cupti_buffer_kib: usize,
    /// Most CUPTI activity buffers at once (0: no limit); with tiny buffers this provokes
    /// dropped records, which every report then shows.
    #[arg(long, default_value_t = 0)]
    pub cupti_max_buffers: usize,
    /// API calls that get a CUPTI callback: only those that build graphs (default), or all.
    #[arg(long, value_enum, default_value_t = ApiCallbacks::GraphBuilding)]
    pub cupti_api_callbacks: ApiCallbacks,
    /// Record every executed event record with its device timestamp (CUPTI KIND_CUDA_EVENT).
    #[arg(long)]
    pub cupti_event_records: bool,
    /// After recording, run every cell again untraced in the same process and report the
    /// traced/untraced CUDA-event period ratio.
    #[arg(long)]
    pub overhead: bool,
    /// NCCL ranks, one process and one GPU each, started by gapscope (default: every GPU when
    /// there are two or more). Under torchrun, srun or mpirun each launched process is one
    /// rank instead.
    #[arg(long, value_name = "N")]
    pub gpus: Option<usize>,
    /// Seconds a set of rank processes may run before it is stopped.
    #[arg(long, value_name = "S", default_value_t = 3600)]
    pub rank_timeout: u64,
    /// This process is one rank started by `gapscope run`: record and write the trace only.
    #[arg(long, hide = true)]
    pub rank_process: bool,
}

/// Largest T (tokens per step) the sweep accepts: decode steps are small; beyond this the
/// buffers grow past what the experiment is about.
pub const MAX_TOKENS: usize = 8192;
/// Most simulated ranks of the emulated all-gather.
pub const MAX_SIMULATED_RANKS: usize = 1024;
/// CUDA device ordinals are small.
pub const MAX_DEVICE: usize = 63;

impl SweepArgs {
    /// Refuses bad values before any work starts (GPU or not), one line each.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(&t) = self.tokens.iter().find(|&&t| t == 0 || t > MAX_TOKENS) {
            return Err(format!("--tokens {t}: T must be 1…{MAX_TOKENS}"));
        }
        if let Some(&m) = self.modes.iter().find(|&&m| m > 2) {
            return Err(format!("--modes {m}: graph usage modes are 0, 1 and 2"));
        }
        if self.tokens.is_empty() || self.modes.is_empty() || self.launch.is_empty() {
            return Err("--tokens, --modes and --launch need at least one value each".into());
        }
        if self.steps < 2 {
            return Err(format!(
                "--steps {}: at least 2 steps are needed for a period",
                self.steps
            ));
        }
        if self.ranks == 0 || self.ranks > MAX_SIMULATED_RANKS {
            return Err(format!(
                "--ranks {}: the emulated all-gather takes 1…{MAX_SIMULATED_RANKS} simulated ranks",
                self.ranks
            ));
        }
        if self.device > MAX_DEVICE {
            return Err(format!(
                "--device {}: CUDA device ordinals are 0…{MAX_DEVICE}",
                self.device
            ));
        }
        if self.gpus == Some(0) {
            return Err("--gpus 0: at least one rank is needed".into());
        }
        if self.cupti_buffer_kib == 0 {
            return Err("--cupti-buffer-kib 0: the buffer needs at least 1 KiB".into());
        }
        if self.rank_timeout == 0 {
            return Err("--rank-timeout 0: give the ranks at least a second".into());
        }
        Ok(())
    }

    /// The command line that makes a rank process run this sweep for `modes` into `output`.
    fn rank_command_line(&self, modes: &[u8], output: &Path) -> Vec<String> {
        fn value(v: &impl clap::ValueEnum) -> String {
            v.to_possible_value()
                .map(|p| p.get_name().to_owned())
                .unwrap_or_default()
        }
        let list = |v: Vec<String>| v.join(",");
        let mut a = vec![
            "run".to_owned(),
            "--rank-process".to_owned(),
            "-o".to_owned(),
            output.display().to_string(),
            "--workload".to_owned(),
            value(&self.workload),
            "--tokens".to_owned(),
            list(self.tokens.iter().map(usize::to_string).collect()),
            "--modes".to_owned(),
            list(modes.iter().map(u8::to_string).collect()),
            "--launch".to_owned(),
            list(self.launch.iter().map(value).collect()),
            "--steps".to_owned(),
            self.steps.to_string(),
            "--warmup".to_owned(),
            self.warmup.to_string(),
            "--backend".to_owned(),
            "nccl".to_owned(),
            "--cupti-buffer-kib".to_owned(),
            self.cupti_buffer_kib.to_string(),
            "--cupti-max-buffers".to_owned(),
            self.cupti_max_buffers.to_string(),
            "--cupti-api-callbacks".to_owned(),
            value(&self.cupti_api_callbacks),
        ];
        if self.cupti_event_records {
            a.push("--cupti-event-records".to_owned());
        }
        if self.overhead {
            a.push("--overhead".to_owned());
        }
        a
    }
}

/// Steps per CUDA-event timing chunk: each chunk gives one period sample.
const CHUNK: usize = 20;

/// True when a CUDA driver and at least one device are present (never panics).
pub fn gpu_available() -> bool {
    crate::record::cupti::ensure_cuda_driver().is_ok()
        && super::htdecode::cuda_available().is_ok_and(|n| n > 0)
}

fn cuda(call: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> RunnerError {
    move |e| RunnerError::cuda(call, e)
}

/// CUDA-event period samples (ns per step) over chunks of a timed loop.
struct ChunkTimer {
    events: Vec<CudaEvent>,
    steps: Vec<usize>,
}

impl ChunkTimer {
    fn new(ctx: &Arc<CudaContext>, steps: usize) -> Result<ChunkTimer, RunnerError> {
        let chunks = steps.div_ceil(CHUNK).max(1);
        let events = (0..=chunks)
            .map(|_| ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(cuda("cuEventCreate"))?;
        Ok(ChunkTimer {
            events,
            steps: Vec::new(),
        })
    }

    /// Records a boundary before timed step `i` (every CHUNK steps) — no host sync.
    fn boundary(&mut self, stream: &CudaStream, i: usize) -> Result<(), RunnerError> {
        if i.is_multiple_of(CHUNK) {
            let k = i / CHUNK;
            self.events[k]
                .record(stream)
                .map_err(cuda("cuEventRecord"))?;
            self.steps.push(i);
        }
        Ok(())
    }

    fn finish(mut self, stream: &CudaStream, total: usize) -> Result<Vec<f64>, RunnerError> {
        let k = self.steps.len();
        self.events[k]
            .record(stream)
            .map_err(cuda("cuEventRecord"))?;
        self.steps.push(total);
        self.events[k]
            .synchronize()
            .map_err(cuda("cuEventSynchronize"))?;
        let mut out = Vec::with_capacity(k);
        for c in 0..k {
            let ms = self.events[c]
                .elapsed_ms(&self.events[c + 1])
                .map_err(cuda("cuEventElapsedTime"))?;
            let n = self.steps[c + 1] - self.steps[c];
            if n > 0 {
                out.push(f64::from(ms) * 1e6 / n as f64);
            }
        }
        Ok(out)
    }
}

/// One HT decode step on `stream`; the backend opens its library-call scope itself.
fn ht_step(
    ht: &mut HtDecode,
    ag: &mut dyn RoutingAllGather,
    stream: &Arc<CudaStream>,
    capturing: bool,
) -> Result<(), RunnerError> {
    let as_runner = |e: HtDecodeError| RunnerError::Config(e.to_string());
    ht.prepare(stream).map_err(as_runner)?;
    let (send, recv) = ht.gather_buffers();
    ag.all_gather(stream, send, recv, capturing)?;
    ht.after_gather(stream).map_err(as_runner)?;
    if capturing {
        ag.end_of_capture_join(stream)?;
    }
    Ok(())
}

/// A cell to run: what is asked, and where its results go.
#[derive(Debug, Clone)]
struct CellPlan {
    tokens: usize,
    mode: GraphUsageMode,
    graphed: Option<Launch>,
}

impl CellPlan {
    fn requested(&self, backend: &str, ranks: usize) -> BTreeMap<String, serde_json::Value> {
        let mut r = BTreeMap::new();
        let regime = if self.graphed.is_some() {
            "graphed"
        } else {
            "eager"
        };
        r.insert("regime".into(), regime.into());
        r.insert(
            crate::trace::GRAPH_USAGE_MODE_KEY.into(),
            self.mode.as_u8().into(),
        );
        r.insert("tokens".into(), self.tokens.into());
        r.insert("backend".into(), backend.into());
        r.insert("ranks".into(), ranks.into());
        if let Some(l) = self.graphed {
            r.insert("launch".into(), l.label().into());
        }
        r
    }

    fn label(&self) -> String {
        match self.graphed {
            None => format!("eager mode={} T={}", self.mode.as_u8(), self.tokens),
            Some(l) => format!(
                "graphed mode={} T={} {}",
                self.mode.as_u8(),
                self.tokens,
                l.label()
            ),
        }
    }
}

/// The backend of the sweep.
enum Collective {
    Emulated(EmulatedAllGather),
    Nccl(Option<NcclAllGather>),
}

struct Bench {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: Option<EmuKernels>,
    collective: Collective,
    ranks: usize,
    /// This process's rank (NCCL backend; one rank otherwise).
    rank: RankInfo,
}

impl Bench {
    fn backend_label(&self) -> &'static str {
        match self.collective {
            Collective::Emulated(_) => "emulated",
            Collective::Nccl(_) => "nccl",
        }
    }

    /// The all-gather for `ht` in `mode`, with the recorder's scope hook when recording.
    fn all_gather(
        &mut self,
        ht: &HtDecode,
        mode: GraphUsageMode,
        recorder: Option<&Arc<Recorder>>,
    ) -> Result<&mut dyn RoutingAllGather, SweepError> {
        let ag: &mut dyn RoutingAllGather = match &mut self.collective {
            Collective::Emulated(e) => {
                e.set_mode(mode);
                e
            }
            Collective::Nccl(slot) => {
                if slot.as_ref().is_none_or(|c| c.mode() != mode) {
                    *slot = None;
                    *slot = Some(NcclAllGather::new(&self.ctx, mode, self.rank.clone())?);
                }
                slot.as_mut().expect("just created")
            }
        };
        let _ = ht;
        ag.set_scope_hook(recorder.map(|r| {
            let r = r.clone();
            Box::new(move |name: &str| -> super::collective::ScopeGuard {
                Box::new(r.library_call(name))
            }) as super::collective::ScopeHook
        }));
        Ok(ag)
    }
}

/// Runs one cell; returns CUDA-event period samples (ns per step).
fn run_cell(
    bench: &mut Bench,
    ht: &mut HtDecode,
    plan: &CellPlan,
    steps: usize,
    warmup: usize,
    recorder: Option<(&Arc<Recorder>, u32)>,
) -> Result<Vec<f64>, SweepError> {
    let stream = bench.stream.clone();
    let ctx = bench.ctx.clone();
    let ag = bench.all_gather(ht, plan.mode, recorder.map(|r| r.0))?;
    let mark = |i: usize| recorder.map(|(r, cell)| (r.step(cell), i));
    let mut timer = ChunkTimer::new(&ctx, steps)?;
    match plan.graphed {
        None => {
            for _ in 0..warmup {
                ht_step(ht, ag, &stream, false)?;
            }
            for i in 0..steps {
                timer.boundary(&stream, i)?;
                let _step = mark(i);
                ht_step(ht, ag, &stream, false)?;
            }
        }
        Some(launch) => {
            let graphs = if launch == Launch::Replay { 1 } else { steps };
            let mut execs = Vec::with_capacity(graphs);
            for _ in 0..graphs {
                let (exec, _) = capture_graph(&stream, || ht_step(ht, ag, &stream, true))?;
                execs.push(exec);
            }
            stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
            for i in 0..steps {
                timer.boundary(&stream, i)?;
                let _step = mark(i);
                execs[if launch == Launch::Replay { 0 } else { i }].launch(&stream)?;
            }
        }
    }
    let periods = timer.finish(&stream, steps)?;
    stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
    Ok(periods)
}

fn plans(args: &SweepArgs) -> Result<Vec<CellPlan>, SweepError> {
    let mut out = Vec::new();
    for &t in &args.tokens {
        for &m in &args.modes {
            let mode = GraphUsageMode::from_u8(m).ok_or_else(|| {
                RunnerError::Config(format!("graph usage mode {m}: use 0, 1 or 2"))
            })?;
            out.push(CellPlan {
                tokens: t,
                mode,
                graphed: None,
            });
            for &l in &args.launch {
                out.push(CellPlan {
                    tokens: t,
                    mode,
                    graphed: Some(l),
                });
            }
        }
    }
    Ok(out)
}

fn progress(total: usize, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} cells {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_owned());
    bar
}

fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    // A second handler (e.g. in tests) is not an error worth failing the run for.
    let _ = ctrlc::set_handler(move || f.store(true, Ordering::SeqCst));
    flag
}

fn metadata(
    ctx: &CudaContext,
    recorder: &Recorder,
    workload: BTreeMap<String, serde_json::Value>,
) -> Metadata {
    let driver = super::collective::check_cuda_driver()
        .ok()
        .map(|v| format!("CUDA {}.{} driver API", v / 1000, (v % 1000) / 10));
    let cupti = recorder.cupti_version();
    Metadata {
        tool: format!("gapscope {}", env!("CARGO_PKG_VERSION")),
        source: Source::Cupti,
        device: Some(DeviceInfo {
            name: ctx.name().unwrap_or_default(),
            index: ctx.ordinal() as u32,
            compute_capability: ctx
                .compute_capability()
                .map(|(a, b)| format!("{a}.{b}"))
                .unwrap_or_default(),
        }),
        versions: Versions {
            driver,
            cupti: Some(format!("API {cupti} ({})", recorder.cupti_path())),
            ..Versions::default()
        },
        rank: 0,
        world: 1,
        workload,
        ..Metadata::default()
    }
}

/// The trace file of rank `rank` of `world`: `trace.json` for one rank, else `trace-<rank>.json`.
fn rank_trace_name(rank: usize, world: usize) -> String {
    if world > 1 {
        format!("trace-{rank}.json")
    } else {
        "trace.json".to_owned()
    }
}

/// Rank processes per set (one per GPU) and the graph usage modes of each set.
struct RankSets {
    gpus: usize,
    sets: Vec<Vec<u8>>,
}

/// When the sweep needs rank processes that gapscope starts: the number of ranks (GPUs) and
/// the mode sets (see [`super::ranks`]). `None`: this process runs the sweep itself (one rank
/// and one mode set, a rank started by gapscope or by a launcher, or no NCCL).
fn rank_sets(args: &SweepArgs) -> Result<Option<RankSets>, SweepError> {
    if args.rank_process || args.workload == Workload::Emu {
        return Ok(None);
    }
    let rank = super::nccl::detect_rank_from_env()?;
    if rank.world > 1 {
        return Ok(None);
    }
    let devices = CudaContext::device_count().map_or(1, |n| n.max(0) as usize);
    if !uses_nccl(args, devices, &rank) {
        return Ok(None);
    }
    let gpus = args.gpus.unwrap_or(if devices >= 2 { devices } else { 1 });
    if gpus == 0 || gpus > devices {
        return Err(RunnerError::Config(format!(
            "--gpus {gpus}: this machine has {devices} GPU(s)"
        ))
        .into());
    }
    let lib = super::nccl::load_nccl()?;
    let sets = super::ranks::mode_sets(lib.version, &args.modes);
    Ok((gpus > 1 || sets.len() > 1).then_some(RankSets { gpus, sets }))
}

/// Runs every mode set as `gpus` rank processes of this program, one set after the other, and
/// reads back one trace per rank.
fn run_rank_sets(
    args: &SweepArgs,
    output: &Path,
    gpus: usize,
    sets: &[Vec<u8>],
) -> Result<Vec<(PathBuf, Trace)>, SweepError> {
    let io = |path: &Path, e: std::io::Error| RunnerError::Io {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    let program = std::env::current_exe().map_err(|e| io(Path::new("current executable"), e))?;
    let logs = output.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| io(&logs, e))?;
    let mut traces = Vec::new();
    for (i, modes) in sets.iter().enumerate() {
        let list: Vec<String> = modes.iter().map(u8::to_string).collect();
        let name = format!("modes-{}", list.join("-"));
        let dir = output.join(&name);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let id_file = dir.join("nccl-unique-id");
        let _ = std::fs::remove_file(&id_file);
        let label = format!(
            "mode set {}/{} (graph usage mode {})",
            i + 1,
            sets.len(),
            list.join(", ")
        );
        eprintln!(
            "gapscope: {label}: {gpus} rank process(es), logs in {}",
            logs.display()
        );
        let launches: Vec<super::ranks::RankLaunch> = (0..gpus)
            .map(|r| {
                super::ranks::RankLaunch::new(
                    &program,
                    args.rank_command_line(modes, &dir),
                    r,
                    gpus,
                    &id_file,
                    logs.join(format!("{name}-rank{r}.log")),
                )
            })
            .collect();
        let started = std::time::Instant::now();
        super::ranks::run_set(
            &launches,
            std::time::Duration::from_secs(args.rank_timeout),
            &label,
        )?;
        eprintln!(
            "gapscope: {label}: done in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        for r in 0..gpus {
            let path = dir.join(rank_trace_name(r, gpus));
            let trace = crate::trace::read_trace(&path)?;
            traces.push((path, trace));
        }
    }
    Ok(traces)
}

/// Runs the sweep and writes `output/trace.json` (`trace-<rank>.json` for one rank of
/// several); returns the trace(s) written.
pub fn run_sweep(args: &SweepArgs, output: &Path) -> Result<Vec<(PathBuf, Trace)>, SweepError> {
    if args.steps < 2 {
        return Err(RunnerError::Config("--steps must be at least 2".into()).into());
    }
    std::fs::create_dir_all(output).map_err(|e| RunnerError::Io {
        path: output.display().to_string(),
        detail: e.to_string(),
    })?;
    if let Some(RankSets { gpus, sets }) = rank_sets(args)? {
        return run_rank_sets(args, output, gpus, &sets);
    }
    let stop = interrupt_flag();
    // CUPTI first: kernels are instrumented when modules load.
    let recorder = Arc::new(Recorder::start(RecorderConfig {
        buffer_bytes: args.cupti_buffer_kib.max(1) * 1024,
        max_buffers: args.cupti_max_buffers,
        event_records: args.cupti_event_records,
        api_callbacks: args.cupti_api_callbacks,
        ..RecorderConfig::default()
    })?);
    let (trace, overhead) = match args.workload {
        Workload::HtDecode => run_ht_decode(args, recorder, &stop)?,
        Workload::Emu => (run_emu(args, recorder, &stop)?, Vec::new()),
    };
    let mut trace = trace;
    trace.metadata.notes.extend(overhead);
    if stop.load(Ordering::SeqCst) {
        trace
            .metadata
            .notes
            .push("interrupted (Ctrl-C): only the completed cells are in this trace".into());
    }
    let path = output.join(rank_trace_name(
        trace.metadata.rank as usize,
        trace.metadata.world as usize,
    ));
    crate::trace::write_trace(&path, &trace)?;
    eprintln!(
        "wrote {} ({} kernels, {} cells, {} dropped records)",
        path.display(),
        trace.kernels.len(),
        trace.metadata.cells.len(),
        trace.dropped_records
    );
    Ok(vec![(path, trace)])
}

/// Whether the sweep uses real NCCL: `--backend`, or with `auto` two or more GPUs or a
/// launcher's world of two or more.
fn uses_nccl(args: &SweepArgs, devices: usize, rank: &RankInfo) -> bool {
    match args.backend {
        BackendChoice::Nccl => true,
        BackendChoice::Emulated => false,
        BackendChoice::Auto => devices >= 2 || rank.world >= 2,
    }
}

fn open_bench(args: &SweepArgs) -> Result<Bench, SweepError> {
    let devices = CudaContext::device_count().map_or(1, |n| n.max(0) as usize);
    let mut rank = super::nccl::detect_rank_from_env()?;
    if args.rank_process {
        rank.source = "started by gapscope run";
    }
    let use_nccl = uses_nccl(args, devices, &rank);
    // One GPU per rank: a launched rank uses its local rank's device.
    let device = if use_nccl && rank.world > 1 {
        rank.local_rank.unwrap_or(args.device)
    } else {
        args.device
    };
    let ctx = open_context(device)?;
    let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
    let (collective, kernels, ranks) = if use_nccl {
        (Collective::Nccl(None), None, rank.world)
    } else {
        let kernels = EmuKernels::load(&ctx)?;
        let cfg = EmulatedConfig {
            ranks: args.ranks,
            rank: 0,
            bytes_per_rank: 16,
            mode: GraphUsageMode::Two,
        };
        cfg.validate()?;
        (
            Collective::Emulated(EmulatedAllGather::new(&ctx, &kernels, cfg)?),
            Some(kernels),
            args.ranks,
        )
    };
    Ok(Bench {
        ctx,
        stream,
        kernels,
        collective,
        ranks,
        rank: if use_nccl { rank } else { RankInfo::single() },
    })
}

fn run_ht_decode(
    args: &SweepArgs,
    recorder: Arc<Recorder>,
    stop: &AtomicBool,
) -> Result<(Trace, Vec<String>), SweepError> {
    let mut bench = open_bench(args)?;
    let plans = plans(args)?;
    let bar = progress(plans.len(), "recording");
    let mut recorded: Vec<(CellPlan, Vec<f64>)> = Vec::new();
    let mut current: Option<(usize, HtDecode)> = None;
    let mut describe = String::new();
    for plan in &plans {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        bar.set_message(plan.label());
        let ht = ht_for(&mut bench, &mut current, plan.tokens)?;
        let cell = recorder.add_cell(Cell {
            label: plan.label(),
            requested: plan.requested(bench.backend_label(), bench.ranks),
            ..Cell::default()
        });
        let periods = run_cell(
            &mut bench,
            ht,
            plan,
            args.steps,
            args.warmup,
            Some((&recorder, cell)),
        )?;
        describe = match &bench.collective {
            Collective::Emulated(e) => format!(
                "emulated ({} simulated ranks; each cell in the capture topology of its graph usage mode)",
                e.config().ranks
            ),
            Collective::Nccl(_) => bench.all_gather(ht, plan.mode, None)?.describe(),
        };
        recorder.flush()?;
        recorded.push((plan.clone(), periods));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut workload = BTreeMap::new();
    workload.insert("name".into(), "ht_decode".into());
    workload.insert("collective".into(), describe.clone().into());
    workload.insert("hidden".into(), 7168.into());
    workload.insert("top_k".into(), 8.into());
    workload.insert("experts".into(), 256.into());
    let mut meta = metadata(&bench.ctx, &recorder, workload);
    meta.rank = bench.rank.rank as u32;
    meta.world = bench.rank.world as u32;
    if let Collective::Nccl(Some(n)) = &bench.collective {
        meta.versions.nccl = Some(format!("{}", n.version()));
        meta.versions.nccl_library = Some(n.library_path().to_owned());
    }
    meta.notes.push(format!("collective: {describe}"));
    bench
        .stream
        .synchronize()
        .map_err(cuda("cuStreamSynchronize"))?;
    // Drop the hooks (they hold the recorder) before finishing it.
    if let Collective::Emulated(e) = &mut bench.collective {
        e.set_scope_hook(None);
    }
    if let Collective::Nccl(Some(n)) = &mut bench.collective {
        n.set_scope_hook(None);
    }
    let recorder = Arc::try_unwrap(recorder)
        .map_err(|_| RunnerError::Config("recorder still shared at the end of the sweep".into()))?;
    let mut trace = recorder.finish(meta)?;
    for (cell, (_, periods)) in trace.metadata.cells.iter_mut().zip(&recorded) {
        cell.event_periods_ns = periods.clone();
    }
    let mut notes = Vec::new();
    if args.overhead && !stop.load(Ordering::SeqCst) {
        notes = measure_overhead(args, &mut bench, &mut current, &recorded)?;
    }
    Ok((trace, notes))
}

/// The HtDecode for T, rebuilt when T changes (and the emulated peers refilled).
fn ht_for<'a>(
    bench: &mut Bench,
    current: &'a mut Option<(usize, HtDecode)>,
    tokens: usize,
) -> Result<&'a mut HtDecode, SweepError> {
    if current.as_ref().is_none_or(|c| c.0 != tokens) {
        *current = None;
        let cfg = HtDecodeConfig {
            ranks: bench.ranks,
            ..HtDecodeConfig::with_tokens(tokens)
        };
        let ht = HtDecode::new(&bench.stream, cfg.clone())?;
        if let Collective::Emulated(e) = &mut bench.collective {
            let kernels = bench
                .kernels
                .as_ref()
                .expect("emulated backend has its kernels");
            let mut fresh = EmulatedAllGather::new(
                &bench.ctx,
                kernels,
                EmulatedConfig {
                    ranks: cfg.ranks,
                    rank: 0,
                    bytes_per_rank: cfg.routing_map_bytes(),
                    mode: e.config().mode,
                },
            )?;
            fresh.set_peer_maps(&super::reference::reference_all_gather(&cfg))?;
            *e = fresh;
        }
        *current = Some((tokens, ht));
    }
    Ok(&mut current.as_mut().expect("set above").1)
}

/// Re-runs each recorded cell untraced (CUPTI finished: no subscriber, no activity kinds) and
/// compares CUDA-event periods.
fn measure_overhead(
    args: &SweepArgs,
    bench: &mut Bench,
    current: &mut Option<(usize, HtDecode)>,
    recorded: &[(CellPlan, Vec<f64>)],
) -> Result<Vec<String>, SweepError> {
    let bar = progress(recorded.len(), "untraced");
    let mut notes = Vec::new();
    let mut ratios = Vec::new();
    for (plan, traced) in recorded {
        let ht = ht_for(bench, current, plan.tokens)?;
        let untraced = run_cell(bench, ht, plan, args.steps, args.warmup, None)?;
        let (mut a, mut b) = (traced.clone(), untraced);
        let (Some(t), Some(u)) = (
            crate::analysis::stats::Stat::of(&mut a),
            crate::analysis::stats::Stat::of(&mut b),
        ) else {
            continue;
        };
        ratios.push(t.median / u.median);
        notes.push(format!(
            "overhead {}: traced {:.2} µs [{:.2}–{:.2}] vs untraced {:.2} µs [{:.2}–{:.2}] (n={} chunks of {CHUNK} steps each): ratio {:.4}",
            plan.label(),
            t.median / 1e3, t.p10 / 1e3, t.p90 / 1e3,
            u.median / 1e3, u.p10 / 1e3, u.p90 / 1e3,
            t.n,
            t.median / u.median
        ));
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(s) = crate::analysis::stats::Stat::of(&mut ratios) {
        notes.push(format!(
            "tracing overhead (CUDA-event period traced/untraced, same process): median {:.4}, p10–p90 {:.4}–{:.4}, min–max {:.4}–{:.4}, n={} cells",
            s.median, s.p10, s.p90, s.min, s.max, s.n
        ));
    }
    Ok(notes)
}

/// emu.cu's experiment under the recorder: its %globaltimer figures become each cell's
/// `reference`, beside the figures gapscope derives from the trace.
fn run_emu(
    args: &SweepArgs,
    recorder: Arc<Recorder>,
    stop: &AtomicBool,
) -> Result<Trace, SweepError> {
    let mut setup = EmuSetup::new(args.device, args.steps)?;
    setup.ag.set_scope_hook(Some({
        let r = recorder.clone();
        Box::new(move |name: &str| -> super::collective::ScopeGuard {
            Box::new(r.library_call(name))
        })
    }));
    struct Observer {
        recorder: Arc<Recorder>,
        cell: u32,
        results: Vec<(u32, super::emulated::EmuCellResult)>,
    }
    impl EmuObserver for Observer {
        fn cell_begin(&mut self, mode: GraphUsageMode, graphed: bool, pattern: LaunchPattern) {
            let regime = if graphed { "graphed" } else { "eager" };
            let mut requested = BTreeMap::new();
            requested.insert("regime".to_owned(), regime.into());
            requested.insert(
                crate::trace::GRAPH_USAGE_MODE_KEY.to_owned(),
                mode.as_u8().into(),
            );
            requested.insert("backend".to_owned(), "emulated".into());
            requested.insert("workload".to_owned(), "emu".into());
            let label = if graphed {
                requested.insert("launch".to_owned(), pattern.label().into());
                format!("graphed mode={} emu {}", mode.as_u8(), pattern.label())
            } else {
                format!("eager mode={} emu", mode.as_u8())
            };
            self.cell = self.recorder.add_cell(Cell {
                label,
                requested,
                ..Cell::default()
            });
        }
        fn step(&mut self, _index: usize) -> Option<super::collective::ScopeGuard> {
            Some(Box::new(self.recorder.step(self.cell)))
        }
        fn cell_end(&mut self, result: &super::emulated::EmuCellResult) {
            self.results.push((self.cell, result.clone()));
        }
    }
    let mut obs = Observer {
        recorder: recorder.clone(),
        cell: 0,
        results: Vec::new(),
    };
    let patterns: Vec<LaunchPattern> = args
        .launch
        .iter()
        .map(|l| match l {
            Launch::Replay => LaunchPattern::Single,
            Launch::Fresh => LaunchPattern::PerStep,
        })
        .collect();
    let mut cells = Vec::new();
    for &m in &args.modes {
        let mode = GraphUsageMode::from_u8(m)
            .ok_or_else(|| RunnerError::Config(format!("graph usage mode {m}: use 0, 1 or 2")))?;
        cells.push((mode, false, LaunchPattern::Single));
        for &p in &patterns {
            cells.push((mode, true, p));
        }
    }
    let bar = progress(cells.len(), "recording emu");
    for (mode, graphed, pattern) in cells {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let r = run_emu_cell(&mut setup, mode, graphed, pattern, &mut obs)?;
        eprintln!("{}", r.line());
        recorder.flush()?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    setup.verify_gather()?;
    let mut workload = BTreeMap::new();
    workload.insert("name".into(), "emu".into());
    let meta = metadata(&setup.ctx, &recorder, workload);
    setup.ag.set_scope_hook(None);
    let results = std::mem::take(&mut obs.results);
    drop(obs);
    let recorder = Arc::try_unwrap(recorder)
        .map_err(|_| RunnerError::Config("recorder still shared at the end of the sweep".into()))?;
    let mut trace = recorder.finish(meta)?;
    for (cell, r) in results {
        if let Some(c) = trace.metadata.cells.get_mut(cell as usize) {
            c.event_periods_ns = vec![r.period_us * 1e3];
            c.reference = BTreeMap::from([
                (
                    "globaltimer_gap_before_coll_us".to_owned(),
                    r.stats.gap_before_coll,
                ),
                ("globaltimer_coll_dur_us".to_owned(), r.stats.coll_dur),
                (
                    "globaltimer_gap_after_coll_us".to_owned(),
                    r.stats.gap_after_coll,
                ),
                ("cuda_event_period_us".to_owned(), r.period_us),
            ]);
        }
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        Run {
            #[arg(short, long)]
            output: PathBuf,
            #[command(flatten)]
            sweep: SweepArgs,
        },
    }

    #[test]
    fn a_rank_process_is_started_with_the_same_sweep_for_its_modes() {
        use clap::Parser;
        let parent = Cli::parse_from([
            "gapscope",
            "run",
            "-o",
            "x",
            "--tokens",
            "1,64",
            "--modes",
            "0,1,2",
            "--launch",
            "fresh",
            "--steps",
            "30",
            "--warmup",
            "3",
            "--cupti-buffer-kib",
            "64",
            "--cupti-api-callbacks",
            "graph-building-with-launches",
            "--overhead",
            "--gpus",
            "2",
        ]);
        let Sub::Run { sweep: parent, .. } = parent.command;
        let line = parent.rank_command_line(&[2], Path::new("/out/modes-2"));
        let child = Cli::parse_from(std::iter::once("gapscope".to_owned()).chain(line));
        let Sub::Run {
            output,
            sweep: child,
        } = child.command;
        assert_eq!(output, Path::new("/out/modes-2"));
        assert!(child.rank_process);
        assert_eq!(child.modes, [2]);
        assert_eq!(child.backend, BackendChoice::Nccl);
        assert_eq!(child.tokens, parent.tokens);
        assert_eq!(child.launch, parent.launch);
        assert_eq!((child.steps, child.warmup), (30, 3));
        assert_eq!(child.cupti_buffer_kib, 64);
        assert_eq!(
            child.cupti_api_callbacks,
            ApiCallbacks::GraphBuildingWithLaunches
        );
        assert!(child.overhead && !child.cupti_event_records);
        assert_eq!(
            child.gpus, None,
            "a rank process starts no ranks of its own"
        );
    }

    #[test]
    fn traces_are_named_by_rank_when_there_are_several() {
        assert_eq!(rank_trace_name(0, 1), "trace.json");
        assert_eq!(rank_trace_name(1, 2), "trace-1.json");
    }
}
