//! The drift watch of one cell on one host: is the host measuring what it
//! measured before?
//!
//! Every baseline measurement of the cell on the host is a **reading**: the
//! median of its samples and, when it has at least [`MIN_SAMPLES_FOR_SE`]
//! of them, the standard error of that median relative to it (1.2533 ×
//! the scaled MAD / √n, the large-sample standard error of a median).
//!
//! An anchor is compared with a **robust reference**: the median of the
//! host's *clean* readings (baseline sweep trials that a clean anchor
//! followed, and the clean anchors themselves), never their best: the best
//! of many noisy medians moves away from the typical value as readings
//! accumulate, so plain noise would read as drift.
//!
//! The thresholds follow the noise the readings themselves show. The noise
//! of one reading is the larger of
//! - the scaled MAD of the clean readings relative to the reference (once
//!   there are [`MIN_READINGS_FOR_SPREAD`] of them: it sees trial-to-trial
//!   variation that no single trial's samples show), and
//! - the median of the readings' own relative standard errors;
//!
//! and the comparison of one reading with the median of `m` others has
//! noise `s·√(1 + 1/m)`. Then
//! - drift threshold = max(`cool_drift`, [`K_DRIFT`] × that),
//! - settle threshold = max(`cool_eps`, [`K_SETTLE`] × that).
//!
//! An anchor past the drift threshold is only a **suspect**: the launcher
//! measures two more anchors at once, and only when the median of the three
//! is past the threshold in the same direction has the host drifted (see
//! `anchor.rs`). For one-sided normal noise at 3 standard deviations, one
//! anchor trips by chance about once in 740.

use crate::stats::{MAD_SCALE, median};

/// Standard deviations of the comparison noise that an anchor must be off
/// its reference to be a drift suspect.
pub const K_DRIFT: f64 = 3.0;
/// Standard deviations within which an anchor has settled after a drift.
pub const K_SETTLE: f64 = 2.0;
/// Clean readings needed before their own spread counts.
pub const MIN_READINGS_FOR_SPREAD: usize = 3;
/// Samples a reading needs for its standard error to count.
pub const MIN_SAMPLES_FOR_SE: usize = 3;
/// Large-sample standard error of a median, in standard deviations / √n.
const MEDIAN_SE: f64 = 1.2533;

/// One baseline measurement: its median and the relative standard error
/// of that median, when its samples tell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub value: f64,
    pub noise: Option<f64>,
}

impl Reading {
    /// A reading of a trial's samples (`None` without samples).
    pub fn of(samples: &[f64]) -> Option<Reading> {
        let value = median(samples)?;
        let noise = (samples.len() >= MIN_SAMPLES_FOR_SE && value != 0.0)
            .then(|| crate::stats::scaled_mad(samples))
            .flatten()
            .map(|mad| MEDIAN_SE * (mad / value).abs() / (samples.len() as f64).sqrt());
        Some(Reading { value, noise })
    }
}

/// How an anchor compares with the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Judgement {
    /// Within the drift threshold both ways.
    Clean,
    /// Worse than the reference by this fraction (past the threshold).
    Worse(f64),
    /// Better than the reference by this fraction (past the threshold): what
    /// came before was measured in a worse state.
    Better(f64),
}

/// The reference and thresholds an anchor is judged against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub reference: f64,
    /// Relative noise of one comparison (`None`: not known yet).
    pub noise: Option<f64>,
    pub drift: f64,
    pub settle: f64,
}

/// The drift watch of one (host, cell).
#[derive(Debug, Default, Clone)]
pub struct Watch {
    /// Clean readings' values.
    clean: Vec<f64>,
    /// Baseline sweep readings since the last clean anchor: they join the
    /// clean ones when the next anchor is clean.
    provisional: Vec<f64>,
    /// Relative standard errors of every reading seen (kept across a
    /// reset: they describe the benchmark, not the host's state).
    errors: Vec<f64>,
}

impl Watch {
    /// A baseline sweep trial measured on this host at this cell.
    pub fn baseline(&mut self, r: Reading) {
        self.provisional.push(r.value);
        self.errors.extend(r.noise);
    }

    /// Whether there is anything to compare an anchor with.
    pub fn has_reference(&self) -> bool {
        !self.clean.is_empty() || !self.provisional.is_empty()
    }

    /// The values the reference is the median of: the clean readings, or
    /// before any anchor was clean, the provisional ones.
    fn basis(&self) -> &[f64] {
        if self.clean.is_empty() {
            &self.provisional
        } else {
            &self.clean
        }
    }

