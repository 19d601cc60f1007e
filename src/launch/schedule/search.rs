//! Adaptive studies: each (class, cell) runs a search (Hyperband/ASHA or
//! TPE) on rung trials; the baseline's rung at every budget is the gate's
//! reference there. When every cell of a bucket is searched, the union of
//! their finalists is measured as ordinary sweep trials (the objective
//! stage). Jobs whose trial the ledger already holds get their result at
//! once, so a resumed launch replays its search and makes the same
//! decisions.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{Kind, Ran, Scheduler, Setup, Unit};
use crate::launch::events::{LaunchEvent, SearchStop};
use crate::ledger::Scan;
use crate::ledger::records::{AttemptRecord, AttemptStatus};
use crate::search::{
    Brackets, Engine, HyperbandEngine, KnobDomain, ModelProposer, Outcome, PruneRule, Search,
    Source, Step, Tpe, TpeEngine,
};
use crate::space;
use crate::spec::{Proposer, Strategy};
use crate::trial::RoleKind;

/// The adaptive search of one cell on one class.
pub(super) struct CellSearch {
    search: Search,
    /// The baseline's rung attempt at each budget (the gate's reference).
    base: Vec<Option<Arc<AttemptRecord>>>,
    /// Baseline rung attempts not finished.
    base_left: usize,
    /// Why nothing can be searched here.
    stopped: Option<SearchStop>,
    /// Job number of each (config, budget index) handed out.
    jobs: HashMap<(u64, u32), usize>,
    /// Terminal rung attempts by trial key (from the ledger, and of this
    /// launch): a job whose trial is here gets its result without running.
    records: HashMap<String, Arc<AttemptRecord>>,
    /// The search's own finalists, once it is over.
    finalists: Option<Vec<u64>>,
}

impl CellSearch {
    /// The baseline's rung attempt at budget `bi` finished.
    fn take_baseline(&mut self, bi: u32, budget: Option<f64>, rec: &Arc<AttemptRecord>) {
        if rec.status != AttemptStatus::Ok && self.stopped.is_none() {
            self.stopped = Some(SearchStop::BaselineFailed {
                budget,
                failure: rec.failure.as_ref().map(|f| (f.class, f.detail.clone())),
            });
        }
        self.base[bi as usize] = Some(rec.clone());
    }
}

impl Setup<'_> {
    /// The budget index of a search job.
    fn budget_index(&self, budget: f64) -> u32 {
        let trial = self.study.fidelity.as_ref().map(|f| f.trial_budget(budget));
        self.budgets
            .iter()
            .position(|b| b.map(f64::to_bits) == trial.map(f64::to_bits))
            .unwrap_or(self.budgets.len().saturating_sub(1)) as u32
    }

    /// What a rung attempt tells the search: its proxy value, or a failure
    /// (failed, no proxy value, or output different from the baseline's
    /// at the same budget).
    fn rung_outcome(&self, base: Option<&AttemptRecord>, rec: &AttemptRecord) -> Outcome {
        if rec.status != AttemptStatus::Ok {
            return Outcome::Failed;
        }
        if let Some(b) = base
            && crate::decide::gate::compare_outputs(b, rec, self.tolerance.as_ref()).is_err()
        {
            return Outcome::Failed;
        }
        let study = self.study;
        let metric = study
            .fidelity
            .as_ref()
            .map(|f| f.proxy.name.as_str())
            .unwrap_or(study.objective.name.as_str());
        match rec
            .metrics
            .get(metric)
            .and_then(|s| crate::stats::median(s))
        {
            Some(v) if v.is_finite() => Outcome::Value(v),
            _ => Outcome::Failed,
        }
    }
}

