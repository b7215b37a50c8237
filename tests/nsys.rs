//! `gapscope analyze` of Nsight Systems exports and reports: the committed H200 exports of
//! examples/serial_event.py beside the same program's `gapscope record` trace (issue 47).

mod common;

use common::{fails_after_notes, gapscope, stderr};
use serde_json::Value;
use std::path::Path;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces/nsys")
        .join(name)
        .display()
        .to_string()
}

fn report(args: &[&str]) -> Value {
    let out = gapscope(&[&["analyze", "--json"], args].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Per cell: (regime, graph usage mode, period median in µs, the external wait's label).
fn cells(report: &Value) -> Vec<(String, String, f64, Option<String>)> {
    report["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let wait = c["idle_by_cause"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["cause"] == "external_event_wait")
                .map(|t| t["example"].as_str().unwrap().to_owned());
            (
                c["observed"]["regime"].as_str().unwrap().to_owned(),
                c["observed"]["graph_usage_mode"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                c["period"]["median"].as_f64().unwrap() / 1e3,
                wait,
            )
        })
        .collect()
}

/// Each tool's period against the period the program printed in that run (its own CUDA
/// events; traces/README.md): within 5 %.
fn close(measured: f64, printed: f64) -> bool {
    (measured / printed - 1.0).abs() < 0.05
}

#[test]
fn nsys_node_mode_and_record_find_the_same_cells_and_the_external_wait() {
    let nsys = cells(&report(&[&fixture("serial-event-node.sqlite")]));
    let record = cells(&report(&[&fixture(
        "serial-event-chosen-step-record.json.gz",
    )]));
    let shape = |c: &[(String, String, f64, Option<String>)]| {
        c.iter()
            .map(|(regime, mode, _, wait)| (regime.clone(), mode.clone(), wait.is_some()))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&nsys), shape(&record), "{nsys:?}\n{record:?}");
    assert_eq!(
        shape(&nsys),
        [
            ("eager".into(), "".into(), false),
            (
                "graphed".into(),
                "1 (no external event nodes)".into(),
                false
            ),
            (
                "graphed".into(),
                "2 (2 external event nodes, not from NCCL)".into(),
                true
            ),
        ]
    );
    // The programs' own periods: eager, mode-1 replays, mode-2 replays (µs).
    let printed_nsys = [111.98, 32.06, 38.11];
    let printed_record = [80.59, 23.06, 25.15];
    for i in 0..3 {
        assert!(close(nsys[i].2, printed_nsys[i]), "{nsys:?}");
        assert!(close(record[i].2, printed_record[i]), "{record:?}");
    }
    let nsys_wait = nsys[2].3.as_deref().unwrap();
    let record_wait = record[2].3.as_deref().unwrap();
    assert!(
        nsys_wait.starts_with(
            "probably external: event-wait node 0x500000001 created by cudaStreamWaitEvent, \
             event-record node 0x500000003"
        ),
        "{nsys_wait}"
    );
    assert!(
        record_wait.starts_with(
            "external event-wait node 0x500000001 (cudaStreamWaitEvent), event-record node \
             0x500000003"
        ),
        "{record_wait}"
    );
}

#[test]
fn the_summary_says_the_step_range_was_chosen_and_what_the_import_inferred() {
    let out = gapscope(&["analyze", &fixture("serial-event-node.sqlite")]);
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        screen.contains("Steps: the NVTX range `decode_step`, chosen on import"),
        "{screen}"
    );
    assert!(screen.contains("(Nsight Systems import)"), "{screen}");
    let graph = gapscope(&["analyze", &fixture("serial-event-graph.sqlite")]);
    let screen = String::from_utf8_lossy(&graph.stdout);
    assert!(screen.contains("--cuda-graph-trace=graph"), "{screen}");
}

#[test]
fn an_export_without_cuda_activity_is_one_error() {
    let out = gapscope(&["analyze", &fixture("ht-decode-node.sqlite")]);
    let err = common::fails_in_one_line(&out, 2);
    assert!(err.contains("without CUDA device activity"), "{err}");
}

/// A `PATH` of one folder, holding an `nsys` script when `script` is given.
fn path_with(dir: &Path, script: Option<&str>) -> String {
    if let Some(script) = script {
        use std::os::unix::fs::PermissionsExt;
        let nsys = dir.join("nsys");
        std::fs::write(&nsys, script).unwrap();
        std::fs::set_permissions(&nsys, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir.display().to_string()
}

/// A `PATH` whose `nsys` stands in for Nsight Systems: `nsys export … --output FILE REPORT`
/// copies the committed export.
fn path_with_copying_nsys(dir: &Path) -> String {
    let script = format!(
        "#!/bin/sh\nwhile [ $# -gt 1 ]; do [ \"$1\" = --output ] && out=$2; shift; done\n\
         cp '{}' \"$out\"\n",
        fixture("serial-event-node.sqlite")
    );
    format!("{}:/bin:/usr/bin", path_with(dir, Some(&script)))
}

#[test]
fn a_report_without_nsys_names_the_export_command() {
    let dir = tempfile::tempdir().unwrap();
    let rep = dir.path().join("run.nsys-rep");
    std::fs::write(&rep, b"not read").unwrap();
    let out = common::bin()
        .args(["analyze", rep.to_str().unwrap()])
        .env("PATH", path_with(dir.path(), None))
        .output()
        .unwrap();
    let err = common::fails_in_one_line(&out, 2);
    assert!(
        err.contains("no `nsys` on PATH to export it: run `nsys export --type sqlite --output"),
        "{err}"
    );
}

#[test]
fn a_report_is_exported_by_the_nsys_on_path_and_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let rep = dir.path().join("run.nsys-rep");
    std::fs::write(&rep, b"a report").unwrap();
    let out = common::bin()
        .args(["analyze", rep.to_str().unwrap()])
        .env("PATH", path_with_copying_nsys(dir.path()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("an Nsight Systems report, exported to a temporary SQLite file with `"),
        "{err}"
    );
    // A failing nsys: its last stderr line, in one error.
    let failing = "#!/bin/sh\necho 'cannot open the report' >&2\nexit 3\n";
    let out = common::bin()
        .args(["analyze", rep.to_str().unwrap()])
        .env("PATH", path_with(dir.path(), Some(failing)))
        .output()
        .unwrap();
    let err = fails_after_notes(&out, 2);
    assert!(err.contains("cannot open the report"), "{err}");
}

#[test]
#[ignore = "needs nsys"]
fn a_real_report_is_exported_by_nsys() {
    // Set GAPSCOPE_TEST_NSYS_REP to a .nsys-rep recorded with examples/serial_event.py.
    let rep = std::env::var("GAPSCOPE_TEST_NSYS_REP").expect("GAPSCOPE_TEST_NSYS_REP");
    let shape: Vec<String> = cells(&report(&[&rep])).into_iter().map(|c| c.0).collect();
    assert_eq!(shape, ["eager", "graphed", "graphed"]);
}

/// Whether process `pid` has ended (gone, or a zombie no one reaped yet).
fn ended(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(") ").next().unwrap_or("").starts_with('Z')
    })
}

/// The `gapscope-nsys-*` folders in `tmp`.
fn nsys_folders(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gapscope-nsys-"))
        .collect()
}

/// An `nsys` that hangs (it and a child of its own), stopped by SIGTERM or SIGINT sent to
/// gapscope alone: gapscope exits 128 + N, and neither process nor the temporary folder is
/// left (they were, orphaned, before).
#[test]
fn a_hung_nsys_is_killed_and_its_folder_removed_when_gapscope_is_stopped() {
    use nix::sys::signal::Signal;
    for (signal, code) in [(Signal::SIGTERM, 143), (Signal::SIGINT, 130)] {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let pids = dir.path().join("pids");
        let script = format!(
            "#!/bin/sh\nsleep 600 &\necho $$ $! > '{0}.part'\nmv '{0}.part' '{0}'\nwait\n",
            pids.display()
        );
        let rep = dir.path().join("run.nsys-rep");
        std::fs::write(&rep, b"a report").unwrap();
        let mut child = common::bin()
            .args(["analyze", rep.to_str().unwrap()])
            .env(
                "PATH",
                format!("{}:/bin:/usr/bin", path_with(dir.path(), Some(&script))),
            )
            .env("TMPDIR", &tmp)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while !pids.exists() && started.elapsed().as_secs() < 20 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let nsys = std::fs::read_to_string(&pids).expect("the stand-in nsys started");
        assert_eq!(nsys_folders(&tmp).len(), 1, "its export folder");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        let mut status = None;
        while status.is_none() && started.elapsed().as_secs() < 30 {
            status = child.try_wait().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let Some(status) = status else {
            let _ = child.kill();
            panic!("gapscope did not stop on {signal}");
        };
        let out = child.wait_with_output().unwrap();
        assert_eq!(status.code(), Some(code), "{signal}: {}", stderr(&out));
        for p in nsys.split_whitespace() {
            assert!(
                ended(p),
                "{signal}: process {p} of the stand-in nsys still runs"
            );
        }
        assert_eq!(nsys_folders(&tmp), Vec::<String>::new(), "{signal}");
    }
}

/// A folder left by a gapscope that was killed (SIGKILL: no handler runs) is removed by the
/// next report's export; a live process's folder and other names are kept.
#[test]
fn a_dead_processs_export_folder_is_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = tmp.join(format!("gapscope-nsys-{dead}-0"));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("report.sqlite"), b"half an export").unwrap();
    let live = format!("gapscope-nsys-{}-0", std::process::id());
    let other = "gapscope-nsys-notes";
    for keep in [&live, other] {
        std::fs::create_dir(tmp.join(keep)).unwrap();
    }
    let rep = dir.path().join("run.nsys-rep");
    std::fs::write(&rep, b"a report").unwrap();
    let out = common::bin()
        .args(["analyze", rep.to_str().unwrap()])
        .env("PATH", path_with_copying_nsys(dir.path()))
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut left = nsys_folders(&tmp);
    left.sort();
    assert_eq!(left, [live.as_str(), other]);
}
