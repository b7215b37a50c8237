//! End-to-end check of the recorder on a real GPU (ignored by default: needs an NVIDIA GPU,
//! its driver and libcupti). Run: `cargo test --lib cupti::gpu_tests -- --ignored --nocapture`.
//!
//! Captures, with driver API calls only, a small version of NCCL's mode-2 shape:
//! kernel → external event wait (inside a LibraryCall marker) → kernel → external event
//! record → kernel, instantiates it and replays it three times.

use super::{Recorder, RecorderConfig, ensure_cuda_driver};
use crate::trace::{Cell, Metadata, NodeType};
use cudarc::driver::sys as cu;
use std::collections::HashSet;
use std::ffi::c_void;
use std::ptr::null_mut;

/// A kernel that does nothing, as PTX (JIT-compiled by the driver: no NVRTC needed).
const PTX: &str =
    ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry noop()\n{\n ret;\n}\n\0";

#[track_caller]
fn ck(r: cu::CUresult) {
    assert_eq!(r, cu::CUresult::CUDA_SUCCESS, "CUDA driver call failed");
}

#[test]
#[ignore = "needs an NVIDIA GPU, its driver and libcupti (run with --ignored)"]
fn records_a_captured_graph_with_external_event_nodes() {
    let _one = super::state::lock(&super::recorder::TEST_RECORDER_LOCK);
    if let Err(e) = ensure_cuda_driver() {
        panic!("needs an NVIDIA GPU and its driver: {e}");
    }
    let rec = Recorder::start(RecorderConfig {
        event_records: true,
        api_callbacks: super::ApiCallbacks::GraphBuildingWithLaunches,
        ..RecorderConfig::default()
    })
    .expect("recorder starts");
    let cell = rec.add_cell(Cell {
        label: "graphed".into(),
        ..Default::default()
    });
    let replays = 3;
    // SAFETY: plain CUDA driver calls with valid out-pointers, on one thread, in order.
    unsafe {
        let (f, s) = noop_kernel_and_stream();
        let mut wait_ev = null_mut();
        let mut rec_ev = null_mut();
        let no_timing = cu::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING as u32;
        ck(cu::cuEventCreate(&mut wait_ev, no_timing));
        ck(cu::cuEventCreate(&mut rec_ev, no_timing));
        ck(cu::cuEventRecord(wait_ev, s));
        let launch = |s| launch_noop(f, s);

        ck(cu::cuStreamBeginCapture_v2(
            s,
            cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        ));
        launch(s);
        {
            let _lib = rec.library_call("fakeAllGather");
            ck(cu::cuStreamWaitEvent(
                s,
                wait_ev,
                cu::CUevent_wait_flags_enum::CU_EVENT_WAIT_EXTERNAL as u32,
            ));
            launch(s);
            ck(cu::cuEventRecordWithFlags(
                rec_ev,
                s,
                cu::CUevent_record_flags_enum::CU_EVENT_RECORD_EXTERNAL as u32,
            ));
        }
        launch(s);
        let mut graph = null_mut();
        ck(cu::cuStreamEndCapture(s, &mut graph));
        let mut exec = null_mut();
        ck(cu::cuGraphInstantiateWithFlags(&mut exec, graph, 0));
        for _ in 0..replays {
            let _step = rec.step(cell);
            ck(cu::cuGraphLaunch(exec, s));
            ck(cu::cuStreamSynchronize(s));
        }
        rec.flush().expect("flush");
    }
    let trace = rec.finish(Metadata::default()).expect("finish");
    trace.validate().expect("valid trace");

    let dag = &trace.graph;
    for n in &dag.nodes {
        eprintln!(
            "node {:#x} graph {} {:?} external={} created_by={:?} library_call={:?} cloned_from={:?}",
            n.id,
            n.graph,
            n.node_type,
            n.external,
            n.created_by.map(|s| trace.str(s)),
            n.library_call.map(|s| trace.str(s)),
            n.cloned_from
        );
    }
    for e in &dag.edges {
        eprintln!("edge {:#x} -> {:#x}", e.from, e.to);
    }
    eprintln!("execs {:?}", dag.execs);
    for k in &trace.kernels {
        eprintln!(
            "kernel {} graph {} node {:#x} corr {} {}..{}",
            trace.str(k.name),
            k.graph,
            k.node,
            k.corr,
            k.start,
            k.end
        );
    }
    eprintln!(
        "events {:?} dropped {} notes {:?}",
        trace.event_records, trace.dropped_records, trace.metadata.notes
    );

    assert_eq!(trace.dropped_records, 0);
    assert_eq!(dag.execs.len(), 1, "one executable graph");
    let exec_id = dag.execs[0].id;
    let graph_kernels: Vec<_> = trace.kernels.iter().filter(|k| k.graph != 0).collect();
    assert_eq!(
        graph_kernels.len(),
        3 * replays,
        "one record per kernel node per replay"
    );
    assert!(graph_kernels.iter().all(|k| k.graph == exec_id));

    let templates: Vec<_> = dag
        .nodes
        .iter()
        .filter(|n| n.cloned_from.is_none())
        .collect();
    let clones: Vec<_> = dag
        .nodes
        .iter()
        .filter(|n| n.cloned_from.is_some())
        .collect();
    let count =
        |nodes: &[&crate::trace::GraphNode], t| nodes.iter().filter(|n| n.node_type == t).count();
    assert_eq!(
        count(&templates, NodeType::Kernel),
        3,
        "template kernel nodes (driver types)"
    );
    assert_eq!(count(&templates, NodeType::EventWait), 1);
    assert_eq!(count(&templates, NodeType::EventRecord), 1);
    let wait = templates
        .iter()
        .find(|n| n.node_type == NodeType::EventWait)
        .unwrap();
    assert!(wait.external, "wait made with CU_EVENT_WAIT_EXTERNAL");
    assert_eq!(
        wait.created_by.map(|s| trace.str(s)),
        Some("cuStreamWaitEvent")
    );
    assert_eq!(
        wait.library_call.map(|s| trace.str(s)),
        Some("fakeAllGather")
    );
    let record = templates
        .iter()
        .find(|n| n.node_type == NodeType::EventRecord)
        .unwrap();
    assert!(record.external, "record made with CU_EVENT_RECORD_EXTERNAL");
    assert_eq!(
        clones.len(),
        templates.len(),
        "instantiation clones every node"
    );
    let clone_ids: HashSet<u64> = clones.iter().map(|n| n.id).collect();
    assert!(
        graph_kernels.iter().all(|k| clone_ids.contains(&k.node)),
        "kernel records carry clone ids"
    );
    let template_ids: HashSet<u64> = templates.iter().map(|n| n.id).collect();
    let template_edges = dag
        .edges
        .iter()
        .filter(|e| template_ids.contains(&e.from) && template_ids.contains(&e.to))
        .count();
    assert!(
        template_edges >= templates.len() - 1,
        "captured in stream order: every node but the first has a predecessor"
    );
    let launch_corr: HashSet<u32> = graph_kernels.iter().map(|k| k.corr).collect();
    let replay_events: Vec<_> = trace
        .event_records
        .iter()
        .filter(|e| launch_corr.contains(&e.corr))
        .collect();
    assert_eq!(
        replay_events.len(),
        replays,
        "one CUDA_EVENT record per replay"
    );
    assert!(replay_events.iter().all(|e| e.device_ts > 0));
    assert!(
        !trace
            .api_calls
            .iter()
            .any(|a| trace.str(a.name) == "cuGraphNodeGetType"),
        "the recorder's own driver calls are removed"
    );
    assert_eq!(
        trace
            .markers
            .iter()
            .filter(|m| m.kind == crate::trace::MarkerKind::Step)
            .count(),
        replays
    );
}

