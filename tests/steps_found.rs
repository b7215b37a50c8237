//! Steps found in the kernel sequence of programs that mark none (issue 24), on synthetic
//! streams: what becomes a cell, what is counted, what is paired and what the screen says.

use gapscope::analysis::discover::StepSource;
use gapscope::analysis::{self, Analysis, AnalysisOptions, Confidence, PairBasis, Regime};
use gapscope::report::summary::analysis_summary;
use gapscope::trace::Trace;
use gapscope::trace::synthetic::KernelStream;

fn analyze(t: &Trace) -> Analysis {
    analysis::analyze(
        std::slice::from_ref(t),
        &["t.json".to_owned()],
        &AnalysisOptions::default(),
    )
}

/// A decode step: an embedding, two "layers" of 3 kernels, the head and a sample (9 ops).
const TOKEN: [&str; 9] = [
    "embed", "gemm_qkv", "attn", "gemm_mlp", "gemm_qkv", "attn", "gemm_mlp", "lm_head", "sample",
];

/// `steps` decode steps; the host waits 40 µs between tokens (sampling, bookkeeping), and
/// with `every`, a bookkeeping kernel ends every `every`-th token.
fn decode(s: &mut KernelStream, steps: usize, every: Option<usize>) {
    decode_waiting(s, steps, every, 40_000);
}

/// [`decode`] with the host waiting `wait` ns between tokens.
fn decode_waiting(s: &mut KernelStream, steps: usize, every: Option<usize>, wait: u64) {
    for i in 0..steps {
        s.kernel(TOKEN[0], wait, 3_000);
        s.kernels(&TOKEN[1..]);
        if every.is_some_and(|n| i % n == n - 1) {
            s.kernel("stop_check", 1_000, 1_000);
        }
    }
}

fn found_cells(a: &Analysis) -> Vec<&analysis::CellAnalysis> {
    a.cells.iter().filter(|c| c.found.is_some()).collect()
}

fn labels(a: &Analysis) -> Vec<&str> {
    a.cells.iter().map(|c| c.label.as_str()).collect()
}

#[test]
fn a_decode_loop_with_a_kernel_every_n_tokens_is_one_cell_with_every_step() {
    let mut s = KernelStream::new();
    decode(&mut s, 64, Some(8));
    let a = analyze(&s.finish());
    assert_eq!(a.cells.len(), 1);
    let c = &a.cells[0];
    let f = c.found.as_ref().expect("found in the kernel sequence");
    assert_eq!(c.observed.regime, Some(Regime::Eager));
    assert_eq!((f.unit_ops, f.steps, f.off_unit_steps), (9, 64, 8));
    // The extra kernel stays with its step: no op is dropped.
    let ops: usize = c.steps.iter().map(|s| s.ops.len()).sum();
    assert_eq!(ops, 64 * 9 + 8);
    assert_eq!(a.inputs[0].steps.left_over, 0);
    // Phased where the host waits: every step starts at the embedding.
    assert_eq!(c.sequence[0].name, "embed");
    // Host-bound: one token = 9 launches of 2 µs + 8 µs + 40 µs of host work.
    let period = c.period.as_ref().unwrap().median;
    assert!((period - 66_000.0).abs() < 1_000.0, "{period}");
    let screen = analysis_summary(&a, None);
    assert!(
        screen.contains(
            "Steps found from the kernel sequence (no step markers): E1 unit of 9 ops, 64 steps, 8 off the unit; 0 of 584 eager ops left over"
        ),
        "{screen}"
    );
    assert!(screen.contains("C1 eager loop E1 (steps of 9 ops found in"));
}

#[test]
fn two_loops_one_after_another_are_two_cells() {
    // A prefill-like loop over chunks (other kernels), then the decode loop.
    let mut s = KernelStream::new();
    for _ in 0..10 {
        s.kernel("embed_chunk", 30_000, 3_000);
        s.kernels(&["flash_prefill", "gemm_big", "gemm_big_down", "norm"]);
    }
    decode(&mut s, 30, None);
    let a = analyze(&s.finish());
    let found = found_cells(&a);
    assert_eq!(found.len(), 2, "{:?}", labels(&a));
    let shape = |c: &analysis::CellAnalysis| {
        let f = c.found.as_ref().unwrap();
        (f.ordinal, f.unit_ops, f.steps)
    };
    assert_eq!(shape(found[0]), (1, 5, 10));
    assert_eq!(shape(found[1]), (2, 9, 30));
    assert_eq!(a.inputs[0].steps.source, StepSource::KernelSequence);
}

