//! CSV: the report, one row per config and cell (RFC 4180, formulas
//! neutralised), and the measurements, one row per attempt.

use std::fmt::Write as _;

use super::*;

/// One CSV field (RFC 4180): quoted when it holds a comma, a quote or a
/// line break. Text from studies and hosts that a spreadsheet would take
/// for a formula (`=`, `+`, `-`, `@`, a tab or a carriage return first)
/// is written with a `'` first, so that opening the file runs nothing;
/// numbers, and a lone `-` (no value), are left as they are.
pub(crate) fn csv_field(s: &str) -> String {
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
            for r in configs_of(cell) {
                if !keep(&r.config) {
                    continue;
                }
                let json = crate::canon::canonical_json(&r.config);
                let status = status_of(r);
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

pub(in crate::report) fn render_csv(a: &Analysis) -> String {
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

/// A cell's configs in report order: the baseline, the eligible ones
/// (best first), the rejected.
fn configs_of(cell: &CellReport) -> impl Iterator<Item = &ConfigReport> {
    cell.baseline
        .iter()
        .chain(&cell.eligible)
        .chain(&cell.rejected)
}

/// `eligible` or `rejected`, as the CSV formats write it.
fn status_of(r: &ConfigReport) -> &'static str {
    if r.rejection.is_some() {
        "rejected"
    } else {
        "eligible"
    }
}

/// `--format samples`: every sample of the objective the decisions read,
/// one CSV row each (hyperfine's `--export-json` has every run): the
/// study, host class, cell, config, its status, the host, the sample's
/// position on that host, its value and unit. Baseline first, then the
/// eligible configs best first, then the rejected; hosts by name; samples
/// in repeat order.
pub fn render_samples(a: &Analysis) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "study,spec_hash,host_class,cell,config,config_json,status,host,sample,metric,value,unit"
    );
    for class in &a.classes {
        for cell in &class.cells {
            for r in configs_of(cell) {
                let status = status_of(r);
                let json = crate::canon::canonical_json(&r.config);
                for (host, values) in r.samples() {
                    for (i, v) in values.iter().enumerate() {
                        let fields = [
                            a.study_id.clone(),
                            a.spec_hash.clone(),
                            class.host_class.clone(),
                            cell.cell_label.clone(),
                            r.label.clone(),
                            json.clone(),
                            status.to_string(),
                            host.clone(),
                            (i + 1).to_string(),
                            a.objective.name.clone(),
                            crate::fmt::exact(*v),
                            a.objective.unit.clone(),
                        ];
                        let row: Vec<String> = fields.iter().map(|x| csv_field(x)).collect();
                        let _ = writeln!(out, "{}", row.join(","));
                    }
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
