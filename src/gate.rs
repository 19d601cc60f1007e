//! The correctness gate's first half: classify how a run failed from its
//! exit status, signal, timeout and the tail of its stderr.
//!
//! The second half, comparing output digests with the baseline's, happens
//! where results are judged ([`crate::report`]), because it needs the
//! baseline measured on the same host class and cell.

use regex::RegexSet;

use crate::ledger::records::{ExitInfo, FailureClass};

/// Default stderr patterns, checked in this order of classes.
const COMPILE_PATTERNS: &[&str] = &[
    r"BackendCompilerFailed",
    r"InductorError",
    r"torch\._dynamo\.exc\.",
    r"triton\.compiler\.errors\.CompilationError",
    r"(?i)triton.*compil(e|ation) (error|failed)",
    r"ptxas (fatal|error)",
    r"ptxas .*error",
    r"nvcc (fatal|error)",
    r"error: command .*nvcc.* failed",
];

const OOM_PATTERNS: &[&str] = &[
    r"CUDA out of memory",
    r"torch\.OutOfMemoryError",
    r"torch\.cuda\.OutOfMemoryError",
    r"CUBLAS_STATUS_ALLOC_FAILED",
    r"CUDNN_STATUS_ALLOC_FAILED",
    r"cudaErrorMemoryAllocation",
    r"memory allocation of \d+ bytes failed",
    r"std::bad_alloc",
    r"MemoryError",
];

pub struct Classifier {
    compile: RegexSet,
    oom: RegexSet,
    /// Lines that state an error (preferred over backtrace frames as the
    /// failure's one-line detail).
    error_line: regex::Regex,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier {
            compile: RegexSet::new(COMPILE_PATTERNS).unwrap_or_else(|_| RegexSet::empty()),
            oom: RegexSet::new(OOM_PATTERNS).unwrap_or_else(|_| RegexSet::empty()),
            error_line: regex::Regex::new(
                r"(?i)(error|panic|exception|fatal|abort|overflow|failed|out of memory|segmentation)",
            )
            .unwrap_or_else(|_| regex::Regex::new("$^").unwrap_or_else(|_| unreachable!())),
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

/// Name of a signal for messages.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
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
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

impl Classifier {
    /// Classify a run that did not succeed. `None` means the run exited 0
    /// within its time (its result is checked elsewhere).
    pub fn classify(
        &self,
        exit: &ExitInfo,
        timed_out: bool,
        stderr_tail: &str,
        timeout_s: f64,
    ) -> Option<(FailureClass, String)> {
        if timed_out {
            return Some((
                FailureClass::Timeout,
                format!("no exit within the {timeout_s}s timeout; process group killed"),
            ));
        }
        if exit.code == Some(0) && exit.signal.is_none() {
            return None;
        }
        let last_line = detail_line(stderr_tail, &self.error_line);
        let how = match (exit.code, exit.signal) {
            (_, Some(sig)) => format!("killed by {}", signal_name(sig)),
            (Some(code), None) => format!("exit code {code}"),
            (None, None) => "no exit status".to_string(),
        };
        let with_line = |prefix: String| match &last_line {
            Some(l) => format!("{prefix}: {l}"),
            None => prefix,
        };
        if self.compile.is_match(stderr_tail) {
            return Some((FailureClass::CompileFailure, with_line(how)));
        }
        if self.oom.is_match(stderr_tail) {
            return Some((FailureClass::Oom, with_line(how)));
        }
        if exit.signal == Some(9) || exit.code == Some(137) {
            return Some((
                FailureClass::Oom,
                with_line(format!("{how} (likely the host's OOM killer)")),
            ));
        }
        Some((FailureClass::Crash, with_line(how)))
    }
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
        assert_eq!(cr, (FailureClass::Crash, "exit code 101: boom".to_string()));
        let bt = c
            .classify(
                &exit(Some(101), None),
                false,
                "thread 'main' panicked at src/main.rs:3:5:\naccumulator overflow: i32\nstack backtrace:\n  2: quickstart::main\n             at ./src/main.rs:3:5\nnote: Some details are omitted\n",
                5.0,
            )
            .expect("failure");
        assert_eq!(bt.1, "exit code 101: accumulator overflow: i32");
        let py = c
            .classify(
                &exit(Some(1), None),
                false,
                "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nValueError: bad tile\n",
                5.0,
            )
            .expect("failure");
        assert_eq!(py.1, "exit code 1: ValueError: bad tile");
        let seg = c
            .classify(&exit(None, Some(11)), false, "", 5.0)
            .expect("failure");
        assert_eq!(seg, (FailureClass::Crash, "killed by SIGSEGV".to_string()));
    }
}
