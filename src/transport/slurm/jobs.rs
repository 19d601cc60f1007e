//! Submitting array jobs, polling their tasks and judging what each
//! reported.

use super::*;

impl Inner {
    /// The study's class key (the default one before `discover`).
    pub(super) fn class_key(&self) -> ClassKey {
        self.class_key.lock().map(|k| k.clone()).unwrap_or_default()
    }

    /// The study being launched (`probe` before one is set: a bare
    /// `tunectl fingerprint`).
    pub(super) fn study_id(&self) -> String {
        self.study
            .read()
            .ok()
            .and_then(|s| s.clone())
            .unwrap_or_else(|| "probe".to_string())
    }

    pub(super) fn job_name(&self) -> String {
        format!("tunectl-{}", self.study_id())
    }

    pub(super) async fn root(&self) -> Result<String, TransportError> {
        if let Some(r) = self.root.read().ok().and_then(|r| r.clone()) {
            return Ok(r);
        }
        let root = match &self.cfg.shared_dir {
            Some(d) if d.starts_with('/') => d.trim_end_matches('/').to_string(),
            Some(d) => format!(
                "{}/{}",
                self.login.home().await?,
                d.trim_start_matches("~/")
            ),
            None => format!("{}/.cache/tunectl/slurm", self.login.home().await?),
        };
        if let Ok(mut r) = self.root.write() {
            *r = Some(root.clone());
        }
        Ok(root)
    }

    /// The `--time` of a batch: the inventory's, or every run at its
    /// timeout plus five minutes for the probe and the agent, in minutes.
    pub(super) fn time_limit(&self, specs: &[&AttemptSpec]) -> String {
        if let Some(t) = &self.cfg.time_limit {
            return t.clone();
        }
        let secs = specs
            .iter()
            .map(|s| s.timeout.as_secs() * (u64::from(s.warmup) + 1))
            .max()
            .unwrap_or(60)
            + 300;
        secs.div_ceil(60).to_string()
    }

    pub(super) fn render_batch(
        &self,
        batch_dir: &str,
        tasks: usize,
        time_limit: &str,
        batch_id: &str,
    ) -> Result<String, TransportError> {
        // Every value here is pasted into the script as is: a control
        // character (a newline above all) would add a line of its own. The
        // inventory refuses them; this keeps any other caller honest.
        let c = &self.cfg;
        let pasted = [
            ("partition", c.partition.as_deref()),
            ("account", c.account.as_deref()),
            ("qos", c.qos.as_deref()),
            ("gres", c.gres.as_deref()),
            ("constraint", c.constraint.as_deref()),
            ("time_limit", Some(time_limit)),
            ("batch directory", Some(batch_dir)),
        ]
        .into_iter()
        .chain(
            c.sbatch_args
                .iter()
                .map(|a| ("sbatch_args", Some(a.as_str()))),
        );
        for (what, value) in pasted {
            if let Some(v) = value
                && v.chars().any(char::is_control)
            {
                return Err(TransportError::ControlChar {
                    what,
                    value: v.to_string(),
                });
            }
        }
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.add_template("batch", &self.template)
            .map_err(|e| TransportError::TemplateParse {
                detail: e.to_string(),
            })?;
        let array = match self.cfg.array_throttle {
            Some(n) => format!("0-{}%{n}", tasks - 1),
            None => format!("0-{}", tasks - 1),
        };
        let study = self.study_id();
        let ctx = minijinja::context! {
            job_name => self.job_name(),
            comment => format!("tunectl:study={study}:batch={batch_id}:host={}", self.name),
            array => array,
            batch_dir => batch_dir,
            batch_dir_sh => quote_word(batch_dir),
            time_limit => time_limit,
            partition => self.cfg.partition.clone(),
            account => self.cfg.account.clone(),
            qos => self.cfg.qos.clone(),
            gres => self.cfg.gres.clone(),
            constraint => self.cfg.constraint.clone(),
            sbatch_args => self.cfg.sbatch_args.clone(),
        };
        env.get_template("batch")
            .and_then(|t| t.render(ctx))
            .map_err(|e| TransportError::TemplateRender {
                detail: e.to_string(),
            })
    }

