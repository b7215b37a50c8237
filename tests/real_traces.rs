//! The H200 recordings in traces/ as fixtures: what the recorder captured and what the
//! analysis makes of it.

mod common;
use gapscope::analysis::remedy::RemedyKind;
use gapscope::analysis::stats::Change;
use gapscope::analysis::{
    self, Analysis, AnalysisOptions, CauseKind, CellAnalysis, PeriodPart, Regime,
};
use gapscope::trace;
use std::path::Path;

fn load(name: &str) -> (trace::Trace, Analysis) {
    let t = read(name);
    let a = analysis::analyze(
        std::slice::from_ref(&t),
        &[name.to_owned()],
        &AnalysisOptions::default(),
    );
    (t, a)
}

fn cell<'a>(a: &'a Analysis, label: &str) -> &'a CellAnalysis {
    a.cells
        .iter()
        .find(|c| c.label == label)
        .unwrap_or_else(|| panic!("no cell {label}"))
}

#[test]
fn emu_replays_carry_graph_and_node_ids_and_the_dag_shows_mode_2_nodes() {
    let (t, a) = load("emu-h200.json");
    assert_eq!(t.metadata.device.as_ref().unwrap().name, "NVIDIA H200");
    assert_eq!(t.dropped_records, 0);
    for label in ["graphed mode=2 emu replay", "graphed mode=1 emu replay"] {
        let c = cell(&a, label);
        assert_eq!(c.observed.regime, Some(Regime::Graphed));
        // 100 replays, 4 kernels each, every one with a graph id and a node id.
        assert_eq!(c.steps.len(), 100, "{label}");
        for s in &c.steps {
            assert_eq!(s.ops.len(), 4);
            for &o in &s.ops {
                let op = &a.timelines[0].ops[o];
                assert!(op.graph != 0 && op.node != 0);
            }
        }
    }
    let m2 = cell(&a, "graphed mode=2 emu replay");
    assert_eq!(
        (
            m2.observed.external_wait_nodes,
            m2.observed.external_record_nodes
        ),
        (1, 1)
    );
    assert_eq!(
        m2.observed.graph_usage_mode.as_deref(),
        Some("2 (2 external event nodes, from NCCL)")
    );
    let m1 = cell(&a, "graphed mode=1 emu replay");
    assert_eq!(
        (
            m1.observed.external_wait_nodes,
            m1.observed.external_record_nodes
        ),
        (0, 0)
    );
    assert!(m1.mismatches.is_empty() && m2.mismatches.is_empty());
}

#[test]
fn emu_pre_collective_gap_is_named_by_node_and_matches_globaltimer_excess() {
    let (_, a) = load("emu-h200.json");
    let m2 = cell(&a, "graphed mode=2 emu replay");
    let m1 = cell(&a, "graphed mode=1 emu replay");
    let (_, coll2) = m2.collective().expect("collective found by library call");
    let (_, coll1) = m1.collective().unwrap();
    assert_eq!(
        coll2.library_call.as_deref(),
        Some("ncclAllGather (emulated)")
    );
    assert_eq!(coll2.gap_cause, CauseKind::ExternalEventWait);
    assert!(
        coll2
            .gap_cause_label
            .contains("cuStreamWaitEvent inside ncclAllGather (emulated)")
    );
    assert!(coll2.gap_cause_label.contains("event-record node 0x"));
    assert_ne!(coll1.gap_cause, CauseKind::ExternalEventWait);
    // The %globaltimer gap includes kernel prologue/epilogue that CUPTI counts as kernel time,
    // a constant offset: compare what mode 2 adds over mode 1.
    let ours = (coll2.gap_before.median - coll1.gap_before.median) / 1e3;
    let key = "globaltimer_gap_before_coll_us";
    let theirs = m2.reference[key] - m1.reference[key];
    assert!(theirs > 0.3, "globaltimer excess {theirs}");
    assert!(
        (ours - theirs).abs() <= 0.2 * theirs,
        "gapscope {ours:.2} µs vs globaltimer {theirs:.2} µs"
    );
}

#[test]
fn ht_decode_fresh_graphs_mode_2_cost_is_the_external_wait() {
    let (_, a) = load("ht-decode-h200.json");
    assert_eq!(a.mode_pairs.len(), 6);
    let pair = a
        .mode_pairs
        .iter()
        .find(|p| a.cells[p.head].label == "graphed mode=2 T=512 fresh")
        .unwrap();
    assert_eq!(pair.change, Some(Change::Slower));
    // The two graphs differ only by NCCL's mode-2 nodes.
    assert_eq!(
        pair.graph_difference.as_deref(),
        Some("+1 EventRecord (external), +1 EventWait (external)")
    );
    let external: f64 = pair
        .gap_growth_by_cause
        .iter()
        .filter(|g| g.0 == CauseKind::ExternalEventWait)
        .map(|g| g.2)
        .sum();
    assert!(
        external >= 0.9 * pair.period_delta.unwrap(),
        "{external} of {:?}",
        pair.period_delta
    );
    // Kernel durations: the same kernels in both regimes, within 0.5 µs (graph replays
    // measure small kernels ~0.1–0.3 µs longer under CUPTI; the report prints each).
    for p in &a.regime_pairs {
        for op in p
            .aligned
            .iter()
            .filter(|o| o.base.is_some() && o.head.is_some())
        {
            let d = op.duration_delta.unwrap();
            assert!(d.abs() < 500.0, "{}: {} {d} ns", p.head_label, op.name);
        }
    }
}

#[test]
fn dropped_records_are_reported() {
    let (t, a) = load("emu-h200-tiny-buffer.json");
    assert!(t.dropped_records > 1000);
    let md = gapscope::report::markdown::analysis_markdown(&a);
    assert!(
        md.contains(&format!("{} CUPTI records dropped", t.dropped_records)),
        "{md}"
    );
}

/// Per regime, position by position, the kernel duration medians of two recordings of the
/// same script agree within 6 % (or 100 ns for the shortest kernels); with `same_names`, the
/// kernel names are equal too (not between CUPTI and Kineto: torch's demangler writes
/// `std::array<char*, 2ul>` where cpp_demangle writes `(unsigned long)2`).
fn per_kernel_durations_agree(a: &Analysis, b: &Analysis, names: (&str, &str), same_names: bool) {
    let (a_name, b_name) = names;
    for regime in [Regime::Eager, Regime::Graphed] {
        let of = |a: &Analysis| {
            a.cells
                .iter()
                .find(|c| c.observed.regime == Some(regime))
                .unwrap()
                .sequence
                .clone()
        };
        let (ks, cs) = (of(a), of(b));
        assert_eq!(ks.len(), cs.len(), "{regime:?}");
        for (ke, ce) in ks.iter().zip(&cs) {
            if same_names {
                assert_eq!(ke.name, ce.name, "{regime:?}: {a_name} vs {b_name}");
            }
            let (kd, cd) = (ke.duration.median, ce.duration.median);
            assert!(
                (kd - cd).abs() <= (0.06 * cd).max(100.0),
                "{regime:?} {}: {a_name} {kd} ns, {b_name} {cd} ns",
                ke.name
            );
        }
    }
}

#[test]
fn torch_step_kineto_and_injected_recordings_agree_per_kernel() {
    // The same script, once under `gapscope record` and once under torch.profiler (two runs
    // on the H200): per regime, position by position, the kernel duration medians agree.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let mut kineto =
        gapscope::trace::read_kineto(&dir.join("torch-step-kineto-h200.json")).unwrap();
    assert_eq!(kineto.mark_steps("step"), 60);
    let cupti = trace::read_trace(&dir.join("torch-step-h200.json")).unwrap();
    let opts = AnalysisOptions::default();
    let k = analysis::analyze(std::slice::from_ref(&kineto), &["k".into()], &opts);
    let c = analysis::analyze(std::slice::from_ref(&cupti), &["c".into()], &opts);
    per_kernel_durations_agree(&k, &c, ("kineto", "cupti"), false);
    // Kineto has no DAG: graphed steps are recognised from cudaGraphLaunch, causes stay open.
    let graphed = k
        .cells
        .iter()
        .find(|c| c.observed.regime == Some(Regime::Graphed))
        .unwrap();
    assert_eq!(
        graphed.observed.graph_usage_mode.as_deref(),
        Some("unknown (no graph DAG in the trace)")
    );
}

#[test]
fn torch_writes_json_gz_and_it_imports_as_the_plain_export() {
    // A third run of the script on the H200, exported by torch to .json.gz.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let load = |file: &str| {
        let mut t = gapscope::trace::read_kineto(&dir.join(file)).unwrap();
        assert_eq!(t.mark_steps("step"), 60, "{file}");
        t
    };
    let gz = load("torch-step-kineto-h200.json.gz");
    let plain = load("torch-step-kineto-h200.json");
    assert_eq!(
        gz.metadata.device.as_ref().map(|d| d.name.as_str()),
        Some("NVIDIA H200")
    );
    assert_eq!(gz.kernels.len(), plain.kernels.len());
    let opts = AnalysisOptions::default();
    let a = analysis::analyze(std::slice::from_ref(&gz), &["gz".into()], &opts);
    let b = analysis::analyze(std::slice::from_ref(&plain), &["json".into()], &opts);
    per_kernel_durations_agree(&a, &b, (".json.gz", ".json"), true);
}

#[test]
fn injected_recordings_name_their_device() {
    // `gapscope record --step-range step -- python3 torch_step.py --steps 50` on the H200.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/torch-step-record-h200.json");
    let t = trace::read_trace(&path).unwrap();
    let device = t.metadata.device.as_ref().expect("a device");
    assert_eq!(
        (
            device.name.as_str(),
            device.index,
            device.compute_capability.as_str()
        ),
        ("NVIDIA H200", 0, "9.0")
    );
    let a = analysis::analyze(
        std::slice::from_ref(&t),
        &["rec".into()],
        &AnalysisOptions::default(),
    );
    assert_eq!(a.inputs[0].device.as_deref(), Some("NVIDIA H200"));
    let steps: Vec<usize> = a.cells.iter().map(|c| c.steps.len()).collect();
    assert_eq!(steps, [50, 50]);
}

