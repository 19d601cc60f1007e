use super::*;
use std::path::{Path, PathBuf};

/// The fake `nvidia-smi` fixture, embedded so that the tests find it
/// wherever the crate is built.
const FAKE_NVIDIA_SMI: &str = include_str!("../../tests/fixtures/fake-nvidia-smi");
/// The FAKE `amd-smi`, `rocm-smi` and `xpu-smi` fixtures.
const FAKE_AMD_SMI: &str = include_str!("../../tests/fixtures/fake-amd-smi");
const FAKE_ROCM_SMI: &str = include_str!("../../tests/fixtures/fake-rocm-smi");
const FAKE_XPU_SMI: &str = include_str!("../../tests/fixtures/fake-xpu-smi");

/// Serialises the tests that write executables and spawn shells, so that
/// no fork in this module can hold a fixture open for writing while it
/// is executed (ETXTBSY).
static SPAWN_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SAMPLE: &str = "\
Welcome to gpu-node-7!  (login banner)
hostname=injected-by-banner
tunectl_probe=1
hostname=gpu-node-7
arch=x86_64
os=\"Ubuntu 22.04.4 LTS\"
kernel=5.15.0-105-generic
cpu_model=Intel(R) Xeon(R) Platinum   8480+
cpu_count=224
mem_total_kib=2113470464
nvidia_smi=ok
gpu=1, NVIDIA H100 80GB HBM3, 81559, 550.54.15, GPU-bbbb
gpu=0, NVIDIA H100 80GB HBM3, 81559, 550.54.15, GPU-aaaa
driver=550.54.15
cuda=12.4
tool.python=Python 3.10.12
tool.nvcc=
tunectl_probe_end=1
hostname=after-the-end
";

fn h100_host() -> Fingerprint {
    parse_probe_output(SAMPLE)
}

