//! Which facts of a fingerprint define a host class, as a study may steer
//! them (`fingerprint.class_key`).
//!
//! The default key ([`ClassKey::default`]) is the one every class id was
//! made with before studies could choose: GPU models, their memory and count,
//! the driver's major version and the CPU model. A study may widen a class
//! (drop the CPU model: hosts that differ only in CPU share one class and one
//! winner) or narrow it (add the full driver version, the CUDA version, or a
//! tool's version from `fingerprint.tools`: hosts that differ there are
//! measured and decided apart).
//!
//! Under the default key a class id is exactly [`Fingerprint::host_class`],
//! so ledgers and tuned files written before keys existed keep their ids.
//! Under any other key the hashed JSON names the key's fields, so a class
//! id can never be shared by two keys.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

use super::{Fingerprint, driver_major, sha256_hex_of_json};

/// One fact a class key may hold.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClassField {
    /// Every GPU's model name.
    GpuModel,
    /// Every GPU's memory in MiB.
    GpuMemory,
    /// The number of GPUs (without it, two cards of one model read as one).
    GpuCount,
    /// The driver's major version (`550` of `550.54.15`).
    DriverMajor,
    /// The driver's whole version.
    DriverVersion,
    /// The CPU model name.
    CpuModel,
    /// The logical CPUs the probe could use.
    CpuCount,
    /// The CUDA version the driver reports (`12.4`).
    CudaVersion,
    /// Its major part (`12`).
    CudaMajor,
    /// The ROCm version.
    RocmVersion,
    /// `uname -m`.
    Arch,
    /// The OS's `PRETTY_NAME`.
    Os,
    /// The version line of a tool named in `fingerprint.tools`.
    Tool(String),
}

/// Every field name but `tool:<name>`, for messages and docs.
pub const FIELD_NAMES: &[&str] = &[
    "gpu_model",
    "gpu_memory",
    "gpu_count",
    "driver_major",
    "driver_version",
    "cpu_model",
    "cpu_count",
    "cuda_version",
    "cuda_major",
    "rocm_version",
    "arch",
    "os",
];

impl fmt::Display for ClassField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ClassField::GpuModel => "gpu_model",
            ClassField::GpuMemory => "gpu_memory",
            ClassField::GpuCount => "gpu_count",
            ClassField::DriverMajor => "driver_major",
            ClassField::DriverVersion => "driver_version",
            ClassField::CpuModel => "cpu_model",
            ClassField::CpuCount => "cpu_count",
            ClassField::CudaVersion => "cuda_version",
            ClassField::CudaMajor => "cuda_major",
            ClassField::RocmVersion => "rocm_version",
            ClassField::Arch => "arch",
            ClassField::Os => "os",
            ClassField::Tool(name) => return write!(f, "tool:{name}"),
        };
        f.write_str(name)
    }
}

impl FromStr for ClassField {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "gpu_model" => ClassField::GpuModel,
            "gpu_memory" => ClassField::GpuMemory,
            "gpu_count" => ClassField::GpuCount,
            "driver_major" => ClassField::DriverMajor,
            "driver_version" => ClassField::DriverVersion,
            "cpu_model" => ClassField::CpuModel,
            "cpu_count" => ClassField::CpuCount,
            "cuda_version" => ClassField::CudaVersion,
            "cuda_major" => ClassField::CudaMajor,
            "rocm_version" => ClassField::RocmVersion,
            "arch" => ClassField::Arch,
            "os" => ClassField::Os,
            other => match other.strip_prefix("tool:") {
                Some(name) if super::is_valid_tool_name(name) => ClassField::Tool(name.to_owned()),
                Some(name) => {
                    return Err(format!(
                        "`tool:{name}`: tool names use letters, digits, `-` and `_`"
                    ));
                }
                None => {
                    return Err(format!(
                        "unknown class field `{other}` (known: {}, or `tool:<name>` for a tool of `fingerprint.tools`)",
                        FIELD_NAMES.join(", ")
                    ));
                }
            },
        })
    }
}

impl Serialize for ClassField {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ClassField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The facts that define a host class: a set of [`ClassField`]s, kept
/// sorted and without repeats so that equal keys compare and hash equal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ClassKey {
    fields: Vec<ClassField>,
}

impl<'de> Deserialize<'de> for ClassKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ClassKey::new(Vec::<ClassField>::deserialize(d)?))
    }
}

impl Default for ClassKey {
    fn default() -> Self {
        ClassKey::new([
            ClassField::GpuModel,
            ClassField::GpuMemory,
            ClassField::GpuCount,
            ClassField::DriverMajor,
            ClassField::CpuModel,
        ])
    }
}

