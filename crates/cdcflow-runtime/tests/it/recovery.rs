//! A run stopped between the steps of a batch (offsets written, one of the two commits
//! landed) is resumed by the next run without skipping or repeating input: the tables
//! equal those of uninterrupted runs. AUTO CDC commits the published table, then the
//! state; a published table behind its state is what an older version, committing both
//! at once, could leave.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use cdcflow_runtime::{FlowOutcome, RunOptions, catalog, run};

const FLOWS: &str = "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, v STRING, op STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE cur;
CREATE FLOW cur_cdc AS AUTO CDC INTO cur FROM STREAM(raw) KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op);
CREATE OR REFRESH STREAMING TABLE hist;
CREATE FLOW hist_cdc AS AUTO CDC INTO hist FROM STREAM(raw) KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op) STORED AS SCD TYPE 2;
";

const BATCHES: [&str; 3] = [
    "{\"id\":1,\"v\":\"a\",\"op\":\"I\",\"seq\":1}\n{\"id\":2,\"v\":\"b\",\"op\":\"I\",\"seq\":1}\n",
    "{\"id\":1,\"v\":\"c\",\"op\":\"U\",\"seq\":3}\n{\"id\":2,\"v\":null,\"op\":\"D\",\"seq\":2}\n",
    "{\"id\":1,\"v\":\"x\",\"op\":\"U\",\"seq\":2}\n{\"id\":3,\"v\":\"d\",\"op\":\"I\",\"seq\":4}\n",
];

/// A pipeline of `raw` (landing JSON) feeding `cur` (SCD type 1) and `hist` (SCD type 2).
pub(crate) fn pipeline_dir() -> tempfile::TempDir {
    pipeline_of("recovery", FLOWS)
}

/// A pipeline folder named `name` with `flows` and an empty `landing` folder.
pub(crate) fn pipeline_of(name: &str, flows: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("pipeline.yaml"), format!("name: {name}\n")).expect("write");
    fs::write(dir.path().join("flows.sql"), flows).expect("write");
    fs::create_dir_all(dir.path().join("landing")).expect("mkdir");
    dir
}

fn land(dir: &Path, n: usize) {
    fs::write(dir.join(format!("landing/{n}.json")), BATCHES[n]).expect("write");
}

async fn run_once(dir: &Path) {
    let loaded = cdcflow_plan::load(dir, &BTreeMap::new());
    let pipeline = loaded.pipeline.expect("pipeline");
    let report = run(&pipeline, &RunOptions::default()).await.expect("run");
    assert!(!report.failed(), "{report:?}");
}

/// The rows of `raw`, `cur` and `hist`, printed.
pub(crate) async fn tables(dir: &Path) -> Vec<String> {
    query_tables(
        dir,
        &[
            "SELECT * FROM raw ORDER BY seq, id",
            "SELECT * FROM cur ORDER BY id",
            "SELECT * FROM hist ORDER BY id, __START_AT",
        ],
    )
    .await
}

/// The result of each query over the pipeline's tables, printed.
pub(crate) async fn query_tables(dir: &Path, queries: &[&str]) -> Vec<String> {
    let loaded = cdcflow_plan::load(dir, &BTreeMap::new());
    let pipeline = loaded.pipeline.expect("pipeline");
    let ctx = catalog::session(&pipeline).await.expect("session");
    let mut out = Vec::new();
    for sql in queries {
        let batches = ctx
            .sql(sql)
            .await
            .expect("sql")
            .collect()
            .await
            .expect("collect");
        out.push(
            datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                .expect("format")
                .to_string(),
        );
    }
    out
}

/// Removes the newest commit of a Delta table, as if the process died before writing it
/// (its data files stay behind, unreferenced, as a crash leaves them).
pub(crate) fn drop_last_commit(table: &Path) {
    let log = table.join("_delta_log");
    let mut commits: Vec<_> = fs::read_dir(&log)
        .expect("log")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    fs::remove_file(commits.last().expect("a commit")).expect("remove");
}

