//! `gapscope try` end to end, without a GPU: a try folder built from synthetic traces judged
//! with `--from`, and the orchestration run on programs that write no trace.

mod common;
use common::{bin, fails_in_one_line, gapscope, stderr, stdout, unwrapped, write};
use gapscope::analysis::trial::{EnvSetting, PLAN_VERSION, Plan, RunRecord, Variant};
use gapscope::trace::synthetic::{self, SyntheticCell};
use std::path::Path;

const FIX: &str = "NCCL_GRAPH_MIXING_SUPPORT=0";
const NOOP: &str = "NCCL_MEM_SYNC_DOMAIN=0";
const BROKEN: &str = "NCCL_CGA_CLUSTER_SIZE=0";

fn variant(label: &str) -> Variant {
    let settings = match label.split_once('=') {
        Some((name, value)) => vec![EnvSetting {
            name: name.to_owned(),
            value: value.to_owned(),
        }],
        None => Vec::new(),
    };
    Variant {
        label: label.to_owned(),
        settings,
    }
}

/// A try folder of 3 rounds as `gapscope try` leaves one: BASE and `NOOP` record the graphed
/// step with NCCL's mode-2 external event wait, `FIX` without it (mode 1), `BROKEN` exits 1
/// with no trace in every round.
fn try_folder(dir: &Path) {
    let labels = ["BASE", FIX, NOOP, BROKEN];
    let mut runs = Vec::new();
    for round in 1..=3 {
        for (k, label) in labels.iter().enumerate() {
            let folder = format!("runs/{round}-{k}-{label}");
            let run_dir = dir.join(&folder);
            std::fs::create_dir_all(&run_dir).unwrap();
            let mode = if *label == FIX { 1 } else { 2 };
            let mut record = RunRecord {
                round,
                variant: (*label).to_owned(),
                folder,
                exit_code: Some(0),
                last_stderr: None,
                seconds: 2.0,
                traces: vec!["trace-0.json".to_owned()],
                interrupted: false,
            };
            if *label == BROKEN {
                record.exit_code = Some(1);
                record.traces.clear();
                record.last_stderr = Some("RuntimeError: NCCL error: invalid usage".into());
            } else {
                let t = synthetic::trace(
                    &[SyntheticCell::emu(true, mode, 40)],
                    (10 * round + k) as u64,
                );
                write(&run_dir, "trace-0.json", &t);
            }
            runs.push(record);
        }
    }
    let plan = Plan {
        gapscope_try: PLAN_VERSION,
        command: vec!["python".into(), "step.py".into()],
        rounds: 3,
        variants: labels.iter().map(|l| variant(l)).collect(),
        runs,
        interrupted: None,
        recorded_in: None,
    };
    std::fs::write(
        dir.join("try-plan.json"),
        serde_json::to_string_pretty(&plan).unwrap(),
    )
    .unwrap();
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn variant_doc<'a>(doc: &'a serde_json::Value, label: &str) -> &'a serde_json::Value {
    doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["label"] == label)
        .unwrap_or_else(|| panic!("no variant {label}: {doc}"))
}

