//! Rendering an [`Analysis`] as a terminal table, Markdown, JSON or CSV.
//! Every value printed carries its n and spread, and every table names its
//! host class, cell, baseline, workload context, study hash and version.

use std::fmt::Write as _;

use crate::decide::{Analysis, BucketReport, CellReport, ClassReport, ConfigReport};
use crate::spec::frozen::Judging;
use crate::stats::Summary;

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
pub(super) fn speedup_cell(role: &str, r: &ConfigReport) -> String {
    match (r.speedup, r.interval) {
        (Some(_), _) if role == "baseline" => "1× (itself)".to_string(),
        (Some(_), Some(i)) => format!("{:.3}× [{:.3}, {:.3}]", i.speedup, i.low, i.high),
        (Some(s), None) => format!(
            "{s:.3}× {} (no interval)",
            super::terminal::pm_pct(r.combined_spread)
        ),
        (None, _) => "—".to_string(),
    }
}

/// Rows shown for a cell: baseline, winner (or best eligible), the rest of
/// the eligible configs when `all`, then every rejected config.
pub(super) fn rows(cell: &CellReport, all: bool) -> Vec<(&'static str, &ConfigReport, String)> {
    let mut out = Vec::new();
    if let Some(b) = &cell.baseline {
        let note = match &b.rejection {
            Some(r) => format!("{}: {}", r.class.as_str(), r.detail),
            None => String::new(),
        };
        out.push(("baseline", b, note));
    }
    let winner_label = cell.winner.as_ref().map(|w| w.label.as_str());
    for (i, c) in cell.eligible.iter().enumerate() {
        let is_winner = Some(c.label.as_str()) == winner_label;
        if is_winner {
            out.push(("fastest", c, "eligible; fastest here".to_string()));
        } else if i == 0 && winner_label.is_none() {
            out.push(("best", c, "eligible; not a significant win".to_string()));
        } else if all {
            out.push(("eligible", c, String::new()));
        }
    }
    for r in &cell.rejected {
        let note = r
            .rejection
            .as_ref()
            .map(|x| format!("{}: {}", x.class.as_str(), x.detail))
            .unwrap_or_default();
        out.push(("rejected", r, note));
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
fn bucket_rows(class: &ClassReport, min_samples: usize) -> Vec<[String; 6]> {
    class
        .buckets
        .iter()
        .map(|b| bucket_row(b, min_samples))
        .collect()
}

pub(super) fn bucket_row(b: &BucketReport, min_samples: usize) -> [String; 6] {
    let ships = match &b.winner {
        Some(w) => w.label.clone(),
        None => "baseline".to_string(),
    };
    let vs = match &b.winner {
        Some(_) => super::terminal::winner_numbers(b, min_samples).join("; "),
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
    render_sized(a, format, all, super::terminal::width(None))
}

/// `a` in `format`; the table fits in `width` columns.
pub fn render_sized(a: &Analysis, format: Format, all: bool, width: usize) -> String {
    match format {
        // Text for people: values from studies and hosts are shown escaped
        // (crate::term); cells are escaped one by one, the rest as a block.
        Format::Table => {
            crate::term::escape_block(&super::terminal::render(a, all, width)).into_owned()
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
        Format::Html => super::html::render_html(a, all),
    }
}

/// A table's cells with control characters escaped, newlines included
/// (one cell, one line).
pub(super) fn cells_for_people<S: AsRef<str>>(row: Vec<S>) -> Vec<String> {
    row.iter()
        .map(|c| crate::term::escape(c.as_ref()).into_owned())
        .collect()
}

fn md_escape(s: &str) -> String {
    crate::term::escape(s).replace('|', "\\|")
}

fn render_markdown(a: &Analysis, all: bool) -> String {
    let min_samples = a.judging.selection.min_samples as usize;
    let mut out = String::from("# tunectl report\n\n");
    for l in header(a) {
        let _ = writeln!(out, "- {}", md_escape(&l));
    }
    if let Some(l) = super::terminal::secondary_line(a) {
        let _ = writeln!(out, "- {}", md_escape(&l));
    }
    let unit = &a.objective.unit;
    for class in &a.classes {
        let _ = writeln!(out, "\n## {}\n", md_escape(&class_line(class)));
        if let Some((title, header, rows)) = search_table(class) {
            let _ = writeln!(out, "{}\n", md_escape(&title));
            let _ = writeln!(
                out,
                "| {} |\n|{}",
                header.join(" | "),
                "---|".repeat(header.len())
            );
            for row in rows {
                let cells: Vec<String> = row.iter().map(|c| md_escape(c)).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
            let _ = writeln!(out);
        }
        for cell in &class.cells {
            let _ = writeln!(
                out,
                "### cell {}\n\n{}\n",
                md_escape(&cell.cell_label),
                md_escape(&cell.decision.to_string())
            );
            for n in &cell.notes {
                let _ = writeln!(out, "> note: {}\n", md_escape(&n.to_string()));
            }
            let secondary: String = a
                .metrics
                .iter()
                .map(|m| format!(" {} median ± spread (n) |", md_escape(&m.name)))
                .collect();
            let _ = writeln!(
                out,
                "| role | config (vs baseline) | {} median ± spread | n |{secondary} vs baseline | verdict |\n|---|---|---|---|{}---|---|",
                a.objective.name,
                "---|".repeat(a.metrics.len())
            );
            for (role, r, note) in rows(cell, all) {
                let secondary: String = a
                    .metrics
                    .iter()
                    .map(|m| {
                        let text = r
                            .metrics
                            .get(&m.name)
                            .map(|s| super::terminal::summary_text(s, &m.unit, min_samples))
                            .unwrap_or_else(|| "—".to_string());
                        format!(" {} |", md_escape(&text))
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "| {role} | {} | {} | {} |{secondary} {} | {} |",
                    md_escape(&r.label),
                    md_escape(&value_cell(r, unit)),
                    n_cell(r),
                    speedup_cell(role, r),
                    md_escape(&note)
                );
            }
        }
    }
    for class in &a.classes {
        if class.buckets.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n## what ships on {} (per bucket)\n\n| {} |\n|---|---|---|---|---|---|",
            class.host_class,
            BUCKET_HEADER.join(" | ")
        );
        for row in bucket_rows(class, min_samples) {
            let cells: Vec<String> = row.iter().map(|c| md_escape(c)).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }
    for class in &a.classes {
        let lines = super::terminal::next_lines(a, &class.next);
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n## what to try next on {}\n\n{}\n",
            class.host_class,
            md_escape(super::terminal::EFFECT_METHOD)
        );
        for l in lines {
            let _ = writeln!(out, "- {}", md_escape(&l));
        }
    }
    let foot = footer(a);
    if !foot.is_empty() {
        out.push('\n');
        for l in foot {
            let _ = writeln!(out, "- {}", md_escape(&l));
        }
    }
    out
}

/// One CSV field (RFC 4180): quoted when it holds a comma, a quote or a
/// line break. Text from studies and hosts that a spreadsheet would take
/// for a formula (`=`, `+`, `-`, `@`, a tab or a carriage return first)
/// is written with a `'` first, so that opening the file runs nothing;
/// numbers, and a lone `-` (no value), are left as they are.
fn csv_field(s: &str) -> String {
    let formula =
        s.len() > 1 && s.starts_with(['=', '+', '-', '@', '\t', '\r']) && s.parse::<f64>().is_err();
    let s = if formula {
        std::borrow::Cow::Owned(["'", s].concat())
    } else {
        std::borrow::Cow::Borrowed(s)
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.into_owned()
    }
}

/// The columns both CSV formats give a config's measurements at a cell,
/// in this order; [`measured_fields`] fills them.
const MEASURED: &[&str] = &[
    "metric",
    "unit",
    "better",
    "statistic",
    "n",
    "trials",
    "median",
    "spread",
    "relative_spread",
    "speedup_vs_baseline",
    "baseline_median",
    "baseline_spread",
    "baseline_n",
    "failure_class",
    "speedup_ci_low",
    "speedup_ci_high",
    "runs",
    "baseline_runs",
];

/// [`MEASURED`] of the objective of config `r` at a cell whose baseline is
/// `base`.
fn measured_fields(a: &Analysis, r: &ConfigReport, base: Option<&ConfigReport>) -> Vec<String> {
    metric_fields(
        a,
        &a.objective,
        r.summary,
        r,
        base.and_then(|b| b.summary),
        r.speedup,
        r.interval,
    )
}

/// [`MEASURED`] of `metric` (`s`: config `r`'s summary of it, `base`: the
/// baseline's). A spread from fewer than `selection.min_samples` samples
/// is unknown: an empty field, never 0.
fn metric_fields(
    a: &Analysis,
    metric: &crate::decide::MetricInfo,
    s: Option<Summary>,
    r: &ConfigReport,
    base: Option<Summary>,
    speedup: Option<f64>,
    interval: Option<crate::stats::speedup::Interval>,
) -> Vec<String> {
    let min_samples = a.judging.selection.min_samples as usize;
    let f = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
    let known = |s: Option<Summary>| s.filter(|s| s.n >= min_samples);
    vec![
        metric.name.clone(),
        metric.unit.clone(),
        metric.better.name().to_string(),
        "median".to_string(),
        s.map(|s| s.n.to_string())
            .unwrap_or_else(|| "0".to_string()),
        r.trials.to_string(),
        f(s.map(|s| s.median)),
        f(known(s).map(|s| s.spread)),
        f(known(s).map(|s| s.relative_spread())),
        f(speedup),
        f(base.map(|s| s.median)),
        f(known(base).map(|s| s.spread)),
        base.map(|s| s.n.to_string()).unwrap_or_default(),
        r.rejection
            .as_ref()
            .map(|x| x.class.as_str().to_string())
            .unwrap_or_default(),
        f(interval.map(|i| i.low)),
        f(interval.map(|i| i.high)),
        interval.map(|i| i.runs.to_string()).unwrap_or_default(),
        interval
            .map(|i| i.reference_runs.to_string())
            .unwrap_or_default(),
    ]
}

/// [`MEASURED`] of each secondary metric of config `r` (no speedup: they
/// are not judged), in the study's order.
fn secondary_fields(
    a: &Analysis,
    r: &ConfigReport,
    base: Option<&ConfigReport>,
) -> Vec<Vec<String>> {
    a.metrics
        .iter()
        .map(|m| {
            metric_fields(
                a,
                m,
                r.metrics.get(&m.name).copied(),
                r,
                base.and_then(|b| b.metrics.get(&m.name).copied()),
                None,
                None,
            )
        })
        .collect()
}

/// The study's workload context as one CSV field: `k=v;k=v`.
fn context_field(a: &Analysis) -> String {
    a.context
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// Columns of [`render_measurements`].
fn measurement_columns() -> Vec<&'static str> {
    let mut cols = vec![
        "study",
        "spec_hash",
        "tunectl_version",
        "host_class",
        "host_class_label",
        "hosts",
        "cell",
        "config",
        "config_json",
        "status",
    ];
    cols.extend_from_slice(MEASURED);
    cols.extend_from_slice(&["reason", "context"]);
    cols
}

/// One CSV row per (config, host class, cell): the config's measurements
/// against the baseline, without any decision (which config is fastest,
/// what ships), so that rows do not depend on the other configs measured.
/// Rows are ordered by `position` of the config (the study's candidate
/// order; configs it does not place go last, by label), then host class,
/// then cell; `keep` selects configs (a shard's).
pub fn render_measurements(
    a: &Analysis,
    position: &dyn Fn(&serde_json::Value) -> Option<u64>,
    keep: &dyn Fn(&serde_json::Value) -> bool,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", measurement_columns().join(","));
    let context = context_field(a);
    // (position, config JSON, host class, cell) → fields
    type Row = ((u64, String, String, String), Vec<String>);
    let mut rows: Vec<Row> = Vec::new();
    for class in &a.classes {
        for cell in &class.cells {
            let base = cell.baseline.as_ref();
            let configs = cell
                .baseline
                .iter()
                .chain(&cell.eligible)
                .chain(&cell.rejected);
            for r in configs {
                if !keep(&r.config) {
                    continue;
                }
                let json = crate::canon::canonical_json(&r.config);
                let status = if r.rejection.is_some() {
                    "rejected"
                } else {
                    "eligible"
                };
                let mut fields = vec![
                    a.study_id.clone(),
                    a.spec_hash.clone(),
                    a.tunectl_version.clone(),
                    class.host_class.clone(),
                    class.label.clone(),
                    class.hosts.join(" "),
                    cell.cell_label.clone(),
                    r.label.clone(),
                    json.clone(),
                    status.to_string(),
                ];
                fields.extend(measured_fields(a, r, base));
                fields.push(
                    r.rejection
                        .as_ref()
                        .map(|x| x.detail.clone())
                        .unwrap_or_default(),
                );
                fields.push(context.clone());
                let key = (
                    position(&r.config).unwrap_or(u64::MAX),
                    json,
                    class.host_class.clone(),
                    cell.cell_label.clone(),
                );
                rows.push((key, fields.iter().map(|x| csv_field(x)).collect()));
            }
        }
    }
    // By position (the JSON orders configs without one), then host class,
    // then cell.
    rows.sort();
    for (_, fields) in rows {
        let _ = writeln!(out, "{}", fields.join(","));
    }
    out
}

fn render_csv(a: &Analysis) -> String {
    let mut out = String::new();
    let mut cols = [
        "study",
        "spec_hash",
        "tunectl_version",
        "level",
        "host_class",
        "host_class_label",
        "hosts",
        "cell",
        "role",
        "config",
    ]
    .to_vec();
    cols.extend_from_slice(MEASURED);
    cols.extend_from_slice(&[
        "reason",
        "decision",
        "context",
        "bucket",
        "bucket_ships",
        "bucket_level",
        "bucket_decision",
    ]);
    let _ = writeln!(out, "{}", cols.join(","));
    let context = context_field(a);
    for class in &a.classes {
        for cell in &class.cells {
            let base = cell.baseline.as_ref();
            let bucket = class.buckets.iter().find(|b| b.key == cell.bucket);
            for (role, r, note) in rows(cell, true) {
                let head = vec![
                    a.study_id.clone(),
                    a.spec_hash.clone(),
                    a.tunectl_version.clone(),
                    a.level.to_string(),
                    class.host_class.clone(),
                    class.label.clone(),
                    class.hosts.join(" "),
                    cell.cell_label.clone(),
                    role.to_string(),
                    r.label.clone(),
                ];
                let tail = [
                    note,
                    cell.decision.to_string(),
                    context.clone(),
                    bucket.map(|b| b.label.clone()).unwrap_or_default(),
                    bucket
                        .map(|b| {
                            let ships = b
                                .winner
                                .as_ref()
                                .map(|w| w.label.as_str())
                                .unwrap_or("baseline");
                            (ships == r.label).to_string()
                        })
                        .unwrap_or_default(),
                    bucket.map(|b| b.level.to_string()).unwrap_or_default(),
                    bucket.map(|b| b.decision.to_string()).unwrap_or_default(),
                ];
                // One row per metric: the objective's, then each
                // secondary metric's.
                let metrics = std::iter::once(measured_fields(a, r, base))
                    .chain(secondary_fields(a, r, base));
                for measured in metrics {
                    let line: Vec<String> = head
                        .iter()
                        .chain(&measured)
                        .chain(&tail)
                        .map(|s| csv_field(s))
                        .collect();
                    let _ = writeln!(out, "{}", line.join(","));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::csv_field;

    #[test]
    fn csv_fields_are_quoted_and_formulas_neutralised() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\rlines"), "\"two\rlines\"");
        assert_eq!(
            csv_field("=HYPERLINK(\"http://x\")"),
            "\"'=HYPERLINK(\"\"http://x\"\")\""
        );
        assert_eq!(csv_field("+1+1"), "'+1+1");
        assert_eq!(csv_field("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_field("-2+3"), "'-2+3");
        // Numbers stay numbers.
        assert_eq!(csv_field("-3"), "-3");
        assert_eq!(csv_field("+1.5e3"), "+1.5e3");
        assert_eq!(csv_field("-"), "-");
    }
}
