//! `--format text|json` and the JSON documents' schema names. Every JSON
//! document a command prints carries `schema: "tunectl.<name>/<version>"`
//! (docs/json.md documents each, and a test keeps the two in step).

use serde::Serialize;

use super::{CliError, failed};

/// The schema name of every JSON document tunectl prints. The version
/// goes up when a field is removed, renamed or changes its type or
/// meaning; added fields keep it.
pub mod schema {
    pub const PLAN: &str = "tunectl.plan/1";
    pub const LAUNCH: &str = "tunectl.launch/1";
    pub const STATUS: &str = "tunectl.status/1";
    pub const REPORT: &str = "tunectl.report/1";
    pub const EXPORT: &str = "tunectl.export/1";
    pub const LEDGER_CHECK: &str = "tunectl.ledger-check/1";
    pub const FINGERPRINT: &str = "tunectl.fingerprint/1";
    pub const FINGERPRINT_INVENTORY: &str = "tunectl.fingerprint-inventory/1";
    pub const VALIDATE: &str = "tunectl.validate/1";

    /// All of them, for the test that docs/json.md documents each.
    pub const ALL: [&str; 9] = [
        PLAN,
        LAUNCH,
        STATUS,
        REPORT,
        EXPORT,
        LEDGER_CHECK,
        FINGERPRINT,
        FINGERPRINT_INVENTORY,
        VALIDATE,
    ];
}

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

/// `doc` as pretty JSON on stdout, one document.
pub fn print_json(doc: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(doc).map_err(failed)?;
    println!("{text}");
    Ok(())
}
