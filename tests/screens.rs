//! The screens of the bundled traces read as a user reads them: `compare` never contradicts
//! itself within a row, and `analyze` leads with the answer.

mod common;
use common::{gapscope, stdout};

fn bundled(rel: &str) -> String {
    format!("{}/traces/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// The bundled BASE/HEAD pairs (with their `--base-select`/`--head-select`), as the README and
/// the traces' README compare them.
fn bundled_pairs() -> Vec<Vec<String>> {
    let selects = |t: &str| {
        vec![
            bundled(t),
            bundled(t),
            "--base-select".into(),
            "graph_usage_mode=2".into(),
            "--head-select".into(),
            "graph_usage_mode=1".into(),
        ]
    };
    let mut pairs = vec![selects("ht-decode-h200.json"), selects("emu-h200.json")];
    for rank in 0..2 {
        pairs.push(vec![
            bundled(&format!("ht-decode-2rank-h200/mode2-rank{rank}.json")),
            bundled(&format!("ht-decode-2rank-h200/mode1-rank{rank}.json")),
        ]);
    }
    for folder in [
        "torch-graphs-2rank-h200",
        "torch-graphs-2rank-budget-h200",
        "torch-graphs-2rank-deep-pause-h200",
    ] {
        pairs.push(vec![
            bundled(&format!("{folder}/mixing-1")),
            bundled(&format!("{folder}/mixing-0")),
        ]);
    }
    pairs
}

/// Every row of predicted vs realised agrees with its pair's change: "realised" only where
/// HEAD is faster beyond the spread by a positive measured saving, "within spread" exactly
/// where the change is "no change", "head slower" where it is slower.
#[test]
fn compare_rows_of_the_bundled_pairs_never_disagree() {
    let mut rows = 0;
    for pair in bundled_pairs() {
        let mut args = vec!["compare", "--json"];
        args.extend(pair.iter().map(String::as_str));
        let out = gapscope(&args);
        let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        let cells = doc["cells"].as_array().unwrap();
        for r in doc["realised"].as_array().unwrap() {
            let row = cells
                .iter()
                .find(|c| c["base"] == r["base"] && c["head"] == r["head"])
                .expect("the realised row's cell pair");
            let (verdict, change) = (r["verdict"].as_str().unwrap(), &row["change"]);
            let ok = match verdict {
                "realised" => change == "faster" && r["measured_ns"]["median"].as_f64() > Some(0.0),
                "not_realised" => change == "faster",
                "within_spread" => change == "no_change",
                "slower" => change == "slower",
                "unknown" => change.is_null(),
                "not_applied" => true,
                other => panic!("verdict {other}"),
            };
            assert!(ok, "{pair:?}: {verdict} with change {change}: {r}");
            rows += 1;
        }
        // The screen prints the same verdicts.
        let screen = stdout(&gapscope(
            &args[..1]
                .iter()
                .chain(&args[2..])
                .copied()
                .collect::<Vec<_>>(),
        ));
        for line in screen.lines().filter(|l| l.contains("— realised")) {
            assert!(!line.contains("inside the run-to-run spread"), "{line}");
        }
    }
    assert!(rows >= 10, "{rows} rows");
}

/// Every bundled input `analyze` reads: each trace file under traces/, and each folder of
/// traces (a folder stands for its files).
fn bundled_inputs() -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.ends_with("/hta") {
                    out.push(name.clone());
                }
                walk(&p, out);
            } else if name.ends_with(".json") || name.ends_with(".json.gz") {
                out.push(name);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces"),
        &mut out,
    );
    out
}

/// The first three lines name the worst cell (or what mode 2 costs), its largest cause and
/// its fix (or that no change is needed); no line is wider than 120 characters; every line of "What to change"
/// has a predicted saving beyond its spread (its p10 above zero).
#[test]
fn the_screen_of_every_bundled_trace_leads_with_the_answer_and_fits_120_columns() {
    let mut read = 0;
    for input in bundled_inputs() {
        let out = gapscope(&["analyze", &input]);
        if out.status.code() == Some(2) {
            // Refused inputs (an MTIA trace, an execution trace) are one error line.
            continue;
        }
        assert_eq!(out.status.code(), Some(0), "{input}");
        read += 1;
        let screen = stdout(&out);
        let lines: Vec<&str> = screen.lines().collect();
        assert!(
            lines[0].starts_with("Worst cell: C")
                || lines[0].starts_with("Most idle cell: C")
                || lines[0].starts_with("Mode 2 costs: C"),
            "{input}:\n{screen}"
        );
        // Mode 2's cost names its cause: the external event wait mode 2 adds.
        let cause = if lines[0].starts_with("Mode 2 costs: C") {
            "  cause: mode 2's external event wait "
        } else {
            "  largest cause: "
        };
        assert!(lines[1].starts_with(cause), "{input}:\n{screen}");
        assert!(
            lines[2].starts_with("  fix: ")
                && (lines[2].contains(" — predicted saving ")
                    || lines[2].starts_with("  fix: no change needed")),
            "{input}:\n{screen}"
        );
        for l in &lines {
            assert!(
                l.chars().count() <= 120,
                "{input}: {} chars: {l}",
                l.chars().count()
            );
        }
        let whole = common::unwrapped(&screen);
        let fixes = whole
            .lines()
            .skip_while(|l| *l != "What to change:")
            .skip(1)
            .take_while(|l| l.starts_with("  "));
        for line in fixes.chain(std::iter::once(lines[2]).filter(|l| !l.contains("no change"))) {
            let spread = line
                .split(" — predicted saving ")
                .nth(1)
                .and_then(|rest| rest.split_once('[')?.1.split_once('–'))
                .map(|(p10, _)| p10.parse::<f64>());
            assert!(
                matches!(spread, Some(Ok(p10)) if p10 > 0.0),
                "{input}: a fix without a saving beyond its spread: {line}"
            );
        }
    }
    assert!(read >= 50, "{read} inputs read");
}

/// step.svg draws the worst pair at its most typical step: on emu-h200.json the graphed period
/// (mode 2, fresh graphs) is longer than the eager one, and the external wait is labelled.
#[test]
fn the_step_picture_of_emu_shows_the_slower_graph_and_names_its_largest_gap() {
    let dir = std::env::temp_dir().join(format!("gapscope-screens-svg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = gapscope(&[
        "analyze",
        &bundled("emu-h200.json"),
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let svg = std::fs::read_to_string(dir.join("step.svg")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // Each panel's title ends in its step's period.
    let periods: Vec<f64> = svg
        .split(", period ")
        .skip(1)
        .filter_map(|rest| rest.split(" µs").next()?.parse().ok())
        .collect();
    assert_eq!(periods.len(), 2, "{svg}");
    assert!(
        periods[1] > periods[0],
        "eager {} vs graphed {}",
        periods[0],
        periods[1]
    );
    assert!(svg.contains("largest gap: external event wait "), "{svg}");
}
