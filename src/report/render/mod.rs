//! What the report's formats share (the header and footer, a cell's rows,
//! the bucket table, the numbers as text), and the Markdown and CSV
//! renderers. Every value printed carries its n and spread, and every table
//! names its host class, cell, baseline, workload context, study hash and
//! version. The terminal table (`terminal`) and the HTML page (`html`) use
//! this module, never the reverse; the choice of format is `report`'s.

use std::collections::BTreeMap;

use crate::decide::levers::{NextSteps, value_text};
use crate::decide::{Analysis, BucketReport, CellReport, ClassReport, ConfigReport};
use crate::spec::frozen::Judging;
use crate::stats::Summary;

mod csv;
mod markdown;

pub(crate) use csv::csv_field;
pub(super) use csv::render_csv;
pub use csv::{render_measurements, render_samples};
pub(super) use markdown::render_markdown;

/// A budget: whole numbers as integers (`81`), others as [`num`].
pub fn budget(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        num(x)
    }
}

pub use crate::fmt::sig as num;

pub(super) fn value_cell(r: &ConfigReport, unit: &str) -> String {
    match r.summary {
        // Too few samples for a spread (selection.min_samples).
        Some(s) if r.relative_spread.is_none() => {
            format!("{} {unit} ± ? (spread unknown at n={})", num(s.median), s.n)
        }
        Some(s) => format!(
            "{} ± {} {unit} ({:.1}%)",
            num(s.median),
            crate::fmt::spread(s.spread),
            r.relative_spread.unwrap_or(0.0) * 100.0
        ),
        None => "—".to_string(),
    }
}

/// `1 trial`, `3 trials`.
pub(super) fn trials(n: usize) -> String {
    crate::fmt::count(n as u64, "trial", "trials")
}

pub(super) fn n_cell(r: &ConfigReport) -> String {
    match r.summary {
        Some(s) => format!("{} ({})", s.n, trials(r.trials)),
        None => format!("0 ({})", trials(r.trials)),
    }
}

/// Speedup with its 95 % interval (`1.083× [1.050, 1.117]`), or, with
/// too few runs for one, ± the spread of single runs (`± ?` when unknown);
/// the baseline is itself.
pub(super) fn speedup_cell(role: RowRole, r: &ConfigReport) -> String {
    match (r.speedup, r.interval) {
        (Some(_), _) if role == RowRole::Baseline => "1× (itself)".to_string(),
        (Some(_), Some(i)) => format!("{:.3}× [{:.3}, {:.3}]", i.speedup, i.low, i.high),
        (Some(s), None) => format!("{s:.3}× {} (no interval)", pm_pct(r.combined_spread)),
        (None, _) => "—".to_string(),
    }
}

/// What a config's row in a cell's evidence table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RowRole {
    Baseline,
    /// The cell's own winner (after the tie rule).
    Winner,
    /// The best eligible config when nothing won the cell.
    Best,
    Eligible,
    Rejected,
}

