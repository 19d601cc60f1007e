//! What the decisions produce: the analysis, its classes, cells and
//! buckets, and the settings they are judged by.

use super::*;

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
    BaselineOverLimit { detail: LimitBroken },
    /// The baseline failed once and passed when run again: the failure
    /// is not believed.
    BaselineFailedOnce { detail: String },
}

/// A `selection.limits` bound that a config's samples break (their
/// median, pooled over the class's hosts), or cannot be shown to keep.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitBroken {
    /// The metric has no sample.
    NoSample { metric: String },
    /// The median is outside the bound. `unit` may be empty.
    Breached {
        metric: String,
        median: f64,
        samples: usize,
        breach: crate::spec::study::Breach,
        unit: String,
    },
}

impl fmt::Display for LimitBroken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitBroken::NoSample { metric } => write!(
                f,
                "{metric}: no sample recorded, so its limit cannot be checked"
            ),
            // `median 76.3 us … max 60 us`; a unit-less metric shows none.
            LimitBroken::Breached {
                metric,
                median,
                samples,
                breach,
                unit,
            } => {
                let sp = if unit.is_empty() { "" } else { " " };
                write!(
                    f,
                    "{metric}: median {}{sp}{unit} over {samples} samples, {breach}{sp}{unit}",
                    crate::fmt::short(*median)
                )
            }
        }
    }
}

/// A rejection's cause and the run it happened in:
/// `exit code 1 (repeat 2, host gpu-a)`.
pub struct Located<'a, C: fmt::Display + ?Sized> {
    pub cause: &'a C,
    pub repeat: u32,
    pub host: &'a str,
}

impl<'a, C: fmt::Display + ?Sized> Located<'a, C> {
    pub fn of(cause: &'a C, a: &'a AttemptRecord) -> Self {
        Located {
            cause,
            repeat: a.repeat,
            host: &a.host,
        }
    }
}

impl<C: fmt::Display + ?Sized> fmt::Display for Located<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (repeat {}, host {})",
            self.cause, self.repeat, self.host
        )
    }
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
    pub(super) fn is_drop(&self) -> bool {
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

pub(super) fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl MetricInfo {
    /// A metric as the frozen spec records it (`objective`, or a
    /// `fidelity.proxy`).
    pub(super) fn of(m: &FrozenMetric) -> MetricInfo {
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

/// One bucket of cells of one host class, and what wins it. Serialised
/// with `outcome` and `level_because` beside the decision and its level
/// reasons: their stable codes ([`Decision::code`], [`LevelReason::code`]).
#[derive(Debug, Clone)]
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
    pub decision: Decision,
    pub level: Level,
    pub level_reason: LevelReasons,
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
    pub racing: Option<Racing>,
    /// Runs a side at every cell that the final interleaved round takes
    /// (sized from the sweep's estimate), when there is a winner to
    /// confirm.
    pub confirm_runs: Option<u32>,
}

impl Serialize for BucketReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Out<'a> {
            key: &'a str,
            label: &'a str,
            bounds: &'a serde_json::Value,
            cells: &'a [String],
            config: &'a serde_json::Value,
            winner: &'a Option<BucketWinner>,
            decision: &'a Decision,
            outcome: &'static str,
            level: &'a Level,
            level_reason: &'a LevelReasons,
            level_because: Vec<&'static str>,
            threshold: Option<f64>,
            per_cell: &'a [BucketCell],
            refusals: &'a [Refusal],
            rejected: &'a [ConfigReport],
            interval: &'a Option<Interval>,
            #[serde(skip_serializing_if = "Option::is_none")]
            racing: &'a Option<Racing>,
            #[serde(skip_serializing_if = "Option::is_none")]
            confirm_runs: Option<u32>,
        }
        Out {
            key: &self.key,
            label: &self.label,
            bounds: &self.bounds,
            cells: &self.cells,
            config: &self.config,
            winner: &self.winner,
            decision: &self.decision,
            outcome: self.decision.code(),
            level: &self.level,
            level_reason: &self.level_reason,
            level_because: self.level_reason.codes(),
            threshold: self.threshold,
            per_cell: &self.per_cell,
            refusals: &self.refusals,
            rejected: &self.rejected,
            interval: &self.interval,
            racing: &self.racing,
            confirm_runs: self.confirm_runs,
        }
        .serialize(s)
    }
}

/// More runs where a bucket's decision is close (racing): the baseline and
/// these configs each get sweep runs up to `runs` at every cell of the
/// bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Racing {
    /// (label, config index), the baseline not included.
    pub configs: Vec<(String, u64)>,
    /// Sweep runs each should have at every cell after this round.
    pub runs: u32,
    /// Why, per config (the baseline aside), by label.
    pub why: Vec<(String, RaceWhy)>,
}

