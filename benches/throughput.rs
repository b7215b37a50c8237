//! Throughput on a 1,000,000-kernel trace: parse, analyse (steps + attribution + alignment),
//! Perfetto export. Prints n, median and min–max per stage, and kernels per second.
//!
//! `cargo bench --bench throughput` (add `-- --kernels N --runs R` to change the size).
//! Target (issue 2): parse + analyse ≤ 1 s on one core.

use gapscope::analysis::{self, AnalysisOptions};
use gapscope::report::perfetto::{PerfettoOptions, write_chrome_trace};
use gapscope::trace;
use gapscope::trace::synthetic::{self, SyntheticCell};
use std::time::Instant;

mod common;
use common::arg;

fn summary(label: &str, secs: &mut [f64], kernels: usize) {
    secs.sort_by(f64::total_cmp);
    let median = secs[secs.len() / 2];
    println!(
        "{label:<28} n={} median {:>7.3} s  [min {:.3} – max {:.3}]  {:>6.2} M kernels/s",
        secs.len(),
        median,
        secs[0],
        secs[secs.len() - 1],
        kernels as f64 / median / 1e6
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it:
    // then a small smoke run only.
    let benching = std::env::args().any(|a| a == "--bench");
    let kernels = arg("--kernels", if benching { 1_000_000 } else { 8_000 });
    let runs = arg("--runs", if benching { 5 } else { 1 });
    // Half eager, half graphed (mode 2), 4 kernels per step.
    let steps = kernels / 8;
    let t = synthetic::trace(
        &[
            SyntheticCell::emu(false, 2, steps),
            SyntheticCell::emu(true, 2, steps),
        ],
        1,
    );
    let bytes = serde_json::to_vec(&t).expect("serialise");
    println!(
        "trace: {} kernels, {} API calls, {:.1} MB JSON; {runs} runs, one thread",
        t.kernels.len(),
        t.api_calls.len(),
        bytes.len() as f64 / 1e6
    );
    let (mut parse, mut analyse, mut both, mut export) = (vec![], vec![], vec![], vec![]);
    for _ in 0..runs {
        let t0 = Instant::now();
        let parsed = trace::parse_trace(&bytes, "bench.json".as_ref()).expect("parse");
        let t1 = Instant::now();
        let a = analysis::analyze(
            std::slice::from_ref(&parsed),
            &["bench".to_owned()],
            &AnalysisOptions::default(),
        );
        let t2 = Instant::now();
        let mut sink = std::io::sink();
        write_chrome_trace(
            &mut sink,
            std::slice::from_ref(&parsed),
            &a,
            &PerfettoOptions::default(),
        )
        .expect("export");
        let t3 = Instant::now();
        assert_eq!(a.cells.len(), 2);
        parse.push((t1 - t0).as_secs_f64());
        analyse.push((t2 - t1).as_secs_f64());
        both.push((t2 - t0).as_secs_f64());
        export.push((t3 - t2).as_secs_f64());
    }
    let n = t.kernels.len();
    summary("parse", &mut parse, n);
    summary("align + attribute", &mut analyse, n);
    summary("parse + align + attribute", &mut both, n);
    summary("perfetto export", &mut export, n);
}