#[test]
fn a_slower_warm_up_before_the_timed_loop_is_shown_inside_the_loops_one_cell() {
    // 5 warm-up tokens (the host waits 400 µs a token: caches, allocator), one-off set-up
    // kernels (a capture's, an allocator's), 100 tokens at 40 µs.
    let mut s = KernelStream::new();
    decode_waiting(&mut s, 5, None, 400_000);
    s.kernels(&["setup_a", "setup_b", "setup_c", "setup_d"]);
    decode(&mut s, 100, None);
    let a = analyze(&s.finish());
    let found = found_cells(&a);
    assert_eq!(found.len(), 1, "one loop, one cell: {:?}", labels(&a));
    let f = found[0].found.as_ref().unwrap();
    assert_eq!((f.ordinal, f.steps, f.runs_joined), (1, 105, 2));
    assert_eq!(
        f.run_medians.len(),
        2,
        "the warm-up's period beside the loop's"
    );
    assert!(
        f.run_medians[0] > 5 * f.run_medians[1],
        "{:?}",
        f.run_medians
    );
    assert!(
        f.describe().contains("2 runs at different periods"),
        "{}",
        f.describe()
    );
    assert!(!found[0].label.contains("run "), "{}", found[0].label);
    // The cell's period is the timed loop's: no period reaches across the set-up.
    let p = found[0].period.as_ref().unwrap();
    assert_eq!(p.n, 4 + 99);
    assert_eq!(a.inputs[0].steps.left_over, 4);
}

#[test]
fn calls_of_one_loop_split_by_a_short_prefill_are_one_cell_without_the_prefill_period() {
    // Three generate() calls: each a prefill (other kernels, two "layers" of 3) and 30 tokens.
    let mut s = KernelStream::new();
    for _ in 0..3 {
        s.kernel("prefill_embed", 2_000_000, 3_000);
        s.kernels(&[
            "gemm_prefill",
            "flash_prefill",
            "gemm_prefill_mlp",
            "gemm_prefill",
            "flash_prefill",
            "gemm_prefill_mlp",
        ]);
        decode(&mut s, 30, None);
    }
    let a = analyze(&s.finish());
    let found = found_cells(&a);
    assert_eq!(found.len(), 1, "{:?}", labels(&a));
    let c = found[0];
    let f = c.found.as_ref().unwrap();
    assert_eq!((f.unit_ops, f.steps, f.runs_joined), (9, 90, 3));
    assert_eq!(f.run_medians.len(), 1, "one period");
    // The prefills are left over, and no period reaches across one: 29 a call.
    assert_eq!(a.inputs[0].steps.left_over, 3 * 7);
    let p = c.period.as_ref().unwrap();
    assert_eq!(p.n, 3 * 29);
    assert!((p.median - 66_000.0).abs() < 1_000.0, "{p:?}");
    assert!(p.max < 100_000.0, "{p:?}");
    let screen = analysis_summary(&a, None);
    assert!(
        screen.contains("E1 unit of 9 ops, 90 steps in 3 runs; 21 of 831 eager ops left over"),
        "{screen}"
    );
}

#[test]
fn two_runs_of_one_unit_at_different_periods_are_one_cell_with_both_periods_shown() {
    // The same kernels at two host costs: 30 tokens at 40 µs of host work, then 30 at 400. From
    // the kernels alone this is one loop (a warm-up call or another batch size look the same):
    // one cell, one remedy line, each run's period shown inside it.
    let mut s = KernelStream::new();
    decode(&mut s, 30, None);
    s.kernels(&["resize_a", "resize_b", "resize_c", "resize_d", "resize_e"]);
    decode_waiting(&mut s, 30, None, 400_000);
    let a = analyze(&s.finish());
    let found = found_cells(&a);
    assert_eq!(found.len(), 1);
    let f = found[0].found.as_ref().unwrap();
    assert_eq!((f.steps, f.runs_joined, f.run_medians.len()), (60, 2, 2));
    assert!(
        f.run_medians[1] > 5 * f.run_medians[0],
        "{:?}",
        f.run_medians
    );
    let screen = analysis_summary(&a, None);
    assert!(
        screen.contains("in 2 runs at different periods (medians "),
        "{screen}"
    );
}

