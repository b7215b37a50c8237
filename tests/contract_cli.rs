//! The CLI's contract, second round (issue 27): messages and damaged input. Every line
//! gapscope writes to stderr is a note, a warning or, last and once, an error, each one line;
//! usage errors are one line; a full stdout is an error everywhere; outputs are checked before
//! any work and reported only once written; damaged traces are named and kept out of the
//! figures. One test per case. Third round (issue 42) at the end: a stderr that cannot be
//! written, overlaps under a millisecond, thresholds below 1, format characters in names,
//! `man`'s note, the thread cap, devices in `compare`, `-o /proc`.

mod common;
use common::{bin, fails_in_one_line, gapscope, stderr, stdout, write};
use gapscope::trace::synthetic::{self, SyntheticCell};
use gapscope::trace::{self, Trace};
use std::path::Path;
use std::process::{Output, Stdio};

/// gapscope with stdout on `/dev/full`; `None` where there is none.
fn to_full_stdout(args: &[&str]) -> Option<Output> {
    let full = std::fs::File::create("/dev/full").ok()?;
    Some(
        bin()
            .args(args)
            .stdout(full)
            .output()
            .expect("run gapscope"),
    )
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn bundled(name: &str) -> String {
    repo().join("traces").join(name).display().to_string()
}

/// Every line gapscope itself writes is a note, a warning or an error.
fn own_lines_are_tagged(err: &str) {
    for line in err.lines().filter(|l| l.starts_with("gapscope")) {
        assert!(
            [
                "gapscope: note: ",
                "gapscope: warning: ",
                "gapscope: error: "
            ]
            .iter()
            .any(|p| line.starts_with(p)),
            "{err}"
        );
    }
}

/// Exit `code`, the error the last line on stderr, only notes before it; returns the error.
fn fails_after_notes(out: &Output, code: i32) -> String {
    assert!(
        !stderr(out).contains("wrote "),
        "nothing reported written: {}",
        stderr(out)
    );
    common::fails_after_notes(out, code)
}

// Row 5
#[test]
fn a_newline_or_escape_in_a_path_stays_inside_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("a\nb\u{1b}[2J.json");
    let out = gapscope(&["analyze", missing.to_str().unwrap()]);
    let line = fails_in_one_line(&out, 2);
    assert!(line.contains("a\\nb\\u{1b}[2J.json"), "{line}");
    // -o through a file whose name holds a newline.
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(3));
    let in_the_way = dir.path().join("x\ny");
    std::fs::write(&in_the_way, "").unwrap();
    let out = gapscope(&[
        "analyze",
        &p,
        "-o",
        in_the_way.join("out").to_str().unwrap(),
    ]);
    let line = fails_in_one_line(&out, 1);
    assert!(line.contains("x\\ny: not a folder"), "{line}");
}

// Row 6
#[test]
fn usage_errors_are_one_line_that_names_what_is_missing() {
    let line = fails_in_one_line(&gapscope(&[]), 2);
    assert!(
        line.contains("no command given; try gapscope --help"),
        "{line}"
    );
    let line = fails_in_one_line(&gapscope(&["analyze"]), 2);
    assert!(line.contains("<TRACES>"), "{line}");
    let t = bundled("emu-h200.json");
    let line = fails_in_one_line(&gapscope(&["export", &t]), 2);
    assert!(line.contains("--output"), "{line}");
    let line = fails_in_one_line(&gapscope(&["analyze", &t, "--nosuch"]), 2);
    assert!(line.contains("'--nosuch'"), "{line}");
    assert!(!line.contains("tip: to pass"), "{line}");
}

// Row 7
#[cfg(unix)]
#[test]
fn a_full_stdout_is_an_error_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let t = bundled("emu-h200.json");
    let ranks = bundled("torch-graphs-2rank-h200/mixing-1");
    let o = dir.path().join("o");
    let o = o.to_str().unwrap();
    for args in [
        vec!["--version"],
        vec!["--help"],
        vec!["analyze", "--help"],
        vec!["help", "compare"],
        vec!["analyze", &t],
        vec!["analyze", &t, "--json"],
        vec!["analyze", &t, "--full"],
        vec!["compare", &t, &t],
        vec!["compare", &t, &t, "--format", "github"],
        vec!["merge", &ranks],
        vec!["merge", &ranks, "--json"],
        vec!["run", "--bundled", "-o", o],
    ] {
        let Some(out) = to_full_stdout(&args) else {
            println!("no /dev/full here");
            return;
        };
        let line = fails_after_notes(&out, 1);
        assert!(
            line.contains("cannot write to standard output"),
            "{args:?}: {line}"
        );
    }
}

