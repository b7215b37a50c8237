//! One answer: the figures the screen prints are the JSON report's, on every bundled trace.
#![forbid(unsafe_code)]

mod common;

use gapscope::analysis::thresholds::LARGEST_GAPS_LISTED;
use gapscope::analysis::{self, AnalysisOptions};
use gapscope::report::{json::analysis_json, summary::analysis_summary};
use gapscope::trace;
use std::path::Path;

/// The screen's "Largest gaps" rows, as "C2: 12.34 µs" (alias and median).
fn screen_gap_rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|l| !l.starts_with("Largest gaps"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| l.starts_with("  C"))
        .map(|l| {
            let (alias, rest) = l.trim_start().split_once(": ").expect("alias: figure");
            let median = rest.split(" µs").next().expect("a µs figure");
            format!("{alias}: {median} µs")
        })
        .collect()
}

/// The largest gaps in the JSON: every cell's positive median gaps, largest first (ties in
/// cell, then sequence, order), as many as a report lists, rounded as the screen rounds.
fn json_gap_rows(json: &serde_json::Value) -> Vec<String> {
    let mut gaps: Vec<(usize, f64)> = json["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .enumerate()
        .flat_map(|(c, cell)| {
            cell["sequence"]
                .as_array()
                .expect("sequence")
                .iter()
                .map(move |e| (c, e["gap_before"]["median"].as_f64().expect("median")))
        })
        .filter(|&(_, median)| median > 0.0)
        .collect();
    gaps.sort_by(|x, y| y.1.total_cmp(&x.1));
    gaps.into_iter()
        .take(LARGEST_GAPS_LISTED)
        .map(|(c, median)| format!("C{}: {:.2} µs", c + 1, median / 1000.0))
        .collect()
}

#[test]
fn the_screens_largest_gaps_are_the_json_reports_on_every_bundled_trace() {
    let paths = common::files_under(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("traces"),
        &|p| {
            let name = p.to_string_lossy();
            name.ends_with(".json") || name.ends_with(".json.gz")
        },
    );
    let mut with_gaps = 0;
    for path in paths {
        // Kineto and third-party inputs have their own importers; gapscope traces here.
        let Ok(t) = trace::read_trace(&path) else {
            continue;
        };
        let name = path.display().to_string();
        let a = analysis::analyze(
            std::slice::from_ref(&t),
            std::slice::from_ref(&name),
            &AnalysisOptions::default(),
        );
        let screen = analysis_summary(&a, None);
        let json: serde_json::Value = serde_json::from_str(&analysis_json(&a)).unwrap();
        let (on_screen, in_json) = (screen_gap_rows(&screen), json_gap_rows(&json));
        assert_eq!(on_screen, in_json, "{name}:\n{screen}");
        with_gaps += usize::from(!in_json.is_empty());
    }
    assert!(with_gaps >= 10, "only {with_gaps} bundled traces with gaps");
}
