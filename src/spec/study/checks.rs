//! Checks of the study as a whole, across its sections: template variables
//! and shell quoting, the study's size, every template rendered once, and
//! warnings for what is valid but likely a mistake.

use marked_yaml::Node;

use super::{RESERVED_VARIABLES, Study};
use crate::spec::template;
use crate::spec::value::Value;
use crate::spec::yaml::{Walker, join};

/// Settings that are valid but under which no candidate can win, and knobs
/// the trial never sees: warnings, with where.
pub(super) fn warn_about(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    study: &Study,
) {
    let m = &study.measurement;
    let measurement = map.get_node("measurement");
    let at = |key: &str| {
        measurement
            .and_then(|n| n.as_mapping())
            .and_then(|m| m.get_node(key))
            .or(measurement)
            .map(|n| *n.span())
            .unwrap_or_else(|| *map.span())
    };
    if m.repeats < 2 {
        let span = at("repeats");
        w.warn(
            &span,
            "measurement.repeats",
            format!(
                "{}: one run per config shows nothing of how runs vary: a speedup's interval then takes the run's samples as runs (right only when each is an independent run, as hyperfine's are), and with one sample a run no candidate can win; set repeats: 2 or more (3 is the default)",
                m.repeats
            ),
        );
    } else if study.selection.min_samples > m.repeats {
        let span = map
            .get_node("selection")
            .and_then(|n| n.as_mapping())
            .and_then(|s| s.get_node("min_samples"))
            .map(|n| *n.span())
            .unwrap_or_else(|| at("repeats"));
        w.warn(
            &span,
            "selection.min_samples",
            format!(
                "{} is more than measurement.repeats ({}): unless each run reports at least {} samples, no candidate can win",
                study.selection.min_samples,
                m.repeats,
                study.selection.min_samples.div_ceil(m.repeats)
            ),
        );
    }
    if m.max_repeats < m.repeats {
        let span = at("max_repeats");
        w.warn(
            &span,
            "measurement.max_repeats",
            format!(
                "{} is below measurement.repeats ({}): nothing is raced; the sweep's repeats are the cap",
                m.max_repeats, m.repeats
            ),
        );
    }
    // A knob neither the command nor the environment names: unless the
    // program reads TUNECTL_KNOB_<NAME> or TUNECTL_KNOBS itself, all its
    // values measure the same thing.
    let mut texts: Vec<&str> = vec![study.trial.command.as_str()];
    texts.extend(study.trial.env.values().map(String::as_str));
    texts.extend(study.trial.files.values().map(String::as_str));
    if let Some(c) = &study.objective_command {
        texts.push(c);
    }
    let reads_all = texts.iter().any(|t| t.contains("TUNECTL_KNOB"));
    if reads_all {
        return;
    }
    let knobs_node = map.get_node("knobs").and_then(|n| n.as_mapping());
    for k in &study.knobs {
        let named = texts.iter().any(|t| {
            t.match_indices(k.name.as_str()).any(|(i, _)| {
                let before = t[..i].chars().next_back();
                let after = t[i + k.name.len()..].chars().next();
                let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                !word(before) && !word(after)
            })
        });
        if !named {
            let span = knobs_node
                .and_then(|m| m.iter().find(|(key, _)| key.as_str() == k.name))
                .map(|(key, _)| *key.span())
                .unwrap_or_else(|| *map.span());
            w.warn(
                &span,
                &format!("knobs.{}", k.name),
                format!(
                    "`{}` appears in neither trial.command nor trial.env (nor trial.files): unless the program reads TUNECTL_KNOB_{} or TUNECTL_KNOBS, every value of it measures the same thing",
                    k.name,
                    k.name.to_uppercase()
                ),
            );
        }
    }
}

/// The longest template (`trial.command`, `objective.command`, a
/// `trial.env` value) a study may hold.
pub const MAX_TEMPLATE_BYTES: usize = 16 * 1024;