async fn uninterrupted() -> Vec<String> {
    let dir = pipeline_dir();
    for n in 0..3 {
        land(dir.path(), n);
        run_once(dir.path()).await;
    }
    tables(dir.path()).await
}

/// A pipeline after two runs, one file each, and its storage folder.
async fn after_two_batches() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = pipeline_dir();
    for n in 0..2 {
        land(dir.path(), n);
        run_once(dir.path()).await;
    }
    let storage = dir.path().join("_storage");
    (dir, storage)
}

#[tokio::test]
async fn a_batch_whose_commits_never_landed_is_read_again() {
    let want = uninterrupted().await;
    let (dir, storage) = after_two_batches().await;
    // The second batch of `cur` stops after its offsets: neither commit landed.
    drop_last_commit(&storage.join("state/cur"));
    drop_last_commit(&storage.join("tables/cur"));
    // The second batch of `hist` landed in the state only (an older version's crash).
    drop_last_commit(&storage.join("tables/hist"));
    // The append of the third file stops after its offsets.
    land(dir.path(), 2);
    run_once(dir.path()).await;
    drop_last_commit(&storage.join("tables/raw"));
    run_once(dir.path()).await;
    run_once(dir.path()).await;
    assert_eq!(tables(dir.path()).await, want);
}

/// Leaves the log of a Delta table as a process killed during its first commit does:
/// the commit's staging file written, the commit itself never put in place.
fn leave_only_a_staged_first_commit(table: &Path) {
    let log = table.join("_delta_log");
    let first = log.join(format!("{:020}.json", 0));
    let staged = fs::read(&first).expect("first commit");
    for entry in fs::read_dir(&log).expect("log") {
        fs::remove_file(entry.expect("entry").path()).expect("remove");
    }
    fs::write(log.join(format!("{:020}.json#1", 0)), staged).expect("staging file");
}

#[tokio::test]
async fn a_table_whose_first_commit_was_cut_off_after_staging_is_created_again() {
    let want = uninterrupted().await;
    let dir = pipeline_dir();
    let storage = dir.path().join("_storage");
    land(dir.path(), 0);
    run_once(dir.path()).await;
    // Killed while `hist` made its tables: neither first commit was put in place.
    leave_only_a_staged_first_commit(&storage.join("state/hist"));
    leave_only_a_staged_first_commit(&storage.join("tables/hist"));
    for n in 1..3 {
        land(dir.path(), n);
        run_once(dir.path()).await;
    }
    assert_eq!(tables(dir.path()).await, want);
}

#[tokio::test]
async fn a_published_commit_without_its_state_commit_is_applied_again() {
    let want = uninterrupted().await;
    let dir = pipeline_dir();
    let storage = dir.path().join("_storage");
    land(dir.path(), 0);
    run_once(dir.path()).await;
    land(dir.path(), 1);
    land(dir.path(), 2);
    run_once(dir.path()).await;
    // Only the published commits of the second batch landed.
    drop_last_commit(&storage.join("state/cur"));
    drop_last_commit(&storage.join("state/hist"));
    run_once(dir.path()).await;
    assert_eq!(tables(dir.path()).await, want);
}

