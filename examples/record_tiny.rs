//! Records a tiny program under CUPTI — three kernels per step, run eagerly and then captured
//! and replayed as a CUDA graph — and prints gapscope's analysis of it.
//!
//! `cargo run --release --example record_tiny [-- STEPS]` (needs an NVIDIA GPU, its driver,
//! NVRTC and libcupti; without them it prints one line and exits 1).

use gapscope::analysis::{self, AnalysisOptions};
use gapscope::record::cupti::{Recorder, RecorderConfig};
use gapscope::trace::{Cell, Metadata};
use gapscope::workload::capture::capture_graph;
use gapscope::workload::device::open_context;
use gapscope::workload::spin::EmuKernels;
use std::collections::BTreeMap;

fn main() {
    let steps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    if let Err(e) = run(steps) {
        gapscope::messages::line(&format!("record_tiny: {e}"));
        std::process::exit(1);
    }
}

fn cell(regime: &str) -> Cell {
    Cell {
        label: format!("{regime} tiny"),
        requested: BTreeMap::from([("regime".to_owned(), regime.into())]),
        ..Cell::default()
    }
}

fn run(steps: usize) -> Result<(), Box<dyn std::error::Error>> {
    // CUPTI before the context: kernels are instrumented when their module loads.
    let recorder = Recorder::start(RecorderConfig::default())?;
    let ctx = open_context(0)?;
    let kernels = EmuKernels::load(&ctx)?;
    let stream = ctx.new_stream()?;
    let stamps = stream.alloc_zeros::<u64>(8)?;
    let (stamp, _guard) = cudarc::driver::DevicePtr::device_ptr(&stamps, &stream);
    let step = || -> Result<(), gapscope::workload::collective::WorkloadError> {
        kernels.spin(&stream, 3_000, stamp)?;
        kernels.spin(&stream, 1_000, stamp + 16)?;
        kernels.spin(&stream, 2_000, stamp + 32)
    };
    let eager = recorder.add_cell(cell("eager"));
    for _ in 0..steps {
        let _s = recorder.step(eager);
        step()?;
    }
    let (graph, _) = capture_graph(&stream, step)?;
    let graphed = recorder.add_cell(cell("graphed"));
    for _ in 0..steps {
        let _s = recorder.step(graphed);
        graph.launch(&stream)?;
    }
    stream.synchronize()?;
    let trace = recorder.finish(Metadata {
        tool: "gapscope record_tiny example".into(),
        ..Metadata::default()
    })?;
    let a = analysis::analyze(
        std::slice::from_ref(&trace),
        &["record_tiny".into()],
        &AnalysisOptions::default(),
    );
    println!("{}", gapscope::report::markdown::analysis_markdown(&a));
    Ok(())
}
