//! Tuned files: the per-host-class result of a study, as `tunectl export`
//! writes it and `tunectl apply` reads it (format: docs/tuned.md).
//!
//! A tuned file holds, for one host class, the config that ships in every
//! bucket of cells, with its evidence. It applies only on a host whose
//! fingerprint has the same class; anywhere else `apply` falls back to the
//! study's defaults (the baseline), never to a tune measured on other
//! hardware.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use marked_yaml::Node;
use serde::Deserialize;
use serde_json::{Map, Value as Json};

use crate::decide::{Analysis, BucketReport, ClassReport, ConfigReport};
use crate::fingerprint::{ClassKey, Fingerprint};
use crate::plan::buckets;
use crate::spec::{TrialVars, Value};
use crate::yaml_out::{self, Yaml};

/// Layout version of a tuned file.
pub const SCHEMA: u32 = 1;

/// A bucket's level in a tuned file: the report's level, or `pending`
/// when nothing decided it yet (what `apply` ships there is the baseline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TunedLevel {
    Verdict,
    Draft,
    Pending,
}

impl TunedLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            TunedLevel::Verdict => "verdict",
            TunedLevel::Draft => "draft",
            TunedLevel::Pending => "pending",
        }
    }
}

impl From<crate::decide::Level> for TunedLevel {
    fn from(l: crate::decide::Level) -> TunedLevel {
        match l {
            crate::decide::Level::Verdict => TunedLevel::Verdict,
            crate::decide::Level::Draft => TunedLevel::Draft,
        }
    }
}

impl std::fmt::Display for TunedLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------- export

