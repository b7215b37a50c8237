//! `gapscope record` and the injection library, without a GPU: the child never initialises
//! CUDA, so no trace is written, but the environment, exit status and messages are checked.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NO_TRACE: &str = "no trace written: the program did not initialise CUDA (or the injection library was not loaded)";

/// `gapscope record` with an existing (dummy) injection library: these children never load it.
fn record(dir: &Path, args: &[&str]) -> Output {
    let lib = dir.join("libgapscope.so");
    if !lib.exists() {
        std::fs::write(&lib, b"\x7fELF").unwrap(); // a stub: its header only
    }
    Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .arg("record")
        .args(args)
        .env("GAPSCOPE_INJECTION_LIB", &lib)
        .output()
        .expect("run gapscope")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The cdylib built next to the test binary's gapscope (`cargo build` makes it; `cargo test`
/// alone does not).
/// The injection library `cargo build` puts beside the binary (the README's test command
/// builds it first).
fn built_library() -> PathBuf {
    let lib = Path::new(env!("CARGO_BIN_EXE_gapscope"))
        .parent()
        .expect("the binary's folder")
        .join("libgapscope.so");
    assert!(
        lib.is_file(),
        "no {} (run `cargo build` before the tests)",
        lib.display()
    );
    lib
}

#[test]
fn program_without_cuda_exits_0_and_says_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("traces");
    let out = record(dir.path(), &["-o", out_dir.to_str().unwrap(), "--", "true"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.contains(NO_TRACE)).count(),
        1,
        "{err}"
    );
    assert!(out_dir.is_dir(), "output folder is created");
}

