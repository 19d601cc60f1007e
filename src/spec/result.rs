//! The study's `result:` section: where each metric's samples are read
//! when the trial command does not write `$TUNECTL_RESULT` itself (a JSON
//! or CSV file it writes, its stdout or stderr, or a named preset for a
//! common benchmark tool). Parsed and checked here, at load time; the
//! reading itself is [`crate::transport::extract`].

use std::collections::BTreeMap;

use marked_yaml::Node;
use serde::Serialize;

use super::study::Metric;
use super::yaml::{Walker, join};

/// The `result:` section, resolved: a source for each metric it gives
/// (presets expanded).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultSpec {
    /// The preset named, if any (its sources are in `metrics`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Source per metric name: the objective and the declared metrics the
    /// section gives.
    pub metrics: BTreeMap<String, MetricSource>,
}

impl ResultSpec {
    /// The files of the trial directory that must come back to read them.
    pub fn files(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .metrics
            .values()
            .filter_map(|m| match &m.from {
                Source::Json { file, .. } | Source::Csv { file, .. } => Some(file.clone()),
                Source::Stdout { .. } | Source::Stderr { .. } => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The streams (`stdout`, `stderr`) that must come back whole.
    pub fn streams(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .metrics
            .values()
            .filter_map(|m| match &m.from {
                Source::Stdout { .. } => Some("stdout".to_string()),
                Source::Stderr { .. } => Some("stderr".to_string()),
                _ => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Where one metric is read, and the factor its samples are multiplied by.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricSource {
    #[serde(flatten)]
    pub from: Source,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "source", rename_all = "lowercase")]
pub enum Source {
    /// Numbers selected by `path` in a JSON file of the trial directory.
    Json {
        file: String,
        path: JsonPath,
    },
    /// Every row's value of a column of a CSV file (with a header row).
    Csv {
        file: String,
        column: String,
    },
    /// Capture group 1 of every match of a regular expression.
    Stdout {
        regex: String,
    },
    Stderr {
        regex: String,
    },
}

impl Source {
    /// How the source reads in a message: `stdout: 'tok/s: ([0-9.]+)'`,
    /// `out.json: results[0].times`, `out.csv: column 'ms'`.
    pub fn describe(&self) -> String {
        match self {
            Source::Json { file, path } => format!("{file}: {}", path.text),
            Source::Csv { file, column } => format!("{file}: column '{column}'"),
            Source::Stdout { regex } => format!("stdout: '{regex}'"),
            Source::Stderr { regex } => format!("stderr: '{regex}'"),
        }
    }
}

/// A path into a JSON document, as written and as steps. The syntax:
/// dotted keys (`a.b`), `[i]` for an array element (from 0, `[-1]` the
/// last), `[*]` for every element and `[?key==value]` for the elements (of
/// an array of objects) whose `key` equals the number or bare string
/// `value`. A path may start with a bracket (`[*].avg_ts`).
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    pub text: String,
    pub steps: Vec<Step>,
}

impl Serialize for JsonPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Key(String),
    Index(i64),
    All,
    /// Elements whose member `key` equals `value` (a JSON number compares
    /// as a number, anything else as its text).
    Filter {
        key: String,
        value: String,
    },
}

impl JsonPath {
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let mut steps = Vec::new();
        let mut rest = text;
        let mut first = true;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('[') {
                let end = after
                    .find(']')
                    .ok_or_else(|| format!("`[` without `]` in `{text}`"))?;
                steps.push(bracket(&after[..end], text)?);
                rest = &after[end + 1..];
            } else {
                let body = if first {
                    rest
                } else {
                    rest.strip_prefix('.').ok_or_else(|| {
                        format!("expected `.`, `[` or the end after a step in `{text}`")
                    })?
                };
                let end = body.find(['.', '[']).unwrap_or(body.len());
                let key = &body[..end];
                if key.is_empty() || key.contains(']') {
                    return Err(format!("an empty key or a stray `]` in `{text}`"));
                }
                steps.push(Step::Key(key.to_string()));
                rest = &body[end..];
            }
            first = false;
        }
        if steps.is_empty() {
            return Err("the path is empty".to_string());
        }
        Ok(JsonPath {
            text: text.to_string(),
            steps,
        })
    }
}

/// The step inside `[...]`.
fn bracket(inner: &str, text: &str) -> Result<Step, String> {
    if inner == "*" {
        return Ok(Step::All);
    }
    if let Some(cond) = inner.strip_prefix('?') {
        let (key, value) = cond
            .split_once("==")
            .ok_or_else(|| format!("`[?{cond}]` in `{text}` is not `[?key==value]`"))?;
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() || value.is_empty() {
            return Err(format!("`[?{cond}]` in `{text}` is not `[?key==value]`"));
        }
        return Ok(Step::Filter {
            key: key.to_string(),
            value: value.to_string(),
        });
    }
    inner
        .trim()
        .parse::<i64>()
        .map(Step::Index)
        .map_err(|_| format!("`[{inner}]` in `{text}` is not `[i]`, `[*]` or `[?key==value]`"))
}

/// A preset: the file it reads by default and its metrics.
pub struct Preset {
    pub name: &'static str,
    pub file: &'static str,
    /// Metric name and path into the file.
    pub metrics: &'static [(&'static str, &'static str)],
}

/// The presets. Field names are the tools' own (see docs/study.md for the
/// versions they come from).
pub const PRESETS: &[Preset] = &[
    // hyperfine `--export-json FILE`: `results` has one entry per command;
    // `times` holds every timed run, in seconds.
    Preset {
        name: "hyperfine",
        file: "hyperfine.json",
        metrics: &[
            ("time", "results[0].times"),
            ("mean", "results[0].mean"),
            ("median", "results[0].median"),
            ("min", "results[0].min"),
            ("max", "results[0].max"),
            ("user", "results[0].user"),
            ("system", "results[0].system"),
        ],
    },
    // `vllm bench serve --save-result --result-filename FILE`: one object of
    // summary numbers (throughputs per second, latencies in ms).
    Preset {
        name: "vllm-bench",
        file: "vllm-bench.json",
        metrics: &[
            ("request_throughput", "request_throughput"),
            ("output_throughput", "output_throughput"),
            ("total_token_throughput", "total_token_throughput"),
            ("mean_ttft_ms", "mean_ttft_ms"),
            ("median_ttft_ms", "median_ttft_ms"),
            ("p99_ttft_ms", "p99_ttft_ms"),
            ("mean_tpot_ms", "mean_tpot_ms"),
            ("median_tpot_ms", "median_tpot_ms"),
            ("p99_tpot_ms", "p99_tpot_ms"),
            ("mean_itl_ms", "mean_itl_ms"),
            ("median_itl_ms", "median_itl_ms"),
            ("p99_itl_ms", "p99_itl_ms"),
            ("mean_e2el_ms", "mean_e2el_ms"),
            ("median_e2el_ms", "median_e2el_ms"),
            ("p99_e2el_ms", "p99_e2el_ms"),
            ("duration", "duration"),
        ],
    },
    // `llama-bench -o json > FILE`: an array with one object per test; a
    // prompt-processing test has `n_gen` 0, a generation test `n_prompt` 0;
    // `samples_ts` holds each repetition's tokens per second.
    Preset {
        name: "llama-bench",
        file: "llama-bench.json",
        metrics: &[
            ("pp_ts", "[?n_gen==0].samples_ts"),
            ("tg_ts", "[?n_prompt==0].samples_ts"),
            ("samples_ts", "[*].samples_ts"),
            ("avg_ts", "[*].avg_ts"),
            ("samples_ns", "[*].samples_ns"),
            ("avg_ns", "[*].avg_ns"),
        ],
    },
    // pytest `--benchmark-json FILE`: `benchmarks` has one entry per
    // benchmark; `stats.data` (every round, seconds) only with
    // `--benchmark-save-data`.
    Preset {
        name: "pytest-benchmark",
        file: "pytest-benchmark.json",
        metrics: &[
            ("data", "benchmarks[*].stats.data"),
            ("min", "benchmarks[*].stats.min"),
            ("max", "benchmarks[*].stats.max"),
            ("mean", "benchmarks[*].stats.mean"),
            ("median", "benchmarks[*].stats.median"),
            ("ops", "benchmarks[*].stats.ops"),
        ],
    },
];

impl Preset {
    /// The sources of those of `names` the preset provides, read from
    /// `file`.
    pub fn sources(&self, file: &str, names: &[&str]) -> BTreeMap<String, MetricSource> {
        let mut out = BTreeMap::new();
        for (metric, path) in self.metrics {
            // The presets' paths are constants, parsed in a test.
            let (true, Ok(path)) = (names.contains(metric), JsonPath::parse(path)) else {
                continue;
            };
            let from = Source::Json {
                file: file.to_string(),
                path,
            };
            out.insert(metric.to_string(), MetricSource { from, scale: None });
        }
        out
    }
}

pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// Keys of a metric's source.
const SOURCE_KEYS: &[&str] = &["file", "path", "column", "stdout", "stderr", "scale"];

/// Keys of `result:` that are not metric names.
const RESERVED: &[&str] = &["preset", "file"];

/// Parse `result:`. `metrics` are the declared ones (the objective first).
pub fn parse_result(w: &mut Walker, node: &Node, metrics: &[&Metric]) -> Option<ResultSpec> {
    let map = w.mapping(node, "result")?;
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    let objective = names.first().copied();
    let mut ok = true;
    let mut out = BTreeMap::new();
    let preset_node = map.get_node("preset");
    let preset_def = match preset_node {
        Some(n) => {
            let name = w.string(n, "result.preset")?;
            match preset(&name) {
                Some(p) => Some((p, n)),
                None => {
                    let known: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
                    w.error_at(
                        n,
                        "result.preset",
                        format!("unknown preset `{name}` (known: {})", known.join(", ")),
                    );
                    return None;
                }
            }
        }
        None => None,
    };
    if let Some((p, _)) = preset_def {
        let file = match map.get_node("file") {
            Some(n) => file_name(w, n, "result.file")?,
            None => p.file.to_string(),
        };
        out = p.sources(&file, &names);
    } else if let Some(n) = map.get_node("file") {
        w.error_at(
            n,
            "result.file",
            "`file` names a preset's file; without `preset`, give each metric its own `file`",
        );
        ok = false;
    }
    for (key, value) in map.iter() {
        let name = key.as_str();
        if RESERVED.contains(&name) {
            continue;
        }
        let field = join("result", name);
        if !names.contains(&name) {
            w.error(
                key.span(),
                &field,
                format!(
                    "`{name}` is neither the objective's metric nor declared under `metrics:` (declared: {}); `result:` gives sources to those, or `preset`/`file`",
                    names.join(", ")
                ),
            );
            ok = false;
            continue;
        }
        match parse_source(w, value, &field) {
            Some(s) => {
                out.insert(name.to_string(), s);
            }
            None => ok = false,
        }
    }
    if !ok {
        return None;
    }
    if let Some(objective) = objective
        && !out.contains_key(objective)
    {
        let span = map.keys().next().map(|k| k.span()).unwrap_or(map.span());
        let message = match preset_def {
            Some((p, n)) => {
                let provided: Vec<&str> = p.metrics.iter().map(|(m, _)| *m).collect();
                w.error_at(
                    n,
                    "result.preset",
                    format!(
                        "the objective's metric `{objective}` is not one the preset `{}` provides ({}); name the objective after one of them, or give `{objective}` its own source",
                        p.name,
                        provided.join(", ")
                    ),
                );
                return None;
            }
            None => format!(
                "no source for the objective's metric `{objective}`: with a `result:` section, the objective is read from it"
            ),
        };
        w.error(span, "result", message);
        return None;
    }
    Some(ResultSpec {
        preset: preset_def.map(|(p, _)| p.name.to_string()),
        metrics: out,
    })
}

/// A file named by `result:`: relative, inside the trial directory.
fn file_name(w: &mut Walker, node: &Node, field: &str) -> Option<String> {
    let file = w.string(node, field)?;
    let p = std::path::Path::new(&file);
    let inside = !file.is_empty()
        && !p.is_absolute()
        && !p
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    if !inside {
        w.error_at(
            node,
            field,
            format!("`{file}` must be a relative path inside the trial directory"),
        );
        return None;
    }
    Some(file)
}

/// One metric's source: `{file, path}`, `{file, column}`, `{stdout}` or
/// `{stderr}`, each with an optional `scale`.
fn parse_source(w: &mut Walker, node: &Node, field: &str) -> Option<MetricSource> {
    let map = w.mapping(node, field)?;
    let before = w.diags.len();
    w.check_keys(map, field, SOURCE_KEYS);
    if w.diags.len() > before {
        // A misspelt key (`colum`) is the one mistake: no follow-on
        // "give exactly one of" for the key it meant.
        return None;
    }
    let present: Vec<&str> = ["path", "column", "stdout", "stderr"]
        .into_iter()
        .filter(|k| map.get_node(k).is_some())
        .collect();
    let span = map.keys().next().map(|k| k.span()).unwrap_or(map.span());
    if present.len() != 1 {
        w.error(
            span,
            field,
            format!(
                "give exactly one of `path` (with `file`, a JSON file), `column` (with `file`, a CSV file), `stdout` or `stderr`{}",
                if present.is_empty() {
                    String::new()
                } else {
                    format!(" (found: {})", present.join(", "))
                }
            ),
        );
        return None;
    }
    let kind = present[0];
    let scale = match map.get_node("scale") {
        Some(n) => {
            let f = join(field, "scale");
            let v = w.float(n, &f)?;
            if !(v.is_normal() && v > 0.0) {
                w.error_at(n, &f, format!("must be a positive number, found {v}"));
                return None;
            }
            Some(v)
        }
        None => None,
    };
    let file = match (kind, map.get_node("file")) {
        ("path" | "column", Some(n)) => Some(file_name(w, n, &join(field, "file"))?),
        ("path" | "column", None) => {
            w.error(
                span,
                &join(field, "file"),
                format!("`{kind}` reads a file: name it with `file`"),
            );
            return None;
        }
        (_, Some(n)) => {
            w.error_at(
                n,
                &join(field, "file"),
                format!("`{kind}` reads the trial's {kind}, not a file: drop `file`"),
            );
            return None;
        }
        (_, None) => None,
    };
    let value_node = map.get_node(kind)?;
    let value_field = join(field, kind);
    let value = w.string(value_node, &value_field)?;
    let from = match kind {
        "path" => match JsonPath::parse(&value) {
            Ok(path) => Source::Json {
                file: file.unwrap_or_default(),
                path,
            },
            Err(e) => {
                w.error_at(value_node, &value_field, e);
                return None;
            }
        },
        "column" => Source::Csv {
            file: file.unwrap_or_default(),
            column: value,
        },
        _ => {
            check_regex(w, value_node, &value_field, &value)?;
            if kind == "stdout" {
                Source::Stdout { regex: value }
            } else {
                Source::Stderr { regex: value }
            }
        }
    };
    Some(MetricSource { from, scale })
}

/// A regular expression with exactly one capture group.
fn check_regex(w: &mut Walker, node: &Node, field: &str, text: &str) -> Option<()> {
    match regex::Regex::new(text) {
        Err(e) => {
            w.error_at(node, field, format!("invalid regular expression: {e}"));
            None
        }
        // captures_len counts the whole match as group 0.
        Ok(re) if re.captures_len() != 2 => {
            w.error_at(
                node,
                field,
                format!(
                    "the regular expression must have exactly one capture group (the number), found {}",
                    re.captures_len() - 1
                ),
            );
            None
        }
        Ok(_) => Some(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse() {
        let p = JsonPath::parse("results[0].times").expect("path");
        assert_eq!(
            p.steps,
            vec![
                Step::Key("results".into()),
                Step::Index(0),
                Step::Key("times".into())
            ]
        );
        let p = JsonPath::parse("[?n_gen==0].samples_ts").expect("path");
        assert_eq!(
            p.steps,
            vec![
                Step::Filter {
                    key: "n_gen".into(),
                    value: "0".into()
                },
                Step::Key("samples_ts".into())
            ]
        );
        let p = JsonPath::parse("a[*][-1].b").expect("path");
        assert_eq!(p.steps.len(), 4);
        for bad in ["", "a..b", "a[", "a[x]", "a[?b]", "a]b", ".a", "a[0]b"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_preset_path_parses() {
        for p in PRESETS {
            for (m, path) in p.metrics {
                assert!(JsonPath::parse(path).is_ok(), "{}.{m}", p.name);
            }
        }
    }
}