/// Lowercase `[a-z0-9-]` words of `s`, joined by single dashes.
fn slugify(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// The first words of a CPU model that tell it apart: no trademarks,
/// clock speed or filler (`Intel(R) Xeon(R) Platinum 8480+ @ 2.0GHz` →
/// `intel-xeon-platinum-8480`).
fn cpu_words(model: &str) -> String {
    let model = model.split('@').next().unwrap_or(model);
    let slug = slugify(model);
    let mut words: Vec<&str> = Vec::new();
    for w in slug.split('-') {
        match w {
            "r" | "tm" | "processor" | "cpu" | "with" | "graphics" | "radeon" | "" => {}
            // `64-Core`: the core count is not part of the model's name.
            "core" => {
                if words
                    .last()
                    .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
                {
                    words.pop();
                }
            }
            w => words.push(w),
        }
    }
    words.truncate(4);
    words.join("-")
}

/// A readable, unique file stem for a host class: what the class is, then
/// its id, e.g. `2x-nvidia-h100-80gb-hbm3-drv550-hc-0123456789ab` or
/// `no-gpu-amd-epyc-7b13-2cpu-hc-68fa00c4deaa`.
pub fn slug(host_class: &str, fingerprint: Option<&Fingerprint>) -> String {
    let mut parts: Vec<String> = Vec::new();
    match fingerprint {
        None => parts.push("unknown".to_string()),
        Some(fp) => {
            let key = fp.class_key();
            if key.gpus.is_empty() && !key.unknown_accelerators.is_empty() {
                // Never `no-gpu`: the host has a device no tool described.
                for id in &key.unknown_accelerators {
                    parts.push(format!("unknown-accel-{}", id.replace(':', "-")));
                }
            } else if key.gpus.is_empty() {
                parts.push("no-gpu".to_string());
                if let Some(model) = &key.cpu_model {
                    parts.push(cpu_words(model));
                }
                if let Some(n) = fp.cpu_count {
                    parts.push(format!("{n}cpu"));
                }
            } else {
                let mut groups: Vec<(&str, usize)> = Vec::new();
                for (name, _) in &key.gpus {
                    match groups.last_mut() {
                        Some((last, n)) if *last == name.as_str() => *n += 1,
                        _ => groups.push((name, 1)),
                    }
                }
                for (name, n) in groups {
                    parts.push(format!("{n}x-{}", slugify(name)));
                }
                if let Some(major) = &key.driver_major {
                    parts.push(format!("drv{major}"));
                }
            }
        }
    }
    let mut prefix = slugify(&parts.join("-"));
    // Keep names manageable; the class id makes them unique anyway.
    if prefix.len() > 60 {
        prefix.truncate(60);
        if let Some(cut) = prefix.rfind('-') {
            prefix.truncate(cut);
        }
    }
    let id = slugify(host_class);
    if prefix.is_empty() {
        id
    } else {
        format!("{prefix}-{id}")
    }
}

/// Whether a bucket has no decision to ship yet: no cell of the bucket
/// has a baseline that was measured (or that failed, which settles it).
pub fn is_pending(b: &BucketReport) -> bool {
    b.per_cell.iter().all(|c| {
        c.baseline
            .as_ref()
            .is_none_or(|r| r.summary.is_none() && r.rejection.is_none())
    })
}

fn measured(r: &ConfigReport, unit: &str) -> Yaml {
    let s = r.summary;
    Yaml::map()
        .with("config", &r.label)
        .with("median", s.map(|s| s.median))
        .with(
            "spread",
            s.filter(|_| r.relative_spread.is_some()).map(|s| s.spread),
        )
        .with("relative_spread", r.relative_spread)
        .with("n", s.map(|s| s.n))
        .with("unit", unit)
        .with("trials", r.trials)
        .with("speedup", r.speedup)
}

fn bucket_yaml(analysis: &Analysis, b: &BucketReport) -> Yaml {
    let pending = is_pending(b);
    let unit = analysis.objective.unit.as_str();
    let (knobs, winner) = if pending {
        (Yaml::from(&analysis.baseline), None)
    } else {
        (Yaml::from(&b.config), b.winner.as_ref())
    };
    let cells: Vec<Yaml> = b
        .per_cell
        .iter()
        .map(|c| {
            Yaml::map()
                .with("cell", &c.cell_label)
                .with("baseline", c.baseline.as_ref().map(|r| measured(r, unit)))
                .with(
                    "winner",
                    c.winner
                        .as_ref()
                        .filter(|_| !pending)
                        .map(|r| measured(r, unit)),
                )
        })
        .collect();
    let rejected: Vec<Yaml> = b
        .rejected
        .iter()
        .map(|r| {
            let rej = r.rejection.as_ref();
            Yaml::map()
                .with("config", &r.label)
                .with("class", rej.map(|x| x.class.as_str()))
                .with("detail", rej.map(|x| x.detail.as_str()))
        })
        .collect();
    let refusals: Vec<Yaml> = b
        .refusals
        .iter()
        .map(|r| {
            Yaml::map()
                .with("config", &r.config_label)
                .with("cell", &r.cell_label)
                .with("speedup", r.speedup)
                .with("reason", r.reason.to_string())
        })
        .collect();
    let confirmation = winner.and_then(|w| w.confirmation.as_ref()).map(|c| {
        Yaml::map()
            .with("speedup", c.speedup)
            .with("threshold", c.threshold)
            .with("confirmed", c.confirmed)
    });
    let mut y = Yaml::map()
        .with("key", &b.key)
        .with("label", &b.label)
        .with("bounds", &b.bounds)
        .with("knobs", knobs)
        .with("winner", winner.map(|w| w.label.as_str()))
        .with(
            "level",
            if pending {
                TunedLevel::Pending
            } else {
                TunedLevel::from(b.level)
            }
            .as_str(),
        )
        .with("level_reason", b.level_reason.to_string())
        .with("decision", b.decision.to_string())
        .with("speedup", winner.map(|w| w.speedup))
        .with("min_cell_speedup", winner.map(|w| w.min_cell_speedup))
        .with("threshold", b.threshold);
    if let Some(c) = confirmation {
        y.insert("confirmation", c);
    }
    y.with("cells", cells)
        .with("rejected", rejected)
        .with("refusals", refusals)
}

/// The tuned file for one host class of an analysis: the file name (no
/// directory) and its text.
pub fn export(analysis: &Analysis, class: &ClassReport) -> (String, String) {
    let fp = class.fingerprint.as_ref();
    let key = fp.map(Fingerprint::class_key);
    let mut fingerprint = Yaml::map()
        .with(
            "gpus",
            key.as_ref()
                .map(|k| {
                    k.gpus
                        .iter()
                        .map(|(name, mem)| Yaml::map().with("name", name).with("memory_mib", *mem))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
        .with("gpu_count", key.as_ref().map(|k| k.gpu_count))
        .with(
            "driver_major",
            key.as_ref().and_then(|k| k.driver_major.clone()),
        )
        .with("cpu_model", key.as_ref().and_then(|k| k.cpu_model.clone()));
    // Only where the class key has them, as in the key itself: tuned files
    // of NVIDIA and GPU-less classes read as they always did.
    if let Some(name) = key.as_ref().and_then(|k| k.driver_name.clone()) {
        fingerprint.insert("driver_name", name);
    }
    if let Some(k) = key.as_ref().filter(|k| !k.unknown_accelerators.is_empty()) {
        let ids: Vec<Yaml> = k.unknown_accelerators.iter().map(Yaml::from).collect();
        fingerprint.insert("unknown_accelerators", Yaml::List(ids));
    }
    fingerprint.insert("fingerprint_hash", fp.map(Fingerprint::hash));
    let body = Yaml::map()
        .with("schema", SCHEMA)
        .with("tunectl_version", &analysis.tunectl_version)
        .with("study", &analysis.study_id)
        .with("spec_hash", &analysis.spec_hash)
        .with("host_class", &class.host_class)
        .with("class_label", &class.label);
    // Only for a study that chose its class key: files of other studies
    // read as they always did.
    let body = match &analysis.class_key {
        Some(fields) => body.with(
            "class_key",
            Yaml::map().with("fields", fields.clone()).with(
                "tools",
                Yaml::Map(
                    analysis
                        .class_tools
                        .iter()
                        .map(|(k, v)| (k.clone(), Yaml::from(v)))
                        .collect(),
                ),
            ),
        ),
        None => body,
    };
    let body = body
        .with("hosts", class.hosts.clone())
        .with("fingerprint", fingerprint)
        .with(
            "objective",
            Yaml::map()
                .with("name", &analysis.objective.name)
                .with("unit", &analysis.objective.unit)
                .with("better", analysis.objective.better.name()),
        )
        .with("statistic", &analysis.statistic)
        .with(
            "context",
            Yaml::Map(
                analysis
                    .context
                    .iter()
                    .map(|(k, v)| (k.clone(), Yaml::from(v)))
                    .collect(),
            ),
        )
        .with("baseline", &analysis.baseline)
        .with(
            "judging",
            serde_json::to_value(&analysis.judging).unwrap_or_default(),
        )
        .with(
            "domains",
            Yaml::Map(
                analysis
                    .domains
                    .iter()
                    .map(|(k, d)| (k.clone(), Yaml::from(compact_domain(d))))
                    .collect(),
            ),
        )
        .with(
            "buckets",
            class
                .buckets
                .iter()
                .map(|b| bucket_yaml(analysis, b))
                .collect::<Vec<_>>(),
        );
    let header = format!(
        "tunectl tuned configuration: the knob settings that ship, per bucket of cells,\n\
         for study `{}` (spec {}) on host class {} ({}).\n\
         It applies ONLY on a host whose fingerprint matches that class: `tunectl apply`\n\
         checks, and on any other host uses the study's defaults (`baseline`).\n\
         Written by tunectl {} (`tunectl export`); re-export rather than edit.",
        analysis.study_id,
        short(&analysis.spec_hash),
        class.host_class,
        class.label,
        analysis.tunectl_version,
    );
    (
        format!("{}.yaml", slug(&class.host_class, fp)),
        yaml_out::document(&header, &body),
    )
}

/// Integer domains longer than this that are evenly spaced are written as
/// `min`, `max`, `step`.
const LIST_INTS: usize = 16;
/// Float domains longer than this are written as their range.
const LIST_FLOATS: usize = 1000;

/// A knob's domain as the tuned file writes it: `{kind, values}`, an even
/// integer range as `{kind, min, max, step}`, a long float grid as
/// `{kind, min, max}` (then `apply` checks the range only).
fn compact_domain(d: &Json) -> Json {
    let kind = d["kind"].clone();
    let values = d["values"].as_array().cloned().unwrap_or_default();
    if kind == "int" && values.len() > LIST_INTS {
        let ints: Vec<i64> = values.iter().filter_map(Json::as_i64).collect();
        if ints.len() == values.len() {
            let step = ints[1] - ints[0];
            if step >= 1 && ints.windows(2).all(|w| w[1] - w[0] == step) {
                return serde_json::json!({"kind": kind, "min": ints[0], "max": ints[ints.len() - 1], "step": step});
            }
        }
    }
    if kind == "float" && values.len() > LIST_FLOATS {
        let xs: Vec<f64> = values.iter().filter_map(Json::as_f64).collect();
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        return serde_json::json!({"kind": kind, "min": min, "max": max});
    }
    serde_json::json!({"kind": kind, "values": values})
}

fn short(s: &str) -> &str {
    &s[..s.len().min(12)]
}

// ---------------------------------------------------------------- read

/// A YAML node as JSON (scalars typed as study files are: YAML 1.2 core
/// schema for plain scalars, quoted scalars are strings).
pub fn node_to_json(node: &Node) -> Json {
    match node {
        Node::Scalar(s) => crate::spec::yaml::scalar_value(s).to_json(),
        Node::Sequence(items) => Json::Array(items.iter().map(node_to_json).collect()),
        Node::Mapping(m) => Json::Object(
            m.iter()
                .map(|(k, v)| (k.as_str().to_string(), node_to_json(v)))
                .collect(),
        ),
    }
}

/// What `apply` needs from a tuned file.
#[derive(Debug, Clone, Deserialize)]
pub struct TunedFile {
    pub schema: u32,
    pub study: String,
    pub spec_hash: String,
    pub host_class: String,
    pub class_label: String,
    /// The class key the study chose, when not the default: `apply`
    /// classes its host by it.
    #[serde(default)]
    pub class_key: Option<TunedClassKey>,
    pub baseline: Map<String, Json>,
    /// Every knob's domain (see [`compact_domain`]); `None` in a file
    /// written before tuned files carried them.
    #[serde(default)]
    pub domains: Option<Map<String, Json>>,
    /// The judging settings; `apply` reads only `buckets` (a rule per
    /// cell axis of the study). `None` in a file written before tuned
    /// files carried them.
    #[serde(default)]
    pub judging: Option<TunedJudging>,
    #[serde(default)]
    pub buckets: Vec<TunedBucket>,
}

/// What `apply` reads of a tuned file's `judging`.
#[derive(Debug, Clone, Deserialize)]
pub struct TunedJudging {
    /// The bucket rule of every cell axis of the study (empty: the study
    /// has no cell axes).
    #[serde(default)]
    pub buckets: Option<Map<String, Json>>,
}

/// A tuned file's `class_key`: the fields, and the commands of the tools
/// they read (run by `apply` to class this host, as a launch's probe does).
#[derive(Debug, Clone, Deserialize)]
pub struct TunedClassKey {
    pub fields: ClassKey,
    #[serde(default)]
    pub tools: BTreeMap<String, String>,
}

impl TunedClassKey {
    /// A key's `tool:<name>` without a command here cannot be probed: say
    /// so rather than class the host by a version read as unknown.
    pub fn check(&self) -> Result<(), String> {
        match self.fields.tools().find(|t| !self.tools.contains_key(*t)) {
            Some(t) => Err(format!(
                "class_key.fields names `tool:{t}` but class_key.tools has no command for `{t}`"
            )),
            None => Ok(()),
        }
    }
}

/// One bucket of a tuned file.
#[derive(Debug, Clone, Deserialize)]
pub struct TunedBucket {
    pub key: String,
    pub label: String,
    pub bounds: Json,
    pub knobs: Map<String, Json>,
    pub winner: Option<String>,
    pub level: TunedLevel,
    pub decision: String,
}

/// A tuned file, by its top-level keys (see
/// [`crate::spec::yaml::parse_kind`]): those [`export`] writes.
pub const TUNED_FILE: crate::spec::yaml::FileKind = crate::spec::yaml::FileKind {
    what: "tuned",
    keys: &[
        "schema",
        "tunectl_version",
        "study",
        "spec_hash",
        "host_class",
        "class_label",
        "class_key",
        "hosts",
        "fingerprint",
        "objective",
        "statistic",
        "context",
        "baseline",
        "judging",
        "domains",
        "buckets",
    ],
};

/// Parse a tuned file's text (`file` names it in messages, with the line,
/// column and field of the first value that does not read).
pub fn parse(file: &Path, text: &str) -> Result<TunedFile, String> {
    let node = crate::spec::yaml::parse_kind(file, text, TUNED_FILE).map_err(|d| d.to_string())?;
    let json = node_to_json(&node);
    let schema = json.get("schema").and_then(Json::as_u64);
    if schema != Some(u64::from(SCHEMA)) {
        let at = match &node {
            Node::Mapping(m) => m.get_node("schema").unwrap_or(&node),
            _ => &node,
        };
        return Err(diagnostic(
            file,
            at,
            "schema",
            format!(
                "not a tuned file of schema {SCHEMA} (schema: {}); re-export it with this tunectl",
                json.get("schema")
                    .map(Json::to_string)
                    .unwrap_or("missing".into())
            ),
        ));
    }
    serde_path_to_error::deserialize(json).map_err(|e| {
        // The path of the value serde refused, walked in the YAML tree to
        // find where it is written; a missing field's path ends at the
        // mapping that lacks it.
        let mut at = &node;
        let mut field = String::new();
        for segment in e.path().iter() {
            let next = match (segment, at) {
                (serde_path_to_error::Segment::Map { key }, Node::Mapping(m)) => {
                    field = crate::spec::yaml::join(&field, key);
                    m.get_node(key)
                }
                (serde_path_to_error::Segment::Seq { index }, Node::Sequence(s)) => {
                    field = crate::spec::yaml::index(&field, *index);
                    s.get(*index)
                }
                _ => None,
            };
            match next {
                Some(n) => at = n,
                None => break,
            }
        }
        diagnostic(file, at, &field, format!("not a tuned file: {}", e.inner()))
    })
}

/// `file:line:column: field: message`, at `node`.
fn diagnostic(file: &Path, node: &Node, field: &str, message: String) -> String {
    let (line, column) = node
        .span()
        .start()
        .map(|m| (m.line(), m.column()))
        .unwrap_or((0, 0));
    crate::spec::Diagnostic {
        file: file.to_path_buf(),
        line,
        column,
        field: field.to_string(),
        message,
    }
    .to_string()
}

/// The `*.yaml` and `*.yml` files of `dir`, sorted: where tuned files are
/// looked for.
pub fn yaml_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml") | Some("yml")
                )
        })
        .collect();
    v.sort();
    Ok(v)
}

