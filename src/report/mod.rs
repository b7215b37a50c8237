#![forbid(unsafe_code)]
//! Outputs: Perfetto (Chrome trace JSON), Markdown (a PR comment), JSON summary, SVG of one
//! aligned step, the rank-merge report ([`merge`]), `gapscope try`'s report ([`trial`]), stdout
//! summaries ([`summary`]) and the one writer of output sets ([`output_set`]). Every report and
//! screen is escaped by [`crate::messages`].
//!
//! Every renderer is pure: it reads the traces and the analysis results
//! ([`crate::analysis::Analysis`], [`crate::analysis::Comparison`],
//! [`crate::analysis::merge::Merged`]) and returns a `String` or writes to a
//! `&mut dyn std::io::Write`. Files are written only by [`output_set`]: every `-o DIR` set (analyze,
//! run, compare, merge) all or nothing through [`output_set::OutputSet`]; `export`'s single file
//! goes through [`crate::output::write_atomically`].

// The renderers below reach these as `crate::report::…` too.
use crate::messages::{printable, printable_report};
pub mod json;
pub mod markdown;
pub mod merge;
pub mod output_set;
pub mod perfetto;
pub mod remedies;
pub mod summary;
pub mod svg;
pub mod trial;
pub mod trial_files;

#[cfg(test)]
pub(crate) mod fixtures;

pub use json::{
    JsonOptions, analysis_json, analysis_json_with, comparison_json, comparison_json_with,
};
pub use markdown::{analysis_markdown, comparison_markdown};
pub use perfetto::{
    PerfettoFormat, PerfettoOptions, chrome_trace, write_chrome_trace, write_perfetto_trace,
};
pub use svg::{step_svg, step_svg_between};

use crate::analysis::stats::Stat;
use crate::analysis::{CauseKind, Regime};
use crate::trace::Trace;

/// `ns` as microseconds with 2 decimals ("12.34", "−0.35": one minus sign everywhere).
pub(crate) fn us2(ns: f64) -> String {
    if ns.is_finite() && ns < 0.0 && (ns / 10.0).round() != 0.0 {
        format!("−{:.2}", -ns / 1000.0)
    } else if ns.is_finite() {
        format!("{:.2}", ns.max(0.0) / 1000.0)
    } else {
        "—".to_owned()
    }
}

/// Signed microseconds with 2 decimals ("+1.20", "−0.35").
pub(crate) fn us2_signed(ns: f64) -> String {
    if !ns.is_finite() {
        return "—".to_owned();
    }
    let v = ns / 1000.0;
    // Avoid "-0.00".
    if (v * 100.0).round() == 0.0 {
        "±0.00".to_owned()
    } else if v > 0.0 {
        format!("+{v:.2}")
    } else {
        format!("−{:.2}", -v)
    }
}

/// "12.34 µs [11.00–13.50] n=400": median, p10–p90 and n; of too few steps for a spread
/// ([`Stat::has_spread`]), "12.34 µs n=2".
pub(crate) fn stat_us(s: &Stat) -> String {
    if !s.has_spread() {
        return format!("{} µs n={}", us2(s.median), s.n);
    }
    format!(
        "{} µs [{}–{}] n={}",
        us2(s.median),
        us2(s.p10),
        us2(s.p90),
        s.n
    )
}

/// A ratio as "1.03×".
pub(crate) fn ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}×")
    } else {
        "—".to_owned()
    }
}

/// A share (0…1) as a whole percentage ("98 %"); "99.6 %" is not rounded up to 100, nor a
/// share above 0 down to 0: either would say "all" or "none" where that is not so.
pub(crate) fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p > 0.0 && p < 1.0 {
        format!("{p:.1} %")
    } else if p > 99.0 && p < 100.0 {
        format!("{:.1} %", (p * 10.0).floor() / 10.0)
    } else {
        format!("{p:.0} %")
    }
}

/// An op of a canonical sequence as tables name it: its short name, then where it came from
/// ("nvjet_… (decode_step/mlp ← cublasLtMatmul)").
pub(crate) fn op_with_provenance(e: &crate::analysis::SequenceEntry) -> String {
    let name = short_op_name(&e.name);
    match &e.provenance {
        Some(p) => format!("{name} ({})", p.label()),
        None => name,
    }
}

