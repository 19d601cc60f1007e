//! A bucket: what ships over its cells, and the configs to race where
//! the intervals cannot decide yet.

use super::*;

/// One config's standing over the cells of a bucket.
pub(super) struct Standing<'a> {
    pub(super) report: &'a ConfigReport,
    pub(super) config_index: u64,
    /// (cell label, its estimate against the baseline) per cell.
    pub(super) cells: Vec<(String, Estimate)>,
    /// Its report at each cell of the bucket, in the cells' order.
    pub(super) at_cells: Vec<&'a ConfigReport>,
    /// Over the bucket: the mean of the cells' log speedups.
    pub(super) est: Estimate,
}

impl Standing<'_> {
    /// The bucket's speedup: the geometric mean of the cells'.
    pub(super) fn geo(&self) -> f64 {
        self.est.log.exp()
    }

    pub(super) fn bounds(&self) -> (f64, f64) {
        self.est.log_bounds(CONFIDENCE)
    }

    /// Fewest sweep runs at any cell of the bucket.
    pub(super) fn runs(&self) -> usize {
        self.at_cells
            .iter()
            .map(|c| c.repeats_ended)
            .min()
            .unwrap_or(0)
    }

    /// The cell where it is shown slower than the baseline (its interval
    /// lies below 1), the slowest such: "no harm anywhere".
    pub(super) fn harm(&self) -> Option<(String, f64)> {
        self.cells
            .iter()
            .filter(|(_, e)| e.log_bounds(CONFIDENCE).1 < 0.0)
            .min_by(|a, b| a.1.log.total_cmp(&b.1.log))
            .map(|(cell, e)| (cell.clone(), e.log.exp()))
    }

    /// It compared with `leader` directly at every cell, merged over the
    /// bucket. `None` when a cell has too few runs on a side.
    pub(super) fn against(&self, leader: &Standing) -> Option<Estimate> {
        let per: Option<Vec<Estimate>> = leader
            .at_cells
            .iter()
            .zip(&self.at_cells)
            .map(|(l, c)| against_leader(l, c))
            .collect();
        Estimate::mean(&per?)
    }
}

/// The config a bucket ships among its `winners` (best estimate first):
/// the leader, or the one nearest the default that is shown equivalent to
/// it (compared with it directly at every cell): fewest knobs changed,
/// then label.
pub(super) fn pick<'a, 'b>(
    winners: &[&'b Standing<'a>],
    rules: &Rules,
) -> Option<&'b Standing<'a>> {
    let leader = winners.first()?;
    Some(
        winners
            .iter()
            .filter(|s| s.against(leader).is_some_and(|r| equivalent(&r, rules)))
            .min_by(|a, b| a.report.order.cmp(&b.report.order))
            .copied()
            .unwrap_or(leader),
    )
}

