//! The correctness gate.
//!
//! First half, when an attempt is recorded: classify how a run failed from
//! its exit status, signal, timeout and stderr ([`Classifier`]), and read
//! the numbers of the tolerance files ([`parse_values`]).
//!
//! Second half, when results are judged ([`crate::decide`]): compare a
//! candidate's outputs with the baseline's measured on the same host class
//! and cell ([`compare_outputs`]): the digest exactly, the tolerance files
//! numerically.

use std::collections::BTreeMap;
use std::fmt;

use regex::{Regex, RegexSet};

use crate::ledger::records::{AttemptRecord, ExitInfo, FailureClass};

/// Default stderr patterns of the `compile_failure` class.
pub const COMPILE_PATTERNS: &[&str] = &[
    r"BackendCompilerFailed",
    r"InductorError",
    r"torch\._dynamo\.exc\.",
    r"torch\._inductor\.exc\.",
    r"triton\.compiler\.errors\.",
    r"(?i)triton.*compil(e|ation) (error|failed)",
    r"ptxas (fatal|error)",
    r"ptxas .*error",
    r"nvcc (fatal|error)",
    r"error: command .*nvcc.* failed",
];

/// Default stderr patterns of the `oom` class.
pub const OOM_PATTERNS: &[&str] = &[
    r"CUDA out of memory",
    r"CUDA error: out of memory",
    r"HIP out of memory",
    r"torch\.OutOfMemoryError",
    r"torch\.cuda\.OutOfMemoryError",
    r"CUBLAS_STATUS_ALLOC_FAILED",
    r"CUDNN_STATUS_ALLOC_FAILED",
    r"cudaErrorMemoryAllocation",
    r"memory allocation of \d+ bytes failed",
    r"std::bad_alloc",
    r"MemoryError",
    r"died due to signal 9",
    r"Killed signal terminated program",
    // Slurm's step daemon when the job's cgroup ran out of memory.
    r"Detected \d+ oom[-_]kill events?",
];

/// The patterns of one failure class, the study's first.
struct ClassPatterns {
    class: FailureClass,
    set: RegexSet,
    each: Vec<Regex>,
}

impl ClassPatterns {
    fn new(class: FailureClass, study: &[String], defaults: &[&str]) -> Result<Self, PatternError> {
        let mut each = Vec::new();
        for (index, p) in study.iter().enumerate() {
            let re = Regex::new(p).map_err(|error| PatternError::Invalid {
                class,
                index,
                pattern: p.clone(),
                error,
            })?;
            each.push(re);
        }
        for p in defaults {
            each.push(Regex::new(p).map_err(|error| PatternError::Default {
                pattern: p.to_string(),
                error,
            })?);
        }
        let set = RegexSet::new(each.iter().map(Regex::as_str))
            .map_err(|error| PatternError::Set { class, error })?;
        Ok(ClassPatterns { class, set, each })
    }

    /// The first pattern (in order) that matches, and the last line it
    /// matches on (if it matches within a line).
    fn find(&self, text: &str) -> Option<Option<String>> {
        let first = self.set.matches(text).into_iter().next()?;
        let re = &self.each[first];
        let line = text
            .lines()
            .rev()
            .find(|l| re.is_match(l))
            .map(|l| l.trim().chars().take(200).collect());
        Some(line)
    }
}

/// A line of stderr that states an error.
const ERROR_LINE: &str =
    r"(?i)(error|panic|exception|fatal|abort|overflow|failed|out of memory|segmentation)";

/// Why a classifier could not be built from a study's `gate.patterns`.
#[derive(Debug)]
pub enum PatternError {
    /// A class that takes no patterns.
    UnknownClass(String),
    /// A study's pattern that is not a regular expression.
    Invalid {
        class: FailureClass,
        index: usize,
        pattern: String,
        error: regex::Error,
    },
    /// One of tunectl's own patterns (checked by the tests).
    Default {
        pattern: String,
        error: regex::Error,
    },
    /// The patterns of a class, together.
    Set {
        class: FailureClass,
        error: regex::Error,
    },
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatternError::UnknownClass(class) => write!(
                f,
                "gate.patterns: no failure class `{class}` takes patterns (expected one of: {})",
                crate::spec::study::PATTERN_CLASSES.join(", ")
            ),
            PatternError::Invalid {
                class,
                index,
                pattern,
                error,
            } => write!(
                f,
                "gate.patterns.{}[{index}]: invalid regular expression `{pattern}`: {error}",
                class.as_str()
            ),
            PatternError::Default { pattern, error } => {
                write!(f, "default pattern `{pattern}`: {error}")
            }
            PatternError::Set { class, error } => {
                write!(f, "{} patterns: {error}", class.as_str())
            }
        }
    }
}

impl std::error::Error for PatternError {}

/// Classifies failed runs. Classes are tried in the order `compile_failure`,
/// then `oom`; within a class the study's patterns come before the defaults.
pub struct Classifier {
    classes: Vec<ClassPatterns>,
    /// Lines that state an error (preferred over backtrace frames as the
    /// failure's one-line detail).
    error_line: Regex,
}

