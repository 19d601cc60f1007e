//! From ledger attempts to decisions.
//!
//! Correctness first: a config with any failed attempt is rejected with
//! that failure; a config whose outputs differ from the baseline's (same
//! host class, same cell) is rejected as `output_changed`.
//!
//! Speed is judged on how well a speedup is known, not on how much single
//! runs scatter: every speedup has a 95 % confidence interval from the
//! runs of both configs, compared within hosts (`crate::stats::speedup`).
//! In a cell, a candidate beats the baseline only if the interval's lower
//! bound is above 1 + `min_improvement`.
//!
//! What ships is decided per bucket: a config wins a bucket only if it
//! passed the gate and was measured at every cell of the bucket, is not
//! shown slower than the baseline anywhere (no cell's interval lies below
//! 1), and the interval of its geometric-mean speedup lies above 1 +
//! `min_improvement`. A config shown equivalent to the leader (their
//! ratio's interval above 1 / (1 + `min_improvement`)) that changes fewer
//! knobs takes its place. Where the intervals cannot decide yet, the
//! configs concerned get more runs (racing, up to
//! `measurement.max_repeats`). A winner becomes a VERDICT once a final
//! interleaved round against the baseline, sized from the sweep's
//! estimate, confirms it; until then it is a DRAFT.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::{Serialize, Serializer};

use crate::ledger::records::{
    AttemptRecord, AttemptStatus, FailureClass, HostRecord, PlanRecord, StudyRecord,
};
use crate::ledger::{CorruptObject, Scan};
use crate::spec::frozen::{FrozenMetric, Judging};
use crate::spec::{Better, FrozenSpec};
use crate::stats::Summary;
use crate::stats::speedup::{self as interval, CONFIDENCE, Estimate, Interval};
use crate::trial::RoleKind;

#[derive(Debug, Clone, Serialize)]
pub struct MetricInfo {
    pub name: String,
    pub unit: String,
    pub better: Better,
}

/// How settled a decision is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// What the evidence so far says; more evidence may change it.
    Draft,
    /// Final: every planned trial ended and the winner was confirmed (or
    /// nothing can win).
    Verdict,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Draft => "draft",
            Level::Verdict => "verdict",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a cell's baseline stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BaselineState {
    /// Ran without failing (it may still lack measurements).
    Ok,
    /// Failed: nothing can win at the cell.
    Failed,
    /// Has not run at the cell yet.
    Pending,
}

/// Something a cell's report notes besides its decision. Written in the
/// report as its sentence.
#[derive(Debug, Clone, PartialEq)]
pub enum CellNote {
    /// The cell was given up on a host whose baseline would not settle.
    Dropped { host: String, reason: String },
    /// The baseline's repeats disagree on their output.
    BaselineOutputVaries,
    /// The baseline breaks a `selection.limits` bound (it still ships
    /// when nothing beats it: it is the default).
    BaselineOverLimit { detail: String },
    /// The baseline failed once and passed when run again: the failure
    /// is not believed.
    BaselineFailedOnce { detail: String },
}

impl fmt::Display for CellNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CellNote::Dropped { host, reason } => write!(f, "dropped on host {host}: {reason}"),
            CellNote::BaselineOutputVaries => f.write_str(
                "the baseline's output differs between its own repeats; candidates are compared with its first repeat",
            ),
            CellNote::BaselineOverLimit { detail } => {
                write!(f, "the baseline breaks a limit: {detail}")
            }
            CellNote::BaselineFailedOnce { detail } => write!(
                f,
                "the baseline failed once ({detail}) and passed when run again: the failure is not believed; candidates are compared with its successful runs"
            ),
        }
    }
}

impl Serialize for CellNote {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl CellNote {
    fn is_drop(&self) -> bool {
        matches!(self, CellNote::Dropped { .. })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub study_id: String,
    pub spec_hash: String,
    pub tunectl_version: String,
    /// `verdict` when every bucket's decision is a verdict, else `draft`.
    pub level: Level,
    pub objective: MetricInfo,
    /// The study's secondary metrics (`metrics:`), in its order: shown
    /// beside the objective, never judged (but for `selection.limits`).
    pub metrics: Vec<MetricInfo>,
    pub statistic: String,
    pub min_improvement: f64,
    pub context: BTreeMap<String, String>,
    /// The baseline config (every knob at its default).
    pub baseline: serde_json::Value,
    /// Every knob's kind and values, by name (as the frozen spec has them),
    /// for the tuned files: `apply` checks values against them.
    #[serde(skip)]
    pub domains: serde_json::Map<String, serde_json::Value>,
    /// The study's `fingerprint.class_key` as the frozen spec stores it
    /// (a list of field names), when the study chose one: tuned files
    /// carry it so that `apply` classes its host the same way. `None`:
    /// the default key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class_key: Option<serde_json::Value>,
    /// The commands of the tools that key reads (`tool:<name>` fields).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub class_tools: BTreeMap<String, String>,
    pub classes: Vec<ClassReport>,
    pub corrupt_objects: Vec<CorruptObject>,
    /// Attempts ignored because they belong to another spec.
    pub foreign_attempts: usize,
    /// Attempts discarded because their host drifted (re-measured).
    pub voided_attempts: usize,
    /// Baseline re-measurements (anchors) taken to watch for drift.
    pub anchors: usize,
    /// Attempts ignored because their role is unknown to this tunectl
    /// (written by a newer one or another tool). Left out when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown_role_attempts: usize,
    pub repeats: u32,
    pub confirm_repeats: u32,
    pub min_hosts: u32,
    /// The judging settings the decisions used (those stored at the first
    /// launch, or a study file's: see `changed_since_launch`).
    pub judging: Judging,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl MetricInfo {
    /// A metric as the frozen spec records it (`objective`, or a
    /// `fidelity.proxy`).
    fn of(m: &FrozenMetric) -> MetricInfo {
        MetricInfo {
            name: m.name.clone(),
            unit: m.unit.clone(),
            better: m.better,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassReport {
    pub host_class: String,
    pub label: String,
    pub hosts: Vec<String>,
    /// The class's most recent fingerprint (class-defining fields and all).
    pub fingerprint: Option<crate::fingerprint::Fingerprint>,
    pub cells: Vec<CellReport>,
    /// Decisions per bucket: what ships.
    pub buckets: Vec<BucketReport>,
    /// An adaptive search's screening runs (rungs), per cell and budget;
    /// empty for grid and random studies.
    pub search: Vec<SearchRow>,
    /// Where the study could go next: the knobs that moved the objective
    /// most, winners at the edge of a knob's range, values never tried.
    pub next: super::levers::NextSteps,
    /// The class's baseline anchors and screening runs, in attempt order
    /// (attempt ids sort by time): what the HTML report charts over time.
    #[serde(skip)]
    pub trace: Vec<AttemptRecord>,
}

/// The screening runs of an adaptive search at one cell and one budget,
/// read on the proxy metric. One run per config (n = 1 each): a rung
/// ranks, it does not decide; the objective stage does.
#[derive(Debug, Clone, Serialize)]
pub struct SearchRow {
    pub cell_label: String,
    /// The budget, in `budget_unit` (`None` without a `fidelity:` section).
    pub budget: Option<f64>,
    pub budget_unit: String,
    /// The proxy metric.
    pub metric: MetricInfo,
    /// Configs run (the baseline included).
    pub trials: u64,
    pub failed: u64,
    /// Stopped early by `fidelity.prune` (neither failed nor ranked).
    pub pruned: u64,
    /// Ran, but their output differs from the baseline's at this budget.
    pub output_changed: u64,
    /// The baseline's value at this budget (n = 1).
    pub baseline: Option<f64>,
    /// The best config here and its value (n = 1).
    pub best: Option<(String, f64)>,
}

/// One bucket of cells of one host class, and what wins it.
#[derive(Debug, Clone, Serialize)]
pub struct BucketReport {
    /// Stable id: first 16 hex of the sha256 of `bounds`.
    pub key: String,
    /// For people: `n ∈ [2^18, 2^19)` and so on.
    pub label: String,
    /// Per cell axis: `{"min": lo, "max": hi}` (half-open, pow2 rule),
    /// `{"values": [v]}` (exact rule) or `"any"` (all rule).
    pub bounds: serde_json::Value,
    /// Labels of the cells in the bucket that have results.
    pub cells: Vec<String>,
    /// The config that ships: the winner's, or the baseline's.
    pub config: serde_json::Value,
    pub winner: Option<BucketWinner>,
    pub decision: String,
    pub level: Level,
    pub level_reason: String,
    /// Relative improvement the winner had to exceed.
    pub threshold: Option<f64>,
    /// Per cell: the baseline and, when there is one, the winner.
    pub per_cell: Vec<BucketCell>,
    /// Configs that won a cell but were refused the bucket, with the cell
    /// that refused them.
    pub refusals: Vec<Refusal>,
    /// Configs rejected by the gate in any cell of the bucket.
    pub rejected: Vec<ConfigReport>,
    /// The best candidate's interval over the bucket (the winner's when
    /// there is one): what the decision read.
    pub interval: Option<Interval>,
    /// Where the intervals cannot decide yet: the configs that get more
    /// runs, and how many each should have at every cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub racing: Option<Racing>,
    /// Runs a side at every cell that the final interleaved round takes
    /// (sized from the sweep's estimate), when there is a winner to
    /// confirm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirm_runs: Option<u32>,
}

/// More runs where a bucket's decision is close (racing): the baseline and
/// these configs each get sweep runs up to `runs` at every cell of the
/// bucket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Racing {
    /// (label, config index), the baseline not included.
    pub configs: Vec<(String, u64)>,
    /// Sweep runs each should have at every cell after this round.
    pub runs: u32,
    /// Why, per config (the baseline aside): `straddles the minimum`,
    /// `close to the leader`.
    pub why: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BucketWinner {
    pub label: String,
    pub config: serde_json::Value,
    pub knobs_changed: usize,
    /// Geometric mean over the bucket's cells of the speedup.
    pub speedup: f64,
    /// The smallest per-cell speedup.
    pub min_cell_speedup: f64,
    /// `speedup` with its 95 % interval over the bucket's cells.
    pub interval: Interval,
    /// The final interleaved round against the baseline, when it ran.
    pub confirmation: Option<Confirmation>,
}

/// In JSON, a side's spread from fewer than `selection.min_samples`
/// samples is `null` (unknown), never 0.
#[derive(Debug, Clone)]
pub struct Confirmation {
    pub speedup: f64,
    /// The round's speedup with its 95 % interval (its runs only).
    pub interval: Option<Interval>,
    pub baseline: Option<Summary>,
    pub winner: Option<Summary>,
    /// The minimum improvement the interval's lower bound had to clear.
    pub threshold: f64,
    pub confirmed: bool,
    /// Why the round failed outright (a crash or a changed output),
    /// whatever the timings said.
    pub failure: Option<RoundFailure>,
    /// The round has not measured its runs at every cell yet: it neither
    /// confirms nor refuses (the bucket stays a draft).
    pub incomplete: bool,
    /// Runs a side at every cell the round takes (sized from the sweep).
    pub runs: u32,
    /// Fewest runs a side measured at any cell.
    pub runs_done: usize,
    /// A cell where the round shows the winner slower than the baseline.
    pub harmed: Option<String>,
    min_samples: usize,
}

impl Serialize for Confirmation {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            speedup: f64,
            baseline: Option<SummaryJson>,
            winner: Option<SummaryJson>,
            interval: Option<Interval>,
            threshold: f64,
            confirmed: bool,
            failure: &'a Option<RoundFailure>,
            incomplete: bool,
            runs: u32,
            runs_done: usize,
            #[serde(skip_serializing_if = "Option::is_none")]
            harmed: &'a Option<String>,
        }
        let side = |s: &Option<Summary>| s.as_ref().map(|s| summary_json(s, self.min_samples));
        View {
            speedup: self.speedup,
            baseline: side(&self.baseline),
            winner: side(&self.winner),
            interval: self.interval,
            threshold: self.threshold,
            confirmed: self.confirmed,
            failure: &self.failure,
            incomplete: self.incomplete,
            runs: self.runs,
            runs_done: self.runs_done,
            harmed: &self.harmed,
        }
        .serialize(ser)
    }
}

/// A confirmation trial that failed the round outright. Written in the
/// report as its sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundFailure {
    /// How it failed; `None` for a failed attempt that does not say.
    pub class: Option<FailureClass>,
    pub detail: String,
    pub repeat: u32,
    pub host: String,
}

impl fmt::Display for RoundFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.class {
            Some(class) => write!(f, "{}: {}", class.as_str(), self.detail)?,
            None => f.write_str("failed")?,
        }
        write!(
            f,
            " (confirmation repeat {}, host {})",
            self.repeat, self.host
        )
    }
}

impl Serialize for RoundFailure {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BucketCell {
    pub cell_label: String,
    pub baseline: Option<ConfigReport>,
    pub winner: Option<ConfigReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub config_label: String,
    pub cell_label: String,
    pub speedup: Option<f64>,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CellReport {
    pub cell: serde_json::Value,
    pub cell_label: String,
    /// The bucket this cell belongs to.
    pub bucket: String,
    pub baseline_state: BaselineState,
    pub baseline: Option<ConfigReport>,
    /// The best candidate that beats the baseline in this cell alone (what
    /// ships is decided per bucket).
    pub winner: Option<ConfigReport>,
    /// Why the winner won, or why the baseline stays.
    pub decision: String,
    /// The threshold the winner had to beat (relative).
    pub threshold: Option<f64>,
    /// Eligible candidates, best first (the winner included).
    pub eligible: Vec<ConfigReport>,
    pub rejected: Vec<ConfigReport>,
    pub notes: Vec<CellNote>,
    /// Which cell of the plan (none for a cell known only from a drop).
    #[serde(skip)]
    cell_index: Option<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rejection {
    pub class: FailureClass,
    pub detail: String,
    /// `detail` without where it happened (repeat, host): what rejections
    /// of several configs can have in common.
    #[serde(skip)]
    pub cause: String,
    /// The head of the failed run's stderr (its log), for an error that
    /// shows it.
    #[serde(skip)]
    pub log: String,
}

/// In JSON, a spread from fewer than `selection.min_samples` samples is
/// `null` (unknown), never 0 (see [`ConfigReport::serialize`]).
#[derive(Debug, Clone)]
pub struct ConfigReport {
    pub label: String,
    pub config: serde_json::Value,
    pub knobs_changed: usize,
    /// Trials with a terminal attempt.
    pub trials: usize,
    /// Hosts it was measured on.
    pub hosts: usize,
    /// All samples pooled (for people); decisions use per-host ratios.
    pub summary: Option<Summary>,
    pub relative_spread: Option<f64>,
    /// Relative to the baseline in the "better" direction, per-host ratios
    /// merged by their median: 1.10 = 10 % better.
    pub speedup: Option<f64>,
    /// Candidate's plus baseline's relative spread (median over hosts):
    /// the dispersion of single runs, for reading; decisions use
    /// `interval`.
    pub combined_spread: Option<f64>,
    /// The speedup's 95 % confidence interval against the baseline, from
    /// both configs' runs compared within hosts. `None` with fewer than
    /// two runs (or `selection.min_samples` samples) on a side.
    pub interval: Option<Interval>,
    pub rejection: Option<Rejection>,
    /// Every other metric its successful sweep attempts recorded, pooled
    /// over the class's hosts (median, spread, n).
    pub metrics: BTreeMap<String, Summary>,
    order: (u64, String),
    by_host: BTreeMap<String, Vec<f64>>,
    /// One value per successful run, by host: the log of the median of its
    /// samples, oriented so that larger is better (with a single run, one
    /// per sample of it: `samples_as_runs`).
    runs: BTreeMap<String, Vec<f64>>,
    samples_as_runs: bool,
    /// Against the baseline, in log units (what `interval` shows).
    estimate: Option<Estimate>,
    /// Distinct sweep repeats with a terminal attempt.
    repeats_ended: usize,
    /// `selection.min_samples`: fewer samples have no known spread.
    min_samples: usize,
}

/// A [`Summary`] as JSON shows it: the spread `null` when unknown.
#[derive(Serialize)]
struct SummaryJson {
    n: usize,
    median: f64,
    spread: Option<f64>,
}

fn summary_json(s: &Summary, min_samples: usize) -> SummaryJson {
    SummaryJson {
        n: s.n,
        median: s.median,
        spread: (s.n >= min_samples).then_some(s.spread),
    }
}

impl Serialize for ConfigReport {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            label: &'a str,
            config: &'a serde_json::Value,
            knobs_changed: usize,
            trials: usize,
            hosts: usize,
            summary: Option<SummaryJson>,
            relative_spread: Option<f64>,
            speedup: Option<f64>,
            combined_spread: Option<f64>,
            interval: Option<Interval>,
            rejection: &'a Option<Rejection>,
            #[serde(skip_serializing_if = "BTreeMap::is_empty")]
            metrics: BTreeMap<&'a str, SummaryJson>,
        }
        View {
            label: &self.label,
            config: &self.config,
            knobs_changed: self.knobs_changed,
            trials: self.trials,
            hosts: self.hosts,
            summary: self
                .summary
                .as_ref()
                .map(|s| summary_json(s, self.min_samples)),
            relative_spread: self.relative_spread,
            speedup: self.speedup,
            combined_spread: self.combined_spread,
            interval: self.interval,
            rejection: &self.rejection,
            metrics: self
                .metrics
                .iter()
                .map(|(k, s)| (k.as_str(), summary_json(s, self.min_samples)))
                .collect(),
        }
        .serialize(ser)
    }
}

impl ConfigReport {
    /// The objective's raw samples (of the sweep) by host.
    pub fn samples(&self) -> &BTreeMap<String, Vec<f64>> {
        &self.by_host
    }
}

impl Rules {
    /// `min_improvement` in log units: a win's lower bound must be above.
    fn tau(&self) -> f64 {
        self.min_improvement.ln_1p()
    }
}

/// Settings read from the frozen spec.
struct Rules {
    higher: bool,
    tolerance: Option<crate::gate::ToleranceSpec>,
    min_improvement: f64,
    repeats: u32,
    confirm_repeats: u32,
    /// Most sweep runs a config gets at a cell, racing included.
    max_repeats: u32,
    min_hosts: u32,
    /// Samples a config needs at a cell for its spread to be known.
    min_samples: usize,
    /// `selection.limits`: bounds on secondary metrics.
    limits: BTreeMap<String, crate::spec::study::Limit>,
    /// Each declared secondary metric's unit, for the limits' messages.
    units: BTreeMap<String, String>,
}

/// A candidate compared with the baseline, host by host.
#[derive(Debug, Clone, Copy)]
struct Comparison {
    speedup: f64,
    /// `None` when either side has fewer than `selection.min_samples`
    /// samples: its spread is unknown and nothing wins on it.
    spread: Option<f64>,
}

fn speedup_of(c: f64, b: f64, higher: bool) -> Option<f64> {
    if c == 0.0 || b == 0.0 {
        return None;
    }
    Some(if higher { c / b } else { b / c })
}

/// Per host of the candidate: speedup and combined relative spread against
/// that host's own baseline samples, or, on a host that has none (its
/// slots never drew a baseline trial), against the class's baseline
/// samples pooled: the hosts of a class are alike by definition, and
/// pairing by host only removes their small offsets where it can. Merged
/// across hosts by their median.
fn compare(
    base: &BTreeMap<String, Vec<f64>>,
    cand: &BTreeMap<String, Vec<f64>>,
    higher: bool,
    min_samples: usize,
) -> Option<Comparison> {
    let pooled_base: Vec<f64> = base.values().flatten().copied().collect();
    let pooled_cand: Vec<f64> = cand.values().flatten().copied().collect();
    let pooled = Summary::of(&pooled_base);
    // A relative spread from fewer than `min_samples` samples is unknown:
    // a host with too few uses its class's pooled samples' spread.
    let known = |s: &Summary| (s.n >= min_samples).then(|| s.relative_spread());
    let pooled_base_spread = pooled.as_ref().and_then(known);
    let pooled_cand_spread = Summary::of(&pooled_cand).as_ref().and_then(known);
    let mut ratios = Vec::new();
    let mut spreads = Vec::new();
    for (host, cs) in cand {
        let own = base.get(host).and_then(|b| Summary::of(b));
        let (Some(bs), Some(c)) = (own.or(pooled), Summary::of(cs)) else {
            continue;
        };
        if let Some(r) = speedup_of(c.median, bs.median, higher) {
            ratios.push(r);
            let cand_spread = known(&c).or(pooled_cand_spread);
            let base_spread = known(&bs).or(pooled_base_spread);
            if let (Some(a), Some(b)) = (cand_spread, base_spread) {
                spreads.push(a + b);
            }
        }
    }
    Some(Comparison {
        speedup: crate::stats::median(&ratios)?,
        spread: (spreads.len() == ratios.len())
            .then(|| crate::stats::median(&spreads))
            .flatten(),
    })
}

/// Attempts of one config in one cell of one class.
#[derive(Default)]
struct Group<'a> {
    sweep: Vec<&'a AttemptRecord>,
    confirm: Vec<&'a AttemptRecord>,
}

/// Analyse a study's ledger contents.
/// Without the plan records, no bucket is a verdict (nothing says its
/// evidence is complete): what `report` shows reads them, see
/// [`analyze_planned`].
pub fn analyze(study: &StudyRecord, scan: &Scan, hosts: &[HostRecord]) -> Analysis {
    analyze_where(study, scan, hosts, &[], |_| true)
}

/// [`analyze`] with what launches planned per host class and cell.
pub fn analyze_planned(
    study: &StudyRecord,
    scan: &Scan,
    hosts: &[HostRecord],
    plans: &[PlanRecord],
) -> Analysis {
    analyze_where(study, scan, hosts, plans, |_| true)
}

/// [`analyze`] of the attempts `keep` accepts. A bucket's decision on a
/// host class depends only on that class's attempts at the bucket's cells,
/// so a launch confirming one bucket analyses just those.
pub fn analyze_where(
    study: &StudyRecord,
    scan: &Scan,
    hosts: &[HostRecord],
    plans: &[PlanRecord],
    keep: impl Fn(&AttemptRecord) -> bool,
) -> Analysis {
    analyze_scoped(study, scan, hosts, plans, Scope::Everything, keep)
}

/// How much of an [`Analysis`] to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// What `report` shows: also each class's next levers and its trace of
    /// anchors and rungs (the HTML report's charts).
    Everything,
    /// The decisions, with all they rest on (cells, buckets, search rows),
    /// and neither next levers nor traces (left empty): what a launch needs
    /// to confirm a draft winner and to write verdict records, which hold
    /// neither. Each bucket's decision is the same as with `Everything`.
    Decisions,
}

