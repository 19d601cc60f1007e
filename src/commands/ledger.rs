//! `tunectl ledger ...`: inspect the ledger itself.

use super::inputs::{ledger_url, study_arg};
use super::{CliError, failed, say};
use crate::cli::LedgerCheckArgs;
use crate::ledger::Ledger;

/// `ledger check`: list what cannot be read as what its key says (exit 1
/// when there is any).
pub async fn check(a: LedgerCheckArgs) -> Result<(), CliError> {
    let (ids, study) = match &a.study {
        Some(arg) => {
            let (id, s) = study_arg(arg)?;
            (Some(vec![id]), s)
        }
        None => (None, None),
    };
    let url = ledger_url(a.ledger.as_deref(), study.as_ref(), None);
    let Some(ledger) = Ledger::open_existing(&url).map_err(failed)? else {
        return Err(CliError::Failed(format!("no ledger at `{url}`")));
    };
    ledger.check_reachable().await.map_err(failed)?;
    let ids = match ids {
        Some(ids) => ids,
        // Every prefix that holds a study's objects, with or without a
        // readable study record.
        None => ledger.study_prefixes().await.map_err(failed)?,
    };
    let (mut unreadable, mut missing, mut records) = (0, 0, 0);
    for id in &ids {
        let record = ledger.study_record_problem(id).await.map_err(failed)?;
        // Every object listed and read, whatever the index says.
        let checked = ledger.check_study(id).await.map_err(failed)?;
        let scan = &checked.scan;
        say!(
            "{id}: {} attempts readable, {} voided, {} unreadable, {} missing",
            scan.attempts.len(),
            scan.voided,
            scan.corrupt.len(),
            checked.missing.len()
        );
        if let Some(problem) = &record {
            say!("  {id}/study.json: {problem}");
            records += 1;
        }
        let mut damaged: Vec<&crate::ledger::CorruptObject> =
            scan.corrupt.iter().chain(&checked.missing).collect();
        damaged.sort_by(|x, y| x.key.cmp(&y.key));
        for c in damaged {
            say!("  {}: {}", c.key, c.reason);
        }
        unreadable += scan.corrupt.len();
        missing += checked.missing.len();
    }
    let mut found = Vec::new();
    if records > 0 {
        found.push(format!("{records} damaged or missing study records"));
    }
    if unreadable > 0 {
        found.push(format!("{unreadable} unreadable objects"));
    }
    if missing > 0 {
        found.push(format!("{missing} missing objects"));
    }
    if !found.is_empty() {
        return Err(CliError::Failed(format!(
            "{} in ledger {} (listed above)",
            found.join(", "),
            ledger.url()
        )));
    }
    Ok(())
}