/// `gapscope record --trace-budget 16 --step-range decode_step -- python examples/torch_graphs.py
/// --eager-steps 40 --replays 40 --fresh 8` on an H200 (2026-11-30): the recorder traced the first
/// 16 of each repeated thing and paused CUPTI for the rest.
#[test]
fn a_trace_budget_keeps_the_first_steps_of_each_cell_and_says_what_it_left_out() {
    let (t, a) = load("torch-graphs-budget-h200.json");
    assert_eq!(t.dropped_records, 0);
    let steps: Vec<(&str, usize)> = a
        .cells
        .iter()
        .map(|c| (c.label.as_str(), c.steps.len()))
        .collect();
    // 16 of 40 eager steps and 16 of 40 launches of each replayed graph; every fresh graph's
    // one launch (8 per variant), since each is a new executable graph.
    let expect = [
        16, // eager
        16, // graph G1 replays
        8,  // G1 first launches
        16, // graph G2 replays (external event nodes)
        8,  // G2 first launches
    ];
    assert_eq!(
        steps.iter().map(|s| s.1).collect::<Vec<_>>(),
        expect,
        "{steps:?}"
    );
    assert!(steps[1].0.starts_with("graph G1 replays"), "{steps:?}");
    // Step ranges left untraced make no empty steps: each of the 16 holds kernels.
    assert!(a.cells[0].steps.iter().all(|s| !s.ops.is_empty()));
    let notes = t.metadata.notes.join("\n");
    for needle in [
        "graph exec 2: 16 of 40 launches",
        "graph exec 29: 16 of 40 launches",
        "16 of 40 `decode_step` steps traced",
        "tracing paused 3 time(s)",
    ] {
        assert!(notes.contains(needle), "{needle} not in {notes}");
    }
    // Untraced launches leave no API records either: 16 + 8 launches of each variant remain.
    let graph_launches = t
        .api_calls
        .iter()
        .filter(|c| t.str(c.name).starts_with("cudaGraphLaunch"))
        .count();
    assert_eq!(graph_launches, 2 * (16 + 8));
}

/// The same trace with the budget's record as the recorder now writes it (`metadata.sampling`):
/// each cell says how much of its work was traced, on screen and in the report.
#[test]
fn cells_of_a_budgeted_trace_say_how_much_of_their_work_was_traced() {
    let (mut t, _) = load("torch-graphs-budget-h200.json");
    assert_eq!(
        t.metadata.sampling, None,
        "recorded before the field existed"
    );
    let graph = |exec| trace::SampledGraph {
        exec,
        launches: 40,
        traced: 16,
        launch_periods: None,
    };
    t.metadata.sampling = Some(trace::Sampling {
        budget: 16,
        graphs: vec![graph(2), graph(29)],
        steps: 40,
        steps_traced: 16,
        resumed_at: Vec::new(),
        markers: None,
        measured_per_pause: 0,
        paced_pauses: 0,
    });
    let a = analysis::analyze(
        std::slice::from_ref(&t),
        &["budget".into()],
        &AnalysisOptions::default(),
    );
    let described: Vec<Option<String>> = a
        .cells
        .iter()
        .map(|c| c.sampled.map(|s| s.describe()))
        .collect();
    let replays = Some("16 of 40 launches traced".to_owned());
    assert_eq!(
        described,
        [
            Some("16 of 40 steps traced".to_owned()),
            replays.clone(),
            None, // first launches: each a new graph, all traced
            replays,
            None,
        ]
    );
    let screen = gapscope::report::summary::analysis_summary(&a, None);
    assert!(
        screen.contains("n=15 (16 of 40 launches traced)"),
        "{screen}"
    );
    let md = gapscope::report::markdown::analysis_markdown(&a);
    assert!(md.contains("> Trace budget: "), "{md}");
    // The field round-trips through the trace file, and is absent when there is none.
    let json = serde_json::to_string(&t).unwrap();
    let back: trace::Trace = serde_json::from_str(&json).unwrap();
    assert_eq!(back.metadata.sampling, t.metadata.sampling);
    t.metadata.sampling = None;
    assert!(!serde_json::to_string(&t).unwrap().contains("sampling"));
}

/// The same trace with the launch periods the recorder now keeps per graph (traced and
/// untraced launches of one run): each replay cell states what tracing added to it, and a mode 2
/// vs mode 1 difference smaller than that is not presented as a finding.
#[test]
fn graph_replay_cells_state_what_tracing_added_and_the_mode_difference_is_weighed_against_it() {
    let (mut t, _) = load("torch-graphs-budget-h200.json");
    let periods = |traced_ns: u64, untraced_ns: u64| {
        let (mut on, mut off) = (
            trace::DurationHistogram::default(),
            trace::DurationHistogram::default(),
        );
        (0..15).for_each(|i| on.add(traced_ns + i * 100));
        (0..23).for_each(|i| off.add(untraced_ns + i * 100));
        trace::LaunchPeriods {
            traced: on.summary("traced"),
            untraced: off.summary("untraced"),
        }
    };
    let graph = |exec, p| trace::SampledGraph {
        exec,
        launches: 40,
        traced: 16,
        launch_periods: Some(p),
    };
    t.metadata.sampling = Some(trace::Sampling {
        budget: 16,
        graphs: vec![
            graph(2, periods(38_000, 25_000)),
            graph(29, periods(41_000, 27_000)),
        ],
        steps: 40,
        steps_traced: 16,
        ..Default::default()
    });
    let a = analysis::analyze(
        std::slice::from_ref(&t),
        &["budget".into()],
        &AnalysisOptions::default(),
    );
    let ratio = |i: usize| a.cells[i].tracer_share.as_ref().map(|s| s.ratio);
    // Histogram medians: within 1/32 of each side's true median.
    for (i, want) in [(1, 38.7 / 26.1), (3, 41.7 / 28.1)] {
        let got = ratio(i).unwrap_or_else(|| panic!("cell {i}: {}", a.cells[i].label));
        assert!(
            (got - want).abs() < want / 15.0,
            "cell {i}: {got} vs {want}"
        );
    }
    assert_eq!(
        (ratio(2), ratio(4)),
        (None, None),
        "first launches: every one traced"
    );
    let pair = a.mode_pairs.first().expect("a mode 2 vs mode 1 pair");
    assert!(
        pair.period_delta.expect("a delta").abs() < 13_000.0,
        "{pair:?}"
    );
    assert_eq!(pair.within_tracer_effect, Some(true));
    let untraced = pair
        .untraced_period_delta
        .expect("both cells measured untraced");
    assert!((untraced - 2_000.0).abs() < 300.0, "{untraced}");
    let screen = gapscope::report::summary::analysis_summary(&a, None);
    assert!(
        screen.contains(&format!(
            "tracing ×{:.2} on the host step",
            ratio(1).unwrap()
        )),
        "{screen}"
    );
    assert!(
        screen.contains(
            "within what tracing adds to a step: not a finding (between untraced steps: Δ +"
        ),
        "{screen}"
    );
    // What a report says without the periods (traces recorded before they were kept).
    for g in &mut t.metadata.sampling.as_mut().unwrap().graphs {
        g.launch_periods = None;
    }
    let a = analysis::analyze(
        std::slice::from_ref(&t),
        &["budget".into()],
        &AnalysisOptions::default(),
    );
    assert!(a.cells[1..].iter().all(|c| c.tracer_share.is_none()));
}

/// A trace whose `metadata.sampling` the recorder wrote itself (H200, budget 64, 200 eager
/// steps and 200 replays of each of two graphs): the record, the cells' counts and what each
/// cell says it holds.
#[test]
fn the_recorders_own_sampling_record_reaches_every_cell() {
    let (t, a) = load("torch-graphs-sampling-h200.json");
    assert_eq!(t.dropped_records, 0);
    let sampling = t
        .metadata
        .sampling
        .as_ref()
        .expect("written by the recorder");
    assert_eq!(
        (sampling.budget, sampling.steps, sampling.steps_traced),
        (64, 200, 64)
    );
    let graphs: Vec<(u32, u64, u64)> = sampling
        .graphs
        .iter()
        .map(|g| (g.exec, g.launches, g.traced))
        .collect();
    assert_eq!(graphs, [(2, 200, 64), (125, 200, 64)]);
    let cells: Vec<(usize, Option<String>)> = a
        .cells
        .iter()
        .map(|c| (c.steps.len(), c.sampled.map(|s| s.describe())))
        .collect();
    let replays = Some("64 of 200 launches traced".to_owned());
    assert_eq!(
        cells,
        [
            (64, Some("64 of 200 steps traced".to_owned())),
            (64, replays.clone()),
            (40, None), // each first launch is a new graph: all traced
            (64, replays),
            (40, None),
        ],
        "{:?}",
        a.cells.iter().map(|c| &c.label).collect::<Vec<_>>()
    );
    // The recorder labels its cell with the command line; the report names the steps and the
    // script instead.
    assert_eq!(a.cells[0].label, "`decode_step` steps (torch_graphs.py)");
    assert!(a.cells[1].label.starts_with("graph G1 replays (exec 2"));
    assert!(a.cells[3].label.starts_with("graph G2 replays (exec 125"));
}

/// Replays whose launch is host-bound carry a note that attaching CUPTI lengthens each launch
/// with the graph's node count, without quoting another host's per-node figures; traces made
/// by the runner (no graph groups) do not.
#[test]
fn host_bound_graph_cells_say_that_cupti_adds_to_each_launch() {
    let (_, a) = load("torch-graphs-budget-h200.json");
    let md = gapscope::report::markdown::analysis_markdown(&a);
    // One note per group of cells (first launches, replays).
    let note = md
        .lines()
        .filter(|l| l.starts_with("> Graph launches under CUPTI"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        note.contains("graph G1 replays (exec 2, 6 ops): 6 nodes, host-bound launch gaps of "),
        "{note}"
    );
    // Per-node costs are measured in benches/README.md, not quoted from another host.
    assert!(
        !note.contains("µs per node") && !note.contains("H200"),
        "{note}"
    );
    // G2 holds the external event record and wait nodes besides its 6 ops.
    assert!(
        note.contains("graph G2 replays (exec 29, 6 ops): 8 nodes"),
        "{note}"
    );
    let (_, runner) = load("emu-h200-tiny-buffer.json");
    let md = gapscope::report::markdown::analysis_markdown(&runner);
    assert!(!md.contains("Graph launches under CUPTI"), "{md}");
}

/// `gapscope record --step-range decode_step -- python examples/torch_graphs.py --eager-steps
/// 100 --replays 100 --fresh 20` on the H200 (one GPU, world size 1, torch 2.11, NCCL 2.28.9):
/// eager steps in NVTX ranges; graphs replayed and freshly captured outside them, plain and
/// with an external event record + wait before the all-gather.
#[test]
fn torch_graphs_launched_outside_nvtx_ranges_form_cells_by_what_the_graph_is() {
    let (t, a) = load("torch-graphs-record-h200.json");
    let labels: Vec<&str> = a.cells.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels.len(), 5, "{labels:?}");
    assert_eq!(a.cells[0].observed.regime, Some(Regime::Eager));
    assert_eq!(a.cells[0].steps.len(), 100);
    let expect = [
        ("graph G1 replays (exec 2, 6 ops)", 100, 0),
        (
            "graph G1 first launches (20 executable graphs, 6 ops)",
            20,
            0,
        ),
        ("graph G2 replays (exec 65, 6 ops)", 100, 1),
        (
            "graph G2 first launches (20 executable graphs, 6 ops)",
            20,
            1,
        ),
    ];
    for (label, steps, waits) in expect {
        let c = cell(&a, label);
        assert_eq!(c.observed.regime, Some(Regime::Graphed), "{label}");
        assert_eq!(c.steps.len(), steps, "{label}");
        assert_eq!(c.observed.external_wait_nodes, waits, "{label}");
    }
    // Fresh graphs: every step is a first launch; replays: only the first.
    let fresh = cell(&a, expect[1].0);
    assert!(fresh.steps.iter().all(|s| s.first_launch));
    let replays = cell(&a, expect[0].0);
    assert_eq!(replays.steps.iter().filter(|s| s.first_launch).count(), 1);
    // Every graphed cell pairs with the eager cell; each external-event graph is compared with
    // the plain one of the same launch pattern, and the difference is the external nodes.
    assert_eq!(a.regime_pairs.len(), 4);
    assert!(a.regime_pairs.iter().all(|p| p.base == 0));
    assert_eq!(a.mode_pairs.len(), 2);
    for p in &a.mode_pairs {
        assert_eq!(
            p.graph_difference.as_deref(),
            Some("+1 EventRecord (external), +1 EventWait (external)")
        );
        assert!(p.gap_growth_by_cause.iter().any(|g| {
            g.0 == CauseKind::ExternalEventWait
                && g.1.contains("(cudaStreamWaitEvent)")
                && g.2 > 500.0
        }));
    }
    // NCCL's one-rank all-gather is a copy node; the NVTX range NCCL opened around it tags it.
    let nccl_nodes: Vec<_> = t
        .graph
        .nodes
        .iter()
        .filter(|n| n.library_call.is_some_and(|l| t.str(l) == "ncclAllGather"))
        .collect();
    assert_eq!(nccl_nodes.len(), 84);
    assert!(
        nccl_nodes
            .iter()
            .all(|n| n.node_type == trace::NodeType::Memcpy)
    );
    // The eager all-gather's copy belongs to ncclAllGather too.
    assert_eq!(
        a.cells[0].collective().map(|(_, e)| e.name.as_str()),
        Some("DtoD")
    );
    // Device and driver are read when CUDA creates its context, not at exit.
    assert_eq!(
        t.metadata.device.as_ref().map(|d| d.name.as_str()),
        Some("NVIDIA H200")
    );
    assert_eq!(
        t.metadata.versions.driver.as_deref(),
        Some("CUDA 13.0 driver API")
    );
}

