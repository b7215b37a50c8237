#![forbid(unsafe_code)]
//! JSON summary: the analysis model (it derives `Serialize`) wrapped in
//! `{"gapscope_report_version": 1, "kind": ..., ...}`.
//!
//! Step lists can be huge (one entry per step, with its gaps); by default each cell keeps its
//! summaries (period, busy, idle, idle by cause, canonical sequence) and gives `"steps": null`
//! with `"step_count"`; [`JsonOptions::include_steps`] keeps the full step lists.

use crate::analysis::{
    Analysis, CellAnalysis, CellComparison, Comparison, InputSummary, Step, stats::Geomean,
};
use serde::Serialize;

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
    pretty(&AnalysisDoc {
        header: Header::new("analysis", opts),
        body: AnalysisBody::new(a, opts),
    })
}

/// [`analysis_json`] written to `w` as it is made, not held: the same bytes.
pub fn write_analysis_json(a: &Analysis, w: &mut impl std::io::Write) -> std::io::Result<()> {
    let opts = JsonOptions::default();
    pretty_to(
        &AnalysisDoc {
            header: Header::new("analysis", &opts),
            body: AnalysisBody::new(a, &opts),
        },
        w,
    )
}

/// The comparison as pretty JSON, without step lists; `"verdict"` is "pass" or "fail".
pub fn comparison_json(c: &Comparison) -> String {
    comparison_json_with(c, &JsonOptions::default())
}

/// The comparison as pretty JSON.
pub fn comparison_json_with(c: &Comparison, opts: &JsonOptions) -> String {
    pretty(&ComparisonDoc {
        header: Header::new("comparison", opts),
        verdict: if c.breached.is_empty() {
            "pass"
        } else {
            "fail"
        },
        threshold: c.threshold,
        breached: &c.breached,
        device_mismatch: &c.device_mismatch,
        host_bound_slowdowns: &c.host_bound_slowdowns,
        geomean_ratio: &c.geomean_ratio,
        cells: &c.cells,
        unmatched: &c.unmatched,
        realised: &c.realised,
        base: AnalysisBody::new(&c.base, opts),
        head: AnalysisBody::new(&c.head, opts),
    })
}

/// `try.json`: every verdict `try.md` and the screen print.
pub fn trial_json(r: &crate::analysis::trial::TrialReport) -> String {
    #[derive(Serialize)]
    struct TrialDoc<'a> {
        #[serde(flatten)]
        header: Header,
        #[serde(flatten)]
        report: &'a crate::analysis::trial::TrialReport,
    }
    pretty(&TrialDoc {
        header: Header::new("try", &JsonOptions::default()),
        report: r,
    })
}

// The documents are written straight from the model through these views (no intermediate
// `serde_json::Value`: a cell's canonical sequence can hold tens of thousands of entries).

#[derive(Serialize)]
struct Header {
    gapscope_report_version: u32,
    kind: &'static str,
    tool: String,
    steps_included: bool,
}

impl Header {
    fn new(kind: &'static str, opts: &JsonOptions) -> Header {
        Header {
            gapscope_report_version: REPORT_VERSION,
            kind,
            tool: format!("gapscope {}", env!("CARGO_PKG_VERSION")),
            steps_included: opts.include_steps,
        }
    }
}

#[derive(Serialize)]
struct AnalysisDoc<'a> {
    #[serde(flatten)]
    header: Header,
    #[serde(flatten)]
    body: AnalysisBody<'a>,
}

#[derive(Serialize)]
struct ComparisonDoc<'a> {
    #[serde(flatten)]
    header: Header,
    verdict: &'static str,
    threshold: f64,
    breached: &'a [String],
    device_mismatch: &'a Option<String>,
    /// Slower cells whose slowdown is mostly the host launching later: the caution's.
    host_bound_slowdowns: &'a [crate::analysis::HostBoundSlowdown],
    geomean_ratio: &'a Option<Geomean>,
    cells: &'a [CellComparison],
    unmatched: &'a [String],
    realised: &'a [crate::analysis::remedy::RemedyCheck],
    base: AnalysisBody<'a>,
    head: AnalysisBody<'a>,
}

#[derive(Serialize)]
struct AnalysisBody<'a> {
    inputs: &'a [InputSummary],
    cells: Vec<CellDoc<'a>>,
    regime_pairs: &'a [CellComparison],
    mode_pairs: &'a [CellComparison],
    geomean_ratio: &'a Option<Geomean>,
    remedies: &'a [crate::analysis::remedy::Remedy],
    withheld_remedies: &'a [crate::analysis::remedy::Withheld],
    headline: &'a Option<crate::analysis::headline::Headline>,
}

impl<'a> AnalysisBody<'a> {
    fn new(a: &'a Analysis, opts: &JsonOptions) -> AnalysisBody<'a> {
        AnalysisBody {
            inputs: &a.inputs,
            cells: a.cells.iter().map(|c| CellDoc::new(c, opts)).collect(),
            regime_pairs: &a.regime_pairs,
            mode_pairs: &a.mode_pairs,
            geomean_ratio: &a.geomean_ratio,
            remedies: &a.remedies,
            withheld_remedies: &a.withheld_remedies,
            headline: &a.headline,
        }
    }
}

/// A cell; `steps` (not serialised with the cell: it can hold millions of gaps) only when
/// asked for.
#[derive(Serialize)]
struct CellDoc<'a> {
    #[serde(flatten)]
    cell: &'a CellAnalysis,
    steps: Option<&'a [Step]>,
    step_count: usize,
    first_launch_steps: usize,
    /// Why the cell has no period, when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    no_period: Option<String>,
}