impl Classifier {
    /// The defaults extended with a study's `gate.patterns` (class name →
    /// regular expressions; classes `compile_failure` and `oom`).
    pub fn new(extra: &BTreeMap<String, Vec<String>>) -> Result<Classifier, PatternError> {
        for class in extra.keys() {
            if !crate::spec::study::PATTERN_CLASSES.contains(&class.as_str()) {
                return Err(PatternError::UnknownClass(class.clone()));
            }
        }
        let study = |class: FailureClass| {
            extra
                .get(class.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default()
        };
        // Out-of-memory first: a compiler that ran out of memory (Inductor
        // autotuning hitting CUDA OOM, cicc killed by the OOM killer) is a
        // memory problem of the config, not a compiler bug.
        let classes = vec![
            ClassPatterns::new(FailureClass::Oom, study(FailureClass::Oom), OOM_PATTERNS)?,
            ClassPatterns::new(
                FailureClass::CompileFailure,
                study(FailureClass::CompileFailure),
                COMPILE_PATTERNS,
            )?,
        ];
        let error_line = Regex::new(ERROR_LINE).map_err(|error| PatternError::Default {
            pattern: ERROR_LINE.to_string(),
            error,
        })?;
        Ok(Classifier {
            classes,
            error_line,
        })
    }
}

impl Default for Classifier {
    fn default() -> Self {
        match Classifier::new(&BTreeMap::new()) {
            Ok(c) => c,
            // The defaults are constants, checked by the tests.
            Err(e) => unreachable!("default patterns: {e}"),
        }
    }
}

/// A backtrace frame (`12: core::panicking::panic_fmt`, `at src/x.rs:3`,
/// `File "x.py", line 3, in f`): never the failure's one-line detail.
fn is_frame(line: &str) -> bool {
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    (digits > 0 && line[digits..].starts_with(": "))
        || line.starts_with("at ")
        || line.starts_with("File \"")
}

/// The one line of stderr that best says what went wrong: the last line
/// that states an error, skipping runtime hints ("note: run with
/// RUST_BACKTRACE=1") and backtrace frames; for a Rust panic, the message on
/// the line after "panicked at"; else the last meaningful line.
fn detail_line(stderr: &str, error_line: &regex::Regex) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("note:")
                && !l.contains("RUST_BACKTRACE")
                && !l.starts_with("stack backtrace")
                && !is_frame(l)
        })
        .collect();
    let pick = match lines.iter().rposition(|l| error_line.is_match(l)) {
        Some(i) if lines[i].contains("panicked at") && i + 1 < lines.len() => lines[i + 1],
        Some(i) => lines[i],
        None => lines.last()?,
    };
    Some(pick.chars().take(200).collect())
}

/// A signal, written by its name where it has a common one (`SIGKILL`),
/// else by its number (`signal 42`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(pub i32);

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            1 => "SIGHUP",
            2 => "SIGINT",
            3 => "SIGQUIT",
            4 => "SIGILL",
            6 => "SIGABRT",
            7 => "SIGBUS",
            8 => "SIGFPE",
            9 => "SIGKILL",
            11 => "SIGSEGV",
            13 => "SIGPIPE",
            15 => "SIGTERM",
            sig => return write!(f, "signal {sig}"),
        };
        f.write_str(name)
    }
}

/// How a run that did not succeed ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunEnd {
    /// No exit within the timeout; the process group was killed.
    TimedOut { timeout_s: f64 },
    /// Killed by a signal.
    Killed(Signal),
    /// Exited with a code other than 0.
    Exited(i32),
    /// Neither a code nor a signal was reported.
    NoStatus,
}

/// What is known of a failed run: how it ended, whether that looks like
/// the host's OOM killer with nothing in stderr to say so, and the one line
/// of stderr that says most. Its `Display` is the failure's `detail` in the
/// ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureDetail {
    pub end: RunEnd,
    pub oom_killer_guess: bool,
    pub line: Option<String>,
}

impl fmt::Display for FailureDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.end {
            RunEnd::TimedOut { timeout_s } => {
                return write!(
                    f,
                    "no exit within the {timeout_s}s timeout; process group killed"
                );
            }
            RunEnd::Killed(sig) => write!(f, "killed by {sig}")?,
            RunEnd::Exited(code) => write!(f, "exit code {code}")?,
            RunEnd::NoStatus => f.write_str("no exit status")?,
        }
        if self.oom_killer_guess {
            f.write_str(" (likely the host's OOM killer)")?;
        }
        match &self.line {
            Some(l) => write!(f, ": {l}"),
            None => Ok(()),
        }
    }
}

impl Classifier {
    /// Classify a run that did not succeed. `None` means the run exited 0
    /// within its time (its result is checked elsewhere). `stderr` is what
    /// was kept of it: the head and the tail
    /// (what the transports keep of a run's stderr for the classifier).
    pub fn classify(
        &self,
        exit: &ExitInfo,
        timed_out: bool,
        stderr: &str,
        timeout_s: f64,
    ) -> Option<(FailureClass, FailureDetail)> {
        if timed_out {
            let detail = FailureDetail {
                end: RunEnd::TimedOut { timeout_s },
                oom_killer_guess: false,
                line: None,
            };
            return Some((FailureClass::Timeout, detail));
        }
        if exit.code == Some(0) && exit.signal.is_none() {
            return None;
        }
        let last_line = detail_line(stderr, &self.error_line);
        let end = match (exit.code, exit.signal) {
            (_, Some(sig)) => RunEnd::Killed(Signal(sig)),
            (Some(code), None) => RunEnd::Exited(code),
            (None, None) => RunEnd::NoStatus,
        };
        for class in &self.classes {
            if let Some(matched) = class.find(stderr) {
                // The line that matched says more than the last error line
                // (a compile error is often followed by a long traceback).
                let line = matched.or_else(|| last_line.clone());
                let detail = FailureDetail {
                    end,
                    oom_killer_guess: false,
                    line,
                };
                return Some((class.class, detail));
            }
        }
        let oom_killer_guess = exit.signal == Some(9) || exit.code == Some(137);
        let class = if oom_killer_guess {
            FailureClass::Oom
        } else {
            FailureClass::Crash
        };
        let detail = FailureDetail {
            end,
            oom_killer_guess,
            line: last_line,
        };
        Some((class, detail))
    }
}

