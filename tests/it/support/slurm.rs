//! Real single-node Slurm clusters for the Slurm transport tests
//! (`support::slurm`). It uses nothing else of the support module:
//! benches/slurm_calls.rs includes this file alone, with `#[path]`.
//!
//! A [`Cluster`] is one `slurmctld` and one `slurmd` per node name, all on
//! this machine, with its own `slurm.conf`, ports, ClusterName, state, spool,
//! pid, log and job-completion files under a short temp directory
//! (`/tmp/tsXXXXXX`). Several clusters run at once (parallel tests, several
//! test binaries): they share nothing but the system `munged`. Every client
//! command needs the cluster's `SLURM_CONF`: use [`Cluster::cmd`],
//! [`Cluster::env`] or [`Cluster::apply_env`].
//!
//! Node names model host classes: every node is `NodeHostname=localhost
//! NodeAddr=127.0.0.1` with its own `Port=`, and `slurmd -N <name>` plays it.
//! Its GPUs are FAKE: `gres.conf` (`AutoDetect=off`) lists files
//! `<dir>/nodes/<name>/dev/nvidiaN` that are symlinks to /dev/null, so
//! `--gres=gpu:1` allocates one and sets `CUDA_VISIBLE_DEVICES`; a node with
//! `gpu_type` "h100" has `Gres=gpu:h100:N` and `Feature=h100` (so
//! `--gres=gpu:h100:1` and `--constraint=h100` work too).
//!
//! How a job sees its node's GPU model: `<dir>/nodes/<name>/bin/nvidia-smi` is
//! a FAKE (a wrapper that sets FAKE_GPU_NAME/FAKE_GPU_COUNT and runs
//! tests/fixtures/fake-nvidia-smi), and the cluster's `TaskProlog`
//! (`<dir>/taskprolog`) prints `export PATH=<dir>/nodes/$SLURMD_NODENAME/bin:$PATH`.
//! slurmstepd runs the TaskProlog before every task (the batch script
//! included) and sets each `export NAME=value` line of its output in the
//! task's environment, so the node's bin directory comes first on PATH
//! whatever the job script does or exports (`--export=ALL` or `NONE`).
//! Starting each slurmd with another PATH would not work: a job's
//! environment is the submitter's (plus SLURM_* variables), and slurmd's own
//! environment does not reach it (checked on slurm-wlm 22.05).
//!
//! Clean-up: the daemons run with `TUNECTL_SLURM_CLUSTER=<dir>` in their
//! environment (slurmstepd inherits it from slurmd) and the TaskProlog exports
//! it into every task; dropping the cluster cancels its jobs, stops its
//! daemons and kills every process that still carries the marker, and their
//! descendants. A test process killed before it can drop its clusters
//! (Ctrl-C, a timeout) leaves them running; the next `Cluster::start`, in
//! any process, kills those and removes their directories (each cluster's
//! `owner` file names its test process by pid and start time).
//!
//! Timing (slurm-wlm 22.05, 2 cores): a cluster is up (every node idle)
//! 0.1–0.5 s after `start` begins, but slurmctld's scheduler first runs about
//! 3 s after slurmctld starts, so the first job starts then; after that a
//! short job is submitted, run and seen finished in about 1 s (the main
//! scheduler runs every second here: `sched_interval=1`). `node_down` +
//! `node_resume` to idle: about 1 s. Dropping a cluster: about 0.2 s.
//!
//! Needs root (slurmd runs jobs as their users) and slurm-wlm and munge
//! (Debian; `scripts/test.sh` installs them through scripts/slurm.sh and
//! starts munged; if munged is not answering, the first cluster runs
//! `slurm_install` from that script to start it). Facts about Slurm that
//! this relies on: docs/testing.md and the comments below.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub const SLURMCTLD: &str = "/usr/sbin/slurmctld";
pub const SLURMD: &str = "/usr/sbin/slurmd";
/// The environment variable (value: the cluster's directory) that marks the
/// daemons and job tasks of one cluster.
pub const MARKER: &str = "TUNECTL_SLURM_CLUSTER";

/// How long one start attempt may take until every node is idle (it takes
/// about 0.2 s).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Fresh ports tried by `Cluster::start` when another process takes one of
/// them between the probe and a daemon's bind (the daemon then exits with
/// "Address already in use").
const START_TRIES: u32 = 5;
/// The longest a client command run by the harness may take (Slurm's own
/// MessageTimeout is 10 s).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long drop waits for cancelled jobs to leave the queue, and for each
/// daemon to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Job states after which a job does not run again (squeue `%T`,
/// `scontrol show job` JobState=). A requeued job goes back to PENDING.
pub const FINISHED_STATES: &[&str] = &[
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
];

/// One node to start.
#[derive(Debug, Clone, Copy)]
pub struct NodeSpec {
    /// Slurm node name, e.g. "gpu-a" (letters, digits, '-' and '_').
    pub name: &'static str,
    /// GRES type and node feature, e.g. "h100"; "" for untyped GPUs and no
    /// feature.
    pub gpu_type: &'static str,
    /// Number of FAKE GPUs (GRES `gpu`); 0 is a node without GPUs.
    pub gpus: u32,
    /// What the node's FAKE nvidia-smi answers (FAKE_GPU_NAME), e.g.
    /// "NVIDIA H100 80GB HBM3".
    pub gpu_name: &'static str,
    /// Slurm CPUs of the node (need not match the machine:
    /// `SlurmdParameters=config_overrides`).
    pub cpus: u32,
}

