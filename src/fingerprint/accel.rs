//! Accelerators other than NVIDIA's: parsers for what the probe prints about
//! AMD GPUs (`amd-smi`, else `rocm-smi`), Intel GPUs (`xpu-smi`, else sysfs)
//! and DRM devices no tool describes (the *unknown accelerators*).
//!
//! The probe only prints raw tool output (JSON joined onto one line, CSV
//! lines, `drm=` lines); everything is decided here, launcher-side, so that
//! the remote side needs nothing but a POSIX shell. Every parser is total:
//! output it cannot read is an [`AccelError`] that
//! [`super::parse_probe_output`] logs and treats as "the tool described
//! nothing" (then the sysfs devices speak for the host), never a panic and
//! never a guessed value.
//!
//! Where the layouts come from: amd-smi's CLI guide and the `static --json`
//! outputs published with ROCm 6.x (a bare list in earlier releases,
//! `{"gpu_data": [...]}` in later ones), rocm-smi's `--json` output (one object per
//! `cardN`, the driver under `system`), and the property list of
//! `xpu-smi discovery --dump` in xpu-smi's user guide. The FAKE tools in
//! `tests/fixtures` answer in the same layouts.

use serde_json::Value;

use super::{Gpu, GpuVendor, UnknownAccelerator};

/// The most bytes of one tool's output that are parsed. The probe already
/// cuts each output at 256 KiB; this bounds what a hostile host could send.
pub const MAX_TOOL_OUTPUT: usize = 1 << 20;

/// PCI vendor ids, as sysfs writes them.
pub const VENDOR_NVIDIA: &str = "0x10de";
/// AMD (ATI).
pub const VENDOR_AMD: &str = "0x1002";
/// Intel.
pub const VENDOR_INTEL: &str = "0x8086";

/// Kernel drivers of display-only devices (server BMC consoles, virtual
/// machine screens, framebuffers): a DRM card bound to one of these is not
/// an accelerator. Without this list every server with an ASPEED or Matrox
/// BMC console, and every VM, would look like it had an unknown accelerator.
pub const DISPLAY_ONLY_DRIVERS: &[&str] = &[
    "ast",
    "mgag200",
    "bochs",
    "bochs-drm",
    "cirrus",
    "cirrus-qemu",
    "qxl",
    "vmwgfx",
    "virtio_gpu",
    "virtio-pci",
    "hyperv_drm",
    "hyperv_fb",
    "vboxvideo",
    "simpledrm",
    "simple-framebuffer",
    "efifb",
    "udl",
    "xen-drmfront",
];

/// Why a tool's output could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccelError {
    /// Longer than [`MAX_TOOL_OUTPUT`].
    #[error("{tool}: output longer than {MAX_TOOL_OUTPUT} bytes")]
    TooLong {
        /// The tool.
        tool: &'static str,
    },
    /// Not JSON, or not the expected shape.
    #[error("{tool}: unexpected output: {why}")]
    Malformed {
        /// The tool.
        tool: &'static str,
        /// What was wrong.
        why: String,
    },
}

fn malformed(tool: &'static str, why: impl Into<String>) -> AccelError {
    AccelError::Malformed {
        tool,
        why: why.into(),
    }
}

/// The first JSON value in `text` (anything before its first `{` or `[`,
/// such as a warning line, and anything after it is ignored).
fn first_json(tool: &'static str, text: &str) -> Result<Value, AccelError> {
    if text.len() > MAX_TOOL_OUTPUT {
        return Err(AccelError::TooLong { tool });
    }
    let start = text
        .find(['{', '['])
        .ok_or_else(|| malformed(tool, "no JSON document"))?;
    let rest = text.get(start..).unwrap_or_default();
    match serde_json::Deserializer::from_str(rest)
        .into_iter::<Value>()
        .next()
    {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(malformed(tool, format!("invalid JSON: {e}"))),
        None => Err(malformed(tool, "no JSON document")),
    }
}