/// Where a bucket's intervals cannot decide yet, the configs that need
/// more runs (racing).
///
/// Without a winner: a config whose interval straddles the minimum
/// improvement and that could still win.
///
/// With one, what ships (`pick`) claims to be within the minimum of the
/// fastest config. A contender is raced, with the pick, until its
/// comparison with the pick shows it at most the minimum faster: being
/// "equivalent to the leader" is not enough, since the leader is only the
/// best estimate and a contender may beat it (and the pick) by more. A
/// contender nearer the default than the pick is also raced, with the
/// leader, while the tie rule could still prefer it: until it is shown
/// more than the minimum slower than the leader, or not to beat the
/// minimum. Clearly beaten configs get no more.
///
/// At most `RACE_WIDTH` configs per round, those with the highest upper
/// bounds first; configs at `max_repeats` runs are done.
pub(super) fn racing(
    standings: &[Standing],
    winners: &[&Standing],
    pick: Option<&Standing>,
    baseline_runs: usize,
    rules: &Rules,
) -> Option<Racing> {
    let tau = rules.tau();
    let cap = rules.max_repeats as usize;
    let leader = winners.first();
    // Indices into `standings`, with why.
    let mut want: Vec<(usize, RaceWhy)> = Vec::new();
    let mut add = |i: usize, why: RaceWhy| {
        if standings[i].runs() < cap && !want.iter().any(|(w, _)| *w == i) {
            want.push((i, why));
        }
    };
    let (mut leader_too, mut pick_too) = (false, false);
    // A bucket makes dozens of comparisons: at 95 % each, about one in
    // twenty would lie wholly on the wrong side by chance and settle a
    // faster config out of the race, leaving speed behind. The end of each
    // comparison whose error would do that is read at 1 − 0.05 / m for
    // the m contenders (Bonferroni); the other end, whose error costs
    // runs, not speed, stays at 95 %.
    let contenders = standings.iter().filter(|s| s.harm().is_none()).count();
    let settle = 1.0 - (1.0 - CONFIDENCE) / contenders.saturating_sub(1).max(1) as f64;
    for (i, s) in standings.iter().enumerate() {
        if s.harm().is_some() {
            continue;
        }
        let (lo, hi) = s.bounds();
        // A config whose estimate is below half the minimum is unlikely to
        // win (a true win of twice the minimum lands there about 1 time in
        // 100 at the sweep's precision): not worth more runs to pin down.
        let straddles = lo <= tau && tau < hi && s.est.log > tau / 2.0;
        let (Some(l), Some(p)) = (leader, pick) else {
            if straddles {
                add(i, RaceWhy::Straddles);
            }
            continue;
        };
        if p.report.label == s.report.label {
            continue;
        }
        // Shown at most the minimum faster than the pick?
        let beats_pick = s
            .against(p)
            .is_some_and(|rel| rel.log_bounds(settle).1 >= tau);
        // The tie rule could still prefer it: nearer the default, neither
        // shown more than the minimum slower than the leader nor shown not
        // to beat the minimum (not shown equivalent and a winner either,
        // or it would be the pick). An error here costs the tie rule's
        // preference, not speed (`beats_pick` guards that): read at 95 %.
        let tie_open = s.report.order < p.report.order
            && hi > tau
            && l.report.label != s.report.label
            && s.against(l)
                .is_some_and(|rel| rel.log_bounds(CONFIDENCE).1 >= -tau);
        if beats_pick || tie_open {
            add(
                i,
                if straddles {
                    RaceWhy::Straddles
                } else if beats_pick {
                    RaceWhy::MayBeatPick
                } else {
                    RaceWhy::CloseToLeader
                },
            );
            pick_too |= beats_pick;
            leader_too |= tie_open;
        }
    }
    let index_of = |x: Option<&&Standing>| {
        x.and_then(|x| {
            standings
                .iter()
                .position(|s| s.report.label == x.report.label)
        })
    };
    let (pick_index, leader_index) = (index_of(pick.as_ref()), index_of(leader));
    if pick_too && let Some(pi) = pick_index {
        add(pi, RaceWhy::Pick);
    }
    if leader_too && let Some(li) = leader_index {
        add(li, RaceWhy::Leader);
    }
    if want.is_empty() {
        return None;
    }
    // Those with the highest upper bounds first; the pick and the leader
    // stay in when they are raced against a contender.
    want.sort_by(|a, b| {
        standings[b.0]
            .bounds()
            .1
            .total_cmp(&standings[a.0].bounds().1)
    });
    for keep in [leader_index, pick_index].into_iter().flatten() {
        if let Some(p) = want.iter().position(|w| w.0 == keep)
            && p >= RACE_WIDTH
        {
            let x = want.remove(p);
            want.insert(0, x);
        }
    }
    let runs_now: Vec<usize> = want.iter().map(|w| standings[w.0].runs()).collect();
    let cells = want
        .iter()
        .map(|w| standings[w.0].cells.len())
        .max()
        .unwrap_or(1);
    let (width, runs) = round_size(
        &runs_now,
        baseline_runs,
        rules.repeats as usize,
        cells,
        rules.race_slots as usize,
        cap,
    );
    want.truncate(width);
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
        runs,
        why: want
            .iter()
            .map(|(i, why)| (standings[*i].report.label.clone(), *why))
            .collect(),
    })
}

/// Configs raced at once in a bucket (besides the baseline), where the
/// slots of the class are not known (`report`).
pub(super) const RACE_WIDTH: usize = 3;

/// A racing round: how many of the wanted configs it races (besides the
/// baseline) and the runs each should have at every cell after it (`cap`
/// at most), from the runs each wanted config has now (`runs_now`, in the
/// order they are wanted) and the baseline has (`baseline_runs`; it is
/// raced with them), `repeats`, the bucket's `cells` and the class's
/// `slots` (0: not known).
///
/// The rule's round: the first `RACE_WIDTH` configs, grown to the fewest
/// runs among them plus `repeats` or half again, whichever is more. Where
/// the slots are known and that round would leave some idle, the round
/// takes more of the wanted configs (to the same runs), then more runs for
/// all, as long as the trials it adds fit in the slots. Extra runs only
/// narrow the intervals the race reads; the verdict is the final round's,
/// which is sized on its own.
pub(super) fn round_size(
    runs_now: &[usize],
    baseline_runs: usize,
    repeats: usize,
    cells: usize,
    slots: usize,
    cap: usize,
) -> (usize, u32) {
    let first = &runs_now[..runs_now.len().min(RACE_WIDTH)];
    let least = first.iter().copied().min().unwrap_or(0);
    let mut runs = (least + repeats.max(least.div_ceil(2)).max(1)).min(cap);
    let mut width = first.len();
    if slots > 0 {
        // Trials a round of the first `width` configs (and the baseline)
        // to `runs` adds.
        let adds = |width: usize, runs: usize| -> usize {
            cells.max(1)
                * runs_now[..width]
                    .iter()
                    .chain([&baseline_runs])
                    .map(|r| runs.saturating_sub(*r))
                    .sum::<usize>()
        };
        while width < runs_now.len() && adds(width + 1, runs) <= slots {
            width += 1;
        }
        while runs < cap && adds(width, runs + 1) <= slots {
            runs += 1;
        }
    }
    (width, runs as u32)
}

