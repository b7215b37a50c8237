//! Issue 45 c: where users look. A real eager recording (host launch-bound gaps) with host
//! samples on its launching thread: the summary's gap lines, report.md's "Host time in the
//! gaps", the JSON and the Perfetto trace name the host code; without samples, none of them
//! says anything of host code (the bundled report fixtures check the bytes).

use gapscope::analysis::{self, AnalysisOptions};
use gapscope::report;
use gapscope::trace::{self, HostFrame, Trace, synthetic};

const MAIN_THREAD: u32 = 462;

fn frame(file: &str, function: &str, line: u32) -> HostFrame {
    HostFrame {
        file: file.into(),
        function: function.into(),
        line,
    }
}

/// `traces/torch-step-record-h200.json` with a sample every µs on its main thread (the
/// program's `step` calling torch's `Linear.forward`) and on another thread.
fn sampled() -> Trace {
    let torch = "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py";
    let main = (
        MAIN_THREAD,
        vec![
            frame(torch, "forward", 125),
            frame("/work/torch_step.py", "step", 30),
        ],
    );
    let other = (9999, vec![frame("/work/loader.py", "prefetch", 7)]);
    sampled_with(&[main, other])
}

/// The same recording with a sample every µs of each `(thread, stack)` given.
fn sampled_with(threads: &[(u32, Vec<HostFrame>)]) -> Trace {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/traces/torch-step-record-h200.json"
    );
    let mut t = trace::read_trace(std::path::Path::new(path)).unwrap();
    t.host_samples = Some(synthetic::host_samples_over(&t, 1_000, threads));
    t
}

const CODE: &str = "100 % work/torch_step.py:30 step → torch/nn/modules/linear.py:forward";

fn analyze(t: &Trace) -> analysis::Analysis {
    analysis::analyze(
        std::slice::from_ref(t),
        &["torch-step".into()],
        &AnalysisOptions::default(),
    )
}

/// Issue 45 b: without host samples no gap names host code; with them each host-bound gap
/// names the code sampled on its launching thread (the main thread, whose id is the
/// process's), one sample per µs of its gaps, and the other thread's samples at the same times
/// count for nothing.
#[test]
fn host_bound_gaps_of_a_real_trace_name_the_code_sampled_on_the_launching_thread() {
    let t = sampled();
    let mut bare = t.clone();
    bare.host_samples = None;
    let host_bound = |a: &analysis::Analysis| -> Vec<analysis::SequenceEntry> {
        let cells = a.cells.iter().flat_map(|c| c.sequence.iter());
        cells
            .filter(|e| analysis::host_samples::is_host_bound(e.gap_cause))
            .cloned()
            .collect()
    };
    let without = host_bound(&analyze(&bare));
    assert!(!without.is_empty(), "the recording has host-bound gaps");
    assert!(without.iter().all(|e| e.host_time.is_none()));
    let entries = host_bound(&analyze(&t));
    assert_eq!(entries.len(), without.len(), "the same gaps");
    for e in &entries {
        let h = e
            .host_time
            .as_ref()
            .expect("host time on every host-bound gap");
        // One sample per µs of gap, give or take one per gap at its ends.
        let expected = h.gap_ns as f64 / 1_000.0;
        assert!(
            (h.samples as f64 - expected).abs() <= h.gaps as f64 + 1.0,
            "{} samples for {} ns in {} gaps",
            h.samples,
            h.gap_ns,
            h.gaps
        );
        if h.samples >= analysis::host_samples::MIN_SAMPLES {
            assert_eq!(h.top.len(), 1, "{h:?}");
            assert_eq!(h.top[0].describe(), CODE);
        } else {
            assert!(h.describe().ends_with("too few to name the code"), "{h:?}");
        }
    }
    assert!(
        entries
            .iter()
            .any(|e| e.host_time.as_ref().unwrap().top.len() == 1)
    );
}

