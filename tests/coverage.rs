//! Graph coverage, provenance and the completeness check: on small traces built here, whose
//! figures are known by construction, and on the bundled H200 recordings.

use gapscope::analysis::{self, Analysis, AnalysisOptions, CellAnalysis, Regime};
use gapscope::report::{analysis_json, analysis_markdown, summary::analysis_summary};
use gapscope::trace::{
    self, ApiCall, Cell, GraphNode, HostFrame, Kernel, Marker, MarkerKind, Metadata, NodeType,
    Source, StrId, Trace, TraceBuilder,
};

/// A trace under construction: kernels launched by API calls, with step markers and ranges.
struct Build {
    b: TraceBuilder,
    corr: u32,
}

const THREAD: u32 = 1;

impl Build {
    fn new() -> Build {
        Build {
            b: TraceBuilder::new(Metadata {
                tool: "test".into(),
                source: Source::Synthetic,
                cells: vec![Cell {
                    label: "decode".into(),
                    ..Cell::default()
                }],
                ..Metadata::default()
            }),
            corr: 1,
        }
    }

    fn api(&mut self, name: &str, at: u64, thread: u32) -> u32 {
        let corr = self.corr;
        self.corr += 1;
        let name = self.b.intern(name);
        self.b.trace.api_calls.push(ApiCall {
            start: at,
            end: at + 1_000,
            corr,
            thread,
            name,
            ..ApiCall::default()
        });
        corr
    }

    /// An eager kernel launched at `at` (host) on `thread`, running `dur` ns from `start`.
    fn eager(&mut self, name: &str, at: u64, thread: u32, start: u64, dur: u64) {
        let corr = self.api("cudaLaunchKernel", at, thread);
        self.kernel(name, corr, start, dur, 0, 0);
    }

    fn kernel(&mut self, name: &str, corr: u32, start: u64, dur: u64, graph: u32, node: u64) {
        let name = self.b.intern(name);
        self.b.trace.kernels.push(Kernel {
            start,
            end: start + dur,
            device: 0,
            stream: 7,
            corr,
            name,
            graph,
            node,
        });
    }

    /// One launch of executable graph `exec` at `at`: its kernels `dur` ns each, back to back
    /// from `start`, one per node of `nodes`.
    fn replay(&mut self, exec: u32, nodes: &[u64], at: u64, start: u64, dur: u64) {
        let corr = self.api("cudaGraphLaunch", at, THREAD);
        for (i, &node) in nodes.iter().enumerate() {
            let name = format!("k{i}");
            self.kernel(&name, corr, start + i as u64 * (dur + 500), dur, exec, node);
        }
    }

    fn range(&mut self, name: &str, start: u64, end: u64, kind: MarkerKind) {
        let name = self.b.intern(name);
        self.b.trace.markers.push(Marker {
            start,
            end,
            name,
            kind,
            thread: THREAD,
            cell: (kind == MarkerKind::Step).then_some(0),
        });
    }

    fn intern(&mut self, s: &str) -> StrId {
        self.b.intern(s)
    }

    fn finish(self) -> Trace {
        let t = self.b.finish();
        t.validate().expect("a valid trace");
        t
    }
}

