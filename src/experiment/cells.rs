//! Running the cells of a sweep: the HT-decode cells (eager, or captured and launched as each
//! [`Launch`] says) and emu.cu's cells, each timed with CUDA events in chunks of steps while the
//! recorder traces them; and the untraced re-run that measures tracing overhead.
#![forbid(unsafe_code)]

use super::plan::{CellPlan, SweepError, SweepOptions, plans, uses_nccl};
use crate::record::cupti::Recorder;
use crate::trace::{Cell, DeviceInfo, Metadata, Source, Trace, Versions};
use crate::workload::capture::{Launch, capture_graph};
use crate::workload::collective::emulated::{EmulatedAllGather, EmulatedConfig};
use crate::workload::collective::nccl::{NcclAllGather, RankInfo};
use crate::workload::collective::{
    GraphUsageMode, LibraryCallGuard, LibraryCallHook, RoutingAllGather, WorkloadError,
};
use crate::workload::device::open_context;
use crate::workload::emu::{EmuCellResult, EmuObserver, EmuSetup, run_emu_cell};
use crate::workload::htdecode::{HtDecode, HtDecodeConfig, HtDecodeError};
use crate::workload::spin::EmuKernels;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Steps per CUDA-event timing chunk: each chunk gives one period sample.
const CHUNK: usize = 20;

