//! Host offsets of a cell, and comparisons that use every run.
//!
//! The within-host comparison of [`super::speedup`] keeps only the hosts
//! that ran both sides. On a fleet of many hosts two configs' runs rarely
//! share one: 30 runs of each over 100 hosts meet on about 8, the other
//! runs are left out of the estimate, and the variance within hosts has
//! a handful of degrees of freedom. Yet each host's effect is known, from
//! every other config measured there.
//!
//! **The fit.** At one cell, each run value is a config effect plus a
//! host offset plus noise, fitted by least squares over every config
//! measured at the cell (two-way, no interaction). Offsets compare only
//! within a connected part of the design (hosts joined by configs that ran
//! on both); one host of each part is the part's reference (offset 0).
//! With the configs' means absorbed, the offsets solve `C h = Q`, where
//! `C = diag(runs on each host) − Σ_k n_k n_kᵀ / n_k` over the configs k
//! (`n_k`: k's runs on each host) and `Q` holds each host's runs less
//! their configs' means, summed.
//!
//! **The comparison** of configs c and r: each run's value less its
//! host's offset, the means of the two sides differenced. With `a_k` the
//! share of k's runs on each host and `w = a_c − a_r`, the estimate is
//! `(ȳ_c − ȳ_r) − wᵀh`, and since the side means are uncorrelated with
//! `Q`, its variance is `σ_c²/n_c + σ_r²/n_r + wᵀ C⁻¹ Var(Q) C⁻¹ w`; the
//! last term is read with the fit's pooled residual variance (`σ² wᵀ C⁻¹
//! w`). Each side's own variance is its residuals' sum of squares over
//! its runs less their leverage (a run's leverage is `1/n_k + uᵀ C⁻¹ u`
//! with `u` its host's indicator less `a_k`: how much of its noise the
//! fitted means and offsets absorb), and that is also its degrees of
//! freedom; Welch–Satterthwaite merges them.
//!
//! Where every run of both sides shares a host with the other side,
//! nothing is left out and the within-host comparison is kept as it is.

use std::collections::BTreeMap;

use super::speedup::{Estimate, estimate_units, satterthwaite};

/// One host of the fit.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Host {
    /// Its offset (log units): added to every run value on it.
    value: f64,
    /// Its index among the fitted offsets; `None` for a part's reference.
    free: Option<usize>,
    /// The connected part of the design it is in.
    part: usize,
}

/// The host offsets of one cell (see the module's notes). Empty where
/// there is nothing to fit (one host) or no residual degrees of freedom:
/// comparisons are then within hosts, as without it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostOffsets {
    hosts: BTreeMap<String, Host>,
    /// `C⁻¹`, over the free hosts.
    c_inv: Vec<Vec<f64>>,
    /// The fit's residual variance and degrees of freedom.
    residual: f64,
    df: f64,
}

