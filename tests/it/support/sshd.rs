//! A fleet of real OpenSSH servers on loopback addresses, for the ssh
//! transport tests (`support::sshd`).
//!
//! Each host is one `/usr/sbin/sshd -D` listening on its own loopback address
//! (127.X.Y.Z; any 127/8 address works on Linux without set-up) and a free
//! port, with its own ed25519 host key. Every host accepts one client key
//! (made at test time) for the current user. A host's sessions get
//! `PATH=<root>/bin:/usr/local/bin:/usr/bin:/bin` and `HOME=<root>/home`, and
//! `<root>/bin/nvidia-smi` is a FAKE that answers for that host's GPUs
//! (tests/fixtures/fake-nvidia-smi). The working directory of a session is
//! still the user's passwd home (sshd changes into it; `HOME` only changes the
//! variable).
//!
//! Needs `/usr/sbin/sshd`, `ssh` and `ssh-keygen` (Debian: openssh-server,
//! openssh-client; `scripts/test.sh` installs them). Facts about sshd that
//! this relies on: docs/testing.md and the comments below.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::fs::{self, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// The server binary. The absolute path is required: sshd re-executes
/// itself for every connection.
pub const SSHD: &str = "/usr/sbin/sshd";

/// How long a host may take to listen (it takes about 10 ms).
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Fresh ports tried by `Fleet::start` when another process takes the port
/// between the probe and sshd's bind.
const START_TRIES: u32 = 10;
/// `restart_host` keeps the port: how long it retries while the port is busy.
const RESTART_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// One host to start.
#[derive(Debug, Clone, Copy)]
pub struct HostSpec {
    pub name: &'static str,
    /// Answered by the host's fake `nvidia-smi` (FAKE_GPU_NAME).
    pub gpu_name: &'static str,
    /// FAKE_GPU_COUNT; 0 is a host with the driver but no devices.
    pub gpu_count: u32,
}

/// One running (or killed) sshd host of a [`Fleet`].
#[derive(Debug)]
pub struct SshdHost {
    pub name: String,
    /// Its loopback address, e.g. "127.41.7.2". Distinct inside one fleet.
    pub addr: String,
    pub port: u16,
    /// The host's directory: `bin/` (fake nvidia-smi, first on PATH),
    /// `home/` (HOME), `sshd_config`, `host_key`, `sshd.log`.
    pub root: PathBuf,
    /// The public host key, "ssh-ed25519 AAAA..." (no comment).
    pub host_key_pub: String,
    /// sshd's stderr (`-e`), appended to across restarts.
    pub log: PathBuf,
    config: PathBuf,
    /// The listener; None while the host is killed.
    child: Option<Child>,
}

/// A set of sshd hosts sharing one client key and one known_hosts file.
/// Dropping it kills every sshd it started and their sessions' processes.
pub struct Fleet {
    /// Everything lives here (a short path under /tmp: ControlPath sockets
    /// are limited to about 100 bytes). Removed on drop.
    pub dir: tempfile::TempDir,
    /// The user every host accepts (the current user, `id -un`).
    pub user: String,
    /// The client's private key (ed25519, no passphrase); `.pub` next to it.
    pub client_key: PathBuf,
    /// `[addr]:port ssh-ed25519 AAAA...` for every host.
    pub known_hosts: PathBuf,
    pub hosts: Vec<SshdHost>,
    /// Session processes left behind by `kill_host`, as (pid, start time),
    /// killed on drop if still the same processes.
    orphans: Vec<(u32, u64)>,
    wrong_files: AtomicU32,
}

static FLEETS: AtomicU64 = AtomicU64::new(0);

impl Fleet {
    /// Start one sshd per spec, each on its own loopback address and a free
    /// port, and wait until each accepts TCP connections. Panics (with the
    /// reason, and sshd's log where there is one) if a host cannot start.
    pub fn start(specs: &[HostSpec]) -> Fleet {
        Fleet::start_with(specs, false)
    }

