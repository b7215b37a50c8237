#![forbid(unsafe_code)]
//! A standalone SVG of one aligned step: base (eager) on top, head (graphed) below, one row per
//! stream, gaps coloured by cause with a legend, and dashed lines joining aligned ops.
//!
//! Both panels share one scale; each panel's time axis starts at its own step's window start
//! (the previous step's end), so the idle time before the first op is visible.

use super::{short_name, stat_us, trace_str, us2, xml_escape};
use crate::analysis::compare::PairPicture;
use crate::analysis::stats::Stat;
use crate::analysis::{
    Analysis, CauseKind, CellAnalysis, CellComparison, Comparison, Op, OpKind, Step,
};
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
    let ratio = pair
        .ratio
        .map_or(String::new(), |r| format!(", period ratio {r:.2}×"));
    let title = format!(
        "step {step}: {} (top) vs {} (bottom){ratio}",
        pair.base_label, pair.head_label
    );
    render(&panels, pair, &title, &[])
}

/// The picture of one compared cell of `c` (`compare.svg`, `try`'s per variant): the step of
/// each side `picture` chose, BASE above HEAD to one scale, each pair of matched ops in one
/// colour, the gap that changed most labelled with its cause and µs on both sides (or "gone"),
/// and the untraced periods with their spread in the caption. `sides` names the two sides.
pub fn comparison_svg(
    traces: [&[Trace]; 2],
    c: &Comparison,
    picture: &PairPicture,
    sides: [&str; 2],
    verdict: Option<&str>,
) -> String {
    let pair = &c.cells[picture.cell];
    let analyses = [&c.base, &c.head];
    let mut panels = [
        Panel::new(traces[0], &c.base, pair.base, picture.base_step, "base"),
        Panel::new(traces[1], &c.head, pair.head, picture.head_step, "head"),
    ];
    let mut colours: [BTreeMap<usize, &'static str>; 2] = Default::default();
    for (ai, a) in pair.aligned.iter().enumerate() {
        let (Some(bp), Some(hp)) = (a.base, a.head) else {
            continue;
        };
        if let (Some(bo), Some(ho)) = (panels[0].op_at(bp), panels[1].op_at(hp)) {
            let colour = MATCH_PALETTE[ai % MATCH_PALETTE.len()];
            colours[0].insert(bo, colour);
            colours[1].insert(ho, colour);
        }
    }
    if let Some(ai) = picture.largest_gap_change {
        let a = &pair.aligned[ai];
        let cells = [pair.base, pair.head].map(Some);
        let medians: Vec<Option<f64>> = [a.base, a.head]
            .iter()
            .enumerate()
            .map(|(s, pos)| {
                let cell = analyses[s].cells.get(cells[s]?)?;
                Some(cell.sequence.get((*pos)?)?.gap_before.median)
            })
            .collect();
        let base_cause = a
            .base
            .and_then(|p| c.base.cells.get(pair.base)?.sequence.get(p))
            .map(|e| e.gap_cause);
        let us = |ns: Option<f64>| ns.map_or("—".to_owned(), us2);
        let medians_text = format!("median {} → {} µs", us(medians[0]), us(medians[1]));
        for (s, pos) in [a.base, a.head].into_iter().enumerate() {
            let op = pos.and_then(|p| panels[s].op_at(p));
            let gap = panels[s].step.and_then(|st| {
                st.gaps
                    .iter()
                    .find(|g| Some(g.after) == op && !g.is_empty())
            });
            let text = match gap {
                Some(g) if !(s == 1 && picture.gone_in_head) => format!(
                    "{} {} µs ({medians_text})",
                    g.cause.kind().label(),
                    us2(g.len() as f64)
                ),
                _ => format!(
                    "{}: gone ({medians_text})",
                    base_cause.map_or("the gap", |k| k.label())
                ),
            };
            panels[s].marked = Some(Marked { op, text });
        }
    }
    for (panel, colours) in panels.iter_mut().zip(colours) {
        panel.colours = Some(colours);
    }
    // The panels name the cells; the title, the sides and the verdict.
    let verdict = match verdict {
        Some(v) => v.to_owned(),
        None => {
            let ratio = pair
                .ratio
                .map_or(String::new(), |r| format!(", period ratio {r:.2}×"));
            format!("{}{ratio}", super::markdown::comparison_change_label(pair))
        }
    };
    let title = format!("{} (top) vs {} (bottom): {verdict}", sides[0], sides[1]);
    let caption: Vec<String> = [0, 1]
        .into_iter()
        .map(|s| {
            let cell = [pair.base, pair.head][s];
            let cell = analyses[s].cells.get(cell);
            let stat = |p: Option<Stat>| p.map_or("not measured".to_owned(), |p| stat_us(&p));
            format!(
                "{}: untraced period {}; traced period {}",
                sides[s],
                stat(cell.and_then(|x| x.untraced_period)),
                stat(cell.and_then(|x| x.period))
            )
        })
        .collect();
    render(&panels, pair, &title, &caption)
}

/// The two panels under `title`, their alignment lines, the legend and `caption` (one line
/// each).
fn render(
    panels: &[Panel<'_>; 2],
    pair: &CellComparison,
    title: &str,
    caption: &[String],
) -> String {
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
    let ops: Vec<(String, &str, &str)> = if panels.iter().any(|p| p.colours.is_some()) {
        vec![
            (
                "matched op (a colour a pair)".to_owned(),
                MATCH_PALETTE[0],
                "op",
            ),
            ("op on one side only".to_owned(), UNMATCHED, "op"),
        ]
    } else {
        let kinds: BTreeSet<u8> = panels
            .iter()
            .flat_map(|p| p.ops().map(|o| kind_order(o.kind)))
            .collect();
        kinds
            .iter()
            .map(|&k| {
                let kind = [OpKind::Kernel, OpKind::Memcpy, OpKind::Memset][k as usize];
                (op_kind_label(kind).to_owned(), op_colour(kind), "op")
            })
            .collect()
    };
    let legend_items = causes.len() + ops.len();
    let legend_rows = legend_items.div_ceil(4).max(1);
    let caption_top = legend_top + 20.0 + legend_rows as f64 * 18.0;
    let height = caption_top + caption.len() as f64 * 16.0 + 10.0;

    let mut s = picture_start(height, title);

    // Where each op was drawn, for the alignment lines: (panel, op index) -> (x, top, bottom).
    let mut drawn: [BTreeMap<usize, (f64, f64, f64)>; 2] = [BTreeMap::new(), BTreeMap::new()];
    for (i, p) in panels.iter().enumerate() {
        p.draw(&mut s, tops[i], scale, span, &mut drawn[i]);
    }

    draw_alignment(&mut s, pair, panels, &drawn);
    draw_legend(&mut s, legend_top, &ops, &causes);
    if !caption.is_empty() {
        let _ = writeln!(s, "<g class=\"caption\">");
        for (i, line) in caption.iter().enumerate() {
            let _ = writeln!(
                s,
                "<text x=\"8\" y=\"{:.1}\">{}</text>",
                caption_top + 12.0 + i as f64 * 16.0,
                xml_escape(line)
            );
        }
        let _ = writeln!(s, "</g>");
    }
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

/// The legend at `legend_top`: the ops' colours (`ops`: label, colour, class), then the
/// causes of the gaps drawn.
fn draw_legend(
    s: &mut String,
    legend_top: f64,
    ops: &[(String, &str, &str)],
    causes: &BTreeSet<CauseKind>,
) {
    let _ = writeln!(s, "<g class=\"legend\">");
    let _ = writeln!(
        s,
        "<text x=\"8\" y=\"{:.1}\" font-weight=\"bold\">legend</text>",
        legend_top + 12.0
    );
    let entries: Vec<(String, &str, &str)> = ops
        .iter()
        .cloned()
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
    /// A comparison's colours: of each matched op (by timeline index); the others are
    /// [`UNMATCHED`]. `None`: coloured by kind.
    colours: Option<BTreeMap<usize, &'static str>>,
    /// A comparison's changed gap, labelled in place of the step's largest.
    marked: Option<Marked>,
}

/// The gap a comparison labels: the gap before op `op` (timeline index) on this side; where
/// it has none, the label stands at the op.
struct Marked {
    op: Option<usize>,
    text: String,
}

/// The colours of matched ops in a comparison picture, one per aligned pair in turn (none of
/// them a gap cause's, [`cause_colour`]).
const MATCH_PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
];

/// An op a comparison matched with none on the other side.
const UNMATCHED: &str = "#bab0ac";

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
            colours: None,
            marked: None,
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
        super::step_op_at(self.traces, self.all_ops(), cell, step, pos)
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
        // The gap named in its box (else on the title line): a comparison's changed gap, or
        // the step's largest.
        let (named, class) = match &self.marked {
            Some(m) => (
                step.gaps
                    .iter()
                    .find(|g| Some(g.after) == m.op && !g.is_empty()),
                "changed-gap",
            ),
            None => (step.gaps.iter().max_by_key(|g| g.len()), "largest-gap"),
        };
        // A comparison's label reads on from its gap's box (or from its op, the gap gone)
        // along the gaps row, whose other boxes are short.
        let marked_at = self.marked.as_ref().and_then(|m| {
            let x = match named {
                Some(g) => x_of(g.start),
                None => x_of(self.all_ops().get(m.op?)?.start),
            };
            let width = m.text.chars().count() as f64 * CHAR_W;
            Some((m, x.min(WIDTH - RIGHT - width).max(LEFT)))
        });
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
            if marked_at.is_some() && named == Some(g) {
                continue;
            }
            let label = format!(
                "largest gap: {} {} µs",
                g.cause.kind().label(),
                us2(g.len() as f64)
            );
            let fits = label.chars().count() as f64 * CHAR_W + 4.0 <= w;
            if named == Some(g) {
                let (lx, ly, anchor) = if fits {
                    (x + 2.0, gy + 13.0, "start")
                } else {
                    (WIDTH - RIGHT, top + 14.0, "end")
                };
                let _ = writeln!(
                    s,
                    "<text class=\"{class}\" x=\"{lx:.1}\" y=\"{ly:.1}\" font-size=\"10\" font-weight=\"bold\" text-anchor=\"{anchor}\">{}</text>",
                    xml_escape(&label)
                );
                if fits {
                    continue;
                }
            }
            let under_label = marked_at.is_some_and(|(m, lx)| {
                x + 2.0 >= lx && x + 2.0 <= lx + m.text.chars().count() as f64 * CHAR_W
            });
            if w >= 40.0 && !under_label {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{}</text>",
                    x + 2.0,
                    gy + 13.0,
                    xml_escape(&fit(&format!("{} µs", us2(g.len() as f64)), w))
                );
            }
        }
        // Drawn last, over the boxes.
        if let Some((m, x)) = marked_at {
            let _ = writeln!(
                s,
                "<text class=\"{class}\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" font-weight=\"bold\">{}</text>",
                x + 2.0,
                gy + 13.0,
                xml_escape(&m.text)
            );
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
                match &self.colours {
                    Some(c) => c.get(&i).copied().unwrap_or(UNMATCHED),
                    None => op_colour(op.kind),
                }
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

/// `try.svg`: a strip per cell, a row per side (BASE, then each variant with its word), a dot
/// per round's median period and a tick at the median over rounds; BASE's rounds span a band
/// across the strip, so a variant's dots beyond it moved beyond the run-to-run spread.
pub fn trial_rounds_svg(r: &crate::analysis::trial::TrialReport) -> String {
    const STRIP_ROW: f64 = 20.0;
    // Room for a variant's label and word.
    const LEFT: f64 = 320.0;
    let cells: Vec<&str> = r
        .variants
        .first()
        .map(|v| v.cells.iter().map(|c| c.cell.as_str()).collect())
        .unwrap_or_default();
    let strip_h = |rows: usize| TITLE_H + rows as f64 * STRIP_ROW + AXIS_H;
    let rows = 1 + r.variants.len();
    let height = 34.0 + cells.len() as f64 * (strip_h(rows) + PANEL_GAP) + 10.0;
    let mut s = picture_start(
        height,
        &format!(
            "each round's period per cell, BASE and every variant ({} round(s) judged)",
            r.rounds_judged.len()
        ),
    );
    let mut top = 34.0;
    for cell in cells {
        let verdicts: Vec<_> = r
            .variants
            .iter()
            .filter_map(|v| Some((v, v.cells.iter().find(|c| c.cell == cell)?)))
            .collect();
        let base_rounds = verdicts
            .first()
            .map_or(&[][..], |(_, c)| c.base_rounds.as_slice());
        let mut rows: Vec<(String, &[f64])> = vec![("BASE".to_owned(), base_rounds)];
        for (v, c) in &verdicts {
            rows.push((
                format!("{} ({})", v.label, c.word.label()),
                &c.variant_rounds,
            ));
        }
        let all = rows.iter().flat_map(|(_, v)| v.iter().copied());
        let (lo, hi) = all.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let _ = writeln!(s, "<g class=\"strip\">");
        let _ = writeln!(
            s,
            "<text x=\"8\" y=\"{:.1}\" font-weight=\"bold\">{}</text>",
            top + 14.0,
            xml_escape(cell)
        );
        if lo > hi {
            let _ = writeln!(s, "</g>");
            top += strip_h(rows.len()) + PANEL_GAP;
            continue;
        }
        // Room either side so the extreme dots are not on the edge.
        let pad = ((hi - lo) * 0.1).max(100.0);
        let (lo, hi) = (lo - pad, hi + pad);
        let scale = (WIDTH - LEFT - RIGHT) / (hi - lo);
        let x_of = |ns: f64| LEFT + (ns - lo) * scale;
        let rows_top = top + TITLE_H;
        if let (Some(bmin), Some(bmax)) = (
            base_rounds.iter().copied().reduce(f64::min),
            base_rounds.iter().copied().reduce(f64::max),
        ) {
            let _ = writeln!(
                s,
                "<rect class=\"base-spread\" x=\"{:.1}\" y=\"{rows_top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#4e79a7\" opacity=\"0.12\"><title>BASE's rounds: {}–{} µs</title></rect>",
                x_of(bmin),
                ((bmax - bmin) * scale).max(1.0),
                rows.len() as f64 * STRIP_ROW,
                us2(bmin),
                us2(bmax)
            );
        }
        for (i, (label, rounds)) in rows.iter().enumerate() {
            let y = rows_top + i as f64 * STRIP_ROW;
            let colour = if i == 0 { "#4e79a7" } else { "#f28e2b" };
            let _ = writeln!(
                s,
                "<text class=\"side\" x=\"8\" y=\"{:.1}\">{}</text>",
                y + 14.0,
                xml_escape(&fit(label, LEFT - 8.0))
            );
            for (k, &v) in rounds.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "<circle class=\"round\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{colour}\" opacity=\"0.8\"><title>{}</title></circle>",
                    x_of(v),
                    y + 10.0,
                    xml_escape(&format!("{label}, round {}: {} µs", k + 1, us2(v)))
                );
            }
            let mut sorted = rounds.to_vec();
            if let Some(m) = crate::analysis::stats::Stat::of(&mut sorted) {
                let x = x_of(m.median);
                let _ = writeln!(
                    s,
                    "<line class=\"median\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"black\" stroke-width=\"2\"/>",
                    y + 3.0,
                    y + 17.0
                );
            }
        }
        let axis_y = rows_top + rows.len() as f64 * STRIP_ROW + 6.0;
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"black\"/>",
            WIDTH - RIGHT
        );
        let tick = nice_tick((hi - lo) / 1000.0) * 1000.0;
        let mut t = (lo / tick).ceil() * tick;
        while t <= hi {
            let x = x_of(t);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{axis_y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"black\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
                axis_y + 4.0,
                axis_y + 15.0,
                trim_num(t / 1000.0)
            );
            t += tick;
        }
        let _ = writeln!(
            s,
            "<text x=\"8\" y=\"{:.1}\" font-size=\"10\">period, µs</text>\n</g>",
            axis_y + 15.0
        );
        top += strip_h(rows.len()) + PANEL_GAP;
    }
    let _ = writeln!(s, "</svg>");
    s
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

