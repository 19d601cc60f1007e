//! Hyperband brackets (Li, Jamieson, DeSalvo, Rostamizadeh, Talwalkar:
//! "Hyperband: A Novel Bandit-Based Approach to Hyperparameter
//! Optimization", JMLR 18, 2018) run with asynchronous successive halving
//! (Li, Jamieson, Rostamizadeh, Gonina, Ben-Tzur, Hardt, Recht, Talwalkar:
//! "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020,
//! "ASHA").
//!
//! [`Brackets`] is the static shape that `plan --dry-run` shows: for every
//! bracket, its rungs with their budgets, config counts and survivors, and
//! the total budget next to a full grid's. [`Asha`] is the state machine
//! the scheduler drives: it hands out `(config, rung)` jobs and takes their
//! outcomes, promoting a config as soon as it ranks in the top `1/eta` of
//! the results its rung has so far (up to the rung's planned count), so a
//! free slot never waits for a rung to fill; when a rung can get no more
//! results, whatever synchronous successive halving would keep goes on too.
//!
//! Budgets are in the study's own units (samples, iterations, requests);
//! [`round_budget`] turns one into the integer a trial receives when those
//! units are whole numbers.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashSet};

use crate::spec::Better;
pub use crate::spec::{MAX_BRACKET_CONFIGS, round_budget};

/// Consecutive already-seen configs [`Asha`] skips from its source before it
/// treats the source as exhausted (a guard against a sampler that repeats
/// forever on a small space).
pub const MAX_DUPLICATE_DRAWS: u64 = 100_000;

/// One rung of a bracket: `configs` run at `budget`; the best `survivors`
/// of them go on.
#[derive(Debug, Clone, PartialEq)]
pub struct Rung {
    /// `i` in `0..=s`.
    pub index: u32,
    /// `r_i = max_budget · eta^(i - s)`, in the study's units.
    pub budget: f64,
    /// `n_i = floor(n · eta^(-i))`.
    pub configs: u64,
    /// How many configs leave this rung for the next: `n_{i+1} =
    /// floor(n_i / eta)`. On the top rung (budget `max_budget`) every config
    /// that completes is a finalist, so there `survivors == configs`.
    pub survivors: u64,
}

impl Rung {
    /// [`round_budget`] of this rung's budget.
    pub fn budget_rounded(&self) -> u64 {
        round_budget(self.budget)
    }

    /// Budget spent on this rung: `configs · budget`.
    pub fn total_budget(&self) -> f64 {
        self.configs as f64 * self.budget
    }
}

/// One bracket of Hyperband: successive halving started with `n` configs at
/// budget `r`, eliminating all but the top `1/eta` at every rung.
#[derive(Debug, Clone, PartialEq)]
pub struct Bracket {
    /// The bracket's `s`, `s_max..=0`: it has `s + 1` rungs.
    pub s: u32,
    /// Rungs from the smallest budget to `max_budget`.
    pub rungs: Vec<Rung>,
}

impl Bracket {
    /// `n`: configs started at rung 0.
    pub fn configs(&self) -> u64 {
        self.rungs[0].configs
    }

    /// `r`: the budget of rung 0.
    pub fn start_budget(&self) -> f64 {
        self.rungs[0].budget
    }

    /// Trials the bracket runs when every config completes: `Σ n_i`.
    pub fn trials(&self) -> u64 {
        self.rungs.iter().map(|r| r.configs).sum()
    }

    /// Budget the bracket spends: `Σ n_i · r_i` (a promoted config runs its
    /// next rung from scratch, so each rung is paid in full).
    pub fn total_budget(&self) -> f64 {
        self.rungs.iter().map(Rung::total_budget).sum()
    }

    /// Most budget [`Asha`] can spend on this bracket: `n_0 · r_0 + 2 ·
    /// Σ_{i>=1} n_i · r_i` (each rung above 0 runs at most twice its planned
    /// count; see [`Asha`]).
    pub fn budget_bound(&self) -> f64 {
        self.total_budget() * 2.0 - self.rungs[0].total_budget()
    }

    /// `Σ n_i · round_budget(r_i)`: what the bracket spends when trials get
    /// integer budgets.
    pub fn total_budget_rounded(&self) -> u64 {
        self.rungs
            .iter()
            .map(|r| r.configs.saturating_mul(r.budget_rounded()))
            .fold(0u64, u64::saturating_add)
    }
}

/// The brackets of one Hyperband iteration, from the most exploratory
/// (`s = s_max`: many configs, small budgets) to plain random search at
/// `max_budget` (`s = 0`).
///
/// With `R = max_budget / min_budget`:
/// - `s_max = floor(log_eta(R))`, computed as the largest `s` with `eta^s <=
///   R · (1 + 1e-9)` in integers, so float error in `R` cannot lose a bracket;
/// - bracket `s` starts `n = ceil((s_max + 1) · eta^s / (s + 1))` configs (an
///   exact integer ceiling) at budget `r = max_budget · eta^(-s)`;
/// - its rung `i` (`0..=s`) runs `n_i = floor(n / eta^i)` configs at budget
///   `r_i = max_budget / eta^(s - i)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Brackets {
    min_budget: f64,
    max_budget: f64,
    eta: u32,
    s_max: u32,
    brackets: Vec<Bracket>,
}

impl Brackets {
    /// The brackets for a study's `fidelity:` section, on the study's own
    /// check of it ([`crate::spec::hyperband_s_max`]). Errors name the
    /// field: `min_budget` must be a positive finite number, `max_budget`
    /// finite and at least `min_budget`, `eta` at least 2, and the largest
    /// bracket may start at most [`MAX_BRACKET_CONFIGS`] configs.
    pub fn new(min_budget: f64, max_budget: f64, eta: u32) -> Result<Brackets, String> {
        let s_max = crate::spec::hyperband_s_max(min_budget, max_budget, eta)?;
        let eta64 = u64::from(eta);
        let brackets = (0..=s_max)
            .rev()
            .map(|s| bracket(s, s_max, eta64, max_budget))
            .collect();
        Ok(Brackets {
            min_budget,
            max_budget,
            eta,
            s_max,
            brackets,
        })
    }

    pub fn min_budget(&self) -> f64 {
        self.min_budget
    }

    pub fn max_budget(&self) -> f64 {
        self.max_budget
    }

    pub fn eta(&self) -> u32 {
        self.eta
    }

    /// `floor(log_eta(max_budget / min_budget))`.
    pub fn s_max(&self) -> u32 {
        self.s_max
    }

