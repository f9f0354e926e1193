//! `--log-format json`: one object per line on stderr whose fields keep their types, so
//! that a log collector can filter on them (`outcome = "committed"`, `lag_ms > 1000`).

use serde_json::Value;

use crate::{cdcflow, copy_dir, repo, stderr};

/// The `flow finished` events a run logged.
fn flow_events(p: &str) -> Vec<Value> {
    let out = cdcflow(&["--log-format", "json", "run", "-p", p]);
    assert!(out.status.success(), "{}", stderr(&out));
    stderr(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|e| e["message"] == "flow finished")
        .collect()
}

#[test]
fn json_logs_have_typed_fields_and_nulls_not_debug_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("pipelines/orders"), dir.path());
    let p = dir.path().to_str().expect("utf-8");

    let first = flow_events(p);
    assert_eq!(first.len(), 3, "{first:?}");
    let bronze = &first[0];
    assert_eq!(bronze["flow"], "bronze_order_changes");
    assert_eq!(bronze["outcome"], "committed");
    assert_eq!(bronze["batch"], 0);
    assert_eq!(bronze["reason"], Value::Null);
    assert_eq!(bronze["rows_read"], 9);
    assert!(bronze["lag_ms"].is_i64(), "{bronze}");
    assert!(bronze["millis"].is_u64(), "{bronze}");
    // A materialized view's batch has no change time, so no lag.
    assert_eq!(first[2]["lag_ms"], Value::Null, "{}", first[2]);

    let again = flow_events(p);
    for e in &again {
        assert_eq!(e["outcome"], "up_to_date", "{e}");
        assert!(e["reason"].is_string(), "{e}");
        assert_eq!(e["batch"], Value::Null, "{e}");
        assert_eq!(e["lag_ms"], Value::Null, "{e}");
    }
    for e in first.iter().chain(&again) {
        let text = e.to_string();
        for debug in ["Some(", "None", "UpToDate", "Committed", "{ "] {
            assert!(!text.contains(debug), "Rust Debug text in {text}");
        }
    }
}
