//! The report for a terminal (`--format table`): it fits a width, leads
//! with what ships per host class and bucket, then shows the evidence
//! (one table per cell, rejections grouped by cause) and ends with what to
//! try next. Every number keeps its n and spread; an unknown spread reads
//! `± ?`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use comfy_table::{ContentArrangement, Table, presets};

use super::render::{
    EFFECT_METHOD, RowRole, cells_for_people, next_lines, num, search_table, secondary_line,
    winner_numbers,
};
use crate::decide::levers::value_text;
use crate::decide::{Analysis, BucketReport, CellReport, ClassReport, ConfigReport};
use crate::stats::Summary;

/// Columns when neither `--width`, `COLUMNS` nor the terminal says.
pub const DEFAULT_WIDTH: usize = 100;
/// Narrower than this, tables cannot keep a column readable.
pub const MIN_WIDTH: usize = 40;

/// The width to fit: `explicit` (`--width`), else `COLUMNS` when it is a
/// number, else the terminal's on stdout, else [`DEFAULT_WIDTH`].
pub fn width(explicit: Option<usize>) -> usize {
    let from_env = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0);
    let from_terminal = || {
        console::Term::stdout()
            .size_checked()
            .map(|(_, cols)| usize::from(cols))
    };
    explicit
        .or(from_env)
        .or_else(from_terminal)
        .unwrap_or(DEFAULT_WIDTH)
        .max(MIN_WIDTH)
}

/// `text` in lines of at most `width` columns: the first line after
/// `first`, the others after `rest` (both counted in the width). Words
/// longer than a line are cut.
pub fn wrap(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let cols = console::measure_text_width;
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut start = cols(first);
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let mut word = word.to_string();
        if cols(&line) > start {
            if cols(&line) + 1 + cols(&word) > width {
                lines.push(std::mem::replace(&mut line, rest.to_string()));
                start = cols(rest);
            } else {
                line.push(' ');
            }
        }
        // A word longer than a line (a path, a digest) is cut.
        while cols(&line) + cols(&word) > width {
            let room = width.saturating_sub(cols(&line)).max(1);
            let head: String = word.chars().take(room).collect();
            word = word.chars().skip(room).collect();
            line.push_str(&head);
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            start = cols(rest);
        }
        line.push_str(&word);
    }
    lines.push(line);
    lines
}

/// `text` wrapped into `out`; a newline or tab in it (a trial's stderr in
/// a failure's detail) is shown escaped, so that it cannot break a line.
fn put(out: &mut String, text: &str, width: usize, first: &str, rest: &str) {
    for l in wrap(&crate::term::escape(text), width, first, rest) {
        let _ = writeln!(out, "{}", l.trim_end());
    }
}

