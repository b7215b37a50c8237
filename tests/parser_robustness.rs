//! No input makes the parser or the analysis panic (property tests; the cargo-fuzz target in
//! fuzz/ runs the same check coverage-guided).

use gapscope::analysis::{self, AnalysisOptions};
use gapscope::report;
use gapscope::trace;
use gapscope::trace::synthetic;
use proptest::prelude::*;

fn analyse_and_render(t: &trace::Trace) {
    let traces = std::slice::from_ref(t);
    let a = analysis::analyze(traces, &["p".to_owned()], &AnalysisOptions::default());
    let _ = report::markdown::analysis_markdown(&a);
    let _ = report::json::analysis_json(&a);
    let mut sink = std::io::sink();
    report::perfetto::write_chrome_trace(&mut sink, traces, &a, &Default::default()).unwrap();
    report::perfetto::write_perfetto_trace(&mut sink, traces, &a, &Default::default()).unwrap();
    for pair in &a.regime_pairs {
        let _ = report::svg::step_svg(traces, &a, pair, 1);
    }
}

fn valid_json() -> Vec<u8> {
    serde_json::to_vec(&synthetic::emu_experiment(3)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = trace::parse_trace(&bytes, "p.json".as_ref());
    }

    /// Valid files with bytes flipped, cut short or spliced: an error or a trace that analyses.
    #[test]
    fn mutated_traces_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = valid_json();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            // Keep to characters that keep the JSON plausible half the time.
            bytes[i] = if byte % 2 == 0 { b"0123456789-,:{}[]\"e."[usize::from(byte) % 20] } else { byte };
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        if let Ok(t) = trace::parse_trace(&bytes, "p.json".as_ref()) {
            analyse_and_render(&t);
        }
    }

    /// Structurally valid traces with arbitrary numbers (timestamps, ids, streams).
    #[test]
    fn arbitrary_record_values_never_panic(
        values in proptest::collection::vec(any::<u64>(), 64),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut t = synthetic::emu_experiment(3);
        let mut v = values.into_iter().cycle();
        let k = pick.index(t.kernels.len());
        let kernel = &mut t.kernels[k];
        let (a, b) = (v.next().unwrap(), v.next().unwrap());
        kernel.start = a.min(b);
        kernel.end = a.max(b);
        kernel.stream = v.next().unwrap() as u32;
        kernel.graph = v.next().unwrap() as u32;
        kernel.node = v.next().unwrap();
        kernel.corr = v.next().unwrap() as u32;
        let m = pick.index(t.markers.len());
        let (a, b) = (v.next().unwrap(), v.next().unwrap());
        t.markers[m].start = a.min(b);
        t.markers[m].end = a.max(b);
        let e = pick.index(t.graph.edges.len());
        t.graph.edges[e].from = v.next().unwrap();
        if t.validate().is_ok() {
            analyse_and_render(&t);
        }
    }
}
