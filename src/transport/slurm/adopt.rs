//! Host classes discovered from the partitions, and tasks of an earlier
//! launch adopted.

use super::*;

/// The attempt id an adopted task ran under.
pub(super) fn adopted_attempt_id(id: &str, inner: &Inner) -> String {
    inner
        .adopted_ids
        .lock()
        .ok()
        .and_then(|m| m.get(id).cloned())
        .unwrap_or_default()
}

impl SlurmTransport {
    pub(super) fn start(&self) {
        let inner = self.inner.clone();
        self.inner.started.call_once(move || {
            tokio::spawn(submitter(inner.clone()));
            tokio::spawn(poller(inner));
        });
    }

    /// [`Transport::discover`]: a partition without `constraint` whose
    /// nodes are of several types is probed once per type (`--nodelist`,
    /// all at once) and split into one part per host class found. A type
    /// with no node up, or whose probe fails, is left out with a warning
    /// (a task that lands on one of its nodes later is classed by its own
    /// probe). `sinfo` failing leaves the entry whole.
    pub(super) async fn discover_classes(
        &self,
        study_id: &str,
        tools: &BTreeMap<String, String>,
        key: &ClassKey,
    ) -> Result<Discovery, TransportError> {
        let inner = &self.inner;
        if let Ok(mut k) = inner.class_key.lock() {
            *k = key.clone();
        }
        if let Ok(mut s) = inner.study.write() {
            *s = Some(study_id.to_string());
        }
        if let Ok(mut t) = inner.tools.lock() {
            *t = tools.clone();
        }
        if inner.cfg.constraint.is_some() {
            return Ok(Discovery::Probe);
        }
        let partition = inner.cfg.partition.as_deref();
        let listed = match inner.login.sh(&nodes::sinfo_command(partition)).await {
            Ok(out) => String::from_utf8_lossy(&out).into_owned(),
            Err(e) => {
                tracing::warn!(host = %inner.name, "cannot list the partition's nodes ({e}): probing one node for the whole entry");
                return Ok(Discovery::Probe);
            }
        };
        let types = nodes::parse_sinfo(&listed, partition);
        if types.len() < 2 {
            return Ok(Discovery::Probe);
        }
        let probes = futures::future::join_all(types.iter().map(|t| async move {
            match t.up.first() {
                Some(n) => inner.probe_on(tools, Some(n)).await,
                None => Err(TransportError::NoNodeUp),
            }
        }))
        .await;
        let map = Arc::new(Mutex::new(NodeClasses::default()));
        // Host classes in order of their first node type: (fingerprint,
        // types).
        let mut classes: Vec<(Fingerprint, Vec<&nodes::NodeType>)> = Vec::new();
        let mut left_out = Vec::new();
        for (t, probe) in types.iter().zip(probes) {
            let fp = match probe {
                Ok(fp) => fp,
                Err(e) => {
                    left_out.push((t.describe(), e));
                    continue;
                }
            };
            let class = fp.host_class_under(key);
            if let Ok(mut m) = map.lock() {
                for n in &t.nodes {
                    m.learn(n, &class);
                    m.set_slots(n, t.tasks_per_node(inner.cfg.gres.as_deref()));
                }
            }
            match classes
                .iter_mut()
                .find(|(f, _)| f.host_class_under(key) == class)
            {
                Some((_, ts)) => ts.push(t),
                None => classes.push((fp, vec![t])),
            }
        }
        for (t, why) in &left_out {
            tracing::warn!(host = %inner.name, "node type left out: {t}: {why}");
        }
        if classes.is_empty() {
            return Err(TransportError::NoNodeType { left_out });
        }
        if classes.len() == 1 {
            let (fp, _) = classes.remove(0);
            if let Ok(mut e) = inner.expected.lock() {
                *e = Some(fp.clone());
            }
            if let Ok(mut s) = inner.steer.lock() {
                *s = Some(Steering {
                    class: fp.host_class_under(key),
                    nodes: map,
                });
            }
            self.start();
            return Ok(Discovery::Probed(Box::new(fp)));
        }
        let mut parts: Vec<Part> = Vec::new();
        for (fp, ts) in classes {
            let mut suffix = ts.first().map(|t| t.tag()).unwrap_or_default();
            if parts.iter().any(|p| p.suffix == suffix) {
                let first = ts
                    .first()
                    .and_then(|t| t.nodes.first())
                    .cloned()
                    .unwrap_or_default();
                suffix = format!("{suffix}-{first}");
            }
            let mut members: Vec<String> = ts.iter().flat_map(|t| t.nodes.clone()).collect();
            members.sort();
            let capacity = ts
                .iter()
                .map(|t| t.nodes.len() as u64 * t.tasks_per_node(inner.cfg.gres.as_deref()))
                .sum();
            let steering = Steering {
                class: fp.host_class_under(key),
                nodes: map.clone(),
            };
            let part = self.part(&suffix, fp.clone(), steering);
            part.start();
            parts.push(Part {
                suffix,
                nodes: members,
                capacity,
                fingerprint: fp,
                transport: Arc::new(part),
            });
        }
        Ok(Discovery::Parts(parts))
    }