fn tools(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn parses_a_full_sample() {
    let fp = h100_host();
    assert_eq!(fp.schema, 1);
    assert_eq!(fp.hostname.as_deref(), Some("gpu-node-7"));
    assert_eq!(fp.arch.as_deref(), Some("x86_64"));
    assert_eq!(fp.os.as_deref(), Some("Ubuntu 22.04.4 LTS"));
    assert_eq!(fp.kernel.as_deref(), Some("5.15.0-105-generic"));
    assert_eq!(
        fp.cpu_model.as_deref(),
        Some("Intel(R) Xeon(R) Platinum 8480+")
    );
    assert_eq!(fp.cpu_count, Some(224));
    assert_eq!(fp.memory_mib, Some(2_113_470_464 / 1024));
    assert_eq!(
        fp.gpus,
        vec![
            Gpu {
                index: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_mib: Some(81559),
                uuid: Some("GPU-aaaa".into()),
                vendor: GpuVendor::Nvidia,
            },
            Gpu {
                index: 1,
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_mib: Some(81559),
                uuid: Some("GPU-bbbb".into()),
                vendor: GpuVendor::Nvidia,
            },
        ]
    );
    assert_eq!(fp.driver_version.as_deref(), Some("550.54.15"));
    assert_eq!(fp.cuda_version.as_deref(), Some("12.4"));
    assert_eq!(
        fp.tools,
        BTreeMap::from([
            ("nvcc".to_owned(), None),
            ("python".to_owned(), Some("Python 3.10.12".to_owned())),
        ])
    );
}

#[test]
fn parses_empty_input_to_all_unknown() {
    let fp = parse_probe_output("");
    assert_eq!(fp, Fingerprint::default());
    assert_eq!(fp.schema, SCHEMA_VERSION);
    assert!(fp.gpus.is_empty());
    assert!(fp.tools.is_empty());
    // Empty values are unknown too.
    let fp = parse_probe_output(
        "tunectl_probe=1\nhostname=\narch=  \nos=\"\"\ncpu_count=\nmem_total_kib=\nnvidia_smi=absent\n",
    );
    assert_eq!(fp, Fingerprint::default());
}

#[test]
fn parses_garbage_without_panicking_or_guessing() {
    let garbage = "\u{0}\u{1}binary\n=\n==\nhostname\ncpu_count=-3\ncpu_count=lots\n\
                   mem_total_kib=12kB\nmem_total_kib=99999999999999999999999\n\
                   gpu=\ngpu=x, NVIDIA A100, 40960, 535.1, GPU-1\ngpu=0, only, three\n\
                   gpu=0, , 1, 2, 3\ntool.bad name=x\ntool.=x\ndriver=[N/A]\ncuda=N/A\n\
                   \u{feff}é=ü\n";
    let fp = parse_probe_output(garbage);
    assert_eq!(fp, Fingerprint::default());

    // Zero counts are not facts either.
    let fp = parse_probe_output("cpu_count=0\nmem_total_kib=512\n");
    assert_eq!(fp.cpu_count, None);
    assert_eq!(fp.memory_mib, None);
}

#[test]
fn parses_awkward_gpu_lines() {
    let fp = parse_probe_output(
        "gpu=3, Weird, GPU, Name, [N/A], [N/A], [N/A]\r\n\
         gpu=2, NVIDIA A100-SXM4-80GB, 81920 MiB, 535.161.08, GPU-2\n\
         gpu=2, duplicate index, 1, 1, GPU-dup\n\
         driver=999.1\n",
    );
    assert_eq!(fp.gpus.len(), 2);
    assert_eq!(fp.gpus[0].index, 2);
    assert_eq!(fp.gpus[0].name, "NVIDIA A100-SXM4-80GB");
    assert_eq!(fp.gpus[0].memory_mib, Some(81920));
    assert_eq!(fp.gpus[1].name, "Weird, GPU, Name");
    assert_eq!(fp.gpus[1].memory_mib, None);
    assert_eq!(fp.gpus[1].uuid, None);
    // The driver column wins over the header line.
    assert_eq!(fp.driver_version.as_deref(), Some("535.161.08"));
    // Without a usable driver column the header line is used.
    let fp = parse_probe_output("gpu=0, G, 1, [N/A], u\ndriver=550.1\n");
    assert_eq!(fp.driver_version.as_deref(), Some("550.1"));
}

#[test]
fn without_marker_the_whole_text_counts() {
    let fp = parse_probe_output("hostname=a\nhostname=b\n");
    assert_eq!(fp.hostname.as_deref(), Some("a"));
}

#[test]
fn extracts_driver_major() {
    assert_eq!(driver_major("550.54.15").as_deref(), Some("550"));
    assert_eq!(driver_major(" 535.161.08 ").as_deref(), Some("535"));
    assert_eq!(driver_major("560").as_deref(), Some("560"));
    assert_eq!(driver_major(""), None);
    assert_eq!(driver_major("[N/A]"), None);
    assert_eq!(driver_major(".54"), None);
    assert_eq!(driver_major("r550.54"), None);
}

#[test]
fn host_class_ignores_hostname_kernel_and_driver_minor() {
    let base = h100_host();
    let mut other = base.clone();
    other.hostname = Some("gpu-node-8".into());
    other.kernel = Some("6.8.0-40-generic".into());
    other.os = Some("Rocky Linux 9.3".into());
    other.driver_version = Some("550.90.07".into());
    other.cuda_version = Some("12.5".into());
    other.cpu_count = Some(64);
    other.memory_mib = Some(1024);
    other
        .tools
        .insert("python".into(), Some("Python 3.12.1".into()));
    other.gpus[0].uuid = Some("GPU-zzzz".into());
    other.gpus.reverse();
    for (i, g) in other.gpus.iter_mut().enumerate() {
        g.index = u32::try_from(i).unwrap();
    }
    assert_eq!(base.class_key(), other.class_key());
    assert_eq!(base.host_class(), other.host_class());
    // ...while the full hash sees every difference.
    assert_ne!(base.hash(), other.hash());
}

#[test]
fn host_class_changes_with_gpu_model_count_driver_major_and_cpu() {
    let base = h100_host();
    let class = base.host_class();

    let mut model = base.clone();
    for g in &mut model.gpus {
        g.name = "NVIDIA A100-SXM4-80GB".into();
    }
    assert_ne!(model.host_class(), class);

    let mut count = base.clone();
    count.gpus.pop();
    assert_ne!(count.host_class(), class);

    let mut none = base.clone();
    none.gpus.clear();
    assert_ne!(none.host_class(), class);
    assert_ne!(none.host_class(), count.host_class());

    let mut memory = base.clone();
    memory.gpus[0].memory_mib = Some(95830);
    assert_ne!(memory.host_class(), class);

    let mut driver = base.clone();
    driver.driver_version = Some("535.54.15".into());
    assert_ne!(driver.host_class(), class);

    let mut cpu = base.clone();
    cpu.cpu_model = Some("AMD EPYC 9654 96-Core Processor".into());
    assert_ne!(cpu.host_class(), class);
}

#[test]
fn hashes_have_the_documented_shape_and_are_stable() {
    let fp = h100_host();
    let hash = fp.hash();
    assert_eq!(hash.len(), 3 + 16);
    assert!(hash.starts_with("fp-"));
    assert!(hash[3..].bytes().all(|b| b.is_ascii_hexdigit()));
    let class = fp.host_class();
    assert_eq!(class.len(), 3 + 12);
    assert!(class.starts_with("hc-"));
    assert!(class[3..].bytes().all(|b| b.is_ascii_hexdigit()));
    // Stable across calls and across a JSON round trip.
    let back: Fingerprint = serde_json::from_str(&serde_json::to_string(&fp).unwrap()).unwrap();
    assert_eq!(back, fp);
    assert_eq!(back.hash(), hash);
    assert_eq!(back.host_class(), class);
    let key: HostClassKey =
        serde_json::from_str(&serde_json::to_string(&fp.class_key()).unwrap()).unwrap();
    assert_eq!(key, fp.class_key());
    let mut renamed = fp.clone();
    renamed.hostname = Some("elsewhere".into());
    assert_ne!(renamed.hash(), hash);
}

#[test]
fn labels_classes_for_humans() {
    assert_eq!(
        h100_host().class_label(),
        "2× NVIDIA H100 80GB HBM3 (81559 MiB), driver 550, CUDA 12.4, \
         Intel(R) Xeon(R) Platinum 8480+ (224 cpus)"
    );
    let cpu_only = Fingerprint {
        cpu_model: Some("AMD EPYC 7B13".into()),
        cpu_count: Some(2),
        ..Fingerprint::default()
    };
    assert_eq!(cpu_only.class_label(), "no GPU, AMD EPYC 7B13 (2 cpus)");
    assert_eq!(Fingerprint::default().class_label(), "no GPU, unknown CPU");
    let mixed = parse_probe_output(
        "gpu=0, NVIDIA L4, 23034, 535.1, a\ngpu=1, NVIDIA A10, [N/A], 535.1, b\ngpu=2, NVIDIA L4, 23034, 535.1, c\n",
    );
    assert_eq!(
        mixed.class_label(),
        "1× NVIDIA A10 + 2× NVIDIA L4 (23034 MiB), driver 535, unknown CPU"
    );
}

#[test]
fn script_builder_validates_tool_names() {
    for bad in ["bad name", "", "a;b", "x$(y)", "tool.x", "ü", "a'b"] {
        let err = probe_script(&tools(&[(bad, "true")])).unwrap_err();
        assert!(
            matches!(&err, FingerprintError::InvalidToolName(n) if n == bad),
            "{bad:?}: {err}"
        );
    }
    let err = probe_script(&tools(&[("ok", "a\0b")])).unwrap_err();
    assert!(matches!(err, FingerprintError::InvalidToolCommand(_)));
    let script = probe_script(&tools(&[("python-3_x", "python3 --version")])).unwrap();
    assert!(script.starts_with(PROBE_SCRIPT));
    assert!(script.contains("\ntc_tool 'python-3_x' 'python3 --version'\n"));
    assert!(script.ends_with("printf 'tunectl_probe_end=1\\n'\nexit 0\n"));
}

#[test]
fn script_builder_quotes_commands_verbatim() {
    let command = r#"printf '%s\n' "it's $(echo nested) \$HOME `x`""#;
    let script = probe_script(&tools(&[("weird", command)])).unwrap();
    let expected = format!("tc_tool 'weird' {}\n", single_quote(command));
    assert!(script.contains(&expected));
}

/// A temporary directory holding the fake as `nvidia-smi`.
fn fake_nvidia_dir() -> tempfile::TempDir {
    fake_tools_dir(&[("nvidia-smi", FAKE_NVIDIA_SMI)])
}

/// A temporary directory holding each `(name, script)` as an executable.
fn fake_tools_dir(fakes: &[(&str, &str)]) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    for (name, script) in fakes {
        let path = dir.path().join(name);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// A FAKE sysfs tree (for `TUNECTL_FAKE_SYSFS`) with one DRM card per
/// `(card, vendor, device, driver)`, laid out as the kernel does:
/// `class/drm/cardN/device` → `devices/…` holding `vendor`, `device`
/// and a `driver` link to `bus/pci/drivers/<driver>`; plus a connector
/// entry per card, which the probe must skip.
fn fake_sysfs(cards: &[(u32, &str, &str, &str)]) -> tempfile::TempDir {
    use std::os::unix::fs::symlink;
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    std::fs::create_dir_all(r.join("class/drm")).unwrap();
    for (n, vendor, device, driver) in cards {
        let dev = r.join(format!("devices/pci0000:00/0000:00:{n:02x}.0"));
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), format!("{vendor}\n")).unwrap();
        std::fs::write(dev.join("device"), format!("{device}\n")).unwrap();
        std::fs::write(dev.join("class"), "0x038000\n").unwrap();
        let drv = r.join("bus/pci/drivers").join(driver);
        std::fs::create_dir_all(&drv).unwrap();
        symlink(&drv, dev.join("driver")).unwrap();
        let card = r.join(format!("class/drm/card{n}"));
        std::fs::create_dir_all(&card).unwrap();
        symlink(&dev, card.join("device")).unwrap();
        std::fs::create_dir_all(r.join(format!("class/drm/card{n}-DP-1"))).unwrap();
    }
    root
}

