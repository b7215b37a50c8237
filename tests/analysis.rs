//! Analysis on synthetic traces: attribution, pairing, invariants.

use gapscope::analysis::{self, AnalysisOptions, Cause, CauseKind, ExternalWait, Regime};
use gapscope::trace::synthetic::{self, SyntheticCell};
use gapscope::trace::{self, Kernel, Marker, MarkerKind, Trace};
use proptest::prelude::*;

fn analyze(trace: &Trace) -> analysis::Analysis {
    analysis::analyze(
        std::slice::from_ref(trace),
        &["synthetic".to_owned()],
        &AnalysisOptions::default(),
    )
}

fn cell<'a>(a: &'a analysis::Analysis, label: &str) -> &'a analysis::CellAnalysis {
    a.cells.iter().find(|c| c.label == label).expect(label)
}

#[test]
fn mode2_pre_collective_gap_is_the_external_wait_inside_nccl_all_gather() {
    let a = analyze(&synthetic::emu_experiment(50));
    let graphed = cell(&a, "graphed mode=2 T=1 emu");
    assert_eq!(graphed.observed.regime, Some(Regime::Graphed));
    assert_eq!(graphed.observed.external_wait_nodes, 1);
    assert_eq!(graphed.observed.external_record_nodes, 1);
    assert_eq!(
        graphed.observed.graph_usage_mode.as_deref(),
        Some("2 (2 external event nodes, from NCCL)")
    );
    assert!(graphed.mismatches.is_empty(), "{:?}", graphed.mismatches);
    // Every steady step: the gap before `coll` is the external wait node of the exec graph.
    for step in graphed.steps.iter().skip(1) {
        let gap = step
            .gaps
            .iter()
            .find(|g| g.cause.kind() == CauseKind::ExternalEventWait)
            .expect("a gap caused by the external wait");
        match &gap.cause {
            Cause::ExternalEventWait(wait) => {
                let ExternalWait {
                    wait_node,
                    record_node,
                    created_by,
                    library_call,
                    confidence,
                } = &**wait;
                assert!(confidence.is_sure(), "a recorded DAG's evidence is sure");
                assert_eq!(wait_node >> 32, u64::from(step.graph_exec.unwrap()));
                assert!(record_node.is_some());
                assert_eq!(created_by.as_deref(), Some("cudaStreamWaitEvent"));
                assert_eq!(library_call.as_deref(), Some("ncclAllGather"));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(gap.cause.label().contains("NCCL graph usage mode 2"));
        assert!((1_650..=1_730).contains(&gap.len()), "{}", gap.len());
    }
    let seq: Vec<&str> = graphed.sequence.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(seq, ["spin", "coll", "spin", "spin"]);
    assert_eq!(graphed.sequence[1].gap_cause, CauseKind::ExternalEventWait);
}

#[test]
fn mode1_has_no_external_wait_gap() {
    let a = analyze(&synthetic::emu_experiment(50));
    let graphed = cell(&a, "graphed mode=1 T=1 emu");
    assert_eq!(graphed.observed.external_wait_nodes, 0);
    assert_eq!(
        graphed.observed.graph_usage_mode.as_deref(),
        Some("1 (no external event nodes)")
    );
    for step in &graphed.steps {
        assert!(
            step.gaps
                .iter()
                .all(|g| g.cause.kind() != CauseKind::ExternalEventWait)
        );
    }
    assert_eq!(graphed.sequence[1].gap_cause, CauseKind::GraphDependency);
}

#[test]
fn eager_and_graphed_pairs_and_mode_comparison() {
    let a = analyze(&synthetic::emu_experiment(60));
    assert_eq!(a.regime_pairs.len(), 2);
    for pair in &a.regime_pairs {
        assert_eq!(a.cells[pair.base].observed.regime, Some(Regime::Eager));
        assert_eq!(a.cells[pair.head].observed.regime, Some(Regime::Graphed));
        assert!(pair.durations_within_spread, "{pair:?}");
    }
    // mode 1 (base) vs mode 2 (head): the growth is the external wait.
    let mode = |m: u8| synthetic::trace(&[SyntheticCell::emu(true, m, 60)], 7);
    let base = analyze(&mode(1));
    let head = analyze(&mode(2));
    let cmp = analysis::compare::compare(base, head, 1.01);
    assert_eq!(cmp.cells.len(), 1);
    let c = &cmp.cells[0];
    let (kind, label, grown) = &c.gap_growth_by_cause[0];
    assert_eq!(*kind, CauseKind::ExternalEventWait);
    assert!(label.contains("ncclAllGather"));
    let delta = c.period_delta.unwrap();
    assert!((grown - delta).abs() < 0.1 * delta, "{grown} vs {delta}");
    assert!(!cmp.breached.is_empty(), "900 ns on ~25 µs is beyond 1 %");
}

#[test]
fn eager_only_kernel_is_aligned_one_sided() {
    let mut eager = SyntheticCell::emu(false, 1, 20);
    eager.eager_only_kernel = true;
    let t = synthetic::trace(&[eager, SyntheticCell::emu(true, 1, 20)], 3);
    let a = analyze(&t);
    let pair = &a.regime_pairs[0];
    let fill = pair.aligned.iter().find(|o| o.name == "fill").unwrap();
    assert!(fill.base.is_some() && fill.head.is_none());
    assert_eq!(
        pair.aligned
            .iter()
            .filter(|o| o.base.is_some() && o.head.is_some())
            .count(),
        4
    );
}

#[test]
fn overlapping_streams_are_not_double_counted_in_steps() {
    let mut b = trace::TraceBuilder::new(Default::default());
    let k = b.intern("k");
    let launch = b.intern("cudaLaunchKernel");
    let step = b.intern("step");
    // One step: stream 1 busy 0..10 µs, stream 2 busy 5..15 µs, then stream 1 at 20..25 µs.
    for (corr, (start, end, stream)) in [(0, 10_000, 1), (5_000, 15_000, 2), (20_000, 25_000, 1)]
        .into_iter()
        .enumerate()
    {
        b.trace.kernels.push(Kernel {
            start,
            end,
            device: 0,
            stream,
            corr: corr as u32 + 1,
            name: k,
            graph: 0,
            node: 0,
        });
        b.trace.api_calls.push(gapscope::trace::ApiCall {
            start: 0,
            end: 1,
            corr: corr as u32 + 1,
            thread: 1,
            name: launch,
            domain: Default::default(),
        });
    }
    b.trace.markers.push(Marker {
        start: 0,
        end: 2,
        name: step,
        kind: MarkerKind::Step,
        thread: 1,
        cell: None,
    });
    let a = analyze(&b.finish());
    let s = &a.cells[0].steps[0];
    assert_eq!(s.idle, 5_000);
    assert_eq!(s.busy, 20_000);
    assert_eq!(s.gaps.len(), 1);
    assert_eq!((s.gaps[0].start, s.gaps[0].end), (15_000, 20_000));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Attributed + unattributed = measured idle time, exactly, on every step; and every
    /// window is busy + idle.
    #[test]
    fn attribution_covers_idle_time_exactly(
        seed in any::<u64>(),
        graphed in any::<bool>(),
        mode in 1u8..=2,
        gap in 0u64..50_000,
        other in 0u64..5_000,
        extra in 0usize..4,
        steps in 1usize..20,
    ) {
        let mut c = SyntheticCell::emu(graphed, mode, steps);
        c.gap_before_collective = gap;
        c.gap_other = other;
        c.extra_kernels = extra;
        let a = analyze(&synthetic::trace(&[c], seed));
        for cell in &a.cells {
            for s in &cell.steps {
                let by_cause: u64 = s.gaps.iter().map(|g| g.len()).sum();
                prop_assert_eq!(by_cause, s.idle);
                prop_assert_eq!(s.busy + s.idle, s.end - s.window_start);
                for g in &s.gaps {
                    prop_assert!(g.start < g.end);
                }
            }
        }
    }
}

#[test]
fn trace_round_trip_through_a_file() {
    let t = synthetic::emu_experiment(5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    trace::write_trace(&path, &t).unwrap();
    assert_eq!(trace::read_trace(&path).unwrap(), t);
}

#[test]
fn unknown_schema_version_is_refused() {
    let mut v = serde_json::to_value(synthetic::emu_experiment(1)).unwrap();
    v["schema_version"] = 99.into();
    let err = trace::parse_trace(v.to_string().as_bytes(), "x.json".as_ref()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(
        err,
        trace::TraceError::UnsupportedVersion { found: 99, .. }
    ));
    assert!(msg.contains("version 99") && !msg.contains('\n'), "{msg}");
}

#[test]
fn one_marked_cell_with_both_regimes_is_split_and_paired() {
    // As in a user's program with one NVTX range name around eager steps and graph replays.
    let mut t = synthetic::trace(
        &[
            SyntheticCell::emu(false, 2, 20),
            SyntheticCell::emu(true, 2, 20),
        ],
        9,
    );
    for m in &mut t.markers {
        m.cell = Some(0);
    }
    let a = analyze(&t);
    let labels: Vec<&str> = a.cells.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "eager mode=2 T=1 emu (eager)",
            "eager mode=2 T=1 emu (graphed)"
        ]
    );
    assert_eq!(a.regime_pairs.len(), 1);
    assert_eq!(
        a.cells[a.regime_pairs[0].head].observed.regime,
        Some(Regime::Graphed)
    );
}

/// A user's program: eager steps in NVTX step ranges, graphs replayed outside them (as vLLM,
/// SGLang and torch.compile do). `graphed` cells lose their step markers and metadata.
fn replays_outside_step_ranges(cells: &[SyntheticCell]) -> Trace {
    let mut t = synthetic::trace(cells, 11);
    let graphed: Vec<u32> = (0..cells.len() as u32)
        .filter(|&i| cells[i as usize].graphed)
        .collect();
    t.markers
        .retain(|m| m.kind != MarkerKind::Step || !m.cell.is_some_and(|c| graphed.contains(&c)));
    for c in &mut t.metadata.cells {
        c.requested.clear();
    }
    t
}

#[test]
fn graph_launches_outside_step_ranges_are_steps_grouped_by_what_the_graph_is() {
    let t = replays_outside_step_ranges(&[
        SyntheticCell::emu(false, 2, 40),
        SyntheticCell::emu(true, 2, 40),
        SyntheticCell::emu(true, 1, 40),
    ]);
    let a = analyze(&t);
    let labels: Vec<&str> = a.cells.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels.len(), 3, "{labels:?}");
    assert_eq!(a.cells[0].observed.regime, Some(Regime::Eager));
    // Same kernels, different node types (external event nodes): two identities, two cells.
    let (m2, m1) = (&a.cells[1], &a.cells[2]);
    assert!(m2.label.starts_with("graph G1 replays"), "{}", m2.label);
    assert!(m1.label.starts_with("graph G2 replays"), "{}", m1.label);
    assert_eq!(m2.observed.external_wait_nodes, 1);
    assert_eq!(m1.observed.external_wait_nodes, 0);
    assert_eq!(m2.steps.len(), 40);
    assert!(m2.steps[0].first_launch && !m2.steps[1].first_launch);
    assert_eq!(m2.period.as_ref().unwrap().n, 39);
    // Both graphed cells pair with the eager cell through their aligned kernel sequences.
    assert_eq!(a.regime_pairs.len(), 2);
    assert!(a.regime_pairs.iter().all(|p| p.base == 0));
    // The mode-2-like graph is compared with the mode-1-like one as mode 2 with mode 1.
    assert_eq!(a.mode_pairs.len(), 1);
    let p = &a.mode_pairs[0];
    assert_eq!((p.base, p.head), (2, 1));
    assert_eq!(
        p.graph_difference.as_deref(),
        Some("+1 EventRecord (external), +1 EventWait (external)")
    );
    assert_eq!(p.gap_growth_by_cause[0].0, CauseKind::ExternalEventWait);
    assert!(
        p.gap_growth_by_cause[0].2 > 500.0,
        "{:?}",
        p.gap_growth_by_cause
    );
}