fn table(width: usize) -> Table {
    let mut t = Table::new();
    t.load_style(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(u16::try_from(width).unwrap_or(u16::MAX));
    t
}

/// A summary in a terminal table's cell: `median ± spread n=N` (`± ?`
/// below `min_samples`); the column names the unit.
fn summary_cell(s: &Summary, min_samples: usize) -> String {
    if s.n < min_samples {
        format!("{} ± ? n={}", num(s.median), s.n)
    } else {
        format!(
            "{} ± {} n={}",
            num(s.median),
            crate::fmt::spread(s.spread),
            s.n
        )
    }
}

pub fn render(a: &Analysis, all: bool, width: usize) -> String {
    let mut out = String::new();
    for l in super::render::header(a) {
        put(&mut out, &l, width, "", "  ");
    }
    if let Some(l) = secondary_line(a) {
        put(&mut out, &l, width, "", "  ");
    }
    if !a.classes.is_empty() {
        let _ = writeln!(out, "\nWHAT SHIPS");
    }
    for class in &a.classes {
        let _ = writeln!(out);
        // The label (GPUs, CPU model) on a line of its own: however long,
        // it wraps without hiding the class id or the hosts.
        put(
            &mut out,
            &format!(
                "host class {} · {} host{}: {}",
                class.host_class,
                class.hosts.len(),
                if class.hosts.len() == 1 { "" } else { "s" },
                class.hosts.join(", ")
            ),
            width,
            "",
            "  ",
        );
        put(&mut out, &class.label, width, "  ", "  ");
        if class.buckets.is_empty() {
            put(&mut out, "no bucket has a decision yet", width, "  ", "  ");
        }
        for b in &class.buckets {
            ships(&mut out, b, width);
        }
    }
    for class in &a.classes {
        evidence(&mut out, a, class, all, width);
    }
    for class in &a.classes {
        next(&mut out, a, class, width);
    }
    let foot = super::render::footer(a);
    if !foot.is_empty() {
        let _ = writeln!(out);
    }
    for l in foot {
        put(&mut out, &l, width, "", "  ");
    }
    out
}

/// One bucket's line in "what ships": the config, the level, the speedup
/// with its spread and n, and why.
fn ships(out: &mut String, b: &BucketReport, width: usize) {
    let level = b.level.as_str().to_uppercase();
    let cells = match b.cells.as_slice() {
        [only] if *only == b.label => String::new(),
        [only] => format!(" (cell {only})"),
        all => format!(" (cells {})", all.join(", ")),
    };
    let what = match &b.winner {
        Some(w) => w.label.clone(),
        None => "the baseline".to_string(),
    };
    let _ = writeln!(out);
    put(
        out,
        &format!("{}{cells}: ships {what} · {level}", b.label),
        width,
        "  ",
        "      ",
    );
    if b.winner.is_some() {
        for l in winner_numbers(b) {
            put(out, &l, width, "    ", "      ");
        }
    } else {
        put(out, &b.decision.to_string(), width, "    ", "      ");
    }
    put(
        out,
        &format!("{level}: {}", b.level_reason),
        width,
        "    ",
        "      ",
    );
    for r in &b.refusals {
        if !b.decision.to_string().contains(&r.reason.to_string()) || b.winner.is_some() {
            put(
                out,
                &format!(
                    "refused {} (at {}): {}",
                    r.config_label, r.cell_label, r.reason
                ),
                width,
                "    ",
                "      ",
            );
        }
    }
}

/// The rows of a cell's table: role, config, each metric, vs baseline,
/// and a note (with `--all`, rejected rows' reasons).
fn cell_table(a: &Analysis, cell: &CellReport, all: bool, width: usize) -> (Table, usize) {
    let min_samples = a.judging.selection.min_samples as usize;
    let rows = super::render::rows(cell, all);
    let shown: Vec<_> = rows
        .into_iter()
        .filter(|(role, _, _)| all || *role != RowRole::Rejected)
        .collect();
    let notes = shown.iter().any(|(role, _, note)| {
        !note.is_empty() && (*role == RowRole::Rejected || *role == RowRole::Baseline)
    });
    let mut head = vec!["role".to_string(), "config".to_string()];
    let unit = |u: &str| {
        if u.is_empty() {
            String::new()
        } else {
            format!(" [{u}]")
        }
    };
    head.push(format!("{}{}", a.objective.name, unit(&a.objective.unit)));
    for m in &a.metrics {
        head.push(format!("{}{}", m.name, unit(&m.unit)));
    }
    head.push("vs baseline".to_string());
    if notes {
        head.push("note".to_string());
    }
    let mut t = table(width);
    t.set_header(head);
    for (role, r, note) in &shown {
        let mut row = vec![role.to_string(), r.label.clone()];
        row.push(match r.summary {
            Some(s) => summary_cell(&s, min_samples),
            None => format!("— ({})", super::render::trials(r.trials)),
        });
        for m in &a.metrics {
            row.push(
                r.metrics
                    .get(&m.name)
                    .map(|s| summary_cell(s, min_samples))
                    .unwrap_or_else(|| "—".to_string()),
            );
        }
        row.push(super::render::speedup_cell(*role, r));
        if notes {
            row.push(note.clone());
        }
        t.add_row(cells_for_people(row));
    }
    let hidden = cell.eligible.len()
        - shown
            .iter()
            .filter(|(role, _, _)| *role != RowRole::Baseline && *role != RowRole::Rejected)
            .count();
    (t, hidden)
}

fn evidence(out: &mut String, a: &Analysis, class: &ClassReport, all: bool, width: usize) {
    let _ = writeln!(out, "\nEVIDENCE on {}", class.host_class);
    put(
        out,
        &format!(
            "per cell: config: the knobs that differ from the baseline; each metric: median ± spread (1.4826·MAD) and n samples pooled over the class's hosts; vs baseline: the speedup over the baseline's runs, compared within hosts, [its 95% confidence interval]{}",
            if a.metrics.is_empty() {
                ""
            } else {
                "; secondary metrics are shown, not judged"
            }
        ),
        width,
        "",
        "  ",
    );
    if let Some((title, header, rows)) = search_table(class) {
        let _ = writeln!(out);
        put(out, &title, width, "", "  ");
        let mut t = table(width);
        t.set_header(header);
        for row in rows {
            t.add_row(cells_for_people(row));
        }
        let _ = writeln!(out, "{t}");
    }
    for cell in &class.cells {
        let _ = writeln!(out);
        put(
            out,
            &format!("cell {} · {}", cell.cell_label, cell.decision),
            width,
            "",
            "  ",
        );
        for n in &cell.notes {
            put(out, &format!("note: {n}"), width, "", "  ");
        }
        if cell.baseline.is_none() && cell.eligible.is_empty() && cell.rejected.is_empty() {
            continue;
        }
        let (t, hidden) = cell_table(a, cell, all, width);
        let _ = writeln!(out, "{t}");
        if hidden > 0 {
            let _ = writeln!(
                out,
                "({hidden} more {}; --all shows them)",
                if hidden == 1 {
                    "eligible config"
                } else {
                    "eligible configs"
                }
            );
        }
    }
    if !all {
        rejections(out, class, &a.baseline, width);
    }
}

/// Rejected configs of a class that failed the same way, and the knob
/// values they all share.
struct Group<'a> {
    class: &'static str,
    cause: String,
    /// (cell, config) rejected so.
    members: Vec<(&'a str, &'a ConfigReport)>,
}

