//! The CLI's contract under hostile input (README, "Exit codes and messages"): exit 0 success,
//! 1 runtime failure, 2 bad input with one line, 3 threshold; never a panic; an output set is
//! written whole or not at all. One test per case of the robustness probe (issue 13).

mod common;
use common::{bin, fails_after_notes, fails_in_one_line, gapscope, stderr, temporaries, write};
use gapscope::trace::synthetic::{self, SyntheticCell};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SET: [&str; 4] = [
    "report.md",
    "report.json",
    "trace.perfetto-trace",
    "step.svg",
];

// 1
#[test]
fn closed_or_full_stdout_is_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(20));
    // `| true`: the reader is gone before gapscope writes.
    let mut child = bin()
        .args(["analyze", &p, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // `> /dev/full`: a real write error, said in one line.
    #[cfg(target_os = "linux")]
    {
        let full = std::fs::File::create("/dev/full").expect("/dev/full on Linux");
        let out = bin()
            .args(["analyze", &p, "--json"])
            .stdout(full)
            .output()
            .unwrap();
        let line = fails_in_one_line(&out, 1);
        assert!(line.contains("cannot write to standard output"), "{line}");
    }
}

// 2
#[cfg(unix)]
#[test]
fn special_files_are_written_in_place_and_symlinks_followed() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(5));
    // A device stays a device.
    let out = gapscope(&["export", &p, "--format", "json", "-o", "/dev/null"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!std::fs::metadata("/dev/null").unwrap().is_file());
    // A symlink: its target gets the output, the link stays a link.
    let target = dir.path().join("target.json");
    std::fs::write(&target, "old").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = gapscope(&[
        "export",
        &p,
        "--format",
        "json",
        "-o",
        link.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(std::fs::read_to_string(&target).unwrap().starts_with('{'));
    // A FIFO: written through, still a FIFO.
    let fifo = dir.path().join("fifo");
    if Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        let out = gapscope(&[
            "export",
            &p,
            "--format",
            "json",
            "-o",
            fifo.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(reader.join().unwrap().starts_with(b"{"));
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    }
    assert!(temporaries(dir.path()).is_empty());
}

// 3
#[cfg(unix)]
#[test]
fn a_signal_leaves_no_temporary_and_no_partial_set() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "big.json", &synthetic::emu_experiment(6000));
    for (signal, delay_ms) in [("INT", 150), ("TERM", 400), ("INT", 800)] {
        let out_dir = dir.path().join(format!("out-{signal}-{delay_ms}"));
        let mut child = bin()
            .args(["analyze", &p, "-o", out_dir.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status();
        let status = child.wait().unwrap();
        // Finished before the signal (0) or stopped by it (128 + N).
        assert!(
            matches!(status.code(), Some(0 | 130 | 143)),
            "{signal}: {status:?}"
        );
        assert!(
            temporaries(&out_dir).is_empty(),
            "{signal}: temporaries left"
        );
        let present = SET.iter().filter(|f| out_dir.join(f).exists()).count();
        assert!(
            present == 0 || present == SET.len(),
            "{signal}: {present} of 4"
        );
    }
}

// 4 (Linux: /dev/full fails every write)
#[cfg(target_os = "linux")]
#[test]
fn a_failed_write_keeps_the_previous_set_whole() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(10));
    let out_dir = dir.path().join("out");
    let first = gapscope(&["analyze", &p, "-o", out_dir.to_str().unwrap()]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let before = std::fs::read(out_dir.join("report.md")).unwrap();
    // The disk fills up on report.json.
    std::fs::remove_file(out_dir.join("report.json")).unwrap();
    std::os::unix::fs::symlink("/dev/full", out_dir.join("report.json")).unwrap();
    let q = write(dir.path(), "other.json", &synthetic::emu_experiment(12));
    let out = gapscope(&["analyze", &q, "-o", out_dir.to_str().unwrap()]);
    let line = fails_in_one_line(&out, 1);
    assert!(line.contains("report.json"), "{line}");
    assert_eq!(std::fs::read(out_dir.join("report.md")).unwrap(), before);
    assert!(temporaries(&out_dir).is_empty());
}

// 5
#[test]
fn a_second_writer_of_one_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(5));
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    // Another gapscope holds the folder.
    let lock = std::fs::File::create(out_dir.join(".gapscope.lock")).unwrap();
    lock.lock().unwrap();
    let out = gapscope(&["analyze", &p, "-o", out_dir.to_str().unwrap()]);
    let line = fails_in_one_line(&out, 1);
    assert!(line.contains("another gapscope is writing"), "{line}");
    assert!(!out_dir.join("report.md").exists());
    drop(lock);
    let out = gapscope(&["analyze", &p, "-o", out_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The lock goes with the writer: the folder keeps only the outputs.
    assert!(!out_dir.join(".gapscope.lock").exists());
    assert!(out_dir.join("report.md").exists());
}

// 6
#[test]
fn an_output_the_new_run_does_not_make_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let with_pair = write(dir.path(), "a.json", &synthetic::emu_experiment(10));
    let graphed_only = write(
        dir.path(),
        "b.json",
        &synthetic::trace(&[SyntheticCell::emu(true, 2, 10)], 3),
    );
    let out_dir = dir.path().join("out");
    let o = out_dir.to_str().unwrap();
    assert_eq!(
        gapscope(&["analyze", &with_pair, "-o", o]).status.code(),
        Some(0)
    );
    assert!(out_dir.join("step.svg").exists());
    let out = gapscope(&["analyze", &graphed_only, "-o", o]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!out_dir.join("step.svg").exists(), "stale step.svg removed");
    assert!(!stderr(&out).contains("step.svg}"), "{}", stderr(&out));
}

// 7
#[test]
fn an_svg_of_nothing_is_an_error_not_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "g.json",
        &synthetic::trace(&[SyntheticCell::emu(true, 2, 10)], 3),
    );
    let svg = dir.path().join("k.svg");
    let out = gapscope(&["export", &p, "--format", "svg", "-o", svg.to_str().unwrap()]);
    let line = fails_in_one_line(&out, 2);
    assert!(line.contains("nothing to draw"), "{line}");
    assert!(!svg.exists());
}

