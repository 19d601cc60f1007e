//! What the commands read before they start: study and inventory files,
//! a study argument (a file or an id), the ledger URL, the analysis of a
//! study from its ledger.

use std::path::Path;

use super::{CliError, failed, say_err};
use crate::ledger::{DEFAULT_LEDGER, Ledger};
use crate::report;
use crate::spec::{Inventory, Study};

/// A study file and an inventory file (this machine, one slot, without
/// one), loaded; the problems of both when both have some.
pub fn load_inputs(study: &Path, inventory: Option<&Path>) -> Result<(Study, Inventory), CliError> {
    let s = Study::load(study);
    let i = match inventory {
        Some(p) => Inventory::load(p),
        None => Ok(Inventory::local_default()),
    };
    match (s, i) {
        (Ok(s), Ok(i)) => Ok((s, i)),
        (Err(mut a), Err(b)) => {
            a.extend(b);
            Err(a.into())
        }
        (Err(a), _) | (_, Err(a)) => Err(a.into()),
    }
}

/// The ledger URL: the flag (or `TUNECTL_LEDGER`), else the study's,
/// else the inventory's, else `./ledgers`.
pub fn ledger_url(flag: Option<&str>, study: Option<&Study>, inv: Option<&Inventory>) -> String {
    flag.map(str::to_string)
        .or_else(|| study.and_then(|s| s.ledger.clone()))
        .or_else(|| inv.and_then(|i| i.ledger.clone()))
        .unwrap_or_else(|| DEFAULT_LEDGER.to_string())
}

/// A study argument: a study file (loaded) or an id.
pub fn study_arg(arg: &str) -> Result<(String, Option<Study>), CliError> {
    let path = Path::new(arg);
    if path.is_file() {
        let s = Study::load(path)?;
        Ok((s.id().to_string(), Some(s)))
    } else if arg.ends_with(".yaml") || arg.ends_with(".yml") {
        Err(CliError::Invalid(format!("{arg}: no such study file")))
    } else {
        Ok((arg.to_string(), None))
    }
}

/// The analysis of a study (a study file or a study id) from its ledger,
/// as `report` and `export` see it.
pub async fn load_analysis(
    study_arg: &str,
    ledger_flag: Option<&str>,
) -> Result<report::Analysis, CliError> {
    let (study_id, study) = self::study_arg(study_arg)?;
    let url = ledger_url(ledger_flag, study.as_ref(), None);
    let Some(ledger) = Ledger::open_existing(&url).map_err(failed)? else {
        return Err(CliError::Failed(format!(
            "no ledger at `{url}`; run `tunectl launch` first"
        )));
    };
    let Some(record) = ledger.read_study(&study_id).await.map_err(failed)? else {
        return Err(CliError::Failed(format!(
            "study `{study_id}` is not in the ledger `{}`; run `tunectl launch` first",
            ledger.url()
        )));
    };
    if let Some(s) = &study
        && s.spec_hash() != record.spec_hash
    {
        say_err!(
            "warning: {study_arg} has changed since it was launched; reporting the spec recorded in the ledger ({})",
            &record.spec_hash[..12]
        );
    }
    report::analyze_ledger(&ledger, &study_id, &record)
        .await
        .map_err(failed)
}