impl Scheduler<'_> {
    /// Start the search of every (class, cell): queue the baseline's rung
    /// at every budget. Returns (queued, already done); notes go to `notes`.
    pub(super) fn seed_searches(
        &mut self,
        scan: &Scan,
        notes: &mut Vec<LaunchEvent>,
    ) -> (u64, u64) {
        let (mut queued, mut done) = (0u64, 0u64);
        // Terminal rung attempts of this spec by (class, cell).
        let mut rungs: HashMap<(String, u32), HashMap<String, Arc<AttemptRecord>>> = HashMap::new();
        for a in scan.terminal().values() {
            if a.role == RoleKind::Rung && a.spec_hash == self.s.spec_hash {
                rungs
                    .entry((a.host_class.to_string(), a.cell_index))
                    .or_default()
                    .insert(a.trial_key.clone(), Arc::new((*a).clone()));
            }
        }
        for class in 0..self.s.plan.classes.len() {
            let class_id = self.s.class_ids[class].clone();
            let workers = match self.s.study.strategy {
                Strategy::Hyperband { parallel, .. } | Strategy::Tpe { parallel, .. } => parallel,
                _ => None,
            }
            .map(|p| p as usize)
            .unwrap_or(self.s.plan.classes[class].slots.max(1) as usize);
            for cell in 0..self.s.plan.cells.len() as u32 {
                let search = match self.new_search(class, cell, workers, notes) {
                    Ok(s) => s,
                    Err(error) => {
                        self.out.push(LaunchEvent::SearchCannotStart {
                            cell: self.s.cell_label(cell),
                            class: class_id.clone(),
                            error,
                        });
                        continue;
                    }
                };
                let mut cs_search = CellSearch {
                    search,
                    base: vec![None; self.s.budgets.len()],
                    base_left: 0,
                    stopped: None,
                    jobs: HashMap::new(),
                    records: rungs.remove(&(class_id.clone(), cell)).unwrap_or_default(),
                    finalists: None,
                };
                let cs = &mut self.st.classes[class];
                for bi in 0..self.s.budgets.len() as u32 {
                    let unit = Unit::rung(cell, bi, 0);
                    let key = self.s.key_of(class, unit);
                    match cs_search.records.get(&key).cloned() {
                        Some(rec) => {
                            done += 1;
                            let budget = self.s.budgets.get(bi as usize).copied().flatten();
                            cs_search.take_baseline(bi, budget, &rec);
                        }
                        None => {
                            cs_search.base_left += 1;
                            cs.ready.push(Reverse(unit));
                            queued += 1;
                        }
                    }
                }
                // Until the search is over and its objective stage queued.
                cs.pending += 1;
                cs.searches.insert(cell, cs_search);
            }
        }
        (queued, done)
    }

    /// A new search engine for one (class, cell).
    fn new_search(
        &self,
        class: usize,
        cell: u32,
        workers: usize,
        notes: &mut Vec<LaunchEvent>,
    ) -> Result<Search, String> {
        let study = self.s.study;
        let class_id = self.s.class_ids[class].clone();
        let cell_json = space::cell_json(study, &self.s.plan.cells[cell as usize]);
        let prior = self.s.prior.as_deref();
        let known_failed: HashSet<u64> = prior
            .map(|p| p.failed(&class_id, &cell_json))
            .unwrap_or_default();
        if !known_failed.is_empty() && cell == 0 {
            notes.push(LaunchEvent::KnownFailures {
                class: class_id.clone(),
                count: known_failed.len(),
                source: prior.map(|p| p.source.clone()).unwrap_or_default(),
            });
        }
        let accept = space::search_filter(
            study,
            &self.s.plan.space,
            &self.s.plan.cells[cell as usize],
            known_failed,
        )?;
        let metric = study
            .fidelity
            .as_ref()
            .map(|f| &f.proxy)
            .unwrap_or(&study.objective);
        match study.strategy {
            Strategy::Hyperband {
                seed,
                iterations,
                proposer,
                ..
            } => {
                let f = study
                    .fidelity
                    .as_ref()
                    .ok_or("hyperband needs a `fidelity:` section")?;
                let brackets = Brackets::new(f.min_budget, f.max_budget, f.eta)?;
                let source = Source::new(self.s.plan.space.size(), seed, accept);
                let mut engine = HyperbandEngine::new(brackets, metric.better, iterations, source);
                if proposer == Proposer::Tpe {
                    let domains = study.knobs.iter().map(KnobDomain::for_knob).collect();
                    engine =
                        engine.with_model(ModelProposer::new(domains, metric.better, seed)?)?;
                }
                let search = Search::new(Engine::Hyperband(Box::new(engine)), workers)
                    .with_fixed_cost(f.fixed_cost)
                    .with_continuation(f.continuation);
                Ok(if f.prune {
                    search.with_pruning(f.eta, metric.better)
                } else {
                    search
                })
            }
            Strategy::Tpe { seed, count, .. } => {
                let tpe = Tpe::for_study(study, metric.better, seed)?;
                let warm = prior
                    .map(|p| p.observations(&class_id, &cell_json))
                    .unwrap_or_default();
                let budget = study
                    .fidelity
                    .as_ref()
                    .map(|f| f.max_budget)
                    .unwrap_or(f64::NAN);
                let engine = TpeEngine::new(tpe, metric.better, count, budget, &warm, accept)?;
                let search = Search::new(Engine::Tpe(Box::new(engine)), workers)
                    .with_fixed_cost(study.fidelity.as_ref().map_or(0.0, |f| f.fixed_cost));
                Ok(match study.fidelity.as_ref().filter(|f| f.prune) {
                    // Every config runs at max_budget and is read on its
                    // way at the rung budgets the plan lists.
                    Some(f) => {
                        let ladder = self.s.plan.search.as_ref().map(|p| p.read_at.as_slice());
                        search
                            .with_pruning(f.eta, metric.better)
                            .with_readings(ladder.unwrap_or_default())
                    }
                    None => search,
                })
            }
            _ => Err("not an adaptive strategy".to_string()),
        }
    }

    /// Hand out search jobs of `class` until one must run: returns it, or
    /// `None` when every search waits or is over. Jobs the ledger already
    /// holds get their result at once (a resumed launch replays its search).
    /// Searches that end release their cells' objective stage.
    pub(super) fn advance_searches(&mut self, class: usize) -> Option<Unit> {
        enum Then {
            Run(Unit),
            Again,
            Next,
            Over,
        }
        let cells: Vec<u32> = self.st.classes[class].searches.keys().copied().collect();
        for cell in cells {
            loop {
                let then = {
                    let Scheduler { s, st, out } = &mut *self;
                    let Some(search) = st.classes[class].searches.get_mut(&cell) else {
                        break;
                    };
                    if search.finalists.is_some() || search.base_left > 0 {
                        break;
                    }
                    let step = if search.stopped.is_some() {
                        Ok(Step::Done)
                    } else {
                        search.search.step()
                    };
                    match step {
                        Ok(Step::Run(index, job)) => {
                            let bi = s.budget_index(job.budget);
                            let unit = Unit::rung(cell, bi, job.config + 1);
                            let key = s.key_of(class, unit);
                            search.jobs.insert((job.config, bi), index);
                            match search.records.get(&key).cloned() {
                                Some(rec) => {
                                    let outcome =
                                        s.rung_outcome(search.base[bi as usize].as_deref(), &rec);
                                    let _ = search.search.report_readings(index, &rec.readings);
                                    let _ = search.search.report(index, outcome);
                                    out.push(LaunchEvent::AlreadyDone {
                                        count: 1,
                                        in_plan: false,
                                    });
                                    Then::Again
                                }
                                None => Then::Run(unit),
                            }
                        }
                        Ok(Step::Wait) => Then::Next,
                        Ok(Step::Done) => Then::Over,
                        Err(error) => {
                            search.stopped = Some(SearchStop::Error(error.clone()));
                            out.push(LaunchEvent::SearchStopped {
                                cell: s.cell_label(cell),
                                error,
                            });
                            Then::Over
                        }
                    }
                };
                match then {
                    Then::Run(unit) => {
                        self.out.push(LaunchEvent::More { count: 1 });
                        return Some(unit);
                    }
                    Then::Again => continue,
                    Then::Next => break,
                    Then::Over => {
                        self.search_over(class, cell);
                        break;
                    }
                }
            }
        }
        None
    }

    /// The search of (class, cell) is over: keep its finalists, and once
    /// every cell of its bucket is over, queue the objective stage of the
    /// bucket's cells with the union of their finalists.
    fn search_over(&mut self, class: usize, cell: u32) {
        let k = match self.s.study.strategy {
            Strategy::Hyperband { finalists, .. } | Strategy::Tpe { finalists, .. } => {
                finalists as usize
            }
            _ => 0,
        };
        let label = self.s.cell_label(cell);
        let class_id = self.s.class_ids[class].clone();
        let cs = &mut self.st.classes[class];
        let Some(search) = cs.searches.get_mut(&cell) else {
            return;
        };
        let picked: Vec<u64> = if search.stopped.is_some() {
            Vec::new()
        } else {
            search
                .search
                .finalists(k)
                .iter()
                .map(|s| s.config)
                .collect()
        };
        self.out.push(match &search.stopped {
            Some(why) => LaunchEvent::SearchSkipped {
                cell: label,
                class: class_id,
                why: why.clone(),
            },
            None => LaunchEvent::SearchOver {
                cell: label,
                class: class_id,
                jobs: search.search.issued() as u64,
                finalists: picked
                    .iter()
                    .map(|c| self.s.plan.space.label(self.s.study, *c))
                    .collect(),
            },
        });
        search.finalists = Some(picked);
        let members = self
            .s
            .plan
            .cells_of_bucket(&self.s.plan.bucket_of_cell(cell as usize).key);
        let all_over = members
            .iter()
            .all(|m| cs.searches.get(m).is_none_or(|s| s.finalists.is_some()));
        if !all_over {
            return;
        }
        let mut union: Vec<u64> = members
            .iter()
            .filter_map(|m| cs.searches.get(m).and_then(|s| s.finalists.clone()))
            .flatten()
            .collect();
        union.sort_unstable();
        union.dedup();
        for m in &members {
            if cs.searches.contains_key(m) {
                self.st
                    .plan_writes
                    .push((class, *m, Some(1 + union.len() as u64)));
            }
        }
        let (mut more, mut already) = (0u64, 0u64);
        let cs = &mut self.st.classes[class];
        for m in members {
            if cs.searches.remove(&m).is_none() {
                continue;
            }
            cs.pending = cs.pending.saturating_sub(1);
            cs.finalists.insert(m, union.clone());
            cs.just_released.push(m);
            let first = Unit::sweep(m, 0, 0);
            let key = self.s.key_of(class, first);
            match self.s.first_baselines.get(&key) {
                Some(AttemptStatus::Ok) => {
                    let (n, d) = self.s.release_cell(cs, class, m);
                    more += n;
                    already += d + 1;
                }
                Some(_) => {
                    cs.released.insert(m);
                    already += 1;
                }
                None => {
                    cs.ready.push(Reverse(first));
                    cs.pending += 1;
                    *cs.outstanding.entry(m).or_insert(0) += 1;
                    more += 1;
                }
            }
        }
        if already > 0 {
            self.out.push(LaunchEvent::AlreadyDone {
                count: already,
                in_plan: false,
            });
        }
        if more > 0 {
            self.out.push(LaunchEvent::More { count: more });
        }
    }

    /// The prune rule of a rung job (`fidelity.prune`), in budgets as
    /// trials receive them; `None` for every other unit, the baseline's
    /// rungs and studies without pruning.
    pub fn prune_rule(&self, class: usize, unit: Unit) -> Option<PruneRule> {
        let fidelity = self.s.study.fidelity.as_ref().filter(|f| f.prune)?;
        if unit.kind != Kind::Rung || unit.pos == 0 {
            return None;
        }
        let search = self.st.classes.get(class)?.searches.get(&unit.cell)?;
        let index = *search.jobs.get(&(unit.pos - 1, unit.budget))?;
        Some(
            search
                .search
                .prune_rule(index)
                .map_budgets(|b| fidelity.trial_budget(b)),
        )
    }

    /// The budgets at which a rung job's progress is kept in its attempt
    /// record ([`Search::ladder`]: a `kind: tpe` search with
    /// `fidelity.prune`); empty for every other unit.
    pub fn reading_ladder(&self, class: usize, unit: Unit) -> Vec<f64> {
        if unit.kind != Kind::Rung || unit.pos == 0 {
            return Vec::new();
        }
        self.st
            .classes
            .get(class)
            .and_then(|c| c.searches.get(&unit.cell))
            .map(|s| s.search.ladder().to_vec())
            .unwrap_or_default()
    }

    /// Book-keeping of a rung unit that ended (not lost with its host).
    pub(super) fn finish_rung(&mut self, class: usize, unit: Unit, ran: Option<&Ran>) {
        let budget = self.s.budgets.get(unit.budget as usize).copied().flatten();
        let record = ran
            .filter(|r| r.status != AttemptStatus::Lost)
            .and_then(|r| r.record.clone());
        let Scheduler { s, st, .. } = &mut *self;
        let Some(search) = st.classes[class].searches.get_mut(&unit.cell) else {
            return;
        };
        if let Some(rec) = &record {
            search.records.insert(rec.trial_key.clone(), rec.clone());
        }
        if unit.pos == 0 {
            search.base_left = search.base_left.saturating_sub(1);
            match &record {
                Some(rec) => search.take_baseline(unit.budget, budget, rec),
                None => {
                    if search.stopped.is_none() {
                        search.stopped = Some(SearchStop::BaselineLost { budget });
                    }
                }
            }
            return;
        }
        let config = unit.pos - 1;
        let Some(&index) = search.jobs.get(&(config, unit.budget)) else {
            return;
        };
        let outcome = match &record {
            Some(rec) => {
                let _ = search.search.report_readings(index, &rec.readings);
                s.rung_outcome(search.base[unit.budget as usize].as_deref(), rec)
            }
            // Lost (not with its host) or not recorded: the search goes on
            // without it.
            None => Outcome::Failed,
        };
        let _ = search.search.report(index, outcome);
    }
}
