//! Whatever parses is analysed and every terminal and report renderer runs on it without
//! panicking; kernel names are shortened to at most 80 characters with their template and
//! argument lists elided.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let short = gapscope::report::short_op_name(text);
        assert!(short.chars().count() <= 80);
    }
    let Ok(trace) = gapscope::trace::parse_trace(data, "fuzz.json".as_ref()) else {
        return;
    };
    let traces = std::slice::from_ref(&trace);
    let options = gapscope::analysis::AnalysisOptions::default();
    let analysis = gapscope::analysis::analyze(traces, &["fuzz".to_owned()], &options);
    let _ = gapscope::report::summary::analysis_summary(&analysis, Some("out/report.md"));
    let _ = gapscope::report::json::analysis_json(&analysis);
    let again = gapscope::analysis::analyze(traces, &["fuzz".to_owned()], &options);
    let comparison = gapscope::analysis::compare::compare(analysis, again, 1.02);
    let _ = gapscope::report::summary::comparison_summary(&comparison, None);
    let _ = gapscope::report::markdown::comparison_github(&comparison);
    let _ = gapscope::report::markdown::comparison_markdown(&comparison);
});
