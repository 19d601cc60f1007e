//! `tunectl ledger ...`: inspect the ledger itself.

use serde::Serialize;

use super::inputs::{ledger_url, study_arg};
use super::{CliError, failed, print_json, say, schema};
use crate::ledger::Ledger;

#[derive(clap::Args, Debug)]
pub struct LedgerCheckArgs {
    /// A study file or id; every study in the ledger when omitted.
    pub study: Option<String>,
    /// Ledger URL or path (default: the study file's `ledger`, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    #[command(flatten)]
    pub output: crate::commands::FormatArgs,
}

/// `ledger check --format json` (docs/json.md).
#[derive(Serialize)]
struct CheckDoc<'a> {
    schema: &'static str,
    ledger: &'a str,
    /// No damage found (the exit code is 0).
    clean: bool,
    studies: Vec<StudyCheck>,
}

#[derive(Serialize)]
struct StudyCheck {
    study: String,
    readable_attempts: usize,
    voided: usize,
    unreadable: usize,
    missing: usize,
    /// What is wrong with `<study>/study.json`, if anything.
    study_record_problem: Option<String>,
    /// What was wrong with the study's compacted index, which the check
    /// rewrote from the objects (derived data: not damage, the exit code
    /// stays 0 for it alone).
    index_problem: Option<String>,
    damaged: Vec<Damaged>,
}

#[derive(Serialize)]
struct Damaged {
    key: String,
    kind: DamageKind,
    reason: String,
}

#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum DamageKind {
    /// There, but not readable as what its key says.
    Unreadable,
    /// Named by the arrival log or the index, but not there.
    Missing,
}

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
    let json = a.output.json(false);
    let (mut unreadable, mut missing, mut records) = (0, 0, 0);
    let mut studies = Vec::new();
    for id in &ids {
        let record = ledger.study_record_problem(id).await.map_err(failed)?;
        // Every object listed and read, whatever the index says.
        let checked = ledger.check_study(id).await.map_err(failed)?;
        let scan = &checked.scan;
        let bad = scan.corrupt.len() + checked.records.len();
        let mut damaged: Vec<(&crate::ledger::CorruptObject, DamageKind)> = scan
            .corrupt
            .iter()
            .chain(&checked.records)
            .map(|c| (c, DamageKind::Unreadable))
            .chain(checked.missing.iter().map(|c| (c, DamageKind::Missing)))
            .collect();
        damaged.sort_by(|x, y| x.0.key.cmp(&y.0.key));
        if !json {
            say!(
                "{id}: {} attempts readable, {} voided, {} unreadable, {} missing",
                scan.attempts.len(),
                scan.voided,
                bad,
                checked.missing.len()
            );
            if let Some(problem) = &record {
                say!("  {id}/study.json: {problem}");
            }
            if let Some(problem) = &checked.index {
                say!(
                    "  {}: the index (derived data): {problem}",
                    crate::ledger::index::key(id)
                );
            }
            for (c, _) in &damaged {
                say!("  {}: {}", c.key, c.reason);
            }
        }
        records += usize::from(record.is_some());
        unreadable += bad;
        missing += checked.missing.len();
        studies.push(StudyCheck {
            study: id.clone(),
            readable_attempts: scan.attempts.len(),
            voided: scan.voided,
            unreadable: bad,
            missing: checked.missing.len(),
            study_record_problem: record,
            index_problem: checked.index.clone(),
            damaged: damaged
                .into_iter()
                .map(|(c, kind)| Damaged {
                    key: c.key.clone(),
                    kind,
                    reason: c.reason.clone(),
                })
                .collect(),
        });
    }
    if json {
        print_json(&CheckDoc {
            schema: schema::LEDGER_CHECK,
            ledger: ledger.url(),
            clean: records + unreadable + missing == 0,
            studies,
        })?;
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
