//! `gapscope run`: the HT-decode experiment (or emu.cu's step) swept over graph usage modes,
//! eager and graphed regimes, launches and T, recorded under CUPTI into one trace.
//!
//! Every cell is a [`Cell`](crate::trace::Cell) of the trace: what was requested (regime, mode,
//! T, launch, backend) plus the step period measured with CUDA events in chunks of steps,
//! independently of the trace. Steps are host step markers; the analysis derives the regime and
//! the mode in effect from the records and the DAG, never from these labels.
//!
//! Files: `plan` (the arguments and the cells they ask for) → `cells` (running them); this file
//! runs a sweep in this process or orchestrates rank processes ([`ranks`]).
#![forbid(unsafe_code)]

mod cells;
mod plan;
pub mod ranks;

pub use plan::{InvalidSweep, RankSweepError, SweepError, SweepOptions, Workload};

use crate::messages;
use crate::record::cupti::{Recorder, RecorderConfig};
use crate::trace::Trace;
use crate::workload::collective::WorkloadError;
use plan::uses_nccl;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// True when the sweep can run here: a CUDA driver the recorder can use and at least one device
/// (never panics). Asked here, above both, so that the workload knows nothing of the recorder.
pub fn gpu_available() -> bool {
    crate::record::cupti::ensure_cuda_driver().is_ok()
        && crate::cuda::device_count().is_ok_and(|n| n > 0)
}

fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    // A second handler (e.g. in tests) is not an error worth failing the run for.
    let _ = ctrlc::set_handler(move || f.store(true, Ordering::SeqCst));
    flag
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
/// the mode sets (see [`crate::experiment::ranks`]). `None`: this process runs the sweep itself (one rank
/// and one mode set, a rank started by gapscope or by a launcher, or no NCCL).
fn rank_sets(args: &SweepOptions) -> Result<Option<RankSets>, SweepError> {
    if args.rank_process || args.workload == Workload::Emu {
        return Ok(None);
    }
    let rank = crate::workload::collective::nccl::detect_rank_from_env()?;
    if rank.world > 1 {
        return Ok(None);
    }
    let devices = crate::cuda::device_count().unwrap_or(1);
    if !uses_nccl(args, devices, &rank) {
        return Ok(None);
    }
    let gpus = args.gpus.unwrap_or(if devices >= 2 { devices } else { 1 });
    if gpus == 0 || gpus > devices {
        return Err(WorkloadError::Config(format!(
            "--gpus {gpus}: this machine has {devices} GPU(s)"
        ))
        .into());
    }
    let lib = crate::workload::collective::nccl::load_nccl()?;
    let sets = crate::experiment::ranks::mode_sets(lib.version, &args.modes);
    Ok((gpus > 1 || sets.len() > 1).then_some(RankSets { gpus, sets }))
}

/// Runs every mode set as `gpus` rank processes of this program, one set after the other, and
/// reads back one trace per rank.
fn run_rank_sets(
    args: &SweepOptions,
    output: &Path,
    gpus: usize,
    sets: &[Vec<u8>],
) -> Result<Vec<(PathBuf, Trace)>, SweepError> {
    let io = |path: &Path, e: std::io::Error| WorkloadError::Io {
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
        messages::note(&format!(
            "{label}: {gpus} rank process(es), logs in {}",
            logs.display()
        ));
        let launches: Vec<crate::experiment::ranks::RankLaunch> = (0..gpus)
            .map(|r| {
                crate::experiment::ranks::RankLaunch::new(
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
        crate::experiment::ranks::run_set(
            &launches,
            std::time::Duration::from_secs(args.rank_timeout),
            &label,
        )?;
        messages::note(&format!(
            "{label}: done in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
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
pub fn run_sweep(args: &SweepOptions, output: &Path) -> Result<Vec<(PathBuf, Trace)>, SweepError> {
    if args.steps < 2 {
        return Err(WorkloadError::Config("--steps must be at least 2".into()).into());
    }
    std::fs::create_dir_all(output).map_err(|e| WorkloadError::Io {
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
        // The runner times its steps with its own events, so the cost this kind leaves on
        // later API calls matters less than `record`'s; its traces keep every sync record.
        sync_records: true,
        api_callbacks: args.cupti_api_callbacks,
        ..RecorderConfig::default()
    })?);
    if let Some(cupti) = crate::record::cupti::loaded_cupti_library() {
        messages::line(&cupti.note());
    }
    let (trace, overhead) = match args.workload {
        Workload::HtDecode => cells::run_ht_decode(args, recorder, &stop)?,
        Workload::Emu => (cells::run_emu(args, recorder, &stop)?, Vec::new()),
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
    messages::note(&format!(
        "wrote {} ({} kernels, {} cells, {} dropped records)",
        path.display(),
        trace.kernels.len(),
        trace.metadata.cells.len(),
        trace.dropped_records
    ));
    Ok(vec![(path, trace)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_named_by_rank_when_there_are_several() {
        assert_eq!(rank_trace_name(0, 1), "trace.json");
        assert_eq!(rank_trace_name(1, 2), "trace-1.json");
    }
}