    /// All brackets, `s = s_max` first.
    pub fn brackets(&self) -> &[Bracket] {
        &self.brackets
    }

    /// The bracket with this `s`, if `s <= s_max`.
    pub fn bracket(&self, s: u32) -> Option<&Bracket> {
        let pos = self.s_max.checked_sub(s)?;
        self.brackets.get(pos as usize)
    }

    /// The budget of rung `rung` of bracket `s`, if both exist.
    pub fn budget_for_rung(&self, s: u32, rung: u32) -> Option<f64> {
        Some(self.bracket(s)?.rungs.get(rung as usize)?.budget)
    }

    /// [`round_budget`] of [`Brackets::budget_for_rung`].
    pub fn budget_for_rung_rounded(&self, s: u32, rung: u32) -> Option<u64> {
        self.budget_for_rung(s, rung).map(round_budget)
    }

    /// Trials of all brackets: `Σ_s Σ_i n_i`.
    pub fn total_trials(&self) -> u64 {
        self.brackets.iter().map(Bracket::trials).sum()
    }

    /// Budget of all brackets: `Σ_s Σ_i n_i · r_i`.
    pub fn total_budget(&self) -> f64 {
        self.brackets.iter().map(Bracket::total_budget).sum()
    }

    /// Most budget [`Asha`] can spend on all brackets: `Σ_s`
    /// [`Bracket::budget_bound`].
    pub fn budget_bound(&self) -> f64 {
        self.brackets.iter().map(Bracket::budget_bound).sum()
    }

    /// Budget of all brackets with integer budgets.
    pub fn total_budget_rounded(&self) -> u64 {
        self.brackets
            .iter()
            .map(Bracket::total_budget_rounded)
            .fold(0u64, u64::saturating_add)
    }

    /// Budget of a full grid of `configs` configs, each run once at
    /// `max_budget`: `configs · max_budget` (its trial count is `configs`).
    pub fn grid_budget(&self, configs: u64) -> f64 {
        configs as f64 * self.max_budget
    }

    /// [`Brackets::grid_budget`] with integer budgets.
    pub fn grid_budget_rounded(&self, configs: u64) -> u64 {
        configs.saturating_mul(round_budget(self.max_budget))
    }
}

fn bracket(s: u32, s_max: u32, eta: u64, max_budget: f64) -> Bracket {
    // eta^s_max <= MAX_BRACKET_CONFIGS, so none of these overflow.
    let eta_s = eta.pow(s);
    let n = (u64::from(s_max + 1) * eta_s).div_ceil(u64::from(s + 1));
    let rungs = (0..=s)
        .map(|i| {
            let configs = n / eta.pow(i);
            let survivors = if i == s { configs } else { configs / eta };
            Rung {
                index: i,
                // Divide by the exact integer power: the top rung is
                // max_budget exactly.
                budget: max_budget / eta.pow(s - i) as f64,
                configs,
                survivors,
            }
        })
        .collect();
    Bracket { s, rungs }
}

/// What a job produced on the metric rungs are read on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// The metric's value (its direction is the one [`Asha`] was built
    /// with). A non-finite value counts as a failure.
    Value(f64),
    /// The trial failed (crash, OOM, timeout, no result, output changed):
    /// the config ranks below every value and is never promoted.
    Failed,
}

/// One trial to run: `config` at rung `rung` of bracket `bracket`, with
/// `budget` in the study's units ([`round_budget`] for integer units).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Job {
    pub config: u64,
    /// The bracket's `s`.
    pub bracket: u32,
    pub rung: u32,
    pub budget: f64,
}

/// A completed result at one rung.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    pub config: u64,
    pub value: f64,
    /// The bracket's `s` (for [`Asha::finalists`], which merges brackets).
    pub bracket: u32,
}

/// Progress counts of one rung.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RungStatus {
    /// Jobs handed out at this rung (running or completed).
    pub started: u64,
    pub running: u64,
    /// Completed with a value or a failure.
    pub completed: u64,
    pub failed: u64,
    /// Configs of this rung started at the next rung.
    pub promoted: u64,
}

/// A successful result ordered best first; ties by config index.
#[derive(Debug, Clone, Copy)]
struct Ranked {
    /// The value turned so that lower is better.
    key: f64,
    value: f64,
    config: u64,
}