// 8
#[test]
fn compare_with_nothing_in_common_fails() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "a.json",
        &synthetic::trace(&[SyntheticCell::emu(true, 2, 10)], 3),
    );
    let mut other = synthetic::trace(&[SyntheticCell::emu(true, 2, 10)], 3);
    other.metadata.cells[0]
        .requested
        .insert("tokens".into(), 64.into());
    let b = write(dir.path(), "b.json", &other);
    let out = gapscope(&["compare", &a, &b]);
    let line = fails_in_one_line(&out, 2);
    assert!(line.contains("no cell in common"), "{line}");
}

// 9
#[test]
fn a_long_output_name_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(5));
    let long = dir.path().join(format!("{}.json", "n".repeat(245)));
    let out = gapscope(&[
        "export",
        &p,
        "--format",
        "json",
        "-o",
        long.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(long.is_file());
}

// 10
#[test]
fn a_huge_ignored_kineto_event_is_skipped_in_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    // An ignored event (a flow event) holding a 64 MiB string, then whitespace, then a kernel.
    let big = "x".repeat(64 << 20);
    let text = format!(
        "{{\"traceEvents\": [{{\"ph\": \"s\", \"cat\": \"ac2g\", \"name\": \"{big}\"}},{}\n{{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, \"ts\": 1.0, \"dur\": 2.0, \"args\": {{\"device\": 0, \"stream\": 7, \"correlation\": 1}}}}]}}",
        " ".repeat(32 << 20)
    );
    let p = dir.path().join("kineto.json");
    std::fs::write(&p, text).unwrap();
    let t0 = Instant::now();
    let out = gapscope(&["analyze", p.to_str().unwrap(), "--json"]);
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Linear: a quadratic re-scan of 96 MiB in blocks of a few MiB takes many seconds more.
    assert!(took < Duration::from_secs(20), "{took:?}");
}

// 11
#[cfg(unix)]
#[test]
fn non_json_input_is_refused_at_its_first_bytes() {
    let t0 = Instant::now();
    let out = gapscope(&["analyze", "/dev/zero"]);
    let line = fails_in_one_line(&out, 2);
    assert!(line.contains("not JSON"), "{line}");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

// 12
#[test]
fn usage_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(2));
    for args in [
        vec!["compare", &p, &p, "--threshold", "abc"],
        vec!["export", &p, "--format", "csv", "-o", "x"],
        vec!["run", "--launch", "foo"],
        vec!["analyze"],
        vec!["nosuchcommand"],
    ] {
        let out = gapscope(&args);
        fails_in_one_line(&out, 2);
    }
}

// 13
#[test]
fn notes_come_before_the_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(2));
    // The note of the load, then the refusal of the step (tests/contract_cli.rs has the
    // output folders, refused before the load).
    let out = gapscope(&[
        "analyze",
        &p,
        "--step-range",
        "nosuch",
        "--origin-step",
        "1000",
    ]);
    let line = fails_after_notes(&out, 2);
    assert!(line.contains("--origin-step 1000"), "{line}");
    assert!(
        stderr(&out).contains("gapscope: note: "),
        "the note is shown"
    );
}

// 14
#[cfg(unix)]
#[test]
fn record_exits_as_shells_do_for_programs_not_found_or_not_runnable() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libgapscope.so");
    std::fs::write(&lib, b"\x7fELF").unwrap(); // a stub: its header only
    let record = |program: &str| {
        bin()
            .args([
                "record",
                "-o",
                dir.path().join("o").to_str().unwrap(),
                "--",
                program,
            ])
            .env("GAPSCOPE_INJECTION_LIB", &lib)
            .output()
            .unwrap()
    };
    let line = fails_after_notes(&record("gapscope-no-such-program"), 127);
    assert!(line.contains("command not found"), "{line}");
    let not_exec = dir.path().join("data.txt");
    std::fs::write(&not_exec, "x").unwrap();
    let line = fails_after_notes(&record(not_exec.to_str().unwrap()), 126);
    assert!(line.contains("not executable"), "{line}");
}

