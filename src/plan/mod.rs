//! The plan: the DAG of trials a study needs on an inventory, built with
//! petgraph, and its cost.
//!
//! Nodes are host probes, one baseline per (host class, cell), one candidate
//! per (host class, cell, config) carrying its repeats, and one verdict per
//! (host class, cell). Candidates depend on their cell's baseline (the gate
//! compares their output with it); the verdict depends on every candidate.
//! Planning spends nothing: it never runs a trial and never writes.

pub mod buckets;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use petgraph::graph::{DiGraph, NodeIndex};
use serde::Serialize;

use crate::space::{self, ConfigSpace};
use crate::spec::{Study, TemplateCheck, Value};
use crate::trial::{Role, TrialIdentity};
use buckets::Bucket;

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
    Probe {
        host: u32,
    },
    Baseline {
        class: u32,
        cell: u32,
    },
    Candidate {
        class: u32,
        cell: u32,
        config: u64,
    },
    /// An adaptive search's rung (hyperband bracket `s`, rung `i`; TPE's
    /// suggestions are bracket 0, rung 0): grows as results arrive.
    Rung {
        class: u32,
        cell: u32,
        bracket: u32,
        rung: u32,
    },
    /// The finalists an adaptive search promotes to the objective stage.
    Finalists {
        class: u32,
        cell: u32,
    },
    Verdict {
        class: u32,
        cell: u32,
    },
}

/// One rung as planned: (budget as the trial gets it, configs, survivors).
pub type RungShape = (f64, u64, u64);

/// The static shape of an adaptive search, per (host class, cell).
#[derive(Debug, Clone, Serialize)]
pub struct SearchPlan {
    pub strategy: &'static str,
    /// Hyperband's brackets: `(s, rungs as (budget as the trial gets it,
    /// configs, survivors))`, most exploratory first.
    pub brackets: Vec<(u32, Vec<RungShape>)>,
    /// The budget's unit (`fidelity.unit`), empty without `fidelity:`.
    pub budget_unit: String,
    pub max_budget: Option<f64>,
    /// Budgets the baseline runs at once per cell (the gate's reference).
    pub baseline_budgets: Vec<f64>,
    /// Screening runs per cell when no early promotion is a mistake (the
    /// brackets' table; TPE: `count`), and the most ASHA can run.
    pub rung_trials: u64,
    pub rung_trials_bound: u64,
    /// Budget units those runs spend (baseline rungs included).
    pub search_budget: f64,
    pub search_budget_bound: f64,
    /// Configs promoted to the objective stage per cell.
    pub finalists: u32,
    /// The objective stage per cell: (1 + finalists) × repeats.
    pub objective_trials: u64,
    /// Candidates of a full grid (constraints not applied: the grid is not
    /// listed) and its trials per cell at `max_budget`: (1 + candidates) ×
    /// repeats.
    pub grid_candidates: u64,
    pub grid_trials: u64,
    /// Expected trial-seconds of the search and objective stage as a share
    /// of a full grid's, with a run's time proportional to its budget.
    pub share_of_grid: f64,
    /// Workers of the virtual schedule (`strategy.parallel`); `None`: the
    /// class's slots at launch.
    pub parallel: Option<u32>,
    pub seed: u64,
    /// Hyperband iterations (the brackets run this many times, over
    /// different configs); 1 for TPE.
    pub iterations: u32,
    /// `fidelity.fixed_cost`: budget units a trial costs besides its budget.
    pub fixed_cost: f64,
    /// The screening, in runs at max budget (each run costing its budget
    /// plus the fixed cost).
    pub search_runs: f64,
    /// `fidelity.continuation`: promoted rungs continue from a checkpoint
    /// (the counts and costs above still count every rung in full).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub continuation: bool,
    /// `fidelity.prune`: rungs may be stopped early from their progress.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub prune: bool,
    /// `kind: tpe` with `fidelity.prune`: the budgets (as trials receive
    /// them) at which each run is read on its way and may be stopped:
    /// the rung budgets of Hyperband's brackets below `max_budget`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_at: Vec<f64>,
}

