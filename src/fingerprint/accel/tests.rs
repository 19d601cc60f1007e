use super::*;

/// `amd-smi static --asic --vram --driver --json` of ROCm 6.2 on two MI300X
/// (shortened: amd-smi prints more asic fields), in the newer `gpu_data`
/// layout, joined onto one line as the probe prints it.
const AMD_SMI_STATIC: &str = r#"{ "gpu_data": [ { "gpu": 1, "asic": { "market_name": "AMD Instinct MI300X", "vendor_id": "0x1002", "device_id": "0x74a1", "target_graphics_version": "gfx942" }, "vram": { "type": "HBM3", "vendor": "N/A", "size": { "value": 196592, "unit": "MB" } }, "driver": { "name": "amdgpu", "version": "6.8.5" } }, { "gpu": 0, "asic": { "market_name": "AMD Instinct MI300X", "vendor_id": "0x1002", "device_id": "0x74a1" }, "vram": { "type": "HBM3", "size": { "value": 196592, "unit": "MB" } }, "driver": { "name": "amdgpu", "version": "6.8.5" } } ] }"#;

/// `rocm-smi --showproductname --showmeminfo vram --showdriverversion
/// --json` on two MI210 (shortened), after a warning line as older
/// releases print one.
const ROCM_SMI: &str = r#"WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status  {"card1": {"VRAM Total Memory (B)": "68702699520", "Card series": "AMD Instinct MI210", "Card model": "0x740f"}, "card0": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "10747904", "Card series": "AMD Instinct MI210", "Card model": "0x740f", "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]"}, "system": {"Driver version": "6.7.0"}}"#;

#[test]
fn parses_amd_smi_static_in_both_layouts() {
    let (gpus, driver) = parse_amd_smi_static(AMD_SMI_STATIC).unwrap();
    assert_eq!(driver.as_deref(), Some("6.8.5"));
    assert_eq!(gpus.len(), 2);
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g.index, u32::try_from(i).unwrap());
        assert_eq!(g.name, "AMD Instinct MI300X");
        assert_eq!(g.memory_mib, Some(196_592));
        assert_eq!(g.vendor, GpuVendor::Amd);
        assert_eq!(g.uuid, None);
    }
    // Older releases: a bare list, the size as a string.
    let old = r#"[{"gpu": 0, "asic": {"market_name": "AMD Instinct MI210"}, "vram": {"size": "65520 MB"}, "driver": {"version": "6.3.6"}}]"#;
    let (gpus, driver) = parse_amd_smi_static(old).unwrap();
    assert_eq!(gpus[0].name, "AMD Instinct MI210");
    assert_eq!(gpus[0].memory_mib, Some(65520));
    assert_eq!(driver.as_deref(), Some("6.3.6"));
}

#[test]
fn amd_smi_fields_that_say_nothing_stay_unknown() {
    let text = r#"[
        {"gpu": 0, "asic": {"market_name": "N/A", "device_id": "0x74a5"}, "vram": {"size": {"value": "N/A", "unit": "MB"}}, "driver": {"version": "N/A"}},
        {"gpu": 1, "asic": {}, "vram": {"size": {"value": 1, "unit": "furlongs"}}},
        {"gpu": 2, "asic": {"market_name": "AMD Radeon PRO W7800"}, "vram": {"size": {"value": 34359738368, "unit": "B"}}},
        "not an object",
        {"gpu": 2, "asic": {"market_name": "duplicate index"}}
    ]"#;
    let (gpus, driver) = parse_amd_smi_static(text).unwrap();
    assert_eq!(driver, None);
    assert_eq!(gpus.len(), 2, "{gpus:?}");
    assert_eq!(gpus[0].name, "AMD device 0x74a5");
    assert_eq!(gpus[0].memory_mib, None);
    assert_eq!(gpus[1].name, "AMD Radeon PRO W7800");
    assert_eq!(gpus[1].memory_mib, Some(32768));
}

