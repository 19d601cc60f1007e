//! The charts of the page, drawn with plotters as inline SVG.

use super::*;
use std::collections::BTreeMap;

use plotters::chart::MeshStyle;
use plotters::coord::types::RangedCoordf64;

/// A point with its tooltip, in the chart's pixel coordinates.
pub(super) struct Tip {
    pub(super) at: (i32, i32),
    pub(super) text: String,
}

/// A drawn chart: the SVG plotters wrote and the tooltips to lay over it.
pub(super) struct Drawn {
    pub(super) svg: String,
    pub(super) tips: Vec<Tip>,
}

type DrawResult = Result<Vec<Tip>, String>;

/// A chart's plotting area: numbers on both axes.
pub(super) type Plot<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// What every chart of the page shares: its caption (of `caption_size`
/// points), margins and label areas (`y_area` pixels for the y labels), on
/// axes `x` and `y`.
pub(super) fn axes<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    caption_size: u32,
    y_area: u32,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Result<Plot<'a, 'b>, String> {
    ChartBuilder::on(root)
        .caption(caption, (FONT, caption_size))
        .margin(10)
        .x_label_area_size(42)
        .y_label_area_size(y_area)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())
}

/// The grid and the label styles every chart shares; the caller adds its
/// axes' descriptions and formats, and draws it.
pub(super) fn mesh<'a, 'c, 'b>(
    ch: &'c mut Plot<'a, 'b>,
) -> MeshStyle<'a, 'c, RangedCoordf64, RangedCoordf64, SVGBackend<'b>> {
    let mut m = ch.configure_mesh();
    m.label_style((FONT, 12))
        .light_line_style(WHITE)
        .bold_line_style(GRID)
        .axis_desc_style((FONT, 12));
    m
}