impl SearchPlan {
    /// What a run at budget `b` costs, as a share of a run at max budget.
    pub fn run_share(&self, b: f64) -> f64 {
        match self.max_budget {
            Some(m) => (b + self.fixed_cost) / (m + self.fixed_cost),
            None => 1.0,
        }
    }
}

impl SearchPlan {
    fn new(study: &Study, space: &ConfigSpace) -> Result<Option<SearchPlan>, String> {
        let (name, seed, finalists, parallel, count, iterations) = match study.strategy {
            crate::spec::Strategy::Hyperband {
                seed,
                finalists,
                parallel,
                iterations,
                ..
            } => ("hyperband", seed, finalists, parallel, None, iterations),
            crate::spec::Strategy::Tpe {
                seed,
                count,
                finalists,
                parallel,
            } => ("tpe", seed, finalists, parallel, Some(count), 1),
            _ => return Ok(None),
        };
        let f = study.fidelity.as_ref();
        let max = f.map(|f| f.trial_budget(f.max_budget));
        // Cost of a run in units of a run at max budget.
        let repeats = u64::from(study.measurement.repeats);
        let candidates = space.size().saturating_sub(1);
        let mut brackets = Vec::new();
        let (rung_trials, bound, budget, budget_bound, baseline_budgets);
        match (count, f) {
            (None, Some(f)) => {
                let b = crate::search::Brackets::new(f.min_budget, f.max_budget, f.eta)?;
                let mut spent = 0.0;
                let mut spent_bound = 0.0;
                let mut budgets: Vec<f64> = Vec::new();
                for br in b.brackets() {
                    let rungs: Vec<RungShape> = br
                        .rungs
                        .iter()
                        .map(|r| (f.trial_budget(r.budget), r.configs, r.survivors))
                        .collect();
                    for (i, (tb, n, _)) in rungs.iter().enumerate() {
                        spent += *n as f64 * tb;
                        // ASHA's bound: rung 0 once, the others twice.
                        spent_bound += if i == 0 { 1.0 } else { 2.0 } * *n as f64 * tb;
                        budgets.push(*tb);
                    }
                    brackets.push((br.s, rungs));
                }
                budgets.sort_by(f64::total_cmp);
                budgets.dedup();
                let base: f64 = budgets.iter().sum();
                // Every iteration runs every bracket (while configs last).
                let it = u64::from(iterations);
                rung_trials = b.total_trials() * it;
                bound = it
                    * brackets
                        .iter()
                        .flat_map(|(_, r)| {
                            r.iter()
                                .enumerate()
                                .map(|(i, x)| if i == 0 { x.1 } else { 2 * x.1 })
                        })
                        .sum::<u64>();
                budget = spent * it as f64 + base;
                budget_bound = spent_bound * it as f64 + base;
                baseline_budgets = budgets;
            }
            (Some(n), _) => {
                let m = max.unwrap_or(1.0);
                rung_trials = n;
                bound = n;
                budget = (n + 1) as f64 * m;
                budget_bound = budget;
                baseline_budgets = max.into_iter().collect();
            }
            (None, None) => return Err("hyperband needs a `fidelity:` section".to_string()),
        }
        let read_at: Vec<f64> = match (count, f.filter(|f| f.prune)) {
            (Some(_), Some(f)) => {
                let mut ladder: Vec<f64> =
                    crate::search::Brackets::new(f.min_budget, f.max_budget, f.eta)?
                        .brackets()
                        .iter()
                        .flat_map(|b| b.rungs.iter().map(|r| f.trial_budget(r.budget)))
                        .filter(|b| *b < f.trial_budget(f.max_budget))
                        .collect();
                ladder.sort_by(f64::total_cmp);
                ladder.dedup();
                ladder
            }
            _ => Vec::new(),
        };
        let objective_trials = (1 + u64::from(finalists)) * repeats;
        let grid_trials = (1 + candidates) * repeats;
        let fixed_cost = f.map_or(0.0, |f| f.fixed_cost);
        // The screening in runs at max budget, a run costing its budget
        // plus the fixed cost.
        let runs = (rung_trials + baseline_budgets.len() as u64) as f64;
        let search_runs = match max {
            Some(m) => (budget + fixed_cost * runs) / (m + fixed_cost),
            None => runs,
        };
        let share_of_grid = (search_runs + objective_trials as f64) / grid_trials.max(1) as f64;
        Ok(Some(SearchPlan {
            strategy: name,
            brackets,
            budget_unit: f.map(|f| f.unit.clone()).unwrap_or_default(),
            max_budget: max,
            baseline_budgets,
            rung_trials,
            rung_trials_bound: bound,
            search_budget: budget,
            search_budget_bound: budget_bound,
            finalists,
            objective_trials,
            grid_candidates: candidates,
            grid_trials,
            share_of_grid,
            parallel,
            seed,
            iterations,
            fixed_cost,
            search_runs,
            continuation: f.is_some_and(|f| f.continuation),
            prune: f.is_some_and(|f| f.prune),
            read_at,
        }))
    }

