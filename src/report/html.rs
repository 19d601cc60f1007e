//! `--format html`: one self-contained page (inline CSS, inline SVG drawn
//! with plotters, one small inline script), readable without a network.
//!
//! Per host class, in this order: what ships per bucket and why; each
//! cell's speedup per config with its spread and the threshold; the raw
//! samples of the baseline and the winner; the drift anchors over time;
//! an adaptive search's progress; the objective against each secondary
//! metric with the Pareto front; the evidence tables. Every plotted number
//! keeps its context (unit, n, spread, host class, baseline) in axis
//! labels, captions or SVG `<title>` tooltips, and an unknown spread is
//! drawn and written as unknown, never as zero.

use std::fmt::Write as _;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::render::{
    BUCKET_HEADER, bucket_row, class_line, footer, header, n_cell, num, rows, search_table,
    speedup_cell, value_cell,
};
use crate::decide::{Analysis, CellReport, ClassReport, ConfigReport, MetricInfo};
use crate::ledger::records::{AttemptRecord, AttemptStatus};
use crate::spec::Better;
use crate::trial::RoleKind;

const WIDTH: u32 = 880;
const FONT: &str = "sans-serif";

/// Colours for series (hosts, rung budgets): Tableau 10.
const PALETTE: [RGBColor; 10] = [
    RGBColor(78, 121, 167),
    RGBColor(242, 142, 43),
    RGBColor(89, 161, 79),
    RGBColor(225, 87, 89),
    RGBColor(118, 183, 178),
    RGBColor(237, 201, 72),
    RGBColor(176, 122, 161),
    RGBColor(255, 157, 167),
    RGBColor(156, 117, 95),
    RGBColor(186, 176, 172),
];
const WINNER: RGBColor = RGBColor(44, 160, 44);
const ELIGIBLE: RGBColor = RGBColor(78, 121, 167);
const UNKNOWN: RGBColor = RGBColor(140, 140, 140);
const THRESHOLD: RGBColor = RGBColor(214, 39, 40);
const GRID: RGBColor = RGBColor(225, 225, 225);

/// Escape text for HTML element content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters from a study or a host would be invisible
            // or break the layout; shown escaped as the terminal does.
            c if c.is_control() && c != '\n' && c != '\t' => {
                out.push_str(&crate::term::escape(&c.to_string()))
            }
            c => out.push(c),
        }
    }
    out
}

/// A label for an axis: long config labels shortened (the tooltip has all).
fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A DOM id part from a host class or cell label.
fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn unit_of(m: &MetricInfo) -> String {
    if m.unit.is_empty() {
        "(no unit)".to_string()
    } else {
        m.unit.clone()
    }
}

/// `median ± spread unit (n = N)`, or the spread written as unknown when
/// there are fewer samples than the study needs for one.
fn summary_text(r: &ConfigReport, unit: &str) -> String {
    match r.summary {
        Some(s) if r.relative_spread.is_some() => {
            format!("{} ± {} {unit} (n = {})", num(s.median), num(s.spread), s.n)
        }
        Some(s) => format!("{} {unit} ± ? (spread unknown, n = {})", num(s.median), s.n),
        None => "no measurement".to_string(),
    }
}

fn speedup_text(r: &ConfigReport) -> String {
    match (r.interval, r.speedup, r.combined_spread) {
        (Some(i), _, _) => crate::decide::interval_text(&i),
        (None, Some(s), Some(cs)) => format!(
            "{s:.3}× ± {:.1}% (spread of single runs; no interval)",
            cs * 100.0
        ),
        (None, Some(s), None) => format!("{s:.3}× ± ? (spread unknown)"),
        (None, None, _) => "speedup: none".to_string(),
    }
}

/// A point with its tooltip, in the chart's pixel coordinates.
struct Tip {
    at: (i32, i32),
    text: String,
}

/// A drawn chart: the SVG plotters wrote and the tooltips to lay over it.
struct Drawn {
    svg: String,
    tips: Vec<Tip>,
}

type DrawResult = Result<Vec<Tip>, String>;

/// Draw with plotters into an SVG string of `height` pixels; the chart's
/// `<svg>` gets `id`, `class`, a `<title>` and one invisible circle per
/// tip, each with its own `<title>` (browsers show it on hover).
fn chart(
    id: &str,
    class: &str,
    title: &str,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> DrawResult,
) -> String {
    let mut svg = String::new();
    let tips = {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|()| draw(&root))
            .and_then(|tips| root.present().map(|()| tips).map_err(|e| e.to_string()))
    };
    match tips {
        Ok(tips) => finish(Drawn { svg, tips }, id, class, title),
        Err(e) => format!(
            "<p class=\"chart-error\" id=\"{}\">chart could not be drawn: {}</p>",
            esc(id),
            esc(&e)
        ),
    }
}

fn finish(d: Drawn, id: &str, class: &str, title: &str) -> String {
    let Drawn { svg, tips } = d;
    let Some(open_end) = svg.find('>') else {
        return String::new();
    };
    let (open, rest) = svg.split_at(open_end + 1);
    let open = open.replacen(
        "<svg ",
        &format!(
            "<svg id=\"{}\" class=\"chart {}\" role=\"img\" aria-label=\"{}\" ",
            esc(id),
            esc(class),
            esc(title)
        ),
        1,
    );
    let body = rest.trim_end();
    let body = body.strip_suffix("</svg>").unwrap_or(body);
    let mut out = String::new();
    let _ = write!(
        out,
        "{open}<title>{}</title>{body}<g class=\"tips\">",
        esc(title)
    );
    for t in tips {
        let _ = write!(
            out,
            "<circle class=\"tip\" cx=\"{}\" cy=\"{}\" r=\"7\"><title>{}</title></circle>",
            t.at.0,
            t.at.1,
            esc(&t.text)
        );
    }
    out.push_str("</g></svg>");
    out
}

/// Padded axis bounds around `values` (never empty, never inverted).
fn bounds(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.into_iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return None;
    }
    let pad = if hi > lo {
        (hi - lo) * 0.08
    } else {
        lo.abs().max(1.0) * 0.05
    };
    Some((lo - pad, hi + pad))
}

fn is_better(a: f64, b: f64, better: Better) -> bool {
    match better {
        Better::Higher => a > b,
        Better::Lower => a < b,
    }
}

/// The rejection's class name, for legends and colours.
fn reason(r: &ConfigReport) -> Option<&'static str> {
    r.rejection.as_ref().map(|x| x.class.as_str())
}

fn reason_color(reason: &str) -> RGBColor {
    match reason {
        "crash" => RGBColor(214, 39, 40),
        "output_changed" => RGBColor(255, 127, 14),
        "limit" => RGBColor(148, 103, 189),
        "timeout" => RGBColor(140, 86, 75),
        "oom" => RGBColor(227, 119, 194),
        "compile_failure" => RGBColor(188, 189, 34),
        _ => RGBColor(90, 90, 90),
    }
}