/// Draw with plotters into an SVG string of `height` pixels; the chart's
/// `<svg>` gets `id`, `class`, a `<title>` and one invisible circle per
/// tip, each with its own `<title>` (browsers show it on hover).
pub(super) fn chart(
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

pub(super) fn finish(d: Drawn, id: &str, class: &str, title: &str) -> String {
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
pub(super) fn bounds(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
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

pub(super) fn is_better(a: f64, b: f64, better: Better) -> bool {
    match better {
        Better::Higher => a > b,
        Better::Lower => a < b,
    }
}

/// The rejection's class name, for legends and colours.
pub(super) fn reason(r: &ConfigReport) -> Option<&'static str> {
    r.rejection.as_ref().map(|x| x.class.as_str())
}

pub(super) fn reason_color(reason: &str) -> RGBColor {
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

pub(super) fn css_color(c: &RGBColor) -> String {
    format!("rgb({},{},{})", c.0, c.1, c.2)
}

/// A row of the speedup chart: an eligible config, or every config
/// rejected for one reason.
enum SpeedupRow<'a> {
    Config(&'a ConfigReport),
    Rejected(&'static str, Vec<&'a ConfigReport>),
}

/// Each eligible config's speedup over the baseline at one cell, with its
/// 95 % interval as error bars, and the minimum a lower bound must clear;
/// the rejected configs summed up by reason, one row each (`[crash] ×10
/// configs`), each a cross at its speedup when it has one (else at the
/// left edge).
pub(super) fn speedup_chart(
    a: &Analysis,
    class: &ClassReport,
    cell: &CellReport,
    id: &str,
) -> String {
    let winner = cell.winner.as_ref().map(|w| w.label.as_str());
    let mut eligible: Vec<&ConfigReport> = cell.eligible.iter().collect();
    eligible.sort_by(|x, y| {
        y.speedup
            .unwrap_or(f64::NEG_INFINITY)
            .total_cmp(&x.speedup.unwrap_or(f64::NEG_INFINITY))
    });
    let mut by_reason: BTreeMap<&'static str, Vec<&ConfigReport>> = BTreeMap::new();
    for r in &cell.rejected {
        by_reason
            .entry(reason(r).unwrap_or("rejected"))
            .or_default()
            .push(r);
    }
    let rows: Vec<SpeedupRow> = eligible
        .iter()
        .map(|r| SpeedupRow::Config(r))
        .chain(
            by_reason
                .into_iter()
                .map(|(why, configs)| SpeedupRow::Rejected(why, configs)),
        )
        .collect();
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
    let spread_ends = |r: &ConfigReport| match (r.speedup, r.interval) {
        (Some(_), Some(i)) => vec![i.low, i.high],
        (Some(s), None) => vec![s],
        _ => vec![],
    };
    let Some((lo, hi)) = bounds(
        eligible
            .iter()
            .flat_map(|r| spread_ends(r))
            // A rejected config is drawn at its speedup alone.
            .chain(cell.rejected.iter().filter_map(|r| r.speedup))
            // The baseline's 1× and the threshold always in sight.
            .chain([0.9, 1.1, min_line]),
    ) else {
        return String::new();
    };
    let n = rows.len();
    let labels: Vec<String> = rows
        .iter()
        .map(|row| match row {
            SpeedupRow::Config(r) => short(&r.label, 44),
            SpeedupRow::Rejected(why, configs) => format!(
                "[{why}] ×{} config{}",
                configs.len(),
                if configs.len() == 1 { "" } else { "s" }
            ),
        })
        .collect();
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
    let tip_text = |r: &ConfigReport| {
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
            if r.interval.is_some() {
                format!("lower bound above {min_line:.3}×")
            } else {
                "none (no interval: too few runs)".to_string()
            },
            class.host_class,
            baseline_text(a, cell)
        );
        if let Some(rj) = &r.rejection {
            let _ = write!(text, " · rejected: {}: {}", rj.class.as_str(), rj.detail);
        }
        text
    };
    chart(id, "chart-speedup", &title, height, |root| {
        let mut ch = ratio_rows(
            root,
            (&caption, 15),
            (longest as u32 * 6 + 16).min(420),
            lo..hi,
            &labels,
            x_desc,
        )?;
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
        let left = lo + (hi - lo) * 0.01;
        for (i, row) in rows.iter().enumerate() {
            let y = row_y(n, i);
            match row {
                SpeedupRow::Rejected(why, configs) => {
                    let c = reason_color(why);
                    for r in configs {
                        let x = r.speedup.filter(|s| s.is_finite()).unwrap_or(left);
                        ch.draw_series(std::iter::once(Cross::new((x, y), 4, c.stroke_width(2))))
                            .map_err(|e| e.to_string())?;
                        tips.push(Tip {
                            at: ch.backend_coord(&(x, y)),
                            text: tip_text(r),
                        });
                    }
                }
                SpeedupRow::Config(r) => {
                    let color = if Some(r.label.as_str()) == winner {
                        WINNER
                    } else {
                        ELIGIBLE
                    };
                    let x = r.speedup.filter(|s| s.is_finite()).unwrap_or(left);
                    match (r.speedup, r.interval) {
                        (Some(s), Some(iv)) => {
                            ch.draw_series(std::iter::once(PathElement::new(
                                [(min_line, y - 0.3), (min_line, y + 0.3)],
                                THRESHOLD.mix(0.6).stroke_width(1),
                            )))
                            .map_err(|e| e.to_string())?;
                            ch.draw_series(std::iter::once(ErrorBar::new_horizontal(
                                y,
                                iv.low,
                                s,
                                iv.high,
                                color.stroke_width(1),
                                6,
                            )))
                            .map_err(|e| e.to_string())?;
                            ch.draw_series(std::iter::once(Circle::new((x, y), 4, color.filled())))
                                .map_err(|e| e.to_string())?;
                        }
                        _ => {
                            ch.draw_series(std::iter::once(Circle::new(
                                (x, y),
                                4,
                                UNKNOWN.stroke_width(2),
                            )))
                            .map_err(|e| e.to_string())?;
                        }
                    }
                    tips.push(Tip {
                        at: ch.backend_coord(&(x, y)),
                        text: tip_text(r),
                    });
                }
            }
        }
        Ok(tips)
    })
}

/// The axes of a chart of one row per item (`labels`, the first on top)
/// against a ratio on x (`lo..hi`, ticks written `1.5×`): its caption (of
/// its size), `y_area` pixels for the labels, the x axis described by
/// `x_desc`; the grid drawn.
pub(super) fn ratio_rows<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    (caption, caption_size): (&str, u32),
    y_area: u32,
    x: std::ops::Range<f64>,
    labels: &[String],
    x_desc: String,
) -> Result<Plot<'a, 'b>, String> {
    let n = labels.len();
    let mut ch = axes(
        root,
        caption,
        caption_size,
        y_area,
        x,
        -0.7f64..(n as f64 - 0.3),
    )?;
    mesh(&mut ch)
        .disable_y_mesh()
        .y_labels(n * 4 + 2)
        .y_label_formatter(&|y| row_label(labels, *y))
        .y_label_style((FONT, 11))
        .x_label_formatter(&|x| format!("{}×", tick(*x)))
        .x_desc(x_desc)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(ch)
}

/// Rows of a chart with one row per config: the first on top.
pub(super) fn row_y(rows: usize, i: usize) -> f64 {
    (rows - 1 - i) as f64
}

/// The label of the row at `y` (none between rows).
pub(super) fn row_label(labels: &[String], y: f64) -> String {
    let i = y.round();
    if (y - i).abs() > 1e-6 || i < 0.0 || i as usize >= labels.len() {
        return String::new();
    }
    labels[labels.len() - 1 - i as usize].clone()
}

/// An axis tick: at most 4 significant digits, no trailing zeros.
pub(super) fn tick(x: f64) -> String {
    let s = num(x);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A deterministic jitter in [-1, 1] for the `i`th point of a strip.
pub(super) fn jitter(i: usize) -> f64 {
    // The golden ratio's fractional steps spread points evenly.
    let f = (i as f64 * 0.618_033_988_75).fract();
    f * 2.0 - 1.0
}

/// The raw samples of the baseline and of the cell's winner (or its best
/// eligible config when nothing wins), one dot each, coloured by host,
/// with each side's median and spread.
pub(super) fn samples_chart(
    a: &Analysis,
    class: &ClassReport,
    cell: &CellReport,
    id: &str,
) -> String {
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
        let mut ch = axes(
            root,
            &short(&caption, 150),
            13,
            (longest as u32 * 6 + 16).min(300),
            lo..hi,
            -0.6f64..(n as f64 - 0.4),
        )?;
        mesh(&mut ch)
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
pub(super) fn attempt_time(a: &AttemptRecord) -> Option<chrono::NaiveDateTime> {
    let stamp = a.attempt_id.split('-').next()?;
    chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%S%.fZ").ok()
}

/// Each anchor's median against the minutes since the class's first
/// anchor (by sequence when the times cannot be read), one series per host,
/// with the baseline's sweep median for reference.
pub(super) fn anchors_chart(
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
        let mut ch = axes(root, &short(&caption, 150), 13, 70, xlo..xhi, ylo..yhi)?;
        mesh(&mut ch)
            .x_desc(x_desc)
            .y_desc(format!("{} ({unit})", a.objective.name))
            .x_label_formatter(&|x| tick(*x))
            .y_label_formatter(&|y| tick(*y))
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
                            format!("{} {unit}", crate::fmt::spread(s.spread))
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
pub(super) fn search_chart(
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
        Some(b) => format!(
            "budget {} {}",
            crate::report::render::budget(b),
            budget_unit
        ),
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
        let mut ch = axes(root, &caption, 13, 70, 0.0..xhi, ylo..yhi)?;
        mesh(&mut ch)
            .x_desc("cumulative trial-seconds (screening runs, in the order they ran)")
            .y_desc(format!(
                "{} ({unit}, {})",
                metric.name,
                metric.better.name()
            ))
            .x_label_formatter(&|x| tick(*x))
            .y_label_formatter(&|y| tick(*y))
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
pub(super) fn pareto_chart(
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
    // A `selection.limits` bound on the metric is drawn, and kept in view.
    let limit = a.judging.selection.limits.get(&m.name).copied();
    let bounds_of_limit: Vec<f64> = limit
        .iter()
        .flat_map(|l| [l.min, l.max])
        .flatten()
        .collect();
    let (ylo, yhi) = bounds(
        pairs
            .iter()
            .flat_map(|(_, s)| [s.median - s.spread, s.median + s.spread])
            .chain(bounds_of_limit.iter().copied()),
    )?;
    // What ships at this cell: its bucket's winner, else the baseline.
    let ships: Option<String> = class
        .buckets
        .iter()
        .find(|b| b.per_cell.iter().any(|pc| pc.cell_label == cell.cell_label))
        .map(|b| {
            b.winner
                .as_ref()
                .map(|w| w.label.clone())
                .or_else(|| cell.baseline.as_ref().map(|x| x.label.clone()))
                .unwrap_or_default()
        });
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
        let mut ch = axes(root, &caption, 13, 70, xlo..xhi, ylo..yhi)?;
        mesh(&mut ch)
            .x_desc(format!(
                "{} ({ounit}, {}; median, bars ± spread)",
                a.objective.name,
                ob.name()
            ))
            .y_desc(format!("{} ({munit}, {})", m.name, m.better.name()))
            .x_label_formatter(&|x| tick(*x))
            .y_label_formatter(&|y| tick(*y))
            .draw()
            .map_err(|e| e.to_string())?;
        for bound in &bounds_of_limit {
            ch.draw_series(DashedLineSeries::new(
                [(xlo, *bound), (xhi, *bound)],
                6,
                4,
                THRESHOLD.stroke_width(1),
            ))
            .map_err(|e| e.to_string())?;
        }
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
            let shipped = ships.as_ref() == Some(&r.label);
            if shipped {
                ch.draw_series([Circle::new(at, 10, BLACK.stroke_width(2))])
                    .map_err(|e| e.to_string())?;
            }
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
                    format!(
                        "{} ± {} {unit} (n = {})",
                        num(x.median),
                        crate::fmt::spread(x.spread),
                        x.n
                    )
                } else {
                    format!("{} {unit} ± ? (spread unknown, n = {})", num(x.median), x.n)
                }
            };
            tips.push(Tip {
                at: ch.backend_coord(&at),
                text: format!(
                    "{}{} · {}: {} · {}: {} · {} · host class {}{}{}",
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
                    },
                    if shipped { " · ships here" } else { "" }
                ),
            });
        }
        Ok(tips)
    });
    let limit_item = match limit {
        Some(l) if !bounds_of_limit.is_empty() => format!(
            "<li><span class=\"swatch dashed\" style=\"background:{}\"></span>selection.limits on {}: {}</li>",
            css_color(&THRESHOLD),
            esc(&m.name),
            esc(&[
                l.min.map(|v| format!("min {} {munit}", tick(v))),
                l.max.map(|v| format!("max {} {munit}", tick(v))),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", "))
        ),
        _ => String::new(),
    };
    let legend = format!(
        "<ul class=\"legend\"><li><span class=\"swatch\" style=\"background:{}\"></span>on the Pareto front (eligible; line joins it)</li><li><span class=\"swatch\" style=\"background:{}\"></span>eligible, dominated</li><li>▲ baseline</li><li>◯ ships here{}</li><li><span class=\"swatch cross\" style=\"color:{}\">×</span>rejected (colour by reason)</li>{limit_item}</ul>",
        css_color(&WINNER),
        css_color(&ELIGIBLE),
        ships
            .as_ref()
            .map(|l| format!(": {}", esc(l)))
            .unwrap_or_default(),
        css_color(&reason_color("limit"))
    );
    Some(format!("{svg}{legend}"))
}