/// The same program under torch.profiler (`--eager-steps 50 --replays 50 --fresh 10 --profile
/// --profile-out …`): Kineto records no graph ids on CUDA 13 and no DAG, so the 120 graph
/// launches (replays and first launches of both graphs, same kernels) are one cell, found from
/// their `cudaGraphLaunch`. No `ProfilerStep` marks the 50 eager steps: they are found in the
/// kernel sequence, every one of them, and the two fill kernels torch launches before each of
/// the 22 captures are the graphs' work, not a loop of eager steps.
#[test]
fn torch_graphs_kineto_graph_launches_are_found_without_step_markers() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/torch-graphs-kineto-h200.json.gz");
    let t = gapscope::trace::read_kineto(&path).unwrap();
    let a = analysis::analyze(
        std::slice::from_ref(&t),
        &["kineto".into()],
        &AnalysisOptions::default(),
    );
    let labels: Vec<&str> = a.cells.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "eager loop E1 (steps of 6 ops found in the kernel sequence)",
            "graph G1 launches (graph ids not recorded, 6 ops)"
        ]
    );
    let (eager, graphed) = (&a.cells[0], &a.cells[1]);
    assert_eq!(graphed.observed.regime, Some(Regime::Graphed));
    assert_eq!(graphed.steps.len(), 120);
    assert_eq!(eager.observed.regime, Some(Regime::Eager));
    assert_eq!(eager.steps.len(), 50);
    let found = &a.inputs[0].steps;
    assert_eq!((found.left_over, found.beside_graphs), (0, 44));
    // Phased as the graph is: both start at the first GEMM, and every op aligns.
    assert_eq!(eager.sequence[0].name, graphed.sequence[0].name);
    let pair = &a.regime_pairs[0];
    assert_eq!((pair.base, pair.head), (0, 1));
    assert!(
        pair.aligned
            .iter()
            .all(|o| o.base.is_some() && o.head.is_some())
    );
}

/// Both ranks' traces of one NCCL_GRAPH_MIXING_SUPPORT setting under `folder`, with names.
fn two_ranks(folder: &str, mixing: u32) -> (Vec<trace::Trace>, Vec<String>) {
    let traces = (0..2)
        .map(|r| read(&format!("{folder}/mixing-{mixing}/trace-{r}.json")))
        .collect();
    (traces, vec!["r0".into(), "r1".into()])
}

/// A gapscope trace in traces/ (never a Kineto import).
fn read(rel: &str) -> trace::Trace {
    trace::read_trace(&bundled_path(rel)).unwrap()
}

fn bundled_path(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces")
        .join(rel)
}

fn analyze_one(t: &trace::Trace) -> Analysis {
    analysis::analyze(
        std::slice::from_ref(t),
        &["t".into()],
        &AnalysisOptions::default(),
    )
}

/// `gapscope record --step-range decode_step -- torchrun --nproc-per-node 2
/// examples/torch_graphs.py --eager-steps 60 --replays 100 --fresh 20` on 2 H200s (torch
/// 2.11, NCCL 2.28.9), with `NCCL_GRAPH_MIXING_SUPPORT=1` and `=0`: with mixing, NCCL's own
/// external event-wait node (made by `cudaStreamWaitEvent` inside `ncclAllGather`) sits in
/// every graph on both ranks, without it none; comparing the two trace sets attributes the
/// gap growth before the all-gather to that node.
#[test]
fn two_rank_torch_recordings_show_ncclallgathers_own_event_nodes_with_mixing_only() {
    for rank in 0..2 {
        for (mixing, waits) in [(1, 1), (0, 0)] {
            let t = read(&format!(
                "torch-graphs-2rank-h200/mixing-{mixing}/trace-{rank}.json"
            ));
            assert_eq!((t.metadata.rank, t.metadata.world), (rank, 2));
            let a = analyze_one(&t);
            let graphed: Vec<&CellAnalysis> = a
                .cells
                .iter()
                .filter(|c| c.observed.regime == Some(Regime::Graphed))
                .collect();
            assert_eq!(
                graphed.len(),
                2,
                "rank {rank} mixing {mixing}: replays + first launches"
            );
            for c in graphed {
                assert_eq!(c.observed.external_wait_nodes, waits, "{}", c.label);
                let mode = c.observed.graph_usage_mode.as_deref().unwrap();
                assert_eq!(mode.starts_with('2'), mixing == 1, "{mode}");
            }
            let nccl_waits = t
                .graph
                .nodes
                .iter()
                .filter(|n| {
                    n.node_type == trace::NodeType::EventWait
                        && n.external
                        && n.library_call.is_some_and(|l| t.str(l) == "ncclAllGather")
                        && n.created_by
                            .is_some_and(|c| t.str(c) == "cudaStreamWaitEvent")
                })
                .count();
            assert_eq!(nccl_waits > 0, mixing == 1, "rank {rank} mixing {mixing}");
        }
    }
    let c = mixing_comparison_naming_nccls_event_wait("torch-graphs-2rank-h200");
    let replays: Vec<_> = c
        .cells
        .iter()
        .filter(|m| m.head_label.starts_with("graph G1 replays"))
        .collect();
    assert_eq!(replays.len(), 2, "one replay cell per rank");
    for m in replays {
        assert_eq!(
            m.graph_difference.as_deref(),
            Some("+1 EventRecord (external), +1 EventWait (external)")
        );
        let wait = m
            .gap_growth_by_cause
            .iter()
            .find(|g| g.0 == CauseKind::ExternalEventWait)
            .expect("the external wait's gap");
        assert!(wait.1.contains("NCCL graph usage mode 2"), "{}", wait.1);
    }
}

/// `compare` of a folder's mixing-0 (base) and mixing-1 (head) two-rank recordings, after
/// checking that every graph G1 cell's growth includes NCCL's event-wait node (> 0.5 µs a step).
fn mixing_comparison_naming_nccls_event_wait(folder: &str) -> analysis::Comparison {
    let (base, bn) = two_ranks(folder, 0);
    let (head, hn) = two_ranks(folder, 1);
    let opts = AnalysisOptions::default();
    let c = analysis::compare::compare(
        analysis::analyze(&base, &bn, &opts),
        analysis::analyze(&head, &hn, &opts),
        1.02,
    );
    let graphed: Vec<_> = c
        .cells
        .iter()
        .filter(|m| m.head_label.starts_with("graph G1"))
        .collect();
    assert!(!graphed.is_empty());
    for m in graphed {
        let wait = m
            .gap_growth_by_cause
            .iter()
            .find(|g| g.0 == CauseKind::ExternalEventWait)
            .expect("the external wait's gap");
        assert!(
            wait.1.contains("cudaStreamWaitEvent inside ncclAllGather"),
            "{}",
            wait.1
        );
        assert!(wait.2 > 500.0, "{wait:?}");
    }
    c
}

/// The same program recorded by the build that pauses the API kinds and graph-building
/// callbacks after the budget and leaves SYNCHRONIZATION off (`benches/gpu_check.sh`: 100
/// eager steps, 100 replays, 10 fresh graphs; 2 x H200, torch 2.11, NCCL 2.28.9): every graph
/// is still seen with its creating calls, host synchronisations come from the API records, and
/// the comparison names NCCL's event-wait node.
#[test]
fn deep_pause_recordings_keep_nccls_nodes_and_read_syncs_from_api_records() {
    for mixing in [0, 1] {
        for t in two_ranks("torch-graphs-2rank-deep-pause-h200", mixing).0 {
            assert!(t.syncs.is_empty(), "SYNCHRONIZATION is off by default");
            let sync_calls = t
                .api_calls
                .iter()
                .filter(|c| t.str(c.name).contains("Synchronize"))
                .count();
            assert!(sync_calls > 0);
            let notes = t.metadata.notes.join("\n");
            assert!(notes.contains("SYNCHRONIZATION activity off"), "{notes}");
            let sampling = t.metadata.sampling.as_ref().expect("sampling");
            assert_eq!((sampling.steps, sampling.steps_traced), (100, 64));
            let a = analyze_one(&t);
            let steps: Vec<usize> = a.cells.iter().map(|c| c.steps.len()).collect();
            assert_eq!(steps, [64, 64, 10], "eager, replays, first launches");
            let external = t.graph.nodes.iter().filter(|n| n.external).count();
            // Template and executable clone of each of the 11 graphs: a wait and a record.
            assert_eq!(external, if mixing == 1 { 44 } else { 0 });
        }
    }
    let c = mixing_comparison_naming_nccls_event_wait("torch-graphs-2rank-deep-pause-h200");
    // Both ranks' cells are compared, each label saying whose it is. The head's rank 0 drew the
    // host's slower speed: its eager step grew in host-bound gaps, while rank 1's grew in the
    // all-gather kernel, which waited for rank 0.
    let eager = |rank: u32| {
        let label = format!("`decode_step` steps (torch_graphs.py) [rank {rank}]");
        c.cells
            .iter()
            .find(|m| m.head_label == label)
            .unwrap_or_else(|| panic!("no {label}"))
            .largest_change()
            .expect("a change")
    };
    let (slow_host, grew) = eager(0);
    assert!(
        matches!(slow_host, PeriodPart::Gap { cause, .. } if cause == "host launch-bound"),
        "{slow_host:?}"
    );
    assert!(grew > 150_000.0, "{grew}");
    let (waited, grew) = eager(1);
    match waited {
        PeriodPart::OpDurations { op, op_delta } => {
            assert!(op.starts_with("ncclDevKernel_AllGather"), "{op}");
            assert!(op_delta > 150_000.0, "{op_delta}");
        }
        other => panic!("{other:?}"),
    }
    assert!(grew > 150_000.0, "{grew}");
}

