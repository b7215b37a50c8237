#![forbid(unsafe_code)]
//! `gapscope record -- CMD [ARGS…]`: runs an unmodified program with gapscope's CUDA injection
//! library (see [`gapscope::record::inject`]) and reports the trace each of its processes wrote.
//!
//! The child gets `CUDA_INJECTION64_PATH` (libgapscope.so), `CUPTI_LIB` (the libcupti that
//! [`gapscope::library_search`] finds for the command, e.g. in its Python environment; `record`
//! says which), `NVTX_INJECTION64_PATH` (the same libcupti, so NVTX ranges reach CUPTI; an
//! existing value is kept), `GAPSCOPE_OUT`,
//! `GAPSCOPE_TRACE_BUDGET`, `GAPSCOPE_SPILL` (records handed over as buffers complete, see
//! [`gapscope::record::spill`]) and, with `--step-range`, `GAPSCOPE_STEP_RANGE`. Its exit status
//! is passed on (128 + N when a signal N killed it); a process that died without writing its
//! trace (SIGKILL) gets one written from what it had handed over. Ctrl-C reaches the child
//! through the terminal (same process group); SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
//! gapscope itself (`kill`, Slurm's `scancel`, `timeout`) are passed on to the child. gapscope
//! waits for the child either way, so its trace is still listed.

use super::exit;
use anyhow::{Context, bail};
use gapscope::messages;
use gapscope::record::cupti::CuptiError;
use gapscope::record::env::{OUT_VAR, TRACE_BUDGET_VAR};
use gapscope::record::host_sampler::{self, HostSampling, Sampler};
use gapscope::record::step_range::STEP_RANGE_VAR;
use gapscope::settings::Setting;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

/// File name of the injection library (the crate's cdylib).
pub const INJECTION_LIB: &str = "libgapscope.so";
/// Environment variable naming the injection library explicitly.
pub const INJECTION_LIB_VAR: &str = Setting::InjectionLib.name();

/// Said when no process wrote a trace.
pub const NO_TRACE: &str = "no trace written: the program did not initialise CUDA (or the injection library was not loaded)";

/// What `gapscope record` runs and where its traces go (the command line's `record` arguments
/// convert into this).
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Folder for the traces (one `trace-<rank>.json` per process).
    pub output: PathBuf,
    /// NVTX range that marks one step (e.g. `step` for `torch.cuda.nvtx.range("step")`).
    pub step_range: Option<String>,
    /// Launches traced per executable graph and steps traced (0: all); see
    /// [`gapscope::record::cupti::TraceBudget`].
    pub trace_budget: u32,
    /// Which host stacks to sample while the program runs ([`gapscope::record::host_sampler`]).
    pub host_samples: HostSampling,
    /// The program to trace and its arguments.
    pub command: Vec<OsString>,
}

/// Where a wheel (`pip install gapscope`) puts the injection library, relative to the prefix
/// it installs into: `<prefix>/bin/gapscope` and `<prefix>/lib/gapscope/libgapscope.so` (the
/// wheel's `.data/scripts/` and `.data/data/lib/gapscope/`), whether the prefix is a virtual
/// environment, `~/.local` (`--user`) or the system's. `wheel-build/gapscope_build.py` uses
/// the same folder.
pub const WHEEL_LIB_DIR: &str = "lib/gapscope";

/// Candidate places of the injection library, in search order: next to the executable (a
/// cargo build), where a wheel installs it ([`WHEEL_LIB_DIR`]), one folder up from the
/// executable, then `target/release` under the current folder.
pub fn injection_candidates(exe: Option<&Path>, cwd: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = exe.and_then(Path::parent) {
        out.push(dir.join(INJECTION_LIB));
        if let Some(up) = dir.parent() {
            out.push(up.join(WHEEL_LIB_DIR).join(INJECTION_LIB));
            out.push(up.join(INJECTION_LIB));
        }
    }
    if let Some(cwd) = cwd {
        out.push(cwd.join("target/release").join(INJECTION_LIB));
    }
    out
}

