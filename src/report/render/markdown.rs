//! The Markdown report: what ships first, then the evidence.

use std::fmt::Write as _;

use super::*;

fn md_escape(s: &str) -> String {
    crate::term::escape(s).replace('|', "\\|")
}

pub(in crate::report) fn render_markdown(a: &Analysis, all: bool) -> String {
    let min_samples = a.judging.selection.min_samples as usize;
    let mut out = String::from("# tunectl report\n\n");
    for l in header(a) {
        let _ = writeln!(out, "- {}", md_escape(&l));
    }
    if let Some(l) = secondary_line(a) {
        let _ = writeln!(out, "- {}", md_escape(&l));
    }
    let unit = &a.objective.unit;
    for class in &a.classes {
        let _ = writeln!(out, "\n## {}\n", md_escape(&class_line(class)));
        if let Some((title, header, rows)) = search_table(class) {
            let _ = writeln!(out, "{}\n", md_escape(&title));
            let _ = writeln!(
                out,
                "| {} |\n|{}",
                header.join(" | "),
                "---|".repeat(header.len())
            );
            for row in rows {
                let cells: Vec<String> = row.iter().map(|c| md_escape(c)).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
            let _ = writeln!(out);
        }
        for cell in &class.cells {
            let _ = writeln!(
                out,
                "### cell {}\n\n{}\n",
                md_escape(&cell.cell_label),
                md_escape(&cell.decision.to_string())
            );
            for n in &cell.notes {
                let _ = writeln!(out, "> note: {}\n", md_escape(&n.to_string()));
            }
            let secondary: String = a
                .metrics
                .iter()
                .map(|m| format!(" {} median ± spread (n) |", md_escape(&m.name)))
                .collect();
            let _ = writeln!(
                out,
                "| role | config (vs baseline) | {} median ± spread | n |{secondary} vs baseline | verdict |\n|---|---|---|---|{}---|---|",
                a.objective.name,
                "---|".repeat(a.metrics.len())
            );
            for (role, r, note) in rows(cell, all) {
                let secondary: String = a
                    .metrics
                    .iter()
                    .map(|m| {
                        let text = r
                            .metrics
                            .get(&m.name)
                            .map(|s| summary_text(s, &m.unit, min_samples))
                            .unwrap_or_else(|| "—".to_string());
                        format!(" {} |", md_escape(&text))
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "| {role} | {} | {} | {} |{secondary} {} | {} |",
                    md_escape(&r.label),
                    md_escape(&value_cell(r, unit)),
                    n_cell(r),
                    speedup_cell(role, r),
                    md_escape(&note)
                );
            }
        }
    }
    for class in &a.classes {
        if class.buckets.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n## what ships on {} (per bucket)\n\n| {} |\n|---|---|---|---|---|---|",
            class.host_class,
            BUCKET_HEADER.join(" | ")
        );
        for row in bucket_rows(class) {
            let cells: Vec<String> = row.iter().map(|c| md_escape(c)).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }
    for class in &a.classes {
        let lines = next_lines(a, &class.next);
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n## what to try next on {}\n\n{}\n",
            class.host_class,
            md_escape(EFFECT_METHOD)
        );
        for l in lines {
            let _ = writeln!(out, "- {}", md_escape(&l));
        }
    }
    let foot = footer(a);
    if !foot.is_empty() {
        out.push('\n');
        for l in foot {
            let _ = writeln!(out, "- {}", md_escape(&l));
        }
    }
    out
}