/// `NCCL_GRAPH_MIXING_SUPPORT={0,1} gapscope record --step-range decode_step -- torchrun
/// --nproc-per-node 2 examples/torch_graphs.py` on 2 x H200 with the default trace budget (64),
/// the program's defaults (200 eager steps, 200 replays, 40 fresh graphs): each rank traced 64
/// of each, and the comparison still names NCCL's event-wait node. One run's processes got the
/// host's slower speed, so the replays' period grew mostly in host-bound launch gaps: `compare`
/// fails and says so.
#[test]
fn budgeted_two_rank_recordings_keep_the_mode_2_attribution_and_flag_host_bound_growth() {
    for mixing in [0, 1] {
        for t in two_ranks("torch-graphs-2rank-budget-h200", mixing).0 {
            let notes = t.metadata.notes.join("\n");
            assert!(
                notes.contains("graph exec 2: 64 of 200 launches"),
                "{notes}"
            );
            assert!(
                notes.contains("64 of 200 `decode_step` steps traced"),
                "{notes}"
            );
            let steps: Vec<usize> = analyze_one(&t)
                .cells
                .iter()
                .map(|c| c.steps.len())
                .collect();
            assert_eq!(steps, [64, 64, 40], "eager, replays, first launches");
        }
    }
    let c = mixing_comparison_naming_nccls_event_wait("torch-graphs-2rank-budget-h200");
    assert!(
        !c.breached.is_empty(),
        "the slower host speed made HEAD slower"
    );
    let caution = gapscope::report::summary::comparison_summary(&c, None);
    assert!(
        caution.contains("Caution: most of the slowdown of"),
        "{caution}"
    );
}

/// `gapscope run --tokens 1 --launch replay,fresh --steps 30 --modes 1,2` on 2 H200s: real
/// NCCL 2.28.3 at R = 2, each mode in its own pair of rank processes. Mode 2's graphs hold
/// NCCL's external event-wait node, mode 1's none, and the mode comparison names it.
#[test]
fn two_rank_runner_sweep_names_nccls_event_wait_in_mode_2_only() {
    let mut traces = Vec::new();
    for mode in [1, 2] {
        for rank in 0..2 {
            let t = read(&format!("ht-decode-2rank-h200/mode{mode}-rank{rank}.json"));
            assert_eq!((t.metadata.rank, t.metadata.world), (rank, 2));
            assert_eq!(t.metadata.versions.nccl.as_deref(), Some("2.28.3"));
            assert!(
                t.metadata.notes[0].contains("R=2"),
                "{}",
                t.metadata.notes[0]
            );
            traces.push(t);
        }
    }
    let rank0 = [traces[0].clone(), traces[2].clone()];
    let a = analysis::analyze(
        &rank0,
        &["mode1".into(), "mode2".into()],
        &AnalysisOptions::default(),
    );
    let waits = |label: &str| cell(&a, label).observed.external_wait_nodes;
    assert_eq!(waits("graphed mode=1 T=1 replay"), 0);
    assert_eq!(waits("graphed mode=2 T=1 replay"), 1);
    assert_eq!(a.mode_pairs.len(), 2);
    for p in &a.mode_pairs {
        let (_, label, grew) = p
            .gap_growth_by_cause
            .iter()
            .find(|g| g.0 == CauseKind::ExternalEventWait)
            .expect("external wait gap");
        assert!(
            label.contains("cudaStreamWaitEvent inside ncclAllGather"),
            "{label}"
        );
        assert!(*grew > 500.0, "{grew}");
    }
}

/// `NCCL_LIB=…/libnccl.so.2 gapscope run --tokens 1,64 --steps 30` on 2 H200s with NCCL 2.32.3
/// (pip `nvidia-nccl-cu13`): every mode in one pair of rank processes, each communicator's mode
/// set through `ncclConfig_t.graphUsageMode`; only mode 2's graphs hold NCCL's event-wait node.
#[test]
fn nccl_2_32_sets_the_mode_per_communicator_in_one_process() {
    let t = read("ht-decode-2rank-h200/nccl-2.32.3-rank0.json");
    assert_eq!(t.metadata.versions.nccl.as_deref(), Some("2.32.3"));
    assert_eq!((t.metadata.rank, t.metadata.world), (0, 2));
    assert!(
        t.metadata.notes[0].contains("via ncclConfig_t.graphUsageMode"),
        "{}",
        t.metadata.notes[0]
    );
    let a = analyze_one(&t);
    for mode in 0..=2 {
        for launch in ["replay", "fresh"] {
            for tokens in [1, 64] {
                let c = cell(&a, &format!("graphed mode={mode} T={tokens} {launch}"));
                let waits = usize::from(mode == 2);
                assert_eq!(c.observed.external_wait_nodes, waits, "{}", c.label);
            }
        }
    }
    assert!(a.mode_pairs.iter().all(|p| {
        p.gap_growth_by_cause.iter().any(|g| {
            g.0 == CauseKind::ExternalEventWait
                && g.1.contains("cudaStreamWaitEvent inside ncclAllGather")
        })
    }));
}

/// Under the thinning budget a cell's traced replays come in windows: the first replay after a
/// resume gets no period and no gap reaching back over the untraced ones. Shown by cutting
/// replays 20–29 of exec 2 out of a recording (as a pause would) with and without the resume
/// time the recorder writes.
#[test]
fn a_resume_between_two_traced_steps_breaks_the_period_chain() {
    let (mut t, _) = load("torch-graphs-sampling-h200.json");
    let launches: Vec<u32> = {
        let mut corrs: Vec<(u64, u32)> = t
            .kernels
            .iter()
            .filter(|k| k.graph == 2)
            .map(|k| (k.start, k.corr))
            .collect();
        corrs.sort();
        let mut seen = std::collections::BTreeSet::new();
        corrs
            .into_iter()
            .filter(|c| seen.insert(c.1))
            .map(|c| c.1)
            .collect()
    };
    assert_eq!(launches.len(), 64);
    let cut: std::collections::BTreeSet<u32> = launches[20..30].iter().copied().collect();
    t.kernels.retain(|k| !cut.contains(&k.corr));
    t.memcpys.retain(|m| !cut.contains(&m.corr));
    t.memsets.retain(|m| !cut.contains(&m.corr));
    let resume = t
        .api_calls
        .iter()
        .find(|c| c.corr == launches[30])
        .expect("the launch after the cut")
        .start
        - 1;
    // Periods and leading gaps longer than 5 replays: the cut spans 10.
    let long = |t: &trace::Trace| {
        let a = analyze_one(t);
        let c = a
            .cells
            .iter()
            .find(|c| c.label.starts_with("graph G1 replays (exec 2"))
            .expect("exec 2's replays");
        let median = c.period.as_ref().unwrap().median;
        let periods = c.steps.iter().filter_map(|s| s.period).count();
        let long_periods = c
            .steps
            .iter()
            .filter(|s| s.period.is_some_and(|p| p as f64 > 5.0 * median))
            .count();
        let long_gaps = c
            .steps
            .iter()
            .filter(|s| s.gaps.iter().any(|g| g.len() as f64 > 5.0 * median))
            .count();
        (periods, long_periods, long_gaps)
    };
    let (before, long_before, gaps_before) = long(&load("torch-graphs-sampling-h200.json").0);
    let (joined, long_joined, gaps_joined) = long(&t);
    assert_eq!(joined, before - 10, "10 replays cut");
    assert_eq!(
        (long_joined, gaps_joined),
        (long_before + 1, gaps_before + 1),
        "without the resume one period and one gap span the cut"
    );
    t.metadata.sampling.as_mut().unwrap().resumed_at = vec![resume];
    let (n, long_n, gaps_n) = long(&t);
    assert_eq!(n, joined - 1, "the replay after the resume has no period");
    assert_eq!((long_n, gaps_n), (long_before, gaps_before));
}

/// Every bundled recording, as `gapscope analyze` reads it (not the third-party traces of
/// traces/hta, which tests/third_party_traces.rs reads).
fn bundled() -> Vec<(String, trace::Trace)> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            // HTA's corpus, and a `gapscope try` folder (tests/try_cmd.rs reads it whole).
            if p.ends_with("traces/hta") || p.ends_with("traces/try-serial-event-h200") {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if p.to_string_lossy().ends_with(".json")
                || p.to_string_lossy().ends_with(".json.gz")
            {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("traces"),
        &mut paths,
    );
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let t = trace::read_any(&p).unwrap();
            (p.display().to_string(), t)
        })
        .collect()
}

/// Where a recording marks its steps, nothing is looked for in the kernel sequence: its cells
/// are the marked ones and the graph launches, as before. The two torch.profiler recordings
/// without `ProfilerStep` get their eager loop found (and the `step` range named), and so do
/// the recordings of unmarked decode loops (a plain PyTorch one, transformers' generate()).
#[test]
fn bundled_recordings_with_step_markers_keep_their_cells() {
    use gapscope::analysis::discover::StepSource;
    let all = bundled();
    assert!(all.len() >= 20, "{}", all.len());
    for (path, t) in &all {
        let a = analyze_one(t);
        let marked = t.markers.iter().any(|m| m.kind == trace::MarkerKind::Step);
        let found = a.cells.iter().filter(|c| c.found.is_some()).count();
        if marked {
            assert_eq!(a.inputs[0].steps.source, StepSource::Markers, "{path}");
            assert_eq!(found, 0, "{path}");
            // Nothing to say about the steps, unless the recorder chose their range.
            let chosen = a.inputs[0].steps.chosen_step_range.is_some();
            assert_eq!(
                a.inputs[0].steps.describe().len(),
                usize::from(chosen),
                "{path}"
            );
            assert_eq!(chosen, path.contains("chosen-step"), "{path}");
        } else {
            assert!(
                ["kineto", "decode-loop", "transformers-generate", "defaults"]
                    .iter()
                    .any(|p| path.contains(p)),
                "{path}: unmarked"
            );
            // torch_graphs.py's 10 warm-up steps run at another period than its 200 timed
            // ones: two loops of one unit (run directly or under torchrun).
            let loops = if path.contains("graphs-defaults") {
                2
            } else {
                1
            };
            assert_eq!(found, loops, "{path}");
        }
    }
}

