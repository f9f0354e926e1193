//! `cdcflow query` reads older versions (`VERSION AS OF`, `TIMESTAMP AS OF`) or says why
//! it cannot, and answers `DESCRIBE HISTORY`, `DESCRIBE DETAIL` and `SHOW TABLES`; each
//! commit's `commitInfo` says what it did.

use std::path::Path;

use crate::{cdcflow, copy_dir, query_csv as query, repo, stderr, stdout};

/// The orders example run twice: its first landing file, then its second.
fn orders_run_twice() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let second = dir.path().join("landing/orders/0002.json");
    let aside = dir.path().join("0002.json");
    std::fs::rename(&second, &aside).expect("set the second file aside");
    run(dir.path(), &[]);
    std::fs::rename(&aside, &second).expect("land the second file");
    run(dir.path(), &[]);
    dir
}

fn run(dir: &Path, more: &[&str]) {
    let mut args = vec!["run", "-p", dir.to_str().expect("utf-8")];
    args.extend(more);
    let out = cdcflow(&args);
    assert!(out.status.success(), "{}", stderr(&out));
}

fn ok(dir: &Path, sql: &str) -> String {
    let out = query(dir, sql);
    assert!(out.status.success(), "{sql}: {}", stderr(&out));
    stdout(&out)
}

fn failure(dir: &Path, sql: &str) -> String {
    let out = query(dir, sql);
    assert_eq!(out.status.code(), Some(1), "{sql}: {}", stdout(&out));
    assert_eq!(stdout(&out), "", "{sql}");
    stderr(&out)
}

#[test]
fn version_as_of_reads_that_version() {
    let dir = orders_run_twice();
    let d = dir.path();
    let count = "SELECT count(*) AS n FROM bronze_order_changes";
    assert_eq!(ok(d, count), "n\n9\n");
    assert_eq!(ok(d, &format!("{count} VERSION AS OF 0")), "n\n4\n");
    assert_eq!(ok(d, &format!("{count} VERSION AS OF 1")), "n\n9\n");
    // The same table at two versions in one query, columns qualified by its name.
    assert_eq!(
        ok(
            d,
            "SELECT (SELECT count(*) FROM bronze_order_changes VERSION AS OF 0) AS old, \
             (SELECT count(bronze_order_changes.order_id) FROM bronze_order_changes) AS new"
        ),
        "old,new\n4,9\n"
    );
    // AUTO CDC history at its first batch: order 100 was paid, not yet shipped.
    let order_100 =
        "SELECT status FROM silver_orders_history{at} WHERE order_id = 100 ORDER BY __START_AT";
    assert_eq!(
        ok(d, &order_100.replace("{at}", " VERSION AS OF 0")),
        "status\nplaced\npaid\n"
    );
    assert_eq!(
        ok(d, &order_100.replace("{at}", "")),
        "status\nplaced\npaid\nshipped\n"
    );
    let err = failure(d, &format!("{count} VERSION AS OF 7"));
    assert!(
        err.contains("error: `bronze_order_changes` has no version 7: its versions are 0 to 1"),
        "{err}"
    );
    assert!(
        err.contains("help: `DESCRIBE HISTORY bronze_order_changes` lists the versions"),
        "{err}"
    );
}

#[test]
fn timestamp_as_of_reads_the_version_committed_by_then() {
    let dir = orders_run_twice();
    let d = dir.path();
    // The timestamp DESCRIBE HISTORY shows for version 0 reads version 0.
    let history = ok(d, "DESCRIBE HISTORY bronze_order_changes");
    let first = history.lines().last().expect("version 0");
    assert!(first.starts_with("0,"), "{history}");
    let ts = first.split(',').nth(1).expect("timestamp");
    assert_eq!(
        ok(
            d,
            &format!("SELECT count(*) AS n FROM bronze_order_changes TIMESTAMP AS OF '{ts}'")
        ),
        "n\n4\n"
    );
    assert_eq!(
        ok(
            d,
            "SELECT count(*) AS n FROM bronze_order_changes TIMESTAMP AS OF current_timestamp()"
        ),
        "n\n9\n"
    );
    let err = failure(
        d,
        "SELECT * FROM bronze_order_changes TIMESTAMP AS OF '2000-01-01'",
    );
    assert!(
        err.contains("error: `bronze_order_changes` has no version as old as 2000-01-01 00:00:00.000 UTC: its oldest version in the log, 0, was committed at"),
        "{err}"
    );
    let err = failure(
        d,
        "SELECT * FROM bronze_order_changes TIMESTAMP AS OF 'yesterday'",
    );
    assert!(
        err.contains("TIMESTAMP AS OF 'yesterday': 'yesterday' is not a timestamp"),
        "{err}"
    );
}