fn cuda(call: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> WorkloadError {
    move |e| WorkloadError::cuda(call, e)
}

/// CUDA-event period samples (ns per step) over chunks of a timed loop.
struct ChunkTimer {
    events: Vec<CudaEvent>,
    steps: Vec<usize>,
}

impl ChunkTimer {
    fn new(ctx: &Arc<CudaContext>, steps: usize) -> Result<ChunkTimer, WorkloadError> {
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
    fn boundary(&mut self, stream: &CudaStream, i: usize) -> Result<(), WorkloadError> {
        if i.is_multiple_of(CHUNK) {
            let k = i / CHUNK;
            self.events[k]
                .record(stream)
                .map_err(cuda("cuEventRecord"))?;
            self.steps.push(i);
        }
        Ok(())
    }

    fn finish(mut self, stream: &CudaStream, total: usize) -> Result<Vec<f64>, WorkloadError> {
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

/// One HT decode step on `stream`; the backend opens its library call itself.
fn ht_step(
    ht: &mut HtDecode,
    ag: &mut dyn RoutingAllGather,
    stream: &Arc<CudaStream>,
    capturing: bool,
) -> Result<(), WorkloadError> {
    let as_workload_error = |e: HtDecodeError| WorkloadError::Config(e.to_string());
    ht.prepare(stream).map_err(as_workload_error)?;
    let (send, recv) = ht.gather_buffers();
    ag.all_gather(stream, send, recv, capturing)?;
    ht.after_gather(stream).map_err(as_workload_error)?;
    if capturing {
        ag.end_of_capture_join(stream)?;
    }
    Ok(())
}

/// The backend of the sweep.
enum Collective {
    Emulated(Box<EmulatedAllGather>),
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

    /// The all-gather for `ht` in `mode`, with the recorder's library-call hook when recording.
    fn all_gather(
        &mut self,
        ht: &HtDecode,
        mode: GraphUsageMode,
        recorder: Option<&Arc<Recorder>>,
    ) -> Result<&mut dyn RoutingAllGather, SweepError> {
        let ag: &mut dyn RoutingAllGather = match &mut self.collective {
            Collective::Emulated(e) => {
                e.set_mode(mode);
                e.as_mut()
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
        ag.set_library_call_hook(recorder.map(|r| recorder_hook(r.clone())));
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
            let graphs = launch.graphs(steps);
            let mut execs = Vec::with_capacity(graphs);
            for _ in 0..graphs {
                let (exec, _) = capture_graph(&stream, || ht_step(ht, ag, &stream, true))?;
                execs.push(exec);
            }
            stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
            for i in 0..steps {
                timer.boundary(&stream, i)?;
                let _step = mark(i);
                execs[launch.exec_index(i)].launch(&stream)?;
            }
        }
    }
    let periods = timer.finish(&stream, steps)?;
    stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
    Ok(periods)
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

fn metadata(
    ctx: &CudaContext,
    recorder: &Recorder,
    workload: BTreeMap<String, serde_json::Value>,
) -> Metadata {
    let driver = crate::workload::device::check_cuda_driver()
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

fn open_bench(args: &SweepOptions) -> Result<Bench, SweepError> {
    let devices = crate::cuda::device_count().unwrap_or(1);
    let mut rank = crate::workload::collective::nccl::detect_rank_from_env()?;
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
            Collective::Emulated(Box::new(EmulatedAllGather::new(&ctx, &kernels, cfg)?)),
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

pub(super) fn run_ht_decode(
    args: &SweepOptions,
    recorder: Arc<Recorder>,
    stop: &AtomicBool,
) -> Result<(Trace, Vec<String>), SweepError> {
    let mut bench = open_bench(args)?;
    let plans = plans(args)?;
    let bar = progress(plans.len(), "recording");
    let mut recorded: Vec<(CellPlan, Vec<f64>)> = Vec::new();
    let mut current: Option<(usize, HtDecode)> = None;
    let mut described: Vec<String> = Vec::new();
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
        // One description per distinct mode, in cell order: a process that runs several graph
        // usage modes (NCCL >= 2.29, one communicator each) names every one, not the last.
        let this = match &bench.collective {
            Collective::Emulated(e) => format!(
                "emulated ({} simulated ranks; each cell in the capture topology of its graph usage mode)",
                e.config().ranks
            ),
            Collective::Nccl(_) => bench.all_gather(ht, plan.mode, None)?.describe(),
        };
        if !described.contains(&this) {
            described.push(this);
        }
        recorder.flush()?;
        recorded.push((plan.clone(), periods));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let describe = described.join("; ");
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
        e.set_library_call_hook(None);
    }
    if let Collective::Nccl(Some(n)) = &mut bench.collective {
        n.set_library_call_hook(None);
    }
    let recorder = Arc::try_unwrap(recorder).map_err(|_| {
        WorkloadError::Config("recorder still shared at the end of the sweep".into())
    })?;
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
            fresh.set_peer_maps(&crate::workload::htdecode::reference::reference_all_gather(
                &cfg,
            ))?;
            **e = fresh;
        }
        *current = Some((tokens, ht));
    }
    Ok(&mut current.as_mut().expect("set above").1)
}

/// Re-runs each recorded cell untraced (CUPTI finished: no subscriber, no activity kinds) and
/// compares CUDA-event periods.
fn measure_overhead(
    args: &SweepOptions,
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
pub(super) fn run_emu(
    args: &SweepOptions,
    recorder: Arc<Recorder>,
    stop: &AtomicBool,
) -> Result<Trace, SweepError> {
    let mut setup = EmuSetup::new(args.device, args.steps)?;
    setup
        .ag
        .set_library_call_hook(Some(recorder_hook(recorder.clone())));
    struct Observer {
        recorder: Arc<Recorder>,
        cell: u32,
        results: Vec<(u32, EmuCellResult)>,
    }
    impl EmuObserver for Observer {
        fn cell_begin(&mut self, mode: GraphUsageMode, graphed: bool, launch: Launch) {
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
                requested.insert("launch".to_owned(), launch.label().into());
                format!("graphed mode={} emu {}", mode.as_u8(), launch.label())
            } else {
                format!("eager mode={} emu", mode.as_u8())
            };
            self.cell = self.recorder.add_cell(Cell {
                label,
                requested,
                ..Cell::default()
            });
        }
        fn step(&mut self, _index: usize) -> Option<LibraryCallGuard> {
            Some(Box::new(self.recorder.step(self.cell)))
        }
        fn cell_end(&mut self, result: &EmuCellResult) {
            self.results.push((self.cell, result.clone()));
        }
    }
    let mut obs = Observer {
        recorder: recorder.clone(),
        cell: 0,
        results: Vec::new(),
    };
    let mut cells = Vec::new();
    for &m in &args.modes {
        let mode = GraphUsageMode::from_u8(m)
            .ok_or_else(|| WorkloadError::Config(format!("graph usage mode {m}: use 0, 1 or 2")))?;
        cells.push((mode, false, Launch::Replay));
        for &l in &args.launch {
            cells.push((mode, true, l));
        }
    }
    let bar = progress(cells.len(), "recording emu");
    for (mode, graphed, launch) in cells {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let r = run_emu_cell(&mut setup, mode, graphed, launch, &mut obs)?;
        crate::messages::note(&r.line());
        recorder.flush()?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    setup.verify_gather()?;
    let mut workload = BTreeMap::new();
    workload.insert("name".into(), "emu".into());
    let meta = metadata(&setup.ctx, &recorder, workload);
    setup.ag.set_library_call_hook(None);
    let results = std::mem::take(&mut obs.results);
    drop(obs);
    let recorder = Arc::try_unwrap(recorder).map_err(|_| {
        WorkloadError::Config("recorder still shared at the end of the sweep".into())
    })?;
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

/// The hook that opens the recorder's library call around each collective.
fn recorder_hook(recorder: Arc<Recorder>) -> LibraryCallHook {
    Box::new(move |name: &str| -> LibraryCallGuard { Box::new(recorder.library_call(name)) })
}
