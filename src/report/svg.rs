#![forbid(unsafe_code)]
//! A standalone SVG of one aligned step: base (eager) on top, head (graphed) below, one row per
//! stream, gaps coloured by cause with a legend, and dashed lines joining aligned ops.
//!
//! Both panels share one scale; each panel's time axis starts at its own step's window start
//! (the previous step's end), so the idle time before the first op is visible.

use super::{short_name, trace_str, us2, xml_escape};
use crate::analysis::{Analysis, CauseKind, CellAnalysis, CellComparison, Op, OpKind, Step};
use crate::trace::Trace;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 24.0;
const ROW_H: f64 = 18.0;
const ROW_GAP: f64 = 4.0;
const TITLE_H: f64 = 22.0;
const AXIS_H: f64 = 30.0;
const PANEL_GAP: f64 = 26.0;
const CHAR_W: f64 = 6.2;

/// The pair `step.svg` draws and its step, as the analysis chose them
/// ([`crate::analysis::headline::Picture`]: the headline cell's pair, at its most typical step).
/// `None` without an eager/graphed pair.
pub fn worst_pair(analysis: &Analysis) -> Option<(&CellComparison, usize)> {
    let picture = analysis.headline.as_ref()?.picture?;
    Some((analysis.regime_pairs.get(picture.pair)?, picture.step))
}

/// One aligned step of a regime pair of `analysis` (`pair.base`, `pair.head` index
/// `analysis.cells`); `step` indexes each cell's steps.
pub fn step_svg(
    traces: &[Trace],
    analysis: &Analysis,
    pair: &CellComparison,
    step: usize,
) -> String {
    step_svg_between(traces, analysis, traces, analysis, pair, step)
}

/// One aligned step of two cells from two analyses (e.g. a `compare` pair: `pair.base` indexes
/// `base.cells`, `pair.head` indexes `head.cells`).
pub fn step_svg_between(
    base_traces: &[Trace],
    base: &Analysis,
    head_traces: &[Trace],
    head: &Analysis,
    pair: &CellComparison,
    step: usize,
) -> String {
    let panels = [
        Panel::new(base_traces, base, pair.base, step, "base"),
        Panel::new(head_traces, head, pair.head, step, "head"),
    ];
    let span = panels
        .iter()
        .filter_map(|p| p.step.map(|s| s.end.saturating_sub(s.window_start)))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let scale = (WIDTH - LEFT - RIGHT) / span;

    // Vertical layout.
    let mut y = 34.0;
    let mut tops = [0.0; 2];
    for (i, p) in panels.iter().enumerate() {
        tops[i] = y;
        y += p.height() + PANEL_GAP;
    }
    let legend_top = y;
    let causes: BTreeSet<CauseKind> = panels
        .iter()
        .filter_map(|p| p.step)
        .flat_map(|s| s.gaps.iter().map(|g| g.cause.kind()))
        .collect();
    let kinds: BTreeSet<u8> = panels
        .iter()
        .flat_map(|p| p.ops().map(|o| kind_order(o.kind)))
        .collect();
    let legend_items = causes.len() + kinds.len();
    let legend_rows = legend_items.div_ceil(4).max(1);
    let height = legend_top + 20.0 + legend_rows as f64 * 18.0 + 10.0;

    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(
        s,
        "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height:.0}\" fill=\"white\"/>"
    );
    let ratio = pair
        .ratio
        .map_or(String::new(), |r| format!(", period ratio {r:.2}×"));
    let _ = writeln!(
        s,
        "<text x=\"8\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        xml_escape(&format!(
            "step {step}: {} (top) vs {} (bottom){ratio}",
            pair.base_label, pair.head_label
        ))
    );

    // Where each op was drawn, for the alignment lines: (panel, op index) -> (x, top, bottom).
    let mut drawn: [BTreeMap<usize, (f64, f64, f64)>; 2] = [BTreeMap::new(), BTreeMap::new()];
    for (i, p) in panels.iter().enumerate() {
        p.draw(&mut s, tops[i], scale, span, &mut drawn[i]);
    }

    draw_alignment(&mut s, pair, &panels, &drawn);
    draw_legend(&mut s, legend_top, &kinds, &causes);
    let _ = writeln!(s, "</svg>");
    s
}

