//! A study as data (`tunectl export --format parquet|csv`): one row per
//! attempt, or per sample with `--samples`, in typed columns that pandas,
//! polars and DuckDB read as they are. The columns are in docs/ledger.md
//! ("The study as data").
//!
//! The rows are the ledger's attempts of the study's spec (voided ones
//! left out, as the analysis leaves them out), with what the analysis
//! judged of each config at its cell beside them: the data says what was
//! measured, the report what it means.

mod parquet;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::decide::Analysis;
use crate::ledger::Scan;
use crate::ledger::records::{AttemptRecord, AttemptStatus};

pub use parquet::write_parquet;

/// Text values, dictionary-encoded: most repeat from row to row (study,
/// host class, config, status...), and a sample row repeats its attempt's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Strings {
    /// Each distinct value once.
    pub dict: Vec<String>,
    /// Per row, its value's position in `dict` (`None`: null).
    pub keys: Vec<Option<u32>>,
}

impl Strings {
    pub fn get(&self, row: usize) -> Option<&str> {
        self.keys[row].map(|k| self.dict[k as usize].as_str())
    }
}

impl<'a> FromIterator<Option<&'a str>> for Strings {
    fn from_iter<I: IntoIterator<Item = Option<&'a str>>>(iter: I) -> Strings {
        let mut pos: HashMap<&'a str, u32> = HashMap::new();
        let mut out = Strings::default();
        for v in iter {
            let key = v.map(|v| {
                *pos.entry(v).or_insert_with(|| {
                    out.dict.push(v.to_string());
                    (out.dict.len() - 1) as u32
                })
            });
            out.keys.push(key);
        }
        out
    }
}

/// One column's values, a row each (`None`: null).
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    Str(Strings),
    I64(Vec<Option<i64>>),
    F64(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
    /// A list of numbers per row (an attempt's samples of a metric).
    F64List(Vec<Option<Vec<f64>>>),
}

impl Values {
    pub fn len(&self) -> usize {
        match self {
            Values::Str(v) => v.keys.len(),
            Values::I64(v) => v.len(),
            Values::F64(v) => v.len(),
            Values::Bool(v) => v.len(),
            Values::F64List(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i` as CSV text: empty for null, numbers exact, lists as JSON
    /// arrays.
    fn text(&self, i: usize) -> String {
        match self {
            Values::Str(v) => v.get(i).unwrap_or_default().to_string(),
            Values::I64(v) => v[i].map(|x| x.to_string()).unwrap_or_default(),
            Values::F64(v) => v[i].map(crate::fmt::exact).unwrap_or_default(),
            Values::Bool(v) => v[i].map(|x| x.to_string()).unwrap_or_default(),
            Values::F64List(v) => v[i]
                .as_ref()
                .map(|xs| {
                    let parts: Vec<String> = xs.iter().map(|x| crate::fmt::exact(*x)).collect();
                    format!("[{}]", parts.join(","))
                })
                .unwrap_or_default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub values: Values,
}

/// Columns of equal length.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: usize,
}

impl Table {
    /// RFC 4180 CSV with a header; text that a spreadsheet would take for
    /// a formula starts with `'` (as the report's CSV).
    pub fn to_csv(&self) -> String {
        let mut out = String::new();
        let header: Vec<String> = self
            .columns
            .iter()
            .map(|c| super::render::csv_field(&c.name))
            .collect();
        out.push_str(&header.join(","));
        out.push('\n');
        for i in 0..self.rows {
            let row: Vec<String> = self
                .columns
                .iter()
                .map(|c| super::render::csv_field(&c.values.text(i)))
                .collect();
            out.push_str(&row.join(","));
            out.push('\n');
        }
        out
    }
}

/// What the analysis judged of a config at a cell of a host class.
#[derive(Clone, Copy)]
struct Judged {
    status: &'static str,
    rejection: Option<&'static str>,
}

/// (host class, cell label, config label) → what the analysis says of it.
fn judged(a: &Analysis) -> HashMap<(&str, &str, &str), Judged> {
    let mut out = HashMap::new();
    for class in &a.classes {
        for cell in &class.cells {
            let base = cell.baseline.iter().map(|r| (r, "baseline"));
            let eligible = cell.eligible.iter().map(|r| (r, "eligible"));
            let rejected = cell.rejected.iter().map(|r| (r, "rejected"));
            for (r, status) in base.chain(eligible).chain(rejected) {
                let status = if r.rejection.is_some() {
                    "rejected"
                } else {
                    status
                };
                out.insert(
                    (
                        class.host_class.as_str(),
                        cell.cell_label.as_str(),
                        r.label.as_str(),
                    ),
                    Judged {
                        status,
                        rejection: r.rejection.as_ref().map(|x| x.class.as_str()),
                    },
                );
            }
        }
    }
    out
}

fn status_str(s: AttemptStatus) -> &'static str {
    match s {
        AttemptStatus::Ok => "ok",
        AttemptStatus::Failed => "failed",
        AttemptStatus::Lost => "lost",
        AttemptStatus::Pruned => "pruned",
    }
}

/// A knob's or cell axis's values as one typed column: booleans, integers
/// or numbers when every present value is one, else text (strings as they
/// are, anything else as JSON).
fn typed(name: String, values: Vec<Option<&serde_json::Value>>) -> Column {
    use serde_json::Value as J;
    let present = || values.iter().flatten();
    let values = if present().all(|v| v.is_boolean()) {
        Values::Bool(values.iter().map(|v| v.and_then(J::as_bool)).collect())
    } else if present().all(|v| v.is_i64()) {
        Values::I64(values.iter().map(|v| v.and_then(J::as_i64)).collect())
    } else if present().all(|v| v.is_number()) {
        Values::F64(values.iter().map(|v| v.and_then(J::as_f64)).collect())
    } else {
        let text: Vec<Option<std::borrow::Cow<str>>> = values
            .iter()
            .map(|v| {
                v.map(|v| match v {
                    J::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
                    other => std::borrow::Cow::Owned(crate::canon::canonical_json(other)),
                })
            })
            .collect();
        Values::Str(text.iter().map(|v| v.as_deref()).collect())
    };
    Column { name, values }
}

/// The keys of the objects `values` hold, sorted.
fn keys<'a>(values: impl Iterator<Item = &'a serde_json::Value>) -> Vec<String> {
    let mut out = BTreeSet::new();
    for v in values {
        if let Some(m) = v.as_object() {
            out.extend(m.keys().cloned());
        }
    }
    out.into_iter().collect()
}

