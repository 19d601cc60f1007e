//! Views for exploring a class's evidence beyond its decisions: every
//! measured config of a cell across its knobs (parallel coordinates), and
//! "what to try next" with the knob effects drawn.

use super::*;
use crate::decide::levers::{KnobEffect, value_text};
use crate::report::render::{EFFECT_METHOD, effect_text, next_lines};
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// At most this many eligible configs are drawn per cell in parallel
/// coordinates (the best ones); the baseline, what ships and the rejected
/// are always drawn.
const MAX_LINES: usize = 200;

/// Where a rejected config's line ends on the objective's axis: below it,
/// on a row of its own (a rejected config has no value that counts).
const REJECTED_Y: f64 = -0.14;

/// What a line of the parallel-coordinates chart stands for, in the order
/// they are drawn (the last on top).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Line {
    Rejected,
    Eligible,
    Baseline,
    Ships,
}

/// One knob's axis: its name and its values, bottom to top.
struct KnobAxis {
    knob: String,
    values: Vec<serde_json::Value>,
}

impl KnobAxis {
    /// Where `v` sits on the axis, 0 (bottom) to 1 (top).
    fn at(&self, v: &serde_json::Value) -> Option<f64> {
        let i = self.values.iter().position(|x| x == v)?;
        Some(if self.values.len() == 1 {
            0.5
        } else {
            i as f64 / (self.values.len() - 1) as f64
        })
    }
}

/// The values of `knob` among `configs`, bottom to top: ascending when all
/// are numbers, else in the order of the knob's `domain` (then as written).
fn axis_values(
    domain: &[serde_json::Value],
    knob: &str,
    configs: &[&serde_json::Value],
) -> Vec<serde_json::Value> {
    let mut values: Vec<serde_json::Value> = Vec::new();
    for c in configs {
        if let Some(v) = c.get(knob)
            && !values.contains(v)
        {
            values.push(v.clone());
        }
    }
    if values.iter().all(serde_json::Value::is_number) {
        values.sort_by(|x, y| {
            x.as_f64()
                .unwrap_or(0.0)
                .total_cmp(&y.as_f64().unwrap_or(0.0))
        });
    } else {
        values.sort_by_key(|v| {
            (
                domain.iter().position(|d| d == v).unwrap_or(usize::MAX),
                value_text(v),
            )
        });
    }
    values
}

