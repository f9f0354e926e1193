//! Table-driven diagnostics: every folder under `tests/validate/` is a pipeline, and its
//! `expected` file lists the errors `cdcflow validate --format json` must report, one
//! `file:line:col code message` per line (empty: the pipeline is valid); an optional
//! `warnings` file lists its warnings the same way (without it, warnings are not
//! compared). The message is compared whole: a diagnostic's wording is what the user
//! reads. Add a case by adding a folder; no Rust needed.

use std::fs;

use crate::{cdcflow_in, repo, stdout};

#[test]
fn every_validate_case_reports_exactly_its_expected_errors() {
    let root = repo().join("tests/validate");
    let mut cases: Vec<_> = fs::read_dir(&root)
        .expect("tests/validate")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 10);
    let mut failures = Vec::new();
    for case in cases {
        let expected = fs::read_to_string(case.join("expected")).expect("expected file");
        let expected: Vec<&str> = expected.lines().filter(|l| !l.trim().is_empty()).collect();
        let expected_warnings = fs::read_to_string(case.join("warnings")).ok();
        let expected_warnings: Option<Vec<&str>> = expected_warnings
            .as_deref()
            .map(|w| w.lines().filter(|l| !l.trim().is_empty()).collect());
        let mut warnings = Vec::new();
        // From the case's folder, so that files are named as in `expected`.
        let out = cdcflow_in(&case, &["validate", "-p", ".", "--format", "json"]);
        let mut actual = Vec::new();
        for line in stdout(&out).lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).expect("one JSON object per line");
            for key in [
                "file",
                "line",
                "column",
                "end_line",
                "end_column",
                "severity",
                "code",
                "message",
                "help",
            ] {
                assert!(
                    v.get(key).is_some(),
                    "{}: missing key {key} in {line}",
                    case.display()
                );
            }
            let at = format!(
                "{}:{}:{} {} {}",
                v["file"].as_str().unwrap_or("?"),
                v["line"],
                v["column"],
                v["code"].as_str().unwrap_or("?"),
                v["message"].as_str().unwrap_or("?").replace('\n', "\\n")
            );
            match v["severity"].as_str() {
                Some("error") => actual.push(at),
                Some("warning") => warnings.push(at),
                _ => {}
            }
        }
        let code = out.status.code();
        let want_code = if expected.is_empty() {
            Some(0)
        } else {
            Some(1)
        };
        if let Some(want) = &expected_warnings
            && &warnings != want
        {
            failures.push(format!(
                "{}: warnings\n  expected: {want:?}\n  actual:   {warnings:?}",
                case.display()
            ));
        }
        if actual != expected || code != want_code {
            failures.push(format!(
                "{}: exit {code:?} (want {want_code:?})\n  expected: {expected:?}\n  actual:   {actual:?}\n  output:\n{}",
                case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                stdout(&out)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