/// Dashed lines joining the ops the pair aligned, where both panels drew them.
fn draw_alignment(
    s: &mut String,
    pair: &CellComparison,
    panels: &[Panel<'_>; 2],
    drawn: &[BTreeMap<usize, (f64, f64, f64)>; 2],
) {
    let _ = writeln!(
        s,
        "<g class=\"aligned\" stroke=\"#555\" stroke-width=\"1\" stroke-dasharray=\"4 3\" opacity=\"0.7\">"
    );
    for a in &pair.aligned {
        let (Some(bp), Some(hp)) = (a.base, a.head) else {
            continue;
        };
        let (Some(bo), Some(ho)) = (panels[0].op_at(bp), panels[1].op_at(hp)) else {
            continue;
        };
        let (Some(&(x1, _, y1)), Some(&(x2, y2, _))) = (drawn[0].get(&bo), drawn[1].get(&ho))
        else {
            continue;
        };
        let _ = writeln!(
            s,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\"><title>{}</title></line>",
            xml_escape(&a.name)
        );
    }
    let _ = writeln!(s, "</g>");
}

/// The legend at `legend_top`: the op kinds drawn, then the causes of the gaps drawn.
fn draw_legend(
    s: &mut String,
    legend_top: f64,
    kinds: &BTreeSet<u8>,
    causes: &BTreeSet<CauseKind>,
) {
    let _ = writeln!(s, "<g class=\"legend\">");
    let _ = writeln!(
        s,
        "<text x=\"8\" y=\"{:.1}\" font-weight=\"bold\">legend</text>",
        legend_top + 12.0
    );
    let entries: Vec<(String, &str, &str)> = kinds
        .iter()
        .map(|&k| {
            let kind = [OpKind::Kernel, OpKind::Memcpy, OpKind::Memset][k as usize];
            (op_kind_label(kind).to_owned(), op_colour(kind), "op")
        })
        .chain(
            causes
                .iter()
                .map(|&c| (format!("gap: {}", c.label()), cause_colour(c), "gap")),
        )
        .collect();
    for (i, (label, colour, class)) in entries.iter().enumerate() {
        let x = LEFT + (i % 4) as f64 * 260.0;
        let y = legend_top + 4.0 + (i / 4) as f64 * 18.0;
        let _ = writeln!(
            s,
            "<rect class=\"legend-{class}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"14\" height=\"12\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 18.0,
            y + 10.0,
            xml_escape(label)
        );
    }
    let _ = writeln!(s, "</g>");
}

struct Panel<'a> {
    traces: &'a [Trace],
    analysis: &'a Analysis,
    cell: Option<&'a CellAnalysis>,
    step: Option<&'a Step>,
    step_index: usize,
    side: &'static str,
    /// Streams (device, stream) of the step's ops, in row order.
    rows: Vec<(u32, u32)>,
}

