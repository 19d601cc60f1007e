//! Host fingerprints: the facts about a machine that decide which performance
//! settings win on it (GPU models, counts and memory, driver and CUDA
//! versions, CPU model and count, memory, OS, kernel) plus the versions of
//! tools a study asks for.
//!
//! This module owns *probing* those facts and turning them into a
//! [`Fingerprint`], a content hash of it ([`Fingerprint::hash`]) and a
//! *host class* ([`Fingerprint::host_class`]): the subset of facts under which
//! two machines are expected to prefer the same settings. It never guesses a
//! field: whatever cannot be read (no `nvidia-smi`, a failing driver, an
//! unreadable `/proc` file, a tool that exits non-zero) is recorded as `None`
//! or an empty list, never as a default or an inferred value.
//!
//! GPUs come from their vendors' tools: `nvidia-smi`; `amd-smi`, else
//! `rocm-smi`; `xpu-smi`, else sysfs for Intel. A DRM device that none of
//! them describes is an *unknown accelerator*, which keeps its host out of
//! the GPU-less class ([`accel`] parses all but NVIDIA's output).
//!
//! The probe is a POSIX `sh` script ([`PROBE_SCRIPT`], extended with the
//! requested tool commands by [`probe_script`]) rather than Rust or Python
//! code because the *same* probe has to run on remote SSH hosts and inside
//! Slurm jobs, where neither this binary, nor Python, nor torch can be assumed
//! and only a POSIX shell and the usual utilities exist. The script prints
//! raw, line-oriented `key=value` facts; [`parse_probe_output`] is the pure
//! parser that turns such output (from wherever it came) into a
//! [`Fingerprint`]. [`probe_local`] runs the script on this machine.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::shell_quote::single_quote;

pub mod accel;
mod classkey;

pub use classkey::{ClassField, ClassKey};

/// Version of the [`Fingerprint`] JSON layout, stored in [`Fingerprint::schema`].
pub const SCHEMA_VERSION: u32 = 1;

/// How long each requested tool command may run inside the probe before it
/// is killed and recorded as `None`. Each `nvidia-smi` call gets the same limit.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(10);

/// Time allowed for the base probe (everything but the tool commands) when it
/// runs locally. [`probe_local`] adds [`TOOL_TIMEOUT`] for every requested
/// tool on top of this, so that a study asking for several slow tools does
/// not lose the whole fingerprint.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The base probe: a POSIX `sh` script (no bashisms) that prints the raw facts
/// of the machine it runs on, one `key=value` per line:
///
/// ```text
/// tunectl_probe=1            start marker; anything before it (login banners) is ignored
/// hostname=<uname -n>
/// arch=<uname -m>
/// os=<PRETTY_NAME from /etc/os-release, quotes as in the file>
/// kernel=<uname -r>
/// cpu_model=<"model name" from /proc/cpuinfo, else lscpu / sysctl>
/// cpu_count=<logical CPUs this process may use: nproc, else getconf, else /proc/cpuinfo>
/// mem_total_kib=<MemTotal from /proc/meminfo>
/// nvidia_smi=ok | absent | failed:<exit status>
/// gpu=<one line of nvidia-smi --query-gpu=index,name,memory.total,driver_version,uuid
///      --format=csv,noheader,nounits>           (one per GPU, only when nvidia_smi=ok)
/// driver=<Driver Version from the nvidia-smi header>  (only when nvidia_smi=ok)
/// cuda=<CUDA Version from the nvidia-smi header or nvidia-smi --version>
/// amd_smi=ok | absent | failed:<exit status, or "cut" for an output over 256 KiB>
/// amd_smi_static=<amd-smi static --asic --vram --driver --json, on one line>
/// amd_smi_version=<first line of amd-smi version>
/// rocm_smi=ok | absent | failed:<…>   (only when amd-smi is not ok)
/// rocm_smi_json=<rocm-smi --showproductname --showmeminfo vram --showdriverversion --json, on one line>
/// rocm_info_version=<${ROCM_PATH:-/opt/rocm}/.info/version>  (after either AMD tool)
/// xpu_smi=ok | absent | failed:<…>
/// xpu=<one CSV line of xpu-smi discovery --dump 1,2,8,16>    (header first)
/// drm=<cardN> <PCI vendor> <PCI device> <driver name>       (one per DRM card
///      with a vendor id, from $TUNECTL_FAKE_SYSFS or /sys; "-" where unreadable)
/// ```
///
/// A fact that cannot be read is printed with an empty value. Every value is
/// a single line. Each external command that could read standard input reads
/// `/dev/null`, so the script may also be fed to a shell on its standard input
/// (`ssh host sh -s < script`). It sets `LC_ALL=C` for stable output.
///
/// It ends without `exit`, so that [`probe_script`] can append the tool
/// commands (`tool.<name>=<first line>`) and the end marker
/// `tunectl_probe_end=1`. Use [`probe_script`] to get a complete script.
pub const PROBE_SCRIPT: &str = r#"# tunectl host probe (POSIX sh). Prints raw facts as key=value lines.
LC_ALL=C
export LC_ALL
tc_tool_timeout=10
tc_smi_timeout=10
tc_dir=
tc_dir_tried=

tc_has_timeout=
if command -v timeout >/dev/null 2>&1 && timeout 5 true </dev/null >/dev/null 2>&1; then
    tc_has_timeout=1
fi

# tc_descendants PID: the PIDs of all descendants of PID (via POSIX ps).
tc_descendants() {
    ps -A -o pid= -o ppid= 2>/dev/null | awk -v root="$1" '
        { parent[$1] = $2 }
        END {
            for (p in parent) {
                q = parent[p]; n = 0
                while (q != root && (q in parent) && q > 1 && n < 1000) { q = parent[q]; n++ }
                if (q == root) print p
            }
        }'
}

