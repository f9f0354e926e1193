//! Compaction rewrites files without changing what a table holds: queries give the same
//! rows, a streaming reader of a compacted table gets no new rows, the flows'
//! transaction ids stay, and later batches apply exactly once. A compaction stopped
//! before its commit leaves the table as it was.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cdcflow_runtime::compact::{self, TableCompaction};
use cdcflow_runtime::delta::{Table, read_parquet};
use cdcflow_runtime::{RunOptions, RunReport, layout, run};

use crate::recovery::{drop_last_commit, pipeline_of, query_tables};
use datafusion::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::CommitBuilder;
use deltalake::protocol::DeltaOperation;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};

const FLOWS: &str = "CREATE OR REFRESH STREAMING TABLE raw AS SELECT * FROM STREAM read_files('landing', format => 'json', schema => 'id BIGINT, v STRING, op STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE copy AS SELECT * FROM STREAM(raw);
CREATE OR REFRESH STREAMING TABLE cur;
CREATE FLOW cur_cdc AS AUTO CDC INTO cur FROM STREAM(raw) KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op);
CREATE OR REFRESH STREAMING TABLE hist;
CREATE FLOW hist_cdc AS AUTO CDC INTO hist FROM STREAM(raw) KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op) STORED AS SCD TYPE 2;
";

const QUERIES: [&str; 4] = [
    "SELECT * FROM raw ORDER BY seq, id",
    "SELECT * FROM copy ORDER BY seq, id",
    "SELECT * FROM cur ORDER BY id",
    "SELECT * FROM hist ORDER BY id, __START_AT",
];

fn pipeline_dir() -> tempfile::TempDir {
    pipeline_of("compaction", FLOWS)
}

/// Landing file `n`: keys `n % 7` (an update, or a delete every fifth file) and a new
/// key `100 + n`.
fn land(dir: &Path, n: i64) {
    let op = if n % 5 == 4 { "D" } else { "U" };
    let text = format!(
        "{{\"id\":{},\"v\":\"v{n}\",\"op\":\"{op}\",\"seq\":{n}}}\n{{\"id\":{},\"v\":\"w{n}\",\"op\":\"I\",\"seq\":{n}}}\n",
        n % 7,
        100 + n
    );
    fs::write(dir.join(format!("landing/{n:03}.json")), text).expect("write");
}

fn pipeline(dir: &Path) -> cdcflow_plan::Pipeline {
    cdcflow_plan::load(dir, &BTreeMap::new())
        .pipeline
        .expect("pipeline")
}

async fn run_once(dir: &Path) -> RunReport {
    let report = run(&pipeline(dir), &RunOptions::default())
        .await
        .expect("run");
    assert!(!report.failed(), "{report:?}");
    report
}

/// Lands files `from..to`, one run each.
async fn runs(dir: &Path, from: i64, to: i64) {
    for n in from..to {
        land(dir, n);
        run_once(dir).await;
    }
}

async fn tables(dir: &Path) -> Vec<String> {
    query_tables(dir, &QUERIES).await
}

/// The tables after files `0..n`, one run each, never compacted on demand.
async fn uninterrupted(n: i64) -> Vec<String> {
    let dir = pipeline_dir();
    runs(dir.path(), 0, n).await;
    tables(dir.path()).await
}

fn storage(dir: &Path) -> PathBuf {
    dir.join("_storage")
}

async fn live_files(table: &Path) -> Vec<PathBuf> {
    Table::open_dir(table)
        .await
        .expect("open")
        .files()
        .expect("files")
        .into_iter()
        .map(|f| f.path)
        .collect()
}

async fn optimize(dir: &Path, tables: &[&str]) -> Vec<TableCompaction> {
    let names: Vec<String> = tables.iter().map(|t| t.to_string()).collect();
    compact::optimize(&pipeline(dir), &names)
        .await
        .expect("optimize")
}