#[test]
fn a_try_folder_is_judged_again_with_from_the_fix_removes_the_wait_and_others_are_ruled_out() {
    let dir = tempfile::tempdir().unwrap();
    try_folder(dir.path());
    let out_dir = dir.path().join("report");
    let from = dir.path().display().to_string();
    let out = gapscope(&["try", "--from", &from, "-o", out_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let raw = stdout(&out);
    // The screen's long lines rejoined (a variant's cells, indented 4, join its line too).
    let screen = unwrapped(&raw);
    let first = screen.lines().next().unwrap();
    assert!(
        first.starts_with(&format!(
            "gapscope try: {FIX} removes the external event wait gap in graphed mode=2 T=1 emu: period"
        )),
        "{screen}"
    );
    assert!(
        raw.contains(&format!("\n  {FIX} — removes external event wait\n")),
        "{screen}"
    );
    assert!(
        screen.contains(" µs; spread across rounds 0.0"),
        "the change beside its spread: {screen}"
    );
    // The table of words, variant × cell.
    assert!(
        raw.contains("\nCells: C1 graphed mode=2 T=1 emu\n"),
        "{raw}"
    );
    assert!(
        raw.contains(&format!(
            "\n  {FIX:<30}removes\n  {NOOP:<30}no effect\n  {BROKEN:<30}failed\n"
        )),
        "{raw}"
    );
    assert!(
        raw.contains(&format!("\n  {NOOP} — no effect\n")),
        "{screen}"
    );
    assert!(screen.contains(&format!("  {BROKEN} — failed")), "{screen}");
    assert!(
        screen.contains("round 1: exit code 1: RuntimeError: NCCL error: invalid usage"),
        "{screen}"
    );
    assert!(
        screen.contains(&format!("Ruled out with no effect: {NOOP}\n")),
        "{screen}"
    );
    for line in stdout(&out).lines() {
        assert!(line.chars().count() <= 120, "{line}");
    }

    let md = std::fs::read_to_string(out_dir.join("try.md")).unwrap();
    assert!(
        md.starts_with(&format!("# gapscope try\n\n**{FIX} removes")),
        "{md}"
    );
    assert!(
        md.contains(&format!("Ruled out with no effect: `{NOOP}`.")),
        "{md}"
    );
    assert!(md.contains("## graphed mode=2 T=1 emu"), "{md}");
    assert!(
        md.contains(&format!(
            "| `{FIX}` | `{FIX}` | **removes** external event wait |"
        )),
        "{md}"
    );
    assert!(md.contains("external event wait"), "{md}");
    // The removed cause is named with BASE's evidence.
    assert!(
        md.contains("external event wait 1.") && md.contains("(gone: external event-wait node 0x"),
        "{md}"
    );
    assert!(md.contains("inside ncclAllGather"), "{md}");
    // A variant that failed has no figures to judge, nor gaps to show.
    assert!(!md.contains(&format!("- `{BROKEN}`: judged on")), "{md}");

    let doc = json(&out_dir.join("try.json"));
    assert_eq!(doc["kind"], "try");
    assert_eq!(doc["rounds_judged"], serde_json::json!([1, 2, 3]));
    let fix = variant_doc(&doc, FIX);
    assert_eq!(fix["word"], "removes");
    let cell = &fix["cells"][0];
    assert_eq!(cell["removed"], "external event wait");
    assert_eq!(
        cell["basis"], "traced",
        "synthetic traces measure no untraced period"
    );
    assert_eq!(cell["base_rounds"].as_array().unwrap().len(), 3);
    let change = cell["change_ns"].as_f64().unwrap();
    assert!(
        (-1_100.0..-700.0).contains(&change),
        "mode 1's gap before the collective is 900 ns shorter: {change}"
    );
    let wait = cell["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["cause"] == "external_event_wait")
        .unwrap();
    assert!(wait["base_ns"].as_f64().unwrap() > 1_000.0, "{wait}");
    assert_eq!(wait["variant_ns"], 0.0);
    assert_eq!(wait["removed"], true);
    let noop = variant_doc(&doc, NOOP);
    assert_eq!(noop["word"], "no_effect");
    assert!(noop["cells"][0]["change_ns"].as_f64().unwrap().abs() < 100.0);
    let broken = variant_doc(&doc, BROKEN);
    assert_eq!(broken["word"], "failed");
    assert_eq!(
        broken["failed"],
        "round 1: exit code 1: RuntimeError: NCCL error: invalid usage"
    );
    // What the screen says, the Markdown and the JSON say alike.
    assert_eq!(
        doc["headline"].as_str().unwrap(),
        &first["gapscope try: ".len()..]
    );
}

#[test]
fn expect_fix_gates_ci_on_the_variant_removing_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    try_folder(dir.path());
    let from = dir.path().display().to_string();
    let code = |label: &str| {
        gapscope(&["try", "--from", &from, "--expect-fix", label])
            .status
            .code()
    };
    assert_eq!(code(FIX), Some(0));
    assert_eq!(code(NOOP), Some(4), "no effect is not a fix");
    assert_eq!(code(BROKEN), Some(4), "a failed variant is not a fix");
    let err = fails_in_one_line(
        &gapscope(&["try", "--from", &from, "--expect-fix", "NOPE=1"]),
        2,
    );
    assert!(
        err.contains("--expect-fix NOPE=1: no variant is labelled so"),
        "{err}"
    );
}

#[test]
fn bad_input_is_one_line_exit_2_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    for (args, says) in [
        (vec!["try", "--env", "A=1", "-o", o], "CMD"),
        (vec!["try", "-o", o, "--", "true"], "nothing to try"),
        (
            vec!["try", "--env", "1A=2", "-o", o, "--", "true"],
            "expected NAME=VALUE",
        ),
        (
            vec!["try", "--env", "A", "-o", o, "--", "true"],
            "expected NAME=VALUE",
        ),
        (
            vec!["try", "--env", "A=1", "--env", "A=1", "-o", o, "--", "true"],
            "given twice",
        ),
        (
            vec![
                "try",
                "--env",
                "A=1",
                "--expect-fix",
                "B=1",
                "-o",
                o,
                "--",
                "true",
            ],
            "no variant is labelled so",
        ),
        (
            vec![
                "try", "--env", "A=1", "--rounds", "0", "-o", o, "--", "true",
            ],
            "--rounds 0",
        ),
        (
            vec![
                "try",
                "--env",
                "A=1",
                "--rounds",
                "18446744073709551615",
                "-o",
                o,
                "--",
                "true",
            ],
            "expected 1 to 1000",
        ),
        (
            vec![
                "try",
                "--env",
                "GAPSCOPE_HOST_SAMPLES=zzz",
                "-o",
                o,
                "--",
                "true",
            ],
            "GAPSCOPE_HOST_SAMPLES=zzz: expected off, python or native",
        ),
        (
            vec!["try", "--from", o, "--env", "A=1"],
            "cannot be used with",
        ),
    ] {
        let err = fails_in_one_line(&gapscope(&args), 2);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} made {}", out.display());
    }
    // A setting every run's `record` would refuse, from the environment: refused at once.
    let out_env = bin()
        .args(["try", "--env", "A=1", "-o", o, "--", "true"])
        .env("GAPSCOPE_TRACE_BUDGET", "zzz")
        .output()
        .unwrap();
    let err = fails_in_one_line(&out_env, 2);
    assert!(err.contains("BASE: GAPSCOPE_TRACE_BUDGET=zzz"), "{err}");
    assert!(!out.exists());
    // The recorder's own settings, from a variant: refused at once, naming the variant.
    let err = fails_in_one_line(
        &gapscope(&[
            "try",
            "--env",
            "GAPSCOPE_CUPTI_ATTR=6=x",
            "-o",
            o,
            "--",
            "true",
        ]),
        2,
    );
    assert!(
        err.contains(
            "GAPSCOPE_CUPTI_ATTR=6=x: GAPSCOPE_CUPTI_ATTR=\"6=x\": expected `ATTR=VALUE` pairs"
        ),
        "{err}"
    );
    assert!(!out.exists());
    // A folder that is no try folder, and a plan that is no plan.
    std::fs::create_dir(&out).unwrap();
    let err = fails_in_one_line(&gapscope(&["try", "--from", o]), 2);
    assert!(err.contains("not a gapscope try folder"), "{err}");
    std::fs::write(out.join("try-plan.json"), "{\"rounds\": 3}").unwrap();
    let err = fails_in_one_line(&gapscope(&["try", "--from", o]), 2);
    assert!(err.contains("not a gapscope try plan"), "{err}");
    assert!(!out.join("try.md").exists());
    // The bundled plan, edited: each edit refused at once, none judged (a plan of 10^18
    // rounds once spun for minutes).
    let bundled: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("traces/try-serial-event-h200/try-plan.json"),
        )
        .unwrap(),
    )
    .unwrap();
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 4] = [
        ("expected 1 to 1000", |p| {
            p["rounds"] = 1_000_000_000_000_000_000u64.into()
        }),
        ("expected 1 to 1000", |p| p["rounds"] = 0.into()),
        ("listed twice", |p| {
            let first = p["variants"][1].clone();
            p["variants"].as_array_mut().unwrap().push(first);
        }),
        ("which the plan does not list", |p| {
            p["runs"][0]["variant"] = "NOT_A_VARIANT".into();
        }),
    ];
    for (says, edit) in edits {
        let mut plan = bundled.clone();
        edit(&mut plan);
        std::fs::write(out.join("try-plan.json"), plan.to_string()).unwrap();
        let err = fails_in_one_line(&gapscope(&["try", "--from", o]), 2);
        assert!(err.contains(says), "{says}: {err}");
        assert!(!out.join("try.md").exists());
    }
}

