//! Adaptive search on a synthetic noisy cost model: regret of the config
//! each strategy picks, against the trial-seconds it spent, for grid,
//! random, Hyperband (plain, with `fidelity.continuation`, and with
//! `fidelity.prune` too; each also with `strategy.proposer: tpe`, new
//! configs from TPE models) and TPE, the last two through
//! `tunectl::search::Search` as `tunectl launch` runs them (its virtual
//! clock, its continuation charge and its prune rule). Not a timed test: it
//! simulates trials (no process runs) and prints a table for
//! docs/benchmarks.md.
//!
//!   cargo bench --bench search_regret
//!   SEEDS=20 WORKERS="1 8" VARIANTS="faithful misleading" cargo bench --bench search_regret
//!   SEARCH_REGRET_JSON=out.json cargo bench --bench search_regret   # also every run, as JSON
//!   STRATEGIES="hyperband hyperband+tpe" cargo bench --bench search_regret   # some strategies only
//!   FINALIST_STEP=fixed cargo bench --bench search_regret   # 5 runs of each finalist, not the race
//!
//! benches/search_regret.sh runs this, then Optuna on the same model
//! (benches/search_regret.py, which implements the same formulas and checks
//! that they agree with the JSON written here), and prints both in one
//! table.
//!
//! The model (docs/benchmarks.md has the formulas): 5 knobs (4 ordinal
//! ints, 1 categorical), 720 configs; a config's true time per budget unit
//! f(x) is a bowl with interactions and a little per-config roughness, and
//! some configs crash (shared memory: large tile with deep pipelining). A
//! trial at budget b measures f(x)·(1 + c(x)/b) (warm-up) times lognormal
//! noise of sigma 0.15/sqrt(b), and costs T0 + (b + c(x))·f(x) seconds.
//! Two variants: `faithful` (c = 1 for every config: low budgets are biased
//! alike) and `misleading` (c grows with stages and unroll, the knobs of the
//! fast configs: at low budget they look slow).
//!
//! Every strategy ends with the finalist step: its 3 best configs at max
//! budget raced as the launcher races a bucket's configs (see [`race`]),
//! paid from the same budget.
//!
//! A promoted rung with continuation pays T0 and the warm-up again, then
//! only the budget it adds; with pruning a trial reads the model's
//! measurement at each rung budget it passes and stops where the driver's
//! rule says (see `Model::trial`).
//!
//! Targets (issue): regret no worse than Optuna's (TPE with its Hyperband
//! pruner) at every budget from 1/27 of grid to all of it, with 1 and 8
//! workers, on both proxies; within 2 % of the optimum in >= 19 of 20 seeds
//! at 1/9 of grid.

use std::collections::{BTreeMap, HashSet};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value as Json, json};
use tunectl::search::{
    Brackets, Engine, HyperbandEngine, Job, KnobDomain, ModelProposer, Outcome, PruneRule, Search,
    Source, Step, Tpe, TpeEngine, TpeOptions,
};
use tunectl::spec::Better;
use tunectl::stats::speedup::{CONFIDENCE, estimate, t_quantile};

// ------------------------------------------------------------------ model

/// Knob names, domains and values, first knob most significant in the
/// config index (as in tunectl's `ConfigSpace`).
const KNOBS: [(&str, &[&str]); 5] = [
    ("tile", &["16", "32", "64", "128", "256"]),
    ("warps", &["1", "2", "4", "8"]),
    ("stages", &["1", "2", "3", "4"]),
    ("unroll", &["1", "2", "4"]),
    ("layout", &["row", "col", "tiled"]),
];
const MIN_BUDGET: f64 = 1.0;
const MAX_BUDGET: f64 = 81.0;
const ETA: u32 = 3;
/// Fixed seconds of every trial (start, compile, load).
const T0: f64 = 1.0;
/// `fidelity.fixed_cost` the study would declare: T0 in budget units of the
/// optimum's time per unit (1 s / 0.05 s), what one timed run tells a user.
const FIXED_COST: f64 = 20.0;
/// Seconds a crashing trial takes.
const CRASH_SECONDS: f64 = T0 + 0.5;
/// Lognormal noise at budget b: sigma = NOISE / sqrt(b).
const NOISE: f64 = 0.15;
/// Finalists re-measured at max budget, and the runs of each in the
/// fixed finalist step (`FINALIST_STEP=fixed`: the lowest median wins).
const FINALISTS: usize = 3;
const REPEATS: u64 = 5;
/// `rep` of the finalist re-measurements (search measurements use 0, 1, …).
const FINALIST_REP: u64 = 1_000_000;
/// Within this relative regret a pick counts as a hit.
const HIT: f64 = 0.02;

fn domains() -> Vec<KnobDomain> {
    KNOBS
        .iter()
        .map(|(name, values)| {
            let values = values.len();
            if *name == "layout" {
                KnobDomain::Categorical { values }
            } else {
                KnobDomain::Ordinal { values }
            }
        })
        .collect()
}

fn space_size() -> u64 {
    KNOBS.iter().map(|k| k.1.len() as u64).product()
}

/// Value positions, first knob first.
fn decode(mut x: u64) -> [u64; 5] {
    let mut d = [0u64; 5];
    for k in (0..5).rev() {
        let radix = KNOBS[k].1.len() as u64;
        d[k] = x % radix;
        x /= radix;
    }
    d
}

/// SplitMix64's finalizer (Steele, Lea, Flood 2014), the model's only
/// source of randomness: the same in benches/search_regret.py.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform in (0, 1) from the top 53 bits.
fn unit(h: u64) -> f64 {
    ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Faithful,
    Misleading,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Faithful => "faithful",
            Variant::Misleading => "misleading",
        }
    }
}