// Row 8
#[cfg(unix)]
#[test]
fn only_notes_come_before_the_error_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let t = bundled("emu-h200.json");
    // An output folder that cannot be made, and a file in the way: refused before any work.
    for o in ["/proc/gapscope-cannot-write-here".to_owned(), {
        let f = dir.path().join("afile");
        std::fs::write(&f, "").unwrap();
        f.display().to_string()
    }] {
        let out = gapscope(&["run", "-o", &o]);
        let line = fails_in_one_line(&out, 1);
        assert!(line.contains(&o), "{line}");
        let out = gapscope(&["analyze", &t, "-o", &o]);
        fails_in_one_line(&out, 1);
    }
    // A full stdout: the notes (no GPU, bundled traces), the error, and no output set.
    let d = dir.path().join("d");
    let ranks = bundled("torch-graphs-2rank-h200/mixing-1");
    for args in [
        vec!["run", "--bundled", "--json", "-o", d.to_str().unwrap()],
        vec!["analyze", &t, "-o", d.to_str().unwrap()],
        vec!["merge", &ranks, "-o", d.to_str().unwrap()],
        vec!["compare", &t, &t, "-o", d.to_str().unwrap()],
    ] {
        let Some(out) = to_full_stdout(&args) else {
            return;
        };
        fails_after_notes(&out, 1);
        for f in ["report.md", "report.json", "compare.json"] {
            assert!(!d.join(f).exists(), "{args:?}: {f} written");
        }
    }
    let out = gapscope(&["run", "--bundled", "-o", d.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.starts_with("gapscope: note: --bundled: analysing the bundled traces"),
        "{err}"
    );
    own_lines_are_tagged(&err);
    assert!(
        err.lines().any(|l| l.starts_with("gapscope: note: wrote ")),
        "{err}"
    );
}

// Row 9
#[cfg(unix)]
#[test]
fn record_keeps_the_programs_exit_code_and_ends_with_a_note() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libgapscope.so");
    std::fs::write(&lib, b"\x7fELF").unwrap(); // a stub: its header only
    for (script, body, code, says) in [
        ("exit7.sh", "#!/bin/sh\nexit 7\n", 7, "exited with status 7"),
        (
            "selfkill.sh",
            "#!/bin/sh\nkill -TERM $$\n",
            143,
            "was killed by signal 15 (SIGTERM)",
        ),
    ] {
        let p = dir.path().join(script);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = bin()
            .args(["record", "-o", dir.path().join("o").to_str().unwrap(), "--"])
            .arg(&p)
            .env("GAPSCOPE_INJECTION_LIB", &lib)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{err}");
        own_lines_are_tagged(&err);
        let last = err.trim_end().lines().last().unwrap();
        assert!(last.starts_with("gapscope: note: "), "{err}");
        assert!(last.contains(says), "{err}");
    }
}

// Row 11
#[test]
fn an_origin_step_past_the_steps_is_refused_before_any_output() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), "t.json", &synthetic::emu_experiment(5));
    for extra in [None, Some("--json"), Some("--full")] {
        let mut args = vec!["analyze", &t, "--origin-step", "100000"];
        args.extend(extra);
        let out = gapscope(&args);
        let line = fails_in_one_line(&out, 2);
        assert!(line.contains("--origin-step 100000"), "{line}");
        assert!(out.stdout.is_empty(), "{extra:?}");
    }
    // compare writes no Perfetto trace or SVG: the flag is not one of its own.
    let out = gapscope(&["compare", &t, &t, "--origin-step", "100000"]);
    let line = fails_in_one_line(&out, 2);
    assert!(line.contains("'--origin-step'"), "{line}");
    assert!(out.stdout.is_empty());
}

/// A trace whose first kernel name and first cell label carry an escape sequence, a newline
/// and a pipe.
fn hostile_names() -> Trace {
    let mut t = synthetic::emu_experiment(5);
    let spin = t.strings.iter().position(|s| s == "spin").unwrap();
    t.strings[spin] = "spin\u{1b}[31m\nred|x".into();
    t.metadata.cells[0].label = "cell\u{1b}]0;title\u{7}".into();
    t
}