    /// `sbatch` options that steer a job: to its node (`--nodelist`: a
    /// probe, or a pinned array), else a mixed partition's part away from
    /// the nodes of other classes (`--exclude`). On the command line, so
    /// that they hold whatever the batch template says.
    pub(super) fn steering_args(&self, node: Option<&str>) -> Vec<String> {
        if let Some(n) = node {
            return vec![format!("--nodelist={n}")];
        }
        let Some(steer) = self.steer.lock().ok().and_then(|s| s.clone()) else {
            return Vec::new();
        };
        let others = steer
            .nodes
            .lock()
            .map(|m| m.others(&steer.class))
            .unwrap_or_default();
        if others.is_empty() {
            return Vec::new();
        }
        vec![format!("--exclude={}", others.join(","))]
    }

    /// The nodes a steered part of a mixed partition pins its tasks to
    /// (name, tasks it runs at once): those of its class not found down,
    /// or all of them when every one was. `None` for an entry that is not
    /// split, or a class with no node known.
    ///
    /// Why pin: Slurm's main scheduler takes a partition's pending jobs in
    /// priority order and, once one cannot start for lack of resources,
    /// starts no later job of that partition in that pass, unless the
    /// waiting job names its nodes (`--nodelist`): then only those nodes
    /// are held back. A class's tasks queued ahead of its busy GPUs would
    /// otherwise hold every other class's tasks in the partition until
    /// they start, or until a backfill pass (every 30 s by default).
    pub(super) fn pin_targets(&self) -> Option<Vec<(String, u64)>> {
        let steer = self.steer.lock().ok().and_then(|s| s.clone())?;
        let map = steer.nodes.lock().ok()?;
        if map.others(&steer.class).is_empty() {
            return None;
        }
        let members = map.of(&steer.class);
        if members.is_empty() {
            return None;
        }
        let down = self
            .down_nodes
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default();
        let up: Vec<&String> = members.iter().filter(|n| !down.contains(*n)).collect();
        let chosen: Vec<&String> = if up.is_empty() {
            members.iter().collect()
        } else {
            up
        };
        Some(
            chosen
                .into_iter()
                .map(|n| (n.clone(), map.slots(n)))
                .collect(),
        )
    }

    /// Split `batch` by the node each of its tasks is pinned to
    /// ([`Inner::pin_targets`], [`nodes::pin_tasks`]), counting what every
    /// node holds already; one group without a node when nothing is
    /// pinned.
    fn pin(&self, batch: Vec<Pending>) -> Vec<(Option<String>, Vec<Pending>)> {
        let Some(targets) = self.pin_targets() else {
            return vec![(None, batch)];
        };
        let mut load: BTreeMap<String, u64> = BTreeMap::new();
        if let Ok(m) = self.inflight.lock() {
            for t in m
                .values()
                .filter(|t| !t.node.is_empty() && !is_final(&t.state))
            {
                *load.entry(t.node.clone()).or_default() += 1;
            }
        }
        let pins = nodes::pin_tasks(batch.len(), &targets, &load);
        let mut groups: BTreeMap<String, Vec<Pending>> = BTreeMap::new();
        for (p, node) in batch.into_iter().zip(pins) {
            groups.entry(node).or_default().push(p);
        }
        groups.into_iter().map(|(n, ps)| (Some(n), ps)).collect()
    }

