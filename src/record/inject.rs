//! CUDA injection: tracing an unmodified program (`gapscope record`).
//!
//! Built as a cdylib (`target/*/libgapscope.so`), this library is named by
//! `CUDA_INJECTION64_PATH`; the CUDA driver loads it while the program initialises CUDA and calls
//! [`InitializeInjection`]. That starts a [`Recorder`] (CUDA is initialising, so kernel
//! instrumentation is in place before any module loads) with NVTX ranges enabled, and arranges
//! for the trace to be written when the process ends:
//!
//! * at `exit`: forced flush, [`Recorder::finish`], then `$GAPSCOPE_OUT/trace-<rank>.json`
//!   (see [`rank_name`]), written atomically. Under `gapscope record`, whose preload makes this
//!   library's [`exit`] stand in for libc's, before any `atexit` handler or static destructor
//!   runs (a program that exits from one thread while another still runs CUDA work has its
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
//!   library (`LD_PRELOAD`), so its [`_exit`] stands in for libc's: it writes the trace, then
//!   ends the process with the `exit_group` system call, as libc's does.
//!
//! * SIGKILL (no handler runs): under `gapscope record` ([`crate::record::env::SPILL_VAR`]) the recorder hands each
//!   completed activity buffer's records to a spill file as it completes (a thread of the
//!   recorder flushes every [`DELIVERY_PERIOD_MS`]); `gapscope record` writes the trace from it when
//!   the process is gone without having written its own (see [`crate::record::spill`]).
//!
//! Not covered: processes forked after CUDA initialised (a forked child never writes: it
//! would overwrite its parent's file with a copy of its state).
//!
//! Environment read at initialisation: `GAPSCOPE_OUT` (folder, default: the current one),
//! `GAPSCOPE_STEP_RANGE` ([`crate::record::step_range`]), `GAPSCOPE_TRACE_BUDGET` (launches traced per executable graph and steps traced, default
//! [`TraceBudget::DEFAULT_LIMIT`]; 0: all), the rank variables of [`rank_name`] and the world-size
//! variables of [`world_size`].

use crate::record::cupti::{Recorder, RecorderConfig, TraceBudget};
use crate::record::env::trace_file_name;
use crate::record::spill::{SpillHeader, SpillWriter, spill_path};
use crate::record::step_range::{STEP_RANGE_VAR, StepRange};
use crate::settings::Setting;
use crate::trace::{self, Cell, Metadata, Source, Versions};
use std::collections::BTreeMap;
use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

/// Launches traced per executable graph and steps traced (`gapscope record --trace-budget`).
pub const TRACE_BUDGET_VAR: &str = Setting::TraceBudget.name();
/// `all`: an activity record for every CUDA API call, not only those the analysis reads.
pub const API_RECORDS_VAR: &str = Setting::CuptiApi.name();
/// `1`: SYNCHRONIZATION activity records too (off by default, see
/// [`RecorderConfig::sync_records`]).
pub const SYNC_RECORDS_VAR: &str = Setting::CuptiSync.name();
/// Which API calls get a CUPTI callback: `off`, `graph-building` (default),
/// `graph-building-with-launches` or `all` (see [`crate::record::cupti::ApiCallbacks`]).
pub const API_CALLBACKS_VAR: &str = Setting::CuptiCallbacks.name();
/// Rank variables, first set (and numeric) wins: torchrun/torch.distributed, torchrun's local
/// rank, Open MPI, Slurm.
pub const RANK_VARS: [&str; 4] = ["RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"];
/// World-size variables, first set (and numeric) wins.
pub const WORLD_VARS: [&str; 3] = ["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"];

/// Under `gapscope record`: CUPTI hands back buffers at least this often, so that a program
/// killed with SIGKILL loses about this much of its records (see [`crate::record::spill`]).
pub const DELIVERY_PERIOD_MS: u32 = 1000;

/// Seconds a signal handler may spend writing the trace before SIGALRM ends the process.
const SIGNAL_WATCHDOG_S: u32 = 30;