/// The recorder's line for a program that never initialised CUDA.
const NO_TRACE: &str = "no trace: no trace written";

#[test]
fn on_a_machine_without_traces_every_run_is_reported_failed_and_the_others_still_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let o = out.to_str().unwrap();
    // A=1 makes the program fail; the others exit 0 and, with no CUDA, write no trace.
    let program = r#"if [ "$A" = 1 ]; then echo 'bad setting A' >&2; exit 3; fi"#;
    let args = [
        "try", "-o", o, "--rounds", "2", "--env", "A=1", "--env", "B=2", "--", "sh", "-c", program,
    ];
    let run = gapscope(&args);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{err}");
    let last = err.trim_end().lines().last().unwrap();
    assert!(
        last.starts_with("gapscope: error: BASE failed in every round, nothing judged (round 1: "),
        "{err}"
    );
    // Every run was attempted, in interleaved rounds, and said how it ended.
    let progress: Vec<&str> = err.lines().filter(|l| l.contains(" round ")).collect();
    let order: Vec<String> = [
        "1/2, BASE",
        "1/2, A=1",
        "1/2, B=2",
        "2/2, BASE",
        "2/2, A=1",
        "2/2, B=2",
    ]
    .iter()
    .map(|r| format!("gapscope: note: round {r}: failed, "))
    .collect();
    assert_eq!(progress.len(), 6, "{err}");
    for (line, want) in progress.iter().zip(&order) {
        assert!(line.starts_with(want.as_str()), "{line} / {want}");
    }
    assert!(progress[1].contains("exit code 3: bad setting A"), "{err}");
    // Without CUDA the recorder says why there is no trace; with it, the program still
    // initialises none.
    assert!(progress[0].contains(NO_TRACE), "{err}");

    let doc = json(&out.join("try.json"));
    let a = variant_doc(&doc, "A=1");
    assert_eq!(a["word"], "failed");
    assert_eq!(a["failed"], "round 1: exit code 3: bad setting A");
    let b = variant_doc(&doc, "B=2");
    assert_eq!(b["word"], "failed");
    assert!(
        b["failed"].as_str().unwrap().starts_with("round 1: "),
        "{b}"
    );
    let plan = json(&out.join("try-plan.json"));
    assert_eq!(plan["runs"].as_array().unwrap().len(), 6);
    assert!(out.join("runs/2-2-B=2/stderr.log").is_file());

    // The folder judges the same again, running nothing.
    let again = dir.path().join("again");
    let from = gapscope(&["try", "--from", o, "-o", again.to_str().unwrap()]);
    assert_eq!(from.status.code(), Some(1), "{}", stderr(&from));
    assert!(!stderr(&from).contains(" round 1/2"), "nothing ran again");
    for name in ["try.md", "try.json"] {
        assert_eq!(
            std::fs::read_to_string(out.join(name)).unwrap(),
            std::fs::read_to_string(again.join(name)).unwrap(),
            "{name}"
        );
    }
    // A second try into the same folder is refused before running anything.
    let err = fails_in_one_line(&gapscope(&args), 2);
    assert!(err.contains("holds an earlier try"), "{err}");
}