/// Load a tuned file, or every `*.yaml`/`*.yml` file of a directory (sorted
/// by name). They must all come from the same study and spec, with at
/// most one file per host class.
pub fn load(path: &Path) -> Result<Vec<(PathBuf, TunedFile)>, String> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let v = yaml_files(path).map_err(|e| format!("{}: cannot list: {e}", path.display()))?;
        if v.is_empty() {
            return Err(format!(
                "{}: no tuned files (*.yaml) in this directory; write them with `tunectl export`",
                path.display()
            ));
        }
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut out: Vec<(PathBuf, TunedFile)> = Vec::new();
    for f in files {
        let text = crate::safe_read::read_text(&f, crate::safe_read::MAX_TUNED_FILE_BYTES)
            .map_err(|e| format!("{}: cannot read: {e}", f.display()))?;
        let t = parse(&f, &text)?;
        if let Some(key) = &t.class_key {
            key.check().map_err(|e| format!("{}: {e}", f.display()))?;
        }
        if let Some((first, ft)) = out.first()
            && (ft.study != t.study || ft.spec_hash != t.spec_hash)
        {
            return Err(format!(
                "{} is from study `{}` (spec {}) but {} is from study `{}` (spec {}); apply one study's tuned files at a time",
                f.display(),
                t.study,
                short(&t.spec_hash),
                first.display(),
                ft.study,
                short(&ft.spec_hash)
            ));
        }
        if let Some((other, _)) = out.iter().find(|(_, o)| o.host_class == t.host_class) {
            return Err(format!(
                "{} and {} are both for host class {}; keep one",
                other.display(),
                f.display(),
                t.host_class
            ));
        }
        out.push((f, t));
    }
    Ok(out)
}

// ---------------------------------------------------------------- domains

fn same_value(a: &Json, b: &Json) -> bool {
    a == b || matches!((a, b), (Json::Number(x), Json::Number(y)) if x.as_f64() == y.as_f64())
}

/// Whether a domain (as [`compact_domain`] writes it) holds `value`.
fn domain_contains(domain: &Json, value: &Json) -> Result<bool, String> {
    if let Some(values) = domain.get("values").and_then(Json::as_array) {
        return Ok(values.iter().any(|v| same_value(v, value)));
    }
    let (Some(min), Some(max)) = (
        domain.get("min").and_then(Json::as_f64),
        domain.get("max").and_then(Json::as_f64),
    ) else {
        return Err("its domain has neither `values` nor `min` and `max`".to_string());
    };
    if let Some(step) = domain.get("step") {
        let (Some(step), Some(min), Some(v)) = (
            step.as_i64().filter(|s| *s >= 1),
            domain.get("min").and_then(Json::as_i64),
            value.as_i64(),
        ) else {
            return Ok(false);
        };
        let max = domain.get("max").and_then(Json::as_i64).unwrap_or(min);
        return Ok(min <= v
            && v <= max
            && (i128::from(v) - i128::from(min)) % i128::from(step) == 0);
    }
    Ok(value.as_f64().is_some_and(|x| min <= x && x <= max))
}

fn describe_domain(domain: &Json) -> String {
    if let Some(values) = domain.get("values").and_then(Json::as_array) {
        let shown: Vec<String> = values.iter().take(12).map(|v| v.to_string()).collect();
        let more = if values.len() > 12 { ", ..." } else { "" };
        return format!("[{}{more}]", shown.join(", "));
    }
    let step = domain
        .get("step")
        .map(|s| format!(" by {s}"))
        .unwrap_or_default();
    format!(
        "{} to {}{step}",
        domain.get("min").unwrap_or(&Json::Null),
        domain.get("max").unwrap_or(&Json::Null)
    )
}

/// Check every knob value of loaded tuned files (baseline and every
/// bucket) against the knob domains the files carry. `Err`: the first
/// value outside its knob's domain, naming the file, the bucket and the
/// knob. `Ok`: warnings (files too old to carry domains).
pub fn check_domains(files: &[(PathBuf, TunedFile)]) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    for (path, file) in files {
        let Some(domains) = &file.domains else {
            warnings.push(format!(
                "{} carries no knob domains (it was written by an older tunectl), so its values cannot be checked against the study's knobs; re-export it with `tunectl export`",
                path.display()
            ));
            continue;
        };
        let sets = std::iter::once(("the baseline".to_string(), &file.baseline)).chain(
            file.buckets
                .iter()
                .map(|b| (format!("bucket `{}` (key {})", b.label, b.key), &b.knobs)),
        );
        for (where_, knobs) in sets {
            for (name, value) in knobs {
                let problem = match domains.get(name) {
                    None => Some(format!(
                        "`{name}` is not a knob of study `{}` (knobs: {})",
                        file.study,
                        domains.keys().cloned().collect::<Vec<_>>().join(", ")
                    )),
                    Some(d) => match domain_contains(d, value) {
                        Ok(true) => None,
                        Ok(false) => Some(format!(
                            "knob `{name}`: {value} is not one of its values ({})",
                            describe_domain(d)
                        )),
                        Err(e) => Some(format!("knob `{name}`: {e}")),
                    },
                };
                if let Some(p) = problem {
                    return Err(format!(
                        "{}: {where_}: {p}; the file was edited or damaged: re-export it with `tunectl export`",
                        path.display()
                    ));
                }
            }
        }
    }
    Ok(warnings)
}

// ---------------------------------------------------------------- apply

/// A `--cell` value: integers, numbers, booleans and null as YAML would
/// read them, anything else a string.
fn cell_value(text: &str) -> Json {
    match text {
        "true" => return Json::Bool(true),
        "false" => return Json::Bool(false),
        "null" | "~" => return Json::Null,
        _ => {}
    }
    if let Ok(i) = text.parse::<i64>() {
        return Json::from(i);
    }
    let numeric = text.chars().any(|c| c.is_ascii_digit())
        && text
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
    if numeric
        && let Ok(f) = text.parse::<f64>()
        && let Some(n) = serde_json::Number::from_f64(f)
    {
        return Json::Number(n);
    }
    Json::String(text.to_string())
}

/// Parse `--cell axis=value` arguments into a cell.
pub fn parse_cell(args: &[String]) -> Result<Map<String, Json>, String> {
    let mut cell = Map::new();
    for a in args {
        let Some((axis, value)) = a.split_once('=') else {
            return Err(format!(
                "--cell {a}: expected AXIS=VALUE, e.g. --cell batch=4"
            ));
        };
        let axis = axis.trim();
        if axis.is_empty() {
            return Err(format!("--cell {a}: the axis name is empty"));
        }
        if cell
            .insert(axis.to_string(), cell_value(value.trim()))
            .is_some()
        {
            return Err(format!("--cell {axis}: given more than once"));
        }
    }
    Ok(cell)
}

