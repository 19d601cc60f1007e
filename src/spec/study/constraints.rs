//! `constraints:`: expressions over knobs (and cell axes) every config must
//! satisfy, and the check that the baseline satisfies them at every cell.

use marked_yaml::Node;
use serde::Serialize;

use super::Study;
use super::parse::list_or_none;
use crate::spec::template::{self, TemplateCheck};
use crate::spec::value::Value;
use crate::spec::yaml::{Walker, index};

/// A constraint expression (minijinja syntax) that every config must satisfy.
#[derive(Debug, Clone, Serialize)]
pub struct Constraint {
    pub expr: String,
    /// Whether it names any cell axis (then it is checked per cell).
    #[serde(skip)]
    pub uses_cells: bool,
    #[serde(skip)]
    pub line: usize,
}

/// The longest constraint a study may hold. A constraint is one condition
/// over a few knobs; past this only a generated or damaged file gets, and
/// parsing one (25 KB of unary minuses) takes seconds.
pub const MAX_CONSTRAINT_BYTES: usize = 4 * 1024;

pub(super) fn parse_constraints(
    w: &mut Walker,
    node: &Node,
    knobs: &[String],
    cell_axes: &[String],
) -> Vec<Constraint> {
    let mut out = Vec::new();
    let Some(seq) = w.sequence(node, "constraints") else {
        return out;
    };
    let knob_names: Vec<&str> = knobs.iter().map(String::as_str).collect();
    let cell_names: Vec<&str> = cell_axes.iter().map(String::as_str).collect();
    for (i, item) in seq.iter().enumerate() {
        let field = index("constraints", i);
        let Some(expr) = w.string(item, &field) else {
            continue;
        };
        if expr.len() > MAX_CONSTRAINT_BYTES {
            w.error_at(
                item,
                &field,
                format!(
                    "the constraint is {} bytes long; at most {MAX_CONSTRAINT_BYTES} are accepted",
                    expr.len()
                ),
            );
            continue;
        }
        match template::expression_variables(&expr) {
            Err(e) => w.error_at(item, &field, format!("invalid constraint `{expr}`: {e}")),
            Ok(vars) => {
                let mut uses_cells = false;
                let mut bad = false;
                for v in &vars {
                    if cell_names.contains(&v.as_str()) {
                        uses_cells = true;
                    } else if !knob_names.contains(&v.as_str()) {
                        bad = true;
                        w.error_at(
                            item,
                            &field,
                            format!(
                                "constraint names `{v}`, which is neither a knob nor a cell axis (knobs: {}; cells: {})",
                                list_or_none(&knob_names),
                                list_or_none(&cell_names)
                            ),
                        );
                    }
                }
                if !bad {
                    out.push(Constraint {
                        expr,
                        uses_cells,
                        line: item.span().start().map(|m| m.line()).unwrap_or(0),
                    });
                }
            }
        }
    }
    out
}

pub(super) fn check_baseline(
    w: &mut Walker,
    map: &marked_yaml::types::MarkedMappingNode,
    study: &Study,
) {
    let Some(constraints_node) = map.get_node("constraints") else {
        return;
    };
    let checker = match TemplateCheck::new(study) {
        Ok(c) => c,
        Err(e) => {
            w.error_at(constraints_node, "constraints", e);
            return;
        }
    };
    let baseline: Vec<Value> = study.knobs.iter().map(|k| k.default.clone()).collect();
    for cell in super::cells(study) {
        match checker.violated(&baseline, &cell) {
            Ok(None) => {}
            Ok(Some(i)) => {
                let c = &study.constraints[i];
                let node = constraints_node
                    .as_sequence()
                    .and_then(|s| s.get(i))
                    .unwrap_or(constraints_node);
                let where_ = if c.uses_cells {
                    format!(" at cell {}", super::cell_label(study, &cell))
                } else {
                    String::new()
                };
                w.error_at(
                    node,
                    &index("constraints", i),
                    format!(
                        "constraint `{}` excludes the baseline (every knob at its default){where_}; the baseline must always be runnable",
                        c.expr
                    ),
                );
                return;
            }
            Err(e) => {
                w.error_at(constraints_node, "constraints", e);
                return;
            }
        }
    }
}