/// One node of a [`Cluster`]: a `slurmd -D -N <name>`.
#[derive(Debug)]
pub struct Node {
    pub name: String,
    pub gpu_type: String,
    pub gpus: u32,
    pub cpus: u32,
    /// slurmd's port (`Port=` of its NodeName line).
    pub port: u16,
    /// slurmd's log file (`SlurmdLogFile`).
    pub log: PathBuf,
    /// slurmd's stdout and stderr (errors before the log file opens).
    pub out: PathBuf,
    child: Option<Child>,
}

/// A running Slurm cluster; dropping it cancels its jobs and stops its
/// daemons and every process of its jobs.
pub struct Cluster {
    /// Everything lives here (`/tmp/tsXXXXXX`). Removed on drop.
    pub dir: TempDir,
    /// `slurm.conf`: export it as SLURM_CONF for every client command.
    pub conf: PathBuf,
    /// ClusterName (`t<pid>x<n>`; jobs see it as SLURM_CLUSTER_NAME).
    pub name: String,
    /// SlurmctldPort.
    pub ctld_port: u16,
    /// FirstJobId: differs between the clusters of one test process, so a
    /// job id of one cluster is not a job id of another.
    pub first_job_id: u32,
    /// slurmctld's log file and its stdout/stderr.
    pub ctld_log: PathBuf,
    pub ctld_out: PathBuf,
    /// JobCompLoc of jobcomp/filetxt: one line per finished job run; what
    /// `sacct -c` reads.
    pub jobcomp: PathBuf,
    /// A directory for job files; the working directory of [`Cluster::cmd`]
    /// (so `slurm-%j.out` files never land in the repository).
    pub work: PathBuf,
    pub nodes: Vec<Node>,
    ctld: Option<Child>,
}

/// A client command's result.
#[derive(Debug, Clone)]
pub struct CmdOut {
    /// Exit code; -1 if killed by a signal or by the harness's timeout.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOut {
    pub fn ok(&self) -> bool {
        self.code == 0
    }
}

/// One row of `squeue -t all -h -o '%i|%A|%T|%r|%N'`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// `%i`: "1042", an array task "1043_2", or pending array tasks not yet
    /// split off "1043_[2-3]".
    pub id: String,
    /// `%A`: the job id proper (an array task's own id).
    pub raw_id: String,
    /// `%T`: PENDING, RUNNING, COMPLETED, ...
    pub state: String,
    /// `%r`: None, Resources, BeginTime, "ReqNodeNotAvail, UnavailableNodes:gpu-a", ...
    pub reason: String,
    /// `%N`: the node(s); empty while pending.
    pub nodes: String,
}

impl JobRow {
    pub fn finished(&self) -> bool {
        FINISHED_STATES.contains(&self.state.as_str())
    }
}

static CLUSTERS: AtomicU32 = AtomicU32::new(0);

impl Cluster {
    /// Start a cluster with one node per spec and wait (at most 30 s) until
    /// every node is idle. Panics with the reason and the daemons' logs if it
    /// does not come up.
    pub fn start(nodes: &[NodeSpec]) -> Cluster {
        Cluster::start_with(nodes, "")
    }