pub(super) fn decide_buckets(
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
                    out.level_reason = LevelReasons::one(why);
                } else {
                    out.level_reason.0.push(why);
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
pub(super) fn unfinished(
    reports: &[&CellReport],
    cells: &[&BTreeMap<u64, Group>],
    plans: &[&PlanRecord],
) -> Option<LevelReason> {
    if plans.is_empty() {
        return Some(LevelReason::NoPlan);
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
    let u = Unfinished {
        left,
        planned,
        pending,
        searching,
        missing_plan,
    };
    u.any().then_some(LevelReason::Unfinished(u))
}

pub(super) fn decide_bucket(
    spec: &FrozenSpec,
    reports: &[&CellReport],
    cells: &[&BTreeMap<u64, Group>],
    objective: &str,
    rules: &Rules,
) -> BucketReport {
    let b = crate::plan::buckets::bucket_of(spec, &reports[0].cell);
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
                    rej.detail = [rej.detail.as_str(), " at ", r.cell_label.as_str()].concat();
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
        decision: Decision::NothingMeasured,
        level: Level::Draft,
        level_reason: LevelReasons::default(),
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
            Some(drop) => BaselineBecause::Dropped(drop.clone()),
            None => BaselineBecause::Cell(r.decision.clone()),
        };
        out.decision = Decision::BaselineUnusable {
            cell: r.cell_label.clone(),
            why,
        };
        // A baseline that fails reproducibly is an error of the study, not
        // a verdict on its candidates.
        out.level = Level::Draft;
        out.level_reason = LevelReasons::one(if r.baseline_state == BaselineState::Failed {
            LevelReason::BaselineFailsReproducibly
        } else {
            LevelReason::BaselineNotMeasuredEverywhere
        });
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
        if let Some(note) = r.notes.iter().find(|n| n.is_drop()) {
            out.decision = Decision::CellDropped {
                cell: r.cell_label.clone(),
                note: note.clone(),
            };
        }
        out.level = Level::Draft;
        out.level_reason = LevelReasons::one(LevelReason::CellDroppedMidSweep);
        return out;
    }
    // Drops matter while their cell is unfinished; a later launch that
    // measured it fully makes them history.
    let dropped: Vec<(String, CellNote)> = reports
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
                .map(move |n| (r.cell_label.clone(), n.clone()))
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
                est,
            });
        }
    }
    standings.sort_by(|a, b| {
        b.geo()
            .total_cmp(&a.geo())
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
                reason: RefusalReason::SlowerAt {
                    overall: s.geo(),
                    cell: cell.clone(),
                    speedup: sp,
                },
            });
        }
    }
    // The baseline's fewest runs at a cell of the bucket (raced with the
    // contenders).
    let baseline_runs = reports
        .iter()
        .map(|r| r.baseline.as_ref().map_or(0, |b| b.repeats_ended))
        .min()
        .unwrap_or(0);
    let picked = pick(&winners, rules);
    let race = racing(&standings, &winners, picked, baseline_runs, rules);
    let racing_reason = race.as_ref().map(|r| LevelReason::Racing {
        racing: r.clone(),
        max_repeats: rules.max_repeats,
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
        let best_of = |s: &Standing| Best {
            label: s.report.label.clone(),
            interval: s.est.interval(CONFIDENCE),
            min_improvement: rules.min_improvement,
        };
        out.decision = match best {
            _ if !out.refusals.is_empty() => Decision::Refused(out.refusals[0].clone()),
            Some(best) if out.racing.is_some() => Decision::NotYetShown {
                best: best_of(best),
            },
            Some(best) if best.bounds().1 > tau => Decision::NotShownAtCap {
                best: best_of(best),
                runs: best.runs(),
                max_repeats: rules.max_repeats,
            },
            Some(best) => Decision::NoImprovement {
                best: best_of(best),
            },
            None if too_few > 0 => Decision::TooFewRuns {
                candidates: too_few,
                min_samples: rules.min_samples,
            },
            None if incomplete > 0 => Decision::NotMeasuredEverywhere {
                candidates: incomplete,
            },
            None if untried => Decision::NothingMeasured,
            None => Decision::NothingPassedTheGate,
        };
        let (level, why) = if untried {
            (Level::Draft, LevelReason::NothingMeasured)
        } else if too_few > 0 {
            (
                Level::Draft,
                LevelReason::TooFewRuns {
                    candidates: too_few,
                    min_samples: rules.min_samples,
                },
            )
        } else if incomplete > 0 {
            (
                Level::Draft,
                LevelReason::NotMeasuredEverywhere {
                    candidates: incomplete,
                },
            )
        } else if !dropped.is_empty() {
            (Level::Draft, LevelReason::CellsDropped(dropped))
        } else if let Some(why) = racing_reason {
            (Level::Draft, why)
        } else {
            (Level::Verdict, LevelReason::AllMeasured)
        };
        out.level = level;
        out.level_reason = LevelReasons::one(why);
        return out;
    };
    // Ties: shown equivalent to the leader, compared with it directly at
    // every cell; fewest knobs changed, then label.
    let pick = picked.unwrap_or(leader);
    let tie_with = (pick.report.label != leader.report.label).then(|| leader.report.label.clone());
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
        speedup: pick.geo(),
        min_cell_speedup: pick
            .cells
            .iter()
            .map(|c| c.1.log.exp())
            .fold(f64::INFINITY, f64::min),
        interval: pick.est.interval(CONFIDENCE),
        confirmation: None,
    };
    let sweep = SweepWin {
        interval: winner.interval,
        lowest_cell: winner.min_cell_speedup,
        min_improvement: rules.min_improvement,
        tie_with,
    };
    let wins = |for_now: bool| Decision::Wins {
        label: pick.report.label.clone(),
        sweep: sweep.clone(),
        for_now,
    };
    // Racing still going: the winner may change; no round yet.
    if let Some(why) = racing_reason {
        out.decision = wins(true);
        out.level = Level::Draft;
        out.level_reason = LevelReasons::one(why);
        out.config = winner.config.clone();
        out.winner = Some(winner);
        return out;
    }
    let (rounds, confirmation) = final_round(pick, cells, objective, rules);
    out.confirm_runs = (rules.confirm_repeats > 0).then_some(rounds);
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
            out.decision = wins(false);
            out.level = Level::Draft;
            out.level_reason = LevelReasons::one(LevelReason::AwaitingRound {
                done: Some((c.runs_done, rounds)),
            });
            winner.confirmation = Some(c);
            out.config = winner.config.clone();
            out.winner = Some(winner);
        }
        Some(c) if !c.confirmed && c.failure.is_some() => {
            let failure = c.failure.clone().unwrap_or(RoundFailure {
                class: None,
                detail: String::new(),
                repeat: 0,
                host: String::new(),
            });
            out.decision = Decision::RoundFailed {
                label: pick.report.label.clone(),
                failure: failure.clone(),
            };
            for pc in out.per_cell.iter_mut() {
                pc.winner = None;
            }
            out.level = Level::Verdict;
            out.level_reason = LevelReasons::one(LevelReason::WinnerFailedRound);
            out.refusals.push(Refusal {
                config_label: pick.report.label.clone(),
                cell_label: "(confirmation round)".to_string(),
                speedup: None,
                reason: RefusalReason::RoundFailed(failure),
            });
            winner.confirmation = Some(c);
            return out;
        }
        Some(c) if !c.confirmed => {
            out.decision = Decision::NotConfirmed {
                label: pick.report.label.clone(),
                sweep_speedup: pick.geo(),
                measured: RoundMeasure::of(&c),
                because: match &c.harmed {
                    Some(cell) => NotConfirmedBecause::SlowerAt(cell.clone()),
                    None => NotConfirmedBecause::BelowMinimum(c.threshold),
                },
            };
            for pc in out.per_cell.iter_mut() {
                pc.winner = None;
            }
            out.level = Level::Verdict;
            out.level_reason = LevelReasons::one(LevelReason::WinnerNotConfirmed);
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
                reason: RefusalReason::NotConfirmed,
            });
            return out;
        }
        c => {
            out.decision = wins(false);
            let (level, why) = match &c {
                _ if rules.confirm_repeats == 0 => (Level::Draft, LevelReason::NoRound),
                None => (Level::Draft, LevelReason::AwaitingRound { done: None }),
                Some(_) if min_trials < rules.repeats as usize => (
                    Level::Draft,
                    LevelReason::FewRepeats {
                        least: min_trials,
                        repeats: rules.repeats,
                    },
                ),
                Some(_) if (min_hosts as u32) < rules.min_hosts => (
                    Level::Draft,
                    LevelReason::FewHosts {
                        hosts: min_hosts,
                        min_hosts: rules.min_hosts,
                    },
                ),
                Some(c) => (Level::Verdict, LevelReason::Confirmed(RoundMeasure::of(c))),
            };
            out.level = level;
            out.level_reason = LevelReasons::one(why);
            winner.confirmation = c;
            out.config = winner.config.clone();
            out.winner = Some(winner);
        }
    }
    out
}
