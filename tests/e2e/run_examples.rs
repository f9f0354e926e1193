//! `cdcflow run`, `query` and `tables` on the example pipelines and on Parquet landing
//! files, and the silver tables read back by an independent Delta reader.

use std::fs;
use std::process::Command;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::parquet::arrow::ArrowWriter;

use crate::{cdcflow, copy_dir, example_copy, repo, stderr, stdout};

/// A copy of an example pipeline in a temporary folder (runs write `_storage/`).
/// The rows `sql` gives over the pipeline in `dir`, one JSON object each.
pub(crate) fn json_rows(dir: &str, sql: &str) -> Vec<serde_json::Value> {
    let out = cdcflow(&["query", "-p", dir, sql, "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("ndjson"))
        .collect()
}

#[test]
fn the_orders_example_runs_end_to_end_and_a_second_run_has_nothing_to_do() {
    let dir = example_copy("orders");
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let summary = stdout(&out);
    assert!(summary.contains("orders_changes"), "{summary}");
    assert!(summary.contains("duplicates 1"), "{summary}");

    let current = json_rows(
        p,
        "SELECT order_id, status, customer_id FROM silver_orders_history WHERE __END_AT IS NULL ORDER BY order_id",
    );
    assert_eq!(
        current,
        vec![
            serde_json::json!({"order_id": 100, "status": "shipped", "customer_id": 1}),
            serde_json::json!({"order_id": 102, "status": "placed", "customer_id": 4}),
        ]
    );
    let history = json_rows(p, "SELECT count(*) AS versions FROM silver_orders_history");
    assert_eq!(history, vec![serde_json::json!({"versions": 6})]);
    let gold = json_rows(
        p,
        "SELECT status, orders FROM gold_orders_by_status ORDER BY status",
    );
    assert_eq!(
        gold,
        vec![
            serde_json::json!({"status": "placed", "orders": 1}),
            serde_json::json!({"status": "shipped", "orders": 1}),
        ]
    );

    let again = cdcflow(&["run", "-p", p]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        stdout(&again).matches("up to date").count(),
        3,
        "{}",
        stdout(&again)
    );

    let tables = cdcflow(&["tables", "-p", p]);
    let text = stdout(&tables);
    let listed = |row: &str| {
        text.lines().any(|l| {
            l.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .starts_with(row)
        })
    };
    assert!(
        listed("silver_orders_history streaming table 2 6"),
        "{text}"
    );
    assert!(
        listed("gold_orders_by_status materialized view - 2"),
        "{text}"
    );
}

#[test]
fn the_customers_example_runs_end_to_end() {
    let dir = example_copy("customers");
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let rows = json_rows(
        p,
        "SELECT customer_id, city FROM silver_customers ORDER BY customer_id",
    );
    let ids: Vec<i64> = rows
        .iter()
        .filter_map(|r| r["customer_id"].as_i64())
        .collect();
    assert_eq!(ids, vec![1, 2, 3, 5, 6]);
}

#[test]
fn query_json_writes_iso_timestamps_and_explicit_nulls() {
    let dir = example_copy("orders");
    let p = dir.path().to_str().expect("utf-8");
    assert!(cdcflow(&["run", "-p", p]).status.success());
    let rows = json_rows(
        p,
        "SELECT commit_ts, customer_id FROM bronze_order_changes WHERE operation = 'DELETE'",
    );
    assert_eq!(
        rows,
        vec![serde_json::json!({"commit_ts": "2024-06-02T08:00:00Z", "customer_id": null})]
    );
}

/// A pipeline reading Parquet landing files into `raw`, applied by AUTO CDC to `items`
/// keyed by `id` and sequenced by `seq`.
fn parquet_items_pipeline() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("pipeline.yaml"), "name: pq\n").expect("write");
    fs::write(
        dir.path().join("flows.sql"),
        "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'parquet');\n\
         CREATE OR REFRESH STREAMING TABLE items;\n\
         CREATE FLOW items_cdc AS AUTO CDC INTO items FROM STREAM(raw) KEYS (id) SEQUENCE BY seq COLUMNS * EXCEPT (seq);\n",
    )
    .expect("write");
    fs::create_dir_all(dir.path().join("landing")).expect("mkdir");
    dir
}

/// A landing file of `parquet_items_pipeline` at `path`.
fn land_items(path: &std::path::Path, ids: Int64Array, names: StringArray, seqs: Int64Array) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("seq", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(ids), Arc::new(names), Arc::new(seqs)],
    )
    .expect("batch");
    let file = fs::File::create(path).expect("create");
    let mut w = ArrowWriter::try_new(file, schema, None).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
}

