//! The plan: the DAG of trials a study needs on an inventory, built with
//! petgraph, and its cost.
//!
//! Nodes are host probes, one baseline per (host class, cell), one candidate
//! per (host class, cell, config) carrying its repeats, and one verdict per
//! (host class, cell). Candidates depend on their cell's baseline (the gate
//! compares their output with it); the verdict depends on every candidate.
//! Planning spends nothing: it never runs a trial and never writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use petgraph::graph::{DiGraph, NodeIndex};
use serde::Serialize;

use crate::space::{self, ConfigSpace};
use crate::spec::{Study, TemplateCheck, Value};

/// What the plan knows about a host before running anything.
#[derive(Debug, Clone, Serialize)]
pub struct PlanHost {
    pub name: String,
    pub transport: String,
    pub slots: u32,
    /// The host class, when known (probed now or found in the ledger).
    pub class: Option<ClassInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassInfo {
    pub id: String,
    pub label: String,
}

/// A host class as planned: known hosts share their class; a host not yet
/// probed is planned as a class of its own.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedClass {
    pub id: String,
    pub label: String,
    pub probed: bool,
    pub hosts: Vec<String>,
    pub slots: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanNode {
    Probe { host: u32 },
    Baseline { class: u32, cell: u32 },
    Candidate { class: u32, cell: u32, config: u64 },
    Verdict { class: u32, cell: u32 },
}

pub struct Plan {
    pub space: ConfigSpace,
    pub cells: Vec<Vec<Value>>,
    /// Candidate configs (the baseline excluded) per cell, in strategy order,
    /// after constraints and budget.
    pub per_cell: Vec<Arc<Vec<u64>>>,
    /// Configs removed by constraints, per cell.
    pub pruned: Vec<u64>,
    pub classes: Vec<PlannedClass>,
    pub hosts: Vec<PlanHost>,
    pub graph: DiGraph<PlanNode, ()>,
    pub repeats: u32,
    pub warmup: u32,
    pub notes: Vec<String>,
}

impl Plan {
    pub fn build(study: &Study, hosts: &[PlanHost]) -> Result<Plan, String> {
        let space = ConfigSpace::new(study)?;
        let check = TemplateCheck::new(study)?;
        let cells = space::cells(study);
        // A budget bounds how many candidates can ever run; without cell
        // constraints, enumeration can stop there.
        let cells_n = cells.len() as u64;
        let repeats_n = u64::from(study.measurement.repeats);
        let limit = match study.budget.max_trials {
            Some(max) if !check.any_uses_cells() => {
                Some((max / (cells_n * repeats_n).max(1)).saturating_sub(1) + 1)
            }
            _ => None,
        };
        let base = space::candidates(study, &space, &check, limit)?;
        let stopped_early = limit.is_some_and(|l| base.indices.len() as u64 >= l);
        let mut notes: Vec<String> = base.note.into_iter().collect();
        let shared = Arc::new(base.indices);
        let mut per_cell = Vec::with_capacity(cells.len());
        let mut pruned = Vec::with_capacity(cells.len());
        for cell in &cells {
            if check.any_uses_cells() {
                let mut kept = Vec::new();
                let mut cut = base.pruned;
                for &i in shared.iter() {
                    let values = space.values(study, i);
                    if check.violated_where(&values, cell, |uses| uses)?.is_none() {
                        kept.push(i);
                    } else {
                        cut += 1;
                    }
                }
                per_cell.push(Arc::new(kept));
                pruned.push(cut);
            } else {
                per_cell.push(shared.clone());
                pruned.push(base.pruned);
            }
        }
        let repeats = study.measurement.repeats;
        if let Some(max) = study.budget.max_trials {
            apply_budget(&mut per_cell, repeats, max, stopped_early, &mut notes);
        }
        let classes = plan_classes(hosts);
        let graph = build_graph(&classes, hosts, &per_cell, space.baseline());
        Ok(Plan {
            space,
            cells,
            per_cell,
            pruned,
            classes,
            hosts: hosts.to_vec(),
            graph,
            repeats,
            warmup: study.measurement.warmup,
            notes,
        })
    }