#[test]
fn exit_status_is_passed_on() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("t");
    let out = record(
        dir.path(),
        &["-o", o.to_str().unwrap(), "--", "sh", "-c", "exit 3"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // Without `--` too: everything from the first positional on is the command.
    let out = record(
        dir.path(),
        &["-o", o.to_str().unwrap(), "sh", "-c", "exit 4"],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    // Killed by a signal: 128 + N, as shells report it.
    let out = record(
        dir.path(),
        &["-o", o.to_str().unwrap(), "--", "sh", "-c", "kill -TERM $$"],
    );
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
}

#[test]
fn child_gets_the_injection_environment() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("out");
    let out = record(
        dir.path(),
        &[
            "-o",
            o.to_str().unwrap(),
            "--step-range",
            "step",
            "--",
            "sh",
            "-c",
            "echo \"$CUDA_INJECTION64_PATH|$GAPSCOPE_OUT|$GAPSCOPE_STEP_RANGE\"",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lib = std::fs::canonicalize(dir.path().join("libgapscope.so")).unwrap();
    let o = std::fs::canonicalize(&o).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}|{}|step", lib.display(), o.display())
    );
}

#[test]
fn trace_budget_reaches_the_child_from_the_flag_the_environment_or_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let budget_seen = |args: &[&str], env: Option<&str>| {
        let lib = dir.path().join("libgapscope.so");
        std::fs::write(&lib, b"\x7fELF").unwrap(); // a stub: its header only
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gapscope"));
        cmd.arg("record")
            .args(["-o", dir.path().join("out").to_str().unwrap()])
            .args(args)
            .args(["--", "sh", "-c", "echo $GAPSCOPE_TRACE_BUDGET"])
            .env("GAPSCOPE_INJECTION_LIB", &lib)
            .env_remove("GAPSCOPE_TRACE_BUDGET");
        if let Some(v) = env {
            cmd.env("GAPSCOPE_TRACE_BUDGET", v);
        }
        let out = cmd.output().expect("run gapscope");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(budget_seen(&[], None), "16");
    assert_eq!(budget_seen(&["--trace-budget", "0"], None), "0");
    assert_eq!(budget_seen(&[], Some("24")), "24");
    assert_eq!(
        budget_seen(&["--trace-budget", "8"], Some("24")),
        "8",
        "the flag wins"
    );

    let bad = record(dir.path(), &["--trace-budget", "lots", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("--trace-budget"), "{}", stderr(&bad));
}

#[test]
fn relative_output_folder_is_made_absolute_for_the_child() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("libgapscope.so"), b"\x7fELF").unwrap(); // a stub
    let out = Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args([
            "record",
            "-o",
            "rel",
            "--",
            "sh",
            "-c",
            "echo $GAPSCOPE_OUT",
        ])
        .env("GAPSCOPE_INJECTION_LIB", dir.path().join("libgapscope.so"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(Path::new(&got).is_absolute(), "{got}");
    assert!(got.ends_with("/rel"), "{got}");
}

#[test]
fn missing_injection_library_is_one_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    // Named explicitly but absent.
    let out = Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args(["record", "--", "true"])
        .env("GAPSCOPE_INJECTION_LIB", "/nonexistent/libgapscope.so")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("gapscope: error: "), "{err}");
    assert!(err.contains("GAPSCOPE_INJECTION_LIB"), "{err}");

    // Named explicitly but no library: refused before the program runs, not by the loader.
    let not_elf = dir.path().join("libgapscope.so");
    std::fs::write(&not_elf, "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args(["record", "--", "sh", "-c", "echo ran"])
        .env("GAPSCOPE_INJECTION_LIB", &not_elf)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("not a shared library (no ELF header)"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    std::fs::remove_file(&not_elf).unwrap();

    // Not next to the executable, not one folder up, not in ./target/release.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let exe = bin.join("gapscope");
    std::fs::copy(env!("CARGO_BIN_EXE_gapscope"), &exe).unwrap();
    let out = Command::new(&exe)
        .args(["record", "--", "true"])
        .env_remove("GAPSCOPE_INJECTION_LIB")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("libgapscope.so not found"), "{err}");
    assert!(!dir.path().join("gapscope-out").exists(), "nothing created");
}

#[test]
fn missing_command_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args(["record"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn cdylib_exports_initialize_injection() {
    let lib = built_library();
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils) runs");
    let symbols = String::from_utf8_lossy(&out.stdout);
    assert!(
        symbols
            .lines()
            .any(|l| l.split_whitespace().last() == Some("InitializeInjection")),
        "{} does not export InitializeInjection",
        lib.display()
    );
}

/// Loads the real cdylib into a process that finds no CUPTI (through Python's ctypes) and calls
/// `InitializeInjection` twice: both calls fail the same way, with one `gapscope:` line on
/// stderr, and the process carries on.
/// A Python process that loads the built injection library and calls its entry point `calls`
/// times (printing what each returned), with `env` and its trace folder in `dir`: no CUPTI
/// where it is named, so the injection fails on any machine, GPU or not.
fn inject_without_cupti(dir: &Path, calls: usize, env: &[(&str, &str)]) -> Output {
    let lib = built_library();
    let script = format!(
        "import ctypes\nl = ctypes.CDLL({:?})\nprint({})",
        lib.display().to_string(),
        vec!["l.InitializeInjection()"; calls].join(", ")
    );
    Command::new("python3")
        .args(["-c", &script])
        .env("GAPSCOPE_OUT", dir.join("out"))
        .env("CUPTI_LIB", dir.join("no-such-libcupti.so"))
        .envs(env.iter().copied())
        .output()
        .expect("python3 runs")
}

#[test]
fn injection_without_cuda_fails_in_one_line_and_only_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = inject_without_cupti(dir.path(), 2, &[]);
    let err = stderr(&out);
    let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(got, "0 0", "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("gapscope: warning: not tracing this process: "),
        "{err}"
    );
    assert!(!dir.path().join("out").exists(), "{err}");
}

/// `gapscope record` with `var=value` refuses it in one line before the program runs (nor is
/// the injection library looked for): bad input, exit 2.
fn refused_before_the_program_runs(var: &str, value: &str, expected: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args(["record", "-o", "traces", "--", "sh", "-c", "echo ran"])
        .env("GAPSCOPE_INJECTION_LIB", "/nonexistent/libgapscope.so")
        .env(var, value)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "gapscope: error: {var}={:?}: expected {expected}",
            value.trim()
        )
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    assert!(!dir.path().join("traces").exists(), "nothing created");
}