impl<'a> Panel<'a> {
    fn new(
        traces: &'a [Trace],
        analysis: &'a Analysis,
        cell: usize,
        step: usize,
        side: &'static str,
    ) -> Panel<'a> {
        let cell = analysis.cells.get(cell);
        let step_ref = cell.and_then(|c| c.steps.get(step));
        let mut p = Panel {
            traces,
            analysis,
            cell,
            step: step_ref,
            step_index: step,
            side,
            rows: Vec::new(),
        };
        let rows: BTreeSet<(u32, u32)> = p.ops().map(|o| (o.device, o.stream)).collect();
        p.rows = rows.into_iter().collect();
        p
    }

    fn all_ops(&self) -> &'a [Op] {
        self.cell
            .and_then(|c| self.analysis.timelines.get(c.trace))
            .map_or(&[], |t| t.ops.as_slice())
    }

    fn ops(&self) -> impl Iterator<Item = &'a Op> + '_ {
        let all = self.all_ops();
        self.step
            .into_iter()
            .flat_map(|s| s.ops.iter())
            .filter_map(move |&i| all.get(i))
    }

    fn name(&self, op: &Op) -> &'a str {
        self.cell
            .map_or("?", |c| trace_str(self.traces, c.trace, op.name))
    }

    /// The op (timeline index) of this step at canonical-sequence position `pos`: the step's
    /// `pos`-th op when its name matches, else the same occurrence of that name in the step.
    fn op_at(&self, pos: usize) -> Option<usize> {
        let (cell, step) = (self.cell?, self.step?);
        let want = &cell.sequence.get(pos)?.name;
        let all = self.all_ops();
        if let Some(&i) = step.ops.get(pos)
            && all.get(i).is_some_and(|o| self.name(o) == want)
        {
            return Some(i);
        }
        let nth = cell.sequence[..pos]
            .iter()
            .filter(|e| &e.name == want)
            .count();
        step.ops
            .iter()
            .copied()
            .filter(|&i| all.get(i).is_some_and(|o| self.name(o) == want))
            .nth(nth)
    }

    fn height(&self) -> f64 {
        TITLE_H + (self.rows.len() + 1) as f64 * (ROW_H + ROW_GAP) + AXIS_H
    }

    fn row_y(&self, top: f64, row: usize) -> f64 {
        top + TITLE_H + row as f64 * (ROW_H + ROW_GAP)
    }

    fn draw(
        &self,
        s: &mut String,
        top: f64,
        scale: f64,
        span: f64,
        drawn: &mut BTreeMap<usize, (f64, f64, f64)>,
    ) {
        let _ = writeln!(s, "<g class=\"panel-{}\">", self.side);
        let label = self.cell.map_or("(missing cell)", |c| c.label.as_str());
        let Some(step) = self.step else {
            let _ = writeln!(
                s,
                "<text x=\"8\" y=\"{:.1}\" font-weight=\"bold\">{}</text>\n</g>",
                top + 14.0,
                xml_escape(&format!("{label}: no step {}", self.step_index))
            );
            return;
        };
        let window = step.end.saturating_sub(step.window_start);
        let regime = self
            .cell
            .map_or("?", |c| super::regime_label(c.observed.regime));
        let mut title = format!(
            "{label} [{regime}] step {}: window {} µs, busy {} µs, idle {} µs",
            step.index,
            us2(window as f64),
            us2(step.busy as f64),
            us2(step.idle as f64)
        );
        if let Some(p) = step.period {
            title += &format!(", period {} µs", us2(p as f64));
        }
        if step.first_launch {
            title += " (first launch of its graph)";
        }
        let _ = writeln!(
            s,
            "<text x=\"8\" y=\"{:.1}\" font-weight=\"bold\">{}</text>",
            top + 14.0,
            xml_escape(&title)
        );
        let rows_bottom = self.row_y(top, self.rows.len() + 1) - ROW_GAP;
        let gy = self.draw_rows(s, top);
        let x_of = |t: u64| LEFT + t.saturating_sub(step.window_start) as f64 * scale;
        self.draw_gaps(s, step, top, gy, scale, &x_of);
        self.draw_ops(s, step, top, scale, &x_of, drawn);
        draw_axis(s, rows_bottom + 6.0, scale, span);
        let _ = writeln!(s, "</g>");
    }

    /// The stream rows' labels and lanes, then the gaps row's label; returns the gaps row's top.
    fn draw_rows(&self, s: &mut String, top: f64) -> f64 {
        let gap_row = self.rows.len();
        for (r, &(device, stream)) in self.rows.iter().enumerate() {
            let y = self.row_y(top, r);
            let name = if self.rows.iter().any(|&(d, _)| d != device) {
                format!("dev {device} stream {stream}")
            } else {
                format!("stream {stream}")
            };
            let _ = writeln!(
                s,
                "<rect x=\"{LEFT}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{ROW_H}\" fill=\"#f4f4f4\"/><text x=\"8\" y=\"{:.1}\">{}</text>",
                WIDTH - LEFT - RIGHT,
                y + 13.0,
                xml_escape(&name)
            );
        }
        let gy = self.row_y(top, gap_row);
        let _ = writeln!(s, "<text x=\"8\" y=\"{:.1}\">gaps</text>", gy + 13.0);
        gy
    }

    /// The step's gaps: a faint band across the stream rows and a solid box on the gaps row
    /// (`gy`), the largest named by its cause and size.
    fn draw_gaps(
        &self,
        s: &mut String,
        step: &Step,
        top: f64,
        gy: f64,
        scale: f64,
        x_of: &dyn Fn(u64) -> f64,
    ) {
        let largest = step.gaps.iter().max_by_key(|g| g.len());
        for g in &step.gaps {
            if g.end <= g.start {
                continue;
            }
            let (x, w) = (x_of(g.start), (g.len() as f64 * scale).max(0.5));
            let colour = cause_colour(g.cause.kind());
            let tip = xml_escape(&format!(
                "gap {} µs: {}",
                us2(g.len() as f64),
                g.cause.label()
            ));
            let band_top = self.row_y(top, 0);
            let _ = writeln!(
                s,
                "<rect class=\"gap-band\" x=\"{x:.1}\" y=\"{band_top:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{colour}\" opacity=\"0.18\"/>",
                (gy - band_top - ROW_GAP).max(0.0)
            );
            let _ = writeln!(
                s,
                "<rect class=\"gap\" x=\"{x:.1}\" y=\"{gy:.1}\" width=\"{w:.1}\" height=\"{ROW_H}\" fill=\"{colour}\"><title>{tip}</title></rect>"
            );
            let label = format!(
                "largest gap: {} {} µs",
                g.cause.kind().label(),
                us2(g.len() as f64)
            );
            let fits = label.chars().count() as f64 * CHAR_W + 4.0 <= w;
            if largest == Some(g) {
                // The step's largest gap, named by its cause and size: in its box where it fits,
                // else at the right of the panel's title line.
                let (lx, ly, anchor) = if fits {
                    (x + 2.0, gy + 13.0, "start")
                } else {
                    (WIDTH - RIGHT, top + 14.0, "end")
                };
                let _ = writeln!(
                    s,
                    "<text class=\"largest-gap\" x=\"{lx:.1}\" y=\"{ly:.1}\" font-size=\"10\" font-weight=\"bold\" text-anchor=\"{anchor}\">{}</text>",
                    xml_escape(&label)
                );
                if fits {
                    continue;
                }
            }
            if w >= 40.0 {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{}</text>",
                    x + 2.0,
                    gy + 13.0,
                    xml_escape(&fit(&format!("{} µs", us2(g.len() as f64)), w))
                );
            }
        }
    }

    /// The step's ops on their stream rows; where each was drawn goes into `drawn`.
    fn draw_ops(
        &self,
        s: &mut String,
        step: &Step,
        top: f64,
        scale: f64,
        x_of: &dyn Fn(u64) -> f64,
        drawn: &mut BTreeMap<usize, (f64, f64, f64)>,
    ) {
        let all = self.all_ops();
        for &i in &step.ops {
            let Some(op) = all.get(i) else { continue };
            let Some(row) = self.rows.iter().position(|&r| r == (op.device, op.stream)) else {
                continue;
            };
            let y = self.row_y(top, row);
            let x = x_of(op.start);
            let w = (op.end.saturating_sub(op.start) as f64 * scale).max(1.0);
            let name = self.name(op);
            let tip = xml_escape(&format!(
                "{name} — {} µs (starts at +{} µs)",
                us2(op.end.saturating_sub(op.start) as f64),
                us2(op.start.saturating_sub(step.window_start) as f64)
            ));
            let _ = writeln!(
                s,
                "<rect class=\"op\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{ROW_H}\" fill=\"{}\" stroke=\"white\" stroke-width=\"0.5\"><title>{tip}</title></rect>",
                op_colour(op.kind)
            );
            if w >= 30.0 {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"white\">{}</text>",
                    x + 2.0,
                    y + 13.0,
                    xml_escape(&fit(short_name(name), w))
                );
            }
            drawn.insert(i, (x, y, y + ROW_H));
        }
    }
}