#[test]
fn malformed_amd_smi_output_is_a_clear_error() {
    for (text, want) in [
        ("", "no JSON document"),
        ("Segmentation fault", "no JSON document"),
        ("{\"gpu_data\": [", "invalid JSON"),
        ("{\"gpus\": []}", "no list of GPUs"),
        ("[1, 2", "invalid JSON"),
    ] {
        let err = parse_amd_smi_static(text).unwrap_err();
        assert!(err.to_string().contains(want), "{text:?}: {err}");
        assert!(err.to_string().starts_with("amd-smi static: "), "{err}");
    }
    let huge = format!("[{}]", " ".repeat(MAX_TOOL_OUTPUT));
    assert!(matches!(
        parse_amd_smi_static(&huge),
        Err(AccelError::TooLong { .. })
    ));
    // Deep nesting is refused by the JSON parser, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(parse_amd_smi_static(&deep).is_err());
}

#[test]
fn reads_the_rocm_version_of_amd_smi_version() {
    assert_eq!(
        parse_amd_smi_version(
            "AMDSMI Tool: 24.6.2+2b02a07 | AMDSMI Library version: 24.6.2.0 | ROCm version: 6.2.0"
        )
        .as_deref(),
        Some("6.2.0")
    );
    assert_eq!(
        parse_amd_smi_version("AMDSMI Tool: 23.4 | ROCm version: 6.0.2 ").as_deref(),
        Some("6.0.2")
    );
    assert_eq!(
        parse_amd_smi_version("AMDSMI Tool: 1 | ROCm version: N/A"),
        None
    );
    assert_eq!(parse_amd_smi_version("usage: amd-smi"), None);
    assert_eq!(parse_amd_smi_version(""), None);
}

#[test]
fn parses_rocm_smi_json() {
    let (gpus, driver) = parse_rocm_smi(ROCM_SMI).unwrap();
    assert_eq!(driver.as_deref(), Some("6.7.0"));
    assert_eq!(gpus.len(), 2);
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g.index, u32::try_from(i).unwrap());
        assert_eq!(g.name, "AMD Instinct MI210");
        assert_eq!(g.memory_mib, Some(65520));
        assert_eq!(g.vendor, GpuVendor::Amd);
    }
    // A card without a series is named by its model; the driver may be per card.
    let (gpus, driver) = parse_rocm_smi(
        r#"{"card3": {"Card model": "0x73bf", "Driver version": "6.2.4", "VRAM Total Memory (B)": "lots"}, "cardX": {"Card series": "x"}}"#,
    )
    .unwrap();
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].index, 3);
    assert_eq!(gpus[0].name, "AMD device 0x73bf");
    assert_eq!(gpus[0].memory_mib, None);
    assert_eq!(driver.as_deref(), Some("6.2.4"));
}

#[test]
fn malformed_rocm_smi_output_is_a_clear_error() {
    for text in [
        "",
        "ERROR: Driver not initialized",
        "[1, 2]",
        "{\"card0\": ",
    ] {
        let err = parse_rocm_smi(text).unwrap_err();
        assert!(err.to_string().starts_with("rocm-smi: "), "{text:?}: {err}");
    }
    let (gpus, driver) = parse_rocm_smi("{}").unwrap();
    assert!(gpus.is_empty());
    assert_eq!(driver, None);
}

#[test]
fn parses_xpu_smi_dump() {
    let lines = [
        "Device ID,Device Name,Driver Version,Memory Physical Size",
        r#"1,"Intel(R) Data Center GPU Max 1550","I915_23.10.32_PSB_231129.32","131072.00 MiB""#,
        r#"0,"Intel(R) Data Center GPU Max 1550","I915_23.10.32_PSB_231129.32","131072.00 MiB""#,
    ];
    let (gpus, driver) = parse_xpu_smi_dump(&lines).unwrap();
    assert_eq!(driver.as_deref(), Some("I915_23.10.32_PSB_231129.32"));
    assert_eq!(gpus.len(), 2);
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g.index, u32::try_from(i).unwrap());
        assert_eq!(g.name, "Intel(R) Data Center GPU Max 1550");
        assert_eq!(g.memory_mib, Some(131_072));
        assert_eq!(g.vendor, GpuVendor::Intel);
    }
    // Columns found by name, quotes and commas inside quotes kept.
    let lines = [
        "Device Name,Device ID",
        r#""Intel(R) Graphics [0x56c0], ""Flex""",0"#,
        "no,id",
    ];
    let (gpus, driver) = parse_xpu_smi_dump(&lines).unwrap();
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].name, r#"Intel(R) Graphics [0x56c0], "Flex""#);
    assert_eq!(gpus[0].memory_mib, None);
    assert_eq!(driver, None);
}