/// A picture's opening: the `<svg>` element of `height`, a white ground and `title` (escaped).
fn picture_start(height: f64, title: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(
        s,
        "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height:.0}\" fill=\"white\"/>"
    );
    let _ = writeln!(
        s,
        "<text x=\"8\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        xml_escape(title)
    );
    s
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

    #[test]
    fn a_comparison_picture_labels_the_changed_gap_on_both_sides() {
        let (traces, _) = fixtures::fixture();
        // The fixture's eager cell against its graphed one: their gaps differ.
        let mut c = fixtures::comparison(1.02, vec![]);
        c.cells = vec![c.base.regime_pairs[0].clone()];
        let p = crate::analysis::compare::headline_picture(&c).unwrap();
        let svg = comparison_svg([&traces, &traces], &c, &p, ["BASE", "HEAD"], None);
        assert!(tag_balance(&svg).values().all(|&v| v == 0));
        assert!(svg.contains(">BASE (top) vs HEAD (bottom): "));
        assert!(svg.contains(">eager T=8 [") && svg.contains(">graphed mode=1 T=8 ["));
        let labels: Vec<&str> = svg
            .split("class=\"changed-gap\"")
            .skip(1)
            .map(|t| &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()])
            .collect();
        assert_eq!(labels.len(), 2, "one label a side: {labels:?}");
        let a = &c.cells[0].aligned[p.largest_gap_change.unwrap()];
        let cause = c.base.cells[0].sequence[a.base.unwrap()].gap_cause;
        assert!(
            labels[0].starts_with(&xml_escape(cause.label())),
            "{labels:?}"
        );
        assert!(labels.iter().all(|l| l.contains("µs") && l.contains(" → ")));
        assert!(
            !svg.contains("class=\"largest-gap\""),
            "the changed gap, not the largest"
        );
        // Matched ops share a colour; the caption gives each side's periods.
        let matched = c.cells[0]
            .aligned
            .iter()
            .filter(|a| a.base.is_some() && a.head.is_some());
        let first = MATCH_PALETTE[c.cells[0]
            .aligned
            .iter()
            .position(|a| a.base.is_some() && a.head.is_some())
            .unwrap()
            % MATCH_PALETTE.len()];
        assert!(matched.count() > 0);
        assert_eq!(svg.matches("class=\"op\" x").count(), 10);
        assert!(svg.matches(&format!("fill=\"{first}\" stroke")).count() >= 2);
        assert!(svg.contains(">BASE: untraced period ") && svg.contains(">HEAD: untraced period "));
    }
}