/// The time axis at `axis_y`, in µs from the window start.
fn draw_axis(s: &mut String, axis_y: f64, scale: f64, span: f64) {
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"black\"/>",
        WIDTH - RIGHT
    );
    let tick = nice_tick(span / 1000.0);
    let mut t = 0.0;
    while t * 1000.0 <= span + 1e-6 {
        let x = LEFT + t * 1000.0 * scale;
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{axis_y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"black\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
            axis_y + 4.0,
            axis_y + 15.0,
            trim_num(t)
        );
        t += tick;
    }
    let _ = writeln!(
        s,
        "<text x=\"8\" y=\"{:.1}\" font-size=\"10\">µs from window start</text>",
        axis_y + 15.0
    );
}

/// A tick step of 1, 2 or 5 × 10^k µs giving at most about 10 ticks over `span_us`.
fn nice_tick(span_us: f64) -> f64 {
    let raw = (span_us / 10.0).max(1e-3);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&t| t >= raw)
        .unwrap_or(10.0 * mag)
}

fn trim_num(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// `text` cut to fit `width` pixels (with an ellipsis when cut).
fn fit(text: &str, width: f64) -> String {
    let max = ((width - 4.0) / CHAR_W).floor().max(0.0) as usize;
    let n = text.chars().count();
    if n <= max {
        text.to_owned()
    } else if max <= 1 {
        String::new()
    } else {
        text.chars().take(max - 1).collect::<String>() + "…"
    }
}

fn kind_order(k: OpKind) -> u8 {
    match k {
        OpKind::Kernel => 0,
        OpKind::Memcpy => 1,
        OpKind::Memset => 2,
    }
}

fn op_kind_label(k: OpKind) -> &'static str {
    match k {
        OpKind::Kernel => "kernel",
        OpKind::Memcpy => "memcpy",
        OpKind::Memset => "memset",
    }
}