impl HostOffsets {
    /// Fit the offsets from every config's runs at a cell: per config,
    /// its run values by host (one value a run).
    pub fn fit<'a>(configs: impl IntoIterator<Item = &'a BTreeMap<String, Vec<f64>>>) -> Self {
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        // Per config: its runs as (host, value).
        let mut runs: Vec<Vec<(usize, f64)>> = Vec::new();
        for config in configs {
            let mut mine = Vec::new();
            for (host, values) in config {
                let next = index.len();
                let h = *index.entry(host.as_str()).or_insert(next);
                mine.extend(values.iter().filter(|v| v.is_finite()).map(|v| (h, *v)));
            }
            if !mine.is_empty() {
                runs.push(mine);
            }
        }
        let hosts = index.len();
        if hosts < 2 {
            return HostOffsets::default();
        }
        // Connected parts: hosts joined by a config that ran on both.
        let mut parent: Vec<usize> = (0..hosts).collect();
        fn root(parent: &mut [usize], mut x: usize) -> usize {
            while parent[x] != x {
                parent[x] = parent[parent[x]];
                x = parent[x];
            }
            x
        }
        for config in &runs {
            let first = config[0].0;
            for &(h, _) in &config[1..] {
                let (a, b) = (root(&mut parent, first), root(&mut parent, h));
                parent[a] = b;
            }
        }
        let part: Vec<usize> = (0..hosts).map(|h| root(&mut parent, h)).collect();
        // The first host of each part is its reference; the others free.
        let mut free: Vec<Option<usize>> = vec![None; hosts];
        let mut seen_part = vec![false; hosts];
        let mut n_free = 0;
        for h in 0..hosts {
            if std::mem::replace(&mut seen_part[part[h]], true) {
                free[h] = Some(n_free);
                n_free += 1;
            }
        }
        let n_obs: usize = runs.iter().map(Vec::len).sum();
        let df = n_obs as f64 - (runs.len() + n_free) as f64;
        if df < 1.0 {
            return HostOffsets::default();
        }
        // C and Q over the free hosts.
        let mut c = vec![vec![0.0; n_free]; n_free];
        let mut q = vec![0.0; n_free];
        let mut means = Vec::with_capacity(runs.len());
        for config in &runs {
            let n = config.len() as f64;
            let mean = config.iter().map(|r| r.1).sum::<f64>() / n;
            means.push(mean);
            let mut counts: BTreeMap<usize, f64> = BTreeMap::new();
            for &(h, v) in config {
                if let Some(f) = free[h] {
                    *counts.entry(f).or_default() += 1.0;
                    q[f] += v - mean;
                }
            }
            for (&f, &nf) in &counts {
                c[f][f] += nf;
                for (&g, &ng) in &counts {
                    c[f][g] -= nf * ng / n;
                }
            }
        }
        let Some(c_inv) = spd_inverse(&c) else {
            return HostOffsets::default();
        };
        let offset_free: Vec<f64> = c_inv
            .iter()
            .map(|row| row.iter().zip(&q).map(|(a, b)| a * b).sum())
            .collect();
        let value = |h: usize| free[h].map_or(0.0, |f| offset_free[f]);
        // Residuals: each run less its config's fitted effect and its
        // host's offset.
        let mut ss = 0.0;
        for config in &runs {
            let n = config.len() as f64;
            let effect = config.iter().map(|&(h, v)| v - value(h)).sum::<f64>() / n;
            ss += config
                .iter()
                .map(|&(h, v)| (v - value(h) - effect).powi(2))
                .sum::<f64>();
        }
        let hosts = index
            .into_iter()
            .map(|(name, h)| {
                (
                    name.to_string(),
                    Host {
                        value: value(h),
                        free: free[h],
                        part: part[h],
                    },
                )
            })
            .collect();
        HostOffsets {
            hosts,
            c_inv,
            residual: ss / df,
            df,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// A config's side of an adjusted comparison, from its `runs` by
    /// host: worked out once for a config compared with several others
    /// ([`Units::side`]). `None` where a host of it has no offset, or its
    /// runs leave no degrees of freedom.
    pub fn side(&self, runs: &BTreeMap<String, Vec<f64>>) -> Option<Side> {
        Side::of(runs, self)
    }

    /// `xᵀ C⁻¹ y` for sparse `x` and `y` over the free hosts.
    fn form(&self, x: &[(usize, f64)], y: &[(usize, f64)]) -> f64 {
        x.iter()
            .map(|&(i, a)| {
                let row = &self.c_inv[i];
                a * y.iter().map(|&(j, b)| row[j] * b).sum::<f64>()
            })
            .sum()
    }
}

/// The inverse of a symmetric positive definite matrix (Cholesky); `None`
/// when it is not positive definite (a part of the design whose hosts the
/// configs do not join).
fn spd_inverse(a: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let n = a.len();
    let mut l = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let d = a[i][i] - s;
                // Not positive (or NaN): not positive definite.
                if d.is_nan() || d <= 1e-9 * a[i][i].abs().max(1.0) {
                    return None;
                }
                l[i][i] = d.sqrt();
            } else {
                l[i][j] = (a[i][j] - s) / l[j][j];
            }
        }
    }
    // Solve L Lᵀ x = e_col for every column.
    let mut inv = vec![vec![0.0; n]; n];
    for col in 0..n {
        let mut y = vec![0.0; n];
        for i in 0..n {
            let e = if i == col { 1.0 } else { 0.0 };
            let s: f64 = (0..i).map(|k| l[i][k] * y[k]).sum();
            y[i] = (e - s) / l[i][i];
        }
        let mut x = vec![0.0; n];
        for i in (0..n).rev() {
            let s: f64 = (i + 1..n).map(|k| l[k][i] * x[k]).sum();
            x[i] = (y[i] - s) / l[i][i];
        }
        for (row, v) in inv.iter_mut().zip(x) {
            row[col] = v;
        }
    }
    Some(inv)
}