/// Most bytes a tolerance file may have.
pub const MAX_VALUE_FILE_BYTES: u64 = 8 * 1024 * 1024;
/// Most numbers a tolerance file may hold.
pub const MAX_VALUES: usize = 1_000_000;

/// Why a tolerance file's bytes are not a JSON array of numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum ValuesError {
    /// Nothing but white space.
    Empty,
    /// The bytes end before the outer array is closed.
    EndsInside,
    /// Something unexpected at a byte offset.
    At { byte: usize, what: ValuesFault },
    /// More than [`MAX_VALUES`] numbers.
    TooMany,
}

/// What was wrong at a byte of a tolerance file.
#[derive(Debug, Clone, PartialEq)]
pub enum ValuesFault {
    TextAfter,
    CommaOrClose,
    Array,
    Value,
    NotANumber(String),
}

impl fmt::Display for ValuesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValuesError::Empty => f.write_str("empty: expected a JSON array of numbers"),
            ValuesError::EndsInside => {
                f.write_str("not a JSON array of numbers: the file ends inside an array")
            }
            ValuesError::At { byte, what } => {
                f.write_str("not a JSON array of numbers: ")?;
                match what {
                    ValuesFault::TextAfter => f.write_str("unexpected text after the array")?,
                    ValuesFault::CommaOrClose => f.write_str("expected `,` or `]`")?,
                    ValuesFault::Array => f.write_str("expected a JSON array (`[`)")?,
                    ValuesFault::Value => f.write_str("expected a number or `[`")?,
                    ValuesFault::NotANumber(t) => write!(f, "`{t}` is not a number")?,
                }
                write!(f, " at byte {byte}")
            }
            ValuesError::TooMany => {
                write!(f, "more than {MAX_VALUES} numbers, over the limit")
            }
        }
    }
}

/// Parse a tolerance file: a JSON array of numbers, possibly nested
/// (flattened in document order). Besides JSON numbers it accepts `NaN`,
/// `Infinity` and `-Infinity`, as Python's `json.dump` writes them. At most
/// [`MAX_VALUES`] numbers.
pub fn parse_values(bytes: &[u8]) -> Result<Vec<f64>, ValuesError> {
    #[derive(PartialEq)]
    enum Want {
        ValueOrClose,
        Value,
        CommaOrClose,
    }
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut want = Want::Value;
    let mut i = 0;
    let at = |byte: usize, what: ValuesFault| ValuesError::At { byte, what };
    loop {
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        if depth == 0 && want == Want::CommaOrClose {
            if i < bytes.len() {
                return Err(at(i, ValuesFault::TextAfter));
            }
            return Ok(out);
        }
        let Some(&c) = bytes.get(i) else {
            return Err(if depth == 0 {
                ValuesError::Empty
            } else {
                ValuesError::EndsInside
            });
        };
        match (&want, c) {
            (Want::Value | Want::ValueOrClose, b'[') => {
                depth += 1;
                want = Want::ValueOrClose;
                i += 1;
            }
            (Want::ValueOrClose | Want::CommaOrClose, b']') => {
                depth -= 1;
                want = Want::CommaOrClose;
                i += 1;
            }
            (Want::CommaOrClose, b',') => {
                want = Want::Value;
                i += 1;
            }
            (Want::CommaOrClose, _) => return Err(at(i, ValuesFault::CommaOrClose)),
            (_, _) if depth == 0 => return Err(at(i, ValuesFault::Array)),
            (Want::Value | Want::ValueOrClose, _) => {
                let len = bytes[i..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
                    .count();
                let token = std::str::from_utf8(&bytes[i..i + len]).unwrap_or("");
                let value = match token {
                    "NaN" => f64::NAN,
                    "Infinity" => f64::INFINITY,
                    "-Infinity" => f64::NEG_INFINITY,
                    t if !t.is_empty()
                        && t.bytes().all(|b| {
                            b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E')
                        }) =>
                    {
                        t.parse::<f64>()
                            .map_err(|_| at(i, ValuesFault::NotANumber(t.to_string())))?
                    }
                    "" => return Err(at(i, ValuesFault::Value)),
                    t => return Err(at(i, ValuesFault::NotANumber(t.to_string()))),
                };
                if out.len() == MAX_VALUES {
                    return Err(ValuesError::TooMany);
                }
                out.push(value);
                want = Want::CommaOrClose;
                i += len;
            }
        }
    }
}

pub use crate::spec::frozen::ToleranceSpec;

/// First 12 characters of a digest.
fn short(digest: Option<&str>) -> String {
    match digest {
        Some(d) => d.chars().take(12).collect(),
        None => "(none)".to_string(),
    }
}

use crate::fmt::{exact as num, exact6 as num6};

/// Whether `a` (candidate) is within tolerance of `b` (baseline), as
/// `numpy.isclose(a, b, rtol, atol, equal_nan=True)`: equal values always
/// are (infinities of the same sign included), NaN only matches NaN, an
/// infinity only itself, else `|a − b| ≤ atol + rtol·|b|`.
pub fn is_close(a: f64, b: f64, rtol: f64, atol: f64) -> bool {
    if a == b || (a.is_nan() && b.is_nan()) {
        return true;
    }
    if !a.is_finite() || !b.is_finite() {
        return false;
    }
    (a - b).abs() <= atol + rtol * b.abs()
}

/// Which attempt lacks a tolerance file's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lacking {
    Both,
    Baseline,
    Candidate,
}

