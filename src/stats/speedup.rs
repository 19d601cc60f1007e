//! How well a speedup is known: a confidence interval of the ratio of two
//! configs' run times (or throughputs), from their runs.
//!
//! **The unit is the run** (one attempt): its value is the logarithm of the
//! median of its samples, oriented so that larger is better (`ln x` when
//! higher is better, `−ln x` when lower is). Samples of one run share the
//! run's state (a process, a clock, a cache), so they are not independent
//! measurements of a config; runs are. A run whose median is not a
//! positive finite number is left out.
//!
//! **The estimate** of the log speedup of a candidate over a reference is
//! the difference of their mean run values **within each host** that ran
//! both, merged over those hosts with weights `1 / (1/n_c + 1/n_r)` (the
//! least-squares estimate of a config effect with one offset per host): a
//! host that is faster for everything cannot make a config look faster.
//! When no host ran both, every run is pooled, and the offsets between
//! hosts count as noise. (Where the two sides' hosts differ, a cell's
//! analysis compares over every run with host offsets fitted over all of
//! its configs instead: [`super::offsets`].)
//!
//! **Its uncertainty**: each side's run-to-run variance is estimated within
//! hosts (pooled over its hosts; when each host has a single run of it,
//! across hosts, which counts their offsets as noise and is larger). The
//! standard error of the estimate follows from the weights; the interval
//! is Student's t with Welch–Satterthwaite degrees of freedom, at the
//! given confidence. It narrows as 1/√runs: this is how well the speedup
//! is known, not how much single runs scatter.
//!
//! **One run.** A config measured by a single run has no run-to-run
//! variation to show. Its samples then stand in for runs (as they are
//! when a tool repeats the command itself, hyperfine's runs for one):
//! each sample's log is a unit. The interval says so (`samples_as_runs`),
//! since it is only as good as that assumption; a second run ends it.
//!
//! A bucket of cells merges its cells' intervals as the mean of their log
//! speedups (the geometric mean of the speedups), variances added.

use std::collections::BTreeMap;

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The confidence level of every interval a decision reads.
pub const CONFIDENCE: f64 = 0.95;

/// An estimate of a log speedup with its standard error and degrees of
/// freedom: enough to form an interval, or to merge with others.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The log speedup (0 = as fast; > 0 better).
    pub log: f64,
    /// Its variance (the square of its standard error).
    pub var: f64,
    /// Welch–Satterthwaite degrees of freedom (∞ when the variance is 0).
    pub df: f64,
    /// Runs behind it: the candidate's and the reference's.
    pub runs: (usize, usize),
    /// A side's units were the samples of its single run.
    pub samples_as_runs: bool,
}

/// A speedup with its interval, as ratios (1.10 = 10 % better).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub speedup: f64,
    pub low: f64,
    pub high: f64,
    /// The confidence level (0.95).
    pub confidence: f64,
    /// Runs of the candidate and of the reference behind it.
    pub runs: usize,
    pub reference_runs: usize,
    /// A side had a single run, whose samples stood in for runs (see the
    /// module's notes). Left out of JSON when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub samples_as_runs: bool,
}

impl Estimate {
    pub fn se(&self) -> f64 {
        self.var.max(0.0).sqrt()
    }

    /// Half the width of the interval, in log units.
    pub fn half_width(&self, confidence: f64) -> f64 {
        t_quantile(self.df, 0.5 + confidence / 2.0) * self.se()
    }

    /// The interval's ends, in log units.
    pub fn log_bounds(&self, confidence: f64) -> (f64, f64) {
        let h = self.half_width(confidence);
        (self.log - h, self.log + h)
    }

    pub fn interval(&self, confidence: f64) -> Interval {
        let (lo, hi) = self.log_bounds(confidence);
        Interval {
            speedup: self.log.exp(),
            low: lo.exp(),
            high: hi.exp(),
            confidence,
            runs: self.runs.0,
            reference_runs: self.runs.1,
            samples_as_runs: self.samples_as_runs,
        }
    }

    /// The mean of several estimates' log speedups (a bucket's cells: the
    /// geometric mean of their speedups), their variances added. `None`
    /// for none.
    pub fn mean(parts: &[Estimate]) -> Option<Estimate> {
        if parts.is_empty() {
            return None;
        }
        let k = parts.len() as f64;
        let log = parts.iter().map(|p| p.log).sum::<f64>() / k;
        let var = parts.iter().map(|p| p.var).sum::<f64>() / (k * k);
        let df = satterthwaite(parts.iter().map(|p| (p.var / (k * k), p.df)));
        let runs = parts
            .iter()
            .fold((0, 0), |acc, p| (acc.0 + p.runs.0, acc.1 + p.runs.1));
        Some(Estimate {
            log,
            var,
            df,
            runs,
            samples_as_runs: parts.iter().any(|p| p.samples_as_runs),
        })
    }
}