impl ClassKey {
    /// A key of these fields (order and repeats do not matter).
    pub fn new(fields: impl IntoIterator<Item = ClassField>) -> Self {
        let mut fields: Vec<ClassField> = fields.into_iter().collect();
        fields.sort();
        fields.dedup();
        ClassKey { fields }
    }

    /// Whether this is the key every class was made with before keys could
    /// be chosen (its class ids are [`Fingerprint::host_class`]).
    pub fn is_default(&self) -> bool {
        *self == ClassKey::default()
    }

    pub fn fields(&self) -> &[ClassField] {
        &self.fields
    }

    pub fn has(&self, field: &ClassField) -> bool {
        self.fields.binary_search(field).is_ok()
    }

    /// The tools the key reads (`tool:<name>` fields).
    pub fn tools(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().filter_map(|f| match f {
            ClassField::Tool(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// `gpu_model, gpu_memory, …` for messages.
    pub fn describe(&self) -> String {
        self.fields
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The major part of a CUDA version: `12` of `12.4`.
fn major_of(version: &str) -> Option<String> {
    driver_major(version)
}

impl Fingerprint {
    /// The host class of this host under `key`: [`Fingerprint::host_class`]
    /// for the default key, else `"hc-"` + 12 hex digits of the SHA-256 of
    /// the key's fields and their values. The driver's name and unknown
    /// accelerators always count, whatever the key: without them a host
    /// with an undescribed device would share a class with a GPU-less one.
    pub fn host_class_under(&self, key: &ClassKey) -> String {
        if key.is_default() {
            return self.host_class();
        }
        let base = self.class_key();
        let mut values: BTreeMap<String, Value> = BTreeMap::new();
        let (model, memory, count) = (
            key.has(&ClassField::GpuModel),
            key.has(&ClassField::GpuMemory),
            key.has(&ClassField::GpuCount),
        );
        if model || memory {
            let mut gpus: Vec<Value> = base
                .gpus
                .iter()
                .map(|(name, mib)| match (model, memory) {
                    (true, true) => json!([name, mib]),
                    (true, false) => json!(name),
                    _ => json!(mib),
                })
                .collect();
            if !count {
                // Without the count, a host with two cards of a model and
                // one with a single card of it are the same class.
                gpus.dedup();
            }
            values.insert("gpus".into(), Value::Array(gpus));
        }
        for field in key.fields() {
            let value = match field {
                ClassField::GpuModel | ClassField::GpuMemory => continue,
                ClassField::GpuCount => json!(base.gpu_count),
                ClassField::DriverMajor => json!(base.driver_major),
                ClassField::DriverVersion => json!(self.driver_version),
                ClassField::CpuModel => json!(self.cpu_model),
                ClassField::CpuCount => json!(self.cpu_count),
                ClassField::CudaVersion => json!(self.cuda_version),
                ClassField::CudaMajor => json!(self.cuda_version.as_deref().and_then(major_of)),
                ClassField::RocmVersion => json!(self.rocm_version),
                ClassField::Arch => json!(self.arch),
                ClassField::Os => json!(self.os),
                ClassField::Tool(name) => json!(self.tools.get(name).cloned().flatten()),
            };
            values.insert(field.to_string(), value);
        }
        values.insert("driver_name".into(), json!(base.driver_name));
        values.insert(
            "unknown_accelerators".into(),
            json!(base.unknown_accelerators),
        );
        let hashed = json!({ "class_key": key, "values": values });
        format!("hc-{}", &sha256_hex_of_json(&hashed)[..12])
    }

    /// A one-line summary of the class under `key`: [`Fingerprint::class_label`]
    /// for the default key; otherwise the same words without the facts the
    /// key leaves out (a class that spans CPU models names none) and with
    /// the ones it adds (`driver 550.54.15`, `CUDA 12.x`, `torch 2.3.1`).
    pub fn class_label_under(&self, key: &ClassKey) -> String {
        if key.is_default() {
            return self.class_label();
        }
        let base = self.class_key();
        let mut parts: Vec<String> = Vec::new();
        let (model, memory, count) = (
            key.has(&ClassField::GpuModel),
            key.has(&ClassField::GpuMemory),
            key.has(&ClassField::GpuCount),
        );
        if base.gpus.is_empty() && !self.unknown_accelerators.is_empty() {
            parts.push(self.unknown_label());
        } else if base.gpus.is_empty() {
            parts.push("no GPU".to_owned());
        } else {
            let mut groups: Vec<(String, usize)> = Vec::new();
            for (name, mib) in &base.gpus {
                let word = match (model, memory, mib) {
                    (true, true, Some(mib)) => format!("{name} ({mib} MiB)"),
                    (true, _, _) => name.clone(),
                    (false, true, Some(mib)) => format!("GPU of {mib} MiB"),
                    _ => "GPU".to_owned(),
                };
                match groups.last_mut() {
                    Some((last, n)) if *last == word => *n += 1,
                    _ => groups.push((word, 1)),
                }
            }
            let gpus = groups
                .iter()
                .map(|(word, n)| {
                    if count {
                        format!("{n}× {word}")
                    } else {
                        word.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(" + ");
            parts.push(gpus);
        }
        if key.has(&ClassField::DriverVersion) {
            if let Some(v) = &self.driver_version {
                parts.push(format!("driver {v}"));
            }
        } else if key.has(&ClassField::DriverMajor)
            && let Some(major) = &base.driver_major
        {
            parts.push(format!("driver {major}"));
        }
        if let Some(name) = &base.driver_name {
            parts.push(format!("driver {name}"));
        }
        if key.has(&ClassField::CudaVersion) {
            if let Some(v) = &self.cuda_version {
                parts.push(format!("CUDA {v}"));
            }
        } else if key.has(&ClassField::CudaMajor)
            && let Some(major) = self.cuda_version.as_deref().and_then(major_of)
        {
            parts.push(format!("CUDA {major}.x"));
        }
        if key.has(&ClassField::RocmVersion)
            && let Some(v) = &self.rocm_version
        {
            parts.push(format!("ROCm {v}"));
        }
        let cpu = match (
            key.has(&ClassField::CpuModel),
            key.has(&ClassField::CpuCount),
        ) {
            (true, true) => Some(format!(
                "{} ({} cpus)",
                self.cpu_model.as_deref().unwrap_or("unknown CPU"),
                self.cpu_count.map_or("?".to_owned(), |n| n.to_string())
            )),
            (true, false) => Some(
                self.cpu_model
                    .clone()
                    .unwrap_or_else(|| "unknown CPU".to_owned()),
            ),
            (false, true) => Some(format!(
                "{} cpus",
                self.cpu_count.map_or("?".to_owned(), |n| n.to_string())
            )),
            (false, false) => None,
        };
        parts.extend(cpu);
        if key.has(&ClassField::Arch) {
            parts.push(self.arch.clone().unwrap_or_else(|| "unknown arch".into()));
        }
        if key.has(&ClassField::Os) {
            parts.push(self.os.clone().unwrap_or_else(|| "unknown OS".into()));
        }
        for tool in key.tools() {
            match self.tools.get(tool).cloned().flatten() {
                Some(v) => parts.push(format!("{tool} {v}")),
                None => parts.push(format!("{tool} unknown")),
            }
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Gpu;

    fn h100(driver: &str, cuda: &str, cpu: &str, gpus: usize) -> Fingerprint {
        Fingerprint {
            hostname: Some("gpu01".into()),
            cpu_model: Some(cpu.into()),
            cpu_count: Some(64),
            gpus: (0..gpus)
                .map(|i| Gpu {
                    index: u32::try_from(i).unwrap(),
                    name: "NVIDIA H100 80GB HBM3".into(),
                    memory_mib: Some(81559),
                    uuid: None,
                    vendor: crate::fingerprint::GpuVendor::default(),
                })
                .collect(),
            driver_version: Some(driver.into()),
            cuda_version: Some(cuda.into()),
            ..Fingerprint::default()
        }
    }

    fn key(fields: &[&str]) -> ClassKey {
        ClassKey::new(fields.iter().map(|f| f.parse::<ClassField>().unwrap()))
    }

    #[test]
    fn the_default_key_keeps_every_class_id_and_label() {
        let fp = h100("550.54.15", "12.4", "Xeon", 2);
        let default = key(&[
            "cpu_model",
            "gpu_count",
            "driver_major",
            "gpu_memory",
            "gpu_model",
        ]);
        assert!(default.is_default());
        assert_eq!(fp.host_class_under(&default), fp.host_class());
        assert_eq!(fp.class_label_under(&default), fp.class_label());
        // The same facts under a key that only looks alike are another id.
        let wider = key(&["gpu_model", "gpu_memory", "gpu_count", "driver_major"]);
        assert_ne!(fp.host_class_under(&wider), fp.host_class());
    }

    #[test]
    fn dropping_a_field_merges_hosts_that_differ_only_there() {
        let a = h100("550.54.15", "12.4", "Xeon", 2);
        let b = h100("550.54.15", "12.4", "EPYC", 2);
        assert_ne!(a.host_class(), b.host_class());
        let no_cpu = key(&["gpu_model", "gpu_memory", "gpu_count", "driver_major"]);
        assert_eq!(a.host_class_under(&no_cpu), b.host_class_under(&no_cpu));
        assert_eq!(
            a.class_label_under(&no_cpu),
            "2× NVIDIA H100 80GB HBM3 (81559 MiB), driver 550"
        );
        // Still apart on what the key keeps.
        let one_gpu = h100("550.54.15", "12.4", "Xeon", 1);
        assert_ne!(
            a.host_class_under(&no_cpu),
            one_gpu.host_class_under(&no_cpu)
        );
        let any_count = key(&["gpu_model", "gpu_memory", "driver_major"]);
        assert_eq!(
            a.host_class_under(&any_count),
            one_gpu.host_class_under(&any_count)
        );
        assert_eq!(
            a.class_label_under(&any_count),
            "NVIDIA H100 80GB HBM3 (81559 MiB), driver 550"
        );
    }

    #[test]
    fn adding_a_field_splits_hosts_that_differ_there() {
        let a = h100("550.54.15", "12.4", "Xeon", 2);
        let minor = h100("550.90.07", "12.4", "Xeon", 2);
        let cuda = h100("550.54.15", "12.6", "Xeon", 2);
        let cuda13 = h100("550.54.15", "13.0", "Xeon", 2);
        assert_eq!(a.host_class(), minor.host_class());
        let mut with_driver = ClassKey::default().fields().to_vec();
        with_driver.push(ClassField::DriverVersion);
        let with_driver = ClassKey::new(with_driver);
        assert_ne!(
            a.host_class_under(&with_driver),
            minor.host_class_under(&with_driver)
        );
        assert!(
            a.class_label_under(&with_driver)
                .contains("driver 550.54.15"),
            "{}",
            a.class_label_under(&with_driver)
        );
        let with_cuda_major = key(&["gpu_model", "cuda_major"]);
        assert_eq!(
            a.host_class_under(&with_cuda_major),
            cuda.host_class_under(&with_cuda_major)
        );
        assert_ne!(
            a.host_class_under(&with_cuda_major),
            cuda13.host_class_under(&with_cuda_major)
        );
        assert_eq!(
            cuda13.class_label_under(&with_cuda_major),
            "NVIDIA H100 80GB HBM3, CUDA 13.x"
        );
    }

    #[test]
    fn a_tool_version_splits_classes_and_a_missing_one_is_its_own() {
        let mut a = h100("550.54.15", "12.4", "Xeon", 2);
        let mut b = a.clone();
        let mut c = a.clone();
        a.tools.insert("torch".into(), Some("2.3.1".into()));
        b.tools.insert("torch".into(), Some("2.4.0".into()));
        c.tools.insert("torch".into(), None);
        let k = key(&["gpu_model", "tool:torch"]);
        let ids = [&a, &b, &c].map(|f| f.host_class_under(&k));
        assert_ne!(ids[0], ids[1]);
        assert_ne!(ids[0], ids[2]);
        assert_ne!(ids[1], ids[2]);
        assert_eq!(
            a.class_label_under(&k),
            "NVIDIA H100 80GB HBM3, torch 2.3.1"
        );
        assert_eq!(
            c.class_label_under(&k),
            "NVIDIA H100 80GB HBM3, torch unknown"
        );
    }

    #[test]
    fn an_unknown_accelerator_never_joins_the_gpu_less_class() {
        let mut odd = Fingerprint {
            cpu_model: Some("Xeon".into()),
            ..Fingerprint::default()
        };
        odd.unknown_accelerators
            .push(crate::fingerprint::UnknownAccelerator {
                vendor_id: "0x1234".into(),
                device_id: Some("0x11e8".into()),
                driver: None,
            });
        let plain = Fingerprint {
            cpu_model: Some("Xeon".into()),
            ..Fingerprint::default()
        };
        let k = key(&["cpu_model"]);
        assert_ne!(odd.host_class_under(&k), plain.host_class_under(&k));
    }

    #[test]
    fn fields_read_and_write_by_name() {
        for name in FIELD_NAMES.iter().copied().chain(["tool:nvcc"]) {
            let f: ClassField = name.parse().unwrap();
            assert_eq!(f.to_string(), name);
        }
        let e = "gpu".parse::<ClassField>().unwrap_err();
        assert!(e.contains("unknown class field `gpu`"), "{e}");
        assert!(e.contains("gpu_model"), "{e}");
        assert!("tool:a b".parse::<ClassField>().is_err());
        let k = key(&["tool:torch", "gpu_model", "gpu_model"]);
        assert_eq!(
            serde_json::to_string(&k).unwrap(),
            r#"["gpu_model","tool:torch"]"#
        );
        let back: ClassKey = serde_json::from_str(r#"["tool:torch","gpu_model"]"#).unwrap();
        assert_eq!(back, k);
    }
}