/// The values of a knob's domain, as the analysis keeps them.
fn domain_of<'a>(a: &'a Analysis, knob: &str) -> &'a [serde_json::Value] {
    a.domains
        .get(knob)
        .and_then(|d| d.get("values"))
        .and_then(serde_json::Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Every config measured at one cell as a line across one axis per knob
/// that varies among them, ending on the objective's axis (better on top;
/// a rejected config ends below it, in its reason's colour). The baseline
/// and what ships in the cell's bucket are drawn on top; knobs are ordered
/// by their estimated effect, the largest next to the objective. `None`
/// when fewer than two knobs vary.
pub(super) fn parallel_chart(
    a: &Analysis,
    class: &ClassReport,
    cell: &CellReport,
    id: &str,
) -> Option<String> {
    let ships = class
        .buckets
        .iter()
        .find(|b| b.key == cell.bucket)
        .map(|b| &b.config);
    let better = a.objective.better;
    let median = |r: &ConfigReport| r.summary.map(|s| s.median).filter(|m| m.is_finite());
    let mut eligible: Vec<&ConfigReport> = cell
        .eligible
        .iter()
        .filter(|r| median(r).is_some())
        .collect();
    eligible.sort_by(|x, y| {
        let (mx, my) = (median(x).unwrap_or(0.0), median(y).unwrap_or(0.0));
        match better {
            Better::Higher => my.total_cmp(&mx),
            Better::Lower => mx.total_cmp(&my),
        }
    });
    let eligible_total = eligible.len();
    let kind = |r: &ConfigReport, otherwise: Line| {
        if Some(&r.config) == ships {
            Line::Ships
        } else {
            otherwise
        }
    };
    let mut lines: Vec<(&ConfigReport, Line)> = Vec::new();
    for (i, r) in eligible.into_iter().enumerate() {
        let k = kind(r, Line::Eligible);
        if i < MAX_LINES || k == Line::Ships {
            lines.push((r, k));
        }
    }
    let drawn_eligible = lines.len();
    if let Some(b) = cell.baseline.as_ref().filter(|b| median(b).is_some()) {
        lines.push((b, kind(b, Line::Baseline)));
    }
    lines.extend(cell.rejected.iter().map(|r| (r, Line::Rejected)));
    lines.sort_by_key(|(_, k)| *k);

    let configs: Vec<&serde_json::Value> = lines.iter().map(|(r, _)| &r.config).collect();
    // Knobs that vary here, the one with the largest effect last (next to
    // the objective); knobs without an estimate first, by name.
    let effect = |k: &str| {
        class
            .next
            .effects
            .iter()
            .find(|e| e.knob == k)
            .and_then(|e| e.ratio)
            .filter(|r| r.is_finite())
    };
    let mut knobs: Vec<KnobAxis> = a
        .domains
        .keys()
        .map(|k| KnobAxis {
            knob: k.clone(),
            values: axis_values(domain_of(a, k), k, &configs),
        })
        .filter(|ax| ax.values.len() > 1)
        .collect();
    if knobs.len() < 2 {
        return None;
    }
    knobs.sort_by(|x, y| {
        effect(&x.knob)
            .unwrap_or(f64::NEG_INFINITY)
            .total_cmp(&effect(&y.knob).unwrap_or(f64::NEG_INFINITY))
            .then_with(|| x.knob.cmp(&y.knob))
    });
    let (lo, hi) = lines
        .iter()
        .filter(|(_, k)| *k != Line::Rejected)
        .filter_map(|(r, _)| median(r))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), m| {
            (lo.min(m), hi.max(m))
        });
    if !lo.is_finite() {
        return None;
    }
    // 0 (worst) to 1 (best): better on top whichever way is better.
    let objective_y = |m: f64| {
        let t = if hi > lo { (m - lo) / (hi - lo) } else { 0.5 };
        match better {
            Better::Higher => t,
            Better::Lower => 1.0 - t,
        }
    };
    let unit = unit_of(&a.objective);
    let n_axes = knobs.len();
    let rejected = lines.iter().filter(|(_, k)| *k == Line::Rejected).count();
    let title = format!(
        "{}: each config measured at this cell as a line across its knobs, ending at its {} median ({unit}, {} is better; better on top) · host class {} · {}",
        cell.cell_label,
        a.objective.name,
        better.name(),
        class.host_class,
        baseline_text(a, cell)
    );
    let shown = if drawn_eligible < eligible_total {
        format!("the best {drawn_eligible} of {eligible_total} eligible configs")
    } else {
        format!(
            "{eligible_total} eligible config{}",
            if eligible_total == 1 { "" } else { "s" }
        )
    };
    let caption = format!(
        "{} · {shown}, {rejected} rejected · host class {}",
        cell.cell_label, class.host_class
    );
    let svg = chart(id, "chart-parallel", &title, 380, |root| {
        let mut ch = axes(
            root,
            &caption,
            13,
            10,
            -0.35..(n_axes as f64 + 0.6),
            (REJECTED_Y - 0.1)..1.16,
        )?;
        let label = |anchor: HPos| {
            TextStyle::from((FONT, 11).into_font()).pos(Pos::new(anchor, VPos::Center))
        };
        // The axes: each knob's values, then the objective's range.
        for (x, ax) in knobs.iter().enumerate() {
            let x = x as f64;
            ch.draw_series([PathElement::new([(x, 0.0), (x, 1.0)], GRID.stroke_width(2))])
                .map_err(|e| e.to_string())?;
            ch.draw_series([Text::new(
                ax.knob.clone(),
                (x, 1.09),
                label(HPos::Center).clone(),
            )])
            .map_err(|e| e.to_string())?;
            for v in &ax.values {
                let y = ax.at(v).unwrap_or(0.5);
                ch.draw_series([Text::new(
                    short(&value_text(v), 14),
                    (x - 0.03, y),
                    label(HPos::Right).clone(),
                )])
                .map_err(|e| e.to_string())?;
            }
        }
        let xo = n_axes as f64;
        ch.draw_series([PathElement::new(
            [(xo, 0.0), (xo, 1.0)],
            BLACK.stroke_width(1),
        )])
        .map_err(|e| e.to_string())?;
        ch.draw_series([Text::new(
            format!("{} ({unit})", a.objective.name),
            (xo, 1.09),
            label(HPos::Center).clone(),
        )])
        .map_err(|e| e.to_string())?;
        let (best, worst) = match better {
            Better::Higher => (hi, lo),
            Better::Lower => (lo, hi),
        };
        for (v, y) in [(best, 1.0), (worst, 0.0)] {
            ch.draw_series([Text::new(
                tick(v),
                (xo + 0.04, y),
                label(HPos::Left).clone(),
            )])
            .map_err(|e| e.to_string())?;
        }
        if rejected > 0 {
            ch.draw_series([Text::new(
                "rejected".to_string(),
                (xo + 0.04, REJECTED_Y),
                label(HPos::Left).clone(),
            )])
            .map_err(|e| e.to_string())?;
        }
        let mut tips = Vec::new();
        for (r, k) in &lines {
            let end = match k {
                Line::Rejected => REJECTED_Y,
                _ => objective_y(median(r).unwrap_or(lo)),
            };
            let points: Vec<(f64, f64)> = knobs
                .iter()
                .enumerate()
                .filter_map(|(x, ax)| {
                    r.config
                        .get(&ax.knob)
                        .and_then(|v| ax.at(v))
                        .map(|y| (x as f64, y))
                })
                .chain([(xo, end)])
                .collect();
            let style = match k {
                Line::Rejected => reason_color(reason(r).unwrap_or(""))
                    .mix(0.45)
                    .stroke_width(1),
                Line::Eligible => ELIGIBLE.mix(0.35).stroke_width(1),
                Line::Baseline => BLACK.stroke_width(2),
                Line::Ships => WINNER.stroke_width(3),
            };
            ch.draw_series([PathElement::new(points, style)])
                .map_err(|e| e.to_string())?;
            let what = match k {
                Line::Rejected => format!(
                    "rejected: {}",
                    r.rejection.as_ref().map_or_else(String::new, |x| format!(
                        "{}: {}",
                        x.class.as_str(),
                        x.detail
                    ))
                ),
                Line::Eligible => summary_text(r, &unit),
                Line::Baseline => format!("baseline, {}", summary_text(r, &unit)),
                Line::Ships => format!("ships in this bucket, {}", summary_text(r, &unit)),
            };
            tips.push(Tip {
                at: ch.backend_coord(&(xo, end)),
                text: format!(
                    "{} · {} · {what} · host class {}",
                    cell.cell_label, r.label, class.host_class
                ),
            });
        }
        Ok(tips)
    });
    Some(svg)
}