# tc_timeout SECS CMD [ARG...]: run CMD, killing it after SECS seconds.
# Uses timeout(1) when it works, else a watchdog that polls once a second and
# then signals CMD and all its descendants.
tc_timeout() {
    tc_secs=$1
    shift
    if [ -n "$tc_has_timeout" ]; then
        timeout "$tc_secs" "$@"
        return $?
    fi
    "$@" &
    tc_pid=$!
    (
        tc_n=0
        while [ "$tc_n" -lt "$tc_secs" ]; do
            sleep 1
            kill -0 "$tc_pid" 2>/dev/null || exit 0
            tc_n=$((tc_n + 1))
        done
        tc_tree=$(tc_descendants "$tc_pid")
        # shellcheck disable=SC2086 # a list of PIDs
        kill -TERM "$tc_pid" $tc_tree
        sleep 2
        # shellcheck disable=SC2086 # a list of PIDs
        kill -KILL "$tc_pid" $tc_tree
    ) </dev/null >/dev/null 2>&1 &
    tc_wd=$!
    wait "$tc_pid"
    tc_rc=$?
    kill "$tc_wd" 2>/dev/null
    return "$tc_rc"
}

# tc_first: first line of stdin that is not blank, without a trailing CR.
tc_first() {
    awk '{ sub(/\r$/, "") } NF { print; exit }'
}

# tc_emit KEY VALUE: print KEY=<first non-blank line of VALUE>.
tc_emit() {
    printf '%s=%s\n' "$1" "$(printf '%s\n' "$2" | tc_first)"
}

printf 'tunectl_probe=1\n'

tc_emit hostname "$(uname -n 2>/dev/null || cat /proc/sys/kernel/hostname 2>/dev/null)"
tc_emit arch "$(uname -m 2>/dev/null)"

tc_os=
for tc_f in /etc/os-release /usr/lib/os-release; do
    if [ -r "$tc_f" ]; then
        tc_os=$(awk 'index($0, "PRETTY_NAME=") == 1 { print substr($0, 13); exit }' "$tc_f" 2>/dev/null)
        break
    fi
done
tc_emit os "$tc_os"

tc_emit kernel "$(uname -r 2>/dev/null || cat /proc/sys/kernel/osrelease 2>/dev/null)"

tc_cpu=
if [ -r /proc/cpuinfo ]; then
    tc_cpu=$(awk '/^model name[ \t]*:/ { sub(/^[^:]*:[ \t]*/, ""); print; exit }' /proc/cpuinfo 2>/dev/null)
fi
if [ -z "$tc_cpu" ] && command -v lscpu >/dev/null 2>&1; then
    tc_cpu=$(lscpu </dev/null 2>/dev/null | awk '/^Model name[ \t]*:/ { sub(/^[^:]*:[ \t]*/, ""); print; exit }')
fi
if [ -z "$tc_cpu" ] && command -v sysctl >/dev/null 2>&1; then
    tc_cpu=$(sysctl -n machdep.cpu.brand_string </dev/null 2>/dev/null)
fi
tc_emit cpu_model "$tc_cpu"

# GNU nproc honours OMP_NUM_THREADS / OMP_THREAD_LIMIT, which are not facts.
tc_ncpu=$( (unset OMP_NUM_THREADS OMP_THREAD_LIMIT; nproc </dev/null 2>/dev/null) || getconf _NPROCESSORS_ONLN 2>/dev/null)
if [ -z "$tc_ncpu" ] && [ -r /proc/cpuinfo ]; then
    tc_ncpu=$(awk '/^processor[ \t]*:/ { n++ } END { if (n > 0) print n }' /proc/cpuinfo 2>/dev/null)
fi
tc_emit cpu_count "$tc_ncpu"

tc_mem=
if [ -r /proc/meminfo ]; then
    tc_mem=$(awk '$1 == "MemTotal:" && $3 == "kB" { print $2; exit }' /proc/meminfo 2>/dev/null)
fi
tc_emit mem_total_kib "$tc_mem"

if command -v nvidia-smi >/dev/null 2>&1; then
    tc_q=$(tc_timeout "$tc_smi_timeout" nvidia-smi --query-gpu=index,name,memory.total,driver_version,uuid --format=csv,noheader,nounits </dev/null 2>/dev/null)
    tc_rc=$?
    if [ "$tc_rc" -eq 0 ]; then
        printf 'nvidia_smi=ok\n'
        printf '%s\n' "$tc_q" | awk '{ sub(/\r$/, "") } NF { print "gpu=" $0 }'
        tc_hdr=$(tc_timeout "$tc_smi_timeout" nvidia-smi </dev/null 2>/dev/null)
        tc_emit driver "$(printf '%s\n' "$tc_hdr" | sed -n 's/.*Driver Version[[:space:]]*:[[:space:]]*\([0-9][0-9.]*\).*/\1/p')"
        tc_cuda=$(printf '%s\n' "$tc_hdr" | sed -n 's/.*CUDA Version[[:space:]]*:[[:space:]]*\([0-9][0-9.]*\).*/\1/p')
        if [ -z "$tc_cuda" ]; then
            tc_cuda=$(tc_timeout "$tc_smi_timeout" nvidia-smi --version </dev/null 2>/dev/null | sed -n 's/.*CUDA Version[[:space:]]*:[[:space:]]*\([0-9][0-9.]*\).*/\1/p')
        fi
        tc_emit cuda "$tc_cuda"
    else
        printf 'nvidia_smi=failed:%s\n' "$tc_rc"
    fi
else
    printf 'nvidia_smi=absent\n'
fi

