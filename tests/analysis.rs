//! Analysis on synthetic traces: attribution, pairing, invariants.

use gapscope::analysis::{self, AnalysisOptions, Cause, CauseKind, Regime};
use gapscope::synthetic::{self, SyntheticCell};
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
        Some("2 (mixing)")
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
            Cause::ExternalEventWait {
                wait_node,
                record_node,
                created_by,
                library_call,
            } => {
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
        Some("0/1 (no mixing)")
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
    let cmp = analysis::align::compare(base, head, 1.01);
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
