//! JSON summary: the analysis model (it derives `Serialize`) wrapped in
//! `{"gapscope_report_version": 1, "kind": ..., ...}`.
//!
//! Step lists can be huge (one entry per step, with its gaps); by default each cell keeps its
//! summaries (period, busy, idle, idle by cause, canonical sequence) and gives `"steps": null`
//! with `"step_count"`; [`JsonOptions::include_steps`] keeps the full step lists.

use crate::analysis::{Analysis, CellAnalysis, Comparison};
use serde_json::{Map, Value, json};

/// The version of the JSON report layout; bump on any change a reader would misread.
pub const REPORT_VERSION: u32 = 1;

/// Options of the JSON reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JsonOptions {
    /// Keep every cell's step list (each step with its ops and gaps).
    pub include_steps: bool,
}

/// The analysis as pretty JSON, without step lists.
pub fn analysis_json(a: &Analysis) -> String {
    analysis_json_with(a, &JsonOptions::default())
}

/// The analysis as pretty JSON.
pub fn analysis_json_with(a: &Analysis, opts: &JsonOptions) -> String {
    let mut doc = header("analysis", opts);
    if let Value::Object(body) = analysis_value(a, opts) {
        doc.extend(body);
    }
    pretty(&Value::Object(doc))
}

/// The comparison as pretty JSON, without step lists; `"verdict"` is "pass" or "fail".
pub fn comparison_json(c: &Comparison) -> String {
    comparison_json_with(c, &JsonOptions::default())
}

/// The comparison as pretty JSON.
pub fn comparison_json_with(c: &Comparison, opts: &JsonOptions) -> String {
    let mut doc = header("comparison", opts);
    doc.insert(
        "verdict".into(),
        json!(if c.breached.is_empty() {
            "pass"
        } else {
            "fail"
        }),
    );
    doc.insert("threshold".into(), to_value(&c.threshold));
    doc.insert("breached".into(), to_value(&c.breached));
    doc.insert("geomean_ratio".into(), to_value(&c.geomean_ratio));
    doc.insert("cells".into(), to_value(&c.cells));
    doc.insert("unmatched".into(), to_value(&c.unmatched));
    doc.insert("base".into(), analysis_value(&c.base, opts));
    doc.insert("head".into(), analysis_value(&c.head, opts));
    pretty(&Value::Object(doc))
}

fn header(kind: &str, opts: &JsonOptions) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("gapscope_report_version".into(), json!(REPORT_VERSION));
    m.insert("kind".into(), json!(kind));
    m.insert(
        "tool".into(),
        json!(format!("gapscope {}", env!("CARGO_PKG_VERSION"))),
    );
    m.insert("steps_included".into(), json!(opts.include_steps));
    m
}

fn to_value<T: serde::Serialize + ?Sized>(v: &T) -> Value {
    // The model holds only maps with string keys, so serialisation cannot fail; non-finite
    // floats become null.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into());
    s.push('\n');
    s
}

fn analysis_value(a: &Analysis, opts: &JsonOptions) -> Value {
    let cells: Vec<Value> = a.cells.iter().map(|c| cell_value(c, opts)).collect();
    json!({
        "inputs": to_value(&a.inputs),
        "cells": cells,
        "regime_pairs": to_value(&a.regime_pairs),
        "mode_pairs": to_value(&a.mode_pairs),
        "geomean_ratio": to_value(&a.geomean_ratio),
    })
}

fn cell_value(c: &CellAnalysis, opts: &JsonOptions) -> Value {
    // `steps` is not serialised with the cell (it can hold millions of gaps): add it only
    // when asked for.
    let mut v = to_value(c);
    if let Value::Object(m) = &mut v {
        m.insert(
            "steps".into(),
            if opts.include_steps {
                to_value(&c.steps)
            } else {
                Value::Null
            },
        );
        m.insert("step_count".into(), json!(c.steps.len()));
        m.insert(
            "first_launch_steps".into(),
            json!(c.steps.iter().filter(|s| s.first_launch).count()),
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    #[test]
    fn analysis_json_omits_steps_by_default() {
        let (_, a) = fixtures::fixture();
        let v: Value = serde_json::from_str(&analysis_json(&a)).unwrap();
        assert_eq!(v["gapscope_report_version"], 1);
        assert_eq!(v["kind"], "analysis");
        assert_eq!(v["steps_included"], false);
        assert_eq!(v["inputs"][0]["source"], "synthetic");
        assert_eq!(v["inputs"][0]["dropped_records"], 3);
        let cell = &v["cells"][1];
        assert!(cell["steps"].is_null());
        assert_eq!(cell["step_count"], fixtures::STEPS);
        assert_eq!(cell["first_launch_steps"], 1);
        assert_eq!(cell["period"]["median"], fixtures::GRAPHED_PERIOD as f64);
        assert_eq!(cell["observed"]["graph_usage_mode"], "2 (mixing)");
        assert!(cell["sequence"].as_array().unwrap().len() == 5);
        assert!(v["regime_pairs"][0]["ratio"].as_f64().unwrap() > 1.0);
        assert_eq!(v["geomean_ratio"]["n"], 1);
        // Every model field of a cell is present.
        let full = serde_json::to_value(&a.cells[1]).unwrap();
        for k in full.as_object().unwrap().keys() {
            assert!(cell.get(k).is_some(), "missing {k}");
        }
    }

    #[test]
    fn analysis_json_with_steps() {
        let (_, a) = fixtures::fixture();
        let s = analysis_json_with(
            &a,
            &JsonOptions {
                include_steps: true,
            },
        );
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["steps_included"], true);
        let steps = v["cells"][1]["steps"].as_array().unwrap();
        assert_eq!(steps.len(), fixtures::STEPS);
        assert_eq!(steps[1]["gaps"][0]["cause"]["kind"], "graph_launch");
    }

    #[test]
    fn comparison_json_verdict() {
        let pass: Value =
            serde_json::from_str(&comparison_json(&fixtures::comparison(1.02, vec![]))).unwrap();
        assert_eq!(pass["kind"], "comparison");
        assert_eq!(pass["verdict"], "pass");
        assert_eq!(pass["threshold"], 1.02);
        assert_eq!(pass["cells"].as_array().unwrap().len(), 2);
        assert!(pass["base"]["cells"][0]["steps"].is_null());
        assert_eq!(pass["head"]["cells"][1]["label"], "graphed mode=1 T=8");
        let fail: Value = serde_json::from_str(&comparison_json(&fixtures::comparison(
            1.02,
            vec!["graphed mode=1 T=8: 1.05×".into()],
        )))
        .unwrap();
        assert_eq!(fail["verdict"], "fail");
        assert_eq!(fail["breached"][0], "graphed mode=1 T=8: 1.05×");
    }
}
