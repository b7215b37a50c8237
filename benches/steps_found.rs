//! Steps found in the kernel sequence on a 1,000,000-kernel stream with no step markers: the
//! search alone (`discover::find_loops` over the op identities), and the whole analysis of the
//! unmarked trace against the same trace with its NVTX ranges marked as steps (what finding
//! the steps adds). Prints n, median and min–max per stage, and the ratio of the medians.
//!
//! Then the whole analysis of a committed recording that marks no steps: transformers'
//! `generate()` (`traces/transformers-generate-record-h200.json.gz`, 130,193 eager ops), with
//! the cell it must find checked.
//!
//! `cargo bench --bench steps_found` (add `-- --kernels N --runs R` to change the size).
//! The stream: 20 warm-up steps, a prefill loop (200 chunks of 8 kernels), then decode steps
//! of 48 kernels, each in an NVTX range `decode_step`, with a bookkeeping kernel every 16th.

use gapscope::analysis::{self, AnalysisOptions, discover};
use gapscope::trace::Trace;
use gapscope::trace::synthetic::KernelStream;
use std::path::Path;
use std::time::Instant;

mod common;
use common::arg;

const DECODE: usize = 48;

fn stream(kernels: usize) -> Trace {
    let names: Vec<String> = (0..DECODE)
        .map(|i| format!("decode_kernel_{}", i % 40))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut s = KernelStream::new();
    let mut launched = 0;
    for _ in 0..20 {
        s.kernels(&names);
        launched += DECODE;
    }
    for _ in 0..200 {
        s.kernels(&[
            "chunk_embed",
            "flash_prefill",
            "gemm_a",
            "gemm_b",
            "norm",
            "rope",
            "add",
            "copy",
        ]);
        launched += 8;
    }
    let mut step = 0;
    while launched + DECODE < kernels {
        let start = s.host_now();
        s.kernel(names[0], 30_000, 3_000);
        s.kernels(&names[1..]);
        launched += DECODE;
        if step % 16 == 15 {
            s.kernel("stop_check", 1_000, 1_000);
            launched += 1;
        }
        s.range("decode_step", start);
        step += 1;
    }
    s.finish()
}

fn summary(label: &str, secs: &mut [f64]) -> f64 {
    secs.sort_by(f64::total_cmp);
    let median = secs[secs.len() / 2];
    println!(
        "{label:<36} n={} median {median:>7.3} s  [min {:.3} – max {:.3}]",
        secs.len(),
        secs[0],
        secs[secs.len() - 1]
    );
    median
}

fn analyze(t: &Trace) -> analysis::Analysis {
    analysis::analyze(
        std::slice::from_ref(t),
        &["bench".to_owned()],
        &AnalysisOptions::default(),
    )
}

fn main() {
    // `cargo test --all-targets` runs this binary without --bench: a small smoke run only.
    let benching = std::env::args().any(|a| a == "--bench");
    let kernels = arg("--kernels", if benching { 1_000_000 } else { 20_000 });
    let runs = arg("--runs", if benching { 5 } else { 1 });
    let unmarked = stream(kernels);
    let mut marked = unmarked.clone();
    let ranges = marked.mark_steps("decode_step");
    // The op identities in launch order, as the analysis gives them to the search.
    let symbols: Vec<u32> = unmarked.kernels.iter().map(|k| k.name).collect();
    let gaps = vec![0u64; symbols.len()];
    println!(
        "stream: {} kernels, {ranges} NVTX ranges; {runs} runs",
        unmarked.kernels.len()
    );
    let (mut search, mut found, mut with_markers) = (vec![], vec![], vec![]);
    for _ in 0..runs {
        let t0 = Instant::now();
        let loops = discover::find_loops(&symbols, &gaps, &|_| None);
        let t1 = Instant::now();
        let a = analyze(&unmarked);
        let t2 = Instant::now();
        let m = analyze(&marked);
        let t3 = Instant::now();
        // Warm-up, prefill and decode: three loops, the decode one with every range's step.
        assert_eq!(
            loops.len(),
            3,
            "{:?}",
            loops.iter().map(|l| l.steps.len()).collect::<Vec<_>>()
        );
        let decode = a
            .cells
            .iter()
            .filter_map(|c| c.found.as_ref())
            .map(|f| f.steps)
            .max();
        assert!(
            decode.is_some_and(|d| d.abs_diff(ranges) <= 1),
            "{decode:?} of {ranges}"
        );
        assert!(m.cells.iter().all(|c| c.found.is_none()));
        search.push((t1 - t0).as_secs_f64());
        found.push((t2 - t1).as_secs_f64());
        with_markers.push((t3 - t2).as_secs_f64());
    }
    summary("find_loops (search alone)", &mut search);
    let f = summary("analyze, steps found", &mut found);
    let m = summary("analyze, NVTX ranges as steps", &mut with_markers);
    println!(
        "steps found / marked, whole analysis: {:.2}× (medians)",
        f / m
    );

    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces/transformers-generate-record-h200.json.gz");
    let recorded = gapscope::trace::read_any(&path).expect("the committed recording");
    let mut whole = vec![];
    for _ in 0..runs {
        let t0 = Instant::now();
        let a = analyze(&recorded);
        whole.push(t0.elapsed().as_secs_f64());
        // One cell of one token a step: 4 generate() calls of 63 decode steps.
        let found: Vec<_> = a.cells.iter().filter_map(|c| c.found.as_ref()).collect();
        assert!(
            found.len() == 1 && (found[0].unit_ops, found[0].steps) == (472, 252),
            "{found:?}"
        );
    }
    println!(
        "recording: {} ({} kernels)",
        path.file_name().unwrap().to_string_lossy(),
        recorded.kernels.len()
    );
    summary("analyze, transformers generate()", &mut whole);
}
