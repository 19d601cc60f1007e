//! `tunectl report --format html`, opened in a real browser: the page of
//! (a) the real quickstart study and (b) a fake fleet of two host classes
//! running an adaptive (Hyperband) search is rendered to a file with `-o`
//! and loaded by headless Chromium (`--dump-dom`); the DOM it built must
//! hold the charts and tables the report promises, no script error, and
//! the mark the page's own script sets once it has run. Chromium is needed
//! at /usr/bin/chromium (or `TUNECTL_TEST_CHROMIUM`); scripts/test.sh
//! installs it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::support;
use crate::support::env::Env;

/// The longest a browser may take to load and dump one page.
const BROWSER_LIMIT: Duration = Duration::from_secs(60);

fn chromium() -> PathBuf {
    let path = std::env::var_os("TUNECTL_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.is_file(),
        "headless Chromium is needed at {} to open the HTML reports; scripts/test.sh installs it (as root: apt-get install -y --no-install-recommends chromium)",
        path.display()
    );
    path
}

/// The DOM headless Chromium builds from `page`, as it serializes it, with
/// a fresh profile and no network use of its own; killed past
/// [`BROWSER_LIMIT`] (which fails the test).
fn dump_dom(page: &Path) -> String {
    dump_dom_at(page, "")
}

/// [`dump_dom`] of `page` opened at `#fragment` (where the page keeps a
/// table's sort and filter).
fn dump_dom_at(page: &Path, fragment: &str) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(if fragment.is_empty() {
            format!("file://{}", page.display())
        } else {
            format!("file://{}#{fragment}", page.display())
        })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    // Read both pipes while waiting, so that a full pipe cannot stall it.
    let mut stdout = child.stdout.take().expect("stdout pipe");
    let mut stderr = child.stderr.take().expect("stderr pipe");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for chromium") {
            break Some(s);
        }
        if started.elapsed() > BROWSER_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = out.join().unwrap_or_default();
    let log = err.join().unwrap_or_default();
    let status = status.unwrap_or_else(|| {
        panic!(
            "chromium ran past {BROWSER_LIMIT:?} on {}:\n{log}",
            page.display()
        )
    });
    assert!(
        status.success() && dom.contains("</html>"),
        "chromium failed on {} ({status}):\n{log}\n--- dom\n{dom}",
        page.display()
    );
    dom
}

/// `tunectl report STUDY --format html -o FILE`: nothing on stdout, the
/// page in the file; the file's path and text.
fn render_html(env: &Env, study: &str, name: &str) -> (PathBuf, String) {
    let file = env.path().join(name);
    let out = env.tunectl_ok(&[
        "report",
        study,
        "--format",
        "html",
        "--ledger",
        env.ledger_url(),
        "-o",
        &file.display().to_string(),
    ]);
    assert_eq!(out, "", "with -o nothing goes to stdout");
    let text = std::fs::read_to_string(&file).expect("the report file");
    (file, text)
}

/// Whether any summary in the report JSON has a spread measured as exactly
/// 0 (more than half its samples equal): then `± 0` on the page is that
/// measurement, not an unknown spread shown as 0.
fn measured_zero_spread(json: &Json) -> bool {
    match json {
        Json::Object(m) => m
            .iter()
            .any(|(k, v)| (k == "spread" && v.as_f64() == Some(0.0)) || measured_zero_spread(v)),
        Json::Array(a) => a.iter().any(measured_zero_spread),
        _ => false,
    }
}

/// What every page must be: self-contained, its script run without error,
/// every chart an inline SVG the browser kept; `json` is the same report's
/// JSON.
fn assert_page(html: &str, dom: &str, json: &Json) {
    for external in ["src=\"http", "href=\"http", "<link", "@import", "url("] {
        assert!(
            !html.contains(external),
            "the page must not load anything ({external})"
        );
    }
    assert!(
        dom.contains("data-rendered=\"yes\""),
        "the page's script did not run to its end:\n{dom}"
    );
    assert!(
        dom.contains("data-script-errors=\"\""),
        "script errors: {}",
        attr(dom, "data-script-errors")
    );
    let charts = dom.matches("<svg id=").count();
    assert!(charts > 0, "no chart in:\n{dom}");
    assert_eq!(
        attr(dom, "data-charts"),
        charts.to_string(),
        "the browser's count of chart SVGs"
    );
    assert!(
        !dom.contains("chart could not be drawn"),
        "a chart failed:\n{dom}"
    );
    if !measured_zero_spread(json) {
        assert!(!dom.contains("± 0 "), "an unknown spread shown as 0");
    }
}