#[test]
fn a_version_vacuum_removed_fails_clearly() {
    let dir = orders_run_twice();
    let d = dir.path();
    // The second batch rewrote the history table; vacuum removes the first one's file.
    let out = cdcflow(&[
        "vacuum",
        "-p",
        d.to_str().expect("utf-8"),
        "silver_orders_history",
        "--retain",
        "0",
        "--force",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = failure(d, "SELECT * FROM silver_orders_history VERSION AS OF 0");
    assert!(
        err.contains("error: version 0 of `silver_orders_history` can no longer be read: vacuum removed 1 of its data files"),
        "{err}"
    );
    assert_eq!(
        ok(
            d,
            "SELECT count(*) AS n FROM silver_orders_history VERSION AS OF 1"
        ),
        "n\n6\n"
    );
}

#[test]
fn describe_history_says_what_each_commit_did() {
    let dir = orders_run_twice();
    let d = dir.path();
    let columns = "version,timestamp,operation,flow,batch,rowsWritten,filesAdded,filesRemoved,operationParameters,readVersion,engineInfo";
    let cut = |text: &str| -> Vec<String> {
        // Everything but the timestamp, which changes from run to run.
        text.lines()
            .map(|l| {
                let mut f: Vec<&str> = l.splitn(3, ',').collect();
                f.remove(1);
                f.join(",")
            })
            .collect()
    };
    let bronze = ok(d, "DESCRIBE HISTORY bronze_order_changes");
    assert_eq!(bronze.lines().next(), Some(columns));
    assert_eq!(
        cut(&bronze)[1..],
        [
            "1,STREAMING UPDATE,bronze_order_changes,1,5,1,0,\"{cdcflow.batch: 1, cdcflow.flow: bronze_order_changes, cdcflow.operation: append, epochId: 1, outputMode: Append, queryId: bronze_order_changes}\",,cdcflow-0.1.0 (delta-rs)",
            "0,STREAMING UPDATE,bronze_order_changes,0,4,1,0,\"{cdcflow.batch: 0, cdcflow.flow: bronze_order_changes, cdcflow.operation: append, epochId: 0, outputMode: Append, queryId: bronze_order_changes}\",,cdcflow-0.1.0 (delta-rs)",
        ]
    );
    let silver = ok(d, "DESCRIBE HISTORY silver_orders_history LIMIT 1");
    assert_eq!(
        cut(&silver)[1..],
        [
            "1,MERGE,orders_changes,1,6,1,1,\"{cdcflow.batch: 1, cdcflow.flow: orders_changes, cdcflow.keys: order_id, cdcflow.operation: auto cdc, cdcflow.scdType: 2}\",,cdcflow-0.1.0 (delta-rs)"
        ]
    );
    // A full refresh empties the table, then recomputes it.
    run(d, &["--full-refresh", "gold_orders_by_status"]);
    let gold = ok(d, "DESCRIBE HISTORY gold_orders_by_status LIMIT 2");
    assert_eq!(
        cut(&gold)[1..],
        [
            "3,CREATE OR REPLACE TABLE AS SELECT,gold_orders_by_status,0,2,1,0,\"{cdcflow.batch: 0, cdcflow.flow: gold_orders_by_status, cdcflow.operation: materialized view}\",,cdcflow-0.1.0 (delta-rs)",
            "2,CREATE OR REPLACE TABLE,,,0,0,1,\"{cdcflow.flows: gold_orders_by_status, cdcflow.operation: full refresh}\",,cdcflow-0.1.0 (delta-rs)",
        ]
    );
    // Other Delta readers see the same: the commit's own commitInfo names it.
    let log = d.join("_storage/tables/silver_orders_history/_delta_log/00000000000000000001.json");
    let text = std::fs::read_to_string(&log).expect("commit 1");
    let info: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("first action")).expect("json");
    assert_eq!(info["commitInfo"]["operation"], "MERGE", "{text}");
    assert_eq!(
        info["commitInfo"]["operationParameters"]["cdcflow.flow"],
        "orders_changes"
    );
}

#[test]
fn describe_detail_and_show_tables() {
    let dir = orders_run_twice();
    let d = dir.path();
    let out = cdcflow(&[
        "query",
        "-p",
        d.to_str().expect("utf-8"),
        "DESCRIBE DETAIL silver_orders_history",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let row: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("one json row");
    assert_eq!(row["format"], "delta");
    assert_eq!(row["name"], "silver_orders_history");
    assert_eq!(row["version"], 1);
    assert_eq!(row["numFiles"], 1);
    assert_eq!(row["kind"], "streaming table");
    assert_eq!(row["partitionColumns"], serde_json::json!([]));
    assert_eq!(
        row["properties"]["delta.enableDeletionVectors"], "true",
        "{row}"
    );
    // Delta Lake's checkpoint interval, not delta-rs's 100 (docs/runtime.md).
    assert_eq!(row["properties"]["delta.checkpointInterval"], "10", "{row}");
    assert_eq!(
        ok(d, "SHOW TABLES"),
        "tableName,kind\nbronze_order_changes,streaming table\nsilver_orders_history,streaming table\ngold_orders_by_status,materialized view\nevent_log,event log\n"
    );
    let err = failure(d, "DESCRIBE HISTORY silver_orders");
    assert!(
        err.contains("error: unknown table `silver_orders`"),
        "{err}"
    );
    let err = failure(d, "DESCRIBE DETAIL gold_orders_by_status__quarantine");
    assert!(
        err.contains("error: table `gold_orders_by_status__quarantine` has not been created yet"),
        "{err}"
    );
}
