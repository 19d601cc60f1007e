//! Checks the sshd fleet harness (tests/it/support/sshd.rs) with the plain `ssh`
//! client: no tunectl code runs here. Needs openssh-server and
//! openssh-client (scripts/test.sh installs them).

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::sshd::{Fleet, HostSpec, process_alive, wait_process_gone};

const H100: &str = "NVIDIA H100 80GB HBM3";
const A100: &str = "NVIDIA A100-SXM4-80GB";

const SPECS: [HostSpec; 4] = [
    HostSpec {
        name: "h100-a",
        gpu_name: H100,
        gpu_count: 2,
    },
    HostSpec {
        name: "h100-b",
        gpu_name: H100,
        gpu_count: 2,
    },
    HostSpec {
        name: "a100-a",
        gpu_name: A100,
        gpu_count: 1,
    },
    HostSpec {
        name: "a100-b",
        gpu_name: A100,
        gpu_count: 1,
    },
];

const QUERY: &str = "nvidia-smi --query-gpu=name --format=csv,noheader";

fn assert_gpus(fleet: &Fleet, i: usize) {
    let (code, out, err) = fleet.ssh(i, QUERY);
    assert_eq!(
        code,
        0,
        "ssh to host {i} failed: {err}\nsshd log:\n{}",
        fleet.sshd_log(i)
    );
    let spec = &SPECS[i];
    let want = vec![spec.gpu_name; spec.gpu_count as usize];
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        want,
        "host {i} ({})",
        spec.name
    );
}

#[test]
fn hosts_answer_with_their_own_gpus_and_check_host_keys() {
    let fleet = Fleet::start(&SPECS);
    let mut addrs: Vec<&str> = fleet.hosts.iter().map(|h| h.addr.as_str()).collect();
    addrs.sort();
    addrs.dedup();
    assert_eq!(addrs.len(), 4, "every host has its own address");

    std::thread::scope(|s| {
        for i in 0..fleet.hosts.len() {
            let fleet = &fleet;
            s.spawn(move || assert_gpus(fleet, i));
        }
    });

    // The session environment comes from the host's sshd config.
    let h = &fleet.hosts[2];
    let (code, out, err) = fleet.ssh(2, "echo \"$HOME\"; command -v nvidia-smi");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "{}\n{}\n",
            h.root.join("home").display(),
            h.root.join("bin/nvidia-smi").display()
        )
    );

    // Another key for the same [addr]:port: ssh refuses to connect.
    let wrong = fleet.wrong_known_hosts();
    let (code, _, err) = fleet.ssh_with_known_hosts(0, &wrong, "true");
    assert_eq!(code, 255, "a wrong host key must fail: {err}");
    assert!(err.contains("Host key verification failed"), "{err}");

    let yaml = fleet.inventory_yaml(3, "max_sessions: 20\nlabels:\n  rack: r1\n");
    let entry = format!(
        "  - name: \"h100-a\"\n    transport: ssh\n    host: \"{}\"\n    port: {}\n    user: \"{}\"\n    identity_file: \"{}\"\n    known_hosts_file: \"{}\"\n    slots: 3\n    max_sessions: 20\n    labels:\n      rack: r1\n",
        fleet.hosts[0].addr,
        fleet.hosts[0].port,
        fleet.user,
        fleet.client_key.display(),
        fleet.known_hosts.display(),
    );
    assert!(yaml.starts_with("hosts:\n"), "{yaml}");
    assert!(
        yaml.contains(&entry),
        "{yaml}\n--- expected entry:\n{entry}"
    );
    assert_eq!(yaml.matches("transport: ssh").count(), 4, "{yaml}");

    let listeners: Vec<u32> = (0..4)
        .map(|i| fleet.listener_pid(i).expect("running"))
        .collect();
    let dir = fleet.dir.path().to_path_buf();
    drop(fleet);
    for p in listeners {
        assert!(!process_alive(p), "sshd {p} survived the fleet's drop");
    }
    assert!(!dir.exists(), "the fleet directory is removed");
}

#[test]
fn a_killed_host_refuses_keeps_session_processes_and_restarts() {
    let mut fleet = Fleet::start(&SPECS);

    // A session whose process outlives the network: it prints its pid, then
    // becomes `sleep` (same pid).
    let mut session = fleet
        .ssh_command(1)
        .arg("echo $$; exec sleep 60")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting a background ssh");
    let mut line = String::new();
    BufReader::new(session.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("reading the remote pid");
    let remote: u32 = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no pid from the session: {line:?}\n{}", fleet.sshd_log(1)));
    assert!(
        fleet.sshd_pids(1).len() >= 2,
        "a listener and the session's sshd"
    );

    let left = fleet.kill_host(1);
    assert!(
        left.contains(&remote),
        "kill_host reports the session's process {remote}: {left:?}"
    );
    assert!(!fleet.is_up(1));
    assert!(fleet.sshd_pids(1).is_empty());

    // The established session broke: its client gives up.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = session.try_wait().expect("polling the background ssh") {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the background ssh did not notice the dead host"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(255));

    let (code, _, err) = fleet.ssh(1, "true");
    assert_eq!(code, 255, "a killed host refuses connections: {err}");
    std::thread::scope(|s| {
        for i in [0, 2, 3] {
            let fleet = &fleet;
            s.spawn(move || assert_gpus(fleet, i));
        }
    });

    // The session's process lives on, as on a host whose network vanished.
    assert!(
        process_alive(remote),
        "the session's process {remote} was killed"
    );
    let comm = std::fs::read_to_string(format!("/proc/{remote}/comm")).unwrap_or_default();
    assert_eq!(comm.trim(), "sleep");
    // SAFETY: kill(2) on a process this test started (through sshd).
    unsafe {
        libc::kill(remote as libc::pid_t, libc::SIGKILL);
    }
    assert!(
        wait_process_gone(remote, Duration::from_secs(5)),
        "sleep {remote} survived SIGKILL"
    );

    let port = fleet.hosts[1].port;
    fleet.restart_host(1);
    assert!(fleet.is_up(1));
    assert_eq!(fleet.hosts[1].port, port);
    // Same host key: the fleet's known_hosts still matches.
    assert_gpus(&fleet, 1);

    // Killing a killed host again is a no-op; drop cleans up the rest.
    let again = fleet.kill_host(1);
    assert!(again.is_empty(), "{again:?}");
    assert!(fleet.kill_host(1).is_empty());
}
