//! `tunectl export`: one tuned file per host class, the knobs that ship per
//! bucket.

use serde::Serialize;

use super::inputs::{Use, load_analysis, load_analysis_in};
use super::{CliError, failed, note, print_json, say, schema};
use crate::tuned;

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// A study file, or a study id in the ledger.
    pub study: String,
    /// Ledger URL or path (default: the study file's `ledger`, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    /// Directory for the tuned files (created if missing; default:
    /// `tuned`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// `text` or `json`: write the tuned files and say what was written
    /// (`json`: docs/json.md). `parquet` or `csv`: write the study as data
    /// instead, one row per attempt (docs/ledger.md).
    #[arg(long, value_enum, default_value_t = ExportFormat::Text)]
    pub format: ExportFormat,
    /// With `parquet` or `csv`: one row per sample of every metric instead
    /// of one per attempt.
    #[arg(long)]
    pub samples: bool,
    /// With `parquet` or `csv`: the file to write (default: `<study>.parquet`,
    /// or `<study>-samples.parquet`, in the working directory; CSV goes to
    /// stdout).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Tuned files; the paths written on stdout.
    Text,
    /// Tuned files; what was written as one JSON document.
    Json,
    /// The study as data, a Parquet file.
    Parquet,
    /// The study as data, CSV.
    Csv,
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

/// Write the tuned files of a study into `--out`, or with `--format
/// parquet|csv` the study as data.
pub async fn run(a: ExportArgs) -> Result<(), CliError> {
    if matches!(a.format, ExportFormat::Parquet | ExportFormat::Csv) {
        if a.out.is_some() {
            return Err(CliError::Invalid(
                "--out DIR is where tuned files go; the study as data goes to -o FILE (--format parquet or csv)"
                    .to_string(),
            ));
        }
        return export_data(&a).await;
    }
    let out_dir = a
        .out
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("tuned"));
    if a.samples || a.output.is_some() {
        return Err(CliError::Invalid(format!(
            "{} goes with --format parquet or csv (the study as data); tuned files go to --out DIR",
            if a.samples {
                "--samples"
            } else {
                "-o/--output"
            }
        )));
    }
    let analysis = load_analysis(&a.study, a.ledger.as_deref(), Use::Ship).await?;
    if analysis.classes.is_empty() {
        return Err(CliError::Failed(format!(
            "study `{}` has no results in the ledger yet: nothing to export; run `tunectl launch` first",
            analysis.study_id
        )));
    }
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| failed(format!("{}: cannot create: {e}", out_dir.display())))?;
    // `apply` reads a directory as one study's files: another study's (or
    // another spec's) would be overwritten class by class, or mixed in.
    let others = other_studies(&out_dir, &analysis.study_id, &analysis.spec_hash);
    if !others.is_empty() {
        return Err(CliError::Invalid(format!(
            "{} already holds tuned files of another study or spec ({}); export study `{}` into another --out directory (apply reads a directory as one study's files)",
            out_dir.display(),
            others.join("; "),
            analysis.study_id
        )));
    }
    let json = a.format == ExportFormat::Json;
    let mut written = Vec::new();
    for class in &analysis.classes {
        let (name, text) = tuned::export(&analysis, class);
        let path = out_dir.join(&name);
        // Write then rename: a reader never sees half a file.
        let tmp = out_dir.join(format!(".{name}.tmp"));
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
            out: out_dir.display().to_string(),
            files: written,
        })?;
    }
    Ok(())
}

/// `export --format parquet|csv`: the study's attempts (or samples) as a
/// table, written atomically to `-o` (CSV: stdout without it).
async fn export_data(a: &ExportArgs) -> Result<(), CliError> {
    use crate::report::data;
    let (analysis, ledger) = load_analysis_in(&a.study, a.ledger.as_deref(), Use::Show).await?;
    let scan = ledger.scan(&analysis.study_id).await.map_err(failed)?;
    let table = data::study_table(&analysis, &scan, a.samples);
    let attempts = data::attempts_of(&analysis, &scan);
    if attempts == 0 {
        return Err(CliError::Failed(format!(
            "study `{}` has no attempts in the ledger yet: nothing to export; run `tunectl launch` first",
            analysis.study_id
        )));
    }
    let what = format!(
        "{} of {} ({} columns)",
        crate::fmt::count(
            table.rows as u64,
            if a.samples {
                "sample row"
            } else {
                "attempt row"
            },
            if a.samples {
                "sample rows"
            } else {
                "attempt rows"
            },
        ),
        analysis.study_id,
        table.columns.len()
    );
    let bytes = match a.format {
        ExportFormat::Csv => table.to_csv().into_bytes(),
        _ => {
            let mut buf = Vec::new();
            data::write_parquet(&table, data::metadata(&analysis, a.samples), &mut buf)
                .map_err(|e| failed(format!("cannot encode the Parquet file: {e}")))?;
            buf
        }
    };
    let path = match (&a.output, a.format) {
        (Some(p), _) => p.clone(),
        (None, ExportFormat::Csv) => {
            crate::term::out(&String::from_utf8_lossy(&bytes));
            note!("{what}");
            return Ok(());
        }
        (None, _) => std::path::PathBuf::from(format!(
            "{}{}.parquet",
            analysis.study_id,
            if a.samples { "-samples" } else { "" }
        )),
    };
    // Write then rename: a reader never sees half a file.
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, &bytes)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            failed(format!("{}: cannot write: {e}", path.display()))
        })?;
    say!("{}", path.display());
    note!("{what}");
    Ok(())
}
