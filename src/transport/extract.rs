//! Reading metrics where the study's `result:` says they are: in a JSON or
//! CSV file the trial wrote, or in its stdout or stderr. Pure: the
//! transports bring the bytes back ([`super::AttemptOutcome::result_files`],
//! [`super::AttemptOutcome::streams`]); this turns them into samples, or
//! into the reason (naming the metric, its source and the pattern) that
//! fails the attempt as `no_result`.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::error::{ExtractError, FileError, PathError, SourceError};
use crate::spec::result::{JsonPath, MetricSource, ResultSpec, Source, Step};

/// Bytes brought back per file or stream name, or why they were not.
pub type Fetched = BTreeMap<String, Result<Vec<u8>, FileError>>;

/// The samples of every metric `spec` gives a source, or the first metric
/// that cannot be read and why: ``result.throughput: stdout: no match for
/// 'tok/s: ([0-9.]+)'``.
pub fn extract(
    spec: &ResultSpec,
    files: &Fetched,
    streams: &Fetched,
) -> Result<BTreeMap<String, Vec<f64>>, ExtractError> {
    let mut out = BTreeMap::new();
    for (name, source) in &spec.metrics {
        let samples = read_metric(source, files, streams).map_err(|why| ExtractError {
            metric: name.clone(),
            why: Box::new(why),
        })?;
        out.insert(name.clone(), samples);
    }
    Ok(out)
}

/// One metric's samples, scaled and checked, or why not (naming the
/// source).
fn read_metric(
    source: &MetricSource,
    files: &Fetched,
    streams: &Fetched,
) -> Result<Vec<f64>, SourceError> {
    let raw = match &source.from {
        Source::Json { file, path } => json_samples(fetched(files, file)?, file, path)?,
        Source::Csv { file, column } => csv_samples(fetched(files, file)?, file, column)?,
        Source::Stdout { regex } => stream_samples(streams, "stdout", regex)?,
        Source::Stderr { regex } => stream_samples(streams, "stderr", regex)?,
    };
    let scale = source.scale.unwrap_or(1.0);
    let samples: Vec<f64> = raw.into_iter().map(|x| x * scale).collect();
    match super::attempt::first_unusable(&samples) {
        Some(x) => Err(SourceError::Sample {
            described: source.from.describe(),
            sample: *x,
        }),
        None => Ok(samples),
    }
}

/// The bytes brought back under `name`, or why there are none.
fn fetched<'a>(map: &'a Fetched, name: &str) -> Result<&'a [u8], SourceError> {
    match map.get(name) {
        Some(Ok(b)) => Ok(b),
        Some(Err(why)) => Err(SourceError::NotRead {
            name: name.to_string(),
            why: why.clone(),
        }),
        None => Err(SourceError::NotRead {
            name: name.to_string(),
            why: FileError::NotBroughtBack,
        }),
    }
}

/// Capture group 1 of every match of `regex` in the stream.
fn stream_samples(streams: &Fetched, stream: &str, regex: &str) -> Result<Vec<f64>, SourceError> {
    let bytes = fetched(streams, stream)?;
    // Checked when the study was loaded; checked again, never unwrapped.
    let re = regex::Regex::new(regex).map_err(|e| SourceError::Regex {
        stream: stream.to_string(),
        detail: e.to_string(),
    })?;
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::new();
    for caps in re.captures_iter(&text) {
        let Some(m) = caps.get(1) else { continue };
        let x = number(m.as_str()).ok_or_else(|| SourceError::MatchNotNumber {
            stream: stream.to_string(),
            text: m.as_str().to_string(),
            regex: regex.to_string(),
        })?;
        out.push(x);
    }
    if out.is_empty() {
        return Err(SourceError::NoMatch {
            stream: stream.to_string(),
            regex: regex.to_string(),
        });
    }
    Ok(out)
}

/// A number as text (surrounding blanks allowed).
fn number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok()
}