/// [`analyze_where`] building only what `scope` asks for.
pub fn analyze_scoped(
    study: &StudyRecord,
    scan: &Scan,
    hosts: &[HostRecord],
    plans: &[PlanRecord],
    scope: Scope,
    keep: impl Fn(&AttemptRecord) -> bool,
) -> Analysis {
    let everything = scope == Scope::Everything;
    let spec = &study.spec;
    let objective = MetricInfo::of(&spec.objective);
    let rules = Rules {
        higher: objective.better == Better::Higher,
        tolerance: spec.gate.tolerance.clone(),
        min_improvement: spec.selection.min_improvement,
        repeats: spec.measurement.repeats,
        confirm_repeats: spec.measurement.confirm_repeats,
        max_repeats: spec.measurement.max_repeats.max(spec.measurement.repeats),
        min_hosts: spec.selection.min_hosts,
        min_samples: spec.selection.min_samples as usize,
        limits: spec.selection.limits.clone(),
        units: secondary_declared(spec)
            .into_iter()
            .map(|m| (m.name, m.unit))
            .collect(),
    };
    let context: BTreeMap<String, String> = spec
        .context
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string()),
            )
        })
        .collect();

    let terminal = scan.terminal_where(keep);
    let mut foreign = 0;
    let mut anchors = 0;
    let mut unknown_roles = 0;
    let mut rungs: BTreeMap<&str, Vec<&AttemptRecord>> = BTreeMap::new();
    let mut traces: BTreeMap<&str, Vec<AttemptRecord>> = BTreeMap::new();
    // class → cell index → config index → attempts
    let mut tree: BTreeMap<&str, BTreeMap<u32, BTreeMap<u64, Group>>> = BTreeMap::new();
    for a in terminal.values() {
        if a.spec_hash != study.spec_hash {
            foreign += 1;
            continue;
        }
        // Only a rung is ever pruned; anything else recorded so is no
        // evidence (never a sample, never a failure).
        if a.status == AttemptStatus::Pruned && a.role != RoleKind::Rung {
            continue;
        }
        match &a.role {
            RoleKind::Rung => {
                tree.entry(a.host_class.as_str()).or_default();
                rungs.entry(a.host_class.as_str()).or_default().push(a);
                if everything {
                    traces
                        .entry(a.host_class.as_str())
                        .or_default()
                        .push((*a).clone());
                }
                continue;
            }
            // Measured for a purpose this tunectl does not know: no
            // evidence for anything it decides.
            RoleKind::Unknown(_) => {
                unknown_roles += 1;
                continue;
            }
            RoleKind::Sweep | RoleKind::Anchor | RoleKind::Confirm => {}
        }
        let group = tree
            .entry(a.host_class.as_str())
            .or_default()
            .entry(a.cell_index)
            .or_default()
            .entry(a.config_index)
            .or_default();
        match a.role {
            RoleKind::Anchor => {
                anchors += 1;
                if everything {
                    traces
                        .entry(a.host_class.as_str())
                        .or_default()
                        .push((*a).clone());
                }
            }
            RoleKind::Confirm => group.confirm.push(a),
            _ => group.sweep.push(a),
        }
    }

    let plans: Vec<&PlanRecord> = plans
        .iter()
        .filter(|p| p.spec_hash == study.spec_hash)
        .collect();
    // A class with a plan and nothing run yet is reported too: its buckets
    // are pending.
    for p in &plans {
        tree.entry(p.host_class.as_str()).or_default();
    }

    let mut classes = Vec::new();
    for (class_id, cells) in &tree {
        let class_plans: Vec<&PlanRecord> = plans
            .iter()
            .filter(|p| p.host_class == *class_id)
            .copied()
            .collect();
        let mut class_hosts: Vec<String> = hosts
            .iter()
            .filter(|h| h.host_class == *class_id)
            .map(|h| h.host.clone())
            .collect();
        class_hosts.sort();
        class_hosts.dedup();
        let latest = hosts.iter().rev().find(|h| h.host_class == *class_id);
        let label = latest
            .map(|h| h.class_label.clone())
            .unwrap_or_else(|| "unknown (no fingerprint in the ledger)".to_string());
        let drops: Vec<_> = scan
            .drops
            .iter()
            .filter(|d| d.host_class == *class_id)
            .collect();
        let mut cell_reports = Vec::new();
        for (cell_index, configs) in cells {
            if configs.values().all(|g| g.sweep.is_empty()) {
                continue;
            }
            let mut report =
                analyze_cell(configs, &objective.name, &rules, rules.tolerance.as_ref());
            report.cell_index = Some(*cell_index);
            report.bucket = crate::report::buckets::bucket_of(spec, &report.cell).key;
            for d in drops.iter().filter(|d| d.cell_label == report.cell_label) {
                report.notes.push(CellNote::Dropped {
                    host: d.host.clone(),
                    reason: d.reason.clone(),
                });
            }
            cell_reports.push(report);
        }
        // A cell dropped before anything of it survived still belongs in
        // the report: its bucket cannot ship a change.
        for d in &drops {
            if cell_reports.iter().any(|r| r.cell_label == d.cell_label) {
                continue;
            }
            let why = CellNote::Dropped {
                host: d.host.clone(),
                reason: d.reason.clone(),
            };
            cell_reports.push(CellReport {
                cell: d.cell.clone(),
                cell_label: d.cell_label.clone(),
                bucket: crate::report::buckets::bucket_of(spec, &d.cell).key,
                baseline_state: BaselineState::Pending,
                baseline: None,
                winner: None,
                decision: why.to_string(),
                threshold: None,
                eligible: Vec::new(),
                rejected: Vec::new(),
                notes: vec![why],
                cell_index: None,
            });
        }
        // A planned cell nothing has run at yet belongs in the report: its
        // bucket has no decision to ship.
        for p in &class_plans {
            if cell_reports
                .iter()
                .any(|r| r.cell_index == Some(p.cell_index) || r.cell_label == p.cell_label)
            {
                continue;
            }
            let why = "pending: nothing has run at this cell yet".to_string();
            cell_reports.push(CellReport {
                cell: p.cell.clone(),
                cell_label: p.cell_label.clone(),
                bucket: crate::report::buckets::bucket_of(spec, &p.cell).key,
                baseline_state: BaselineState::Pending,
                baseline: None,
                winner: None,
                decision: why,
                threshold: None,
                eligible: Vec::new(),
                rejected: Vec::new(),
                notes: Vec::new(),
                cell_index: Some(p.cell_index),
            });
        }
        cell_reports.sort_by_key(|r| r.cell_index.unwrap_or(u32::MAX));
        let (buckets, trials_left) = decide_buckets(
            spec,
            cells,
            &cell_reports,
            &objective.name,
            &rules,
            &class_plans,
        );
        // An adaptive search's screening runs tried configs too.
        let screened: Vec<&serde_json::Value> = rungs
            .get(class_id)
            .map(|r| r.iter().map(|a| &*a.config).collect())
            .unwrap_or_default();
        let next = if everything {
            super::levers::next_steps(
                spec,
                &cell_reports,
                &screened,
                &buckets,
                trials_left,
                rules.higher,
                rules.min_samples,
            )
        } else {
            Default::default()
        };
        classes.push(ClassReport {
            host_class: class_id.to_string(),
            label,
            hosts: class_hosts,
            fingerprint: latest.map(|h| h.fingerprint.clone()),
            cells: cell_reports,
            buckets,
            search: search_rows(
                spec,
                rungs.get(class_id).map(Vec::as_slice).unwrap_or_default(),
                rules.tolerance.as_ref(),
            ),
            next,
            trace: {
                let mut t = traces.remove(class_id).unwrap_or_default();
                t.sort_by(|a, b| a.attempt_id.cmp(&b.attempt_id));
                t
            },
        });
    }
    let all_verdicts = !classes.is_empty()
        && classes
            .iter()
            .all(|c| !c.buckets.is_empty() && c.buckets.iter().all(|b| b.level == Level::Verdict));

    Analysis {
        study_id: study.study_id.clone(),
        spec_hash: study.spec_hash.clone(),
        tunectl_version: crate::ledger::records::VERSION.to_string(),
        level: if all_verdicts {
            Level::Verdict
        } else {
            Level::Draft
        },
        statistic: "median ± 1.4826·MAD over n samples; speedups are geometric means over runs (one value per run: the median of its samples), compared within hosts, with a 95% Student-t interval".to_string(),
        objective,
        metrics: secondary_declared(spec),
        min_improvement: rules.min_improvement,
        context,
        baseline: spec_baseline(spec),
        domains: spec_domains(spec),
        class_key: spec.json().get("class_key").cloned(),
        class_tools: spec_class_tools(spec),
        classes,
        corrupt_objects: scan.corrupt.clone(),
        foreign_attempts: foreign,
        voided_attempts: scan.voided,
        anchors,
        unknown_role_attempts: unknown_roles,
        repeats: rules.repeats,
        confirm_repeats: rules.confirm_repeats,
        min_hosts: rules.min_hosts,
        judging: spec.judging(),
    }
}