    /// Submit one array of `specs` (none: a probe job), on `node` when
    /// given; returns the job id and the batch directory.
    pub(super) async fn submit(
        &self,
        specs: &[&AttemptSpec],
        probe_only: bool,
        node: Option<&str>,
    ) -> Result<(String, String), TransportError> {
        let root = self.root().await?;
        let study = self.study_id();
        let batch_id = batch_id(
            chrono::Utc::now(),
            self.batches.fetch_add(1, Ordering::Relaxed),
        );
        let batch_dir = format!("{root}/{study}/batches/{batch_id}");
        let tools = self.tools.lock().map(|t| t.clone()).unwrap_or_default();
        let probe =
            fingerprint::probe_script(&tools).map_err(|e| TransportError::Probe(e.into()))?;
        let mut files = Vec::new();
        let count = if probe_only { 1 } else { specs.len() };
        if probe_only {
            let body = wire::probe_script(&batch_dir, &probe);
            files.push((format!("{batch_dir}/t0.sh"), wire::wrap(&body)));
        } else {
            let opts = AgentOptions {
                keep_workdirs: self.keep_workdirs,
                self_timeout: true,
                probe: Some(probe),
                remote_clock: true,
                ..Default::default()
            };
            let mut manifest = Manifest {
                study: study.clone(),
                job_id: None,
                tasks: Vec::new(),
            };
            for (i, spec) in specs.iter().enumerate() {
                let script = wire::attempt_script(spec, &opts)?;
                files.push((format!("{batch_dir}/t{i}.sh"), wire::wrap(&script)));
                manifest.tasks.push(ManifestTask {
                    task: i,
                    trial_key: spec.trial_key.clone(),
                    attempt_id: spec.attempt_id.clone(),
                    trial_dir: spec.trial_dir.clone(),
                    outputs: spec.outputs.clone(),
                    tolerance_files: spec.tolerance_files.clone(),
                    result_files: spec.result_files.clone(),
                    streams: spec.streams.clone(),
                    checkpoint: spec.checkpoint.clone(),
                });
            }
            files.push((
                format!("{batch_dir}/manifest.json"),
                serde_json::to_string_pretty(&manifest).map_err(|e| TransportError::Encode {
                    detail: e.to_string(),
                })?,
            ));
        }
        let time_limit = if probe_only {
            "10".to_string()
        } else {
            self.time_limit(specs)
        };
        let script = self.render_batch(&batch_dir, count, &time_limit, &batch_id)?;
        files.push((format!("{batch_dir}/batch.sh"), script));
        self.login.write_files(&files).await?;
        self.sbatch_calls.fetch_add(1, Ordering::Relaxed);
        let mut args: Vec<String> = self
            .steering_args(node)
            .iter()
            .map(|a| quote_word(a))
            .collect();
        args.push(quote_word(&format!("{batch_dir}/batch.sh")));
        let out = self
            .login
            .sh(&format!("sbatch --parsable {}", args.join(" ")))
            .await
            .map_err(|e| slurm(SlurmCommand::Sbatch, e))?;
        let text = String::from_utf8_lossy(&out);
        let job = text
            .trim()
            .split(';')
            .next()
            .unwrap_or_default()
            .to_string();
        if job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) {
            return Err(TransportError::NotAJobId {
                answer: text.trim().to_string(),
            });
        }
        Ok((job, batch_dir))
    }

    /// Run a probe job (on `node` when given) and read its fingerprint.
    pub(super) async fn probe_on(
        &self,
        tools: &BTreeMap<String, String>,
        node: Option<&str>,
    ) -> Result<Fingerprint, TransportError> {
        let (job, batch_dir) = self.submit(&[], true, node).await?;
        let frames = format!("{batch_dir}/t0.frames");
        let id = format!("{job}_0");
        let start = Instant::now();
        // Polled like everything else: one query per interval.
        let step = self.cfg.poll_interval;
        loop {
            tokio::time::sleep(step).await;
            let states = self.query().await?;
            let state = states.get(&id).map(|s| s.0.clone());
            if state.as_deref().is_some_and(is_final) || state.is_none() {
                let reports = self.login.read_files(std::slice::from_ref(&frames)).await?;
                let bytes = reports.get(&frames).cloned().unwrap_or_default();
                let mut got = Collected::default();
                for f in parse_frames(&bytes).await.unwrap_or_default() {
                    got.absorb(f);
                }
                if let Some(p) = got.files.get("probe") {
                    let mut fp = fingerprint::parse_probe_output(&String::from_utf8_lossy(p));
                    for name in tools.keys() {
                        fp.tools.entry(name.clone()).or_insert(None);
                    }
                    return Ok(fp);
                }
                if state.is_some() || start.elapsed() > VANISH_GRACE {
                    return Err(TransportError::ProbeJobEnded { job, state });
                }
            }
            if start.elapsed() > PROBE_WAIT {
                let _ = self.login.sh(&format!("scancel {job}")).await;
                return Err(TransportError::ProbeJobWaiting {
                    job,
                    secs: PROBE_WAIT.as_secs(),
                    state: state.unwrap_or_default(),
                });
            }
        }
    }

    /// One `squeue` for every job of the study: `jobid_taskid` → (state,
    /// node, comment).
    pub(super) async fn query(
        &self,
    ) -> Result<HashMap<String, (String, String, String)>, TransportError> {
        self.poll_calls.fetch_add(1, Ordering::Relaxed);
        let out = self
            .login
            .sh(&format!(
                "squeue -h -r -t all --name={} -o '%i|%T|%N|%k'",
                quote_word(&self.job_name())
            ))
            .await
            .map_err(|e| slurm(SlurmCommand::Squeue, e))?;
        let mut map = HashMap::new();
        for line in String::from_utf8_lossy(&out).lines() {
            let mut parts = line.splitn(4, '|');
            let (Some(id), Some(state)) = (parts.next(), parts.next()) else {
                continue;
            };
            let node = parts.next().unwrap_or_default().to_string();
            let comment = parts.next().unwrap_or_default().to_string();
            map.insert(
                id.trim().to_string(),
                (state.trim().to_string(), node, comment),
            );
        }
        Ok(map)
    }

    /// For a steered part, what `sinfo` says of its class's nodes: those
    /// up, and `node state` of each of the others, sorted. `None` for a
    /// part that is not steered, a class with no node known, or `sinfo`
    /// failing: only Slurm's word takes a node down.
    pub(super) async fn member_states(&self) -> Option<(Vec<String>, Vec<String>)> {
        let steer = self.steer.lock().ok().and_then(|s| s.clone())?;
        let members = steer.nodes.lock().map(|m| m.of(&steer.class)).ok()?;
        if members.is_empty() {
            return None;
        }
        let out = self
            .login
            .sh(&format!(
                "sinfo -h -N -n {} -o '%N|%T'",
                quote_word(&members.join(","))
            ))
            .await
            .ok()?;
        let text = String::from_utf8_lossy(&out);
        let (mut up, mut down) = (Vec::new(), Vec::new());
        for line in text.lines() {
            let Some((node, state)) = line.trim().split_once('|') else {
                continue;
            };
            if nodes::state_is_up(state.trim()) {
                up.push(node.to_string());
            } else {
                down.push(format!("{node} {}", state.trim()));
            }
        }
        for v in [&mut up, &mut down] {
            v.sort();
            v.dedup();
        }
        Some((up, down))
    }

    /// For a steered part: `None` when a node of its class is up, else
    /// why none is (`gpu-a down`). `sinfo` failing counts as up.
    pub(super) async fn class_down(&self) -> Option<TransportError> {
        let (up, states) = self.member_states().await?;
        up.is_empty().then(|| self.none_up(states))
    }

    /// Why no node of the class is up: the states of its nodes, or that
    /// `sinfo` listed none of them.
    fn none_up(&self, states: Vec<String>) -> TransportError {
        if !states.is_empty() {
            return TransportError::ClassDown { states };
        }
        let nodes = self
            .steer
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .and_then(|s| s.nodes.lock().map(|m| m.of(&s.class)).ok())
            .unwrap_or_default();
        TransportError::ClassUnlisted { nodes }
    }

    /// A steered part with tasks waiting in the queue checks its class's
    /// nodes. When none is up, the waiting tasks are cancelled and lost
    /// (they run again when a node returns, like the trials of an ssh host
    /// that dropped) and the part reports itself down until `state` finds
    /// a node up. When some are, tasks waiting on a node pinned that is
    /// down are cancelled and queued again, for the nodes that are up:
    /// they never began, so nothing is lost.
    pub(super) async fn check_class_nodes(&self) {
        let pending: Vec<(String, String)> = self
            .inflight
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(_, t)| {
                        t.tx.is_some()
                            && t.state == "PENDING"
                            && t.submitted.elapsed() > self.cfg.poll_interval
                    })
                    .map(|(id, t)| (id.clone(), t.node.clone()))
                    .collect()
            })
            .unwrap_or_default();
        if pending.is_empty() {
            return;
        }
        let Some((up, states)) = self.member_states().await else {
            return;
        };
        let down: BTreeSet<String> = states
            .iter()
            .filter_map(|s| s.split(' ').next())
            .map(str::to_string)
            .collect();
        if let Ok(mut d) = self.down_nodes.lock() {
            d.clone_from(&down);
        }
        if !up.is_empty() {
            self.requeue_pinned_to(&pending, &down).await;
            return;
        }
        let reason = self.none_up(states);
        let now = Instant::now();
        if let Ok(mut d) = self.down.lock()
            && d.is_none()
        {
            *d = Some(ClassDown {
                reason: reason.clone(),
                since: now,
                next_check: now + self.cfg.poll_interval,
                reported: false,
            });
        }
        let ids: Vec<String> = pending.into_iter().map(|(id, _)| id).collect();
        let mut lost = Vec::new();
        if let Ok(mut m) = self.inflight.lock() {
            for id in &ids {
                if let Some(t) = m.remove(id) {
                    lost.push(t);
                }
            }
        }
        if let Ok(mut c) = self.to_cancel.lock() {
            c.extend(ids);
        }
        for t in lost {
            if let Some(tx) = t.tx {
                let _ = tx.send(AttemptOutcome {
                    ended: Ended::HostLost(TransportError::QueuedTask(Box::new(reason.clone()))),
                    trial_dir: Some(t.spec.trial_dir.clone()),
                    ..Default::default()
                });
            }
        }
        self.cancel_requested().await;
    }

    /// Cancel the `pending` tasks (id, node pinned) whose node is `down`
    /// and queue their attempts again.
    async fn requeue_pinned_to(&self, pending: &[(String, String)], down: &BTreeSet<String>) {
        let ids: Vec<String> = pending
            .iter()
            .filter(|(_, node)| down.contains(node))
            .map(|(id, _)| id.clone())
            .collect();
        if ids.is_empty() {
            return;
        }
        let mut again = Vec::new();
        if let Ok(mut m) = self.inflight.lock() {
            for id in &ids {
                if let Some(Task {
                    spec, tx: Some(tx), ..
                }) = m.remove(id)
                {
                    again.push(Pending { spec, tx });
                }
            }
        }
        tracing::info!(
            host = %self.name,
            "{} task(s) waiting on a node that is down are queued again for the class's other nodes",
            again.len()
        );
        if let Ok(mut c) = self.to_cancel.lock() {
            c.extend(ids);
        }
        self.cancel_requested().await;
        if let Ok(mut q) = self.queue.lock() {
            q.extend(again);
        }
        self.wake_submitter.notify_one();
    }

    /// Cancel the tasks asked for (one `scancel`).
    pub(super) async fn cancel_requested(&self) {
        let ids: Vec<String> = self
            .to_cancel
            .lock()
            .map(|mut s| s.drain().collect())
            .unwrap_or_default();
        if ids.is_empty() {
            return;
        }
        let args: Vec<String> = ids.iter().map(|i| quote_word(i)).collect();
        if let Err(e) = self.login.sh(&format!("scancel {}", args.join(" "))).await {
            tracing::warn!("{}", slurm(SlurmCommand::Scancel, e));
        }
    }

    /// Answer the waiting attempts of tasks that ended.
    pub(super) async fn poll_once(&self) -> Result<(), TransportError> {
        self.cancel_requested().await;
        if self.inflight.lock().map(|m| m.is_empty()).unwrap_or(true) {
            return Ok(());
        }
        let states = self.query().await?;
        let mut ended: Vec<(String, String)> = Vec::new();
        if let Ok(mut inflight) = self.inflight.lock() {
            for (id, task) in inflight.iter_mut() {
                match states.get(id) {
                    Some((state, node, _)) => {
                        task.state = state.clone();
                        if !node.is_empty() {
                            task.node = node.clone();
                        }
                        if is_final(state) {
                            ended.push((id.clone(), task.frames.clone()));
                        }
                    }
                    None if task.submitted.elapsed() > VANISH_GRACE => {
                        task.state = "VANISHED".to_string();
                        ended.push((id.clone(), task.frames.clone()));
                    }
                    None => {}
                }
            }
        }
        self.check_class_nodes().await;
        if ended.is_empty() {
            return Ok(());
        }
        let paths: Vec<String> = ended.iter().map(|(_, f)| f.clone()).collect();
        let reports = self.login.read_files(&paths).await?;
        let expected = self.expected.lock().ok().and_then(|e| e.clone());
        let steer = self.steer.lock().ok().and_then(|s| s.clone());
        let key = self.class_key();
        for (id, frames_path) in ended {
            let Some(task) = self.inflight.lock().ok().and_then(|mut m| m.remove(&id)) else {
                continue;
            };
            let bytes = reports.get(&frames_path).cloned().unwrap_or_default();
            let outcome = judge_task(&task, &bytes, expected.as_ref(), steer.as_ref(), &key).await;
            match task.tx {
                Some(tx) => {
                    let _ = tx.send(outcome);
                }
                None => {
                    // Adopted and not claimed yet: keep the outcome for the
                    // worker that will ask for this trial.
                    if let Ok(mut m) = self.inflight.lock() {
                        m.insert(
                            id.clone(),
                            Task {
                                state: "DONE".to_string(),
                                tx: None,
                                ..task
                            },
                        );
                    }
                    if let Ok(mut d) = self.finished.lock() {
                        d.insert(id, outcome);
                    }
                }
            }
        }
        Ok(())
    }
}