    /// Trials per cell: baseline rungs, screening runs, objective stage.
    pub fn trials_per_cell(&self) -> u64 {
        self.baseline_budgets.len() as u64 + self.rung_trials + self.objective_trials
    }
}

#[derive(Debug, Clone)]
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
    /// The shape of an adaptive search (hyperband, tpe).
    pub search: Option<SearchPlan>,
    /// The bucket of every cell (under the study's `buckets` rules).
    buckets: Vec<Bucket>,
}

/// One planned sweep trial on one host class: a repeat of a config in a
/// cell (of a grid or random study; an adaptive search's are known only as
/// it runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepTrial {
    pub cell: u32,
    /// Position in the cell: 0 the baseline, `i + 1` its `i`-th candidate.
    pub pos: u64,
    pub config: u64,
    pub repeat: u32,
    /// The trial's key in the ledger.
    pub key: String,
}

/// What the ledger holds that decides whether a planned trial still runs,
/// for one host class.
#[derive(Debug, Default)]
pub struct Progress<'a> {
    /// Trials with a terminal attempt.
    pub done: KeySet<'a>,
    /// Trials a launcher holds a lease on.
    pub running: KeySet<'a>,
    /// Configs that failed in a cell (`(cell, config)`): not tried there
    /// again.
    pub failed_configs: HashSet<(u32, u64)>,
    /// Cells whose baseline failed: no candidate runs there.
    pub failed_baselines: HashSet<u32>,
}

/// Trial keys looked up by [`Plan::still_to_run`]: 100,000 of them at
/// scale, hashed with foldhash (seeded per process) rather than SipHash,
/// which took a tenth of `status`.
pub type KeySet<'a> = HashSet<&'a str, foldhash::fast::RandomState>;

/// The planned sweep trials of a class that neither ended nor are running.
#[derive(Debug, Default)]
pub struct Remaining {
    /// Those a launch will run.
    pub to_run: Vec<SweepTrial>,
    /// Those it will not: their config, or their cell's baseline, failed.
    pub skipped: Vec<SweepTrial>,
}

/// A study's plan before its hosts are known, listed the first time it is
/// needed and then shared: one launch lists its configs once, and each set
/// of hosts (the spend check's, each round's) gets its classes and DAG
/// from it ([`Plan::for_hosts`]).
#[derive(Debug, Default)]
pub struct PlanOnce {
    shard: Option<crate::search::Shard>,
    listed: OnceLock<Plan>,
}

impl PlanOnce {
    /// The plan of a study (or of one shard of its grid), not listed yet.
    pub fn new(shard: Option<crate::search::Shard>) -> PlanOnce {
        PlanOnce {
            shard,
            listed: OnceLock::new(),
        }
    }

    /// The plan of `study` without hosts: listed now the first time (with
    /// [`Plan::build_shard`]'s refusals), else as it was listed then.
    pub fn get(&self, study: &Study) -> Result<&Plan, String> {
        if let Some(p) = self.listed.get() {
            return Ok(p);
        }
        let p = Plan::build_shard(study, &[], self.shard)?;
        Ok(self.listed.get_or_init(|| p))
    }