impl Serialize for Racing {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        /// A config's label and why it is raced, as `label: why`.
        struct Why<'a>(&'a str, RaceWhy);
        impl Serialize for Why<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&format_args!("{}: {}", self.0, self.1))
            }
        }
        #[derive(Serialize)]
        struct View<'a> {
            configs: &'a [(String, u64)],
            runs: u32,
            why: Vec<Why<'a>>,
        }
        View {
            configs: &self.configs,
            runs: self.runs,
            why: self.why.iter().map(|(l, w)| Why(l, *w)).collect(),
        }
        .serialize(ser)
    }
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
    /// Runs a side at every cell the round takes: `planned`, or more when
    /// it grew (its first `planned` runs left the minimum inside its
    /// interval with its estimate above it).
    pub runs: u32,
    /// Runs a side the sweep's estimate asked for.
    pub planned: u32,
    /// The round's estimate (over the bucket), and the run-to-run
    /// standard deviation it implies (log units; for growing the round).
    pub(super) estimate: Option<Estimate>,
    pub(super) run_sd: f64,
    /// Fewest runs a side measured at any cell.
    pub runs_done: usize,
    /// A cell where the round shows the winner slower than the baseline.
    pub harmed: Option<String>,
    pub(super) min_samples: usize,
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
            planned_runs: u32,
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
            planned_runs: self.planned,
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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refusal {
    pub config_label: String,
    pub cell_label: String,
    pub speedup: Option<f64>,
    pub reason: RefusalReason,
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
    pub decision: CellDecision,
    /// The threshold the winner had to beat (relative).
    pub threshold: Option<f64>,
    /// Eligible candidates, best first (the winner included).
    pub eligible: Vec<ConfigReport>,
    pub rejected: Vec<ConfigReport>,
    pub notes: Vec<CellNote>,
    /// Which cell of the plan (none for a cell known only from a drop).
    #[serde(skip)]
    pub(super) cell_index: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
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

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class.as_str(), self.detail)
    }
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
    pub(super) order: (u64, String),
    pub(super) by_host: BTreeMap<String, Vec<f64>>,
    /// One value per successful run, by host: the log of the median of its
    /// samples, oriented so that larger is better (with a single run, one
    /// per sample of it: `samples_as_runs`).
    pub(super) runs: BTreeMap<String, Vec<f64>>,
    pub(super) samples_as_runs: bool,
    /// The host offsets of its cell, fitted over every config measured
    /// there: comparisons use every run, not only those on shared hosts.
    pub(super) offsets: std::sync::Arc<crate::stats::offsets::HostOffsets>,
    /// Its runs read with those offsets, worked out once for all its
    /// comparisons (`None` where they cannot serve it).
    pub(super) side: Option<crate::stats::offsets::Side>,
    /// Against the baseline, in log units (what `interval` shows).
    pub(super) estimate: Option<Estimate>,
    /// Distinct sweep repeats with a terminal attempt.
    pub(super) repeats_ended: usize,
    /// `selection.min_samples`: fewer samples have no known spread.
    pub(super) min_samples: usize,
}

/// A [`Summary`] as JSON shows it: the spread `null` when unknown.
#[derive(Serialize)]
pub(super) struct SummaryJson {
    pub(super) n: usize,
    pub(super) median: f64,
    pub(super) spread: Option<f64>,
}

pub(super) fn summary_json(s: &Summary, min_samples: usize) -> SummaryJson {
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
            samples: &'a BTreeMap<String, Vec<f64>>,
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
            samples: &self.by_host,
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
    pub(super) fn tau(&self) -> f64 {
        self.min_improvement.ln_1p()
    }
}

/// Settings read from the frozen spec.
pub(super) struct Rules {
    pub(super) higher: bool,
    pub(super) tolerance: Option<crate::decide::gate::ToleranceSpec>,
    pub(super) min_improvement: f64,
    pub(super) repeats: u32,
    pub(super) confirm_repeats: u32,
    /// Most sweep runs a config gets at a cell, racing included.
    pub(super) max_repeats: u32,
    pub(super) min_hosts: u32,
    /// Samples a config needs at a cell for its spread to be known.
    pub(super) min_samples: usize,
    /// Slots of the class a racing round may fill (0: the rule's own round,
    /// `RACE_WIDTH` contenders and the growth of [`super::bucket::racing`]).
    pub(super) race_slots: u32,
    /// `selection.limits`: bounds on secondary metrics.
    pub(super) limits: BTreeMap<String, crate::spec::study::Limit>,
    /// Each declared secondary metric's unit, for the limits' messages.
    pub(super) units: BTreeMap<String, String>,
}