impl RowRole {
    /// The word shown in the role column (and CSV's `role`).
    pub(super) fn as_str(self) -> &'static str {
        match self {
            RowRole::Baseline => "baseline",
            RowRole::Winner => "fastest",
            RowRole::Best => "best",
            RowRole::Eligible => "eligible",
            RowRole::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for RowRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cell's evidence rows: the baseline, the winner (or the best eligible
/// config), the other eligible ones with `all`, and the rejected ones,
/// each with its note.
pub(super) fn rows(cell: &CellReport, all: bool) -> Vec<(RowRole, &ConfigReport, String)> {
    let mut out = Vec::new();
    if let Some(b) = &cell.baseline {
        let note = match &b.rejection {
            Some(r) => format!("{}: {}", r.class.as_str(), r.detail),
            None => String::new(),
        };
        out.push((RowRole::Baseline, b, note));
    }
    let winner_label = cell.winner.as_ref().map(|w| w.label.as_str());
    for (i, c) in cell.eligible.iter().enumerate() {
        let is_winner = Some(c.label.as_str()) == winner_label;
        if is_winner {
            out.push((RowRole::Winner, c, "eligible; fastest here".to_string()));
        } else if i == 0 && winner_label.is_none() {
            out.push((
                RowRole::Best,
                c,
                "eligible; not a significant win".to_string(),
            ));
        } else if all {
            out.push((RowRole::Eligible, c, String::new()));
        }
    }
    for r in &cell.rejected {
        let note = r
            .rejection
            .as_ref()
            .map(|x| format!("{}: {}", x.class.as_str(), x.detail))
            .unwrap_or_default();
        out.push((RowRole::Rejected, r, note));
    }
    out
}

pub(super) fn header(a: &Analysis) -> Vec<String> {
    let context = if a.context.is_empty() {
        "(none given)".to_string()
    } else {
        a.context
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let baseline = a
        .baseline
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string())
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    vec![
        format!(
            "study {} · spec {} · tunectl {} · level: {}",
            a.study_id,
            &a.spec_hash[..a.spec_hash.len().min(12)],
            a.tunectl_version,
            a.level
        ),
        format!(
            "objective: {} [{}], {} is better · statistic: {} · a win needs the lower bound of its 95% interval above +{:.0}%",
            a.objective.name,
            a.objective.unit,
            a.objective.better.name(),
            a.statistic,
            a.min_improvement * 100.0
        ),
        format!("baseline: {baseline}"),
        format!("workload: {context}"),
        judging_line(&a.judging),
    ]
}

/// The judging settings a report used, and where they come from.
fn judging_line(j: &Judging) -> String {
    let mut parts = vec![
        format!(
            "min_improvement {}%",
            trim_float(j.selection.min_improvement * 100.0)
        ),
        format!("min_samples {}", j.selection.min_samples),
        format!("min_hosts {}", j.selection.min_hosts),
    ];
    for (metric, limit) in &j.selection.limits {
        let mut bounds = Vec::new();
        if let Some(min) = limit.min {
            bounds.push(format!("min {}", trim_float(min)));
        }
        if let Some(max) = limit.max {
            bounds.push(format!("max {}", trim_float(max)));
        }
        parts.push(format!("limit {metric} {}", bounds.join(" ")));
    }
    if let Some(t) = &j.tolerance {
        parts.push(format!(
            "tolerance rtol {} atol {}",
            trim_float(t.rtol),
            trim_float(t.atol)
        ));
    }
    if !j.buckets.is_empty() {
        let rules: Vec<String> = j
            .buckets
            .iter()
            .map(|(axis, rule)| format!("{axis} {}", rule.name()))
            .collect();
        parts.push(format!("buckets {}", rules.join(", ")));
    }
    let source = if j.changed_since_launch.is_empty() {
        "as launched".to_string()
    } else {
        format!(
            "the study file's, changed since the launch: {}; the measurements are the ones recorded",
            j.changed_since_launch.join("; ")
        )
    };
    format!("judged with: {} · {source}", parts.join(", "))
}

/// A setting as written: at most 6 decimals, no trailing zeros (0.02 →
/// `0.02`, 2.0000000000000004 → `2`).
fn trim_float(x: f64) -> String {
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

pub(super) fn class_line(c: &ClassReport) -> String {
    format!(
        "host class {} · {} · {} host{}: {}",
        c.host_class,
        c.label,
        c.hosts.len(),
        if c.hosts.len() == 1 { "" } else { "s" },
        c.hosts.join(", ")
    )
}

/// What ships, per bucket: [bucket, cells, ships, vs baseline, level, decision].
fn bucket_rows(class: &ClassReport) -> Vec<[String; 6]> {
    class.buckets.iter().map(bucket_row).collect()
}

pub(super) fn bucket_row(b: &BucketReport) -> [String; 6] {
    let ships = match &b.winner {
        Some(w) => w.label.clone(),
        None => "baseline".to_string(),
    };
    let vs = match &b.winner {
        Some(_) => winner_numbers(b).join("; "),
        None => "1× (the baseline itself)".to_string(),
    };
    let mut decision = b.decision.to_string();
    for r in &b.refusals {
        let reason = r.reason.to_string();
        if !decision.contains(&reason) {
            decision.push_str(&format!("; refused {}: {reason}", r.config_label));
        }
    }
    [
        b.label.clone(),
        b.cells.join(", "),
        ships,
        vs,
        format!("{} ({})", b.level.as_str().to_uppercase(), b.level_reason),
        decision,
    ]
}

pub(super) const BUCKET_HEADER: [&str; 6] = [
    "bucket",
    "cells",
    "ships",
    "vs baseline",
    "level",
    "decision",
];

pub(super) fn footer(a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    if a.voided_attempts > 0 || a.anchors > 0 {
        out.push(format!(
            "drift watch: {} baseline anchors; {} measurements discarded after drift and re-measured",
            a.anchors, a.voided_attempts
        ));
    }
    if a.classes.is_empty() {
        out.push("no finished trials in the ledger yet".to_string());
    }
    for c in &a.corrupt_objects {
        out.push(format!(
            "warning: ignored unreadable ledger object {}: {}",
            c.key, c.reason
        ));
    }
    if a.foreign_attempts > 0 {
        out.push(format!(
            "note: {} attempts from another spec of this study were ignored",
            a.foreign_attempts
        ));
    }
    if a.unknown_role_attempts > 0 {
        out.push(format!(
            "note: {} attempts of a role this tunectl does not know (a newer one's?) were ignored",
            a.unknown_role_attempts
        ));
    }
    out
}

/// The screening runs of an adaptive search: title, header, rows.
pub(super) type SearchTable = (String, Vec<String>, Vec<Vec<String>>);

pub(super) fn search_table(class: &crate::decide::ClassReport) -> Option<SearchTable> {
    let first = class.search.first()?;
    let m = &first.metric;
    let title = format!(
        "search on {} (screening runs, n = 1 per config, read on the proxy metric {} in {}, {}; the objective stage below decides):",
        class.host_class,
        m.name,
        if m.unit.is_empty() {
            "its unit"
        } else {
            m.unit.as_str()
        },
        m.better.name()
    );
    let budget_head = if first.budget_unit.is_empty() {
        "budget".to_string()
    } else {
        format!("budget ({})", first.budget_unit)
    };
    // The pruned column only where a search prunes (`fidelity.prune`).
    let pruning = class.search.iter().any(|r| r.pruned > 0);
    let mut header = vec![
        "cell".to_string(),
        budget_head,
        "configs run".to_string(),
        "failed".to_string(),
        "output changed".to_string(),
        format!("baseline {}", m.name),
        format!("best {} (config)", m.name),
    ];
    if pruning {
        header.insert(4, "pruned".to_string());
    }
    let rows = class
        .search
        .iter()
        .map(|r| {
            let mut row = vec![
                r.cell_label.clone(),
                r.budget.map(budget).unwrap_or_else(|| "-".to_string()),
                r.trials.to_string(),
                r.failed.to_string(),
                r.output_changed.to_string(),
                r.baseline.map(num).unwrap_or_else(|| "-".to_string()),
                r.best
                    .as_ref()
                    .map(|(label, v)| format!("{} ({label})", num(*v)))
                    .unwrap_or_else(|| "-".to_string()),
            ];
            if pruning {
                row.insert(4, r.pruned.to_string());
            }
            row
        })
        .collect();
    Some((title, header, rows))
}

/// A table's cells with control characters escaped, newlines included
/// (one cell, one line).
pub(super) fn cells_for_people<S: AsRef<str>>(row: Vec<S>) -> Vec<String> {
    row.iter()
        .map(|c| crate::term::escape(c.as_ref()).into_owned())
        .collect()
}

/// A relative value as a percentage: `1.2%`, `0.35%`, `0.012%` (two
/// significant digits below 1%, so that a small spread never reads 0).
pub fn pct_text(x: f64) -> String {
    let p = x * 100.0;
    if p == 0.0 || p.abs() >= 1.0 {
        format!("{p:.1}%")
    } else {
        let decimals = (1 - p.abs().log10().floor() as i32).clamp(1, 6) as usize;
        format!("{p:.decimals$}%")
    }
}

/// A relative spread as `± 1.2%`, `± ?` when unknown.
pub fn pm_pct(spread: Option<f64>) -> String {
    match spread {
        Some(s) => format!("± {}", pct_text(s)),
        None => "± ?".to_string(),
    }
}

/// A summary as `median ± spread (relative) n=N`, `± ?` below
/// `min_samples`.
pub fn summary_text(s: &Summary, unit: &str, min_samples: usize) -> String {
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    if s.n < min_samples {
        format!("{}{unit} ± ? n={}", num(s.median), s.n)
    } else {
        format!(
            "{} ± {}{unit} ({}) n={}",
            num(s.median),
            crate::fmt::spread(s.spread),
            pct_text(s.relative_spread()),
            s.n
        )
    }
}

/// The header's line on the secondary metrics, when the study has any.
pub fn secondary_line(a: &Analysis) -> Option<String> {
    if a.metrics.is_empty() {
        return None;
    }
    let also: Vec<String> = a
        .metrics
        .iter()
        .map(|m| format!("{} [{}], {} is better", m.name, m.unit, m.better.name()))
        .collect();
    Some(format!(
        "also measured (shown, judged only by selection.limits): {}",
        also.join("; ")
    ))
}

/// How "what to try next" estimates a knob's effect.
pub const EFFECT_METHOD: &str = "knob effects, largest first: BEST vs WORST value of the knob, the median over pairs of configs that passed the gate and differ in that knob alone (same cell) of BEST's objective / WORST's (above 1: BEST is better), ± the scaled MAD of those ratios as a share of the effect, n pairs";

/// A bucket winner's numbers: its speedup with the interval and the runs
/// it rests on, the spread of single runs beside them, then the final
/// round's when it ran. Empty without a winner.
pub fn winner_numbers(b: &BucketReport) -> Vec<String> {
    let Some(w) = &b.winner else {
        return Vec::new();
    };
    let at: Vec<(&ConfigReport, &ConfigReport)> = b
        .per_cell
        .iter()
        .filter_map(|c| Some((c.winner.as_ref()?, c.baseline.as_ref()?)))
        .collect();
    // The dispersion of single runs: the mean of the cells' combined
    // spreads, unknown when one is. For reading; decisions use intervals.
    let spreads: Option<Vec<f64>> = at.iter().map(|(w, _)| w.combined_spread).collect();
    let spread = spreads
        .filter(|s| !s.is_empty())
        .map(|s| s.iter().sum::<f64>() / s.len() as f64);
    let over = if at.len() > 1 {
        format!(
            " over {} cells; geometric mean, lowest cell {:.3}×",
            at.len(),
            w.min_cell_speedup
        )
    } else {
        String::new()
    };
    let mut out = vec![format!(
        "{}{over}; single runs scatter {}; a win needed its lower bound above {:.3}×",
        crate::decide::interval_text(&w.interval),
        pm_pct(spread),
        1.0 + b.threshold.unwrap_or(0.0)
    )];
    if let Some(c) = &w.confirmation {
        let outcome = match (&c.failure, c.confirmed) {
            (Some(f), _) => format!("failed: {f}"),
            (None, true) => "confirmed".to_string(),
            (None, false) if c.incomplete => {
                format!("{} of {} runs a side measured", c.runs_done, c.runs)
            }
            (None, false) => "not confirmed".to_string(),
        };
        let measured = c
            .interval
            .map(|i| crate::decide::interval_text(&i))
            .unwrap_or_else(|| format!("{:.3}×", c.speedup));
        let grown = if c.runs > c.planned {
            format!(", grown from {}", c.planned)
        } else {
            String::new()
        };
        out.push(format!(
            "final round ({} runs a side{grown}): {measured}, {outcome}",
            c.runs
        ));
    }
    out
}

/// A knob effect's ratio as `1.85× ± 6.5% (n=6 pairs)`: the spread of
/// the pairs' ratios, relative to the ratio, as every spread is shown.
pub fn effect_text(ratio: f64, spread: Option<f64>, pairs: usize) -> String {
    let spread = match spread {
        Some(s) if ratio.is_finite() && ratio > 0.0 => pm_pct(Some(s / ratio)),
        Some(s) => format!("± {}", crate::fmt::spread(s)),
        None => "± ?".to_string(),
    };
    let pairs = if pairs == 1 {
        "n=1 pair".to_string()
    } else {
        format!("n={pairs} pairs")
    };
    format!("{ratio:.3}× {spread} ({pairs})")
}

/// The sentences of "what to try next", in order, shared with Markdown.
pub fn next_lines(a: &Analysis, next: &NextSteps) -> Vec<String> {
    let mut out = Vec::new();
    if next.effects.is_empty() && next.edges.is_empty() && next.untried.is_empty() {
        return out;
    }
    let min = a.judging.selection.min_samples;
    for e in &next.effects {
        let line = match (e.ratio, &e.best, &e.worst) {
            (Some(r), Some(best), Some(worst)) => format!(
                "{}: {} vs {}: {}{}",
                e.knob,
                value_text(best),
                value_text(worst),
                effect_text(r, e.spread, e.pairs),
                if e.spread.is_none() {
                    format!(", fewer than {min}: spread unknown")
                } else {
                    String::new()
                }
            ),
            _ => format!(
                "{}: no estimate ({})",
                e.knob,
                e.no_estimate
                    .as_ref()
                    .map_or_else(|| "no pair".to_string(), ToString::to_string)
            ),
        };
        out.push(line);
    }
    // One line per edge, with every bucket that ships it.
    let mut edges: BTreeMap<(String, String, &str, bool), Vec<&str>> = BTreeMap::new();
    for e in &next.edges {
        edges
            .entry((
                e.knob.clone(),
                value_text(&e.value),
                e.side,
                e.edge_of_range,
            ))
            .or_default()
            .push(e.bucket.as_str());
    }
    for ((knob, value, side, of_range), buckets) in edges {
        let more = if side == "largest" {
            "larger"
        } else {
            "smaller"
        };
        let (which, then) = if of_range {
            (
                format!("the {side} value of the range of {knob}"),
                format!("a {more} one might do better: widen the range"),
            )
        } else {
            (
                format!("the {side} value of {knob} tried"),
                format!("{more} values of its range were never tried"),
            )
        };
        // A study without cell axes has one bucket: no need to name it.
        let place = match buckets.as_slice() {
            [only] if only.starts_with('(') => String::new(),
            all => format!(" in {}", all.join(" and ")),
        };
        out.push(format!("{knob}={value} ships{place}, {which}: {then}"));
    }
    for u in &next.untried {
        let values: Vec<String> = u.values.iter().map(value_text).collect();
        let causes: Vec<&str> = u
            .possible_causes
            .iter()
            .map(|c| match *c {
                "constraint" => "a constraint names the knob",
                "search" => "the search did not pick them",
                "budget" => "budget.max_trials may have cut the grid",
                "pending" => "trials are still to run",
                other => other,
            })
            .collect();
        out.push(format!(
            "never tried: {}={} (possible causes: {})",
            u.knob,
            values.join(", "),
            causes.join("; ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_percentages_keep_two_significant_digits() {
        assert_eq!(pct_text(0.0), "0.0%");
        assert_eq!(pct_text(0.0297), "3.0%");
        assert_eq!(pct_text(0.0023), "0.23%");
        assert_eq!(pct_text(0.00074), "0.074%");
        assert_eq!(pm_pct(None), "± ?");
    }
}
