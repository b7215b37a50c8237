#![forbid(unsafe_code)]
//! Hand-built traces and analysis results for the report tests (no analysis code involved).

use crate::analysis::stats::{Change, Geomean, Stat};
use crate::analysis::{
    AlignedOp, Analysis, Cause, CauseKind, CauseTotal, CellAnalysis, CellComparison, Comparison,
    Confidence, ExternalWait, Gap, InputSummary, Observed, Op, OpKind, Regime, SequenceEntry, Step,
    TraceTimeline,
};
use crate::trace::{
    ApiCall, Cell, CudaLibrary, Kernel, LoadedLibrary, MemOp, Metadata, Source, Trace,
    TraceBuilder, Versions,
};

/// The NCCL the fixture's program loaded.
pub const NCCL_PATH: &str = "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2";
use std::collections::BTreeMap;

/// A realistic CLOCK_REALTIME origin, so tests see the origin subtracted.
pub const T0: u64 = 1_700_000_000_000_000_000;
pub const EAGER_PERIOD: u64 = 27_000;
pub const GRAPHED_PERIOD: u64 = 28_000;
pub const STEPS: usize = 4;
/// Start of the graphed cell relative to T0.
pub const GRAPHED_AT: u64 = 1_000_000;

/// (name, kind, stream, start, end) relative to the step start.
const SHAPE: [(&str, OpKind, u32, u64, u64); 5] = [
    ("memset", OpKind::Memset, 7, 0, 1_000),
    (
        "void convert_topk<int>(int*)",
        OpKind::Kernel,
        7,
        1_500,
        4_000,
    ),
    (
        "ncclDevKernel_AllGather_RING_LL",
        OpKind::Kernel,
        7,
        5_500,
        10_000,
    ),
    ("dispatch", OpKind::Kernel, 7, 10_500, 20_000),
    ("combine", OpKind::Kernel, 9, 20_500, 26_000),
];

fn requested(regime: &str, mode: u32) -> BTreeMap<String, serde_json::Value> {
    let mut m = BTreeMap::new();
    m.insert("T".to_owned(), serde_json::json!(8));
    m.insert("launch".to_owned(), serde_json::json!("replay"));
    m.insert("regime".to_owned(), serde_json::json!(regime));
    m.insert(
        crate::trace::GRAPH_USAGE_MODE_KEY.to_owned(),
        serde_json::json!(mode),
    );
    m
}