/// The value of the first `name="..."` attribute in `dom`.
fn attr(dom: &str, name: &str) -> String {
    let key = format!("{name}=\"");
    dom.find(&key)
        .map(|i| {
            let rest = &dom[i + key.len()..];
            rest[..rest.find('"').unwrap_or(rest.len())].to_string()
        })
        .unwrap_or_default()
}

/// The ids of the chart SVGs of `class` (a CSS class such as
/// `chart-speedup`) in `dom`.
fn charts(dom: &str, class: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = dom;
    while let Some(i) = rest.find("<svg id=\"") {
        rest = &rest[i + 9..];
        let id = &rest[..rest.find('"').unwrap_or(0)];
        let tag = &rest[..rest.find('>').unwrap_or(rest.len())];
        if tag.contains(&format!("class=\"chart {class}\"")) {
            out.push(id.to_string());
        }
    }
    out
}

/// A table of the DOM by its id: its opening tag, and each body row as
/// (hidden, the text of its cells).
fn table_rows(dom: &str, id: &str) -> (String, Vec<(bool, Vec<String>)>) {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no table {id} in:\n{dom}"));
    let start = dom[..at].rfind("<table").expect("the table's tag");
    let end = start + dom[start..].find("</table>").expect("the table's end");
    let table = &dom[start..end];
    let open = table[..table.find('>').unwrap_or(0)].to_string();
    let body = &table[table.find("<tbody").unwrap_or(0)..];
    let text = |html: &str| {
        let mut out = String::new();
        let mut in_tag = false;
        for c in html.chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag => out.push(c),
                _ => {}
            }
        }
        out.trim().to_string()
    };
    let rows = body
        .split("<tr")
        .skip(1)
        .map(|row| {
            let tag = &row[..row.find('>').unwrap_or(0)];
            let cells = row
                .split("<td")
                .skip(1)
                .map(|c| text(&format!("<td{c}")))
                .collect();
            (tag.contains("hidden"), cells)
        })
        .collect();
    (open, rows)
}

/// The number a cell's text starts with (`12.3 Melem/s ± 2%` is 12.3).
fn leading_number(cell: &str) -> Option<f64> {
    let end = cell
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '-'))
        .map_or(cell.len(), |(i, _)| i);
    cell[..end].parse().ok()
}

