//! `measurement:`: warm-ups and repeats, anchors and cool-downs, the
//! confirmation round and racing's cap.

use std::time::Duration;

use marked_yaml::Node;
use serde::Serialize;

use super::parse::ser_secs;
use crate::spec::yaml::{Walker, join};

#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub warmup: u32,
    pub repeats: u32,
    /// Re-measure the baseline on a host after every this many candidate
    /// trials of a cell (0: never).
    pub anchor_every: u32,
    /// An anchor this much worse than the best anchor of its cell means the
    /// host drifted (thermal throttling, a noisy neighbour).
    pub cool_drift: f64,
    /// A cooling host is back once its anchor is within this of the best.
    pub cool_eps: f64,
    /// First wait of the cool-down back-off (doubles each retry).
    #[serde(serialize_with = "ser_secs")]
    pub cool_wait: Duration,
    /// Longest total cool-down before the cell is dropped on that host.
    #[serde(serialize_with = "ser_secs")]
    pub cool_max_wait: Duration,
    /// Most anchor re-measurements in one cool-down.
    pub cool_max_retry: u32,
    /// Interleaved baseline/winner pairs in the final confirmation round of
    /// each bucket, at least (0: no confirmation, decisions stay drafts);
    /// the round takes more when the sweep's estimate needs them to
    /// confirm, up to `max_repeats`.
    pub confirm_repeats: u32,
    /// Most sweep runs a config gets at a cell when its decision is close
    /// (racing), and most runs a side in the confirmation round. Left out
    /// of the frozen spec at its default, so older studies keep their
    /// hashes.
    #[serde(skip_serializing_if = "is_default_max_repeats")]
    pub max_repeats: u32,
}

/// `measurement.max_repeats` when the study does not say.
pub const DEFAULT_MAX_REPEATS: u32 = 30;

fn is_default_max_repeats(n: &u32) -> bool {
    *n == DEFAULT_MAX_REPEATS
}

impl Default for Measurement {
    fn default() -> Self {
        Measurement {
            warmup: 1,
            repeats: 3,
            anchor_every: 4,
            cool_drift: 0.10,
            cool_eps: 0.03,
            cool_wait: Duration::from_secs(5),
            cool_max_wait: Duration::from_secs(600),
            cool_max_retry: 5,
            confirm_repeats: 3,
            max_repeats: DEFAULT_MAX_REPEATS,
        }
    }
}

pub(super) fn parse_measurement(w: &mut Walker, node: &Node) -> Option<Measurement> {
    let map = w.mapping(node, "measurement")?;
    w.check_keys(
        map,
        "measurement",
        &[
            "warmup",
            "repeats",
            "anchor_every",
            "cool_drift",
            "cool_eps",
            "cool_wait",
            "cool_max_wait",
            "cool_max_retry",
            "confirm_repeats",
            "max_repeats",
        ],
    );
    let d = Measurement::default();
    let mut ok = true;
    let mut count = |w: &mut Walker, key: &str, default: u32, min: u32, max: u32| -> u32 {
        match map.get_node(key) {
            Some(n) => w
                .u32_in(n, &join("measurement", key), min, max)
                .unwrap_or_else(|| {
                    ok = false;
                    default
                }),
            None => default,
        }
    };
    let warmup = count(w, "warmup", d.warmup, 0, 100);
    let repeats = count(w, "repeats", d.repeats, 1, 10_000);
    let anchor_every = count(w, "anchor_every", d.anchor_every, 0, 1_000_000);
    let cool_max_retry = count(w, "cool_max_retry", d.cool_max_retry, 1, 1000);
    let confirm_repeats = count(w, "confirm_repeats", d.confirm_repeats, 0, 1000);
    let max_repeats = count(w, "max_repeats", d.max_repeats, 1, 10_000);
    let fraction = |w: &mut Walker, key: &str, default: f64| -> Option<f64> {
        match map.get_node(key) {
            Some(n) => {
                let f = join("measurement", key);
                let v = w.float(n, &f)?;
                if !(v > 0.0 && v < 1.0) {
                    w.error_at(
                        n,
                        &f,
                        format!("must be a fraction between 0 and 1 (e.g. 0.1 for 10%), found {v}"),
                    );
                    return None;
                }
                Some(v)
            }
            None => Some(default),
        }
    };
    let cool_drift = fraction(w, "cool_drift", d.cool_drift);
    let cool_eps = fraction(w, "cool_eps", d.cool_eps);
    let duration = |w: &mut Walker, key: &str, default: Duration| -> Option<Duration> {
        match map.get_node(key) {
            Some(n) => w.duration(n, &join("measurement", key)),
            None => Some(default),
        }
    };
    let cool_wait = duration(w, "cool_wait", d.cool_wait);
    let cool_max_wait = duration(w, "cool_max_wait", d.cool_max_wait);
    let (cool_drift, cool_eps) = (cool_drift?, cool_eps?);
    if cool_eps >= cool_drift
        && let Some(n) = map.get_node("cool_eps").or(map.get_node("cool_drift"))
    {
        w.error_at(
            n,
            "measurement.cool_eps",
            format!("cool_eps ({cool_eps}) must be smaller than cool_drift ({cool_drift})"),
        );
        return None;
    }
    if !ok {
        return None;
    }
    Some(Measurement {
        warmup,
        repeats,
        anchor_every,
        cool_drift,
        cool_eps,
        cool_wait: cool_wait?,
        cool_max_wait: cool_max_wait?,
        cool_max_retry,
        confirm_repeats,
        max_repeats,
    })
}