/// A string field that is present and not one of the tools' "not
/// available" markers (`N/A`, empty).
fn text_field(v: Option<&Value>) -> Option<String> {
    let s = v?.as_str()?.trim();
    let na = s.is_empty() || s.eq_ignore_ascii_case("N/A") || s.eq_ignore_ascii_case("unknown");
    (!na).then(|| s.to_owned())
}

/// MiB from a number and a unit as the AMD tools write them. `amd-smi`'s
/// `MB` are MiB (an MI300X's 192 GiB shows as `196592 MB`).
fn mib_from(value: f64, unit: &str) -> Option<u64> {
    let factor = match unit.trim().to_ascii_uppercase().as_str() {
        "B" => 1.0 / (1024.0 * 1024.0),
        "KB" | "KIB" => 1.0 / 1024.0,
        "MB" | "MIB" | "" => 1.0,
        "GB" | "GIB" => 1024.0,
        _ => return None,
    };
    let mib = (value * factor).floor();
    // Truncation is intended: whole MiB, and the range is checked first.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    (mib.is_finite() && mib > 0.0 && mib < 1e15).then_some(mib as u64)
}

/// `amd-smi`'s VRAM size: `{"value": 65520, "unit": "MB"}` (ROCm 6.1 on),
/// or a string `"65520 MB"` (earlier releases), or a bare number of MB.
fn amd_smi_vram_mib(size: Option<&Value>) -> Option<u64> {
    match size? {
        Value::Object(o) => {
            let value = o.get("value")?;
            let n = value
                .as_f64()
                .or_else(|| value.as_str().and_then(|s| s.trim().parse().ok()))?;
            mib_from(n, o.get("unit").and_then(Value::as_str).unwrap_or("MB"))
        }
        Value::String(s) => {
            let mut words = s.split_whitespace();
            let n: f64 = words.next()?.parse().ok()?;
            mib_from(n, words.next().unwrap_or("MB"))
        }
        Value::Number(n) => mib_from(n.as_f64()?, "MB"),
        _ => None,
    }
}

/// Parses `amd-smi static --asic --vram --driver --json`: the GPUs and the
/// driver version the first of them reports.
///
/// The layout is amd-smi's (ROCm 6.x): a list with one object per GPU, or
/// (newer releases) that list under `"gpu_data"`; per GPU `gpu` (index),
/// `asic.market_name` (e.g. `AMD Instinct MI300X`), `asic.device_id`,
/// `vram.size` (an object of `value` and `unit`, or older releases' string
/// `"65520 MB"`) and `driver.version` (e.g.
/// `6.8.5`). A GPU without a market name is named by its device id
/// (`AMD device 0x74a1`); one without either is left out.
pub fn parse_amd_smi_static(text: &str) -> Result<(Vec<Gpu>, Option<String>), AccelError> {
    const TOOL: &str = "amd-smi static";
    let doc = first_json(TOOL, text)?;
    let list = match &doc {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("gpu_data") {
            Some(Value::Array(a)) => a,
            _ => return Err(malformed(TOOL, "no list of GPUs (gpu_data)")),
        },
        _ => return Err(malformed(TOOL, "neither a list nor an object")),
    };
    let mut gpus = Vec::new();
    let mut driver = None;
    for (pos, entry) in list.iter().enumerate() {
        let Some(obj) = entry.as_object() else {
            continue;
        };
        let index = obj
            .get("gpu")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
            .or_else(|| u32::try_from(pos).ok());
        let asic = obj.get("asic");
        let name = text_field(asic.and_then(|a| a.get("market_name"))).or_else(|| {
            text_field(asic.and_then(|a| a.get("device_id"))).map(|d| format!("AMD device {d}"))
        });
        let (Some(index), Some(name)) = (index, name) else {
            continue;
        };
        if gpus.iter().any(|g: &Gpu| g.index == index) {
            continue;
        }
        if driver.is_none() {
            driver = text_field(obj.get("driver").and_then(|d| d.get("version")));
        }
        gpus.push(Gpu {
            index,
            name,
            memory_mib: amd_smi_vram_mib(obj.get("vram").and_then(|v| v.get("size"))),
            uuid: None,
            vendor: GpuVendor::Amd,
        });
    }
    gpus.sort_by_key(|g| g.index);
    Ok((gpus, driver))
}