#[test]
fn parquet_landing_files_are_read_incrementally() {
    let dir = parquet_items_pipeline();
    let landing = dir.path().join("landing");
    let write = |name: &str, ids: Vec<i64>, names: Vec<&str>, seqs: Vec<i64>| {
        land_items(
            &landing.join(name),
            Int64Array::from(ids),
            StringArray::from(names),
            Int64Array::from(seqs),
        );
    };
    write("1.parquet", vec![1, 2], vec!["a", "b"], vec![1, 1]);
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    write("2.parquet", vec![2], vec!["c"], vec![2]);
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("from 1 file(s)"), "{}", stdout(&out));
    let rows = json_rows(p, "SELECT id, name FROM items ORDER BY id");
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"id": 1, "name": "a"}),
            serde_json::json!({"id": 2, "name": "c"}),
        ]
    );
    // A file that is not Parquet is quarantined whole; an empty one is nothing.
    fs::write(landing.join("3.parquet"), "not parquet at all\n").expect("write");
    fs::write(landing.join("4.parquet"), "").expect("write");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("1 malformed record(s) quarantined in `raw__quarantine`"),
        "{}",
        stdout(&out)
    );
    let rows = json_rows(p, "SELECT file, line FROM raw__quarantine");
    assert_eq!(
        rows,
        vec![serde_json::json!({"file": "landing/3.parquet", "line": null})]
    );
}

/// What `script` prints (one JSON value), run by `python` with the Delta table
/// folder `table` as its argument.
pub(crate) fn python_json(
    python: &str,
    script: &str,
    table: &std::path::Path,
) -> serde_json::Value {
    let out = Command::new(python)
        .args(["-c", script, table.to_str().expect("utf-8")])
        .output()
        .expect("python");
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(stdout(&out).trim()).expect("json")
}