#[test]
fn the_summary_and_the_markdown_report_name_the_host_code() {
    let a = analyze(&sampled());
    let summary = report::summary::analysis_summary(&a, None);
    let host_lines: Vec<&str> = summary.lines().filter(|l| l.contains("host: ")).collect();
    assert!(!host_lines.is_empty(), "{summary}");
    assert!(
        host_lines
            .iter()
            .any(|l| l.contains(CODE) && l.contains("(n = ")),
        "{summary}"
    );
    assert!(
        !summary.contains("loader.py"),
        "another thread's code: {summary}"
    );
    let md = report::analysis_markdown(&a);
    let at = md
        .find("### Host time in the gaps of ")
        .expect("the section");
    let section = &md[at..];
    assert!(section.contains("| gap before | gap µs | cause | host code sampled in the gap (share of its time) | innermost frame | n |"), "{section}");
    assert!(section.contains(CODE), "{section}");
    assert!(section.contains("host launch-bound"), "{section}");
    assert!(
        section.contains("torch/nn/modules/linear.py:forward"),
        "{section}"
    );
}

#[test]
fn the_json_report_carries_host_time_only_with_samples() {
    let with = report::analysis_json(&analyze(&sampled()));
    let v: serde_json::Value = serde_json::from_str(&with).unwrap();
    let entries: Vec<&serde_json::Value> = v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["sequence"].as_array().unwrap())
        .filter(|e| e.get("host_time").is_some())
        .collect();
    assert!(!entries.is_empty());
    let named = entries
        .iter()
        .find(|e| !e["host_time"]["top"].as_array().unwrap().is_empty())
        .expect("a named gap");
    let top = &named["host_time"]["top"][0];
    assert_eq!(top["code"], "work/torch_step.py:30 step");
    assert_eq!(top["calls"], "torch/nn/modules/linear.py:forward");
    assert_eq!(top["share"], 1.0);
    assert!(named["host_time"]["samples"].as_u64().unwrap() >= 10);
    let mut bare = sampled();
    bare.host_samples = None;
    let without = report::analysis_json(&analyze(&bare));
    assert!(!without.contains("host_time"));
}

#[test]
fn perfetto_shows_the_samples_under_the_thread_and_the_code_on_gap_slices() {
    let t = sampled();
    let a = analyze(&t);
    let json = report::chrome_trace(std::slice::from_ref(&t), &a, &Default::default());
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let track = events
        .iter()
        .find(|e| {
            e["ph"] == "M" && e["args"]["name"] == format!("host samples, thread {MAIN_THREAD}")
        })
        .expect("a host samples track for the launching thread");
    assert!(
        !events
            .iter()
            .any(|e| e["args"]["name"] == "host samples, thread 9999"),
        "only launching threads"
    );
    let samples: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["cat"] == "host_sample")
        .collect();
    assert!(samples.len() > 100, "{}", samples.len());
    assert!(
        samples
            .iter()
            .all(|e| e["tid"] == track["tid"] && e["pid"] == track["pid"]
                || e["pid"] != track["pid"])
    );
    assert_eq!(samples[0]["name"], "torch/nn/modules/linear.py:forward");
    assert_eq!(
        samples[0]["args"]["stack"],
        "torch/nn/modules/linear.py:forward ← work/torch_step.py:30 step"
    );
    let named_gaps: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["cat"] == "gap" && e["args"]["host_code"].is_string())
        .collect();
    assert!(!named_gaps.is_empty());
    assert!(
        named_gaps
            .iter()
            .all(|g| g["args"]["cause"] == "host_launch_bound"
                || g["args"]["cause"] == "graph_launch_host_bound"
                || g["args"]["cause"] == "synchronization")
    );
    assert!(
        named_gaps
            .iter()
            .any(|g| g["args"]["host_code"].as_str().unwrap().starts_with(CODE))
    );
}