fn analyze(t: &Trace) -> Analysis {
    analysis::analyze(
        std::slice::from_ref(t),
        &["t.json".to_owned()],
        &AnalysisOptions::default(),
    )
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

const US: u64 = 1_000;

#[test]
fn graphed_steps_that_also_launch_eager_kernels_say_so_and_lower_the_coverage() {
    // Four `decode` steps 100 µs apart: two eager (two 10 µs kernels), two replays of exec 7
    // (two 10 µs kernels); the last replay's step also launches a 4 µs eager kernel.
    let mut b = Build::new();
    for s in 0..4u64 {
        let t0 = s * 100 * US;
        b.range("decode", t0, t0 + 50 * US, MarkerKind::Step);
        if s < 2 {
            b.eager("e0", t0 + US, THREAD, t0 + 5 * US, 10 * US);
            b.eager("e1", t0 + 2 * US, THREAD, t0 + 20 * US, 10 * US);
        } else {
            b.replay(
                7,
                &[(7 << 32) | 1, (7 << 32) | 2],
                t0 + US,
                t0 + 5 * US,
                10 * US,
            );
            if s == 3 {
                b.eager("fallback", t0 + 3 * US, THREAD, t0 + 40 * US, 4 * US);
            }
        }
    }
    let a = analyze(&b.finish());
    let eager = cell_of(&a, Regime::Eager);
    let graphed = cell_of(&a, Regime::Graphed);
    assert_eq!(eager.observed.graph_coverage, Some(0.0));
    assert_eq!(eager.observed.graph_coverage_ops, Some(0.0));
    assert_eq!(eager.observed.eager_in_graphed, None);
    // 40 µs of replayed kernels and 4 µs of eager ones; 4 of 5 ops.
    assert!(close(graphed.observed.graph_coverage.unwrap(), 40.0 / 44.0));
    assert!(close(graphed.observed.graph_coverage_ops.unwrap(), 0.8));
    let e = graphed
        .observed
        .eager_in_graphed
        .expect("the fallback is seen");
    assert_eq!((e.steps, e.of, e.ops, e.device_ns), (1, 2, 1, 4 * US));

    let summary = analysis_summary(&a, None);
    assert!(
        summary.contains("1 of 2 graphed steps also launched 1 eager op(s) (4.00 µs"),
        "{summary}"
    );
    assert!(
        summary.contains("graphs ran 91 % of device time, 80 % of ops"),
        "{summary}"
    );
    let md = analysis_markdown(&a);
    assert!(
        md.contains("1 of 2 graphed steps also launched 1 eager op(s)"),
        "{md}"
    );
    let graphed_json = graphed_cell_json(&a);
    let observed = &graphed_json["observed"];
    assert!(close(
        observed["graph_coverage"].as_f64().unwrap(),
        40.0 / 44.0
    ));
    assert_eq!(observed["graph_coverage_ops"], 0.8);
    assert_eq!(observed["eager_in_graphed"]["steps"], 1);
    assert_eq!(observed["eager_in_graphed"]["ops"], 1);
}

/// The JSON report's graphed cell.
fn graphed_cell_json(a: &Analysis) -> serde_json::Value {
    let json: serde_json::Value = serde_json::from_str(&analysis_json(a)).unwrap();
    json["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["observed"]["regime"] == "graphed")
        .cloned()
        .expect("a graphed cell")
}

fn cell_of(a: &Analysis, regime: Regime) -> &CellAnalysis {
    a.cells
        .iter()
        .find(|c| c.observed.regime == Some(regime))
        .unwrap_or_else(|| panic!("no {regime:?} cell"))
}

/// `eager` steps of aten kernels, then `compiled` steps that launch torch.compile's Triton
/// kernels eagerly (its cudagraphs skipped), then `replays` graph replays of exec 7: each a
/// `decode` step 100 µs apart with two 10 µs ops.
fn phases_trace(eager: u64, compiled: u64, replays: u64) -> Trace {
    let mut b = Build::new();
    for s in 0..eager + compiled + replays {
        let t0 = s * 100 * US;
        b.range("decode", t0, t0 + 50 * US, MarkerKind::Step);
        if s < eager {
            b.eager("aten_gelu", t0 + US, THREAD, t0 + 5 * US, 10 * US);
            b.eager("aten_tanh", t0 + 2 * US, THREAD, t0 + 20 * US, 10 * US);
        } else if s < eager + compiled {
            b.eager(
                "triton_poi_fused_gelu_0",
                t0 + US,
                THREAD,
                t0 + 5 * US,
                10 * US,
            );
            b.eager(
                "triton_poi_fused_tanh_1",
                t0 + 2 * US,
                THREAD,
                t0 + 20 * US,
                10 * US,
            );
        } else {
            let nodes = [(7u64 << 32) | 1, (7 << 32) | 2];
            b.replay(7, &nodes, t0 + US, t0 + 5 * US, 10 * US);
        }
    }
    b.finish()
}

fn cell_labelled<'a>(a: &'a Analysis, label: &str) -> &'a CellAnalysis {
    a.cells
        .iter()
        .find(|c| c.label == label)
        .unwrap_or_else(|| {
            let labels: Vec<&str> = a.cells.iter().map(|c| c.label.as_str()).collect();
            panic!("no cell {label:?} in {labels:?}")
        })
}