pub(super) fn check_templates(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    knobs: &[String],
    cells: &[String],
) {
    let mut known: Vec<String> = RESERVED_VARIABLES.iter().map(|s| s.to_string()).collect();
    known.extend(knobs.iter().cloned());
    known.extend(cells.iter().cloned());
    let trial = map.get_mapping("trial");
    let check = |w: &mut Walker, node: &Node, field: &str, source: &str| {
        // A template is a command line, not a program: past this size only
        // a generated or damaged file gets, and parsing one (a 30 KB
        // expression of unary minuses) takes seconds.
        if source.len() > MAX_TEMPLATE_BYTES {
            w.error_at(
                node,
                field,
                format!(
                    "the template is {} bytes long; at most {MAX_TEMPLATE_BYTES} are accepted",
                    source.len()
                ),
            );
            return;
        }
        match template::template_variables(source) {
            Err(e) => w.error_at(node, field, format!("invalid template: {e}")),
            Ok(vars) => {
                for v in vars {
                    if !known.contains(&v) {
                        w.error_at(
                            node,
                            field,
                            format!(
                                "unknown template variable `{v}` (known: {})",
                                known.join(", ")
                            ),
                        );
                    }
                }
            }
        }
    };
    let text = |n: &Node| n.as_scalar().map(|s| s.as_str().to_string());
    // Commands run through a shell: every value must land where it can be
    // quoted (see spec::shell).
    let shell_check = |w: &mut Walker, node: &Node, field: &str, source: &str| {
        if let Err((at, why)) = template::check_shell_template(source) {
            let nth = source[..at].matches("{{").count();
            if source[at..].starts_with("{{") {
                w.error_inside(node, "{{", nth, field, why);
            } else {
                w.error_at(node, field, why);
            }
        }
    };
    if let Some(n) = trial.and_then(|t| t.get_node("command"))
        && let Some(source) = text(n)
    {
        check(w, n, "trial.command", &source);
        shell_check(w, n, "trial.command", &source);
    }
    if let Some(env) = trial.and_then(|t| t.get_mapping("env")) {
        for (k, n) in env.iter() {
            if let Some(source) = text(n) {
                check(w, n, &join("trial.env", k.as_str()), &source);
            }
        }
    }
    if let Some(n) = map
        .get_mapping("objective")
        .and_then(|o| o.get_node("command"))
        && let Some(source) = text(n)
    {
        check(w, n, "objective.command", &source);
        shell_check(w, n, "objective.command", &source);
    }
}

/// Most renders [`check_rendering`] makes of each command.
const MAX_CHECK_RENDERS: usize = 10_000;

/// Render the trial command, its environment and `objective.command` once
/// with the baseline at the first cell, then (when there are at most
/// [`MAX_CHECK_RENDERS`] of them) with each knob's every value, the others
/// at their defaults, and with the baseline at every cell; configs a
/// constraint excludes are skipped. An error that only shows when a template
/// is rendered (an unknown filter, an attribute of a number, a division by
/// zero) is reported here, at the template, instead of failing every trial.
pub(super) fn check_rendering(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    study: &Study,
) {
    let baseline: Vec<Value> = study.knobs.iter().map(|k| k.default.clone()).collect();
    let cells = super::cells(study);
    let Some(first_cell) = cells.first() else {
        return;
    };
    let mut points: Vec<(Vec<Value>, &[Value])> = vec![(baseline.clone(), first_cell)];
    let more = study.knobs.iter().map(|k| k.values.len()).sum::<usize>() + cells.len();
    if more <= MAX_CHECK_RENDERS {
        for (i, knob) in study.knobs.iter().enumerate() {
            for v in knob.values.iter().filter(|v| **v != knob.default) {
                let mut config = baseline.clone();
                config[i] = v.clone();
                points.push((config, first_cell));
            }
        }
        points.extend(
            cells
                .iter()
                .skip(1)
                .map(|c| (baseline.clone(), c.as_slice())),
        );
    }
    let checker = template::TemplateCheck::new(study).ok();
    let budget = |b: f64| {
        if b.fract() == 0.0 && b.abs() < 9.0e15 {
            Value::Int(b as i64)
        } else {
            Value::Float(b)
        }
    };
    // Rung trials run `trial.command` from min_budget up; the others (and
    // `objective.command`) at max_budget.
    let (trial_budgets, objective_budget) = match &study.fidelity {
        Some(f) => (
            vec![
                budget(f.trial_budget(f.min_budget)),
                budget(f.trial_budget(f.max_budget)),
            ],
            budget(f.trial_budget(f.max_budget)),
        ),
        None => (vec![Value::Null], Value::Null),
    };
    let mut renderers = vec![(
        template::CommandRenderer::new(study),
        "trial.command",
        trial_budgets,
    )];
    if let Some(c) = &study.objective_command {
        renderers.push((
            template::CommandRenderer::with_command(study, c),
            "objective.command",
            vec![objective_budget],
        ));
    }
    let node_of = |field: &str| -> Option<&Node> {
        let mut parts = field.split('.');
        let mut node = map.get_node(parts.next()?)?;
        for p in parts {
            node = node.as_mapping()?.get_node(p)?;
        }
        Some(node)
    };
    for (renderer, field, budgets) in renderers {
        let renderer = match renderer {
            Ok(r) => r,
            Err(e) => {
                if let Some(n) = node_of(field) {
                    w.error_at(n, field, format!("invalid template: {e}"));
                }
                continue;
            }
        };
        'points: for (config, cell) in &points {
            if let Some(c) = &checker
                && !matches!(c.violated(config, cell), Ok(None))
            {
                continue;
            }
            for b in &budgets {
                let mut vars = template::TrialVars::default();
                for (k, v) in study.knobs.iter().zip(config) {
                    vars.set(&k.name, v.clone());
                }
                for (a, v) in study.cells.iter().zip(cell.iter()) {
                    vars.set(&a.name, v.clone());
                }
                let text = |s: &str| Value::Str(s.to_string());
                vars.set("study", text(&study.name));
                vars.set("study_dir", text(&study.dir.display().to_string()));
                vars.set("trial_id", text(&"0".repeat(64)));
                vars.set("trial_dir", text("/tmp/tunectl-work/trial"));
                vars.set(
                    "result",
                    text("/tmp/tunectl-work/trial/tunectl-result.json"),
                );
                vars.set("repeat", Value::Int(0));
                vars.set("budget", b.clone());
                vars.set("host", text("local"));
                vars.set("slot", Value::Int(0));
                vars.set("phase", text("measure"));
                if let Err((failed, e)) = renderer.try_render(&vars) {
                    let config_label = study
                        .knobs
                        .iter()
                        .zip(config)
                        .map(|(k, v)| format!("{}={v}", k.name))
                        .collect::<Vec<_>>()
                        .join(" ");
                    let at = if config == &baseline {
                        "the baseline".to_string()
                    } else {
                        format!("config {config_label}")
                    };
                    let cell_text = if study.cells.is_empty() {
                        String::new()
                    } else {
                        format!(" at cell {}", super::cell_label(study, cell))
                    };
                    if let Some(n) = node_of(&failed) {
                        w.error_at(
                            n,
                            &failed,
                            format!("the template fails to render for {at}{cell_text}: {e}"),
                        );
                    }
                    break 'points;
                }
            }
        }
    }
}