/// The rung table of one class: per (cell, budget), how many configs ran,
/// failed or changed output (against the baseline's rung at that budget),
/// and the best on the proxy metric.
fn search_rows(
    spec: &FrozenSpec,
    rungs: &[&AttemptRecord],
    tolerance: Option<&crate::gate::ToleranceSpec>,
) -> Vec<SearchRow> {
    let fidelity = spec.fidelity.as_ref();
    let metric = MetricInfo::of(
        fidelity
            .and_then(|f| f.proxy.as_ref())
            .unwrap_or(&spec.objective),
    );
    let higher = metric.better == Better::Higher;
    let budget_unit = fidelity.map(|f| f.unit.clone()).unwrap_or_default();
    // (cell index, budget bits) → attempts
    let mut groups: BTreeMap<(u32, Option<u64>), Vec<&AttemptRecord>> = BTreeMap::new();
    for a in rungs {
        groups
            .entry((a.cell_index, a.fidelity.map(f64::to_bits)))
            .or_default()
            .push(a);
    }
    let mut out = Vec::new();
    for ((_, _), attempts) in groups {
        let Some(first) = attempts.first() else {
            continue;
        };
        let base = attempts
            .iter()
            .find(|a| a.is_baseline && a.status == AttemptStatus::Ok)
            .copied();
        let value = |a: &AttemptRecord| {
            a.metrics
                .get(&metric.name)
                .and_then(|s| crate::stats::median(s))
        };
        let (mut failed, mut changed, mut pruned) = (0, 0, 0);
        let mut best: Option<(String, f64)> = None;
        for a in &attempts {
            if a.status == AttemptStatus::Pruned {
                pruned += 1;
                continue;
            }
            if a.status != AttemptStatus::Ok {
                failed += 1;
                continue;
            }
            if !a.is_baseline
                && let Some(b) = base
                && crate::gate::compare_outputs(b, a, tolerance).is_err()
            {
                changed += 1;
                continue;
            }
            if a.is_baseline {
                continue;
            }
            if let Some(v) = value(a) {
                let better = match &best {
                    None => true,
                    Some((_, b)) => {
                        if higher {
                            v > *b
                        } else {
                            v < *b
                        }
                    }
                };
                if better {
                    best = Some((a.config_label.to_string(), v));
                }
            }
        }
        out.push(SearchRow {
            cell_label: first.cell_label.to_string(),
            budget: first.fidelity,
            budget_unit: budget_unit.clone(),
            metric: metric.clone(),
            trials: attempts.len() as u64,
            failed,
            pruned,
            output_changed: changed,
            baseline: base.and_then(value),
            best,
        });
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn analyze_cell(
    configs: &BTreeMap<u64, Group>,
    objective: &str,
    rules: &Rules,
    tolerance: Option<&crate::gate::ToleranceSpec>,
) -> CellReport {
    let any = configs.values().flat_map(|g| g.sweep.first()).next();
    let cell = any
        .map(|a| (*a.cell).clone())
        .unwrap_or(serde_json::Value::Null);
    let cell_label = any.map(|a| a.cell_label.to_string()).unwrap_or_default();
    let base_group = configs
        .values()
        .find(|g| g.sweep.iter().any(|a| a.is_baseline));
    let mut notes = Vec::new();

    let mut base_report = base_group.map(|g| {
        config_report(
            &g.sweep,
            objective,
            None,
            None,
            rules.higher,
            rules.min_samples,
        )
    });
    // The baseline's first successful repeat is the reference output.
    let mut reference: Option<&AttemptRecord> = None;
    if let Some(g) = base_group {
        let mut ok: Vec<&&AttemptRecord> = g
            .sweep
            .iter()
            .filter(|a| a.status == AttemptStatus::Ok)
            .collect();
        ok.sort_by_key(|a| a.repeat);
        reference = ok.first().map(|a| **a);
        if let Some(r) = reference
            && ok
                .iter()
                .any(|a| crate::gate::compare_outputs(r, a, tolerance).is_err())
        {
            notes.push(CellNote::BaselineOutputVaries);
        }
    }
    if let Some(g) = base_group
        && base_report.as_ref().is_some_and(|r| r.rejection.is_none())
        && let Some(detail) = limit_broken(&g.sweep, rules)
    {
        notes.push(CellNote::BaselineOverLimit { detail });
    }
    // The baseline's failure is believed when it happens twice (its first
    // run and the re-run the launch makes): once, with a successful run,
    // it is noted and set aside; once, alone, the re-run is pending.
    let base_failures = base_group
        .map(|g| {
            g.sweep
                .iter()
                .filter(|a| a.status == AttemptStatus::Failed)
                .count()
        })
        .unwrap_or(0);
    let mut retry_pending = None;
    if base_failures == 1
        && let Some(b) = base_report.as_mut()
        && let Some(r) = b.rejection.take()
    {
        if b.summary.is_some() {
            notes.push(CellNote::BaselineFailedOnce {
                detail: format!("{}: {}", r.class.as_str(), r.detail),
            });
        } else {
            retry_pending = Some(r);
        }
    }
    let base_state = match &base_report {
        None => BaselineState::Pending,
        Some(_) if retry_pending.is_some() => BaselineState::Pending,
        Some(r) if r.rejection.is_some() => BaselineState::Failed,
        Some(_) => BaselineState::Ok,
    };
    let empty = BTreeMap::new();
    let base_side = BaseSide {
        samples: base_report.as_ref().map(|b| &b.by_host).unwrap_or(&empty),
        runs: base_report.as_ref().map(|b| &b.runs).unwrap_or(&empty),
        samples_as_runs: base_report.as_ref().is_some_and(|b| b.samples_as_runs),
        known: base_report
            .as_ref()
            .and_then(|b| b.summary)
            .is_some_and(|s| s.n >= rules.min_samples),
    };

    let mut eligible = Vec::new();
    let mut rejected = Vec::new();
    for g in configs.values() {
        if g.sweep.is_empty() || g.sweep.iter().any(|a| a.is_baseline) {
            continue;
        }
        let r = config_report(
            &g.sweep,
            objective,
            reference.map(|a| (a, tolerance)),
            Some(&base_side),
            rules.higher,
            rules.min_samples,
        );
        let mut r = r;
        if r.rejection.is_none() {
            r.rejection = limit_broken(&g.sweep, rules).map(|detail| Rejection {
                class: FailureClass::Limit,
                cause: detail.clone(),
                detail,
                log: String::new(),
            });
        }
        if r.rejection.is_some() {
            rejected.push(r);
        } else if r.summary.is_some() {
            eligible.push(r);
        }
    }
    // Best first: by speedup, then a total order.
    eligible.sort_by(|a, b| {
        let (sa, sb) = (a.speedup.unwrap_or(0.0), b.speedup.unwrap_or(0.0));
        sb.total_cmp(&sa).then_with(|| a.order.cmp(&b.order))
    });
    rejected.sort_by(|a, b| a.order.cmp(&b.order));

    let mut winner = None;
    let mut threshold = None;
    let decision = match &base_report {
        None => "pending: the baseline has not run here yet".to_string(),
        Some(_) if retry_pending.is_some() => format!(
            "pending: the baseline failed once ({}); it runs once more before the failure is believed",
            retry_pending
                .as_ref()
                .map(|r| format!("{}: {}", r.class.as_str(), r.detail))
                .unwrap_or_default()
        ),
        Some(b) if b.rejection.is_some() => {
            let r = b
                .rejection
                .as_ref()
                .map(|r| format!("{}: {}", r.class.as_str(), r.detail))
                .unwrap_or_default();
            format!("baseline failed ({r}); nothing can win here")
        }
        Some(b) if b.summary.is_none() => {
            "pending: the baseline has no measurements yet".to_string()
        }
        Some(b) if b.relative_spread.is_none() => format!(
            "no decision: the baseline has {} samples here, fewer than selection.min_samples = {}: its spread is unknown and nothing wins on it",
            b.summary.map(|s| s.n).unwrap_or(0),
            rules.min_samples
        ),
        Some(_) => match eligible.iter().find(|c| c.estimate.is_some()) {
            None if eligible.iter().any(|c| c.speedup.is_some()) => format!(
                "no decision: the candidates have fewer than two runs or selection.min_samples = {} samples here: no interval of their speedup is known and nothing wins on it",
                rules.min_samples
            ),
            None => "baseline kept: no eligible candidate".to_string(),
            Some(leader) => {
                threshold = Some(rules.min_improvement);
                let tau = rules.tau();
                let (lo, _) = leader
                    .estimate
                    .map(|e| e.log_bounds(CONFIDENCE))
                    .unwrap_or((f64::NEG_INFINITY, 0.0));
                let shown = leader
                    .interval
                    .map(|i| interval_text(&i))
                    .unwrap_or_default();
                if lo > tau {
                    let pick = pick_among_ties(&eligible, leader, rules);
                    winner = Some(pick.clone());
                    let tie = if pick.label != leader.label {
                        format!(
                            "; shown equivalent to the fastest ({}) within {}, it changes fewer knobs",
                            leader.label,
                            pct(rules.min_improvement)
                        )
                    } else {
                        String::new()
                    };
                    format!(
                        "{} is fastest here: {}, its lower bound above the {} minimum{tie}",
                        pick.label,
                        pick.interval.map(|i| interval_text(&i)).unwrap_or_default(),
                        pct(rules.min_improvement),
                    )
                } else {
                    format!(
                        "no improvement shown: the best candidate ({}) is {shown}, not shown to beat the {} minimum",
                        leader.label,
                        pct(rules.min_improvement)
                    )
                }
            }
        },
    };
    if let Some(b) = base_report.as_mut() {
        b.speedup = b.summary.map(|_| 1.0);
    }
    CellReport {
        cell,
        cell_label,
        bucket: String::new(),
        baseline_state: base_state,
        baseline: base_report,
        winner,
        decision,
        threshold,
        eligible,
        rejected,
        notes,
        cell_index: None,
    }
}

/// How `c` compares with `leader` directly, within hosts: the log of its
/// speed relative to the leader's (0 = as fast, < 0 behind) with its
/// uncertainty. The baseline is out of it: its noise says nothing about
/// whether two candidates differ. `None` with fewer than two runs a side.
fn against_leader(leader: &ConfigReport, c: &ConfigReport) -> Option<Estimate> {
    interval::estimate_units(
        &leader.runs,
        &c.runs,
        leader.samples_as_runs || c.samples_as_runs,
    )
}

/// Whether a config compared with the leader (`relative`, see
/// [`against_leader`]) is shown equivalent to it: the interval of their
/// ratio lies above 1 / (1 + `min_improvement`), so it is at most that
/// much slower.
fn equivalent(relative: &Estimate, rules: &Rules) -> bool {
    relative.log_bounds(CONFIDENCE).0 > -rules.tau()
}

/// Among the candidates whose own lower bound clears the minimum and that
/// are shown equivalent to the leader (compared with it directly), the one
/// nearest the default, then by label.
fn pick_among_ties<'a>(
    eligible: &'a [ConfigReport],
    leader: &'a ConfigReport,
    rules: &Rules,
) -> &'a ConfigReport {
    eligible
        .iter()
        .filter(|c| {
            c.estimate
                .is_some_and(|e| e.log_bounds(CONFIDENCE).0 > rules.tau())
                && against_leader(leader, c).is_some_and(|r| equivalent(&r, rules))
        })
        .min_by(|a, b| a.order.cmp(&b.order))
        .unwrap_or(leader)
}