/// One synthetic trace with an eager cell and a graphed (mode 2) cell of 4 steps each, and the
/// analysis of it as the analysis code would produce it. The graphed cell's step 1 holds two
/// overlapping ops on stream 7 (clock jitter).
pub fn fixture() -> (Vec<Trace>, Analysis) {
    let meta = Metadata {
        tool: "gapscope test".into(),
        source: Source::Synthetic,
        device: None,
        versions: Versions {
            driver: Some("580.1".into()),
            cuda_runtime: Some("13.0".into()),
            cupti: None,
            nccl: Some("2.30.7".into()),
            nccl_library: Some(NCCL_PATH.into()),
            loaded: vec![
                LoadedLibrary {
                    library: CudaLibrary::Nccl,
                    version: Some("2.30.7".into()),
                    path: NCCL_PATH.into(),
                },
                LoadedLibrary {
                    library: CudaLibrary::Cublas,
                    version: Some("13.1.0".into()),
                    path: "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13"
                        .into(),
                },
            ],
        },
        rank: 0,
        world: 8,
        cells: vec![
            Cell {
                label: "eager T=8".into(),
                requested: requested("eager", 2),
                event_periods_ns: vec![],
                reference: Default::default(),
            },
            Cell {
                label: "graphed mode=2 T=8".into(),
                requested: requested("graphed", 2),
                event_periods_ns: vec![27_900.0, 28_100.0],
                reference: Default::default(),
            },
        ],
        workload: BTreeMap::new(),
        notes: vec!["made by a test".into()],
        sampling: None,
        unended_ranges: 0,
    };
    let mut b = TraceBuilder::new(meta);
    let names: Vec<u32> = SHAPE.iter().map(|s| b.intern(s.0)).collect();
    let launch = b.intern("cudaLaunchKernel");
    let graph_launch = b.intern("cudaGraphLaunch");
    let memset_api = b.intern("cudaMemsetAsync");
    let mut ops: Vec<Op> = Vec::new();
    let mut corr = 1u32;
    // (cell, step) -> op indices filled after sorting.
    let mut raw: Vec<(usize, usize, usize, Op)> = Vec::new(); // (cell, step, position, op)
    for (cell, regime) in [(0usize, Regime::Eager), (1, Regime::Graphed)] {
        let period = if cell == 0 {
            EAGER_PERIOD
        } else {
            GRAPHED_PERIOD
        };
        let cell_at = if cell == 0 { 0 } else { GRAPHED_AT };
        for s in 0..STEPS {
            let step_at = T0 + cell_at + s as u64 * period;
            // The graphed cell waits longer before the all-gather: 1.5 µs more each step.
            let extra = if regime == Regime::Graphed { 1_000 } else { 0 };
            let graph_corr = corr;
            if regime == Regime::Graphed {
                b.trace.api_calls.push(ApiCall {
                    start: step_at - 3_000,
                    end: step_at - 1_000,
                    corr: graph_corr,
                    thread: 4242,
                    name: graph_launch,
                    ..Default::default()
                });
                corr += 1;
            }
            for (p, &(_, kind, stream, a, z)) in SHAPE.iter().enumerate() {
                let shift = if p >= 2 { extra } else { 0 };
                let (mut start, end) = (step_at + a + shift, step_at + z + shift);
                if regime == Regime::Graphed && s == 1 && p == 3 {
                    // Starts 200 ns before the all-gather ends: overlapping records.
                    start = step_at + SHAPE[2].4 + shift - 200;
                }
                let op_corr = if regime == Regime::Graphed {
                    graph_corr
                } else {
                    b.trace.api_calls.push(ApiCall {
                        start: start - 2_000,
                        end: start - 1_200,
                        corr,
                        thread: 4242,
                        name: if kind == OpKind::Memset {
                            memset_api
                        } else {
                            launch
                        },
                        ..Default::default()
                    });
                    corr += 1;
                    corr - 1
                };
                let (graph, node) = if regime == Regime::Graphed {
                    (5, (5u64 << 32) | p as u64)
                } else {
                    (0, 0)
                };
                let op = Op {
                    start,
                    end,
                    device: 0,
                    stream,
                    corr: op_corr,
                    name: names[p],
                    kind,
                    graph,
                    node,
                };
                match kind {
                    OpKind::Memset => b.trace.memsets.push(MemOp {
                        start,
                        end,
                        stream,
                        corr: op_corr,
                        bytes: 4096,
                        kind: names[p],
                        graph,
                        node,
                        ..Default::default()
                    }),
                    _ => b.trace.kernels.push(Kernel {
                        start,
                        end,
                        device: 0,
                        stream,
                        corr: op_corr,
                        name: names[p],
                        graph,
                        node,
                    }),
                }
                raw.push((cell, s, p, op));
            }
        }
    }
    raw.sort_by_key(|r| r.3.start);
    let mut index_of = BTreeMap::new();
    for (i, r) in raw.iter().enumerate() {
        ops.push(r.3);
        index_of.insert((r.0, r.1, r.2), i);
    }
    let trace = b.finish();

    let mut cells = Vec::new();
    for (cell, regime) in [(0usize, Regime::Eager), (1, Regime::Graphed)] {
        let mut steps: Vec<Step> = Vec::new();
        for s in 0..STEPS {
            let mut idx: Vec<usize> = (0..SHAPE.len()).map(|p| index_of[&(cell, s, p)]).collect();
            idx.sort_by_key(|&i| ops[i].start);
            let start = ops[idx[0]].start;
            let end = idx.iter().map(|&i| ops[i].end).max().unwrap();
            let window_start = steps.last().map_or(start, |p: &Step| p.end);
            let mut gaps = Vec::new();
            let mut cursor = window_start;
            let mut before: Option<usize> = steps.last().and_then(|p| p.ops.last().copied());
            for &i in &idx {
                let op = ops[i];
                if op.start > cursor {
                    let p = SHAPE
                        .iter()
                        .position(|x| trace.str(op.name) == x.0)
                        .unwrap();
                    let cause = match (regime, p) {
                        (Regime::Graphed, 0) => Cause::GraphLaunch,
                        (Regime::Graphed, 2) => Cause::ExternalEventWait(Box::new(ExternalWait {
                            wait_node: (5u64 << 32) | 9,
                            record_node: Some((5u64 << 32) | 10),
                            created_by: Some("cudaStreamWaitEvent".into()),
                            library_call: Some("ncclAllGather".into()),
                            confidence: Confidence::Sure,
                        })),
                        (_, 4) => Cause::CrossStreamJoin { from_stream: 7 },
                        (Regime::Graphed, _) => Cause::GraphDependency,
                        (Regime::Eager, _) => Cause::HostLaunchBound,
                    };
                    gaps.push(Gap {
                        start: cursor,
                        end: op.start,
                        stream: op.stream,
                        before,
                        after: i,
                        cause,
                    });
                }
                cursor = cursor.max(op.end);
                before = Some(i);
            }
            let idle: u64 = gaps.iter().map(Gap::len).sum();
            steps.push(Step {
                index: s,
                regime,
                graph_exec: (regime == Regime::Graphed).then_some(5),
                first_launch: regime == Regime::Graphed && s == 0,
                start,
                end,
                window_start,
                ops: idx,
                gaps,
                busy: end - window_start - idle,
                idle,
                period: steps.last().map(|p| end - p.end),
            });
        }
        let period = Stat::of_ns(steps.iter().filter_map(|s| s.period));
        let busy = Stat::of_ns(steps.iter().map(|s| s.busy));
        let idle = Stat::of_ns(steps.iter().map(|s| s.idle));
        let mut by_cause: BTreeMap<CauseKind, (Vec<u64>, String)> = BTreeMap::new();
        for s in &steps {
            let mut per: BTreeMap<CauseKind, u64> = BTreeMap::new();
            for g in &s.gaps {
                *per.entry(g.cause.kind()).or_default() += g.len();
                by_cause
                    .entry(g.cause.kind())
                    .or_insert_with(|| (Vec::new(), g.cause.label()));
            }
            for (k, v) in per {
                by_cause.get_mut(&k).unwrap().0.push(v);
            }
        }
        let idle_by_cause = by_cause
            .into_iter()
            .map(|(cause, (v, example))| CauseTotal {
                cause,
                example,
                per_step: Stat::of_ns(v).unwrap(),
            })
            .collect();
        let sequence = SHAPE
            .iter()
            .enumerate()
            .map(|(p, &(name, kind, ..))| {
                let opi = |s: &Step| index_of[&(cell, s.index, p)];
                let gap_of = |s: &Step| {
                    s.gaps
                        .iter()
                        .filter(|g| g.after == opi(s))
                        .map(Gap::len)
                        .sum::<u64>()
                };
                let cause = steps
                    .iter()
                    .flat_map(|s| s.gaps.iter().filter(|g| g.after == opi(s)))
                    .map(|g| (g.cause.kind(), g.cause.label()))
                    .next_back()
                    .unwrap_or((CauseKind::Unattributed, "unattributed".into()));
                SequenceEntry {
                    library_call: None,
                    provenance: None,
                    host_time: None,
                    name: name.to_owned(),
                    kind,
                    duration: Stat::of_ns(steps.iter().map(|s| {
                        let o = ops[opi(s)];
                        o.end - o.start
                    }))
                    .unwrap(),
                    gap_before: Stat::of_ns(steps.iter().map(gap_of)).unwrap(),
                    gap_cause: cause.0,
                    gap_cause_label: cause.1,
                }
            })
            .collect();
        cells.push(CellAnalysis {
            reference: Default::default(),
            host_time: None,
            graph_group: None,
            found: None,
            sampled: None,
            tracer_share: None,
            untraced_period: None,
            untraced_window_medians: Vec::new(),
            first_launches_inflated_by_cupti: false,
            cupti_launch_cost: None,
            period_runs: None,
            period_block_medians: Vec::new(),
            trace: 0,
            label: trace.metadata.cells[cell].label.clone(),
            requested: trace.metadata.cells[cell].requested.clone(),
            observed: Observed {
                node_counts: Default::default(),
                regime: Some(regime),
                external_wait_nodes: usize::from(regime == Regime::Graphed),
                external_record_nodes: usize::from(regime == Regime::Graphed),
                host_nodes: 0,
                graph_usage_mode: (regime == Regime::Graphed)
                    .then(|| "2 (2 external event nodes, from NCCL)".to_owned()),
                external_nodes_from_nccl: regime == Regime::Graphed,
                graph_coverage: Some(if regime == Regime::Graphed { 1.0 } else { 0.0 }),
                ..Observed::default()
            },
            mismatches: if cell == 1 {
                vec![
                    "requested graph usage mode 1, observed 2 (2 external event nodes, from NCCL)"
                        .into(),
                ]
            } else {
                vec![]
            },
            period,
            first_launch_period: None,
            event_period: {
                let mut v = trace.metadata.cells[cell].event_periods_ns.clone();
                Stat::of(&mut v)
            },
            busy,
            idle,
            idle_by_cause,
            host_bound_launch_calls: None,
            host_before_launch: None,
            sequence,
            steps,
        });
    }
    let pair = compare_cells(&cells, 0, 1);
    let geomean_ratio = Geomean::of(&[pair.ratio.unwrap()]);
    let analysis = Analysis {
        mode_pairs: Vec::new(),
        remedies: Vec::new(),
        withheld_remedies: Vec::new(),
        headline: None,
        inputs: vec![InputSummary {
            path: "runs/ht_decode.trace.json".into(),
            source: Source::Synthetic,
            device: Some("NVIDIA H200".into()),
            versions: trace.metadata.versions.clone(),
            dropped_records: 3,
            notes: trace.metadata.notes.clone(),
            kernels: trace.kernels.len(),
            damage: Vec::new(),
            completeness: crate::analysis::completeness::check(&trace),
            steps: Default::default(),
            trace_budget: None,
        }],
        cells,
        regime_pairs: vec![pair],
        not_paired: Vec::new(),
        geomean_ratio,
        timelines: vec![TraceTimeline { ops }],
    };
    (vec![trace], analysis)
}

