//! Perfetto export of a 1,000,000-kernel torch.profiler (Kineto) trace: the TrackEvent protobuf
//! (`trace.perfetto-trace`, the default) against the Chrome JSON (`trace.perfetto.json`). Prints,
//! per encoding, n runs of the write time (median and min–max, encoding into a byte counter:
//! no disk), the file size, and the ratios of the medians and sizes measured in this run.
//!
//! `cargo bench --bench perfetto_export` (add `-- --kernels N --annotations A --runs R`).

use gapscope::analysis::{self, AnalysisOptions};
use gapscope::report::perfetto::{PerfettoFormat, PerfettoOptions, write_trace};
use gapscope::trace::kineto::import_kineto;
use gapscope::trace::synthetic::kineto::write_kineto;
use std::io::{self, Write};
use std::path::Path;
use std::time::Instant;

mod common;
use common::arg;

/// Counts the bytes written to it.
#[derive(Default)]
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn main() {
    // `cargo test --all-targets` runs this without --bench: a small smoke run then.
    let benching = std::env::args().any(|a| a == "--bench");
    let kernels = arg("--kernels", if benching { 1_000_000 } else { 5_000 });
    let annotations = arg("--annotations", 10);
    let runs = arg("--runs", if benching { 5 } else { 1 });
    let mut input = Vec::new();
    write_kineto(&mut input, kernels as u64, annotations as u64, "bench").expect("generate");
    let trace = import_kineto(&input[..], Path::new("bench.json")).expect("import");
    let input_mb = input.len() as f64 / 1e6;
    drop(input);
    let traces = std::slice::from_ref(&trace);
    let a = analysis::analyze(traces, &["bench".to_owned()], &AnalysisOptions::default());
    let steps: usize = a.cells.iter().map(|c| c.steps.len()).sum();
    assert!(steps > 0, "the synthetic trace has steps");
    println!(
        "input: {kernels} kernels, {annotations} ProfilerStep annotations, {input_mb:.1} MB Kineto \
         JSON; {} cells, {steps} steps; {runs} runs per encoding, one thread",
        a.cells.len()
    );
    let mut medians = Vec::new();
    for format in [PerfettoFormat::Protobuf, PerfettoFormat::Json] {
        let mut secs = Vec::new();
        let mut size = None;
        for _ in 0..runs {
            let mut out = io::BufWriter::with_capacity(1 << 16, Counter::default());
            let start = Instant::now();
            write_trace(&mut out, format, traces, &a, &PerfettoOptions::default()).expect("export");
            out.flush().expect("flush");
            secs.push(start.elapsed().as_secs_f64());
            let bytes = out.into_inner().ok().expect("flushed").0;
            assert!(size.is_none_or(|s| s == bytes), "the same size every run");
            size = Some(bytes);
        }
        secs.sort_by(f64::total_cmp);
        let median = secs[secs.len() / 2];
        let size = size.expect("one run at least");
        println!(
            "{:<22} n={} median {median:.3} s [{:.3}–{:.3}], {:.1} MB ({:.1} bytes/kernel)",
            format.file_name(),
            secs.len(),
            secs[0],
            secs[secs.len() - 1],
            size as f64 / 1e6,
            size as f64 / kernels as f64
        );
        medians.push((median, size));
    }
    let ((pb_s, pb_size), (json_s, json_size)) = (medians[0], medians[1]);
    println!(
        "protobuf / JSON: write time {:.2}× (ratio of medians), size {:.2}×",
        pb_s / json_s,
        pb_size as f64 / json_size as f64
    );
}
