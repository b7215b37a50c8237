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

/// Every bundled gapscope trace (Kineto and third-party inputs have their own importers),
/// analysed with the defaults: (path, analysis).
fn bundled_analyses() -> Vec<(String, analysis::Analysis)> {
    let paths = common::files_under(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("traces"),
        &|p| {
            let name = p.to_string_lossy();
            name.ends_with(".json") || name.ends_with(".json.gz")
        },
    );
    paths
        .into_iter()
        .filter_map(|path| {
            let t = trace::read_trace(&path).ok()?;
            let name = path.display().to_string();
            let a = analysis::analyze(
                std::slice::from_ref(&t),
                std::slice::from_ref(&name),
                &AnalysisOptions::default(),
            );
            Some((name, a))
        })
        .collect()
}

#[test]
fn the_screens_largest_gaps_are_the_json_reports_on_every_bundled_trace() {
    let mut with_gaps = 0;
    for (name, a) in bundled_analyses() {
        let screen = analysis_summary(&a, None);
        let json: serde_json::Value = serde_json::from_str(&analysis_json(&a)).unwrap();
        let (on_screen, in_json) = (screen_gap_rows(&screen), json_gap_rows(&json));
        assert_eq!(on_screen, in_json, "{name}:\n{screen}");
        with_gaps += usize::from(!in_json.is_empty());
    }
    assert!(with_gaps >= 10, "only {with_gaps} bundled traces with gaps");
}

/// The screen's word for a JSON verdict.
fn change_word(change: &serde_json::Value) -> Option<&'static str> {
    match change.as_str()? {
        "slower" => Some("slower"),
        "faster" => Some("faster"),
        "no_change" => Some("no change"),
        other => panic!("unknown change {other}"),
    }
}

/// "2.43 [1.88–4.66] n=44" of a JSON saving, as report.md prints it.
fn md_saving(s: &serde_json::Value) -> String {
    let us = |k: &str| s[k].as_f64().expect("a figure") / 1000.0;
    format!(
        "{:.2} [{:.2}–{:.2}] n={}",
        us("median"),
        us("p10"),
        us("p90"),
        s["n"].as_u64().expect("n")
    )
}

/// Every bundled trace: the headline, the mode lines, What to change, report.md and the JSON
/// give each pair one verdict and each fix one prediction; where the headline is mode 2's cost,
/// its fix is NCCL graph usage mode 1 and the predicted saving is that measured cost.
#[test]
fn every_output_gives_each_pair_one_verdict_and_each_fix_one_prediction() {
    let (mut pairs, mut fixes, mut mode_costs) = (0, 0, 0);
    for (name, a) in bundled_analyses() {
        let screen = common::unwrapped(&analysis_summary(&a, None));
        let md = gapscope::report::markdown::analysis_markdown(&a);
        let json: serde_json::Value = serde_json::from_str(&analysis_json(&a)).unwrap();
        let lines: Vec<&str> = screen.lines().collect();
        for p in json["mode_pairs"].as_array().expect("mode_pairs") {
            let Some(word) = change_word(&p["change"]) else {
                continue;
            };
            let (b, h) = (
                p["base"].as_u64().unwrap() + 1,
                p["head"].as_u64().unwrap() + 1,
            );
            let start = format!("  C{h} vs C{b}: ");
            let line = lines
                .iter()
                .find(|l| l.starts_with(&start))
                .unwrap_or_else(|| panic!("{name}: no mode line {start:?}:\n{screen}"));
            assert!(
                line.contains(&format!("({word}, Δ")),
                "{name}: JSON {word}, screen {line}"
            );
            pairs += 1;
        }
        let remedies = json["remedies"].as_array().expect("remedies");
        for r in remedies {
            let saving = &r["predicted_saving_ns"];
            if saving.is_null() {
                continue;
            }
            assert!(
                md.contains(&md_saving(saving)),
                "{name}: report.md lacks {}",
                md_saving(saving)
            );
            fixes += 1;
        }
        let headline = &json["headline"];
        if headline.is_null() {
            continue;
        }
        let fix_line = lines
            .iter()
            .take(4)
            .find(|l| l.starts_with("  fix: "))
            .unwrap_or_else(|| panic!("{name}: no fix line:\n{screen}"));
        match headline["fix"].as_u64() {
            Some(i) => {
                let saving = &remedies[i as usize]["predicted_saving_ns"];
                let median = saving["median"].as_f64().expect("a predicted saving");
                let said = format!("predicted saving {:.2} µs", median / 1000.0);
                assert!(
                    fix_line.contains(&said),
                    "{name}: JSON {said}, screen {fix_line}"
                );
            }
            None => assert!(!fix_line.contains("predicted saving"), "{name}: {fix_line}"),
        }
        if headline["basis"] == "mode_cost" {
            let cost = &headline["mode_cost"];
            let pair = &json["mode_pairs"][cost["pair"].as_u64().unwrap() as usize];
            assert_eq!(
                pair["change"], "slower",
                "{name}: mode 2's cost from a pair not slower"
            );
            assert!(
                lines[0].starts_with("Mode 2 costs: "),
                "{name}: {}",
                lines[0]
            );
            let fix = &remedies[headline["fix"].as_u64().expect("mode 2's fix") as usize];
            assert_eq!(fix["kind"], "graph_usage_mode", "{name}");
            assert_eq!(
                fix["predicted_saving_ns"]["median"], cost["delta_ns"],
                "{name}: the prediction is the measured cost"
            );
            mode_costs += 1;
        }
    }
    assert!(
        pairs >= 10 && fixes >= 10 && mode_costs >= 8,
        "{pairs} {fixes} {mode_costs}"
    );
}