/// Whether every run of `a` is on a host where `b` ran too.
fn covered(a: &BTreeMap<String, Vec<f64>>, b: &BTreeMap<String, Vec<f64>>) -> bool {
    a.iter()
        .filter(|(_, v)| !v.is_empty())
        .all(|(h, _)| b.get(h).is_some_and(|v| !v.is_empty()))
}

/// One side of an adjusted comparison: a config's runs read with its
/// cell's offsets ([`HostOffsets::side`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    n: f64,
    /// Its mean run value less offsets.
    mean: f64,
    /// Its share of runs on each free host, by host index.
    share: Vec<(usize, f64)>,
    /// Its own variance and degrees of freedom (leverage taken off).
    var: f64,
    df: f64,
}

impl Side {
    fn of(runs: &BTreeMap<String, Vec<f64>>, o: &HostOffsets) -> Option<Side> {
        let mut adjusted = Vec::new();
        let mut counts: BTreeMap<usize, f64> = BTreeMap::new();
        for (host, values) in runs {
            let h = o.hosts.get(host)?;
            for v in values.iter().filter(|v| v.is_finite()) {
                adjusted.push(v - h.value);
                if let Some(f) = h.free {
                    *counts.entry(f).or_default() += 1.0;
                }
            }
        }
        let n = adjusted.len() as f64;
        if n < 2.0 {
            return None;
        }
        let mean = adjusted.iter().sum::<f64>() / n;
        let ss: f64 = adjusted.iter().map(|x| (x - mean).powi(2)).sum();
        let share: Vec<(usize, f64)> = counts.iter().map(|(&f, &k)| (f, k / n)).collect();
        // The runs' leverage: 1 for the config's mean, and for the
        // offsets Σ_h n_h C⁻¹_hh − n aᵀ C⁻¹ a.
        let diag: f64 = counts.iter().map(|(&f, &k)| k * o.c_inv[f][f]).sum();
        let leverage = 1.0 + diag - n * o.form(&share, &share);
        let df = n - leverage;
        if df < 0.5 {
            return None;
        }
        Some(Side {
            n,
            mean,
            share,
            var: ss / df,
            df,
        })
    }
}

/// A config's units by host, with its side of an adjusted comparison
/// where it was worked out before ([`HostOffsets::side`], with the same
/// offsets): otherwise it is worked out for the comparison.
#[derive(Debug, Clone, Copy)]
pub struct Units<'a> {
    pub runs: &'a BTreeMap<String, Vec<f64>>,
    pub side: Option<&'a Side>,
}

impl<'a> Units<'a> {
    /// Units whose side is worked out when needed.
    pub fn of(runs: &'a BTreeMap<String, Vec<f64>>) -> Self {
        Units { runs, side: None }
    }
}

/// The log speedup of `cand` over `reference` from their units by host,
/// with the cell's host `offsets` (see the module's notes): over every
/// run of both. Within hosts, as [`estimate_units`], where that leaves no
/// run out, where a side's units are the samples of its single run, or
/// where the offsets cannot serve (none fitted, a host without one, the
/// two sides in different parts of the design). `None` when a side has
/// fewer than two units.
pub fn estimate_adjusted(
    reference: &BTreeMap<String, Vec<f64>>,
    cand: &BTreeMap<String, Vec<f64>>,
    samples_as_runs: bool,
    offsets: &HostOffsets,
) -> Option<Estimate> {
    estimate_adjusted_units(
        Units::of(reference),
        Units::of(cand),
        samples_as_runs,
        offsets,
    )
}

