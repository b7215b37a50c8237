//! Traces gapscope did not make: HTA's public test corpus (facebookresearch/
//! HolisticTraceAnalysis, `tests/data`), a few files of it in traces/hta/ (traces/README.md says
//! which, and how the large ones were trimmed). Each gets its steps and a period, or one line
//! that says why not.

mod common;
use gapscope::analysis::{self, AnalysisOptions};
use gapscope::trace;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hta(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces/hta")
        .join(name)
}

fn gapscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args(args)
        .output()
        .unwrap()
}

/// `gapscope analyze TRACE ARGS…`: exit status, stdout, stderr.
fn analyze(name: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let path = hta(name);
    let mut all = vec!["analyze", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = gapscope(&all);
    (
        out.status.code(),
        common::unwrapped(&String::from_utf8_lossy(&out.stdout)),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The one error line of a refused input, which must name the file and exit 2.
fn refused(name: &str) -> String {
    let (code, stdout, stderr) = analyze(name, &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("gapscope: error: "), "{stderr}");
    assert!(lines[0].contains(name), "{stderr}");
    lines[0].to_owned()
}

#[test]
fn an_execution_trace_is_named_and_refused_with_what_to_record_instead() {
    let line = refused("simple-add-execution-trace.json.gz");
    assert!(
        line.contains("a PyTorch execution trace")
            && line.contains("not a profiler trace: record with torch.profiler"),
        "{line}"
    );
    assert!(!line.contains("schema_version"), "{line}");
}

#[test]
fn an_mtia_trace_is_named_and_refused_as_unsupported() {
    let line = refused("mtia-inference-rank0.json.gz");
    assert!(
        line.contains("MTIA device activity (40 ")
            && line.contains("MTIA traces are not supported"),
        "{line}"
    );
    assert!(
        !line.contains("profile with ProfilerActivity.CUDA"),
        "{line}"
    );
}

/// The trace as `analyze TRACE --step-range NAME` reads it, analysed.
fn analysis_with_steps(name: &str, step_range: Option<&str>) -> (usize, analysis::Analysis) {
    let mut t = trace::read_any(&hta(name)).unwrap();
    let marked = step_range.map_or(0, |r| t.mark_steps(r));
    let a = analysis::analyze(
        std::slice::from_ref(&t),
        &[name.to_owned()],
        &AnalysisOptions::default(),
    );
    (marked, a)
}

/// PARAM's benchmark marks no `ProfilerStep`: its iterations (a warm-up, a measured one) are
/// `record_function` ranges `[param|…|warmup|forward]` and `[param|…|measure|forward]`, each
/// around an inner range of its own name. The hint names the ranges' shared last part, and
/// passing it as written makes each iteration one step.
#[test]
fn a_benchmark_of_self_nested_ranges_gets_a_hint_that_works_as_written() {
    const ALEXNET: &str = "alexnet-benchmark.json.gz";
    let (_, a) = analysis_with_steps(ALEXNET, None);
    let hint = a.inputs[0].steps.step_range_hint.as_ref().expect("a hint");
    assert_eq!(
        (hint.name.as_str(), hint.ranges, hint.names),
        ("forward", 2, 2)
    );
    assert_eq!(hint.flag(), "--step-range forward");
    let (_, screen, _) = analyze(ALEXNET, &[]);
    assert!(
        screen.contains(
            "Step range: the host ranges ending in `|forward` (2 names) repeat around device work (2 ranges): pass `--step-range forward` to make each one a step"
        ),
        "{screen}"
    );
    // As written: two steps, the outer range of each iteration, and a period.
    let (marked, a) = analysis_with_steps(ALEXNET, Some("forward"));
    assert_eq!(marked, 2);
    assert_eq!(a.cells.len(), 1);
    assert_eq!(a.cells[0].steps.len(), 2);
    assert_eq!(a.cells[0].period.map(|p| p.n), Some(1));
    let (code, screen, stderr) = analyze(ALEXNET, &["--step-range", "forward"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!screen.contains("no period"), "{screen}");
    // A suffix of whole parts names one iteration; its inner range is part of it.
    for one in [
        "measure|forward",
        "[param|pytorch.model.alex_net|0|0|0|measure|forward]",
    ] {
        let (marked, a) = analysis_with_steps(ALEXNET, Some(one));
        assert_eq!(marked, 1, "{one}");
        assert_eq!(a.cells[0].steps.len(), 1, "{one}");
        let (_, _, stderr) = analyze(ALEXNET, &["--step-range", one]);
        assert!(!stderr.contains("no range named"), "{one}: {stderr}");
    }
    // A part inside the name is not its end.
    let (marked, _) = analysis_with_steps(ALEXNET, Some("measure"));
    assert_eq!(marked, 0);
}

/// Two `ProfilerStep`s make one period: no remedy, no verdict and no spread come from it, and
/// the screen says why instead.
#[test]
fn two_steps_give_no_remedy_verdict_or_spread_and_say_why() {
    const BASE: &str = "trace-compare-base.json.gz";
    let (_, a) = analysis_with_steps(BASE, None);
    let cell = &a.cells[0];
    assert_eq!(cell.steps.len(), 2);
    assert_eq!(cell.period.map(|p| p.n), Some(1));
    assert!(a.remedies.is_empty(), "{:?}", a.remedies);
    let withheld = &a.withheld_remedies[0];
    assert!(withheld.too_few_steps);
    assert_eq!(
        withheld.why,
        "a remedy needs ≥ 3 steps with a period, this has 1 (a cell's first step has none)"
    );
    let (code, screen, _) = analyze(BASE, &[]);
    assert_eq!(code, Some(0));
    assert!(
        screen.contains(
            "No remedy judged (too few steps):\n  C1: no remedy (capture in a CUDA graph): a remedy needs ≥ 3 steps with a period, this has 1"
        ),
        "{screen}"
    );
    assert!(!screen.contains("predicted saving"), "{screen}");
    // The one period and the one gap have no spread to give.
    assert!(screen.contains("eager, 117128.00 µs n=1"), "{screen}");
    assert!(!screen.contains("[117128.00–117128.00]"), "{screen}");
    assert!(screen.contains("117124.00 µs n=1 before"), "{screen}");
    // Compared with itself: a ratio, but no verdict, and the screen says why.
    let c = analysis::compare::compare(a.clone(), a, 1.02);
    assert_eq!(c.cells[0].change, None);
    assert!(
        c.cells[0]
            .no_verdict
            .as_deref()
            .unwrap()
            .starts_with("a verdict needs ≥ 3")
    );
    let path = hta(BASE);
    let out = gapscope(&["compare", path.to_str().unwrap(), path.to_str().unwrap()]);
    let screen = common::unwrapped(&String::from_utf8_lossy(&out.stdout));
    assert!(
        screen.contains("(1 cells compared; 1 without a verdict: too few steps (3 a side needed))")
            && screen.contains(
                "(1.00×, no verdict: a verdict needs ≥ 3 steps with a period, this has 1"
            ),
        "{screen}"
    );
}

/// A trace of one step has no period, and says so.
#[test]
fn one_step_has_no_period_and_says_why() {
    let (_, a) = analysis_with_steps("triton-example.json.gz", None);
    assert_eq!(a.cells[0].steps.len(), 1);
    assert_eq!(
        a.cells[0].why_no_period().as_deref(),
        Some("one step with device work: a period needs ≥ 2")
    );
    let (code, screen, _) = analyze("triton-example.json.gz", &[]);
    assert_eq!(code, Some(0));
    assert!(
        screen.contains("eager, no period (one step with device work: a period needs ≥ 2)"),
        "{screen}"
    );
}

/// `## forward ##` of a DDP training step as the step range leaves the backward pass's device
/// work in the steps' windows, where it counts as idle: the analysis says so, with the share
/// left out. `ProfilerStep` steps (the whole iteration) leave nothing out.
#[test]
fn a_step_range_around_part_of_the_iteration_says_what_it_leaves_out() {
    const DDP: &str = "ns-resolution-rank0.json.gz";
    let (marked, a) = analysis_with_steps(DDP, Some("## forward ##"));
    assert_eq!(marked, 5);
    let cell = &a.cells[0];
    let left_out = cell.observed.left_out.expect("work left out");
    assert_eq!(left_out.ops, 3036);
    assert!((0.62..0.64).contains(&left_out.share), "{left_out:?}");
    // What it does to the figures: idle most of each window.
    let (busy, idle) = (cell.busy.unwrap().median, cell.idle.unwrap().median);
    assert!(idle / (busy + idle) > 0.6, "{busy} {idle}");
    let (code, screen, _) = analyze(DDP, &["--step-range", "## forward ##"]);
    assert_eq!(code, Some(0));
    assert!(
        screen.contains(
            "⚠ C1 torch.profiler steps: its steps leave out 63.2 % of the device work that ran in their windows (3036 op(s), "
        ),
        "{screen}"
    );
    let (_, whole) = analysis_with_steps(DDP, None);
    assert_eq!(whole.cells[0].steps.len(), 5);
    assert_eq!(whole.cells[0].observed.left_out, None);
    let (busy, idle) = (
        whole.cells[0].busy.unwrap().median,
        whole.cells[0].idle.unwrap().median,
    );
    assert!(idle / (busy + idle) < 0.02, "{busy} {idle}");
    let (_, screen, _) = analyze(DDP, &[]);
    assert!(!screen.contains("leave out"), "{screen}");
}