    /// [`Cluster::start`] with extra slurm.conf lines, written after the
    /// harness's settings and before the NodeName lines (a later setting of
    /// the same key wins), e.g. "JobRequeue=0\n".
    pub fn start_with(nodes: &[NodeSpec], extra_conf: &str) -> Cluster {
        require_slurm();
        assert!(!nodes.is_empty(), "Cluster::start: no nodes");
        let mut seen = HashSet::new();
        for n in nodes {
            assert!(
                !n.name.is_empty()
                    && n.name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "Cluster::start: bad node name {:?}",
                n.name
            );
            assert!(seen.insert(n.name), "Cluster::start: node {} twice", n.name);
            assert!(n.cpus > 0, "Cluster::start: node {} has 0 cpus", n.name);
            assert!(
                n.gpu_type
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "Cluster::start: bad gpu_type {:?}",
                n.gpu_type
            );
        }
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-nvidia-smi");
        assert!(
            fixture.is_file(),
            "Cluster::start: the fake nvidia-smi is missing at {}",
            fixture.display()
        );

        let seq = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let dir = tempfile::Builder::new()
            .prefix("ts")
            .tempdir_in("/tmp")
            .expect("Cluster::start: creating the cluster directory under /tmp");
        let root = dir.path().to_path_buf();
        write(&root.join("owner"), &owner_line());
        reap_abandoned();
        let mkdir = |p: &Path| {
            fs::create_dir_all(p)
                .unwrap_or_else(|e| panic!("Cluster::start: creating {}: {e}", p.display()))
        };
        for sub in ["log", "run", "work"] {
            mkdir(&root.join(sub));
        }

        let mut built = Vec::with_capacity(nodes.len());
        for spec in nodes {
            let node_dir = root.join("nodes").join(spec.name);
            let bin = node_dir.join("bin");
            let dev = node_dir.join("dev");
            mkdir(&bin);
            mkdir(&dev);
            // FAKE GPU device files: gres.conf needs files that exist; nothing
            // opens them.
            for i in 0..spec.gpus {
                let f = dev.join(format!("nvidia{i}"));
                symlink("/dev/null", &f)
                    .unwrap_or_else(|e| panic!("Cluster::start: symlink {}: {e}", f.display()));
            }
            let smi = bin.join("nvidia-smi");
            write(
                &smi,
                &format!(
                    "#!/bin/sh\n\
                     # FAKE nvidia-smi of Slurm test node `{name}` (tests/it/support/slurm.rs): NOT\n\
                     # NVIDIA's tool. It sets this node's fake GPUs and runs\n\
                     # tests/fixtures/fake-nvidia-smi.\n\
                     FAKE_GPU_NAME={gpu}\n\
                     FAKE_GPU_COUNT={count}\n\
                     export FAKE_GPU_NAME FAKE_GPU_COUNT\n\
                     exec /bin/sh {fixture} \"$@\"\n",
                    name = spec.name,
                    gpu = sh_quote(spec.gpu_name),
                    count = spec.gpus,
                    fixture = sh_quote(&fixture.to_string_lossy()),
                ),
            );
            chmod_x(&smi);
            built.push(Node {
                name: spec.name.to_string(),
                gpu_type: spec.gpu_type.to_string(),
                gpus: spec.gpus,
                cpus: spec.cpus,
                port: 0,
                log: root.join(format!("log/slurmd-{}.log", spec.name)),
                out: root.join(format!("log/slurmd-{}.out", spec.name)),
                child: None,
            });
        }

        let taskprolog = root.join("taskprolog");
        write(
            &taskprolog,
            &format!(
                "#!/bin/sh\n\
                 # TaskProlog of Slurm test cluster t{pid}x{seq} (tests/it/support/slurm.rs).\n\
                 # slurmstepd runs it before each task; `export NAME=value` lines on its\n\
                 # stdout are set in the task's environment. It puts the node's FAKE\n\
                 # nvidia-smi first on PATH and marks the task as this cluster's.\n\
                 echo \"export PATH={root}/nodes/$SLURMD_NODENAME/bin:${{PATH:-/usr/local/bin:/usr/bin:/bin}}\"\n\
                 echo \"export {MARKER}={root}\"\n",
                root = root.display(),
            ),
        );
        chmod_x(&taskprolog);

        let mut gres = String::from(
            "# FAKE GPUs of the Slurm test cluster (tests/it/support/slurm.rs): the files\n\
             # are symlinks to /dev/null. AutoDetect=off: there is no NVML here.\n\
             AutoDetect=off\n",
        );
        for n in &built {
            for i in 0..n.gpus {
                let ty = if n.gpu_type.is_empty() {
                    String::new()
                } else {
                    format!(" Type={}", n.gpu_type)
                };
                gres.push_str(&format!(
                    "NodeName={} Name=gpu{ty} File={}\n",
                    n.name,
                    root.join(format!("nodes/{}/dev/nvidia{i}", n.name))
                        .display()
                ));
            }
        }
        write(&root.join("gres.conf"), &gres);

        let name = format!("t{pid}x{seq}");
        let first_job_id = (seq % 1000 + 1) * 1000 + pid % 1000;
        let conf = root.join("slurm.conf");
        let mut cluster = Cluster {
            conf,
            name,
            ctld_port: 0,
            first_job_id,
            ctld_log: root.join("log/slurmctld.log"),
            ctld_out: root.join("log/slurmctld.out"),
            jobcomp: root.join("jobcomp.txt"),
            work: root.join("work"),
            nodes: built,
            ctld: None,
            dir,
        };

        let started = Instant::now();
        let mut last = String::new();
        for attempt in 1..=START_TRIES {
            match cluster.try_start(extra_conf) {
                Ok(()) => {
                    if std::env::var_os("TUNECTL_SLURM_VERBOSE").is_some() {
                        eprintln!(
                            "slurm test cluster {} up in {:?} (attempt {attempt})",
                            cluster.name,
                            started.elapsed()
                        );
                    }
                    return cluster;
                }
                Err(StartError::PortBusy(why)) => {
                    cluster.stop_daemons(false);
                    cluster.kill_marked();
                    last = why;
                }
                Err(StartError::Failed(why)) => {
                    let logs = cluster.logs();
                    cluster.stop_daemons(false);
                    cluster.kill_marked();
                    panic!(
                        "Cluster::start: cluster {} (attempt {attempt}): {why}\n{logs}",
                        cluster.name
                    );
                }
            }
        }
        let logs = cluster.logs();
        panic!(
            "Cluster::start: cluster {} found no free ports in {START_TRIES} tries; last: {last}\n{logs}",
            cluster.name
        );
    }

    /// One start attempt with fresh ports and empty state.
    fn try_start(&mut self, extra_conf: &str) -> Result<(), StartError> {
        let root = self.dir.path().to_path_buf();
        for sub in ["state", "spool"] {
            let p = root.join(sub);
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p)
                .map_err(|e| StartError::Failed(format!("creating {}: {e}", p.display())))?;
        }
        for n in &self.nodes {
            let p = root.join("spool").join(&n.name);
            fs::create_dir_all(&p)
                .map_err(|e| StartError::Failed(format!("creating {}: {e}", p.display())))?;
        }
        for f in [&self.ctld_log, &self.ctld_out, &self.jobcomp] {
            let _ = fs::remove_file(f);
        }
        for n in &self.nodes {
            let _ = fs::remove_file(&n.log);
            let _ = fs::remove_file(&n.out);
        }

