//! A batch is committed once, even when two writers commit it: the commit itself refuses
//! a batch its table has already, and a commit built on a table version that another
//! commit has passed does not land.

use std::sync::Arc;

use cdcflow_runtime::delta::{Commit, Mode, Table, stage, write};
use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};

use crate::delta_writes::{batch, schema, values};

fn commit(batch: i64) -> Commit {
    Commit {
        name: "bronze".into(),
        txns: vec![("cdcflow:bronze".into(), batch)],
        ..Commit::default()
    }
}

fn refused_twice(result: Result<(), cdcflow_runtime::RunError>) {
    let err = result.expect_err("a second commit of a batch");
    let text = err.to_string();
    assert!(
        text.contains("batch 0 of flow `bronze` is in the table already")
            || text.contains("batch 1 of flow `bronze` is in the table already"),
        "{text}"
    );
    assert!(err.help().is_some_and(|h| h.contains("two cdcflow runs")));
}

#[tokio::test]
async fn a_batch_its_table_has_already_is_refused_by_the_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (schema, batch_0) = (schema(), commit(0));
    let table = crate::at(dir.path());
    let write_0 = || write(&table, &schema, vec![batch(1..4)], Mode::Append, &batch_0);
    write_0().await.expect("batch 0");
    // A second run that read the table before the first committed: it stages on the
    // table as it is now, which has batch 0.
    refused_twice(write_0().await);
    assert_eq!(values(dir.path()).await, vec![1, 2, 3]);
    // Through deltalake's write operation too (a write adding a column).
    let wider = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("y", DataType::Int64, true),
    ]));
    let rows = RecordBatch::try_new(
        Arc::clone(&wider),
        vec![
            Arc::new(Int64Array::from_iter_values(1..4)),
            Arc::new(Int64Array::from_iter_values(1..4)),
        ],
    )
    .expect("batch");
    refused_twice(
        write(
            &crate::at(dir.path()),
            &wider,
            vec![rows],
            Mode::Append,
            &batch_0,
        )
        .await,
    );
    assert_eq!(values(dir.path()).await, vec![1, 2, 3]);
    assert_eq!(
        Table::open_dir(dir.path()).await.expect("open").version(),
        Some(0)
    );
}

#[tokio::test]
async fn two_commits_of_one_batch_from_one_snapshot_land_once() {
    // A new table: both writers stage before either creates it.
    let dir = tempfile::tempdir().expect("tempdir");
    let first = stage(
        &crate::at(dir.path()),
        &schema(),
        vec![batch(1..4)],
        &commit(0),
    )
    .await
    .expect("stage");
    let second = stage(
        &crate::at(dir.path()),
        &schema(),
        vec![batch(1..4)],
        &commit(0),
    )
    .await
    .expect("stage");
    first.commit(Mode::Append, &commit(0)).await.expect("first");
    refused_twice(second.commit(Mode::Append, &commit(0)).await);
    assert_eq!(values(dir.path()).await, vec![1, 2, 3]);

    // An existing table: both stage batch 1 on version 0.
    let first = stage(
        &crate::at(dir.path()),
        &schema(),
        vec![batch(10..12)],
        &commit(1),
    )
    .await
    .expect("stage");
    let second = stage(
        &crate::at(dir.path()),
        &schema(),
        vec![batch(10..12)],
        &commit(1),
    )
    .await
    .expect("stage");
    first.commit(Mode::Append, &commit(1)).await.expect("first");
    refused_twice(second.commit(Mode::Append, &commit(1)).await);
    assert_eq!(values(dir.path()).await, vec![1, 2, 3, 10, 11]);
    let table = Table::open_dir(dir.path()).await.expect("open");
    assert_eq!(table.version(), Some(1), "one commit per batch");
    assert_eq!(
        table.txn_version("cdcflow:bronze").await.expect("txn"),
        Some(1)
    );
}