# tc_capture CMD [ARG...]: CMD's stdout under the smi timeout, cut at
# tc_out_max bytes, then a last line tc_rc=<exit status>. Output longer than
# the cut loses that line: tc_status then says "cut", never a partial success.
tc_out_max=262144
tc_capture() {
    { tc_timeout "$tc_smi_timeout" "$@" </dev/null 2>/dev/null; printf '\ntc_rc=%s\n' "$?"; } | head -c "$tc_out_max"
}
# tc_status OUT: the exit status recorded by tc_capture, or "cut".
tc_status() {
    printf '%s\n' "$1" | awk '{ last = $0 } END { if (last ~ /^tc_rc=[0-9]+$/) print substr(last, 7); else print "cut" }'
}
# tc_body OUT: tc_capture's output without its status line.
tc_body() {
    printf '%s\n' "$1" | awk 'NR > 1 { print prev } { prev = $0 }'
}
# tc_json KEY OUT: KEY=<the JSON body on one line>. JSON strings hold no raw
# newlines, so joining the lines keeps the document intact.
tc_json() {
    printf '%s=%s\n' "$1" "$(tc_body "$2" | tr '\r\n\t' '   ')"
}
# tc_smi NAME OUT: NAME=ok, or NAME=failed:<status> (and a false return).
tc_smi() {
    tc_st=$(tc_status "$2")
    if [ "$tc_st" = 0 ]; then
        printf '%s=ok\n' "$1"
        return 0
    fi
    printf '%s=failed:%s\n' "$1" "$tc_st"
    return 1
}

# AMD GPUs: amd-smi, else rocm-smi (JSON, parsed by the launcher).
tc_amd=
if command -v amd-smi >/dev/null 2>&1; then
    tc_out=$(tc_capture amd-smi static --asic --vram --driver --json)
    if tc_smi amd_smi "$tc_out"; then
        tc_amd=1
        tc_json amd_smi_static "$tc_out"
        tc_out=$(tc_capture amd-smi version)
        tc_emit amd_smi_version "$(tc_body "$tc_out")"
    fi
else
    printf 'amd_smi=absent\n'
fi
if [ -z "$tc_amd" ]; then
    if command -v rocm-smi >/dev/null 2>&1; then
        tc_out=$(tc_capture rocm-smi --showproductname --showmeminfo vram --showdriverversion --json)
        if tc_smi rocm_smi "$tc_out"; then
            tc_amd=1
            tc_json rocm_smi_json "$tc_out"
        fi
    else
        printf 'rocm_smi=absent\n'
    fi
fi
if [ -n "$tc_amd" ] && [ -r "${ROCM_PATH:-/opt/rocm}/.info/version" ]; then
    tc_emit rocm_info_version "$(head -c 256 "${ROCM_PATH:-/opt/rocm}/.info/version" 2>/dev/null)"
fi

# Intel GPUs: xpu-smi's CSV dump of device id, name, driver version and
# memory size (one xpu= line per CSV line, header included).
if command -v xpu-smi >/dev/null 2>&1; then
    tc_out=$(tc_capture xpu-smi discovery --dump 1,2,8,16)
    if tc_smi xpu_smi "$tc_out"; then
        tc_body "$tc_out" | awk '{ sub(/\r$/, "") } NF && n < 256 { n++; print "xpu=" $0 }'
    fi
else
    printf 'xpu_smi=absent\n'
fi

# DRM devices from sysfs: drm=<card> <vendor> <device> <driver> per card
# with a vendor id ("-" for what cannot be read). The launcher decides what
# they mean. TUNECTL_FAKE_SYSFS replaces /sys (tests only).
tc_sys=${TUNECTL_FAKE_SYSFS:-/sys}
# tc_id FILE: the first 32 bytes of FILE, without whitespace.
tc_id() {
    head -c 32 "$1" 2>/dev/null | tr -d ' \t\r\n'
}
tc_n=0
for tc_card in "$tc_sys"/class/drm/card*; do
    tc_name=${tc_card##*/}
    case $tc_name in card | card*[!0-9]*) continue ;; esac
    [ -r "$tc_card/device/vendor" ] || continue
    tc_n=$((tc_n + 1))
    [ "$tc_n" -le 64 ] || break
    tc_v=$(tc_id "$tc_card/device/vendor")
    tc_d=$(tc_id "$tc_card/device/device")
    # The driver is the name of the directory the link resolves to (cd's
    # output is dropped: with CDPATH set, cd may print the directory).
    tc_drv=$(cd -P -- "$tc_card/device/driver" >/dev/null 2>&1 && printf '%s' "${PWD##*/}")
    printf 'drm=%s %s %s %s\n' "$tc_name" "${tc_v:--}" "${tc_d:--}" "${tc_drv:--}"
done

