//! `tunectl validate`: check study and inventory files.

use serde::Serialize;

use super::{CliError, note, print_json, schema};
use crate::spec::{Diagnostic, Diagnostics, Inventory, Study};

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Study or inventory files (an inventory has a `hosts` key).
    #[arg(required = true)]
    pub files: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub output: crate::commands::FormatArgs,
}

/// `validate --format json` (docs/json.md).
#[derive(Serialize)]
struct ValidateDoc {
    schema: &'static str,
    /// Every file is valid (the exit code is 0).
    valid: bool,
    files: Vec<FileCheck>,
}

#[derive(Serialize)]
struct FileCheck {
    path: String,
    /// `study` or `inventory` (a file with a top-level `hosts:` key).
    kind: &'static str,
    valid: bool,
    problems: Vec<Problem>,
    /// Valid, but likely a mistake (a study under which no candidate can
    /// win, a knob the trial never sees).
    warnings: Vec<Problem>,
}

#[derive(Serialize)]
struct Problem {
    file: String,
    /// 1-based; 0 when the problem concerns the whole file.
    line: usize,
    /// 1-based; 0 when unknown.
    column: usize,
    /// Key path such as `knobs.threads.default`; empty for the whole file.
    field: String,
    message: String,
}

impl From<&Diagnostic> for Problem {
    fn from(d: &Diagnostic) -> Problem {
        Problem {
            file: d.file.display().to_string(),
            line: d.line,
            column: d.column,
            field: d.field.clone(),
            message: d.message.clone(),
        }
    }
}

/// Every problem of every file, or a line per valid file.
pub fn run(a: ValidateArgs) -> Result<(), CliError> {
    let mut all = Diagnostics::default();
    let mut files = Vec::new();
    for f in &a.files {
        // Which kind it is; what cannot be read is then refused by the
        // study loader, with why.
        let text = crate::safe_read::read_text(
            f,
            crate::safe_read::MAX_STUDY_FILE_BYTES.max(crate::safe_read::MAX_INVENTORY_FILE_BYTES),
        )
        .unwrap_or_default();
        // A top-level `hosts` key, however the YAML is written; a file that
        // does not parse is taken by a `hosts:` line, and its loader says
        // what is wrong with it.
        let is_inventory = crate::spec::yaml::has_top_level_key(f, &text, "hosts")
            .unwrap_or_else(|| text.lines().any(|l| l.starts_with("hosts:")));
        let mut warnings: Vec<Problem> = Vec::new();
        let (kind, r) = if is_inventory {
            ("inventory", Inventory::load(f).map(|_| ()))
        } else {
            (
                "study",
                Study::load(f).map(|s| {
                    for d in &s.warnings {
                        note!("warning: {d}");
                        warnings.push(Problem::from(d));
                    }
                }),
            )
        };
        let problems: Vec<Problem> = match r {
            Ok(()) => {
                note!("{}: valid {kind}", f.display());
                Vec::new()
            }
            Err(d) => {
                let problems = d.iter().map(Problem::from).collect();
                all.extend(d);
                problems
            }
        };
        files.push(FileCheck {
            path: f.display().to_string(),
            kind,
            valid: problems.is_empty(),
            problems,
            warnings,
        });
    }
    if a.output.json(false) {
        print_json(&ValidateDoc {
            schema: schema::VALIDATE,
            valid: all.is_empty(),
            files,
        })?;
    }
    if all.is_empty() {
        Ok(())
    } else {
        Err(all.into())
    }
}
