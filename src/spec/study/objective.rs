//! `objective:` and `metrics:`: the metric a study optimises and the further
//! metrics it reads, and `objective.command`, the objective stage's own
//! command in an adaptive search.

use marked_yaml::Node;
use serde::{Deserialize, Serialize};

use super::Strategy;
use crate::spec::yaml::{Walker, index, is_identifier, join};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
}

impl Better {
    pub fn as_str(self) -> &'static str {
        match self {
            Better::Higher => "higher is better",
            Better::Lower => "lower is better",
        }
    }

    /// As the study file and the frozen spec write it.
    pub fn name(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    pub better: Better,
}

/// Keys of `objective` and of `metrics:` entries (`metric` for the
/// objective, `name` for the others; `command` is the objective's alone,
/// see [`parse_objective_command`]).
const METRIC_KEYS: &[&str] = &["metric", "name", "unit", "better", "command"];

pub(super) fn parse_metric(
    w: &mut Walker,
    node: &Node,
    field: &str,
    is_objective: bool,
) -> Option<Metric> {
    let map = w.mapping(node, field)?;
    let name_key = if is_objective { "metric" } else { "name" };
    let allowed: Vec<&str> = METRIC_KEYS
        .iter()
        .copied()
        .filter(|k| *k != if is_objective { "name" } else { "metric" })
        .collect();
    w.check_keys(map, field, &allowed);
    if !is_objective && let Some(n) = map.get_node("command") {
        w.error_at(
            n,
            &join(field, "command"),
            "only the objective has a `command` (`objective.command`); a further metric is read from the same result",
        );
    }
    let name = w
        .required(map, field, name_key)
        .and_then(|n| w.string(n, &join(field, name_key)));
    let unit = match map.get_node("unit") {
        Some(n) => w.string(n, &join(field, "unit")),
        None => Some(String::new()),
    };
    let better_node = w.required(map, field, "better");
    let better = better_node.and_then(|n| {
        let f = join(field, "better");
        match w.string(n, &f)?.as_str() {
            "higher" => Some(Better::Higher),
            "lower" => Some(Better::Lower),
            other => {
                w.error_at(
                    n,
                    &f,
                    format!("expected `higher` or `lower`, found `{other}`"),
                );
                None
            }
        }
    });
    if let (Some(n), Some(node)) = (&name, map.get_node(name_key))
        && !is_identifier(n)
    {
        w.error_at(
            node,
            &join(field, name_key),
            format!("`{n}` is not a valid metric name"),
        );
    }
    Some(Metric {
        name: name?,
        unit: unit?,
        better: better?,
    })
}

pub(super) fn parse_metrics(
    w: &mut Walker,
    node: &Node,
    objective: Option<&Metric>,
) -> Vec<Metric> {
    let mut out: Vec<Metric> = Vec::new();
    let Some(seq) = w.sequence(node, "metrics") else {
        return out;
    };
    for (i, item) in seq.iter().enumerate() {
        let field = index("metrics", i);
        if let Some(m) = parse_metric(w, item, &field, false) {
            if objective.is_some_and(|o| o.name == m.name) || out.iter().any(|x| x.name == m.name) {
                w.error_at(
                    item,
                    &field,
                    format!("metric `{}` is declared twice", m.name),
                );
                continue;
            }
            out.push(m);
        }
    }
    out
}

/// Metric names under `metrics:` as written, valid entries or not.
pub(super) fn declared_metric_names(map: &marked_yaml::types::MarkedMappingNode) -> Vec<String> {
    map.get_sequence("metrics")
        .map(|seq| {
            seq.iter()
                .filter_map(|item| item.as_mapping()?.get_scalar("name"))
                .map(|n| n.as_str().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// `objective.command`: `Some(None)` when not written, `None` on an error.
pub(super) fn parse_objective_command(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    strategy: Option<&Strategy>,
) -> Option<Option<String>> {
    let Some(n) = map
        .get_mapping("objective")
        .and_then(|o| o.get_node("command"))
    else {
        return Some(None);
    };
    let command = w.string(n, "objective.command")?;
    if command.trim().is_empty() {
        w.error_at(n, "objective.command", "the command is empty");
        return None;
    }
    match strategy {
        Some(s) if !s.is_adaptive() => {
            w.error_at(
                n,
                "objective.command",
                format!(
                    "applies only to the objective stage of an adaptive search (`strategy.kind: hyperband` or `tpe`); with `{}` every trial runs `trial.command`",
                    s.name()
                ),
            );
            None
        }
        Some(_) => Some(Some(command)),
        // The strategy's own problem is reported.
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::spec::study::Study;
    use crate::spec::study::tests::{BASE, load};

    #[test]
    fn objective_command_is_for_adaptive_searches() {
        let s = load("fidelity: {unit: samples, min_budget: 1, max_budget: 9}\n").expect("valid");
        assert_eq!(s.objective_command, None);
        let text = BASE.replace(
            "better: lower}\nmetrics",
            "better: lower, command: 'full {{ x }} {{ budget }}'}\nmetrics",
        );
        let s = Study::from_text(
            Path::new("s.yaml"),
            &format!("{text}fidelity: {{unit: samples, min_budget: 1, max_budget: 9}}\n"),
        )
        .expect("valid");
        assert_eq!(
            s.objective_command.as_deref(),
            Some("full {{ x }} {{ budget }}")
        );
        let s = Study::from_text(
            Path::new("s.yaml"),
            &format!("{text}strategy: {{kind: tpe, count: 3}}\n"),
        )
        .expect("valid");
        assert!(s.objective_command.is_some());
        // The objective's command, with the objective's spec hash.
        let plain = load("strategy: {kind: tpe, count: 3}\n").expect("valid");
        assert_ne!(s.spec_hash(), plain.spec_hash());

        let problem_in = |text: &str| -> String {
            let diags = Study::from_text(Path::new("s.yaml"), text).expect_err("a problem");
            let lines: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
            assert_eq!(lines.len(), 1, "expected one problem, got {lines:#?}");
            lines.into_iter().next().unwrap_or_default()
        };
        assert_eq!(
            problem_in(&text),
            "s.yaml:6:57: objective.command: applies only to the objective stage of an adaptive search (`strategy.kind: hyperband` or `tpe`); with `grid` every trial runs `trial.command`"
        );
        let unknown = BASE.replace(
            "better: lower}\nmetrics",
            "better: lower, command: 'full {{ z }}'}\nmetrics",
        );
        assert!(
            problem_in(&format!("{unknown}strategy: {{kind: tpe, count: 3}}\n")).starts_with(
                "s.yaml:6:57: objective.command: unknown template variable `z` (known: study, "
            )
        );
        let metric_command = BASE.replace(
            "metrics: [{name: loss, better: lower}]",
            "metrics: [{name: loss, better: lower, command: x}]",
        );
        assert_eq!(
            problem_in(&format!(
                "{metric_command}strategy: {{kind: tpe, count: 3}}\n"
            )),
            "s.yaml:7:48: metrics[0].command: only the objective has a `command` (`objective.command`); a further metric is read from the same result"
        );
    }
}