#[test]
fn malformed_xpu_smi_output_is_a_clear_error() {
    let err = parse_xpu_smi_dump(&[]).unwrap_err();
    assert!(err.to_string().contains("no output"), "{err}");
    let err = parse_xpu_smi_dump(&["Level Zero Initialization Error"]).unwrap_err();
    assert!(err.to_string().contains("Device ID"), "{err}");
}

#[test]
fn parses_drm_lines() {
    assert_eq!(
        parse_drm_line("card1 0x8086 0x56C0 i915"),
        Some(DrmCard {
            card: 1,
            vendor: VENDOR_INTEL.into(),
            device: Some("0x56c0".into()),
            driver: Some("i915".into()),
        })
    );
    assert_eq!(
        parse_drm_line("card12 0x1234 - -"),
        Some(DrmCard {
            card: 12,
            vendor: "0x1234".into(),
            device: None,
            driver: None,
        })
    );
    for bad in [
        "",
        "card0",
        "card0 -",
        "card0 8086 0x1 x",
        "cardX 0x8086",
        "renderD128 0x8086",
        "card0 0x80861",
    ] {
        assert_eq!(parse_drm_line(bad), None, "{bad:?}");
    }
    let odd = parse_drm_line("card0 0x1234 0x0001 bad/driver").unwrap();
    assert_eq!(odd.driver, None);
}

fn card(n: u32, vendor: &str, device: &str, driver: &str) -> DrmCard {
    parse_drm_line(&format!("card{n} {vendor} {device} {driver}")).unwrap()
}

#[test]
fn drm_cards_make_intel_gpus_and_unknown_accelerators() {
    let cards = [
        card(0, "0x1a03", "0x2000", "ast"),
        card(1, VENDOR_INTEL, "0x0bd5", "xe"),
        card(2, VENDOR_NVIDIA, "0x2330", "nvidia"),
        card(3, "0x1234", "0x11e8", "weirdaccel"),
        card(4, VENDOR_AMD, "0x74a1", "amdgpu"),
        card(5, "0x1af4", "0x1050", "virtio_gpu"),
    ];
    let (gpus, driver, unknown) = from_drm(&cards);
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].index, 1);
    assert_eq!(gpus[0].name, "Intel GPU 0x0bd5");
    assert_eq!(gpus[0].vendor, GpuVendor::Intel);
    assert_eq!(gpus[0].memory_mib, None);
    assert_eq!(driver.as_deref(), Some("xe"));
    assert_eq!(
        unknown,
        vec![
            UnknownAccelerator {
                vendor_id: "0x1234".into(),
                device_id: Some("0x11e8".into()),
                driver: Some("weirdaccel".into()),
            },
            UnknownAccelerator {
                vendor_id: VENDOR_AMD.into(),
                device_id: Some("0x74a1".into()),
                driver: Some("amdgpu".into()),
            },
        ]
    );
    // BMC consoles, VM screens and NVIDIA cards alone: nothing.
    let (gpus, driver, unknown) = from_drm(&cards[..1]);
    assert!(gpus.is_empty() && driver.is_none() && unknown.is_empty());
    let (gpus, _, unknown) = from_drm(&[cards[2].clone(), cards[5].clone()]);
    assert!(gpus.is_empty() && unknown.is_empty());
}