    /// Configs (baseline included) in a cell.
    pub fn configs_in_cell(&self, cell: usize) -> u64 {
        1 + self.per_cell[cell].len() as u64
    }

    /// Trials (config × repeat) in a cell, for one host class.
    pub fn trials_in_cell(&self, cell: usize) -> u64 {
        self.configs_in_cell(cell) * u64::from(self.repeats)
    }

    /// Trials for one host class.
    pub fn trials_per_class(&self) -> u64 {
        (0..self.cells.len()).map(|c| self.trials_in_cell(c)).sum()
    }

    /// Uncounted warm-up runs for one host class, if each config warms up
    /// once per cell.
    pub fn warmups_per_class(&self) -> u64 {
        (0..self.cells.len())
            .map(|c| self.configs_in_cell(c) * u64::from(self.warmup))
            .sum()
    }

    /// Trials across all classes.
    pub fn total_trials(&self) -> u64 {
        self.trials_per_class() * self.classes.len() as u64
    }

    /// Cost of one class: every run at its timeout (an upper bound) and,
    /// with a typical run time from the ledger, the expected cost; wall
    /// times divide by the class's slots.
    pub fn cost(&self, class: &PlannedClass, timeout: Duration, typical: Option<Duration>) -> Cost {
        let runs = self.trials_per_class() + self.warmups_per_class();
        let slots = f64::from(class.slots.max(1));
        let worst = timeout.as_secs_f64() * runs as f64;
        let expected = typical.map(|t| t.as_secs_f64() * runs as f64);
        Cost {
            runs,
            worst_trial_seconds: worst,
            worst_wall_seconds: worst / slots,
            expected_trial_seconds: expected,
            expected_wall_seconds: expected.map(|e| e / slots),
        }
    }

    /// Check the DAG is acyclic (it is by construction; this guards changes).
    pub fn check_acyclic(&self) -> Result<(), String> {
        petgraph::algo::toposort(&self.graph, None)
            .map(|_| ())
            .map_err(|c| format!("the trial graph has a cycle at node {:?}", c.node_id()))
    }

