//! Any bytes: the trace parser returns a trace or an error, never panics; whatever parses is
//! analysed and exported without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(trace) = gapscope::trace::parse_trace(data, "fuzz.json".as_ref()) {
        let traces = std::slice::from_ref(&trace);
        let analysis = gapscope::analysis::analyze(
            traces,
            &["fuzz".to_owned()],
            &gapscope::analysis::AnalysisOptions::default(),
        );
        let _ = gapscope::report::markdown::analysis_markdown(&analysis);
        let mut sink = std::io::sink();
        let _ = gapscope::report::perfetto::write_chrome_trace(
            &mut sink,
            traces,
            &analysis,
            &Default::default(),
        );
    }
});
