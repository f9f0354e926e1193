//! The commands on the example pipelines, their output formats and exit codes.

use std::fs;

use crate::{cdcflow, copy_dir, repo, stderr, stdout};

fn example(name: &str) -> String {
    repo()
        .join("pipelines")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn examples_validate() {
    for p in [
        "customers",
        "orders",
        "orders_legacy",
        "crm_postgres",
        "shop_mysql",
    ] {
        let out = cdcflow(&["validate", "-p", &example(p)]);
        assert!(out.status.success(), "{p}: {}", stderr(&out));
        assert!(stdout(&out).contains("is valid"), "{}", stdout(&out));
    }
}

#[test]
fn explain_prints_the_auto_cdc_plan() {
    let out = cdcflow(&[
        "explain",
        "-p",
        &example("orders"),
        "--flow",
        "orders_changes",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("AutoCdc: target=silver_orders_history keys=[order_id]"),
        "{text}"
    );
    assert!(text.contains("scd_type=2"), "{text}");
    assert!(text.contains("TableScan: bronze_order_changes"), "{text}");
    assert!(
        !text.contains("gold_orders_by_status"),
        "only the flow asked for: {text}"
    );
}

#[test]
fn explain_of_an_unknown_flow_is_a_usage_error() {
    let out = cdcflow(&["explain", "-p", &example("orders"), "--flow", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no flow named `nope`"));
}

#[test]
fn run_flow_takes_a_glob_and_a_glob_that_matches_nothing_is_a_usage_error() {
    let dir = crate::example_copy("orders");
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["run", "-p", p, "--flow", "*order*changes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = stdout(&out);
    assert!(
        summary.contains("bronze_order_changes") && summary.contains("orders_changes"),
        "both flows the glob matches ran: {summary}"
    );
    assert!(!summary.contains("gold_orders_by_status"), "{summary}");
    let out = cdcflow(&["run", "-p", p, "--flow", "nothing_*"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no flow matches `nothing_*`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(
        cdcflow(&["validate", "--format", "xml"]).status.code(),
        Some(2)
    );
    assert_eq!(cdcflow(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn text_diagnostics_show_file_line_col_label_and_help() {
    let case = repo().join("tests/validate/scd_rules");
    let out = cdcflow(&["validate", "-p", case.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("flows.sql:5:3"), "{err}");
    assert!(
        err.contains("APPLY AS TRUNCATE is not supported with SCD TYPE 2"),
        "{err}"
    );
    assert!(err.contains("TRUNCATE with SCD TYPE 2"), "label: {err}");
    assert!(err.contains("help:"), "{err}");
}

#[test]
fn validate_writes_nothing_into_the_pipeline_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = repo().join("pipelines/orders");
    copy_dir(&src, dir.path());
    let before = listing(dir.path());
    let out = cdcflow(&["validate", "-p", dir.path().to_str().expect("path")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let _ = cdcflow(&["explain", "-p", dir.path().to_str().expect("path")]);
    assert_eq!(before, listing(dir.path()));
}

#[test]
fn conf_overrides_configuration() {
    let case = repo().join("tests/validate/configuration");
    let out = cdcflow(&[
        "validate",
        "-p",
        case.to_str().expect("path"),
        "--conf",
        "missing.key=5",
        "--format",
        "json",
    ]);
    assert!(
        !stdout(&out).contains("unknown_configuration"),
        "{}",
        stdout(&out)
    );
}

fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            out.push(p.to_string_lossy().into_owned());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn explain_analyze_runs_each_query_over_its_next_batch_and_commits_nothing() {
    let dir = crate::example_copy("orders");
    let p = dir.path().to_str().expect("path");
    assert!(cdcflow(&["run", "-p", p]).status.success());
    let before = listing(dir.path());

    let out = cdcflow(&["explain", "-p", p, "--physical"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // The gold view's aggregate, planned by DataFusion over the silver table.
    assert!(
        text.contains("AggregateExec: mode=FinalPartitioned"),
        "{text}"
    );
    // The AUTO CDC flow: the apply over its events, over its columns, sequence and
    // operation.
    assert!(
        text.contains("AutoCdcApplyExec: target=silver_orders_history scd_type=2"),
        "{text}"
    );
    assert!(
        text.contains("AutoCdcEventsExec: source=bronze_order_changes keys=[order_id]"),
        "{text}"
    );
    assert!(
        text.contains("CASE WHEN operation@4 = DELETE THEN 1 ELSE 0 END as __cdcflow_operation"),
        "{text}"
    );
    assert!(!text.contains("metrics=["), "{text}");

    let out = cdcflow(&[
        "explain",
        "-p",
        p,
        "--flow",
        "gold_orders_by_status",
        "--analyze",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("run over the next batch's input"), "{text}");
    // The scan of the silver table is the plan's leaf.
    assert!(
        text.trim_end()
            .lines()
            .next_back()
            .is_some_and(|l| l.contains("DataSourceExec")),
        "{text}"
    );
    // Two statuses are open at the end of the example's changes.
    assert!(
        text.contains("ProjectionExec: expr=[status@0 as status"),
        "{text}"
    );
    assert!(text.contains("metrics=[output_rows=2"), "{text}");

    // Read-only: no table, checkpoint or log changed, and the next run has nothing new.
    assert_eq!(before, listing(dir.path()));

    // Two changes reach the bronze table; the AUTO CDC flow's events are made over them
    // and counted, and its apply, which would commit, is not run.
    let landed = dir.path().join("landing/orders/0100.json");
    fs::write(
        &landed,
        "{\"order_id\": 100, \"customer_id\": 1, \"status\": \"closed\", \"amount\": 25.50, \"operation\": \"UPDATE\", \"commit_ts\": \"2024-06-09T10:00:00Z\", \"log_position\": 900}\n{\"order_id\": 900, \"customer_id\": 9, \"status\": \"placed\", \"amount\": 1.00, \"operation\": \"INSERT\", \"commit_ts\": \"2024-06-09T10:00:01Z\", \"log_position\": 901}\n",
    )
    .expect("land");
    fs::File::options()
        .write(true)
        .open(&landed)
        .and_then(|f| {
            f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        })
        .expect("mtime");
    let out = cdcflow(&["run", "-p", p, "--flow", "bronze_order_changes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let before = listing(dir.path());
    let out = cdcflow(&["explain", "-p", p, "--flow", "orders_changes", "--analyze"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("AutoCdcApplyExec was not run"), "{text}");
    let events = text
        .lines()
        .find(|l| l.contains("AutoCdcEventsExec:"))
        .unwrap_or_default();
    assert!(events.contains("metrics=[output_rows=2"), "{text}");
    assert_eq!(before, listing(dir.path()));
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}", stderr(&out));
    // After a run, the plan its batch executed is shown too, with the apply's counts.
    let out = cdcflow(&["explain", "-p", p, "--flow", "orders_changes", "--analyze"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("as the last run executed it"), "{text}");
    let applied = text
        .lines()
        .rfind(|l| l.contains("AutoCdcApplyExec:"))
        .unwrap_or_default();
    assert!(applied.contains("upserted="), "{text}");
    assert!(applied.contains("rows_written="), "{text}");
    assert!(applied.contains("apply_time="), "{text}");
}

#[test]
fn explain_shows_a_stateful_operator_with_its_watermark_and_state_and_analyze_writes_no_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let case = repo().join("tests/run/stream_tumbling");
    for f in ["pipeline.yaml", "flows.sql"] {
        fs::copy(case.join(f), dir.path().join(f)).expect("copy");
    }
    copy_dir(&case.join("steps/1/files"), dir.path());
    let p = dir.path().to_str().expect("path");
    assert!(cdcflow(&["run", "-p", p]).status.success());
    // The event log keeps the state after the batch, as columns.
    let out = crate::query_csv(
        dir.path(),
        "SELECT state_rows, state_rows_removed, rows_dropped_by_watermark, watermark, state_disk_bytes > 0 AS on_disk FROM event_log WHERE event = 'flow_completed'",
    );
    assert!(
        stdout(&out).contains("1,2,0,2026-01-01T00:01:10Z,true"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    copy_dir(&case.join("steps/2/files"), dir.path());
    let before = listing(dir.path());

    let out = cdcflow(&["explain", "-p", p, "--physical"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // The operator in the plan, over the projection of its keys and event time, with
    // the watermark and state the first run left.
    assert!(
        text.contains("StatefulAggregateExec: mode=append, keys=[e.k, window(e.ts"),
        "{text}"
    );
    assert!(
        text.contains("watermark=2026-01-01T00:01:10Z, state=1 row(s) in 1 file(s)"),
        "{text}"
    );
    assert!(text.contains("et, "), "{text}");

    let out = cdcflow(&["explain", "-p", p, "--analyze"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // Spark's state metrics, as the operator's own.
    assert!(text.contains("numRowsDroppedByWatermark=1"), "{text}");
    assert!(text.contains("numRowsTotal="), "{text}");
    // Nothing written: no state version, table or checkpoint changed.
    assert_eq!(before, listing(dir.path()));
}