#[test]
fn a_compiled_phase_that_fell_back_to_eager_is_a_cell_of_its_own_and_says_so() {
    // torch.compile(mode="reduce-overhead") that skipped cudagraphs: the compiled phase's
    // steps share the eager phase's step range and run eagerly, with no graph at all.
    let a = analyze(&phases_trace(8, 8, 0));
    assert_eq!(a.cells.len(), 2, "the eager and the compiled phase");
    let eager = cell_labelled(&a, "decode (eager)");
    let compiled = cell_labelled(&a, "decode (compiled, no graphs)");
    assert_eq!((eager.steps.len(), compiled.steps.len()), (8, 8));
    assert!(!eager.observed.compiled_without_graphs);
    assert!(compiled.observed.compiled_without_graphs);
    assert_eq!(compiled.observed.regime, Some(Regime::Eager));
    assert_eq!(compiled.observed.graph_coverage, Some(0.0));
    assert_eq!(compiled.observed.replayed_with_provenance, None);
    let summary = analysis_summary(&a, None);
    assert!(
        summary.contains(
            "decode (compiled, no graphs): its 8 steps launched torch.compile's Triton kernels \
             and no CUDA graph: this phase ran eagerly (graphs ran 0 % of its device time)"
        ),
        "{summary}"
    );
    assert!(
        analysis_markdown(&a).contains("decode (compiled, no graphs): its 8 steps launched"),
        "the report says it too"
    );
    let json: serde_json::Value = serde_json::from_str(&analysis_json(&a)).unwrap();
    let flagged: Vec<&serde_json::Value> = json["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["observed"]["compiled_without_graphs"] == true)
        .collect();
    assert_eq!(flagged.len(), 1);
    assert_eq!(flagged[0]["observed"]["graph_coverage"], 0.0);

    // With only the fallen-back phase in the trace, its cell still says so.
    let a = analyze(&phases_trace(0, 8, 0));
    assert_eq!(a.cells.len(), 1);
    assert_eq!(a.cells[0].label, "decode (compiled, no graphs)");
    assert!(analysis_summary(&a, None).contains("this phase ran eagerly"));
}

#[test]
fn a_compiled_phase_that_was_captured_keeps_its_warm_up_steps_with_the_eager_ones() {
    // Graph trees run the compiled step eagerly once or twice before capturing it: those
    // steps are no phase of their own, and nothing says the phase ran eagerly.
    let a = analyze(&phases_trace(8, 2, 8));
    let labels: Vec<&str> = a.cells.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["decode (eager)", "decode (graphed)"]);
    assert_eq!(cell_labelled(&a, "decode (eager)").steps.len(), 10);
    assert!(a.cells.iter().all(|c| !c.observed.compiled_without_graphs));
    assert!(!analysis_summary(&a, None).contains("ran eagerly"));

    // A graphed phase beside a fallen-back one (two compiled functions, one graphed).
    let a = analyze(&phases_trace(0, 6, 8));
    let labels: Vec<&str> = a.cells.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["decode (graphed)", "decode (compiled, no graphs)"]);
    assert_eq!(
        cell_labelled(&a, "decode (graphed)")
            .observed
            .graph_coverage,
        Some(1.0)
    );
}

