//! What the commands read before they start: study and inventory files,
//! a study argument (a file or an id), the ledger URL, the analysis of a
//! study from its ledger.

use std::path::Path;

use super::{CliError, failed, note, say_err};
use crate::ledger::{DEFAULT_LEDGER, Ledger, StudyRecord};
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

/// Which of the ledger's studies a study file means.
pub enum Resolved {
    /// The ledger holds this spec's measurements as `record.study_id`: the
    /// study's name, or a fork of it (`fork`). The record is judged by the
    /// file's settings (they may have changed since its launch).
    Launched { record: StudyRecord, fork: bool },
    /// The ledger holds no study of this name, nor a fork of this spec.
    New,
    /// The ledger holds the study's name with a spec that measures
    /// something else (`changes`), and no fork of this spec; `forks`: the
    /// ids of its other forks.
    Changed {
        record: StudyRecord,
        changes: Vec<String>,
        forks: Vec<String>,
    },
}

/// The study id `launch --fork` gives a study whose name the ledger holds
/// with another spec: `<name>-<first 12 hex of its spec hash>`.
pub fn fork_id(study: &Study) -> String {
    format!("{}-{}", study.id(), &study.spec_hash()[..12])
}

/// Find the study a study file means in `ledger`: its name when the
/// ledger's spec of it measures the same; else the fork that does (the one
/// `launch --fork` named after this spec, else the newest).
pub async fn resolve(ledger: &Ledger, study: &Study) -> Result<Resolved, CliError> {
    let spec = study.frozen();
    let judged = |r: &StudyRecord| StudyRecord {
        spec: r.spec.judged_by(&spec),
        ..r.clone()
    };
    let named = ledger.read_study(study.id()).await.map_err(failed)?;
    if let Some(r) = &named
        && spec.measures_as(&r.spec)
    {
        return Ok(Resolved::Launched {
            record: judged(r),
            fork: false,
        });
    }
    let forks = ledger.forks_of(study.id()).await.map_err(failed)?;
    let own = fork_id(study);
    let found = forks
        .iter()
        .find(|r| r.study_id == own && spec.measures_as(&r.spec))
        .or_else(|| forks.iter().rev().find(|r| spec.measures_as(&r.spec)));
    if let Some(r) = found {
        return Ok(Resolved::Launched {
            record: judged(r),
            fork: true,
        });
    }
    Ok(match named {
        Some(record) => Resolved::Changed {
            changes: spec.differences_from(&record.spec).measurement,
            forks: forks.into_iter().map(|r| r.study_id).collect(),
            record,
        },
        None => Resolved::New,
    })
}

/// The ledger's study a study argument names ([`open_study`]).
pub enum Opened {
    /// Its record: the study of that id, or the one a study file
    /// resolves to (judged by the file's settings).
    Launched(StudyRecord),
    /// The ledger holds no such study.
    NotThere,
    /// A study file whose spec was never launched: the ledger holds its
    /// name with another spec, `record` ([`Resolved::Changed`]).
    Changed {
        record: StudyRecord,
        changes: Vec<String>,
        forks: Vec<String>,
    },
}

/// Open the study a study argument (`arg`, read by [`study_arg`] as
/// `name` and, for a file, `study`) names in `ledger`: by id, or the one
/// the file resolves to ([`resolve`]), saying so when that is a fork or
/// (when the command `judges`) is judged by changed settings.
pub async fn open_study(
    ledger: &Ledger,
    arg: &str,
    name: &str,
    study: Option<&Study>,
    judges: bool,
) -> Result<Opened, CliError> {
    let Some(s) = study else {
        return Ok(match ledger.read_study(name).await.map_err(failed)? {
            Some(record) => Opened::Launched(record),
            None => Opened::NotThere,
        });
    };
    Ok(match resolve(ledger, s).await? {
        Resolved::Launched { record, fork } => {
            resolution_notes(arg, s, &record, fork, judges);
            Opened::Launched(record)
        }
        Resolved::New => Opened::NotThere,
        Resolved::Changed {
            record,
            changes,
            forks,
        } => Opened::Changed {
            record,
            changes,
            forks,
        },
    })
}