/// Cell axes that buckets constrain.
pub fn bucket_axes<'a>(buckets: impl IntoIterator<Item = &'a TunedBucket>) -> Vec<String> {
    let mut out: Vec<String> = buckets
        .into_iter()
        .filter_map(|b| b.bounds.as_object())
        .flat_map(|m| m.keys().cloned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The cell axes of the study of `files` (sorted): those their buckets'
/// bounds and their `judging.buckets` (a rule per axis) name, none for a
/// study without cells. `None` when the files cannot tell: no buckets and
/// no `judging.buckets` (files written before tuned files carried them).
pub fn cell_axes(files: &[(PathBuf, TunedFile)]) -> Option<Vec<String>> {
    let mut axes = bucket_axes(files.iter().flat_map(|(_, f)| &f.buckets));
    let mut known = files.iter().any(|(_, f)| !f.buckets.is_empty());
    for (_, f) in files {
        if let Some(rules) = f.judging.as_ref().and_then(|j| j.buckets.as_ref()) {
            known = true;
            axes.extend(rules.keys().cloned());
        }
    }
    axes.sort();
    axes.dedup();
    known.then_some(axes)
}

/// Refuse a `--cell` axis the study of `files` does not have (exit 2 in
/// `apply`), naming it and the study's axes (or saying it has none): the
/// value would be passed on as if it chose a bucket.
pub fn check_cell_axes(
    files: &[(PathBuf, TunedFile)],
    cell: &Map<String, Json>,
) -> Result<(), String> {
    let Some(axes) = cell_axes(files) else {
        return Ok(());
    };
    match cell.keys().find(|k| !axes.contains(k)) {
        None => Ok(()),
        Some(unknown) if axes.is_empty() => Err(format!(
            "--cell {unknown}: the study of these tuned files has no cell axes (it measured one workload), so no axis `{unknown}`; leave out --cell"
        )),
        Some(unknown) => Err(format!(
            "--cell {unknown}: the tuned buckets have no axis `{unknown}` (axes: {})",
            axes.join(", ")
        )),
    }
}

/// This host, as far as the probe could tell.
#[derive(Debug, Clone)]
pub struct ThisHost {
    /// Its class id and label, or why the probe failed.
    pub class: Result<(String, String), String>,
}

/// Where the knobs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The tuned file for this host's class and the cell's bucket.
    Tuned,
    /// The study's defaults (the baseline config).
    Defaults,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Tuned => "tuned",
            Source::Defaults => "defaults",
        }
    }
}

/// What `apply` settled on, and why.
#[derive(Debug, Clone)]
pub struct Choice {
    pub source: Source,
    /// The file for this host's class, if any.
    pub file: Option<PathBuf>,
    pub study: String,
    pub spec_hash: String,
    pub bucket: Option<TunedBucket>,
    /// Every knob with its value (typed as in the file).
    pub knobs: Map<String, Json>,
    /// Why these knobs, in one sentence.
    pub reason: String,
    /// Set when the tune was not used, or no decision exists yet: the
    /// warning for stderr.
    pub warning: Option<String>,
    /// Knobs whose value came from a `TUNECTL_KNOB_<NAME>` variable, with
    /// the variable's text (passed on unchanged).
    pub from_environment: Vec<(String, String)>,
}

