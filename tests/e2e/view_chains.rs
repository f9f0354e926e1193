//! Chains of views. A flow plans the views it reads inline; a chain deeper than the limit
//! (100, as Spark's `spark.sql.view.maxNestedViewDepth`) is an error at the view that
//! passes it, `validate` reports it and `run` refuses the pipeline: neither overflows the
//! stack, however long the chain. A view over a stream, read as a stream, is as
//! incremental as the stream.

use crate::{cdcflow, cdcflow_in, stderr, stdout};

/// A pipeline: a materialized view `base`, views `v1` … `v<n>` each reading the one
/// before (`v<i>` on line `i + 1` of views.sql), and a materialized view `top` over the
/// last.
fn chain(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pipeline.yaml"), "name: chain\n").expect("write");
    let mut sql = String::from("CREATE MATERIALIZED VIEW base AS SELECT 7 AS x;\n");
    sql.push_str("CREATE VIEW v1 AS SELECT x FROM base;\n");
    for i in 2..=n {
        sql.push_str(&format!("CREATE VIEW v{i} AS SELECT x FROM v{};\n", i - 1));
    }
    sql.push_str(&format!(
        "CREATE MATERIALIZED VIEW top AS SELECT x FROM v{n};\n"
    ));
    std::fs::write(dir.path().join("views.sql"), sql).expect("write");
    dir
}

#[test]
fn a_chain_of_100_views_validates_and_runs() {
    let dir = chain(100);
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["validate", "-p", p]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cdcflow(&["query", "-p", p, "SELECT x FROM top", "--format", "csv"]);
    assert_eq!(stdout(&out), "x\n7\n", "{}", stderr(&out));
}

#[test]
fn chains_of_400_and_1000_views_are_an_error_at_the_101st_view() {
    for n in [400, 1000] {
        let dir = chain(n);
        let p = dir.path().to_str().expect("utf-8");
        // From the pipeline folder, so that files are named relative to it.
        let out = cdcflow_in(dir.path(), &["validate", "--format", "json"]);
        assert_eq!(out.status.code(), Some(1), "{n}: {}", stderr(&out));
        let errors: Vec<serde_json::Value> = stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .filter(|d: &serde_json::Value| d["severity"] == "error")
            .collect();
        assert_eq!(errors.len(), 1, "{n}: {errors:?}");
        let e = &errors[0];
        assert_eq!(e["code"], "cdcflow::view_depth");
        assert_eq!(
            (e["file"].as_str(), e["line"].as_u64(), e["column"].as_u64()),
            (Some("views.sql"), Some(102), Some(13)),
            "at v101: {e}"
        );
        assert!(
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("`v101` ends a chain of 101 views")),
            "{e}"
        );

        let out = cdcflow(&["run", "-p", p]);
        assert_eq!(out.status.code(), Some(1), "{n}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("views.sql:102:13"), "{err}");
        assert!(err.contains("nothing was run"), "{err}");
        assert!(
            !dir.path().join("_storage/tables").exists(),
            "{n}: nothing was written"
        );
    }
}

/// A view between bronze and an AUTO CDC flow, as the help of a refused WHERE suggests:
/// read as a stream, it reads only what bronze appended since the flow's last batch, so
/// a continuous run with nothing new commits nothing (it committed about once a second).
#[test]
fn a_continuous_run_over_a_view_of_a_stream_commits_nothing_when_nothing_is_new() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("pipeline.yaml"),
        "name: idle\ntrigger_interval_seconds: 0.2\nlanding_settle_seconds: 0\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE bronze AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, seq BIGINT');\n\
         CREATE TEMPORARY VIEW keyed AS SELECT * FROM STREAM(bronze) WHERE id IS NOT NULL;\n\
         CREATE OR REFRESH STREAMING TABLE users;\n\
         CREATE FLOW users_cdc AS AUTO CDC INTO users FROM STREAM(keyed) KEYS (id) SEQUENCE BY seq;\n",
    )
    .expect("write");
    std::fs::create_dir_all(dir.path().join("landing")).expect("mkdir");
    std::fs::write(
        dir.path().join("landing/1.json"),
        "{\"id\": 1, \"seq\": 1}\n{\"id\": null, \"seq\": 2}\n",
    )
    .expect("write");
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let commits = |table: &str| {
        std::fs::read_dir(
            dir.path()
                .join("_storage/tables")
                .join(table)
                .join("_delta_log"),
        )
        .expect("log")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".json"))
        })
        .count()
    };
    assert_eq!(commits("users"), 1);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", p, "--continuous"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Ten trigger intervals and more.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let term = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(commits("users"), 1, "{}", stdout(&out));
    assert_eq!(commits("bronze"), 1, "{}", stdout(&out));
}