/// The key of the parallel-coordinates charts.
pub(super) fn parallel_legend() -> String {
    format!(
        "<ul class=\"legend\"><li><span class=\"swatch line\" style=\"background:{}\"></span>ships in this cell's bucket</li><li><span class=\"swatch line\" style=\"background:{}\"></span>baseline</li><li><span class=\"swatch line\" style=\"background:{}\"></span>eligible</li><li><span class=\"swatch line\" style=\"background:{}\"></span>rejected (coloured by reason; ends below the objective's axis)</li><li>knobs ordered by estimated effect, the largest next to the objective</li></ul>",
        css_color(&WINNER),
        css_color(&BLACK),
        css_color(&ELIGIBLE),
        css_color(&reason_color("crash"))
    )
}

/// "What to try next" on a class: the knob effects as a chart, then the
/// same sentences the terminal and Markdown reports give. Nothing when
/// the class has none.
pub(super) fn next_section(out: &mut String, a: &Analysis, class: &ClassReport, id: &str) {
    let lines = next_lines(a, &class.next);
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h3>What to try next on {}</h3>\n<p class=\"note\">{}</p>",
        esc(&class.host_class),
        esc(EFFECT_METHOD)
    );
    if let Some(svg) = effects_chart(a, class, id) {
        figure(out, svg, "");
    }
    let _ = writeln!(
        out,
        "<ul class=\"next\">{}</ul>",
        lines
            .iter()
            .map(|l| format!("<li>{}</li>", esc(l)))
            .collect::<String>()
    );
}

