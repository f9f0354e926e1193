//! A pipeline stays inside its storage folder: a flow named `../../../victim`, a table
//! named by an absolute path and a table name substituted from `--conf` are reported by
//! `validate`, and neither `run` nor `run --full-refresh` creates, changes or deletes
//! anything beside the pipeline folder.

use std::fs;
use std::path::{Path, PathBuf};

use crate::{cdcflow, stderr, stdout};

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

#[test]
fn names_that_climb_out_of_the_storage_folder_are_reported_and_touch_nothing_outside() {
    let root = lowercase_tempdir();
    let victim = root.path().join("victim");
    fs::create_dir_all(&victim).expect("mkdir");
    fs::write(victim.join("precious.txt"), "keep me").expect("write");
    let pipe = root.path().join("pipe");
    fs::create_dir_all(pipe.join("landing")).expect("mkdir");
    fs::write(pipe.join("pipeline.yaml"), "name: attack\n").expect("write");
    fs::write(pipe.join("landing/1.json"), "{\"id\":1}\n").expect("write");
    // From `_storage/checkpoints/<flow>` and `_storage/tables/<table>`, three `..`
    // reach the folder beside the pipeline.
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
    let before = tree_outside(root.path(), &pipe);
    let p = pipe.to_str().expect("utf-8");
    let conf = ["--conf", "tbl=../../../x"];

    let run = cdcflow(&[&["run", "-p", p][..], &conf].concat());
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(
        tree_outside(root.path(), &pipe),
        before,
        "run wrote outside"
    );
    fs::write(pipe.join("landing/2.json"), "{\"id\":2}\n").expect("write");
    let refresh = cdcflow(&[&["run", "-p", p, "--full-refresh", "--force"][..], &conf].concat());
    assert_eq!(refresh.status.code(), Some(1), "{}", stderr(&refresh));
    assert_eq!(
        tree_outside(root.path(), &pipe),
        before,
        "a full refresh changed what is outside"
    );
    assert_eq!(
        fs::read_to_string(victim.join("precious.txt")).expect("still there"),
        "keep me"
    );

    let out = cdcflow(&[&["validate", "-p", p, "--format", "json"][..], &conf].concat());
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let reported: Vec<String> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter(|v| v["code"] == "cdcflow::invalid_name")
        .map(|v| {
            format!(
                "{}:{}:{}",
                v["file"].as_str().unwrap_or("?"),
                v["line"],
                v["column"]
            )
        })
        .collect();
    assert_eq!(
        reported,
        ["flows.sql:2:35", "flows.sql:3:13", "flows.sql:4:35"],
        "{}",
        stdout(&out)
    );
    let text = stdout(&out);
    assert!(
        text.contains("flow name `../../../victim` contains `/`"),
        "{text}"
    );
    assert!(
        text.contains("dataset name `../../../x` contains `/`"),
        "{text}"
    );
    assert!(
        stderr(&run).contains("invalid_name") || stdout(&run).contains("invalid_name"),
        "run names the problem: {}",
        stderr(&run)
    );
}