struct Model {
    variant: Variant,
    /// f(x) per config, `None` for a crash.
    f: Vec<Option<f64>>,
    /// c(x), warm-up in budget units.
    c: Vec<f64>,
    /// True value: f(x)·(1 + c(x)/MAX_BUDGET), the noise-free measurement
    /// at max budget.
    v: Vec<Option<f64>>,
    optimum: f64,
    argmin: u64,
    /// Trial-seconds of grid: every config once at max budget.
    grid_seconds: f64,
}

impl Model {
    fn new(variant: Variant) -> Model {
        let n = space_size();
        let mut f = Vec::new();
        let mut c = Vec::new();
        for x in 0..n {
            let [t, w, s, u, l] = decode(x).map(|p| p as f64);
            let crash = t + s >= 6.0 || (t == 0.0 && u == 2.0);
            let layout = [0.04, 0.10, 0.0][l as usize];
            let tiled = if l == 2.0 { 1.0 } else { 0.0 };
            let r = unit(mix(0xC0FF_EE00 ^ x));
            let ln_f = 0.05f64.ln()
                + 0.08 * (t - 2.6).powi(2)
                + 0.08 * (w - 0.8 * t + 0.3).powi(2)
                + 0.06 * (s - 2.3).powi(2)
                + 0.04 * (u - 1.2).powi(2)
                + layout
                - 0.04 * u * tiled
                + 0.06 * (r - 0.5);
            f.push((!crash).then(|| ln_f.exp()));
            c.push(match variant {
                Variant::Faithful => 1.0,
                Variant::Misleading => 0.25 + 0.75 * s + 0.5 * u,
            });
        }
        let v: Vec<Option<f64>> = (0..n as usize)
            .map(|x| f[x].map(|f| f * (1.0 + c[x] / MAX_BUDGET)))
            .collect();
        let (argmin, optimum) = v
            .iter()
            .enumerate()
            .filter_map(|(x, v)| v.map(|v| (x as u64, v)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .expect("a config that does not crash");
        let mut model = Model {
            variant,
            f,
            c,
            v,
            optimum,
            argmin,
            grid_seconds: 0.0,
        };
        model.grid_seconds = (0..n).map(|x| model.seconds(x, MAX_BUDGET)).sum();
        model
    }

    /// Seconds of one trial of `x` at budget `b`.
    fn seconds(&self, x: u64, b: f64) -> f64 {
        match self.f[x as usize] {
            Some(f) => T0 + (b + self.c[x as usize]) * f,
            None => CRASH_SECONDS,
        }
    }

    /// Seconds of the trial `ask` and whether it runs to its budget. A
    /// rung that continues its previous one (at budget `from`) pays the
    /// start-up and the warm-up again, then only the budget it adds. Under
    /// `fidelity.prune` the trial reports its progress at every rung
    /// budget of the ladder it passes (after `from`, before its own): the
    /// run's reading at budget `r` is the model's measurement there, `rep`
    /// 0, the value a rung at `r` reports, so a run reads at each budget
    /// what a trial stopped there would have measured. When the driver's
    /// rule stops it at `r`, it has paid for the budget up to `r`.
    /// A trial's seconds, how it ended, and the readings it reported on its
    /// way (budget, value) at each ladder budget it passed below its own
    /// (with `ask.reads`, or a prune rule to apply).
    fn trial(&self, seed: u64, ask: &Ask) -> (f64, Trial, Vec<(f64, f64)>) {
        let x = ask.config;
        let Some(f) = self.f[x as usize] else {
            return (CRASH_SECONDS, Trial::Ran, Vec::new());
        };
        let from = ask.from.unwrap_or(0.0);
        let pay = |b: f64| T0 + (b - from + self.c[x as usize]) * f;
        let mut readings = Vec::new();
        if !ask.rule.is_empty() || ask.reads {
            let mut r = MIN_BUDGET;
            while r < ask.budget {
                if r > from
                    && let Some(v) = self.measure(seed, x, r, 0)
                {
                    readings.push((r, v));
                    if ask.rule.prunes(r, v).is_some() {
                        return (pay(r), Trial::Pruned, readings);
                    }
                }
                r *= ETA as f64;
            }
        }
        (pay(ask.budget), Trial::Ran, readings)
    }

    /// The `rep`-th measurement of `x` at budget `b` in run `seed`: `None`
    /// when `x` crashes.
    fn measure(&self, seed: u64, x: u64, b: f64, rep: u64) -> Option<f64> {
        let f = self.f[x as usize]?;
        let mut h = mix(seed);
        h = mix(h ^ x);
        h = mix(h ^ b.round() as u64);
        h = mix(h ^ rep);
        let (u1, u2) = (unit(h), unit(mix(h)));
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        Some(f * (1.0 + self.c[x as usize] / b) * (NOISE / b.sqrt() * z).exp())
    }

    fn regret(&self, x: u64) -> f64 {
        match self.v[x as usize] {
            Some(v) => (v - self.optimum) / self.optimum,
            None => f64::INFINITY,
        }
    }
}

/// How a simulated trial ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trial {
    /// It ran to its budget (or crashed): its measurement is taken at the end.
    Ran,
    /// Its prune rule stopped it: reported to the search as a failure.
    Pruned,
}

// ------------------------------------------------------------ strategies

/// One trial a strategy asks for; `job` is Asha's, to report back.
#[derive(Debug, Clone)]
struct Ask {
    config: u64,
    budget: f64,
    job: Option<(usize, Job)>,
    /// `fidelity.continuation`: the budget of the config's previous rung,
    /// which this trial continues from its checkpoint.
    from: Option<f64>,
    /// `fidelity.prune`: the driver's rule for this job (empty otherwise).
    rule: PruneRule,
    /// The trial reports its readings at the ladder's budgets to the
    /// search (`tpe+prune`: they make the later trials' prune rules).
    reads: bool,
}

enum Next {
    Run(Ask),
    /// Nothing can start before a running trial reports.
    Wait,
}

trait Strategy {
    fn next(&mut self, pending: &HashSet<u64>) -> Next;
    fn report(&mut self, ask: &Ask, value: Option<f64>);
    /// The readings a trial reported on its way, before its result.
    fn readings(&mut self, _ask: &Ask, _readings: &[(f64, f64)]) {}
    /// Best results at max budget so far, best first (ties: lower index).
    fn finalists(&self) -> Vec<(u64, f64)>;
}

/// Successful results at max budget, best first.
#[derive(Default)]
struct Board(BTreeMap<(OrdF64, u64), ()>);

#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Board {
    fn add(&mut self, config: u64, value: Option<f64>) {
        if let Some(v) = value {
            self.0.insert((OrdF64(v), config), ());
        }
    }
    fn top(&self, k: usize) -> Vec<(u64, f64)> {
        self.0.keys().take(k).map(|(v, c)| (*c, v.0)).collect()
    }
}