/// Makes the primary context current and returns the `noop` kernel and a non-blocking stream.
///
/// # Safety
/// Plain CUDA driver calls; call on the test's thread before any other CUDA work.
unsafe fn noop_kernel_and_stream() -> (cu::CUfunction, cu::CUstream) {
    // SAFETY: valid out-pointers, in order; the module stays loaded for the process.
    unsafe {
        ck(cu::cuInit(0));
        let mut dev = 0;
        ck(cu::cuDeviceGet(&mut dev, 0));
        let mut ctx = null_mut();
        ck(cu::cuDevicePrimaryCtxRetain(&mut ctx, dev));
        ck(cu::cuCtxSetCurrent(ctx));
        let mut module = null_mut();
        ck(cu::cuModuleLoadData(
            &mut module,
            PTX.as_ptr() as *const c_void,
        ));
        let mut f = null_mut();
        ck(cu::cuModuleGetFunction(&mut f, module, c"noop".as_ptr()));
        let mut s = null_mut();
        ck(cu::cuStreamCreate(
            &mut s,
            cu::CUstream_flags_enum::CU_STREAM_NON_BLOCKING as u32,
        ));
        (f, s)
    }
}

/// Launches `noop` with one block of 32 threads on `s`.
///
/// # Safety
/// `f` and `s` come from [`noop_kernel_and_stream`].
unsafe fn launch_noop(f: cu::CUfunction, s: cu::CUstream) {
    // SAFETY: a kernel without parameters, valid handles.
    ck(unsafe { cu::cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, null_mut(), null_mut()) })
}