/// [`estimate_adjusted`], with either side's [`Side`] where it is known.
pub fn estimate_adjusted_units(
    reference_units: Units<'_>,
    cand_units: Units<'_>,
    samples_as_runs: bool,
    offsets: &HostOffsets,
) -> Option<Estimate> {
    let (reference, cand) = (reference_units.runs, cand_units.runs);
    let within = || estimate_units(reference, cand, samples_as_runs);
    if samples_as_runs
        || offsets.is_empty()
        || (covered(cand, reference) && covered(reference, cand))
    {
        return within();
    }
    let mut part = None;
    for host in cand.keys().chain(reference.keys()) {
        let Some(h) = offsets.hosts.get(host) else {
            return within();
        };
        if *part.get_or_insert(h.part) != h.part {
            return within();
        }
    }
    fn side<'a>(u: Units<'a>, offsets: &HostOffsets) -> Option<std::borrow::Cow<'a, Side>> {
        match u.side {
            Some(s) => Some(std::borrow::Cow::Borrowed(s)),
            None => Side::of(u.runs, offsets).map(std::borrow::Cow::Owned),
        }
    }
    let (Some(c), Some(r)) = (side(cand_units, offsets), side(reference_units, offsets)) else {
        return within();
    };
    let w = difference(&c.share, &r.share);
    let offsets_var = offsets.residual * offsets.form(&w, &w).max(0.0);
    let parts = [
        (c.var / c.n, c.df),
        (r.var / r.n, r.df),
        (offsets_var, offsets.df),
    ];
    Some(Estimate {
        log: c.mean - r.mean,
        var: parts.iter().map(|p| p.0).sum(),
        df: satterthwaite(parts.into_iter()),
        runs: (c.n as usize, r.n as usize),
        samples_as_runs,
    })
}