/// How a candidate's output differs from the baseline's: why the gate
/// rejects it as `output_changed`. Its `Display` is the rejection's detail.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputMismatch {
    /// The digests differ (a side without one: `None`); `differing`: the
    /// declared outputs whose hashes differ, when the records say.
    Digest {
        candidate: Option<String>,
        baseline: Option<String>,
        differing: Vec<String>,
    },
    /// A tolerance file without numbers recorded.
    NoValues { file: String, lacking: Lacking },
    /// A tolerance file with another count of numbers.
    Count {
        file: String,
        candidate: usize,
        baseline: usize,
    },
    /// The first value beyond tolerance (`index`), and how many are.
    Beyond {
        file: String,
        index: usize,
        candidate: f64,
        baseline: f64,
        rtol: f64,
        atol: f64,
        beyond: usize,
        of: usize,
    },
}

impl fmt::Display for OutputMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputMismatch::Digest {
                candidate,
                baseline,
                differing,
            } => {
                write!(
                    f,
                    "output digest {} ≠ baseline's {}",
                    short(candidate.as_deref()),
                    short(baseline.as_deref())
                )?;
                if !differing.is_empty() {
                    write!(f, " ({} differs)", differing.join(", "))?;
                }
                Ok(())
            }
            OutputMismatch::NoValues { file, lacking } => {
                let who = match lacking {
                    Lacking::Both => "either attempt",
                    Lacking::Baseline => "the baseline",
                    Lacking::Candidate => "the candidate",
                };
                write!(
                    f,
                    "{file}: no numeric values recorded for {who}; cannot compare within tolerance"
                )
            }
            OutputMismatch::Count {
                file,
                candidate,
                baseline,
            } => write!(f, "{file}: {candidate} values vs baseline's {baseline}"),
            OutputMismatch::Beyond {
                file,
                index,
                candidate,
                baseline,
                rtol,
                atol,
                beyond,
                of,
            } => {
                write!(
                    f,
                    "{file}[{index}]: {} vs baseline {} ",
                    num(*candidate),
                    num(*baseline)
                )?;
                if candidate.is_nan() || baseline.is_nan() {
                    f.write_str("(NaN matches only NaN)")?;
                } else {
                    write!(
                        f,
                        "exceeds atol {} + rtol {}·|b| = {}",
                        num(*atol),
                        num(*rtol),
                        num6(atol + rtol * baseline.abs())
                    )?;
                }
                if *beyond > 1 {
                    write!(f, "; {beyond} of {of} values beyond tolerance")?;
                }
                Ok(())
            }
        }
    }
}