/// `torch_graphs.py` recorded with `--step-range decode_step`, read as if recorded without
/// it (the step markers turned back into plain NVTX ranges): the eager steps are found in
/// the kernel sequence, as many as the ranges marked (±1: the phase can cut one), with the
/// same period, the range is named with the flag to pass, and the graph cells pair with the
/// eager cell found, by kernel sequence. The program's warm-up (5 steps, on a side stream,
/// twice each with external events) is a loop of its own, before.
#[test]
fn torch_graphs_with_the_step_ranges_stripped_finds_the_same_steps() {
    let traces = [
        "torch-graphs-record-h200.json",
        "torch-graphs-budget-h200.json",
        "torch-graphs-sampling-h200.json",
        "torch-graphs-2rank-h200/mixing-1/trace-0.json",
        "torch-graphs-2rank-h200/mixing-0/trace-1.json",
    ];
    for name in traces {
        let marked = read(name);
        let by_markers = analyze_one(&marked);
        let eager_marked = by_markers
            .cells
            .iter()
            .find(|c| c.observed.regime == Some(Regime::Eager))
            .unwrap();
        let mut stripped = marked.clone();
        for m in &mut stripped.markers {
            if m.kind == trace::MarkerKind::Step {
                m.kind = trace::MarkerKind::Range;
                m.cell = None;
            }
        }
        stripped.metadata.cells.clear();
        let a = analyze_one(&stripped);
        let found: Vec<&CellAnalysis> = a.cells.iter().filter(|c| c.found.is_some()).collect();
        let warm_up = if name.contains("2rank") { 5 } else { 10 };
        let steps: Vec<usize> = found.iter().map(|c| c.steps.len()).collect();
        assert_eq!(steps.len(), 2, "{name}: {:?}", a.inputs[0].steps);
        assert!(steps[0].abs_diff(warm_up) <= 1, "{name}: {steps:?}");
        let e = found[1];
        assert!(
            e.steps.len().abs_diff(eager_marked.steps.len()) <= 1,
            "{name}: {} found, {} marked",
            e.steps.len(),
            eager_marked.steps.len()
        );
        let (pf, pm) = (
            e.period.unwrap().median,
            eager_marked.period.unwrap().median,
        );
        assert!((pf - pm).abs() <= 0.05 * pm, "{name}: {pf} vs {pm}");
        let hint = a.inputs[0].steps.step_range_hint.as_ref().unwrap();
        assert_eq!(hint.name, "decode_step", "{name}");
        // The graph cells are those of the marked reading, paired now with the loop found.
        let graphs = |a: &Analysis| -> Vec<String> {
            a.cells
                .iter()
                .filter(|c| c.graph_group.is_some())
                .map(|c| c.label.clone())
                .collect()
        };
        assert_eq!(graphs(&a), graphs(&by_markers), "{name}");
        for p in &a.regime_pairs {
            assert_eq!(a.cells[p.base].label, e.label, "{name}");
            let pairing = p.pairing.as_ref().unwrap();
            assert_eq!(pairing.basis, gapscope::analysis::PairBasis::KernelSequence);
        }
        assert_eq!(
            a.regime_pairs.len(),
            by_markers.regime_pairs.len(),
            "{name}"
        );
    }
}

/// Under the trace budget the untraced step ranges keep their markers: the eager cell states
/// what tracing added to its host step, measured on the same run's untraced steps.
#[test]
fn a_budgeted_eager_cell_states_the_tracers_share_from_its_untraced_steps() {
    let (_, a) = load("torch-graphs-sampling-h200.json");
    let eager = a
        .cells
        .iter()
        .find(|c| c.observed.regime == Some(Regime::Eager))
        .unwrap();
    let share = eager.tracer_share.as_ref().expect("64 of 200 steps traced");
    // 64 traced steps in a row give 63 periods; 136 untraced give 135.
    assert_eq!((share.traced.n, share.untraced.n), (63, 135));
    assert!(share.ratio > 0.5 && share.ratio < 3.0, "{share:?}");
    assert!(
        (share.added_ns - (share.traced.median - share.untraced.median)).abs() < 1e-6,
        "{share:?}"
    );
    // Graph cells get none (their untraced launches leave no host record), nor do traces
    // recorded without a budget.
    assert!(
        a.cells
            .iter()
            .filter(|c| c.graph_group.is_some())
            .all(|c| c.tracer_share.is_none())
    );
    let (_, whole) = load("torch-graphs-record-h200.json");
    assert!(whole.cells.iter().all(|c| c.tracer_share.is_none()));
}

/// Every gapscope trace under `traces/`, recursively (Kineto exports have no schema version).
fn recorded_trace_files(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    found.extend(common::files_under(dir, &|path| {
        path.extension().is_some_and(|e| e == "json") && {
            let head = std::fs::read(path).unwrap();
            let head = &head[..head.len().min(64)];
            head.windows(16).any(|w| w == b"\"schema_version\"")
        }
    }));
}

#[test]
fn traces_written_before_loaded_libraries_were_listed_read_as_before() {
    let mut files = Vec::new();
    recorded_trace_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("traces"),
        &mut files,
    );
    assert!(files.len() >= 8, "{files:?}");
    for path in files {
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let t = trace::read_trace(&path).unwrap();
        assert_eq!(t.schema_version, trace::SCHEMA_VERSION);
        let versions = &t.metadata.versions;
        assert!(versions.loaded.is_empty(), "{}", path.display());
        // Read and written again, the versions are the file's, key for key.
        assert_eq!(
            serde_json::to_value(versions).unwrap(),
            raw["metadata"]["versions"],
            "{}",
            path.display()
        );
    }
}

/// Recordings of 2026-12-01 (one H200, default settings, the windows sampling schedule; the
/// programs' own CUDA-event periods in the same runs are in traces/README.md).
/// A recording in traces/, read as `analyze` reads any input.
fn bundled_trace(name: &str) -> trace::Trace {
    trace::read_any(&bundled_path(name)).unwrap()
}

fn recorded_2026_12_01(name: &str) -> Analysis {
    analyze_one(&bundled_trace(name))
}

#[test]
fn torch_compile_recording_has_both_phases_with_samples_from_across_the_run() {
    let a = recorded_2026_12_01("torch-compile-record-h200.json.gz");
    let eager = a
        .cells
        .iter()
        .find(|c| c.observed.regime == Some(Regime::Eager))
        .unwrap();
    let graphed = a
        .cells
        .iter()
        .find(|c| c.observed.regime == Some(Regime::Graphed))
        .unwrap();
    for c in [eager, graphed] {
        assert!(
            c.period.as_ref().unwrap().n >= 100,
            "{}: {:?}",
            c.label,
            c.period
        );
        assert!(c.tracer_share.is_some(), "{}", c.label);
    }
    // Within 12 % of the program's own CUDA-event periods of that run (285.30, 143.04 µs):
    // the traced steps pay the tracer's share, which each cell states.
    let within = |c: &CellAnalysis, own: f64| {
        (c.period.as_ref().unwrap().median / 1e3 / own - 1.0).abs() < 0.12
    };
    assert!(within(eager, 285.30) && within(graphed, 143.04));
    assert_eq!(a.regime_pairs.len(), 1);
    assert!(graphed.observed.graph_coverage.unwrap() > 0.95);
}

#[test]
fn graphs_captured_after_a_long_eager_phase_keep_their_external_event_nodes() {
    let t = trace::read_any(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/phases-record-h200.json.gz"),
    )
    .unwrap();
    let sampling = t.metadata.sampling.as_ref().unwrap();
    assert!(sampling.steps > 300 && sampling.steps_traced < sampling.steps);
    let external: Vec<_> = t.graph.nodes.iter().filter(|n| n.external).collect();
    assert_eq!(
        external.len(),
        4,
        "a record and a wait, in template and clone"
    );
    assert!(external.iter().all(|n| n.created_by.is_some()));
    let a = analyze_one(&t);
    assert_eq!(a.mode_pairs.len(), 1);
    let d = a.mode_pairs[0].period_delta.unwrap();
    // The program measured +1.12 µs itself in that run; traced, the difference stays close.
    assert!((d / 1e3 - 1.12).abs() < 0.5, "{d}");
}

#[test]
fn a_decode_loop_without_markers_gets_its_eager_steps_and_pairs_them_with_the_graph() {
    let a = recorded_2026_12_01("decode-loop-record-h200.json.gz");
    let found: Vec<&CellAnalysis> = a.cells.iter().filter(|c| c.found.is_some()).collect();
    assert_eq!(found.len(), 1);
    let e = found[0];
    assert!(e.steps.len().abs_diff(200) <= 1, "{}", e.steps.len());
    // The program's own eager period in that run: 1940.26 µs.
    let p = e.period.as_ref().unwrap().median / 1e3;
    assert!((p / 1940.26 - 1.0).abs() < 0.05, "{p}");
    let pair = a
        .regime_pairs
        .iter()
        .find(|p| p.base == a.cells.iter().position(|c| std::ptr::eq(c, e)).unwrap())
        .expect("paired");
    assert_eq!(
        pair.pairing.as_ref().unwrap().basis,
        gapscope::analysis::PairBasis::KernelSequence
    );
}

/// `gapscope record -- python examples/transformers_generate.py` on one H200 (2026-12-01):
/// a transformers Llama-style model generating 64 tokens, 1 + 3 calls eagerly, then 1 + 3
/// with the library's torch.compile and CUDA graphs. No marker anywhere: the eager tokens
/// differ from one another by vectorised or unrolled variants of two elementwise kernels.
#[test]
fn transformers_generate_gets_one_eager_token_cell_paired_with_the_graph_on_its_library_kernels() {
    let a = recorded_2026_12_01("transformers-generate-record-h200.json.gz");
    let found: Vec<&CellAnalysis> = a.cells.iter().filter(|c| c.found.is_some()).collect();
    assert_eq!(
        found.len(),
        1,
        "{:?}",
        found.iter().map(|c| &c.label).collect::<Vec<_>>()
    );
    let e = found[0];
    let f = e.found.as_ref().unwrap();
    // One token a step: the 4 eager calls' 63 decode steps each, their prefills between.
    assert_eq!((f.steps, f.runs_joined), (4 * 63, 4), "{f:?}");
    let period = e.period.as_ref().unwrap();
    assert_eq!(period.n, 4 * 62);
    // The program's own eager period in that run (CUDA events, 3 timed calls): 8320.64 µs.
    let p = period.median / 1e3;
    assert!((p / 8320.64 - 1.0).abs() < 0.05, "{p}");
    let graphed = a
        .cells
        .iter()
        .position(|c| c.observed.regime == Some(Regime::Graphed))
        .unwrap();
    let pair = a
        .regime_pairs
        .iter()
        .find(|p| p.head == graphed)
        .expect("the graph replays are paired");
    assert_eq!(a.cells[pair.base].label, e.label);
    let pairing = pair.pairing.as_ref().unwrap();
    assert_eq!(pairing.basis, gapscope::analysis::PairBasis::LibraryKernels);
    assert_eq!(pairing.confidence, gapscope::analysis::Confidence::Likely);
    assert!(
        pairing.text.starts_with(
            "paired by library kernels: 73 of the graph's 74 library kernels (GEMMs, attention, collectives) match the eager step's by name, in order, and the eager step runs 74 kernels of those names"
        ),
        "{}",
        pairing.text
    );
    let screen = gapscope::report::summary::analysis_summary(&a, None);
    assert!(
        screen.contains("C2 ↔ C1: paired by library kernels"),
        "{screen}"
    );
    // Each replay waits for the library's Python between tokens, not for its launch call. This
    // recording has no untraced launches, so how much of that host time tracing added is not
    // known: the host-code fix is withheld, not predicted from traced time.
    let h = a.headline.as_ref().unwrap();
    assert_eq!(h.cell, graphed);
    assert_eq!(
        h.cause.as_ref().unwrap().cause,
        CauseKind::GraphLaunchHostBound
    );
    let withheld = a
        .withheld_remedies
        .iter()
        .find(|w| w.remedy.kind == RemedyKind::HostCodeBeforeLaunch && w.remedy.cell == graphed)
        .expect("the host-code fix, withheld");
    assert!(withheld.why.contains("only as traced"), "{}", withheld.why);
}

