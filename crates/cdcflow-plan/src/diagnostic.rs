//! What a diagnostic *is*: severity, stable code, message, the span it points at and
//! a help line. How it is printed (miette on a terminal, JSON lines) is the caller's
//! choice; [`Diagnostic::to_report`] builds the miette form.

use std::fmt;
use std::sync::Arc;

use cdcflow_sql::Span;
use miette::{LabeledSpan, MietteDiagnostic, NamedSource, Report};

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
    /// Something that could not be checked, and why.
    Note,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// A place in a file of the pipeline folder.
#[derive(Debug, Clone)]
pub struct Located {
    /// Path relative to the pipeline folder, as shown to the user.
    pub path: String,
    /// The whole text of that file, for rendering the snippet.
    pub text: Arc<str>,
    /// Lines and char columns are 1-based; the end is exclusive.
    pub span: Span,
    pub label: String,
}

/// One finding about a pipeline.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Stable identifier, e.g. `cdcflow::unknown_dataset`.
    pub code: &'static str,
    pub message: String,
    pub at: Option<Located>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            code,
            message: message.into(),
            at: None,
            help: None,
        }
    }

    pub fn note(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Note,
            ..Self::error(code, message)
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(code, message)
        }
    }

    #[must_use]
    pub fn at(mut self, located: Located) -> Self {
        self.at = Some(located);
        self
    }

    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// `file:line:col` of the start, when the diagnostic has a place.
    pub fn position(&self) -> Option<String> {
        self.at
            .as_ref()
            .map(|a| format!("{}:{}:{}", a.path, a.span.start.line, a.span.start.column))
    }

    /// The miette report, with the file's text attached so the snippet renders.
    pub fn to_report(&self) -> Report {
        let mut d = MietteDiagnostic::new(self.message.clone())
            .with_code(self.code)
            .with_severity(match self.severity {
                Severity::Error => miette::Severity::Error,
                Severity::Warning => miette::Severity::Warning,
                Severity::Note => miette::Severity::Advice,
            });
        if let Some(h) = &self.help {
            d = d.with_help(h.clone());
        }
        match &self.at {
            Some(at) => {
                let (start, end) = byte_range(&at.text, at.span);
                d = d.with_label(LabeledSpan::new_with_span(
                    Some(at.label.clone()),
                    (start, end.saturating_sub(start)),
                ));
                Report::new(d)
                    .with_source_code(NamedSource::new(at.path.clone(), at.text.to_string()))
            }
            None => Report::new(d),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.position() {
            write!(f, "{p}: ")?;
        }
        write!(f, "{}: {}", self.severity.as_str(), self.message)
    }
}

/// Converts a 1-based line/char-column span into a byte range of `text`.
pub fn byte_range(text: &str, span: Span) -> (usize, usize) {
    let start = byte_offset(text, span.start.line, span.start.column);
    let end = byte_offset(text, span.end.line, span.end.column).max(start);
    (start, end)
}

fn byte_offset(text: &str, line: u64, column: u64) -> usize {
    if line == 0 {
        return 0;
    }
    let mut line_start = 0usize;
    for _ in 1..line {
        match text[line_start..].find('\n') {
            Some(i) => line_start += i + 1,
            None => return text.len(),
        }
    }
    let line_text = &text[line_start..];
    let line_end = line_text.find('\n').unwrap_or(line_text.len());
    line_text[..line_end]
        .char_indices()
        .nth(usize::try_from(column.saturating_sub(1)).unwrap_or(usize::MAX))
        .map_or(line_start + line_end, |(i, _)| line_start + i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdcflow_sql::Location;

    #[test]
    fn byte_range_counts_chars() {
        let text = "ab\nçd efg\n";
        let span = Span::new(Location::new(2, 2), Location::new(2, 4));
        assert_eq!(byte_range(text, span), (5, 7));
    }
}
