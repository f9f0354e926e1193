//! The runtime keeps every file inside the storage folder even when it is handed a
//! pipeline whose names `validate` refuses (the CLI never runs one; a library caller
//! might): names that climb out become escaped folder names under the storage folder,
//! and a full refresh deletes only there.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use cdcflow_runtime::{RunOptions, run};

/// A temporary folder whose path is lower case: cdcflow lower-cases dataset names, so
/// an absolute path written as a table name names this folder only when it is.
fn lowercase_tempdir() -> tempfile::TempDir {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("cdcflow-containment-{}-{nanos}", std::process::id());
    tempfile::Builder::new()
        .prefix(&prefix)
        .rand_bytes(0)
        .tempdir()
        .expect("tempdir")
}

/// Every file and folder under `root`, leaving out the pipeline folder `pipe`.
fn tree_outside(root: &Path, pipe: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path == pipe {
                continue;
            }
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

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
    let root = lowercase_tempdir();
    let victim = root.path().join("victim");
    fs::create_dir_all(&victim).expect("mkdir");
    fs::write(victim.join("precious.txt"), "keep me").expect("write");
    let pipe = root.path().join("pipe");
    fs::create_dir_all(pipe.join("landing")).expect("mkdir");
    fs::write(pipe.join("pipeline.yaml"), "name: attack\n").expect("write");
    fs::write(pipe.join("landing/1.json"), "{\"id\":1}\n").expect("write");
    let abs = root.path().join("outside/abs_table");
    let abs = abs.to_str().expect("utf-8");
    assert_eq!(
        abs,
        abs.to_lowercase(),
        "the temporary folder's path is lower case"
    );
    fs::write(
        pipe.join("flows.sql"),
        format!(
            "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT');
CREATE OR REFRESH STREAMING TABLE `{abs}`;
CREATE FLOW `../../../victim` AS INSERT INTO `{abs}` BY NAME SELECT * FROM STREAM(raw);
CREATE OR REFRESH STREAMING TABLE `${{tbl}}` AS SELECT * FROM STREAM(raw);
"
        ),
    )
    .expect("write");
    let conf = BTreeMap::from([("tbl".to_string(), "../../../x".to_string())]);
    let loaded = cdcflow_plan::load(&pipe, &conf);
    assert!(loaded.has_errors(), "validate refuses these names");
    let pipeline = loaded.pipeline.expect("pipeline");
    let before = tree_outside(root.path(), &pipe);

    let report = run(&pipeline, &RunOptions::default()).await.expect("run");
    assert!(!report.failed(), "{report:?}");
    assert_eq!(
        tree_outside(root.path(), &pipe),
        before,
        "run wrote outside"
    );
    let storage = pipe.join("_storage");
    let abs_folder = abs.to_lowercase().replace('/', "@2F");
    assert_eq!(
        names_under(&storage.join("tables")),
        ["@2E.@2F..@2F..@2Fx", abs_folder.as_str(), "raw"]
    );
    assert!(
        names_under(&storage.join("checkpoints")).contains(&"@2E.@2F..@2F..@2Fvictim".to_string())
    );

    fs::write(pipe.join("landing/2.json"), "{\"id\":2}\n").expect("write");
    let options = RunOptions {
        full_refresh: Some(vec![]),
        force: true,
        ..RunOptions::default()
    };
    let report = run(&pipeline, &options).await.expect("full refresh");
    assert!(!report.failed(), "{report:?}");
    assert_eq!(
        tree_outside(root.path(), &pipe),
        before,
        "a full refresh changed what is outside"
    );
    assert_eq!(
        fs::read_to_string(victim.join("precious.txt")).expect("still there"),
        "keep me"
    );
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