/// The ROCm version in the first line of `amd-smi version`, e.g.
/// `AMDSMI Tool: 24.6.2+2b02a07 | AMDSMI Library version: 24.6.2.0 |
/// ROCm version: 6.2.0` → `6.2.0`. `None` when it says none (or `N/A`).
pub fn parse_amd_smi_version(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("ROCm version:")?;
    let version = rest.split('|').next()?.trim();
    let na = version.is_empty() || version.eq_ignore_ascii_case("N/A");
    (!na).then(|| version.to_owned())
}

/// Parses `rocm-smi --showproductname --showmeminfo vram
/// --showdriverversion --json`: the GPUs and the driver version.
///
/// rocm-smi's layout: one object per card under `card0`, `card1`, … with
/// `Card series` (the product name, e.g. `AMD Instinct MI210`), `Card
/// model` (the device id) and `VRAM Total Memory (B)` (bytes, as a string),
/// and the driver under `system` → `Driver version` (some releases repeat
/// it per card). A card without a series is named by its model
/// (`AMD device 0x740f`); one without either is left out.
pub fn parse_rocm_smi(text: &str) -> Result<(Vec<Gpu>, Option<String>), AccelError> {
    const TOOL: &str = "rocm-smi";
    let doc = first_json(TOOL, text)?;
    let Some(obj) = doc.as_object() else {
        return Err(malformed(TOOL, "not an object of cards"));
    };
    let mut driver = text_field(obj.get("system").and_then(|s| s.get("Driver version")));
    let mut gpus = Vec::new();
    for (key, card) in obj {
        let Some(index) = key.strip_prefix("card").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let name = text_field(card.get("Card series"))
            .or_else(|| text_field(card.get("Card model")).map(|m| format!("AMD device {m}")));
        let Some(name) = name else {
            continue;
        };
        if driver.is_none() {
            driver = text_field(card.get("Driver version"));
        }
        let memory_mib = text_field(card.get("VRAM Total Memory (B)"))
            .and_then(|b| b.parse::<u64>().ok())
            .map(|b| b / (1024 * 1024))
            .filter(|&m| m > 0);
        gpus.push(Gpu {
            index,
            name,
            memory_mib,
            uuid: None,
            vendor: GpuVendor::Amd,
        });
    }
    gpus.sort_by_key(|g| g.index);
    Ok((gpus, driver))
}

/// Splits one CSV line (fields may be double-quoted, `""` inside quotes is
/// a quote).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.trim_end_matches(['\r', '\n']).chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field).trim().to_owned()),
            _ => field.push(c),
        }
    }
    fields.push(field.trim().to_owned());
    fields
}

/// Parses `xpu-smi discovery --dump 1,2,8,16` (CSV: a header naming the
/// columns, then one line per device): the GPUs and the first driver
/// version. The columns are found by their header names (`Device ID`,
/// `Device Name`, `Driver Version`, `Memory Physical Size`, as xpu-smi's
/// user guide lists them), memory as `65536.00 MiB`.
pub fn parse_xpu_smi_dump(lines: &[&str]) -> Result<(Vec<Gpu>, Option<String>), AccelError> {
    const TOOL: &str = "xpu-smi discovery --dump";
    let mut lines = lines.iter().filter(|l| !l.trim().is_empty());
    let header = csv_fields(lines.next().ok_or_else(|| malformed(TOOL, "no output"))?);
    let col = |name: &str| header.iter().position(|h| h.eq_ignore_ascii_case(name));
    let (Some(id_col), Some(name_col)) = (col("Device ID"), col("Device Name")) else {
        return Err(malformed(TOOL, "no Device ID and Device Name columns"));
    };
    let (driver_col, memory_col) = (col("Driver Version"), col("Memory Physical Size"));
    let mut gpus = Vec::new();
    let mut driver = None;
    for line in lines {
        let fields = csv_fields(line);
        let get = |i: Option<usize>| {
            i.and_then(|i| fields.get(i))
                .map(String::as_str)
                .and_then(|s| text_field(Some(&Value::String(s.to_owned()))))
        };
        let index = get(Some(id_col)).and_then(|i| i.parse::<u32>().ok());
        let (Some(index), Some(name)) = (index, get(Some(name_col))) else {
            continue;
        };
        if gpus.iter().any(|g: &Gpu| g.index == index) {
            continue;
        }
        if driver.is_none() {
            driver = get(driver_col);
        }
        let memory_mib = get(memory_col).and_then(|m| {
            let mut words = m.split_whitespace();
            let n: f64 = words.next()?.parse().ok()?;
            mib_from(n, words.next().unwrap_or("MiB"))
        });
        gpus.push(Gpu {
            index,
            name,
            memory_mib,
            uuid: None,
            vendor: GpuVendor::Intel,
        });
    }
    gpus.sort_by_key(|g| g.index);
    Ok((gpus, driver))
}

