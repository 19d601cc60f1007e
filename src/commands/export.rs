//! `tunectl export`: one tuned file per host class, the knobs that ship per
//! bucket.

use serde::Serialize;

use super::inputs::{Use, load_analysis};
use super::{CliError, failed, note, print_json, say, schema};
use crate::tuned;

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// A study file, or a study id in the ledger.
    pub study: String,
    /// Ledger URL or path (default: the study file's `ledger`, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    /// Directory for the tuned files (created if missing).
    #[arg(long, default_value = "tuned")]
    pub out: std::path::PathBuf,
    #[command(flatten)]
    pub output: crate::commands::FormatArgs,
}

/// `export --format json` (docs/json.md): what was written.
#[derive(Serialize)]
struct ExportDoc {
    schema: &'static str,
    study: String,
    spec_hash: String,
    out: String,
    files: Vec<WrittenFile>,
}

/// One tuned file and what its buckets ship.
#[derive(Serialize)]
struct WrittenFile {
    path: String,
    host_class: String,
    label: String,
    buckets: usize,
    with_winner: usize,
    keeping_baseline: usize,
    pending: usize,
}

/// Tuned files in `dir` of a study other than `study` or of another spec:
/// `file (study <id>, spec <hash12>)`. Files that are not tuned files are
/// not looked at.
fn other_studies(dir: &std::path::Path, study: &str, spec_hash: &str) -> Vec<String> {
    tuned::yaml_files(dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let text =
                crate::safe_read::read_text(&p, crate::safe_read::MAX_TUNED_FILE_BYTES).ok()?;
            let t = tuned::parse(&p, &text).ok()?;
            (t.study != study || t.spec_hash != spec_hash).then(|| {
                format!(
                    "{} (study {}, spec {})",
                    p.display(),
                    t.study,
                    t.spec_hash.chars().take(12).collect::<String>()
                )
            })
        })
        .collect()
}

/// Write the tuned files of a study into `--out`.
pub async fn run(a: ExportArgs) -> Result<(), CliError> {
    let analysis = load_analysis(&a.study, a.ledger.as_deref(), Use::Ship).await?;
    if analysis.classes.is_empty() {
        return Err(CliError::Failed(format!(
            "study `{}` has no results in the ledger yet: nothing to export; run `tunectl launch` first",
            analysis.study_id
        )));
    }
    std::fs::create_dir_all(&a.out)
        .map_err(|e| failed(format!("{}: cannot create: {e}", a.out.display())))?;
    // `apply` reads a directory as one study's files: another study's (or
    // another spec's) would be overwritten class by class, or mixed in.
    let others = other_studies(&a.out, &analysis.study_id, &analysis.spec_hash);
    if !others.is_empty() {
        return Err(CliError::Invalid(format!(
            "{} already holds tuned files of another study or spec ({}); export study `{}` into another --out directory (apply reads a directory as one study's files)",
            a.out.display(),
            others.join("; "),
            analysis.study_id
        )));
    }
    let json = a.output.json(false);
    let mut written = Vec::new();
    for class in &analysis.classes {
        let (name, text) = tuned::export(&analysis, class);
        let path = a.out.join(&name);
        // Write then rename: a reader never sees half a file.
        let tmp = a.out.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| failed(format!("{}: cannot write: {e}", path.display())))?;
        if !json {
            say!("{}", path.display());
        }
        let pending = class
            .buckets
            .iter()
            .filter(|b| tuned::is_pending(b))
            .count();
        let won = class
            .buckets
            .iter()
            .filter(|b| !tuned::is_pending(b) && b.winner.is_some())
            .count();
        let keeping = class.buckets.len() - won - pending;
        note!(
            "{} · {}: {} ({won} with a winner, {keeping} keeping the baseline, {pending} pending)",
            class.host_class,
            class.label,
            crate::fmt::count(class.buckets.len() as u64, "bucket", "buckets"),
        );
        written.push(WrittenFile {
            path: path.display().to_string(),
            host_class: class.host_class.clone(),
            label: class.label.clone(),
            buckets: class.buckets.len(),
            with_winner: won,
            keeping_baseline: keeping,
            pending,
        });
    }
    if json {
        print_json(&ExportDoc {
            schema: schema::EXPORT,
            study: analysis.study_id.clone(),
            spec_hash: analysis.spec_hash.clone(),
            out: a.out.display().to_string(),
            files: written,
        })?;
    }
    Ok(())
}