/// "3 of 40 graphed steps also launched 12 eager op(s) (45.10 µs of device time)".
pub(crate) fn eager_in_graphed_label(e: &crate::analysis::EagerInGraphed) -> String {
    format!(
        "{} of {} graphed steps also launched {} eager op(s) ({} µs of device time): part of this phase ran eagerly",
        e.steps,
        e.of,
        e.ops,
        us2(e.device_ns as f64)
    )
}

/// "its steps leave out 63.2 % of the device work that ran in their windows (3036 op(s), …)".
pub(crate) fn left_out_label(l: &crate::analysis::LeftOut) -> String {
    format!(
        "its steps leave out {:.1} % of the device work that ran in their windows ({} op(s), {} µs): \
         launched outside the step ranges, it counts as idle here; a step range around the whole \
         iteration counts it",
        l.share * 100.0,
        l.ops,
        us2(l.device_ns as f64)
    )
}

/// "its 120 steps launched torch.compile's Triton kernels and no CUDA graph: …".
pub(crate) fn compiled_without_graphs_label(c: &crate::analysis::CellAnalysis) -> String {
    let coverage = c.observed.graph_coverage.map_or_else(String::new, |g| {
        format!(" (graphs ran {} of its device time)", percent(g))
    });
    format!(
        "its {} steps launched torch.compile's Triton kernels and no CUDA graph: this phase ran eagerly{coverage}; \
         with mode=\"reduce-overhead\", torch.compile skipped its cudagraphs (TORCH_LOGS=perf_hints says why: \"skipping cudagraphs due to …\")",
        c.steps.len()
    )
}

/// What a recording lost without saying, for a note: `(lost_work, line)` — `lost_work` when
/// launches or device records are missing (a warning), not only NVTX ranges never ended;
/// `None` when it adds up.
pub(crate) fn completeness_line(
    c: &crate::analysis::completeness::Completeness,
) -> Option<(bool, String)> {
    if c.total() == 0 {
        return None;
    }
    let lost_work = c.total() > c.unended_ranges;
    let cells = if !c.cells.is_empty() {
        format!("; cells it touches: {}", c.cells.join("; "))
    } else if lost_work {
        "; in no cell's time".to_owned()
    } else {
        " (left out of the trace: their end is unknown)".to_owned()
    };
    Some((
        lost_work,
        format!("the recording does not add up: {}{cells}", c.describe()),
    ))
}

/// Escapes text for XML content and attribute values.
pub(crate) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids most control characters, even escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            // Invisible characters that reorder or hide the text around them (a kernel name
            // from a trace with U+202E), shown as report.md and the terminal show them.
            c if crate::messages::is_format_char(c) => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// Escapes text for a Markdown table cell (pipes and line breaks would break the row).
/// A kernel name as profilers show it in tables: return type dropped, template and argument
/// lists elided (`at::native::vectorized_elementwise_kernel<…>(…)`), at most 80 characters.
/// JSON and Perfetto outputs keep the full name.
pub fn short_op_name(name: &str) -> String {
    const MAX: usize = 80;
    let name = printable(name);
    let name = name.strip_prefix("void ").unwrap_or(&name);
    let mut out = String::with_capacity(name.len().min(MAX + 8));
    let (mut angle, mut paren) = (0usize, 0usize);
    for c in name.chars() {
        match c {
            '<' if paren == 0 => {
                if angle == 0 {
                    out.push_str("<…>");
                }
                angle += 1;
            }
            '>' if paren == 0 && angle > 0 => angle -= 1,
            '(' if angle == 0 => {
                if paren == 0 {
                    out.push_str("(…)");
                }
                paren += 1;
            }
            ')' if angle == 0 && paren > 0 => paren -= 1,
            _ if angle == 0 && paren == 0 => out.push(c),
            _ => {}
        }
    }
    if out.chars().count() > MAX {
        out = out.chars().take(MAX - 1).collect::<String>() + "…";
    }
    out
}