#[test]
fn eager_launches_between_replays_outside_step_ranges_count_against_the_graph_cell() {
    // Exec 7 replayed 5 times, 100 µs apart, outside any step range (as torch.compile does).
    let mut b = Build::new();
    let nodes = [(7u64 << 32) | 1, (7 << 32) | 2];
    for s in 0..5u64 {
        let t0 = s * 100 * US;
        b.replay(7, &nodes, t0, t0 + 5 * US, 10 * US);
    }
    // Between replays 2 and 3, two eager kernels on the launching thread: counted.
    b.eager("copy_inputs", 210 * US, THREAD, 230 * US, 2 * US);
    b.eager("copy_inputs", 220 * US, THREAD, 240 * US, 2 * US);
    // The same between replays on another thread: not this graph's.
    b.eager("other_thread", 250 * US, 2, 260 * US, 2 * US);
    // Long after the last replay (more than one launch interval): not counted.
    b.eager("later", 900 * US, THREAD, 905 * US, 2 * US);
    // Within one launch interval after the last replay: counted, with the last step.
    b.eager("tail", 450 * US, THREAD, 460 * US, 2 * US);
    let a = analyze(&b.finish());
    let replays = a
        .cells
        .iter()
        .find(|c| c.graph_group.is_some())
        .expect("a graph cell");
    let e = replays.observed.eager_in_graphed.expect("eager work seen");
    assert_eq!((e.steps, e.of, e.ops, e.device_ns), (2, 5, 3, 6 * US));
    assert!(close(
        replays.observed.graph_coverage.unwrap(),
        100.0 / 106.0
    ));
    assert!(close(
        replays.observed.graph_coverage_ops.unwrap(),
        10.0 / 13.0
    ));
}

/// Exec 7 cloned from template graph 3, whose two kernel nodes were created on THREAD at
/// `created` ns: the GEMM inside cublasLtMatmul, the other with no library.
fn provenance_trace(created: [Option<u64>; 2]) -> Trace {
    let mut b = Build::new();
    let matmul = b.intern("cublasLtMatmul");
    let launch = b.intern("cudaLaunchKernel");
    for (i, at) in created.iter().enumerate() {
        let index = i as u64 + 1;
        let template = GraphNode {
            id: (3 << 32) | index,
            graph: 3,
            node_type: NodeType::Kernel,
            created_by: Some(launch),
            created_at: *at,
            created_thread: at.map(|_| THREAD),
            library_frame: (i == 0).then_some(matmul),
            ..GraphNode::default()
        };
        let clone = GraphNode {
            id: (7 << 32) | index,
            graph: 7,
            cloned_from: Some(template.id),
            // Instantiation's own time: inside no range; the template's counts.
            created_at: Some(5_000 * US),
            created_thread: Some(THREAD),
            ..template
        };
        b.b.trace.graph.nodes.extend([template, clone]);
    }
    // Capture at 0–100 µs inside decode_step ⊃ layer 3 ⊃ mlp; replays from 1 ms.
    b.range("decode_step", 0, 100 * US, MarkerKind::Range);
    b.range("layer 3", 10 * US, 90 * US, MarkerKind::Range);
    b.range("mlp", 20 * US, 80 * US, MarkerKind::Range);
    b.range("attention", 81 * US, 89 * US, MarkerKind::Range);
    for s in 0..5u64 {
        let t0 = 1_000 * US + s * 100 * US;
        b.range("step", t0, t0 + 50 * US, MarkerKind::Step);
        b.replay(
            7,
            &[(7 << 32) | 1, (7 << 32) | 2],
            t0 + US,
            t0 + 5 * US,
            10 * US,
        );
    }
    b.finish()
}

#[test]
fn replayed_kernels_inherit_the_ranges_and_library_of_their_nodes_creation() {
    let t = provenance_trace([Some(30 * US), Some(85 * US)]);
    let a = analyze(&t);
    let c = cell_of(&a, Regime::Graphed);
    let p = |i: usize| c.sequence[i].provenance.clone().expect("a provenance");
    assert_eq!(p(0).ranges, ["decode_step", "layer 3", "mlp"]);
    assert_eq!(p(0).library.as_deref(), Some("cublasLtMatmul"));
    assert_eq!(
        p(1).ranges,
        ["decode_step", "layer 3", "attention"],
        "the ranges open when the node was made, not those that closed before"
    );
    assert_eq!(p(1).library, None);
    assert_eq!(c.observed.replayed_with_provenance, Some(1.0));

    let graphed = graphed_cell_json(&a);
    assert_eq!(
        graphed["sequence"][0]["provenance"],
        serde_json::json!({"ranges": ["decode_step", "layer 3", "mlp"], "library": "cublasLtMatmul"})
    );
    assert_eq!(graphed["observed"]["replayed_with_provenance"], 1.0);

    let summary = analysis_summary(&a, None);
    assert!(
        summary.contains("before k1 (decode_step/layer 3/attention) — "),
        "{summary}"
    );
    let md = analysis_markdown(&a);
    assert!(
        md.contains("`k0` (decode_step/layer 3/mlp ← cublasLtMatmul)")
            && md.contains("`k1` (decode_step/layer 3/attention)"),
        "{md}"
    );
}