#[tokio::test]
async fn an_scd1_table_behind_its_state_fails_naming_the_full_refresh_that_rebuilds_it() {
    let want = uninterrupted().await;
    let (dir, storage) = after_two_batches().await;
    // Only the state commit of the second batch landed: the state keeps no values to
    // derive the lost rows from.
    drop_last_commit(&storage.join("tables/cur"));
    land(dir.path(), 2);
    let loaded = cdcflow_plan::load(dir.path(), &BTreeMap::new());
    let pipeline = loaded.pipeline.expect("pipeline");
    let report = run(&pipeline, &RunOptions::default()).await.expect("run");
    let failed: Vec<String> = report
        .flows
        .iter()
        .filter_map(|f| match &f.outcome {
            FlowOutcome::Failed { error, help } => Some(format!("{error} {help:?}")),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{report:?}");
    assert!(failed[0].contains("--full-refresh cur"), "{}", failed[0]);
    let refresh = RunOptions {
        full_refresh: Some(vec!["cur".into()]),
        ..RunOptions::default()
    };
    let report = run(&pipeline, &refresh).await.expect("run");
    assert!(!report.failed(), "{report:?}");
    assert_eq!(tables(dir.path()).await, want);
}

/// The offsets files of every flow, by flow and batch.
fn offsets_files(storage: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for flow in fs::read_dir(storage.join("checkpoints")).expect("checkpoints") {
        let dir = flow.expect("entry").path().join("offsets");
        for f in fs::read_dir(&dir).expect("offsets") {
            out.push(f.expect("entry").path());
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn lost_or_damaged_offsets_files_of_committed_batches_are_restored_from_the_tables() {
    let want = uninterrupted().await;
    let (dir, storage) = after_two_batches().await;
    let files = offsets_files(&storage);
    let before: Vec<String> = files
        .iter()
        .map(|f| fs::read_to_string(f).expect("read"))
        .collect();
    // Every flow loses one batch's offsets: the appending flow's newest is damaged, the
    // AUTO CDC flows' oldest deleted (the "obvious fix" that used to double a batch).
    for (i, f) in files.iter().enumerate() {
        match i % 2 {
            0 => fs::remove_file(f).expect("remove"),
            _ => fs::write(f, "{\"batch\": 1, \"fil").expect("damage"),
        }
    }
    land(dir.path(), 2);
    run_once(dir.path()).await;
    assert_eq!(tables(dir.path()).await, want, "no batch read twice");
    for (f, text) in files.iter().zip(&before) {
        assert_eq!(&fs::read_to_string(f).expect("restored"), text, "{f:?}");
    }
}

#[tokio::test]
async fn an_offsets_file_the_table_cannot_restore_fails_naming_the_file_and_the_fix() {
    let (dir, storage) = after_two_batches().await;
    // As an older cdcflow committed: the commits do not record the offsets.
    for table in [
        "tables/raw",
        "state/cur",
        "state/hist",
        "tables/cur",
        "tables/hist",
    ] {
        let log = storage.join(table).join("_delta_log");
        for entry in fs::read_dir(&log).expect("log") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text = fs::read_to_string(&path).expect("read");
            let lines: Vec<String> = text
                .lines()
                .map(|l| {
                    let mut v: serde_json::Value = serde_json::from_str(l).expect("json");
                    if let Some(info) = v.get_mut("commitInfo").and_then(|i| i.as_object_mut()) {
                        info.remove("cdcflow.offsets");
                    }
                    v.to_string()
                })
                .collect();
            fs::write(&path, lines.join("\n") + "\n").expect("write");
        }
    }
    let before = tables(dir.path()).await;
    let damaged = storage.join("checkpoints/raw/offsets/00000000000000000000.json");
    fs::write(&damaged, "{").expect("damage");
    land(dir.path(), 2);
    let loaded = cdcflow_plan::load(dir.path(), &BTreeMap::new());
    let pipeline = loaded.pipeline.expect("pipeline");
    let report = run(&pipeline, &RunOptions::default()).await.expect("run");
    let FlowOutcome::Failed { error, help } = &report.flows[0].outcome else {
        panic!("{report:?}")
    };
    assert!(error.contains(&damaged.display().to_string()), "{error}");
    assert!(
        error.contains("batch 0 of flow `raw` is damaged"),
        "{error}"
    );
    let help = help.as_deref().unwrap_or_default();
    assert!(help.contains("cdcflow run --full-refresh raw"), "{help}");
    assert!(help.contains("apply it twice"), "{help}");
    // Nothing read again, nothing changed.
    assert_eq!(tables(dir.path()).await, before);
}
