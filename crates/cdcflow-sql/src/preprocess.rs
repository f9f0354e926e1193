//! Text-level preparation of a flow file before tokenizing: `${key}` configuration
//! substitution. Substituted values change column positions, so the result keeps a
//! map back to the original text; diagnostics always point into the file as written.
//!
//! A `SET key = value` line gives `key` its value for the rest of the file, ahead of
//! the pipeline's configuration, as a Databricks pipeline's SQL `SET` does for the
//! datasets defined after it.

use std::collections::HashMap;

use crate::sqlparser::tokenizer::{Location, Span};

/// A flow file after substitution, with the way back to original positions.
#[derive(Debug, Clone)]
pub struct Preprocessed {
    /// The text to parse.
    pub text: String,
    /// `${key}` references that `lookup` did not know, at their original spans.
    pub unknown: Vec<UnknownKey>,
    /// Per substituted line: (line, new start column, new length, original start, original length).
    edits: Vec<Edit>,
}

#[derive(Debug, Clone, Copy)]
struct Edit {
    line: u64,
    new_start: u64,
    new_len: u64,
    orig_start: u64,
    orig_len: u64,
}

/// An unresolved `${key}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    pub key: String,
    pub span: Span,
}

/// Replaces every `${key}` whose key `lookup` knows. Keys are letters, digits, `_`,
/// `-` and `.`; a value's line breaks become spaces so line numbers never move.
/// An unknown key is reported and replaced by `NULL`, so that the rest of the file
/// still parses and the user sees the one real mistake, not a cascade.
pub fn substitute(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Preprocessed {
    let mut out = String::with_capacity(text.len());
    let mut edits = Vec::new();
    let mut unknown = Vec::new();
    let mut set_in_file: HashMap<String, String> = HashMap::new();
    let lookup =
        |key: &str, set: &HashMap<String, String>| set.get(key).cloned().or_else(|| lookup(key));
    for (idx, line) in text.split_inclusive('\n').enumerate() {
        let line_start = out.len();
        let line_no = idx as u64 + 1;
        let mut rest = line;
        let mut orig_col = 1u64; // column in the original line of `rest`'s start
        let mut new_col = 1u64;
        while let Some(at) = rest.find("${") {
            let before = &rest[..at];
            let after = &rest[at + 2..];
            let key_len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
                .unwrap_or(after.len());
            let chars_before = before.chars().count() as u64;
            out.push_str(before);
            orig_col += chars_before;
            new_col += chars_before;
            if key_len == 0 || !after[key_len..].starts_with('}') {
                out.push_str("${");
                orig_col += 2;
                new_col += 2;
                rest = after;
                continue;
            }
            let key = &after[..key_len];
            let orig_len = key.chars().count() as u64 + 3;
            match lookup(key, &set_in_file) {
                Some(value) => {
                    let value = value.replace(['\r', '\n'], " ");
                    let new_len = value.chars().count() as u64;
                    edits.push(Edit {
                        line: line_no,
                        new_start: new_col,
                        new_len,
                        orig_start: orig_col,
                        orig_len,
                    });
                    out.push_str(&value);
                    new_col += new_len;
                }
                None => {
                    unknown.push(UnknownKey {
                        key: key.to_string(),
                        span: Span::new(
                            Location::new(line_no, orig_col),
                            Location::new(line_no, orig_col + orig_len),
                        ),
                    });
                    edits.push(Edit {
                        line: line_no,
                        new_start: new_col,
                        new_len: 4,
                        orig_start: orig_col,
                        orig_len,
                    });
                    out.push_str("NULL");
                    new_col += 4;
                }
            }
            orig_col += orig_len;
            rest = &after[key_len + 1..];
        }
        out.push_str(rest);
        if let Some((key, value)) = set_statement(&out[line_start..]) {
            set_in_file.insert(key, value);
        }
    }
    Preprocessed {
        text: out,
        unknown,
        edits,
    }
}

/// The key and value of a one-line `SET key = value[;]`, as substitution sees it.
fn set_statement(line: &str) -> Option<(String, String)> {
    let line = line.trim();
    let (word, rest) = line.split_at_checked(3)?;
    if !word.eq_ignore_ascii_case("SET") || !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let (key, value) = rest.split_once('=')?;
    let key = key.trim();
    let is_key_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if key.is_empty() || !key.chars().all(is_key_char) {
        return None;
    }
    let value = value.trim();
    let value = value.strip_suffix(';').unwrap_or(value).trim_end();
    Some((key.to_string(), value.to_string()))
}

impl Preprocessed {
    /// The text unchanged, for files that need no substitution.
    pub fn verbatim(text: &str) -> Self {
        Self {
            text: text.to_string(),
            unknown: vec![],
            edits: vec![],
        }
    }

    /// Maps a location in [`Self::text`] back to the original file.
    pub fn original(&self, loc: Location) -> Location {
        let mut shift: i64 = 0;
        for e in self.edits.iter().filter(|e| e.line == loc.line) {
            if loc.column >= e.new_start + e.new_len {
                shift += e.orig_len as i64 - e.new_len as i64;
            } else if loc.column >= e.new_start {
                return Location::new(loc.line, e.orig_start);
            }
        }
        Location::new(loc.line, (loc.column as i64 + shift).max(1) as u64)
    }

    /// Maps a span of [`Self::text`] back to the original file.
    pub fn original_span(&self, span: Span) -> Span {
        if span == Span::empty() {
            return span;
        }
        Span::new(self.original(span.start), self.original(span.end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(k: &str) -> Option<String> {
        match k {
            "src" => Some("/data/landing".into()),
            "my_etl.x" => Some("y".into()),
            _ => None,
        }
    }

    #[test]
    fn substitutes_and_maps_back() {
        let p = substitute("SELECT '${src}/a', ${my_etl.x} FROM t", conf);
        assert_eq!(p.text, "SELECT '/data/landing/a', y FROM t");
        // `FROM` is at column 29 after substitution, 32 in the original text.
        assert_eq!(p.original(Location::new(1, 29)), Location::new(1, 32));
        assert_eq!(p.original(Location::new(1, 9)), Location::new(1, 9));
        assert_eq!(p.original(Location::new(1, 8)), Location::new(1, 8));
    }

    #[test]
    fn set_gives_a_key_its_value_for_the_rest_of_the_file() {
        let p = substitute(
            "SELECT ${src}\nSET src = 'b';\nset n=${src}\nSELECT ${src}, ${n}, ${my_etl.x}",
            conf,
        );
        assert_eq!(
            p.text,
            "SELECT /data/landing\nSET src = 'b';\nset n='b'\nSELECT 'b', 'b', y"
        );
        assert!(p.unknown.is_empty());
        assert_eq!(set_statement("SETTINGS = 1"), None);
        assert_eq!(set_statement("SET a b = 1"), None);
    }

    #[test]
    fn unknown_keys_are_reported_at_their_use() {
        let p = substitute("a\n  ${nope} b", conf);
        assert_eq!(p.text, "a\n  NULL b");
        assert_eq!(p.unknown[0].key, "nope");
        assert_eq!(p.unknown[0].span.start, Location::new(2, 3));
    }
}
