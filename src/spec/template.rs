//! Trial command templates and constraint expressions (minijinja syntax).
//!
//! No value interpolated into a trial command is ever written into its
//! text: every `{{ }}` of a command becomes a reference to an environment
//! variable (`"${TUNECTL_KNOB_V}"`) that the command's environment sets to
//! the value, so a knob value reaches the shell only as the result of an
//! expansion, which is data, never code (docs/security.md). Undefined
//! variables are errors, and the variables a template names are checked
//! when the study loads, long before any trial runs.

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

/// The longest tag (`{{ ... }}`, `{% ... %}`, from its opening to its
/// closing or the end of the template) a template may hold. A tag names a
/// knob, perhaps with a filter or a test; past this size only a generated
/// or damaged file gets, and the template engine takes time that grows
/// faster than the tag (16 KB of unary minuses: about 2 s).
pub const MAX_TAG_BYTES: usize = 1024;

/// Refuse a template with a tag longer than [`MAX_TAG_BYTES`], before it
/// is parsed.
pub fn check_tag_sizes(source: &str) -> Result<(), String> {
    let mut rest = source;
    let mut offset = 0;
    while let Some(open) = rest.find(['{']) {
        let after = &rest[open..];
        let close = if after.starts_with("{{") {
            "}}"
        } else if after.starts_with("{%") {
            "%}"
        } else {
            offset += open + 1;
            rest = &rest[open + 1..];
            continue;
        };
        let body = &after[2..];
        let len = body.find(close).unwrap_or(body.len());
        if len > MAX_TAG_BYTES {
            return Err(format!(
                "the tag at byte {} is {len} bytes long; at most {MAX_TAG_BYTES} are accepted",
                offset + open
            ));
        }
        let next = open + 2 + (len + close.len()).min(body.len());
        offset += next;
        rest = &rest[next..];
    }
    Ok(())
}

/// Top-level variables a template uses.
pub fn template_variables(source: &str) -> Result<Vec<String>, String> {
    check_tag_sizes(source)?;
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

/// A command rendered from its template: no value is in its text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    /// The template's text, with a reference to an environment variable
    /// (`"${TUNECTL_KNOB_V}"`, or `${TUNECTL_KNOB_V}` inside `"..."`) at
    /// every `{{ }}`.
    pub command: String,
    /// Every variable the command refers to, with its value (the text the
    /// `{{ }}` gave), in the order of first reference.
    pub vars: Vec<(String, String)>,
    /// The variables among [`vars`](Self::vars) that the environment the
    /// command was rendered for does not hold with that value: the
    /// command's environment must add them (`TUNECTL_ARG_<n>`, named after
    /// the first hole that needed each).
    pub env: Vec<(String, String)>,
}

/// Marks a value in rendered text: `SENTINEL`, its text in hex, then, for
/// a `{{ name }}` of a template variable, `:` and the name, `SENTINEL`. A
/// template's own text has no NUL (checked), so the marks are unambiguous.
const SENTINEL: char = '\0';

/// What a `{{ name }}` of a command template is rewritten to call
/// ([`name_holes`]): `__tunectl_named("name", name)`.
const NAMED_FN: &str = "__tunectl_named";

/// Names starting with this are tunectl's own in a template ([`NAMED_FN`]):
/// no knob or cell axis may take one.
pub const RESERVED_PREFIX: &str = "__tunectl";

/// A value and the template variable it was read from, so that its hole
/// can refer to the trial contract's variable of that name.
#[derive(Debug)]
struct Named {
    name: String,
    value: minijinja::Value,
}

impl minijinja::value::Object for Named {
    fn repr(self: &std::sync::Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Plain
    }

    fn render(self: &std::sync::Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&plain_text(&self.value))
    }
}