#[test]
fn replayed_kernels_name_the_programs_python_code_that_created_their_nodes() {
    let mut t = provenance_trace([Some(30 * US), Some(85 * US)]);
    // The first node was made from the program's own `forward`, under torch's `linear`; the
    // second by a thread that ran no Python code.
    let site = "/venv/lib/python3.12/site-packages";
    let stack = [
        HostFrame::stack_line(&format!("{site}/torch/nn/functional.py"), 2380, "linear"),
        HostFrame::stack_line("/home/u/app/models/mlp.py", 118, "forward"),
        HostFrame::stack_line("/home/u/app/decode.py", 40, "decode_step"),
    ]
    .join("\n");
    t.strings.push(stack);
    let id = (t.strings.len() - 1) as u32;
    t.graph.nodes[0].python_stack = Some(id);
    t.validate().expect("a valid trace");
    let a = analyze(&t);
    let c = cell_of(&a, Regime::Graphed);
    let p = c.sequence[0].provenance.clone().expect("a provenance");
    assert_eq!(p.code.as_deref(), Some("models/mlp.py:118 forward"));
    assert_eq!(
        p.label(),
        "decode_step/layer 3/mlp ← models/mlp.py:118 forward ← cublasLtMatmul"
    );
    assert_eq!(c.sequence[1].provenance.clone().unwrap().code, None);
    assert_eq!(c.observed.replayed_with_code, Some(0.5));
    assert_eq!(graphed_cell_json(&a)["observed"]["replayed_with_code"], 0.5);
    let md = analysis_markdown(&a);
    assert!(md.contains("| 100 % (50 % name their code) |"), "{md}");

    // A recording that read no stack says nothing of code, in the JSON too.
    let a = analyze(&provenance_trace([Some(30 * US), Some(85 * US)]));
    let c = cell_of(&a, Regime::Graphed);
    assert_eq!(c.observed.replayed_with_code, None);
    assert!(
        graphed_cell_json(&a)["observed"]
            .get("replayed_with_code")
            .is_none()
    );
}

#[test]
fn nodes_without_creation_records_share_only_what_the_trace_holds() {
    // As traces recorded before nodes carried their creation: the GEMM's library only.
    let t = provenance_trace([None, None]);
    let a = analyze(&t);
    let c = cell_of(&a, Regime::Graphed);
    assert_eq!(
        c.sequence[0].provenance,
        Some(analysis::provenance::Provenance {
            ranges: vec![],
            code: None,
            library: Some("cublasLtMatmul".into())
        })
    );
    assert_eq!(c.sequence[1].provenance, None);
    assert_eq!(c.observed.replayed_with_provenance, Some(0.5));
}

#[test]
fn the_new_node_fields_round_trip_and_are_left_out_when_unknown() {
    let t = provenance_trace([Some(30 * US), None]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    trace::write_trace(&path, &t).unwrap();
    let back = trace::read_trace(&path).unwrap();
    assert_eq!(back.graph, t.graph);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.matches("\"created_at\"").count(),
        3,
        "one template with a time and both clones"
    );
    assert_eq!(text.matches("\"library_frame\"").count(), 2);
    // A node as older recorders wrote it reads with the fields absent.
    let old: GraphNode = serde_json::from_str(
        r#"{"id":1,"graph":1,"type":"kernel","external":false,"created_by":null,"library_call":null,"cloned_from":null}"#,
    )
    .unwrap();
    assert_eq!(
        (old.created_at, old.created_thread, old.library_frame),
        (None, None, None)
    );
}

