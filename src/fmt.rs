//! How numbers and durations are written for people: one function per
//! style, so that the same quantity reads the same in every message and
//! report.

use std::time::Duration;

/// A measured value in a table: about 4 significant digits, at most 6
/// decimals (`0.09385`, `12.35`, `1235`).
pub fn sig(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return exact(x);
    }
    let mag = x.abs().log10().floor() as i32;
    let decimals = (3 - mag).clamp(0, 6) as usize;
    format!("{x:.decimals$}")
}

/// A spread (the dispersion of single runs): 2 significant digits, at
/// most 6 decimals (`0.094`, `1.7`, `170`, `0`). A spread is itself known
/// to a few percent at best: more digits would only be noise.
pub fn spread(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return exact(x);
    }
    let mag = x.abs().log10().floor() as i32;
    let decimals = (1 - mag).clamp(0, 6) as usize;
    format!("{x:.decimals$}")
}

/// A measured value in a sentence: at most 3 decimals, no trailing zeros
/// (`76.3`, `0.125`, `4`).
pub fn short(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A value as given (a setting, a bound, an output value): its shortest
/// exact form, in exponent form when very small or very large (`1e-5`,
/// `0.0001`, `2.5e15`, `inf`, `NaN`).
pub fn exact(x: f64) -> String {
    if x.is_nan() {
        "NaN".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else if x == 0.0 || (1e-4..1e15).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// [`exact`] rounded to six significant digits (a computed bound).
pub fn exact6(x: f64) -> String {
    exact(format!("{x:.5e}").parse().unwrap_or(x))
}

/// A count with its noun, singular for one: `count(1, "trial", "trials")`
/// is `1 trial`, `count(3, ...)` is `3 trials`.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod count_tests {
    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(super::count(1u64, "trial", "trials"), "1 trial");
        assert_eq!(super::count(0u64, "trial", "trials"), "0 trials");
        assert_eq!(super::count(2u64, "cell", "cells"), "2 cells");
    }
}

/// Seconds as people read them, to the second (`1h 2m 5s`; negative: `0s`).
pub fn duration(secs: f64) -> String {
    let secs = if secs.is_finite() { secs.max(0.0) } else { 0.0 };
    humantime::format_duration(Duration::from_secs(secs.round() as u64)).to_string()
}

/// A short time span: tenths below 10 s (`1.2s`), else [`duration`]
/// (`45s`, `3m 20s`).
pub fn duration_short(secs: f64) -> String {
    if secs < 10.0 {
        format!("{:.1}s", secs.max(0.0))
    } else {
        duration(secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_style_reads_as_documented() {
        assert_eq!(sig(0.093851), "0.09385");
        assert_eq!(sig(12.3456), "12.35");
        assert_eq!(sig(1234.56), "1235");
        assert_eq!(sig(0.0), "0");
        assert_eq!(spread(0.093851), "0.094");
        assert_eq!(spread(1.704), "1.7");
        assert_eq!(spread(170.4), "170");
        assert_eq!(spread(0.0), "0");
        assert_eq!(short(76.3), "76.3");
        assert_eq!(short(4.0), "4");
        assert_eq!(short(0.1254), "0.125");
        assert_eq!(exact(1e-5), "1e-5");
        assert_eq!(exact(0.0001), "0.0001");
        assert_eq!(exact(4.0), "4");
        assert_eq!(exact(2.5e15), "2.5e15");
        assert_eq!(exact(f64::INFINITY), "inf");
        assert_eq!(exact(f64::NAN), "NaN");
        assert_eq!(exact6(3.1883700000001e-5), "3.18837e-5");
        assert_eq!(duration(3725.4), "1h 2m 5s");
        assert_eq!(duration(-3.0), "0s");
        assert_eq!(duration_short(1.23), "1.2s");
        assert_eq!(duration_short(200.0), "3m 20s");
    }
}
