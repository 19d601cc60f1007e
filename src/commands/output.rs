//! `--format text|json`. Every JSON document a command prints carries
//! `schema: "tunectl.<name>/<version>"`, one of [`crate::schema`].

use serde::Serialize;

use super::{CliError, failed};

/// How a command prints its data on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// For people (YAML for `fingerprint`).
    #[default]
    Text,
    /// One JSON document with a `schema` field (docs/json.md); nothing
    /// else goes to stdout.
    Json,
}

/// `--format text|json`, shared by the commands that print data.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FormatArgs {
    /// Output format: `text` for people, or `json`: one document with a
    /// `schema` field (docs/json.md) and nothing else on stdout.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

impl FormatArgs {
    /// Whether JSON was asked for, by `--format json` or by a command's
    /// older `--json` (`alias`).
    pub fn json(&self, alias: bool) -> bool {
        alias || self.format == OutputFormat::Json
    }
}

/// `doc` as pretty JSON on stdout, one document, with the characters a
/// terminal would obey escaped ([`crate::term::json_pretty`]).
pub fn print_json(doc: &impl Serialize) -> Result<(), CliError> {
    let text = crate::term::json_pretty(doc).map_err(failed)?;
    crate::term::out(&format!("{text}\n"));
    Ok(())
}