/// One output row: an attempt, and for `--samples` which sample of which
/// metric.
struct Row<'a> {
    attempt: &'a AttemptRecord,
    sample: Option<(&'a str, usize, f64)>,
}

/// The study as a table: the attempts of `scan` that belong to the
/// analysed spec, one row each (every sample of each metric as a list), or
/// with `samples` one row per sample. Ordered by host class, cell, config,
/// role, repeat and attempt.
pub fn study_table<'a>(a: &'a Analysis, scan: &'a Scan, samples: bool) -> Table {
    let mut attempts: Vec<&'a AttemptRecord> = of_spec(a, scan).collect();
    attempts.sort_by(|x, y| {
        (
            &x.host_class,
            x.cell_index,
            x.config_index,
            x.role.as_str(),
            x.repeat,
            &x.attempt_id,
        )
            .cmp(&(
                &y.host_class,
                y.cell_index,
                y.config_index,
                y.role.as_str(),
                y.repeat,
                &y.attempt_id,
            ))
    });
    let counted: BTreeSet<&str> = scan
        .terminal()
        .values()
        .map(|r| r.attempt_id.as_str())
        .collect();
    let labels: HashMap<&str, &str> = a
        .classes
        .iter()
        .map(|c| (c.host_class.as_str(), c.label.as_str()))
        .collect();
    let judged = judged(a);
    let units: HashMap<&str, &str> = std::iter::once(&a.objective)
        .chain(&a.metrics)
        .map(|m| (m.name.as_str(), m.unit.as_str()))
        .collect();
    // Configs are shared between the records of a scan: one text each.
    let mut config_json: HashMap<*const serde_json::Value, String> = HashMap::new();
    for r in &attempts {
        config_json
            .entry(Arc::as_ptr(&r.config))
            .or_insert_with(|| crate::canon::canonical_json(&r.config));
    }
    let metric_names: Vec<String> = {
        let mut s = BTreeSet::new();
        for r in &attempts {
            s.extend(r.metrics.keys());
        }
        s.into_iter().map(str::to_string).collect()
    };

    let rows: Vec<Row<'a>> = if samples {
        attempts
            .iter()
            .flat_map(|r| {
                r.metrics.iter().flat_map(move |(m, xs)| {
                    xs.iter().enumerate().map(move |(i, x)| Row {
                        attempt: r,
                        sample: Some((m.as_str(), i + 1, *x)),
                    })
                })
            })
            .collect()
    } else {
        attempts
            .iter()
            .map(|r| Row {
                attempt: r,
                sample: None,
            })
            .collect()
    };

    let mut t = Table {
        columns: Vec::new(),
        rows: rows.len(),
    };
    // Text borrowed from the records or from this function's own tables:
    // copied once per distinct value into the column's dictionary.
    fn str_column<'r, 's>(
        t: &mut Table,
        rows: &[Row<'r>],
        name: &str,
        f: impl Fn(&Row<'r>) -> Option<&'s str>,
    ) {
        t.columns.push(Column {
            name: name.to_string(),
            values: Values::Str(rows.iter().map(f).collect()),
        })
    }
    let i64_col = |t: &mut Table, name: &str, f: &dyn Fn(&Row) -> Option<i64>| {
        t.columns.push(Column {
            name: name.to_string(),
            values: Values::I64(rows.iter().map(f).collect()),
        })
    };
    let f64_col = |t: &mut Table, name: &str, f: &dyn Fn(&Row) -> Option<f64>| {
        t.columns.push(Column {
            name: name.to_string(),
            values: Values::F64(rows.iter().map(f).collect()),
        })
    };
    let bool_col = |t: &mut Table, name: &str, f: &dyn Fn(&Row) -> Option<bool>| {
        t.columns.push(Column {
            name: name.to_string(),
            values: Values::Bool(rows.iter().map(f).collect()),
        })
    };
    let judged_of = |r: &AttemptRecord| {
        judged
            .get(&(
                r.host_class.as_str(),
                r.cell_label.as_str(),
                r.config_label.as_str(),
            ))
            .copied()
    };

    str_column(&mut t, &rows, "study", |_: &Row| Some(a.study_id.as_str()));
    str_column(&mut t, &rows, "spec_hash", |_: &Row| {
        Some(a.spec_hash.as_str())
    });
    str_column(&mut t, &rows, "host_class", |r: &Row| {
        Some(r.attempt.host_class.as_str())
    });
    str_column(&mut t, &rows, "host_class_label", |r: &Row| {
        labels.get(r.attempt.host_class.as_str()).copied()
    });
    str_column(&mut t, &rows, "host", |r: &Row| {
        Some(r.attempt.host.as_str())
    });
    str_column(&mut t, &rows, "fingerprint", |r: &Row| {
        Some(r.attempt.fingerprint.as_str())
    });
    i64_col(&mut t, "slot", &|r| Some(i64::from(r.attempt.slot)));
    str_column(&mut t, &rows, "cell", |r: &Row| {
        Some(r.attempt.cell_label.as_str())
    });
    i64_col(&mut t, "cell_index", &|r| {
        Some(i64::from(r.attempt.cell_index))
    });
    let axes = keys(attempts.iter().map(|r| &*r.cell));
    for axis in &axes {
        let vals = rows.iter().map(|r| r.attempt.cell.get(axis)).collect();
        t.columns.push(typed(format!("cell.{axis}"), vals));
    }
    str_column(&mut t, &rows, "config", |r: &Row| {
        Some(r.attempt.config_label.as_str())
    });
    i64_col(&mut t, "config_index", &|r| {
        i64::try_from(r.attempt.config_index).ok()
    });
    bool_col(&mut t, "is_baseline", &|r| Some(r.attempt.is_baseline));
    let knobs = keys(attempts.iter().map(|r| &*r.config));
    for knob in &knobs {
        let vals = rows.iter().map(|r| r.attempt.config.get(knob)).collect();
        t.columns.push(typed(format!("knob.{knob}"), vals));
    }
    str_column(&mut t, &rows, "config_json", |r: &Row| {
        config_json
            .get(&Arc::as_ptr(&r.attempt.config))
            .map(String::as_str)
    });
    str_column(&mut t, &rows, "judged", |r: &Row| {
        judged_of(r.attempt).map(|j| j.status)
    });
    str_column(&mut t, &rows, "rejection", |r: &Row| {
        judged_of(r.attempt).and_then(|j| j.rejection)
    });
    str_column(&mut t, &rows, "trial_key", |r: &Row| {
        Some(r.attempt.trial_key.as_str())
    });
    str_column(&mut t, &rows, "attempt_id", |r: &Row| {
        Some(r.attempt.attempt_id.as_str())
    });
    bool_col(&mut t, "counts", &|r| {
        Some(counted.contains(r.attempt.attempt_id.as_str()))
    });
    str_column(&mut t, &rows, "role", |r: &Row| {
        Some(r.attempt.role.as_str())
    });
    i64_col(&mut t, "repeat", &|r| Some(i64::from(r.attempt.repeat)));
    f64_col(&mut t, "fidelity", &|r| r.attempt.fidelity);
    str_column(&mut t, &rows, "status", |r: &Row| {
        Some(status_str(r.attempt.status))
    });
    str_column(&mut t, &rows, "failure_class", |r: &Row| {
        r.attempt.failure.as_ref().map(|f| f.class.as_str())
    });
    str_column(&mut t, &rows, "failure_detail", |r: &Row| {
        r.attempt.failure.as_ref().map(|f| f.detail.as_str())
    });
    i64_col(&mut t, "exit_code", &|r| {
        r.attempt.exit.as_ref().and_then(|e| e.code).map(i64::from)
    });
    i64_col(&mut t, "exit_signal", &|r| {
        r.attempt
            .exit
            .as_ref()
            .and_then(|e| e.signal)
            .map(i64::from)
    });
    f64_col(&mut t, "duration_s", &|r| Some(r.attempt.duration_s));
    f64_col(&mut t, "run_s", &|r| r.attempt.run_s);
    i64_col(&mut t, "warmup_runs", &|r| {
        Some(i64::from(r.attempt.warmup_runs))
    });
    str_column(&mut t, &rows, "digest", |r: &Row| {
        r.attempt.digest.as_deref()
    });
    if samples {
        str_column(&mut t, &rows, "metric", |r: &Row| r.sample.map(|s| s.0));
        bool_col(&mut t, "objective", &|r| {
            r.sample.map(|s| s.0 == a.objective.name)
        });
        str_column(&mut t, &rows, "unit", |r: &Row| {
            r.sample.and_then(|s| units.get(s.0).copied())
        });
        i64_col(&mut t, "sample", &|r| {
            r.sample.and_then(|s| i64::try_from(s.1).ok())
        });
        f64_col(&mut t, "value", &|r| r.sample.map(|s| s.2));
    } else {
        for m in &metric_names {
            t.columns.push(Column {
                name: format!("metric.{m}"),
                values: Values::F64List(
                    rows.iter()
                        .map(|r| r.attempt.metrics.get(m).cloned())
                        .collect(),
                ),
            });
        }
    }
    t
}

/// The attempts of `scan` that belong to the analysed spec: the rows of
/// [`study_table`] without `--samples`.
pub fn attempts_of(a: &Analysis, scan: &Scan) -> usize {
    of_spec(a, scan).count()
}

/// The attempts of `scan` of the analysed spec.
fn of_spec<'a>(a: &'a Analysis, scan: &'a Scan) -> impl Iterator<Item = &'a AttemptRecord> {
    scan.records().filter(|r| *r.spec_hash == *a.spec_hash)
}

/// A Parquet file's key-value metadata: under `tunectl.data`, a JSON
/// object with the columns' version, the study, its spec, what a row is,
/// the objective (name, unit, which way is better) and the secondary
/// metrics.
pub fn metadata(a: &Analysis, samples: bool) -> Vec<(String, String)> {
    let doc = serde_json::json!({
        // The columns' version: it goes up when a column is removed,
        // renamed or changes its meaning.
        "schema": crate::schema::DATA,
        "study": a.study_id,
        "spec_hash": a.spec_hash,
        "tunectl_version": crate::ledger::records::VERSION,
        "rows": if samples { "sample" } else { "attempt" },
        "objective": a.objective,
        "metrics": a.metrics,
    });
    vec![("tunectl.data".to_string(), doc.to_string())]
}