/// A speedup with its interval and the runs behind it:
/// `1.08× [1.05, 1.11] 95% CI, n=24 vs 60 runs`.
pub fn interval_text(i: &Interval) -> String {
    format!(
        "{:.3}× [{:.3}, {:.3}] {:.0}% CI, n={} vs {} runs{}",
        i.speedup,
        i.low,
        i.high,
        i.confidence * 100.0,
        i.runs,
        i.reference_runs,
        if i.samples_as_runs {
            " (a single run's samples taken as runs: run-to-run variation unknown)"
        } else {
            ""
        }
    )
}

/// The first `selection.limits` bound a config's successful sweep attempts
/// break, judged on the median of the metric's samples pooled over the
/// class's hosts; a metric with no sample cannot be shown to keep its
/// bound, and counts as broken.
fn limit_broken(attempts: &[&AttemptRecord], rules: &Rules) -> Option<String> {
    for (metric, limit) in &rules.limits {
        // `median 76.3 us … max 60 us`; a unit-less metric shows none.
        let unit = rules
            .units
            .get(metric)
            .filter(|u| !u.is_empty())
            .map(|u| format!(" {u}"))
            .unwrap_or_default();
        let samples: Vec<f64> = samples_by_host(attempts, metric)
            .into_values()
            .flatten()
            .collect();
        let Some(median) = crate::stats::median(&samples) else {
            return Some(format!(
                "{metric}: no sample recorded, so its limit cannot be checked"
            ));
        };
        if let Some(why) = limit.broken_by(median) {
            return Some(format!(
                "{metric}: median {}{unit} over {} samples, {why}{unit}",
                short_number(median),
                samples.len()
            ));
        }
    }
    None
}

/// The summaries of every metric but `objective` that `attempts` recorded.
fn secondary_metrics(attempts: &[&AttemptRecord], objective: &str) -> BTreeMap<String, Summary> {
    let mut names: Vec<&str> = attempts
        .iter()
        .filter(|a| a.status == AttemptStatus::Ok)
        .flat_map(|a| a.metrics.keys().map(String::as_str))
        .filter(|m| *m != objective)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .filter_map(|m| {
            let samples: Vec<f64> = samples_by_host(attempts, m)
                .into_values()
                .flatten()
                .collect();
            Some((m.to_string(), Summary::of(&samples)?))
        })
        .collect()
}

/// A measured value in a sentence: at most 3 decimals, no trailing zeros.
fn short_number(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn samples_by_host(attempts: &[&AttemptRecord], objective: &str) -> BTreeMap<String, Vec<f64>> {
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for a in attempts.iter().filter(|a| a.status == AttemptStatus::Ok) {
        if let Some(samples) = a.metrics.get(objective) {
            match out.get_mut(a.host.as_str()) {
                Some(v) => v.extend(samples.iter().copied()),
                None => {
                    out.insert(a.host.to_string(), samples.clone());
                }
            }
        }
    }
    out
}

/// The baseline's samples and runs by host, for comparing a candidate.
struct BaseSide<'a> {
    samples: &'a BTreeMap<String, Vec<f64>>,
    runs: &'a BTreeMap<String, Vec<f64>>,
    samples_as_runs: bool,
    /// Its pooled samples number at least `selection.min_samples`.
    known: bool,
}

/// The units an interval reads, by host: one value per successful run with
/// the metric (the log of the run's median, oriented so that larger is
/// better), or, for a config with a single run, one per sample of it
/// (`true`; [`interval::units`]).
fn runs_by_host(
    attempts: &[&AttemptRecord],
    metric: &str,
    higher: bool,
) -> (BTreeMap<String, Vec<f64>>, bool) {
    let mut runs: BTreeMap<String, Vec<Vec<f64>>> = BTreeMap::new();
    for a in attempts.iter().filter(|a| a.status == AttemptStatus::Ok) {
        if let Some(s) = a.metrics.get(metric).filter(|s| !s.is_empty()) {
            runs.entry(a.host.to_string()).or_default().push(s.clone());
        }
    }
    interval::units(&runs, higher)
}

fn config_report(
    attempts: &[&AttemptRecord],
    objective: &str,
    reference: Option<(&AttemptRecord, Option<&crate::gate::ToleranceSpec>)>,
    base: Option<&BaseSide>,
    higher: bool,
    min_samples: usize,
) -> ConfigReport {
    let first = attempts[0];
    let mut attempts = attempts.to_vec();
    attempts.sort_by_key(|a| a.repeat);
    let by_host = samples_by_host(&attempts, objective);
    let (runs, samples_as_runs) = runs_by_host(&attempts, objective, higher);
    let repeats_ended = attempts
        .iter()
        .map(|a| a.repeat)
        .collect::<HashSet<u32>>()
        .len();
    let samples: Vec<f64> = by_host.values().flatten().copied().collect();
    let summary = Summary::of(&samples);
    let mut rejection = attempts.iter().find_map(|a| {
        (a.status == AttemptStatus::Failed).then(|| {
            let f = a.failure.clone();
            let cause = f
                .as_ref()
                .map(|f| f.detail.clone())
                .unwrap_or_else(|| "failed".to_string());
            Rejection {
                class: f.as_ref().map(|f| f.class).unwrap_or(FailureClass::Crash),
                detail: format!("{cause} (repeat {}, host {})", a.repeat, a.host),
                cause,
                log: a.stderr_head.to_string(),
            }
        })
    });
    if rejection.is_none()
        && !first.is_baseline
        && let Some((base, tolerance)) = reference
    {
        rejection = attempts
            .iter()
            .filter(|a| a.status == AttemptStatus::Ok)
            .find_map(|a| {
                crate::gate::compare_outputs(base, a, tolerance)
                    .err()
                    .map(|why| Rejection {
                        class: FailureClass::OutputChanged,
                        detail: format!("{why} (repeat {}, host {})", a.repeat, a.host),
                        cause: why,
                        log: String::new(),
                    })
            });
    }
    let comparison = base.and_then(|b| compare(b.samples, &by_host, higher, min_samples));
    // Nothing is decided on fewer than `min_samples` samples a side.
    let enough = summary.is_some_and(|s| s.n >= min_samples) && base.is_some_and(|b| b.known);
    let estimate = base.filter(|_| enough).and_then(|b| {
        interval::estimate_units(b.runs, &runs, b.samples_as_runs || samples_as_runs)
    });
    let knobs_changed = knobs_changed(first);
    ConfigReport {
        label: first.config_label.to_string(),
        config: (*first.config).clone(),
        knobs_changed,
        trials: attempts.len(),
        hosts: by_host.len(),
        relative_spread: summary
            .filter(|s| s.n >= min_samples)
            .map(|s| s.relative_spread()),
        summary,
        speedup: estimate
            .map(|e| e.log.exp())
            .or(comparison.map(|c| c.speedup)),
        combined_spread: comparison.and_then(|c| c.spread),
        interval: estimate.map(|e| e.interval(CONFIDENCE)),
        rejection,
        metrics: secondary_metrics(&attempts, objective),
        order: (knobs_changed as u64, first.config_label.to_string()),
        by_host,
        runs,
        samples_as_runs,
        estimate,
        repeats_ended,
        min_samples,
    }
}

fn knobs_changed(a: &AttemptRecord) -> usize {
    if a.is_baseline || a.config_label == "baseline" {
        0
    } else {
        a.config_label.split(' ').filter(|s| !s.is_empty()).count()
    }
}

/// One config's standing over the cells of a bucket.
struct Standing<'a> {
    report: &'a ConfigReport,
    config_index: u64,
    /// (cell label, its estimate against the baseline) per cell.
    cells: Vec<(String, Estimate)>,
    /// Its report at each cell of the bucket, in the cells' order.
    at_cells: Vec<&'a ConfigReport>,
    /// Over the bucket: the mean of the cells' log speedups.
    est: Estimate,
    geo: f64,
}

impl Standing<'_> {
    fn bounds(&self) -> (f64, f64) {
        self.est.log_bounds(CONFIDENCE)
    }

    /// Fewest sweep runs at any cell of the bucket.
    fn runs(&self) -> usize {
        self.at_cells
            .iter()
            .map(|c| c.repeats_ended)
            .min()
            .unwrap_or(0)
    }

    /// The cell where it is shown slower than the baseline (its interval
    /// lies below 1), the slowest such: "no harm anywhere".
    fn harm(&self) -> Option<(String, f64)> {
        self.cells
            .iter()
            .filter(|(_, e)| e.log_bounds(CONFIDENCE).1 < 0.0)
            .min_by(|a, b| a.1.log.total_cmp(&b.1.log))
            .map(|(cell, e)| (cell.clone(), e.log.exp()))
    }

    /// It compared with `leader` directly at every cell, merged over the
    /// bucket. `None` when a cell has too few runs on a side.
    fn against(&self, leader: &Standing) -> Option<Estimate> {
        let per: Option<Vec<Estimate>> = leader
            .at_cells
            .iter()
            .zip(&self.at_cells)
            .map(|(l, c)| against_leader(l, c))
            .collect();
        Estimate::mean(&per?)
    }
}

/// Where a bucket's intervals cannot decide yet, the configs that need
/// more runs (racing): a config whose interval straddles the minimum
/// improvement and that could still matter (no winner yet, or it could
/// match or beat the leader), and the leader with any config whose
/// comparison with it is unresolved (it might be faster, or the tie rule
/// might pick it but equivalence is not shown). Clearly beaten configs
/// get no more. At most `RACE_WIDTH` configs per round, those with the
/// highest upper bounds first; configs at `max_repeats` runs are done.
fn racing(standings: &[Standing], winners: &[&Standing], rules: &Rules) -> Option<Racing> {
    let tau = rules.tau();
    let cap = rules.max_repeats as usize;
    let leader = winners.first();
    // Indices into `standings`, with why.
    let mut want: Vec<(usize, &'static str)> = Vec::new();
    let mut add = |i: usize, why: &'static str| {
        if standings[i].runs() < cap && !want.iter().any(|(w, _)| *w == i) {
            want.push((i, why));
        }
    };
    let mut leader_too = false;
    for (i, s) in standings.iter().enumerate() {
        if s.harm().is_some() {
            continue;
        }
        let (lo, hi) = s.bounds();
        // A config whose estimate is below half the minimum is unlikely to
        // win (a true win of twice the minimum lands there about 1 time in
        // 100 at the sweep's precision): not worth more runs to pin down.
        let straddles = lo <= tau && tau < hi && s.est.log > tau / 2.0;
        match leader {
            None => {
                if straddles {
                    add(i, "its interval straddles the minimum");
                }
            }
            Some(l) if l.report.label == s.report.label => {}
            Some(l) => {
                let Some(rel) = s.against(l) else {
                    continue;
                };
                let (rlo, rhi) = rel.log_bounds(CONFIDENCE);
                let resolved = if s.report.order < l.report.order {
                    // The tie rule could pick it: settled when it is shown
                    // equivalent (and a winner), shown more than the
                    // minimum slower, or shown not to beat the minimum.
                    (rlo > -tau && lo > tau) || rhi < -tau || hi <= tau
                } else {
                    // It could only take the lead: settled when shown
                    // slower than the leader, or equivalent to it.
                    rhi < 0.0 || (rlo > -tau && rhi < tau)
                };
                if !resolved {
                    add(
                        i,
                        if straddles {
                            "its interval straddles the minimum"
                        } else {
                            "it is too close to the leader to call"
                        },
                    );
                    leader_too = true;
                }
            }
        }
    }
    let leader_index = leader.and_then(|l| {
        standings
            .iter()
            .position(|s| s.report.label == l.report.label)
    });
    if leader_too && let Some(li) = leader_index {
        add(li, "the leader, against a close contender");
    }
    if want.is_empty() {
        return None;
    }
    // Those with the highest upper bounds first; the leader stays in when
    // it is raced against a contender.
    want.sort_by(|a, b| {
        standings[b.0]
            .bounds()
            .1
            .total_cmp(&standings[a.0].bounds().1)
    });
    if let Some(li) = leader_index
        && let Some(p) = want.iter().position(|w| w.0 == li)
        && p >= RACE_WIDTH
    {
        let x = want.remove(p);
        want.insert(0, x);
    }
    want.truncate(RACE_WIDTH);
    let least = want
        .iter()
        .map(|w| standings[w.0].runs())
        .min()
        .unwrap_or(0);
    // Grow by `repeats` runs or half again, whichever is more.
    let runs = (least + (rules.repeats as usize).max(least.div_ceil(2))).min(cap);
    Some(Racing {
        configs: want
            .iter()
            .map(|(i, _)| {
                (
                    standings[*i].report.label.clone(),
                    standings[*i].config_index,
                )
            })
            .collect(),
        runs: runs as u32,
        why: want
            .iter()
            .map(|(i, why)| format!("{}: {why}", standings[*i].report.label))
            .collect(),
    })
}

/// Configs raced at once in a bucket (besides the baseline).
const RACE_WIDTH: usize = 3;