/// Set on the first call of [`InitializeInjection`].
static CALLED: AtomicBool = AtomicBool::new(false);
/// What the first call returned (1 success, 0 failure); 1 while it runs.
static RESULT: AtomicI32 = AtomicI32::new(1);
/// The recorder, from initialisation until the trace is written.
static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);
/// Settings read at initialisation.
static CONFIG: OnceLock<Config> = OnceLock::new();
/// Set by whoever writes (or gives up writing) the trace: it is written at most once.
static WRITING: AtomicBool = AtomicBool::new(false);
/// `GAPSCOPE_SIGNAL_BACKTRACE=1`: a fatal signal (SIGSEGV, SIGABRT) prints the native frames of
/// the thread it hit, read once at start.
static SIGNAL_BACKTRACE: AtomicBool = AtomicBool::new(false);

/// Settings of the injected process, read from its environment at initialisation.
#[derive(Debug, Clone)]
struct Config {
    /// Absolute, so a later `chdir` of the program does not move it.
    out: PathBuf,
    command: String,
    rank_name: String,
    rank: u32,
    world: u32,
    /// Only this process writes the trace (not children forked after CUDA initialised).
    pid: u32,
}

/// File-name rank of this process: the first of [`RANK_VARS`] holding a non-negative integer,
/// else `pid<pid>`. `get` reads an environment variable.
pub fn rank_name(get: impl Fn(&str) -> Option<String>, pid: u32) -> String {
    numeric_var(&get, &RANK_VARS).map_or_else(|| format!("pid{pid}"), |r| r.to_string())
}

/// World size: the first of [`WORLD_VARS`] holding a positive integer, else 1.
pub fn world_size(get: impl Fn(&str) -> Option<String>) -> u32 {
    numeric_var(&get, &WORLD_VARS)
        .filter(|&w| w > 0)
        .unwrap_or(1)
}

fn numeric_var(get: &impl Fn(&str) -> Option<String>, vars: &[&str]) -> Option<u32> {
    vars.iter()
        .find_map(|v| get(v).and_then(|s| s.trim().parse::<u32>().ok()))
}

/// A setting's value, when set and not empty.
fn env(setting: Setting) -> Option<String> {
    setting.read().filter(|s| !s.is_empty())
}

/// Another program's variable (the launchers' rank variables), when set and not empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

/// A `gapscope: warning: …` line from inside the traced process (it runs on regardless; a
/// stderr it cannot write to loses the line, see [`crate::report::stderr`]).
fn say(msg: &str) {
    crate::report::stderr::warning(msg);
}

/// `gapscope: note: MSG` on the traced process's stderr, on one line.
fn say_note(msg: &str) {
    crate::report::stderr::note(msg);
}

/// The command line of this process (from `/proc/self/cmdline`, else `std::env::args`).
fn command_line() -> String {
    if let Ok(bytes) = std::fs::read("/proc/self/cmdline") {
        let args: Vec<String> = bytes
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.is_empty() {
            return args.join(" ");
        }
    }
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Config {
    fn from_env() -> Config {
        let pid = std::process::id();
        let out = PathBuf::from(env(Setting::Out).unwrap_or_else(|| ".".into()));
        let out = if out.is_absolute() {
            out
        } else {
            std::env::current_dir().map_or(out.clone(), |cwd| cwd.join(&out))
        };
        Config {
            out,
            command: command_line(),
            rank_name: rank_name(var, pid),
            rank: numeric_var(&var, &RANK_VARS).unwrap_or(0),
            world: world_size(var),
            pid,
        }
    }
}

/// Called by the CUDA driver while the program initialises CUDA (`CUDA_INJECTION64_PATH`).
/// Returns 1 on success, 0 on failure (after one `gapscope:` line on stderr); the program runs
/// on untraced either way. Later calls return what the first returned.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> i32 {
    if CALLED.swap(true, Ordering::AcqRel) {
        return RESULT.load(Ordering::Acquire);
    }
    install_panic_hook();
    INITIALISING.with(|i| i.set(true));
    let result = catch_unwind(initialize);
    INITIALISING.with(|i| i.set(false));
    let result = match result {
        Ok(Ok(())) => 1,
        Ok(Err(e)) => {
            say(&format!("not tracing this process: {e}"));
            0
        }
        Err(_) => {
            let msg = INIT_PANIC
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .unwrap_or_else(|| "panic".into());
            say(&format!("not tracing this process: internal error ({msg})"));
            0
        }
    };
    RESULT.store(result, Ordering::Release);
    result
}