/// The one cell axis that varies over `cells`, when it is numeric: its
/// name and each cell's value (by label). `None` when no axis varies, more
/// than one does, or the varying one is not a number everywhere.
pub(super) fn workload_axis(cells: &[CellReport]) -> Option<(String, BTreeMap<String, f64>)> {
    let first = cells.first()?.cell.as_object()?;
    let varying: Vec<&String> = first
        .keys()
        .filter(|k| {
            cells
                .iter()
                .any(|c| c.cell.get(k.as_str()) != first.get(k.as_str()))
        })
        .collect();
    let [axis] = varying.as_slice() else {
        return None;
    };
    let mut at = BTreeMap::new();
    for c in cells {
        let x = c
            .cell
            .get(axis.as_str())?
            .as_f64()
            .filter(|x| x.is_finite())?;
        at.insert(c.cell_label.clone(), x);
    }
    Some(((*axis).clone(), at))
}

/// The objective across the workload: over the one cell axis that varies,
/// the baseline's median at each cell and what ships there (its bucket's
/// winner, or the baseline where nothing wins), each with ± spread bars
/// where the spread is known, as two keyed lines; the axis is drawn in
/// powers of two when its values span 8× or more. `None` when there is no
/// such axis or fewer than two cells are measured.
pub(super) fn workload_chart(a: &Analysis, class: &ClassReport, id: &str) -> Option<String> {
    let (axis, at) = workload_axis(&class.cells)?;
    // (x, cell, baseline, what ships, whether a winner ships)
    let mut points: Vec<(f64, &str, &ConfigReport, &ConfigReport, bool)> = Vec::new();
    for b in &class.buckets {
        for pc in &b.per_cell {
            let (Some(&x), Some(base)) = (at.get(&pc.cell_label), pc.baseline.as_ref()) else {
                continue;
            };
            if base.summary.is_none() {
                continue;
            }
            let ships = pc.winner.as_ref().filter(|w| w.summary.is_some());
            points.push((
                x,
                &pc.cell_label,
                base,
                ships.unwrap_or(base),
                ships.is_some(),
            ));
        }
    }
    points.sort_by(|p, q| p.0.total_cmp(&q.0));
    points.dedup_by(|p, q| p.1 == q.1);
    if points.len() < 2 {
        return None;
    }
    let (xmin, xmax) = (points[0].0, points[points.len() - 1].0);
    let log2 = xmin > 0.0 && xmax / xmin >= 8.0;
    let xt = |x: f64| if log2 { x.log2() } else { x };
    let (xlo, xhi) = bounds(points.iter().map(|p| xt(p.0)))?;
    let sum = |r: &ConfigReport| r.summary.map(|s| (s.median, s.spread));
    let (ylo, yhi) = bounds(points.iter().flat_map(|p| {
        [p.2, p.3]
            .into_iter()
            .filter_map(sum)
            .flat_map(|(m, s)| [m - s, m + s])
    }))?;
    let unit = unit_of(&a.objective);
    let better = a.objective.better.name();
    let wins = points.iter().filter(|p| p.4).count();
    let title = format!(
        "{} ({unit}, {better} is better) across {axis}: the baseline and what ships at each cell (medians ± spread) · host class {}",
        a.objective.name, class.host_class
    );
    let caption = format!(
        "{} across {axis} · {} · a winner ships at {wins} of {} cells",
        a.objective.name,
        class.host_class,
        points.len()
    );
    let svg = chart(id, "chart-workload", &title, 360, |root| {
        let mut ch = axes(root, &caption, 13, 70, xlo..xhi, ylo..yhi)?;
        mesh(&mut ch)
            .x_desc(if log2 {
                format!("{axis} (powers of two)")
            } else {
                axis.clone()
            })
            .y_desc(format!(
                "{} ({unit}, {better}; median ± spread)",
                a.objective.name
            ))
            .x_label_formatter(&|x| if log2 { tick(2f64.powf(*x)) } else { tick(*x) })
            .y_label_formatter(&|y| tick(*y))
            .draw()
            .map_err(|e| e.to_string())?;
        let mut tips = Vec::new();
        for (ships, color) in [(false, BLACK), (true, WINNER)] {
            let line: Vec<(f64, f64)> = points
                .iter()
                .filter_map(|p| sum(if ships { p.3 } else { p.2 }).map(|(m, _)| (xt(p.0), m)))
                .collect();
            ch.draw_series(LineSeries::new(line, color.stroke_width(2)))
                .map_err(|e| e.to_string())?;
            for p in &points {
                let r = if ships { p.3 } else { p.2 };
                let Some((m, s)) = sum(r) else { continue };
                let xy = (xt(p.0), m);
                if r.relative_spread.is_some() {
                    ch.draw_series([ErrorBar::new_vertical(
                        xy.0,
                        m - s,
                        m,
                        m + s,
                        color.mix(0.35).stroke_width(1),
                        6,
                    )])
                    .map_err(|e| e.to_string())?;
                }
                if ships {
                    ch.draw_series([Circle::new(xy, 5, color.filled())])
                        .map_err(|e| e.to_string())?;
                } else {
                    ch.draw_series([TriangleMarker::new(xy, 6, color.filled())])
                        .map_err(|e| e.to_string())?;
                }
                tips.push(Tip {
                    at: ch.backend_coord(&xy),
                    text: format!(
                        "{} · {}{} · {}: {} · host class {}",
                        p.1,
                        r.label,
                        match (ships, p.4) {
                            (false, _) => " (baseline)",
                            (true, true) => " (ships: its bucket's winner)",
                            (true, false) => " (ships: nothing beats the baseline)",
                        },
                        a.objective.name,
                        summary_text(r, &unit),
                        class.host_class
                    ),
                });
            }
        }
        Ok(tips)
    });
    let legend = format!(
        "<ul class=\"legend\"><li>▲ <span class=\"swatch\" style=\"background:{}\"></span>baseline</li><li>● <span class=\"swatch\" style=\"background:{}\"></span>what ships (its bucket's winner; the baseline where nothing wins)</li><li>bars: ± spread of the samples</li></ul>",
        css_color(&BLACK),
        css_color(&WINNER)
    );
    Some(format!("{svg}{legend}"))
}