/// Finds the injection library: `$GAPSCOPE_INJECTION_LIB` when set (nothing else is tried),
/// else the first of [`injection_candidates`] that exists. Returns an absolute path.
pub fn find_injection_library(
    explicit: Option<OsString>,
    exe: Option<&Path>,
    cwd: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    let absolute = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    if let Some(p) = explicit.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!(
                "{INJECTION_LIB_VAR}={}: no such file; point it at gapscope's {INJECTION_LIB} (built by `cargo build --release`)",
                p.display()
            );
        }
        // The dynamic loader would refuse it in the program's process, with its own untagged
        // line, and the program would run untraced.
        if !is_elf(&p) {
            bail!(
                "{INJECTION_LIB_VAR}={}: not a shared library (no ELF header); point it at gapscope's {INJECTION_LIB}",
                p.display()
            );
        }
        return Ok(absolute(p));
    }
    let candidates = injection_candidates(exe, cwd);
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Ok(absolute(p.clone()));
    }
    let looked = candidates
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    bail!(
        "injection library {INJECTION_LIB} not found (looked at {looked}); reinstall gapscope (pip install gapscope puts it in <prefix>/lib/gapscope), build it with `cargo build --release`, or set {INJECTION_LIB_VAR}"
    )
}

/// Whether `path` starts as an ELF file does.
fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|()| magic == *b"\x7fELF")
}

/// `trace-*.json` files of `dir` with their modification times.
fn trace_files(dir: &Path) -> BTreeMap<PathBuf, Option<SystemTime>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("trace-") && name.ends_with(".json")
        })
        .map(|e| (e.path(), e.metadata().and_then(|m| m.modified()).ok()))
        .collect()
}

/// `LD_PRELOAD` with the injection library first and the caller's entries after it.
fn preload_list(lib: &Path, existing: Option<std::ffi::OsString>) -> std::ffi::OsString {
    let mut list = lib.as_os_str().to_owned();
    if let Some(rest) = existing.filter(|v| !v.is_empty()) {
        list.push(":");
        list.push(rest);
    }
    list
}

/// Refuses, before any program runs, a `GAPSCOPE_*` value the injection library could not use
/// (in the program it would only say so and record with the default): bad input (exit 2), the
/// first such value's one line.
pub fn check_settings() -> Result<(), super::Failure> {
    let refused =
        gapscope::record::inject::environment::refused_settings(&Setting::environment_value);
    match refused.into_iter().next() {
        Some(e) => Err(super::Failure::bad_input(e)),
        None => Ok(()),
    }
}

