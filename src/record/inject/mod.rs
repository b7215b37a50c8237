//! CUDA injection: tracing an unmodified program (`gapscope record`).
//!
//! Built as a cdylib (`target/*/libgapscope.so`), this library is named by
//! `CUDA_INJECTION64_PATH`; the CUDA driver loads it while the program initialises CUDA and calls
//! [`InitializeInjection`]. That starts a [`Recorder`] (CUDA is initialising, so kernel
//! instrumentation is in place before any module loads) with NVTX ranges enabled, and arranges
//! for the trace to be written when the process ends:
//!
//! * at `exit`: forced flush, [`Recorder::finish`], then `$GAPSCOPE_OUT/trace-<rank>.json`
//!   (see [`environment::rank_name`]), written atomically. Under `gapscope record`, whose
//!   preload makes this library's [`exit_calls::exit`] stand in for libc's, before any
//!   `atexit` handler or static destructor runs (a program that exits from one thread while another still runs CUDA work has its
//!   libraries torn down under that thread); otherwise from an `atexit` handler;
//! * on SIGTERM, SIGINT, SIGSEGV and SIGABRT, when the program left that signal at its default
//!   action: the same, then the signal is raised again with the default action (the process
//!   dies as it would have, core dump included). A program's own handlers (e.g. Python's
//!   SIGINT → `KeyboardInterrupt`) are left alone: they end in `exit`, which writes the trace.
//!
//! **Trade-off of the signal path.** Writing the trace allocates, takes locks and calls CUPTI,
//! none of which is async-signal-safe. If the signal interrupted a thread inside `malloc` or
//! inside CUPTI (always possible for SIGSEGV/SIGABRT), the handler can deadlock. Two limits:
//! the handler only `try_lock`s the recorder, and it first arms `alarm(30)` with SIGALRM at its
//! default action, so a stuck handler ends the process after 30 s — with no trace, but never
//! hung. Since the file is written to a temporary name and renamed, a handler that dies midway
//! never leaves a half-written trace.
//!
//! * at `_exit` (Python's `os._exit`, which skips `atexit`): `gapscope record` preloads this
//!   library (`LD_PRELOAD`), so its [`exit_calls::_exit`] stands in for libc's: it writes the
//!   trace, then ends the process with the `exit_group` system call, as libc's does.
//!
//! * SIGKILL (no handler runs): under `gapscope record` ([`crate::record::env::SPILL_VAR`]) the
//!   recorder hands each completed activity buffer's records to a spill file as it completes
//!   (a thread of the recorder flushes every [`DELIVERY_PERIOD_MS`]); `gapscope record` writes
//!   the trace from it when the process is gone without having written its own (see [`crate::record::spill`]).
//!
//! Not covered: processes forked after CUDA initialised (a forked child never writes: it
//! would overwrite its parent's file with a copy of its state).
//!
//! Environment read at initialisation ([`environment`]): `GAPSCOPE_OUT` (folder, default: the
//! current one), `GAPSCOPE_STEP_RANGE` ([`crate::record::step_range`]), `GAPSCOPE_TRACE_BUDGET`
//! (launches traced per executable graph and steps traced, default
//! [`crate::record::cupti::TraceBudget::DEFAULT_LIMIT`]; 0: all), the rank variables of
//! [`environment::rank_name`] and the world-size variables of [`environment::world_size`].
//! A `GAPSCOPE_*` value it cannot use (`GAPSCOPE_CUPTI_ATTR=x`) is said in one line and its
//! default taken, the program traced on; `gapscope record` refuses it before the program runs
//! ([`environment::refused_settings`]).
//!
//! Its parts, one job each: [`environment`] (what the process is told), `panic_hook`,
//! [`exit_calls`] (libc's `exit`, `_exit` and `kill` stood in for), `signals` (with
//! `backtrace`) and `trace_writer` (the trace written once, whoever ends the process).

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod backtrace;
pub mod environment;
pub mod exit_calls;
mod messages;
mod panic_hook;
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod signals;
mod trace_writer;