/// Refuse a study too large to plan ([`super::check_size`]): at
/// `knobs` when its grid is what is too large, else at `cells`.
pub(super) fn refuse_too_large(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    study: &Study,
) {
    use super::TooLarge;
    if let Err(e) = super::check_size(study) {
        let at = match &e {
            TooLarge::Grid(_) => None,
            TooLarge::Cells(_) | TooLarge::Pairs(_) => map.get_node("cells").map(|n| (n, "cells")),
        }
        .or_else(|| map.get_node("knobs").map(|n| (n, "knobs")));
        if let Some((node, field)) = at {
            w.error_at(node, field, e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Settings under which no candidate can win, and a knob the trial
    /// never sees, are warnings with their place; a study without them has
    /// none.
    #[test]
    fn warnings_name_where_no_candidate_can_win_and_knobs_never_seen() {
        let text = "name: w
knobs:
  mode: {kind: categorical, values: [a, b], default: a}
  unused: {kind: int, values: [1, 2], default: 1}
trial: {command: \"run {{ mode }}\"}
objective: {metric: t, unit: s, better: lower}
measurement: {repeats: 1, max_repeats: 1}
";
        let s = Study::from_text(Path::new("w.yaml"), text).expect("valid");
        let at: Vec<(usize, &str)> = s
            .warnings
            .iter()
            .map(|d| (d.line, d.field.as_str()))
            .collect();
        assert_eq!(
            at,
            [(7, "measurement.repeats"), (4, "knobs.unused")],
            "{:?}",
            s.warnings
        );
        assert!(s.warnings[0].message.contains("samples as runs"));
        let text = text
            .replace("repeats: 1, max_repeats: 1", "repeats: 2")
            .replace("selection", "")
            + "selection: {min_samples: 4}\n";
        let s = Study::from_text(Path::new("w.yaml"), &text).expect("valid");
        assert!(
            s.warnings
                .iter()
                .any(|d| d.field == "selection.min_samples"
                    && d.message.contains("at least 2 samples")),
            "{:?}",
            s.warnings
        );
        // A knob read from the environment by name is seen.
        let text = "name: e
knobs:
  mode: {kind: categorical, values: [a, b], default: a}
trial: {command: \"run\", env: {MODE: \"{{ mode }}\"}}
objective: {metric: t, unit: s, better: lower}
";
        let s = Study::from_text(Path::new("e.yaml"), text).expect("valid");
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    }
}
