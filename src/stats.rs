//! Robust statistics for timing samples.
//!
//! The centre is the median; the spread is the scaled median absolute
//! deviation, 1.4826 × median(|xᵢ − median|), which estimates the standard
//! deviation for normal data while ignoring outliers (Rousseeuw & Croux,
//! "Alternatives to the Median Absolute Deviation", JASA 1993).

use serde::Serialize;

pub mod offsets;
pub mod speedup;

/// Scale that makes the MAD consistent with the standard deviation.
pub const MAD_SCALE: f64 = 1.4826;

pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// 1.4826 × MAD.
pub fn scaled_mad(xs: &[f64]) -> Option<f64> {
    let m = median(xs)?;
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    median(&dev).map(|d| d * MAD_SCALE)
}

/// Median, spread and sample count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    /// 1.4826 × MAD, in the metric's unit.
    pub spread: f64,
}

impl Summary {
    pub fn of(xs: &[f64]) -> Option<Summary> {
        Some(Summary {
            n: xs.len(),
            median: median(xs)?,
            spread: scaled_mad(xs)?,
        })
    }

    /// Spread relative to the median (0 when the median is 0).
    pub fn relative_spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.spread / self.median).abs()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_mad() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        // |x - 2| = 1, 1, 0, 1, 98 → median 1
        let s = Summary::of(&[1.0, 3.0, 2.0, 1.0, 100.0]).expect("samples");
        assert_eq!(s.median, 2.0);
        assert!((s.spread - 1.4826).abs() < 1e-12);
        assert_eq!(s.n, 5);
    }
}