    /// Find this study's jobs of earlier launchers and adopt their tasks.
    pub(super) async fn adopt(&self) -> Result<(), TransportError> {
        let inner = &self.inner;
        let states = match inner.query().await {
            Ok(s) => s,
            Err(e) => return Err(TransportError::ListJobs(Box::new(e))),
        };
        // Batch directories named in the jobs' comments.
        let mut batches: BTreeMap<String, String> = BTreeMap::new();
        for (id, (_, _, comment)) in &states {
            let job = id.split('_').next().unwrap_or_default().to_string();
            // Another entry's (or part's) jobs are its own to adopt; jobs
            // of launchers that did not name the host are anyone's.
            let host = comment.split(':').find_map(|p| p.strip_prefix("host="));
            if host.is_some_and(|h| h != inner.name) {
                continue;
            }
            if let Some(b) = comment.split(':').find_map(|p| p.strip_prefix("batch=")) {
                batches.insert(job, b.to_string());
            }
        }
        if batches.is_empty() {
            return Ok(());
        }
        let root = inner.root().await?;
        let study = inner.study_id();
        let manifest_paths: Vec<String> = batches
            .values()
            .map(|b| format!("{root}/{study}/batches/{b}/manifest.json"))
            .collect();
        let manifests = inner.login.read_files(&manifest_paths).await?;
        let mut adopted = 0;
        for (job, batch) in &batches {
            let dir = format!("{root}/{study}/batches/{batch}");
            let Some(bytes) = manifests.get(&format!("{dir}/manifest.json")) else {
                continue;
            };
            let Ok(manifest) = serde_json::from_slice::<Manifest>(bytes) else {
                continue;
            };
            for t in manifest.tasks {
                let id = format!("{job}_{}", t.task);
                let Some((state, node, _)) = states.get(&id) else {
                    continue;
                };
                let spec = AttemptSpec {
                    study_id: study.clone(),
                    trial_key: t.trial_key.clone(),
                    attempt_id: t.attempt_id.clone(),
                    command: String::new(),
                    env: Vec::new(),
                    timeout: Duration::ZERO,
                    warmup: 0,
                    outputs: t.outputs.clone(),
                    tolerance_files: t.tolerance_files.clone(),
                    result_files: t.result_files.clone(),
                    streams: t.streams.clone(),
                    slot: 0,
                    trial_dir: t.trial_dir.clone(),
                    result_path: String::new(),
                    keep_logs: false,
                    checkpoint: t.checkpoint.clone(),
                };
                if let Ok(mut ids) = inner.adopted_ids.lock() {
                    ids.insert(id.clone(), t.attempt_id.clone());
                }
                if let Ok(mut m) = inner.inflight.lock() {
                    m.insert(
                        id.clone(),
                        Task {
                            spec,
                            tx: None,
                            frames: format!("{dir}/t{}.frames", t.task),
                            submitted: Instant::now(),
                            state: state.clone(),
                            node: node.clone(),
                            cancelling: false,
                        },
                    );
                }
                if let Ok(mut a) = inner.adopted.lock() {
                    a.insert(t.trial_key, id);
                }
                adopted += 1;
            }
        }
        if adopted > 0 {
            tracing::info!(host = %inner.name, adopted, "adopted tasks of an earlier launcher");
            self.start();
            inner.wake_poller.notify_one();
        }
        Ok(())
    }
}