/// Configs in a fixed order (index order for grid, a permutation for
/// random), each once at max budget.
struct Ordered {
    order: std::vec::IntoIter<u64>,
    board: Board,
}

impl Strategy for Ordered {
    fn next(&mut self, _: &HashSet<u64>) -> Next {
        match self.order.next() {
            Some(config) => Next::Run(Ask {
                config,
                budget: MAX_BUDGET,
                job: None,
                from: None,
                rule: PruneRule::default(),
                reads: false,
            }),
            None => Next::Wait,
        }
    }
    fn report(&mut self, ask: &Ask, value: Option<f64>) {
        self.board.add(ask.config, value);
    }
    fn finalists(&self) -> Vec<(u64, f64)> {
        self.board.top(FINALISTS)
    }
}

/// Hyperband or TPE as `tunectl launch` runs them: through
/// `tunectl::search::Search`, the launcher's driver, which decides on a
/// virtual clock of `workers` workers (a job takes its budget in virtual
/// time), so its choices do not depend on the order results come back in.
struct Driven {
    search: Search,
    /// Hyperband with `fidelity.continuation`: its brackets, for the
    /// budget a promoted rung continues from.
    continues: Option<Brackets>,
    /// Jobs report their readings on the way (`tpe+prune`).
    reads: bool,
}

impl Strategy for Driven {
    fn next(&mut self, _: &HashSet<u64>) -> Next {
        match self.search.step().expect("a search step") {
            Step::Run(i, job) => Next::Run(Ask {
                config: job.config,
                budget: job.budget,
                job: Some((i, job)),
                from: self
                    .continues
                    .as_ref()
                    .filter(|_| job.rung > 0)
                    .and_then(|b| b.budget_for_rung(job.bracket, job.rung - 1)),
                rule: self.search.prune_rule(i),
                reads: self.reads,
            }),
            Step::Wait | Step::Done => Next::Wait,
        }
    }
    fn readings(&mut self, ask: &Ask, readings: &[(f64, f64)]) {
        let (i, _) = ask.job.expect("a search job");
        self.search
            .report_readings(i, readings)
            .expect("a job handed out");
    }
    fn report(&mut self, ask: &Ask, value: Option<f64>) {
        let (i, _) = ask.job.expect("a search job");
        let outcome = value.map_or(Outcome::Failed, Outcome::Value);
        self.search.report(i, outcome).expect("a job handed out");
    }
    fn finalists(&self) -> Vec<(u64, f64)> {
        self.search
            .finalists(FINALISTS)
            .iter()
            .map(|s| (s.config, s.value))
            .collect()
    }
}

fn permutation(seed: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..space_size()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    order
}