fn css_color(c: &RGBColor) -> String {
    format!("rgb({},{},{})", c.0, c.1, c.2)
}

/// The page.
pub fn render_html(a: &Analysis, all: bool) -> String {
    let mut out = String::new();
    let title = format!("tunectl report: {} ({})", a.study_id, a.level);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\" data-rendered=\"no\" data-script-errors=\"\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{STYLE}</style>\n<script>{SCRIPT}</script>\n</head>\n<body>\n",
        esc(&title)
    );
    let _ = writeln!(
        out,
        "<header><h1>tunectl report · {} <span class=\"level level-{}\">{}</span></h1>",
        esc(&a.study_id),
        a.level.as_str(),
        a.level.as_str().to_uppercase()
    );
    for l in header(a) {
        let _ = writeln!(out, "<p class=\"meta\">{}</p>", esc(&l));
    }
    out.push_str("</header>\n");
    if a.classes.len() > 1 {
        out.push_str("<nav><ul>");
        for c in &a.classes {
            let _ = write!(
                out,
                "<li><a href=\"#class-{}\">{}</a></li>",
                slug(&c.host_class),
                esc(&format!("{} · {}", c.host_class, c.label))
            );
        }
        out.push_str("</ul></nav>\n");
    }
    for class in &a.classes {
        class_section(&mut out, a, class, all);
    }
    let notes = footer(a);
    if !notes.is_empty() {
        out.push_str("<footer>");
        for l in notes {
            let _ = writeln!(out, "<p>{}</p>", esc(&l));
        }
        out.push_str("</footer>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn class_section(out: &mut String, a: &Analysis, class: &ClassReport, all: bool) {
    let cid = slug(&class.host_class);
    let _ = writeln!(
        out,
        "<section class=\"host-class\" id=\"class-{cid}\" data-host-class=\"{}\">\n<h2>{}</h2>",
        esc(&class.host_class),
        esc(&class_line(class))
    );

    // 1. What ships.
    let _ = writeln!(
        out,
        "<h3>What ships on {} (per bucket)</h3>",
        esc(&class.host_class)
    );
    if class.buckets.is_empty() {
        out.push_str("<p class=\"empty\">no bucket has a decision yet</p>\n");
    } else {
        out.push_str("<table class=\"ships\"><thead><tr>");
        for h in BUCKET_HEADER {
            let _ = write!(out, "<th>{}</th>", esc(h));
        }
        out.push_str("<th>per cell: winner vs baseline</th></tr></thead><tbody>\n");
        for b in &class.buckets {
            let row = bucket_row(b, a.judging.selection.min_samples as usize);
            let _ = write!(out, "<tr class=\"level-{}\">", b.level.as_str());
            for cell in &row {
                let _ = write!(out, "<td>{}</td>", esc(cell));
            }
            let unit = &a.objective.unit;
            let per_cell: Vec<String> = b
                .per_cell
                .iter()
                .map(|c| {
                    let base = c
                        .baseline
                        .as_ref()
                        .map(|r| format!("baseline {}", summary_text(r, unit)))
                        .unwrap_or_else(|| "baseline not measured".to_string());
                    match &c.winner {
                        Some(w) => format!(
                            "{}: {} — {}; {} {}",
                            c.cell_label,
                            speedup_text(w),
                            base,
                            w.label,
                            summary_text(w, unit)
                        ),
                        None => format!("{}: {base}", c.cell_label),
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "<td><ul>{}</ul></td></tr>",
                per_cell
                    .iter()
                    .map(|s| format!("<li>{}</li>", esc(s)))
                    .collect::<String>()
            );
        }
        out.push_str("</tbody></table>\n");
    }

    // 2. Speedup per config.
    let _ = writeln!(out, "<h3>Speedup per config</h3>");
    for (i, cell) in class.cells.iter().enumerate() {
        figure(
            out,
            speedup_chart(a, class, cell, &format!("speedup-{cid}-{i}")),
            &speedup_legend(cell),
        );
    }

    // 3. Sample distributions.
    let _ = writeln!(out, "<h3>Samples of the baseline and the winner</h3>");
    for (i, cell) in class.cells.iter().enumerate() {
        figure(
            out,
            samples_chart(a, class, cell, &format!("samples-{cid}-{i}")),
            "",
        );
    }

    // 4. Drift anchors.
    let _ = writeln!(out, "<h3>Drift anchors (baseline re-measured)</h3>");
    let anchors: Vec<&AttemptRecord> = class
        .trace
        .iter()
        .filter(|t| t.role == RoleKind::Anchor)
        .collect();
    if anchors.is_empty() {
        out.push_str(
            "<p class=\"empty\">no baseline anchors recorded on this class (measurement.anchor_every is 0, or too few candidates ran per host)</p>\n",
        );
    } else {
        for (i, cell) in class.cells.iter().enumerate() {
            let here: Vec<&AttemptRecord> = anchors
                .iter()
                .filter(|t| t.cell_label == cell.cell_label)
                .copied()
                .collect();
            if here.is_empty() {
                continue;
            }
            figure(
                out,
                anchors_chart(a, class, cell, &here, &format!("anchors-{cid}-{i}")),
                "",
            );
        }
    }

    // 5. Search progress.
    let rungs: Vec<&AttemptRecord> = class
        .trace
        .iter()
        .filter(|t| t.role == RoleKind::Rung)
        .collect();
    if !rungs.is_empty() {
        let _ = writeln!(out, "<h3>Search progress</h3>");
        // The class's cell order, then any cell only the search reached.
        let mut cells: Vec<&str> = Vec::new();
        let known = class.cells.iter().map(|c| c.cell_label.as_str());
        for label in known.chain(rungs.iter().map(|r| r.cell_label.as_str())) {
            if !cells.contains(&label) && rungs.iter().any(|r| r.cell_label == label) {
                cells.push(label);
            }
        }
        for (i, cell) in cells.iter().enumerate() {
            let here: Vec<&AttemptRecord> = rungs
                .iter()
                .filter(|r| r.cell_label == *cell)
                .copied()
                .collect();
            figure(
                out,
                search_chart(a, class, cell, &here, &format!("search-{cid}-{i}")),
                "",
            );
        }
    }

    // 6. Trade-offs against secondary metrics.
    if !a.metrics.is_empty() {
        let _ = writeln!(
            out,
            "<h3>Trade-offs: objective against secondary metrics</h3>"
        );
        for (i, cell) in class.cells.iter().enumerate() {
            for (j, m) in a.metrics.iter().enumerate() {
                if let Some(svg) = pareto_chart(a, class, cell, m, &format!("pareto-{cid}-{i}-{j}"))
                {
                    figure(out, svg, "");
                }
            }
        }
    }

    // 7. Evidence tables.
    let _ = writeln!(out, "<h3>Evidence</h3>");
    if let Some((title, head, rows)) = search_table(class) {
        let _ = writeln!(out, "<p class=\"table-title\">{}</p>", esc(&title));
        table(out, "search", &head, &rows);
    }
    for cell in &class.cells {
        let _ = writeln!(
            out,
            "<p class=\"table-title\">cell {} · {}</p>",
            esc(&cell.cell_label),
            esc(&cell.decision.to_string())
        );
        for n in &cell.notes {
            let _ = writeln!(out, "<p class=\"note\">note: {}</p>", esc(&n.to_string()));
        }
        let head = vec![
            "role".to_string(),
            "config (vs baseline)".to_string(),
            format!("{} median ± spread", a.objective.name),
            "n".to_string(),
        ];
        // Each secondary metric beside the objective, with its own n and
        // spread.
        let head: Vec<String> = head
            .into_iter()
            .chain(
                a.metrics
                    .iter()
                    .map(|m| format!("{} median ± spread (n)", m.name)),
            )
            .chain(["vs baseline".to_string(), "verdict".to_string()])
            .collect();
        let min_samples = a.judging.selection.min_samples as usize;
        let body: Vec<Vec<String>> = rows(cell, all)
            .into_iter()
            .map(|(role, r, note)| {
                let mut row = vec![
                    role.to_string(),
                    r.label.clone(),
                    value_cell(r, &a.objective.unit),
                    n_cell(r),
                ];
                row.extend(a.metrics.iter().map(|m| {
                    r.metrics
                        .get(&m.name)
                        .map(|s| super::terminal::summary_text(s, &m.unit, min_samples))
                        .unwrap_or_else(|| "—".to_string())
                }));
                row.push(speedup_cell(role, r));
                row.push(note);
                row
            })
            .collect();
        table(out, "evidence", &head, &body);
        let shown = rows(cell, false)
            .iter()
            .filter(|(role, _, _)| *role != "baseline" && *role != "rejected")
            .count();
        let hidden = cell.eligible.len().saturating_sub(shown);
        if !all && hidden > 0 {
            let _ = writeln!(
                out,
                "<p class=\"note\">({hidden} more eligible configs; --all shows them)</p>"
            );
        }
    }
    out.push_str("</section>\n");
}

fn table(out: &mut String, class: &str, head: &[String], rows: &[Vec<String>]) {
    let _ = write!(out, "<table class=\"{class}\"><thead><tr>");
    for h in head {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for c in row {
            let _ = write!(out, "<td>{}</td>", esc(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

fn figure(out: &mut String, svg: String, legend: &str) {
    let _ = writeln!(out, "<figure>{svg}{legend}</figure>");
}

/// The baseline as axis labels name it.
fn baseline_text(a: &Analysis, cell: &CellReport) -> String {
    match &cell.baseline {
        Some(b) => format!("baseline {}", summary_text(b, &unit_of(&a.objective))),
        None => "baseline not measured".to_string(),
    }
}

fn speedup_legend(cell: &CellReport) -> String {
    let mut reasons: Vec<&str> = cell.rejected.iter().filter_map(reason).collect();
    reasons.sort();
    reasons.dedup();
    let mut items = vec![
        format!(
            "<li><span class=\"swatch\" style=\"background:{}\"></span>fastest here (wins this cell; what ships is decided per bucket, above)</li>",
            css_color(&WINNER)
        ),
        format!(
            "<li><span class=\"swatch\" style=\"background:{}\"></span>eligible, with its 95% interval</li>",
            css_color(&ELIGIBLE)
        ),
        format!(
            "<li><span class=\"swatch hollow\" style=\"border-color:{}\"></span>no interval (too few runs or samples)</li>",
            css_color(&UNKNOWN)
        ),
        format!(
            "<li><span class=\"swatch line\" style=\"background:{}\"></span>1 + min_improvement: a win's lower bound must clear it; bars: 95% intervals</li>",
            css_color(&THRESHOLD)
        ),
    ];
    for r in reasons {
        items.push(format!(
            "<li><span class=\"swatch cross\" style=\"color:{}\">×</span>rejected: {}</li>",
            css_color(&reason_color(r)),
            esc(r)
        ));
    }
    format!("<ul class=\"legend\">{}</ul>", items.concat())
}

/// Each config's speedup over the baseline at one cell, with its 95 %
/// interval as error bars, the minimum a lower bound must clear, and the
/// rejected configs
/// marked by their reason (at their speedup when they have one, else at
/// the left edge).
fn speedup_chart(a: &Analysis, class: &ClassReport, cell: &CellReport, id: &str) -> String {
    let winner = cell.winner.as_ref().map(|w| w.label.as_str());
    let mut eligible: Vec<&ConfigReport> = cell.eligible.iter().collect();
    eligible.sort_by(|x, y| {
        y.speedup
            .unwrap_or(f64::NEG_INFINITY)
            .total_cmp(&x.speedup.unwrap_or(f64::NEG_INFINITY))
    });
    let rows: Vec<&ConfigReport> = eligible.into_iter().chain(cell.rejected.iter()).collect();
    let title = format!(
        "{}: speedup of each config over the baseline ({} {}, {}) · host class {} ({}) · {}",
        cell.cell_label,
        a.objective.name,
        unit_of(&a.objective),
        a.objective.better.name(),
        class.host_class,
        class.label,
        baseline_text(a, cell)
    );
    if rows.is_empty() {
        return format!(
            "<p class=\"empty\" id=\"{}\">{}: no config measured yet</p>",
            esc(id),
            esc(&cell.cell_label)
        );
    }
    let min_line = 1.0 + a.min_improvement;
    // Every config must clear the same minimum with its lower bound.
    let threshold_of = |r: &ConfigReport| r.interval.map(|_| min_line);
    let spread_ends = |r: &ConfigReport| match (r.speedup, r.interval) {
        (Some(_), Some(i)) => vec![i.low, i.high],
        (Some(s), None) => vec![s],
        _ => vec![],
    };
    let Some((lo, hi)) = bounds(
        rows.iter()
            .flat_map(|r| {
                let mut v = spread_ends(r);
                v.extend(threshold_of(r));
                v
            })
            // The baseline's 1× and the threshold always in sight.
            .chain([0.9, 1.1, min_line]),
    ) else {
        return String::new();
    };
    let n = rows.len();
    let label_of = |r: &ConfigReport| {
        let base = short(&r.label, 44);
        match reason(r) {
            Some(why) => format!("{base}  [{why}]"),
            None => base,
        }
    };
    let labels: Vec<String> = rows.iter().map(|r| label_of(r)).collect();
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(10);
    let height = 150 + 18 * n as u32;
    let caption = format!(
        "{} · speedup per config, [95% interval] · host class {} · a win's lower bound above {:.3}×",
        cell.cell_label, class.host_class, min_line
    );
    let x_desc = format!(
        "speedup over the baseline ({} {}, {}; 1 = {})",
        a.objective.name,
        unit_of(&a.objective),
        a.objective.better.name(),
        baseline_text(a, cell)
    );
    chart(id, "chart-speedup", &title, height, |root| {
        let mut ch = ChartBuilder::on(root)
            .caption(caption, (FONT, 15))
            .margin(10)
            .x_label_area_size(42)
            .y_label_area_size((longest as u32 * 6 + 16).min(420))
            .build_cartesian_2d(lo..hi, -0.7f64..(n as f64 - 0.3))
            .map_err(|e| e.to_string())?;
        ch.configure_mesh()
            .label_style((FONT, 12))
            .light_line_style(WHITE)
            .bold_line_style(GRID)
            .disable_y_mesh()
            .y_labels(n * 4 + 2)
            .y_label_formatter(&|y| row_label(&labels, *y))
            .y_label_style((FONT, 11))
            .x_label_formatter(&|x| format!("{}×", tick(*x)))
            .x_desc(x_desc)
            .axis_desc_style((FONT, 12))
            .draw()
            .map_err(|e| e.to_string())?;
        let top = n as f64 - 0.3;
        ch.draw_series(LineSeries::new(
            [(1.0, -0.7), (1.0, top)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
        ch.draw_series(DashedLineSeries::new(
            [(min_line, -0.7), (min_line, top)],
            6,
            4,
            THRESHOLD.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
        let mut tips = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let y = row_y(n, i);
            let rejected = reason(r);
            if let Some(t) = threshold_of(r) {
                ch.draw_series(std::iter::once(PathElement::new(
                    [(t, y - 0.3), (t, y + 0.3)],
                    THRESHOLD.mix(0.6).stroke_width(1),
                )))
                .map_err(|e| e.to_string())?;
            }
            let x = match (r.speedup, rejected) {
                (Some(s), _) if s.is_finite() => s,
                _ => lo + (hi - lo) * 0.01,
            };
            if let (Some(s), Some(i), None) = (r.speedup, r.interval, rejected) {
                let color = if Some(r.label.as_str()) == winner {
                    WINNER
                } else {
                    ELIGIBLE
                };
                ch.draw_series(std::iter::once(ErrorBar::new_horizontal(
                    y,
                    i.low,
                    s,
                    i.high,
                    color.stroke_width(1),
                    6,
                )))
                .map_err(|e| e.to_string())?;
            }
            match rejected {
                Some(why) => {
                    let c = reason_color(why);
                    ch.draw_series(std::iter::once(Cross::new((x, y), 4, c.stroke_width(2))))
                        .map_err(|e| e.to_string())?;
                }
                None if r.interval.is_none() => {
                    ch.draw_series(std::iter::once(Circle::new(
                        (x, y),
                        4,
                        UNKNOWN.stroke_width(2),
                    )))
                    .map_err(|e| e.to_string())?;
                }
                None => {
                    let color = if Some(r.label.as_str()) == winner {
                        WINNER
                    } else {
                        ELIGIBLE
                    };
                    ch.draw_series(std::iter::once(Circle::new((x, y), 4, color.filled())))
                        .map_err(|e| e.to_string())?;
                }
            }
            let mut text = format!(
                "{} · {} · {} · n = {} ({} trials, {} host{}) · {} · threshold {} · host class {} · {}",
                cell.cell_label,
                r.label,
                speedup_text(r),
                r.summary.map(|s| s.n).unwrap_or(0),
                r.trials,
                r.hosts,
                if r.hosts == 1 { "" } else { "s" },
                summary_text(r, &unit_of(&a.objective)),
                threshold_of(r)
                    .map(|t| format!("lower bound above {t:.3}×"))
                    .unwrap_or_else(|| "none (no interval: too few runs)".to_string()),
                class.host_class,
                baseline_text(a, cell)
            );
            if let Some(rj) = &r.rejection {
                let _ = write!(text, " · rejected: {}: {}", rj.class.as_str(), rj.detail);
            }
            tips.push(Tip {
                at: ch.backend_coord(&(x, y)),
                text,
            });
        }
        Ok(tips)
    })
}

/// Rows of a chart with one row per config: the first on top.
fn row_y(rows: usize, i: usize) -> f64 {
    (rows - 1 - i) as f64
}

/// The label of the row at `y` (none between rows).
fn row_label(labels: &[String], y: f64) -> String {
    let i = y.round();
    if (y - i).abs() > 1e-6 || i < 0.0 || i as usize >= labels.len() {
        return String::new();
    }
    labels[labels.len() - 1 - i as usize].clone()
}

/// An axis tick: at most 4 significant digits, no trailing zeros.
fn tick(x: f64) -> String {
    let s = num(x);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A deterministic jitter in [-1, 1] for the `i`th point of a strip.
fn jitter(i: usize) -> f64 {
    // The golden ratio's fractional steps spread points evenly.
    let f = (i as f64 * 0.618_033_988_75).fract();
    f * 2.0 - 1.0
}

/// The raw samples of the baseline and of the cell's winner (or its best
/// eligible config when nothing wins), one dot each, coloured by host,
/// with each side's median and spread.
fn samples_chart(a: &Analysis, class: &ClassReport, cell: &CellReport, id: &str) -> String {
    let mut sides: Vec<(String, &ConfigReport)> = Vec::new();
    if let Some(b) = &cell.baseline {
        sides.push((format!("baseline ({})", short(&b.label, 30)), b));
    }
    match (&cell.winner, cell.eligible.first()) {
        (Some(w), _) => sides.push((format!("winner ({})", short(&w.label, 30)), w)),
        (None, Some(best)) => {
            sides.push((format!("best, no win ({})", short(&best.label, 30)), best))
        }
        (None, None) => {}
    }
    let unit = unit_of(&a.objective);
    let title = format!(
        "{}: raw samples of the baseline and the winner ({} {}, {}) · host class {}",
        cell.cell_label,
        a.objective.name,
        unit,
        a.objective.better.name(),
        class.host_class
    );
    let all: Vec<f64> = sides
        .iter()
        .flat_map(|(_, r)| r.samples().values().flatten().copied())
        .collect();
    let Some((lo, hi)) = bounds(all.iter().copied()) else {
        return format!(
            "<p class=\"empty\" id=\"{}\">{}: no samples yet</p>",
            esc(id),
            esc(&cell.cell_label)
        );
    };
    let hosts: Vec<&String> = {
        let mut h: Vec<&String> = sides.iter().flat_map(|(_, r)| r.samples().keys()).collect();
        h.sort();
        h.dedup();
        h
    };
    let labels: Vec<String> = sides.iter().map(|(l, _)| l.clone()).collect();
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(10);
    let n = sides.len();
    let caption = format!(
        "{} · samples · {} · {}",
        cell.cell_label,
        class.host_class,
        sides
            .iter()
            .map(|(l, r)| format!(
                "{}: {}",
                l.split(' ').next().unwrap_or(""),
                summary_text(r, &unit)
            ))
            .collect::<Vec<_>>()
            .join(" vs ")
    );
    chart(id, "chart-samples", &title, 90 + 70 * n as u32, |root| {
        let mut ch = ChartBuilder::on(root)
            .caption(short(&caption, 150), (FONT, 13))
            .margin(10)
            .x_label_area_size(42)
            .y_label_area_size((longest as u32 * 6 + 16).min(300))
            .build_cartesian_2d(lo..hi, -0.6f64..(n as f64 - 0.4))
            .map_err(|e| e.to_string())?;
        ch.configure_mesh()
            .label_style((FONT, 12))
            .light_line_style(WHITE)
            .bold_line_style(GRID)
            .disable_y_mesh()
            .y_labels(n * 4 + 2)
            .y_label_formatter(&|y| row_label(&labels, *y))
            .y_label_style((FONT, 11))
            .x_label_formatter(&|x| tick(*x))
            .x_desc(format!(
                "{} ({}, {}); one dot per sample, colour per host; bar: median ± spread",
                a.objective.name,
                unit,
                a.objective.better.name()
            ))
            .axis_desc_style((FONT, 12))
            .draw()
            .map_err(|e| e.to_string())?;
        let mut tips = Vec::new();
        for (row, (label, r)) in sides.iter().enumerate() {
            let y = row_y(n, row);
            let mut k = 0;
            for (host, samples) in r.samples() {
                let hi_idx = hosts.iter().position(|h| *h == host).unwrap_or(0);
                let color = PALETTE[hi_idx % PALETTE.len()];
                for v in samples.iter().filter(|v| v.is_finite()) {
                    let at = (*v, y + 0.22 * jitter(k));
                    k += 1;
                    ch.draw_series(std::iter::once(Circle::new(at, 3, color.mix(0.8).filled())))
                        .map_err(|e| e.to_string())?;
                    tips.push(Tip {
                        at: ch.backend_coord(&at),
                        text: format!(
                            "{label} · host {host} · sample {} {unit} · {} · host class {}",
                            num(*v),
                            cell.cell_label,
                            class.host_class
                        ),
                    });
                }
            }
            if let Some(s) = r.summary {
                let by = y - 0.38;
                if r.relative_spread.is_some() {
                    ch.draw_series(std::iter::once(ErrorBar::new_horizontal(
                        by,
                        s.median - s.spread,
                        s.median,
                        s.median + s.spread,
                        BLACK.stroke_width(2),
                        8,
                    )))
                    .map_err(|e| e.to_string())?;
                } else {
                    ch.draw_series(std::iter::once(Circle::new(
                        (s.median, by),
                        4,
                        UNKNOWN.stroke_width(2),
                    )))
                    .map_err(|e| e.to_string())?;
                }
                tips.push(Tip {
                    at: ch.backend_coord(&(s.median, by)),
                    text: format!(
                        "{label}: median {} · {} · host class {}",
                        summary_text(r, &unit),
                        cell.cell_label,
                        class.host_class
                    ),
                });
            }
        }
        Ok(tips)
    })
}

/// When an attempt ran: its id starts with the UTC time it was made.
fn attempt_time(a: &AttemptRecord) -> Option<chrono::NaiveDateTime> {
    let stamp = a.attempt_id.split('-').next()?;
    chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%S%.fZ").ok()
}

/// Each anchor's median against the minutes since the class's first
/// anchor (by sequence when the times cannot be read), one series per host,
/// with the baseline's sweep median for reference.
fn anchors_chart(
    a: &Analysis,
    class: &ClassReport,
    cell: &CellReport,
    anchors: &[&AttemptRecord],
    id: &str,
) -> String {
    let unit = unit_of(&a.objective);
    let times: Vec<Option<chrono::NaiveDateTime>> =
        anchors.iter().map(|t| attempt_time(t)).collect();
    let by_time = times.iter().all(Option::is_some);
    let first = times.iter().flatten().min().copied();
    let x_of = |i: usize| -> f64 {
        match (by_time, times[i], first) {
            (true, Some(t), Some(f)) => (t - f).num_milliseconds() as f64 / 60_000.0,
            _ => i as f64,
        }
    };
    let points: Vec<(usize, &AttemptRecord, Option<crate::stats::Summary>)> = anchors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let s = t
                .metrics
                .get(&a.objective.name)
                .and_then(|v| crate::stats::Summary::of(v));
            (i, *t, s.filter(|_| t.status == AttemptStatus::Ok))
        })
        .collect();
    let reference = cell.baseline.as_ref().and_then(|b| b.summary);
    let Some((ylo, yhi)) = bounds(
        points
            .iter()
            .filter_map(|(_, _, s)| s.map(|s| s.median))
            .chain(reference.map(|r| r.median)),
    ) else {
        return String::new();
    };
    let Some((xlo, xhi)) = bounds((0..anchors.len()).map(x_of)) else {
        return String::new();
    };
    let mut hosts: Vec<&str> = anchors.iter().map(|t| t.host.as_str()).collect();
    hosts.sort();
    hosts.dedup();
    let failed = points.iter().filter(|(_, _, s)| s.is_none()).count();
    let title = format!(
        "{}: baseline anchors over time ({} {}, median of each anchor's samples) · host class {} · {} anchors on {} host{}",
        cell.cell_label,
        a.objective.name,
        unit,
        class.host_class,
        anchors.len(),
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" }
    );
    let caption = format!(
        "{} · drift anchors · {} · {} anchors{}; dashed: {}",
        cell.cell_label,
        class.host_class,
        anchors.len(),
        if failed > 0 {
            format!(" ({failed} without a measurement)")
        } else {
            String::new()
        },
        baseline_text(a, cell)
    );
    let x_desc = if by_time {
        "minutes since the first anchor of this class (UTC, from the attempt ids)"
    } else {
        "anchor sequence"
    };
    chart(id, "chart-anchors", &title, 300, |root| {
        let mut ch = ChartBuilder::on(root)
            .caption(short(&caption, 150), (FONT, 13))
            .margin(10)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(xlo..xhi, ylo..yhi)
            .map_err(|e| e.to_string())?;
        ch.configure_mesh()
            .label_style((FONT, 12))
            .light_line_style(WHITE)
            .bold_line_style(GRID)
            .x_desc(x_desc)
            .y_desc(format!("{} ({unit})", a.objective.name))
            .x_label_formatter(&|x| tick(*x))
            .y_label_formatter(&|y| tick(*y))
            .axis_desc_style((FONT, 12))
            .draw()
            .map_err(|e| e.to_string())?;
        if let Some(r) = reference {
            ch.draw_series(DashedLineSeries::new(
                [(xlo, r.median), (xhi, r.median)],
                6,
                4,
                BLACK.mix(0.6).stroke_width(1),
            ))
            .map_err(|e| e.to_string())?;
        }
        let mut tips = Vec::new();
        for (hi_idx, host) in hosts.iter().enumerate() {
            let color = PALETTE[hi_idx % PALETTE.len()];
            let series: Vec<(f64, f64)> = points
                .iter()
                .filter(|(_, t, _)| t.host == *host)
                .filter_map(|(i, _, s)| s.map(|s| (x_of(*i), s.median)))
                .collect();
            ch.draw_series(LineSeries::new(
                series.iter().copied(),
                color.stroke_width(1),
            ))
            .map_err(|e| e.to_string())?;
            for (i, t, s) in points.iter().filter(|(_, t, _)| t.host == *host) {
                let Some(s) = s else { continue };
                let at = (x_of(*i), s.median);
                let known = s.n >= a.judging.selection.min_samples as usize;
                if known {
                    ch.draw_series(std::iter::once(ErrorBar::new_vertical(
                        at.0,
                        s.median - s.spread,
                        s.median,
                        s.median + s.spread,
                        color.stroke_width(1),
                        6,
                    )))
                    .map_err(|e| e.to_string())?;
                }
                ch.draw_series(std::iter::once(Circle::new(at, 4, color.filled())))
                    .map_err(|e| e.to_string())?;
                tips.push(Tip {
                    at: ch.backend_coord(&at),
                    text: format!(
                        "anchor on host {} at {} · {} {unit} ± {} (n = {}) · {} · host class {} · {}",
                        t.host,
                        times[*i]
                            .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                            .unwrap_or_else(|| "an unknown time".to_string()),
                        num(s.median),
                        if known {
                            format!("{} {unit}", num(s.spread))
                        } else {
                            "? (spread unknown)".to_string()
                        },
                        s.n,
                        cell.cell_label,
                        class.host_class,
                        baseline_text(a, cell)
                    ),
                });
            }
        }
        Ok(tips)
    })
}

/// An adaptive search's screening runs at one cell: each run's proxy value
/// against the cumulative trial-seconds spent so far, coloured by rung
/// budget, with the best so far per budget as a step line.
fn search_chart(
    a: &Analysis,
    class: &ClassReport,
    cell: &str,
    runs: &[&AttemptRecord],
    id: &str,
) -> String {
    let metric = class
        .search
        .first()
        .map(|r| r.metric.clone())
        .unwrap_or_else(|| a.objective.clone());
    let budget_unit = class
        .search
        .first()
        .map(|r| r.budget_unit.clone())
        .unwrap_or_default();
    let unit = unit_of(&metric);
    let mut spent = 0.0;
    // (cumulative seconds, value or none, run)
    let mut points: Vec<(f64, Option<f64>, &AttemptRecord)> = Vec::new();
    for r in runs {
        spent += r.duration_s.max(0.0);
        let v = (r.status == AttemptStatus::Ok)
            .then(|| {
                r.metrics
                    .get(&metric.name)
                    .and_then(|s| crate::stats::median(s))
            })
            .flatten()
            .filter(|v| v.is_finite());
        points.push((spent, v, r));
    }
    let mut budgets: Vec<Option<f64>> = runs.iter().map(|r| r.fidelity).collect();
    budgets.sort_by(|x, y| x.unwrap_or(0.0).total_cmp(&y.unwrap_or(0.0)));
    budgets.dedup();
    let Some((ylo, yhi)) = bounds(points.iter().filter_map(|p| p.1)) else {
        return format!(
            "<p class=\"empty\" id=\"{}\">{cell}: no screening run has a value yet</p>",
            esc(id)
        );
    };
    let Some((_, xhi)) = bounds(points.iter().map(|p| p.0).chain([0.0])) else {
        return String::new();
    };
    let budget_name = |b: Option<f64>| match b {
        Some(b) => format!("budget {} {}", super::render::budget(b), budget_unit),
        None => "full budget".to_string(),
    };
    let title = format!(
        "{cell}: search progress, best so far on the proxy metric {} ({unit}, {}) against cumulative trial-seconds · host class {} · {} screening runs, n = 1 each",
        metric.name,
        metric.better.name(),
        class.host_class,
        runs.len()
    );
    let caption = format!(
        "{cell} · search progress · {} · {} runs (n = 1 each, a rung ranks, it does not decide)",
        class.host_class,
        runs.len()
    );
    let legend: Vec<String> = budgets.iter().map(|b| budget_name(*b)).collect();
    let svg = chart(id, "chart-search", &title, 320, |root| {
        let mut ch = ChartBuilder::on(root)
            .caption(caption, (FONT, 13))
            .margin(10)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..xhi, ylo..yhi)
            .map_err(|e| e.to_string())?;
        ch.configure_mesh()
            .label_style((FONT, 12))
            .light_line_style(WHITE)
            .bold_line_style(GRID)
            .x_desc("cumulative trial-seconds (screening runs, in the order they ran)")
            .y_desc(format!(
                "{} ({unit}, {})",
                metric.name,
                metric.better.name()
            ))
            .x_label_formatter(&|x| tick(*x))
            .y_label_formatter(&|y| tick(*y))
            .axis_desc_style((FONT, 12))
            .draw()
            .map_err(|e| e.to_string())?;
        let mut tips = Vec::new();
        for (bi, b) in budgets.iter().enumerate() {
            let color = PALETTE[bi % PALETTE.len()];
            let mut best: Option<f64> = None;
            let mut line: Vec<(f64, f64)> = Vec::new();
            for (x, v, r) in points.iter().filter(|p| p.2.fidelity == *b) {
                match v {
                    Some(v) => {
                        if best.is_none_or(|bv| is_better(*v, bv, metric.better)) {
                            if let Some(bv) = best {
                                line.push((*x, bv));
                            }
                            best = Some(*v);
                            line.push((*x, *v));
                        }
                        ch.draw_series(std::iter::once(Circle::new(
                            (*x, *v),
                            3,
                            color.mix(0.7).filled(),
                        )))
                        .map_err(|e| e.to_string())?;
                        tips.push(Tip {
                            at: ch.backend_coord(&(*x, *v)),
                            text: format!(
                                "{} · {} · {} {} {unit} (n = 1) · after {} trial-seconds · {cell} · host class {}",
                                r.config_label,
                                budget_name(*b),
                                metric.name,
                                num(*v),
                                num(*x),
                                class.host_class
                            ),
                        });
                    }
                    None => {
                        let at = (*x, ylo);
                        ch.draw_series(std::iter::once(Cross::new(
                            at,
                            4,
                            reason_color("crash").stroke_width(2),
                        )))
                        .map_err(|e| e.to_string())?;
                        tips.push(Tip {
                            at: ch.backend_coord(&at),
                            text: format!(
                                "{} · {} · failed ({}) · after {} trial-seconds · {cell}",
                                r.config_label,
                                budget_name(*b),
                                r.failure
                                    .as_ref()
                                    .map(|f| f.class.as_str())
                                    .unwrap_or("no value"),
                                num(*x)
                            ),
                        });
                    }
                }
            }
            if let (Some(bv), Some((x, _))) = (best, points.last().map(|p| (p.0, p.1))) {
                line.push((x, bv));
            }
            ch.draw_series(LineSeries::new(line, color.stroke_width(2)))
                .map_err(|e| e.to_string())?;
        }
        Ok(tips)
    });
    let items: String = legend
        .iter()
        .enumerate()
        .map(|(i, l)| {
            format!(
                "<li><span class=\"swatch\" style=\"background:{}\"></span>rung: {}</li>",
                css_color(&PALETTE[i % PALETTE.len()]),
                esc(l)
            )
        })
        .collect();
    format!(
        "{svg}<ul class=\"legend\">{items}<li>line: best so far at that budget; <span class=\"swatch cross\" style=\"color:{}\">×</span>failed run</li></ul>",
        css_color(&reason_color("crash"))
    )
}

/// Objective against one secondary metric per config at one cell (medians,
/// spreads as error bars); the Pareto front of the eligible configs and
/// the baseline highlighted. `None` when fewer than two configs have both.
fn pareto_chart(
    a: &Analysis,
    class: &ClassReport,
    cell: &CellReport,
    m: &MetricInfo,
    id: &str,
) -> Option<String> {
    let both = |r: &ConfigReport| {
        let o = r.summary?;
        let s = r.metrics.get(&m.name)?;
        (o.median.is_finite() && s.median.is_finite()).then_some((o, *s))
    };
    let candidates: Vec<(&ConfigReport, bool)> = cell
        .baseline
        .iter()
        .map(|b| (b, true))
        .chain(cell.eligible.iter().map(|r| (r, true)))
        .chain(cell.rejected.iter().map(|r| (r, false)))
        .filter(|(r, _)| both(r).is_some())
        .collect();
    if candidates.len() < 2 {
        return None;
    }
    let ob = a.objective.better;
    let dominates = |p: (f64, f64), q: (f64, f64)| {
        let no_worse = |x: f64, y: f64, b: Better| x == y || is_better(x, y, b);
        no_worse(p.0, q.0, ob)
            && no_worse(p.1, q.1, m.better)
            && (is_better(p.0, q.0, ob) || is_better(p.1, q.1, m.better))
    };
    let point = |r: &ConfigReport| both(r).map(|(o, s)| (o.median, s.median));
    let eligible: Vec<(f64, f64)> = candidates
        .iter()
        .filter(|(_, ok)| *ok)
        .filter_map(|(r, _)| point(r))
        .collect();
    let on_front = |p: (f64, f64)| !eligible.iter().any(|q| dominates(*q, p));
    let mut front: Vec<(f64, f64)> = eligible.iter().copied().filter(|p| on_front(*p)).collect();
    front.sort_by(|x, y| x.0.total_cmp(&y.0));
    let pairs: Vec<_> = candidates.iter().filter_map(|(r, _)| both(r)).collect();
    let (xlo, xhi) = bounds(
        pairs
            .iter()
            .flat_map(|(o, _)| [o.median - o.spread, o.median + o.spread]),
    )?;
    let (ylo, yhi) = bounds(
        pairs
            .iter()
            .flat_map(|(_, s)| [s.median - s.spread, s.median + s.spread]),
    )?;
    let ounit = unit_of(&a.objective);
    let munit = unit_of(m);
    let title = format!(
        "{}: {} ({ounit}, {}) against {} ({munit}, {}) per config, medians ± spread · Pareto front of the eligible configs · host class {} · {}",
        cell.cell_label,
        a.objective.name,
        ob.name(),
        m.name,
        m.better.name(),
        class.host_class,
        baseline_text(a, cell)
    );
    let caption = format!(
        "{} · {} vs {} · {} · {} on the Pareto front",
        cell.cell_label,
        a.objective.name,
        m.name,
        class.host_class,
        front.len()
    );
    let base_label = cell.baseline.as_ref().map(|b| b.label.clone());
    let svg = chart(id, "chart-pareto", &title, 380, |root| {
        let mut ch = ChartBuilder::on(root)
            .caption(caption, (FONT, 13))
            .margin(10)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(xlo..xhi, ylo..yhi)
            .map_err(|e| e.to_string())?;
        ch.configure_mesh()
            .label_style((FONT, 12))
            .light_line_style(WHITE)
            .bold_line_style(GRID)
            .x_desc(format!(
                "{} ({ounit}, {}; median, bars ± spread)",
                a.objective.name,
                ob.name()
            ))
            .y_desc(format!("{} ({munit}, {})", m.name, m.better.name()))
            .x_label_formatter(&|x| tick(*x))
            .y_label_formatter(&|y| tick(*y))
            .axis_desc_style((FONT, 12))
            .draw()
            .map_err(|e| e.to_string())?;
        ch.draw_series(LineSeries::new(
            front.iter().copied(),
            WINNER.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?;
        let mut tips = Vec::new();
        for (r, ok) in &candidates {
            let Some((o, s)) = both(r) else { continue };
            let at = (o.median, s.median);
            let is_base = Some(&r.label) == base_label.as_ref();
            let color = if !ok {
                reason(r).map(reason_color).unwrap_or(UNKNOWN)
            } else if on_front(at) {
                WINNER
            } else {
                ELIGIBLE
            };
            let spread_known = r.relative_spread.is_some();
            if spread_known {
                ch.draw_series([ErrorBar::new_horizontal(
                    s.median,
                    o.median - o.spread,
                    o.median,
                    o.median + o.spread,
                    color.mix(0.25).stroke_width(1),
                    4,
                )])
                .map_err(|e| e.to_string())?;
                ch.draw_series([ErrorBar::new_vertical(
                    o.median,
                    s.median - s.spread,
                    s.median,
                    s.median + s.spread,
                    color.mix(0.25).stroke_width(1),
                    4,
                )])
                .map_err(|e| e.to_string())?;
            }
            if !ok {
                ch.draw_series([Cross::new(at, 4, color.stroke_width(2))])
                    .map_err(|e| e.to_string())?;
            } else if is_base {
                ch.draw_series([TriangleMarker::new(at, 6, BLACK.filled())])
                    .map_err(|e| e.to_string())?;
            } else if !spread_known {
                ch.draw_series([Circle::new(at, 4, UNKNOWN.stroke_width(2))])
                    .map_err(|e| e.to_string())?;
            } else {
                ch.draw_series([Circle::new(at, 4, color.filled())])
                    .map_err(|e| e.to_string())?;
            }
            let spread = |x: &crate::stats::Summary, unit: &str| {
                if spread_known {
                    format!("{} ± {} {unit} (n = {})", num(x.median), num(x.spread), x.n)
                } else {
                    format!("{} {unit} ± ? (spread unknown, n = {})", num(x.median), x.n)
                }
            };
            tips.push(Tip {
                at: ch.backend_coord(&at),
                text: format!(
                    "{}{} · {}: {} · {}: {} · {} · host class {}{}",
                    r.label,
                    if is_base { " (baseline)" } else { "" },
                    a.objective.name,
                    spread(&o, &ounit),
                    m.name,
                    spread(&s, &munit),
                    cell.cell_label,
                    class.host_class,
                    match (&r.rejection, on_front(at) && *ok) {
                        (Some(rj), _) => format!(" · rejected: {}", rj.class.as_str()),
                        (None, true) => " · on the Pareto front".to_string(),
                        (None, false) => String::new(),
                    }
                ),
            });
        }
        Ok(tips)
    });
    let legend = format!(
        "<ul class=\"legend\"><li><span class=\"swatch\" style=\"background:{}\"></span>on the Pareto front (eligible; line joins it)</li><li><span class=\"swatch\" style=\"background:{}\"></span>eligible, dominated</li><li>▲ baseline</li><li><span class=\"swatch cross\" style=\"color:{}\">×</span>rejected (colour by reason)</li></ul>",
        css_color(&WINNER),
        css_color(&ELIGIBLE),
        css_color(&reason_color("limit"))
    );
    Some(format!("{svg}{legend}"))
}

const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1180px;padding:16px 24px;color:#222;background:#fff;font-size:14px;line-height:1.4}
h1{font-size:22px;margin:8px 0}
h2{font-size:17px;margin:28px 0 8px;padding-top:12px;border-top:2px solid #ccc}
h3{font-size:15px;margin:20px 0 6px}
p.meta{margin:2px 0;color:#444;font-size:13px}
.level{font-size:13px;padding:2px 8px;border-radius:4px;vertical-align:middle}
.level-verdict{background:#d8f0d8;color:#1d5e1d}
.level-draft{background:#fbe9c9;color:#7a4b00}
table{border-collapse:collapse;margin:6px 0 14px;font-size:12.5px;width:100%}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}
tr.level-verdict td:nth-child(5){color:#1d5e1d;font-weight:600}
tr.level-draft td:nth-child(5){color:#7a4b00;font-weight:600}
td ul{margin:0;padding-left:16px}
figure{margin:8px 0 16px}
svg.chart{max-width:100%;height:auto;display:block}
svg.chart .tip{fill:transparent;stroke:none}
svg.chart .tip:hover{fill:rgba(0,0,0,.12)}
ul.legend{list-style:none;padding:0;margin:2px 0 0;font-size:12px;color:#333;display:flex;flex-wrap:wrap;gap:4px 16px}
.swatch{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:5px;vertical-align:middle}
.swatch.hollow{background:transparent;border:2px solid;width:7px;height:7px}
.swatch.line{border-radius:0;height:2px;width:14px}
.swatch.cross{background:none;width:auto;height:auto;font-weight:700;border-radius:0}
p.table-title{margin:14px 0 2px;font-weight:600}
p.note,p.empty{color:#555;font-style:italic;margin:4px 0}
nav ul{padding-left:18px}
footer{margin-top:24px;color:#555;font-size:12.5px;border-top:1px solid #ddd}
"#;

/// The page's only script: it records script errors and marks the page as
/// rendered (tests read both from the DOM a headless browser dumps).
const SCRIPT: &str = r#"
(function(){var d=document.documentElement;
window.addEventListener('error',function(e){d.setAttribute('data-script-errors',(d.getAttribute('data-script-errors')||'')+(e.message||'error')+';');});
document.addEventListener('DOMContentLoaded',function(){d.setAttribute('data-charts',String(document.querySelectorAll('svg.chart').length));d.setAttribute('data-rendered','yes');});})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_studies_and_hosts_is_escaped() {
        assert_eq!(esc("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;".to_string());
        assert_eq!(slug("hc-0a1:x y"), "hc-0a1-x-y");
    }

    #[test]
    fn rows_read_top_down_and_ticks_drop_trailing_zeros() {
        let labels = vec!["first".to_string(), "second".to_string()];
        assert_eq!(row_label(&labels, row_y(2, 0)), "first");
        assert_eq!(row_label(&labels, row_y(2, 1)), "second");
        assert_eq!(row_label(&labels, 0.5), "");
        assert_eq!(row_label(&labels, 2.0), "");
        assert_eq!(tick(0.1), "0.1");
        assert_eq!(tick(20.0), "20");
        assert_eq!(tick(1.25), "1.25");
    }

    #[test]
    fn a_chart_gets_its_id_title_and_tooltips() {
        let svg = chart("c-1", "chart-x", "a <title>", 100, |root| {
            let mut ch = ChartBuilder::on(root)
                .build_cartesian_2d(0.0..1.0, 0.0..1.0)
                .map_err(|e| e.to_string())?;
            ch.draw_series([Circle::new((0.5, 0.5), 3, BLACK.filled())])
                .map_err(|e| e.to_string())?;
            Ok(vec![Tip {
                at: ch.backend_coord(&(0.5, 0.5)),
                text: "n = 3 & more".to_string(),
            }])
        });
        assert!(
            svg.starts_with("<svg id=\"c-1\" class=\"chart chart-x\""),
            "{svg}"
        );
        assert!(svg.contains("<title>a &lt;title&gt;</title>"), "{svg}");
        assert!(
            svg.contains("<title>n = 3 &amp; more</title></circle></g></svg>"),
            "{svg}"
        );
        assert_eq!(svg.matches("<svg").count(), 1);
    }

    #[test]
    fn bounds_pad_and_skip_what_is_not_finite() {
        assert_eq!(bounds([f64::NAN]), None);
        let (lo, hi) = bounds([1.0, 2.0, f64::INFINITY]).expect("bounds");
        assert!(lo < 1.0 && hi > 2.0 && hi < 3.0);
        let (lo, hi) = bounds([5.0]).expect("one value");
        assert!(lo < 5.0 && hi > 5.0);
    }
}