/// The two-sided Student's t quantile `p` with `df` degrees of freedom
/// (the normal one for an infinite or huge `df`).
///
/// Remembered by the exact bits of `(df, p)`, per thread: a launch
/// analyses its ledger again after every few attempts, and most of its
/// estimates (so their degrees of freedom) have not changed since the
/// last time, where the quantile itself is an iterative inversion of the
/// regularised incomplete beta function. The memory is bounded (emptied
/// when full), and a remembered value is the value computed.
pub fn t_quantile(df: f64, p: f64) -> f64 {
    if !df.is_finite() || df > 1e6 {
        return normal_quantile(p);
    }
    const REMEMBERED: usize = 1 << 16;
    thread_local! {
        static KNOWN: std::cell::RefCell<std::collections::HashMap<(u64, u64), f64>> =
            Default::default();
    }
    let key = (df.to_bits(), p.to_bits());
    if let Some(q) = KNOWN.with(|k| k.borrow().get(&key).copied()) {
        return q;
    }
    let q = match StudentsT::new(0.0, 1.0, df.max(1.0)) {
        Ok(t) => t.inverse_cdf(p),
        Err(_) => f64::INFINITY,
    };
    KNOWN.with(|k| {
        let mut k = k.borrow_mut();
        if k.len() >= REMEMBERED {
            k.clear();
        }
        k.insert(key, q);
    });
    q
}

/// The standard normal quantile.
pub fn normal_quantile(p: f64) -> f64 {
    match statrs::distribution::Normal::new(0.0, 1.0) {
        Ok(n) => n.inverse_cdf(p),
        Err(_) => f64::INFINITY,
    }
}

/// Welch–Satterthwaite: the degrees of freedom of a sum of variance
/// components `(v, df)`. ∞ when the sum is 0.
pub(super) fn satterthwaite(parts: impl Iterator<Item = (f64, f64)>) -> f64 {
    let mut sum = 0.0;
    let mut den = 0.0;
    for (v, df) in parts {
        sum += v;
        if v > 0.0 && df.is_finite() {
            den += v * v / df;
        }
    }
    if sum <= 0.0 {
        return f64::INFINITY;
    }
    if den <= 0.0 {
        return f64::INFINITY;
    }
    sum * sum / den
}

/// One run's value: the log of the median of its samples, oriented so that
/// larger is better. `None` for a median that is not positive and finite.
pub fn run_value(samples: &[f64], higher_is_better: bool) -> Option<f64> {
    sample_value(super::median(samples)?, higher_is_better)
}

/// One sample's value, as [`run_value`]'s.
pub fn sample_value(x: f64, higher_is_better: bool) -> Option<f64> {
    if !(x.is_finite() && x > 0.0) {
        return None;
    }
    Some(if higher_is_better { x.ln() } else { -x.ln() })
}