#[test]
fn graphs_launched_once_each_share_a_cell_of_first_launches() {
    let mut t = replays_outside_step_ranges(&[
        SyntheticCell::emu(false, 1, 30),
        SyntheticCell::emu(true, 1, 30),
    ]);
    // Give every launch its own executable graph id, as a fresh instantiation would.
    let exec = t.kernels.iter().find(|k| k.graph != 0).unwrap().graph;
    for k in &mut t.kernels {
        if k.graph == exec {
            k.graph = 1000 + k.corr;
        }
    }
    let a = analyze(&t);
    assert_eq!(a.cells.len(), 2);
    let fresh = &a.cells[1];
    assert!(
        fresh
            .label
            .starts_with("graph G1 first launches (30 executable graphs"),
        "{}",
        fresh.label
    );
    assert!(fresh.steps.iter().all(|s| s.first_launch));
    assert_eq!(fresh.first_launch_period.as_ref().unwrap().n, 29);
    assert_eq!(fresh.launch_pattern(), Some("fresh"));
    assert_eq!(a.regime_pairs.len(), 1);
}

#[test]
fn launches_of_graphs_the_step_ranges_also_launch_are_warm_up() {
    // gapscope's own runner launches each graph once before its marked steps.
    let mut t = synthetic::trace(&[SyntheticCell::emu(true, 2, 20)], 5);
    let first_step = t.markers.iter().position(|m| m.kind == MarkerKind::Step);
    t.markers.remove(first_step.unwrap());
    let a = analyze(&t);
    assert_eq!(a.cells.len(), 1);
    assert_eq!(a.cells[0].steps.len(), 19);
}