/// `gapscope record -- python examples/transformers_generate.py --rounds 6` with default
/// settings on one H100 (2026-12-05, the recorder that paces an unmarked program by time):
/// 1 + 6 generate() calls of 64 tokens eagerly, then 1 + 6 compiled. Recorded whole, the same
/// program left a 32 MB trace whose eager step was the whole generate() call (6 of them,
/// repeated exactly); paced, its eager tokens are sampled in windows.
#[test]
fn a_paced_generate_recording_keeps_one_token_cell_paired_with_the_graph_and_its_own_period() {
    let path = bundled_path("transformers-generate-paced-record-h100.json.gz");
    let mut json = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()),
        &mut json,
    )
    .unwrap();
    assert!(json.len() <= 5_000_000, "{} bytes", json.len());
    let a = analyze_one(&trace::read_any(&path).unwrap());
    let found: Vec<usize> = (0..a.cells.len())
        .filter(|&i| a.cells[i].found.is_some())
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{:?}",
        a.cells.iter().map(|c| &c.label).collect::<Vec<_>>()
    );
    let eager = found[0];
    let f = a.cells[eager].found.as_ref().unwrap();
    // A token is 472 ops (8 layers, the LM head, sampling); a whole call is ~30,000.
    assert!(f.unit_ops < 600 && f.steps >= 8, "{f:?}");
    // The program's own eager period in that process (CUDA events, 6 timed calls): 9434.93 µs.
    let untraced = a.cells[eager].untraced_period.as_ref().expect("untraced");
    let p = untraced.median / 1e3;
    assert!((p / 9434.93 - 1.0).abs() < 0.05, "{p}");
    let graphed = a
        .cells
        .iter()
        .position(|c| c.observed.regime == Some(Regime::Graphed))
        .unwrap();
    assert!(
        a.regime_pairs
            .iter()
            .any(|p| p.base == eager && p.head == graphed),
        "the token cell and the graph replays are paired"
    );
    // The graphed phase exists: capturing the eager step is no advice.
    assert!(
        a.remedies
            .iter()
            .all(|r| r.kind != RemedyKind::CaptureInGraph),
        "{:?}",
        a.remedies
    );
    // Each replay waits for the library's Python between tokens, not for its launch call: the
    // fix is that host code, predicted from the host time before the launch calls less what
    // tracing adds to the step.
    let h = a.headline.as_ref().unwrap();
    assert_eq!(h.cell, graphed);
    let fix = &a.remedies[h.fix.expect("a fix")];
    assert_eq!(fix.kind, RemedyKind::HostCodeBeforeLaunch);
    assert!(
        fix.basis.contains("tracing adds to the step"),
        "{}",
        fix.basis
    );
    let cause = h.cause.as_ref().unwrap();
    assert_eq!(cause.cause, CauseKind::GraphLaunchHostBound);
    let saving = fix.predicted_saving_ns.unwrap();
    assert!(
        saving.p10 > 0.0 && saving.median < cause.per_step.median,
        "{saving:?}"
    );
}

/// `examples/decode_loop.py` recorded on an H200 with default settings by the recorder that
/// names library functions from torch's own symbol table (2026-12-02).
#[test]
fn every_replayed_op_of_a_recorded_decode_loop_names_where_it_came_from() {
    let a = recorded_2026_12_01("decode-loop-frames-record-h200.json.gz");
    let graphed: Vec<&CellAnalysis> = a
        .cells
        .iter()
        .filter(|c| c.observed.regime == Some(Regime::Graphed))
        .collect();
    assert!(!graphed.is_empty());
    for c in graphed {
        let share = c.observed.replayed_with_provenance.unwrap();
        assert!(share >= 0.9, "{}: {share}", c.label);
        assert!(c.observed.graph_coverage.unwrap() > 0.95, "{}", c.label);
    }
    // The program's own eager period in that run: 3541.20 µs (n=200).
    let eager = a
        .cells
        .iter()
        .find(|c| c.observed.regime == Some(Regime::Eager))
        .unwrap();
    let p = eager.period.as_ref().unwrap().median / 1e3;
    assert!((p / 3541.20 - 1.0).abs() < 0.05, "{p}");
    assert_eq!(eager.observed.graph_coverage, Some(0.0));
}

/// `examples/torch_compile_decode.py --force-eager-fallback` recorded on an H200
/// (2026-12-02): torch.compile skipped its cudagraphs (`cudagraph_skips=1`), so the compiled
/// phase ran its Triton kernels eagerly.
#[test]
fn a_recorded_cudagraph_fallback_is_a_compiled_cell_without_graphs() {
    let a = recorded_2026_12_01("torch-compile-fallback-record-h200.json.gz");
    assert!(
        a.cells
            .iter()
            .all(|c| c.observed.regime != Some(Regime::Graphed))
    );
    let fell_back: Vec<&CellAnalysis> = a
        .cells
        .iter()
        .filter(|c| c.observed.compiled_without_graphs)
        .collect();
    assert_eq!(fell_back.len(), 1);
    let c = fell_back[0];
    assert!(c.period.as_ref().unwrap().n >= 30, "{:?}", c.period);
    assert_eq!(c.observed.graph_coverage, Some(0.0));
    assert!(
        a.cells.iter().any(
            |c| !c.observed.compiled_without_graphs && c.observed.regime == Some(Regime::Eager)
        )
    );
}

/// The graph cells of a default-settings recording, with what each must show: ≥ 100 traced
/// launches, every replayed op with a provenance, graph coverage, and what tracing added.
fn replay_cells(a: &Analysis) -> Vec<&CellAnalysis> {
    let replays: Vec<&CellAnalysis> = a
        .cells
        .iter()
        .filter(|c| c.label.contains(" replays "))
        .collect();
    for c in &replays {
        assert!(c.period.as_ref().unwrap().n >= 100, "{}", c.label);
        assert!(
            c.observed.replayed_with_provenance.unwrap() >= 0.9,
            "{}",
            c.label
        );
        assert!(c.observed.graph_coverage.unwrap() >= 0.95, "{}", c.label);
        let share = c
            .tracer_share
            .as_ref()
            .expect("launches traced and untraced");
        assert!(share.untraced.n >= 50 && share.traced.n >= 100, "{share:?}");
    }
    replays
}

/// Median of a cell's period, µs.
fn median_us(c: &CellAnalysis) -> f64 {
    c.period.as_ref().unwrap().median / 1e3
}

/// The cell's median is within 5 % of the program's own CUDA-event median.
fn within_5_percent(c: &CellAnalysis, own_us: f64) {
    assert!(
        (median_us(c) / own_us - 1.0).abs() < 0.05,
        "{}: {} µs against the program's {own_us} µs",
        c.label,
        median_us(c)
    );
}

/// The eager cell of at least 100 steps (not the warm-ups).
fn steady_eager_cell(a: &Analysis) -> &CellAnalysis {
    a.cells
        .iter()
        .find(|c| c.observed.regime == Some(Regime::Eager) && c.period.as_ref().unwrap().n >= 100)
        .unwrap()
}

/// `examples/torch_graphs.py` under `gapscope record` with default settings (H200,
/// 2026-12-02; 200 eager steps, 200 replays of a graph and of its external-event twin, 40
/// fresh graphs each). The program's own CUDA-event medians in that run: eager 168.00, replay
/// 21.44, replay_ext 24.70 µs (n=199).
#[test]
fn torch_graphs_recorded_with_defaults_states_what_tracing_added_to_each_replay_cell() {
    let t = bundled_trace("torch-graphs-defaults-record-h200.json.gz");
    let v = &t.metadata.versions;
    assert_eq!(v.nccl.as_deref(), Some("2.28.9"), "the NCCL torch loaded");
    assert!(
        v.nccl_library
            .as_deref()
            .unwrap()
            .ends_with("nvidia/nccl/lib/libnccl.so.2")
    );
    let a = analyze_one(&t);
    let replays = replay_cells(&a);
    assert_eq!(replays.len(), 2);
    for (c, own) in replays.iter().zip([21.44, 24.70]) {
        within_5_percent(c, own);
    }
    let eager = steady_eager_cell(&a);
    within_5_percent(eager, 168.00);
    assert_eq!(eager.observed.graph_coverage, Some(0.0));
    let pair = &a.mode_pairs[0];
    assert_eq!(pair.within_tracer_effect, Some(true), "{pair:?}");
}

/// A cell's median is the program's own CUDA-event median, or above it by no more than the
/// tracer's share the cell states (measured in the same run on its untraced steps).
fn within_stated_tracer_share(c: &CellAnalysis, own_us: f64) {
    let share = c
        .tracer_share
        .as_ref()
        .expect("the cell states the tracer's share");
    assert!(
        share.untraced.n >= 40 && share.ratio > 1.0,
        "{}: {share:?}",
        c.label
    );
    let ratio = median_us(c) / own_us;
    assert!(
        ratio > 0.95 && ratio < share.ratio,
        "{}: {} µs against the program's {own_us} µs, tracing ×{}",
        c.label,
        median_us(c),
        share.ratio
    );
}

/// `gapscope record -o … -- torchrun --nproc-per-node 1 examples/torch_graphs.py` with default
/// settings (H200, 2026-12-02, build 44a5f2c; an NCCL process group of one rank). The program's
/// own CUDA-event medians in that run: eager 365.54, replay 34.59, replay_ext 41.09 µs (n=199).
#[test]
fn torchrun_recorded_with_defaults_finds_its_eager_steps_and_names_the_step_range() {
    let t = bundled_trace("torchrun-graphs-defaults-record-h200.json.gz");
    assert_eq!(t.metadata.versions.nccl.as_deref(), Some("2.28.9"));
    let a = analyze_one(&t);
    let hint = a.inputs[0].steps.step_range_hint.as_ref().unwrap();
    assert_eq!((hint.name.as_str(), hint.ranges), ("decode_step", 200));
    // The warm-ups are not the steady state: the eager cell is the 200 timed steps.
    let eager = steady_eager_cell(&a);
    within_5_percent(eager, 365.54);
    let replays = replay_cells(&a);
    assert_eq!(replays.len(), 2);
    for (c, own) in replays.iter().zip([34.59, 41.09]) {
        within_stated_tracer_share(c, own);
    }
}