    /// [`Fleet::start`], every host on the first host's port: the fleet's
    /// addresses are consecutive (`127.X.Y.a` … `127.X.Y.a+n-1`), so one
    /// host pattern with one port names them all
    /// ([`Fleet::pattern_inventory_yaml`]).
    pub fn start_on_one_port(specs: &[HostSpec]) -> Fleet {
        Fleet::start_with(specs, true)
    }

    fn start_with(specs: &[HostSpec], one_port: bool) -> Fleet {
        require_openssh();
        assert!(
            !specs.is_empty() && specs.len() <= 253,
            "Fleet::start: between 1 and 253 hosts, got {}",
            specs.len()
        );
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-nvidia-smi");
        assert!(
            fixture.is_file(),
            "Fleet::start: the fake nvidia-smi is missing at {}",
            fixture.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("tf")
            .tempdir_in("/tmp")
            .expect("Fleet::start: creating the fleet directory under /tmp");
        let user = current_user();
        let client_key = dir.path().join("id");
        keygen(&client_key, "tunectl-test-client");
        let authorized = dir.path().join("authorized_keys");
        let client_pub = read(&with_ext(&client_key, "pub"));
        write(&authorized, &client_pub);

        let mut hosts: Vec<SshdHost> = Vec::with_capacity(specs.len());
        for (i, (spec, addr)) in specs.iter().zip(pick_addresses(specs.len())).enumerate() {
            let root = dir.path().join(format!("h{i}"));
            for sub in ["bin", "home"] {
                fs::create_dir_all(root.join(sub)).unwrap_or_else(|e| {
                    panic!("Fleet::start: creating {}: {e}", root.join(sub).display())
                });
            }
            let host_key = root.join("host_key");
            keygen(&host_key, &format!("tunectl-test-host-{}", spec.name));
            let host_key_pub = key_without_comment(&read(&with_ext(&host_key, "pub")));

            let smi = root.join("bin/nvidia-smi");
            write(
                &smi,
                &format!(
                    "#!/bin/sh\n\
                     # FAKE nvidia-smi of test host `{name}` (tests/it/support/sshd.rs): NOT NVIDIA's\n\
                     # tool. It sets this host's fake GPUs and runs tests/fixtures/fake-nvidia-smi.\n\
                     FAKE_GPU_NAME={gpu}\n\
                     FAKE_GPU_COUNT={count}\n\
                     export FAKE_GPU_NAME FAKE_GPU_COUNT\n\
                     exec /bin/sh {fixture} \"$@\"\n",
                    name = spec.name,
                    gpu = sh_quote(spec.gpu_name),
                    count = spec.gpu_count,
                    fixture = sh_quote(&fixture.to_string_lossy()),
                ),
            );
            fs::set_permissions(&smi, fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("Fleet::start: chmod {}: {e}", smi.display()));

            let config = root.join("sshd_config");
            write(
                &config,
                &sshd_config(spec.name, &addr, &root, &host_key, &authorized),
            );
            let log = root.join("sshd.log");

            let mut last = String::new();
            let mut started = None;
            for _ in 0..START_TRIES {
                let port = match hosts.first() {
                    Some(first) if one_port => first.port,
                    _ => free_port(&addr),
                };
                match launch(&config, &addr, port, &log) {
                    Launch::Ready(child) => {
                        started = Some((port, child));
                        break;
                    }
                    Launch::PortBusy(text) => last = text,
                    Launch::Failed(why) => {
                        panic!("Fleet::start: host {} ({addr}:{port}): {why}", spec.name)
                    }
                }
            }
            let Some((port, child)) = started else {
                panic!(
                    "Fleet::start: host {} ({addr}) found no free port in {START_TRIES} tries; sshd's last log:\n{last}",
                    spec.name
                );
            };
            hosts.push(SshdHost {
                name: spec.name.to_string(),
                addr,
                port,
                root,
                host_key_pub,
                log,
                config,
                child: Some(child),
            });
        }

        let known_hosts = dir.path().join("known_hosts");
        let fleet = Fleet {
            dir,
            user,
            client_key,
            known_hosts,
            hosts,
            orphans: Vec::new(),
            wrong_files: AtomicU32::new(0),
        };
        let lines: String = fleet
            .hosts
            .iter()
            .map(|h| format!("[{}]:{} {}\n", h.addr, h.port, h.host_key_pub))
            .collect();
        write(&fleet.known_hosts, &lines);
        fleet
    }

    /// An inventory (`hosts:` list) with one `transport: ssh` entry per host:
    /// name, host, port, user, identity_file, known_hosts_file and `slots`.
    /// `extra` is appended to every entry: YAML `key: value` lines indented
    /// by 4 spaces (the entries' keys are at 4 spaces). If its first
    /// non-empty line is not indented at all, every line is indented by 4.
    pub fn inventory_yaml(&self, slots: u32, extra: &str) -> String {
        let extra = indent_extra(extra);
        let mut out = String::from("hosts:\n");
        for h in &self.hosts {
            out.push_str(&format!(
                "  - name: {}\n    transport: ssh\n    host: {}\n    port: {}\n    user: {}\n    identity_file: {}\n    known_hosts_file: {}\n    slots: {slots}\n{extra}",
                yaml_quote(&h.name),
                yaml_quote(&h.addr),
                h.port,
                yaml_quote(&self.user),
                yaml_quote(&self.client_key.to_string_lossy()),
                yaml_quote(&self.known_hosts.to_string_lossy()),
            ));
        }
        out
    }

    /// An inventory with one `transport: ssh` entry named `name` whose
    /// `host` is a pattern naming every host of a fleet started with
    /// [`Fleet::start_on_one_port`] (`127.X.Y.[a-b]`): its hosts are
    /// `<name>-<last octet>`.
    pub fn pattern_inventory_yaml(&self, name: &str, slots: u32) -> String {
        let port = self.hosts[0].port;
        assert!(
            self.hosts.iter().all(|h| h.port == port),
            "pattern_inventory_yaml: the fleet was not started on one port"
        );
        let octets: Vec<&str> = self
            .hosts
            .iter()
            .map(|h| h.addr.rsplit('.').next().unwrap_or_default())
            .collect();
        let prefix = self.hosts[0]
            .addr
            .rsplit_once('.')
            .map(|(p, _)| p)
            .unwrap_or_default();
        format!(
            "hosts:\n  - name: {}\n    transport: ssh\n    host: \"{prefix}.[{}-{}]\"\n    port: {port}\n    user: {}\n    identity_file: {}\n    known_hosts_file: {}\n    slots: {slots}\n",
            yaml_quote(name),
            octets[0],
            octets[octets.len() - 1],
            yaml_quote(&self.user),
            yaml_quote(&self.client_key.to_string_lossy()),
            yaml_quote(&self.known_hosts.to_string_lossy()),
        )
    }

    /// The inventory name a host pattern gives host `i`
    /// ([`Fleet::pattern_inventory_yaml`]).
    pub fn pattern_host_name(&self, name: &str, i: usize) -> String {
        format!(
            "{name}-{}",
            self.hosts[i].addr.rsplit('.').next().unwrap_or_default()
        )
    }

    /// A new known_hosts file naming every host with a freshly generated key
    /// that is not the host's (for host-key-mismatch tests).
    pub fn wrong_known_hosts(&self) -> PathBuf {
        let n = self.wrong_files.fetch_add(1, Ordering::Relaxed);
        let wrong = self.dir.path().join(format!("wrong{n}"));
        fs::create_dir_all(&wrong)
            .unwrap_or_else(|e| panic!("wrong_known_hosts: creating {}: {e}", wrong.display()));
        let mut lines = String::new();
        for (i, h) in self.hosts.iter().enumerate() {
            let key = wrong.join(format!("k{i}"));
            keygen(&key, "tunectl-test-wrong-host-key");
            let other = key_without_comment(&read(&with_ext(&key, "pub")));
            assert_ne!(other, h.host_key_pub, "ssh-keygen made the same key twice");
            lines.push_str(&format!("[{}]:{} {}\n", h.addr, h.port, other));
        }
        let path = wrong.join("known_hosts");
        write(&path, &lines);
        path
    }

    /// The pid of host i's listening sshd; None while it is killed.
    pub fn listener_pid(&self, i: usize) -> Option<u32> {
        self.hosts[i].child.as_ref().map(Child::id)
    }

    /// Whether host i's sshd is running (not killed by `kill_host`).
    pub fn is_up(&self, i: usize) -> bool {
        self.hosts[i].child.is_some()
    }

    /// Host i's sshd log so far (for failure messages).
    pub fn sshd_log(&self, i: usize) -> String {
        fs::read_to_string(&self.hosts[i].log).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// The sshd processes of host i right now: the listener and one (or, for
    /// a non-root user, two) per open connection. Empty while it is killed.
    pub fn sshd_pids(&self, i: usize) -> Vec<u32> {
        let Some(listener) = self.listener_pid(i) else {
            return Vec::new();
        };
        let table = proc_table();
        let mut out = vec![listener];
        out.extend(
            descendants(&table, &[listener])
                .into_iter()
                .filter(|p| table.get(p).is_some_and(|info| is_sshd(&info.comm))),
        );
        out
    }

    /// The processes of host i's sessions that run tunectl's persistent
    /// agent (`sh -s tunectl-agent`, and the subshells it forks for an
    /// attempt): descendants of its listener whose command line names it.
    pub fn agent_pids(&self, i: usize) -> Vec<u32> {
        let Some(listener) = self.listener_pid(i) else {
            return Vec::new();
        };
        let table = proc_table();
        descendants(&table, &[listener])
            .into_iter()
            .filter(|p| {
                fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.windows(13).any(|w| w == b"tunectl-agent"))
            })
            .collect()
    }

    /// Simulate a dead host: kill host i's listener and every per-connection
    /// sshd of it, so new connections are refused and established ones (ssh
    /// masters included) break. Processes started by its sessions are left
    /// running, as on a machine whose network vanished; their pids are
    /// returned (every non-sshd descendant, grandchildren included) so a
    /// test can check later whether they were reaped (see
    /// [`process_alive`]). The fleet kills those still running when dropped.
    /// A host already killed returns an empty list.
    pub fn kill_host(&mut self, i: usize) -> Vec<u32> {
        let left = stop_host(&mut self.hosts[i]);
        self.orphans.extend(
            left.iter()
                .filter_map(|&p| proc_info(p).map(|info| (p, info.start))),
        );
        left
    }

    /// Simulate a host whose sessions died with it but for one process
    /// session: every process host i's sessions started is killed (the
    /// agent, the guard that watches its connection, the timeout watch)
    /// together with its sshd, except the processes in `keep`'s session (a
    /// trial started with `setsid`), which run on with nobody watching
    /// them. Those are frozen first, so that none acts on the connection's
    /// end. Returns the pids of `keep`'s session left running. Panics if
    /// `keep` is not running.
    pub fn kill_host_but_session(&mut self, i: usize, keep: u32) -> Vec<u32> {
        let sid = proc_info(keep)
            .unwrap_or_else(|| panic!("kill_host_but_session: process {keep} is not running"))
            .session;
        let Some(listener) = self.listener_pid(i) else {
            return Vec::new();
        };
        let mut frozen: HashSet<u32> = HashSet::new();
        loop {
            let table = proc_table();
            let fresh: Vec<u32> = descendants(&table, &[listener])
                .into_iter()
                .filter(|p| {
                    !frozen.contains(p)
                        && table
                            .get(p)
                            .is_some_and(|info| !is_sshd(&info.comm) && info.session != sid)
                })
                .collect();
            if fresh.is_empty() {
                break;
            }
            for &p in &fresh {
                signal(p, libc::SIGSTOP);
            }
            for &p in &fresh {
                wait_stopped(p);
                frozen.insert(p);
            }
        }
        self.kill_host(i);
        for &p in &frozen {
            signal(p, libc::SIGKILL);
        }
        for &p in &frozen {
            wait_process_gone(p, Duration::from_secs(5));
        }
        let left: Vec<u32> = proc_table()
            .into_iter()
            .filter(|(_, info)| info.session == sid && !matches!(info.state, 'Z' | 'X' | 'x'))
            .map(|(p, _)| p)
            .collect();
        let table = proc_table();
        self.orphans.extend(
            left.iter()
                .filter_map(|&p| table.get(&p).map(|info| (p, info.start))),
        );
        left
    }

    /// Start host i again on the same address, port and host key (its
    /// sessions' processes left by `kill_host` are not touched); returns when
    /// the port accepts TCP connections. Panics if the host is running.
    pub fn restart_host(&mut self, i: usize) {
        let h = &mut self.hosts[i];
        assert!(
            h.child.is_none(),
            "restart_host({i}): host {} is running (kill_host first)",
            h.name
        );
        let deadline = Instant::now() + RESTART_BUSY_TIMEOUT;
        loop {
            match launch(&h.config, &h.addr, h.port, &h.log) {
                Launch::Ready(child) => {
                    h.child = Some(child);
                    return;
                }
                Launch::PortBusy(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Launch::PortBusy(text) => panic!(
                    "restart_host({i}): port {}:{} stayed busy for {RESTART_BUSY_TIMEOUT:?}; sshd's log:\n{text}",
                    h.addr, h.port
                ),
                Launch::Failed(why) => {
                    panic!(
                        "restart_host({i}): host {} ({}:{}): {why}",
                        h.name, h.addr, h.port
                    )
                }
            }
        }
    }

    /// Restart host i with `MaxSessions n` (sessions per connection: the
    /// n+1th is refused, "open failed: administratively prohibited").
    pub fn set_max_sessions(&mut self, i: usize, n: u32) {
        self.kill_host(i);
        let config = &self.hosts[i].config;
        let text = std::fs::read_to_string(config).expect("sshd_config");
        let limited: String = text
            .lines()
            .map(|l| {
                if l.starts_with("MaxSessions ") {
                    format!("MaxSessions {n}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        assert!(limited.contains(&format!("MaxSessions {n}\n")), "{text}");
        std::fs::write(config, limited).expect("write sshd_config");
        self.restart_host(i);
    }

    /// A plain `ssh` client command for host i, up to and including the
    /// destination: BatchMode, StrictHostKeyChecking yes, IdentitiesOnly,
    /// the fleet's key and `known_hosts`, no ssh config file, no
    /// multiplexing. Append the remote command with `.arg(...)`.
    pub fn ssh_command(&self, i: usize) -> Command {
        self.ssh_command_with(i, &self.known_hosts)
    }

    /// [`Fleet::ssh_command`] with another known_hosts file.
    pub fn ssh_command_with(&self, i: usize, known_hosts: &Path) -> Command {
        let h = &self.hosts[i];
        let mut c = Command::new("ssh");
        c.args(["-F", "/dev/null"]);
        for opt in [
            "BatchMode=yes",
            "StrictHostKeyChecking=yes",
            "IdentitiesOnly=yes",
            "UpdateHostKeys=no",
            "GlobalKnownHostsFile=/dev/null",
            "ControlMaster=no",
            "ControlPath=none",
            "ConnectTimeout=10",
        ] {
            c.arg("-o").arg(opt);
        }
        c.arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()));
        c.arg("-i").arg(&self.client_key);
        c.arg("-p").arg(h.port.to_string());
        c.arg("-l").arg(&self.user);
        c.arg(&h.addr);
        c
    }

    /// Run `command` on host i with the plain `ssh` client (stdin empty);
    /// returns (exit code, stdout, stderr). ssh's own failures exit 255; a
    /// client killed by a signal gives -1.
    pub fn ssh(&self, i: usize, command: &str) -> (i32, String, String) {
        run_ssh(self.ssh_command(i), command)
    }

    /// [`Fleet::ssh`] with another known_hosts file.
    pub fn ssh_with_known_hosts(
        &self,
        i: usize,
        known_hosts: &Path,
        command: &str,
    ) -> (i32, String, String) {
        run_ssh(self.ssh_command_with(i, known_hosts), command)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // No panics here: a Fleet is often dropped while a test unwinds.
        let mut left = Vec::new();
        for h in &mut self.hosts {
            left.extend(stop_host(h));
        }
        for p in left {
            signal(p, libc::SIGKILL);
        }
        for &(p, start) in &self.orphans {
            if proc_info(p).is_some_and(|info| info.start == start) {
                signal(p, libc::SIGKILL);
            }
        }
    }
}

/// Whether process `pid` exists and has not exited (a zombie counts as
/// exited: orphans are reaped by whatever pid 1 is, sometimes never).
pub fn process_alive(pid: u32) -> bool {
    proc_info(pid).is_some_and(|info| !matches!(info.state, 'Z' | 'X' | 'x'))
}

/// Wait until `pid` has exited (see [`process_alive`]) or `timeout` passes;
/// true if it exited.
pub fn wait_process_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while process_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

// ---------------------------------------------------------------- sshd

enum Launch {
    Ready(Child),
    /// sshd could not bind (another process holds addr:port); its log.
    PortBusy(String),
    Failed(String),
}

fn sshd_config(name: &str, addr: &str, root: &Path, host_key: &Path, authorized: &Path) -> String {
    let root = root.display();
    format!(
        "# sshd of test host `{name}` (tests/it/support/sshd.rs)\n\
         # The address only: a `:port` here would override -p.\n\
         ListenAddress {addr}\n\
         HostKey {host_key}\n\
         PidFile none\n\
         AuthorizedKeysFile {authorized}\n\
         PermitRootLogin prohibit-password\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         # Keys under /tmp fail with \"bad ownership or modes\" otherwise.\n\
         StrictModes no\n\
         # The default 10 refuses the 11th session on one master connection.\n\
         MaxSessions 100\n\
         MaxStartups 100\n\
         Subsystem sftp internal-sftp\n\
         PrintMotd no\n\
         PrintLastLog no\n\
         X11Forwarding no\n\
         UseDNS no\n\
         # HOME keeps the user's shell start-up files (about 100 ms each) out.\n\
         SetEnv PATH={root}/bin:/usr/local/bin:/usr/bin:/bin HOME={root}/home\n",
        host_key = host_key.display(),
        authorized = authorized.display(),
    )
}

/// Start sshd on addr:port and wait until it listens there.
fn launch(config: &Path, addr: &str, port: u16, log: &Path) -> Launch {
    let from = fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("opening sshd's log {}: {e}", log.display()));
    let err = out
        .try_clone()
        .unwrap_or_else(|e| panic!("duplicating sshd's log file handle: {e}"));
    let mut child = Command::new(SSHD)
        .arg("-D")
        .arg("-e")
        .arg("-f")
        .arg(config)
        .arg("-p")
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {SSHD}: {e} (install openssh-server or run scripts/test.sh)")
        });
    let listening = format!("Server listening on {addr} port {port}.");
    let sockaddr: SocketAddr = format!("{addr}:{port}")
        .parse()
        .unwrap_or_else(|e| panic!("bad address {addr}:{port}: {e}"));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let text = read_log_from(log, from);
                return if text.contains("Address already in use") {
                    Launch::PortBusy(text)
                } else {
                    Launch::Failed(format!("sshd exited ({status}); its log:\n{text}"))
                };
            }
            Ok(None) => {}
            Err(e) => panic!("waiting for sshd (pid {}): {e}", child.id()),
        }
        // The log line proves that *this* sshd holds the port; the connect
        // that it accepts connections.
        if read_log_from(log, from).contains(&listening)
            && TcpStream::connect_timeout(&sockaddr, Duration::from_millis(500)).is_ok()
        {
            return Launch::Ready(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Launch::Failed(format!(
                "sshd did not accept connections on {addr}:{port} within {READY_TIMEOUT:?}; its log:\n{}",
                read_log_from(log, from)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kill a host's sshd processes (listener and per-connection ones) and
/// return the other processes of its sessions, which are left running.
fn stop_host(h: &mut SshdHost) -> Vec<u32> {
    let Some(mut child) = h.child.take() else {
        return Vec::new();
    };
    let listener = child.id();
    // Freeze the listener, then every sshd below it, until a snapshot shows
    // no sshd that was not frozen before it was taken: a stopped process
    // cannot fork, so nothing new can appear after that.
    let mut stopped: HashSet<u32> = HashSet::new();
    signal(listener, libc::SIGSTOP);
    wait_stopped(listener);
    stopped.insert(listener);
    let sessions = loop {
        let table = proc_table();
        let below = descendants(&table, &[listener]);
        let fresh: Vec<u32> = below
            .iter()
            .copied()
            .filter(|p| !stopped.contains(p) && table.get(p).is_some_and(|i| is_sshd(&i.comm)))
            .collect();
        if fresh.is_empty() {
            break below
                .into_iter()
                .filter(|p| !stopped.contains(p))
                .collect::<Vec<u32>>();
        }
        for &p in &fresh {
            signal(p, libc::SIGSTOP);
        }
        for &p in &fresh {
            wait_stopped(p);
            stopped.insert(p);
        }
    };
    for &p in &stopped {
        signal(p, libc::SIGKILL);
    }
    let _ = child.wait();
    for &p in &stopped {
        wait_process_gone(p, Duration::from_secs(5));
    }
    // Children the session processes started meanwhile count too.
    let table = proc_table();
    let mut left: Vec<u32> = sessions
        .iter()
        .copied()
        .filter(|&p| {
            table
                .get(&p)
                .is_some_and(|i| !matches!(i.state, 'Z' | 'X' | 'x'))
        })
        .collect();
    for p in descendants(&table, &sessions) {
        if !left.contains(&p)
            && !table
                .get(&p)
                .is_some_and(|i| matches!(i.state, 'Z' | 'X' | 'x'))
        {
            left.push(p);
        }
    }
    left
}

fn is_sshd(comm: &str) -> bool {
    // OpenSSH 9.8+ runs connections as sshd-session (and sshd-auth).
    comm == "sshd" || comm.starts_with("sshd-")
}

fn wait_stopped(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some(info) = proc_info(pid) {
        if matches!(info.state, 'T' | 't' | 'Z' | 'X' | 'x') || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
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

// ---------------------------------------------------------------- /proc

struct ProcInfo {
    ppid: u32,
    /// The process's session id.
    session: u32,
    comm: String,
    state: char,
    /// Start time in clock ticks since boot: with the pid, identifies a process.
    start: u64,
}

fn proc_info(pid: u32) -> Option<ProcInfo> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(text: &str) -> Option<ProcInfo> {
    // "pid (comm) state ppid ... starttime(22nd) ..."; comm may hold ") ".
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    Some(ProcInfo {
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        session: rest.get(3)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
        comm,
    })
}

fn proc_table() -> HashMap<u32, ProcInfo> {
    let mut out = HashMap::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
            && let Some(info) = proc_info(pid)
        {
            out.insert(pid, info);
        }
    }
    out
}

/// Every descendant of `roots` (not the roots themselves).
fn descendants(table: &HashMap<u32, ProcInfo>, roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, info) in table {
        children.entry(info.ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut todo: Vec<u32> = roots.to_vec();
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if !out.contains(&c) && !roots.contains(&c) {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

// ---------------------------------------------------------------- helpers

fn require_openssh() {
    assert!(
        Path::new(SSHD).is_file(),
        "{SSHD} is missing: install openssh-server (and openssh-client) or run scripts/test.sh"
    );
    // sshd exits with "Missing privilege separation directory" without it;
    // apt does not create it. It must not be group/world writable.
    if !Path::new("/run/sshd").is_dir() {
        let _ = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create("/run/sshd");
    }
}

fn current_user() -> String {
    let out = Command::new("id")
        .arg("-un")
        .output()
        .unwrap_or_else(|e| panic!("running `id -un` for the current user name: {e}"));
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !name.is_empty(),
        "`id -un` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    name
}

fn keygen(path: &Path, comment: &str) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run ssh-keygen: {e} (install openssh-client or run scripts/test.sh)")
        });
    assert!(
        out.status.success(),
        "ssh-keygen -f {} failed ({}): {}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// "ssh-ed25519 AAAA... comment\n" -> "ssh-ed25519 AAAA...".
fn key_without_comment(line: &str) -> String {
    let fields: Vec<&str> = line.split_whitespace().take(2).collect();
    assert!(fields.len() == 2, "not a public key line: {line:?}");
    fields.join(" ")
}

/// Loopback addresses 127.X.Y.Z for one fleet: X.Y and the first Z vary by
/// process, fleet (a count of this process's fleets, whatever module
/// started them) and time, so fleets of parallel tests and of other test
/// runs rarely share an address (if they do, their ports still differ).
fn pick_addresses(n: usize) -> Vec<String> {
    let seq = FLEETS.fetch_add(1, Ordering::Relaxed);
    let mut hasher = DefaultHasher::new();
    std::process::id().hash(&mut hasher);
    seq.hash(&mut hasher);
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
        .hash(&mut hasher);
    let v = hasher.finish();
    let (x, y) = ((v >> 8) as u8, v as u8);
    // Last octet in 2..=254: never .0, .1 or .255.
    let first = 2 + ((v >> 16) % (253 - n as u64 + 1));
    (0..n as u64)
        .map(|k| format!("127.{x}.{y}.{}", first + k))
        .collect()
}

/// A port that is free on `addr` now (sshd may still lose it to another
/// process before it binds: the caller retries).
fn free_port(addr: &str) -> u16 {
    let l = TcpListener::bind((addr, 0))
        .unwrap_or_else(|e| panic!("binding {addr}:0 to find a free port: {e}"));
    l.local_addr()
        .unwrap_or_else(|e| panic!("reading the port bound on {addr}: {e}"))
        .port()
}

fn run_ssh(mut c: Command, command: &str) -> (i32, String, String) {
    let out = c
        .arg(command)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run ssh: {e} (install openssh-client or run scripts/test.sh)")
        });
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read_log_from(log: &Path, from: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut f) = fs::File::open(log) {
        let _ = f.read_to_end(&mut text);
    }
    let from = (from as usize).min(text.len());
    String::from_utf8_lossy(&text[from..]).into_owned()
}

fn with_ext(path: &Path, ext: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()))
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn yaml_quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', r"\\").replace('"', "\\\""))
}

fn indent_extra(extra: &str) -> String {
    let first = extra.lines().find(|l| !l.trim().is_empty());
    let add = match first {
        None => return String::new(),
        Some(l) => !l.starts_with([' ', '\t']),
    };
    let mut out = String::new();
    for line in extra.lines() {
        if add && !line.trim().is_empty() {
            out.push_str("    ");
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}
