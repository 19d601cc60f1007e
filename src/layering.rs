//! The layers of docs/design.md ("Who may import whom"), checked on the
//! source: every `crate::<module>` use in `src/` (comments, strings and
//! `#[cfg(test)]` code left out) must go to a module of a lower layer, or
//! to one listed before it in its own layer. A use the other way, a circle
//! between two modules, or a top-level module in no layer fails the test,
//! naming the edge and the file it is in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules, lowest layer first; within a layer a module may
/// use only those listed before it (the order docs/design.md gives).
const LAYERS: &[&[&str]] = &[
    // Foundations, which know nothing of studies.
    &[
        "canon",
        "stats",
        "term",
        "scrub",
        "safe_read",
        "yaml_out",
        "schema",
        "fmt",
        "shell_quote",
    ],
    // What a study is.
    &["fingerprint", "trial", "spec", "space"],
    // What a study plans and records.
    &["ledger", "search", "plan"],
    // What the records mean.
    &["decide"],
    // What acts on it.
    &["transport", "report", "launch", "tuned"],
    // The commands.
    &["commands", "cli"],
];

/// A use of one top-level module by another: (user, used) → the first file
/// it was seen in.
type Edges = BTreeMap<(String, String), String>;

/// What breaks the layering in `edges`, one line each; empty when nothing
/// does.
fn violations(layers: &[&[&str]], edges: &Edges) -> Vec<String> {
    let rank: BTreeMap<&str, (usize, usize)> = layers
        .iter()
        .enumerate()
        .flat_map(|(l, mods)| mods.iter().enumerate().map(move |(i, m)| (*m, (l, i))))
        .collect();
    let mut out = Vec::new();
    for ((from, to), file) in edges {
        let (Some(&rf), Some(&rt)) = (rank.get(from.as_str()), rank.get(to.as_str())) else {
            for m in [from, to] {
                if !rank.contains_key(m.as_str()) {
                    out.push(format!(
                        "`{m}` is in no layer ({file}: `{from}` uses `{to}`): add it to LAYERS and to docs/design.md"
                    ));
                }
            }
            continue;
        };
        if rt < rf {
            continue;
        }
        if let Some(back) = edges.get(&(to.clone(), from.clone())) {
            // Said once, from the side that may not use the other.
            out.push(format!(
                "`{from}` and `{to}` use each other: `{from}` uses `{to}` in {file}, `{to}` uses `{from}` in {back}"
            ));
        } else if rt.0 > rf.0 {
            out.push(format!(
                "`{from}` (layer {}) uses `{to}` of a higher layer ({}) in {file}",
                rf.0 + 1,
                rt.0 + 1
            ));
        } else {
            out.push(format!(
                "`{from}` uses `{to}`, listed after it in their layer ({}), in {file}",
                rf.0 + 1
            ));
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `src` with comments, string and character literals blanked out (line
/// breaks kept), so that only code is left to read.
fn strip_comments_and_literals(src: &str) -> String {
    let s: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, cs: &[char]| {
        out.extend(cs.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
    };
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        let prev_ident = i > 0 && is_ident(s[i - 1]);
        if c == '/' && next == Some('/') {
            let end = s[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(s.len(), |p| i + p);
            blank(&mut out, &s[i..end]);
            i = end;
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            let mut j = i;
            while j < s.len() {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            let j = j.min(s.len());
            blank(&mut out, &s[i..j]);
            i = j;
        } else if !prev_ident && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            let k = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = s[k..].iter().take_while(|&&c| c == '#').count();
            s.get(k + hashes) == Some(&'"')
        } {
            // A raw string: r"...", r#"..."#, br"...".
            let k = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = s[k..].iter().take_while(|&&c| c == '#').count();
            let mut j = k + hashes + 1;
            while j < s.len() {
                if s[j] == '"'
                    && s[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&c| c == '#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            let j = j.min(s.len());
            blank(&mut out, &s[i..j]);
            i = j;
        } else if c == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            let j = (j + 1).min(s.len());
            blank(&mut out, &s[i..j]);
            i = j;
        } else if c == '\'' && (next == Some('\\') || s.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\''), not a lifetime.
            let mut j = i + 1;
            while j < s.len() && s[j] != '\'' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            let j = (j + 1).min(s.len());
            blank(&mut out, &s[i..j]);
            i = j;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` (already stripped) without its `#[cfg(test)]` items, and the
/// names of the modules those items declare in other files (`mod tests;`).
fn without_test_code(code: &str) -> (String, Vec<String>) {
    let mark: Vec<char> = "#[cfg(test)]".chars().collect();
    let s: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut test_files = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if !s[i..].starts_with(&mark) {
            out.push(s[i]);
            i += 1;
            continue;
        }
        let mut j = i + mark.len();
        // Further attributes, then the item: up to its `;` or its matching `}`.
        let mut depth = 0i32;
        let start = j;
        while j < s.len() {
            match s[j] {
                '[' | '(' => depth += 1,
                ']' | ')' => depth -= 1,
                ';' if depth == 0 => {
                    let item: String = s[start..j].iter().collect();
                    let words: Vec<&str> = item
                        .split(|c: char| !is_ident(c))
                        .filter(|w| !w.is_empty())
                        .collect();
                    if let [.., "mod", name] = words.as_slice() {
                        test_files.push((*name).to_string());
                    }
                    j += 1;
                    break;
                }
                '{' if depth == 0 => {
                    let mut braces = 0;
                    while j < s.len() {
                        match s[j] {
                            '{' => braces += 1,
                            '}' => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        i = j.min(s.len());
    }
    (out, test_files)
}

/// The top-level modules `code` (stripped) uses: `crate::m`,
/// `crate::{m, n::x}`, and `super::` paths that climb out of `depth` (the
/// file's module path length) to the crate's root.
fn used_modules(code: &str, depth: usize) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let s: Vec<char> = code.chars().collect();
    let word_at = |i: usize, w: &str| -> bool {
        let wc: Vec<char> = w.chars().collect();
        s[i..].starts_with(&wc)
            && (i == 0 || !is_ident(s[i - 1]))
            && s.get(i + wc.len()).is_none_or(|&c| !is_ident(c))
    };
    let skip_ws = |mut i: usize| {
        while i < s.len() && s[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let ident_at = |i: usize| -> String { s[i..].iter().take_while(|&&c| is_ident(c)).collect() };
    // After `::` at `i`: the module named there, or each first name of a
    // `{...}` group.
    let names_after = |i: usize, out: &mut BTreeSet<String>| {
        let i = skip_ws(i);
        if s.get(i) == Some(&'{') {
            let mut depth = 0;
            let mut at_start = true;
            let mut j = i;
            while j < s.len() {
                match s[j] {
                    '{' => {
                        depth += 1;
                        at_start = true;
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => at_start = true,
                    c if c.is_whitespace() => {}
                    _ if at_start && depth == 1 => {
                        let w = ident_at(j);
                        if !w.is_empty() {
                            out.insert(w.clone());
                            j += w.chars().count();
                        }
                        at_start = false;
                        continue;
                    }
                    _ => {}
                }
                j += 1;
            }
        } else {
            let w = ident_at(i);
            if !w.is_empty() {
                out.insert(w);
            }
        }
    };
    let mut i = 0;
    while i < s.len() {
        if word_at(i, "crate") && s[skip_ws(i + 5)..].starts_with(&[':', ':']) {
            let j = skip_ws(i + 5) + 2;
            names_after(j, &mut out);
            i = j;
        } else if word_at(i, "super") {
            let mut j = i;
            let mut ups = 0;
            while word_at(j, "super") && s[skip_ws(j + 5)..].starts_with(&[':', ':']) {
                ups += 1;
                j = skip_ws(skip_ws(j + 5) + 2);
            }
            if ups >= depth && ups > 0 {
                names_after(j, &mut out);
            }
            i = j.max(i + 5);
        } else {
            i += 1;
        }
    }
    out
}

/// The module path of a file under `src/` (`spec/study/checks.rs` →
/// `["spec", "study", "checks"]`; `mod.rs` names its folder).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" {
            parts.push(stem.to_string());
        }
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The top-level modules of `src` (its files and folders beside `lib.rs`),
/// and every use of one by another, test code left out.
fn source_graph(src: &Path) -> (BTreeSet<String>, Edges) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    // Files only tests compile: `#[cfg(test)] mod x;` in the file that
    // declares them.
    let mut test_only: BTreeSet<PathBuf> = BTreeSet::new();
    let mut code_of: Vec<(PathBuf, String)> = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let (code, tests) = without_test_code(&strip_comments_and_literals(&text));
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let dir = if matches!(name, "lib.rs" | "main.rs" | "mod.rs") {
            f.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            f.with_extension("")
        };
        for t in tests {
            test_only.insert(dir.join(format!("{t}.rs")));
            test_only.insert(dir.join(&t).join("mod.rs"));
        }
        code_of.push((f.clone(), code));
    }
    let mut modules = BTreeSet::new();
    let mut edges = Edges::new();
    for (f, code) in code_of {
        let rel = f.strip_prefix(src).expect("a file under src");
        let path = module_path(rel);
        if rel == Path::new("lib.rs") || rel == Path::new("main.rs") {
            continue;
        }
        // A test file, or a folder of them (`tests/mod.rs` and what it
        // declares).
        let in_test_folder =
            |t: &PathBuf| t.ends_with("mod.rs") && t.parent().is_some_and(|d| f.starts_with(d));
        if test_only.contains(&f) || test_only.iter().any(in_test_folder) {
            continue;
        }
        let top = path[0].clone();
        modules.insert(top.clone());
        for used in used_modules(&code, path.len()) {
            let exists = src.join(format!("{used}.rs")).is_file()
                || src.join(&used).join("mod.rs").is_file();
            if used != top && exists {
                edges
                    .entry((top.clone(), used))
                    .or_insert_with(|| format!("src/{}", rel.display()));
            }
        }
    }
    (modules, edges)
}

#[test]
fn the_tree_obeys_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (modules, edges) = source_graph(&src);
    let listed: BTreeSet<String> = LAYERS
        .iter()
        .flat_map(|l| l.iter().map(|m| m.to_string()))
        .collect();
    let mut problems = violations(LAYERS, &edges);
    for m in modules.difference(&listed) {
        problems.push(format!(
            "`{m}` is in no layer: add it to LAYERS and to docs/design.md"
        ));
    }
    for m in listed.difference(&modules) {
        problems.push(format!("`{m}` is in LAYERS but not in src/"));
    }
    assert!(
        problems.is_empty(),
        "the modules break docs/design.md's \"Who may import whom\":\n{}",
        problems.join("\n")
    );
    // The reader sees the tree: a checker that read nothing would pass.
    assert!(edges.contains_key(&("commands".to_string(), "spec".to_string())));
    assert!(edges.contains_key(&("spec".to_string(), "fingerprint".to_string())));
}

#[test]
fn a_circle_an_upward_use_and_an_unknown_module_are_named() {
    let layers: &[&[&str]] = &[&["canon"], &["spec", "space"], &["plan"]];
    let edge = |a: &str, b: &str, f: &str| ((a.to_string(), b.to_string()), f.to_string());
    let edges: Edges = [
        edge("space", "spec", "src/space.rs"),
        edge("spec", "space", "src/spec/study/checks.rs"),
        edge("spec", "plan", "src/spec/study/fidelity.rs"),
        edge("spec", "canon", "src/spec/mod.rs"),
        edge("plan", "canon", "src/plan/mod.rs"),
        edge("plan", "extra", "src/plan/mod.rs"),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        violations(layers, &edges),
        [
            "`extra` is in no layer (src/plan/mod.rs: `plan` uses `extra`): add it to LAYERS and to docs/design.md",
            "`spec` (layer 2) uses `plan` of a higher layer (3) in src/spec/study/fidelity.rs",
            "`spec` and `space` use each other: `spec` uses `space` in src/spec/study/checks.rs, `space` uses `spec` in src/space.rs",
        ]
    );
    // Within a layer, only the listed order: `spec` before `space`.
    let edges: Edges = [edge("spec", "space", "src/spec/x.rs")]
        .into_iter()
        .collect();
    assert_eq!(
        violations(layers, &edges),
        ["`spec` uses `space`, listed after it in their layer (2), in src/spec/x.rs"]
    );
    let edges: Edges = [edge("space", "spec", "src/space.rs")]
        .into_iter()
        .collect();
    assert!(violations(layers, &edges).is_empty());
}

#[test]
fn comments_strings_and_test_code_are_not_uses() {
    let src = r##"
//! See crate::a for more.
use crate::{b, c::{d, e}, f::g as h};
use std::fmt; /* crate::i /* nested crate::j */ crate::k */
fn x<'a>(s: &'a str) -> char {
    let _ = "crate::l \" crate::m";
    let _ = r#"crate::n "quoted" "#;
    let _ = crate::o::p(s);
    let _ = super::q::r;
    '"'
}
const Y: u8 = crate :: s::T;
#[cfg(test)]
mod tests {
    use crate::t;
    fn u() { crate::v::w() }
}
#[cfg(test)]
mod more_tests;
#[cfg(test)]
use crate::x;
fn z() { crate::zz::y() }
"##;
    let (code, test_files) = without_test_code(&strip_comments_and_literals(src));
    assert_eq!(test_files, ["more_tests"]);
    let at_top = used_modules(&code, 1);
    let want: BTreeSet<String> = ["b", "c", "f", "o", "q", "s", "zz"]
        .map(String::from)
        .into();
    assert_eq!(at_top, want);
    // One folder down, `super::q` stays inside the module.
    let nested = used_modules(&code, 2);
    assert!(!nested.contains("q") && nested.contains("zz"), "{nested:?}");
}