/// What a [`crate::analysis::PeriodPart`] is, for people.
pub(crate) fn period_part_label(part: crate::analysis::PeriodPart) -> String {
    use crate::analysis::PeriodPart;
    match part {
        PeriodPart::Gap { cause, gone: false } => format!("gaps: {cause}"),
        PeriodPart::Gap { cause, gone: true } => format!("gaps: {cause}, gone in head"),
        PeriodPart::OpDurations { op, op_delta } => format!(
            "op durations (most: {} {} µs)",
            short_op_name(op),
            us2_signed(op_delta)
        ),
        PeriodPart::OneSidedOps => "ops on one side only".to_owned(),
    }
}

pub(crate) fn md_cell(s: &str) -> String {
    printable(s).replace('|', "\\|")
}

/// The snake_case name serde gives a cause kind ("external_event_wait").
pub(crate) fn cause_kind_id(kind: CauseKind) -> String {
    match serde_json::to_value(kind) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{kind:?}"),
    }
}

pub(crate) fn regime_label(r: Option<Regime>) -> &'static str {
    r.map_or("unknown", Regime::label)
}

/// The name of string `id` of trace `trace` ("?" when either is out of range).
pub(crate) fn trace_str(traces: &[Trace], trace: usize, id: u32) -> &str {
    traces.get(trace).map_or("?", |t| t.str(id))
}

/// The op (an index into `ops`, the timeline of `cell`'s trace) of `step` at position `pos` of
/// `cell`'s canonical sequence: the step's `pos`-th op when its name matches, else the same
/// occurrence of that name in the step. What a picture joins an aligned op to.
pub(crate) fn step_op_at(
    traces: &[Trace],
    ops: &[crate::analysis::Op],
    cell: &crate::analysis::CellAnalysis,
    step: &crate::analysis::Step,
    pos: usize,
) -> Option<usize> {
    let want = &cell.sequence.get(pos)?.name;
    let named = |i: usize| {
        ops.get(i)
            .is_some_and(|o| trace_str(traces, cell.trace, o.name) == want)
    };
    if let Some(&i) = step.ops.get(pos)
        && named(i)
    {
        return Some(i);
    }
    let nth = cell.sequence[..pos]
        .iter()
        .filter(|e| &e.name == want)
        .count();
    step.ops.iter().copied().filter(|&i| named(i)).nth(nth)
}