/// `PATH` with `dir` first.
fn path_with_first(dir: &Path) -> String {
    let current = std::env::var("PATH").unwrap_or_default();
    format!("{}:{current}", dir.display())
}

/// A directory of symlinks to the utilities the probe uses, found on the
/// current `PATH`, leaving out `nvidia-smi` and anything in `omit`.
fn utilities_without(omit: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let wanted = [
        "sh", "uname", "cat", "awk", "sed", "nproc", "getconf", "lscpu", "sleep", "kill",
        "timeout", "mkdir", "rm", "printf", "echo", "true", "ps", "head", "tr",
    ];
    for name in wanted.iter().filter(|n| !omit.contains(n)) {
        let found: Option<PathBuf> = path
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file());
        if let Some(target) = found {
            std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
        }
    }
    dir
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn probes_gpus_through_a_fake_nvidia_smi() {
    let _guard = SPAWN_LOCK.lock().await;
    let fake = fake_nvidia_dir();
    let requested = tools(&[
        ("quoted", r#"printf '%s\n' "it's $(echo nested)""#),
        ("stderr-only", "echo 'v1.2 on stderr' >&2"),
        ("fails", "echo 'would be a version'; exit 3"),
        ("missing", "definitely-not-a-command-tunectl --version"),
        ("silent", "true"),
        ("multi", "printf '\\n  \\nfirst line\\nsecond line\\n'"),
    ]);
    let no_cards = fake_sysfs(&[]);
    let sysfs = no_cards.path().display().to_string();
    let fp = probe_local_with_env(
        &requested,
        &env(&[
            ("PATH", &path_with_first(fake.path())),
            ("TUNECTL_FAKE_SYSFS", &sysfs),
        ]),
    )
    .await
    .unwrap();
    assert_eq!(fp.gpus.len(), 2);
    for (i, gpu) in fp.gpus.iter().enumerate() {
        assert_eq!(gpu.index, u32::try_from(i).unwrap());
        assert_eq!(gpu.name, "NVIDIA H100 80GB HBM3");
        assert_eq!(gpu.memory_mib, Some(81559));
        assert!(gpu.uuid.as_deref().is_some_and(|u| u.starts_with("GPU-")));
    }
    assert_eq!(fp.driver_version.as_deref(), Some("550.54.15"));
    assert_eq!(fp.cuda_version.as_deref(), Some("12.4"));
    assert_eq!(
        fp.tools,
        BTreeMap::from([
            ("fails".to_owned(), None),
            ("missing".to_owned(), None),
            ("multi".to_owned(), Some("first line".to_owned())),
            ("quoted".to_owned(), Some("it's nested".to_owned())),
            ("silent".to_owned(), None),
            ("stderr-only".to_owned(), Some("v1.2 on stderr".to_owned())),
        ])
    );
    assert!(
        fp.class_label()
            .starts_with("2× NVIDIA H100 80GB HBM3 (81559 MiB), driver 550, CUDA 12.4, ")
    );

    // Other fakes answer through the same probe.
    let fp = probe_local_with_env(
        &BTreeMap::new(),
        &env(&[
            ("PATH", &path_with_first(fake.path())),
            ("TUNECTL_FAKE_SYSFS", &sysfs),
            ("FAKE_GPU_NAME", "NVIDIA A100-SXM4-40GB"),
            ("FAKE_GPU_COUNT", "8"),
            ("FAKE_GPU_MEMORY_MIB", "40960"),
            ("FAKE_DRIVER", "535.161.08"),
            ("FAKE_CUDA", "12.2"),
        ]),
    )
    .await
    .unwrap();
    assert_eq!(fp.gpus.len(), 8);
    assert!(
        fp.gpus
            .iter()
            .all(|g| g.name == "NVIDIA A100-SXM4-40GB" && g.memory_mib == Some(40960))
    );
    assert_eq!(fp.driver_version.as_deref(), Some("535.161.08"));
    assert_eq!(fp.cuda_version.as_deref(), Some("12.2"));
}

#[tokio::test]
async fn a_failing_nvidia_smi_gives_no_gpu_facts() {
    let _guard = SPAWN_LOCK.lock().await;
    let fake = fake_nvidia_dir();
    for extra in [("FAKE_NVIDIA_SMI_FAIL", "1"), ("FAKE_GPU_COUNT", "0")] {
        let fp = probe_local_with_env(
            &BTreeMap::new(),
            &env(&[("PATH", &path_with_first(fake.path())), extra]),
        )
        .await
        .unwrap();
        assert!(fp.gpus.is_empty(), "{extra:?}");
        assert_eq!(fp.driver_version, None, "{extra:?}");
        assert_eq!(fp.cuda_version, None, "{extra:?}");
        assert!(fp.kernel.is_some(), "{extra:?}: the rest is still probed");
    }
}

#[tokio::test]
async fn no_nvidia_smi_on_path_gives_no_gpu_facts() {
    let _guard = SPAWN_LOCK.lock().await;
    let bin = utilities_without(&[]);
    let path = bin.path().display().to_string();
    let fp = probe_local_with_env(&tools(&[("echo", "echo hi")]), &env(&[("PATH", &path)]))
        .await
        .unwrap();
    assert!(fp.gpus.is_empty());
    assert_eq!(fp.driver_version, None);
    assert_eq!(fp.cuda_version, None);
    assert_eq!(fp.tools.get("echo"), Some(&Some("hi".to_owned())));
    assert!(fp.hostname.is_some());
    assert!(fp.kernel.is_some());
    assert!(fp.arch.is_some());
}

#[tokio::test]
async fn probes_this_machine() {
    let _guard = SPAWN_LOCK.lock().await;
    let fp = probe_local(&tools(&[("sh", "echo sh-ok")])).await.unwrap();
    assert_eq!(fp.schema, SCHEMA_VERSION);
    assert_eq!(fp.tools.get("sh"), Some(&Some("sh-ok".to_owned())));
    let uname = std::process::Command::new("uname")
        .arg("-n")
        .output()
        .unwrap();
    let uname = String::from_utf8_lossy(&uname.stdout).trim().to_owned();
    assert_eq!(fp.hostname.as_deref(), Some(uname.as_str()));
    if cfg!(target_os = "linux") {
        assert!(fp.kernel.is_some());
        assert!(fp.memory_mib.is_some_and(|m| m > 0));
        // nproc counts the CPUs this process may run on; Rust's count
        // may be lower still under a cgroup CPU quota.
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        assert!(
            fp.cpu_count.is_some_and(|c| c as usize >= n),
            "{:?}",
            fp.cpu_count
        );
    }
}

/// A tool that outlives its timeout is killed and recorded as `None`,
/// with coreutils `timeout` and with the shell watchdog used without it.
#[tokio::test]
async fn slow_tools_time_out() {
    let _guard = SPAWN_LOCK.lock().await;
    let requested = tools(&[
        ("fast", "echo quick"),
        ("slow", "echo partial; sleep 30; echo late"),
    ]);
    let script = probe_script_with_timeout(&requested, Duration::from_secs(1)).unwrap();
    for omit in [&[][..], &["timeout"][..]] {
        let bin = utilities_without(omit);
        let path = bin.path().display().to_string();
        let started = std::time::Instant::now();
        let out = run_local_script(&script, &env(&[("PATH", &path)]), Duration::from_secs(20))
            .await
            .unwrap();
        let elapsed = started.elapsed();
        let fp = parse_probe_output(&out);
        assert_eq!(
            fp.tools.get("fast"),
            Some(&Some("quick".to_owned())),
            "{omit:?}"
        );
        assert_eq!(fp.tools.get("slow"), Some(&None), "{omit:?}");
        assert!(
            elapsed < Duration::from_secs(10),
            "{omit:?}: took {elapsed:?}"
        );
    }
}

/// The script can also be fed on standard input (`ssh host sh -s`): no
/// command in it swallows the rest of the script.
#[tokio::test]
async fn script_runs_from_stdin_like_over_ssh() {
    use tokio::io::AsyncWriteExt;
    let _guard = SPAWN_LOCK.lock().await;
    let fake = fake_nvidia_dir();
    let requested = tools(&[("reader", "cat; echo done"), ("after", "echo still-here")]);
    let script = probe_script(&requested).unwrap();
    let mut child = tokio::process::Command::new("sh")
        .arg("-s")
        .env("PATH", path_with_first(fake.path()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tunectl_probe_end=1"), "{text}");
    let fp = parse_probe_output(&text);
    assert_eq!(fp.gpus.len(), 2);
    assert_eq!(fp.tools.get("reader"), Some(&Some("done".to_owned())));
    assert_eq!(fp.tools.get("after"), Some(&Some("still-here".to_owned())));
}

/// The host class ids and hashes of an NVIDIA host and a GPU-less host
/// as they were before AMD, Intel and unknown accelerators were
/// fingerprinted: existing ledgers key everything by them, so they must
/// never change.
#[test]
fn nvidia_and_gpu_less_ids_are_pinned() {
    let h100 = h100_host();
    assert_eq!(h100.hash(), "fp-ca71967497388c7d");
    assert_eq!(h100.host_class(), "hc-160a664ed2c0");
    let cpu_only = Fingerprint {
        cpu_model: Some("AMD EPYC 7B13".into()),
        cpu_count: Some(2),
        ..Fingerprint::default()
    };
    assert_eq!(cpu_only.hash(), "fp-3067e65ae7b86a78");
    assert_eq!(cpu_only.host_class(), "hc-0d076cfcd6e4");
    // The new fields stay out of their JSON.
    let json = serde_json::to_string(&h100).unwrap();
    for field in [
        "vendor",
        "rocm_version",
        "driver_name",
        "unknown_accelerators",
    ] {
        assert!(!json.contains(field), "{field} in {json}");
    }
    // Display-only cards (a BMC console) and NVIDIA cards in sysfs
    // change nothing either.
    let mut sample = SAMPLE.replace(
        "tunectl_probe_end=1",
        "drm=card0 0x1a03 0x2000 ast\ndrm=card1 0x10de 0x2330 nvidia\ntunectl_probe_end=1",
    );
    assert_eq!(parse_probe_output(&sample).host_class(), "hc-160a664ed2c0");
    sample = sample.replace("gpu=", "ignored=");
    sample = sample.replace("driver=550.54.15\ncuda=12.4\n", "");
    let fp = parse_probe_output(&sample);
    assert!(fp.gpus.is_empty() && fp.unknown_accelerators.is_empty());
    assert_eq!(
        fp.class_label(),
        "no GPU, Intel(R) Xeon(R) Platinum 8480+ (224 cpus)"
    );
}

/// An AMD host's probe output with two GPUs of `model` (amd-smi).
fn amd_sample(model: &str, vram_mb: u64) -> String {
    let gpu = |i: u32| {
        format!(
            r#"{{"gpu": {i}, "asic": {{"market_name": "{model}"}}, "vram": {{"size": {{"value": {vram_mb}, "unit": "MB"}}}}, "driver": {{"name": "amdgpu", "version": "6.8.5"}}}}"#
        )
    };
    format!(
        "tunectl_probe=1\nhostname=mi-node\ncpu_model=AMD EPYC 9654 96-Core Processor\n\
         cpu_count=192\nnvidia_smi=absent\namd_smi=ok\n\
         amd_smi_static={{\"gpu_data\": [{}, {}]}}\n\
         amd_smi_version=AMDSMI Tool: 24.6.2 | AMDSMI Library version: 24.6.2.0 | ROCm version: 6.2.0\n\
         drm=card0 0x1002 0x74a1 amdgpu\ndrm=card1 0x1002 0x74a1 amdgpu\ntunectl_probe_end=1\n",
        gpu(0),
        gpu(1)
    )
}

#[test]
fn amd_hosts_are_classed_by_model_like_nvidia_ones() {
    let a = parse_probe_output(&amd_sample("AMD Instinct MI300X", 196_592));
    assert_eq!(a.gpus.len(), 2);
    assert!(a.gpus.iter().all(|g| g.vendor == GpuVendor::Amd));
    assert_eq!(a.driver_version.as_deref(), Some("6.8.5"));
    assert_eq!(a.rocm_version.as_deref(), Some("6.2.0"));
    assert!(
        a.unknown_accelerators.is_empty(),
        "the tool described the cards"
    );
    assert_eq!(
        a.class_label(),
        "2× AMD Instinct MI300X (196592 MiB), driver 6, ROCm 6.2.0, \
         AMD EPYC 9654 96-Core Processor (192 cpus)"
    );
    let same = parse_probe_output(
        &amd_sample("AMD Instinct MI300X", 196_592).replace("mi-node", "mi-node-2"),
    );
    assert_eq!(same.host_class(), a.host_class());
    assert_ne!(same.hash(), a.hash());
    let other = parse_probe_output(&amd_sample("AMD Instinct MI250X", 65_520));
    assert_ne!(other.host_class(), a.host_class());
    // The JSON round trip keeps the vendor and the ids.
    let back: Fingerprint = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
    assert_eq!(back, a);
    assert_eq!(back.host_class(), a.host_class());
    assert_eq!(back.hash(), a.hash());
    // A changed ROCm release is a difference, not another class.
    let mut newer = a.clone();
    newer.rocm_version = Some("6.3.1".into());
    assert_eq!(newer.host_class(), a.host_class());
    assert_eq!(
        differences(&a, &newer),
        vec!["rocm: 6.2.0 → 6.3.1".to_owned()]
    );
}

#[test]
fn unreadable_amd_output_leaves_an_unknown_accelerator_not_no_gpu() {
    let sample = amd_sample("AMD Instinct MI300X", 196_592)
        .replace("amd_smi_static={", "amd_smi_static=Segmentation fault {");
    let fp = parse_probe_output(&sample.replace("\"gpu_data\": [", "\"gpu_data\": "));
    assert!(fp.gpus.is_empty());
    assert_eq!(fp.rocm_version, None);
    assert_eq!(fp.unknown_accelerators.len(), 2);
    assert_eq!(
        fp.class_label(),
        "2× unknown accelerator (vendor 0x1002, device 0x74a1), \
         AMD EPYC 9654 96-Core Processor (192 cpus)"
    );
    assert_eq!(
        fp.class_key().unknown_accelerators,
        vec!["0x1002:0x74a1".to_owned(), "0x1002:0x74a1".to_owned()]
    );
    let gpu_less = Fingerprint {
        cpu_model: fp.cpu_model.clone(),
        cpu_count: fp.cpu_count,
        ..Fingerprint::default()
    };
    assert_ne!(fp.host_class(), gpu_less.host_class());
    assert!(
        differences(&gpu_less, &fp)
            .contains(&"unknown accelerators: none → 0x1002:0x74a1, 0x1002:0x74a1".to_owned())
    );
}

#[test]
fn labels_an_unknown_vendor_and_intel_sysfs_gpus() {
    let fp = parse_probe_output("drm=card0 0x1234 - odd\ndrm=card0 0x5555 - dup\n");
    assert_eq!(
        fp.class_label(),
        "unknown accelerator (vendor 0x1234), unknown CPU"
    );
    assert_eq!(
        fp.class_key().unknown_accelerators,
        vec!["0x1234:?".to_owned()]
    );
    let fp = parse_probe_output("drm=card1 0x8086 0x56c0 i915\ndrm=card2 0x8086 0x56c0 i915\n");
    assert_eq!(fp.driver_name.as_deref(), Some("i915"));
    assert_eq!(
        fp.class_label(),
        "2× Intel GPU 0x56c0, driver i915, unknown CPU"
    );
    let xe = parse_probe_output("drm=card1 0x8086 0x56c0 xe\ndrm=card2 0x8086 0x56c0 xe\n");
    assert_ne!(xe.host_class(), fp.host_class());
}

/// `PATH` with the fakes first, the FAKE sysfs tree, and `extra`.
fn fake_env(
    fakes: &tempfile::TempDir,
    sysfs: &tempfile::TempDir,
    extra: &[(&str, &str)],
) -> Vec<(String, String)> {
    let mut vars = env(&[
        ("PATH", &path_with_first(fakes.path())),
        ("TUNECTL_FAKE_SYSFS", &sysfs.path().display().to_string()),
        (
            "ROCM_PATH",
            &sysfs.path().join("no-rocm").display().to_string(),
        ),
    ]);
    vars.extend(env(extra));
    vars
}

#[tokio::test]
async fn probes_amd_gpus_through_fake_amd_smi_and_rocm_smi() {
    let _guard = SPAWN_LOCK.lock().await;
    let fakes = fake_tools_dir(&[("amd-smi", FAKE_AMD_SMI), ("rocm-smi", FAKE_ROCM_SMI)]);
    let sysfs = fake_sysfs(&[
        (0, "0x1a03", "0x2000", "ast"),
        (1, "0x1002", "0x74a1", "amdgpu"),
        (2, "0x1002", "0x74a1", "amdgpu"),
    ]);
    let none = BTreeMap::new();
    let fp = probe_local_with_env(&none, &fake_env(&fakes, &sysfs, &[]))
        .await
        .unwrap();
    assert_eq!(fp.gpus.len(), 2, "{fp:?}");
    for (i, g) in fp.gpus.iter().enumerate() {
        assert_eq!(g.index, u32::try_from(i).unwrap());
        assert_eq!(g.name, "AMD Instinct MI300X");
        assert_eq!(g.memory_mib, Some(196_592));
        assert_eq!(g.vendor, GpuVendor::Amd);
    }
    assert_eq!(fp.driver_version.as_deref(), Some("6.8.5"));
    assert_eq!(fp.rocm_version.as_deref(), Some("6.2.0"));
    assert!(fp.unknown_accelerators.is_empty());
    let class = fp.host_class();

    // The older list layout: the same facts, the same class.
    let old = probe_local_with_env(
        &none,
        &fake_env(&fakes, &sysfs, &[("FAKE_AMD_SMI_LAYOUT", "list")]),
    )
    .await
    .unwrap();
    assert_eq!(old.host_class(), class);

    // amd-smi fails: rocm-smi answers (ROCm version from the install).
    let rocm = sysfs.path().join("rocm/.info");
    std::fs::create_dir_all(&rocm).unwrap();
    std::fs::write(rocm.join("version"), "6.1.2-119\n").unwrap();
    let rocm_path = sysfs.path().join("rocm").display().to_string();
    let fp = probe_local_with_env(
        &none,
        &fake_env(
            &fakes,
            &sysfs,
            &[("FAKE_AMD_SMI_FAIL", "1"), ("ROCM_PATH", &rocm_path)],
        ),
    )
    .await
    .unwrap();
    assert_eq!(fp.gpus.len(), 2, "{fp:?}");
    assert!(fp.gpus.iter().all(|g| g.name == "AMD Instinct MI210"
        && g.memory_mib == Some(65520)
        && g.vendor == GpuVendor::Amd));
    assert_eq!(fp.driver_version.as_deref(), Some("6.7.0"));
    assert_eq!(fp.rocm_version.as_deref(), Some("6.1.2-119"));
    assert_ne!(fp.host_class(), class);

    // Both fail: the cards are unknown accelerators, not "no GPU".
    let fp = probe_local_with_env(
        &none,
        &fake_env(
            &fakes,
            &sysfs,
            &[("FAKE_AMD_SMI_FAIL", "1"), ("FAKE_ROCM_SMI_FAIL", "1")],
        ),
    )
    .await
    .unwrap();
    assert!(fp.gpus.is_empty());
    assert!(
        fp.class_label()
            .starts_with("2× unknown accelerator (vendor 0x1002, device 0x74a1), "),
        "{}",
        fp.class_label()
    );

    // amd-smi prints garbage: no fallback to rocm-smi (it succeeded),
    // the cards speak for the host.
    let fp = probe_local_with_env(
        &none,
        &fake_env(&fakes, &sysfs, &[("FAKE_AMD_SMI_GARBAGE", "1")]),
    )
    .await
    .unwrap();
    assert!(fp.gpus.is_empty());
    assert_eq!(fp.unknown_accelerators.len(), 2);
}

#[tokio::test]
async fn probes_intel_gpus_through_fake_xpu_smi_else_sysfs() {
    let _guard = SPAWN_LOCK.lock().await;
    let fakes = fake_tools_dir(&[("xpu-smi", FAKE_XPU_SMI)]);
    let sysfs = fake_sysfs(&[
        (0, "0x8086", "0x0bd5", "i915"),
        (1, "0x8086", "0x0bd5", "i915"),
    ]);
    let none = BTreeMap::new();
    let fp = probe_local_with_env(&none, &fake_env(&fakes, &sysfs, &[]))
        .await
        .unwrap();
    assert_eq!(fp.gpus.len(), 2, "{fp:?}");
    assert!(
        fp.gpus
            .iter()
            .all(|g| g.name == "Intel(R) Data Center GPU Max 1550"
                && g.memory_mib == Some(131_072)
                && g.vendor == GpuVendor::Intel)
    );
    assert_eq!(
        fp.driver_version.as_deref(),
        Some("I915_23.10.32_PSB_231129.32")
    );
    assert_eq!(fp.driver_name, None);

    // xpu-smi fails: sysfs names the cards by device id.
    let fp = probe_local_with_env(
        &none,
        &fake_env(&fakes, &sysfs, &[("FAKE_XPU_SMI_FAIL", "1")]),
    )
    .await
    .unwrap();
    assert_eq!(fp.gpus.len(), 2, "{fp:?}");
    assert!(
        fp.gpus
            .iter()
            .all(|g| g.name == "Intel GPU 0x0bd5" && g.memory_mib.is_none())
    );
    assert_eq!(fp.driver_version, None);
    assert_eq!(fp.driver_name.as_deref(), Some("i915"));

    // No tool at all, another vendor's card: an unknown accelerator.
    let odd = fake_sysfs(&[(0, "0x1234", "0x11e8", "weirdaccel")]);
    let empty = fake_tools_dir(&[]);
    let fp = probe_local_with_env(&none, &fake_env(&empty, &odd, &[]))
        .await
        .unwrap();
    assert!(fp.gpus.is_empty());
    assert!(
        fp.class_label()
            .starts_with("unknown accelerator (vendor 0x1234, device 0x11e8), "),
        "{}",
        fp.class_label()
    );
}