    /// [`PlanOnce::get`] on `hosts`.
    pub fn on(&self, study: &Study, hosts: &[PlanHost]) -> Result<Plan, String> {
        Ok(self.get(study)?.for_hosts(hosts))
    }
}

impl Plan {
    pub fn build(study: &Study, hosts: &[PlanHost]) -> Result<Plan, String> {
        Plan::build_shard(study, hosts, None)
    }

    /// The grid candidates of study `study` (constraints that do not depend
    /// on the cell applied), in grid order: what `--shard` splits.
    pub fn grid_candidates(study: &Study, space: &ConfigSpace) -> Result<Vec<u64>, String> {
        let check = TemplateCheck::new(study)?;
        Ok(space::candidates(study, space, &check, None)?.indices)
    }

    /// [`Plan::build`] of one shard of a grid: the baseline and the
    /// `shard`-th contiguous slice of the grid's candidates (before the
    /// cell constraints, so every cell splits alike).
    pub fn build_shard(
        study: &Study,
        hosts: &[PlanHost],
        shard: Option<crate::search::Shard>,
    ) -> Result<Plan, String> {
        if let Some(sh) = shard {
            if study.strategy != crate::spec::Strategy::Grid {
                return Err(format!(
                    "--shard {sh} splits a grid; this study's strategy is {} (shard a grid study, or run an adaptive search as one launch)",
                    study.strategy.name()
                ));
            }
            if study.budget.max_trials.is_some() {
                return Err(format!(
                    "--shard {sh}: this study sets budget.max_trials, which would cut each shard's share of the grid differently from a full run; remove it to shard"
                ));
            }
        }
        // Counted before anything is listed (the study loader refused
        // this already; a study built otherwise is refused here alike).
        space::check_size(study).map_err(|e| e.to_string())?;
        let space = ConfigSpace::new(study)?;
        let check = TemplateCheck::new(study)?;
        let cells = space::cells(study);
        // A budget bounds how many candidates can ever run; without cell
        // constraints, enumeration can stop there.
        let limit = space::grid_limit(study, check.any_uses_cells());
        let mut base = space::candidates(study, &space, &check, limit)?;
        let stopped_early = limit.is_some_and(|l| base.indices.len() as u64 >= l);
        let mut notes: Vec<String> = base.note.take().into_iter().collect();
        if let Some(sh) = shard {
            let all = base.indices.len();
            let range = sh.range(all);
            notes.push(format!(
                "shard {sh}: candidates {}..{} of the grid's {all} (grid order) and the baseline; no confirmation round (launch without --shard after every shard to confirm winners: it reruns nothing)",
                range.start + 1,
                range.end
            ));
            base.indices = base.indices[range].to_vec();
        }
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
        let search = SearchPlan::new(study, &space)?;
        let buckets = cells
            .iter()
            .map(|c| buckets::bucket_under(&study.buckets, &space::cell_json(study, c)))
            .collect();
        let listed = Plan {
            space,
            cells,
            per_cell,
            pruned,
            classes: Vec::new(),
            hosts: Vec::new(),
            graph: DiGraph::new(),
            repeats,
            warmup: study.measurement.warmup,
            notes,
            search,
            buckets,
        };
        Ok(listed.for_hosts(hosts))
    }

    /// This plan on `hosts`: the same configs, cells and search, with the
    /// host classes and the DAG of those hosts ([`Plan::build_shard`] of
    /// the same study on `hosts`, without listing the configs again).
    pub fn for_hosts(&self, hosts: &[PlanHost]) -> Plan {
        let classes = plan_classes(hosts);
        let mut graph = build_graph(&classes, hosts, &self.per_cell, self.space.baseline());
        if let Some(sp) = &self.search {
            add_search_nodes(&mut graph, sp, classes.len(), self.cells.len());
        }
        Plan {
            space: self.space.clone(),
            cells: self.cells.clone(),
            per_cell: self.per_cell.clone(),
            pruned: self.pruned.clone(),
            classes,
            hosts: hosts.to_vec(),
            graph,
            repeats: self.repeats,
            warmup: self.warmup,
            notes: self.notes.clone(),
            search: self.search.clone(),
            buckets: self.buckets.clone(),
        }
    }

