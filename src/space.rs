//! The search space: configs as mixed-radix indices into the knobs' domains,
//! cells as the cartesian product of the workload axes.
//!
//! Configs are never materialized all at once: a config is a `u64` index and
//! its values are decoded on demand, so a plan over a million configs holds
//! a million integers, not a million maps.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use crate::spec::{MAX_GRID_ENUMERATION, TooLarge, cell_label, cells, check_size, grid_limit};
use crate::spec::{Strategy, Study, TemplateCheck, Value};

/// The cell as a JSON object.
pub fn cell_json(study: &Study, cell: &[Value]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = study
        .cells
        .iter()
        .zip(cell)
        .map(|(a, v)| (a.name.clone(), v.to_json()))
        .collect();
    serde_json::Value::Object(map)
}

/// The trial contract's variables of a config's knob values and a cell's
/// axis values: `TUNECTL_KNOB_<NAME>` per knob, `TUNECTL_CELL_<NAME>` per
/// cell axis (names in upper case), each value as text.
pub fn value_env(study: &Study, config: &[Value], cell: &[Value]) -> Vec<(String, String)> {
    let knobs = study.knobs.iter().zip(config).map(|(k, v)| {
        (
            format!("TUNECTL_KNOB_{}", k.name.to_uppercase()),
            v.to_string(),
        )
    });
    let cells = study.cells.iter().zip(cell).map(|(a, v)| {
        (
            format!("TUNECTL_CELL_{}", a.name.to_uppercase()),
            v.to_string(),
        )
    });
    knobs.chain(cells).collect()
}

/// Decoding of config indices for one study.
#[derive(Debug, Clone)]
pub struct ConfigSpace {
    radices: Vec<u64>,
    size: u64,
    baseline: u64,
}

