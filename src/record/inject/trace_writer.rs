//! The trace written at most once per process, by whoever ends it first (`exit`, a signal,
//! `_exit`, `kill`): the recorder stopped, its trace marked and written atomically.

use super::environment::Config;
use super::messages::{say, say_note};
use crate::record::cupti::Recorder;
use crate::record::env::trace_file_name;
use crate::record::spill::spill_path;
use crate::record::step_range::STEP_RANGE_VAR;
use crate::trace::{self, Metadata, Source, Versions};
use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

/// The recorder, from initialisation until the trace is written.
static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);
/// Settings read at initialisation.
static CONFIG: OnceLock<Config> = OnceLock::new();
/// Set by whoever writes (or gives up writing) the trace: it is written at most once.
static WRITING: AtomicBool = AtomicBool::new(false);

/// The recorder started at initialisation, and the settings its trace is written with.
pub(super) fn hand_over(recorder: Recorder, config: Config) {
    *RECORDER.lock().unwrap_or_else(PoisonError::into_inner) = Some(recorder);
    let _ = CONFIG.set(config);
}

/// Whether this process records (initialisation handed its recorder over).
pub(super) fn recording() -> bool {
    CONFIG.get().is_some()
}

/// Stops the recorder and writes the trace (at most once per process). `signal`: the signal
/// being handled, if any (only `try_lock`s then).
pub(super) fn write_trace(signal: Option<c_int>) {
    let Some(config) = CONFIG.get() else {
        return;
    };
    if std::process::id() != config.pid || WRITING.swap(true, Ordering::AcqRel) {
        return;
    }
    let recorder = match signal {
        None => RECORDER
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(),
        Some(_) => match RECORDER.try_lock() {
            Ok(mut r) => r.take(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().take(),
            Err(std::sync::TryLockError::WouldBlock) => {
                say("signal arrived while the recorder was busy: no trace written");
                return;
            }
        },
    };
    let Some(recorder) = recorder else {
        return;
    };
    let path = config.out.join(trace_file_name(&config.rank_name));
    // The one given, or the one the recorder chose.
    let step_range = recorder.step_range();
    let metadata = metadata(config, &recorder, signal);
    let finished = match signal {
        None => recorder.finish(metadata),
        Some(_) => recorder.finish_from_signal_handler(metadata),
    };
    let mut trace = match finished {
        Ok(t) => t,
        Err(e) => {
            say(&format!("no trace written to {}: {e}", path.display()));
            return;
        }
    };
    // From here on the trace is written whole (or not at all, by choice): what was delivered
    // to `gapscope record` is not needed.
    let spill = spill_path(&config.out, config.pid);
    step_range.mark(&mut trace);
    // A launcher (torchrun, mpirun) or helper process that initialised CUDA but ran nothing
    // would otherwise leave an empty trace that looks like a rank.
    if trace.kernels.is_empty() && trace.memcpys.is_empty() && trace.memsets.is_empty() {
        say_note(&format!(
            "process {} ran no GPU work: no trace written",
            config.pid
        ));
        let _ = std::fs::remove_file(&spill);
        return;
    }
    match trace::write_trace(&path, &trace) {
        Ok(()) => {
            let _ = std::fs::remove_file(&spill);
        }
        // The spill file stays: `gapscope record` writes the trace from it.
        Err(e) => say(&e.to_string()),
    }
}

pub(super) fn metadata(config: &Config, recorder: &Recorder, signal: Option<c_int>) -> Metadata {
    let mut workload = BTreeMap::new();
    workload.insert("command".to_string(), config.command.clone().into());
    workload.insert("pid".to_string(), config.pid.into());
    let mut notes = vec![
        "recorded by CUDA injection (gapscope record): the program ran unmodified".to_string(),
    ];
    if recorder.step_range().name().is_none() {
        notes.push(format!(
            "no {STEP_RANGE_VAR} given and none chosen: NVTX ranges are plain ranges, steps come from graph launches and the kernel sequence"
        ));
    }
    if let Some(sig) = signal {
        notes.push(format!(
            "trace written from a handler of signal {sig}: the program did not finish, and work after the signal is missing"
        ));
    }
    Metadata {
        tool: format!("gapscope {}", env!("CARGO_PKG_VERSION")),
        source: Source::Cupti,
        device: None,
        versions: Versions {
            cupti: Some(format!(
                "API {} ({})",
                recorder.cupti_version(),
                recorder.cupti_path()
            )),
            ..Versions::default()
        },
        rank: config.rank,
        world: config.world,
        cells: Vec::new(),
        workload,
        notes,
        sampling: None, // filled by the recorder
        unended_ranges: 0,
    }
}
