//! Drift: the scheduler's side of anchors. The driver measures; this file
//! decides what a measurement means (statistics in `drift.rs`).
//!
//! An anchor is judged against the host's reference. A clean one makes the
//! readings since the last clean anchor clean. A suspect one (past the
//! drift threshold) asks for a burst: two more anchors at once; the host
//! has drifted only if the median of the three is past the threshold the
//! same way. Worse: the host's measurements since its last clean anchor
//! are voided and it cools down ([`Cooldown`]) until an anchor settles, or
//! drops the cell. Better: what came before was measured in a slower state
//! and is measured again.
//!
//! A bucket's confirmation round needs no extra anchors: its baseline runs
//! are measured beside the winner anyway, and each is judged as the first
//! anchor of a check ([`Check::Reading`]). What a drift voids then is the
//! round's runs since its last clean check; the sweep runs after the
//! sweep's last anchor are left to the round, whose interleaving measures
//! the winner and the baseline in the same state.

use std::time::Duration;

use super::drift::{Judgement, K_DRIFT, K_SETTLE, Reading, Thresholds, Watch, shortfall};
use super::{Kind, Ran, Scheduler, Unit};
use crate::launch::events::{Against, DropReason, LaunchEvent, Setting, Threshold};

/// Drift watch of one cell on one host.
#[derive(Default)]
pub(super) struct Drift {
    /// The readings an anchor is judged against.
    watch: Watch,
    /// Sweep (or, once the cell's confirmation round runs here, that
    /// round's) attempts since the last clean anchor.
    since_clean: Vec<Void>,
    /// Candidate trials since the last anchor.
    sweeps: u32,
    /// The first anchor of a burst, judged a suspect.
    suspect: Option<Judgement>,
    /// The cell's confirmation round has run on this host.
    confirming: bool,
}

/// What a finished unit asks of its host's drift watch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Check {
    /// Nothing now.
    None,
    /// Measure an anchor (the baseline, once) and pass it to
    /// `first_anchor`.
    Anchor,
    /// Pass this reading to `first_anchor` as the check's first anchor: a
    /// confirmation round's baseline run, measured anyway.
    Reading(Reading),
}

impl Check {
    /// Whether a check is due (the driver calls `anchor_over` after it).
    pub fn is_due(self) -> bool {
        self != Check::None
    }
}

/// A measurement to discard: its attempt and the unit that runs again.
#[derive(Debug, Clone, PartialEq)]
pub struct Void {
    pub key: String,
    pub attempt_id: String,
    pub unit: Unit,
}

/// Why measurements were discarded (the void records' reason).
#[derive(Debug, Clone, PartialEq)]
pub enum VoidReason {
    /// The host was slower before the anchors than after.
    WasSlower {
        host: String,
        cell: String,
        gain: f64,
    },
    Drifted {
        host: String,
        cell: String,
        drift: f64,
    },
}

/// What the first anchor of a check asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnchorStep {
    /// Judged (clean, the reference's first reading, or `--no-cooldown`).
    Done,
    /// A suspect: measure two more anchors and pass all three to `burst`.
    Burst,
}

/// What a burst of three anchors decided.
#[derive(Debug)]
pub enum Burst {
    Clean,
    /// Better than the reference: void these (with the reason), then
    /// `requeue` them; no cool-down.
    WasSlow {
        voids: Vec<Void>,
        reason: VoidReason,
    },
    /// Worse: void these, cool down with the [`Cooldown`], then `cooled`.
    Hot {
        voids: Vec<Void>,
        reason: VoidReason,
        cooldown: Cooldown,
    },
}

/// A host cooling down: each anchor after a back-off is compared with the
/// reference (when clean readings backed it) or with the anchor before it
/// (when only the discarded readings did: the host is stable again when
/// two anchors in a row agree).
#[derive(Debug, Clone)]
pub struct Cooldown {
    /// Thresholds for one anchor (what settling is judged with).
    one: Thresholds,
    settle_floor: f64,
    backed: bool,
    previous: f64,
    higher: bool,
    /// How far off the last anchor was.
    pub last: f64,
    /// Anchors taken.
    pub tries: u32,
}

impl Cooldown {
    /// Another try begins (a back-off, then an anchor).
    pub fn start_try(&mut self) {
        self.tries += 1;
    }