/// One test per setting the recorder reads: its bad value and the line that refuses it.
macro_rules! refused_settings {
    ($($test:ident: $var:literal = $value:literal => $expected:literal;)+) => {
        $(
            #[test]
            fn $test() {
                refused_before_the_program_runs($var, $value, $expected);
            }
        )+
    };
}

refused_settings! {
    cupti_api_refuses_a_word_but_all: "GAPSCOPE_CUPTI_API" = "some" => "`all` (or unset)";
    cupti_sync_is_a_switch: "GAPSCOPE_CUPTI_SYNC" = "yes" => "`0` or `1`";
    cupti_callbacks_refuses_an_unknown_set: "GAPSCOPE_CUPTI_CALLBACKS" = "launches"
        => "`all`, `graph-building`, `graph-building-with-launches` or `off`";
    cupti_buffer_kib_refuses_zero_before_the_program_runs: "GAPSCOPE_CUPTI_BUFFER_KIB" = "0"
        => "a positive number of KiB";
    cupti_skip_refuses_an_unknown_kind: "GAPSCOPE_CUPTI_SKIP" = "DRIVER,KERNELS"
        => "activity kinds, comma-separated, of CONCURRENT_KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, SYNCHRONIZATION, CUDA_EVENT";
    cupti_api_only_refuses_an_empty_list: "GAPSCOPE_CUPTI_API_ONLY" = " , "
        => "parts of API call names, comma-separated (e.g. `Launch,EventRecord`)";
    cupti_per_thread_buffers_is_a_switch: "GAPSCOPE_CUPTI_PER_THREAD_BUFFERS" = "on" => "`0` or `1`";
    cupti_host_pinned_is_a_switch: "GAPSCOPE_CUPTI_HOST_PINNED" = "false" => "`0` or `1`";
    cupti_node_frames_is_a_switch: "GAPSCOPE_CUPTI_NODE_FRAMES" = "off" => "`0` or `1`";
    cupti_api_from_refuses_a_word_but_callbacks: "GAPSCOPE_CUPTI_API_FROM" = "callback"
        => "`callbacks` (or unset)";
    cupti_graph_trace_is_a_switch: "GAPSCOPE_CUPTI_GRAPH_TRACE" = "2" => "`0` or `1`";
    cupti_attr_refuses_a_pair_that_is_not_numbers: "GAPSCOPE_CUPTI_ATTR" = "0=67108864,6=x"
        => "`ATTR=VALUE` pairs of numbers, comma-separated (e.g. `0=67108864`)";
    cupti_flush_period_refuses_a_non_number: "GAPSCOPE_CUPTI_FLUSH_PERIOD_MS" = "10ms"
        => "a number of milliseconds";
    budget_pause_filter_is_a_switch: "GAPSCOPE_BUDGET_PAUSE_FILTER" = "no" => "`0` or `1`";
    budget_measure_is_a_switch: "GAPSCOPE_BUDGET_MEASURE" = "-1" => "`0` or `1`";
    budget_pace_is_a_switch: "GAPSCOPE_BUDGET_PACE" = "true" => "`0` or `1`";
    spill_is_a_switch: "GAPSCOPE_SPILL" = " 2 " => "`0` or `1`";
    tracing_flag_is_a_switch: "GAPSCOPE_TRACING_FLAG" = "yes" => "`0` or `1`";
    signal_backtrace_is_a_switch: "GAPSCOPE_SIGNAL_BACKTRACE" = "y" => "`0` or `1`";
}

/// The injected library never stops the program for a bad setting: it says it in one line,
/// takes the default and goes on (here to fail for want of CUPTI, as without the setting).
#[test]
fn the_injection_library_says_a_bad_setting_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let out = inject_without_cupti(dir.path(), 1, &[("GAPSCOPE_CUPTI_SYNC", "yes")]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert_eq!(
        lines[0],
        "gapscope: warning: GAPSCOPE_CUPTI_SYNC=\"yes\": expected `0` or `1`; using the default"
    );
    assert!(
        lines[1].starts_with("gapscope: warning: not tracing this process: "),
        "{err}"
    );
}

