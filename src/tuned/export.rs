//! Export: the tuned file of one host class, built from a study's
//! analysis (its ledger, judged into verdicts), as `tunectl export`
//! writes it.

use serde_json::Value as Json;

use super::{SCHEMA, TunedLevel, short, text_map};
use crate::decide::{Analysis, BucketReport, ClassReport, ConfigReport};
use crate::fingerprint::Fingerprint;
use crate::yaml_out::{self, Yaml};

/// Lowercase `[a-z0-9-]` words of `s`, joined by single dashes.
fn slugify(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// The first words of a CPU model that tell it apart: no trademarks,
/// clock speed or filler (`Intel(R) Xeon(R) Platinum 8480+ @ 2.0GHz` →
/// `intel-xeon-platinum-8480`).
fn cpu_words(model: &str) -> String {
    let model = model.split('@').next().unwrap_or(model);
    let slug = slugify(model);
    let mut words: Vec<&str> = Vec::new();
    for w in slug.split('-') {
        match w {
            "r" | "tm" | "processor" | "cpu" | "with" | "graphics" | "radeon" | "" => {}
            // `64-Core`: the core count is not part of the model's name.
            "core" => {
                if words
                    .last()
                    .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
                {
                    words.pop();
                }
            }
            w => words.push(w),
        }
    }
    words.truncate(4);
    words.join("-")
}

/// A readable, unique file stem for a host class: what the class is, then
/// its id, e.g. `2x-nvidia-h100-80gb-hbm3-drv550-hc-0123456789ab` or
/// `no-gpu-amd-epyc-7b13-2cpu-hc-68fa00c4deaa`.
pub fn slug(host_class: &str, fingerprint: Option<&Fingerprint>) -> String {
    let mut parts: Vec<String> = Vec::new();
    match fingerprint {
        None => parts.push("unknown".to_string()),
        Some(fp) => {
            let key = fp.class_key();
            if key.gpus.is_empty() && !key.unknown_accelerators.is_empty() {
                // Never `no-gpu`: the host has a device no tool described.
                for id in &key.unknown_accelerators {
                    parts.push(format!("unknown-accel-{}", id.replace(':', "-")));
                }
            } else if key.gpus.is_empty() {
                parts.push("no-gpu".to_string());
                if let Some(model) = &key.cpu_model {
                    parts.push(cpu_words(model));
                }
                if let Some(n) = fp.cpu_count {
                    parts.push(format!("{n}cpu"));
                }
            } else {
                let mut groups: Vec<(&str, usize)> = Vec::new();
                for (name, _) in &key.gpus {
                    match groups.last_mut() {
                        Some((last, n)) if *last == name.as_str() => *n += 1,
                        _ => groups.push((name, 1)),
                    }
                }
                for (name, n) in groups {
                    parts.push(format!("{n}x-{}", slugify(name)));
                }
                if let Some(major) = &key.driver_major {
                    parts.push(format!("drv{major}"));
                }
            }
        }
    }
    let mut prefix = slugify(&parts.join("-"));
    // Keep names manageable; the class id makes them unique anyway.
    if prefix.len() > 60 {
        prefix.truncate(60);
        if let Some(cut) = prefix.rfind('-') {
            prefix.truncate(cut);
        }
    }
    let id = slugify(host_class);
    if prefix.is_empty() {
        id
    } else {
        format!("{prefix}-{id}")
    }
}

/// Whether a bucket has no decision to ship yet: no cell of the bucket
/// has a baseline that was measured (or that failed, which settles it).
pub fn is_pending(b: &BucketReport) -> bool {
    b.per_cell.iter().all(|c| {
        c.baseline
            .as_ref()
            .is_none_or(|r| r.summary.is_none() && r.rejection.is_none())
    })
}

fn measured(r: &ConfigReport, unit: &str) -> Yaml {
    let s = r.summary;
    Yaml::map()
        .with("config", &r.label)
        .with("median", s.map(|s| s.median))
        .with(
            "spread",
            s.filter(|_| r.relative_spread.is_some()).map(|s| s.spread),
        )
        .with("relative_spread", r.relative_spread)
        .with("n", s.map(|s| s.n))
        .with("unit", unit)
        .with("trials", r.trials)
        .with("speedup", r.speedup)
}

fn bucket_yaml(analysis: &Analysis, b: &BucketReport) -> Yaml {
    let pending = is_pending(b);
    let unit = analysis.objective.unit.as_str();
    let (knobs, winner) = if pending {
        (Yaml::from(&analysis.baseline), None)
    } else {
        (Yaml::from(&b.config), b.winner.as_ref())
    };
    let cells: Vec<Yaml> = b
        .per_cell
        .iter()
        .map(|c| {
            Yaml::map()
                .with("cell", &c.cell_label)
                .with("baseline", c.baseline.as_ref().map(|r| measured(r, unit)))
                .with(
                    "winner",
                    c.winner
                        .as_ref()
                        .filter(|_| !pending)
                        .map(|r| measured(r, unit)),
                )
        })
        .collect();
    let rejected: Vec<Yaml> = b
        .rejected
        .iter()
        .map(|r| {
            let rej = r.rejection.as_ref();
            Yaml::map()
                .with("config", &r.label)
                .with("class", rej.map(|x| x.class.as_str()))
                .with("detail", rej.map(|x| x.detail.as_str()))
        })
        .collect();
    let refusals: Vec<Yaml> = b
        .refusals
        .iter()
        .map(|r| {
            Yaml::map()
                .with("config", &r.config_label)
                .with("cell", &r.cell_label)
                .with("speedup", r.speedup)
                .with("reason", r.reason.to_string())
        })
        .collect();
    let confirmation = winner.and_then(|w| w.confirmation.as_ref()).map(|c| {
        Yaml::map()
            .with("speedup", c.speedup)
            .with("threshold", c.threshold)
            .with("confirmed", c.confirmed)
    });
    let mut y = Yaml::map()
        .with("key", &b.key)
        .with("label", &b.label)
        .with("bounds", &b.bounds)
        .with("knobs", knobs)
        .with("winner", winner.map(|w| w.label.as_str()))
        .with(
            "level",
            if pending {
                TunedLevel::Pending
            } else {
                TunedLevel::from(b.level)
            }
            .as_str(),
        )
        .with("level_reason", b.level_reason.to_string())
        .with("decision", b.decision.to_string())
        .with("speedup", winner.map(|w| w.speedup))
        .with("min_cell_speedup", winner.map(|w| w.min_cell_speedup))
        .with("threshold", b.threshold);
    if let Some(c) = confirmation {
        y.insert("confirmation", c);
    }
    y.with("cells", cells)
        .with("rejected", rejected)
        .with("refusals", refusals)
}

/// The tuned file for one host class of an analysis: the file name (no
/// directory) and its text.
pub fn export(analysis: &Analysis, class: &ClassReport) -> (String, String) {
    let fp = class.fingerprint.as_ref();
    let key = fp.map(Fingerprint::class_key);
    let mut fingerprint = Yaml::map()
        .with(
            "gpus",
            key.as_ref()
                .map(|k| {
                    k.gpus
                        .iter()
                        .map(|(name, mem)| Yaml::map().with("name", name).with("memory_mib", *mem))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
        .with("gpu_count", key.as_ref().map(|k| k.gpu_count))
        .with(
            "driver_major",
            key.as_ref().and_then(|k| k.driver_major.clone()),
        )
        .with("cpu_model", key.as_ref().and_then(|k| k.cpu_model.clone()));
    // Only where the class key has them, as in the key itself: tuned files
    // of NVIDIA and GPU-less classes read as they always did.
    if let Some(name) = key.as_ref().and_then(|k| k.driver_name.clone()) {
        fingerprint.insert("driver_name", name);
    }
    if let Some(k) = key.as_ref().filter(|k| !k.unknown_accelerators.is_empty()) {
        let ids: Vec<Yaml> = k.unknown_accelerators.iter().map(Yaml::from).collect();
        fingerprint.insert("unknown_accelerators", Yaml::List(ids));
    }
    fingerprint.insert("fingerprint_hash", fp.map(Fingerprint::hash));
    let body = Yaml::map()
        .with("schema", SCHEMA)
        .with("tunectl_version", &analysis.tunectl_version)
        .with("study", &analysis.study_id)
        .with("spec_hash", &analysis.spec_hash)
        .with("host_class", &class.host_class)
        .with("class_label", &class.label);
    // Only for a study that chose its class key: files of other studies
    // read as they always did.
    let body = match &analysis.class_key {
        Some(fields) => body.with(
            "class_key",
            Yaml::map()
                .with("fields", fields.clone())
                .with("tools", text_map(&analysis.class_tools)),
        ),
        None => body,
    };
    let body = body
        .with("hosts", class.hosts.clone())
        .with("fingerprint", fingerprint)
        .with(
            "objective",
            Yaml::map()
                .with("name", &analysis.objective.name)
                .with("unit", &analysis.objective.unit)
                .with("better", analysis.objective.better.name()),
        )
        .with("statistic", &analysis.statistic)
        .with("context", text_map(&analysis.context))
        .with("baseline", &analysis.baseline)
        .with(
            "judging",
            serde_json::to_value(&analysis.judging).unwrap_or_default(),
        )
        .with(
            "domains",
            Yaml::Map(
                analysis
                    .domains
                    .iter()
                    .map(|(k, d)| (k.clone(), Yaml::from(compact_domain(d))))
                    .collect(),
            ),
        )
        .with(
            "buckets",
            class
                .buckets
                .iter()
                .map(|b| bucket_yaml(analysis, b))
                .collect::<Vec<_>>(),
        );
    let header = format!(
        "tunectl tuned configuration: the knob settings that ship, per bucket of cells,\n\
         for study `{}` (spec {}) on host class {} ({}).\n\
         It applies ONLY on a host whose fingerprint matches that class: `tunectl apply`\n\
         checks, and on any other host uses the study's defaults (`baseline`).\n\
         Written by tunectl {} (`tunectl export`); re-export rather than edit.",
        analysis.study_id,
        short(&analysis.spec_hash),
        class.host_class,
        class.label,
        analysis.tunectl_version,
    );
    (
        format!("{}.yaml", slug(&class.host_class, fp)),
        yaml_out::document(&header, &body),
    )
}

/// Integer domains longer than this that are evenly spaced are written as
/// `min`, `max`, `step`.
const LIST_INTS: usize = 16;
/// Float domains longer than this are written as their range.
const LIST_FLOATS: usize = 1000;

/// A knob's domain as the tuned file writes it: `{kind, values}`, an even
/// integer range as `{kind, min, max, step}`, a long float grid as
/// `{kind, min, max}` (then `apply` checks the range only).
fn compact_domain(d: &Json) -> Json {
    let kind = d["kind"].clone();
    let values = d["values"].as_array().cloned().unwrap_or_default();
    if kind == "int" && values.len() > LIST_INTS {
        let ints: Vec<i64> = values.iter().filter_map(Json::as_i64).collect();
        if ints.len() == values.len() {
            let step = ints[1] - ints[0];
            if step >= 1 && ints.windows(2).all(|w| w[1] - w[0] == step) {
                return serde_json::json!({"kind": kind, "min": ints[0], "max": ints[ints.len() - 1], "step": step});
            }
        }
    }
    if kind == "float" && values.len() > LIST_FLOATS {
        let xs: Vec<f64> = values.iter().filter_map(Json::as_f64).collect();
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        return serde_json::json!({"kind": kind, "min": min, "max": max});
    }
    serde_json::json!({"kind": kind, "values": values})
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use serde_json::json;

    use super::*;
    use crate::tuned::format::domain_contains;
    use crate::tuned::tests::{analysis, exported, h100};
    use crate::tuned::{check_domains, node_to_json, parse};

    /// A class of unknown accelerators says so in its tuned file, which
    /// still parses back.
    #[test]
    fn export_names_unknown_accelerators() {
        let mut a = analysis();
        let odd = Fingerprint {
            cpu_model: Some("AMD EPYC 7B13".into()),
            unknown_accelerators: vec![crate::fingerprint::UnknownAccelerator {
                vendor_id: "0x1234".into(),
                device_id: Some("0x11e8".into()),
                driver: Some("weirdaccel".into()),
            }],
            ..Fingerprint::default()
        };
        a.classes[0].fingerprint = Some(odd.clone());
        let (name, text) = export(&a, &a.classes[0]);
        parse(Path::new(&name), &text).expect("parses back");
        let node = crate::spec::yaml::parse_text(Path::new(&name), &text).expect("yaml");
        let json = node_to_json(&node);
        assert_eq!(
            json["fingerprint"]["unknown_accelerators"],
            json!(["0x1234:0x11e8"])
        );
        assert_eq!(json["fingerprint"]["gpu_count"], 0);
        assert!(json["fingerprint"].get("driver_name").is_none());
        assert!(name.starts_with("unknown-accel-0x1234-0x11e8-"), "{name}");
    }

    #[test]
    fn slugs_are_readable_and_end_with_the_class() {
        let fp = h100();
        let s = slug(&fp.host_class(), Some(&fp));
        assert_eq!(
            s,
            format!("2x-nvidia-h100-80gb-hbm3-drv550-{}", fp.host_class())
        );
        let cpu = Fingerprint {
            cpu_model: Some("AMD EPYC 7B13 64-Core Processor".into()),
            cpu_count: Some(2),
            ..Fingerprint::default()
        };
        assert_eq!(
            slug(&cpu.host_class(), Some(&cpu)),
            format!("no-gpu-amd-epyc-7b13-2cpu-{}", cpu.host_class())
        );
        assert_eq!(slug("hc-0123456789ab", None), "unknown-hc-0123456789ab");
        let weird = Fingerprint {
            cpu_model: Some("  ###  ".into()),
            ..Fingerprint::default()
        };
        let s = slug("hc-x", Some(&weird));
        assert!(
            s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{s}"
        );
        assert_eq!(s, "no-gpu-hc-x");
        let odd = Fingerprint {
            unknown_accelerators: vec![crate::fingerprint::UnknownAccelerator {
                vendor_id: "0x1234".into(),
                device_id: Some("0x11e8".into()),
                driver: None,
            }],
            ..Fingerprint::default()
        };
        assert_eq!(slug("hc-y", Some(&odd)), "unknown-accel-0x1234-0x11e8-hc-y");
    }

    #[test]
    fn export_writes_the_class_its_fingerprint_and_every_bucket() {
        let (name, text, file, json) = exported();
        let fp = h100();
        assert_eq!(name, format!("{}.yaml", slug(&fp.host_class(), Some(&fp))));
        assert!(text.starts_with("# tunectl tuned configuration"), "{text}");
        assert!(
            text.contains("applies ONLY on a host whose fingerprint matches"),
            "{text}"
        );
        assert_eq!(json["schema"], 1);
        assert_eq!(json["study"], "fake");
        assert_eq!(json["spec_hash"], "feedface0123456789");
        assert_eq!(json["tunectl_version"], crate::ledger::records::VERSION);
        assert_eq!(json["host_class"], fp.host_class());
        assert_eq!(json["class_label"], fp.class_label());
        assert_eq!(json["hosts"], json!(["gpu1"]));
        assert_eq!(
            json["fingerprint"],
            json!({
                "gpus": [
                    {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559},
                    {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559},
                ],
                "gpu_count": 2,
                "driver_major": "550",
                "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
                "fingerprint_hash": fp.hash(),
            })
        );
        assert_eq!(
            json["objective"],
            json!({"name": "tp", "unit": "ops/s", "better": "higher"})
        );
        assert_eq!(json["baseline"], json!({"mode": "base", "threads": 1}));
        assert_eq!(json["context"], json!({"model": "m"}));

        let b = &json["buckets"];
        assert_eq!(b.as_array().map(Vec::len), Some(3));
        // Won.
        assert_eq!(b[0]["key"], "b1");
        assert_eq!(b[0]["label"], "n ∈ [2^0, 2^1)");
        assert_eq!(b[0]["bounds"], json!({"n": {"min": 1, "max": 2}}));
        assert_eq!(b[0]["knobs"], json!({"mode": "fast", "threads": 1}));
        assert_eq!(b[0]["winner"], "mode=fast");
        assert_eq!(b[0]["level"], "draft");
        assert_eq!(b[0]["speedup"], 2.0);
        let cell = &b[0]["cells"][0];
        assert_eq!(cell["cell"], "n=1");
        assert_eq!(cell["baseline"]["config"], "baseline");
        assert_eq!(cell["baseline"]["median"], 100.0);
        assert_eq!(cell["baseline"]["n"], 9);
        assert_eq!(cell["baseline"]["unit"], "ops/s");
        assert!(cell["baseline"]["spread"].as_f64().is_some(), "{cell}");
        assert_eq!(cell["winner"]["config"], "mode=fast");
        assert_eq!(cell["winner"]["median"], 200.0);
        let speedup = cell["winner"]["speedup"].as_f64().unwrap_or(0.0);
        assert!((speedup - 2.0).abs() < 1e-3, "{cell}");
        assert_eq!(
            b[0]["rejected"],
            json!([{"config": "mode=crash", "class": "crash", "detail": "exit code 3 (repeat 0, host h1)"}])
        );
        // Kept the baseline, with a refusal.
        assert_eq!(b[1]["winner"], Json::Null);
        assert_eq!(b[1]["knobs"], json!({"mode": "base", "threads": 1}));
        assert_eq!(b[1]["cells"][0]["winner"], Json::Null);
        assert_eq!(b[1]["refusals"][0]["config"], "mode=fast");
        // Pending: the baseline, whatever the report's config says.
        assert_eq!(b[2]["level"], "pending");
        assert_eq!(b[2]["knobs"], json!({"mode": "base", "threads": 1}));
        assert_eq!(b[2]["winner"], Json::Null);
        assert_eq!(b[2]["cells"], json!([]));

        assert_eq!(file.buckets.len(), 3);
        assert_eq!(file.host_class, fp.host_class());
        let levels: Vec<TunedLevel> = file.buckets.iter().map(|b| b.level).collect();
        assert_eq!(
            levels,
            [TunedLevel::Draft, TunedLevel::Draft, TunedLevel::Pending]
        );
    }

    #[test]
    fn export_is_deterministic_and_keeps_its_key_order() {
        let (_, a, _, _) = exported();
        let (_, b, _, _) = exported();
        assert_eq!(a, b);
        let keys: Vec<&str> = a
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with(' ') && !l.starts_with('-'))
            .filter_map(|l| l.split(':').next())
            .collect();
        assert_eq!(
            keys,
            [
                "schema",
                "tunectl_version",
                "study",
                "spec_hash",
                "host_class",
                "class_label",
                "hosts",
                "fingerprint",
                "objective",
                "statistic",
                "context",
                "baseline",
                "judging",
                "domains",
                "buckets"
            ]
        );
    }

    #[test]
    fn a_class_without_buckets_exports_an_empty_list() {
        let mut a = analysis();
        a.classes[0].buckets.clear();
        let (name, text) = export(&a, &a.classes[0]);
        assert!(text.contains("\nbuckets: []\n"), "{text}");
        assert!(
            parse(Path::new(&name), &text)
                .expect("parses")
                .buckets
                .is_empty()
        );
    }

    #[test]
    fn domains_are_written_compactly_and_checked() {
        let ints: Vec<i64> = (0..40).map(|i| 8 + 4 * i).collect();
        let d = compact_domain(&json!({"kind": "int", "values": ints}));
        assert_eq!(d, json!({"kind": "int", "min": 8, "max": 164, "step": 4}));
        assert_eq!(domain_contains(&d, &json!(12)), Ok(true));
        assert_eq!(domain_contains(&d, &json!(14)), Ok(false));
        assert_eq!(domain_contains(&d, &json!(168)), Ok(false));
        assert_eq!(domain_contains(&d, &json!("12")), Ok(false));
        let floats: Vec<f64> = (0..2000).map(|i| f64::from(i) / 1000.0).collect();
        let d = compact_domain(&json!({"kind": "float", "values": floats}));
        assert_eq!(d, json!({"kind": "float", "min": 0.0, "max": 1.999}));
        assert_eq!(domain_contains(&d, &json!(0.5)), Ok(true));
        assert_eq!(domain_contains(&d, &json!(2.5)), Ok(false));
        let d = compact_domain(&json!({"kind": "categorical", "values": [1, "1", 0.5]}));
        assert_eq!(domain_contains(&d, &json!(1.0)), Ok(true));
        assert_eq!(domain_contains(&d, &json!("0.5")), Ok(false));
        assert!(domain_contains(&json!({"kind": "int"}), &json!(1)).is_err());

        let (name, text, _, _) = exported();
        let path = PathBuf::from(&name);
        let ok = parse(&path, &text).expect("parses");
        assert!(ok.domains.is_some());
        assert_eq!(check_domains(&[(path.clone(), ok)]), Ok(vec![]));
        let edited = parse(
            &path,
            &text.replacen("      mode: fast", "      mode: evil", 1),
        )
        .expect("parses");
        let err = check_domains(&[(path.clone(), edited)]).expect_err("refused");
        assert!(
            err.contains("bucket `") && err.contains("knob `mode`: \"evil\""),
            "{err}"
        );
    }
}