impl<'a> CellDoc<'a> {
    fn new(c: &'a CellAnalysis, opts: &JsonOptions) -> CellDoc<'a> {
        CellDoc {
            cell: c,
            steps: opts.include_steps.then_some(&c.steps[..]),
            step_count: c.steps.len(),
            first_launch_steps: c.steps.iter().filter(|s| s.first_launch).count(),
            no_period: c.why_no_period(),
        }
    }
}

fn pretty(doc: &impl Serialize) -> String {
    // The model holds only maps with string keys, so serialisation cannot fail; non-finite
    // floats become null.
    let mut out = Vec::with_capacity(1 << 16);
    if pretty_to(doc, &mut out).is_err() {
        return "null\n".into();
    }
    // serde_json writes only valid UTF-8.
    String::from_utf8(out).unwrap_or_else(|_| "null\n".into())
}

/// [`pretty`] into `w`: only writing can fail.
fn pretty_to(doc: &impl Serialize, w: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(&mut *w, Pretty::default());
    doc.serialize(&mut ser).map_err(std::io::Error::other)?;
    w.write_all(b"\n")
}

/// serde_json's `PrettyFormatter` with its two-space indent, to the byte, but each line's
/// indent written at once rather than a level at a time (a report of a long trace has
/// hundreds of thousands of lines, several levels deep).
#[derive(Default)]
struct Pretty {
    level: usize,
    has_value: bool,
}

impl Pretty {
    fn newline_and_indent<W: ?Sized + std::io::Write>(
        &self,
        w: &mut W,
        comma: bool,
    ) -> std::io::Result<()> {
        // A comma, a newline and spaces: most lines' start in one write.
        const LINE: &[u8; 66] =
            b",\n                                                                ";
        let indent = self.level * 2;
        let from = usize::from(!comma);
        if indent <= LINE.len() - 2 {
            return w.write_all(&LINE[from..2 + indent]);
        }
        w.write_all(&LINE[from..])?;
        let mut left = indent - (LINE.len() - 2);
        while left > 0 {
            let n = left.min(LINE.len() - 2);
            w.write_all(&LINE[2..2 + n])?;
            left -= n;
        }
        Ok(())
    }

    fn open<W: ?Sized + std::io::Write>(&mut self, w: &mut W, b: &[u8]) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(b)
    }

    fn close<W: ?Sized + std::io::Write>(&mut self, w: &mut W, b: &[u8]) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.newline_and_indent(w, false)?;
        }
        w.write_all(b)
    }
}

impl serde_json::ser::Formatter for Pretty {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.newline_and_indent(w, !first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.newline_and_indent(w, !first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;
    use serde_json::Value;

    #[test]
    fn pretty_writes_what_serde_json_pretty_writes() {
        let (_, a) = fixtures::fixture();
        let doc = AnalysisDoc {
            header: Header::new("analysis", &JsonOptions::default()),
            body: AnalysisBody::new(
                &a,
                &JsonOptions {
                    include_steps: true,
                },
            ),
        };
        let want = serde_json::to_string_pretty(&doc).unwrap() + "\n";
        assert_eq!(pretty(&doc), want);
        // Deeper than the run of spaces written at once, empty arrays and objects.
        let deep: Value = serde_json::from_str(&format!(
            "{}{{\"a\": [], \"b\": {{}}, \"c\": [1, {{\"d\": null}}]}}{}",
            "[".repeat(40),
            "]".repeat(40)
        ))
        .unwrap();
        assert_eq!(
            pretty(&deep),
            serde_json::to_string_pretty(&deep).unwrap() + "\n"
        );
    }

    #[test]
    fn analysis_json_omits_steps_by_default() {
        let (_, a) = fixtures::fixture();
        let v: Value = serde_json::from_str(&analysis_json(&a)).unwrap();
        assert_eq!(v["gapscope_report_version"], 1);
        assert_eq!(v["kind"], "analysis");
        assert_eq!(v["steps_included"], false);
        assert_eq!(v["inputs"][0]["source"], "synthetic");
        assert_eq!(v["inputs"][0]["dropped_records"], 3);
        let versions = &v["inputs"][0]["versions"];
        assert_eq!(versions["nccl"], "2.30.7");
        assert_eq!(versions["nccl_library"], fixtures::NCCL_PATH);
        assert_eq!(versions["loaded"][0]["library"], "nccl");
        assert_eq!(versions["loaded"][0]["path"], fixtures::NCCL_PATH);
        assert_eq!(versions["loaded"][1]["library"], "cublas");
        assert_eq!(versions["loaded"][1]["version"], "13.1.0");
        let cell = &v["cells"][1];
        assert!(cell["steps"].is_null());
        assert_eq!(cell["step_count"], fixtures::STEPS);
        assert_eq!(cell["first_launch_steps"], 1);
        assert_eq!(cell["period"]["median"], fixtures::GRAPHED_PERIOD as f64);
        assert_eq!(
            cell["observed"]["graph_usage_mode"],
            "2 (2 external event nodes, from NCCL)"
        );
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
