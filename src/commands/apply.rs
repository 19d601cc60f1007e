//! `tunectl apply`: run a command with the tuned knobs of this host's class
//! and the cell's bucket (else the study's defaults).

use std::collections::BTreeMap;

use super::{CliError, failed, note, say_err};
use crate::{fingerprint, tuned};

#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    /// A tuned file, or a directory of them (every *.yaml in it).
    #[arg(long)]
    pub tuned: std::path::PathBuf,
    /// The workload cell, one axis per flag (e.g. `--cell batch=4`): picks the bucket.
    #[arg(long = "cell", value_name = "AXIS=VALUE")]
    pub cells: Vec<String>,
    /// Print the chosen knobs, the environment and why, as YAML; run nothing.
    #[arg(long)]
    pub print: bool,
    /// The command, after `--`: a template (`{{ knob }}` is replaced by the
    /// knob's value, shell-quoted) run with `/bin/sh -c`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Choose the knobs, then print them (`--print`) or become the command.
pub async fn run(a: ApplyArgs) -> Result<(), CliError> {
    if a.command.is_empty() && !a.print {
        return Err(CliError::Invalid(
            "apply needs a command after `--` (e.g. `tunectl apply --tuned tuned/ -- ./serve --batch {{ batch }}`), or --print".to_string(),
        ));
    }
    let files = tuned::load(&a.tuned).map_err(CliError::Invalid)?;
    // An edited tuned file must not run values the study never had.
    for w in tuned::check_domains(&files).map_err(CliError::Invalid)? {
        eprintln!("warning: {w}");
    }
    let cell = tuned::parse_cell(&a.cells).map_err(CliError::Invalid)?;
    tuned::check_cell_axes(&files, &cell).map_err(CliError::Invalid)?;
    // All files are of one study (`load` checks), so of one class key.
    let (key, tools) = match files.first().and_then(|(_, f)| f.class_key.as_ref()) {
        Some(k) => (k.fields.clone(), k.tools.clone()),
        None => (fingerprint::ClassKey::default(), BTreeMap::new()),
    };
    let host = tuned::ThisHost {
        class: fingerprint::probe_local(&tools)
            .await
            .map(|fp| (fp.host_class_under(&key), fp.class_label_under(&key)))
            .map_err(|e| e.to_string()),
    };
    let mut choice = tuned::choose(&files, &host, &cell);
    tuned::apply_overrides(&mut choice, |var| std::env::var(var).ok());
    // An override is a value like a tuned one: it must be one the study has.
    tuned::check_overrides(&files, &choice).map_err(CliError::Invalid)?;
    let mut env = tuned::environment(&choice, &cell);
    let command = if a.command.is_empty() {
        None
    } else {
        let template = a.command.join(" ");
        let vars = tuned::template_vars(&choice.knobs, &cell);
        // The command refers to variables of `env` for its values, and
        // brings those it needs besides: no value is in its text.
        let rendered = crate::spec::template::render_shell(&template, &vars, &env)
            .map_err(|e| CliError::Invalid(format!("the command `{template}`: {e}")))?;
        env.extend(rendered.env);
        Some(rendered.command)
    };
    if let Some(w) = &choice.warning {
        say_err!("warning: {w}");
    }
    if !choice.from_environment.is_empty() {
        let set: Vec<String> = choice
            .from_environment
            .iter()
            .map(|(k, v)| format!("{}={v}", tuned::knob_var(k)))
            .collect();
        note!(
            "note: set in the environment, these win over the {}: {}",
            choice.source.as_str(),
            set.join(" ")
        );
    }
    if a.print {
        crate::term::out(&crate::term::escape_block(&tuned::print_yaml(
            &choice,
            &host,
            &cell,
            &env,
            command.as_deref(),
        )));
        return Ok(());
    }
    if choice.warning.is_none() {
        note!("tunectl apply: {}", choice.reason);
    }
    let Some(command) = command else {
        return Ok(());
    };
    use std::io::Write as _;
    use std::os::unix::process::CommandExt as _;
    let _ = std::io::stdout().flush();
    // Replace this process: signals reach the command directly and its exit
    // status is ours.
    let err = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&command)
        .envs(env)
        .exec();
    Err(failed(format!("cannot run /bin/sh -c {command}: {err}")))
}