/// Every row's value in the column named `column` (by its header) of the
/// CSV file `file`.
fn csv_samples(bytes: &[u8], file: &str, column: &str) -> Result<Vec<f64>, SourceError> {
    let not_csv = |e: csv::Error| SourceError::NotCsv {
        file: file.to_string(),
        detail: e.to_string(),
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let headers = reader.headers().map_err(not_csv)?.clone();
    let index = headers
        .iter()
        .position(|h| h == column)
        .ok_or_else(|| SourceError::NoColumn {
            file: file.to_string(),
            column: column.to_string(),
            columns: headers.iter().map(str::to_string).collect(),
        })?;
    let mut out = Vec::new();
    for (row, record) in reader.records().enumerate() {
        let record = record.map_err(not_csv)?;
        let cell = record.get(index).unwrap_or("");
        let x = number(cell).ok_or_else(|| SourceError::CellNotNumber {
            file: file.to_string(),
            column: column.to_string(),
            row: row + 1,
            cell: cell.to_string(),
        })?;
        out.push(x);
    }
    if out.is_empty() {
        return Err(SourceError::NoRows {
            file: file.to_string(),
            column: column.to_string(),
        });
    }
    Ok(out)
}

/// The numbers `path` selects in the JSON file `file`: each selected
/// number is a sample, each selected array's numbers too (nested arrays
/// flattened).
fn json_samples(bytes: &[u8], file: &str, path: &JsonPath) -> Result<Vec<f64>, SourceError> {
    let doc: Json = serde_json::from_slice(bytes).map_err(|e| SourceError::NotJson {
        file: file.to_string(),
        detail: e.to_string(),
    })?;
    let on_path = |why: PathError| SourceError::Path {
        file: file.to_string(),
        path: path.text.clone(),
        why,
    };
    let nodes = select(&doc, path).map_err(on_path)?;
    let mut out = Vec::new();
    for (at, node) in &nodes {
        numbers(node, at, &mut out).map_err(on_path)?;
    }
    if out.is_empty() {
        return Err(SourceError::NoNumbers {
            file: file.to_string(),
            path: path.text.clone(),
        });
    }
    Ok(out)
}

/// The nodes `path` selects, each with where it is (`results[0].times`).
fn select<'a>(doc: &'a Json, path: &JsonPath) -> Result<Vec<(String, &'a Json)>, PathError> {
    let mut current: Vec<(String, &Json)> = vec![(String::new(), doc)];
    for step in &path.steps {
        let mut next = Vec::new();
        for (at, node) in current {
            step_into(step, &at, node, &mut next)?;
        }
        current = next;
    }
    Ok(current)
}

/// Apply one step to one node; a key or index that is not there is an
/// error naming where.
fn step_into<'a>(
    step: &Step,
    at: &str,
    node: &'a Json,
    next: &mut Vec<(String, &'a Json)>,
) -> Result<(), PathError> {
    let here = if at.is_empty() { "the document" } else { at };
    match step {
        Step::Key(key) => {
            let obj = node.as_object().ok_or_else(|| PathError::NotObject {
                at: here.to_string(),
                kind: kind(node),
            })?;
            let child = obj.get(key).ok_or_else(|| PathError::NoKey {
                at: here.to_string(),
                key: key.clone(),
                keys: obj.keys().take(20).cloned().collect(),
            })?;
            let at = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            next.push((at, child));
        }
        Step::Index(i) => {
            let items = array(node, here)?;
            let n = items.len() as i64;
            let k = if *i < 0 { n + i } else { *i };
            if !(0..n).contains(&k) {
                return Err(PathError::NoIndex {
                    at: here.to_string(),
                    len: n,
                    index: *i,
                });
            }
            next.push((format!("{at}[{k}]"), &items[k as usize]));
        }
        Step::All => {
            for (k, item) in array(node, here)?.iter().enumerate() {
                next.push((format!("{at}[{k}]"), item));
            }
        }
        Step::Filter { key, value } => {
            for (k, item) in array(node, here)?.iter().enumerate() {
                if item.get(key).is_some_and(|v| equals(v, value)) {
                    next.push((format!("{at}[{k}]"), item));
                }
            }
        }
    }
    Ok(())
}

fn array<'a>(node: &'a Json, here: &str) -> Result<&'a Vec<Json>, PathError> {
    node.as_array().ok_or_else(|| PathError::NotArray {
        at: here.to_string(),
        kind: kind(node),
    })
}

/// Whether a JSON value equals a filter's text: a number as a number, a
/// string as itself (quotes optional), `true`, `false` and `null` as
/// written; arrays and objects never.
fn equals(v: &Json, text: &str) -> bool {
    match v {
        Json::Number(n) => n.as_f64().zip(number(text)).is_some_and(|(a, b)| a == b),
        Json::String(s) => s == text.trim_matches(['\'', '"']),
        Json::Bool(b) => text == if *b { "true" } else { "false" },
        Json::Null => text == "null",
        Json::Array(_) | Json::Object(_) => false,
    }
}

fn kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// Append the numbers of `node` (a number, or an array of them).
fn numbers(node: &Json, at: &str, out: &mut Vec<f64>) -> Result<(), PathError> {
    match node {
        Json::Number(n) => {
            out.push(n.as_f64().ok_or_else(|| PathError::NotF64 {
                at: at.to_string(),
                number: n.to_string(),
            })?);
            Ok(())
        }
        Json::Array(items) => {
            for (k, item) in items.iter().enumerate() {
                numbers(item, &format!("{at}[{k}]"), out)?;
            }
            Ok(())
        }
        other => Err(PathError::NotNumber {
            at: at.to_string(),
            kind: kind(other),
        }),
    }
}

#[cfg(test)]
mod tests;