/// A client command that failed, and why.
pub(super) fn slurm(command: SlurmCommand, cause: TransportError) -> TransportError {
    TransportError::Slurm {
        command,
        cause: Box::new(cause),
    }
}

/// Slurm states after which a task runs no more.
pub(super) fn is_final(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "TIMEOUT"
            | "OUT_OF_MEMORY"
            | "CANCELLED"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "REVOKED"
            | "SPECIAL_EXIT"
    )
}

/// How a task that did not report its end is taken.
#[derive(Debug, PartialEq)]
pub(super) enum Unreported {
    /// A failure of the trial, of this class of Slurm state.
    Failed { timed_out: bool, detail: String },
    /// Lost through no fault of the trial (node failure, preemption...).
    Lost(TransportError),
}

pub(super) fn unreported(state: &str, node: &str, cancelling: bool) -> Unreported {
    let on = if node.is_empty() {
        String::new()
    } else {
        format!(" on node {node}")
    };
    match state {
        "TIMEOUT" | "DEADLINE" => Unreported::Failed {
            timed_out: true,
            detail: format!("slurm: the job reached its time limit{on} (TIMEOUT)"),
        },
        "OUT_OF_MEMORY" => Unreported::Failed {
            timed_out: false,
            detail: format!(
                "slurmstepd: error: Detected 1 oom_kill event{on}: the job ran out of memory (OUT_OF_MEMORY)"
            ),
        },
        "FAILED" => Unreported::Failed {
            timed_out: false,
            detail: format!("slurm: the task failed{on} before its wrapper reported (FAILED)"),
        },
        "CANCELLED" if cancelling => Unreported::Lost(TransportError::StoppedByLauncher),
        "CANCELLED" => Unreported::Lost(TransportError::CancelledOutside {
            node: node.to_string(),
        }),
        "VANISHED" => Unreported::Lost(TransportError::Vanished),
        other => Unreported::Lost(TransportError::TaskEnded {
            state: other.to_string(),
            node: node.to_string(),
        }),
    }
}