/// Digests in a cause (`output digest 96243b2e2fcf ≠ baseline's …`) differ
/// from config to config; what they say does not.
fn general_cause(cause: &str) -> String {
    cause
        .split(' ')
        .map(|w| {
            let hex = w.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            if hex.len() >= 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                w.replace(hex, "…")
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A number in a cause that is not part of a word (`i32`, `f64` and
/// `chunk_us` stay as they are): a median, a sample count, a chunk index,
/// a cell's size.
fn numbers() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(r"(^|[^A-Za-z0-9_.])([0-9]+(?:\.[0-9]+)?)").expect("a valid pattern")
    })
}

/// A cause as its words, with each number taken out (`\0` in its place),
/// and the numbers in order.
fn cause_shape(cause: &str) -> (String, Vec<&str>) {
    let mut shape = String::with_capacity(cause.len());
    let mut found = Vec::new();
    let mut last = 0;
    for c in numbers().captures_iter(cause) {
        let Some(n) = c.get(2) else { continue };
        shape.push_str(&cause[last..n.start()]);
        shape.push('\0');
        found.push(n.as_str());
        last = n.end();
    }
    shape.push_str(&cause[last..]);
    (shape, found)
}

/// The causes of a group, which share their words, as one text: each
/// number that differs among them as its range (`median 76.3–100.8`).
fn merged_cause(shape: &str, causes: &[Vec<&str>]) -> String {
    let mut out = String::new();
    for (i, part) in shape.split('\0').enumerate() {
        if i > 0 {
            let values: Vec<&str> = causes
                .iter()
                .filter_map(|c| c.get(i - 1).copied())
                .collect();
            let key = |v: &&str| v.parse::<f64>().unwrap_or(f64::NAN);
            let lo = values.iter().min_by(|a, b| key(a).total_cmp(&key(b)));
            let hi = values.iter().max_by(|a, b| key(a).total_cmp(&key(b)));
            match (lo, hi) {
                (Some(lo), Some(hi)) if lo == hi => out.push_str(lo),
                (Some(lo), Some(hi)) => {
                    let _ = write!(out, "{lo}–{hi}");
                }
                _ => out.push('?'),
            }
        }
        out.push_str(part);
    }
    out
}

fn groups(class: &ClassReport) -> Vec<Group<'_>> {
    // Keyed by the failure class and the cause's words: causes that differ
    // only in digests or numbers (a chunk index, a median, the cell's n)
    // are one way of failing.
    type Members<'a> = Vec<(&'a str, &'a ConfigReport, Vec<String>)>;
    let mut by_cause: BTreeMap<(&'static str, String), Members<'_>> = BTreeMap::new();
    for cell in &class.cells {
        for r in &cell.rejected {
            let Some(rej) = &r.rejection else { continue };
            let general = general_cause(&rej.cause);
            let (shape, found) = cause_shape(&general);
            let found = found.into_iter().map(str::to_string).collect();
            by_cause
                .entry((rej.class.as_str(), shape))
                .or_default()
                .push((cell.cell_label.as_str(), r, found));
        }
    }
    let mut out: Vec<Group> = by_cause
        .into_iter()
        .map(|((class, shape), members)| {
            let found: Vec<Vec<&str>> = members
                .iter()
                .map(|(_, _, f)| f.iter().map(String::as_str).collect())
                .collect();
            Group {
                class,
                cause: merged_cause(&shape, &found),
                members: members.into_iter().map(|(c, r, _)| (c, r)).collect(),
            }
        })
        .collect();
    // The largest groups first.
    out.sort_by_key(|g| std::cmp::Reverse(configs_of(&g.members).len()));
    out
}

fn configs_of<'a>(members: &[(&str, &'a ConfigReport)]) -> BTreeSet<&'a str> {
    members.iter().map(|(_, r)| r.label.as_str()).collect()
}