#[test]
fn a_signal_stops_the_try_after_the_run_under_way_and_the_partial_report_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let mut child = bin()
        .args(["try", "-o", out.to_str().unwrap(), "--env", "A=1", "--"])
        .args(["sh", "-c", "exec sleep 30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first run to start.
    let log = out.join("runs/1-0-BASE/stderr.log");
    let started = std::time::Instant::now();
    while !log.exists() && started.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut ended = None;
    while started.elapsed().as_secs() < 25 {
        if let Some(status) = child.try_wait().unwrap() {
            ended = Some(status);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let Some(status) = ended else {
        let _ = child.kill();
        panic!("try did not stop on SIGTERM");
    };
    let output = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(143), "{}", stderr(&output));
    let md = std::fs::read_to_string(out.join("try.md")).unwrap();
    assert!(
        md.contains("partial: stopped by SIGTERM in round 1 of 3"),
        "{md}"
    );
    let plan = json(&out.join("try-plan.json"));
    assert_eq!(plan["runs"].as_array().unwrap().len(), 1, "{plan}");
    assert_eq!(plan["runs"][0]["interrupted"], true);
    assert!(plan["interrupted"].is_string());
}

/// A try whose BASE fails every run, stopped by SIGINT after a round: the exit is the signal's
/// (130), as the partial report says, not the failing BASE's 1.
#[test]
fn a_signal_decides_the_exit_even_when_every_base_run_failed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let child = bin()
        .args(["try", "-o", out.to_str().unwrap(), "--env", "A=1", "--"])
        .args(["sh", "-c", "sleep 0.3; exit 1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Round 1 done: round 2's BASE has started.
    let log = out.join("runs/2-0-BASE/stderr.log");
    let started = std::time::Instant::now();
    while !log.exists() && started.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(log.exists(), "round 2 never started");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr(&output));
    let md = std::fs::read_to_string(out.join("try.md")).unwrap();
    assert!(md.contains("partial: stopped by SIGINT"), "{md}");
}

/// The H200 try of `examples/serial_event.py` (traces/try-serial-event-h200, 3 rounds, BASE
/// and 3 variants, default `record`), judged again without a GPU: the setting that makes the
/// program build no serial event removes the external event wait of the mode-2 graph; the
/// two NCCL settings, which this one-GPU program does not read, are ruled out with no effect.
/// The report is the committed one, byte for byte.
#[test]
fn the_h200_try_of_the_serial_event_program_is_judged_again_the_same_without_a_gpu() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/try-serial-event-h200");
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("report");
    let out = gapscope(&[
        "try",
        "--from",
        folder.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--expect-fix",
        "NCCL_GRAPH_MIXING_SUPPORT=0",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out_dir.join("try.json"));
    let fix = variant_doc(&doc, "NCCL_GRAPH_MIXING_SUPPORT=0");
    assert_eq!(fix["word"], "removes", "{fix}");
    let removed: Vec<&serde_json::Value> = fix["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["word"] == "removes")
        .collect();
    assert_eq!(removed.len(), 1, "{fix}");
    assert_eq!(removed[0]["removed"], "external event wait");
    assert!(
        removed[0]["cell"].as_str().unwrap().starts_with("graph G2"),
        "{fix}"
    );
    for label in ["NCCL_MEM_SYNC_DOMAIN=0", "NCCL_CGA_CLUSTER_SIZE=0"] {
        assert_eq!(variant_doc(&doc, label)["word"], "no_effect", "{label}");
    }
    // The removal rests on the gap gone: a period change within the spread is said to be
    // no contradiction of it.
    let headline = doc["headline"].as_str().unwrap();
    assert!(
        headline.contains("removes the external event wait gap")
            && headline.contains("the gap is gone; the period's change is within"),
        "{headline}"
    );
    // Recorded on another machine: its command's paths are that machine's, and said so.
    assert_eq!(doc["recorded_elsewhere"], true);
    assert!(
        stdout(&out).contains("command (recorded elsewhere, its paths as given"),
        "{}",
        stdout(&out)
    );
    let committed = std::fs::read_to_string(folder.join("try.md")).unwrap();
    let again = std::fs::read_to_string(out_dir.join("try.md")).unwrap();
    assert_eq!(again, committed);
}

/// Paths into the try folder are stored relative to it, however `-o` was given: the plan says
/// where it was recorded, and a failed run's line names `runs/…`, not the machine's path.
#[test]
fn a_try_stores_paths_into_its_folder_relative_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let program = format!(
        "echo \"cannot read t/runs/1-0-BASE/a nor {}/t/runs/1-0-BASE/b\" >&2; exit 3",
        cwd.display()
    );
    let run = bin()
        .current_dir(&cwd)
        .args(["try", "-o", "t", "--rounds", "1", "--env", "A=1", "--"])
        .args(["sh", "-c", &program])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let plan = json(&cwd.join("t/try-plan.json"));
    assert_eq!(plan["command"][0], "sh", "as given");
    assert_eq!(
        plan["runs"][0]["last_stderr"],
        "cannot read runs/1-0-BASE/a nor runs/1-0-BASE/b"
    );
    assert_eq!(plan["recorded_in"], cwd.join("t").display().to_string());
    let md = std::fs::read_to_string(cwd.join("t/try.md")).unwrap();
    assert!(
        md.contains("exit code 3: cannot read runs/1-0-BASE/a nor runs/1-0-BASE/b"),
        "{md}"
    );
    assert!(!md.contains("recorded elsewhere"), "{md}");
}

/// A plan written before stderr paths were stored relative: its lines name the folder where
/// it was recorded. Judged there, the paths read relative to the folder; moved (another
/// folder or machine), they still do, and the report says the command is as given there.
#[test]
fn an_older_plans_paths_read_relative_to_its_folder_and_a_moved_one_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().canonicalize().unwrap().join("first");
    std::fs::create_dir(&first).unwrap();
    try_folder(&first);
    let plan_path = first.join("try-plan.json");
    let mut plan = json(&plan_path);
    for run in plan["runs"].as_array_mut().unwrap() {
        if run["variant"] == BROKEN {
            let line = format!(
                "cannot write {}/{}/trace.json",
                first.display(),
                run["folder"].as_str().unwrap()
            );
            run["last_stderr"] = line.into();
        }
    }
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let judged = |folder: &Path| {
        let out = gapscope(&["try", "--from", folder.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        unwrapped(&stdout(&out))
    };
    let failed = format!("failed, round 1: exit code 1: cannot write runs/1-3-{BROKEN}/trace.json");
    let here = judged(&first);
    assert!(here.contains(&failed), "{here}");
    assert!(!here.contains(&first.display().to_string()), "{here}");
    assert!(!here.contains("recorded elsewhere"), "{here}");
    let moved = dir.path().join("moved");
    std::fs::rename(&first, &moved).unwrap();
    let there = judged(&moved);
    assert!(there.contains(&failed), "{there}");
    assert!(
        there.contains("command (recorded elsewhere, its paths as given there): `python step.py`"),
        "{there}"
    );
}

#[test]
fn try_o_draws_the_rounds_and_each_judged_variant_against_base() {
    let dir = tempfile::tempdir().unwrap();
    let from = format!(
        "{}/traces/try-serial-event-h200",
        env!("CARGO_MANIFEST_DIR")
    );
    let out_dir = dir.path().join("out");
    let o = out_dir.to_str().unwrap();
    let out = gapscope(&["try", "--from", &from, "-o", o]);
    let screen = stdout(&out);
    let fix = "try-NCCL_GRAPH_MIXING_SUPPORT=0";
    assert!(
        screen.contains(&format!("(with try.json, try.svg, {fix}.svg,")),
        "{screen}"
    );
    let rounds = std::fs::read_to_string(out_dir.join("try.svg")).unwrap();
    assert_eq!(
        rounds.matches("<g class=\"strip\">").count(),
        3,
        "a strip per cell"
    );
    assert!(rounds.contains(">NCCL_GRAPH_MIXING_SUPPORT=0 (removes)</text>"));
    // 3 rounds of BASE and of each of the 3 variants, per cell.
    assert_eq!(rounds.matches("class=\"round\"").count(), 3 * 4 * 3);
    let svg = std::fs::read_to_string(out_dir.join(format!("{fix}.svg"))).unwrap();
    assert!(svg.contains(">BASE (top) vs NCCL_GRAPH_MIXING_SUPPORT=0 (bottom): removes"));
    let labels: Vec<&str> = svg
        .split("class=\"changed-gap\"")
        .skip(1)
        .map(|t| &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()])
        .collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(labels[0].starts_with("external event wait "), "{labels:?}");
    assert!(
        labels[1].starts_with("external event wait: gone"),
        "{labels:?}"
    );
    // The variants with no effect are not drawn; the trace is well-formed protobuf.
    assert!(!out_dir.join("try-NCCL_MEM_SYNC_DOMAIN=0.svg").exists());
    let bytes = std::fs::read(out_dir.join(format!("{fix}.perfetto-trace"))).unwrap();
    let packets: Vec<_> = gapscope::report::perfetto::wire::fields(&bytes)
        .collect::<Result<_, _>>()
        .expect("well-formed protobuf");
    assert!(!packets.is_empty());
    let md = std::fs::read_to_string(out_dir.join("try.md")).unwrap();
    assert!(md.contains("](try.svg)") && md.contains(&format!("]({fix}.svg)")));
}