fn decide_buckets(
    spec: &FrozenSpec,
    cells: &BTreeMap<u32, BTreeMap<u64, Group>>,
    reports: &[CellReport],
    objective: &str,
    rules: &Rules,
    plans: &[&PlanRecord],
) -> (Vec<BucketReport>, bool) {
    let mut trials_left = false;
    let mut order: Vec<String> = Vec::new();
    let mut members: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in reports.iter().enumerate() {
        if !order.contains(&r.bucket) {
            order.push(r.bucket.clone());
        }
        members.entry(r.bucket.clone()).or_default().push(i);
    }
    let empty = BTreeMap::new();
    let buckets = order
        .iter()
        .map(|key| {
            let idx = &members[key];
            let bucket_reports: Vec<&CellReport> = idx.iter().map(|i| &reports[*i]).collect();
            let bucket_cells: Vec<&BTreeMap<u64, Group>> = idx
                .iter()
                .map(|i| {
                    reports[*i]
                        .cell_index
                        .and_then(|c| cells.get(&c))
                        .unwrap_or(&empty)
                })
                .collect();
            let mut out = decide_bucket(spec, &bucket_reports, &bucket_cells, objective, rules);
            // No verdict on incomplete evidence: every planned trial of the
            // bucket's cells must have ended.
            if let Some(why) = unfinished(&bucket_reports, &bucket_cells, plans) {
                trials_left = true;
                if out.level == Level::Verdict {
                    out.level = Level::Draft;
                    out.level_reason = why;
                } else {
                    out.level_reason = format!("{}; {why}", out.level_reason);
                }
            }
            out
        })
        .collect();
    (buckets, trials_left)
}