/// `compare`: the head samples `.item()` where the base sampled `Linear.forward`: the code whose
/// share changed most is named, in the summary, compare.md and the JSON.
#[test]
fn compare_names_the_host_code_whose_share_changed_most() {
    let base = analyze(&sampled());
    let item = "/venv/lib/python3.12/site-packages/torch/_tensor.py";
    let head = sampled_with(&[(
        MAIN_THREAD,
        vec![
            frame(item, "item", 40),
            frame("/work/torch_step.py", "step", 31),
        ],
    )]);
    let c = analysis::compare::compare(base, analyze(&head), 0.05);
    let changes: Vec<&analysis::host_samples::HostCodeChange> = c
        .cells
        .iter()
        .filter_map(|m| m.host_code_change.as_ref())
        .collect();
    assert!(!changes.is_empty());
    let h = changes[0];
    assert_eq!((h.base_share - h.head_share).abs(), 1.0, "{h:?}");
    let summary = report::summary::comparison_summary(&c, None);
    assert!(
        summary.contains("host code changed most: work/torch_step.py:"),
        "{summary}"
    );
    assert!(
        summary.contains("of the host-bound gaps' time"),
        "{summary}"
    );
    let md = report::comparison_markdown(&c);
    assert!(
        md.contains("  - host code changed most: work/torch_step.py:"),
        "{md}"
    );
    assert!(report::comparison_json(&c).contains("\"host_code_change\""));
}

/// A torch.profiler trace recorded `with_stack=True`: ten eager steps, each with a host
/// launch-bound gap of 30 µs in which the program's `step` (`/app/train.py:10`) ran
/// `Tensor.item` for 20 µs and itself for 10 µs.
fn kineto_with_stack() -> String {
    let mut events = Vec::new();
    let x = |cat: &str, name: &str, ts: f64, dur: f64, args: &str| {
        format!(
            r#"{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 7, "tid": 7, "ts": {ts:.3}, "dur": {dur:.3}, "args": {{{args}}}}}"#
        )
    };
    let item = "/venv/lib/python3.12/site-packages/torch/_tensor.py(40): item";
    for i in 0..10u32 {
        let t = 1000.0 + 100.0 * f64::from(i);
        let kernel = |corr: u32| format!(r#""device": 0, "stream": 7, "correlation": {corr}"#);
        let launch = |corr: u32| format!(r#""correlation": {corr}"#);
        events.push(x(
            "user_annotation",
            &format!("ProfilerStep#{i}"),
            t,
            90.0,
            "",
        ));
        events.push(x("python_function", "/app/train.py(10): step", t, 90.0, ""));
        events.push(x("python_function", item, t + 12.0, 20.0, ""));
        // Each kernel launched 4 µs before it starts; the second's launch comes 25 µs after
        // the first kernel ended: a host launch-bound gap of 30 µs.
        for (corr, name, start) in [
            (2 * i + 1, "k_first", t + 5.0),
            (2 * i + 2, "k_second", t + 40.0),
        ] {
            let launch = x(
                "cuda_runtime",
                "cudaLaunchKernel",
                start - 4.0,
                2.0,
                &launch(corr),
            );
            events.push(launch);
            events.push(x("kernel", name, start, 5.0, &kernel(corr)));
        }
    }
    format!(
        r#"{{"schemaVersion": 1, "traceEvents": [{}]}}"#,
        events.join(",\n")
    )
}

/// Issue 45 e: the import turns `python_function` events into exact host spans, and the host
/// launch-bound gap names the code by its share of the gap's time.
#[test]
fn a_kineto_trace_with_stack_names_the_code_in_its_host_bound_gaps() {
    let json = kineto_with_stack();
    let t = trace::import_kineto(json.as_bytes(), std::path::Path::new("with_stack.json")).unwrap();
    let samples = t
        .host_samples
        .as_ref()
        .expect("python_function events imported");
    assert!(samples.exact);
    // Per step: step alone, item inside step, step alone again.
    assert_eq!(samples.samples.len(), 30);
    assert_eq!(samples.stacks.len(), 2);
    let a = analyze(&t);
    let entry = a
        .cells
        .iter()
        .flat_map(|c| &c.sequence)
        .find(|e| e.name == "k_second")
        .expect("the second kernel");
    assert_eq!(entry.gap_cause, analysis::CauseKind::HostLaunchBound);
    let h = entry.host_time.as_ref().expect("host time");
    assert!(h.exact);
    assert_eq!(
        h.describe(),
        "67 % app/train.py:10 step → torch/_tensor.py:item; 33 % app/train.py:10 step (27 traced spans)"
    );
    // Without the stacks: nothing of host code.
    let bare = json.replace("python_function", "python_function_not");
    let t = trace::import_kineto(bare.as_bytes(), std::path::Path::new("bare.json")).unwrap();
    assert!(t.host_samples.is_none());
}
