//! Reading metrics where the study's `result:` says they are: in a JSON or
//! CSV file the trial wrote, or in its stdout or stderr. Pure: the
//! transports bring the bytes back ([`super::AttemptOutcome::result_files`],
//! [`super::AttemptOutcome::streams`]); this turns them into samples, or
//! into the reason (naming the metric, its source and the pattern) that
//! fails the attempt as `no_result`.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use crate::spec::result::{JsonPath, MetricSource, ResultSpec, Source, Step};

/// Bytes brought back per file or stream name, or why they were not.
pub type Fetched = BTreeMap<String, Result<Vec<u8>, String>>;

/// The samples of every metric `spec` gives a source, or the first metric
/// that cannot be read and why: ``result.throughput: stdout: no match for
/// 'tok/s: ([0-9.]+)'``.
pub fn extract(
    spec: &ResultSpec,
    files: &Fetched,
    streams: &Fetched,
) -> Result<BTreeMap<String, Vec<f64>>, String> {
    let mut out = BTreeMap::new();
    for (name, source) in &spec.metrics {
        let samples =
            read_metric(source, files, streams).map_err(|why| format!("result.{name}: {why}"))?;
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
) -> Result<Vec<f64>, String> {
    let raw = match &source.from {
        Source::Json { file, path } => {
            let bytes = fetched(files, file).map_err(|e| format!("{file} {e}"))?;
            json_samples(bytes, path).map_err(|e| format!("{file}: {e}"))?
        }
        Source::Csv { file, column } => {
            let bytes = fetched(files, file).map_err(|e| format!("{file} {e}"))?;
            csv_samples(bytes, column).map_err(|e| format!("{file}: {e}"))?
        }
        Source::Stdout { regex } => stream_samples(streams, "stdout", regex)?,
        Source::Stderr { regex } => stream_samples(streams, "stderr", regex)?,
    };
    let scale = source.scale.unwrap_or(1.0);
    let samples: Vec<f64> = raw.into_iter().map(|x| x * scale).collect();
    check_samples(&samples).map_err(|e| format!("{}: {e}", source.from.describe()))?;
    Ok(samples)
}

fn fetched<'a>(map: &'a Fetched, name: &str) -> Result<&'a [u8], String> {
    match map.get(name) {
        Some(Ok(b)) => Ok(b),
        Some(Err(why)) => Err(why.clone()),
        None => Err("was not brought back".to_string()),
    }
}

/// Samples must be positive normal numbers, as the objective's always
/// are: speedups are ratios of them.
fn check_samples(samples: &[f64]) -> Result<(), String> {
    match super::attempt::first_unusable(samples) {
        Some(x) => Err(format!("sample {x} is not a positive normal number")),
        None => Ok(()),
    }
}

/// Capture group 1 of every match of `regex` in the stream.
fn stream_samples(streams: &Fetched, stream: &str, regex: &str) -> Result<Vec<f64>, String> {
    let bytes = fetched(streams, stream).map_err(|e| format!("{stream} {e}"))?;
    // Checked when the study was loaded; checked again, never unwrapped.
    let re = regex::Regex::new(regex).map_err(|e| format!("{stream}: invalid regex: {e}"))?;
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::new();
    for caps in re.captures_iter(&text) {
        let Some(m) = caps.get(1) else { continue };
        let x = number(m.as_str()).ok_or_else(|| {
            format!(
                "{stream}: '{}' matched by '{regex}' is not a number",
                m.as_str()
            )
        })?;
        out.push(x);
    }
    if out.is_empty() {
        return Err(format!("{stream}: no match for '{regex}'"));
    }
    Ok(out)
}

/// A number as text (surrounding blanks allowed).
fn number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok()
}

/// Every row's value in the column named `column` (by its header).
fn csv_samples(bytes: &[u8], column: &str) -> Result<Vec<f64>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let headers = reader
        .headers()
        .map_err(|e| format!("not a CSV file: {e}"))?
        .clone();
    let index = headers.iter().position(|h| h == column).ok_or_else(|| {
        let names: Vec<&str> = headers.iter().collect();
        format!("no column '{column}' (columns: {})", names.join(", "))
    })?;
    let mut out = Vec::new();
    for (row, record) in reader.records().enumerate() {
        let record = record.map_err(|e| format!("not a CSV file: {e}"))?;
        let cell = record.get(index).unwrap_or("");
        let x = number(cell).ok_or_else(|| {
            format!(
                "column '{column}', row {}: '{cell}' is not a number",
                row + 1
            )
        })?;
        out.push(x);
    }
    if out.is_empty() {
        return Err(format!("column '{column}' has no rows"));
    }
    Ok(out)
}

/// The numbers `path` selects: each selected number is a sample, each
/// selected array's numbers too (nested arrays flattened).
fn json_samples(bytes: &[u8], path: &JsonPath) -> Result<Vec<f64>, String> {
    let doc: Json = serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
    let nodes = select(&doc, path).map_err(|e| format!("{}: {e}", path.text))?;
    let mut out = Vec::new();
    for (at, node) in &nodes {
        numbers(node, at, &mut out).map_err(|e| format!("{}: {e}", path.text))?;
    }
    if out.is_empty() {
        return Err(format!("{}: selects no numbers", path.text));
    }
    Ok(out)
}

/// The nodes `path` selects, each with where it is (`results[0].times`).
fn select<'a>(doc: &'a Json, path: &JsonPath) -> Result<Vec<(String, &'a Json)>, String> {
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
) -> Result<(), String> {
    let here = if at.is_empty() { "the document" } else { at };
    match step {
        Step::Key(key) => {
            let obj = node
                .as_object()
                .ok_or_else(|| format!("{here} is {}, not an object", kind(node)))?;
            let child = obj.get(key).ok_or_else(|| {
                let keys: Vec<&str> = obj.keys().map(String::as_str).take(20).collect();
                format!("{here} has no key '{key}' (keys: {})", keys.join(", "))
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
                return Err(format!("{here} has {n} elements, no [{i}]"));
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

fn array<'a>(node: &'a Json, here: &str) -> Result<&'a Vec<Json>, String> {
    node.as_array()
        .ok_or_else(|| format!("{here} is {}, not an array", kind(node)))
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
fn numbers(node: &Json, at: &str, out: &mut Vec<f64>) -> Result<(), String> {
    match node {
        Json::Number(n) => {
            out.push(
                n.as_f64()
                    .ok_or_else(|| format!("{at}: {n} is not a number"))?,
            );
            Ok(())
        }
        Json::Array(items) => {
            for (k, item) in items.iter().enumerate() {
                numbers(item, &format!("{at}[{k}]"), out)?;
            }
            Ok(())
        }
        other => Err(format!("{at} is {}, not a number", kind(other))),
    }
}

#[cfg(test)]
mod tests;