/// `os._exit` skips `atexit`, where a traced process writes its trace; `record` preloads the
/// injection library so that its `_exit` runs first. In a process that was never traced it
/// must end exactly as libc's would: the status passes through, nothing else happens.
#[test]
fn preloaded_exit_ends_untraced_processes_as_libc_does() {
    let lib = built_library();
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("t");
    let run = |script: &str| {
        Command::new(env!("CARGO_BIN_EXE_gapscope"))
            .args(["record", "-o", o.to_str().unwrap(), "--", "python3", "-c"])
            .arg(script)
            .env("GAPSCOPE_INJECTION_LIB", &lib)
            .env("LD_PRELOAD", "")
            .output()
            .expect("run gapscope")
    };
    let out =
        run("import os, sys; print(os.environ['LD_PRELOAD']); sys.stdout.flush(); os._exit(7)");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(7), "{err}");
    let preload = String::from_utf8_lossy(&out.stdout);
    assert_eq!(preload.trim(), lib.to_str().unwrap(), "{err}");
    assert!(!err.contains("ld.so"), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.contains(NO_TRACE)).count(),
        1,
        "{err}"
    );
    // The other ways out are unchanged: exit(), and a signal (128 + N). libc's exit() still
    // runs after this library's: C stdio buffered in the pipe is flushed.
    assert_eq!(run("import sys; sys.exit(5)").status.code(), Some(5));
    let out =
        run("import ctypes; c = ctypes.CDLL(None); c.printf(b'buffered by C stdio\\n'); c.exit(6)");
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "buffered by C stdio\n",
        "{}",
        stderr(&out)
    );
    assert_eq!(
        run("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
            .status
            .code(),
        Some(143)
    );
}

/// pip's `nvidia-cuda-cupti` in a virtual environment, as torch installs it (`.ci/run` makes
/// one and names it in `GAPSCOPE_TEST_CUPTI_VENV`): `record -- VENV/bin/python …` loads that
/// libcupti (no GPU needed to load it), says where it came from, and hands it to the child,
/// with no other Python environment, `LD_LIBRARY_PATH` or toolkit in the way.
#[test]
#[ignore = "needs a virtual environment holding pip's nvidia-cuda-cupti, named by GAPSCOPE_TEST_CUPTI_VENV (.ci/run makes one)"]
fn cupti_comes_from_the_programs_python_environment() {
    let venv = PathBuf::from(
        std::env::var_os("GAPSCOPE_TEST_CUPTI_VENV").expect("GAPSCOPE_TEST_CUPTI_VENV is set"),
    );
    let python = venv.join("bin/python");
    let libcupti = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .join("site-packages/nvidia/cu13/lib/libcupti.so.13")
        })
        .find(|p| p.is_file())
        .expect("the venv holds nvidia-cuda-cupti 13");
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("traces");
    let run = |cupti_lib: Option<&Path>| {
        let lib = dir.path().join("libgapscope.so");
        std::fs::write(&lib, b"\x7fELF").unwrap(); // a stub: its header only
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gapscope"));
        cmd.args(["record", "-o", out_dir.to_str().unwrap(), "--"])
            .arg(&python)
            .args([
                "-c",
                "import os; print(os.environ['CUPTI_LIB'], os.environ['NVTX_INJECTION64_PATH'])",
            ])
            .env("GAPSCOPE_INJECTION_LIB", &lib)
            .env("PATH", "/usr/bin:/bin")
            .env_remove("NVTX_INJECTION64_PATH");
        for var in [
            "VIRTUAL_ENV",
            "CONDA_PREFIX",
            "LD_LIBRARY_PATH",
            "CUDA_HOME",
            "CUDA_PATH",
        ] {
            cmd.env_remove(var);
        }
        match cupti_lib {
            Some(p) => cmd.env("CUPTI_LIB", p),
            None => cmd.env_remove("CUPTI_LIB"),
        };
        cmd.output().unwrap()
    };

    let out = run(None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let want = format!(
        "gapscope: note: using CUPTI from {} (API version 13",
        libcupti.display()
    );
    let note = err
        .lines()
        .find(|l| l.starts_with(&want))
        .unwrap_or_else(|| panic!("no line starting {want:?} in:\n{err}"));
    assert!(
        note.ends_with(&format!(
            "; found through the Python environment {} of the command's interpreter {})",
            venv.display(),
            python.display()
        )),
        "{note}"
    );
    let shown = libcupti.display().to_string();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{shown} {shown}"),
        "the child loads the CUPTI named in the note: {err}"
    );

    // CUPTI_LIB names it explicitly: taken as it is, and said so.
    let out = run(Some(&libcupti));
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.starts_with(&want) && l.ends_with("; found through $CUPTI_LIB)")),
        "{err}"
    );
}