    /// Take the try's anchor value; `true` when it settled.
    pub fn take(&mut self, value: f64) -> bool {
        self.last = if self.backed {
            shortfall(self.one.reference, value, self.higher)
        } else {
            shortfall(self.previous, value, self.higher).max(shortfall(
                value,
                self.previous,
                self.higher,
            ))
        };
        self.previous = value;
        self.last <= self.one.settle
    }

    fn against(&self) -> Against {
        if self.backed {
            Against::Reference
        } else {
            Against::AnchorBefore
        }
    }

    fn settle_threshold(&self) -> Threshold {
        threshold(&self.one, Setting::CoolEps, self.settle_floor)
    }
}

fn threshold(t: &Thresholds, setting: Setting, floor: f64) -> Threshold {
    let (value, k) = match setting {
        Setting::CoolDrift => (t.drift, K_DRIFT),
        Setting::CoolEps => (t.settle, K_SETTLE),
    };
    Threshold {
        value,
        floor,
        setting,
        k,
        noise: t.noise,
    }
}

impl Scheduler<'_> {
    fn higher_is_better(&self) -> bool {
        self.s.study.objective.better == crate::spec::Better::Higher
    }

    /// A sweep unit ended ok on `host`: it joins the drift watch. Returns
    /// whether an anchor is due.
    pub(super) fn sweep_measured(&mut self, host: usize, unit: Unit, r: &Ran) -> Check {
        debug_assert_eq!(unit.kind, Kind::Sweep);
        let every = self.s.study.measurement.anchor_every;
        let d = self.st.drift.entry((host, unit.cell)).or_default();
        if unit.pos == 0
            && let Some(v) = r.value
        {
            d.watch.baseline(v);
        }
        d.since_clean.push(Void {
            key: r.key.clone(),
            attempt_id: r.attempt_id.clone(),
            unit,
        });
        if unit.pos > 0 {
            d.sweeps += 1;
            if every > 0 && d.sweeps >= every {
                d.sweeps = 0;
                return Check::Anchor;
            }
        }
        Check::None
    }

    /// A confirmation unit ended ok on `host`: it may be voided by the next
    /// check, and a baseline run is that check's first anchor (unless
    /// drift checks are off: `anchor_every: 0`).
    pub(super) fn confirm_measured(&mut self, host: usize, unit: Unit, r: &Ran) -> Check {
        debug_assert_eq!(unit.kind, Kind::Confirm);
        let every = self.s.study.measurement.anchor_every;
        let d = self.st.drift.entry((host, unit.cell)).or_default();
        if !d.confirming {
            // The sweep's tail is judged by the round itself (see the
            // module's comment); its bucket step is already taken.
            d.confirming = true;
            d.since_clean.clear();
            d.sweeps = 0;
        }
        d.since_clean.push(Void {
            key: r.key.clone(),
            attempt_id: r.attempt_id.clone(),
            unit,
        });
        match r.value {
            Some(v) if unit.pos == 0 && every > 0 => Check::Reading(v),
            _ => Check::None,
        }
    }

    /// An anchor joins the launch (counted).
    pub fn anchor_started(&mut self) {
        self.out.push(LaunchEvent::AnchorStarted);
    }

    /// An anchor of `host` at `cell` failed: drift is not checked.
    pub fn anchor_failed(&mut self, host: usize, cell: u32) {
        self.out.push(LaunchEvent::AnchorFailed {
            host: self.s.host_names[host].clone(),
            cell: self.s.cell_label(cell),
        });
    }

    /// Judge the first anchor of a check.
    pub fn first_anchor(&mut self, host: usize, cell: u32, first: Reading) -> AnchorStep {
        let m = &self.s.study.measurement;
        let higher = self.higher_is_better();
        let no_cooldown = self.s.no_cooldown;
        let d = self.st.drift.entry((host, cell)).or_default();
        let Some(t) = d.watch.thresholds(&[first], m.cool_drift, m.cool_eps) else {
            // Nothing to compare with yet: the anchor starts the reference.
            d.watch.clean(&[first]);
            d.since_clean.clear();
            return AnchorStep::Done;
        };
        let judgement = Watch::judge(&t, &[first], higher);
        if no_cooldown || judgement == Judgement::Clean {
            d.watch.clean(&[first]);
            d.since_clean.clear();
            if let Judgement::Worse(x) | Judgement::Better(x) = judgement {
                self.out.push(LaunchEvent::DriftKept {
                    host: self.s.host_names[host].clone(),
                    cell: self.s.cell_label(cell),
                    drift: x,
                    threshold: threshold(&t, Setting::CoolDrift, m.cool_drift),
                });
            }
            return AnchorStep::Done;
        }
        d.suspect = Some(judgement);
        AnchorStep::Burst
    }

    /// Judge a burst: the suspect anchor and two more.
    pub fn burst(&mut self, host: usize, cell: u32, burst: &[Reading]) -> Burst {
        let m = &self.s.study.measurement;
        let higher = self.higher_is_better();
        let host_name = self.s.host_names[host].clone();
        let label = self.s.cell_label(cell);
        let d = self.st.drift.entry((host, cell)).or_default();
        let suspect = d.suspect.take();
        let Some(t) = d.watch.thresholds(burst, m.cool_drift, m.cool_eps) else {
            return Burst::Clean;
        };
        let one = d
            .watch
            .thresholds(&burst[..1.min(burst.len())], m.cool_drift, m.cool_eps)
            .unwrap_or(t);
        match (suspect, Watch::judge(&t, burst, higher)) {
            (Some(Judgement::Worse(_)), Judgement::Worse(drift)) => {
                let backed = d.watch.has_clean();
                d.watch.discard_provisional();
                let voids = std::mem::take(&mut d.since_clean);
                self.st.cooling.insert(host);
                let values: Vec<f64> = burst.iter().map(|r| r.value).collect();
                let previous = crate::stats::median(&values).unwrap_or(one.reference);
                self.out.push(LaunchEvent::Drifted {
                    host: host_name.clone(),
                    cell: label.clone(),
                    drift,
                    threshold: threshold(&t, Setting::CoolDrift, m.cool_drift),
                    discarded: voids.len(),
                });
                Burst::Hot {
                    voids,
                    reason: VoidReason::Drifted {
                        host: host_name,
                        cell: label,
                        drift,
                    },
                    cooldown: Cooldown {
                        one,
                        settle_floor: m.cool_eps,
                        backed,
                        previous,
                        higher,
                        last: drift,
                        tries: 0,
                    },
                }
            }
            (Some(Judgement::Better(_)), Judgement::Better(gain)) => {
                d.watch.restart(burst);
                let voids = std::mem::take(&mut d.since_clean);
                self.out.push(LaunchEvent::WasSlower {
                    host: host_name.clone(),
                    cell: label.clone(),
                    gain,
                    threshold: threshold(&t, Setting::CoolDrift, m.cool_drift),
                    remeasured: voids.len(),
                });
                Burst::WasSlow {
                    voids,
                    reason: VoidReason::WasSlower {
                        host: host_name,
                        cell: label,
                        gain,
                    },
                }
            }
            _ => {
                d.watch.clean(burst);
                d.since_clean.clear();
                Burst::Clean
            }
        }
    }

    /// A cool-down ended: settled on `settled_with` (which becomes a clean
    /// reading), or not (`None`; `stopped`: the launch is stopping, so the
    /// cell is not dropped). The voided units run again. Returns why the
    /// cell was dropped, for the ledger's drop record.
    #[allow(clippy::too_many_arguments)]
    pub fn cooled(
        &mut self,
        class: usize,
        host: usize,
        cell: u32,
        voids: &[Void],
        cooldown: &Cooldown,
        settled_with: Option<Reading>,
        stopped: bool,
        waited: Duration,
    ) -> Option<DropReason> {
        if let Some(v) = settled_with {
            self.st
                .drift
                .entry((host, cell))
                .or_default()
                .watch
                .settled(v);
        }
        let dropped = settled_with.is_none() && !stopped;
        self.requeue(class, cell, voids, Some((host, dropped)));
        let host_name = self.s.host_names[host].clone();
        let label = self.s.cell_label(cell);
        if settled_with.is_some() {
            self.out.push(LaunchEvent::CooledDown {
                host: host_name,
                cell: label,
                off: cooldown.last,
                against: cooldown.against(),
                threshold: cooldown.settle_threshold(),
                tries: cooldown.tries,
                remeasured: voids.len() as u64,
            });
            return None;
        }
        if !dropped {
            return None;
        }
        let reason = DropReason {
            threshold: cooldown.settle_threshold(),
            tries: cooldown.tries,
            waited,
            last: cooldown.last,
            against: cooldown.against(),
        };
        self.out.push(LaunchEvent::CellDropped {
            host: host_name,
            cell: label,
            reason: reason.clone(),
        });
        Some(reason)
    }
}