// Bullet: names sanitised for the terminal and Markdown tables
#[test]
fn names_with_escapes_and_newlines_are_sanitised_on_the_terminal_and_in_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &hostile_names());
    let o = dir.path().join("o");
    for flag in [None, Some("--full")] {
        let mut args = vec!["analyze", &p, "-o", o.to_str().unwrap()];
        args.extend(flag);
        let out = gapscope(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let screen = stdout(&out);
        assert!(
            !screen.contains('\u{1b}') && !screen.contains('\u{7}'),
            "{screen}"
        );
        assert!(
            screen.contains("spin\\u{1b}[31m\\nred"),
            "{flag:?}: {screen}"
        );
    }
    let md = std::fs::read_to_string(o.join("report.md")).unwrap();
    assert!(!md.contains('\u{1b}'), "{md}");
    assert!(md.contains("spin\\u{1b}[31m\\nred\\|x"), "{md}");
    // Every table row has as many cells as its header.
    let mut columns = None;
    for line in md.lines() {
        if !line.starts_with('|') {
            columns = None;
            continue;
        }
        let n = line.replace("\\|", "").matches('|').count();
        assert_eq!(*columns.get_or_insert(n), n, "{line}");
    }
    // JSON keeps the name as it is (escaped as JSON escapes it).
    let json = std::fs::read_to_string(o.join("report.json")).unwrap();
    assert!(json.contains("spin\\u001b[31m\\nred|x"), "{json}");
}

