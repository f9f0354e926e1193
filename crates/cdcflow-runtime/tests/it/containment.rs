//! The runtime keeps every file inside the storage folder even when it is handed a
//! pipeline whose names `validate` refuses (the CLI never runs one; a library caller
//! might): names that climb out become escaped folder names under the storage folder,
//! and a full refresh deletes only there.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use cdcflow_runtime::{RunOptions, run};

#[path = "../../../../tests/e2e/escape_attempt.rs"]
mod escape_attempt;

use escape_attempt::{CONF, EscapeAttempt};

fn names_under(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_run_of_names_that_climb_out_writes_and_deletes_only_inside_the_storage_folder() {
    let attempt = EscapeAttempt::new();
    let conf = BTreeMap::from([(CONF.0.to_string(), CONF.1.to_string())]);
    let loaded = cdcflow_plan::load(&attempt.pipe, &conf);
    assert!(loaded.has_errors(), "validate refuses these names");
    let pipeline = loaded.pipeline.expect("pipeline");
    let before = attempt.tree_outside();

    let report = run(&pipeline, &RunOptions::default()).await.expect("run");
    assert!(!report.failed(), "{report:?}");
    assert_eq!(attempt.tree_outside(), before, "run wrote outside");
    let storage = attempt.pipe.join("_storage");
    let abs_folder = attempt.abs.replace('/', "@2F");
    assert_eq!(
        names_under(&storage.join("tables")),
        ["@2E.@2F..@2F..@2Fx", abs_folder.as_str(), "raw"]
    );
    assert!(names_under(&storage.join("checkpoints")).contains(&"@2E.@2F..@2F..@2Fvictim".into()));

    attempt.land(2);
    let options = RunOptions {
        full_refresh: Some(vec![]),
        force: true,
        ..RunOptions::default()
    };
    let report = run(&pipeline, &options).await.expect("full refresh");
    assert!(!report.failed(), "{report:?}");
    assert_eq!(
        attempt.tree_outside(),
        before,
        "a full refresh changed what is outside"
    );
    attempt.assert_victim_intact();
    let rows = report
        .flows
        .iter()
        .find(|f| f.flow == "../../../victim")
        .map(|f| f.rows_written);
    assert_eq!(
        rows,
        Some(2),
        "the flow recomputed from both files: {report:?}"
    );
}
