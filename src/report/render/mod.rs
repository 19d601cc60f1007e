//! Rendering an [`Analysis`] as a terminal table, Markdown, JSON or CSV.
//! Every value printed carries its n and spread, and every table names its
//! host class, cell, baseline, workload context, study hash and version.

use crate::decide::{Analysis, BucketReport, CellReport, ClassReport, ConfigReport};
use crate::spec::frozen::Judging;
use crate::stats::Summary;

mod csv;
mod markdown;

use csv::render_csv;
pub use csv::render_measurements;
use markdown::render_markdown;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Markdown,
    Json,
    Csv,
    /// CSV, one row per (config, host class, cell) with what was measured
    /// and no decision: the rows of `--shard` reports concatenate to a full
    /// run's.
    Measurements,
    /// One self-contained HTML page: what ships, charts and the evidence
    /// tables (see `report::html`).
    Html,
}

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
            num(s.spread),
            r.relative_spread.unwrap_or(0.0) * 100.0
        ),
        None => "—".to_string(),
    }
}

pub(super) fn n_cell(r: &ConfigReport) -> String {
    match r.summary {
        Some(s) => format!("{} ({} trials)", s.n, r.trials),
        None => format!("0 ({} trials)", r.trials),
    }
}

/// Speedup with its 95 % interval (`1.083× [1.050, 1.117]`), or, with
/// too few runs for one, ± the spread of single runs (`± ?` when unknown);
/// the baseline is itself.
pub(super) fn speedup_cell(role: RowRole, r: &ConfigReport) -> String {
    match (r.speedup, r.interval) {
        (Some(_), _) if role == RowRole::Baseline => "1× (itself)".to_string(),
        (Some(_), Some(i)) => format!("{:.3}× [{:.3}, {:.3}]", i.speedup, i.low, i.high),
        (Some(s), None) => format!(
            "{s:.3}× {} (no interval)",
            crate::report::terminal::pm_pct(r.combined_spread)
        ),
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
        Some(_) => crate::report::terminal::winner_numbers(b).join("; "),
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

/// The JSON report: the analysis under its schema name (docs/json.md).
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    schema: &'static str,
    #[serde(flatten)]
    analysis: &'a Analysis,
}

/// [`render_sized`] at the width of [`terminal::width`] without `--width`.
pub fn render(a: &Analysis, format: Format, all: bool) -> String {
    render_sized(a, format, all, crate::report::terminal::width(None))
}

/// `a` in `format`; the table fits in `width` columns.
pub fn render_sized(a: &Analysis, format: Format, all: bool, width: usize) -> String {
    match format {
        // Text for people: values from studies and hosts are shown escaped
        // (crate::term); cells are escaped one by one, the rest as a block.
        Format::Table => {
            crate::term::escape_block(&crate::report::terminal::render(a, all, width)).into_owned()
        }
        Format::Markdown => crate::term::escape_block(&render_markdown(a, all)).into_owned(),
        Format::Json => {
            let doc = JsonReport {
                schema: crate::schema::REPORT,
                analysis: a,
            };
            serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
        }
        Format::Csv => render_csv(a),
        Format::Measurements => render_measurements(a, &|_| None, &|_| true),
        Format::Html => crate::report::html::render_html(a, all),
    }
}

/// A table's cells with control characters escaped, newlines included
/// (one cell, one line).
pub(super) fn cells_for_people<S: AsRef<str>>(row: Vec<S>) -> Vec<String> {
    row.iter()
        .map(|c| crate::term::escape(c.as_ref()).into_owned())
        .collect()
}