// Bullet: a folder once used as -o
#[test]
fn a_folder_once_used_as_output_is_still_a_folder_of_traces() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d");
    let d_str = d.to_str().unwrap();
    let t = synthetic::emu_experiment(5);
    let outside = write(dir.path(), "t.json", &t);
    assert_eq!(
        gapscope(&["analyze", &outside, "-o", d_str]).status.code(),
        Some(0)
    );
    assert_eq!(
        gapscope(&["compare", &outside, &outside, "-o", d_str])
            .status
            .code(),
        Some(0)
    );
    // Only gapscope's outputs: refused, saying so.
    let line = fails_in_one_line(&gapscope(&["analyze", d_str]), 2);
    assert!(line.contains("only gapscope's own outputs"), "{line}");
    // With a trace beside them: the outputs are skipped, with a note.
    write(&d, "trace.json", &t);
    let out = gapscope(&["analyze", d_str, "--json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("compare.json, report.json skipped (gapscope's own outputs"),
        "{err}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["inputs"].as_array().unwrap().len(), 1);
    // Named on its own, a report is still refused for what it is.
    let out = gapscope(&["analyze", d.join("report.json").to_str().unwrap()]);
    assert!(fails_in_one_line(&out, 2).contains("gapscope report"));
}

/// The analysis of `t` through the CLI: its JSON report and stderr.
fn analyze_json(dir: &Path, name: &str, t: &Trace) -> (serde_json::Value, String) {
    let p = write(dir, name, t);
    let out = gapscope(&["analyze", &p, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    (serde_json::from_slice(&out.stdout).unwrap(), stderr(&out))
}

fn period_p90(report: &serde_json::Value, cell: usize) -> f64 {
    report["cells"][cell]["period"]["p90"].as_f64().unwrap()
}

// Bullet: damaged traces named and kept out of the figures
#[test]
fn damaged_traces_are_named_in_a_note_and_kept_out_of_the_figures() {
    let dir = tempfile::tempdir().unwrap();
    let sound = synthetic::trace(&[SyntheticCell::emu(false, 1, 10)], 3);
    let (clean, err) = analyze_json(dir.path(), "sound.json", &sound);
    assert!(!err.contains("damaged"), "{err}");
    assert_eq!(clean["inputs"][0]["damage"], serde_json::json!([]));

    // A kernel that claims to run 1 s past the next one on its stream.
    let mut overlap = sound.clone();
    overlap.kernels[5].end += 1_000_000_000;
    let (report, err) = analyze_json(dir.path(), "overlap.json", &overlap);
    assert!(
        err.contains(
            "overlap.json: damaged: 1 kernels outside graphs overlap the kernels after them"
        ),
        "{err}"
    );
    assert!(
        report["inputs"][0]["damage"][0]
            .as_str()
            .unwrap()
            .contains("a stream runs in order")
    );
    let (damaged, sound_p90) = (period_p90(&report, 0), period_p90(&clean, 0));
    assert!(damaged < 1.5 * sound_p90, "{damaged} vs {sound_p90}");

    // Duplicate correlation ids, edges to unknown nodes, a cycle: each named, none fatal.
    let mut graphed = synthetic::trace(&[SyntheticCell::emu(true, 2, 10)], 3);
    graphed.api_calls[1].corr = graphed.api_calls[0].corr;
    let e = graphed.graph.edges[0];
    graphed.graph.edges.push(trace::GraphEdge {
        from: e.to,
        to: e.from,
    });
    graphed.graph.edges.push(trace::GraphEdge {
        from: 0xdead_beef,
        to: e.to,
    });
    let (report, err) = analyze_json(dir.path(), "graphed.json", &graphed);
    for says in [
        "share 1 correlation ids",
        "name nodes the trace does not have",
        "form a cycle",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    assert_eq!(report["inputs"][0]["damage"].as_array().unwrap().len(), 3);
    own_lines_are_tagged(&err);

    // All-zero durations: named, and no figure made of them.
    let mut zero = sound.clone();
    for k in &mut zero.kernels {
        k.end = k.start;
    }
    let p = write(dir.path(), "zero.json", &zero);
    let out = gapscope(&["analyze", &p, "--json"]);
    let err = stderr(&out);
    assert!(err.contains("zero.json: damaged: all"), "{err}");
    if out.status.success() {
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let periods = report["cells"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| !c["period"].is_null())
            .count();
        assert_eq!(periods, 0, "{report}");
    } else {
        fails_after_notes(&out, 2);
    }
}

// Bullet: --json with --full, GAPSCOPE_THREADS
#[test]
fn conflicting_flags_and_bad_thread_counts_are_refused() {
    let t = bundled("emu-h200.json");
    let line = fails_in_one_line(&gapscope(&["analyze", &t, "--json", "--full"]), 2);
    assert!(
        line.contains("'--json' cannot be used with '--full'"),
        "{line}"
    );
    let line = fails_in_one_line(&gapscope(&["compare", &t, &t, "--full", "--json"]), 2);
    assert!(line.contains("cannot be used with"), "{line}");
    for value in ["0", "-1", "abc"] {
        let out = bin()
            .args(["analyze", &t])
            .env("GAPSCOPE_THREADS", value)
            .output()
            .unwrap();
        let line = fails_in_one_line(&out, 2);
        assert!(
            line.contains(&format!("GAPSCOPE_THREADS=\"{value}\"")),
            "{line}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = bin()
        .args(["analyze", &t])
        .env("GAPSCOPE_THREADS", "2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

// Bullet: misleading refusals of gzip files
#[test]
fn gzip_refusals_say_what_is_wrong() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let gz = |name: &str, bytes: &[u8], tail: &[u8]| -> String {
        let p = dir.path().join(name);
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        let mut data = e.finish().unwrap();
        data.extend_from_slice(tail);
        std::fs::write(&p, data).unwrap();
        p.display().to_string()
    };
    // A gzipped gapscope trace is read as it is.
    let ours = std::fs::read(repo().join("traces/emu-h200.json")).unwrap();
    let out = gapscope(&["analyze", &gz("t.json.gz", &ours, b"")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let kineto = std::fs::read(repo().join("traces/torch-step-kineto-h200.json")).unwrap();
    let p = gz("k.json.gz", &kineto, b"trailing garbage\n");
    let line = fails_in_one_line(&gapscope(&["analyze", &p]), 2);
    assert!(line.contains("other bytes follow (not gzip)"), "{line}");
    // Cut short is still called so.
    let whole = std::fs::read(&p).unwrap();
    std::fs::write(&p, &whole[..whole.len() / 2]).unwrap();
    let line = fails_in_one_line(&gapscope(&["analyze", &p]), 2);
    assert!(line.contains("damaged or cut short"), "{line}");
}

/// The help of `command`, as printed.
fn help(command: &str) -> String {
    let out = gapscope(&[command, "--help"]);
    assert_eq!(out.status.code(), Some(0));
    stdout(&out)
}

// Bullet: help texts
#[test]
fn help_texts_say_what_the_commands_do() {
    let analyze = help("analyze")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for says in ["torch.profiler", ".json.gz", "folders of them"] {
        assert!(analyze.contains(says), "{says}: {analyze}");
    }
    // Wrapped at the terminal's width: phrases are looked for in the text as one line.
    let compare = help("compare")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        compare.contains("Folder for compare.md and compare.json"),
        "{compare}"
    );
    assert!(!compare.contains("report.md"), "{compare}");
    assert!(!compare.contains("--origin-step"), "{compare}");
    assert!(help("merge").contains("*.json.gz"));
}

/// Every example in the help texts of the commands that need no GPU runs as written, from a
/// folder holding the bundled traces as `traces/`.
#[cfg(unix)]
#[test]
fn help_examples_run_as_written() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("traces"), dir.path().join("traces")).unwrap();
    let mut ran = 0;
    let top = stdout(&gapscope(&["--help"]));
    let texts: Vec<String> = ["analyze", "compare", "export", "merge"]
        .iter()
        .map(|c| help(c))
        .chain([top])
        .collect();
    for text in &texts {
        // An example too long for one line goes on with a shell's `\` continuation.
        let joined = text.replace(" \\\n", " ");
        for line in joined.lines().map(str::trim) {
            let Some(rest) = line.strip_prefix("gapscope ") else {
                continue;
            };
            let command = rest.split('#').next().unwrap().split("||").next().unwrap();
            let args: Vec<&str> = command.split_whitespace().collect();
            if !["analyze", "compare", "export", "merge"].contains(&args[0])
                || args
                    .iter()
                    .any(|a| a.contains("main.json") || a.contains('*'))
            {
                continue;
            }
            let out = bin()
                .args(&args)
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{line}: {}", stderr(&out));
            ran += 1;
        }
    }
    assert!(ran >= 5, "{ran} examples run");
}

// Bullet: run's sweep flags without a GPU
#[test]
fn run_without_a_gpu_says_which_flags_it_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("o");
    let out = gapscope(&[
        "run",
        "--bundled",
        "--tokens",
        "1,8",
        "--modes",
        "1",
        "--gpus",
        "2",
        "-o",
        o.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("gapscope: note: --tokens, --modes, --gpus ignored: they choose what a GPU sweep records"),
        "{err}"
    );
    let plain = gapscope(&["run", "--bundled", "-o", o.to_str().unwrap()]);
    assert!(!stderr(&plain).contains("ignored"), "{}", stderr(&plain));
}

// ---- Contract round 3 (issue 42) ----

/// A stderr gapscope cannot write to.
#[cfg(unix)]
#[derive(Debug, Clone, Copy)]
enum DeadStderr {
    /// `2>/dev/full`: every write fails (ENOSPC).
    Full,
    /// A pipe whose reader has gone: every write fails (EPIPE).
    ClosedPipe,
}

/// The exit code of gapscope with `args` and stderr `dead` (stdout discarded).
#[cfg(unix)]
fn exit_code_with(args: &[String], env: &[(&str, &str)], dead: DeadStderr) -> Option<i32> {
    let stderr = match dead {
        DeadStderr::Full => Stdio::from(std::fs::File::create("/dev/full").ok()?),
        DeadStderr::ClosedPipe => {
            let (reader, writer) = std::io::pipe().unwrap();
            drop(reader);
            Stdio::from(writer)
        }
    };
    let status = bin()
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(stderr)
        .status()
        .expect("run gapscope");
    status.code()
}

/// A command line, its environment, and its exit code.
type Case<'a> = (Vec<&'a str>, &'a [(&'a str, &'a str)], i32);

// Row 1: every command keeps its exit code when stderr is full or a closed pipe (eprintln!
// panicked there: exit 101, even for a usage error or after the output set was written).
#[cfg(unix)]
#[test]
fn a_full_or_closed_stderr_changes_no_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).display().to_string();
    let t = bundled("emu-h200.json");
    let ranks = bundled("torch-graphs-2rank-h200/mixing-1");
    let mode = |m| synthetic::trace(&[SyntheticCell::emu(true, m, 80)], 5);
    let base = write(dir.path(), "mode1.json", &mode(1));
    let head = write(dir.path(), "mode2.json", &mode(2));
    // `record` runs a program that ends with status 7 (no GPU needed: it loads no CUDA). The
    // injection library is preloaded into it: a real library (this process's libc), so that
    // the loader has no complaint to write into the dead stderr (a SIGPIPE that ends the
    // program is the program's status, not gapscope's).
    let Some(lib) = std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so"))
        .map(str::to_owned)
    else {
        println!("no libc in /proc/self/maps");
        return;
    };
    let record_env = [("GAPSCOPE_INJECTION_LIB", lib.as_str())];
    let cases: Vec<Case> = vec![
        (vec![], &[], 2),
        (vec!["--version"], &[], 0),
        (vec!["analyze", "--bogus"], &[], 2),
        (vec!["analyze", "no-such-trace.json"], &[], 2),
        (vec!["analyze", &t, "-o", "/proc"], &[], 1),
        (vec!["analyze", &t, "-o", "OUT"], &[], 0),
        (vec!["compare", &t, &t, "-o", "OUT"], &[], 0),
        (vec!["compare", &base, &head, "--threshold", "1.01"], &[], 3),
        (vec!["compare", &t, &t, "--threshold", "0"], &[], 2),
        (
            vec!["export", &t, "--format", "svg", "-o", "OUT/step.svg"],
            &[],
            0,
        ),
        (vec!["merge", &ranks, "-o", "OUT"], &[], 0),
        (vec!["run", "--bundled", "-o", "OUT"], &[], 0),
        (
            vec!["record", "-o", "OUT", "--", "sh", "-c", "exit 7"],
            &record_env,
            7,
        ),
        (vec!["completions", "bash"], &[], 0),
        (vec!["man", "OUT"], &[], 0),
        (vec!["analyze", &t], &[("GAPSCOPE_THREADS", "abc")], 2),
    ];
    for (k, (args, env, code)) in cases.iter().enumerate() {
        // A fresh output folder per run, so that each writes its set anew.
        let args_in = |run: &str| -> Vec<String> {
            let out = at(&format!("out-{k}-{run}"));
            args.iter().map(|a| a.replace("OUT", &out)).collect()
        };
        let out = bin()
            .args(args_in("plain"))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {}", stderr(&out));
        for dead in [DeadStderr::Full, DeadStderr::ClosedPipe] {
            let Some(got) = exit_code_with(&args_in(&format!("{dead:?}")), env, dead) else {
                println!("no /dev/full here");
                continue;
            };
            assert_ne!(got, 101, "{args:?} with {dead:?} stderr panicked");
            assert_eq!(got, *code, "{args:?} with {dead:?} stderr");
        }
    }
    // The set is still written whole when nobody can be told so.
    let written = dir.path().join("out-5-Full");
    for f in ["report.md", "report.json", "step.svg"] {
        assert!(written.join(f).is_file(), "{f}");
    }
}

// Row 2: kernels that overlap on one stream by less than a millisecond, in a way no launch
// makes (here each of 36 kernels of 500 µs, 20 µs apart, still runs when the kernel after its
// successor starts), are named and left out; before, "busy 120 µs, idle 0" of 500 µs kernels.
#[test]
fn overlaps_on_one_stream_under_a_millisecond_are_named_and_left_out() {
    use gapscope::trace::synthetic::KernelStream;
    let dir = tempfile::tempdir().unwrap();
    let mut s = KernelStream::new();
    for _ in 0..6 {
        let start = s.host_now();
        for _ in 0..6 {
            s.kernel("k", 1_000, 500_000);
        }
        s.range("step", start);
    }
    let mut t = s.finish();
    let first = t.kernels[0].start;
    for (i, k) in t.kernels.iter_mut().enumerate() {
        k.start = first + 20_000 * i as u64;
        k.end = k.start + 500_000;
    }
    let p = write(dir.path(), "chain.json", &t);
    let out = gapscope(&["analyze", &p, "--step-range", "step", "--json"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    own_lines_are_tagged(&err);
    assert!(
        err.contains("chain.json: damaged: 34 kernels outside graphs overlap the kernels after them on their stream"),
        "{err}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let damage = report["inputs"][0]["damage"].as_array().unwrap();
    assert_eq!(damage.len(), 1, "{damage:?}");
    // Left out: no cell is made of the overlapping kernels' figures.
    let busy = report["cells"][0]["busy"]["median"].as_f64();
    assert!(busy.is_none_or(|b| b >= 500_000.0), "{busy:?}");
}

// Row 3: a threshold below 1 would print "PASS: no cell slower than 0.50×" of slower cells.
#[test]
fn a_threshold_below_one_is_refused() {
    let t = bundled("emu-h200.json");
    for value in ["0.5", "1e-320", "0", "nan"] {
        let out = gapscope(&["compare", &t, &t, "--threshold", value]);
        let line = fails_in_one_line(&out, 2);
        assert!(line.contains("--threshold"), "{value}: {line}");
        assert!(line.contains("at least 1"), "{value}: {line}");
        assert!(out.stdout.is_empty(), "{value}");
    }
    // 1 is the strictest gate: no slowdown beyond the spread.
    let out = gapscope(&["compare", &t, &t, "--threshold", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("PASS: no cell slower than 1.00×"));
}

// Row 4: bidirectional overrides and isolates, zero-width characters and the byte-order mark
// (Unicode's format characters) in a kernel name reach neither the terminal nor report.md raw.
#[test]
fn format_characters_in_names_are_escaped_on_the_terminal_and_in_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = synthetic::emu_experiment(5);
    let spin = t.strings.iter().position(|s| s == "spin").unwrap();
    t.strings[spin] = "spin\u{202e}nips\u{2066}\u{200b}\u{feff}".into();
    let p = write(dir.path(), "t.json", &t);
    let escaped = "spin\\u{202e}nips\\u{2066}\\u{200b}\\u{feff}";
    let raw = |text: &str| {
        text.chars()
            .any(|c| matches!(c, '\u{202e}' | '\u{2066}' | '\u{200b}' | '\u{feff}'))
    };
    let o = dir.path().join("o");
    for args in [
        vec!["analyze", &p],
        vec!["analyze", &p, "--full", "-o", o.to_str().unwrap()],
        vec!["compare", &p, &p, "--format", "github"],
    ] {
        let out = gapscope(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let screen = stdout(&out);
        assert!(!raw(&screen), "{args:?}: {screen}");
        assert!(screen.contains(escaped), "{args:?}: {screen}");
    }
    let md = std::fs::read_to_string(o.join("report.md")).unwrap();
    assert!(!raw(&md) && md.contains(escaped), "{md}");
}

// Row 5: `man DIR` says what it wrote as every command does: a note naming the files.
#[test]
fn man_says_what_it_wrote_in_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("man");
    let out = gapscope(&["man", d.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    own_lines_are_tagged(&err);
    // The folder once, then the pages: every line fits 120 columns (one note of every name
    // was ~200 characters).
    assert!(
        err.starts_with(&format!("gapscope: note: wrote into {}:", d.display())),
        "{err}"
    );
    let pages: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(pages.len() > 5, "{pages:?}");
    for page in &pages {
        assert!(err.contains(&format!(" {page}")), "{page}: {err}");
    }
    for line in err.lines() {
        assert!(line.chars().count() <= 120, "{line}");
    }
    assert!(d.join("gapscope-analyze.1").is_file());
    // Refused before anything is written, as `-o` is.
    let line = fails_in_one_line(&gapscope(&["man", "/proc"]), 1);
    assert!(line.contains("cannot write into this folder"), "{line}");
}

// Row 6: GAPSCOPE_THREADS above the cores is capped at them, and a note says so.
#[test]
fn a_thread_count_above_the_cores_is_capped_with_a_note() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t = bundled("emu-h200.json");
    let out = bin()
        .args(["analyze", &t])
        .env("GAPSCOPE_THREADS", "1000000")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "gapscope: note: GAPSCOPE_THREADS=1000000: using {cores} threads, one per core available (more would only wait for a core)"
        )
    );
    // Within the cores: as asked, without a note.
    let out = bin()
        .args(["analyze", &t])
        .env("GAPSCOPE_THREADS", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}

// Row 7: `compare` of traces recorded on different devices says so, on screen and in every
// report; the same device (or one side naming none) says nothing.
#[test]
fn compare_notes_traces_of_different_devices() {
    let dir = tempfile::tempdir().unwrap();
    let on = |name: &str, device: Option<&str>| {
        let mut t = synthetic::emu_experiment(5);
        t.metadata.device = device.map(|d| trace::DeviceInfo {
            name: d.to_owned(),
            index: 0,
            compute_capability: String::new(),
        });
        write(dir.path(), name, &t)
    };
    let h200 = on("h200.json", Some("NVIDIA H200"));
    let a100 = on("a100.json", Some("NVIDIA A100-SXM4-80GB"));
    let says = "BASE ran on NVIDIA H200 and HEAD on NVIDIA A100-SXM4-80GB";
    let o = dir.path().join("o");
    let summary = gapscope(&["compare", &h200, &a100, "-o", o.to_str().unwrap()]);
    assert_eq!(summary.status.code(), Some(0), "{}", stderr(&summary));
    assert!(stdout(&summary).contains(says), "{}", stdout(&summary));
    let md = std::fs::read_to_string(o.join("compare.md")).unwrap();
    assert!(md.contains(says), "{md}");
    let github = stdout(&gapscope(&["compare", &h200, &a100, "--format", "github"]));
    assert!(github.contains(says), "{github}");
    let json: serde_json::Value =
        serde_json::from_slice(&gapscope(&["compare", &h200, &a100, "--json"]).stdout).unwrap();
    assert!(
        json["device_mismatch"].as_str().unwrap().contains(says),
        "{json}"
    );
    for (base, head) in [(&h200, &h200), (&h200, &on("none.json", None))] {
        let out = gapscope(&["compare", base, head, "--json"]);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(json["device_mismatch"].is_null(), "{json}");
        assert!(!stdout(&gapscope(&["compare", base, head])).contains("ran on"));
    }
}

// Row 8: `-o /proc` said "No such file or directory" of a folder that exists.
#[test]
fn an_output_folder_that_takes_no_files_says_so() {
    let t = bundled("emu-h200.json");
    let line = fails_in_one_line(&gapscope(&["analyze", &t, "-o", "/proc"]), 1);
    assert!(
        line.contains("/proc: cannot write into this folder: its file system takes no new files"),
        "{line}"
    );
    assert!(!line.contains("No such file"), "{line}");
    let line = fails_in_one_line(&gapscope(&["run", "-o", "/proc/gapscope-out"]), 1);
    assert!(
        line.contains("/proc/gapscope-out: cannot make this folder: cannot write into /proc"),
        "{line}"
    );
    // `record` refuses such a folder before the program runs, not after a whole run with no
    // trace (a folder that exists: nothing is made).
    let out = gapscope(&["record", "-o", "/proc/self", "--", "sh", "-c", "echo ran"]);
    let line = fails_after_notes(&out, 1);
    assert!(
        line.contains(
            "/proc/self: cannot write into this folder: its file system takes no new files"
        ),
        "{line}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
}

/// `analyze X --summary X` and `export X -o X` would overwrite their own input: refused, exit 2,
/// the input intact.
#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.json");
    std::fs::copy(bundled("emu-h200.json"), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let t = input.to_str().unwrap();
    let same = format!("{}/./t.json", dir.path().display());
    for args in [
        vec!["analyze", t, "--summary", t],
        vec!["export", t, "--format", "json", "-o", &same],
    ] {
        let line = fails_in_one_line(&gapscope(&args), 2);
        assert!(line.contains("this is an input of the command"), "{line}");
        assert_eq!(std::fs::read(&input).unwrap(), before, "{args:?}");
    }
}

/// Each command's summary names what its `-o` writes.
#[test]
fn the_full_report_line_names_the_commands_own_files() {
    let t = bundled("ht-decode-h200.json");
    let out = common::compare_ht_decode_modes(&[]);
    let screen = stdout(&out);
    assert!(
        screen
            .trim_end()
            .ends_with("Full report: add -o DIR (compare.md, compare.json, compare.perfetto-trace, compare.svg), or --full to print it"),
        "{screen}"
    );
    let screen = stdout(&gapscope(&["analyze", &t]));
    assert!(
        screen
            .trim_end()
            .ends_with("(report.md, report.json, Perfetto, SVG), or --full to print it"),
        "{screen}"
    );
}

// Bullet: the `wrote` note fits 120 columns, the Perfetto hint included.
#[test]
fn the_wrote_note_fits_120_columns() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("out-folder");
    let out = gapscope(&[
        "analyze",
        &bundled("emu-h200.json"),
        "-o",
        o.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    own_lines_are_tagged(&err);
    // One note when it fits, else the folder once and the files after.
    assert!(
        err.contains(&format!("wrote {}/{{report.md,", o.display()))
            || err.contains(&format!("wrote into {}:", o.display())),
        "{err}"
    );
    for file in [
        "report.md",
        "report.json",
        "trace.perfetto-trace",
        "step.svg",
    ] {
        assert!(
            err.contains(file) && o.join(file).is_file(),
            "{file}: {err}"
        );
    }
    assert!(err.contains("https://ui.perfetto.dev"), "{err}");
    for line in err.lines() {
        assert!(
            line.chars().count() <= 120,
            "{}: {line}",
            line.chars().count()
        );
    }
}