impl ConfigSpace {
    pub fn new(study: &Study) -> Result<Self, String> {
        let grid = study.grid_size();
        let size = u64::try_from(grid)
            .map_err(|_| format!("the grid has {grid} configs, more than tunectl can index"))?;
        let radices: Vec<u64> = study.knobs.iter().map(|k| k.values.len() as u64).collect();
        let defaults: Vec<u64> = study
            .knobs
            .iter()
            .map(|k| k.default_index() as u64)
            .collect();
        let mut space = ConfigSpace {
            radices,
            size,
            baseline: 0,
        };
        space.baseline = space.encode(&defaults);
        Ok(space)
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn baseline(&self) -> u64 {
        self.baseline
    }

    /// Value index of every knob; the first knob is the most significant.
    pub fn decode(&self, mut index: u64) -> Vec<usize> {
        let mut digits = vec![0usize; self.radices.len()];
        for (slot, radix) in digits.iter_mut().zip(&self.radices).rev() {
            *slot = (index % radix) as usize;
            index /= radix;
        }
        digits
    }

    pub fn encode(&self, digits: &[u64]) -> u64 {
        digits
            .iter()
            .zip(&self.radices)
            .fold(0u64, |acc, (d, r)| acc * r + d)
    }

    pub fn values(&self, study: &Study, index: u64) -> Vec<Value> {
        self.decode(index)
            .into_iter()
            .zip(&study.knobs)
            .map(|(i, k)| k.values[i].clone())
            .collect()
    }

    /// The config as a JSON object of knob values.
    pub fn config_json(&self, study: &Study, index: u64) -> serde_json::Value {
        let map: serde_json::Map<String, serde_json::Value> = study
            .knobs
            .iter()
            .zip(self.values(study, index))
            .map(|(k, v)| (k.name.clone(), v.to_json()))
            .collect();
        serde_json::Value::Object(map)
    }

    /// The index of a config given as a JSON object of knob values.
    pub fn index_of(&self, study: &Study, config: &serde_json::Value) -> Option<u64> {
        let digits: Option<Vec<u64>> = study
            .knobs
            .iter()
            .map(|k| {
                let v = &config[k.name.as_str()];
                k.values
                    .iter()
                    .position(|x| {
                        x.to_json() == *v || (x.as_f64().is_some() && x.as_f64() == v.as_f64())
                    })
                    .map(|i| i as u64)
            })
            .collect();
        Some(self.encode(&digits?))
    }

    /// Knobs that differ from the baseline, as `name=value` pairs.
    pub fn label(&self, study: &Study, index: u64) -> String {
        if index == self.baseline {
            return "baseline".to_string();
        }
        let base = self.decode(self.baseline);
        self.decode(index)
            .into_iter()
            .zip(base)
            .zip(&study.knobs)
            .filter(|((i, b), _)| i != b)
            .map(|((i, _), k)| format!("{}={}", k.name, k.values[i]))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// How many knobs differ from the baseline.
    pub fn distance(&self, index: u64) -> usize {
        let base = self.decode(self.baseline);
        self.decode(index)
            .into_iter()
            .zip(base)
            .filter(|(i, b)| i != b)
            .count()
    }
}

/// Which configs an adaptive search may try at `cell`: not the baseline,
/// not one in `excluded` (known to fail), and not one a constraint removes
/// there. Owns what it needs, so a search can keep it.
pub fn search_filter(
    study: &Study,
    space: &ConfigSpace,
    cell: &[Value],
    excluded: std::collections::HashSet<u64>,
) -> Result<Box<dyn Fn(u64) -> bool + Send>, String> {
    let check = TemplateCheck::new(study)?;
    let (space, cell, study) = (space.clone(), cell.to_vec(), study.clone());
    let baseline = space.baseline();
    Ok(Box::new(move |config: u64| {
        config != baseline
            && !excluded.contains(&config)
            && (check.is_empty()
                || matches!(
                    check.violated_where(&space.values(&study, config), &cell, |_| true),
                    Ok(None)
                ))
    }))
}

/// Candidates (configs other than the baseline) in strategy order, after
/// the constraints that do not depend on the cell.
pub struct Candidates {
    pub indices: Vec<u64>,
    /// Configs removed by constraints.
    pub pruned: u64,
    /// A note for the user (e.g. random sampling found fewer than asked).
    pub note: Option<String>,
}

/// `limit`: stop after this many candidates (a budget that cannot use more).
pub fn candidates(
    study: &Study,
    space: &ConfigSpace,
    check: &TemplateCheck,
    limit: Option<u64>,
) -> Result<Candidates, String> {
    let empty_cell: Vec<Value> = Vec::new();
    let keep = |index: u64| -> Result<bool, String> {
        if check.is_empty() {
            return Ok(true);
        }
        let values = space.values(study, index);
        Ok(check
            .violated_where(&values, &empty_cell, |uses_cells| !uses_cells)?
            .is_none())
    };
    match study.strategy {
        // Chosen as results arrive (see `crate::search`): nothing is listed
        // up front.
        Strategy::Hyperband { .. } | Strategy::Tpe { .. } => Ok(Candidates {
            indices: Vec::new(),
            pruned: 0,
            note: None,
        }),
        Strategy::Grid => {
            if limit.is_none() && space.size() > MAX_GRID_ENUMERATION {
                // Refused with the same words by `check_size`, which the
                // study loader runs: only reached by a study built otherwise.
                return Err(format!(
                    "the grid has {} configs, more than the {MAX_GRID_ENUMERATION} a grid study may enumerate; set budget.max_trials, use `strategy: random`, or prune with constraints",
                    space.size()
                ));
            }
            let mut indices = Vec::new();
            let mut pruned = 0;
            for i in 0..space.size() {
                if limit.is_some_and(|l| indices.len() as u64 >= l) {
                    break;
                }
                if i == space.baseline() {
                    continue;
                }
                if keep(i)? {
                    indices.push(i);
                } else {
                    pruned += 1;
                }
            }
            Ok(Candidates {
                indices,
                pruned,
                note: None,
            })
        }
        Strategy::Random { seed, count } => {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut chosen: Vec<u64> = Vec::new();
            let mut seen = std::collections::HashSet::new();
            seen.insert(space.baseline());
            let mut pruned = 0;
            let others = space.size().saturating_sub(1);
            // Draw with rejection; bounded so that a space mostly removed by
            // constraints ends with a note instead of spinning.
            let max_draws = count.saturating_mul(50).max(10_000);
            let mut draws = 0u64;
            while (chosen.len() as u64) < count
                && (seen.len() as u64) <= others
                && draws < max_draws
            {
                draws += 1;
                let i = rng.random_range(0..space.size());
                if !seen.insert(i) {
                    continue;
                }
                if keep(i)? {
                    chosen.push(i);
                } else {
                    pruned += 1;
                }
            }
            let note = ((chosen.len() as u64) < count).then(|| {
                format!(
                    "random sampling found {} configs satisfying the constraints, fewer than the {count} asked",
                    chosen.len()
                )
            });
            Ok(Candidates {
                indices: chosen,
                pruned,
                note,
            })
        }
    }
}