/// What `align` would produce for two cells of the same shape.
pub fn compare_cells(cells: &[CellAnalysis], base: usize, head: usize) -> CellComparison {
    compare_between(&cells[base], base, &cells[head], head)
}

pub fn compare_between(
    b: &CellAnalysis,
    base: usize,
    h: &CellAnalysis,
    head: usize,
) -> CellComparison {
    let (bp, hp) = (b.period.unwrap(), h.period.unwrap());
    let aligned: Vec<AlignedOp> = b
        .sequence
        .iter()
        .zip(&h.sequence)
        .enumerate()
        .map(|(p, (x, y))| AlignedOp {
            name: x.name.clone(),
            base: Some(p),
            head: Some(p),
            duration_delta: Some(y.duration.median - x.duration.median),
            gap_before_delta: Some(y.gap_before.median - x.gap_before.median),
            base_gap_cause: Some(x.gap_cause_label.clone()),
            head_gap_cause: Some(y.gap_cause_label.clone()),
        })
        .collect();
    let delta = hp.median - bp.median;
    CellComparison {
        kernel_durations: crate::analysis::cell_comparison::kernel_durations(
            &aligned,
            b,
            h,
            Some(0.0),
            true,
        ),
        // All of the period change is the external event wait's (below).
        external_event_share: (delta > 0.0).then_some(1.0),
        graphs_differ_only_by_external: false,
        pairing: None,
        graph_difference: None,
        host_code_change: None,
        judged_untraced: false,
        traced_host_bound: false,
        duration_delta_total: 0.0,
        one_sided_ops_total: 0.0,
        key: b.workload_key(),
        base,
        head,
        base_label: b.label.clone(),
        head_label: h.label.clone(),
        ratio: Some(hp.median / bp.median),
        change: Some(Change::between(&bp, &hp)),
        no_verdict: None,
        aligned,
        max_duration_delta_pct: Some(0.0),
        durations_within_spread: true,
        period_delta: Some(hp.median - bp.median),
        gap_growth_by_cause: vec![(
            CauseKind::ExternalEventWait,
            "external event-wait node 0x500000009 (cudaStreamWaitEvent inside ncclAllGather)"
                .into(),
            hp.median - bp.median,
        )],
        causes_gone_in_head: Vec::new(),
        within_tracer_effect: None,
        untraced_period_delta: None,
    }
}

/// base = the fixture; head = the same workload after the fix (graphed period equal to eager),
/// compared graphed cell to graphed cell.
pub fn comparison(threshold: f64, breached: Vec<String>) -> Comparison {
    let (_, base) = fixture();
    let mut head = base.clone();
    // After the fix: graphed period 26.9 µs with a small spread.
    head.cells[1].period = Stat::of(&mut [26_800.0, 26_900.0, 27_000.0]);
    head.cells[1].label = "graphed mode=1 T=8".into();
    let cells = vec![
        compare_between(&base.cells[0], 0, &head.cells[0], 0),
        compare_between(&base.cells[1], 1, &head.cells[1], 1),
    ];
    let ratios: Vec<f64> = cells.iter().filter_map(|c| c.ratio).collect();
    Comparison {
        geomean_ratio: Geomean::of(&ratios),
        base,
        head,
        cells,
        unmatched: vec!["graphed mode=2 T=512 (base only)".into()],
        threshold,
        breached,
        realised: Vec::new(),
        device_mismatch: None,
        host_bound_slowdowns: Vec::new(),
    }
}