/// An environment whose every interpolated value is marked, to be replaced
/// by a reference to a variable once the whole text is rendered
/// ([`finish`]).
fn shell_env() -> Environment<'static> {
    let mut shell = base_env();
    shell.add_function(NAMED_FN, |name: String, value: minijinja::Value| {
        if shell::is_variable_name(&name) {
            minijinja::Value::from_object(Named { name, value })
        } else {
            value
        }
    });
    shell.set_formatter(|out, _state, value| {
        let (value, name) = match value.downcast_object_ref::<Named>() {
            Some(n) => (&n.value, Some(n.name.as_str())),
            None => (value, None),
        };
        if value.is_undefined() {
            return Err(minijinja::Error::new(
                minijinja::ErrorKind::UndefinedError,
                "undefined value",
            ));
        }
        let text = plain_text(value);
        let name = name.map(|n| format!(":{n}")).unwrap_or_default();
        write!(
            out,
            "{SENTINEL}{}{name}{SENTINEL}",
            hex::encode(text.as_bytes())
        )
        .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::WriteFailure, e.to_string()))
    });
    shell
}

/// `source` with every `{{ name }}` (a bare variable name, whitespace
/// control allowed) written `{{ __tunectl_named("name", name) }}`, so that
/// its value is marked with the name it was read from. Only the choice of
/// the variable a hole refers to depends on this; a `{{` it misreads just
/// gets a `TUNECTL_ARG_<n>`.
fn name_holes(source: &str) -> String {
    let (_, holes) = shell::source_items(source);
    let mut out = String::with_capacity(source.len() + 40 * holes.len());
    let mut at = 0;
    for h in holes {
        let body = &source[h.body.clone()];
        let lead = body.strip_prefix(['-', '+']).map_or(0, |_| 1);
        let core_from = lead + (body[lead..].len() - body[lead..].trim_start().len());
        let tail = body
            .strip_suffix(['-', '+'])
            .map_or(body.len(), |b| b.len());
        let core_to = body[..tail].trim_end().len();
        if core_from >= core_to {
            continue;
        }
        let core = &body[core_from..core_to];
        if !shell::is_variable_name(core)
            || matches!(core, "true" | "false" | "none" | "True" | "False" | "None")
        {
            continue;
        }
        let from = h.body.start + core_from;
        out.push_str(&source[at..from]);
        out.push_str(&format!("{NAMED_FN}(\"{core}\", {core})"));
        at = h.body.start + core_to;
    }
    out.push_str(&source[at..]);
    out
}

/// One mark's content (between its `SENTINEL`s): the value's text, with
/// its own marks written out plainly, and the variable name it carries.
fn read_mark(part: &str) -> Result<(String, Option<String>), String> {
    let (hex_text, name) = match part.split_once(':') {
        Some((h, n)) => (h, Some(n.to_string())),
        None => (part, None),
    };
    let bytes = hex::decode(hex_text).map_err(|_| {
        "a value's text was changed by a filter; apply the filter to the value itself".to_string()
    })?;
    let value = String::from_utf8(bytes).map_err(|e| e.to_string())?;
    Ok((unmark(&value)?, name))
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
            out.push_str(&read_mark(part)?.0);
        } else {
            out.push_str(part);
        }
        inside = !inside;
    }
    Ok(out)
}

/// The trial contract's variables that hold the template variable `name`,
/// when its hole's text is theirs: `TUNECTL_STUDY` for `study`...,
/// `TUNECTL_KNOB_<NAME>` for a knob, `TUNECTL_CELL_<NAME>` for a cell axis.
fn contract_variables(name: &str) -> Vec<String> {
    let reserved = match name {
        "study" => Some("TUNECTL_STUDY"),
        "study_dir" => Some("TUNECTL_STUDY_DIR"),
        "trial_id" => Some("TUNECTL_TRIAL_ID"),
        "trial_dir" => Some("TUNECTL_TRIAL_DIR"),
        "result" => Some("TUNECTL_RESULT"),
        "repeat" => Some("TUNECTL_REPEAT"),
        "budget" => Some("TUNECTL_BUDGET"),
        "host" => Some("TUNECTL_HOST"),
        "slot" => Some("TUNECTL_SLOT"),
        _ => None,
    };
    let upper = name.to_uppercase();
    reserved
        .map(str::to_string)
        .into_iter()
        .chain([
            format!("TUNECTL_KNOB_{upper}"),
            format!("TUNECTL_CELL_{upper}"),
        ])
        .collect()
}