    /// Reference and thresholds for judging the median of `anchors` (one
    /// anchor, or a confirmation burst) now; `None` with nothing to
    /// compare with.
    pub fn thresholds(
        &self,
        anchors: &[Reading],
        cool_drift: f64,
        cool_eps: f64,
    ) -> Option<Thresholds> {
        let basis = self.basis();
        let reference = median(basis)?;
        let values: Vec<f64> = anchors.iter().map(|r| r.value).collect();
        let own: Vec<f64> = anchors.iter().filter_map(|r| r.noise).collect();
        let estimates = [
            relative_spread(basis),
            relative_spread(&values),
            median(&self.errors),
            median(&own),
        ];
        let one = estimates.into_iter().flatten().reduce(f64::max);
        let n = anchors.len().max(1) as f64;
        let noise = one.map(|s| s * (1.0 / n + 1.0 / basis.len() as f64).sqrt());
        let s = noise.unwrap_or(0.0);
        Some(Thresholds {
            reference,
            noise,
            drift: cool_drift.max(K_DRIFT * s),
            settle: cool_eps.max(K_SETTLE * s),
        })
    }

    /// Judge the median of `anchors` against `t` (direction-aware:
    /// `higher` is better).
    pub fn judge(t: &Thresholds, anchors: &[Reading], higher: bool) -> Judgement {
        let values: Vec<f64> = anchors.iter().map(|r| r.value).collect();
        let Some(value) = median(&values) else {
            return Judgement::Clean;
        };
        let worse = shortfall(t.reference, value, higher);
        let better = shortfall(value, t.reference, higher);
        if worse > t.drift {
            Judgement::Worse(worse)
        } else if better > t.drift {
            Judgement::Better(better)
        } else {
            Judgement::Clean
        }
    }

    /// Clean anchors (one, or a burst that cleared a suspect): the
    /// provisional readings and the anchors become clean readings.
    pub fn clean(&mut self, anchors: &[Reading]) {
        self.clean.append(&mut self.provisional);
        self.clean.extend(anchors.iter().map(|r| r.value));
        self.errors.extend(anchors.iter().filter_map(|r| r.noise));
    }

    /// An anchor that settled after a drift: it is a clean reading; what
    /// was provisional was discarded with the drift.
    pub fn settled(&mut self, anchor: Reading) {
        self.provisional.clear();
        self.clean.push(anchor.value);
        self.errors.extend(anchor.noise);
    }

    /// Whether clean readings back the reference. Without them the
    /// reference was provisional and is discarded with a drift: a
    /// cool-down then settles when two anchors in a row agree.
    pub fn has_clean(&self) -> bool {
        !self.clean.is_empty()
    }

    /// Discard the provisional readings (their measurements were voided).
    pub fn discard_provisional(&mut self) {
        self.provisional.clear();
    }

    /// The host was slower before these anchors: start the reference anew
    /// from them.
    pub fn restart(&mut self, anchors: &[Reading]) {
        self.clean = anchors.iter().map(|r| r.value).collect();
        self.provisional.clear();
        self.errors.extend(anchors.iter().filter_map(|r| r.noise));
    }
}

/// 1.4826 × MAD of `xs` relative to their median, with at least
/// [`MIN_READINGS_FOR_SPREAD`] of them.
fn relative_spread(xs: &[f64]) -> Option<f64> {
    if xs.len() < MIN_READINGS_FOR_SPREAD {
        return None;
    }
    let m = median(xs)?;
    if m == 0.0 {
        return None;
    }
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    median(&dev).map(|d| MAD_SCALE * d / m.abs())
}