#[test]
fn the_quickstart_report_opens_in_a_browser_with_its_charts_and_tables() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let study = std::fs::read_to_string(root.join("examples/quickstart/study.yaml"))
        .expect("the quickstart study");
    let env = Env::new(&study);
    support::quickstart_workload(&env.study_dir());
    // A real workload on a machine the other tests keep busy: its drift
    // watch would rightly cool down, for minutes. The anchors are still
    // taken and recorded (drift only reported), which is what the page
    // charts.
    let launch = assert_cmd::Command::from_std(env.launch_cmd(&["--no-cooldown"]))
        .timeout(Duration::from_secs(600))
        .output()
        .expect("launch");
    let stderr = String::from_utf8_lossy(&launch.stderr);
    assert!(
        support::ran_to_the_end(launch.status.code(), &stderr),
        "launch failed:\n{stderr}"
    );
    let json = env.report_json();
    let class = json["classes"][0]["host_class"]
        .as_str()
        .expect("a host class")
        .to_string();
    let cells = json["classes"][0]["cells"].as_array().map_or(0, Vec::len);
    assert_eq!(cells, 2, "the quickstart has two cells");

    let (page, html) = render_html(&env, &env.study_arg(), "report.html");
    let dom = dump_dom(&page);
    assert_page(&html, &dom, &json);
    let slug: String = class
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    // A chart per cell, or in its place a note with the chart's id (a cell
    // dropped after drift on a busy machine has nothing to draw).
    for (i, cell) in json["classes"][0]["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .enumerate()
    {
        for kind in ["speedup", "samples"] {
            let id = format!("{kind}-{slug}-{i}");
            assert!(
                dom.contains(&format!("id=\"{id}\"")),
                "neither a chart nor a note {id}"
            );
        }
        if !cell["baseline"]["summary"].is_null() {
            assert!(
                charts(&dom, "chart-samples").contains(&format!("samples-{slug}-{i}")),
                "cell {i} has samples but no chart of them"
            );
        }
    }
    assert!(
        !charts(&dom, "chart-speedup").is_empty(),
        "no speedup chart"
    );
    assert!(
        !charts(&dom, "chart-anchors").is_empty(),
        "anchor_every: 8 records anchors"
    );
    // One cell axis varies (n): the objective across it, the baseline and
    // what ships keyed, one chart for the class.
    assert_eq!(
        charts(&dom, "chart-workload"),
        vec![format!("workload-{slug}")],
        "no chart across the workload axis"
    );
    for needed in [
        "Across the workload (n)",
        "across n: the baseline and what ships at each cell",
        "what ships (its bucket's winner; the baseline where nothing wins)",
    ] {
        assert!(dom.contains(needed), "{needed:?} is missing from the page");
    }
    // `metrics: [time_ms, chunk_us]` beside the objective: trade-off
    // charts, with what ships marked and chunk_us's `selection.limits`
    // bound drawn and keyed.
    assert!(!charts(&dom, "chart-pareto").is_empty(), "no Pareto chart");
    for needed in ["◯ ships here", "selection.limits on chunk_us: max 54 us"] {
        assert!(dom.contains(needed), "{needed:?} is missing from the page");
    }
    assert!(
        charts(&dom, "chart-search").is_empty(),
        "a grid has no search"
    );
    // The traps are marked by their reason, summed up one row a reason in
    // the speedup charts (i32 crashes in 10 configs at each cell), and the
    // context is in the labels.
    assert!(
        !dom.contains("accum=i32  [crash]"),
        "a rejected config has a row of its own"
    );
    for needed in [
        "[crash] ×10 configs",
        "[output_changed] ×",
        "rejected: crash",
        "Melem/s",
        "time_ms (ms, lower)",
        &format!("<table class=\"ships\" id=\"ships-{slug}\""),
        &format!("<table class=\"evidence\" id=\"evidence-{slug}-0\""),
        "on the Pareto front",
        &format!("host class {class}"),
    ] {
        assert!(dom.contains(needed), "{needed:?} is missing from the page");
    }
    // Every tooltip of a measured config names its n and its spread.
    assert!(dom.contains("<title>") && dom.contains("n = "));

    // Three knobs vary: every config of a cell across them, what ships
    // and the rejected keyed; the knob effects drawn under "what to try
    // next", with the sentences the terminal report gives.
    for i in 0..cells {
        assert!(
            charts(&dom, "chart-parallel").contains(&format!("parallel-{slug}-{i}")),
            "no parallel coordinates for cell {i}"
        );
    }
    assert_eq!(
        charts(&dom, "chart-effects"),
        vec![format!("effects-{slug}")]
    );
    for needed in [
        "What to try next on",
        "best value vs worst, 1× = no effect",
        "ships in this cell's bucket",
        "knobs ordered by estimated effect",
        "threads: ",
    ] {
        assert!(dom.contains(needed), "{needed:?} is missing from the page");
    }

    // Each table is sortable and filterable, and the page's address keeps
    // both: evidence of the first cell sorted by its objective column
    // (2), descending, and filtered to the rows that name i64.
    let id = format!("evidence-{slug}-0");
    let (open, rows) = table_rows(&dom, &id);
    assert!(rows.len() > 3, "the evidence has rows: {rows:?}");
    assert!(
        rows.iter().all(|(hidden, _)| !hidden)
            && open.contains(&format!("data-shown=\"{}\"", rows.len())),
        "nothing filtered without a filter: {open}"
    );
    let sorted = dump_dom_at(&page, &format!("{id}.sort=2d&{id}.q=i64"));
    assert_page(&html, &sorted, &json);
    let (open, rows) = table_rows(&sorted, &id);
    assert!(open.contains("data-sort=\"2d\""), "{open}");
    let shown: Vec<&Vec<String>> = rows.iter().filter(|(h, _)| !h).map(|(_, c)| c).collect();
    assert!(!shown.is_empty(), "some rows name i64: {rows:?}");
    assert!(
        open.contains(&format!("data-shown=\"{}\"", shown.len())),
        "{open}"
    );
    for (hidden, cells) in &rows {
        assert_eq!(
            !hidden,
            cells.join(" ").to_lowercase().contains("i64"),
            "a row shown or hidden against the filter: {cells:?}"
        );
    }
    // Numbers descending, then the rows without one (`—`: nothing
    // measured), in either direction.
    let medians: Vec<Option<f64>> = shown
        .iter()
        .map(|c| c.get(2).and_then(|t| leading_number(t)))
        .collect();
    let numbers: Vec<f64> = medians.iter().map_while(|m| *m).collect();
    assert!(
        numbers.len() > 1
            && numbers.windows(2).all(|w| w[0] >= w[1])
            && medians[numbers.len()..].iter().all(Option::is_none),
        "column 2 is not descending with the unmeasured last: {medians:?}"
    );
}