/// `iterations`: Hyperband iterations (`strategy.iterations`); `workers`:
/// the driver's virtual workers (`strategy.parallel`).
fn make(name: &str, seed: u64, iterations: u32, workers: usize) -> Box<dyn Strategy> {
    match name {
        "grid" => Box::new(Ordered {
            order: (0..space_size()).collect::<Vec<_>>().into_iter(),
            board: Board::default(),
        }),
        "random" => Box::new(Ordered {
            order: permutation(seed).into_iter(),
            board: Board::default(),
        }),
        "hyperband" | HB_CONT | HB_PRUNE | HB_TPE | HB_TPE_CONT | HB_TPE_PRUNE => {
            let continuation = name.contains("+continuation");
            let brackets = Brackets::new(MIN_BUDGET, MAX_BUDGET, ETA).expect("brackets");
            let source = Source::new(space_size(), seed, Box::new(|_| true));
            let mut engine =
                HyperbandEngine::new(brackets.clone(), Better::Lower, iterations, source);
            if name.starts_with(HB_TPE) {
                // `strategy.proposer: tpe`, as the launcher builds it.
                let mut model =
                    ModelProposer::new(domains(), Better::Lower, seed).expect("proposer");
                // PROPOSER="fraction min_points gamma": other settings, to
                // compare (the defaults are what a study gets).
                let knobs: Vec<f64> = env_or("PROPOSER", "")
                    .split_whitespace()
                    .map(|x| x.parse().expect("PROPOSER: numbers"))
                    .collect();
                if let [fraction, points, gamma] = knobs[..] {
                    model = model
                        .with_random_fraction(fraction)
                        .with_min_points(points as usize)
                        .with_tpe_options(TpeOptions {
                            gamma,
                            ..TpeOptions::default()
                        })
                        .expect("proposer options");
                }
                engine = engine.with_model(model).expect("a model of the space");
            }
            // As the launcher builds it (src/launch/schedule/search.rs).
            let search = Search::new(Engine::Hyperband(Box::new(engine)), workers)
                .with_fixed_cost(FIXED_COST)
                .with_continuation(continuation);
            Box::new(Driven {
                search: if name.ends_with("+prune") {
                    search.with_pruning(ETA, Better::Lower)
                } else {
                    search
                },
                continues: continuation.then_some(brackets),
                reads: false,
            })
        }
        "tpe" | TPE_PRUNE => {
            let tpe = Tpe::new(domains(), Better::Lower, seed).expect("tpe");
            let engine = TpeEngine::new(
                tpe,
                Better::Lower,
                space_size(),
                MAX_BUDGET,
                &[],
                Box::new(|_| true),
            )
            .expect("tpe engine");
            let search =
                Search::new(Engine::Tpe(Box::new(engine)), workers).with_fixed_cost(FIXED_COST);
            let reads = name == TPE_PRUNE;
            Box::new(Driven {
                search: if reads {
                    // Every trial at max budget, read at the ladder's
                    // budgets on its way and stopped where successive
                    // halving would not keep it.
                    let ladder: Vec<f64> = (0..4).map(|k| MIN_BUDGET * 3f64.powi(k)).collect();
                    search
                        .with_pruning(ETA, Better::Lower)
                        .with_readings(&ladder)
                } else {
                    search
                },
                continues: None,
                reads,
            })
        }
        _ => unreachable!("strategy {name}"),
    }
}

// ------------------------------------------------------------ simulation

/// The state after one trial completed.
struct Event {
    /// Trial-seconds consumed by then: completed trials, plus the part
    /// already run of those still running.
    consumed: f64,
    /// Trials completed by then.
    trials: usize,
    finalists: Vec<(u64, f64)>,
    /// Lowest true regret among configs measured at max budget so far.
    best_evaluated: f64,
}

struct Running {
    end: f64,
    start: f64,
    seq: u64,
    seconds: f64,
    ask: Ask,
    /// What the trial reports: `Trial::Pruned` when its prune rule stopped
    /// it.
    value: Trial,
    /// Its readings on the way (budget, value).
    readings: Vec<(f64, f64)>,
}

/// Runs `strategy` on `workers` simulated workers until it has nothing left
/// or has started `cap` trial-seconds. Results are fed back in order of
/// simulated completion (ties: start order), so a run is deterministic.
fn simulate(
    model: &Model,
    seed: u64,
    strategy: &mut dyn Strategy,
    workers: usize,
    cap: f64,
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut running: Vec<Running> = Vec::new();
    let mut pending: HashSet<u64> = HashSet::new();
    let mut reps: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let (mut now, mut started, mut completed, mut seq) = (0.0f64, 0.0f64, 0.0f64, 0u64);
    let mut best_evaluated = f64::INFINITY;
    loop {
        while running.len() < workers && started < cap {
            let Next::Run(ask) = strategy.next(&pending) else {
                break;
            };
            let (seconds, value, readings) = model.trial(seed, &ask);
            started += seconds;
            seq += 1;
            pending.insert(ask.config);
            running.push(Running {
                end: now + seconds,
                start: now,
                seq,
                seconds,
                ask,
                value,
                readings,
            });
        }
        let Some(i) = (0..running.len()).min_by(|&a, &b| {
            let (a, b) = (&running[a], &running[b]);
            a.end.total_cmp(&b.end).then(a.seq.cmp(&b.seq))
        }) else {
            break;
        };
        let done = running.swap_remove(i);
        now = done.end;
        completed += done.seconds;
        pending.remove(&done.ask.config);
        strategy.readings(&done.ask, &done.readings);
        if done.value == Trial::Pruned {
            // Its (config, budget) was not measured: no rep is used.
            strategy.report(&done.ask, None);
            push_event(
                &mut events,
                &running,
                now,
                completed,
                &*strategy,
                best_evaluated,
            );
            continue;
        }
        let rep = reps
            .entry((done.ask.config, done.ask.budget.round() as u64))
            .or_insert(0);
        // Every strategy here promises never to run a (config, budget)
        // twice (Asha and Tpe by their contracts).
        assert_eq!(
            *rep, 0,
            "config {} run twice at {}",
            done.ask.config, done.ask.budget
        );
        let value = model.measure(seed, done.ask.config, done.ask.budget, *rep);
        *rep += 1;
        if value.is_some() && done.ask.budget == MAX_BUDGET {
            best_evaluated = best_evaluated.min(model.regret(done.ask.config));
        }
        strategy.report(&done.ask, value);
        push_event(
            &mut events,
            &running,
            now,
            completed,
            &*strategy,
            best_evaluated,
        );
    }
    events
}

fn push_event(
    events: &mut Vec<Event>,
    running: &[Running],
    now: f64,
    completed: f64,
    strategy: &dyn Strategy,
    best_evaluated: f64,
) {
    let partial: f64 = running.iter().map(|r| now - r.start).sum();
    events.push(Event {
        consumed: completed + partial,
        trials: events.len() + 1,
        finalists: strategy.finalists(),
        best_evaluated,
    });
}