# tc_tool NAME COMMAND: run COMMAND with sh -c under the tool timeout and print
# tool.NAME=<first non-blank line of stdout, else of stderr>; empty when the
# command fails, times out or prints nothing.
tc_tool() {
    if [ -z "$tc_dir_tried" ]; then
        tc_dir_tried=1
        tc_dir=${TMPDIR:-/tmp}/tunectl-probe.$$
        if mkdir -m 700 "$tc_dir" 2>/dev/null; then
            trap 'rm -rf "$tc_dir"' EXIT
            trap 'rm -rf "$tc_dir"; exit 129' HUP
            trap 'rm -rf "$tc_dir"; exit 130' INT
            trap 'rm -rf "$tc_dir"; exit 143' TERM
        else
            tc_dir=
        fi
    fi
    tc_line=
    if [ -n "$tc_dir" ]; then
        tc_timeout "$tc_tool_timeout" sh -c "$2" </dev/null >"$tc_dir/out" 2>"$tc_dir/err"
        tc_rc=$?
        if [ "$tc_rc" -eq 0 ]; then
            tc_line=$(tc_first <"$tc_dir/out")
            if [ -z "$tc_line" ]; then
                tc_line=$(tc_first <"$tc_dir/err")
            fi
        fi
    else
        # No scratch directory: stdout only.
        tc_out=$(tc_timeout "$tc_tool_timeout" sh -c "$2" </dev/null 2>/dev/null)
        tc_rc=$?
        if [ "$tc_rc" -eq 0 ]; then
            tc_line=$(printf '%s\n' "$tc_out" | tc_first)
        fi
    fi
    printf 'tool.%s=%s\n' "$1" "$tc_line"
}
"#;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// A tool name is not of the form `[A-Za-z0-9_-]+`.
    #[error("invalid tool name {0:?}: tool names must match [A-Za-z0-9_-]+")]
    InvalidToolName(String),
    /// A tool command contains a NUL byte, which no shell can be given.
    #[error("the command for tool {0:?} contains a NUL byte")]
    InvalidToolCommand(String),
    /// The local shell could not be started.
    #[error("could not start the probe shell: {0}")]
    Spawn(#[source] std::io::Error),
    /// Waiting for or reading from the local shell failed.
    #[error("could not read the probe's output: {0}")]
    Io(#[source] std::io::Error),
    /// The probe did not finish in time (it was killed).
    #[error("the probe did not finish within {0:?}")]
    Timeout(Duration),
    /// The probe shell exited unsuccessfully (it normally always succeeds).
    #[error("the probe shell failed ({status}): {stderr}")]
    ProbeFailed {
        /// How the shell ended.
        status: String,
        /// The start of its standard error.
        stderr: String,
    },
}

/// The facts probed on one machine. `None` (or an empty list) means the fact
/// could not be read; it is never filled in by a guess.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Fingerprint {
    /// Layout version, [`SCHEMA_VERSION`].
    pub schema: u32,
    /// `uname -n`.
    pub hostname: Option<String>,
    /// `uname -m`, e.g. `x86_64`.
    pub arch: Option<String>,
    /// `PRETTY_NAME` from `/etc/os-release`, unquoted.
    pub os: Option<String>,
    /// `uname -r`.
    pub kernel: Option<String>,
    /// CPU model name, with runs of whitespace collapsed.
    pub cpu_model: Option<String>,
    /// Logical CPUs available to the probing process (`nproc`; inside a
    /// Slurm job or a cpuset this is the allocation, not the whole machine).
    pub cpu_count: Option<u32>,
    /// `MemTotal` in MiB (rounded down).
    pub memory_mib: Option<u64>,
    /// GPUs reported by `nvidia-smi`, then by `amd-smi` (or `rocm-smi`),
    /// then by `xpu-smi`, each ordered by index; Intel GPUs from sysfs when
    /// no tool described any GPU. Empty when no GPU could be read.
    pub gpus: Vec<Gpu>,
    /// Driver version: NVIDIA's (e.g. `550.54.15`), else AMD's amdgpu
    /// (e.g. `6.8.5`), else Intel's as `xpu-smi` reports it.
    pub driver_version: Option<String>,
    /// CUDA version reported by the driver (`nvidia-smi` header), e.g. `12.4`.
    pub cuda_version: Option<String>,
    /// ROCm version on an AMD host (`amd-smi version`, else the ROCm
    /// install's `.info/version`), e.g. `6.2.0`. Absent from the JSON when
    /// unknown, like every field added after schema 1, so that fingerprints
    /// without it keep their hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocm_version: Option<String>,
    /// The kernel driver's name where no driver version could be read
    /// (Intel GPUs found through sysfs only), e.g. `i915` or `xe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_name: Option<String>,
    /// Devices that look like accelerators but that no tool described (see
    /// [`accel::from_drm`]); they keep the host out of the GPU-less class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_accelerators: Vec<UnknownAccelerator>,
    /// Requested tools: name → first line of the command's output, `None`
    /// when the command failed, timed out or printed nothing.
    pub tools: BTreeMap<String, Option<String>>,
}

/// What differs between two fingerprints, as `field: old → new` lines
/// (hostname and memory left out: they do not make a class).
pub fn differences(old: &Fingerprint, new: &Fingerprint) -> Vec<String> {
    fn show(v: &Option<String>) -> &str {
        v.as_deref().unwrap_or("none")
    }
    let mut out = Vec::new();
    let mut field = |name: &str, a: &Option<String>, b: &Option<String>| {
        if a != b {
            out.push(format!("{name}: {} → {}", show(a), show(b)));
        }
    };
    field("driver", &old.driver_version, &new.driver_version);
    field("cuda", &old.cuda_version, &new.cuda_version);
    field("rocm", &old.rocm_version, &new.rocm_version);
    field("driver name", &old.driver_name, &new.driver_name);
    field("os", &old.os, &new.os);
    field("kernel", &old.kernel, &new.kernel);
    field("arch", &old.arch, &new.arch);
    field("cpu", &old.cpu_model, &new.cpu_model);
    let gpus = |f: &Fingerprint| {
        let names: Vec<&str> = f.gpus.iter().map(|g| g.name.as_str()).collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            format!("{}× {}", names.len(), names.join(", "))
        }
    };
    if gpus(old) != gpus(new) {
        out.push(format!("gpus: {} → {}", gpus(old), gpus(new)));
    }
    let unknown = |f: &Fingerprint| f.class_key().unknown_accelerators.join(", ");
    if unknown(old) != unknown(new) {
        let show = |s: String| if s.is_empty() { "none".to_owned() } else { s };
        out.push(format!(
            "unknown accelerators: {} → {}",
            show(unknown(old)),
            show(unknown(new))
        ));
    }
    for name in old.tools.keys().chain(new.tools.keys()) {
        let a = old.tools.get(name).cloned().flatten();
        let b = new.tools.get(name).cloned().flatten();
        if a != b && !out.iter().any(|l| l.starts_with(&format!("tool {name}:"))) {
            out.push(format!("tool {name}: {} → {}", show(&a), show(&b)));
        }
    }
    out
}

