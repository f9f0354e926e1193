//! `cdcflow query` only reads: every statement that writes a table or a file, defines or
//! drops something, or changes the session is refused, named, and nothing of it runs.

use crate::{cdcflow, copy_dir, repo, stderr, stdout};

fn orders_after_a_run() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let out = cdcflow(&["run", "-p", dir.path().to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    dir
}

fn query(dir: &std::path::Path, sql: &str) -> std::process::Output {
    crate::query_csv(dir, sql)
}

#[test]
fn statements_that_write_are_refused_naming_their_kind() {
    let dir = orders_after_a_run();
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let copied = elsewhere.path().join("copied.csv");
    let silver = "SELECT order_id, status, __START_AT FROM silver_orders_history ORDER BY order_id, __START_AT";
    let before = stdout(&query(dir.path(), silver));
    let cases = [
        (
            "INSERT INTO silver_orders_history SELECT * FROM silver_orders_history".to_string(),
            "INSERT INTO",
        ),
        (
            format!(
                "COPY (SELECT * FROM silver_orders_history) TO '{}' STORED AS CSV",
                copied.display()
            ),
            "COPY … TO",
        ),
        (
            format!(
                "CREATE EXTERNAL TABLE outside STORED AS CSV LOCATION '{}'",
                elsewhere.path().display()
            ),
            "CREATE EXTERNAL TABLE",
        ),
        ("SET datafusion.execution.batch_size = 1".to_string(), "SET"),
        ("SET TIME ZONE = 'UTC'".to_string(), "SET"),
        ("SET anything TO 1".to_string(), "SET"),
        ("RESET datafusion.execution.batch_size".to_string(), "RESET"),
        (
            "EXPLAIN ANALYZE INSERT INTO silver_orders_history SELECT * FROM silver_orders_history"
                .to_string(),
            "INSERT INTO",
        ),
        ("DELETE FROM silver_orders_history".to_string(), "DELETE"),
        ("DROP TABLE silver_orders_history".to_string(), "DROP TABLE"),
        ("CREATE VIEW v AS SELECT 1".to_string(), "CREATE VIEW"),
    ];
    for (sql, kind) in cases {
        let out = query(dir.path(), &sql);
        assert_eq!(out.status.code(), Some(1), "{sql}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "error: `cdcflow query` only reads: {kind} is refused"
            )),
            "{sql}: {err}"
        );
        assert!(
            err.contains("help: tables change only through `cdcflow run`"),
            "{err}"
        );
        assert_eq!(stdout(&out), "", "{sql}");
    }
    assert!(!copied.exists(), "COPY wrote {}", copied.display());
    assert_eq!(
        std::fs::read_dir(elsewhere.path())
            .expect("read_dir")
            .count(),
        0
    );
    assert_eq!(
        stdout(&query(dir.path(), silver)),
        before,
        "the table is unchanged"
    );
    // A second run still finds nothing to do: no commit slipped in.
    let rerun = cdcflow(&["run", "-p", dir.path().to_str().expect("utf-8")]);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    assert!(!stdout(&rerun).contains("batch 1"), "{}", stdout(&rerun));
}

#[test]
fn reads_still_run() {
    let dir = orders_after_a_run();
    for sql in [
        "SELECT count(*) AS n FROM gold_orders_by_status",
        "WITH g AS (SELECT * FROM gold_orders_by_status) SELECT count(*) AS n FROM g",
        "EXPLAIN SELECT * FROM gold_orders_by_status",
        "DESCRIBE gold_orders_by_status",
        "VALUES (1)",
    ] {
        let out = query(dir.path(), sql);
        assert!(out.status.success(), "{sql}: {}", stderr(&out));
        assert!(!stdout(&out).is_empty(), "{sql}");
    }
}