// ------------------------------------------------------------ finalist step

/// How the finalists are measured at max budget (`FINALIST_STEP`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum FinalistStep {
    /// The launcher's objective stage: a first round of `FIRST_RUNS` runs
    /// each, then racing (see [`race`]).
    Race,
    /// The earlier design: `REPEATS` runs each, the lowest median wins.
    Fixed,
}

impl FinalistStep {
    fn from_env() -> FinalistStep {
        match env_or("FINALIST_STEP", "race").as_str() {
            "race" => FinalistStep::Race,
            "fixed" => FinalistStep::Fixed,
            other => panic!("FINALIST_STEP: race or fixed, not {other}"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            FinalistStep::Race => "race",
            FinalistStep::Fixed => "fixed",
        }
    }
}

/// Runs of each finalist in the race's first round: `measurement.repeats`
/// at its default (3).
const FIRST_RUNS: usize = 3;
/// The race's cap on a finalist's runs (`measurement.max_repeats`), and
/// its equivalence margin (`selection.min_improvement`, 2 %, as a log).
const RACE_CAP: usize = 10;
const RACE_MIN_IMPROVEMENT: f64 = 0.02;

/// The finalist step's pick and what it cost.
#[derive(Debug, Clone)]
struct Picked {
    config: u64,
    seconds: f64,
    /// Runs at max budget over all finalists.
    runs: usize,
}

/// The finalist step on `finalists` (`None`: none). The `r`-th run of a
/// finalist is the model's measurement with `rep` = `FINALIST_REP + r`.
fn finalist_step(
    model: &Model,
    seed: u64,
    finalists: &[(u64, f64)],
    step: FinalistStep,
    allowance: f64,
) -> Option<Picked> {
    if finalists.is_empty() {
        return None;
    }
    match step {
        FinalistStep::Fixed => {
            let config = finalists
                .iter()
                .map(|&(x, _)| {
                    let mut m: Vec<f64> = (0..REPEATS).map(|r| run(model, seed, x, r)).collect();
                    m.sort_by(f64::total_cmp);
                    (x, m[m.len() / 2])
                })
                .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
                .map(|(x, _)| x)?;
            Some(Picked {
                config,
                seconds: finalists
                    .iter()
                    .map(|(x, _)| REPEATS as f64 * model.seconds(*x, MAX_BUDGET))
                    .sum(),
                runs: finalists.len() * REPEATS as usize,
            })
        }
        FinalistStep::Race => Some(race(model, seed, finalists, allowance)),
    }
}

/// The `r`-th finalist run of `x` (a finalist ran at max budget: it does
/// not crash).
fn run(model: &Model, seed: u64, x: u64, r: u64) -> f64 {
    model
        .measure(seed, x, MAX_BUDGET, FINALIST_REP + r)
        .expect("a finalist does not crash")
}

/// The finalists raced as the launcher's objective stage races a bucket's
/// configs (`racing` in src/decide/bucket.rs), on one host and without
/// the baseline (every finalist is a candidate; the bench asks only which
/// is fastest). A run's value is minus the log of its time. After a first
/// round of `FIRST_RUNS` runs each, the leader (highest mean) is compared
/// with every other finalist by the launcher's interval
/// (`stats::speedup::estimate`, Student's t with Welch–Satterthwaite
/// degrees of freedom, 95 %; its upper end at 1 − 0.05 / m for the m
/// finalists compared, as the launcher reads it): a finalist is settled
/// when it is shown slower than the leader, or equivalent to it (the
/// interval of their ratio inside ±`RACE_MIN_IMPROVEMENT`). The unsettled ones below the cap,
/// and the leader with them, grow to `least + max(FIRST_RUNS, least / 2)`
/// runs (`least`: the fewest among them), up to `RACE_CAP`; then the leader
/// is compared again. The pick is the leader when nothing is unsettled or
/// every unsettled one is at the cap (ties: lower config index), or when
/// the next round would not fit in `allowance` seconds (the bench's
/// budget; the launcher has none but the cap).
fn race(model: &Model, seed: u64, finalists: &[(u64, f64)], allowance: f64) -> Picked {
    let tau = RACE_MIN_IMPROVEMENT.ln_1p();
    let mut values: Vec<Vec<f64>> = vec![Vec::new(); finalists.len()];
    let mut seconds = 0.0;
    // Runs of finalist `i` up to `to`.
    let grow = |i: usize, to: usize, values: &mut [Vec<f64>]| -> f64 {
        let x = finalists[i].0;
        let mut paid = 0.0;
        while values[i].len() < to {
            let r = values[i].len() as u64;
            values[i].push(-run(model, seed, x, r).ln());
            paid += model.seconds(x, MAX_BUDGET);
        }
        paid
    };
    for i in 0..finalists.len() {
        seconds += grow(i, FIRST_RUNS, &mut values);
    }
    let by_host = |v: &[f64]| BTreeMap::from([("host".to_string(), v.to_vec())]);
    // As the launcher: the end of a comparison whose error would settle a
    // faster finalist out (the upper one) is read at 1 − 0.05 / m for the
    // m finalists compared with the leader (Bonferroni).
    let settle = 1.0 - (1.0 - CONFIDENCE) / finalists.len().saturating_sub(1).max(1) as f64;
    loop {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let leader = (0..finalists.len())
            .max_by(|&a, &b| {
                mean(&values[a])
                    .total_cmp(&mean(&values[b]))
                    .then(finalists[b].0.cmp(&finalists[a].0))
            })
            .expect("finalists");
        let mut raced = Vec::new();
        let mut contested = false;
        for i in (0..finalists.len()).filter(|&i| i != leader) {
            let settled = estimate(&by_host(&values[leader]), &by_host(&values[i]))
                .map(|e| (e.log_bounds(CONFIDENCE).0, e.log_bounds(settle).1))
                .is_some_and(|(lo, hi)| hi < 0.0 || (lo > -tau && hi < tau));
            if !settled {
                contested = true;
                if values[i].len() < RACE_CAP {
                    raced.push(i);
                }
            }
        }
        if contested && values[leader].len() < RACE_CAP {
            raced.push(leader);
        }
        if raced.is_empty() {
            return Picked {
                config: finalists[leader].0,
                seconds,
                runs: values.iter().map(Vec::len).sum(),
            };
        }
        let least = raced.iter().map(|&i| values[i].len()).min().unwrap_or(0);
        let to = (least + FIRST_RUNS.max(least.div_ceil(2))).min(RACE_CAP);
        let round: f64 = raced
            .iter()
            .map(|&i| (to - values[i].len()) as f64 * model.seconds(finalists[i].0, MAX_BUDGET))
            .sum();
        if seconds + round > allowance {
            // The budget ends the race: the leader as it stands.
            return Picked {
                config: finalists[leader].0,
                seconds,
                runs: values.iter().map(Vec::len).sum(),
            };
        }
        for i in raced {
            seconds += grow(i, to, &mut values);
        }
    }
}

#[derive(Debug, Clone)]
struct Point {
    /// Search plus finalist step.
    spent: f64,
    /// Trials completed by the pick (finalist step not counted).
    trials: usize,
    regret: f64,
    /// Regret of the best single measurement (no finalist step).
    incumbent: f64,
    best_evaluated: f64,
    /// Runs of the finalist step.
    finalist_runs: usize,
}

/// Seconds the finalist step reserves before it starts: its first round
/// (`FIRST_RUNS` runs each when racing; every run of the fixed step).
fn reserved_seconds(model: &Model, finalists: &[(u64, f64)], step: FinalistStep) -> f64 {
    let runs = match step {
        FinalistStep::Race => FIRST_RUNS as f64,
        FinalistStep::Fixed => REPEATS as f64,
    };
    finalists
        .iter()
        .map(|(x, _)| runs * model.seconds(*x, MAX_BUDGET))
        .sum()
}

/// Stopping at `budget` trial-seconds: the search runs until the first
/// completion at which what it consumed plus what its finalist step
/// reserves would no longer fit in the budget, and picks from the
/// completion before (no hindsight: a later, cheaper set of finalists does
/// not count). The race then goes on while its next round fits in what is
/// left of the budget.
fn at_budget(
    model: &Model,
    seed: u64,
    events: &[Event],
    budget: f64,
    step: FinalistStep,
) -> Option<Point> {
    let limit = budget * (1.0 + 1e-12);
    let mut pick = None;
    for e in events {
        if e.consumed + reserved_seconds(model, &e.finalists, step) > limit {
            break;
        }
        if !e.finalists.is_empty() {
            pick = Some(e);
        }
    }
    let e = pick?;
    let picked = finalist_step(model, seed, &e.finalists, step, limit - e.consumed)?;
    Some(Point {
        spent: e.consumed + picked.seconds,
        trials: e.trials,
        regret: model.regret(picked.config),
        incumbent: model.regret(e.finalists[0].0),
        best_evaluated: e.best_evaluated,
        finalist_runs: picked.runs,
    })
}

// ------------------------------------------------------------ main

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// Budget labels and fractions of grid (`hb1` is per seed: one Hyperband
/// iteration and its finalist step, one worker).
const FRACTIONS: [(&str, f64); 4] = [
    ("1/27", 1.0 / 27.0),
    ("1/9", 1.0 / 9.0),
    ("1/3", 1.0 / 3.0),
    ("1", 1.0),
];
/// Hyperband with `fidelity.continuation`, and with `fidelity.prune` too.
const HB_CONT: &str = "hyperband+continuation";
const HB_PRUNE: &str = "hyperband+continuation+prune";
/// The same three with `strategy.proposer: tpe` (new configs from a model).
const HB_TPE: &str = "hyperband+tpe";
const HB_TPE_CONT: &str = "hyperband+tpe+continuation";
const HB_TPE_PRUNE: &str = "hyperband+tpe+continuation+prune";
/// `kind: tpe` with in-run pruning: every trial at max budget, stopped at
/// a ladder budget where its reading is not in the top 1/eta of the
/// readings there so far.
const TPE_PRUNE: &str = "tpe+prune";
const STRATEGIES: [&str; 10] = [
    "grid",
    "random",
    "hyperband",
    HB_CONT,
    HB_PRUNE,
    HB_TPE,
    HB_TPE_CONT,
    HB_TPE_PRUNE,
    "tpe",
    TPE_PRUNE,
];

struct SeedRuns {
    seed: u64,
    hb1: f64,
    /// (strategy, workers, label, point)
    points: Vec<(String, usize, String, Option<Point>)>,
}

fn run_seed(
    model: &Model,
    seed: u64,
    workers: &[usize],
    only: &[String],
    step: FinalistStep,
) -> SeedRuns {
    // One Hyperband iteration with one worker: the `hb1` budget.
    let mut hb = make("hyperband", seed, 1, 1);
    let events = simulate(model, seed, hb.as_mut(), 1, f64::INFINITY);
    let last = events.last().expect("hyperband ran");
    let hb1 = last.consumed
        + finalist_step(model, seed, &last.finalists, step, f64::INFINITY)
            .map_or(0.0, |p| p.seconds);
    let mut budgets: Vec<(String, f64)> = vec![("hb1".to_string(), hb1)];
    budgets.extend(
        FRACTIONS
            .iter()
            .map(|(l, f)| (l.to_string(), f * model.grid_seconds)),
    );
    let mut points = Vec::new();
    // With more workers, one iteration ends at its own budget.
    for &p in workers
        .iter()
        .filter(|&&p| p > 1 && (only.is_empty() || only.iter().any(|s| s == "hyperband")))
    {
        let mut hb = make("hyperband", seed, 1, p);
        let events = simulate(model, seed, hb.as_mut(), p, f64::INFINITY);
        points.push((
            "hyperband (1 iteration)".to_string(),
            p,
            "hb1".to_string(),
            at_budget(model, seed, &events, f64::INFINITY, step),
        ));
    }
    for name in STRATEGIES
        .into_iter()
        .filter(|n| only.is_empty() || only.iter().any(|s| s == n))
    {
        for &p in workers {
            if p > 1 && (name == "grid" || name == "random") {
                continue; // their picks do not depend on the worker count
            }
            // As many iterations as the budget allows.
            let mut s = make(name, seed, 1_000, p);
            let events = simulate(model, seed, s.as_mut(), p, model.grid_seconds);
            for (label, b) in &budgets {
                points.push((
                    name.to_string(),
                    p,
                    label.clone(),
                    at_budget(model, seed, &events, *b, step),
                ));
            }
        }
    }
    SeedRuns { seed, hb1, points }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this
    // binary without it: building it is the check there.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let seeds: u64 = env_or("SEEDS", "20").parse().expect("SEEDS");
    let workers: Vec<usize> = env_or("WORKERS", "1 8")
        .split_whitespace()
        .map(|w| w.parse().expect("WORKERS"))
        .collect();
    let variants: Vec<Variant> = env_or("VARIANTS", "faithful misleading")
        .split_whitespace()
        .map(|v| match v {
            "faithful" => Variant::Faithful,
            "misleading" => Variant::Misleading,
            _ => panic!("VARIANTS: faithful, misleading"),
        })
        .collect();
    // Strategies to run (all by default): their rows do not depend on each
    // other, so a comparison can rerun some.
    let step = FinalistStep::from_env();
    let only: Vec<String> = env_or("STRATEGIES", "")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    for s in &only {
        assert!(
            STRATEGIES.contains(&s.as_str()),
            "STRATEGIES: {}",
            STRATEGIES.join(", ")
        );
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t0 = std::time::Instant::now();
    let mut json_variants = Vec::new();
    for &variant in &variants {
        let model = Model::new(variant);
        let mut runs: Vec<SeedRuns> = Vec::new();
        let next = std::sync::atomic::AtomicU64::new(1);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if seed > seeds {
                                break;
                            }
                            mine.push(run_seed(&model, seed, &workers, &only, step));
                        }
                        mine
                    })
                })
                .collect();
            for h in handles {
                runs.extend(h.join().expect("a seed's thread"));
            }
        });
        runs.sort_by_key(|r| r.seed);
        eprintln!(
            "search_regret: {} model done ({} seeds, {:.1} s so far)",
            variant.name(),
            seeds,
            t0.elapsed().as_secs_f64()
        );
        print_table(&model, &runs);
        json_variants.push(to_json(&model, &runs));
    }
    if let Ok(path) = std::env::var("SEARCH_REGRET_JSON") {
        let doc = json!({
            "knobs": KNOBS.iter().map(|(n, v)| json!({"name": n, "values": v})).collect::<Vec<_>>(),
            "settings": {
                "min_budget": MIN_BUDGET, "max_budget": MAX_BUDGET, "eta": ETA,
                "t0": T0, "crash_seconds": CRASH_SECONDS, "noise": NOISE,
                "finalists": FINALISTS, "repeats": REPEATS, "finalist_rep": FINALIST_REP,
                "finalist_step": step.name(), "first_runs": FIRST_RUNS, "race_cap": RACE_CAP,
                "race_min_improvement": RACE_MIN_IMPROVEMENT, "confidence": CONFIDENCE,
                "hit": HIT, "seeds": seeds, "workers": workers,
                "fractions": FRACTIONS.iter().map(|(l, f)| json!([l, f])).collect::<Vec<_>>(),
            },
            "variants": json_variants,
        });
        std::fs::write(&path, serde_json::to_string(&doc).expect("json")).expect("write JSON");
        eprintln!("search_regret: wrote {path}");
    }
}