/// What keeps a bucket's evidence incomplete, if anything: cells whose
/// plan is not recorded or not chosen yet, and planned sweep trials that
/// have not ended. A trial has ended when it has a terminal attempt (done
/// or failed), or when a stated rule skips it: a config that failed at a
/// cell runs no more repeats there; a baseline whose first repeat failed
/// stops its cell.
fn unfinished(
    reports: &[&CellReport],
    cells: &[&BTreeMap<u64, Group>],
    plans: &[&PlanRecord],
) -> Option<String> {
    if plans.is_empty() {
        return Some(
            "the ledger holds no plan for this host class (launched by an older tunectl, or only with --shard): launch again to record it".to_string(),
        );
    }
    let mut missing_plan = Vec::new();
    let mut searching = Vec::new();
    let mut pending: Vec<(String, u64)> = Vec::new();
    let (mut left, mut planned) = (0u64, 0u64);
    for (r, groups) in reports.iter().zip(cells) {
        let plan = plans.iter().find(|p| match r.cell_index {
            Some(i) => p.cell_index == i,
            None => p.cell_label == r.cell_label,
        });
        let Some(plan) = plan else {
            missing_plan.push(r.cell_label.clone());
            continue;
        };
        let Some(configs) = plan.configs else {
            searching.push(r.cell_label.clone());
            continue;
        };
        let repeats = u64::from(plan.repeats);
        planned += configs * repeats;
        // The first run and its re-run (repeat 1) both failed.
        let baseline_failed = |r: u32| {
            groups.values().any(|g| {
                g.sweep
                    .iter()
                    .any(|a| a.is_baseline && a.repeat == r && a.status == AttemptStatus::Failed)
            })
        };
        let baseline_stopped = baseline_failed(0) && baseline_failed(1);
        if baseline_stopped {
            continue;
        }
        let mut seen = 0u64;
        let mut here = 0u64;
        for g in groups.values().filter(|g| !g.sweep.is_empty()) {
            seen += 1;
            let failures = g
                .sweep
                .iter()
                .filter(|a| a.status == AttemptStatus::Failed)
                .count();
            let baseline = g.sweep.iter().any(|a| a.is_baseline);
            if failures >= if baseline { 2 } else { 1 } {
                continue;
            }
            let ended: HashSet<u32> = g.sweep.iter().map(|a| a.repeat).collect();
            here += repeats.saturating_sub(ended.len() as u64);
        }
        here += configs.saturating_sub(seen) * repeats;
        if here > 0 {
            pending.push((r.cell_label.clone(), here));
            left += here;
        }
    }
    let mut parts = Vec::new();
    if left > 0 {
        parts.push(format!(
            "{left} of {planned} planned trials have not ended ({})",
            pending
                .iter()
                .map(|(c, n)| format!("{c}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !searching.is_empty() {
        parts.push(format!(
            "the search has not chosen its finalists at {}",
            searching.join(", ")
        ));
    }
    if !missing_plan.is_empty() {
        parts.push(format!(
            "no plan is recorded for {}: launch again to record it",
            missing_plan.join(", ")
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn decide_bucket(
    spec: &FrozenSpec,
    reports: &[&CellReport],
    cells: &[&BTreeMap<u64, Group>],
    objective: &str,
    rules: &Rules,
) -> BucketReport {
    let b = crate::report::buckets::bucket_of(spec, &reports[0].cell);
    let baseline_config = reports[0]
        .baseline
        .as_ref()
        .map(|r| r.config.clone())
        .unwrap_or_else(|| spec_baseline(spec));
    let mut rejected: Vec<ConfigReport> = Vec::new();
    let mut rejected_labels: HashSet<&str> = HashSet::new();
    for r in reports {
        for x in &r.rejected {
            if rejected_labels.insert(x.label.as_str()) {
                let mut x = x.clone();
                if let Some(rej) = x.rejection.as_mut() {
                    rej.detail = format!("{} at {}", rej.detail, r.cell_label);
                }
                rejected.push(x);
            }
        }
    }
    let mut out = BucketReport {
        key: b.key,
        label: b.label,
        bounds: b.bounds,
        cells: reports.iter().map(|r| r.cell_label.clone()).collect(),
        config: baseline_config.clone(),
        winner: None,
        decision: String::new(),
        level: Level::Draft,
        level_reason: String::new(),
        threshold: None,
        per_cell: reports
            .iter()
            .map(|r| BucketCell {
                cell_label: r.cell_label.clone(),
                baseline: r.baseline.clone(),
                winner: None,
            })
            .collect(),
        refusals: Vec::new(),
        rejected,
        interval: None,
        racing: None,
        confirm_runs: None,
    };

    // No harm anywhere: every cell needs a working, measured baseline.
    if let Some(r) = reports.iter().find(|r| {
        r.baseline_state != BaselineState::Ok
            || r.baseline.as_ref().is_none_or(|b| b.summary.is_none())
    }) {
        let why = match r.notes.iter().find(|n| n.is_drop()) {
            Some(drop) => drop.to_string(),
            None => r.decision.clone(),
        };
        out.decision = format!("baseline kept: {why} at {}", r.cell_label);
        // A baseline that fails reproducibly is an error of the study, not
        // a verdict on its candidates.
        out.level = Level::Draft;
        out.level_reason = if r.baseline_state == BaselineState::Failed {
            "the baseline fails here reproducibly (its first run and its re-run): an error of the study, not a verdict; fix it and launch again"
        } else {
            "the baseline is not measured at every cell yet"
        }
        .to_string();
        return out;
    }
    // A cell given up on (its host would not settle) before its sweep was
    // complete: nothing is known well enough there to ship a change.
    if let Some(r) = reports.iter().find(|r| {
        r.notes.iter().any(CellNote::is_drop)
            && r.baseline
                .as_ref()
                .is_some_and(|b| b.trials < rules.repeats as usize)
    }) {
        let why = r
            .notes
            .iter()
            .find(|n| n.is_drop())
            .map(CellNote::to_string)
            .unwrap_or_default();
        out.decision = format!("baseline kept: cell {} was {why}", r.cell_label);
        out.level = Level::Draft;
        out.level_reason = "a cell of the bucket was dropped before its sweep finished; launch again when the host is stable".to_string();
        return out;
    }
    // Drops matter while their cell is unfinished; a later launch that
    // measured it fully makes them history.
    let dropped: Vec<String> = reports
        .iter()
        .filter(|r| {
            r.baseline
                .as_ref()
                .is_none_or(|b| b.trials < rules.repeats as usize)
        })
        .flat_map(|r| {
            r.notes
                .iter()
                .filter(|n| n.is_drop())
                .map(move |n| format!("{}: {n}", r.cell_label))
        })
        .collect();

    // Candidates eligible at every cell of the bucket. (Per cell, the
    // first eligible report of each label, as a search in order finds it.)
    let eligible_by_label: Vec<HashMap<&str, &ConfigReport>> = reports
        .iter()
        .map(|r| {
            let mut m = HashMap::with_capacity(r.eligible.len());
            for c in &r.eligible {
                m.entry(c.label.as_str()).or_insert(c);
            }
            m
        })
        .collect();
    // The first config of the bucket's first cell whose first sweep attempt
    // carries the label.
    let mut index_by_label: HashMap<&str, u64> = HashMap::new();
    if let Some(first_cell) = cells.first() {
        for (i, g) in first_cell.iter() {
            if let Some(a) = g.sweep.first() {
                index_by_label.entry(a.config_label.as_str()).or_insert(*i);
            }
        }
    }
    let mut standings: Vec<Standing> = Vec::new();
    let mut incomplete = 0;
    // Candidates measured everywhere, but with too few runs somewhere for
    // an interval of their speedup.
    let mut too_few = 0;
    if let Some(first) = reports.first() {
        for cand in &first.eligible {
            let mut per = Vec::new();
            let mut at_cells = Vec::new();
            let mut complete = true;
            let mut unknown = false;
            for (r, by_label) in reports.iter().zip(&eligible_by_label) {
                match by_label.get(cand.label.as_str()) {
                    Some(c) => match (c.speedup, c.estimate) {
                        (Some(_), Some(e)) => {
                            per.push((r.cell_label.clone(), e));
                            at_cells.push(*c);
                        }
                        (Some(_), None) => unknown = true,
                        _ => complete = false,
                    },
                    None => complete = false,
                }
            }
            // Rejected anywhere in the bucket: never a bucket candidate.
            if rejected_labels.contains(cand.label.as_str()) {
                continue;
            }
            if complete && unknown {
                too_few += 1;
                continue;
            }
            if !complete {
                incomplete += 1;
                continue;
            }
            let Some(est) = Estimate::mean(&per.iter().map(|p| p.1).collect::<Vec<_>>()) else {
                continue;
            };
            let config_index = index_by_label
                .get(cand.label.as_str())
                .copied()
                .unwrap_or(0);
            standings.push(Standing {
                report: cand,
                config_index,
                cells: per,
                at_cells,
                geo: est.log.exp(),
                est,
            });
        }
    }
    standings.sort_by(|a, b| {
        b.geo
            .total_cmp(&a.geo)
            .then_with(|| a.report.order.cmp(&b.report.order))
    });
    let tau = rules.tau();
    let winners: Vec<&Standing> = standings
        .iter()
        .filter(|s| s.bounds().0 > tau && s.harm().is_none())
        .collect();
    for s in standings.iter().filter(|s| s.bounds().0 > tau) {
        if let Some((cell, sp)) = s.harm() {
            out.refusals.push(Refusal {
                config_label: s.report.label.clone(),
                cell_label: cell.clone(),
                speedup: Some(sp),
                reason: format!(
                    "{:.2}× overall but shown slower than the baseline at {cell} ({:.3}×, its interval below 1): no harm anywhere",
                    s.geo, sp
                ),
            });
        }
    }
    let race = racing(&standings, &winners, rules);
    let racing_reason = race.as_ref().map(|r| {
        format!(
            "racing: {} {} too close to call, measured up to {} runs at every cell (measurement.max_repeats = {}): {}",
            r.configs.len(),
            if r.configs.len() == 1 {
                "config is"
            } else {
                "configs are"
            },
            r.runs,
            rules.max_repeats,
            r.why.join("; ")
        )
    });
    out.racing = race;
    let Some(leader) = winners.first() else {
        let untried = standings.is_empty()
            && incomplete == 0
            && reports
                .iter()
                .all(|r| r.eligible.is_empty() && r.rejected.is_empty());
        let best = standings
            .iter()
            .find(|s| s.harm().is_none())
            .or(standings.first());
        out.threshold = best.map(|_| rules.min_improvement);
        out.interval = best.map(|s| s.est.interval(CONFIDENCE));
        out.decision = match best {
            _ if !out.refusals.is_empty() => format!(
                "baseline kept: {} refused by {} ({})",
                out.refusals[0].config_label, out.refusals[0].cell_label, out.refusals[0].reason
            ),
            Some(best) if out.racing.is_some() => format!(
                "baseline kept for now: the best, {}, is {} over the bucket, not yet shown to beat the {} minimum: measuring more",
                best.report.label,
                interval_text(&best.est.interval(CONFIDENCE)),
                pct(rules.min_improvement)
            ),
            Some(best) if best.bounds().1 > tau => format!(
                "baseline kept: the best, {}, is {} over the bucket after {} runs at every cell: not shown to beat the {} minimum (measurement.max_repeats = {} reached)",
                best.report.label,
                interval_text(&best.est.interval(CONFIDENCE)),
                best.runs(),
                pct(rules.min_improvement),
                rules.max_repeats
            ),
            Some(best) => format!(
                "baseline kept: no improvement (the best, {}, is {} over the bucket: shown below the {} minimum)",
                best.report.label,
                interval_text(&best.est.interval(CONFIDENCE)),
                pct(rules.min_improvement)
            ),
            None if too_few > 0 => format!(
                "baseline kept for now: {too_few} {} fewer than two runs or selection.min_samples = {} samples at some cell (no interval of the speedup)",
                if too_few == 1 {
                    "candidate has"
                } else {
                    "candidates have"
                },
                rules.min_samples
            ),
            None if incomplete > 0 => format!(
                "baseline kept for now: {incomplete} {} not measured at every cell yet",
                if incomplete == 1 {
                    "candidate is"
                } else {
                    "candidates are"
                }
            ),
            None if untried => {
                "baseline kept for now: no candidate has been measured yet".to_string()
            }
            None => "baseline kept: no candidate passed the gate at every cell".to_string(),
        };
        let (level, why) = if untried {
            (
                Level::Draft,
                "no candidate has been measured yet".to_string(),
            )
        } else if too_few > 0 {
            (
                Level::Draft,
                format!(
                    "{too_few} candidates have fewer than two runs or selection.min_samples = {} samples at some cell: no interval of their speedup is known",
                    rules.min_samples
                ),
            )
        } else if incomplete > 0 {
            (
                Level::Draft,
                format!("{incomplete} candidates are not measured at every cell yet"),
            )
        } else if !dropped.is_empty() {
            (
                Level::Draft,
                format!("cells were dropped: {}", dropped.join("; ")),
            )
        } else if let Some(why) = racing_reason {
            (Level::Draft, why)
        } else {
            (
                Level::Verdict,
                "every eligible candidate was measured at every cell".to_string(),
            )
        };
        out.level = level;
        out.level_reason = why;
        return out;
    };
    // Ties: shown equivalent to the leader, compared with it directly at
    // every cell; fewest knobs changed, then label.
    let pick = winners
        .iter()
        .filter(|s| s.against(leader).is_some_and(|r| equivalent(&r, rules)))
        .min_by(|a, b| a.report.order.cmp(&b.report.order))
        .copied()
        .unwrap_or(leader);
    let tie = if pick.report.label != leader.report.label {
        format!(
            "; shown equivalent to the fastest ({}) within {}, it changes fewer knobs",
            leader.report.label,
            pct(rules.min_improvement)
        )
    } else {
        String::new()
    };
    out.threshold = Some(rules.min_improvement);
    out.interval = Some(pick.est.interval(CONFIDENCE));
    for (pc, r) in out.per_cell.iter_mut().zip(reports) {
        pc.winner = r
            .eligible
            .iter()
            .find(|c| c.label == pick.report.label)
            .cloned();
    }
    let mut winner = BucketWinner {
        label: pick.report.label.clone(),
        config: pick.report.config.clone(),
        knobs_changed: pick.report.knobs_changed,
        speedup: pick.geo,
        min_cell_speedup: pick
            .cells
            .iter()
            .map(|c| c.1.log.exp())
            .fold(f64::INFINITY, f64::min),
        interval: pick.est.interval(CONFIDENCE),
        confirmation: None,
    };
    let sweep_line = format!(
        "{} over the bucket (geometric mean; lowest cell {:.2}×), its lower bound above the {} minimum, shown slower nowhere{tie}",
        interval_text(&winner.interval),
        winner.min_cell_speedup,
        pct(rules.min_improvement)
    );
    // Racing still going: the winner may change; no round yet.
    if let Some(why) = racing_reason {
        out.decision = format!("{} wins for now: {sweep_line}", pick.report.label);
        out.level = Level::Draft;
        out.level_reason = why;
        out.config = winner.config.clone();
        out.winner = Some(winner);
        return out;
    }
    let rounds = confirm_size(pick, rules);
    out.confirm_runs = (rules.confirm_repeats > 0).then_some(rounds);
    let confirmation = confirm(pick, cells, objective, rules, rounds);
    let min_trials = reports
        .iter()
        .flat_map(|r| {
            [
                r.baseline.as_ref().map(|b| b.trials).unwrap_or(0),
                r.eligible
                    .iter()
                    .find(|c| c.label == pick.report.label)
                    .map(|c| c.trials)
                    .unwrap_or(0),
            ]
        })
        .min()
        .unwrap_or(0);
    let min_hosts = pick
        .report
        .hosts
        .min(reports[0].baseline.as_ref().map(|b| b.hosts).unwrap_or(0));
    match confirmation {
        Some(c) if c.incomplete => {
            out.decision = format!("{} wins: {sweep_line}", pick.report.label);
            out.level = Level::Draft;
            out.level_reason = format!(
                "awaiting the final interleaved round against the baseline: {} of {rounds} runs a side at every cell measured",
                c.runs_done
            );
            winner.confirmation = Some(c);
            out.config = winner.config.clone();
            out.winner = Some(winner);
        }
        Some(c) if !c.confirmed && c.failure.is_some() => {
            let failure = c
                .failure
                .as_ref()
                .map(RoundFailure::to_string)
                .unwrap_or_default();
            out.decision = format!(
                "baseline kept: {} failed its final round against the baseline: {failure}",
                pick.report.label,
            );
            for pc in out.per_cell.iter_mut() {
                pc.winner = None;
            }
            out.level = Level::Verdict;
            out.level_reason = "the sweep's winner failed in the confirmation round".to_string();
            out.refusals.push(Refusal {
                config_label: pick.report.label.clone(),
                cell_label: "(confirmation round)".to_string(),
                speedup: None,
                reason: failure,
            });
            winner.confirmation = Some(c);
            return out;
        }
        Some(c) if !c.confirmed => {
            let measured = c
                .interval
                .map(|i| interval_text(&i))
                .unwrap_or_else(|| format!("{:.3}×", c.speedup));
            let why = if c.harmed.is_some() {
                format!(
                    "shown slower than the baseline at {}",
                    c.harmed.clone().unwrap_or_default()
                )
            } else {
                format!("its lower bound not above the {} minimum", pct(c.threshold))
            };
            out.decision = format!(
                "baseline kept: {} looked {:.2}× faster in the sweep but the final interleaved round measured {measured}, {why}",
                pick.report.label, pick.geo,
            );
            for pc in out.per_cell.iter_mut() {
                pc.winner = None;
            }
            out.level = Level::Verdict;
            out.level_reason =
                "the sweep's winner was not confirmed against the baseline".to_string();
            winner.confirmation = Some(c);
            out.refusals.push(Refusal {
                config_label: winner.label.clone(),
                cell_label: "(confirmation round)".to_string(),
                speedup: Some(
                    winner
                        .confirmation
                        .as_ref()
                        .map(|c| c.speedup)
                        .unwrap_or(1.0),
                ),
                reason: "not confirmed in the final interleaved round".to_string(),
            });
            return out;
        }
        c => {
            out.decision = format!("{} wins: {sweep_line}", pick.report.label);
            let (level, why) = match &c {
                _ if rules.confirm_repeats == 0 => (
                    Level::Draft,
                    "no confirmation round (measurement.confirm_repeats is 0)".to_string(),
                ),
                None => (
                    Level::Draft,
                    "awaiting the final interleaved round against the baseline".to_string(),
                ),
                Some(_) if min_trials < rules.repeats as usize => (
                    Level::Draft,
                    format!(
                        "only {min_trials} of {} repeats at some cell",
                        rules.repeats
                    ),
                ),
                Some(_) if (min_hosts as u32) < rules.min_hosts => (
                    Level::Draft,
                    format!(
                        "measured on {min_hosts} hosts, fewer than selection.min_hosts = {}",
                        rules.min_hosts
                    ),
                ),
                Some(c) => (
                    Level::Verdict,
                    format!(
                        "confirmed in the final interleaved round: {}",
                        c.interval
                            .map(|i| interval_text(&i))
                            .unwrap_or_else(|| format!("{:.3}×", c.speedup)),
                    ),
                ),
            };
            out.level = level;
            out.level_reason = why;
            winner.confirmation = c;
            out.config = winner.config.clone();
            out.winner = Some(winner);
        }
    }
    out
}

/// The attempts of repeats below `rounds`, in repeat order.
fn first_runs<'a>(attempts: &[&'a AttemptRecord], rounds: u32) -> Vec<&'a AttemptRecord> {
    let mut v: Vec<&AttemptRecord> = attempts
        .iter()
        .copied()
        .filter(|a| a.repeat < rounds)
        .collect();
    v.sort_by_key(|a| a.repeat);
    v
}

/// Runs a side at every cell that the final round needs for a win the size
/// the sweep suggests to clear the minimum with 95 % probability, given the
/// run-to-run noise the sweep showed: at least
/// `measurement.confirm_repeats`, at most `measurement.max_repeats`. The
/// size planned for is halfway between the sweep's estimate and its lower
/// bound: the estimate of the best of many configs, read when its interval
/// first cleared the minimum, runs high (the winner's curse), and a round
/// sized on it alone would miss real wins.
fn confirm_size(pick: &Standing, rules: &Rules) -> u32 {
    let sds: Vec<f64> = pick
        .cells
        .iter()
        .map(|(_, e)| interval::run_sd(e))
        .filter(|x| x.is_finite())
        .collect();
    let sd = if sds.is_empty() {
        f64::INFINITY
    } else {
        sds.iter().sum::<f64>() / sds.len() as f64
    };
    let planned = (pick.est.log + pick.bounds().0) / 2.0;
    let needed = interval::runs_needed(
        planned,
        rules.tau(),
        sd,
        pick.cells.len(),
        CONFIDENCE,
        CONFIRM_POWER,
    );
    needed
        .max(rules.confirm_repeats)
        .min(rules.max_repeats.max(rules.confirm_repeats))
}

/// The probability with which the final round is sized to confirm a win as
/// large as the sweep measured.
pub const CONFIRM_POWER: f64 = 0.95;

/// The final interleaved round of `pick` against the baseline: confirm
/// attempts at every cell of the bucket, judged like the sweep.
fn confirm(
    pick: &Standing,
    cells: &[&BTreeMap<u64, Group>],
    objective: &str,
    rules: &Rules,
    rounds: u32,
) -> Option<Confirmation> {
    let mut estimates = Vec::new();
    let mut harmed = None;
    let mut any = false;
    let mut runs_done = usize::MAX;
    let (mut all_base, mut all_win) = (Vec::new(), Vec::new());
    for groups in cells {
        let base = groups
            .values()
            .find(|g| g.sweep.iter().any(|a| a.is_baseline))?;
        let win = groups.get(&pick.config_index)?;
        if win
            .sweep
            .first()
            .is_none_or(|a| a.config_label != pick.report.label)
        {
            return None;
        }
        // A confirmation trial that fails, or whose output differs from the
        // baseline's reference output, fails the round outright.
        let reference = {
            let mut ok: Vec<&&AttemptRecord> = base
                .sweep
                .iter()
                .filter(|a| a.status == AttemptStatus::Ok)
                .collect();
            ok.sort_by_key(|a| a.repeat);
            ok.first().map(|a| **a)
        };
        for a in &win.confirm {
            let failure = if a.status == AttemptStatus::Failed {
                Some(match &a.failure {
                    Some(f) => (Some(f.class), f.detail.clone()),
                    None => (None, String::new()),
                })
            } else if a.status == AttemptStatus::Ok {
                reference.and_then(|r| {
                    crate::gate::compare_outputs(r, a, rules.tolerance.as_ref())
                        .err()
                        .map(|why| (Some(FailureClass::OutputChanged), why))
                })
            } else {
                None
            };
            if let Some((class, detail)) = failure {
                return Some(Confirmation {
                    speedup: 0.0,
                    interval: None,
                    baseline: None,
                    winner: None,
                    threshold: rules.min_improvement,
                    confirmed: false,
                    incomplete: false,
                    runs: rounds,
                    runs_done: 0,
                    harmed: None,
                    min_samples: rules.min_samples,
                    failure: Some(RoundFailure {
                        class,
                        detail,
                        repeat: a.repeat,
                        host: a.host.to_string(),
                    }),
                });
            }
        }
        // The round's first `rounds` runs a side count (a round sized
        // larger before, by other judging settings, leaves more).
        let (bc, wc) = (
            first_runs(&base.confirm, rounds),
            first_runs(&win.confirm, rounds),
        );
        any |= !bc.is_empty() || !wc.is_empty();
        let ended =
            |v: &[&AttemptRecord]| v.iter().map(|a| a.repeat).collect::<HashSet<u32>>().len();
        runs_done = runs_done.min(ended(&bc).min(ended(&wc)));
        let (b, b_single) = runs_by_host(&bc, objective, rules.higher);
        let (w, w_single) = runs_by_host(&wc, objective, rules.higher);
        all_base.extend(samples_by_host(&bc, objective).into_values().flatten());
        all_win.extend(samples_by_host(&wc, objective).into_values().flatten());
        if let Some(e) = interval::estimate_units(&b, &w, b_single || w_single) {
            if harmed.is_none() && e.log_bounds(CONFIDENCE).1 < 0.0 {
                harmed = bc.first().map(|a| a.cell_label.to_string());
            }
            estimates.push(e);
        }
    }
    if !any {
        return None;
    }
    let runs_done = if runs_done == usize::MAX {
        0
    } else {
        runs_done
    };
    let complete = runs_done >= rounds as usize && estimates.len() == cells.len();
    let est = Estimate::mean(&estimates);
    let confirmed = complete
        && harmed.is_none()
        && est.is_some_and(|e| e.log_bounds(CONFIDENCE).0 > rules.tau());
    Some(Confirmation {
        speedup: est.map(|e| e.log.exp()).unwrap_or(1.0),
        interval: est.map(|e| e.interval(CONFIDENCE)),
        baseline: Summary::of(&all_base),
        winner: Summary::of(&all_win),
        threshold: rules.min_improvement,
        confirmed,
        failure: None,
        incomplete: !complete,
        runs: rounds,
        runs_done,
        harmed: if complete { harmed } else { None },
        min_samples: rules.min_samples,
    })
}

/// The study's `metrics:`, as frozen (none in a spec without them).
fn secondary_declared(spec: &FrozenSpec) -> Vec<MetricInfo> {
    spec.json()
        .get("metrics")
        .cloned()
        .and_then(|m| serde_json::from_value::<Vec<FrozenMetric>>(m).ok())
        .unwrap_or_default()
        .iter()
        .map(MetricInfo::of)
        .collect()
}

/// The commands of the tools that the spec's class key reads.
fn spec_class_tools(spec: &FrozenSpec) -> BTreeMap<String, String> {
    let json = spec.json();
    let fields = json
        .get("class_key")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tools = json.get("tools").and_then(serde_json::Value::as_object);
    fields
        .iter()
        .filter_map(|f| f.as_str()?.strip_prefix("tool:"))
        .filter_map(|name| {
            let command = tools?.get(name)?.as_str()?;
            Some((name.to_owned(), command.to_owned()))
        })
        .collect()
}

fn spec_domains(spec: &FrozenSpec) -> serde_json::Map<String, serde_json::Value> {
    spec.knobs
        .iter()
        .map(|k| {
            (
                k.name.clone(),
                serde_json::json!({"kind": k.kind, "values": k.values}),
            )
        })
        .collect()
}

fn spec_baseline(spec: &FrozenSpec) -> serde_json::Value {
    serde_json::Value::Object(
        spec.knobs
            .iter()
            .map(|k| (k.name.clone(), k.default.clone()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The analysis with a plan that is exactly what the scan holds: every
    /// (class, cell) planned its configs seen there, `repeats` each.
    /// The fixtures below give one attempt several samples; decisions
    /// read runs (one value per attempt), so each sample becomes a run of
    /// its own here: repeat `r` with `k` samples becomes repeats
    /// `r·k .. r·k + k`.
    fn one_run_per_sample(scan: &Scan) -> Scan {
        let mut attempts = Vec::new();
        for a in &scan.attempts {
            let samples = a.metrics.get("tp").cloned().unwrap_or_default();
            let measured = matches!(a.role, RoleKind::Sweep | RoleKind::Confirm);
            if a.status != AttemptStatus::Ok || samples.len() < 2 || !measured {
                attempts.push(a.clone());
                continue;
            }
            let k = samples.len() as u32;
            for (i, x) in samples.iter().enumerate() {
                let mut b = a.clone();
                b.repeat = a.repeat * k + i as u32;
                b.trial_key = format!("{}/{i}", a.trial_key);
                b.metrics.insert("tp".to_string(), vec![*x]);
                attempts.push(b);
            }
        }
        Scan {
            attempts,
            ..scan.clone()
        }
    }

    fn analyze(study: &StudyRecord, scan: &Scan, hosts: &[HostRecord]) -> Analysis {
        let scan = &one_run_per_sample(scan);
        let repeats = study.spec.measurement.repeats;
        let mut seen: BTreeMap<(String, u32), (serde_json::Value, String, HashSet<u64>)> =
            BTreeMap::new();
        for a in scan.attempts.iter().filter(|a| a.role == RoleKind::Sweep) {
            seen.entry((a.host_class.to_string(), a.cell_index))
                .or_insert_with(|| ((*a.cell).clone(), a.cell_label.to_string(), HashSet::new()))
                .2
                .insert(a.config_index);
        }
        let plans: Vec<PlanRecord> = seen
            .into_iter()
            .map(
                |((class, cell_index), (cell, cell_label, configs))| PlanRecord {
                    schema: 1,
                    spec_hash: study.spec_hash.clone(),
                    host_class: class,
                    cell_index,
                    cell,
                    cell_label,
                    configs: Some(configs.len() as u64),
                    repeats,
                    at: String::new(),
                },
            )
            .collect();
        super::analyze_planned(study, scan, hosts, &plans)
    }
    use crate::ledger::records::{Failure, SCHEMA};
    use std::sync::Arc;

    /// The tests' frozen spec, with `extra` sections.
    fn spec(extra: serde_json::Value) -> FrozenSpec {
        let mut v = serde_json::json!({
            "objective": {"name": "tp", "unit": "x/s", "better": "higher"},
            "knobs": [{"name": "a", "kind": "int", "values": [1, 2, 3, 4], "default": 1}],
            "context": {"model": "m"},
        });
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            v.extend(extra.clone());
        }
        FrozenSpec::from_json(v).expect("spec")
    }

    fn study() -> StudyRecord {
        StudyRecord {
            schema: SCHEMA,
            tunectl_version: "t".into(),
            study_id: "s".into(),
            spec_hash: "h".into(),
            spec: spec(serde_json::json!({})),
            created_at: String::new(),
        }
    }

    /// An attempt of config `index` labelled `label`, repeat `r`, with
    /// samples and a digest; `failed` makes it a crash.
    fn attempt(
        index: u64,
        label: &str,
        r: u32,
        samples: &[f64],
        digest: &str,
        failed: bool,
    ) -> AttemptRecord {
        AttemptRecord {
            schema: SCHEMA,
            tunectl_version: "t".into(),
            study_id: "s".into(),
            spec_hash: "h".into(),
            trial_key: format!("{index}-{r}"),
            attempt_id: "a".into(),
            config: Arc::new(serde_json::json!({})),
            config_label: label.into(),
            config_index: index,
            is_baseline: label == "baseline",
            cell: Arc::new(serde_json::json!({"n": 1})),
            cell_label: "n=1".into(),
            cell_index: 0,
            repeat: r,
            role: RoleKind::Sweep,
            fidelity: None,
            host: "h1".into(),
            host_class: "hc-1".into(),
            fingerprint: "fp".into(),
            slot: 0,
            started_at: String::new(),
            finished_at: String::new(),
            duration_s: 0.0,
            run_s: None,
            warmup_runs: 0,
            status: if failed {
                AttemptStatus::Failed
            } else {
                AttemptStatus::Ok
            },
            failure: failed.then(|| Failure {
                class: FailureClass::Crash,
                detail: "exit code 3".into(),
                phase: crate::trial::Phase::Measure,
            }),
            exit: None,
            metrics: if failed {
                BTreeMap::new()
            } else {
                BTreeMap::from([("tp".to_string(), samples.to_vec())])
            },
            digest: (!failed).then(|| digest.into()),
            outputs: Arc::default(),
            output_values: BTreeMap::new(),
            command: String::new(),
            stdout_tail: String::new(),
            stderr_head: String::new(),
            lost_reason: None,
            resumed_from: None,
            pruned: None,
            stderr_tail: String::new(),
        }
    }

    fn cell(attempts: Vec<AttemptRecord>) -> CellReport {
        let scan = Scan {
            attempts,
            ..Default::default()
        };
        let a = analyze(&study(), &scan, &[]);
        a.classes[0].cells[0].clone()
    }

    /// "What to try next" reads a lower-is-better objective the right way
    /// round: the effect is best over worst in the better direction.
    #[test]
    fn next_levers_orient_a_lower_is_better_objective() {
        let mut study = study();
        study.spec = spec(serde_json::json!({
            "objective": {"name": "tp", "unit": "ms", "better": "lower"},
        }));
        let at = |index: u64, label: &str, a: i64, ms: f64| {
            let mut x = attempt(index, label, 0, &[ms, ms * 1.01, ms * 0.99], "d", false);
            x.config = Arc::new(serde_json::json!({ "a": a }));
            x
        };
        let scan = Scan {
            attempts: vec![
                at(0, "baseline", 1, 100.0),
                at(1, "a=2", 2, 50.0),
                at(2, "a=3", 3, 200.0),
            ],
            ..Default::default()
        };
        let a = analyze(&study, &scan, &[]);
        let next = &a.classes[0].next;
        let e = &next.effects[0];
        assert_eq!(
            (e.best.clone(), e.worst.clone()),
            (Some(2.into()), Some(3.into()))
        );
        assert!((e.ratio.unwrap_or(0.0) - 4.0).abs() < 1e-9, "{e:?}");
        // One pair: no spread can be known.
        assert_eq!((e.pairs, e.spread), (1, None));
        // a=2 ships: neither the largest nor the smallest value tried.
        assert!(next.edges.is_empty(), "{:?}", next.edges);
        assert_eq!(next.untried.len(), 1);
        assert_eq!(next.untried[0].values, [serde_json::json!(4)]);
        assert_eq!(next.untried[0].possible_causes, ["budget"]);

        // A launch's analysis decides the same and leaves the levers out.
        let scan = one_run_per_sample(&scan);
        let d = analyze_scoped(&study, &scan, &[], &[], Scope::Decisions, |_| true);
        let a = analyze_scoped(&study, &scan, &[], &[], Scope::Everything, |_| true);
        assert!(!a.classes[0].next.effects.is_empty());
        let json = |x: &Analysis| {
            let mut v = serde_json::to_value(x).expect("json");
            v["classes"][0]["next"] = serde_json::Value::Null;
            v
        };
        assert_eq!(json(&d), json(&a));
        assert!(d.classes[0].next.effects.is_empty());
        assert!(d.classes[0].buckets[0].winner.is_some());
    }

    #[test]
    fn gate_rejects_crashes_and_changed_outputs() {
        let c = cell(vec![
            attempt(0, "baseline", 0, &[100.0, 101.0, 99.0], "d0", false),
            attempt(1, "a=2", 0, &[150.0, 151.0, 149.0], "d1", false),
            attempt(2, "a=3", 0, &[300.0], "d0", true),
            attempt(3, "a=4", 0, &[120.0, 121.0, 119.0], "d0", false),
        ]);
        assert_eq!(c.baseline_state, BaselineState::Ok);
        let rejected: Vec<(&str, FailureClass)> = c
            .rejected
            .iter()
            .map(|r| {
                (
                    r.label.as_str(),
                    r.rejection
                        .as_ref()
                        .map(|x| x.class)
                        .unwrap_or(FailureClass::Crash),
                )
            })
            .collect();
        assert_eq!(
            rejected,
            vec![
                ("a=2", FailureClass::OutputChanged),
                ("a=3", FailureClass::Crash)
            ]
        );
        assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=4"));
        let s = c.winner.as_ref().and_then(|w| w.speedup).unwrap_or(0.0);
        assert!((s - 1.2).abs() < 1e-3, "{s}");
    }

    /// An attempt of a role this tunectl does not know is counted and set
    /// aside: it is no evidence for or against any config.
    #[test]
    fn a_pruned_attempt_is_never_a_sample() {
        // Only rungs are pruned; a ledger that says otherwise (copied,
        // forged) must not change a verdict, whatever numbers it carries.
        let base = vec![
            attempt(0, "baseline", 0, &[100.0, 101.0, 99.0], "d", false),
            attempt(1, "a=2", 0, &[150.0, 151.0, 149.0], "d", false),
        ];
        let mut with = base.clone();
        for (index, label) in [(2, "a=3"), (1, "a=2")] {
            let mut p = attempt(index, label, 7, &[9000.0, 9001.0, 8999.0], "d", false);
            p.status = AttemptStatus::Pruned;
            with.push(p);
        }
        // What was measured and decided; a record not counted may still
        // leave its trial pending (never a reason to ship more).
        let judge = |attempts: Vec<AttemptRecord>| {
            let scan = Scan {
                attempts,
                ..Default::default()
            };
            let a = serde_json::to_value(analyze(&study(), &scan, &[])).expect("json");
            let class = &a["classes"][0];
            let cell = &class["cells"][0];
            let bucket = &class["buckets"][0];
            [
                cell["eligible"].clone(),
                cell["winner"].clone(),
                cell["rejected"].clone(),
                cell["baseline"].clone(),
                bucket["winner"].clone(),
                bucket["per_cell"].clone(),
                class["search"].clone(),
            ]
        };
        let (with, base) = (judge(with), judge(base));
        assert_eq!(with, base);
        assert_eq!(base[1]["label"], "a=2");
    }

    #[test]
    fn an_unknown_role_is_ignored() {
        let mut probe = attempt(1, "a=2", 1, &[1.0, 1.0, 1.0], "other", false);
        probe.role = RoleKind::Unknown("probe".into());
        let scan = Scan {
            attempts: vec![
                attempt(0, "baseline", 0, &[100.0, 101.0, 99.0], "d", false),
                attempt(1, "a=2", 0, &[150.0, 151.0, 149.0], "d", false),
                probe,
            ],
            ..Default::default()
        };
        let a = analyze(&study(), &scan, &[]);
        assert_eq!(a.unknown_role_attempts, 1);
        let c = &a.classes[0].cells[0];
        assert!(c.rejected.is_empty());
        assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
        let text = super::super::render(&a, super::super::Format::Table, false);
        assert!(text.contains("1 attempts of a role"), "{text}");
        let json = serde_json::to_value(&a).expect("json");
        assert_eq!(json["unknown_role_attempts"], 1);
        let none = analyze(&study(), &Scan::default(), &[]);
        let json = serde_json::to_value(&none).expect("json");
        assert!(json.get("unknown_role_attempts").is_none(), "{json}");
    }

    #[test]
    fn a_win_within_noise_is_no_improvement() {
        let c = cell(vec![
            attempt(0, "baseline", 0, &[100.0, 110.0, 90.0], "d", false),
            attempt(1, "a=2", 0, &[105.0, 115.0, 95.0], "d", false),
        ]);
        assert!(c.winner.is_none());
        assert!(c.decision.starts_with("no improvement"), "{}", c.decision);
    }

    #[test]
    fn ties_collapse_to_fewest_knobs_changed() {
        let c = cell(vec![
            attempt(0, "baseline", 0, &[100.0, 100.5, 99.5], "d", false),
            attempt(1, "a=2 b=1", 0, &[200.0, 200.4, 199.6], "d", false),
            attempt(2, "a=2", 0, &[199.8, 200.2, 199.4], "d", false),
        ]);
        assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
        assert!(c.decision.contains("changes fewer knobs"), "{}", c.decision);
    }

    /// A noisy baseline (±15%) says nothing about whether two tight
    /// candidates differ: the one 20% faster is not "within noise" of the
    /// one that changes fewer knobs.
    #[test]
    fn a_noisy_baseline_does_not_make_a_real_win_a_tie() {
        let c = cell(vec![
            attempt(
                0,
                "baseline",
                0,
                &[100.0, 85.0, 115.0, 100.0, 118.0],
                "d",
                false,
            ),
            attempt(
                1,
                "a=2 b=1",
                0,
                &[240.0, 242.0, 238.0, 241.0, 239.0],
                "d",
                false,
            ),
            attempt(
                2,
                "a=2",
                0,
                &[200.0, 202.0, 198.0, 201.0, 199.0],
                "d",
                false,
            ),
        ]);
        assert_eq!(
            c.winner.as_ref().map(|w| w.label.as_str()),
            Some("a=2 b=1"),
            "{}",
            c.decision
        );
        assert!(
            !c.decision.contains("changes fewer knobs"),
            "{}",
            c.decision
        );
    }

    /// Runs of one config at cell n=1: one single-sample attempt each.
    fn runs_of(index: u64, label: &str, values: &[f64]) -> Vec<AttemptRecord> {
        values
            .iter()
            .enumerate()
            .map(|(r, v)| {
                let mut a = attempt(index, label, r as u32, &[*v], "d", false);
                a.trial_key = format!("{index}-{r}");
                a
            })
            .collect()
    }

    fn bucket_with(max_repeats: u32, attempts: Vec<AttemptRecord>) -> BucketReport {
        let mut s = study();
        s.spec = spec(serde_json::json!({
            "measurement": {"repeats": 3, "confirm_repeats": 3, "max_repeats": max_repeats},
        }));
        let scan = Scan {
            attempts,
            ..Default::default()
        };
        analyze(&s, &scan, &[]).classes[0].buckets[0].clone()
    }

    /// A candidate whose interval straddles the minimum is raced (with the
    /// baseline), a DRAFT meanwhile; a clearly slower one is not. At the
    /// cap the same evidence is a VERDICT that says the win is not shown,
    /// with its interval: never "no improvement".
    #[test]
    fn a_close_decision_is_raced_and_at_the_cap_said_plainly() {
        let base = [100.0, 103.0, 97.0];
        let close = [104.0, 107.0, 101.0];
        let slow = [80.0, 82.0, 78.0];
        let attempts = || {
            let mut v = runs_of(0, "baseline", &base);
            v.extend(runs_of(1, "a=2", &close));
            v.extend(runs_of(2, "a=3", &slow));
            v
        };
        let b = bucket_with(30, attempts());
        let race = b.racing.clone().expect("raced");
        assert_eq!(race.configs, vec![("a=2".to_string(), 1)], "{race:?}");
        assert_eq!(race.runs, 6, "3 runs more: {race:?}");
        assert_eq!(b.level, Level::Draft);
        assert!(
            b.level_reason.starts_with("racing: 1 config is"),
            "{}",
            b.level_reason
        );
        assert!(b.decision.contains("measuring more"), "{}", b.decision);
        let i = b.interval.expect("interval");
        assert!(i.low < 1.02 && i.high > 1.02, "{i:?}");

        let b = bucket_with(3, attempts());
        assert!(b.racing.is_none());
        assert_eq!(b.level, Level::Verdict, "{}", b.level_reason);
        assert!(
            b.decision.contains(
                "not shown to beat the 2.0% minimum (measurement.max_repeats = 3 reached)"
            ),
            "{}",
            b.decision
        );
        assert!(!b.decision.contains("no improvement"), "{}", b.decision);
    }

    /// The final round's size follows from the sweep: a win just above the
    /// minimum needs more runs to confirm than a large one.
    #[test]
    fn the_final_round_is_sized_from_the_sweeps_estimate() {
        let base: Vec<f64> = (0..12).map(|i| 100.0 + f64::from(i % 3) - 1.0).collect();
        let size = |factor: f64| {
            let cand: Vec<f64> = base.iter().map(|x| x * factor).collect();
            let mut v = runs_of(0, "baseline", &base);
            v.extend(runs_of(1, "a=2", &cand));
            let b = bucket_with(30, v);
            assert_eq!(
                b.winner.as_ref().map(|w| w.label.as_str()),
                Some("a=2"),
                "{}",
                b.decision
            );
            b.confirm_runs.expect("a round")
        };
        let (large, small) = (size(1.5), size(1.05));
        assert_eq!(large, 3, "the minimum, confirm_repeats");
        assert!(small > large, "{small} vs {large}");
        assert!(small <= 30);
    }

    #[test]
    fn a_failed_baseline_means_nothing_wins() {
        // Once: not believed yet, its re-run is pending.
        let c = cell(vec![
            attempt(0, "baseline", 0, &[], "d", true),
            attempt(1, "a=2", 0, &[200.0], "d", false),
        ]);
        assert_eq!(c.baseline_state, BaselineState::Pending);
        assert!(c.winner.is_none());
        assert!(c.decision.contains("runs once more"), "{}", c.decision);
        // Twice (its re-run failed too): it fails reproducibly.
        let c = cell(vec![
            attempt(0, "baseline", 0, &[], "d", true),
            attempt(0, "baseline", 1, &[], "d", true),
            attempt(1, "a=2", 0, &[200.0], "d", false),
        ]);
        assert_eq!(c.baseline_state, BaselineState::Failed);
        assert!(c.winner.is_none());
        assert!(c.decision.contains("baseline failed"), "{}", c.decision);
        // Once, then passed: noted, set aside, the cell goes on.
        let c = cell(vec![
            attempt(0, "baseline", 0, &[], "d", true),
            attempt(0, "baseline", 1, &[100.0, 101.0, 99.0], "d", false),
            attempt(1, "a=2", 0, &[200.0, 201.0, 199.0], "d", false),
        ]);
        assert_eq!(c.baseline_state, BaselineState::Ok);
        assert!(
            c.notes
                .iter()
                .any(|n| n.to_string().contains("failed once")),
            "{:?}",
            c.notes
        );
        assert_eq!(c.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
    }

    /// An attempt at cell `n`, with a role.
    fn at(index: u64, label: &str, n: u64, r: u32, v: f64, role: &str) -> AttemptRecord {
        let mut a = attempt(index, label, r, &[v, v * 1.001, v * 0.999], "d", false);
        a.cell = Arc::new(serde_json::json!({"n": n}));
        a.cell_label = format!("n={n}").into();
        a.cell_index = n as u32;
        a.role = RoleKind::from(role);
        a.trial_key = format!("{index}-{n}-{r}-{role}");
        a
    }

    fn study_with(confirm_repeats: u32) -> StudyRecord {
        let mut s = study();
        s.spec = spec(serde_json::json!({
            "measurement": {"repeats": 1, "confirm_repeats": confirm_repeats},
            "buckets": {"n": "all"},
        }));
        s
    }

    /// The bucket's tie rule compares candidates with each other at every
    /// cell, not through the baseline's noise.
    #[test]
    fn a_bucket_does_not_hide_a_real_win_behind_the_baselines_noise() {
        let noisy = |index: u64, label: &str, n: u64, v: &[f64]| {
            let mut a = attempt(index, label, 0, v, "d", false);
            a.cell = Arc::new(serde_json::json!({"n": n}));
            a.cell_label = format!("n={n}").into();
            a.cell_index = n as u32;
            a.trial_key = format!("{index}-{n}");
            a
        };
        let base = [100.0, 85.0, 115.0, 100.0, 118.0];
        let fast = [240.0, 242.0, 238.0, 241.0, 239.0];
        let less = [200.0, 202.0, 198.0, 201.0, 199.0];
        let close = [241.0, 243.0, 239.0, 242.0, 240.0];
        // The bucket (cells 1 and 2) with `two` (2 knobs changed) and `one`
        // (1 knob) measured alike at both cells.
        let bucket = |two: &[f64], one: &[f64]| {
            let mut attempts = Vec::new();
            for n in [1, 2] {
                attempts.push(noisy(0, "baseline", n, &base));
                attempts.push(noisy(1, "a=2 b=1", n, two));
                attempts.push(noisy(2, "a=2", n, one));
            }
            let scan = Scan {
                attempts,
                ..Default::default()
            };
            analyze(&study_with(0), &scan, &[]).classes[0].buckets[0].clone()
        };
        let b = bucket(&fast, &less);
        assert_eq!(
            b.winner.as_ref().map(|w| w.label.as_str()),
            Some("a=2 b=1"),
            "{}",
            b.decision
        );
        // Two candidates within their own noise still collapse to the one
        // that changes fewer knobs.
        let b = bucket(&close, &fast);
        assert_eq!(b.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
        assert!(b.decision.contains("changes fewer knobs"), "{}", b.decision);
    }

    #[test]
    fn no_harm_refuses_a_config_that_loses_at_one_cell_of_its_bucket() {
        // a=2 is 2× faster at n=1 and n=2 but 10% slower at n=3.
        let attempts = vec![
            at(0, "baseline", 1, 0, 100.0, "sweep"),
            at(0, "baseline", 2, 0, 100.0, "sweep"),
            at(0, "baseline", 3, 0, 100.0, "sweep"),
            at(1, "a=2", 1, 0, 200.0, "sweep"),
            at(1, "a=2", 2, 0, 200.0, "sweep"),
            at(1, "a=2", 3, 0, 90.0, "sweep"),
        ];
        let scan = Scan {
            attempts,
            ..Default::default()
        };
        let a = analyze(&study_with(0), &scan, &[]);
        let b = &a.classes[0].buckets;
        assert_eq!(b.len(), 1, "one bucket (rule all)");
        assert!(b[0].winner.is_none());
        assert_eq!(b[0].refusals[0].cell_label, "n=3");
        assert!(
            b[0].decision.contains("refused by n=3"),
            "{}",
            b[0].decision
        );
        // The cell alone would have picked it.
        assert_eq!(
            a.classes[0].cells[0]
                .winner
                .as_ref()
                .map(|w| w.label.as_str()),
            Some("a=2")
        );
    }

    #[test]
    fn a_winner_is_a_draft_until_the_final_round_confirms_it() {
        let mut attempts = vec![
            at(0, "baseline", 1, 0, 100.0, "sweep"),
            at(1, "a=2", 1, 0, 150.0, "sweep"),
        ];
        let s = study_with(1);
        let scan = |attempts: Vec<AttemptRecord>| Scan {
            attempts,
            ..Default::default()
        };
        let a = analyze(&s, &scan(attempts.clone()), &[]);
        let b = &a.classes[0].buckets[0];
        assert_eq!(b.winner.as_ref().map(|w| w.label.as_str()), Some("a=2"));
        assert_eq!(b.level, Level::Draft);
        assert!(b.level_reason.contains("awaiting"), "{}", b.level_reason);

        // Confirmed: the final round agrees.
        let mut confirmed = attempts.clone();
        confirmed.push(at(0, "baseline", 1, 0, 100.0, "confirm"));
        confirmed.push(at(1, "a=2", 1, 0, 149.0, "confirm"));
        let a = analyze(&s, &scan(confirmed), &[]);
        let b = &a.classes[0].buckets[0];
        assert_eq!(b.level, Level::Verdict, "{}", b.level_reason);
        assert_eq!(b.config, serde_json::json!({}));
        assert_eq!(a.level, Level::Verdict);

        // Not confirmed: the sweep's win was a fluke; the baseline ships.
        attempts.push(at(0, "baseline", 1, 0, 100.0, "confirm"));
        attempts.push(at(1, "a=2", 1, 0, 100.5, "confirm"));
        let a = analyze(&s, &scan(attempts), &[]);
        let b = &a.classes[0].buckets[0];
        assert!(b.winner.is_none());
        assert!(
            b.decision
                .contains("its lower bound not above the 2.0% minimum"),
            "{}",
            b.decision
        );
        assert_eq!(b.level, Level::Verdict);
    }

    #[test]
    fn per_host_ratios_merge_by_median() {
        // Host h2 is twice as fast for everything: pooled samples would
        // mislead, per-host ratios do not.
        let mut attempts = Vec::new();
        for (host, scale) in [("h1", 1.0), ("h2", 2.0), ("h3", 1.0)] {
            let mut b = attempt(0, "baseline", 0, &[100.0 * scale], "d", false);
            let mut c = attempt(1, "a=2", 0, &[110.0 * scale], "d", false);
            for x in [&mut b, &mut c] {
                x.host = host.into();
                x.trial_key = format!("{}-{host}", x.trial_key);
            }
            attempts.push(b);
            attempts.push(c);
        }
        let c = cell(attempts);
        let w = &c.eligible[0];
        assert_eq!(w.hosts, 3);
        assert!((w.speedup.unwrap_or(0.0) - 1.1).abs() < 1e-9);
    }

    #[test]
    fn a_candidate_on_a_host_without_baseline_samples_compares_with_the_pooled_baseline() {
        // The baseline's repeats all ran on h1, the candidate's on h2 (two
        // slots of a class drew them so): it is still compared.
        let mut attempts = Vec::new();
        for r in 0..3 {
            let mut b = attempt(0, "baseline", r, &[100.0], "d", false);
            b.host = "h1".into();
            let mut c = attempt(1, "a=2", r, &[140.0], "d", false);
            c.host = "h2".into();
            attempts.push(b);
            attempts.push(c);
        }
        let c = cell(attempts);
        let w = &c.eligible[0];
        assert!(
            (w.speedup.unwrap_or(0.0) - 1.4).abs() < 1e-9,
            "{:?}",
            w.speedup
        );
    }

    #[test]
    fn a_winner_that_crashes_in_the_final_round_does_not_ship() {
        let mut crash = at(1, "a=2", 1, 0, 0.0, "confirm");
        crash.status = AttemptStatus::Failed;
        crash.failure = Some(Failure {
            class: FailureClass::Oom,
            detail: "CUDA out of memory".into(),
            phase: crate::trial::Phase::Measure,
        });
        let attempts = vec![
            at(0, "baseline", 1, 0, 100.0, "sweep"),
            at(1, "a=2", 1, 0, 150.0, "sweep"),
            at(0, "baseline", 1, 0, 100.0, "confirm"),
            crash,
        ];
        let scan = Scan {
            attempts,
            ..Default::default()
        };
        let a = analyze(&study_with(1), &scan, &[]);
        let b = &a.classes[0].buckets[0];
        assert!(b.winner.is_none());
        assert!(
            b.decision.contains("failed its final round"),
            "{}",
            b.decision
        );
        assert!(
            b.decision.contains("oom: CUDA out of memory"),
            "{}",
            b.decision
        );
        assert_eq!(b.level, Level::Verdict);
    }

    #[test]
    fn a_bucket_with_only_the_baseline_measured_is_a_draft() {
        let scan = Scan {
            attempts: vec![at(0, "baseline", 1, 0, 100.0, "sweep")],
            ..Default::default()
        };
        let a = analyze(&study_with(1), &scan, &[]);
        let b = &a.classes[0].buckets[0];
        assert_eq!(b.level, Level::Draft);
        assert!(
            b.decision.contains("no candidate has been measured yet"),
            "{}",
            b.decision
        );
    }
}