/// Does the candidate produce the baseline's output? Digests must be equal
/// (both absent is equal); each tolerance file must hold as many numbers as
/// the baseline's and each within [`is_close`] of it. The error says what
/// differs, for the rejection's detail.
pub fn compare_outputs(
    baseline: &AttemptRecord,
    candidate: &AttemptRecord,
    tolerance: Option<&ToleranceSpec>,
) -> Result<(), OutputMismatch> {
    if baseline.digest != candidate.digest {
        // Name the declared outputs that differ, when the records say.
        let tolerance_files: &[String] = tolerance.map(|t| t.files.as_slice()).unwrap_or(&[]);
        let differing: Vec<String> = candidate
            .outputs
            .iter()
            .filter(|(name, sha)| {
                !tolerance_files.contains(name) && baseline.outputs.get(*name) != Some(*sha)
            })
            .map(|(name, _)| name.clone())
            .collect();
        return Err(OutputMismatch::Digest {
            candidate: candidate.digest.as_ref().map(|d| d.to_string()),
            baseline: baseline.digest.as_ref().map(|d| d.to_string()),
            differing,
        });
    }
    let Some(t) = tolerance else {
        return Ok(());
    };
    for file in &t.files {
        let (b, c) = match (
            baseline.output_values.get(file),
            candidate.output_values.get(file),
        ) {
            (Some(b), Some(c)) => (b, c),
            (b, c) => {
                let lacking = match (b.is_none(), c.is_none()) {
                    (true, true) => Lacking::Both,
                    (true, false) => Lacking::Baseline,
                    _ => Lacking::Candidate,
                };
                return Err(OutputMismatch::NoValues {
                    file: file.clone(),
                    lacking,
                });
            }
        };
        if b.len() != c.len() {
            return Err(OutputMismatch::Count {
                file: file.clone(),
                candidate: c.len(),
                baseline: b.len(),
            });
        }
        let mut differing = c
            .iter()
            .zip(b)
            .enumerate()
            .filter(|(_, (a, b))| !is_close(**a, **b, t.rtol, t.atol));
        if let Some((index, (a, bv))) = differing.next() {
            return Err(OutputMismatch::Beyond {
                file: file.clone(),
                index,
                candidate: *a,
                baseline: *bv,
                rtol: t.rtol,
                atol: t.atol,
                beyond: differing.count() + 1,
                of: b.len(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: Option<i32>, signal: Option<i32>) -> ExitInfo {
        ExitInfo { code, signal }
    }

    #[test]
    fn classes() {
        let c = Classifier::default();
        assert_eq!(c.classify(&exit(Some(0), None), false, "", 1.0), None);
        let t = c
            .classify(&exit(None, Some(9)), true, "", 5.0)
            .expect("failure");
        assert_eq!(t.0, FailureClass::Timeout);
        let o = c
            .classify(
                &exit(Some(1), None),
                false,
                "RuntimeError: CUDA out of memory. Tried",
                5.0,
            )
            .expect("failure");
        assert_eq!(o.0, FailureClass::Oom);
        let k = c
            .classify(&exit(None, Some(9)), false, "", 5.0)
            .expect("failure");
        assert_eq!(k.0, FailureClass::Oom);
        let cf = c
            .classify(
                &exit(Some(1), None),
                false,
                "torch._dynamo.exc.BackendCompilerFailed: x",
                5.0,
            )
            .expect("failure");
        assert_eq!(cf.0, FailureClass::CompileFailure);
        let cr = c
            .classify(
                &exit(Some(101), None),
                false,
                "thread 'main' panicked at x.rs:1:1:\nboom\n",
                5.0,
            )
            .expect("failure");
        assert_eq!(cr.0, FailureClass::Crash);
        assert_eq!(cr.1.to_string(), "exit code 101: boom");
        let bt = c
            .classify(
                &exit(Some(101), None),
                false,
                "thread 'main' panicked at src/main.rs:3:5:\naccumulator overflow: i32\nstack backtrace:\n  2: quickstart::main\n             at ./src/main.rs:3:5\nnote: Some details are omitted\n",
                5.0,
            )
            .expect("failure");
        assert_eq!(bt.1.to_string(), "exit code 101: accumulator overflow: i32");
        let py = c
            .classify(
                &exit(Some(1), None),
                false,
                "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nValueError: bad tile\n",
                5.0,
            )
            .expect("failure");
        assert_eq!(py.1.to_string(), "exit code 1: ValueError: bad tile");
        let seg = c
            .classify(&exit(None, Some(11)), false, "", 5.0)
            .expect("failure");
        assert_eq!(seg.0, FailureClass::Crash);
        assert_eq!(seg.1.to_string(), "killed by SIGSEGV");
    }

    fn class_of(c: &Classifier, code: Option<i32>, signal: Option<i32>, stderr: &str) -> String {
        c.classify(&exit(code, signal), false, stderr, 5.0)
            .map(|(class, _)| class.as_str().to_string())
            .unwrap_or_else(|| "none".to_string())
    }

    /// Every default, on the text real tools print.
    #[test]
    fn default_patterns_cover_the_known_failures() {
        let c = Classifier::default();
        let compile = [
            "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: x",
            "torch._inductor.exc.InductorError: LoweringException: NotImplementedError",
            "InductorError: AssertionError: bad layout",
            "torch._dynamo.exc.Unsupported: call_function",
            "torch._inductor.exc.LoweringException: x",
            "triton.compiler.errors.CompilationError: at 12:4:\n    acc += tl.dot(a, b)",
            "triton.compiler.errors.CompileTimeAssertionFailure: at 3:4",
            "Triton compilation failed: kernel_0",
            "ptxas fatal   : Unresolved extern function 'foo'",
            "ptxas error   : Entry function 'k' uses too much shared data (0x12000 bytes, 0xc000 max)",
            "ptxas /tmp/x.ptx, line 12; error   : Unknown symbol",
            "nvcc fatal   : Unsupported gpu architecture 'compute_100'",
            "nvcc error   : 'cicc' died due to signal 11",
            "error: command '/usr/local/cuda/bin/nvcc' failed with exit code 1",
        ];
        for text in compile {
            assert_eq!(
                class_of(&c, Some(1), None, text),
                "compile_failure",
                "{text}"
            );
        }
        let oom = [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
            "torch.cuda.OutOfMemoryError: CUDA out of memory.",
            "RuntimeError: CUDA error: out of memory",
            "RuntimeError: HIP out of memory. Tried to allocate 1 GiB",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
            "cudaErrorMemoryAllocation",
            "memory allocation of 1073741824 bytes failed",
            "terminate called after throwing an instance of 'std::bad_alloc'",
            "MemoryError",
        ];
        for text in oom {
            assert_eq!(class_of(&c, Some(1), None, text), "oom", "{text}");
        }
        // The host's OOM killer: SIGKILL, or 137 from the shell.
        assert_eq!(class_of(&c, None, Some(9), ""), "oom");
        assert_eq!(class_of(&c, Some(137), None, ""), "oom");
        let (_, d) = c
            .classify(&exit(Some(137), None), false, "", 5.0)
            .expect("failure");
        assert_eq!(
            d.to_string(),
            "exit code 137 (likely the host's OOM killer)"
        );
        // A timeout wins over everything, a stderr pattern included.
        let t = c
            .classify(&exit(None, Some(9)), true, "CUDA out of memory", 30.0)
            .expect("failure");
        assert_eq!(t.0, FailureClass::Timeout);
        assert_eq!(t.1.end, RunEnd::TimedOut { timeout_s: 30.0 });
        assert!(t.1.to_string().contains("30s timeout"), "{}", t.1);
        // Anything else is a crash, with the code or signal named.
        for (code, signal, named) in [
            (Some(1), None, "exit code 1"),
            (Some(2), None, "exit code 2"),
            (Some(139), None, "exit code 139"),
            (None, Some(6), "killed by SIGABRT"),
            (None, Some(7), "killed by SIGBUS"),
            (None, Some(15), "killed by SIGTERM"),
            (None, Some(40), "killed by signal 40"),
        ] {
            let (class, detail) = c
                .classify(&exit(code, signal), false, "", 5.0)
                .expect("failure");
            assert_eq!(class, FailureClass::Crash);
            assert_eq!(detail.to_string(), named);
        }
        // Exit 0 is not a failure, whatever stderr says.
        assert_eq!(class_of(&c, Some(0), None, "CUDA out of memory"), "none");
    }

    #[test]
    fn the_detail_is_the_matching_line() {
        let c = Classifier::default();
        let mut stderr = String::from(
            "W0101 warning: something\nptxas fatal   : Unresolved extern function 'k'\n",
        );
        for i in 0..50 {
            stderr += &[
                "  File \"/x/y",
                &i.to_string(),
                ".py\", line ",
                &i.to_string(),
                ", in f\n    g()\n",
            ]
            .concat();
        }
        stderr.push_str("RuntimeError: see above\n");
        let (class, detail) = c
            .classify(&exit(Some(1), None), false, &stderr, 5.0)
            .expect("failure");
        assert_eq!(class, FailureClass::CompileFailure);
        assert_eq!(
            detail.to_string(),
            "exit code 1: ptxas fatal   : Unresolved extern function 'k'"
        );
    }

    /// A compile error at the start of a long stderr is found through the
    /// head the capture keeps, though the tail holds only the traceback.
    #[test]
    fn compile_error_before_a_long_traceback() {
        use crate::transport::local::{RunOutput, TAIL_BYTES};
        let c = Classifier::default();
        let head = "triton.compiler.errors.CompilationError: at 7:8: block too large\n";
        let mut traceback = String::new();
        while traceback.len() < 3 * TAIL_BYTES {
            traceback.push_str("  File \"/site-packages/torch/_inductor/x.py\", line 1, in f\n");
        }
        traceback.push_str("RuntimeError: compilation of kernel_3 did not succeed\n");
        let tail = &traceback[traceback.len() - TAIL_BYTES..];
        let run = RunOutput {
            stderr_head: head.to_string(),
            stderr_tail: tail.to_string(),
            ..Default::default()
        };
        // The tail alone says nothing a pattern knows.
        assert_eq!(class_of(&c, Some(1), None, tail), "crash");
        let (class, detail) = c
            .classify(
                &exit(Some(1), None),
                false,
                &run.stderr_for_classifier(),
                5.0,
            )
            .expect("failure");
        assert_eq!(class, FailureClass::CompileFailure);
        assert_eq!(
            detail.to_string(),
            "exit code 1: triton.compiler.errors.CompilationError: at 7:8: block too large"
        );
    }

    #[test]
    fn study_patterns_extend_the_defaults() {
        let extra = BTreeMap::from([
            (
                "compile_failure".to_string(),
                vec![r"MyCompiler: (bad|invalid) schedule".to_string()],
            ),
            (
                "oom".to_string(),
                vec![
                    r"arena exhausted".to_string(),
                    r"KV cache .* full".to_string(),
                ],
            ),
        ]);
        let c = Classifier::new(&extra).expect("valid");
        assert_eq!(
            class_of(&c, Some(1), None, "MyCompiler: invalid schedule"),
            "compile_failure"
        );
        assert_eq!(class_of(&c, Some(1), None, "error: arena exhausted"), "oom");
        assert_eq!(class_of(&c, Some(3), None, "KV cache is full"), "oom");
        // The defaults still apply.
        assert_eq!(class_of(&c, Some(1), None, "CUDA out of memory"), "oom");
        assert_eq!(
            class_of(&c, Some(1), None, "InductorError: x"),
            "compile_failure"
        );
        // Without them, the same text is a crash.
        let d = Classifier::default();
        assert_eq!(
            class_of(&d, Some(1), None, "error: arena exhausted"),
            "crash"
        );
        // Within a class the study's pattern is tried first: its line is
        // the detail.
        let (_, detail) = c
            .classify(
                &exit(Some(1), None),
                false,
                "MyCompiler: bad schedule\ntorch._dynamo.exc.BackendCompilerFailed: y",
                5.0,
            )
            .expect("failure");
        assert_eq!(detail.to_string(), "exit code 1: MyCompiler: bad schedule");
        // Classes keep their order: oom before compile (a compiler that
        // ran out of memory is a memory problem).
        assert_eq!(
            class_of(&c, Some(1), None, "arena exhausted\nnvcc fatal   : x"),
            "oom"
        );
        assert_eq!(
            class_of(
                &d,
                Some(1),
                None,
                "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\ntorch.OutOfMemoryError: CUDA out of memory."
            ),
            "oom"
        );
        assert_eq!(
            class_of(
                &d,
                Some(1),
                None,
                "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"
            ),
            "oom"
        );
        // No patterns at all is the default.
        let e = Classifier::new(&BTreeMap::new()).expect("valid");
        assert_eq!(
            class_of(&e, Some(1), None, "error: arena exhausted"),
            "crash"
        );
    }

    #[test]
    fn bad_study_patterns_are_errors() {
        let bad = BTreeMap::from([("oom".to_string(), vec!["ok".to_string(), "(".to_string()])]);
        let e = Classifier::new(&bad).err().expect("invalid regex");
        assert!(matches!(
            e,
            PatternError::Invalid {
                class: FailureClass::Oom,
                index: 1,
                ..
            }
        ));
        let e = e.to_string();
        assert!(
            e.starts_with("gate.patterns.oom[1]: invalid regular expression `(`"),
            "{e}"
        );
        let unknown = BTreeMap::from([("timeout".to_string(), vec!["x".to_string()])]);
        let e = Classifier::new(&unknown).err().expect("unknown class");
        assert!(matches!(&e, PatternError::UnknownClass(c) if c == "timeout"));
        let e = e.to_string();
        assert!(e.contains("`timeout`"), "{e}");
    }

    #[test]
    fn values_parse() {
        assert_eq!(parse_values(b"[1, 2.5, -3e2]"), Ok(vec![1.0, 2.5, -300.0]));
        assert_eq!(
            parse_values(b" [[1,2],[3,[4]], [], 5]\n"),
            Ok(vec![1.0, 2.0, 3.0, 4.0, 5.0])
        );
        assert_eq!(parse_values(b"[]"), Ok(vec![]));
        let special = parse_values(b"[NaN, Infinity, -Infinity, 0]").expect("python spellings");
        assert!(special[0].is_nan());
        assert_eq!(&special[1..], &[f64::INFINITY, f64::NEG_INFINITY, 0.0]);
        for bad in [
            &b""[..],
            b"  ",
            b"1",
            b"{\"a\": 1}",
            b"[1, \"2\"]",
            b"[1, null]",
            b"[1,]",
            b"[,1]",
            b"[1 2]",
            b"[1, 2",
            b"[1]]",
            b"[1] [2]",
            b"[true]",
            b"[1e]",
            b"[nan]",
            b"[\xff]",
        ] {
            let e = parse_values(bad).err();
            assert!(
                e.is_some(),
                "{:?} should not parse",
                String::from_utf8_lossy(bad)
            );
        }
        let e = parse_values(b"[1, x]").expect_err("not a number");
        assert_eq!(
            e,
            ValuesError::At {
                byte: 4,
                what: ValuesFault::NotANumber("x".to_string())
            }
        );
        assert_eq!(
            e.to_string(),
            "not a JSON array of numbers: `x` is not a number at byte 4"
        );
        let array = |n: usize| ["[", &"0,".repeat(n), "0]"].concat();
        let many = array(MAX_VALUES);
        let e = parse_values(many.as_bytes()).expect_err("too many");
        assert_eq!(e, ValuesError::TooMany);
        assert_eq!(e.to_string(), "more than 1000000 numbers, over the limit");
        let exactly = array(MAX_VALUES - 1);
        assert_eq!(
            parse_values(exactly.as_bytes()).map(|v| v.len()),
            Ok(MAX_VALUES)
        );
    }

    fn record(digest: Option<&str>, values: &[(&str, Vec<f64>)]) -> AttemptRecord {
        let mut v = serde_json::json!({
            "schema": 1, "tunectl_version": "t", "study_id": "s", "spec_hash": "h",
            "trial_key": "k", "attempt_id": "a", "config": {}, "config_label": "c",
            "config_index": 0, "is_baseline": false, "cell": {}, "cell_label": "",
            "cell_index": 0, "repeat": 0, "fidelity": null, "host": "h",
            "host_class": "hc", "fingerprint": "fp", "slot": 0, "started_at": "",
            "finished_at": "", "duration_s": 0.0, "run_s": null, "warmup_runs": 0,
            "status": "ok", "failure": null, "exit": null, "metrics": {},
            "digest": digest, "outputs": {}, "command": "", "stdout_tail": "",
            "stderr_tail": ""
        });
        let mut r: AttemptRecord = serde_json::from_value(v.take()).expect("record");
        for (name, vals) in values {
            r.output_values.insert(name.to_string(), vals.clone());
        }
        r
    }

    fn tol(rtol: f64, atol: f64) -> ToleranceSpec {
        ToleranceSpec {
            files: vec!["logits.json".into()],
            rtol,
            atol,
        }
    }

    #[test]
    fn digests_must_match() {
        let a = record(Some("1a2b3c4d5e6f7a8b"), &[]);
        let b = record(Some("9f8e7d6c5b4a3928"), &[]);
        assert_eq!(compare_outputs(&a, &a.clone(), None), Ok(()));
        assert_eq!(
            compare_outputs(&a, &b, None).map_err(|e| e.to_string()),
            Err("output digest 9f8e7d6c5b4a ≠ baseline's 1a2b3c4d5e6f".to_string())
        );
        let none = record(None, &[]);
        assert_eq!(compare_outputs(&none, &none.clone(), None), Ok(()));
        assert_eq!(
            compare_outputs(&a, &none, None).map_err(|e| e.to_string()),
            Err("output digest (none) ≠ baseline's 1a2b3c4d5e6f".to_string())
        );
        // A tolerance does not excuse a different digest.
        let t = tol(1.0, 1.0);
        let a = record(Some("aa"), &[("logits.json", vec![1.0])]);
        let b = record(Some("bb"), &[("logits.json", vec![1.0])]);
        assert!(compare_outputs(&a, &b, Some(&t)).is_err());
    }

    #[test]
    fn values_within_tolerance() {
        let base = record(Some("d"), &[("logits.json", vec![0.5, 100.0, 0.0, -2.0])]);
        let t = tol(1e-3, 1e-6);
        // Equal.
        assert_eq!(compare_outputs(&base, &base.clone(), Some(&t)), Ok(()));
        // Within: |a − b| ≤ atol + rtol·|b|, b the baseline's.
        let near = record(
            Some("d"),
            &[("logits.json", vec![0.5004, 100.09, 1e-6, -2.002])],
        );
        assert_eq!(compare_outputs(&base, &near, Some(&t)), Ok(()));
        // Not symmetric: the bound scales with the baseline's value.
        let hundred = record(Some("d"), &[("logits.json", vec![100.0])]);
        let ninety_nine = record(Some("d"), &[("logits.json", vec![99.0])]);
        let t2 = tol(0.01, 0.0);
        assert!(compare_outputs(&hundred, &ninety_nine, Some(&t2)).is_ok());
        assert!(compare_outputs(&ninety_nine, &hundred, Some(&t2)).is_err());
        // Zero tolerance: exact.
        let t0 = tol(0.0, 0.0);
        assert_eq!(compare_outputs(&base, &base.clone(), Some(&t0)), Ok(()));
        assert!(compare_outputs(&base, &near, Some(&t0)).is_err());
        // Files not under tolerance are not looked at.
        let other = ToleranceSpec {
            files: vec![],
            rtol: 0.0,
            atol: 0.0,
        };
        assert_eq!(compare_outputs(&base, &near, Some(&other)), Ok(()));
    }

    #[test]
    fn values_beyond_tolerance() {
        let mut b = vec![0.5; 20];
        let mut c = b.clone();
        c[17] = 0.5012;
        c[19] = 0.6;
        b[3] = 1.0;
        c[3] = 1.0005;
        let base = record(Some("d"), &[("logits.json", b)]);
        let cand = record(Some("d"), &[("logits.json", c)]);
        assert_eq!(
            compare_outputs(&base, &cand, Some(&tol(1e-3, 1e-6))).map_err(|e| e.to_string()),
            Err(
                "logits.json[17]: 0.5012 vs baseline 0.5 exceeds atol 1e-6 + rtol 0.001·|b| = 0.000501; 2 of 20 values beyond tolerance"
                    .to_string()
            )
        );
        let one = record(Some("d"), &[("logits.json", vec![1.0, 2.0])]);
        let off = record(Some("d"), &[("logits.json", vec![1.0, 2.5])]);
        assert_eq!(
            compare_outputs(&one, &off, Some(&tol(0.0, 0.1))).map_err(|e| e.to_string()),
            Err(
                "logits.json[1]: 2.5 vs baseline 2 exceeds atol 0.1 + rtol 0·|b| = 0.1".to_string()
            )
        );
    }

    #[test]
    fn length_mismatch() {
        let base = record(Some("d"), &[("logits.json", vec![1.0, 2.0, 3.0])]);
        let cand = record(Some("d"), &[("logits.json", vec![1.0, 2.0])]);
        assert_eq!(
            compare_outputs(&base, &cand, Some(&tol(1.0, 1.0))).map_err(|e| e.to_string()),
            Err("logits.json: 2 values vs baseline's 3".to_string())
        );
    }

    #[test]
    fn nan_and_infinities() {
        let t = tol(1e-3, 1e-3);
        let nan = record(Some("d"), &[("logits.json", vec![1.0, f64::NAN])]);
        assert_eq!(compare_outputs(&nan, &nan.clone(), Some(&t)), Ok(()));
        let num = record(Some("d"), &[("logits.json", vec![1.0, 2.0])]);
        assert_eq!(
            compare_outputs(&num, &nan, Some(&t)).map_err(|e| e.to_string()),
            Err("logits.json[1]: NaN vs baseline 2 (NaN matches only NaN)".to_string())
        );
        assert_eq!(
            compare_outputs(&nan, &num, Some(&t)).map_err(|e| e.to_string()),
            Err("logits.json[1]: 2 vs baseline NaN (NaN matches only NaN)".to_string())
        );
        let inf = record(Some("d"), &[("logits.json", vec![1.0, f64::INFINITY])]);
        assert_eq!(compare_outputs(&inf, &inf.clone(), Some(&t)), Ok(()));
        // A huge rtol does not make a finite value close to infinity.
        assert!(compare_outputs(&inf, &num, Some(&tol(1e300, 1e300))).is_err());
        assert!(compare_outputs(&num, &inf, Some(&tol(1e300, 1e300))).is_err());
        let ninf = record(Some("d"), &[("logits.json", vec![1.0, f64::NEG_INFINITY])]);
        assert!(compare_outputs(&inf, &ninf, Some(&t)).is_err());
        assert!(is_close(f64::NAN, f64::NAN, 0.0, 0.0));
        assert!(!is_close(f64::NAN, 1.0, 1.0, 1.0));
    }

    #[test]
    fn missing_values_are_an_error() {
        let t = tol(1.0, 1.0);
        let with = record(Some("d"), &[("logits.json", vec![1.0])]);
        let without = record(Some("d"), &[]);
        assert_eq!(
            compare_outputs(&with, &without, Some(&t)).map_err(|e| e.to_string()),
            Err("logits.json: no numeric values recorded for the candidate; cannot compare within tolerance".to_string())
        );
        assert_eq!(
            compare_outputs(&without, &with, Some(&t)).map_err(|e| e.to_string()),
            Err("logits.json: no numeric values recorded for the baseline; cannot compare within tolerance".to_string())
        );
        assert!(
            compare_outputs(&without, &without.clone(), Some(&t))
                .err()
                .is_some_and(|e| e.to_string().contains("either attempt"))
        );
        // An empty array is values, not their absence.
        let empty = record(Some("d"), &[("logits.json", vec![])]);
        assert_eq!(compare_outputs(&empty, &empty.clone(), Some(&t)), Ok(()));
    }

    #[test]
    fn tolerance_from_the_frozen_spec() {
        let read = |v: serde_json::Value| crate::spec::FrozenSpec::from_json(v).expect("spec");
        let spec = read(serde_json::json!({
            "gate": {
                "outputs": ["logits.json", "tokens.txt"],
                "patterns": {},
                "tolerance": {"files": ["logits.json"], "rtol": 0.001, "atol": 0.0}
            }
        }));
        assert_eq!(
            ToleranceSpec::from_spec(&spec),
            Some(ToleranceSpec {
                files: vec!["logits.json".into()],
                rtol: 0.001,
                atol: 0.0
            })
        );
        let none = read(serde_json::json!({"gate": {"outputs": [], "tolerance": null}}));
        assert_eq!(ToleranceSpec::from_spec(&none), None);
        assert_eq!(ToleranceSpec::from_spec(&read(serde_json::json!({}))), None);
        // What a loaded study freezes reads back.
        let t = crate::spec::study::Tolerance {
            files: vec!["a.json".into()],
            rtol: 0.5,
            atol: 2.0,
        };
        let frozen = read(
            serde_json::json!({"gate": {"tolerance": serde_json::to_value(&t).expect("json")}}),
        );
        assert_eq!(
            ToleranceSpec::from_spec(&frozen),
            Some(ToleranceSpec::from(&t))
        );
    }
}
