//! Kineto import on one thread and on several, from memory (no disk): n runs each, median and
//! min–max, MB/s, and the ratio of the medians measured in this run. Checks on the way that
//! every split gives the same trace.
//!
//! `cargo bench --bench kineto_import` (add `-- --kernels N --runs R --threads T`).

use gapscope::trace::kineto::{ImportOptions, import_kineto_with};
use gapscope::trace::synthetic::kineto::write_kineto;
use std::path::Path;
use std::time::Instant;

mod common;
use common::arg;

fn main() {
    // `cargo test --all-targets` runs this without --bench: a small smoke run then.
    let benching = std::env::args().any(|a| a == "--bench");
    let kernels = arg("--kernels", if benching { 1_000_000 } else { 5_000 });
    let runs = arg("--runs", if benching { 5 } else { 1 });
    let threads = arg(
        "--threads",
        std::thread::available_parallelism().map_or(2, |n| n.get()),
    );
    let mut bytes = Vec::new();
    write_kineto(&mut bytes, kernels as u64, 80, "bench").expect("generate");
    let mb = bytes.len() as f64 / 1e6;
    println!("trace: {kernels} kernels, {mb:.1} MB Kineto JSON, {runs} runs per row");
    let mut medians = Vec::new();
    let mut first = None;
    for t in [1, threads] {
        let opts = ImportOptions {
            threads: t,
            ..ImportOptions::default()
        };
        let mut secs = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            let trace =
                import_kineto_with(&bytes[..], Path::new("bench.json"), &opts).expect("import");
            secs.push(start.elapsed().as_secs_f64());
            assert_eq!(trace.kernels.len(), kernels);
            match &first {
                None => first = Some(trace),
                Some(f) => assert!(f == &trace, "{t} threads give another trace"),
            }
        }
        secs.sort_by(f64::total_cmp);
        let median = secs[secs.len() / 2];
        println!(
            "import, {t} thread(s): n={} median {median:.3} s [{:.3}–{:.3}], {:.0} MB/s",
            secs.len(),
            secs[0],
            secs[secs.len() - 1],
            mb / median
        );
        medians.push(median);
    }
    println!(
        "speed-up {threads} threads vs 1: {:.2}× (ratio of medians)",
        medians[0] / medians[1]
    );
}
