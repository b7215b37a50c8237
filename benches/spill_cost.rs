//! What handing records to `gapscope record` as buffers complete costs (issue 25 e), on the
//! CPU: a recording of `steps` steps (each: a kernel, its launch call, an NVTX range) is
//! delivered in buffers of `per_buffer` steps through `record::spill` (copy of the new
//! records, JSON encoding, one append per buffer), against the at-exit path alone (the whole
//! trace encoded and written atomically once). Both write into a temporary folder.
//!
//!     cargo bench --bench spill_cost                 # 300,000 steps, 5 runs, 3 buffer sizes
//!     cargo bench --bench spill_cost -- --steps 100000 --runs 3

use gapscope::record::spill::{Delivered, SpillHeader, SpillWriter, spill_path};
use gapscope::trace::{ApiCall, Kernel, Marker, MarkerKind, Metadata, Trace, TraceBuilder};
use std::time::Instant;

fn recording(steps: usize) -> Trace {
    let mut b = TraceBuilder::new(Metadata::default());
    let (launch, step) = (b.intern("cudaLaunchKernel"), b.intern("decode_step"));
    let kernels: Vec<u32> = (0..48).map(|i| b.intern(&format!("kernel_{i}"))).collect();
    for i in 0..steps {
        let at = 1_000_000 + i as u64 * 20_000;
        let corr = i as u32 + 1;
        b.trace.markers.push(Marker {
            start: at,
            end: at + 15_000,
            name: step,
            kind: MarkerKind::Range,
            thread: 7,
            cell: None,
        });
        b.trace.api_calls.push(ApiCall {
            start: at + 100,
            end: at + 3_000,
            corr,
            thread: 7,
            name: launch,
            ..Default::default()
        });
        b.trace.kernels.push(Kernel {
            start: at + 4_000,
            end: at + 12_000,
            corr,
            stream: 7,
            name: kernels[i % kernels.len()],
            ..Default::default()
        });
    }
    b.finish()
}

/// Delivers `t` in buffers of `per_buffer` steps; returns seconds and bytes written.
fn deliver_all(t: &Trace, per_buffer: usize, dir: &std::path::Path) -> (f64, u64) {
    let path = spill_path(dir, 1);
    let header = SpillHeader {
        file_name: "trace-0.json".into(),
        pid: 1,
        step_range: None,
        metadata: t.metadata.clone(),
    };
    // The recorder's state as it grows: each buffer appends its steps, then is delivered.
    let mut growing = Trace::new(Metadata::default());
    growing.strings = t.strings.clone();
    let began = Instant::now();
    let mut w = SpillWriter::create(&path, &header).unwrap();
    let mut delivered = Delivered::default();
    let mut bytes = 0u64;
    let mut at = 0;
    while at < t.kernels.len() {
        let to = (at + per_buffer).min(t.kernels.len());
        growing.kernels.extend_from_slice(&t.kernels[at..to]);
        growing.api_calls.extend_from_slice(&t.api_calls[at..to]);
        growing.markers.extend_from_slice(&t.markers[at..to]);
        let part = delivered.new_part(&growing);
        delivered = Delivered::of(&growing);
        bytes += w.deliver(part, None, None, 0, None).unwrap() as u64;
        at = to;
    }
    let s = began.elapsed().as_secs_f64();
    std::fs::remove_file(&path).unwrap();
    (s, bytes)
}

fn at_exit(t: &Trace, dir: &std::path::Path) -> (f64, u64) {
    let path = dir.join("trace-0.json");
    let began = Instant::now();
    gapscope::trace::write_trace(&path, t).unwrap();
    let s = began.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&path).unwrap().len();
    std::fs::remove_file(&path).unwrap();
    (s, bytes)
}

fn stat(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (steps, runs) = (arg("--steps", 300_000), arg("--runs", 5));
    let t = recording(steps);
    let dir = tempfile::tempdir().unwrap();
    let records = 3 * steps;
    let mut exit: Vec<f64> = Vec::new();
    let mut exit_bytes = 0;
    // Buffers of 1/8, 1 and 8× the steps an 8 MiB CUPTI buffer holds (~40,000 records).
    let sizes = [1_700, 13_000, 100_000];
    let mut delivered: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
    let mut delivered_bytes = vec![0; sizes.len()];
    for _ in 0..runs {
        let (s, b) = at_exit(&t, dir.path());
        exit.push(s);
        exit_bytes = b;
        for (i, &per) in sizes.iter().enumerate() {
            let (s, b) = deliver_all(&t, per, dir.path());
            delivered[i].push(s);
            delivered_bytes[i] = b;
        }
    }
    println!(
        "{steps} steps ({records} records: kernel, launch call, NVTX range each), {runs} runs"
    );
    let (em, elo, ehi) = stat(&mut exit);
    println!(
        "at exit, whole trace once: median {em:.3} s [{elo:.3}-{ehi:.3}], {exit_bytes} bytes, {:.0} ns/record",
        em * 1e9 / records as f64
    );
    for (i, &per) in sizes.iter().enumerate() {
        let (m, lo, hi) = stat(&mut delivered[i]);
        println!(
            "delivered in buffers of {per} steps ({} records): median {m:.3} s [{lo:.3}-{hi:.3}], {} bytes, {:.0} ns/record, {:.2} x the at-exit write",
            3 * per,
            delivered_bytes[i],
            m * 1e9 / records as f64,
            m / em
        );
    }
}
