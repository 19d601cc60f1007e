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

use crate::spec::shell::single_quote;

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
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// The fake `nvidia-smi` fixture, embedded so that the tests find it
    /// wherever the crate is built.
    const FAKE_NVIDIA_SMI: &str = include_str!("../tests/fixtures/fake-nvidia-smi");
    /// The FAKE `amd-smi`, `rocm-smi` and `xpu-smi` fixtures.
    const FAKE_AMD_SMI: &str = include_str!("../tests/fixtures/fake-amd-smi");
    const FAKE_ROCM_SMI: &str = include_str!("../tests/fixtures/fake-rocm-smi");
    const FAKE_XPU_SMI: &str = include_str!("../tests/fixtures/fake-xpu-smi");

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
}