/// A gap of the eager emu cell (step 5) that the host was late to launch the next kernel
/// into: (trace, gap start, that kernel's launch call).
fn eager_gap_launched_late() -> (Trace, u64, trace::ApiCall) {
    let t = synthetic::trace(&[SyntheticCell::emu(false, 1, 20)], 3);
    let a = analyze(&t);
    let gap = cell(&a, "eager mode=1 T=1 emu").steps[5]
        .gaps
        .iter()
        .find(|g| g.cause.kind() == CauseKind::HostLaunchBound)
        .expect("a host launch-bound gap");
    let kernel = t
        .kernels
        .iter()
        .find(|k| k.start == gap.end)
        .expect("kernel");
    let launch = *t
        .api_calls
        .iter()
        .find(|c| c.corr == kernel.corr)
        .expect("its launch");
    assert!(launch.start > gap.start);
    (t, gap.start, launch)
}

fn cause_of_gap_at(t: &Trace, start: u64) -> CauseKind {
    let a = analyze(t);
    let step = &cell(&a, "eager mode=1 T=1 emu").steps[5];
    let gap = step.gaps.iter().find(|g| g.start == start).expect("gap");
    gap.cause.kind()
}

#[test]
fn a_blocking_sync_is_read_from_sync_records_or_from_the_synchronize_call() {
    let (plain, start, launch) = eager_gap_launched_late();
    assert_eq!(cause_of_gap_at(&plain, start), CauseKind::HostLaunchBound);
    // Blocked from before the device went idle until just before the launch.
    let (blocked_from, blocked_to) = (start - 500, launch.start - 10);

    let mut with_record = plain.clone();
    with_record.strings.push("stream_synchronize".to_owned());
    with_record.syncs.push(trace::Sync {
        start: blocked_from,
        end: blocked_to,
        kind: (with_record.strings.len() - 1) as u32,
        ..Default::default()
    });
    assert_eq!(
        cause_of_gap_at(&with_record, start),
        CauseKind::Synchronization
    );

    // No SYNCHRONIZATION record (record's default): the API record of the call itself.
    for name in ["cudaStreamSynchronize_v3020", "cuCtxSynchronize"] {
        let mut with_call = plain.clone();
        with_call.strings.push(name.to_owned());
        let thread = launch.thread;
        with_call.api_calls.push(trace::ApiCall {
            start: blocked_from,
            end: blocked_to,
            corr: u32::MAX,
            thread,
            name: (with_call.strings.len() - 1) as u32,
            ..Default::default()
        });
        assert_eq!(
            cause_of_gap_at(&with_call, start),
            CauseKind::Synchronization,
            "{name}"
        );
    }
    // A non-blocking call over the same span changes nothing.
    let mut with_query = plain.clone();
    with_query.strings.push("cudaStreamQuery_v3020".to_owned());
    with_query.api_calls.push(trace::ApiCall {
        start: blocked_from,
        end: blocked_to,
        corr: u32::MAX,
        name: (with_query.strings.len() - 1) as u32,
        ..Default::default()
    });
    assert_eq!(
        cause_of_gap_at(&with_query, start),
        CauseKind::HostLaunchBound
    );
}