thread_local! {
    /// Set while [`initialize`] runs on this thread: its panic is reported by the caller.
    static INITIALISING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
/// The panic message of a failed initialisation.
static INIT_PANIC: Mutex<Option<String>> = Mutex::new(None);
/// Panics reported on stderr so far (each is caught before it reaches C); at most 3 are shown.
static PANICS_SHOWN: AtomicU32 = AtomicU32::new(0);

/// Panics show as one `gapscope:` line. This library has its own copy of std, so the hook only
/// sees this library's panics, never the host program's.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = crate::panic_message(info);
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = format!("panic: {msg}{at}");
        if INITIALISING.try_with(|i| i.get()).unwrap_or(false) {
            *INIT_PANIC.lock().unwrap_or_else(PoisonError::into_inner) = Some(msg);
            return;
        }
        match PANICS_SHOWN.fetch_add(1, Ordering::Relaxed) {
            0..3 => say(&format!("internal error, caught ({msg})")),
            3 => say("further internal errors not shown"),
            _ => {}
        }
    }));
}

fn initialize() -> Result<(), String> {
    let config = Config::from_env();
    let step_range = StepRange::from_env();
    let mut recorder_config = RecorderConfig {
        all_api_calls: env(Setting::CuptiApi).is_some_and(|v| v == "all"),
        sync_records: env(Setting::CuptiSync).is_some_and(|v| v == "1"),
        ..RecorderConfig::default()
    };
    if let Some(v) = env(Setting::CuptiCallbacks) {
        match <crate::record::cupti::ApiCallbacks as clap::ValueEnum>::from_str(&v, false) {
            Ok(callbacks) => recorder_config.api_callbacks = callbacks,
            Err(e) => say(&format!("{API_CALLBACKS_VAR}: {e}; using the default")),
        }
    }
    // Diagnostics: host activity buffer size in KiB (default 8 MiB).
    if let Some(v) = env(Setting::CuptiBufferKib) {
        match v.parse::<usize>() {
            Ok(kib) if kib > 0 => recorder_config.buffer_bytes = kib * 1024,
            _ => say(&format!(
                "{}={v} is not a positive number; using the default",
                Setting::CuptiBufferKib
            )),
        }
    }
    let limit = match env(Setting::TraceBudget).map(|v| TraceBudget::parse_limit(&v)) {
        None => TraceBudget::DEFAULT_LIMIT,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            say(&format!(
                "{TRACE_BUDGET_VAR}: {e}; using the default {}",
                TraceBudget::DEFAULT_LIMIT
            ));
            TraceBudget::DEFAULT_LIMIT
        }
    };
    recorder_config.trace_budget = TraceBudget { limit };
    recorder_config.step_range = step_range.clone();
    // Delivery relies on the recorder's own flush thread: CUPTI's flush period
    // (`cuptiActivityFlushPeriod`) hands back only full buffers.
    let spilling = env(Setting::Spill).is_some_and(|v| v == "1");
    let mut recorder = Recorder::start(recorder_config).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&config.out)
        .map_err(|e| format!("cannot create {}: {e}", config.out.display()))?;
    if env(Setting::TracingFlag).is_some_and(|v| v == "1")
        && let Err(e) = recorder.say_tracing_in(&config.out, config.pid)
    {
        say_note(&format!(
            "no host samples of process {}: its tracing flag could not be written in {}: {e}",
            config.pid,
            config.out.display()
        ));
    }
    if spilling {
        let mut metadata = metadata(&config, &recorder, None);
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
    *RECORDER.lock().unwrap_or_else(PoisonError::into_inner) = Some(recorder);
    let _ = CONFIG.set(config);
    // SAFETY: `at_exit` is an `extern "C" fn()` valid for the life of the process (this
    // library is never unloaded by the driver).
    if unsafe { libc::atexit(at_exit) } != 0 {
        say("atexit failed: the trace will be written on SIGTERM/SIGINT only");
    }
    install_signal_handlers();
    Ok(())
}