/// Runs `gapscope record`; returns the child's exit status.
pub fn run(args: &RecordOptions) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().ok();
    let cwd = std::env::current_dir().ok();
    let lib = find_injection_library(
        Setting::InjectionLib.read_os(),
        exe.as_deref(),
        cwd.as_deref(),
    )?;
    // The child loads the CUPTI resolved here, for the program's own environment, and says
    // which (its processes all see the same `CUPTI_LIB`).
    let cupti_env = gapscope::library_search::Environment::current(args.command.clone());
    let cupti = match gapscope::record::cupti::cupti_library(&cupti_env) {
        Ok(cupti) => {
            messages::line(&cupti.note());
            Some(cupti)
        }
        Err(e) => match cupti_failure(
            &e,
            gapscope::cuda::library()
                .err()
                .map(|e| e.to_string())
                .as_ref(),
        ) {
            CuptiFailure::Stop => return Err(e.into()),
            CuptiFailure::Note(note) => {
                messages::line(&note);
                None
            }
        },
    };
    let out = match &cwd {
        Some(cwd) if args.output.is_relative() => cwd.join(&args.output),
        _ => args.output.clone(),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    // Before the program runs: a folder the recorder cannot write into would cost a whole run
    // and leave no trace.
    super::check_output_folder(&out).map_err(|f| f.error)?;

    let (program, rest) = args
        .command
        .split_first()
        .context("no command given: gapscope record -- CMD [ARGS...]")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    hand_over_environment(
        &mut cmd,
        args,
        &lib,
        &out,
        cupti
            .as_ref()
            .map(|c| std::ffi::OsStr::new(c.path.as_str())),
    );
    let before = trace_files(&out);
    // Registered before the program starts, so that no signal in between ends gapscope alone.
    let signals = signal_hook::iterator::Signals::new(FORWARDED_SIGNALS).ok();
    if args.host_samples == HostSampling::Native {
        messages::note(host_sampler::NATIVE_NOT_BUILT);
    }
    let sampling = args.host_samples != HostSampling::Off;
    if sampling {
        cmd.env(gapscope::record::env::TRACING_FLAG_VAR, "1");
    }
    let (child, mut sampled) = run_program(&mut cmd, signals, sampling.then_some(&out));
    remove_tracing_flags(&out);
    let (child_pid, status) = match child {
        Ok(ended) => ended,
        // As shells do: 127 for a program not found, 126 for one that cannot be run.
        Err(e) => {
            let (code, what) = exit::not_started(e.kind());
            messages::error(&format!("{}: {what} ({e})", program.to_string_lossy()));
            return Ok(code);
        }
    };

    let (written, recovered) = traces_written(&out, &before, child_pid, status);
    let note = messages::note;
    if let Some(why) = sampled.as_ref().and_then(host_sampler::Sampled::note) {
        note(&why);
    }
    // Last, so that it is the line a wrapper (`try`) quotes for a run that wrote nothing.
    if written.is_empty() {
        note(NO_TRACE);
    }
    list_traces(&written, &recovered, sampled.as_mut());
    // The last line says why gapscope's exit code is not 0: it is the program's.
    if let Some(how) = ended_how(status) {
        note(&format!(
            "{} {how}; gapscope exits with its status",
            program.to_string_lossy()
        ));
    }
    Ok(exit::of_program(status))
}

/// The traces the program's processes wrote into `out` (new or changed since `before`), and
/// those rebuilt from what processes that died without writing (SIGKILL) had handed over;
/// the first list holds both.
fn traces_written(
    out: &Path,
    before: &BTreeMap<PathBuf, Option<SystemTime>>,
    child_pid: u32,
    status: std::process::ExitStatus,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut written: Vec<PathBuf> = trace_files(out)
        .into_iter()
        .filter(|(p, t)| before.get(p) != Some(t))
        .map(|(p, _)| p)
        .collect();
    // Processes that died without writing their trace (SIGKILL) left what they delivered.
    let (recovered, problems) = gapscope::record::spill::recover(out, &written, |pid| {
        match ended_how(status).filter(|_| pid == child_pid) {
            Some(how) => how,
            None => "ended".to_owned(),
        }
    });
    for problem in problems {
        messages::warning(&problem);
    }
    written.extend(recovered.iter().cloned());
    (written, recovered)
}