#[test]
fn eager_ops_take_the_ranges_around_their_launch_call() {
    let mut b = Build::new();
    for s in 0..3u64 {
        let t0 = s * 100 * US;
        b.range("decode", t0, t0 + 50 * US, MarkerKind::Step);
        b.range(
            "ncclAllGather",
            t0 + 10 * US,
            t0 + 20 * US,
            MarkerKind::Range,
        );
        b.eager("gemm", t0 + US, THREAD, t0 + 5 * US, 10 * US);
        b.eager("gather", t0 + 12 * US, THREAD, t0 + 25 * US, 5 * US);
    }
    let a = analyze(&b.finish());
    let c = cell_of(&a, Regime::Eager);
    let p = |i: usize| c.sequence[i].provenance.clone().unwrap();
    assert_eq!(p(0).ranges, ["decode"]);
    assert_eq!(p(0).library, None);
    assert_eq!(p(1).ranges, ["decode", "ncclAllGather"]);
    assert_eq!(p(1).library.as_deref(), Some("ncclAllGather"));
    assert_eq!(p(1).label(), "decode ← ncclAllGather");
    assert_eq!(c.observed.replayed_with_provenance, None, "no replayed ops");
}

#[test]
fn the_completeness_check_counts_what_is_missing_and_not_what_was_captured() {
    let mut b = Build::new();
    for s in 0..3u64 {
        let t0 = s * 100 * US;
        b.range("decode", t0, t0 + 50 * US, MarkerKind::Step);
        b.eager("gemm", t0 + US, THREAD, t0 + 5 * US, 10 * US);
    }
    // Step 1 launched one more kernel whose device record is missing.
    b.api("cudaLaunchKernel", 102 * US, THREAD);
    // A capture: its launches build nodes, not device work.
    b.api("cudaStreamBeginCapture", 400 * US, THREAD);
    b.api("cudaLaunchKernel", 401 * US, THREAD);
    b.api("cudaMemsetAsync", 402 * US, THREAD);
    b.api("cudaStreamEndCapture", 403 * US, THREAD);
    // A capture whose begin went unrecorded (the trace budget paused API records).
    b.api("cudaLaunchKernel", 501 * US, THREAD);
    b.api("cudaStreamEndCapture", 503 * US, THREAD);
    // A graph launch that replayed nothing, then a kernel that ran.
    b.api("cudaGraphLaunch", 600 * US, THREAD);
    b.eager("after", 610 * US, THREAD, 615 * US, US);
    // A kernel whose launch call is missing, during step 2.
    let k = b.intern("orphan");
    b.b.trace.kernels.push(Kernel {
        start: 230 * US,
        end: 231 * US,
        corr: 9_999,
        name: k,
        ..Kernel::default()
    });
    b.b.trace.metadata.unended_ranges = 2;
    let t = b.finish();
    let c = analysis::completeness::check(&t);
    assert_eq!(c.launches_without_device_record, 1);
    assert_eq!(c.graph_launches_without_ops, 1);
    assert_eq!(c.device_records_without_launch, 1);
    assert_eq!(c.unended_ranges, 2);
    assert_eq!(
        c.describe(),
        "1 launch call(s) without a device record, 1 device record(s) without a launch call, 1 graph launch(es) that replayed no op, 2 NVTX range(s) never ended"
    );
    let a = analyze(&t);
    let input = &a.inputs[0].completeness;
    assert_eq!(
        input.cells,
        ["decode"],
        "the lost launch and the orphan kernel fall in the decode steps; the graph launch in none"
    );
    let summary = analysis_summary(&a, None);
    assert!(
        summary.contains("⚠ input 0: the recording does not add up: 1 launch call(s)"),
        "{summary}"
    );
    assert!(summary.contains("cells it touches:"), "{summary}");
}

#[test]
fn a_trace_that_adds_up_has_no_completeness_note() {
    let mut b = Build::new();
    for s in 0..3u64 {
        let t0 = s * 100 * US;
        b.range("decode", t0, t0 + 50 * US, MarkerKind::Step);
        b.eager("gemm", t0 + US, THREAD, t0 + 5 * US, 10 * US);
    }
    let a = analyze(&b.finish());
    assert_eq!(a.inputs[0].completeness.total(), 0);
    assert!(!analysis_summary(&a, None).contains("does not add up"));
    assert!(!analysis_markdown(&a).contains("does not add up"));
}

// --- the bundled H200 recordings ---