extern "C" fn at_exit() {
    let _ = catch_unwind(|| write_trace(None));
}

/// Stands in for libc's `_exit` when this library is preloaded: a traced process writes its
/// trace first; any other process (or this library linked into a program) just ends, as
/// libc's `_exit` would, through `exit_group`.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[unsafe(no_mangle)]
pub extern "C" fn _exit(status: c_int) -> ! {
    if CONFIG.get().is_some() {
        let _ = catch_unwind(|| write_trace(None));
    }
    signals::exit_group(status)
}

/// Stands in for libc's `exit` when this library is preloaded: a traced process writes its
/// trace first, while every library is whole, then libc's `exit` runs its `atexit` handlers,
/// static destructors and stdio flushes as usual.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[unsafe(no_mangle)]
pub extern "C" fn exit(status: c_int) -> ! {
    if CONFIG.get().is_some() {
        let _ = catch_unwind(|| write_trace(None));
    }
    signals::libc_exit(status)
}

/// Stands in for libc's `kill` when this library is preloaded. A traced process that sends
/// itself a signal whose action is the default (termination) writes its trace first: Python
/// ends on an unhandled KeyboardInterrupt (Ctrl-C) by resetting SIGINT to its default and
/// `kill(getpid(), SIGINT)`, which skips every `atexit` handler. Every call is then made as
/// libc's, through the `kill` system call.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[unsafe(no_mangle)]
pub extern "C" fn kill(pid: libc::pid_t, sig: c_int) -> c_int {
    if CONFIG.get().is_some()
        && (pid == 0 || u32::try_from(pid).is_ok_and(|p| p == std::process::id()))
        && signals::ends_the_process(sig)
    {
        let _ = catch_unwind(|| write_trace(Some(sig)));
    }
    signals::kill_syscall(pid, sig)
}

