//! The text forms CI and docs read, against golden files in `tests/formats/`:
//! `validate --format github|sarif` on a validate case with errors and a warning, and
//! `graph --format mermaid|dot|json` of the example pipelines. `CDCFLOW_BLESS=1`
//! rewrites the golden files from the current output (review them in the diff).

use std::fs;
use std::path::Path;

use crate::{cdcflow_in, repo, stderr, stdout};

/// Compares `actual` with golden file `name`, or writes it when blessing.
fn golden(name: &str, actual: &str) {
    let path = repo().join("tests/formats").join(name);
    if std::env::var_os("CDCFLOW_BLESS").is_some() {
        fs::write(&path, actual).expect("golden file written");
        return;
    }
    let want = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (CDCFLOW_BLESS=1 writes it)", path.display()));
    assert!(
        want == actual,
        "{name} differs from the golden file (CDCFLOW_BLESS=1 rewrites it):\n--- want\n{want}\n--- got\n{actual}"
    );
}

fn validate(case: &Path, format: &str) -> String {
    let out = cdcflow_in(case, &["validate", "-p", ".", "--format", format]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn validate_annotates_github_pull_requests_with_each_diagnostic() {
    let case = repo().join("tests/validate/list_files_calls");
    let out = validate(&case, "github");
    for line in out.lines() {
        assert!(
            line.starts_with("::error file=flows.sql,line=")
                || line.starts_with("::warning file=flows.sql,line="),
            "{line}"
        );
    }
    golden("list_files_calls.github", &out);
}

#[test]
fn validate_writes_one_sarif_2_1_0_log() {
    let case = repo().join("tests/validate/list_files_calls");
    let out = validate(&case, "sarif");
    let log: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    let results = run["results"].as_array().expect("results");
    let rules = run["tool"]["driver"]["rules"].as_array().expect("rules");
    // Every result names its rule by id and by index, and has a place in a file.
    for r in results {
        let index = r["ruleIndex"].as_u64().expect("ruleIndex") as usize;
        assert_eq!(rules[index]["id"], r["ruleId"], "{r}");
        let region = &r["locations"][0]["physicalLocation"]["region"];
        assert!(region["startLine"].as_u64().is_some(), "{r}");
    }
    let version = run["tool"]["driver"]["version"].as_str().expect("version");
    golden(
        "list_files_calls.sarif",
        &out.replace(
            &format!("\"version\": \"{version}\""),
            "\"version\": \"VERSION\"",
        ),
    );
}

#[test]
fn graph_prints_each_example_pipeline_as_mermaid_dot_and_json() {
    for pipeline in ["orders", "customers", "crm_kafka"] {
        for format in ["mermaid", "dot", "json"] {
            let out = cdcflow_in(
                &repo(),
                &[
                    "graph",
                    "-p",
                    &format!("pipelines/{pipeline}"),
                    "--format",
                    format,
                ],
            );
            assert!(
                out.status.success(),
                "{pipeline} {format}: {}",
                stderr(&out)
            );
            golden(&format!("{pipeline}.{format}"), &stdout(&out));
        }
    }
}