        let ports = free_ports(1 + self.nodes.len());
        self.ctld_port = ports[0];
        for (n, &p) in self.nodes.iter_mut().zip(&ports[1..]) {
            n.port = p;
        }
        write(&self.conf, &self.slurm_conf(extra_conf));

        // slurmctld first; the slurmds register with it when they start.
        let child = self.spawn_daemon(
            Command::new(SLURMCTLD)
                .arg("-D")
                .arg("-i")
                .arg("-f")
                .arg(&self.conf),
            &self.ctld_out,
        )?;
        self.ctld = Some(child);
        // Listening: /proc shows slurmctld's own listening socket on the
        // port. (A TCP connect would be accepted by another process holding
        // the port too, and slurmctld only logs its bind error after about
        // 10 s of retrying; `scontrol ping` would hang for MessageTimeout
        // against such a port, and sinfo retries for 9 s while nothing
        // listens.)
        let ctld_pid = self.ctld.as_ref().map_or(0, Child::id);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            self.check_daemons()?;
            match port_listener(ctld_pid, self.ctld_port) {
                Listener::Ours => break,
                Listener::Other => {
                    return Err(StartError::PortBusy(format!(
                        "another process listens on port {}",
                        self.ctld_port
                    )));
                }
                Listener::Nobody => {}
            }
            if Instant::now() >= deadline {
                return Err(StartError::Failed(format!(
                    "slurmctld did not listen on port {} within {START_TIMEOUT:?}",
                    self.ctld_port
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }

        for i in 0..self.nodes.len() {
            let mut c = Command::new(SLURMD);
            c.arg("-D")
                .arg("-N")
                .arg(&self.nodes[i].name)
                .arg("-f")
                .arg(&self.conf);
            let child = self.spawn_daemon(&mut c, &self.nodes[i].out)?;
            self.nodes[i].child = Some(child);
        }

        loop {
            self.check_daemons()?;
            if self.all_idle() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::Failed(format!(
                    "the nodes were not all idle within {START_TIMEOUT:?}; sinfo: {}",
                    self.sinfo_text()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn slurm_conf(&self, extra: &str) -> String {
        let root = self.dir.path().display();
        let mut s = format!(
            "# Slurm test cluster {name} (tests/it/support/slurm.rs): one slurmctld and one\n\
             # slurmd per node name, all on this machine.\n\
             ClusterName={name}\n\
             # Several clusters on one machine each use localhost with their own port.\n\
             SlurmctldHost=localhost\n\
             SlurmctldPort={ctld_port}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             MpiDefault=none\n\
             MailProg=/bin/true\n\
             StateSaveLocation={root}/state\n\
             SlurmdSpoolDir={root}/spool/%n\n\
             SlurmctldPidFile={root}/run/slurmctld.pid\n\
             SlurmdPidFile={root}/run/slurmd-%n.pid\n\
             SlurmctldLogFile={root}/log/slurmctld.log\n\
             SlurmdLogFile={root}/log/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             # Puts the node's FAKE nvidia-smi first on PATH in every task.\n\
             TaskProlog={root}/taskprolog\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             # `sacct -c` reads this file (there is no slurmdbd).\n\
             JobCompType=jobcomp/filetxt\n\
             JobCompLoc={root}/jobcomp.txt\n\
             # 1, not 2: with 2 a node set DOWN by scontrol is back in service\n\
             # as soon as its slurmd answers (within milliseconds).\n\
             ReturnToService=1\n\
             # The node lines need not match this machine's hardware.\n\
             SlurmdParameters=config_overrides\n\
             # Finished jobs stay visible to squeue/scontrol for an hour.\n\
             MinJobAge=3600\n\
             FirstJobId={first}\n\
             # sched_interval=1: the main scheduler looks at every pending job\n\
             # each second (default 60 s). Events (submit, job end) start it too,\n\
             # but a resumed node is not: jobs waiting for it would wait up to\n\
             # a minute.\n\
             SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1\n\
             KillWait=2\n\
             GresTypes=gpu\n",
            name = self.name,
            ctld_port = self.ctld_port,
            first = self.first_job_id,
        );
        if !extra.is_empty() {
            s.push_str("# Extra lines from the test:\n");
            s.push_str(extra);
            if !extra.ends_with('\n') {
                s.push('\n');
            }
        }
        for n in &self.nodes {
            s.push_str(&format!(
                "NodeName={} NodeHostname=localhost NodeAddr=127.0.0.1 Port={} CPUs={} RealMemory=1000",
                n.name, n.port, n.cpus
            ));
            if n.gpus > 0 {
                if n.gpu_type.is_empty() {
                    s.push_str(&format!(" Gres=gpu:{}", n.gpus));
                } else {
                    s.push_str(&format!(" Gres=gpu:{}:{}", n.gpu_type, n.gpus));
                }
            }
            if !n.gpu_type.is_empty() {
                s.push_str(&format!(" Feature={}", n.gpu_type));
            }
            s.push('\n');
        }
        s.push_str("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n");
        s
    }

    fn spawn_daemon(&self, c: &mut Command, out: &Path) -> Result<Child, StartError> {
        let file = File::create(out)
            .map_err(|e| StartError::Failed(format!("creating {}: {e}", out.display())))?;
        let err = file
            .try_clone()
            .map_err(|e| StartError::Failed(format!("duplicating a file handle: {e}")))?;
        scrub_slurm_env(c);
        c.env("SLURM_CONF", &self.conf)
            .env(MARKER, self.dir.path())
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                StartError::Failed(format!(
                    "cannot start {:?}: {e} (install slurm-wlm or run scripts/test.sh)",
                    c.get_program()
                ))
            })
    }

    /// Err if a daemon has exited or could not bind its port (PortBusy).
    /// A slurmctld that cannot bind logs "fatal: ... Address already in use"
    /// at once but takes about 10 s to exit: its log is read too.
    fn check_daemons(&mut self) -> Result<(), StartError> {
        let mut daemons: Vec<(String, &mut Option<Child>, &Path, &Path)> = vec![(
            "slurmctld".to_string(),
            &mut self.ctld,
            &self.ctld_log,
            &self.ctld_out,
        )];
        for n in &mut self.nodes {
            daemons.push((format!("slurmd {}", n.name), &mut n.child, &n.log, &n.out));
        }
        for (who, child, log, out) in daemons {
            let Some(c) = child.as_mut() else {
                continue;
            };
            let status = c.try_wait().ok().flatten();
            let text = format!("{}{}", read_lossy(log), read_lossy(out));
            if text.contains("Address already in use") {
                return Err(StartError::PortBusy(format!(
                    "{who} could not bind its port"
                )));
            }
            if let Some(status) = status {
                *child = None;
                return Err(StartError::Failed(format!("{who} exited ({status})")));
            }
        }
        Ok(())
    }

    /// `SLURM_CONF=<conf>`: what a client (sbatch, squeue, scontrol, sacct,
    /// scancel, and tunectl's Slurm transport) needs to talk to this cluster.
    /// Also clear inherited SLURM_*/SBATCH_*/SQUEUE_*... variables (they
    /// change the clients' behaviour): [`Cluster::apply_env`] does both.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![(
            "SLURM_CONF".to_string(),
            self.conf.to_string_lossy().into_owned(),
        )]
    }

    /// Set this cluster's client environment on `c` (see [`Cluster::env`])
    /// and remove the Slurm client variables it would inherit, and
    /// CUDA_VISIBLE_DEVICES: jobs inherit the submitter's environment
    /// (`--export=ALL`), and a job without `--gres=gpu` would see the test
    /// machine's value; Slurm sets it for GPU jobs.
    pub fn apply_env(&self, c: &mut Command) {
        scrub_slurm_env(c);
        c.env_remove("CUDA_VISIBLE_DEVICES");
        for (k, v) in self.env() {
            c.env(k, v);
        }
    }

    /// A client command (sbatch, squeue, scontrol, sacct, scancel, sinfo)
    /// for this cluster: its environment set, working directory
    /// [`Cluster::work`], stdin empty.
    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        self.apply_env(&mut c);
        c.current_dir(&self.work).stdin(Stdio::null());
        c
    }