/// Replace every marked value of rendered shell text by a reference to an
/// environment variable holding it: one of `env` (the environment the
/// command runs with) when the value is a `{{ name }}` whose contract
/// variable holds exactly its text there, else a new `TUNECTL_ARG_<n>`.
/// The text of no value is ever written into the command.
fn finish(rendered: &str, env: &[(String, String)]) -> Result<Rendered, String> {
    let mut items = Vec::new();
    let mut values: Vec<(String, Option<String>)> = Vec::new();
    let mut parts = rendered.split(SENTINEL);
    if let Some(first) = parts.next() {
        items.extend(first.chars().map(shell::Item::Char));
    }
    let mut inside = true;
    for part in parts {
        if inside {
            let (text, name) = read_mark(part)?;
            if text.contains('\0') {
                return Err(format!(
                    "value {} contains a NUL byte, which no environment variable can carry",
                    values.len() + 1
                ));
            }
            items.push(shell::Item::Value(values.len()));
            values.push((text, name));
        } else {
            items.extend(part.chars().map(shell::Item::Char));
        }
        inside = !inside;
    }
    let quoting = shell::scan(&items).map_err(|r| {
        let v = values.get(r.value).map(|v| v.0.as_str()).unwrap_or("");
        let shown: String = v.chars().take(40).collect();
        format!("value {} ({shown:?}): {}", r.value + 1, r.why)
    })?;
    let holds = |var: &str, text: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == var)
            .is_some_and(|(_, v)| v == text)
    };
    let mut out = Rendered {
        command: String::with_capacity(rendered.len()),
        ..Rendered::default()
    };
    // Named values already given a variable: (name, text) -> variable.
    let mut given: Vec<(Option<String>, String, String)> = Vec::new();
    let mut next_arg = 1u32;
    for item in items {
        let k = match item {
            shell::Item::Char(c) => {
                out.command.push(c);
                continue;
            }
            shell::Item::Value(k) => k,
        };
        let q = quoting
            .get(k)
            .ok_or_else(|| format!("value {}: cannot tell its shell context", k + 1))?;
        let (text, name) = &values[k];
        let known = name.as_ref().and_then(|n| {
            given
                .iter()
                .find(|(gn, gt, _)| gn.as_ref() == Some(n) && gt == text)
                .map(|g| g.2.clone())
                .or_else(|| {
                    contract_variables(n)
                        .into_iter()
                        .find(|var| holds(var, text))
                })
        });
        let var = match known {
            Some(var) => var,
            None => {
                let var = loop {
                    let var = format!("TUNECTL_ARG_{next_arg}");
                    next_arg += 1;
                    if !env.iter().any(|(k, _)| *k == var) {
                        break var;
                    }
                };
                out.env.push((var.clone(), text.clone()));
                var
            }
        };
        if name.is_some() && !given.iter().any(|g| g.2 == var) {
            given.push((name.clone(), text.clone(), var.clone()));
        }
        if !out.vars.iter().any(|(v, _)| *v == var) {
            out.vars.push((var.clone(), text.clone()));
        }
        let reference = shell::reference(&var, *q)
            .ok_or_else(|| format!("value {}: `{var}` cannot name a variable", k + 1))?;
        out.command.push_str(&reference);
    }
    Ok(out)
}

/// Check a shell command template's text: no NUL, and every `{{ }}` in a
/// shell context where a reference to its variable is expanded. On a
/// problem: the byte offset in `source` it concerns (a `{{`, or 0) and
/// what it is.
pub fn check_shell_template(source: &str) -> Result<(), (usize, String)> {
    if let Some(p) = source.find('\0') {
        return Err((p, "the template contains a NUL byte".to_string()));
    }
    let (items, holes) = shell::source_items(source);
    shell::scan(&items)
        .map(|_| ())
        .map_err(|r| (holes.get(r.value).map_or(0, |h| h.open), r.why))
}