/// One GPU as reported by its vendor's tool (or, for Intel, by sysfs).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Gpu {
    /// The tool's index (`nvidia-smi`'s `index`, `amd-smi`'s `gpu`, the
    /// `cardN` of rocm-smi and sysfs, `xpu-smi`'s device id).
    pub index: u32,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`, `AMD Instinct MI300X`.
    pub name: String,
    /// Total memory in MiB.
    pub memory_mib: Option<u64>,
    /// GPU UUID, e.g. `GPU-…` (NVIDIA only).
    pub uuid: Option<String>,
    /// Who made it. Left out of the JSON for NVIDIA (the only vendor before
    /// there was this field), so NVIDIA fingerprints keep their hash.
    #[serde(default, skip_serializing_if = "GpuVendor::is_nvidia")]
    pub vendor: GpuVendor,
}

/// A GPU's vendor.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum GpuVendor {
    /// NVIDIA, through `nvidia-smi`.
    #[default]
    Nvidia,
    /// AMD, through `amd-smi` or `rocm-smi`.
    Amd,
    /// Intel, through `xpu-smi` or sysfs.
    Intel,
}

impl GpuVendor {
    /// Whether this is NVIDIA (serde's `skip_serializing_if` wants a reference).
    #[allow(clippy::trivially_copy_pass_by_ref)]
    pub fn is_nvidia(&self) -> bool {
        *self == GpuVendor::Nvidia
    }
}

/// CUDA's device variable: [`default_device_env`] unless a host's GPUs are
/// all AMD or all Intel.
pub const DEFAULT_DEVICE_ENV: &str = "CUDA_VISIBLE_DEVICES";

/// The variable that pins a slot's device on a host without `device_env`,
/// by the vendor of the GPUs its fingerprint shows: `HIP_VISIBLE_DEVICES`
/// when all are AMD (HIP reads it; ROCm's runtime-level
/// `ROCR_VISIBLE_DEVICES` would also hide the devices from OpenCL, which a
/// trial may want to see), `ZE_AFFINITY_MASK` when all are Intel (Level
/// Zero's), else [`DEFAULT_DEVICE_ENV`], as before vendors were told apart
/// (NVIDIA, mixed hosts, no GPU).
pub fn default_device_env(fp: &Fingerprint) -> &'static str {
    let all = |v: GpuVendor| !fp.gpus.is_empty() && fp.gpus.iter().all(|g| g.vendor == v);
    if all(GpuVendor::Amd) {
        "HIP_VISIBLE_DEVICES"
    } else if all(GpuVendor::Intel) {
        "ZE_AFFINITY_MASK"
    } else {
        DEFAULT_DEVICE_ENV
    }
}

/// A device that looks like an accelerator (a DRM card with a PCI vendor
/// id) but that no vendor tool described: another vendor's card, or an AMD
/// card whose tools are missing or failed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct UnknownAccelerator {
    /// PCI vendor id, e.g. `0x1234`.
    pub vendor_id: String,
    /// PCI device id, e.g. `0x11e8`.
    pub device_id: Option<String>,
    /// The kernel driver's name.
    pub driver: Option<String>,
}

impl UnknownAccelerator {
    /// `vendor 0x1234, device 0x11e8` (the device when known).
    fn describe(&self) -> String {
        match &self.device_id {
            Some(d) => format!("vendor {}, device {d}", self.vendor_id),
            None => format!("vendor {}", self.vendor_id),
        }
    }
}

/// The class-defining facts of a host: machines with equal keys are expected
/// to prefer the same performance settings. Hostname, kernel, OS, driver
/// minor version, CUDA version, CPU count, memory, GPU UUIDs and tool versions
/// are deliberately not part of it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct HostClassKey {
    /// `(name, memory_mib)` of every GPU, sorted.
    pub gpus: Vec<(String, Option<u64>)>,
    /// Number of GPUs.
    pub gpu_count: u32,
    /// Driver major version, e.g. `550` (see [`driver_major`]).
    pub driver_major: Option<String>,
    /// CPU model name.
    pub cpu_model: Option<String>,
    /// The driver's name where its version is unknown (Intel GPUs seen
    /// through sysfs: `i915` and `xe` may tune differently). Absent from
    /// the JSON when `None`, so older classes keep their id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_name: Option<String>,
    /// `vendor:device` of every unknown accelerator (`0x1234:0x11e8`, or
    /// `0x1234:?` without a device id), sorted: two hosts with the same
    /// unknown cards share a class, and none shares one with a GPU-less
    /// host. Absent from the JSON when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_accelerators: Vec<String>,
}

impl Default for Fingerprint {
    /// A fingerprint in which nothing is known.
    fn default() -> Self {
        Fingerprint {
            schema: SCHEMA_VERSION,
            hostname: None,
            arch: None,
            os: None,
            kernel: None,
            cpu_model: None,
            cpu_count: None,
            memory_mib: None,
            gpus: Vec::new(),
            driver_version: None,
            cuda_version: None,
            rocm_version: None,
            driver_name: None,
            unknown_accelerators: Vec::new(),
            tools: BTreeMap::new(),
        }
    }
}

impl Fingerprint {
    /// `"fp-"` + the first 16 hex digits of the SHA-256 of the canonical JSON
    /// of the whole fingerprint: any change of any fact changes it.
    pub fn hash(&self) -> String {
        format!("fp-{}", &sha256_hex_of_json(self)[..16])
    }

    /// The class-defining facts of this host (see [`HostClassKey`]).
    pub fn class_key(&self) -> HostClassKey {
        let mut gpus: Vec<(String, Option<u64>)> = self
            .gpus
            .iter()
            .map(|g| (g.name.clone(), g.memory_mib))
            .collect();
        gpus.sort();
        let mut unknown: Vec<String> = self
            .unknown_accelerators
            .iter()
            .map(|a| format!("{}:{}", a.vendor_id, a.device_id.as_deref().unwrap_or("?")))
            .collect();
        unknown.sort();
        HostClassKey {
            gpu_count: u32::try_from(gpus.len()).unwrap_or(u32::MAX),
            gpus,
            driver_major: self.driver_version.as_deref().and_then(driver_major),
            cpu_model: self.cpu_model.clone(),
            driver_name: self.driver_name.clone(),
            unknown_accelerators: unknown,
        }
    }

    /// `"hc-"` + the first 12 hex digits of the SHA-256 of the canonical JSON
    /// of [`Fingerprint::class_key`].
    pub fn host_class(&self) -> String {
        format!("hc-{}", &sha256_hex_of_json(&self.class_key())[..12])
    }

    /// A one-line human summary for reports, e.g.
    /// `2× NVIDIA H100 80GB HBM3 (81559 MiB), driver 550, CUDA 12.4, Intel Xeon … (64 cpus)`
    /// or `no GPU, AMD EPYC 7B13 (2 cpus)`.
    pub fn class_label(&self) -> String {
        let mut parts: Vec<String> = Vec::new();

        let key = self.class_key();
        if key.gpus.is_empty() && !self.unknown_accelerators.is_empty() {
            parts.push(self.unknown_label());
        } else if key.gpus.is_empty() {
            parts.push("no GPU".to_owned());
        } else {
            // Group equal (name, memory) pairs; `key.gpus` is sorted.
            let mut groups: Vec<(&(String, Option<u64>), usize)> = Vec::new();
            for gpu in &key.gpus {
                match groups.last_mut() {
                    Some((last, n)) if *last == gpu => *n += 1,
                    _ => groups.push((gpu, 1)),
                }
            }
            let gpus = groups
                .iter()
                .map(|((name, mem), n)| match mem {
                    Some(mib) => format!("{n}× {name} ({mib} MiB)"),
                    None => format!("{n}× {name}"),
                })
                .collect::<Vec<_>>()
                .join(" + ");
            parts.push(gpus);
        }
        if let Some(major) = &key.driver_major {
            parts.push(format!("driver {major}"));
        }
        if let Some(name) = &key.driver_name {
            parts.push(format!("driver {name}"));
        }
        if let Some(cuda) = &self.cuda_version {
            parts.push(format!("CUDA {cuda}"));
        }
        if let Some(rocm) = &self.rocm_version {
            parts.push(format!("ROCm {rocm}"));
        }
        let mut cpu = self
            .cpu_model
            .clone()
            .unwrap_or_else(|| "unknown CPU".to_owned());
        if let Some(n) = self.cpu_count {
            let _ = write!(cpu, " ({n} cpus)");
        }
        parts.push(cpu);
        parts.join(", ")
    }

    /// `unknown accelerator (vendor 0x1234, device 0x11e8)`, with `N× ` for
    /// several equal ones and ` + ` between different ones.
    fn unknown_label(&self) -> String {
        let mut groups: Vec<(String, usize)> = Vec::new();
        let mut described: Vec<String> = self
            .unknown_accelerators
            .iter()
            .map(UnknownAccelerator::describe)
            .collect();
        described.sort();
        for d in described {
            match groups.last_mut() {
                Some((last, n)) if *last == d => *n += 1,
                _ => groups.push((d, 1)),
            }
        }
        groups
            .iter()
            .map(|(d, n)| match n {
                1 => format!("unknown accelerator ({d})"),
                n => format!("{n}× unknown accelerator ({d})"),
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

/// The major version of a driver version: `"550"` from NVIDIA's
/// `"550.54.15"`, `"6"` from AMD's `"6.8.5"`.
/// `None` unless the part before the first `.` is a non-empty run of digits.
pub fn driver_major(version: &str) -> Option<String> {
    let major = version.trim().split('.').next()?;
    if !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit()) {
        Some(major.to_owned())
    } else {
        None
    }
}

/// Whether `name` may name a tool: `[A-Za-z0-9_-]+`.
pub fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The complete probe script: [`PROBE_SCRIPT`] followed by one line per tool
/// (in the map's order) that runs the tool's command with `sh -c` under a
/// 10 s timeout and prints `tool.<name>=<first line>`, then the end marker.
///
/// Each command is the user's own and is passed to the shell verbatim
/// (single-quoted, so quotes and `$(...)` in it reach `sh -c` unchanged and
/// are interpreted only there). Tool names must match `[A-Za-z0-9_-]+`;
/// a command may not contain a NUL byte.
pub fn probe_script(tools: &BTreeMap<String, String>) -> Result<String, FingerprintError> {
    probe_script_with_timeout(tools, TOOL_TIMEOUT)
}

/// [`probe_script`] with a chosen per-tool timeout (whole seconds, at least 1).
pub(crate) fn probe_script_with_timeout(
    tools: &BTreeMap<String, String>,
    tool_timeout: Duration,
) -> Result<String, FingerprintError> {
    let mut script = String::with_capacity(PROBE_SCRIPT.len() + 64 * (tools.len() + 1));
    script.push_str(PROBE_SCRIPT);
    let secs = tool_timeout.as_secs().max(1);
    if secs != TOOL_TIMEOUT.as_secs() {
        let _ = writeln!(script, "tc_tool_timeout={secs}");
    }
    for (name, command) in tools {
        if !is_valid_tool_name(name) {
            return Err(FingerprintError::InvalidToolName(name.clone()));
        }
        if command.contains('\0') {
            return Err(FingerprintError::InvalidToolCommand(name.clone()));
        }
        let _ = writeln!(
            script,
            "tc_tool {} {}",
            single_quote(name),
            single_quote(command)
        );
    }
    script.push_str("printf 'tunectl_probe_end=1\\n'\nexit 0\n");
    Ok(script)
}

/// Parses the output of the probe script into a [`Fingerprint`].
///
/// Pure and total: lines that are not `key=value`, unknown keys, unparsable
/// numbers and malformed `gpu=` lines are ignored, and every fact without a
/// usable line stays `None`. When the start marker `tunectl_probe=…` occurs,
/// only the lines after it count (so a login banner cannot inject facts), up
/// to the end marker `tunectl_probe_end` if present. For a key given more than
/// once the first occurrence wins; `gpu=` lines are collected (one per index).
pub fn parse_probe_output(text: &str) -> Fingerprint {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| {
            l.split_once('=')
                .is_some_and(|(k, _)| k.trim() == "tunectl_probe")
        })
        .map_or(0, |i| i + 1);

    let mut fp = Fingerprint::default();
    let secrets = crate::scrub::secret_values();
    let mut gpu_driver: Option<String> = None;
    let mut header_driver: Option<String> = None;
    let mut other = OtherVendorLines::default();

    for line in lines.get(start..).unwrap_or_default() {
        let Some((key, raw)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let value = non_empty(raw);
        match key {
            "tunectl_probe_end" => break,
            "hostname" => first(&mut fp.hostname, value),
            "arch" => first(&mut fp.arch, value),
            "os" => first(&mut fp.os, value.map(unquote).and_then(non_empty)),
            "kernel" => first(&mut fp.kernel, value),
            "cpu_model" => first(&mut fp.cpu_model, value.map(collapse_whitespace)),
            "cpu_count" => {
                let n = value.and_then(|v| v.parse::<u32>().ok()).filter(|&n| n > 0);
                first(&mut fp.cpu_count, n);
            }
            "mem_total_kib" => {
                let mib = value
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(|kib| kib / 1024)
                    .filter(|&mib| mib > 0);
                first(&mut fp.memory_mib, mib);
            }
            "gpu" => {
                if let Some((gpu, driver)) = value.and_then(parse_gpu_line)
                    && !fp.gpus.iter().any(|g| g.index == gpu.index)
                {
                    if gpu_driver.is_none() {
                        gpu_driver = driver;
                    }
                    fp.gpus.push(gpu);
                }
            }
            "driver" => first(&mut header_driver, value.and_then(not_na)),
            "cuda" => first(&mut fp.cuda_version, value.and_then(not_na)),
            "amd_smi_static" => first(&mut other.amd_smi_static, value),
            "amd_smi_version" => first(&mut other.amd_smi_version, value),
            "rocm_smi_json" => first(&mut other.rocm_smi_json, value),
            "rocm_info_version" => first(&mut other.rocm_info_version, value),
            "xpu" => {
                if let Some(v) = value
                    && other.xpu.len() < 256
                {
                    other.xpu.push(v);
                }
            }
            "drm" => {
                if let Some(card) = value.and_then(accel::parse_drm_line)
                    && other.drm.len() < 64
                    && !other.drm.iter().any(|c| c.card == card.card)
                {
                    other.drm.push(card);
                }
            }
            _ => {
                if let Some(name) = key.strip_prefix("tool.")
                    && is_valid_tool_name(name)
                {
                    // A tool's output is the host's text: credentials it
                    // printed never reach the ledger or the screen.
                    fp.tools.entry(name.to_owned()).or_insert_with(|| {
                        value.map(|v| crate::scrub::scrub_host_text(v, &secrets))
                    });
                }
            }
        }
    }
    fp.gpus.sort_by_key(|g| g.index);
    fp.driver_version = gpu_driver.or(header_driver);
    add_other_vendors(&mut fp, &other);
    fp
}

/// The probe's lines about accelerators other than NVIDIA's, as printed
/// (first occurrence of each key).
#[derive(Default)]
struct OtherVendorLines<'a> {
    /// `amd-smi static … --json`, on one line.
    amd_smi_static: Option<&'a str>,
    /// First line of `amd-smi version`.
    amd_smi_version: Option<&'a str>,
    /// `rocm-smi … --json`, on one line (only when amd-smi failed).
    rocm_smi_json: Option<&'a str>,
    /// First line of the ROCm install's `.info/version`.
    rocm_info_version: Option<&'a str>,
    /// `xpu-smi discovery --dump` CSV lines, header first.
    xpu: Vec<&'a str>,
    /// DRM cards with a vendor id.
    drm: Vec<accel::DrmCard>,
}

/// Adds the AMD and Intel GPUs the tools described (after NVIDIA's), and,
/// when no tool described any GPU, what sysfs shows ([`accel::from_drm`]).
/// The driver version is NVIDIA's when there is one, else AMD's, else
/// Intel's. Output a parser cannot read counts as no description (logged).
fn add_other_vendors(fp: &mut Fingerprint, raw: &OtherVendorLines<'_>) {
    let amd = match (raw.amd_smi_static, raw.rocm_smi_json) {
        (Some(json), _) => Some(accel::parse_amd_smi_static(json)),
        (None, Some(json)) => Some(accel::parse_rocm_smi(json)),
        (None, None) => None,
    };
    let intel = (!raw.xpu.is_empty()).then(|| accel::parse_xpu_smi_dump(&raw.xpu));
    for parsed in [amd, intel].into_iter().flatten() {
        match parsed {
            Ok((gpus, driver)) => {
                if !gpus.is_empty() && fp.driver_version.is_none() {
                    fp.driver_version = driver;
                }
                fp.gpus.extend(gpus);
            }
            Err(e) => tracing::warn!("fingerprint: {e}; its GPUs are left out"),
        }
    }
    if fp.gpus.iter().any(|g| g.vendor == GpuVendor::Amd) {
        fp.rocm_version = raw
            .amd_smi_version
            .and_then(accel::parse_amd_smi_version)
            .or_else(|| raw.rocm_info_version.map(str::to_owned));
    }
    if fp.gpus.is_empty() {
        let (gpus, driver, unknown) = accel::from_drm(&raw.drm);
        if !gpus.is_empty() {
            fp.driver_name = driver;
        }
        fp.gpus = gpus;
        fp.unknown_accelerators = unknown;
    }
}

/// Runs the probe on this machine (`sh -c`, honouring the current `PATH`)
/// and parses its output. Every requested tool appears in
/// [`Fingerprint::tools`], as `None` if it produced nothing usable.
///
/// The probe is killed after [`PROBE_TIMEOUT`] plus [`TOOL_TIMEOUT`] per
/// requested tool.
pub async fn probe_local(
    tools: &BTreeMap<String, String>,
) -> Result<Fingerprint, FingerprintError> {
    probe_local_with_env(tools, &[]).await
}

/// [`probe_local`] with extra environment variables set on the probe shell
/// only (the process environment is left alone), e.g. a `PATH` that puts a
/// fake `nvidia-smi` first.
pub(crate) async fn probe_local_with_env(
    tools: &BTreeMap<String, String>,
    extra_env: &[(String, String)],
) -> Result<Fingerprint, FingerprintError> {
    let script = probe_script(tools)?;
    let n_tools = u32::try_from(tools.len()).unwrap_or(u32::MAX);
    let limit = PROBE_TIMEOUT.saturating_add(TOOL_TIMEOUT.saturating_mul(n_tools));
    let output = run_local_script(&script, extra_env, limit).await?;
    let mut fp = parse_probe_output(&output);
    for name in tools.keys() {
        fp.tools.entry(name.clone()).or_insert(None);
    }
    Ok(fp)
}

/// Runs `script` with `sh -c` and returns its standard output.
async fn run_local_script(
    script: &str,
    extra_env: &[(String, String)],
    limit: Duration,
) -> Result<String, FingerprintError> {
    let started = std::time::Instant::now();
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in extra_env {
        cmd.env(key, value);
    }
    let child = cmd.spawn().map_err(FingerprintError::Spawn)?;
    // On timeout the future is dropped, which drops (and so kills) the shell;
    // every command it started runs under its own timeout and ends soon after.
    let output = match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(result) => result.map_err(FingerprintError::Io)?,
        Err(_) => return Err(FingerprintError::Timeout(limit)),
    };
    tracing::debug!(elapsed = ?started.elapsed(), status = %output.status, "local probe finished");
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(FingerprintError::ProbeFailed {
            status: output.status.to_string(),
            stderr: stderr.chars().take(2000).collect(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// SHA-256 (hex) of the JSON of `value`. Struct fields serialise in
/// declaration order and maps are `BTreeMap`s, so the JSON is canonical.
fn sha256_hex_of_json<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_vec(value)
        .expect("fingerprint types hold only strings, integers, lists and string-keyed maps");
    hex::encode(Sha256::digest(&json))
}

/// Sets `slot` to `value` unless it already holds a value.
fn first<T, U: Into<T>>(slot: &mut Option<T>, value: Option<U>) {
    if slot.is_none() {
        *slot = value.map(Into::into);
    }
}

/// The trimmed value, `None` when blank.
fn non_empty(value: &str) -> Option<&str> {
    let v = value.trim();
    (!v.is_empty()).then_some(v)
}

/// `None` for `nvidia-smi`'s not-available markers.
fn not_na(value: &str) -> Option<&str> {
    let v = value.trim();
    let na = v.is_empty()
        || v.eq_ignore_ascii_case("[N/A]")
        || v.eq_ignore_ascii_case("N/A")
        || v.eq_ignore_ascii_case("[Not Supported]");
    (!na).then_some(v)
}

/// Removes one pair of matching surrounding quotes (os-release style).
fn unquote(value: &str) -> &str {
    let v = value.trim();
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner.trim();
        }
    }
    v
}

/// Collapses runs of whitespace into single spaces.
fn collapse_whitespace(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Parses `index, name, memory.total, driver_version, uuid` (the name may
/// itself contain commas). Returns the GPU and its driver version.
fn parse_gpu_line(line: &str) -> Option<(Gpu, Option<String>)> {
    let (index, rest) = line.split_once(',')?;
    let index = index.trim().parse::<u32>().ok()?;
    let mut tail = rest.rsplitn(4, ',');
    let uuid = tail.next()?;
    let driver = tail.next()?;
    let memory = tail.next()?;
    let name = tail.next()?.trim();
    if name.is_empty() {
        return None;
    }
    let memory_mib = not_na(memory)
        .and_then(|m| m.split_whitespace().next())
        .and_then(|m| m.parse::<u64>().ok());
    let gpu = Gpu {
        index,
        name: name.to_owned(),
        memory_mib,
        uuid: not_na(uuid).map(str::to_owned),
        vendor: GpuVendor::Nvidia,
    };
    Some((gpu, not_na(driver).map(str::to_owned)))
}

#[cfg(test)]
mod tests;
