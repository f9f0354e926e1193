//! Which dataset and flow names can name a folder. The run stores each dataset and
//! each flow's checkpoint in a folder named after it under the storage folder
//! (`cdcflow_runtime::layout`), so a name must be one plain folder name there: never a
//! path that climbs out (`..`, `/`), starts over from the root (`/tmp/x`, `C:x`),
//! hides, or that Delta reads as something else (`%`). Resolution reports a name that
//! is not ([`problem`]); the runtime escapes the characters named by [`escaped_char`]
//! whatever happens, so that even a pipeline run despite its diagnostics stays inside
//! its storage folder.

use std::fmt;
use std::fmt::Write as _;

/// The longest name, in bytes once lower-cased: most file systems allow 255 bytes per
/// folder name, and a quarantine table adds `__quarantine` (12) to its target's name.
pub const MAX_BYTES: usize = 243;

/// Why a name cannot name a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    Empty,
    /// `.` or `..`: the folder itself or its parent.
    Dots,
    /// A leading `.` hides the folder from listings and from Hadoop-style readers.
    LeadingDot,
    /// `/` or `\` separate folders; `:` starts a drive or stream on Windows and is
    /// refused in Hadoop paths (Spark); `%` is read as an escape in a Delta table's
    /// path, so a table in such a folder cannot be written.
    Character(char),
    /// NUL and other control characters.
    Control,
    TooLong(usize),
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("is empty"),
            Self::Dots => f.write_str("is `.` or `..`, which name a folder relative to another"),
            Self::LeadingDot => f.write_str("starts with `.`, which hides its folder"),
            Self::Character(c @ ('/' | '\\')) => {
                write!(f, "contains `{c}`, which separates folders in a path")
            }
            Self::Character(':') => f.write_str(
                "contains `:`, which starts a drive on Windows and is refused in Hadoop (Spark) paths",
            ),
            Self::Character(c) => write!(
                f,
                "contains `{c}`, which Delta reads as an escape in a table's path"
            ),
            Self::Control => f.write_str("contains a control character"),
            Self::TooLong(n) => write!(f, "is {n} bytes long; at most {MAX_BYTES} fit a folder name"),
        }
    }
}

/// The folder name of a dataset or flow: its name lower-cased, with `/`, `\`, `:`,
/// `%`, control characters and a leading `.` written as `@XX` (UTF-8 bytes, in hex),
/// and `@` for the empty name. The result is always one plain folder name: never
/// empty, `.`, `..` nor anything that separates folders. (`%` is no escape here: Delta
/// reads it as one in a table's path.) Only names `validate` refuses are escaped, so a
/// valid name spelled like an escaped one (`@2fx`) could share its folder with one.
pub fn folder_name(name: &str) -> String {
    let lower = name.to_lowercase();
    if lower.is_empty() {
        return "@".to_string();
    }
    let mut out = String::with_capacity(lower.len());
    for (i, c) in lower.chars().enumerate() {
        if escaped_char(c) || (i == 0 && c == '.') {
            for b in c.encode_utf8(&mut [0; 4]).bytes() {
                let _ = write!(out, "@{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A character the runtime escapes in a folder name: it would separate folders, or
/// cannot be in a folder name at all.
pub fn escaped_char(c: char) -> bool {
    matches!(c, '/' | '\\' | ':' | '%') || c.is_control()
}

/// Why `name`, a dataset's or a flow's, cannot name its folder; `None` when it can.
pub fn problem(name: &str) -> Option<NameProblem> {
    if name.is_empty() {
        return Some(NameProblem::Empty);
    }
    if name == "." || name == ".." {
        return Some(NameProblem::Dots);
    }
    if let Some(c) = name.chars().find(|&c| escaped_char(c)) {
        return Some(match c.is_control() {
            true => NameProblem::Control,
            false => NameProblem::Character(c),
        });
    }
    if name.starts_with('.') {
        return Some(NameProblem::LeadingDot);
    }
    let bytes = name.to_lowercase().len();
    (bytes > MAX_BYTES).then_some(NameProblem::TooLong(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_are_fine() {
        for name in [
            "orders",
            "silver_orders_history",
            "quoted name",
            "orders.v2",
            "_tmp",
            "commandes_été",
            "a..b",
            "orders@v2",
        ] {
            assert_eq!(problem(name), None, "{name}");
        }
    }

    #[test]
    fn names_that_are_not_one_plain_folder_name_are_refused() {
        let cases = [
            ("", NameProblem::Empty),
            (".", NameProblem::Dots),
            ("..", NameProblem::Dots),
            ("../../../victim", NameProblem::Character('/')),
            ("/tmp/abs_table", NameProblem::Character('/')),
            ("a\\b", NameProblem::Character('\\')),
            ("C:table", NameProblem::Character(':')),
            ("50%_off", NameProblem::Character('%')),
            ("a\0b", NameProblem::Control),
            ("tab\there", NameProblem::Control),
            (".hidden", NameProblem::LeadingDot),
            ("...", NameProblem::LeadingDot),
        ];
        for (name, want) in cases {
            assert_eq!(problem(name), Some(want), "{name:?}");
        }
        let long = "x".repeat(MAX_BYTES + 1);
        assert_eq!(problem(&long), Some(NameProblem::TooLong(MAX_BYTES + 1)));
        assert_eq!(problem(&long[1..]), None);
    }
}