/// The name of a batch's directory: its time, its number among this
/// entry's batches, and a nonce. The nonce keeps it unique among every
/// entry that shares the directory, not only this one: two entries whose
/// submitters wake on the same tick read the same microsecond and count
/// the same batch, and one overwrote the other's `batch.sh` (its tasks ran
/// with the other's `#SBATCH` lines, on the other class's nodes).
pub(super) fn batch_id(at: chrono::DateTime<chrono::Utc>, n: u64) -> String {
    format!(
        "{}-{n}-{:08x}",
        at.format("%Y%m%dT%H%M%S%.6fZ"),
        rand::random::<u32>()
    )
}

/// The outcome of a task that ended, from its report and its Slurm state.
pub(super) async fn judge_task(
    task: &Task,
    report: &[u8],
    expected: Option<&Fingerprint>,
    steer: Option<&Steering>,
    key: &ClassKey,
) -> AttemptOutcome {
    let mut outcome = AttemptOutcome {
        trial_dir: Some(task.spec.trial_dir.clone()),
        ..Default::default()
    };
    let mut got = Collected::default();
    let (frames, garbled) = wire::read_report(report).await;
    for f in frames {
        got.absorb(f);
    }
    // Classed by the node that ran it: a task on a node of another class
    // than planned is lost and runs again. A mixed partition's part learns
    // the node's class, so that its later jobs keep off that node (and the
    // part of that class may use it). What such a task left, if it ran to
    // its end, is a run of the node's class (`elsewhere`).
    let mut other_class = None;
    if let (Some(expected), Some(probe)) = (expected, got.files.get("probe")) {
        let fp = fingerprint::parse_probe_output(&String::from_utf8_lossy(probe));
        let class = fp.host_class_under(key);
        let learned = steer.is_some_and(|s| {
            !task.node.is_empty()
                && s.nodes
                    .lock()
                    .is_ok_and(|mut m| m.learn(&task.node, &class))
        });
        if class != expected.host_class_under(key) {
            let label = fp.class_label_under(key);
            let lost = Ended::HostLost(TransportError::OtherClass {
                node: task.node.clone(),
                got: label.clone(),
                expected: expected.class_label_under(key),
                steered: steer.is_some(),
            });
            if !got.ended || task.cancelling || got.setup.is_some() {
                outcome.end(lost);
                return outcome;
            }
            other_class = Some((
                lost,
                RanElsewhere {
                    node: task.node.clone(),
                    class,
                    label,
                },
            ));
        } else if learned {
            tracing::info!(node = %task.node, class = %fp.class_label_under(key), "a node joined the class");
        }
    }
    if task.cancelling && !got.ended {
        outcome.end(Ended::Cancelled);
        return outcome;
    }
    if !got.ended {
        let why = unreported(&task.state, &task.node, task.cancelling);
        match why {
            Unreported::Lost(reason) => {
                outcome.end(Ended::HostLost(match garbled {
                    Some(report) => TransportError::BadReport {
                        cause: Box::new(reason),
                        report,
                    },
                    None => reason,
                }));
            }
            Unreported::Failed { timed_out, detail } => {
                let warmups = got.runs.iter().filter(|r| r.1.is_some()).count() as u32;
                let failed_in_warmup = got
                    .runs
                    .last()
                    .is_some_and(|r| r.0 == crate::trial::Phase::Warmup.as_str());
                outcome.warmups_run = warmups.saturating_sub(1);
                outcome.failed_in_warmup = failed_in_warmup;
                outcome.run = Some(RunOutput {
                    exit: ExitInfo {
                        code: None,
                        signal: Some(9),
                    },
                    timed_out,
                    cancelled: false,
                    elapsed: Duration::ZERO,
                    stdout_tail: String::new(),
                    stderr_tail: detail,
                    stderr_head: String::new(),
                    streams: BTreeMap::new(),
                });
            }
        }
        return outcome;
    }
    if let Some(m) = got.setup.take() {
        outcome.end(Ended::SetupFailed(TransportError::HostSetup(m)));
        return outcome;
    }
    let timed_out = got.timed_out;
    wire::fill_outcome(&mut outcome, &task.spec, got, timed_out);
    if let Some((lost, there)) = other_class {
        if outcome.ended == Ended::Ran {
            outcome.elsewhere = Some(there);
        }
        outcome.end(lost);
    }
    outcome
}