/// One `drm=<card> <vendor> <device> <driver>` line of the probe: a DRM card
/// with a PCI vendor id (`-` for what could not be read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmCard {
    /// The card's number (`card3` → 3).
    pub card: u32,
    /// PCI vendor id, lower case, e.g. `0x8086`.
    pub vendor: String,
    /// PCI device id, lower case, e.g. `0x56c0`.
    pub device: Option<String>,
    /// The kernel driver's name, e.g. `i915`, `xe`, `amdgpu`.
    pub driver: Option<String>,
}

/// A PCI id as sysfs writes it (`0x` and four hex digits), lower-cased.
fn pci_id(word: &str) -> Option<String> {
    let hex = word.strip_prefix("0x")?;
    (hex.len() == 4 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| word.to_ascii_lowercase())
}

/// A driver name: `[A-Za-z0-9_.-]+`, at most 64 bytes.
fn driver_name(word: &str) -> Option<String> {
    let ok = !word.is_empty()
        && word.len() <= 64
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    (ok && word != "-").then(|| word.to_owned())
}

/// Parses the value of a `drm=` line; `None` unless it names a card and a
/// readable vendor id.
pub fn parse_drm_line(value: &str) -> Option<DrmCard> {
    let mut words = value.split_whitespace();
    let card = words.next()?.strip_prefix("card")?.parse::<u32>().ok()?;
    let vendor = pci_id(words.next()?)?;
    let device = words.next().and_then(pci_id);
    let driver = words.next().and_then(driver_name);
    Some(DrmCard {
        card,
        vendor,
        device,
        driver,
    })
}

/// What the DRM cards say about a host whose tools described no GPU:
/// Intel cards as GPUs (named by device id, `Intel GPU 0x56c0`; no memory
/// or version is read from sysfs) with their driver's name, and every other
/// card, other than NVIDIA's and display-only ones, as an unknown
/// accelerator.
///
/// NVIDIA cards are left to `nvidia-smi` alone, exactly as before sysfs was
/// read, so that no existing NVIDIA or GPU-less host changes class (a job
/// or container without GPUs still sees the node's cards in `/sys`).
pub fn from_drm(cards: &[DrmCard]) -> (Vec<Gpu>, Option<String>, Vec<UnknownAccelerator>) {
    let mut gpus = Vec::new();
    let mut driver = None;
    let mut unknown = Vec::new();
    for card in cards {
        let display_only = card
            .driver
            .as_deref()
            .is_some_and(|d| DISPLAY_ONLY_DRIVERS.contains(&d));
        if display_only || card.vendor == VENDOR_NVIDIA {
            continue;
        }
        if card.vendor == VENDOR_INTEL {
            if driver.is_none() {
                driver.clone_from(&card.driver);
            }
            gpus.push(Gpu {
                index: card.card,
                name: match &card.device {
                    Some(d) => format!("Intel GPU {d}"),
                    None => "Intel GPU".to_owned(),
                },
                memory_mib: None,
                uuid: None,
                vendor: GpuVendor::Intel,
            });
        } else {
            unknown.push(UnknownAccelerator {
                vendor_id: card.vendor.clone(),
                device_id: card.device.clone(),
                driver: card.driver.clone(),
            });
        }
    }
    gpus.sort_by_key(|g| g.index);
    (gpus, driver, unknown)
}

#[cfg(test)]
mod tests;