/// The same program with the step range the report names, `--step-range decode_step` (same
/// session, another process). The program's own medians: eager 130.85, replay 21.31,
/// replay_ext 22.59 µs (n=199).
#[test]
fn torchrun_recorded_with_its_step_range_samples_eager_steps_and_states_their_tracer_share() {
    let a = recorded_2026_12_01("torchrun-graphs-step-range-record-h200.json.gz");
    let eager = a
        .cells
        .iter()
        .find(|c| c.label.starts_with("`decode_step` steps"))
        .unwrap();
    assert_eq!(eager.observed.regime, Some(Regime::Eager));
    assert!(eager.period.as_ref().unwrap().n >= 100);
    within_stated_tracer_share(eager, 130.85);
    let replays = replay_cells(&a);
    assert_eq!(replays.len(), 2);
    for (c, own) in replays.iter().zip([21.31, 22.59]) {
        within_5_percent(c, own);
    }
    // The external-event twin keeps its event nodes under the budget.
    assert!(
        replays[1]
            .idle_by_cause
            .iter()
            .any(|t| t.cause == CauseKind::ExternalEventWait)
    );
}

/// `examples/phases.py` under `gapscope record` with default settings (H200, 2026-12-02): 320
/// eager steps (more than the budget), then 200 replays each of a mode-1 graph and of one with
/// external event nodes. The program's own medians in that run: eager 156.42, mode 1 37.78,
/// mode 2 45.50 µs; untraced runs of the same build measured mode 2 − mode 1 at +2.29 µs
/// [+1.31–+3.25] (5 rounds, benches/README.md).
#[test]
fn phases_recorded_with_defaults_keep_the_external_nodes_and_weigh_the_mode_difference() {
    let a = recorded_2026_12_01("phases-defaults-record-h200.json.gz");
    let replays = replay_cells(&a);
    assert_eq!(replays.len(), 2);
    let mode2 = replays
        .iter()
        .find(|c| c.observed.external_wait_nodes > 0)
        .expect("the mode-2 graph's external wait, captured after the eager phase");
    assert!(mode2.observed.external_record_nodes > 0);
    let eager = a
        .cells
        .iter()
        .find(|c| c.observed.regime == Some(Regime::Eager))
        .unwrap();
    assert!(eager.period.as_ref().unwrap().n >= 300);
    assert!(
        (median_us(eager) / 156.42 - 1.0).abs() < 0.05,
        "{}",
        median_us(eager)
    );
    // The untraced host step periods keep half the traced difference, but not beyond its
    // spread: tracing's effect explains it.
    let pair = &a.mode_pairs[0];
    assert_eq!(pair.within_tracer_effect, Some(true), "{pair:?}");
    let untraced = pair.untraced_period_delta.unwrap() / 1e3;
    let traced = pair.period_delta.unwrap() / 1e3;
    assert!(
        untraced > 0.0 && untraced < traced,
        "{untraced} vs {traced}"
    );
    // Without the host-bound launch gaps tracing opened, the difference is the untraced
    // program's: within its spread over 5 rounds.
    let host = pair.gap_growth_of(gapscope::analysis::CauseKind::GraphLaunchHostBound) / 1e3;
    let rest = traced - host;
    assert!(
        (1.31..=3.25).contains(&rest),
        "{rest} µs (host-bound {host})"
    );
    let screen = gapscope::report::summary::analysis_summary(&a, None);
    assert!(
        screen.contains(&format!("the rest +{rest:.2} µs")),
        "{screen}"
    );
    // The eager loop, outside any step range, was traced whole: it says its share is unknown.
    let eager_line = screen
        .lines()
        .find(|l| l.contains("eager loop E1") && l.contains(": eager, "))
        .unwrap();
    assert!(
        eager_line.ends_with("every step traced: what tracing adds is not measured in this run"),
        "{eager_line}"
    );
}

/// `examples/torch_compile_decode.py` under `gapscope record` with default settings, no step
/// range (H200, 2026-12-02): 200 eager steps, the compile, 200 compiled steps. The program's own
/// medians in that run: eager 525.15, compiled 288.80 µs (n=180). The compile's autotuning
/// makes no cells; the compiled phase's `.clone()` beside each replay is flagged as eager work.
#[test]
fn torch_compile_recorded_with_defaults_has_both_phases_and_no_cells_of_its_autotuning() {
    let a = recorded_2026_12_01("torch-compile-defaults-record-h200.json.gz");
    assert_eq!(
        a.cells.len(),
        2,
        "{:?}",
        a.cells.iter().map(|c| &c.label).collect::<Vec<_>>()
    );
    let eager = &a.cells[0];
    assert_eq!(eager.found.as_ref().unwrap().unit_ops, 17);
    assert!(eager.period.as_ref().unwrap().n >= 190);
    assert!(
        (median_us(eager) / 525.15 - 1.0).abs() < 0.05,
        "{}",
        median_us(eager)
    );
    let replays = replay_cells(&a);
    assert_eq!(replays.len(), 1);
    let g = replays[0];
    assert!(g.observed.eager_in_graphed.is_some());
    // Traced launches ran slower than untraced ones; the program's own period, over both, lies
    // between them.
    let share = g.tracer_share.as_ref().unwrap();
    assert!(share.untraced.median / 1e3 < 288.80 && 288.80 < median_us(g));
    assert!(
        a.inputs[0].steps.step_range_hint.is_some(),
        "names --step-range decode_step"
    );
}

/// The step range the recorder chose with none given: named in the workload and the notes,
/// and its `decode_step` ranges are the eager cell's steps (sampled: some untraced).
fn chosen_step_range_cell<'a>(t: &trace::Trace, a: &'a Analysis) -> &'a CellAnalysis {
    assert_eq!(
        t.metadata
            .workload
            .get("step_range")
            .and_then(|v| v.as_str()),
        Some("decode_step")
    );
    assert!(
        t.metadata
            .notes
            .iter()
            .any(|n| n.contains("step range `decode_step` chosen by the recorder")),
        "{:?}",
        t.metadata.notes
    );
    assert_eq!(
        a.inputs[0].steps.chosen_step_range.as_deref(),
        Some("decode_step")
    );
    let screen = gapscope::report::summary::analysis_summary(a, None);
    assert!(
        screen.contains("Steps: the NVTX range `decode_step`, which `gapscope record` chose"),
        "{screen}"
    );
    let eager = a
        .cells
        .iter()
        .find(|c| {
            c.label.starts_with("`decode_step` steps") && c.observed.regime == Some(Regime::Eager)
        })
        .expect("an eager cell of the chosen range's steps");
    assert!(eager.period.as_ref().unwrap().n >= 100, "{}", eager.label);
    eager
}

fn chosen_step_recording(name: &str) -> (trace::Trace, Analysis) {
    let t = bundled_trace(name);
    let a = analyze_one(&t);
    (t, a)
}

/// `examples/torch_graphs.py` under `gapscope record` with default settings and no step range
/// given (H200, 2026-12-02, build 6a28526): the recorder chose `decode_step`. The program's
/// own CUDA-event medians in that run: eager 115.78, replay 21.57, replay_ext 23.20 µs (n=199).
#[test]
fn torch_graphs_recorded_with_defaults_samples_the_eager_steps_of_the_range_the_recorder_chose() {
    let (t, a) = chosen_step_recording("torch-graphs-chosen-step-record-h200.json.gz");
    let eager = chosen_step_range_cell(&t, &a);
    assert!(
        eager.tracer_share.is_some(),
        "untraced eager steps measured"
    );
    within_5_percent(eager, 115.78);
    let replays = replay_cells(&a);
    assert_eq!(replays.len(), 2);
    for (c, own) in replays.iter().zip([21.57, 23.20]) {
        within_5_percent(c, own);
    }
    assert!(
        a.inputs[0].steps.step_range_hint.is_none(),
        "no flag to name"
    );
}

/// `examples/phases.py` the same way (same session and build): 320 eager steps, then the
/// mode-1 graph and the one with external event nodes, 200 replays each. The program's own
/// medians: eager 102.78, mode 1 21.97, mode 2 23.33 µs, so mode 2 − mode 1 = +1.36 µs.
#[test]
fn phases_recorded_with_defaults_sample_eager_steps_and_keep_the_mode_difference() {
    let (t, a) = chosen_step_recording("phases-chosen-step-record-h200.json.gz");
    let eager = chosen_step_range_cell(&t, &a);
    within_stated_tracer_share(eager, 102.78);
    let replays = replay_cells(&a);
    assert_eq!(replays.len(), 2);
    for (c, own) in replays.iter().zip([21.97, 23.33]) {
        within_5_percent(c, own);
    }
    assert!(replays[1].observed.external_wait_nodes > 0);
    assert!(replays[1].observed.external_record_nodes > 0);
    let traced = a.mode_pairs[0].period_delta.unwrap() / 1e3;
    assert!((traced - 1.36).abs() < 0.25, "traced Δ {traced} µs");
}

/// `examples/phases.py` recorded with default settings in the fifth session (the pause switching
/// the API record filter off), in a process that drew the slow host (1524 µs per host loop):
/// its replays are host-bound under tracing. The program's own medians: eager 78.67, mode 1
/// 39.90, mode 2 44.10 µs. Every cell states its tracer's share and lies within it, and the
/// traced mode difference is called within what tracing adds.
#[test]
fn phases_on_a_slow_host_state_the_tracers_share_of_every_cell() {
    let (t, a) = chosen_step_recording("phases-slow-host-chosen-step-record-h200.json.gz");
    within_stated_tracer_share(chosen_step_range_cell(&t, &a), 78.67);
    let replays = replay_cells(&a);
    assert_eq!(replays.len(), 2);
    for (c, own) in replays.iter().zip([39.90, 44.10]) {
        within_stated_tracer_share(c, own);
    }
    assert!(replays[1].observed.external_wait_nodes > 0);
    // Tracing added more than the traced difference, but the untraced host step periods show
    // most of it too (the program's own Δ: +4.20 µs): mode 2's cost, in untraced figures.
    let pair = &a.mode_pairs[0];
    assert_eq!(pair.within_tracer_effect, Some(false), "{pair:?}");
    untraced_mode_cost_leads(&a);
}