#[test]
fn a_token_unit_with_layers_inside_is_the_step_not_the_layer() {
    // A token: an embedding, 8 identical layers of 6 kernels, a norm, the head, an argmax.
    let layer = ["norm", "gemm_qkv", "rope", "attn", "gemm_o", "gemm_mlp"];
    let mut s = KernelStream::new();
    for _ in 0..40 {
        s.kernel("embed", 40_000, 3_000);
        for _ in 0..8 {
            s.kernels(&layer);
        }
        s.kernels(&["final_norm", "lm_head", "argmax"]);
    }
    let a = analyze(&s.finish());
    let found = found_cells(&a);
    assert_eq!(found.len(), 1);
    let f = found[0].found.as_ref().unwrap();
    assert_eq!((f.unit_ops, f.steps, f.off_unit_steps), (1 + 48 + 3, 40, 0));
    assert_eq!(a.inputs[0].steps.left_over, 0);
}

#[test]
fn tokens_whose_kernels_alternate_with_their_alignment_are_one_loop() {
    // Tokens of 60 ops: two elementwise kernels come in a vectorised or an unrolled variant
    // by the alignment of their tensors, in a pattern of 4 tokens, so no two tokens in a row
    // are the same: every token is still a step, and those off the most frequent are counted.
    let body: Vec<String> = (0..56).map(|i| format!("k{i}")).collect();
    let mut s = KernelStream::new();
    for t in 0..64 {
        let (first, second) = match t % 4 {
            0 => ("cmp_unrolled", "add_unrolled"),
            1 | 3 => ("cmp_vec4", "add_vec2"),
            _ => ("cmp_vec2", "add_vec2"),
        };
        s.kernel("embed", 40_000, 3_000);
        s.kernel(first, 1_000, 1_000);
        s.kernels(&body.iter().map(String::as_str).collect::<Vec<_>>());
        s.kernels(&[second, "argmax"]);
    }
    let a = analyze(&s.finish());
    let found = found_cells(&a);
    assert_eq!(found.len(), 1, "{:?}", labels(&a));
    let f = found[0].found.as_ref().unwrap();
    assert_eq!((f.unit_ops, f.steps, f.off_unit_steps), (60, 64, 32));
    assert_eq!(found[0].period.as_ref().unwrap().n, 63);
}

#[test]
fn a_loop_broken_by_a_few_foreign_kernels_keeps_its_steps_and_counts_them() {
    // 60 tokens of 9 ops; after the 20th and the 40th, two kernels of other work.
    let mut s = KernelStream::new();
    for i in 0..60 {
        s.kernel(TOKEN[0], 40_000, 3_000);
        s.kernels(&TOKEN[1..]);
        if i == 19 || i == 39 {
            s.kernels(&["foreign_a", "foreign_b"]);
        }
    }
    let a = analyze(&s.finish());
    let found = found_cells(&a);
    assert_eq!(found.len(), 1);
    let f = found[0].found.as_ref().unwrap();
    assert_eq!((f.unit_ops, f.steps, f.off_unit_steps), (9, 60, 2));
    assert_eq!(a.inputs[0].steps.left_over, 0);
}

#[test]
fn a_stream_without_repetition_gets_no_invented_cell() {
    let mut s = KernelStream::new();
    let mut x = 11u64;
    for _ in 0..3_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let name = format!("k{}", (x >> 33) % 40);
        s.kernel(&name, 1_000, 2_000);
    }
    let a = analyze(&s.finish());
    assert!(found_cells(&a).is_empty());
    // As before: no markers, no graphs, no repetition — the whole trace is one step.
    assert_eq!(a.cells.len(), 1);
    assert_eq!(a.cells[0].label, "all steps");
    assert!(a.cells[0].period.is_none());
    assert_eq!(a.inputs[0].steps.source, StepSource::NoRepetition);
    let screen = analysis_summary(&a, None);
    assert!(
        screen.contains(
            "Steps: no step markers, and no repeating sequence among the 3000 eager ops: they are one step, with no period"
        ),
        "{screen}"
    );
}