fn check_or_describe(source: &str) -> Result<(), String> {
    check_shell_template(source).map_err(|(at, why)| {
        let line = source[..at].matches('\n').count() + 1;
        let column = source[..at].rfind('\n').map_or(at, |n| at - n - 1) + 1;
        format!("at line {line}, column {column} of the template: {why}")
    })
}

/// A shell environment with `source` added as the template `name`: its
/// `{{ name }}`s rewritten ([`name_holes`]), or as written should the
/// rewritten text not compile.
fn add_shell_template(
    env: &mut Environment<'static>,
    name: &'static str,
    source: &str,
) -> Result<(), minijinja::Error> {
    if env.add_template_owned(name, name_holes(source)).is_ok() {
        return Ok(());
    }
    env.add_template_owned(name, source.to_string())
}

/// Render a one-off command template the way trial commands are rendered,
/// for a command that runs with the environment `env`: every value passed
/// through a variable, undefined variables an error.
pub fn render_shell(
    source: &str,
    vars: &TrialVars,
    env: &[(String, String)],
) -> Result<Rendered, String> {
    check_or_describe(source)?;
    let mut shell = shell_env();
    add_shell_template(&mut shell, "command", source).map_err(describe)?;
    let tmpl = shell.get_template("command").map_err(describe)?;
    finish(&tmpl.render(vars.to_value()).map_err(describe)?, env)
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
        check_tag_sizes(command).map_err(|e| format!("{field}: {e}"))?;
        check_or_describe(command).map_err(|e| format!("{field}: {e}"))?;
        let mut shell = shell_env();
        add_shell_template(&mut shell, "command", command)
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
        self.command(vars, &[])
            .map_err(|e| (self.field.clone(), e))?;
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

    /// Render the command for a run whose environment is `env` (the trial
    /// contract's variables and `trial.env`): every value passed through a
    /// variable; [`Rendered::env`] says which to add to `env`.
    pub fn command(&self, vars: &TrialVars, env: &[(String, String)]) -> Result<Rendered, String> {
        let tmpl = self.shell.get_template("command").map_err(describe)?;
        finish(&tmpl.render(vars.to_value()).map_err(describe)?, env)
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
    fn a_tag_longer_than_the_cap_is_refused_before_it_is_parsed() {
        let long = format!("echo {{{{ {}v }}}}", "- ".repeat(MAX_TAG_BYTES));
        let started = std::time::Instant::now();
        let e = template_variables(&long).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_millis(100));
        assert_eq!(
            e,
            format!(
                "the tag at byte 5 is {} bytes long; at most 1024 are accepted",
                2 * MAX_TAG_BYTES + 3
            )
        );
        // Unclosed, or a statement: the same.
        let unclosed = format!("a {{% if {}", "x".repeat(MAX_TAG_BYTES + 1));
        assert!(
            check_tag_sizes(&unclosed)
                .unwrap_err()
                .contains("at byte 2")
        );
        // Short tags, braces and `${x}` are fine however many.
        let many = "{{ v }} ${x} {a} ".repeat(2000);
        assert_eq!(check_tag_sizes(&many), Ok(()));
        assert_eq!(check_tag_sizes("{{"), Ok(()));
        assert_eq!(check_tag_sizes("{{ v }}{%"), Ok(()));
    }

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

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn one_off_commands_refer_to_variables_like_trial_commands() {
        let mut vars = TrialVars::default();
        vars.set("mode", Value::Str("; rm -rf /".into()));
        vars.set("n", Value::Float(2.0));
        let r =
            render_shell("run {{ mode }} \"-n {{ n }}\" {{ n * 2 }}", &vars, &[]).expect("renders");
        assert_eq!(
            r.command,
            "run \"${TUNECTL_ARG_1}\" \"-n ${TUNECTL_ARG_2}\" \"${TUNECTL_ARG_3}\""
        );
        let want = pairs(&[
            ("TUNECTL_ARG_1", "; rm -rf /"),
            ("TUNECTL_ARG_2", "2"),
            ("TUNECTL_ARG_3", "4"),
        ]);
        assert_eq!(r.env, want);
        assert_eq!(r.vars, want);
        assert!(render_shell("run {{ missing }}", &vars, &[]).is_err());
    }

    #[test]
    fn a_name_refers_to_its_contract_variable_only_when_it_holds_the_text() {
        let mut vars = TrialVars::default();
        vars.set("mode", Value::Str("$(x)".into()));
        vars.set("threads", Value::Int(8));
        vars.set("n", Value::Int(1));
        vars.set("study_dir", Value::Str("/s d".into()));
        vars.set("phase", Value::Str("measure".into()));
        let env = pairs(&[
            ("TUNECTL_KNOB_MODE", "$(x)"),
            // An override's own text: not what the template prints.
            ("TUNECTL_KNOB_THREADS", "08"),
            ("TUNECTL_CELL_N", "1"),
            ("TUNECTL_STUDY_DIR", "/s d"),
        ]);
        let r = render_shell(
            "{{ study_dir }}/run {{- mode -}} \"{{mode}}\" -t {{ threads }} -n {{ n }} {{ phase }} {{ phase }} {% for threads in [3] %}{{ threads }}{% endfor %}",
            &vars,
            &env,
        )
        .expect("renders");
        assert_eq!(
            r.command,
            "\"${TUNECTL_STUDY_DIR}\"/run\"${TUNECTL_KNOB_MODE}\"\"${TUNECTL_KNOB_MODE}\" -t \"${TUNECTL_ARG_1}\" -n \"${TUNECTL_CELL_N}\" \"${TUNECTL_ARG_2}\" \"${TUNECTL_ARG_2}\" \"${TUNECTL_ARG_3}\""
        );
        assert_eq!(
            r.env,
            pairs(&[
                ("TUNECTL_ARG_1", "8"),
                ("TUNECTL_ARG_2", "measure"),
                ("TUNECTL_ARG_3", "3")
            ])
        );
        assert_eq!(r.vars.len(), 6);
        // A name given by hand cannot put text into the command.
        let r = render_shell(
            "run {{ __tunectl_named('a}\"; touch p; #', 'x') }} {{ __tunectl_named('TUNECTL_KNOB_MODE', 'y') }}",
            &vars,
            &env,
        )
        .expect("renders");
        assert_eq!(r.command, "run \"${TUNECTL_ARG_1}\" \"${TUNECTL_ARG_2}\"");
    }

    #[test]
    fn captured_output_and_macros_are_one_value() {
        let mut vars = TrialVars::default();
        vars.set("v", Value::Str("a b".into()));
        let r = render_shell(
            "{% macro m(x) %}--x {{ x }}{% endmacro %}run {{ m(v) }} {% set s %}[{{ v }}]{% endset %}{{ s }}",
            &vars,
            &[],
        )
        .expect("renders");
        assert_eq!(r.command, "run \"${TUNECTL_ARG_1}\" \"${TUNECTL_ARG_2}\"");
        assert_eq!(
            r.env,
            pairs(&[("TUNECTL_ARG_1", "--x a b"), ("TUNECTL_ARG_2", "[a b]")])
        );
    }

    #[test]
    fn only_bare_names_are_rewritten() {
        assert_eq!(
            name_holes("a {{ x }} {{- y -}} {{ x + 1 }} {{ true }} {% raw %}{{ z }}{% endraw %}"),
            "a {{ __tunectl_named(\"x\", x) }} {{- __tunectl_named(\"y\", y) -}} {{ x + 1 }} {{ true }} {% raw %}{{ z }}{% endraw %}"
        );
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
        let env = pairs(&[("TUNECTL_KNOB_X", "2"), ("TUNECTL_BUDGET", "9")]);
        assert_eq!(
            trial.command(&vars, &env).expect("renders").command,
            "rung \"${TUNECTL_KNOB_X}\" \"${TUNECTL_BUDGET}\""
        );
        assert_eq!(
            full.command(&vars, &env).expect("renders").command,
            "full \"${TUNECTL_KNOB_X}\" \"${TUNECTL_BUDGET}\""
        );
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