use crate::record::cupti::Recorder;
use crate::record::env::trace_file_name;
use crate::record::spill::{SpillHeader, SpillWriter, spill_path};
use crate::record::step_range::StepRange;
use crate::settings::Setting;
use crate::trace::Cell;
use environment::Config;
use messages::{say, say_note};
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
use signals::install_handlers as install_signal_handlers;
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Under `gapscope record`: CUPTI hands back buffers at least this often, so that a program
/// killed with SIGKILL loses about this much of its records (see [`crate::record::spill`]).
pub const DELIVERY_PERIOD_MS: u32 = 1000;

/// Set on the first call of [`InitializeInjection`].
static CALLED: AtomicBool = AtomicBool::new(false);
/// What the first call returned (1 success, 0 failure); 1 while it runs.
static RESULT: AtomicI32 = AtomicI32::new(1);

/// No fatal-signal handlers where `signals` is not built.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn install_signal_handlers() {}

/// Called by the CUDA driver while the program initialises CUDA (`CUDA_INJECTION64_PATH`).
/// Returns 1 on success, 0 on failure (after one `gapscope:` line on stderr); the program runs
/// on untraced either way. Later calls return what the first returned.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> i32 {
    if CALLED.swap(true, Ordering::AcqRel) {
        return RESULT.load(Ordering::Acquire);
    }
    panic_hook::install();
    let result = panic_hook::initialising(|| catch_unwind(initialize));
    let result = match result {
        Ok(Ok(())) => 1,
        Ok(Err(e)) => {
            say(&format!("not tracing this process: {e}"));
            0
        }
        Err(_) => {
            let msg = panic_hook::take_init_panic();
            say(&format!("not tracing this process: internal error ({msg})"));
            0
        }
    };
    RESULT.store(result, Ordering::Release);
    result
}

fn initialize() -> Result<(), String> {
    let config = Config::from_env();
    let step_range = StepRange::from_env();
    let recorder_config = environment::recorder_config(step_range.clone());
    // Delivery relies on the recorder's own flush thread: CUPTI's flush period
    // (`cuptiActivityFlushPeriod`) hands back only full buffers.
    let spilling = environment::switch(Setting::Spill);
    let mut recorder = Recorder::start(recorder_config).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&config.out)
        .map_err(|e| format!("cannot create {}: {e}", config.out.display()))?;
    if environment::switch(Setting::TracingFlag)
        && let Err(e) = recorder.say_tracing_in(&config.out, config.pid)
    {
        say_note(&format!(
            "no host samples of process {}: its tracing flag could not be written in {}: {e}",
            config.pid,
            config.out.display()
        ));
    }
    if spilling {
        let mut metadata = trace_writer::metadata(&config, &recorder, None);
        metadata.cells = vec![Cell {
            label: config.command.clone(),
            ..Default::default()
        }];
        let header = SpillHeader {
            file_name: trace_file_name(&config.rank_name),
            pid: config.pid,
            step_range: step_range.given().map(str::to_owned),
            metadata,
        };
        match SpillWriter::create(&spill_path(&config.out, config.pid), &header) {
            Ok(writer) => {
                recorder.deliver_to(writer);
                recorder.flush_periodically(std::time::Duration::from_millis(u64::from(
                    DELIVERY_PERIOD_MS,
                )));
            }
            Err(e) => say(&format!(
                "cannot write {}: {e}; if the program is killed (SIGKILL), its trace is lost",
                spill_path(&config.out, config.pid).display()
            )),
        }
    }
    if let Err(e) = recorder.enable_nvtx_markers() {
        say_note(&format!("NVTX ranges will not be recorded: {e}"));
    }
    recorder.add_cell(Cell {
        label: config.command.clone(),
        ..Default::default()
    });
    trace_writer::hand_over(recorder, config);
    // SAFETY: `at_exit` is an `extern "C" fn()` valid for the life of the process (this
    // library is never unloaded by the driver).
    if unsafe { libc::atexit(exit_calls::at_exit) } != 0 {
        say("atexit failed: the trace will be written on SIGTERM/SIGINT only");
    }
    install_signal_handlers();
    Ok(())
}