#[test]
fn eager_and_graphed_work_pair_by_kernel_sequence_with_the_basis_on_screen() {
    // The same step eagerly, then as a captured graph replayed (no marker anywhere).
    let mut s = KernelStream::new();
    decode(&mut s, 40, None);
    for _ in 0..40 {
        s.replay(7, &TOKEN, 20_000);
    }
    let a = analyze(&s.finish());
    assert_eq!(a.cells.len(), 2);
    let pair = &a.regime_pairs[0];
    assert_eq!(
        a.cells[pair.base].found.as_ref().map(|f| f.ordinal),
        Some(1)
    );
    assert!(a.cells[pair.head].graph_group.is_some());
    let pairing = pair.pairing.as_ref().unwrap();
    assert_eq!(pairing.basis, PairBasis::KernelSequence);
    assert_eq!(pairing.confidence, Confidence::Sure);
    let screen = analysis_summary(&a, None);
    assert!(
        screen.contains(
            "C2 ↔ C1: paired by kernel sequence: 100 % of the graph's 9 ops match the eager step's by name, in order (9 of 9; the eager step has 9)"
        ),
        "{screen}"
    );
    assert!(screen.contains("0.45× of C1"), "{screen}");
    let md = gapscope::report::markdown::analysis_markdown(&a);
    assert!(md.contains("paired by kernel sequence: 100 %"), "{md}");
    let json = serde_json::to_value(&a.regime_pairs[0]).unwrap();
    assert_eq!(json["pairing"]["basis"], "kernel_sequence");
    assert_eq!(json["pairing"]["confidence"], "sure");
}

#[test]
fn a_compiled_graph_pairs_on_its_library_kernels_as_likely_and_an_unrelated_one_not_at_all() {
    let mut s = KernelStream::new();
    decode(&mut s, 40, None);
    // torch.compile's graph: the GEMMs stay, the rest is fused into triton kernels.
    let compiled = [
        "triton_poi_fused_embedding_0",
        "gemm_qkv",
        "triton_per_fused_attn_1",
        "gemm_mlp",
        "gemm_qkv",
        "triton_per_fused_attn_1",
        "gemm_mlp",
        "lm_head",
        "triton_red_fused_argmax_2",
    ];
    for _ in 0..20 {
        s.replay(7, &compiled, 20_000);
    }
    for _ in 0..20 {
        s.replay(9, &["other_a", "other_b", "other_c", "other_d"], 20_000);
    }
    let a = analyze(&s.finish());
    let pairing = a.regime_pairs[0].pairing.as_ref().unwrap();
    assert_eq!(pairing.confidence, Confidence::Likely);
    assert!(
        pairing.text.starts_with(
            "paired by library kernels: 5 of the graph's 5 library kernels (GEMMs, attention, collectives) match the eager step's by name, in order, and the eager step runs 5 kernels of those names; the graph's 4 compiler-generated kernels stand for the eager step's other 4 ops"
        ),
        "{}",
        pairing.text
    );
    assert!(pairing.text.ends_with("likely, not certain"));
    assert_eq!(a.regime_pairs.len(), 1, "the unrelated graph is not paired");
    let not = &a.not_paired[0];
    assert!(a.cells[not.cell].label.starts_with("graph G2 replays"));
    assert!(
        not.text.starts_with("not paired: the closest eager cell"),
        "{}",
        not.text
    );
    let screen = analysis_summary(&a, None);
    assert!(screen.contains("C3: not paired"), "{screen}");
}

#[test]
fn kernels_beside_each_graph_replay_are_the_replays_not_eager_steps() {
    // A framework's small fill kernel before every replay.
    let mut s = KernelStream::new();
    for _ in 0..50 {
        s.kernel("fill", 5_000, 1_000);
        s.replay(3, &TOKEN, 1_000);
    }
    let a = analyze(&s.finish());
    assert!(found_cells(&a).is_empty());
    assert_eq!(a.cells.len(), 1);
    assert_eq!(a.inputs[0].steps.beside_graphs, 50);
}