/// A Hyperband study of the fake (tests/it/search.rs's search profile).
const SEARCH_STUDY: &str = r#"name: fleet
knobs:
  a: {kind: int, values: [0, 1, 2, 3], default: 0}
  b: {kind: int, values: [0, 1, 2, 3], default: 0}
  c: {kind: int, values: [0, 1, 2, 3], default: 0}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh search-proxy"
  timeout: 20s
objective:
  metric: throughput
  unit: ops/s
  better: higher
  command: "sh {{ study_dir }}/fake-trial.sh search"
fidelity: {unit: samples, min_budget: 1, max_budget: 9, eta: 3}
measurement: {warmup: 0, repeats: 3, anchor_every: 0, confirm_repeats: 3}
gate: {outputs: [out.txt]}
strategy: {kind: hyperband, seed: 7, finalists: 2}
"#;

#[test]
fn a_two_class_fleet_report_has_one_section_per_class_with_its_search() {
    let env = Env::new(SEARCH_STUDY);
    // The same study on this machine as it is, then as 2× H100 (a FAKE
    // nvidia-smi first on PATH): two host classes in one ledger.
    env.launch_ok(&[]);
    let bin = support::fake_nvidia_smi(env.path());
    let mut as_h100 = env.launch_cmd(&[]);
    as_h100.env("PATH", support::path_with(&bin));
    let out = env.run(as_h100);
    assert!(
        support::ran_to_the_end(out.code, &out.stderr),
        "launch as H100 failed:\n{}",
        out.text()
    );
    let json = env.report_json();
    let classes: Vec<String> = json["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .filter_map(|c| c["host_class"].as_str().map(str::to_string))
        .collect();
    assert_eq!(classes.len(), 2, "two host classes: {json}");

    let (page, html) = render_html(&env, &env.study_arg(), "fleet.html");
    let dom = dump_dom(&page);
    assert_page(&html, &dom, &json);
    assert_eq!(
        dom.matches("<section class=\"host-class\"").count(),
        2,
        "one section per class"
    );
    assert!(dom.contains("H100"), "the H100 class is labelled");
    for class in &classes {
        let slug: String = class
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        assert!(
            dom.contains(&format!("href=\"#class-{slug}\"")),
            "a link to class {class}"
        );
        // Three knobs vary among the configs measured at the cell: they
        // are drawn across them too.
        for kind in ["speedup", "samples", "search", "parallel"] {
            assert!(
                charts(&dom, &format!("chart-{kind}")).contains(&format!("{kind}-{slug}-0")),
                "no {kind} chart of class {class}"
            );
        }
        assert!(
            charts(&dom, "chart-effects").contains(&format!("effects-{slug}")),
            "no knob effects of class {class}"
        );
    }
    // The search chart marks its rungs (budgets) and says n = 1.
    assert!(dom.contains("rung: budget 1 samples"), "rungs marked");
    assert!(dom.contains("n = 1"));
    // No secondary metric: no trade-off chart.
    assert!(charts(&dom, "chart-pareto").is_empty());

    // -o writes any format: the JSON in the file is what stdout shows.
    let file = env.path().join("report.json");
    let stdout = env.tunectl_ok(&[
        "report",
        &env.study_arg(),
        "--format",
        "json",
        "--ledger",
        env.ledger_url(),
        "--output",
        &file.display().to_string(),
    ]);
    assert_eq!(stdout, "");
    assert_eq!(
        std::fs::read_to_string(&file).expect("report.json"),
        env.report(&env.study_arg(), "json")
    );
}
