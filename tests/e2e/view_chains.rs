//! Chains of views. A flow plans the views it reads inline; a chain deeper than the limit
//! (100, as Spark's `spark.sql.view.maxNestedViewDepth`) is an error at the view that
//! passes it, `validate` reports it and `run` refuses the pipeline: neither overflows the
//! stack, however long the chain.

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