fn print_table(model: &Model, runs: &[SeedRuns]) {
    println!(
        "\nvariant {}: {} configs, optimum {:.5} s/unit (config {}), grid {:.0} trial-seconds; hb1 = one Hyperband iteration + finalists, 1 worker ({:.4} of grid, mean)",
        model.variant.name(),
        space_size(),
        model.optimum,
        model.argmin,
        model.grid_seconds,
        mean(
            &runs
                .iter()
                .map(|r| r.hb1 / model.grid_seconds)
                .collect::<Vec<_>>()
        ),
    );
    println!(
        "| budget | strategy | workers | trial-seconds / grid | trials (median) | finalist runs (median) | regret mean | regret median | within 2 % | incumbent within 2 % | evaluated one within 2 % |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let hb1 = mean(&runs.iter().map(|r| r.hb1).collect::<Vec<_>>()) / model.grid_seconds;
    let mut labels: Vec<(String, f64)> = FRACTIONS.iter().map(|f| (f.0.to_string(), f.1)).collect();
    labels.push(("hb1".to_string(), hb1));
    labels.sort_by(|a, b| a.1.total_cmp(&b.1));
    let first = &runs[0].points;
    for (label, _) in &labels {
        for (name, p, l, _) in first {
            if l != label {
                continue;
            }
            let pts: Vec<Point> = runs
                .iter()
                .filter_map(|r| {
                    r.points
                        .iter()
                        .find(|x| &x.0 == name && x.1 == *p && &x.2 == label)
                        .and_then(|x| x.3.clone())
                })
                .collect();
            if pts.len() < runs.len() {
                println!(
                    "| {label} | {name} | {p} | | | | no pick in {} of {} seeds | | | | |",
                    runs.len() - pts.len(),
                    runs.len()
                );
                continue;
            }
            let regrets: Vec<f64> = pts.iter().map(|x| x.regret).collect();
            let share = |f: &dyn Fn(&Point) -> f64| {
                pts.iter().filter(|x| f(x) <= HIT).count() as f64 / pts.len() as f64
            };
            println!(
                "| {label} | {name} | {p} | {:.4} | {} | {} | {:.2} % | {:.2} % | {:.0} % | {:.0} % | {:.0} % |",
                mean(
                    &pts.iter()
                        .map(|x| x.spent / model.grid_seconds)
                        .collect::<Vec<_>>()
                ),
                median(&pts.iter().map(|x| x.trials as f64).collect::<Vec<_>>()),
                median(
                    &pts.iter()
                        .map(|x| x.finalist_runs as f64)
                        .collect::<Vec<_>>()
                ),
                100.0 * mean(&regrets),
                100.0 * median(&regrets),
                100.0 * share(&|x| x.regret),
                100.0 * share(&|x| x.incumbent),
                100.0 * share(&|x| x.best_evaluated),
            );
        }
    }
}

fn to_json(model: &Model, runs: &[SeedRuns]) -> Json {
    // A sample of measurements for the Python side to check its model
    // against: every config at every rung budget, seed 1, rep 0, and the
    // finalist reps of the optimum.
    let brackets = Brackets::new(MIN_BUDGET, MAX_BUDGET, ETA).expect("brackets");
    let rung_budgets: Vec<f64> = brackets.brackets()[0]
        .rungs
        .iter()
        .map(|r| r.budget)
        .collect();
    let mut check = Vec::new();
    for x in 0..space_size() {
        for &b in &rung_budgets {
            check.push(json!([1, x, b, 0, model.measure(1, x, b, 0)]));
        }
    }
    for r in 0..REPEATS {
        let rep = FINALIST_REP + r;
        check.push(json!([
            7,
            model.argmin,
            MAX_BUDGET,
            rep,
            model.measure(7, model.argmin, MAX_BUDGET, rep)
        ]));
    }
    // Student's t quantiles and some races, for the Python side's copy of
    // the race: the optimum and its two neighbours in the index, and the
    // 2nd, 3rd and 4th best configs, on seeds 1 to 5.
    let t_check: Vec<Json> = [1.0, 1.5, 2.0, 3.7, 4.0, 8.0, 17.3, 40.0, 200.0]
        .iter()
        .map(|&df| json!([df, t_quantile(df, 0.5 + CONFIDENCE / 2.0)]))
        .collect();
    let mut ranked: Vec<(f64, u64)> = (0..space_size())
        .filter_map(|x| model.v[x as usize].map(|v| (v, x)))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let ranked: Vec<u64> = ranked.into_iter().map(|(_, x)| x).collect();
    let sets: Vec<Vec<u64>> = vec![
        vec![model.argmin, ranked[1], ranked[2]],
        vec![ranked[1], ranked[2], ranked[3]],
        vec![ranked[0], ranked[10]],
    ];
    let race_check: Vec<Json> = (1..=5)
        .flat_map(|seed| sets.iter().map(move |set| (seed, set)))
        .map(|(seed, set)| {
            let f: Vec<(u64, f64)> = set.iter().map(|x| (*x, 0.0)).collect();
            let p = race(model, seed, &f, f64::INFINITY);
            json!([seed, set, p.config, p.seconds, p.runs])
        })
        .collect();
    let within: usize = model
        .v
        .iter()
        .filter(|v| v.is_some_and(|v| (v - model.optimum) / model.optimum <= HIT))
        .count();
    json!({
        "variant": model.variant.name(),
        "optimum": model.optimum,
        "argmin": model.argmin,
        "grid_seconds": model.grid_seconds,
        "configs_within_hit": within,
        "crashing_configs": model.f.iter().filter(|f| f.is_none()).count(),
        "values": model.v,
        "seconds_at_max": (0..space_size()).map(|x| model.seconds(x, MAX_BUDGET)).collect::<Vec<_>>(),
        "rung_budgets": rung_budgets,
        "check": check,
        "t_check": t_check,
        "race_check": race_check,
        "runs": runs.iter().map(|r| json!({
            "seed": r.seed,
            "hb1": r.hb1,
            "points": r.points.iter().map(|(name, p, label, pt)| json!({
                "strategy": name, "workers": p, "budget": label,
                "spent": pt.as_ref().map(|x| x.spent),
                "trials": pt.as_ref().map(|x| x.trials),
                "regret": pt.as_ref().map(|x| x.regret),
                "incumbent": pt.as_ref().map(|x| x.incumbent),
                "best_evaluated": pt.as_ref().map(|x| x.best_evaluated),
                "finalist_runs": pt.as_ref().map(|x| x.finalist_runs),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