/// The submitter: gathers queued attempts into one array at a time.
pub(super) async fn submitter(inner: Arc<Inner>) {
    loop {
        let notified = inner.wake_submitter.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let queued = inner.queue.lock().map(|q| q.len()).unwrap_or(0);
        if queued == 0 {
            tokio::select! {
                _ = notified => {}
                _ = inner.stop.cancelled() => return,
            }
            continue;
        }
        // Gather: until no attempt arrived for a moment, or a full array.
        let start = Instant::now();
        let mut last = queued;
        while start.elapsed() < GATHER_MAX {
            tokio::select! {
                _ = tokio::time::sleep(GATHER_QUIET) => {}
                _ = inner.stop.cancelled() => return,
            }
            let now = inner.queue.lock().map(|q| q.len()).unwrap_or(0);
            if now == last || now >= MAX_ARRAY {
                break;
            }
            last = now;
        }
        let batch: Vec<Pending> = inner
            .queue
            .lock()
            .map(|mut q| {
                let n = q.len().min(MAX_ARRAY);
                q.drain(..n).collect()
            })
            .unwrap_or_default();
        // Attempts cancelled while queued answer at once.
        let batch: Vec<Pending> = batch.into_iter().filter(|p| !p.tx.is_closed()).collect();
        if batch.is_empty() {
            continue;
        }
        for (node, batch) in inner.pin(batch) {
            submit_array(&inner, node, batch).await;
        }
    }
}

