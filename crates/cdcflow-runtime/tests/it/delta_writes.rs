//! Writes to Delta tables: files encoded on every core, committed once, and a table with
//! rules of its own (a CHECK constraint) written through deltalake's write operation,
//! which enforces them.

use std::sync::Arc;

use cdcflow_runtime::delta::{Commit, Mode, Table, write};
use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};

pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]))
}

pub(crate) fn batch(values: impl IntoIterator<Item = i64>) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from_iter_values(values))],
    )
    .expect("batch")
}

pub(crate) async fn values(dir: &std::path::Path) -> Vec<i64> {
    let table = Table::open_dir(dir).await.expect("open");
    let mut out: Vec<i64> = table
        .read_batches(&schema())
        .await
        .expect("read")
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    out.sort_unstable();
    out
}

/// A new table `t` holding `values`, and the commit that wrote it.
async fn table_with(values: impl IntoIterator<Item = i64>) -> (tempfile::TempDir, Commit) {
    let dir = tempfile::tempdir().expect("tempdir");
    let commit = Commit {
        name: "t".into(),
        ..Commit::default()
    };
    write(
        &crate::at(dir.path()),
        &schema(),
        vec![batch(values)],
        Mode::Overwrite,
        &commit,
    )
    .await
    .expect("create");
    (dir, commit)
}

#[tokio::test]
async fn a_large_overwrite_is_one_commit_of_several_files_holding_every_row() {
    let (dir, commit) = table_with(0..10).await;
    let rows = 600_000;
    let batches = (0..6)
        .map(|i| batch(i * 100_000..(i + 1) * 100_000))
        .collect();
    write(
        &crate::at(dir.path()),
        &schema(),
        batches,
        Mode::Overwrite,
        &commit,
    )
    .await
    .expect("overwrite");
    let table = Table::open_dir(dir.path()).await.expect("open");
    assert_eq!(table.version(), Some(1));
    let files = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "parquet"))
        })
        .count();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The first version's file, then one per core (600,000 rows are enough for two).
    assert_eq!(files, 1 + cores.min(2), "{files} data files");
    assert_eq!(values(dir.path()).await, (0..rows).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_check_constraint_on_the_table_is_enforced() {
    let (dir, commit) = table_with([1]).await;
    let url =
        url::Url::from_directory_path(std::path::absolute(dir.path()).expect("path")).expect("url");
    deltalake::DeltaTable::try_from_url(url)
        .await
        .expect("table")
        .add_constraint()
        .with_constraint("positive", "x > 0")
        .await
        .expect("constraint");
    let refused = write(
        &crate::at(dir.path()),
        &schema(),
        vec![batch([-1])],
        Mode::Append,
        &commit,
    )
    .await;
    assert!(
        refused.is_err(),
        "a row breaking the CHECK constraint was written"
    );
    write(
        &crate::at(dir.path()),
        &schema(),
        vec![batch([2])],
        Mode::Append,
        &commit,
    )
    .await
    .expect("append");
    assert_eq!(values(dir.path()).await, vec![1, 2]);
}