/// Removes the tracing flags the program's recorders left in `out` (see
/// [`gapscope::record::env::TracingFlag`]).
fn remove_tracing_flags(out: &Path) {
    let Ok(entries) = std::fs::read_dir(out) else {
        return;
    };
    for e in entries.flatten() {
        if gapscope::record::env::is_tracing_flag(&e.file_name().to_string_lossy()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Runs the program to its end, passing on the signals sent to gapscope and, with
/// `sample_into` (the trace folder, where the recorders keep their tracing flags), sampling its
/// host stacks while they trace; returns its pid and status (or why it could not start) and
/// the samples.
fn run_program(
    cmd: &mut std::process::Command,
    signals: Option<signal_hook::iterator::Signals>,
    sample_into: Option<&Path>,
) -> (
    std::io::Result<(u32, std::process::ExitStatus)>,
    Option<host_sampler::Sampled>,
) {
    let mut sampled = None;
    let child = cmd.spawn().and_then(|mut child| {
        let forwarding = signals.and_then(|s| forward_signals(s, child.id()));
        let sampler = sample_into.map(|out| {
            Sampler::start(
                child.id(),
                host_sampler::SAMPLE_RATE_HZ,
                Some(out.to_path_buf()),
            )
        });
        let waited = child.wait();
        // The program has ended: sampling stops before its traces are read.
        sampled = sampler.map(Sampler::finish);
        if let Some(handle) = forwarding {
            handle.close();
        }
        Ok((child.id(), waited?))
    });
    (child, sampled)
}

/// One line per trace written (after adding its process's host samples), then the command
/// that analyses them.
fn list_traces(
    written: &[PathBuf],
    recovered: &[PathBuf],
    mut sampled: Option<&mut host_sampler::Sampled>,
) {
    let note = messages::note;
    for p in written {
        match gapscope::trace::read_trace(p) {
            Ok(t) => {
                let host = sampled
                    .as_deref_mut()
                    .map_or(Ok(None), |s| host_sampler::add_to_trace(s, p, &t));
                let host = match host {
                    Ok(said) => said.map_or(String::new(), |said| format!(", {said}")),
                    Err(e) => {
                        messages::warning(&e.to_string());
                        String::new()
                    }
                };
                note(&wrote_line(p, &t, &host, recovered.contains(p)))
            }
            Err(e) => messages::warning(&e.to_string()),
        }
    }
    if !written.is_empty() {
        let shown: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        note(&format!(
            "analyse with: gapscope analyze {}",
            shown.join(" ")
        ));
    }
}

/// The environment the program is started with: the injection library (as CUDA's injection
/// and preloaded: its `_exit` stands in for libc's, so a process that ends with `os._exit`
/// still writes its trace), where traces go, the budget, the step range, the CUPTI found (and
/// NVTX's injection, so that NVTX ranges reach CUPTI, unless set) and handing records over
/// as they complete (unless `GAPSCOPE_SPILL` is set in gapscope's own environment: `0` keeps
/// the records in the program until it ends, to measure what handing them over costs).
fn hand_over_environment(
    cmd: &mut std::process::Command,
    args: &RecordOptions,
    lib: &Path,
    out: &Path,
    cupti: Option<&std::ffi::OsStr>,
) {
    cmd.env("CUDA_INJECTION64_PATH", lib)
        .env(OUT_VAR, out)
        .env(TRACE_BUDGET_VAR, args.trace_budget.to_string())
        .env(
            "LD_PRELOAD",
            preload_list(lib, std::env::var_os("LD_PRELOAD")),
        );
    if let Some(step) = &args.step_range {
        cmd.env(STEP_RANGE_VAR, step);
    }
    if let Some(cupti) = cupti {
        cmd.env(gapscope::library_search::CUPTI.variable, cupti);
        if std::env::var_os("NVTX_INJECTION64_PATH").is_none_or(|v| v.is_empty()) {
            cmd.env("NVTX_INJECTION64_PATH", cupti);
        }
    }
    if Setting::Spill.read_os().is_none() {
        cmd.env(gapscope::record::env::SPILL_VAR, "1");
    }
}

/// "wrote PATH (N kernels, M markers, …, D dropped records)": one trace a process wrote, with
/// what it holds (`host`: what its host samples say), what is missing, and whether it was
/// rebuilt from the records a process that died had handed over.
fn wrote_line(path: &Path, t: &gapscope::trace::Trace, host: &str, recovered: bool) -> String {
    let lost = gapscope::analysis::completeness::check(t);
    let summarised: u64 = t
        .metadata
        .sampling
        .as_ref()
        .and_then(|s| s.markers.as_ref())
        .map_or(0, |m| m.left_out.iter().map(|r| r.count).sum());
    format!(
        "wrote {} ({} kernels, {} markers{host}{}, {} dropped records{})",
        path.display(),
        t.kernels.len(),
        t.markers.len(),
        if summarised > 0 {
            format!(" (and {summarised} of untraced work summarised)")
        } else {
            String::new()
        },
        t.dropped_records,
        if lost.total() > 0 {
            format!("; not adding up: {}", lost.describe())
        } else {
            String::new()
        }
    ) + if recovered {
        "; the process died without writing it: written from the records it handed over as they completed (its notes say what may be missing)"
    } else {
        ""
    }
}

/// How a program that did not succeed ended ("exited with status 7", "was killed by signal 15
/// (SIGTERM)"); `None` for a success.
fn ended_how(status: std::process::ExitStatus) -> Option<String> {
    if status.success() {
        return None;
    }
    if let Some(code) = status.code() {
        return Some(format!("exited with status {code}"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                libc::SIGHUP => " (SIGHUP)",
                libc::SIGINT => " (SIGINT)",
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGTERM => " (SIGTERM)",
                _ => "",
            };
            return Some(format!("was killed by signal {sig}{name}"));
        }
    }
    Some("failed".to_owned())
}

/// What `record` does when no usable CUPTI is found.
#[derive(Debug, PartialEq, Eq)]
enum CuptiFailure {
    /// Fail before starting the program: it would run untraced.
    Stop,
    /// Run it anyway, saying so: there is no CUDA driver, so it cannot use the GPU.
    Note(String),
}

/// With a CUDA driver (`no_driver` is `None`), or a `CUPTI_LIB` that is wrong, a missing
/// CUPTI stops `record`; without a driver the program runs untraced (it may not use CUDA at all).
fn cupti_failure(error: &CuptiError, no_driver: Option<&String>) -> CuptiFailure {
    match (error, no_driver) {
        (CuptiError::CuptiLibInvalid { .. }, _) | (_, None) => CuptiFailure::Stop,
        (_, Some(reason)) => {
            let reason = reason.replace('\n', " ");
            let reason = if reason.contains(gapscope::cuda::LIBCUDA) {
                reason
            } else {
                format!("{}: {reason}", gapscope::cuda::LIBCUDA)
            };
            CuptiFailure::Note(format!(
                "gapscope: note: no CUDA driver here ({reason}), so the program runs untraced; and {error}"
            ))
        }
    }
}

/// The signals `gapscope record` passes on to the program, which then ends as it would (and
/// writes its trace): SIGTERM from a job manager (Slurm's `scancel`, `timeout`), `kill -INT`.
const FORWARDED_SIGNALS: [i32; 4] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
    signal_hook::consts::SIGQUIT,
];

/// Passes the signals sent to gapscope on to the program (`child`) until the handle is closed;
/// gapscope itself waits for the program and exits with its status. A terminal's Ctrl-C, Ctrl-\
/// or hang-up already reaches the whole foreground process group, the program included: those
/// are not sent a second time while gapscope is in the terminal's foreground group.
fn forward_signals(
    mut signals: signal_hook::iterator::Signals,
    child: u32,
) -> Option<signal_hook::iterator::Handle> {
    let handle = signals.handle();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child).ok()?);
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if sig != signal_hook::consts::SIGTERM && in_terminal_foreground() {
                continue;
            }
            if let Ok(signal) = nix::sys::signal::Signal::try_from(sig) {
                let _ = nix::sys::signal::kill(pid, signal);
            }
        }
    });
    Some(handle)
}

