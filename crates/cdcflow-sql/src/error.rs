//! Parse errors: a message and the span it points at.

use sqlparser::parser::ParserError;
use sqlparser::tokenizer::{Location, Span, TokenizerError};

use crate::sqlparser;

/// A syntax error in a flow file, with the span of the offending token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What is wrong, without location text (the span carries that).
    pub message: String,
    /// Where it is wrong; 1-based lines and char columns, end exclusive.
    pub span: Span,
    /// What the user can do about it, when we know.
    pub help: Option<String>,
}

impl ParseError {
    pub(crate) fn new(message: impl Into<String>, span: Span) -> Self {
        Self {
            message: message.into(),
            span,
            help: None,
        }
    }

    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Converts sqlparser's error, whose only location is text inside its message
    /// ("… at Line: 3, Column: 7"), into a spanned error. `fallback` is used when the
    /// message carries no location.
    pub(crate) fn from_sqlparser(err: ParserError, fallback: Span) -> Self {
        let text = match err {
            ParserError::TokenizerError(s) | ParserError::ParserError(s) => s,
            ParserError::RecursionLimitExceeded => {
                return Self::new("statement is nested too deeply", fallback);
            }
        };
        match split_location(&text) {
            Some((message, location)) => {
                let end = Location::new(location.line, location.column + 1);
                Self::new(tidy(message), Span::new(location, end))
            }
            None => Self::new(tidy(&text), fallback),
        }
    }

    pub(crate) fn from_tokenizer(err: TokenizerError) -> Self {
        let start = err.location;
        let end = Location::new(start.line, start.column + 1);
        let message = split_location(&err.message)
            .map(|(m, _)| m.to_string())
            .unwrap_or(err.message);
        Self::new(tidy(&message), Span::new(start, end))
    }
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at {}:{}",
            self.message, self.span.start.line, self.span.start.column
        )
    }
}

impl std::error::Error for ParseError {}

fn split_location(text: &str) -> Option<(&str, Location)> {
    let at = text.rfind(" at Line: ")?;
    let rest = &text[at + " at Line: ".len()..];
    let (line, rest) = rest.split_once(", Column: ")?;
    let column: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let location = Location::new(line.trim().parse().ok()?, column.parse().ok()?);
    Some((&text[..at], location))
}

fn tidy(message: &str) -> String {
    message
        .trim()
        .trim_start_matches("sql parser error: ")
        .replace("Expected: ", "expected ")
        .replace(", found: ", ", found ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_is_taken_from_the_message() {
        let err =
            ParserError::ParserError("Expected: BY, found: seq at Line: 3, Column: 17".into());
        let e = ParseError::from_sqlparser(err, Span::empty());
        assert_eq!(e.message, "expected BY, found seq");
        assert_eq!(e.span.start, Location::new(3, 17));
    }
}