impl Ranked {
    fn new(value: f64, config: u64, better: Better) -> Ranked {
        // `+ 0.0` turns -0.0 into 0.0, so that the two tie.
        let key = match better {
            Better::Lower => value,
            Better::Higher => -value,
        } + 0.0;
        Ranked { key, value, config }
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key
            .total_cmp(&other.key)
            .then(self.config.cmp(&other.config))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

#[derive(Debug, Clone)]
struct RungState {
    budget: f64,
    /// The table's `n_i`: most configs this rung may start.
    planned: u64,
    successes: BTreeSet<Ranked>,
    failed: BTreeSet<u64>,
    running: BTreeSet<u64>,
    promoted: HashSet<u64>,
}

impl RungState {
    fn completed(&self) -> u64 {
        (self.successes.len() + self.failed.len()) as u64
    }
}

/// Successive halving of one bracket, asynchronously.
#[derive(Debug, Clone)]
struct Ladder {
    s: u32,
    /// Configs started at rung 0 (at most the table's `n`).
    started: u64,
    rungs: Vec<RungState>,
}

impl Ladder {
    fn new(bracket: &Bracket) -> Ladder {
        Ladder {
            s: bracket.s,
            started: 0,
            rungs: bracket
                .rungs
                .iter()
                .map(|r| RungState {
                    budget: r.budget,
                    planned: r.configs,
                    successes: BTreeSet::new(),
                    failed: BTreeSet::new(),
                    running: BTreeSet::new(),
                    promoted: HashSet::new(),
                })
                .collect(),
        }
    }

    /// The promotion due now, if any, from the highest rung below the top
    /// down to rung 0: `(config, rung it goes to)`.
    ///
    /// - Open rung `k` (ASHA): the best config among the top `floor(c_k /
    ///   eta)` of the `c_k` results completed so far that was not promoted
    ///   yet, while fewer than the planned `n_{k+1}` have been promoted.
    ///   Failures count in `c_k` and rank last, so they are never promoted.
    /// - Closed rung `k` (nothing running there, and nothing more can reach
    ///   it: rung 0 can start no more configs, or the rung below is closed
    ///   with no promotion due): every config among its top `q_k =
    ///   clamp(floor(c_k / eta), 1, n_{k+1})` successes that was not
    ///   promoted yet, cap or not. That is synchronous successive halving's
    ///   decision on the same results, so a late, better result is never
    ///   lost to an early promotion, and a rung left with fewer than `eta`
    ///   results still sends its best on to `max_budget`.
    fn promotion(&self, eta: u64, source_done: bool) -> Option<(u64, usize)> {
        let top = self.rungs.len() - 1;
        let mut due: Vec<Option<u64>> = Vec::with_capacity(top);
        let mut inflow_closed = source_done || self.rung0_full();
        for k in 0..top {
            let rung = &self.rungs[k];
            let closed = inflow_closed && rung.running.is_empty();
            let planned = self.rungs[k + 1].planned;
            let keep = rung.completed() / eta;
            let keep = if closed {
                Some(keep.max(1).min(planned))
            } else {
                ((rung.promoted.len() as u64) < planned).then_some(keep)
            };
            let next = keep.and_then(|keep| {
                rung.successes
                    .iter()
                    .take(keep as usize)
                    .find(|r| !rung.promoted.contains(&r.config))
                    .map(|r| r.config)
            });
            inflow_closed = closed && next.is_none();
            due.push(next);
        }
        (0..top)
            .rev()
            .find_map(|k| due[k].map(|config| (config, k + 1)))
    }

    fn rung0_full(&self) -> bool {
        self.started >= self.rungs[0].planned
    }

    fn start(&mut self, config: u64, rung: usize) -> Job {
        if rung == 0 {
            self.started += 1;
        } else {
            self.rungs[rung - 1].promoted.insert(config);
        }
        let state = &mut self.rungs[rung];
        state.running.insert(config);
        Job {
            config,
            bracket: self.s,
            rung: rung as u32,
            budget: state.budget,
        }
    }
}

/// Asynchronous successive halving over one bracket, or over all brackets of
/// a Hyperband iteration taken round-robin.
///
/// The caller loop:
/// ```text
/// loop {
///     while a slot is free { match asha.next_job() { Some(job) => run it, None => break } }
///     if asha.is_done() { break }
///     wait for a job to finish; asha.report(&job, outcome)
/// }
/// ```
///
/// - [`Asha::next_job`] gives a promotion when one is due (ASHA rule, see
///   below), else a new config from the source at rung 0 of the bracket,
///   until the bracket has started its `n` configs. It returns `None` when
///   nothing can start *now*; [`Asha::is_done`] says whether anything ever
///   will (it is exact right after `next_job` returned `None`).
/// - Promotion (ASHA): while rung `k` can still get results, a config
///   completed there is promoted to rung `k + 1` when it ranks in the top
///   `floor(c_k / eta)` of the `c_k` results completed so far, is not a
///   failure and was not promoted before, as long as fewer than the
///   table's `n_{k+1}` have been promoted. Higher rungs are served first.
/// - Closing: once rung `k` can get no more results, its top `q_k =
///   clamp(floor(c_k / eta), 1, n_{k+1})` successes are all promoted (those
///   not promoted yet): synchronous successive halving's decision on the
///   same results. So ASHA's early promotions never cost a late, better
///   config its place (plain ASHA's mispromotions, Li et al. 2020), and a
///   rung left with fewer than `eta` results (a small space,
///   failures) still sends its best on to `max_budget`.
/// - Budget: with every config completing in an order that makes no early
///   mistake, the counts per rung are the table's. Each mistaken early
///   promotion adds one trial: rung `k >= 1` runs at most `2 · n_k`
///   configs, [`Bracket::budget_bound`]. (Uncapped ASHA has no such bound:
///   results arriving best-last promote nearly every config.)
/// - Sources: configs come from the caller's iterator, shared by all
///   brackets. A config enters rung 0 at most once over all brackets, so
///   `(config, budget)`, and hence its trial key, is never run twice;
///   configs already seen are skipped ([`MAX_DUPLICATE_DRAWS`] in a row end
///   the source).
/// - Round-robin: `next_job` asks the brackets in turn, starting after the one
///   that gave the last job, most exploratory bracket first.
/// - Deterministic: given the same source and the same sequence of `next_job`
///   and `report` calls, the same jobs come out; equal values rank by
///   config index.
#[derive(Debug, Clone)]
pub struct Asha<I> {
    eta: u64,
    better: Better,
    ladders: Vec<Ladder>,
    source: I,
    source_done: bool,
    seen: HashSet<u64>,
    cursor: usize,
}

impl<I: Iterator<Item = u64>> Asha<I> {
    /// ASHA over every bracket of `brackets` (asynchronous Hyperband).
    pub fn hyperband(brackets: &Brackets, better: Better, source: I) -> Asha<I> {
        Asha::with_ladders(
            brackets.eta(),
            better,
            brackets.brackets().iter().map(Ladder::new).collect(),
            source,
        )
    }

    /// ASHA over the single bracket `s` of `brackets` (`s = s_max` is plain
    /// successive halving from `min_budget`).
    pub fn bracket(
        brackets: &Brackets,
        s: u32,
        better: Better,
        source: I,
    ) -> Result<Asha<I>, String> {
        let bracket = brackets.bracket(s).ok_or_else(|| {
            format!(
                "there is no bracket s={s}: brackets run from s={} down to 0",
                brackets.s_max()
            )
        })?;
        Ok(Asha::with_ladders(
            brackets.eta(),
            better,
            vec![Ladder::new(bracket)],
            source,
        ))
    }

    fn with_ladders(eta: u32, better: Better, ladders: Vec<Ladder>, source: I) -> Asha<I> {
        Asha {
            eta: u64::from(eta),
            better,
            ladders,
            source,
            source_done: false,
            seen: HashSet::new(),
            cursor: 0,
        }
    }

    /// The next job to start now, or `None` when every possible job must
    /// wait for a result (or the search is over: see [`Asha::is_done`]).
    pub fn next_job(&mut self) -> Option<Job> {
        let count = self.ladders.len();
        for step in 0..count {
            let at = (self.cursor + step) % count;
            if let Some(job) = self.next_in(at) {
                self.cursor = (at + 1) % count;
                return Some(job);
            }
        }
        None
    }

    fn next_in(&mut self, at: usize) -> Option<Job> {
        if let Some((config, rung)) = self.ladders[at].promotion(self.eta, self.source_done) {
            return Some(self.ladders[at].start(config, rung));
        }
        if !self.ladders[at].rung0_full()
            && let Some(config) = self.draw()
        {
            return Some(self.ladders[at].start(config, 0));
        }
        // The draw may just have found the source exhausted, which closes
        // rung 0 and can make a promotion due.
        let (config, rung) = self.ladders[at].promotion(self.eta, self.source_done)?;
        Some(self.ladders[at].start(config, rung))
    }

    fn draw(&mut self) -> Option<u64> {
        if self.source_done {
            return None;
        }
        let mut duplicates = 0u64;
        while duplicates < MAX_DUPLICATE_DRAWS {
            match self.source.next() {
                None => break,
                Some(config) if self.seen.insert(config) => return Some(config),
                Some(_) => duplicates += 1,
            }
        }
        self.source_done = true;
        None
    }

    /// Record the outcome of a job [`Asha::next_job`] gave. An error when that
    /// job is not running (never given, or already reported).
    pub fn report(&mut self, job: &Job, outcome: Outcome) -> Result<(), String> {
        let better = self.better;
        let rung = self
            .ladders
            .iter_mut()
            .find(|l| l.s == job.bracket)
            .and_then(|l| l.rungs.get_mut(job.rung as usize))
            .filter(|r| r.running.contains(&job.config))
            .ok_or_else(|| {
                format!(
                    "config {} is not running at rung {} of bracket s={}",
                    job.config, job.rung, job.bracket
                )
            })?;
        rung.running.remove(&job.config);
        match outcome {
            Outcome::Value(v) if v.is_finite() => {
                rung.successes.insert(Ranked::new(v, job.config, better));
            }
            Outcome::Value(_) | Outcome::Failed => {
                rung.failed.insert(job.config);
            }
        }
        Ok(())
    }

    /// Jobs given out and not reported yet.
    pub fn running(&self) -> usize {
        self.ladders
            .iter()
            .flat_map(|l| &l.rungs)
            .map(|r| r.running.len())
            .sum()
    }

    /// Whether the search is over: nothing running, no promotion due, and
    /// every bracket has started its `n` configs or the source ran out (the
    /// latter is known once [`Asha::next_job`] tried to draw past its end).
    pub fn is_done(&self) -> bool {
        self.running() == 0
            && self.ladders.iter().all(|l| {
                l.promotion(self.eta, self.source_done).is_none()
                    && (self.source_done || l.rung0_full())
            })
    }

    /// Progress counts of rung `rung` of bracket `s`.
    pub fn rung_status(&self, s: u32, rung: u32) -> Option<RungStatus> {
        let state = self
            .ladders
            .iter()
            .find(|l| l.s == s)?
            .rungs
            .get(rung as usize)?;
        let running = state.running.len() as u64;
        Some(RungStatus {
            started: running + state.completed(),
            running,
            completed: state.completed(),
            failed: state.failed.len() as u64,
            promoted: state.promoted.len() as u64,
        })
    }

    /// The best `k` successful results completed at rung `rung` of bracket
    /// `s`, best first (ties by config index); failures are never listed.
    /// On the top rung these are the bracket's survivors to promote to the
    /// objective metric.
    pub fn top_k(&self, s: u32, rung: u32, k: usize) -> Vec<Scored> {
        let Some(state) = self
            .ladders
            .iter()
            .find(|l| l.s == s)
            .and_then(|l| l.rungs.get(rung as usize))
        else {
            return Vec::new();
        };
        state
            .successes
            .iter()
            .take(k)
            .map(|r| Scored {
                config: r.config,
                value: r.value,
                bracket: s,
            })
            .collect()
    }

    /// The best `k` results at `max_budget` over all brackets (their top
    /// rungs all run at `max_budget`, so they compare directly), best first,
    /// ties by config index: "the top-K survivors" to promote to the
    /// objective metric.
    pub fn finalists(&self, k: usize) -> Vec<Scored> {
        let mut all: Vec<(Ranked, u32)> = self
            .ladders
            .iter()
            .filter_map(|l| l.rungs.last().map(|r| (l.s, r)))
            .flat_map(|(s, r)| r.successes.iter().map(move |x| (*x, s)))
            .collect();
        all.sort_by_key(|x| x.0);
        all.into_iter()
            .take(k)
            .map(|(r, s)| Scored {
                config: r.config,
                value: r.value,
                bracket: s,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// `(configs, budget)` of every rung of every bracket, `s_max` first.
    fn table(b: &Brackets) -> Vec<Vec<(u64, f64)>> {
        b.brackets()
            .iter()
            .map(|br| br.rungs.iter().map(|r| (r.configs, r.budget)).collect())
            .collect()
    }

    #[test]
    fn paper_table_1_to_81_eta_3() {
        // The paper's worked example (R = 81, eta = 3): s_max = 4.
        // s=4: n = ceil(5/5 · 81) = 81, r = 1
        // s=3: n = ceil(5/4 · 27) = ceil(33.75) = 34, r = 3;
        //      rungs floor(34/3) = 11, floor(34/9) = 3, floor(34/27) = 1
        // s=2: n = ceil(5/3 · 9) = 15, r = 9; 5, 1
        // s=1: n = ceil(5/2 · 3) = ceil(7.5) = 8, r = 27; 2
        // s=0: n = 5, r = 81
        let b = Brackets::new(1.0, 81.0, 3).unwrap();
        assert_eq!(b.s_max(), 4);
        assert_eq!(
            table(&b),
            vec![
                vec![(81, 1.0), (27, 3.0), (9, 9.0), (3, 27.0), (1, 81.0)],
                vec![(34, 3.0), (11, 9.0), (3, 27.0), (1, 81.0)],
                vec![(15, 9.0), (5, 27.0), (1, 81.0)],
                vec![(8, 27.0), (2, 81.0)],
                vec![(5, 81.0)],
            ]
        );
        // Budgets: s=4: 5 rungs of 81 = 405; s=3: 102 + 99 + 81 + 81 = 363;
        // s=2: 135 + 135 + 81 = 351; s=1: 216 + 162 = 378; s=0: 405.
        let totals: Vec<f64> = b.brackets().iter().map(Bracket::total_budget).collect();
        assert_eq!(totals, vec![405.0, 363.0, 351.0, 378.0, 405.0]);
        assert_eq!(b.total_budget(), 1902.0);
        assert_eq!(b.total_budget_rounded(), 1902);
        // Bound: rung 0 once, the others twice: 2·1902 - (81 + 102 + 135 +
        // 216 + 405).
        assert_eq!(b.bracket(4).unwrap().budget_bound(), 729.0);
        assert_eq!(b.budget_bound(), 3804.0 - 939.0);
        // Trials: 121 + 49 + 21 + 10 + 5.
        let trials: Vec<u64> = b.brackets().iter().map(Bracket::trials).collect();
        assert_eq!(trials, vec![121, 49, 21, 10, 5]);
        assert_eq!(b.total_trials(), 206);
        // Survivors: the next rung's count; the top rung keeps all.
        let s3: Vec<u64> = b.brackets()[1].rungs.iter().map(|r| r.survivors).collect();
        assert_eq!(s3, vec![11, 3, 1, 1]);
        let s0 = &b.brackets()[4];
        assert_eq!((s0.s, s0.rungs[0].survivors), (0, 5));
        // A grid of 15,625 configs at max budget.
        assert_eq!(b.grid_budget(15_625), 15_625.0 * 81.0);
        assert_eq!(b.grid_budget_rounded(15_625), 1_265_625);
    }

    #[test]
    fn table_1_to_27_eta_3() {
        // s_max = 3 (27 = 3^3).
        // s=3: n = ceil(4/4 · 27) = 27, r = 1: 27×1, 9×3, 3×9, 1×27 = 108
        // s=2: n = ceil(4/3 · 9) = 12, r = 3: 12×3, 4×9, 1×27 = 99
        //      (floor(12/9) = 1)
        // s=1: n = ceil(4/2 · 3) = 6, r = 9: 6×9, 2×27 = 108
        // s=0: n = 4, r = 27: 4×27 = 108
        let b = Brackets::new(1.0, 27.0, 3).unwrap();
        assert_eq!(b.s_max(), 3);
        assert_eq!(
            table(&b),
            vec![
                vec![(27, 1.0), (9, 3.0), (3, 9.0), (1, 27.0)],
                vec![(12, 3.0), (4, 9.0), (1, 27.0)],
                vec![(6, 9.0), (2, 27.0)],
                vec![(4, 27.0)],
            ]
        );
        let totals: Vec<f64> = b.brackets().iter().map(Bracket::total_budget).collect();
        assert_eq!(totals, vec![108.0, 99.0, 108.0, 108.0]);
        assert_eq!(b.total_budget(), 423.0);
        assert_eq!(b.total_trials(), 40 + 17 + 8 + 4);
    }

    #[test]
    fn table_1_to_16_eta_2() {
        // s_max = 4 (16 = 2^4).
        // s=4: n = ceil(5/5 · 16) = 16, r = 1: 16×1, 8×2, 4×4, 2×8, 1×16 = 80
        // s=3: n = ceil(5/4 · 8) = 10, r = 2: 10×2, 5×4, 2×8, 1×16 = 72
        //      (floor(10/4) = 2, floor(10/8) = 1)
        // s=2: n = ceil(5/3 · 4) = ceil(6.67) = 7, r = 4: 7×4, 3×8, 1×16 = 68
        // s=1: n = ceil(5/2 · 2) = 5, r = 8: 5×8, 2×16 = 72
        // s=0: n = 5, r = 16: 5×16 = 80
        let b = Brackets::new(1.0, 16.0, 2).unwrap();
        assert_eq!(b.s_max(), 4);
        assert_eq!(
            table(&b),
            vec![
                vec![(16, 1.0), (8, 2.0), (4, 4.0), (2, 8.0), (1, 16.0)],
                vec![(10, 2.0), (5, 4.0), (2, 8.0), (1, 16.0)],
                vec![(7, 4.0), (3, 8.0), (1, 16.0)],
                vec![(5, 8.0), (2, 16.0)],
                vec![(5, 16.0)],
            ]
        );
        let totals: Vec<f64> = b.brackets().iter().map(Bracket::total_budget).collect();
        assert_eq!(totals, vec![80.0, 72.0, 68.0, 72.0, 80.0]);
        assert_eq!(b.total_budget(), 372.0);
        assert_eq!(b.bracket(2).unwrap().configs(), 7);
        assert_eq!(b.bracket(2).unwrap().start_budget(), 4.0);
        assert_eq!(b.bracket(5), None);
    }

    #[test]
    fn s_max_survives_float_error() {
        // 8.1 / 0.1 = 80.99999999999999 in f64: still 3^4.
        assert!(std::hint::black_box(8.1f64) / 0.1 < 81.0);
        let b = Brackets::new(0.1, 8.1, 3).unwrap();
        assert_eq!(b.s_max(), 4);
        assert_eq!(b.bracket(4).unwrap().configs(), 81);
        // The top rung is max_budget exactly; rung 0 is max / 81.
        assert_eq!(b.budget_for_rung(4, 4), Some(8.1));
        assert_eq!(b.budget_for_rung(4, 0), Some(8.1 / 81.0));
        // A ratio really below 81 is not rounded up.
        assert_eq!(Brackets::new(1.0, 80.999, 3).unwrap().s_max(), 3);
        // Not a power of eta: floor(log_3 100) = 4, r = 100 / 81.
        let b = Brackets::new(1.0, 100.0, 3).unwrap();
        assert_eq!(b.s_max(), 4);
        assert_eq!(b.bracket(4).unwrap().configs(), 81);
        // Equal budgets: one bracket, plain random search at max budget.
        let b = Brackets::new(5.0, 5.0, 3).unwrap();
        assert_eq!(table(&b), vec![vec![(1, 5.0)]]);
    }

    #[test]
    fn integer_budgets() {
        // (1, 100, 3), s=4: 100/81 = 1.23 → 1, 100/27 = 3.70 → 4,
        // 100/9 = 11.1 → 11, 100/3 = 33.3 → 33, 100.
        let b = Brackets::new(1.0, 100.0, 3).unwrap();
        let rounded: Vec<u64> = (0..=4)
            .map(|i| b.budget_for_rung_rounded(4, i).unwrap())
            .collect();
        assert_eq!(rounded, vec![1, 4, 11, 33, 100]);
        // s=4 with integer budgets: 81·1 + 27·4 + 9·11 + 3·33 + 1·100.
        assert_eq!(
            b.bracket(4).unwrap().total_budget_rounded(),
            81 + 108 + 99 + 99 + 100
        );
        assert_eq!(b.budget_for_rung_rounded(4, 5), None);
        assert_eq!(round_budget(2.5), 3);
        assert_eq!(round_budget(0.2), 1);
        assert_eq!(round_budget(7.0), 7);
    }

    #[test]
    fn invalid_fidelity_is_refused_with_the_field_named() {
        let err = |min, max, eta| Brackets::new(min, max, eta).unwrap_err();
        assert!(err(0.0, 10.0, 3).contains("min_budget must be a positive number"));
        assert!(err(f64::NAN, 10.0, 3).contains("min_budget"));
        assert!(err(1.0, f64::INFINITY, 3).contains("max_budget must be a finite"));
        assert!(err(10.0, 1.0, 3).contains("max_budget (1) must be at least min_budget (10)"));
        assert!(err(1.0, 81.0, 1).contains("eta must be at least 2"));
        assert!(err(1.0, 1e12, 2).contains("more than 10000000 configs"));
        // The cap itself is allowed: 2^23 = 8,388,608 configs.
        assert_eq!(Brackets::new(1.0, 8_388_608.0, 2).unwrap().s_max(), 23);
    }

    fn hyperband_81() -> Brackets {
        Brackets::new(1.0, 81.0, 3).unwrap()
    }

    #[test]
    fn asha_promotes_as_soon_as_a_third_of_the_rung_reports() {
        // Bracket (1, 9, 3), s=2: rungs 9×1, 3×3, 1×9. One worker, each job
        // reported at once; value of config c (lower is better):
        let value = [5.0, 3.0, 8.0, 1.0, 9.0, 2.0, 7.0, 4.0, 6.0];
        // Hand trace (rung 0 results → top floor(c/3)):
        //  (0,r0)=5 (1,r0)=3 (2,r0)=8   c0=3: top 1 = {1}     → (1,r1)
        //  (3,r0)=1                     c0=4: top 1 = {3}     → (3,r1)
        //  (4,r0)=9                     c0=5: top {3} done
        //  (5,r0)=2                     c0=6: top 2 = {3,5}   → (5,r1)
        //  rung 1 has 3 results: top 1 = {3}                  → (3,r2)
        //  (6,r0) (7,r0) (8,r0)         c0=9: top 3 = {3,5,1}, all promoted
        let b = Brackets::new(1.0, 9.0, 3).unwrap();
        let mut asha = Asha::bracket(&b, 2, Better::Lower, 0u64..).unwrap();
        let mut jobs = Vec::new();
        while let Some(job) = asha.next_job() {
            jobs.push((job.config, job.rung));
            asha.report(&job, Outcome::Value(value[job.config as usize]))
                .unwrap();
        }
        assert_eq!(
            jobs,
            vec![
                (0, 0),
                (1, 0),
                (2, 0),
                (1, 1),
                (3, 0),
                (3, 1),
                (4, 0),
                (5, 0),
                (5, 1),
                (3, 2),
                (6, 0),
                (7, 0),
                (8, 0),
            ]
        );
        assert!(asha.is_done());
        assert_eq!(asha.top_k(2, 2, 5)[0].config, 3);
        assert_eq!(asha.top_k(2, 1, 5).len(), 3);
        assert_eq!(
            asha.finalists(1),
            vec![Scored {
                config: 3,
                value: 1.0,
                bracket: 2
            }]
        );
    }

    #[test]
    fn promotion_does_not_wait_for_the_rung_to_fill() {
        // Four slots, results come back in a scrambled order: the first
        // rung-1 job starts while rung 0 of bracket s=4 (81 configs) has
        // only a handful of results.
        let b = Brackets::new(1.0, 81.0, 3).unwrap();
        let mut asha = Asha::bracket(&b, 4, Better::Lower, 0u64..).unwrap();
        let mut running: Vec<Job> = Vec::new();
        let mut first_promotion_after = None;
        let mut reported = 0;
        loop {
            while running.len() < 4 {
                match asha.next_job() {
                    Some(job) => {
                        if job.rung == 1 && first_promotion_after.is_none() {
                            first_promotion_after = Some(reported);
                        }
                        running.push(job);
                    }
                    None => break,
                }
            }
            if running.is_empty() {
                break;
            }
            let job = running.remove(reported % running.len());
            reported += 1;
            asha.report(&job, Outcome::Value((job.config * 37 % 101) as f64))
                .unwrap();
        }
        assert!(asha.is_done());
        let after = first_promotion_after.unwrap();
        assert!((3..10).contains(&after), "first promotion after {after}");
    }

    #[test]
    fn full_hyperband_keeps_what_synchronous_halving_keeps_and_never_repeats() {
        let b = hyperband_81();
        for seed in 0..4u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut asha = Asha::hyperband(&b, Better::Higher, 0u64..);
            let mut running: Vec<Job> = Vec::new();
            let mut seen = HashSet::new();
            let mut rung0 = HashSet::new();
            let mut spent = 0.0;
            loop {
                while running.len() < 8 {
                    let Some(job) = asha.next_job() else { break };
                    // (config, rung) never twice; a config in one bracket.
                    assert!(seen.insert((job.config, job.bracket, job.rung)));
                    if job.rung == 0 {
                        assert!(rung0.insert(job.config));
                    }
                    assert_eq!(Some(job.budget), b.budget_for_rung(job.bracket, job.rung));
                    spent += job.budget;
                    running.push(job);
                }
                if running.is_empty() {
                    break;
                }
                let job = running.swap_remove(rng.random_range(0..running.len()));
                let value = (job.config * 7919 % 1009) as f64 + job.budget / 100.0;
                asha.report(&job, Outcome::Value(value)).unwrap();
            }
            assert!(asha.is_done());
            assert!(spent <= b.budget_bound());
            for bracket in b.brackets() {
                let s = bracket.s;
                for rung in &bracket.rungs {
                    let st = asha.rung_status(s, rung.index).unwrap();
                    let i = rung.index;
                    if i == 0 {
                        assert_eq!(st.completed, rung.configs, "s={s} rung 0");
                    } else {
                        assert!(
                            (rung.configs..=2 * rung.configs).contains(&st.completed),
                            "s={s} rung {i}: {st:?}"
                        );
                    }
                    if i == s {
                        continue;
                    }
                    // The top q of every rung went on, q = clamp(floor(c /
                    // 3), 1, n_{i+1}).
                    let q = (st.completed / 3).clamp(1, bracket.rungs[i as usize + 1].configs);
                    for top in asha.top_k(s, i, q as usize) {
                        assert!(seen.contains(&(top.config, s, i + 1)), "s={s} rung {i}");
                    }
                }
            }
        }
        // A result order with no early mistake gives the table exactly:
        // one slot, each config worse than every earlier one.
        let mut asha = Asha::hyperband(&b, Better::Higher, 0u64..);
        let mut trials = 0;
        while let Some(job) = asha.next_job() {
            trials += 1;
            asha.report(&job, Outcome::Value(-(job.config as f64)))
                .unwrap();
        }
        assert_eq!(trials, b.total_trials());
        for bracket in b.brackets() {
            for rung in &bracket.rungs {
                let st = asha.rung_status(bracket.s, rung.index).unwrap();
                assert_eq!(st.completed, rung.configs);
            }
        }
    }

    #[test]
    fn hyperband_finds_the_optimum_for_a_third_of_the_grid_budget() {
        // 125 configs (3 knobs × 5 positions), optimum at (3, 1, 4) worth
        // 1.0, every other config at least 1.03 (lower is better). At budget
        // b a trial reads the value with a deterministic error of up to
        // ±0.05 / sqrt(b): at b = 1 neighbours of the optimum can outrank
        // it, at b = 81 (±0.0056) they cannot.
        let value = |c: u64, budget: f64| {
            let d = [c / 25, c / 5 % 5, c % 5];
            let opt = [3.0, 1.0, 4.0];
            let scale = [0.05, 0.08, 0.03];
            let f: f64 = (0..3)
                .map(|k| scale[k] * (d[k] as f64 - opt[k]).powi(2))
                .sum::<f64>()
                + 1.0;
            let h = (c.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ budget.to_bits())
                .wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let noise = (h >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            f + 0.05 * noise / budget.sqrt()
        };
        let optimum = 3 * 25 + 5 + 4;
        let b = hyperband_81();
        let grid = b.grid_budget(125);
        for seed in 0..6u64 {
            let mut order: Vec<u64> = (0..125).collect();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for i in (1..order.len()).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
            let mut asha = Asha::hyperband(&b, Better::Lower, order.into_iter());
            let mut running: Vec<Job> = Vec::new();
            let mut spent = 0.0;
            loop {
                while running.len() < 6 {
                    let Some(job) = asha.next_job() else { break };
                    spent += job.budget;
                    running.push(job);
                }
                if running.is_empty() {
                    break;
                }
                let job = running.swap_remove(rng.random_range(0..running.len()));
                asha.report(&job, Outcome::Value(value(job.config, job.budget)))
                    .unwrap();
            }
            assert!(asha.is_done());
            let champion = asha.finalists(1)[0].config;
            assert_eq!(champion, optimum, "seed {seed}");
            assert!(
                spent * 3.0 < grid,
                "seed {seed}: spent {spent} of grid {grid}"
            );
        }
    }

    #[test]
    fn round_robin_starts_with_the_most_exploratory_bracket() {
        let b = hyperband_81();
        let mut asha = Asha::hyperband(&b, Better::Lower, 0u64..);
        let first: Vec<(u64, u32, f64)> = (0..6)
            .map(|_| {
                let j = asha.next_job().unwrap();
                (j.config, j.bracket, j.budget)
            })
            .collect();
        assert_eq!(
            first,
            vec![
                (0, 4, 1.0),
                (1, 3, 3.0),
                (2, 2, 9.0),
                (3, 1, 27.0),
                (4, 0, 81.0),
                (5, 4, 1.0),
            ]
        );
    }

    #[test]
    fn failures_are_never_promoted() {
        let b = Brackets::new(1.0, 9.0, 3).unwrap();
        // Every even config fails; config 0 would otherwise be the best.
        let mut asha = Asha::bracket(&b, 2, Better::Lower, 0u64..).unwrap();
        let mut jobs = Vec::new();
        while let Some(job) = asha.next_job() {
            jobs.push(job);
            let outcome = if job.config % 2 == 0 {
                Outcome::Failed
            } else {
                Outcome::Value(job.config as f64)
            };
            asha.report(&job, outcome).unwrap();
        }
        assert!(asha.is_done());
        assert!(jobs.iter().all(|j| j.rung == 0 || j.config % 2 == 1));
        // 9 completed at rung 0 (5 failed): top 3 would be 3 configs, but
        // only the 4 successes rank: 1, 3, 5 go on.
        let promoted: Vec<u64> = jobs
            .iter()
            .filter(|j| j.rung == 1)
            .map(|j| j.config)
            .collect();
        let mut sorted = promoted.clone();
        sorted.sort();
        assert_eq!(sorted, vec![1, 3, 5]);
        let st = asha.rung_status(2, 0).unwrap();
        assert_eq!((st.completed, st.failed, st.promoted), (9, 5, 3));
        assert!(asha.top_k(2, 0, 9).iter().all(|s| s.config % 2 == 1));
        // A NaN is a failure too.
        let mut asha = Asha::bracket(&b, 2, Better::Lower, 0u64..).unwrap();
        for _ in 0..3 {
            let job = asha.next_job().unwrap();
            asha.report(&job, Outcome::Value(f64::NAN)).unwrap();
        }
        let job = asha.next_job().unwrap();
        assert_eq!((job.config, job.rung), (3, 0));
        assert_eq!(asha.rung_status(2, 0).unwrap().failed, 3);
    }

    #[test]
    fn early_promotions_stop_at_the_plan_and_closing_keeps_the_best() {
        // Bracket (1, 9, 3), s=2 (9×1, 3×3, 1×9), one worker, each new
        // config better than every earlier one (value = -config, lower is
        // better):
        //  c0=3: top 1 = {2} → (2,r1); c0=4: top 1 = {3} → (3,r1);
        //  c0=5: top 1 = {4} → (4,r1); rung 1 has 3 results, top 1 = {4}
        //  → (4,r2): rung 2 has its planned 1.
        //  c0=6..9: top 2, 3 = {5,4}, {6,5,4}, ...: plain ASHA would promote
        //  5, 6, 7, 8, but rung 1 has its planned 3.
        // Rung 0 closes after (8,r0) with top 3 = {8,7,6}: all promoted
        // → (8,r1) (7,r1) (6,r1). Rung 1 closes with 6 results, q = clamp(2,
        // 1, 1) = 1: its best, 8, → (8,r2).
        let b = Brackets::new(1.0, 9.0, 3).unwrap();
        let mut asha = Asha::bracket(&b, 2, Better::Lower, 0u64..).unwrap();
        let mut jobs = Vec::new();
        while let Some(job) = asha.next_job() {
            jobs.push((job.config, job.rung));
            asha.report(&job, Outcome::Value(-(job.config as f64)))
                .unwrap();
        }
        let rung = |r: u32| -> Vec<u64> { jobs.iter().filter(|j| j.1 == r).map(|j| j.0).collect() };
        assert_eq!(rung(1), vec![2, 3, 4, 8, 7, 6]);
        assert_eq!(rung(2), vec![4, 8]);
        assert!(asha.is_done());
        assert_eq!(asha.finalists(1)[0].config, 8);
        // Within the bound: 9·1 + 6·3 + 2·9 = 45 <= 9 + 2·(9 + 9) = 45.
        let spent: f64 = jobs
            .iter()
            .map(|j| b.budget_for_rung(2, j.1).unwrap())
            .sum();
        assert_eq!(spent, 45.0);
        assert_eq!(b.bracket(2).unwrap().budget_bound(), 45.0);
    }

    #[test]
    fn all_failed_rung_promotes_nothing() {
        let b = Brackets::new(1.0, 3.0, 3).unwrap();
        // s=1: n = ceil(2/2 · 3) = 3 at r=1, then 1 at 3.
        let mut asha = Asha::bracket(&b, 1, Better::Lower, 0u64..).unwrap();
        for _ in 0..3 {
            let job = asha.next_job().unwrap();
            asha.report(&job, Outcome::Failed).unwrap();
        }
        assert_eq!(asha.next_job(), None);
        assert!(asha.is_done());
        assert!(asha.finalists(3).is_empty());
    }

    #[test]
    fn ties_break_by_config_index_and_runs_are_deterministic() {
        let run = |better: Better| {
            let b = hyperband_81();
            let mut asha = Asha::hyperband(&b, better, (0u64..).map(|c| c * 7 % 1000));
            let mut rng = ChaCha8Rng::seed_from_u64(3);
            let mut running = Vec::new();
            let mut log = Vec::new();
            loop {
                while running.len() < 5 {
                    let Some(job) = asha.next_job() else { break };
                    log.push(job);
                    running.push(job);
                }
                if running.is_empty() {
                    break;
                }
                let job: Job = running.swap_remove(rng.random_range(0..running.len()));
                // Few distinct values: many ties.
                asha.report(&job, Outcome::Value((job.config % 3) as f64))
                    .unwrap();
            }
            (log, asha.finalists(3))
        };
        let (a, fa) = run(Better::Lower);
        let (b, fb) = run(Better::Lower);
        assert_eq!(a, b);
        assert_eq!(fa, fb);
        // All finalists have value 0 (lower is better), lowest index first.
        assert!(fa.iter().all(|s| s.value == 0.0));
        assert!(fa.windows(2).all(|w| w[0].config < w[1].config));
        let (_, fh) = run(Better::Higher);
        assert!(fh.iter().all(|s| s.value == 2.0));

        // Equal values at rung 0: the lowest config index goes first.
        let b = Brackets::new(1.0, 3.0, 3).unwrap();
        let mut asha = Asha::bracket(&b, 1, Better::Lower, [9u64, 4, 6].into_iter()).unwrap();
        let jobs: Vec<Job> = (0..3).map(|_| asha.next_job().unwrap()).collect();
        for job in jobs.iter().rev() {
            asha.report(job, Outcome::Value(1.0)).unwrap();
        }
        assert_eq!(asha.next_job().map(|j| (j.config, j.rung)), Some((4, 1)));
    }

    #[test]
    fn report_refuses_unknown_or_repeated_jobs() {
        let b = hyperband_81();
        let mut asha = Asha::hyperband(&b, Better::Lower, 0u64..);
        let job = asha.next_job().unwrap();
        let other = Job { config: 99, ..job };
        assert_eq!(
            asha.report(&other, Outcome::Value(1.0)).unwrap_err(),
            "config 99 is not running at rung 0 of bracket s=4"
        );
        asha.report(&job, Outcome::Value(1.0)).unwrap();
        assert!(asha.report(&job, Outcome::Value(1.0)).is_err());
        let bad_bracket = Job { bracket: 9, ..job };
        assert!(asha.report(&bad_bracket, Outcome::Failed).is_err());
        assert!(Asha::bracket(&b, 5, Better::Lower, 0u64..).is_err());
    }

    #[test]
    fn small_or_repeating_sources_end_the_search() {
        let b = Brackets::new(1.0, 9.0, 3).unwrap();
        // Only 4 distinct configs, with repeats: they are started once.
        let source = [1u64, 1, 2, 1, 3, 2, 4, 4].into_iter();
        let mut asha = Asha::bracket(&b, 2, Better::Lower, source).unwrap();
        let mut rung0 = Vec::new();
        while let Some(job) = asha.next_job() {
            if job.rung == 0 {
                rung0.push(job.config);
            }
            asha.report(&job, Outcome::Value(job.config as f64))
                .unwrap();
        }
        assert_eq!(rung0, vec![1, 2, 3, 4]);
        assert!(asha.is_done());
        // 4 results: floor(4/3) = 1 promoted; rung 1 then has 1 result,
        // floor(1/3) = 0, but it is closed (rung 0 can get no more
        // configs): its best goes on to max_budget anyway.
        assert_eq!(asha.rung_status(2, 1).unwrap().completed, 1);
        assert_eq!(asha.rung_status(2, 2).unwrap().completed, 1);
        assert_eq!(asha.finalists(2)[0].config, 1);

        // A source that repeats forever is treated as exhausted.
        let mut asha = Asha::bracket(&b, 0, Better::Lower, std::iter::repeat(5u64)).unwrap();
        let job = asha.next_job().unwrap();
        assert_eq!(job.config, 5);
        asha.report(&job, Outcome::Value(1.0)).unwrap();
        assert_eq!(asha.next_job(), None);
        assert!(asha.is_done());
    }

    #[test]
    fn waiting_is_not_done() {
        let b = Brackets::new(1.0, 3.0, 3).unwrap();
        let mut asha = Asha::bracket(&b, 1, Better::Lower, 0u64..).unwrap();
        let jobs: Vec<Job> = (0..3).map(|_| asha.next_job().unwrap()).collect();
        // Rung 0 is full and nothing has reported: wait.
        assert_eq!(asha.next_job(), None);
        assert!(!asha.is_done());
        assert_eq!(asha.running(), 3);
        for (job, v) in jobs.iter().zip([3.0, 1.0, 2.0]) {
            asha.report(job, Outcome::Value(v)).unwrap();
        }
        let top = asha.next_job().unwrap();
        assert_eq!((top.config, top.rung, top.budget), (1, 1, 3.0));
        assert!(!asha.is_done());
        asha.report(&top, Outcome::Value(0.5)).unwrap();
        assert!(asha.is_done());
        assert_eq!(asha.finalists(5)[0].config, 1);
    }
}
