//! `--format html`: one self-contained page (inline CSS, inline SVG drawn
//! with plotters, one small inline script), readable without a network.
//!
//! Per host class, in this order: what ships per bucket and why; the
//! objective across the workload axis; each cell's speedup per config
//! with its spread and the threshold; the raw samples of the baseline and
//! the winner; the drift anchors over time; an adaptive search's
//! progress; the objective against each secondary metric with the Pareto
//! front; every config across its knobs (parallel coordinates); what to
//! try next, with the knob effects drawn; the evidence tables, which the
//! page's script sorts and filters. Every plotted number
//! keeps its context (unit, n, spread, host class, baseline) in axis
//! labels, captions or SVG `<title>` tooltips, and an unknown spread is
//! drawn and written as unknown, never as zero.

mod charts;
mod explore;
mod page;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::decide::{Analysis, CellReport, ClassReport, ConfigReport, MetricInfo};
use crate::ledger::records::{AttemptRecord, AttemptStatus};
use crate::report::render::{
    BUCKET_HEADER, bucket_row, class_line, footer, header, n_cell, num, rows, search_table,
    speedup_cell, value_cell,
};
use crate::spec::Better;
use crate::trial::RoleKind;

use charts::*;
use explore::*;
pub use page::render_html;
use page::*;

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
            format!(
                "{} ± {} {unit} (n = {})",
                num(s.median),
                crate::fmt::spread(s.spread),
                s.n
            )
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