/// The headline is mode 2's cost in the pair's untraced figures, and its fix predicts them.
fn untraced_mode_cost_leads(a: &Analysis) {
    let pair = &a.mode_pairs[0];
    let h = a.headline.as_ref().expect("a headline");
    let cost = h.mode_cost.as_ref().expect("mode 2's cost leads");
    assert!(cost.untraced, "{cost:?}");
    assert_eq!(Some(cost.delta_ns), pair.untraced_period_delta);
    let fix = &a.remedies[h.fix.expect("a fix")];
    assert_eq!(
        fix.predicted_saving_ns.map(|s| s.median),
        pair.untraced_period_delta
    );
}

/// `examples/torch_compile_decode.py` the same way (same session and build): 200 eager steps,
/// the compile, 200 compiled steps, all in `decode_step` ranges. The program's own medians:
/// eager 295.89, compiled 145.02 µs (n=180).
#[test]
fn torch_compile_recorded_with_defaults_has_eager_and_compiled_steps_of_the_chosen_range() {
    let (t, a) = chosen_step_recording("torch-compile-chosen-step-record-h200.json.gz");
    let eager = chosen_step_range_cell(&t, &a);
    within_stated_tracer_share(eager, 295.89);
    let compiled = a
        .cells
        .iter()
        .find(|c| {
            c.label.starts_with("`decode_step` steps") && c.observed.regime == Some(Regime::Graphed)
        })
        .expect("the compiled phase's steps");
    assert!(compiled.period.as_ref().unwrap().n >= 100);
    within_5_percent(compiled, 145.02);
    assert!(compiled.observed.graph_coverage.unwrap() > 0.95);
    assert!(
        compiled.observed.eager_in_graphed.is_some(),
        "the .clone() beside each replay"
    );
    // Each half's tracer share from its own steps: the traced host periods are the half's
    // (as many as its steps, and near its period), and tracing adds less to a graphed step
    // (one launch) than to an eager one (every launch).
    let share = |c: &CellAnalysis| c.tracer_share.clone().expect("a tracer share");
    let (eager_share, compiled_share) = (share(eager), share(compiled));
    for (cell, s) in [(eager, &eager_share), (compiled, &compiled_share)] {
        let period = cell.period.as_ref().unwrap();
        assert!(s.traced.n.abs_diff(period.n) <= 2, "{}: {s:?}", cell.label);
        let off = (s.traced.median - period.median).abs() / period.median;
        assert!(off < 0.05, "{}: traced host {s:?}", cell.label);
        assert!(s.untraced.n >= 20, "{}: {s:?}", cell.label);
    }
    assert!(compiled_share.added_ns < eager_share.added_ns / 2.0);
}

/// `examples/phases.py` under `gapscope record` with default settings (H200, 2026-12-02, build
/// 045caee, a slow-host process): the recorder says it chose the step range in
/// `workload.step_range_chosen`, so the analysis finds the range without the recorder's note.
/// The program's own CUDA-event medians in that run: eager 137.09, mode 1 34.82, mode 2 37.23
/// µs (n=320, 200, 200).
#[test]
fn a_recording_that_says_it_chose_its_step_range_is_read_by_the_field_not_the_note() {
    let (mut t, a) = chosen_step_recording("phases-chosen-step-field-record-h200.json.gz");
    within_stated_tracer_share(chosen_step_range_cell(&t, &a), 137.09);
    let replays = replay_cells(&a);
    assert_eq!(replays.len(), 2);
    for (c, own) in replays.iter().zip([34.82, 37.23]) {
        within_stated_tracer_share(c, own);
    }
    assert_eq!(
        t.metadata.workload.get(trace::STEP_RANGE_CHOSEN),
        Some(&serde_json::Value::Bool(true))
    );
    t.metadata
        .notes
        .retain(|n| !n.contains("chosen by the recorder"));
    assert_eq!(t.metadata.chosen_step_range(), Some("decode_step"));
}

/// `examples/serial_event.py` (NCCL's serial-event shape of mode 2) under default `gapscope
/// record` on an H200 (build 57ff40d, round 1 of a 6-round bench). The program's own medians in
/// that process, from its CUDA events: over the launches the recorder measured, mode 1 18.02 µs
/// and mode 2 20.75 µs (n=56 each); over every launch 17.26 and 19.47; over the launches neither
/// traced nor measured 15.2 and 17.8 (measuring costs the replays there: benches/README.md).
/// Every cell has an untraced period from the measured launches and steps, and mode 2 vs mode 1
/// is judged on them and names the external event wait.
#[test]
fn measured_windows_give_every_cell_its_untraced_period_and_the_mode_verdict() {
    let (t, a) = load("serial-event-chosen-step-record-h200.json.gz");
    let sampling = t.metadata.sampling.as_ref().expect("a budgeted recording");
    assert_eq!(sampling.measured_per_pause, 8);
    assert!(
        a.inputs[0].completeness.device_records_without_launch == 0,
        "measured records are not lost ones"
    );
    for c in &a.cells {
        let untraced = c
            .untraced_period
            .unwrap_or_else(|| panic!("{}: no untraced period", c.label));
        assert!(untraced.n >= 30, "{}: {untraced:?}", c.label);
        let share = c.tracer_share.as_ref().expect("a tracer's share");
        assert_eq!(share.clock, analysis::tracer_share::ShareClock::Device);
        assert!(share.ratio > 1.0, "{}: {share:?}", c.label);
    }
    // Against the program's own medians over the same (measured) launches.
    let untraced_of = |exec: &str| -> f64 {
        let c = a
            .cells
            .iter()
            .find(|c| c.label.contains(exec))
            .expect("replay cell");
        c.untraced_period.unwrap().median / 1e3
    };
    for (exec, program) in [("exec 2,", 18.02), ("exec 5,", 20.75)] {
        let ours = untraced_of(exec);
        assert!(
            (ours / program - 1.0).abs() < 0.03,
            "{exec}: untraced {ours:.2} µs against the program's own {program} µs"
        );
    }
    let [m] = a.mode_pairs.as_slice() else {
        panic!("one mode pair: {:?}", a.mode_pairs.len())
    };
    assert!(m.judged_untraced);
    assert_eq!(m.change, Some(Change::Slower));
    let d = m.untraced_period_delta.unwrap();
    assert!((1_500.0..3_500.0).contains(&d), "{d}");
    assert!(m.gap_growth_of(CauseKind::ExternalEventWait) > 500.0);
    let screen = gapscope::report::summary::analysis_summary(&a, None);
    assert!(
        screen.contains("untraced mode 1 17.94 → mode 2 20.37 µs (slower, Δ +2.43 µs)"),
        "{screen}"
    );
    assert!(screen.contains("external event wait +0.70 µs"), "{screen}");
}

/// Issue 45 on an H100 (traces/torch-compile-chosen-step-host-code-record-h100.json.gz, default `record`
/// of examples/torch_compile_decode.py, build f6414fe: host samples at 4 kHz in traced
/// windows): every replayed op of the reduce-overhead graph names the program's line that
/// created its node (the compiled step's call; inductor's generated code and torch are the
/// runtime's), between the step range and the library; and the graphed cell's largest
/// host-bound gap names the host code that ran in it, two codes or more, with shares and n.
#[test]
fn a_torch_compile_recording_names_the_python_line_that_created_each_node() {
    let t = read("torch-compile-chosen-step-host-code-record-h100.json.gz");
    assert!(t.graph.nodes.iter().any(|n| n.python_stack.is_some()));
    let a = analyze_one(&t);
    let graphed = a
        .cells
        .iter()
        .find(|c| c.observed.replayed_with_provenance.is_some())
        .expect("a cell of replayed ops");
    assert_eq!(graphed.observed.replayed_with_code, Some(1.0));
    let labels: Vec<String> = graphed
        .sequence
        .iter()
        .filter_map(|e| e.provenance.as_ref().map(|p| p.label()))
        .collect();
    assert!(
        labels.iter().any(|l| l
            == "decode_step ← examples/torch_compile_decode.py:80 main.<locals>.compiled_step ← cublasLtMatmul"),
        "{labels:?}"
    );
    let largest = graphed
        .sequence
        .iter()
        .filter(|e| e.host_time.is_some())
        .max_by(|x, y| x.gap_before.median.total_cmp(&y.gap_before.median))
        .expect("a host-bound gap");
    let host = largest.host_time.as_ref().unwrap();
    assert!(
        host.top.len() >= 2 && host.samples >= gapscope::analysis::host_samples::MIN_SAMPLES,
        "{}",
        host.describe()
    );
    assert!(
        host.top
            .iter()
            .any(|c| c.code == "examples/torch_compile_decode.py:80 main.<locals>.compiled_step"),
        "{}",
        host.describe()
    );
    // The eager cell's host launch-bound gaps, each too short to name alone, name the eager
    // step's Python together (the Markdown's "all host-bound gaps" row).
    let eager = a
        .cells
        .iter()
        .find(|c| c.label.contains("(eager)"))
        .expect("the eager cell");
    let all = eager
        .host_time
        .as_ref()
        .expect("host time of the eager cell");
    assert!(all.samples >= gapscope::analysis::host_samples::MIN_SAMPLES);
    // Their length a step, over every step with a period (the Markdown row's figure).
    let per_step = all.per_step.expect("the cell's host-bound gaps a step");
    assert_eq!(per_step.n, eager.idle.unwrap().n);
    assert!(per_step.median > 0.0 && per_step.median <= eager.idle.unwrap().median);
    assert_eq!(
        all.top[0].code,
        "examples/torch_compile_decode.py:73 main.<locals>.eager_step",
        "{}",
        all.describe()
    );
    assert!(all.top[0].share > 0.5, "{}", all.describe());
}

/// `gapscope record -- python benches/programs/moe_serial_event.py --json …` on one H100
/// (2026-12-05, build fbbac2e, default settings; round 3 of `record_overhead.py … --diff
/// graph_mode1,graph_mode2 --rounds 6`): an MoE decode layer written for the bench, eager steps in
/// `range_push("forward")`, then 400 replays of a graph whose routing step waits on and records
/// one external serial event, and 400 of its mode-1 twin. The program's own medians in that
/// process: mode 1 108.70, mode 2 113.54 µs (Δ +4.83 µs).
#[test]
fn a_serial_event_program_the_project_never_saw_leads_with_mode_2s_cost_and_its_fix() {
    let a = analyze_one(&bundled_trace(
        "moe-serial-event-chosen-step-record-h100.json.gz",
    ));
    let pair = a.mode_pairs.first().expect("a mode pair");
    let delta = pair.untraced_period_delta.expect("untraced periods") / 1e3;
    // The program's own Δ in that process, to what the process-to-process spread allows (plain's
    // six rounds in that call: +4.40 to +5.74 µs).
    assert!((4.0..=5.8).contains(&delta), "{delta}");
    assert_eq!(pair.change, Some(gapscope::analysis::stats::Change::Slower));
    let h = a.headline.as_ref().expect("a headline");
    assert_eq!(
        h.basis,
        gapscope::analysis::headline::Basis::ModeCost,
        "{h:?}"
    );
    assert_eq!(h.cell, pair.head, "{h:?}");
}