// 15
#[test]
fn run_refuses_bad_values_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("out");
    for (flag, value) in [
        ("--tokens", "0"),
        ("--tokens", "100000"),
        ("--modes", "3"),
        ("--steps", "0"),
        ("--ranks", "0"),
        ("--device", "99"),
        ("--gpus", "0"),
    ] {
        let out = gapscope(&["run", "-o", o.to_str().unwrap(), flag, value]);
        let line = fails_in_one_line(&out, 2);
        assert!(line.contains(flag), "{flag}: {line}");
        assert!(!o.exists(), "{flag}: output written");
    }
}

// 16
#[test]
fn align_step_beyond_the_steps_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(5));
    let o = dir.path().join("o.svg");
    let out = gapscope(&[
        "export",
        &p,
        "--format",
        "svg",
        "--align-step",
        "1000000",
        "-o",
        o.to_str().unwrap(),
    ]);
    let line = fails_in_one_line(&out, 2);
    assert!(line.contains("--align-step 1000000"), "{line}");
    assert!(!o.exists());
}

// 17
#[test]
fn messages_say_what_the_input_is() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    for (name, text, says) in [
        ("null.json", "null", "the top level is null"),
        ("array.json", "[1,2,3]", "the top level is an array"),
        (
            "report.json",
            "{\"gapscope_report_version\": 1, \"cells\": []}",
            "this is a gapscope report",
        ),
    ] {
        let out = gapscope(&["analyze", file(name, text).to_str().unwrap()]);
        let line = fails_in_one_line(&out, 2);
        assert!(line.contains(says), "{name}: {line}");
    }
    // The analyze report itself, as written.
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(3));
    let o = dir.path().join("out");
    assert_eq!(
        gapscope(&["analyze", &p, "-o", o.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let out = gapscope(&["analyze", o.join("report.json").to_str().unwrap()]);
    assert!(fails_in_one_line(&out, 2).contains("gapscope report"));

    // merge --align collectives (the old spelling of --clock) without collective kernels names
    // the reference rank's lack.
    let mut ranks = Vec::new();
    for rank in 0..2 {
        let mut t = synthetic::emu_experiment(3);
        t.metadata.rank = rank;
        ranks.push(write(dir.path(), &format!("trace-{rank}.json"), &t));
    }
    let out = gapscope(&["merge", &ranks[0], &ranks[1], "--align", "collectives"]);
    let line = fails_in_one_line(&out, 2);
    assert!(line.contains("the reference rank 0"), "{line}");

    // A rank whose clock is 2^62 ns away is not the same run.
    let named = |rank: u32, shift: u64| {
        let mut t = synthetic::emu_experiment(3);
        let coll = t.strings.iter().position(|s| s == "coll").unwrap();
        t.strings[coll] = "ncclDevKernel_AllGather_RING_LL".into();
        t.metadata.rank = rank;
        for k in &mut t.kernels {
            k.start += shift;
            k.end += shift;
        }
        for a in &mut t.api_calls {
            a.start += shift;
            a.end += shift;
        }
        for m in &mut t.markers {
            m.start += shift;
            m.end += shift;
        }
        t
    };
    let r0 = write(dir.path(), "far-0.json", &named(0, 0));
    let r1 = write(dir.path(), "far-1.json", &named(1, 1 << 62));
    let out = gapscope(&["merge", &r0, &r1, "--align", "collectives"]);
    let line = fails_in_one_line(&out, 2);
    assert!(line.contains("not traces of the same run"), "{line}");
}

/// The PR table: mode 2 against mode 1 of one bundled sweep, predicted vs realised.
#[test]
fn compare_prints_the_pr_table_with_predicted_and_realised_savings() {
    let t = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/ht-decode-h200.json");
    let t = t.to_str().unwrap();
    let out = common::compare_ht_decode_modes(&["--format", "github"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.starts_with("### gapscope: "), "{md}");
    assert!(
        md.contains("| graphed mode=2 T=512 fresh → graphed mode=1 T=512 fresh |"),
        "{md}"
    );
    assert!(md.contains("### Predicted vs realised"), "{md}");
    assert!(md.contains("| realised |"), "{md}");
    let bad = gapscope(&["compare", t, t, "--base-select", "graph_usage_mode"]);
    assert!(fails_in_one_line(&bad, 2).contains("KEY=VALUE"));
    let none = gapscope(&["compare", t, t, "--head-select", "graph_usage_mode=7"]);
    assert!(fails_in_one_line(&none, 2).contains("no cell"));
}