/// Rewrites the table at `dir` as about `pieces` files in a commit that changes no
/// data (the small files merge-on-write batches leave behind); how many.
async fn fragment(dir: &Path, pieces: usize) -> usize {
    let table = Table::open_dir(dir).await.expect("open");
    let t = table.table.as_ref().expect("table");
    let schema = table.arrow_schema().expect("schema");
    let rows = table.read_all(&schema).await.expect("read");
    let per_piece = rows.num_rows().div_ceil(pieces);
    let mut actions: Vec<Action> = Vec::new();
    let mut files = 0;
    for start in (0..rows.num_rows()).step_by(per_piece) {
        let mut writer = RecordBatchWriter::for_table(t).expect("writer");
        let piece = rows.slice(start, per_piece.min(rows.num_rows() - start));
        writer.write(piece).await.expect("write");
        for mut add in writer.flush().await.expect("flush") {
            add.data_change = false;
            actions.push(Action::Add(add));
            files += 1;
        }
    }
    let snapshot = t.snapshot().expect("snapshot");
    actions.extend(
        snapshot
            .log_data()
            .iter()
            .map(|f| Action::Remove(f.remove_action(false))),
    );
    CommitBuilder::default()
        .with_actions(actions)
        .build(
            Some(snapshot),
            t.log_store(),
            DeltaOperation::Optimize {
                predicate: None,
                target_size: 1,
            },
        )
        .await
        .expect("commit");
    files
}

fn ids(file: &Path) -> Vec<i64> {
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
        datafusion::arrow::datatypes::Field::new(
            "id",
            datafusion::arrow::datatypes::DataType::Int64,
            true,
        ),
    ]));
    let batches: Vec<RecordBatch> = read_parquet(file, &schema).expect("read");
    let all = concat_batches(&schema, &batches).expect("concat");
    let column = all
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("ids");
    (0..column.len()).map(|i| column.value(i)).collect()
}

#[tokio::test]
async fn a_compacted_streaming_table_gives_its_downstream_reader_no_new_rows() {
    let want = uninterrupted(4).await;
    let dir = pipeline_dir();
    runs(dir.path(), 0, 3).await;
    let raw = storage(dir.path()).join("tables/raw");
    assert_eq!(live_files(&raw).await.len(), 3, "one file per append");
    let before = tables(dir.path()).await;
    let table = Table::open_dir(&raw).await.expect("open");
    let (version, schema) = (table.version(), table.arrow_schema().expect("schema"));

    let done = optimize(dir.path(), &["raw"]).await;
    assert_eq!(done.len(), 1, "{done:?}");
    let (removed, added, rows) = (done[0].files_removed, done[0].files_added, done[0].rows);
    assert_eq!((removed, added, rows), (3, 1, 6), "{done:?}");
    assert_eq!(live_files(&raw).await.len(), 1);
    assert_eq!(tables(dir.path()).await, before);

    // What a downstream streaming flow reads after the version it read last.
    let compacted = Table::open_dir(&raw).await.expect("open");
    let (appended, now) = compacted
        .appended_since(version, &schema)
        .await
        .expect("appended since");
    assert_eq!(appended.len(), 0, "a compaction appends no rows");
    assert_eq!(now, version.map(|v| v + 1));

    // The downstream flow runs over the compaction, then over a new append.
    run_once(dir.path()).await;
    assert_eq!(tables(dir.path()).await, before);
    runs(dir.path(), 3, 4).await;
    assert_eq!(tables(dir.path()).await, want);
}

#[tokio::test]
async fn enough_small_appends_are_compacted_after_the_run_and_reported() {
    let dir = pipeline_dir();
    runs(dir.path(), 0, 15).await;
    let raw = storage(dir.path()).join("tables/raw");
    assert_eq!(live_files(&raw).await.len(), 15, "fifteen are not enough");
    land(dir.path(), 15);
    let report = run_once(dir.path()).await;
    let raw_done = report
        .compactions
        .iter()
        .find(|c| c.table == "raw")
        .unwrap_or_else(|| panic!("raw was not compacted: {report:?}"));
    assert_eq!(raw_done.files_removed, 16);
    assert_eq!(raw_done.rows, 32);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.starts_with("compacted `raw`")),
        "{:?}",
        report.notes
    );
    assert!(report.compactions.iter().any(|c| c.table == "copy"));
    assert_eq!(live_files(&raw).await.len(), 1);
    runs(dir.path(), 16, 17).await;
    assert_eq!(tables(dir.path()).await, uninterrupted(17).await);
}