    /// Run a client command (bounded: 30 s) and return its output.
    pub fn run(&self, program: &str, args: &[&str]) -> CmdOut {
        let mut c = self.cmd(program);
        c.args(args);
        output_timeout(c, CLIENT_TIMEOUT)
            .unwrap_or_else(|e| panic!("{program} {}: {e}", args.join(" ")))
    }

    /// Run a client command that must succeed; its stdout.
    pub fn run_ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        assert!(
            out.ok(),
            "`{program} {}` failed (exit {}): {}{}\n{}",
            args.join(" "),
            out.code,
            out.stdout,
            out.stderr,
            self.logs()
        );
        out.stdout
    }

    /// `sbatch --parsable <args>`: the job id (for an array, the array's id).
    pub fn sbatch(&self, args: &[&str]) -> String {
        let mut all = vec!["--parsable"];
        all.extend_from_slice(args);
        let out = self.run_ok("sbatch", &all);
        // --parsable prints "id" or "id;cluster".
        let id = out.trim().split(';').next().unwrap_or("").to_string();
        assert!(
            !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()),
            "sbatch printed no job id: {out:?}"
        );
        id
    }

    /// Every job squeue knows (finished ones too, for MinJobAge = 1 h).
    pub fn jobs(&self) -> Vec<JobRow> {
        parse_squeue(&self.run_ok("squeue", &["-t", "all", "-h", "-o", "%i|%A|%T|%r|%N"]))
    }

    /// The rows of one job (an array id gives all of its tasks); empty if
    /// squeue does not know it.
    pub fn job(&self, id: &str) -> Vec<JobRow> {
        let out = self.run(
            "squeue",
            &["-t", "all", "-h", "-j", id, "-o", "%i|%A|%T|%r|%N"],
        );
        if !out.ok() {
            // "slurm_load_jobs error: Invalid job id specified"
            return Vec::new();
        }
        parse_squeue(&out.stdout)
    }

    /// `scontrol show job -o <id>`: one `Key=Value ...` line per job (per
    /// array task), parsed; values with spaces come with '_' instead.
    pub fn show_job(&self, id: &str) -> Vec<HashMap<String, String>> {
        let out = self.run("scontrol", &["show", "job", "-o", id]);
        if !out.ok() {
            return Vec::new();
        }
        out.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(parse_key_values)
            .collect()
    }

    /// Poll `check` every 100 ms until it returns Some, at most `timeout`;
    /// panics with `what`, the last squeue and the daemons' logs otherwise.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check() {
                return v;
            }
            if Instant::now() >= deadline {
                let queue = self.run("squeue", &["-t", "all", "-h", "-o", "%i|%A|%T|%r|%N"]);
                panic!(
                    "timed out after {timeout:?} waiting for {what}\nsqueue:\n{}{}\nsinfo: {}\n{}",
                    queue.stdout,
                    queue.stderr,
                    self.sinfo_text(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until job `id` (every task of an array) is in a finished state;
    /// its rows. Panics after `timeout`.
    pub fn wait_finished(&self, id: &str, timeout: Duration) -> Vec<JobRow> {
        self.wait_for(&format!("job {id} to finish"), timeout, || {
            let rows = self.job(id);
            (!rows.is_empty() && rows.iter().all(JobRow::finished)).then_some(rows)
        })
    }

    /// Wait until job `id` (a single job or one array task) is in `state`.
    pub fn wait_state(&self, id: &str, state: &str, timeout: Duration) -> JobRow {
        self.wait_for(&format!("job {id} to be {state}"), timeout, || {
            self.job(id).into_iter().find(|r| r.state == state)
        })
    }

    /// Node name -> state as `sinfo -h -N -o '%N %T'` prints it: idle,
    /// allocated, mixed, down, idle* (not responding), ...
    pub fn node_states(&self) -> Result<HashMap<String, String>, String> {
        let mut c = self.cmd("sinfo");
        c.args(["-h", "-N", "-o", "%N %T"]);
        let out = output_timeout(c, CLIENT_TIMEOUT)?;
        if !out.ok() {
            return Err(format!(
                "sinfo failed ({}): {}",
                out.code,
                out.stderr.trim()
            ));
        }
        Ok(out
            .stdout
            .lines()
            .filter_map(|l| {
                let (n, s) = l.trim().split_once(' ')?;
                Some((n.to_string(), s.trim().to_string()))
            })
            .collect())
    }

    /// One node's state (see [`Cluster::node_states`]); "" if unknown.
    pub fn node_state(&self, name: &str) -> String {
        self.node_states()
            .ok()
            .and_then(|m| m.get(name).cloned())
            .unwrap_or_default()
    }

    /// `scontrol update nodename=<name> state=down reason=test`. Running
    /// jobs on it end at once: requeued (PENDING, reason BeginTime, eligible
    /// again about 2 minutes later) unless submitted with `--no-requeue`,
    /// which makes them NODE_FAIL. The node stays down until
    /// [`Cluster::node_resume`] (ReturnToService=1).
    pub fn node_down(&self, name: &str) {
        self.run_ok(
            "scontrol",
            &[
                "update",
                &format!("nodename={name}"),
                "state=down",
                "reason=test",
            ],
        );
    }

    /// `scontrol update nodename=<name> state=resume`; the node is idle
    /// again about 0.5 s later (see [`Cluster::wait_idle`]).
    pub fn node_resume(&self, name: &str) {
        self.run_ok(
            "scontrol",
            &["update", &format!("nodename={name}"), "state=resume"],
        );
    }

    /// Wait until every node is idle; false after `timeout`.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.all_idle() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether sinfo says "idle" for every node now.
    fn all_idle(&self) -> bool {
        self.node_states().is_ok_and(|states| {
            self.nodes
                .iter()
                .all(|n| states.get(&n.name).is_some_and(|s| s == "idle"))
        })
    }

    /// Pids of the processes that belong to this cluster now: its daemons,
    /// slurmstepds and job tasks (marked with [`MARKER`]), and their
    /// descendants.
    pub fn processes(&self) -> Vec<u32> {
        cluster_processes(self.dir.path())
    }

    /// The daemons' logs (the last 60 lines of each), for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let mut add = |title: String, path: &Path| {
            out.push_str(&format!("--- {title} ({})\n", path.display()));
            out.push_str(&tail(&read_lossy(path), 60));
        };
        add("slurmctld log".into(), &self.ctld_log);
        add("slurmctld stdout/stderr".into(), &self.ctld_out);
        for n in &self.nodes {
            add(format!("slurmd {} log", n.name), &n.log);
            add(format!("slurmd {} stdout/stderr", n.name), &n.out);
        }
        out
    }

    fn sinfo_text(&self) -> String {
        match self.node_states() {
            Ok(m) => {
                let mut v: Vec<String> = m.into_iter().map(|(n, s)| format!("{n}={s}")).collect();
                v.sort();
                v.join(" ")
            }
            Err(e) => e,
        }
    }

    /// SIGKILL every process of this cluster (see [`Cluster::processes`])
    /// until none is left (at most about 1 s).
    fn kill_marked(&self) {
        for _ in 0..20 {
            let left = self.processes();
            if left.is_empty() {
                break;
            }
            for p in left {
                signal(p, libc::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM the daemons and SIGKILL those still there after STOP_TIMEOUT
    /// (`graceful`), or SIGKILL them at once.
    fn stop_daemons(&mut self, graceful: bool) {
        let mut children: Vec<Child> = Vec::new();
        // slurmds first: a slurmctld that goes first makes them log errors.
        for n in &mut self.nodes {
            children.extend(n.child.take());
        }
        children.extend(self.ctld.take());
        let sig = if graceful {
            libc::SIGTERM
        } else {
            libc::SIGKILL
        };
        for c in &children {
            signal(c.id(), sig);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for c in &mut children {
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // No panics here: a Cluster is often dropped while a test unwinds.
        let started = Instant::now();
        if self.ctld.is_some() {
            let mut c = self.cmd("scancel");
            c.args(["--user", "root"]);
            let _ = output_timeout(c, Duration::from_secs(10));
            // Cancelled jobs pass through COMPLETING while slurmstepd kills
            // their tasks (KillWait=2).
            let deadline = Instant::now() + STOP_TIMEOUT;
            loop {
                let mut c = self.cmd("squeue");
                c.args(["-h", "-o", "%i"]);
                match output_timeout(c, Duration::from_secs(10)) {
                    Ok(out) if out.ok() && out.stdout.trim().is_empty() => break,
                    Ok(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(100))
                    }
                    _ => break,
                }
            }
        }
        self.stop_daemons(true);
        let daemons_stopped = started.elapsed();
        // Whatever is left (slurmstepd daemonises; tasks may outlive it).
        self.kill_marked();
        if std::env::var_os("TUNECTL_SLURM_VERBOSE").is_some() {
            eprintln!(
                "slurm test cluster {} stopped in {:?} (daemons after {daemons_stopped:?})",
                self.name,
                started.elapsed()
            );
        }
    }
}

/// The processes of the cluster whose directory is (was) `dir`, as
/// [`Cluster::processes`]; for checking after a drop that none are left.
pub fn cluster_processes(dir: &Path) -> Vec<u32> {
    marked_processes(&dir.to_string_lossy())
}

enum StartError {
    /// A daemon could not bind its port: retry with fresh ports.
    PortBusy(String),
    Failed(String),
}

// ---------------------------------------------------------------- set-up

/// Check once per process that Slurm and MUNGE are there and munged answers;
/// start munged (scripts/slurm.sh) if it does not. Panics with what to do.
fn require_slurm() {
    static CHECK: OnceLock<Result<(), String>> = OnceLock::new();
    let result = CHECK.get_or_init(|| {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("the Slurm tests must run as root (slurmd runs jobs as their users)".into());
        }
        for bin in [SLURMCTLD, SLURMD, "/usr/bin/sbatch", "/usr/bin/munge", "/usr/sbin/munged"] {
            if !Path::new(bin).exists() {
                return Err(format!(
                    "{bin} is missing: install slurm-wlm and munge (apt-get install slurm-wlm munge) or run scripts/test.sh"
                ));
            }
        }
        if munge_works() {
            return Ok(());
        }
        // munged is not running (a fresh machine or container): start it the
        // way scripts/test.sh does.
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(". ./scripts/slurm.sh && slurm_install")
            .current_dir(repo);
        let out = output_timeout(c, Duration::from_secs(120))?;
        if !out.ok() || !munge_works() {
            return Err(format!(
                "munged is not answering (munge -n | unmunge fails) and scripts/slurm.sh could not start it (exit {}): {}{}",
                out.code, out.stdout, out.stderr
            ));
        }
        Ok(())
    });
    if let Err(why) = result {
        panic!("Slurm test cluster: {why}");
    }
}

/// `munge -n | unmunge` succeeds.
fn munge_works() -> bool {
    let mut c = Command::new("sh");
    c.arg("-c").arg("munge -n | unmunge >/dev/null");
    output_timeout(c, Duration::from_secs(10)).is_ok_and(|o| o.ok())
}

/// Remove the Slurm client variables a command would inherit (a test run
/// inside a Slurm job, or with SQUEUE_FORMAT set, would confuse the
/// clients).
fn scrub_slurm_env(c: &mut Command) {
    const PREFIXES: &[&str] = &[
        "SLURM_",
        "SBATCH_",
        "SALLOC_",
        "SRUN_",
        "SQUEUE_",
        "SINFO_",
        "SACCT_",
        "SCANCEL_",
        "SCONTROL_",
        "SPANK_",
    ];
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str()
            && (PREFIXES.iter().any(|p| k.starts_with(p)) || k == MARKER)
        {
            c.env_remove(k);
        }
    }
}

/// `n` distinct ports free on every address now (slurmctld and slurmd bind
/// INADDR_ANY). A daemon may still lose one to another process: the caller
/// retries.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| {
            TcpListener::bind(("0.0.0.0", 0))
                .unwrap_or_else(|e| panic!("binding 0.0.0.0:0 to find a free port: {e}"))
        })
        .collect();
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .unwrap_or_else(|e| panic!("reading a bound port: {e}"))
                .port()
        })
        .collect()
}

