//! `tunectl validate`: check study and inventory files.

use super::{CliError, say_err};
use crate::cli::ValidateArgs;
use crate::spec::{Diagnostics, Inventory, Study};

/// Every problem of every file, or a line per valid file.
pub fn run(a: ValidateArgs) -> Result<(), CliError> {
    let mut all = Diagnostics::default();
    for f in &a.files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let is_inventory = text.lines().any(|l| l.starts_with("hosts:"));
        let r = if is_inventory {
            Inventory::load(f).map(|_| "inventory")
        } else {
            Study::load(f).map(|_| "study")
        };
        match r {
            Ok(kind) => say_err!("{}: valid {kind}", f.display()),
            Err(d) => all.extend(d),
        }
    }
    if all.is_empty() {
        Ok(())
    } else {
        Err(all.into())
    }
}