/// The Python with the `deltalake` package (delta-rs' Python reader) that the
/// round-trip tests read tables with: `CDCFLOW_PYTHON`, else the venv `.ci/py-delta`
/// makes, else `python3`. Without one those tests fail, saying how to get it: a test
/// that passed without its reader would claim a check that did not happen.
pub(crate) fn python_with_deltalake() -> String {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    find_python_with_deltalake(std::env::var("CDCFLOW_PYTHON").ok(), home.as_deref())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn find_python_with_deltalake(
    named: Option<String>,
    home: Option<&std::path::Path>,
) -> Result<String, String> {
    let venv = home.map(|h| h.join(".cache/cdcflow/pyvenv/bin/python"));
    let candidates: Vec<String> = match named {
        Some(p) => vec![p],
        None => venv
            .filter(|v| v.exists())
            .map(|v| v.to_string_lossy().into_owned())
            .into_iter()
            .chain(["python3".to_string()])
            .collect(),
    };
    candidates
        .iter()
        .find(|python| {
            Command::new(python)
                .args(["-c", "import deltalake, pyarrow"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .cloned()
        .ok_or_else(|| {
            format!(
                "no Python with the `deltalake` and `pyarrow` packages (tried {}): run `bash .ci/py-delta` once (it makes the venv ~/.cache/cdcflow/pyvenv these tests find), or set CDCFLOW_PYTHON to a python that has them",
                candidates.join(", ")
            )
        })
}

#[test]
fn a_missing_delta_reader_is_a_failure_that_says_how_to_install_it() {
    let err = find_python_with_deltalake(Some("/nonexistent/python3".into()), None)
        .expect_err("no such python");
    assert!(err.contains("/nonexistent/python3"), "{err}");
    assert!(err.contains("bash .ci/py-delta"), "{err}");
    // A python that runs but fails the import (here one that fails everything) is no
    // reader either.
    let err = find_python_with_deltalake(Some("false".into()), None).expect_err("false");
    assert!(err.contains("CDCFLOW_PYTHON"), "{err}");
}

#[test]
fn an_independent_delta_reader_sees_the_same_silver_rows() {
    let python = python_with_deltalake();
    let dir = example_copy("orders");
    let p = dir.path().to_str().expect("utf-8");
    assert!(cdcflow(&["run", "-p", p]).status.success());
    // A second batch touching one order of three: merge-on-write deletes its open
    // version by a deletion vector on the first file, which the reader must apply.
    fs::write(
        dir.path().join("landing/orders/0003.json"),
        r#"{"order_id": 102, "customer_id": 4, "status": "paid", "amount": 99.99, "operation": "UPDATE", "commit_ts": "2024-06-03T09:00:00Z", "log_position": 9}
"#,
    )
    .expect("land");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let table = dir.path().join("_storage/tables/silver_orders_history");
    let log = table.join("_delta_log");
    let second_commit = fs::read_to_string(log.join("00000000000000000001.json"))
        .unwrap_or_else(|e| panic!("the second batch's commit: {e}: {}", stdout(&out)));
    assert!(
        second_commit.contains("\"deletionVector\":{"),
        "the second batch deletes by a deletion vector: {second_commit}"
    );
    // `to_pyarrow_table` refuses tables that allow deletion vectors; the package's
    // DataFusion-based QueryBuilder applies them.
    let script = r#"
import json, os, sys
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
t = DeltaTable(sys.argv[1])
rows = pa.table(QueryBuilder().register("t", t).execute("SELECT * FROM t")).to_pylist()
out = sorted(
    [r["order_id"], r["customer_id"], r["status"], str(r["amount"]),
     r["__START_AT"]["log_position"], (r["__END_AT"] or {}).get("log_position")]
    for r in rows)
out.sort(key=lambda r: (r[0], r[4]))
print(json.dumps({"version": t.version(), "rows": out}))
# Skip interpreter teardown: the reader's native threads have been seen to abort it.
sys.stdout.flush()
os._exit(0)
"#;
    let theirs = python_json(&python, script, &table);
    let ours: Vec<serde_json::Value> = json_rows(
        p,
        "SELECT order_id, customer_id, status, CAST(amount AS VARCHAR) AS amount, \
         __START_AT['log_position'] AS s, __END_AT['log_position'] AS e \
         FROM silver_orders_history ORDER BY order_id, s",
    )
    .into_iter()
    .map(|r| {
        serde_json::json!([
            r["order_id"],
            r["customer_id"],
            r["status"],
            r["amount"],
            r["s"],
            r["e"]
        ])
    })
    .collect();
    assert_eq!(theirs["rows"], serde_json::Value::Array(ours));
    assert_eq!(theirs["version"], 1);
}

/// A table too large for dictionaries holds its ascending keys delta encoded (and its
/// state the same); the independent reader decodes them.
#[test]
fn an_independent_delta_reader_reads_delta_encoded_keys() {
    let python = python_with_deltalake();
    let dir = parquet_items_pipeline();
    let rows = 200_000i64;
    land_items(
        &dir.path().join("landing/1.parquet"),
        Int64Array::from_iter_values(0..rows),
        StringArray::from_iter_values((0..rows).map(|i| format!("n{}", i % 7))),
        Int64Array::from_iter_values((0..rows).map(|i| i % 3)),
    );
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let script = r#"
import glob, json, os, sys
import pyarrow.parquet as pq
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
t = pa.table(QueryBuilder().register("t", DeltaTable(sys.argv[1])).execute("SELECT id FROM t"))
ids = t.column("id").to_pylist()
encodings = set()
for f in glob.glob(os.path.join(sys.argv[1], "*.parquet")):
    meta = pq.ParquetFile(f).metadata
    for g in range(meta.num_row_groups):
        encodings.update(meta.row_group(g).column(0).encodings)
print(json.dumps({"rows": len(ids), "sum": sum(ids), "min": min(ids), "max": max(ids),
                  "encodings": sorted(encodings)}))
sys.stdout.flush()
os._exit(0)
"#;
    let out = Command::new(&python)
        .args([
            "-c",
            script,
            dir.path()
                .join("_storage/tables/items")
                .to_str()
                .expect("utf-8"),
        ])
        .output()
        .expect("python");
    assert!(out.status.success(), "{}", stderr(&out));
    let theirs: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(theirs["rows"], rows);
    assert_eq!(theirs["sum"], rows * (rows - 1) / 2);
    assert_eq!(
        (theirs["min"].clone(), theirs["max"].clone()),
        (0.into(), (rows - 1).into())
    );
    assert!(
        theirs["encodings"]
            .as_array()
            .is_some_and(|e| e.contains(&"DELTA_BINARY_PACKED".into())),
        "{theirs}"
    );
}

#[test]
fn the_legacy_twin_gives_the_same_tables_as_the_modern_pipeline() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["orders", "orders_legacy"] {
        let to = dir.path().join(name);
        fs::create_dir_all(&to).expect("mkdir");
        copy_dir(&repo().join("pipelines").join(name), &to);
    }
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    for name in ["orders", "orders_legacy"] {
        let out = cdcflow(&["run", "-p", &path(name)]);
        assert!(
            out.status.success(),
            "{name}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
    for sql in [
        "SELECT order_id, customer_id, status, amount, operation, commit_ts, log_position FROM bronze_order_changes ORDER BY log_position",
        "SELECT order_id, customer_id, status, amount, __START_AT, __END_AT FROM silver_orders_history ORDER BY order_id, __START_AT",
        "SELECT status, orders, total_amount FROM gold_orders_by_status ORDER BY status",
    ] {
        let modern = json_rows(&path("orders"), sql);
        assert!(!modern.is_empty(), "{sql}");
        assert_eq!(modern, json_rows(&path("orders_legacy"), sql), "{sql}");
    }
}

#[test]
fn the_legacy_corpus_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("tests/validate/legacy_corpus"), dir.path());
    let p = dir.path().to_str().expect("utf-8");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // With cloudFiles.inferColumnTypes the JSON types are inferred.
    let rows = json_rows(p, "SELECT arrow_typeof(reading) AS t FROM events_bronze");
    assert_eq!(rows, vec![serde_json::json!({"t": "Float64"})]);
    let rows = json_rows(p, "SELECT device FROM readings_per_device");
    assert_eq!(rows, vec![serde_json::json!({"device": "d1"})]);
    // A PRIVATE table feeds the pipeline's flows but is not published.
    assert!(
        dir.path()
            .join("_storage/private/orders_scratch/_delta_log")
            .is_dir()
    );
    let q = cdcflow(&["query", "-p", p, "SELECT * FROM orders_scratch"]);
    assert!(!q.status.success());
    let tables = stdout(&cdcflow(&["tables", "-p", p]));
    assert!(!tables.contains("orders_scratch"), "{tables}");
    assert!(tables.contains("big_orders"), "{tables}");
    // `delta.*` table properties reach the Delta table.
    let log = fs::read_to_string(
        dir.path()
            .join("_storage/tables/events_bronze/_delta_log/00000000000000000000.json"),
    )
    .expect("first commit");
    assert!(
        log.contains(r#""delta.enableChangeDataFeed":"true""#),
        "{log}"
    );
    // `--conf` overrides a dotted configuration key on `run`.
    let out = cdcflow(&[
        "run",
        "-p",
        p,
        "--conf",
        "corpus.min_amount=100",
        "--full-refresh",
        "big_orders",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        json_rows(p, "SELECT count(*) AS n FROM big_orders"),
        vec![serde_json::json!({"n": 0})]
    );
}

#[test]
fn a_second_run_stops_while_a_live_run_holds_the_lock_and_a_dead_ones_lock_is_free() {
    use cdcflow_runtime::lock::{Holder, RunLock};
    let dir = example_copy("orders");
    let p = dir.path().to_str().expect("utf-8");
    let lock = RunLock::path(&dir.path().join("_storage"));
    fs::create_dir_all(dir.path().join("_storage")).expect("mkdir");
    // A live process holds the OS lock on the file (flock(1) takes the lock a run takes),
    // and the file names it.
    // `-o`: the lock stays with flock(1) itself, not with its child.
    let mut holder = Command::new("flock")
        .arg("-o")
        .arg(&lock)
        .args(["sleep", "30"])
        .spawn()
        .expect("flock(1)");
    let named = Holder {
        pid: holder.id(),
        host: Holder::current().host,
    };
    // Until flock(1) holds it, `flock -n` takes the lock and succeeds.
    while Command::new("flock")
        .args(["-n", lock.to_str().expect("utf-8"), "true"])
        .status()
        .expect("flock -n")
        .success()
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    fs::write(&lock, serde_json::to_string(&named).expect("json")).expect("write");
    let out = cdcflow(&["run", "-p", p]);
    assert!(!out.status.success());
    let msg = format!("pipeline orders is being run by pid {}", holder.id());
    assert!(stderr(&out).contains(&msg), "{}", stderr(&out));
    assert!(
        !dir.path().join("_storage/tables").exists(),
        "nothing may be written"
    );
    // The holder dies: the OS released its lock, and the file naming it is no obstacle.
    holder.kill().expect("kill");
    holder.wait().expect("wait");
    let out = cdcflow(&["run", "-p", p]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        fs::read_to_string(&lock).expect("lock file"),
        "",
        "released"
    );
}

#[test]
fn runs_are_recorded_in_the_event_log_and_status_shows_backlog_lag_and_errors() {
    let dir = example_copy("orders");
    let p = dir.path().to_str().expect("utf-8");
    let status = |p: &str| -> Vec<serde_json::Value> {
        let out = cdcflow(&["status", "-p", p, "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect()
    };
    let before = status(p);
    assert_eq!(before[0]["flow"], "bronze_order_changes");
    assert_eq!(before[0]["backlog_files"], 2);
    assert_eq!(before[0]["last_run"], serde_json::Value::Null);

    assert!(cdcflow(&["run", "-p", p]).status.success());
    let events = json_rows(
        p,
        "SELECT event, flow, batch, rows_read FROM event_log ORDER BY timestamp, event, flow",
    );
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(
        names.iter().filter(|e| **e == "flow_completed").count(),
        3,
        "{events:?}"
    );
    assert!(
        names.contains(&"run_started") && names.contains(&"run_completed"),
        "{events:?}"
    );
    let after = status(p);
    assert_eq!(after[0]["backlog_files"], 0);
    assert_eq!(after[0]["last_event"], "flow_completed");
    assert_eq!(after[0]["rows_read"], 9);
    assert!(
        after[0]["lag_ms"].as_i64().is_some_and(|l| l >= 0),
        "{after:?}"
    );
    // The silver flow's lag runs from the change's commit time (2024) to now.
    assert!(
        after[1]["lag_ms"].as_i64().is_some_and(|l| l > 86_400_000),
        "{after:?}"
    );

    fs::write(
        dir.path().join("landing/orders/0003.json"),
        "{\"order_id\": null, \"customer_id\": 1, \"status\": \"x\", \"amount\": 1, \"operation\": \"INSERT\", \"commit_ts\": \"2024-06-03T00:00:00Z\", \"log_position\": 99}\n",
    )
    .expect("write");
    assert!(!cdcflow(&["run", "-p", p]).status.success());
    let failed = status(p);
    assert_eq!(failed[1]["last_event"], "flow_failed");
    assert!(
        failed[1]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("null key")),
        "{failed:?}"
    );
}

#[test]
fn continuous_mode_picks_up_new_files_and_stops_cleanly_on_sigterm() {
    let dir = example_copy("orders");
    let p = dir.path().to_str().expect("utf-8");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
        .args(["run", "-p", p, "--continuous", "--metrics-addr", &addr])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let visible = |sql: &str, want: serde_json::Value| {
        for _ in 0..100 {
            let out = cdcflow(&["query", "-p", p, sql, "--format", "json"]);
            if out.status.success()
                && stdout(&out)
                    .lines()
                    .next()
                    .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    == Some(want.clone())
            {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        false
    };
    assert!(visible(
        "SELECT count(*) AS n FROM silver_orders_history",
        serde_json::json!({"n": 6})
    ));
    // Written under a temporary name, then renamed, as landing tools do.
    let tmp = dir.path().join("landing/orders/.0003.json.tmp");
    fs::write(
        &tmp,
        "{\"order_id\": 200, \"customer_id\": 9, \"status\": \"placed\", \"amount\": 3, \"operation\": \"INSERT\", \"commit_ts\": \"2024-06-04T10:00:00Z\", \"log_position\": 20}\n",
    )
    .expect("write");
    fs::rename(&tmp, dir.path().join("landing/orders/0003.json")).expect("rename");
    assert!(visible(
        "SELECT count(*) AS n FROM silver_orders_history WHERE order_id = 200",
        serde_json::json!({"n": 1})
    ));
    // Prometheus metrics.
    // The metrics follow the batch's commit (after its event log write): poll.
    let want = r#"cdcflow_batches_total{pipeline="orders",flow="orders_changes"} 2"#;
    let mut metrics = String::new();
    for _ in 0..100 {
        use std::io::{Read, Write};
        metrics.clear();
        if let Ok(mut conn) = std::net::TcpStream::connect(&addr) {
            let _ = conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
            let _ = conn.read_to_string(&mut metrics);
            if metrics.contains(want) {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(metrics.contains(want), "{metrics}");
    assert!(metrics.contains("cdcflow_lag_seconds{"), "{metrics}");
    // A second run is refused while the continuous one holds the lock.
    assert!(!cdcflow(&["run", "-p", p]).status.success());
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(dir.path().join("_storage/_run.lock")).expect("lock file"),
        "",
        "released"
    );
}