#[test]
fn cells_of_several_inputs_with_one_label_say_whose_they_are() {
    let one = synthetic::trace(&[SyntheticCell::emu(true, 2, 10)], 1);
    let mut other = one.clone();
    let paths = ["runs/a.json".to_owned(), "runs/b.json (bundled)".to_owned()];
    let labels = |traces: &[Trace]| -> Vec<String> {
        analysis::analyze(traces, &paths, &AnalysisOptions::default())
            .cells
            .into_iter()
            .map(|c| c.label)
            .collect()
    };
    // Two processes of one program: named by rank.
    other.metadata.rank = 1;
    assert_eq!(
        labels(&[one.clone(), other.clone()]),
        [
            "graphed mode=2 T=1 emu [rank 0]",
            "graphed mode=2 T=1 emu [rank 1]"
        ]
    );
    // Two runs of rank 0 (e.g. before and after a change): named by file.
    other.metadata.rank = 0;
    assert_eq!(
        labels(&[one.clone(), other.clone()]),
        ["graphed mode=2 T=1 emu [a]", "graphed mode=2 T=1 emu [b]"]
    );
    // Same file names in two folders: named by position.
    let same_names = [
        "base/trace-0.json".to_owned(),
        "head/trace-0.json".to_owned(),
    ];
    let by_position: Vec<String> = analysis::analyze(
        &[one.clone(), other.clone()],
        &same_names,
        &AnalysisOptions::default(),
    )
    .cells
    .into_iter()
    .map(|c| c.label)
    .collect();
    assert_eq!(
        by_position,
        [
            "graphed mode=2 T=1 emu [input 0]",
            "graphed mode=2 T=1 emu [input 1]"
        ]
    );
    // Labels no other input has stay as they are.
    let mode1 = synthetic::trace(&[SyntheticCell::emu(true, 1, 10)], 1);
    assert_eq!(
        labels(&[one, mode1]),
        ["graphed mode=2 T=1 emu", "graphed mode=1 T=1 emu"]
    );
}