/// How much worse `value` is than `reference`, relative to `reference`
/// (0 when it is not worse). Direction-aware.
pub fn shortfall(reference: f64, value: f64, higher: bool) -> f64 {
    if reference == 0.0 {
        return 0.0;
    }
    let worse = if higher {
        (reference - value) / reference
    } else {
        (value - reference) / reference
    };
    worse.max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A lognormal factor with log-standard-deviation `sigma`.
    fn lognormal(rng: &mut ChaCha8Rng, sigma: f64) -> f64 {
        // Box-Muller.
        let u1: f64 = rng.random::<f64>().max(1e-12);
        let u2: f64 = rng.random::<f64>();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        (sigma * z).exp()
    }

    /// A trial of 5 samples: per-sample noise `sigma`, a per-trial offset
    /// of `sigma / 2`, the host running at `speed`.
    fn trial(rng: &mut ChaCha8Rng, sigma: f64, speed: f64) -> Reading {
        let offset = lognormal(rng, sigma / 2.0);
        let samples: Vec<f64> = (0..5)
            .map(|_| 100.0 * speed * offset * lognormal(rng, sigma))
            .collect();
        Reading::of(&samples).expect("samples")
    }

    /// Run the watch as the launcher does: a baseline trial, then anchors
    /// (a suspect confirmed by a burst of three); count drifts declared.
    fn drifts(sigma: f64, anchors: usize, slow: Option<(usize, f64)>, seed: u64) -> usize {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut w = Watch::default();
        w.baseline(trial(&mut rng, sigma, 1.0));
        let mut declared = 0;
        for i in 0..anchors {
            let speed = match slow {
                Some((from, s)) if i >= from => s,
                _ => 1.0,
            };
            let a = [trial(&mut rng, sigma, speed)];
            let t = w.thresholds(&a, 0.10, 0.03).expect("reference");
            match Watch::judge(&t, &a, true) {
                Judgement::Clean => w.clean(&a),
                first => {
                    let burst = [
                        a[0],
                        trial(&mut rng, sigma, speed),
                        trial(&mut rng, sigma, speed),
                    ];
                    let t = w.thresholds(&burst, 0.10, 0.03).expect("reference");
                    let second = Watch::judge(&t, &burst, true);
                    let same = matches!(
                        (first, second),
                        (Judgement::Worse(_), Judgement::Worse(_))
                            | (Judgement::Better(_), Judgement::Better(_))
                    );
                    if same {
                        declared += 1;
                        if slow.is_some() {
                            return declared;
                        }
                        // Cool down: settle within five anchors, or drop.
                        let mut prev = median(&burst.map(|r| r.value)).expect("burst");
                        let mut settled = false;
                        for _ in 0..5 {
                            let a = trial(&mut rng, sigma, speed);
                            let t = w.thresholds(&[a], 0.10, 0.03).expect("reference");
                            let off = if w.has_clean() {
                                shortfall(t.reference, a.value, true)
                            } else {
                                ((a.value - prev) / prev).abs()
                            };
                            prev = a.value;
                            if off <= t.settle {
                                w.settled(a);
                                settled = true;
                                break;
                            }
                        }
                        assert!(settled, "σ={sigma}: a host that never drifted was dropped");
                    } else {
                        w.clean(&burst);
                    }
                }
            }
            if i % 2 == 0 {
                w.baseline(trial(&mut rng, sigma, speed));
            }
        }
        declared
    }

    #[test]
    fn noise_alone_does_not_trip_the_watch() {
        // 200 hosts × 30 anchors at each noise level: the rule must not
        // see drift that is not there.
        for sigma in [0.01, 0.05, 0.10] {
            let total: usize = (0..200).map(|s| drifts(sigma, 30, None, s)).sum();
            eprintln!("σ={sigma}: {total} false drifts in 6000 anchors");
            // At 10% noise per sample (7% per trial), a false drift now and
            // then costs a cool-down and a re-measurement, never a drop.
            let allowed = if sigma < 0.1 { 1 } else { 20 };
            assert!(
                total <= allowed,
                "σ={sigma}: {total} false drifts in 6000 anchors"
            );
        }
    }

    #[test]
    fn a_real_slowdown_is_caught() {
        // A host 20% slower from the 10th anchor on, at 1% and 5% noise.
        for sigma in [0.01, 0.05] {
            let caught = (0..200)
                .filter(|s| drifts(sigma, 30, Some((10, 0.8)), *s) > 0)
                .count();
            eprintln!("σ={sigma}: caught {caught} of 200");
            assert!(caught >= 190, "σ={sigma}: caught {caught} of 200");
        }
    }

    #[test]
    fn the_reference_is_the_median_not_the_best() {
        let mut w = Watch::default();
        for v in [100.0, 90.0, 110.0, 95.0, 105.0] {
            w.baseline(Reading {
                value: v,
                noise: None,
            });
        }
        let one = |v: f64| {
            [Reading {
                value: v,
                noise: None,
            }]
        };
        let t = w.thresholds(&one(85.0), 0.10, 0.03).expect("reference");
        assert_eq!(t.reference, 100.0);
        // MAD 5 → 7.4% of the reference, × √(1 + 1/5), × 3 ≈ 24%.
        assert!(t.drift > 0.2 && t.drift < 0.3, "{t:?}");
        assert_eq!(Watch::judge(&t, &one(85.0), true), Judgement::Clean);
        assert!(matches!(
            Watch::judge(&t, &one(70.0), true),
            Judgement::Worse(_)
        ));
        assert!(matches!(
            Watch::judge(&t, &one(70.0), false),
            Judgement::Better(_)
        ));
    }

    #[test]
    fn quiet_readings_keep_the_configured_floor() {
        let mut w = Watch::default();
        w.baseline(Reading::of(&[100.0, 100.1, 99.9, 100.0, 100.05]).expect("samples"));
        let a = [Reading {
            value: 85.0,
            noise: None,
        }];
        let t = w.thresholds(&a, 0.10, 0.03).expect("reference");
        assert_eq!(t.drift, 0.10);
        assert_eq!(t.settle, 0.03);
        assert!(matches!(Watch::judge(&t, &a, true), Judgement::Worse(_)));
    }
}