/// Captures one `noop` launch on `s` and instantiates it.
///
/// # Safety
/// As [`launch_noop`].
unsafe fn noop_graph(f: cu::CUfunction, s: cu::CUstream) -> cu::CUgraphExec {
    let capture = cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    let (mut graph, mut exec) = (null_mut(), null_mut());
    // SAFETY: capture of one launch on a stream of ours, valid out-pointers.
    unsafe {
        ck(cu::cuStreamBeginCapture_v2(s, capture));
        launch_noop(f, s);
        ck(cu::cuStreamEndCapture(s, &mut graph));
        ck(cu::cuGraphInstantiateWithFlags(&mut exec, graph, 0));
    }
    exec
}

#[test]
#[ignore = "needs an NVIDIA GPU, its driver and libcupti (run with --ignored)"]
fn trace_budget_pauses_a_replayed_graph_and_resumes_for_a_new_one() {
    let _one = super::state::lock(&super::recorder::TEST_RECORDER_LOCK);
    if let Err(e) = ensure_cuda_driver() {
        panic!("needs an NVIDIA GPU and its driver: {e}");
    }
    let rec = Recorder::start(RecorderConfig {
        trace_budget: super::TraceBudget { limit: 4 },
        ..RecorderConfig::default()
    })
    .expect("recorder starts");
    // SAFETY: plain CUDA driver calls on this thread, in order.
    unsafe {
        let (f, s) = noop_kernel_and_stream();
        let replayed = noop_graph(f, s);
        // Budget 4: launches 0–3 traced; the pause at launch 4 measures the 2 after it
        // (device records only, no API records); 6 and 7 untraced (the next window opens at
        // the count's doubling, 8). The new graph resumes tracing.
        for _ in 0..8 {
            ck(cu::cuGraphLaunch(replayed, s));
            ck(cu::cuStreamSynchronize(s));
        }
        let fresh = noop_graph(f, s);
        ck(cu::cuGraphLaunch(fresh, s));
        launch_noop(f, s); // eager, while tracing is on again
        ck(cu::cuStreamSynchronize(s));
    }
    let trace = rec.finish(Metadata::default()).expect("finish");
    trace.validate().expect("valid trace");
    let mut launches_per_graph: std::collections::BTreeMap<u32, HashSet<u32>> = Default::default();
    for k in trace.kernels.iter().filter(|k| k.graph != 0) {
        launches_per_graph
            .entry(k.graph)
            .or_default()
            .insert(k.corr);
    }
    let counts: Vec<usize> = launches_per_graph.values().map(HashSet::len).collect();
    eprintln!(
        "launches per graph {counts:?}; notes {:?}",
        trace.metadata.notes
    );
    assert_eq!(
        counts,
        [6, 1],
        "4 of 8 replays traced and 2 measured, then the new graph's launch"
    );
    let eager = trace.kernels.iter().filter(|k| k.graph == 0).count();
    assert_eq!(eager, 1, "the eager launch after the resume is traced");
    let graph_launch_records = trace
        .api_calls
        .iter()
        .filter(|a| trace.str(a.name).contains("GraphLaunch"))
        .count();
    assert_eq!(
        graph_launch_records, 5,
        "API records only for traced launches, none for measured ones"
    );
    let notes = trace.metadata.notes.join("\n");
    assert!(notes.contains(": 4 of 8 launches"), "{notes}");
    assert!(notes.contains("paused 1 time"), "{notes}");
    let resumes = trace
        .metadata
        .sampling
        .as_ref()
        .map_or(0, |s| s.resumed_at.len());
    assert_eq!(resumes, 1, "the new graph's launch resumed tracing");
}

#[test]
#[ignore = "needs an NVIDIA GPU, its driver and libcupti (run with --ignored)"]
fn a_step_range_given_without_a_budget_is_the_recordings() {
    let _one = super::state::lock(&super::recorder::TEST_RECORDER_LOCK);
    if let Err(e) = ensure_cuda_driver() {
        panic!("needs an NVIDIA GPU and its driver: {e}");
    }
    // `--trace-budget 0 --step-range decode_step`: no budget exists, the range still marks steps.
    let rec = Recorder::start(RecorderConfig {
        trace_budget: super::TraceBudget { limit: 0 },
        step_range: crate::record::step_range::StepRange::new(Some("decode_step".into())),
        ..RecorderConfig::default()
    })
    .expect("recorder starts");
    assert_eq!(rec.step_range().name(), Some("decode_step"));
    assert_eq!(rec.step_range().chosen(), None);
}
