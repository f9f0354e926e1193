//! A materialized view's checkpoint fingerprints its query without keeping its text: a
//! `--conf` value substituted into the query (a credential, say) is nowhere in storage,
//! yet an unchanged query is recognised and a changed one recomputes.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use cdcflow_runtime::{FlowOutcome, RunOptions, run};

const SECRET: &str = "s3cr3t-token-4711";

fn pipeline_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("pipeline.yaml"), "name: fingerprint\n").expect("write");
    fs::write(
        dir.path().join("flows.sql"),
        "CREATE MATERIALIZED VIEW gate AS SELECT 1 AS ok WHERE '${api.token}' <> '';\n",
    )
    .expect("write");
    dir
}

/// Runs once with `token` substituted; the outcome of the view's flow.
async fn run_with(dir: &Path, token: &str) -> FlowOutcome {
    let conf = BTreeMap::from([("api.token".to_string(), token.to_string())]);
    let loaded = cdcflow_plan::load(dir, &conf);
    assert!(!loaded.has_errors(), "{:?}", loaded.diagnostics);
    let pipeline = loaded.pipeline.expect("pipeline");
    let report = run(&pipeline, &RunOptions::default()).await.expect("run");
    assert!(!report.failed(), "{report:?}");
    report.flows[0].outcome.clone()
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if String::from_utf8_lossy(&fs::read(&path).expect("read")).contains(needle) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

fn offsets_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let offsets = dir.join("_storage/checkpoints/gate/offsets");
    let mut files: Vec<_> = fs::read_dir(offsets)
        .expect("offsets")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn a_substituted_value_is_not_stored_and_the_query_is_still_recognised() {
    let dir = pipeline_dir();
    assert!(matches!(
        run_with(dir.path(), SECRET).await,
        FlowOutcome::Committed { .. }
    ));
    assert_eq!(
        files_holding(&dir.path().join("_storage"), SECRET),
        Vec::<String>::new(),
        "the substituted value must not be stored"
    );
    assert!(
        matches!(
            run_with(dir.path(), SECRET).await,
            FlowOutcome::UpToDate { .. }
        ),
        "the same query is recognised by its fingerprint"
    );
    assert!(
        matches!(
            run_with(dir.path(), "another-token").await,
            FlowOutcome::Committed { .. }
        ),
        "a changed value changes the query and recomputes"
    );
}

#[tokio::test]
async fn a_checkpoint_holding_the_query_text_recomputes_once() {
    let dir = pipeline_dir();
    run_with(dir.path(), SECRET).await;
    // As versions before the fingerprint wrote it: the query in plain text.
    let last = offsets_files(dir.path()).pop().expect("offsets");
    let text = fs::read_to_string(&last).expect("read");
    let mut offsets: serde_json::Value = serde_json::from_str(&text).expect("json");
    offsets["fingerprint"] =
        serde_json::Value::from(format!("query=SELECT 1 AS ok WHERE '{SECRET}' <> ''"));
    fs::write(&last, offsets.to_string()).expect("write");
    assert!(matches!(
        run_with(dir.path(), SECRET).await,
        FlowOutcome::Committed { .. }
    ));
    assert!(matches!(
        run_with(dir.path(), SECRET).await,
        FlowOutcome::UpToDate { .. }
    ));
}