// ---------------------------------------------------------------- parsing

fn parse_squeue(text: &str) -> Vec<JobRow> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(5, '|').collect();
            (f.len() == 5).then(|| JobRow {
                id: f[0].trim().to_string(),
                raw_id: f[1].trim().to_string(),
                state: f[2].trim().to_string(),
                reason: f[3].trim().to_string(),
                nodes: f[4].trim().to_string(),
            })
        })
        .collect()
}

/// "A=1 B=x y C=3" (scontrol -o) -> {A: 1, B: "x", C: 3}: fields split on
/// spaces; scontrol -o writes spaces inside values as '_'.
fn parse_key_values(line: &str) -> HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|f| {
            let (k, v) = f.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

// ---------------------------------------------------------------- processes

/// Run `c` with piped output, killing it after `timeout`.
fn output_timeout(mut c: Command, timeout: Duration) -> Result<CmdOut, String> {
    let program = c.get_program().to_string_lossy().into_owned();
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("cannot run {program}: {e} (install slurm-wlm or run scripts/test.sh)")
        })?;
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let ro = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = so.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let re = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = se.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                timed_out = true;
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    };
    let stdout = String::from_utf8_lossy(&ro.join().unwrap_or_default()).into_owned();
    let mut stderr = String::from_utf8_lossy(&re.join().unwrap_or_default()).into_owned();
    if timed_out {
        stderr.push_str(&format!("\n(killed by the test harness after {timeout:?})"));
    }
    Ok(CmdOut {
        code: if timed_out {
            -1
        } else {
            status.and_then(|s| s.code()).unwrap_or(-1)
        },
        stdout,
        stderr,
    })
}