#[test]
fn a_repeated_nvtx_range_is_named_with_the_flag_to_pass() {
    let mut s = KernelStream::new();
    for _ in 0..20 {
        let start = s.host_now();
        s.kernel(TOKEN[0], 40_000, 3_000);
        s.kernels(&TOKEN[1..]);
        s.range("decode_step", start);
    }
    let mut t = s.finish();
    let a = analyze(&t);
    let screen = analysis_summary(&a, None);
    assert!(
        screen.contains(
            "Step range: the host range `decode_step` repeats around device work (20 ranges): pass `--step-range decode_step` to make each one a step"
        ),
        "{screen}"
    );
    // Found from the kernels meanwhile, with the steps the ranges would give.
    let found = found_cells(&a);
    assert_eq!(found[0].steps.len(), 20);
    // With the flag, the ranges are the steps and nothing is looked for.
    assert_eq!(t.mark_steps("decode_step"), 20);
    let marked = analyze(&t);
    assert!(found_cells(&marked).is_empty());
    assert_eq!(marked.inputs[0].steps.source, StepSource::Markers);
    assert_eq!(marked.cells[0].steps.len(), 20);
    let (p_found, p_marked) = (
        found[0].period.as_ref().unwrap().median,
        marked.cells[0].period.as_ref().unwrap().median,
    );
    assert!((p_found - p_marked).abs() < 0.01 * p_marked);
}

/// A torch.profiler (Kineto) Chrome trace of a trace's kernels and launch calls, with
/// `ProfilerStep#0` around all of it when `one_step`.
fn kineto_json(t: &Trace, one_step: bool) -> String {
    let us = |ns: u64| format!("{}.{:03}", ns / 1000, ns % 1000);
    let mut events = Vec::new();
    for k in &t.kernels {
        events.push(format!(
            r#"{{"ph":"X","cat":"kernel","name":"{}","pid":0,"tid":7,"ts":{},"dur":{},"args":{{"device":0,"stream":7,"correlation":{}}}}}"#,
            t.str(k.name),
            us(k.start),
            us(k.end - k.start),
            k.corr
        ));
    }
    for c in &t.api_calls {
        events.push(format!(
            r#"{{"ph":"X","cat":"cuda_runtime","name":"{}","pid":42,"tid":42,"ts":{},"dur":{},"args":{{"correlation":{}}}}}"#,
            t.str(c.name),
            us(c.start),
            us(c.end - c.start),
            c.corr
        ));
    }
    if one_step {
        let end = t.kernels.iter().map(|k| k.end).max().unwrap_or(0);
        events.push(format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#0","pid":42,"tid":42,"ts":{},"dur":{}}}"#,
            us(500_000),
            us(end)
        ));
    }
    format!(
        r#"{{"schemaVersion":1,"traceEvents":[{}]}}"#,
        events.join(",\n")
    )
}

fn import(json: &str) -> Trace {
    gapscope::trace::kineto::import_kineto(json.as_bytes(), "t.pt.trace.json".as_ref()).unwrap()
}

#[test]
fn a_kineto_import_without_profiler_step_finds_the_eager_and_graphed_cells() {
    let recorded = native_trace();
    let native = analyze(&recorded);
    let t = import(&kineto_json(&recorded, false));
    assert!(t.markers.is_empty());
    let a = analyze(&t);
    let found = found_cells(&a);
    assert_eq!(found.len(), 1);
    let f = found[0].found.as_ref().unwrap();
    assert_eq!((f.unit_ops, f.steps, f.off_unit_steps), (9, 30, 3));
    // The same cells and periods as the trace it came from.
    assert_eq!(a.cells.len(), native.cells.len());
    for (k, n) in a.cells.iter().zip(&native.cells) {
        assert_eq!(k.steps.len(), n.steps.len(), "{}", k.label);
        let (kp, np) = (k.period.unwrap().median, n.period.unwrap().median);
        assert!((kp - np).abs() <= 2.0, "{}: {kp} vs {np}", k.label);
    }
    assert_eq!(
        a.regime_pairs[0].pairing.as_ref().map(|p| p.basis),
        Some(PairBasis::KernelSequence)
    );
}

/// 30 decode steps with a bookkeeping kernel every 10th, then 30 replays of a graph of them.
fn native_trace() -> Trace {
    let mut s = KernelStream::new();
    decode(&mut s, 30, Some(10));
    for _ in 0..30 {
        s.replay(5, &TOKEN, 20_000);
    }
    s.finish()
}