/// Submit `batch` as one array (on `node` when pinned) and track its
/// tasks, or answer them with the failure.
async fn submit_array(inner: &Inner, node: Option<String>, batch: Vec<Pending>) {
    let specs: Vec<&AttemptSpec> = batch.iter().map(|p| &p.spec).collect();
    match inner.submit(&specs, false, node.as_deref()).await {
        Ok((job, batch_dir)) => {
            if let Ok(mut m) = inner.inflight.lock() {
                for (i, p) in batch.into_iter().enumerate() {
                    m.insert(
                        format!("{job}_{i}"),
                        Task {
                            spec: p.spec,
                            tx: Some(p.tx),
                            frames: format!("{batch_dir}/t{i}.frames"),
                            submitted: Instant::now(),
                            state: "SUBMITTED".to_string(),
                            // Pinned: where it will run.
                            node: node.clone().unwrap_or_default(),
                            cancelling: false,
                        },
                    );
                }
            }
            inner.wake_poller.notify_one();
        }
        Err(e) => {
            tracing::warn!("submitting a job array failed: {e}");
            for p in batch {
                let _ = p.tx.send(AttemptOutcome {
                    ended: Ended::SetupFailed(e.clone()),
                    ..Default::default()
                });
            }
        }
    }
}

/// The poller: one query per interval while tasks are in flight.
pub(super) async fn poller(inner: Arc<Inner>) {
    loop {
        let interval = inner.cfg.poll_interval;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = inner.stop.cancelled() => return,
        }
        if let Err(e) = inner.poll_once().await {
            tracing::warn!("polling slurm failed: {e}");
        }
    }
}
