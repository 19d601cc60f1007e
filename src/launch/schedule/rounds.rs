//! A bucket's rounds after its sweep: racing (more sweep runs where the
//! decision is close) and the final interleaved round of its winner.
//!
//! A bucket's decision is asked when all its queued runs are measured
//! (`buckets_ready`). While a racing round's runs are still out and the
//! class has slots that nothing queued will fill, the launch asks the
//! race again on what has arrived (`race_more_ready`): the next runs are
//! queued while the slowest of the round still run. Only a race is taken
//! from such a partial look; a confirmation or a settled bucket waits for
//! the round to be whole.

use std::cmp::Reverse;
use std::collections::HashSet;

use super::{BucketStep, LaunchEvent, Scheduler, Unit};

impl Scheduler<'_> {
    /// The buckets touched by `cells` whose cells are all measured on
    /// `class` and whose next step (racing or confirmation) has not
    /// started: marked as started, with their cells. `queue_bucket_step`
    /// follows each, with what the bucket's decision asks.
    pub fn buckets_ready(&mut self, class: usize, cells: &[u32]) -> Vec<(String, Vec<u32>)> {
        // A shard sees a slice of the candidates: its leader is not the
        // bucket's; the launch without --shard races and confirms.
        let m = &self.s.study.measurement;
        let nothing_to_add = m.confirm_repeats == 0 && m.max_repeats <= m.repeats;
        if nothing_to_add || self.s.sharded || self.st.stopping {
            return Vec::new();
        }
        let mut ready = Vec::new();
        let cs = &mut self.st.classes[class];
        for cell in cells {
            let bucket = &self.s.plan.bucket_of_cell(*cell as usize).key;
            // A partial look at its race is being prepared: its end asks
            // again.
            if cs.confirm_started.contains(bucket) || cs.looking.contains(bucket) {
                continue;
            }
            let members = self.s.plan.cells_of_bucket(bucket);
            // An anchor at one of the cells may still void measurements:
            // the round waits for them to be taken again.
            let complete = members.iter().all(|c| {
                cs.released.contains(c)
                    && cs.outstanding.get(c).copied().unwrap_or(0) == 0
                    && !cs.anchoring.contains_key(c)
            });
            if complete {
                cs.confirm_started.insert(bucket.clone());
                cs.racing.remove(bucket);
                cs.confirming += 1;
                ready.push((bucket.clone(), members));
            }
        }
        ready
    }

    /// Pipelining: the bucket of `cell` has a racing round with runs still
    /// out on `class`, and the class has slots that nothing queued will
    /// fill. Returns the bucket, its cells and the slots its next runs may
    /// take (the free ones, and those its runs out hold: a round is sized
    /// from the runs measured), marked as being looked at; `queue_more_race`
    /// follows, with what the race asks on the runs measured so far.
    pub fn race_more_ready(&mut self, class: usize, cell: u32) -> Option<(String, Vec<u32>, u32)> {
        if self.s.sharded || self.st.stopping {
            return None;
        }
        let slots = self.class_slots(class) as usize;
        let cs = &self.st.classes[class];
        let bucket = &self.s.plan.bucket_of_cell(cell as usize).key;
        if !cs.racing.contains(bucket)
            || cs.looking.contains(bucket)
            || cs.confirm_started.contains(bucket)
        {
            return None;
        }
        let free = slots.saturating_sub(cs.in_flight + cs.ready.len());
        let members = self.s.plan.cells_of_bucket(bucket);
        let out = self.runs_out(class, &members);
        // Nothing out: the round is whole and `buckets_ready` asks.
        if free == 0 || out == 0 {
            return None;
        }
        let bucket = bucket.clone();
        let cs = &mut self.st.classes[class];
        cs.looking.insert(bucket.clone());
        // Until `queue_more_race`: the class may still get work.
        cs.confirming += 1;
        Some((bucket, members, (free + out) as u32))
    }

    /// A bucket's runs (at its cells `members`) queued or running on
    /// `class`.
    fn runs_out(&self, class: usize, members: &[u32]) -> usize {
        self.st.classes[class]
            .open
            .iter()
            .filter(|u| members.contains(&u.cell))
            .count()
    }

    /// Queue what a partial look at a bucket's race (from
    /// `race_more_ready`) asks: more runs when it still races; a
    /// confirmation or a settled bucket is set aside until the round is
    /// whole. Returns the buckets now ready for their decision (the round
    /// may have ended during the look).
    pub fn queue_more_race(
        &mut self,
        class: usize,
        members: &[u32],
        step: BucketStep,
        done: &HashSet<String>,
    ) -> Vec<(String, Vec<u32>)> {
        let cs = &mut self.st.classes[class];
        cs.confirming = cs.confirming.saturating_sub(1);
        if let Some(&cell) = members.first() {
            let key = &self.s.plan.bucket_of_cell(cell as usize).key;
            cs.looking.remove(key);
        }
        if let BucketStep::Race { configs, runs } = step
            && !self.st.stopping
        {
            let out = self.runs_out(class, members) as u64;
            self.queue_race(class, members, &configs, runs, out, done);
        }
        self.buckets_ready(class, members)
    }

    /// Queue what a bucket's decision asks (its cells `members`, from
    /// `buckets_ready`) on `class`. `done`: trial keys with a terminal
    /// attempt in the ledger now.
    pub fn queue_bucket_step(
        &mut self,
        class: usize,
        members: &[u32],
        step: BucketStep,
        done: &HashSet<String>,
    ) -> u64 {
        let cs = &mut self.st.classes[class];
        cs.confirming = cs.confirming.saturating_sub(1);
        match step {
            BucketStep::Race { configs, runs } => {
                let queued = self.queue_race(class, members, &configs, runs, 0, done);
                if queued > 0
                    && let Some(&cell) = members.first()
                {
                    let key = self.s.plan.bucket_of_cell(cell as usize).key.clone();
                    self.st.classes[class].racing.insert(key);
                }
                queued
            }
            BucketStep::Confirm { winner, runs } => {
                let units = self.confirm_units(class, members, winner, runs, done);
                self.push_round(class, members, units, |bucket, class, trials| {
                    LaunchEvent::ConfirmationQueued {
                        bucket,
                        class,
                        trials,
                    }
                })
            }
            BucketStep::Settled => 0,
        }
    }

    /// Whether a bucket's step should queue `unit` on `class`: not ended in
    /// the ledger (`done`: the terminal keys read with the step; the seed's
    /// keys), not finished in this launch, and not queued or running.
    fn wanted(&self, class: usize, unit: Unit, done: &HashSet<String>) -> bool {
        if self.st.classes[class].open.contains(&unit) || self.st.finished.contains(&(class, unit))
        {
            return false;
        }
        let key = self.s.key_of(class, unit);
        !done.contains(&key) && !self.s.done.contains(&key)
    }

    /// Queue a racing round (`race_units`); `out`: the bucket's runs still
    /// out, as the event says.
    fn queue_race(
        &mut self,
        class: usize,
        members: &[u32],
        configs: &[u64],
        runs: u32,
        out: u64,
        done: &HashSet<String>,
    ) -> u64 {
        let units = self.race_units(class, members, configs, runs, done);
        self.push_round(class, members, units, |bucket, class, trials| {
            LaunchEvent::RaceQueued {
                bucket,
                class,
                trials,
                configs: configs.len(),
                runs,
                out,
            }
        })
    }

    /// Racing: more sweep runs of the baseline and `configs`, interleaved,
    /// up to `runs` at every cell of the bucket.
    fn race_units(
        &self,
        class: usize,
        members: &[u32],
        configs: &[u64],
        runs: u32,
        done: &HashSet<String>,
    ) -> Vec<Unit> {
        let baseline = self.s.plan.space.baseline();
        let cs = &self.st.classes[class];
        let mut units = Vec::new();
        for &cell in members {
            for pos in self.s.positions(cs, cell) {
                let config = self.s.config_of(Unit::sweep(cell, 0, pos));
                if (config != baseline && !configs.contains(&config))
                    || cs.failed_configs.contains(&(cell, config))
                {
                    continue;
                }
                for repeat in 0..runs {
                    let unit = Unit::sweep(cell, repeat, pos);
                    if self.wanted(class, unit, done) {
                        units.push(unit);
                    }
                }
            }
        }
        units
    }

    /// The final round: the baseline and `winner`, interleaved, `rounds`
    /// runs a side at every cell of the bucket.
    fn confirm_units(
        &self,
        class: usize,
        members: &[u32],
        winner: u64,
        rounds: u32,
        done: &HashSet<String>,
    ) -> Vec<Unit> {
        let mut units = Vec::new();
        for cell in members {
            for repeat in 0..rounds {
                for pos in [0, winner + 1] {
                    let unit = Unit::confirm(*cell, repeat, pos);
                    if self.wanted(class, unit, done) {
                        units.push(unit);
                    }
                }
            }
        }
        units
    }

    /// Queue a round's `units` on `class`, each held open until it is
    /// finished; the bucket (its cells `members`) is ready again once they
    /// are measured. `event` says it, from the bucket's label, the class
    /// and the count.
    fn push_round(
        &mut self,
        class: usize,
        members: &[u32],
        units: Vec<Unit>,
        event: impl FnOnce(String, String, u64) -> LaunchEvent,
    ) -> u64 {
        let queued = units.len() as u64;
        let cs = &mut self.st.classes[class];
        for u in units {
            *cs.outstanding.entry(u.cell).or_insert(0) += 1;
            cs.open.insert(u);
            cs.ready.push(Reverse(u));
        }
        if queued > 0
            && let Some(&cell) = members.first()
        {
            let bucket = self.s.plan.bucket_of_cell(cell as usize);
            self.st.classes[class].confirm_started.remove(&bucket.key);
            self.out.push(event(
                bucket.label.clone(),
                self.s.class_ids[class].clone(),
                queued,
            ));
        }
        queued
    }
}
