//! `--seed-from`: what an earlier study says about the same knobs, per
//! host class and cell: configs that failed there (not tried again), and
//! the measured values TPE starts from.
//!
//! An earlier attempt counts when its config has exactly this study's knobs
//! with values in this study's domains, it ran on a host class this launch
//! has, and its cell is this cell (same axes and values) or it had no cell
//! axes at all. A failure at any budget counts (a config that crashes or
//! changes output at a small budget is not worth a large one); values count
//! at this study's search budget only, as the median of the config's
//! samples of the search metric over its attempts there.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::ledger::Ledger;
use crate::ledger::records::{AttemptRecord, AttemptStatus};
use crate::space::ConfigSpace;
use crate::spec::Study;
use crate::trial::RoleKind;

/// What an earlier study knows, keyed by host class.
#[derive(Debug, Default)]
pub struct Prior {
    /// `ledger#study`, for messages.
    pub source: String,
    classes: HashMap<String, Vec<Known>>,
}

#[derive(Debug)]
struct Known {
    cell: serde_json::Value,
    config: u64,
    /// `None`: failed (or changed output).
    value: Option<f64>,
}

impl Prior {
    /// Read study `study_id` from `ledger`. `metric` is the metric the
    /// search reads; `budget` the budget its values must have been taken at.
    pub async fn load(
        ledger: &Ledger,
        study_id: &str,
        study: &Study,
        space: &ConfigSpace,
        metric: &str,
        budget: Option<f64>,
    ) -> Result<Prior, String> {
        let source = format!("{}#{study_id}", ledger.url());
        let record = ledger
            .read_study(study_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("--seed-from: {source}: no such study in that ledger"))?;
        let scan = ledger.scan(study_id).await.map_err(|e| e.to_string())?;
        let tolerance = crate::decide::gate::ToleranceSpec::from_spec(&record.spec);
        let terminal = scan.terminal();
        let usable: Vec<&AttemptRecord> = terminal
            .values()
            .copied()
            .filter(|a| {
                // A pruned rung says neither how good nor that it failed.
                a.role != RoleKind::Anchor
                    && !matches!(a.status, AttemptStatus::Lost | AttemptStatus::Pruned)
            })
            .collect();
        // The baseline's reference output per (class, cell, budget).
        let mut reference: BTreeMap<(String, String, Option<u64>), &AttemptRecord> =
            BTreeMap::new();
        for a in usable
            .iter()
            .filter(|a| a.is_baseline && a.status == AttemptStatus::Ok)
        {
            let k = (
                a.host_class.to_string(),
                crate::canon::canonical_json(&a.cell),
                a.fidelity.map(f64::to_bits),
            );
            let keep = reference.get(&k).is_none_or(|r| a.repeat < r.repeat);
            if keep {
                reference.insert(k, a);
            }
        }
        // (class, cell, config) → (cell, samples at the budget, failed).
        type Seen = (serde_json::Value, Vec<f64>, bool);
        let mut seen: BTreeMap<(String, String, u64), Seen> = BTreeMap::new();
        for a in usable {
            if a.is_baseline || a.config.as_object().map(|m| m.len()) != Some(study.knobs.len()) {
                continue;
            }
            let Some(config) = space.index_of(study, &a.config) else {
                continue;
            };
            let cell_key = crate::canon::canonical_json(&a.cell);
            let changed = a.status == AttemptStatus::Ok
                && reference
                    .get(&(
                        a.host_class.to_string(),
                        cell_key.clone(),
                        a.fidelity.map(f64::to_bits),
                    ))
                    .is_some_and(|r| {
                        crate::decide::gate::compare_outputs(r, a, tolerance.as_ref()).is_err()
                    });
            let entry = seen
                .entry((a.host_class.to_string(), cell_key, config))
                .or_insert_with(|| ((*a.cell).clone(), Vec::new(), false));
            if a.status == AttemptStatus::Failed || changed {
                entry.2 = true;
            } else if a.fidelity.map(f64::to_bits) == budget.map(f64::to_bits)
                && let Some(samples) = a.metrics.get(metric)
                && let Some(m) = crate::stats::median(samples)
            {
                entry.1.push(m);
            }
        }
        let mut classes: HashMap<String, Vec<Known>> = HashMap::new();
        for ((class, _, config), (cell, values, failed)) in seen {
            let value = if failed {
                None
            } else {
                match crate::stats::median(&values) {
                    Some(v) => Some(v),
                    None => continue,
                }
            };
            classes.entry(class).or_default().push(Known {
                cell,
                config,
                value,
            });
        }
        Ok(Prior { source, classes })
    }

    fn known<'a>(
        &'a self,
        class: &str,
        cell: &'a serde_json::Value,
    ) -> impl Iterator<Item = &'a Known> + 'a {
        self.classes
            .get(class)
            .into_iter()
            .flatten()
            .filter(move |k| k.cell == *cell || k.cell.as_object().is_some_and(|m| m.is_empty()))
    }

    /// Configs known to fail on `class` at `cell`.
    pub fn failed(&self, class: &str, cell: &serde_json::Value) -> HashSet<u64> {
        self.known(class, cell)
            .filter(|k| k.value.is_none())
            .map(|k| k.config)
            .collect()
    }

    /// Earlier values on `class` at `cell` (failures as `None`), by config.
    pub fn observations(&self, class: &str, cell: &serde_json::Value) -> Vec<(u64, Option<f64>)> {
        let mut by_config: BTreeMap<u64, Option<f64>> = BTreeMap::new();
        for k in self.known(class, cell) {
            // A failure anywhere wins over a value.
            let slot = by_config.entry(k.config).or_insert(k.value);
            if k.value.is_none() {
                *slot = None;
            }
        }
        by_config.into_iter().collect()
    }

    /// How many host classes it knows something about.
    pub fn classes(&self) -> usize {
        self.classes.len()
    }
}
