//! The page: its sections, tables, captions, style and script.

use super::*;

/// The page.
pub fn render_html(a: &Analysis, all: bool) -> String {
    let mut out = String::new();
    let title = format!("tunectl report: {} ({})", a.study_id, a.level);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\" data-rendered=\"no\" data-script-errors=\"\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{STYLE}</style>\n<script>{SCRIPT}</script>\n</head>\n<body>\n",
        esc(&title)
    );
    let _ = writeln!(
        out,
        "<header><h1>tunectl report · {} <span class=\"level level-{}\">{}</span></h1>",
        esc(&a.study_id),
        a.level.as_str(),
        a.level.as_str().to_uppercase()
    );
    for l in header(a) {
        let _ = writeln!(out, "<p class=\"meta\">{}</p>", esc(&l));
    }
    out.push_str("</header>\n");
    if a.classes.len() > 1 {
        out.push_str("<nav><ul>");
        for c in &a.classes {
            let _ = write!(
                out,
                "<li><a href=\"#class-{}\">{}</a></li>",
                slug(&c.host_class),
                esc(&format!("{} · {}", c.host_class, c.label))
            );
        }
        out.push_str("</ul></nav>\n");
    }
    for class in &a.classes {
        class_section(&mut out, a, class, all);
    }
    let notes = footer(a);
    if !notes.is_empty() {
        out.push_str("<footer>");
        for l in notes {
            let _ = writeln!(out, "<p>{}</p>", esc(&l));
        }
        out.push_str("</footer>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

pub(super) fn class_section(out: &mut String, a: &Analysis, class: &ClassReport, all: bool) {
    let cid = slug(&class.host_class);
    let _ = writeln!(
        out,
        "<section class=\"host-class\" id=\"class-{cid}\" data-host-class=\"{}\">\n<h2>{}</h2>",
        esc(&class.host_class),
        esc(&class_line(class))
    );

    // 1. What ships.
    let _ = writeln!(
        out,
        "<h3>What ships on {} (per bucket)</h3>",
        esc(&class.host_class)
    );
    if class.buckets.is_empty() {
        out.push_str("<p class=\"empty\">no bucket has a decision yet</p>\n");
    } else {
        let _ = write!(out, "<table class=\"ships\" id=\"ships-{cid}\"><thead><tr>");
        for h in BUCKET_HEADER {
            let _ = write!(out, "<th>{}</th>", esc(h));
        }
        out.push_str("<th>per cell: winner vs baseline</th></tr></thead><tbody>\n");
        for b in &class.buckets {
            let row = bucket_row(b);
            let _ = write!(out, "<tr class=\"level-{}\">", b.level.as_str());
            for cell in &row {
                let _ = write!(out, "<td>{}</td>", esc(cell));
            }
            let unit = &a.objective.unit;
            let per_cell: Vec<String> = b
                .per_cell
                .iter()
                .map(|c| {
                    let base = c
                        .baseline
                        .as_ref()
                        .map(|r| format!("baseline {}", summary_text(r, unit)))
                        .unwrap_or_else(|| "baseline not measured".to_string());
                    match &c.winner {
                        Some(w) => format!(
                            "{}: {} — {}; {} {}",
                            c.cell_label,
                            speedup_text(w),
                            base,
                            w.label,
                            summary_text(w, unit)
                        ),
                        None => format!("{}: {base}", c.cell_label),
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "<td><ul>{}</ul></td></tr>",
                per_cell
                    .iter()
                    .map(|s| format!("<li>{}</li>", esc(s)))
                    .collect::<String>()
            );
        }
        out.push_str("</tbody></table>\n");
    }

    // 2. Across the workload, where one cell axis varies.
    if let Some(svg) = workload_chart(a, class, &format!("workload-{cid}")) {
        let axis = workload_axis(&class.cells)
            .map(|(axis, _)| axis)
            .unwrap_or_default();
        let _ = writeln!(out, "<h3>Across the workload ({})</h3>", esc(&axis));
        let _ = writeln!(out, "<figure>{svg}</figure>");
    }

    // 3. Speedup per config.
    let _ = writeln!(out, "<h3>Speedup per config</h3>");
    for (i, cell) in class.cells.iter().enumerate() {
        figure(
            out,
            speedup_chart(a, class, cell, &format!("speedup-{cid}-{i}")),
            &speedup_legend(cell),
        );
    }

    // 3. Sample distributions.
    let _ = writeln!(out, "<h3>Samples of the baseline and the winner</h3>");
    for (i, cell) in class.cells.iter().enumerate() {
        figure(
            out,
            samples_chart(a, class, cell, &format!("samples-{cid}-{i}")),
            "",
        );
    }

    // 4. Drift anchors.
    let _ = writeln!(out, "<h3>Drift anchors (baseline re-measured)</h3>");
    let anchors: Vec<&AttemptRecord> = class
        .trace
        .iter()
        .filter(|t| t.role == RoleKind::Anchor)
        .collect();
    if anchors.is_empty() {
        out.push_str(
            "<p class=\"empty\">no baseline anchors recorded on this class (measurement.anchor_every is 0, or too few candidates ran per host)</p>\n",
        );
    } else {
        for (i, cell) in class.cells.iter().enumerate() {
            let here: Vec<&AttemptRecord> = anchors
                .iter()
                .filter(|t| t.cell_label == cell.cell_label)
                .copied()
                .collect();
            if here.is_empty() {
                continue;
            }
            figure(
                out,
                anchors_chart(a, class, cell, &here, &format!("anchors-{cid}-{i}")),
                "",
            );
        }
    }

    // 5. Search progress.
    let rungs: Vec<&AttemptRecord> = class
        .trace
        .iter()
        .filter(|t| t.role == RoleKind::Rung)
        .collect();
    if !rungs.is_empty() {
        let _ = writeln!(out, "<h3>Search progress</h3>");
        // The class's cell order, then any cell only the search reached.
        let mut cells: Vec<&str> = Vec::new();
        let known = class.cells.iter().map(|c| c.cell_label.as_str());
        for label in known.chain(rungs.iter().map(|r| r.cell_label.as_str())) {
            if !cells.contains(&label) && rungs.iter().any(|r| r.cell_label == label) {
                cells.push(label);
            }
        }
        for (i, cell) in cells.iter().enumerate() {
            let here: Vec<&AttemptRecord> = rungs
                .iter()
                .filter(|r| r.cell_label == *cell)
                .copied()
                .collect();
            figure(
                out,
                search_chart(a, class, cell, &here, &format!("search-{cid}-{i}")),
                "",
            );
        }
    }

    // 6. Trade-offs against secondary metrics.
    if !a.metrics.is_empty() {
        let _ = writeln!(
            out,
            "<h3>Trade-offs: objective against secondary metrics</h3>"
        );
        for (i, cell) in class.cells.iter().enumerate() {
            for (j, m) in a.metrics.iter().enumerate() {
                if let Some(svg) = pareto_chart(a, class, cell, m, &format!("pareto-{cid}-{i}-{j}"))
                {
                    figure(out, svg, "");
                }
            }
        }
    }

    // 7. Every measured config across its knobs.
    let parallel: Vec<String> = class
        .cells
        .iter()
        .enumerate()
        .filter_map(|(i, cell)| parallel_chart(a, class, cell, &format!("parallel-{cid}-{i}")))
        .collect();
    if !parallel.is_empty() {
        let _ = writeln!(out, "<h3>Each config across its knobs</h3>");
        for svg in parallel {
            figure(out, svg, &parallel_legend());
        }
    }

    // 8. What to try next.
    next_section(out, a, class, &format!("effects-{cid}"));

    // 9. Evidence tables.
    let _ = writeln!(out, "<h3>Evidence</h3>");
    if let Some((title, head, rows)) = search_table(class) {
        let _ = writeln!(out, "<p class=\"table-title\">{}</p>", esc(&title));
        table(out, "search", &format!("search-table-{cid}"), &head, &rows);
    }
    for (i, cell) in class.cells.iter().enumerate() {
        let _ = writeln!(
            out,
            "<p class=\"table-title\">cell {} · {}</p>",
            esc(&cell.cell_label),
            esc(&cell.decision.to_string())
        );
        for n in &cell.notes {
            let _ = writeln!(out, "<p class=\"note\">note: {}</p>", esc(&n.to_string()));
        }
        let head = vec![
            "role".to_string(),
            "config (vs baseline)".to_string(),
            format!("{} median ± spread", a.objective.name),
            "n".to_string(),
        ];
        // Each secondary metric beside the objective, with its own n and
        // spread.
        let head: Vec<String> = head
            .into_iter()
            .chain(
                a.metrics
                    .iter()
                    .map(|m| format!("{} median ± spread (n)", m.name)),
            )
            .chain(["vs baseline".to_string(), "verdict".to_string()])
            .collect();
        let min_samples = a.judging.selection.min_samples as usize;
        let body: Vec<Vec<String>> = rows(cell, all)
            .into_iter()
            .map(|(role, r, note)| {
                let mut row = vec![
                    role.to_string(),
                    r.label.clone(),
                    value_cell(r, &a.objective.unit),
                    n_cell(r),
                ];
                row.extend(a.metrics.iter().map(|m| {
                    r.metrics
                        .get(&m.name)
                        .map(|s| crate::report::render::summary_text(s, &m.unit, min_samples))
                        .unwrap_or_else(|| "—".to_string())
                }));
                row.push(speedup_cell(role, r));
                row.push(note);
                row
            })
            .collect();
        table(
            out,
            "evidence",
            &format!("evidence-{cid}-{i}"),
            &head,
            &body,
        );
        let shown = rows(cell, false)
            .iter()
            .filter(|(role, _, _)| {
                *role != crate::report::render::RowRole::Baseline
                    && *role != crate::report::render::RowRole::Rejected
            })
            .count();
        let hidden = cell.eligible.len().saturating_sub(shown);
        if !all && hidden > 0 {
            let _ = writeln!(
                out,
                "<p class=\"note\">({hidden} more {}; --all shows them)</p>",
                if hidden == 1 {
                    "eligible config"
                } else {
                    "eligible configs"
                }
            );
        }
    }
    out.push_str("</section>\n");
}

/// A table the page's script can sort (by a click on a header) and filter
/// (by words typed above it); `id` names it in the page's address, where
/// its sort and filter are kept.
pub(super) fn table(
    out: &mut String,
    class: &str,
    id: &str,
    head: &[String],
    rows: &[Vec<String>],
) {
    let _ = write!(
        out,
        "<table class=\"{class}\" id=\"{}\"><thead><tr>",
        esc(id)
    );
    for h in head {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for c in row {
            let _ = write!(out, "<td>{}</td>", esc(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

pub(super) fn figure(out: &mut String, svg: String, legend: &str) {
    let _ = writeln!(out, "<figure>{svg}{legend}</figure>");
}

/// The baseline as axis labels name it.
pub(super) fn baseline_text(a: &Analysis, cell: &CellReport) -> String {
    match &cell.baseline {
        Some(b) => format!("baseline {}", summary_text(b, &unit_of(&a.objective))),
        None => "baseline not measured".to_string(),
    }
}

pub(super) fn speedup_legend(cell: &CellReport) -> String {
    let mut reasons: Vec<&str> = cell.rejected.iter().filter_map(reason).collect();
    reasons.sort();
    reasons.dedup();
    let mut items = vec![
        format!(
            "<li><span class=\"swatch\" style=\"background:{}\"></span>fastest here (wins this cell; what ships is decided per bucket, above)</li>",
            css_color(&WINNER)
        ),
        format!(
            "<li><span class=\"swatch\" style=\"background:{}\"></span>eligible, with its 95% interval</li>",
            css_color(&ELIGIBLE)
        ),
        format!(
            "<li><span class=\"swatch hollow\" style=\"border-color:{}\"></span>no interval (too few runs or samples)</li>",
            css_color(&UNKNOWN)
        ),
        format!(
            "<li><span class=\"swatch line\" style=\"background:{}\"></span>1 + min_improvement: a win's lower bound must clear it; bars: 95% intervals</li>",
            css_color(&THRESHOLD)
        ),
    ];
    for r in reasons {
        items.push(format!(
            "<li><span class=\"swatch cross\" style=\"color:{}\">×</span>rejected: {}</li>",
            css_color(&reason_color(r)),
            esc(r)
        ));
    }
    format!("<ul class=\"legend\">{}</ul>", items.concat())
}

pub(super) const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1180px;padding:16px 24px;color:#222;background:#fff;font-size:14px;line-height:1.4}
h1{font-size:22px;margin:8px 0}
h2{font-size:17px;margin:28px 0 8px;padding-top:12px;border-top:2px solid #ccc}
h3{font-size:15px;margin:20px 0 6px}
p.meta{margin:2px 0;color:#444;font-size:13px}
.level{font-size:13px;padding:2px 8px;border-radius:4px;vertical-align:middle}
.level-verdict{background:#d8f0d8;color:#1d5e1d}
.level-draft{background:#fbe9c9;color:#7a4b00}
table{border-collapse:collapse;margin:6px 0 14px;font-size:12.5px;width:100%}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}
tr.level-verdict td:nth-child(5){color:#1d5e1d;font-weight:600}
tr.level-draft td:nth-child(5){color:#7a4b00;font-weight:600}
td ul{margin:0;padding-left:16px}
figure{margin:8px 0 16px}
svg.chart{max-width:100%;height:auto;display:block}
svg.chart .tip{fill:transparent;stroke:none}
svg.chart .tip:hover{fill:rgba(0,0,0,.12)}
ul.legend{list-style:none;padding:0;margin:2px 0 0;font-size:12px;color:#333;display:flex;flex-wrap:wrap;gap:4px 16px}
.swatch{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:5px;vertical-align:middle}
.swatch.hollow{background:transparent;border:2px solid;width:7px;height:7px}
.swatch.line{border-radius:0;height:2px;width:14px}
.swatch.cross{background:none;width:auto;height:auto;font-weight:700;border-radius:0}
p.table-title{margin:14px 0 2px;font-weight:600}
p.note,p.empty{color:#555;font-style:italic;margin:4px 0}
nav ul{padding-left:18px}
footer{margin-top:24px;color:#555;font-size:12.5px;border-top:1px solid #ddd}
div.table-tools{display:flex;gap:10px;align-items:center;margin:6px 0 0;font-size:12px;color:#555}
div.table-tools input{font:inherit;padding:2px 6px;min-width:260px}
th[title]{cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" ▲"}
th[aria-sort=descending]::after{content:" ▼"}
ul.next{margin:4px 0 12px;padding-left:18px}
"#;

/// The page's only script. It records script errors and marks the page
/// as rendered (tests read both from the DOM a headless browser dumps),
/// and makes each table sortable (a click on a header; again to reverse)
/// and filterable (rows that contain every word typed above it); cells
/// that start with a number sort by it, cells without one (`—`) come last
/// in either direction. A
/// table's sort and filter are kept in the page's address
/// (`#ID.sort=3d&ID.q=words`: column 3, descending), so a link opens the
/// same view; the table carries them as `data-sort` and `data-shown`.
pub(super) const SCRIPT: &str = r#"
(function(){var d=document.documentElement;
window.addEventListener('error',function(e){d.setAttribute('data-script-errors',(d.getAttribute('data-script-errors')||'')+(e.message||'error')+';');});
var state=new URLSearchParams(location.hash.slice(1));
function keep(){var s=new URLSearchParams();state.forEach(function(v,k){if(/\.(sort|q)$/.test(k)&&v)s.set(k,v);});
try{history.replaceState(null,'','#'+s.toString());}catch(e){}}
function num(t){var m=t.replace(/,/g,'').match(/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?/i);return m?parseFloat(m[0]):null;}
function cmp(a,b){var x=num(a),y=num(b);if(x!==null&&y!==null&&x!==y)return x-y;return a.localeCompare(b,undefined,{numeric:true});}
function setup(t){var id=t.id,body=t.tBodies[0];if(!id||!body)return;var rows=Array.prototype.slice.call(body.rows),heads=t.tHead?t.tHead.rows[0].cells:[];
var bar=document.createElement('div');bar.className='table-tools';
var box=document.createElement('input');box.type='search';box.placeholder='filter rows (every word must match)';box.setAttribute('aria-label','filter the rows of '+id);
var shown=document.createElement('span');shown.className='shown';bar.appendChild(box);bar.appendChild(shown);t.parentNode.insertBefore(bar,t);
function filter(){var words=box.value.toLowerCase().split(/\s+/).filter(Boolean),n=0;
rows.forEach(function(r){var text=r.textContent.toLowerCase();var hit=words.every(function(w){return text.indexOf(w)>=0;});r.hidden=!hit;if(hit)n++;});
shown.textContent=n+' of '+rows.length+' rows';t.setAttribute('data-shown',String(n));}
function sort(col,dir){if(!(col>=0&&col<heads.length))return;var sign=dir==='d'?-1:1;
function at(r){var c=r.cells[col];return c?c.textContent.trim():'';}
rows.sort(function(a,b){var x=at(a),y=at(b),nx=num(x)===null,ny=num(y)===null;if(nx!==ny)return nx?1:-1;return sign*cmp(x,y)||(a._i-b._i);});
rows.forEach(function(r){body.appendChild(r);});
for(var i=0;i<heads.length;i++)heads[i].removeAttribute('aria-sort');heads[col].setAttribute('aria-sort',dir==='d'?'descending':'ascending');
t.setAttribute('data-sort',col+dir);}
rows.forEach(function(r,i){r._i=i;});
Array.prototype.forEach.call(heads,function(h,col){h.title='sort by this column';h.tabIndex=0;
function go(){var dir=h.getAttribute('aria-sort')==='ascending'?'d':'a';sort(col,dir);state.set(id+'.sort',col+dir);keep();}
h.addEventListener('click',go);h.addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();go();}});});
box.addEventListener('input',function(){filter();state.set(id+'.q',box.value);keep();});
var s=/^(\d+)([ad])$/.exec(state.get(id+'.sort')||'');if(s)sort(parseInt(s[1],10),s[2]);
box.value=state.get(id+'.q')||'';filter();}
document.addEventListener('DOMContentLoaded',function(){Array.prototype.forEach.call(document.querySelectorAll('table[id]'),setup);
d.setAttribute('data-charts',String(document.querySelectorAll('svg.chart').length));d.setAttribute('data-rendered','yes');});})();
"#;