enum Listener {
    Ours,
    Other,
    Nobody,
}

/// Who listens on TCP `port` (any address, IPv4 or IPv6): process `pid`,
/// another process, or nobody. From /proc/net/tcp{,6} and /proc/<pid>/fd.
fn port_listener(pid: u32, port: u16) -> Listener {
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        // "sl local_address rem_address st ... uid timeout inode ..."
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(&"0A"), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            let p = local
                .rsplit(':')
                .next()
                .and_then(|h| u16::from_str_radix(h, 16).ok());
            if p == Some(port) {
                inodes.insert(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return Listener::Nobody;
    }
    let ours = fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten().any(|fd| {
            fs::read_link(fd.path())
                .is_ok_and(|target| inodes.contains(target.to_string_lossy().as_ref()))
        })
    });
    if ours {
        Listener::Ours
    } else {
        Listener::Other
    }
}

/// Processes whose environment holds `MARKER=<value>`, and their
/// descendants (a task may have cleared its environment).
fn marked_processes(value: &str) -> Vec<u32> {
    scan_marked().remove(value).unwrap_or_default()
}

/// Every cluster marker value found in /proc -> its processes (marked ones
/// and their descendants; zombies and this process left out), sorted.
fn scan_marked() -> HashMap<String, Vec<u32>> {
    let prefix = format!("{MARKER}=").into_bytes();
    let me = std::process::id();
    let mut parent: HashMap<u32, u32> = HashMap::new();
    let mut marked: HashMap<u32, String> = HashMap::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return HashMap::new();
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Some(info) = proc_stat(pid) else {
            continue;
        };
        if matches!(info.state, 'Z' | 'X' | 'x') {
            continue;
        }
        parent.insert(pid, info.ppid);
        if let Ok(env) = fs::read(format!("/proc/{pid}/environ"))
            && let Some(v) = env.split(|&b| b == 0).find(|v| v.starts_with(&prefix))
        {
            marked.insert(
                pid,
                String::from_utf8_lossy(&v[prefix.len()..]).into_owned(),
            );
        }
    }
    let mut out: HashMap<String, Vec<u32>> = HashMap::new();
    // A process belongs to the nearest marked process above it (or itself).
    for &pid in parent.keys() {
        let mut p = pid;
        for _ in 0..64 {
            if let Some(v) = marked.get(&p) {
                out.entry(v.clone()).or_default().push(pid);
                break;
            }
            match parent.get(&p) {
                Some(&pp) if pp != 0 && pp != p => p = pp,
                _ => break,
            }
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

/// "<pid> <start time>" of this process, written to `<dir>/owner`.
fn owner_line() -> String {
    let me = std::process::id();
    let start = proc_stat(me).map(|i| i.start).unwrap_or(0);
    format!("{me} {start}\n")
}

/// Kill what is left of clusters whose test process is gone (killed before
/// it could drop them: Ctrl-C, a timeout) and remove their directories. A
/// cluster's `owner` file names its process by pid and start time.
fn reap_abandoned() {
    for (dir, pids) in scan_marked() {
        let owner = fs::read_to_string(Path::new(&dir).join("owner")).ok();
        let alive = owner.as_deref().is_some_and(|line| {
            let mut f = line.split_whitespace().map(|x| x.parse::<u64>().ok());
            match (f.next().flatten(), f.next().flatten()) {
                (Some(pid), Some(start)) => u32::try_from(pid)
                    .ok()
                    .and_then(proc_stat)
                    .is_some_and(|i| i.start == start && !matches!(i.state, 'Z' | 'X' | 'x')),
                _ => false,
            }
        });
        if alive {
            continue;
        }
        for p in pids {
            signal(p, libc::SIGKILL);
        }
        // Only directories this harness makes.
        if owner.is_some() && dir.starts_with("/tmp/ts") && !dir.contains("..") {
            let _ = fs::remove_dir_all(&dir);
        }
    }
}

struct ProcStat {
    state: char,
    ppid: u32,
    /// Start time in clock ticks since boot: with the pid, names a process.
    start: u64,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ... starttime(22nd) ..."; comm may hold ") ".
    let rest: Vec<&str> = text
        .get(text.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    Some(ProcStat {
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
    })
}

fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid)
        && pid > 0
    {
        // SAFETY: kill(2) has no memory effects; the pid is one we found.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

// ---------------------------------------------------------------- helpers

fn read_lossy(path: &Path) -> String {
    match fs::read(path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => format!("(cannot read: {e})\n"),
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    let mut s = all[from..].join("\n");
    s.push('\n');
    s
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()))
}

fn chmod_x(path: &Path) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