/// Issue 25 e: a recorded process killed with SIGKILL (as by the OOM killer) before writing
/// its trace. The child (`gapscope spill-test-child`) hands over three buffers of 100 steps
/// through the recorder's spill writer, then kills itself; `record` writes the trace from what
/// was delivered, with a note, and passes on 128 + 9.
#[test]
fn a_program_killed_with_sigkill_leaves_the_records_it_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("out");
    let out = record(
        dir.path(),
        &[
            "-o",
            o.to_str().unwrap(),
            "--",
            env!("CARGO_BIN_EXE_gapscope"),
            "spill-test-child",
            "--deliveries",
            "3",
            "--records",
            "100",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(128 + 9), "{err}");
    let traces: Vec<PathBuf> = std::fs::read_dir(&o)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        traces.len(),
        1,
        "the trace, and no spill file left: {traces:?}"
    );
    let name = traces[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with("trace-pid") && name.ends_with(".json"),
        "{name}"
    );
    assert!(
        err.contains(&format!("wrote {}", traces[0].display()))
            && err.contains("(300 kernels, 300 markers"),
        "{err}"
    );
    assert!(err.contains("was killed by signal 9 (SIGKILL)"), "{err}");
    assert!(err.contains("the process died without writing it"), "{err}");
    let t = gapscope::trace::read_trace(&traces[0]).expect("a valid trace");
    assert_eq!(
        (t.kernels.len(), t.api_calls.len(), t.markers.len()),
        (300, 300, 300)
    );
    assert!(
        t.markers
            .iter()
            .all(|m| m.kind == gapscope::trace::MarkerKind::Step),
        "the step range is marked as the recorder would"
    );
    let last_kernel = t.kernels.last().unwrap();
    assert_eq!(t.str(last_kernel.name), "kernel_of_buffer_2");
    let note = t.metadata.notes.last().unwrap();
    assert!(
        note.contains("was killed by signal 9 (SIGKILL) without writing its trace")
            && note.contains("from the 3 deliveries")
            && note.contains("missing are the records of the buffers not completed"),
        "{note}"
    );
    // analyze reads it as any trace.
    let a = gapscope::analysis::analyze(&[t], &["killed".into()], &Default::default());
    assert_eq!(a.cells.len(), 1);
}

/// Issue 45 a: a program that is not Python gets one note saying it was not sampled, and is
/// otherwise recorded as without; `--host-samples off` says nothing; a Python program is
/// sampled without a note.
#[test]
fn host_samples_refused_in_one_note_and_off_says_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("out");
    let o = o.to_str().unwrap();
    let note = "no host samples: ";
    let out = record(dir.path(), &["-o", o, "--", "sleep", "0.5"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().filter(|l| l.contains(note)).count(), 1, "{err}");
    assert_eq!(
        err.lines().filter(|l| l.contains(NO_TRACE)).count(),
        1,
        "{err}"
    );
    let out = record(
        dir.path(),
        &["-o", o, "--host-samples", "off", "--", "sleep", "0.2"],
    );
    assert!(!stderr(&out).contains(note), "{}", stderr(&out));
    // The same from the environment (an overhead bench's variant).
    let lib = dir.path().join("libgapscope.so");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args(["record", "-o", o, "--", "sleep", "0.2"])
        .env("GAPSCOPE_INJECTION_LIB", &lib)
        .env("GAPSCOPE_HOST_SAMPLES", "off")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains(note), "{}", stderr(&out));
    let python = "import time\nend = time.time() + 1.5\nwhile time.time() < end:\n    pass\n";
    let out = record(dir.path(), &["-o", o, "--", "python3", "-c", python]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains(note), "{}", stderr(&out));
    let out = record(
        dir.path(),
        &[
            "-o",
            o,
            "--host-samples",
            "native",
            "--",
            "python3",
            "-c",
            python,
        ],
    );
    let err = stderr(&out);
    assert!(
        err.contains("--host-samples native: native frames need py-spy's unwind feature"),
        "{err}"
    );
    assert!(!err.contains(note), "{err}");
}