    /// The bucket cell `cell` belongs to.
    pub fn bucket_of_cell(&self, cell: usize) -> &Bucket {
        &self.buckets[cell]
    }

    /// The cells of the bucket with key `key`, in plan order.
    pub fn cells_of_bucket(&self, key: &str) -> Vec<u32> {
        (0..self.buckets.len() as u32)
            .filter(|c| self.buckets[*c as usize].key == key)
            .collect()
    }

    /// The sweep trials of a grid or random study in cell `cell` on host
    /// class `class` of study `study_id` (a fork has its own id): every
    /// config, the baseline first, with each of its repeats.
    pub fn sweep_trials_in_cell<'a>(
        &'a self,
        study: &'a Study,
        study_id: &'a str,
        class: &'a str,
        cell: u32,
    ) -> impl Iterator<Item = SweepTrial> + 'a {
        let cell_json = space::cell_json(study, &self.cells[cell as usize]);
        let configs = std::iter::once(self.space.baseline())
            .chain(self.per_cell[cell as usize].iter().copied())
            .enumerate();
        configs.flat_map(move |(pos, config)| {
            let config_json = self.space.config_json(study, config);
            // Every repeat's key at once: they share all but the repeat.
            let keys = TrialIdentity {
                study: study_id,
                config: &config_json,
                cell: &cell_json,
                fidelity: study.objective_budget(),
                repeat: 0,
                host_class: class,
                role: Role::Sweep,
            }
            .keys_over_repeats(0..self.repeats);
            (0..self.repeats)
                .zip(keys)
                .map(move |(repeat, key)| SweepTrial {
                    cell,
                    pos: pos as u64,
                    config,
                    repeat,
                    key,
                })
        })
    }

    /// [`Plan::sweep_trials_in_cell`] of every cell, in plan order.
    pub fn sweep_trials<'a>(
        &'a self,
        study: &'a Study,
        study_id: &'a str,
        class: &'a str,
    ) -> impl Iterator<Item = SweepTrial> + 'a {
        (0..self.cells.len() as u32)
            .flat_map(move |cell| self.sweep_trials_in_cell(study, study_id, class, cell))
    }

    /// Which planned sweep trials of host class `class` are still to run,
    /// given what the ledger holds: those neither ended nor running, less
    /// those a launch skips (their config failed in that cell, or the
    /// cell's baseline did).
    pub fn still_to_run(
        &self,
        study: &Study,
        study_id: &str,
        class: &str,
        progress: &Progress,
    ) -> Remaining {
        let mut out = Remaining::default();
        for t in self.sweep_trials(study, study_id, class) {
            if progress.done.contains(t.key.as_str()) || progress.running.contains(t.key.as_str()) {
                continue;
            }
            if progress.failed_baselines.contains(&t.cell)
                || progress.failed_configs.contains(&(t.cell, t.config))
            {
                out.skipped.push(t);
            } else {
                out.to_run.push(t);
            }
        }
        out
    }

    /// Configs (baseline included) in a cell.
    pub fn configs_in_cell(&self, cell: usize) -> u64 {
        1 + self.per_cell[cell].len() as u64
    }

    /// Trials (config × repeat) in a cell, for one host class; for an
    /// adaptive search, as its table expects.
    pub fn trials_in_cell(&self, cell: usize) -> u64 {
        match &self.search {
            Some(s) => s.trials_per_cell(),
            None => self.configs_in_cell(cell) * u64::from(self.repeats),
        }
    }

    /// Trials for one host class.
    pub fn trials_per_class(&self) -> u64 {
        (0..self.cells.len()).map(|c| self.trials_in_cell(c)).sum()
    }

    /// Uncounted warm-up runs for one host class, if each config warms up
    /// once per cell.
    pub fn warmups_per_class(&self) -> u64 {
        if let Some(s) = &self.search {
            // One per config screened (the baseline included) and per
            // config of the objective stage.
            let screened: u64 = if s.brackets.is_empty() {
                s.rung_trials
            } else {
                s.brackets
                    .iter()
                    .filter_map(|(_, r)| r.first().map(|x| x.1))
                    .sum::<u64>()
                    * u64::from(s.iterations)
            };
            let per_cell = screened + 1 + 1 + u64::from(s.finalists);
            return self.cells.len() as u64 * per_cell * u64::from(self.warmup);
        }
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
        // An adaptive search's runs cost in proportion to their budget
        // (`typical` taken as a run at max budget).
        let run_equivalents = match &self.search {
            Some(s) => {
                let cells = self.cells.len() as f64;
                let rel = s.search_runs;
                // One warm-up per config screened (at the budget it starts
                // at) and per config of the objective stage.
                let first_runs: f64 = if s.brackets.is_empty() {
                    s.rung_trials as f64 + 1.0
                } else {
                    s.brackets
                        .iter()
                        .filter_map(|(_, r)| r.first())
                        .map(|(b, n, _)| *n as f64 * s.run_share(*b))
                        .sum::<f64>()
                        * f64::from(s.iterations)
                        + s.baseline_budgets.first().map_or(0.0, |b| s.run_share(*b))
                };
                let warm = f64::from(self.warmup) * (first_runs + 1.0 + f64::from(s.finalists));
                cells * (rel + s.objective_trials as f64 + warm)
            }
            None => runs as f64,
        };
        let expected = typical.map(|t| t.as_secs_f64() * run_equivalents);
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
                PlanNode::Rung { .. } => "rung",
                PlanNode::Finalists { .. } => "finalists",
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

/// Per (class, cell): baseline → each bracket's rungs in a chain →
/// finalists → verdict. The rungs are shapes, not trials: an adaptive
/// search decides their configs as results arrive.
fn add_search_nodes(g: &mut DiGraph<PlanNode, ()>, sp: &SearchPlan, classes: usize, cells: usize) {
    let find = |g: &DiGraph<PlanNode, ()>, want: PlanNode| g.node_indices().find(|n| g[*n] == want);
    for class in 0..classes as u32 {
        for cell in 0..cells as u32 {
            let (Some(base), Some(verdict)) = (
                find(g, PlanNode::Baseline { class, cell }),
                find(g, PlanNode::Verdict { class, cell }),
            ) else {
                continue;
            };
            let fin = g.add_node(PlanNode::Finalists { class, cell });
            let shapes: Vec<(u32, usize)> = if sp.brackets.is_empty() {
                vec![(0, 1)]
            } else {
                sp.brackets.iter().map(|(s, r)| (*s, r.len())).collect()
            };
            for (s, rungs) in shapes {
                let mut prev = base;
                for i in 0..rungs as u32 {
                    let r = g.add_node(PlanNode::Rung {
                        class,
                        cell,
                        bracket: s,
                        rung: i,
                    });
                    g.add_edge(prev, r, ());
                    prev = r;
                }
                g.add_edge(prev, fin, ());
            }
            g.add_edge(fin, verdict, ());
        }
    }
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
    fn a_plan_listed_once_gives_each_host_set_the_plan_built_on_it() {
        let s = study("");
        let once = PlanOnce::new(None);
        let listed: *const Plan = once.get(&s).expect("listed");
        for hosts in [hosts(), hosts()[..1].to_vec(), Vec::new()] {
            let direct = Plan::build(&s, &hosts).expect("plan");
            let on = once.on(&s, &hosts).expect("plan");
            assert_eq!(
                format!("{:?}", (&on.classes, &on.graph, &on.per_cell, &on.cells)),
                format!(
                    "{:?}",
                    (
                        &direct.classes,
                        &direct.graph,
                        &direct.per_cell,
                        &direct.cells
                    )
                )
            );
            assert_eq!(on.hosts.len(), hosts.len());
        }
        // Listed once: later calls get the same plan.
        assert!(std::ptr::eq(listed, once.get(&s).expect("listed")));
    }

    #[test]
    fn the_plan_knows_each_cell_s_bucket_and_each_bucket_s_cells() {
        // n: 10 and 20 fall in different pow2 buckets; with `all`, in one.
        let s = study("");
        let plan = Plan::build(&s, &hosts()).expect("plan");
        assert_eq!(plan.bucket_of_cell(0).label, "n ∈ [8, 16)");
        assert_eq!(plan.bucket_of_cell(1).label, "n ∈ [16, 32)");
        for c in 0..2 {
            let b = plan.bucket_of_cell(c);
            // The bucket the ledger's frozen spec gives.
            let frozen = buckets::bucket_of(&s.frozen(), &space::cell_json(&s, &plan.cells[c]));
            assert_eq!(*b, frozen);
            assert_eq!(plan.cells_of_bucket(&b.key), vec![c as u32]);
        }
        let s = study("buckets: {n: all}");
        let plan = Plan::build(&s, &hosts()).expect("plan");
        assert_eq!(plan.bucket_of_cell(0), plan.bucket_of_cell(1));
        assert_eq!(
            plan.cells_of_bucket(&plan.bucket_of_cell(1).key),
            vec![0, 1]
        );
        assert!(plan.cells_of_bucket("no such bucket").is_empty());
    }

    #[test]
    fn sweep_trials_and_what_is_still_to_run() {
        let s = study("");
        let plan = Plan::build(&s, &hosts()).expect("plan");
        let all: Vec<SweepTrial> = plan.sweep_trials(&s, s.id(), "hc-a").collect();
        // 2 cells × 6 configs × 2 repeats, baseline first in each cell.
        assert_eq!(all.len() as u64, plan.trials_per_class());
        assert_eq!((all[0].cell, all[0].pos, all[0].repeat), (0, 0, 0));
        assert_eq!(all[0].config, plan.space.baseline());
        assert_eq!((all[1].pos, all[1].repeat), (0, 1));
        assert_eq!(all[2].config, plan.per_cell[0][0]);
        assert_eq!(all[12].cell, 1);
        let keys: HashSet<&str> = all.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys.len(), all.len(), "keys are distinct");
        // Another class, another study id: other keys.
        let b: Vec<SweepTrial> = plan.sweep_trials(&s, s.id(), "hc-b").collect();
        let forked: Vec<SweepTrial> = plan.sweep_trials(&s, "t-fork", "hc-a").collect();
        assert!(
            b.iter()
                .chain(&forked)
                .all(|t| !keys.contains(t.key.as_str()))
        );

        let none = plan.still_to_run(&s, s.id(), "hc-a", &Progress::default());
        assert_eq!(none.to_run, all);
        assert!(none.skipped.is_empty());

        let failed = all[2].config;
        let progress = Progress {
            done: [all[0].key.as_str(), all[2].key.as_str()]
                .into_iter()
                .collect(),
            running: [all[1].key.as_str()].into_iter().collect(),
            failed_configs: [(0, failed)].into(),
            failed_baselines: [1].into(),
        };
        let r = plan.still_to_run(&s, s.id(), "hc-a", &progress);
        // Cell 0: the failed config's other repeat is skipped; cell 1:
        // everything (its baseline failed).
        assert_eq!(r.skipped.len(), 1 + 12);
        assert_eq!(
            (r.skipped[0].cell, r.skipped[0].config, r.skipped[0].repeat),
            (0, failed, 1)
        );
        assert_eq!(r.to_run.len(), 12 - 3 - 1);
        assert!(
            r.to_run
                .iter()
                .all(|t| t.cell == 0 && t.config != failed && t.pos > 0)
        );
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
                PlanNode::Rung { .. } | PlanNode::Finalists { .. } => {
                    panic!("a grid plan has no search nodes")
                }
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