#[test]
fn one_profiler_step_around_a_whole_generate_call_holds_the_steps_found() {
    let mut s = KernelStream::new();
    decode(&mut s, 40, None);
    let t = import(&kineto_json(&s.finish(), true));
    assert_eq!(t.markers.len(), 1);
    let a = analyze(&t);
    let found = found_cells(&a);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].steps.len(), 40);
    let f = found[0].found.as_ref().unwrap();
    assert_eq!(f.inside_marker.as_deref(), Some("ProfilerStep#0"));
    let screen = analysis_summary(&a, None);
    assert!(
        screen.contains(
            "Steps found from the kernel sequence (inside the one step marker `ProfilerStep#0`): E1 unit of 9 ops, 40 steps"
        ),
        "{screen}"
    );
}

/// A library's own NVTX ranges (CUB's `cub::DeviceScan::InclusiveScan`, seen in a transformers
/// `generate()` recording on an H200) repeat around device work too, but are never a step: they
/// are not proposed as the range to pass.
#[test]
fn a_librarys_qualified_range_is_not_proposed_as_the_step_range() {
    let mut s = KernelStream::new();
    for _ in 0..20 {
        let start = s.host_now();
        s.kernel(TOKEN[0], 40_000, 3_000);
        s.kernels(&TOKEN[1..]);
        s.range("cub::DeviceScan::InclusiveScan", start);
    }
    let a = analyze(&s.finish());
    assert!(
        a.inputs[0].steps.step_range_hint.is_none(),
        "{:?}",
        a.inputs[0].steps.step_range_hint
    );
    assert!(!analysis_summary(&a, None).contains("Step range:"));
}

/// A burst of one kernel repeated (torch.compile's autotuning fills a buffer before each
/// benchmark) beside a decode loop is no loop of the program; alone, a kernel launched again and
/// again (a launch-rate benchmark) is the program's loop.
#[test]
fn a_one_kernel_burst_beside_a_decode_loop_is_left_over_but_alone_it_is_the_loop() {
    let mut s = KernelStream::new();
    decode(&mut s, 40, None);
    for _ in 0..300 {
        s.kernel("fill", 2_000, 1_000);
    }
    let a = analyze(&s.finish());
    assert_eq!(found_cells(&a).len(), 1, "{:?}", labels(&a));
    assert_eq!(found_cells(&a)[0].found.as_ref().unwrap().unit_ops, 9);
    assert_eq!(
        a.inputs[0].steps.left_over, 300,
        "the fills are counted as left over"
    );

    let mut s = KernelStream::new();
    for _ in 0..300 {
        s.kernel("empty", 2_000, 1_000);
    }
    let a = analyze(&s.finish());
    let cells = found_cells(&a);
    assert_eq!(cells.len(), 1, "{:?}", labels(&a));
    assert_eq!(
        (
            cells[0].found.as_ref().unwrap().unit_ops,
            cells[0].steps.len()
        ),
        (1, 300)
    );
}

/// torch.compile's autotuning times a kernel after flushing L2 (`cache.zero_()` on an int
/// buffer) again and again: beside a decode loop, that pair is no loop of the program (on an
/// H100 recording of transformers' generate(), two such bursts of 406 pairs headed the
/// screen as "eager loop E2"). A pair of other kernels is a loop.
#[test]
fn an_autotuning_benchmark_beside_a_decode_loop_is_left_over() {
    let flush = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)";
    let with_pairs = |first: &str| {
        let mut s = KernelStream::new();
        decode(&mut s, 40, None);
        for _ in 0..300 {
            s.kernel(first, 2_000, 1_000);
            s.kernel("triton_poi_fused_attention_0", 2_000, 1_000);
        }
        analyze(&s.finish())
    };
    let a = with_pairs(flush);
    assert_eq!(found_cells(&a).len(), 1, "{:?}", labels(&a));
    assert_eq!(found_cells(&a)[0].found.as_ref().unwrap().unit_ops, 9);
    assert_eq!(
        a.inputs[0].steps.left_over, 600,
        "the benchmark's ops are left over"
    );

    let a = with_pairs("copy_inputs");
    assert_eq!(found_cells(&a).len(), 2, "{:?}", labels(&a));
}