/// Each knob's estimated effect as a bar from 1× to its ratio (best value
/// against worst, better direction), with ± the spread of its pairs'
/// ratios where that is known (a hollow mark where it is not). `None` when
/// no knob has an estimate.
fn effects_chart(a: &Analysis, class: &ClassReport, id: &str) -> Option<String> {
    let rows: Vec<(&KnobEffect, f64)> = class
        .next
        .effects
        .iter()
        .filter_map(|e| {
            e.ratio
                .filter(|r| r.is_finite() && *r > 0.0)
                .map(|r| (e, r))
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let n = rows.len();
    let labels: Vec<String> = rows
        .iter()
        .map(|(e, _)| {
            let side =
                |v: &Option<serde_json::Value>| v.as_ref().map_or("?".to_string(), value_text);
            short(
                &format!("{}: {} vs {}", e.knob, side(&e.best), side(&e.worst)),
                40,
            )
        })
        .collect();
    let (lo, hi) = bounds(
        rows.iter()
            .flat_map(|(e, r)| {
                let s = e.spread.unwrap_or(0.0);
                [r - s, r + s]
            })
            .chain([1.0, 1.05]),
    )?;
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(10);
    let title = format!(
        "knob effects on {} ({}, {}): for each knob, its best value's {} over its worst's, paired at the same cell and other knobs (median ratio ± spread of the pairs' ratios, n pairs) · host class {}",
        class.host_class,
        unit_of(&a.objective),
        a.objective.better.name(),
        a.objective.name,
        class.host_class
    );
    let caption = format!(
        "knob effects · {} · best value vs worst, 1× = no effect",
        class.host_class
    );
    let svg = chart(id, "chart-effects", &title, 120 + 26 * n as u32, |root| {
        let mut ch = ratio_rows(
            root,
            (&caption, 13),
            (longest as u32 * 6 + 16).min(320),
            lo..hi,
            &labels,
            format!(
                "best value's {} / worst value's ({} is better; 1× = no effect)",
                a.objective.name,
                a.objective.better.name()
            ),
        )?;
        ch.draw_series([PathElement::new(
            [(1.0, -0.7), (1.0, n as f64 - 0.3)],
            BLACK.stroke_width(1),
        )])
        .map_err(|e| e.to_string())?;
        let mut tips = Vec::new();
        for (i, (e, r)) in rows.iter().enumerate() {
            let y = row_y(n, i);
            ch.draw_series([Rectangle::new(
                [(1.0, y - 0.28), (*r, y + 0.28)],
                ELIGIBLE.mix(0.55).filled(),
            )])
            .map_err(|e| e.to_string())?;
            match e.spread {
                Some(s) => {
                    ch.draw_series([ErrorBar::new_horizontal(
                        y,
                        r - s,
                        *r,
                        r + s,
                        BLACK.stroke_width(1),
                        8,
                    )])
                    .map_err(|e| e.to_string())?;
                }
                None => {
                    ch.draw_series([Circle::new((*r, y), 4, UNKNOWN.stroke_width(2))])
                        .map_err(|e| e.to_string())?;
                }
            }
            tips.push(Tip {
                at: ch.backend_coord(&(*r, y)),
                text: format!(
                    "{} · {} · host class {}{}",
                    labels[i],
                    effect_text(*r, e.spread, e.pairs),
                    class.host_class,
                    if e.spread.is_none() {
                        format!(
                            " · fewer than {} pairs: spread unknown",
                            a.judging.selection.min_samples
                        )
                    } else {
                        String::new()
                    }
                ),
            });
        }
        Ok(tips)
    });
    Some(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn knob_axes_put_numbers_in_order_and_words_in_their_domain_order() {
        let configs = [
            json!({"block": 4096, "accum": "i64"}),
            json!({"block": 1024, "accum": "f64"}),
            json!({"block": 16384, "accum": "i64"}),
            json!({"block": 1024, "accum": "zz"}),
        ];
        let refs: Vec<&serde_json::Value> = configs.iter().collect();
        let block = axis_values(&[], "block", &refs);
        assert_eq!(block, [json!(1024), json!(4096), json!(16384)]);
        let domain = [json!("f64"), json!("i64"), json!("f32")];
        let accum = axis_values(&domain, "accum", &refs);
        // A value outside the domain (a fork's old value) goes last.
        assert_eq!(accum, [json!("f64"), json!("i64"), json!("zz")]);
        let axis = KnobAxis {
            knob: "block".into(),
            values: block,
        };
        assert_eq!(axis.at(&json!(1024)), Some(0.0));
        assert_eq!(axis.at(&json!(4096)), Some(0.5));
        assert_eq!(axis.at(&json!(16384)), Some(1.0));
        assert_eq!(axis.at(&json!(2048)), None);
        let one = KnobAxis {
            knob: "x".into(),
            values: vec![json!(1)],
        };
        assert_eq!(one.at(&json!(1)), Some(0.5));
    }
}