/// Whether this process belongs to the foreground process group of the terminal on stdin
/// (then a terminal's Ctrl-C reached its children already).
pub fn in_terminal_foreground() -> bool {
    nix::unistd::tcgetpgrp(std::io::stdin()).is_ok_and(|fg| fg == nix::unistd::getpgrp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injection_library_is_preloaded_first_and_the_callers_entries_kept() {
        let lib = Path::new("/x/libgapscope.so");
        assert_eq!(preload_list(lib, None), "/x/libgapscope.so");
        assert_eq!(preload_list(lib, Some("".into())), "/x/libgapscope.so");
        assert_eq!(
            preload_list(lib, Some("/a.so:/b.so".into())),
            "/x/libgapscope.so:/a.so:/b.so"
        );
    }

    #[test]
    fn candidates_follow_the_executable_then_target_release() {
        let c = injection_candidates(
            Some(Path::new("/opt/gs/target/release/gapscope")),
            Some(Path::new("/home/u/proj")),
        );
        assert_eq!(
            c,
            [
                PathBuf::from("/opt/gs/target/release/libgapscope.so"),
                PathBuf::from("/opt/gs/target/lib/gapscope/libgapscope.so"),
                PathBuf::from("/opt/gs/target/libgapscope.so"),
                PathBuf::from("/home/u/proj/target/release/libgapscope.so"),
            ]
        );
    }

    /// A wheel installs `<prefix>/bin/gapscope` and `<prefix>/lib/gapscope/libgapscope.so`.
    #[test]
    fn the_library_a_wheel_installs_is_found_from_its_binary() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("venv/bin/gapscope");
        let lib = dir
            .path()
            .join("venv")
            .join(WHEEL_LIB_DIR)
            .join(INJECTION_LIB);
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::write(&lib, b"").unwrap();
        let got = find_injection_library(None, Some(&exe), Some(dir.path())).unwrap();
        assert_eq!(
            got,
            std::fs::canonicalize(dir.path().join("venv/lib/gapscope/libgapscope.so")).unwrap()
        );
    }

    #[test]
    fn explicit_library_must_exist_and_wins() {
        let dir = tempfile::tempdir().unwrap();
        let err = find_injection_library(Some("/nonexistent/libgapscope.so".into()), None, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("{INJECTION_LIB_VAR}=/nonexistent")),
            "{err}"
        );
        assert!(!err.contains('\n'));
        let lib = dir.path().join("libx.so");
        std::fs::write(&lib, b"root:x:0:0").unwrap();
        let err = find_injection_library(Some(lib.clone().into()), None, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not a shared library (no ELF header)"),
            "{err}"
        );
        std::fs::write(&lib, b"\x7fELF").unwrap();
        let got = find_injection_library(Some(lib.clone().into()), None, None).unwrap();
        assert_eq!(got, std::fs::canonicalize(&lib).unwrap());
    }

    #[test]
    fn missing_library_names_the_places_looked_at() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("bin/gapscope");
        let err = find_injection_library(None, Some(&exe), Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not found"), "{err}");
        assert!(err.contains(&dir.path().join("bin/libgapscope.so").display().to_string()));
        assert!(err.contains(INJECTION_LIB_VAR), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn a_missing_cupti_stops_record_unless_there_is_no_driver() {
        let not_found = CuptiError::CuptiNotFound {
            looked_for: "libcupti.so.13".into(),
            searched: "$CUPTI_LIB (unset), /venv/x".into(),
            last_error: "not found".into(),
        };
        assert_eq!(cupti_failure(&not_found, None), CuptiFailure::Stop);
        let no_driver = "libcuda.so.1: cannot open shared object file".to_string();
        let CuptiFailure::Note(note) = cupti_failure(&not_found, Some(&no_driver)) else {
            panic!("a note without a driver");
        };
        assert!(
            note.starts_with("gapscope: note: no CUDA driver here (libcuda.so.1: cannot open"),
            "{note}"
        );
        assert!(note.contains("/venv/x"), "{note}");
        let CuptiFailure::Note(note) = cupti_failure(&not_found, Some(&"dlopen failed".into()))
        else {
            panic!("a note without a driver");
        };
        assert!(
            note.starts_with("gapscope: note: no CUDA driver here (libcuda.so.1: dlopen failed)"),
            "{note}"
        );
        // A CUPTI_LIB that names no library is the user's mistake: always an error.
        let invalid = CuptiError::CuptiLibInvalid {
            path: "/x".into(),
            reason: "no such file".into(),
        };
        assert_eq!(
            cupti_failure(&invalid, Some(&no_driver)),
            CuptiFailure::Stop
        );
    }
}