/// Stops the recorder and writes the trace (at most once per process). `signal`: the signal
/// being handled, if any (only `try_lock`s then).
fn write_trace(signal: Option<c_int>) {
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

fn metadata(config: &Config, recorder: &Recorder, signal: Option<c_int>) -> Metadata {
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

// ---------------------------------------------------------------------------------------------
// Signals (Linux, through the libc crate's declarations)
// ---------------------------------------------------------------------------------------------

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod signals {
    use std::ffi::c_int;

    pub use libc::{SIGABRT, SIGINT, SIGSEGV, SIGTERM};

    /// Ends every thread of the process with `status` (what libc's `_exit` does).
    pub fn exit_group(status: c_int) -> ! {
        loop {
            // SAFETY: exit_group takes one int and does not return.
            unsafe {
                libc::syscall(libc::SYS_exit_group, status);
            }
        }
    }

    /// libc's `exit` (the next definition after this library's): `atexit` handlers, static
    /// destructors, stdio flushes, then the end of the process.
    pub fn libc_exit(status: c_int) -> ! {
        // SAFETY: dlsym takes RTLD_NEXT and a NUL-terminated name and only reads the loader's
        // tables.
        let next = unsafe { libc::dlsym(libc::RTLD_NEXT, c"exit".as_ptr()) };
        if next.is_null() {
            exit_group(status);
        }
        // SAFETY: the next `exit` in the search order is libc's, `void exit(int)`, which does
        // not return.
        let libc_exit: extern "C" fn(c_int) -> ! = unsafe { std::mem::transmute(next) };
        libc_exit(status)
    }

    /// A `sigaction` with `handler`, `flags` and an empty mask.
    fn action(handler: libc::sighandler_t, flags: c_int) -> libc::sigaction {
        // SAFETY: `sigaction` is plain data (integers, a bit set, a pointer-sized handler),
        // for which all zeroes is a valid value; the fields that matter are set below.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = handler;
        act.sa_flags = flags;
        act
    }

    /// A handler given the signal's `siginfo_t` and the interrupted context (`SA_SIGINFO`).
    pub type Handler = extern "C" fn(c_int, *mut libc::siginfo_t, *mut std::ffi::c_void);

    /// Installs `handler` for `sig` (reset to the default on entry) if `sig` is at its default
    /// action; returns whether it did.
    pub fn install_if_default(sig: c_int, handler: Handler) -> bool {
        let mut old = action(libc::SIG_DFL, 0);
        // SAFETY: a null `act` only reads the current action into `old`, a valid sigaction.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return false;
        }
        let act = action(
            handler as libc::sighandler_t,
            libc::SA_RESETHAND | libc::SA_SIGINFO,
        );
        // SAFETY: `act` is a valid sigaction whose handler takes (int, siginfo_t*, void*), as
        // SA_SIGINFO calls it.
        unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) == 0 }
    }

    /// Whether `sig`, delivered now, would end the process by its default action (not
    /// SIGKILL, which stands for the OOM killer's: no trace is written for it here).
    pub fn ends_the_process(sig: c_int) -> bool {
        if ![
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGALRM,
        ]
        .contains(&sig)
        {
            return false;
        }
        let mut old = action(libc::SIG_DFL, 0);
        // SAFETY: a null `act` only reads the current action into `old`, a valid sigaction.
        (unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) }) == 0
            && old.sa_sigaction == libc::SIG_DFL
    }

    /// libc's `kill`, as the system call (this library's `kill` stands in for libc's).
    pub fn kill_syscall(pid: libc::pid_t, sig: c_int) -> c_int {
        // SAFETY: the kill system call takes two integers; errors set errno, as libc's does.
        unsafe { libc::syscall(libc::SYS_kill, pid, sig) as c_int }
    }

    /// SIGALRM at its default action (terminate) in `seconds`.
    pub fn arm_watchdog(seconds: u32) {
        let act = action(libc::SIG_DFL, 0);
        // SAFETY: both calls are async-signal-safe and take plain values / a valid sigaction.
        unsafe {
            libc::sigaction(libc::SIGALRM, &act, std::ptr::null_mut());
            libc::alarm(seconds);
        }
    }

    /// Writes the native frames of the current thread to stderr, with its thread id, the
    /// interrupted instruction and the library holding it: what `GAPSCOPE_SIGNAL_BACKTRACE=1`
    /// prints on a fatal signal, to tell which library crashed (the frames stop where the
    /// unwinder cannot go on; the instruction does not).
    #[cfg(target_env = "gnu")]
    pub fn print_backtrace(sig: c_int, info: *mut libc::siginfo_t, context: *mut std::ffi::c_void) {
        unsafe extern "C" {
            fn backtrace(buffer: *mut *mut std::ffi::c_void, size: c_int) -> c_int;
            fn backtrace_symbols_fd(buffer: *const *mut std::ffi::c_void, size: c_int, fd: c_int);
        }
        let mut frames = [std::ptr::null_mut(); 48];
        let mut line = [0u8; 512];
        let text = {
            use std::io::Write;
            let mut w = &mut line[..];
            let pc = interrupted_pc(context);
            // SAFETY: gettid has no preconditions; `info` is the kernel's siginfo for this
            // signal (null-checked); dladdr only reads the loader's tables and fills `dl`.
            unsafe {
                let fault = if info.is_null() {
                    0
                } else {
                    (*info).si_addr() as usize
                };
                let _ = write!(
                    w,
                    "gapscope: signal {sig} on thread {}, at pc {pc:#x}, fault address {fault:#x}",
                    libc::gettid()
                );
                let mut dl: libc::Dl_info = std::mem::zeroed();
                if pc != 0 && libc::dladdr(pc as *const std::ffi::c_void, &mut dl) != 0 {
                    let name = |p: *const std::ffi::c_char| {
                        if p.is_null() {
                            &b"?"[..]
                        } else {
                            std::ffi::CStr::from_ptr(p).to_bytes()
                        }
                    };
                    let _ = w.write_all(b" in ");
                    let _ = w.write_all(name(dl.dli_fname));
                    let _ = write!(w, "+{:#x} (", pc - dl.dli_fbase as usize);
                    let _ = w.write_all(name(dl.dli_sname));
                    let _ = w.write_all(b")");
                } else {
                    let _ = w.write_all(b" in no loaded object");
                }
                let _ = writeln!(w, ":");
            }
            512 - w.len()
        };
        // SAFETY: writes `text` bytes of a live buffer to fd 2; `backtrace` fills at most
        // `frames.len()` entries of a live array, and `backtrace_symbols_fd` reads as many as it
        // returned (glibc; neither allocates once libgcc is loaded, as it is by Rust's unwinder).
        unsafe {
            libc::write(2, line.as_ptr().cast(), text);
            let n = backtrace(frames.as_mut_ptr(), frames.len() as c_int);
            backtrace_symbols_fd(frames.as_ptr(), n, 2);
        }
    }

    #[cfg(not(target_env = "gnu"))]
    pub fn print_backtrace(
        _sig: c_int,
        _info: *mut libc::siginfo_t,
        _context: *mut std::ffi::c_void,
    ) {
    }

    /// The instruction the signal interrupted, from its `ucontext_t` (0 when unknown).
    #[cfg(target_env = "gnu")]
    fn interrupted_pc(context: *mut std::ffi::c_void) -> usize {
        if context.is_null() {
            return 0;
        }
        let uc = context as *const libc::ucontext_t;
        // SAFETY: with SA_SIGINFO the kernel passes the interrupted thread's ucontext_t.
        #[cfg(target_arch = "x86_64")]
        return unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] as usize };
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        return unsafe { (*uc).uc_mcontext.pc as usize };
    }

    /// Raises `sig` again; SA_RESETHAND already restored the default action, and the signal
    /// is delivered when the handler returns.
    pub fn reraise(sig: c_int) {
        // SAFETY: async-signal-safe, no pointers.
        unsafe {
            libc::raise(sig);
        }
    }
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn install_signal_handlers() {
    use signals::*;
    // Read here: a signal handler must not read the environment.
    SIGNAL_BACKTRACE.store(
        env(Setting::SignalBacktrace).is_some_and(|v| v == "1"),
        Ordering::Relaxed,
    );
    for sig in [SIGTERM, SIGINT, SIGSEGV, SIGABRT] {
        signals::install_if_default(sig, on_signal);
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn install_signal_handlers() {}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, context: *mut std::ffi::c_void) {
    signals::arm_watchdog(SIGNAL_WATCHDOG_S);
    if SIGNAL_BACKTRACE.load(Ordering::Relaxed) && sig != signals::SIGTERM && sig != signals::SIGINT
    {
        signals::print_backtrace(sig, info, context);
    }
    let _ = catch_unwind(AssertUnwindSafe(|| write_trace(Some(sig))));
    signals::reraise(sig);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn rank_comes_from_the_first_numeric_rank_variable() {
        assert_eq!(rank_name(vars(&[("RANK", "3")]), 42), "3");
        assert_eq!(
            rank_name(vars(&[("LOCAL_RANK", "1"), ("SLURM_PROCID", "9")]), 42),
            "1"
        );
        assert_eq!(
            rank_name(vars(&[("RANK", "0"), ("LOCAL_RANK", "5")]), 42),
            "0"
        );
        assert_eq!(rank_name(vars(&[("OMPI_COMM_WORLD_RANK", "7")]), 42), "7");
        assert_eq!(rank_name(vars(&[("SLURM_PROCID", " 12 ")]), 42), "12");
        // Not a number: skipped.
        assert_eq!(
            rank_name(vars(&[("RANK", "x"), ("SLURM_PROCID", "2")]), 42),
            "2"
        );
        assert_eq!(rank_name(vars(&[]), 4242), "pid4242");
        assert_eq!(rank_name(vars(&[("RANK", "-1")]), 7), "pid7");
        assert_eq!(trace_file_name("pid7"), "trace-pid7.json");
        assert_eq!(trace_file_name("3"), "trace-3.json");
    }

    #[test]
    fn world_size_defaults_to_one() {
        assert_eq!(world_size(vars(&[])), 1);
        assert_eq!(world_size(vars(&[("WORLD_SIZE", "8")])), 8);
        assert_eq!(world_size(vars(&[("OMPI_COMM_WORLD_SIZE", "4")])), 4);
        assert_eq!(world_size(vars(&[("SLURM_NTASKS", "16")])), 16);
        assert_eq!(world_size(vars(&[("WORLD_SIZE", "0")])), 1);
    }
}
