//! Golden tests of the parser: every `.sql` under `tests/golden/parse` parses without
//! error, prints to the canonical SQL in its `.out` file, and that canonical SQL parses
//! back to the same text (round trip). Every `.sql` under `tests/golden/errors` fails
//! with the `line:col: message` lines of its `.err` file.
//! Set `CDCFLOW_BLESS=1` to rewrite the expected files after a deliberate change.

// Tests may unwrap and panic: a failure is their report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_possible_truncation
)]

mod fuzz;

use std::fs;
use std::path::{Path, PathBuf};

use cdcflow_sql::parse_statements;

fn golden_dir(kind: &str) -> PathBuf {
    manifest_dir().join("tests/golden").join(kind)
}

fn cases(kind: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(golden_dir(kind))
        .expect("golden folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no golden cases for {kind}");
    files
}

fn check_or_bless(path: &Path, actual: &str) -> Result<(), String> {
    if std::env::var_os("CDCFLOW_BLESS").is_some() {
        fs::write(path, actual).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let expected = fs::read_to_string(path).unwrap_or_default();
    if expected == actual {
        Ok(())
    } else {
        Err(format!(
            "{} differs\n--- expected\n{expected}\n--- actual\n{actual}",
            path.display()
        ))
    }
}

fn canonical(text: &str) -> Result<String, String> {
    let parsed = parse_statements(text);
    if let Some(e) = parsed.errors.first() {
        return Err(format!("{e}"));
    }
    Ok(parsed
        .statements
        .iter()
        .map(|s| format!("{s};\n"))
        .collect())
}

#[test]
fn every_statement_form_parses_prints_and_round_trips() {
    let mut failures = vec![];
    for case in cases("parse") {
        let text = fs::read_to_string(&case).expect("read case");
        let printed = match canonical(&text) {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("{}: {e}", case.display()));
                continue;
            }
        };
        if let Err(e) = check_or_bless(&case.with_extension("out"), &printed) {
            failures.push(e);
        }
        match canonical(&printed) {
            Ok(again) if again == printed => {}
            Ok(again) => failures.push(format!(
                "{}: canonical form does not round-trip:\n{printed}\n!=\n{again}",
                case.display()
            )),
            Err(e) => failures.push(format!(
                "{}: canonical form does not parse: {e}\n{printed}",
                case.display()
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn syntax_errors_point_at_the_offending_token() {
    let mut failures = vec![];
    for case in cases("errors") {
        let text = fs::read_to_string(&case).expect("read case");
        let parsed = parse_statements(&text);
        let actual: String = parsed
            .errors
            .iter()
            .map(|e| {
                format!(
                    "{}:{}: {}\n",
                    e.span.start.line, e.span.start.column, e.message
                )
            })
            .collect();
        if actual.is_empty() {
            failures.push(format!("{}: parsed without error", case.display()));
        }
        if let Err(e) = check_or_bless(&case.with_extension("err"), &actual) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The crate folder, read when the test runs: the build cache is shared between
/// checkouts, so a path fixed at compile time may name another checkout.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