/// The units of one side by host, from its runs' samples: one value per
/// run; when the side has a single run, one per sample of it (`true`:
/// samples stand in for runs).
pub fn units(
    runs: &BTreeMap<String, Vec<Vec<f64>>>,
    higher_is_better: bool,
) -> (BTreeMap<String, Vec<f64>>, bool) {
    let total: usize = runs.values().map(Vec::len).sum();
    let single = total == 1;
    let out = runs
        .iter()
        .map(|(host, rs)| {
            let values: Vec<f64> = if single {
                rs.iter()
                    .flatten()
                    .filter_map(|x| sample_value(*x, higher_is_better))
                    .collect()
            } else {
                rs.iter()
                    .filter_map(|s| run_value(s, higher_is_better))
                    .collect()
            };
            (host.clone(), values)
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    (out, single)
}

/// One side's run-to-run variance and its degrees of freedom: within its
/// hosts, pooled; when no host has two runs, across hosts (offsets and
/// all). `None` with fewer than two runs.
pub(super) fn variance(runs: &BTreeMap<String, Vec<f64>>) -> Option<(f64, f64)> {
    let n: usize = runs.values().map(Vec::len).sum();
    let groups = runs.values().filter(|v| !v.is_empty()).count();
    if n < 2 {
        return None;
    }
    let ss = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>()
    };
    if n > groups {
        let within: f64 = runs.values().filter(|v| !v.is_empty()).map(|v| ss(v)).sum();
        let df = (n - groups) as f64;
        Some((within / df, df))
    } else {
        let all: Vec<f64> = runs.values().flatten().copied().collect();
        let df = (n - 1) as f64;
        Some((ss(&all) / df, df))
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The log speedup of `cand` over `reference` from their runs' values by
/// host (see [`run_value`]). `None` when a side has no run, or fewer than
/// two (its run-to-run variance is unknown).
pub fn estimate(
    reference: &BTreeMap<String, Vec<f64>>,
    cand: &BTreeMap<String, Vec<f64>>,
) -> Option<Estimate> {
    estimate_units(reference, cand, false)
}

/// [`estimate`], `samples_as_runs` telling whether a side's units were the
/// samples of its single run.
pub fn estimate_units(
    reference: &BTreeMap<String, Vec<f64>>,
    cand: &BTreeMap<String, Vec<f64>>,
    samples_as_runs: bool,
) -> Option<Estimate> {
    let (vc, dfc) = variance(cand)?;
    let (vr, dfr) = variance(reference)?;
    // Strata: hosts that ran both; none: every run pooled as one.
    let mut strata: Vec<(&[f64], &[f64])> = cand
        .iter()
        .filter(|(_, c)| !c.is_empty())
        .filter_map(|(h, c)| {
            reference
                .get(h)
                .filter(|r| !r.is_empty())
                .map(|r| (c.as_slice(), r.as_slice()))
        })
        .collect();
    let pooled_c: Vec<f64>;
    let pooled_r: Vec<f64>;
    if strata.is_empty() {
        pooled_c = cand.values().flatten().copied().collect();
        pooled_r = reference.values().flatten().copied().collect();
        if pooled_c.is_empty() || pooled_r.is_empty() {
            return None;
        }
        strata.push((&pooled_c, &pooled_r));
    }
    let weights: Vec<f64> = strata
        .iter()
        .map(|(c, r)| 1.0 / (1.0 / c.len() as f64 + 1.0 / r.len() as f64))
        .collect();
    let total: f64 = weights.iter().sum();
    let mut log = 0.0;
    let (mut a, mut b) = (0.0, 0.0);
    let (mut nc, mut nr) = (0, 0);
    for ((c, r), w) in strata.iter().zip(&weights) {
        let share = w / total;
        log += share * (mean(c) - mean(r));
        a += share * share / c.len() as f64;
        b += share * share / r.len() as f64;
        nc += c.len();
        nr += r.len();
    }
    let var = a * vc + b * vr;
    let df = satterthwaite([(a * vc, dfc), (b * vr, dfr)].into_iter());
    Some(Estimate {
        log,
        var,
        df,
        runs: (nc, nr),
        samples_as_runs,
    })
}

/// Runs per side that a comparison needs for a true log speedup `effect`
/// to clear `threshold` (log) with probability `power`, at `confidence`,
/// given one run's standard deviation `sd` on each side, over `cells`
/// cells measured alike. At least 2.
pub fn runs_needed(
    effect: f64,
    threshold: f64,
    sd: f64,
    cells: usize,
    confidence: f64,
    power: f64,
) -> u32 {
    let margin = effect - threshold;
    if margin.is_nan() || margin <= 0.0 || !sd.is_finite() {
        return u32::MAX;
    }
    // se = sd·√(2/n)/√cells must be at most margin / (t_conf + t_power),
    // with Student's t at the comparison's degrees of freedom (about
    // cells·(2n − 2)): the normal's z would size small rounds too small.
    let cells = cells.max(1) as f64;
    let z = normal_quantile(0.5 + confidence / 2.0) + normal_quantile(power);
    let first_guess = (2.0 * (z * sd / margin).powi(2) / cells).ceil().max(2.0);
    if first_guess >= 100_000.0 {
        return u32::MAX;
    }
    let mut n = 2.0f64.max(first_guess / 2.0).floor();
    loop {
        let df = (cells * (2.0 * n - 2.0)).max(1.0);
        let t = t_quantile(df, 0.5 + confidence / 2.0) + t_quantile(df, power);
        if t * sd * (2.0 / n).sqrt() / cells.sqrt() <= margin || n >= 100_000.0 {
            return n as u32;
        }
        n += 1.0;
    }
}

/// The run-to-run standard deviation (log units) that an estimate implies
/// for one run, given its runs (for sizing a later comparison).
pub fn run_sd(e: &Estimate) -> f64 {
    let (nc, nr) = e.runs;
    if nc == 0 || nr == 0 {
        return f64::INFINITY;
    }
    // var = sd²·(1/nc + 1/nr) for one stratum of equal variances.
    (e.var / (1.0 / nc as f64 + 1.0 / nr as f64)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A remembered quantile is the one computed.
    #[test]
    fn a_remembered_quantile_is_the_computed_one() {
        let fresh = StudentsT::new(0.0, 1.0, 7.3)
            .expect("a t distribution")
            .inverse_cdf(0.975);
        assert_eq!(t_quantile(7.3, 0.975), fresh);
        assert_eq!(t_quantile(7.3, 0.975), fresh);
        assert!(t_quantile(7.3, 0.9) < fresh);
    }
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn runs(host: &str, xs: &[f64]) -> BTreeMap<String, Vec<f64>> {
        [(host.to_string(), xs.to_vec())].into_iter().collect()
    }

    #[test]
    fn the_interval_narrows_as_runs_accumulate() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut draw = |n: usize, centre: f64| -> Vec<f64> {
            (0..n)
                .map(|_| centre + 0.05 * gauss(&mut rng))
                .collect::<Vec<_>>()
        };
        let small = estimate(&runs("a", &draw(3, 0.0)), &runs("a", &draw(3, 0.1))).unwrap();
        let large = estimate(&runs("a", &draw(60, 0.0)), &runs("a", &draw(60, 0.1))).unwrap();
        let w = |e: &Estimate| e.half_width(CONFIDENCE);
        assert!(
            w(&large) < w(&small) / 3.0,
            "{} vs {}",
            w(&large),
            w(&small)
        );
        let i = large.interval(CONFIDENCE);
        assert!(i.low > 1.05 && i.high < 1.17, "{i:?}");
    }

    #[test]
    fn one_run_a_side_has_no_interval() {
        assert!(estimate(&runs("a", &[0.0, 0.1]), &runs("a", &[0.2])).is_none());
        assert!(estimate(&runs("a", &[0.0]), &runs("a", &[0.2, 0.3])).is_none());
    }

    #[test]
    fn a_host_offset_does_not_make_a_config_look_faster() {
        // Host b is twice as fast for everything; the candidate ran mostly
        // there, the reference mostly on a. Within hosts they are equal.
        let two = std::f64::consts::LN_2;
        let reference: BTreeMap<String, Vec<f64>> = [
            ("a".to_string(), vec![0.0, 0.01, -0.01, 0.0]),
            ("b".to_string(), vec![two]),
        ]
        .into_iter()
        .collect();
        let cand: BTreeMap<String, Vec<f64>> = [
            ("a".to_string(), vec![0.0]),
            ("b".to_string(), vec![two, two + 0.01, two - 0.01, two]),
        ]
        .into_iter()
        .collect();
        let e = estimate(&reference, &cand).unwrap();
        assert!(e.log.abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn a_bucket_merges_cells_as_a_geometric_mean() {
        let a = Estimate {
            log: 0.1,
            var: 0.0004,
            df: 10.0,
            runs: (5, 5),
            samples_as_runs: false,
        };
        let b = Estimate {
            log: 0.3,
            var: 0.0004,
            df: 10.0,
            runs: (5, 5),
            samples_as_runs: false,
        };
        let m = Estimate::mean(&[a, b]).unwrap();
        assert!((m.log - 0.2).abs() < 1e-12);
        assert!((m.var - 0.0002).abs() < 1e-12);
        assert!((m.df - 20.0).abs() < 1e-9);
        assert_eq!(m.runs, (10, 10));
    }

    #[test]
    fn coverage_is_near_the_confidence_level() {
        // Normal run values, 5 vs 5 runs, true log speedup 0.05: the
        // interval should hold it about 95 % of the time.
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let trials = 4000;
        let mut held = 0;
        for _ in 0..trials {
            let r: Vec<f64> = (0..5).map(|_| 0.04 * gauss(&mut rng)).collect();
            let c: Vec<f64> = (0..5).map(|_| 0.05 + 0.04 * gauss(&mut rng)).collect();
            let e = estimate(&runs("h", &r), &runs("h", &c)).unwrap();
            let (lo, hi) = e.log_bounds(CONFIDENCE);
            if lo <= 0.05 && 0.05 <= hi {
                held += 1;
            }
        }
        let share = held as f64 / trials as f64;
        assert!((0.93..=0.97).contains(&share), "coverage {share}");
    }

    #[test]
    fn runs_needed_grows_as_the_margin_shrinks() {
        let wide = runs_needed(0.10, 0.02, 0.04, 1, 0.95, 0.95);
        let close = runs_needed(0.05, 0.02, 0.04, 1, 0.95, 0.95);
        assert!(close > wide, "{close} vs {wide}");
        assert_eq!(runs_needed(0.01, 0.02, 0.04, 1, 0.95, 0.95), u32::MAX);
        assert!(runs_needed(0.5, 0.02, 0.001, 1, 0.95, 0.95) >= 2);
    }

    fn gauss(rng: &mut ChaCha8Rng) -> f64 {
        // Box–Muller.
        let u1: f64 = rng.random::<f64>().max(1e-12);
        let u2: f64 = rng.random::<f64>();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}
