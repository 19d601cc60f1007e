//! Verdict records: after every launch, the decision on every bucket of
//! every host class is derived from the ledger and written back to it
//! (`<study>/verdicts/<class>/<bucket>.json`), replacing the last launch's.
//! The ledger's attempts stay the evidence; these records are what a
//! reader of the store finds without running the analysis.

use serde_json::{Value as J, json};

use crate::decide::{Analysis, BucketReport, ClassReport, Scope, analyze_scoped};
use crate::ledger::{Ledger, LedgerError, StudyRecord};
use crate::spec::FrozenSpec;

/// The analysis of study `id` (recorded as `record`) from what `ledger`
/// holds now: its attempts, plans and hosts.
pub async fn analyze_ledger(
    ledger: &Ledger,
    id: &str,
    record: &StudyRecord,
) -> Result<Analysis, LedgerError> {
    analyze_ledger_scoped(ledger, id, record, Scope::Everything).await
}

async fn analyze_ledger_scoped(
    ledger: &Ledger,
    id: &str,
    record: &StudyRecord,
    scope: Scope,
) -> Result<Analysis, LedgerError> {
    let scan = ledger.scan(id).await?;
    let plans = ledger.plans(id).await?;
    let (hosts, _) = ledger.hosts(id).await?;
    Ok(analyze_scoped(record, &scan, &hosts, &plans, scope, |_| {
        true
    }))
}

/// The verdict record of one bucket of one host class: the bucket's
/// decision with what it needs to be read alone (study, spec, class,
/// objective, context, baseline).
pub fn verdict_record(analysis: &Analysis, class: &ClassReport, bucket: &BucketReport) -> J {
    json!({
        "schema": crate::ledger::records::SCHEMA,
        "tunectl_version": analysis.tunectl_version,
        "study_id": analysis.study_id,
        "spec_hash": analysis.spec_hash,
        "host_class": class.host_class,
        "host_class_label": class.label,
        "hosts": class.hosts,
        "objective": analysis.objective,
        "statistic": analysis.statistic,
        "context": analysis.context,
        "baseline": analysis.baseline,
        "judging": analysis.judging,
        "bucket": bucket,
    })
}

/// Derive study `study_id`'s analysis from `ledger` (judged by
/// `judged_by`'s settings when given, else by those stored) and write the
/// verdict record of every bucket of every host class, calling `written`
/// after each. `Ok(None)`: the ledger holds no such study. The analysis
/// returned holds the decisions only ([`Scope::Decisions`]): no next
/// levers, no traces.
pub async fn write_verdicts(
    ledger: &Ledger,
    study_id: &str,
    judged_by: Option<&FrozenSpec>,
    mut written: impl FnMut(&ClassReport, &BucketReport),
) -> Result<Option<Analysis>, LedgerError> {
    let Some(mut record) = ledger.read_study(study_id).await? else {
        return Ok(None);
    };
    if let Some(by) = judged_by {
        record.spec = record.spec.judged_by(by);
    }
    let analysis = analyze_ledger_scoped(ledger, study_id, &record, Scope::Decisions).await?;
    for class in &analysis.classes {
        for bucket in &class.buckets {
            let value = verdict_record(&analysis, class, bucket);
            ledger
                .write_verdict(study_id, &class.host_class, &bucket.key, &value)
                .await?;
            written(class, bucket);
        }
        // Records of buckets these settings do not make (another bucket
        // rule judged before) would read as current.
        let keep: Vec<&str> = class.buckets.iter().map(|b| b.key.as_str()).collect();
        ledger
            .prune_verdicts(study_id, &class.host_class, &keep)
            .await?;
    }
    Ok(Some(analysis))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::AttemptRecord;

    fn study() -> StudyRecord {
        serde_json::from_value(json!({
            "schema": 1, "tunectl_version": "t", "study_id": "s", "spec_hash": "feedface0123456789",
            "spec": {
                "objective": {"name": "tp", "unit": "ops/s", "better": "higher"},
                "knobs": [{"name": "mode", "kind": "categorical", "values": ["base", "fast"], "default": "base"}],
                "buckets": {"n": "pow2"},
            },
            "created_at": "",
        }))
        .expect("study record")
    }

    fn attempt(cell: i64, mode: &str, r: u32, tp: f64) -> AttemptRecord {
        let baseline = mode == "base";
        serde_json::from_value(json!({
            "schema": 1, "tunectl_version": "t", "study_id": "s", "spec_hash": "feedface0123456789",
            "trial_key": format!("{cell}-{mode}-{r}"), "attempt_id": format!("a-{cell}-{mode}-{r}"),
            "config": {"mode": mode}, "config_label": if baseline { "baseline".to_string() } else { format!("mode={mode}") },
            "config_index": u64::from(!baseline), "is_baseline": baseline,
            "cell": {"n": cell}, "cell_label": format!("n={cell}"), "cell_index": cell, "repeat": r,
            "fidelity": null, "host": "h1", "host_class": "hc", "fingerprint": "fp", "slot": 0,
            "started_at": "", "finished_at": "", "duration_s": 0.0, "run_s": null, "warmup_runs": 0,
            "status": "ok", "failure": null, "exit": null,
            "metrics": {"tp": [tp, tp + 0.5, tp - 0.5]}, "digest": "d",
            "outputs": {}, "command": "", "stdout_tail": "", "stderr_tail": "",
        }))
        .expect("attempt record")
    }

    /// Without clap: a ledger with a study's attempts gets a verdict record
    /// per bucket and class, each readable alone.
    #[tokio::test]
    async fn every_bucket_gets_its_verdict_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().display().to_string()).expect("ledger");
        assert!(
            write_verdicts(&ledger, "s", None, |_, _| panic!("no study, no bucket"))
                .await
                .expect("no study")
                .is_none()
        );
        ledger.ensure_study(&study()).await.expect("study");
        for cell in [1, 4] {
            for r in 0..3 {
                ledger
                    .write_attempt(&attempt(cell, "base", r, 100.0))
                    .await
                    .expect("attempt");
                ledger
                    .write_attempt(&attempt(cell, "fast", r, 200.0))
                    .await
                    .expect("attempt");
            }
        }
        let mut seen = Vec::new();
        let analysis = write_verdicts(&ledger, "s", None, |class, bucket| {
            seen.push((class.host_class.clone(), bucket.key.clone()))
        })
        .await
        .expect("verdicts")
        .expect("the study is there");
        assert_eq!(seen.len(), 2, "one bucket per pow2 range: {seen:?}");
        for class in &analysis.classes {
            for bucket in &class.buckets {
                let path = dir.path().join(format!(
                    "s/verdicts/{}/{}.json",
                    class.host_class, bucket.key
                ));
                let text = std::fs::read_to_string(&path).expect("verdict record");
                let written: J = serde_json::from_str(&text).expect("json");
                // (Compared field by field: floats read back may differ in
                // their last digit.)
                let record = verdict_record(&analysis, class, bucket);
                for field in ["schema", "study_id", "spec_hash", "host_class", "objective"] {
                    assert_eq!(written[field], record[field], "{field}");
                }
                assert_eq!(written["host_class"], "hc");
                assert_eq!(written["bucket"]["key"], json!(bucket.key));
                assert_eq!(written["bucket"]["winner"]["label"], "mode=fast");
            }
        }
    }
}