fn op_colour(k: OpKind) -> &'static str {
    match k {
        OpKind::Kernel => "#4e79a7",
        OpKind::Memcpy => "#59a14f",
        OpKind::Memset => "#f28e2b",
    }
}

/// One colour per cause kind, by its position in [`CauseKind::ALL`] (a Tableau-like palette,
/// distinct for the first 12 kinds).
pub(crate) fn cause_colour(k: CauseKind) -> &'static str {
    const PALETTE: [&str; 12] = [
        "#e15759", "#b07aa1", "#ff9da7", "#76b7b2", "#edc948", "#9c755f", "#8cd17d", "#499894",
        "#d37295", "#fabfd2", "#86bcb6", "#79706e",
    ];
    let i = CauseKind::ALL.iter().position(|&c| c == k).unwrap_or(0);
    if k == CauseKind::Unattributed {
        // Always the grey: the unexplained residual.
        PALETTE[PALETTE.len() - 1]
    } else {
        PALETTE[i % (PALETTE.len() - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    /// Counts of opening (non-self-closing) and closing tags per element name.
    fn tag_balance(svg: &str) -> BTreeMap<String, i64> {
        let mut bal: BTreeMap<String, i64> = BTreeMap::new();
        let mut rest = svg;
        while let Some(i) = rest.find('<') {
            let end = rest[i..].find('>').expect("unterminated tag") + i;
            let tag = &rest[i + 1..end];
            assert!(!tag.contains('<'), "'<' inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                *bal.entry(name.trim().to_owned()).or_default() -= 1;
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap().to_owned();
                *bal.entry(name).or_default() += 1;
            }
            rest = &rest[end + 1..];
        }
        bal
    }

    #[test]
    fn svg_is_standalone_and_balanced() {
        let (traces, a) = fixtures::fixture();
        let svg = step_svg(&traces, &a, &a.regime_pairs[0], 1);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        let bal = tag_balance(&svg);
        assert!(bal.values().all(|&v| v == 0), "{bal:?}");
        // The '<' and '&' of kernel names are escaped (inside <title>).
        assert!(svg.contains("void convert_topk&lt;int&gt;(int*)"));
        assert!(!svg.contains("convert_topk<int>"));
        // Both panels, one row per stream in each.
        assert!(svg.contains("class=\"panel-base\"") && svg.contains("class=\"panel-head\""));
        assert_eq!(svg.matches(">stream 7</text>").count(), 2);
        assert_eq!(svg.matches(">stream 9</text>").count(), 2);
        // Every op drawn, and one dashed line per aligned pair.
        assert_eq!(svg.matches("class=\"op\"").count(), 10);
        let aligned = svg.split("<g class=\"aligned\"").nth(1).unwrap();
        let aligned = aligned.split("</g>").next().unwrap();
        assert_eq!(aligned.matches("<line").count(), 5);
        assert!(svg.contains("stroke-dasharray"));
    }

    #[test]
    fn legend_has_each_cause_present() {
        let (traces, a) = fixtures::fixture();
        let svg = step_svg(&traces, &a, &a.regime_pairs[0], 1);
        let legend = svg.split("<g class=\"legend\">").nth(1).unwrap();
        let present: BTreeSet<CauseKind> = [0, 1]
            .iter()
            .flat_map(|&c| a.cells[c].steps[1].gaps.iter().map(|g| g.cause.kind()))
            .collect();
        assert!(present.contains(&CauseKind::ExternalEventWait));
        assert!(present.contains(&CauseKind::HostLaunchBound));
        for k in CauseKind::ALL {
            let entry = format!(">gap: {}</text>", xml_escape(k.label()));
            assert_eq!(legend.contains(&entry), present.contains(&k), "{k:?}");
            if present.contains(&k) {
                assert!(svg.contains(&format!("fill=\"{}\"", cause_colour(k))));
            }
        }
        assert!(legend.contains(">kernel</text>") && legend.contains(">memset</text>"));
        assert!(!legend.contains(">memcpy</text>"));
    }

    #[test]
    fn comparison_pairs_draw_from_two_analyses() {
        let (traces, _) = fixtures::fixture();
        let c = fixtures::comparison(1.02, vec![]);
        let svg = step_svg_between(&traces, &c.base, &traces, &c.head, &c.cells[1], 2);
        assert!(svg.contains("graphed mode=2 T=8 (top) vs graphed mode=1 T=8 (bottom)"));
        assert!(svg.contains("period ratio 0.96×"));
        assert!(tag_balance(&svg).values().all(|&v| v == 0));
        assert_eq!(svg.matches("class=\"op\"").count(), 10);
    }

    #[test]
    fn missing_step_is_stated() {
        let (traces, a) = fixtures::fixture();
        let svg = step_svg(&traces, &a, &a.regime_pairs[0], 99);
        assert!(svg.contains("eager T=8: no step 99"));
        assert!(tag_balance(&svg).values().all(|&v| v == 0));
    }

    #[test]
    fn ticks_and_fit() {
        assert_eq!(nice_tick(28.0), 5.0);
        assert_eq!(nice_tick(10.0), 1.0);
        assert_eq!(nice_tick(150.0), 20.0);
        assert_eq!(trim_num(2.5), "2.5");
        assert_eq!(trim_num(0.0), "0");
        assert_eq!(fit("abcdef", 100.0), "abcdef");
        assert_eq!(fit("abcdefghijklmnop", 40.0), "abcd…");
    }
}