/// A short display name for a (possibly C++-mangled-looking) kernel name:
/// `void ns::kernel<T, 4>(float*, int)` → `kernel`.
pub(crate) fn short_name(name: &str) -> &str {
    let mut s = name;
    if let Some(i) = s.find('(') {
        s = &s[..i];
    }
    if let Some(i) = s.find('<') {
        s = &s[..i];
    }
    let s = s.trim();
    let s = s.rsplit("::").next().unwrap_or(s);
    let s = s.rsplit(' ').next().unwrap_or(s);
    if s.is_empty() { name } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_format() {
        assert_eq!(us2(1234.0), "1.23");
        assert_eq!(us2(f64::NAN), "—");
        assert_eq!(us2_signed(1500.0), "+1.50");
        assert_eq!(us2_signed(-1500.0), "−1.50");
        assert_eq!(us2_signed(1.0), "±0.00");
        assert_eq!(ratio(1.034), "1.03×");
        assert_eq!(xml_escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
        assert_eq!(xml_escape("k\u{202e}x\u{200b}"), "k\\u{202e}x\\u{200b}");
        assert_eq!(md_cell("a|b\nc"), "a\\|b\\nc");
        assert_eq!(
            cause_kind_id(CauseKind::ExternalEventWait),
            "external_event_wait"
        );
        assert_eq!(short_name("void ns::kern<float, 4>(float*, int)"), "kern");
        assert_eq!(
            short_name("ncclDevKernel_AllGather_RING_LL"),
            "ncclDevKernel_AllGather_RING_LL"
        );
        assert_eq!(short_name("HtoD"), "HtoD");
    }
}

#[cfg(test)]
mod end_to_end {
    //! The reports over the real analysis of a synthetic trace (no hand-built model).
    use super::*;
    use crate::analysis::{AnalysisOptions, analyze};

    #[test]
    fn reports_of_the_emu_experiment() {
        let traces = vec![crate::trace::synthetic::emu_experiment(40)];
        let a = analyze(
            &traces,
            &["emu.trace.json".to_owned()],
            &AnalysisOptions::default(),
        );
        let md = analysis_markdown(&a);
        assert!(md.contains("synthetic trace, not recorded on a GPU"));
        assert!(md.contains("**Geomean graphed/eager period over"), "{md}");
        let json: serde_json::Value = serde_json::from_str(&analysis_json(&a)).unwrap();
        assert_eq!(json["gapscope_report_version"], 1);
        for align in [None, Some(1)] {
            let chrome = chrome_trace(&traces, &a, &PerfettoOptions { origin_step: align });
            let v: serde_json::Value = serde_json::from_str(&chrome).unwrap();
            assert!(v["traceEvents"].as_array().unwrap().len() > 100);
        }
        for pair in &a.regime_pairs {
            let svg = step_svg(&traces, &a, pair, 1);
            assert!(svg.starts_with("<svg") && svg.contains("class=\"legend\""));
        }
        if crate::settings::Setting::DumpReports.read_os().is_some() {
            let dir = std::path::Path::new("/tmp/gsout");
            std::fs::write(dir.join("e2e.md"), &md).unwrap();
            std::fs::write(dir.join("e2e.json"), analysis_json(&a)).unwrap();
            let chrome = chrome_trace(
                &traces,
                &a,
                &PerfettoOptions {
                    origin_step: Some(1),
                },
            );
            std::fs::write(dir.join("e2e.perfetto.json"), chrome).unwrap();
            if let Some(p) = a.regime_pairs.first() {
                std::fs::write(dir.join("e2e.svg"), step_svg(&traces, &a, p, 1)).unwrap();
            }
        }
    }

    /// `cargo test --release --lib report::end_to_end::large -- --ignored --nocapture`
    #[test]
    #[ignore = "a timing probe: run by hand with --nocapture"]
    fn large_trace_streams() {
        let traces = vec![crate::trace::synthetic::emu_experiment(62_500)];
        let t = std::time::Instant::now();
        let a = analyze(&traces, &["big".to_owned()], &AnalysisOptions::default());
        let analysed = t.elapsed();
        let t = std::time::Instant::now();
        let mut out = std::io::BufWriter::new(std::io::sink());
        write_chrome_trace(&mut out, &traces, &a, &PerfettoOptions::default()).unwrap();
        let mut counted = Counter(0);
        write_chrome_trace(&mut counted, &traces, &a, &PerfettoOptions::default()).unwrap();
        let exported = t.elapsed();
        let t = std::time::Instant::now();
        let md = analysis_markdown(&a);
        let js = analysis_json(&a);
        crate::messages::line(&format!(
            "{} kernels: analysis {analysed:?}, chrome trace {exported:?} ({} MB), md+json {:?} ({} + {} bytes)",
            traces[0].kernels.len(),
            counted.0 >> 20,
            t.elapsed(),
            md.len(),
            js.len()
        ));
    }

    struct Counter(usize);

    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}

/// The headline's texts — what it calls its cell, the cell with its period, its largest
/// cause, its fix, and the host code sampled in the cell's host-bound gaps when that cause is
/// host-bound (else empty) — with cells named by `named` (where the cell is introduced) and `short` (a
/// twin, named again): the screen's first lines and report.md's verdict.
pub(crate) fn headline_texts(
    a: &crate::analysis::Analysis,
    named: &dyn Fn(usize) -> String,
    short: &dyn Fn(usize) -> String,
) -> [String; 6] {
    use crate::analysis::headline::Basis;
    let Some(h) = &a.headline else {
        return [
            Basis::PredictedSaving.title().to_owned(),
            "none (no cells)".to_owned(),
            "largest cause".to_owned(),
            "—".to_owned(),
            "no change needed".to_owned(),
            String::new(),
        ];
    };
    let c = &a.cells[h.cell];
    let period = match (&c.period, c.first_launch_period) {
        (Some(p), _) => format!("{} a step", stat_us(p)),
        (None, Some(p)) => format!("{} a first launch", stat_us(&p)),
        (None, None) => format!("no period ({})", c.why_no_period().unwrap_or_default()),
    };
    let twin_ratio = |twin: usize| {
        a.regime_pairs
            .iter()
            .chain(&a.mode_pairs)
            .find(|p| p.base == twin && p.head == h.cell)
            .and_then(|p| p.ratio)
            .map(ratio)
    };
    let against = match (h.basis, h.twin) {
        (Basis::SlowerThanTwin, Some(t)) => {
            let r = twin_ratio(t).map_or(String::new(), |r| format!(" ({r})"));
            format!(", slower than {}{r}", short(t))
        }
        _ => a
            .regime_pairs
            .iter()
            .find(|p| p.head == h.cell)
            .and_then(|p| Some(format!(", {} of {}", ratio(p.ratio?), short(p.base))))
            .unwrap_or_default(),
    };
    // The host code sampled in the cell's host-bound gaps, when the largest cause is one.
    let host_code = h
        .cause
        .as_ref()
        .filter(|cause| crate::analysis::host_samples::is_host_bound(cause.cause))
        .and(c.host_time.as_ref())
        .filter(|t| !t.top.is_empty())
        .map(crate::analysis::host_samples::HostTime::describe)
        .unwrap_or_default();
    let cause = match &h.cause {
        Some(cause) => format!(
            "{} {} a step{}",
            cause.cause.label(),
            stat_us(&cause.per_step),
            cause
                .share_of_step
                .map(|x| format!(", {} of the step", percent(x)))
                .unwrap_or_default()
        ),
        None => "none (the step has no idle time)".to_owned(),
    };
    // Mode 2's cost: its cause is the external event nodes, whose wait's gap grew between the
    // modes (the pair's gap growth, traced; every part of the difference is in the mode line).
    let (cause_label, cause) = match (&h.mode_cost, &h.cause) {
        (Some(m), Some(wait)) => {
            let grew = a
                .mode_pairs
                .get(m.pair)
                .map(|p| p.gap_growth_of(crate::analysis::CauseKind::ExternalEventWait))
                .filter(|g| *g != 0.0)
                .map(|g| format!(", {} µs over mode 1 (traced)", us2_signed(g)))
                .unwrap_or_default();
            (
                "cause",
                format!(
                    "mode 2's external event wait {} a step{grew}",
                    stat_us(&wait.per_step)
                ),
            )
        }
        _ => ("largest cause", cause),
    };
    // Mode 2's cost, on the periods its pair was judged on.
    let (period, against) = match &h.mode_cost {
        Some(m) => {
            let share = m
                .share_of_base()
                .map(|x| format!("+{:.1} %, ", 100.0 * x))
                .unwrap_or_default();
            let periods = if m.untraced { "untraced" } else { "traced" };
            (
                format!("{} µs a step", us2_signed(m.delta_ns)),
                format!(
                    " over {} ({share}{periods})",
                    h.twin.map_or_else(String::new, short)
                ),
            )
        }
        None => (period, against),
    };
    let fix = h.fix.and_then(|f| a.remedies.get(f));
    let fix = match fix.and_then(|r| Some((r, r.predicted_saving_ns?))) {
        Some((r, saving)) => format!(
            "{} — predicted saving {} a step",
            r.kind.spec().short,
            remedies::saving_us(&saving)
        ),
        None => "no change needed (no fix gapscope knows predicts a saving beyond its spread)"
            .to_owned(),
    };
    [
        h.basis.title().to_owned(),
        format!("{} — {period}{against}", named(h.cell)),
        cause_label.to_owned(),
        cause,
        fix,
        host_code,
    ]
}

/// A positive share (of a difference) said: a part larger than the whole difference (other
/// parts shrank) is said so instead of as a share over 100 %: "40 % of it", or, above 1, "more than all of it".
pub(crate) fn share_label(share: f64) -> String {
    if share > 1.0 {
        "more than all of it (other parts of it shrank)".to_owned()
    } else {
        format!("{} of it", percent(share))
    }
}