/// What a command says when a study file resolves to a fork, or (when it
/// `judges`) is judged by settings other than those of the study's launch.
pub fn resolution_notes(file: &str, study: &Study, record: &StudyRecord, fork: bool, judges: bool) {
    if fork {
        note!(
            "note: {file} is study `{}` in this ledger (`{}` there has another spec; `--fork` recorded this one)",
            record.study_id,
            study.id()
        );
    }
    let changed = record.spec.judging().changed_since_launch;
    if judges && !changed.is_empty() {
        note!(
            "note: judging `{}` by {file}'s settings, changed since it was launched: {}; the measurements are the ones recorded",
            record.study_id,
            changed.join("; ")
        );
    }
}

/// `changes` and `forks` of [`Resolved::Changed`], as a sentence.
pub fn changed_text(name: &str, changes: &[String], forks: &[String]) -> String {
    let mut text = format!(
        "study `{name}` in the ledger was launched with another spec (changed: {})",
        changes.join("; ")
    );
    if !forks.is_empty() {
        text.push_str(&format!(
            "; its other specs here: {} (name one by id)",
            forks.join(", ")
        ));
    }
    text
}

/// What to say after "study `x` is not in the ledger `url`" when `url` is a
/// local folder that is itself one study's folder inside a ledger (it holds
/// a `study.json`, as `ledgers/quickstart` does): the ledger is its parent.
pub fn ledger_hint(url: &str) -> String {
    let path = std::path::Path::new(url);
    let is_study_folder =
        std::fs::symlink_metadata(path.join("study.json")).is_ok_and(|m| m.is_file());
    match path.parent().filter(|_| is_study_folder) {
        Some(parent) => {
            let parent = match parent.as_os_str().is_empty() {
                true => ".".to_string(),
                false => parent.display().to_string(),
            };
            format!(
                " (`{url}` is the folder of one study inside a ledger, not a ledger: the ledger is `{parent}`, `--ledger {}`)",
                crate::shell_quote::quote_word(&parent)
            )
        }
        None => String::new(),
    }
}

/// Whether an analysis is for showing or for shipping: `export` refuses a
/// study file whose spec was never launched rather than write another
/// spec's tuned values for it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Use {
    Show,
    Ship,
}

/// The analysis of a study (a study file or a study id) from its ledger,
/// as `report` and `export` see it. A study file means the study it
/// resolves to ([`resolve`]), judged by the file's settings.
pub async fn load_analysis(
    study_arg: &str,
    ledger_flag: Option<&str>,
    usage: Use,
) -> Result<crate::decide::Analysis, CliError> {
    Ok(load_analysis_in(study_arg, ledger_flag, usage).await?.0)
}

/// [`load_analysis`] and the ledger it read (whose scan of the study is
/// cached: [`Ledger::scan`] returns it without reading again).
pub async fn load_analysis_in(
    study_arg: &str,
    ledger_flag: Option<&str>,
    usage: Use,
) -> Result<(crate::decide::Analysis, Ledger), CliError> {
    let (name, study) = self::study_arg(study_arg)?;
    let url = ledger_url(ledger_flag, study.as_ref(), None);
    let Some(ledger) = Ledger::open_existing(&url).map_err(failed)? else {
        return Err(CliError::Failed(format!(
            "no ledger at `{url}`; run `tunectl launch` first"
        )));
    };
    let not_there = |id: &str| {
        let hint = ledger_hint(&url);
        CliError::Failed(format!(
            "study `{id}` is not in the ledger `{}`{}",
            ledger.url(),
            if hint.is_empty() {
                "; run `tunectl launch` first"
            } else {
                &hint
            }
        ))
    };
    let record = match open_study(&ledger, study_arg, &name, study.as_ref(), true).await? {
        Opened::Launched(record) => record,
        Opened::NotThere => return Err(not_there(&name)),
        Opened::Changed {
            record,
            changes,
            forks,
        } => {
            let why = changed_text(&name, &changes, &forks);
            if usage == Use::Ship {
                return Err(CliError::Invalid(format!(
                    "{study_arg}: this spec was never launched: {why}; export `{name}` by its id to ship what it found, or launch this spec with `tunectl launch --fork` first"
                )));
            }
            say_err!(
                "warning: {study_arg}: this spec was never launched: {why}; showing `{name}` as launched (spec {}); `tunectl launch --fork` measures this one",
                &record.spec_hash[..record.spec_hash.len().min(12)]
            );
            record
        }
    };
    let analysis = report::analyze_ledger(&ledger, &record.study_id, &record)
        .await
        .map_err(failed)?;
    Ok((analysis, ledger))
}