/// The `knob=value` pairs every config of `members` has, but for values
/// at the baseline's default.
fn shared(
    members: &[(&str, &ConfigReport)],
    baseline: &serde_json::Value,
) -> Vec<(String, serde_json::Value)> {
    let mut common: Option<BTreeMap<String, serde_json::Value>> = None;
    for (_, r) in members {
        let Some(obj) = r.config.as_object() else {
            return Vec::new();
        };
        let this: BTreeMap<String, serde_json::Value> =
            obj.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        common = Some(match common {
            None => this,
            Some(c) => c
                .into_iter()
                .filter(|(k, v)| this.get(k) == Some(v))
                .collect(),
        });
    }
    common
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, v)| baseline.get(k) != Some(v))
        .collect()
}

fn rejections(out: &mut String, class: &ClassReport, baseline: &serde_json::Value, width: usize) {
    let groups = groups(class);
    if groups.is_empty() {
        return;
    }
    let total: BTreeSet<&str> = groups.iter().flat_map(|g| configs_of(&g.members)).collect();
    let _ = writeln!(out);
    put(
        out,
        &format!(
            "rejected on {}: {} config{}, grouped by how they failed (--all lists each one at each cell):",
            class.host_class,
            total.len(),
            if total.len() == 1 { "" } else { "s" }
        ),
        width,
        "",
        "  ",
    );
    let all_cells: BTreeSet<&str> = class
        .cells
        .iter()
        .filter(|c| c.baseline.is_some() || !c.eligible.is_empty() || !c.rejected.is_empty())
        .map(|c| c.cell_label.as_str())
        .collect();
    // Every config tried at a cell of the class, to say whether a group
    // holds all the configs with its shared values.
    let tried: Vec<&serde_json::Value> = class
        .cells
        .iter()
        .flat_map(|c| c.baseline.iter().chain(&c.eligible).chain(&c.rejected))
        .map(|r| &r.config)
        .collect();
    for g in &groups {
        let configs = configs_of(&g.members);
        let cells: BTreeSet<&str> = g.members.iter().map(|(c, _)| *c).collect();
        let pairs = shared(&g.members, baseline);
        let label = if configs.len() == 1 {
            configs
                .iter()
                .next()
                .map(|s| s.to_string())
                .unwrap_or_default()
        } else if pairs.is_empty() {
            "configs sharing no changed knob".to_string()
        } else {
            pairs
                .iter()
                .map(|(k, v)| format!("{k}={}", value_text(v)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let at = if all_cells.len() <= 1 {
            String::new()
        } else if cells == all_cells {
            " at every cell".to_string()
        } else {
            let cells: Vec<&str> = cells.into_iter().collect();
            let s = if cells.len() == 1 { "" } else { "s" };
            format!(" at cell{s} {}", cells.join(", "))
        };
        let count = if configs.len() == 1 {
            String::new()
        } else {
            let with: BTreeSet<String> = tried
                .iter()
                .filter(|c| pairs.iter().all(|(k, v)| c.get(k) == Some(v)))
                .map(|c| c.to_string())
                .collect();
            if !pairs.is_empty() && with.len() == configs.len() {
                format!(", {} configs (every one tried with {label})", configs.len())
            } else if !pairs.is_empty() {
                format!(
                    ", {} of the {} configs tried with {label}",
                    configs.len(),
                    with.len()
                )
            } else {
                format!(", {} configs", configs.len())
            }
        };
        put(
            out,
            &format!("- {label}: {}{at}{count}: {}", g.class, g.cause),
            width,
            "",
            "    ",
        );
        if configs.len() > 1 && pairs.is_empty() {
            put(
                out,
                &configs.iter().copied().collect::<Vec<_>>().join("; "),
                width,
                "    ",
                "    ",
            );
        }
    }
}

fn next(out: &mut String, a: &Analysis, class: &ClassReport, width: usize) {
    let lines = next_lines(a, &class.next);
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nWHAT TO TRY NEXT on {}", class.host_class);
    put(out, EFFECT_METHOD, width, "", "  ");
    for l in lines {
        put(out, &format!("- {l}"), width, "", "    ");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_fits_the_width_and_cuts_what_cannot_fit() {
        let text = "a win needs more than 2% and more than the combined spread";
        let lines = wrap(text, 20, "", "  ");
        assert_eq!(
            lines,
            [
                "a win needs more",
                "  than 2% and more",
                "  than the combined",
                "  spread"
            ]
        );
        let long = format!("digest {} ok", "f".repeat(30));
        let lines = wrap(&long, 12, "- ", "    ");
        assert!(lines.iter().all(|l| l.chars().count() <= 12), "{lines:?}");
        assert_eq!(lines.concat().matches('f').count(), 30, "{lines:?}");
        assert_eq!(wrap("", 40, "  ", "  "), ["  "]);
    }

    #[test]
    fn causes_differ_only_by_digests_group_together() {
        let a =
            general_cause("output digest dbf69d7cd2c9 ≠ baseline's 96243b2e2fcf (out.txt differs)");
        let b =
            general_cause("output digest 95b4a9cb2362 ≠ baseline's 415d4dddb403 (out.txt differs)");
        assert_eq!(a, b);
        assert_eq!(a, "output digest … ≠ baseline's … (out.txt differs)");
        assert_eq!(general_cause("exit code 101"), "exit code 101");
    }

    #[test]
    fn causes_that_differ_in_their_numbers_show_each_as_a_range() {
        let a = "chunk_us: median 76.3 over 9 samples, above the limit max 60";
        let b = "chunk_us: median 100.75 over 9 samples, above the limit max 60";
        let (shape_a, na) = cause_shape(a);
        let (shape_b, nb) = cause_shape(b);
        assert_eq!(shape_a, shape_b);
        assert_eq!(
            merged_cause(&shape_a, &[na, nb]),
            "chunk_us: median 76.3–100.75 over 9 samples, above the limit max 60"
        );
        // Numbers inside words are words: i32 and i64 fail differently.
        let (i32_shape, _) = cause_shape("accum i32 overflows at n=500000");
        let (i64_shape, _) = cause_shape("accum i64 overflows at n=500000");
        assert_ne!(i32_shape, i64_shape);
        let (one, n) = cause_shape("exit code 101");
        assert_eq!(merged_cause(&one, &[n]), "exit code 101");
    }
}