fn read(rel: &str) -> Trace {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces")
        .join(rel);
    if rel.ends_with(".gz") {
        trace::read_kineto(&path).unwrap()
    } else {
        trace::read_trace(&path).unwrap()
    }
}

#[test]
fn torch_recordings_replay_cells_are_all_graph_and_the_eager_cell_none() {
    for rel in [
        "torch-graphs-record-h200.json",
        "torch-graphs-budget-h200.json",
        "torch-graphs-2rank-h200/mixing-1/trace-0.json",
        "torch-step-record-h200.json",
    ] {
        let a = analyze(&read(rel));
        let mut graphed = 0;
        for c in &a.cells {
            let coverage = c.observed.graph_coverage.expect("cells have ops");
            match c.observed.regime {
                Some(Regime::Eager) => assert_eq!(coverage, 0.0, "{rel}: {}", c.label),
                Some(Regime::Graphed) => {
                    graphed += 1;
                    assert!(coverage >= 0.95, "{rel}: {}: {coverage}", c.label);
                    assert_eq!(c.observed.eager_in_graphed, None, "{rel}: {}", c.label);
                }
                None => panic!("{rel}: {} has no regime", c.label),
            }
        }
        assert!(graphed > 0, "{rel}");
        assert_eq!(
            a.inputs[0].completeness.launches_without_device_record, 0,
            "{rel}"
        );
        assert_eq!(
            a.inputs[0].completeness.device_records_without_launch, 0,
            "{rel}"
        );
    }
}

#[test]
fn ncclallgathers_replayed_copy_names_nccl_and_eager_ops_their_step_range() {
    let a = analyze(&read("torch-graphs-record-h200.json"));
    for c in &a.cells {
        let (_, collective) = c.collective().expect("every cell has the all-gather");
        let p = collective.provenance.as_ref().expect("a provenance");
        assert_eq!(p.library.as_deref(), Some("ncclAllGather"), "{}", c.label);
        if c.observed.regime == Some(Regime::Eager) {
            assert_eq!(p.ranges, ["decode_step", "ncclAllGather"]);
            assert!(c.sequence.iter().all(|e| {
                e.provenance
                    .as_ref()
                    .is_some_and(|p| p.ranges.first().map(String::as_str) == Some("decode_step"))
            }));
        } else {
            // Recorded before nodes carried their creation: the library is all there is.
            assert!(p.ranges.is_empty());
            let share = c.observed.replayed_with_provenance.unwrap();
            assert!(close(share, 1.0 / 6.0), "{}: {share}", c.label);
        }
    }
}

#[test]
fn captures_whose_begin_the_budget_left_unrecorded_are_not_losses() {
    // 6 launches made while capturing, whose cudaStreamBeginCapture was not recorded.
    let t = read("torch-graphs-2rank-deep-pause-h200/mixing-1/trace-0.json");
    let c = analysis::completeness::check(&t);
    assert_eq!(c.launches_without_device_record, 0);
    assert_eq!(c.graph_launches_without_ops, 0);
    assert_eq!(c.unended_ranges, 2, "read from the recorder's note");
}

#[test]
fn starved_buffers_leave_device_records_without_launch_calls_in_the_replay_cell() {
    let a = analyze(&read("emu-h200-tiny-buffer.json"));
    let c = &a.inputs[0].completeness;
    assert_eq!(c.device_records_without_launch, 2);
    assert_eq!(c.cells, ["graph G1 replays (exec 2, 4 ops)"]);
}

#[test]
fn kineto_imports_say_once_that_replays_have_no_provenance() {
    let a = analyze(&read("torch-graphs-kineto-h200.json.gz"));
    let notes = &a.inputs[0].notes;
    let said = notes
        .iter()
        .filter(|n| n.contains("records no graph node creation"))
        .count();
    assert_eq!(said, 1, "{notes:?}");
    let md = analysis_markdown(&a);
    assert_eq!(md.matches("records no graph node creation").count(), 1);
    let c = cell_of(&a, Regime::Graphed);
    assert_eq!(c.observed.replayed_with_provenance, Some(0.0));
    assert!(c.observed.graph_coverage.unwrap() >= 0.95);
}