#[tokio::test]
async fn an_auto_cdc_target_and_its_state_compact_into_key_sorted_files_with_the_same_rows() {
    let want = uninterrupted(8).await;
    let dir = pipeline_dir();
    runs(dir.path(), 0, 6).await;
    let store = storage(dir.path());
    let mut pieces = Vec::new();
    for table in ["tables/cur", "state/cur", "tables/hist", "state/hist"] {
        pieces.push(fragment(&store.join(table), 5).await);
    }
    assert!(pieces.iter().all(|&p| p > 2), "{pieces:?}");
    let before = tables(dir.path()).await;
    let app = layout::app_id("cur_cdc");
    let txn = Table::open_dir(&store.join("state/cur"))
        .await
        .expect("open")
        .txn_version(&app)
        .await
        .expect("txn");

    let done = optimize(dir.path(), &["cur", "hist"]).await;
    let shown: Vec<(String, bool, usize, usize)> = done
        .iter()
        .map(|c| (c.table.clone(), c.state, c.files_removed, c.files_added))
        .collect();
    assert_eq!(
        shown,
        [
            ("cur".to_string(), false, pieces[0], 1),
            ("cur".to_string(), true, pieces[1], 1),
            ("hist".to_string(), false, pieces[2], 1),
            ("hist".to_string(), true, pieces[3], 1),
        ]
    );
    assert_eq!(tables(dir.path()).await, before);
    for table in ["tables/cur", "state/cur", "tables/hist", "state/hist"] {
        let files = live_files(&store.join(table)).await;
        assert_eq!(files.len(), 1, "{table}");
        let ids = ids(&files[0]);
        assert!(ids.is_sorted(), "{table}: {ids:?}");
    }
    let after = Table::open_dir(&store.join("state/cur"))
        .await
        .expect("open");
    assert_eq!(after.txn_version(&app).await.expect("txn"), txn);

    // Later batches apply exactly once.
    runs(dir.path(), 6, 8).await;
    assert_eq!(tables(dir.path()).await, want);
}

#[tokio::test]
async fn a_compaction_stopped_before_its_commit_leaves_the_tables_as_they_were() {
    let want = uninterrupted(8).await;
    let dir = pipeline_dir();
    runs(dir.path(), 0, 6).await;
    let store = storage(dir.path());
    for table in ["tables/cur", "state/cur"] {
        assert!(fragment(&store.join(table), 4).await > 1);
    }
    let before = tables(dir.path()).await;
    let done = optimize(dir.path(), &["raw", "cur"]).await;
    assert!(done.iter().all(TableCompaction::compacted), "{done:?}");
    // Every compaction wrote its files and died before its commit.
    for table in ["tables/raw", "tables/cur", "state/cur"] {
        let path = store.join(table);
        let written = live_files(&path).await;
        drop_last_commit(&path);
        let live = live_files(&path).await;
        assert!(live.len() > 1, "{table}: the small files are live again");
        for file in &written {
            assert!(
                file.is_file() && !live.contains(file),
                "{table}: {} stays on disk, unreferenced",
                file.display()
            );
        }
    }
    assert_eq!(tables(dir.path()).await, before);
    // The next batches go on as if no compaction had started, and a compaction again
    // rewrites the files.
    runs(dir.path(), 6, 7).await;
    assert!(
        optimize(dir.path(), &["raw"]).await[0].compacted(),
        "the files are still small"
    );
    runs(dir.path(), 7, 8).await;
    assert_eq!(tables(dir.path()).await, want);
}