    /// Count nodes of the DAG by kind.
    pub fn node_counts(&self) -> BTreeMap<&'static str, u64> {
        let mut out = BTreeMap::new();
        for n in self.graph.node_weights() {
            let k = match n {
                PlanNode::Probe { .. } => "probe",
                PlanNode::Baseline { .. } => "baseline",
                PlanNode::Candidate { .. } => "candidate",
                PlanNode::Verdict { .. } => "verdict",
            };
            *out.entry(k).or_insert(0) += 1;
        }
        out
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Cost {
    /// Runs of the trial command, warm-ups included.
    pub runs: u64,
    pub worst_trial_seconds: f64,
    pub worst_wall_seconds: f64,
    pub expected_trial_seconds: Option<f64>,
    pub expected_wall_seconds: Option<f64>,
}

fn apply_budget(
    per_cell: &mut [Arc<Vec<u64>>],
    repeats: u32,
    max: u64,
    stopped_early: bool,
    notes: &mut Vec<String>,
) {
    let r = u64::from(repeats);
    let lens: Vec<u64> = per_cell.iter().map(|c| c.len() as u64).collect();
    let total = |k: u64| -> u64 { lens.iter().map(|len| (1 + len.min(&k)) * r).sum() };
    let largest = lens.iter().copied().max().unwrap_or(0);
    let full = total(largest);
    if full <= max {
        return;
    }
    // Largest number of candidates per cell that fits the budget.
    let (mut lo, mut hi) = (0u64, largest);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if total(mid) <= max {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let keep = lo as usize;
    for c in per_cell.iter_mut() {
        if c.len() > keep {
            *c = Arc::new(c[..keep].to_vec());
        }
    }
    let kept = total(lo);
    if kept > max {
        notes.push(format!(
            "budget.max_trials = {max} is smaller than the baselines alone ({kept} trials per host class); only baselines are planned"
        ));
    } else {
        notes.push(format!(
            "budget.max_trials = {max}: planned {kept} {of} trials per host class (the first {keep} candidates per cell in strategy order)",
            of = if stopped_early {
                "budget-limited".to_string()
            } else {
                format!("of {full}")
            }
        ));
    }
}

fn plan_classes(hosts: &[PlanHost]) -> Vec<PlannedClass> {
    let mut classes: Vec<PlannedClass> = Vec::new();
    for h in hosts {
        match &h.class {
            Some(info) => {
                if let Some(c) = classes.iter_mut().find(|c| c.id == info.id) {
                    c.hosts.push(h.name.clone());
                    c.slots += h.slots;
                } else {
                    classes.push(PlannedClass {
                        id: info.id.clone(),
                        label: info.label.clone(),
                        probed: true,
                        hosts: vec![h.name.clone()],
                        slots: h.slots,
                    });
                }
            }
            None => classes.push(PlannedClass {
                id: format!("unprobed:{}", h.name),
                label: format!("not probed yet ({} host `{}`)", h.transport, h.name),
                probed: false,
                hosts: vec![h.name.clone()],
                slots: h.slots,
            }),
        }
    }
    classes
}

fn build_graph(
    classes: &[PlannedClass],
    hosts: &[PlanHost],
    per_cell: &[Arc<Vec<u64>>],
    baseline: u64,
) -> DiGraph<PlanNode, ()> {
    let candidates: usize = per_cell.iter().map(|c| c.len()).sum();
    let nodes = hosts.len() + classes.len() * (2 * per_cell.len() + candidates);
    let mut g = DiGraph::with_capacity(nodes, nodes * 2);
    let probes: Vec<(String, NodeIndex)> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            (
                h.name.clone(),
                g.add_node(PlanNode::Probe { host: i as u32 }),
            )
        })
        .collect();
    for (ci, class) in classes.iter().enumerate() {
        let class_probes: Vec<NodeIndex> = probes
            .iter()
            .filter(|(name, _)| class.hosts.contains(name))
            .map(|(_, n)| *n)
            .collect();
        for (cell, configs) in per_cell.iter().enumerate() {
            let (class_id, cell_id) = (ci as u32, cell as u32);
            let b = g.add_node(PlanNode::Baseline {
                class: class_id,
                cell: cell_id,
            });
            for p in &class_probes {
                g.add_edge(*p, b, ());
            }
            let v = g.add_node(PlanNode::Verdict {
                class: class_id,
                cell: cell_id,
            });
            g.add_edge(b, v, ());
            for &config in configs.iter() {
                debug_assert_ne!(config, baseline);
                let c = g.add_node(PlanNode::Candidate {
                    class: class_id,
                    cell: cell_id,
                    config,
                });
                g.add_edge(b, c, ());
                g.add_edge(c, v, ());
            }
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use petgraph::Direction;
    use std::path::Path;

    fn study(extra: &str) -> Study {
        let text = format!(
            "name: t\nknobs:\n  a: {{kind: int, values: [1, 2, 3], default: 1}}\n  b: {{kind: bool, default: false}}\ncells:\n  n: [10, 20]\ntrial: {{command: 'run {{{{ a }}}} {{{{ b }}}} {{{{ n }}}}', timeout: 5s}}\nobjective: {{metric: t, unit: s, better: lower}}\nmeasurement: {{warmup: 0, repeats: 2}}\n{extra}"
        );
        Study::from_text(Path::new("t.yaml"), &text).expect("valid study")
    }

    fn hosts() -> Vec<PlanHost> {
        let h = |name: &str, class: &str| PlanHost {
            name: name.to_string(),
            transport: "local".to_string(),
            slots: 1,
            class: Some(ClassInfo {
                id: class.to_string(),
                label: class.to_string(),
            }),
        };
        vec![h("x", "hc-a"), h("y", "hc-a"), h("z", "hc-b")]
    }

    #[test]
    fn dag_shape() {
        let s = study("");
        let plan = Plan::build(&s, &hosts()).expect("plan");
        plan.check_acyclic().expect("acyclic");
        // 2 classes (x and y share one), 2 cells, 6 configs = baseline + 5.
        assert_eq!(plan.classes.len(), 2);
        assert_eq!(plan.classes[0].hosts, vec!["x", "y"]);
        let counts = plan.node_counts();
        assert_eq!(counts["probe"], 3);
        assert_eq!(counts["baseline"], 4);
        assert_eq!(counts["candidate"], 2 * 2 * 5);
        assert_eq!(counts["verdict"], 4);
        assert_eq!(plan.trials_per_class(), 2 * 6 * 2);
        for n in plan.graph.node_indices() {
            let preds: Vec<_> = plan
                .graph
                .neighbors_directed(n, Direction::Incoming)
                .collect();
            match plan.graph[n] {
                PlanNode::Probe { .. } => assert!(preds.is_empty()),
                // Class hc-a's baselines wait for both of its hosts' probes.
                PlanNode::Baseline { class, .. } => {
                    assert_eq!(preds.len(), if class == 0 { 2 } else { 1 })
                }
                PlanNode::Candidate { .. } => {
                    assert_eq!(preds.len(), 1);
                    assert!(matches!(plan.graph[preds[0]], PlanNode::Baseline { .. }));
                }
                PlanNode::Verdict { .. } => assert_eq!(preds.len(), 6),
            }
        }
    }

    #[test]
    fn constraints_prune_per_cell() {
        let s =
            study("constraints:\n  - \"not (a == 3 and n == 20)\"\n  - \"not (b and a == 2)\"\n");
        let plan = Plan::build(&s, &hosts()[..1]).expect("plan");
        // Knob-only constraint removes (a=2, b=true) everywhere; the cell
        // constraint removes a=3 (both b) at n=20.
        assert_eq!(plan.configs_in_cell(0), 5);
        assert_eq!(plan.configs_in_cell(1), 3);
        assert_eq!(plan.pruned, vec![1, 3]);
    }

    #[test]
    fn budget_truncates_candidates_in_order() {
        let s = study("budget: {max_trials: 12}\n");
        let plan = Plan::build(&s, &hosts()[..1]).expect("plan");
        // 2 cells × (1 + k) × 2 repeats ≤ 12 → k = 2.
        assert_eq!(plan.per_cell[0].len(), 2);
        assert_eq!(plan.trials_per_class(), 12);
        assert!(
            plan.notes[0].contains("budget.max_trials = 12"),
            "{:?}",
            plan.notes
        );
    }

    #[test]
    fn random_is_seeded_and_excludes_the_baseline() {
        let s = study("strategy: {kind: random, seed: 7, count: 3}\n");
        let a = Plan::build(&s, &hosts()[..1]).expect("plan");
        let b = Plan::build(&s, &hosts()[..1]).expect("plan");
        assert_eq!(a.per_cell[0], b.per_cell[0]);
        assert_eq!(a.per_cell[0].len(), 3);
        assert!(!a.per_cell[0].contains(&a.space.baseline()));
        let other = study("strategy: {kind: random, seed: 8, count: 5}\n");
        let c = Plan::build(&other, &hosts()[..1]).expect("plan");
        assert_eq!(c.per_cell[0].len(), 5);
    }

    #[test]
    fn unprobed_hosts_are_their_own_class() {
        let s = study("");
        let mut h = hosts();
        h[1].class = None;
        let plan = Plan::build(&s, &h).expect("plan");
        assert_eq!(plan.classes.len(), 3);
        assert!(
            plan.classes
                .iter()
                .any(|c| c.id == "unprobed:y" && !c.probed)
        );
    }
}