/// `a − b` for two sparse vectors, sorted by index.
fn difference(a: &[(usize, f64)], b: &[(usize, f64)]) -> Vec<(usize, f64)> {
    let mut w: BTreeMap<usize, f64> = a.iter().copied().collect();
    for &(i, v) in b {
        *w.entry(i).or_default() -= v;
    }
    w.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn side(runs: &[(&str, f64)]) -> BTreeMap<String, Vec<f64>> {
        let mut m: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for (h, v) in runs {
            m.entry(h.to_string()).or_default().push(*v);
        }
        m
    }

    /// Offsets are recovered from a connected design, a comparison uses
    /// every run, and across parts of a disconnected design the offsets
    /// say nothing.
    #[test]
    fn offsets_are_fitted_over_every_config() {
        // Hosts a, b, c offset by +0.1, 0, −0.1; configs 1 and 2 differ by
        // 0.05; config 1 never ran on c, config 2 never on a.
        let c1 = side(&[("a", 1.1), ("a", 1.1), ("b", 1.0)]);
        let c2 = side(&[("b", 1.05), ("c", 0.95), ("c", 0.95)]);
        let c3 = side(&[("a", 1.3), ("c", 1.1)]);
        let c4 = side(&[("a", 1.4), ("b", 1.31), ("c", 1.2)]);
        let o = HostOffsets::fit([&c1, &c2, &c3, &c4]);
        let value = |h: &str| o.hosts[h].value;
        assert!((value("a") - value("b") - 0.1).abs() < 0.01, "{o:?}");
        assert!((value("b") - value("c") - 0.1).abs() < 0.01, "{o:?}");
        let e = estimate_adjusted(&c1, &c2, false, &o).expect("an estimate");
        assert!((e.log - 0.05).abs() < 0.01, "{e:?}");
        assert_eq!(e.runs, (3, 3));
        // Two parts: {a, b} and {c, d}; no config joins them.
        let d1 = side(&[("a", 1.0), ("b", 1.2)]);
        let d2 = side(&[("c", 1.0), ("d", 1.4), ("d", 1.4)]);
        let d3 = side(&[("a", 1.1), ("b", 1.3), ("a", 1.12)]);
        let d4 = side(&[("c", 1.1), ("d", 1.5), ("c", 1.13)]);
        let o = HostOffsets::fit([&d1, &d2, &d3, &d4]);
        assert_ne!(o.hosts["a"].part, o.hosts["c"].part, "{o:?}");
        assert_eq!(
            estimate_adjusted(&d1, &d2, false, &o),
            estimate_units(&d1, &d2, false)
        );
    }

    /// A side worked out once, for all of a config's comparisons, gives
    /// the estimate a side worked out for the comparison gives.
    #[test]
    fn a_side_worked_out_once_serves_every_comparison() {
        let c1 = side(&[("a", 1.1), ("a", 1.1), ("b", 1.0), ("d", 0.8)]);
        let c2 = side(&[("b", 1.05), ("c", 0.95), ("c", 0.95)]);
        let c3 = side(&[("a", 1.3), ("c", 1.1), ("d", 1.02)]);
        let c4 = side(&[("a", 1.4), ("b", 1.31), ("c", 1.2), ("d", 1.1)]);
        let o = HostOffsets::fit([&c1, &c2, &c3, &c4]);
        let sides: Vec<Option<Side>> = [&c1, &c2, &c3].iter().map(|c| o.side(c)).collect();
        assert!(sides.iter().all(Option::is_some), "{sides:?}");
        for (i, a) in [&c1, &c2, &c3].into_iter().enumerate() {
            for (j, b) in [&c1, &c2, &c3].into_iter().enumerate() {
                let known = estimate_adjusted_units(
                    Units {
                        runs: a,
                        side: sides[i].as_ref(),
                    },
                    Units {
                        runs: b,
                        side: sides[j].as_ref(),
                    },
                    false,
                    &o,
                );
                assert_eq!(known, estimate_adjusted(a, b, false, &o), "{i} {j}");
            }
        }
        assert_eq!(
            difference(&[(0, 1.0), (2, 3.0)], &[(1, 1.0), (2, 1.0), (5, 2.0)]),
            vec![(0, 1.0), (1, -1.0), (2, 2.0), (5, -2.0)]
        );
    }

    /// Where both sides ran on the same hosts, nothing changes.
    #[test]
    fn a_paired_comparison_stays_within_hosts() {
        let b = side(&[("a", 1.0), ("a", 1.02), ("b", 0.9), ("b", 0.93)]);
        let c = side(&[("a", 1.1), ("a", 1.12), ("b", 1.01), ("b", 1.0)]);
        let o = HostOffsets::fit([&b, &c]);
        assert_eq!(
            estimate_adjusted(&b, &c, false, &o),
            estimate_units(&b, &c, false)
        );
    }

    fn normal(rng: &mut ChaCha8Rng) -> f64 {
        // Box–Muller.
        let (u, v): (f64, f64) = (rng.random(), rng.random());
        (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Fleets of `hosts` hosts with offsets of 3 %: two configs of
    /// `runs` runs each (placed on hosts at random, as a launch spreads
    /// them) among `others` configs of 5 runs, 3.4 % noise a run. Returns
    /// how often the adjusted 95 % interval covers the truth, how often
    /// it is narrower than the within-host one, over `fleets`.
    fn coverage(hosts: usize, runs: usize, others: usize, fleets: usize, seed: u64) -> (f64, f64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut hit, mut narrower) = (0, 0);
        for _ in 0..fleets {
            let host_offset: Vec<f64> = (0..hosts).map(|_| 0.03 * normal(&mut rng)).collect();
            let truth = 0.02;
            let mut configs: Vec<BTreeMap<String, Vec<f64>>> = Vec::new();
            for c in 0..others + 2 {
                let effect = match c {
                    0 => 0.0,
                    1 => truth,
                    _ => 0.1 * normal(&mut rng),
                };
                let mut m: BTreeMap<String, Vec<f64>> = BTreeMap::new();
                for _ in 0..if c < 2 { runs } else { 5 } {
                    let h = rng.random_range(0..hosts);
                    let v = effect + host_offset[h] + 0.034 * normal(&mut rng);
                    m.entry(format!("h{h:03}")).or_default().push(v);
                }
                configs.push(m);
            }
            let o = HostOffsets::fit(configs.iter());
            let e = estimate_adjusted(&configs[0], &configs[1], false, &o).expect("adjusted");
            let (lo, hi) = e.log_bounds(0.95);
            hit += usize::from(lo <= truth && truth <= hi);
            narrower += usize::from(
                estimate_units(&configs[0], &configs[1], false)
                    .is_none_or(|w| e.half_width(0.95) < w.half_width(0.95)),
            );
        }
        (hit as f64 / fleets as f64, narrower as f64 / fleets as f64)
    }

    /// The adjusted interval keeps its level where host offsets are poorly
    /// known (2.6 runs a host) and where they are well known (13 a host),
    /// and it is the narrower one: every run counts.
    #[test]
    fn on_many_hosts_every_run_counts_and_the_interval_keeps_its_level() {
        for (hosts, others, seed) in [(100, 40, 7), (100, 250, 8), (30, 60, 9)] {
            let (covered, narrower) = coverage(hosts, 30, others, 400, seed);
            assert!(
                (0.92..=0.98).contains(&covered),
                "{hosts} hosts, {others} others: coverage {covered}"
            );
            assert!(
                narrower > 0.9,
                "{hosts} hosts, {others} others: narrower {narrower}"
            );
        }
    }
}
