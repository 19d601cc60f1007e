//! Trial command templates and constraint expressions (minijinja syntax).
//!
//! Every value interpolated into a trial command is shell-quoted by the
//! environment's formatter, so a knob value is always data, never code.
//! Undefined variables are errors, and the variables a template names are
//! checked when the study loads, long before any trial runs.

use std::collections::BTreeMap;

use minijinja::{Environment, UndefinedBehavior};

use super::shell;
use super::study::Study;
use super::value::Value;

fn base_env() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Commands are shell text, not HTML, whatever a template is named.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env
}

/// How a template value prints: like the `TUNECTL_KNOB_*` variables
/// (`true`/`false`, `1` for the float 1.0), not Python-style.
fn plain_text(value: &minijinja::Value) -> String {
    if let Some(s) = value.as_str() {
        return s.to_string();
    }
    if value.is_none() {
        return String::new();
    }
    if value.kind() == minijinja::value::ValueKind::Bool {
        return if value.is_true() { "true" } else { "false" }.to_string();
    }
    if value.kind() == minijinja::value::ValueKind::Number {
        if let Ok(i) = i64::try_from(value.clone()) {
            return i.to_string();
        }
        if let Ok(f) = f64::try_from(value.clone()) {
            return Value::Float(f).to_string();
        }
    }
    value.to_string()
}

fn strip_globals(env: &Environment<'_>, names: impl IntoIterator<Item = String>) -> Vec<String> {
    let globals: Vec<&str> = env.globals().map(|(n, _)| n).collect();
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| !globals.contains(&n.as_str()))
        .collect();
    out.sort();
    out
}

/// Top-level variables a template uses.
pub fn template_variables(source: &str) -> Result<Vec<String>, String> {
    let env = base_env();
    let tmpl = env.template_from_str(source).map_err(describe)?;
    Ok(strip_globals(&env, tmpl.undeclared_variables(false)))
}

/// Top-level variables an expression uses.
pub fn expression_variables(expr: &str) -> Result<Vec<String>, String> {
    let env = base_env();
    let compiled = env.compile_expression(expr).map_err(describe)?;
    Ok(strip_globals(&env, compiled.undeclared_variables(false)))
}

fn describe(e: minijinja::Error) -> String {
    let mut text = e.to_string();
    if let Some(detail) = e.detail()
        && !text.contains(detail)
    {
        text.push_str(": ");
        text.push_str(detail);
    }
    text
}

fn vars_value(names: &[&str], values: &[Value]) -> minijinja::Value {
    let map: BTreeMap<&str, minijinja::Value> = names
        .iter()
        .copied()
        .zip(values.iter().map(Value::to_template))
        .collect();
    minijinja::Value::from(map)
}

/// Evaluates a study's constraints on configs.
pub struct TemplateCheck {
    env: Environment<'static>,
    names: Vec<String>,
    count: usize,
    uses_cells: Vec<bool>,
}

