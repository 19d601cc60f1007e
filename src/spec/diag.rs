//! Diagnostics for input files: every problem found in a study or inventory
//! file, with the file, line, column and key path it concerns.
//!
//! Loaders collect diagnostics instead of stopping at the first one, so a
//! user fixes every mistake in one round.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in an input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    /// 1-based line, 0 when the problem concerns the whole file.
    pub line: usize,
    /// 1-based column, 0 when unknown.
    pub column: usize,
    /// Key path such as `knobs.threads.default`; empty for the whole file.
    pub field: String,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if self.field.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": {}: {}", self.field, self.message)
        }
    }
}

/// All problems found in one or more input files, in the order found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.0.push(diagnostic);
    }

    pub fn extend(&mut self, other: Diagnostics) {
        self.0.extend(other.0);
    }

    /// A diagnostic about a whole file (unreadable, not YAML at all...).
    pub fn whole_file(file: &Path, message: impl Into<String>) -> Self {
        Diagnostics(vec![Diagnostic {
            file: file.to_path_buf(),
            line: 0,
            column: 0,
            field: String::new(),
            message: message.into(),
        }])
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        if self.0.len() > 1 {
            write!(f, "\n{} problems found", self.0.len())?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}
