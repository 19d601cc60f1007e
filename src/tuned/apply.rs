//! Apply: choosing the knobs of a host and cell from loaded tuned files
//! (only ever the file of the host's own class), the overrides from the
//! environment, the trial contract's variables and `apply --print`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};

use super::format::{describe_domain, domain_contains};
use super::{TunedBucket, TunedFile, TunedLevel, text_map};
use crate::plan::buckets;
use crate::spec::{TrialVars, Value};
use crate::yaml_out::{self, Yaml};

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
        .with("environment", text_map(env.iter().map(|(k, v)| (k, v))));
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
    use serde_json::json;

    use super::*;
    use crate::fingerprint::Fingerprint;
    use crate::tuned::node_to_json;
    use crate::tuned::tests::{exported, h100};

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
}