impl TemplateCheck {
    pub fn new(study: &Study) -> Result<Self, String> {
        let mut env = base_env();
        for (i, c) in study.constraints.iter().enumerate() {
            env.add_template_owned(
                format!("constraint{i}"),
                format!("{{% if {} %}}1{{% else %}}0{{% endif %}}", c.expr),
            )
            .map_err(|e| format!("constraint `{}`: {}", c.expr, describe(e)))?;
        }
        let mut names: Vec<String> = study.knobs.iter().map(|k| k.name.clone()).collect();
        names.extend(study.cells.iter().map(|c| c.name.clone()));
        Ok(TemplateCheck {
            env,
            names,
            count: study.constraints.len(),
            uses_cells: study.constraints.iter().map(|c| c.uses_cells).collect(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Does any constraint depend on the cell?
    pub fn any_uses_cells(&self) -> bool {
        self.uses_cells.iter().any(|u| *u)
    }

    /// The index of the first constraint that `config` (knob values in
    /// study order) violates at `cell` (axis values in study order).
    pub fn violated(&self, config: &[Value], cell: &[Value]) -> Result<Option<usize>, String> {
        self.violated_where(config, cell, |_| true)
    }

    /// Like [`violated`](Self::violated), restricted to the constraints
    /// for which `select(uses_cells)` holds.
    pub fn violated_where(
        &self,
        config: &[Value],
        cell: &[Value],
        select: impl Fn(bool) -> bool,
    ) -> Result<Option<usize>, String> {
        if self.count == 0 {
            return Ok(None);
        }
        let names: Vec<&str> = self.names.iter().map(String::as_str).collect();
        let mut values: Vec<Value> = config.to_vec();
        values.extend(cell.iter().cloned());
        let ctx = vars_value(&names, &values);
        for i in 0..self.count {
            if !select(self.uses_cells[i]) {
                continue;
            }
            let tmpl = self
                .env
                .get_template(&format!("constraint{i}"))
                .map_err(describe)?;
            let out = tmpl.render(&ctx).map_err(describe)?;
            if out != "1" {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }
}

/// Renders trial commands and environments.
pub struct CommandRenderer {
    shell: Environment<'static>,
    plain: Environment<'static>,
    env_names: Vec<String>,
    /// The command's field in the study (`trial.command`...).
    field: String,
}

/// Marks a value in rendered text: `SENTINEL`, its text in hex, `SENTINEL`.
/// A template's own text has no NUL (checked), so the marks are unambiguous.
const SENTINEL: char = '\0';

/// An environment whose every interpolated value is marked, to be quoted
/// for its shell context once the whole text is rendered ([`finish`]).
fn shell_env() -> Environment<'static> {
    let mut shell = base_env();
    shell.set_formatter(|out, _state, value| {
        if value.is_undefined() {
            return Err(minijinja::Error::new(
                minijinja::ErrorKind::UndefinedError,
                "undefined value",
            ));
        }
        let text = plain_text(value);
        write!(out, "{SENTINEL}{}{SENTINEL}", hex::encode(text.as_bytes()))
            .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::WriteFailure, e.to_string()))
    });
    shell
}

/// The values marked in `text`, written out plainly (a value can hold
/// marked text when a macro or `{% set %}` block captured output).
fn unmark(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut parts = text.split(SENTINEL);
    if let Some(first) = parts.next() {
        out.push_str(first);
    }
    let mut inside = true;
    for part in parts {
        if inside {
            let bytes = hex::decode(part)
                .map_err(|_| "a value's text was changed by a filter; quote it with the filter applied to the value itself".to_string())?;
            let value = String::from_utf8(bytes).map_err(|e| e.to_string())?;
            out.push_str(&unmark(&value)?);
        } else {
            out.push_str(part);
        }
        inside = !inside;
    }
    Ok(out)
}

/// Quote the marked values of rendered shell text for their context.
fn finish(rendered: &str) -> Result<String, String> {
    let mut items = Vec::new();
    let mut values = Vec::new();
    let mut parts = rendered.split(SENTINEL);
    if let Some(first) = parts.next() {
        items.extend(first.chars().map(shell::Item::Char));
    }
    let mut inside = true;
    for part in parts {
        if inside {
            let text = unmark(&format!("{SENTINEL}{part}{SENTINEL}"))?;
            if text.contains('\0') {
                return Err(format!(
                    "value {} contains a NUL byte, which no command line can carry",
                    values.len() + 1
                ));
            }
            items.push(shell::Item::Value(values.len()));
            values.push(text);
        } else {
            items.extend(part.chars().map(shell::Item::Char));
        }
        inside = !inside;
    }
    let quoting = shell::scan(&items).map_err(|r| {
        let v = values.get(r.value).map(String::as_str).unwrap_or("");
        let shown: String = v.chars().take(40).collect();
        format!("value {} ({shown:?}): {}", r.value + 1, r.why)
    })?;
    let mut out = String::with_capacity(rendered.len());
    for item in items {
        match item {
            shell::Item::Char(c) => out.push(c),
            shell::Item::Value(k) => {
                let q = quoting
                    .get(k)
                    .ok_or_else(|| format!("value {}: cannot tell its shell context", k + 1))?;
                out.push_str(&shell::quote(&values[k], *q));
            }
        }
    }
    Ok(out)
}

/// Check a shell command template's text: no NUL, and every `{{ }}` in a
/// shell context where its value can be quoted. On a problem: the byte
/// offset in `source` it concerns (a `{{`, or 0) and what it is.
pub fn check_shell_template(source: &str) -> Result<(), (usize, String)> {
    if let Some(p) = source.find('\0') {
        return Err((p, "the template contains a NUL byte".to_string()));
    }
    let (items, holes) = shell::source_items(source);
    shell::scan(&items)
        .map(|_| ())
        .map_err(|r| (holes.get(r.value).copied().unwrap_or(0), r.why))
}

fn check_or_describe(source: &str) -> Result<(), String> {
    check_shell_template(source).map_err(|(at, why)| {
        let line = source[..at].matches('\n').count() + 1;
        let column = source[..at].rfind('\n').map_or(at, |n| at - n - 1) + 1;
        format!("at line {line}, column {column} of the template: {why}")
    })
}

/// Render a one-off command template the way trial commands are rendered:
/// every value quoted for its shell context, undefined variables an error.
pub fn render_shell(source: &str, vars: &TrialVars) -> Result<String, String> {
    check_or_describe(source)?;
    let env = shell_env();
    let tmpl = env.template_from_str(source).map_err(describe)?;
    finish(&tmpl.render(vars.to_value()).map_err(describe)?)
}

impl CommandRenderer {
    /// Renders `trial.command` and `trial.env`.
    pub fn new(study: &Study) -> Result<Self, String> {
        Self::build(study, &study.trial.command, "trial.command")
    }

    /// Renders `command` instead of `trial.command`, with the same
    /// `trial.env` (the objective stage of an adaptive search runs
    /// `objective.command` when the study has one).
    pub fn with_command(study: &Study, command: &str) -> Result<Self, String> {
        let field = if study.objective_command.as_deref() == Some(command) {
            "objective.command"
        } else if study.trial.command == command {
            "trial.command"
        } else {
            "command"
        };
        Self::build(study, command, field)
    }

    /// `field` names the command in errors.
    fn build(study: &Study, command: &str, field: &str) -> Result<Self, String> {
        check_or_describe(command).map_err(|e| format!("{field}: {e}"))?;
        let mut shell = shell_env();
        shell
            .add_template_owned("command", command.to_string())
            .map_err(|e| format!("{field}: {}", describe(e)))?;
        let mut plain = base_env();
        plain.set_formatter(|out, _state, value| {
            out.write_str(&plain_text(value)).map_err(|e| {
                minijinja::Error::new(minijinja::ErrorKind::WriteFailure, e.to_string())
            })
        });
        let mut env_names = Vec::new();
        for (k, v) in &study.trial.env {
            plain
                .add_template_owned(format!("env.{k}"), v.clone())
                .map_err(|e| format!("trial.env.{k}: {}", describe(e)))?;
            env_names.push(k.clone());
        }
        Ok(CommandRenderer {
            shell,
            plain,
            env_names,
            field: field.to_string(),
        })
    }

    /// Render the command and every environment entry once; the first that
    /// fails is named by its field (`trial.command`, `trial.env.X`), with
    /// the error.
    pub fn try_render(&self, vars: &TrialVars) -> Result<(), (String, String)> {
        self.command(vars).map_err(|e| (self.field.clone(), e))?;
        let ctx = vars.to_value();
        for k in &self.env_names {
            let rendered = self
                .plain
                .get_template(&format!("env.{k}"))
                .and_then(|t| t.render(&ctx));
            if let Err(e) = rendered {
                return Err((format!("trial.env.{k}"), describe(e)));
            }
        }
        Ok(())
    }

    /// Render the command with every value quoted for its shell context.
    pub fn command(&self, vars: &TrialVars) -> Result<String, String> {
        let tmpl = self.shell.get_template("command").map_err(describe)?;
        finish(&tmpl.render(vars.to_value()).map_err(describe)?)
    }

    /// Render the extra environment variables (values are not quoted: they
    /// never pass through a shell).
    pub fn env(&self, vars: &TrialVars) -> Result<Vec<(String, String)>, String> {
        let ctx = vars.to_value();
        let mut out = Vec::new();
        for k in &self.env_names {
            let tmpl = self
                .plain
                .get_template(&format!("env.{k}"))
                .map_err(describe)?;
            out.push((k.clone(), tmpl.render(&ctx).map_err(describe)?));
        }
        Ok(out)
    }
}

/// Everything a trial template can name.
#[derive(Debug, Clone, Default)]
pub struct TrialVars {
    pub entries: BTreeMap<String, Value>,
}

impl TrialVars {
    pub fn set(&mut self, name: &str, value: Value) {
        self.entries.insert(name.to_string(), value);
    }

    fn to_value(&self) -> minijinja::Value {
        let map: BTreeMap<&str, minijinja::Value> = self
            .entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_template()))
            .collect();
        minijinja::Value::from(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_of_templates_and_expressions() {
        assert_eq!(
            template_variables(
                "run --t {{ threads }} {% if fast %}--fast{% endif %} {{ range(3) | length }}"
            )
            .expect("valid"),
            vec!["fast".to_string(), "threads".to_string()]
        );
        assert_eq!(
            expression_variables("dtype == 'bf16' or not compile").expect("valid"),
            vec!["compile".to_string(), "dtype".to_string()]
        );
        assert!(template_variables("{{ unclosed").is_err());
    }

    #[test]
    fn one_off_commands_are_quoted_like_trial_commands() {
        let mut vars = TrialVars::default();
        vars.set("mode", Value::Str("; rm -rf /".into()));
        vars.set("n", Value::Float(2.0));
        assert_eq!(
            render_shell("run {{ mode }} {{ n }}", &vars).expect("renders"),
            "run '; rm -rf /' 2"
        );
        assert!(render_shell("run {{ missing }}", &vars).is_err());
    }

    #[test]
    fn a_renderer_for_another_command_keeps_the_env() {
        let text = "name: t\nknobs:\n  x: {kind: int, values: [1, 2], default: 1}\nfidelity: {unit: samples, min_budget: 1, max_budget: 9}\ntrial:\n  command: 'rung {{ x }} {{ budget }}'\n  env: {X: '{{ x }}'}\nobjective: {metric: t, better: higher, command: 'full {{ x }} {{ budget }}'}\n";
        let study = Study::from_text(std::path::Path::new("t.yaml"), text).expect("valid study");
        let objective = study.objective_command.clone().expect("objective.command");
        let mut vars = TrialVars::default();
        vars.set("x", Value::Int(2));
        vars.set("budget", Value::Int(9));
        let trial = CommandRenderer::new(&study).expect("renderer");
        let full = CommandRenderer::with_command(&study, &objective).expect("renderer");
        assert_eq!(trial.command(&vars).expect("renders"), "rung 2 9");
        assert_eq!(full.command(&vars).expect("renders"), "full 2 9");
        let env = vec![("X".to_string(), "2".to_string())];
        assert_eq!(trial.env(&vars).expect("env"), env);
        assert_eq!(full.env(&vars).expect("env"), env);
        let err = CommandRenderer::with_command(&study, "x {{ unclosed").err();
        assert!(err.is_some_and(|e| e.starts_with("command: ")));
    }

    #[test]
    fn values_print_like_the_knob_variables() {
        assert_eq!(plain_text(&minijinja::Value::from(true)), "true");
        assert_eq!(plain_text(&minijinja::Value::from(1.0f64)), "1");
        assert_eq!(plain_text(&minijinja::Value::from(0.25f64)), "0.25");
        assert_eq!(plain_text(&minijinja::Value::from(7i64)), "7");
    }
}