/// `record` of a Python program that writes a trace as the injected recorder would (its pid
/// in the workload), after 0.6 s in `gapscope_busy_step`, its two API records `shift_ns` before
/// the real times (`python3 -c SCRIPT SHIFT`).
fn record_python_writing_its_trace(dir: &Path, shift_ns: u64) -> (Output, PathBuf) {
    let o = dir.join("out");
    let script = r#"
import json, os, sys, threading, time
def gapscope_busy_step():
    end = time.time() + 0.6
    while time.time() < end:
        pass
shift = int(sys.argv[1])
# As the injected recorder does under `record` sampling host stacks: "tracing" from the start.
if os.environ.get("GAPSCOPE_TRACING_FLAG") == "1":
    with open(os.path.join(os.environ["GAPSCOPE_OUT"], f".gapscope-tracing-{os.getpid()}"), "w") as f:
        f.write("1")
t0 = time.time_ns() - shift
gapscope_busy_step()
t1 = time.time_ns() - shift
tid = threading.get_native_id()
trace = {"schema_version": 1,
         "metadata": {"tool": "test", "source": "synthetic", "workload": {"pid": os.getpid()}},
         "strings": ["cudaLaunchKernel"],
         "api_calls": [[t0, t0 + 1000, 1, tid, 0, "runtime"], [t1, t1 + 1000, 2, tid, 0, "runtime"]]}
with open(os.path.join(os.environ["GAPSCOPE_OUT"], "trace-0.json"), "w") as f:
    json.dump(trace, f)
"#;
    let shift = shift_ns.to_string();
    let args = [
        "-o",
        o.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        script,
        &shift,
    ];
    (record(dir, &args), o.join("trace-0.json"))
}

/// Issue 45 a end to end: the samples of the Python program's own process go into the trace
/// it wrote, named by its function, on its main thread, near its API records; the `wrote` line
/// counts them. With its records 1000 s in the past (clocks apart), none is kept, and the
/// `wrote` line says why.
#[test]
fn host_samples_go_into_the_trace_of_the_process_they_were_read_from() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record_python_writing_its_trace(dir.path(), 0);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let t = gapscope::trace::read_trace(&path).expect("a valid trace");
    let samples = t.host_samples.as_ref().expect("host samples added");
    let pid = t.metadata.workload["pid"].as_u64().unwrap() as u32;
    let named = samples
        .samples
        .iter()
        .filter(|s| {
            samples
                .stack(s.stack)
                .any(|f| f.function == "gapscope_busy_step")
        })
        .count();
    assert!(named >= 100, "{named} of {} samples", samples.samples.len());
    assert!(
        samples.samples.iter().all(|s| s.thread == pid),
        "the main thread"
    );
    let (first, last) = (t.api_calls[0].start, t.api_calls[1].end);
    let margin = gapscope::record::host_sampler::RECORD_MARGIN_NS;
    assert!(
        samples
            .samples
            .iter()
            .all(|s| s.time + margin >= first && s.time <= last + margin)
    );
    assert!(
        err.contains(&format!("{} host samples", samples.samples.len())),
        "{err}"
    );
    assert!(!err.contains("no host samples"), "{err}");
    let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".gapscope-tracing-")
        })
        .collect();
    assert!(left.is_empty(), "the tracing flag is removed: {left:?}");

    let (out, path) = record_python_writing_its_trace(dir.path(), 1_000_000_000_000);
    let err = stderr(&out);
    let t = gapscope::trace::read_trace(&path).expect("a valid trace");
    let samples = t
        .host_samples
        .as_ref()
        .expect("the field, with what was left out");
    assert!(samples.samples.is_empty());
    assert!(
        samples.away_from_records > 100,
        "{}",
        samples.away_from_records
    );
    assert!(
        err.contains(&format!(
            "no host samples kept: all {} were more than 1 s from every API record",
            samples.away_from_records
        )),
        "{err}"
    );
}