fn cell_text(cell: &Map<String, Json>) -> String {
    cell.iter()
        .map(|(k, v)| {
            format!(
                "{k}={}",
                v.as_str().map(str::to_string).unwrap_or(v.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

const DEFAULTS: &str = "using the study's defaults";

/// Choose the knobs for this host and cell from loaded tuned files
/// (non-empty, one study). Only the file of this host's class is ever used;
/// otherwise the baseline, with a warning.
pub fn choose(files: &[(PathBuf, TunedFile)], host: &ThisHost, cell: &Map<String, Json>) -> Choice {
    let (first_path, first) = &files[0];
    let defaults = |reason: String, file: Option<&Path>| Choice {
        source: Source::Defaults,
        file: file.map(Path::to_path_buf),
        study: first.study.clone(),
        spec_hash: first.spec_hash.clone(),
        bucket: None,
        knobs: first.baseline.clone(),
        warning: Some(format!("{reason}; {DEFAULTS}")),
        reason,
        from_environment: Vec::new(),
    };
    let (class, label) = match &host.class {
        Ok(c) => c,
        Err(e) => {
            return defaults(
                format!("cannot tell this host's class (its fingerprint probe failed: {e})"),
                None,
            );
        }
    };
    let Some((path, file)) = files.iter().find(|(_, f)| &f.host_class == class) else {
        let reason = if files.len() == 1 {
            format!(
                "tuned file {} is for {} ({}), this host is {class} ({label})",
                first_path.display(),
                first.host_class,
                first.class_label
            )
        } else {
            let known: Vec<String> = files
                .iter()
                .map(|(_, f)| format!("{} ({})", f.host_class, f.class_label))
                .collect();
            format!(
                "no tuned file is for this host's class {class} ({label}); the files are for {}",
                known.join(", ")
            )
        };
        return defaults(reason, None);
    };
    let matches: Vec<&TunedBucket> = file
        .buckets
        .iter()
        .filter(|b| buckets::contains(&b.bounds, cell))
        .collect();
    let Some(bucket) = matches.first().copied() else {
        let labels: Vec<&str> = file.buckets.iter().map(|b| b.label.as_str()).collect();
        let axes = bucket_axes(&file.buckets);
        let missing: Vec<&String> = axes.iter().filter(|a| !cell.contains_key(*a)).collect();
        let hint = if missing.is_empty() {
            String::new()
        } else {
            format!(
                "; name the cell with {}",
                missing
                    .iter()
                    .map(|a| format!("--cell {a}=VALUE"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        };
        let reason = if labels.is_empty() {
            format!(
                "tuned file {} for {class} has no buckets (no decisions exported)",
                path.display()
            )
        } else if cell.is_empty() {
            format!(
                "no --cell given, and the buckets of tuned file {} are per {} (buckets: {}){hint}",
                path.display(),
                axes.join(", "),
                labels.join("; ")
            )
        } else {
            format!(
                "no bucket of tuned file {} contains the cell {} (buckets: {}){hint}",
                path.display(),
                cell_text(cell),
                labels.join("; ")
            )
        };
        return defaults(reason, Some(path));
    };
    let mut knobs = file.baseline.clone();
    if bucket.level == TunedLevel::Pending {
        let reason = format!(
            "bucket {} of {class} has no decision yet ({})",
            bucket.label, bucket.decision
        );
        let mut c = defaults(reason, Some(path));
        c.bucket = Some(bucket.clone());
        return c;
    }
    for (k, v) in &bucket.knobs {
        knobs.insert(k.clone(), v.clone());
    }
    let what = match &bucket.winner {
        Some(w) => format!("{w} ({})", bucket.level),
        None => format!("the baseline ({}: {})", bucket.level, bucket.decision),
    };
    Choice {
        source: Source::Tuned,
        file: Some(path.clone()),
        study: file.study.clone(),
        spec_hash: file.spec_hash.clone(),
        bucket: Some(bucket.clone()),
        knobs,
        reason: format!(
            "this host is {class} ({label}), the class of {}; bucket {} ships {what}",
            path.display(),
            bucket.label
        ),
        warning: None,
        from_environment: Vec::new(),
    }
}

/// The environment variable of a knob.
pub fn knob_var(name: &str) -> String {
    format!("TUNECTL_KNOB_{}", name.to_uppercase())
}

/// `text` typed like `like` where it reads as that type, else a string.
fn typed_like(text: &str, like: &Json) -> Json {
    match like {
        Json::Bool(_) => match text {
            "true" => Json::Bool(true),
            "false" => Json::Bool(false),
            _ => Json::String(text.to_string()),
        },
        Json::Number(n) if n.is_i64() || n.is_u64() => text
            .parse::<i64>()
            .map(Json::from)
            .unwrap_or_else(|_| cell_value(text)),
        Json::Number(_) => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Json::Number)
            .unwrap_or_else(|| Json::String(text.to_string())),
        Json::Null => cell_value(text),
        _ => Json::String(text.to_string()),
    }
}

/// Let `TUNECTL_KNOB_<NAME>` variables (looked up with `var`) win over the
/// chosen values; records which knobs they set.
pub fn apply_overrides(choice: &mut Choice, var: impl Fn(&str) -> Option<String>) {
    let names: Vec<String> = choice.knobs.keys().cloned().collect();
    for name in names {
        if let Some(text) = var(&knob_var(&name)) {
            let value = typed_like(&text, &choice.knobs[&name]);
            choice.knobs.insert(name.clone(), value);
            choice.from_environment.push((name, text));
        }
    }
}

/// Refuse a `TUNECTL_KNOB_<NAME>` override (already applied to `choice`)
/// whose value is not in its knob's domain, as carried by the chosen
/// tuned file (else by any of `files`: all are of one study). Files
/// written before the domains were carried check nothing (their warning
/// says so).
pub fn check_overrides(files: &[(PathBuf, TunedFile)], choice: &Choice) -> Result<(), String> {
    let domains = files
        .iter()
        .filter(|(p, _)| choice.file.as_ref().is_none_or(|f| f == p))
        .chain(files.iter())
        .find_map(|(_, f)| f.domains.as_ref());
    let Some(domains) = domains else {
        return Ok(());
    };
    for (name, text) in &choice.from_environment {
        let var = knob_var(name);
        let problem = match (domains.get(name), choice.knobs.get(name)) {
            (Some(d), Some(value)) => match domain_contains(d, value) {
                Ok(true) => None,
                Ok(false) => Some(format!(
                    "{text:?} is not one of the values of knob `{name}` ({})",
                    describe_domain(d)
                )),
                Err(e) => Some(format!("knob `{name}`: {e}")),
            },
            _ => Some(format!("the tuned files carry no domain for knob `{name}`")),
        };
        if let Some(p) = problem {
            return Err(format!(
                "{var} is set in the environment: {p}; unset it or give it one of the knob's values"
            ));
        }
    }
    Ok(())
}

/// A JSON scalar as a template/env value.
fn to_value(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Str(s.clone()),
        other => Value::Str(other.to_string()),
    }
}

/// The trial contract's variables for the chosen knobs and cell:
/// `TUNECTL_KNOBS`, `TUNECTL_CELL` (canonical JSON), one
/// `TUNECTL_KNOB_<NAME>` per knob (printed as trials see them; a variable
/// the user set keeps its text) and one `TUNECTL_CELL_<AXIS>` per cell
/// axis whose name is an identifier.
pub fn environment(choice: &Choice, cell: &Map<String, Json>) -> Vec<(String, String)> {
    let knobs = &choice.knobs;
    let mut env = vec![
        (
            "TUNECTL_KNOBS".to_string(),
            crate::canon::canonical_json(&Json::Object(knobs.clone())),
        ),
        (
            "TUNECTL_CELL".to_string(),
            crate::canon::canonical_json(&Json::Object(cell.clone())),
        ),
    ];
    for (k, v) in knobs {
        let text = match choice.from_environment.iter().find(|(n, _)| n == k) {
            Some((_, raw)) => raw.clone(),
            None => to_value(v).to_string(),
        };
        env.push((knob_var(k), text));
    }
    for (axis, v) in cell {
        if crate::spec::shell::is_variable_name(axis) {
            env.push((
                format!("TUNECTL_CELL_{}", axis.to_uppercase()),
                to_value(v).to_string(),
            ));
        }
    }
    env
}

/// Template variables: the cell's axes and the knobs.
pub fn template_vars(knobs: &Map<String, Json>, cell: &Map<String, Json>) -> TrialVars {
    let mut vars = TrialVars::default();
    for (k, v) in cell {
        vars.set(k, to_value(v));
    }
    for (k, v) in knobs {
        vars.set(k, to_value(v));
    }
    vars
}

/// `apply --print`: the choice as YAML.
pub fn print_yaml(
    choice: &Choice,
    host: &ThisHost,
    cell: &Map<String, Json>,
    env: &[(String, String)],
    command: Option<&str>,
) -> String {
    let (class, label) = match &host.class {
        Ok((c, l)) => (Some(c.as_str()), Some(l.as_str())),
        Err(_) => (None, None),
    };
    let bucket = choice.bucket.as_ref().map(|b| {
        Yaml::map()
            .with("key", &b.key)
            .with("label", &b.label)
            .with("level", b.level.as_str())
            .with("winner", b.winner.as_deref())
            .with("decision", &b.decision)
    });
    let mut body = Yaml::map()
        .with("host_class", class)
        .with("class_label", label)
        .with("study", &choice.study)
        .with("spec_hash", &choice.spec_hash)
        .with(
            "tuned_file",
            choice.file.as_ref().map(|p| p.display().to_string()),
        )
        .with("source", choice.source.as_str())
        .with("reason", &choice.reason)
        .with("bucket", bucket)
        .with("cell", Json::Object(cell.clone()))
        .with("knobs", Json::Object(choice.knobs.clone()))
        .with(
            "from_environment",
            choice
                .from_environment
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
        )
        .with(
            "environment",
            Yaml::Map(
                env.iter()
                    .map(|(k, v)| (k.clone(), Yaml::from(v)))
                    .collect(),
            ),
        );
    if let Some(c) = command {
        body.insert("command", c);
    }
    yaml_out::document(
        "tunectl apply --print: the knobs this host would use (nothing was run)",
        &body,
    )
}

/// Knob names in a stable order, for messages.
pub fn knob_list(knobs: &Map<String, Json>) -> String {
    let m: BTreeMap<&String, String> = knobs
        .iter()
        .map(|(k, v)| (k, to_value(v).to_string()))
        .collect();
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{BucketCell, BucketWinner, Refusal, analyze};
    use crate::fingerprint::Gpu;
    use crate::ledger::Scan;
    use crate::ledger::records::{AttemptRecord, StudyRecord};
    use serde_json::json;

    fn study() -> StudyRecord {
        serde_json::from_value(json!({
            "schema": 1, "tunectl_version": "t", "study_id": "fake", "spec_hash": "feedface0123456789",
            "spec": {
                "objective": {"name": "tp", "unit": "ops/s", "better": "higher"},
                "knobs": [
                    {"name": "mode", "kind": "categorical", "values": ["base", "fast", "crash"], "default": "base"},
                    {"name": "threads", "kind": "int", "values": [1, 2], "default": 1},
                ],
                "context": {"model": "m"},
            },
            "created_at": "",
        }))
        .expect("study record")
    }

    /// A hand-written attempt record (JSON, so new optional fields of the
    /// record do not break this test).
    fn attempt(
        cell: i64,
        config: u64,
        mode: &str,
        r: u32,
        tp: Option<f64>,
        class: &str,
    ) -> AttemptRecord {
        let baseline = mode == "base";
        let label = if baseline {
            "baseline".to_string()
        } else {
            format!("mode={mode}")
        };
        serde_json::from_value(json!({
            "schema": 1, "tunectl_version": "t", "study_id": "fake", "spec_hash": "feedface0123456789",
            "trial_key": format!("{cell}-{config}-{r}"), "attempt_id": "a",
            "config": {"mode": mode, "threads": 1}, "config_label": label, "config_index": config,
            "is_baseline": baseline, "cell": {"n": cell}, "cell_label": format!("n={cell}"),
            "cell_index": cell, "repeat": r, "fidelity": null, "host": "h1", "host_class": class,
            "fingerprint": "fp", "slot": 0, "started_at": "", "finished_at": "", "duration_s": 0.0,
            "run_s": null, "warmup_runs": 0,
            "status": if tp.is_some() { "ok" } else { "failed" },
            "failure": if tp.is_some() { Json::Null } else { json!({"class": "crash", "detail": "exit code 3", "phase": "measure"}) },
            "exit": null,
            "metrics": match tp { Some(x) => json!({"tp": [x, x + 0.5, x - 0.5]}), None => json!({}) },
            "digest": if tp.is_some() { json!("d") } else { Json::Null },
            "outputs": {}, "command": "", "stdout_tail": "", "stderr_tail": "",
        }))
        .expect("attempt record")
    }

    fn h100() -> Fingerprint {
        Fingerprint {
            hostname: Some("gpu1".into()),
            cpu_model: Some("Intel(R) Xeon(R) Platinum 8480+".into()),
            cpu_count: Some(224),
            gpus: (0..2)
                .map(|i| Gpu {
                    index: i,
                    name: "NVIDIA H100 80GB HBM3".into(),
                    memory_mib: Some(81559),
                    uuid: None,
                    vendor: crate::fingerprint::GpuVendor::Nvidia,
                })
                .collect(),
            driver_version: Some("550.54.15".into()),
            cuda_version: Some("12.4".into()),
            ..Fingerprint::default()
        }
    }

    /// An analysis of one class (2× H100) with two cells and three buckets
    /// built by hand: n ∈ [1, 2) won by mode=fast, n ∈ [2, 4) keeping the
    /// baseline, n ∈ [4, 8) pending.
    fn analysis() -> Analysis {
        let fp = h100();
        let class = fp.host_class();
        let mut attempts = Vec::new();
        for cell in [1, 2] {
            // Three runs each (an interval needs two a side), a little
            // apart.
            for r in 0..3 {
                let jitter = [0.0, 0.3, -0.3][r as usize];
                attempts.push(attempt(cell, 0, "base", r, Some(100.0 + jitter), &class));
                attempts.push(attempt(
                    cell,
                    1,
                    "fast",
                    r,
                    Some(if cell == 1 { 200.0 } else { 101.0 } - jitter),
                    &class,
                ));
                attempts.push(attempt(cell, 2, "crash", r, None, &class));
            }
        }
        let scan = Scan {
            attempts,
            ..Scan::default()
        };
        let mut a = analyze(&study(), &scan, &[]);
        let c = &mut a.classes[0];
        c.label = fp.class_label();
        c.fingerprint = Some(fp);
        c.hosts = vec!["gpu1".into()];
        let cell1 = c.cells[0].clone();
        let cell2 = c.cells[1].clone();
        assert_eq!(
            cell1.winner.as_ref().map(|w| w.label.as_str()),
            Some("mode=fast")
        );
        let fast = cell1.winner.clone().expect("winner");
        c.buckets = vec![
            BucketReport {
                key: "b1".into(),
                label: "n ∈ [2^0, 2^1)".into(),
                bounds: json!({"n": {"min": 1, "max": 2}}),
                cells: vec!["n=1".into()],
                config: fast.config.clone(),
                winner: Some(BucketWinner {
                    label: "mode=fast".into(),
                    config: fast.config.clone(),
                    knobs_changed: 1,
                    speedup: 2.0,
                    min_cell_speedup: 2.0,
                    interval: crate::stats::speedup::Interval {
                        speedup: 2.0,
                        low: 1.9,
                        high: 2.1,
                        confidence: 0.95,
                        runs: 3,
                        reference_runs: 3,
                        samples_as_runs: false,
                    },
                    confirmation: None,
                }),
                decision: crate::decide::Decision::NothingMeasured,
                level: crate::decide::Level::Draft,
                level_reason: crate::decide::LevelReasons::one(crate::decide::LevelReason::NoRound),
                threshold: Some(0.02),
                per_cell: vec![BucketCell {
                    cell_label: "n=1".into(),
                    baseline: cell1.baseline.clone(),
                    winner: cell1.winner.clone(),
                }],
                refusals: vec![],
                rejected: cell1.rejected.clone(),
                interval: None,
                racing: None,
                confirm_runs: None,
            },
            BucketReport {
                key: "b2".into(),
                label: "n ∈ [2^1, 2^2)".into(),
                bounds: json!({"n": {"min": 2, "max": 4}}),
                cells: vec!["n=2".into()],
                config: json!({"mode": "base", "threads": 1}),
                winner: None,
                decision: crate::decide::Decision::NothingPassedTheGate,
                level: crate::decide::Level::Draft,
                level_reason: crate::decide::LevelReasons::one(crate::decide::LevelReason::NoRound),
                threshold: Some(0.02),
                per_cell: vec![BucketCell {
                    cell_label: "n=2".into(),
                    baseline: cell2.baseline.clone(),
                    winner: None,
                }],
                refusals: vec![Refusal {
                    config_label: "mode=fast".into(),
                    cell_label: "n=2".into(),
                    speedup: Some(1.01),
                    reason: crate::decide::RefusalReason::NotConfirmed,
                }],
                rejected: cell2.rejected.clone(),
                interval: None,
                racing: None,
                confirm_runs: None,
            },
            BucketReport {
                key: "b3".into(),
                label: "n ∈ [2^2, 2^3)".into(),
                bounds: json!({"n": {"min": 4, "max": 8}}),
                cells: vec![],
                config: json!({"mode": "fast", "threads": 1}),
                winner: None,
                decision: crate::decide::Decision::NothingMeasured,
                level: crate::decide::Level::Draft,
                level_reason: crate::decide::LevelReasons::default(),
                threshold: None,
                per_cell: vec![],
                refusals: vec![],
                rejected: vec![],
                interval: None,
                racing: None,
                confirm_runs: None,
            },
        ];
        a
    }

    fn exported() -> (String, String, TunedFile, Json) {
        let a = analysis();
        let (name, text) = export(&a, &a.classes[0]);
        let file = parse(Path::new(&name), &text).expect("parses back");
        let node = crate::spec::yaml::parse_text(Path::new(&name), &text).expect("yaml");
        (name, text.clone(), file, node_to_json(&node))
    }

    /// A class of unknown accelerators says so in its tuned file, which
    /// still parses back.
    #[test]
    fn export_names_unknown_accelerators() {
        let mut a = analysis();
        let odd = Fingerprint {
            cpu_model: Some("AMD EPYC 7B13".into()),
            unknown_accelerators: vec![crate::fingerprint::UnknownAccelerator {
                vendor_id: "0x1234".into(),
                device_id: Some("0x11e8".into()),
                driver: Some("weirdaccel".into()),
            }],
            ..Fingerprint::default()
        };
        a.classes[0].fingerprint = Some(odd.clone());
        let (name, text) = export(&a, &a.classes[0]);
        parse(Path::new(&name), &text).expect("parses back");
        let node = crate::spec::yaml::parse_text(Path::new(&name), &text).expect("yaml");
        let json = node_to_json(&node);
        assert_eq!(
            json["fingerprint"]["unknown_accelerators"],
            json!(["0x1234:0x11e8"])
        );
        assert_eq!(json["fingerprint"]["gpu_count"], 0);
        assert!(json["fingerprint"].get("driver_name").is_none());
        assert!(name.starts_with("unknown-accel-0x1234-0x11e8-"), "{name}");
    }

    #[test]
    fn slugs_are_readable_and_end_with_the_class() {
        let fp = h100();
        let s = slug(&fp.host_class(), Some(&fp));
        assert_eq!(
            s,
            format!("2x-nvidia-h100-80gb-hbm3-drv550-{}", fp.host_class())
        );
        let cpu = Fingerprint {
            cpu_model: Some("AMD EPYC 7B13 64-Core Processor".into()),
            cpu_count: Some(2),
            ..Fingerprint::default()
        };
        assert_eq!(
            slug(&cpu.host_class(), Some(&cpu)),
            format!("no-gpu-amd-epyc-7b13-2cpu-{}", cpu.host_class())
        );
        assert_eq!(slug("hc-0123456789ab", None), "unknown-hc-0123456789ab");
        let weird = Fingerprint {
            cpu_model: Some("  ###  ".into()),
            ..Fingerprint::default()
        };
        let s = slug("hc-x", Some(&weird));
        assert!(
            s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{s}"
        );
        assert_eq!(s, "no-gpu-hc-x");
        let odd = Fingerprint {
            unknown_accelerators: vec![crate::fingerprint::UnknownAccelerator {
                vendor_id: "0x1234".into(),
                device_id: Some("0x11e8".into()),
                driver: None,
            }],
            ..Fingerprint::default()
        };
        assert_eq!(slug("hc-y", Some(&odd)), "unknown-accel-0x1234-0x11e8-hc-y");
    }

    #[test]
    fn export_writes_the_class_its_fingerprint_and_every_bucket() {
        let (name, text, file, json) = exported();
        let fp = h100();
        assert_eq!(name, format!("{}.yaml", slug(&fp.host_class(), Some(&fp))));
        assert!(text.starts_with("# tunectl tuned configuration"), "{text}");
        assert!(
            text.contains("applies ONLY on a host whose fingerprint matches"),
            "{text}"
        );
        assert_eq!(json["schema"], 1);
        assert_eq!(json["study"], "fake");
        assert_eq!(json["spec_hash"], "feedface0123456789");
        assert_eq!(json["tunectl_version"], crate::ledger::records::VERSION);
        assert_eq!(json["host_class"], fp.host_class());
        assert_eq!(json["class_label"], fp.class_label());
        assert_eq!(json["hosts"], json!(["gpu1"]));
        assert_eq!(
            json["fingerprint"],
            json!({
                "gpus": [
                    {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559},
                    {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559},
                ],
                "gpu_count": 2,
                "driver_major": "550",
                "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
                "fingerprint_hash": fp.hash(),
            })
        );
        assert_eq!(
            json["objective"],
            json!({"name": "tp", "unit": "ops/s", "better": "higher"})
        );
        assert_eq!(json["baseline"], json!({"mode": "base", "threads": 1}));
        assert_eq!(json["context"], json!({"model": "m"}));

        let b = &json["buckets"];
        assert_eq!(b.as_array().map(Vec::len), Some(3));
        // Won.
        assert_eq!(b[0]["key"], "b1");
        assert_eq!(b[0]["label"], "n ∈ [2^0, 2^1)");
        assert_eq!(b[0]["bounds"], json!({"n": {"min": 1, "max": 2}}));
        assert_eq!(b[0]["knobs"], json!({"mode": "fast", "threads": 1}));
        assert_eq!(b[0]["winner"], "mode=fast");
        assert_eq!(b[0]["level"], "draft");
        assert_eq!(b[0]["speedup"], 2.0);
        let cell = &b[0]["cells"][0];
        assert_eq!(cell["cell"], "n=1");
        assert_eq!(cell["baseline"]["config"], "baseline");
        assert_eq!(cell["baseline"]["median"], 100.0);
        assert_eq!(cell["baseline"]["n"], 9);
        assert_eq!(cell["baseline"]["unit"], "ops/s");
        assert!(cell["baseline"]["spread"].as_f64().is_some(), "{cell}");
        assert_eq!(cell["winner"]["config"], "mode=fast");
        assert_eq!(cell["winner"]["median"], 200.0);
        let speedup = cell["winner"]["speedup"].as_f64().unwrap_or(0.0);
        assert!((speedup - 2.0).abs() < 1e-3, "{cell}");
        assert_eq!(
            b[0]["rejected"],
            json!([{"config": "mode=crash", "class": "crash", "detail": "exit code 3 (repeat 0, host h1)"}])
        );
        // Kept the baseline, with a refusal.
        assert_eq!(b[1]["winner"], Json::Null);
        assert_eq!(b[1]["knobs"], json!({"mode": "base", "threads": 1}));
        assert_eq!(b[1]["cells"][0]["winner"], Json::Null);
        assert_eq!(b[1]["refusals"][0]["config"], "mode=fast");
        // Pending: the baseline, whatever the report's config says.
        assert_eq!(b[2]["level"], "pending");
        assert_eq!(b[2]["knobs"], json!({"mode": "base", "threads": 1}));
        assert_eq!(b[2]["winner"], Json::Null);
        assert_eq!(b[2]["cells"], json!([]));

        assert_eq!(file.buckets.len(), 3);
        assert_eq!(file.host_class, fp.host_class());
        let levels: Vec<TunedLevel> = file.buckets.iter().map(|b| b.level).collect();
        assert_eq!(
            levels,
            [TunedLevel::Draft, TunedLevel::Draft, TunedLevel::Pending]
        );
    }

    #[test]
    fn a_tuned_file_with_a_level_it_cannot_have_is_refused() {
        let (_, text, _, _) = exported();
        let edited = text.replacen("level: draft", "level: final", 1);
        assert_ne!(edited, text);
        let e = parse(Path::new("edited.yaml"), &edited).expect_err("refused");
        // The line of the first `level:`, the column of its value.
        let line = 1 + edited[..edited.find("level: final").expect("edited")]
            .matches('\n')
            .count();
        let at = format!("edited.yaml:{line}:");
        assert!(
            e.starts_with(&at)
                && e.contains(": buckets[")
                && e.contains("].level: not a tuned file:")
                && e.contains("`final`")
                && e.contains("`verdict`, `draft`, `pending`"),
            "{e}"
        );
    }

    #[test]
    fn a_tuned_file_that_does_not_read_names_the_line_and_field() {
        let (_, text, _, _) = exported();
        let line_of =
            |t: &str, needle: &str| 1 + t[..t.find(needle).expect("in")].matches('\n').count();
        // A field of the wrong type: its own line.
        let edited = text.replacen("study: ", "study: [1, 2] #", 1);
        let e = parse(Path::new("t.yaml"), &edited).expect_err("refused");
        let at = format!("t.yaml:{}:", line_of(&edited, "study: ["));
        assert!(e.starts_with(&at) && e.contains(": study: "), "{e}");
        // A missing field: the mapping that lacks it.
        let edited = text.replacen("    decision: ", "    decided: ", 1);
        let e = parse(Path::new("t.yaml"), &edited).expect_err("refused");
        assert!(
            e.contains(": buckets[0]: ") && e.contains("missing field `decision`"),
            "{e}"
        );
        assert!(!e.starts_with("t.yaml: "), "no line: {e}");
        // A schema this tunectl does not read: the schema's line.
        let edited = text.replacen("schema: 1", "schema: 9", 1);
        let e = parse(Path::new("t.yaml"), &edited).expect_err("refused");
        let at = format!("t.yaml:{}:", line_of(&edited, "schema: 9"));
        assert!(
            e.starts_with(&at) && e.contains("schema 1 (schema: 9)"),
            "{e}"
        );
    }

    #[test]
    fn export_is_deterministic_and_keeps_its_key_order() {
        let (_, a, _, _) = exported();
        let (_, b, _, _) = exported();
        assert_eq!(a, b);
        let keys: Vec<&str> = a
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with(' ') && !l.starts_with('-'))
            .filter_map(|l| l.split(':').next())
            .collect();
        assert_eq!(
            keys,
            [
                "schema",
                "tunectl_version",
                "study",
                "spec_hash",
                "host_class",
                "class_label",
                "hosts",
                "fingerprint",
                "objective",
                "statistic",
                "context",
                "baseline",
                "judging",
                "domains",
                "buckets"
            ]
        );
    }

    #[test]
    fn a_class_without_buckets_exports_an_empty_list() {
        let mut a = analysis();
        a.classes[0].buckets.clear();
        let (name, text) = export(&a, &a.classes[0]);
        assert!(text.contains("\nbuckets: []\n"), "{text}");
        assert!(
            parse(Path::new(&name), &text)
                .expect("parses")
                .buckets
                .is_empty()
        );
    }

    fn host(fp: &Fingerprint) -> ThisHost {
        ThisHost {
            class: Ok((fp.host_class(), fp.class_label())),
        }
    }

    fn files() -> Vec<(PathBuf, TunedFile)> {
        let (name, _, file, _) = exported();
        vec![(PathBuf::from(name), file)]
    }

    fn cell(n: i64) -> Map<String, Json> {
        parse_cell(&[format!("n={n}")]).expect("cell")
    }

    #[test]
    fn a_matching_host_gets_the_bucket_winner() {
        let c = choose(&files(), &host(&h100()), &cell(1));
        assert_eq!(c.source, Source::Tuned);
        assert_eq!(
            c.knobs,
            *json!({"mode": "fast", "threads": 1})
                .as_object()
                .expect("map")
        );
        assert!(c.warning.is_none());
        assert!(c.reason.contains("mode=fast"), "{}", c.reason);
        assert_eq!(c.bucket.as_ref().map(|b| b.key.as_str()), Some("b1"));
        // A bucket that kept the baseline is still the tune: no warning.
        let c = choose(&files(), &host(&h100()), &cell(3));
        assert_eq!(c.source, Source::Tuned);
        assert_eq!(c.knobs["mode"], "base");
        assert!(c.warning.is_none());
    }

    #[test]
    fn another_class_gets_the_defaults_and_a_warning() {
        let other = Fingerprint {
            cpu_model: Some("AMD EPYC 7B13".into()),
            ..Fingerprint::default()
        };
        let c = choose(&files(), &host(&other), &cell(1));
        assert_eq!(c.source, Source::Defaults);
        assert_eq!(
            c.knobs,
            *json!({"mode": "base", "threads": 1})
                .as_object()
                .expect("map")
        );
        let w = c.warning.expect("warning");
        assert!(
            w.contains(&format!("is for {}", h100().host_class())),
            "{w}"
        );
        assert!(
            w.contains(&format!("this host is {}", other.host_class())),
            "{w}"
        );
        assert!(w.ends_with("using the study's defaults"), "{w}");
        let failed = ThisHost {
            class: Err("sh: not found".into()),
        };
        let c = choose(&files(), &failed, &cell(1));
        assert_eq!(c.source, Source::Defaults);
        assert!(c.warning.expect("warning").contains("probe failed"));
    }

    #[test]
    fn cells_outside_every_bucket_or_pending_get_the_defaults() {
        for (c, why) in [
            (cell(64), "contains the cell n=64"),
            (Map::new(), "--cell n=VALUE"),
            (cell(5), "no decision yet"),
        ] {
            let ch = choose(&files(), &host(&h100()), &c);
            assert_eq!(ch.source, Source::Defaults, "{c:?}");
            assert_eq!(ch.knobs["mode"], "base");
            let w = ch.warning.expect("warning");
            assert!(w.contains(why), "{w}");
        }
    }

    #[test]
    fn bounds_rules() {
        let c = |s: &str| parse_cell(&[s.to_string()]).expect("cell");
        let pow2 = json!({"n": {"min": 2, "max": 4}});
        assert!(buckets::contains(&pow2, &c("n=2")));
        assert!(buckets::contains(&pow2, &c("n=3.5")));
        assert!(!buckets::contains(&pow2, &c("n=4")));
        assert!(!buckets::contains(&pow2, &c("n=1")));
        assert!(!buckets::contains(&pow2, &c("n=big")));
        let exact = json!({"dtype": {"values": ["bf16"]}, "n": "any"});
        assert!(buckets::contains(&exact, &c("dtype=bf16")));
        assert!(!buckets::contains(&exact, &c("dtype=fp16")));
        assert!(buckets::contains(
            &json!({"n": {"values": [8]}}),
            &c("n=8.0")
        ));
        assert!(buckets::contains(&json!("any"), &Map::new()));
        assert!(buckets::contains(&json!({}), &Map::new()));
        assert!(parse_cell(&["n".into()]).is_err());
        assert!(parse_cell(&["n=1".into(), "n=2".into()]).is_err());
        assert_eq!(c("x=true")["x"], true);
        assert_eq!(c("x=1e3")["x"], 1000.0);
        assert_eq!(c("x=e")["x"], "e");
    }

    #[test]
    fn environment_variables_win_and_are_typed_like_the_knob() {
        let mut ch = choose(&files(), &host(&h100()), &cell(1));
        apply_overrides(&mut ch, |v| {
            (v == "TUNECTL_KNOB_THREADS").then(|| "08".to_string())
        });
        assert_eq!(ch.knobs["threads"], 8);
        assert_eq!(ch.knobs["mode"], "fast");
        assert_eq!(
            ch.from_environment,
            vec![("threads".to_string(), "08".to_string())]
        );
        let env: BTreeMap<String, String> = environment(&ch, &cell(1)).into_iter().collect();
        assert_eq!(env["TUNECTL_KNOBS"], r#"{"mode":"fast","threads":8}"#);
        assert_eq!(env["TUNECTL_KNOB_MODE"], "fast");
        // The user's own text is passed on unchanged.
        assert_eq!(env["TUNECTL_KNOB_THREADS"], "08");
        assert_eq!(env["TUNECTL_CELL"], r#"{"n":1}"#);
        assert_eq!(env["TUNECTL_CELL_N"], "1");
        let cmd = crate::spec::template::render_shell(
            "run --mode {{ mode }} -t {{ threads }} -n {{ n }}",
            &template_vars(&ch.knobs, &cell(1)),
            &environment(&ch, &cell(1)),
        )
        .expect("renders");
        // The template prints the typed value (8), not the variable's own
        // text (08): that hole gets a variable of its own.
        assert_eq!(
            cmd.command,
            "run --mode \"${TUNECTL_KNOB_MODE}\" -t \"${TUNECTL_ARG_1}\" -n \"${TUNECTL_CELL_N}\""
        );
        assert_eq!(
            cmd.env,
            vec![("TUNECTL_ARG_1".to_string(), "8".to_string())]
        );
        assert_eq!(typed_like("x", &json!(1)), json!("x"));
        assert_eq!(typed_like("true", &json!(false)), json!(true));
        assert_eq!(typed_like("2", &json!(0.5)), json!(2.0));
    }

    #[test]
    fn an_override_outside_its_knobs_domain_is_refused() {
        let fs = files();
        let set = |text: &'static str| {
            let mut ch = choose(&fs, &host(&h100()), &cell(1));
            apply_overrides(&mut ch, |v| {
                (v == "TUNECTL_KNOB_MODE").then(|| text.to_string())
            });
            check_overrides(&fs, &ch)
        };
        assert_eq!(set("fast"), Ok(()));
        let err = set("$(touch pwned)").expect_err("refused");
        assert!(
            err.starts_with("TUNECTL_KNOB_MODE is set in the environment: \"$(touch pwned)\" is not one of the values of knob `mode`"),
            "{err}"
        );
        // A file too old to carry domains checks nothing (and says so).
        let mut old = files();
        old[0].1.domains = None;
        let mut ch = choose(&old, &host(&h100()), &cell(1));
        apply_overrides(&mut ch, |v| {
            (v == "TUNECTL_KNOB_MODE").then(|| "x".to_string())
        });
        assert_eq!(check_overrides(&old, &ch), Ok(()));
    }

    #[test]
    fn print_yaml_reads_back() {
        let ch = choose(&files(), &host(&h100()), &cell(1));
        let env = environment(&ch, &cell(1));
        let text = print_yaml(&ch, &host(&h100()), &cell(1), &env, Some("run 'x'"));
        let node = crate::spec::yaml::parse_text(Path::new("p"), &text).expect("yaml");
        let json = node_to_json(&node);
        assert_eq!(json["source"], "tuned");
        assert_eq!(json["knobs"]["mode"], "fast");
        assert_eq!(
            json["environment"]["TUNECTL_KNOBS"],
            r#"{"mode":"fast","threads":1}"#
        );
        assert_eq!(json["command"], "run 'x'");
        assert_eq!(json["bucket"]["winner"], "mode=fast");
    }

    #[test]
    fn loading_checks_schema_study_and_duplicates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (name, text, _, _) = exported();
        assert!(
            load(dir.path())
                .expect_err("empty dir")
                .contains("no tuned files")
        );
        std::fs::write(dir.path().join(&name), &text).expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not yaml: [").expect("write");
        assert_eq!(load(dir.path()).expect("loads").len(), 1);
        std::fs::write(dir.path().join("copy.yaml"), &text).expect("write");
        assert!(
            load(dir.path())
                .expect_err("duplicate")
                .contains("both for host class")
        );
        std::fs::write(
            dir.path().join("copy.yaml"),
            text.replace("host_class: hc-", "host_class: hc-f")
                .replace("spec_hash: ", "spec_hash: x"),
        )
        .expect("write");
        assert!(
            load(dir.path())
                .expect_err("two studies")
                .contains("one study")
        );
        let bad = dir.path().join("old.yml");
        std::fs::write(&bad, "schema: 9\n").expect("write");
        assert!(load(&bad).expect_err("schema").contains("schema"));
    }

    #[test]
    fn domains_are_written_compactly_and_checked() {
        let ints: Vec<i64> = (0..40).map(|i| 8 + 4 * i).collect();
        let d = compact_domain(&json!({"kind": "int", "values": ints}));
        assert_eq!(d, json!({"kind": "int", "min": 8, "max": 164, "step": 4}));
        assert_eq!(domain_contains(&d, &json!(12)), Ok(true));
        assert_eq!(domain_contains(&d, &json!(14)), Ok(false));
        assert_eq!(domain_contains(&d, &json!(168)), Ok(false));
        assert_eq!(domain_contains(&d, &json!("12")), Ok(false));
        let floats: Vec<f64> = (0..2000).map(|i| f64::from(i) / 1000.0).collect();
        let d = compact_domain(&json!({"kind": "float", "values": floats}));
        assert_eq!(d, json!({"kind": "float", "min": 0.0, "max": 1.999}));
        assert_eq!(domain_contains(&d, &json!(0.5)), Ok(true));
        assert_eq!(domain_contains(&d, &json!(2.5)), Ok(false));
        let d = compact_domain(&json!({"kind": "categorical", "values": [1, "1", 0.5]}));
        assert_eq!(domain_contains(&d, &json!(1.0)), Ok(true));
        assert_eq!(domain_contains(&d, &json!("0.5")), Ok(false));
        assert!(domain_contains(&json!({"kind": "int"}), &json!(1)).is_err());

        let (name, text, _, _) = exported();
        let path = PathBuf::from(&name);
        let ok = parse(&path, &text).expect("parses");
        assert!(ok.domains.is_some());
        assert_eq!(check_domains(&[(path.clone(), ok)]), Ok(vec![]));
        let edited = parse(
            &path,
            &text.replacen("      mode: fast", "      mode: evil", 1),
        )
        .expect("parses");
        let err = check_domains(&[(path.clone(), edited)]).expect_err("refused");
        assert!(
            err.contains("bucket `") && err.contains("knob `mode`: \"evil\""),
            "{err}"
        );
    }
}
