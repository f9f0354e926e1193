//! The pipeline of the path-traversal attack (issue 12), shared by the e2e test and the
//! runtime's `it` test (which includes this file by its path): in a temporary folder, a
//! `victim` folder with a file, and beside it a pipeline whose flow is named
//! `../../../victim`, which writes into a table named by an absolute path in the same
//! temporary folder, and whose table `${tbl}` is named by `--conf tbl=../../../x`.
//! From `_storage/checkpoints/<flow>` and `_storage/tables/<table>`, three `..` reach
//! the folder beside the pipeline.

use std::fs;
use std::path::PathBuf;

/// The `--conf` key and value that name a table outside the pipeline.
pub const CONF: (&str, &str) = ("tbl", "../../../x");

pub struct EscapeAttempt {
    pub root: tempfile::TempDir,
    pub pipe: PathBuf,
    pub victim_file: PathBuf,
    /// The absolute path the second table is named by.
    pub abs: String,
}

impl EscapeAttempt {
    pub fn new() -> Self {
        let root = lowercase_tempdir();
        let victim = root.path().join("victim");
        fs::create_dir_all(&victim).expect("mkdir");
        let victim_file = victim.join("precious.txt");
        fs::write(&victim_file, "keep me").expect("write");
        let pipe = root.path().join("pipe");
        fs::create_dir_all(pipe.join("landing")).expect("mkdir");
        fs::write(pipe.join("pipeline.yaml"), "name: attack\n").expect("write");
        let abs = root
            .path()
            .join("outside/abs_table")
            .to_str()
            .expect("utf-8")
            .to_string();
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
        let attempt = Self {
            root,
            pipe,
            victim_file,
            abs,
        };
        attempt.land(1);
        attempt
    }

    /// Lands the landing file `<n>.json` with one row, id `n`.
    pub fn land(&self, n: u32) {
        fs::write(
            self.pipe.join(format!("landing/{n}.json")),
            format!("{{\"id\":{n}}}\n"),
        )
        .expect("write");
    }

    /// Every file and folder in the temporary folder, leaving out the pipeline.
    pub fn tree_outside(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![self.root.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).expect("read_dir") {
                let path = entry.expect("entry").path();
                if path == self.pipe {
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

    /// Fails unless the victim's file is there, unchanged.
    pub fn assert_victim_intact(&self) {
        assert_eq!(
            fs::read_to_string(&self.victim_file).expect("the victim's file is still there"),
            "keep me"
        );
    }
}

/// A temporary folder whose path is lower case: cdcflow lower-cases dataset names, so
/// an absolute path written as a table name names this folder only when it is.
fn lowercase_tempdir() -> tempfile::TempDir {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("cdcflow-escape-{}-{nanos}", std::process::id());
    let dir = tempfile::Builder::new()
        .prefix(&prefix)
        .rand_bytes(0)
        .tempdir()
        .expect("tempdir");
    let path = dir.path().to_string_lossy();
    assert_eq!(
        path,
        path.to_lowercase(),
        "the temporary folder's path is lower case"
    );
    dir
}
